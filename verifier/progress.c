/*
 * verifier/progress.c - progress lines, the heartbeat thread and the
 * deadline (progress.h explains the design).
 */
#include "progress.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"

const char *vd_stop_reason_name(int reason) {
  switch (reason) {
  case VD_STOP_SIGINT: return "SIGINT (Ctrl-C)";
  case VD_STOP_SIGTERM: return "SIGTERM";
  case VD_STOP_DEADLINE: return "the --deadline";
  default: return reason ? "a stop request" : "";
  }
}

/* Called with p->mu held. */
static void emit(vd_progress *p, const char *line) {
  if (p->tty) {
    fprintf(stderr, "\r%-78.78s", line);
    p->drawn = 1;
  } else {
    fprintf(stderr, "verdict: %s\n", line);
  }
  fflush(stderr);
}

/* "[12 s] cutting stages: 1,234 stages cut"; called with p->mu held. */
static void status_line(vd_progress *p, double now, char *line, size_t n) {
  double el = now - p->t_start;
  size_t at = (size_t)snprintf(line, n, "[%.0f s] %s", el, p->phase);
  if (at >= n || p->counter < 0) {
    if (at < n) snprintf(line + at, n - at, " ...");
    return;
  }
  size_t done = vd_ctl_get((vd_ctl_counter)p->counter);
  if (!p->total) {
    if (p->counter2 >= 0)
      snprintf(line + at, n - at, ": %zu %s, %zu %s so far", done, p->unit, vd_ctl_get((vd_ctl_counter)p->counter2),
               p->unit2);
    else
      snprintf(line + at, n - at, ": %zu %s so far", done, p->unit);
    return;
  }
  if (done > p->total) done = p->total;
  double sel = now - p->t_phase;
  char eta[64] = "ETA after a tenth";
  if (done >= p->total) snprintf(eta, sizeof(eta), "done");
  else if (done * 10 >= p->total && done > 0 && sel >= 1.0)
    snprintf(eta, sizeof(eta), "ETA ~%.0f s (rough)", sel / (double)done * (double)(p->total - done));
  snprintf(line + at, n - at, ": %zu/%zu %s (%.0f%%), %s", done, p->total, p->unit,
           100.0 * (double)done / (double)p->total, eta);
}

static void *heartbeat(void *arg) {
  vd_progress *p = arg;
  pthread_mutex_lock(&p->mu);
  while (!p->quit) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = (long)(VD_PROGRESS_TICK_S * 1e9);
    ts.tv_nsec += ns;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    int rc = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    if (p->quit) break;
    if (rc != ETIMEDOUT && rc != 0) continue;
    double now = vd_clock_s();
    if (p->deadline > 0 && now >= p->deadline) vd_ctl_request_stop(VD_STOP_DEADLINE);
    if (!p->on || !p->phase) continue;
    double el = now - p->t_start;
    int due = p->tty ? now - p->t_last >= 1.0 : el >= VD_PROGRESS_QUIET_S && now - p->t_last >= VD_PROGRESS_EVERY_S;
    if (!due) continue;
    char line[200];
    status_line(p, now, line, sizeof(line));
    emit(p, line);
    p->t_last = now;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

void vd_progress_init(vd_progress *p, int quiet, double deadline_s) {
  memset(p, 0, sizeof(*p));
  p->on = !quiet;
  p->tty = isatty(STDERR_FILENO);
  p->t_start = vd_clock_s();
  p->deadline = deadline_s > 0 ? p->t_start + deadline_s : 0;
  p->phase = NULL;
  p->counter = -1;
  p->counter2 = -1;
  p->unit = "";
  pthread_mutex_init(&p->mu, NULL);
  vd_clock_cond_init(&p->cv);
  p->started = pthread_create(&p->th, NULL, heartbeat, p) == 0;
}

void vd_progress_phase(vd_progress *p, const char *phase, int counter, const char *unit, size_t total) {
  pthread_mutex_lock(&p->mu);
  double now = vd_clock_s();
  p->phase = phase;
  p->counter = counter;
  p->unit = unit ? unit : "";
  p->counter2 = -1;
  p->total = total;
  p->t_phase = now;
  if (p->on && (p->tty || now - p->t_start >= VD_PROGRESS_QUIET_S)) {
    char line[200];
    status_line(p, now, line, sizeof(line));
    emit(p, line);
    p->t_last = now;
  }
  pthread_mutex_unlock(&p->mu);
}

void vd_progress_second(vd_progress *p, int counter, const char *unit) {
  pthread_mutex_lock(&p->mu);
  p->counter2 = counter;
  p->unit2 = unit ? unit : "";
  pthread_mutex_unlock(&p->mu);
}

const char *vd_progress_current(vd_progress *p) {
  pthread_mutex_lock(&p->mu);
  const char *s = p->phase ? p->phase : "starting";
  pthread_mutex_unlock(&p->mu);
  return s;
}

void vd_progress_note(vd_progress *p, const char *fmt, ...) {
  pthread_mutex_lock(&p->mu);
  if (p->drawn) {
    fputc('\n', stderr);
    p->drawn = 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fflush(stderr);
  pthread_mutex_unlock(&p->mu);
}

void vd_progress_end(vd_progress *p) {
  pthread_mutex_lock(&p->mu);
  p->quit = 1;
  pthread_cond_signal(&p->cv);
  pthread_mutex_unlock(&p->mu);
  if (p->started) pthread_join(p->th, NULL);
  p->started = 0;
  if (p->on && p->tty && p->drawn) {
    fputc('\n', stderr);
    fflush(stderr);
  }
  p->drawn = 0;
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->mu);
}
