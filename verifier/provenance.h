/*
 * verifier/provenance.h - "what was proven": the header of every report
 * (text, JSON, HTML).
 *
 * A report that says EQUIVALENT (or anything else) must say about what: the
 * configuration the parallel plan states (dp, tp, pp, ...; ranks,
 * microbatches), the model, the SHA-256 content hashes of both plan files
 * (common/digest.h; computed once when the run loads them), the coverage
 * (which single-device tensors were compared, by role, and whether the
 * comparison reaches the updated weights or stops at gradients), verdict's
 * version and the limits the run used.  An interrupted run says where it
 * stopped and what was done by then.
 *
 * JSON: a top-level object "provenance" with the keys version,
 * configuration, model, sm {path, sha256}, pm {path, sha256}, coverage,
 * limits (docs/report-format.md); the JSON Schema of the report expects
 * that name.
 */
#ifndef VD_PROVENANCE_H
#define VD_PROVENANCE_H

#include <stdio.h>

#include "json_out.h"
#include "run.h"

typedef struct {
  char config[160];       /* "dp2 tp2 pp2 nm2" (degrees above 1, sp as a flag), "" for a single device */
  size_t ranks;           /* stored ranks x replicas */
  int32_t microbatches;
  const char *model;      /* borrowed from the parallel plan (the single plan's when empty) */
  size_t n_role[VD_ROLE__COUNT]; /* single-device tensors compared (a parallel tensor holds a lineage to them) */
  size_t n_compared, n_single;
  size_t n_updated;       /* of them, weights and optimizer state the single plan updates */
  const char *up_to;      /* "the updated weights", "the weight gradients", "the loss", "activations only" */
} vd_provenance;

/* Fills p from the run (borrowed; valid while r is).  Without memory the
 * coverage counts stay 0.  O(tensors + node outputs). */
void vd_prov_build(const vd_run *r, vd_provenance *p);

/* The text header: a few lines; with verbose, the plans' paths and hashes
 * and the limits too. */
void vd_prov_text(const vd_run *r, const vd_run_opts *o, const vd_provenance *p, FILE *f);
/* The interrupted run's line ("run interrupted by SIGTERM while ...");
 * nothing when the run was not interrupted. */
void vd_prov_text_interrupted(const vd_run *r, FILE *f);
/* root["provenance"] = {...} and root["interrupted"] = {...} | null. */
void vd_prov_json(vd_jb *b, json_t *root, const vd_run *r, const vd_run_opts *o, const vd_provenance *p);
/* A table of the same facts (XHTML). */
void vd_prov_html(const vd_run *r, const vd_run_opts *o, const vd_provenance *p, FILE *f);

#endif
