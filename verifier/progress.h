/*
 * verifier/progress.h - progress lines on stderr during a run.
 *
 * On a terminal: one line redrawn in place that names the phase (loading,
 * graphs, lineage, cutting stages, solving, counterexamples) with the time
 * so far; while solving also the classes done and an ETA, shown only once a
 * tenth of the classes is done (stage costs vary by orders of magnitude, so
 * an early rate promises too much).  Not on a terminal (CI logs): nothing
 * for the first VD_PROGRESS_QUIET_S seconds, so short runs stay silent;
 * then one line per phase change and one every VD_PROGRESS_EVERY_S seconds
 * while solving.  -q turns it off.  Progress never changes a result.
 */
#ifndef VD_PROGRESS_H
#define VD_PROGRESS_H

#include <stddef.h>

#define VD_PROGRESS_QUIET_S 5.0
#define VD_PROGRESS_EVERY_S 15.0

typedef struct vd_progress {
  int on, tty;
  int drawn;        /* a terminal line is on screen (needs a newline at the end) */
  double t_start, t_last;
  const char *phase;
} vd_progress;

void vd_progress_init(vd_progress *p, int quiet);
/* A serial phase begins. */
void vd_progress_phase(vd_progress *p, const char *phase);
/* Solving: done of total classes; t0 when solving began.  Call from one
 * thread at a time (the caller holds a critical section). */
void vd_progress_solve(vd_progress *p, size_t done, size_t total, double t0);
/* The run is over: ends the terminal line. */
void vd_progress_end(vd_progress *p);

#endif
