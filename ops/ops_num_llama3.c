/*
 * ops/ops_num_llama3.c - evaluators and shape checks of the nnScaler Llama-3
 * custom operators (create_mask, apply_mask, apply_rotary_emb).
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- nnScaler Llama-3 custom operators ----------------------------------
 * create_mask(tokens[b,s], h[b,s,H]) -> mask[1,1,s,s]: nnScaler's
 * torch.triu(full((s, s), -inf), diagonal=1): 0 where key j <= query i,
 * `fill` (default -1e4, which exp() sends to 0 in double exactly as -inf
 * does, but keeps the values finite and comparable) above the diagonal.
 * Only the shapes of the inputs matter.
 * apply_mask(x, mask) = x + mask (mask broadcast over batch and heads).
 * apply_rotary_emb(xq, xk, freqs_cis[s, d/2]): Llama-3's view_as_complex on
 * interleaved pairs (2j, 2j+1) times freqs_cis[s, j].  freqs_cis is
 * complex64 in nnScaler (x_dtype in the converted plan); we represent each
 * complex element e^{i theta} by one real, its angle theta: the rotation
 * is then (cos theta, sin theta) of that element. */
static vd_rc shape_create_mask(const vd_op_call *c) {
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  VD_CHECK(want_ndim(c, 0, 1, 2, VD_MAX_DIMS));
  const vd_op_shape *t = &c->in_shape[0], *h = &c->in_shape[1];
  if (h->d[0] != t->d[0] || h->d[1] != t->d[1]) {
    char a[96], b[96];
    shape_str(t, a, sizeof(a));
    shape_str(h, b, sizeof(b));
    return bad(c, "inputs[1]", "expected leading dims [b,s] of tokens %s, got %s", a, b);
  }
  vd_op_shape w = {.ndim = 4, .d = {1, 1, t->d[1], t->d[1]}};
  return want_shape(c, 1, 0, &w);
}
vd_rc vd_op_i_shape_create_mask(const vd_op_call *c) { return shape_create_mask(c); }
vd_rc vd_op_i_eval_create_mask(const vd_op_call *c) {
  int64_t s = c->in_shape[0].d[1];
  double fill = aflt(c, "fill", -1e4);
  for (int64_t i = 0; i < s; i++)
    for (int64_t j = 0; j < s; j++) c->out[0][i * s + j] = j <= i ? 0.0 : fill;
  return VD_OK;
}

/* mask broadcasts to x; x, (y, g) and the output share x's shape. */
static vd_rc shape_apply_mask(const vd_op_call *c, uint32_t n_same) {
  VD_CHECK(want_ndim(c, 0, 0, 2, VD_MAX_DIMS));
  if (!vd_op_bcast_to(&c->in_shape[1], &c->in_shape[0])) {
    char a[96], b[96];
    shape_str(&c->in_shape[1], a, sizeof(a));
    shape_str(&c->in_shape[0], b, sizeof(b));
    return bad(c, "inputs[1]", "mask %s does not broadcast to x %s", a, b);
  }
  for (uint32_t i = 2; i < 2 + n_same; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_shape_apply_mask(const vd_op_call *c) { return shape_apply_mask(c, 0); }
vd_rc vd_op_i_eval_apply_mask(const vd_op_call *c) { return binary(c, f_add); }
vd_rc vd_op_i_shape_apply_mask_backward(const vd_op_call *c) { return shape_apply_mask(c, 2); }
vd_rc vd_op_i_eval_apply_mask_backward(const vd_op_call *c) {
  memcpy(c->out[0], c->in[3], sizeof(double) * (size_t)vd_op_shape_numel(&c->out_shape[0]));
  return VD_OK;
}

/* xq[b,s,hq,d], xk[b,s,hk,d], freqs[s,d/2]; backward also (oq, ok, gq, gk). */
static vd_rc shape_rotary(const vd_op_call *c, int backward) {
  for (uint32_t i = 0; i < 2; i++) VD_CHECK(want_ndim(c, 0, i, 4, 4));
  VD_CHECK(want_ndim(c, 0, 2, 2, 2));
  const vd_op_shape *f = &c->in_shape[2];
  for (uint32_t i = 0; i < 2; i++) {
    const vd_op_shape *x = &c->in_shape[i];
    if (x->d[1] != f->d[0] || x->d[3] != 2 * f->d[1]) {
      char a[96], b[96], fl[32];
      shape_str(x, a, sizeof(a));
      shape_str(f, b, sizeof(b));
      return bad(c, fname(fl, sizeof(fl), "inputs", i), "expected [b,s,h,d] with s and d/2 of freqs_cis %s, got %s",
                 b, a);
    }
    VD_CHECK(want_shape(c, 1, i, x));
    if (backward) {
      VD_CHECK(want_shape(c, 0, 3 + i, x));
      VD_CHECK(want_shape(c, 0, 5 + i, x));
    }
  }
  return VD_OK;
}
static void eval_rotary(const vd_op_call *c, int backward) {
  const double *f = c->in[2];
  double sg = backward ? -1.0 : 1.0;
  for (uint32_t k = 0; k < 2; k++) {
    const vd_op_shape *x = &c->in_shape[k];
    const double *in = backward ? c->in[5 + k] : c->in[k];
    int64_t s = x->d[1], h = x->d[2], half = x->d[3] / 2, rows = x->d[0] * s * h;
    for (int64_t r = 0; r < rows; r++) {
      int64_t pos = (r / h) % s;
      const double *a = in + r * 2 * half;
      double *y = c->out[k] + r * 2 * half;
      for (int64_t j = 0; j < half; j++) {
        double th = f[pos * half + j], co = cos(th), si = sg * sin(th);
        double u = a[2 * j], v = a[2 * j + 1];
        y[2 * j] = u * co - v * si;
        y[2 * j + 1] = u * si + v * co;
      }
    }
  }
}
vd_rc vd_op_i_shape_apply_rotary_emb(const vd_op_call *c) { return shape_rotary(c, 0); }
vd_rc vd_op_i_eval_apply_rotary_emb(const vd_op_call *c) { eval_rotary(c, 0); return VD_OK; }
vd_rc vd_op_i_shape_apply_rotary_emb_backward(const vd_op_call *c) { return shape_rotary(c, 1); }
vd_rc vd_op_i_eval_apply_rotary_emb_backward(const vd_op_call *c) { eval_rotary(c, 1); return VD_OK; }

/* softmax and its backward: the same attribute dim, the first input's lines
 * along it; inputs (x) or (y, g), one output. */
static vd_rc shape_softmax_rule(const vd_op_call *c, int backward) {
  VD_CHECK(backward ? shape_same2(c) : shape_same1(c));
  int32_t dim;
  return get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim);
}
/* Each line of the first input along dim (the elements at base + j * stride,
 * j < len) through line. */
static vd_rc softmax_eval(const vd_op_call *c, void (*line)(const vd_op_call *c, int64_t base, int64_t len,
                                                            int64_t stride)) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim));
  vd_op_lines l = vd_op_lines_of(&c->in_shape[0], dim);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) line(c, o * l.len * l.inner + i, l.len, l.inner);
  return VD_OK;
}
/* y_j = exp(x_j - max x) / sum exp(x - max x) */
static void softmax_line(const vd_op_call *c, int64_t base, int64_t len, int64_t stride) {
  const double *x = c->in[0] + base;
  double *y = c->out[0] + base;
  double mx = -INFINITY, s = 0;
  for (int64_t j = 0; j < len; j++) mx = fmax(mx, x[j * stride]);
  for (int64_t j = 0; j < len; j++) s += (y[j * stride] = exp(x[j * stride] - mx));
  for (int64_t j = 0; j < len; j++) y[j * stride] /= s;
}
/* gx_j = y_j (g_j - sum g y) */
static void softmax_backward_line(const vd_op_call *c, int64_t base, int64_t len, int64_t stride) {
  const double *y = c->in[0] + base, *g = c->in[1] + base;
  double *gx = c->out[0] + base, s = 0;
  for (int64_t j = 0; j < len; j++) s += g[j * stride] * y[j * stride];
  for (int64_t j = 0; j < len; j++) gx[j * stride] = y[j * stride] * (g[j * stride] - s);
}
vd_rc vd_op_i_shape_softmax(const vd_op_call *c) { return shape_softmax_rule(c, 0); }
vd_rc vd_op_i_eval_softmax(const vd_op_call *c) { return softmax_eval(c, softmax_line); }
vd_rc vd_op_i_shape_softmax_backward(const vd_op_call *c) { return shape_softmax_rule(c, 1); }
vd_rc vd_op_i_eval_softmax_backward(const vd_op_call *c) { return softmax_eval(c, softmax_backward_line); }

/* pick: x [n, v], labels [n] -> y [n]; pick_backward: labels [n], dy [n]
 * -> dx [n, v].  One rule for both: x_out says x [n, v] is output 0 (the
 * backward) rather than input 0, and the two [n] tensors are the other
 * input and the output (pick) or both inputs (the backward). */
static vd_rc shape_pick_rule(const vd_op_call *c, int x_out) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_ndim(c, x_out, 0, 2, 2));
  vd_op_shape n = {.ndim = 1, .d = {(x_out ? c->out_shape : c->in_shape)[0].d[0]}};
  VD_CHECK(want_shape(c, 0, x_out ? 0 : 1, &n));
  return x_out ? want_shape(c, 0, 1, &n) : want_shape(c, 1, 0, &n);
}
vd_rc vd_op_i_shape_pick(const vd_op_call *c) { return shape_pick_rule(c, 0); }
vd_rc vd_op_i_eval_pick(const vd_op_call *c) {
  int64_t n = c->in_shape[0].d[0], v = c->in_shape[0].d[1], start = aint(c, "start", 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t j = index_row(c->in[1][i], start, v);
    c->out[0][i] = j >= 0 ? c->in[0][i * v + j] : 0.0;
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_pick_backward(const vd_op_call *c) { return shape_pick_rule(c, 1); }
vd_rc vd_op_i_eval_pick_backward(const vd_op_call *c) {
  int64_t n = c->out_shape[0].d[0], v = c->out_shape[0].d[1], start = aint(c, "start", 0);
  memset(c->out[0], 0, sizeof(double) * (size_t)(n * v));
  for (int64_t i = 0; i < n; i++) {
    int64_t j = index_row(c->in[0][i], start, v);
    if (j >= 0) c->out[0][i * v + j] = c->in[1][i];
  }
  return VD_OK;
}
