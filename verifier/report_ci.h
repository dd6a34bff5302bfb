/*
 * verifier/report_ci.h - what the CI-facing writers (JUnit report_junit.c,
 * SARIF report_sarif.c, GitHub annotations and step summary
 * report_github.c) say the same way: a finding's stable name and its place
 * in the user's code, the status of each single-device tensor's proofs,
 * and a configuration's outcome against its expectation.
 *
 * Stable names carry no node id, stage id, count or microbatch: CI systems
 * key a test's history by its name, and a name must survive another thread
 * count, a renumbered plan (a node added elsewhere) and a re-run.  They are
 * built from the diagnosis class, the operator and the node's source name
 * (its " [mb N]" suffix taken out), or the tensor a structural entry names.
 *
 * Private to verifier/ (names vd_report_ci_*); docs/report-format.md
 * describes the outputs.
 */
#ifndef VD_REPORT_CI_H
#define VD_REPORT_CI_H

#include <stdio.h>

#include "report.h"

/* Outcome of one test-like item. */
typedef enum { VD_CI_PASS, VD_CI_FAILURE, VD_CI_ERROR, VD_CI_SKIPPED } vd_ci_status;

typedef struct {
  const vd_finding *fd;  /* borrowed from the vd_findings it was built from */
  char name[400];        /* stable: "SCHEDULE at reduce_scatter 'embed.weight.grad'" */
  char title[512];       /* the text report's title (with node id) */
  char logical[320];     /* logical location: "reduce_scatter 'embed.weight.grad'", "tensor 'x'" */
  char footprint[512];   /* ranks, microbatches, layers, counts */
  char file[512];        /* the user's source file as recorded ("examples/torch/m.py"), "" if unknown */
  long line;             /* its line (>= 1) when file is set, else 0 */
} vd_ci_finding;

/* Stable facts of every finding of fs (same order).  *out is allocated
 * (vd_free); VD_ENOMEM only.  Equal names get " (2)", " (3)" in order. */
vd_rc vd_report_ci_findings(const vd_run *r, const vd_findings *fs, vd_ci_finding **out, vd_diag *d);

/* The proofs of one single-device tensor: every stage with a target on it.
 * status: FAILURE if one failed, else ERROR if one is inconclusive on its
 * own (a limit, the solver, an unsupported operator), else SKIPPED if some
 * were left unsolved because of a failure elsewhere, else PASS. */
typedef struct {
  const char *name;      /* single plan's tensor name (borrowed), or "" */
  int64_t id;            /* its file id */
  vd_ci_status status;
  size_t n_stages, n_equiv, n_fail, n_error, n_skipped;
  const char *reason;    /* ERROR / SKIPPED: why (borrowed, static or the stage's reason) */
  const char *finding;   /* FAILURE: stable name of the first failing stage's finding, or NULL */
  double seconds;
} vd_ci_tensor;

/* One entry per single tensor that some stage targets, in single-plan
 * order.  Nothing when the run has no stage verdicts.  VD_ENOMEM only.
 * Cost: O(stages x targets + findings' stages). */
vd_rc vd_report_ci_tensors(const vd_run *r, const vd_findings *fs, const vd_ci_finding *cf, vd_ci_tensor **out,
                           size_t *n, vd_diag *d);

/* "examples/torch/m.py:184 aten.add" or "m.py:184" -> file and line; 0 when
 * s does not start with FILE:LINE (FILE without blanks). */
int vd_report_ci_parse_loc(const char *s, char *file, size_t n_file, long *line);

/* The configuration's expected exit code (its stated one, else 0) and
 * whether the outcome matches it. */
int vd_report_ci_expected(const vd_report_config *c);
int vd_report_ci_as_expected(const vd_report_config *c);
/* "EQUIVALENT", "NOT EQUIVALENT", "BAD INPUT", "INCONCLUSIVE" for an exit code. */
const char *vd_report_ci_outcome(int exit_code);
/* One line on an unexpected or failed outcome ("NOT EQUIVALENT: 2 findings";
 * the bad input's message; the first inconclusive reason). */
void vd_report_ci_outcome_line(const vd_report_config *c, size_t n_findings, char *buf, size_t n);
/* One sentence per diagnosis class, for rule descriptions. */
const char *vd_report_ci_class_text(vd_diagnosis dx);

#endif
