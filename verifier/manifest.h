/*
 * verifier/manifest.h - the gate manifest (docs/gate.md): named
 * configurations, each a pair of plans, a pair of nnScaler pickles or a
 * pair of PyTorch programs to capture, with the expected outcome.
 *
 * An INI-like text file, read with the C library only:
 *
 *     # comment
 *     [llama3-dp2-tp2]
 *     single   = plans/s.plan        # a verdict plan, or an nnScaler pickle
 *     parallel = plans/p.plan
 *     expect   = equivalent
 *
 *     [torch-tp]
 *     torch-single   = single.py
 *     torch-parallel = parallel.py
 *     nproc          = 4
 *     set            = tp=2             # repeatable: torch2plan --set KEY=VALUE
 *     expect         = not-equivalent MISSING_REDUCTION
 *
 * Relative paths are relative to the manifest's folder.  Errors name the
 * manifest, the line and the key (exit 2).
 */
#ifndef VD_MANIFEST_H
#define VD_MANIFEST_H

#include <stddef.h>

#include "../common/diag.h"
#include "../common/issue.h"

/* Bounds of a manifest (bad input past them). */
#define VD_MANIFEST_MAX_ENTRIES 4096
#define VD_MANIFEST_MAX_LINE 4096
#define VD_MANIFEST_MAX_NAME 128

typedef enum { VD_MF_PLANS, VD_MF_TORCH } vd_mf_kind;

typedef struct {
  char name[VD_MANIFEST_MAX_NAME];
  int line;              /* of its [name] header */
  vd_mf_kind kind;
  char *single, *parallel; /* resolved paths (owned): plans or pickles, or the torch programs */
  int nproc;             /* torch: ranks of the parallel program */
  char **sets; size_t n_sets; /* torch: KEY=VALUE arguments of both programs (torch2plan --set), owned */
  int expected;          /* expected exit code: 0 equivalent, 1 not equivalent, 3 inconclusive */
  int expect_dx;         /* with expected 1: a diagnosis class one finding must have, -1 for any */
} vd_mf_entry;

typedef struct {
  vd_mf_entry *v;
  size_t n, cap;
} vd_manifest;

/* Reads and checks the whole manifest (every entry complete, names unique,
 * files named are not checked here: a missing plan is that
 * configuration's bad input).  VD_EINPUT / VD_EIO with the diag naming the
 * manifest, the line and the key. */
vd_rc vd_manifest_read(const char *path, vd_manifest *m, vd_diag *d);
void vd_manifest_free(vd_manifest *m);

#endif
