/*
 * solver/smt_check_model.c - the equivalence check's (smt_check.c) free symbols and
 * model values: the uninterpreted constants and functions under a set of
 * terms, and a Z3 model (or a witness's interpretation) turned into the
 * inputs and differing values of the result.
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

/* ---- free symbols ---------------------------------------------------------- */

int vd_smt_i_chk_idset_add(idset *h, unsigned id) {
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

int vd_smt_i_chk_termvec_push(termvec *v, vd_term t) {
  if (v->n == v->cap && VD_GROW(v->v, v->cap, v->n + 1) != 0) return -1;
  v->v[v->n++] = t;
  return 0;
}

/* One DAG walk under roots (each node once): the uninterpreted constants
 * into *syms and, when funcs is not NULL, the distinct uninterpreted
 * function symbols of arity > 0 into *funcs, both in walk order. */
vd_rc vd_smt_i_chk_collect_uninterpreted(vd_smt *s, const vd_term *roots, size_t n, termvec *syms, termvec *funcs) {
  Z3_context z = vd_smt_i_z3(s);
  idset seen = {0}, decls = {0};
  termvec stack = {0};
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < n && rc == VD_OK; i++)
    if (roots[i] && vd_smt_i_chk_termvec_push(&stack, roots[i])) rc = VD_ENOMEM;
  while (rc == VD_OK && stack.n) {
    Z3_ast t = stack.v[--stack.n];
    int fresh = vd_smt_i_chk_idset_add(&seen, Z3_get_ast_id(z, t));
    if (fresh < 0) rc = VD_ENOMEM;
    if (fresh <= 0 || Z3_get_ast_kind(z, t) != Z3_APP_AST) continue;
    Z3_app a = Z3_to_app(z, t);
    unsigned na = Z3_get_app_num_args(z, a);
    Z3_func_decl f = Z3_get_app_decl(z, a);
    if (Z3_get_decl_kind(z, f) == Z3_OP_UNINTERPRETED) {
      if (na == 0) {
        if (vd_smt_i_chk_termvec_push(syms, t)) rc = VD_ENOMEM;
      } else if (funcs) {
        Z3_ast fa = Z3_func_decl_to_ast(z, f);
        int nf = vd_smt_i_chk_idset_add(&decls, Z3_get_ast_id(z, fa));
        if (nf < 0 || (nf > 0 && vd_smt_i_chk_termvec_push(funcs, (vd_term)fa))) rc = VD_ENOMEM;
      }
    }
    for (unsigned k = 0; k < na && rc == VD_OK; k++)
      if (vd_smt_i_chk_termvec_push(&stack, Z3_get_app_arg(z, a, k))) rc = VD_ENOMEM;
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
int vd_smt_i_chk_out_of_memory(vd_smt *s) {
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
/* f := 0 (a function: constantly 0) when m does not interpret f and its
 * range is Real or Int. */
static void give_zero(vd_smt *s, Z3_model m, Z3_func_decl f, int func) {
  Z3_context z = vd_smt_i_z3(s);
  if (Z3_model_has_interp(z, m, f)) return;
  Z3_sort so = Z3_get_range(z, f);
  Z3_sort_kind k = Z3_get_sort_kind(z, so);
  if (k != Z3_REAL_SORT && k != Z3_INT_SORT) return;
  vd_term zero = vd_smt_i_keep(s, Z3_mk_int(z, 0, so));
  if (!zero) return;
  if (func) Z3_add_func_interp(z, m, f, zero);
  else Z3_add_const_interp(z, m, f, zero);
}

static vd_rc complete_model(vd_smt *s, Z3_model m, const termvec *syms, const termvec *funcs) {
  Z3_context z = vd_smt_i_z3(s);
  for (size_t i = 0; i < syms->n; i++) give_zero(s, m, Z3_get_app_decl(z, Z3_to_app(z, syms->v[i])), 0);
  for (size_t i = 0; i < funcs->n; i++) give_zero(s, m, Z3_to_func_decl(z, funcs->v[i]), 1);
  if (vd_smt_i_chk_out_of_memory(s)) return VD_ENOMEM;
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
vd_rc vd_smt_i_chk_eval_many(vd_smt *s, Z3_model m, const vd_term *t, size_t n, vd_term *out, int *ok) {
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
      if (vd_smt_i_chk_out_of_memory(s)) return VD_ENOMEM;
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
    if (vd_smt_i_chk_out_of_memory(s)) return VD_ENOMEM;
    if (vd_smt_i_failed(s) || Z3_get_error_code(z) != Z3_OK) {
      vd_smt_i_clear_error(s);
      Z3_set_error(z, Z3_OK);
      *ok = 0;
    }
  }
  return VD_OK;
}

/* The free inputs' values in m, sorted by name, into res->inputs; *ok_in
 * is 0 when their evaluation was cut short. */
static vd_rc fill_inputs(vd_smt *s, Z3_model m, const termvec *syms, vd_smt_result *res, int *ok_in) {
  Z3_context z = vd_smt_i_z3(s);
  named *nm = NULL;
  vd_term *in = NULL, *inv = NULL;
  vd_rc rc = VD_OK;
  if (syms->n) {
    nm = vd_calloc(syms->n, sizeof(named)); /* zeroed: the cleanup frees every name, set or not */
    res->inputs = vd_calloc(syms->n, sizeof(vd_smt_value));
    in = vd_calloc(syms->n, sizeof(vd_term));
    inv = vd_calloc(syms->n, sizeof(vd_term));
    if (!nm || !res->inputs || !in || !inv) rc = VD_ENOMEM;
  }
  for (size_t i = 0; i < syms->n && rc == VD_OK; i++) {
    nm[i].t = syms->v[i];
    nm[i].name = Z3_get_symbol_string(z, Z3_get_decl_name(z, Z3_get_app_decl(z, Z3_to_app(z, syms->v[i]))));
    /* Z3_get_symbol_string's buffer is reused: copy now. */
    nm[i].name = vd_strdup(nm[i].name ? nm[i].name : "?");
    if (!nm[i].name) rc = VD_ENOMEM;
  }
  if (rc == VD_OK && syms->n) qsort(nm, syms->n, sizeof(named), by_name);
  for (size_t i = 0; i < syms->n && rc == VD_OK; i++) in[i] = nm[i].t;
  if (rc == VD_OK && syms->n) rc = vd_smt_i_chk_eval_many(s, m, in, syms->n, inv, ok_in);
  for (size_t i = 0; i < syms->n && rc == VD_OK && *ok_in; i++) {
    vd_smt_value *v = &res->inputs[res->n_inputs];
    rc = value_text(s, inv[i], v);
    if (rc == VD_OK) {
      v->name = vd_strdup(nm[i].name);
      res->n_inputs++;
      if (!v->name) rc = VD_ENOMEM;
    } else {
      vd_smt_i_chk_value_free(v);
    }
  }
  if (nm)
    for (size_t i = 0; i < syms->n; i++) vd_free((void *)nm[i].name);
  vd_free(nm);
  vd_free(in);
  vd_free(inv);
  return rc;
}

/* The pairs that differ in m (roots: par, single of each open pair, in
 * turn) into res->diffs; *ok is 0 when a side has no numeral. */
static vd_rc fill_diffs(vd_smt *s, Z3_model m, const termvec *roots, const size_t *open, size_t n_open,
                        vd_smt_result *res, int *ok) {
  vd_term *vals = NULL;
  vd_rc rc = VD_OK;
  if (n_open) {
    res->diffs = vd_calloc(n_open, sizeof(vd_smt_diff));
    vals = vd_calloc(2 * n_open, sizeof(vd_term));
    if (!res->diffs || !vals) rc = VD_ENOMEM;
  }
  if (rc == VD_OK && n_open) rc = vd_smt_i_chk_eval_many(s, m, roots->v, roots->n, vals, ok);
  for (size_t i = 0; i < n_open && rc == VD_OK; i++) {
    /* Only two numerals that differ are a difference (an evaluation cut
     * short leaves a side without one). */
    if (!is_value(s, vals[2 * i]) || !is_value(s, vals[2 * i + 1])) {
      *ok = 0;
      continue;
    }
    vd_smt_diff *df = &res->diffs[res->n_diffs];
    df->index = open[i];
    rc = value_text(s, vals[2 * i], &df->parallel);
    if (rc == VD_OK) rc = value_text(s, vals[2 * i + 1], &df->single);
    if (rc != VD_OK) {
      vd_smt_i_chk_value_free(&df->parallel);
      vd_smt_i_chk_value_free(&df->single);
      break;
    }
    /* Keep only the pairs that really differ in this model. */
    if (strcmp(df->parallel.exact, df->single.exact) == 0) {
      vd_smt_i_chk_value_free(&df->parallel);
      vd_smt_i_chk_value_free(&df->single);
      memset(df, 0, sizeof(*df));
    } else {
      res->n_diffs++;
    }
  }
  vd_free(vals);
  return rc;
}

/* The counterexample of model m: the free inputs' values and the pairs that
 * differ.  *complete is 0 when the values could not all be computed (the
 * evaluation limit or the wall clock): the pairs found so far are kept,
 * and the caller decides what a difference already proved means. */
vd_rc vd_smt_i_chk_fill_model(vd_smt *s, Z3_model m, const vd_term *par, const vd_term *single, const size_t *open,
                        size_t n_open, vd_smt_result *res, int *complete) {
  termvec roots = {0}, syms = {0}, funcs = {0};
  int ok = 1, ok_in = 1;
  vd_rc rc = VD_OK;
  *complete = 0;
  for (size_t i = 0; i < n_open && rc == VD_OK; i++)
    if (vd_smt_i_chk_termvec_push(&roots, par[open[i]]) || vd_smt_i_chk_termvec_push(&roots, single[open[i]])) rc = VD_ENOMEM;
  if (rc == VD_OK) rc = vd_smt_i_chk_collect_uninterpreted(s, roots.v, roots.n, &syms, &funcs);
  if (rc == VD_OK) rc = complete_model(s, m, &syms, &funcs);
  if (rc == VD_OK) rc = fill_inputs(s, m, &syms, res, &ok_in);
  if (rc == VD_OK) rc = fill_diffs(s, m, &roots, open, n_open, res, &ok);
  *complete = rc == VD_OK && ok && ok_in;
  vd_free(roots.v);
  vd_free(syms.v);
  vd_free(funcs.v);
  return rc;
}

/* A model that proved a difference (sat, or a random interpretation that
 * differs): its values filled in.  *no_diff is 1 when every value was
 * computed and no pair differs after all (the caller then claims
 * nothing).  SOUNDNESS: when some values are missing the proof stands (sat
 * is the proof; only the values are missing) and the reason
 * says "<found>; its values were not computed ...". */
vd_rc vd_smt_i_chk_fill_proof(vd_smt *s, Z3_model m, const vd_term *par, const vd_term *single, const size_t *open,
                              size_t n_open, vd_smt_result *res, const char *found, int *no_diff) {
  int complete = 0;
  vd_rc rc = vd_smt_i_chk_fill_model(s, m, par, single, open, n_open, res, &complete);
  *no_diff = rc == VD_OK && complete && res->n_diffs == 0;
  if (rc == VD_OK && !complete)
    snprintf(res->reason, sizeof(res->reason), "%s; its values were not computed within the evaluation limit", found);
  return rc;
}
