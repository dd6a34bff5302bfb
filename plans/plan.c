/*
 * plans/plan.c - in-memory plan: lifetime, string pool, builder, accessors.
 *
 * Not here: file I/O (io.c), validation (validate.c), generators (gen_*.c).
 * Invariant: pool offset 0 is the empty string, so a zeroed name field is "".
 */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

const char *const vd_dtype_names[VD_DT__COUNT] = {"f32", "f16", "bf16", "f64", "i64", "i32", "bool"};
const char *const vd_role_names[VD_ROLE__COUNT] = {"input", "weight", "grad", "act", "loss", "optstate"};
const char *const vd_scope_names[VD_SCOPE__COUNT] = {"mb", "persistent"};
const char *const vd_phase_names[VD_PHASE__COUNT] = {"fwd", "bwd", "comm", "opt"};

vd_rc vd_plan_init(vd_plan_t *p, vd_plan_kind kind) {
  memset(p, 0, sizeof(*p));
  p->kind = kind;
  if (VD_GROW(p->pool, p->cap_pool, 1)) return VD_ENOMEM;
  p->pool[0] = '\0';
  p->n_pool = 1;
  vd_world_t w = {.dp = 1, .tp = 1, .pp = 1, .sp = 0, .cp = 1, .ep = 1, .nm = 1,
                  .replicas = 1, .stored_ranks = 1};
  return vd_plan_set_world(p, &w);
}

void vd_plan_free(vd_plan_t *p) {
  if (!p) return;
  VD_FREE_ALL(p->tensors, p->nodes, p->segments, p->programs, p->steps, p->refs, p->attrs, p->ints, p->floats, p->pool);
  memset(p, 0, sizeof(*p));
}

vd_rc vd_plan_str(vd_plan_t *p, const char *s, uint32_t *off) {
  if (!s || !*s) {
    *off = 0;
    return VD_OK;
  }
  size_t n = strlen(s) + 1;
  if (p->n_pool + n > UINT32_MAX) return VD_ENOMEM;
  if (VD_GROW(p->pool, p->cap_pool, p->n_pool + n)) return VD_ENOMEM;
  memcpy(p->pool + p->n_pool, s, n);
  *off = (uint32_t)p->n_pool;
  p->n_pool += n;
  return VD_OK;
}

vd_rc vd_plan_set_world(vd_plan_t *p, const vd_world_t *w) {
  if (w->stored_ranks < 1) return VD_EINTERNAL;
  vd_program_t *progs = vd_calloc((size_t)w->stored_ranks, sizeof(*progs));
  if (!progs) return VD_ENOMEM;
  uint32_t layout = w->layout;
  vd_free(p->programs);
  p->programs = progs;
  p->world = *w;
  p->world.layout = layout;
  p->n_steps = 0;
  return VD_OK;
}

vd_rc vd_plan_add_segment(vd_plan_t *p, const char *name, int32_t *seg) {
  uint32_t off;
  VD_CHECK(vd_plan_str(p, name, &off));
  if (VD_GROW(p->segments, p->cap_segments, p->n_segments + 1)) return VD_ENOMEM;
  p->segments[p->n_segments] = off;
  *seg = (int32_t)p->n_segments++;
  return VD_OK;
}

vd_rc vd_plan_add_step(vd_plan_t *p, int32_t rank, int32_t segment, int32_t mb) {
  if (rank < 0 || rank >= p->world.stored_ranks) return VD_EINTERNAL;
  vd_program_t *pr = &p->programs[rank];
  /* Steps are contiguous per rank: a rank's first step starts a new run. */
  if (pr->n_steps == 0) pr->step_off = (uint32_t)p->n_steps;
  else if (pr->step_off + pr->n_steps != p->n_steps) return VD_EINTERNAL;
  if (VD_GROW(p->steps, p->cap_steps, p->n_steps + 1)) return VD_ENOMEM;
  p->steps[p->n_steps++] = (vd_step_t){segment, mb};
  pr->n_steps++;
  return VD_OK;
}

vd_rc vd_plan_add_tensor(vd_plan_t *p, const vd_tensor_t *t, const char *name, uint32_t *idx) {
  uint32_t off;
  VD_CHECK(vd_plan_str(p, name, &off));
  if (p->n_tensors >= UINT32_MAX - 1) return VD_ENOMEM;
  if (VD_GROW(p->tensors, p->cap_tensors, p->n_tensors + 1)) return VD_ENOMEM;
  vd_tensor_t *nt = &p->tensors[p->n_tensors];
  *nt = *t;
  nt->name = off;
  if (!nt->has_lin) memset(&nt->lin, 0, sizeof(nt->lin));
  if (nt->has_lin && nt->lin.part_n == 0) nt->lin.part_n = 1;
  if (idx) *idx = (uint32_t)p->n_tensors;
  p->n_tensors++;
  return VD_OK;
}

/* Appends v[0, n) (elements of elem bytes) to one of the plan's shared
 * arrays (*arr, *count, *cap) and sets *off to where they start: the
 * offsets of a plan are 32-bit. */
static vd_rc push_array(void **arr, size_t *count, size_t *cap, size_t elem, const void *v, uint32_t n,
                        uint32_t *off) {
  if (*count + n > UINT32_MAX) return VD_ENOMEM;
  if (vd_grow(arr, cap, *count + n, elem)) return VD_ENOMEM;
  if (n) memcpy((char *)*arr + *count * elem, v, n * elem);
  *off = (uint32_t)*count;
  *count += n;
  return VD_OK;
}

static vd_rc push_refs(vd_plan_t *p, const uint32_t *v, uint32_t n, uint32_t *off) {
  return push_array((void **)&p->refs, &p->n_refs, &p->cap_refs, sizeof(*p->refs), v, n, off);
}

static vd_rc push_ints(vd_plan_t *p, const int64_t *v, uint32_t n, uint32_t *off) {
  return push_array((void **)&p->ints, &p->n_ints, &p->cap_ints, sizeof(*p->ints), v, n, off);
}

vd_rc vd_plan_add_node(vd_plan_t *p, const vd_node_t *n, const char *op, const char *name,
                       const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out,
                       const int64_t *group, uint32_t n_group, uint32_t *idx) {
  vd_node_t nn = *n;
  nn.src = 0; /* a pool offset of whatever plan n came from means nothing here */
  nn.stack = 0;
  VD_CHECK(vd_plan_str(p, op, &nn.op));
  VD_CHECK(vd_plan_str(p, name, &nn.name));
  VD_CHECK(push_refs(p, in, n_in, &nn.in_off));
  nn.n_in = n_in;
  VD_CHECK(push_refs(p, out, n_out, &nn.out_off));
  nn.n_out = n_out;
  VD_CHECK(push_ints(p, group, n_group, &nn.group_off));
  nn.n_group = n_group;
  nn.attr_off = (uint32_t)p->n_attrs;
  nn.n_attr = 0;
  if (p->n_nodes >= UINT32_MAX - 1) return VD_ENOMEM;
  if (VD_GROW(p->nodes, p->cap_nodes, p->n_nodes + 1)) return VD_ENOMEM;
  p->nodes[p->n_nodes] = nn;
  if (idx) *idx = (uint32_t)p->n_nodes;
  p->n_nodes++;
  return VD_OK;
}

/* Sets node idx's source line (stack 0) or its stack (stack 1) to text. */
static vd_rc set_node_text(vd_plan_t *p, uint32_t idx, const char *text, int stack) {
  if (idx >= p->n_nodes) return VD_EINTERNAL;
  uint32_t off;
  VD_CHECK(vd_plan_str(p, text, &off));
  *(stack ? &p->nodes[idx].stack : &p->nodes[idx].src) = off;
  return VD_OK;
}

vd_rc vd_plan_set_node_src(vd_plan_t *p, uint32_t idx, const char *src) { return set_node_text(p, idx, src, 0); }

vd_rc vd_plan_set_node_stack(vd_plan_t *p, uint32_t idx, const char *stack) {
  return set_node_text(p, idx, stack, 1);
}

/* A new attribute key on node with the kind, length and value of v.
 * Attributes of a node are contiguous, so only the last node may get more. */
static vd_rc new_attr(vd_plan_t *p, uint32_t node, const char *key, vd_attr_t v) {
  if (node + 1 != p->n_nodes) return VD_EINTERNAL;
  vd_node_t *n = &p->nodes[node];
  if (n->attr_off + n->n_attr != p->n_attrs) return VD_EINTERNAL;
  uint32_t k;
  VD_CHECK(vd_plan_str(p, key, &k));
  if (VD_GROW(p->attrs, p->cap_attrs, p->n_attrs + 1)) return VD_ENOMEM;
  vd_attr_t *a = &p->attrs[p->n_attrs++];
  *a = v;
  a->key = k;
  n->n_attr++;
  return VD_OK;
}

vd_rc vd_plan_attr_int(vd_plan_t *p, uint32_t node, const char *key, int64_t v) {
  return new_attr(p, node, key, (vd_attr_t){.kind = VD_ATTR_INT, .v.i = v});
}

vd_rc vd_plan_attr_float(vd_plan_t *p, uint32_t node, const char *key, double v) {
  return new_attr(p, node, key, (vd_attr_t){.kind = VD_ATTR_FLOAT, .v.f = v});
}

vd_rc vd_plan_attr_str(vd_plan_t *p, uint32_t node, const char *key, const char *v) {
  uint32_t s;
  VD_CHECK(vd_plan_str(p, v, &s)); /* before new_attr: the pool may move, attrs may not */
  return new_attr(p, node, key, (vd_attr_t){.kind = VD_ATTR_STR, .v.s = s});
}

/* A list attribute (INTS, FLOATS) whose n values start at off. */
static vd_rc list_attr(vd_plan_t *p, uint32_t node, const char *key, vd_attr_kind kind, uint32_t n, uint32_t off) {
  return new_attr(p, node, key, (vd_attr_t){.kind = kind, .len = n, .v.off = off});
}

vd_rc vd_plan_attr_ints(vd_plan_t *p, uint32_t node, const char *key, const int64_t *v, uint32_t n) {
  uint32_t off;
  VD_CHECK(push_ints(p, v, n, &off));
  return list_attr(p, node, key, VD_ATTR_INTS, n, off);
}

vd_rc vd_plan_attr_floats(vd_plan_t *p, uint32_t node, const char *key, const double *v, uint32_t n) {
  uint32_t off;
  VD_CHECK(push_array((void **)&p->floats, &p->n_floats, &p->cap_floats, sizeof(*p->floats), v, n, &off));
  return list_attr(p, node, key, VD_ATTR_FLOATS, n, off);
}

vd_rc vd_plan_attr_copy(vd_plan_t *dst, uint32_t node, const vd_plan_t *src, const vd_attr_t *a) {
  const char *key = vd_plan_s(src, a->key);
  switch (a->kind) {
  case VD_ATTR_INT: return vd_plan_attr_int(dst, node, key, a->v.i);
  case VD_ATTR_FLOAT: return vd_plan_attr_float(dst, node, key, a->v.f);
  case VD_ATTR_STR: return vd_plan_attr_str(dst, node, key, vd_plan_s(src, a->v.s));
  case VD_ATTR_INTS: return vd_plan_attr_ints(dst, node, key, src->ints + a->v.off, a->len);
  case VD_ATTR_FLOATS: return vd_plan_attr_floats(dst, node, key, src->floats + a->v.off, a->len);
  }
  return VD_EINTERNAL;
}

const vd_attr_t *vd_node_attr(const vd_plan_t *p, const vd_node_t *n, const char *key) {
  for (uint32_t i = 0; i < n->n_attr; i++) {
    const vd_attr_t *a = &p->attrs[n->attr_off + i];
    if (strcmp(p->pool + a->key, key) == 0) return a;
  }
  return NULL;
}

int64_t vd_node_attr_int(const vd_plan_t *p, const vd_node_t *n, const char *key, int64_t def) {
  const vd_attr_t *a = vd_node_attr(p, n, key);
  return a && a->kind == VD_ATTR_INT ? a->v.i : def;
}

double vd_node_attr_float(const vd_plan_t *p, const vd_node_t *n, const char *key, double def) {
  const vd_attr_t *a = vd_node_attr(p, n, key);
  if (!a) return def;
  if (a->kind == VD_ATTR_FLOAT) return a->v.f;
  if (a->kind == VD_ATTR_INT) return (double)a->v.i;
  return def;
}

const char *vd_node_attr_str(const vd_plan_t *p, const vd_node_t *n, const char *key, const char *def) {
  const vd_attr_t *a = vd_node_attr(p, n, key);
  return a && a->kind == VD_ATTR_STR ? p->pool + a->v.s : def;
}

const char *const vd_attr_kind_names[5] = {"int", "float", "string", "ints", "floats"};

void vd_plan_fmt_double(double v, char *buf, size_t size) {
  if (size == 0) return;
  int n = snprintf(buf, size, "%.17g", v);
  /* An integral finite value prints without a point: add ".0" so that the
   * printout keeps the kind (a float 2.0 is not the int 2). */
  if (n > 0 && (size_t)n + 2 < size && isfinite(v) && !strpbrk(buf, ".e")) memcpy(buf + n, ".0", 3);
}

char *vd_attr_format(const vd_plan_t *p, const vd_attr_t *a, char *buf, size_t size) {
  size_t used = 0;
  char tmp[64];
  if (size == 0) return buf;
  buf[0] = '\0';
#define PUT(s_)                                                   \
  do {                                                            \
    const char *s__ = (s_);                                       \
    size_t l__ = strlen(s__);                                     \
    if (used + l__ + 4 >= size) {                                 \
      if (used + 4 < size) memcpy(buf + used, "...", 4);          \
      return buf;                                                 \
    }                                                             \
    memcpy(buf + used, s__, l__ + 1);                             \
    used += l__;                                                  \
  } while (0)
  switch (a->kind) {
  case VD_ATTR_INT:
    snprintf(tmp, sizeof(tmp), "%lld", (long long)a->v.i);
    PUT(tmp);
    break;
  case VD_ATTR_FLOAT:
    vd_plan_fmt_double(a->v.f, tmp, sizeof(tmp));
    PUT(tmp);
    break;
  case VD_ATTR_STR:
    PUT("\"");
    PUT(p->pool + a->v.s);
    PUT("\"");
    break;
  case VD_ATTR_INTS:
  case VD_ATTR_FLOATS:
    PUT("[");
    for (uint32_t i = 0; i < a->len; i++) {
      if (i) PUT(",");
      if (a->kind == VD_ATTR_INTS)
        snprintf(tmp, sizeof(tmp), "%lld", (long long)p->ints[a->v.off + i]);
      else
        vd_plan_fmt_double(p->floats[a->v.off + i], tmp, sizeof(tmp));
      PUT(tmp);
    }
    PUT("]");
    break;
  }
#undef PUT
  return buf;
}

static int same_double(double x, double y) { return x == y || (isnan(x) && isnan(y)); }

int vd_attr_equal(const vd_plan_t *pa, const vd_attr_t *a, const vd_plan_t *pb, const vd_attr_t *b) {
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case VD_ATTR_INT: return a->v.i == b->v.i;
  case VD_ATTR_FLOAT: return same_double(a->v.f, b->v.f);
  case VD_ATTR_STR: return strcmp(pa->pool + a->v.s, pb->pool + b->v.s) == 0;
  case VD_ATTR_INTS:
    if (a->len != b->len) return 0;
    for (uint32_t i = 0; i < a->len; i++)
      if (pa->ints[a->v.off + i] != pb->ints[b->v.off + i]) return 0;
    return 1;
  case VD_ATTR_FLOATS:
    if (a->len != b->len) return 0;
    for (uint32_t i = 0; i < a->len; i++)
      if (!same_double(pa->floats[a->v.off + i], pb->floats[b->v.off + i])) return 0;
    return 1;
  }
  return 0;
}

void vd_tensor_lineage_at(const vd_tensor_t *t, int32_t replica, int32_t mb, int64_t lo[VD_MAX_DIMS],
                          int64_t hi[VD_MAX_DIMS], int64_t *part_k) {
  const vd_lineage_ann *l = &t->lin;
  int64_t m = mb < 0 ? 0 : mb;
  for (int i = 0; i < t->ndim; i++) {
    int64_t shift = replica * l->dp_shift[i] + m * l->mb_shift[i];
    lo[i] = l->lo[i] + shift;
    hi[i] = l->hi[i] + shift;
  }
  *part_k = l->part_k + replica * l->dp_part + m * l->mb_part;
}

int64_t vd_tensor_numel(const vd_tensor_t *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

int64_t vd_plan_find_tensor(const vd_plan_t *p, int64_t id) {
  for (size_t i = 0; i < p->n_tensors; i++)
    if (p->tensors[i].id == id) return (int64_t)i;
  return -1;
}

int64_t vd_plan_find_node(const vd_plan_t *p, int64_t id) {
  for (size_t i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].id == id) return (int64_t)i;
  return -1;
}
