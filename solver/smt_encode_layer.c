/*
 * solver/smt_encode_layer.c - the symbolic encoders of the layer
 * operators: rms_norm and layer_norm (over rsqrt), rotary embeddings,
 * causal and created masks, softmax (exp(x) / sum(exp(x))) and their
 * backward.  Shared helpers and ENC are in smt_encode_int.h; the
 * representation choices in smt_encode.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smt_encode_int.h"

/* ---- normalization ------------------------------------------------------- */

/* rsqrt(kh sum(v_i) / dv + eps) for one row of h elements (dv: divisor(),
 * kh: the count scale of h) */
static vd_term inv_norm(vd_smt *s, vd_term kh, vd_term *v, int64_t h, int64_t dv, double eps) {
  vd_term mean = vd_smt_div(s, vd_smt_csum(s, kh, (size_t)h, v), I(s, dv));
  return uf1(s, "rsqrt", vd_smt_add(s, mean, D(s, eps)));
}

/* A norm's rows: h elements each (the weight's length), their count scales
 * (kh over h, krows over the rows) and eps (default eps0). */
typedef struct {
  int64_t h, rows;
  vd_term kh, krows;
  double eps;
} norm_rows;

static norm_rows norm_rows_of(call_t *c, vd_smt *s, double eps0) {
  norm_rows n;
  n.h = IN(1)->shape.d[0];
  n.rows = n.h ? IN(0)->numel / n.h : 0;
  int64_t fh = full_in(c, 1)->d[0];
  n.kh = vd_smt_count_scale(s, fh, n.h);
  n.krows = vd_smt_count_scale(s, ratio_of(vd_op_shape_numel(full_in(c, 0)), fh), n.rows);
  n.eps = aflt(c, "eps", eps0);
  return n;
}

/* The rows of one norm encoder: OUT(0) row by row and the per-h gradient
 * terms of a backward added to acc (the weight's, then the bias's), with
 * scratch buf. */
typedef void (*norm_pass)(call_t *c, vd_smt *s, const norm_rows *n, acc_t *acc, vd_term *buf);

/* A norm encoder (eps default eps0): n_acc accumulators over the rows for
 * outputs 1, .. (a backward's weight and bias gradients), a scratch buffer
 * of bufs * h terms, the rows (pass), then the accumulated sums. */
static vd_rc norm_enc(call_t *c, vd_smt *s, double eps0, int n_acc, int64_t bufs, norm_pass pass) {
  norm_rows n = norm_rows_of(c, s, eps0);
  acc_t acc[2];
  for (int k = 0; k < n_acc; k++) {
    vd_rc rc = acc_init(&acc[k], n.h, n.rows, c->diag);
    if (rc != VD_OK) {
      while (k--) acc_drop(&acc[k]);
      return rc;
    }
  }
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(bufs * n.h + 1));
  if (!buf) {
    for (int k = 0; k < n_acc; k++) acc_drop(&acc[k]);
    return VD_OOM(c->diag);
  }
  pass(c, s, &n, acc, buf);
  vd_free(buf);
  for (int k = 0; k < n_acc; k++) acc_done(s, &acc[k], OUT(1 + k), n.krows);
  return VD_OK;
}

static void rms_rows(call_t *c, vd_smt *s, const norm_rows *n, acc_t *acc, vd_term *sq) {
  (void)acc;
  int64_t h = n->h;
  for (int64_t r = 0; r < n->rows; r++) {
    vd_term *x = IN(0)->t + r * h;
    for (int64_t i = 0; i < h; i++) sq[i] = vd_smt_mul(s, x[i], x[i]);
    vd_term inv = inv_norm(s, n->kh, sq, h, divisor(c, h), n->eps);
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {x[i], inv, IN(1)->t[i]};
      OUT(0)->t[r * h + i] = vd_smt_prod(s, 3, f);
    }
  }
}

ENC(rms_norm) { return norm_enc(c, s, 1e-6, 0, 1, rms_rows); }

static void rms_backward_rows(call_t *c, vd_smt *s, const norm_rows *n, acc_t *gw, vd_term *buf) {
  int64_t h = n->h;
  const vd_term *w = IN(1)->t;
  vd_term *sq = buf, *dt = buf + h;
  for (int64_t r = 0; r < n->rows; r++) {
    vd_term *x = IN(0)->t + r * h, *g = IN(2)->t + r * h;
    for (int64_t i = 0; i < h; i++) {
      sq[i] = vd_smt_mul(s, x[i], x[i]);
      vd_term f[3] = {g[i], w[i], x[i]};
      dt[i] = vd_smt_prod(s, 3, f);
    }
    vd_term inv = inv_norm(s, n->kh, sq, h, divisor(c, h), n->eps);
    vd_term dot = vd_smt_csum(s, n->kh, (size_t)h, dt);
    /* gx_i = inv w_i g_i - x_i inv^3 dot / h */
    vd_term k = vd_smt_div(s, vd_smt_mul(s, vd_smt_pow_int(s, inv, 3), dot), I(s, divisor(c, h)));
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {inv, w[i], g[i]};
      OUT(0)->t[r * h + i] = vd_smt_sub(s, vd_smt_prod(s, 3, f), vd_smt_mul(s, x[i], k));
      vd_term e[3] = {g[i], x[i], inv};
      acc_add(gw, i, vd_smt_prod(s, 3, e));
    }
  }
}

ENC(rms_norm_backward) { return norm_enc(c, s, 1e-6, 1, 2, rms_backward_rows); }

/* Row statistics of layer_norm: xc_i = x_i - mean, inv = rsqrt(var + eps). */
static vd_term ln_row(vd_smt *s, vd_term kh, const vd_term *x, int64_t h, int64_t dv, double eps, vd_term *xc,
                      vd_term *sq) {
  vd_term mu = vd_smt_div(s, vd_smt_csum(s, kh, (size_t)h, x), I(s, dv));
  for (int64_t i = 0; i < h; i++) {
    xc[i] = vd_smt_sub(s, x[i], mu);
    sq[i] = vd_smt_mul(s, xc[i], xc[i]);
  }
  return inv_norm(s, kh, sq, h, dv, eps);
}

static void ln_rows(call_t *c, vd_smt *s, const norm_rows *n, acc_t *acc, vd_term *buf) {
  (void)acc;
  int64_t h = n->h;
  vd_term *xc = buf, *sq = buf + h;
  for (int64_t r = 0; r < n->rows; r++) {
    vd_term inv = ln_row(s, n->kh, IN(0)->t + r * h, h, divisor(c, h), n->eps, xc, sq);
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {xc[i], inv, IN(1)->t[i]};
      OUT(0)->t[r * h + i] = vd_smt_add(s, vd_smt_prod(s, 3, f), IN(2)->t[i]);
    }
  }
}

ENC(layer_norm) { return norm_enc(c, s, 1e-5, 0, 2, ln_rows); }

/* acc: the weight's gradient terms, then the bias's. */
static void ln_backward_rows(call_t *c, vd_smt *s, const norm_rows *n, acc_t *acc, vd_term *buf) {
  int64_t h = n->h;
  const vd_term *w = IN(1)->t;
  vd_term *xc = buf, *sq = buf + h, *xh = buf + 2 * h, *gh = buf + 3 * h, *ghx = buf + 4 * h;
  for (int64_t r = 0; r < n->rows; r++) {
    const vd_term *g = IN(2)->t + r * h;
    vd_term inv = ln_row(s, n->kh, IN(0)->t + r * h, h, divisor(c, h), n->eps, xc, sq);
    for (int64_t i = 0; i < h; i++) {
      xh[i] = vd_smt_mul(s, xc[i], inv);
      gh[i] = vd_smt_mul(s, g[i], w[i]);
      ghx[i] = vd_smt_mul(s, gh[i], xh[i]);
      acc_add(&acc[0], i, vd_smt_mul(s, g[i], xh[i]));
      acc_add(&acc[1], i, g[i]);
    }
    vd_term m1 = vd_smt_div(s, vd_smt_csum(s, n->kh, (size_t)h, gh), I(s, divisor(c, h)));
    vd_term m2 = vd_smt_div(s, vd_smt_csum(s, n->kh, (size_t)h, ghx), I(s, divisor(c, h)));
    /* gx_i = inv (g_i w_i - m1 - xh_i m2) */
    for (int64_t i = 0; i < h; i++)
      OUT(0)->t[r * h + i] =
          vd_smt_mul(s, inv, vd_smt_sub(s, vd_smt_sub(s, gh[i], m1), vd_smt_mul(s, xh[i], m2)));
  }
}

ENC(layer_norm_backward) { return norm_enc(c, s, 1e-5, 2, 5, ln_backward_rows); }

/* ---- rotary embedding, mask, softmax ------------------------------------- */

/* cos/sin of the angle of (pos, i): uninterpreted in (pos, i, d, theta) so
 * that a wrong position offset or pairing is a different term. */
static vd_term rope_fn(vd_smt *s, const char *name, int64_t pos, int64_t i, int64_t d, double theta) {
  vd_term a[4] = {vd_smt_int_num(s, pos), vd_smt_int_num(s, i), vd_smt_int_num(s, d), D(s, theta)};
  return vd_smt_uf(s, name, 4, a);
}

static vd_rc rope(call_t *c, vd_smt *s, int backward) {
  const vd_op_shape *sh = &IN(0)->shape;
  int32_t sd = adim(c, "seq_dim", 1, sh->ndim);
  double theta = aflt(c, "theta", 10000.0);
  int64_t off = aint(c, "pos_offset", 0), d = sh->d[sh->ndim - 1], half = d / 2;
  int64_t rows = d ? IN(0)->numel / d : 0, idx[VD_MAX_DIMS];
  vd_op_shape rs = *sh;
  rs.d[rs.ndim - 1] = 1;
  for (int64_t r = 0; r < rows; r++) {
    vd_op_shape_unravel(&rs, r, idx);
    int64_t pos = off + idx[sd];
    const vd_term *x = IN(0)->t + r * d;
    vd_term *y = OUT(0)->t + r * d;
    for (int64_t i = 0; i < half; i++) {
      vd_term co = rope_fn(s, "rope_cos", pos, i, d, theta), si = rope_fn(s, "rope_sin", pos, i, d, theta);
      /* backward: the rotation by -angle: cos(-a) = cos a, sin(-a) = -sin a */
      if (backward) si = vd_smt_neg(s, si);
      vd_term a = x[i], b = x[i + half];
      y[i] = vd_smt_sub(s, vd_smt_mul(s, a, co), vd_smt_mul(s, b, si));
      y[i + half] = vd_smt_add(s, vd_smt_mul(s, a, si), vd_smt_mul(s, b, co));
    }
  }
  return VD_OK;
}
ENC(rope) { return rope(c, s, 0); }
ENC(rope_backward) { return rope(c, s, 1); }

static vd_rc mask(call_t *c, vd_smt *s, int backward) {
  const vd_op_shape *sh = &IN(0)->shape;
  int64_t q = sh->d[sh->ndim - 2], k = sh->d[sh->ndim - 1];
  int64_t qo = aint(c, "q_offset", 0), ko = aint(c, "k_offset", 0);
  vd_term fill = backward ? I(s, 0) : D(s, aflt(c, "fill", -1e4));
  for (int64_t f = 0; f < IN(0)->numel; f++) {
    int64_t j = f % k, i = (f / k) % q;
    OUT(0)->t[f] = (ko + j <= qo + i) ? IN(0)->t[f] : fill;
  }
  return VD_OK;
}
ENC(causal_mask) { return mask(c, s, 0); }
ENC(causal_mask_backward) { return mask(c, s, 1); }

/* nnScaler Llama-3 custom operators (ops/ops_num_llama3.c states their meaning).
 * create_mask depends on shapes only; apply_rotary_emb's cos/sin are
 * uninterpreted functions rot_cos/rot_sin of the freqs_cis element (its
 * angle), so both plans agree exactly when they rotate the same element by
 * the same freqs element, and a wrong position is a different term. */
ENC(create_mask) {
  int64_t n = IN(0)->shape.d[1];
  vd_term fill = D(s, aflt(c, "fill", -1e4)), zero = I(s, 0);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) OUT(0)->t[i * n + j] = j <= i ? zero : fill;
  return VD_OK;
}
ENC(apply_mask) { return binary(c, s, vd_smt_add); }
ENC(apply_mask_backward) { (void)s; return copy_into(IN(3), OUT(0)); }

static vd_rc rotary(call_t *c, vd_smt *s, int backward) {
  const vd_term *f = IN(2)->t;
  for (uint32_t k = 0; k < 2; k++) {
    const vd_op_shape *x = &IN(k)->shape;
    const vd_term *in = IN(backward ? 5 + k : k)->t;
    int64_t n = x->d[1], h = x->d[2], half = x->d[3] / 2, rows = x->d[0] * n * h;
    for (int64_t r = 0; r < rows; r++) {
      int64_t pos = (r / h) % n;
      const vd_term *a = in + r * 2 * half;
      vd_term *y = OUT(k)->t + r * 2 * half;
      for (int64_t j = 0; j < half; j++) {
        vd_term th = f[pos * half + j];
        vd_term co = vd_smt_uf(s, "rot_cos", 1, &th), si = vd_smt_uf(s, "rot_sin", 1, &th);
        if (backward) si = vd_smt_neg(s, si);
        vd_term u = a[2 * j], v = a[2 * j + 1];
        y[2 * j] = vd_smt_sub(s, vd_smt_mul(s, u, co), vd_smt_mul(s, v, si));
        y[2 * j + 1] = vd_smt_add(s, vd_smt_mul(s, u, si), vd_smt_mul(s, v, co));
      }
    }
  }
  return VD_OK;
}
ENC(apply_rotary_emb) { return rotary(c, s, 0); }
ENC(apply_rotary_emb_backward) { return rotary(c, s, 1); }

/* One line of a softmax encoder: the elements at base + j * l->inner
 * (j < l->len), k the count scale of a line, buf scratch of l->len terms. */
typedef void (*softmax_line)(call_t *c, vd_smt *s, int64_t base, const vd_op_lines *l, vd_term k, vd_term *buf);

/* A softmax encoder: the lines along attribute dim, each through line. */
static vd_rc softmax_enc(call_t *c, vd_smt *s, softmax_line line) {
  int32_t dim = adim(c, "dim", -1, IN(0)->shape.ndim);
  vd_op_lines l = vd_op_lines_of(&IN(0)->shape, dim);
  vd_term k = dims_scale(s, c, 0, dim, dim + 1);
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(l.len + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) line(c, s, o * l.len * l.inner + i, &l, k, buf);
  vd_free(buf);
  return VD_OK;
}

/* y_j = exp(x_j) / sum exp(x) */
static void softmax_fwd(call_t *c, vd_smt *s, int64_t base, const vd_op_lines *l, vd_term k, vd_term *e) {
  for (int64_t j = 0; j < l->len; j++) e[j] = uf1(s, "exp", IN(0)->t[base + j * l->inner]);
  vd_term z = vd_smt_csum(s, k, (size_t)l->len, e);
  for (int64_t j = 0; j < l->len; j++) OUT(0)->t[base + j * l->inner] = vd_smt_div(s, e[j], z);
}

/* gx_j = y_j (g_j - sum g y) */
static void softmax_bwd(call_t *c, vd_smt *s, int64_t base, const vd_op_lines *l, vd_term k, vd_term *p) {
  const vd_term *y = IN(0)->t + base, *g = IN(1)->t + base;
  for (int64_t j = 0; j < l->len; j++) p[j] = vd_smt_mul(s, g[j * l->inner], y[j * l->inner]);
  vd_term dot = vd_smt_csum(s, k, (size_t)l->len, p);
  for (int64_t j = 0; j < l->len; j++)
    OUT(0)->t[base + j * l->inner] = vd_smt_mul(s, y[j * l->inner], vd_smt_sub(s, g[j * l->inner], dot));
}

ENC(softmax) { return softmax_enc(c, s, softmax_fwd); }
ENC(softmax_backward) { return softmax_enc(c, s, softmax_bwd); }
