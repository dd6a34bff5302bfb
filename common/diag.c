/*
 * common/diag.c - recording and formatting the first failure.
 */
#include "diag.h"
#include "text.h"

#include <stdio.h>
#include <string.h>

void vd_diag_clear(vd_diag *d) {
  if (d) memset(d, 0, sizeof(*d));
}

/* Copies cut on a character boundary: a long name in a record or a path
 * never ends in half a character. */
static void copy(char *dst, size_t n, const char *src) {
  if (!src) src = "";
  int w = snprintf(dst, n, "%s", src);
  if (w >= 0 && (size_t)w >= n) vd_text_fix_cut(dst, n, 1);
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
  int w = vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
  va_end(ap);
  if (w >= 0 && (size_t)w >= sizeof(d->msg)) vd_text_fix_cut(d->msg, sizeof(d->msg), 1);
  d->src_file = src_file;
  d->src_line = src_line;
  return rc;
}

void vd_diag_set_file(vd_diag *d, const char *file) {
  if (d && d->rc != VD_OK && d->file[0] == '\0') copy(d->file, sizeof(d->file), file);
}

/* Every part is escaped for a terminal (common/text.h): the file, record,
 * field and message may quote names and bytes from the input, and the
 * line must stay one line without control characters. */
void vd_diag_format(const vd_diag *d, char *buf, size_t size) {
  size_t at = 0;
  const char *parts[4] = {d->file, d->record, d->field, d->msg};
  buf[0] = '\0';
  for (int i = 0; i < 4 && size; i++) {
    if (!parts[i][0] || at + 1 >= size) continue;
    vd_text_esc(buf + at, size - at, parts[i], VD_TEXT_PLAIN);
    at += strlen(buf + at);
    if (i < 3 && at + 2 < size) {
      memcpy(buf + at, ": ", 3);
      at += 2;
    }
  }
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
