/*
 * bugs/mutate_mb.c - confines a mutation to one microbatch
 * (`verdict mutate --bug N --microbatch M`, for every bug but 14, whose
 * --microbatch names the overtaken microbatch).
 *
 * The plan format runs a segment's nodes for every microbatch of its steps,
 * so a bug in one microbatch only needs its own copy of the code: each
 * changed node gets a segment of its own on its rank, with the original node
 * in it, and a variant segment holding the mutated node; the rank's steps
 * run the variant for microbatch M and the original for the others.  The
 * nodes around a changed node are split into segments of their own
 * (same nodes, same order), so every other microbatch runs exactly what it
 * ran before.  The original and the variant run the same operators with the
 * same names on the same tensors: a microbatch whose code differs only in
 * values, the way a data-dependent kernel bug would.
 *
 * Only nodes that run per microbatch and are not collectives can be confined
 * (a collective's members pair across ranks by key: one node per rank).
 * Invariants: the output passes vd_plan_validate (checked by the caller).
 */
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "bug_int.h"

static int same_attrs(const vd_plan_t *a, const vd_node_t *x, const vd_plan_t *b, const vd_node_t *y) {
  if (x->n_attr != y->n_attr) return 0;
  for (uint32_t k = 0; k < x->n_attr; k++) {
    const vd_attr_t *p = &a->attrs[x->attr_off + k], *q = &b->attrs[y->attr_off + k];
    if (p->kind != q->kind || p->len != q->len || strcmp(a->pool + p->key, b->pool + q->key)) return 0;
    switch (p->kind) {
    case VD_ATTR_INT: if (p->v.i != q->v.i) return 0; break;
    case VD_ATTR_FLOAT: if (memcmp(&p->v.f, &q->v.f, sizeof(double))) return 0; break;
    case VD_ATTR_STR: if (strcmp(a->pool + p->v.s, b->pool + q->v.s)) return 0; break;
    case VD_ATTR_INTS: if (p->len && memcmp(a->ints + p->v.off, b->ints + q->v.off, p->len * sizeof(int64_t))) return 0; break;
    case VD_ATTR_FLOATS: if (p->len && memcmp(a->floats + p->v.off, b->floats + q->v.off, p->len * sizeof(double))) return 0; break;
    }
  }
  return 1;
}

/* Whether node i of b differs from node i of a (operator, name, placement,
 * operands, group or attributes). */
static int node_changed(const vd_plan_t *a, const vd_plan_t *b, uint32_t i) {
  const vd_node_t *x = &a->nodes[i], *y = &b->nodes[i];
  if (x->id != y->id || x->rank != y->rank || x->segment != y->segment || x->layer != y->layer ||
      x->phase != y->phase || x->coll != y->coll || x->span_replicas != y->span_replicas || x->n_in != y->n_in ||
      x->n_out != y->n_out || x->n_group != y->n_group || strcmp(a->pool + x->op, b->pool + y->op) ||
      strcmp(a->pool + x->name, b->pool + y->name))
    return 1;
  if (memcmp(a->refs + x->in_off, b->refs + y->in_off, x->n_in * sizeof(uint32_t)) ||
      memcmp(a->refs + x->out_off, b->refs + y->out_off, x->n_out * sizeof(uint32_t)) ||
      (x->n_group && memcmp(a->ints + x->group_off, b->ints + y->group_off, x->n_group * sizeof(int64_t))))
    return 1;
  return !same_attrs(a, x, b, y);
}

/* Appends to p a copy of node x of plan `in` (whose pool, ints and floats
 * are prefixes of p's) with id `id` in segment seg. */
static vd_rc append_original(vd_plan_t *p, const vd_plan_t *in, const vd_node_t *x, int64_t id, int32_t seg) {
  vd_node_t n = *x;
  n.id = id;
  n.segment = seg;
  n.n_group = 0;
  uint32_t idx;
  VD_CHECK(vd_plan_add_node(p, &n, in->pool + x->op, in->pool + x->name, in->refs + x->in_off, x->n_in,
                            in->refs + x->out_off, x->n_out, NULL, 0, &idx));
  if (VD_GROW(p->attrs, p->cap_attrs, p->n_attrs + x->n_attr)) return VD_ENOMEM;
  vd_node_t *nn = &p->nodes[idx];
  nn->attr_off = (uint32_t)p->n_attrs;
  nn->n_attr = x->n_attr;
  for (uint32_t k = 0; k < x->n_attr; k++) {
    vd_attr_t a = in->attrs[x->attr_off + k];
    if (a.kind == VD_ATTR_INTS) {
      if (VD_GROW(p->ints, p->cap_ints, p->n_ints + a.len + 1)) return VD_ENOMEM;
      if (a.len) memcpy(p->ints + p->n_ints, in->ints + a.v.off, a.len * sizeof(int64_t));
      a.v.off = (uint32_t)p->n_ints;
      p->n_ints += a.len;
    } else if (a.kind == VD_ATTR_FLOATS) {
      if (VD_GROW(p->floats, p->cap_floats, p->n_floats + a.len + 1)) return VD_ENOMEM;
      if (a.len) memcpy(p->floats + p->n_floats, in->floats + a.v.off, a.len * sizeof(double));
      a.v.off = (uint32_t)p->n_floats;
      p->n_floats += a.len;
    }
    p->attrs[p->n_attrs++] = a;
  }
  return VD_OK;
}

/* One rank's split of one segment: the new segments in run order, and for
 * each run the variant segment to use in microbatch mb instead (or -1). */
typedef struct {
  int32_t rank, seg;
  int32_t *runs, *variant;
  size_t n_runs, cap_runs, cap_var;
} split_t;

static void splits_free(split_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    vd_free(s[i].runs);
    vd_free(s[i].variant);
  }
  vd_free(s);
}

/* Marks in chg the nodes the bug changed; each must be a per-microbatch
 * compute node, and there must be one. */
static vd_rc mark_changed(vd_bug_ctx *c, int32_t mb, uint8_t *chg) {
  const vd_plan_t *in = c->in;
  size_t n_chg = 0;
  for (uint32_t i = 0; i < in->n_nodes; i++) {
    if (!node_changed(in, c->p, i)) continue;
    const vd_node_t *x = &in->nodes[i];
    if (x->coll >= 0 || !vd_bug_i_seg_per_mb(in, x->segment))
      return VD_ERR(c->d, VD_EUSAGE, NULL, NULL, "--microbatch",
                    "bug %d changes %s '%s', which %s: it cannot be confined to microbatch %d", c->bug,
                    in->pool + x->op, in->pool + x->name, x->coll >= 0 ? "is a collective" : "does not run per microbatch",
                    mb);
    chg[i] = 1;
    n_chg++;
  }
  if (!n_chg) return VD_ERR(c->d, VD_EUSAGE, NULL, NULL, "--microbatch", "bug %d changed no node to confine", c->bug);
  return VD_OK;
}

/* Splits segment s->seg of rank s->rank into runs: each changed node gets
 * a run of its own (the original node there, appended with ids from
 * *next_id) and a variant segment for microbatch mb (the mutated node);
 * the unchanged nodes between them share a run. */
static vd_rc split_segment(vd_bug_ctx *c, int32_t mb, const uint8_t *chg, split_t *s, int64_t *next_id) {
  vd_plan_t *p = c->p;
  const vd_plan_t *in = c->in;
  int32_t rank = s->rank, seg = s->seg;
  int32_t cur = -1; /* segment of the current run of unchanged nodes */
  char name[256];
  vd_rc rc;
  for (uint32_t j = 0; j < in->n_nodes; j++) {
    const vd_node_t *x = &in->nodes[j];
    if (x->rank != rank || x->segment != seg) continue;
    if (!chg[j] && cur >= 0) {
      p->nodes[j].segment = cur;
      continue;
    }
    snprintf(name, sizeof(name), "%s#r%d.%zu", vd_bug_i_seg_name(in, seg), rank, s->n_runs);
    int32_t ns, vs = -1;
    if ((rc = vd_plan_add_segment(p, name, &ns)) != VD_OK) return rc;
    if (chg[j]) {
      /* the original node runs in the run's segment, the mutated one
       * (node j of p) in the variant segment */
      snprintf(name, sizeof(name), "%s#r%d.%zu@mb%d", vd_bug_i_seg_name(in, seg), rank, s->n_runs, mb);
      if ((rc = vd_plan_add_segment(p, name, &vs)) != VD_OK) return rc;
      p->nodes[j].segment = vs;
      if ((rc = append_original(p, in, x, (*next_id)++, ns)) != VD_OK) return rc;
      cur = -1;
    } else {
      p->nodes[j].segment = ns;
      cur = ns;
    }
    if (VD_GROW(s->runs, s->cap_runs, s->n_runs + 1) || VD_GROW(s->variant, s->cap_var, s->n_runs + 1))
      return VD_ENOMEM;
    s->runs[s->n_runs] = ns;
    s->variant[s->n_runs++] = vs;
  }
  return VD_OK;
}

/* Rebuilds the steps: a split segment's step runs its runs in order (the
 * variants in microbatch mb). */
static vd_rc rebuild_steps(vd_plan_t *p, const split_t *sp, size_t n_sp, int32_t mb) {
  vd_step_t *old;
  vd_program_t *prog;
  VD_CHECK(vd_bug_i_take_steps(p, &old, &prog));
  vd_rc rc = VD_OK;
  for (int32_t r = 0; r < p->world.stored_ranks && rc == VD_OK; r++)
    for (uint32_t i = 0; i < prog[r].n_steps && rc == VD_OK; i++) {
      const vd_step_t *st = &old[prog[r].step_off + i];
      const split_t *s = NULL;
      for (size_t k = 0; k < n_sp && !s; k++)
        if (sp[k].rank == r && sp[k].seg == st->segment) s = &sp[k];
      if (!s) {
        rc = vd_plan_add_step(p, r, st->segment, st->mb);
        continue;
      }
      for (size_t k = 0; k < s->n_runs && rc == VD_OK; k++)
        rc = vd_plan_add_step(p, r, st->mb == mb && s->variant[k] >= 0 ? s->variant[k] : s->runs[k], st->mb);
    }
  vd_free(old);
  vd_free(prog);
  return rc;
}

vd_rc vd_bug_i_confine_mb(vd_bug_ctx *c, int32_t mb) {
  vd_plan_t *p = c->p;
  const vd_plan_t *in = c->in;
  if (p->n_nodes != in->n_nodes || p->n_steps != in->n_steps || p->n_segments != in->n_segments ||
      memcmp(p->steps, in->steps, in->n_steps * sizeof(*in->steps)))
    return VD_ERR(c->d, VD_EUSAGE, NULL, NULL, "--microbatch",
                  "bug %d adds or removes nodes or steps: it cannot be confined to one microbatch", c->bug);
  size_t n_nodes = in->n_nodes;
  uint8_t *chg = vd_calloc(n_nodes ? n_nodes : 1, 1);
  split_t *sp = NULL;
  size_t n_sp = 0, cap_sp = 0;
  vd_rc rc = VD_OK;
  if (!chg) return VD_ENOMEM;
  if ((rc = mark_changed(c, mb, chg)) != VD_OK) goto done;
  /* Split every (rank, segment) holding a changed node into runs. */
  int64_t next_id = vd_bug_i_new_node_id(p);
  for (uint32_t i = 0; i < n_nodes; i++) {
    if (!chg[i]) continue;
    int32_t rank = in->nodes[i].rank, seg = in->nodes[i].segment;
    int seen = 0;
    for (size_t k = 0; k < n_sp && !seen; k++) seen = sp[k].rank == rank && sp[k].seg == seg;
    if (seen) continue;
    if (VD_GROW(sp, cap_sp, n_sp + 1)) {
      rc = VD_ENOMEM;
      goto done;
    }
    split_t *s = &sp[n_sp++];
    memset(s, 0, sizeof(*s));
    s->rank = rank;
    s->seg = seg;
    if ((rc = split_segment(c, mb, chg, s, &next_id)) != VD_OK) goto done;
  }
  rc = rebuild_steps(p, sp, n_sp, mb);
  if (rc == VD_OK) {
    c->r->mb = mb;
    size_t l = strlen(c->r->what);
    snprintf(c->r->what + l, sizeof(c->r->what) - l, "; in microbatch %d only", mb);
  }
done:
  vd_free(chg);
  splits_free(sp, n_sp);
  return rc;
}
