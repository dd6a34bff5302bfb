/*
 * verifier/run_candidates.c - candidate validation across the inference
 * rounds: which inferred lineages (candidates) a failing stage or an issue
 * implicates, which failures are grounded (a failure of the plan itself),
 * and the drops between rounds (docs/verifier.md 1b).  It reads stage
 * verdicts, so it lives in verifier/, above the solver, not in lineage/.
 */
#include "run_int.h"

#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* Whether one of stage st's target pieces is a candidate. */
int vd_run_i_targets_candidate(const vd_run *r, const vd_stage *st) {
  for (uint32_t k = 0; k < st->n_targets; k++) {
    const vd_stage_target *tg = &st->targets[k];
    for (uint32_t j = 0; j < tg->n_pieces; j++)
      if (r->inferred[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor]) return 1;
  }
  return 0;
}

/* From round VD_RUN_TAINT_ROUND on (the first), a failing candidate takes
 * every candidate computed from it along: they were inferred from the same
 * lineage, which did not hold (a bug upstream, or a wrong guess).  kill[t] =
 * 1 for every tensor with a Gp value downstream of a killed candidate's
 * values, so that the next round cuts straight to the given annotations
 * after the failure instead of growing one candidate per round (before, the
 * stages downstream of a forward bug failed again round after round).
 * Dropping only removes candidates: it cannot change a verdict's soundness
 * (docs/verifier.md 1b). */
static void taint_values(const vd_run *r, const uint8_t *kill, uint8_t *bad);

static void taint_descendants(vd_run *r, uint8_t *kill) {
  const vd_graph_t *g = &r->pg;
  uint8_t *bad = vd_calloc(g->n_values ? g->n_values : 1, 1);
  if (!bad) return; /* OPTIMIZATION-ONLY: without memory, drop as before */
  taint_values(r, kill, bad);
  for (size_t v = 0; v < g->n_values; v++)
    if (bad[v]) kill[g->values[v].tensor] = 1;
  vd_free(bad);
}

/* Candidates implicated by the lineage table and the cut: a lineage issue
 * names them or their single tensor (gaps, missing parts, overlaps; an issue
 * naming an annotated tensor implicates the candidates of its single tensor
 * too, since only they can have made it), or a structural issue names them.
 * These need no stage result. */
static void implicated_by_issues(const vd_run *r, uint8_t *kill) {
  for (size_t i = 0; i < r->lt.n_issues; i++) {
    const vd_issue *li = &r->lt.issues[i];
    uint32_t full = 0;
    int have_full = 0;
    if (!li->single && li->tensor >= 0 && (size_t)li->tensor < r->pp.n_tensors) {
      kill[li->tensor] = 1;
      if (!r->inferred[li->tensor] && r->pp.tensors[li->tensor].has_lin) {
        full = r->pp.tensors[li->tensor].lin.full;
        have_full = 1;
      }
    } else if (li->stensor >= 0) {
      full = r->sp.tensors[li->stensor].id;
      have_full = 1;
    }
    if (have_full)
      for (size_t t = 0; t < r->pp.n_tensors; t++)
        if (r->inferred[t] && r->pp.tensors[t].lin.full == full) kill[t] = 1;
  }
  for (size_t i = 0; i < r->set.n_issues; i++) {
    const vd_issue *si = &r->set.issues[i];
    if (!si->single && si->tensor >= 0) kill[si->tensor] = 1;
  }
}

/* The verdict stage i has while the round is being solved: its own, or its
 * class representative's; a stage whose verdict is not set yet (done[rep]
 * = 0) counts as not proven.  done = NULL: every verdict is final. */
static vd_smt_verdict verdict_now(const vd_run *r, const vd_run_opts *o, const uint8_t *done, size_t i) {
  if (!done) return r->verdicts[i].verdict;
  const vd_stage *st = &r->set.stages[i];
  size_t rep = o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
  return done[rep] ? r->verdicts[rep].verdict : VD_SMT_INCONCLUSIVE;
}

/* SOUNDNESS (docs/verifier.md 1b): a candidate is implicated when its own
 * lineage is inconsistent (a lineage issue names it or its single tensor),
 * when a structural problem names it, or when a stage TARGETING it did not
 * hold (or is not solved yet, with done).  Implicated candidates are dropped
 * (their annotation removed); a failing stage whose targets are all
 * annotated stays a failure of the plan. */
static void implicated_now(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *kill) {
  implicated_by_issues(r, kill);
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (verdict_now(r, o, done, i) == VD_SMT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[i];
    for (uint32_t k = 0; k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; j < tg->n_pieces; j++) kill[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor] = 1;
    }
  }
}

static void implicated(const vd_run *r, uint8_t *kill) { implicated_now(r, NULL, NULL, kill); }

/* bad[v] = 1 for every Gp value computed from a value of a killed candidate
 * (the candidate's own values included): the forward closure, in
 * topological order.  Replicas and microbatches are not told apart (a value
 * stands for all its replicas), which only makes more values bad. */
static void taint_values(const vd_run *r, const uint8_t *kill, uint8_t *bad) {
  const vd_graph_t *g = &r->pg;
  for (size_t v = 0; v < g->n_values; v++) {
    uint32_t t = g->values[v].tensor;
    bad[v] = kill[t] && r->inferred[t];
  }
  for (size_t k = 0; k < g->n_nodes; k++) {
    const vd_gnode_t *n = &g->nodes[g->topo[k]];
    const uint32_t *in = vd_gnode_inputs(g, n), *out = vd_gnode_outputs(g, n);
    int b = 0;
    for (uint32_t i = 0; i < n->n_in && !b; i++) b = bad[in[i]];
    for (uint32_t q = 0; b && q < n->n_out; q++) bad[out[q]] = 1;
  }
}

/* During a round whose drop takes descendants along (taint_descendants):
 * bad[v] = 1 for every Gp value computed from a candidate whose stage was
 * solved and did not hold so far (done[i]: stage i solved; members take
 * their representative's verdict), or that a lineage or structural issue
 * implicates.  Returns whether any candidate is marked.  OPTIMIZATION-ONLY
 * (solve_stages skips the stages these values make moot). */
int vd_run_i_moot_marks(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *bad) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return 0;
  implicated_by_issues(r, kill);
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    size_t rep = o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
    if (!done[rep] || r->verdicts[rep].verdict == VD_SMT_EQUIVALENT || r->skipped[rep]) continue;
    for (uint32_t k = 0; k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; j < tg->n_pieces; j++) kill[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor] = 1;
    }
  }
  int any = 0;
  for (size_t t = 0; t < r->pp.n_tensors && !any; t++) any = kill[t] && r->inferred[t];
  if (any) taint_values(r, kill, bad);
  vd_free(kill);
  return any;
}

/* Grounded failures.  A stage is a GROUNDED failure when it is NOT
 * EQUIVALENT, every target is an annotation the plan gives, and no value
 * upstream of its targets belongs to an implicated candidate (taint_values).
 * SOUNDNESS: its hypotheses are then given, or candidates every stage of
 * which holds; each such stage's hypotheses are upstream of the candidate
 * and so of the failing target, hence again given or candidates whose
 * stages hold, down to the initial values (a stage's cone ends at lineage
 * points, so every point on a path into a target is a hypothesis of some
 * stage on that path).  By induction over that finite upstream set every
 * hypothesis is true, and the failing stage's genuine counterexample is one
 * of the plan itself: the same standard as a failure in a round where no
 * candidate fails.  One grounded failure decides NOT EQUIVALENT; nothing
 * solved later can change that (OPTIMIZATION-ONLY: stopping there).
 * grounded (may be NULL) gets 1 per grounded stage; returns their count.
 * Without memory: 0 (no early stop, the rounds run as before). */
size_t vd_run_i_mark_grounded(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *grounded) {
  size_t n = r->set.n_stages, count = 0;
  if (!r->verdicts) return 0;
  uint8_t *kill = NULL, *bad = NULL;
  int cands = r->inferred && r->infer.n_inferred;
  if (cands) {
    kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
    bad = vd_calloc(r->pg.n_values ? r->pg.n_values : 1, 1);
    if (!kill || !bad) {
      vd_free(kill);
      vd_free(bad);
      return 0;
    }
    implicated_now(r, o, done, kill);
    taint_values(r, kill, bad);
  }
  for (size_t i = 0; i < n; i++) {
    if (verdict_now(r, o, done, i) != VD_SMT_NOT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[i];
    int ok = !cands || !vd_run_i_targets_candidate(r, st);
    for (uint32_t k = 0; ok && k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; ok && j < tg->n_pieces; j++) ok = !bad[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].value];
    }
    if (!ok) continue;
    count++;
    if (grounded) grounded[i] = 1;
  }
  vd_free(kill);
  vd_free(bad);
  return count;
}

/* The last round of a run with candidates: a failure that is not grounded
 * says nothing about the plan (its target is a candidate, or a hypothesis
 * rests on one that did not hold), so it becomes INCONCLUSIVE with the
 * reason, and mark[i] = 2 (not listed one by one in the text report).
 * SOUNDNESS: after this, every NOT EQUIVALENT stage is grounded. */
void vd_run_i_demote_ungrounded(vd_run *r, const uint8_t *grounded, uint8_t *mark) {
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < r->set.n_stages && first == SIZE_MAX; i++)
    if (grounded[i]) first = i;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_NOT_EQUIVALENT || grounded[i]) continue;
    int cand = vd_run_i_targets_candidate(r, &r->set.stages[i]);
    char why[120];
    if (first != SIZE_MAX)
      snprintf(why, sizeof(why), "not retried: stage %zu already proves the plans differ", first);
    else
      snprintf(why, sizeof(why), "still failing after %d rounds", r->infer_rounds);
    snprintf(v->reason, sizeof(v->reason), "%s; %s (docs/verifier.md 1b)",
             cand ? "target is an inferred lineage that did not hold"
                  : "a hypothesis rests on an inferred lineage that did not hold in this round",
             why);
    v->verdict = VD_SMT_INCONCLUSIVE;
    mark[i] = 2;
  }
}

/* Whether this round ends by dropping candidates (and so is not the last:
 * its failures are not reported).  Without memory: 0 (counterexamples are
 * computed as for a last round). */
int vd_run_i_round_drops(const vd_run *r) {
  if (!r->inferred || !r->infer.n_inferred || r->infer_rounds >= VD_RUN_MAX_INFER_ROUNDS) return 0;
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return 0;
  implicated(r, kill);
  int any = 0;
  for (size_t t = 0; t < r->pp.n_tensors && !any; t++) any = kill[t] && r->inferred[t];
  vd_free(kill);
  return any;
}

/* Drops every candidate marked in kill (one byte per parallel tensor,
 * borrowed): its lineage is cleared and r->dropped remembers it. */
static vd_rc drop_marked(vd_run *r, const uint8_t *kill, size_t *n_drop, vd_diag *d) {
  size_t n = 0;
  if (!r->dropped && !(r->dropped = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1))) return VD_OOM(d);
  for (size_t t = 0; t < r->pp.n_tensors; t++) {
    if (!kill[t] || !r->inferred[t]) continue;
    r->dropped[t] = 1;
    r->inferred[t] = 0;
    r->pp.tensors[t].has_lin = 0;
    memset(&r->pp.tensors[t].lin, 0, sizeof(r->pp.tensors[t].lin));
    n++;
  }
  *n_drop = n;
  return VD_OK;
}

vd_rc vd_run_i_drop_failed_candidates(vd_run *r, size_t *n_drop, vd_diag *d) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return VD_OOM(d);
  implicated(r, kill);
  if (r->infer_rounds >= VD_RUN_TAINT_ROUND) taint_descendants(r, kill);
  vd_rc rc = drop_marked(r, kill, n_drop, d);
  vd_free(kill);
  return rc;
}

/* Drops the candidates that the lineage table's issues implicate (no stage
 * is needed for those; analyse). */
vd_rc vd_run_i_drop_candidates_of_issues(vd_run *r, size_t *n_drop, vd_diag *d) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return VD_OOM(d);
  implicated_by_issues(r, kill); /* (before the cut: r->set has no issues yet) */
  vd_rc rc = drop_marked(r, kill, n_drop, d);
  vd_free(kill);
  return rc;
}

/* After the last round: failures that still target candidates say nothing
 * about the plan (the candidate may be wrong), so they are inconclusive. */
void vd_run_i_candidates_inconclusive(vd_run *r) {
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT || !vd_run_i_targets_candidate(r, &r->set.stages[i])) continue;
    r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
    snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason),
             "target is an inferred lineage still failing after %d rounds", VD_RUN_MAX_INFER_ROUNDS);
    r->n_not_equiv--;
    r->n_inconclusive++;
  }
}

