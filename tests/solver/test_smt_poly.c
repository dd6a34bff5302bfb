/*
 * tests/solver/test_smt_poly.c - the polynomial normal form (solver/smt_poly.c)
 * and the deterministic limits of the check (solver/smt_check.c): ring
 * identities proved by the normal form alone, congruence through
 * uninterpreted applications, numerals and division by numerals, the TP
 * partial grouped-MLP identity of issue 14, non-identities never proved,
 * step counts independent of the context's history, the budget and the
 * wall clock each reported as the limit hit, and never EQUIVALENT; sums
 * regrouped over microbatches and replicas proved in linear work; the
 * laws of exp and log (solver/smt_poly_laws.c: Megatron's max-shifted
 * log-sum-exp and softmax, exp of a log-softmax) and the indicator form of
 * lookups under a label's range, with the non-identities they must not prove.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../solver/smt.h"
#include "../support/smt_cases.h"

static vd_term var(vd_smt *s, const char *fmt, int i, int j) {
  char nm[64];
  snprintf(nm, sizeof(nm), fmt, i, j);
  return vd_smt_var(s, nm);
}

/* Normal-form ids of a and b (must not run out of budget). */
static void nf_ids(vd_smt *s, vd_term a, vd_term b, int64_t *ia, int64_t *ib) {
  vd_smt_nf *nf = NULL;
  assert_int_equal(vd_smt_nf_new(&nf, s, 0), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, a, ia), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, b, ib), VD_OK);
  assert_true(*ia >= 0 && *ib >= 0);
  vd_smt_nf_free(nf);
}

static vd_term ex(vd_smt *s, vd_term x) { return vd_smt_uf(s, "exp", 1, &x); }
static vd_term lg(vd_smt *s, vd_term x) { return vd_smt_uf(s, "log", 1, &x); }

static void test_exp_log_laws(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term x[4], m = vd_smt_var(s, "M");
  for (int i = 0; i < 4; i++) x[i] = var(s, "x%d", i, 0);
  int64_t a, b;
  /* the reference's log-sum-exp, and the vocab-parallel one: two shards, each shifted by M */
  vd_term ref = NULL, sh[2] = {NULL, NULL};
  for (int i = 0; i < 4; i++) {
    vd_term e = ex(s, x[i]), es = ex(s, vd_smt_sub(s, x[i], m));
    ref = ref ? vd_smt_add(s, ref, e) : e;
    sh[i / 2] = sh[i / 2] ? vd_smt_add(s, sh[i / 2], es) : es;
  }
  vd_term shifted = vd_smt_add(s, sh[0], sh[1]);
  nf_ids(s, vd_smt_add(s, lg(s, shifted), m), lg(s, ref), &a, &b);
  assert_int_equal(a, b);
  /* the softmax of the backward: exp(x - M) / sum exp(x - M) = exp(x) / sum exp(x) */
  nf_ids(s, vd_smt_div(s, ex(s, vd_smt_sub(s, x[1], m)), shifted), vd_smt_div(s, ex(s, x[1]), ref), &a, &b);
  assert_int_equal(a, b);
  /* the exp of a log-softmax: exp(x - log S) = exp(x) / S, also with a count scale 4 S */
  nf_ids(s, ex(s, vd_smt_sub(s, x[2], lg(s, ref))), vd_smt_div(s, ex(s, x[2]), ref), &a, &b);
  assert_int_equal(a, b);
  vd_term four_ref = vd_smt_mul(s, vd_smt_num_int(s, 4), ref);
  nf_ids(s, ex(s, vd_smt_sub(s, x[2], lg(s, four_ref))), vd_smt_div(s, ex(s, x[2]), four_ref), &a, &b);
  assert_int_equal(a, b);
  /* log(exp(a) exp(b)) = a + b; exp(a) exp(-a) = 1 */
  nf_ids(s, lg(s, vd_smt_mul(s, ex(s, x[0]), ex(s, x[1]))), vd_smt_add(s, x[0], x[1]), &a, &b);
  assert_int_equal(a, b);
  nf_ids(s, vd_smt_mul(s, ex(s, x[0]), ex(s, vd_smt_neg(s, x[0]))), vd_smt_num_int(s, 1), &a, &b);
  assert_int_equal(a, b);
  /* not laws: log(a b) for a of unknown sign, log(a + b), exp(a) exp(b) against exp(a b) */
  nf_ids(s, lg(s, vd_smt_mul(s, x[0], ex(s, x[1]))), vd_smt_add(s, lg(s, x[0]), x[1]), &a, &b);
  assert_true(a != b);
  nf_ids(s, lg(s, vd_smt_add(s, x[0], x[1])), vd_smt_add(s, lg(s, x[0]), lg(s, x[1])), &a, &b);
  assert_true(a != b);
  nf_ids(s, vd_smt_mul(s, ex(s, x[0]), ex(s, x[1])), ex(s, vd_smt_mul(s, x[0], x[1])), &a, &b);
  assert_true(a != b);
  /* a missing shift is no identity: log(sum exp(x - M)) against log(sum exp x) */
  nf_ids(s, lg(s, shifted), lg(s, ref), &a, &b);
  assert_true(a != b);
  vd_smt_free(s);
}

/* ite(l = lo, v[0], ite(l = lo + 1, v[1], ... 0)): the registry's lookup. */
static vd_term lookup(vd_smt *s, vd_term l, int lo, int n, const vd_term *v) {
  vd_term acc = vd_smt_num_int(s, 0);
  for (int k = n - 1; k >= 0; k--) acc = vd_smt_ite(s, vd_smt_eq(s, l, vd_smt_int_num(s, lo + k)), v[k], acc);
  return acc;
}

static void test_indicator_lookups(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term v[4], l = vd_smt_int_var(s, "label"), m = vd_smt_var(s, "M");
  for (int i = 0; i < 4; i++) v[i] = var(s, "v%d", i, 0);
  int64_t a, b;
  /* the lookups over two shards sum to the lookup over all classes, with or without a range */
  vd_term whole = lookup(s, l, 0, 4, v), shards = vd_smt_add(s, lookup(s, l, 0, 2, v), lookup(s, l, 2, 2, v + 2));
  nf_ids(s, shards, whole, &a, &b);
  assert_int_equal(a, b);
  /* Megatron's target logit: sum over shards of lookup(x - M) = lookup(x) - M, only for a valid label */
  vd_term vm[4];
  for (int i = 0; i < 4; i++) vm[i] = vd_smt_sub(s, v[i], m);
  vd_term shifted = vd_smt_add(s, lookup(s, l, 0, 2, vm), lookup(s, l, 2, 2, vm + 2));
  vd_term want = vd_smt_sub(s, whole, m);
  nf_ids(s, shifted, want, &a, &b);
  assert_true(a != b); /* a label past the vocabulary gives 0, not -M */
  ts_expect_verdict(s, &shifted, &want, 1, VD_SMT_NOT_EQUIVALENT);
  vd_smt_note_index_range(s, l, 0, 4);
  nf_ids(s, shifted, want, &a, &b);
  assert_int_equal(a, b);
  ts_expect_verdict(s, &shifted, &want, 1, VD_SMT_EQUIVALENT);
  /* the range is no licence: a lookup over a shard is still not the whole lookup */
  vd_term half = lookup(s, l, 0, 2, v);
  nf_ids(s, half, whole, &a, &b);
  assert_true(a != b);
  ts_expect_verdict(s, &half, &whole, 1, VD_SMT_NOT_EQUIVALENT);
  vd_smt_free(s);
}

static void test_ring_identities(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term a = vd_smt_var(s, "a"), b = vd_smt_var(s, "b"), c = vd_smt_var(s, "c");
  int64_t x, y;
  /* (a + b)(a - b) = a^2 - b^2 */
  nf_ids(s, vd_smt_mul(s, vd_smt_add(s, a, b), vd_smt_sub(s, a, b)),
         vd_smt_sub(s, vd_smt_mul(s, a, a), vd_smt_mul(s, b, b)), &x, &y);
  assert_int_equal(x, y);
  /* c (a + b) + 0 = b c + c a */
  nf_ids(s, vd_smt_add(s, vd_smt_mul(s, c, vd_smt_add(s, a, b)), vd_smt_num_int(s, 0)),
         vd_smt_add(s, vd_smt_mul(s, b, c), vd_smt_mul(s, c, a)), &x, &y);
  assert_int_equal(x, y);
  /* a / 4 = 0.25 a, and -(-a) = a */
  nf_ids(s, vd_smt_div(s, a, vd_smt_num_int(s, 4)), vd_smt_mul(s, vd_smt_num_double(s, 0.25), a), &x, &y);
  assert_int_equal(x, y);
  nf_ids(s, vd_smt_neg(s, vd_smt_neg(s, a)), a, &x, &y);
  assert_int_equal(x, y);
  /* congruence: exp(a + b) = exp(b + a), keyed by the argument's normal form */
  vd_term ab = vd_smt_add(s, a, b), ba = vd_smt_add(s, b, a);
  nf_ids(s, vd_smt_uf(s, "exp", 1, &ab), vd_smt_uf(s, "exp", 1, &ba), &x, &y);
  assert_int_equal(x, y);
  /* ite with equal branches, comparisons folded on numerals */
  nf_ids(s, vd_smt_ite(s, vd_smt_le(s, a, b), vd_smt_add(s, a, c), vd_smt_add(s, c, a)), vd_smt_add(s, a, c), &x, &y);
  assert_int_equal(x, y);
  vd_smt_free(s);
}

static void test_non_identities_differ(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term a = vd_smt_var(s, "a"), b = vd_smt_var(s, "b");
  int64_t x, y;
  /* (a + b)^2 != a^2 + b^2: different normal forms, and the check refutes it */
  vd_term l = vd_smt_pow_int(s, vd_smt_add(s, a, b), 2), r = vd_smt_add(s, vd_smt_mul(s, a, a), vd_smt_mul(s, b, b));
  nf_ids(s, l, r, &x, &y);
  assert_true(x != y);
  ts_expect_verdict(s, &l, &r, 1, VD_SMT_NOT_EQUIVALENT);
  /* exp(a) vs exp(b): different atoms */
  nf_ids(s, vd_smt_uf(s, "exp", 1, &a), vd_smt_uf(s, "exp", 1, &b), &x, &y);
  assert_true(x != y);
  /* 2a vs a + a + 1e-300: exact coefficients, no rounding */
  nf_ids(s, vd_smt_mul(s, vd_smt_num_int(s, 2), a), vd_smt_add(s, vd_smt_add(s, a, a), vd_smt_num_double(s, 1e-300)),
         &x, &y);
  assert_true(x != y);
  vd_smt_free(s);
}

/* The stage of issue 14: y = sum_e g_e sum_j w2[e,j] silu(w1[e,j] . x) (w3[e,j] . x)
 * over F hidden units, against the sum of P partial results each over F/P of
 * them (TP partial grouped MLP).  silu is uninterpreted here. */
static vd_term grouped_mlp(vd_smt *s, int E, int j_lo, int j_hi, int H, const vd_term *x) {
  vd_term acc = NULL;
  for (int e = 0; e < E; e++) {
    vd_term inner = NULL;
    for (int j = j_lo; j < j_hi; j++) {
      vd_term a = NULL, b = NULL;
      for (int h = 0; h < H; h++) {
        vd_term t1 = vd_smt_mul(s, var(s, "w1_%d_%d", e * 64 + j, h), x[h]);
        vd_term t3 = vd_smt_mul(s, var(s, "w3_%d_%d", e * 64 + j, h), x[h]);
        a = a ? vd_smt_add(s, a, t1) : t1;
        b = b ? vd_smt_add(s, b, t3) : t3;
      }
      vd_term hd = vd_smt_mul(s, vd_smt_uf(s, "silu", 1, &a), b);
      vd_term t = vd_smt_mul(s, var(s, "w2_%d_%d", e, j), hd);
      inner = inner ? vd_smt_add(s, inner, t) : t;
    }
    vd_term t = vd_smt_mul(s, var(s, "g%d_%d", e, 0), inner);
    acc = acc ? vd_smt_add(s, acc, t) : t;
  }
  return acc;
}
static void moe_pair(vd_smt *s, int E, int F, int P, int H, vd_term *par, vd_term *single) {
  vd_term x[8];
  for (int h = 0; h < H; h++) x[h] = var(s, "x%d", h, 0);
  vd_term parts[8] = {0};
  vd_term total = NULL;
  for (int p = 0; p < P; p++) parts[p] = grouped_mlp(s, E, p * (F / P), (p + 1) * (F / P), H, x);
  for (int p = 0; p < P; p++) total = total ? vd_smt_add(s, total, parts[p]) : parts[p];
  *par = total;
  *single = grouped_mlp(s, E, 0, F, H, x); /* the same with one shard */
}

static void test_tp_partial_grouped_mlp(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term par, single;
  moe_pair(s, 4, 8, 4, 2, &par, &single);
  vd_smt_result r;
  assert_int_equal(vd_smt_check(s, &par, &single, 1, &r, NULL), VD_OK);
  assert_int_equal(r.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(r.by_fast_path, 1); /* the normal form alone, no solver */
  assert_true(r.nf_steps > 0 && !r.nf_gave_up);
  uint64_t steps = r.nf_steps;
  vd_smt_result_free(&r);
  /* Deterministic work: another context, with a different history of
   * terms (other ids), counts the same steps. */
  vd_smt *s2 = ts_new_smt();
  for (int i = 0; i < 100; i++) (void)var(s2, "noise%d_%d", i, 0);
  moe_pair(s2, 4, 8, 4, 2, &par, &single);
  assert_int_equal(vd_smt_check(s2, &par, &single, 1, &r, NULL), VD_OK);
  assert_int_equal(r.verdict, VD_SMT_EQUIVALENT);
  assert_true(r.nf_steps == steps);
  vd_smt_result_free(&r);
  /* A dropped shard (one partial result missing) is refuted. */
  vd_smt_reset(s2, NULL);
  moe_pair(s2, 4, 8, 4, 2, &par, &single);
  vd_term wrong = vd_smt_sub(s2, par, vd_smt_mul(s2, var(s2, "g%d_%d", 0, 0), var(s2, "w2_%d_%d", 0, 0)));
  assert_int_equal(vd_smt_check(s2, &wrong, &single, 1, &r, NULL), VD_OK);
  assert_int_equal(r.verdict, VD_SMT_NOT_EQUIVALENT);
  vd_smt_result_free(&r);
  vd_smt_free(s2);
  vd_smt_free(s);
}

static void motzkin_stops_at(vd_smt *s, vd_smt_limit limit, vd_smt_result *res) {
  vd_term l, r;
  ts_motzkin(s, "m%d_0", &l, &r); /* true, but beyond Z3 */
  assert_int_equal(vd_smt_check(s, &l, &r, 1, res, NULL), VD_OK);
  assert_int_equal(res->verdict, VD_SMT_INCONCLUSIVE);
  assert_int_equal(res->limit, limit);
}

static void test_budget_is_the_limit(void **state) {
  (void)state;
  uint64_t used[2];
  for (int run = 0; run < 2; run++) {
    vd_smt *s = ts_new_smt();
    vd_smt_set_timeout(s, 0);          /* no wall clock: the budget alone must stop it */
    vd_smt_set_budget(s, 0, 20000);    /* Z3: 20000 resource units */
    vd_smt_result res;
    motzkin_stops_at(s, VD_SMT_LIMIT_BUDGET, &res);
    assert_true(res.rlimit_used >= 20000);
    used[run] = res.rlimit_used;
    vd_smt_result_free(&res);
    vd_smt_free(s);
  }
  /* The same question stops at the same count (fresh context per check). */
  assert_true(used[0] == used[1]);
  /* A normal-form budget too small for the terms stops the check there
   * (inconclusive, the budget named); without the normal form, the solver
   * decides (here: proves) the same pair. */
  vd_smt *s = ts_new_smt();
  vd_smt_set_budget(s, 5, 0);
  vd_term a = vd_smt_var(s, "a"), b = vd_smt_var(s, "b");
  vd_term l = vd_smt_mul(s, vd_smt_add(s, a, b), vd_smt_add(s, a, b));
  vd_term r = vd_smt_add(s, vd_smt_add(s, vd_smt_mul(s, a, a), vd_smt_mul(s, vd_smt_num_int(s, 2), vd_smt_mul(s, a, b))),
                         vd_smt_mul(s, b, b));
  vd_smt_result res;
  assert_int_equal(vd_smt_check(s, &l, &r, 1, &res, NULL), VD_OK);
  assert_int_equal(res.nf_gave_up, 1);
  assert_int_equal(res.verdict, VD_SMT_INCONCLUSIVE);
  assert_int_equal(res.limit, VD_SMT_LIMIT_BUDGET);
  assert_non_null(strstr(res.reason, "normal form out of budget"));
  vd_smt_result_free(&res);
  vd_smt_set_fast_path(s, 0);
  ts_expect_verdict(s, &l, &r, 1, VD_SMT_EQUIVALENT);
  vd_smt_free(s);
}

static void test_wall_clock_is_the_limit(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_smt_set_budget(s, 0, 0); /* unlimited: only the wall clock stops it */
  vd_smt_set_timeout(s, 50);
  vd_smt_result res;
  motzkin_stops_at(s, VD_SMT_LIMIT_WALL, &res);
  assert_non_null(strstr(res.reason, "wall-clock"));
  vd_smt_result_free(&res);
  /* The context is usable afterwards (the job had its own). */
  vd_term a = vd_smt_var(s, "a");
  vd_term y = vd_smt_add(s, a, a), z = vd_smt_mul(s, vd_smt_num_int(s, 2), a);
  ts_expect_verdict(s, &y, &z, 1, VD_SMT_EQUIVALENT);
  vd_smt_free(s);
}

/* sum over k microbatches and r replicas of (scale * per-token products of
 * sums), accumulated one microbatch at a time, against the single side's
 * flat sum over every token of the same products: a weight gradient.
 * wrong != 0 drops the last token's term from the parallel side. */
static void accumulation(vd_smt *s, int k, int r, int wrong, vd_term *par, vd_term *single) {
  vd_term flat[256], reps[16];
  int n = 0;
  for (int d = 0; d < r; d++) {
    vd_term acc = NULL;
    for (int m = 0; m < k; m++) {
      /* (a + b)(c + e) per token: a product of sums, never expanded by pass 0 */
      vd_term t = vd_smt_mul(s, vd_smt_add(s, var(s, "a%d_%d", d, m), var(s, "b%d_%d", d, m)),
                             vd_smt_add(s, var(s, "c%d_%d", d, m), var(s, "e%d_%d", d, m)));
      flat[n++] = t;
      if (wrong && d == r - 1 && m == k - 1) continue;
      acc = acc ? vd_smt_add(s, acc, t) : t;
    }
    /* the reducer averages, the single side's loss scales by the same 1/r */
    reps[d] = vd_smt_mul(s, vd_smt_num_double(s, 0.5), acc);
  }
  *par = vd_smt_mul(s, vd_smt_num_int(s, 2), vd_smt_sum(s, (size_t)r, reps));
  *single = vd_smt_sum(s, (size_t)n, flat);
}

static void test_accumulation_cheap(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term p, q;
  accumulation(s, 16, 8, 0, &p, &q);
  vd_smt_result res;
  assert_int_equal(vd_smt_check(s, &p, &q, 1, &res, NULL), VD_OK);
  assert_int_equal(res.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(res.by_fast_path, 1);
  /* linear in the 128 terms (pass 0 walks both sums once), not the
   * quadratic accumulation nor the 512 expanded monomials */
  assert_true(res.nf_steps < 2000);
  uint64_t steps = res.nf_steps;
  vd_smt_result_free(&res);
  /* flattening alone: the structural and full passes on the same chain,
   * through vd_smt_nf_prepare, give the ids the plain form gives */
  vd_smt_nf *nf = NULL;
  int64_t a = -1, b = -1, a2 = -1, b2 = -1;
  assert_int_equal(vd_smt_nf_new(&nf, s, 0), VD_OK);
  vd_term roots[2] = {p, q};
  assert_int_equal(vd_smt_nf_prepare(nf, roots, 2), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, p, &a), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, q, &b), VD_OK);
  uint64_t flat_steps = vd_smt_nf_steps(nf);
  vd_smt_nf_free(nf);
  assert_int_equal(vd_smt_nf_new(&nf, s, 0), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, p, &a2), VD_OK);
  assert_int_equal(vd_smt_nf_of(nf, q, &b2), VD_OK);
  uint64_t plain_steps = vd_smt_nf_steps(nf);
  vd_smt_nf_free(nf);
  assert_true(a >= 0 && a == b && a2 >= 0 && a2 == b2);
  assert_true(flat_steps < plain_steps);
  /* a missing term is never proved by any pass; the witness refutes it */
  accumulation(s, 16, 8, 1, &p, &q);
  ts_expect_verdict(s, &p, &q, 1, VD_SMT_NOT_EQUIVALENT);
  /* a wrong factor (the average not undone) neither */
  accumulation(s, 16, 8, 0, &p, &q);
  vd_term p3 = vd_smt_mul(s, vd_smt_num_double(s, 0.5), p);
  ts_expect_verdict(s, &p3, &q, 1, VD_SMT_NOT_EQUIVALENT);
  print_message("accumulation: %llu steps (pass 0), nf %llu flattened vs %llu\n", (unsigned long long)steps,
                (unsigned long long)flat_steps, (unsigned long long)plain_steps);
  vd_smt_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ring_identities),
      cmocka_unit_test(test_non_identities_differ),
      cmocka_unit_test(test_tp_partial_grouped_mlp),
      cmocka_unit_test(test_budget_is_the_limit),
      cmocka_unit_test(test_wall_clock_is_the_limit),
      cmocka_unit_test(test_accumulation_cheap),
      cmocka_unit_test(test_exp_log_laws),
      cmocka_unit_test(test_indicator_lookups),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
