/*
 * common/ctl.c - run control: the stop word and the progress counters
 * (ctl.h says why they are process-wide).
 */
#include "ctl.h"

/* A signal handler may only touch lock-free atomics. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the stop word must be a lock-free atomic int");
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 || ATOMIC_LLONG_LOCK_FREE == 2, "counters must be lock-free");

static atomic_int stop_word;
static atomic_size_t counters[VD_CTL__COUNT];

int vd_ctl_stopped(void) { return atomic_load_explicit(&stop_word, memory_order_relaxed); }

int vd_ctl_request_stop(int reason) {
  int expected = 0;
  if (atomic_compare_exchange_strong(&stop_word, &expected, reason)) return 0;
  return expected;
}

void vd_ctl_clear_stop(void) { atomic_store(&stop_word, 0); }

void vd_ctl_add(vd_ctl_counter c, size_t n) { atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed); }

void vd_ctl_set(vd_ctl_counter c, size_t v) { atomic_store_explicit(&counters[c], v, memory_order_relaxed); }

size_t vd_ctl_get(vd_ctl_counter c) { return atomic_load_explicit(&counters[c], memory_order_relaxed); }

void vd_ctl_reset(void) {
  for (int i = 0; i < VD_CTL__COUNT; i++) atomic_store_explicit(&counters[i], 0, memory_order_relaxed);
}
