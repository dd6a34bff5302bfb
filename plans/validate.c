/*
 * plans/validate.c - structural validation of an in-memory plan.
 *
 * Implements every rule of docs/plan-format.md that does not depend on the
 * msgpack encoding, so that the reader (after building), the writer (before
 * writing), the generators and the bug mutators all get the same checks and
 * the same messages.  What is checked: world degrees, the schedule, tensor
 * ranks/shapes/enums, lineage annotations (slice has the tensor's shape, part
 * k < n, shifted annotations stay in range, parallel plans only), nodes (ids,
 * ranks, segments, phases, tensor references on the node's rank, distinct
 * outputs, attributes, collective groups) and collective pairing across nodes
 * (same group, one node per group member).  Also the internal integrity of
 * the arrays (offsets into refs/ints/floats/pool), because mutators edit
 * plans in place.
 *
 * Not checked here: anything that needs the other plan (whether lineage
 * `full` ids exist in the single plan) or operator semantics (arity, shape
 * rules: solver/ registry).  Cost: O(tensors + nodes + refs + attrs + group
 * members), hashing for id sets, never vd_plan_find_*.
 */
#include "plan.h"

#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "idmap.h"

/* The record name is formatted only when a check fails: snprintf per record
 * was a third of the validation time on 450k records. */
typedef struct {
  const vd_plan_t *p;
  const char *file;
  vd_diag *d;
  char rec[128];
  const char *rec_kind; /* non-NULL: rec is "<kind> <id> '<name>'", formatted lazily */
  int64_t rec_id;
  uint32_t rec_name;
} vctx;

static const char *rec_of(vctx *c);

#define BAD(c, field, ...) VD_FAIL((c)->d, VD_EINPUT, (c)->file, rec_of(c), (field), __VA_ARGS__)
#define BROKEN(c, field, ...) VD_FAIL((c)->d, VD_EINTERNAL, (c)->file, rec_of(c), (field), __VA_ARGS__)

static int pool_ok(const vd_plan_t *p, uint32_t off) { return off < p->n_pool; }

static const char *pool_s(const vd_plan_t *p, uint32_t off) { return pool_ok(p, off) ? p->pool + off : "?"; }

static void set_rec(vctx *c, const char *kind, int64_t id, uint32_t name) {
  c->rec_kind = kind;
  c->rec_id = id;
  c->rec_name = name;
}

/* A fixed record name ("world", "schedule of rank 3"). */
static void set_rec_text(vctx *c, const char *fmt, int32_t v) {
  c->rec_kind = NULL;
  snprintf(c->rec, sizeof(c->rec), fmt, v);
}

static const char *rec_of(vctx *c) {
  if (!c->rec_kind) return c->rec;
  const char *nm = pool_s(c->p, c->rec_name);
  if (*nm) snprintf(c->rec, sizeof(c->rec), "%s %" PRId64 " '%s'", c->rec_kind, c->rec_id, nm);
  else snprintf(c->rec, sizeof(c->rec), "%s %" PRId64, c->rec_kind, c->rec_id);
  return c->rec;
}

/* ---- world and schedule ---------------------------------------------- */

static vd_rc check_layout(vctx *c, const char *s) {
  static const char *const dims[] = {"dp", "tp", "pp", "cp", "ep"};
  int seen[5] = {0};
  const char *at = s;
  if (!*s) return VD_OK;
  for (;;) {
    const char *comma = strchr(at, ',');
    size_t len = comma ? (size_t)(comma - at) : strlen(at);
    int found = -1;
    for (int i = 0; i < 5; i++)
      if (len == 2 && memcmp(at, dims[i], 2) == 0) found = i;
    if (found < 0 || seen[found])
      BAD(c, "layout", "expected a comma-separated list of distinct dims from dp,tp,pp,cp,ep, got '%s'", s);
    seen[found] = 1;
    if (!comma) break;
    at = comma + 1;
  }
  return VD_OK;
}

static vd_rc check_world(vctx *c) {
  const vd_plan_t *p = c->p;
  const vd_world_t *w = &p->world;
  set_rec_text(c, "world", 0);
  const struct { const char *name; int32_t v; } deg[] = {
      {"dp", w->dp}, {"tp", w->tp}, {"pp", w->pp}, {"cp", w->cp}, {"ep", w->ep}, {"nm", w->nm},
      {"replicas", w->replicas}, {"stored_ranks", w->stored_ranks}};
  for (size_t i = 0; i < sizeof(deg) / sizeof(deg[0]); i++)
    if (deg[i].v < 1) BAD(c, deg[i].name, "expected a degree >= 1, got %" PRId32, deg[i].v);
  if (w->sp != 0 && w->sp != 1) BAD(c, "sp", "expected 0 or 1 (a flag), got %" PRId32, w->sp);
  if ((int64_t)w->replicas * w->stored_ranks > INT32_MAX)
    BAD(c, "replicas", "expected replicas * stored_ranks < 2^31, got %" PRId32 " * %" PRId32,
        w->replicas, w->stored_ranks);
  if (p->kind == VD_PLAN_SINGLE && w->stored_ranks != 1)
    BAD(c, "stored_ranks", "expected 1 in a single-device plan, got %" PRId32, w->stored_ranks);
  if (p->kind == VD_PLAN_SINGLE && w->replicas != 1)
    BAD(c, "replicas", "expected 1 in a single-device plan, got %" PRId32, w->replicas);
  if (!pool_ok(p, w->layout)) BROKEN(c, "layout", "string offset %" PRIu32 " outside the pool", w->layout);
  return check_layout(c, p->pool + w->layout);
}

/* A rank runs a segment at most once per microbatch (and once for mb -1):
 * a repeated (segment, mb) step would re-run the same computation on the
 * same data, and it is how a 3 MB file could ask for a graph of 10^8 node
 * executions.  O(steps of the rank). */
static vd_rc check_repeats(vctx *c, const vd_program_t *pr) {
  const vd_plan_t *p = c->p;
  vd_idmap_t seen;
  if (vd_idmap_init(&seen, pr->n_steps) != VD_OK) return VD_OOM(c->d);
  vd_rc rc = VD_OK;
  for (uint32_t i = 0; i < pr->n_steps && rc == VD_OK; i++) {
    const vd_step_t *st = &p->steps[pr->step_off + i];
    int64_t key = (int64_t)st->segment * ((int64_t)p->world.nm + 1) + (st->mb + 1);
    uint32_t first;
    int put = vd_idmap_put(&seen, key, i, &first);
    if (put < 0) rc = VD_OOM(c->d);
    else if (put > 0) {
      char f[48];
      snprintf(f, sizeof(f), "step[%" PRIu32 "]", i);
      rc = VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), f,
                  "expected each (segment, microbatch) once, got segment %" PRId32 " mb %" PRId32
                  " again (first at step[%" PRIu32 "])", st->segment, st->mb, first);
    }
  }
  vd_idmap_free(&seen);
  return rc;
}

static vd_rc check_schedule(vctx *c) {
  const vd_plan_t *p = c->p;
  set_rec_text(c, "segments", 0);
  for (size_t s = 0; s < p->n_segments; s++)
    if (!pool_ok(p, p->segments[s])) BROKEN(c, "name", "segment %zu: string offset outside the pool", s);
  if (!p->programs) BROKEN(c, "schedule", "no programs allocated");
  for (int32_t r = 0; r < p->world.stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    set_rec_text(c, "schedule of rank %" PRId32, r);
    if ((size_t)pr->step_off + pr->n_steps > p->n_steps)
      BROKEN(c, "steps", "steps [%" PRIu32 ", +%" PRIu32 ") outside the step array (%zu)", pr->step_off,
             pr->n_steps, p->n_steps);
    for (uint32_t i = 0; i < pr->n_steps; i++) {
      const vd_step_t *st = &p->steps[pr->step_off + i];
      char f[48];
      if (st->segment < 0 || (size_t)st->segment >= p->n_segments) {
        snprintf(f, sizeof(f), "step[%" PRIu32 "].segment", i);
        BAD(c, f, "expected a segment index in [0, %zu), got %" PRId32 " (no such segment)", p->n_segments,
            st->segment);
      }
      if (st->mb < -1 || st->mb >= p->world.nm) {
        snprintf(f, sizeof(f), "step[%" PRIu32 "].mb", i);
        BAD(c, f, "expected a microbatch in [0, %" PRId32 ") or -1 (runs once), got %" PRId32, p->world.nm,
            st->mb);
      }
    }
    VD_CHECK(check_repeats(c, pr));
  }
  return VD_OK;
}

/* ---- tensors ----------------------------------------------------------- */

/* v + d * shift, checked; 0 on overflow. */
static int affine(int64_t v, int64_t d, int64_t shift, int64_t *out) {
  int64_t t;
  if (__builtin_mul_overflow(d, shift, &t)) return 0;
  return !__builtin_add_overflow(v, t, out);
}

static vd_rc check_lineage(vctx *c, const vd_tensor_t *t) {
  const vd_plan_t *p = c->p;
  const vd_lineage_ann *l = &t->lin;
  char f[48];
  if (p->kind != VD_PLAN_PARALLEL)
    BAD(c, "lin", "expected no lineage annotation in a single-device plan (lineage maps parallel tensors to single ones)");
  if (l->part_n < 1) BAD(c, "lin.part", "expected a part count n >= 1, got %" PRId64, l->part_n);
  if (l->part_n > VD_LIM_LIN_PART_MAX)
    BAD(c, "lin.part", "expected a part count n <= %d (LIN_PART_MAX, `verdict limits`), got %" PRId64,
        VD_LIM_LIN_PART_MAX, l->part_n);
  if (l->part_k < 0 || l->part_k >= l->part_n)
    BAD(c, "lin.part", "expected part k in [0, %" PRId64 "), got %" PRId64, l->part_n, l->part_k);
  int persistent = t->scope == VD_SCOPE_PERSISTENT;
  int64_t dmax = p->world.replicas - 1, mmax = persistent ? 0 : p->world.nm - 1;
  for (int i = 0; i < t->ndim; i++) {
    int64_t ext;
    if (l->lo[i] < 0) {
      snprintf(f, sizeof(f), "lin.lo[%d]", i);
      BAD(c, f, "expected a slice start >= 0, got %" PRId64, l->lo[i]);
    }
    if (__builtin_sub_overflow(l->hi[i], l->lo[i], &ext) || ext != t->shape[i]) {
      snprintf(f, sizeof(f), "lin.hi[%d]", i);
      BAD(c, f, "expected hi - lo = %" PRId64 " (the tensor's shape[%d]), got [%" PRId64 ", %" PRId64 ")",
          t->shape[i], i, l->lo[i], l->hi[i]);
    }
    if (persistent && l->mb_shift[i] != 0) {
      snprintf(f, sizeof(f), "lin.mb_shift[%d]", i);
      BAD(c, f, "expected 0 for a persistent tensor (one instance for all microbatches), got %" PRId64,
          l->mb_shift[i]);
    }
    /* Affine in (d, m): the extremes are at the corners. */
    for (int corner = 1; corner < 4; corner++) {
      int64_t d = (corner & 1) ? dmax : 0, m = (corner & 2) ? mmax : 0, lo, hi;
      if (!affine(l->lo[i], d, l->dp_shift[i], &lo) || !affine(lo, m, l->mb_shift[i], &lo) ||
          !affine(l->hi[i], d, l->dp_shift[i], &hi) || !affine(hi, m, l->mb_shift[i], &hi) || lo < 0) {
        snprintf(f, sizeof(f), "lin.%s[%d]", (corner & 1) && l->dp_shift[i] ? "dp_shift" : "mb_shift", i);
        BAD(c, f, "expected shifted slices inside the single tensor, but replica %" PRId64 " microbatch %" PRId64
            " gives a start < 0 or an overflow", d, m);
      }
    }
  }
  if (persistent && l->mb_part != 0)
    BAD(c, "lin.mb_part", "expected 0 for a persistent tensor, got %" PRId64, l->mb_part);
  for (int corner = 1; corner < 4; corner++) {
    int64_t d = (corner & 1) ? dmax : 0, m = (corner & 2) ? mmax : 0, k;
    if (!affine(l->part_k, d, l->dp_part, &k) || !affine(k, m, l->mb_part, &k) || k < 0 || k >= l->part_n)
      BAD(c, (corner & 1) && l->dp_part ? "lin.dp_part" : "lin.mb_part",
          "expected shifted part k in [0, %" PRId64 "), but replica %" PRId64 " microbatch %" PRId64
          " gives it out of range", l->part_n, d, m);
  }
  return VD_OK;
}

static vd_rc check_tensor(vctx *c, const vd_tensor_t *t) {
  const vd_plan_t *p = c->p;
  char f[32];
  if (!pool_ok(p, t->name)) BROKEN(c, "name", "string offset outside the pool");
  if (t->rank < 0 || t->rank >= p->world.stored_ranks)
    BAD(c, "rank", "expected a stored rank in [0, %" PRId32 "), got %" PRId32, p->world.stored_ranks, t->rank);
  if (t->ndim < 0 || t->ndim > VD_MAX_DIMS)
    BAD(c, "shape", "expected at most %d dims, got %" PRId32, VD_MAX_DIMS, t->ndim);
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; i++) {
    int bad_size = t->shape[i] < 1, overflow = !bad_size && __builtin_mul_overflow(numel, t->shape[i], &numel);
    if (bad_size || overflow) {
      snprintf(f, sizeof(f), "shape[%d]", i);
      if (bad_size) BAD(c, f, "expected a positive size, got %" PRId64, t->shape[i]);
      BAD(c, f, "expected sizes whose product fits in int64, got %" PRId64 " (element count overflows)",
          t->shape[i]);
    }
  }
  if ((unsigned)t->dtype >= VD_DT__COUNT) BAD(c, "dtype", "expected a dtype enum < %d, got %d", VD_DT__COUNT, (int)t->dtype);
  if ((unsigned)t->role >= VD_ROLE__COUNT) BAD(c, "role", "expected a role enum < %d, got %d", VD_ROLE__COUNT, (int)t->role);
  if ((unsigned)t->scope >= VD_SCOPE__COUNT)
    BAD(c, "scope", "expected a scope enum < %d, got %d", VD_SCOPE__COUNT, (int)t->scope);
  if (t->has_lin != 0 && t->has_lin != 1) BAD(c, "lin", "expected has_lin 0 or 1, got %d", t->has_lin);
  if (t->has_lin) VD_CHECK(check_lineage(c, t));
  /* SOUNDNESS: the final value of a weight, optimizer state or loss is an
   * output of the iteration, and only an annotation makes it a goal: such
   * a tensor is never inferred (vd_plan_is_boundary), and the single
   * tensor's coverage (UNCOVERED) is met by any other rank's copy.  An
   * unannotated one is therefore never compared: a rank's doubled loss
   * verified EQUIVALENT.  Inputs and unwritten tensors without an
   * annotation are free symbols (no hypothesis): proofs can only fail, so
   * they are allowed (docs/plan-format.md, boundary-only plans). */
  if (!t->has_lin && c->p->kind == VD_PLAN_PARALLEL &&
      (t->role == VD_ROLE_WEIGHT || t->role == VD_ROLE_OPTSTATE || t->role == VD_ROLE_LOSS))
    BAD(c, "lin", "expected a lineage annotation (role %s): the tensor's final value is an output of the "
                  "iteration, which nothing else would check (docs/plan-format.md, boundary-only plans)",
        vd_role_names[t->role]);
  return VD_OK;
}

/* ---- nodes ------------------------------------------------------------- */

static int cmp_key(const void *a, const void *b, void *pool) {
  return strcmp((const char *)pool + *(const uint32_t *)a, (const char *)pool + *(const uint32_t *)b);
}

typedef struct {
  uint32_t *tstamp;   /* per tensor: node index + 1 that last listed it as output */
  uint32_t *rstamp;   /* per stored rank: node index + 1 that last listed it in its group */
  uint32_t *keys;     /* scratch for attribute keys */
  size_t cap_keys;
} scratch;

static vd_rc check_attrs(vctx *c, const vd_node_t *n, scratch *s) {
  const vd_plan_t *p = c->p;
  char f[160];
  if ((size_t)n->attr_off + n->n_attr > p->n_attrs)
    BROKEN(c, "attrs", "attributes outside the attribute array");
  for (uint32_t i = 0; i < n->n_attr; i++) {
    const vd_attr_t *a = &p->attrs[n->attr_off + i];
    if (!pool_ok(p, a->key) || !p->pool[a->key]) BAD(c, "attrs", "attribute %" PRIu32 ": expected a non-empty key", i);
    const char *why = NULL;
    switch (a->kind) {
    case VD_ATTR_INT:
    case VD_ATTR_FLOAT: break;
    case VD_ATTR_STR:
      if (!pool_ok(p, a->v.s)) why = "string offset outside the pool";
      break;
    case VD_ATTR_INTS:
      if ((size_t)a->v.off + a->len > p->n_ints) why = "values outside the int array";
      break;
    case VD_ATTR_FLOATS:
      if ((size_t)a->v.off + a->len > p->n_floats) why = "values outside the float array";
      break;
    default: why = "unknown attribute kind";
    }
    if (why) {
      snprintf(f, sizeof(f), "attrs.%s", p->pool + a->key);
      BROKEN(c, f, "%s", why);
    }
  }
  /* Duplicate keys: pairwise for the usual handful, sorted otherwise. */
  if (n->n_attr <= 16) {
    for (uint32_t i = 0; i < n->n_attr; i++)
      for (uint32_t j = i + 1; j < n->n_attr; j++)
        if (strcmp(p->pool + p->attrs[n->attr_off + i].key, p->pool + p->attrs[n->attr_off + j].key) == 0) {
          snprintf(f, sizeof(f), "attrs.%s", p->pool + p->attrs[n->attr_off + j].key);
          BAD(c, f, "duplicate attribute key");
        }
    return VD_OK;
  }
  if (VD_GROW(s->keys, s->cap_keys, n->n_attr)) return VD_OOM(c->d);
  for (uint32_t i = 0; i < n->n_attr; i++) s->keys[i] = p->attrs[n->attr_off + i].key;
  qsort_r(s->keys, n->n_attr, sizeof(uint32_t), cmp_key, p->pool);
  for (uint32_t i = 1; i < n->n_attr; i++)
    if (strcmp(p->pool + s->keys[i - 1], p->pool + s->keys[i]) == 0) {
      snprintf(f, sizeof(f), "attrs.%s", p->pool + s->keys[i]);
      BAD(c, f, "duplicate attribute key");
    }
  return VD_OK;
}

static vd_rc check_refs(vctx *c, uint32_t ni, const vd_node_t *n, int outputs, scratch *s) {
  const vd_plan_t *p = c->p;
  uint32_t off = outputs ? n->out_off : n->in_off, cnt = outputs ? n->n_out : n->n_in;
  const char *what = outputs ? "out" : "in";
  char f[32];
  if ((size_t)off + cnt > p->n_refs) BROKEN(c, what, "references outside the ref array");
  for (uint32_t i = 0; i < cnt; i++) {
    uint32_t ti = p->refs[off + i];
    if (ti < p->n_tensors && p->tensors[ti].rank == n->rank && !(outputs && s->tstamp[ti] == ni + 1)) {
      if (outputs) s->tstamp[ti] = ni + 1;
      continue;
    }
    snprintf(f, sizeof(f), "%s[%" PRIu32 "]", what, i);
    if (ti >= p->n_tensors) BAD(c, f, "expected a tensor, got index %" PRIu32 " (no such tensor)", ti);
    const vd_tensor_t *t = &p->tensors[ti];
    if (t->rank != n->rank)
      BAD(c, f, "expected a tensor on the node's rank %" PRId32 ", got tensor %" PRId64 " on rank %" PRId32,
          n->rank, t->id, t->rank);
    BAD(c, f, "tensor %" PRId64 " is listed twice as an output", t->id);
  }
  return VD_OK;
}

static vd_rc check_group(vctx *c, uint32_t ni, const vd_node_t *n, scratch *s) {
  const vd_plan_t *p = c->p;
  char f[32];
  if (n->span_replicas != 0 && n->span_replicas != 1)
    BAD(c, "span_replicas", "expected 0 or 1, got %d", n->span_replicas);
  if (n->coll < 0) {
    if (n->coll != -1) BAD(c, "coll", "expected a key >= 0 (or -1: none), got %" PRId64, n->coll);
    if (n->n_group) BAD(c, "group", "expected no group on a node without a coll key, got %" PRIu32 " ranks", n->n_group);
    if (n->span_replicas) BAD(c, "span_replicas", "expected false on a node without a coll key");
    return VD_OK;
  }
  if ((size_t)n->group_off + n->n_group > p->n_ints) BROKEN(c, "group", "group outside the int array");
  const int64_t *g = p->ints + n->group_off;
  int has_self = 0;
  for (uint32_t i = 0; i < n->n_group; i++) {
    if (g[i] < 0 || g[i] >= p->world.stored_ranks || s->rstamp[g[i]] == ni + 1) {
      snprintf(f, sizeof(f), "group[%" PRIu32 "]", i);
      if (g[i] < 0 || g[i] >= p->world.stored_ranks)
        BAD(c, f, "expected a stored rank in [0, %" PRId32 "), got %" PRId64, p->world.stored_ranks, g[i]);
      BAD(c, f, "rank %" PRId64 " appears twice in the group", g[i]);
    }
    s->rstamp[g[i]] = ni + 1;
    if (g[i] == n->rank) has_self = 1;
  }
  if (!has_self)
    BAD(c, "group", "expected a group containing the node's rank %" PRId32 " (collective %" PRId64 "), got %" PRIu32
        " ranks without it", n->rank, n->coll, n->n_group);
  return VD_OK;
}

/* Collective pairing: all nodes with one coll key have the same group and
 * span_replicas, and exactly one of them runs on each group member. */
typedef struct {
  uint32_t first; /* node index */
  uint32_t count;
  uint32_t base;  /* into seen[] */
} coll_info;

static vd_rc check_collectives(vctx *c) {
  const vd_plan_t *p = c->p;
  vd_idmap_t map = {0};
  coll_info *info = NULL;
  uint8_t *seen = NULL;
  size_t n_info = 0, cap_info = 0, n_seen = 0;
  vd_rc rc = VD_OK;
  if (vd_idmap_init(&map, 16) != VD_OK) return VD_OOM(c->d);
  for (size_t ni = 0; ni < p->n_nodes; ni++) {
    const vd_node_t *n = &p->nodes[ni];
    if (n->coll < 0) continue;
    uint32_t k;
    int r = vd_idmap_put(&map, n->coll, (uint32_t)n_info, &k);
    if (r < 0) { rc = VD_OOM(c->d); goto done; }
    if (r == 0) {
      if (VD_GROW(info, cap_info, n_info + 1)) { rc = VD_OOM(c->d); goto done; }
      info[n_info] = (coll_info){(uint32_t)ni, 0, (uint32_t)n_seen};
      k = (uint32_t)n_info++;
      n_seen += n->n_group;
    }
  }
  seen = vd_calloc(n_seen ? n_seen : 1, 1);
  if (!seen) { rc = VD_OOM(c->d); goto done; }
  for (size_t ni = 0; ni < p->n_nodes; ni++) {
    const vd_node_t *n = &p->nodes[ni];
    if (n->coll < 0) continue;
    uint32_t k = 0;
    vd_idmap_get(&map, n->coll, &k);
    coll_info *ci = &info[k];
    const vd_node_t *f = &p->nodes[ci->first];
    set_rec(c, "node", n->id, n->name);
    if (f->n_group != n->n_group ||
        memcmp(p->ints + f->group_off, p->ints + n->group_off, n->n_group * sizeof(int64_t)) != 0) {
      rc = VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), "group",
                  "expected the same group as node %" PRId64 " (same coll key %" PRId64 ", in the same order)",
                  f->id, n->coll);
      goto done;
    }
    if (f->span_replicas != n->span_replicas) {
      rc = VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), "span_replicas",
                  "expected the same span_replicas as node %" PRId64 " (same coll key %" PRId64 ")", f->id, n->coll);
      goto done;
    }
    const int64_t *g = p->ints + n->group_off;
    for (uint32_t i = 0; i < n->n_group; i++)
      if (g[i] == n->rank) {
        if (seen[ci->base + i]) {
          rc = VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), "coll",
                      "expected one node per rank for collective %" PRId64 ", but rank %" PRId32
                      " has two (the other is earlier in the file)", n->coll, n->rank);
          goto done;
        }
        seen[ci->base + i] = 1;
      }
    ci->count++;
  }
  for (size_t k = 0; k < n_info; k++) {
    const vd_node_t *f = &p->nodes[info[k].first];
    if (info[k].count == f->n_group) continue;
    const int64_t *g = p->ints + f->group_off;
    int64_t missing = -1;
    for (uint32_t i = 0; i < f->n_group && missing < 0; i++)
      if (!seen[info[k].base + i]) missing = g[i];
    set_rec(c, "node", f->id, f->name);
    rc = VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), "coll",
                "collective %" PRId64 ": expected one node on each of the %" PRIu32 " group ranks, got %" PRIu32
                " (rank %" PRId64 " has none)", f->coll, f->n_group, info[k].count, missing);
    goto done;
  }
done:
  vd_idmap_free(&map);
  vd_free(info);
  vd_free(seen);
  return rc;
}

static vd_rc check_node(vctx *c, uint32_t ni, scratch *s) {
  const vd_plan_t *p = c->p;
  const vd_node_t *n = &p->nodes[ni];
  if (!pool_ok(p, n->op) || !pool_ok(p, n->name)) BROKEN(c, "op", "string offset outside the pool");
  if (!p->pool[n->op]) BAD(c, "op", "expected an operator name, got \"\"");
  if (n->rank < 0 || n->rank >= p->world.stored_ranks)
    BAD(c, "rank", "expected a stored rank in [0, %" PRId32 "), got %" PRId32, p->world.stored_ranks, n->rank);
  if (n->segment < 0 || (size_t)n->segment >= p->n_segments)
    BAD(c, "segment", "expected a segment index in [0, %zu), got %" PRId32 " (no such segment)", p->n_segments,
        n->segment);
  if (n->layer < -1) BAD(c, "layer", "expected a layer >= 0 or -1 (none), got %" PRId32, n->layer);
  if ((unsigned)n->phase >= VD_PHASE__COUNT)
    BAD(c, "phase", "expected a phase enum < %d, got %d", VD_PHASE__COUNT, (int)n->phase);
  VD_CHECK(check_refs(c, ni, n, 0, s));
  VD_CHECK(check_refs(c, ni, n, 1, s));
  VD_CHECK(check_attrs(c, n, s));
  return check_group(c, ni, n, s);
}

/* ---- the record checks in parallel ------------------------------------ */

/* OPTIMIZATION-ONLY: check_tensor and check_node judge one record each and
 * read nothing but the plan (check_node's scratch stamps are keyed by the
 * node's own index), so on a large plan they first run in parallel, each
 * thread over a contiguous range with its own context, diag and scratch,
 * to find the first record that fails (*first; the count when none does).
 * The serial loop of vd_plan_validate then runs only the duplicate-id check
 * on the records before it and everything from it on, exactly as without
 * this pass: the first error, its message and its diag are the serial
 * ones.  An allocation that fails here is reported as such (SIZE_MAX). */
#define PAR_MIN_RECORDS 4096
#define PAR_MAX_THREADS 8

static size_t first_bad(const vctx *c0, int nodes, size_t n) {
  const vd_plan_t *p = c0->p;
  int nt = omp_get_max_threads();
  if (nt > PAR_MAX_THREADS) nt = PAR_MAX_THREADS;
  if (n < PAR_MIN_RECORDS || nt < 2 || omp_in_parallel()) return 0;
  size_t first = n;
  int oom = 0;
#pragma omp parallel num_threads(nt) reduction(min : first) reduction(| : oom)
  {
    vd_diag dd;
    vd_diag_clear(&dd);
    vctx c = *c0;
    c.d = &dd;
    scratch s = {0};
    int ok = 1;
    if (nodes) {
      s.tstamp = vd_calloc(p->n_tensors ? p->n_tensors : 1, sizeof(uint32_t));
      s.rstamp = vd_calloc((size_t)p->world.stored_ranks, sizeof(uint32_t));
      ok = s.tstamp && s.rstamp;
    }
    int t = omp_get_thread_num(), k = omp_get_num_threads();
    size_t lo = n * (size_t)t / (size_t)k, hi = n * (size_t)(t + 1) / (size_t)k;
    if (!ok) oom = 1;
    for (size_t i = lo; i < hi && ok; i++) {
      vd_rc r;
      if (nodes) {
        set_rec(&c, "node", p->nodes[i].id, p->nodes[i].name);
        r = check_node(&c, (uint32_t)i, &s);
      } else {
        set_rec(&c, "tensor", p->tensors[i].id, p->tensors[i].name);
        r = check_tensor(&c, &p->tensors[i]);
      }
      if (r != VD_OK) {
        first = i;
        oom |= r == VD_ENOMEM;
        break;
      }
    }
    vd_free(s.tstamp);
    vd_free(s.rstamp);
    vd_free(s.keys);
  }
  return oom ? SIZE_MAX : first;
}

/* Makes record i ("<kind> <id> '<name>'") the current one and registers
 * its id in ids (not when the ids increase, distinct already).  VD_EINPUT
 * on a duplicate id, naming the record that has it first. */
static vd_rc record_id(vctx *c, vd_idmap_t *ids, int inc, const char *kind, int64_t id, uint32_t name, size_t i) {
  set_rec(c, kind, id, name);
  uint32_t old;
  int r = inc ? 0 : vd_idmap_put(ids, id, (uint32_t)i, &old);
  if (r < 0) return VD_OOM(c->d);
  if (r > 0)
    return VD_ERR(c->d, VD_EINPUT, c->file, rec_of(c), "id", "duplicate %s id %" PRId64 " (also %ss[%" PRIu32 "])",
                  kind, id, kind, old);
  return VD_OK;
}

vd_rc vd_plan_validate(const vd_plan_t *p, const char *name, vd_diag *d) {
  vctx c = {.p = p, .file = name ? name : "", .d = d};
  scratch s = {0};
  vd_idmap_t ids = {0};
  vd_rc rc = VD_OK;
  if (!p->pool || p->n_pool == 0 || p->pool[p->n_pool - 1] != '\0')
    return VD_ERR(d, VD_EINTERNAL, c.file, "plan", "pool", "string pool missing or not NUL-terminated");
  if (p->kind != VD_PLAN_SINGLE && p->kind != VD_PLAN_PARALLEL)
    return VD_ERR(d, VD_EINPUT, c.file, "plan", "kind", "expected single or parallel, got %d", (int)p->kind);
  if (!pool_ok(p, p->model)) return VD_ERR(d, VD_EINTERNAL, c.file, "plan", "model", "string offset outside the pool");
  VD_CHECK(check_world(&c));
  VD_CHECK(check_schedule(&c));

  if (vd_idmap_init(&ids, p->n_tensors) != VD_OK) return VD_OOM(d);
  int t_inc = 1, n_inc = 1; /* ids strictly increasing: distinct without hashing */
  for (size_t i = 1; i < p->n_tensors && t_inc; i++) t_inc = p->tensors[i].id > p->tensors[i - 1].id;
  for (size_t i = 1; i < p->n_nodes && n_inc; i++) n_inc = p->nodes[i].id > p->nodes[i - 1].id;
  size_t from = first_bad(&c, 0, p->n_tensors); /* records before it pass check_tensor */
  if (from == SIZE_MAX) { rc = VD_OOM(d); goto done; }
  for (size_t i = 0; i < p->n_tensors; i++) {
    const vd_tensor_t *t = &p->tensors[i];
    if (i < from && t_inc) continue;
    if ((rc = record_id(&c, &ids, t_inc, "tensor", t->id, t->name, i)) != VD_OK) goto done;
    if (i >= from && (rc = check_tensor(&c, t)) != VD_OK) goto done;
  }
  vd_idmap_free(&ids);
  if (vd_idmap_init(&ids, p->n_nodes) != VD_OK) return VD_OOM(d);
  s.tstamp = vd_calloc(p->n_tensors ? p->n_tensors : 1, sizeof(uint32_t));
  s.rstamp = vd_calloc((size_t)p->world.stored_ranks, sizeof(uint32_t));
  if (!s.tstamp || !s.rstamp) { rc = VD_OOM(d); goto done; }
  from = first_bad(&c, 1, p->n_nodes);
  if (from == SIZE_MAX) { rc = VD_OOM(d); goto done; }
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    if (i < from && n_inc) continue;
    if ((rc = record_id(&c, &ids, n_inc, "node", n->id, n->name, i)) != VD_OK) goto done;
    if (i >= from && (rc = check_node(&c, (uint32_t)i, &s)) != VD_OK) goto done;
  }
  rc = check_collectives(&c);
done:
  vd_idmap_free(&ids);
  vd_free(s.tstamp);
  vd_free(s.rstamp);
  vd_free(s.keys);
  return rc;
}
