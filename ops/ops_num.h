/*
 * ops/ops_num.h - helpers shared by the numeric evaluators and shape checks
 * (ops/ops_num_*.c): error lines, shape and attribute readers, the shape
 * rules many operators share, and the elementwise kernels.  Internal to
 * ops/ (file-local: each evaluator file gets its own copy).
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
#ifndef VD_OPS_NUM_H
#define VD_OPS_NUM_H

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

/* The helpers below are compiled into each evaluator file that includes
 * this header (file-local, as they were in one file); unused is no error. */
#define VD_NUM_SHARED static __attribute__((unused))

/* ---- helpers ------------------------------------------------------------- */

VD_NUM_SHARED const char *rec(const vd_op_call *c) { return c->record ? c->record : "node"; }
VD_NUM_SHARED const char *opname(const vd_op_call *c) { return vd_op_table[c->op].name; }

#define bad vd_op_i_bad
/* vd_op_i_bad (ops_moe.h): the one error line, in ops_num.c */

VD_NUM_SHARED void shape_str(const vd_op_shape *s, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < s->ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, i ? ",%lld" : "%lld", (long long)s->d[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

VD_NUM_SHARED char *fname(char *buf, size_t n, const char *what, uint32_t i) {
  snprintf(buf, n, "%s[%u]", what, i);
  return buf;
}

VD_NUM_SHARED int same(const vd_op_shape *a, const vd_op_shape *b) {
  if (a->ndim != b->ndim) return 0;
  for (int32_t i = 0; i < a->ndim; i++)
    if (a->d[i] != b->d[i]) return 0;
  return 1;
}

/* Fails unless `got` (outputs[i] or inputs[i]) has shape `want`. */
VD_NUM_SHARED vd_rc want_shape(const vd_op_call *c, int is_out, uint32_t i, const vd_op_shape *want) {
  const vd_op_shape *got = is_out ? &c->out_shape[i] : &c->in_shape[i];
  if (same(got, want)) return VD_OK;
  char f[32], a[96], b[96];
  shape_str(want, a, sizeof(a));
  shape_str(got, b, sizeof(b));
  return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i), "expected shape %s, got %s", a, b);
}

VD_NUM_SHARED vd_rc want_ndim(const vd_op_call *c, int is_out, uint32_t i, int32_t lo, int32_t hi) {
  const vd_op_shape *s = is_out ? &c->out_shape[i] : &c->in_shape[i];
  if (s->ndim >= lo && s->ndim <= hi) return VD_OK;
  char f[32];
  return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i),
             "expected %d..%d dimensions, got %d", lo, hi, s->ndim);
}

VD_NUM_SHARED vd_rc want_count(const vd_op_call *c, uint32_t n_in, uint32_t n_out) {
  if (c->n_in != n_in) return bad(c, "inputs", "expected %u inputs, got %u", n_in, c->n_in);
  if (c->n_out != n_out) return bad(c, "outputs", "expected %u outputs, got %u", n_out, c->n_out);
  return VD_OK;
}

VD_NUM_SHARED int64_t aint(const vd_op_call *c, const char *key, int64_t def) {
  return c->node && c->plan ? vd_node_attr_int(c->plan, c->node, key, def) : def;
}
/* The element count an average divides by: attribute "divisor" when set
 * (shape reduction sets it to the full-size count, docs/shape-reduction.md
 * AVG), else the count the operator averages over. */
VD_NUM_SHARED int64_t divisor(const vd_op_call *c, int64_t count) {
  int64_t v = aint(c, "divisor", count);
  return v > 0 ? v : count;
}
VD_NUM_SHARED double aflt(const vd_op_call *c, const char *key, double def) {
  return c->node && c->plan ? vd_node_attr_float(c->plan, c->node, key, def) : def;
}
VD_NUM_SHARED const char *astr(const vd_op_call *c, const char *key, const char *def) {
  return c->node && c->plan ? vd_node_attr_str(c->plan, c->node, key, def) : def;
}
VD_NUM_SHARED int ahas(const vd_op_call *c, const char *key) {
  return c->node && c->plan && vd_node_attr(c->plan, c->node, key) != NULL;
}

/* Normalizes dimension attribute `key` against ndim into *dim. */
VD_NUM_SHARED vd_rc get_dim(const vd_op_call *c, const char *key, int64_t def, int32_t ndim, int32_t *dim) {
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
VD_NUM_SHARED vd_rc get_dims_mask(const vd_op_call *c, int32_t ndim, int *mask) {
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
VD_NUM_SHARED void sum_to(const double *g, const vd_op_shape *gs, double *y, const vd_op_shape *ys, double factor) {
  int64_t ny = vd_op_shape_numel(ys), ng = vd_op_shape_numel(gs);
  int64_t idx[VD_MAX_DIMS];
  memset(y, 0, sizeof(double) * (size_t)ny);
  for (int64_t f = 0; f < ng; f++) {
    vd_op_shape_unravel(gs, f, idx);
    y[vd_op_bcast_src(gs, ys, idx)] += factor * g[f];
  }
}

VD_NUM_SHARED int64_t to_int(double v) {
  if (!(v > -9e15 && v < 9e15)) return INT64_MIN;
  return (int64_t)llround(v);
}

/* The row an index operand's value names (id - start: embedding's row,
 * pick's column), or -1 when it is outside [0, n) or not an integer. */
VD_NUM_SHARED int64_t index_row(double id, int64_t start, int64_t n) {
  int64_t v = to_int(id);
  int64_t r = v == INT64_MIN ? -1 : v - start;
  return r >= 0 && r < n ? r : -1;
}

VD_NUM_SHARED double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
VD_NUM_SHARED double gelu_f(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
VD_NUM_SHARED double gelu_g(double x) {
  return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}
/* the tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) */
VD_NUM_SHARED double gelu_tanh_f(double x) {
  double u = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(u));
}
VD_NUM_SHARED double gelu_tanh_g(double x) {
  double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
/* vd_op_i_silu, vd_op_i_silu_grad (ops_moe.h): in ops_num.c */
#define silu_f vd_op_i_silu
#define silu_g vd_op_i_silu_grad

/* ---- shape rules shared by many operators -------------------------------- */

/* One input, one output of the same shape. */
VD_NUM_SHARED vd_rc shape_same1(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}

/* (x, g) -> gx, all of one shape. */
VD_NUM_SHARED vd_rc shape_same2(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_shape(c, 0, 1, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}

VD_NUM_SHARED void copy0(const vd_op_call *c) {
  memcpy(c->out[0], c->in[0], sizeof(double) * (size_t)vd_op_shape_numel(&c->out_shape[0]));
}

typedef double (*unary_fn)(double x, double p);

VD_NUM_SHARED vd_rc unary(const vd_op_call *c, unary_fn f, double p) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t i = 0; i < n; i++) c->out[0][i] = f(c->in[0][i], p);
  return VD_OK;
}

/* gx = g * f(x) */
VD_NUM_SHARED vd_rc unary_bwd(const vd_op_call *c, unary_fn f, double p) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t i = 0; i < n; i++) c->out[0][i] = c->in[1][i] * f(c->in[0][i], p);
  return VD_OK;
}

/* ---- kernels shared across the evaluator files --------------------------- */

VD_NUM_SHARED vd_rc want_bcast(const vd_op_call *c, const vd_op_shape *small, const vd_op_shape *big,
                        const char *field) {
  if (vd_op_bcast_to(small, big)) return VD_OK;
  char a[96], b[96];
  shape_str(small, a, sizeof(a));
  shape_str(big, b, sizeof(b));
  return bad(c, field, "shape %s does not broadcast to %s", a, b);
}

typedef double (*binary_fn)(double a, double b);
VD_NUM_SHARED double f_add(double a, double b) { return a + b; }
VD_NUM_SHARED double f_sub(double a, double b) { return a - b; }
VD_NUM_SHARED double f_mul(double a, double b) { return a * b; }
VD_NUM_SHARED double f_div(double a, double b) { return a / b; }

VD_NUM_SHARED vd_rc binary(const vd_op_call *c, binary_fn f) {
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

/* Rotation angle of pair i of a head of width d at position pos. */
VD_NUM_SHARED double rope_angle(double pos, double i, double d, double theta) { return pos * pow(theta, -2.0 * i / d); }

/* Gates of one row into p (0 where not selected); sel marks the selection.
 * Ties go to the lower index (strict > while scanning upwards). */
VD_NUM_SHARED void topk_row(const double *x, int64_t e, int64_t k, unsigned char *sel, double *p) {
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

/* Gradient clipping coefficient from the total squared norm; also the
 * symbol clip_coef's meaning. */
VD_NUM_SHARED double clip_coef_f(double total_sq, double max_norm) { return fmin(1.0, max_norm / (sqrt(total_sq) + 1e-6)); }

#endif
