/*
 * verifier/run.c - orchestration of one verification run.
 *
 * Serial phases (load, graph, lineage, stage cutting, reduction, canonical
 * classes) and one parallel phase: the representative stage of every class
 * is solved under OpenMP with a dynamic schedule, each thread owning its Z3
 * context and diag.  Members of a class take the representative's verdict
 * (SOUNDNESS: their canonical serializations are byte-identical, so the
 * proof is the same proof); failing members are re-solved on their own so
 * that their counterexamples name their own ranks.  Results are stored per
 * stage id, so the output does not depend on the thread count.
 */
#include "run_int.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/ctl.h"
#include "../common/digest.h"
#include "../common/limits.h"
#include "../common/mem.h"
#include "../ops/ops.h"

const char *const vd_run_phase_names[VD_RUN_PHASES] = {"load", "graph", "lineage", "stages", "solve"};

void vd_run_free(vd_run *r) {
  if (!r) return;
  if (r->verdicts)
    for (size_t i = 0; i < r->set.n_stages; i++) vd_stage_verdict_free(&r->verdicts[i]);
  VD_FREE_ALL(r->verdicts, r->skipped, r->stage_rc, r->issues, r->limits, r->inferred, r->dropped, r->pv_pool, r->pv);
  vd_stage_set_free(&r->set);
  vd_lin_free(&r->lt);
  vd_graph_free(&r->pg);
  vd_graph_free(&r->sg);
  vd_plan_free(&r->pp);
  vd_plan_free(&r->sp);
  memset(r, 0, sizeof(*r));
}

int vd_run_exit_code(const vd_run *r) {
  if (r->interrupted) return 3; /* whatever was found so far: no verdict was reached */
  if (r->n_issues > 0 || r->n_issues_dropped > 0 || r->n_not_equiv > 0) return 1;
  if (r->n_inconclusive > 0 || r->n_limits > 0 || r->n_limits_dropped > 0) return 3;
  return 0;
}

/* Appends one module's issues to the run's list: each already carries its
 * diagnosis (common/issue.h), so nothing is mapped here.  prefix, if not
 * NULL, goes before each detail ("parallel plan: "). */
vd_rc vd_run_i_collect_issues(vd_run *r, const vd_issue *v, size_t n, size_t dropped, const char *prefix) {
  for (size_t i = 0; i < n; i++) {
    vd_issue is = v[i];
    if (prefix) snprintf(is.detail, sizeof(is.detail), "%s%s", prefix, v[i].detail);
    /* SOUNDNESS: a limit reached is no finding (exit 3, never 1). */
    if (is.kind_name && !strcmp(is.kind_name, "limit"))
      VD_CHECK(vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is));
    else
      VD_CHECK(vd_issue_push(&r->issues, &r->n_issues, &r->cap_issues, 0, &r->n_issues_dropped, &is));
  }
  r->n_issues_dropped += dropped;
  return VD_OK;
}

static vd_rc load_plan(const char *path, vd_plan_kind want, vd_plan_t *p, vd_diag *d) {
  VD_CHECK(vd_plan_read_file(path, p, d));
  VD_CHECK(vd_op_check_plan(p, path, d)); /* arity and attributes: exit 2, not a default */
  if (p->kind != want)
    VD_FAIL(d, VD_EINPUT, path, NULL, "kind", "expected a %s plan for %s, got a %s plan%s",
            want == VD_PLAN_SINGLE ? "single-device" : "parallel", want == VD_PLAN_SINGLE ? "--sm" : "--pm",
            p->kind == VD_PLAN_SINGLE ? "single-device" : "parallel",
            want == VD_PLAN_SINGLE ? " (were --sm and --pm swapped?)" : "");
  return VD_OK;
}

/* The process's peak resident set size in bytes (Linux: ru_maxrss in KiB). */
static size_t process_peak(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024u;
}

static vd_rc run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d);

/* -v: one line per round of cut-and-solve on stderr (how inference and the
 * drops went; docs/verifier.md 1b). */
static void trace_round(vd_run *r, const vd_run_opts *o, double secs) {
  if (!o->verbose || o->quiet || !r->infer.n_inferred) return;
  size_t nf = 0, nfc = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict == VD_SMT_EQUIVALENT) continue;
    nf++;
    nfc += r->inferred && vd_run_i_targets_candidate(r, &r->set.stages[i]);
  }
  vd_progress_note(&r->prog, "verdict: round %d: %zu stages, %zu classes solved, %zu not proven (%zu target candidates), "
                  "%zu candidates dropped so far%s (%.2f s)\n",
          r->infer_rounds, r->set.n_stages, r->n_classes, nf, nfc, r->n_dropped, r->round_final ? ", last round" : "",
          secs);
}

static vd_rc verify_once(const vd_run_opts *o, vd_run *r, vd_diag *d);

/* Whether every stage that failed targets updated weights or optimizer
 * state only (last versions): the failures a withheld factor explains.  A
 * failure anywhere else (a forward value) is a fault the factors cannot
 * name, and a second run would only double the time. */
static int fails_only_at_updates(const vd_run *r) {
  int any = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[i];
    /* through the target's lineage, which a compacted class member keeps
     * (its vals are freed: vd_stage_compact) */
    for (uint32_t ti = 0; ti < st->n_targets; ti++) {
      const vd_lineage *l = &r->lt.lins[st->targets[ti].lineage];
      vd_role role = r->sp.tensors[l->stensor].role;
      if (l->initial || !r->sg.values[l->svalue].is_final || (role != VD_ROLE_WEIGHT && role != VD_ROLE_OPTSTATE))
        return 0;
      any = 1;
    }
  }
  return any;
}

/* A NOT EQUIVALENT run whose inference withheld factors that escape only
 * into updates (vd_lin_infer_stats.factors_withheld: a gradient that is f x
 * its single-device value read by an optimizer step) runs again with them
 * kept: its failing stages can then be proven to fail by the factor alone
 * (solver/stage_solve.c unscaled_check: SCALE, MISSING_REDUCTION).  The
 * first run withholds them because in a correct program such a factor is a
 * wrong guess that costs a round of failed proofs.  Only when the failing
 * stages target updates alone (fails_only_at_updates).  Both runs are
 * sound; the second replaces the first only when it is NOT EQUIVALENT too,
 * its phase times counting both. */
static vd_rc refine_with_factors(const vd_run_opts *o, vd_run *r, double elapsed_s, vd_diag *d) {
  if (o->keep_update_factors || !r->infer.factors_withheld || r->interrupted || vd_run_exit_code(r) != 1 ||
      !fails_only_at_updates(r))
    return VD_OK;
  /* under --deadline, only when two more runs as long as the first fit */
  if (o->deadline_s > 0 && o->deadline_s - elapsed_s < 2 * elapsed_s) return VD_OK;
  if (!o->quiet) fprintf(stderr, "verdict: inferring again with the factors that reach the updates kept (diagnosis)\n");
  double first[VD_RUN_PHASES];
  memcpy(first, r->phase_s, sizeof(first));
  vd_run_opts o2 = *o;
  o2.keep_update_factors = 1;
  if (o->deadline_s > 0) o2.deadline_s = o->deadline_s - elapsed_s;
  /* a run's graphs point into its plans: a run is redone in place, never
   * copied; the first is run again (it is deterministic) when the second
   * ends otherwise */
  vd_run_free(r);
  vd_rc rc = verify_once(&o2, r, d);
  if (rc != VD_OK || r->interrupted || vd_run_exit_code(r) != 1) {
    vd_run_free(r);
    if (d) vd_diag_clear(d);
    o2.keep_update_factors = 0;
    rc = verify_once(&o2, r, d);
  }
  for (int i = 0; i < VD_RUN_PHASES; i++) r->phase_s[i] += first[i];
  return rc;
}

vd_rc vd_run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  double t0 = vd_clock_s();
  vd_rc rc = verify_once(o, r, d);
  return rc == VD_OK ? refine_with_factors(o, r, vd_clock_s() - t0, d) : rc;
}

static vd_rc verify_once(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  memset(r, 0, sizeof(*r));
  vd_ctl_reset();
  vd_progress_init(&r->prog, o->quiet, o->deadline_s);
  vd_cache_stats before, after;
  vd_cache_stats_get(o->cache, &before);
  vd_rc rc = run_verify(o, r, d);
  vd_cache_stats_get(o->cache, &after);
  vd_cache_stats_since(&before, &after, &r->cache_stats);
  if (rc == VD_ECANCELED || r->interrupted) {
    /* Stopped (common/ctl.h): a partial report, INCONCLUSIVE.  Stopped
     * before solving, the stages cut so far are dropped (they have no
     * verdicts); the report says how many there were. */
    r->interrupted = vd_ctl_stopped() ? vd_ctl_stopped() : -1;
    r->stop_phase = vd_progress_current(&r->prog);
    r->stop_s = vd_clock_s() - r->prog.t_start;
    if (!r->verdicts) {
      r->n_stages_cut_at_stop = r->set.n_stages ? r->set.n_stages : vd_ctl_get(VD_CTL_STAGES_CUT);
      vd_stage_set_free(&r->set);
      memset(&r->set, 0, sizeof(r->set));
    }
    if (d) vd_diag_clear(d);
    rc = VD_OK;
  }
  vd_progress_end(&r->prog);
  r->peak_tracked_bytes = vd_mem_peak();
  r->peak_bytes = process_peak();
  return rc;
}

/* Loads and checks both plans, and hashes their files for the reports. */
static vd_rc load_plans(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  double t = vd_clock_s();
  vd_progress_phase(&r->prog, "loading the plans", -1, NULL, 0);
  VD_CHECK(load_plan(o->sm, VD_PLAN_SINGLE, &r->sp, d));
  VD_CHECK(load_plan(o->pm, VD_PLAN_PARALLEL, &r->pp, d));
  /* The reports' content hashes (verifier/provenance.h) */
  uint8_t dg[VD_DIGEST_BYTES];
  VD_CHECK(vd_digest_file(o->sm, dg, d));
  vd_digest_hex(dg, r->sm_sha256);
  VD_CHECK(vd_digest_file(o->pm, dg, d));
  vd_digest_hex(dg, r->pm_sha256);
  VD_CHECK(vd_lin_check_pair(&r->sp, o->sm, &r->pp, o->pm, d));
  r->phase_s[VD_RUN_LOAD] = vd_clock_s() - t;
  return VD_OK;
}

/* The two graphs; the parallel one's issues go to the run's list, and
 * *pg_rc is how building it went (VD_OK or VD_EINPUT). */
static vd_rc build_graphs(const vd_run_opts *o, vd_run *r, vd_rc *pg_rc, vd_diag *d) {
  double t = vd_clock_s();
  vd_progress_phase(&r->prog, "building the graphs", -1, NULL, 0);
  vd_graph_opts sgo = {.expand_replicas = 1}, pgo = {.expand_replicas = 0};
  vd_rc rc = vd_graph_build(&r->sp, &sgo, &r->sg, d);
  if (rc == VD_EINPUT) {
    /* The reference plan itself is broken: that is bad input, not a verdict. */
    vd_diag_set_file(d, o->sm);
    return rc;
  }
  VD_CHECK(rc);
  vd_diag gd;
  vd_diag_clear(&gd);
  rc = vd_graph_build(&r->pp, &pgo, &r->pg, &gd);
  if (rc != VD_OK && rc != VD_EINPUT) {
    if (d) *d = gd;
    return rc;
  }
  *pg_rc = rc;
  VD_CHECK(vd_run_i_collect_issues(r, r->pg.issues, r->pg.n_issues, r->pg.n_issues_dropped, "parallel plan: "));
  r->phase_s[VD_RUN_GRAPH] = vd_clock_s() - t;
  return VD_OK;
}

/* The lineage table and the stages work per replica: a plan whose replicas
 * ask for more than its file allows stops here, INCONCLUSIVE naming the
 * limit (plans/budget.c), before inference, the lineage table or a stage
 * (the replica-0 graphs are the file's size).  *over: the limit was hit. */
static vd_rc replica_work_limit(const vd_run_opts *o, vd_run *r, int *over, vd_diag *d) {
  vd_issue is;
  vd_issue_init(&is, "verifier", 0, "limit", VD_DX_NONE);
  char why[sizeof(is.detail)];
  VD_CHECK(vd_plan_replica_work(&r->pp, why, sizeof(why), d));
  *over = why[0] != 0;
  if (why[0]) {
    snprintf(is.detail, sizeof(is.detail), "%.100s: %.200s", o->pm, why);
    return vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is) ? VD_OOM(d)
                                                                                                : VD_OK;
  }
  return VD_OK;
}

/* Rounds of cut-and-solve, each without the candidates the one before
 * dropped, until none is dropped or the last round. */
static vd_rc run_rounds(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  size_t n_graph_issues = r->n_issues, n_graph_dropped = r->n_issues_dropped;
  for (;;) {
    r->infer_rounds++;
    double tr = vd_clock_s();
    VD_CHECK(vd_run_i_analyse(r, o, d));
    trace_round(r, o, vd_clock_s() - tr);
    if (r->interrupted || r->round_final || !r->infer.n_inferred) break;
    size_t n_drop = 0;
    VD_CHECK(vd_run_i_drop_failed_candidates(r, &n_drop, d));
    if (n_drop && r->verdicts && vd_run_i_remember_proven(r) != VD_OK) return VD_OOM(d);
    if (!n_drop) break;
    if (r->infer_rounds >= VD_RUN_MAX_INFER_ROUNDS) {
      vd_run_i_candidates_inconclusive(r);
      break;
    }
    /* SOUNDNESS: the next round re-cuts without the dropped candidates:
     * every stage that took one as a hypothesis grows past it. */
    r->n_dropped += n_drop;
    vd_run_i_reset_round(r, n_graph_issues, n_graph_dropped);
  }
  return VD_OK;
}

static vd_rc run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  /* The phases before solving (lineage validation) use OpenMP's default
   * team: the solver's thread count. */
  if (o->threads > 0) omp_set_num_threads(o->threads);
  VD_CHECK(load_plans(o, r, d));
  /* A stop request (common/ctl.h) is looked at between the phases too:
   * loading and the graphs do not poll it. */
  if (vd_ctl_stopped()) return VD_ECANCELED;
  vd_rc rc = VD_OK;
  VD_CHECK(build_graphs(o, r, &rc, d));
  if (r->n_issues || r->n_issues_dropped) return VD_OK; /* stages need a well-formed graph */
  if (vd_ctl_stopped()) return VD_ECANCELED;
  int over = 0;
  VD_CHECK(replica_work_limit(o, r, &over, d));
  if (over) return VD_OK;
  if (!o->no_infer) {
    double t = vd_clock_s();
    vd_ctl_set(VD_CTL_INFER_VALUES, 0);
    vd_progress_phase(&r->prog, "inferring lineages", VD_CTL_INFER_VALUES, "values with a lineage", 0);
    unsigned flags = o->keep_update_factors ? VD_LIN_KEEP_UPDATE_FACTORS : 0;
    VD_CHECK(vd_lin_infer_flags(&r->sg, &r->pg, &r->pp, flags, &r->inferred, &r->infer, d));
    r->phase_s[VD_RUN_LINEAGE] += vd_clock_s() - t;
  }
  VD_CHECK(run_rounds(o, r, d));
  return rc;
}
