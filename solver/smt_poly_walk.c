/*
 * solver/smt_poly_walk.c - the term walk of verdict's normal form (the algebra is in
 * smt_poly.c): the public vd_smt_nf_* entry points, the flattened sums
 * (OPTIMIZATION-ONLY) and the normal form of one Z3 term node, memoised
 * by ast id.  SOUNDNESS: every rule maps a node to the polynomial of its
 * value (see smt_poly.c); any other operator is an atom keyed by its
 * declaration and its arguments' normal forms (congruence).
 */
#include "smt_poly_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gmp.h>
#include <z3.h>

#include "../common/mem.h"

/* ---- public ------------------------------------------------------------------- */

vd_rc vd_smt_nf_new(vd_smt_nf **out, vd_smt *s, uint64_t budget) {
  *out = NULL;
  vd_smt_nf *nf = vd_calloc(1, sizeof(*nf));
  if (!nf) return VD_ENOMEM;
  nf->s = s;
  nf->z = vd_smt_i_z3(s);
  nf->budget = budget ? budget : UINT64_MAX;
  nf->lazy_terms = LAZY_PRODUCT_TERMS;
  mpq_init(nf->t1);
  mpq_init(nf->t2);
  nf->gen = 1;
  /* monomial 0 = 1; polynomial 0 = 0; then the constant 1 and the Booleans */
  uint32_t none = 0;
  int64_t m0 = vd_smt_i_nf_seq_intern(&nf->monos, &none, 0), p0 = vd_smt_i_nf_seq_intern(&nf->polys, &none, 0);
  *out = nf;
  if (m0 != 0 || p0 != 0) return VD_ENOMEM;
  nf->zero_poly = 0;
  mpq_set_ui(nf->t2, 1, 1);
  int64_t one = vd_smt_i_nf_poly_const(nf, nf->t2);
  uint32_t kt = A_TRUE, kf = A_FALSE;
  int64_t pt = vd_smt_i_nf_atom_poly(nf, &kt, 1), pf = vd_smt_i_nf_atom_poly(nf, &kf, 1);
  if (one < 0 || pt < 0 || pf < 0) return VD_ENOMEM;
  nf->one_poly = (uint32_t)one;
  nf->true_poly = (uint32_t)pt;
  nf->false_poly = (uint32_t)pf;
  return VD_OK;
}

void vd_smt_nf_free(vd_smt_nf *nf) {
  if (!nf) return;
  vd_smt_i_nf_seqtab_free(&nf->atoms);
  vd_smt_i_nf_seqtab_free(&nf->monos);
  vd_smt_i_nf_seqtab_free(&nf->polys);
  for (size_t i = 0; i < nf->n_q; i++) mpq_clear(nf->q[i]);
  vd_free(nf->q);
  vd_free(nf->qhash);
  vd_free(nf->qslot);
  vd_smt_i_nf_u64map_free(&nf->memo);
  vd_smt_i_nf_u64map_free(&nf->parents);
  vd_smt_i_nf_u64map_free(&nf->mono_mul);
  vd_smt_i_nf_u64map_free(&nf->kernels);
  for (size_t i = 0; i < nf->init_lq; i++) mpq_clear(nf->lq[i]);
  vd_free(nf->lq);
  vd_free(nf->lf);
  for (size_t i = 0; i < nf->acc_init; i++) mpq_clear(nf->acc_val[i]);
  vd_free(nf->acc_mono);
  vd_free(nf->acc_val);
  vd_free(nf->acc_slot);
  vd_free(nf->acc_gen);
  vd_free(nf->buf);
  vd_free(nf->buf2);
  mpq_clear(nf->t1);
  mpq_clear(nf->t2);
  vd_free(nf);
}

void vd_smt_nf_set_structural(vd_smt_nf *nf, int on) { nf->lazy_terms = on ? 1 : LAZY_PRODUCT_TERMS; }
uint64_t vd_smt_nf_steps(const vd_smt_nf *nf) { return nf->steps; }
int vd_smt_nf_gave_up(const vd_smt_nf *nf) { return nf->gave_up; }
int vd_smt_nf_laws_used(const vd_smt_nf *nf) { return nf->laws_used; }

vd_rc vd_smt_nf_note_laws(vd_smt *s, const vd_term *par, const vd_term *single, size_t n) {
  vd_smt_nf *nf = NULL;
  vd_rc rc = vd_smt_nf_new(&nf, s, vd_smt_i_nf_budget(s));
  int64_t id;
  for (size_t i = 0; rc == VD_OK && i < n && !nf->laws_used; i++) {
    rc = vd_smt_nf_of(nf, par[i], &id);
    if (rc == VD_OK) rc = vd_smt_nf_of(nf, single[i], &id);
  }
  if (rc == VD_OK && nf->laws_used) vd_smt_i_set_laws_used(s, 1);
  vd_smt_nf_free(nf);
  return rc;
}

static int64_t memo_of(vd_smt_nf *nf, Z3_ast a) { return u64map_get(&nf->memo, Z3_get_ast_id(nf->z, a)); }

/* ---- flattened sums -----------------------------------------------------------
 * OPTIMIZATION-ONLY.  A chain of sums (a gradient accumulated over k
 * microbatches, then reduced over replicas) normalised node by node costs
 * the sum of the intermediate sizes, quadratic in k.  A sum node used by one
 * sum only (counted over every root of the check by vd_smt_nf_prepare) is
 * not normalised on its own: its parent adds its summands directly, with
 * their coefficients (numeral scalings on the way are folded in).  The
 * polynomial is the same (the form is canonical), only the work changes. */

static int uses_one(vd_smt_nf *nf, Z3_ast a) {
  return nf->prepared && u64map_get(&nf->parents, Z3_get_ast_id(nf->z, a)) == 1;
}

/* a's numeral value into q (1 when a is one) */
static int numeral_q(vd_smt_nf *nf, Z3_ast a, mpq_t q) {
  if (Z3_get_ast_kind(nf->z, a) != Z3_NUMERAL_AST) return 0;
  Z3_string str = Z3_get_numeral_string(nf->z, a);
  if (!str || mpq_set_str(q, str, 10) != 0) return 0;
  mpq_canonicalize(q);
  return 1;
}

/* Sum heads: +, -, unary minus.  A scaling by a numeral (c * x) is a sum of
 * one summand, flattened only when it is itself inlined. */
static int sum_head(vd_smt_nf *nf, Z3_ast a) {
  if (Z3_get_ast_kind(nf->z, a) != Z3_APP_AST) return 0;
  Z3_decl_kind k = Z3_get_decl_kind(nf->z, Z3_get_app_decl(nf->z, Z3_to_app(nf->z, a)));
  return k == Z3_OP_ADD || k == Z3_OP_SUB || k == Z3_OP_UMINUS;
}

static int scaling(vd_smt_nf *nf, Z3_ast a, Z3_ast *x, mpq_t q) {
  if (Z3_get_ast_kind(nf->z, a) != Z3_APP_AST) return 0;
  Z3_app app = Z3_to_app(nf->z, a);
  if (Z3_get_decl_kind(nf->z, Z3_get_app_decl(nf->z, app)) != Z3_OP_MUL || Z3_get_app_num_args(nf->z, app) != 2)
    return 0;
  for (unsigned i = 0; i < 2; i++)
    if (numeral_q(nf, Z3_get_app_arg(nf->z, app, i), q)) {
      *x = Z3_get_app_arg(nf->z, app, 1 - i);
      return 1;
    }
  return 0;
}

static int leaf_push(vd_smt_nf *nf, Z3_ast a, const mpq_t q) {
  if (nf->n_lf == nf->cap_lf) {
    size_t nc = nf->cap_lf ? 2 * nf->cap_lf : 64;
    Z3_ast *na = vd_realloc_array(nf->lf, nc, sizeof(Z3_ast));
    if (!na) return -1;
    nf->lf = na;
    mpq_t *nq = vd_realloc_array(nf->lq, nc, sizeof(mpq_t));
    if (!nq) return -1;
    nf->lq = nq;
    nf->cap_lf = nc;
  }
  if (nf->n_lf == nf->init_lq) mpq_init(nf->lq[nf->init_lq++]);
  nf->lf[nf->n_lf] = a;
  mpq_set(nf->lq[nf->n_lf], q);
  nf->n_lf++;
  return 0;
}

/* The summands of a (a sum head, a numeral scaling, or else a itself),
 * through inlined sums and scalings (every one when all), into
 * nf->lf / nf->lq (in a deterministic order).  One step per node walked.
 * -1 on budget or memory. */
static int gather(vd_smt_nf *nf, Z3_ast a, int all) {
  Z3_context z = nf->z;
  nf->n_lf = 0;
  /* work stack of (node, coefficient) */
  Z3_ast *st = NULL;
  mpq_t *sq = NULL;
  size_t n = 0, cap = 0, init = 0;
  int rc = 0;
  mpq_t q, k;
  mpq_init(q);
  mpq_init(k);
#define PUSH(node, coef)                                                                   \
  do {                                                                                     \
    if (n == cap) {                                                                        \
      size_t nc_ = cap ? 2 * cap : 32;                                                     \
      Z3_ast *ns_ = vd_realloc_array(st, nc_, sizeof(Z3_ast));                             \
      mpq_t *nq_ = ns_ ? vd_realloc_array(sq, nc_, sizeof(mpq_t)) : NULL;                  \
      if (ns_) st = ns_;                                                                   \
      if (nq_) sq = nq_;                                                                   \
      if (!ns_ || !nq_) { rc = -1; nf->oom = 1; break; }                                   \
      cap = nc_;                                                                           \
    }                                                                                      \
    if (n == init) mpq_init(sq[init++]);                                                   \
    st[n] = (node);                                                                        \
    mpq_set(sq[n], (coef));                                                                \
    n++;                                                                                   \
  } while (0)
  mpq_set_ui(q, 1, 1);
  PUSH(a, q);
  while (n && rc == 0) {
    if (charge(nf, 1)) {
      rc = -1;
      break;
    }
    nf->steps++;
    n--;
    Z3_ast x = st[n];
    mpq_set(q, sq[n]);
    Z3_ast y = NULL;
    if (x != a && !all && !uses_one(nf, x)) {
      rc = leaf_push(nf, x, q) ? (nf->oom = 1, -1) : 0;
      continue;
    }
    if (scaling(nf, x, &y, k)) {
      mpq_mul(q, q, k);
      PUSH(y, q);
      continue;
    }
    if (!sum_head(nf, x)) {
      rc = leaf_push(nf, x, q) ? (nf->oom = 1, -1) : 0;
      continue;
    }
    Z3_app app = Z3_to_app(z, x);
    Z3_decl_kind dk = Z3_get_decl_kind(z, Z3_get_app_decl(z, app));
    unsigned na = Z3_get_app_num_args(z, app);
    /* pushed in reverse so that summands come out in argument order */
    for (unsigned i = na; i-- > 0 && rc == 0;) {
      mpq_set(k, q);
      if (dk == Z3_OP_UMINUS || (dk == Z3_OP_SUB && i > 0)) mpq_neg(k, k);
      PUSH(Z3_get_app_arg(z, app, i), k);
    }
  }
#undef PUSH
  for (size_t i = 0; i < init; i++) mpq_clear(sq[i]);
  vd_free(st);
  vd_free(sq);
  mpq_clear(q);
  mpq_clear(k);
  return rc;
}

/* sum of nf->lq[i] * nf(nf->lf[i]) (every leaf memoised). */
static int64_t leaves_sum(vd_smt_nf *nf) {
  uint64_t work = 0;
  for (size_t i = 0; i < nf->n_lf; i++) {
    int64_t p = u64map_get(&nf->memo, Z3_get_ast_id(nf->z, nf->lf[i]));
    if (p < 0) return -1;
    work += poly_len(nf, (uint32_t)p);
  }
  if (charge(nf, work)) return -1;
  vd_smt_i_nf_acc_reset(nf);
  for (size_t i = 0; i < nf->n_lf; i++) {
    uint32_t n;
    int64_t p = u64map_get(&nf->memo, Z3_get_ast_id(nf->z, nf->lf[i]));
    const uint32_t *x = seq_at(&nf->polys, (uint32_t)p, &n);
    for (uint32_t j = 0; j < n; j += 2)
      if (vd_smt_i_nf_acc_add(nf, x[j], nf->q[x[j + 1]], nf->lq[i])) return -1;
  }
  return vd_smt_i_nf_acc_finish(nf);
}

/* The sum of coefficient * leaf over every summand of a (through every sum
 * and numeral scaling) minus the same for b, accumulated by leaf ast id;
 * *eq = 1 when every coefficient cancels.  SOUNDNESS: a and b are then the
 * same linear combination of the same terms (associativity, commutativity,
 * distributivity of numerals), so equal under every interpretation. */
vd_rc vd_smt_nf_same_sum(vd_smt_nf *nf, vd_term a, vd_term b, int *eq) {
  *eq = 0;
  if (nf->gave_up) return VD_OK;
  if (nf->oom) return VD_ENOMEM;
  vd_smt_i_nf_acc_reset(nf);
  mpq_t neg;
  mpq_init(neg);
  int rc = 0;
  for (int side = 0; side < 2 && rc == 0; side++) {
    rc = gather(nf, side ? b : a, 1);
    if (rc == 0 && charge(nf, nf->n_lf)) rc = -1;
    for (size_t i = 0; i < nf->n_lf && rc == 0; i++) {
      if (side) mpq_neg(neg, nf->lq[i]);
      else mpq_set(neg, nf->lq[i]);
      rc = vd_smt_i_nf_acc_add(nf, Z3_get_ast_id(nf->z, nf->lf[i]), neg, NULL);
    }
  }
  mpq_clear(neg);
  if (nf->oom) return VD_ENOMEM;
  if (rc) return VD_OK;
  *eq = 1;
  for (size_t i = 0; i < nf->acc_n && *eq; i++) *eq = mpq_sgn(nf->acc_val[i]) == 0;
  return VD_OK;
}

vd_rc vd_smt_nf_prepare(vd_smt_nf *nf, const vd_term *roots, size_t n_roots) {
  Z3_context z = nf->z;
  u64map seen = {0};
  Z3_ast *stack = NULL;
  size_t n = 0, cap = 0;
  vd_rc rc = VD_OK;
  /* A root counts as a use: its own normal form is needed. */
  for (size_t i = 0; i < n_roots && rc == VD_OK; i++) {
    if (!roots[i]) continue;
    uint64_t id = Z3_get_ast_id(z, roots[i]);
    int64_t c = u64map_get(&nf->parents, id);
    if (vd_smt_i_nf_u64map_put(&nf->parents, id, c < 0 ? 1 : 2)) rc = VD_ENOMEM;
    if (u64map_get(&seen, id) < 0) {
      if (vd_smt_i_nf_u64map_put(&seen, id, 0) || VD_GROW(stack, cap, n + 1)) rc = VD_ENOMEM;
      else stack[n++] = roots[i];
    }
  }
  while (n && rc == VD_OK) {
    Z3_ast a = stack[--n];
    if (Z3_get_ast_kind(z, a) != Z3_APP_AST) continue;
    Z3_app app = Z3_to_app(z, a);
    unsigned na = Z3_get_app_num_args(z, app);
    for (unsigned i = 0; i < na && rc == VD_OK; i++) {
      Z3_ast c = Z3_get_app_arg(z, app, i);
      uint64_t id = Z3_get_ast_id(z, c);
      int64_t k = u64map_get(&nf->parents, id);
      if (k < 2 && vd_smt_i_nf_u64map_put(&nf->parents, id, k < 0 ? 1 : 2)) rc = VD_ENOMEM;
      if (rc == VD_OK && u64map_get(&seen, id) < 0) {
        if (vd_smt_i_nf_u64map_put(&seen, id, 0) || VD_GROW(stack, cap, n + 1)) rc = VD_ENOMEM;
        else stack[n++] = c;
      }
    }
  }
  vd_smt_i_nf_u64map_free(&seen);
  vd_free(stack);
  if (rc == VD_OK) nf->prepared = 1;
  return rc;
}

/* Normal form of a numeral (an atom when its text is no rational). */
static int64_t numeral_nf(vd_smt_nf *nf, Z3_ast a) {
  Z3_context z = nf->z;
  Z3_string str = Z3_get_numeral_string(z, a);
  if (!str || mpq_set_str(nf->t2, str, 10) != 0) {
    uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
    return vd_smt_i_nf_atom_poly(nf, key, 2);
  }
  mpq_canonicalize(nf->t2);
  mpq_t c;
  mpq_init(c);
  mpq_set(c, nf->t2);
  int64_t r = vd_smt_i_nf_poly_const(nf, c);
  mpq_clear(c);
  return r;
}

/* The product of the arguments (c: scratch). */
static int64_t mul_nf(vd_smt_nf *nf, const uint32_t *args, unsigned na, mpq_t c) {
  int64_t r;
#ifdef VD_TEST_BREAK_NF
  /* TEST ONLY (the broken-NF build of `make e2e`, tests/e2e/50_certificate.sh):
   * a deliberately wrong rule, c * x -> x for a numeral c != 0, so that
   * `verdict recheck` and --cross-check are seen catching a normal form
   * that proves a false equality.  Never defined in a real build. */
  r = nf->one_poly;
  for (unsigned i = 0; i < na && r >= 0; i++)
    if (!(vd_smt_i_nf_poly_is_const(nf, args[i], c) && mpq_sgn(c) != 0)) r = vd_smt_i_nf_poly_mul(nf, (uint32_t)r, args[i]);
  return r;
#endif
  (void)c;
  r = na ? args[0] : nf->one_poly;
  for (unsigned i = 1; i < na && r >= 0; i++) r = vd_smt_i_nf_poly_mul(nf, (uint32_t)r, args[i]);
  return r;
}

/* x / c for a non-zero numeral c; otherwise an atom [A_DIV, args] (the
 * key is written into ch[2..], just before args = ch + 3). */
static int64_t div_nf(vd_smt_nf *nf, uint32_t *ch, const uint32_t *args, unsigned na, mpq_t c) {
  if (na == 2 && vd_smt_i_nf_poly_is_const(nf, args[1], c) && mpq_sgn(c) != 0) {
    mpq_inv(c, c);
    return vd_smt_i_nf_poly_scale(nf, args[0], c);
  }
  if (na == 2) {
    int64_t r = vd_smt_i_nf_div(nf, args[0], args[1]);
    if (r != NO_LAW) return r;
  }
  ch[2] = A_DIV;
  return vd_smt_i_nf_atom_poly(nf, ch + 2, na + 1);
}

/* x ^ e for a numeral 0 <= e <= MAX_POW into *r; 1 when not (a generic atom). */
static int power_nf(vd_smt_nf *nf, const uint32_t *args, unsigned na, mpq_t c, int64_t *r) {
  if (na == 2 && vd_smt_i_nf_poly_is_const(nf, args[1], c) && mpz_cmp_ui(mpq_denref(c), 1) == 0 && mpq_sgn(c) >= 0 &&
      mpz_cmp_ui(mpq_numref(c), MAX_POW) <= 0) {
    *r = vd_smt_i_nf_poly_pow(nf, args[0], (unsigned)mpz_get_ui(mpq_numref(c)));
    return 0;
  }
  return 1;
}

/* <=, >=, <, > into *r (left -1 on failure); 1 when not binary (a generic atom). */
static int cmp_nf(vd_smt_nf *nf, Z3_decl_kind dk, const uint32_t *args, unsigned na, mpq_t c, int64_t *r) {
  if (na != 2) return 1;
  /* a <= b  iff  a - b <= 0; ge/gt swap the sides. */
  int swap = dk == Z3_OP_GE || dk == Z3_OP_GT, strict = dk == Z3_OP_LT || dk == Z3_OP_GT;
  uint32_t pr[2] = {args[swap ? 1 : 0], args[swap ? 0 : 1]};
  int sgn[2] = {1, -1};
  int64_t d = vd_smt_i_nf_poly_sum(nf, pr, sgn, 2);
  if (d < 0) return 0;
  if (vd_smt_i_nf_poly_is_const(nf, (uint32_t)d, c)) {
    int holds = strict ? mpq_sgn(c) < 0 : mpq_sgn(c) <= 0;
    *r = holds ? nf->true_poly : nf->false_poly;
    return 0;
  }
  int64_t m = vd_smt_i_nf_poly_monic(nf, (uint32_t)d, 1);
  if (m < 0) return 0;
  uint32_t key[2] = {strict ? A_LT : A_LE, (uint32_t)m};
  *r = vd_smt_i_nf_atom_poly(nf, key, 2);
  return 0;
}

/* = into *r (left -1 on failure); 1 when not binary (a generic atom). */
static int eq_nf(vd_smt_nf *nf, Z3_app app, const uint32_t *args, unsigned na, mpq_t c, int64_t *r) {
  Z3_context z = nf->z;
  if (na != 2) return 1;
  if (args[0] == args[1]) {
    *r = nf->true_poly;
    return 0;
  }
  Z3_sort_kind sk = Z3_get_sort_kind(z, Z3_get_sort(z, Z3_get_app_arg(z, app, 0)));
  if (sk != Z3_REAL_SORT && sk != Z3_INT_SORT) {
    uint32_t key[3] = {A_EQGEN, args[0] < args[1] ? args[0] : args[1], args[0] < args[1] ? args[1] : args[0]};
    *r = vd_smt_i_nf_atom_poly(nf, key, 3);
    return 0;
  }
  int sgn[2] = {1, -1};
  int64_t d = vd_smt_i_nf_poly_sum(nf, args, sgn, 2);
  if (d < 0) return 0;
  if (vd_smt_i_nf_poly_is_const(nf, (uint32_t)d, c)) {
    *r = mpq_sgn(c) == 0 ? nf->true_poly : nf->false_poly;
    return 0;
  }
  int64_t m = vd_smt_i_nf_poly_monic(nf, (uint32_t)d, 0);
  if (m < 0) return 0;
  uint32_t key[2] = {A_EQ, (uint32_t)m};
  *r = vd_smt_i_nf_atom_poly(nf, key, 2);
  return 0;
}

/* Normal form of application a (declaration f, na arguments whose normal
 * forms are args = ch + 3; ch[0..2] are free for a key in front of them,
 * sg has na + 1 entries, c is scratch). */
static int64_t app_nf(vd_smt_nf *nf, Z3_ast a, Z3_app app, Z3_func_decl f, unsigned na, uint32_t *ch, int *sg,
                      mpq_t c) {
  Z3_context z = nf->z;
  Z3_decl_kind dk = Z3_get_decl_kind(z, f);
  uint32_t *args = ch + 3;
  int64_t r = -1;
  switch (dk) {
  case Z3_OP_TRUE: r = nf->true_poly; break;
  case Z3_OP_FALSE: r = nf->false_poly; break;
  case Z3_OP_ADD: r = vd_smt_i_nf_poly_sum(nf, args, NULL, na); break;
  case Z3_OP_SUB:
    for (unsigned i = 0; i < na; i++) sg[i] = i ? -1 : 1;
    r = vd_smt_i_nf_poly_sum(nf, args, sg, na);
    break;
  case Z3_OP_UMINUS:
    sg[0] = -1;
    r = na == 1 ? vd_smt_i_nf_poly_sum(nf, args, sg, 1) : -1;
    break;
  case Z3_OP_TO_REAL: r = na == 1 ? (int64_t)args[0] : -1; break;
  case Z3_OP_MUL: r = mul_nf(nf, args, na, c); break;
  case Z3_OP_DIV: r = div_nf(nf, ch, args, na, c); break;
  case Z3_OP_POWER:
    if (power_nf(nf, args, na, c, &r)) goto generic;
    break;
  case Z3_OP_LE: case Z3_OP_GE: case Z3_OP_LT: case Z3_OP_GT:
    if (cmp_nf(nf, dk, args, na, c, &r)) goto generic;
    break;
  case Z3_OP_EQ:
    if (eq_nf(nf, app, args, na, c, &r)) goto generic;
    break;
  case Z3_OP_ITE:
    if (na != 3) goto generic;
    if (args[0] == nf->true_poly || args[1] == args[2]) r = args[1];
    else if (args[0] == nf->false_poly) r = args[2];
    else if ((r = vd_smt_i_nf_ite(nf, args[0], args[1], args[2])) == NO_LAW) goto generic;
    break;
  case Z3_OP_UNINTERPRETED:
    if (na == 0) {
      uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
      r = vd_smt_i_nf_atom_poly(nf, key, 2);
      break;
    }
    if (na == 1) {
      int kind = vd_smt_i_nf_kernel(nf, f);
      r = kind == KERNEL_EXP ? vd_smt_i_nf_exp(nf, args[0]) : kind == KERNEL_LOG ? vd_smt_i_nf_log(nf, args[0]) : NO_LAW;
      if (r != NO_LAW) break;
    }
    ch[1] = A_APP;
    ch[2] = Z3_get_ast_id(z, Z3_func_decl_to_ast(z, f));
    r = vd_smt_i_nf_atom_poly(nf, ch + 1, na + 2);
    break;
  default:
  generic:
    /* Any other operator is a function of its arguments' values: an atom
     * keyed by its declaration (which includes sorts and parameters) and
     * the normal forms of its arguments. */
    ch[1] = A_GEN;
    ch[2] = Z3_get_ast_id(z, Z3_func_decl_to_ast(z, f));
    r = vd_smt_i_nf_atom_poly(nf, ch + 1, na + 2);
    break;
  }
  return r;
}

/* Normal form of node a whose arguments are all memoised. */
static int64_t node_nf(vd_smt_nf *nf, Z3_ast a) {
  Z3_context z = nf->z;
  if (charge(nf, 1)) return -1;
  nf->steps++;
  Z3_ast_kind kind = Z3_get_ast_kind(z, a);
  if (kind == Z3_NUMERAL_AST) return numeral_nf(nf, a);
  if (kind != Z3_APP_AST) {
    uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
    return vd_smt_i_nf_atom_poly(nf, key, 2);
  }
  if (nf->prepared && sum_head(nf, a)) {
    if (gather(nf, a, 0)) return -1;
    return leaves_sum(nf);
  }
  Z3_app app = Z3_to_app(z, a);
  Z3_func_decl f = Z3_get_app_decl(z, app);
  unsigned na = Z3_get_app_num_args(z, app);
  uint32_t *ch = vd_malloc(sizeof(uint32_t) * (na + 4));
  int *sg = vd_malloc(sizeof(int) * (na + 1));
  int64_t r = -1;
  mpq_t c;
  mpq_init(c);
  if (!ch || !sg) {
    nf->oom = 1;
    goto done;
  }
  uint32_t *args = ch + 3;
  for (unsigned i = 0; i < na; i++) {
    int64_t v = memo_of(nf, Z3_get_app_arg(z, app, i));
    if (v < 0) goto done; /* only after a failure */
    args[i] = (uint32_t)v;
  }
  r = app_nf(nf, a, app, f, na, ch, sg, c);
done:
  mpq_clear(c);
  vd_free(ch);
  vd_free(sg);
  return r;
}

/* The walk's stack: pushes child c unless it is memoised already (then
 * its parent is not ready).  -1 (and nf->oom) when out of memory. */
static int push_pending(vd_smt_nf *nf, Z3_ast c, Z3_ast **stack, size_t *cap, size_t *n, int *ready) {
  if (memo_of(nf, c) >= 0) return 0;
  *ready = 0;
  if (VD_GROW(*stack, *cap, *n + 1)) {
    nf->oom = 1;
    return -1;
  }
  (*stack)[(*n)++] = c;
  return 0;
}

vd_rc vd_smt_nf_of(vd_smt_nf *nf, vd_term t, int64_t *id) {
  Z3_context z = nf->z;
  *id = -1;
  if (nf->gave_up) return VD_OK;
  if (nf->oom) return VD_ENOMEM;
  int64_t hit = memo_of(nf, t);
  if (hit >= 0) {
    *id = hit;
    return VD_OK;
  }
  /* Iterative post-order: a node is pushed once to expand its arguments and
   * finished when met again with every argument memoised. */
  Z3_ast *stack = NULL;
  size_t n = 0, cap = 0;
  if (VD_GROW(stack, cap, 1)) return VD_ENOMEM;
  stack[n++] = t;
  while (n && !nf->gave_up && !nf->oom) {
    Z3_ast a = stack[n - 1];
    if (memo_of(nf, a) >= 0) {
      n--;
      continue;
    }
    int ready = 1;
    if (nf->prepared && sum_head(nf, a)) {
      /* the summands of the flattened sum are its children */
      if (gather(nf, a, 0)) break;
      for (size_t i = 0; i < nf->n_lf; i++)
        if (push_pending(nf, nf->lf[i], &stack, &cap, &n, &ready)) break;
    } else if (Z3_get_ast_kind(z, a) == Z3_APP_AST) {
      Z3_app app = Z3_to_app(z, a);
      unsigned na = Z3_get_app_num_args(z, app);
      for (unsigned i = 0; i < na; i++)
        if (push_pending(nf, Z3_get_app_arg(z, app, i), &stack, &cap, &n, &ready)) break;
    }
    if (!ready || nf->oom) continue;
    n--;
    int64_t r = node_nf(nf, a);
    if (r < 0) break;
    if (vd_smt_i_nf_u64map_put(&nf->memo, Z3_get_ast_id(z, a), (uint32_t)r)) nf->oom = 1;
  }
  vd_free(stack);
  if (nf->oom) return VD_ENOMEM;
  if (nf->gave_up) return VD_OK;
  *id = memo_of(nf, t);
  return VD_OK;
}
