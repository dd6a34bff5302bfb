/*
 * noise/prop_probe.c - the probes of one node's bounds (prop.c, docs/noise.md
 * "The model of floating point"): the node evaluated in double on perturbed
 * inputs against its evaluation on the unperturbed ones, realistic (x + s, or
 * x + r s with random signs) and worst case (|f(x + W) - f(x)|, f(W, |x|), the
 * larger of x +- W, or six sign patterns); and the per-element term counts and
 * sums of |terms| and terms^2 of a contraction.  The work buffers they use.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "prop_int.h"

/* ---- one node's bounds -------------------------------------------------------------- */


/* Frees the buffers sized by the operand count (w->cap); tmpd is sized by
 * elements and outlives a regrowth. */
static void work_free_slots(workbuf *w) {
  VD_FREE_EACH(w->tmpo, w->cap);
  vd_free(w->ins);
  vd_free(w->ocap);
  vd_free(w->tmpc);
  VD_FREE_EACH(w->absd, w->cap);
  vd_free(w->abscap);
  vd_free(w->wvec);
  vd_free(w->wtmp);
  vd_free(w->s1v);
  vd_free(w->base);
  vd_free(w->rvar);
  vd_free(w->kv);
  vd_free(w->s2v);
  vd_free(w->blk);
}

vd_rc vd_noise_i_work_fit(workbuf *w, uint32_t n, vd_diag *d) {
  if (n > w->cap) {
    work_free_slots(w);
    w->blk = vd_calloc(n, sizeof(double *));
    w->kv = vd_calloc(n, sizeof(double *));
    w->s2v = vd_calloc(n, sizeof(double *));
    w->rvar = vd_calloc(n, sizeof(double *));
    w->base = vd_calloc(n, sizeof(double *));
    w->wvec = vd_calloc(n, sizeof(double *));
    w->wtmp = vd_calloc(n, sizeof(double *));
    w->s1v = vd_calloc(n, sizeof(double *));
    w->tmpc = vd_calloc((size_t)n * 5, sizeof(double));
    w->absd = vd_calloc(n, sizeof(double *));
    w->abscap = vd_calloc(n, sizeof(int64_t));
    w->tmpo = vd_calloc(n, sizeof(double *));
    w->ins = vd_calloc(n, sizeof(double *));
    w->ocap = vd_calloc(n, sizeof(int64_t));
    w->cap = n;
    if (!w->tmpo || !w->ins || !w->ocap || !w->tmpc || !w->absd ||
        !w->abscap || !w->wvec || !w->wtmp || !w->s1v || !w->base || !w->rvar || !w->kv || !w->s2v || !w->blk) {
      w->cap = 0;
      return VD_OOM(d);
    }
  }
  return VD_OK;
}

vd_rc vd_noise_i_buf_at_least(double **p, int64_t *cap, int64_t n, vd_diag *d) {
  if (n <= *cap) return VD_OK;
  vd_free(*p);
  *p = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!*p) {
    *cap = 0;
    return VD_OOM(d);
  }
  *cap = n;
  return VD_OK;
}

void vd_noise_i_work_free(workbuf *w) {
  work_free_slots(w);
  vd_free(w->tmpd);
  memset(w, 0, sizeof(*w));
}

/* Probe outputs sized for node k. */
vd_rc vd_noise_i_probe_outputs(vd_noise_ctx *c, uint32_t k, workbuf *w, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t j = 0; j < gn->n_out; j++)
    VD_CHECK(vd_noise_i_buf_at_least(&w->tmpo[j], &w->ocap[j], vd_tensor_numel(vd_noise_i_ptensor(c, ov[j])), d));
  return VD_OK;
}

/* Evaluates node k with input i replaced by w->tmpd; outputs in w->tmpo. */
vd_rc vd_noise_i_probe(vd_noise_ctx *c, uint32_t k, uint32_t i, callbuf *b, workbuf *w, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn);
  for (uint32_t q = 0; q < gn->n_in; q++) w->ins[q] = q == i ? w->tmpd : c->val[iv[q]];
  return vd_noise_i_eval_node(c, k, b, w->ins, w->tmpo, d);
}

/* |w->tmpo[j][e] - w->base[j][e]|: how far a probe moved output j's
 * element e; infinite when either side is not finite, 0 when both are NaN. */
static double moved(const workbuf *w, uint32_t j, int64_t e) {
  double y = w->base[j][e], t = w->tmpo[j][e], g = fabs(t - y);
  return isfinite(g) ? g : isnan(t) && isnan(y) ? 0 : INFINITY;
}


/* The seed of probe pr of input i of the node (its random signs): one
 * stream per node, input, probe and kind of probe (salt). */
static uint64_t probe_seed(const nodestep *s, uint32_t i, int pr, uint64_t salt) {
  uint64_t k = ((uint64_t)s->k << 20) ^ ((uint64_t)i << 4) ^ (uint64_t)pr ^ salt;
  return vd_hash_splitmix64(s->c->o->seed ^ vd_hash_splitmix64(k));
}

/* The realistic probe of input i: its per-element standard deviations s_e
 * pushed through the operator, E[d_e^2] added to the output's variances
 * (w->rvar).  Data movement and elementwise operators: one probe x + s (their
 * Jacobian maps each element on its own: exact to first order); the others:
 * the mean of two probes x + r s with random signs r (E[(J r s)_e^2] =
 * sum_c J_ec^2 s_c^2: the variance of independent input errors). */
vd_rc vd_noise_i_probe_realistic(const nodestep *s, uint32_t i) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  uint32_t v = s->iv[i];
  const double *x = c->val[v], *sd = c->erv[v];
  int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, v));
  int det = vd_noise_i_is_move(s->op) || vd_noise_i_is_elementwise(s->op);
  int probes = det ? 1 : 2;
  for (int pr = 0; pr < probes; pr++) {
    uint64_t base = probe_seed(s, i, pr, 0x5157ULL);
    for (int64_t e = 0; e < n; e++)
      w->tmpd[e] = x[e] + (det || (vd_hash_splitmix64(base + (uint64_t)e) & 1) ? sd[e] : -sd[e]);
    VD_CHECK(vd_noise_i_probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < s->gn->n_out; j++) {
      int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, s->ov[j]));
      for (int64_t e = 0; e < m; e++) {
        double dd = moved(w, j, e);
        w->rvar[j][e] += dd * dd / probes;
      }
    }
  }
  return VD_OK;
}

/* Does output j of node k read input i?  (linear_backward's dx does not
 * read x: the contraction rule below would otherwise charge it.)  One
 * evaluation with input i moved. */
static vd_rc reads_input(const nodestep *s, uint32_t i, uint8_t *dep) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  const double *x = c->val[s->iv[i]];
  int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, s->iv[i]));
  for (int64_t e = 0; e < n; e++) w->tmpd[e] = x[e] * 1.25 + 0.5;
  VD_CHECK(vd_noise_i_probe(c, s->k, i, s->b, w, s->d));
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    const double *y = w->base[j];
    int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, s->ov[j]));
    dep[j] = 0;
    for (int64_t e = 0; e < m && !dep[j]; e++) dep[j] = w->tmpo[j][e] != y[e];
  }
  return VD_OK;
}

/* The worst case, componentwise and to first order: input i's error bound
 * vector E (|error| <= E elementwise) reaches output element e as
 * sum_c |dy_e/dx_c| E_c:
 *   data movement                |f(x + E) - f(x)| (exact: a linear map that copies elements);
 *   sums and bilinear operators  f(E in place of input i, |x| for the others) (exact |J| E);
 *   elementwise                  max(|f(x + E) - f(x)|, |f(x - E) - f(x)|) (first order);
 *   other operators              (softmax, norms, their backward) an estimate: twice the largest
 *                                |f(x + s E) - f(x)| over s = +1, -1 and four random sign
 *                                patterns (not rigorous; docs/noise.md).
 * Adds into w->wvec[j]. */
vd_rc vd_noise_i_probe_worst(const nodestep *s, uint32_t i) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  const vd_gnode_t *gn = s->gn;
  const uint32_t *iv = s->iv, *ov = s->ov;
  uint8_t dep[64];
  int use_dep = gn->n_out > 1 && gn->n_out <= 64;
  if (use_dep) VD_CHECK(reads_input(s, i, dep));
  const double *x = c->val[iv[i]], *E = c->ewv[iv[i]];
  int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, iv[i]));
  if (vd_noise_i_is_contraction(s->op) && s->op != VD_OP_SUMSQ) {
    for (uint32_t q = 0; q < gn->n_in; q++) {
      const vd_tensor_t *t = vd_noise_i_ptensor(c, iv[q]);
      int64_t m = vd_tensor_numel(t);
      double *buf = NULL;
      if (q == i) {
        buf = w->tmpd;
        for (int64_t e = 0; e < m; e++) buf[e] = E[e];
      } else if (vd_noise_i_is_float(t->dtype)) {
        VD_CHECK(vd_noise_i_buf_at_least(&w->absd[q], &w->abscap[q], m, s->d));
        buf = w->absd[q];
        for (int64_t e = 0; e < m; e++) buf[e] = fabs(c->val[iv[q]][e]);
      }
      w->ins[q] = buf ? buf : c->val[iv[q]];
    }
    VD_CHECK(vd_noise_i_eval_node(c, s->k, s->b, w->ins, w->tmpo, s->d));
    for (uint32_t j = 0; j < gn->n_out; j++) {
      if (use_dep && !dep[j]) continue;
      int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
      for (int64_t e = 0; e < m; e++) w->wvec[j][e] += fabs(w->tmpo[j][e]);
    }
    return VD_OK;
  }
  int move = vd_noise_i_is_move(s->op), elem = vd_noise_i_is_elementwise(s->op);
  int probes = move ? 1 : elem ? 2 : 6;
  for (uint32_t j = 0; j < gn->n_out; j++) {
    int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
    for (int64_t e = 0; e < m; e++) w->wtmp[j][e] = 0;
  }
  for (int pr = 0; pr < probes; pr++) {
    uint64_t base = probe_seed(s, i, pr, 0x77ULL);
    for (int64_t e = 0; e < n; e++) {
      double sg = pr == 0 ? 1.0 : pr == 1 ? -1.0 : (vd_hash_splitmix64(base + (uint64_t)e) & 1 ? 1.0 : -1.0);
      w->tmpd[e] = x[e] + sg * E[e];
    }
    VD_CHECK(vd_noise_i_probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < gn->n_out; j++) {
      int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
      for (int64_t e = 0; e < m; e++) {
        double g = moved(w, j, e);
        if (g > w->wtmp[j][e]) w->wtmp[j][e] = g;
      }
    }
  }
  for (uint32_t j = 0; j < gn->n_out; j++) {
    if (use_dep && !dep[j]) continue;
    int64_t m = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
    double f = move || elem ? 1.0 : 2.0;
    for (int64_t e = 0; e < m; e++) w->wvec[j][e] += f * w->wtmp[j][e];
  }
  return VD_OK;
}

/* From the node evaluated on all-ones, |x| and x^2 (outs[0..2]), per output: the per-element
 * term counts (kv), sums of |terms| (s1v) and of terms^2 (s2v), the largest count (kmax), the
 * max-norm of the |terms| sums (s1n) and the one-side variance summed (vsum). */
static void terms_of_outputs(vd_noise_ctx *c, uint32_t k, int op, double **outs[3], double *kmax,
                             double *s1n, double *vsum, double u_acc, const double *nfac, double **s1v,
                             double **kv, double **s2v) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t j = 0; j < gn->n_out; j++) {
    const double *y = c->val[ov[j]];
    int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
    int64_t nin = vd_tensor_numel(vd_noise_i_ptensor(c, iv[0]));
    double s1 = 0, v = 0;
    kmax[j] = 1;
    for (int64_t e = 0; e < n; e++) {
      double K = outs[0][j][e];
      if (op == VD_OP_MEAN) K = (double)nin / (double)(n > 0 ? n : 1);
      if (!(K >= 1)) K = 1;
      if (K > kmax[j]) kmax[j] = K;
      double a = outs[1][j][e], q = outs[2][j][e];
      if (op == VD_OP_MEAN) {
        a *= K;
        q *= K * K;
      }
      if (a > s1) s1 = a;
      s1v[j][e] = a;
      kv[j][e] = K;
      s2v[j][e] = q;
      /* one side's variance, r u^2 K (y^2/3 + sum t^2 / 2); the single side's nK terms */
      double ye = op == VD_OP_MEAN ? y[e] * K : y[e];
      v += VD_NOISE_RV * u_acc * u_acc * K * (ye * ye / 3.0 + q / 2.0) * (1.0 + nfac[j]);
    }
    s1n[j] = s1; /* max-norm of |terms| summed */
    vsum[j] = v;
  }
}

/* Per-element term counts and sums of |terms| and terms^2 of a contraction:
 * the node evaluated on all-ones, |x| and x^2 floating inputs (integer inputs,
 * indices, are kept).  Exact for sums of products of its inputs. */
vd_rc vd_noise_i_contraction_terms(vd_noise_ctx *c, uint32_t k, int op, callbuf *b, double *kmax, double *s1n,
                                   double *vsum, double u_acc, const double *nfac, double **s1v, double **kv,
                                   double **s2v, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  int64_t tot = 0;
  for (uint32_t i = 0; i < gn->n_in; i++) tot += vd_tensor_numel(vd_noise_i_ptensor(c, iv[i]));
  double *pool = vd_calloc((size_t)(tot > 0 ? tot : 1) * 3, sizeof(double));
  const double **in3 = vd_calloc((size_t)gn->n_in * 3 + 1, sizeof(double *));
  double **outs[3] = {NULL, NULL, NULL};
  vd_rc rc = VD_OK;
  if (!pool || !in3) {
    rc = VD_OOM(d);
    goto done;
  }
  int64_t off = 0;
  for (uint32_t i = 0; i < gn->n_in; i++) {
    const vd_tensor_t *t = vd_noise_i_ptensor(c, iv[i]);
    int64_t n = vd_tensor_numel(t);
    const double *x = c->val[iv[i]];
    for (int m = 0; m < 3; m++) {
      double *p = pool + (size_t)tot * (size_t)m + (size_t)off;
      for (int64_t e = 0; e < n; e++)
        p[e] = !vd_noise_i_is_float(t->dtype) ? x[e] : m == 0 ? 1.0 : m == 1 ? fabs(x[e]) : x[e] * x[e];
      in3[(size_t)m * gn->n_in + i] = p;
    }
    off += n;
  }
  for (int m = 0; m < 3; m++) {
    outs[m] = vd_calloc(gn->n_out + 1, sizeof(double *));
    if (!outs[m]) {
      rc = VD_OOM(d);
      goto done;
    }
    for (uint32_t j = 0; j < gn->n_out; j++) {
      int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
      outs[m][j] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
      if (!outs[m][j]) {
        rc = VD_OOM(d);
        goto done;
      }
    }
    if ((rc = vd_noise_i_eval_node(c, k, b, in3 + (size_t)m * gn->n_in, outs[m], d)) != VD_OK) goto done;
  }
  terms_of_outputs(c, k, op, outs, kmax, s1n, vsum, u_acc, nfac, s1v, kv, s2v);
done:
  for (int m = 0; m < 3; m++) {
    if (outs[m])
      for (uint32_t j = 0; j < gn->n_out; j++) vd_free(outs[m][j]);
    vd_free(outs[m]);
  }
  vd_free(pool);
  vd_free(in3);
  return rc;
}
