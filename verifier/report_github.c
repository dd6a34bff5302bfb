/*
 * verifier/report_github.c - configurations for GitHub Actions (--github):
 * workflow-command annotations on a stream (stdout in a verify run) and a
 * Markdown step summary appended to a file (the one $GITHUB_STEP_SUMMARY
 * names, or --summary FILE).
 *
 * Annotations: one per finding, "::error file=F,line=N,title=T::MESSAGE"
 * when the finding's node carries the user's source line (report_ci.c),
 * without file and line otherwise; "::notice" for the findings of a
 * configuration expected not to be equivalent; one "::warning" per
 * inconclusive configuration and one "::error" per configuration that
 * failed before a run or ended otherwise than expected.  GitHub's escaping:
 * in the message %, CR and LF become %25, %0D, %0A; in a property value
 * also ':' and ',' become %3A and %2C.  Each annotation is one line.
 *
 * Summary: a table of the configurations (outcome, expectation, findings),
 * then per configuration with findings one numbered line per finding with
 * its place in the code, footprint and hint, and the command that
 * reproduces it.  Text from plans is escaped for Markdown (backslash
 * before punctuation that Markdown or HTML would read, newlines as
 * blanks).  The file is appended to, as GitHub expects of a step summary.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "cli.h"
#include "report.h"
#include "report_ci.h"

/* GitHub workflow-command escaping; prop: a property value (also ':' and ','). */
static void gh_escape(FILE *f, const char *s, int prop) {
  for (; *s; s++) {
    switch (*s) {
    case '%': fputs("%25", f); break;
    case '\r': fputs("%0D", f); break;
    case '\n': fputs("%0A", f); break;
    case ':': prop ? fputs("%3A", f) : fputc(':', f); break;
    case ',': prop ? fputs("%2C", f) : fputc(',', f); break;
    default: fputc(*s, f);
    }
  }
}

static void annotation(FILE *f, const char *level, const char *file, long line, const char *title, const char *msg) {
  fprintf(f, "::%s ", level);
  if (file && file[0]) {
    fputs("file=", f);
    gh_escape(f, file, 1);
    if (line > 0) fprintf(f, ",line=%ld", line);
    fputc(',', f);
  }
  fputs("title=", f);
  gh_escape(f, title, 1);
  fputs("::", f);
  gh_escape(f, msg, 0);
  fputc('\n', f);
}

/* Markdown text: punctuation Markdown or inline HTML would interpret gets a
 * backslash; line breaks become blanks. */
static void md(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '\n' || *s == '\r') fputc(' ', f);
    else if (strchr("\\`*_[]<>|#!~&$", *s)) fputc('\\', f), fputc(*s, f);
    else fputc(*s, f);
  }
}

typedef struct {
  vd_findings fs;
  vd_ci_finding *cf;
  int built;
} cfg_facts;

static vd_rc facts(const vd_report_config *c, cfg_facts *x, vd_diag *d) {
  memset(x, 0, sizeof(*x));
  if (!c->run) return VD_OK;
  VD_CHECK(vd_findings_build(c->run, &x->fs, d));
  vd_rc rc = vd_report_ci_findings(c->run, &x->fs, &x->cf, d);
  if (rc != VD_OK) {
    vd_findings_free(&x->fs);
    return rc;
  }
  x->built = 1;
  return VD_OK;
}

static void facts_free(cfg_facts *x) {
  if (x->built) {
    vd_free(x->cf);
    vd_findings_free(&x->fs);
  }
  memset(x, 0, sizeof(*x));
}

static void annotate(FILE *f, const vd_report_config *c, const cfg_facts *x) {
  char title[600], msg[2400], line[1200];
  vd_report_ci_outcome_line(c, x->fs.n, line, sizeof(line));
  int expected_fail = c->exit_code == 1 && vd_report_ci_expected(c) == 1;
  for (size_t k = 0; k < x->fs.n; k++) {
    const vd_ci_finding *cf = &x->cf[k];
    snprintf(title, sizeof(title), "verdict %s (%s)", vd_diagnosis_names[cf->fd->diagnosis], c->name);
    snprintf(msg, sizeof(msg), "%s\n%s\nWhat to look for: %s", cf->title, cf->footprint,
             vd_findings_hint(cf->fd->diagnosis));
    annotation(f, expected_fail ? "notice" : "error", cf->file, cf->line, title, msg);
  }
  if (vd_report_ci_as_expected(c) || (c->exit_code == 1 && x->fs.n)) return;
  snprintf(title, sizeof(title), "verdict %s (%s)", vd_report_ci_outcome(c->exit_code), c->name);
  annotation(f, c->exit_code == 3 ? "warning" : "error", NULL, 0, title, line);
}

static void summary_table(FILE *f, const vd_report_config *c, const cfg_facts *x, size_t n) {
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) ok += vd_report_ci_as_expected(&c[i]);
  fprintf(f, "## verdict: %zu of %zu configuration%s as expected\n\n", ok, n, n == 1 ? "" : "s");
  fputs("| configuration | outcome | expected | findings | as expected |\n|---|---|---|---|---|\n", f);
  for (size_t i = 0; i < n; i++) {
    fputs("| ", f);
    md(f, c[i].name);
    fprintf(f, " | %s | %s | ", vd_report_ci_outcome(c[i].exit_code), vd_report_ci_outcome(vd_report_ci_expected(&c[i])));
    if (c[i].run) fprintf(f, "%zu", x[i].fs.n);
    else fputs("-", f);
    fprintf(f, " | %s |\n", vd_report_ci_as_expected(&c[i]) ? "yes" : "**no**");
  }
  fputc('\n', f);
}

static void summary_config(FILE *f, const vd_report_config *c, const cfg_facts *x) {
  char line[1200];
  if (vd_report_ci_as_expected(c) && !x->fs.n) return;
  vd_report_ci_outcome_line(c, x->fs.n, line, sizeof(line));
  fputs("### ", f);
  md(f, c->name);
  fputs(": ", f);
  md(f, line);
  fputs("\n\n", f);
  for (size_t k = 0; k < x->fs.n; k++) {
    const vd_ci_finding *cf = &x->cf[k];
    fprintf(f, "%zu. **%s** at ", k + 1, vd_diagnosis_names[cf->fd->diagnosis]);
    md(f, cf->logical);
    if (cf->file[0]) {
      fputs(" in ", f);
      md(f, cf->file);
      if (cf->line > 0) fprintf(f, " line %ld", cf->line);
    }
    fputs("  \n   ", f);
    md(f, cf->footprint);
    fputs("  \n   What to look for: ", f);
    md(f, vd_findings_hint(cf->fd->diagnosis));
    fputs("\n", f);
  }
  if (c->opts) {
    fputs("\nReproduce: verdict \\-\\-sm ", f);
    md(f, c->opts->sm);
    fputs(" \\-\\-pm ", f);
    md(f, c->opts->pm);
    fputs("\n", f);
  }
  fputs("\n", f);
}

vd_rc vd_report_github_configs(const vd_report_config *c, size_t n, FILE *annotations, const char *summary_path,
                               vd_diag *d) {
  cfg_facts *x = vd_calloc(n ? n : 1, sizeof(cfg_facts));
  if (!x) return VD_OOM(d);
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < n && rc == VD_OK; i++) rc = facts(&c[i], &x[i], d);
  if (rc == VD_OK && annotations) {
    for (size_t i = 0; i < n; i++) annotate(annotations, &c[i], &x[i]);
    fflush(annotations);
  }
  if (rc == VD_OK && summary_path) {
    FILE *f = fopen(summary_path, "a");
    if (!f) {
      rc = VD_ERR(d, VD_EIO, summary_path, NULL, NULL, "cannot append to the step summary");
    } else {
      summary_table(f, c, x, n);
      for (size_t i = 0; i < n; i++) summary_config(f, &c[i], &x[i]);
      if (fclose(f) != 0) rc = VD_ERR(d, VD_EIO, summary_path, NULL, NULL, "writing the step summary failed");
    }
  }
  for (size_t i = 0; i < n; i++) facts_free(&x[i]);
  vd_free(x);
  return rc;
}
