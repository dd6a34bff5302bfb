/*
 * common/clock.c - monotonic time for reports and limits (common/clock.h).
 */
#include "clock.h"

#include <time.h>

double vd_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double vd_clock_ms(void) { return vd_clock_s() * 1e3; }

void vd_clock_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
}
