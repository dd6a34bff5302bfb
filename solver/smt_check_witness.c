/*
 * solver/smt_check_witness.c - OPTIMIZATION-ONLY: the random witness of the equivalence
 * check (smt_check.c): concrete interpretations that may exhibit a genuine
 * counterexample before the solver runs; nothing is concluded when none
 * differs.
 */
#include "smt_check_int.h"

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
#include "smt_idmap.h"

/* ---- random witness ------------------------------------------------------------
 * OPTIMIZATION-ONLY: before the solver, try a few concrete interpretations:
 * random non-zero small rationals for the free constants and a random
 * constant function for every uninterpreted function.  Any interpretation
 * at all is a legal counterexample to "equal for every value and every
 * interpretation", so a pair that evaluates to two different numerals is a
 * genuine counterexample; nothing is concluded when none differs (the
 * solver decides then).  This finds most real bugs in microseconds where
 * the nonlinear solver may need minutes. */
static Z3_ast random_value(vd_smt *s, Z3_sort sort, uint64_t *st) {
  Z3_context z = vd_smt_i_z3(s);
  vd_smt_i_xorshift(st);
  int num = (int)(*st % 7) + 1, den = (int)((*st >> 8) % 3) + 1;
  if ((*st >> 16) & 1) num = -num;
  if (Z3_get_sort_kind(z, sort) == Z3_INT_SORT) return vd_smt_i_keep(s, Z3_mk_int(z, num > 0 ? num - 1 : -num - 1, sort));
  return vd_smt_i_keep(s, Z3_mk_real(z, num, den));
}


/* Uninterpreted applications under roots in post-order (arguments first),
 * each once; at most cap of them (0 when more: the caller falls back).
 * level[i] (grown with out) is the application's nesting depth: 1 + the
 * deepest application in its arguments, so the arguments of every
 * application of one level can be evaluated together once the levels
 * below have their entries. */
static vd_rc collect_apps(vd_smt *s, const vd_term *roots, size_t n, size_t cap, termvec *out, unsigned **level) {
  Z3_context z = vd_smt_i_z3(s);
  idset seen = {0};
  vd_smt_idmap depth = {.first_cap = 256}; /* application -> level */
  termvec stack = {0}, mark = {0}; /* mark: 0 = enter, 1 = exit (as a tagged pointer list) */
  size_t lcap = 0;
  vd_rc rc = VD_OK;
  *level = NULL;
  for (size_t i = 0; i < n && rc == VD_OK; i++)
    if (roots[i] && (vd_smt_i_chk_termvec_push(&stack, roots[i]) || vd_smt_i_chk_termvec_push(&mark, NULL))) rc = VD_ENOMEM;
  while (rc == VD_OK && stack.n) {
    Z3_ast t = stack.v[--stack.n];
    int exiting = mark.v[--mark.n] != NULL;
    if (Z3_get_ast_kind(z, t) != Z3_APP_AST) continue;
    Z3_app a = Z3_to_app(z, t);
    unsigned na = Z3_get_app_num_args(z, a);
    if (exiting) {
      unsigned lv = 0;
      for (unsigned k = 0; k < na; k++) {
        const int64_t *lp = vd_smt_i_idmap_get(&depth, Z3_get_ast_id(z, Z3_get_app_arg(z, a, k)));
        unsigned l = lp ? (unsigned)*lp : 0;
        if (l > lv) lv = l;
      }
      if (na > 0 && Z3_get_decl_kind(z, Z3_get_app_decl(z, a)) == Z3_OP_UNINTERPRETED) {
        if (out->n >= cap) {
          out->n = 0;
          break;
        }
        lv++;
        if (vd_smt_i_chk_termvec_push(out, t)) rc = VD_ENOMEM;
        if (rc == VD_OK && out->n > lcap && VD_GROW(*level, lcap, out->n) != 0) rc = VD_ENOMEM;
        if (rc == VD_OK) (*level)[out->n - 1] = lv;
      }
      if (rc == VD_OK && lv && vd_smt_i_idmap_put(&depth, Z3_get_ast_id(z, t), lv)) rc = VD_ENOMEM;
      continue;
    }
    int fresh = vd_smt_i_chk_idset_add(&seen, Z3_get_ast_id(z, t));
    if (fresh < 0) rc = VD_ENOMEM;
    if (fresh <= 0) continue;
    if (vd_smt_i_chk_termvec_push(&stack, t) || vd_smt_i_chk_termvec_push(&mark, (vd_term)t)) rc = VD_ENOMEM;
    for (unsigned k = 0; k < na && rc == VD_OK; k++)
      if (vd_smt_i_chk_termvec_push(&stack, Z3_get_app_arg(z, a, k)) || vd_smt_i_chk_termvec_push(&mark, NULL)) rc = VD_ENOMEM;
  }
  vd_free(seen.slot);
  vd_smt_i_idmap_free(&depth);
  vd_free(stack.v);
  vd_free(mark.v);
  return rc;
}

/* Gives every uninterpreted application its own random value: arguments
 * are evaluated (inner applications already have entries), and the tuple
 * maps to a fresh random value in the function's table.  A function is a
 * function whatever its table, so the model stays a legal interpretation.
 * The random values are drawn in post-order (an else value when a function
 * is first met, then the entry's), and the arguments of one level are
 * evaluated in one call (eval_many): one call per application walked the
 * stage's DAG once per application.  VD_ENOMEM when an allocation failed;
 * an evaluation cut short (its limit, an interruption) leaves the entries
 * of the levels below, still a legal interpretation. */
static vd_rc add_app_entries(vd_smt *s, Z3_model m, const termvec *apps, const unsigned *level, uint64_t *st) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term *val = vd_calloc(apps->n + 1, sizeof(vd_term));
  unsigned top = 0;
  int ok = val != NULL, oom = val == NULL;
  for (size_t i = 0; i < apps->n && ok; i++) {
    Z3_func_decl f = Z3_get_app_decl(z, Z3_to_app(z, apps->v[i]));
    if (!Z3_model_has_interp(z, m, f)) Z3_add_func_interp(z, m, f, random_value(s, Z3_get_range(z, f), st));
    val[i] = random_value(s, Z3_get_range(z, f), st);
    if (level[i] > top) top = level[i];
  }
  termvec args = {0};
  vd_term *argv = NULL;
  size_t argcap = 0;
  for (unsigned lv = 1; lv <= top && ok; lv++) {
    args.n = 0;
    for (size_t i = 0; i < apps->n && ok; i++) {
      if (level[i] != lv) continue;
      Z3_app a = Z3_to_app(z, apps->v[i]);
      for (unsigned k = 0; k < Z3_get_app_num_args(z, a) && ok; k++)
        if (vd_smt_i_chk_termvec_push(&args, Z3_get_app_arg(z, a, k))) ok = 0, oom = 1;
    }
    if (!ok) break;
    if (args.n > argcap) {
      vd_free(argv);
      argcap = args.n;
      argv = vd_malloc(sizeof(vd_term) * argcap);
      if (!argv) {
        ok = 0, oom = 1;
        break;
      }
    }
    int eok = 0;
    if (vd_smt_i_chk_eval_many(s, m, args.v, args.n, argv, &eok) != VD_OK) oom = 1;
    if (oom || !eok) {
      ok = 0;
      break;
    }
    size_t at = 0;
    for (size_t i = 0; i < apps->n && ok; i++) {
      if (level[i] != lv) continue;
      Z3_app a = Z3_to_app(z, apps->v[i]);
      Z3_func_decl f = Z3_get_app_decl(z, a);
      unsigned na = Z3_get_app_num_args(z, a);
      Z3_func_interp fi = Z3_model_get_func_interp(z, m, f);
      if (!fi || !val[i]) {
        at += na;
        continue;
      }
      Z3_func_interp_inc_ref(z, fi);
      Z3_ast_vector av = Z3_mk_ast_vector(z);
      Z3_ast_vector_inc_ref(z, av);
      for (unsigned k = 0; k < na; k++) Z3_ast_vector_push(z, av, argv[at + k]);
      at += na;
      Z3_func_interp_add_entry(z, fi, av, val[i]);
      Z3_ast_vector_dec_ref(z, av);
      Z3_func_interp_dec_ref(z, fi);
      if (vd_smt_i_chk_out_of_memory(s)) ok = 0, oom = 1;
      if (Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
    }
  }
  vd_free(args.v);
  vd_free(argv);
  vd_free(val);
  return oom || vd_smt_i_chk_out_of_memory(s) ? VD_ENOMEM : VD_OK;
}

/* sum_i r_i (par_i - single_i) over the open pairs, r_i random integers in
 * [1, 64] (Int sides embedded in the reals); NULL on a Z3 error. */
static vd_term combination(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                           uint64_t *st, int *oom) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term *t = vd_malloc(sizeof(vd_term) * (n_open + 1));
  if (!t) return *oom = 1, NULL;
  for (size_t i = 0; i < n_open && !vd_smt_i_failed(s); i++) {
    vd_term a = par[open[i]], b = single[open[i]];
    if (Z3_get_sort_kind(z, Z3_get_sort(z, a)) == Z3_INT_SORT) {
      a = vd_smt_i_keep(s, Z3_mk_int2real(z, a));
      b = vd_smt_i_keep(s, Z3_mk_int2real(z, b));
    }
    vd_smt_i_xorshift(st);
    t[i] = vd_smt_mul(s, vd_smt_num_int(s, (int64_t)(*st % 64) + 1), vd_smt_sub(s, a, b));
  }
  vd_term r = vd_smt_i_failed(s) ? NULL : vd_smt_sum(s, n_open, t);
  vd_free(t);
  /* Out of memory (Z3's or the term arena's) ends the check; another
   * error only leaves the witness without its combination. */
  if (!r && (vd_smt_i_oom(s) || strstr(vd_smt_error(s), "out of memory"))) *oom = 1;
  else if (!r) vd_smt_i_clear_error(s);
  return r;
}

/* What the trials of one witness search share. */
typedef struct {
  vd_smt *s;
  Z3_context z;
  const vd_term *par, *single;
  const size_t *open;
  size_t n_open;
  termvec syms, funcs; /* the free constants and uninterpreted functions */
  termvec apps;        /* their applications, by level (collect_apps) */
  unsigned *level;
  uint64_t st;         /* the models' xorshift state */
  vd_term comb;        /* sum_i r_i (par_i - single_i); NULL: none */
  vd_smt_result *res;
  int *found;
} witness_t;

/* The uninterpreted symbols and applications of the pairs, and their
 * random combination.  VD_OK with nothing collected when a pair is
 * ill-sorted (the solver path's error to report). */
static vd_rc witness_prepare(witness_t *w, int *ill_sorted) {
  vd_smt *s = w->s;
  Z3_context z = w->z;
  termvec roots = {0};
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < w->n_open; i++)
    if (Z3_get_sort(z, w->par[w->open[i]]) != Z3_get_sort(z, w->single[w->open[i]]) ||
        Z3_get_sort_kind(z, Z3_get_sort(z, w->par[w->open[i]])) == Z3_BOOL_SORT)
      return *ill_sorted = 1, VD_OK;
  for (size_t i = 0; i < w->n_open && rc == VD_OK; i++)
    if (vd_smt_i_chk_termvec_push(&roots, w->par[w->open[i]]) || vd_smt_i_chk_termvec_push(&roots, w->single[w->open[i]]))
      rc = VD_ENOMEM;
  if (rc == VD_OK) rc = vd_smt_i_chk_collect_uninterpreted(s, roots.v, roots.n, &w->syms, &w->funcs);
  if (rc == VD_OK) rc = collect_apps(s, roots.v, roots.n, 4096, &w->apps, &w->level);
  /* xorshift state from the context's seed; seed 1 (the default) gives the
   * constant this check used before the seed was an option, and the state
   * is never 0 (xorshift would stay at 0). */
  w->st = 0x9e3779b97f4a7c15ull ^ ((vd_smt_i_seed(s) - 1) * 0xbf58476d1ce4e5b9ull);
  if (w->st == 0) w->st = 0x9e3779b97f4a7c15ull;
  /* The coefficients have their own generator: the models' values (and so
   * the reported counterexamples) stay those of the sequence above. */
  uint64_t cst = 0x2545f4914f6cdd1dull;
  int comb_oom = 0;
  w->comb = rc == VD_OK ? combination(s, w->par, w->single, w->open, w->n_open, &cst, &comb_oom) : NULL;
  if (rc == VD_OK && !w->comb && (comb_oom || vd_smt_i_oom(s))) rc = VD_ENOMEM;
  vd_free(roots.v);
  return rc;
}

/* Trial `trial`'s interpretation in m: random constants, then random
 * application tables (odd trials with applications) or random constant
 * functions. */
static vd_rc witness_interpret(witness_t *w, Z3_model m, int trial) {
  Z3_context z = w->z;
  for (size_t i = 0; i < w->syms.n; i++) {
    Z3_func_decl f = Z3_get_app_decl(z, Z3_to_app(z, w->syms.v[i]));
    Z3_ast v = random_value(w->s, Z3_get_sort(z, w->syms.v[i]), &w->st);
    if (v) Z3_add_const_interp(z, m, f, v);
  }
  if (trial % 2 == 1 && w->apps.n) {
    /* An evaluation cut short leaves a partial table: still a legal
     * interpretation (every function has its else value). */
    if (add_app_entries(w->s, m, &w->apps, w->level, &w->st) != VD_OK) return VD_ENOMEM;
  } else {
    for (size_t i = 0; i < w->funcs.n; i++) {
      Z3_func_decl f = Z3_to_func_decl(z, w->funcs.v[i]);
      Z3_ast v = random_value(w->s, Z3_get_range(z, f), &w->st);
      if (v) Z3_add_func_interp(z, m, f, v);
    }
  }
  return VD_OK;
}

/* One evaluation of sum_i r_i (par_i - single_i) with random non-zero
 * integers r_i, instead of one per pair: Z3's evaluator caches shared
 * subterms within a call only, so per-pair calls walked the stage's
 * whole DAG once per pair (50 s on a 531-node MoE weight-gradient
 * stage with 64 pairs).  A non-zero value means some pair differs in
 * this model (fill_model below finds which, and decides); zero means
 * nothing (all equal, or an unlucky cancellation: the solver decides).
 * *failed: the evaluation did not finish. */
static vd_rc witness_eval(witness_t *w, Z3_model m, int *hit, int *failed) {
  Z3_context z = w->z;
  Z3_ast v = NULL;
  if (Z3_model_eval(z, m, w->comb, true, &v) && v) {
    Z3_inc_ref(z, v);
    if (Z3_is_numeral_ast(z, v) && !vd_smt_i_chk_is_zero(w->s, v)) *hit = 1;
    Z3_dec_ref(z, v);
    return VD_OK;
  }
  /* The evaluation limit or an interruption: the other trials would walk
   * the same DAG. */
  *failed = 1;
  if (vd_smt_i_chk_out_of_memory(w->s)) return VD_ENOMEM;
  Z3_set_error(z, Z3_OK);
  vd_smt_i_clear_error(w->s);
  return VD_OK;
}

/* SOUNDNESS: sum_i r_i (par_i - single_i) is not 0 in a legal
 * interpretation, so some pair differs in it: not equivalent, whether or
 * not its values can be computed below.  Published (atomically) before
 * them, for a job abandoned at the wall clock.  *hit back to 0 when the
 * values show no difference after all. */
static vd_rc witness_record(witness_t *w, Z3_model m, int *hit) {
  vd_smt_result *res = w->res;
  __atomic_store_n(w->found, 1, __ATOMIC_RELEASE);
  res->verdict = VD_SMT_NOT_EQUIVALENT;
  int no_diff = 0;
  vd_rc rc = vd_smt_i_chk_fill_proof(w->s, m, w->par, w->single, w->open, w->n_open, res,
                                     "a random interpretation differs", &no_diff);
  if (no_diff) {
    /* Not expected (exact arithmetic): claim nothing. */
    *hit = 0;
    __atomic_store_n(w->found, 0, __ATOMIC_RELEASE);
    vd_smt_result_free(res);
    res->verdict = VD_SMT_INCONCLUSIVE;
  }
  return rc;
}

vd_rc vd_smt_i_chk_witness(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                     vd_smt_result *res, int *found) {
  Z3_context z = vd_smt_i_z3(s);
  witness_t w = {.s = s, .z = z, .par = par, .single = single, .open = open, .n_open = n_open, .res = res,
                 .found = found};
  int hit = 0, ill_sorted = 0;
  __atomic_store_n(found, 0, __ATOMIC_RELEASE);
  vd_rc rc = witness_prepare(&w, &ill_sorted);
  if (ill_sorted) return VD_OK;
  for (int trial = 0; trial < 4 && rc == VD_OK && !hit; trial++) {
    Z3_model m = Z3_mk_model(z);
    if (!m) {
      rc = VD_EINTERNAL;
      break;
    }
    Z3_model_inc_ref(z, m);
    rc = witness_interpret(&w, m, trial);
    if (rc != VD_OK || vd_smt_i_chk_out_of_memory(s)) {
      rc = VD_ENOMEM;
      break;
    }
    if (Z3_get_error_code(z) != Z3_OK) {
      Z3_set_error(z, Z3_OK);
      Z3_model_dec_ref(z, m);
      break;
    }
    int failed = 0;
    if (w.comb) rc = witness_eval(&w, m, &hit, &failed);
    if (hit) rc = witness_record(&w, m, &hit);
    if (rc == VD_ENOMEM || vd_smt_i_chk_out_of_memory(s)) {
      rc = VD_ENOMEM;
      break;
    }
    Z3_model_dec_ref(z, m);
    if (failed) break;
  }
  if (!vd_smt_i_oom(s) && Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
  else if (vd_smt_i_oom(s)) rc = VD_ENOMEM;
  vd_free(w.syms.v);
  vd_free(w.funcs.v);
  vd_free(w.apps.v);
  vd_free(w.level);
  return rc;
}
