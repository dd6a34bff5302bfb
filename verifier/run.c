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
#include "run.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/mem.h"

const char *const vd_run_phase_names[VD_RUN_PHASES] = {"load", "graph", "lineage", "stages", "solve"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void vd_run_free(vd_run *r) {
  if (!r) return;
  if (r->verdicts)
    for (size_t i = 0; i < r->set.n_stages; i++) vd_stage_verdict_free(&r->verdicts[i]);
  vd_free(r->verdicts);
  vd_free(r->stage_rc);
  vd_free(r->issues);
  vd_stage_set_free(&r->set);
  vd_lin_free(&r->lt);
  vd_graph_free(&r->pg);
  vd_graph_free(&r->sg);
  vd_plan_free(&r->pp);
  vd_plan_free(&r->sp);
  memset(r, 0, sizeof(*r));
}

int vd_run_exit_code(const vd_run *r) {
  if (r->n_issues > 0 || r->n_not_equiv > 0) return 1;
  if (r->n_inconclusive > 0) return 3;
  return 0;
}

static vd_rc add_issue(vd_run *r, vd_diagnosis dx, const char *source, const char *kind, int64_t rank,
                       int64_t mb, const char *detail) {
  vd_run_issue *n = vd_realloc_array(r->issues, r->n_issues + 1, sizeof(*n));
  if (!n) return VD_ENOMEM;
  r->issues = n;
  vd_run_issue *is = &r->issues[r->n_issues++];
  memset(is, 0, sizeof(*is));
  is->diagnosis = dx;
  snprintf(is->source, sizeof(is->source), "%s", source);
  snprintf(is->kind, sizeof(is->kind), "%s", kind);
  is->rank = rank;
  is->mb = mb;
  snprintf(is->detail, sizeof(is->detail), "%s", detail);
  return VD_OK;
}

static vd_rc load_plan(const char *path, vd_plan_kind want, vd_plan_t *p, vd_diag *d) {
  VD_CHECK(vd_plan_read_file(path, p, d));
  if (p->kind != want)
    VD_FAIL(d, VD_EINPUT, path, NULL, "kind", "expected a %s plan, got a %s plan",
            want == VD_PLAN_SINGLE ? "single" : "parallel", p->kind == VD_PLAN_SINGLE ? "single" : "parallel");
  return VD_OK;
}

/* Graph issues of either plan are DATAFLOW problems. */
static vd_rc collect_graph_issues(vd_run *r, const vd_graph_t *g, const char *which) {
  for (size_t i = 0; i < g->n_issues; i++) {
    const vd_graph_issue *gi = &g->issues[i];
    char detail[320];
    snprintf(detail, sizeof(detail), "%s plan: %s", which, gi->detail);
    int64_t rank = -1;
    if (gi->pnode >= 0) rank = vd_graph_rank(g, g->plan->nodes[gi->pnode].rank, gi->replica);
    /* A DP gradient reducer that reads its gradient before the backward
     * producing it ran (one microbatch: no accumulator to read yet) is a
     * schedule error, the same bug as a reducer overtaking the last
     * microbatch when there are several. */
    vd_diagnosis dx = VD_DX_DATAFLOW;
    if (gi->kind == VD_GISSUE_READ_EARLY && gi->pnode >= 0 && gi->tensor >= 0) {
      const vd_node_t *n = &g->plan->nodes[gi->pnode];
      if (n->coll >= 0 && n->span_replicas && g->plan->tensors[gi->tensor].role == VD_ROLE_GRAD) dx = VD_DX_SCHEDULE;
    }
    VD_CHECK(add_issue(r, dx, "graph", vd_gissue_names[gi->kind], rank, gi->mb, detail));
  }
  return VD_OK;
}

static vd_rc collect_stage_issues(vd_run *r) {
  static const vd_diagnosis map[VD_SISSUE__COUNT] = {VD_DX_DATAFLOW, VD_DX_SCHEDULE, VD_DX_ALIGNMENT, VD_DX_SHAPE};
  for (size_t i = 0; i < r->set.n_issues; i++) {
    const vd_stage_issue *si = &r->set.issues[i];
    VD_CHECK(add_issue(r, map[si->kind], "stages", vd_sissue_names[si->kind], si->rank, si->mb, si->detail));
  }
  return VD_OK;
}

static vd_rc collect_lineage_issues(vd_run *r) {
  for (size_t i = 0; i < r->lt.n_issues; i++) {
    const vd_lin_issue *li = &r->lt.issues[i];
    int64_t rank = -1;
    if (li->ptensor >= 0)
      rank = (int64_t)li->replica * r->pp.world.stored_ranks + r->pp.tensors[li->ptensor].rank;
    vd_diagnosis dx = li->kind == VD_LISSUE_BATCH ? VD_DX_BATCH : VD_DX_DATAFLOW;
    VD_CHECK(add_issue(r, dx, "lineage", vd_lissue_names[li->kind], rank, li->mb, li->detail));
  }
  return VD_OK;
}

/* Progress on a terminal only: stages done, rate, ETA. */
static void progress(const vd_run_opts *o, size_t done, size_t total, double t0) {
  if (o->quiet || !isatty(STDERR_FILENO)) return;
  double el = now_s() - t0;
  double rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 ? (double)(total - done) / rate : 0;
  fprintf(stderr, "\rsolving: %zu/%zu stage classes  %.0f/s  ETA %.0fs   ", done, total, rate, eta);
  if (done == total) fputc('\n', stderr);
}

static vd_rc solve_stages(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  size_t n = r->set.n_stages;
  r->verdicts = vd_calloc(n ? n : 1, sizeof(*r->verdicts));
  r->stage_rc = vd_calloc(n ? n : 1, sizeof(*r->stage_rc));
  uint32_t *reps = vd_calloc(n ? n : 1, sizeof(*reps));
  if (!r->verdicts || !r->stage_rc || !reps) {
    vd_free(reps);
    return VD_OOM(d);
  }
  size_t n_reps = 0;
  for (size_t i = 0; i < n; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i) reps[n_reps++] = (uint32_t)i;
  }
  r->n_classes = n_reps;
  vd_stage_solve_opts so = {.timeout_ms = o->stage_timeout_ms, .fast_path = !o->no_fast_path,
                            .max_elems = 16384, .max_cex_elems = 4};
  size_t done = 0;
  double t0 = now_s();
  vd_rc first_rc = VD_OK;
  vd_diag first_diag;
  vd_diag_clear(&first_diag);
  int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  r->threads_used = threads;
#pragma omp parallel num_threads(threads)
  {
    vd_smt *s = NULL;
    vd_diag td;
    vd_diag_clear(&td);
    vd_rc trc = vd_smt_new(&s, &td);
#pragma omp for schedule(dynamic, 1)
    for (size_t k = 0; k < n_reps; k++) {
      uint32_t i = reps[k];
      vd_diag sd;
      vd_diag_clear(&sd);
      vd_rc rc = trc != VD_OK ? trc : vd_stage_solve(s, &r->lt, &r->set.stages[i], &so, &r->verdicts[i], &sd);
      r->stage_rc[i] = rc;
      if (rc != VD_OK) {
        /* The machinery failed on this stage: inconclusive, with the reason. */
        r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
        char line[VD_DIAG_TEXT + 200];
        vd_diag_format(trc != VD_OK ? &td : &sd, line, sizeof(line));
        snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
#pragma omp critical(vd_run_err)
        if (first_rc == VD_OK && rc == VD_ENOMEM) {
          first_rc = rc;
          first_diag = sd;
        }
      }
      size_t now;
#pragma omp atomic capture
      now = ++done;
      if (omp_get_thread_num() == 0 || now == n_reps) {
#pragma omp critical(vd_run_progress)
        progress(o, now, n_reps, t0);
      }
    }
    vd_smt_free(s);
  }
  /* Members take their representative's verdict: their canonical forms are
   * byte-identical, so the solver was asked the same question.  Their own
   * counterexamples (own pieces and ranks) come from the reported-failure
   * pass below, which solves each reported stage itself. */
  vd_smt *s = NULL;
  vd_rc rc = first_rc;
  for (size_t i = 0; i < n; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i) continue;
    const vd_stage_verdict *rep = &r->verdicts[st->canon_class];
    vd_stage_verdict *v = &r->verdicts[i];
    v->verdict = rep->verdict;
    v->diagnosis = rep->diagnosis;
    v->by_fast_path = rep->by_fast_path;
    memcpy(v->factor, rep->factor, sizeof(v->factor)); /* v != rep: i is not its class id */
    memcpy(v->reason, rep->reason, sizeof(v->reason));
    r->stage_rc[i] = r->stage_rc[st->canon_class];
  }
  /* A Z3 model depends on the context's history (which stages the thread
   * solved before), so the counterexamples that are reported are
   * recomputed serially, each in a fresh context: the report is then
   * byte-identical at any thread count. */
  int reported = 0;
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (o->max_failures > 0 && reported >= o->max_failures) break;
    reported++;
    vd_diag sd;
    vd_diag_clear(&sd);
    if ((rc = vd_smt_new(&s, d)) != VD_OK) break;
    vd_stage_verdict_free(&r->verdicts[i]);
    r->stage_rc[i] = vd_stage_solve(s, &r->lt, &r->set.stages[i], &so, &r->verdicts[i], &sd);
    vd_smt_free(s);
    s = NULL;
    if (r->stage_rc[i] == VD_ENOMEM) rc = vd_diag_set(d, VD_ENOMEM, __FILE__, __LINE__, NULL, NULL, NULL, "out of memory");
    else if (r->stage_rc[i] != VD_OK) {
      r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&sd, line, sizeof(line));
      snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
    }
  }
  if (first_rc != VD_OK && d) *d = first_diag;
  for (size_t i = 0; i < n; i++) {
    switch (r->verdicts[i].verdict) {
    case VD_SMT_EQUIVALENT: r->n_equiv++; break;
    case VD_SMT_NOT_EQUIVALENT: r->n_not_equiv++; break;
    case VD_SMT_INCONCLUSIVE: r->n_inconclusive++; break;
    }
    r->n_fast += r->verdicts[i].by_fast_path;
  }
  r->n_solved = n_reps;
  vd_free(reps);
  return rc;
}

vd_rc vd_run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  memset(r, 0, sizeof(*r));
  double t = now_s();
  VD_CHECK(load_plan(o->sm, VD_PLAN_SINGLE, &r->sp, d));
  VD_CHECK(load_plan(o->pm, VD_PLAN_PARALLEL, &r->pp, d));
  r->phase_s[VD_RUN_LOAD] = now_s() - t;

  t = now_s();
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
  VD_CHECK(collect_graph_issues(r, &r->pg, "parallel"));
  r->phase_s[VD_RUN_GRAPH] = now_s() - t;
  if (r->n_issues) return VD_OK; /* stages need a well-formed graph */

  t = now_s();
  VD_CHECK(vd_lin_build(&r->sg, &r->pg, &r->lt, d));
  VD_CHECK(collect_lineage_issues(r));
  r->phase_s[VD_RUN_LINEAGE] = now_s() - t;
  /* Different global batches: every stage downstream of the data compares
   * different samples, so solving would only repeat the BATCH diagnosis. */
  for (size_t i = 0; i < r->lt.n_issues; i++)
    if (r->lt.issues[i].kind == VD_LISSUE_BATCH) return VD_OK;

  t = now_s();
  VD_CHECK(vd_stage_cut(&r->lt, &r->set, d));
  VD_CHECK(collect_stage_issues(r));
  for (size_t i = 0; i < r->set.n_stages && !o->no_reduce; i++) {
    vd_diag sd;
    vd_diag_clear(&sd);
    rc = vd_stage_reduce(&r->lt, &r->set.stages[i], &sd);
    if (rc == VD_EINPUT) {
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&sd, line, sizeof(line));
      VD_CHECK(add_issue(r, VD_DX_SHAPE, "stages", "shape_constraints", -1, -1, line));
    } else if (rc != VD_OK) {
      if (d) *d = sd;
      return rc;
    }
    r->n_reduced += r->set.stages[i].reduced;
  }
  for (size_t i = 0; i < r->set.n_stages; i++) r->n_represented += r->set.stages[i].n_rep ? r->set.stages[i].n_rep : 1;
  if (!o->no_reuse) VD_CHECK(vd_stage_canon(&r->lt, &r->set, d));
  r->phase_s[VD_RUN_STAGES] = now_s() - t;

  t = now_s();
  rc = solve_stages(r, o, d);
  r->phase_s[VD_RUN_SOLVE] = now_s() - t;
  r->peak_bytes = vd_mem_peak();
  return rc;
}
