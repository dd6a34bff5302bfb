/*
 * noise/prop_node.c - the bounds of one node's outputs (prop.c, docs/noise.md
 * "The model of floating point"), step by step: the operands' state, the
 * probes' origin, the inputs' errors propagated (prop_probe.c), then the
 * new roundings of each output: a split sum, a combination of parts, flips
 * of roundings on inputs that differ, kernels on another shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "prop_int.h"

/* Reads the operands' state into s: 0 when an input has no value or no bound, or an output no
 * value (the outputs then get no bound). */
static int scan_operands(nodestep *s) {
  vd_noise_ctx *c = s->c;
  s->bit_in = 1;
  s->any_wc = 0;
  s->in_parts = 1;
  s->maxn = 1;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (!c->val[v] || !c->known[v]) return 0;
    s->bit_in &= c->bitid[v];
    s->any_wc |= c->ewv[v] != NULL;
    int64_t pnn = vd_noise_i_part_n(vd_noise_i_ptensor(c, v));
    if (pnn > s->in_parts) s->in_parts = pnn;
    int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, v));
    if (n > s->maxn) s->maxn = n;
  }
  s->out_parts = 1;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    if (!c->val[s->ov[j]]) return 0;
    int64_t pnn = vd_noise_i_part_n(vd_noise_i_ptensor(c, s->ov[j]));
    if (pnn > s->out_parts) s->out_parts = pnn;
  }
  return 1;
}

/* Per-output worst-case and variance vectors, and the node's scratch vectors in one block:
 * a probe's, sum |t|, the origin, K, sum t^2. */
static vd_rc alloc_output_vectors(nodestep *s) {
  workbuf *w = s->w;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t m = vd_tensor_numel(vd_noise_i_ptensor(s->c, s->ov[j]));
    w->wvec[j] = vd_calloc((size_t)(m > 0 ? m : 1), sizeof(double));
    w->rvar[j] = vd_calloc((size_t)(m > 0 ? m : 1), sizeof(double));
    size_t mm = (size_t)(m > 0 ? m : 1);
    w->blk[j] = mm < SIZE_MAX / 5 ? vd_calloc(5 * mm, sizeof(double)) : NULL;
    if (!w->wvec[j] || !w->rvar[j] || !w->blk[j]) return VD_OOM(s->d);
    w->wtmp[j] = w->blk[j];
    w->s1v[j] = w->blk[j] + mm;
    w->base[j] = w->blk[j] + 2 * mm;
    w->kv[j] = w->blk[j] + 3 * mm;
    w->s2v[j] = w->blk[j] + 4 * mm;
  }
  return VD_OK;
}

/* The probes' origin: the node in double on the real inputs (a dumped output also holds the
 * run's own rounding, which is not a difference between the runs). */
static vd_rc eval_origin(nodestep *s) {
  vd_noise_ctx *c = s->c;
  int need = 0;
  for (uint32_t i = 0; i < s->gn->n_in; i++) need |= c->erv[s->iv[i]] != NULL || c->ewv[s->iv[i]] != NULL;
  if (!need) return VD_OK;
  for (uint32_t i = 0; i < s->gn->n_in; i++) s->w->ins[i] = c->val[s->iv[i]];
  return vd_noise_i_eval_node(c, s->k, s->b, s->w->ins, s->w->base, s->d);
}

/* The sum collective applied to per-element vectors of its inputs, src (erv squared when sq:
 * independent errors add their variances; ewv as it is: a sum of nonnegative vectors); the
 * result's magnitude added into dst (w->rvar or w->wvec). */
static vd_rc collective_on(nodestep *s, double *const *src, int sq, double **dst) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, s->iv[i]));
    VD_CHECK(vd_noise_i_buf_at_least(&w->absd[i], &w->abscap[i], n, s->d));
    const double *x = src[s->iv[i]];
    for (int64_t e = 0; e < n; e++) w->absd[i][e] = x ? (sq ? x[e] * x[e] : x[e]) : 0.0;
    w->ins[i] = w->absd[i];
  }
  VD_CHECK(vd_noise_i_eval_node(c, s->k, s->b, w->ins, w->tmpo, s->d));
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, s->ov[j]));
    for (int64_t e = 0; e < m; e++) dst[j][e] += fabs(w->tmpo[j][e]);
  }
  return VD_OK;
}

/* The inputs' errors propagated through the node into w->rvar and w->wvec. */
static vd_rc propagate_inputs(nodestep *s) {
  vd_noise_ctx *c = s->c;
  if (s->coll_sum) {
    int any_re = 0;
    for (uint32_t i = 0; i < s->gn->n_in; i++) any_re |= c->erv[s->iv[i]] != NULL;
    if (any_re) VD_CHECK(collective_on(s, c->erv, 1, s->w->rvar));
    if (s->any_wc) VD_CHECK(collective_on(s, c->ewv, 0, s->w->wvec));
    return VD_OK;
  }
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (c->erv[v]) VD_CHECK(vd_noise_i_probe_realistic(s, i));
    if (c->ewv[v]) VD_CHECK(vd_noise_i_probe_worst(s, i));
  }
  return VD_OK;
}

/* Per output: the split factor of a contraction (nfac: its part count over its inputs', or 1
 * for a reblocked sum) and whether it reblocks; returns whether any output splits. */
static int split_factors(nodestep *s) {
  int any_split = 0;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t pj = vd_noise_i_part_n(vd_noise_i_ptensor(s->c, s->ov[j]));
    s->nfac[j] = vd_noise_i_is_contraction(s->op) && pj > s->in_parts ? (double)pj / (double)s->in_parts : 0.0;
    /* a contraction on another shape than the single plan's, none of its sums split: PyTorch 2's
       CPU kernels (oneDNN/MKL) may choose another code path by the shape (1.13's did not).  The
       worst case takes its sums as reassociated; the realistic bound only where the measured
       rule of vd_noise_i_contraction_keeps_order says the order changes */
    s->reblock[j] = SAME_SHAPE;
    if (vd_noise_i_is_contraction(s->op) && s->nfac[j] == 0 && !vd_noise_i_whole_single(s->c, s->ov[j])) {
      s->nfac[j] = 1.0;
      s->reblock[j] =
          vd_noise_i_contraction_keeps_order(s->c, s->op, s->ov[j], s->iv, s->gn->n_in) ? SAME_ORDER : REORDERED;
    }
    any_split |= s->nfac[j] > 0;
    s->km[j] = 1;
  }
  return any_split;
}

/* Differences are quantised: two floats near y differ by a multiple of their spacing, so the
 * difference an elementwise operator's inputs carry into it is a multiple of q_e, their ulps
 * pushed through the operator (the smallest over the inputs that differ; kept in kv, which only
 * a contraction uses).  A standard deviation sigma below q means most elements do not differ at
 * all: the mean |d| that makes roundings flip is then sigma^2 / q (a difference of q with
 * probability sigma^2 / q^2), not the 0.8 sigma of a Gaussian. */
static vd_rc quantum_probes(nodestep *s) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  for (uint32_t i = 0; s->quant && i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (!c->erv[v]) continue;
    const double *x = c->val[v];
    double ui = vd_noise_i_unit_of(c, vd_noise_i_ptensor(c, v));
    int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, v));
    for (int64_t e = 0; e < n; e++) w->tmpd[e] = x[e] + ui * fabs(x[e]); /* the smallest spacing near x */
    VD_CHECK(vd_noise_i_probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < s->gn->n_out; j++) {
      int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, s->ov[j]));
      double *q = w->kv[j];
      for (int64_t e = 0; e < m; e++) {
        double dq = fabs(w->tmpo[j][e] - w->base[j][e]);
        if (dq > 0 && isfinite(dq) && (q[e] == 0 || dq < q[e])) q[e] = dq;
      }
    }
  }
  return VD_OK;
}

/* Which new roundings output j of the node gets, and their constant factors. */
typedef struct {
  uint32_t j;
  int split, kernel, amp;
  double gsplit, nm, gcomb, g2;
} out_rules;

static out_rules output_rules(const nodestep *s, uint32_t j) {
  out_rules r;
  int op = s->op;
  r.j = j;
  r.split = s->nfac[j] > 0 && s->reblock[j] != SAME_ORDER;
  /* a low-precision kernel on another shape takes another code path whatever its inputs: for a
     contraction too (bfloat16 batched matmuls of another batch shape were measured to differ by
     whole output roundings on bit-identical inputs) */
  r.kernel = (((vd_noise_i_kernel_dependent(op) || vd_noise_i_is_contraction(op)) && s->low) ||
              s->reblock[j] == REORDERED) &&
             !vd_noise_i_whole_single(s->c, s->ov[j]);
  r.amp = !s->bit_in && !vd_noise_i_is_move(op) && s->u > 0;
  r.gsplit = s->nfac[j] > 0 ? vd_noise_gamma(s->km[j], s->ua) + vd_noise_gamma(s->km[j] * s->nfac[j], s->ua) : 0;
  r.nm = s->coll_sum ? (double)s->gn->n_part : (double)s->gn->n_in;
  r.gcomb = vd_noise_gamma(r.nm - 1.0, s->ua);
  r.g2 = 2.0 * vd_noise_gamma(s->km[j], s->ua);
  return r;
}

/* A split sum: both sides' roundings of the sum, in the accumulation precision. */
static void add_split(const nodestep *s, const out_rules *r, int64_t e, double ye, double *rv, double *wv) {
  uint32_t j = r->j;
  double u = s->u, ua = s->ua;
  const double *k1e = s->w->kv[j];
  double K = k1e[e] >= 1 ? k1e[e] : 1;
  double var = VD_NOISE_RV * ua * ua * K * (ye * ye / 3.0 + s->w->s2v[j][e] / 2.0) * (1.0 + s->nfac[j]);
  rv[e] += var;
  if (ua < u) { /* both sides round their (different) accumulators to the output precision */
    double a2 = VD_NOISE_ULP * u * ye * 0.8 * sqrt(var), cap = 2.0 * VD_NOISE_RV * u * u * ye * ye;
    rv[e] += a2 < cap ? a2 : cap;
    wv[e] += 2.0 * u * ye;
  }
}

/* The sum of |inputs| at output element e of m that a combination of parts rounds (an
 * all_reduce: its own participants' inputs only). */
static double combined_magnitude(const nodestep *s, int64_t e, int64_t m) {
  vd_noise_ctx *c = s->c;
  double sx = 0;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    int64_t ni = vd_tensor_numel(vd_noise_i_ptensor(c, s->iv[i]));
    if (ni > 0) sx += fabs(c->val[s->iv[i]][ni == m ? e : e % ni]);
  }
  if (s->op == VD_OP_ALL_REDUCE) sx = 0;
  if (s->op == VD_OP_ALL_REDUCE)
    for (uint32_t i = 0; i < s->gn->n_in; i++)
      if (vd_tensor_numel(vd_noise_i_ptensor(c, s->iv[i])) == m) sx += fabs(c->val[s->iv[i]][e]);
  return sx;
}

/* Roundings of values that differ by d flip with probability |d| / ulp: the output's, and the
 * internal ones (K partial sums of a contraction, in the accumulation precision; a few in a
 * float kernel of the output precision).  prop: the propagated variance of element e. */
static void add_flips(const nodestep *s, const out_rules *r, int64_t e, double ye, double prop, double *rv,
                      double *wv) {
  int op = s->op;
  double u = s->u, ua = s->ua;
  const double *s1e = s->w->s1v[r->j], *k1e = s->w->kv[r->j];
  double K = vd_noise_i_is_contraction(op) ? (k1e[e] >= 1 ? k1e[e] : 1) : 1.0;
  /* IEEE sqrt: one correct rounding */
  double Kk = vd_noise_i_kernel_dependent(op) && !s->low && op != VD_OP_SQRT ? 4.0 : 1.0;
  double ui = vd_noise_i_is_contraction(op) ? ua : u;
  double sig = sqrt(prop), ead = 0.8 * sig;
  if (s->quant && k1e[e] > 0 && sig * sig / k1e[e] < ead) ead = sig * sig / k1e[e];
  double a2 = VD_NOISE_ULP * ye * ead * (u * Kk + (vd_noise_i_is_contraction(op) ? ui * K : 0.0));
  double cap = 2.0 * VD_NOISE_RV * ye * ye * (u * u * Kk + (vd_noise_i_is_contraction(op) ? ui * ui * K : 0.0));
  rv[e] += a2 < cap ? a2 : cap;
  wv[e] += vd_noise_i_is_contraction(op) ? r->g2 * s1e[e] + 2.0 * u * ye : 2.0 * u * ye * Kk;
}

/* The new rounding discrepancies of output j, per element, added to its propagated bounds. */
static void add_new_roundings(const nodestep *s, const out_rules *r) {
  uint32_t j = r->j, v = s->ov[j];
  const double *yv = s->c->val[v];
  int64_t m = vd_tensor_numel(vd_noise_i_ptensor(s->c, v));
  double *rv = s->w->rvar[j], *wv = s->w->wvec[j];
  const double *s1e = s->w->s1v[j];
  double u = s->u, ua = s->ua;
  for (int64_t e = 0; e < m; e++) {
    double ye = fabs(yv[e]), prop = rv[e];
    if (s->nfac[j] > 0) wv[e] += r->gsplit * s1e[e]; /* worst case: a split or reblocked sum, as if reassociated */
    if (r->split) add_split(s, r, e, ye, rv, wv);
    if (s->combine) { /* the sum of the parts, rounded in an order the single plan never uses */
      rv[e] += VD_NOISE_RV * ua * ua * (r->nm - 1.0) * ye * ye;
      wv[e] += r->gcomb * combined_magnitude(s, e, m);
    }
    if (r->kernel) { /* another shape: another code path of the kernel, at most an ulp apart */
      rv[e] += 2.0 * VD_NOISE_RV * u * u * ye * ye;
      wv[e] += 2.0 * u * ye;
    }
    if (r->amp) add_flips(s, r, e, ye, prop, rv, wv);
  }
}

/* Output j's bounds into the context: its norms, and its vectors (taken from w) when nonzero. */
static void store_bounds(nodestep *s, const out_rules *r) {
  vd_noise_ctx *c = s->c;
  uint32_t j = r->j, v = s->ov[j];
  int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, v));
  double *rv = s->w->rvar[j], *wv = s->w->wvec[j];
  double tot = 0, mx = 0;
  for (int64_t e = 0; e < m; e++) {
    tot += rv[e];
    if (!(wv[e] <= mx)) mx = wv[e];
  }
  c->ere[v] = sqrt(tot);
  c->ewc[v] = mx;
  if (tot > 0 || isnan(tot)) {
    for (int64_t e = 0; e < m; e++) rv[e] = sqrt(rv[e]);
    c->erv[v] = rv;
    s->w->rvar[j] = NULL;
  }
  if (mx > 0 || isnan(mx)) {
    c->ewv[v] = wv;
    s->w->wvec[j] = NULL;
  }
  c->bitid[v] = s->bit_in && !r->split && !s->combine && !r->kernel;
  c->known[v] = 1;
}

/* The new rounding discrepancies of the node (split sums, combined parts, kernels on another
 * shape, flips), then every output's bounds stored. */
static vd_rc new_roundings(nodestep *s) {
  int op = s->op;
  workbuf *w = s->w;
  uint32_t n_out = s->gn->n_out;
  s->combine = s->coll_sum || (vd_noise_i_is_sum_of_inputs(op) && s->in_parts > s->out_parts);
  s->nfac = w->tmpc;
  double *vs = w->tmpc + n_out, *s1 = w->tmpc + 2 * n_out;
  s->km = w->tmpc + 3 * n_out;
  s->reblock = w->tmpc + 4 * n_out; /* per output: SAME_SHAPE, SAME_ORDER or REORDERED */
  const vd_tensor_t *t0 = vd_noise_i_ptensor(s->c, s->ov[0]);
  s->u = vd_noise_i_unit_of(s->c, t0);
  s->ua = vd_noise_i_accum_unit(s->c, s->u);
  /* bfloat16 and float16 kernels (float inside, rounded back) take shape-dependent code paths */
  s->low = s->u > ldexp(1.0, -20);
  int any_split = split_factors(s);
  for (uint32_t j = 0; j < n_out; j++) vs[j] = s1[j] = 0;
  if (vd_noise_i_is_contraction(op) && (any_split || !s->bit_in))
    VD_CHECK(vd_noise_i_contraction_terms(s->c, s->k, op, s->b, s->km, s1, vs, s->ua, s->nfac, w->s1v, w->kv, w->s2v,
                                          s->d));
  s->quant = vd_noise_i_is_elementwise(op) && !vd_noise_i_is_contraction(op) && !s->bit_in && s->u > 0;
  VD_CHECK(quantum_probes(s));
  for (uint32_t j = 0; j < n_out; j++) {
    out_rules r = output_rules(s, j);
    add_new_roundings(s, &r);
    store_bounds(s, &r);
  }
  return VD_OK;
}

/* The bounds of node k's outputs: its inputs' errors propagated, plus the new roundings. */
vd_rc vd_noise_i_node_bounds(vd_noise_ctx *c, uint32_t k, callbuf *b, workbuf *w, vd_diag *d) {
  nodestep s = {.c = c, .k = k, .b = b, .w = w, .d = d, .gn = &c->gpx.nodes[k]};
  s.pn = &c->pp->nodes[s.gn->pnode];
  s.op = vd_op_lookup(vd_node_op(c->pp, s.pn));
  s.iv = vd_gnode_inputs(&c->gpx, s.gn);
  s.ov = vd_gnode_outputs(&c->gpx, s.gn);
  VD_CHECK(vd_noise_i_work_fit(w, s.gn->n_out + s.gn->n_in + 1, d));
  if (!scan_operands(&s)) return VD_OK; /* no values or no bound: the outputs get none */
  s.coll_sum = (s.op == VD_OP_ALL_REDUCE || s.op == VD_OP_REDUCE_SCATTER) && s.gn->n_part > 1 &&
               strcmp(vd_node_attr_str(c->pp, s.pn, "reduce", "sum"), "sum") == 0;
  vd_rc rc = alloc_output_vectors(&s);
  if (rc == VD_OK) rc = vd_noise_i_buf_at_least(&w->tmpd, &w->tcap, s.maxn, d);
  if (rc == VD_OK) rc = vd_noise_i_probe_outputs(c, k, w, d);
  if (rc == VD_OK) rc = eval_origin(&s);
  if (rc == VD_OK) rc = propagate_inputs(&s);
  if (rc == VD_OK) rc = new_roundings(&s);
  for (uint32_t j = 0; j < s.gn->n_out; j++) {
    vd_free(w->wvec[j]);
    vd_free(w->rvar[j]);
    vd_free(w->blk[j]);
    w->wvec[j] = w->wtmp[j] = w->s1v[j] = w->base[j] = w->rvar[j] = w->kv[j] = w->s2v[j] = w->blk[j] = NULL;
  }
  return rc;
}
