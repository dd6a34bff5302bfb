/*
 * solver/smt_encode_arith.c - the symbolic encoders of the arithmetic
 * operators (elementwise, reductions and their backward), linear algebra
 * (matmul, linear), lookups by index (embedding, pick) and the optimizer
 * and clipping rows.  Transcendental kernels are uninterpreted symbols
 * (smt.h); shared helpers and ENC are in smt_encode_int.h, the
 * representation choices in smt_encode.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smt_encode_int.h"

/* ---- arithmetic ---------------------------------------------------------- */

ENC(add) { return binary(c, s, vd_smt_add); }
ENC(sub) { return binary(c, s, vd_smt_sub); }
ENC(mul) { return binary(c, s, vd_smt_mul); }
ENC(div) { return binary(c, s, vd_smt_div); }
ENC(accumulate) { return binary(c, s, vd_smt_add); }

ENC(neg) {
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = vd_smt_neg(s, IN(0)->t[i]);
  return VD_OK;
}
ENC(neg_backward) { return body_neg(c, s); }

static vd_rc scale_by(call_t *c, vd_smt *s, vd_term k) {
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = vd_smt_mul(s, k, IN(0)->t[i]);
  return VD_OK;
}
ENC(scale) { return scale_by(c, s, D(s, aflt(c, "factor", 1.0))); }
ENC(scale_backward) { return scale_by(c, s, D(s, aflt(c, "factor", 1.0))); }

/* An exponent is expanded as a polynomial when it is an integer of modest
 * size; otherwise pow is the binary symbol pow(x, e). */
static int int_exponent(double e, int64_t *k) {
  if (!(fabs(e) <= 64) || floor(e) != e) return 0;
  *k = (int64_t)e;
  return 1;
}

static vd_term pow_term(vd_smt *s, vd_term x, double e) {
  int64_t k;
  if (int_exponent(e, &k)) return vd_smt_pow_int(s, x, k);
  vd_term a[2] = {x, D(s, e)};
  return vd_smt_uf(s, "pow", 2, a);
}

ENC(pow) {
  double e = aflt(c, "exponent", 1.0);
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = pow_term(s, IN(0)->t[i], e);
  return VD_OK;
}

ENC(pow_backward) {
  double e = aflt(c, "exponent", 1.0);
  vd_term ke = D(s, e);
  for (int64_t i = 0; i < OUT(0)->numel; i++) {
    vd_term d = e == 0 ? I(s, 0) : vd_smt_mul(s, ke, pow_term(s, IN(0)->t[i], e - 1.0));
    OUT(0)->t[i] = vd_smt_mul(s, IN(1)->t[i], d);
  }
  return VD_OK;
}

static vd_rc unary_uf(call_t *c, vd_smt *s, const char *name) {
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = uf1(s, name, IN(0)->t[i]);
  return VD_OK;
}
ENC(sqrt) { return unary_uf(c, s, "sqrt"); }
ENC(rsqrt) { return unary_uf(c, s, "rsqrt"); }
ENC(exp) { return unary_uf(c, s, "exp"); }
ENC(log) { return unary_uf(c, s, "log"); }
ENC(sigmoid) { return unary_uf(c, s, "sigmoid"); }
ENC(relu) { return unary_uf(c, s, "relu"); }
ENC(tanh) { return unary_uf(c, s, "tanh"); }
/* the exact and the tanh forms are two functions (attribute tanh) */
ENC(gelu) { return unary_uf(c, s, aint(c, "tanh", 0) ? "gelu_tanh" : "gelu"); }

ENC(silu) {
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = silu_t(s, IN(0)->t[i]);
  return VD_OK;
}

/* Backward of an elementwise kernel: gx = g * d(x). */
typedef vd_term (*deriv_fn)(vd_smt *s, vd_term x);
static vd_rc unary_bwd(call_t *c, vd_smt *s, deriv_fn d) {
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = vd_smt_mul(s, IN(1)->t[i], d(s, IN(0)->t[i]));
  return VD_OK;
}
/* sqrt' = 1 / (2 sqrt(x)) */
static vd_term d_sqrt(vd_smt *s, vd_term x) { return vd_smt_div(s, I(s, 1), vd_smt_mul(s, I(s, 2), uf1(s, "sqrt", x))); }
/* rsqrt' = -1/2 rsqrt(x)^3 */
static vd_term d_rsqrt(vd_smt *s, vd_term x) {
  return vd_smt_mul(s, vd_smt_num_rat(s, "-1/2"), vd_smt_pow_int(s, uf1(s, "rsqrt", x), 3));
}
static vd_term d_exp(vd_smt *s, vd_term x) { return uf1(s, "exp", x); }
static vd_term d_log(vd_smt *s, vd_term x) { return vd_smt_div(s, I(s, 1), x); }
static vd_term d_sigmoid(vd_smt *s, vd_term x) {
  vd_term sg = uf1(s, "sigmoid", x);
  return vd_smt_mul(s, sg, vd_smt_sub(s, I(s, 1), sg));
}
static vd_term d_tanh(vd_smt *s, vd_term x) {
  vd_term t = uf1(s, "tanh", x);
  return vd_smt_sub(s, I(s, 1), vd_smt_mul(s, t, t));
}
static vd_term d_gelu(vd_smt *s, vd_term x) { return uf1(s, "gelu_grad", x); }
/* of relu's output y: the step y > 0, uninterpreted like the function */
static vd_term d_relu(vd_smt *s, vd_term y) { return uf1(s, "relu_grad", y); }
static vd_term d_gelu_tanh(vd_smt *s, vd_term x) { return uf1(s, "gelu_tanh_grad", x); }

ENC(sqrt_backward) { return unary_bwd(c, s, d_sqrt); }
ENC(rsqrt_backward) { return unary_bwd(c, s, d_rsqrt); }
ENC(exp_backward) { return unary_bwd(c, s, d_exp); }
ENC(log_backward) { return unary_bwd(c, s, d_log); }
ENC(sigmoid_backward) { return unary_bwd(c, s, d_sigmoid); }
ENC(tanh_backward) { return unary_bwd(c, s, d_tanh); }
ENC(silu_backward) { return unary_bwd(c, s, silu_grad_t); }
ENC(relu_backward) { return unary_bwd(c, s, d_relu); }
ENC(gelu_backward) { return unary_bwd(c, s, aint(c, "tanh", 0) ? d_gelu_tanh : d_gelu); }

/* Dropout: y = x * m(x), gx = g * m(x), m = dropout_mask(x, p), one binary
 * symbol shared by both graphs and by forward and backward (so the masks of
 * a dropout and of its backward agree).  SOUNDNESS: this abstracts the
 * random mask as a deterministic function of the element's VALUE (and p):
 * it assumes the same element gets the same mask in both plans (true when
 * the parallel plan reproduces the single plan's RNG stream per element,
 * which is what comparing two dropout runs at all presupposes); a mask's
 * dependence on the element's POSITION is abstracted to dependence on its
 * value, so two equal values at different positions get the same mask
 * symbol (a plan that moves an element to a different position before the
 * dropout is still caught as long as the values there differ, which the
 * solver may choose).  p is an argument, so dropouts of different rates
 * never share a mask.  Identity when p == 0 or training is false (the
 * same test as ops_num_arith.c's dropout_on). */
static int dropout_on_t(call_t *c, double *p) { return vd_op_dropout_active(c->plan, c->node, p); }
static vd_term dropout_mask_t(vd_smt *s, vd_term x, double p) {
  vd_term a[2] = {x, D(s, p)};
  return vd_smt_uf(s, "dropout_mask", 2, a);
}
ENC(dropout) {
  double p;
  if (!dropout_on_t(c, &p)) return copy_into(IN(0), OUT(0));
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = vd_smt_mul(s, IN(0)->t[i], dropout_mask_t(s, IN(0)->t[i], p));
  return VD_OK;
}
/* (x, y, g) -> gx; y is not read. */
ENC(dropout_backward) {
  double p;
  if (!dropout_on_t(c, &p)) return copy_into(IN(2), OUT(0));
  for (int64_t i = 0; i < OUT(0)->numel; i++) OUT(0)->t[i] = vd_smt_mul(s, IN(2)->t[i], dropout_mask_t(s, IN(0)->t[i], p));
  return VD_OK;
}

/* Reductions: the reduced index of x-index idx (as ops/ops_num_arith.c). */
static int64_t reduced_index(const vd_op_shape *x, const int *mask, int keep, const int64_t *idx) {
  int64_t f = 0;
  for (int32_t i = 0; i < x->ndim; i++) {
    if (!mask[i])
      f = f * x->d[i] + idx[i];
    /* keepdim: a size-1 dimension contributes index 0 */
  }
  (void)keep;
  return f;
}

static vd_rc reduce(call_t *c, vd_smt *s, int mean) {
  const vd_smt_tensor *x = IN(0);
  vd_smt_tensor *y = OUT(0);
  int mask[VD_MAX_DIMS];
  int keep = reduced_dims(c, x->shape.ndim, mask);
  acc_t a;
  int64_t cnt = y->numel ? x->numel / y->numel : 0;
  VD_CHECK(acc_init(&a, y->numel, cnt, c->diag));
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < x->numel; f++) {
    vd_op_shape_unravel(&x->shape, f, idx);
    acc_add(&a, reduced_index(&x->shape, mask, keep, idx), x->t[f]);
  }
  acc_done(s, &a, y, onto_scale(s, full_in(c, 0), full_out(c, 0), cnt));
  if (mean && cnt > 0) {
    vd_term n = I(s, divisor(c, cnt));
    for (int64_t i = 0; i < y->numel; i++) y->t[i] = vd_smt_div(s, y->t[i], n);
  }
  return VD_OK;
}
/* max over dims: max(max(x0, x1), x2)... in input order (ite, interpreted:
 * no COUNT scaling, a max of repeated terms is the term). */
ENC(max) {
  const vd_smt_tensor *x = IN(0);
  vd_smt_tensor *y = OUT(0);
  int mask[VD_MAX_DIMS];
  int keep = reduced_dims(c, x->shape.ndim, mask);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t i = 0; i < y->numel; i++) y->t[i] = NULL;
  for (int64_t f = 0; f < x->numel; f++) {
    vd_op_shape_unravel(&x->shape, f, idx);
    int64_t r = reduced_index(&x->shape, mask, keep, idx);
    if (r < 0 || r >= y->numel) continue;
    y->t[r] = y->t[r] ? vd_smt_max(s, y->t[r], x->t[f]) : x->t[f];
  }
  return VD_OK;
}
ENC(sum) { return reduce(c, s, 0); }
ENC(mean) { return reduce(c, s, 1); }

static vd_rc reduce_bwd(call_t *c, vd_smt *s, int mean) {
  const vd_smt_tensor *g = IN(0);
  vd_smt_tensor *gx = OUT(0);
  int mask[VD_MAX_DIMS];
  int keep = reduced_dims(c, gx->shape.ndim, mask);
  int64_t nr = g->numel, n = gx->numel;
  vd_term k = mean ? vd_smt_div(s, I(s, nr), I(s, n ? n : 1)) : NULL;
  if (mean && nr && divisor(c, n / nr) != n / nr) k = vd_smt_div(s, I(s, 1), I(s, divisor(c, n / nr)));
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(&gx->shape, f, idx);
    vd_term t = g->t[reduced_index(&gx->shape, mask, keep, idx)];
    gx->t[f] = k ? vd_smt_mul(s, k, t) : t;
  }
  return VD_OK;
}
ENC(sum_backward) { return reduce_bwd(c, s, 0); }
ENC(mean_backward) { return reduce_bwd(c, s, 1); }

ENC(add_backward) {
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(sum_to(s, c, i, NULL));
  return VD_OK;
}
ENC(sub_backward) {
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(sum_to(s, c, i, i == 0 ? NULL : I(s, -1)));
  return VD_OK;
}

static vd_rc muldiv_bwd(call_t *c, vd_smt *s, int div) {
  if (c->n_in == 1) {
    vd_term k = D(s, aflt(c, "scalar", 1.0));
    for (int64_t i = 0; i < OUT(0)->numel; i++)
      OUT(0)->t[i] = div ? vd_smt_div(s, IN(0)->t[i], k) : vd_smt_mul(s, IN(0)->t[i], k);
    return VD_OK;
  }
  const vd_smt_tensor *A = IN(0), *B = IN(1), *G = IN(2);
  acc_t ga, gb;
  VD_CHECK(acc_init(&ga, A->numel, A->numel ? G->numel / A->numel : 1, c->diag));
  vd_rc rc = acc_init(&gb, B->numel, B->numel ? G->numel / B->numel : 1, c->diag);
  if (rc != VD_OK) {
    acc_drop(&ga);
    return rc;
  }
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < G->numel; f++) {
    vd_op_shape_unravel(&G->shape, f, idx);
    int64_t ia = vd_op_bcast_src(&G->shape, &A->shape, idx), ib = vd_op_bcast_src(&G->shape, &B->shape, idx);
    vd_term a = A->t[ia], b = B->t[ib], g = G->t[f];
    if (div) {
      acc_add(&ga, ia, vd_smt_div(s, g, b));
      acc_add(&gb, ib, vd_smt_neg(s, vd_smt_div(s, vd_smt_mul(s, g, a), vd_smt_mul(s, b, b))));
    } else {
      acc_add(&ga, ia, vd_smt_mul(s, g, b));
      acc_add(&gb, ib, vd_smt_mul(s, g, a));
    }
  }
  acc_done(s, &ga, OUT(0), onto_scale(s, full_in(c, 2), full_in(c, 0), ratio_of(G->numel, A->numel)));
  acc_done(s, &gb, OUT(1), onto_scale(s, full_in(c, 2), full_in(c, 1), ratio_of(G->numel, B->numel)));
  return VD_OK;
}
ENC(mul_backward) { return muldiv_bwd(c, s, 0); }
ENC(div_backward) { return muldiv_bwd(c, s, 1); }

/* ---- linear algebra ------------------------------------------------------ */

ENC(matmul) {
  vd_op_mm_geo g = vd_op_mm_geometry(&IN(0)->shape, &IN(1)->shape, &OUT(0)->shape);
  vd_op_mm_geo fg = vd_op_mm_geometry(full_in(c, 0), full_in(c, 1), full_out(c, 0));
  vd_term k = vd_smt_count_scale(s, fg.k, g.k);
  vd_term *prod = vd_malloc(sizeof(vd_term) * (size_t)(g.k + 1));
  if (!prod) return VD_OOM(c->diag);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t t = 0; t < g.nbatch; t++) {
    vd_op_shape_unravel(&g.ob, t, idx);
    vd_term *A = IN(0)->t + vd_op_bcast_src(&g.ob, &g.ab, idx) * g.m * g.k;
    vd_term *B = IN(1)->t + vd_op_bcast_src(&g.ob, &g.bb, idx) * g.k * g.n;
    vd_term *Y = OUT(0)->t + t * g.m * g.n;
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++) {
        for (int64_t l = 0; l < g.k; l++) prod[l] = vd_smt_mul(s, A[i * g.k + l], B[l * g.n + j]);
        Y[i * g.n + j] = vd_smt_csum(s, k, (size_t)g.k, prod);
      }
  }
  vd_free(prod);
  return VD_OK;
}

ENC(matmul_backward) {
  vd_op_mm_geo g = vd_op_mm_geometry(&IN(0)->shape, &IN(1)->shape, &IN(2)->shape);
  acc_t ga, gb;
  /* per element of A: n terms per output batch mapped onto it; of B: m. */
  VD_CHECK(acc_init(&ga, IN(0)->numel, g.nbatch * g.n, c->diag));
  vd_rc rc = acc_init(&gb, IN(1)->numel, g.nbatch * g.m, c->diag);
  if (rc != VD_OK) {
    acc_drop(&ga);
    return rc;
  }
  int64_t idx[VD_MAX_DIMS];
  for (int64_t t = 0; t < g.nbatch; t++) {
    vd_op_shape_unravel(&g.ob, t, idx);
    int64_t oa = vd_op_bcast_src(&g.ob, &g.ab, idx) * g.m * g.k, ob = vd_op_bcast_src(&g.ob, &g.bb, idx) * g.k * g.n;
    vd_term *A = IN(0)->t + oa, *B = IN(1)->t + ob, *G = IN(2)->t + t * g.m * g.n;
    for (int64_t i = 0; i < g.m; i++)
      for (int64_t j = 0; j < g.n; j++) {
        vd_term gv = G[i * g.n + j];
        for (int64_t l = 0; l < g.k; l++) {
          acc_add(&ga, oa + i * g.k + l, vd_smt_mul(s, gv, B[l * g.n + j]));
          acc_add(&gb, ob + l * g.n + j, vd_smt_mul(s, A[i * g.k + l], gv));
        }
      }
  }
  /* terms per element of A: n per output batch element mapped onto it */
  vd_op_mm_geo fg = vd_op_mm_geometry(full_in(c, 0), full_in(c, 1), full_in(c, 2));
  int64_t fa = ratio_of(vd_op_shape_numel(full_in(c, 2)) * fg.k, vd_op_shape_numel(full_in(c, 0)));
  int64_t fb = ratio_of(vd_op_shape_numel(full_in(c, 2)) * fg.k, vd_op_shape_numel(full_in(c, 1)));
  int64_t ra = ratio_of(IN(2)->numel * g.k, IN(0)->numel), rb = ratio_of(IN(2)->numel * g.k, IN(1)->numel);
  acc_done(s, &ga, OUT(0), vd_smt_count_scale(s, fa, ra));
  acc_done(s, &gb, OUT(1), vd_smt_count_scale(s, fb, rb));
  return VD_OK;
}

ENC(linear) {
  int64_t in = IN(1)->shape.d[1], out = IN(1)->shape.d[0];
  int64_t rows = out ? OUT(0)->numel / out : 0;
  vd_term k = vd_smt_count_scale(s, full_in(c, 1)->d[1], in);
  vd_term *prod = vd_malloc(sizeof(vd_term) * (size_t)(in + 2));
  if (!prod) return VD_OOM(c->diag);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t o = 0; o < out; o++) {
      for (int64_t i = 0; i < in; i++) prod[i] = vd_smt_mul(s, IN(0)->t[r * in + i], IN(1)->t[o * in + i]);
      vd_term y = vd_smt_csum(s, k, (size_t)in, prod);
      OUT(0)->t[r * out + o] = c->n_in == 3 ? vd_smt_add(s, IN(2)->t[o], y) : y;
    }
  vd_free(prod);
  return VD_OK;
}

ENC(linear_backward) {
  int64_t in = IN(1)->shape.d[1], out = IN(1)->shape.d[0];
  int64_t rows = out ? IN(2)->numel / out : 0;
  const vd_smt_tensor *X = IN(0), *W = IN(1), *G = IN(2);
  int64_t fout = full_in(c, 1)->d[0];
  vd_term kout = vd_smt_count_scale(s, fout, out);
  vd_term krows = vd_smt_count_scale(s, ratio_of(vd_op_shape_numel(full_in(c, 2)), fout), rows);
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(in + out + rows + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < in; i++) {
      for (int64_t o = 0; o < out; o++) buf[o] = vd_smt_mul(s, G->t[r * out + o], W->t[o * in + i]);
      OUT(0)->t[r * in + i] = vd_smt_csum(s, kout, (size_t)out, buf);
    }
  for (int64_t o = 0; o < out; o++)
    for (int64_t i = 0; i < in; i++) {
      for (int64_t r = 0; r < rows; r++) buf[r] = vd_smt_mul(s, G->t[r * out + o], X->t[r * in + i]);
      OUT(1)->t[o * in + i] = vd_smt_csum(s, krows, (size_t)rows, buf);
    }
  if (c->n_out == 3)
    for (int64_t o = 0; o < out; o++) {
      for (int64_t r = 0; r < rows; r++) buf[r] = G->t[r * out + o];
      OUT(2)->t[o] = vd_smt_csum(s, krows, (size_t)rows, buf);
    }
  vd_free(buf);
  return VD_OK;
}

/* ---- lookups by index (embedding, pick) ---------------------------------- */

/* ite(id = start+0, v(0), ite(id = start+1, v(1), ... 0)) over rows. */
static vd_term lookup(vd_smt *s, vd_term id, int64_t start, int64_t rows, const vd_term *col, int64_t stride) {
  vd_term acc = I(s, 0);
  for (int64_t r = rows - 1; r >= 0; r--)
    acc = vd_smt_ite(s, vd_smt_eq(s, id, idx_num(s, id, start + r)), col[r * stride], acc);
  return acc;
}

ENC(embedding) {
  int64_t rows = IN(1)->shape.d[0], h = IN(1)->shape.d[1], start = aint(c, "start", 0);
  for (int64_t p = 0; p < IN(0)->numel; p++)
    for (int64_t j = 0; j < h; j++) OUT(0)->t[p * h + j] = lookup(s, IN(0)->t[p], start, rows, IN(1)->t + j, h);
  return VD_OK;
}

ENC(embedding_backward) {
  int64_t rows = OUT(0)->shape.d[0], h = OUT(0)->shape.d[1], start = aint(c, "start", 0);
  int64_t n = IN(0)->numel;
  vd_term k = vd_smt_count_scale(s, vd_op_shape_numel(full_in(c, 0)), n);
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(n + 1));
  if (!buf) return VD_OOM(c->diag);
  vd_term zero = I(s, 0);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < h; j++) {
      for (int64_t p = 0; p < n; p++) {
        vd_term id = IN(0)->t[p];
        buf[p] = vd_smt_ite(s, vd_smt_eq(s, id, idx_num(s, id, start + r)), IN(1)->t[p * h + j], zero);
      }
      OUT(0)->t[r * h + j] = vd_smt_csum(s, k, (size_t)n, buf);
    }
  vd_free(buf);
  return VD_OK;
}

/* A checked pick's labels are in [start, start + v): the program fails on
 * any other (nll_loss), so the stage may assume it (smt.h, index facts). */
static void note_checked_labels(call_t *c, vd_smt *s, const vd_smt_tensor *labels, int64_t start,
                                int64_t v) {
  if (!aint(c, "checked", 0)) return;
  for (int64_t i = 0; i < labels->numel; i++) vd_smt_note_index_range(s, labels->t[i], start, start + v);
}

ENC(pick) {
  int64_t n = IN(0)->shape.d[0], v = IN(0)->shape.d[1], start = aint(c, "start", 0);
  note_checked_labels(c, s, IN(1), start, v);
  for (int64_t i = 0; i < n; i++) OUT(0)->t[i] = lookup(s, IN(1)->t[i], start, v, IN(0)->t + i * v, 1);
  return VD_OK;
}

/* Reduced (v of V classes), the label's column carries g * v/V: the block
 * average of the full-size one-hot, whose reduced sum over the classes
 * (times V/v, COUNT) is g as at full size.  Sound only where every use is
 * affine in the one-hot: stages/shape.c (onehot_nonaffine) keeps the
 * classes whole otherwise, and then v == V (docs/shape-reduction.md, ONEHOT). */
ENC(pick_backward) {
  int64_t n = OUT(0)->shape.d[0], v = OUT(0)->shape.d[1], start = aint(c, "start", 0);
  vd_term zero = I(s, 0);
  vd_term k = vd_smt_count_scale(s, v, full_out(c, 0)->d[1]);
  note_checked_labels(c, s, IN(0), start, v);
  for (int64_t i = 0; i < n; i++) {
    vd_term gi = k ? vd_smt_mul(s, k, IN(1)->t[i]) : IN(1)->t[i];
    for (int64_t j = 0; j < v; j++) {
      vd_term lab = IN(0)->t[i];
      OUT(0)->t[i * v + j] = vd_smt_ite(s, vd_smt_eq(s, lab, idx_num(s, lab, start + j)), gi, zero);
    }
  }
  return VD_OK;
}

/* ---- optimizer and clipping ---------------------------------------------- */

ENC(sumsq) {
  vd_term *sq = vd_malloc(sizeof(vd_term) * (size_t)(IN(0)->numel + 1));
  if (!sq) return VD_OOM(c->diag);
  for (int64_t i = 0; i < IN(0)->numel; i++) sq[i] = vd_smt_mul(s, IN(0)->t[i], IN(0)->t[i]);
  OUT(0)->t[0] = vd_smt_csum(s, vd_smt_count_scale(s, vd_op_shape_numel(full_in(c, 0)), IN(0)->numel), (size_t)IN(0)->numel, sq);
  vd_free(sq);
  return VD_OK;
}

ENC(clip_coef) {
  vd_term a[2] = {IN(0)->t[0], D(s, aflt(c, "max_norm", 1.0))};
  OUT(0)->t[0] = vd_smt_uf(s, "clip_coef", 2, a);
  return VD_OK;
}

ENC(sgd_step) {
  vd_term lr = D(s, aflt(c, "lr", 1e-3)), wd = D(s, aflt(c, "weight_decay", 0.0));
  for (int64_t i = 0; i < OUT(0)->numel; i++) {
    vd_term w = IN(0)->t[i];
    OUT(0)->t[i] = vd_smt_sub(s, w, vd_smt_mul(s, lr, vd_smt_add(s, IN(1)->t[i], vd_smt_mul(s, wd, w))));
  }
  return VD_OK;
}

ENC(adam_step) {
  double b1 = aflt(c, "beta1", 0.9), b2 = aflt(c, "beta2", 0.999);
  double step = (double)aint(c, "step", 1);
  vd_term lr = D(s, aflt(c, "lr", 1e-3)), eps = D(s, aflt(c, "eps", 1e-8)), wd = D(s, aflt(c, "weight_decay", 0.0));
  vd_term B1 = D(s, b1), B2 = D(s, b2), one = I(s, 1);
  vd_term nb1 = vd_smt_sub(s, one, B1), nb2 = vd_smt_sub(s, one, B2);
  /* Bias corrections as the framework computes them (in double), exactly. */
  vd_term c1 = D(s, 1.0 - pow(b1, step)), c2 = D(s, 1.0 - pow(b2, step));
  for (int64_t i = 0; i < OUT(0)->numel; i++) {
    vd_term w = IN(0)->t[i], g = IN(1)->t[i];
    vd_term m = vd_smt_add(s, vd_smt_mul(s, B1, IN(2)->t[i]), vd_smt_mul(s, nb1, g));
    vd_term v = vd_smt_add(s, vd_smt_mul(s, B2, IN(3)->t[i]), vd_smt_mul(s, nb2, vd_smt_mul(s, g, g)));
    vd_term den = vd_smt_add(s, uf1(s, "sqrt", vd_smt_div(s, v, c2)), eps);
    vd_term upd = vd_smt_div(s, vd_smt_mul(s, lr, vd_smt_div(s, m, c1)), den);
    vd_term f[3] = {lr, wd, w};
    OUT(0)->t[i] = vd_smt_sub(s, vd_smt_sub(s, w, upd), vd_smt_prod(s, 3, f));
    OUT(1)->t[i] = m;
    OUT(2)->t[i] = v;
  }
  return VD_OK;
}
