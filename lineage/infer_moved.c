/*
 * lineage/infer_moved.c - the lineage of a value that element-copying
 * operators (view, chunk, concat, transpose: the MOVES operators of
 * ops/ops.def that are no collective) assemble from boxes of one single
 * value: moved_box.
 *
 * A capture rebuilds a tensor held in memory as pieces (FSDP1's flat
 * parameter: a rank's shard holds boxes of several parameters, a partial
 * row, whole rows, a partial row; docs/torch.md "FSDP1") by flattening the
 * pieces, slicing and concatenating them and viewing the result at the
 * tensor's shape.  None of those steps has a twin in the single plan, and
 * no intermediate value is a box (a flattened partial row is no slice of a
 * 2-D weight), so the per-operator rules decide nothing; the tree as a
 * whole is a box.  It is decided by running the tree's own evaluators on
 * the leaves' element indices in single coordinates: the output is a box
 * when it holds, in row-major order, the single indices of one box of the
 * output's shape.  No operator needs a rule for it.
 *
 * Leaves are values with known lineages of one single value with equal
 * parts, factor and no replica shift (a shift would have to be carried
 * through the tree); the tree has at most MB_NODES nodes, MB_DEPTH levels,
 * MB_NUMEL elements per value and MB_TOTAL in all (the cost: one pass of
 * each node's evaluator over its elements).
 *
 * Worklist: the rule reads values up to MB_DEPTH levels upstream, not only
 * the node's inputs.  So when it fails at a node whose tree is complete,
 * the consumers of the node's output are marked (vd_lin_i_mark_readers):
 * the tree of a consumer may be a box where this one is not, and the
 * sweep must visit it as a full pass would.
 *
 * SOUNDNESS: as every rule, it only proposes a candidate; the stage proofs
 * decide.
 */
#include "infer.h"

#define MB_NODES 48
#define MB_DEPTH 8
#define MB_NUMEL ((int64_t)1 << 16)
#define MB_TOTAL ((int64_t)1 << 18) /* elements over the tree's values: 2 MB of doubles */

typedef struct {
  uint32_t node[MB_NODES]; /* Gp nodes, inputs before readers */
  int n_node;
  uint32_t leaf[MB_NODES]; /* Gp values with a known lineage */
  int n_leaf;
  int64_t total; /* elements over the leaves and the nodes' outputs */
} mtree;

static int moves(const ictx *c, const vd_gnode_t *gn) {
  int op = c->pop[gn->pnode];
  return op >= 0 && gn->n_out == 1 && vd_op_copies_elements(op) && !vd_op_has((vd_op_id)op, VD_OPF_COLLECTIVE) &&
         !vd_op_has((vd_op_id)op, VD_OPF_REPEATS);
}

static int listed(const uint32_t *a, int n, uint32_t x) {
  for (int i = 0; i < n; i++)
    if (a[i] == x) return 1;
  return 0;
}

/* Adds value v's subtree: a leaf when v is known, else its producer's. */
static int collect(const ictx *c, mtree *t, uint32_t v, int depth) {
  int64_t numel = vd_tensor_numel(ptens(c, v));
  if (numel > MB_NUMEL) return 0;
  if (vl_at(c, v)->known) {
    if (!listed(t->leaf, t->n_leaf, v)) {
      if (t->n_leaf == MB_NODES || (t->total += numel) > MB_TOTAL) return 0;
      t->leaf[t->n_leaf++] = v;
    }
    return 1;
  }
  int32_t pr = c->gp->values[v].producer;
  if (pr < 0 || depth >= MB_DEPTH || !moves(c, &c->gp->nodes[pr])) return 0;
  if (listed(t->node, t->n_node, (uint32_t)pr)) return 1;
  const vd_gnode_t *gn = &c->gp->nodes[pr];
  const uint32_t *in = vd_gnode_inputs(c->gp, gn);
  for (uint32_t i = 0; i < gn->n_in; i++)
    if (!collect(c, t, in[i], depth + 1)) return 0;
  if (t->n_node == MB_NODES || (t->total += numel) > MB_TOTAL) return 0;
  t->node[t->n_node++] = (uint32_t)pr;
  return 1;
}

/* Whether the leaves are boxes of one single value alike in all else. */
static int leaves_alike(const ictx *c, const mtree *t) {
  const vlin *a = vl_at(c, t->leaf[0]);
  for (int i = 0; i < t->n_leaf; i++) {
    const vlin *l = vl_at(c, t->leaf[i]);
    if (l->zero || l->split || l->sv < 0 || !aligned(c, t->leaf[i])) return 0;
    if (l->sv != a->sv || l->nd != a->nd || l->k0 != a->k0 || l->cnt != a->cnt || l->n != a->n || l->dk != 0 ||
        l->f != a->f)
      return 0;
    for (int32_t d = 0; d < l->nd; d++)
      if (l->dlo[d]) return 0;
  }
  return 1;
}

static int64_t slot_of(const mtree *t, const ictx *c, uint32_t v) {
  for (int i = 0; i < t->n_leaf; i++)
    if (t->leaf[i] == v) return i;
  for (int i = 0; i < t->n_node; i++)
    if (vd_gnode_outputs(c->gp, &c->gp->nodes[t->node[i]])[0] == v) return t->n_leaf + i;
  return -1;
}

/* Leaf i's elements as single row-major indices. */
static void fill_leaf(const ictx *c, uint32_t v, double *a) {
  const vlin *l = vl_at(c, v);
  const vd_tensor_t *st = stens(c, l->sv);
  int64_t n = vd_tensor_numel(ptens(c, v));
  for (int64_t e = 0; e < n; e++) {
    int64_t rest = e, idx = 0, stride = 1;
    for (int32_t d = l->nd - 1; d >= 0; d--) {
      int64_t w = l->hi[d] - l->lo[d];
      idx += (l->lo[d] + rest % w) * stride;
      rest /= w;
      stride *= st->shape[d];
    }
    a[e] = (double)idx;
  }
}

static int eval_node(const ictx *c, const mtree *t, uint32_t gi, double **val) {
  const vd_gnode_t *gn = &c->gp->nodes[gi];
  const uint32_t *in = vd_gnode_inputs(c->gp, gn);
  const double *ins[MB_NODES];
  vd_op_shape ish[MB_NODES], osh;
  if (gn->n_in > MB_NODES) return 0;
  for (uint32_t i = 0; i < gn->n_in; i++) {
    const vd_tensor_t *ti = ptens(c, in[i]);
    ins[i] = val[slot_of(t, c, in[i])];
    ish[i].ndim = ti->ndim;
    memcpy(ish[i].d, ti->shape, sizeof(ish[i].d));
  }
  uint32_t out = vd_gnode_outputs(c->gp, gn)[0];
  const vd_tensor_t *to = ptens(c, out);
  osh.ndim = to->ndim;
  memcpy(osh.d, to->shape, sizeof(osh.d));
  double *outs[1] = {val[slot_of(t, c, out)]};
  vd_op_call call = {.op = c->pop[gn->pnode], .plan = c->pp, .node = &c->pp->nodes[gn->pnode], .n_in = gn->n_in,
                     .n_out = 1, .n_part = 1, .in = ins, .in_shape = ish, .out = outs, .out_shape = &osh};
  return vd_op_check(&call) == VD_OK && vd_op_eval(&call) == VD_OK;
}

/* The box of single value l->sv that out's elements a[] index, row-major
 * over out's shape, into *l; 0 when they index none. */
static int as_box(const ictx *c, uint32_t out, const double *a, vlin *l) {
  const vd_tensor_t *po = ptens(c, out), *st = stens(c, l->sv);
  if (po->ndim != st->ndim || po->ndim < 1) return 0;
  int64_t rest = (int64_t)a[0];
  for (int32_t d = st->ndim - 1; d >= 0; d--) {
    l->lo[d] = rest % st->shape[d];
    rest /= st->shape[d];
    l->hi[d] = l->lo[d] + po->shape[d];
    if (l->hi[d] > st->shape[d]) return 0;
  }
  int64_t n = vd_tensor_numel(po);
  for (int64_t e = 0; e < n; e++) {
    int64_t r = e, idx = 0, stride = 1;
    for (int32_t d = st->ndim - 1; d >= 0; d--) {
      idx += (l->lo[d] + r % po->shape[d]) * stride;
      r /= po->shape[d];
      stride *= st->shape[d];
    }
    if (a[e] != (double)idx) return 0;
  }
  return 1;
}

/* Evaluates tree t (rooted at out) on the leaves' single indices: 1 when
 * out is a box, written to out's lineage. */
static int eval_tree(ictx *c, const mtree *t, uint32_t out) {
  int nv = t->n_leaf + t->n_node;
  double *val[2 * MB_NODES] = {0};
  int ok = 1;
  for (int i = 0; ok && i < nv; i++) {
    uint32_t v = i < t->n_leaf ? t->leaf[i] : vd_gnode_outputs(c->gp, &c->gp->nodes[t->node[i - t->n_leaf]])[0];
    val[i] = vd_malloc((size_t)vd_tensor_numel(ptens(c, v)) * sizeof(double) + sizeof(double));
    ok = val[i] != NULL;
    if (ok && i < t->n_leaf) fill_leaf(c, v, val[i]);
  }
  for (int i = 0; ok && i < t->n_node; i++) ok = eval_node(c, t, t->node[i], val);
  vlin l = *vl_at(c, t->leaf[0]);
  l.uni = 0, l.guess = 0;
  for (int i = 0; i < t->n_leaf; i++) l.noemit |= vl_at(c, t->leaf[i])->noemit;
  ok = ok && as_box(c, out, val[nv - 1], &l);
  for (int i = 0; i < nv; i++) vd_free(val[i]);
  if (ok) vl_put(c, out, &l);
  return ok;
}

void moved_box(ictx *c, uint32_t gi) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (!moves(c, pn)) return;
  mtree t;
  t.n_node = t.n_leaf = 0;
  t.total = 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  uint32_t out = vd_gnode_outputs(c->gp, pn)[0];
  if (vd_tensor_numel(ptens(c, out)) > MB_NUMEL) return;
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!collect(c, &t, in[i], 1)) return;
  if (t.n_node == MB_NODES || !t.n_leaf || !leaves_alike(c, &t)) return;
  t.node[t.n_node++] = gi;
  if (!eval_tree(c, &t, out)) vd_lin_i_mark_readers(c, out);
}

/* Whether value v feeds, through element-copying operators only, a value
 * that has a lineage (within MB_DEPTH levels): v is the inside of a tree
 * that moved_box (or any rule) decided as a whole, such as a flattened
 * partial row on its way into a rebuilt weight, so propagation did not
 * stop at its producer (find_stuck). */
static int feeds_known(const ictx *c, uint32_t v, int depth) {
  if (depth >= MB_DEPTH) return 0;
  const vd_value_t *val = &c->gp->values[v];
  const uint32_t *cons = vd_value_consumers(c->gp, val);
  for (uint32_t k = 0; k < val->n_cons; k++) {
    const vd_gnode_t *gn = &c->gp->nodes[cons[k]];
    if (!moves(c, gn)) continue;
    uint32_t out = vd_gnode_outputs(c->gp, gn)[0];
    if (vl_at(c, out)->known || feeds_known(c, out, depth + 1)) return 1;
  }
  return 0;
}

int moved_interior(const ictx *c, const vd_gnode_t *pn) {
  return moves(c, pn) && feeds_known(c, vd_gnode_outputs(c->gp, pn)[0], 0);
}
