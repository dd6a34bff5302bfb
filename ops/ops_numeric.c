/*
 * ops/ops_numeric.c - double-precision evaluators and shape checks of
 * every operator of ops/ops.def (the numeric oracle's side of the
 * registry).
 *
 * Semantics are those of docs/operators.md on real numbers.  Choices the
 * catalogue leaves open:
 *  - uninterpreted kernels use the real function; gelu is the exact erf
 *    form 0.5 x (1 + erf(x / sqrt 2)), its gradient Phi(x) + x phi(x);
 *  - integer tensors (ids, labels) are doubles holding integers; a value is
 *    rounded to the nearest integer before use;
 *  - topk_gate: softmax over the k largest entries of each row, ties broken
 *    towards the lower index; its backward is the softmax Jacobian on the
 *    selected entries (the selection is piecewise constant);
 *  - grouped_mlp: gates has either el columns (the local experts) or the
 *    global expert count, in which case column expert_start + e is used;
 *  - sum/mean without `dims` reduce every dimension; `dims` may be INT or INTS;
 *  - add/sub/mul/div with one input read attribute `scalar` (required).
 *
 * Shape checks are separate from evaluation: vd_op_eval runs the check
 * first, so an evaluator may assume its shapes.  Every failure is VD_EINPUT
 * naming the node (call->record) and the field (inputs[i], outputs[i],
 * attrs.<key>).
 * Collectives: a call carries all participants (inputs and outputs in group
 * order), see ops/ops.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "ops.h"
#include "ops_moe.h"

#define VD_OP(ID, name, ...)                      \
  vd_rc vd_op_i_eval_##name(const vd_op_call *c); \
  vd_rc vd_op_i_shape_##name(const vd_op_call *c);
#include "ops.def"
#undef VD_OP

/* ---- helpers ------------------------------------------------------------- */

static const char *rec(const vd_op_call *c) { return c->record ? c->record : "node"; }
static const char *opname(const vd_op_call *c) { return vd_op_table[c->op].name; }

#define bad vd_op_i_bad
vd_rc vd_op_i_bad(const vd_op_call *c, const char *field, const char *fmt, ...) {
  char buf[VD_DIAG_TEXT - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return vd_diag_set(c->diag, VD_EINPUT, __FILE__, __LINE__, NULL, rec(c), field, "%s: %s",
                     opname(c), buf);
}

static void shape_str(const vd_op_shape *s, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < s->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, i ? ",%lld" : "%lld", (long long)s->d[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static char *fname(char *buf, size_t n, const char *what, uint32_t i) {
  snprintf(buf, n, "%s[%u]", what, i);
  return buf;
}

static int same(const vd_op_shape *a, const vd_op_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int32_t i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

/* Fails unless `got` (outputs[i] or inputs[i]) has shape `want`. */
static vd_rc want_shape(const vd_op_call *c, int is_out, uint32_t i, const vd_op_shape *want) {
  const vd_op_shape *got = is_out ? &c->out_shape[i] : &c->in_shape[i];
  if (same(got, want)) return VD_OK;
  char f[32], a[96], b[96];
  shape_str(want, a, sizeof(a));
  shape_str(got, b, sizeof(b));
  return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i), "expected shape %s, got %s", a, b);
}

static vd_rc want_ndim(const vd_op_call *c, int is_out, uint32_t i, int32_t lo, int32_t hi) {
  const vd_op_shape *s = is_out ? &c->out_shape[i] : &c->in_shape[i];
  if (s->ndim >= lo && s->ndim <= hi) return VD_OK;
  char f[32];
  return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i),
             "expected %d..%d dimensions, got %d", lo, hi, s->ndim);
}

static vd_rc want_count(const vd_op_call *c, uint32_t n_in, uint32_t n_out) {
  if (c->n_in != n_in) return bad(c, "inputs", "expected %u inputs, got %u", n_in, c->n_in);
  if (c->n_out != n_out) return bad(c, "outputs", "expected %u outputs, got %u", n_out, c->n_out);
  return VD_OK;
}

static int64_t aint(const vd_op_call *c, const char *key, int64_t def) {
  return c->node && c->plan ? vd_node_attr_int(c->plan, c->node, key, def) : def;
}
/* The element count an average divides by: attribute "divisor" when set
 * (shape reduction sets it to the full-size count, docs/shape-reduction.md
 * AVG), else the count the operator averages over. */
static int64_t divisor(const vd_op_call *c, int64_t count) {
  int64_t v = aint(c, "divisor", count);
  return v > 0 ? v : count;
}
static double aflt(const vd_op_call *c, const char *key, double def) {
  return c->node && c->plan ? vd_node_attr_float(c->plan, c->node, key, def) : def;
}
static const char *astr(const vd_op_call *c, const char *key, const char *def) {
  return c->node && c->plan ? vd_node_attr_str(c->plan, c->node, key, def) : def;
}
static int ahas(const vd_op_call *c, const char *key) {
  return c->node && c->plan && vd_node_attr(c->plan, c->node, key) != NULL;
}

/* Normalizes dimension attribute `key` against ndim into *dim. */
static vd_rc get_dim(const vd_op_call *c, const char *key, int64_t def, int32_t ndim, int32_t *dim) {
  int64_t v = aint(c, key, def);
  int64_t n = v < 0 ? v + ndim : v;
  if (n < 0 || n >= ndim) {
    char f[64];
    snprintf(f, sizeof(f), "attrs.%s", key);
    return bad(c, f, "expected a dimension in [-%d, %d), got %lld", ndim, ndim, (long long)v);
  }
  *dim = (int32_t)n;
  return VD_OK;
}

/* Reads `dims` (INT, INTS or absent = all) into a mask over ndim dims. */
static vd_rc get_dims_mask(const vd_op_call *c, int32_t ndim, int *mask) {
  for (int32_t i = 0; i < ndim; i++) mask[i] = 0;
  const vd_attr_t *a = c->node && c->plan ? vd_node_attr(c->plan, c->node, "dims") : NULL;
  if (!a) {
    for (int32_t i = 0; i < ndim; i++) mask[i] = 1;
    return VD_OK;
  }
  uint32_t n = a->kind == VD_ATTR_INTS ? a->len : a->kind == VD_ATTR_INT ? 1 : 0;
  if (a->kind != VD_ATTR_INTS && a->kind != VD_ATTR_INT)
    return bad(c, "attrs.dims", "expected an int or a list of ints");
  for (uint32_t k = 0; k < n; k++) {
    int64_t v = a->kind == VD_ATTR_INT ? a->v.i : c->plan->ints[a->v.off + k];
    int64_t d = v < 0 ? v + ndim : v;
    if (d < 0 || d >= ndim)
      return bad(c, "attrs.dims", "expected dimensions in [-%d, %d), got %lld", ndim, ndim, (long long)v);
    mask[d] = 1;
  }
  return VD_OK;
}


/* y (shape ys, broadcastable to gs) = factor * sum of g over broadcast dims. */
static void sum_to(const double *g, const vd_op_shape *gs, double *y, const vd_op_shape *ys, double factor) {
  int64_t ny = vd_op_shape_numel(ys), ng = vd_op_shape_numel(gs);
  int64_t idx[VD_MAX_DIMS];
  memset(y, 0, sizeof(double) * (size_t)ny);
  for (int64_t f = 0; f < ng; f++) {
    vd_op_shape_unravel(gs, f, idx);
    y[vd_op_bcast_src(gs, ys, idx)] += factor * g[f];
  }
}

static int64_t to_int(double v) {
  if (!(v > -9e15 && v < 9e15)) return INT64_MIN;
  return (int64_t)llround(v);
}

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
static double gelu_f(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_g(double x) {
  return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}
/* the tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
static double gelu_tanh_f(double x) {
  double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
static double gelu_tanh_g(double x) {
  double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double vd_op_i_silu(double x) { return x * sigm(x); }
double vd_op_i_silu_grad(double x) {
  double s = sigm(x);
  return s * (1.0 + x * (1.0 - s));
}
#define silu_f vd_op_i_silu
#define silu_g vd_op_i_silu_grad

/* ---- shape rules shared by many operators -------------------------------- */

/* One input, one output of the same shape. */
static vd_rc shape_same1(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}

/* (x, g) -> gx, all of one shape. */
static vd_rc shape_same2(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_shape(c, 0, 1, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}

static void copy0(const vd_op_call *c) {
  memcpy(c->out[0], c->in[0], sizeof(double) * (size_t)vd_op_shape_numel(&c->out_shape[0]));
}

typedef double (*unary_fn)(double x, double p);

static vd_rc unary(const vd_op_call *c, unary_fn f, double p) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t i = 0; i < n; i++) c->out[0][i] = f(c->in[0][i], p);
  return VD_OK;
}

/* gx = g * f(x) */
static vd_rc unary_bwd(const vd_op_call *c, unary_fn f, double p) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t i = 0; i < n; i++) c->out[0][i] = c->in[1][i] * f(c->in[0][i], p);
  return VD_OK;
}

/* ---- data movement ------------------------------------------------------- */

vd_rc vd_op_i_shape_identity(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_identity(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_contiguous(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_contiguous(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_cast(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_cast(const vd_op_call *c) { copy0(c); return VD_OK; }

static vd_rc shape_view(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int64_t a = vd_op_shape_numel(&c->in_shape[0]), b = vd_op_shape_numel(&c->out_shape[0]);
  if (a != b)
    return bad(c, "outputs[0]", "expected %lld elements (as inputs[0]), got %lld", (long long)a, (long long)b);
  return VD_OK;
}
vd_rc vd_op_i_shape_view(const vd_op_call *c) { return shape_view(c); }
vd_rc vd_op_i_eval_view(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_reshape(const vd_op_call *c) { return shape_view(c); }
vd_rc vd_op_i_eval_reshape(const vd_op_call *c) { copy0(c); return VD_OK; }

vd_rc vd_op_i_shape_transpose(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int32_t d0, d1;
  VD_CHECK(get_dim(c, "dim0", 0, c->in_shape[0].ndim, &d0));
  VD_CHECK(get_dim(c, "dim1", 1, c->in_shape[0].ndim, &d1));
  vd_op_shape w = c->in_shape[0];
  w.d[d0] = c->in_shape[0].d[d1];
  w.d[d1] = c->in_shape[0].d[d0];
  return want_shape(c, 1, 0, &w);
}
vd_rc vd_op_i_eval_transpose(const vd_op_call *c) {
  int32_t d0, d1;
  VD_CHECK(get_dim(c, "dim0", 0, c->in_shape[0].ndim, &d0));
  VD_CHECK(get_dim(c, "dim1", 1, c->in_shape[0].ndim, &d1));
  int64_t n = vd_op_shape_numel(&c->in_shape[0]), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(&c->in_shape[0], f, idx);
    int64_t t = idx[d0];
    idx[d0] = idx[d1];
    idx[d1] = t;
    c->out[0][vd_op_shape_ravel(&c->out_shape[0], idx)] = c->in[0][f];
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_multiref(const vd_op_call *c) {
  if (c->n_in != 1) return bad(c, "inputs", "expected 1 input, got %u", c->n_in);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_multiref(const vd_op_call *c) {
  size_t n = (size_t)vd_op_shape_numel(&c->in_shape[0]);
  for (uint32_t i = 0; i < c->n_out; i++) memcpy(c->out[i], c->in[0], n * sizeof(double));
  return VD_OK;
}

vd_rc vd_op_i_shape_multiref_backward(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  for (uint32_t i = 0; i < c->n_in; i++) VD_CHECK(want_shape(c, 0, i, &c->out_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_multiref_backward(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t e = 0; e < n; e++) {
    double s = 0;
    for (uint32_t i = 0; i < c->n_in; i++) s += c->in[i][e];
    c->out[0][e] = s;
  }
  return VD_OK;
}

/* chunk attributes against the FULL shape `full`. */
static vd_rc chunk_attrs(const vd_op_call *c, const vd_op_shape *full, int32_t *dim, int64_t *index,
                         int64_t *chunks) {
  VD_CHECK(get_dim(c, "dim", 0, full->ndim, dim));
  *chunks = aint(c, "chunks", 1);
  *index = aint(c, "index", 0);
  if (*chunks < 1) return bad(c, "attrs.chunks", "expected >= 1, got %lld", (long long)*chunks);
  if (*index < 0 || *index >= *chunks)
    return bad(c, "attrs.index", "expected in [0, %lld), got %lld", (long long)*chunks, (long long)*index);
  if (full->d[*dim] % *chunks != 0)
    return bad(c, "attrs.chunks", "dimension %d of extent %lld is not divisible by %lld chunks", *dim,
               (long long)full->d[*dim], (long long)*chunks);
  return VD_OK;
}

vd_rc vd_op_i_shape_chunk(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, &c->in_shape[0], &dim, &index, &chunks));
  vd_op_shape w = c->in_shape[0];
  w.d[dim] /= chunks;
  return want_shape(c, 1, 0, &w);
}
/* Copies slice [off, off+ext) along dim between a full and a part tensor;
 * to_part: full -> part, else part -> full (positions outside untouched). */
static void slice_copy(const double *src, double *dst, const vd_op_shape *full, const vd_op_shape *part,
                       int32_t dim, int64_t off, int to_part) {
  int64_t n = vd_op_shape_numel(part), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(part, f, idx);
    idx[dim] += off;
    int64_t g = vd_op_shape_ravel(full, idx);
    if (to_part)
      dst[f] = src[g];
    else
      dst[g] = src[f];
  }
}
vd_rc vd_op_i_eval_chunk(const vd_op_call *c) {
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, &c->in_shape[0], &dim, &index, &chunks));
  slice_copy(c->in[0], c->out[0], &c->in_shape[0], &c->out_shape[0], dim, index * c->out_shape[0].d[dim], 1);
  return VD_OK;
}

vd_rc vd_op_i_shape_chunk_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, &c->out_shape[0], &dim, &index, &chunks));
  vd_op_shape w = c->out_shape[0];
  w.d[dim] /= chunks;
  return want_shape(c, 0, 0, &w);
}
vd_rc vd_op_i_eval_chunk_backward(const vd_op_call *c) {
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, &c->out_shape[0], &dim, &index, &chunks));
  memset(c->out[0], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->out_shape[0]));
  slice_copy(c->in[0], c->out[0], &c->out_shape[0], &c->in_shape[0], dim, index * c->in_shape[0].d[dim], 0);
  return VD_OK;
}

/* n parts (shapes ps) concatenated along dim give `full`. */
static vd_rc concat_shapes(const vd_op_call *c, const vd_op_shape *ps, uint32_t n, int is_out,
                           const vd_op_shape *full, const char *ffield, int32_t dim) {
  int64_t tot = 0;
  char f[32];
  for (uint32_t i = 0; i < n; i++) {
    vd_op_shape w = *full;
    w.d[dim] = ps[i].d[dim];
    if (ps[i].ndim != full->ndim || !same(&w, &ps[i])) {
      char a[96], b[96];
      shape_str(full, a, sizeof(a));
      shape_str(&ps[i], b, sizeof(b));
      return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i),
                 "expected shape %s except along dim %d, got %s", a, dim, b);
    }
    tot += ps[i].d[dim];
  }
  if (tot != full->d[dim])
    return bad(c, ffield, "expected extent %lld along dim %d (sum of the pieces), got %lld", (long long)tot, dim,
               (long long)full->d[dim]);
  return VD_OK;
}

vd_rc vd_op_i_shape_concat(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->out_shape[0].ndim, &dim));
  return concat_shapes(c, c->in_shape, c->n_in, 0, &c->out_shape[0], "outputs[0]", dim);
}
static void concat_into(double *out, const vd_op_shape *os, const double *const *in, const vd_op_shape *is,
                        uint32_t n, int32_t dim) {
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    slice_copy(in[i], out, os, &is[i], dim, off, 0);
    off += is[i].d[dim];
  }
}
vd_rc vd_op_i_eval_concat(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->out_shape[0].ndim, &dim));
  concat_into(c->out[0], &c->out_shape[0], c->in, c->in_shape, c->n_in, dim);
  return VD_OK;
}

static vd_rc want_bcast(const vd_op_call *c, const vd_op_shape *small, const vd_op_shape *big,
                        const char *field) {
  if (vd_op_bcast_to(small, big)) return VD_OK;
  char a[96], b[96];
  shape_str(small, a, sizeof(a));
  shape_str(big, b, sizeof(b));
  return bad(c, field, "shape %s does not broadcast to %s", a, b);
}

vd_rc vd_op_i_shape_expand(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_bcast(c, &c->in_shape[0], &c->out_shape[0], "inputs[0]");
}
vd_rc vd_op_i_eval_expand(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(&c->out_shape[0], f, idx);
    c->out[0][f] = c->in[0][vd_op_bcast_src(&c->out_shape[0], &c->in_shape[0], idx)];
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_sum_to(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_bcast(c, &c->out_shape[0], &c->in_shape[0], "outputs[0]");
}
vd_rc vd_op_i_eval_sum_to(const vd_op_call *c) {
  sum_to(c->in[0], &c->in_shape[0], c->out[0], &c->out_shape[0], 1.0);
  return VD_OK;
}

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

typedef double (*binary_fn)(double a, double b);
static double f_add(double a, double b) { return a + b; }
static double f_sub(double a, double b) { return a - b; }
static double f_mul(double a, double b) { return a * b; }
static double f_div(double a, double b) { return a / b; }

static vd_rc binary(const vd_op_call *c, binary_fn f) {
  const vd_op_shape *os = &c->out_shape[0];
  int64_t n = vd_op_shape_numel(os), idx[VD_MAX_DIMS];
  if (c->n_in == 1) {
    double s = aflt(c, "scalar", 0.0);
    for (int64_t i = 0; i < n; i++) c->out[0][i] = f(c->in[0][i], s);
    return VD_OK;
  }
  for (int64_t i = 0; i < n; i++) {
    vd_op_shape_unravel(os, i, idx);
    c->out[0][i] = f(c->in[0][vd_op_bcast_src(os, &c->in_shape[0], idx)], c->in[1][vd_op_bcast_src(os, &c->in_shape[1], idx)]);
  }
  return VD_OK;
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
vd_rc vd_op_i_shape_silu_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_silu_backward(const vd_op_call *c) { return unary_bwd(c, d_silu, 0); }
vd_rc vd_op_i_shape_gelu_backward(const vd_op_call *c) { return shape_same2(c); }
vd_rc vd_op_i_eval_gelu_backward(const vd_op_call *c) { return unary_bwd(c, aint(c, "tanh", 0) ? d_gelu_tanh : d_gelu, 0); }

/* ---- dropout ----------------------------------------------------------------
 *
 * y = x * m(x), gx = g * m(x): the mask is modelled as a deterministic
 * function of the element's value (docs/operators.md, "Dropout").  The
 * symbolic side leaves m uninterpreted (smt_encode.c); here m needs SOME
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
    int64_t id = to_int(c->in[0][p]);
    int64_t r = id == INT64_MIN ? -1 : id - start;
    for (int64_t j = 0; j < h; j++) c->out[0][p * h + j] = (r >= 0 && r < rows) ? c->in[1][r * h + j] : 0.0;
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
    int64_t id = to_int(c->in[0][p]);
    int64_t r = id == INT64_MIN ? -1 : id - start;
    if (r < 0 || r >= rows) continue;
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
vd_rc vd_op_i_eval_rms_norm(const vd_op_call *c) {
  norm_rows n = norm_rows_of(c, 1e-6);
  int64_t h = n.h;
  for (int64_t r = 0; r < n.rows; r++) {
    const double *x = c->in[0] + r * h;
    double inv = rms_inv(x, h, n.dv, n.eps);
    for (int64_t i = 0; i < h; i++) c->out[0][r * h + i] = x[i] * inv * c->in[1][i];
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_rms_norm_backward(const vd_op_call *c) { return shape_norm_backward(c, 1); }
vd_rc vd_op_i_eval_rms_norm_backward(const vd_op_call *c) {
  norm_rows n = norm_rows_of(c, 1e-6);
  int64_t h = n.h;
  const double *w = c->in[1];
  memset(c->out[1], 0, sizeof(double) * (size_t)h);
  for (int64_t r = 0; r < n.rows; r++) {
    const double *x = c->in[0] + r * h, *g = c->in[2] + r * h;
    double dot = 0, inv = rms_inv(x, h, n.dv, n.eps);
    for (int64_t i = 0; i < h; i++) dot += g[i] * w[i] * x[i];
    for (int64_t i = 0; i < h; i++) {
      c->out[0][r * h + i] = inv * w[i] * g[i] - x[i] * inv * inv * inv * dot / (double)n.dv;
      c->out[1][i] += g[i] * x[i] * inv;
    }
  }
  return VD_OK;
}

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
vd_rc vd_op_i_eval_layer_norm(const vd_op_call *c) {
  norm_rows n = norm_rows_of(c, 1e-5);
  int64_t h = n.h;
  for (int64_t r = 0; r < n.rows; r++) {
    const double *x = c->in[0] + r * h;
    double mu, inv;
    ln_row(x, h, n.dv, n.eps, &mu, &inv);
    for (int64_t i = 0; i < h; i++) c->out[0][r * h + i] = (x[i] - mu) * inv * c->in[1][i] + c->in[2][i];
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_layer_norm_backward(const vd_op_call *c) { return shape_norm_backward(c, 2); }
vd_rc vd_op_i_eval_layer_norm_backward(const vd_op_call *c) {
  norm_rows n = norm_rows_of(c, 1e-5);
  int64_t h = n.h;
  const double *w = c->in[1];
  memset(c->out[1], 0, sizeof(double) * (size_t)h);
  memset(c->out[2], 0, sizeof(double) * (size_t)h);
  for (int64_t r = 0; r < n.rows; r++) {
    const double *x = c->in[0] + r * h, *g = c->in[2] + r * h;
    double mu, inv, m1 = 0, m2 = 0;
    ln_row(x, h, n.dv, n.eps, &mu, &inv);
    for (int64_t i = 0; i < h; i++) {
      double xh = (x[i] - mu) * inv, gh = g[i] * w[i];
      m1 += gh;
      m2 += gh * xh;
      c->out[1][i] += g[i] * xh;
      c->out[2][i] += g[i];
    }
    m1 /= (double)n.dv;
    m2 /= (double)n.dv;
    for (int64_t i = 0; i < h; i++) {
      double xh = (x[i] - mu) * inv;
      c->out[0][r * h + i] = inv * (g[i] * w[i] - m1 - xh * m2);
    }
  }
  return VD_OK;
}

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
/* Rotation angle of pair i of a head of width d at position pos. */
static double rope_angle(double pos, double i, double d, double theta) { return pos * pow(theta, -2.0 * i / d); }

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

/* Lines along dim: element (o, j, i) at (o * len + j) * inner + i. */
typedef struct {
  int64_t outer, len, inner;
} lines_t;
static lines_t lines_of(const vd_op_shape *s, int32_t dim) {
  lines_t l = {1, s->d[dim], 1};
  for (int32_t i = 0; i < dim; i++) l.outer *= s->d[i];
  for (int32_t i = dim + 1; i < s->ndim; i++) l.inner *= s->d[i];
  return l;
}
vd_rc vd_op_i_shape_softmax(const vd_op_call *c) {
  VD_CHECK(shape_same1(c));
  int32_t dim;
  return get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim);
}
vd_rc vd_op_i_eval_softmax(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim));
  lines_t l = lines_of(&c->in_shape[0], dim);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) {
      const double *x = c->in[0] + o * l.len * l.inner + i;
      double *y = c->out[0] + o * l.len * l.inner + i;
      double mx = -INFINITY, s = 0;
      for (int64_t j = 0; j < l.len; j++) mx = fmax(mx, x[j * l.inner]);
      for (int64_t j = 0; j < l.len; j++) s += (y[j * l.inner] = exp(x[j * l.inner] - mx));
      for (int64_t j = 0; j < l.len; j++) y[j * l.inner] /= s;
    }
  return VD_OK;
}
vd_rc vd_op_i_shape_softmax_backward(const vd_op_call *c) {
  VD_CHECK(shape_same2(c));
  int32_t dim;
  return get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim);
}
vd_rc vd_op_i_eval_softmax_backward(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", -1, c->in_shape[0].ndim, &dim));
  lines_t l = lines_of(&c->in_shape[0], dim);
  for (int64_t o = 0; o < l.outer; o++)
    for (int64_t i = 0; i < l.inner; i++) {
      int64_t base = o * l.len * l.inner + i;
      const double *y = c->in[0] + base, *g = c->in[1] + base;
      double *gx = c->out[0] + base, s = 0;
      for (int64_t j = 0; j < l.len; j++) s += g[j * l.inner] * y[j * l.inner];
      for (int64_t j = 0; j < l.len; j++) gx[j * l.inner] = y[j * l.inner] * (g[j * l.inner] - s);
    }
  return VD_OK;
}

/* pick: x [n, v], labels [n] -> y [n] */
vd_rc vd_op_i_shape_pick(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  vd_op_shape n = {.ndim = 1, .d = {c->in_shape[0].d[0]}};
  VD_CHECK(want_shape(c, 0, 1, &n));
  return want_shape(c, 1, 0, &n);
}
vd_rc vd_op_i_eval_pick(const vd_op_call *c) {
  int64_t n = c->in_shape[0].d[0], v = c->in_shape[0].d[1], start = aint(c, "start", 0);
  for (int64_t i = 0; i < n; i++) {
    int64_t lab = to_int(c->in[1][i]);
    int64_t j = lab == INT64_MIN ? -1 : lab - start;
    c->out[0][i] = (j >= 0 && j < v) ? c->in[0][i * v + j] : 0.0;
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_pick_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_ndim(c, 1, 0, 2, 2));
  vd_op_shape n = {.ndim = 1, .d = {c->out_shape[0].d[0]}};
  VD_CHECK(want_shape(c, 0, 0, &n));
  return want_shape(c, 0, 1, &n);
}
vd_rc vd_op_i_eval_pick_backward(const vd_op_call *c) {
  int64_t n = c->out_shape[0].d[0], v = c->out_shape[0].d[1], start = aint(c, "start", 0);
  memset(c->out[0], 0, sizeof(double) * (size_t)(n * v));
  for (int64_t i = 0; i < n; i++) {
    int64_t lab = to_int(c->in[0][i]);
    int64_t j = lab == INT64_MIN ? -1 : lab - start;
    if (j >= 0 && j < v) c->out[0][i * v + j] = c->in[1][i];
  }
  return VD_OK;
}

/* ---- mixture of experts -------------------------------------------------- */

static vd_rc shape_topk(const vd_op_call *c, uint32_t n_in) {
  VD_CHECK(want_count(c, n_in, 1));
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  for (uint32_t i = 1; i < n_in; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  int64_t k = aint(c, "k", 1), e = c->in_shape[0].d[1];
  if (k < 1 || k > e) return bad(c, "attrs.k", "expected in [1, %lld], got %lld", (long long)e, (long long)k);
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
/* Gates of one row into p (0 where not selected); sel marks the selection.
 * Ties go to the lower index (strict > while scanning upwards). */
static void topk_row(const double *x, int64_t e, int64_t k, unsigned char *sel, double *p) {
  memset(sel, 0, (size_t)e);
  double mx = -INFINITY;
  for (int64_t t = 0; t < k; t++) {
    int64_t best = -1;
    for (int64_t j = 0; j < e; j++)
      if (!sel[j] && (best < 0 || x[j] > x[best])) best = j;
    sel[best] = 1;
    if (t == 0) mx = x[best];
  }
  double s = 0;
  for (int64_t j = 0; j < e; j++) s += (p[j] = sel[j] ? exp(x[j] - mx) : 0.0);
  for (int64_t j = 0; j < e; j++) p[j] /= s;
}
vd_rc vd_op_i_shape_topk_gate(const vd_op_call *c) { return shape_topk(c, 1); }
vd_rc vd_op_i_eval_topk_gate(const vd_op_call *c) {
  int64_t t = c->in_shape[0].d[0], e = c->in_shape[0].d[1], k = aint(c, "k", 1);
  unsigned char *sel = vd_malloc((size_t)e + 1);
  if (!sel) return VD_OOM(c->diag);
  for (int64_t r = 0; r < t; r++) topk_row(c->in[0] + r * e, e, k, sel, c->out[0] + r * e);
  vd_free(sel);
  return VD_OK;
}
vd_rc vd_op_i_shape_topk_gate_backward(const vd_op_call *c) { return shape_topk(c, 2); }
vd_rc vd_op_i_eval_topk_gate_backward(const vd_op_call *c) {
  int64_t t = c->in_shape[0].d[0], e = c->in_shape[0].d[1], k = aint(c, "k", 1);
  unsigned char *sel = vd_malloc((size_t)e + 1);
  double *p = vd_calloc((size_t)e + 1, sizeof(double));
  if (!sel || !p) {
    vd_free(sel);
    vd_free(p);
    return VD_OOM(c->diag);
  }
  for (int64_t r = 0; r < t; r++) {
    const double *g = c->in[1] + r * e;
    double *gx = c->out[0] + r * e, dot = 0;
    topk_row(c->in[0] + r * e, e, k, sel, p);
    for (int64_t j = 0; j < e; j++) dot += g[j] * p[j];
    for (int64_t j = 0; j < e; j++) gx[j] = sel[j] ? p[j] * (g[j] - dot) : 0.0;
  }
  vd_free(sel);
  vd_free(p);
  return VD_OK;
}

/* grouped_mlp: x [t,h], gates [t,G], w1 [el,f,h], w3 [el,f,h], w2 [el,h,f] */
typedef struct {
  int64_t t, h, f, el, G, col0; /* gate column of local expert e: col0 + e */
} gmlp_geo;
static vd_rc shape_gmlp(const vd_op_call *c, gmlp_geo *g) {
  const vd_op_shape *x = &c->in_shape[0], *ga = &c->in_shape[1], *w1 = &c->in_shape[2];
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  VD_CHECK(want_ndim(c, 0, 1, 2, 2));
  VD_CHECK(want_ndim(c, 0, 2, 3, 3));
  g->t = x->d[0];
  g->h = x->d[1];
  g->el = w1->d[0];
  g->f = w1->d[1];
  g->G = ga->d[1];
  vd_op_shape w = {.ndim = 3, .d = {g->el, g->f, g->h}};
  VD_CHECK(want_shape(c, 0, 2, &w));
  VD_CHECK(want_shape(c, 0, 3, &w));
  vd_op_shape w2 = {.ndim = 3, .d = {g->el, g->h, g->f}};
  VD_CHECK(want_shape(c, 0, 4, &w2));
  if (ga->d[0] != g->t) return bad(c, "inputs[1]", "expected %lld rows (tokens), got %lld", (long long)g->t, (long long)ga->d[0]);
  int64_t es = aint(c, "expert_start", 0);
  if (g->G == g->el)
    g->col0 = 0;
  else if (es >= 0 && es + g->el <= g->G)
    g->col0 = es;
  else
    return bad(c, "inputs[1]", "expected %lld gate columns or expert_start+%lld <= columns, got %lld columns, expert_start %lld",
               (long long)g->el, (long long)g->el, (long long)g->G, (long long)es);
  return VD_OK;
}
vd_rc vd_op_i_shape_grouped_mlp(const vd_op_call *c) {
  VD_CHECK(want_count(c, 5, 1));
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
/* Per (token, expert): a = w1 x, b = w3 x, hd = silu(a) * b, o = w2 hd. */
/* grouped_mlp's experts are vd_moe_expert (ops_moe.c), over 5 f + 2 h doubles. */
static vd_moe_expert gmlp_expert(const gmlp_geo *g, const vd_op_call *c, double *buf) {
  vd_moe_expert x = {g->h, g->f, c->in[2], c->in[3], c->in[4], buf, buf + g->f, buf + 2 * g->f,
                     buf + 5 * g->f, buf + 3 * g->f, buf + 4 * g->f, buf + 5 * g->f + g->h};
  return x;
}
vd_rc vd_op_i_eval_grouped_mlp(const vd_op_call *c) {
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  double *buf = vd_calloc((size_t)(5 * g.f + 2 * g.h + 1), sizeof(double));
  if (!buf) return VD_OOM(c->diag);
  vd_moe_expert x = gmlp_expert(&g, c, buf);
  memset(c->out[0], 0, sizeof(double) * (size_t)(g.t * g.h));
  for (int64_t t = 0; t < g.t; t++)
    for (int64_t e = 0; e < g.el; e++) {
      double gate = c->in[1][t * g.G + g.col0 + e];
      vd_moe_expert_fwd(&x, e, c->in[0] + t * g.h);
      for (int64_t i = 0; i < g.h; i++) c->out[0][t * g.h + i] += gate * x.o[i];
    }
  vd_free(buf);
  return VD_OK;
}
vd_rc vd_op_i_shape_grouped_mlp_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 6, 5));
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  VD_CHECK(want_shape(c, 0, 5, &c->in_shape[0]));
  for (uint32_t i = 0; i < 5; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[i]));
  return VD_OK;
}
vd_rc vd_op_i_eval_grouped_mlp_backward(const vd_op_call *c) {
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  double *buf = vd_calloc((size_t)(5 * g.f + 2 * g.h + 1), sizeof(double));
  if (!buf) return VD_OOM(c->diag);
  vd_moe_expert x = gmlp_expert(&g, c, buf);
  double *gx = c->out[0], *gg = c->out[1], *gw1 = c->out[2], *gw3 = c->out[3], *gw2 = c->out[4];
  for (uint32_t i = 0; i < 5; i++)
    memset(c->out[i], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[i]));
  for (int64_t t = 0; t < g.t; t++) {
    const double *tok = c->in[0] + t * g.h, *gy = c->in[5] + t * g.h;
    for (int64_t e = 0; e < g.el; e++) {
      double gate = c->in[1][t * g.G + g.col0 + e];
      vd_moe_expert_fwd(&x, e, tok);
      gg[t * g.G + g.col0 + e] += vd_moe_expert_bwd(&x, e, tok, gy, gate, gx + t * g.h, gw1, gw3, gw2);
    }
  }
  vd_free(buf);
  return VD_OK;
}

/* ---- collectives (one call = every participant, group order) ------------- */

static uint32_t parts(const vd_op_call *c) { return c->n_part ? c->n_part : c->n_in; }

/* P inputs and P outputs, all inputs of one shape. */
static vd_rc shape_coll(const vd_op_call *c) {
  uint32_t P = parts(c);
  VD_CHECK(want_count(c, P, P));
  for (uint32_t i = 1; i < P; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  return VD_OK;
}

vd_rc vd_op_i_shape_all_reduce(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  const char *r = astr(c, "reduce", "sum");
  if (strcmp(r, "sum") != 0 && strcmp(r, "max") != 0)
    return bad(c, "attrs.reduce", "expected \"sum\" or \"max\", got \"%s\"", r);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_reduce(const vd_op_call *c) {
  int mx = strcmp(astr(c, "reduce", "sum"), "max") == 0;
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t e = 0; e < n; e++) {
    double s = c->in[0][e];
    for (uint32_t i = 1; i < c->n_in; i++) s = mx ? fmax(s, c->in[i][e]) : s + c->in[i][e];
    for (uint32_t i = 0; i < c->n_out; i++) c->out[i][e] = s;
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_all_gather(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  vd_op_shape w = c->in_shape[0];
  w.d[dim] *= parts(c);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_gather(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  for (uint32_t i = 0; i < c->n_out; i++) concat_into(c->out[i], &c->out_shape[i], c->in, c->in_shape, c->n_in, dim);
  return VD_OK;
}

vd_rc vd_op_i_shape_reduce_scatter(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  uint32_t P = parts(c);
  if (c->in_shape[0].d[dim] % P)
    return bad(c, "inputs[0]", "extent %lld along dim %d is not divisible by the group size %u",
               (long long)c->in_shape[0].d[dim], dim, P);
  vd_op_shape w = c->in_shape[0];
  w.d[dim] /= P;
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_reduce_scatter(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  const vd_op_shape *os = &c->out_shape[0];
  int64_t n = vd_op_shape_numel(os), idx[VD_MAX_DIMS];
  for (uint32_t p = 0; p < c->n_out; p++)
    for (int64_t f = 0; f < n; f++) {
      vd_op_shape_unravel(os, f, idx);
      idx[dim] += (int64_t)p * os->d[dim];
      int64_t src = vd_op_shape_ravel(&c->in_shape[0], idx);
      double s = 0;
      for (uint32_t i = 0; i < c->n_in; i++) s += c->in[i][src];
      c->out[p][f] = s;
    }
  return VD_OK;
}

static vd_rc a2a_dims(const vd_op_call *c, int32_t *sd, int32_t *cd) {
  VD_CHECK(get_dim(c, "split_dim", 0, c->in_shape[0].ndim, sd));
  return get_dim(c, "concat_dim", 0, c->in_shape[0].ndim, cd);
}
vd_rc vd_op_i_shape_all_to_all(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t sd, cd;
  VD_CHECK(a2a_dims(c, &sd, &cd));
  uint32_t P = parts(c);
  if (c->in_shape[0].d[sd] % P)
    return bad(c, "inputs[0]", "extent %lld along split_dim %d is not divisible by the group size %u",
               (long long)c->in_shape[0].d[sd], sd, P);
  vd_op_shape w = c->in_shape[0];
  w.d[sd] /= P;
  w.d[cd] *= P;
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_to_all(const vd_op_call *c) {
  int32_t sd, cd;
  VD_CHECK(a2a_dims(c, &sd, &cd));
  uint32_t P = parts(c);
  const vd_op_shape *xs = &c->in_shape[0], *ys = &c->out_shape[0];
  int64_t cs_sd = xs->d[sd] / P; /* chunk extent along split_dim */
  int64_t cs_cd = sd == cd ? cs_sd : xs->d[cd]; /* chunk extent along concat_dim */
  int64_t n = vd_op_shape_numel(ys), idx[VD_MAX_DIMS];
  for (uint32_t i = 0; i < c->n_out; i++)
    for (int64_t f = 0; f < n; f++) {
      vd_op_shape_unravel(ys, f, idx);
      int64_t j = idx[cd] / cs_cd;
      idx[cd] -= j * cs_cd;
      idx[sd] += (int64_t)i * cs_sd;
      c->out[i][f] = c->in[j][vd_op_shape_ravel(xs, idx)];
    }
  return VD_OK;
}

vd_rc vd_op_i_shape_broadcast(const vd_op_call *c) {
  if (c->n_in != 1) return bad(c, "inputs", "expected 1 input (the root's), got %u", c->n_in);
  int64_t root = aint(c, "root", 0);
  if (root < 0 || (c->n_part && root >= c->n_part))
    return bad(c, "attrs.root", "expected a group position in [0, %u), got %lld", c->n_part, (long long)root);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_broadcast(const vd_op_call *c) {
  size_t n = (size_t)vd_op_shape_numel(&c->in_shape[0]);
  for (uint32_t i = 0; i < c->n_out; i++) memcpy(c->out[i], c->in[0], n * sizeof(double));
  return VD_OK;
}

/* send and recv: a merged pair has the sender's x and the receiver's y. */
static vd_rc shape_move(const vd_op_call *c) {
  if (c->n_in > 1 || c->n_out > 1) return bad(c, "inputs", "a move has one input and one output");
  if (c->n_out == 1 && c->n_in == 0) return bad(c, "inputs", "recv without a matching send");
  if (c->n_out == 1) return want_shape(c, 1, 0, &c->in_shape[0]);
  return VD_OK;
}
static vd_rc eval_move(const vd_op_call *c) {
  if (c->n_in == 1 && c->n_out == 1) copy0(c);
  return VD_OK;
}
vd_rc vd_op_i_shape_send(const vd_op_call *c) { return shape_move(c); }
vd_rc vd_op_i_eval_send(const vd_op_call *c) { return eval_move(c); }
vd_rc vd_op_i_shape_recv(const vd_op_call *c) { return shape_move(c); }
vd_rc vd_op_i_eval_recv(const vd_op_call *c) { return eval_move(c); }

/* ---- optimizer and clipping ---------------------------------------------- */

vd_rc vd_op_i_shape_sumsq(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  if (vd_op_shape_numel(&c->out_shape[0]) != 1) return bad(c, "outputs[0]", "expected a scalar");
  return VD_OK;
}
vd_rc vd_op_i_eval_sumsq(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += c->in[0][i] * c->in[0][i];
  c->out[0][0] = s;
  return VD_OK;
}
vd_rc vd_op_i_shape_clip_coef(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  if (vd_op_shape_numel(&c->in_shape[0]) != 1) return bad(c, "inputs[0]", "expected a scalar");
  if (vd_op_shape_numel(&c->out_shape[0]) != 1) return bad(c, "outputs[0]", "expected a scalar");
  return VD_OK;
}
/* Gradient clipping coefficient from the total squared norm; also the
 * symbol clip_coef's meaning. */
static double clip_coef_f(double total_sq, double max_norm) { return fmin(1.0, max_norm / (sqrt(total_sq) + 1e-6)); }
vd_rc vd_op_i_eval_clip_coef(const vd_op_call *c) {
  c->out[0][0] = clip_coef_f(c->in[0][0], aflt(c, "max_norm", 1.0));
  return VD_OK;
}
vd_rc vd_op_i_shape_sgd_step(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_shape(c, 0, 1, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_eval_sgd_step(const vd_op_call *c) {
  double lr = aflt(c, "lr", 1e-3), wd = aflt(c, "weight_decay", 0.0);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t i = 0; i < n; i++) {
    double w = c->in[0][i];
    c->out[0][i] = w - lr * (c->in[1][i] + wd * w);
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_adam_step(const vd_op_call *c) {
  VD_CHECK(want_count(c, 4, 3));
  for (uint32_t i = 1; i < 4; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  for (uint32_t i = 0; i < 3; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  if (aint(c, "step", 1) < 1) return bad(c, "attrs.step", "expected >= 1, got %lld", (long long)aint(c, "step", 1));
  return VD_OK;
}
vd_rc vd_op_i_eval_adam_step(const vd_op_call *c) {
  double lr = aflt(c, "lr", 1e-3), b1 = aflt(c, "beta1", 0.9), b2 = aflt(c, "beta2", 0.999);
  double eps = aflt(c, "eps", 1e-8), wd = aflt(c, "weight_decay", 0.0);
  double step = (double)aint(c, "step", 1);
  double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t i = 0; i < n; i++) {
    double w = c->in[0][i], g = c->in[1][i];
    double m = b1 * c->in[2][i] + (1.0 - b1) * g;
    double v = b2 * c->in[3][i] + (1.0 - b2) * g * g;
    c->out[0][i] = w - lr * (m / c1) / (sqrt(v / c2) + eps) - lr * wd * w;
    c->out[1][i] = m;
    c->out[2][i] = v;
  }
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
    {"gelu", u_gelu},       {"gelu_grad", d_gelu},
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
