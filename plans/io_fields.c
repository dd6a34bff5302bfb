/*
 * plans/io_fields.c - pass 3 of the plan reader (io.c), its field readers: the
 * record name of an error, typed getters (ints, strings in UTF-8, enums,
 * bools, arrays, dims), a record's fields by key, and array elements
 * decoded one at a time.
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
 * Pass 3: typed walk of the object tree.
 * ====================================================================== */

const char *vd_plan_i_tname(mobj *o) {
  switch (o->type) {
  case MSGPACK_OBJECT_NIL: return "nil";
  case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "an integer";
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return "a float";
  case MSGPACK_OBJECT_STR: return "a string";
  case MSGPACK_OBJECT_ARRAY: return "an array";
  case MSGPACK_OBJECT_MAP: return "a map";
  case MSGPACK_OBJECT_BIN: return "binary data";
  case MSGPACK_OBJECT_EXT: return "an ext value";
  }
  return "an unknown type";
}

int vd_plan_i_str_is(mobj *o, const char *s) {
  size_t n = strlen(s);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

const char *vd_plan_i_rec_of(rctx *c) {
  if (!c->rec_kind) return c->rec;
  if (!c->has_id) snprintf(c->rec, sizeof(c->rec), "%s[%" PRIu32 "]", c->rec_arr, c->rec_pos);
  else if (c->rec_name_len)
    snprintf(c->rec, sizeof(c->rec), "%s %" PRId64 " '%.*s'", c->rec_kind, c->rec_id,
             (int)(c->rec_name_len > 96 ? 96 : c->rec_name_len), c->rec_name);
  else snprintf(c->rec, sizeof(c->rec), "%s %" PRId64, c->rec_kind, c->rec_id);
  return c->rec;
}

/* A literal record name ("plan", "world"). */
void vd_plan_i_set_rec_text(rctx *c, const char *text) {
  c->rec_kind = NULL;
  snprintf(c->rec, sizeof(c->rec), "%s", text);
}

vd_rc vd_plan_i_get_int(rctx *c, mobj *o, const char *field, int64_t *v) {
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *v = o->via.i64;
    return VD_OK;
  }
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    if (o->via.u64 > (uint64_t)INT64_MAX)
      RFAIL(c, field, "expected an integer that fits in int64, got %" PRIu64, o->via.u64);
    *v = (int64_t)o->via.u64;
    return VD_OK;
  }
  RFAIL(c, field, "expected an integer, got %s", vd_plan_i_tname(o));
}

vd_rc vd_plan_i_get_i32(rctx *c, mobj *o, const char *field, int32_t *v) {
  int64_t x;
  VD_CHECK(vd_plan_i_get_int(c, o, field, &x));
  if (x < INT32_MIN || x > INT32_MAX) RFAIL(c, field, "expected an integer in [-2^31, 2^31), got %" PRId64, x);
  *v = (int32_t)x;
  return VD_OK;
}

/* Length of the valid UTF-8 prefix of s[0..n): strict (no overlong forms,
 * no surrogates, nothing above U+10FFFF), so that a name printed in a
 * report or an error message is text and never raw terminal bytes. */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    size_t k;
    uint32_t cp, min;
    if (b < 0x80) {
      i++;
      continue;
    } else if ((b & 0xe0) == 0xc0) k = 1, cp = b & 0x1f, min = 0x80;
    else if ((b & 0xf0) == 0xe0) k = 2, cp = b & 0x0f, min = 0x800;
    else if ((b & 0xf8) == 0xf0) k = 3, cp = b & 0x07, min = 0x10000;
    else return i;
    if (n - i <= k) return i;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += k + 1;
  }
  return n;
}

static int utf8_ok(const char *s, size_t n) { return utf8_valid_prefix((const uint8_t *)s, n) == n; }

static vd_rc get_str(rctx *c, mobj *o, const char *field, const char **s, uint32_t *n) {
  if (o->type != MSGPACK_OBJECT_STR) RFAIL(c, field, "expected a string, got %s", vd_plan_i_tname(o));
  if (o->via.str.size && memchr(o->via.str.ptr, 0, o->via.str.size))
    RFAIL(c, field, "expected a string without NUL bytes");
  size_t ok = utf8_valid_prefix((const uint8_t *)o->via.str.ptr, o->via.str.size);
  if (ok != o->via.str.size)
    RFAIL(c, field, "expected a UTF-8 string, got an invalid byte 0x%02x at offset %zu",
          (unsigned)(uint8_t)o->via.str.ptr[ok], ok);
  *s = o->via.str.ptr;
  *n = o->via.str.size;
  return VD_OK;
}

/* Copies a string object into scratch slot `slot`, NUL-terminated. */
vd_rc vd_plan_i_get_cstr(rctx *c, mobj *o, const char *field, int slot, const char **out) {
  const char *s;
  uint32_t n = 0;
  VD_CHECK(get_str(c, o, field, &s, &n));
  if (VD_GROW(c->sbuf[slot], c->scap[slot], (size_t)n + 1)) ROOM(c);
  memcpy(c->sbuf[slot], s, n);
  c->sbuf[slot][n] = '\0';
  *out = c->sbuf[slot];
  return VD_OK;
}

vd_rc vd_plan_i_get_lines(rctx *c, mobj *o, const char *field, int slot, const char **out) {
  if (o->type != MSGPACK_OBJECT_ARRAY) RFAIL(c, field, "expected an array of strings, got %s", vd_plan_i_tname(o));
  if (o->via.array.size > VD_PLAN_STACK_MAX)
    RFAIL(c, field, "expected at most %d frames, got %" PRIu32, VD_PLAN_STACK_MAX, o->via.array.size);
  size_t at = 0;
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    const char *s;
    uint32_t n = 0;
    VD_CHECK(get_str(c, &o->via.array.ptr[i], field, &s, &n));
    if (memchr(s, '\n', n)) RFAIL(c, field, "frame %" PRIu32 ": expected one line, got a newline", i);
    if (VD_GROW(c->sbuf[slot], c->scap[slot], at + n + 2)) ROOM(c);
    if (i) c->sbuf[slot][at++] = '\n';
    memcpy(c->sbuf[slot] + at, s, n);
    at += n;
  }
  if (VD_GROW(c->sbuf[slot], c->scap[slot], at + 1)) ROOM(c);
  c->sbuf[slot][at] = '\0';
  *out = c->sbuf[slot];
  return VD_OK;
}

vd_rc vd_plan_i_get_enum(rctx *c, mobj *o, const char *field, const char *const *names, int count, int *v) {
  const char *s;
  uint32_t n = 0;
  VD_CHECK(get_str(c, o, field, &s, &n));
  for (int i = 0; i < count; i++)
    if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
      *v = i;
      return VD_OK;
    }
  char list[160] = "";
  size_t at = 0;
  for (int i = 0; i < count && at < sizeof(list); i++) {
    int w = snprintf(list + at, sizeof(list) - at, "%s%s", i ? ", " : "", names[i]);
    if (w > 0) at += (size_t)w;
  }
  RFAIL(c, field, "expected one of %s, got '%.*s'", list, (int)(n > 64 ? 64 : n), s);
}

vd_rc vd_plan_i_get_bool(rctx *c, mobj *o, const char *field, int *v) {
  if (o->type != MSGPACK_OBJECT_BOOLEAN) RFAIL(c, field, "expected a boolean, got %s", vd_plan_i_tname(o));
  *v = o->via.boolean ? 1 : 0;
  return VD_OK;
}

vd_rc vd_plan_i_get_array(rctx *c, mobj *o, const char *field, uint32_t *n) {
  if (o->type != MSGPACK_OBJECT_ARRAY) RFAIL(c, field, "expected an array, got %s", vd_plan_i_tname(o));
  *n = o->via.array.size;
  return VD_OK;
}

/* Reads an array of integers into c->ints[0..*n). */
vd_rc vd_plan_i_get_ints(rctx *c, mobj *o, const char *field, uint32_t *n) {
  char f[80];
  VD_CHECK(vd_plan_i_get_array(c, o, field, n));
  if (VD_GROW(c->ints, c->cap_ints, *n ? *n : 1)) ROOM(c);
  for (uint32_t i = 0; i < *n; i++) {
    mobj *e = &o->via.array.ptr[i];
    if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) c->ints[i] = e->via.i64;
    else if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER && e->via.u64 <= (uint64_t)INT64_MAX)
      c->ints[i] = (int64_t)e->via.u64;
    else {
      snprintf(f, sizeof(f), "%s[%" PRIu32 "]", field, i);
      return vd_plan_i_get_int(c, e, f, &c->ints[i]);
    }
  }
  return VD_OK;
}

/* Reads an int array of exactly `want` entries into dst. */
vd_rc vd_plan_i_get_dims(rctx *c, mobj *o, const char *field, int want, int64_t *dst) {
  uint32_t n = 0;
  VD_CHECK(vd_plan_i_get_ints(c, o, field, &n));
  if (n != (uint32_t)want)
    RFAIL(c, field, "expected %d values (one per dim of the tensor's shape), got %" PRIu32, want, n);
  memcpy(dst, c->ints, (size_t)n * sizeof(int64_t));
  return VD_OK;
}

/* Looks up the keys of map o against keys[0..nk): slots[i] gets the value or
 * NULL.  Keys starting with "x_" are extensions and ignored; any other
 * unknown key, a non-string key or a repeated key is an error.  `what`
 * prefixes field names ("lin.", "world."...). */
vd_rc vd_plan_i_get_fields(rctx *c, mobj *o, const char *field, const char *const *keys, int nk, mobj **slots,
                        const char *prefix) {
  char f[160];
  if (o->type != MSGPACK_OBJECT_MAP) RFAIL(c, field, "expected a map, got %s", vd_plan_i_tname(o));
  for (int k = 0; k < nk; k++) slots[k] = NULL;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    mobj *key = &o->via.map.ptr[i].key;
    if (key->type != MSGPACK_OBJECT_STR) RFAIL(c, field, "expected string keys, got %s as key %" PRIu32, vd_plan_i_tname(key), i);
    const char *s = key->via.str.ptr;
    uint32_t n = key->via.str.size;
    int found = -1;
    for (int k = 0; k < nk && found < 0; k++) /* first byte first: this loop is hot */
      if (n && keys[k][0] == s[0] && strlen(keys[k]) == n && memcmp(keys[k], s, n) == 0) found = k;
    if (found < 0) {
      if (n >= 2 && s[0] == 'x' && s[1] == '_') continue;
      char list[256] = "";
      size_t at = 0;
      for (int k = 0; k < nk && at < sizeof(list); k++) {
        int w = snprintf(list + at, sizeof(list) - at, "%s%s", k ? ", " : "", keys[k]);
        if (w > 0) at += (size_t)w;
      }
      snprintf(f, sizeof(f), "%s%.*s", prefix, (int)(n > 64 ? 64 : n), s);
      RFAIL(c, f, "unknown key (expected one of %s; extension keys start with x_)", list);
    }
    if (slots[found]) {
      snprintf(f, sizeof(f), "%s%s", prefix, keys[found]);
      RFAIL(c, f, "key appears twice");
    }
    slots[found] = &o->via.map.ptr[i].val;
  }
  return VD_OK;
}

vd_rc vd_plan_i_need(rctx *c, mobj *slot, const char *field) {
  if (!slot) RFAIL(c, field, "missing required key");
  return VD_OK;
}

/* Element i of array a, which the caller visits in order 0, 1, ...: for a
 * record array left undecoded by read_top, the element is decoded now into
 * c->ez (valid until the next call). */
vd_rc vd_plan_i_elem(rctx *c, mobj *a, uint32_t i, mobj **out) {
  size_t k = c->top_kv && (const char *)a >= (const char *)c->top_kv
                 ? (size_t)((const char *)a - (const char *)c->top_kv) / sizeof(*c->top_kv)
                 : SIZE_MAX;
  if (k >= c->n_top || a != &c->top_kv[k].val || !c->lazy_at[k]) {
    *out = &a->via.array.ptr[i];
    return VD_OK;
  }
  msgpack_zone_clear(c->ez);
  msgpack_unpack_return ur = msgpack_unpack(c->buf, c->len, &c->lazy_at[k], c->ez, &c->eobj);
  if (ur == MSGPACK_UNPACK_NOMEM_ERROR) VD_FAIL(c->d, VD_ENOMEM, c->file, NULL, NULL, "out of memory decoding msgpack");
  if (ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES)
    VD_FAIL(c->d, VD_EINPUT, c->file, NULL, NULL, "corrupt msgpack (decoder status %d at byte %zu)", (int)ur,
            c->lazy_at[k]);
  *out = &c->eobj;
  return VD_OK;
}

/* Names record o ("tensor 4 'w1'") before its fields are checked, so that
 * even an error in the key set names the record by id.  Falls back to the
 * array position when the id is missing or not an integer. */
void vd_plan_i_peek_rec(rctx *c, mobj *o, const char *kind, const char *arr, uint32_t pos) {
  c->rec_kind = kind;
  c->rec_arr = arr;
  c->rec_pos = pos;
  c->has_id = 0;
  c->rec_name_len = 0;
  if (o->type != MSGPACK_OBJECT_MAP) return;
  mobj *id = NULL, *name = NULL;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    mobj *k = &o->via.map.ptr[i].key;
    if (vd_plan_i_str_is(k, "id")) id = &o->via.map.ptr[i].val;
    if (vd_plan_i_str_is(k, "name")) name = &o->via.map.ptr[i].val;
  }
  if (!id || (id->type != MSGPACK_OBJECT_NEGATIVE_INTEGER &&
              (id->type != MSGPACK_OBJECT_POSITIVE_INTEGER || id->via.u64 > (uint64_t)INT64_MAX)))
    return;
  c->has_id = 1;
  c->rec_id = id->via.i64;
  /* An invalid name is reported by its field later; the record is then
   * named by id only, so that its bytes are never echoed. */
  if (name && name->type == MSGPACK_OBJECT_STR && !memchr(name->via.str.ptr, 0, name->via.str.size) &&
      utf8_ok(name->via.str.ptr, name->via.str.size)) {
    c->rec_name = name->via.str.ptr;
    c->rec_name_len = name->via.str.size;
  }
}
