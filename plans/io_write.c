/*
 * plans/io_write.c - the plan writer: validates, then streams the map through a
 * msgpack_packer into an exclusive temporary file next to the target and
 * renames it into place (common/outfile.h); fields equal to their
 * documented default are omitted.
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

/* `lines` ('\n'-joined) as an array of strings. */
static void pack_lines(msgpack_packer *pk, const char *key, const char *lines) {
  size_t n = 1;
  for (const char *s = lines; *s; s++) n += *s == '\n';
  pack_cstr(pk, key);
  msgpack_pack_array(pk, n);
  for (const char *s = lines;;) {
    const char *e = strchr(s, '\n');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    msgpack_pack_str(pk, len);
    msgpack_pack_str_body(pk, s, len);
    if (!e) break;
    s = e + 1;
  }
}

static void pack_node(msgpack_packer *pk, const vd_plan_t *p, const vd_node_t *n) {
  const char *name = vd_plan_s(p, n->name), *src = vd_plan_s(p, n->src), *stack = vd_plan_s(p, n->stack);
  size_t nk = 4 + (*name != 0) + (*src != 0) + (*stack != 0) + (n->rank != 0) + (n->layer != -1) + (n->n_in != 0) + (n->n_out != 0) +
              (n->n_attr != 0) + (n->coll >= 0) + (n->n_group != 0) + (n->span_replicas != 0);
  msgpack_pack_map(pk, nk);
  pack_kv_int(pk, "id", n->id);
  pack_kv_str(pk, "op", vd_plan_s(p, n->op));
  if (*name) pack_kv_str(pk, "name", name);
  if (*src) pack_kv_str(pk, "src", src);
  if (*stack) pack_lines(pk, "stack", stack);
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
