/*
 * verifier/report_junit.c - the run as JUnit XML (--junit FILE), so that
 * Jenkins, GitLab and GitHub Actions show the gate's result natively.
 *
 * One test suite.  One failing test case per finding (classname
 * verdict.findings), whose <failure> carries the finding's text block as
 * the text report prints it.  One test case per stage class group
 * (classname verdict.stages; a class is the stages proven by one proof,
 * stages/canon.c) that is not part of a finding: passing when its verdict
 * is EQUIVALENT, an <error> when INCONCLUSIVE.  So tests = findings +
 * classes not failing, failures = findings, errors = inconclusive classes
 * (docs/report-format.md says how the counts relate to the JSON).
 */
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "cli.h"
#include "report.h"

vd_rc vd_report_junit(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  vd_findings fs;
  VD_CHECK(vd_findings_build(r, &fs, d));
  size_t n = r->verdicts ? r->set.n_stages : 0;
  /* Class groups: representative -> stage count; the first stage of each. */
  size_t *count = vd_calloc(n ? n : 1, sizeof(size_t));
  if (!count) {
    vd_findings_free(&fs);
    return VD_OOM(d);
  }
  size_t n_pass = 0, n_err = 0;
  for (size_t i = 0; i < n; i++) {
    const vd_stage *st = &r->set.stages[i];
    count[st->canon_class >= 0 ? (size_t)st->canon_class : i]++;
  }
  vd_rep_class_counts(r, &n_pass, &n_err);
  FILE *f = fopen(path, "w");
  if (!f) {
    vd_free(count);
    vd_findings_free(&fs);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the JUnit report");
  }
  double secs = 0;
  for (int i = 0; i < VD_RUN_PHASES; i++) secs += r->phase_s[i];
  /* A limit reached (vd_run.limits) is an error test case of its own: a
   * run stopped by a limit must not look green. */
  n_err += r->n_limits;
  size_t tests = fs.n + n_pass + n_err;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f, "<testsuites name=\"verdict\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" time=\"%.3f\">\n", tests, fs.n,
          n_err, secs);
  fprintf(f, "  <testsuite name=\"");
  vd_cli_xml_str(f, o->pm);
  fprintf(f, " against ");
  vd_cli_xml_str(f, o->sm);
  fprintf(f, "\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" skipped=\"0\" time=\"%.3f\">\n", tests, fs.n, n_err, secs);
  fprintf(f, "    <properties><property name=\"verdict\" value=\"%s\"/><property name=\"tool_version\" value=\"%s\"/>"
             "<property name=\"stages\" value=\"%zu\"/></properties>\n",
          vd_run_exit_code(r) == 0 ? "EQUIVALENT" : vd_run_exit_code(r) == 1 ? "NOT EQUIVALENT" : "INCONCLUSIVE",
          VD_VERSION_STRING, r->set.n_stages);
  char title[512];
  for (size_t k = 0; k < fs.n; k++) {
    const vd_finding *fd = &fs.v[k];
    vd_rep_fmt_title(title, sizeof(title), r, fd);
    fprintf(f, "    <testcase classname=\"verdict.findings\" name=\"finding %zu: ", k + 1);
    vd_cli_xml_str(f, title);
    fprintf(f, "\" time=\"0\">\n      <failure type=\"%s\" message=\"", vd_diagnosis_names[fd->diagnosis]);
    vd_cli_xml_str(f, title);
    fputs("\">", f);
    vd_report_xml_text_finding(r, fd, f);
    fputs("</failure>\n    </testcase>\n", f);
  }
  char line[512];
  for (size_t c = 0; c < n; c++) {
    const vd_stage *cs = &r->set.stages[c];
    if ((cs->canon_class >= 0 && (size_t)cs->canon_class != c) || r->verdicts[c].verdict == VD_SMT_NOT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[c];
    const vd_stage_target *tg = st->n_targets ? &st->targets[0] : NULL;
    const char *tname = "";
    if (tg) tname = vd_plan_s(&r->sp, r->sp.tensors[r->sg.values[st->vals[tg->svalue].value].tensor].name);
    snprintf(line, sizeof(line), "class of stage %zu (%zu stage%s; first target '%s')", c, count[c],
             count[c] == 1 ? "" : "s", tname);
    fprintf(f, "    <testcase classname=\"verdict.stages\" name=\"");
    vd_cli_xml_str(f, line);
    fprintf(f, "\" time=\"%.3f\"", r->verdicts[c].ms / 1e3);
    if (r->verdicts[c].verdict == VD_SMT_EQUIVALENT) {
      fputs("/>\n", f);
    } else {
      fputs(">\n      <error type=\"INCONCLUSIVE\" message=\"", f);
      vd_cli_xml_str(f, r->verdicts[c].reason);
      fputs("\"/>\n    </testcase>\n", f);
    }
  }
  for (size_t k = 0; k < r->n_limits; k++) {
    snprintf(line, sizeof(line), "limit %zu", k + 1);
    fprintf(f, "    <testcase classname=\"verdict.limits\" name=\"");
    vd_cli_xml_str(f, line);
    fputs("\" time=\"0\">\n      <error type=\"INCONCLUSIVE\" message=\"", f);
    vd_cli_xml_str(f, r->limits[k].detail);
    fputs("\"/>\n    </testcase>\n", f);
  }
  fputs("  </testsuite>\n</testsuites>\n", f);
  vd_free(count);
  vd_findings_free(&fs);
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JUnit report failed");
  return VD_OK;
}
