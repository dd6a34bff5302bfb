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
