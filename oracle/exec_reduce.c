/*
 * oracle/exec_reduce.c - reduced copies of a single/parallel plan pair for
 * the numeric executor (exec.h, vd_exec_reduce).
 *
 * Real plans (nnScaler's Llama-3: [16,128,51200] logits, 4096-wide linears)
 * cannot be executed in double precision at their own shapes.  This file
 * shrinks both plans with the verifier's own shape reduction (ops/reduce.h,
 * docs/shape-reduction.md), applied to the WHOLE pair instead of one stage:
 *   - one value per plan tensor of either plan (every version, replica and
 *     microbatch of a tensor has the tensor's shape, so they share it);
 *   - one node per plan node as the SSA graph runs it (graph/graph.h: the
 *     participants of a collective or send/recv pair are one node, so the
 *     rule sees the group size), each plan node once;
 *   - a lineage relation per annotated parallel tensor (slice [lo, hi) of
 *     its single tensor), its DP and microbatch shifts as positions.
 * Every class of tied dimensions then shrinks by one ratio g/m, and the
 * copies get the reduced shapes, reduced lineage (lo, hi, shifts) and the
 * scaled position attributes (embedding/pick start, rope pos_offset,
 * causal_mask offsets).  The executor runs the copies unchanged.
 *
 * Not here: executing (exec.c); deciding when to reduce (the CLI).
 * Invariant: scaling is exact (g divides every size and position of its
 * class), so a reduced slice has exactly the reduced tensor's extents.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../graph/graph.h"
#include "../ops/reduce.h"
#include "exec.h"
#include "exec_int.h"
#include "../ops/ops.h"

int64_t vd_exec_max_numel(const vd_plan_t *p) {
  int64_t m = 0;
  for (size_t i = 0; p && i < p->n_tensors; i++) {
    int64_t n = vd_tensor_numel(&p->tensors[i]);
    if (n > m) m = n;
  }
  return m;
}

/* ---- plan copy ------------------------------------------------------------ */

static void *dup_array(const void *src, size_t n, size_t size, int *fail) {
  if (!n) return NULL;
  void *p = vd_malloc(n * size);
  if (!p) {
    *fail = 1;
    return NULL;
  }
  memcpy(p, src, n * size);
  return p;
}

/* Deep copy of a plan (same indices everywhere). */
static vd_rc plan_copy(const vd_plan_t *s, vd_plan_t *o, vd_diag *d) {
  int fail = 0;
  memset(o, 0, sizeof(*o));
  o->kind = s->kind;
  o->model = s->model;
  o->world = s->world;
/* o's array f: a copy of s's n_f elements, its count and capacity n_f. */
#define COPY_ARRAY(f) (o->f = dup_array(s->f, s->n_##f, sizeof(*s->f), &fail), o->n_##f = o->cap_##f = s->n_##f)
  COPY_ARRAY(tensors);
  COPY_ARRAY(nodes);
  COPY_ARRAY(segments);
  o->programs = dup_array(s->programs, s->programs ? (size_t)s->world.stored_ranks : 0, sizeof(*s->programs), &fail);
  COPY_ARRAY(steps);
  COPY_ARRAY(refs);
  COPY_ARRAY(attrs);
  COPY_ARRAY(ints);
  COPY_ARRAY(floats);
  COPY_ARRAY(pool);
#undef COPY_ARRAY
  if (fail) {
    vd_plan_free(o);
    return VD_OOM(d);
  }
  return VD_OK;
}

/* ---- the whole-pair problem --------------------------------------------------- */

typedef struct {
  const vd_plan_t *plan[2];
  const char *file[2];
  vd_graph_t g[2];
  uint32_t base[2]; /* first reducer value of each plan's tensors */
  vd_reducer *red;
  vd_exec_reduce_info *info;
  uint32_t *ops, n_ops_cap;
} pair_t;

static void node_rec(const pair_t *c, int side, uint32_t pn, char *buf, size_t n) {
  const vd_plan_t *p = c->plan[side];
  const vd_node_t *nd = &p->nodes[pn];
  snprintf(buf, n, "%s node %lld '%s' (op %s, rank %d) of %s", side ? "parallel" : "single", (long long)nd->id,
           vd_plan_s(p, nd->name), vd_node_op(p, nd), nd->rank, c->file[side]);
}

/* Dimensions that bound the executor's random integer inputs (token ids,
 * labels: exec.c's int_bound) keep at least this many entries.  With the
 * vocabulary reduced to one row every token would be equal, every batch row
 * of the activations identical, and a permutation of rows (a wrong gather
 * order, a wrong group) invisible. */
#define EXEC_INT_RANGE_MIN 16

static void int_dims(pair_t *c, vd_op_id op, const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out) {
  uint32_t v = ~0u;
  int32_t dim = 0;
  if (op == VD_OP_EMBEDDING && n_in == 2) {
    v = in[1];
  } else if (op == VD_OP_EMBEDDING_BACKWARD && n_out == 1) {
    v = out[0];
  } else if (op == VD_OP_PICK && n_in == 2) {
    v = in[0];
    dim = 1;
  } else if (op == VD_OP_PICK_BACKWARD && n_out == 1) {
    v = out[0];
    dim = 1;
  }
  if (v != ~0u) vd_reducer_min_extent(c->red, v, dim, EXEC_INT_RANGE_MIN);
}

/* Applies every plan node's rule once.  Returns VD_OK with info->status set
 * when the pair cannot be reduced or the parallel plan's shapes contradict a
 * rule; VD_EINPUT when the single plan's do. */
static vd_rc add_nodes(pair_t *c, int side, vd_diag *d) {
  const vd_plan_t *p = c->plan[side];
  const vd_graph_t *g = &c->g[side];
  uint8_t *seen = vd_calloc(p->n_nodes + 1, 1);
  if (!seen) return VD_OOM(d);
  vd_rc rc = VD_OK;
  char rec[400];
  for (size_t k = 0; k < g->n_nodes && rc == VD_OK; k++) {
    const vd_gnode_t *gn = &g->nodes[k];
    if (gn->pnode >= p->n_nodes || seen[gn->pnode]) continue;
    seen[gn->pnode] = 1;
    const vd_node_t *nd = &p->nodes[gn->pnode];
    node_rec(c, side, gn->pnode, rec, sizeof(rec));
    vd_op_id op = vd_op_lookup(vd_node_op(p, nd));
    if (op == VD_OP__UNKNOWN) {
      c->info->status = VD_EXEC_RED_UNSUPPORTED;
      snprintf(c->info->reason, sizeof(c->info->reason), "unsupported operator '%s' at %s", vd_node_op(p, nd), rec);
      break;
    }
    uint32_t n = gn->n_in + gn->n_out;
    if (n > c->n_ops_cap) {
      vd_free(c->ops);
      c->ops = vd_calloc(n, sizeof(*c->ops));
      c->n_ops_cap = c->ops ? n : 0;
      if (!c->ops) {
        rc = VD_OOM(d);
        break;
      }
    }
    const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
    for (uint32_t i = 0; i < gn->n_in; i++) c->ops[i] = c->base[side] + g->values[iv[i]].tensor;
    for (uint32_t i = 0; i < gn->n_out; i++) c->ops[gn->n_in + i] = c->base[side] + g->values[ov[i]].tensor;
    int norule = 0;
    vd_diag nd_d;
    vd_diag_clear(&nd_d);
    rc = vd_reducer_node(c->red, ((uint32_t)side << 31) | gn->pnode, op, p, nd, c->ops, gn->n_in,
                         c->ops + gn->n_in, gn->n_out, rec, &norule, &nd_d);
    if (rc == VD_EINPUT && side == 1) {
      c->info->status = VD_EXEC_RED_PARALLEL_SHAPE;
      vd_diag_format(&nd_d, c->info->reason, sizeof(c->info->reason));
      rc = VD_OK;
      break;
    }
    if (rc != VD_OK) {
      *d = nd_d;
      break;
    }
    if (!norule) int_dims(c, op, c->ops, gn->n_in, c->ops + gn->n_in, gn->n_out);
    if (norule) {
      c->info->status = VD_EXEC_RED_CANNOT;
      snprintf(c->info->reason, sizeof(c->info->reason),
               "cannot reduce: operator %s has no reduction rule for this operand form at %s", vd_op_name(op), rec);
      break;
    }
  }
  vd_free(seen);
  return rc;
}

static vd_rc build_graph(pair_t *c, int side, vd_diag *d) {
  vd_graph_opts go = {.expand_replicas = 1};
  vd_diag gd;
  vd_diag_clear(&gd);
  vd_rc rc = vd_graph_build(c->plan[side], &go, &c->g[side], &gd);
  /* A dataflow issue still leaves a usable graph; the executor reports it. */
  if (rc == VD_EINPUT && c->g[side].n_issues > 0 && side == 1) return VD_OK;
  if (rc != VD_OK) {
    *d = gd;
    vd_diag_set_file(d, c->file[side]);
  }
  return rc;
}

/* Sets the copies' shapes, lineage and position attributes. */
static vd_rc apply(pair_t *c, const vd_exec_i_id *ids, size_t n_ids, vd_plan_t *out[2], vd_diag *d) {
  for (int side = 0; side < 2; side++) {
    vd_plan_t *o = out[side];
    for (size_t t = 0; t < o->n_tensors; t++) {
      vd_tensor_t *T = &o->tensors[t];
      uint32_t v = c->base[side] + (uint32_t)t;
      for (int32_t j = 0; j < T->ndim; j++) T->shape[j] = vd_reducer_scale(c->red, v, j, T->shape[j]);
      if (side == 0 || !T->has_lin) continue;
      const vd_exec_i_id *f = vd_exec_i_ids_find(ids, n_ids, T->lin.full);
      if (!f || c->plan[0]->tensors[f->idx].ndim != T->ndim) continue; /* exec reports it */
      for (int32_t j = 0; j < T->ndim; j++) {
        vd_lineage_ann *a = &T->lin;
        a->lo[j] = vd_reducer_scale(c->red, f->idx, j, a->lo[j]);
        a->hi[j] = vd_reducer_scale(c->red, f->idx, j, a->hi[j]);
        a->dp_shift[j] = vd_reducer_scale(c->red, f->idx, j, a->dp_shift[j]);
        a->mb_shift[j] = vd_reducer_scale(c->red, f->idx, j, a->mb_shift[j]);
      }
    }
  }
  /* Position attributes: each plan attribute gets one scaled value. */
  size_t na0 = c->plan[0]->n_attrs, na = na0 + c->plan[1]->n_attrs;
  uint8_t *set = vd_calloc(na + 1, 1);
  if (!set) return VD_OOM(d);
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < vd_reducer_n_pos(c->red); i++) {
    uint32_t tag;
    const char *attr;
    int64_t orig, scaled;
    vd_reducer_pos(c->red, i, &tag, &attr, &orig, &scaled);
    int side = (int)(tag >> 31);
    uint32_t pn = tag & 0x7fffffffu;
    const vd_plan_t *p = c->plan[side];
    const vd_attr_t *a = vd_node_attr(p, &p->nodes[pn], attr);
    if (!a || a->kind != VD_ATTR_INT) continue; /* the rule read the default */
    size_t ai = (size_t)(a - p->attrs), slot = (side ? na0 : 0) + ai;
    vd_attr_t *oa = &out[side]->attrs[ai];
    if (set[slot] && oa->v.i != scaled) {
      char rec[400];
      node_rec(c, side, pn, rec, sizeof(rec));
      c->info->status = VD_EXEC_RED_CANNOT;
      snprintf(c->info->reason, sizeof(c->info->reason),
               "cannot reduce: attribute '%s' = %lld of %s is a position along two dimensions that scale "
               "differently (%lld vs %lld)",
               attr, (long long)orig, rec, (long long)oa->v.i, (long long)scaled);
      break;
    }
    set[slot] = 1;
    oa->v.i = scaled;
  }
  vd_free(set);
  /* Averaging nodes keep dividing by their reduced count here, unlike the
   * verifier's AVG rule (docs/shape-reduction.md): dividing n reduced terms
   * by the full count N leaves normalised rows sqrt(N/n) too large, and in
   * double precision the error then grows past the comparison tolerance
   * through attention (a corpus GPT pair: 9e-15 -> 4.5e-9).  So `exec
   * --reduce` does not judge constants tied to extents; `exec --no-reduce`
   * and the verifier do. */
  return rc;
}

/* The reducer over both plans' tensors (rv: one value per tensor, single then parallel). */
static vd_rc new_reducer(pair_t *c, vd_red_value *rv, size_t n_vals, vd_diag *d) {
  c->base[0] = 0;
  c->base[1] = (uint32_t)c->plan[0]->n_tensors;
  for (int side = 0; side < 2; side++)
    for (size_t t = 0; t < c->plan[side]->n_tensors; t++) {
      const vd_tensor_t *T = &c->plan[side]->tensors[t];
      rv[c->base[side] + t] = (vd_red_value){T->ndim, T->shape};
    }
  return vd_reducer_new(rv, (uint32_t)n_vals, &c->red, d);
}

/* Lineage of parallel tensor t: its slice of the single tensor (ids: the single plan's tensor
 * ids, sorted) and its shifts.  What the executor rejects at full size (exec.c check_ann) is
 * rejected here too: a slice that cannot be scaled with its single tensor. */
static vd_rc relate_slice(pair_t *c, const vd_exec_i_id *ids, size_t t, vd_diag *d) {
  const vd_plan_t *single = c->plan[0], *parallel = c->plan[1];
  const vd_tensor_t *T = &parallel->tensors[t];
  if (!T->has_lin) return VD_OK;
  const vd_exec_i_id *f = vd_exec_i_ids_find(ids, single->n_tensors, T->lin.full);
  char rec[300];
  snprintf(rec, sizeof(rec), "parallel tensor %lld '%s'", (long long)T->id, vd_plan_s(parallel, T->name));
  if (!f)
    return VD_ERR(d, VD_EINPUT, c->file[1], rec, "lineage.full", "expected a tensor id of the single plan, got %lld",
                  (long long)T->lin.full);
  if (single->tensors[f->idx].ndim != T->ndim)
    return VD_ERR(d, VD_EINPUT, c->file[1], rec, "lineage", "the slice has %d dims, single tensor '%s' has %d",
                  T->ndim, vd_plan_s(single, single->tensors[f->idx].name), single->tensors[f->idx].ndim);
  vd_diag ld;
  vd_diag_clear(&ld);
  vd_rc rc = vd_reducer_relate(c->red, c->base[1] + (uint32_t)t, f->idx, T->lin.lo, T->lin.hi, rec, &ld);
  if (rc == VD_EINPUT) { /* a pair the reduction cannot take, not bad input */
    c->info->status = VD_EXEC_RED_PARALLEL_SHAPE;
    vd_diag_set_file(&ld, c->file[1]);
    vd_diag_format(&ld, c->info->reason, sizeof(c->info->reason));
    return VD_OK;
  }
  if (rc != VD_OK) {
    *d = ld;
    return rc;
  }
  for (int32_t j = 0; j < T->ndim; j++) {
    vd_reducer_position(c->red, f->idx, j, T->lin.dp_shift[j]);
    vd_reducer_position(c->red, f->idx, j, T->lin.mb_shift[j]);
  }
  return VD_OK;
}

/* The reduced copies must be plans the executor accepts: else the status says why not. */
static void validate_copies(pair_t *c, vd_plan_t *rs, vd_plan_t *rp) {
  vd_diag vd;
  vd_diag_clear(&vd);
  if (vd_plan_validate(rs, c->file[0], &vd) != VD_OK || vd_plan_validate(rp, c->file[1], &vd) != VD_OK) {
    char line[400];
    vd_diag_format(&vd, line, sizeof(line));
    c->info->status = VD_EXEC_RED_CANNOT;
    snprintf(c->info->reason, sizeof(c->info->reason), "cannot reduce: the reduced plan is not valid: %s", line);
  }
}

vd_rc vd_exec_reduce(const vd_plan_t *single, const vd_plan_t *parallel, const vd_exec_opts *o, vd_plan_t *rs,
                     vd_plan_t *rp, vd_exec_reduce_info *info, vd_diag *d) {
  memset(info, 0, sizeof(*info));
  memset(rs, 0, sizeof(*rs));
  memset(rp, 0, sizeof(*rp));
  info->max_numel = vd_exec_max_numel(single);
  int64_t mp = vd_exec_max_numel(parallel);
  if (mp > info->max_numel) info->max_numel = mp;
  pair_t c;
  memset(&c, 0, sizeof(c));
  c.plan[0] = single;
  c.plan[1] = parallel;
  c.file[0] = o && o->single_name ? o->single_name : "single plan";
  c.file[1] = o && o->parallel_name ? o->parallel_name : "parallel plan";
  c.info = info;
  vd_rc rc;
  vd_exec_i_id *ids = NULL;
  vd_red_value *rv = NULL;
  size_t n_vals = single->n_tensors + parallel->n_tensors;
  if (n_vals >= 0x7fffffffu || single->n_nodes >= 0x7fffffffu || parallel->n_nodes >= 0x7fffffffu)
    VD_FAIL(d, VD_EINPUT, c.file[1], "plan", "tensors", "too many tensors or nodes to reduce (%zu)", n_vals);

  if ((rc = build_graph(&c, 0, d)) != VD_OK) goto done;
  if ((rc = build_graph(&c, 1, d)) != VD_OK) goto done;

  rv = vd_calloc(n_vals + 1, sizeof(*rv));
  ids = vd_calloc(single->n_tensors + 1, sizeof(*ids));
  if (!rv || !ids) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = new_reducer(&c, rv, n_vals, d)) != VD_OK) goto done;
  vd_exec_i_ids_sort(single, ids);

  /* Operator rules: the single plan's, then the parallel plan's. */
  for (int side = 0; side < 2 && info->status == VD_EXEC_RED_OK; side++)
    if ((rc = add_nodes(&c, side, d)) != VD_OK) goto done;
  if (info->status != VD_EXEC_RED_OK) goto done;

  /* Lineage: slices and their shifts. */
  for (size_t t = 0; t < parallel->n_tensors; t++)
    if ((rc = relate_slice(&c, ids, t, d)) != VD_OK || info->status != VD_EXEC_RED_OK) goto done;

  int reduced = 0;
  if ((rc = vd_reducer_solve(c.red, &reduced, d)) != VD_OK) goto done;
  if (!reduced) {
    info->status = VD_EXEC_RED_CANNOT;
    snprintf(info->reason, sizeof(info->reason),
             "cannot reduce: the view/reshape constraints of the pair have no common reduced shape");
    goto done;
  }
  if ((rc = plan_copy(single, rs, d)) != VD_OK || (rc = plan_copy(parallel, rp, d)) != VD_OK) goto done;
  vd_plan_t *outs[2] = {rs, rp};
  if ((rc = apply(&c, ids, single->n_tensors, outs, d)) != VD_OK) goto done;
  if (info->status != VD_EXEC_RED_OK) goto done;
  validate_copies(&c, rs, rp);
  if (info->status != VD_EXEC_RED_OK) goto done;
  info->rmax_numel = vd_exec_max_numel(rs);
  mp = vd_exec_max_numel(rp);
  if (mp > info->rmax_numel) info->rmax_numel = mp;
  info->reduced = 1;
done:
  if (!info->reduced) {
    vd_plan_free(rs);
    vd_plan_free(rp);
  }
  vd_free(rv);
  vd_free(ids);
  vd_free(c.ops);
  vd_reducer_free(c.red);
  vd_graph_free(&c.g[0]);
  vd_graph_free(&c.g[1]);
  return rc;
}
