/*
 * tests/support/smt_cases.c - solver problems shared by the solver tests
 * (see smt_cases.h).  The terms are made in the order the tests made them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>

#include "smt_cases.h"

vd_smt *ts_new_smt(void) {
  vd_smt *s = NULL;
  assert_int_equal(vd_smt_new(&s, NULL), VD_OK);
  return s;
}

void ts_expect_verdict(vd_smt *s, const vd_term *a, const vd_term *b, size_t n, vd_smt_verdict want) {
  vd_smt_result r;
  assert_int_equal(vd_smt_check(s, a, b, n, &r, NULL), VD_OK);
  assert_int_equal(r.verdict, want);
  vd_smt_result_free(&r);
}

void ts_motzkin(vd_smt *s, const char *names_fmt, vd_term *lhs, vd_term *rhs) {
  char nm[64];
  vd_term x[6], terms[2];
  for (int i = 0; i < 6; i++) {
    snprintf(nm, sizeof(nm), names_fmt, i);
    x[i] = vd_smt_var(s, nm);
  }
  for (int k = 0; k < 2; k++) {
    vd_term X = k ? vd_smt_add(s, x[3], x[2]) : x[0], Y = x[3 * k + 1], Z = x[3 * k + 2];
    vd_term X2 = vd_smt_mul(s, X, X), Y2 = vd_smt_mul(s, Y, Y), Z2 = vd_smt_mul(s, Z, Z);
    vd_term f1[3] = {X2, X2, Y2}, f2[3] = {X2, Y2, Y2}, f3[3] = {Z2, Z2, Z2}, f4[4] = {vd_smt_num_int(s, -3), X2, Y2, Z2};
    vd_term t4[4] = {vd_smt_prod(s, 3, f1), vd_smt_prod(s, 3, f2), vd_smt_prod(s, 3, f3), vd_smt_prod(s, 4, f4)};
    terms[k] = vd_smt_sum(s, 4, t4);
  }
  vd_term poly = vd_smt_sum(s, 2, terms);
  vd_term a = vd_smt_var(s, "a"), b = vd_smt_var(s, "b");
  *lhs = vd_smt_ite(s, vd_smt_le(s, poly, vd_smt_num_int(s, -1)), b, a);
  *rhs = a;
}
