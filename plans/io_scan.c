/*
 * plans/io_scan.c - pass 1 of the plan reader (io.c): the bounded byte-level scan of
 * the raw msgpack encoding, before msgpack-c allocates anything.
 */
#include "io_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "../common/outfile.h"

/* ======================================================================
 * Pass 1: bounded scan of the raw encoding.
 * ====================================================================== */

/* What type byte t (at byte at; its length field, if any, from *pos on)
 * says follows: *body bytes to skip and *items child objects; *pos moves
 * past the length field. */
static vd_rc scan_header(const uint8_t *b, size_t len, size_t *pos, size_t at, uint8_t t, uint64_t *body,
                         uint64_t *items, const char *file, vd_diag *d) {
  int hdr = 0; /* length bytes following the type byte */
  *body = 0;
  *items = 0;
  if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return VD_OK;
  if (t >= 0x80 && t <= 0x8f) *items = 2 * (uint64_t)(t & 0x0f);
  else if (t >= 0x90 && t <= 0x9f) *items = t & 0x0f;
  else if (t >= 0xa0 && t <= 0xbf) *body = t & 0x1f;
  else {
    switch (t) {
    case 0xc4: case 0xd9: hdr = 1; break;          /* bin8, str8 */
    case 0xc5: case 0xda: hdr = 2; break;          /* bin16, str16 */
    case 0xc6: case 0xdb: hdr = 4; break;          /* bin32, str32 */
    case 0xc7: hdr = 1; *body = 1; break;          /* ext8 (+type byte) */
    case 0xc8: hdr = 2; *body = 1; break;
    case 0xc9: hdr = 4; *body = 1; break;
    case 0xca: *body = 4; break;                   /* float32 */
    case 0xcb: *body = 8; break;                   /* float64 */
    case 0xcc: case 0xd0: *body = 1; break;
    case 0xcd: case 0xd1: *body = 2; break;
    case 0xce: case 0xd2: *body = 4; break;
    case 0xcf: case 0xd3: *body = 8; break;
    case 0xd4: *body = 2; break;                   /* fixext1..16: type + data */
    case 0xd5: *body = 3; break;
    case 0xd6: *body = 5; break;
    case 0xd7: *body = 9; break;
    case 0xd8: *body = 17; break;
    case 0xdc: case 0xdd: case 0xde: case 0xdf: hdr = (t & 1) ? 4 : 2; break;
    default:
      VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "corrupt msgpack at byte %zu: invalid type byte 0x%02x", at, t);
    }
    if (hdr) {
      if (len - *pos < (size_t)hdr)
        VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "truncated msgpack at byte %zu: length field cut off", at);
      uint64_t n = vd_plan_i_be(b + *pos, hdr);
      *pos += (size_t)hdr;
      if (t >= 0xdc) *items = (t >= 0xde) ? 2 * n : n;
      else *body += n;
    }
  }
  return VD_OK;
}

/* top_pos (out, taken even on failure; NULL when the top object is not a
 * map): the byte offset of each key and value of the top-level map, in file
 * order, then len: 2 * pairs + 1 entries. */
vd_rc vd_plan_i_scan(const uint8_t *b, size_t len, const char *file, size_t **top_pos, vd_diag *d) {
  uint64_t left[MAX_DEPTH]; /* objects still owed at each open container level */
  size_t *tp = NULL, n_tp = 0;
  *top_pos = NULL;
  int depth = 0;
  uint64_t owed = 1; /* objects still to read, all levels together */
  size_t pos = 0;
  while (owed > 0) {
    if (pos >= len)
      VD_FAIL(d, VD_EINPUT, file, NULL, NULL,
              "truncated or corrupt msgpack: file ends at byte %zu with %" PRIu64 " object(s) still missing", pos, owed);
    size_t at = pos;
    if (depth == 1 && tp) tp[n_tp++] = at;
    uint8_t t = b[pos++];
    uint64_t body, items; /* bytes to skip, child objects */
    VD_CHECK(scan_header(b, len, &pos, at, t, &body, &items, file, d));
    if (body > len - pos)
      VD_FAIL(d, VD_EINPUT, file, NULL, NULL,
              "truncated or corrupt msgpack at byte %zu: value of %" PRIu64 " bytes, only %zu bytes left", at, body,
              len - pos);
    pos += (size_t)body;
    owed--;
    if (depth > 0) left[depth - 1]--;
    if (items) {
      if (items > len - pos || owed + items > len - pos)
        VD_FAIL(d, VD_EINPUT, file, NULL, NULL,
                "truncated or corrupt msgpack at byte %zu: container of %" PRIu64
                " objects, only %zu bytes left (each object needs one)", at, items, len - pos);
      if (depth == MAX_DEPTH)
        VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "corrupt msgpack at byte %zu: nested deeper than %d levels", at,
                MAX_DEPTH);
      /* The top-level map's entries (items <= bytes left: backed by the file). */
      if (depth == 0 && ((t >= 0x80 && t <= 0x8f) || t == 0xde || t == 0xdf)) {
        tp = *top_pos = vd_malloc(((size_t)items + 1) * sizeof(*tp));
        if (!tp) VD_FAIL(d, VD_ENOMEM, file, NULL, NULL, "out of memory");
      }
      left[depth++] = items;
      owed += items;
    }
    while (depth > 0 && left[depth - 1] == 0) depth--;
  }
  if (pos != len)
    VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "corrupt plan: %zu trailing bytes after the top-level map (at byte %zu)",
            len - pos, pos);
  if (tp) tp[n_tp] = len;
  return VD_OK;
}
