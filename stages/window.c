/*
 * stages/window.c - restricts the single-device side of a stage to the rows
 * its parallel side touches (vd_stage_window; docs/verifier.md section 5).
 *
 * A stage's single values enter whole: a replica's or a microbatch's stage
 * holds every batch row of the single tensors although its hypotheses and
 * targets touch only its own rows.  That makes stages of different replicas
 * and microbatches differ (their slices sit at other offsets) and the solver
 * work on rows nobody asked about.
 *
 * Dimension classes: every dimension of every single value is a node of a
 * union-find; each single-side operator links the dimensions its reduction
 * rule equates 1:1 (ops/ops_reduce.c) when its equivariance entry allows it
 * (ops/ops_eqv.c), and pins the rest of its operands' dimensions (contracted,
 * reduced, kept, positional, merged, unlinked).  A class is pinned when any
 * member is.  For an unpinned class, the window is the hull of the slices of
 * the stage's hypotheses and targets along its members; every member value is
 * cut to that window and slices are rebased to it.
 *
 * SOUNDNESS: along an unpinned class every single-side operator is row-local
 * and translation-invariant, so the windowed computation yields exactly the
 * target rows of the full one from exactly the hypothesis rows of the full
 * one (rows outside the hull are read by no target); the stage's query is
 * unchanged, up to renaming the free symbols of the single leaves.  Two
 * stages that become byte-identical after windowing (stages/canon.c) are
 * therefore the same query: in particular the stages of DP replicas and
 * microbatches that run one program on other rows of the batch.  Parallel
 * values are not touched: their terms never depend on where their slice lies
 * except through the hypotheses, which are rebased with the window.
 * Position-dependent operators on the parallel side (a rope with an offset)
 * stay what they are; the single side they are compared with has its
 * positional dimensions pinned, so a wrong offset is still a wrong value.
 *
 * Sums by part (st->sum_mode, stages/cut.c): the node producing the target
 * is a row sum (vd_op_eqv.sum_outs); its row dimensions are linked like the
 * bwd0 form, its summed output pinned whole, and the window of its row input
 * is reported (sum_ok, sum_lo/hi/ext) when exactly one row dimension is cut:
 * the target is then the sum over the window's rows only, which is what
 * such a stage claims; cut.c checks that the parts' windows tile the rows.
 *
 * Not here: which operator qualifies (ops/ops_eqv.c); shape reduction, which
 * runs afterwards on the windowed shapes (shape.c).
 */
#include "stage.h"

#include <string.h>

#include "../common/mem.h"
#include "../ops/ops.h"

typedef struct {
  uint32_t *par;
  int64_t *k;     /* coordinate along this dimension = k * coordinate along its parent */
  uint8_t *pin;
  uint32_t *lk;   /* generation of the node that last linked the dimension */
  uint32_t gen;
  uint8_t bcast_out; /* the node's MIN2 output dimensions are broadcasts (vd_op_eqv) */
  const vd_stage *st;
  const uint32_t *in, *out;
  int64_t sum_node;  /* sum by part: the single node producing the target, or -1 */
  uint32_t sum_out;  /* its summed output (the target) */
  uint32_t sum_v;    /* its first row input (stage-local), UINT32_MAX if none */
  int32_t sum_lead;  /* the row dimensions of sum_v: 0..sum_lead-1 */
} wctx;

#define DIM(v, j) ((v) * (uint32_t)VD_MAX_DIMS + (uint32_t)(j))

/* Root of x's class, and in *kx the factor of x's coordinates over the
 * root's (an integer >= 1: the root is the coarsest dimension of its class;
 * 1 everywhere except across a view's merge, docs/verifier.md section 5). */
static uint32_t find_k(wctx *w, uint32_t x, int64_t *kx) {
  int64_t f = 1;
  uint32_t y = x;
  while (w->par[y] != y) {
    f *= w->k[y];
    y = w->par[y];
  }
  /* path compression, keeping the factors */
  int64_t g = f;
  for (uint32_t z = x; w->par[z] != y;) {
    uint32_t nz = w->par[z];
    int64_t kz = w->k[z];
    w->par[z] = y;
    w->k[z] = g;
    g /= kz;
    z = nz;
  }
  *kx = f;
  return y;
}

static uint32_t find(wctx *w, uint32_t x) {
  int64_t k;
  return find_k(w, x, &k);
}

/* Links dimensions a and b with coordinate(b) = f * coordinate(a).  Links
 * whose factors contradict or do not divide each other pin both classes
 * (windows are then not used there: sound, only less reuse). */
static void unite_k(wctx *w, uint32_t a, uint32_t b, int64_t f) {
  int64_t ka, kb;
  uint32_t ra = find_k(w, a, &ka), rb = find_k(w, b, &kb);
  /* coordinate(rb) = f * ka / kb * coordinate(ra) */
  if (ka > INT64_MAX / f) {
    w->pin[ra] = w->pin[rb] = 1;
    return;
  }
  int64_t num = f * ka;
  if (ra == rb) {
    if (num != kb) w->pin[ra] = 1;
    return;
  }
  if (num == kb) {
    if (ra < rb) w->par[rb] = ra, w->k[rb] = 1;
    else w->par[ra] = rb, w->k[ra] = 1;
  } else if (num % kb == 0) {
    w->par[rb] = ra;
    w->k[rb] = num / kb;
  } else if (kb % num == 0) {
    w->par[ra] = rb;
    w->k[ra] = kb / num;
  } else {
    w->pin[ra] = w->pin[rb] = 1;
  }
}

static void unite(wctx *w, uint32_t a, uint32_t b) { unite_k(w, a, b, 1); }

static uint32_t ref_value(const wctx *w, vd_op_dimref r) { return r.out ? w->out[r.t] : w->in[r.t]; }

static void pin_ref(wctx *w, vd_op_dimref r, uint32_t n) {
  uint32_t v = ref_value(w, r);
  for (uint32_t k = 0; k < n && r.dim + k < VD_MAX_DIMS; k++) w->pin[DIM(v, r.dim + k)] = 1;
}

/* Sink of the reduction rule's constraints. */
static vd_rc sink(void *p, const vd_op_red *r) {
  wctx *w = p;
  switch (r->kind) {
  case VD_RED_EQ: {
    uint32_t va = ref_value(w, r->a), vb = ref_value(w, r->b);
    const vd_stage_value *a = &w->st->vals[va], *b = &w->st->vals[vb];
    if (r->num > 0 && r->num == r->den && r->a.dim < a->ndim && r->b.dim < b->ndim &&
        a->shape[r->a.dim] == b->shape[r->b.dim]) {
      unite(w, DIM(va, r->a.dim), DIM(vb, r->b.dim));
      w->lk[DIM(va, r->a.dim)] = w->gen;
      w->lk[DIM(vb, r->b.dim)] = w->gen;
    } else {
      pin_ref(w, r->a, 1);
      pin_ref(w, r->b, 1);
    }
    break;
  }
  case VD_RED_PROD: {
    /* A view merging dims [d0, d1..dk] into one (or splitting one into
     * them), row-major: index = d0 * (extent of d1..dk) + inner.  With the
     * inner dims whole (pinned here), rows [b0, b1) of d0 are exactly rows
     * [b0 f, b1 f) of the merged dim, f the inner extent: a scaled link. */
    vd_op_dimref m = r->a, one = r->b;
    uint8_t nm = r->na;
    if (r->na == 1 && r->nb > 1) {
      m = r->b;
      one = r->a;
      nm = r->nb;
    } else if (r->nb != 1) {
      nm = 0;
    }
    uint32_t vm = ref_value(w, m), vo = ref_value(w, one);
    const vd_stage_value *M = &w->st->vals[vm], *O = &w->st->vals[vo];
    int64_t f = 1;
    int ok = nm > 1 && m.dim + nm <= M->ndim && one.dim < O->ndim;
    for (uint8_t q = 1; ok && q < nm; q++) {
      if (M->shape[m.dim + q] <= 0 || f > INT64_MAX / M->shape[m.dim + q]) ok = 0;
      else f *= M->shape[m.dim + q];
    }
    if (ok && M->shape[m.dim] <= INT64_MAX / f && M->shape[m.dim] * f == O->shape[one.dim]) {
      unite_k(w, DIM(vm, m.dim), DIM(vo, one.dim), f);
      w->lk[DIM(vm, m.dim)] = w->gen;
      w->lk[DIM(vo, one.dim)] = w->gen;
      for (uint8_t q = 1; q < nm; q++) w->pin[DIM(vm, m.dim + q)] = 1;
    } else {
      pin_ref(w, r->a, r->na);
      pin_ref(w, r->b, r->nb);
    }
    break;
  }
  default: /* MIN2, EVEN, POS, KEEP */
    if (r->kind == VD_RED_MIN2 && r->a.out && w->bcast_out) {
      /* a broadcast output dimension: constant along it, a class of its own */
      uint32_t v = ref_value(w, r->a);
      if (r->a.dim < w->st->vals[v].ndim) w->lk[DIM(v, r->a.dim)] = w->gen;
      break;
    }
    pin_ref(w, r->a, 1);
    break;
  }
  return VD_OK;
}

static void pin_value(wctx *w, uint32_t v) {
  for (uint32_t j = 0; j < VD_MAX_DIMS; j++) w->pin[DIM(v, j)] = 1;
}

/* Whether only output 0 and the row outputs (bit k of rows: output k) of
 * single-side node i are used in the stage: the other outputs have no
 * consumer in the stage and are no target. */
static int only_rows_live(const vd_stage *st, uint32_t i, uint8_t rows) {
  const vd_stage_node *n = &st->nodes[i];
  for (uint32_t k = 1; k < n->n_out; k++) {
    if (k < 8 && (rows >> k & 1)) continue;
    uint32_t v = st->idx[n->out_off + k];
    for (uint32_t t = 0; t < st->n_targets; t++)
      if (st->targets[t].svalue == (int32_t)v) return 0;
    for (uint32_t j = 0; j < st->n_vals; j++)
      if (st->vals[j].hyp_svalue == (int32_t)v) return 0;
    for (uint32_t m = 0; m < st->n_nodes; m++) {
      const vd_stage_node *x = &st->nodes[m];
      if (x->side) continue;
      for (uint32_t q = 0; q < x->n_in; q++)
        if (st->idx[x->in_off + q] == v) return 0;
    }
  }
  return 1;
}

/* The plan node of stage node n on the single side, when the lineage
 * table has the single graph's plan (plan/pn NULL otherwise). */
static const vd_node_t *single_plan_node(const vd_lin_table *lt, const vd_stage_node *n, const vd_plan_t **plan) {
  *plan = NULL;
  if (!lt || !lt->gs || !lt->gs->plan || n->gnode >= lt->gs->n_nodes) return NULL;
  *plan = lt->gs->plan;
  uint32_t k = lt->gs->nodes[n->gnode].pnode;
  return k < (*plan)->n_nodes ? &(*plan)->nodes[k] : NULL;
}

/* Only the input gradient (and the row outputs) are used: rows of the
 * inputs in bwd0_rows, of output 0 and of the row outputs are linked
 * (all dimensions but the last); the rest is pinned.  The dead weight
 * gradients become sums over the window's rows, which nothing in the
 * stage reads.  The node of a sum by part (sum_here) has its summed
 * output live as the target: it is pinned whole and is the sum over the
 * window's rows, which is what that stage claims (cut.c). */
static void link_bwd0_rows(wctx *w, const vd_stage *st, const vd_stage_node *n, const vd_op_eqv *e, int sum_here) {
  const uint32_t *in = st->idx + n->in_off, *out = st->idx + n->out_off;
  const vd_stage_value *o = &st->vals[out[0]];
  int32_t lead = o->ndim - 1;
  for (uint32_t k = 0; k < n->n_in; k++) {
    const vd_stage_value *v = &st->vals[in[k]];
    if (k < 8 && (e->bwd0_rows >> k & 1) && v->ndim == o->ndim) {
      for (int32_t j = 0; j < v->ndim; j++) {
        if (j < lead && v->shape[j] == o->shape[j]) unite(w, DIM(in[k], j), DIM(out[0], j));
        else w->pin[DIM(in[k], j)] = 1;
      }
      if (sum_here && w->sum_v == UINT32_MAX) {
        w->sum_v = in[k];
        w->sum_lead = lead;
      }
      continue;
    }
    pin_value(w, in[k]);
  }
  if (sum_here) pin_value(w, out[w->sum_out]);
  for (uint32_t k = 1; k < n->n_out && k < 8; k++) {
    if (!(e->row_outs >> k & 1)) continue;
    const vd_stage_value *v = &st->vals[out[k]];
    for (int32_t j = 0; j < v->ndim; j++) {
      if (v->ndim == o->ndim && j < lead && v->shape[j] == o->shape[j]) unite(w, DIM(out[k], j), DIM(out[0], j));
      else w->pin[DIM(out[k], j)] = 1;
    }
  }
  for (int32_t j = lead; j < o->ndim; j++) w->pin[DIM(out[0], j)] = 1;
}

/* Links the dimensions the operator's reduction rule equates 1:1 (through
 * sink), then pins every dimension the rule did not link, or from the
 * operator's lead on (vd_op_eqv_lead), or all when it has no rule. */
static vd_rc link_by_rule(wctx *w, const vd_stage *st, const vd_stage_node *n, const vd_op_eqv *e,
                          const vd_plan_t *plan, const vd_node_t *pn) {
  const uint32_t *in = st->idx + n->in_off, *out = st->idx + n->out_off;
  vd_op_shape ish[64], osh[64];
  for (uint32_t k = 0; k < n->n_in; k++) {
    ish[k].ndim = st->vals[in[k]].ndim;
    memcpy(ish[k].d, st->vals[in[k]].shape, sizeof(ish[k].d));
  }
  for (uint32_t k = 0; k < n->n_out; k++) {
    osh[k].ndim = st->vals[out[k]].ndim;
    memcpy(osh[k].d, st->vals[out[k]].shape, sizeof(osh[k].d));
  }
  w->gen++;
  w->in = in;
  w->out = out;
  w->bcast_out = e->bcast_out;
  vd_op_reduce_call rc = {.op = n->op, .plan = plan, .node = pn, .n_in = n->n_in, .n_out = n->n_out,
                          .in_shape = ish, .out_shape = osh, .emit = sink, .sink = w};
  int norule = 0;
  VD_CHECK(vd_op_reduce_rule((vd_op_id)n->op)(&rc, &norule));
  for (int side = 0; side < 2; side++) {
    const uint32_t *vs = side ? out : in;
    uint32_t nv = side ? n->n_out : n->n_in;
    for (uint32_t k = 0; k < nv; k++) {
      const vd_stage_value *v = &st->vals[vs[k]];
      int32_t lead = vd_op_eqv_lead((vd_op_id)n->op, plan, pn, v->ndim);
      for (int32_t j = 0; j < v->ndim; j++)
        if (norule || j >= lead || w->lk[DIM(vs[k], j)] != w->gen) w->pin[DIM(vs[k], j)] = 1;
    }
  }
  return VD_OK;
}

/* Links and pins the dimensions of single-side node i. */
static vd_rc visit_node(wctx *w, const vd_lin_table *lt, const vd_stage *st, uint32_t i, vd_diag *d) {
  const vd_stage_node *n = &st->nodes[i];
  const uint32_t *in = st->idx + n->in_off, *out = st->idx + n->out_off;
  const vd_plan_t *plan;
  const vd_node_t *pn = single_plan_node(lt, n, &plan);
  int ok = n->op >= 0 && n->op < VD_OP__COUNT && n->n_in <= 64 && n->n_out <= 64;
  const vd_op_eqv *e = ok ? vd_op_eqv_of((vd_op_id)n->op) : NULL;
  if (!ok || (e->kind != VD_EQV_RULE && e->kind != VD_EQV_LEAD)) {
    for (uint32_t k = 0; k < n->n_in; k++) pin_value(w, in[k]);
    for (uint32_t k = 0; k < n->n_out; k++) pin_value(w, out[k]);
    return VD_OK;
  }
  int sum_here = w->sum_node == (int64_t)i;
  if (e->bwd0_rows && n->n_out >= 2 && (sum_here || only_rows_live(st, i, e->row_outs))) {
    link_bwd0_rows(w, st, n, e, sum_here);
    return VD_OK;
  }
  (void)d;
  return link_by_rule(w, st, n, e, plan, pn);
}

static void hull(int64_t *lo, int64_t *hi, uint8_t *any, uint32_t r, int64_t a, int64_t b) {
  if (!any[r] || a < lo[r]) lo[r] = a;
  if (!any[r] || b > hi[r]) hi[r] = b;
  any[r] = 1;
}

/* Hull of slice [a, b) of dimension x, in its root's coordinates; a slice
 * that does not fall on whole root rows pins the class. */
static void hull_k(wctx *w, int64_t *lo, int64_t *hi, uint8_t *any, uint32_t x, int64_t a, int64_t b) {
  int64_t k;
  uint32_t r = find_k(w, x, &k);
  if (a % k || b % k) {
    w->pin[r] = 1;
    return;
  }
  hull(lo, hi, any, r, a / k, b / k);
}

/* Sum by part: the single node producing the stage's one target when that
 * target is a summed output (vd_op_eqv.sum_outs) of a node with row inputs
 * and no other summed output is used in the stage.  Otherwise none: the
 * stage is windowed as usual and sum_ok stays 0. */
static void sum_node(wctx *w, const vd_stage *st) {
  if (st->n_targets != 1 || st->targets[0].svalue < 0) return;
  const vd_stage_value *t = &st->vals[st->targets[0].svalue];
  if (t->side || t->producer < 0) return;
  uint32_t i = (uint32_t)t->producer;
  const vd_stage_node *n = &st->nodes[i];
  if (n->side || n->op < 0 || n->op >= VD_OP__COUNT || n->n_in > 64 || n->n_out > 64 || n->n_out < 2) return;
  const vd_op_eqv *e = vd_op_eqv_of((vd_op_id)n->op);
  if (e->kind != VD_EQV_RULE || !e->bwd0_rows || !e->sum_outs) return;
  for (uint32_t o = 1; o < n->n_out && o < 8; o++) {
    if (st->idx[n->out_off + o] != (uint32_t)st->targets[0].svalue) continue;
    if (!(e->sum_outs >> o & 1) || !only_rows_live(st, i, (uint8_t)(e->row_outs | 1u << o))) return;
    w->sum_node = i;
    w->sum_out = o;
    return;
  }
}

/* After windowing: the window of the sum's row input.  Exactly one row
 * dimension may be cut (the others are whole), and no two row dimensions
 * may share a class; then the target is the sum over the rows of that
 * window (times the whole other row dimensions) and sum_ok is set. */
static void sum_window(wctx *w, const vd_lin_table *lt, vd_stage *st) {
  const vd_stage_value *v = &st->vals[w->sum_v];
  if (!lt || !lt->gs || !lt->gs->plan || v->value >= lt->gs->n_values) return;
  const vd_tensor_t *t = &lt->gs->plan->tensors[lt->gs->values[v->value].tensor];
  int32_t cut = -1;
  for (int32_t j = 0; j < w->sum_lead && j < v->ndim; j++) {
    for (int32_t q = 0; q < j; q++)
      if (find(w, DIM(w->sum_v, j)) == find(w, DIM(w->sum_v, q))) return;
    if (v->woff[j] == 0 && v->shape[j] == t->shape[j]) continue;
    if (cut >= 0) return;
    cut = j;
  }
  if (cut < 0) return;
  st->sum_ok = 1;
  st->sum_dim = cut;
  st->sum_svalue = v->value;
  st->sum_lo = v->woff[cut];
  st->sum_hi = v->woff[cut] + v->shape[cut];
  st->sum_ext = t->shape[cut];
}

/* Per class root: the hull lo..hi of the slices along it (any: one seen). */
typedef struct {
  int64_t *lo, *hi;
  uint8_t *any;
} hulls_t;

/* Hull of box blo..bhi of single value sv, dimension by dimension. */
static void hull_box(wctx *w, hulls_t *h, uint32_t sv, const int64_t *blo, const int64_t *bhi) {
  for (int32_t j = 0; j < w->st->vals[sv].ndim; j++) hull_k(w, h->lo, h->hi, h->any, DIM(sv, j), blo[j], bhi[j]);
}

/* Hulls of the slices of the hypotheses and targets along every class. */
static void hull_slices(wctx *w, const vd_stage *st, hulls_t *h) {
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    if (!v->side || v->producer >= 0 || v->hyp_svalue < 0 || !v->has_pslice) continue;
    hull_box(w, h, (uint32_t)v->hyp_svalue, v->plo, v->phi);
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    const vd_stage_target *tg = &st->targets[t];
    if (tg->svalue < 0 || !tg->has_bslice) continue;
    hull_box(w, h, (uint32_t)tg->svalue, tg->blo, tg->bhi);
  }
}

/* Cuts every single value of an unpinned class with a slice to the hull. */
static vd_rc cut_to_hulls(wctx *w, vd_stage *st, const hulls_t *h, vd_diag *d) {
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &st->vals[i];
    if (v->side) continue;
    for (int32_t j = 0; j < v->ndim; j++) {
      int64_t k;
      uint32_t r = find_k(w, DIM(i, j), &k);
      if (w->pin[r] || !h->any[r]) continue;
      int64_t a = h->lo[r] * k, b = h->hi[r] * k;
      if (a == 0 && b == v->shape[j]) continue;
      if (VD_NEVER(a < 0 || b > v->shape[j] || a >= b))
        return VD_ERR(d, VD_EINTERNAL, NULL, "stage", "window", "window [%lld, %lld) outside extent %lld",
                      (long long)a, (long long)b, (long long)v->shape[j]);
      v->woff[j] = a;
      v->shape[j] = b - a;
      v->rshape[j] = v->shape[j];
    }
  }
  return VD_OK;
}

/* Rebases slice lo..hi of single value s to its window; the reduced
 * slice rlo..rhi starts out equal to it. */
static void rebase(const vd_stage_value *s, int64_t *lo, int64_t *hi, int64_t *rlo, int64_t *rhi) {
  for (int32_t j = 0; j < s->ndim; j++) {
    lo[j] -= s->woff[j];
    hi[j] -= s->woff[j];
    rlo[j] = lo[j];
    rhi[j] = hi[j];
  }
}

/* Rebases the hypotheses' and targets' slices to the windows. */
static void rebase_slices(vd_stage *st) {
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &st->vals[i];
    if (!v->side || v->producer >= 0 || v->hyp_svalue < 0 || !v->has_pslice) continue;
    rebase(&st->vals[v->hyp_svalue], v->plo, v->phi, v->rlo, v->rhi);
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    vd_stage_target *tg = &st->targets[t];
    if (tg->svalue < 0 || !tg->has_bslice) continue;
    rebase(&st->vals[tg->svalue], tg->blo, tg->bhi, tg->rlo, tg->rhi);
  }
}

vd_rc vd_stage_window(const vd_lin_table *lt, vd_stage *st, vd_diag *d) {
  uint32_t nd = st->n_vals * (uint32_t)VD_MAX_DIMS;
  wctx w = {0};
  hulls_t h = {0};
  vd_rc rc = VD_OK;
  w.st = st;
  w.par = vd_malloc((nd ? nd : 1) * sizeof(*w.par));
  w.k = vd_malloc((nd ? nd : 1) * sizeof(*w.k));
  w.lk = vd_calloc(nd ? nd : 1, sizeof(*w.lk));
  w.pin = vd_calloc(nd ? nd : 1, 1);
  h.lo = vd_malloc((nd ? nd : 1) * sizeof(*h.lo));
  h.hi = vd_malloc((nd ? nd : 1) * sizeof(*h.hi));
  h.any = vd_calloc(nd ? nd : 1, 1);
  if (!w.par || !w.k || !w.lk || !w.pin || !h.lo || !h.hi || !h.any) {
    rc = VD_OOM(d);
    goto done;
  }
  for (uint32_t i = 0; i < nd; i++) w.par[i] = i, w.k[i] = 1;
  w.sum_node = -1;
  w.sum_v = UINT32_MAX;
  st->sum_ok = 0;
  if (st->sum_mode) sum_node(&w, st);
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].side == 0 && (rc = visit_node(&w, lt, st, i, d)) != VD_OK) goto done;
  for (uint32_t i = 0; i < nd; i++)
    if (w.pin[i]) w.pin[find(&w, i)] = 1;
  hull_slices(&w, st, &h);
  if ((rc = cut_to_hulls(&w, st, &h, d)) != VD_OK) goto done;
  if (w.sum_v != UINT32_MAX) sum_window(&w, lt, st);
  rebase_slices(st);
done:
  vd_free(w.par);
  vd_free(w.k);
  vd_free(w.lk);
  vd_free(w.pin);
  vd_free(h.lo);
  vd_free(h.hi);
  vd_free(h.any);
  return rc;
}
