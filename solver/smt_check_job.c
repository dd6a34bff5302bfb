/*
 * solver/smt_check_job.c - the equivalence check's (smt_check.c) solver path and its
 * job: the still-open pairs translated into a fresh Z3 context, simplified
 * and solved under the rlimit on a helper thread that the caller waits for
 * up to the wall-clock limit, interrupts, and abandons after a grace period
 * (the thread frees its context when Z3 returns).
 */
#include "smt_check_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <z3.h>

#include "../common/clock.h"
#include "../common/ctl.h"
#include "../common/mem.h"

/* ---- solver path ------------------------------------------------------------ */

/* Z3's "rlimit count" statistic of the solver's last check (0 if absent). */
static uint64_t rlimit_count(Z3_context z, Z3_solver sv) {
  Z3_stats st = Z3_solver_get_statistics(z, sv);
  if (!st || Z3_get_error_code(z) != Z3_OK) return 0;
  Z3_stats_inc_ref(z, st);
  uint64_t v = 0;
  unsigned n = Z3_stats_size(z, st);
  for (unsigned i = 0; i < n; i++) {
    const char *k = Z3_stats_get_key(z, st, i);
    if (k && strcmp(k, "rlimit count") == 0) {
      v = Z3_stats_is_uint(z, st, i) ? Z3_stats_get_uint_value(z, st, i)
                                     : (uint64_t)Z3_stats_get_double_value(z, st, i);
      break;
    }
  }
  Z3_stats_dec_ref(z, st);
  return v;
}

/* goal = the disjunction of par[open[i]] != single[open[i]].  VD_ENOMEM
 * (our allocation) or VD_EINTERNAL (the context failed). */
static vd_rc make_goal(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                       vd_term *goal) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term *ne = vd_malloc(sizeof(vd_term) * (n_open + 1));
  if (!ne) return VD_ENOMEM;
  for (size_t i = 0; i < n_open; i++) {
    vd_term a = par[open[i]], b = single[open[i]];
    /* An index tensor may be Int on one side and Real on the other: compare
     * as reals (Z3_mk_eq does not coerce; a Bool side stays an error). */
    Z3_sort_kind ka = Z3_get_sort_kind(z, Z3_get_sort(z, a)), kb = Z3_get_sort_kind(z, Z3_get_sort(z, b));
    if (ka == Z3_INT_SORT && kb == Z3_REAL_SORT) a = vd_smt_i_keep(s, Z3_mk_int2real(z, a));
    if (kb == Z3_INT_SORT && ka == Z3_REAL_SORT) b = vd_smt_i_keep(s, Z3_mk_int2real(z, b));
    vd_term eq = vd_smt_eq(s, a, b);
    ne[i] = eq ? vd_smt_i_keep(s, Z3_mk_not(z, eq)) : NULL;
  }
  *goal = NULL;
  if (!vd_smt_i_failed(s)) *goal = n_open == 1 ? ne[0] : vd_smt_i_keep(s, Z3_mk_or(z, (unsigned)n_open, (Z3_ast *)ne));
  vd_free(ne);
  if (*goal) *goal = vd_smt_i_assume_facts(s, *goal);
  return *goal ? VD_OK : VD_EINTERNAL;
}

/* unknown: the reason, and which limit stopped the check. */
static void record_unknown(Z3_context z, Z3_solver sv, vd_smt_result *res) {
  res->verdict = VD_SMT_INCONCLUSIVE;
  const char *why = Z3_solver_get_reason_unknown(z, sv);
  if (why && (strstr(why, "cancel") || strstr(why, "interrupt"))) {
    res->limit = VD_SMT_LIMIT_WALL;
    why = "timeout";
  } else if (why && strstr(why, "resource limit")) {
    res->limit = VD_SMT_LIMIT_BUDGET;
  }
  snprintf(res->reason, sizeof(res->reason), "%s", why && why[0] ? why : "unknown");
}

/* sat: NOT EQUIVALENT, with the model's values of the differing pairs. */
static vd_rc record_sat(vd_smt *s, Z3_solver sv, const vd_term *par, const vd_term *single, const size_t *open,
                        size_t n_open, vd_smt_result *res, int *found) {
  Z3_context z = vd_smt_i_z3(s);
  Z3_model m = Z3_solver_get_model(z, sv);
  if (!m || Z3_get_error_code(z) != Z3_OK) {
    vd_smt_i_keep(s, NULL);
    return VD_EINTERNAL;
  }
  Z3_model_inc_ref(z, m);
  res->verdict = VD_SMT_NOT_EQUIVALENT;
  if (found) __atomic_store_n(found, 1, __ATOMIC_RELEASE);
  int no_diff = 0;
  vd_rc rc = vd_smt_i_chk_fill_proof(s, m, par, single, open, n_open, res, "the solver found a counterexample", &no_diff);
  Z3_model_dec_ref(z, m);
  if (no_diff) {
    /* sat but no pair differs when evaluated: never claim anything. */
    res->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(res->reason, sizeof(res->reason), "model evaluation found no differing pair");
  }
  return rc;
}

/* *found (atomic, may be NULL) is set once sat is known, before the model's
 * values are computed: a job abandoned then still proved a difference. */
vd_rc vd_smt_i_chk_solve(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                   vd_smt_result *res, int *found) {
  Z3_context z = vd_smt_i_z3(s);
  vd_term goal = NULL;
  VD_CHECK(make_goal(s, par, single, open, n_open, &goal));

  Z3_solver sv = Z3_mk_solver(z);
  if (!sv || Z3_get_error_code(z) != Z3_OK) return vd_smt_i_keep(s, NULL), VD_EINTERNAL;
  Z3_solver_inc_ref(z, sv);
  Z3_params p = Z3_mk_params(z);
  Z3_params_inc_ref(z, p);
  /* No Z3 "timeout" parameter: Z3 4.8.12's own timer thread can deadlock
   * (seen here: both threads blocked inside Z3).  The deterministic limit
   * is the resource limit; the wall clock is enforced by the caller
   * (run_job). */
  uint64_t rl = vd_smt_i_rlimit(s);
  if (rl) Z3_params_set_uint(z, p, Z3_mk_string_symbol(z, "rlimit"), rl > UINT32_MAX ? UINT32_MAX : (unsigned)rl);
  Z3_solver_set_params(z, sv, p);
  Z3_solver_assert(z, sv, goal);
  vd_rc rc = VD_OK;
  Z3_lbool r = Z3_L_UNDEF;
  if (Z3_get_error_code(z) != Z3_OK) {
    vd_smt_i_keep(s, NULL);
    rc = VD_EINTERNAL;
  } else {
    r = Z3_solver_check(z, sv);
    /* Out of memory inside the check: the context must not be called again
     * (smt.c, "out of memory"), not even to release the solver. */
    if (vd_smt_i_oom(s)) return VD_ENOMEM;
    /* A check interrupted or out of resources is not an error: it is "unknown". */
    if (r == Z3_L_UNDEF && Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
    res->rlimit_used = rlimit_count(z, sv);
    if (Z3_get_error_code(z) != Z3_OK) Z3_set_error(z, Z3_OK);
  }
  if (rc == VD_OK && r == Z3_L_FALSE) res->verdict = VD_SMT_EQUIVALENT;
  else if (rc == VD_OK && r == Z3_L_UNDEF) record_unknown(z, sv, res);
  else if (rc == VD_OK) rc = record_sat(s, sv, par, single, open, n_open, res, found);
  Z3_params_dec_ref(z, p);
  Z3_solver_dec_ref(z, sv);
  return rc;
}

/* ---- the job: Z3 in a fresh context, on a thread that can be abandoned ----- */

typedef struct {
  vd_smt *js;                 /* fresh context, owned by the job */
  int mode;                   /* JOB_SOLVE or JOB_WITNESS */
  int found;                  /* atomic: a difference is proved (values may follow) */
  vd_term *par, *single;      /* the open pairs, translated into js */
  size_t n;
  int fast;                   /* run Z3's simplifier normal form first */
  vd_smt_result res;          /* diff indices relative to 0..n) */
  vd_rc rc;
  size_t n_simplified;        /* pairs proved by Z3's simplifier */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, abandoned;
  int stop;                   /* set (atomically) at the wall-clock limit */
  pid_t tid;                  /* atomic: written by the job's thread */
} job_t;

static void job_free(job_t *j) {
  if (!j) return;
  vd_smt_result_free(&j->res);
  vd_smt_free(j->js);
  vd_free(j->par);
  vd_free(j->single);
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->mu);
  vd_free(j);
}

/* The job's work, on whatever thread runs it. */
static void job_work(job_t *j) {
  vd_smt *js = j->js;
  size_t n = j->n;
  int *proved = vd_calloc(n + 1, sizeof(int));
  size_t *open = vd_malloc(sizeof(size_t) * (n + 1));
  vd_term *simp = vd_malloc(sizeof(vd_term) * (2 * n + 1));
  j->res.verdict = VD_SMT_INCONCLUSIVE;
  if (!proved || !open || !simp) {
    j->rc = VD_ENOMEM;
    goto done;
  }
  if (j->mode == JOB_WITNESS) {
    for (size_t i = 0; i < n; i++) open[i] = i;
    j->rc = vd_smt_i_chk_witness(js, j->par, j->single, open, n, &j->res, &j->found);
    goto done;
  }
  if (j->fast) {
    /* OPTIMIZATION-ONLY: Z3's own normal form; an error (e.g. its step
     * limit) only leaves the pairs open. */
    size_t np = 0;
    vd_rc frc = vd_smt_i_chk_fast_path(js, j->par, j->single, n, proved, simp, &np);
    if (frc == VD_ENOMEM) {
      j->rc = VD_ENOMEM;
      goto done;
    }
    if (frc != VD_OK) {
      vd_smt_i_clear_error(js);
      memset(proved, 0, n * sizeof(int));
      np = 0;
    }
    j->n_simplified = np;
  }
  size_t n_open = 0;
  for (size_t i = 0; i < n; i++)
    if (!proved[i]) open[n_open++] = i;
  if (n_open == 0) {
    j->res.verdict = VD_SMT_EQUIVALENT;
    goto done;
  }
  if (__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE)) {
    /* Interrupted during the simplifier: do not start the solver. */
    j->res.limit = VD_SMT_LIMIT_WALL;
    snprintf(j->res.reason, sizeof(j->res.reason), "timeout");
    goto done;
  }
  j->rc = vd_smt_i_chk_solve(js, j->par, j->single, open, n_open, &j->res, &j->found);
done:
  vd_free(proved);
  vd_free(open);
  vd_free(simp);
}

static void *job_main(void *arg) {
  job_t *j = arg;
  __atomic_store_n(&j->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
  job_work(j);
  pthread_mutex_lock(&j->mu);
  j->done = 1;
  int abandoned = j->abandoned;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  if (abandoned) {
    /* Nobody waits for this job any more: it cleans up after itself. */
    job_free(j);
    vd_smt_i_orphan_add(-1);
  }
  return NULL;
}

static void deadline_after(struct timespec *dl, unsigned ms) {
  clock_gettime(CLOCK_MONOTONIC, dl);
  dl->tv_sec += (time_t)(ms / 1000);
  dl->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (dl->tv_nsec >= 1000000000L) {
    dl->tv_sec++;
    dl->tv_nsec -= 1000000000L;
  }
}

static int ts_before(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Waits until the job is done, the deadline dl passes (NULL: none) or, with
 * poll_stop, a stop of the run is requested (common/ctl.h: a signal or the
 * run's deadline; the wait wakes every 100 ms to look); 1 if done.  Called
 * with j->mu held. */
static int wait_done(job_t *j, const struct timespec *dl, int poll_stop) {
  while (!j->done) {
    if (poll_stop && vd_ctl_stopped()) return 0;
    struct timespec now, slice;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (dl && !ts_before(&now, dl)) return 0;
    deadline_after(&slice, 100);
    if (dl && ts_before(dl, &slice)) slice = *dl;
    pthread_cond_timedwait(&j->cv, &j->mu, &slice);
  }
  return 1;
}

/* A difference proved (a witness's non-zero combination, or sat) whose
 * values the job could not compute before the wall clock. */
static void proved_without_values(vd_smt_result *res, unsigned ms) {
  vd_smt_result_free(res);
  res->verdict = VD_SMT_NOT_EQUIVALENT;
  res->limit = VD_SMT_LIMIT_NONE;
  snprintf(res->reason, sizeof(res->reason),
           "a counterexample exists; its values were not computed within the wall-clock limit %.3g s", ms / 1e3);
}

/* A job for n_open pairs in mode: its own fresh Z3 context (budget and
 * seed of s), synchronisation, and room for the translated pairs.  On
 * failure *out is NULL and the error is in d. */
static vd_rc job_new(vd_smt *s, size_t n_open, int mode, vd_diag *d, job_t **out) {
  *out = NULL;
  job_t *j = vd_calloc(1, sizeof(*j));
  if (!j) return VD_OOM(d);
  pthread_mutex_init(&j->mu, NULL);
  vd_clock_cond_init(&j->cv);
  j->n = n_open;
  j->mode = mode;
  j->fast = vd_smt_i_fast_path(s);
  vd_rc rc = vd_smt_new(&j->js, d);
  if (rc != VD_OK) {
    job_free(j);
    return rc;
  }
  vd_smt_set_budget(j->js, vd_smt_i_nf_budget(s), vd_smt_i_rlimit(s));
  vd_smt_set_seed(j->js, vd_smt_i_seed(s));
  j->par = vd_malloc(sizeof(vd_term) * (n_open + 1));
  j->single = vd_malloc(sizeof(vd_term) * (n_open + 1));
  if (!j->par || !j->single) {
    job_free(j);
    return VD_OOM(d);
  }
  *out = j;
  return VD_OK;
}

/* The open pairs of s translated into the job's context; a failure is
 * left sticky on j->js. */
static void job_translate(vd_smt *s, job_t *j, const vd_term *par, const vd_term *single, const size_t *open,
                          size_t n_open) {
  /* SOUNDNESS: Z3_translate copies a term into another context with the
   * same structure and symbol names, so the question asked is the same. */
  Z3_context src = vd_smt_i_z3(s), dst = vd_smt_i_z3(j->js);
  /* One translation of every term: Z3_ast_vector_translate shares one
   * cache over the vector, where a Z3_translate per term copied the
   * stage's shared DAG once per term (minutes on a 2048-pair stage). */
  Z3_ast_vector sv = Z3_mk_ast_vector(src);
  if (sv) {
    Z3_ast_vector_inc_ref(src, sv);
    for (size_t i = 0; i < n_open; i++) {
      Z3_ast_vector_push(src, sv, par[open[i]]);
      Z3_ast_vector_push(src, sv, single[open[i]]);
    }
    Z3_ast_vector tv = Z3_get_error_code(src) == Z3_OK ? Z3_ast_vector_translate(src, sv, dst) : NULL;
    if (tv && Z3_get_error_code(dst) == Z3_OK) {
      Z3_ast_vector_inc_ref(dst, tv);
      for (size_t i = 0; i < n_open; i++) {
        j->par[i] = vd_smt_i_keep(j->js, Z3_ast_vector_get(dst, tv, (unsigned)(2 * i)));
        j->single[i] = vd_smt_i_keep(j->js, Z3_ast_vector_get(dst, tv, (unsigned)(2 * i + 1)));
      }
      Z3_ast_vector_dec_ref(dst, tv);
    } else {
      vd_smt_i_keep(j->js, NULL); /* the error, sticky on the job's context */
      if (!vd_smt_i_failed(j->js)) vd_smt_i_fail(j->js, "translation failed");
    }
    Z3_ast_vector_dec_ref(src, sv);
    if (Z3_get_error_code(src) != Z3_OK) {
      vd_smt_i_fail(j->js, Z3_get_error_msg(src, Z3_get_error_code(src)));
      Z3_set_error(src, Z3_OK);
    }
  } else {
    vd_smt_i_fail(j->js, "out of memory (Z3_mk_ast_vector)");
  }
}

/* Runs the job on a helper thread (here when none starts) and waits up to
 * ms (0: no limit), then interrupts it and waits a grace period.  Returns 1
 * when the job was abandoned: res then holds the verdict, and the thread
 * owns j (it frees it when Z3 returns).  *interrupted, *run_stopped: the
 * job was interrupted, by a stop of the run. */
static int job_wait(job_t *j, unsigned ms, vd_smt_result *res, int *interrupted, int *run_stopped) {
  pthread_attr_t at;
  pthread_t th;
  int started = 0;
  /* On a thread even without a wall-clock limit: a stop of the run
   * interrupts the check (wait_done). */
  if (pthread_attr_init(&at) == 0) {
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&th, &at, job_main, j) == 0;
    pthread_attr_destroy(&at);
  }
  if (!started) {
    /* No thread: run here; the budget still bounds it. */
    job_work(j);
    j->done = 1;
    return 0;
  }
  struct timespec dl;
  if (ms) deadline_after(&dl, ms);
  pthread_mutex_lock(&j->mu);
  if (!wait_done(j, ms ? &dl : NULL, 1)) {
    /* Z3_interrupt is the one Z3 call that is safe from another thread. */
    __atomic_store_n(&j->stop, 1, __ATOMIC_RELEASE);
    Z3_interrupt(vd_smt_i_z3(j->js));
    *interrupted = 1;
    *run_stopped = vd_ctl_stopped() != 0;
    unsigned grace = ms / 4 + 200 > 2000 ? 2000 : ms / 4 + 200;
    if (*run_stopped && grace > 1000) grace = 1000;
    deadline_after(&dl, grace);
    if (!wait_done(j, &dl, 0)) {
      j->abandoned = 1;
      vd_smt_i_orphan_add(1);
      /* It may run on for minutes: let it only take idle CPU. */
      pid_t tid = __atomic_load_n(&j->tid, __ATOMIC_ACQUIRE);
      if (tid > 0) setpriority(PRIO_PROCESS, (id_t)tid, 19);
      int found = __atomic_load_n(&j->found, __ATOMIC_ACQUIRE);
      pthread_mutex_unlock(&j->mu);
      if (found) {
        proved_without_values(res, ms);
        return 1;
      }
      res->verdict = VD_SMT_INCONCLUSIVE;
      res->limit = VD_SMT_LIMIT_WALL;
      if (*run_stopped)
        snprintf(res->reason, sizeof(res->reason), "run interrupted (Z3 ignored the interrupt; its check was abandoned)");
      else
        snprintf(res->reason, sizeof(res->reason),
                 "wall-clock limit %.3g s (Z3 ignored the interrupt; its check was abandoned)", ms / 1e3);
      return 1;
    }
  }
  pthread_mutex_unlock(&j->mu);
  return 0;
}

/* The finished job's outcome into res (diff indices mapped back through
 * open), then the job freed. */
static vd_rc job_collect(vd_smt *s, job_t *j, const size_t *open, unsigned ms, int interrupted, int run_stopped,
                         vd_smt_result *res, vd_diag *d) {
  vd_rc rc = j->rc;
  int found = __atomic_load_n(&j->found, __ATOMIC_ACQUIRE);
  if (interrupted && rc != VD_ENOMEM && (rc != VD_OK || j->res.verdict == VD_SMT_INCONCLUSIVE)) {
    /* Z3 stopped at the interruption (as an error, "canceled", or as
     * unknown): the limit, not a failure of the machinery.  A difference
     * proved before it stands. */
    if (found) {
      proved_without_values(res, ms);
    } else {
      res->verdict = VD_SMT_INCONCLUSIVE;
      res->limit = VD_SMT_LIMIT_WALL;
      if (run_stopped) snprintf(res->reason, sizeof(res->reason), "run interrupted");
      else snprintf(res->reason, sizeof(res->reason), "wall-clock limit %.3g s", ms / 1e3);
    }
    job_free(j);
    return VD_OK;
  }
  if (rc == VD_OK) {
    vd_smt_result *r = &j->res;
    res->verdict = r->verdict;
    res->limit = r->limit;
    res->rlimit_used = r->rlimit_used;
    res->n_fast += j->n_simplified;
    memcpy(res->reason, r->reason, sizeof(res->reason));
    if (r->limit == VD_SMT_LIMIT_WALL)
      snprintf(res->reason, sizeof(res->reason), "wall-clock limit %.3g s", ms / 1e3);
    else if (interrupted && r->verdict == VD_SMT_NOT_EQUIVALENT && !r->n_diffs)
      snprintf(res->reason, sizeof(res->reason),
               "a counterexample exists; its values were not computed within the wall-clock limit %.3g s", ms / 1e3);
    res->inputs = r->inputs;
    res->n_inputs = r->n_inputs;
    res->diffs = r->diffs;
    res->n_diffs = r->n_diffs;
    for (size_t i = 0; i < res->n_diffs; i++) res->diffs[i].index = open[res->diffs[i].index];
    r->inputs = NULL;
    r->diffs = NULL;
    r->n_inputs = r->n_diffs = 0;
  } else if (rc == VD_ENOMEM) {
    rc = VD_OOM(d);
  } else {
    if (vd_smt_i_failed(j->js)) vd_smt_i_fail(s, vd_smt_error(j->js)); /* sticky on s too */
    rc = vd_smt_status(j->js, d, "check (solver)");
    if (rc == VD_OK) rc = VD_ERR(d, VD_EINTERNAL, NULL, "check", NULL, "solver failed");
  }
  job_free(j);
  return rc;
}

/* Runs the open pairs through a job of the given mode (see the file
 * comment) with ms of wall clock (0: none).  On return res holds the
 * verdict; its diff indices are positions in par/single.  A witness that
 * finds nothing leaves res INCONCLUSIVE (limit WALL when the clock ended
 * it). */
vd_rc vd_smt_i_chk_run_job(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                           int mode, unsigned ms, vd_smt_result *res, vd_diag *d) {
  job_t *j;
  vd_rc rc = job_new(s, n_open, mode, d, &j);
  if (rc != VD_OK) return rc;
  job_translate(s, j, par, single, open, n_open);
  if (vd_smt_i_failed(j->js)) {
    vd_smt_i_fail(s, vd_smt_error(j->js)); /* the error is the stage's, sticky on s */
    rc = vd_smt_i_chk_out_of_memory(j->js) ? VD_OOM(d) : vd_smt_status(j->js, d, "check (translate)");
    job_free(j);
    return rc;
  }
  int interrupted = 0, run_stopped = 0;
  if (job_wait(j, ms, res, &interrupted, &run_stopped)) return VD_OK;
  return job_collect(s, j, open, ms, interrupted, run_stopped, res, d);
}
