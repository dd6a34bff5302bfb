/*
 * solver/smt_poly.c - verdict's own normal form of arithmetic terms: a
 * hash-consed polynomial over atoms with exact rational coefficients, built
 * under a deterministic work budget (docs/verifier.md section 4.2).
 *
 * Implements: vd_smt_nf_* (smt.h).  A term's normal form is an interned
 * polynomial id; two terms with the same id are equal under every value of
 * the free symbols and every interpretation of the uninterpreted functions.
 * Not here: the comparison of pairs and everything after it (smt_check.c).
 *
 * Representation (everything interned, so equality is id equality):
 *  - atom: a sequence [tag, payload...] of u32; the payloads of function
 *    applications are the NORMAL FORMS of the arguments (polynomial ids), so
 *    f(a + b) and f(b + a) are one atom;
 *  - monomial: a sequence of (atom, exponent) pairs sorted by atom id;
 *    monomial 0 is the empty product (1);
 *  - coefficient: an exact rational (GMP mpq), interned;
 *  - polynomial: a sequence of (monomial, coefficient) pairs sorted by
 *    monomial id, coefficients non-zero; the empty sequence is 0.
 *
 * SOUNDNESS: (1) every rewrite below is an identity of the ring of real
 * numbers (associativity, commutativity, distributivity, x/c = (1/c)*x for a
 * non-zero numeral c, to_real as the embedding of Z in Q) or congruence
 * (an atom is keyed by its function symbol and the normal forms of its
 * arguments, and a function applied to equal arguments gives equal values;
 * this holds for uninterpreted functions, for Z3's interpreted but
 * non-polynomial operators such as ite, integer div or division by a
 * non-numeral, and for comparisons, which are functions of the
 * difference of their sides).  So nf(t) denotes the value of t under every
 * interpretation.  (2) The map from polynomials (elements of the free
 * commutative ring Q[atoms]) to interned ids is injective and canonical:
 * sorted, merged, zero-free sequences are unique, so two terms get the same
 * id exactly when their polynomials are equal in Q[atoms].  Equal ids are
 * therefore a proof; different ids prove nothing (two atoms may still be
 * equal in the theory), and such pairs go on to the solver.
 *
 * Budget.  Each monomial product, each monomial added to a sum and each
 * term node visited counts one step, and a product monomial met for the
 * first time also counts its number of atoms; an operation that would pass the
 * budget is refused before it allocates, and the normal form gives up
 * (sticky) for the rest of the check.  The count depends only on the terms'
 * structure, never on the machine, its load or the order of ids, so the
 * same stage stops at the same point everywhere.  Coefficients are bounded
 * to VD_NF_MAX_COEF_BITS bits (larger ones also give up), which keeps
 * GMP's allocations small.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gmp.h>
#include <z3.h>

#include "../common/mem.h"
#include "smt.h"

#define VD_NF_MAX_COEF_BITS 4096
#define MAX_POW 64

enum { A_CONST = 1, A_APP, A_GEN, A_EQ, A_LE, A_LT, A_TRUE, A_FALSE, A_DIV, A_EQGEN, A_MUL };

/* A product whose expansion would have more than this many terms stays a
 * product: an atom keyed by the normal forms of its two factors (sorted).
 * Sound (multiplication is a function of its factors' values) but not
 * canonical, so such atoms only prove pairs whose products were formed
 * from equal factors; the rest go to the solver.  A fixed number: the
 * result depends on the terms only. */
#define LAZY_PRODUCT_TERMS 4096u

/* ---- interned u32 sequences -------------------------------------------- */

typedef struct {
  uint32_t *pool;
  size_t n_pool, cap_pool;
  uint32_t *off, *len;
  uint64_t *hash;
  size_t n, cap, cap_off, cap_len, cap_hash;
  uint32_t *slot; /* id + 1; power-of-two size */
  size_t n_slot;
} seqtab;

static uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

static uint64_t hash_seq(const uint32_t *a, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; i++) h = mix64(h ^ a[i]) + i;
  return h;
}

static void seqtab_free(seqtab *t) {
  vd_free(t->pool);
  vd_free(t->off);
  vd_free(t->len);
  vd_free(t->hash);
  vd_free(t->slot);
  memset(t, 0, sizeof(*t));
}

static int seqtab_rehash(seqtab *t) {
  size_t ns = t->n_slot ? 2 * t->n_slot : 1024;
  uint32_t *sl = vd_calloc(ns, sizeof(uint32_t));
  if (!sl) return -1;
  for (size_t id = 0; id < t->n; id++) {
    size_t j = t->hash[id] & (ns - 1);
    while (sl[j]) j = (j + 1) & (ns - 1);
    sl[j] = (uint32_t)id + 1;
  }
  vd_free(t->slot);
  t->slot = sl;
  t->n_slot = ns;
  return 0;
}

/* Id of the sequence a[0..n) (a must not point into t->pool); -1 on ENOMEM. */
static int64_t seq_intern(seqtab *t, const uint32_t *a, uint32_t n) {
  if (2 * (t->n + 1) > t->n_slot && seqtab_rehash(t)) return -1;
  uint64_t h = hash_seq(a, n);
  size_t j = h & (t->n_slot - 1);
  while (t->slot[j]) {
    uint32_t id = t->slot[j] - 1;
    if (t->hash[id] == h && t->len[id] == n && memcmp(t->pool + t->off[id], a, n * sizeof(uint32_t)) == 0)
      return id;
    j = (j + 1) & (t->n_slot - 1);
  }
  if (t->n >= UINT32_MAX - 1 || t->n_pool + n >= UINT32_MAX) return -1;
  if (VD_GROW(t->pool, t->cap_pool, t->n_pool + n + 1) || VD_GROW(t->off, t->cap_off, t->n + 1) ||
      VD_GROW(t->len, t->cap_len, t->n + 1) || VD_GROW(t->hash, t->cap_hash, t->n + 1))
    return -1;
  memcpy(t->pool + t->n_pool, a, n * sizeof(uint32_t));
  t->off[t->n] = (uint32_t)t->n_pool;
  t->len[t->n] = n;
  t->hash[t->n] = h;
  t->n_pool += n;
  t->slot[j] = (uint32_t)t->n + 1;
  return (int64_t)t->n++;
}

static const uint32_t *seq_at(const seqtab *t, uint32_t id, uint32_t *n) {
  *n = t->len[id];
  return t->pool + t->off[id];
}

/* ---- u64 -> u32 map ------------------------------------------------------ */

typedef struct {
  uint64_t *key;
  uint32_t *val; /* val + 1, 0 = empty */
  size_t n, cap;
} u64map;

static void u64map_free(u64map *m) {
  vd_free(m->key);
  vd_free(m->val);
  memset(m, 0, sizeof(*m));
}

static int64_t u64map_get(const u64map *m, uint64_t k) {
  if (!m->cap) return -1;
  size_t j = mix64(k) & (m->cap - 1);
  while (m->val[j]) {
    if (m->key[j] == k) return (int64_t)m->val[j] - 1;
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

static int u64map_put(u64map *m, uint64_t k, uint32_t v) {
  if (2 * (m->n + 1) > m->cap) {
    size_t nc = m->cap ? 2 * m->cap : 1024;
    uint64_t *nk = vd_calloc(nc, sizeof(uint64_t));
    uint32_t *nv = vd_calloc(nc, sizeof(uint32_t));
    if (!nk || !nv) {
      vd_free(nk);
      vd_free(nv);
      return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->val[i]) {
        size_t j = mix64(m->key[i]) & (nc - 1);
        while (nv[j]) j = (j + 1) & (nc - 1);
        nk[j] = m->key[i];
        nv[j] = m->val[i];
      }
    vd_free(m->key);
    vd_free(m->val);
    m->key = nk;
    m->val = nv;
    m->cap = nc;
  }
  size_t j = mix64(k) & (m->cap - 1);
  while (m->val[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
  if (!m->val[j]) m->n++;
  m->key[j] = k;
  m->val[j] = v + 1;
  return 0;
}

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
};

static uint64_t hash_mpq(const mpq_t v) {
  uint64_t h = (uint64_t)mpq_sgn(v) * 0x9e37u;
  const mpz_srcptr nd[2] = {mpq_numref(v), mpq_denref(v)};
  for (int k = 0; k < 2; k++) {
    size_t n = mpz_size(nd[k]);
    for (size_t i = 0; i < n; i++) h = mix64(h ^ (uint64_t)mpz_getlimbn(nd[k], (mp_size_t)i)) + (uint64_t)k;
  }
  return h;
}

static int too_big(const mpq_t v) {
  return mpz_sizeinbase(mpq_numref(v), 2) > VD_NF_MAX_COEF_BITS ||
         mpz_sizeinbase(mpq_denref(v), 2) > VD_NF_MAX_COEF_BITS;
}

static int q_rehash(vd_smt_nf *nf) {
  size_t ns = nf->n_qslot ? 2 * nf->n_qslot : 256;
  uint32_t *sl = vd_calloc(ns, sizeof(uint32_t));
  if (!sl) return -1;
  for (size_t id = 0; id < nf->n_q; id++) {
    size_t j = nf->qhash[id] & (ns - 1);
    while (sl[j]) j = (j + 1) & (ns - 1);
    sl[j] = (uint32_t)id + 1;
  }
  vd_free(nf->qslot);
  nf->qslot = sl;
  nf->n_qslot = ns;
  return 0;
}

/* Interned id of the rational v (non-zero); -1 on ENOMEM or when too large. */
static int64_t coef_intern(vd_smt_nf *nf, const mpq_t v) {
  if (too_big(v)) {
    nf->gave_up = 1;
    return -1;
  }
  if (2 * (nf->n_q + 1) > nf->n_qslot && q_rehash(nf)) return nf->oom = 1, -1;
  uint64_t h = hash_mpq(v);
  size_t j = h & (nf->n_qslot - 1);
  while (nf->qslot[j]) {
    uint32_t id = nf->qslot[j] - 1;
    if (nf->qhash[id] == h && mpq_equal(nf->q[id], v)) return id;
    j = (j + 1) & (nf->n_qslot - 1);
  }
  if (VD_GROW(nf->q, nf->cap_q, nf->n_q + 1) || VD_GROW(nf->qhash, nf->cap_qhash, nf->n_q + 1))
    return nf->oom = 1, -1;
  mpq_init(nf->q[nf->n_q]);
  mpq_set(nf->q[nf->n_q], v);
  nf->qhash[nf->n_q] = h;
  nf->qslot[j] = (uint32_t)nf->n_q + 1;
  return (int64_t)nf->n_q++;
}

static int need_buf(uint32_t **b, size_t *cap, size_t n) { return VD_GROW(*b, *cap, n + 1); }

/* ---- accumulator ------------------------------------------------------------ */

static void acc_reset(vd_smt_nf *nf) {
  nf->acc_n = 0;
  if (++nf->gen == 0) {
    memset(nf->acc_gen, 0, nf->acc_n_slot * sizeof(uint32_t));
    nf->gen = 1;
  }
}

static int acc_grow_slots(vd_smt_nf *nf) {
  size_t ns = nf->acc_n_slot ? 2 * nf->acc_n_slot : 1024;
  uint32_t *sl = vd_calloc(ns, sizeof(uint32_t)), *gn = vd_calloc(ns, sizeof(uint32_t));
  if (!sl || !gn) {
    vd_free(sl);
    vd_free(gn);
    return -1;
  }
  for (size_t i = 0; i < nf->acc_n; i++) {
    size_t j = mix64(nf->acc_mono[i]) & (ns - 1);
    while (gn[j] == nf->gen) j = (j + 1) & (ns - 1);
    sl[j] = (uint32_t)i;
    gn[j] = nf->gen;
  }
  vd_free(nf->acc_slot);
  vd_free(nf->acc_gen);
  nf->acc_slot = sl;
  nf->acc_gen = gn;
  nf->acc_n_slot = ns;
  return 0;
}

/* acc[mono] += a (* b when b is not NULL).  One step. */
static int acc_add(vd_smt_nf *nf, uint32_t mono, const mpq_t a, const mpq_t b) {
  nf->steps++;
  if (2 * (nf->acc_n + 1) > nf->acc_n_slot && acc_grow_slots(nf)) return nf->oom = 1, -1;
  size_t j = mix64(mono) & (nf->acc_n_slot - 1);
  while (nf->acc_gen[j] == nf->gen && nf->acc_mono[nf->acc_slot[j]] != mono) j = (j + 1) & (nf->acc_n_slot - 1);
  if (nf->acc_gen[j] == nf->gen) {
    mpq_t *v = &nf->acc_val[nf->acc_slot[j]];
    if (b) {
      mpq_mul(nf->t1, a, b);
      mpq_add(*v, *v, nf->t1);
    } else {
      mpq_add(*v, *v, a);
    }
    return 0;
  }
  if (nf->acc_n == nf->acc_cap) {
    size_t nc = nf->acc_cap ? 2 * nf->acc_cap : 256;
    uint32_t *nm = vd_realloc_array(nf->acc_mono, nc, sizeof(uint32_t));
    if (!nm) return nf->oom = 1, -1;
    nf->acc_mono = nm;
    mpq_t *nv = vd_realloc_array(nf->acc_val, nc, sizeof(mpq_t));
    if (!nv) return nf->oom = 1, -1;
    nf->acc_val = nv;
    nf->acc_cap = nc;
  }
  size_t i = nf->acc_n++;
  if (i == nf->acc_init) mpq_init(nf->acc_val[nf->acc_init++]);
  nf->acc_mono[i] = mono;
  if (b) mpq_mul(nf->acc_val[i], a, b);
  else mpq_set(nf->acc_val[i], a);
  nf->acc_slot[j] = (uint32_t)i;
  nf->acc_gen[j] = nf->gen;
  return 0;
}

static int by_mono(const void *a, const void *b, void *ctx) {
  const uint32_t *mono = ctx;
  uint32_t x = mono[*(const uint32_t *)a], y = mono[*(const uint32_t *)b];
  return (x > y) - (x < y);
}

/* The accumulated polynomial, interned; -1 on failure. */
static int64_t acc_finish(vd_smt_nf *nf) {
  size_t n = nf->acc_n;
  if (need_buf(&nf->buf2, &nf->cap_buf2, n) || need_buf(&nf->buf, &nf->cap_buf, 2 * n)) return nf->oom = 1, -1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (mpq_sgn(nf->acc_val[i]) != 0) nf->buf2[k++] = (uint32_t)i;
  qsort_r(nf->buf2, k, sizeof(uint32_t), by_mono, nf->acc_mono);
  for (size_t i = 0; i < k; i++) {
    int64_t c = coef_intern(nf, nf->acc_val[nf->buf2[i]]);
    if (c < 0) return -1;
    nf->buf[2 * i] = nf->acc_mono[nf->buf2[i]];
    nf->buf[2 * i + 1] = (uint32_t)c;
  }
  int64_t id = seq_intern(&nf->polys, nf->buf, (uint32_t)(2 * k));
  if (id < 0) nf->oom = 1;
  return id;
}

/* ---- monomials and polynomials ---------------------------------------------- */

static int charge(vd_smt_nf *nf, uint64_t work) {
  if (nf->gave_up || nf->oom) return -1;
  if (work > nf->budget || nf->steps > nf->budget - work) {
    nf->gave_up = 1;
    return -1;
  }
  return 0;
}

static int64_t mono_mul(vd_smt_nf *nf, uint32_t a, uint32_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  uint64_t key = a < b ? ((uint64_t)a << 32 | b) : ((uint64_t)b << 32 | a);
  int64_t hit = u64map_get(&nf->mono_mul, key);
  if (hit >= 0) return hit;
  uint32_t na, nb;
  const uint32_t *x = seq_at(&nf->monos, a, &na), *y = seq_at(&nf->monos, b, &nb);
  /* A new product costs its length: the budget counts real work. */
  if (charge(nf, (na + nb) / 2)) return -1;
  nf->steps += (na + nb) / 2;
  /* Merge into a local buffer: x and y point into the pool, which
   * seq_intern may move. */
  uint32_t *m = vd_malloc(sizeof(uint32_t) * (na + nb + 1));
  if (!m) return nf->oom = 1, -1;
  uint32_t i = 0, j = 0, k = 0;
  while (i < na || j < nb) {
    if (j >= nb || (i < na && x[i] < y[j])) {
      m[k++] = x[i];
      m[k++] = x[i + 1];
      i += 2;
    } else if (i >= na || y[j] < x[i]) {
      m[k++] = y[j];
      m[k++] = y[j + 1];
      j += 2;
    } else {
      m[k++] = x[i];
      m[k++] = x[i + 1] + y[j + 1];
      i += 2;
      j += 2;
    }
  }
  int64_t id = seq_intern(&nf->monos, m, k);
  vd_free(m);
  if (id < 0 || u64map_put(&nf->mono_mul, key, (uint32_t)id)) return nf->oom = 1, -1;
  return id;
}

static uint32_t poly_len(const vd_smt_nf *nf, uint32_t p) { return nf->polys.len[p] / 2; }

/* Copies poly p's (mono, coef) pairs: the pool may move while we intern. */
static uint32_t *poly_copy(vd_smt_nf *nf, uint32_t p, uint32_t *n) {
  const uint32_t *x = seq_at(&nf->polys, p, n);
  uint32_t *c = vd_malloc(sizeof(uint32_t) * (*n + 1));
  if (!c) {
    nf->oom = 1;
    return NULL;
  }
  memcpy(c, x, sizeof(uint32_t) * *n);
  *n /= 2;
  return c;
}

/* sum of sign_i * p_i (sign NULL: all +1). */
static int64_t poly_sum(vd_smt_nf *nf, const uint32_t *p, const int *sign, size_t k) {
  uint64_t work = 0;
  for (size_t i = 0; i < k; i++) work += poly_len(nf, p[i]);
  if (charge(nf, work)) return -1;
  if (k == 1 && (!sign || sign[0] > 0)) return p[0];
  acc_reset(nf);
  mpq_t neg;
  mpq_init(neg);
  int64_t r = 0;
  for (size_t i = 0; i < k && r == 0; i++) {
    uint32_t n;
    const uint32_t *x = seq_at(&nf->polys, p[i], &n);
    for (uint32_t j = 0; j < n && r == 0; j += 2) {
      if (sign && sign[i] < 0) {
        mpq_neg(neg, nf->q[x[j + 1]]);
        r = acc_add(nf, x[j], neg, NULL);
      } else {
        r = acc_add(nf, x[j], nf->q[x[j + 1]], NULL);
      }
    }
  }
  mpq_clear(neg);
  return r == 0 ? acc_finish(nf) : -1;
}

static int64_t atom_poly(vd_smt_nf *nf, const uint32_t *key, uint32_t n);

static int64_t poly_mul(vd_smt_nf *nf, uint32_t a, uint32_t b) {
  uint64_t la = poly_len(nf, a), lb = poly_len(nf, b);
  if (la == 0) return a;
  if (lb == 0) return b;
  if (a == nf->one_poly) return b;
  if (b == nf->one_poly) return a;
  if (la > 1 && lb > 1 && la * lb > nf->lazy_terms) {
    /* OPTIMIZATION-ONLY (completeness traded for size): see LAZY_PRODUCT_TERMS. */
    if (charge(nf, 1)) return -1;
    nf->steps++;
    uint32_t key[3] = {A_MUL, a < b ? a : b, a < b ? b : a};
    return atom_poly(nf, key, 3);
  }
  if (charge(nf, la * lb)) return -1;
  uint32_t na, nb;
  uint32_t *x = poly_copy(nf, a, &na), *y = x ? poly_copy(nf, b, &nb) : NULL;
  int64_t r = (x && y) ? 0 : -1;
  acc_reset(nf);
  for (uint32_t i = 0; i < na && r == 0; i++)
    for (uint32_t j = 0; j < nb && r == 0; j++) {
      int64_t m = mono_mul(nf, x[2 * i], y[2 * j]);
      r = m < 0 ? -1 : acc_add(nf, (uint32_t)m, nf->q[x[2 * i + 1]], nf->q[y[2 * j + 1]]);
    }
  vd_free(x);
  vd_free(y);
  return r == 0 ? acc_finish(nf) : -1;
}

/* c * p for a rational c. */
static int64_t poly_scale(vd_smt_nf *nf, uint32_t p, const mpq_t c) {
  if (charge(nf, poly_len(nf, p))) return -1;
  if (mpq_sgn(c) == 0) return nf->zero_poly;
  uint32_t n;
  uint32_t *x = poly_copy(nf, p, &n);
  if (!x) return -1;
  acc_reset(nf);
  int64_t r = 0;
  for (uint32_t i = 0; i < n && r == 0; i++) r = acc_add(nf, x[2 * i], nf->q[x[2 * i + 1]], c);
  vd_free(x);
  return r == 0 ? acc_finish(nf) : -1;
}

static int64_t poly_const(vd_smt_nf *nf, const mpq_t c) {
  if (mpq_sgn(c) == 0) return nf->zero_poly;
  int64_t q = coef_intern(nf, c);
  if (q < 0) return -1;
  uint32_t pr[2] = {0, (uint32_t)q};
  int64_t id = seq_intern(&nf->polys, pr, 2);
  if (id < 0) nf->oom = 1;
  return id;
}

/* 1 and *c = the value when p is a constant polynomial (0 included). */
static int poly_is_const(vd_smt_nf *nf, uint32_t p, mpq_t c) {
  uint32_t n;
  const uint32_t *x = seq_at(&nf->polys, p, &n);
  if (n == 0) {
    mpq_set_ui(c, 0, 1);
    return 1;
  }
  if (n == 2 && x[0] == 0) {
    mpq_set(c, nf->q[x[1]]);
    return 1;
  }
  return 0;
}

static int64_t atom_poly(vd_smt_nf *nf, const uint32_t *key, uint32_t n) {
  int64_t a = seq_intern(&nf->atoms, key, n);
  if (a < 0) return nf->oom = 1, -1;
  uint32_t mono[2] = {(uint32_t)a, 1};
  int64_t m = seq_intern(&nf->monos, mono, 2);
  if (m < 0) return nf->oom = 1, -1;
  mpq_set_ui(nf->t2, 1, 1);
  int64_t one = coef_intern(nf, nf->t2);
  if (one < 0) return -1;
  uint32_t pr[2] = {(uint32_t)m, (uint32_t)one};
  int64_t id = seq_intern(&nf->polys, pr, 2);
  if (id < 0) nf->oom = 1;
  return id;
}

/* p scaled so that its first coefficient (in monomial-id order) is 1, or
 * +-1 when positive = 1 (comparisons keep their direction). */
static int64_t poly_monic(vd_smt_nf *nf, uint32_t p, int positive) {
  uint32_t n;
  const uint32_t *x = seq_at(&nf->polys, p, &n);
  if (n == 0) return p;
  mpq_t inv;
  mpq_init(inv);
  mpq_inv(inv, nf->q[x[1]]);
  if (positive && mpq_sgn(inv) < 0) mpq_neg(inv, inv);
  int64_t r = poly_scale(nf, p, inv);
  mpq_clear(inv);
  return r;
}

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
  int64_t m0 = seq_intern(&nf->monos, &none, 0), p0 = seq_intern(&nf->polys, &none, 0);
  *out = nf;
  if (m0 != 0 || p0 != 0) return VD_ENOMEM;
  nf->zero_poly = 0;
  mpq_set_ui(nf->t2, 1, 1);
  int64_t one = poly_const(nf, nf->t2);
  uint32_t kt = A_TRUE, kf = A_FALSE;
  int64_t pt = atom_poly(nf, &kt, 1), pf = atom_poly(nf, &kf, 1);
  if (one < 0 || pt < 0 || pf < 0) return VD_ENOMEM;
  nf->one_poly = (uint32_t)one;
  nf->true_poly = (uint32_t)pt;
  nf->false_poly = (uint32_t)pf;
  return VD_OK;
}

void vd_smt_nf_free(vd_smt_nf *nf) {
  if (!nf) return;
  seqtab_free(&nf->atoms);
  seqtab_free(&nf->monos);
  seqtab_free(&nf->polys);
  for (size_t i = 0; i < nf->n_q; i++) mpq_clear(nf->q[i]);
  vd_free(nf->q);
  vd_free(nf->qhash);
  vd_free(nf->qslot);
  u64map_free(&nf->memo);
  u64map_free(&nf->parents);
  u64map_free(&nf->mono_mul);
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
  acc_reset(nf);
  for (size_t i = 0; i < nf->n_lf; i++) {
    uint32_t n;
    int64_t p = u64map_get(&nf->memo, Z3_get_ast_id(nf->z, nf->lf[i]));
    const uint32_t *x = seq_at(&nf->polys, (uint32_t)p, &n);
    for (uint32_t j = 0; j < n; j += 2)
      if (acc_add(nf, x[j], nf->q[x[j + 1]], nf->lq[i])) return -1;
  }
  return acc_finish(nf);
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
  acc_reset(nf);
  mpq_t neg;
  mpq_init(neg);
  int rc = 0;
  for (int side = 0; side < 2 && rc == 0; side++) {
    rc = gather(nf, side ? b : a, 1);
    if (rc == 0 && charge(nf, nf->n_lf)) rc = -1;
    for (size_t i = 0; i < nf->n_lf && rc == 0; i++) {
      if (side) mpq_neg(neg, nf->lq[i]);
      else mpq_set(neg, nf->lq[i]);
      rc = acc_add(nf, Z3_get_ast_id(nf->z, nf->lf[i]), neg, NULL);
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
    if (u64map_put(&nf->parents, id, c < 0 ? 1 : 2)) rc = VD_ENOMEM;
    if (u64map_get(&seen, id) < 0) {
      if (u64map_put(&seen, id, 0) || VD_GROW(stack, cap, n + 1)) rc = VD_ENOMEM;
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
      if (k < 2 && u64map_put(&nf->parents, id, k < 0 ? 1 : 2)) rc = VD_ENOMEM;
      if (rc == VD_OK && u64map_get(&seen, id) < 0) {
        if (u64map_put(&seen, id, 0) || VD_GROW(stack, cap, n + 1)) rc = VD_ENOMEM;
        else stack[n++] = c;
      }
    }
  }
  u64map_free(&seen);
  vd_free(stack);
  if (rc == VD_OK) nf->prepared = 1;
  return rc;
}

/* Normal form of node a whose arguments are all memoised. */
static int64_t node_nf(vd_smt_nf *nf, Z3_ast a) {
  Z3_context z = nf->z;
  if (charge(nf, 1)) return -1;
  nf->steps++;
  Z3_ast_kind kind = Z3_get_ast_kind(z, a);
  if (kind == Z3_NUMERAL_AST) {
    Z3_string str = Z3_get_numeral_string(z, a);
    if (!str || mpq_set_str(nf->t2, str, 10) != 0) {
      uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
      return atom_poly(nf, key, 2);
    }
    mpq_canonicalize(nf->t2);
    mpq_t c;
    mpq_init(c);
    mpq_set(c, nf->t2);
    int64_t r = poly_const(nf, c);
    mpq_clear(c);
    return r;
  }
  if (kind != Z3_APP_AST) {
    uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
    return atom_poly(nf, key, 2);
  }
  if (nf->prepared && sum_head(nf, a)) {
    if (gather(nf, a, 0)) return -1;
    return leaves_sum(nf);
  }
  Z3_app app = Z3_to_app(z, a);
  Z3_func_decl f = Z3_get_app_decl(z, app);
  Z3_decl_kind dk = Z3_get_decl_kind(z, f);
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
  switch (dk) {
  case Z3_OP_TRUE: r = nf->true_poly; break;
  case Z3_OP_FALSE: r = nf->false_poly; break;
  case Z3_OP_ADD: r = poly_sum(nf, args, NULL, na); break;
  case Z3_OP_SUB:
    for (unsigned i = 0; i < na; i++) sg[i] = i ? -1 : 1;
    r = poly_sum(nf, args, sg, na);
    break;
  case Z3_OP_UMINUS:
    sg[0] = -1;
    r = na == 1 ? poly_sum(nf, args, sg, 1) : -1;
    break;
  case Z3_OP_TO_REAL: r = na == 1 ? (int64_t)args[0] : -1; break;
  case Z3_OP_MUL:
#ifdef VD_TEST_BREAK_NF
    /* TEST ONLY (the broken-NF build of `make e2e`, tests/e2e/50_certificate.sh):
     * a deliberately wrong rule, c * x -> x for a numeral c != 0, so that
     * `verdict recheck` and --cross-check are seen catching a normal form
     * that proves a false equality.  Never defined in a real build. */
    r = nf->one_poly;
    for (unsigned i = 0; i < na && r >= 0; i++)
      if (!(poly_is_const(nf, args[i], c) && mpq_sgn(c) != 0)) r = poly_mul(nf, (uint32_t)r, args[i]);
    break;
#endif
    r = na ? args[0] : nf->one_poly;
    for (unsigned i = 1; i < na && r >= 0; i++) r = poly_mul(nf, (uint32_t)r, args[i]);
    break;
  case Z3_OP_DIV:
    if (na == 2 && poly_is_const(nf, args[1], c) && mpq_sgn(c) != 0) {
      mpq_inv(c, c);
      r = poly_scale(nf, args[0], c);
    } else {
      ch[2] = A_DIV;
      r = atom_poly(nf, ch + 2, na + 1);
    }
    break;
  case Z3_OP_POWER: {
    if (na == 2 && poly_is_const(nf, args[1], c) && mpz_cmp_ui(mpq_denref(c), 1) == 0 && mpq_sgn(c) >= 0 &&
        mpz_cmp_ui(mpq_numref(c), MAX_POW) <= 0) {
      unsigned long e = mpz_get_ui(mpq_numref(c));
      r = nf->one_poly;
      for (unsigned long i = 0; i < e && r >= 0; i++) r = poly_mul(nf, (uint32_t)r, args[0]);
    } else {
      goto generic;
    }
    break;
  }
  case Z3_OP_LE: case Z3_OP_GE: case Z3_OP_LT: case Z3_OP_GT: {
    if (na != 2) goto generic;
    /* a <= b  iff  a - b <= 0; ge/gt swap the sides. */
    int swap = dk == Z3_OP_GE || dk == Z3_OP_GT, strict = dk == Z3_OP_LT || dk == Z3_OP_GT;
    uint32_t pr[2] = {args[swap ? 1 : 0], args[swap ? 0 : 1]};
    int sgn[2] = {1, -1};
    int64_t d = poly_sum(nf, pr, sgn, 2);
    if (d < 0) break;
    if (poly_is_const(nf, (uint32_t)d, c)) {
      int holds = strict ? mpq_sgn(c) < 0 : mpq_sgn(c) <= 0;
      r = holds ? nf->true_poly : nf->false_poly;
      break;
    }
    int64_t m = poly_monic(nf, (uint32_t)d, 1);
    if (m < 0) break;
    uint32_t key[2] = {strict ? A_LT : A_LE, (uint32_t)m};
    r = atom_poly(nf, key, 2);
    break;
  }
  case Z3_OP_EQ: {
    if (na != 2) goto generic;
    if (args[0] == args[1]) {
      r = nf->true_poly;
      break;
    }
    Z3_sort_kind sk = Z3_get_sort_kind(z, Z3_get_sort(z, Z3_get_app_arg(z, app, 0)));
    if (sk != Z3_REAL_SORT && sk != Z3_INT_SORT) {
      uint32_t key[3] = {A_EQGEN, args[0] < args[1] ? args[0] : args[1], args[0] < args[1] ? args[1] : args[0]};
      r = atom_poly(nf, key, 3);
      break;
    }
    int sgn[2] = {1, -1};
    int64_t d = poly_sum(nf, args, sgn, 2);
    if (d < 0) break;
    if (poly_is_const(nf, (uint32_t)d, c)) {
      r = mpq_sgn(c) == 0 ? nf->true_poly : nf->false_poly;
      break;
    }
    int64_t m = poly_monic(nf, (uint32_t)d, 0);
    if (m < 0) break;
    uint32_t key[2] = {A_EQ, (uint32_t)m};
    r = atom_poly(nf, key, 2);
    break;
  }
  case Z3_OP_ITE:
    if (na != 3) goto generic;
    if (args[0] == nf->true_poly || args[1] == args[2]) r = args[1];
    else if (args[0] == nf->false_poly) r = args[2];
    else goto generic;
    break;
  case Z3_OP_UNINTERPRETED:
    if (na == 0) {
      uint32_t key[2] = {A_CONST, Z3_get_ast_id(z, a)};
      r = atom_poly(nf, key, 2);
      break;
    }
    ch[1] = A_APP;
    ch[2] = Z3_get_ast_id(z, Z3_func_decl_to_ast(z, f));
    r = atom_poly(nf, ch + 1, na + 2);
    break;
  default:
  generic:
    /* Any other operator is a function of its arguments' values: an atom
     * keyed by its declaration (which includes sorts and parameters) and
     * the normal forms of its arguments. */
    ch[1] = A_GEN;
    ch[2] = Z3_get_ast_id(z, Z3_func_decl_to_ast(z, f));
    r = atom_poly(nf, ch + 1, na + 2);
    break;
  }
done:
  mpq_clear(c);
  vd_free(ch);
  vd_free(sg);
  return r;
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
      for (size_t i = 0; i < nf->n_lf; i++) {
        Z3_ast c = nf->lf[i];
        if (memo_of(nf, c) >= 0) continue;
        ready = 0;
        if (VD_GROW(stack, cap, n + 1)) {
          nf->oom = 1;
          break;
        }
        stack[n++] = c;
      }
    } else if (Z3_get_ast_kind(z, a) == Z3_APP_AST) {
      Z3_app app = Z3_to_app(z, a);
      unsigned na = Z3_get_app_num_args(z, app);
      for (unsigned i = 0; i < na; i++) {
        Z3_ast c = Z3_get_app_arg(z, app, i);
        if (memo_of(nf, c) >= 0) continue;
        ready = 0;
        if (VD_GROW(stack, cap, n + 1)) {
          nf->oom = 1;
          break;
        }
        stack[n++] = c;
      }
    }
    if (!ready || nf->oom) continue;
    n--;
    int64_t r = node_nf(nf, a);
    if (r < 0) break;
    if (u64map_put(&nf->memo, Z3_get_ast_id(z, a), (uint32_t)r)) nf->oom = 1;
  }
  vd_free(stack);
  if (nf->oom) return VD_ENOMEM;
  if (nf->gave_up) return VD_OK;
  *id = memo_of(nf, t);
  return VD_OK;
}
