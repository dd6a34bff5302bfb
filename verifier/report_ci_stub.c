/*
 * verifier/report_ci_stub.c - PLACEHOLDER, REPLACED AT MERGE BY CIOUT'S
 * WRITERS: delete this file when the branch with the real JUnit, SARIF and
 * GitHub writers of vd_report_config arrays (vd_report_junit_configs,
 * vd_report_sarif_configs, vd_report_github_configs, declared in
 * verifier/report.h there) is merged.
 *
 * Until then `verdict gate --junit/--sarif/--github` write the least that is
 * still true: one JUnit test case per configuration (failing when not as
 * expected), a SARIF 2.1.0 log with one result per configuration not as
 * expected, and one GitHub annotation per such configuration plus a
 * Markdown table for the step summary.  No finding detail, no source
 * locations: those are ciout's.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "report.h"

static const char *word(int code) {
  return code == 0 ? "EQUIVALENT" : code == 1 ? "NOT EQUIVALENT" : code == 2 ? "BAD INPUT" : "INCONCLUSIVE";
}

/* Whether one finding of the run has class dx. */
static int has_class(const vd_run *r, int dx) {
  vd_findings fs;
  vd_diag d;
  vd_diag_clear(&d);
  if (!r || vd_findings_build(r, &fs, &d) != VD_OK) return 0;
  int has = 0;
  for (size_t k = 0; k < fs.n; k++) has |= (int)fs.v[k].diagnosis == dx;
  vd_findings_free(&fs);
  return has;
}

static int as_expected(const vd_report_config *c) {
  if (c->expected < 0) return c->exit_code == 0;
  if (c->exit_code != c->expected) return 0;
  return c->expected != 1 || c->expected_dx == VD_DX_NONE || has_class(c->run, c->expected_dx);
}

vd_rc vd_report_junit_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the JUnit report");
  size_t fail = 0;
  for (size_t i = 0; i < n; i++) fail += !as_expected(&c[i]);
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"verdict gate\" tests=\"%zu\" failures=\"%zu\">\n",
          n, fail);
  for (size_t i = 0; i < n; i++) {
    fputs("  <testcase classname=\"verdict.configurations\" name=\"", f);
    vd_cli_xml_str(f, c[i].name);
    fputs("\"", f);
    if (as_expected(&c[i])) {
      fputs("/>\n", f);
      continue;
    }
    fprintf(f, "><failure message=\"%s", word(c[i].exit_code));
    if (c[i].expected >= 0) fprintf(f, " (expected %s)", word(c[i].expected));
    fputs("\">", f);
    if (c[i].error) vd_cli_xml_str(f, c[i].error);
    fputs("</failure></testcase>\n", f);
  }
  fputs("</testsuite>\n", f);
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JUnit report failed");
  return VD_OK;
}

vd_rc vd_report_sarif_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the SARIF report");
  fprintf(f, "{\"version\":\"2.1.0\",\"$schema\":\"https://json.schemastore.org/sarif-2.1.0.json\",\"runs\":[{\"tool\":"
             "{\"driver\":{\"name\":\"verdict\",\"version\":\"%s\"}},\"results\":[",
          VD_VERSION_STRING);
  int k = 0;
  for (size_t i = 0; i < n; i++) {
    if (as_expected(&c[i])) continue;
    char msg[900];
    snprintf(msg, sizeof(msg), "configuration %s: %s%s%s", c[i].name, word(c[i].exit_code), c[i].error ? ": " : "",
             c[i].error ? c[i].error : "");
    fprintf(f, "%s{\"ruleId\":\"verdict/configuration\",\"level\":\"error\",\"message\":{\"text\":", k++ ? "," : "");
    vd_cli_json_str(f, msg);
    fputs("}}", f);
  }
  fputs("]}]}\n", f);
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the SARIF report failed");
  return VD_OK;
}

vd_rc vd_report_github_configs(const vd_report_config *c, size_t n, FILE *annotations, const char *summary_path,
                               vd_diag *d) {
  for (size_t i = 0; i < n; i++)
    if (!as_expected(&c[i]))
      fprintf(annotations, "::error title=verdict %s::%s\n", c[i].name, word(c[i].exit_code));
  if (!summary_path) return VD_OK;
  FILE *f = fopen(summary_path, "a");
  if (!f) VD_FAIL(d, VD_EIO, summary_path, NULL, NULL, "cannot append to the step summary");
  fputs("| configuration | outcome | as expected |\n|---|---|---|\n", f);
  for (size_t i = 0; i < n; i++)
    fprintf(f, "| %s | %s | %s |\n", c[i].name, word(c[i].exit_code), as_expected(&c[i]) ? "yes" : "no");
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, summary_path, NULL, NULL, "writing the step summary failed");
  return VD_OK;
}
