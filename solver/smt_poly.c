/*
 * solver/smt_poly.c - verdict's own normal form of arithmetic terms: a
 * hash-consed polynomial over atoms with exact rational coefficients, built
 * under a deterministic work budget (docs/verifier.md section 4.2).
 *
 * Implements: vd_smt_nf_* (smt.h).  A term's normal form is an interned
 * polynomial id; two terms with the same id are equal under every value of
 * the free symbols and every interpretation of the uninterpreted functions.
 * Files: this one (the algebra), smt_poly_walk.c (the term walk and the
 * public functions); smt_poly_int.h what they share.
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
#include "../common/slots.h"
#include "smt_poly_int.h"

/* ---- interned u32 sequences -------------------------------------------- */

static uint64_t hash_seq(const uint32_t *a, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; i++) h = vd_hash_mix64(h ^ a[i]) + i;
  return h;
}

void vd_smt_i_nf_seqtab_free(seqtab *t) {
  vd_free(t->pool);
  vd_free(t->off);
  vd_free(t->len);
  vd_free(t->hash);
  vd_free(t->slot);
  memset(t, 0, sizeof(*t));
}

/* An open-addressing index of ids 0..n-1 by their hashes (slot: id + 1, 0
 * empty; linear probing), rebuilt at twice its size (first: its first
 * size, a power of two); -1 when out of memory (the old index kept). */
static int rehash_ids(uint32_t **slot, size_t *n_slot, const uint64_t *hash, size_t n, size_t first) {
  size_t ns = *n_slot ? 2 * *n_slot : first;
  uint32_t *sl = vd_calloc(ns, sizeof(uint32_t));
  if (!sl) return -1;
  for (size_t id = 0; id < n; id++) {
    size_t j = hash[id] & (ns - 1);
    while (sl[j]) j = (j + 1) & (ns - 1);
    sl[j] = (uint32_t)id + 1;
  }
  vd_free(*slot);
  *slot = sl;
  *n_slot = ns;
  return 0;
}

static int seqtab_rehash(seqtab *t) { return rehash_ids(&t->slot, &t->n_slot, t->hash, t->n, 1024); }

/* Id of the sequence a[0..n) (a must not point into t->pool); -1 on ENOMEM. */
int64_t vd_smt_i_nf_seq_intern(seqtab *t, const uint32_t *a, uint32_t n) {
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

/* ---- u64 -> u32 map ------------------------------------------------------ */

void vd_smt_i_nf_u64map_free(u64map *m) {
  vd_free(m->key);
  vd_free(m->val);
  memset(m, 0, sizeof(*m));
}

static uint64_t u64map_hash(const void *key) { return vd_hash_mix64(*(const uint64_t *)key); }

/* A slot is used when its value (v + 1) is not 0. */
static int u64map_used(const void *key, const void *val) {
  (void)key;
  return *(const uint32_t *)val != 0;
}

static const vd_slots_kind u64map_kind = {sizeof(uint64_t), sizeof(uint32_t), u64map_hash, u64map_used};

int vd_smt_i_nf_u64map_put(u64map *m, uint64_t k, uint32_t v) {
  if (vd_slots_crowded(m->n, m->cap) &&
      vd_slots_regrow(&u64map_kind, (void **)&m->key, (void **)&m->val, &m->cap, 1024))
    return -1;
  size_t j = vd_hash_mix64(k) & (m->cap - 1);
  while (m->val[j] && m->key[j] != k) j = vd_slots_next(j, m->cap);
  if (!m->val[j]) m->n++;
  m->key[j] = k;
  m->val[j] = v + 1;
  return 0;
}

/* ---- the normal-form context --------------------------------------------- */

static uint64_t hash_mpq(const mpq_t v) {
  uint64_t h = (uint64_t)mpq_sgn(v) * 0x9e37u;
  const mpz_srcptr nd[2] = {mpq_numref(v), mpq_denref(v)};
  for (int k = 0; k < 2; k++) {
    size_t n = mpz_size(nd[k]);
    for (size_t i = 0; i < n; i++) h = vd_hash_mix64(h ^ (uint64_t)mpz_getlimbn(nd[k], (mp_size_t)i)) + (uint64_t)k;
  }
  return h;
}

static int too_big(const mpq_t v) {
  return mpz_sizeinbase(mpq_numref(v), 2) > VD_NF_MAX_COEF_BITS ||
         mpz_sizeinbase(mpq_denref(v), 2) > VD_NF_MAX_COEF_BITS;
}

static int q_rehash(vd_smt_nf *nf) { return rehash_ids(&nf->qslot, &nf->n_qslot, nf->qhash, nf->n_q, 256); }

/* Interned id of the rational v (non-zero); -1 on ENOMEM or when too large. */
int64_t vd_smt_i_nf_coef_intern(vd_smt_nf *nf, const mpq_t v) {
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

void vd_smt_i_nf_acc_reset(vd_smt_nf *nf) {
  nf->acc_n = 0;
  if (++nf->gen == 0) {
    memset(nf->acc_gen, 0, nf->acc_n_slot * sizeof(uint32_t));
    nf->gen = 1;
  }
}

static int acc_grow_slots(vd_smt_nf *nf) {
  size_t ns = vd_slots_grown(nf->acc_n_slot, 1024);
  uint32_t *sl = vd_calloc(ns, sizeof(uint32_t)), *gn = vd_calloc(ns, sizeof(uint32_t));
  if (vd_slots_both(sl, gn)) return -1;
  for (size_t i = 0; i < nf->acc_n; i++) {
    size_t j = vd_hash_mix64(nf->acc_mono[i]) & (ns - 1);
    while (gn[j] == nf->gen) j = vd_slots_next(j, ns);
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
int vd_smt_i_nf_acc_add(vd_smt_nf *nf, uint32_t mono, const mpq_t a, const mpq_t b) {
  nf->steps++;
  if (2 * (nf->acc_n + 1) > nf->acc_n_slot && acc_grow_slots(nf)) return nf->oom = 1, -1;
  size_t j = vd_hash_mix64(mono) & (nf->acc_n_slot - 1);
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
int64_t vd_smt_i_nf_acc_finish(vd_smt_nf *nf) {
  size_t n = nf->acc_n;
  if (need_buf(&nf->buf2, &nf->cap_buf2, n) || need_buf(&nf->buf, &nf->cap_buf, 2 * n)) return nf->oom = 1, -1;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (mpq_sgn(nf->acc_val[i]) != 0) nf->buf2[k++] = (uint32_t)i;
  qsort_r(nf->buf2, k, sizeof(uint32_t), by_mono, nf->acc_mono);
  for (size_t i = 0; i < k; i++) {
    int64_t c = vd_smt_i_nf_coef_intern(nf, nf->acc_val[nf->buf2[i]]);
    if (c < 0) return -1;
    nf->buf[2 * i] = nf->acc_mono[nf->buf2[i]];
    nf->buf[2 * i + 1] = (uint32_t)c;
  }
  int64_t id = vd_smt_i_nf_seq_intern(&nf->polys, nf->buf, (uint32_t)(2 * k));
  if (id < 0) nf->oom = 1;
  return id;
}

/* ---- monomials and polynomials ---------------------------------------------- */

int64_t vd_smt_i_nf_mono_mul(vd_smt_nf *nf, uint32_t a, uint32_t b) {
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
      /* Exponents are int32 (only exp atoms go negative: exp(-m) is
       * exp(m)^-1, and exp is never 0); a factor whose exponent sums to 0
       * drops out. */
      int64_t e = (int64_t)(int32_t)x[i + 1] + (int32_t)y[j + 1];
      if (e > INT32_MAX / 2 || e < INT32_MIN / 2) {
        vd_free(m);
        nf->gave_up = 1;
        return -1;
      }
      if (e != 0) {
        m[k++] = x[i];
        m[k++] = (uint32_t)(int32_t)e;
      }
      i += 2;
      j += 2;
    }
  }
  int64_t id = vd_smt_i_nf_seq_intern(&nf->monos, m, k);
  vd_free(m);
  if (id < 0 || vd_smt_i_nf_u64map_put(&nf->mono_mul, key, (uint32_t)id)) return nf->oom = 1, -1;
  return id;
}

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
int64_t vd_smt_i_nf_poly_sum(vd_smt_nf *nf, const uint32_t *p, const int *sign, size_t k) {
  uint64_t work = 0;
  for (size_t i = 0; i < k; i++) work += poly_len(nf, p[i]);
  if (charge(nf, work)) return -1;
  if (k == 1 && (!sign || sign[0] > 0)) return p[0];
  vd_smt_i_nf_acc_reset(nf);
  mpq_t neg;
  mpq_init(neg);
  int64_t r = 0;
  for (size_t i = 0; i < k && r == 0; i++) {
    uint32_t n;
    const uint32_t *x = seq_at(&nf->polys, p[i], &n);
    for (uint32_t j = 0; j < n && r == 0; j += 2) {
      if (sign && sign[i] < 0) {
        mpq_neg(neg, nf->q[x[j + 1]]);
        r = vd_smt_i_nf_acc_add(nf, x[j], neg, NULL);
      } else {
        r = vd_smt_i_nf_acc_add(nf, x[j], nf->q[x[j + 1]], NULL);
      }
    }
  }
  mpq_clear(neg);
  return r == 0 ? vd_smt_i_nf_acc_finish(nf) : -1;
}

int64_t vd_smt_i_nf_poly_mul(vd_smt_nf *nf, uint32_t a, uint32_t b) {
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
    return vd_smt_i_nf_atom_poly(nf, key, 3);
  }
  if (charge(nf, la * lb)) return -1;
  uint32_t na, nb;
  uint32_t *x = poly_copy(nf, a, &na), *y = x ? poly_copy(nf, b, &nb) : NULL;
  int64_t r = (x && y) ? 0 : -1;
  vd_smt_i_nf_acc_reset(nf);
  for (uint32_t i = 0; i < na && r == 0; i++)
    for (uint32_t j = 0; j < nb && r == 0; j++) {
      int64_t m = vd_smt_i_nf_mono_mul(nf, x[2 * i], y[2 * j]);
      r = m < 0 ? -1 : vd_smt_i_nf_acc_add(nf, (uint32_t)m, nf->q[x[2 * i + 1]], nf->q[y[2 * j + 1]]);
    }
  vd_free(x);
  vd_free(y);
  return r == 0 ? vd_smt_i_nf_acc_finish(nf) : -1;
}

/* c * p for a rational c. */
int64_t vd_smt_i_nf_poly_scale(vd_smt_nf *nf, uint32_t p, const mpq_t c) {
  if (charge(nf, poly_len(nf, p))) return -1;
  if (mpq_sgn(c) == 0) return nf->zero_poly;
  uint32_t n;
  uint32_t *x = poly_copy(nf, p, &n);
  if (!x) return -1;
  vd_smt_i_nf_acc_reset(nf);
  int64_t r = 0;
  for (uint32_t i = 0; i < n && r == 0; i++) r = vd_smt_i_nf_acc_add(nf, x[2 * i], nf->q[x[2 * i + 1]], c);
  vd_free(x);
  return r == 0 ? vd_smt_i_nf_acc_finish(nf) : -1;
}

int64_t vd_smt_i_nf_mono_poly(vd_smt_nf *nf, uint32_t mono, const mpq_t c) {
  if (mpq_sgn(c) == 0) return nf->zero_poly;
  int64_t q = vd_smt_i_nf_coef_intern(nf, c);
  if (q < 0) return -1;
  uint32_t pr[2] = {mono, (uint32_t)q};
  int64_t id = vd_smt_i_nf_seq_intern(&nf->polys, pr, 2);
  if (id < 0) nf->oom = 1;
  return id;
}

int64_t vd_smt_i_nf_poly_const(vd_smt_nf *nf, const mpq_t c) { return vd_smt_i_nf_mono_poly(nf, 0, c); }

int64_t vd_smt_i_nf_poly_pow(vd_smt_nf *nf, uint32_t p, unsigned e) {
  int64_t r = nf->one_poly;
  for (unsigned i = 0; i < e && r >= 0; i++) r = vd_smt_i_nf_poly_mul(nf, (uint32_t)r, p);
  return r;
}

/* 1 and *c = the value when p is a constant polynomial (0 included). */
int vd_smt_i_nf_poly_is_const(vd_smt_nf *nf, uint32_t p, mpq_t c) {
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

int64_t vd_smt_i_nf_atom_poly(vd_smt_nf *nf, const uint32_t *key, uint32_t n) {
  int64_t a = vd_smt_i_nf_seq_intern(&nf->atoms, key, n);
  if (a < 0) return nf->oom = 1, -1;
  uint32_t mono[2] = {(uint32_t)a, 1};
  int64_t m = vd_smt_i_nf_seq_intern(&nf->monos, mono, 2);
  if (m < 0) return nf->oom = 1, -1;
  mpq_set_ui(nf->t2, 1, 1);
  return vd_smt_i_nf_mono_poly(nf, (uint32_t)m, nf->t2);
}

/* p scaled so that its first coefficient (in monomial-id order) is 1, or
 * +-1 when positive = 1 (comparisons keep their direction). */
int64_t vd_smt_i_nf_poly_monic(vd_smt_nf *nf, uint32_t p, int positive) {
  uint32_t n;
  const uint32_t *x = seq_at(&nf->polys, p, &n);
  if (n == 0) return p;
  mpq_t inv;
  mpq_init(inv);
  mpq_inv(inv, nf->q[x[1]]);
  if (positive && mpq_sgn(inv) < 0) mpq_neg(inv, inv);
  int64_t r = vd_smt_i_nf_poly_scale(nf, p, inv);
  mpq_clear(inv);
  return r;
}
