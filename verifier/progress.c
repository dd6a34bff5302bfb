/*
 * verifier/progress.c - progress lines on stderr (progress.h).
 */
#include "progress.h"

#include <stdio.h>
#include <unistd.h>

#include "../common/clock.h"

void vd_progress_init(vd_progress *p, int quiet) {
  p->on = !quiet;
  p->tty = isatty(STDERR_FILENO);
  p->drawn = 0;
  p->t_start = vd_clock_s();
  p->t_last = 0;
  p->phase = "";
}

static void emit(vd_progress *p, const char *line) {
  if (p->tty) {
    fprintf(stderr, "\r%-78.78s", line);
    p->drawn = 1;
  } else {
    fprintf(stderr, "verdict: %s\n", line);
  }
  fflush(stderr);
}

void vd_progress_phase(vd_progress *p, const char *phase) {
  if (!p->on) return;
  p->phase = phase;
  double now = vd_clock_s(), el = now - p->t_start;
  if (!p->tty && el < VD_PROGRESS_QUIET_S) return;
  char line[160];
  snprintf(line, sizeof(line), "[%.0f s] %s ...", el, phase);
  emit(p, line);
  p->t_last = now;
}

void vd_progress_solve(vd_progress *p, size_t done, size_t total, double t0) {
  if (!p->on) return;
  double now = vd_clock_s(), el = now - p->t_start;
  if (p->tty ? now - p->t_last < 0.2 && done < total : el < VD_PROGRESS_QUIET_S || now - p->t_last < VD_PROGRESS_EVERY_S)
    return;
  double sel = now - t0;
  char eta[64] = "ETA after a tenth";
  if (done >= total) snprintf(eta, sizeof(eta), "done");
  else if (done * 10 >= total && done > 0 && sel >= 1.0)
    snprintf(eta, sizeof(eta), "ETA ~%.0f s (rough)", sel / (double)done * (double)(total - done));
  char line[160];
  snprintf(line, sizeof(line), "[%.0f s] solving: %zu/%zu stage classes (%.0f%%), %s", el, done, total,
           total ? 100.0 * (double)done / (double)total : 100.0, eta);
  emit(p, line);
  p->t_last = now;
}

void vd_progress_end(vd_progress *p) {
  if (p->on && p->tty && p->drawn) {
    fputc('\n', stderr);
    fflush(stderr);
  }
  p->drawn = 0;
}
