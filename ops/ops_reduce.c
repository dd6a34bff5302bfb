/*
 * ops/ops_reduce.c - the shape reduction rule of every operator.
 *
 * A rule states, as vd_op_red constraints, how an operator relates the
 * dimensions of its operands: which extents move together (EQ, with the
 * exact factor when there is one), which are contracted or reduced over
 * (MIN2: at least 2 after reduction), which must stay even (EVEN), which
 * attributes are positions along a dimension (POS), which must not shrink
 * (KEEP) and which runs of dimensions are merged or split (PROD).
 * stages/shape.c turns the constraints of a whole stage into one closed form.
 * Why each rule is sound: the registry's reduction_safety sentences and
 * docs/shape-reduction.md.
 *
 * The table below is expanded from ops/ops.def like vd_op_table: a row
 * without a rule function (red_<name>) does not compile.  Shared rules are
 * aliased with #define, so the X-macro stays the only list of operators.
 *
 * Not here: shape checking (ops/ops_num_*.c); a rule assumes the registry's
 * shape check would pass and reports an unusual form (wrong rank, a bad
 * dimension attribute) as "no rule" so the stage is simply not reduced.
 */
#include "../common/limits.h"
#include "ops.h"
#include "ops_moe.h" /* red_gate_fw, red_nnscaler_moe_gmm (+ backward) for the table */
#include "ops_red.h"

#include <assert.h>
#include <stddef.h>

static int has_attr(const vd_op_reduce_call *c, const char *key) {
  return c->plan && c->node && vd_node_attr(c->plan, c->node, key) != NULL;
}
static int64_t aint(const vd_op_reduce_call *c, const char *key, int64_t def) {
  return c->plan && c->node ? vd_node_attr_int(c->plan, c->node, key, def) : def;
}

/* A position attribute along a: only when present (an absent one is 0,
 * which every ratio keeps). */
static vd_rc pos(const vd_op_reduce_call *c, vd_op_dimref a, const char *key) {
  if (!has_attr(c, key)) return VD_OK;
  vd_op_red r = {.kind = VD_RED_POS, .a = a, .attr = key, .pos = aint(c, key, 0)};
  return c->emit(c->sink, &r);
}

/* The node averages over a (AVG, with MIN2): unless the plan states the
 * divisor itself, the divisor is a count of elements, and reduction must
 * keep its full-size value (docs/shape-reduction.md, AVG). */
static vd_rc avg(const vd_op_reduce_call *c, vd_op_dimref a) {
  VD_CHECK(mark(c, VD_RED_MIN2, a));
  if (has_attr(c, "divisor")) return VD_OK;
  vd_op_red r = {.kind = VD_RED_AVG, .a = a};
  return c->emit(c->sink, &r);
}

/* Normalized dimension attribute; 0 when out of range. */
static int getdim(const vd_op_reduce_call *c, const char *key, int64_t def, int32_t ndim, int32_t *d) {
  int64_t v = aint(c, key, def);
  if (v < 0) v += ndim;
  if (v < 0 || v >= ndim) return 0;
  *d = (int32_t)v;
  return 1;
}

/* x broadcasts to ref (trailing dims aligned): equal extents move together,
 * size-1 (broadcast) dimensions of x are left alone.  When `summed` is set,
 * x is the result of summing ref over the broadcast dimensions (sum_to), and
 * those dimensions of ref are contracted (MIN2). */
static vd_rc bcast(const vd_op_reduce_call *c, vd_op_dimref x, vd_op_dimref ref, int summed, int *norule) {
  const vd_op_shape *xs = shp(c, x), *rs = shp(c, ref);
  if (xs->ndim > rs->ndim) {
    *norule = 1;
    return VD_OK;
  }
  int32_t off = rs->ndim - xs->ndim;
  for (int32_t j = 0; j < rs->ndim; j++) {
    vd_op_dimref rj = dr(ref.out, ref.t, j);
    if (j < off) {
      if (summed) VD_CHECK(mark(c, VD_RED_MIN2, rj));
      continue;
    }
    int64_t xd = xs->d[j - off], rd = rs->d[j];
    if (xd == 1 && rd != 1) {
      if (summed) VD_CHECK(mark(c, VD_RED_MIN2, rj));
      continue;
    }
    VD_CHECK(eq(c, dr(x.out, x.t, j - off), rj)); /* unequal extents: a contradiction */
  }
  return VD_OK;
}

/* All of a's dims equal to b's, same rank (else no rule). */
static vd_rc same(const vd_op_reduce_call *c, vd_op_dimref a, vd_op_dimref b, int *norule) {
  const vd_op_shape *as = shp(c, a), *bs = shp(c, b);
  if (as->ndim != bs->ndim) {
    *norule = 1;
    return VD_OK;
  }
  for (int32_t j = 0; j < as->ndim; j++) VD_CHECK(eq(c, dr(a.out, a.t, j), dr(b.out, b.t, j)));
  return VD_OK;
}

/* ---- elementwise ---------------------------------------------------------- */

/* Every operand broadcasts to the first output (the first input when there
 * is no output: send). */
static vd_rc red_ew(const vd_op_reduce_call *c, int *norule) {
  vd_op_dimref ref = c->n_out ? dr(1, 0, 0) : dr(0, 0, 0);
  if (!c->n_out && !c->n_in) return VD_OK;
  for (uint32_t i = 0; i < c->n_in; i++)
    if (ref.out || i) VD_CHECK(bcast(c, dr(0, i, 0), ref, 0, norule));
  for (uint32_t i = 1; i < c->n_out; i++) VD_CHECK(bcast(c, dr(1, i, 0), ref, 0, norule));
  return VD_OK;
}
#define red_identity red_ew
#define red_contiguous red_ew
#define red_cast red_ew
#define red_multiref red_ew
#define red_multiref_backward red_ew
#define red_expand red_ew
#define red_add red_ew
#define red_sub red_ew
#define red_mul red_ew
#define red_div red_ew
#define red_neg red_ew
#define red_pow red_ew
#define red_sqrt red_ew
#define red_rsqrt red_ew
#define red_exp red_ew
#define red_log red_ew
#define red_sigmoid red_ew
#define red_tanh red_ew
#define red_silu red_ew
#define red_relu red_ew
#define red_gelu red_ew
#define red_accumulate red_ew
#define red_scale red_ew
#define red_neg_backward red_ew
#define red_scale_backward red_ew
#define red_pow_backward red_ew
#define red_sqrt_backward red_ew
#define red_rsqrt_backward red_ew
#define red_exp_backward red_ew
#define red_log_backward red_ew
#define red_sigmoid_backward red_ew
#define red_tanh_backward red_ew
#define red_silu_backward red_ew
#define red_relu_backward red_ew
#define red_gelu_backward red_ew
#define red_dropout red_ew
#define red_dropout_backward red_ew
#define red_all_reduce red_ew
#define red_broadcast red_ew
#define red_send red_ew
#define red_recv red_ew
#define red_clip_coef red_ew
#define red_sgd_step red_ew
#define red_adam_step red_ew

/* Backward of broadcasting ops and sum_to: the last input is the full
 * gradient g; other inputs broadcast to it; outputs are g summed down to
 * their shapes (summed dimensions of g are contracted). */
static vd_rc red_bwd_bcast(const vd_op_reduce_call *c, int *norule) {
  if (!c->n_in) return VD_OK;
  vd_op_dimref g = dr(0, c->n_in - 1, 0);
  for (uint32_t i = 0; i + 1 < c->n_in; i++) VD_CHECK(bcast(c, dr(0, i, 0), g, 0, norule));
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(bcast(c, dr(1, i, 0), g, 1, norule));
  return VD_OK;
}
#define red_sum_to red_bwd_bcast
#define red_add_backward red_bwd_bcast
#define red_sub_backward red_bwd_bcast
#define red_mul_backward red_bwd_bcast
#define red_div_backward red_bwd_bcast

/* ---- data movement -------------------------------------------------------- */

/* Row-major relabelling: dimensions group into runs with equal products
 * (size-1 dimensions outside a run are left alone).  A run of one dimension
 * on each side is an equality; anything else is a PROD constraint that
 * stages/shape.c resolves (merge/split) or gives up on (keeps the sizes). */
static vd_rc red_view(const vd_op_reduce_call *c, int *norule) {
  if (c->n_in != 1 || c->n_out != 1) {
    *norule = 1;
    return VD_OK;
  }
  const vd_op_shape *x = &c->in_shape[0], *y = &c->out_shape[0];
  for (int32_t i = 0; i < x->ndim; i++)
    if (x->d[i] <= 0) goto none;
  for (int32_t j = 0; j < y->ndim; j++)
    if (y->d[j] <= 0) goto none;
  int32_t i = 0, j = 0;
  for (;;) {
    while (i < x->ndim && x->d[i] == 1) i++;
    while (j < y->ndim && y->d[j] == 1) j++;
    if (i == x->ndim || j == y->ndim) break;
    int32_t i0 = i, j0 = j;
    int64_t pa = x->d[i++], pb = y->d[j++];
    while (pa != pb) {
      if (pa < pb) {
        if (i == x->ndim || pa > INT64_MAX / x->d[i]) goto none;
        pa *= x->d[i++];
      } else {
        if (j == y->ndim || pb > INT64_MAX / y->d[j]) goto none;
        pb *= y->d[j++];
      }
    }
    if (i - i0 == 1 && j - j0 == 1) {
      VD_CHECK(eq(c, dr(0, 0, i0), dr(1, 0, j0)));
    } else {
      vd_op_red r = {.kind = VD_RED_PROD, .a = dr(0, 0, i0), .b = dr(1, 0, j0),
                     .na = (uint8_t)(i - i0), .nb = (uint8_t)(j - j0)};
      VD_CHECK(c->emit(c->sink, &r));
    }
  }
  /* What remains on either side must be size 1 (else element counts differ). */
  for (; i < x->ndim; i++)
    if (x->d[i] != 1) goto none;
  for (; j < y->ndim; j++)
    if (y->d[j] != 1) goto none;
  return VD_OK;
none:
  *norule = 1;
  return VD_OK;
}
#define red_reshape red_view

static vd_rc red_transpose(const vd_op_reduce_call *c, int *norule) {
  int32_t n = c->in_shape[0].ndim, d0, d1;
  if (c->n_in != 1 || c->n_out != 1 || c->out_shape[0].ndim != n || !getdim(c, "dim0", 0, n, &d0) ||
      !getdim(c, "dim1", 1, n, &d1)) {
    *norule = 1;
    return VD_OK;
  }
  for (int32_t j = 0; j < n; j++) {
    int32_t src = j == d0 ? d1 : j == d1 ? d0 : j;
    VD_CHECK(eq(c, dr(0, 0, src), dr(1, 0, j)));
  }
  return VD_OK;
}

/* big = chunks * small along dim, other dims equal. */
static vd_rc chunked(const vd_op_reduce_call *c, vd_op_dimref big, vd_op_dimref small, int *norule) {
  int32_t n = shp(c, big)->ndim, d;
  int64_t k = aint(c, "chunks", 1);
  if (shp(c, small)->ndim != n || !getdim(c, "dim", 0, n, &d) || k < 1) {
    *norule = 1;
    return VD_OK;
  }
  for (int32_t j = 0; j < n; j++)
    VD_CHECK(eqf(c, dr(big.out, big.t, j), dr(small.out, small.t, j), j == d ? k : 1, 1));
  return VD_OK;
}
static vd_rc red_chunk(const vd_op_reduce_call *c, int *norule) { return chunked(c, dr(0, 0, 0), dr(1, 0, 0), norule); }
static vd_rc red_chunk_backward(const vd_op_reduce_call *c, int *norule) {
  return chunked(c, dr(1, 0, 0), dr(0, 0, 0), norule);
}

static vd_rc red_concat(const vd_op_reduce_call *c, int *norule) {
  int32_t n = c->out_shape[0].ndim, d;
  if (c->n_out != 1 || !getdim(c, "dim", 0, n, &d)) {
    *norule = 1;
    return VD_OK;
  }
  for (uint32_t i = 0; i < c->n_in; i++) {
    if (c->in_shape[i].ndim != n) {
      *norule = 1;
      return VD_OK;
    }
    for (int32_t j = 0; j < n; j++) VD_CHECK(eqf(c, dr(0, i, j), dr(1, 0, j), j == d ? 0 : 1, 1));
  }
  return VD_OK;
}

/* ---- reductions ------------------------------------------------------------ */

/* full has the reduced dims (per `dims`, default all), part is the result
 * (keepdim: those dims are 1). */
static vd_rc reduction(const vd_op_reduce_call *c, vd_op_dimref full, vd_op_dimref part, int *norule) {
  int is_mean = c->op == VD_OP_MEAN || c->op == VD_OP_MEAN_BACKWARD;
  const vd_op_shape *fs = shp(c, full);
  int mask[VD_MAX_DIMS] = {0};
  const vd_attr_t *a = c->plan && c->node ? vd_node_attr(c->plan, c->node, "dims") : NULL;
  if (!a) {
    for (int32_t j = 0; j < fs->ndim; j++) mask[j] = 1;
  } else if (a->kind == VD_ATTR_INT || a->kind == VD_ATTR_INTS) {
    uint32_t n = a->kind == VD_ATTR_INT ? 1 : a->len;
    for (uint32_t k = 0; k < n; k++) {
      int64_t v = a->kind == VD_ATTR_INT ? a->v.i : c->plan->ints[a->v.off + k];
      if (v < 0) v += fs->ndim;
      if (v < 0 || v >= fs->ndim) goto none;
      mask[v] = 1;
    }
  } else {
    goto none;
  }
  int keep = aint(c, "keepdim", 0) != 0;
  int32_t k = 0, np = shp(c, part)->ndim;
  for (int32_t j = 0; j < fs->ndim; j++) {
    if (mask[j]) {
      VD_CHECK(is_mean ? avg(c, dr(full.out, full.t, j)) : mark(c, VD_RED_MIN2, dr(full.out, full.t, j)));
      if (keep) k++;
      continue;
    }
    if (k >= np) goto none;
    VD_CHECK(eq(c, dr(full.out, full.t, j), dr(part.out, part.t, k++)));
  }
  if (k != np && !(np == 1 && k == 0 && shp(c, part)->d[0] == 1)) goto none;
  return VD_OK;
none:
  *norule = 1;
  return VD_OK;
}
static vd_rc red_sum(const vd_op_reduce_call *c, int *norule) { return reduction(c, dr(0, 0, 0), dr(1, 0, 0), norule); }
#define red_mean red_sum
/* max: the reduced dims keep >= 2 (as sum), the others map one to one */
#define red_max red_sum
static vd_rc red_sum_backward(const vd_op_reduce_call *c, int *norule) {
  return reduction(c, dr(1, 0, 0), dr(0, 0, 0), norule);
}
#define red_mean_backward red_sum_backward

/* Sum of squares of everything: at least 2 elements (the last dimension). */
static vd_rc red_sumsq(const vd_op_reduce_call *c, int *norule) {
  (void)norule;
  const vd_op_shape *x = &c->in_shape[0];
  if (x->ndim > 0) VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, x->ndim - 1)));
  return VD_OK;
}

/* ---- linear algebra and layers ------------------------------------------- */

/* Batch dims of x ([.., r, c] with `tail` trailing non-batch dims) against
 * those of ref: broadcast rule.  `sum_if_bcast`: a batch dim of ref where x
 * broadcasts is summed in x's gradient (MIN2). */
static vd_rc batch(const vd_op_reduce_call *c, vd_op_dimref x, int32_t xtail, vd_op_dimref ref, int32_t rtail,
                   int sum_if_bcast, int *norule) {
  int32_t xb = shp(c, x)->ndim - xtail, rb = shp(c, ref)->ndim - rtail;
  if (xb < 0 || rb < 0 || xb > rb) {
    *norule = 1;
    return VD_OK;
  }
  int32_t off = rb - xb;
  for (int32_t j = 0; j < rb; j++) {
    vd_op_dimref rj = dr(ref.out, ref.t, j);
    int64_t xd = j >= off ? shp(c, x)->d[j - off] : 1, rd = shp(c, ref)->d[j];
    if (j < off || (xd == 1 && rd != 1)) {
      if (sum_if_bcast) VD_CHECK(mark(c, VD_RED_MIN2, rj));
      continue;
    }
    VD_CHECK(eq(c, dr(x.out, x.t, j - off), rj));
  }
  return VD_OK;
}

/* a [..,m,k] b [..,k,n] y [..,m,n]; backward: ga ~ a, gb ~ b, g ~ y. */
static vd_rc matmul_dims(const vd_op_reduce_call *c, vd_op_dimref y, int backward, int *norule) {
  const vd_op_shape *a = &c->in_shape[0], *b = &c->in_shape[1], *ys = shp(c, y);
  if (a->ndim < 2 || b->ndim < 2 || ys->ndim < 2) {
    *norule = 1;
    return VD_OK;
  }
  vd_op_dimref ak = dr(0, 0, a->ndim - 1), am = dr(0, 0, a->ndim - 2);
  vd_op_dimref bk = dr(0, 1, b->ndim - 2), bn = dr(0, 1, b->ndim - 1);
  VD_CHECK(eq(c, ak, bk));
  VD_CHECK(mark(c, VD_RED_MIN2, ak));
  VD_CHECK(eq(c, am, dr(y.out, y.t, ys->ndim - 2)));
  VD_CHECK(eq(c, bn, dr(y.out, y.t, ys->ndim - 1)));
  VD_CHECK(batch(c, dr(0, 0, 0), 2, y, 2, backward, norule));
  VD_CHECK(batch(c, dr(0, 1, 0), 2, y, 2, backward, norule));
  if (backward) {
    VD_CHECK(mark(c, VD_RED_MIN2, am)); /* gb = a^T g contracts m */
    VD_CHECK(mark(c, VD_RED_MIN2, bn)); /* ga = g b^T contracts n */
  }
  return VD_OK;
}
static vd_rc red_matmul(const vd_op_reduce_call *c, int *norule) {
  if (c->n_in != 2 || c->n_out != 1) goto none;
  return matmul_dims(c, dr(1, 0, 0), 0, norule);
none:
  *norule = 1;
  return VD_OK;
}
static vd_rc red_matmul_backward(const vd_op_reduce_call *c, int *norule) {
  if (c->n_in != 3 || c->n_out != 2) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(matmul_dims(c, dr(0, 2, 0), 1, norule));
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  return same(c, dr(1, 1, 0), dr(0, 1, 0), norule);
}

/* x [..,in] w [out,in] (bias [out]) y [..,out]. */
static vd_rc red_linear(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0], *w = &c->in_shape[1], *y = &c->out_shape[0];
  if (c->n_out != 1 || x->ndim < 1 || w->ndim != 2 || y->ndim != x->ndim) {
    *norule = 1;
    return VD_OK;
  }
  int32_t last = x->ndim - 1;
  VD_CHECK(eq(c, dr(0, 0, last), dr(0, 1, 1)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, last)));
  VD_CHECK(eq(c, dr(0, 1, 0), dr(1, 0, last)));
  if (c->n_in == 3) VD_CHECK(eq(c, dr(0, 2, 0), dr(1, 0, last)));
  for (int32_t j = 0; j < last; j++) VD_CHECK(eq(c, dr(0, 0, j), dr(1, 0, j)));
  return VD_OK;
}
/* (x, w, g) -> gx, gw (, gb): gx contracts out, gw and gb contract the rows. */
static vd_rc red_linear_backward(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0], *w = &c->in_shape[1], *g = &c->in_shape[2];
  if (c->n_in != 3 || c->n_out < 2 || x->ndim < 1 || w->ndim != 2 || g->ndim != x->ndim) {
    *norule = 1;
    return VD_OK;
  }
  int32_t last = x->ndim - 1;
  VD_CHECK(eq(c, dr(0, 0, last), dr(0, 1, 1)));
  VD_CHECK(eq(c, dr(0, 1, 0), dr(0, 2, last)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 1, 0)));
  for (int32_t j = 0; j < last; j++) {
    VD_CHECK(eq(c, dr(0, 0, j), dr(0, 2, j)));
    VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, j)));
  }
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  VD_CHECK(same(c, dr(1, 1, 0), dr(0, 1, 0), norule));
  if (c->n_out == 3) VD_CHECK(eq(c, dr(1, 2, 0), dr(0, 1, 0)));
  return VD_OK;
}

/* ids [..] table [rows,h] y [..,h]; start is a position along rows. */
static vd_rc red_embedding(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *ids = &c->in_shape[0], *t = &c->in_shape[1], *y = &c->out_shape[0];
  if (c->n_in != 2 || c->n_out != 1 || t->ndim != 2 || y->ndim != ids->ndim + 1) {
    *norule = 1;
    return VD_OK;
  }
  for (int32_t j = 0; j < ids->ndim; j++) VD_CHECK(eq(c, dr(0, 0, j), dr(1, 0, j)));
  VD_CHECK(eq(c, dr(0, 1, 1), dr(1, 0, ids->ndim)));
  return pos(c, dr(0, 1, 0), "start");
}
/* (ids, g [..,h]) -> gtable [rows,h]: scatter-add over the token rows. */
static vd_rc red_embedding_backward(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *ids = &c->in_shape[0], *g = &c->in_shape[1], *t = &c->out_shape[0];
  if (c->n_in != 2 || c->n_out != 1 || t->ndim != 2 || g->ndim != ids->ndim + 1) {
    *norule = 1;
    return VD_OK;
  }
  for (int32_t j = 0; j < ids->ndim; j++) {
    VD_CHECK(eq(c, dr(0, 0, j), dr(0, 1, j)));
    VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, j)));
  }
  VD_CHECK(eq(c, dr(0, 1, ids->ndim), dr(1, 0, 1)));
  return pos(c, dr(1, 0, 0), "start");
}

/* x [..,h] w [h] (b [h]) y: normalization over h, rows independent. */
static vd_rc red_norm(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0];
  if (c->n_out != 1 || x->ndim < 1) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  int32_t h = x->ndim - 1;
  VD_CHECK(avg(c, dr(0, 0, h)));
  for (uint32_t i = 1; i < c->n_in; i++) VD_CHECK(eq(c, dr(0, i, 0), dr(0, 0, h)));
  return VD_OK;
}
#define red_rms_norm red_norm
#define red_layer_norm red_norm
/* (x, w, g) -> gx, gw (, gb): reductions over h and over the rows. */
static vd_rc red_norm_backward(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0];
  if (c->n_in != 3 || c->n_out < 2 || x->ndim < 1) {
    *norule = 1;
    return VD_OK;
  }
  int32_t h = x->ndim - 1;
  VD_CHECK(same(c, dr(0, 2, 0), dr(0, 0, 0), norule));
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  VD_CHECK(eq(c, dr(0, 1, 0), dr(0, 0, h)));
  for (uint32_t i = 1; i < c->n_out; i++) VD_CHECK(eq(c, dr(1, i, 0), dr(0, 0, h)));
  /* means over h (AVG); gw (and gb) sum over the rows */
  for (int32_t j = 0; j < h; j++) VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, j)));
  return avg(c, dr(0, 0, h));
}
#define red_rms_norm_backward red_norm_backward
#define red_layer_norm_backward red_norm_backward

/* Rotation of pairs (i, i + d/2) at position pos_offset + s. */
static vd_rc red_rope(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0];
  int32_t sd;
  if (c->n_in != 1 || c->n_out != 1 || x->ndim < 2 || !getdim(c, "seq_dim", 1, x->ndim, &sd)) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  VD_CHECK(mark(c, VD_RED_EVEN, dr(0, 0, x->ndim - 1)));
  /* SOUNDNESS: the angle depends on the index along seq_dim; reduced to one
   * position, every row gets the same angle and a rope that reads its
   * positions along another dimension (seq_dim 0 or 2 instead of 1: found by
   * the soundness fuzzer) computes the same reduced values.  Two positions
   * keep the dependence visible. */
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, sd)));
  return pos(c, dr(0, 0, sd), "pos_offset");
}
#define red_rope_backward red_rope

static vd_rc red_causal_mask(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0];
  if (c->n_in != 1 || c->n_out != 1 || x->ndim < 2) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  /* q and k positions are compared with each other: one ratio for both. */
  VD_CHECK(eqf(c, dr(0, 0, x->ndim - 2), dr(0, 0, x->ndim - 1), 0, 1));
  VD_CHECK(pos(c, dr(0, 0, x->ndim - 2), "q_offset"));
  return pos(c, dr(0, 0, x->ndim - 1), "k_offset");
}
#define red_causal_mask_backward red_causal_mask

/* create_mask(tokens[b,s], h[b,s,H]) -> [1,1,s,s]: both mask dims are s. */
static vd_rc red_create_mask(const vd_op_reduce_call *c, int *norule) {
  if (c->n_in != 2 || c->n_out != 1 || c->in_shape[0].ndim != 2 || c->in_shape[1].ndim < 2 ||
      c->out_shape[0].ndim != 4) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(eq(c, dr(0, 1, 0), dr(0, 0, 0)));
  VD_CHECK(eq(c, dr(0, 1, 1), dr(0, 0, 1)));
  VD_CHECK(eq(c, dr(1, 0, 2), dr(0, 0, 1)));
  VD_CHECK(eq(c, dr(1, 0, 3), dr(0, 0, 1)));
  VD_CHECK(mark(c, VD_RED_KEEP, dr(1, 0, 0)));
  VD_CHECK(mark(c, VD_RED_KEEP, dr(1, 0, 1)));
  return mark(c, VD_RED_MIN2, dr(0, 0, 1));
}

/* apply_mask(x, mask[, y, g]): the mask broadcasts to x, everything else is x. */
static vd_rc red_apply_mask(const vd_op_reduce_call *c, int *norule) {
  if (c->n_in < 2 || c->n_out != 1) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  for (uint32_t i = 2; i < c->n_in; i++) VD_CHECK(same(c, dr(0, i, 0), dr(0, 0, 0), norule));
  return bcast(c, dr(0, 1, 0), dr(0, 0, 0), 0, norule);
}
#define red_apply_mask_backward red_apply_mask

/* apply_rotary_emb(xq[b,s,h,d], xk, freqs[s,d/2] [, oq, ok, gq, gk]) -> (q, k). */
static vd_rc red_apply_rotary_emb(const vd_op_reduce_call *c, int *norule) {
  if ((c->n_in != 3 && c->n_in != 7) || c->n_out != 2 || c->in_shape[0].ndim != 4 || c->in_shape[1].ndim != 4 ||
      c->in_shape[2].ndim != 2) {
    *norule = 1;
    return VD_OK;
  }
  for (uint32_t k = 0; k < 2; k++) {
    VD_CHECK(same(c, dr(1, k, 0), dr(0, k, 0), norule));
    if (c->n_in == 7) {
      VD_CHECK(same(c, dr(0, 3 + k, 0), dr(0, k, 0), norule));
      VD_CHECK(same(c, dr(0, 5 + k, 0), dr(0, k, 0), norule));
    }
    VD_CHECK(eq(c, dr(0, k, 1), dr(0, 2, 0)));
    VD_CHECK(eqf(c, dr(0, k, 3), dr(0, 2, 1), 2, 1)); /* d == 2 * (d/2) */
    VD_CHECK(mark(c, VD_RED_EVEN, dr(0, k, 3)));
  }
  return eq(c, dr(0, 1, 0), dr(0, 0, 0));
}
#define red_apply_rotary_emb_backward red_apply_rotary_emb

static vd_rc red_softmax(const vd_op_reduce_call *c, int *norule) {
  const vd_op_shape *x = &c->in_shape[0];
  int32_t d;
  if (c->n_out != 1 || !getdim(c, "dim", -1, x->ndim, &d)) {
    *norule = 1;
    return VD_OK;
  }
  for (uint32_t i = 0; i < c->n_in; i++) VD_CHECK(same(c, dr(0, i, 0), dr(1, 0, 0), norule));
  return mark(c, VD_RED_MIN2, dr(0, 0, d));
}
#define red_softmax_backward red_softmax

/* pick (fw): x [n,v] labels [n] -> y [n]; its backward: (labels [n],
 * g [n]) -> gx [n,v].  The rows agree; start is a position along v (of x,
 * or of gx). */
static vd_rc pick_rule(const vd_op_reduce_call *c, int *norule, int fw) {
  if (c->n_in != 2 || c->n_out != 1 || c->in_shape[0].ndim != (fw ? 2 : 1) || c->in_shape[1].ndim != 1 ||
      c->out_shape[0].ndim != (fw ? 1 : 2)) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(eq(c, dr(0, 0, 0), dr(0, 1, 0)));
  VD_CHECK(eq(c, dr(0, 0, 0), dr(1, 0, 0)));
  /* The backward's one-hot rows tell the classes of a block apart (g at
   * the label, 0 elsewhere).  Reduced, the label's column carries g * n/N
   * (ENC(pick_backward)), the block average of the full-size one-hot, so
   * that a reduced sum over the classes (COUNT: times N/n) is g as at full
   * size; stages/shape.c (onehot_nonaffine) keeps the class whole where a
   * use is not affine in the one-hot.  MIN2: every shard of the classes
   * keeps >= 2 columns, one that is not the label (the soundness argument
   * there and in docs/shape-reduction.md, ONEHOT). */
  if (!fw) VD_CHECK(mark(c, VD_RED_MIN2, dr(1, 0, 1)));
  return pos(c, dr(fw ? 0 : 1, 0, 1), "start");
}
static vd_rc red_pick(const vd_op_reduce_call *c, int *norule) { return pick_rule(c, norule, 1); }
static vd_rc red_pick_backward(const vd_op_reduce_call *c, int *norule) { return pick_rule(c, norule, 0); }

/* ---- mixture of experts ---------------------------------------------------- */

/* The expert dimension is a routing decision over the whole row, like
 * softmax's reduced dim: every output column is an uninterpreted function
 * (topk_gate.kK.jJ) of the whole row, the same on both sides at any extent,
 * so the row reduces like a softmax row (MIN2), and keeps k + 1 experts
 * (MINK) so that the routing the witness evaluates still chooses k of more
 * than k.  Without the node (k unknown) the dimension is kept. */
static vd_rc red_topk_gate(const vd_op_reduce_call *c, int *norule) {
  if (c->n_out != 1 || c->out_shape[0].ndim != 2) {
    *norule = 1;
    return VD_OK;
  }
  for (uint32_t i = 0; i < c->n_in; i++) VD_CHECK(same(c, dr(0, i, 0), dr(1, 0, 0), norule));
  int64_t k = aint(c, "k", 0);
  if (k < 1) return mark(c, VD_RED_KEEP, dr(1, 0, 1));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(1, 0, 1)));
  vd_op_red r = {.kind = VD_RED_MINK, .a = dr(1, 0, 1), .pos = k + 1};
  return c->emit(c->sink, &r);
}
#define red_topk_gate_backward red_topk_gate

/* x [t,h] gates [t,G] w1 [el,f,h] w3 [el,f,h] w2 [el,h,f]: y sums over the
 * local experts a term of one expert's weights and gate column, so the
 * expert dim is a contraction (MIN2; every expert shard keeps >= 1 expert
 * by the gcd); the gate columns G move with it (G == el, or G global with
 * the local experts at column expert_start, a POS along G); h and f
 * contracted; backward also contracts the token rows. */
static vd_rc gmlp(const vd_op_reduce_call *c, int backward, int *norule) {
  const vd_op_shape *x = &c->in_shape[0], *ga = &c->in_shape[1], *w1 = &c->in_shape[2];
  if (c->n_in < 5 || x->ndim != 2 || ga->ndim != 2 || w1->ndim != 3 || c->in_shape[3].ndim != 3 ||
      c->in_shape[4].ndim != 3) {
    *norule = 1;
    return VD_OK;
  }
  VD_CHECK(eq(c, dr(0, 0, 0), dr(0, 1, 0)));
  int64_t G = ga->d[1], el = w1->d[0];
  if (G <= 0 || el <= 0 || G % el) goto none;
  VD_CHECK(eq(c, dr(0, 3, 0), dr(0, 2, 0)));
  VD_CHECK(eq(c, dr(0, 4, 0), dr(0, 2, 0)));
  VD_CHECK(eqf(c, dr(0, 1, 1), dr(0, 2, 0), G / el, 1)); /* G * 1 == el * (G / el) */
  if (G != el) VD_CHECK(pos(c, dr(0, 1, 1), "expert_start"));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 2, 0)));
  VD_CHECK(eq(c, dr(0, 0, 1), dr(0, 2, 2)));
  VD_CHECK(eq(c, dr(0, 0, 1), dr(0, 3, 2)));
  VD_CHECK(eq(c, dr(0, 0, 1), dr(0, 4, 1)));
  VD_CHECK(eq(c, dr(0, 2, 1), dr(0, 3, 1)));
  VD_CHECK(eq(c, dr(0, 2, 1), dr(0, 4, 2)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 1)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 2, 1)));
  if (backward) {
    VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 0)));
    if (c->n_in != 6 || c->n_out != 5) goto none;
    VD_CHECK(same(c, dr(0, 5, 0), dr(0, 0, 0), norule));
    for (uint32_t i = 0; i < 5; i++) VD_CHECK(same(c, dr(1, i, 0), dr(0, i, 0), norule));
  } else {
    if (c->n_out != 1) goto none;
    VD_CHECK(same(c, dr(1, 0, 0), dr(0, 0, 0), norule));
  }
  return VD_OK;
none:
  *norule = 1;
  return VD_OK;
}
static vd_rc red_grouped_mlp(const vd_op_reduce_call *c, int *norule) { return gmlp(c, 0, norule); }
static vd_rc red_grouped_mlp_backward(const vd_op_reduce_call *c, int *norule) { return gmlp(c, 1, norule); }

/* ---- collectives ------------------------------------------------------------ */

/* P = number of inputs (every participant contributes one).  Inputs are all
 * equal-shaped, outputs too; along the attribute dims the output is
 * `mul`/`div` times the input. */
static vd_rc coll(const vd_op_reduce_call *c, const char *k1, const char *k2, int *norule) {
  if (!c->n_in) goto none;
  int64_t P = c->n_in;
  int32_t n = c->in_shape[0].ndim, d1 = -1, d2 = -1;
  if (k1 && !getdim(c, k1, 0, n, &d1)) goto none;
  if (k2 && !getdim(c, k2, 0, n, &d2)) goto none;
  for (uint32_t i = 1; i < c->n_in; i++) VD_CHECK(same(c, dr(0, i, 0), dr(0, 0, 0), norule));
  for (uint32_t i = 0; i < c->n_out; i++) {
    if (c->out_shape[i].ndim != n) goto none;
    for (int32_t j = 0; j < n; j++) {
      /* out * den == in * num */
      int64_t num = 1, den = 1;
      if (!k2) {
        if (j == d1) {
          if (c->op == VD_OP_ALL_GATHER) num = P; else den = P;
        }
      } else if (d1 != d2) {
        if (j == d1) den = P;  /* split_dim shrinks */
        if (j == d2) num = P;  /* concat_dim grows */
      }
      VD_CHECK(eqf(c, dr(1, i, j), dr(0, 0, j), num, den));
    }
  }
  /* all_to_all along one dim: every participant splits it into P chunks
   * and concatenates the P chunks it receives in their place.  The reduced
   * dim must still hold P whole chunks (an EP dispatch buffer [EP, T, H]
   * keeps its EP rows); without this the class could shrink below P. */
  if (k2 && d1 == d2 && d1 >= 0 && d1 < n && c->in_shape[0].d[d1] % P == 0) {
    vd_op_red r = {.kind = VD_RED_MINK, .a = dr(0, 0, d1), .pos = P, .num = c->in_shape[0].d[d1] / P};
    VD_CHECK(c->emit(c->sink, &r));
  }
  return VD_OK;
none:
  *norule = 1;
  return VD_OK;
}
static vd_rc red_all_gather(const vd_op_reduce_call *c, int *norule) { return coll(c, "dim", NULL, norule); }
static vd_rc red_reduce_scatter(const vd_op_reduce_call *c, int *norule) { return coll(c, "dim", NULL, norule); }
static vd_rc red_all_to_all(const vd_op_reduce_call *c, int *norule) {
  return coll(c, "split_dim", "concat_dim", norule);
}

/* ---- the table ---------------------------------------------------------------- */

/* One entry per ops.def row: a row without red_<name> does not compile. */
static const vd_op_reduce_fn reduce_table[VD_OP__COUNT] = {
#define VD_OP(ID, name, ...) [VD_OP_##ID] = red_##name,
#include "ops.def"
#undef VD_OP
};

vd_op_reduce_fn vd_op_reduce_rule(vd_op_id op) {
  assert(op >= 0 && op < VD_OP__COUNT);
  return reduce_table[op];
}
