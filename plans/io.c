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
 * Files: this one (pass 2, the top level, vd_plan_read_*), io_scan.c
 * (pass 1), io_fields.c and io_records.c (pass 3), io_write.c (the
 * writer); io_int.h what they share.
 *
 * Writer: validates, then streams the map through a msgpack_packer into an
 * exclusive temporary file next to the target and renames it into place
 * (common/outfile.h: a FIFO, device or link at the path is refused, an
 * existing file's mode is kept), so a reader never sees a half-written plan.  Fields equal to their documented default
 * are omitted.
 */
#include "io_int.h"

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
    VD_CHECK(vd_plan_i_get_array(c, prog, "steps", &n));
    for (uint32_t i = 0; i < n; i++) {
      mobj *st = &prog->via.array.ptr[i];
      snprintf(f, sizeof(f), "step[%" PRIu32 "]", i);
      if (st->type != MSGPACK_OBJECT_ARRAY || st->via.array.size != 2)
        RFAIL(c, f, "expected [segment, mb] (an array of 2 integers), got %s", vd_plan_i_tname(st));
      int32_t seg, mb;
      snprintf(f, sizeof(f), "step[%" PRIu32 "].segment", i);
      VD_CHECK(vd_plan_i_get_i32(c, &st->via.array.ptr[0], f, &seg));
      snprintf(f, sizeof(f), "step[%" PRIu32 "].mb", i);
      VD_CHECK(vd_plan_i_get_i32(c, &st->via.array.ptr[1], f, &mb));
      if (vd_plan_add_step(c->p, (int32_t)r, seg, mb) != VD_OK) ROOM(c);
    }
  }
  return VD_OK;
}

/* The top-level map's fields (f, out) and its header: format, version,
 * kind (out), and the required arrays present. */
static vd_rc read_header(rctx *c, mobj *top, mobj **f, int *kind) {
  vd_plan_i_set_rec_text(c, "plan");
  if (top->type != MSGPACK_OBJECT_MAP)
    RFAIL(c, NULL, "expected a msgpack map at the top level (a verdict plan), got %s", vd_plan_i_tname(top));
  VD_CHECK(vd_plan_i_get_fields(c, top, NULL, plan_keys, P__N, f, ""));
  VD_CHECK(vd_plan_i_need(c, f[P_FORMAT], "format"));
  if (!vd_plan_i_str_is(f[P_FORMAT], VD_PLAN_FORMAT)) {
    if (f[P_FORMAT]->type == MSGPACK_OBJECT_STR)
      RFAIL(c, "format", "expected \"%s\" (not a verdict plan?), got \"%.*s\"", VD_PLAN_FORMAT,
            (int)(f[P_FORMAT]->via.str.size > 64 ? 64 : f[P_FORMAT]->via.str.size), f[P_FORMAT]->via.str.ptr);
    RFAIL(c, "format", "expected the string \"%s\", got %s", VD_PLAN_FORMAT, vd_plan_i_tname(f[P_FORMAT]));
  }
  VD_CHECK(vd_plan_i_need(c, f[P_VERSION], "version"));
  int64_t version = 0;
  VD_CHECK(vd_plan_i_get_int(c, f[P_VERSION], "version", &version));
  if (version != VD_PLAN_VERSION)
    RFAIL(c, "version", "expected %d (the only format version this verdict supports), got %" PRId64,
          VD_PLAN_VERSION, version);
  VD_CHECK(vd_plan_i_need(c, f[P_KIND], "kind"));
  VD_CHECK(vd_plan_i_get_enum(c, f[P_KIND], "kind", kind_names, 2, kind));
  for (int k = P_SEGMENTS; k <= P_NODES; k++) VD_CHECK(vd_plan_i_need(c, f[k], plan_keys[k]));
  return VD_OK;
}

/* The model description and the world, set once the schedule's length
 * matches the stored ranks. */
static vd_rc read_model_world(rctx *c, mobj **f) {
  vd_plan_t *p = c->p;
  if (f[P_MODEL]) {
    const char *m;
    VD_CHECK(vd_plan_i_get_cstr(c, f[P_MODEL], "model", 0, &m));
    if (vd_plan_str(p, m, &p->model) != VD_OK) ROOM(c);
  }
  vd_world_t w = {.dp = 1, .tp = 1, .pp = 1, .sp = 0, .cp = 1, .ep = 1, .nm = 1, .replicas = 1, .stored_ranks = 1};
  const char *layout = "";
  if (f[P_WORLD]) VD_CHECK(vd_plan_i_read_world(c, f[P_WORLD], &w, &layout));
  if (vd_plan_str(p, layout, &w.layout) != VD_OK) ROOM(c);
  /* The schedule has one entry per stored rank; checking its length first
   * means the programs array is backed by file bytes. */
  uint32_t n = 0;
  vd_plan_i_set_rec_text(c, "plan");
  VD_CHECK(vd_plan_i_get_array(c, f[P_SCHEDULE], "schedule", &n));
  if (n != (uint32_t)w.stored_ranks)
    RFAIL(c, "schedule", "expected one program per stored rank (world.stored_ranks = %" PRId32 "), got %" PRIu32,
          w.stored_ranks, n);
  if (vd_plan_set_world(p, &w) != VD_OK) ROOM(c);
  return VD_OK;
}

static vd_rc read_segments(rctx *c, mobj *segs) {
  uint32_t n = 0;
  VD_CHECK(vd_plan_i_get_array(c, segs, "segments", &n));
  for (uint32_t i = 0; i < n; i++) {
    char fl[32];
    const char *s;
    int32_t seg;
    snprintf(fl, sizeof(fl), "segments[%" PRIu32 "]", i);
    VD_CHECK(vd_plan_i_get_cstr(c, &segs->via.array.ptr[i], fl, 0, &s));
    if (vd_plan_add_segment(c->p, s, &seg) != VD_OK) ROOM(c);
  }
  return VD_OK;
}

/* The tensor and node records, one at a time (read_top). */
static vd_rc read_records(rctx *c, mobj **f) {
  vd_plan_t *p = c->p;
  uint32_t n = 0;
  vd_plan_i_set_rec_text(c, "plan");
  VD_CHECK(vd_plan_i_get_array(c, f[P_TENSORS], "tensors", &n));
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
    VD_CHECK(vd_plan_i_elem(c, f[P_TENSORS], i, &o));
    VD_CHECK(vd_plan_i_read_tensor(c, o, i));
  }

  vd_plan_i_set_rec_text(c, "plan");
  VD_CHECK(vd_plan_i_get_array(c, f[P_NODES], "nodes", &n));
  if (VD_GROW(p->nodes, p->cap_nodes, n < c->len / 16 ? n : c->len / 16)) ROOM(c); /* as tensors */
  for (uint32_t i = 0; i < n; i++) {
    mobj *o;
    VD_CHECK(vd_plan_i_elem(c, f[P_NODES], i, &o));
    VD_CHECK(vd_plan_i_read_node(c, o, i));
  }
  return VD_OK;
}

static vd_rc build(rctx *c, mobj *top) {
  mobj *f[P__N];
  int kind = 0;
  VD_CHECK(read_header(c, top, f, &kind));
  if (vd_plan_init(c->p, kind == 0 ? VD_PLAN_SINGLE : VD_PLAN_PARALLEL) != VD_OK) ROOM(c);
  VD_CHECK(read_model_world(c, f));
  VD_CHECK(read_segments(c, f[P_SEGMENTS]));
  VD_CHECK(read_schedule(c, f[P_SCHEDULE]));
  return read_records(c, f);
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
  uint32_t pairs = b[0] <= 0x8f ? (uint32_t)(b[0] & 0x0f) : (uint32_t)vd_plan_i_be(b + 1, b[0] == 0xde ? 2 : 4);
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
      if (hdr && (vd_plan_i_str_is(&kv[i].key, "tensors") || vd_plan_i_str_is(&kv[i].key, "nodes"))) {
        kv[i].val.type = MSGPACK_OBJECT_ARRAY;
        kv[i].val.via.array.size = hdr == 1 ? (uint32_t)(t & 0x0f) : (uint32_t)vd_plan_i_be(b + v + 1, hdr - 1);
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
  vd_rc rc = vd_plan_i_scan((const uint8_t *)buf, len, c.file, &top_pos, d);
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
  vd_free(c.sbuf[3]);
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
