/*
 * verifier/findings_locate.c - the stage and node facts that every report
 * format shares (findings.h), and the first diverging node of a failing
 * stage with the one-line reason it is that node: an attribute that differs,
 * the origin of a wrong factor, where lineage inference stopped, a node the
 * solver proved scaled (named by its producer, past copies and views), or
 * the first node downstream of the flagged values whose output differs.
 * findings.c groups failing stages by these nodes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "../lineage/lineage.h"
#include "../ops/ops.h"
#include "findings_int.h"

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
ptrdiff_t vd_findings_i_reduce_elsewhere(const vd_run *r, size_t i, int32_t *k) {
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
int vd_findings_i_reads_unreduced(const vd_run *r, size_t i, int32_t k) {
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
int32_t vd_findings_i_scaled_producer(const vd_run *r, size_t i) {
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

/* Whether factor f is ratio raised to a small positive power (1, 2, 3, 4 or
 * their halves and quarters): the factor a scaling applied, as a square
 * (Adam's g * g) or a root of a square (its sqrt) later carries it. */
static int power_of(double f, double ratio) {
  if (f <= 0.0 || ratio <= 0.0 || f == 1.0 || ratio == 1.0) return f == ratio && f != 1.0;
  double e = log(f) / log(ratio);
  if (e <= 0.0 || e > 4.0) return 0;
  double q = e * 4.0;
  return fabs(q - floor(q + 0.5)) < 1e-9;
}

int32_t vd_findings_i_factor_origin(const vd_run *r, size_t i, int32_t from, const uint32_t *gpos, double *s_out) {
  const vd_stage *st = &r->set.stages[i];
  const vd_stage_verdict *v = &r->verdicts[i];
  if (from < 0 || (uint32_t)from >= r->pg.n_nodes || !r->inferred || v->diagnosis != VD_DX_SCALE ||
      !v->scaled_leaf || v->scaled_leaf > st->n_vals)
    return -1;
  const vd_stage_value *sv = &st->vals[v->scaled_leaf - 1];
  if (sv->leaf_piece < 0) return -1;
  double f = r->lt.pieces[sv->leaf_piece].f;
  int32_t rep = sv->replica;
  size_t nn = r->pg.n_nodes, cap = 1u << 18, top = 0, seen = 0;
  uint8_t *mark = vd_calloc(nn / 8 + 1, 1);
  uint32_t *stack = vd_malloc(cap * sizeof(uint32_t));
  int32_t best = -1;
  if (!mark || !stack) goto done; /* a hint only: no origin without memory */
  stack[top++] = (uint32_t)from;
  mark[from / 8] |= (uint8_t)(1u << (from % 8));
  while (top && seen++ < cap) {
    uint32_t g = stack[--top];
    const vd_gnode_t *gn = &r->pg.nodes[g];
    const vd_node_t *pn = &r->pp.nodes[gn->pnode];
    const uint32_t *in = r->pg.idx + gn->in_off;
    double s = 1.0;
    int scales = !gn->n_part && gn->n_in == 1 && gn->n_out == 1 && vd_lin_scaling(&r->pp, pn, &s);
    if (scales && s == 0.0) continue; /* x * 0: its output does not depend on x (a gradient seed) */
    if (scales && s != 1.0 && (int32_t)g != from) {
      /* the factor this node adds to its input's, by their lineages: its
       * own constant when the single plan has no such scaling */
      int32_t px = vd_lin_piece_of(&r->lt, in[0], rep), py = vd_lin_piece_of(&r->lt, r->pg.idx[gn->out_off], rep);
      if (px >= 0 && py >= 0 && r->lt.pieces[px].f != 0.0) {
        double ratio = r->lt.pieces[py].f / r->lt.pieces[px].f;
        if (fabs(ratio - s) <= 1e-12 * fabs(s) && power_of(f, ratio) &&
            (best < 0 || gpos[g] < gpos[best]))
          best = (int32_t)g, *s_out = s;
      }
    }
    for (uint32_t k = 0; k < gn->n_in; k++) {
      int32_t q = r->pg.values[in[k]].producer;
      if (q < 0 || (mark[q / 8] & (1u << (q % 8)))) continue;
      mark[q / 8] |= (uint8_t)(1u << (q % 8));
      if (top < cap) stack[top++] = (uint32_t)q;
    }
  }
done:
  vd_free(stack);
  vd_free(mark);
  return best;
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
  int32_t g = share ? -1 : vd_findings_i_scaled_producer(r, i);
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
    if (share && pc->f == 1.0) {
      /* a partial sum read as the whole (unscaled_check's second form):
       * name the node that made it, where the group's sum belongs */
      int32_t pg = r->pg.values[lv->value].producer;
      char made[300] = "";
      if (pg >= 0) {
        const vd_node_t *mn = &r->pp.nodes[r->pg.nodes[pg].pnode];
        vd_text_fmt(made, sizeof(made), " made by rank %lld %s '%s' (node %lld)",
                    (long long)vd_graph_rank(&r->pg, mn->rank, lv->replica), VD_SHOW(vd_node_op(&r->pp, mn)),
                    VD_SHOW(vd_plan_s(&r->pp, mn->name)), (long long)mn->id);
      }
      vd_text_fmt(why, n_why,
                  "reads '%s' (t%lld), a partial sum (part %lld of %lld: an inferred lineage, proven)%s, as the "
                  "whole value; read as the sum of its copies over the group, the stage holds",
                  VD_SHOW(vd_plan_s(&r->pp, t->name)), (long long)t->id, (long long)pc->part_k,
                  (long long)pc->part_n, made);
      return (int32_t)k;
    }
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
  ptrdiff_t other = vd_findings_i_reduce_elsewhere(r, i, &at);
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
