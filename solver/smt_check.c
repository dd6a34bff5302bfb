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
#include "smt.h"

const char *const vd_smt_limit_names[3] = {"none", "budget", "wall-clock"};

const char *vd_smt_verdict_name(vd_smt_verdict v) {
  switch (v) {
  case VD_SMT_EQUIVALENT: return "equivalent";
  case VD_SMT_NOT_EQUIVALENT: return "not equivalent";
  case VD_SMT_INCONCLUSIVE: return "inconclusive";
  }
  return "?";
}

static void value_free(vd_smt_value *v) {
  vd_free(v->name);
  vd_free(v->exact);
}

void vd_smt_result_free(vd_smt_result *r) {
  if (!r) return;
  for (size_t i = 0; i < r->n_inputs; i++) value_free(&r->inputs[i]);
  for (size_t i = 0; i < r->n_diffs; i++) {
    value_free(&r->diffs[i].parallel);
    value_free(&r->diffs[i].single);
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

static int is_zero(vd_smt *s, vd_term t) {
  double v;
  char buf[8];
  return vd_smt_numeral(s, t, &v, buf, sizeof(buf)) && strcmp(buf, "0") == 0;
}

/* OPTIMIZATION-ONLY: marks proved[i] for the pairs whose normal forms agree;
 * simp receives the simplified sides (par at 2i, single at 2i+1). */
static vd_rc fast_path(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved,
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
      if (is_zero(s, dsimp[j])) proved[which[j]] = 1;
    vd_free(diff);
    vd_free(dsimp);
    vd_free(which);
    if (!ok) return VD_EINTERNAL;
  }
  *n_proved = 0;
  for (size_t i = 0; i < n; i++) *n_proved += (size_t)proved[i];
  return VD_OK;
}

/* ---- free symbols ---------------------------------------------------------- */

typedef struct {
  unsigned *slot; /* id + 1, 0 = empty */
  size_t cap, n;
} idset;

static int idset_add(idset *h, unsigned id) {
  if (2 * (h->n + 1) > h->cap) {
    size_t nc = h->cap ? 2 * h->cap : 256;
    unsigned *ns = vd_calloc(nc, sizeof(unsigned));
    if (!ns) return -1;
    for (size_t i = 0; i < h->cap; i++)
      if (h->slot[i]) {
        size_t j = (h->slot[i] * 2654435761u) & (nc - 1);
        while (ns[j]) j = (j + 1) & (nc - 1);
        ns[j] = h->slot[i];
      }
    vd_free(h->slot);
    h->slot = ns;
    h->cap = nc;
  }
  unsigned key = id + 1;
  size_t j = (key * 2654435761u) & (h->cap - 1);
  while (h->slot[j]) {
    if (h->slot[j] == key) return 0;
    j = (j + 1) & (h->cap - 1);
  }
  h->slot[j] = key;
  h->n++;
  return 1;
}

typedef struct {
  vd_term *v;
  size_t n, cap;
} termvec;

static int push(termvec *v, vd_term t) {
  if (v->n == v->cap && VD_GROW(v->v, v->cap, v->n + 1) != 0) return -1;
  v->v[v->n++] = t;
  return 0;
}

/* One DAG walk under roots (each node once): the uninterpreted constants
 * into *syms and, when funcs is not NULL, the distinct uninterpreted
 * function symbols of arity > 0 into *funcs, both in walk order. */
static vd_rc collect_uninterpreted(vd_smt *s, const vd_term *roots, size_t n, termvec *syms, termvec *funcs) {
  Z3_context z = vd_smt_i_z3(s);
  idset seen = {0}, decls = {0};
  termvec stack = {0};
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < n && rc == VD_OK; i++)
    if (roots[i] && push(&stack, roots[i])) rc = VD_ENOMEM;
  while (rc == VD_OK && stack.n) {
    Z3_ast t = stack.v[--stack.n];
    int fresh = idset_add(&seen, Z3_get_ast_id(z, t));
    if (fresh < 0) rc = VD_ENOMEM;
    if (fresh <= 0 || Z3_get_ast_kind(z, t) != Z3_APP_AST) continue;
    Z3_app a = Z3_to_app(z, t);
    unsigned na = Z3_get_app_num_args(z, a);
    Z3_func_decl f = Z3_get_app_decl(z, a);
    if (Z3_get_decl_kind(z, f) == Z3_OP_UNINTERPRETED) {
      if (na == 0) {
        if (push(syms, t)) rc = VD_ENOMEM;
      } else if (funcs) {
        Z3_ast fa = Z3_func_decl_to_ast(z, f);
        int nf = idset_add(&decls, Z3_get_ast_id(z, fa));
        if (nf < 0 || (nf > 0 && push(funcs, (vd_term)fa))) rc = VD_ENOMEM;
      }
    }
    for (unsigned k = 0; k < na && rc == VD_OK; k++)
      if (push(&stack, Z3_get_app_arg(z, a, k))) rc = VD_ENOMEM;
  }
  vd_free(seen.slot);
  vd_free(decls.slot);
  vd_free(stack.v);
  return rc;
}

typedef struct {
  const char *name;
  vd_term t;
} named;

static int by_name(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* ---- model values ----------------------------------------------------------- */

/* Whether s failed for lack of memory: Z3's, or the term arena's (a
 * failed allocation of ours, common/mem.h).  Never cleared: the check ends
 * in VD_ENOMEM. */
static int out_of_memory(vd_smt *s) {
  return vd_smt_i_oom(s) || (vd_smt_i_failed(s) && strstr(vd_smt_error(s), "out of memory") != NULL);
}

/* The text and number of an evaluated term v (a numeral when the model
 * interprets every symbol under it). */
static vd_rc value_text(vd_smt *s, vd_term v, vd_smt_value *out) {
  Z3_context z = vd_smt_i_z3(s);
  memset(out, 0, sizeof(*out));
  if (!v) {
    out->exact = vd_strdup("?");
    return out->exact ? VD_OK : VD_ENOMEM;
  }
  const char *ex = NULL;
  if (Z3_is_numeral_ast(z, v)) {
    ex = Z3_get_numeral_string(z, v);
  } else if (Z3_is_algebraic_number(z, v)) {
    ex = Z3_get_numeral_decimal_string(z, v, 20);
  } else {
    ex = Z3_ast_to_string(z, v);
  }
  out->exact = vd_strdup(ex ? ex : "?");
  if (!out->exact) return VD_ENOMEM;
  if (Z3_is_numeral_ast(z, v) || Z3_is_algebraic_number(z, v)) {
    const char *dec = Z3_get_numeral_decimal_string(z, v, 25);
    out->value = dec ? strtod(dec, NULL) : 0; /* an algebraic number ends in '?': strtod stops there */
  } else {
    out->value = 0;
  }
  return Z3_get_error_code(z) == Z3_OK ? VD_OK : (vd_smt_i_keep(s, NULL), VD_EINTERNAL);
}

static int is_value(vd_smt *s, vd_term v) {
  Z3_context z = vd_smt_i_z3(s);
  return v && (Z3_is_numeral_ast(z, v) || Z3_is_algebraic_number(z, v));
}

/* Gives every uninterpreted constant and function under roots that m does
 * not interpret the value Z3's model completion would give it (0; a
 * function: constantly 0), so that an evaluation without completion
 * (eval_many) yields numerals. */
static vd_rc complete_model(vd_smt *s, Z3_model m, const termvec *syms, const termvec *funcs) {
  Z3_context z = vd_smt_i_z3(s);
  for (size_t i = 0; i < syms->n; i++) {
    Z3_func_decl f = Z3_get_app_decl(z, Z3_to_app(z, syms->v[i]));
    if (Z3_model_has_interp(z, m, f)) continue;
    Z3_sort so = Z3_get_range(z, f);
    Z3_sort_kind k = Z3_get_sort_kind(z, so);
    if (k != Z3_REAL_SORT && k != Z3_INT_SORT) continue;
    vd_term zero = vd_smt_i_keep(s, Z3_mk_int(z, 0, so));
    if (zero) Z3_add_const_interp(z, m, f, zero);
  }
  for (size_t i = 0; i < funcs->n; i++) {
    Z3_func_decl f = Z3_to_func_decl(z, funcs->v[i]);
    if (Z3_model_has_interp(z, m, f)) continue;
    Z3_sort so = Z3_get_range(z, f);
    Z3_sort_kind k = Z3_get_sort_kind(z, so);
    if (k != Z3_REAL_SORT && k != Z3_INT_SORT) continue;
    vd_term zero = vd_smt_i_keep(s, Z3_mk_int(z, 0, so));
    if (zero) Z3_add_func_interp(z, m, f, zero);
  }
  if (out_of_memory(s)) return VD_ENOMEM;
  if (vd_smt_i_failed(s) || Z3_get_error_code(z) != Z3_OK) {
    vd_smt_i_clear_error(s);
    Z3_set_error(z, Z3_OK);
  }
  return VD_OK;
}

/* Evaluates t[0..n) in m, one Z3 call per 4096 terms: Z3's evaluator shares
 * subterms within one call only, and one call per term walked a large
 * stage's DAG once per term (the counterexample of a 2048-element stage
 * never finished).  The terms are the arguments of a fresh Boolean symbol
 * that m does not interpret, evaluated without model completion, so the
 * application comes back with its arguments evaluated; the caller
 * completes m first.  Each call is bounded by Z3's model_evaluator.max_steps
 * (VD_LIM_EVAL_MAX_STEPS) and ends early on Z3_interrupt.  out[i] is kept
 * on s; *ok is 0 when an evaluation failed (the limit, an interruption, a
 * Z3 error: cleared), and out is then incomplete. */
static vd_rc eval_many(vd_smt *s, Z3_model m, const vd_term *t, size_t n, vd_term *out, int *ok) {
  Z3_context z = vd_smt_i_z3(s);
  *ok = 1;
  for (size_t i = 0; i < n; i++) out[i] = NULL;
  for (size_t at = 0; at < n && *ok; at += 4096) {
    size_t k = n - at < 4096 ? n - at : 4096;
    Z3_sort *dom = vd_malloc(sizeof(Z3_sort) * k);
    if (!dom) return VD_ENOMEM;
    for (size_t i = 0; i < k; i++) dom[i] = Z3_get_sort(z, t[at + i]);
    Z3_func_decl pack =
        Z3_mk_func_decl(z, Z3_mk_string_symbol(z, "vd!eval"), (unsigned)k, dom, Z3_mk_bool_sort(z));
    vd_free(dom);
    if (!pack || Z3_get_error_code(z) != Z3_OK) {
      if (out_of_memory(s)) return VD_ENOMEM;
      vd_smt_i_clear_error(s);
      *ok = 0;
      break;
    }
    Z3_inc_ref(z, Z3_func_decl_to_ast(z, pack));
    Z3_ast app = Z3_mk_app(z, pack, (unsigned)k, (Z3_ast *)(t + at));
    Z3_ast v = NULL;
    if (app) {
      Z3_inc_ref(z, app);
      if (!Z3_model_eval(z, m, app, false, &v)) v = NULL;
      if (v) Z3_inc_ref(z, v);
      Z3_dec_ref(z, app);
    }
    if (v && Z3_get_ast_kind(z, v) == Z3_APP_AST &&
        Z3_is_eq_func_decl(z, Z3_get_app_decl(z, Z3_to_app(z, v)), pack) &&
        Z3_get_app_num_args(z, Z3_to_app(z, v)) == k) {
      for (size_t i = 0; i < k; i++) out[at + i] = vd_smt_i_keep(s, Z3_get_app_arg(z, Z3_to_app(z, v), (unsigned)i));
    } else {
      *ok = 0;
    }
    if (v) Z3_dec_ref(z, v);
    Z3_dec_ref(z, Z3_func_decl_to_ast(z, pack));
    if (out_of_memory(s)) return VD_ENOMEM;
    if (vd_smt_i_failed(s) || Z3_get_error_code(z) != Z3_OK) {
      vd_smt_i_clear_error(s);
      Z3_set_error(z, Z3_OK);
      *ok = 0;
    }
  }
  return VD_OK;
}

/* The counterexample of model m: the free inputs' values and the pairs that
 * differ.  *complete is 0 when the values could not all be computed (the
 * evaluation limit or the wall clock): the pairs found so far are kept,
 * and the caller decides what a difference already proved means. */
static vd_rc fill_model(vd_smt *s, Z3_model m, const vd_term *par, const vd_term *single, const size_t *open,
                        size_t n_open, vd_smt_result *res, int *complete) {
  Z3_context z = vd_smt_i_z3(s);
  termvec roots = {0}, syms = {0}, funcs = {0};
  named *nm = NULL;
  vd_term *in = NULL, *inv = NULL, *vals = NULL;
  int ok = 1;
  vd_rc rc = VD_OK;
  *complete = 0;
  for (size_t i = 0; i < n_open && rc == VD_OK; i++)
    if (push(&roots, par[open[i]]) || push(&roots, single[open[i]])) rc = VD_ENOMEM;
  if (rc == VD_OK) rc = collect_uninterpreted(s, roots.v, roots.n, &syms, &funcs);
  if (rc == VD_OK) rc = complete_model(s, m, &syms, &funcs);
  if (rc == VD_OK && syms.n) {
    nm = vd_calloc(syms.n, sizeof(named)); /* zeroed: the cleanup frees every name, set or not */
    res->inputs = vd_calloc(syms.n, sizeof(vd_smt_value));
    in = vd_calloc(syms.n, sizeof(vd_term));
    inv = vd_calloc(syms.n, sizeof(vd_term));
    if (!nm || !res->inputs || !in || !inv) rc = VD_ENOMEM;
  }
  for (size_t i = 0; i < syms.n && rc == VD_OK; i++) {
    nm[i].t = syms.v[i];
    nm[i].name = Z3_get_symbol_string(z, Z3_get_decl_name(z, Z3_get_app_decl(z, Z3_to_app(z, syms.v[i]))));
    /* Z3_get_symbol_string's buffer is reused: copy now. */
    nm[i].name = vd_strdup(nm[i].name ? nm[i].name : "?");
    if (!nm[i].name) rc = VD_ENOMEM;
  }
  if (rc == VD_OK && syms.n) qsort(nm, syms.n, sizeof(named), by_name);
  for (size_t i = 0; i < syms.n && rc == VD_OK; i++) in[i] = nm[i].t;
  int ok_in = 1;
  if (rc == VD_OK && syms.n) rc = eval_many(s, m, in, syms.n, inv, &ok_in);
  for (size_t i = 0; i < syms.n && rc == VD_OK && ok_in; i++) {
    vd_smt_value *v = &res->inputs[res->n_inputs];
    rc = value_text(s, inv[i], v);
    if (rc == VD_OK) {
      v->name = vd_strdup(nm[i].name);
      res->n_inputs++;
      if (!v->name) rc = VD_ENOMEM;
    } else {
      value_free(v);
    }
  }
  if (rc == VD_OK && n_open) {
    res->diffs = vd_calloc(n_open, sizeof(vd_smt_diff));
    vals = vd_calloc(2 * n_open, sizeof(vd_term));
    if (!res->diffs || !vals) rc = VD_ENOMEM;
  }
  if (rc == VD_OK && n_open) rc = eval_many(s, m, roots.v, roots.n, vals, &ok);
  for (size_t i = 0; i < n_open && rc == VD_OK; i++) {
    /* Only two numerals that differ are a difference (an evaluation cut
     * short leaves a side without one). */
    if (!is_value(s, vals[2 * i]) || !is_value(s, vals[2 * i + 1])) {
      ok = 0;
      continue;
    }
    vd_smt_diff *df = &res->diffs[res->n_diffs];
    df->index = open[i];
    rc = value_text(s, vals[2 * i], &df->parallel);
    if (rc == VD_OK) rc = value_text(s, vals[2 * i + 1], &df->single);
    if (rc != VD_OK) {
      value_free(&df->parallel);
      value_free(&df->single);
      break;
    }
    /* Keep only the pairs that really differ in this model. */
    if (strcmp(df->parallel.exact, df->single.exact) == 0) {
      value_free(&df->parallel);
      value_free(&df->single);
      memset(df, 0, sizeof(*df));
    } else {
      res->n_diffs++;
    }
  }
  *complete = rc == VD_OK && ok && ok_in;
  if (nm)
    for (size_t i = 0; i < syms.n; i++) vd_free((void *)nm[i].name);
  vd_free(nm);
  vd_free(in);
  vd_free(inv);
  vd_free(vals);
  vd_free(roots.v);
  vd_free(syms.v);
  vd_free(funcs.v);
  return rc;
}

/* ---- solver path ------------------------------------------------------------ */

/* Z3's "rlimit count" statistic of the solver's last check (0 if absent). */
static uint64_t rlimit_count(Z3_context z, Z3_solver sv) {
  Z3_stats st = Z3_solver_get_statistics(z, sv);
  if (!st || Z3_get_error_code(z) != Z3_OK) return 0;
  Z3_stats_inc_ref(z, st);
  uint64_t v = 0;
  unsigned n = Z3_stats_size(z, st);
  for (unsigned i = 0; i < n; i++) {
    const char *k = Z3_stats_get_key(z, st, i);
    if (k && strcmp(k, "rlimit count") == 0) {
      v = Z3_stats_is_uint(z, st, i) ? Z3_stats_get_uint_value(z, st, i)
                                     : (uint64_t)Z3_stats_get_double_value(z, st, i);
      break;
    }
  }
  Z3_stats_dec_ref(z, st);
  return v;
}

/* *found (atomic, may be NULL) is set once sat is known, before the model's
 * values are computed: a job abandoned then still proved a difference. */
static vd_rc solve(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                   vd_smt_result *res, int *found) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term *ne = vd_malloc(sizeof(vd_term) * (n_open + 1));
  if (!ne) return VD_ENOMEM;
  for (size_t i = 0; i < n_open; i++) {
    vd_term a = par[open[i]], b = single[open[i]];
    /* An index tensor may be Int on one side and Real on the other: compare
     * as reals (Z3_mk_eq does not coerce; a Bool side stays an error). */
    Z3_sort_kind ka = Z3_get_sort_kind(z, Z3_get_sort(z, a)), kb = Z3_get_sort_kind(z, Z3_get_sort(z, b));
    if (ka == Z3_INT_SORT && kb == Z3_REAL_SORT) a = vd_smt_i_keep(s, Z3_mk_int2real(z, a));
    if (kb == Z3_INT_SORT && ka == Z3_REAL_SORT) b = vd_smt_i_keep(s, Z3_mk_int2real(z, b));
    vd_term eq = vd_smt_eq(s, a, b);
    ne[i] = eq ? vd_smt_i_keep(s, Z3_mk_not(z, eq)) : NULL;
  }
  vd_term goal = NULL;
  if (!vd_smt_i_failed(s)) goal = n_open == 1 ? ne[0] : vd_smt_i_keep(s, Z3_mk_or(z, (unsigned)n_open, (Z3_ast *)ne));
  vd_free(ne);
  if (!goal) return VD_EINTERNAL;

  Z3_solver sv = Z3_mk_solver(z);
  if (!sv || Z3_get_error_code(z) != Z3_OK) return vd_smt_i_keep(s, NULL), VD_EINTERNAL;
  Z3_solver_inc_ref(z, sv);
  Z3_params p = Z3_mk_params(z);
  Z3_params_inc_ref(z, p);
  /* No Z3 "timeout" parameter: Z3 4.8.12's own timer thread can deadlock
   * (seen here: both threads blocked inside Z3).  The deterministic limit
   * is the resource limit; the wall clock is enforced by the caller
   * (run_job). */
  uint64_t rl = vd_smt_i_rlimit(s);
  if (rl) Z3_params_set_uint(z, p, Z3_mk_string_symbol(z, "rlimit"), rl > UINT32_MAX ? UINT32_MAX : (unsigned)rl);
  Z3_solver_set_params(z, sv, p);
  Z3_solver_assert(z, sv, goal);
  vd_rc rc = VD_OK;
  Z3_lbool r = Z3_L_UNDEF;
  if (Z3_get_error_code(z) != Z3_OK) {
    vd_smt_i_keep(s, NULL);
    rc = VD_EINTERNAL;
  } else {
    r = Z3_solver_check(z, sv);
    /* Out of memory inside the check: the context must not be called again
     * (smt.c, "out of memory"), not even to release the solver. */
    if (vd_smt_i_oom(s)) return VD_ENOMEM;
    /* A check interrupted or out of resources is not an error: it is "unknown". */
    if (r == Z3_L_UNDEF && Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
    res->rlimit_used = rlimit_count(z, sv);
    if (Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
  }
  if (rc == VD_OK && r == Z3_L_FALSE) {
    res->verdict = VD_SMT_EQUIVALENT;
  } else if (rc == VD_OK && r == Z3_L_UNDEF) {
    res->verdict = VD_SMT_INCONCLUSIVE;
    const char *why = Z3_solver_get_reason_unknown(z, sv);
    if (why && (strstr(why, "cancel") || strstr(why, "interrupt"))) {
      res->limit = VD_SMT_LIMIT_WALL;
      why = "timeout";
    } else if (why && strstr(why, "resource limit")) {
      res->limit = VD_SMT_LIMIT_BUDGET;
    }
    snprintf(res->reason, sizeof(res->reason), "%s", why && why[0] ? why : "unknown");
  } else if (rc == VD_OK) {
    Z3_model m = Z3_solver_get_model(z, sv);
    if (!m || Z3_get_error_code(z) != Z3_OK) {
      vd_smt_i_keep(s, NULL);
      rc = VD_EINTERNAL;
    } else {
      Z3_model_inc_ref(z, m);
      res->verdict = VD_SMT_NOT_EQUIVALENT;
      if (found) __atomic_store_n(found, 1, __ATOMIC_RELEASE);
      int complete = 0;
      rc = fill_model(s, m, par, single, open, n_open, res, &complete);
      Z3_model_dec_ref(z, m);
      if (rc == VD_OK && complete && res->n_diffs == 0) {
        /* sat but no pair differs when evaluated: never claim anything. */
        res->verdict = VD_SMT_INCONCLUSIVE;
        snprintf(res->reason, sizeof(res->reason), "model evaluation found no differing pair");
      } else if (rc == VD_OK && !complete) {
        /* SOUNDNESS: sat is the proof; only the values are missing. */
        snprintf(res->reason, sizeof(res->reason), "%s",
                 "the solver found a counterexample; its values were not computed within the evaluation limit");
      }
    }
  }
  Z3_params_dec_ref(z, p);
  Z3_solver_dec_ref(z, sv);
  return rc;
}

/* ---- the job: Z3 in a fresh context, on a thread that can be abandoned ----- */

/* What a job runs: the random witness (the counterexample it finds is
 * evaluated there too), or Z3's simplifier and solver. */
enum { JOB_SOLVE, JOB_WITNESS };

static vd_rc witness(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                     vd_smt_result *res, int *found);

typedef struct {
  vd_smt *js;                 /* fresh context, owned by the job */
  int mode;                   /* JOB_SOLVE or JOB_WITNESS */
  int found;                  /* atomic: a difference is proved (values may follow) */
  vd_term *par, *single;      /* the open pairs, translated into js */
  size_t n;
  int fast;                   /* run Z3's simplifier normal form first */
  vd_smt_result res;          /* diff indices relative to 0..n) */
  vd_rc rc;
  size_t n_simplified;        /* pairs proved by Z3's simplifier */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, abandoned;
  int stop;                   /* set (atomically) at the wall-clock limit */
  pid_t tid;                  /* atomic: written by the job's thread */
} job_t;

static void job_free(job_t *j) {
  if (!j) return;
  vd_smt_result_free(&j->res);
  vd_smt_free(j->js);
  vd_free(j->par);
  vd_free(j->single);
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->mu);
  vd_free(j);
}

/* The job's work, on whatever thread runs it. */
static void job_work(job_t *j) {
  vd_smt *js = j->js;
  size_t n = j->n;
  int *proved = vd_calloc(n + 1, sizeof(int));
  size_t *open = vd_malloc(sizeof(size_t) * (n + 1));
  vd_term *simp = vd_malloc(sizeof(vd_term) * (2 * n + 1));
  j->res.verdict = VD_SMT_INCONCLUSIVE;
  if (!proved || !open || !simp) {
    j->rc = VD_ENOMEM;
    goto done;
  }
  if (j->mode == JOB_WITNESS) {
    for (size_t i = 0; i < n; i++) open[i] = i;
    j->rc = witness(js, j->par, j->single, open, n, &j->res, &j->found);
    goto done;
  }
  if (j->fast) {
    /* OPTIMIZATION-ONLY: Z3's own normal form; an error (e.g. its step
     * limit) only leaves the pairs open. */
    size_t np = 0;
    vd_rc frc = fast_path(js, j->par, j->single, n, proved, simp, &np);
    if (frc == VD_ENOMEM) {
      j->rc = VD_ENOMEM;
      goto done;
    }
    if (frc != VD_OK) {
      vd_smt_i_clear_error(js);
      memset(proved, 0, n * sizeof(int));
      np = 0;
    }
    j->n_simplified = np;
  }
  size_t n_open = 0;
  for (size_t i = 0; i < n; i++)
    if (!proved[i]) open[n_open++] = i;
  if (n_open == 0) {
    j->res.verdict = VD_SMT_EQUIVALENT;
    goto done;
  }
  if (__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE)) {
    /* Interrupted during the simplifier: do not start the solver. */
    j->res.limit = VD_SMT_LIMIT_WALL;
    snprintf(j->res.reason, sizeof(j->res.reason), "timeout");
    goto done;
  }
  j->rc = solve(js, j->par, j->single, open, n_open, &j->res, &j->found);
done:
  vd_free(proved);
  vd_free(open);
  vd_free(simp);
}

static void *job_main(void *arg) {
  job_t *j = arg;
  __atomic_store_n(&j->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
  job_work(j);
  pthread_mutex_lock(&j->mu);
  j->done = 1;
  int abandoned = j->abandoned;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  if (abandoned) {
    /* Nobody waits for this job any more: it cleans up after itself. */
    job_free(j);
    vd_smt_i_orphan_add(-1);
  }
  return NULL;
}

static void deadline_after(struct timespec *dl, unsigned ms) {
  clock_gettime(CLOCK_MONOTONIC, dl);
  dl->tv_sec += (time_t)(ms / 1000);
  dl->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (dl->tv_nsec >= 1000000000L) {
    dl->tv_sec++;
    dl->tv_nsec -= 1000000000L;
  }
}

static int ts_before(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Waits until the job is done, the deadline dl passes (NULL: none) or, with
 * poll_stop, a stop of the run is requested (common/ctl.h: a signal or the
 * run's deadline; the wait wakes every 100 ms to look); 1 if done.  Called
 * with j->mu held. */
static int wait_done(job_t *j, const struct timespec *dl, int poll_stop) {
  while (!j->done) {
    if (poll_stop && vd_ctl_stopped()) return 0;
    struct timespec now, slice;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (dl && !ts_before(&now, dl)) return 0;
    deadline_after(&slice, 100);
    if (dl && ts_before(dl, &slice)) slice = *dl;
    pthread_cond_timedwait(&j->cv, &j->mu, &slice);
  }
  return 1;
}

/* A difference proved (a witness's non-zero combination, or sat) whose
 * values the job could not compute before the wall clock. */
static void proved_without_values(vd_smt_result *res, unsigned ms) {
  vd_smt_result_free(res);
  res->verdict = VD_SMT_NOT_EQUIVALENT;
  res->limit = VD_SMT_LIMIT_NONE;
  snprintf(res->reason, sizeof(res->reason),
           "a counterexample exists; its values were not computed within the wall-clock limit %.3g s", ms / 1e3);
}

/* Runs the open pairs through a job of the given mode (see the file
 * comment) with ms of wall clock (0: none).  On return res holds the
 * verdict; its diff indices are positions in par/single.  A witness that
 * finds nothing leaves res INCONCLUSIVE (limit WALL when the clock ended
 * it). */
static vd_rc run_job(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                     int mode, unsigned ms, vd_smt_result *res, vd_diag *d) {
  job_t *j = vd_calloc(1, sizeof(*j));
  if (!j) return VD_OOM(d);
  pthread_mutex_init(&j->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&j->cv, &ca);
  pthread_condattr_destroy(&ca);
  j->n = n_open;
  j->mode = mode;
  j->fast = vd_smt_i_fast_path(s);
  vd_rc rc = vd_smt_new(&j->js, d);
  if (rc != VD_OK) {
    job_free(j);
    return rc;
  }
  vd_smt_set_budget(j->js, vd_smt_i_nf_budget(s), vd_smt_i_rlimit(s));
  vd_smt_set_seed(j->js, vd_smt_i_seed(s));
  j->par = vd_malloc(sizeof(vd_term) * (n_open + 1));
  j->single = vd_malloc(sizeof(vd_term) * (n_open + 1));
  if (!j->par || !j->single) {
    job_free(j);
    return VD_OOM(d);
  }
  /* SOUNDNESS: Z3_translate copies a term into another context with the
   * same structure and symbol names, so the question asked is the same. */
  Z3_context src = vd_smt_i_z3(s), dst = vd_smt_i_z3(j->js);
  /* One translation of every term: Z3_ast_vector_translate shares one
   * cache over the vector, where a Z3_translate per term copied the
   * stage's shared DAG once per term (minutes on a 2048-pair stage). */
  Z3_ast_vector sv = Z3_mk_ast_vector(src);
  if (sv) {
    Z3_ast_vector_inc_ref(src, sv);
    for (size_t i = 0; i < n_open; i++) {
      Z3_ast_vector_push(src, sv, par[open[i]]);
      Z3_ast_vector_push(src, sv, single[open[i]]);
    }
    Z3_ast_vector tv = Z3_get_error_code(src) == Z3_OK ? Z3_ast_vector_translate(src, sv, dst) : NULL;
    if (tv && Z3_get_error_code(dst) == Z3_OK) {
      Z3_ast_vector_inc_ref(dst, tv);
      for (size_t i = 0; i < n_open; i++) {
        j->par[i] = vd_smt_i_keep(j->js, Z3_ast_vector_get(dst, tv, (unsigned)(2 * i)));
        j->single[i] = vd_smt_i_keep(j->js, Z3_ast_vector_get(dst, tv, (unsigned)(2 * i + 1)));
      }
      Z3_ast_vector_dec_ref(dst, tv);
    } else {
      vd_smt_i_keep(j->js, NULL); /* the error, sticky on the job's context */
      if (!vd_smt_i_failed(j->js)) vd_smt_i_fail(j->js, "translation failed");
    }
    Z3_ast_vector_dec_ref(src, sv);
    if (Z3_get_error_code(src) != Z3_OK) {
      vd_smt_i_fail(j->js, Z3_get_error_msg(src, Z3_get_error_code(src)));
      Z3_set_error(src, Z3_OK);
    }
  } else {
    vd_smt_i_fail(j->js, "out of memory (Z3_mk_ast_vector)");
  }
  if (vd_smt_i_failed(j->js)) {
    vd_smt_i_fail(s, vd_smt_error(j->js)); /* the error is the stage's, sticky on s */
    rc = out_of_memory(j->js) ? VD_OOM(d) : vd_smt_status(j->js, d, "check (translate)");
    job_free(j);
    return rc;
  }
  int interrupted = 0, run_stopped = 0;
  pthread_attr_t at;
  pthread_t th;
  int started = 0;
  /* On a thread even without a wall-clock limit: a stop of the run
   * interrupts the check (wait_done). */
  if (pthread_attr_init(&at) == 0) {
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &at, job_main, j) == 0;
    pthread_attr_destroy(&at);
  }
  if (!started) {
    /* No thread: run here; the budget still bounds it. */
    job_work(j);
    j->done = 1;
  } else {
    struct timespec dl;
    if (ms) deadline_after(&dl, ms);
    pthread_mutex_lock(&j->mu);
    if (!wait_done(j, ms ? &dl : NULL, 1)) {
      /* Z3_interrupt is the one Z3 call that is safe from another thread. */
      __atomic_store_n(&j->stop, 1, __ATOMIC_RELEASE);
      Z3_interrupt(vd_smt_i_z3(j->js));
      interrupted = 1;
      run_stopped = vd_ctl_stopped() != 0;
      unsigned grace = ms / 4 + 200 > 2000 ? 2000 : ms / 4 + 200;
      if (run_stopped && grace > 1000) grace = 1000;
      deadline_after(&dl, grace);
      if (!wait_done(j, &dl, 0)) {
        j->abandoned = 1;
        vd_smt_i_orphan_add(1);
        /* It may run on for minutes: let it only take idle CPU. */
        pid_t tid = __atomic_load_n(&j->tid, __ATOMIC_ACQUIRE);
        if (tid > 0) setpriority(PRIO_PROCESS, (id_t)tid, 19);
        int found = __atomic_load_n(&j->found, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&j->mu);
        if (found) {
          proved_without_values(res, ms);
          return VD_OK;
        }
        res->verdict = VD_SMT_INCONCLUSIVE;
        res->limit = VD_SMT_LIMIT_WALL;
        if (run_stopped)
          snprintf(res->reason, sizeof(res->reason), "run interrupted (Z3 ignored the interrupt; its check was abandoned)");
        else
          snprintf(res->reason, sizeof(res->reason),
                   "wall-clock limit %.3g s (Z3 ignored the interrupt; its check was abandoned)", ms / 1e3);
        return VD_OK;
      }
    }
    pthread_mutex_unlock(&j->mu);
  }
  rc = j->rc;
  int found = __atomic_load_n(&j->found, __ATOMIC_ACQUIRE);
  if (interrupted && rc != VD_ENOMEM && (rc != VD_OK || j->res.verdict == VD_SMT_INCONCLUSIVE)) {
    /* Z3 stopped at the interruption (as an error, "canceled", or as
     * unknown): the limit, not a failure of the machinery.  A difference
     * proved before it stands. */
    if (found) {
      proved_without_values(res, ms);
    } else {
      res->verdict = VD_SMT_INCONCLUSIVE;
      res->limit = VD_SMT_LIMIT_WALL;
      if (run_stopped) snprintf(res->reason, sizeof(res->reason), "run interrupted");
      else snprintf(res->reason, sizeof(res->reason), "wall-clock limit %.3g s", ms / 1e3);
    }
    job_free(j);
    return VD_OK;
  }
  if (rc == VD_OK) {
    vd_smt_result *r = &j->res;
    res->verdict = r->verdict;
    res->limit = r->limit;
    res->rlimit_used = r->rlimit_used;
    res->n_fast += j->n_simplified;
    memcpy(res->reason, r->reason, sizeof(res->reason));
    if (r->limit == VD_SMT_LIMIT_WALL)
      snprintf(res->reason, sizeof(res->reason), "wall-clock limit %.3g s", ms / 1e3);
    else if (interrupted && r->verdict == VD_SMT_NOT_EQUIVALENT && !r->n_diffs)
      snprintf(res->reason, sizeof(res->reason),
               "a counterexample exists; its values were not computed within the wall-clock limit %.3g s", ms / 1e3);
    res->inputs = r->inputs;
    res->n_inputs = r->n_inputs;
    res->diffs = r->diffs;
    res->n_diffs = r->n_diffs;
    for (size_t i = 0; i < res->n_diffs; i++) res->diffs[i].index = open[res->diffs[i].index];
    r->inputs = NULL;
    r->diffs = NULL;
    r->n_inputs = r->n_diffs = 0;
  } else if (rc == VD_ENOMEM) {
    rc = VD_OOM(d);
  } else {
    if (vd_smt_i_failed(j->js)) vd_smt_i_fail(s, vd_smt_error(j->js)); /* sticky on s too */
    rc = vd_smt_status(j->js, d, "check (solver)");
    if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "solver failed");
  }
  job_free(j);
  return rc;
}

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
  *st ^= *st << 13;
  *st ^= *st >> 7;
  *st ^= *st << 17;
  int num = (int)(*st % 7) + 1, den = (int)((*st >> 8) % 3) + 1;
  if ((*st >> 16) & 1) num = -num;
  if (Z3_get_sort_kind(z, sort) == Z3_INT_SORT) return vd_smt_i_keep(s, Z3_mk_int(z, num > 0 ? num - 1 : -num - 1, sort));
  return vd_smt_i_keep(s, Z3_mk_real(z, num, den));
}


/* id -> level, open addressing (key id + 1, 0 = empty). */
typedef struct {
  unsigned *key, *val;
  size_t cap, n;
} idmap;

static int idmap_put(idmap *h, unsigned id, unsigned v) {
  if (2 * (h->n + 1) > h->cap) {
    size_t nc = h->cap ? 2 * h->cap : 256;
    unsigned *nk = vd_calloc(nc, sizeof(unsigned)), *nv = vd_calloc(nc, sizeof(unsigned));
    if (!nk || !nv) {
      vd_free(nk);
      vd_free(nv);
      return -1;
    }
    for (size_t i = 0; i < h->cap; i++)
      if (h->key[i]) {
        size_t j = (h->key[i] * 2654435761u) & (nc - 1);
        while (nk[j]) j = (j + 1) & (nc - 1);
        nk[j] = h->key[i];
        nv[j] = h->val[i];
      }
    vd_free(h->key);
    vd_free(h->val);
    h->key = nk;
    h->val = nv;
    h->cap = nc;
  }
  unsigned k = id + 1;
  size_t j = (k * 2654435761u) & (h->cap - 1);
  while (h->key[j] && h->key[j] != k) j = (j + 1) & (h->cap - 1);
  if (!h->key[j]) h->n++;
  h->key[j] = k;
  h->val[j] = v;
  return 0;
}

static unsigned idmap_get(const idmap *h, unsigned id) {
  if (!h->cap) return 0;
  unsigned k = id + 1;
  size_t j = (k * 2654435761u) & (h->cap - 1);
  while (h->key[j]) {
    if (h->key[j] == k) return h->val[j];
    j = (j + 1) & (h->cap - 1);
  }
  return 0;
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
  idmap depth = {0};
  termvec stack = {0}, mark = {0}; /* mark: 0 = enter, 1 = exit (as a tagged pointer list) */
  size_t lcap = 0;
  vd_rc rc = VD_OK;
  *level = NULL;
  for (size_t i = 0; i < n && rc == VD_OK; i++)
    if (roots[i] && (push(&stack, roots[i]) || push(&mark, NULL))) rc = VD_ENOMEM;
  while (rc == VD_OK && stack.n) {
    Z3_ast t = stack.v[--stack.n];
    int exiting = mark.v[--mark.n] != NULL;
    if (Z3_get_ast_kind(z, t) != Z3_APP_AST) continue;
    Z3_app a = Z3_to_app(z, t);
    unsigned na = Z3_get_app_num_args(z, a);
    if (exiting) {
      unsigned lv = 0;
      for (unsigned k = 0; k < na; k++) {
        unsigned l = idmap_get(&depth, Z3_get_ast_id(z, Z3_get_app_arg(z, a, k)));
        if (l > lv) lv = l;
      }
      if (na > 0 && Z3_get_decl_kind(z, Z3_get_app_decl(z, a)) == Z3_OP_UNINTERPRETED) {
        if (out->n >= cap) {
          out->n = 0;
          break;
        }
        lv++;
        if (push(out, t)) rc = VD_ENOMEM;
        if (rc == VD_OK && out->n > lcap && VD_GROW(*level, lcap, out->n) != 0) rc = VD_ENOMEM;
        if (rc == VD_OK) (*level)[out->n - 1] = lv;
      }
      if (rc == VD_OK && lv && idmap_put(&depth, Z3_get_ast_id(z, t), lv)) rc = VD_ENOMEM;
      continue;
    }
    int fresh = idset_add(&seen, Z3_get_ast_id(z, t));
    if (fresh < 0) rc = VD_ENOMEM;
    if (fresh <= 0) continue;
    if (push(&stack, t) || push(&mark, (vd_term)t)) rc = VD_ENOMEM;
    for (unsigned k = 0; k < na && rc == VD_OK; k++)
      if (push(&stack, Z3_get_app_arg(z, a, k)) || push(&mark, NULL)) rc = VD_ENOMEM;
  }
  vd_free(seen.slot);
  vd_free(depth.key);
  vd_free(depth.val);
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
        if (push(&args, Z3_get_app_arg(z, a, k))) ok = 0, oom = 1;
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
    if (eval_many(s, m, args.v, args.n, argv, &eok) != VD_OK) oom = 1;
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
      if (out_of_memory(s)) ok = 0, oom = 1;
      if (Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
    }
  }
  vd_free(args.v);
  vd_free(argv);
  vd_free(val);
  return oom || out_of_memory(s) ? VD_ENOMEM : VD_OK;
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
    *st ^= *st << 13;
    *st ^= *st >> 7;
    *st ^= *st << 17;
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

static vd_rc witness(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                     vd_smt_result *res, int *found) {
  Z3_context z = vd_smt_i_z3(s);
  termvec roots = {0}, syms = {0}, funcs = {0};
  vd_rc rc = VD_OK;
  int hit = 0;
  __atomic_store_n(found, 0, __ATOMIC_RELEASE);
  /* Ill-sorted pairs are the solver path's error to report. */
  for (size_t i = 0; i < n_open; i++)
    if (Z3_get_sort(z, par[open[i]]) != Z3_get_sort(z, single[open[i]]) ||
        Z3_get_sort_kind(z, Z3_get_sort(z, par[open[i]])) == Z3_BOOL_SORT)
      return VD_OK;
  for (size_t i = 0; i < n_open && rc == VD_OK; i++)
    if (push(&roots, par[open[i]]) || push(&roots, single[open[i]])) rc = VD_ENOMEM;
  if (rc == VD_OK) rc = collect_uninterpreted(s, roots.v, roots.n, &syms, &funcs);
  termvec apps = {0};
  unsigned *level = NULL;
  if (rc == VD_OK) rc = collect_apps(s, roots.v, roots.n, 4096, &apps, &level);
  /* xorshift state from the context's seed; seed 1 (the default) gives the
   * constant this check used before the seed was an option, and the state
   * is never 0 (xorshift would stay at 0). */
  uint64_t st = 0x9e3779b97f4a7c15ull ^ ((vd_smt_i_seed(s) - 1) * 0xbf58476d1ce4e5b9ull);
  if (st == 0) st = 0x9e3779b97f4a7c15ull;
  /* The coefficients have their own generator: the models' values (and so
   * the reported counterexamples) stay those of the sequence above. */
  uint64_t cst = 0x2545f4914f6cdd1dull;
  int comb_oom = 0;
  vd_term comb = rc == VD_OK ? combination(s, par, single, open, n_open, &cst, &comb_oom) : NULL;
  if (rc == VD_OK && !comb && (comb_oom || vd_smt_i_oom(s))) rc = VD_ENOMEM;
  for (int trial = 0; trial < 4 && rc == VD_OK && !hit; trial++) {
    Z3_model m = Z3_mk_model(z);
    if (!m) {
      rc = VD_EINTERNAL;
      break;
    }
    Z3_model_inc_ref(z, m);
    for (size_t i = 0; i < syms.n; i++) {
      Z3_func_decl f = Z3_get_app_decl(z, Z3_to_app(z, syms.v[i]));
      Z3_ast v = random_value(s, Z3_get_sort(z, syms.v[i]), &st);
      if (v) Z3_add_const_interp(z, m, f, v);
    }
    if (trial % 2 == 1 && apps.n) {
      /* An evaluation cut short leaves a partial table: still a legal
       * interpretation (every function has its else value). */
      if (add_app_entries(s, m, &apps, level, &st) != VD_OK) rc = VD_ENOMEM;
    } else {
      for (size_t i = 0; i < funcs.n; i++) {
        Z3_func_decl f = Z3_to_func_decl(z, funcs.v[i]);
        Z3_ast v = random_value(s, Z3_get_range(z, f), &st);
        if (v) Z3_add_func_interp(z, m, f, v);
      }
    }
    if (rc != VD_OK || out_of_memory(s)) {
      rc = VD_ENOMEM;
      break;
    }
    if (Z3_get_error_code(z) != Z3_OK) {
      Z3_set_error(z, Z3_OK);
      Z3_model_dec_ref(z, m);
      break;
    }
    /* One evaluation of sum_i r_i (par_i - single_i) with random non-zero
     * integers r_i, instead of one per pair: Z3's evaluator caches shared
     * subterms within a call only, so per-pair calls walked the stage's
     * whole DAG once per pair (50 s on a 531-node MoE weight-gradient
     * stage with 64 pairs).  A non-zero value means some pair differs in
     * this model (fill_model below finds which, and decides); zero means
     * nothing (all equal, or an unlucky cancellation: the solver decides). */
    int failed = 0;
    if (comb) {
      Z3_ast v = NULL;
      if (Z3_model_eval(z, m, comb, true, &v) && v) {
        Z3_inc_ref(z, v);
        if (Z3_is_numeral_ast(z, v) && !is_zero(s, v)) hit = 1;
        Z3_dec_ref(z, v);
      } else {
        /* The evaluation limit or an interruption: the other trials
         * would walk the same DAG. */
        failed = 1;
        if (out_of_memory(s)) {
          rc = VD_ENOMEM;
        } else {
          Z3_set_error(z, Z3_OK);
          vd_smt_i_clear_error(s);
        }
      }
    }
    if (hit) {
      /* SOUNDNESS: sum_i r_i (par_i - single_i) is not 0 in a legal
       * interpretation, so some pair differs in it: not equivalent,
       * whether or not its values can be computed below.  Published
       * (atomically) before them, for a job abandoned at the wall clock. */
      __atomic_store_n(found, 1, __ATOMIC_RELEASE);
      res->verdict = VD_SMT_NOT_EQUIVALENT;
      int complete = 0;
      rc = fill_model(s, m, par, single, open, n_open, res, &complete);
      if (rc == VD_OK && complete && res->n_diffs == 0) {
        /* Not expected (exact arithmetic): claim nothing. */
        hit = 0;
        __atomic_store_n(found, 0, __ATOMIC_RELEASE);
        vd_smt_result_free(res);
        res->verdict = VD_SMT_INCONCLUSIVE;
      } else if (rc == VD_OK && !complete) {
        snprintf(res->reason, sizeof(res->reason), "%s",
                 "a random interpretation differs; its values were not computed within the evaluation limit");
      }
    }
    if (rc == VD_ENOMEM || out_of_memory(s)) {
      rc = VD_ENOMEM;
      break;
    }
    Z3_model_dec_ref(z, m);
    if (failed) break;
  }
  if (!vd_smt_i_oom(s) && Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
  else if (vd_smt_i_oom(s)) rc = VD_ENOMEM;
  vd_free(roots.v);
  vd_free(syms.v);
  vd_free(funcs.v);
  vd_free(apps.v);
  vd_free(level);
  return rc;
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
  vd_rc rc = fast_path(s, par, single, n, proved, simp, &np);
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
  else if (rc == VD_OK) rc = solve(s, par, single, open, n_open, &z, NULL);
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
    if (vd_smt_i_witness_first(s)) {
      /* A stage that is probably failing: the witness before any normal
       * form.  Found: a genuine counterexample (see witness); not found:
       * nothing is concluded and the check goes on as usual. */
      for (size_t i = 0; i < n; i++) open[i] = i;
      rc = run_job(s, par, single, open, n, JOB_WITNESS, left_ms(wall, t_end), res, d);
      if (rc == VD_OK && (res->verdict == VD_SMT_NOT_EQUIVALENT || res->limit == VD_SMT_LIMIT_WALL)) {
        /* A difference, or the wall clock spent: the check ends here. */
        res->ms_fast = vd_clock_ms() - t0;
        goto done;
      }
      if (rc != VD_OK) goto done;
      vd_smt_result_free(res);
      memset(res, 0, sizeof(*res));
      res->verdict = VD_SMT_INCONCLUSIVE;
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
      rc = nf_path(s, par, single, n, proved, res, probe);
      if (rc == VD_OK && !vd_smt_i_oom(s) && !res->nf_gave_up) {
        decided = 1;
      } else if (rc == VD_OK && !vd_smt_i_oom(s)) {
        size_t n_open = 0, n_fast = res->n_fast;
        for (size_t i = 0; i < n; i++)
          if (!proved[i]) open[n_open++] = i;
        uint64_t probe_steps = res->nf_steps;
        rc = run_job(s, par, single, open, n_open, JOB_WITNESS, left_ms(wall, t_end), res, d);
        if (rc == VD_OK && (res->verdict == VD_SMT_NOT_EQUIVALENT || res->limit == VD_SMT_LIMIT_WALL)) {
          /* A difference, or the wall clock spent: the check ends here. */
          res->n_fast = n_fast;
          res->nf_steps = probe_steps;
          res->nf_gave_up = 1;
          res->ms_fast = vd_clock_ms() - t0;
          goto done;
        }
        if (rc == VD_OK) {
          vd_smt_result_free(res);
          memset(res, 0, sizeof(*res));
          res->verdict = VD_SMT_INCONCLUSIVE;
          memset(proved, 0, n * sizeof(*proved));
        }
      }
      if (rc == VD_ENOMEM || vd_smt_i_oom(s)) {
        rc = VD_OOM(d);
        goto done;
      }
    }
    if (rc == VD_OK && !decided) rc = nf_path(s, par, single, n, proved, res, full);
    if (vd_smt_i_oom(s)) {
      rc = VD_OOM(d);
      goto done;
    }
    res->ms_fast = vd_clock_ms() - t0;
    if (rc == VD_ENOMEM) {
      rc = VD_OOM(d);
      goto done;
    }
    if (rc != VD_OK) {
      rc = vd_smt_status(s, d, "check (normal form)");
      if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "normal form failed");
      goto done;
    }
    if (res->n_fast == n) {
      res->verdict = VD_SMT_EQUIVALENT;
      res->by_fast_path = 1;
      goto done;
    }
  }
  size_t n_open = 0;
  for (size_t i = 0; i < n; i++)
    if (!proved[i]) open[n_open++] = i;
  double t1 = vd_clock_ms();
  size_t n_fast = res->n_fast;
  uint64_t nf_steps = res->nf_steps;
  int nf_gave_up = res->nf_gave_up;
  double ms_fast = res->ms_fast;
  rc = run_job(s, par, single, open, n_open, JOB_WITNESS, left_ms(wall, t_end), res, d);
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
    rc = run_job(s, par, single, open, n_open, JOB_SOLVE, left_ms(wall, t_end), res, d);
    if (rc == VD_OK && res->verdict == VD_SMT_EQUIVALENT && res->n_fast == n) res->by_fast_path = 1;
  } else if (rc == VD_ENOMEM) {
    rc = VD_OOM(d);
  } else if (rc != VD_OK) {
    rc = vd_smt_status(s, d, "check (witness)");
    if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "witness failed");
  }
  res->ms_solver = vd_clock_ms() - t1;
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
