/*
 * tests/fuzz/fuzz_plan_reader.c - libFuzzer target for the plan reader.
 *
 * Any byte string must give VD_OK or an error with a diag, never a crash, a
 * hang, a leak or unbounded memory (libFuzzer's -rss_limit_mb/-malloc_limit_mb
 * catch the last).  A plan that reads must also validate again and be freed
 * cleanly.  Seeds: tests/fuzz/seeds (written by tests/fuzz/make_seeds.c);
 * crashing inputs found are kept in tests/fuzz/regressions.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../plans/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  vd_plan_t p;
  vd_diag d;
  vd_diag_clear(&d);
  vd_rc rc = vd_plan_read_buffer((const char *)data, size, "fuzz.plan", &p, &d);
  if (rc == VD_OK) {
    vd_diag d2;
    vd_diag_clear(&d2);
    if (vd_plan_validate(&p, "fuzz.plan", &d2) != VD_OK) abort();
  } else if (d.rc != rc || d.msg[0] == '\0') {
    abort(); /* every failure must come with its one-line message */
  }
  vd_plan_free(&p);
  return 0;
}
