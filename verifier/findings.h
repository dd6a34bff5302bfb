/*
 * verifier/findings.h - failures grouped by root cause, and the facts about
 * stages and nodes that every report format (text, JSON, HTML, JUnit)
 * prints the same way.
 *
 * A finding is one root cause: the failing stages that share their first
 * diverging parallel node up to the renaming of ranks, microbatches and
 * layers (same symmetry class and same stage-local node, or same operator
 * and same source name once the layer number is taken out) and their
 * diagnosis; or the structural issues of one kind at one such node (or one
 * tensor); plus what follows from a structural issue (a failing stage whose
 * diverging node is the issue's node; DATAFLOW issues after a BATCH one).
 * Findings are ordered by the topological position of their node in the
 * parallel graph, so the first is the earliest cause.  docs/report-format.md.
 */
#ifndef VD_FINDINGS_H
#define VD_FINDINGS_H

#include <stdio.h>

#include "run.h"

typedef struct {
  vd_diagnosis diagnosis;
  int structural;          /* 1: its representative is a structural issue */
  size_t rep;              /* representative: stage index or issue index */
  /* The diverging (or structural issue's) node: plan node index of the
   * parallel plan (single plan when side == 0), -1 if none; its stage-local
   * index in the representative stage (-1 for a structural finding). */
  int64_t pnode;
  uint8_t side;
  int32_t local_node;
  int64_t node_rank;       /* global rank of the node in the representative, -1 if none */
  int32_t node_mb;
  /* A SCALE named by the scaling that applied its factor (its origin): the
   * parallel plan node the failing stages read the factor from (a reducer),
   * as context; -1 otherwise. */
  int64_t via_pnode, via_rank;
  int32_t via_mb;
  char why[256];           /* why that node: "attribute 'eps' is ...", "produces the first disagreeing copy" */
  size_t *stages; size_t n_stages;   /* failing stages, ascending */
  size_t *issues; size_t n_issues;   /* structural issues, ascending */
  size_t n_instances;      /* per-replica stages the failing stages stand for */
  int64_t *ranks; size_t n_ranks;    /* sorted, distinct, global */
  int32_t *mbs; size_t n_mbs;        /* sorted, distinct (-1 left out) */
  int32_t *layers; size_t n_layers;  /* sorted, distinct (-1 left out) */
  uint64_t topo;           /* topological position (sort key) */
} vd_finding;

typedef struct {
  vd_finding *v;
  size_t n;
} vd_findings;

/* Groups the run's structural issues and failing stages into findings.
 * VD_ENOMEM only.  Cost: O(failing stages x stage size + plan nodes log). */
vd_rc vd_findings_build(const vd_run *r, vd_findings *out, vd_diag *d);
void vd_findings_free(vd_findings *f);

/* The plain-language hint of a diagnosis class: what to look for in the
 * training code (docs/reading-a-report.md). */
const char *vd_findings_hint(vd_diagnosis dx);

/* Stage class groups (stages/canon.c; a stage without a class is its own
 * group) by the verdict of their representative: equivalent and
 * inconclusive ones (failing ones are in the findings). */
void vd_rep_class_counts(const vd_run *r, size_t *n_equiv, size_t *n_inconclusive);

/* ---- facts shared by the report formats (findings_locate.c, findings_text.c) */

/* Plan node of a stage node, and the plan it belongs to. */
const vd_node_t *vd_rep_pnode(const vd_run *r, const vd_stage_node *sn, const vd_plan_t **plan);

/* "rank 2 mb 0 identity 'layers.1.attn.o.all_reduce' (node 172)" */
void vd_rep_fmt_node(char *buf, size_t n, const vd_run *r, const vd_stage_node *sn);

/* First diverging parallel node of failing stage i (stage-local index, or
 * -1) with a one-line reason in why.  Members of a symmetry class without
 * their own counterexample use their representative's flagged copies, at
 * the same stage-local positions. */
int32_t vd_rep_diverging(const vd_run *r, size_t i, char *why, size_t n_why);

/* Stage-local parallel values holding a wrong value in stage i's (or its
 * representative's) counterexample; returns the count written to out
 * (at most cap). */
size_t vd_rep_flagged_values(const vd_run *r, size_t i, uint32_t *out, size_t cap);

/* Footprint line: "ranks 2,3,6,7; microbatches 0,1; layers 1; 2 stages (4 per replica)". */
void vd_rep_fmt_footprint(char *buf, size_t n, const vd_finding *f);

/* One-line title of a finding: "MISSING_REDUCTION at identity 'layers.1.attn.o.all_reduce' (node 172)". */
void vd_rep_fmt_title(char *buf, size_t n, const vd_run *r, const vd_finding *f);

/* The user's call stack at the finding's node (plan `stack`: frames joined by
 * '\n', innermost first), or "" when the plan does not record one. */
/* The node a SCALE finding's factor reaches the failing stages through
 * (vd_finding.via_pnode), as "rank 0 all_reduce 'x.py:33' (node 243, ...)";
 * "" when the finding has none. */
void vd_rep_fmt_via(char *buf, size_t n, const vd_run *r, const vd_finding *f);

const char *vd_rep_finding_stack(const vd_run *r, const vd_finding *f);

#endif
