/*
 * common/diag.h - the one error mechanism of verdict.
 *
 * Fallible functions return a vd_rc and put their results in out-params.
 * The details of the first failure go to a vd_diag owned by the caller:
 * the input file, the record ("node 812", "tensor 'layers.0.wq'"), the field,
 * the message, and where in our source it was detected.  Printed, a diag is
 * one line:
 *
 *     tp2.plan: node 812: inputs[1]: expected a tensor id, got 99 (no such tensor)
 *
 * Only the first failure is kept (later ones are usually consequences).
 * No longjmp anywhere: OpenMP regions and Z3 reference counts do not survive it.
 * A vd_diag is per thread; never share one across OpenMP threads.
 *
 * Layer: common/ is the allocator, the error mechanism, the clock,
 * structural issues and the limits table; it may include nothing else of
 * verdict (every module includes it).  tools/check_layers.sh (make lint)
 * enforces the order.
 */
#ifndef VD_DIAG_H
#define VD_DIAG_H

#include <stdarg.h>
#include <stddef.h>

typedef enum {
  VD_OK = 0,
  VD_ENOMEM,    /* allocation failed */
  VD_EINPUT,    /* the input (file, plan, arguments' content) is bad */
  VD_EUSAGE,    /* the command line is bad */
  VD_EIO,       /* reading or writing a file failed */
  VD_EINTERNAL, /* broken invariant of ours; a bug in verdict */
  VD_ECANCELED, /* a stop was requested (common/ctl.h: signal, deadline); no result */
} vd_rc;

#define VD_DIAG_TEXT 512

typedef struct vd_diag {
  vd_rc rc;
  char file[256];   /* input file the error is about, "" if none */
  char record[128]; /* "node 12", "tensor 'w1'", "" if none */
  char field[128];  /* "inputs[1]", "" if none */
  char msg[VD_DIAG_TEXT];
  const char *src_file; /* our __FILE__ */
  int src_line;         /* our __LINE__ */
} vd_diag;

void vd_diag_clear(vd_diag *d);

/* Records a failure (if none is recorded yet) and returns rc.  file, record
 * and field may be NULL.  d may be NULL (the failure is then only returned). */
vd_rc vd_diag_set(vd_diag *d, vd_rc rc, const char *src_file, int src_line,
                  const char *file, const char *record, const char *field,
                  const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* Sets the file name of an already recorded diag when it has none (the
 * reader knows the record, its caller knows the file). */
void vd_diag_set_file(vd_diag *d, const char *file);

/* Formats the one-line message into buf (always NUL-terminated). */
void vd_diag_format(const vd_diag *d, char *buf, size_t size);

const char *vd_rc_name(vd_rc rc);

/* Propagate a failure. */
#define VD_CHECK(expr)          \
  do {                          \
    vd_rc vd_check_rc_ = (expr); \
    if (vd_check_rc_ != VD_OK) return vd_check_rc_; \
  } while (0)

/* Record and return: VD_FAIL(diag, VD_EINPUT, file, record, field, fmt, ...) */
#define VD_FAIL(d, rc, file, record, field, ...) \
  return vd_diag_set((d), (rc), __FILE__, __LINE__, (file), (record), (field), __VA_ARGS__)

/* Record without returning (for `rc = VD_ERR(...); goto done;`). */
#define VD_ERR(d, rc, file, record, field, ...) \
  vd_diag_set((d), (rc), __FILE__, __LINE__, (file), (record), (field), __VA_ARGS__)

#define VD_OOM(d) vd_diag_set((d), VD_ENOMEM, __FILE__, __LINE__, NULL, NULL, NULL, "out of memory")

/* A defensive branch that cannot be taken unless verdict has a bug. */
#define VD_NEVER(x) __builtin_expect(!!(x), 0)

#endif
