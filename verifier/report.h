/*
 * verifier/report.h - the report formats of a finished run.
 *
 * Each format lives in its own file: text and JSON (report.c), HTML with
 * Graphviz pictures (report_html.c), stage graphs in dot (report_dot.c),
 * JUnit XML (report_junit.c), SARIF (report_sarif.c), GitHub Actions
 * annotations and step summary (report_github.c), the last three built on
 * the shared names and locations of report_ci.c.  All take the findings of the run
 * (verifier/findings.h), so they group and order failures the same way.
 * A path "-" means stdout where a format allows it (JSON).
 */
#ifndef VD_REPORT_H
#define VD_REPORT_H

#include <stdio.h>

#include "findings.h"

/* JSON schema version (docs/report-format.md); raised on any change that
 * removes or retypes a key, with docs/report.schema.json (its
 * schema_version const; tests/e2e/50_ci_outputs.sh checks they agree). */
#define VD_REPORT_SCHEMA_VERSION 2

void vd_report_text(const vd_run *r, const vd_run_opts *o, FILE *f);
vd_rc vd_report_json(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d);
/* --dump-stages: every stage with its class, targets, values (original and
 * reduced shapes) and nodes, in stage order. */
vd_rc vd_report_stages(const vd_run *r, const char *path, vd_diag *d);

/* --dot-stage N FILE: the graph of stage n (any verdict) in Graphviz dot. */
vd_rc vd_report_dot_stage(const vd_run *r, size_t stage, const char *path, vd_diag *d);
/* Writes the dot text of stage i to f; failing stages get the finding's
 * node and their flagged copies highlighted, counterexample values on the
 * edges.  hl_node: stage-local node to mark as diverging, -1 for none. */
void vd_report_dot(const vd_run *r, size_t i, int32_t hl_node, FILE *f);

/* --html FILE: one self-contained page (report_html.c). */
vd_rc vd_report_html(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d);

/* --junit FILE (report_junit.c): vd_report_junit_configs of the one run. */
vd_rc vd_report_junit(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d);

/* One configuration of a CI-facing report: a single verify run is one, a
 * gate run (verdict gate MANIFEST) is one per manifest entry.  The CI
 * writers (JUnit, SARIF, GitHub annotations, step summary) take an array of
 * these so a single run and a gate run share one code path. */
typedef struct vd_report_config {
  const char *name;        /* stable configuration name: the manifest's, or the parallel plan's file name */
  const vd_run *run;       /* borrowed; NULL when the configuration failed before a run (see error) */
  const vd_run_opts *opts; /* borrowed; NULL with run == NULL */
  int exit_code;           /* outcome: 0 equivalent, 1 not equivalent, 2 bad input, 3 inconclusive */
  int expected;            /* expected exit code from a manifest, -1 when none is stated */
  const char *error;       /* one-line message when run == NULL (exit 2 or 3; a gate's PyTorch capture
                              whose DP replicas ran different programs: 1), else NULL */
  int expected_dx;         /* with expected == 1: the diagnosis class one finding must have
                              (vd_diagnosis), VD_DX_NONE (0) for any */
} vd_report_config;

/* The CI writers: every configuration of c[0..n) in one file (one stream).
 * A configuration with run == NULL (it failed before a run) is one failing
 * test case / one result / one annotation carrying its error.  VD_EIO when
 * the file cannot be written, VD_ENOMEM; nothing else.
 *   JUnit XML (report_junit.c): a test suite per configuration; test cases
 *     "outcome", one per finding, one per proven single-device tensor, with
 *     stable names.
 *   SARIF 2.1.0 (report_sarif.c): one run; a result per finding (ruleId =
 *     diagnosis class) placed at the user's source line when the plan says
 *     it, else at the parallel plan and a logical location.
 *   GitHub Actions (report_github.c): workflow-command annotations to
 *     `annotations` (one per finding, file and line when known) and a
 *     Markdown summary appended to summary_path (NULL: none). */
vd_rc vd_report_junit_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d);
vd_rc vd_report_sarif_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d);
vd_rc vd_report_github_configs(const vd_report_config *c, size_t n, FILE *annotations, const char *summary_path,
                               vd_diag *d);
/* The configuration of a single verify run: named after the parallel plan's
 * file name (without its directory), its outcome the run's exit code, no
 * stated expectation. */
void vd_report_config_single(vd_report_config *c, const vd_run *r, const vd_run_opts *o);
/* Inconclusive stages grouped by identical reason (report.c): order (taken)
 * holds the stage indices, group by group, ascending within a group;
 * groups (taken) holds per group {first stage, start, end} in order,
 * groups ordered by their first stage.  skip_counted leaves out the stages
 * that the "not solved" summary lines count (r->skipped).  VD_ENOMEM only. */
vd_rc vd_rep_inconclusive_groups(const vd_run *r, int skip_counted, size_t **order, size_t **groups, size_t *n_groups);

/* The same block escaped for XML text, as the HTML and JUnit reports embed
 * it; nothing when its buffer cannot be allocated. */
void vd_report_xml_text_finding(const vd_run *r, const vd_finding *fd, FILE *f);

#endif
