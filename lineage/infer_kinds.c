/*
 * lineage/infer_kinds.c - the propagation rules other than MAP: view and reshape
 * (view_node), sums (sum_node), scaling, chunks and the collectives
 * (coll_node), and prop_node, which picks a node's rule.
 */
#include "infer.h"

/* ---- view / reshape ------------------------------------------------------ */

typedef struct {
  vd_op_red g[VD_MAX_DIMS];
  int n;
} vgroups;

static vd_rc view_group(void *sink, const vd_op_red *r) {
  vgroups *v = sink;
  if (v->n >= VD_MAX_DIMS) return VD_OK;
  if (r->kind == VD_RED_EQ) {
    vd_op_red e = *r;
    e.kind = VD_RED_PROD;
    e.na = e.nb = 1;
    v->g[v->n++] = e;
  } else if (r->kind == VD_RED_PROD) {
    v->g[v->n++] = *r;
  }
  return VD_OK;
}

/* A view maps single coordinates to single coordinates.  The single node's
 * reshape groups (a run of input dims whose product is a run of output
 * dims, from the reduction rule on the SINGLE shapes) carry a box to a box
 * when, in each group, every dim but the first is held whole on the input
 * side, and the flat range then splits into a slice of the first output dim
 * times whole inner dims.  Dims of size 1 are outside every group. */
static void view_node(ictx *c, uint32_t gi, int op) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in != 1 || pn->n_out != 1) return;
  int32_t sm = match_single(c, pn, op);
  uint32_t in = vd_gnode_inputs(c->gp, pn)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  if (sm < 0 || !aligned_any(c, in)) return;
  const vlin *x = vl_at(c, in);
  int32_t so = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[sm])[0];
  const vd_tensor_t *xs = stens(c, x->sv), *ys = stens(c, so), *pt = ptens(c, out);
  if (ys->ndim != pt->ndim) return;
  vd_op_shape ish, osh;
  ish.ndim = xs->ndim;
  memcpy(ish.d, xs->shape, sizeof(ish.d));
  osh.ndim = ys->ndim;
  memcpy(osh.d, ys->shape, sizeof(osh.d));
  vgroups v;
  v.n = 0;
  vd_op_reduce_call rc = {.op = op, .plan = c->sp, .node = &c->sp->nodes[c->gs->nodes[sm].pnode], .n_in = 1,
                          .n_out = 1, .in_shape = &ish, .out_shape = &osh, .emit = view_group, .sink = &v};
  int norule = 0;
  if (vd_op_reduce_rule((vd_op_id)op)(&rc, &norule) != VD_OK || norule) return;
  vlin l = *x;
  l.sv = so;
  l.nd = ys->ndim;
  l.split = 0, l.si = l.ilo = l.ihi = l.dil = 0;
  l.uni = 0;
  uint8_t set[VD_MAX_DIMS] = {0};
  for (int32_t j = 0; j < ys->ndim; j++) {
    l.lo[j] = 0, l.hi[j] = ys->shape[j], l.dlo[j] = 0;
    if (ys->shape[j] == 1) set[j] = 1;
  }
  for (int q = 0; q < v.n; q++) {
    const vd_op_red *g = &v.g[q];
    int32_t a0 = g->a.dim, b0 = g->b.dim;
    if (a0 + g->na > xs->ndim || b0 + g->nb > ys->ndim) return;
    if (x->split > a0 && x->split <= a0 + g->na) {
      /* A split input dim: kept by a 1-1 group, or taken apart into its
       * [outer, inner] pair, which is a box again. */
      if (g->na != 1) return;
      if (g->nb == 1) {
        l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
        l.split = b0 + 1, l.si = x->si, l.ilo = x->ilo, l.ihi = x->ihi, l.dil = x->dil;
      } else if (g->nb == 2 && ys->shape[b0 + 1] == x->si) {
        l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
        l.lo[b0 + 1] = x->ilo, l.hi[b0 + 1] = x->ihi, l.dlo[b0 + 1] = x->dil;
      } else {
        return;
      }
      for (int e = 0; e < g->nb; e++) set[b0 + e] = 1;
      continue;
    }
    if (g->na == 2 && g->nb == 1 && x->hi[a0 + 1] - x->lo[a0 + 1] != xs->shape[a0 + 1] && !l.split) {
      /* [b, s] merged with s sliced: the rows are no range of [b*s], but
       * a box of the split pair. */
      l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
      l.split = b0 + 1, l.si = xs->shape[a0 + 1];
      l.ilo = x->lo[a0 + 1], l.ihi = x->hi[a0 + 1], l.dil = x->dlo[a0 + 1];
      set[b0] = 1;
      continue;
    }
    int64_t inner_i = 1, inner_o = 1;
    for (int e = 1; e < g->na; e++) {
      if (x->hi[a0 + e] - x->lo[a0 + e] != xs->shape[a0 + e]) return;
      inner_i *= xs->shape[a0 + e];
    }
    for (int e = 1; e < g->nb; e++) inner_o *= ys->shape[b0 + e];
    int64_t lo = x->lo[a0] * inner_i, w = (x->hi[a0] - x->lo[a0]) * inner_i, dl = x->dlo[a0] * inner_i;
    if (lo % inner_o || w % inner_o || dl % inner_o) return;
    l.lo[b0] = lo / inner_o, l.hi[b0] = (lo + w) / inner_o, l.dlo[b0] = dl / inner_o;
    if (g->na == 1 && g->nb == 1 && ((x->uni >> a0) & 1)) l.uni |= 1u << b0;
    set[b0] = 1;
    for (int e = 1; e < g->nb; e++) set[b0 + e] = 1;
  }
  for (int32_t j = 0; j < ys->ndim; j++)
    if (!set[j]) return;
  vl_put(c, out, &l);
}

/* ---- the other rule kinds --------------------------------------------- */

static void copy_node(ictx *c, const vd_gnode_t *pn, int op) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_part) {
    /* send/recv, broadcast: the merged instance's outputs take the source's lineage. */
    if (pn->n_in < 1 || !vl_at(c, in[0])->known) return;
    for (uint32_t i = 0; i < pn->n_in; i++)
      if (!vl_at(c, in[i])->known) return;
    for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], vl_at(c, in[pn->n_in == pn->n_out ? o : 0]));
    return;
  }
  if (pn->n_in < 1 || !vl_at(c, in[0])->known) return;
  /* When the single plan runs the same operator on the same value (a
   * multiref the single plan has too), the outputs name ITS outputs, so
   * that single consumers downstream match; otherwise the output holds the
   * input's single value. */
  int32_t sm = vl_at(c, in[0])->zero ? -1 : match_single(c, pn, op);
  for (uint32_t o = 0; o < pn->n_out; o++) {
    vlin l = *vl_at(c, in[0]);
    if (sm >= 0) l.sv = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[sm])[o];
    vl_put(c, out[o], &l);
  }
}

static int same_slice(const vlin *a, const vlin *b) {
  if (a->sv != b->sv || a->nd != b->nd || a->split || b->split) return 0;
  for (int32_t i = 0; i < a->nd; i++)
    if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i] || a->dlo[i] != b->dlo[i]) return 0;
  return 1;
}

/* The same slice (bounds and shifts) of two single values of one shape. */
static int same_slice_shape(const ictx *c, const vlin *a, const vlin *b) {
  if (a->nd != b->nd || a->split || b->split) return 0;
  const vd_tensor_t *x = stens(c, a->sv), *y = stens(c, b->sv);
  if (x->ndim != y->ndim) return 0;
  for (int32_t i = 0; i < a->nd; i++)
    if (x->shape[i] != y->shape[i] || a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i] || a->dlo[i] != b->dlo[i])
      return 0;
  return 1;
}

/* accumulate / add: 0 + x = x; parts [a, a+p) + [a+p, a+p+q) of one slice
 * are parts [a, a+p+q).  Returns 1 when decided. */
static int accum_node(ictx *c, const vd_gnode_t *pn) {
  if (pn->n_in != 2 || pn->n_out != 1) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  uint32_t out = vd_gnode_outputs(c->gp, pn)[0];
  const vlin *a = vl_at(c, in[0]), *b = vl_at(c, in[1]);
  if (!a->known || !b->known) return 0;
  if (a->zero || b->zero) {
    vl_put(c, out, a->zero ? b : a);
    return 1;
  }
  if (!same_slice(a, b) || a->n != b->n || a->dk != b->dk || a->n < 2 || a->f != b->f) return 0;
  const vlin *lo = a->k0 < b->k0 ? a : b, *hi = a->k0 < b->k0 ? b : a;
  if (lo->k0 + lo->cnt != hi->k0) return 0;
  vlin l = *lo;
  l.cnt = lo->cnt + hi->cnt;
  vl_put(c, out, &l);
  return 1;
}

/* A plain elementwise sum of whole operands of one shape: multiref_backward,
 * accumulate, a two-input add (no scalar). */
int is_sum(const vd_plan_t *p, const vd_node_t *nd, int op, uint32_t n_in) {
  if (op == VD_OP_MULTIREF_BACKWARD || op == VD_OP_ACCUMULATE) return 1;
  return op == VD_OP_ADD && n_in == 2 && !vd_node_attr(p, nd, "scalar");
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* A sum whose single twin is another summing operator, or the same one
 * with its operands in another order: the parallel plan accumulates a
 * gradient fan-in (accumulate of a received part and a local one) where
 * the single plan has one multiref_backward of the same two values.  When
 * every input holds the same slice, parts and factor of single values
 * x1..xk, and exactly one single sum node (up to equal outputs) reads the
 * multiset {x1..xk} (exact values first, then copy roots, as match_single),
 * the output holds that slice and parts of its output: the slice of a sum
 * is the sum of the slices, and part k of a sum of partial sums is the sum
 * of the parts k.  SOUNDNESS: as any rule, it only proposes a candidate.
 * Returns 1 when decided. */
static int sum_of_singles(ictx *c, const vd_gnode_t *pn, vlin *out);

static int sum_node(ictx *c, const vd_gnode_t *pn, int op) {
  if (pn->n_out != 1 || pn->n_in < 2 || pn->n_in > MAXOPD || pn->n_part) return 0;
  if (!is_sum(c->pp, &c->pp->nodes[pn->pnode], op, pn->n_in)) return 0;
  vlin l;
  if (!sum_of_singles(c, pn, &l)) return 0;
  vl_put(c, vd_gnode_outputs(c->gp, pn)[0], &l);
  return 1;
}

/* The lineage *out of the sum of pn's inputs (sum_node's rule; an
 * all_reduce's group too, coll_node): 1 when decided. */
static int sum_of_singles(ictx *c, const vd_gnode_t *pn, vlin *out) {
  if (pn->n_in < 2 || pn->n_in > MAXOPD) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  const vlin *a = vl_at(c, in[0]);
  uint32_t want[MAXOPD], have[MAXOPD];
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (!x->known || x->zero || x->sv < 0 || x->noemit || !aligned(c, in[i])) return 0;
    if (i && (!same_slice_shape(c, a, x) || x->k0 != a->k0 || x->cnt != a->cnt || x->n != a->n || x->dk != a->dk ||
              x->f != a->f))
      return 0;
  }
  const vd_tensor_t *at = stens(c, a->sv);
  for (int exact = 1; exact >= 0; exact--) {
    for (uint32_t i = 0; i < pn->n_in; i++)
      want[i] = exact ? (uint32_t)vl_at(c, in[i])->sv : c->sroot[vl_at(c, in[i])->sv];
    qsort(want, pn->n_in, sizeof(*want), cmp_u32);
    uint32_t root = c->sroot[a->sv];
    int32_t found = -1, n_found = 0;
    for (uint32_t q = c->rv_off[root]; q < c->rv_off[root + 1]; q++) {
      const vd_value_t *sv0 = &c->gs->values[c->rv[q]];
      if (exact && c->rv[q] != (uint32_t)a->sv) continue;
      const uint32_t *cons = vd_value_consumers(c->gs, sv0);
      for (uint32_t k = 0; k < sv0->n_cons; k++) {
        const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
        int sop = c->sop[sn->pnode];
        if ((int32_t)cons[k] == found || sn->n_in != pn->n_in || sn->n_out != 1 || sn->n_part || sop < 0 ||
            !is_sum(c->sp, &c->sp->nodes[sn->pnode], sop, sn->n_in))
          continue;
        const uint32_t *sin = vd_gnode_inputs(c->gs, sn);
        const vd_tensor_t *ot = stens(c, (int32_t)vd_gnode_outputs(c->gs, sn)[0]);
        int ok = ot->ndim == at->ndim;
        for (int32_t j = 0; j < at->ndim && ok; j++) ok = ot->shape[j] == at->shape[j];
        for (uint32_t i = 0; i < sn->n_in && ok; i++) have[i] = exact ? sin[i] : c->sroot[sin[i]];
        if (!ok) continue;
        qsort(have, sn->n_in, sizeof(*have), cmp_u32);
        if (memcmp(have, want, sn->n_in * sizeof(*have))) continue;
        if (found >= 0 && same_outputs(c, &c->gs->nodes[found], sn)) continue;
        found = (int32_t)cons[k];
        n_found++;
      }
    }
    if (n_found > 1) return 0;
    if (n_found == 1) {
      *out = *a;
      out->sv = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[found])[0];
      out->guess = 0;
      for (uint32_t i = 1; i < pn->n_in; i++) out->uni &= vl_at(c, in[i])->uni;
      return 1;
    }
  }
  return 0;
}

static int attr_dim(const ictx *c, const vd_gnode_t *pn, int32_t nd, int32_t *dim) {
  int64_t d = vd_node_attr_int(c->pp, &c->pp->nodes[pn->pnode], "dim", 0);
  if (d < 0) d += nd;
  if (d < 0 || d >= nd) return 0;
  *dim = (int32_t)d;
  return 1;
}

/* When the single plan chunks the same value along the same dim and one of
 * its chunks contains slice l (rotate_half's x[..., :h] on a head-sharded
 * x), l is rewritten as a slice of that chunk's output, so that the single
 * consumers of the chunk (rotate_half's neg and cat) match downstream. */
static void rebase_on_single_chunk(const ictx *c, vlin *l, int32_t dim) {
  uint32_t root = c->sroot[l->sv];
  int64_t w = stens(c, l->sv)->shape[dim];
  for (uint32_t q = c->rv_off[root]; q < c->rv_off[root + 1]; q++) {
    const vd_value_t *sv0 = &c->gs->values[c->rv[q]];
    const uint32_t *cons = vd_value_consumers(c->gs, sv0);
    for (uint32_t k = 0; k < sv0->n_cons; k++) {
      const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
      if (c->sop[sn->pnode] != VD_OP_CHUNK || sn->n_in != 1 || sn->n_out != 1) continue;
      const vd_node_t *nd = &c->sp->nodes[sn->pnode];
      int64_t d = vd_node_attr_int(c->sp, nd, "dim", 0);
      if (d < 0) d += l->nd;
      int64_t chunks = vd_node_attr_int(c->sp, nd, "chunks", 1), index = vd_node_attr_int(c->sp, nd, "index", 0);
      if (d != dim || chunks < 1 || w % chunks || index < 0 || index >= chunks) continue;
      int64_t lo = index * (w / chunks), hi = lo + w / chunks;
      int32_t so = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
      if (l->lo[dim] < lo || l->hi[dim] > hi || stens(c, so)->ndim != l->nd) continue;
      l->sv = so;
      l->lo[dim] -= lo;
      l->hi[dim] -= lo;
      return;
    }
  }
}

static void chunk_node(ictx *c, const vd_gnode_t *pn) {
  uint32_t in = vd_gnode_inputs(c->gp, pn)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  if (!aligned(c, in)) return;
  const vlin *x = vl_at(c, in);
  int32_t dim;
  if (!attr_dim(c, pn, x->nd, &dim)) return;
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  int64_t chunks = vd_node_attr_int(c->pp, nd, "chunks", 1), index = vd_node_attr_int(c->pp, nd, "index", 0);
  int64_t w = x->hi[dim] - x->lo[dim];
  if (chunks < 1 || w % chunks || index < 0 || index >= chunks) return;
  vlin l = *x;
  l.lo[dim] = x->lo[dim] + index * (w / chunks);
  l.hi[dim] = l.lo[dim] + w / chunks;
  /* Replica shifts along dim scale with the chunk only when the replicas
   * chunk alike, which they do (one program); the shift itself is kept. */
  if (l.dlo[dim] == 0) rebase_on_single_chunk(c, &l, dim);
  vl_put(c, out, &l);
}

/* chunk_backward (a select's or a slice's gradient: input x placed as
 * chunk `index` of `chunks` along dim, zeros elsewhere): when x holds its
 * single value whole along dim and the single plan pads that value the same
 * way (its twin on x's single value, same dim, index and chunks), the
 * output holds the twin's output, whole along dim and x's box along the
 * other dims, with x's parts and factor (the padding is linear in x: a
 * batch-sliced gradient of the last token's features, under DDP a multiple
 * of the single one).  Along a sliced dim the zeros fall elsewhere than in
 * the single padding: no lineage (as before). */
static void chunk_backward_node(ictx *c, const vd_gnode_t *pn, int op) {
  uint32_t in = vd_gnode_inputs(c->gp, pn)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  if (pn->n_in != 1 || pn->n_out != 1 || !aligned(c, in)) return;
  const vlin *x = vl_at(c, in);
  if (x->sv < 0 || x->noemit) return;
  int32_t dim;
  if (!attr_dim(c, pn, x->nd, &dim)) return;
  const vd_tensor_t *xs = stens(c, x->sv);
  if (x->lo[dim] != 0 || x->hi[dim] != xs->shape[dim] || x->dlo[dim] != 0 || ((x->uni >> dim) & 1)) return;
  int32_t sm = match_single(c, pn, op);
  if (sm < 0) return;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  if (sn->n_in != 1 || sn->n_out != 1 || vd_gnode_inputs(c->gs, sn)[0] != (uint32_t)x->sv) return;
  const vd_node_t *a = &c->pp->nodes[pn->pnode], *b = &c->sp->nodes[sn->pnode];
  static const char *const keys[] = {"dim", "index", "chunks"};
  for (int k = 0; k < 3; k++) {
    int64_t va = vd_node_attr_int(c->pp, a, keys[k], -1), vb = vd_node_attr_int(c->sp, b, keys[k], -1);
    if (k == 0) {
      if (va < 0) va += x->nd;
      if (vb < 0) vb += x->nd;
    }
    if (va != vb) return;
  }
  int32_t so = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
  const vd_tensor_t *ys = stens(c, so), *yp = ptens(c, out);
  if (ys->ndim != x->nd || yp->ndim != x->nd) return;
  vlin l = *x;
  l.sv = so;
  l.lo[dim] = 0, l.hi[dim] = ys->shape[dim];
  if (yp->shape[dim] != ys->shape[dim]) return;
  vl_put(c, out, &l);
}

/* The replicas a collective's group spans (1 unless span_replicas). */
static int64_t span_reps(const ictx *c, const vd_gnode_t *pn) {
  const vd_plan_t *p = c->pp;
  return p->nodes[pn->pnode].span_replicas && p->world.replicas > 1 ? p->world.replicas : 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* The concatenation all_gather and all_to_all make of their inputs: 1 and
 * *l = x0 extended along dim to the inputs' union when every input is a
 * whole slice of x0's value (factor x0's), equal to x0 except along dim,
 * where each follows the previous one in group order; 0 otherwise. */
static int concat_inputs(const ictx *c, const vd_gnode_t *pn, const vlin *x0, int32_t dim, vlin *l) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  *l = *x0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (x->sv != x0->sv || x->n != 1 || x->cnt != 1 || x->f != x0->f) return 0;
    for (int32_t j = 0; j < x->nd; j++) {
      if (j == dim) continue;
      if (x->lo[j] != x0->lo[j] || x->hi[j] != x0->hi[j] || x->dlo[j] != x0->dlo[j]) return 0;
    }
    if (i > 0 && (x->lo[dim] != l->hi[dim] || x->dlo[dim] != x0->dlo[dim])) return 0;
    l->hi[dim] = x->hi[dim];
  }
  return 1;
}

/* The lineage of a summing collective's result, from its members' parts:
 * every member holds parts [k0 + d*dk, + cnt) of n of one slice (replica
 * d), and the group adds the parts of its members, over every replica when
 * it spans them.  The parts added must be distinct and follow one another,
 * [K, K + C): all n of them make the whole slice (HSDP's all_reduce over
 * the replicas of reduce-scattered shard-group sums, a DP all_reduce);
 * fewer are parts [K, K + C) of n, shifted by the members' common dk per
 * replica when the group stays within one (HSDP's shard group sums the
 * batch parts of its ranks only).  0 when the parts do not combine so. */
static int sum_of_parts(const ictx *c, const vd_gnode_t *pn, vlin *out) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  const vlin *x0 = vl_at(c, in[0]);
  int64_t reps = span_reps(c, pn);
  if (x0->n < 2 || (int64_t)pn->n_in * reps > 64) return 0;
  int64_t start[64], total = 0;
  size_t m = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (!same_slice(x0, x) || x->n != x0->n || x->cnt != x0->cnt || x->f != x0->f) return 0;
    if (reps == 1 && x->dk != x0->dk) return 0;
    for (int64_t d = 0; d < reps; d++) start[m++] = x->k0 + d * x->dk;
    total += reps * x->cnt;
  }
  qsort(start, m, sizeof(*start), cmp_i64);
  for (size_t j = 1; j < m; j++)
    if (start[j] != start[j - 1] + x0->cnt) return 0; /* a gap or a part added twice */
  if (start[0] < 0 || start[0] + total > x0->n) return 0;
  *out = *x0;
  if (total == x0->n) {
    out->k0 = 0, out->cnt = 1, out->n = 1, out->dk = 0;
  } else {
    out->k0 = start[0], out->cnt = total;
    out->dk = reps > 1 ? 0 : x0->dk;
  }
  return 1;
}

static void coll_node(ictx *c, const vd_gnode_t *pn, int kind) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in == 0 || pn->n_in != pn->n_out) return;
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned(c, in[i])) return;
  const vlin *x0 = vl_at(c, in[0]);
  if (kind == VD_PROP_ALL_REDUCE || kind == VD_PROP_REDUCE_SCATTER) {
    const char *red = vd_node_attr_str(c->pp, &c->pp->nodes[pn->pnode], "reduce", "sum");
    if (strcmp(red, "sum") != 0) return; /* a max has no rule over parts */
    vlin l;
    /* An all_reduce over a group whose every member is in pn (no replica
     * left out) that adds different single values x1..xk, each member's
     * whole slice (the ranks of DDP accumulating different microbatches
     * of the single plan: rank r's gradient is single microbatch r's), is
     * the single sum of {x1..xk} (sum_node's rule). */
    int summed = kind == VD_PROP_ALL_REDUCE && span_reps(c, pn) == 1 && pn->n_in >= 2 && pn->n_in == pn->n_part &&
                 !sum_of_parts(c, pn, &l) &&
                 sum_of_singles(c, pn, &l);
    if (!summed && !sum_of_parts(c, pn, &l)) return;
    if (kind == VD_PROP_ALL_REDUCE) {
      for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], &l);
      return;
    }
    int32_t dim;
    if (!attr_dim(c, pn, x0->nd, &dim)) return;
    /* A group spanning the replicas (replica-major, plans/plan.h) has
     * n_out * R members: replica d's member o gets chunk d * n_out + o. */
    int64_t reps = span_reps(c, pn);
    int64_t w = x0->hi[dim] - x0->lo[dim], p = (int64_t)pn->n_out * reps;
    if (w % p) return;
    for (uint32_t o = 0; o < pn->n_out; o++) {
      vlin y = l;
      y.lo[dim] = x0->lo[dim] + (int64_t)o * (w / p);
      y.hi[dim] = y.lo[dim] + w / p;
      if (reps > 1) y.dlo[dim] = (int64_t)pn->n_out * (w / p);
      vl_put(c, out[o], &y);
    }
    return;
  }
  /* all_gather: whole parts, contiguous along dim in group order. */
  int32_t dim;
  if (!attr_dim(c, pn, x0->nd, &dim)) return;
  vlin l;
  if (!concat_inputs(c, pn, x0, dim, &l)) return;
  int64_t reps = span_reps(c, pn);
  if (reps > 1) {
    /* Replica d's members follow replica d - 1's: the replicas' slices must
     * continue one another (a shift of the whole replica-0 span), and every
     * replica then holds the same concatenation. */
    int64_t span = l.hi[dim] - l.lo[dim];
    for (int32_t j = 0; j < l.nd; j++)
      if (l.dlo[j] != (j == dim ? span : 0)) return;
    l.hi[dim] = l.lo[dim] + reps * span;
    l.dlo[dim] = 0;
  }
  for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], &l);
}

/* all_to_all (split_dim s, concat_dim t, group order): output j is chunk j
 * along s of every input, concatenated along t.  A box when the inputs are
 * whole slices of one value, equal except along t, where they follow each
 * other in group order (as all_gather's), and their common s slice splits
 * evenly.  s == t (a pure permutation of chunks) is left undecided. */
static void a2a_node(ictx *c, const vd_gnode_t *pn) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in == 0 || pn->n_in != pn->n_out) return;
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned(c, in[i])) return;
  const vlin *x0 = vl_at(c, in[0]);
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  int64_t sd = vd_node_attr_int(c->pp, nd, "split_dim", -1), td = vd_node_attr_int(c->pp, nd, "concat_dim", -1);
  if (sd < 0) sd += x0->nd;
  if (td < 0) td += x0->nd;
  if (sd < 0 || sd >= x0->nd || td < 0 || td >= x0->nd || sd == td) return;
  int64_t p = pn->n_in, w = x0->hi[sd] - x0->lo[sd];
  if (w % p) return;
  vlin l;
  if (!concat_inputs(c, pn, x0, (int32_t)td, &l)) return;
  for (uint32_t o = 0; o < pn->n_out; o++) {
    vlin y = l;
    y.lo[sd] = x0->lo[sd] + (int64_t)o * (w / p);
    y.hi[sd] = y.lo[sd] + w / p;
    vl_put(c, out[o], &y);
  }
}

/* After the operator's own rule: a constant scaling without a single twin
 * (x / 1, a loss divided by the microbatch count) keeps its input's lineage
 * with the factor multiplied, and so does x + 0; a scalar added to a known zero whose twin the
 * single plan adds the same scalar to is that twin's constant (the ones of
 * a loss gradient seed, written 0*x + 1). */
static void scale_through(ictx *c, const vd_gnode_t *pn, int op) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in != 1) return;
  const vlin *x = vl_at(c, in[0]);
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  double s;
  if (x->known && !x->zero && scaling(c->pp, nd, op, &s) && s != 0.0) {
    vlin l = *x;
    l.f *= s;
    if (s != 1.0) l.fsrc = l.f != 1.0 ? (int32_t)(pn - c->gp->nodes) : -1;
    vl_put(c, out[0], &l);
    return;
  }
  if (x->known && (op == VD_OP_ADD || op == VD_OP_SUB) && vd_node_attr(c->pp, nd, "scalar") &&
      !adds_constant(c->pp, nd, op)) {
    vl_put(c, out[0], x); /* x + 0 (python's sum() starts with 0 + x) */
    return;
  }
  if (!x->known || !x->zero || x->sv < 0 || (op != VD_OP_ADD && op != VD_OP_SUB)) return;
  const vd_attr_t *a = vd_node_attr(c->pp, nd, "scalar");
  int32_t sm = a ? match_single(c, pn, op) : -1;
  if (sm < 0) return;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  const vd_attr_t *b = vd_node_attr(c->sp, &c->sp->nodes[sn->pnode], "scalar");
  if (!b || !vd_attr_equal(c->pp, a, c->sp, b)) return;
  vlin l = *x;
  l.zero = 0;
  l.sv = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
  l.k0 = 0, l.cnt = 1, l.n = 1, l.dk = 0, l.f = 1.0, l.fsrc = -1;
  if (stens(c, l.sv)->ndim != l.nd) return;
  vl_put(c, out[0], &l);
}

static int same_shape(const vd_tensor_t *a, const vd_tensor_t *b) {
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(*a->shape));
}

/* The single twin of a known zero that map_node found none for: a Gp node
 * scales its input v by 0, and v holds (a box, parts or a multiple of)
 * single value sv, where the single plan scales by 0 a constant multiple
 * of sv instead (a loss divided by the microbatch count: the parallel
 * value is a share of the undivided single loss, the single seed 0 * (loss
 * / accum)).  0 * (c * v) = 0 * v: the zero is that single zero, the first
 * found over chains of at most ZERO_CHAIN single constant scalings from sv,
 * so that the loss gradient seed (0 * loss + 1) matches its twin.  -1 if
 * none.  Only a name for a zero: what follows from it is a candidate like
 * any other. */
static int32_t zero_twin(const ictx *c, uint32_t v) {
  enum { ZERO_CHAIN = 3 };
  const vlin *x = vl_at(c, v);
  if (!aligned(c, v) || x->sv < 0 || x->noemit) return -1;
  int32_t at = x->sv;
  for (int depth = 0; depth <= ZERO_CHAIN && at >= 0; depth++) {
    const vd_value_t *sv = &c->gs->values[at];
    const uint32_t *cons = vd_value_consumers(c->gs, sv);
    int32_t next = -1;
    for (uint32_t k = 0; k < sv->n_cons; k++) {
      const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
      const vd_node_t *nd = &c->sp->nodes[sn->pnode];
      double s;
      if (c->sop[sn->pnode] < 0 || sn->n_out != 1 || !scaling(c->sp, nd, c->sop[sn->pnode], &s)) continue;
      int32_t out = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
      if (s == 0.0) return same_shape(stens(c, out), stens(c, x->sv)) ? out : -1;
      if (next < 0) next = out;
    }
    at = next;
  }
  return -1;
}

/* ---- element-identity chains ------------------------------------------ */

/* A chain of at most IDENTITY_CHAIN single-input element-copying nodes
 * (views, transposes, permutes, contiguous copies) whose composition puts
 * every element back where it was: a transpose pair, a view and its inverse
 * (issue 26: inference must not depend on no-op nodes without a twin; a
 * stage over the chain's end grew through the whole backward, soundness
 * fuzzer --strip #55).  Decided by running the chain's own evaluators on
 * the element indices, so no operator needs a rule for it.  SOUNDNESS: it
 * only proposes a candidate; the stage proofs decide. */
#define IDENTITY_CHAIN 4
#define IDENTITY_NUMEL_MAX ((int64_t)1 << 16)

static void shape_of(const vd_tensor_t *t, vd_op_shape *s) {
  s->ndim = t->ndim;
  memcpy(s->d, t->shape, sizeof(s->d));
}

/* Runs unary Gp node gn's evaluator on in (its input's shape) into out;
 * 0 when the shapes do not check or the evaluator refuses. */
static int eval_unary(const ictx *c, const vd_gnode_t *gn, const double *in, double *out) {
  const vd_tensor_t *ti = ptens(c, vd_gnode_inputs(c->gp, gn)[0]), *to = ptens(c, vd_gnode_outputs(c->gp, gn)[0]);
  vd_op_shape is, os;
  shape_of(ti, &is);
  shape_of(to, &os);
  const double *ins[1] = {in};
  double *outs[1] = {out};
  vd_op_call call = {.op = c->pop[gn->pnode], .plan = c->pp, .node = &c->pp->nodes[gn->pnode], .n_in = 1,
                     .n_out = 1, .n_part = 1, .in = ins, .in_shape = &is, .out = outs, .out_shape = &os};
  return vd_op_check(&call) == VD_OK && vd_op_eval(&call) == VD_OK;
}

/* Whether chain[0..n) (nodes in execution order, each reading the previous
 * one's output) maps every element of chain[0]'s input to the same place. */
static int chain_is_identity(const ictx *c, const uint32_t *chain, int n) {
  const vd_gnode_t *g0 = &c->gp->nodes[chain[0]];
  int64_t numel = vd_tensor_numel(ptens(c, vd_gnode_inputs(c->gp, g0)[0]));
  if (numel <= 0 || numel > IDENTITY_NUMEL_MAX) return 0;
  double *a = vd_malloc((size_t)numel * sizeof(*a)), *b = vd_malloc((size_t)numel * sizeof(*b));
  int ok = a && b;
  for (int64_t e = 0; ok && e < numel; e++) a[e] = (double)e;
  for (int i = 0; ok && i < n; i++) {
    const vd_gnode_t *gn = &c->gp->nodes[chain[i]];
    ok = vd_tensor_numel(ptens(c, vd_gnode_outputs(c->gp, gn)[0])) == numel && eval_unary(c, gn, a, b);
    double *t = a;
    a = b, b = t;
  }
  for (int64_t e = 0; ok && e < numel; e++) ok = a[e] == (double)e;
  vd_free(a);
  vd_free(b);
  return ok;
}

/* Output of node pn: its value is that of the nearest known value upstream
 * through an identity chain ending at pn, which it then shares. */
static void identity_chain(ictx *c, const vd_gnode_t *pn) {
  uint32_t chain[IDENTITY_CHAIN];
  int n = 0;
  const vd_gnode_t *at = pn;
  for (;;) {
    int op = c->pop[at->pnode];
    if (n == IDENTITY_CHAIN || at->n_in != 1 || at->n_out != 1 || op < 0 || !vd_op_copies_elements(op) ||
        vd_op_index_of((vd_op_id)op)->slot >= 0)
      return;
    chain[n++] = (uint32_t)(at - c->gp->nodes);
    uint32_t v = vd_gnode_inputs(c->gp, at)[0];
    if (vl_at(c, v)->known) break;
    int32_t pr = c->gp->values[v].producer;
    if (pr < 0) return;
    at = &c->gp->nodes[pr];
  }
  uint32_t origin = vd_gnode_inputs(c->gp, at)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  const vd_tensor_t *a = ptens(c, origin), *b = ptens(c, out);
  if (vl_at(c, origin)->zero || a->ndim != b->ndim || memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(*a->shape)))
    return;
  for (int i = 0, j = n - 1; i < j; i++, j--) {
    uint32_t t = chain[i];
    chain[i] = chain[j], chain[j] = t;
  }
  if (n >= 2 && chain_is_identity(c, chain, n)) vl_put(c, out, vl_at(c, origin));
}

/* A node applied again to its own output (a mask, a clamp, relu of relu:
 * f(f(x)) = f(x)) computes the value its input holds.  The output then
 * takes the input's lineage and the input's is kept from the candidates
 * (noemit): a stage whose leaf were that input would see a free value,
 * not one already masked, and could not prove f(leaf) = leaf (soundness
 * fuzzer --strip #114, #177, a causal mask applied twice).  Decided by
 * running both nodes' evaluators on a probe; the input must have pn as its
 * only reader.  SOUNDNESS: it only proposes a candidate. */
static void absorbs_producer(ictx *c, const vd_gnode_t *pn) {
  int op = c->pop[pn->pnode];
  if (pn->n_in != 1 || pn->n_out != 1 || op < 0) return;
  uint32_t v = vd_gnode_inputs(c->gp, pn)[0];
  const vlin *x = vl_at(c, v);
  int32_t pr = c->gp->values[v].producer;
  if (!x->known || x->zero || x->split || pr < 0 || c->gp->values[v].n_cons != 1) return;
  const vd_gnode_t *pg = &c->gp->nodes[pr];
  if (pg->n_in != 1 || pg->n_out != 1 || c->pop[pg->pnode] != op) return;
  int64_t numel = vd_tensor_numel(ptens(c, v));
  if (numel <= 0 || numel > IDENTITY_NUMEL_MAX ||
      numel != vd_tensor_numel(ptens(c, vd_gnode_inputs(c->gp, pg)[0])) ||
      numel != vd_tensor_numel(ptens(c, vd_gnode_outputs(c->gp, pn)[0])))
    return;
  double *a = vd_malloc((size_t)numel * sizeof(*a)), *b = vd_malloc((size_t)numel * sizeof(*b)),
         *d = vd_malloc((size_t)numel * sizeof(*d));
  int ok = a && b && d;
  /* a probe with both signs and no repeats, so masks and clamps act */
  for (int64_t e = 0; ok && e < numel; e++) a[e] = (double)((e * 7919) % 2003) / 97.0 - 10.0;
  ok = ok && eval_unary(c, pg, a, b) && eval_unary(c, pn, b, d);
  for (int64_t e = 0; ok && e < numel; e++) ok = d[e] == b[e];
  int changed = 0;
  for (int64_t e = 0; ok && e < numel && !changed; e++) changed = b[e] != a[e];
  vd_free(a);
  vd_free(b);
  vd_free(d);
  if (!ok || !changed) return; /* an f that moved nothing is identity_chain's */
  vlin copy = *x;
  vl_put(c, vd_gnode_outputs(c->gp, pn)[0], &copy);
  vlin *in_slot = vl_slot(c, v);
  if (in_slot) in_slot->noemit = 1;
}

/* Whether node pn is a constant scaling that brings its input's factor
 * back to 1 (a sum written as mean x count, a loss scale undone).  Its
 * value is then its input's single value itself, and that reading wins
 * over a single twin of the same operator: the single plan's next scale (the
 * loss's 1/tokens) would name it after another value at another factor,
 * true but a different split into microbatch parts, which a stage holding
 * both cannot relate (soundness fuzzer --strip #65, moe ce.sum). */
int cancels_factor(const ictx *c, const vd_gnode_t *pn, int op) {
  double s;
  if (pn->n_in != 1 || pn->n_out != 1 || !scaling(c->pp, &c->pp->nodes[pn->pnode], op, &s)) return 0;
  const vlin *x = vl_at(c, vd_gnode_inputs(c->gp, pn)[0]);
  return x->known && !x->zero && x->f != 1.0 && fabs(x->f * s - 1.0) <= 1e-12;
}

/* The rule of Gp node gi, applied when none of its outputs has a lineage
 * yet; 1 when it was applied (its outputs may have got lineages). */
/* A sum of one part of an n-part partial value and a whole value scaled by
 * 1/n: DTensor's row-parallel linear adds bias/n on each of the n ranks
 * (Replicate -> Partial divides by n) before the sum over them.  The scaled
 * whole value is read as one of n equal parts of the whole: the n ranks'
 * copies sum to it.  Retries map_node with that reading of the input, and
 * restores the input's lineage.  SOUNDNESS: as any rule, it only proposes a
 * candidate; the stage proofs decide. */
static void sum_with_split_replica(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (op != VD_OP_ADD || pn->n_in != 2 || pn->n_out != 1) return;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  for (int w = 0; w < 2; w++) {
    vlin *a = vl_slot(c, in[w]), *b = vl_slot(c, in[1 - w]);
    if (!a || !b || !a->known || !b->known || a->zero || b->zero || a->noemit || b->noemit) continue;
    if (a->n < 2 || a->cnt != 1 || a->f != 1.0 || b->n != 1 || b->cnt != 1) continue;
    if (fabs(b->f * (double)a->n - 1.0) > 1e-12) continue;
    vlin save = *b;
    b->k0 = a->k0, b->n = a->n, b->cnt = 1, b->dk = a->dk, b->f = 1.0, b->fsrc = -1;
    map_node(c, gi, op, ru);
    *b = save;
    if (vl_at(c, vd_gnode_outputs(c->gp, pn)[0])->known) return;
  }
}

int prop_node(ictx *c, uint32_t gi) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  int op = c->pop[pn->pnode];
  if (op < 0) return 0;
  const vd_lin_prop_rule *ru = &rules[op];
  const uint32_t *out = vd_gnode_outputs(c->gp, pn);
  /* Outputs already seeded (annotated final versions) keep their annotation. */
  int seeded = 0;
  for (uint32_t o = 0; o < pn->n_out; o++) seeded |= vl_at(c, out[o])->known;
  if (seeded) return 0;
  if (cancels_factor(c, pn, op)) {
    scale_through(c, pn, op);
    return 1;
  }
  switch (ru->kind) {
  case VD_PROP_COPY: copy_node(c, pn, op); break;
  case VD_PROP_MAP:
    map_node(c, gi, op, ru);
    if (!vl_at(c, out[0])->known) sum_node(c, pn, op);
    break;
  case VD_PROP_ACCUM:
    if (!accum_node(c, pn)) map_node(c, gi, op, ru);
    if (!vl_at(c, out[0])->known) sum_node(c, pn, op);
    if (!vl_at(c, out[0])->known) sum_with_split_replica(c, gi, op, ru);
    break;
  case VD_PROP_SCALE:
    map_node(c, gi, op, ru);
    if (vd_node_attr_float(c->pp, &c->pp->nodes[pn->pnode], "factor", 1.0) == 0.0 && pn->n_out == 1) {
      /* a known zero, named after the single twin's zero when there is one
       * (map_node's, else zero_twin's: the box of the input's) */
      int32_t zt = vl_at(c, out[0])->known ? -1 : zero_twin(c, vd_gnode_inputs(c->gp, pn)[0]);
      vlin x = *vl_at(c, vd_gnode_inputs(c->gp, pn)[0]);
      vlin *l = vl_slot(c, out[0]);
      if (!l) break;
      if (!l->known) {
        memset(l, 0, sizeof(*l));
        l->sv = -1;
        if (zt >= 0) {
          *l = x;
          l->sv = zt;
          l->k0 = 0, l->cnt = 1, l->n = 1, l->dk = 0, l->noemit = 0, l->guess = 0;
        }
      }
      l->known = l->zero = 1;
      l->f = 1.0;
      l->fsrc = -1;
    }
    break;
  case VD_PROP_CHUNK: chunk_node(c, pn); break;
  case VD_PROP_VIEW: view_node(c, gi, op); break;
  case VD_PROP_ALL_REDUCE:
  case VD_PROP_ALL_GATHER:
  case VD_PROP_REDUCE_SCATTER: coll_node(c, pn, ru->kind); break;
  case VD_PROP_ALL_TO_ALL: a2a_node(c, pn); break;
  case VD_PROP_NONE:
    if (op == VD_OP_CHUNK_BACKWARD) chunk_backward_node(c, pn, op);
    break;
  default: break;
  }
  if (pn->n_out == 1 && !vl_at(c, out[0])->known) scale_through(c, pn, op);
  if (pn->n_out == 1 && !vl_at(c, out[0])->known) identity_chain(c, pn);
  if (pn->n_out == 1 && !vl_at(c, out[0])->known) absorbs_producer(c, pn);
  if (pn->n_out == 1 && !vl_at(c, out[0])->known) moved_box(c, gi);
  return 1;
}
