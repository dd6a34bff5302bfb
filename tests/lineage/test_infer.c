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

static void infer_mlp(int dp, int tp, int nm) {
  vd_gen_config c;
  vd_gen_config_default(&c);
  c.model = VD_GEN_MLP;
  c.layers = 1;
  c.dp = dp, c.tp = tp, c.nm = nm;
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
  vd_free(inf);
  vd_graph_free(&gs);
  vd_graph_free(&gp);
  vd_plan_free(&s);
  vd_plan_free(&p);
  vd_plan_free(&full);
}

static void test_infer_mlp(void **st) {
  (void)st;
  infer_mlp(2, 2, 2);
  infer_mlp(1, 2, 1);
  infer_mlp(2, 1, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules_complete),
      cmocka_unit_test(test_infer_mlp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
