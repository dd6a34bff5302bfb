/*
 * ops/ops_num_arith.c - evaluators and shape checks of the elementwise
 * arithmetic, reductions and their backward operators, and dropout; and
 * the real functions behind solver/'s uninterpreted symbols
 * (vd_op_symbol_value), written with these kernels.
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- arithmetic ---------------------------------------------------------- */

static vd_rc shape_binary(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  if (c->n_in == 1) {
    if (!ahas(c, "scalar")) return bad(c, "attrs.scalar", "expected a scalar operand with one input");
    return want_shape(c, 1, 0, &c->in_shape[0]);
  }
  if (c->n_in != 2) return bad(c, "inputs", "expected 1 or 2 inputs, got %u", c->n_in);
  const vd_op_shape *a = &c->in_shape[0], *b = &c->in_shape[1];
  vd_op_shape w = {.ndim = a->ndim > b->ndim ? a->ndim : b->ndim};
  for (int32_t i = 0; i < w.ndim; i++) {
    int32_t ia = i - (w.ndim - a->ndim), ib = i - (w.ndim - b->ndim);
    int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char sa[96], sb[96];
      shape_str(a, sa, sizeof(sa));
      shape_str(b, sb, sizeof(sb));
      return bad(c, "inputs[1]", "shapes %s and %s do not broadcast", sa, sb);
    }
    w.d[i] = da == 1 ? db : da;
  }
  return want_shape(c, 1, 0, &w);
}


vd_rc vd_op_i_shape_add(const vd_op_call *c) { return shape_binary(c); }
vd_rc vd_op_i_eval_add(const vd_op_call *c) { return binary(c, f_add); }
vd_rc vd_op_i_shape_sub(const vd_op_call *c) { return shape_binary(c); }
vd_rc vd_op_i_eval_sub(const vd_op_call *c) { return binary(c, f_sub); }
vd_rc vd_op_i_shape_mul(const vd_op_call *c) { return shape_binary(c); }
vd_rc vd_op_i_eval_mul(const vd_op_call *c) { return binary(c, f_mul); }
vd_rc vd_op_i_shape_div(const vd_op_call *c) { return shape_binary(c); }
vd_rc vd_op_i_eval_div(const vd_op_call *c) { return binary(c, f_div); }

static double u_neg(double x, double p) { (void)p; return -x; }
static double u_pow(double x, double p) { return pow(x, p); }
static double u_sqrt(double x, double p) { (void)p; return sqrt(x); }
static double u_rsqrt(double x, double p) { (void)p; return 1.0 / sqrt(x); }
static double u_exp(double x, double p) { (void)p; return exp(x); }
static double u_log(double x, double p) { (void)p; return log(x); }
static double u_sigmoid(double x, double p) { (void)p; return sigm(x); }
static double u_tanh(double x, double p) { (void)p; return tanh(x); }
static double u_silu(double x, double p) { (void)p; return silu_f(x); }
static double u_relu(double x, double p) { (void)p; return x > 0.0 ? x : 0.0; }
static double u_gelu(double x, double p) { (void)p; return gelu_f(x); }
static double u_gelu_tanh(double x, double p) { (void)p; return gelu_tanh_f(x); }
static double u_scale(double x, double p) { return x * p; }

vd_rc vd_op_i_shape_neg(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_neg(const vd_op_call *c) { return unary(c, u_neg, 0); }
vd_rc vd_op_i_shape_pow(const vd_op_call *c) {
  if (!ahas(c, "exponent")) return bad(c, "attrs.exponent", "missing");
  return shape_same1(c);
}
vd_rc vd_op_i_eval_pow(const vd_op_call *c) { return unary(c, u_pow, aflt(c, "exponent", 1.0)); }
vd_rc vd_op_i_shape_sqrt(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_sqrt(const vd_op_call *c) { return unary(c, u_sqrt, 0); }
vd_rc vd_op_i_shape_rsqrt(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_rsqrt(const vd_op_call *c) { return unary(c, u_rsqrt, 0); }
vd_rc vd_op_i_shape_exp(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_exp(const vd_op_call *c) { return unary(c, u_exp, 0); }
vd_rc vd_op_i_shape_log(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_log(const vd_op_call *c) { return unary(c, u_log, 0); }
vd_rc vd_op_i_shape_sigmoid(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_sigmoid(const vd_op_call *c) { return unary(c, u_sigmoid, 0); }
vd_rc vd_op_i_shape_tanh(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_tanh(const vd_op_call *c) { return unary(c, u_tanh, 0); }
vd_rc vd_op_i_shape_silu(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_silu(const vd_op_call *c) { return unary(c, u_silu, 0); }
vd_rc vd_op_i_shape_relu(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_relu(const vd_op_call *c) { return unary(c, u_relu, 0); }
vd_rc vd_op_i_shape_gelu(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_gelu(const vd_op_call *c) { return unary(c, aint(c, "tanh", 0) ? u_gelu_tanh : u_gelu, 0); }
vd_rc vd_op_i_shape_scale(const vd_op_call *c) {
  if (!ahas(c, "factor")) return bad(c, "attrs.factor", "missing");
  return shape_same1(c);
}
vd_rc vd_op_i_eval_scale(const vd_op_call *c) { return unary(c, u_scale, aflt(c, "factor", 1.0)); }

/* Reduced shape of x under mask/keepdim. */
static vd_op_shape reduced(const vd_op_shape *x, const int *mask, int keep) {
  vd_op_shape r = {.ndim = 0};
  for (int32_t i = 0; i < x->ndim; i++) {
    if (!mask[i])
      r.d[r.ndim++] = x->d[i];
    else if (keep)
      r.d[r.ndim++] = 1;
  }
  return r;
}
static int64_t reduced_index(const vd_op_shape *x, const int *mask, int keep, const vd_op_shape *r,
                             const int64_t *idx) {
  int64_t ridx[VD_MAX_DIMS];
  int32_t k = 0;
  for (int32_t i = 0; i < x->ndim; i++) {
    if (!mask[i])
      ridx[k++] = idx[i];
    else if (keep)
      ridx[k++] = 0;
  }
  return vd_op_shape_ravel(r, ridx);
}

/* Shape rule of sum/mean (x -> y) and of their backward (g -> gx): `full`
 * is the unreduced side. */
static vd_rc shape_reduce(const vd_op_call *c, int backward) {
  VD_CHECK(want_count(c, 1, 1));
  const vd_op_shape *full = backward ? &c->out_shape[0] : &c->in_shape[0];
  int mask[VD_MAX_DIMS];
  VD_CHECK(get_dims_mask(c, full->ndim, mask));
  vd_op_shape r = reduced(full, mask, aint(c, "keepdim", 0) != 0);
  /* A full reduction may be written as a scalar of shape [] or [1]. */
  if (r.ndim == 0 && vd_op_shape_numel(backward ? &c->in_shape[0] : &c->out_shape[0]) == 1) return VD_OK;
  return want_shape(c, !backward, 0, &r);
}
static vd_rc eval_reduce(const vd_op_call *c, int mean) {
  const vd_op_shape *x = &c->in_shape[0];
  int mask[VD_MAX_DIMS];
  VD_CHECK(get_dims_mask(c, x->ndim, mask));
  int keep = aint(c, "keepdim", 0) != 0;
  vd_op_shape r = reduced(x, mask, keep);
  int64_t n = vd_op_shape_numel(x), cnt = vd_op_shape_numel(x) / (vd_op_shape_numel(&r) ? vd_op_shape_numel(&r) : 1);
  int64_t idx[VD_MAX_DIMS];
  memset(c->out[0], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->out_shape[0]));
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(x, f, idx);
    c->out[0][reduced_index(x, mask, keep, &r, idx)] += c->in[0][f];
  }
  if (mean && cnt > 0) {
    double dv = (double)divisor(c, cnt);
    for (int64_t i = 0; i < vd_op_shape_numel(&c->out_shape[0]); i++) c->out[0][i] /= dv;
  }
  return VD_OK;
}
static vd_rc eval_reduce_bwd(const vd_op_call *c, int mean) {
  const vd_op_shape *x = &c->out_shape[0];
  int mask[VD_MAX_DIMS];
  VD_CHECK(get_dims_mask(c, x->ndim, mask));
  int keep = aint(c, "keepdim", 0) != 0;
  vd_op_shape r = reduced(x, mask, keep);
  int64_t n = vd_op_shape_numel(x), nr = vd_op_shape_numel(&r);
  double scale = mean ? (double)nr / (double)(n ? n : 1) : 1.0;
  if (mean && nr && divisor(c, n / nr) != n / nr) scale = 1.0 / (double)divisor(c, n / nr);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(x, f, idx);
    c->out[0][f] = scale * c->in[0][reduced_index(x, mask, keep, &r, idx)];
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_sum(const vd_op_call *c) { return shape_reduce(c, 0); }
vd_rc vd_op_i_eval_sum(const vd_op_call *c) { return eval_reduce(c, 0); }
vd_rc vd_op_i_shape_mean(const vd_op_call *c) { return shape_reduce(c, 0); }
vd_rc vd_op_i_eval_mean(const vd_op_call *c) { return eval_reduce(c, 1); }
/* max over dims: every output element starts at its first input element
 * (each output element has at least one: a reduced extent is >= 1). */
vd_rc vd_op_i_shape_max(const vd_op_call *c) { return shape_reduce(c, 0); }
vd_rc vd_op_i_eval_max(const vd_op_call *c) {
  const vd_op_shape *x = &c->in_shape[0];
  int mask[VD_MAX_DIMS];
  VD_CHECK(get_dims_mask(c, x->ndim, mask));
  int keep = aint(c, "keepdim", 0) != 0;
  vd_op_shape r = reduced(x, mask, keep);
  int64_t n = vd_op_shape_numel(x), nr = vd_op_shape_numel(&c->out_shape[0]), idx[VD_MAX_DIMS];
  for (int64_t i = 0; i < nr; i++) c->out[0][i] = -INFINITY;
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(x, f, idx);
    double *y = &c->out[0][reduced_index(x, mask, keep, &r, idx)];
    *y = fmax(*y, c->in[0][f]);
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_sum_backward(const vd_op_call *c) { return shape_reduce(c, 1); }
vd_rc vd_op_i_eval_sum_backward(const vd_op_call *c) { return eval_reduce_bwd(c, 0); }
vd_rc vd_op_i_shape_mean_backward(const vd_op_call *c) { return shape_reduce(c, 1); }
vd_rc vd_op_i_eval_mean_backward(const vd_op_call *c) { return eval_reduce_bwd(c, 1); }

vd_rc vd_op_i_shape_accumulate(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_bcast(c, &c->in_shape[1], &c->in_shape[0], "inputs[1]"));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_eval_accumulate(const vd_op_call *c) { return binary(c, f_add); }

/* add/sub backward: (g) -> ga (, gb), each g (or -g for sub's b) summed to shape. */
static vd_rc shape_addsub_bwd(const vd_op_call *c) {
  if (c->n_in != 1) return bad(c, "inputs", "expected 1 input, got %u", c->n_in);
  char f[32];
  for (uint32_t i = 0; i < c->n_out; i++)
    VD_CHECK(want_bcast(c, &c->out_shape[i], &c->in_shape[0], fname(f, sizeof(f), "outputs", i)));
  return VD_OK;
}
vd_rc vd_op_i_shape_add_backward(const vd_op_call *c) { return shape_addsub_bwd(c); }
vd_rc vd_op_i_eval_add_backward(const vd_op_call *c) {
  for (uint32_t i = 0; i < c->n_out; i++) sum_to(c->in[0], &c->in_shape[0], c->out[i], &c->out_shape[i], 1.0);
  return VD_OK;
}
vd_rc vd_op_i_shape_sub_backward(const vd_op_call *c) { return shape_addsub_bwd(c); }
vd_rc vd_op_i_eval_sub_backward(const vd_op_call *c) {
  for (uint32_t i = 0; i < c->n_out; i++)
    sum_to(c->in[0], &c->in_shape[0], c->out[i], &c->out_shape[i], i == 0 ? 1.0 : -1.0);
  return VD_OK;
}

/* mul/div backward: (a, b, g) -> ga, gb or (g) -> gx. */
static vd_rc shape_muldiv_bwd(const vd_op_call *c) {
  if (c->n_in == 1) {
    if (!ahas(c, "scalar")) return bad(c, "attrs.scalar", "expected a scalar operand with one input");
    return shape_same1(c);
  }
  VD_CHECK(want_count(c, 3, 2));
  const vd_op_shape *g = &c->in_shape[2];
  VD_CHECK(want_bcast(c, &c->in_shape[0], g, "inputs[0]"));
  VD_CHECK(want_bcast(c, &c->in_shape[1], g, "inputs[1]"));
  VD_CHECK(want_shape(c, 1, 0, &c->in_shape[0]));
  return want_shape(c, 1, 1, &c->in_shape[1]);
}
static vd_rc eval_muldiv_bwd(const vd_op_call *c, int div) {
  if (c->n_in == 1) {
    double s = aflt(c, "scalar", 1.0);
    int64_t n = vd_op_shape_numel(&c->out_shape[0]);
    for (int64_t i = 0; i < n; i++) c->out[0][i] = div ? c->in[0][i] / s : c->in[0][i] * s;
    return VD_OK;
  }
  const vd_op_shape *gs = &c->in_shape[2], *as = &c->in_shape[0], *bs = &c->in_shape[1];
  int64_t n = vd_op_shape_numel(gs), idx[VD_MAX_DIMS];
  memset(c->out[0], 0, sizeof(double) * (size_t)vd_op_shape_numel(as));
  memset(c->out[1], 0, sizeof(double) * (size_t)vd_op_shape_numel(bs));
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(gs, f, idx);
    int64_t ia = vd_op_bcast_src(gs, as, idx), ib = vd_op_bcast_src(gs, bs, idx);
    double a = c->in[0][ia], b = c->in[1][ib], g = c->in[2][f];
    if (div) {
      c->out[0][ia] += g / b;
      c->out[1][ib] += -g * a / (b * b);
    } else {
      c->out[0][ia] += g * b;
      c->out[1][ib] += g * a;
    }
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_mul_backward(const vd_op_call *c) { return shape_muldiv_bwd(c); }
vd_rc vd_op_i_eval_mul_backward(const vd_op_call *c) { return eval_muldiv_bwd(c, 0); }
vd_rc vd_op_i_shape_div_backward(const vd_op_call *c) { return shape_muldiv_bwd(c); }
vd_rc vd_op_i_eval_div_backward(const vd_op_call *c) { return eval_muldiv_bwd(c, 1); }

static double d_pow(double x, double p) { return p * pow(x, p - 1.0); }
static double d_sqrt(double x, double p) { (void)p; return 0.5 / sqrt(x); }
static double d_rsqrt(double x, double p) { (void)p; double r = 1.0 / sqrt(x); return -0.5 * r * r * r; }
static double d_exp(double x, double p) { (void)p; return exp(x); }
static double d_log(double x, double p) { (void)p; return 1.0 / x; }
static double d_sigmoid(double x, double p) { (void)p; double s = sigm(x); return s * (1.0 - s); }
static double d_tanh(double x, double p) { (void)p; double t = tanh(x); return 1.0 - t * t; }
static double d_silu(double x, double p) { (void)p; return silu_g(x); }
static double d_relu(double y, double p) { (void)p; return y > 0.0 ? 1.0 : 0.0; }
static double d_gelu(double x, double p) { (void)p; return gelu_g(x); }
static double d_gelu_tanh(double x, double p) { (void)p; return gelu_tanh_g(x); }

vd_rc vd_op_i_shape_neg_backward(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_neg_backward(const vd_op_call *c) { return unary(c, u_neg, 0); }
vd_rc vd_op_i_shape_scale_backward(const vd_op_call *c) { return vd_op_i_shape_scale(c); }
vd_rc vd_op_i_eval_scale_backward(const vd_op_call *c) { return unary(c, u_scale, aflt(c, "factor", 1.0)); }
vd_rc vd_op_i_shape_pow_backward(const vd_op_call *c) {
  if (!ahas(c, "exponent")) return bad(c, "attrs.exponent", "missing");
  return shape_same2(c);
}
vd_rc vd_op_i_eval_pow_backward(const vd_op_call *c) { return unary_bwd(c, d_pow, aflt(c, "exponent", 1.0)); }
vd_rc vd_op_i_shape_sqrt_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_sqrt_backward(const vd_op_call *c) { return unary_bwd(c, d_sqrt, 0); }
vd_rc vd_op_i_shape_rsqrt_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_rsqrt_backward(const vd_op_call *c) { return unary_bwd(c, d_rsqrt, 0); }
vd_rc vd_op_i_shape_exp_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_exp_backward(const vd_op_call *c) { return unary_bwd(c, d_exp, 0); }
vd_rc vd_op_i_shape_log_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_log_backward(const vd_op_call *c) { return unary_bwd(c, d_log, 0); }
vd_rc vd_op_i_shape_sigmoid_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_sigmoid_backward(const vd_op_call *c) { return unary_bwd(c, d_sigmoid, 0); }
vd_rc vd_op_i_shape_tanh_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_tanh_backward(const vd_op_call *c) { return unary_bwd(c, d_tanh, 0); }
vd_rc vd_op_i_shape_relu_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_relu_backward(const vd_op_call *c) { return unary_bwd(c, d_relu, 0); }
vd_rc vd_op_i_shape_silu_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_silu_backward(const vd_op_call *c) { return unary_bwd(c, d_silu, 0); }
vd_rc vd_op_i_shape_gelu_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_gelu_backward(const vd_op_call *c) { return unary_bwd(c, aint(c, "tanh", 0) ? d_gelu_tanh : d_gelu, 0); }

/* ---- dropout ----------------------------------------------------------------
 *
 * y = x * m(x), gx = g * m(x): the mask is modelled as a deterministic
 * function of the element's value (docs/operators.md, "Dropout").  The
 * symbolic side leaves m uninterpreted (smt_encode_arith.c); here m needs SOME
 * concrete value, and this is a SURROGATE, not torch's Bernoulli mask:
 * m(x) = (1 + 0.5 sin(3x)) / (1 - p), smooth so that the rounding
 * differences between two plans' evaluation orders move it only by
 * rounding, never flip it the way a threshold would; 0 when p >= 1.
 * Identity (m = 1) when p == 0 or `training` is false. */

/* 1 when the dropout of this node is active (vd_op_dropout_active). */
static int dropout_on(const vd_op_call *c, double *p) { return vd_op_dropout_active(c->plan, c->node, p); }

/* The numeric surrogate of the shared mask symbol dropout_mask(x, p); also
 * the symbol's meaning for the encoders (vd_op_symbol_value). */
static double dropout_mask_f(double x, double p) { return p >= 1 ? 0.0 : (1.0 + 0.5 * sin(3.0 * x)) / (1.0 - p); }
static double u_dropout(double x, double p) { return x * dropout_mask_f(x, p); }

vd_rc vd_op_i_shape_dropout(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_dropout(const vd_op_call *c) {
  double p;
  if (!dropout_on(c, &p)) {
    copy0(c);
    return VD_OK;
  }
  return unary(c, u_dropout, p);
}
/* (x, y, g) -> gx; y (the forward output) is not read. */
vd_rc vd_op_i_shape_dropout_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 3, 1));
  VD_CHECK(want_shape(c, 0, 1, &c->in_shape[0]));
  VD_CHECK(want_shape(c, 0, 2, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_eval_dropout_backward(const vd_op_call *c) {
  double p;
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  int on = dropout_on(c, &p);
  for (int64_t i = 0; i < n; i++) c->out[0][i] = on ? c->in[2][i] * dropout_mask_f(c->in[0][i], p) : c->in[2][i];
  return VD_OK;
}

/* ---- the real functions behind the encoders' symbols ------------------------
 *
 * solver/'s encoders leave transcendental kernels uninterpreted: a term
 * exp(x) is the application of a symbol "exp".  vd_op_symbol_value says
 * what each symbol means, with the same functions the evaluators above
 * use, so the registry's numeric semantics are written once. */

typedef struct {
  const char *name;
  double (*f)(double x, double p); /* p unused */
} sym1_t;

static double s_cos(double x, double p) { (void)p; return cos(x); }
static double s_sin(double x, double p) { (void)p; return sin(x); }

static const sym1_t sym1[] = {
    {"exp", u_exp},         {"log", u_log},   {"sqrt", u_sqrt},     {"rsqrt", u_rsqrt},
    {"sigmoid", u_sigmoid}, {"tanh", u_tanh}, {"rot_cos", s_cos},   {"rot_sin", s_sin},
    {"gelu", u_gelu},       {"gelu_grad", d_gelu},    {"relu", u_relu},     {"relu_grad", d_relu},
    {"gelu_tanh", u_gelu_tanh}, {"gelu_tanh_grad", d_gelu_tanh},
};

int vd_op_symbol_value(const char *name, size_t n, const double *a, double *out) {
  if (n == 1)
    for (size_t i = 0; i < sizeof(sym1) / sizeof(sym1[0]); i++)
      if (!strcmp(name, sym1[i].name)) {
        *out = sym1[i].f(a[0], 0.0);
        return 1;
      }
  if (n == 2 && !strcmp(name, "pow")) {
    *out = u_pow(a[0], a[1]);
    return 1;
  }
  if (n == 2 && !strcmp(name, "dropout_mask")) {
    *out = dropout_mask_f(a[0], a[1]);
    return 1;
  }
  if (n == 2 && !strcmp(name, "clip_coef")) {
    *out = clip_coef_f(a[0], a[1]);
    return 1;
  }
  if (n == 4 && (!strcmp(name, "rope_cos") || !strcmp(name, "rope_sin"))) {
    double ang = rope_angle(a[0], a[1], a[2], a[3]);
    *out = name[5] == 'c' ? cos(ang) : sin(ang);
    return 1;
  }
  /* topk_gate.k<K>.j<J>(row of e logits) = gate J; the backward symbol
   * takes the row and the gate gradients (2e arguments). */
  long long k, j;
  int bwd = 0;
  if (sscanf(name, "topk_gate.k%lld.j%lld", &k, &j) == 2)
    bwd = 0;
  else if (sscanf(name, "topk_gate_backward.k%lld.j%lld", &k, &j) == 2)
    bwd = 1;
  else
    return 0;
  int64_t e = bwd ? (int64_t)n / 2 : (int64_t)n;
  if (e < 1 || e > VD_LIM_TOPK_EXPERTS_MAX || k < 1 || k > e || j < 0 || j >= e || (bwd && n % 2)) return 0;
  unsigned char sel[VD_LIM_TOPK_EXPERTS_MAX];
  double p[VD_LIM_TOPK_EXPERTS_MAX];
  topk_row(a, e, k, sel, p);
  if (!bwd) {
    *out = p[j];
    return 1;
  }
  double dot = 0;
  for (int64_t i = 0; i < e; i++) dot += a[e + i] * p[i];
  *out = sel[j] ? p[j] * (a[e + j] - dot) : 0.0;
  return 1;
}
