/*
 * plans/io.c - plan file format v1: reader and writer (msgpack-c).
 *
 * The format is specified in docs/plan-format.md: one msgpack map with
 * string keys.  This file owns the encoding only; every structural rule that
 * does not depend on msgpack lives in validate.c, which the reader calls
 * after building and the writer before writing.
 *
 * Reader, in three passes, each bounded by the input length:
 *  1. scan(): a byte-level walk of the msgpack encoding that checks that the
 *     buffer holds exactly one complete object, that every declared array,
 *     map, string, binary and ext length fits in the bytes that remain, that
 *     the number of objects still owed never exceeds the bytes left (each
 *     needs at least one), and that nesting stays below MAX_DEPTH.  msgpack-c
 *     allocates an array's element storage from its declared count before
 *     reading any element, so this pass is what keeps a 5-byte file that
 *     claims 4 billion elements from allocating 96 GB.  After it, msgpack-c
 *     allocates at most sizeof(msgpack_object) per input byte.  It also
 *     notes where each entry of the top-level map starts.
 *  2. msgpack-c builds the object tree in a zone (strings are referenced,
 *     not copied): the top-level map's entries at once, except the records
 *     of "tensors" and "nodes", which are decoded one at a time as build()
 *     reaches them (read_top says why and why nothing else changes).
 *  3. build(): walks the tree, checks every type, enum string, required key
 *     and id reference, and builds the vd_plan_t with the plan.h builder.
 *     Ids are resolved with a hash map (idmap.h): O(1) per reference, or by
 *     subtraction while tensor ids are consecutive.
 *
 * Errors: the first one goes to the vd_diag as `file: record: field: msg`.
 * A record is named by its file id once known ("tensor 4 'w1'", "node 17"),
 * by its array position before ("tensors[3]").
 *
 * Writer: validates, then streams the map through a msgpack_packer into an
 * exclusive temporary file next to the target and renames it into place
 * (common/outfile.h: a FIFO, device or link at the path is refused, an
 * existing file's mode is kept), so a reader never sees a half-written plan.  Fields equal to their documented default
 * are omitted.
 */
#include "plan.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "../common/outfile.h"
#include "idmap.h"

#define MAX_FILE_BYTES ((uint64_t)4 << 30) /* 4 GiB */
#define MAX_DEPTH 24                         /* msgpack-c's own stack is 32 */
/* Memory bounded by the file size (common/limits.h says why): inputs or
 * outputs of one node, and node executions per byte of file.  The schedule
 * is what lets a small file ask for a huge graph: one step listed 10^6
 * times costs 3 MB and multiplies every node of its segment by 10^6
 * (validate.c refuses repeated steps as well). */
#define MAX_NODE_REFS VD_LIM_NODE_REFS_MAX
#define MAX_EXEC_PER_BYTE VD_LIM_EXEC_PER_BYTE
#define MAX_EXEC_SLACK ((uint64_t)VD_LIM_EXEC_SLACK)

/* ======================================================================
 * Pass 1: bounded scan of the raw encoding.
 * ====================================================================== */

static uint64_t be(const uint8_t *b, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = (v << 8) | b[i];
  return v;
}

/* top_pos (out, taken even on failure; NULL when the top object is not a
 * map): the byte offset of each key and value of the top-level map, in file
 * order, then len: 2 * pairs + 1 entries. */
static vd_rc scan(const uint8_t *b, size_t len, const char *file, size_t **top_pos, vd_diag *d) {
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
    uint64_t body = 0, items = 0; /* bytes to skip, child objects */
    int hdr = 0;                  /* length bytes following the type byte */
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) {
    } else if (t >= 0x80 && t <= 0x8f) items = 2 * (uint64_t)(t & 0x0f);
    else if (t >= 0x90 && t <= 0x9f) items = t & 0x0f;
    else if (t >= 0xa0 && t <= 0xbf) body = t & 0x1f;
    else {
      switch (t) {
      case 0xc4: case 0xd9: hdr = 1; break;          /* bin8, str8 */
      case 0xc5: case 0xda: hdr = 2; break;          /* bin16, str16 */
      case 0xc6: case 0xdb: hdr = 4; break;          /* bin32, str32 */
      case 0xc7: hdr = 1; body = 1; break;           /* ext8 (+type byte) */
      case 0xc8: hdr = 2; body = 1; break;
      case 0xc9: hdr = 4; body = 1; break;
      case 0xca: body = 4; break;                    /* float32 */
      case 0xcb: body = 8; break;                    /* float64 */
      case 0xcc: case 0xd0: body = 1; break;
      case 0xcd: case 0xd1: body = 2; break;
      case 0xce: case 0xd2: body = 4; break;
      case 0xcf: case 0xd3: body = 8; break;
      case 0xd4: body = 2; break;                    /* fixext1..16: type + data */
      case 0xd5: body = 3; break;
      case 0xd6: body = 5; break;
      case 0xd7: body = 9; break;
      case 0xd8: body = 17; break;
      case 0xdc: case 0xdd: case 0xde: case 0xdf: hdr = (t & 1) ? 4 : 2; break;
      default:
        VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "corrupt msgpack at byte %zu: invalid type byte 0x%02x", at, t);
      }
      if (hdr) {
        if (len - pos < (size_t)hdr)
          VD_FAIL(d, VD_EINPUT, file, NULL, NULL, "truncated msgpack at byte %zu: length field cut off", at);
        uint64_t n = be(b + pos, hdr);
        pos += (size_t)hdr;
        if (t >= 0xdc) items = (t >= 0xde) ? 2 * n : n;
        else body += n;
      }
    }
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

/* ======================================================================
 * Pass 3: typed walk of the object tree.
 * ====================================================================== */

typedef struct {
  const char *file;
  vd_diag *d;
  vd_plan_t *p;
  /* Record name, formatted only when an error is reported (rec_of): an
   * snprintf per record and per field was a third of the read time. */
  char rec[128];
  const char *rec_kind; /* "tensor"/"node": "<kind> <id> '<name>'"; NULL: rec is literal */
  const char *rec_arr;  /* when the id is unknown: "<arr>[<pos>]" */
  uint32_t rec_pos;
  int has_id;
  int64_t rec_id;
  const char *rec_name;
  uint32_t rec_name_len;
  char *sbuf[3]; /* scratch strings: 0 op/name/model, 1 node name, 2 node src */
  size_t scap[3];
  int64_t *ints;
  size_t cap_ints;
  uint32_t *refs[2];
  size_t cap_refs[2];
  /* Tensor file id -> index.  OPTIMIZATION-ONLY: while the ids read so far
   * are consecutive (base, base + 1, ...: what every generator and the
   * nnScaler converter write), the index is id - base and tmap stays empty;
   * the first other id moves the ids read so far into tmap.  Consecutive ids
   * are distinct, so duplicates are found exactly as before. */
  vd_idmap_t tmap;
  int ids_dense;
  int64_t id_base;
  /* Record arrays decoded one element at a time (see read_top): the top
   * map's entries, and per entry the byte offset of the next element of a
   * "tensors" or "nodes" array left undecoded (0: decoded as usual). */
  const char *buf;
  size_t len;
  const msgpack_object_kv *top_kv;
  size_t *lazy_at;
  uint32_t n_top;
  msgpack_zone *ez; /* the current element's objects, cleared per element */
  msgpack_object eobj;
} rctx;

static const char *rec_of(rctx *c);

#define RFAIL(c, field, ...) VD_FAIL((c)->d, VD_EINPUT, (c)->file, rec_of(c), (field), __VA_ARGS__)
#define ROOM(c) VD_FAIL((c)->d, VD_ENOMEM, (c)->file, rec_of(c), NULL, "out of memory")

typedef const msgpack_object mobj;

static const char *tname(mobj *o) {
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

static int str_is(mobj *o, const char *s) {
  size_t n = strlen(s);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

static const char *rec_of(rctx *c) {
  if (!c->rec_kind) return c->rec;
  if (!c->has_id) snprintf(c->rec, sizeof(c->rec), "%s[%" PRIu32 "]", c->rec_arr, c->rec_pos);
  else if (c->rec_name_len)
    snprintf(c->rec, sizeof(c->rec), "%s %" PRId64 " '%.*s'", c->rec_kind, c->rec_id,
             (int)(c->rec_name_len > 96 ? 96 : c->rec_name_len), c->rec_name);
  else snprintf(c->rec, sizeof(c->rec), "%s %" PRId64, c->rec_kind, c->rec_id);
  return c->rec;
}

/* A literal record name ("plan", "world"). */
static void set_rec_text(rctx *c, const char *text) {
  c->rec_kind = NULL;
  snprintf(c->rec, sizeof(c->rec), "%s", text);
}

static vd_rc get_int(rctx *c, mobj *o, const char *field, int64_t *v) {
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
  RFAIL(c, field, "expected an integer, got %s", tname(o));
}

static vd_rc get_i32(rctx *c, mobj *o, const char *field, int32_t *v) {
  int64_t x;
  VD_CHECK(get_int(c, o, field, &x));
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
  if (o->type != MSGPACK_OBJECT_STR) RFAIL(c, field, "expected a string, got %s", tname(o));
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
static vd_rc get_cstr(rctx *c, mobj *o, const char *field, int slot, const char **out) {
  const char *s;
  uint32_t n = 0;
  VD_CHECK(get_str(c, o, field, &s, &n));
  if (VD_GROW(c->sbuf[slot], c->scap[slot], (size_t)n + 1)) ROOM(c);
  memcpy(c->sbuf[slot], s, n);
  c->sbuf[slot][n] = '\0';
  *out = c->sbuf[slot];
  return VD_OK;
}

static vd_rc get_enum(rctx *c, mobj *o, const char *field, const char *const *names, int count, int *v) {
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

static vd_rc get_bool(rctx *c, mobj *o, const char *field, int *v) {
  if (o->type != MSGPACK_OBJECT_BOOLEAN) RFAIL(c, field, "expected a boolean, got %s", tname(o));
  *v = o->via.boolean ? 1 : 0;
  return VD_OK;
}

static vd_rc get_array(rctx *c, mobj *o, const char *field, uint32_t *n) {
  if (o->type != MSGPACK_OBJECT_ARRAY) RFAIL(c, field, "expected an array, got %s", tname(o));
  *n = o->via.array.size;
  return VD_OK;
}

/* Reads an array of integers into c->ints[0..*n). */
static vd_rc get_ints(rctx *c, mobj *o, const char *field, uint32_t *n) {
  char f[80];
  VD_CHECK(get_array(c, o, field, n));
  if (VD_GROW(c->ints, c->cap_ints, *n ? *n : 1)) ROOM(c);
  for (uint32_t i = 0; i < *n; i++) {
    mobj *e = &o->via.array.ptr[i];
    if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) c->ints[i] = e->via.i64;
    else if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER && e->via.u64 <= (uint64_t)INT64_MAX)
      c->ints[i] = (int64_t)e->via.u64;
    else {
      snprintf(f, sizeof(f), "%s[%" PRIu32 "]", field, i);
      return get_int(c, e, f, &c->ints[i]);
    }
  }
  return VD_OK;
}

/* Reads an int array of exactly `want` entries into dst. */
static vd_rc get_dims(rctx *c, mobj *o, const char *field, int want, int64_t *dst) {
  uint32_t n = 0;
  VD_CHECK(get_ints(c, o, field, &n));
  if (n != (uint32_t)want)
    RFAIL(c, field, "expected %d values (one per dim of the tensor's shape), got %" PRIu32, want, n);
  memcpy(dst, c->ints, (size_t)n * sizeof(int64_t));
  return VD_OK;
}

/* Looks up the keys of map o against keys[0..nk): slots[i] gets the value or
 * NULL.  Keys starting with "x_" are extensions and ignored; any other
 * unknown key, a non-string key or a repeated key is an error.  `what`
 * prefixes field names ("lin.", "world."...). */
static vd_rc get_fields(rctx *c, mobj *o, const char *field, const char *const *keys, int nk, mobj **slots,
                        const char *prefix) {
  char f[160];
  if (o->type != MSGPACK_OBJECT_MAP) RFAIL(c, field, "expected a map, got %s", tname(o));
  for (int k = 0; k < nk; k++) slots[k] = NULL;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    mobj *key = &o->via.map.ptr[i].key;
    if (key->type != MSGPACK_OBJECT_STR) RFAIL(c, field, "expected string keys, got %s as key %" PRIu32, tname(key), i);
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

static vd_rc need(rctx *c, mobj *slot, const char *field) {
  if (!slot) RFAIL(c, field, "missing required key");
  return VD_OK;
}

/* Element i of array a, which the caller visits in order 0, 1, ...: for a
 * record array left undecoded by read_top, the element is decoded now into
 * c->ez (valid until the next call). */
static vd_rc elem(rctx *c, mobj *a, uint32_t i, mobj **out) {
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
static void peek_rec(rctx *c, mobj *o, const char *kind, const char *arr, uint32_t pos) {
  c->rec_kind = kind;
  c->rec_arr = arr;
  c->rec_pos = pos;
  c->has_id = 0;
  c->rec_name_len = 0;
  if (o->type != MSGPACK_OBJECT_MAP) return;
  mobj *id = NULL, *name = NULL;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    mobj *k = &o->via.map.ptr[i].key;
    if (str_is(k, "id")) id = &o->via.map.ptr[i].val;
    if (str_is(k, "name")) name = &o->via.map.ptr[i].val;
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

/* ---- world ------------------------------------------------------------- */

enum { W_DP, W_TP, W_PP, W_SP, W_CP, W_EP, W_NM, W_REPLICAS, W_STORED, W_LAYOUT, W__N };
static const char *const world_keys[W__N] = {"dp", "tp", "pp", "sp", "cp", "ep", "nm",
                                             "replicas", "stored_ranks", "layout"};

static vd_rc read_world(rctx *c, mobj *o, vd_world_t *w, const char **layout) {
  mobj *f[W__N];
  set_rec_text(c, "world");
  VD_CHECK(get_fields(c, o, "world", world_keys, W__N, f, ""));
  int32_t *dst[W_LAYOUT] = {&w->dp, &w->tp, &w->pp, &w->sp, &w->cp, &w->ep, &w->nm, &w->replicas, &w->stored_ranks};
  for (int k = 0; k < W_LAYOUT; k++)
    if (f[k]) VD_CHECK(get_i32(c, f[k], world_keys[k], dst[k]));
  if (f[W_LAYOUT]) VD_CHECK(get_cstr(c, f[W_LAYOUT], "layout", 0, layout));
  if (w->stored_ranks < 1) RFAIL(c, "stored_ranks", "expected a degree >= 1, got %" PRId32, w->stored_ranks);
  return VD_OK;
}

/* ---- tensors ----------------------------------------------------------- */

enum { T_ID, T_NAME, T_RANK, T_SHAPE, T_DTYPE, T_ROLE, T_SCOPE, T_LIN, T__N };
static const char *const tensor_keys[T__N] = {"id", "name", "rank", "shape", "dtype", "role", "scope", "lin"};
enum { L_FULL, L_LO, L_HI, L_PART, L_DPS, L_MBS, L_DPP, L_MBP, L__N };
static const char *const lin_keys[L__N] = {"full", "lo", "hi", "part", "dp_shift", "mb_shift", "dp_part", "mb_part"};

static vd_rc read_lin(rctx *c, mobj *o, vd_tensor_t *t) {
  mobj *f[L__N];
  vd_lineage_ann *l = &t->lin;
  VD_CHECK(get_fields(c, o, "lin", lin_keys, L__N, f, "lin."));
  VD_CHECK(need(c, f[L_FULL], "lin.full"));
  VD_CHECK(get_int(c, f[L_FULL], "lin.full", &l->full));
  if (f[L_LO]) VD_CHECK(get_dims(c, f[L_LO], "lin.lo", t->ndim, l->lo));
  if (f[L_HI]) VD_CHECK(get_dims(c, f[L_HI], "lin.hi", t->ndim, l->hi));
  else
    for (int i = 0; i < t->ndim; i++)
      if (__builtin_add_overflow(l->lo[i], t->shape[i], &l->hi[i])) RFAIL(c, "lin.lo", "lo + shape overflows int64");
  l->part_k = 0;
  l->part_n = 1;
  if (f[L_PART]) {
    uint32_t n = 0;
    VD_CHECK(get_ints(c, f[L_PART], "lin.part", &n));
    if (n != 2) RFAIL(c, "lin.part", "expected [k, n] (2 integers), got %" PRIu32 " values", n);
    l->part_k = c->ints[0];
    l->part_n = c->ints[1];
    if (l->part_n < 1) RFAIL(c, "lin.part", "expected a part count n >= 1, got %" PRId64, l->part_n);
    if (l->part_n > VD_LIM_LIN_PART_MAX)
      RFAIL(c, "lin.part", "expected a part count n <= %d (LIN_PART_MAX, `verdict limits`), got %" PRId64,
            VD_LIM_LIN_PART_MAX, l->part_n);
  }
  if (f[L_DPS]) VD_CHECK(get_dims(c, f[L_DPS], "lin.dp_shift", t->ndim, l->dp_shift));
  if (f[L_MBS]) VD_CHECK(get_dims(c, f[L_MBS], "lin.mb_shift", t->ndim, l->mb_shift));
  if (f[L_DPP]) VD_CHECK(get_int(c, f[L_DPP], "lin.dp_part", &l->dp_part));
  if (f[L_MBP]) VD_CHECK(get_int(c, f[L_MBP], "lin.mb_part", &l->mb_part));
  t->has_lin = 1;
  return VD_OK;
}

static vd_rc read_tensor(rctx *c, mobj *o, uint32_t pos) {
  mobj *f[T__N];
  vd_tensor_t t;
  memset(&t, 0, sizeof(t));
  const char *name = "";
  int e = 0;
  peek_rec(c, o, "tensor", "tensors", pos);
  VD_CHECK(get_fields(c, o, "tensors", tensor_keys, T__N, f, ""));
  VD_CHECK(need(c, f[T_ID], "id"));
  VD_CHECK(get_int(c, f[T_ID], "id", &t.id));
  if (f[T_NAME]) VD_CHECK(get_cstr(c, f[T_NAME], "name", 0, &name));
  if (f[T_RANK]) VD_CHECK(get_i32(c, f[T_RANK], "rank", &t.rank));
  VD_CHECK(need(c, f[T_SHAPE], "shape"));
  uint32_t nd = 0;
  VD_CHECK(get_ints(c, f[T_SHAPE], "shape", &nd));
  if (nd > VD_MAX_DIMS) RFAIL(c, "shape", "expected at most %d dims, got %" PRIu32, VD_MAX_DIMS, nd);
  t.ndim = (int32_t)nd;
  for (uint32_t i = 0; i < nd; i++) {
    if (c->ints[i] < 1) {
      char fl[32];
      snprintf(fl, sizeof(fl), "shape[%" PRIu32 "]", i);
      RFAIL(c, fl, "expected a positive size, got %" PRId64, c->ints[i]);
    }
    t.shape[i] = c->ints[i];
  }
  t.dtype = VD_DT_F32;
  if (f[T_DTYPE]) {
    VD_CHECK(get_enum(c, f[T_DTYPE], "dtype", vd_dtype_names, VD_DT__COUNT, &e));
    t.dtype = (vd_dtype)e;
  }
  VD_CHECK(need(c, f[T_ROLE], "role"));
  VD_CHECK(get_enum(c, f[T_ROLE], "role", vd_role_names, VD_ROLE__COUNT, &e));
  t.role = (vd_role)e;
  VD_CHECK(need(c, f[T_SCOPE], "scope"));
  VD_CHECK(get_enum(c, f[T_SCOPE], "scope", vd_scope_names, VD_SCOPE__COUNT, &e));
  t.scope = (vd_scope)e;
  if (f[T_LIN]) VD_CHECK(read_lin(c, f[T_LIN], &t));
  uint32_t idx, old;
  if (vd_plan_add_tensor(c->p, &t, name, &idx) != VD_OK) ROOM(c);
  if (c->ids_dense) {
    if (idx == 0) c->id_base = t.id;
    if (idx == 0 || (t.id > c->id_base && (uint64_t)t.id - (uint64_t)c->id_base == idx)) return VD_OK;
    /* The ids stop being consecutive here: tmap takes the ones read so far. */
    c->ids_dense = 0;
    for (uint32_t i = 0; i < idx; i++)
      if (vd_idmap_put(&c->tmap, c->id_base + (int64_t)i, i, NULL) < 0) ROOM(c);
  }
  int r = vd_idmap_put(&c->tmap, t.id, idx, &old);
  if (r < 0) ROOM(c);
  if (r > 0) RFAIL(c, "id", "duplicate tensor id %" PRId64 " (also tensors[%" PRIu32 "])", t.id, old);
  return VD_OK;
}

/* ---- nodes ------------------------------------------------------------- */

enum { N_ID, N_OP, N_NAME, N_RANK, N_SEG, N_LAYER, N_PHASE, N_IN, N_OUT, N_ATTRS, N_COLL, N_GROUP, N_SPAN, N_SRC, N__N };
static const char *const node_keys[N__N] = {"id", "op", "name", "rank", "segment", "layer", "phase",
                                            "in", "out", "attrs", "coll", "group", "span_replicas", "src"};

/* Index of the tensor with file id `id` among those read so far: 1 and *idx,
 * or 0 if there is none. */
static int tensor_index(const rctx *c, int64_t id, uint32_t *idx) {
  if (!c->ids_dense) return vd_idmap_get(&c->tmap, id, idx);
  if (id < c->id_base || (uint64_t)id - (uint64_t)c->id_base >= c->p->n_tensors) return 0;
  *idx = (uint32_t)((uint64_t)id - (uint64_t)c->id_base);
  return 1;
}

static vd_rc read_refs(rctx *c, mobj *o, const char *field, int slot, uint32_t *n) {
  char f[32];
  /* No operator takes more (ops.h, VD_OP_MANY): a longer list is refused
   * here, before the graph and the stages multiply it. */
  if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size > MAX_NODE_REFS)
    RFAIL(c, field, "expected at most %d tensors, got %" PRIu32, MAX_NODE_REFS, o->via.array.size);
  VD_CHECK(get_ints(c, o, field, n));
  if (VD_GROW(c->refs[slot], c->cap_refs[slot], *n ? *n : 1)) ROOM(c);
  for (uint32_t i = 0; i < *n; i++) {
    if (!tensor_index(c, c->ints[i], &c->refs[slot][i])) {
      snprintf(f, sizeof(f), "%s[%" PRIu32 "]", field, i);
      RFAIL(c, f, "expected a tensor id, got %" PRId64 " (no such tensor)", c->ints[i]);
    }
  }
  return VD_OK;
}

static int is_num(mobj *o) {
  return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
         o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64 || o->type == MSGPACK_OBJECT_BOOLEAN;
}

static int is_float(mobj *o) { return o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64; }

static vd_rc read_attr(rctx *c, uint32_t node, mobj *k, mobj *v, uint32_t i) {
  const char *key;
  char f[160];
  if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 || memchr(k->via.str.ptr, 0, k->via.str.size)) {
    snprintf(f, sizeof(f), "attrs[%" PRIu32 "]", i);
    if (k->type != MSGPACK_OBJECT_STR) RFAIL(c, f, "expected a string key, got %s", tname(k));
    RFAIL(c, f, "expected a non-empty key without NUL bytes");
  }
  VD_CHECK(get_cstr(c, k, "attrs", 0, &key));
  /* The field name, for errors ("attrs.eps"); memcpy, not snprintf: this
   * runs for every attribute. */
  size_t kl = strlen(key);
  if (kl > sizeof(f) - 7) kl = sizeof(f) - 7;
  memcpy(f, "attrs.", 6);
  memcpy(f + 6, key, kl);
  f[6 + kl] = '\0';
  vd_rc rc = VD_OK;
  switch (v->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: {
    int64_t x;
    VD_CHECK(get_int(c, v, f, &x));
    rc = vd_plan_attr_int(c->p, node, key, x);
    break;
  }
  case MSGPACK_OBJECT_BOOLEAN: rc = vd_plan_attr_int(c->p, node, key, v->via.boolean ? 1 : 0); break;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: rc = vd_plan_attr_float(c->p, node, key, v->via.f64); break;
  case MSGPACK_OBJECT_STR: {
    const char *s;
    VD_CHECK(get_cstr(c, v, f, 1, &s));
    rc = vd_plan_attr_str(c->p, node, key, s);
    break;
  }
  case MSGPACK_OBJECT_ARRAY: {
    uint32_t n = v->via.array.size;
    int any_float = 0;
    char fe[180];
    for (uint32_t j = 0; j < n; j++) {
      mobj *e = &v->via.array.ptr[j];
      if (!is_num(e)) {
        snprintf(fe, sizeof(fe), "%s[%" PRIu32 "]", f, j);
        RFAIL(c, fe, "expected a number (attribute arrays hold integers or floats), got %s", tname(e));
      }
      any_float |= is_float(e);
    }
    if (any_float) {
      double *tmp = vd_malloc((n ? n : 1) * sizeof(double));
      if (!tmp) ROOM(c);
      for (uint32_t j = 0; j < n; j++) {
        mobj *e = &v->via.array.ptr[j];
        tmp[j] = is_float(e) ? e->via.f64
                 : e->type == MSGPACK_OBJECT_BOOLEAN ? (e->via.boolean ? 1.0 : 0.0)
                 : e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? (double)e->via.i64
                                                              : (double)e->via.u64;
      }
      rc = vd_plan_attr_floats(c->p, node, key, tmp, n);
      vd_free(tmp);
    } else {
      if (VD_GROW(c->ints, c->cap_ints, n ? n : 1)) ROOM(c);
      for (uint32_t j = 0; j < n; j++) {
        mobj *e = &v->via.array.ptr[j];
        snprintf(fe, sizeof(fe), "%s[%" PRIu32 "]", f, j);
        if (e->type == MSGPACK_OBJECT_BOOLEAN) c->ints[j] = e->via.boolean ? 1 : 0;
        else VD_CHECK(get_int(c, e, fe, &c->ints[j]));
      }
      rc = vd_plan_attr_ints(c->p, node, key, c->ints, n);
    }
    break;
  }
  default:
    RFAIL(c, f, "expected an integer, float, string, boolean or array of numbers, got %s", tname(v));
  }
  if (rc != VD_OK) ROOM(c);
  return VD_OK;
}

static vd_rc read_node(rctx *c, mobj *o, uint32_t pos) {
  mobj *f[N__N];
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  const char *op, *name = "", *src = "";
  int e = 0;
  peek_rec(c, o, "node", "nodes", pos);
  VD_CHECK(get_fields(c, o, "nodes", node_keys, N__N, f, ""));
  VD_CHECK(need(c, f[N_ID], "id"));
  VD_CHECK(get_int(c, f[N_ID], "id", &n.id));
  if (f[N_NAME]) VD_CHECK(get_cstr(c, f[N_NAME], "name", 1, &name));
  if (f[N_SRC]) VD_CHECK(get_cstr(c, f[N_SRC], "src", 2, &src));
  VD_CHECK(need(c, f[N_OP], "op"));
  VD_CHECK(get_cstr(c, f[N_OP], "op", 0, &op));
  if (!*op) RFAIL(c, "op", "expected an operator name, got \"\"");
  if (f[N_RANK]) VD_CHECK(get_i32(c, f[N_RANK], "rank", &n.rank));
  VD_CHECK(need(c, f[N_SEG], "segment"));
  VD_CHECK(get_i32(c, f[N_SEG], "segment", &n.segment));
  n.layer = -1;
  if (f[N_LAYER]) VD_CHECK(get_i32(c, f[N_LAYER], "layer", &n.layer));
  VD_CHECK(need(c, f[N_PHASE], "phase"));
  VD_CHECK(get_enum(c, f[N_PHASE], "phase", vd_phase_names, VD_PHASE__COUNT, &e));
  n.phase = (vd_phase)e;
  uint32_t n_in = 0, n_out = 0, n_group = 0;
  if (f[N_IN]) VD_CHECK(read_refs(c, f[N_IN], "in", 0, &n_in));
  if (f[N_OUT]) VD_CHECK(read_refs(c, f[N_OUT], "out", 1, &n_out));
  n.coll = -1;
  if (f[N_COLL]) {
    VD_CHECK(get_int(c, f[N_COLL], "coll", &n.coll));
    if (n.coll < 0) RFAIL(c, "coll", "expected a collective key >= 0, got %" PRId64, n.coll);
  }
  if (f[N_SPAN]) VD_CHECK(get_bool(c, f[N_SPAN], "span_replicas", &n.span_replicas));
  if (f[N_ATTRS] && f[N_ATTRS]->type != MSGPACK_OBJECT_MAP)
    RFAIL(c, "attrs", "expected a map, got %s", tname(f[N_ATTRS]));
  /* The group goes last into c->ints: read_refs and attrs reuse it. */
  if (f[N_GROUP]) VD_CHECK(get_ints(c, f[N_GROUP], "group", &n_group));
  uint32_t idx;
  if (vd_plan_add_node(c->p, &n, op, name, c->refs[0], n_in, c->refs[1], n_out, c->ints, n_group, &idx) != VD_OK ||
      vd_plan_set_node_src(c->p, idx, src) != VD_OK)
    ROOM(c);
  if (f[N_ATTRS]) {
    mobj *a = f[N_ATTRS];
    for (uint32_t i = 0; i < a->via.map.size; i++)
      VD_CHECK(read_attr(c, idx, &a->via.map.ptr[i].key, &a->via.map.ptr[i].val, i));
  }
  return VD_OK;
}

/* ---- top level --------------------------------------------------------- */

enum { P_FORMAT, P_VERSION, P_KIND, P_MODEL, P_WORLD, P_SEGMENTS, P_SCHEDULE, P_TENSORS, P_NODES, P__N };
static const char *const plan_keys[P__N] = {"format", "version", "kind", "model", "world",
                                            "segments", "schedule", "tensors", "nodes"};
static const char *const kind_names[2] = {"single", "parallel"};

static vd_rc read_schedule(rctx *c, mobj *o) {
  char f[64];
  for (uint32_t r = 0; r < o->via.array.size; r++) {
    mobj *prog = &o->via.array.ptr[r];
    uint32_t n = 0;
    c->rec_kind = NULL;
    snprintf(c->rec, sizeof(c->rec), "schedule of rank %" PRIu32, r);
    VD_CHECK(get_array(c, prog, "steps", &n));
    for (uint32_t i = 0; i < n; i++) {
      mobj *st = &prog->via.array.ptr[i];
      snprintf(f, sizeof(f), "step[%" PRIu32 "]", i);
      if (st->type != MSGPACK_OBJECT_ARRAY || st->via.array.size != 2)
        RFAIL(c, f, "expected [segment, mb] (an array of 2 integers), got %s", tname(st));
      int32_t seg, mb;
      snprintf(f, sizeof(f), "step[%" PRIu32 "].segment", i);
      VD_CHECK(get_i32(c, &st->via.array.ptr[0], f, &seg));
      snprintf(f, sizeof(f), "step[%" PRIu32 "].mb", i);
      VD_CHECK(get_i32(c, &st->via.array.ptr[1], f, &mb));
      if (vd_plan_add_step(c->p, (int32_t)r, seg, mb) != VD_OK) ROOM(c);
    }
  }
  return VD_OK;
}

static vd_rc build(rctx *c, mobj *top) {
  mobj *f[P__N];
  vd_plan_t *p = c->p;
  int kind = 0;
  set_rec_text(c, "plan");
  if (top->type != MSGPACK_OBJECT_MAP)
    RFAIL(c, NULL, "expected a msgpack map at the top level (a verdict plan), got %s", tname(top));
  VD_CHECK(get_fields(c, top, NULL, plan_keys, P__N, f, ""));
  VD_CHECK(need(c, f[P_FORMAT], "format"));
  if (!str_is(f[P_FORMAT], VD_PLAN_FORMAT)) {
    if (f[P_FORMAT]->type == MSGPACK_OBJECT_STR)
      RFAIL(c, "format", "expected \"%s\" (not a verdict plan?), got \"%.*s\"", VD_PLAN_FORMAT,
            (int)(f[P_FORMAT]->via.str.size > 64 ? 64 : f[P_FORMAT]->via.str.size), f[P_FORMAT]->via.str.ptr);
    RFAIL(c, "format", "expected the string \"%s\", got %s", VD_PLAN_FORMAT, tname(f[P_FORMAT]));
  }
  VD_CHECK(need(c, f[P_VERSION], "version"));
  int64_t version = 0;
  VD_CHECK(get_int(c, f[P_VERSION], "version", &version));
  if (version != VD_PLAN_VERSION)
    RFAIL(c, "version", "expected %d (the only format version this verdict supports), got %" PRId64,
          VD_PLAN_VERSION, version);
  VD_CHECK(need(c, f[P_KIND], "kind"));
  VD_CHECK(get_enum(c, f[P_KIND], "kind", kind_names, 2, &kind));
  for (int k = P_SEGMENTS; k <= P_NODES; k++) VD_CHECK(need(c, f[k], plan_keys[k]));
  if (vd_plan_init(p, kind == 0 ? VD_PLAN_SINGLE : VD_PLAN_PARALLEL) != VD_OK) ROOM(c);
  if (f[P_MODEL]) {
    const char *m;
    VD_CHECK(get_cstr(c, f[P_MODEL], "model", 0, &m));
    if (vd_plan_str(p, m, &p->model) != VD_OK) ROOM(c);
  }
  vd_world_t w = {.dp = 1, .tp = 1, .pp = 1, .sp = 0, .cp = 1, .ep = 1, .nm = 1, .replicas = 1, .stored_ranks = 1};
  const char *layout = "";
  if (f[P_WORLD]) VD_CHECK(read_world(c, f[P_WORLD], &w, &layout));
  if (vd_plan_str(p, layout, &w.layout) != VD_OK) ROOM(c);
  /* The schedule has one entry per stored rank; checking its length first
   * means the programs array is backed by file bytes. */
  uint32_t n = 0;
  set_rec_text(c, "plan");
  VD_CHECK(get_array(c, f[P_SCHEDULE], "schedule", &n));
  if (n != (uint32_t)w.stored_ranks)
    RFAIL(c, "schedule", "expected one program per stored rank (world.stored_ranks = %" PRId32 "), got %" PRIu32,
          w.stored_ranks, n);
  if (vd_plan_set_world(p, &w) != VD_OK) ROOM(c);

  VD_CHECK(get_array(c, f[P_SEGMENTS], "segments", &n));
  for (uint32_t i = 0; i < n; i++) {
    char fl[32];
    const char *s;
    int32_t seg;
    snprintf(fl, sizeof(fl), "segments[%" PRIu32 "]", i);
    VD_CHECK(get_cstr(c, &f[P_SEGMENTS]->via.array.ptr[i], fl, 0, &s));
    if (vd_plan_add_segment(p, s, &seg) != VD_OK) ROOM(c);
  }
  VD_CHECK(read_schedule(c, f[P_SCHEDULE]));

  set_rec_text(c, "plan");
  VD_CHECK(get_array(c, f[P_TENSORS], "tensors", &n));
  /* OPTIMIZATION-ONLY: one allocation instead of twenty doublings (each a
   * copy or remap of up to 300 MB, and 4 KB pages where one block gets huge
   * pages, common/mem.c).  A tensor record takes more than 16 bytes of file,
   * so the reservation stays backed by the file length. */
  if (VD_GROW(p->tensors, p->cap_tensors, n < c->len / 16 ? n : c->len / 16)) ROOM(c);
  vd_idmap_free(&c->tmap);
  if (vd_idmap_init(&c->tmap, n) != VD_OK) ROOM(c);
  c->ids_dense = 1;
  for (uint32_t i = 0; i < n; i++) {
    mobj *o;
    VD_CHECK(elem(c, f[P_TENSORS], i, &o));
    VD_CHECK(read_tensor(c, o, i));
  }

  set_rec_text(c, "plan");
  VD_CHECK(get_array(c, f[P_NODES], "nodes", &n));
  if (VD_GROW(p->nodes, p->cap_nodes, n < c->len / 16 ? n : c->len / 16)) ROOM(c); /* as tensors */
  for (uint32_t i = 0; i < n; i++) {
    mobj *o;
    VD_CHECK(elem(c, f[P_NODES], i, &o));
    VD_CHECK(read_node(c, o, i));
  }
  return VD_OK;
}

/* Node executions of one replica (plans/budget.c) against
 * MAX_EXEC_PER_BYTE * len.  O(steps + nodes). */
static vd_rc check_expansion(const vd_plan_t *p, size_t len, const char *file, vd_diag *d) {
  uint64_t budget = MAX_EXEC_SLACK + (uint64_t)MAX_EXEC_PER_BYTE * len, exec = 0;
  VD_CHECK(vd_plan_executions(p, budget, &exec, d));
  if (exec > budget)
    VD_FAIL(d, VD_EINPUT, file, "schedule", NULL,
            "the schedule runs more than %" PRIu64 " node executions (%d per byte of a %zu-byte plan)", budget,
            MAX_EXEC_PER_BYTE, len);
  return VD_OK;
}

/* Decodes the top-level map (scan found it well formed, entries at top_pos)
 * into c->top_kv, except the values of "tensors" and "nodes" that are
 * arrays: those get an array object without elements (size only), and
 * elem() decodes their records one at a time into a zone that is cleared
 * per record.  The tree of a 166 MB plan was 1.4 GB of msgpack objects
 * allocated (and page-faulted) at once; a record's tree is a few hundred
 * bytes that stay in cache.  The objects are those msgpack-c builds for the
 * whole file, element for element, so build() reads the same values and
 * reports the same first error: scan has already checked the encoding, so
 * decoding a part cannot fail where decoding the whole would not (short of
 * memory).  *top (out) is the map. */
static vd_rc read_top(rctx *c, const size_t *top_pos, msgpack_zone *tz, msgpack_object *top) {
  const uint8_t *b = (const uint8_t *)c->buf;
  uint32_t pairs = b[0] <= 0x8f ? (uint32_t)(b[0] & 0x0f) : (uint32_t)be(b + 1, b[0] == 0xde ? 2 : 4);
  msgpack_object_kv *kv = vd_calloc(pairs ? pairs : 1, sizeof(*kv));
  c->lazy_at = vd_calloc(pairs ? pairs : 1, sizeof(*c->lazy_at));
  c->top_kv = kv;
  if (!kv || !c->lazy_at) VD_FAIL(c->d, VD_ENOMEM, c->file, NULL, NULL, "out of memory");
  c->n_top = pairs;
  for (uint32_t i = 0; i < pairs; i++) {
    size_t off = top_pos[2 * i], v = top_pos[2 * i + 1];
    msgpack_unpack_return ur = msgpack_unpack(c->buf, v, &off, tz, &kv[i].key);
    if (ur == MSGPACK_UNPACK_SUCCESS) {
      uint8_t t = b[v];
      int hdr = (t >= 0x90 && t <= 0x9f) ? 1 : t == 0xdc ? 3 : t == 0xdd ? 5 : 0;
      if (hdr && (str_is(&kv[i].key, "tensors") || str_is(&kv[i].key, "nodes"))) {
        kv[i].val.type = MSGPACK_OBJECT_ARRAY;
        kv[i].val.via.array.size = hdr == 1 ? (uint32_t)(t & 0x0f) : (uint32_t)be(b + v + 1, hdr - 1);
        kv[i].val.via.array.ptr = NULL;
        c->lazy_at[i] = v + (size_t)hdr;
        continue;
      }
      off = v;
      ur = msgpack_unpack(c->buf, top_pos[2 * i + 2], &off, tz, &kv[i].val);
    }
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
      VD_FAIL(c->d, VD_ENOMEM, c->file, NULL, NULL, "out of memory decoding msgpack");
    if (ur != MSGPACK_UNPACK_SUCCESS)
      VD_FAIL(c->d, VD_EINPUT, c->file, NULL, NULL, "corrupt msgpack (decoder status %d at byte %zu)", (int)ur, off);
  }
  top->type = MSGPACK_OBJECT_MAP;
  top->via.map.size = pairs;
  top->via.map.ptr = kv;
  return VD_OK;
}

vd_rc vd_plan_read_buffer(const char *buf, size_t len, const char *name, vd_plan_t *p, vd_diag *d) {
  rctx c;
  memset(&c, 0, sizeof(c));
  memset(p, 0, sizeof(*p));
  c.file = name ? name : "";
  c.d = d;
  c.p = p;
  if ((uint64_t)len > MAX_FILE_BYTES)
    VD_FAIL(d, VD_EINPUT, c.file, NULL, NULL, "plan of %zu bytes refused (limit 4 GiB)", len);
  if (len == 0) VD_FAIL(d, VD_EINPUT, c.file, NULL, NULL, "empty file (expected a msgpack map)");
  /* A pickle starts with PROTO (0x80) and its version: nnScaler writes its
   * execution plans so, and users pass them here first. */
  if (len >= 2 && (uint8_t)buf[0] == 0x80 && (uint8_t)buf[1] >= 2 && (uint8_t)buf[1] <= 5)
    VD_FAIL(d, VD_EINPUT, c.file, NULL, NULL,
            "a Python pickle, not a verdict plan (msgpack); convert nnScaler plans first: "
            "tools/nnscaler2plan --sm SINGLE.pkl --pm PARALLEL.pkl --single S.plan --parallel P.plan");
  size_t *top_pos = NULL;
  vd_rc rc = scan((const uint8_t *)buf, len, c.file, &top_pos, d);
  if (rc != VD_OK) {
    vd_free(top_pos);
    return rc;
  }

  if (top_pos) {
    /* A map: decoded a record at a time (read_top). */
    msgpack_zone *tz = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    c.ez = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
    c.buf = buf;
    c.len = len;
    msgpack_object top;
    if (!tz || !c.ez) rc = VD_ERR(d, VD_ENOMEM, c.file, NULL, NULL, "out of memory decoding msgpack");
    else if ((rc = read_top(&c, top_pos, tz, &top)) == VD_OK) rc = build(&c, &top);
    if (tz) msgpack_zone_free(tz);
    if (c.ez) msgpack_zone_free(c.ez);
    vd_free((void *)c.top_kv);
    vd_free(c.lazy_at);
    vd_free(top_pos);
  } else {
    /* Not a map: build() names the type. */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&u, buf, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) rc = VD_ERR(d, VD_ENOMEM, c.file, NULL, NULL, "out of memory decoding msgpack");
    else if (ur != MSGPACK_UNPACK_SUCCESS || off != len)
      rc = VD_ERR(d, VD_EINPUT, c.file, NULL, NULL, "corrupt msgpack (decoder status %d at byte %zu)", (int)ur, off);
    else rc = build(&c, &u.data);
    msgpack_unpacked_destroy(&u);
  }
  vd_free(c.sbuf[0]);
  vd_free(c.sbuf[1]);
  vd_free(c.sbuf[2]);
  vd_free(c.ints);
  vd_free(c.refs[0]);
  vd_free(c.refs[1]);
  vd_idmap_free(&c.tmap);
  if (rc == VD_OK) rc = vd_plan_validate(p, c.file, d);
  if (rc == VD_OK) rc = check_expansion(p, len, c.file, d);
  if (rc == VD_OK) p->file_bytes = len;
  if (rc != VD_OK) vd_plan_free(p);
  return rc;
}

vd_rc vd_plan_read_file(const char *path, vd_plan_t *p, vd_diag *d) {
  memset(p, 0, sizeof(*p));
  /* O_NONBLOCK: opening a FIFO for reading blocks until a writer appears;
   * with it the open returns at once and fstat refuses the FIFO.  A
   * regular file ignores the flag. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "not a regular file");
  }
  FILE *fp = fdopen(fd, "rb");
  if (!fp) {
    close(fd);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot open: %s", strerror(errno));
  }
  if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
    fclose(fp);
    VD_FAIL(d, VD_EINPUT, path, NULL, NULL, "plan of %lld bytes refused (limit 4 GiB)", (long long)st.st_size);
  }
  size_t len = (size_t)st.st_size;
  char *buf = vd_malloc(len ? len : 1);
  if (!buf) {
    fclose(fp);
    VD_FAIL(d, VD_ENOMEM, path, NULL, NULL, "out of memory reading %zu bytes", len);
  }
  size_t got = len ? fread(buf, 1, len, fp) : 0;
  int err = ferror(fp);
  fclose(fp);
  if (got != len || err) {
    vd_free(buf);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "read error (%zu of %zu bytes)", got, len);
  }
  vd_rc rc = vd_plan_read_buffer(buf, len, path, p, d);
  vd_free(buf);
  return rc;
}

/* ======================================================================
 * Writer.
 * ====================================================================== */

static void pack_cstr(msgpack_packer *pk, const char *s) {
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_int(msgpack_packer *pk, const char *k, int64_t v) {
  pack_cstr(pk, k);
  msgpack_pack_int64(pk, v);
}

static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v) {
  pack_cstr(pk, k);
  pack_cstr(pk, v);
}

static void pack_i64s(msgpack_packer *pk, const int64_t *v, size_t n) {
  msgpack_pack_array(pk, n);
  for (size_t i = 0; i < n; i++) msgpack_pack_int64(pk, v[i]);
}

static int nonzero(const int64_t *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i]) return 1;
  return 0;
}

static void pack_tensor(msgpack_packer *pk, const vd_plan_t *p, const vd_tensor_t *t) {
  const char *name = vd_plan_s(p, t->name);
  size_t nk = 4 + (*name != 0) + (t->rank != 0) + (t->dtype != VD_DT_F32) + (t->has_lin != 0);
  msgpack_pack_map(pk, nk);
  pack_kv_int(pk, "id", t->id);
  if (*name) pack_kv_str(pk, "name", name);
  if (t->rank) pack_kv_int(pk, "rank", t->rank);
  pack_cstr(pk, "shape");
  pack_i64s(pk, t->shape, (size_t)t->ndim);
  if (t->dtype != VD_DT_F32) pack_kv_str(pk, "dtype", vd_dtype_names[t->dtype]);
  pack_kv_str(pk, "role", vd_role_names[t->role]);
  pack_kv_str(pk, "scope", vd_scope_names[t->scope]);
  if (!t->has_lin) return;
  const vd_lineage_ann *l = &t->lin;
  int has_lo = nonzero(l->lo, t->ndim), has_part = l->part_k != 0 || l->part_n != 1;
  int has_dps = nonzero(l->dp_shift, t->ndim), has_mbs = nonzero(l->mb_shift, t->ndim);
  /* hi is omitted: validation guarantees hi = lo + shape, its default. */
  pack_cstr(pk, "lin");
  msgpack_pack_map(pk, 1 + (size_t)(has_lo + has_part + has_dps + has_mbs + (l->dp_part != 0) + (l->mb_part != 0)));
  pack_kv_int(pk, "full", l->full);
  if (has_lo) { pack_cstr(pk, "lo"); pack_i64s(pk, l->lo, (size_t)t->ndim); }
  if (has_part) {
    int64_t kn[2] = {l->part_k, l->part_n};
    pack_cstr(pk, "part");
    pack_i64s(pk, kn, 2);
  }
  if (has_dps) { pack_cstr(pk, "dp_shift"); pack_i64s(pk, l->dp_shift, (size_t)t->ndim); }
  if (has_mbs) { pack_cstr(pk, "mb_shift"); pack_i64s(pk, l->mb_shift, (size_t)t->ndim); }
  if (l->dp_part) pack_kv_int(pk, "dp_part", l->dp_part);
  if (l->mb_part) pack_kv_int(pk, "mb_part", l->mb_part);
}

static void pack_refs(msgpack_packer *pk, const vd_plan_t *p, const char *key, const uint32_t *r, uint32_t n) {
  pack_cstr(pk, key);
  msgpack_pack_array(pk, n);
  for (uint32_t i = 0; i < n; i++) msgpack_pack_int64(pk, p->tensors[r[i]].id);
}

static void pack_node(msgpack_packer *pk, const vd_plan_t *p, const vd_node_t *n) {
  const char *name = vd_plan_s(p, n->name), *src = vd_plan_s(p, n->src);
  size_t nk = 4 + (*name != 0) + (*src != 0) + (n->rank != 0) + (n->layer != -1) + (n->n_in != 0) + (n->n_out != 0) +
              (n->n_attr != 0) + (n->coll >= 0) + (n->n_group != 0) + (n->span_replicas != 0);
  msgpack_pack_map(pk, nk);
  pack_kv_int(pk, "id", n->id);
  pack_kv_str(pk, "op", vd_plan_s(p, n->op));
  if (*name) pack_kv_str(pk, "name", name);
  if (*src) pack_kv_str(pk, "src", src);
  if (n->rank) pack_kv_int(pk, "rank", n->rank);
  pack_kv_int(pk, "segment", n->segment);
  if (n->layer != -1) pack_kv_int(pk, "layer", n->layer);
  pack_kv_str(pk, "phase", vd_phase_names[n->phase]);
  if (n->n_in) pack_refs(pk, p, "in", vd_node_inputs(p, n), n->n_in);
  if (n->n_out) pack_refs(pk, p, "out", vd_node_outputs(p, n), n->n_out);
  if (n->n_attr) {
    pack_cstr(pk, "attrs");
    msgpack_pack_map(pk, n->n_attr);
    for (uint32_t i = 0; i < n->n_attr; i++) {
      const vd_attr_t *a = &p->attrs[n->attr_off + i];
      pack_cstr(pk, vd_plan_s(p, a->key));
      switch (a->kind) {
      case VD_ATTR_INT: msgpack_pack_int64(pk, a->v.i); break;
      case VD_ATTR_FLOAT: msgpack_pack_double(pk, a->v.f); break;
      case VD_ATTR_STR: pack_cstr(pk, vd_plan_s(p, a->v.s)); break;
      case VD_ATTR_INTS: pack_i64s(pk, p->ints + a->v.off, a->len); break;
      case VD_ATTR_FLOATS:
        msgpack_pack_array(pk, a->len);
        for (uint32_t j = 0; j < a->len; j++) msgpack_pack_double(pk, p->floats[a->v.off + j]);
        break;
      }
    }
  }
  if (n->coll >= 0) pack_kv_int(pk, "coll", n->coll);
  if (n->n_group) { pack_cstr(pk, "group"); pack_i64s(pk, vd_node_group(p, n), n->n_group); }
  if (n->span_replicas) { pack_cstr(pk, "span_replicas"); msgpack_pack_true(pk); }
}

static void pack_plan(msgpack_packer *pk, const vd_plan_t *p) {
  const char *model = vd_plan_s(p, p->model), *layout = vd_plan_s(p, p->world.layout);
  const vd_world_t *w = &p->world;
  msgpack_pack_map(pk, 8 + (*model != 0));
  pack_kv_str(pk, "format", VD_PLAN_FORMAT);
  pack_kv_int(pk, "version", VD_PLAN_VERSION);
  pack_kv_str(pk, "kind", p->kind == VD_PLAN_SINGLE ? "single" : "parallel");
  if (*model) pack_kv_str(pk, "model", model);
  pack_cstr(pk, "world");
  msgpack_pack_map(pk, 9 + (*layout != 0));
  pack_kv_int(pk, "dp", w->dp);
  pack_kv_int(pk, "tp", w->tp);
  pack_kv_int(pk, "pp", w->pp);
  pack_kv_int(pk, "sp", w->sp);
  pack_kv_int(pk, "cp", w->cp);
  pack_kv_int(pk, "ep", w->ep);
  pack_kv_int(pk, "nm", w->nm);
  pack_kv_int(pk, "replicas", w->replicas);
  pack_kv_int(pk, "stored_ranks", w->stored_ranks);
  if (*layout) pack_kv_str(pk, "layout", layout);
  pack_cstr(pk, "segments");
  msgpack_pack_array(pk, p->n_segments);
  for (size_t i = 0; i < p->n_segments; i++) pack_cstr(pk, vd_plan_s(p, p->segments[i]));
  pack_cstr(pk, "schedule");
  msgpack_pack_array(pk, (size_t)w->stored_ranks);
  for (int32_t r = 0; r < w->stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    msgpack_pack_array(pk, pr->n_steps);
    for (uint32_t i = 0; i < pr->n_steps; i++) {
      const vd_step_t *st = &p->steps[pr->step_off + i];
      msgpack_pack_array(pk, 2);
      msgpack_pack_int64(pk, st->segment);
      msgpack_pack_int64(pk, st->mb);
    }
  }
  pack_cstr(pk, "tensors");
  msgpack_pack_array(pk, p->n_tensors);
  for (size_t i = 0; i < p->n_tensors; i++) pack_tensor(pk, p, &p->tensors[i]);
  pack_cstr(pk, "nodes");
  msgpack_pack_array(pk, p->n_nodes);
  for (size_t i = 0; i < p->n_nodes; i++) pack_node(pk, p, &p->nodes[i]);
}

/* fwrite-backed msgpack writer that remembers a short write. */
typedef struct {
  FILE *fp;
  int failed;
} fsink;

static int sink_write(void *data, const char *buf, size_t len) {
  fsink *s = data;
  if (s->failed || fwrite(buf, 1, len, s->fp) != len) {
    s->failed = 1;
    return -1;
  }
  return 0;
}

vd_rc vd_plan_write_file(const vd_plan_t *p, const char *path, vd_diag *d) {
  VD_CHECK(vd_plan_validate(p, path, d));
  /* common/outfile.h: the path is checked (no FIFO, device, link), the
   * plan goes to an exclusive temporary renamed over it. */
  vd_outfile of;
  VD_CHECK(vd_outfile_open(&of, path, 0, d));
  fsink s = {of.fp, 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &s, sink_write);
  pack_plan(&pk, p);
  if (s.failed) {
    int err = errno;
    vd_outfile_abort(&of);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "write failed: %s", strerror(err));
  }
  return vd_outfile_commit(&of, d);
}
