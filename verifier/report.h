/*
 * verifier/report.h - the report formats of a finished run.
 *
 * Each format lives in its own file: text and JSON (report.c), HTML with
 * Graphviz pictures (report_html.c), stage graphs in dot (report_dot.c),
 * JUnit XML (report_junit.c).  All take the findings of the run
 * (verifier/findings.h), so they group and order failures the same way.
 * A path "-" means stdout where a format allows it (JSON).
 */
#ifndef VD_REPORT_H
#define VD_REPORT_H

#include <stdio.h>

#include "findings.h"

/* JSON schema version (docs/report-format.md); raised on any change that
 * removes or retypes a key. */
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

/* --junit FILE (report_junit.c). */
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

/* Shared by the formats (report.c): a stage failure block and a structural
 * entry, as the text report prints them. */
void vd_report_text_stage(const vd_run *r, size_t i, FILE *f);
void vd_report_text_issue(const vd_run *r, const vd_issue *is, FILE *f);
/* A finding's block: title, footprint, stages, hint, representative. */
void vd_report_text_finding(const vd_run *r, const vd_finding *fd, FILE *f);
/* The same block escaped for XML text, as the HTML and JUnit reports embed
 * it; nothing when its buffer cannot be allocated. */
void vd_report_xml_text_finding(const vd_run *r, const vd_finding *fd, FILE *f);

#endif
