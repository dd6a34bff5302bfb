/*
 * verifier/json_out.c - jansson helpers for the JSON outputs (json_out.h).
 *
 * Reals: jansson prints a real with "%.*g" at the precision given to the
 * dump (and adds ".0" to an integral value); vd_jb_real rounds first, and
 * the report is written with 10 significant digits, so a timing rounded to
 * 4 decimals prints as its short decimal (0.0123) below 10^6 seconds.
 */
#include "json_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"

static json_t *chk(vd_jb *b, json_t *v) {
  if (!v) b->oom = 1;
  return v;
}

json_t *vd_jb_str(vd_jb *b, const char *s) {
  if (!s) return chk(b, json_null());
  size_t n = strlen(s);
  if (vd_text_utf8_prefix(s, n) == n) return chk(b, json_stringn(s, n));
  /* Repair: every invalid byte becomes U+FFFD (3 bytes). */
  size_t cap;
  if (__builtin_mul_overflow(n, 3, &cap) || __builtin_add_overflow(cap, 1, &cap)) return chk(b, NULL);
  char *buf = vd_malloc(cap);
  if (!buf) return chk(b, NULL);
  size_t at = 0;
  for (size_t i = 0; i < n;) {
    size_t used;
    at += vd_text_escape_char(s + i, n - i, VD_TEXT_UTF8, buf + at, &used);
    i += used;
  }
  json_t *v = json_stringn(buf, at);
  vd_free(buf);
  return chk(b, v);
}

json_t *vd_jb_int(vd_jb *b, int64_t x) { return chk(b, json_integer((json_int_t)x)); }
json_t *vd_jb_int_or_null(vd_jb *b, int64_t x) { return x < 0 ? chk(b, json_null()) : vd_jb_int(b, x); }
json_t *vd_jb_bool(vd_jb *b, int x) { return chk(b, json_boolean(x)); }
json_t *vd_jb_obj(vd_jb *b) { return chk(b, json_object()); }
json_t *vd_jb_arr(vd_jb *b) { return chk(b, json_array()); }

json_t *vd_jb_real(vd_jb *b, double x, int decimals) {
  double k = pow(10, decimals);
  return vd_jb_double(b, round(x * k) / k);
}

json_t *vd_jb_double(vd_jb *b, double x) {
  if (!isfinite(x)) return chk(b, json_null());
  return chk(b, json_real(x));
}

/* jansson's _new setters take the value also when they fail (a NULL
 * container included). */
void vd_jb_set(vd_jb *b, json_t *obj, const char *key, json_t *v) {
  if (!v || json_object_set_new(obj, key, v) != 0) b->oom = 1;
}

void vd_jb_push(vd_jb *b, json_t *arr, json_t *v) {
  if (!v || json_array_append_new(arr, v) != 0) b->oom = 1;
}

static int dump(json_t *v, FILE *f, int digits) {
  return json_dumpf(v, f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits));
}

int vd_jb_write(json_t *root, FILE *f, int digits) {
  const char *key;
  json_t *v;
  int first = 1;
  if (fputc('{', f) == EOF) return -1;
  json_object_foreach(root, key, v) {
    json_t *k = json_string(key);
    if (!k) return -1;
    int rc = (first ? 0 : fputs(",\n", f) == EOF) || dump(k, f, digits) != 0 || fputc(':', f) == EOF;
    json_decref(k);
    if (rc) return -1;
    first = 0;
    if (json_is_array(v) && json_array_size(v) && json_is_object(json_array_get(v, 0))) {
      /* An array of records: one record per line. */
      size_t i;
      json_t *e;
      if (fputc('[', f) == EOF) return -1;
      json_array_foreach(v, i, e) {
        if (fputs(i ? ",\n" : "\n", f) == EOF || dump(e, f, digits) != 0) return -1;
      }
      if (fputc(']', f) == EOF) return -1;
    } else if (dump(v, f, digits) != 0) {
      return -1;
    }
  }
  return fputs("}\n", f) == EOF ? -1 : 0;
}
