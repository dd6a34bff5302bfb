/*
 * solver/smt_encode.c - the symbolic encoders of every operator of
 * docs/operators.md, keyed by vd_op_id (ops/ops.h), forward and
 * backward, plus the collectives applied to a merged instance.
 *
 * Each encoder computes, over tensors of terms, exactly what the numeric
 * evaluator of ops/ops_num_*.c computes over doubles (the test
 * tests/solver/test_smt_encode.c checks that on random inputs), with these
 * representation choices:
 *  - linear and polynomial operators are interpreted (add .. matmul, sums,
 *    integer powers, real division);
 *  - transcendental kernels are uninterpreted function symbols (the names
 *    are listed with vd_smt_uf_value in smt.h), shared by both graphs of a
 *    context.  Composite kernels are written out over them: silu =
 *    x * sigmoid(x), softmax = exp(x) / sum(exp(x)) (the numeric max-shift
 *    cancels on reals), norms over rsqrt, Adam over sqrt;
 *  - a routing decision (topk_gate) is one function symbol per output
 *    element of a row, taking the whole row: the routing may depend on every
 *    logit, and nothing else is assumed;
 *  - index inputs (embedding ids, pick labels) are Int terms or numerals;
 *    a lookup is an ite chain over the rows this tensor holds (start ..
 *    start+rows-1), 0 outside, so vocab-parallel shards need no special
 *    case;
 *  - attribute constants become exact rationals of their doubles; constants
 *    that the numeric side computes in double from attributes (Adam's bias
 *    corrections) are computed the same way and then converted exactly.
 * Any change here that can change a verdict bumps VD_ENCODER_VERSION
 * (stage_solve.h): the proof cache keys its entries by it.
 * SOUNDNESS: an encoder must never be more precise than "for all real
 * inputs and all interpretations of the function symbols": no encoder
 * evaluates an uninterpreted kernel or assumes a property of one.
 *
 * Every encoder first runs the registry's arity and shape check
 * (vd_op_check with NULL data), so bodies may assume their shapes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "smt.h"
#include "../ops/ops_moe.h" /* vd_moe_uf_value */
#include "smt_moe.h"        /* enc_gate_fw, enc_nnscaler_moe_gmm (+ backward) for the table */

typedef const struct vd_op_encode_call call_t;

/* ---- helpers ------------------------------------------------------------- */

static const char *rec(call_t *c) { return c->record ? c->record : "node"; }

static int64_t aint(call_t *c, const char *key, int64_t def) {
  return c->node && c->plan ? vd_node_attr_int(c->plan, c->node, key, def) : def;
}
static double aflt(call_t *c, const char *key, double def) {
  return c->node && c->plan ? vd_node_attr_float(c->plan, c->node, key, def) : def;
}
static const char *astr(call_t *c, const char *key, const char *def) {
  return c->node && c->plan ? vd_node_attr_str(c->plan, c->node, key, def) : def;
}

/* Dimension attribute, normalized (the shape check has validated it). */
static int32_t adim(call_t *c, const char *key, int64_t def, int32_t ndim) {
  int64_t v = aint(c, key, def);
  return (int32_t)(v < 0 ? v + ndim : v);
}

/* `dims` (INT, INTS or absent = all) as a mask, as in ops/ops_num.h. */
static void dims_mask(call_t *c, int32_t ndim, int *mask) {
  const vd_attr_t *a = c->node && c->plan ? vd_node_attr(c->plan, c->node, "dims") : NULL;
  for (int32_t i = 0; i < ndim; i++) mask[i] = a == NULL;
  if (!a) return;
  uint32_t n = a->kind == VD_ATTR_INTS ? a->len : 1;
  for (uint32_t k = 0; k < n; k++) {
    int64_t v = a->kind == VD_ATTR_INT ? a->v.i : c->plan->ints[a->v.off + k];
    int64_t d = v < 0 ? v + ndim : v;
    if (d >= 0 && d < ndim) mask[d] = 1;
  }
}

static vd_term I(vd_smt *s, int64_t v) { return vd_smt_num_int(s, v); }
static vd_term D(vd_smt *s, double v) { return vd_smt_num_double(s, v); }
static vd_term uf1(vd_smt *s, const char *name, vd_term x) { return vd_smt_uf(s, name, 1, &x); }

/* The element count an average divides by: attribute "divisor" when set
 * (shape reduction sets it to the full-size count, docs/shape-reduction.md
 * AVG), else the count the operator averages over. */
static int64_t divisor(call_t *c, int64_t count) {
  int64_t v = aint(c, "divisor", count);
  return v > 0 ? v : count;
}

/* ---- COUNT: contractions on reduced shapes (docs/shape-reduction.md) ----- */

/* Full-size shape of input i / output i: the terms' shape when the stage is
 * not reduced. */
static const vd_op_shape *full_in(call_t *c, uint32_t i) { return c->in_full ? &c->in_full[i] : &c->in[i]->shape; }
static const vd_op_shape *full_out(call_t *c, uint32_t i) {
  return c->out_full ? &c->out_full[i] : &c->out[i]->shape;
}
static int64_t ratio_of(int64_t num, int64_t den) { return den > 0 ? num / den : 0; }

/* A contraction whose reduced instance adds `red` terms per output element
 * where the full-size one adds `full` is multiplied by full/red: a sum of
 * n copies of one term is then N times it on both scales, and a plan
 * literal cannot equal a reduced count by accident (smt.h). */
vd_term vd_smt_count_scale(vd_smt *s, int64_t full, int64_t red) {
  if (full == red || full <= 0 || red <= 0) return NULL;
  char pq[48];
  snprintf(pq, sizeof(pq), "%lld/%lld", (long long)full, (long long)red);
  return vd_smt_num_rat(s, pq);
}

vd_term vd_smt_csum(vd_smt *s, vd_term k, size_t n, const vd_term *t) {
  vd_term r = vd_smt_sum(s, n, t);
  return k ? vd_smt_mul(s, k, r) : r;
}

/* The count scale of a contraction that maps the full-size `src` onto
 * `dst` (numel(src)/numel(dst) terms per element) and adds `red` terms per
 * element on the reduced shapes. */
static vd_term onto_scale(vd_smt *s, const vd_op_shape *src, const vd_op_shape *dst, int64_t red) {
  return vd_smt_count_scale(s, ratio_of(vd_op_shape_numel(src), vd_op_shape_numel(dst)), red);
}

/* The count scale of a contraction over dims [d0, d1) of input i. */
static vd_term dims_scale(vd_smt *s, call_t *c, uint32_t i, int32_t d0, int32_t d1) {
  int64_t full = 1, red = 1;
  for (int32_t j = d0; j < d1; j++) {
    full *= full_in(c, i)->d[j];
    red *= c->in[i]->shape.d[j];
  }
  return vd_smt_count_scale(s, full, red);
}

/* A numeral of the sort of index term `id` (Int or Real). */
static vd_term idx_num(vd_smt *s, vd_term id, int64_t v) {
  return vd_smt_i_is_int(s, id) ? vd_smt_int_num(s, v) : vd_smt_num_int(s, v);
}

/* ---- accumulator: per output element, a list of terms to sum ------------- */

typedef struct {
  vd_term *buf;
  int64_t *cnt;
  int64_t n, each;
} acc_t;

static vd_rc acc_init(acc_t *a, int64_t n, int64_t each, vd_diag *d) {
  memset(a, 0, sizeof(*a));
  if (each < 1) each = 1;
  if (n < 0 || n > ((int64_t)1 << 40) / each) VD_FAIL(d, VD_EINPUT, NULL, "encoder", "shape", "tensor too large to encode");
  a->n = n;
  a->each = each;
  a->buf = vd_malloc(sizeof(vd_term) * (size_t)(n * each + 1));
  a->cnt = vd_calloc((size_t)n + 1, sizeof(int64_t));
  if (!a->buf || !a->cnt) {
    vd_free(a->buf);
    vd_free(a->cnt);
    return VD_OOM(d);
  }
  return VD_OK;
}

static void acc_add(acc_t *a, int64_t i, vd_term t) {
  /* `each` is an upper bound computed by the caller; stay in bounds anyway. */
  if (i < 0 || i >= a->n || a->cnt[i] >= a->each) return;
  a->buf[i * a->each + a->cnt[i]++] = t;
}

/* k: the count scale of the contraction (NULL: 1). */
static void acc_done(vd_smt *s, acc_t *a, vd_smt_tensor *out, vd_term k) {
  for (int64_t i = 0; i < a->n && i < out->numel; i++)
    out->t[i] = vd_smt_csum(s, k, (size_t)a->cnt[i], a->buf + i * a->each);
  vd_free(a->buf);
  vd_free(a->cnt);
  a->buf = NULL;
  a->cnt = NULL;
}

static void acc_drop(acc_t *a) {
  vd_free(a->buf);
  vd_free(a->cnt);
}

/* out = factor * (g summed over the broadcast dims of out); factor NULL = 1. */
/* out = input 0 summed onto output o's shape (times factor). */
static vd_rc sum_to(vd_smt *s, call_t *c, uint32_t o, vd_term factor) {
  const vd_smt_tensor *g = c->in[0];
  vd_smt_tensor *out = c->out[o];
  acc_t a;
  int64_t each = out->numel ? g->numel / out->numel : 1;
  vd_term k = onto_scale(s, full_in(c, 0), full_out(c, o), each);
  VD_CHECK(acc_init(&a, out->numel, each, c->diag));
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < g->numel; f++) {
    vd_op_shape_unravel(&g->shape, f, idx);
    vd_term t = factor ? vd_smt_mul(s, factor, g->t[f]) : g->t[f];
    acc_add(&a, vd_op_bcast_src(&g->shape, &out->shape, idx), t);
  }
  acc_done(s, &a, out, k);
  return VD_OK;
}

/* ---- the prologue/epilogue every encoder runs ------------------------------ */

typedef vd_rc (*body_fn)(call_t *c, vd_smt *s);

static vd_rc run(call_t *c, body_fn body) {
  if (!c->smt) VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "smt", "no solver context");
  uint32_t n_in = c->n_in, n_out = c->n_out;
  vd_op_shape *sh = vd_malloc(sizeof(vd_op_shape) * ((size_t)n_in + n_out + 1));
  if (!sh) return VD_OOM(c->diag);
  for (uint32_t i = 0; i < n_in; i++) sh[i] = c->in[i]->shape;
  for (uint32_t i = 0; i < n_out; i++) sh[n_in + i] = c->out[i]->shape;
  vd_op_call oc = {.op = c->op, .plan = c->plan, .node = c->node, .record = c->record,
                   .n_in = n_in, .n_out = n_out, .n_part = c->n_part,
                   .in = NULL, .in_shape = sh, .out = NULL, .out_shape = sh + n_in, .diag = c->diag};
  vd_rc rc = vd_op_check(&oc);
  vd_free(sh);
  VD_CHECK(rc);
  for (uint32_t i = 0; i < n_out; i++)
    if (!c->out[i]->t && c->out[i]->numel > 0)
      VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "outputs", "output %u has no term array (vd_smt_tensor_init)", i);
  VD_CHECK(body(c, c->smt));
  VD_CHECK(vd_smt_status(c->smt, c->diag, rec(c)));
  for (uint32_t i = 0; i < n_out; i++)
    for (int64_t f = 0; f < c->out[i]->numel; f++)
      if (VD_NEVER(!c->out[i]->t[f]))
        VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "outputs", "%s: output %u element %lld not encoded",
                vd_op_name((vd_op_id)c->op), i, (long long)f);
  return VD_OK;
}

#define ENC(name)                                                              \
  static vd_rc body_##name(call_t *c, vd_smt *s);                              \
  static vd_rc enc_##name(const struct vd_op_encode_call *c) { return run(c, body_##name); } \
  static vd_rc body_##name(call_t *c, vd_smt *s)

#define IN(i) (c->in[i])
#define OUT(i) (c->out[i])

/* ---- data movement ------------------------------------------------------- */

static vd_rc copy_into(const vd_smt_tensor *x, vd_smt_tensor *y) {
  for (int64_t f = 0; f < y->numel && f < x->numel; f++) y->t[f] = x->t[f];
  return VD_OK;
}

ENC(identity) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(contiguous) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(cast) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(view) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(reshape) { (void)s; return copy_into(IN(0), OUT(0)); }

ENC(transpose) {
  (void)s;
  int32_t nd = IN(0)->shape.ndim;
  int32_t d0 = adim(c, "dim0", 0, nd), d1 = adim(c, "dim1", 1, nd);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < IN(0)->numel; f++) {
    vd_op_shape_unravel(&IN(0)->shape, f, idx);
    int64_t t = idx[d0];
    idx[d0] = idx[d1];
    idx[d1] = t;
    OUT(0)->t[vd_op_shape_ravel(&OUT(0)->shape, idx)] = IN(0)->t[f];
  }
  return VD_OK;
}

ENC(multiref) {
  (void)s;
  for (uint32_t i = 0; i < c->n_out; i++) copy_into(IN(0), OUT(i));
  return VD_OK;
}

ENC(multiref_backward) {
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t f = 0; f < OUT(0)->numel; f++) {
    for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[f];
    OUT(0)->t[f] = vd_smt_sum(s, c->n_in, buf);
  }
  vd_free(buf);
  return VD_OK;
}

/* Element f of `part` sits at index idx (+off along dim) of `full`. */
static int64_t slice_pos(const vd_op_shape *full, const vd_op_shape *part, int32_t dim, int64_t off, int64_t f) {
  int64_t idx[VD_MAX_DIMS];
  vd_op_shape_unravel(part, f, idx);
  idx[dim] += off;
  return vd_op_shape_ravel(full, idx);
}

ENC(chunk) {
  (void)s;
  const vd_op_shape *x = &IN(0)->shape, *y = &OUT(0)->shape;
  int32_t dim = adim(c, "dim", 0, x->ndim);
  int64_t off = aint(c, "index", 0) * y->d[dim];
  for (int64_t f = 0; f < OUT(0)->numel; f++) OUT(0)->t[f] = IN(0)->t[slice_pos(x, y, dim, off, f)];
  return VD_OK;
}

ENC(chunk_backward) {
  const vd_op_shape *gx = &OUT(0)->shape, *g = &IN(0)->shape;
  int32_t dim = adim(c, "dim", 0, gx->ndim);
  int64_t off = aint(c, "index", 0) * g->d[dim];
  vd_term zero = I(s, 0);
  for (int64_t f = 0; f < OUT(0)->numel; f++) OUT(0)->t[f] = zero;
  for (int64_t f = 0; f < IN(0)->numel; f++) OUT(0)->t[slice_pos(gx, g, dim, off, f)] = IN(0)->t[f];
  return VD_OK;
}

static void concat_into(vd_smt_tensor *out, const vd_smt_tensor *const *in, uint32_t n, int32_t dim) {
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    for (int64_t f = 0; f < in[i]->numel; f++) out->t[slice_pos(&out->shape, &in[i]->shape, dim, off, f)] = in[i]->t[f];
    off += in[i]->shape.d[dim];
  }
}

ENC(concat) {
  (void)s;
  concat_into(OUT(0), c->in, c->n_in, adim(c, "dim", 0, OUT(0)->shape.ndim));
  return VD_OK;
}

ENC(expand) {
  (void)s;
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < OUT(0)->numel; f++) {
    vd_op_shape_unravel(&OUT(0)->shape, f, idx);
    OUT(0)->t[f] = IN(0)->t[vd_op_bcast_src(&OUT(0)->shape, &IN(0)->shape, idx)];
  }
  return VD_OK;
}

ENC(sum_to) { return sum_to(s, c, 0, NULL); }

/* ---- arithmetic ---------------------------------------------------------- */

typedef vd_term (*bin_fn)(vd_smt *s, vd_term a, vd_term b);

static vd_rc binary(call_t *c, vd_smt *s, bin_fn f) {
  vd_smt_tensor *y = OUT(0);
  if (c->n_in == 1) {
    vd_term k = D(s, aflt(c, "scalar", 0.0));
    for (int64_t i = 0; i < y->numel; i++) y->t[i] = f(s, IN(0)->t[i], k);
    return VD_OK;
  }
  int64_t idx[VD_MAX_DIMS];
  for (int64_t i = 0; i < y->numel; i++) {
    vd_op_shape_unravel(&y->shape, i, idx);
    y->t[i] = f(s, IN(0)->t[vd_op_bcast_src(&y->shape, &IN(0)->shape, idx)], IN(1)->t[vd_op_bcast_src(&y->shape, &IN(1)->shape, idx)]);
  }
  return VD_OK;
}

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

static vd_term silu_t(vd_smt *s, vd_term x) { return vd_smt_mul(s, x, uf1(s, "sigmoid", x)); }
/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
static vd_term silu_grad_t(vd_smt *s, vd_term x) {
  vd_term sg = uf1(s, "sigmoid", x), one = I(s, 1);
  return vd_smt_mul(s, sg, vd_smt_add(s, one, vd_smt_mul(s, x, vd_smt_sub(s, one, sg))));
}

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
  dims_mask(c, x->shape.ndim, mask);
  int keep = aint(c, "keepdim", 0) != 0;
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
ENC(sum) { return reduce(c, s, 0); }
ENC(mean) { return reduce(c, s, 1); }

static vd_rc reduce_bwd(call_t *c, vd_smt *s, int mean) {
  const vd_smt_tensor *g = IN(0);
  vd_smt_tensor *gx = OUT(0);
  int mask[VD_MAX_DIMS];
  dims_mask(c, gx->shape.ndim, mask);
  int keep = aint(c, "keepdim", 0) != 0;
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

ENC(pick) {
  int64_t n = IN(0)->shape.d[0], v = IN(0)->shape.d[1], start = aint(c, "start", 0);
  for (int64_t i = 0; i < n; i++) OUT(0)->t[i] = lookup(s, IN(1)->t[i], start, v, IN(0)->t + i * v, 1);
  return VD_OK;
}

ENC(pick_backward) {
  int64_t n = OUT(0)->shape.d[0], v = OUT(0)->shape.d[1], start = aint(c, "start", 0);
  vd_term zero = I(s, 0);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < v; j++) {
      vd_term lab = IN(0)->t[i];
      OUT(0)->t[i * v + j] = vd_smt_ite(s, vd_smt_eq(s, lab, idx_num(s, lab, start + j)), IN(1)->t[i], zero);
    }
  return VD_OK;
}

/* ---- normalization ------------------------------------------------------- */

/* rsqrt(kh sum(v_i) / dv + eps) for one row of h elements (dv: divisor(),
 * kh: the count scale of h) */
static vd_term inv_norm(vd_smt *s, vd_term kh, vd_term *v, int64_t h, int64_t dv, double eps) {
  vd_term mean = vd_smt_div(s, vd_smt_csum(s, kh, (size_t)h, v), I(s, dv));
  return uf1(s, "rsqrt", vd_smt_add(s, mean, D(s, eps)));
}

/* Count scales of a norm over h (the weight's length) and over its rows. */
static void norm_scales(call_t *c, vd_smt *s, int64_t h, int64_t rows, vd_term *kh, vd_term *krows) {
  int64_t fh = full_in(c, 1)->d[0];
  *kh = vd_smt_count_scale(s, fh, h);
  *krows = vd_smt_count_scale(s, ratio_of(vd_op_shape_numel(full_in(c, 0)), fh), rows);
}

ENC(rms_norm) {
  int64_t h = IN(1)->shape.d[0], rows = h ? IN(0)->numel / h : 0;
  vd_term kh, krows;
  norm_scales(c, s, h, rows, &kh, &krows);
  (void)krows;
  double eps = aflt(c, "eps", 1e-6);
  vd_term *sq = vd_malloc(sizeof(vd_term) * (size_t)(h + 1));
  if (!sq) return VD_OOM(c->diag);
  for (int64_t r = 0; r < rows; r++) {
    vd_term *x = IN(0)->t + r * h;
    for (int64_t i = 0; i < h; i++) sq[i] = vd_smt_mul(s, x[i], x[i]);
    vd_term inv = inv_norm(s, kh, sq, h, divisor(c, h), eps);
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {x[i], inv, IN(1)->t[i]};
      OUT(0)->t[r * h + i] = vd_smt_prod(s, 3, f);
    }
  }
  vd_free(sq);
  return VD_OK;
}

ENC(rms_norm_backward) {
  int64_t h = IN(1)->shape.d[0], rows = h ? IN(0)->numel / h : 0;
  vd_term kh, krows;
  norm_scales(c, s, h, rows, &kh, &krows);
  double eps = aflt(c, "eps", 1e-6);
  const vd_term *w = IN(1)->t;
  acc_t gw;
  VD_CHECK(acc_init(&gw, h, rows, c->diag));
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(2 * h + 1));
  if (!buf) {
    acc_drop(&gw);
    return VD_OOM(c->diag);
  }
  vd_term *sq = buf, *dt = buf + h;
  for (int64_t r = 0; r < rows; r++) {
    vd_term *x = IN(0)->t + r * h, *g = IN(2)->t + r * h;
    for (int64_t i = 0; i < h; i++) {
      sq[i] = vd_smt_mul(s, x[i], x[i]);
      vd_term f[3] = {g[i], w[i], x[i]};
      dt[i] = vd_smt_prod(s, 3, f);
    }
    vd_term inv = inv_norm(s, kh, sq, h, divisor(c, h), eps);
    vd_term dot = vd_smt_csum(s, kh, (size_t)h, dt);
    /* gx_i = inv w_i g_i - x_i inv^3 dot / h */
    vd_term k = vd_smt_div(s, vd_smt_mul(s, vd_smt_pow_int(s, inv, 3), dot), I(s, divisor(c, h)));
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {inv, w[i], g[i]};
      OUT(0)->t[r * h + i] = vd_smt_sub(s, vd_smt_prod(s, 3, f), vd_smt_mul(s, x[i], k));
      vd_term e[3] = {g[i], x[i], inv};
      acc_add(&gw, i, vd_smt_prod(s, 3, e));
    }
  }
  vd_free(buf);
  acc_done(s, &gw, OUT(1), krows);
  return VD_OK;
}

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

ENC(layer_norm) {
  int64_t h = IN(1)->shape.d[0], rows = h ? IN(0)->numel / h : 0;
  vd_term kh, krows;
  norm_scales(c, s, h, rows, &kh, &krows);
  (void)krows;
  double eps = aflt(c, "eps", 1e-5);
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(2 * h + 1));
  if (!buf) return VD_OOM(c->diag);
  vd_term *xc = buf, *sq = buf + h;
  for (int64_t r = 0; r < rows; r++) {
    vd_term inv = ln_row(s, kh, IN(0)->t + r * h, h, divisor(c, h), eps, xc, sq);
    for (int64_t i = 0; i < h; i++) {
      vd_term f[3] = {xc[i], inv, IN(1)->t[i]};
      OUT(0)->t[r * h + i] = vd_smt_add(s, vd_smt_prod(s, 3, f), IN(2)->t[i]);
    }
  }
  vd_free(buf);
  return VD_OK;
}

ENC(layer_norm_backward) {
  int64_t h = IN(1)->shape.d[0], rows = h ? IN(0)->numel / h : 0;
  vd_term kh, krows;
  norm_scales(c, s, h, rows, &kh, &krows);
  double eps = aflt(c, "eps", 1e-5);
  const vd_term *w = IN(1)->t;
  acc_t gw, gb;
  VD_CHECK(acc_init(&gw, h, rows, c->diag));
  vd_rc rc = acc_init(&gb, h, rows, c->diag);
  if (rc != VD_OK) {
    acc_drop(&gw);
    return rc;
  }
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(5 * h + 1));
  if (!buf) {
    acc_drop(&gw);
    acc_drop(&gb);
    return VD_OOM(c->diag);
  }
  vd_term *xc = buf, *sq = buf + h, *xh = buf + 2 * h, *gh = buf + 3 * h, *ghx = buf + 4 * h;
  for (int64_t r = 0; r < rows; r++) {
    const vd_term *g = IN(2)->t + r * h;
    vd_term inv = ln_row(s, kh, IN(0)->t + r * h, h, divisor(c, h), eps, xc, sq);
    for (int64_t i = 0; i < h; i++) {
      xh[i] = vd_smt_mul(s, xc[i], inv);
      gh[i] = vd_smt_mul(s, g[i], w[i]);
      ghx[i] = vd_smt_mul(s, gh[i], xh[i]);
      acc_add(&gw, i, vd_smt_mul(s, g[i], xh[i]));
      acc_add(&gb, i, g[i]);
    }
    vd_term m1 = vd_smt_div(s, vd_smt_csum(s, kh, (size_t)h, gh), I(s, divisor(c, h)));
    vd_term m2 = vd_smt_div(s, vd_smt_csum(s, kh, (size_t)h, ghx), I(s, divisor(c, h)));
    /* gx_i = inv (g_i w_i - m1 - xh_i m2) */
    for (int64_t i = 0; i < h; i++)
      OUT(0)->t[r * h + i] =
          vd_smt_mul(s, inv, vd_smt_sub(s, vd_smt_sub(s, gh[i], m1), vd_smt_mul(s, xh[i], m2)));
  }
  vd_free(buf);
  acc_done(s, &gw, OUT(1), krows);
  acc_done(s, &gb, OUT(2), krows);
  return VD_OK;
}

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

ENC(softmax) {
  int32_t dim = adim(c, "dim", -1, IN(0)->shape.ndim);
  vd_op_lines l = vd_op_lines_of(&IN(0)->shape, dim);
  vd_term k = dims_scale(s, c, 0, dim, dim + 1);
  vd_term *e = vd_malloc(sizeof(vd_term) * (size_t)(l.len + 1));
  if (!e) return VD_OOM(c->diag);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.len * l.inner + i;
      for (int64_t j = 0; j < l.len; j++) e[j] = uf1(s, "exp", IN(0)->t[base + j * l.inner]);
      vd_term z = vd_smt_csum(s, k, (size_t)l.len, e);
      for (int64_t j = 0; j < l.len; j++) OUT(0)->t[base + j * l.inner] = vd_smt_div(s, e[j], z);
    }
  vd_free(e);
  return VD_OK;
}

ENC(softmax_backward) {
  int32_t dim = adim(c, "dim", -1, IN(0)->shape.ndim);
  vd_op_lines l = vd_op_lines_of(&IN(0)->shape, dim);
  vd_term k = dims_scale(s, c, 0, dim, dim + 1);
  vd_term *p = vd_malloc(sizeof(vd_term) * (size_t)(l.len + 1));
  if (!p) return VD_OOM(c->diag);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.len * l.inner + i;
      const vd_term *y = IN(0)->t + base, *g = IN(1)->t + base;
      for (int64_t j = 0; j < l.len; j++) p[j] = vd_smt_mul(s, g[j * l.inner], y[j * l.inner]);
      vd_term dot = vd_smt_csum(s, k, (size_t)l.len, p);
      for (int64_t j = 0; j < l.len; j++)
        OUT(0)->t[base + j * l.inner] = vd_smt_mul(s, y[j * l.inner], vd_smt_sub(s, g[j * l.inner], dot));
    }
  vd_free(p);
  return VD_OK;
}

/* ---- mixture of experts -------------------------------------------------- */

static vd_rc topk(call_t *c, vd_smt *s, int backward) {
  int64_t t = IN(0)->shape.d[0], e = IN(0)->shape.d[1], k = aint(c, "k", 1);
  if (e > VD_LIM_TOPK_EXPERTS_MAX)
    VD_FAIL(c->diag, VD_EINPUT, NULL, rec(c), "inputs[0]", "topk_gate: rows of %lld experts exceed the %d arguments the symbol takes (reduce the expert dim; common/limits.h)", (long long)e, VD_LIM_TOPK_EXPERTS_MAX);
  vd_term args[2 * VD_LIM_TOPK_EXPERTS_MAX];
  char name[96];
  for (int64_t r = 0; r < t; r++) {
    for (int64_t j = 0; j < e; j++) {
      args[j] = IN(0)->t[r * e + j];
      if (backward) args[e + j] = IN(1)->t[r * e + j];
    }
    for (int64_t j = 0; j < e; j++) {
      snprintf(name, sizeof(name), "%s.k%lld.j%lld", backward ? "topk_gate_backward" : "topk_gate", (long long)k,
               (long long)j);
      OUT(0)->t[r * e + j] = vd_smt_uf(s, name, (size_t)(backward ? 2 * e : e), args);
    }
  }
  return VD_OK;
}
ENC(topk_gate) { return topk(c, s, 0); }
ENC(topk_gate_backward) { return topk(c, s, 1); }

typedef struct {
  int64_t t, h, f, el, G, col0;
} gmlp_geo;

static gmlp_geo gmlp_geometry(call_t *c) {
  gmlp_geo g;
  g.t = IN(0)->shape.d[0];
  g.h = IN(0)->shape.d[1];
  g.el = IN(2)->shape.d[0];
  g.f = IN(2)->shape.d[1];
  g.G = IN(1)->shape.d[1];
  g.col0 = g.G == g.el ? 0 : aint(c, "expert_start", 0);
  return g;
}

/* Count scales of the grouped MLP's contractions (t: token rows, h, f, el). */
typedef struct {
  vd_term t, h, f, el;
} gmlp_scale;

static gmlp_scale gmlp_scales(call_t *c, vd_smt *s, const gmlp_geo *g) {
  gmlp_scale k = {vd_smt_count_scale(s, full_in(c, 0)->d[0], g->t), vd_smt_count_scale(s, full_in(c, 0)->d[1], g->h),
                  vd_smt_count_scale(s, full_in(c, 2)->d[1], g->f), vd_smt_count_scale(s, full_in(c, 2)->d[0], g->el)};
  return k;
}

/* a_j = w1[e,j,:] . x, b_j = w3[e,j,:] . x, hd_j = silu(a_j) b_j */
static void gmlp_hidden(vd_smt *s, const gmlp_geo *g, vd_term kh, const vd_term *x, const vd_term *w1,
                        const vd_term *w3, int64_t e, vd_term *a, vd_term *b, vd_term *hd, vd_term *tmp) {
  for (int64_t j = 0; j < g->f; j++) {
    for (int64_t i = 0; i < g->h; i++) tmp[i] = vd_smt_mul(s, w1[(e * g->f + j) * g->h + i], x[i]);
    a[j] = vd_smt_csum(s, kh, (size_t)g->h, tmp);
    for (int64_t i = 0; i < g->h; i++) tmp[i] = vd_smt_mul(s, w3[(e * g->f + j) * g->h + i], x[i]);
    b[j] = vd_smt_csum(s, kh, (size_t)g->h, tmp);
    hd[j] = vd_smt_mul(s, silu_t(s, a[j]), b[j]);
  }
}

ENC(grouped_mlp) {
  gmlp_geo g = gmlp_geometry(c);
  gmlp_scale k = gmlp_scales(c, s, &g);
  int64_t nb = 3 * g.f + g.h + g.f + g.el + 1;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)nb);
  if (!buf) return VD_OOM(c->diag);
  vd_term *a = buf, *b = a + g.f, *hd = b + g.f, *tmp = hd + g.f, *terms = tmp + g.h + g.f;
  const vd_term *w2 = IN(4)->t;
  for (int64_t t = 0; t < g.t; t++) {
    /* y[t,i] = sum_e gate[t,e] * sum_j w2[e,i,j] hd_e[j] */
    vd_term *oe = vd_malloc(sizeof(vd_term) * (size_t)(g.el * g.h + 1));
    if (!oe) {
      vd_free(buf);
      return VD_OOM(c->diag);
    }
    for (int64_t e = 0; e < g.el; e++) {
      gmlp_hidden(s, &g, k.h, IN(0)->t + t * g.h, IN(2)->t, IN(3)->t, e, a, b, hd, tmp);
      vd_term gate = IN(1)->t[t * g.G + g.col0 + e];
      for (int64_t i = 0; i < g.h; i++) {
        for (int64_t j = 0; j < g.f; j++) tmp[j] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], hd[j]);
        oe[e * g.h + i] = vd_smt_mul(s, gate, vd_smt_csum(s, k.f, (size_t)g.f, tmp));
      }
    }
    for (int64_t i = 0; i < g.h; i++) {
      for (int64_t e = 0; e < g.el; e++) terms[e] = oe[e * g.h + i];
      OUT(0)->t[t * g.h + i] = vd_smt_csum(s, k.el, (size_t)g.el, terms);
    }
    vd_free(oe);
  }
  vd_free(buf);
  return VD_OK;
}

ENC(grouped_mlp_backward) {
  gmlp_geo g = gmlp_geometry(c);
  gmlp_scale k = gmlp_scales(c, s, &g);
  const vd_term *w1 = IN(2)->t, *w3 = IN(3)->t, *w2 = IN(4)->t;
  acc_t gx, gg, gw1, gw3, gw2;
  acc_t *accs[5] = {&gx, &gg, &gw1, &gw3, &gw2};
  int64_t each[5] = {2 * g.el * g.f, 1, g.t, g.t, g.t};
  for (int i = 0; i < 5; i++) {
    vd_rc rc = acc_init(accs[i], IN(i)->numel, each[i], c->diag);
    if (rc != VD_OK) {
      for (int q = 0; q < i; q++) acc_drop(accs[q]);
      return rc;
    }
  }
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(6 * g.f + 2 * g.h + 1));
  if (!buf) {
    for (int i = 0; i < 5; i++) acc_drop(accs[i]);
    return VD_OOM(c->diag);
  }
  vd_term *a = buf, *b = a + g.f, *hd = b + g.f, *ga = hd + g.f, *gbv = ga + g.f, *tmp = gbv + g.f;
  vd_term *go = tmp + g.f + g.h;
  for (int64_t t = 0; t < g.t; t++) {
    const vd_term *x = IN(0)->t + t * g.h, *gy = IN(5)->t + t * g.h;
    for (int64_t e = 0; e < g.el; e++) {
      vd_term gate = IN(1)->t[t * g.G + g.col0 + e];
      gmlp_hidden(s, &g, k.h, x, w1, w3, e, a, b, hd, tmp);
      /* ggate = sum_i gy_i o_i,  o_i = sum_j w2[e,i,j] hd_j;  go = gate gy */
      vd_term *gs = vd_malloc(sizeof(vd_term) * (size_t)(g.h + 1));
      if (!gs) {
        vd_free(buf);
        for (int i = 0; i < 5; i++) acc_drop(accs[i]);
        return VD_OOM(c->diag);
      }
      for (int64_t i = 0; i < g.h; i++) {
        for (int64_t j = 0; j < g.f; j++) tmp[j] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], hd[j]);
        gs[i] = vd_smt_mul(s, gy[i], vd_smt_csum(s, k.f, (size_t)g.f, tmp));
        go[i] = vd_smt_mul(s, gate, gy[i]);
      }
      acc_add(&gg, t * g.G + g.col0 + e, vd_smt_csum(s, k.h, (size_t)g.h, gs));
      vd_free(gs);
      for (int64_t j = 0; j < g.f; j++) {
        for (int64_t i = 0; i < g.h; i++) {
          tmp[i] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], go[i]);
          acc_add(&gw2, (e * g.h + i) * g.f + j, vd_smt_mul(s, go[i], hd[j]));
        }
        vd_term gh = vd_smt_csum(s, k.h, (size_t)g.h, tmp);
        vd_term f3[3] = {gh, b[j], silu_grad_t(s, a[j])};
        ga[j] = vd_smt_prod(s, 3, f3);
        gbv[j] = vd_smt_mul(s, gh, silu_t(s, a[j]));
      }
      for (int64_t j = 0; j < g.f; j++)
        for (int64_t i = 0; i < g.h; i++) {
          int64_t w = (e * g.f + j) * g.h + i;
          acc_add(&gw1, w, vd_smt_mul(s, ga[j], x[i]));
          acc_add(&gw3, w, vd_smt_mul(s, gbv[j], x[i]));
          acc_add(&gx, t * g.h + i, vd_smt_mul(s, ga[j], w1[w]));
          acc_add(&gx, t * g.h + i, vd_smt_mul(s, gbv[j], w3[w]));
        }
    }
  }
  vd_free(buf);
  /* gx: over el experts and f; gg: one term; gw1, gw3, gw2: over t rows */
  vd_term kx = k.el && k.f ? vd_smt_mul(s, k.el, k.f) : k.el ? k.el : k.f;
  vd_term kacc[5] = {kx, NULL, k.t, k.t, k.t};
  for (int i = 0; i < 5; i++) acc_done(s, accs[i], OUT(i), kacc[i]);
  return VD_OK;
}

/* ---- collectives (merged instance: all participants, group order) -------- */

static uint32_t parts(call_t *c) { return c->n_part ? c->n_part : c->n_in; }

ENC(all_reduce) {
  int mx = strcmp(astr(c, "reduce", "sum"), "max") == 0;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t e = 0; e < IN(0)->numel; e++) {
    vd_term r;
    if (mx) {
      r = IN(0)->t[e];
      for (uint32_t i = 1; i < c->n_in; i++) r = vd_smt_max(s, r, IN(i)->t[e]);
    } else {
      for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[e];
      r = vd_smt_sum(s, c->n_in, buf);
    }
    for (uint32_t i = 0; i < c->n_out; i++) OUT(i)->t[e] = r;
  }
  vd_free(buf);
  return VD_OK;
}

ENC(all_gather) {
  (void)s;
  int32_t dim = adim(c, "dim", 0, IN(0)->shape.ndim);
  for (uint32_t i = 0; i < c->n_out; i++) concat_into(OUT(i), c->in, c->n_in, dim);
  return VD_OK;
}

ENC(reduce_scatter) {
  int32_t dim = adim(c, "dim", 0, IN(0)->shape.ndim);
  const vd_op_shape *os = &OUT(0)->shape;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  int64_t idx[VD_MAX_DIMS];
  for (uint32_t p = 0; p < c->n_out; p++)
    for (int64_t f = 0; f < OUT(p)->numel; f++) {
      vd_op_shape_unravel(os, f, idx);
      idx[dim] += (int64_t)p * os->d[dim];
      int64_t src = vd_op_shape_ravel(&IN(0)->shape, idx);
      for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[src];
      OUT(p)->t[f] = vd_smt_sum(s, c->n_in, buf);
    }
  vd_free(buf);
  return VD_OK;
}

ENC(all_to_all) {
  (void)s;
  int32_t nd = IN(0)->shape.ndim;
  int32_t sd = adim(c, "split_dim", 0, nd), cd = adim(c, "concat_dim", 0, nd);
  uint32_t P = parts(c);
  const vd_op_shape *xs = &IN(0)->shape, *ys = &OUT(0)->shape;
  int64_t cs_sd = xs->d[sd] / P, cs_cd = sd == cd ? cs_sd : xs->d[cd];
  int64_t idx[VD_MAX_DIMS];
  for (uint32_t i = 0; i < c->n_out; i++)
    for (int64_t f = 0; f < OUT(i)->numel; f++) {
      vd_op_shape_unravel(ys, f, idx);
      int64_t j = idx[cd] / cs_cd;
      idx[cd] -= j * cs_cd;
      idx[sd] += (int64_t)i * cs_sd;
      OUT(i)->t[f] = IN(j)->t[vd_op_shape_ravel(xs, idx)];
    }
  return VD_OK;
}

ENC(broadcast) {
  (void)s;
  for (uint32_t i = 0; i < c->n_out; i++) copy_into(IN(0), OUT(i));
  return VD_OK;
}

static vd_rc move(call_t *c) {
  if (c->n_in == 1 && c->n_out == 1) copy_into(IN(0), OUT(0));
  return VD_OK;
}
ENC(send) { (void)s; return move(c); }
ENC(recv) { (void)s; return move(c); }

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

/* ---- the table ----------------------------------------------------------- */

/* One entry per row of ops/ops.def: a row without an encoder (enc_<name>)
 * does not compile. */
static const vd_op_encode_fn enc_table[VD_OP__COUNT] = {
#define VD_OP(ID, name, ...) [VD_OP_##ID] = enc_##name,
#include "../ops/ops.def"
#undef VD_OP
};

vd_op_encode_fn vd_smt_encoder(vd_op_id op) {
  if (op < 0 || op >= VD_OP__COUNT) return NULL;
  return enc_table[op];
}

vd_rc vd_smt_encode(const struct vd_op_encode_call *c) {
  vd_op_encode_fn f = vd_smt_encoder((vd_op_id)c->op);
  if (!f)
    VD_FAIL(c->diag, VD_EINPUT, NULL, rec(c), "op", "operator id %d has no symbolic encoder (unsupported)", c->op);
  return f(c);
}

/* ---- numeric meaning of the symbols -------------------------------------- */

int vd_smt_uf_value(const char *name, size_t n, const double *a, double *out) {
  /* One definition of each symbol: the registry's (ops/ops_num_arith.c), plus
   * the MoE routing symbols (ops_moe.c). */
  return vd_op_symbol_value(name, n, a, out) || vd_moe_uf_value(name, n, a, out);
}
