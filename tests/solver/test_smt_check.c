/*
 * tests/solver/test_smt_check.c - the equivalence check of one obligation:
 * fast path proofs, solver proofs, counterexamples with exact values,
 * inconclusive on timeout, Z3 errors as vd_rc, exact numerals, partial-sum
 * parts, and the timing of fast path vs solver path on a 4x4 matmul stage.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../solver/smt.h"
#include "../support/smt_cases.h"

/* ---- helpers ----------------------------------------------------------------- */

static vd_op_shape shape2(int64_t a, int64_t b) {
  vd_op_shape s = {.ndim = 2, .d = {a, b}};
  return s;
}

/* Runs encoder `op` with optional node attributes (one float attribute
 * key=val when key != NULL, one string when skey != NULL). */
static void encode(vd_smt *s, vd_op_id op, const vd_smt_tensor *const *in, uint32_t n_in, vd_smt_tensor *const *out,
                   uint32_t n_out, uint32_t n_part, const char *key, double val) {
  vd_plan_t plan;
  assert_int_equal(vd_plan_init(&plan, VD_PLAN_SINGLE), VD_OK);
  vd_node_t nd = {.id = 1, .layer = -1, .coll = -1};
  uint32_t node;
  assert_int_equal(vd_plan_add_node(&plan, &nd, vd_op_name(op), "n", NULL, 0, NULL, 0, NULL, 0, &node), VD_OK);
  if (key) {
    if (!strcmp(key, "start"))
      assert_int_equal(vd_plan_attr_int(&plan, node, key, (int64_t)val), VD_OK);
    else
      assert_int_equal(vd_plan_attr_float(&plan, node, key, val), VD_OK);
  }
  vd_diag d;
  vd_diag_clear(&d);
  struct vd_op_encode_call c = {.op = op, .smt = s, .plan = &plan, .node = &plan.nodes[node], .record = "test",
                                .n_in = n_in, .n_out = n_out, .n_part = n_part, .in = in, .out = out, .diag = &d};
  vd_rc rc = vd_smt_encode(&c);
  if (rc != VD_OK) fail_msg("encode %s: %s", vd_op_name(op), d.msg);
  vd_plan_free(&plan);
}

static void encode1(vd_smt *s, vd_op_id op, const vd_smt_tensor *a, const vd_smt_tensor *b, vd_smt_tensor *y,
                    const vd_op_shape *ys, const char *key, double val) {
  assert_int_equal(vd_smt_tensor_init(y, ys), VD_OK);
  const vd_smt_tensor *in[2] = {a, b};
  vd_smt_tensor *out[1] = {y};
  encode(s, op, in, b ? 2 : 1, out, 1, 0, key, val);
}

static vd_smt_verdict check(vd_smt *s, const vd_smt_tensor *p, const vd_smt_tensor *q, vd_smt_result *r) {
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(p->numel, q->numel);
  vd_rc rc = vd_smt_check(s, p->t, q->t, (size_t)p->numel, r, &d);
  if (rc != VD_OK) fail_msg("check: %s", d.msg);
  return r->verdict;
}

/* ---- fast path ------------------------------------------------------------------ */

static void test_reassociated_sum_fast_path(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term a = vd_smt_var(s, "a"), b = vd_smt_var(s, "b"), c = vd_smt_var(s, "c");
  vd_term l = vd_smt_add(s, vd_smt_add(s, a, b), c), r = vd_smt_add(s, a, vd_smt_add(s, b, c));
  vd_term l2 = vd_smt_mul(s, vd_smt_mul(s, c, b), a), r2 = vd_smt_mul(s, a, vd_smt_mul(s, b, c));
  vd_term P[2] = {l, l2}, S[2] = {r, r2};
  vd_smt_result res;
  assert_int_equal(vd_smt_check(s, P, S, 2, &res, NULL), VD_OK);
  assert_int_equal(res.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(res.by_fast_path, 1);
  assert_int_equal(res.n_fast, 2);
  vd_smt_result_free(&res);
  /* The same verdict with the fast path off (by the solver). */
  vd_smt_set_fast_path(s, 0);
  assert_int_equal(vd_smt_check(s, P, S, 2, &res, NULL), VD_OK);
  assert_int_equal(res.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(res.by_fast_path, 0);
  vd_smt_result_free(&res);
  vd_smt_free(s);
}

/* Single: Y = A B (4x4).  Parallel: A split by columns, B by rows (k split
 * in 2), partial products, all_reduce.  Returns the parallel and single
 * outputs in *par / *single (rank 0's all_reduce output). */
static void build_matmul_stage(vd_smt *s, vd_smt_tensor *par, vd_smt_tensor *single, int with_all_reduce) {
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape s44 = shape2(4, 4);
  vd_smt_tensor A, B, A0, A1, B0, B1, Y0, Y1;
  assert_int_equal(vd_smt_tensor_vars(s, &A, &s44, "A", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &B, &s44, "B", &d), VD_OK);
  encode1(s, VD_OP_MATMUL, &A, &B, single, &s44, NULL, 0);
  int64_t lo0[2] = {0, 0}, hi0[2] = {4, 2}, lo1[2] = {0, 2}, hi1[2] = {4, 4};
  int64_t blo0[2] = {0, 0}, bhi0[2] = {2, 4}, blo1[2] = {2, 0}, bhi1[2] = {4, 4};
  /* SOUNDNESS (of the test): the parallel inputs ARE slices of the single ones. */
  assert_int_equal(vd_smt_tensor_slice(&A, lo0, hi0, &A0, &d), VD_OK);
  assert_int_equal(vd_smt_tensor_slice(&A, lo1, hi1, &A1, &d), VD_OK);
  assert_int_equal(vd_smt_tensor_slice(&B, blo0, bhi0, &B0, &d), VD_OK);
  assert_int_equal(vd_smt_tensor_slice(&B, blo1, bhi1, &B1, &d), VD_OK);
  encode1(s, VD_OP_MATMUL, &A0, &B0, &Y0, &s44, NULL, 0);
  encode1(s, VD_OP_MATMUL, &A1, &B1, &Y1, &s44, NULL, 0);
  if (with_all_reduce) {
    vd_smt_tensor R1;
    assert_int_equal(vd_smt_tensor_init(par, &s44), VD_OK);
    assert_int_equal(vd_smt_tensor_init(&R1, &s44), VD_OK);
    const vd_smt_tensor *in[2] = {&Y0, &Y1};
    vd_smt_tensor *out[2] = {par, &R1};
    encode(s, VD_OP_ALL_REDUCE, in, 2, out, 2, 2, NULL, 0);
    vd_smt_tensor_free(&R1);
  } else {
    assert_int_equal(vd_smt_tensor_copy(&Y0, par, &d), VD_OK);
  }
  vd_smt_tensor *tmp[] = {&A, &B, &A0, &A1, &B0, &B1, &Y0, &Y1};
  for (size_t i = 0; i < sizeof(tmp) / sizeof(tmp[0]); i++) vd_smt_tensor_free(tmp[i]);
}

static void test_matmul_split_all_reduce(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_smt_tensor par, single;
  build_matmul_stage(s, &par, &single, 1);
  vd_smt_result r;
  assert_int_equal(check(s, &par, &single, &r), VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 1);
  double fast = r.ms_fast;
  vd_smt_result_free(&r);
  vd_smt_set_fast_path(s, 0);
  assert_int_equal(check(s, &par, &single, &r), VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 0);
  double slow = r.ms_solver;
  vd_smt_result_free(&r);
  print_message("4x4 matmul stage (16 elements, k split 2 + all_reduce): fast path %.3f ms, solver path %.3f ms\n",
                fast, slow);
  vd_smt_tensor_free(&par);
  vd_smt_tensor_free(&single);
  vd_smt_free(s);
}

/* Timing of whole stages, with a reset between them (the verifier's loop). */
static void test_matmul_stage_timing(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  double t_fast = 0, t_slow = 0, t_build = 0;
  const int reps = 20;
  for (int mode = 0; mode < 2; mode++) {
    vd_smt_set_fast_path(s, mode == 0);
    for (int i = 0; i < reps; i++) {
      struct timespec a, b, c;
      clock_gettime(CLOCK_MONOTONIC, &a);
      vd_smt_tensor par, single;
      build_matmul_stage(s, &par, &single, 1);
      clock_gettime(CLOCK_MONOTONIC, &b);
      vd_smt_result r;
      assert_int_equal(check(s, &par, &single, &r), VD_SMT_EQUIVALENT);
      vd_smt_result_free(&r);
      vd_smt_tensor_free(&par);
      vd_smt_tensor_free(&single);
      assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
      clock_gettime(CLOCK_MONOTONIC, &c);
      double build = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
      double chk = (double)(c.tv_sec - b.tv_sec) * 1e3 + (double)(c.tv_nsec - b.tv_nsec) / 1e6;
      t_build += build;
      if (mode == 0) t_fast += chk;
      else t_slow += chk;
    }
  }
  print_message("per 4x4 matmul stage: encode %.3f ms, check+reset with fast path %.3f ms, solver only %.3f ms\n",
                t_build / (2 * reps), t_fast / reps, t_slow / reps);
  vd_smt_free(s);
}

static void test_softmax_replica_and_slice(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape s24 = shape2(2, 4), s14 = shape2(1, 4);
  vd_smt_tensor X, Y, Xr, Yr, Xs, Ys, Yslice;
  assert_int_equal(vd_smt_tensor_vars(s, &X, &s24, "X", &d), VD_OK);
  encode1(s, VD_OP_SOFTMAX, &X, NULL, &Y, &s24, NULL, 0);
  /* Replica: the parallel tensor is the single one. */
  assert_int_equal(vd_smt_tensor_copy(&X, &Xr, &d), VD_OK);
  encode1(s, VD_OP_SOFTMAX, &Xr, NULL, &Yr, &s24, NULL, 0);
  vd_smt_result r;
  assert_int_equal(check(s, &Yr, &Y, &r), VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 1);
  vd_smt_result_free(&r);
  /* Row slice (sequence parallel): softmax of rows 1:2 = rows 1:2 of softmax. */
  int64_t lo[2] = {1, 0}, hi[2] = {2, 4};
  assert_int_equal(vd_smt_tensor_slice(&X, lo, hi, &Xs, &d), VD_OK);
  encode1(s, VD_OP_SOFTMAX, &Xs, NULL, &Ys, &s14, NULL, 0);
  assert_int_equal(vd_smt_tensor_slice(&Y, lo, hi, &Yslice, &d), VD_OK);
  assert_int_equal(check(s, &Ys, &Yslice, &r), VD_SMT_EQUIVALENT);
  vd_smt_result_free(&r);
  /* A softmax over a column slice (vocab-parallel without the all-reduced
   * normalizer) is not the single softmax. */
  int64_t clo[2] = {0, 0}, chi[2] = {2, 2};
  vd_smt_tensor Xc, Yc, Ycs;
  vd_op_shape s22 = shape2(2, 2);
  assert_int_equal(vd_smt_tensor_slice(&X, clo, chi, &Xc, &d), VD_OK);
  encode1(s, VD_OP_SOFTMAX, &Xc, NULL, &Yc, &s22, NULL, 0);
  assert_int_equal(vd_smt_tensor_slice(&Y, clo, chi, &Ycs, &d), VD_OK);
  assert_int_equal(check(s, &Yc, &Ycs, &r), VD_SMT_NOT_EQUIVALENT);
  vd_smt_result_free(&r);
  vd_smt_tensor *all[] = {&X, &Y, &Xr, &Yr, &Xs, &Ys, &Yslice, &Xc, &Yc, &Ycs};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) vd_smt_tensor_free(all[i]);
  vd_smt_free(s);
}

/* ---- counterexamples -------------------------------------------------------- */

static const vd_smt_value *input_named(const vd_smt_result *r, const char *name) {
  for (size_t i = 0; i < r->n_inputs; i++)
    if (!strcmp(r->inputs[i].name, name)) return &r->inputs[i];
  return NULL;
}

static void test_wrong_constant_counterexample(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape s12 = shape2(1, 2);
  vd_smt_tensor X, P, S;
  assert_int_equal(vd_smt_tensor_vars(s, &X, &s12, "x", &d), VD_OK);
  encode1(s, VD_OP_SCALE, &X, NULL, &P, &s12, "factor", 2.0);
  encode1(s, VD_OP_SCALE, &X, NULL, &S, &s12, "factor", 3.0);
  for (int fast = 1; fast >= 0; fast--) {
    vd_smt_set_fast_path(s, fast);
    vd_smt_result r;
    assert_int_equal(check(s, &P, &S, &r), VD_SMT_NOT_EQUIVALENT);
    assert_true(r.n_diffs >= 1);
    assert_int_equal(r.n_inputs, 2);
    assert_string_equal(r.inputs[0].name, "x[0,0]"); /* sorted by name */
    for (size_t i = 0; i < r.n_diffs; i++) {
      const vd_smt_diff *df = &r.diffs[i];
      char nm[16];
      snprintf(nm, sizeof(nm), "x[0,%zu]", df->index);
      const vd_smt_value *x = input_named(&r, nm);
      assert_non_null(x);
      assert_true(x->value != 0);
      assert_true(df->parallel.value == 2 * x->value);
      assert_true(df->single.value == 3 * x->value);
      assert_string_not_equal(df->parallel.exact, df->single.exact);
    }
    vd_smt_result_free(&r);
  }
  vd_smt_tensor_free(&X);
  vd_smt_tensor_free(&P);
  vd_smt_tensor_free(&S);
  vd_smt_free(s);
}

static void test_missing_all_reduce(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_smt_tensor par, single;
  build_matmul_stage(s, &par, &single, 0);
  vd_smt_result r;
  assert_int_equal(check(s, &par, &single, &r), VD_SMT_NOT_EQUIVALENT);
  assert_true(r.n_diffs >= 1);
  assert_true(r.n_inputs > 0);
  /* The reported values really differ and are consistent with the model:
   * recompute both sides of the first diff from the input values. */
  const vd_smt_diff *df = &r.diffs[0];
  assert_true(df->parallel.value != df->single.value);
  int64_t i = (int64_t)df->index / 4, j = (int64_t)df->index % 4;
  double sp = 0, ss = 0;
  for (int64_t l = 0; l < 4; l++) {
    char an[64], bn[64];
    snprintf(an, sizeof(an), "A[%lld,%lld]", (long long)i, (long long)l);
    snprintf(bn, sizeof(bn), "B[%lld,%lld]", (long long)l, (long long)j);
    const vd_smt_value *a = input_named(&r, an), *b = input_named(&r, bn);
    double av = a ? a->value : 0, bv = b ? b->value : 0; /* absent: model-irrelevant */
    ss += av * bv;
    if (l < 2) sp += av * bv;
  }
  assert_true(fabs(sp - df->parallel.value) <= 1e-9 * fmax(1, fabs(sp)));
  assert_true(fabs(ss - df->single.value) <= 1e-9 * fmax(1, fabs(ss)));
  vd_smt_result_free(&r);
  vd_smt_tensor_free(&par);
  vd_smt_tensor_free(&single);
  vd_smt_free(s);
}

/* ---- partial sums --------------------------------------------------------------- */

static void test_partial_parts(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape s22 = shape2(2, 2), s44 = shape2(4, 4), s24 = shape2(2, 4);
  vd_smt_tensor W, Wsl, p0, p1, p2, p0b, sum01, X, Y, Y0, Y1, Yr, R1;
  assert_int_equal(vd_smt_tensor_vars(s, &W, &s44, "W", &d), VD_OK);
  int64_t lo[2] = {0, 2}, hi[2] = {2, 4};
  assert_int_equal(vd_smt_tensor_slice(&W, lo, hi, &Wsl, &d), VD_OK);
  char key[64];
  vd_smt_slice_key(key, sizeof(key), "W", 2, lo, hi);
  assert_string_equal(key, "W[0:2,2:4]");
  assert_int_equal(vd_smt_partial_parts(s, &Wsl, key, 3, 0, &p0, &d), VD_OK);
  assert_int_equal(vd_smt_partial_parts(s, &Wsl, key, 3, 1, &p1, &d), VD_OK);
  assert_int_equal(vd_smt_partial_parts(s, &Wsl, key, 3, 2, &p2, &d), VD_OK);
  /* The same (key, n, k) gives the same terms. */
  assert_int_equal(vd_smt_partial_parts(s, &Wsl, key, 3, 0, &p0b, &d), VD_OK);
  for (int64_t i = 0; i < 4; i++) assert_ptr_equal(p0.t[i], p0b.t[i]);
  /* The parts sum to the slice (fast path), and two parts alone do not. */
  vd_smt_tensor *three[3] = {&p0, &p1, &p2};
  vd_smt_tensor sum;
  assert_int_equal(vd_smt_tensor_init(&sum, &s22), VD_OK);
  vd_smt_tensor *out[1] = {&sum};
  encode(s, VD_OP_MULTIREF_BACKWARD, (const vd_smt_tensor *const *)three, 3, out, 1, 0, NULL, 0);
  vd_smt_result r;
  assert_int_equal(check(s, &sum, &Wsl, &r), VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 1);
  vd_smt_result_free(&r);
  encode1(s, VD_OP_ADD, &p0, &p1, &sum01, &s22, NULL, 0);
  assert_int_equal(check(s, &sum01, &Wsl, &r), VD_SMT_NOT_EQUIVALENT);
  vd_smt_result_free(&r);
  /* Partial-sum input through a matmul and an all_reduce: X(2x4) W(4x4),
   * W held as 2 partial parts on 2 ranks. */
  vd_smt_tensor q0, q1;
  vd_smt_slice_key(key, sizeof(key), "W", 2, (int64_t[]){0, 0}, (int64_t[]){4, 4});
  assert_int_equal(vd_smt_partial_parts(s, &W, key, 2, 0, &q0, &d), VD_OK);
  assert_int_equal(vd_smt_partial_parts(s, &W, key, 2, 1, &q1, &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &X, &s24, "X", &d), VD_OK);
  encode1(s, VD_OP_MATMUL, &X, &W, &Y, &s24, NULL, 0);
  encode1(s, VD_OP_MATMUL, &X, &q0, &Y0, &s24, NULL, 0);
  encode1(s, VD_OP_MATMUL, &X, &q1, &Y1, &s24, NULL, 0);
  assert_int_equal(vd_smt_tensor_init(&Yr, &s24), VD_OK);
  assert_int_equal(vd_smt_tensor_init(&R1, &s24), VD_OK);
  const vd_smt_tensor *ar_in[2] = {&Y0, &Y1};
  vd_smt_tensor *ar_out[2] = {&Yr, &R1};
  encode(s, VD_OP_ALL_REDUCE, ar_in, 2, ar_out, 2, 2, NULL, 0);
  assert_int_equal(check(s, &Yr, &Y, &r), VD_SMT_EQUIVALENT);
  vd_smt_result_free(&r);
  assert_int_equal(check(s, &Y0, &Y, &r), VD_SMT_NOT_EQUIVALENT);
  vd_smt_result_free(&r);
  /* Bad part index. */
  vd_smt_tensor bad;
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_partial_parts(s, &Wsl, "W", 2, 2, &bad, &d), VD_EINPUT);
  assert_string_equal(d.field, "part");
  vd_smt_tensor *all[] = {&W, &Wsl, &p0, &p1, &p2, &p0b, &sum, &sum01, &q0, &q1, &X, &Y, &Y0, &Y1, &Yr, &R1};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) vd_smt_tensor_free(all[i]);
  vd_smt_free(s);
}

/* Vocab-parallel embedding with symbolic (Int) ids: the solver proves the
 * sharded lookup + all_reduce equal to the single lookup, and finds an id
 * that exposes a wrong shard offset. */
static void test_vocab_parallel_embedding(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape ids_s = {.ndim = 1, .d = {2}}, tab = shape2(4, 2), tab2 = shape2(2, 2), ys = shape2(2, 2);
  vd_smt_tensor ids, T, T0, T1, Y, Y0, Y1, Yr, R1;
  assert_int_equal(vd_smt_tensor_int_vars(s, &ids, &ids_s, "ids", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &T, &tab, "T", &d), VD_OK);
  int64_t lo0[2] = {0, 0}, hi0[2] = {2, 2}, lo1[2] = {2, 0}, hi1[2] = {4, 2};
  assert_int_equal(vd_smt_tensor_slice(&T, lo0, hi0, &T0, &d), VD_OK);
  assert_int_equal(vd_smt_tensor_slice(&T, lo1, hi1, &T1, &d), VD_OK);
  (void)tab2;
  encode1(s, VD_OP_EMBEDDING, &ids, &T, &Y, &ys, NULL, 0);
  for (int wrong = 0; wrong < 2; wrong++) {
    encode1(s, VD_OP_EMBEDDING, &ids, &T0, &Y0, &ys, "start", 0);
    encode1(s, VD_OP_EMBEDDING, &ids, &T1, &Y1, &ys, "start", wrong ? 1 : 2);
    assert_int_equal(vd_smt_tensor_init(&Yr, &ys), VD_OK);
    assert_int_equal(vd_smt_tensor_init(&R1, &ys), VD_OK);
    const vd_smt_tensor *in[2] = {&Y0, &Y1};
    vd_smt_tensor *out[2] = {&Yr, &R1};
    encode(s, VD_OP_ALL_REDUCE, in, 2, out, 2, 2, NULL, 0);
    vd_smt_result r;
    vd_smt_verdict v = check(s, &Yr, &Y, &r);
    if (!wrong) {
      assert_int_equal(v, VD_SMT_EQUIVALENT);
    } else {
      assert_int_equal(v, VD_SMT_NOT_EQUIVALENT);
      /* The counterexample's id lands where the shards overlap or miss: 1..3. */
      const vd_smt_value *id = input_named(&r, r.diffs[0].index < 2 ? "ids[0]" : "ids[1]");
      assert_non_null(id);
      assert_true(id->value >= 1 && id->value <= 3);
    }
    vd_smt_result_free(&r);
    vd_smt_tensor *tmp[] = {&Y0, &Y1, &Yr, &R1};
    for (size_t i = 0; i < 4; i++) vd_smt_tensor_free(tmp[i]);
  }
  vd_smt_tensor *all[] = {&ids, &T, &T0, &T1, &Y};
  for (size_t i = 0; i < 5; i++) vd_smt_tensor_free(all[i]);
  vd_smt_free(s);
}

/* ---- inconclusive and errors ---------------------------------------------------- */

static void test_timeout_is_inconclusive(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_smt_set_timeout(s, 1);
  /* A true but hard nonlinear fact: ite(p <= -1, b, a) = a where p is a sum
   * of two Motzkin polynomials x^4y^2 + x^2y^4 + z^6 - 3x^2y^2z^2 (>= 0, but
   * not a sum of squares).  Without a timeout Z3 4.8.12 does not finish in
   * a minute; with 1 ms it must give up, and giving up is never
   * "equivalent".  (A smaller instance that Z3 proves in ~10 ms was flaky
   * here: Z3 checks its timer only between steps, so a fast proof can
   * complete after the deadline, and then "equivalent" is right.) */
  vd_term lhs, a;
  ts_motzkin(s, "x%d", &lhs, &a);
  vd_smt_result r;
  for (int fast = 1; fast >= 0; fast--) {
    vd_smt_set_fast_path(s, fast);
    assert_int_equal(vd_smt_check(s, &lhs, &a, 1, &r, NULL), VD_OK);
    assert_int_equal(r.verdict, VD_SMT_INCONCLUSIVE);
    assert_true(r.reason[0] != '\0');
    print_message("1 ms timeout: inconclusive (%s)\n", r.reason);
    vd_smt_result_free(&r);
  }
  vd_smt_free(s);
}

static void test_z3_error_is_rc(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_term x = vd_smt_var(s, "x");
  vd_term b = vd_smt_le(s, x, vd_smt_num_int(s, 0)); /* Bool */
  vd_smt_result r;
  assert_int_equal(vd_smt_check(s, &b, &x, 1, &r, &d), VD_EINTERNAL);
  assert_int_equal(r.verdict, VD_SMT_INCONCLUSIVE);
  assert_non_null(strstr(d.msg, "Z3"));
  assert_non_null(strstr(vd_smt_error(s), "incompatible"));
  /* Sticky: later constructors return NULL, status reports it. */
  assert_null(vd_smt_add(s, x, x));
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_status(s, &d, "after"), VD_EINTERNAL);
  assert_string_equal(d.record, "after");
  /* NaN constants are an error of ours, through the same path. */
  assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
  assert_null(vd_smt_num_double(s, NAN));
  assert_non_null(strstr(vd_smt_error(s), "NaN"));
  /* After a reset, the context works again. */
  assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
  x = vd_smt_var(s, "x");
  vd_term y = vd_smt_add(s, x, x), z = vd_smt_mul(s, vd_smt_num_int(s, 2), x);
  ts_expect_verdict(s, &y, &z, 1, VD_SMT_EQUIVALENT);
  /* An Int side against a Real side is compared as reals, both paths. */
  vd_term i = vd_smt_int_var(s, "i"), ir = vd_smt_add(s, vd_smt_num_int(s, 0), i);
  vd_term i1 = vd_smt_add(s, vd_smt_num_int(s, 1), i);
  for (int fast = 1; fast >= 0; fast--) {
    vd_smt_set_fast_path(s, fast);
    ts_expect_verdict(s, &i, &ir, 1, VD_SMT_EQUIVALENT);
    assert_int_equal(vd_smt_check(s, &i, &i1, 1, &r, NULL), VD_OK);
    assert_int_equal(r.verdict, VD_SMT_NOT_EQUIVALENT);
    assert_string_equal(r.inputs[0].name, "i");
    vd_smt_result_free(&r);
  }
  vd_smt_free(s);
}

static void test_exact_numerals(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  char buf[1200];
  double v;
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, 0.1), &v, buf, sizeof(buf)));
  assert_string_equal(buf, "3602879701896397/36028797018963968");
  assert_true(v == 0.1);
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, -2.5), &v, buf, sizeof(buf)));
  assert_string_equal(buf, "-5/2");
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, 1e20), &v, buf, sizeof(buf)));
  assert_string_equal(buf, "100000000000000000000");
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, 0x1p-1074), &v, buf, sizeof(buf)));
  assert_int_equal(strncmp(buf, "1/", 2), 0);
  assert_int_equal(strlen(buf), 2 + 324); /* 2^1074 has 324 digits */
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, 0x1.fffffffffffffp+1023), &v, buf, sizeof(buf)));
  assert_int_equal(strlen(buf), 309);
  assert_true(v == 0x1.fffffffffffffp+1023);
  assert_true(vd_smt_numeral(s, vd_smt_num_double(s, -0.0), &v, buf, sizeof(buf)));
  assert_string_equal(buf, "0");
  /* 0.1 + 0.2 != 0.3 on the exact rationals of the doubles */
  vd_term a = vd_smt_add(s, vd_smt_num_double(s, 0.1), vd_smt_num_double(s, 0.2)), b = vd_smt_num_double(s, 0.3);
  ts_expect_verdict(s, &a, &b, 1, VD_SMT_NOT_EQUIVALENT);
  vd_smt_free(s);
}

static void test_reset_bounds_terms(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  for (int i = 0; i < 130; i++) { /* crosses two context recreations */
    vd_term x = vd_smt_var(s, "x");
    vd_term y = vd_smt_add(s, x, vd_smt_num_int(s, i));
    assert_non_null(y);
    assert_true(vd_smt_term_count(s) >= 3);
    ts_expect_verdict(s, &y, &y, 1, VD_SMT_EQUIVALENT);
    assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
    assert_int_equal(vd_smt_term_count(s), 0);
  }
  vd_smt_free(s);
  vd_smt_free(NULL);
  vd_smt_result_free(NULL);
  vd_smt_tensor_free(NULL);
}

/* A Megatron TP2 MLP stage on reduced shapes: Y = gelu(X W1) W2 with W1
 * column-parallel, W2 row-parallel, partial outputs all-reduced; 8x8 output
 * (64 elements).  Proved by the fast path; timing reported. */
static void test_tp2_mlp_stage(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_diag d;
  vd_diag_clear(&d);
  vd_op_shape sx = shape2(8, 8), sw1 = shape2(8, 16), sw2 = shape2(16, 8), sh = shape2(8, 16), shh = shape2(8, 8);
  vd_smt_tensor X, W1, W2, H, G, Y, W1p[2], W2p[2], Hp[2], Gp[2], Yp[2], R[2];
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  assert_int_equal(vd_smt_tensor_vars(s, &X, &sx, "X", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &W1, &sw1, "W1", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &W2, &sw2, "W2", &d), VD_OK);
  encode1(s, VD_OP_MATMUL, &X, &W1, &H, &sh, NULL, 0);
  encode1(s, VD_OP_GELU, &H, NULL, &G, &sh, NULL, 0);
  encode1(s, VD_OP_MATMUL, &G, &W2, &Y, &sx, NULL, 0);
  for (int r = 0; r < 2; r++) {
    int64_t lo1[2] = {0, 8 * r}, hi1[2] = {8, 8 * r + 8}, lo2[2] = {8 * r, 0}, hi2[2] = {8 * r + 8, 8};
    assert_int_equal(vd_smt_tensor_slice(&W1, lo1, hi1, &W1p[r], &d), VD_OK);
    assert_int_equal(vd_smt_tensor_slice(&W2, lo2, hi2, &W2p[r], &d), VD_OK);
    encode1(s, VD_OP_MATMUL, &X, &W1p[r], &Hp[r], &shh, NULL, 0);
    encode1(s, VD_OP_GELU, &Hp[r], NULL, &Gp[r], &shh, NULL, 0);
    encode1(s, VD_OP_MATMUL, &Gp[r], &W2p[r], &Yp[r], &sx, NULL, 0);
    assert_int_equal(vd_smt_tensor_init(&R[r], &sx), VD_OK);
  }
  const vd_smt_tensor *in[2] = {&Yp[0], &Yp[1]};
  vd_smt_tensor *out[2] = {&R[0], &R[1]};
  encode(s, VD_OP_ALL_REDUCE, in, 2, out, 2, 2, NULL, 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double enc_ms = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
  vd_smt_result r;
  assert_int_equal(check(s, &R[1], &Y, &r), VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 1);
  double fast = r.ms_fast;
  vd_smt_result_free(&r);
  /* Without the all_reduce: one rank's partial output. */
  assert_int_equal(check(s, &Yp[0], &Y, &r), VD_SMT_NOT_EQUIVALENT);
  double bad_fast = r.ms_fast, bad_solver = r.ms_solver;
  vd_smt_result_free(&r);
  vd_smt_set_fast_path(s, 0);
  assert_int_equal(check(s, &R[1], &Y, &r), VD_SMT_EQUIVALENT);
  double slow = r.ms_solver;
  vd_smt_result_free(&r);
  print_message("TP2 MLP stage, 64 elements: encode %.2f ms, fast path %.2f ms, solver only %.2f ms; "
                "missing all_reduce: %.2f ms fast + %.2f ms solver to a counterexample\n",
                enc_ms, fast, slow, bad_fast, bad_solver);
  vd_smt_tensor *all[] = {&X, &W1, &W2, &H, &G, &Y};
  for (size_t i = 0; i < 6; i++) vd_smt_tensor_free(all[i]);
  for (int k = 0; k < 2; k++) {
    vd_smt_tensor *t[] = {&W1p[k], &W2p[k], &Hp[k], &Gp[k], &Yp[k], &R[k]};
    for (size_t i = 0; i < 6; i++) vd_smt_tensor_free(t[i]);
  }
  vd_smt_free(s);
}

/* One context per thread (the verifier's OpenMP loop): contexts do not
 * interfere, verdicts are the same in every thread. */
static void test_one_context_per_thread(void **state) {
  (void)state;
  int verdicts[8] = {0};
#pragma omp parallel for num_threads(2) schedule(static)
  for (int i = 0; i < 8; i++) {
    vd_smt *s = NULL;
    if (vd_smt_new(&s, NULL) != VD_OK) {
      verdicts[i] = -1;
      continue;
    }
    vd_smt_set_fast_path(s, i % 2);
    vd_smt_tensor par, single;
    build_matmul_stage(s, &par, &single, i % 4 != 3);
    vd_smt_result r;
    verdicts[i] = vd_smt_check(s, par.t, single.t, (size_t)par.numel, &r, NULL) == VD_OK ? (int)r.verdict : -1;
    vd_smt_result_free(&r);
    vd_smt_tensor_free(&par);
    vd_smt_tensor_free(&single);
    vd_smt_free(s);
  }
  for (int i = 0; i < 8; i++)
    assert_int_equal(verdicts[i], i % 4 != 3 ? VD_SMT_EQUIVALENT : VD_SMT_NOT_EQUIVALENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reassociated_sum_fast_path),
      cmocka_unit_test(test_matmul_split_all_reduce),
      cmocka_unit_test(test_matmul_stage_timing),
      cmocka_unit_test(test_softmax_replica_and_slice),
      cmocka_unit_test(test_wrong_constant_counterexample),
      cmocka_unit_test(test_missing_all_reduce),
      cmocka_unit_test(test_partial_parts),
      cmocka_unit_test(test_vocab_parallel_embedding),
      cmocka_unit_test(test_timeout_is_inconclusive),
      cmocka_unit_test(test_z3_error_is_rc),
      cmocka_unit_test(test_exact_numerals),
      cmocka_unit_test(test_reset_bounds_terms),
      cmocka_unit_test(test_one_context_per_thread),
      cmocka_unit_test(test_tp2_mlp_stage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
