/*
 * verifier/findings.c - failures grouped by root cause (findings.h), and
 * the stage and node facts that the report formats share.
 *
 * Grouping is a union-find over the run's structural issues and failing
 * stages, joined by string keys (sorted, equal neighbours united):
 *   - two failing stages with the same diagnosis and the same diverging
 *     node up to renaming: same symmetry class and same stage-local node
 *     (stages/canon.c: a class is the same stage up to rank, microbatch and
 *     layer renaming), or the same side, operator and source name once
 *     numeric path components ("layers.1.") are taken out (a backward
 *     operator counts as its forward: one changed operator, both passes);
 *   - two failing stages with the same diagnosis and the same factor (or
 *     none) at nodes of one operator whose names end alike
 *     ("*.grad.average", "*.rescale");
 *   - two failing stages that the solver proved SCALE with the same factor
 *     on a scaled hypothesis or at a reducer (solver/stage_solve.c
 *     unscaled_check, reducer_check): every gradient summed where a mean
 *     belongs, whichever operator made each one;
 *   - two structural issues of the same diagnosis and kind at the same node
 *     or the same tensor, up to the same renaming, or (without a node) on
 *     one rank in one module (first three name components);
 *   - a failing stage whose diverging node is, up to renaming, the node of
 *     a structural issue follows from that issue (SCHEDULE then WRONG_VALUE
 *     at the reducer that ran early): one finding, the issue's;
 *   - every DATAFLOW issue joins the first BATCH issue: when the plans read
 *     different global batches, the missing values follow from it.
 * Nothing here changes a verdict: findings only regroup what the run found.
 */
#include "findings.h"

#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "../lineage/lineage.h"
#include "../ops/ops.h"

/* ---- stage and node facts ---------------------------------------------- */

const vd_node_t *vd_rep_pnode(const vd_run *r, const vd_stage_node *sn, const vd_plan_t **plan) {
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  *plan = g->plan;
  return &g->plan->nodes[g->nodes[sn->gnode].pnode];
}

void vd_rep_fmt_node(char *buf, size_t n, const vd_run *r, const vd_stage_node *sn) {
  const vd_plan_t *p;
  const vd_node_t *pn = vd_rep_pnode(r, sn, &p);
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  int32_t mb = g->nodes[sn->gnode].mb;
  char mbs[24] = "";
  if (mb >= 0) snprintf(mbs, sizeof(mbs), " mb %d", mb);
  char src[160] = "";
  /* Names escaped for plain text and every cut on a character boundary
   * (common/text.h): these lines go to every report format. */
  if (pn->src) vd_text_fmt(src, sizeof(src), ", %s", VD_SHOW(vd_plan_s(p, pn->src)));
  if (sn->side)
    vd_text_fmt(buf, n, "rank %lld%s %s '%s' (node %lld%s)", (long long)vd_graph_rank(g, pn->rank, sn->replica), mbs,
                VD_SHOW(vd_node_op(p, pn)), VD_SHOW(vd_plan_s(p, pn->name)), (long long)pn->id, src);
  else
    vd_text_fmt(buf, n, "single %s '%s' (node %lld%s)", VD_SHOW(vd_node_op(p, pn)), VD_SHOW(vd_plan_s(p, pn->name)),
                (long long)pn->id, src);
}

static int attr_equal(const vd_plan_t *a, const vd_attr_t *x, const vd_plan_t *b, const vd_attr_t *y) {
  if (x->kind != y->kind || x->len != y->len) return 0;
  switch (x->kind) {
  case VD_ATTR_INT: return x->v.i == y->v.i;
  case VD_ATTR_FLOAT: return x->v.f == y->v.f;
  case VD_ATTR_STR: return strcmp(vd_plan_s(a, x->v.s), vd_plan_s(b, y->v.s)) == 0;
  case VD_ATTR_INTS: return memcmp(a->ints + x->v.off, b->ints + y->v.off, x->len * sizeof(int64_t)) == 0;
  case VD_ATTR_FLOATS: return memcmp(a->floats + x->v.off, b->floats + y->v.off, x->len * sizeof(double)) == 0;
  }
  return 0;
}

static void fmt_attr(char *buf, size_t n, const vd_plan_t *p, const vd_attr_t *a) {
  switch (a->kind) {
  case VD_ATTR_INT: snprintf(buf, n, "%lld", (long long)a->v.i); break;
  case VD_ATTR_FLOAT: snprintf(buf, n, "%.17g", a->v.f); break;
  case VD_ATTR_STR: vd_text_fmt(buf, n, "'%s'", VD_SHOW(vd_plan_s(p, a->v.s))); break;
  default: snprintf(buf, n, "[%u values]", a->len); break;
  }
}

/* Local values of a verdict's flagged pieces in stage st (the target's
 * (piece, local value) pairs). */
static size_t pieces_to_values(const vd_stage *st, const vd_stage_verdict *v, uint32_t *out, size_t cap) {
  size_t n = 0;
  for (size_t f = 0; f < v->n_flagged && n < cap; f++)
    for (uint32_t t = 0; t < st->n_targets; t++) {
      const vd_stage_target *tg = &st->targets[t];
      for (uint32_t j = 0; j < tg->n_pieces; j++)
        if ((int32_t)st->idx[tg->piece_off + 2 * j] == v->flagged_pieces[f]) {
          uint32_t lv = st->idx[tg->piece_off + 2 * j + 1];
          int dup = 0;
          for (size_t k = 0; k < n; k++) dup |= out[k] == lv;
          if (!dup && n < cap) out[n++] = lv;
        }
    }
  return n;
}

size_t vd_rep_flagged_values(const vd_run *r, size_t i, uint32_t *out, size_t cap) {
  const vd_stage *st = &r->set.stages[i];
  const vd_stage_verdict *v = &r->verdicts[i];
  if (v->n_flagged) return pieces_to_values(st, v, out, cap);
  /* A class member without its own counterexample: its representative's
   * flagged values, at the same stage-local positions (the canonical forms
   * are byte-identical, stages/canon.c). */
  if (st->canon_class >= 0 && (size_t)st->canon_class != i) {
    size_t c = (size_t)st->canon_class;
    size_t n = pieces_to_values(&r->set.stages[c], &r->verdicts[c], out, cap);
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
      if (out[j] < st->n_vals) out[k++] = out[j];
    return k;
  }
  return 0;
}

/* The first attribute of parallel node pn that single node sn2 holds with
 * another value, or NULL when they agree on every attribute both hold. */
static const vd_attr_t *attr_differs(const vd_plan_t *pp, const vd_node_t *pn, const vd_run *r, const vd_node_t *sn2,
                                     const vd_attr_t **sa_out) {
  for (uint32_t a = 0; a < pn->n_attr; a++) {
    const vd_attr_t *pa = &pp->attrs[pn->attr_off + a];
    const vd_attr_t *sa = vd_node_attr(&r->sp, sn2, vd_plan_s(pp, pa->key));
    if (sa && !attr_equal(pp, pa, &r->sp, sa)) {
      *sa_out = sa;
      return pa;
    }
  }
  return NULL;
}

/* The attribute scan: first parallel node (stage order) whose attributes
 * differ from every single-plan node of the same source name and operator
 * (one source line may make several nodes of one operator with their own
 * attributes: the two halves of x.chunk(2) are chunks of index 0 and 1);
 * the difference reported is the one from the first such node. */
static int32_t attr_diverging(const vd_run *r, const vd_stage *st, char *why, size_t n_why) {
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *sn = &st->nodes[i];
    if (!sn->side) continue;
    const vd_plan_t *pp;
    const vd_node_t *pn = vd_rep_pnode(r, sn, &pp);
    const char *name = vd_plan_s(pp, pn->name);
    if (!name[0]) continue;
    const vd_attr_t *first_pa = NULL, *first_sa = NULL;
    int agrees = 0;
    for (size_t k = 0; k < r->sp.n_nodes && !agrees; k++) {
      const vd_node_t *sn2 = &r->sp.nodes[k];
      if (strcmp(vd_plan_s(&r->sp, sn2->name), name) || strcmp(vd_node_op(&r->sp, sn2), vd_node_op(pp, pn))) continue;
      const vd_attr_t *sa = NULL;
      const vd_attr_t *pa = attr_differs(pp, pn, r, sn2, &sa);
      if (!pa) agrees = 1;
      else if (!first_pa) first_pa = pa, first_sa = sa;
    }
    if (!agrees && first_pa) {
      char x[64], y[64];
      fmt_attr(x, sizeof(x), pp, first_pa);
      fmt_attr(y, sizeof(y), &r->sp, first_sa);
      vd_text_fmt(why, n_why, "attribute '%s' is %s here, %s in the single-device plan", VD_SHOW(vd_plan_s(pp, first_pa->key)),
                  x, y);
      return (int32_t)i;
    }
  }
  return -1;
}

/* Whether the single plan has a node of this source name and operator. */
static int in_single(const vd_run *r, const vd_plan_t *p, const vd_node_t *pn) {
  const char *name = vd_plan_s(p, pn->name), *op = vd_node_op(p, pn);
  for (size_t k = 0; k < r->sp.n_nodes; k++)
    if (!strcmp(vd_plan_s(&r->sp, r->sp.nodes[k].name), name) && !strcmp(vd_node_op(&r->sp, &r->sp.nodes[k]), op))
      return 1;
  return 0;
}

/* Order-insensitive shape of the parallel cone that computes stage-local
 * value v: node count and the operators (registry ids) it uses; *extra
 * gets the number of its non-collective nodes the single plan lacks. */
static uint64_t cone_shape(const vd_run *r, const vd_stage *st, uint32_t v, size_t *extra) {
  uint32_t stack[256];
  size_t top = 0, seen = 0;
  uint64_t h = 0;
  uint8_t mark[1024] = {0};
  *extra = 0;
  if (st->vals[v].producer >= 0) stack[top++] = (uint32_t)st->vals[v].producer;
  while (top && seen < 4096) {
    uint32_t k = stack[--top];
    if (k < sizeof(mark) * 8) {
      if (mark[k / 8] & (1u << (k % 8))) continue;
      mark[k / 8] |= (uint8_t)(1u << (k % 8));
    }
    const vd_stage_node *sn = &st->nodes[k];
    seen++;
    if (sn->side && !r->pg.nodes[sn->gnode].n_part) {
      const vd_plan_t *p;
      const vd_node_t *pn = vd_rep_pnode(r, sn, &p);
      *extra += !in_single(r, p, pn);
    }
    uint64_t x = (uint64_t)(sn->op + 2) * 0x9E3779B97F4A7C15ull;
    h += x ^ (x >> 29);
    for (uint32_t j = 0; j < sn->n_in && top < 256; j++) {
      int32_t q = st->vals[st->idx[sn->in_off + j]].producer;
      if (q >= 0 && st->nodes[q].side) stack[top++] = (uint32_t)q;
    }
  }
  return h * 31 + seen;
}

/* Whether the cone of flagged value fv[k] contains the producer of another
 * flagged value: the disagreement then arrives from upstream. */
static int downstream_of_flagged(const vd_stage *st, const uint32_t *fv, size_t nf, size_t k) {
  uint32_t stack[256];
  size_t top = 0, seen = 0;
  int32_t pk = st->vals[fv[k]].producer;
  if (pk < 0) return 0;
  stack[top++] = (uint32_t)pk;
  while (top && seen++ < 4096) {
    uint32_t n = stack[--top];
    for (size_t j = 0; j < nf; j++)
      if (j != k && st->vals[fv[j]].producer == (int32_t)n && (int32_t)n != pk) return 1;
    const vd_stage_node *sn = &st->nodes[n];
    for (uint32_t i = 0; i < sn->n_in && top < 256; i++) {
      int32_t q = st->vals[st->idx[sn->in_off + i]].producer;
      if (q >= 0) stack[top++] = (uint32_t)q;
    }
  }
  return 0;
}

static const char *stage_op(const vd_run *r, const vd_stage *st, int32_t k) {
  const vd_plan_t *p;
  const vd_node_t *pn = vd_rep_pnode(r, &st->nodes[k], &p);
  return vd_node_op(p, pn);
}
static int is_move(const vd_run *r, const vd_stage *st, int32_t k) {
  const char *op = stage_op(r, st, k);
  return st->nodes[k].side && (!strcmp(op, "send") || !strcmp(op, "recv") || !strcmp(op, "move"));
}
static int is_move_or_identity(const vd_run *r, const vd_stage *st, int32_t k) {
  return is_move(r, st, k) || !strcmp(stage_op(r, st, k), "identity");
}

/* The operator where lineage inference saw the factor of a scaled value
 * change (vd_lin_infer_stats.stuck_origin), when stage i is a SCALE failure
 * that contains it: the copies that disagree carry that factor, and the
 * node that first disagrees is only where the factor reaches an annotated
 * value (a boundary-only plan has no lineage for a scaled value, so the
 * failing stage spans from the scaling operator to the boundary).  Matched
 * by source name and operator, first in stage order.  -1 otherwise. */
static int32_t factor_origin(const vd_run *r, size_t i, char *why, size_t n_why) {
  const vd_lin_infer_stats *is = &r->infer;
  const vd_stage *st = &r->set.stages[i];
  /* a share of a mean summed as a whole is a factor too (n / cnt) when the
   * stage shows a SCALE: the divisor that made the share is the fault */
  if (!r->inferred || is->stuck_node < 0 ||
      (is->stuck_why != VD_LIN_STUCK_FACTOR && is->stuck_why != VD_LIN_STUCK_SHARE) || is->stuck_origin < 0 ||
      (size_t)is->stuck_origin >= r->pp.n_nodes || r->verdicts[i].diagnosis != VD_DX_SCALE)
    return -1;
  const vd_node_t *on = &r->pp.nodes[is->stuck_origin];
  const char *name = vd_plan_s(&r->pp, on->name), *op = vd_node_op(&r->pp, on);
  if (!name[0]) return -1;
  for (uint32_t k = 0; k < st->n_nodes; k++) {
    if (!st->nodes[k].side) continue;
    const vd_plan_t *p;
    const vd_node_t *pn = vd_rep_pnode(r, &st->nodes[k], &p);
    if (p != &r->pp || strcmp(vd_plan_s(p, pn->name), name) || strcmp(vd_node_op(p, pn), op)) continue;
    snprintf(why, n_why,
             "the factor %g that the disagreeing copies carry was last changed here (lineage inference; "
             "the copies first disagree where it reaches the boundary)",
             is->stuck_f);
    return (int32_t)k;
  }
  return -1;
}

/* The node where lineage inference first stopped (vd_lin_infer_stats), when
 * the failing stage i contains it and the counterexample gives no sharper
 * diagnosis (WRONG_VALUE, SCALE): the values downstream of it have no
 * lineage, so the stage runs from it to the boundary and the copies that
 * disagree are far from the fault.  A hint, said so in why.  -1 otherwise. */
static int32_t stuck_in_stage(const vd_run *r, size_t i, char *why, size_t n_why) {
  const vd_lin_infer_stats *is = &r->infer;
  const vd_stage *st = &r->set.stages[i];
  vd_diagnosis dx = r->verdicts[i].diagnosis;
  if (!r->inferred || is->stuck_node < 0 || (size_t)is->stuck_node >= r->pp.n_nodes ||
      (dx != VD_DX_WRONG_VALUE && dx != VD_DX_SCALE))
    return -1;
  const vd_node_t *want = &r->pp.nodes[is->stuck_node];
  for (uint32_t k = 0; k < st->n_nodes; k++) {
    if (!st->nodes[k].side) continue;
    const vd_plan_t *p;
    const vd_node_t *pn = vd_rep_pnode(r, &st->nodes[k], &p);
    if (p != &r->pp || pn != want) continue;
    size_t at = (size_t)snprintf(why, n_why, "lineage inference stopped here (a hint): ");
    if (at < n_why) vd_lin_stuck_phrase(is, why + at, n_why - at);
    return (int32_t)k;
  }
  return -1;
}

static int32_t diverging(const vd_run *r, size_t i, char *why, size_t n_why);

/* A repair that another failing stage's values showed (stage_solve_cex.c
 * locate: VD_LOC_REDUCE, a missing reduction, or VD_LOC_POSITION, another
 * rank's position) at a node that stage i holds
 * too, or a copy of it (same source name and operator): a stage that
 * targets one rank's value may hold only that rank's copy of the node, and
 * the repair needs every copy.  The other stage's
 * index, *k the node in stage i; -1 when none. */
static ptrdiff_t reduce_elsewhere(const vd_run *r, size_t i, int32_t *k) {
  const vd_stage *st = &r->set.stages[i];
  for (size_t j = 0; j < r->set.n_stages && !st->compact; j++) {
    const vd_stage_verdict *w = &r->verdicts[j];
    const vd_stage *sj = &r->set.stages[j];
    if (j == i || w->verdict != VD_SMT_NOT_EQUIVALENT || sj->compact ||
        (w->loc_kind != VD_LOC_REDUCE && w->loc_kind != VD_LOC_POSITION) ||
        w->loc_node < 0 || (uint32_t)w->loc_node >= sj->n_nodes)
      continue;
    /* the node or one of its copies (same source name and operator) */
    const vd_plan_t *wp, *qp;
    const vd_node_t *wn = vd_rep_pnode(r, &sj->nodes[w->loc_node], &wp);
    for (uint32_t q = 0; q < st->n_nodes; q++) {
      const vd_stage_node *sn = &st->nodes[q];
      if (!sn->side) continue;
      const vd_node_t *qn = vd_rep_pnode(r, sn, &qp);
      if (qp == wp && !strcmp(vd_plan_s(qp, qn->name), vd_plan_s(wp, wn->name)) &&
          !strcmp(vd_node_op(qp, qn), vd_node_op(wp, wn))) {
        *k = (int32_t)q;
        return (ptrdiff_t)j;
      }
    }
  }
  return -1;
}

/* Whether node k of failing stage i is where lineage inference saw an
 * operator read a partial sum, or one copy's share of a mean, as the whole
 * value (vd_lin_infer_stats PARTIAL, SHARE): the copies sum or average to
 * what the operator needs, so the finding is a missing reduction there,
 * whatever the stage's target then shows (an updated weight computed from
 * an unreduced gradient is only WRONG_VALUE). */
static int reads_unreduced(const vd_run *r, size_t i, int32_t k) {
  const vd_lin_infer_stats *is = &r->infer;
  if (k < 0 || !r->inferred || is->stuck_node < 0 || (size_t)is->stuck_node >= r->pp.n_nodes ||
      (is->stuck_why != VD_LIN_STUCK_SHARE && is->stuck_why != VD_LIN_STUCK_PARTIAL))
    return 0;
  const vd_stage_node *sn = &r->set.stages[i].nodes[k];
  if (!sn->side) return 0;
  const vd_plan_t *p;
  return vd_rep_pnode(r, sn, &p) == &r->pp.nodes[is->stuck_node] && p == &r->pp;
}

/* Graph node of the parallel plan that made stage i's scaled leaf (a SCALE
 * found by the solver's unscaled check, solver/stage_solve.c: the stage
 * holds once that hypothesis is read as its single-device value): the
 * leaf's producer, past operators that only copy or reshape their input
 * (lineage rules COPY and VIEW) and past those that read the factor
 * already (one input a whole value of the same factor by its proven
 * lineage: the learning rate's scaling of the gradient), so that a
 * gradient summed where it should be averaged names its reducer, not the
 * optimizer's step or the view of its flat buffer.  -1 when stage i has
 * no such leaf. */
static int32_t scaled_producer(const vd_run *r, size_t i) {
  const vd_stage *st = &r->set.stages[i];
  const vd_stage_verdict *v = &r->verdicts[i];
  if (v->diagnosis != VD_DX_SCALE || !v->scaled_leaf || v->scaled_leaf > st->n_vals) return -1;
  const vd_stage_value *sv = &st->vals[v->scaled_leaf - 1];
  if (!sv->side || sv->value >= r->pg.n_values || sv->leaf_piece < 0) return -1;
  double f = r->lt.pieces[sv->leaf_piece].f;
  int32_t g = r->pg.values[sv->value].producer;
  for (int steps = 0; g >= 0 && steps < 32; steps++) {
    const vd_gnode_t *gn = &r->pg.nodes[g];
    if (gn->n_part || gn->n_in == 0) break;
    const uint32_t *in = r->pg.idx + gn->in_off;
    int op = (int)vd_op_lookup(vd_node_op(&r->pp, &r->pp.nodes[gn->pnode]));
    int kind = op >= 0 && op < VD_OP__COUNT ? vd_lin_prop_rule_of(op)->kind : VD_PROP_NONE;
    int32_t next = -1;
    if (kind == VD_PROP_COPY || kind == VD_PROP_VIEW) {
      next = (int32_t)in[0];
    } else {
      /* the factor was there already: the one input that is a whole
       * value (no part) of the same factor, by its proven lineage */
      int n = 0;
      for (uint32_t k = 0; k < gn->n_in; k++) {
        int32_t pc = vd_lin_piece_of(&r->lt, in[k], sv->replica);
        if (pc >= 0 && r->lt.pieces[pc].f == f && r->lt.pieces[pc].part_n <= 1) next = (int32_t)in[k], n++;
      }
      if (n != 1) break;
    }
    int32_t q = r->pg.values[next].producer;
    if (q < 0) break;
    g = q;
  }
  return g;
}

/* The node of failing stage i that the solver proved its diagnosis at:
 * the summing collective of reducer_check (solver/stage_solve.c), or the
 * first node (stage order) that reads its scaled leaf (unscaled_check),
 * with why naming the leaf, its factor and (SCALE) the node that made it
 * (scaled_producer); -1 when stage i has neither. */
static int32_t scaled_reader(const vd_run *r, size_t i, char *why, size_t n_why) {
  const vd_stage_verdict *v = &r->verdicts[i];
  if (v->diagnosis == VD_DX_SCALE && v->scaled_node && v->scaled_node <= r->set.stages[i].n_nodes) {
    snprintf(why, n_why,
             "with its sum divided by %s, the stage holds: a sum over copies where their mean belongs, or a "
             "divisor missing after it",
             v->factor);
    return (int32_t)v->scaled_node - 1;
  }
  const vd_stage *st = &r->set.stages[i];
  int share = v->diagnosis == VD_DX_MISSING_REDUCTION;
  int32_t g = share ? -1 : scaled_producer(r, i);
  if ((!share && g < 0) || !v->scaled_leaf || v->scaled_leaf > st->n_vals) return -1;
  uint32_t leaf = v->scaled_leaf - 1;
  const vd_stage_value *lv = &st->vals[leaf];
  if (lv->leaf_piece < 0) return -1;
  const vd_lin_piece *pc = &r->lt.pieces[lv->leaf_piece];
  const vd_tensor_t *t = &r->pp.tensors[r->pg.values[lv->value].tensor];
  for (uint32_t k = 0; k < st->n_nodes; k++) {
    const vd_stage_node *sn = &st->nodes[k];
    int reads = 0;
    for (uint32_t j = 0; j < sn->n_in && !reads; j++) reads = st->idx[sn->in_off + j] == leaf;
    if (!sn->side || !reads) continue;
    if (share) {
      vd_text_fmt(why, n_why,
                  "reads '%s' (t%lld), one copy's share of a mean (part %lld of %lld, times %g: an inferred lineage, "
                  "proven) as the whole value; read as the copies' mean, the stage holds",
                  VD_SHOW(vd_plan_s(&r->pp, t->name)), (long long)t->id, (long long)pc->part_k,
                  (long long)pc->part_n, pc->f);
      return (int32_t)k;
    }
    const vd_node_t *pn = &r->pp.nodes[r->pg.nodes[g].pnode];
    vd_text_fmt(why, n_why,
                "reads '%s' (t%lld), which is %s x its single-device value (an inferred lineage, proven) as "
                "rank %lld %s '%s' (node %lld) made it; read as that value, the stage holds",
                VD_SHOW(vd_plan_s(&r->pp, t->name)), (long long)t->id, VD_SHOW(v->factor),
                (long long)vd_graph_rank(&r->pg, pn->rank, lv->replica), VD_SHOW(vd_node_op(&r->pp, pn)),
                VD_SHOW(vd_plan_s(&r->pp, pn->name)), (long long)pn->id);
    return (int32_t)k;
  }
  return -1;
}

/* The reason is made plain text here, once for every format: cut on a
 * character boundary and escaped (the lineage phrase quotes names). */
int32_t vd_rep_diverging(const vd_run *r, size_t i, char *why, size_t n_why) {
  int32_t dn = diverging(r, i, why, n_why);
  if (n_why) {
    char raw[512];
    vd_text_fix_cut(why, n_why, 0);
    snprintf(raw, sizeof(raw), "%s", why);
    vd_text_fix_cut(raw, sizeof(raw), 0);
    vd_text_esc(why, n_why, raw, VD_TEXT_PLAIN);
  }
  return dn;
}

static int32_t diverging(const vd_run *r, size_t i, char *why, size_t n_why) {
  const vd_stage *st = &r->set.stages[i];
  why[0] = '\0';
  int32_t dn = scaled_reader(r, i, why, n_why);
  if (dn >= 0) return dn;
  dn = attr_diverging(r, st, why, n_why);
  if (dn >= 0) return dn;
  dn = factor_origin(r, i, why, n_why);
  if (dn >= 0) return dn;
  /* where the values that reproduced the disagreement show it entering
   * (solver/stage_solve_cex.c locate): a reduction that repairs the stage
   * names its node before the lineage hint; the first value without a twin
   * after it, before the copy that disagrees */
  const vd_stage_verdict *v = &r->verdicts[i];
  int loc = v->loc_kind != VD_LOC_NONE && v->loc_node >= 0 && (uint32_t)v->loc_node < st->n_nodes;
  if (loc && (v->loc_kind == VD_LOC_REDUCE || v->loc_kind == VD_LOC_POSITION)) {
    snprintf(why, n_why, "%s", v->loc_note);
    return v->loc_node;
  }
  int32_t at = -1;
  ptrdiff_t other = reduce_elsewhere(r, i, &at);
  if (other >= 0) {
    snprintf(why, n_why, "in stage %td, which holds all of them, %s", other, r->verdicts[other].loc_note);
    return at;
  }
  dn = stuck_in_stage(r, i, why, n_why);
  if (dn >= 0) return dn;
  /* only with positive evidence: a value merely without a twin may be a
   * legitimate one (a per-microbatch gradient, a partial sum) upstream of
   * the fault */
  if (loc && v->loc_kind == VD_LOC_PERMUTED) {
    snprintf(why, n_why, "%s", v->loc_note);
    return v->loc_node;
  }
  uint32_t fv[64];
  size_t nf = vd_rep_flagged_values(r, i, fv, 64);
  /* The producer of the first flagged copy (lowest stage-local value); when
   * the flagged copies were computed by differently shaped cones (a sum of
   * parts is wrong as a whole, every part flagged, one rank computed its
   * part with extra nodes), from the rarest cone shape: the odd one out. */
  uint64_t sig[64];
  size_t extra[64];
  for (size_t k = 0; k < nf; k++) sig[k] = cone_shape(r, st, fv[k], &extra[k]);
  int32_t best = -1;
  size_t best_n = SIZE_MAX, best_x = 0;
  for (size_t k = 0; k < nf; k++) {
    if (st->vals[fv[k]].producer < 0 || downstream_of_flagged(st, fv, nf, k)) continue;
    size_t same = 0;
    for (size_t j = 0; j < nf; j++) same += sig[j] == sig[k];
    /* Rarest shape first; among equally rare ones (replicas make every
     * shape come twice), the cone with more nodes that the single plan
     * does not have (an inserted rescale); then the lowest value. */
    if (same < best_n || (same == best_n && (extra[k] > best_x || (extra[k] == best_x && fv[k] < (uint32_t)best)))) {
      best = (int32_t)fv[k];
      best_n = same;
      best_x = extra[k];
    }
  }
  if (best >= 0) {
    int32_t k = st->vals[best].producer;
    snprintf(why, n_why, "produces the first disagreeing copy");
    /* A send/recv only moves what it is given: when what it moves comes
     * from an identity or another move in the stage, name that node (an
     * all_reduce replaced by identity, then sent to the next pipeline
     * stage, is the identity's fault, not the send's).  Moves fed by a
     * computation stay named: a crossed send/recv is the move's fault. */
    for (int steps = 0; steps < 8 && is_move(r, st, k); steps++) {
      const vd_stage_node *sn = &st->nodes[k];
      if (!sn->n_in) break;
      int32_t q = st->vals[st->idx[sn->in_off]].producer;
      if (q < 0 || !st->nodes[q].side || !is_move_or_identity(r, st, q)) break;
      k = q;
      snprintf(why, n_why, "its value reaches the first disagreeing copy through data movement only");
    }
    return k;
  }
  return -1;
}

/* ---- hints ------------------------------------------------------------- */

static const char *const hints[VD_DX__COUNT] = {
    [VD_DX_NONE] = "",
    [VD_DX_MISSING_REDUCTION] =
        "the copies add up to the right value: a sum over ranks is missing; look for a dropped all_reduce or "
        "reduce_scatter after a row-parallel matmul, or a gradient not reduced over its TP, DP or tied-weight group",
    [VD_DX_EXTRA_REDUCTION] =
        "each copy is the value times the number of copies: a reduction runs twice, or over a value that was "
        "already whole (all_reduce of a replicated tensor)",
    [VD_DX_SCALE] =
        "each copy is the right value times a constant factor (named): look for a scaling constant, an average "
        "instead of a sum (or the reverse) in a gradient reducer, a loss normalized by a local count",
    [VD_DX_PERMUTED_SLICES] =
        "a copy holds the right values of another slice: look for an all_gather or concat in process-group "
        "order instead of slice order, or crossed send/recv endpoints",
    [VD_DX_WRONG_VALUE] =
        "the copy differs in a way that is not a sum, a factor or a permutation: look at the named node's "
        "constants and inputs on the flagged ranks (a changed epsilon, exponent, offset, a duplicated input)",
    [VD_DX_DATAFLOW] =
        "a value is read that nothing produces, or comes from the wrong rank: look for a removed collective "
        "whose consumers remain, a send/recv pair with the wrong peer, or a ZeRO parameter all_gather missing "
        "after the optimizer step",
    [VD_DX_SCHEDULE] =
        "an operation runs before its inputs are complete: look for a gradient reducer (DDP bucket hook, "
        "ZeRO reduce) launched before the last microbatch's backward",
    [VD_DX_ALIGNMENT] =
        "microbatches run different programs, or a per-microbatch value is used once per iteration: look at "
        "the pipeline schedule and at state kept across microbatches",
    [VD_DX_SHAPE] =
        "a node's output shape does not follow from its inputs: look for a collective replaced by another "
        "(all_reduce vs all_gather vs reduce_scatter) or a wrong split dimension",
    [VD_DX_BATCH] =
        "the two plans read different global batches (sample count or order): compare the data loader, "
        "global batch size and microbatch count of the two configurations",
};

const char *vd_findings_hint(vd_diagnosis dx) { return dx < VD_DX__COUNT && hints[dx] ? hints[dx] : ""; }

/* ---- grouping ---------------------------------------------------------- */

/* Name with its numeric path components ("layers.1.attn" -> "layers.*.attn")
 * taken out: the renaming of layers (and experts) that symmetry allows. */
static void norm_name(char *out, size_t n, const char *s) {
  size_t o = 0;
  for (size_t i = 0; s[i] && o + 2 < n;) {
    int start = i == 0 || s[i - 1] == '.' || s[i - 1] == '_';
    size_t j = i;
    while (s[j] >= '0' && s[j] <= '9') j++;
    if (start && j > i && (s[j] == '\0' || s[j] == '.' || s[j] == '_')) {
      out[o++] = '*';
      i = j;
    } else {
      out[o++] = s[i++];
    }
  }
  out[o] = '\0';
}

/* Side, operator and renamed source name of a plan node.  A backward
 * operator is keyed as its forward ("rope_backward" as "rope"): a changed
 * operator of the model changes both passes, and that is one cause. */
static void node_sig(char *out, size_t n, const vd_plan_t *p, int64_t pnode, int side) {
  char nm[200], op[96];
  const vd_node_t *pn = &p->nodes[pnode];
  norm_name(nm, sizeof(nm), vd_plan_s(p, pn->name));
  if (!nm[0]) snprintf(nm, sizeof(nm), "#%lld", (long long)pn->id); /* unnamed: only itself */
  snprintf(op, sizeof(op), "%s", vd_node_op(p, pn));
  size_t l = strlen(op), b = strlen("_backward");
  if (l > b && !strcmp(op + l - b, "_backward")) op[l - b] = '\0';
  snprintf(out, n, "%d|%s|%s", side, op, nm);
}

/* The first k dot-separated components of s (renamed): the module. */
static void prefix_comps(char *out, size_t n, const char *s, int k) {
  norm_name(out, n, s);
  for (char *c = out; *c; c++)
    if (*c == '.' && --k == 0) {
      *c = '\0';
      break;
    }
}

/* The last dot-separated component of s, or NULL when s has only one. */
static const char *last_comp(const char *s) {
  const char *d = strrchr(s, '.');
  return d ? d + 1 : NULL;
}

typedef struct {
  char *key;
  size_t item;
} kv;

typedef struct {
  kv *v;
  size_t n, cap;
  int oom;
} kvs;

static void add_key(kvs *k, size_t item, const char *fmt_key) {
  if (k->oom) return;
  if (VD_GROW(k->v, k->cap, k->n + 1)) {
    k->oom = 1;
    return;
  }
  char *s = vd_strdup(fmt_key);
  if (!s) {
    k->oom = 1;
    return;
  }
  k->v[k->n++] = (kv){s, item};
}

static int kv_cmp(const void *a, const void *b) {
  const kv *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->item > y->item) - (x->item < y->item);
}

static size_t uf_find(size_t *p, size_t x) {
  while (p[x] != x) x = p[x] = p[p[x]];
  return x;
}
static void uf_union(size_t *p, size_t a, size_t b) {
  a = uf_find(p, a);
  b = uf_find(p, b);
  if (a == b) return;
  /* the smaller index stays the root: issues before stages, lower first */
  if (a < b) p[b] = a;
  else p[a] = b;
}

/* Topological positions: per graph node, and per plan node (its earliest
 * instance, collective participants included). */
static vd_rc topo_positions(const vd_graph_t *g, uint32_t **gpos, uint32_t **ppos) {
  *gpos = vd_malloc((g->n_nodes ? g->n_nodes : 1) * sizeof(uint32_t));
  *ppos = vd_malloc((g->plan->n_nodes ? g->plan->n_nodes : 1) * sizeof(uint32_t));
  if (!*gpos || !*ppos) return VD_ENOMEM;
  for (size_t i = 0; i < g->plan->n_nodes; i++) (*ppos)[i] = UINT32_MAX;
  for (size_t k = 0; k < g->n_nodes; k++) {
    uint32_t gi = g->topo ? g->topo[k] : (uint32_t)k;
    const vd_gnode_t *gn = &g->nodes[gi];
    (*gpos)[gi] = (uint32_t)k;
    if ((*ppos)[gn->pnode] == UINT32_MAX) (*ppos)[gn->pnode] = (uint32_t)k;
    for (uint32_t j = 0; j < gn->n_part; j++) {
      uint32_t pn = g->idx[gn->part_off + 2 * j];
      if (pn < g->plan->n_nodes && (*ppos)[pn] == UINT32_MAX) (*ppos)[pn] = (uint32_t)k;
    }
  }
  return VD_OK;
}

typedef struct {
  int64_t *r; size_t nr, cr;
  int32_t *m; size_t nm, cm;
  int32_t *l; size_t nl, cl;
  int oom;
} foot;

static void foot_rank(foot *f, int64_t x) {
  if (x < 0 || f->oom) return;
  if (VD_GROW(f->r, f->cr, f->nr + 1)) f->oom = 1;
  else f->r[f->nr++] = x;
}
static void foot_i32(foot *f, int32_t **v, size_t *n, size_t *c, int32_t x) {
  if (x < 0 || f->oom) return;
  if (vd_grow((void **)v, c, *n + 1, sizeof(**v))) f->oom = 1;
  else (*v)[(*n)++] = x;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}
/* Sorts v (n elements of size sz, in cmp's order) and keeps one of each
 * value at its front; returns how many it kept. */
static size_t sort_uniq(void *v, size_t n, size_t sz, int (*cmp)(const void *, const void *)) {
  if (!n) return 0;
  qsort(v, n, sz, cmp);
  char *b = v;
  size_t k = 1;
  for (size_t i = 1; i < n; i++)
    if (cmp(b + i * sz, b + (k - 1) * sz)) memcpy(b + k++ * sz, b + i * sz, sz);
  return k;
}

/* Ranks of a stage-local parallel value: every replica the stage stands for. */
static void foot_value(foot *f, const vd_run *r, const vd_stage *st, uint32_t lv) {
  const vd_stage_value *sv = &st->vals[lv];
  if (!sv->side) return;
  const vd_value_t *gv = &r->pg.values[sv->value];
  int32_t rank = r->pp.tensors[gv->tensor].rank;
  if (st->n_rep > 1)
    for (uint32_t k = 0; k < st->n_rep; k++) foot_rank(f, vd_graph_rank(&r->pg, rank, (int32_t)k));
  else
    foot_rank(f, vd_graph_rank(&r->pg, rank, sv->replica));
  foot_i32(f, &f->m, &f->nm, &f->cm, gv->mb);
  /* a stage standing for other microbatches fails in each of them */
  for (uint32_t k = 1; gv->mb >= 0 && st->mb_list && k < st->n_mb; k++) foot_i32(f, &f->m, &f->nm, &f->cm, st->mb_list[k]);
}

static void foot_node(foot *f, const vd_run *r, const vd_stage *st, int32_t ln, int ranks) {
  const vd_stage_node *sn = &st->nodes[ln];
  if (!sn->side) return;
  const vd_gnode_t *gn = &r->pg.nodes[sn->gnode];
  const vd_node_t *pn = &r->pp.nodes[gn->pnode];
  foot_i32(f, &f->l, &f->nl, &f->cl, pn->layer);
  if (!ranks) return;
  if (st->n_rep > 1)
    for (uint32_t k = 0; k < st->n_rep; k++) foot_rank(f, vd_graph_rank(&r->pg, pn->rank, (int32_t)k));
  else
    foot_rank(f, vd_graph_rank(&r->pg, pn->rank, sn->replica));
  foot_i32(f, &f->m, &f->nm, &f->cm, gn->mb);
  for (uint32_t k = 1; gn->mb >= 0 && st->mb_list && k < st->n_mb; k++) foot_i32(f, &f->m, &f->nm, &f->cm, st->mb_list[k]);
}

void vd_findings_free(vd_findings *fs) {
  if (!fs) return;
  for (size_t i = 0; i < fs->n; i++) {
    vd_free(fs->v[i].stages);
    vd_free(fs->v[i].issues);
    vd_free(fs->v[i].ranks);
    vd_free(fs->v[i].mbs);
    vd_free(fs->v[i].layers);
  }
  vd_free(fs->v);
  fs->v = NULL;
  fs->n = 0;
}

static int cmp_finding(const void *a, const void *b) {
  const vd_finding *x = a, *y = b;
  if (x->topo != y->topo) return x->topo < y->topo ? -1 : 1;
  if (x->structural != y->structural) return y->structural - x->structural;
  return (x->rep > y->rep) - (x->rep < y->rep);
}

/* Plan of an issue's node or tensor, or NULL. */
static const vd_plan_t *issue_plan(const vd_run *r, const vd_issue *is) { return is->single ? &r->sp : &r->pp; }

/* The grouping of one run's issues and failing stages into findings:
 * items 0..ni are the issues, ni..ni+ns the stages; parent is their
 * union-find, dn the stages' diverging nodes, *pos the nodes' topological
 * positions in the four graphs, keys the grouping keys. */
struct grouping {
  const vd_run *r;
  size_t ni, ns, n;
  size_t *parent;
  int32_t *dn;
  uint32_t *sgpos, *sppos, *pgpos, *pppos;
  kvs keys;
};

/* Issues: by node and by tensor; BATCH absorbs DATAFLOW. */
static void key_issues(struct grouping *g) {
  const vd_run *r = g->r;
  char key[512], sig[400];
  size_t batch = SIZE_MAX;
  for (size_t i = 0; i < g->ni; i++)
    if (r->issues[i].diagnosis == VD_DX_BATCH && batch == SIZE_MAX) batch = i;
  for (size_t i = 0; i < g->ni; i++) {
    const vd_issue *is = &r->issues[i];
    const vd_plan_t *p = issue_plan(r, is);
    if (batch != SIZE_MAX && is->diagnosis == VD_DX_DATAFLOW) uf_union(g->parent, batch, i);
    if (is->pnode >= 0 && (size_t)is->pnode < p->n_nodes) {
      node_sig(sig, sizeof(sig), p, is->pnode, !is->single);
      snprintf(key, sizeof(key), "I|%d|%s|%s|%s", (int)is->diagnosis, is->source, is->kind_name, sig);
      add_key(&g->keys, i, key);
      snprintf(key, sizeof(key), "C|%s", sig);
      add_key(&g->keys, i, key);
    }
    if (is->tensor >= 0 && (size_t)is->tensor < p->n_tensors) {
      char nm[200];
      norm_name(nm, sizeof(nm), vd_plan_s(p, p->tensors[is->tensor].name));
      snprintf(key, sizeof(key), "T|%d|%s|%s|%d|%s", (int)is->diagnosis, is->source, is->kind_name, !is->single, nm);
      add_key(&g->keys, i, key);
      if (is->pnode < 0) {
        /* No node: the same kind of problem in one module on one rank
         * (two swapped gradients are two such entries, one cause). */
        prefix_comps(nm, sizeof(nm), vd_plan_s(p, p->tensors[is->tensor].name), 3);
        snprintf(key, sizeof(key), "M|%d|%s|%s|%d|%lld|%s", (int)is->diagnosis, is->source, is->kind_name, !is->single,
                 (long long)is->rank, nm);
        add_key(&g->keys, i, key);
      }
    }
  }
}

/* Failing stages: diverging node of class representatives (members use
 * the same stage-local node). */
static void key_stages(struct grouping *g) {
  const vd_run *r = g->r;
  char key[512], sig[400], why[256];
  int32_t *dn = g->dn;
  for (size_t i = 0; i < g->ns; i++) {
    dn[i] = -1;
    const vd_stage *st = &r->set.stages[i];
    const vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_NOT_EQUIVALENT) continue;
    size_t c = st->canon_class >= 0 ? (size_t)st->canon_class : i;
    if (c < i && r->verdicts[c].verdict == VD_SMT_NOT_EQUIVALENT && dn[c] >= 0 && (uint32_t)dn[c] < st->n_nodes)
      dn[i] = dn[c];
    else
      dn[i] = vd_rep_diverging(r, i, why, sizeof(why));
    snprintf(key, sizeof(key), "S|%d|%zu|%d", (int)v->diagnosis, c, dn[i]);
    add_key(&g->keys, g->ni + i, key);
    /* SCALE proven by the solver on a hypothesis or at a reducer
     * (solver/stage_solve.c unscaled_check, reducer_check): one factor
     * throughout is one cause (every gradient summed over its copies where
     * their mean belongs), whichever operator each stage's value came from */
    if (v->diagnosis == VD_DX_SCALE && (v->scaled_leaf || v->scaled_node)) {
      snprintf(key, sizeof(key), "F|%s", v->factor);
      add_key(&g->keys, g->ni + i, key);
    }
    /* a SCALE on a scaled hypothesis is keyed by the node that made it,
     * which its finding names (describe_by_stage) */
    int32_t sp = scaled_producer(r, c);
    if (sp >= 0 || (dn[i] >= 0 && st->nodes[dn[i]].side)) {
      uint32_t pn = sp >= 0 ? r->pg.nodes[sp].pnode : r->pg.nodes[st->nodes[dn[i]].gnode].pnode;
      node_sig(sig, sizeof(sig), &r->pp, pn, 1);
      snprintf(key, sizeof(key), "N|%s", sig);
      add_key(&g->keys, g->ni + i, key);
      /* The same kind of node under many names with the same diagnosis and
       * factor (every DP reducer of a rank averaging, every accumulator of a
       * layer rescaled): one cause. */
      const char *lc = last_comp(vd_plan_s(&r->pp, r->pp.nodes[pn].name));
      if (lc) {
        snprintf(key, sizeof(key), "R|%d|%s|%s|%s", (int)v->diagnosis, v->factor, vd_node_op(&r->pp, &r->pp.nodes[pn]), lc);
        add_key(&g->keys, g->ni + i, key);
      }
      snprintf(key, sizeof(key), "C|%s", sig);
      add_key(&g->keys, g->ni + i, key);
    }
  }
}

/* Items sharing a key are one group. */
static void join_keys(struct grouping *g) {
  kvs *keys = &g->keys;
  if (keys->n > 1) qsort(keys->v, keys->n, sizeof(*keys->v), kv_cmp); /* keys.v is NULL when empty */
  for (size_t k = 1; k < keys->n; k++)
    if (!strcmp(keys->v[k].key, keys->v[k - 1].key)) {
      /* C| keys join a stage to an issue only (two stages need N| or S|). */
      if (keys->v[k].key[0] == 'C' && keys->v[k - 1].item >= g->ni) continue;
      uf_union(g->parent, keys->v[k - 1].item, keys->v[k].item);
    }
}

/* Findings, one per root (roots are each group's lowest item), with their
 * issues and stages (n_ranks / n_mbs serve as their capacities here). */
static vd_rc gather_findings(const struct grouping *g, size_t *root_of, vd_findings *out) {
  const vd_run *r = g->r;
  size_t ni = g->ni, cap_f = 0;
  for (size_t i = 0; i < g->n; i++) root_of[i] = SIZE_MAX;
  for (size_t i = 0; i < g->n; i++) {
    if (i >= ni && r->verdicts[i - ni].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    size_t root = uf_find(g->parent, i);
    if (root_of[root] == SIZE_MAX) {
      if (VD_GROW(out->v, cap_f, out->n + 1)) return VD_ENOMEM;
      memset(&out->v[out->n], 0, sizeof(out->v[0]));
      root_of[root] = out->n++;
    }
    vd_finding *f = &out->v[root_of[root]];
    if (i < ni) {
      if (VD_GROW(f->issues, f->n_ranks, f->n_issues + 1)) return VD_ENOMEM;
      f->issues[f->n_issues++] = i;
    } else {
      if (VD_GROW(f->stages, f->n_mbs, f->n_stages + 1)) return VD_ENOMEM;
      f->stages[f->n_stages++] = i - ni;
    }
  }
  return VD_OK;
}

/* A structural finding: its representative issue is a BATCH one when there
 * is one, else the earliest by node position, else the first listed. */
static void describe_by_issue(const struct grouping *g, vd_finding *f, foot *ft) {
  const vd_run *r = g->r;
  size_t best = f->issues[0];
  uint64_t bpos = UINT64_MAX;
  for (size_t j = 0; j < f->n_issues; j++) {
    const vd_issue *is = &r->issues[f->issues[j]];
    uint64_t pos = UINT64_MAX - 1;
    if (is->pnode >= 0)
      pos = is->single ? g->sppos[is->pnode] : (uint64_t)1 << 32 | g->pppos[is->pnode];
    if (is->diagnosis == VD_DX_BATCH) pos = 0;
    if (pos < bpos) {
      bpos = pos;
      best = f->issues[j];
    }
  }
  const vd_issue *is = &r->issues[best];
  f->rep = best;
  f->diagnosis = is->diagnosis;
  f->topo = bpos;
  f->pnode = is->pnode;
  f->side = !is->single;
  f->node_rank = is->rank;
  f->node_mb = is->mb;
  vd_text_fmt(f->why, sizeof(f->why), "%s %s", VD_SHOW(is->source), VD_SHOW(is->kind_name));
  for (size_t j = 0; j < f->n_issues; j++) {
    const vd_issue *js = &r->issues[f->issues[j]];
    foot_rank(ft, js->rank);
    foot_i32(ft, &ft->m, &ft->nm, &ft->cm, (int32_t)js->mb);
    if (!js->single && js->pnode >= 0) foot_i32(ft, &ft->l, &ft->nl, &ft->cl, r->pp.nodes[js->pnode].layer);
  }
}

/* A finding of failing stages: its representative stage is, among those
 * with their own counterexample, the one whose diverging node comes first. */
static void describe_by_stage(const struct grouping *g, vd_finding *f) {
  const vd_run *r = g->r;
  size_t rep = f->stages[0];
  uint64_t rpos = UINT64_MAX;
  int rcex = 0;
  for (size_t j = 0; j < f->n_stages; j++) {
    size_t i = f->stages[j];
    int cex = r->verdicts[i].n_elems > 0;
    uint64_t pos = UINT64_MAX - 1;
    if (g->dn[i] >= 0) {
      const vd_stage_node *sn = &r->set.stages[i].nodes[g->dn[i]];
      pos = sn->side ? (uint64_t)1 << 32 | g->pgpos[sn->gnode] : g->sgpos[sn->gnode];
    }
    if ((cex && !rcex) || (cex == rcex && pos < rpos)) {
      rep = i;
      rpos = pos;
      rcex = cex;
    }
  }
  f->rep = rep;
  f->diagnosis = r->verdicts[rep].diagnosis;
  f->local_node = vd_rep_diverging(r, rep, f->why, sizeof(f->why));
  if (f->diagnosis == VD_DX_WRONG_VALUE && reads_unreduced(r, rep, f->local_node))
    f->diagnosis = VD_DX_MISSING_REDUCTION;
  /* the values show more than the generic class (stage_solve_cex.c locate):
   * the node's copies reduced repair the stage, or it rearranges a value */
  const vd_stage_verdict *rv = &r->verdicts[rep];
  int32_t elsewhere = -1;
  if (f->diagnosis == VD_DX_WRONG_VALUE && f->local_node >= 0 && f->local_node == rv->loc_node) {
    if (rv->loc_kind == VD_LOC_REDUCE) f->diagnosis = VD_DX_MISSING_REDUCTION;
    else if (rv->loc_kind == VD_LOC_PERMUTED) f->diagnosis = VD_DX_PERMUTED_SLICES;
  } else if (f->diagnosis == VD_DX_WRONG_VALUE && f->local_node >= 0) {
    ptrdiff_t other = reduce_elsewhere(r, rep, &elsewhere);
    if (other >= 0 && elsewhere == f->local_node && r->verdicts[other].loc_kind == VD_LOC_REDUCE)
      f->diagnosis = VD_DX_MISSING_REDUCTION;
  }
  f->topo = UINT64_MAX - 1;
  if (f->local_node >= 0) {
    const vd_stage_node *sn = &r->set.stages[rep].nodes[f->local_node];
    const vd_graph_t *gr = sn->side ? &r->pg : &r->sg;
    f->side = sn->side;
    f->pnode = gr->nodes[sn->gnode].pnode;
    f->node_rank = sn->side ? vd_graph_rank(gr, gr->plan->nodes[f->pnode].rank, sn->replica) : -1;
    f->node_mb = gr->nodes[sn->gnode].mb;
    f->topo = sn->side ? (uint64_t)1 << 32 | g->pgpos[sn->gnode] : g->sgpos[sn->gnode];
  }
  /* SCALE proven on a hypothesis the stage reads (its factor is the whole
   * fault): the finding names the operator that made that value */
  int32_t sp = scaled_producer(r, rep);
  if (sp >= 0) {
    const vd_stage *st = &r->set.stages[rep];
    const vd_stage_value *lv = &st->vals[r->verdicts[rep].scaled_leaf - 1];
    const vd_gnode_t *gn = &r->pg.nodes[sp];
    const vd_tensor_t *t = &r->pp.tensors[r->pg.values[lv->value].tensor];
    f->side = 1;
    f->pnode = gn->pnode;
    f->node_rank = vd_graph_rank(&r->pg, r->pp.nodes[gn->pnode].rank, lv->replica);
    f->node_mb = gn->mb;
    f->topo = (uint64_t)1 << 32 | g->pgpos[sp];
    vd_text_fmt(f->why, sizeof(f->why),
                "it makes '%s' (t%lld), which the failing stage reads: %s x its single-device value (an inferred "
                "lineage, proven); read as that value, the stage holds",
                VD_SHOW(vd_plan_s(&r->pp, t->name)), (long long)t->id, VD_SHOW(r->verdicts[rep].factor));
  }
}

/* One finding's representative and footprint (ranks, microbatches,
 * layers); the footprint covers its failing stages too, also those that
 * follow from an issue. */
static vd_rc describe_finding(const struct grouping *g, vd_finding *f) {
  const vd_run *r = g->r;
  f->n_ranks = f->n_mbs = 0;
  foot ft = {0};
  f->structural = f->n_issues > 0;
  f->local_node = -1;
  f->pnode = -1;
  f->node_rank = -1;
  f->node_mb = -1;
  if (f->structural) describe_by_issue(g, f, &ft);
  else describe_by_stage(g, f);
  for (size_t j = 0; j < f->n_stages; j++) {
    size_t i = f->stages[j];
    const vd_stage *st = &r->set.stages[i];
    f->n_instances += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    if (f->structural) continue;
    uint32_t fv[64];
    size_t nf = vd_rep_flagged_values(r, i, fv, 64);
    for (size_t q = 0; q < nf; q++) foot_value(&ft, r, st, fv[q]);
    if (g->dn[i] >= 0) foot_node(&ft, r, st, g->dn[i], nf == 0);
  }
  if (ft.oom) {
    vd_free(ft.r);
    vd_free(ft.m);
    vd_free(ft.l);
    return VD_ENOMEM;
  }
  f->ranks = ft.r;
  f->n_ranks = sort_uniq(ft.r, ft.nr, sizeof(*ft.r), cmp_i64);
  f->mbs = ft.m;
  f->n_mbs = sort_uniq(ft.m, ft.nm, sizeof(*ft.m), cmp_i32);
  f->layers = ft.l;
  f->n_layers = sort_uniq(ft.l, ft.nl, sizeof(*ft.l), cmp_i32);
  return VD_OK;
}

/* Groups the issues and failing stages of g (set up) into out. */
static vd_rc group_findings(struct grouping *g, vd_findings *out) {
  if (topo_positions(&g->r->pg, &g->pgpos, &g->pppos) != VD_OK) return VD_ENOMEM;
  if (topo_positions(&g->r->sg, &g->sgpos, &g->sppos) != VD_OK) return VD_ENOMEM;
  for (size_t i = 0; i < g->n; i++) g->parent[i] = i;
  key_issues(g);
  key_stages(g);
  if (g->keys.oom) return VD_ENOMEM;
  join_keys(g);
  size_t *root_of = vd_malloc((g->n ? g->n : 1) * sizeof(size_t));
  if (!root_of) return VD_ENOMEM;
  vd_rc rc = gather_findings(g, root_of, out);
  vd_free(root_of);
  for (size_t k = 0; k < out->n && rc == VD_OK; k++) rc = describe_finding(g, &out->v[k]);
  if (rc == VD_OK && out->n > 1) qsort(out->v, out->n, sizeof(*out->v), cmp_finding);
  return rc;
}

vd_rc vd_findings_build(const vd_run *r, vd_findings *out, vd_diag *d) {
  memset(out, 0, sizeof(*out));
  /* A run stopped before its graphs were built (common/ctl.h) has nothing
   * to group. */
  if (!r->pg.plan || !r->sg.plan) return VD_OK;
  struct grouping g = {.r = r, .ni = r->n_issues, .ns = r->verdicts ? r->set.n_stages : 0};
  g.n = g.ni + g.ns;
  g.parent = vd_malloc((g.n ? g.n : 1) * sizeof(size_t));
  g.dn = vd_malloc((g.ns ? g.ns : 1) * sizeof(int32_t));
  vd_rc rc = g.parent && g.dn ? group_findings(&g, out) : VD_ENOMEM;
  if (rc != VD_OK) {
    rc = VD_OOM(d);
    vd_findings_free(out);
  }
  for (size_t k = 0; k < g.keys.n; k++) vd_free(g.keys.v[k].key);
  vd_free(g.keys.v);
  vd_free(g.parent);
  vd_free(g.dn);
  vd_free(g.sgpos);
  vd_free(g.sppos);
  vd_free(g.pgpos);
  vd_free(g.pppos);
  return rc;
}

void vd_rep_class_counts(const vd_run *r, size_t *n_equiv, size_t *n_inconclusive) {
  *n_equiv = *n_inconclusive = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (st->canon_class >= 0 && (size_t)st->canon_class != i) continue; /* counted with its representative */
    if (r->verdicts[i].verdict == VD_SMT_EQUIVALENT) (*n_equiv)++;
    else if (r->verdicts[i].verdict == VD_SMT_INCONCLUSIVE) (*n_inconclusive)++;
  }
}

/* ---- one-line texts ------------------------------------------------------ */

static size_t put_list_i64(char *b, size_t n, size_t at, const int64_t *v, size_t k) {
  for (size_t i = 0; i < k && at < n; i++) {
    if (i == 16 && k > 20) {
      at += (size_t)snprintf(b + at, n - at, ",... (%zu in all)", k);
      break;
    }
    at += (size_t)snprintf(b + at, n - at, "%s%lld", i ? "," : "", (long long)v[i]);
  }
  return at;
}

void vd_rep_fmt_footprint(char *buf, size_t n, const vd_finding *f) {
  int64_t tmp[64];
  size_t at = (size_t)snprintf(buf, n, "ranks ");
  if (!f->n_ranks) at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "-");
  at = put_list_i64(buf, n, at, f->ranks, f->n_ranks);
  if (at < n) at += (size_t)snprintf(buf + at, n - at, "; microbatches ");
  if (!f->n_mbs && at < n) at += (size_t)snprintf(buf + at, n - at, "- (once per iteration)");
  size_t k = f->n_mbs < 64 ? f->n_mbs : 64;
  for (size_t i = 0; i < k; i++) tmp[i] = f->mbs[i];
  at = put_list_i64(buf, n, at, tmp, k);
  if (at < n) at += (size_t)snprintf(buf + at, n - at, "; layers ");
  if (!f->n_layers && at < n) at += (size_t)snprintf(buf + at, n - at, "-");
  k = f->n_layers < 64 ? f->n_layers : 64;
  for (size_t i = 0; i < k; i++) tmp[i] = f->layers[i];
  at = put_list_i64(buf, n, at, tmp, k);
  if (at < n && f->n_stages)
    at += (size_t)snprintf(buf + at, n - at, "; %zu failing stage%s (%zu per replica)", f->n_stages,
                           f->n_stages == 1 ? "" : "s", f->n_instances);
  if (at < n && f->n_issues)
    snprintf(buf + at, n - at, "; %zu structural entr%s", f->n_issues, f->n_issues == 1 ? "y" : "ies");
}

const char *vd_rep_finding_stack(const vd_run *r, const vd_finding *f) {
  if (f->pnode < 0) return "";
  const vd_plan_t *p = f->side ? &r->pp : &r->sp;
  return vd_plan_s(p, p->nodes[f->pnode].stack);
}

void vd_rep_fmt_title(char *buf, size_t n, const vd_run *r, const vd_finding *f) {
  if (f->pnode < 0) {
    vd_text_fmt(buf, n, "%s (%s)", vd_diagnosis_names[f->diagnosis], f->why[0] ? VD_SHOW(f->why) : "no single node");
    return;
  }
  const vd_plan_t *p = f->side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[f->pnode];
  char src[160] = "";
  if (pn->src) vd_text_fmt(src, sizeof(src), ", %s", VD_SHOW(vd_plan_s(p, pn->src)));
  /* the user's call stack (a captured program's callers), innermost first,
   * on the one line that every format shows: which call of which layer */
  char stack[400] = "";
  if (pn->stack) {
    const char *st = vd_plan_s(p, pn->stack);
    size_t at = 0;
    for (int k = 0; *st && k < 4 && at + 8 < sizeof(stack); k++) {
      const char *e = strchr(st, '\n');
      size_t len = e ? (size_t)(e - st) : strlen(st);
      at += (size_t)snprintf(stack + at, sizeof(stack) - at, "%s%.*s", k ? " < " : "; stack: ", (int)len, st);
      if (!e) break;
      st = e + 1;
    }
  }
  vd_text_fmt(buf, n, "%s at %s%s '%s' (node %lld%s%s)", vd_diagnosis_names[f->diagnosis], f->side ? "" : "single ",
              VD_SHOW(vd_node_op(p, pn)), VD_SHOW(vd_plan_s(p, pn->name)), (long long)pn->id, src, VD_SHOW(stack));
}
