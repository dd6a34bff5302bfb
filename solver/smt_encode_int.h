/*
 * solver/smt_encode_int.h - private to the operator encoders (smt_encode.c
 * and its family smt_encode_move.c, smt_encode_arith.c, smt_encode_layer.c,
 * smt_encode_experts.c): the attribute readers, the count scales of
 * reduced contractions, the per-element accumulator, the few bodies two
 * families share, and ENC(name), which defines an operator's encoder
 * vd_smt_i_enc_<name> behind the prologue/epilogue of smt_encode.c.
 *
 * Everything here is static inline so that each family file keeps the
 * helpers it uses as its own; the representation choices and the
 * SOUNDNESS rule every encoder obeys are in smt_encode.c's header.
 */
#ifndef VD_SMT_ENCODE_INT_H
#define VD_SMT_ENCODE_INT_H

#include <stdint.h>
#include <string.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "smt.h"
#include "smt_moe.h" /* the nnScaler MoE rows' vd_smt_i_enc_<name> aliases */

typedef const struct vd_op_encode_call call_t;

/* Input i / output i of the call `c` in scope. */
#define IN(i) (c->in[i])
#define OUT(i) (c->out[i])


static inline const char *rec(call_t *c) { return c->record ? c->record : "node"; }

static inline int64_t aint(call_t *c, const char *key, int64_t def) {
  return c->node && c->plan ? vd_node_attr_int(c->plan, c->node, key, def) : def;
}
static inline double aflt(call_t *c, const char *key, double def) {
  return c->node && c->plan ? vd_node_attr_float(c->plan, c->node, key, def) : def;
}
static inline const char *astr(call_t *c, const char *key, const char *def) {
  return c->node && c->plan ? vd_node_attr_str(c->plan, c->node, key, def) : def;
}

/* Dimension attribute, normalized (the shape check has validated it). */
static inline int32_t adim(call_t *c, const char *key, int64_t def, int32_t ndim) {
  int64_t v = aint(c, key, def);
  return (int32_t)(v < 0 ? v + ndim : v);
}

/* `dims` (INT, INTS or absent = all) as a mask, as in ops/ops_num.h. */
static inline void dims_mask(call_t *c, int32_t ndim, int *mask) {
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

/* A reduction's reduced dimensions (dims_mask) and whether it keeps them
 * (`keepdim`), the value returned. */
static inline int reduced_dims(call_t *c, int32_t ndim, int *mask) {
  dims_mask(c, ndim, mask);
  return aint(c, "keepdim", 0) != 0;
}

static inline vd_term I(vd_smt *s, int64_t v) { return vd_smt_num_int(s, v); }
static inline vd_term D(vd_smt *s, double v) { return vd_smt_num_double(s, v); }
static inline vd_term uf1(vd_smt *s, const char *name, vd_term x) { return vd_smt_uf(s, name, 1, &x); }

/* The element count an average divides by: attribute "divisor" when set
 * (shape reduction sets it to the full-size count, docs/shape-reduction.md
 * AVG), else the count the operator averages over. */
static inline int64_t divisor(call_t *c, int64_t count) {
  int64_t v = aint(c, "divisor", count);
  return v > 0 ? v : count;
}

/* ---- COUNT: contractions on reduced shapes (docs/shape-reduction.md) ----- */

/* Full-size shape of input i / output i: the terms' shape when the stage is
 * not reduced. */
static inline const vd_op_shape *full_in(call_t *c, uint32_t i) { return c->in_full ? &c->in_full[i] : &c->in[i]->shape; }
static inline const vd_op_shape *full_out(call_t *c, uint32_t i) {
  return c->out_full ? &c->out_full[i] : &c->out[i]->shape;
}
static inline int64_t ratio_of(int64_t num, int64_t den) { return den > 0 ? num / den : 0; }

/* The count scale of a contraction that maps the full-size `src` onto
 * `dst` (numel(src)/numel(dst) terms per element) and adds `red` terms per
 * element on the reduced shapes. */
static inline vd_term onto_scale(vd_smt *s, const vd_op_shape *src, const vd_op_shape *dst, int64_t red) {
  return vd_smt_count_scale(s, ratio_of(vd_op_shape_numel(src), vd_op_shape_numel(dst)), red);
}

/* The count scale of a contraction over dims [d0, d1) of input i. */
static inline vd_term dims_scale(vd_smt *s, call_t *c, uint32_t i, int32_t d0, int32_t d1) {
  int64_t full = 1, red = 1;
  for (int32_t j = d0; j < d1; j++) {
    full *= full_in(c, i)->d[j];
    red *= c->in[i]->shape.d[j];
  }
  return vd_smt_count_scale(s, full, red);
}

/* A numeral of the sort of index term `id` (Int or Real). */
static inline vd_term idx_num(vd_smt *s, vd_term id, int64_t v) {
  return vd_smt_i_is_int(s, id) ? vd_smt_int_num(s, v) : vd_smt_num_int(s, v);
}

/* ---- accumulator: per output element, a list of terms to sum ------------- */

typedef struct {
  vd_term *buf;
  int64_t *cnt;
  int64_t n, each;
} acc_t;

static inline vd_rc acc_init(acc_t *a, int64_t n, int64_t each, vd_diag *d) {
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

static inline void acc_add(acc_t *a, int64_t i, vd_term t) {
  /* `each` is an upper bound computed by the caller; stay in bounds anyway. */
  if (i < 0 || i >= a->n || a->cnt[i] >= a->each) return;
  a->buf[i * a->each + a->cnt[i]++] = t;
}

/* k: the count scale of the contraction (NULL: 1). */
static inline void acc_done(vd_smt *s, acc_t *a, vd_smt_tensor *out, vd_term k) {
  for (int64_t i = 0; i < a->n && i < out->numel; i++)
    out->t[i] = vd_smt_csum(s, k, (size_t)a->cnt[i], a->buf + i * a->each);
  vd_free(a->buf);
  vd_free(a->cnt);
  a->buf = NULL;
  a->cnt = NULL;
}

static inline void acc_drop(acc_t *a) {
  vd_free(a->buf);
  vd_free(a->cnt);
}

/* out = factor * (g summed over the broadcast dims of out); factor NULL = 1. */
/* out = input 0 summed onto output o's shape (times factor). */
static inline vd_rc sum_to(vd_smt *s, call_t *c, uint32_t o, vd_term factor) {
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

/* ---- bodies two families share ------------------------------------------- */

/* y = x element for element (views, copies, a mask's backward). */
static inline vd_rc copy_into(const vd_smt_tensor *x, vd_smt_tensor *y) {
  for (int64_t f = 0; f < y->numel && f < x->numel; f++) y->t[f] = x->t[f];
  return VD_OK;
}

/* y = f(x0, x1) with broadcasting, or f(x0, attribute "scalar") for one
 * input (arithmetic, apply_mask). */
typedef vd_term (*bin_fn)(vd_smt *s, vd_term a, vd_term b);

static inline vd_rc binary(call_t *c, vd_smt *s, bin_fn f) {
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

/* silu written out over sigmoid (the silu rows and the grouped MLP). */
static inline vd_term silu_t(vd_smt *s, vd_term x) { return vd_smt_mul(s, x, uf1(s, "sigmoid", x)); }
/* silu'(x) = s (1 + x (1 - s)), s = sigmoid(x) */
static inline vd_term silu_grad_t(vd_smt *s, vd_term x) {
  vd_term sg = uf1(s, "sigmoid", x), one = I(s, 1);
  return vd_smt_mul(s, sg, vd_smt_add(s, one, vd_smt_mul(s, x, vd_smt_sub(s, one, sg))));
}

/* ---- ENC: an encoder behind the prologue/epilogue ------------------------ */

typedef vd_rc (*body_fn)(call_t *c, vd_smt *s);

/* The registry's arity and shape check, then body, then the check that
 * every output element got a term (smt_encode.c). */
vd_rc vd_smt_i_enc_run(call_t *c, body_fn body);

#define ENC(name)                                                              \
  static vd_rc body_##name(call_t *c, vd_smt *s);                              \
  vd_rc vd_smt_i_enc_##name(const struct vd_op_encode_call *c) { return vd_smt_i_enc_run(c, body_##name); } \
  static vd_rc body_##name(call_t *c, vd_smt *s)

/* One encoder per row of ops/ops.def, in the family file of its section. */
#define VD_OP(ID, name, ...) vd_rc vd_smt_i_enc_##name(const struct vd_op_encode_call *c);
#include "../ops/ops.def"
#undef VD_OP

#endif
