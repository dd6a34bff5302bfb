/*
 * common/ctl.h - run control: a stop request and progress counters that the
 * long loops of the lower modules (lineage/, stages/, solver/) poll and
 * bump, and that the verifier reads and sets (verifier/progress.c).
 *
 * Why a process-wide state and not a pointer passed down: the stop request
 * is set from a signal handler (SIGINT, SIGTERM) and by the deadline, and a
 * signal handler can reach nothing but globals; passing the counters down
 * would change the signature of every long function for a figure that never
 * changes a result.  So this file holds the one exception to "no mutable
 * globals" besides the allocator's fault counter: one stop word and a few
 * counters, all lock-free atomics (checked at compile time), so that
 *  - setting the stop word is async-signal-safe (vd_ctl_request_stop),
 *  - polling it costs one relaxed load (vd_ctl_stopped), cheap enough for
 *    a loop to poll every few thousand items,
 *  - the counters are written by one thread or added to from many, and read
 *    by the heartbeat thread without a lock (a figure read a little late is
 *    fine: nothing but the progress line reads them).
 *
 * What a stop means: a loop that sees vd_ctl_stopped() returns VD_ECANCELED
 * as soon as it can, leaving its partial results for its caller to free; a
 * solver check in flight is interrupted (solver/smt_check.c).  A stop never
 * turns into a verdict of equivalence: the verifier reports an interrupted
 * run as INCONCLUSIVE (verifier/run.c).
 *
 * One run at a time per process: vd_ctl_reset clears the counters (not the
 * stop word: a signal received between runs still stops the next one).
 *
 * Layer: common/.
 */
#ifndef VD_CTL_H
#define VD_CTL_H

#include <stdatomic.h>
#include <stddef.h>

/* Progress counters, one per kind of work; the heartbeat names them. */
typedef enum {
  VD_CTL_LIN_PIECES,   /* lineage pieces collected (lineage/lineage.c) */
  VD_CTL_LIN_CHECKED,  /* lineages validated (lineage/lineage.c) */
  VD_CTL_INFER_VALUES, /* parallel values with a lineage so far (lineage/infer.c) */
  VD_CTL_CUT_LINEAGES, /* lineages cut into stages (stages/cut.c) */
  VD_CTL_STAGES_CUT,   /* stages cut (verifier/run.c, the cut's hook) */
  VD_CTL_CLASSES_DONE, /* stage classes solved (verifier/run.c) */
  VD_CTL_CEX_DONE,     /* counterexamples computed (verifier/run.c) */
  VD_CTL__COUNT
} vd_ctl_counter;

/* Whether a stop was requested; the value is the requester's reason code
 * (the verifier's; 0: none). */
int vd_ctl_stopped(void);
/* Requests a stop with reason != 0; the first reason stays.  Async-signal-
 * safe.  Returns the reason in force before the call (0: none). */
int vd_ctl_request_stop(int reason);
/* Clears the stop word (tests; a new run in the same process). */
void vd_ctl_clear_stop(void);

void vd_ctl_add(vd_ctl_counter c, size_t n);
void vd_ctl_set(vd_ctl_counter c, size_t v);
size_t vd_ctl_get(vd_ctl_counter c);
/* Every counter to 0. */
void vd_ctl_reset(void);

#endif
