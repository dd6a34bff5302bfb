/*
 * tests/support/cases.h - naming the case a table-driven test is on.
 *
 * A test that loops over a table of cases fails at an assertion inside the
 * shared helper, and cmocka's message gives only that assertion's line.  The
 * test names each case with tc_begin before running it and calls tc_end
 * after the loop; tc_report, registered as the test's teardown (cmocka runs
 * it after a failure too), prints the case a failed test stopped in.
 */
#ifndef VD_TEST_CASES_H
#define VD_TEST_CASES_H

/* The case about to run, printf-style (kept until the next tc_begin). */
void tc_begin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Every case passed: nothing to report. */
void tc_end(void);
/* cmocka teardown: prints "stopped in case: ..." when a case was begun and
 * tc_end did not follow (the test failed inside it).  Returns 0. */
int tc_report(void **state);

#endif
