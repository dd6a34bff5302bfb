/*
 * solver/smt_check.c - the equivalence check of one proof obligation: given
 * pairs (parallel term, single term), decide whether every pair is equal
 * for all values of the free symbols and all interpretations of the
 * uninterpreted functions, and if not, produce a counterexample.
 *
 * Paths, in order (docs/verifier.md section 4.2):
 *  1. The polynomial normal form (smt_poly.c): both sides of every pair are
 *     normalised in one shared, hash-consed table under a deterministic
 *     step budget; equal ids are a proof (SOUNDNESS in smt_poly.c).
 *  2. OPTIMIZATION-ONLY: the random witness: a few concrete interpretations
 *     that may exhibit a difference (a genuine counterexample).
 *  3. The job: the still-open pairs are translated into a FRESH Z3 context
 *     (so the solver's behaviour depends on the query only, not on what the
 *     thread solved before) and run on a helper thread: Z3's simplifier
 *     normal form ("som"), then the solver on the disjunction of the
 *     disequalities, under Z3's deterministic resource limit (rlimit).
 *     unsat -> equivalent; sat -> not equivalent with the model; unknown ->
 *     inconclusive.  The calling thread waits up to the wall-clock limit,
 *     then interrupts Z3, and if Z3 has not returned after a grace period,
 *     abandons the job: the helper thread keeps the fresh context, frees it
 *     when Z3 finally returns, and nothing of the stage waits for it.
 * Files: this one (the entry and the fast path), smt_check_model.c,
 * smt_check_job.c, smt_check_witness.c; smt_check_int.h what they share.
 * SOUNDNESS: "equivalent" is returned only on an identical normal form, an
 * identical Z3 simplified form, or unsat; "unknown", an exhausted budget,
 * an interruption or an abandoned job are never success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <z3.h>

#include "../common/clock.h"
#include "../common/ctl.h"
#include "../common/mem.h"
#include "smt_check_int.h"


const char *const vd_smt_limit_names[3] = {"none", "budget", "wall-clock"};

const char *vd_smt_verdict_name(vd_smt_verdict v) {
  switch (v) {
  case VD_SMT_EQUIVALENT: return "equivalent";
  case VD_SMT_NOT_EQUIVALENT: return "not equivalent";
  case VD_SMT_INCONCLUSIVE: return "inconclusive";
  }
  return "?";
}

void vd_smt_i_chk_value_free(vd_smt_value *v) {
  vd_free(v->name);
  vd_free(v->exact);
}

void vd_smt_result_free(vd_smt_result *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_inputs; i++) vd_smt_i_chk_value_free(&r->inputs[i]);
  for (size_t i = 0; i < r->n_diffs; i++) {
    vd_smt_i_chk_value_free(&r->diffs[i].parallel);
    vd_smt_i_chk_value_free(&r->diffs[i].single);
  }
  vd_free(r->inputs);
  vd_free(r->diffs);
  memset(r, 0, sizeof(*r));
}


/* ---- fast path ------------------------------------------------------------ */

/* Simplifies t[0..n) in one call; out[i] receives the simplified t[i].
 * Returns 0 on a Z3 error (sticky on s). */
static int simplify_all(vd_smt *s, const vd_term *t, size_t n, vd_term *out) {
  Z3_context z = vd_smt_i_z3(s);
  if (n == 0) return 1;
  if (n == 1) {
    out[0] = vd_smt_simplify(s, t[0]);
    return out[0] != NULL;
  }
  /* Chunks of at most 4096 arguments per packing application. */
  for (size_t at = 0; at < n; at += 4096) {
    size_t m = n - at < 4096 ? n - at : 4096;
    Z3_sort dom[4096];
    for (size_t i = 0; i < m; i++) dom[i] = Z3_get_sort(z, t[at + i]);
    Z3_func_decl pack = Z3_mk_func_decl(z, Z3_mk_string_symbol(z, "vd!pack"), (unsigned)m, dom, Z3_mk_bool_sort(z));
    if (!pack || Z3_get_error_code(z) != Z3_OK) return vd_smt_i_keep(s, NULL) != NULL;
    Z3_inc_ref(z, Z3_func_decl_to_ast(z, pack));
    vd_term app = vd_smt_i_keep(s, Z3_mk_app(z, pack, (unsigned)m, (Z3_ast *)(t + at)));
    Z3_dec_ref(z, Z3_func_decl_to_ast(z, pack));
    vd_term simp = vd_smt_simplify(s, app);
    if (!simp) return 0;
    if (Z3_get_ast_kind(z, simp) != Z3_APP_AST || Z3_get_app_num_args(z, Z3_to_app(z, simp)) != m) {
      /* Not expected (an uninterpreted application is never rewritten);
       * fall back to one call per term. */
      for (size_t i = 0; i < m; i++)
        if (!(out[at + i] = vd_smt_simplify(s, t[at + i]))) return 0;
      continue;
    }
    for (size_t i = 0; i < m; i++) out[at + i] = vd_smt_i_keep(s, Z3_get_app_arg(z, Z3_to_app(z, simp), (unsigned)i));
  }
  return !vd_smt_i_failed(s);
}

int vd_smt_i_chk_is_zero(vd_smt *s, vd_term t) {
  double v;
  char buf[8];
  return vd_smt_numeral(s, t, &v, buf, sizeof(buf)) && strcmp(buf, "0") == 0;
}

/* OPTIMIZATION-ONLY: marks proved[i] for the pairs whose normal forms agree;
 * simp receives the simplified sides (par at 2i, single at 2i+1). */
vd_rc vd_smt_i_chk_fast_path(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved,
                       vd_term *simp, size_t *n_proved) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term *both = vd_malloc(sizeof(vd_term) * (2 * n + 1));
  if (!both) return VD_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    both[2 * i] = par[i];
    both[2 * i + 1] = single[i];
  }
  int ok = simplify_all(s, both, 2 * n, simp);
  vd_free(both);
  if (!ok) return VD_EINTERNAL;
  size_t open = 0;
  for (size_t i = 0; i < n; i++) {
    proved[i] = par[i] == single[i] || Z3_is_eq_ast(z, simp[2 * i], simp[2 * i + 1]);
    open += !proved[i];
  }
  if (open) {
    /* Second chance: the difference normalizes to 0. */
    vd_term *diff = vd_malloc(sizeof(vd_term) * (open + 1)), *dsimp = vd_malloc(sizeof(vd_term) * (open + 1));
    size_t *which = vd_malloc(sizeof(size_t) * (open + 1));
    if (!diff || !dsimp || !which) {
      vd_free(diff);
      vd_free(dsimp);
      vd_free(which);
      return VD_ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
      if (!proved[i] && Z3_get_sort_kind(z, Z3_get_sort(z, simp[2 * i])) != Z3_BOOL_SORT) {
        which[k] = i;
        diff[k++] = vd_smt_sub(s, simp[2 * i], simp[2 * i + 1]);
      }
    ok = !vd_smt_i_failed(s) && simplify_all(s, diff, k, dsimp);
    for (size_t j = 0; ok && j < k; j++)
      if (vd_smt_i_chk_is_zero(s, dsimp[j])) proved[which[j]] = 1;
    vd_free(diff);
    vd_free(dsimp);
    vd_free(which);
    if (!ok) return VD_EINTERNAL;
  }
  *n_proved = 0;
  for (size_t i = 0; i < n; i++) *n_proved += (size_t)proved[i];
  return VD_OK;
}

/* ---- entry ------------------------------------------------------------------ */

/* Pass 0: a pair whose sides are the same linear combination of the same
 * subterms (a weight gradient summed over tokens on the single side,
 * accumulated over microbatches and reduced over replicas on the parallel
 * side, from the very same per-token terms) is proved without normalising
 * those subterms.  Pairs with the same two terms are decided once. */
static vd_rc sum_pass(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved,
                      vd_smt_result *res, uint64_t budget) {
  vd_smt_nf *nf = NULL;
  vd_rc rc = vd_smt_nf_new(&nf, s, budget);
  Z3_context z = vd_smt_i_z3(s);
  /* first pair index + 1 per (par id, single id), open addressing */
  size_t cap = 64;
  while (cap < 2 * n) cap *= 2;
  uint64_t *key = vd_calloc(cap, sizeof(uint64_t));
  size_t *first = vd_calloc(cap, sizeof(size_t));
  if (rc == VD_OK && (!key || !first)) rc = VD_ENOMEM;
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    if (par[i] == single[i]) {
      proved[i] = 1;
      continue;
    }
    uint64_t k = (uint64_t)Z3_get_ast_id(z, par[i]) << 32 | Z3_get_ast_id(z, single[i]);
    size_t j = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
    while (first[j] && key[j] != k) j = (j + 1) & (cap - 1);
    if (first[j]) {
      proved[i] = proved[first[j] - 1]; /* the same two terms: the same answer */
      continue;
    }
    key[j] = k;
    first[j] = i + 1;
    if (Z3_get_sort_kind(z, Z3_get_sort(z, par[i])) != Z3_get_sort_kind(z, Z3_get_sort(z, single[i]))) continue;
    int eq = 0;
    rc = vd_smt_nf_same_sum(nf, par[i], single[i], &eq);
    proved[i] = eq;
  }
  if (nf) res->nf_steps += vd_smt_nf_steps(nf);
  vd_smt_nf_free(nf);
  vd_free(key);
  vd_free(first);
  return rc;
}

/* One pass of the normal form over the pairs not yet proved, in pair order
 * (so an exhausted budget leaves the same pairs open everywhere). */
static vd_rc nf_pass(vd_smt *s, int structural, const vd_term *par, const vd_term *single, size_t n, int *proved,
                     vd_smt_result *res, uint64_t budget) {
  vd_smt_nf *nf = NULL;
  vd_rc rc = vd_smt_nf_new(&nf, s, budget);
  if (rc == VD_OK) vd_smt_nf_set_structural(nf, structural);
  if (rc == VD_OK) {
    vd_term *roots = vd_malloc(sizeof(vd_term) * (2 * n + 1));
    size_t k = 0;
    if (!roots) rc = VD_ENOMEM;
    for (size_t i = 0; rc == VD_OK && i < n; i++)
      if (!proved[i] && par[i] != single[i]) {
        roots[k++] = par[i];
        roots[k++] = single[i];
      }
    if (rc == VD_OK) rc = vd_smt_nf_prepare(nf, roots, k);
    vd_free(roots);
  }
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    if (proved[i]) continue;
    if (par[i] == single[i]) {
      proved[i] = 1;
      continue;
    }
    int64_t a = -1, b = -1;
    rc = vd_smt_nf_of(nf, par[i], &a);
    if (rc == VD_OK) rc = vd_smt_nf_of(nf, single[i], &b);
    if (rc == VD_OK && a >= 0 && a == b) proved[i] = 1;
  }
  if (nf) {
    res->nf_steps += vd_smt_nf_steps(nf);
    res->nf_gave_up = vd_smt_nf_gave_up(nf);
    if (vd_smt_nf_laws_used(nf)) vd_smt_i_set_laws_used(s, 1);
  }
  vd_smt_nf_free(nf);
  return rc;
}

/* Path 1: the structural pass (products of sums stay atoms: cheap, and
 * enough when the parallel side regroups the single side's sums of the
 * same products, e.g. a weight gradient accumulated over microbatches and
 * reduced over replicas), then the full polynomial form on the pairs still
 * open.  Each pass has the whole budget; both counts are reported. */
static vd_rc nf_path(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved,
                     vd_smt_result *res, uint64_t budget) {
  res->nf_steps = 0;
  res->nf_gave_up = 0;
  vd_rc rc = sum_pass(s, par, single, n, proved, res, budget);
  if (rc == VD_OK) rc = nf_pass(s, 1, par, single, n, proved, res, budget);
  size_t open = 0;
  for (size_t i = 0; i < n; i++) open += !proved[i];
  if (rc == VD_OK && open) rc = nf_pass(s, 0, par, single, n, proved, res, budget);
  res->n_fast = 0;
  for (size_t i = 0; i < n; i++) res->n_fast += (size_t)proved[i];
  return rc;
}

/* The wall clock left to a check that ends at t_end (ms of vd_clock_ms);
 * 0 when there is no limit, at least 1 otherwise. */
static unsigned left_ms(unsigned total, double t_end) {
  if (!total) return 0;
  double l = t_end - vd_clock_ms();
  return l < 1 ? 1 : (unsigned)l;
}

/* The cross-check of an equivalence the normal form took part in (some
 * pairs proved by smt_poly.c's forms or the sum pass): every pair goes to
 * Z3's solver in a fresh context (run_job, JOB_SOLVE), which shares no code
 * with the normal form.  Z3 unsat: agreement.  Z3 sat: the normal form
 * proved a false equality, a bug of verdict: SOUNDNESS: the check becomes
 * INCONCLUSIVE with an internal-error reason, never EQUIVALENT (the
 * counterexample is dropped: the verdict is not "not equivalent" either,
 * since it is the machinery that failed).  Z3 unknown or out of time:
 * nothing learned, the proof stands (cross = UNKNOWN, counted by the
 * callers). */
static size_t cross_disagreements; /* process-wide, atomic */
size_t vd_smt_cross_disagreements(void) { return __atomic_load_n(&cross_disagreements, __ATOMIC_ACQUIRE); }

static vd_rc cross_check(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, size_t *open,
                         vd_smt_result *res, vd_diag *d) {
  vd_smt_result z;
  memset(&z, 0, sizeof(z));
  if (vd_smt_i_laws_used(s)) {
    /* The proof rests on the laws of the real exp and log (smt_poly_laws.c):
     * Z3 knows them only as quantified axioms, and its instantiation ran out
     * of memory on the vocab-parallel cross-entropy.  Nothing learned. */
    res->cross = VD_SMT_CROSS_UNKNOWN;
    return VD_OK;
  }
  for (size_t i = 0; i < n; i++) open[i] = i;
  /* In this thread's own context, bounded by Z3's deterministic resource
   * limit (the stage budget): a fresh context and a helper thread per
   * class (run_job) doubled the soundness fuzzer's time for nothing, since
   * Z3's solver shares no code with the normal form either way. */
  /* Z3's own simplifier first (its "som" normal form, as in the job),
   * then the solver on the pairs it leaves open. */
  int *proved = vd_calloc(n + 1, sizeof(int));
  vd_term *simp = vd_malloc(sizeof(vd_term) * (2 * n + 1));
  if (!proved || !simp) {
    vd_free(proved);
    vd_free(simp);
    return VD_OOM(d);
  }
  size_t np = 0, n_open = 0;
  vd_rc rc = vd_smt_i_chk_fast_path(s, par, single, n, proved, simp, &np);
  if (rc != VD_OK && rc != VD_ENOMEM) {
    vd_smt_i_clear_error(s);
    memset(proved, 0, n * sizeof(int));
    rc = VD_OK;
  }
  for (size_t i = 0; i < n; i++)
    if (!proved[i]) open[n_open++] = i;
  vd_free(proved);
  vd_free(simp);
  if (rc == VD_OK && n_open == 0) z.verdict = VD_SMT_EQUIVALENT;
  else if (rc == VD_OK) rc = vd_smt_i_chk_solve(s, par, single, open, n_open, &z, NULL);
  if (rc == VD_ENOMEM || vd_smt_i_oom(s)) {
    vd_smt_result_free(&z);
    return VD_OOM(d);
  }
  if (rc != VD_OK) {
    /* a Z3 error: nothing learned (the proof stands), said so */
    vd_smt_i_clear_error(s);
    rc = VD_OK;
    z.verdict = VD_SMT_INCONCLUSIVE;
  }
  if (z.verdict == VD_SMT_EQUIVALENT) {
    res->cross = VD_SMT_CROSS_AGREE;
  } else if (z.verdict == VD_SMT_NOT_EQUIVALENT) {
    res->cross = VD_SMT_CROSS_DISAGREE;
    __atomic_add_fetch(&cross_disagreements, 1, __ATOMIC_ACQ_REL);
    res->verdict = VD_SMT_INCONCLUSIVE;
    res->by_fast_path = 0;
    snprintf(res->reason, sizeof(res->reason),
             "internal error: cross-check: the normal form proves %zu pair(s) equal, Z3 finds a counterexample "
             "(a bug of verdict: report it with --certificate)", n);
  } else {
    res->cross = VD_SMT_CROSS_UNKNOWN;
  }
  vd_smt_result_free(&z);
  return VD_OK;
}

/* OPTIMIZATION-ONLY: a stage that is probably failing gets the witness
 * before any normal form.  Found: a genuine counterexample (see witness);
 * not found: nothing is concluded, res is reset and the check goes on as
 * usual.  *finished = 1 when the check ends here. */
static vd_rc witness_first(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, size_t *open,
                           vd_smt_result *res, vd_diag *d, unsigned wall, double t_end, double t0, int *finished) {
  for (size_t i = 0; i < n; i++) open[i] = i;
  vd_rc rc = vd_smt_i_chk_run_job(s, par, single, open, n, JOB_WITNESS, left_ms(wall, t_end), res, d);
  if (rc == VD_OK && (res->verdict == VD_SMT_NOT_EQUIVALENT || res->limit == VD_SMT_LIMIT_WALL)) {
    /* A difference, or the wall clock spent: the check ends here. */
    res->ms_fast = vd_clock_ms() - t0;
    *finished = 1;
    return rc;
  }
  if (rc != VD_OK) {
    *finished = 1;
    return rc;
  }
  vd_smt_result_free(res);
  memset(res, 0, sizeof(*res));
  res->verdict = VD_SMT_INCONCLUSIVE;
  return VD_OK;
}

/* OPTIMIZATION-ONLY: the normal form at the probe budget; when it gives up,
 * the witness on the pairs it left open (see nf_phase).  *decided = 1 when
 * the probe's result stands, *finished = 1 when the check ends here. */
static vd_rc probe_nf(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved, size_t *open,
                      vd_smt_result *res, vd_diag *d, unsigned wall, double t_end, double t0, uint64_t probe,
                      int *decided, int *finished) {
  vd_rc rc = nf_path(s, par, single, n, proved, res, probe);
  if (rc == VD_OK && !vd_smt_i_oom(s) && !res->nf_gave_up) {
    *decided = 1;
  } else if (rc == VD_OK && !vd_smt_i_oom(s)) {
    size_t n_open = 0, n_fast = res->n_fast;
    for (size_t i = 0; i < n; i++)
      if (!proved[i]) open[n_open++] = i;
    uint64_t probe_steps = res->nf_steps;
    rc = vd_smt_i_chk_run_job(s, par, single, open, n_open, JOB_WITNESS, left_ms(wall, t_end), res, d);
    if (rc == VD_OK && (res->verdict == VD_SMT_NOT_EQUIVALENT || res->limit == VD_SMT_LIMIT_WALL)) {
      /* A difference, or the wall clock spent: the check ends here. */
      res->n_fast = n_fast;
      res->nf_steps = probe_steps;
      res->nf_gave_up = 1;
      res->ms_fast = vd_clock_ms() - t0;
      *finished = 1;
      return rc;
    }
    if (rc == VD_OK) {
      vd_smt_result_free(res);
      memset(res, 0, sizeof(*res));
      res->verdict = VD_SMT_INCONCLUSIVE;
      memset(proved, 0, n * sizeof(*proved));
    }
  }
  if (rc == VD_ENOMEM || vd_smt_i_oom(s)) {
    *finished = 1;
    return VD_OOM(d);
  }
  return rc;
}

/* The normal-form paths: witness first (when asked), pass 0, the probe,
 * then the full budget.  proved[i] marks the pairs proved; *finished = 1
 * when the check ends here (a difference, the wall clock, an error, or
 * every pair proved). */
static vd_rc nf_phase(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved, size_t *open,
                      vd_smt_result *res, vd_diag *d, unsigned wall, double t_end, double t0, int *finished) {
  /* OPTIMIZATION-ONLY: a probe at an eighth of the budget first.  When
   * it gives up (a stage the size of a model: a bug upstream of the
   * inferred lineages of a boundary-only plan grows them so), the random
   * witness runs before the rest of the budget is spent: a real bug is
   * then found in a fraction of the normal form's work.  A probe that
   * finishes is the normal form's result; one that gives up without a
   * witness is discarded and the full budget runs as before.  Both are
   * step budgets, so the path taken depends on the terms only. */
  uint64_t full = vd_smt_i_nf_budget(s);
  uint64_t probe = (full ? full : VD_SMT_DEFAULT_NF_STEPS) / 8;
  int decided = 0;
  vd_rc rc;
  if (vd_smt_i_witness_first(s)) {
    rc = witness_first(s, par, single, n, open, res, d, wall, t_end, t0, finished);
    if (*finished) return rc;
  }
  /* Pass 0 (linear combinations of shared subterms: a walk of the sum
   * trees, no normalisation) first, on the full budget: a large correct
   * stage it proves (the MoE gate weight gradient over 256 microbatch
   * replicas: 1.3 million steps) must not pay the probe's witness, a Z3
   * evaluation of its whole DAG (30 s there). */
  rc = sum_pass(s, par, single, n, proved, res, full);
  size_t n_sum = 0;
  for (size_t i = 0; i < n; i++) n_sum += (size_t)proved[i];
  if (rc == VD_OK && n_sum == n) {
    res->n_fast = n;
    decided = 1;
  }
  if (rc == VD_OK && !decided) memset(proved, 0, n * sizeof(*proved));
  if (rc == VD_OK && !decided && probe && (full == 0 || probe < full)) {
    rc = probe_nf(s, par, single, n, proved, open, res, d, wall, t_end, t0, probe, &decided, finished);
    if (*finished) return rc;
  }
  if (rc == VD_OK && !decided) rc = nf_path(s, par, single, n, proved, res, full);
  *finished = 1;
  if (vd_smt_i_oom(s)) return VD_OOM(d);
  res->ms_fast = vd_clock_ms() - t0;
  if (rc == VD_ENOMEM) return VD_OOM(d);
  if (rc != VD_OK) {
    rc = vd_smt_status(s, d, "check (normal form)");
    if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "normal form failed");
    return rc;
  }
  if (res->n_fast == n) {
    res->verdict = VD_SMT_EQUIVALENT;
    res->by_fast_path = 1;
    return VD_OK;
  }
  *finished = 0;
  return VD_OK;
}

/* The pairs the normal form left open: the witness, then (unless the terms
 * outgrew the normal form's budget) Z3's simplifier and solver. */
static vd_rc solver_phase(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, const int *proved,
                          size_t *open, vd_smt_result *res, vd_diag *d, unsigned wall, double t_end) {
  size_t n_open = 0;
  for (size_t i = 0; i < n; i++)
    if (!proved[i]) open[n_open++] = i;
  double t1 = vd_clock_ms();
  size_t n_fast = res->n_fast;
  uint64_t nf_steps = res->nf_steps;
  int nf_gave_up = res->nf_gave_up;
  double ms_fast = res->ms_fast;
  vd_rc rc = vd_smt_i_chk_run_job(s, par, single, open, n_open, JOB_WITNESS, left_ms(wall, t_end), res, d);
  int found = rc == VD_OK && res->verdict == VD_SMT_NOT_EQUIVALENT;
  int out_of_time = rc == VD_OK && !found && res->limit == VD_SMT_LIMIT_WALL;
  /* The witness may have cleared res: the normal form's figures stay. */
  res->n_fast = n_fast;
  res->nf_steps = nf_steps;
  res->nf_gave_up = nf_gave_up;
  res->ms_fast = ms_fast;
  if (out_of_time) {
    /* SOUNDNESS: inconclusive (res says so, with the wall-clock limit). */
  } else if (rc == VD_OK && !found && nf_gave_up) {
    /* The terms outgrew the normal form's budget: Z3's simplifier and
     * solver preprocessing do not charge their work to its resource limit
     * and can run for minutes on such terms (measured: 30-60 s per check
     * on the whole-model stage of bug 14 under ZeRO).  Stop here, at a point
     * that depends on the terms only.  SOUNDNESS: inconclusive, never
     * equivalent. */
    res->verdict = VD_SMT_INCONCLUSIVE;
    res->limit = VD_SMT_LIMIT_BUDGET;
    snprintf(res->reason, sizeof(res->reason),
             "normal form out of budget after %llu steps with %zu pair(s) open (raise --stage-budget)",
             (unsigned long long)nf_steps, n_open);
  } else if (rc == VD_OK && !found) {
    rc = vd_smt_i_chk_run_job(s, par, single, open, n_open, JOB_SOLVE, left_ms(wall, t_end), res, d);
    if (rc == VD_OK && res->verdict == VD_SMT_EQUIVALENT && res->n_fast == n) res->by_fast_path = 1;
  } else if (rc == VD_ENOMEM) {
    rc = VD_OOM(d);
  } else if (rc != VD_OK) {
    rc = vd_smt_status(s, d, "check (witness)");
    if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "witness failed");
  }
  res->ms_solver = vd_clock_ms() - t1;
  return rc;
}

vd_rc vd_smt_check(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, vd_smt_result *res,
                   vd_diag *d) {
  memset(res, 0, sizeof(*res));
  res->verdict = VD_SMT_INCONCLUSIVE;
  VD_CHECK(vd_smt_status(s, d, "check"));
  for (size_t i = 0; i < n; i++)
    if (!par[i] || !single[i])
      VD_FAIL(d, VD_EINTERNAL, NULL, "check", par[i] ? "single" : "parallel", "pair %zu has no term", i);
  if (n == 0) {
    res->verdict = VD_SMT_EQUIVALENT;
    res->by_fast_path = 1;
    return VD_OK;
  }
  int *proved = vd_calloc(n, sizeof(int));
  size_t *open = vd_malloc(sizeof(size_t) * n);
  vd_rc rc = VD_OK;
  if (!proved || !open) {
    rc = VD_OOM(d);
    goto done;
  }
  double t0 = vd_clock_ms();
  /* One wall clock for the whole check: the witness and the solver jobs
   * share it (the normal form runs here, bounded by its step budget). */
  unsigned wall = vd_smt_i_timeout(s);
  double t_end = t0 + wall;
  if (vd_smt_i_fast_path(s)) {
    int finished = 0;
    rc = nf_phase(s, par, single, n, proved, open, res, d, wall, t_end, t0, &finished);
    if (finished) goto done;
  }
  rc = solver_phase(s, par, single, n, proved, open, res, d, wall, t_end);
done:
  if (rc == VD_OK && res->verdict == VD_SMT_EQUIVALENT && res->n_fast > 0 && vd_smt_i_cross_check(s) && open)
    rc = cross_check(s, par, single, n, open, res, d);
  if (rc != VD_OK) {
    vd_smt_result_free(res);
    res->verdict = VD_SMT_INCONCLUSIVE;
  }
  vd_free(proved);
  vd_free(open);
  return rc;
}
