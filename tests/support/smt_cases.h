/*
 * tests/support/smt_cases.h - solver problems more than one test file poses,
 * and the solver context they are posed in.
 */
#ifndef VD_TEST_SMT_CASES_H
#define VD_TEST_SMT_CASES_H

#include "../../solver/smt.h"

/* A new solver context with default options; fails the test when it cannot
 * be made.  The caller frees it (vd_smt_free). */
vd_smt *ts_new_smt(void);

/* Checks the n pairs (a[i], b[i]) in s and asserts the verdict is want. */
void ts_expect_verdict(vd_smt *s, const vd_term *a, const vd_term *b, size_t n, vd_smt_verdict want);

/* A true but hard nonlinear identity: *lhs = ite(p <= -1, b, a) and *rhs = a,
 * where p is a sum of two Motzkin polynomials x^4y^2 + x^2y^4 + z^6 -
 * 3x^2y^2z^2 (>= 0, but not a sum of squares), beyond Z3 in a minute.  The
 * six variables are named by names_fmt (one %d, 0 to 5), then a and b. */
void ts_motzkin(vd_smt *s, const char *names_fmt, vd_term *lhs, vd_term *rhs);

#endif
