/*
 * tests/verifier/test_report_ci.c - the CI writers (verifier/report_ci.c,
 * report_junit.c, report_sarif.c, report_github.c) on configurations that
 * have no run (bad input before a run, exit 2; an inconclusive one that
 * stopped early, exit 3): one failing test case, one SARIF result and
 * notification, one annotation each; GitHub's escaping of %, CR, LF in
 * messages and of ':' and ',' in properties; the source-location parser.
 * Real runs are covered end to end by tests/e2e/50_ci_outputs.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../verifier/report.h"
#include "../../verifier/report_ci.h"
#include "../support/files.h"

static size_t count(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
  return n;
}

static vd_report_config cfgs[2];

static void setup_cfgs(void) {
  memset(cfgs, 0, sizeof(cfgs));
  cfgs[0].name = "tp2,pp2: a";
  cfgs[0].exit_code = 2;
  cfgs[0].expected = -1;
  cfgs[0].error = "p.plan: node 7: in[0]: 100% wrong\nsecond line";
  cfgs[1].name = "moe";
  cfgs[1].exit_code = 3;
  cfgs[1].expected = 0;
  cfgs[1].error = "stopped by the deadline";
}

/* What WRITE makes of the two configurations in a new temporary file (PATH:
 * its template; the caller frees the text and unlinks the file). */
static char *written(vd_rc (*write)(const vd_report_config *, size_t, const char *, vd_diag *), char *path) {
  setup_cfgs();
  tfile_temp(path);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(write(cfgs, 2, path, &d), VD_OK);
  char *x = tfile_slurp(path);
  assert_non_null(x);
  return x;
}

static void test_parse_loc(void **st) {
  (void)st;
  char f[64];
  long ln = 0;
  assert_int_equal(vd_report_ci_parse_loc("examples/torch/m.py:184 aten.add", f, sizeof(f), &ln), 1);
  assert_string_equal(f, "examples/torch/m.py");
  assert_int_equal(ln, 184);
  assert_int_equal(vd_report_ci_parse_loc("gpt.py:84", f, sizeof(f), &ln), 1);
  assert_string_equal(f, "gpt.py");
  /* the last colon of the first word splits: a drive or a colon in a name stays in the file */
  assert_int_equal(vd_report_ci_parse_loc("C:/a:b.py:9 x", f, sizeof(f), &ln), 1);
  assert_string_equal(f, "C:/a:b.py");
  assert_int_equal(ln, 9);
  assert_int_equal(vd_report_ci_parse_loc("layers.1.attn.o.all_reduce", f, sizeof(f), &ln), 0);
  assert_int_equal(vd_report_ci_parse_loc("after gpt.py:84", f, sizeof(f), &ln), 0);
  assert_int_equal(vd_report_ci_parse_loc("m.py:0", f, sizeof(f), &ln), 0);
  assert_int_equal(vd_report_ci_parse_loc("m.py:12x", f, sizeof(f), &ln), 0);
  assert_int_equal(vd_report_ci_parse_loc(":12", f, sizeof(f), &ln), 0);
  assert_int_equal(vd_report_ci_parse_loc("a-very-long-file-name-that-does-not-fit-the-buffer-at-all.py:3", f, 16, &ln), 0);
}

static void test_junit_no_run(void **st) {
  (void)st;
  char path[] = "/tmp/vd_ci_junit_XXXXXX";
  char *x = written(vd_report_junit_configs, path);
  /* one suite each, one "outcome" case each: an <error> for bad input and for inconclusive */
  assert_int_equal(count(x, "<testsuite "), 2);
  assert_int_equal(count(x, "<testcase "), 2);
  assert_non_null(strstr(x, "<testsuites name=\"verdict\" tests=\"2\" failures=\"0\" errors=\"2\""));
  assert_non_null(strstr(x, "<error type=\"BAD_INPUT\" message=\"BAD INPUT: p.plan: node 7: in[0]: 100% wrong"));
  assert_non_null(strstr(x, "<error type=\"INCONCLUSIVE\" message=\"INCONCLUSIVE: stopped by the deadline\""));
  assert_non_null(strstr(x, "classname=\"verdict.tp2,pp2: a\" name=\"outcome\""));
  free(x);
  unlink(path);
}

static void test_sarif_no_run(void **st) {
  (void)st;
  char path[] = "/tmp/vd_ci_sarif_XXXXXX";
  char *x = written(vd_report_sarif_configs, path);
  assert_non_null(strstr(x, "\"version\": \"2.1.0\""));
  assert_int_equal(count(x, "\"ruleId\": \"BAD_INPUT\""), 1);
  assert_int_equal(count(x, "\"ruleId\": \"INCONCLUSIVE\""), 1);
  assert_int_equal(count(x, "\"executionSuccessful\": false"), 1);
  assert_int_equal(count(x, "\"toolExecutionNotifications\""), 2);
  /* the newline of the message is JSON-escaped, not raw */
  assert_non_null(strstr(x, "100% wrong\\nsecond line"));
  free(x);
  unlink(path);
}

static void test_github_escaping(void **st) {
  (void)st;
  setup_cfgs();
  char apath[] = "/tmp/vd_ci_ann_XXXXXX", spath[] = "/tmp/vd_ci_sum_XXXXXX";
  tfile_temp(apath);
  tfile_temp_text(spath, "earlier step\n");
  FILE *a = fopen(apath, "w");
  assert_non_null(a);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_report_github_configs(cfgs, 2, a, spath, &d), VD_OK);
  fclose(a);
  char *x = tfile_slurp(apath);
  assert_non_null(x);
  /* title property: ':' and ',' escaped; message: '%' and LF escaped; one line each */
  assert_string_equal(x, "::error title=verdict BAD INPUT (tp2%2Cpp2%3A a)::BAD INPUT: p.plan: node 7: in[0]: 100%25 "
                         "wrong%0Asecond line\n"
                         "::warning title=verdict INCONCLUSIVE (moe)::INCONCLUSIVE: stopped by the deadline\n");
  free(x);
  char *s = tfile_slurp(spath);
  assert_non_null(s);
  /* appended after what an earlier step wrote; Markdown specials escaped */
  assert_int_equal(strncmp(s, "earlier step\n## verdict: 0 of 2 configurations as expected", 58), 0);
  assert_non_null(strstr(s, "| tp2,pp2: a | BAD INPUT | EQUIVALENT | - | **no** |"));
  assert_non_null(strstr(s, "in\\[0\\]"));
  free(s);
  unlink(apath);
  unlink(spath);
}

static void test_unwritable(void **st) {
  (void)st;
  setup_cfgs();
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_report_junit_configs(cfgs, 1, "/nonexistent-dir/j.xml", &d), VD_EIO);
  assert_int_equal(vd_report_sarif_configs(cfgs, 1, "/nonexistent-dir/s.sarif", &d), VD_EIO);
  assert_int_equal(vd_report_github_configs(cfgs, 1, NULL, "/nonexistent-dir/summary.md", &d), VD_EIO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_loc),
      cmocka_unit_test(test_junit_no_run),
      cmocka_unit_test(test_sarif_no_run),
      cmocka_unit_test(test_github_escaping),
      cmocka_unit_test(test_unwritable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
