/*
 * verifier/cert.h - certificates of a run (`verdict --certificate DIR`) and
 * their independent re-check (`verdict recheck DIR`, cmd_recheck.c).
 *
 * A certificate directory holds one SMT-LIB2 proof obligation per class
 * (class-<stage id of its representative>.smt2, solver/smt_cert.c) and
 * manifest.json: the plans' SHA-256 content hashes, the run's verdict, per
 * class the obligation's file and SHA-256, the verdict and how verdict
 * proved it, the reduced shapes and why the reduction is allowed (the
 * operators' reduction rules, docs/shape-reduction.md), and the class of
 * every stage.  docs/verifier.md section 10 says what it proves and what not.
 */
#ifndef VD_CERT_H
#define VD_CERT_H

#include "run.h"

#define VD_CERT_MANIFEST "manifest.json"
#define VD_CERT_FORMAT "verdict-certificate/1"

typedef struct {
  size_t n_classes;   /* classes of the run */
  size_t n_written;   /* obligations written */
  size_t n_missing;   /* classes without an obligation (too large, unsupported operator) */
  size_t bytes;       /* obligation bytes */
  double secs;
} vd_cert_summary;

/* Writes the certificate of finished run r into dir (created if missing;
 * existing class files are replaced).  VD_EIO names the file that could not
 * be written; VD_ENOMEM; VD_EINTERNAL for a term without an SMT-LIB2 form. */
vd_rc vd_cert_write(vd_run *r, const vd_run_opts *o, const char *dir, vd_cert_summary *sum, vd_diag *d);

/* --cross-check: prints how the classes the normal form proved fared with
 * Z3 (agreed, undecided, disagreed) to f; returns the disagreements (in
 * any round: solver/smt_check.c counts them), which make the run
 * INCONCLUSIVE (exit 3). */
size_t vd_cert_cross_summary(const vd_run *r, const vd_run_opts *o, FILE *f);

#endif
