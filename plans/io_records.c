/*
 * plans/io_records.c - pass 3 of the plan reader (io.c), the records: the world,
 * a tensor (with its lineage), a node (references, attributes).
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

/* ---- world ------------------------------------------------------------- */

enum { W_DP, W_TP, W_PP, W_SP, W_CP, W_EP, W_NM, W_REPLICAS, W_STORED, W_LAYOUT, W__N };
static const char *const world_keys[W__N] = {"dp", "tp", "pp", "sp", "cp", "ep", "nm",
                                             "replicas", "stored_ranks", "layout"};

vd_rc vd_plan_i_read_world(rctx *c, mobj *o, vd_world_t *w, const char **layout) {
  mobj *f[W__N];
  vd_plan_i_set_rec_text(c, "world");
  VD_CHECK(vd_plan_i_get_fields(c, o, "world", world_keys, W__N, f, ""));
  int32_t *dst[W_LAYOUT] = {&w->dp, &w->tp, &w->pp, &w->sp, &w->cp, &w->ep, &w->nm, &w->replicas, &w->stored_ranks};
  for (int k = 0; k < W_LAYOUT; k++)
    if (f[k]) VD_CHECK(vd_plan_i_get_i32(c, f[k], world_keys[k], dst[k]));
  if (f[W_LAYOUT]) VD_CHECK(vd_plan_i_get_cstr(c, f[W_LAYOUT], "layout", 0, layout));
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
  VD_CHECK(vd_plan_i_get_fields(c, o, "lin", lin_keys, L__N, f, "lin."));
  VD_CHECK(vd_plan_i_need(c, f[L_FULL], "lin.full"));
  VD_CHECK(vd_plan_i_get_int(c, f[L_FULL], "lin.full", &l->full));
  if (f[L_LO]) VD_CHECK(vd_plan_i_get_dims(c, f[L_LO], "lin.lo", t->ndim, l->lo));
  if (f[L_HI]) VD_CHECK(vd_plan_i_get_dims(c, f[L_HI], "lin.hi", t->ndim, l->hi));
  else
    for (int i = 0; i < t->ndim; i++)
      if (__builtin_add_overflow(l->lo[i], t->shape[i], &l->hi[i])) RFAIL(c, "lin.lo", "lo + shape overflows int64");
  l->part_k = 0;
  l->part_n = 1;
  if (f[L_PART]) {
    uint32_t n = 0;
    VD_CHECK(vd_plan_i_get_ints(c, f[L_PART], "lin.part", &n));
    if (n != 2) RFAIL(c, "lin.part", "expected [k, n] (2 integers), got %" PRIu32 " values", n);
    l->part_k = c->ints[0];
    l->part_n = c->ints[1];
    if (l->part_n < 1) RFAIL(c, "lin.part", "expected a part count n >= 1, got %" PRId64, l->part_n);
    if (l->part_n > VD_LIM_LIN_PART_MAX)
      RFAIL(c, "lin.part", "expected a part count n <= %d (LIN_PART_MAX, `verdict limits`), got %" PRId64,
            VD_LIM_LIN_PART_MAX, l->part_n);
  }
  if (f[L_DPS]) VD_CHECK(vd_plan_i_get_dims(c, f[L_DPS], "lin.dp_shift", t->ndim, l->dp_shift));
  if (f[L_MBS]) VD_CHECK(vd_plan_i_get_dims(c, f[L_MBS], "lin.mb_shift", t->ndim, l->mb_shift));
  if (f[L_DPP]) VD_CHECK(vd_plan_i_get_int(c, f[L_DPP], "lin.dp_part", &l->dp_part));
  if (f[L_MBP]) VD_CHECK(vd_plan_i_get_int(c, f[L_MBP], "lin.mb_part", &l->mb_part));
  t->has_lin = 1;
  return VD_OK;
}

/* The opening of a tensor or node record: where messages point (kind and
 * pos in arr), its fields into f (keys[0] is "id"), and its required id. */
static vd_rc read_rec_head(rctx *c, mobj *o, uint32_t pos, const char *kind, const char *arr,
                           const char *const *keys, int nk, mobj **f, int64_t *id) {
  vd_plan_i_peek_rec(c, o, kind, arr, pos);
  VD_CHECK(vd_plan_i_get_fields(c, o, arr, keys, nk, f, ""));
  VD_CHECK(vd_plan_i_need(c, f[0], "id"));
  return vd_plan_i_get_int(c, f[0], "id", id);
}

vd_rc vd_plan_i_read_tensor(rctx *c, mobj *o, uint32_t pos) {
  mobj *f[T__N];
  vd_tensor_t t;
  memset(&t, 0, sizeof(t));
  const char *name = "";
  int e = 0;
  VD_CHECK(read_rec_head(c, o, pos, "tensor", "tensors", tensor_keys, T__N, f, &t.id));
  if (f[T_NAME]) VD_CHECK(vd_plan_i_get_cstr(c, f[T_NAME], "name", 0, &name));
  if (f[T_RANK]) VD_CHECK(vd_plan_i_get_i32(c, f[T_RANK], "rank", &t.rank));
  VD_CHECK(vd_plan_i_need(c, f[T_SHAPE], "shape"));
  uint32_t nd = 0;
  VD_CHECK(vd_plan_i_get_ints(c, f[T_SHAPE], "shape", &nd));
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
    VD_CHECK(vd_plan_i_get_enum(c, f[T_DTYPE], "dtype", vd_dtype_names, VD_DT__COUNT, &e));
    t.dtype = (vd_dtype)e;
  }
  VD_CHECK(vd_plan_i_need(c, f[T_ROLE], "role"));
  VD_CHECK(vd_plan_i_get_enum(c, f[T_ROLE], "role", vd_role_names, VD_ROLE__COUNT, &e));
  t.role = (vd_role)e;
  VD_CHECK(vd_plan_i_need(c, f[T_SCOPE], "scope"));
  VD_CHECK(vd_plan_i_get_enum(c, f[T_SCOPE], "scope", vd_scope_names, VD_SCOPE__COUNT, &e));
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

enum { N_ID, N_OP, N_NAME, N_RANK, N_SEG, N_LAYER, N_PHASE, N_IN, N_OUT, N_ATTRS, N_COLL, N_GROUP, N_SPAN, N_SRC, N_STACK, N__N };
static const char *const node_keys[N__N] = {"id", "op", "name", "rank", "segment", "layer", "phase",
                                            "in", "out", "attrs", "coll", "group", "span_replicas", "src", "stack"};

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
  VD_CHECK(vd_plan_i_get_ints(c, o, field, n));
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
    if (k->type != MSGPACK_OBJECT_STR) RFAIL(c, f, "expected a string key, got %s", vd_plan_i_tname(k));
    RFAIL(c, f, "expected a non-empty key without NUL bytes");
  }
  VD_CHECK(vd_plan_i_get_cstr(c, k, "attrs", 0, &key));
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
    VD_CHECK(vd_plan_i_get_int(c, v, f, &x));
    rc = vd_plan_attr_int(c->p, node, key, x);
    break;
  }
  case MSGPACK_OBJECT_BOOLEAN: rc = vd_plan_attr_int(c->p, node, key, v->via.boolean ? 1 : 0); break;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: rc = vd_plan_attr_float(c->p, node, key, v->via.f64); break;
  case MSGPACK_OBJECT_STR: {
    const char *s;
    VD_CHECK(vd_plan_i_get_cstr(c, v, f, 1, &s));
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
        RFAIL(c, fe, "expected a number (attribute arrays hold integers or floats), got %s", vd_plan_i_tname(e));
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
        else VD_CHECK(vd_plan_i_get_int(c, e, fe, &c->ints[j]));
      }
      rc = vd_plan_attr_ints(c->p, node, key, c->ints, n);
    }
    break;
  }
  default:
    RFAIL(c, f, "expected an integer, float, string, boolean or array of numbers, got %s", vd_plan_i_tname(v));
  }
  if (rc != VD_OK) ROOM(c);
  return VD_OK;
}

vd_rc vd_plan_i_read_node(rctx *c, mobj *o, uint32_t pos) {
  mobj *f[N__N];
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  const char *op, *name = "", *src = "", *stack = "";
  int e = 0;
  VD_CHECK(read_rec_head(c, o, pos, "node", "nodes", node_keys, N__N, f, &n.id));
  if (f[N_NAME]) VD_CHECK(vd_plan_i_get_cstr(c, f[N_NAME], "name", 1, &name));
  if (f[N_SRC]) VD_CHECK(vd_plan_i_get_cstr(c, f[N_SRC], "src", 2, &src));
  if (f[N_STACK]) VD_CHECK(vd_plan_i_get_lines(c, f[N_STACK], "stack", 3, &stack));
  VD_CHECK(vd_plan_i_need(c, f[N_OP], "op"));
  VD_CHECK(vd_plan_i_get_cstr(c, f[N_OP], "op", 0, &op));
  if (!*op) RFAIL(c, "op", "expected an operator name, got \"\"");
  if (f[N_RANK]) VD_CHECK(vd_plan_i_get_i32(c, f[N_RANK], "rank", &n.rank));
  VD_CHECK(vd_plan_i_need(c, f[N_SEG], "segment"));
  VD_CHECK(vd_plan_i_get_i32(c, f[N_SEG], "segment", &n.segment));
  n.layer = -1;
  if (f[N_LAYER]) VD_CHECK(vd_plan_i_get_i32(c, f[N_LAYER], "layer", &n.layer));
  VD_CHECK(vd_plan_i_need(c, f[N_PHASE], "phase"));
  VD_CHECK(vd_plan_i_get_enum(c, f[N_PHASE], "phase", vd_phase_names, VD_PHASE__COUNT, &e));
  n.phase = (vd_phase)e;
  uint32_t n_in = 0, n_out = 0, n_group = 0;
  if (f[N_IN]) VD_CHECK(read_refs(c, f[N_IN], "in", 0, &n_in));
  if (f[N_OUT]) VD_CHECK(read_refs(c, f[N_OUT], "out", 1, &n_out));
  n.coll = -1;
  if (f[N_COLL]) {
    VD_CHECK(vd_plan_i_get_int(c, f[N_COLL], "coll", &n.coll));
    if (n.coll < 0) RFAIL(c, "coll", "expected a collective key >= 0, got %" PRId64, n.coll);
  }
  if (f[N_SPAN]) VD_CHECK(vd_plan_i_get_bool(c, f[N_SPAN], "span_replicas", &n.span_replicas));
  if (f[N_ATTRS] && f[N_ATTRS]->type != MSGPACK_OBJECT_MAP)
    RFAIL(c, "attrs", "expected a map, got %s", vd_plan_i_tname(f[N_ATTRS]));
  /* The group goes last into c->ints: read_refs and attrs reuse it. */
  if (f[N_GROUP]) VD_CHECK(vd_plan_i_get_ints(c, f[N_GROUP], "group", &n_group));
  uint32_t idx;
  if (vd_plan_add_node(c->p, &n, op, name, c->refs[0], n_in, c->refs[1], n_out, c->ints, n_group, &idx) != VD_OK ||
      vd_plan_set_node_src(c->p, idx, src) != VD_OK || vd_plan_set_node_stack(c->p, idx, stack) != VD_OK)
    ROOM(c);
  if (f[N_ATTRS]) {
    mobj *a = f[N_ATTRS];
    for (uint32_t i = 0; i < a->via.map.size; i++)
      VD_CHECK(read_attr(c, idx, &a->via.map.ptr[i].key, &a->via.map.ptr[i].val, i));
  }
  return VD_OK;
}
