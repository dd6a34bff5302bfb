/*
 * verifier/json_out.h - the JSON outputs' one path through jansson (the
 * --json report, `plan dump --json`).
 *
 * jansson builds the document and escapes strings; this file adds what
 * verdict's outputs need on top: strings repaired to valid UTF-8 first
 * (jansson refuses anything else; common/text.h), integers that read
 * "none" as null, an out-of-memory flag instead of a NULL check at every
 * call, and the writer that keeps the reports' line layout (top-level
 * members on their own lines, each element of a top-level array on its own
 * line, everything else compact) so line-oriented tools keep working.
 * Output is deterministic: objects keep insertion order.
 */
#ifndef VD_JSON_OUT_H
#define VD_JSON_OUT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/diag.h"

/* A document under construction: any allocation that failed sets oom. */
typedef struct {
  int oom;
} vd_jb;

/* New values; NULL (and b->oom set) when out of memory.  vd_jb_str repairs
 * invalid UTF-8 (U+FFFD); NULL s gives JSON null. */
json_t *vd_jb_str(vd_jb *b, const char *s);
json_t *vd_jb_int(vd_jb *b, int64_t x);
json_t *vd_jb_int_or_null(vd_jb *b, int64_t x); /* negative: null */
json_t *vd_jb_bool(vd_jb *b, int x);
json_t *vd_jb_obj(vd_jb *b);
json_t *vd_jb_arr(vd_jb *b);
/* A number rounded to `decimals` places (timings). */
json_t *vd_jb_real(vd_jb *b, double x, int decimals);
/* A number as its shortest round-trip text (%.17g), or null when not
 * finite (JSON has no NaN or infinity). */
json_t *vd_jb_double(vd_jb *b, double x);

/* obj[key] = v, taking v (also on failure); arr += v, taking v. */
void vd_jb_set(vd_jb *b, json_t *obj, const char *key, json_t *v);
void vd_jb_push(vd_jb *b, json_t *arr, json_t *v);

/* Writes root (an object) to f in the reports' layout, then a newline;
 * reals with `digits` significant digits.  -1 on a write or encoding
 * failure. */
int vd_jb_write(json_t *root, FILE *f, int digits);

#endif
