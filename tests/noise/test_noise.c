/*
 * tests/noise/test_noise.c - rounding bounds (noise/): the floating-point
 * model's constants; on generated mlp pairs in noise mode, the tensors that
 * must be bit-identical (initial values, data movement of them) are marked
 * and the ones a reassociated sum produces are not; the bounds grow with the
 * number of partial sums (dp 2 -> 4) and with the unit roundoff (fp64 <
 * fp32 < fp16 < bf16, tensor by tensor; fewer bit-identical marks in low
 * precision, never more); and the dump reader refuses bad
 * files naming the line and the field.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../noise/noise.h"
#include "../../gen/gen.h"
#include "../support/fault.h"
#include "../support/files.h"
#include "../support/pipeline.h"

static void test_prec(void **st) {
  (void)st;
  assert_true(vd_noise_unit(VD_NOISE_BF16) == ldexp(1.0, -8));
  assert_true(vd_noise_unit(VD_NOISE_FP16) == ldexp(1.0, -11));
  assert_true(vd_noise_unit(VD_NOISE_FP32) == ldexp(1.0, -24));
  assert_true(vd_noise_unit(VD_NOISE_FP64) == ldexp(1.0, -53));
  assert_true(vd_noise_unit_of_dtype(VD_DT_I64) == 0.0);
  vd_noise_prec p;
  assert_true(vd_noise_prec_parse("bfloat16", &p) && p == VD_NOISE_BF16);
  assert_false(vd_noise_prec_parse("fp8", &p));
  double u = vd_noise_unit(VD_NOISE_FP32);
  assert_true(fabs(vd_noise_gamma(10, u) - 10 * u / (1 - 10 * u)) < 1e-20);
  assert_true(isinf(vd_noise_gamma(1e9, vd_noise_unit(VD_NOISE_BF16))));
}

/* Runs noise mode on a generated mlp pair. */
static void run_mlp_batch(int64_t dp, int64_t tp, int64_t batch, vd_noise_prec prec, vd_noise_result *r) {
  vd_gen_config c;
  tp_gen_config(&c, &(tp_sizes){VD_GEN_MLP, .layers = 1, .hidden = 16, .batch = batch, .dp = dp, .tp = tp});
  vd_plan_t s, p;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_gen_build(&c, &s, &p, &d), VD_OK);
  vd_noise_opts o = {.dtype = prec, .accum = VD_NOISE_PLAN, .scale = 1.0, .lambda = 3.0, .seed = 7};
  assert_int_equal(vd_noise_run(&s, &p, NULL, NULL, &o, r, &d), VD_OK);
  vd_plan_free(&s);
  vd_plan_free(&p);
}

static void run_mlp(int64_t dp, int64_t tp, vd_noise_prec prec, vd_noise_result *r) {
  run_mlp_batch(dp, tp, 8, prec, r);
}

static size_t count_bitid(const vd_noise_result *r, const char *family) {
  size_t n = 0;
  for (size_t i = 0; i < r->n_rows; i++) n += !strcmp(r->rows[i].family, family) && r->rows[i].bitid;
  return n;
}

/* A float32 GEMM over half the rows keeps each row's order when both row counts are large enough
 * (PyTorch 2's blocked kernels): DP's forward stays bit-identical at 32 rows a replica, and is
 * not at 4 (small-matrix paths sum in another order).  In bfloat16 it never is. */
static void test_gemm_rows(void **st) {
  (void)st;
  vd_noise_result big, small, low;
  run_mlp_batch(2, 1, 64, VD_NOISE_FP32, &big);
  run_mlp_batch(2, 1, 8, VD_NOISE_FP32, &small);
  run_mlp_batch(2, 1, 64, VD_NOISE_BF16, &low);
  size_t nf = 0;
  for (size_t i = 0; i < big.n_rows; i++) nf += !strcmp(big.rows[i].family, "fwd");
  assert_true(nf > 2);
  assert_int_equal(count_bitid(&big, "fwd"), nf);
  assert_true(count_bitid(&small, "fwd") < nf);
  assert_true(count_bitid(&low, "fwd") < nf);
  vd_noise_result_free(&big);
  vd_noise_result_free(&small);
  vd_noise_result_free(&low);
}

static void test_bitid_marks(void **st) {
  (void)st;
  vd_noise_result r;
  run_mlp(2, 2, VD_NOISE_FP32, &r);
  assert_true(r.n_rows > 10);
  size_t n_init = 0, n_sum = 0;
  for (size_t i = 0; i < r.n_rows; i++) {
    const vd_noise_row *w = &r.rows[i];
    assert_int_equal(w->status, VD_NOISE_BOUND);
    assert_true(w->observed < 0);
    if (w->initial) { /* inputs and weights as given: the very same values on both sides */
      assert_true(w->bitid);
      assert_true(w->realistic == 0 && w->worst == 0);
      n_init++;
    }
    if (!w->bitid) { /* computed another way: a positive bound, the worst case above one sigma */
      assert_true(w->realistic > 0);
      assert_true(w->worst > 0);
      n_sum++;
    }
  }
  assert_true(n_init > 0);
  assert_true(n_sum > 0);
  /* the updated weights come from DP-reduced gradients: never bit-identical */
  int upd = 0;
  for (size_t i = 0; i < r.n_rows; i++)
    if (!strcmp(r.rows[i].family, "update")) {
      assert_false(r.rows[i].bitid);
      upd++;
    }
  assert_true(upd > 0);
  vd_noise_result_free(&r);
}

static double max_realistic(const vd_noise_result *r, const char *family) {
  double m = 0;
  for (size_t i = 0; i < r->n_rows; i++)
    if (!strcmp(r->rows[i].family, family) && r->rows[i].realistic > m) m = r->rows[i].realistic;
  return m;
}

static void test_monotone_k(void **st) {
  (void)st;
  vd_noise_result a, b;
  run_mlp(2, 1, VD_NOISE_FP32, &a);
  run_mlp(4, 1, VD_NOISE_FP32, &b);
  /* the gradients are sums of 2, then 4 replicas' partial sums: their bound grows (the updates'
     bounds are dominated by the forward matmuls on a replica's rows, which round otherwise than
     the single plan's whatever the replica count, noise/prop.c) */
  double ua = max_realistic(&a, "bwd"), ub = max_realistic(&b, "bwd");
  assert_true(ua > 0);
  assert_true(ub > ua);
  vd_noise_result_free(&a);
  vd_noise_result_free(&b);
}

static void test_monotone_dtype(void **st) {
  (void)st;
  vd_noise_prec ps[4] = {VD_NOISE_FP64, VD_NOISE_FP32, VD_NOISE_FP16, VD_NOISE_BF16};
  vd_noise_result r[4];
  for (int k = 0; k < 4; k++) run_mlp(2, 2, ps[k], &r[k]);
  for (int k = 1; k < 4; k++) {
    assert_int_equal(r[k].n_rows, r[0].n_rows);
    for (size_t i = 0; i < r[k].n_rows; i++) {
      assert_int_equal(r[k].rows[i].id, r[k - 1].rows[i].id);
      /* low precision marks fewer tensors bit-identical (its kernels' shape-dependent paths) */
      assert_false(r[k].rows[i].bitid && !r[k - 1].rows[i].bitid);
      assert_true(r[k].rows[i].realistic >= r[k - 1].rows[i].realistic);
      assert_true(r[k].rows[i].worst >= r[k - 1].rows[i].worst || isnan(r[k].rows[i].worst));
      if (r[k - 1].rows[i].realistic > 0) assert_true(r[k].rows[i].realistic > r[k - 1].rows[i].realistic);
    }
  }
  for (int k = 0; k < 4; k++) vd_noise_result_free(&r[k]);
}

/* ---- dumps ---------------------------------------------------------------- */

static vd_rc read_text(const char *text, vd_noise_dump **out, vd_diag *d) {
  char path[] = "/tmp/vd_noise_dump_XXXXXX";
  tfile_temp_text(path, text);
  vd_diag_clear(d);
  vd_rc rc = vd_noise_dump_read(path, out, d);
  unlink(path);
  return rc;
}

static void test_dump_read(void **st) {
  (void)st;
  vd_noise_dump *dp = NULL;
  vd_diag d;
  assert_int_equal(read_text("verdict-dump 1 parallel\nv 5 1 last 3 1 2.5 -3e-2\nv 5 1 first 1 nan\n", &dp, &d),
                   VD_OK);
  int64_t n = 0;
  const double *x = vd_noise_dump_get(dp, 5, 1, 1, &n);
  assert_non_null(x);
  assert_int_equal(n, 3);
  assert_true(x[1] == 2.5 && x[2] == -3e-2);
  assert_non_null(vd_noise_dump_get(dp, 5, 1, 0, &n));
  assert_null(vd_noise_dump_get(dp, 5, 0, 1, &n));
  assert_string_equal(vd_noise_dump_kind(dp), "parallel");
  vd_noise_dump_free(dp);

  static const struct {
    const char *text, *record, *field;
  } bad[] = {
      {"verdict-dump 2 single\n", "line 1", "header"},
      {"", "line 1", "header"},
      {"verdict-dump 1 single\nv 1 0 last 3 1 2\n", "line 2", "values"},
      {"verdict-dump 1 single\nv 1 0 last 1 1 2\n", "line 2", "values"},
      {"verdict-dump 1 single\nv 1 0 final 1 1\n", "line 2", "moment"},
      {"verdict-dump 1 single\nv x 0 last 1 1\n", "line 2", "id"},
      {"verdict-dump 1 single\nv 1 0 last 1 abc\n", "line 2", "values"},
      {"verdict-dump 1 single\nv 1 0 last 1 1\nv 1 0 last 1 2\n", "line 3", "id"},
      {"verdict-dump 1 single\nw 1 0 last 1 1\n", "line 2", "record"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    dp = NULL;
    assert_int_equal(read_text(bad[i].text, &dp, &d), VD_EINPUT);
    assert_null(dp);
    assert_string_equal(d.record, bad[i].record);
    assert_string_equal(d.field, bad[i].field);
  }
  dp = NULL;
  vd_diag_clear(&d);
  assert_int_equal(vd_noise_dump_read("/nonexistent/dump", &dp, &d), VD_EINPUT);
}

/* Every allocation of a noise run may fail: VD_ENOMEM with a diag, nothing
 * leaked (tf_fail_each checks the allocator's counters). */
static vd_rc fault_run(void *ctx, vd_diag *d) {
  (void)ctx;
  vd_gen_config c;
  tp_gen_config(&c, &(tp_sizes){VD_GEN_MLP, .layers = 1, .hidden = 8, .batch = 4, .tp = 2});
  vd_plan_t s, p;
  memset(&s, 0, sizeof(s));
  memset(&p, 0, sizeof(p));
  vd_rc rc = vd_gen_build(&c, &s, &p, d);
  if (rc == VD_OK) {
    vd_noise_opts o = {.dtype = VD_NOISE_FP32};
    vd_noise_result r;
    rc = vd_noise_run(&s, &p, NULL, NULL, &o, &r, d);
    vd_noise_result_free(&r);
  }
  vd_plan_free(&s);
  vd_plan_free(&p);
  return rc;
}

static void test_fault(void **st) {
  (void)st;
  long n = 0;
  assert_int_equal(tf_fail_each(fault_run, NULL, NULL, 1, &n), VD_OK);
  assert_true(n > 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prec),        cmocka_unit_test(test_bitid_marks), cmocka_unit_test(test_gemm_rows), cmocka_unit_test(test_monotone_k),
      cmocka_unit_test(test_monotone_dtype), cmocka_unit_test(test_dump_read),
      cmocka_unit_test(test_fault),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
