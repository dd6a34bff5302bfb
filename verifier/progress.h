/*
 * verifier/progress.h - progress lines on stderr during a run, the
 * heartbeat, and the run's deadline.
 *
 * Design (the simplest sound one we found): the phases' loops only bump
 * the counters of common/ctl.h and poll its stop word; they never print.
 * One heartbeat thread (pthreads, started by vd_progress_init, joined by
 * vd_progress_end) is the only writer of progress lines besides phase
 * changes and notes, and every write, from either thread, happens under one
 * mutex, so lines never interleave.  The thread wakes every
 * VD_PROGRESS_TICK_S seconds: it requests a stop when the deadline has
 * passed (vd_ctl_request_stop(VD_STOP_DEADLINE)), and prints the current
 * phase with its counter:
 *  - on a terminal: one line redrawn in place, at most every second, with
 *    the time so far (while solving: classes done, and an ETA once a tenth
 *    of the classes is done: stage costs vary by orders of magnitude, so an
 *    early rate promises too much);
 *  - not on a terminal (CI logs): nothing for the first VD_PROGRESS_QUIET_S
 *    seconds, so short runs stay silent; then one line per phase change and
 *    a heartbeat line at least every VD_PROGRESS_EVERY_S seconds in every
 *    phase, whatever the phase's loops are doing.
 * -q turns the lines off (the thread still keeps the deadline).  Progress
 * never changes a result; the deadline only stops the run (INCONCLUSIVE).
 */
#ifndef VD_PROGRESS_H
#define VD_PROGRESS_H

#include <pthread.h>
#include <stddef.h>

#include "../common/ctl.h"

#define VD_PROGRESS_QUIET_S 5.0
#define VD_PROGRESS_EVERY_S 5.0
#define VD_PROGRESS_TICK_S 0.2

/* Why a run was stopped (the stop word of common/ctl.h). */
enum { VD_STOP_NONE = 0, VD_STOP_SIGINT, VD_STOP_SIGTERM, VD_STOP_DEADLINE };
/* "SIGINT (Ctrl-C)", "SIGTERM", "the deadline"; "" for none. */
const char *vd_stop_reason_name(int reason);

typedef struct vd_progress {
  int on, tty;
  int drawn;        /* a terminal line is on screen (needs a newline before other output) */
  double t_start, t_last, deadline; /* deadline: absolute (vd_clock_s), 0 = none */
  const char *phase;                /* under mu */
  int counter;                      /* vd_ctl_counter of the phase, -1 = none (under mu) */
  const char *unit;                 /* "stages cut" (under mu) */
  int counter2;                     /* a second count of the phase, -1 = none (under mu) */
  const char *unit2;
  size_t total;                     /* solving: classes to solve (under mu) */
  double t_phase;                   /* when the phase began (under mu) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  int started, quit;
} vd_progress;

/* Starts the heartbeat thread.  deadline_s > 0: the run's whole deadline in
 * seconds from now.  Without a thread (pthread_create failed) there are no
 * heartbeats and no deadline; the run goes on. */
void vd_progress_init(vd_progress *p, int quiet, double deadline_s);
/* A phase begins; counter (a vd_ctl_counter, or -1) is the phase's count,
 * named by unit ("stages cut"); total > 0 shows "done/total" (solving). */
void vd_progress_phase(vd_progress *p, const char *phase, int counter, const char *unit, size_t total);
/* A second count shown with the current phase's (after it). */
void vd_progress_second(vd_progress *p, int counter, const char *unit);
/* The current phase's name (for an interrupted run's report). */
const char *vd_progress_current(vd_progress *p);
/* Prints one line on stderr between progress lines ("verdict: " prefix
 * included by the caller).  printf-like. */
void vd_progress_note(vd_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The run is over: stops and joins the thread, ends the terminal line. */
void vd_progress_end(vd_progress *p);

#endif
