/*
 * lineage/infer_emit.c - emission of the lineage inference: the inferred
 * lineages written as candidate annotations of the parallel plan, the
 * factor check, and the report of where propagation got stuck.
 */
#include "infer.h"

/* ---- emission ------------------------------------------------------------ */

/* The factor of output o of node pn from its inputs', as propagation would
 * give it: through the rule of the single twin computing o's single value
 * (an annotated output's is its annotation's), or for a copy or a constant
 * scaling without one (scale_through: the logged loss's average over the
 * replicas) directly; 0 when none fits. */
static int node_factor(const ictx *c, const vd_gnode_t *pn, int op, uint32_t o, double *fo) {
  const double f0 = vl_at(c, vd_gnode_inputs(c->gp, pn)[0])->f;
  const vlin *y = vl_at(c, vd_gnode_outputs(c->gp, pn)[o]);
  double s;
  if (rules[op].kind == VD_PROP_COPY && pn->n_in == 1) return *fo = f0, 1;
  int32_t sm = match_single(c, pn, op);
  const vd_gnode_t *sn = sm >= 0 ? &c->gs->nodes[sm] : NULL;
  if (sn && y->known && (o >= sn->n_out || (int32_t)vd_gnode_outputs(c->gs, sn)[o] != y->sv)) sn = NULL;
  if (sn) return out_factor(c, pn, sn, op, &rules[op], o, fo);
  if (pn->n_in == 1 && scaling(c->pp, &c->pp->nodes[pn->pnode], op, &s) && s != 0.0) return *fo = f0 * s, 1;
  return 0;
}

/* 1 when l is one copy's share of a mean: cnt of n parts scaled by n / cnt,
 * so that the copies average to the value (a replica's gradient under a
 * per-replica mean loss).  Read as the whole value, such a share is a missing
 * (averaging) reduction, not a wrong scale: its factor stays on the
 * candidates, so the failing stage is the reader's alone. */
static int mean_share(const vlin *l) {
  return l->cnt < l->n && fabs(l->f * (double)l->cnt - (double)l->n) <= 1e-9 * (double)l->n;
}

/* Whether a constant factor that some value carries fails to cancel: a node
 * reads a value of factor f != 1 and computes an annotated value (factor 1)
 * with another factor, or no factor fits its output at all.  That is a
 * scaling bug's signature (a loss divided by a local count, a sum where a
 * mean belongs), and then no candidate carries a factor: the stages grow
 * from the annotated values to the operator that introduced it, which the
 * failing stage then contains and the finding names (verifier/findings.c
 * factor_origin).  With factors, each stage would hold only where the
 * factor first shows, far from its cause.  A correct program whose factors
 * cancel (a per-replica mean loss, an averaging reducer) keeps them, and so
 * does one whose factors only escape as shares of a mean (mean_share).
 *
 * When every escape reads an unscaled value beside the scaled one (an
 * optimizer update adding the weight to a gradient that is f x its
 * single-device value: a gradient reducer that sums where the loss is a
 * mean), *into_updates is 1: no factor fits such an operator's output, so
 * no failing stage could show the factor where it arises, only a wrong
 * value at the boundary.  The factors are still suppressed (in a correct
 * program such a factor is a wrong guess, which would cost a round of
 * failed proofs), but a NOT EQUIVALENT run infers again with them kept
 * (VD_LIN_KEEP_UPDATE_FACTORS, verifier/run.c refine_with_factors), as for shares of a
 * mean: the stages that prove them show each value to be f x its
 * single-device value, and the failing stage is the reader's alone, which
 * can then show that the factor is the whole fault (solver/stage_solve.c
 * unscaled_check: SCALE).  An escape that reads only scaled values passes
 * the factor on (a loss scaled wrongly, a multiple of its single value):
 * then the factors are suppressed, so that its stage shows the factor
 * where it arises. */
int factor_escapes(const ictx *c, int *into_updates) {
  int escapes = 0, multiple = 0;
  for (size_t g = 0; g < c->gp->n_nodes; g++) {
    const vd_gnode_t *pn = &c->gp->nodes[g];
    int op = c->pop[pn->pnode];
    if (op < 0 || pn->n_in == 0 || pn->n_out == 0) continue;
    const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
    int scaled = 0, all_in = 1, any_out = 0, shares_only = 1, unscaled = 0, esc = 0, annotated = 0;
    for (uint32_t i = 0; i < pn->n_in; i++) {
      const vlin *x = vl_at(c, in[i]);
      all_in &= x->known;
      int sc = x->known && !x->zero && fabs(x->f - 1.0) > 1e-12;
      scaled |= sc;
      unscaled |= x->known && !x->zero && !sc;
      if (sc) shares_only &= mean_share(x);
    }
    if (!scaled || !all_in) continue;
    for (uint32_t o = 0; o < pn->n_out; o++) {
      any_out |= vl_at(c, out[o])->known;
      double fo;
      if (c->seeded[out[o]] && (!node_factor(c, pn, op, o, &fo) || fabs(fo - 1.0) > 1e-12)) esc = annotated = 1;
    }
    /* shares of a mean summed into an annotated value and nothing else (a
     * logged loss of per-replica means never averaged) make it a multiple
     * too, though they alone do not escape */
    if (shares_only) {
      multiple |= annotated && !unscaled;
      continue;
    }
    double fo;
    if (!any_out && !node_factor(c, pn, op, 0, &fo)) esc = 1;
    /* an escape into an annotated value that reads no unscaled value
     * beside the scaled ones passes the factor on (a logged loss that is a
     * multiple of its single value); one that adds them, no factor fits
     * (an optimizer update) */
    if (esc) escapes = 1, multiple |= annotated && !unscaled;
  }
  *into_updates = escapes && !multiple;
  return escapes;
}

/* Whether every reader of Gp value v is a scaling that brings v's factor
 * back to 1 (cancels_factor): v is a step on the way to a value of the same
 * single value and parts, f x (the part) then the part itself (a sum
 * written as mean x count).  As a candidate it would cut the stages of that
 * value between the two, where a replica computing the part in one step
 * holds it from other leaves, and the replicas of one part could not be
 * related (soundness fuzzer --strip #65, moe ce.sum): no candidate, the
 * stage runs through it. */
static int only_cancelled(const ictx *c, uint32_t v) {
  const vd_value_t *x = &c->gp->values[v];
  const uint32_t *cons = vd_value_consumers(c->gp, x);
  for (uint32_t k = 0; k < x->n_cons; k++) {
    const vd_gnode_t *pn = &c->gp->nodes[cons[k]];
    if (!cancels_factor(c, pn, c->pop[pn->pnode])) return 0;
  }
  return x->n_cons > 0;
}

/* Writes the candidate of tensor ti when every instance's final value has a
 * lineage that fits the plan's affine annotation form; 1 if written. */
int vd_lin_i_emit_tensor(ictx *c, uint32_t ti, vd_plan_t *pp) {
  const vd_graph_t *gp = c->gp, *gs = c->gs;
  vd_tensor_t *pt = &pp->tensors[ti];
  uint32_t per = pt->scope == VD_SCOPE_PER_MB ? gp->inst_per_replica[ti] : 1;
  vd_lineage_ann a;
  memset(&a, 0, sizeof(a));
  int64_t k_first = 0;
  int32_t stensor = -1;
  for (uint32_t m = 0; m < per; m++) {
    int32_t mb = pt->scope == VD_SCOPE_PER_MB ? (int32_t)m : -1;
    int32_t first = vd_graph_first(gp, ti, 0, mb), last = vd_graph_last(gp, ti, 0, mb);
    if (first < 0 || last < 0) return 0;
    /* SOUNDNESS: a candidate must not state an initial value (that would
     * be a hypothesis nothing proves). */
    if (gp->values[first].is_initial || gp->values[first].producer < 0) return 0;
    const vlin *l = vl_at(c, last);
    /* A factor f != 1 is written (vd_lineage_ann.factor): the claim is then
     * "f x the part", proven like any other (an averaging DP reducer's
     * inputs are dp x their share; without it the whole backward had no
     * candidate).  f must be finite and the same in every microbatch. */
    if (!aligned(c, (uint32_t)last) || l->noemit || !isfinite(l->f) || l->f == 0.0) return 0;
    if (c->factor_escapes && fabs(l->f - 1.0) > 1e-12) return 0;
    if (fabs(l->f - 1.0) > 1e-12 && only_cancelled(c, (uint32_t)last)) return 0;
    if (m > 0 && l->f != vd_lineage_factor(&a)) return 0;
    /* A slice of a broadcast dim is right wherever it sits, but the copies
     * of one claim must cover the single tensor: no candidate; the stages
     * that read it grow to its producers. */
    for (int32_t i = 0; i < l->nd; i++)
      if (((l->uni >> i) & 1) && l->hi[i] - l->lo[i] != stens(c, l->sv)->shape[i]) return 0;
    int64_t k, n, dk;
    if (!norm_part(l, &k, &n, &dk)) return 0;
    uint32_t s = gs->values[l->sv].tensor;
    const vd_tensor_t *st = &c->sp->tensors[s];
    int32_t smb = st->scope == VD_SCOPE_PER_MB ? 0 : -1;
    if (vd_graph_last(gs, s, 0, smb) != l->sv) return 0; /* the annotation names the final single value */
    if (m == 0) {
      stensor = (int32_t)s;
      a.full = st->id;
      memcpy(a.lo, l->lo, sizeof(a.lo));
      memcpy(a.hi, l->hi, sizeof(a.hi));
      memcpy(a.dp_shift, l->dlo, sizeof(a.dp_shift));
      a.part_k = k, a.part_n = n, a.dp_part = dk;
      a.factor = fabs(l->f - 1.0) <= 1e-12 ? 0.0 : l->f;
      k_first = k;
    } else {
      if ((int32_t)s != stensor || n != a.part_n || dk != a.dp_part) return 0;
      for (int32_t i = 0; i < l->nd; i++) {
        if (l->dlo[i] != a.dp_shift[i]) return 0;
        int64_t sh = l->lo[i] - a.lo[i];
        if (m == 1) a.mb_shift[i] = sh;
        else if (sh != (int64_t)m * a.mb_shift[i]) return 0;
      }
      int64_t kp = k - k_first;
      if (m == 1) a.mb_part = kp;
      else if (kp != (int64_t)m * a.mb_part) return 0;
    }
  }
  if (stensor < 0) return 0;
  pt->lin = a;
  pt->has_lin = 1;
  return 1;
}

const char *const vd_lin_stuck_text[VD_LIN_STUCK__COUNT] = {
    [VD_LIN_STUCK_PARTIAL] = "reads a partial sum where the single-device operator reads the whole value "
                             "(a missing reduction?)",
    [VD_LIN_STUCK_FACTOR] = "reads a value scaled by a constant the single-device computation does not apply "
                            "(a scaling bug?)",
    [VD_LIN_STUCK_ZERO] = "reads a known zero (a buffer a missing collective should have filled?)",
    [VD_LIN_STUCK_NO_TWIN] = "computes what the single-device plan never computes from the values it reads "
                             "(wrong operands, e.g. a value from the wrong rank?)",
    [VD_LIN_STUCK_SLICE] = "reads slices that do not combine into a slice of the single-device result",
    [VD_LIN_STUCK_ADDEND] = "misses the sum's other addends (a missing reduction, e.g. of a shared or tied "
                            "weight's gradient?)",
    [VD_LIN_STUCK_SHARE] = "reads it as the whole value, which the copies only average to (a missing "
                           "reduction, e.g. a parameter left out of the data-parallel gradient all-reduce?)",
};

void vd_lin_stuck_phrase(const vd_lin_infer_stats *s, char *buf, size_t n) {
  switch (s->stuck_why) {
  case VD_LIN_STUCK_PARTIAL:
    snprintf(buf, n, "input %u is part %lld of %lld and the operator %s", s->stuck_input, (long long)s->stuck_k,
             (long long)s->stuck_n, vd_lin_stuck_text[s->stuck_why]);
    break;
  case VD_LIN_STUCK_FACTOR:
    snprintf(buf, n, "input %u is %g x its single-device value and the operator %s", s->stuck_input, s->stuck_f,
             vd_lin_stuck_text[s->stuck_why]);
    break;
  case VD_LIN_STUCK_ADDEND:
    snprintf(buf, n, "input %u is %g x one addend of the sum that the single-device operator reads (scaled alike) "
             "and the operator %s", s->stuck_input, s->stuck_f, vd_lin_stuck_text[s->stuck_why]);
    break;
  case VD_LIN_STUCK_SHARE:
    snprintf(buf, n, "input %u is one copy's share of a mean (part %lld of %lld, times %g) and the operator %s",
             s->stuck_input, (long long)s->stuck_k, (long long)s->stuck_n, s->stuck_f, vd_lin_stuck_text[s->stuck_why]);
    break;
  default:
    snprintf(buf, n, "input %u and the operator %s", s->stuck_input, vd_lin_stuck_text[s->stuck_why]);
  }
}

/* Whether single value x is an addend of single value v: v is computed from
 * x through copies, constant scalings and at least one sum of two or more
 * inputs (sum: one was passed already), within depth nodes. */
static int addend_of(const ictx *c, uint32_t v, uint32_t x, int sum, int depth) {
  if (v == x) return sum;
  const vd_value_t *val = &c->gs->values[v];
  if (depth == 0 || val->producer < 0) return 0;
  const vd_gnode_t *sn = &c->gs->nodes[val->producer];
  int op = c->sop[sn->pnode];
  if (op < 0) return 0;
  int is_sum = rules[op].lin == VD_PLIN_SUM && sn->n_in >= 2;
  if (!is_sum && rules[op].kind != VD_PROP_COPY && rules[op].kind != VD_PROP_SCALE) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gs, sn);
  for (uint32_t i = 0; i < sn->n_in; i++)
    if (addend_of(c, in[i], x, sum | is_sum, depth - 1)) return 1;
  return 0;
}

/* For an annotated result (output o of pn) that reads input i at factor f:
 * whether the single-device producer of o's single value, the same
 * operator, reads at input i a value that contains x's single value as one
 * addend.  Then the factor is the single program's too (an optimizer's
 * learning rate) and what is wrong is the value: only one addend of a sum
 * arrived (the tied-weight gradient that was never all-reduced between its
 * two pipeline stages), not a scaling bug. */
static int reads_one_addend(const ictx *c, const vd_gnode_t *pn, int op, uint32_t o, uint32_t i) {
  const vlin *ov = vl_at(c, vd_gnode_outputs(c->gp, pn)[o]), *x = vl_at(c, vd_gnode_inputs(c->gp, pn)[i]);
  if (ov->sv < 0 || x->sv < 0) return 0;
  int32_t prod = c->gs->values[ov->sv].producer;
  if (prod < 0) return 0;
  const vd_gnode_t *sn = &c->gs->nodes[prod];
  if (c->sop[sn->pnode] != op || sn->n_in != pn->n_in) return 0;
  return addend_of(c, vd_gnode_inputs(c->gs, sn)[i], (uint32_t)x->sv, 0, 8);
}

/* Whether every output of pn is read, and only by nodes whose outputs are
 * all annotated (the sum all_reduce of an averaged logged loss, whose
 * scaling writes the annotated loss): nothing past pn lacks a lineage, so
 * propagation lost nothing there. */
static int feeds_only_annotated(const ictx *c, const vd_gnode_t *pn) {
  const uint32_t *out = vd_gnode_outputs(c->gp, pn);
  for (uint32_t o = 0; o < pn->n_out; o++) {
    const vd_value_t *v = &c->gp->values[out[o]];
    const uint32_t *cons = vd_value_consumers(c->gp, v);
    if (v->n_cons == 0) return 0;
    for (uint32_t k = 0; k < v->n_cons; k++) {
      const vd_gnode_t *q = &c->gp->nodes[cons[k]];
      const uint32_t *qo = vd_gnode_outputs(c->gp, q);
      if (q->n_out == 0) return 0;
      for (uint32_t j = 0; j < q->n_out; j++)
        if (!c->seeded[qo[j]]) return 0;
    }
  }
  return pn->n_out > 0;
}

/* The first node (topological order) whose inputs all have lineages and
 * whose outputs got none, and why (see vd_lin_infer_stats); an element
 * copy whose output goes on, through copies, into a value with a lineage
 * did not stop propagation and is not reported, nor is a node of plain
 * inputs (no part, factor or zero to blame) whose outputs only feed
 * annotated values (feeds_only_annotated). */
void find_stuck(ictx *c, vd_lin_infer_stats *s) {
  s->stuck_node = -1;
  s->stuck_origin = -1;
  for (size_t t = 0; t < c->gp->n_nodes; t++) {
    const vd_gnode_t *pn = &c->gp->nodes[c->gp->topo[t]];
    int op = c->pop[pn->pnode];
    if (op < 0 || rules[op].kind == VD_PROP_NONE || pn->n_in == 0 || pn->n_out == 0) continue;
    const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
    int all_in = 1, any_out = 0, seeded = 0;
    for (uint32_t i = 0; i < pn->n_in; i++) all_in &= vl_at(c, in[i])->known;
    for (uint32_t o = 0; o < pn->n_out; o++) any_out |= vl_at(c, out[o])->known;
    uint32_t seeded_out = 0;
    for (uint32_t o = 0; o < pn->n_out; o++)
      if (c->seeded[out[o]]) seeded = 1, seeded_out = o;
    double fo;
    if (all_in && seeded && !(node_factor(c, pn, op, seeded_out, &fo) && fabs(fo - 1.0) <= 1e-12)) {
      /* an annotated result (an updated weight, the loss) computed from a
       * value that is a constant multiple of its single-device value, or
       * of one addend of what the single twin reads (a factor that the
       * operator cancels, as the logged loss's average does, is not) */
      for (uint32_t i = 0; i < pn->n_in; i++) {
        const vlin *x = vl_at(c, in[i]);
        if (x->zero || x->f == 1.0) continue;
        s->stuck_node = pn->pnode;
        s->stuck_mb = pn->mb;
        s->stuck_why = reads_one_addend(c, pn, op, seeded_out, i) ? VD_LIN_STUCK_ADDEND
                       : mean_share(x)                           ? VD_LIN_STUCK_SHARE
                                                                 : VD_LIN_STUCK_FACTOR;
        s->stuck_input = i;
        s->stuck_k = x->k0, s->stuck_n = x->n, s->stuck_f = x->f;
        s->stuck_origin = s->stuck_why != VD_LIN_STUCK_ADDEND && x->fsrc >= 0 ? (int64_t)c->gp->nodes[x->fsrc].pnode : -1;
        return;
      }
    }
    if (!all_in || any_out || seeded) continue;
    int why = VD_LIN_STUCK_SLICE;
    uint32_t at = 0;
    int32_t sm = -1;
    for (uint32_t i = 0; i < pn->n_in && why == VD_LIN_STUCK_SLICE; i++)
      if (vl_at(c, in[i])->zero) why = VD_LIN_STUCK_ZERO, at = i;
    if (why == VD_LIN_STUCK_SLICE && rules[op].kind != VD_PROP_COPY) sm = match_single(c, pn, op);
    if (why == VD_LIN_STUCK_SLICE && sm >= 0 && !out_factor(c, pn, &c->gs->nodes[sm], op, &rules[op], 0, &fo)) {
      why = VD_LIN_STUCK_FACTOR;
      for (uint32_t i = pn->n_in; i-- > 0;)
        if (vl_at(c, in[i])->f != 1.0) at = i;
      if (mean_share(vl_at(c, in[at]))) why = VD_LIN_STUCK_SHARE;
    }
    for (uint32_t i = 0; i < pn->n_in && why == VD_LIN_STUCK_SLICE; i++) {
      const vlin *x = vl_at(c, in[i]);
      if (x->n / (x->cnt ? x->cnt : 1) > 1) why = VD_LIN_STUCK_PARTIAL, at = i;
    }
    if (why == VD_LIN_STUCK_SLICE && rules[op].kind == VD_PROP_MAP && sm < 0) why = VD_LIN_STUCK_NO_TWIN;
    /* inside a copied box that has a lineage as a whole (lineage/infer_moved.c), or one step
     * before annotated values only */
    if ((why == VD_LIN_STUCK_SLICE || why == VD_LIN_STUCK_NO_TWIN) &&
        (moved_interior(c, pn) || feeds_only_annotated(c, pn)))
      continue;
    s->stuck_node = pn->pnode;
    s->stuck_mb = pn->mb;
    s->stuck_why = why;
    s->stuck_input = at;
    s->stuck_k = vl_at(c, in[at])->k0;
    s->stuck_n = vl_at(c, in[at])->n;
    s->stuck_f = vl_at(c, in[at])->f;
    s->stuck_origin = (why == VD_LIN_STUCK_FACTOR || why == VD_LIN_STUCK_SHARE) && vl_at(c, in[at])->fsrc >= 0
                          ? (int64_t)c->gp->nodes[vl_at(c, in[at])->fsrc].pnode : -1;
    return;
  }
}
