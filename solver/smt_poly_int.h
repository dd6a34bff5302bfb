/*
 * solver/smt_poly_int.h - private to verdict's normal form (smt_poly.c, the
 * algebra: interned sequences, coefficients, the accumulator, monomials
 * and polynomials; smt_poly_walk.c, the term walk and vd_smt_nf_*): the
 * context, its tables, and the polynomial operations the walk uses.
 */
#ifndef VD_SMT_POLY_INT_H
#define VD_SMT_POLY_INT_H

#include <stdint.h>
#include <gmp.h>
#include <z3.h>

#include "../common/hash.h"
#include "smt.h"

#define VD_NF_MAX_COEF_BITS 4096
#define MAX_POW 64

enum { A_CONST = 1, A_APP, A_GEN, A_EQ, A_LE, A_LT, A_TRUE, A_FALSE, A_DIV, A_EQGEN, A_MUL,
       /* the laws' atoms (smt_poly_laws.c) */
       A_EXP, A_LOG, A_INV, A_LOGC, A_IND };

/* A product whose expansion would have more than this many terms stays a
 * product: an atom keyed by the normal forms of its two factors (sorted).
 * Sound (multiplication is a function of its factors' values) but not
 * canonical, so such atoms only prove pairs whose products were formed
 * from equal factors; the rest go to the solver.  A fixed number: the
 * result depends on the terms only. */
#define LAZY_PRODUCT_TERMS 4096u

/* ---- interned u32 sequences and a u64 -> u32 map (smt_poly.c) ---------- */
typedef struct {
  uint32_t *pool;
  size_t n_pool, cap_pool;
  uint32_t *off, *len;
  uint64_t *hash;
  size_t n, cap, cap_off, cap_len, cap_hash;
  uint32_t *slot; /* id + 1; power-of-two size */
  size_t n_slot;
} seqtab;

static inline const uint32_t *seq_at(const seqtab *t, uint32_t id, uint32_t *n) {
  *n = t->len[id];
  return t->pool + t->off[id];
}

typedef struct {
  uint64_t *key;
  uint32_t *val; /* val + 1, 0 = empty */
  size_t n, cap;
} u64map;

static inline int64_t u64map_get(const u64map *m, uint64_t k) {
  if (!m->cap) return -1;
  size_t j = vd_hash_mix64(k) & (m->cap - 1);
  while (m->val[j]) {
    if (m->key[j] == k) return (int64_t)m->val[j] - 1;
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

void vd_smt_i_nf_seqtab_free(seqtab *t);
/* Interned id of the sequence a[0..n); -1 on ENOMEM. */
int64_t vd_smt_i_nf_seq_intern(seqtab *t, const uint32_t *a, uint32_t n);
void vd_smt_i_nf_u64map_free(u64map *m);
/* k -> v (replacing); -1 on ENOMEM. */
int vd_smt_i_nf_u64map_put(u64map *m, uint64_t k, uint32_t v);

/* ---- the normal-form context --------------------------------------------- */
struct vd_smt_nf {
  vd_smt *s;
  Z3_context z;
  uint64_t budget, steps;
  uint64_t lazy_terms; /* products of sums with more terms stay atoms */
  int gave_up;       /* budget or coefficient size exceeded: sticky */
  int oom;
  seqtab atoms, monos, polys;
  /* coefficients: interned rationals */
  mpq_t *q;
  uint64_t *qhash;
  size_t n_q, cap_q, cap_qhash;
  uint32_t *qslot;
  size_t n_qslot;
  u64map memo;       /* Z3 ast id -> poly id */
  u64map parents;    /* after vd_smt_nf_prepare: ast id -> uses (1, or 2 = more) */
  int prepared;
  /* gather scratch: leaves of a flattened sum and their coefficients */
  Z3_ast *lf;
  mpq_t *lq;
  size_t n_lf, cap_lf, init_lq;
  u64map mono_mul;   /* (m1, m2) -> product monomial */
  /* accumulator: monomial -> rational */
  uint32_t *acc_mono;
  mpq_t *acc_val;
  size_t acc_n, acc_cap, acc_init;
  uint32_t *acc_slot, *acc_gen;
  size_t acc_n_slot;
  uint32_t gen;
  /* scratch */
  uint32_t *buf;
  size_t cap_buf;
  uint32_t *buf2;
  size_t cap_buf2;
  mpq_t t1, t2;
  uint32_t zero_poly, one_poly, true_poly, false_poly;
  u64map kernels;    /* declaration ast id -> kernel kind (smt_poly_laws.c) */
  int laws_used;     /* a law of smt_poly_laws.c rewrote a term */
};

/* Counts work steps against the budget; -1 (sticky give-up) past it. */
static inline int charge(vd_smt_nf *nf, uint64_t work) {
  if (nf->gave_up || nf->oom) return -1;
  if (work > nf->budget || nf->steps > nf->budget - work) {
    nf->gave_up = 1;
    return -1;
  }
  return 0;
}

static inline uint32_t poly_len(const vd_smt_nf *nf, uint32_t p) { return nf->polys.len[p] / 2; }

/* ---- the accumulator: monomial -> rational (smt_poly.c) ------------------ */
void vd_smt_i_nf_acc_reset(vd_smt_nf *nf);
/* Adds a * b to monomial mono (b may be NULL: a alone). */
int vd_smt_i_nf_acc_add(vd_smt_nf *nf, uint32_t mono, const mpq_t a, const mpq_t b);
/* The accumulated polynomial, interned; -1 on failure. */
int64_t vd_smt_i_nf_acc_finish(vd_smt_nf *nf);

/* ---- coefficients and monomials (smt_poly.c) ------------------------------ */
/* Interned id of the rational v; -1 (and gave_up/oom) when too big or ENOMEM. */
int64_t vd_smt_i_nf_coef_intern(vd_smt_nf *nf, const mpq_t v);
/* The product of monomials a and b (memoised); -1 on failure. */
int64_t vd_smt_i_nf_mono_mul(vd_smt_nf *nf, uint32_t a, uint32_t b);

/* ---- polynomials (smt_poly.c); each returns an id or -1 ------------------- */
/* sum of sign_i * p_i (sign NULL: all +1). */
int64_t vd_smt_i_nf_poly_sum(vd_smt_nf *nf, const uint32_t *p, const int *sign, size_t k);
int64_t vd_smt_i_nf_poly_mul(vd_smt_nf *nf, uint32_t a, uint32_t b);
int64_t vd_smt_i_nf_poly_scale(vd_smt_nf *nf, uint32_t p, const mpq_t c);
int64_t vd_smt_i_nf_poly_const(vd_smt_nf *nf, const mpq_t c);
/* c * mono (0 when c is 0). */
int64_t vd_smt_i_nf_mono_poly(vd_smt_nf *nf, uint32_t mono, const mpq_t c);
/* p^e by repeated multiplication. */
int64_t vd_smt_i_nf_poly_pow(vd_smt_nf *nf, uint32_t p, unsigned e);
/* 1 and *c = the value when p is a constant polynomial (0 included). */
int vd_smt_i_nf_poly_is_const(vd_smt_nf *nf, uint32_t p, mpq_t c);
/* The polynomial of the single atom keyed by key[0..n). */
int64_t vd_smt_i_nf_atom_poly(vd_smt_nf *nf, const uint32_t *key, uint32_t n);
/* p scaled so that its first coefficient (in monomial-id order) is 1, or
 * +-1 when positive = 1 (comparisons keep their direction). */
int64_t vd_smt_i_nf_poly_monic(vd_smt_nf *nf, uint32_t p, int positive);

/* ---- the laws of exp, log, positive division and indicators (smt_poly_laws.c);
 * each returns a polynomial id, -1 on failure, or NO_LAW (-2) when the law
 * does not apply (the caller makes the plain atom). */
#define NO_LAW (-2)
/* The kernel a declaration names: KERNEL_EXP, KERNEL_LOG or 0 (cached). */
enum { KERNEL_OTHER = 1, KERNEL_EXP, KERNEL_LOG };
int vd_smt_i_nf_kernel(vd_smt_nf *nf, Z3_func_decl f);
int64_t vd_smt_i_nf_exp(vd_smt_nf *nf, uint32_t p);
int64_t vd_smt_i_nf_log(vd_smt_nf *nf, uint32_t p);
int64_t vd_smt_i_nf_div(vd_smt_nf *nf, uint32_t a, uint32_t b);
int64_t vd_smt_i_nf_ite(vd_smt_nf *nf, uint32_t cond, uint32_t a, uint32_t b);

#endif
