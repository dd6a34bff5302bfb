/*
 * tests/lineage/test_infer.c - lineage inference (lineage/infer.c): the
 * rule table is complete, and on a generated mlp pair stripped to its
 * boundary the candidates are exactly the annotations the generator wrote
 * (same single tensor, slice, part and shifts), never on an initial value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../graph/graph.h"
#include "../../lineage/lineage.h"
#include "../../ops/ops.h"
#include "../../plans/gen.h"

static void test_rules_complete(void **st) {
  (void)st;
  for (int op = 0; op < VD_OP__COUNT; op++) {
    const vd_lin_prop_rule *r = vd_lin_prop_rule_of(op);
    if (!r->set) fail_msg("operator %s has no propagation rule", vd_op_name((vd_op_id)op));
    assert_true(r->kind < VD_PROP__COUNT);
    /* a collective is moved by a collective rule or COPY, never MAP (no single twin) */
    if (vd_op_has((vd_op_id)op, VD_OPF_COLLECTIVE)) assert_int_not_equal(r->kind, VD_PROP_MAP);
  }
  assert_int_equal(vd_lin_prop_rule_of(VD_OP_ALL_REDUCE)->kind, VD_PROP_ALL_REDUCE);
  assert_int_equal(vd_lin_prop_rule_of(VD_OP_LINEAR)->lin, VD_PLIN_MULTI);
  assert_int_equal(vd_lin_prop_rule_of(VD_OP_SILU)->lin, VD_PLIN_NONE);
}

/* Infers on config c stripped; every candidate agrees with the generator's
 * annotation where it wrote one.  Each name in want (NULL-terminated) must
 * get a candidate on every rank that holds it. */
static void infer_check(const vd_gen_config *cfg, const char *const *want) {
  vd_gen_config c = *cfg;
  int64_t dp = c.dp, nm = c.nm;
  vd_plan_t s, p, full;
  vd_diag d;
  vd_diag_clear(&d);
  vd_plan_t s2;
  assert_int_equal(vd_gen_build(&c, &s2, &full, &d), VD_OK);
  vd_plan_free(&s2);
  assert_int_equal(vd_gen_build(&c, &s, &p, &d), VD_OK);
  size_t kept = 0, stripped = 0;
  assert_int_equal(vd_plan_strip(&p, &kept, &stripped, &d), VD_OK);
  assert_true(stripped > 0);
  vd_graph_t gs, gp;
  vd_graph_opts o = {.expand_replicas = 0};
  assert_int_equal(vd_graph_build(&s, &o, &gs, &d), VD_OK);
  assert_int_equal(vd_graph_build(&p, &o, &gp, &d), VD_OK);
  uint8_t *inf = NULL;
  vd_lin_infer_stats is;
  assert_int_equal(vd_lin_infer(&gs, &gp, &p, &inf, &is, &d), VD_OK);
  assert_int_equal(is.n_annotated, kept);
  assert_true(is.n_inferred > 0);
  size_t checked = 0;
  for (size_t t = 0; t < p.n_tensors; t++) {
    if (!inf[t]) continue;
    const vd_tensor_t *a = &p.tensors[t], *b = &full.tensors[t];
    /* a candidate is never put on a tensor read before it is written */
    assert_true(gp.values[vd_graph_first(&gp, (uint32_t)t, 0, a->scope == VD_SCOPE_PER_MB ? 0 : -1)].producer >= 0);
    if (!b->has_lin) continue;
    /* where the generator annotated the tensor, the candidate says the same */
    assert_int_equal(a->lin.full, b->lin.full);
    assert_memory_equal(a->lin.lo, b->lin.lo, sizeof(a->lin.lo[0]) * (size_t)a->ndim);
    assert_memory_equal(a->lin.hi, b->lin.hi, sizeof(a->lin.hi[0]) * (size_t)a->ndim);
    assert_int_equal(a->lin.part_n, b->lin.part_n);
    assert_int_equal(a->lin.part_k, b->lin.part_k);
    if (dp > 1) assert_int_equal(a->lin.dp_part, b->lin.dp_part);
    if (a->scope == VD_SCOPE_PER_MB && nm > 1) assert_int_equal(a->lin.mb_part, b->lin.mb_part);
    if (dp > 1) assert_memory_equal(a->lin.dp_shift, b->lin.dp_shift, sizeof(a->lin.dp_shift[0]) * (size_t)a->ndim);
    if (a->scope == VD_SCOPE_PER_MB && nm > 1)
      assert_memory_equal(a->lin.mb_shift, b->lin.mb_shift, sizeof(a->lin.mb_shift[0]) * (size_t)a->ndim);
    checked++;
  }
  assert_true(checked > 0);
  for (size_t w = 0; want && want[w]; w++) {
    size_t n = 0;
    for (size_t t = 0; t < p.n_tensors; t++) {
      if (strcmp(vd_plan_s(&p, p.tensors[t].name), want[w])) continue;
      n++;
      if (!inf[t]) fail_msg("no candidate for '%s' (tensor %zu)", want[w], t);
    }
    if (!n) fail_msg("no tensor '%s'", want[w]);
  }
  vd_free(inf);
  vd_graph_free(&gs);
  vd_graph_free(&gp);
  vd_plan_free(&s);
  vd_plan_free(&p);
  vd_plan_free(&full);
}

static void infer_mlp(int64_t dp, int64_t tp, int64_t nm) {
  vd_gen_config c;
  vd_gen_config_default(&c);
  c.model = VD_GEN_MLP;
  c.layers = 1;
  c.dp = dp, c.tp = tp, c.nm = nm;
  infer_check(&c, NULL);
}

static void test_infer_mlp(void **st) {
  (void)st;
  infer_mlp(2, 2, 2);
  infer_mlp(1, 2, 1);
  infer_mlp(2, 1, 2);
}

static void small_llama(vd_gen_config *c) {
  vd_gen_config_default(c);
  c->model = VD_GEN_LLAMA3;
  c->layers = 1, c->hidden = 32, c->heads = 4, c->seq = 8, c->batch = 4;
}

/* cp: the loss flattens [b, s] with s sliced (a split dim), picks the
 * labels' logits and views back; ce.target is a box again. */
static void test_infer_cp_split_view(void **st) {
  (void)st;
  vd_gen_config c;
  small_llama(&c);
  c.cp = 2;
  const char *want[] = {"ce.target", "ce.token_loss", "lm_head@ce.logits.flat.grad", NULL};
  infer_check(&c, want);
  /* with tp the vocab is sliced too: pick_backward takes it from the
   * forward pick's logits, whose other dim is the split one */
  c.tp = 2;
  infer_check(&c, want);
}

/* loss = sum(mask * tok) * (1 / count): mul_backward's gradient of the
 * partial numerator reads only the replicated other factor (OTHER). */
static void test_infer_loss_mask(void **st) {
  (void)st;
  vd_gen_config c;
  small_llama(&c);
  c.dp = 2, c.tp = 2, c.pp = 2, c.nm = 2, c.layers = 2;
  c.loss_mask = 1;
  const char *want[] = {"ce.masked.grad", "ce.token_loss.grad", NULL};
  infer_check(&c, want);
  assert_int_equal(vd_lin_prop_rule_of(VD_OP_MUL_BACKWARD)->lin, VD_PLIN_OTHER);
}

/* grad clip: the squared norm of a sharded gradient is a sum of parts. */
static void test_infer_grad_clip(void **st) {
  (void)st;
  vd_gen_config c;
  small_llama(&c);
  c.dp = 2, c.tp = 2;
  c.grad_clip = 1.0;
  c.loss = VD_GEN_LOSS_SUM;
  const char *want[] = {"layers.0.attn.q.weight.grad.sumsq", NULL};
  infer_check(&c, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules_complete),
      cmocka_unit_test(test_infer_mlp),
      cmocka_unit_test(test_infer_cp_split_view),
      cmocka_unit_test(test_infer_loss_mask),
      cmocka_unit_test(test_infer_grad_clip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
