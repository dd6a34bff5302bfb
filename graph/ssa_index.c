/*
 * graph/ssa_index.c - pass 1 of the SSA build (ssa.c): plan nodes sorted by (rank,
 * segment, file order) with two stable counting sorts, group positions, and
 * the exact totals of node executions and operands before anything big is
 * allocated.
 */
#include "ssa_int.h"

#include <assert.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"

/* ---- pass 1: index ----------------------------------------------------- */

vd_rc vd_graph_i_too_large(bctx *c, const char *what) {
  return VD_ERR(c->d, VD_EINPUT, NULL, NULL, NULL,
                "plan too large for the graph: more than 2^31-2 %s", what);
}

/* Sorts plan nodes by (rank, segment, index) and checks ranges. */
vd_rc vd_graph_i_index_nodes(bctx *c) {
  const vd_plan_t *p = c->p;
  size_t nn = p->n_nodes, ns = p->n_segments, nr = (size_t)c->R;
  size_t nk = (ns > nr ? ns : nr) + 1;
  uint32_t *cnt = vd_calloc(nk, sizeof(*cnt));
  uint32_t *tmp = vd_malloc((nn ? nn : 1) * sizeof(*tmp));
  c->ord = vd_malloc((nn ? nn : 1) * sizeof(*c->ord));
  c->rank_off = vd_calloc(nr + 1, sizeof(*c->rank_off));
  vd_rc rc = VD_OK;
  if (!cnt || !tmp || !c->ord || !c->rank_off) {
    rc = VD_OOM(c->d);
    goto done;
  }
  for (size_t i = 0; i < nn; i++) {
    const vd_node_t *n = &p->nodes[i];
    if (VD_NEVER(n->rank < 0 || n->rank >= c->R || n->segment < 0 || (size_t)n->segment >= ns)) {
      char rec[64];
      snprintf(rec, sizeof(rec), "node %lld", (long long)n->id);
      rc = VD_ERR(c->d, VD_EINPUT, NULL, rec, "rank/segment", "expected a valid rank and segment, got %d/%d",
                  n->rank, n->segment);
      goto done;
    }
    cnt[n->segment + 1]++;
  }
  for (size_t s = 0; s < ns; s++) cnt[s + 1] += cnt[s];
  for (size_t i = 0; i < nn; i++) tmp[cnt[p->nodes[i].segment]++] = (uint32_t)i;
  memset(cnt, 0, nk * sizeof(*cnt));
  for (size_t i = 0; i < nn; i++) cnt[p->nodes[i].rank + 1]++;
  for (size_t r = 0; r < nr; r++) cnt[r + 1] += cnt[r];
  memcpy(c->rank_off, cnt, (nr + 1) * sizeof(*cnt));
  for (size_t i = 0; i < nn; i++) {
    uint32_t v = tmp[i];
    c->ord[cnt[p->nodes[v].rank]++] = v;
  }
done:
  vd_free(cnt);
  vd_free(tmp);
  return rc;
}

/* First position in ord[lo, hi) whose node's segment is >= seg. */
static uint32_t seg_lower(const bctx *c, uint32_t lo, uint32_t hi, int32_t seg) {
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (c->p->nodes[c->ord[mid]].segment < seg) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Per-node group position and send/recv flag. */
vd_rc vd_graph_i_index_groups(bctx *c) {
  const vd_plan_t *p = c->p;
  size_t nn = p->n_nodes ? p->n_nodes : 1;
  c->gpos = vd_malloc(nn * sizeof(*c->gpos));
  c->is_p2p = vd_calloc(nn, 1);
  if (!c->gpos || !c->is_p2p) return VD_OOM(c->d);
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    c->gpos[i] = -1;
    if (n->coll < 0) continue;
    const char *op = vd_node_op(p, n);
    if (strcmp(op, "send") == 0) {
      c->is_p2p[i] = 1;
      c->gpos[i] = 0;
    } else if (strcmp(op, "recv") == 0) {
      c->is_p2p[i] = 1;
      c->gpos[i] = 1;
    } else {
      const int64_t *gr = vd_node_group(p, n);
      for (uint32_t k = 0; k < n->n_group; k++)
        if (gr[k] == n->rank) {
          c->gpos[i] = (int32_t)k;
          break;
        }
    }
  }
  return VD_OK;
}

/* The number of microbatches: the schedule's largest plus one, at least the plan's nm and 1. */
static vd_rc count_microbatches(bctx *c) {
  const vd_plan_t *p = c->p;
  int32_t maxmb = -1;
  for (size_t s = 0; s < p->n_steps; s++) {
    if (VD_NEVER(p->steps[s].mb < -1 || p->steps[s].segment < 0 ||
                 (size_t)p->steps[s].segment >= p->n_segments))
      return VD_ERR(c->d, VD_EINPUT, NULL, "schedule", "step", "expected a valid step, got segment %d mb %d",
                    p->steps[s].segment, p->steps[s].mb);
    if (p->steps[s].mb > maxmb) maxmb = p->steps[s].mb;
  }
  c->n_mb = maxmb + 1 > p->world.nm ? maxmb + 1 : p->world.nm;
  if (c->n_mb < 1) c->n_mb = 1;
  return VD_OK;
}

/* Instance layout (every tensor's first instance and count per replica; trank: each tensor's
 * rank) and the instances' first/last value tables, all -1. */
static vd_rc layout_instances(bctx *c, int32_t *trank, uint64_t *n_inst) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  uint64_t ninst = 0;
  for (size_t t = 0; t < p->n_tensors; t++) {
    uint32_t per = p->tensors[t].scope == VD_SCOPE_PER_MB ? (uint32_t)c->n_mb : 1;
    trank[t] = p->tensors[t].rank;
    c->cross_rank |= trank[t] < 0 || trank[t] >= c->R;
    g->inst_base[t] = (uint32_t)(ninst < UINT32_MAX ? ninst : UINT32_MAX);
    g->inst_per_replica[t] = per;
    ninst += (uint64_t)per * (uint64_t)c->D;
    if (ninst >= INT32_MAX) return vd_graph_i_too_large(c, "tensor instances");
  }
  g->n_inst = (size_t)ninst;
  g->inst_first = vd_malloc((ninst ? ninst : 1) * sizeof(int32_t));
  g->inst_last = vd_malloc((ninst ? ninst : 1) * sizeof(int32_t));
  if (!g->inst_first || !g->inst_last) return VD_OOM(c->d);
  for (size_t i = 0; i < ninst; i++) g->inst_first[i] = g->inst_last[i] = -1;
  *n_inst = ninst;
  return VD_OK;
}

/* Checks every node's operand indices; sets cross_rank when a node touches a tensor of another
 * rank, and the written flags (1: updated in place, 3: written fresh). */
static vd_rc scan_node_operands(bctx *c, const int32_t *trank) {
  const vd_plan_t *p = c->p;
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    const uint32_t *io[2] = {vd_node_inputs(p, n), vd_node_outputs(p, n)};
    uint32_t cnt[2] = {n->n_in, n->n_out};
    for (int s = 0; s < 2; s++)
      for (uint32_t k = 0; k < cnt[s]; k++)
        if (VD_NEVER(io[s][k] >= p->n_tensors)) {
          char rec[64];
          snprintf(rec, sizeof(rec), "node %lld", (long long)n->id);
          return VD_ERR(c->d, VD_EINPUT, NULL, rec, s ? "outputs" : "inputs",
                        "expected a tensor index, got %u", io[s][k]);
        }
    for (int s = 0; s < 2; s++)
      for (uint32_t k = 0; k < cnt[s]; k++) c->cross_rank |= trank[io[s][k]] != n->rank;
    for (uint32_t k = 0; k < n->n_out; k++) {
      int reads = 0;
      for (uint32_t j = 0; j < n->n_in && !reads; j++) reads = io[0][j] == io[1][k];
      c->written[io[1][k]] |= (uint8_t)(reads ? 1 : 3);
    }
  }
  return VD_OK;
}

/* The tensors' side of pass 1: instance layout, operand checks, written flags. */
static vd_rc prepare_tensors(bctx *c, uint64_t *n_inst) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  size_t nt = p->n_tensors ? p->n_tensors : 1;
  g->inst_base = vd_malloc(nt * sizeof(*g->inst_base));
  g->inst_per_replica = vd_malloc(nt * sizeof(*g->inst_per_replica));
  c->written = vd_calloc(nt, 1);
  int32_t *trank = vd_malloc(nt * sizeof(*trank)); /* compact copy for the cross-rank check */
  vd_rc rc = VD_OK;
  if (!g->inst_base || !g->inst_per_replica || !c->written || !trank) rc = VD_OOM(c->d);
  if (rc == VD_OK) rc = layout_instances(c, trank, n_inst);
  if (rc == VD_OK) rc = scan_node_operands(c, trank);
  vd_free(trank);
  return rc;
}

/* The totals of one replica's node executions and operands (build_totals). */
typedef struct {
  uint64_t ex, ops, outs, colls;
} build_totals;

/* Step ranges in ord (by binary search per step) and, from prefix sums over ord, the totals per
 * rank (r_ex, r_ops, r_colls) and of one replica (*t). */
static vd_rc step_ranges(bctx *c, build_totals *t) {
  const vd_plan_t *p = c->p;
  size_t nn = p->n_nodes;
  uint64_t *pre = vd_malloc((nn + 1) * 3 * sizeof(*pre)); /* ops, outs, colls */
  c->step_lo = vd_malloc((p->n_steps ? p->n_steps : 1) * sizeof(*c->step_lo));
  c->step_hi = vd_malloc((p->n_steps ? p->n_steps : 1) * sizeof(*c->step_hi));
  if (!pre || !c->step_lo || !c->step_hi) {
    vd_free(pre);
    return VD_OOM(c->d);
  }
  pre[0] = pre[1] = pre[2] = 0;
  for (size_t i = 0; i < nn; i++) {
    const vd_node_t *n = &p->nodes[c->ord[i]];
    pre[3 * (i + 1)] = pre[3 * i] + n->n_in + n->n_out;
    pre[3 * (i + 1) + 1] = pre[3 * i + 1] + n->n_out;
    pre[3 * (i + 1) + 2] = pre[3 * i + 2] + (n->coll >= 0);
  }
  uint64_t ex = 0, ops = 0, outs = 0, colls = 0;
  c->r_ex = vd_calloc((size_t)c->R, sizeof(*c->r_ex));
  c->r_ops = vd_calloc((size_t)c->R, sizeof(*c->r_ops));
  c->r_colls = vd_calloc((size_t)c->R, sizeof(*c->r_colls));
  if (!c->r_ex || !c->r_ops || !c->r_colls) {
    vd_free(pre);
    return VD_OOM(c->d);
  }
  for (int32_t r = 0; r < c->R; r++) {
    const vd_program_t *pr = &p->programs[r];
    uint64_t ex0 = ex, ops0 = ops, colls0 = colls;
    for (uint32_t s = pr->step_off; s < pr->step_off + pr->n_steps; s++) {
      int32_t seg = p->steps[s].segment;
      uint32_t lo = seg_lower(c, c->rank_off[r], c->rank_off[r + 1], seg);
      uint32_t hi = seg_lower(c, lo, c->rank_off[r + 1], seg + 1);
      c->step_lo[s] = lo;
      c->step_hi[s] = hi;
      ex += hi - lo;
      ops += pre[3 * hi] - pre[3 * lo];
      outs += pre[3 * hi + 1] - pre[3 * lo + 1];
      colls += pre[3 * hi + 2] - pre[3 * lo + 2];
    }
    c->r_ex[r] = ex - ex0;
    c->r_ops[r] = ops - ops0;
    c->r_colls[r] = colls - colls0;
  }
  vd_free(pre);
  t->ex = ex;
  t->ops = ops;
  t->outs = outs;
  t->colls = colls;
  return VD_OK;
}

/* The collective instance lookup: a direct table when (coll range) x (mb -1 .. n_mb - 1) x D
 * entries of 4 bytes take no more than the map would (at least 2 x 24 bytes per collective
 * execution), with some slack; else a hash map of 2 x colls entries or more, all NONE. */
static vd_rc alloc_coll_lookup(bctx *c, uint64_t colls) {
  const vd_plan_t *p = c->p;
  int64_t cmin = INT64_MAX, cmax = -1;
  for (size_t i = 0; i < p->n_nodes; i++) {
    int64_t k = p->nodes[i].coll;
    if (k < 0) continue;
    if (k < cmin) cmin = k;
    if (k > cmax) cmax = k;
  }
  if (cmax >= 0 && (uint64_t)cmax - (uint64_t)cmin < ((uint64_t)1 << 32)) {
    uint64_t span = ((uint64_t)cmax - (uint64_t)cmin + 1) * ((uint64_t)c->n_mb + 1) * (uint64_t)c->D;
    if (span <= 16 * colls + 4096) {
      c->cdirect = vd_malloc((size_t)span * sizeof(*c->cdirect));
      if (!c->cdirect) return VD_OOM(c->d);
      memset(c->cdirect, 0xff, (size_t)span * sizeof(*c->cdirect)); /* NONE */
      c->coll_min = cmin;
    }
  }
  size_t mc = 16;
  while (!c->cdirect && mc < 2 * colls) mc *= 2;
  c->map_cap = mc;
  c->map = vd_malloc(mc * sizeof(*c->map));
  return VD_OK;
}

/* Instance layout, written flags, step ranges and exact totals. */
vd_rc vd_graph_i_prepare(bctx *c, size_t *n_ops, size_t *n_outs) {
  vd_graph_t *g = c->g;
  VD_CHECK(count_microbatches(c));
  uint64_t ninst = 0;
  VD_CHECK(prepare_tensors(c, &ninst));
  build_totals t = {0, 0, 0, 0};
  VD_CHECK(step_ranges(c, &t));
  uint64_t ex = t.ex * (uint64_t)c->D, ops = t.ops * (uint64_t)c->D;
  uint64_t outs = t.outs * (uint64_t)c->D, colls = t.colls * (uint64_t)c->D;
  if (ex >= INT32_MAX) return vd_graph_i_too_large(c, "node executions");
  if (ops >= UINT32_MAX / 2) return vd_graph_i_too_large(c, "operands");

  c->ex = vd_malloc((ex ? ex : 1) * sizeof(*c->ex));
  c->ce = vd_malloc((colls ? colls : 1) * sizeof(*c->ce));
  VD_CHECK(alloc_coll_lookup(c, colls));
  g->idx = vd_malloc((ops ? ops : 1) * sizeof(*g->idx));
  /* Values: at most one per write plus one (initial or placeholder) per
   * instance, and at most one per operand. */
  uint64_t vcap = outs + ninst < ops ? outs + ninst : ops;
  c->cap_values = vcap ? (size_t)vcap : 1;
  g->values = vd_malloc(c->cap_values * sizeof(*g->values));
  if (!c->ex || !c->ce || !c->map || !g->idx || !g->values) return VD_OOM(c->d);
  for (size_t i = 0; i < c->map_cap; i++) c->map[i].id = NONE;
  *n_ops = (size_t)ops;
  *n_outs = (size_t)outs;
  return VD_OK;
}
