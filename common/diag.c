/*
 * common/diag.c - recording and formatting the first failure.
 */
#include "diag.h"

#include <stdio.h>
#include <string.h>

void vd_diag_clear(vd_diag *d) {
  if (d) memset(d, 0, sizeof(*d));
}

static void copy(char *dst, size_t n, const char *src) {
  if (!src) src = "";
  snprintf(dst, n, "%s", src);
}

vd_rc vd_diag_set(vd_diag *d, vd_rc rc, const char *src_file, int src_line,
                  const char *file, const char *record, const char *field,
                  const char *fmt, ...) {
  if (!d || d->rc != VD_OK) return rc;
  d->rc = rc;
  copy(d->file, sizeof(d->file), file);
  copy(d->record, sizeof(d->record), record);
  copy(d->field, sizeof(d->field), field);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
  va_end(ap);
  d->src_file = src_file;
  d->src_line = src_line;
  return rc;
}

void vd_diag_set_file(vd_diag *d, const char *file) {
  if (d && d->rc != VD_OK && d->file[0] == '\0') copy(d->file, sizeof(d->file), file);
}

void vd_diag_format(const vd_diag *d, char *buf, size_t size) {
  size_t at = 0;
  const char *parts[3] = {d->file, d->record, d->field};
  buf[0] = '\0';
  for (int i = 0; i < 3; i++) {
    if (parts[i][0] && at < size) {
      int n = snprintf(buf + at, size - at, "%s: ", parts[i]);
      if (n > 0) at += (size_t)n;
    }
  }
  if (at < size) snprintf(buf + at, size - at, "%s", d->msg);
}

const char *vd_rc_name(vd_rc rc) {
  switch (rc) {
  case VD_OK: return "ok";
  case VD_ENOMEM: return "out of memory";
  case VD_EINPUT: return "bad input";
  case VD_EUSAGE: return "usage";
  case VD_EIO: return "i/o error";
  case VD_EINTERNAL: return "internal error";
  case VD_ECANCELED: return "canceled";
  }
  return "?";
}
