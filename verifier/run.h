/*
 * verifier/run.h - one verification run: load, graph, lineage, stages,
 * solve (in parallel), and the collected results that the reports print.
 *
 * Results are data: a vd_run holds every structural issue and every stage
 * verdict in a deterministic order, independent of the thread count.
 */
#ifndef VD_RUN_H
#define VD_RUN_H

#include <stdio.h>

#include "../solver/stage_solve.h"
#include "cache.h"
#include "progress.h"

typedef struct {
  const char *sm, *pm;
  const char *json_path;   /* --json FILE, or NULL */
  const char *dump_stages; /* --dump-stages FILE, or NULL */
  const char *html_path;   /* --html FILE, or NULL (verifier/report_html.c) */
  const char *junit_path;  /* --junit FILE, or NULL (verifier/report_junit.c) */
  const char *sarif_path;  /* --sarif FILE, or NULL (verifier/report_sarif.c) */
  const char *summary_path;/* --summary FILE, or $GITHUB_STEP_SUMMARY with --github, or NULL */
  int github;              /* --github: workflow-command annotations (verifier/report_github.c) */
  const char *dot_path;    /* --dot-stage N FILE: FILE, or NULL */
  long dot_stage;          /* --dot-stage N FILE: N */
  int threads;             /* 0 = OpenMP default */
  unsigned stage_timeout_ms;  /* wall-clock backstop per solver check; 0 = none */
  uint64_t stage_budget;      /* work units per check; 0 = default, UINT64_MAX = unlimited */
  int max_failures;        /* failing stages reported in detail */
  uint64_t seed;
  int quiet, verbose;
  int no_reuse;            /* solve every stage, not one per class */
  int no_fast_path;        /* skip the simplifier normal-form comparison */
  int no_reduce;           /* check stages on their original shapes */
  int no_infer;            /* do not infer lineages of unannotated tensors */
  int keep_update_factors; /* inference keeps factors escaping into updates (refine_with_factors) */
  double deadline_s;       /* --deadline S: the whole run's wall clock; 0 = none */
  vd_cache *cache;         /* proof cache (verifier/cache.h), borrowed; NULL = none */
  int cross_check;         /* --cross-check: every normal-form proof also given to Z3 */
  const char *certificate; /* --certificate DIR, or NULL (verifier/cert.c) */
} vd_run_opts;

typedef enum { VD_RUN_LOAD, VD_RUN_GRAPH, VD_RUN_LINEAGE, VD_RUN_STAGES, VD_RUN_SOLVE, VD_RUN_PHASES } vd_run_phase;
extern const char *const vd_run_phase_names[VD_RUN_PHASES];

typedef struct vd_run {
  vd_plan_t sp, pp;
  vd_graph_t sg, pg;
  vd_lin_table lt;
  /* Lineage inference (lineage/infer.c): candidates still standing in the
   * final round are flagged in inferred[] (per parallel tensor). */
  uint8_t *inferred;
  uint8_t *dropped;       /* per parallel tensor: its candidate was dropped (NULL before any drop) */
  vd_lin_infer_stats infer;
  size_t n_dropped;       /* candidates dropped because their proof failed */
  int infer_rounds;       /* cut-and-solve rounds run (1 without drops) */
  /* Stages proven in earlier rounds, by exact content (run.c, stage_sig):
   * a later round takes their verdict instead of solving them again. */
  uint64_t *pv_pool; size_t n_pv_pool, cap_pv_pool;
  struct vd_run_sig *pv; size_t n_pv, cap_pv;
  size_t n_reused_rounds; /* stages not solved again thanks to that */
  size_t n_cache_reused;  /* class representatives taken from the proof cache, over all rounds */
  vd_cache_stats cache_stats; /* this run's share of the cache's counters (zeros without a cache) */
  /* A gate configuration unchanged since a run proved it EQUIVALENT (the
   * whole-configuration cache, verifier/cache.h): nothing was loaded or
   * solved; the counts are the proving run's.  Every other field is empty. */
  int config_cached;
  vd_cache_config cached;
  vd_stage_set set;
  vd_stage_verdict *verdicts; /* one per stage (members of a class copy the representative's kind) */
  vd_rc *stage_rc;            /* machinery errors per stage */
  /* Structural issues of every module (common/issue.h), in pipeline order:
   * parallel graph, lineage, stages.  n_issues_dropped counts those the
   * modules found beyond their caps and did not store. */
  vd_issue *issues; size_t n_issues, cap_issues, n_issues_dropped;
  /* Limits reached (issue kind "limit", e.g. a stage cone past CONE_MAX):
   * no finding, but nothing proven there either; they make the run
   * INCONCLUSIVE (exit 3) unless a finding makes it NOT EQUIVALENT. */
  vd_issue *limits; size_t n_limits, cap_limits, n_limits_dropped;
  uint64_t cut_values, cut_budget; /* stage values cut in the last round, and CUT_VALUES_PER_VALUE's bound */
  size_t n_classes, n_solved, n_fast, n_reduced;
  size_t n_represented;       /* sum of the stages' n_rep x n_mb: per-replica, per-microbatch stages proven */
  size_t n_sum_stages, n_sum_parts; /* sums by part (stages/cut.c): stages, and the parts they stand for */
  size_t n_equiv, n_not_equiv, n_inconclusive;
  size_t n_skipped_large;     /* of n_inconclusive: stages larger than a failing tier, not solved (run.c) */
  size_t n_demoted;           /* of n_inconclusive: failures resting on inferred lineages that did not hold,
                                 in the last round (run.c, demote_ungrounded) */
  size_t n_skipped_decided;   /* of n_inconclusive: not solved, a structural problem of the plan decides (run.c) */
  uint8_t *skipped;           /* per stage: 1 if left unsolved so, 2 if demoted so, 3 if left unsolved because
                                 a structural problem decides, 4 if the run was interrupted before it was
                                 solved or confirmed (NULL before solving) */
  int round_final;            /* the round just solved is the last (no candidate to drop, or a grounded failure) */
  double phase_s[VD_RUN_PHASES];
  size_t peak_bytes;          /* the process's peak resident set (getrusage), everything included */
  size_t peak_tracked_bytes;  /* peak of verdict's own allocations (common/mem.h) */
  vd_progress prog;
  int threads_used;
  /* An interrupted run (SIGINT, SIGTERM, --deadline; common/ctl.h): the
   * reason (VD_STOP_*, verifier/progress.h), the phase it stopped in, when,
   * and what was done by then.  Its verdict is INCONCLUSIVE (exit 3); the
   * stages it did not solve are "not solved (run interrupted)" (skipped[i]
   * = 4), never equivalent. */
  int interrupted;
  const char *stop_phase;
  char sm_sha256[65], pm_sha256[65]; /* SHA-256 of the plan files (common/digest.h); "" until read */
  double stop_s;
  size_t n_stages_cut_at_stop;   /* stages cut when the stop came during the cut (the set is then dropped) */
  size_t n_interrupted;          /* of n_inconclusive: stages not solved, or not confirmed, because of the stop */
  size_t n_unconfirmed;          /* of n_interrupted: their check had failed, the failure was not confirmed */
} vd_run;

/* Runs the verification.  VD_OK when a verdict was reached (whatever it is);
 * VD_EINPUT / VD_EIO for bad input files (diag names file, record, field);
 * VD_ENOMEM / VD_EINTERNAL otherwise.  Free r with vd_run_free in all cases. */
vd_rc vd_run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d);
void vd_run_free(vd_run *r);

/* Exit code of a finished run: 0 equivalent, 1 not equivalent, 3 inconclusive. */
int vd_run_exit_code(const vd_run *r);

/* Reports: verifier/report.h. */

#endif
