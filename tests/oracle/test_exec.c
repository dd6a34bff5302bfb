/*
 * tests/solver/test_exec.c - the numeric executor (oracle/exec.c).
 *
 * Pairs of single/parallel plans built in memory: correct ones must agree,
 * mutated ones must disagree with a report naming the wrong tensor.
 *  - TP=2 linear pair with all-reduces (tests/support pb_plan_tp2): agree;
 *    its forward all-reduce replaced by identity: disagree on 'r0.y';
 *  - PP=2 with send/recv (pb_plan_pp2): agree;
 *  - 2-microbatch gradient accumulation: agree; accumulation dropped: disagree;
 *  - DP=2 stored as one replica (replicas=2), span_replicas all-reduce of the
 *    weight gradient and a 1/2 scale: agree; without the scale: disagree;
 *  - an operator outside the registry: unsupported; determinism per seed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../oracle/exec.h"
#include "../support/plan_builders.h"

#define MB VD_SCOPE_PER_MB
#define PERS VD_SCOPE_PERSISTENT

static vd_exec_result run_pair(const vd_plan_t *s, const vd_plan_t *p, uint64_t seed) {
  vd_exec_opts o = {.seed = seed, .tol = 1e-9};
  vd_exec_result r;
  vd_diag d;
  vd_diag_clear(&d);
  /* The executor's contract: both plans are valid. */
  vd_rc rc = vd_plan_validate(s, "single", &d);
  if (rc == VD_OK) rc = vd_plan_validate(p, "parallel", &d);
  if (rc == VD_OK) rc = vd_exec_compare(s, p, &o, &r, &d);
  if (rc != VD_OK) {
    char line[800];
    vd_diag_format(&d, line, sizeof(line));
    fail_msg("vd_exec_compare: %s", line);
  }
  return r;
}

static void expect_agree(const vd_exec_result *r) {
  if (r->status != VD_EXEC_AGREE)
    fail_msg("expected agree, got %s: %s first '%s' expected %.17g got %.17g", vd_exec_status_names[r->status],
             r->reason, r->first.name, r->first.expected, r->first.got);
  assert_true(r->n_instances > 0);
  assert_true(r->max_rel_err <= 1e-9);
}

/* Gives node `name` operator op (nothing else changes); returns its index. */
static int64_t set_op(vd_plan_t *p, const char *name, const char *op) {
  int64_t i = pb_find_node(p, name);
  assert_true(i >= 0);
  uint32_t off;
  assert_int_equal(vd_plan_str(p, op, &off), VD_OK);
  p->nodes[i].op = off;
  return i;
}

/* Turns node `name` into a plain identity (drops the collective). */
static void to_identity(vd_plan_t *p, const char *name) {
  int64_t i = set_op(p, name, "identity");
  p->nodes[i].coll = -1;
  p->nodes[i].n_group = 0;
  p->nodes[i].span_replicas = 0;
  p->nodes[i].phase = VD_PHASE_FWD;
}

/* Most tests start from the linear2 / tp2 pair of tests/support, which a
 * cmocka setup builds and the teardown frees (also when a test fails). */
typedef struct {
  vd_plan_t s, p;
} plan_pair;
static int tp2_pair_setup(void **state) {
  plan_pair *x = test_calloc(1, sizeof(*x));
  if (!x) return -1;
  *state = x;
  if (pb_plan_linear2(&x->s) != VD_OK) return -1;
  return pb_plan_tp2(&x->p) == VD_OK ? 0 : -1;
}
static int pair_teardown(void **state) {
  plan_pair *x = *state;
  vd_plan_free(&x->s);
  vd_plan_free(&x->p);
  test_free(x);
  return 0;
}

static void test_tp2_agrees(void **state) {
  plan_pair *x = *state;
  vd_exec_result r = run_pair(&x->s, &x->p, 1);
  expect_agree(&r);
  assert_int_equal(r.n_tensors, 28); /* 14 annotated tensors per rank */
}

/* An annotated tensor nothing computes (its producer was removed, as bug 2
 * does to the loss all-reduce of a real plan) breaks its claim. */
static void test_annotated_without_value_disagrees(void **state) {
  plan_pair *x = *state;
  vd_tensor_t t = x->p.tensors[pb_find_tensor(&x->p, "r0.h")];
  uint32_t idx;
  assert_int_equal(vd_plan_add_tensor(&x->p, &t, "orphan", &idx), VD_OK);
  x->p.tensors[idx].id = 9999;
  vd_exec_result r = run_pair(&x->s, &x->p, 1);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_non_null(strstr(r.reason, "'orphan' is annotated with single tensor 'h' but never holds a value"));
}

/* Issue 11, the oracle case: AGREE needs every annotated tensor compared.
 * A single plan without nodes never produces the tensors the parallel plan
 * claims to hold; a parallel plan without lineage gives nothing to compare.
 * Both used to AGREE on 0 tensors. */
static void test_empty_single_plan_disagrees(void **state) {
  plan_pair *x = *state;
  x->s.n_nodes = 0;
  vd_exec_result r = run_pair(&x->s, &x->p, 1);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_non_null(strstr(r.reason, "which the single plan never produces or reads"));
}

/* A parallel plan without lineage has nothing to compare: its weights and
 * losses are outputs no annotation states, so it is refused before it runs
 * (issue 29 item 5: an unannotated loss let a doubled loss agree). */
static void test_no_lineage_refused(void **state) {
  plan_pair *x = *state;
  for (size_t i = 0; i < x->p.n_tensors; i++) x->p.tensors[i].has_lin = 0;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_validate(&x->p, "parallel", &d), VD_EINPUT);
  assert_string_equal(d.field, "lin");
  assert_non_null(strstr(d.msg, "role weight"));
}

static void test_tp2_missing_all_reduce_disagrees(void **state) {
  plan_pair *x = *state;
  to_identity(&x->p, "r0.l2.ar");
  to_identity(&x->p, "r1.l2.ar");
  vd_exec_result r = run_pair(&x->s, &x->p, 7);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_true(r.has_mismatch);
  assert_string_equal(r.first.name, "r0.y");
  assert_string_equal(r.first.full_name, "y");
  assert_int_equal(r.first.rank, 0);
  assert_int_equal(r.first.mb, 0);
  assert_int_equal(r.first.part_n, 1);
  assert_true(r.first.lo[1] == 0 && r.first.hi[1] == 8 && r.first.hi[0] == 4);
  assert_true(r.first.rel_err > 1e-6);
  assert_true(fabs(r.first.expected - r.first.got) > 1e-9);
  assert_true(r.max_rel_err > 1e-6);
}

static void test_pp2_agrees(void **state) {
  (void)state;
  vd_plan_t s, p;
  assert_int_equal(pb_plan_linear2(&s), VD_OK);
  assert_int_equal(pb_plan_pp2(&p), VD_OK);
  vd_exec_result r = run_pair(&s, &p, 3);
  expect_agree(&r);
  vd_plan_free(&s);
  vd_plan_free(&p);
}

/* ---- one linear layer ---------------------------------------------------- */

/* y = linear(x, w); s = sum(y); loss = scale(s, factor): every fc plan's
 * forward. */
static void fc_forward(pb_ctx *c, int32_t seg, uint32_t x, uint32_t w, uint32_t y, uint32_t s, uint32_t loss,
                       double factor) {
  pb_node(c, "linear", "fc", 0, seg, VD_PHASE_FWD, PB_T(x, w), PB_T(y));
  pb_node(c, "sum", "sum", 0, seg, VD_PHASE_FWD, PB_T(y), PB_T(s));
  uint32_t n = pb_node(c, "scale", "mean", 0, seg, VD_PHASE_FWD, PB_T(s), PB_T(loss));
  pb_attr_float(c, n, "factor", factor);
}

/* gs = scale_backward(gl, factor); gy = sum_backward(gs), the nodes named
 * "mean.bwd<sfx>" and "sum.bwd<sfx>". */
static void fc_loss_backward(pb_ctx *c, int32_t seg, const char *sfx, uint32_t gl, uint32_t gs, uint32_t gy,
                             double factor) {
  char nm[32];
  snprintf(nm, sizeof(nm), "mean.bwd%s", sfx);
  uint32_t n = pb_node(c, "scale_backward", nm, 0, seg, VD_PHASE_BWD, PB_T(gl), PB_T(gs));
  pb_attr_float(c, n, "factor", factor);
  snprintf(nm, sizeof(nm), "sum.bwd%s", sfx);
  pb_node(c, "sum_backward", nm, 0, seg, VD_PHASE_BWD, PB_T(gs), PB_T(gy));
}

/* ---- single plan ---------------------------------------------------------- *
 * x [4,3], w [2,3]; y = linear(x, w); s = sum(y); loss = scale(s, 1/4)
 * backward from the seed gl: gs = scale_backward(gl), gy = sum_backward(gs),
 * (gx, gw) = linear_backward(x, w, gy); w = sgd(w, gw).
 * Tensor ids: x 1, w 2, y 3, s 4, loss 5, gl 6, gs 7, gy 8, gx 9, gw 10. */
static void single_fc(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, MB, 2, 4, 3);
  uint32_t w = pb_tensor(&c, "w", 0, VD_ROLE_WEIGHT, PERS, 2, 2, 3);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, MB, 2, 4, 2);
  uint32_t s = pb_tensor(&c, "s", 0, VD_ROLE_ACT, MB, 0, 0, 0);
  uint32_t loss = pb_tensor(&c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);
  uint32_t gl = pb_tensor(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0);
  uint32_t gs = pb_tensor(&c, "gs", 0, VD_ROLE_GRAD, MB, 0, 0, 0);
  uint32_t gy = pb_tensor(&c, "gy", 0, VD_ROLE_GRAD, MB, 2, 4, 2);
  uint32_t gx = pb_tensor(&c, "gx", 0, VD_ROLE_GRAD, MB, 2, 4, 3);
  uint32_t gw = pb_tensor(&c, "w.grad", 0, VD_ROLE_GRAD, PERS, 2, 2, 3);
  fc_forward(&c, fwd, x, w, y, s, loss, 0.25);
  fc_loss_backward(&c, bwd, "", gl, gs, gy, 0.25);
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gw));
  pb_sgd(&c, "opt.w", 0, opt, w, gw);
  pb_steps_one_mb(&c, 0, fwd, bwd, opt);
  assert_int_equal(c.rc, VD_OK);
}

/* The forward tensors mb2_fc and dp2_fc share: x [2,3] and y [2,2] (2 of
 * the single plan's 4 rows; the plan adds the shift), the whole weight w
 * and s, part 1 or 2 of the single s (the plan says which part). */
static void fc_half_forward_tensors(pb_ctx *c, uint32_t *x, uint32_t *w, uint32_t *y, uint32_t *s) {
  *x = pb_tensor_whole(c, "x", 0, VD_ROLE_INPUT, MB, 2, 2, 3, 1);
  *w = pb_tensor_whole(c, "w", 0, VD_ROLE_WEIGHT, PERS, 2, 2, 3, 2);
  *y = pb_tensor_whole(c, "y", 0, VD_ROLE_ACT, MB, 2, 2, 2, 3);
  *s = pb_tensor(c, "s", 0, VD_ROLE_ACT, MB, 0, 0, 0);
  pb_lin(c, *s, 4, 0, 0, 0, 0, 0, 2);
}

/* Gradient accumulation over 2 microbatches of 2 rows each; the loss of a
 * microbatch is part m of 2 of the loss.  accumulate=0 drops the second
 * microbatch's contribution (a bug). */
static void mb2_fc(vd_plan_t *p, int accumulate) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 1, 1, 2);
  int32_t fwd = pb_segment(&c, "fwd"), bwd0 = pb_segment(&c, "bwd0"), bwd = pb_segment(&c, "bwd");
  int32_t opt = pb_segment(&c, "opt");
  uint32_t x, w, y, s;
  fc_half_forward_tensors(&c, &x, &w, &y, &s);
  uint32_t loss = pb_tensor(&c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);
  pb_lin(&c, loss, 5, 0, 0, 0, 0, 0, 2);
  uint32_t gl = pb_tensor_whole(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0, 6);
  uint32_t gs = pb_tensor_whole(&c, "gs", 0, VD_ROLE_GRAD, MB, 0, 0, 0, 7);
  uint32_t gy = pb_tensor_whole(&c, "gy", 0, VD_ROLE_GRAD, MB, 2, 2, 2, 8);
  uint32_t gx = pb_tensor_whole(&c, "gx", 0, VD_ROLE_GRAD, MB, 2, 2, 3, 9);
  uint32_t gacc = pb_tensor_whole(&c, "w.grad", 0, VD_ROLE_GRAD, PERS, 2, 2, 3, 10);
  uint32_t gmb = pb_tensor(&c, "w.grad_mb", 0, VD_ROLE_GRAD, MB, 2, 2, 3);
  assert_int_equal(c.rc, VD_OK);
  /* microbatch m holds rows [2m, 2m+2); its loss and sum are part m of 2 */
  p->tensors[x].lin.mb_shift[0] = 2;
  p->tensors[y].lin.mb_shift[0] = 2;
  p->tensors[gy].lin.mb_shift[0] = 2;
  p->tensors[gx].lin.mb_shift[0] = 2;
  p->tensors[s].lin.mb_part = 1;
  p->tensors[loss].lin.mb_part = 1;
  fc_forward(&c, fwd, x, w, y, s, loss, 0.25);
  fc_loss_backward(&c, bwd0, "0", gl, gs, gy, 0.25);
  fc_loss_backward(&c, bwd, "", gl, gs, gy, 0.25);
  pb_node(&c, "linear_backward", "fc.bwd0", 0, bwd0, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gacc));
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gmb));
  if (accumulate) pb_node(&c, "accumulate", "fc.acc", 0, bwd, VD_PHASE_BWD, PB_T(gacc, gmb), PB_T(gacc));
  pb_sgd(&c, "opt.w", 0, opt, w, gacc);
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 0, bwd0, 0);
  pb_step(&c, 0, fwd, 1);
  pb_step(&c, 0, bwd, 1);
  pb_step(&c, 0, opt, -1);
  assert_int_equal(c.rc, VD_OK);
}

/* Runs single s against parallel good, which must agree comparing
 * n_instances tensor instances, and against bad, which must disagree first
 * at the updated weight w, with n_bad instances wrong.  Returns bad's
 * result; frees nothing. */
static vd_exec_result good_then_bad(const vd_plan_t *s, const vd_plan_t *good, const vd_plan_t *bad, uint64_t seed,
                                    size_t n_instances, size_t n_bad) {
  vd_exec_result r = run_pair(s, good, seed);
  expect_agree(&r);
  assert_int_equal(r.n_instances, n_instances);
  r = run_pair(s, bad, seed);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_string_equal(r.first.name, "w"); /* the updated weight, tensor index 1 */
  assert_int_equal(r.n_bad_instances, n_bad);
  return r;
}

static void test_mb2_accumulation_agrees(void **state) {
  (void)state;
  vd_plan_t s, good, bad;
  single_fc(&s);
  mb2_fc(&good, 1);
  mb2_fc(&bad, 0);
  /* per-mb tensors compared in both microbatches: x y s loss gl gs gy gx (8 x 2)
   * plus the persistent w and w.grad; w and w.grad wrong */
  vd_exec_result r = good_then_bad(&s, &good, &bad, 11, 18, 2);
  assert_int_equal(r.first.mb, -1);
  vd_plan_free(&s);
  vd_plan_free(&good);
  vd_plan_free(&bad);
}

/* DP=2 as one stored rank with replicas=2: replica d holds rows [2d, 2d+2),
 * its local loss is the mean over its 2 rows, so its weight gradient is twice
 * its share; the span_replicas all-reduce sums, the scale halves. */
static void dp2_fc(vd_plan_t *p, double factor) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 1, 2, 1);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  uint32_t x, w, y, s;
  fc_half_forward_tensors(&c, &x, &w, &y, &s);
  /* the local mean is twice its share of the single loss: no lineage can
   * state it, so it is an activation here (a loss must be annotated) */
  uint32_t loss = pb_tensor(&c, "loss_local", 0, VD_ROLE_ACT, MB, 0, 0, 0);
  uint32_t gl = pb_tensor_whole(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0, 6);
  uint32_t gs = pb_tensor(&c, "gs_local", 0, VD_ROLE_GRAD, MB, 0, 0, 0);
  uint32_t gy = pb_tensor(&c, "gy_local", 0, VD_ROLE_GRAD, MB, 2, 2, 2);
  uint32_t gx = pb_tensor(&c, "gx_local", 0, VD_ROLE_GRAD, MB, 2, 2, 3);
  uint32_t gw = pb_tensor(&c, "w.grad_local", 0, VD_ROLE_GRAD, PERS, 2, 2, 3);
  uint32_t gr = pb_tensor(&c, "w.grad_sum", 0, VD_ROLE_GRAD, PERS, 2, 2, 3);
  uint32_t ga = pb_tensor_whole(&c, "w.grad", 0, VD_ROLE_GRAD, PERS, 2, 2, 3, 10);
  assert_int_equal(c.rc, VD_OK);
  p->tensors[x].lin.dp_shift[0] = 2;
  p->tensors[y].lin.dp_shift[0] = 2;
  p->tensors[s].lin.dp_part = 1;
  fc_forward(&c, fwd, x, w, y, s, loss, 0.5);
  fc_loss_backward(&c, bwd, "", gl, gs, gy, 0.5);
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gw));
  pb_coll(&c, "all_reduce", "dp.ar", 0, opt, PB_T(gw), PB_T(gr), 1, PB_G(0), 1);
  uint32_t n = pb_node(&c, "scale", "dp.avg", 0, opt, VD_PHASE_OPT, PB_T(gr), PB_T(ga));
  pb_attr_float(&c, n, "factor", factor);
  pb_sgd(&c, "opt.w", 0, opt, w, ga);
  pb_steps_one_mb(&c, 0, fwd, bwd, opt);
  assert_int_equal(c.rc, VD_OK);
}

static void test_dp2_replicas_agree(void **state) {
  (void)state;
  vd_plan_t s, good, bad;
  single_fc(&s);
  dp2_fc(&good, 0.5);
  dp2_fc(&bad, 1.0); /* wrong scaling */
  /* x, w, y, s, gloss, w.grad, in both replicas; w and w.grad wrong in both */
  vd_exec_result r = good_then_bad(&s, &good, &bad, 5, 12, 4);
  assert_int_equal(r.first.replica, 0);
  vd_plan_free(&s);
  vd_plan_free(&good);
  vd_plan_free(&bad);
}

/* Each replica reads two more rows than the single batch holds (its dp shift
 * runs past the single input): a batch mismatch, named, nothing executed. */
static void test_batch_mismatch_disagrees(void **state) {
  (void)state;
  vd_plan_t s, p;
  single_fc(&s);
  dp2_fc(&p, 0.5);
  p.tensors[pb_find_tensor(&p, "x")].lin.dp_shift[0] = 3;
  vd_exec_result r = run_pair(&s, &p, 5);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_non_null(strstr(r.reason, "batch mismatch: data input 'x' (replica 1, mb 0) reads [3, 5) of dim 0"));
  assert_non_null(strstr(r.reason, "different global batches"));
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void test_deterministic_and_seed_matters(void **state) {
  plan_pair *x = *state;
  to_identity(&x->p, "r0.l2.ar");
  to_identity(&x->p, "r1.l2.ar");
  vd_exec_result a = run_pair(&x->s, &x->p, 42), b = run_pair(&x->s, &x->p, 42), c = run_pair(&x->s, &x->p, 43);
  assert_true(a.first.expected == b.first.expected && a.first.got == b.first.got);
  assert_true(a.max_rel_err == b.max_rel_err);
  assert_true(a.first.expected != c.first.expected);
}

/* x's pair runs as unsupported, the reason naming the operator (what) and
 * the node. */
static void expect_unsupported(const plan_pair *x, const char *what, const char *node) {
  vd_exec_result r = run_pair(&x->s, &x->p, 1);
  assert_int_equal(r.status, VD_EXEC_UNSUPPORTED);
  assert_non_null(strstr(r.reason, what));
  assert_non_null(strstr(r.reason, node));
}

static void test_unknown_operator_is_unsupported(void **state) {
  plan_pair *x = *state;
  set_op(&x->p, "r1.l1", "fancy_linear");
  expect_unsupported(x, "fancy_linear", "r1.l1");
}

/* The registry check runs before any tensor is allocated: a plan with an
 * unknown operator and tensors far too large to hold is still "unsupported"
 * (it used to run out of memory on the nodes before the unknown one). */
static void test_unknown_operator_checked_before_allocation(void **state) {
  plan_pair *x = *state;
  set_op(&x->p, "r0.l2", "mystery_op");
  for (size_t t = 0; t < x->s.n_tensors; t++) /* 2^46 doubles each: no allocator can */
    for (int k = 0; k < x->s.tensors[t].ndim; k++) x->s.tensors[t].shape[k] = (int64_t)1 << 23;
  expect_unsupported(x, "unsupported operator 'mystery_op'", "r0.l2");
}

/* A parallel node whose shapes do not fit is a disagreement naming the node. */
static void test_parallel_shape_error_disagrees(void **state) {
  plan_pair *x = *state;
  int64_t i = pb_find_node(&x->p, "r0.l2");
  assert_true(i >= 0);
  /* l2 reads x [4,8] instead of h [4,4]: w2 [8,4] no longer fits */
  x->p.refs[x->p.nodes[i].in_off] = (uint32_t)pb_find_tensor(&x->p, "r0.x");
  vd_exec_result r = run_pair(&x->s, &x->p, 1);
  assert_int_equal(r.status, VD_EXEC_DISAGREE);
  assert_non_null(strstr(r.reason, "r0.l2"));
  assert_non_null(strstr(r.reason, "inputs[1]"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tp2_agrees, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_empty_single_plan_disagrees, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_no_lineage_refused, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_tp2_missing_all_reduce_disagrees, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_annotated_without_value_disagrees, tp2_pair_setup, pair_teardown),
      cmocka_unit_test(test_pp2_agrees),
      cmocka_unit_test(test_mb2_accumulation_agrees),
      cmocka_unit_test(test_dp2_replicas_agree),
      cmocka_unit_test(test_batch_mismatch_disagrees),
      cmocka_unit_test_setup_teardown(test_deterministic_and_seed_matters, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_operator_is_unsupported, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_operator_checked_before_allocation, tp2_pair_setup, pair_teardown),
      cmocka_unit_test_setup_teardown(test_parallel_shape_error_disagrees, tp2_pair_setup, pair_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
