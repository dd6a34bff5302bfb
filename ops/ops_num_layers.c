/*
 * ops/ops_num_layers.c - evaluators and shape checks of linear algebra and
 * the layers (matmul, linear, embedding, norms, rope, masks, softmax, pick)
 * and their backward operators.
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- linear algebra and layers ------------------------------------------- */

static vd_op_shape batch_of(const vd_op_shape *s) {
  vd_op_shape b = {.ndim = s->ndim - 2};
  for (int32_t i = 0; i < b.ndim; i++) b.d[i] = s->d[i];
  return b;
}

static vd_rc matmul_out_shape(const vd_op_call *c, const vd_op_shape *a, const vd_op_shape *b, vd_op_shape *o) {
  VD_CHECK(want_ndim(c, 0, 0, 2, VD_MAX_DIMS));
  VD_CHECK(want_ndim(c, 0, 1, 2, VD_MAX_DIMS));
  if (a->d[a->ndim - 1] != b->d[b->ndim - 2])
    return bad(c, "inputs[1]", "expected %lld rows (the contracted dim of inputs[0]), got %lld",
               (long long)a->d[a->ndim - 1], (long long)b->d[b->ndim - 2]);
  vd_op_shape ab = batch_of(a), bb = batch_of(b);
  o->ndim = (ab.ndim > bb.ndim ? ab.ndim : bb.ndim) + 2;
  int32_t nb = o->ndim - 2;
  for (int32_t i = 0; i < nb; i++) {
    int32_t ia = i - (nb - ab.ndim), ib = i - (nb - bb.ndim);
    int64_t da = ia >= 0 ? ab.d[ia] : 1, db = ib >= 0 ? bb.d[ib] : 1;
    if (da != db && da != 1 && db != 1) return bad(c, "inputs[1]", "batch dimensions do not broadcast");
    o->d[i] = da == 1 ? db : da;
  }
  o->d[nb] = a->d[a->ndim - 2];
  o->d[nb + 1] = b->d[b->ndim - 1];
  return VD_OK;
}

vd_rc vd_op_i_shape_matmul(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  vd_op_shape o;
  VD_CHECK(matmul_out_shape(c, &c->in_shape[0], &c->in_shape[1], &o));
  return want_shape(c, 1, 0, &o);
}

vd_op_mm_geo vd_op_mm_geometry(const vd_op_shape *a, const vd_op_shape *b, const vd_op_shape *o) {
  vd_op_mm_geo g;
  g.ab = batch_of(a);
  g.bb = batch_of(b);
  g.ob = batch_of(o);
  g.m = a->d[a->ndim - 2];
  g.k = a->d[a->ndim - 1];
  g.n = b->d[b->ndim - 1];
  g.nbatch = vd_op_shape_numel(&g.ob);
  return g;
}

vd_rc vd_op_i_eval_matmul(const vd_op_call *c) {
  vd_op_mm_geo g = vd_op_mm_geometry(&c->in_shape[0], &c->in_shape[1], &c->out_shape[0]);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t t = 0; t < g.nbatch; t++) {
    vd_op_shape_unravel(&g.ob, t, idx);
    const double *A = c->in[0] + vd_op_bcast_src(&g.ob, &g.ab, idx) * g.m * g.k;
    const double *B = c->in[1] + vd_op_bcast_src(&g.ob, &g.bb, idx) * g.k * g.n;
    double *Y = c->out[0] + t * g.m * g.n;
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++) {
        double s = 0;
        for (int64_t l = 0; l < g.k; l++) s += A[i * g.k + l] * B[l * g.n + j];
        Y[i * g.n + j] = s;
      }
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_matmul_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 3, 2));
  vd_op_shape o;
  VD_CHECK(matmul_out_shape(c, &c->in_shape[0], &c->in_shape[1], &o));
  VD_CHECK(want_shape(c, 0, 2, &o));
  VD_CHECK(want_shape(c, 1, 0, &c->in_shape[0]));
  return want_shape(c, 1, 1, &c->in_shape[1]);
}
vd_rc vd_op_i_eval_matmul_backward(const vd_op_call *c) {
  vd_op_mm_geo g = vd_op_mm_geometry(&c->in_shape[0], &c->in_shape[1], &c->in_shape[2]);
  int64_t idx[VD_MAX_DIMS];
  memset(c->out[0], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[0]));
  memset(c->out[1], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[1]));
  for (int64_t t = 0; t < g.nbatch; t++) {
    vd_op_shape_unravel(&g.ob, t, idx);
    int64_t oa = vd_op_bcast_src(&g.ob, &g.ab, idx) * g.m * g.k, ob = vd_op_bcast_src(&g.ob, &g.bb, idx) * g.k * g.n;
    const double *A = c->in[0] + oa, *B = c->in[1] + ob, *G = c->in[2] + t * g.m * g.n;
    double *GA = c->out[0] + oa, *GB = c->out[1] + ob;
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++) {
        double gv = G[i * g.n + j];
        for (int64_t l = 0; l < g.k; l++) {
          GA[i * g.k + l] += gv * B[l * g.n + j];
          GB[l * g.n + j] += A[i * g.k + l] * gv;
        }
      }
  }
  return VD_OK;
}

/* linear: x [.., in], w [out, in], bias [out] -> y [.., out] */
static vd_rc linear_shapes(const vd_op_call *c, const vd_op_shape *x, const vd_op_shape *w, vd_op_shape *y) {
  VD_CHECK(want_ndim(c, 0, 0, 1, VD_MAX_DIMS));
  VD_CHECK(want_ndim(c, 0, 1, 2, 2));
  if (w->d[1] != x->d[x->ndim - 1])
    return bad(c, "inputs[1]", "expected %lld columns (the last dim of inputs[0]), got %lld",
               (long long)x->d[x->ndim - 1], (long long)w->d[1]);
  *y = *x;
  y->d[y->ndim - 1] = w->d[0];
  return VD_OK;
}
vd_rc vd_op_i_shape_linear(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  vd_op_shape y;
  VD_CHECK(linear_shapes(c, &c->in_shape[0], &c->in_shape[1], &y));
  if (c->n_in == 3) {
    vd_op_shape b = {.ndim = 1, .d = {c->in_shape[1].d[0]}};
    VD_CHECK(want_shape(c, 0, 2, &b));
  }
  return want_shape(c, 1, 0, &y);
}
vd_rc vd_op_i_eval_linear(const vd_op_call *c) {
  int64_t in = c->in_shape[1].d[1], out = c->in_shape[1].d[0];
  int64_t rows = vd_op_shape_numel(&c->in_shape[0]) / (in ? in : 1);
  if (in == 0) rows = vd_op_shape_numel(&c->out_shape[0]) / (out ? out : 1);
  const double *x = c->in[0], *w = c->in[1], *b = c->n_in == 3 ? c->in[2] : NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < out; o++) {
      double s = b ? b[o] : 0.0;
      for (int64_t i = 0; i < in; i++) s += x[r * in + i] * w[o * in + i];
      c->out[0][r * out + o] = s;
    }
  return VD_OK;
}
vd_rc vd_op_i_shape_linear_backward(const vd_op_call *c) {
  if (c->n_in != 3) return bad(c, "inputs", "expected 3 inputs, got %u", c->n_in);
  if (c->n_out != 2 && c->n_out != 3) return bad(c, "outputs", "expected 2 or 3 outputs, got %u", c->n_out);
  vd_op_shape y;
  VD_CHECK(linear_shapes(c, &c->in_shape[0], &c->in_shape[1], &y));
  VD_CHECK(want_shape(c, 0, 2, &y));
  VD_CHECK(want_shape(c, 1, 0, &c->in_shape[0]));
  VD_CHECK(want_shape(c, 1, 1, &c->in_shape[1]));
  if (c->n_out == 3) {
    vd_op_shape b = {.ndim = 1, .d = {c->in_shape[1].d[0]}};
    VD_CHECK(want_shape(c, 1, 2, &b));
  }
  return VD_OK;
}
vd_rc vd_op_i_eval_linear_backward(const vd_op_call *c) {
  int64_t in = c->in_shape[1].d[1], out = c->in_shape[1].d[0];
  int64_t rows = vd_op_shape_numel(&c->in_shape[2]) / (out ? out : 1);
  const double *x = c->in[0], *w = c->in[1], *g = c->in[2];
  double *gx = c->out[0], *gw = c->out[1], *gb = c->n_out == 3 ? c->out[2] : NULL;
  memset(gx, 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[0]));
  memset(gw, 0, sizeof(double) * (size_t)(in * out));
  if (gb) memset(gb, 0, sizeof(double) * (size_t)out);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < out; o++) {
      double gv = g[r * out + o];
      if (gb) gb[o] += gv;
      for (int64_t i = 0; i < in; i++) {
        gx[r * in + i] += gv * w[o * in + i];
        gw[o * in + i] += gv * x[r * in + i];
      }
    }
  return VD_OK;
}

/* embedding: ids [..], table [rows, h] -> y [.., h] */
vd_rc vd_op_i_shape_embedding(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_ndim(c, 0, 0, 0, VD_MAX_DIMS - 1));
  VD_CHECK(want_ndim(c, 0, 1, 2, 2));
  vd_op_shape y = c->in_shape[0];
  y.d[y.ndim++] = c->in_shape[1].d[1];
  return want_shape(c, 1, 0, &y);
}
vd_rc vd_op_i_eval_embedding(const vd_op_call *c) {
  int64_t rows = c->in_shape[1].d[0], h = c->in_shape[1].d[1], start = aint(c, "start", 0);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t p = 0; p < n; p++) {
    int64_t r = index_row(c->in[0][p], start, rows);
    for (int64_t j = 0; j < h; j++) c->out[0][p * h + j] = r >= 0 ? c->in[1][r * h + j] : 0.0;
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_embedding_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_ndim(c, 1, 0, 2, 2));
  vd_op_shape g = c->in_shape[0];
  if (g.ndim >= VD_MAX_DIMS) return bad(c, "inputs[0]", "too many dimensions");
  g.d[g.ndim++] = c->out_shape[0].d[1];
  return want_shape(c, 0, 1, &g);
}
vd_rc vd_op_i_eval_embedding_backward(const vd_op_call *c) {
  int64_t rows = c->out_shape[0].d[0], h = c->out_shape[0].d[1], start = aint(c, "start", 0);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  memset(c->out[0], 0, sizeof(double) * (size_t)(rows * h));
  for (int64_t p = 0; p < n; p++) {
    int64_t r = index_row(c->in[0][p], start, rows);
    if (r < 0) continue;
    for (int64_t j = 0; j < h; j++) c->out[0][r * h + j] += c->in[1][p * h + j];
  }
  return VD_OK;
}

/* x [.., h] with per-h vectors. */
static vd_rc shape_norm(const vd_op_call *c, uint32_t n_vec) {
  VD_CHECK(want_ndim(c, 0, 0, 1, VD_MAX_DIMS));
  vd_op_shape v = {.ndim = 1, .d = {c->in_shape[0].d[c->in_shape[0].ndim - 1]}};
  for (uint32_t i = 1; i <= n_vec; i++) VD_CHECK(want_shape(c, 0, i, &v));
  return VD_OK;
}
/* A norm backward reads (x, w, grad) and writes grad x plus one gradient per
 * per-h vector (n_vec of them: rms_norm has w, layer_norm has w and b). */
static vd_rc shape_norm_backward(const vd_op_call *c, uint32_t n_vec) {
  VD_CHECK(want_count(c, 3, 1 + n_vec));
  VD_CHECK(shape_norm(c, 1));
  VD_CHECK(want_shape(c, 0, 2, &c->in_shape[0]));
  VD_CHECK(want_shape(c, 1, 0, &c->in_shape[0]));
  for (uint32_t k = 1; k <= n_vec; k++) VD_CHECK(want_shape(c, 1, k, &c->in_shape[1]));
  return VD_OK;
}
/* The row layout all four norm evaluators share: in[0] is rows x h, in[1] the
 * per-h weight; dv is the mean's divisor.  Computed once so every evaluator
 * reads the same values in the same order (the numerics depend on it). */
typedef struct {
  int64_t h, rows, dv;
  double eps;
} norm_rows;
static norm_rows norm_rows_of(const vd_op_call *c, double eps_default) {
  norm_rows n = {.h = c->in_shape[1].d[0]};
  n.rows = n.h ? vd_op_shape_numel(&c->in_shape[0]) / n.h : 0;
  n.dv = divisor(c, n.h);
  n.eps = aflt(c, "eps", eps_default);
  return n;
}
/* A norm evaluator (eps default eps_default): outputs 1 .. n_vec (a
 * backward's weight and bias gradients, sums over the rows) zeroed, then
 * each row r through row. */
static vd_rc norm_eval(const vd_op_call *c, double eps_default, uint32_t n_vec,
                       void (*row)(const vd_op_call *c, const norm_rows *n, int64_t r)) {
  norm_rows n = norm_rows_of(c, eps_default);
  for (uint32_t k = 1; k <= n_vec; k++) memset(c->out[k], 0, sizeof(double) * (size_t)n.h);
  for (int64_t r = 0; r < n.rows; r++) row(c, &n, r);
  return VD_OK;
}

vd_rc vd_op_i_shape_rms_norm(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(shape_norm(c, 1));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
/* 1 / sqrt(mean(x^2) + eps) over one row of h elements. */
static double rms_inv(const double *x, int64_t h, int64_t dv, double eps) {
  double ms = 0;
  for (int64_t i = 0; i < h; i++) ms += x[i] * x[i];
  return 1.0 / sqrt(ms / (double)dv + eps);
}
static void rms_fwd_row(const vd_op_call *c, const norm_rows *n, int64_t r) {
  int64_t h = n->h;
  const double *x = c->in[0] + r * h;
  double inv = rms_inv(x, h, n->dv, n->eps);
  for (int64_t i = 0; i < h; i++) c->out[0][r * h + i] = x[i] * inv * c->in[1][i];
}
vd_rc vd_op_i_eval_rms_norm(const vd_op_call *c) { return norm_eval(c, 1e-6, 0, rms_fwd_row); }
vd_rc vd_op_i_shape_rms_norm_backward(const vd_op_call *c) { return shape_norm_backward(c, 1); }
static void rms_bwd_row(const vd_op_call *c, const norm_rows *n, int64_t r) {
  int64_t h = n->h;
  const double *w = c->in[1], *x = c->in[0] + r * h, *g = c->in[2] + r * h;
  double dot = 0, inv = rms_inv(x, h, n->dv, n->eps);
  for (int64_t i = 0; i < h; i++) dot += g[i] * w[i] * x[i];
  for (int64_t i = 0; i < h; i++) {
    c->out[0][r * h + i] = inv * w[i] * g[i] - x[i] * inv * inv * inv * dot / (double)n->dv;
    c->out[1][i] += g[i] * x[i] * inv;
  }
}
vd_rc vd_op_i_eval_rms_norm_backward(const vd_op_call *c) { return norm_eval(c, 1e-6, 1, rms_bwd_row); }

vd_rc vd_op_i_shape_layer_norm(const vd_op_call *c) {
  VD_CHECK(want_count(c, 3, 1));
  VD_CHECK(shape_norm(c, 2));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
static void ln_row(const double *x, int64_t h, int64_t dv, double eps, double *mu, double *inv) {
  double m = 0, v = 0;
  for (int64_t i = 0; i < h; i++) m += x[i];
  m /= (double)dv;
  for (int64_t i = 0; i < h; i++) v += (x[i] - m) * (x[i] - m);
  *mu = m;
  *inv = 1.0 / sqrt(v / (double)dv + eps);
}
static void ln_fwd_row(const vd_op_call *c, const norm_rows *n, int64_t r) {
  int64_t h = n->h;
  const double *x = c->in[0] + r * h;
  double mu, inv;
  ln_row(x, h, n->dv, n->eps, &mu, &inv);
  for (int64_t i = 0; i < h; i++) c->out[0][r * h + i] = (x[i] - mu) * inv * c->in[1][i] + c->in[2][i];
}
vd_rc vd_op_i_eval_layer_norm(const vd_op_call *c) { return norm_eval(c, 1e-5, 0, ln_fwd_row); }
vd_rc vd_op_i_shape_layer_norm_backward(const vd_op_call *c) { return shape_norm_backward(c, 2); }
static void ln_bwd_row(const vd_op_call *c, const norm_rows *n, int64_t r) {
  int64_t h = n->h;
  const double *w = c->in[1], *x = c->in[0] + r * h, *g = c->in[2] + r * h;
  double mu, inv, m1 = 0, m2 = 0;
  ln_row(x, h, n->dv, n->eps, &mu, &inv);
  for (int64_t i = 0; i < h; i++) {
    double xh = (x[i] - mu) * inv, gh = g[i] * w[i];
    m1 += gh;
    m2 += gh * xh;
    c->out[1][i] += g[i] * xh;
    c->out[2][i] += g[i];
  }
  m1 /= (double)n->dv;
  m2 /= (double)n->dv;
  for (int64_t i = 0; i < h; i++) {
    double xh = (x[i] - mu) * inv;
    c->out[0][r * h + i] = inv * (g[i] * w[i] - m1 - xh * m2);
  }
}
vd_rc vd_op_i_eval_layer_norm_backward(const vd_op_call *c) { return norm_eval(c, 1e-5, 2, ln_bwd_row); }

/* rope: pairs (i, i + d/2) of the last dim rotated by
 * angle = (pos_offset + s) * theta^(-2i/d), s the index along seq_dim. */
static vd_rc shape_rope(const vd_op_call *c) {
  VD_CHECK(shape_same1(c));
  VD_CHECK(want_ndim(c, 0, 0, 2, VD_MAX_DIMS));
  int32_t sd;
  VD_CHECK(get_dim(c, "seq_dim", 1, c->in_shape[0].ndim, &sd));
  if (sd == c->in_shape[0].ndim - 1) return bad(c, "attrs.seq_dim", "must not be the rotated (last) dimension");
  if (c->in_shape[0].d[c->in_shape[0].ndim - 1] % 2)
    return bad(c, "inputs[0]", "expected an even last dimension, got %lld",
               (long long)c->in_shape[0].d[c->in_shape[0].ndim - 1]);
  return VD_OK;
}

static vd_rc eval_rope(const vd_op_call *c, double sign) {
  const vd_op_shape *s = &c->in_shape[0];
  int32_t sd;
  VD_CHECK(get_dim(c, "seq_dim", 1, s->ndim, &sd));
  double theta = aflt(c, "theta", 10000.0);
  int64_t off = aint(c, "pos_offset", 0), d = s->d[s->ndim - 1], half = d / 2;
  /* rope_angle is also the symbols rope_cos/rope_sin's argument. */
  int64_t rows = d ? vd_op_shape_numel(s) / d : 0, idx[VD_MAX_DIMS];
  vd_op_shape rs = *s;
  rs.d[rs.ndim - 1] = 1;
  for (int64_t r = 0; r < rows; r++) {
    vd_op_shape_unravel(&rs, r, idx);
    double pos = (double)(off + idx[sd]);
    const double *x = c->in[0] + r * d;
    double *y = c->out[0] + r * d;
    for (int64_t i = 0; i < half; i++) {
      double ang = sign * rope_angle(pos, (double)i, (double)d, theta);
      double co = cos(ang), si = sin(ang), a = x[i], b = x[i + half];
      y[i] = a * co - b * si;
      y[i + half] = a * si + b * co;
    }
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_rope(const vd_op_call *c) { return shape_rope(c); }
vd_rc vd_op_i_eval_rope(const vd_op_call *c) { return eval_rope(c, 1.0); }
vd_rc vd_op_i_shape_rope_backward(const vd_op_call *c) { return shape_rope(c); }
vd_rc vd_op_i_eval_rope_backward(const vd_op_call *c) { return eval_rope(c, -1.0); }

static vd_rc shape_mask(const vd_op_call *c) {
  VD_CHECK(shape_same1(c));
  return want_ndim(c, 0, 0, 2, VD_MAX_DIMS);
}
static vd_rc eval_mask(const vd_op_call *c, int backward) {
  const vd_op_shape *s = &c->in_shape[0];
  int64_t q = s->d[s->ndim - 2], k = s->d[s->ndim - 1], n = vd_op_shape_numel(s);
  int64_t qo = aint(c, "q_offset", 0), ko = aint(c, "k_offset", 0);
  double fill = backward ? 0.0 : aflt(c, "fill", -1e4);
  for (int64_t f = 0; f < n; f++) {
    int64_t j = f % k, i = (f / k) % q;
    c->out[0][f] = (ko + j <= qo + i) ? c->in[0][f] : fill;
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_causal_mask(const vd_op_call *c) { return shape_mask(c); }
vd_rc vd_op_i_eval_causal_mask(const vd_op_call *c) { return eval_mask(c, 0); }
vd_rc vd_op_i_shape_causal_mask_backward(const vd_op_call *c) { return shape_mask(c); }
vd_rc vd_op_i_eval_causal_mask_backward(const vd_op_call *c) { return eval_mask(c, 1); }
