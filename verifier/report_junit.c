/*
 * verifier/report_junit.c - configurations as JUnit XML (--junit FILE), for
 * the CI systems that read it (Jenkins, GitLab; GitHub Actions only through
 * a third-party action: it does not read JUnit by itself).
 *
 * One <testsuite> per configuration (a single verify run is one), named
 * after it.  In it, with stable names (report_ci.h: no node id, stage id or
 * count, so a test's history survives another run):
 *   - "outcome" (classname verdict.CONFIG): passes when the configuration
 *     ends as expected (equivalent unless a manifest says otherwise); a
 *     <failure> when not equivalent (or equivalent against an expected
 *     failure), an <error> when inconclusive or bad input;
 *   - "finding: DIAGNOSIS at OP 'NAME'" (classname verdict.CONFIG.findings)
 *     per finding: a <failure type="DIAGNOSIS"> with the finding's text
 *     block; passing (the block in <system-out>) when the configuration is
 *     expected not to be equivalent and is not;
 *   - "proof of 'TENSOR'" (classname verdict.CONFIG.tensors) per
 *     single-device tensor that a stage proves: passing when every such
 *     stage is equivalent, a <failure> when one failed (it names the
 *     finding), <skipped> when stages were left unsolved because of a
 *     failure elsewhere, an <error> only when a stage is inconclusive on
 *     its own (a limit, the solver, an unsupported operator).
 * CONFIG in a classname has its dots replaced by '_' (CI systems split
 * classnames at dots).  docs/report-format.md; the schema our output
 * follows is tests/ci/junit.xsd, which keeps to Jenkins' conventions.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "../common/outfile.h"
#include "cli.h"
#include "report.h"
#include "report_ci.h"

/* Counts and cases of one configuration, built before its suite is written
 * (the suite's attributes come first). */
typedef struct {
  vd_findings fs;
  vd_ci_finding *cf;
  vd_ci_tensor *tn;
  size_t n_tn;
  size_t tests, failures, errors, skipped;
  double secs;
} suite;

static void suite_free(suite *s) {
  if (s->cf) vd_findings_free(&s->fs);
  vd_free(s->cf);
  vd_free(s->tn);
  memset(s, 0, sizeof(*s));
}

static vd_rc suite_build(const vd_report_config *c, suite *s, vd_diag *d) {
  memset(s, 0, sizeof(*s));
  s->tests = 1;
  if (!vd_report_ci_as_expected(c)) {
    if (c->exit_code == 2 || c->exit_code == 3) s->errors++;
    else s->failures++;
  }
  if (!c->run) return VD_OK;
  const vd_run *r = c->run;
  for (int i = 0; i < VD_RUN_PHASES; i++) s->secs += r->phase_s[i];
  VD_CHECK(vd_findings_build(r, &s->fs, d));
  vd_rc rc = vd_report_ci_findings(r, &s->fs, &s->cf, d);
  if (rc != VD_OK) {
    vd_findings_free(&s->fs);
    return rc;
  }
  rc = vd_report_ci_tensors(r, &s->fs, s->cf, &s->tn, &s->n_tn, d);
  if (rc != VD_OK) {
    suite_free(s);
    return rc;
  }
  int expected_fail = c->exit_code == 1 && vd_report_ci_expected(c) == 1;
  s->tests += s->fs.n + s->n_tn;
  if (!expected_fail) s->failures += s->fs.n;
  for (size_t i = 0; i < s->n_tn; i++) {
    s->failures += s->tn[i].status == VD_CI_FAILURE && !expected_fail;
    s->errors += s->tn[i].status == VD_CI_ERROR;
    s->skipped += s->tn[i].status == VD_CI_SKIPPED;
  }
  return VD_OK;
}

/* The classname: "verdict." + the configuration name with dots as '_'. */
static void put_classname(FILE *f, const char *cfg, const char *suffix) {
  fputs("verdict.", f);
  size_t n = strlen(cfg);
  char *tmp = vd_malloc(n + 1);
  if (tmp) {
    for (size_t i = 0; i <= n; i++) tmp[i] = cfg[i] == '.' ? '_' : cfg[i];
    vd_cli_xml_str(f, tmp);
    vd_free(tmp);
  }
  fputs(suffix, f);
}

static void case_open(FILE *f, const char *cfg, const char *suffix, const char *name_prefix, const char *name,
                      double secs) {
  fputs("    <testcase classname=\"", f);
  put_classname(f, cfg, suffix);
  fputs("\" name=\"", f);
  vd_cli_xml_str(f, name_prefix);
  vd_cli_xml_str(f, name);
  fprintf(f, "\" time=\"%.3f\"", secs < 0 ? 0.0 : secs);
}

static void outcome_case(FILE *f, const vd_report_config *c, const suite *s) {
  char line[1200];
  vd_report_ci_outcome_line(c, s->fs.n, line, sizeof(line));
  case_open(f, c->name, "", "", "outcome", s->secs);
  if (vd_report_ci_as_expected(c)) {
    fputs(">\n      <system-out>", f);
    vd_cli_xml_str(f, line);
    fputs("</system-out>\n    </testcase>\n", f);
    return;
  }
  const char *el = c->exit_code == 2 || c->exit_code == 3 ? "error" : "failure";
  const char *type = c->exit_code == 2 ? "BAD_INPUT" : c->exit_code == 3 ? "INCONCLUSIVE"
                     : c->exit_code == 1 ? "NOT_EQUIVALENT" : "UNEXPECTED_OUTCOME";
  fprintf(f, ">\n      <%s type=\"%s\" message=\"", el, type);
  vd_cli_xml_str(f, line);
  fprintf(f, "\"/>\n    </testcase>\n");
}

static void finding_case(FILE *f, const vd_report_config *c, const vd_ci_finding *cf, int expected_fail) {
  case_open(f, c->name, ".findings", "finding: ", cf->name, 0);
  if (expected_fail) {
    fputs(">\n      <system-out>", f);
  } else {
    fprintf(f, ">\n      <failure type=\"%s\" message=\"", vd_diagnosis_names[cf->fd->diagnosis]);
    vd_cli_xml_str(f, cf->title);
    fputs("\">", f);
  }
  vd_report_xml_text_finding(c->run, cf->fd, f);
  fputs(expected_fail ? "</system-out>\n    </testcase>\n" : "</failure>\n    </testcase>\n", f);
}

static void tensor_case(FILE *f, const vd_report_config *c, const vd_ci_tensor *t, int expected_fail) {
  char nm[300], msg[1200];
  if (t->name[0]) vd_text_fmt(nm, sizeof(nm), "'%s'", t->name);
  else vd_text_fmt(nm, sizeof(nm), "tensor t%lld", (long long)t->id);
  case_open(f, c->name, ".tensors", "proof of ", nm, t->seconds);
  switch (t->status) {
  case VD_CI_PASS: fputs("/>\n", f); return;
  case VD_CI_FAILURE:
    vd_text_fmt(msg, sizeof(msg), "%zu of %zu stages not equivalent%s%s", t->n_fail, t->n_stages,
             t->finding ? "; finding: " : "", t->finding ? t->finding : "");
    fputs(expected_fail ? ">\n      <system-out>" : ">\n      <failure type=\"NOT_EQUIVALENT\" message=\"", f);
    vd_cli_xml_str(f, msg);
    fputs(expected_fail ? "</system-out>\n    </testcase>\n" : "\"/>\n    </testcase>\n", f);
    return;
  case VD_CI_ERROR:
    vd_text_fmt(msg, sizeof(msg), "%zu of %zu stages inconclusive; first: %s", t->n_error, t->n_stages, t->reason);
    fputs(">\n      <error type=\"INCONCLUSIVE\" message=\"", f);
    break;
  case VD_CI_SKIPPED:
    vd_text_fmt(msg, sizeof(msg), "%zu of %zu stages %s", t->n_skipped, t->n_stages, t->reason);
    fputs(">\n      <skipped message=\"", f);
    break;
  }
  vd_cli_xml_str(f, msg);
  fputs("\"/>\n    </testcase>\n", f);
}

static void write_suite(FILE *f, const vd_report_config *c, const suite *s) {
  fputs("  <testsuite name=\"", f);
  vd_cli_xml_str(f, c->name);
  fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"%zu\" time=\"%.3f\">\n", s->tests,
          s->failures, s->errors, s->skipped, s->secs);
  fprintf(f, "    <properties>\n      <property name=\"outcome\" value=\"%s\"/>\n"
             "      <property name=\"expected\" value=\"%s\"/>\n      <property name=\"exit_code\" value=\"%d\"/>\n"
             "      <property name=\"tool_version\" value=\"%s\"/>\n",
          vd_report_ci_outcome(c->exit_code), vd_report_ci_outcome(vd_report_ci_expected(c)), c->exit_code,
          VD_VERSION_STRING);
  if (c->opts) {
    fputs("      <property name=\"single\" value=\"", f);
    vd_cli_xml_str(f, c->opts->sm);
    fputs("\"/>\n      <property name=\"parallel\" value=\"", f);
    vd_cli_xml_str(f, c->opts->pm);
    fputs("\"/>\n", f);
  }
  fputs("    </properties>\n", f);
  outcome_case(f, c, s);
  int expected_fail = c->exit_code == 1 && vd_report_ci_expected(c) == 1;
  for (size_t k = 0; k < s->fs.n; k++) finding_case(f, c, &s->cf[k], expected_fail);
  for (size_t i = 0; i < s->n_tn; i++) tensor_case(f, c, &s->tn[i], expected_fail);
  fputs("  </testsuite>\n", f);
}

vd_rc vd_report_junit_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d) {
  suite *s = vd_calloc(n ? n : 1, sizeof(suite));
  if (!s) return VD_OOM(d);
  vd_rc rc = VD_OK;
  size_t built = 0;
  size_t tests = 0, failures = 0, errors = 0;
  double secs = 0;
  for (; built < n && rc == VD_OK; built++) {
    rc = suite_build(&c[built], &s[built], d);
    tests += s[built].tests, failures += s[built].failures, errors += s[built].errors, secs += s[built].secs;
  }
  vd_outfile of = {0}; /* common/outfile.h */
  if (rc == VD_OK) rc = vd_outfile_open(&of, path, 0, d);
  if (rc == VD_OK) {
    FILE *f = of.fp;
    /* <testsuites> carries no skipped count: Jenkins' schema has none there. */
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<testsuites name=\"verdict\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" time=\"%.3f\">\n", tests,
            failures, errors, secs);
    for (size_t i = 0; i < n; i++) write_suite(f, &c[i], &s[i]);
    fputs("</testsuites>\n", f);
    rc = vd_outfile_commit(&of, d);
  }
  for (size_t i = 0; i < built; i++) suite_free(&s[i]);
  vd_free(s);
  return rc;
}

vd_rc vd_report_junit(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  vd_report_config c;
  vd_report_config_single(&c, r, o);
  return vd_report_junit_configs(&c, 1, path, d);
}
