/*
 * tests/gen/test_gen.c - the plan generators (gen/) on a matrix of
 * configurations built in memory: both plans validate, world/rank counts
 * and lineage annotations are what the parallel scheme implies (weights tile
 * their single tensor, per-microbatch gradients are parts of it, the loss is
 * annotated), both plans agree under the numeric executor (relative error
 * below 1e-9 on every annotated tensor), and bad configurations are refused
 * naming the option.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../../gen/gen.h"
#include "../../oracle/exec.h"
#include "../support/cases.h"

static int64_t single_id(const vd_plan_t *s, const char *name) {
  for (size_t i = 0; i < s->n_tensors; i++)
    if (!strcmp(vd_plan_s(s, s->tensors[i].name), name)) return s->tensors[i].id;
  return -1;
}

/* Sum of distinct slice volumes of parallel tensors annotated with `full`
 * and the given scope; *pieces counts them, *part_n gets their part count. */
static int64_t covered(const vd_plan_t *p, int64_t full, vd_scope scope, int *pieces, int64_t *part_n) {
  int64_t vol = 0;
  *pieces = 0;
  for (size_t i = 0; i < p->n_tensors; i++) {
    const vd_tensor_t *t = &p->tensors[i];
    if (!t->has_lin || t->lin.full != full || t->scope != scope) continue;
    (*pieces)++;
    *part_n = t->lin.part_n;
    int dup = 0;
    for (size_t j = 0; j < i && !dup; j++) {
      const vd_tensor_t *u = &p->tensors[j];
      if (!u->has_lin || u->lin.full != full || u->scope != scope || u->lin.part_k != t->lin.part_k) continue;
      dup = !memcmp(u->lin.lo, t->lin.lo, sizeof(t->lin.lo)) && !memcmp(u->lin.hi, t->lin.hi, sizeof(t->lin.hi));
    }
    if (dup || t->lin.part_k != 0) continue;
    int64_t v = 1;
    for (int d = 0; d < t->ndim; d++) v *= t->lin.hi[d] - t->lin.lo[d];
    vol += v;
  }
  return vol;
}

/* Asserts rc == VD_OK, printing what and d's message when it is not. */
static void ok_or_say(vd_rc rc, const vd_diag *d, const char *what) {
  char line[1024];
  vd_diag_format(d, line, sizeof(line));
  if (rc) fprintf(stderr, "%s: %s\n", what, line);
  assert_int_equal(rc, VD_OK);
}

static void build_ok(const vd_gen_config *c, vd_plan_t *s, vd_plan_t *p) {
  vd_diag d;
  vd_diag_clear(&d);
  ok_or_say(vd_gen_build(c, s, p, &d), &d, "build failed");
  vd_diag_clear(&d);
  ok_or_say(vd_plan_validate(s, "single", &d), &d, "single");
  vd_diag_clear(&d);
  ok_or_say(vd_plan_validate(p, "parallel", &d), &d, "parallel");
  /* the real check: both plans compute the same values */
  vd_exec_opts o;
  memset(&o, 0, sizeof(o));
  o.seed = 7;
  o.tol = 1e-9;
  vd_exec_result r;
  memset(&r, 0, sizeof(r));
  vd_diag_clear(&d);
  ok_or_say(vd_exec_compare(s, p, &o, &r, &d), &d, "exec");
  if (r.status != VD_EXEC_AGREE)
    fprintf(stderr, "exec disagrees: %s (tensor '%s')\n", vd_exec_status_names[r.status], r.first.name);
  assert_int_equal(r.status, VD_EXEC_AGREE);
  assert_true(r.n_tensors > 0);
  assert_true(r.max_rel_err < 1e-9);
}

static void check_common(const vd_gen_config *c, const vd_plan_t *s, const vd_plan_t *p, const char *wname,
                         int64_t w_split) {
  assert_int_equal(p->world.stored_ranks, c->tp * c->pp * c->cp * c->ep);
  assert_int_equal(p->world.replicas, c->dp);
  assert_int_equal(s->world.stored_ranks, 1);
  /* a weight tiles its single tensor, split w_split ways */
  int64_t wid = single_id(s, wname);
  assert_true(wid >= 0);
  const vd_tensor_t *sw = &s->tensors[0];
  for (size_t i = 0; i < s->n_tensors; i++)
    if (s->tensors[i].id == wid) sw = &s->tensors[i];
  int pieces;
  int64_t pn = 0;
  int64_t vol = covered(p, wid, VD_SCOPE_PERSISTENT, &pieces, &pn);
  if (c->zero && c->dp > 1)
    assert_true(vol > vd_tensor_numel(sw)); /* full weights plus the ZeRO master shards */
  else
    assert_int_equal(vol, vd_tensor_numel(sw));
  assert_true(pieces >= w_split);
  /* its gradient: per-microbatch parts when nm > 1, replica parts after reduction */
  char gname[256];
  snprintf(gname, sizeof(gname), "%s.grad", wname);
  int64_t gid = single_id(s, gname);
  assert_true(gid >= 0);
  if (c->nm > 1) {
    covered(p, gid, VD_SCOPE_PER_MB, &pieces, &pn);
    assert_true(pieces > 0);
    assert_int_equal(pn % (c->dp * c->nm), 0);
  }
  /* the loss is annotated, as a part over replicas and microbatches */
  int64_t lid = single_id(s, "loss");
  assert_true(lid >= 0);
  covered(p, lid, VD_SCOPE_PER_MB, &pieces, &pn);
  assert_true(pieces > 0);
  assert_int_equal(pn % (c->dp * c->nm), 0);
  /* same node names in both plans */
  assert_true(p->n_nodes >= s->n_nodes);
}

/* A model and its parallel degrees; a degree left 0 keeps the default (1). */
typedef struct {
  vd_gen_model model;
  int dp, tp, pp, nm, cp, ep, sp, zero;
} degrees;

/* *c = the generator's defaults with g's model and degrees. */
static void config_of(vd_gen_config *c, degrees g) {
  vd_gen_config_default(c);
  c->model = g.model;
  int64_t *to[] = {&c->dp, &c->tp, &c->pp, &c->nm, &c->cp, &c->ep};
  const int from[] = {g.dp, g.tp, g.pp, g.nm, g.cp, g.ep};
  for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++)
    if (from[i]) *to[i] = from[i];
  c->sp = g.sp;
  c->zero = g.zero;
}

/* build_ok on c, then check_common with weight wname split w_split ways;
 * the caller frees s and p. */
static void build_checked(const vd_gen_config *c, const char *wname, int64_t w_split, vd_plan_t *s, vd_plan_t *p) {
  build_ok(c, s, p);
  check_common(c, s, p, wname, w_split);
}

static void matrix(vd_gen_model m) {
  for (int dp = 1; dp <= 2; dp++)
    for (int tp = 1; tp <= 2; tp++)
      for (int pp = 1; pp <= 2; pp++)
        for (int nm = 1; nm <= 2; nm++) {
          tc_begin("%s dp%d tp%d pp%d nm%d", vd_gen_model_name(m), dp, tp, pp, nm);
          vd_gen_config c;
          config_of(&c, (degrees){m, .dp = dp, .tp = tp, .pp = pp, .nm = nm});
          vd_plan_t s, p;
          build_checked(&c, m == VD_GEN_MLP ? "layers.1.fc1.weight" : "layers.1.attn.q.weight", tp, &s, &p);
          vd_plan_free(&s);
          vd_plan_free(&p);
        }
  tc_end();
}

static void test_mlp_matrix(void **st) { (void)st; matrix(VD_GEN_MLP); }
static void test_llama3_matrix(void **st) { (void)st; matrix(VD_GEN_LLAMA3); }
static void test_moe_matrix(void **st) { (void)st; matrix(VD_GEN_MOE); }

/* One configuration beyond the small matrix: degrees, Adam or SGD, a
 * gradient-clipping norm (0: none) and a weight whose tiling is checked. */
typedef struct {
  degrees g;
  int adam;
  double clip;
  const char *w;
} variant;

static const variant variants[] = {
    /* larger degrees */
    {{VD_GEN_LLAMA3, .tp = 4}, 0, 0, "layers.0.attn.k.weight"},
    {{VD_GEN_LLAMA3, .pp = 4, .nm = 4}, 0, 0, "layers.3.ffn.up.weight"},
    {{VD_GEN_LLAMA3, .dp = 4, .nm = 2}, 0, 0, "embed.weight"},
    {{VD_GEN_MLP, .dp = 4, .tp = 4, .pp = 4, .nm = 2}, 0, 0, "layers.2.fc2.weight"},
    /* sequence and context parallelism, ZeRO-1, Adam, clipping */
    {{VD_GEN_LLAMA3, .dp = 2, .tp = 2, .sp = 1}, 0, 0, "layers.0.attn_norm.weight"},
    {{VD_GEN_LLAMA3, .dp = 2, .tp = 2, .pp = 2, .nm = 2, .sp = 1}, 0, 1.0, "layers.1.attn.o.weight"},
    {{VD_GEN_LLAMA3, .cp = 2}, 0, 0, "layers.0.attn.v.weight"},
    {{VD_GEN_LLAMA3, .dp = 2, .tp = 2, .pp = 2, .nm = 2, .cp = 2, .sp = 1}, 0, 0.5, "lm_head.weight"},
    {{VD_GEN_LLAMA3, .dp = 2, .tp = 2, .nm = 2, .zero = 1}, 1, 1.0, "layers.0.ffn.down.weight"},
    {{VD_GEN_LLAMA3, .dp = 2, .tp = 2, .pp = 2, .cp = 2, .sp = 1, .zero = 1}, 1, 1.0, "layers.1.ffn.gate.weight"},
    {{VD_GEN_MLP, .dp = 2, .tp = 2, .pp = 2, .nm = 2, .zero = 1}, 1, 1.0, "layers.0.fc1.weight"},
    /* expert parallelism */
    {{VD_GEN_MOE, .ep = 2}, 0, 0, "layers.0.moe.router.weight"},
    {{VD_GEN_MOE, .dp = 2, .tp = 2, .pp = 2, .nm = 2, .ep = 2, .sp = 1}, 1, 1.0, "layers.1.moe.experts.w1"},
    {{VD_GEN_MOE, .dp = 2, .nm = 2, .ep = 2, .zero = 1}, 1, 0, "layers.0.moe.shared.up.weight"},
};

static void run_variant(const variant *v) {
  vd_gen_config c;
  config_of(&c, v->g);
  c.optimizer = v->adam ? VD_GEN_ADAM : VD_GEN_SGD;
  c.grad_clip = v->clip;
  c.layers = c.pp > 2 ? c.pp : 2;
  c.batch = 16;
  c.kv_heads = c.tp > 2 ? c.tp : 2;
  vd_plan_t s, p;
  build_checked(&c, v->w, c.tp, &s, &p);
  if (v->adam) {
    char nm_[256];
    snprintf(nm_, sizeof(nm_), "%s.exp_avg", v->w);
    assert_true(single_id(&s, nm_) >= 0);
  }
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void test_variants(void **st) {
  (void)st;
  for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
    tc_begin("variants[%zu] (%s)", i, variants[i].w);
    run_variant(&variants[i]);
  }
  tc_end();
}

/* Counts parallel nodes with op (and, when name is non-NULL, source name);
 * *span gets the last one's span_replicas, *cross whether its group has
 * ranks of two pipeline stages (rank layout tp,cp,ep,pp). */
static int count_nodes(const vd_plan_t *p, const char *op, const char *name, int *span, int *cross) {
  int n = 0;
  int64_t rps = (int64_t)p->world.tp * p->world.cp * p->world.ep;
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *nd = &p->nodes[i];
    if (strcmp(vd_node_op(p, nd), op) || (name && strcmp(vd_plan_s(p, nd->name), name))) continue;
    n++;
    if (span) *span = nd->span_replicas;
    if (cross) {
      const int64_t *g = vd_node_group(p, nd);
      *cross = 0;
      for (uint32_t k = 1; k < nd->n_group; k++)
        if (g[k] / rps != g[0] / rps) *cross = 1;
    }
  }
  return n;
}

static void tied(degrees g, double clip) {
  vd_gen_config c;
  config_of(&c, g);
  tc_begin("tied dp%d tp%d pp%d nm%d cp%d zero%d", (int)c.dp, (int)c.tp, (int)c.pp, (int)c.nm, (int)c.cp, c.zero);
  c.tie_embeddings = 1;
  c.grad_clip = clip;
  c.optimizer = g.zero ? VD_GEN_ADAM : VD_GEN_SGD;
  int64_t tp = c.tp, pp = c.pp, cp = c.cp;
  vd_plan_t s, p;
  build_checked(&c, "embed.weight", tp, &s, &p);
  /* one weight in the single plan: no LM head weight of its own */
  assert_true(single_id(&s, "lm_head.weight") < 0);
  assert_int_equal(count_nodes(&s, "multiref_backward", "embed.weight", NULL, NULL), 1);
  /* pp > 1: one copy per end stage, gradients summed across the stages */
  int span = -1, cross = 0;
  int n = count_nodes(&p, "all_reduce", "embed.weight.grad.tied", &span, &cross);
  if (pp > 1) {
    assert_int_equal(n, 2 * tp * cp);
    assert_int_equal(cross, 1);
    assert_int_equal(span, 0);
  } else {
    assert_int_equal(n, 0);
  }
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void test_tie_embeddings(void **st) {
  (void)st;
  tied((degrees){VD_GEN_LLAMA3, .dp = 2, .tp = 2, .nm = 2}, 0);
  tied((degrees){VD_GEN_LLAMA3, .dp = 2, .tp = 2, .pp = 2, .nm = 2}, 0);
  tied((degrees){VD_GEN_LLAMA3, .tp = 2, .pp = 2, .cp = 2}, 0);
  tied((degrees){VD_GEN_LLAMA3, .dp = 2, .pp = 2, .nm = 2, .zero = 1}, 1.0);
  tc_end();
}

static void masked(degrees g) {
  vd_gen_config c;
  config_of(&c, g);
  tc_begin("masked %s dp%d tp%d pp%d nm%d cp%d ep%d", vd_gen_model_name(c.model), (int)c.dp, (int)c.tp, (int)c.pp,
           (int)c.nm, (int)c.cp, (int)c.ep);
  c.loss_mask = 1;
  int64_t dp = c.dp, tp = c.tp, cp = c.cp, ep = c.ep;
  vd_plan_t s, p;
  build_checked(&c, "layers.0.attn.q.weight", tp, &s, &p);
  assert_true(single_id(&s, "loss_mask") >= 0);
  assert_true(single_id(&s, "loss.count") >= 0);
  /* the count is all-reduced once over the ranks holding other tokens */
  int span = -1;
  int n = count_nodes(&p, "all_reduce", "loss.count", &span, NULL);
  if (dp * cp * ep > 1) {
    assert_int_equal(n, tp * cp * ep);
    assert_int_equal(span, dp > 1);
  } else {
    assert_int_equal(n, 0);
  }
  assert_int_equal(count_nodes(&p, "sum", "loss.count", NULL, NULL), tp * cp * ep);
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void test_loss_mask(void **st) {
  (void)st;
  masked((degrees){VD_GEN_LLAMA3, .dp = 2, .tp = 2, .pp = 2, .nm = 2});
  masked((degrees){VD_GEN_LLAMA3, .cp = 2});
  masked((degrees){VD_GEN_LLAMA3, .tp = 2, .nm = 2});
  masked((degrees){VD_GEN_MOE, .dp = 2, .pp = 2, .nm = 2, .ep = 2});
  tc_end();
}

/* ZeRO-1 shards: every rank's Adam state is a 1/(dp) slice (tp 1, cp 1). */
static void test_zero_shards(void **st) {
  (void)st;
  vd_gen_config c;
  vd_gen_config_default(&c);
  c.dp = 2;
  c.zero = 1;
  c.optimizer = VD_GEN_ADAM;
  vd_plan_t s, p;
  build_ok(&c, &s, &p);
  int64_t id = single_id(&s, "layers.0.attn.q.weight.exp_avg");
  assert_true(id >= 0);
  int found = 0;
  for (size_t i = 0; i < p.n_tensors; i++) {
    const vd_tensor_t *t = &p.tensors[i];
    if (!t->has_lin || t->lin.full != id) continue;
    found++;
    assert_int_equal(t->shape[0], 64 / 2);
    assert_int_equal(t->lin.dp_shift[0], 32);
  }
  assert_int_equal(found, 1);
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void refuse(vd_gen_config *c, const char *needle) {
  vd_plan_t s, p;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_gen_build(c, &s, &p, &d), VD_EUSAGE);
  char line[1024];
  vd_diag_format(&d, line, sizeof(line));
  if (!strstr(line, needle)) fprintf(stderr, "message '%s' lacks '%s'\n", line, needle);
  assert_non_null(strstr(line, needle));
  vd_plan_free(&s);
  vd_plan_free(&p);
}

/* A configuration the generator must refuse: the defaults with g's model
 * and degrees and the fields below (0 keeps the default), and a piece of
 * the message, which names the option. */
typedef struct {
  degrees g;
  int64_t batch, hidden, heads;
  int tie_embeddings, loss_mask;
  vd_gen_loss loss;
  const char *needle;
} refusal;

static const refusal refusals[] = {
    {{VD_GEN_LLAMA3, .tp = 3}, .needle = "--tp 3 does not divide --kv-heads 4"},
    {{VD_GEN_LLAMA3, .dp = 3}, .needle = "--batch 8 is not divisible by dp*ep*nm = 3"},
    {{VD_GEN_LLAMA3, .pp = 3}, .needle = "--pp 3 exceeds --layers 2"},
    {{VD_GEN_MLP, .cp = 2}, .needle = "--cp"},
    {{VD_GEN_LLAMA3, .ep = 2}, .needle = "--ep applies to moe only"},
    {{VD_GEN_LLAMA3, .cp = 3}, .needle = "--cp 3 does not divide --seq 16"},
    {{VD_GEN_LLAMA3, .tp = 2, .sp = 1, .cp = 16}, .needle = "--sp needs"},
    {{VD_GEN_MOE, .ep = 3}, .batch = 9, .needle = "--ep 3 does not divide --experts 4"},
    {{VD_GEN_LLAMA3, .dp = 8, .zero = 1}, .hidden = 12, .heads = 2, .batch = 8, .needle = "--zero 1"},
    {{.model = VD_GEN_MLP}, .tie_embeddings = 1, .needle = "--tie-embeddings applies to llama3 and moe"},
    {{.model = VD_GEN_LLAMA3}, .loss_mask = 1, .loss = VD_GEN_LOSS_SUM, .needle = "--loss-mask needs --loss ce"},
};

static void test_refusals(void **st) {
  (void)st;
  vd_gen_config c;
  for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
    const refusal *r = &refusals[i];
    tc_begin("refusals[%zu] (%s)", i, r->needle);
    config_of(&c, r->g);
    if (r->batch) c.batch = r->batch;
    if (r->hidden) c.hidden = r->hidden;
    if (r->heads) c.heads = r->heads;
    c.tie_embeddings = r->tie_embeddings;
    c.loss_mask = r->loss_mask;
    c.loss = r->loss;
    refuse(&c, r->needle);
  }
  tc_begin("hidden 0");
  vd_gen_config_default(&c);
  c.hidden = 0;
  refuse(&c, "--hidden must be a positive integer");
  tc_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_mlp_matrix, tc_report),
      cmocka_unit_test_teardown(test_llama3_matrix, tc_report),
      cmocka_unit_test_teardown(test_moe_matrix, tc_report),
      cmocka_unit_test_teardown(test_variants, tc_report),
      cmocka_unit_test(test_zero_shards),
      cmocka_unit_test_teardown(test_refusals, tc_report),
      cmocka_unit_test_teardown(test_tie_embeddings, tc_report),
      cmocka_unit_test_teardown(test_loss_mask, tc_report),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
