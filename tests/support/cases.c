/*
 * tests/support/cases.c - the current case of a table-driven test, printed
 * by the teardown when the test failed inside it (cases.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "cases.h"

/* The one mutable global of the test support: cmocka runs tests one at a
 * time, and only the test thread writes it. */
static char current[256];

void tc_begin(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(current, sizeof(current), fmt, ap);
  va_end(ap);
}

void tc_end(void) { current[0] = 0; }

int tc_report(void **state) {
  (void)state;
  if (current[0]) fprintf(stderr, "stopped in case: %s\n", current);
  current[0] = 0;
  return 0;
}
