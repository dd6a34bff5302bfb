/*
 * solver/smt_poly_laws.c - the laws of verdict's normal form beyond the ring
 * (smt_poly.c): the real exp and log, division by a positive sum, and
 * lookups by an index written as indicators.
 *
 * Why: Megatron's vocab-parallel cross-entropy subtracts the maximum M of
 * the logits before exp (exp(x - M)), sums over the vocabulary shards and
 * takes log(sum) - (x_label - M); the reference computes log(sum exp x) -
 * x_label.  They are equal for every M because exp(x - M) = exp(x) exp(-M)
 * and log(exp(-M) S) = -M + log S; the label's logit is the sum over the
 * shards of a lookup that is 0 outside the shard, equal to the reference's
 * lookup when the label is a valid class.  Kept as uninterpreted symbols,
 * exp and log prove nothing of this.
 *
 * Representation (atoms, smt_poly_int.h):
 *  - exp(c * m) for a monomial m and a rational c = a/b (lowest terms) is
 *    the atom [A_EXP, m, b] (the value exp(m / b)) to the power a, which may
 *    be negative: exp is never 0.  exp(p) for a polynomial p is the product
 *    over p's terms (exp(p + q) = exp(p) exp(q)), and exp(k log q) = q^k;
 *  - [A_LOG, r] is log r and [A_INV, r] is 1 / r for a NORMALISED POSITIVE
 *    polynomial r (below); [A_LOGC, c] is log c for a rational c > 0, c != 1;
 *  - [A_IND, v, k] is 1 when the index symbol v equals the rational k, else 0.
 * A polynomial is POSITIVE when every coefficient is > 0 and every
 * monomial a product of [A_EXP] and [A_INV] atoms (each > 0).  A positive p
 * is c * g * r: g the monomial of the least exponent of every atom over p's
 * terms (absent = 0), c the first coefficient of p / g, r = p / (c g), the
 * NORMALISED part (no common factor, first coefficient 1).  Then
 *   log p = log c + log g + log r   (each factor > 0),
 *   a / p = a * (1/c) * g^-1 * [A_INV, r]   (p != 0),
 * with log r = 0 and no [A_INV] when r = 1.  Each is a function of p's
 * normal form, so the representation stays canonical for these laws.
 *
 * Indicators.  ite(v = k, a, b), where every term of b holds an indicator
 * [A_IND, v, k'] with k' != k (b is 0 when v = k), is [A_IND, v, k] a + b:
 * the lookup chains of embedding and pick become sums over the classes, so
 * lookups over shards of the classes add up to the lookup over all of them.
 * When the stage knows v's range [lo, hi) (an index fact, smt.h: a label
 * that nll_loss checks), an indicator outside it is 0 and the one at lo is
 * 1 - (the others), so the indicators over the range sum to 1.
 *
 * SOUNDNESS: the laws are identities of the real exp and log, for positive
 * arguments where log or 1/x is taken, and of integer indices under the
 * stage's index facts (preconditions of the real program, which the
 * solver's goal assumes as well: smt_check_job.c).  They do not hold for
 * an arbitrary interpretation of the symbols "exp" and "log": the
 * certificate states them (smt_cert.c).  Anything else stays an atom.
 */
#include "smt_poly_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <gmp.h>
#include <z3.h>

#include "../common/limits.h"
#include "../common/mem.h"

/* The largest |exponent| a law writes (exp(k m) with |k| above it stays
 * the atom exp(k m)). */
#define LAW_MAX_EXP 64

/* ---- access -------------------------------------------------------------------- */

static const uint32_t *atom_key(const vd_smt_nf *nf, uint32_t atom, uint32_t *n) { return seq_at(&nf->atoms, atom, n); }

static uint32_t atom_tag(const vd_smt_nf *nf, uint32_t atom) {
  uint32_t n;
  const uint32_t *k = atom_key(nf, atom, &n);
  return n ? k[0] : 0;
}

/* The single atom of poly p when p is one atom to the power 1 with
 * coefficient 1 (a Boolean atom, or an atom's own polynomial); else -1. */
static int64_t sole_atom(const vd_smt_nf *nf, uint32_t p) {
  uint32_t n, nm;
  const uint32_t *t = seq_at(&nf->polys, p, &n);
  if (n != 2 || mpq_cmp_ui(nf->q[t[1]], 1, 1) != 0) return -1;
  const uint32_t *m = seq_at(&nf->monos, t[0], &nm);
  return nm == 2 && m[1] == 1 ? (int64_t)m[0] : -1;
}

static int64_t intern_atom(vd_smt_nf *nf, const uint32_t *key, uint32_t n) {
  int64_t a = vd_smt_i_nf_seq_intern(&nf->atoms, key, n);
  if (a < 0) nf->oom = 1;
  return a;
}

/* The monomial atom^e (e != 0). */
static int64_t atom_mono(vd_smt_nf *nf, uint32_t atom, int32_t e) {
  uint32_t m[2] = {atom, (uint32_t)e};
  int64_t id = vd_smt_i_nf_seq_intern(&nf->monos, m, 2);
  if (id < 0) nf->oom = 1;
  return id;
}

/* 1 * mono (t2 is the normal form's scratch, free between its calls). */
static int64_t mono_poly_one(vd_smt_nf *nf, uint32_t mono) {
  mpq_set_ui(nf->t2, 1, 1);
  return vd_smt_i_nf_mono_poly(nf, mono, nf->t2);
}

static int64_t mul3(vd_smt_nf *nf, int64_t a, int64_t b) {
  return a < 0 || b < 0 ? -1 : vd_smt_i_nf_poly_mul(nf, (uint32_t)a, (uint32_t)b);
}

int vd_smt_i_nf_kernel(vd_smt_nf *nf, Z3_func_decl f) {
  uint64_t id = Z3_get_ast_id(nf->z, Z3_func_decl_to_ast(nf->z, f));
  int64_t k = u64map_get(&nf->kernels, id);
  if (k >= 0) return (int)k;
  Z3_string name = Z3_get_symbol_string(nf->z, Z3_get_decl_name(nf->z, f));
  int kind = KERNEL_OTHER;
  if (Z3_get_domain_size(nf->z, f) == 1 && name) {
    if (strcmp(name, "exp") == 0) kind = KERNEL_EXP;
    else if (strcmp(name, "log") == 0) kind = KERNEL_LOG;
  }
  if (vd_smt_i_nf_u64map_put(&nf->kernels, id, (uint32_t)kind)) nf->oom = 1;
  return kind;
}

/* ---- positive polynomials -------------------------------------------------------- */

static int positive(const vd_smt_nf *nf, uint32_t p) {
  uint32_t n, nm;
  const uint32_t *t = seq_at(&nf->polys, p, &n);
  if (n == 0) return 0;
  for (uint32_t i = 0; i < n; i += 2) {
    if (mpq_sgn(nf->q[t[i + 1]]) <= 0) return 0;
    const uint32_t *m = seq_at(&nf->monos, t[i], &nm);
    for (uint32_t j = 0; j < nm; j += 2) {
      uint32_t tag = atom_tag(nf, m[j]);
      if (!(tag == A_EXP || (tag == A_INV && (int32_t)m[j + 1] > 0))) return 0;
    }
  }
  return 1;
}

typedef struct {
  uint32_t atom;
  int32_t e;
} factor;

/* The common monomial g of p's terms (least exponent of each atom, absent
 * = 0), as factors g[0..*ng) (caller frees). */
static factor *common_factors(vd_smt_nf *nf, uint32_t p, size_t *ng) {
  uint32_t n, nm;
  const uint32_t *t = seq_at(&nf->polys, p, &n);
  size_t cap = 0, k = 0;
  uint32_t terms = n / 2;
  for (uint32_t i = 0; i < n; i += 2) cap += nf->monos.len[t[i]] / 2;
  factor *f = vd_malloc(sizeof(factor) * (cap + 1));
  uint32_t *seen = vd_calloc(cap + 1, sizeof(uint32_t));
  if (!f || !seen || charge(nf, cap)) {
    if (!f || !seen) nf->oom = 1;
    vd_free(f);
    vd_free(seen);
    return NULL;
  }
  nf->steps += cap;
  for (uint32_t i = 0; i < n; i += 2) {
    const uint32_t *m = seq_at(&nf->monos, t[i], &nm);
    for (uint32_t j = 0; j < nm; j += 2) {
      size_t x = 0;
      while (x < k && f[x].atom != m[j]) x++;
      if (x == k) f[k++] = (factor){m[j], (int32_t)m[j + 1]};
      else if ((int32_t)m[j + 1] < f[x].e) f[x].e = (int32_t)m[j + 1];
      seen[x]++;
    }
  }
  size_t w = 0;
  for (size_t x = 0; x < k; x++) {
    int32_t e = seen[x] < terms && f[x].e > 0 ? 0 : f[x].e;
    if (e != 0) f[w++] = (factor){f[x].atom, e};
  }
  vd_free(seen);
  *ng = w;
  return f;
}

static int by_atom(const void *a, const void *b) {
  uint32_t x = ((const factor *)a)->atom, y = ((const factor *)b)->atom;
  return (x > y) - (x < y);
}

/* The monomial of factors g[0..ng) with exponents times sign (+1 or -1).
 * raw = 0: an [A_INV, r] atom with a negative exponent -e is written as
 * the polynomial r^e instead, multiplied into *extra; raw = 1: kept (it
 * only cancels against the same atom of a monomial that holds it). */
static int64_t factors_mono(vd_smt_nf *nf, factor *g, size_t ng, int sign, int raw, int64_t *extra) {
  qsort(g, ng, sizeof(factor), by_atom);
  uint32_t *m = vd_malloc(sizeof(uint32_t) * (2 * ng + 1));
  if (!m) return nf->oom = 1, -1;
  size_t k = 0;
  *extra = nf->one_poly;
  for (size_t i = 0; i < ng && *extra >= 0; i++) {
    int32_t e = sign * g[i].e;
    if (!raw && atom_tag(nf, g[i].atom) == A_INV && e < 0) {
      uint32_t nk;
      const uint32_t *key = atom_key(nf, g[i].atom, &nk);
      int64_t pw = -e <= LAW_MAX_EXP ? vd_smt_i_nf_poly_pow(nf, key[1], (unsigned)(-e)) : -1;
      *extra = mul3(nf, *extra, pw);
      continue;
    }
    m[k++] = g[i].atom;
    m[k++] = (uint32_t)e;
  }
  int64_t id = *extra < 0 ? -1 : vd_smt_i_nf_seq_intern(&nf->monos, m, (uint32_t)k);
  if (*extra >= 0 && id < 0) nf->oom = 1;
  vd_free(m);
  return id;
}

/* p * mono, term by term. */
static int64_t times_mono(vd_smt_nf *nf, uint32_t p, uint32_t mono) {
  uint32_t n;
  const uint32_t *t = seq_at(&nf->polys, p, &n);
  uint32_t *x = vd_malloc(sizeof(uint32_t) * (n + 1));
  if (!x) return nf->oom = 1, -1;
  memcpy(x, t, sizeof(uint32_t) * n); /* the pool may move while we intern */
  int64_t r = 0;
  vd_smt_i_nf_acc_reset(nf);
  for (uint32_t i = 0; i < n && r == 0; i += 2) {
    int64_t m = vd_smt_i_nf_mono_mul(nf, x[i], mono);
    r = m < 0 ? -1 : vd_smt_i_nf_acc_add(nf, (uint32_t)m, nf->q[x[i + 1]], NULL);
  }
  vd_free(x);
  return r == 0 ? vd_smt_i_nf_acc_finish(nf) : -1;
}

/* p = c * g * r for a positive p (see the header): c into c, g's factors
 * into *g (caller frees), r's id into *r. */
static int split_positive(vd_smt_nf *nf, uint32_t p, mpq_t c, factor **g, size_t *ng, uint32_t *r) {
  *g = common_factors(nf, p, ng);
  if (!*g) return -1;
  int64_t extra, ginv = factors_mono(nf, *g, *ng, -1, 1, &extra);
  int64_t q = ginv < 0 ? -1 : times_mono(nf, p, (uint32_t)ginv);
  if (q < 0) return -1;
  uint32_t n;
  const uint32_t *t = seq_at(&nf->polys, (uint32_t)q, &n);
  mpq_set(c, nf->q[t[1]]);
  mpq_t inv;
  mpq_init(inv);
  mpq_inv(inv, c);
  int64_t rr = vd_smt_i_nf_poly_scale(nf, (uint32_t)q, inv);
  mpq_clear(inv);
  if (rr < 0) return -1;
  *r = (uint32_t)rr;
  return 0;
}

/* [tag, r] for a normalised positive r != 1. */
static int64_t of_normalised(vd_smt_nf *nf, uint32_t tag, uint32_t r) {
  uint32_t key[2] = {tag, r};
  return intern_atom(nf, key, 2);
}

/* ---- exp ------------------------------------------------------------------------------ */

/* exp(c * m) for one term of a polynomial; NO_LAW when c is too large. */
static int64_t exp_term(vd_smt_nf *nf, uint32_t m, const mpq_t c) {
  uint32_t nm;
  const uint32_t *mp = seq_at(&nf->monos, m, &nm);
  int integral = mpz_cmp_ui(mpq_denref(c), 1) == 0;
  if (!mpz_fits_slong_p(mpq_numref(c)) || !mpz_fits_ulong_p(mpq_denref(c))) return NO_LAW;
  long a = mpz_get_si(mpq_numref(c));
  unsigned long b = mpz_get_ui(mpq_denref(c));
  if (a > LAW_MAX_EXP || a < -LAW_MAX_EXP || b > UINT32_MAX) return NO_LAW;
  if (nm == 2 && mp[1] == 1 && atom_tag(nf, mp[0]) == A_LOG && integral) {
    /* exp(a log r) = r^a, or [A_INV, r]^-a */
    uint32_t nk;
    const uint32_t *key = atom_key(nf, mp[0], &nk);
    if (a > 0) return vd_smt_i_nf_poly_pow(nf, key[1], (unsigned)a);
    int64_t inv = of_normalised(nf, A_INV, key[1]), mono = inv < 0 ? -1 : atom_mono(nf, (uint32_t)inv, (int32_t)-a);
    return mono < 0 ? -1 : mono_poly_one(nf, (uint32_t)mono);
  }
  if (nm == 2 && mp[1] == 1 && atom_tag(nf, mp[0]) == A_LOGC && integral) {
    /* exp(a log c) = c^a for a rational c > 0 */
    uint32_t nk;
    const uint32_t *key = atom_key(nf, mp[0], &nk);
    mpq_t pw;
    mpq_init(pw);
    mpz_pow_ui(mpq_numref(pw), mpq_numref(nf->q[key[1]]), (unsigned long)labs(a));
    mpz_pow_ui(mpq_denref(pw), mpq_denref(nf->q[key[1]]), (unsigned long)labs(a));
    if (a < 0) mpq_inv(pw, pw);
    int64_t r = vd_smt_i_nf_poly_const(nf, pw);
    mpq_clear(pw);
    return r;
  }
  uint32_t key[3] = {A_EXP, m, (uint32_t)b};
  int64_t e = intern_atom(nf, key, 3), mono = e < 0 ? -1 : atom_mono(nf, (uint32_t)e, (int32_t)a);
  return mono < 0 ? -1 : mono_poly_one(nf, (uint32_t)mono);
}

static int64_t law_exp(vd_smt_nf *nf, uint32_t p) {
  uint32_t n;
  const uint32_t *t = seq_at(&nf->polys, p, &n);
  uint32_t *x = vd_malloc(sizeof(uint32_t) * (n + 1));
  if (!x) return nf->oom = 1, -1;
  memcpy(x, t, sizeof(uint32_t) * n);
  int64_t r = nf->one_poly;
  for (uint32_t i = 0; i < n && r >= 0; i += 2) {
    int64_t f = exp_term(nf, x[i], nf->q[x[i + 1]]);
    r = f == NO_LAW ? NO_LAW : mul3(nf, r, f);
  }
  vd_free(x);
  return r;
}

/* ---- log and division by a positive polynomial ------------------------------------- */

static int64_t law_log(vd_smt_nf *nf, uint32_t p) {
  if (!positive(nf, p)) return NO_LAW;
  mpq_t c, w;
  mpq_inits(c, w, NULL);
  factor *g = NULL;
  size_t ng = 0;
  uint32_t r = 0;
  int64_t res = -1;
  if (split_positive(nf, p, c, &g, &ng, &r)) goto done;
  /* log g: exp atoms give their argument, inverses minus their log */
  res = nf->zero_poly;
  for (size_t i = 0; i < ng && res >= 0; i++) {
    uint32_t nk;
    const uint32_t *key = atom_key(nf, g[i].atom, &nk);
    int64_t term;
    if (key[0] == A_EXP) {
      mpq_set_si(w, g[i].e, key[2]);
      mpq_canonicalize(w);
      term = vd_smt_i_nf_mono_poly(nf, key[1], w);
    } else {
      int64_t l = of_normalised(nf, A_LOG, key[1]), m = l < 0 ? -1 : atom_mono(nf, (uint32_t)l, 1);
      mpq_set_si(w, -g[i].e, 1);
      term = m < 0 ? -1 : vd_smt_i_nf_mono_poly(nf, (uint32_t)m, w);
    }
    uint32_t two[2] = {(uint32_t)res, (uint32_t)term};
    res = term < 0 ? -1 : vd_smt_i_nf_poly_sum(nf, two, NULL, 2);
  }
  if (res >= 0 && mpq_cmp_ui(c, 1, 1) != 0) {
    int64_t q = vd_smt_i_nf_coef_intern(nf, c);
    uint32_t key[2] = {A_LOGC, (uint32_t)q};
    int64_t lc = q < 0 ? -1 : vd_smt_i_nf_atom_poly(nf, key, 2);
    uint32_t two[2] = {(uint32_t)res, (uint32_t)lc};
    res = lc < 0 ? -1 : vd_smt_i_nf_poly_sum(nf, two, NULL, 2);
  }
  if (res >= 0 && r != nf->one_poly) {
    uint32_t key[2] = {A_LOG, r};
    int64_t lr = vd_smt_i_nf_atom_poly(nf, key, 2);
    uint32_t two[2] = {(uint32_t)res, (uint32_t)lr};
    res = lr < 0 ? -1 : vd_smt_i_nf_poly_sum(nf, two, NULL, 2);
  }
done:
  vd_free(g);
  mpq_clears(c, w, NULL);
  return res;
}

static int64_t law_div(vd_smt_nf *nf, uint32_t a, uint32_t b) {
  if (!positive(nf, b)) return NO_LAW;
  mpq_t c;
  mpq_init(c);
  factor *g = NULL;
  size_t ng = 0;
  uint32_t r = 0;
  int64_t res = -1, extra = -1;
  if (split_positive(nf, b, c, &g, &ng, &r)) goto done;
  /* a / b = a * (1/c) * g^-1 * [A_INV, r] */
  int64_t ginv = factors_mono(nf, g, ng, -1, 0, &extra);
  mpq_inv(c, c);
  res = ginv < 0 ? -1 : mul3(nf, a, vd_smt_i_nf_mono_poly(nf, (uint32_t)ginv, c));
  res = mul3(nf, res, extra);
  if (res >= 0 && r != nf->one_poly) {
    int64_t inv = of_normalised(nf, A_INV, r), m = inv < 0 ? -1 : atom_mono(nf, (uint32_t)inv, 1);
    res = mul3(nf, res, m < 0 ? -1 : mono_poly_one(nf, (uint32_t)m));
  }
done:
  vd_free(g);
  mpq_clear(c);
  return res;
}

/* ---- indicators ------------------------------------------------------------------------- */

/* The index symbol v and the root k of an equality atom's polynomial
 * (monic a v + b0, or v alone): v = -b0 / a.  0 when it is no such atom. */
static int eq_root(vd_smt_nf *nf, uint32_t cond, uint32_t *v, mpq_t k) {
  int64_t at = sole_atom(nf, cond);
  uint32_t nk, n, nm;
  if (at < 0 || atom_tag(nf, (uint32_t)at) != A_EQ) return 0;
  const uint32_t *key = atom_key(nf, (uint32_t)at, &nk);
  const uint32_t *t = seq_at(&nf->polys, key[1], &n);
  if (n != 2 && !(n == 4 && t[0] == 0)) return 0;
  const uint32_t *lin = n == 2 ? t : t + 2;
  const uint32_t *m = seq_at(&nf->monos, lin[0], &nm);
  if (nm != 2 || m[1] != 1 || atom_tag(nf, m[0]) != A_CONST) return 0;
  *v = m[0];
  if (n == 2) mpq_set_ui(k, 0, 1);
  else {
    mpq_div(k, nf->q[t[1]], nf->q[lin[1]]);
    mpq_neg(k, k);
  }
  return 1;
}

/* The index fact on symbol atom v: 1 and [*lo, *hi) when there is one. */
static int fact_of(vd_smt_nf *nf, uint32_t v, int64_t *lo, int64_t *hi) {
  uint32_t nk;
  const uint32_t *key = atom_key(nf, v, &nk);
  size_t n;
  const vd_smt_index_fact *f = vd_smt_index_facts(nf->s, &n);
  for (size_t i = 0; i < n; i++)
    if (f[i].id == key[1]) {
      *lo = f[i].lo;
      *hi = f[i].hi;
      return 1;
    }
  return 0;
}

/* The polynomial of the atom [A_IND, v, k]. */
static int64_t ind_atom(vd_smt_nf *nf, uint32_t v, const mpq_t k) {
  int64_t q = vd_smt_i_nf_coef_intern(nf, k);
  uint32_t key[3] = {A_IND, v, (uint32_t)q};
  return q < 0 ? -1 : vd_smt_i_nf_atom_poly(nf, key, 3);
}

/* [v = k] under v's index fact: 0 outside the range, 1 - (the others) at
 * its low end; the atom otherwise. */
static int64_t indicator(vd_smt_nf *nf, uint32_t v, const mpq_t k) {
  int64_t lo, hi;
  if (!fact_of(nf, v, &lo, &hi)) return ind_atom(nf, v, k);
  if (mpz_cmp_ui(mpq_denref(k), 1) != 0 || mpz_cmp_si(mpq_numref(k), lo) < 0 || mpz_cmp_si(mpq_numref(k), hi) >= 0)
    return nf->zero_poly;
  if (mpz_cmp_si(mpq_numref(k), lo) != 0 || hi - lo > VD_LIM_INDEX_SPAN) return ind_atom(nf, v, k);
  size_t n = (size_t)(hi - lo);
  uint32_t *parts = vd_malloc(sizeof(uint32_t) * (n + 1));
  int *sign = vd_malloc(sizeof(int) * (n + 1));
  mpq_t j;
  mpq_init(j);
  int64_t r = parts && sign ? 0 : -1;
  if (r < 0) nf->oom = 1;
  if (r == 0) {
    parts[0] = nf->one_poly;
    sign[0] = 1;
  }
  for (size_t i = 1; i < n && r == 0; i++) {
    mpq_set_si(j, lo + (long)i, 1);
    int64_t a = ind_atom(nf, v, j);
    if (a < 0) r = -1;
    else {
      parts[i] = (uint32_t)a;
      sign[i] = -1;
    }
  }
  if (r == 0) r = vd_smt_i_nf_poly_sum(nf, parts, sign, n);
  mpq_clear(j);
  vd_free(parts);
  vd_free(sign);
  return r;
}

/* 1 when every term of b holds an indicator [A_IND, v, k'] with k' != k. */
static int vanishes_at(vd_smt_nf *nf, uint32_t b, uint32_t v, const mpq_t k) {
  uint32_t n, nm, nk;
  const uint32_t *t = seq_at(&nf->polys, b, &n);
  if (charge(nf, n / 2)) return 0; /* a lookup chain reads its tail once per link */
  nf->steps += n / 2;
  for (uint32_t i = 0; i < n; i += 2) {
    const uint32_t *m = seq_at(&nf->monos, t[i], &nm);
    int hit = 0;
    for (uint32_t j = 0; j < nm && !hit; j += 2) {
      if (atom_tag(nf, m[j]) != A_IND) continue;
      const uint32_t *key = atom_key(nf, m[j], &nk);
      hit = key[1] == v && !mpq_equal(nf->q[key[2]], k);
    }
    if (!hit) return 0;
  }
  return 1;
}

static int64_t law_ite(vd_smt_nf *nf, uint32_t cond, uint32_t a, uint32_t b) {
  uint32_t v;
  mpq_t k;
  mpq_init(k);
  int64_t r = NO_LAW;
  if (eq_root(nf, cond, &v, k) && vanishes_at(nf, b, v, k)) {
    int64_t ind = indicator(nf, v, k), ia = mul3(nf, ind, a);
    uint32_t two[2] = {(uint32_t)ia, b};
    r = ia < 0 ? -1 : vd_smt_i_nf_poly_sum(nf, two, NULL, 2);
  }
  mpq_clear(k);
  return r;
}

/* ---- entry points: a law that applies marks the check (the cross-check's axioms) ---- */

static int64_t used(vd_smt_nf *nf, int64_t r) {
  if (r >= 0) nf->laws_used = 1;
  return r;
}
int64_t vd_smt_i_nf_exp(vd_smt_nf *nf, uint32_t p) { return used(nf, law_exp(nf, p)); }
int64_t vd_smt_i_nf_log(vd_smt_nf *nf, uint32_t p) { return used(nf, law_log(nf, p)); }
int64_t vd_smt_i_nf_div(vd_smt_nf *nf, uint32_t a, uint32_t b) { return used(nf, law_div(nf, a, b)); }
int64_t vd_smt_i_nf_ite(vd_smt_nf *nf, uint32_t cond, uint32_t a, uint32_t b) { return used(nf, law_ite(nf, cond, a, b)); }

