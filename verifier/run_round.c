/*
 * verifier/run_round.c - one round of cut-and-solve: the lineage table,
 * the stages (reduced and grouped into classes as they are cut, in
 * batches), then the solve (verifier/run_solve.c); and the reset between
 * rounds.
 */
#include "run_int.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/mem.h"

/* A stage whose shape constraints contradict each other: SHAPE.  The
 * node comes from the reducer's record ("stage S node K ..."), so that the
 * report can group the entry with the SHAPE issue of the same node. */
static void shape_issue(const vd_run *r, const vd_stage *st, const char *record, const char *detail, vd_issue *out) {
  vd_issue is;
  vd_issue_init(&is, "stages", VD_SISSUE_SHAPE, "shape_constraints", VD_DX_SHAPE);
  unsigned sid, k;
  if (record && sscanf(record, "stage %u node %u", &sid, &k) == 2 && k < st->n_nodes && st->nodes[k].side) {
    const vd_gnode_t *gn = &r->pg.nodes[st->nodes[k].gnode];
    is.pnode = gn->pnode;
    is.mb = gn->mb;
    is.replica = st->nodes[k].replica;
    is.rank = vd_graph_rank(&r->pg, r->pp.nodes[gn->pnode].rank, st->nodes[k].replica);
  }
  snprintf(is.detail, sizeof(is.detail), "%.*s", (int)sizeof(is.detail) - 1, detail);
  *out = is;
}

/* Stages smaller than this keep their body when they join a class: freeing
 * it saves little, and they are cheap to keep for reports. */
#define VD_RUN_COMPACT_MIN_VALUES 32

/* Stages are reduced and keyed in batches of this many, in parallel. */
#define VD_RUN_HOOK_BATCH 256

struct stage_hook {
  vd_run *r;
  const vd_run_opts *o;
  vd_stage_canon_tab *tab;
  vd_issue *shape; /* SHAPE issues of contradicting constraints, reported after the cut's */
  size_t n_shape, cap_shape, n_shape_dropped;
  /* The batch: stage indices, and per entry the reduction's result and
   * diag and the canonical key (buffers reused across batches). */
  size_t pend[VD_RUN_HOOK_BATCH], n_pend;
  vd_rc prc[VD_RUN_HOOK_BATCH];
  vd_diag pd[VD_RUN_HOOK_BATCH];
  vd_stage_canon_key key[VD_RUN_HOOK_BATCH];
  uint64_t cut_values, cut_budget; /* stage values cut so far, and the bound (CUT_VALUES_PER_VALUE) */
  int over;                        /* the bound was passed: the cut stopped */
};

/* Reduces and classifies the pending stages, and frees the body of a large
 * class member (its class representative is solved).  The reductions and
 * the canonical keys are computed in parallel (each touches its own stage
 * only); the results are taken in stage order, so the classes, the issues
 * and the compacted stages are those of a serial run at any thread count. */
static vd_rc hook_flush(struct stage_hook *h, vd_stage_set *set, vd_diag *d) {
  size_t n = h->n_pend;
  int nt = n >= 8 ? omp_get_max_threads() : 1;
  h->n_pend = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (size_t j = 0; j < n; j++) {
    vd_stage *st = &set->stages[h->pend[j]];
    vd_diag_clear(&h->pd[j]);
    h->prc[j] = VD_OK;
    if (!h->o->no_reduce) h->prc[j] = vd_stage_reduce(&h->r->lt, st, &h->pd[j]);
    if ((h->prc[j] == VD_OK || h->prc[j] == VD_EINPUT) && h->tab) {
      vd_diag kd;
      vd_diag_clear(&kd);
      vd_rc krc = vd_stage_canon_key_of(&h->r->lt, st, &h->key[j], &kd);
      if (krc != VD_OK) {
        h->prc[j] = krc;
        h->pd[j] = kd;
      }
    }
  }
  for (size_t j = 0; j < n; j++) {
    vd_stage *st = &set->stages[h->pend[j]];
    if (h->prc[j] == VD_EINPUT) {
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&h->pd[j], line, sizeof(line));
      vd_issue is;
      shape_issue(h->r, st, h->pd[j].record, line, &is);
      VD_CHECK(vd_issue_push(&h->shape, &h->n_shape, &h->cap_shape, 0, &h->n_shape_dropped, &is));
    } else if (h->prc[j] != VD_OK) {
      if (d) *d = h->pd[j];
      return h->prc[j];
    }
    if (!h->tab) continue;
    VD_CHECK(vd_stage_canon_insert(h->tab, st, &h->key[j], d));
    if (!h->o->dump_stages && (uint32_t)st->canon_class != st->id && st->n_vals >= VD_RUN_COMPACT_MIN_VALUES)
      vd_stage_compact(st);
  }
  return VD_OK;
}

/* Called by the cut on every finished stage: queued, and the queue is
 * processed when full (hook_flush; the caller flushes the rest). */
static vd_rc stage_hook(void *p, vd_stage_set *set, size_t i, vd_diag *d) {
  struct stage_hook *h = p;
  vd_ctl_add(VD_CTL_STAGES_CUT, 1);
  /* Stages copy the nodes they hold: a node with many outputs read by many
   * targets is copied into each (one node of 1000 outputs into a concat,
   * inferred outputs: 1000 stages of 1000 values, 2.3 GB for a 49 KB plan).
   * Past CUT_VALUES_PER_VALUE the cut stops; the round is INCONCLUSIVE
   * (analyse). */
  /* Operand references (st->idx, 4 bytes each) count 1/16 of a value: a
   * node listing 65535 inputs copied into many stages is the same blow-up. */
  h->cut_values += set->stages[i].n_vals + set->stages[i].n_idx / 16;
  if (h->cut_values > h->cut_budget) {
    h->over = 1;
    return VD_EINPUT; /* stops the cut; analyse records the limit */
  }
  h->pend[h->n_pend++] = i;
  if (h->n_pend == VD_RUN_HOOK_BATCH) return hook_flush(h, set, d);
  return VD_OK;
}

/* Cuts compact stage i again and reduces it as the run did. */
static vd_rc restore_stage(vd_run *r, const vd_run_opts *o, size_t i, vd_diag *d) {
  vd_stage *st = &r->set.stages[i];
  if (!st->compact) return VD_OK;
  VD_CHECK(vd_stage_recut(&r->lt, &r->set, i, d));
  if (o->no_reduce) return VD_OK;
  vd_diag sd;
  vd_diag_clear(&sd);
  vd_rc rc = vd_stage_reduce(&r->lt, st, &sd);
  if (rc != VD_OK && rc != VD_EINPUT) {
    if (d) *d = sd;
    return rc;
  }
  return VD_OK;
}

/* Restores the bodies of the compact stages that reports and findings read:
 * every failing one (inconclusive ones are reported by their reason only)
 * and the one --dot-stage draws.  A restored stage is as large as its class
 * representative; a run failing in thousands of large stages can run out of
 * memory here (exit 3), never report a stage without its body. */
vd_rc vd_run_i_recut_reported(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  for (size_t i = 0; i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (r->inferred && vd_run_i_targets_candidate(r, &r->set.stages[i])) continue; /* not reported (solve_stages) */
    VD_CHECK(restore_stage(r, o, i, d));
  }
  if (o->dot_path && o->dot_stage >= 0 && (size_t)o->dot_stage < r->set.n_stages)
    VD_CHECK(restore_stage(r, o, (size_t)o->dot_stage, d));
  return VD_OK;
}

/* The round's lineage table, built again without the candidates its
 * issues implicate; its issues go to the run's list. */
static vd_rc build_lineage_table(vd_run *r, vd_diag *d) {
  double t = vd_clock_s();
  vd_ctl_set(VD_CTL_LIN_PIECES, 0);
  vd_ctl_set(VD_CTL_LIN_CHECKED, 0);
  vd_progress_phase(&r->prog, "checking the lineage table", VD_CTL_LIN_PIECES, "pieces collected", 0);
  vd_progress_second(&r->prog, VD_CTL_LIN_CHECKED, "lineages checked");
  VD_CHECK(vd_lin_build(&r->sg, &r->pg, &r->lt, d));
  /* Candidates a lineage issue implicates (a gap or a missing part left by
   * candidates dropped in the round before: the other part of a partial
   * sum, the other shards of a slice) are dropped before any stage is cut,
   * and the table is built again: they would only fail and cost a round of
   * model-sized stages.  Dropping only removes candidates (SOUNDNESS as in
   * drop_failed_candidates); each pass drops at least one, so this ends. */
  while (r->inferred && r->infer.n_inferred && r->lt.n_issues) {
    size_t n_drop = 0;
    VD_CHECK(vd_run_i_drop_candidates_of_issues(r, &n_drop, d));
    if (!n_drop) break;
    r->n_dropped += n_drop;
    vd_lin_free(&r->lt);
    memset(&r->lt, 0, sizeof(r->lt));
    VD_CHECK(vd_lin_build(&r->sg, &r->pg, &r->lt, d));
  }
  VD_CHECK(vd_run_i_collect_issues(r, r->lt.issues, r->lt.n_issues, r->lt.n_issues_dropped, NULL));
  r->phase_s[VD_RUN_LINEAGE] += vd_clock_s() - t;
  return VD_OK;
}

/* The bound on the values the cut may copy into stages: per value of the
 * two graphs, plus one per node execution in all replicas (sums by part and
 * collectives spanning replicas hold every replica's piece;
 * REPLICA_EXEC_PER_BYTE bounds those executions). */
static vd_rc cut_budget_of(const vd_run *r, uint64_t *budget, vd_diag *d) {
  uint64_t ex = 0;
  VD_CHECK(vd_plan_executions(&r->pp, UINT64_MAX, &ex, d));
  uint64_t reps = r->pp.world.replicas > 0 ? (uint64_t)r->pp.world.replicas : 1;
  *budget = (uint64_t)VD_LIM_CUT_VALUES_SLACK + ex * reps +
            (uint64_t)VD_LIM_CUT_VALUES_PER_VALUE * ((uint64_t)r->sg.n_values + (uint64_t)r->pg.n_values);
  return VD_OK;
}

/* The cut stopped past its bound (stage_hook).  SOUNDNESS: nothing of this
 * round is solved (its stages are dropped); the limit makes the run
 * INCONCLUSIVE, never EQUIVALENT.  Frees h. */
static vd_rc cut_over_limit(vd_run *r, struct stage_hook *h, double t, vd_diag *d) {
  vd_issue is;
  vd_issue_init(&is, "stages", 0, "limit", VD_DX_NONE);
  snprintf(is.detail, sizeof(is.detail),
           "the stages cut so far hold %llu values, past CUT_VALUES_PER_VALUE (%d per value of the two graphs, "
           "plus the node executions of all replicas, plus %d; `verdict limits`): a node with many outputs is copied into every stage "
           "that reads one of them",
           (unsigned long long)h->cut_values, VD_LIM_CUT_VALUES_PER_VALUE, VD_LIM_CUT_VALUES_SLACK);
  vd_stage_set_free(&r->set);
  memset(&r->set, 0, sizeof(r->set));
  for (size_t j = 0; j < VD_RUN_HOOK_BATCH; j++) vd_stage_canon_key_free(&h->key[j]);
  vd_stage_canon_free(h->tab);
  vd_free(h->shape);
  vd_free(h);
  if (d) vd_diag_clear(d);
  VD_CHECK(vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is));
  r->round_final = 1;
  r->phase_s[VD_RUN_STAGES] += vd_clock_s() - t;
  return VD_OK;
}

/* The stages' sums: per-replica, per-microbatch stages represented, and
 * the sums by part with the parts they stand for. */
static void count_represented(vd_run *r) {
  r->n_represented = 0;
  r->n_sum_stages = r->n_sum_parts = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    r->n_represented += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    r->n_reduced += st->reduced;
    if (st->sum_parts) {
      r->n_sum_stages++;
      r->n_sum_parts += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    }
  }
}

/* One round: lineage table, stages, solving (with the current candidates). */
vd_rc vd_run_i_analyse(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  vd_rc rc;
  VD_CHECK(build_lineage_table(r, d));
  /* Different global batches: every stage downstream of the data compares
   * different samples, so solving would only repeat the BATCH diagnosis. */
  for (size_t i = 0; i < r->lt.n_issues; i++)
    if (r->lt.issues[i].kind == VD_LISSUE_BATCH) return VD_OK;

  double t = vd_clock_s();
  /* Each stage is reduced and classified as soon as it is cut; a class
   * member's body is freed at once (OPTIMIZATION-ONLY: memory follows the
   * classes, not the stages; vd_stage_recut restores it for reports). */
  vd_ctl_set(VD_CTL_STAGES_CUT, 0);
  vd_ctl_set(VD_CTL_CUT_LINEAGES, 0);
  vd_progress_phase(&r->prog, "cutting stages", VD_CTL_STAGES_CUT, "stages cut", 0);
  vd_progress_second(&r->prog, VD_CTL_CUT_LINEAGES, "lineages cut");
  struct stage_hook *h = vd_calloc(1, sizeof(*h)); /* (its batch is large: not on the stack) */
  if (!h) return VD_OOM(d);
  h->r = r;
  h->o = o;
  rc = cut_budget_of(r, &h->cut_budget, d);
  if (rc != VD_OK) {
    vd_free(h);
    return rc;
  }
  rc = o->no_reuse ? VD_OK : vd_stage_canon_new(&h->tab, d);
  if (rc == VD_OK) rc = vd_stage_cut_hook(&r->lt, &r->set, stage_hook, h, d);
  if (rc == VD_OK) rc = hook_flush(h, &r->set, d);
  r->cut_values = h->cut_values;
  r->cut_budget = h->cut_budget;
  if (h->over) return cut_over_limit(r, h, t, d);
  vd_stage_canon_free(h->tab);
  for (size_t j = 0; j < VD_RUN_HOOK_BATCH; j++) vd_stage_canon_key_free(&h->key[j]);
  if (rc == VD_OK) rc = vd_run_i_collect_issues(r, r->set.issues, r->set.n_issues, r->set.n_issues_dropped, NULL);
  for (size_t i = 0; i < h->n_shape && rc == VD_OK; i++)
    rc = vd_issue_push(&r->issues, &r->n_issues, &r->cap_issues, 0, &r->n_issues_dropped, &h->shape[i]);
  vd_free(h->shape);
  vd_free(h);
  if (rc != VD_OK) return rc;
  vd_progress_phase(&r->prog, "grouping stages into symmetry classes", -1, NULL, 0);
  count_represented(r);
  r->phase_s[VD_RUN_STAGES] += vd_clock_s() - t;

  t = vd_clock_s();
  rc = vd_run_i_solve_stages(r, o, d);
  r->phase_s[VD_RUN_SOLVE] += vd_clock_s() - t;
  return rc;
}

void vd_run_i_reset_round(vd_run *r, size_t n_graph_issues, size_t n_graph_dropped) {
  if (r->verdicts)
    for (size_t i = 0; i < r->set.n_stages; i++) vd_stage_verdict_free(&r->verdicts[i]);
  VD_DROP(r->verdicts);
  VD_DROP(r->skipped);
  VD_DROP(r->stage_rc);
  vd_stage_set_free(&r->set);
  memset(&r->set, 0, sizeof(r->set));
  vd_lin_free(&r->lt);
  memset(&r->lt, 0, sizeof(r->lt));
  r->n_issues = n_graph_issues;
  r->n_issues_dropped = n_graph_dropped;
  r->n_limits = r->n_limits_dropped = 0;
  r->n_classes = r->n_solved = r->n_fast = r->n_reduced = 0;
  r->n_equiv = r->n_not_equiv = r->n_inconclusive = r->n_skipped_large = r->n_demoted = r->n_skipped_decided = 0;
  r->round_final = 0;
}

