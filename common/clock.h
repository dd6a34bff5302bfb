/*
 * common/clock.h - the one monotonic clock of verdict.
 *
 * Phase times, per-stage solve times and the solver's time checks all read
 * CLOCK_MONOTONIC through these functions, so every figure in a report
 * comes from the same clock (wall-clock jumps cannot make a time negative).
 * Times are for reports and limits only: no verdict depends on them except
 * through an explicit timeout, which yields INCONCLUSIVE.
 */
#ifndef VD_CLOCK_H
#define VD_CLOCK_H

#include <pthread.h>

/* Seconds / milliseconds since an arbitrary fixed point (monotonic). */
double vd_clock_s(void);
double vd_clock_ms(void);

/* Initialises cv so that pthread_cond_timedwait reads its deadline on
 * CLOCK_MONOTONIC (a deadline from clock_gettime(CLOCK_MONOTONIC)): a step of
 * the wall clock neither shortens nor stretches the wait. */
void vd_clock_cond_init(pthread_cond_t *cv);

#endif
