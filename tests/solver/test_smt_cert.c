/*
 * tests/solver/test_smt_cert.c - the SMT-LIB2 printer of certificates
 * (solver/smt_cert.c): the script is unsat exactly when the pairs are equal,
 * symbols whose quoted names would coincide stay distinct, a kernel applied
 * at two arities is two declarations, numerals are exact, the goal marker
 * is there (recheck's vacuity check cuts at it), and the cross-check flags a
 * false equality only when asked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../solver/smt.h"
#include "../support/files.h"
#include "../support/smt_cases.h"

/* The script of pairs (par[i], single[i]) and Z3's answer on it. */
static void script(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, char **text, char *answer,
                   size_t an) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  vd_smt_cert_stats st;
  vd_diag d;
  vd_diag_clear(&d);
  vd_rc rc = vd_smt_write_obligation(s, par, single, n, "test\nsecond line", f, &st, &d);
  fclose(f);
  if (rc != VD_OK) fail_msg("write: %s", d.msg);
  assert_int_equal(vd_smt_run_script(buf, 10000, answer, an, &d), VD_OK);
  *text = buf;
}

/* script() on the pairs: Z3 must answer want, and the script contain
 * needle (when not NULL). */
static void expect_answer(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, const char *want,
                          const char *needle) {
  char *text = NULL, ans[300];
  script(s, par, single, n, &text, ans, sizeof(ans));
  assert_string_equal(ans, want);
  if (needle && !strstr(text, needle)) fail_msg("script lacks '%s':\n%s", needle, text);
  free(text);
}

/* cvc5's answer on a script (the binary recheck runs; Debian's cvc5 is in
 * the Makefile's DEB_PACKAGES). */
static void cvc5_answer(const char *text, char *answer, size_t an) {
  char path[] = "/tmp/verdict-test-cert-XXXXXX";
  tfile_temp_text(path, text);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "cvc5 --lang=smt2 --tlimit=20000 %s 2>&1", path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  answer[0] = 0;
  char line[512];
  while (fgets(line, sizeof(line), p))
    if (line[0] != '\n') snprintf(answer, an, "%s", line);
  pclose(p);
  unlink(path);
  size_t l = strlen(answer);
  while (l && (answer[l - 1] == '\n' || answer[l - 1] == '\r')) answer[--l] = 0;
}

static void test_equal_is_unsat(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term x = vd_smt_var(s, "x[0]"), y = vd_smt_var(s, "y[0]");
  vd_term a = vd_smt_add(s, vd_smt_mul(s, vd_smt_num_rat(s, "-3/7"), x), vd_smt_uf(s, "exp", 1, &y));
  vd_term b = vd_smt_add(s, vd_smt_uf(s, "exp", 1, &y), vd_smt_div(s, vd_smt_mul(s, vd_smt_num_int(s, -3), x),
                                                                    vd_smt_num_int(s, 7)));
  char *text = NULL, ans[300];
  script(s, &a, &b, 1, &text, ans, sizeof(ans));
  assert_string_equal(ans, "unsat");
  assert_non_null(strstr(text, "; test\n; second line\n(set-logic ALL)\n"));
  assert_non_null(strstr(text, "(declare-fun |k!exp| (Real) Real)"));
  assert_non_null(strstr(text, "(/ 3.0 7.0)"));
  assert_non_null(strstr(text, "\n; goal\n"));
  /* cvc5 reads it too: its logic ALL has an exp of its own, which the
   * kernel's declaration must not shadow (|k!exp|) */
  char c5[600];
  cvc5_answer(text, c5, sizeof(c5));
  assert_string_equal(c5, "unsat");
  free(text);
  /* a different scale: sat */
  vd_term c = vd_smt_add(s, vd_smt_mul(s, vd_smt_num_rat(s, "3/7"), x), vd_smt_uf(s, "exp", 1, &y));
  expect_answer(s, &a, &c, 1, "sat", NULL);
  vd_smt_free(s);
}

/* "a|b" and "a_b" both print as |a_b| before disambiguation: they must stay
 * two symbols, or a = b would be "proved". */
static void test_names_stay_distinct(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term p = vd_smt_var(s, "a|b"), q = vd_smt_var(s, "a_b"), r = vd_smt_var(s, "a!b");
  char *text = NULL, ans[300];
  expect_answer(s, &p, &q, 1, "sat", "|a_b!vd2|");
  expect_answer(s, &q, &r, 1, "sat", NULL);
  /* one kernel name at two arities: two functions */
  vd_term args[2] = {p, q};
  vd_term f1 = vd_smt_uf(s, "pow", 1, args), f2 = vd_smt_uf(s, "pow", 2, args);
  script(s, &f1, &f2, 1, &text, ans, sizeof(ans));
  assert_string_equal(ans, "sat");
  /* sorted by (name, signature): "(Real Real)" before "(Real)" */
  const char *two = strstr(text, "(declare-fun |k!pow| (Real Real) Real)");
  const char *one = strstr(text, "(declare-fun |k!pow!vd2| (Real) Real)");
  assert_non_null(two);
  assert_non_null(one);
  assert_true(two < one);
  free(text);
  vd_smt_free(s);
}

/* Several pairs: one differing pair makes the script sat; Int symbols and
 * ite are written; no pair at all (identical terms) is unsat. */
static void test_pairs_and_ints(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term id = vd_smt_int_var(s, "ids[0]"), x = vd_smt_var(s, "x"), y = vd_smt_var(s, "y");
  vd_term sel = vd_smt_ite(s, vd_smt_eq(s, id, vd_smt_int_num(s, 1)), x, y);
  vd_term sel2 = vd_smt_ite(s, vd_smt_eq(s, vd_smt_int_num(s, 1), id), x, y);
  vd_term par[2] = {sel, vd_smt_add(s, x, y)}, single[2] = {sel2, vd_smt_add(s, y, x)};
  expect_answer(s, par, single, 2, "unsat", "(declare-fun |ids[0]| () Int)");
  single[1] = vd_smt_sub(s, y, x);
  expect_answer(s, par, single, 2, "sat", NULL);
  /* an Int side against a Real side is compared as reals (well-sorted) */
  vd_term one = vd_smt_num_int(s, 1);
  expect_answer(s, &id, &one, 1, "sat", "(to_real |ids[0]|)");
  expect_answer(s, &x, &x, 1, "unsat", "(assert false)");
  vd_smt_free(s);
}

/* The cross-check: on a true equality the normal form's proof is confirmed
 * by Z3 (cross = AGREE); off, nothing is recorded. */
static void test_cross_check_agrees(void **state) {
  (void)state;
  vd_smt *s = ts_new_smt();
  vd_term x = vd_smt_var(s, "x"), y = vd_smt_var(s, "y");
  vd_term a = vd_smt_mul(s, vd_smt_add(s, x, y), vd_smt_add(s, x, y));
  vd_term b = vd_smt_add(s, vd_smt_add(s, vd_smt_mul(s, x, x), vd_smt_mul(s, vd_smt_num_int(s, 2), vd_smt_mul(s, x, y))),
                         vd_smt_mul(s, y, y));
  vd_smt_result r;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_check(s, &a, &b, 1, &r, &d), VD_OK);
  assert_int_equal(r.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(r.cross, VD_SMT_CROSS_NONE);
  vd_smt_result_free(&r);
  vd_smt_set_cross_check(s, 1);
  size_t before = vd_smt_cross_disagreements();
  assert_int_equal(vd_smt_check(s, &a, &b, 1, &r, &d), VD_OK);
  assert_int_equal(r.verdict, VD_SMT_EQUIVALENT);
  assert_int_equal(r.cross, VD_SMT_CROSS_AGREE);
  assert_int_equal(vd_smt_cross_disagreements(), before);
  vd_smt_result_free(&r);
  vd_smt_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_equal_is_unsat),
      cmocka_unit_test(test_names_stay_distinct),
      cmocka_unit_test(test_pairs_and_ints),
      cmocka_unit_test(test_cross_check_agrees),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
