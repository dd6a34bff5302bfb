/*
 * verifier/importers.h - the Python front ends run from the verdict binary:
 * nnScaler pickles (tools/nnscaler2plan, an inert unpickler: nothing from
 * the pickles is executed) given straight to `verdict --sm a.pkl --pm
 * b.pkl` or to a gate manifest, and PyTorch capture commands
 * (tools/torch2plan) of a gate manifest.
 *
 * Each conversion writes its two plans into a private temporary directory
 * (mkdtemp, mode 0700) that vd_import_cleanup removes.  The tools run under
 * /usr/bin/python3 (Debian's, which has python3-msgpack and python3-torch;
 * VERDICT_PYTHON overrides it), found next to the binary
 * (BIN/../tools/NAME; VERDICT_TOOLS=DIR overrides the folder).  A missing
 * interpreter or tool, or a conversion error, is bad input (VD_EINPUT): one
 * line naming the file and the tool's own message.
 */
#ifndef VD_IMPORTERS_H
#define VD_IMPORTERS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"

typedef struct {
  char dir[4096];                 /* the temporary directory, "" when none was made */
  char single[4200], parallel[4200]; /* the converted plans inside it */
  int tool_exit;                  /* after a failed conversion: the tool's exit code (-1: not run) */
} vd_import_tmp;

/* 1 when the file starts like a Python pickle (protocol 2 to 5), 0 when it
 * does not or cannot be read (the plan reader then says why). */
int vd_import_is_pickle(const char *path);

/* tools/nnscaler2plan --sm SM --pm PM into a fresh temporary directory. */
vd_rc vd_import_nnscaler(const char *sm, const char *pm, vd_import_tmp *t, vd_diag *d);

/* tools/torch2plan --single S --parallel P --nproc N [--set KEY=VALUE ...]
 * into a fresh temporary directory. */
vd_rc vd_import_torch(const char *single_py, const char *parallel_py, int nproc, char *const *sets, size_t n_sets,
                      vd_import_tmp *t, vd_diag *d);

/* SHA-256 of the nnScaler importer's sources (tools/nnscaler2plan and
 * tools/nnscaler/ *.py, by name order), for the whole-configuration cache
 * key of a pickle pair.  VD_EIO when they cannot be read. */
vd_rc vd_import_nnscaler_digest(uint8_t out[32], vd_diag *d);

/* Removes the directory and the files in it; accepts a zeroed struct. */
void vd_import_cleanup(vd_import_tmp *t);

#endif
