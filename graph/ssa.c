/*
 * graph/ssa.c - builds the SSA dataflow graph of a plan (vd_graph_build).
 *
 * What it does, in three passes, all over flat integer arrays:
 *  1. Index: plan nodes sorted by (rank, segment, file order) with two stable
 *     counting sorts, so the nodes of schedule step (segment s on rank r) are
 *     one contiguous range found by binary search.  Exact totals of node
 *     executions and operands are computed from prefix sums before anything
 *     big is allocated.
 *  2. Execute: for each built replica d and each stored rank r, walk r's
 *     steps; each plan node runs as an "exec" (node, d, mb).  Reads take the
 *     current value of the tensor instance (creating the initial value of an
 *     initial tensor on first read); writes create version 0 or, for a node
 *     that also reads the instance, the next version.  Values of one instance
 *     are numbered in the program order of the instance's own rank, which is
 *     well defined because an instance is only touched by its rank.
 *     Collective execs are keyed (coll, mb, replica-set) in an open-addressing
 *     map; they cannot be merged yet because the other participants run later
 *     in this walk (other ranks).
 *  3. Merge: each plain exec becomes a graph node (its operand ranges are
 *     reused in place); the execs of one collective instance, sorted by group
 *     position, become ONE graph node with the participants' inputs/outputs
 *     concatenated in group order.  Producers are remapped from execs to
 *     graph nodes, consumers lists filled, and topo.c orders the nodes.
 *
 * Not here: the topological order (topo.c), lineage, any judgement of operator semantics.
 *
 * Invariants: a value's producer is -1 only for an initial value or for a
 * placeholder (an unproduced read, always accompanied by an issue); a
 * placeholder is never registered as an instance's first/last value.
 * Cross-rank dependencies exist only through collective and send/recv nodes.
 * Memory: O(executions + operands + tensor instances); nothing per rank pair.
 */
#include "graph_int.h"

#include <assert.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"

const char *const vd_gissue_names[VD_GISSUE__COUNT] = {
    "unproduced", "read_early", "double_write", "coll_mismatch", "cycle", "mb_scope"};

#define NONE UINT32_MAX

typedef struct {
  uint32_t pnode;
  int32_t replica;
  int32_t mb;
  uint32_t off; /* operands in g->idx: n_in inputs then n_out outputs */
} exec_t;

typedef struct {
  uint32_t exec;
  uint32_t cinst; /* collective instance */
  int32_t pos;    /* position in the (replica-expanded) group, -1 if not in it */
} cexec_t;

typedef struct {
  int64_t coll;
  int32_t mb;
  int32_t rset; /* replica, or -1 for a collective spanning replicas */
  uint32_t id;  /* NONE = empty slot */
} ckey_t;

typedef struct {
  uint32_t inst, exec, k; /* instance, reader exec, input position */
} pending_t;

typedef struct {
  const vd_plan_t *p;
  vd_graph_t *g;
  vd_diag *d;
  int32_t D, R, n_mb;
  uint8_t *written;   /* per tensor: bit 0 written, bit 1 written without being read */
  uint32_t *ord;      /* plan nodes sorted by (rank, segment, index) */
  uint32_t *rank_off; /* R + 1 */
  uint32_t *step_lo, *step_hi; /* per plan step: range in ord */
  int32_t *gpos;      /* per plan node: position of its rank in its group */
  uint8_t *is_p2p;    /* per plan node: send or recv */
  exec_t *ex; size_t n_ex;
  cexec_t *ce; size_t n_ce;
  ckey_t *map; size_t map_cap; uint32_t n_cinst;
  /* OPTIMIZATION-ONLY: when the coll keys span a small range, instance ids
   * sit in a direct table indexed by (coll - coll_min, mb + 1, replica)
   * instead of map (same ids: both number instances in order of first
   * sight).  One table entry per replica suffices: all nodes of a coll key
   * agree on span_replicas (validate.c), so a key's rset is either always
   * -1 or always the replica.  The map of a large plan was 200 MB probed at
   * random. */
  uint32_t *cdirect; int64_t coll_min;
  pending_t *pend; size_t n_pend, cap_pend;
  size_t cap_values;
  /* Per stored rank: node executions, operands and collective executions
   * of one replica's walk (prepare), for execute's per-walk offsets. */
  uint64_t *r_ex, *r_ops, *r_colls;
  int cross_rank; /* some node uses a tensor of another rank (an unvalidated plan) */
} bctx;

/* ---- issues ------------------------------------------------------------ */

vd_rc vd_graph_i_issue(vd_graph_t *g, vd_gissue_kind kind, int64_t tensor, int64_t pnode,
                       int32_t replica, int32_t mb, const char *field, const char *fmt, ...) {
  const vd_plan_t *p = g->plan;
  /* A DP gradient reducer that reads its gradient before the backward
   * producing it ran (one microbatch: no accumulator to read yet) is a
   * schedule error, the same bug as a reducer overtaking the last
   * microbatch when there are several (stages/cut.c, SCHEDULE). */
  vd_diagnosis dx = VD_DX_DATAFLOW;
  if (kind == VD_GISSUE_READ_EARLY && pnode >= 0 && tensor >= 0) {
    const vd_node_t *n = &p->nodes[pnode];
    if (n->coll >= 0 && n->span_replicas && p->tensors[tensor].role == VD_ROLE_GRAD) dx = VD_DX_SCHEDULE;
  }
  vd_issue is;
  vd_issue_init(&is, "graph", (unsigned)kind, vd_gissue_names[kind], dx);
  is.single = p->kind == VD_PLAN_SINGLE;
  is.tensor = tensor;
  is.pnode = pnode;
  is.replica = replica;
  is.mb = mb;
  int32_t rep = replica < 0 ? 0 : replica;
  if (pnode >= 0) is.rank = vd_graph_rank(g, p->nodes[pnode].rank, rep);
  else if (tensor >= 0) is.rank = vd_graph_rank(g, p->tensors[tensor].rank, rep);
  if (field) snprintf(is.field, sizeof(is.field), "%s", field);
  va_list ap;
  va_start(ap, fmt);
  vd_issue_vdetail(&is, fmt, ap);
  va_end(ap);
  return vd_issue_push(&g->issues, &g->n_issues, &g->cap_issues, VD_GRAPH_MAX_ISSUES, &g->n_issues_dropped, &is);
}

void vd_graph_i_node_label(const vd_graph_t *g, uint32_t pnode, int32_t replica, int32_t mb,
                           char *buf, size_t size) {
  const vd_plan_t *p = g->plan;
  const vd_node_t *n = &p->nodes[pnode];
  snprintf(buf, size, "node %lld '%s' (rank %lld, mb %d)", (long long)n->id,
           vd_plan_s(p, n->name), (long long)vd_graph_rank(g, n->rank, replica), mb);
}

static int issue_cmp(const void *a, const void *b) {
  const vd_graph_issue *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->pnode != y->pnode) return x->pnode < y->pnode ? -1 : 1;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  int c = strcmp(x->field, y->field);
  if (c) return c;
  return strcmp(x->detail, y->detail);
}

/* ---- small helpers ----------------------------------------------------- */

static const char *tname(const vd_plan_t *p, uint32_t t) { return vd_plan_s(p, p->tensors[t].name); }
static const char *nname(const vd_plan_t *p, uint32_t n) { return vd_plan_s(p, p->nodes[n].name); }
static const char *nop(const vd_plan_t *p, uint32_t n) { return vd_node_op(p, &p->nodes[n]); }

/* SOUNDNESS: an initial value is an input of the iteration (a free value,
 * related to the single plan only through a lineage annotation it was
 * given), so what counts as initial decides what a dataflow bug looks like:
 *  - inputs, weights and optimizer state are initial by role;
 *  - a gradient that no node writes is a seed (the loss gradient);
 *  - a persistent tensor that is only ever updated in place (every writer
 *    also reads it: zero_grad as scale-by-0, accumulate) carries its value
 *    in from the previous iteration, so its first read sees that state;
 *  - everything else must be produced before it is read.  In particular an
 *    activation or loss that nothing writes is what a removed collective
 *    leaves behind, so it is UNPRODUCED rather than silently an input, and a
 *    persistent tensor with a plain (non-reading) writer that is read first
 *    is READ_EARLY rather than stale state.
 * written[t]: bit 0 = some node writes t, bit 1 = some node writes t
 * without reading it. */
static int tensor_initial(const bctx *c, uint32_t t) {
  const vd_tensor_t *x = &c->p->tensors[t];
  if (x->role == VD_ROLE_INPUT || x->role == VD_ROLE_WEIGHT || x->role == VD_ROLE_OPTSTATE) return 1;
  if (!(c->written[t] & 1)) return x->role == VD_ROLE_GRAD;
  return x->scope == VD_SCOPE_PERSISTENT && !(c->written[t] & 2);
}

/* Returns the collective instance id of key, inserting it if new. */
static uint32_t coll_instance(bctx *c, int64_t coll, int32_t mb, int32_t rset) {
  if (c->cdirect) {
    size_t slot = ((size_t)((uint64_t)coll - (uint64_t)c->coll_min) * ((size_t)c->n_mb + 1) + (size_t)(mb + 1)) *
                      (size_t)c->D + (size_t)(rset < 0 ? 0 : rset);
    if (c->cdirect[slot] == NONE) c->cdirect[slot] = c->n_cinst++;
    return c->cdirect[slot];
  }
  uint64_t h = vd_hash_mix64((uint64_t)coll ^ vd_hash_mix64(((uint64_t)(uint32_t)mb << 32) | (uint32_t)rset));
  size_t mask = c->map_cap - 1;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    ckey_t *k = &c->map[i];
    if (k->id == NONE) {
      k->coll = coll;
      k->mb = mb;
      k->rset = rset;
      k->id = c->n_cinst++;
      return k->id;
    }
    if (k->coll == coll && k->mb == mb && k->rset == rset) return k->id;
  }
}

/* ---- pass 1: index ----------------------------------------------------- */

static vd_rc too_large(bctx *c, const char *what) {
  return VD_ERR(c->d, VD_EINPUT, NULL, NULL, NULL,
                "plan too large for the graph: more than 2^31-2 %s", what);
}

/* Sorts plan nodes by (rank, segment, index) and checks ranges. */
static vd_rc index_nodes(bctx *c) {
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
static vd_rc index_groups(bctx *c) {
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

/* Instance layout, written flags, step ranges and exact totals. */
static vd_rc prepare(bctx *c, size_t *n_ops, size_t *n_outs) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  size_t nt = p->n_tensors ? p->n_tensors : 1;
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

  g->inst_base = vd_malloc(nt * sizeof(*g->inst_base));
  g->inst_per_replica = vd_malloc(nt * sizeof(*g->inst_per_replica));
  c->written = vd_calloc(nt, 1);
  int32_t *trank = vd_malloc(nt * sizeof(*trank)); /* compact copy for the cross-rank check */
  if (!g->inst_base || !g->inst_per_replica || !c->written || !trank) {
    vd_free(trank);
    return VD_OOM(c->d);
  }
  uint64_t ninst = 0;
  for (size_t t = 0; t < p->n_tensors; t++) {
    uint32_t per = p->tensors[t].scope == VD_SCOPE_PER_MB ? (uint32_t)c->n_mb : 1;
    trank[t] = p->tensors[t].rank;
    c->cross_rank |= trank[t] < 0 || trank[t] >= c->R;
    g->inst_base[t] = (uint32_t)(ninst < UINT32_MAX ? ninst : UINT32_MAX);
    g->inst_per_replica[t] = per;
    ninst += (uint64_t)per * (uint64_t)c->D;
    if (ninst >= INT32_MAX) {
      vd_free(trank);
      return too_large(c, "tensor instances");
    }
  }
  g->n_inst = (size_t)ninst;
  g->inst_first = vd_malloc((ninst ? ninst : 1) * sizeof(int32_t));
  g->inst_last = vd_malloc((ninst ? ninst : 1) * sizeof(int32_t));
  if (!g->inst_first || !g->inst_last) {
    vd_free(trank);
    return VD_OOM(c->d);
  }
  for (size_t i = 0; i < ninst; i++) g->inst_first[i] = g->inst_last[i] = -1;

  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    const uint32_t *io[2] = {vd_node_inputs(p, n), vd_node_outputs(p, n)};
    uint32_t cnt[2] = {n->n_in, n->n_out};
    for (int s = 0; s < 2; s++)
      for (uint32_t k = 0; k < cnt[s]; k++)
        if (VD_NEVER(io[s][k] >= p->n_tensors)) {
          char rec[64];
          snprintf(rec, sizeof(rec), "node %lld", (long long)n->id);
          vd_free(trank);
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
  vd_free(trank);

  /* Step ranges and totals from prefix sums over ord. */
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
  ex *= (uint64_t)c->D;
  ops *= (uint64_t)c->D;
  outs *= (uint64_t)c->D;
  colls *= (uint64_t)c->D;
  if (ex >= INT32_MAX) return too_large(c, "node executions");
  if (ops >= UINT32_MAX / 2) return too_large(c, "operands");

  c->ex = vd_malloc((ex ? ex : 1) * sizeof(*c->ex));
  c->ce = vd_malloc((colls ? colls : 1) * sizeof(*c->ce));
  /* Direct instance table when (coll range) x (mb -1 .. n_mb - 1) x D
   * entries of 4 bytes take no more than the map would (at least 2 x 24
   * bytes per collective execution), with some slack. */
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
  g->idx = vd_malloc((ops ? ops : 1) * sizeof(*g->idx));
  /* Values: at most one per write plus one (initial or placeholder) per
   * instance, and at most one per operand. */
  uint64_t vcap = outs + ninst < ops ? outs + ninst : ops;
  c->cap_values = vcap ? (size_t)vcap : 1;
  g->values = vd_malloc(c->cap_values * sizeof(*g->values));
  if (!c->ex || !c->ce || !c->map || !g->idx || !g->values) return VD_OOM(c->d);
  for (size_t i = 0; i < mc; i++) c->map[i].id = NONE;
  *n_ops = (size_t)ops;
  *n_outs = (size_t)outs;
  return VD_OK;
}

/* ---- pass 2: execute --------------------------------------------------- */

static uint32_t new_value(bctx *c, uint32_t t, int32_t d, int32_t mb, uint32_t version,
                          int32_t producer, int initial) {
  vd_graph_t *g = c->g;
  /* cap_values is an exact upper bound (see prepare). */
  assert(g->n_values < c->cap_values);
  uint32_t v = (uint32_t)g->n_values++;
  vd_value_t *val = &g->values[v];
  memset(val, 0, sizeof(*val));
  val->tensor = t;
  val->replica = d;
  val->mb = c->p->tensors[t].scope == VD_SCOPE_PER_MB ? mb : -1;
  val->version = version;
  val->producer = producer;
  val->is_initial = (uint8_t)initial;
  return v;
}

static int is_placeholder(const vd_value_t *v) { return v->producer < 0 && !v->is_initial; }

/* Instance of tensor t as used by an exec in replica d, step mb.  A per-mb
 * tensor in a once-only step is an issue; it maps to microbatch 0. */
static vd_rc instance_of(bctx *c, uint32_t t, int32_t d, int32_t *mb, uint32_t e, int out, uint32_t k,
                         uint32_t *inst) {
  vd_graph_t *g = c->g;
  const vd_plan_t *p = c->p;
  if (p->tensors[t].scope == VD_SCOPE_PER_MB && *mb < 0) {
    uint32_t pn = c->ex[e].pnode;
    char f[32];
    snprintf(f, sizeof(f), "%s[%u]", out ? "out" : "in", k);
    VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_MB_SCOPE, t, pn, d, -1, f,
                              "per-microbatch tensor '%s' used by %s '%s' in a step that runs once "
                              "(rank %lld, replica %d)",
                              tname(p, t), nop(p, pn), nname(p, pn),
                              (long long)vd_graph_rank(g, p->nodes[pn].rank, d), d));
    *mb = 0;
  }
  int32_t m = p->tensors[t].scope == VD_SCOPE_PER_MB ? *mb : 0;
  *inst = g->inst_base[t] + (uint32_t)d * g->inst_per_replica[t] + (uint32_t)m;
  return VD_OK;
}

static vd_rc exec_node(bctx *c, uint32_t pn, int32_t d, int32_t mb) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  const vd_node_t *n = &p->nodes[pn];
  const uint32_t *in = vd_node_inputs(p, n), *out = vd_node_outputs(p, n);
  uint32_t e = (uint32_t)c->n_ex++;
  uint32_t off = (uint32_t)g->n_idx;
  c->ex[e] = (exec_t){pn, d, mb, off};
  g->n_idx += n->n_in + n->n_out;

  for (uint32_t k = 0; k < n->n_in; k++) {
    uint32_t t = in[k], inst;
    int32_t m = mb;
    VD_CHECK(instance_of(c, t, d, &m, e, 0, k, &inst));
    int32_t v = g->inst_last[inst];
    if (v < 0) {
      if (tensor_initial(c, t)) {
        v = (int32_t)new_value(c, t, d, m, 0, -1, 1);
        g->inst_first[inst] = v;
      } else {
        /* Placeholder: judged READ_EARLY or UNPRODUCED once the rank's walk
         * is over.  Later reads of the instance reuse it (one issue). */
        v = (int32_t)new_value(c, t, d, m, 0, -1, 0);
        if (VD_GROW(c->pend, c->cap_pend, c->n_pend + 1)) return VD_OOM(c->d);
        c->pend[c->n_pend++] = (pending_t){inst, e, k};
      }
      g->inst_last[inst] = v;
    }
    g->idx[off + k] = (uint32_t)v;
  }
  for (uint32_t k = 0; k < n->n_out; k++) {
    uint32_t t = out[k], inst;
    int32_t m = mb;
    VD_CHECK(instance_of(c, t, d, &m, e, 1, k, &inst));
    int32_t prev = g->inst_last[inst];
    uint32_t v;
    if (prev < 0 || is_placeholder(&g->values[prev])) {
      v = new_value(c, t, d, m, 0, (int32_t)e, 0);
      g->inst_first[inst] = (int32_t)v;
    } else {
      /* Weights and optimizer state may be overwritten without being read
       * (ZeRO's all_gather of updated shards, a master-weight copy): that is
       * an update, i.e. just the next version.  For gradients, activations
       * and losses it is a second producer (e.g. a microbatch that writes the
       * gradient instead of accumulating into it). */
      vd_role role = p->tensors[t].role;
      int reads = role == VD_ROLE_WEIGHT || role == VD_ROLE_OPTSTATE;
      for (uint32_t j = 0; j < n->n_in && !reads; j++) reads = in[j] == t;
      if (!reads) {
        char f[32];
        snprintf(f, sizeof(f), "out[%u]", k);
        const vd_value_t *pv = &g->values[prev];
        char by[96];
        if (pv->producer >= 0) {
          uint32_t pp = c->ex[pv->producer].pnode;
          snprintf(by, sizeof(by), "%s '%s'", nop(p, pp), nname(p, pp));
        } else {
          snprintf(by, sizeof(by), "its initial value");
        }
        VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_DOUBLE_WRITE, t, pn, d, m, f,
                                  "tensor '%s' written by %s '%s' (rank %lld, replica %d, mb %d) "
                                  "already holds version %u from %s",
                                  tname(p, t), nop(p, pn), nname(p, pn),
                                  (long long)vd_graph_rank(g, n->rank, d), d, m, pv->version, by));
      }
      v = new_value(c, t, d, m, g->values[prev].version + 1, (int32_t)e, 0);
    }
    g->inst_last[inst] = (int32_t)v;
    g->idx[off + n->n_in + k] = v;
  }
  if (n->coll >= 0) {
    int32_t pos = c->gpos[pn];
    if (n->span_replicas && pos >= 0 && !c->is_p2p[pn]) pos += d * (int32_t)n->n_group;
    c->ce[c->n_ce++] = (cexec_t){e, NONE, pos}; /* instance: number_colls */
  }
  return VD_OK;
}

/* Judges the placeholder reads of one rank's walk. */
static vd_rc resolve_pending(bctx *c) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  for (size_t i = 0; i < c->n_pend; i++) {
    const pending_t *q = &c->pend[i];
    const exec_t *x = &c->ex[q->exec];
    uint32_t pn = x->pnode;
    uint32_t t = vd_node_inputs(p, &p->nodes[pn])[q->k];
    int early = g->inst_first[q->inst] >= 0;
    char f[32];
    snprintf(f, sizeof(f), "in[%u]", q->k);
    long long rk = (long long)vd_graph_rank(g, p->nodes[pn].rank, x->replica);
    int32_t m = p->tensors[t].scope == VD_SCOPE_PER_MB ? x->mb : -1;
    if (early)
      VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_READ_EARLY, t, pn, x->replica, x->mb, f,
                                "tensor '%s' read by %s '%s' (rank %lld, replica %d, mb %d) "
                                "before the step that produces it",
                                tname(p, t), nop(p, pn), nname(p, pn), rk, x->replica, m));
    else
      VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_UNPRODUCED, t, pn, x->replica, x->mb, f,
                                "tensor '%s' read by %s '%s' (rank %lld, replica %d, mb %d) "
                                "is never produced",
                                tname(p, t), nop(p, pn), nname(p, pn), rk, x->replica, m));
  }
  c->n_pend = 0;
  return VD_OK;
}

/* One walk: the (replica, stored rank) walks k0 .. k1 - 1 in order (k =
 * d * R + r), with its own copy of the context (see execute).  Values are numbered from 0 in w->values; issues go to
 * w->g.  Returns VD_ENOMEM only, with the diag in *dd. */
typedef struct {
  bctx c;
  vd_graph_t g;
  vd_diag dd;
  vd_rc rc;
} walk_t;

/* Values of walk k are numbered from 0 at vals + (operands before walk k):
 * at most one value per operand (see prepare). */

static void walk(const bctx *c0, walk_t *w, size_t k0, size_t k1, const uint64_t *base, vd_value_t *vals) {
  const vd_plan_t *p = c0->p;
  uint64_t ex0 = base[3 * k0], ops0 = base[3 * k0 + 1], ce0 = base[3 * k0 + 2];
  w->g = *c0->g;
  w->g.values = NULL;
  w->g.n_values = 0;
  w->g.issues = NULL;
  w->g.n_issues = w->g.cap_issues = w->g.n_issues_dropped = 0;
  w->g.n_idx = (size_t)ops0;
  w->c = *c0;
  w->c.g = &w->g;
  w->c.d = &w->dd;
  w->c.n_ex = (size_t)ex0;
  w->c.n_ce = (size_t)ce0;
  w->c.pend = NULL;
  w->c.n_pend = w->c.cap_pend = 0;
  vd_diag_clear(&w->dd);
  /* One walk over all: prepare's bound; else this walk's operands. */
  w->c.cap_values = k1 - k0 == (size_t)c0->D * (size_t)c0->R ? c0->cap_values : (size_t)(base[3 * k1 + 1] - ops0);
  w->g.values = vals + ops0;
  w->rc = VD_OK;
  for (size_t k = k0; k < k1 && w->rc == VD_OK; k++) {
    int32_t d = (int32_t)(k / (size_t)c0->R), r = (int32_t)(k % (size_t)c0->R);
    const vd_program_t *pr = &p->programs[r];
    for (uint32_t s = pr->step_off; s < pr->step_off + pr->n_steps && w->rc == VD_OK; s++)
      for (uint32_t i = c0->step_lo[s]; i < c0->step_hi[s] && w->rc == VD_OK; i++)
        w->rc = exec_node(&w->c, c0->ord[i], d, p->steps[s].mb);
    if (w->rc == VD_OK) w->rc = resolve_pending(&w->c);
  }
  vd_free(w->c.pend);
  w->c.pend = NULL;
}

/* Collective instance ids, in exec order (first sight), as the serial walk
 * numbered them. */
static void number_colls(bctx *c) {
  const vd_plan_t *p = c->p;
  for (size_t i = 0; i < c->n_ce; i++) {
    const exec_t *x = &c->ex[c->ce[i].exec];
    const vd_node_t *n = &p->nodes[x->pnode];
    c->ce[i].cinst = coll_instance(c, n->coll, x->mb, n->span_replicas ? -1 : x->replica);
  }
}

/* OPTIMIZATION-ONLY: the walks of (replica d, stored rank r) are
 * independent: a node reads and writes only tensors of its own rank
 * (validate.c), so a walk touches only its own tensor instances, and ranks
 * meet only in collectives, which are merged later.  So the walks run in
 * parallel, each with its own context: its execs, operands and collective
 * execs go to offsets known from prepare's per-rank totals; its values are
 * numbered from 0 in a buffer of its own, and once all walks are done they
 * are moved to their place in walk order (d, r) and every value index the
 * walk wrote (its operands, its instances' first and last values) is
 * shifted by the walk's base.  That is the numbering of the serial walk.
 * The issues of each walk are appended in walk order through the same cap,
 * and collective instances are numbered afterwards in exec order: the same
 * graph, node for node and value for value, at any thread count. */
static vd_rc execute(bctx *c) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  size_t nw = (size_t)c->D * (size_t)c->R;
  walk_t *w = vd_calloc(nw, sizeof(*w));
  uint64_t *base = vd_malloc((nw + 1) * 3 * sizeof(*base)); /* ex, ops, ce */
  uint32_t *t_off = vd_calloc((size_t)c->R + 1, sizeof(*t_off)), *t_by_rank = NULL;
  vd_value_t *vals;
  vd_rc rc = VD_OK;
  if (!w || !base || !t_off) {
    rc = VD_OOM(c->d);
    goto done;
  }
  base[0] = base[1] = base[2] = 0;
  for (size_t k = 0; k < nw; k++) {
    int32_t r = (int32_t)(k % (size_t)c->R);
    base[3 * (k + 1)] = base[3 * k] + c->r_ex[r];
    base[3 * (k + 1) + 1] = base[3 * k + 1] + c->r_ops[r];
    base[3 * (k + 1) + 2] = base[3 * k + 2] + c->r_colls[r];
  }
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  /* A plan whose nodes use other ranks' tensors (never a validated one) is
   * walked as one piece, in order: walks would share instances.  So is a
   * plan on one thread: its values go straight to g->values. */
  size_t nwalk = c->cross_rank || nt < 2 ? 1 : nw;
  if (nwalk == 1) walk(c, &w[0], 0, nw, base, g->values);
  else {
    /* g->values grows to one slot per operand; the walks' values are moved
     * down into place afterwards. */
    vals = vd_realloc_array(g->values, base[3 * nw + 1] ? (size_t)base[3 * nw + 1] : 1, sizeof(*vals));
    if (!vals) {
      rc = VD_OOM(c->d);
      goto done;
    }
    g->values = vals;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (size_t k = 0; k < nw; k++) walk(c, &w[k], k, k + 1, base, vals);
  }
  /* Value bases, issues and the first error, in walk order. */
  size_t nv = 0;
  for (size_t k = 0; k < nwalk; k++) {
    if (w[k].rc != VD_OK) {
      if (c->d) *c->d = w[k].dd;
      rc = w[k].rc;
      goto done;
    }
    for (size_t i = 0; i < w[k].g.n_issues; i++)
      if (vd_issue_push(&g->issues, &g->n_issues, &g->cap_issues, VD_GRAPH_MAX_ISSUES, &g->n_issues_dropped,
                        &w[k].g.issues[i]) != VD_OK) {
        rc = VD_OOM(c->d);
        goto done;
      }
    g->n_issues_dropped += w[k].g.n_issues_dropped;
    w[k].c.cap_values = nv; /* reused: the walk's value base */
    nv += w[k].g.n_values;
  }
  assert(nv <= c->cap_values);
  if (nwalk == 1) goto finish;
  /* Walk k's values move down from vals + (its operand base) to its value
   * base: in walk order, a move never overwrites values still to move. */
  for (size_t k = 0; k < nwalk; k++)
    if (w[k].g.n_values && w[k].g.values != g->values + w[k].c.cap_values)
      memmove(g->values + w[k].c.cap_values, w[k].g.values, w[k].g.n_values * sizeof(*g->values));
  /* Back to prepare's size: the walks' slices past it held no value now, and
   * shrinking returns their pages.  (A failed realloc, which only the
   * fault-injection tests make happen, is reported like any other.) */
  vd_value_t *shrunk = vd_realloc_array(g->values, c->cap_values, sizeof(*g->values));
  if (!shrunk) {
    rc = VD_OOM(c->d);
    goto done;
  }
  g->values = shrunk;
  /* Tensors by rank, for the instance fixup. */
  t_by_rank = vd_malloc((p->n_tensors ? p->n_tensors : 1) * sizeof(*t_by_rank));
  if (!t_by_rank) {
    rc = VD_OOM(c->d);
    goto done;
  }
  for (size_t t = 0; t < p->n_tensors; t++) t_off[p->tensors[t].rank + 1]++;
  for (int32_t r = 0; r < c->R; r++) t_off[r + 1] += t_off[r];
  for (size_t t = 0; t < p->n_tensors; t++) t_by_rank[t_off[p->tensors[t].rank]++] = (uint32_t)t;
  memmove(t_off + 1, t_off, (size_t)c->R * sizeof(*t_off));
  t_off[0] = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (size_t k = 0; k < nw; k++) {
    int32_t d = (int32_t)(k / (size_t)c->R), r = (int32_t)(k % (size_t)c->R);
    uint32_t vb = (uint32_t)w[k].c.cap_values;
    for (uint64_t i = base[3 * k + 1]; i < base[3 * (k + 1) + 1]; i++) g->idx[i] += vb;
    for (uint32_t j = t_off[r]; j < t_off[r + 1]; j++) {
      uint32_t t = t_by_rank[j];
      uint32_t i0 = g->inst_base[t] + (uint32_t)d * g->inst_per_replica[t];
      for (uint32_t m = 0; m < g->inst_per_replica[t]; m++) {
        if (g->inst_first[i0 + m] >= 0) g->inst_first[i0 + m] += (int32_t)vb;
        if (g->inst_last[i0 + m] >= 0) g->inst_last[i0 + m] += (int32_t)vb;
      }
    }
  }
finish:
  g->n_values = nv;
  c->n_ex = (size_t)base[3 * nw];
  g->n_idx = (size_t)base[3 * nw + 1];
  c->n_ce = (size_t)base[3 * nw + 2];
  number_colls(c);
  /* Placeholders never count as an instance's value. */
  for (size_t i = 0; i < g->n_inst; i++)
    if (g->inst_first[i] < 0) g->inst_last[i] = -1;
done:
  if (w)
    for (size_t k = 0; k < nw; k++) vd_free(w[k].g.issues);
  vd_free(w);
  vd_free(base);
  vd_free(t_off);
  vd_free(t_by_rank);
  return rc;
}

/* ---- pass 3: merge ----------------------------------------------------- */

static int ce_cmp(const void *a, const void *b) {
  const cexec_t *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->exec < y->exec ? -1 : x->exec > y->exec;
}

/* SOUNDNESS: the merged node computes with ONE member's attributes (the
 * first participant's), so members that disagree (one all_reduce says
 * reduce=max, one all_to_all member splits along another dim) would be
 * silently reconciled.  Every member is compared with the first, in both
 * directions (an attribute only one of them has counts), so a mismatch is
 * found whichever member is the odd one.  Writes the first differing key and
 * both values ("<absent>" for a missing one) and returns 1. */
static int coll_attr_mismatch(const vd_plan_t *p, const vd_node_t *n, const vd_node_t *ref, char *key,
                              size_t ksz, char *mine, char *theirs, size_t vsz) {
  for (int pass = 0; pass < 2; pass++) {
    const vd_node_t *a = pass ? ref : n, *b = pass ? n : ref;
    for (uint32_t i = 0; i < a->n_attr; i++) {
      const vd_attr_t *x = &p->attrs[a->attr_off + i];
      const vd_attr_t *y = vd_node_attr(p, b, vd_plan_s(p, x->key));
      if (y && vd_attr_equal(p, x, p, y)) continue;
      snprintf(key, ksz, "%s", vd_plan_s(p, x->key));
      char *xa = pass ? theirs : mine, *ya = pass ? mine : theirs;
      vd_attr_format(p, x, xa, vsz);
      if (y)
        vd_attr_format(p, y, ya, vsz);
      else
        snprintf(ya, vsz, "<absent>");
      return 1;
    }
  }
  return 0;
}

/* Checks one collective instance (participants sorted by position) and
 * records COLL_MISMATCH issues. */
static vd_rc check_coll(bctx *c, const cexec_t *ps, uint32_t np) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  const exec_t *x0 = &c->ex[ps[0].exec];
  uint32_t ref = x0->pnode;
  const vd_node_t *rn = &p->nodes[ref];
  int p2p = c->is_p2p[ref];
  int32_t exp = p2p ? 2 : (int32_t)rn->n_group * (rn->span_replicas ? c->D : 1);
  const int64_t *rg = vd_node_group(p, rn);
  int32_t mb = x0->mb, rep = rn->span_replicas ? -1 : x0->replica;
  char key[48];
  snprintf(key, sizeof(key), "coll %lld (mb %d, replica %d)", (long long)rn->coll, mb, rep);

  for (uint32_t i = 0; i < np; i++) {
    const exec_t *x = &c->ex[ps[i].exec];
    uint32_t pn = x->pnode;
    const vd_node_t *n = &p->nodes[pn];
    long long rk = (long long)vd_graph_rank(g, n->rank, x->replica);
    if (i > 0) {
      const char *why = NULL;
      if (c->is_p2p[pn] != p2p || (!p2p && strcmp(nop(p, pn), nop(p, ref)) != 0))
        why = "op";
      else if (n->n_group != rn->n_group || n->span_replicas != rn->span_replicas ||
               (n->group_off != rn->group_off &&
                memcmp(vd_node_group(p, n), rg, n->n_group * sizeof(*rg)) != 0))
        why = "group";
      if (why) {
        VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_COLL_MISMATCH, -1, pn, x->replica, mb, why,
                                  "%s: %s '%s' on rank %lld disagrees in %s with %s '%s'", key,
                                  nop(p, pn), nname(p, pn), rk, why, nop(p, ref), nname(p, ref)));
      } else if (!p2p) {
        char ak[64], mine[96], theirs[96], field[80];
        if (coll_attr_mismatch(p, n, rn, ak, sizeof(ak), mine, theirs, sizeof(mine))) {
          const exec_t *r0 = &c->ex[ps[0].exec];
          snprintf(field, sizeof(field), "attrs.%s", ak);
          VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_COLL_MISMATCH, -1, pn, x->replica, mb, field,
                                    "%s: %s '%s' on rank %lld (group position %d) has attrs.%s = %s, but %s "
                                    "'%s' on rank %lld (group position %d) has %s",
                                    key, nop(p, pn), nname(p, pn), rk, ps[i].pos, ak, mine, nop(p, ref),
                                    nname(p, ref), (long long)vd_graph_rank(g, rn->rank, r0->replica),
                                    ps[0].pos, theirs));
        }
      }
    }
    int32_t pos = ps[i].pos;
    if (pos < 0 || pos >= exp) {
      VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_COLL_MISMATCH, -1, pn, x->replica, mb, "group",
                                "%s: %s '%s' on rank %lld is not a member of the group", key,
                                nop(p, pn), nname(p, pn), rk));
    } else if (i > 0 && ps[i - 1].pos == pos) {
      VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_COLL_MISMATCH, -1, pn, x->replica, mb, "coll",
                                "%s: extra participant %s '%s' on rank %lld (group position %d taken)",
                                key, nop(p, pn), nname(p, pn), rk, pos));
    }
  }
  /* Missing positions: walk 0..exp-1 against the sorted positions. */
  uint32_t i = 0;
  for (int32_t want = 0; want < exp; want++) {
    while (i < np && ps[i].pos < want) i++;
    if (i < np && ps[i].pos == want) continue;
    long long rk;
    const char *role = "";
    if (p2p) {
      rk = rn->n_group == 2 ? (long long)rg[want] : -1;
      role = want == 0 ? " (send)" : " (recv)";
    } else {
      int32_t ng = (int32_t)rn->n_group;
      rk = (long long)(want / ng) * c->R + rg[want % ng];
    }
    VD_CHECK(vd_graph_i_issue(g, VD_GISSUE_COLL_MISMATCH, -1, ref, x0->replica, mb, "coll",
                              "%s: %s '%s' has no participant%s on rank %lld (group position %d of %d)",
                              key, nop(p, ref), nname(p, ref), role, rk, want, exp));
  }
  return VD_OK;
}

static vd_rc merge(bctx *c, uint32_t *ex_gnode) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  vd_rc rc = VD_OK;
  uint32_t nci = c->n_cinst;
  uint32_t *coff = vd_calloc((size_t)nci + 1, sizeof(*coff));
  uint32_t *cgn = vd_malloc(((size_t)nci + 1) * sizeof(*cgn));
  cexec_t *sorted = vd_malloc((c->n_ce ? c->n_ce : 1) * sizeof(*sorted));
  if (!coff || !cgn || !sorted) {
    rc = VD_OOM(c->d);
    goto done;
  }
  /* Group collective execs by instance (stable), then by position. */
  for (size_t i = 0; i < c->n_ce; i++) coff[c->ce[i].cinst + 1]++;
  for (uint32_t i = 0; i < nci; i++) coff[i + 1] += coff[i];
  memcpy(cgn, coff, ((size_t)nci + 1) * sizeof(*cgn));
  for (size_t i = 0; i < c->n_ce; i++) sorted[cgn[c->ce[i].cinst]++] = c->ce[i];
  for (uint32_t i = 0; i < nci; i++) {
    if (coff[i + 1] - coff[i] > 1) qsort(sorted + coff[i], coff[i + 1] - coff[i], sizeof(*sorted), ce_cmp);
    cgn[i] = NONE;
  }

  /* Exact idx need: collective copies (+2 per participant) and consumers
   * (at most one per input operand). */
  uint64_t extra = 0, ins = 0;
  for (size_t e = 0; e < c->n_ex; e++) ins += p->nodes[c->ex[e].pnode].n_in;
  for (size_t i = 0; i < c->n_ce; i++) {
    const vd_node_t *n = &p->nodes[c->ex[c->ce[i].exec].pnode];
    extra += n->n_in + n->n_out + 2;
  }
  if (g->n_idx + extra + ins >= UINT32_MAX) {
    rc = too_large(c, "index entries");
    goto done;
  }
  uint32_t *ni = vd_realloc_array(g->idx, g->n_idx + extra + ins + 1, sizeof(*ni));
  g->nodes = vd_malloc((c->n_ex ? c->n_ex : 1) * sizeof(*g->nodes));
  if (ni) g->idx = ni;
  if (!ni || !g->nodes) {
    rc = VD_OOM(c->d);
    goto done;
  }

  size_t j = 0; /* collective execs are in exec order in c->ce */
  for (size_t e = 0; e < c->n_ex; e++) {
    const exec_t *x = &c->ex[e];
    const vd_node_t *n = &p->nodes[x->pnode];
    if (n->coll < 0) {
      uint32_t gi = (uint32_t)g->n_nodes++;
      g->nodes[gi] = (vd_gnode_t){x->pnode, x->replica, x->mb, x->off, n->n_in,
                                  x->off + n->n_in, n->n_out, 0, 0};
      ex_gnode[e] = gi;
      continue;
    }
    uint32_t ci = c->ce[j++].cinst;
    if (cgn[ci] != NONE) {
      ex_gnode[e] = cgn[ci];
      continue;
    }
    const cexec_t *ps = sorted + coff[ci];
    uint32_t np = coff[ci + 1] - coff[ci];
    uint32_t gi = (uint32_t)g->n_nodes++;
    cgn[ci] = gi;
    vd_gnode_t *gn = &g->nodes[gi];
    const exec_t *x0 = &c->ex[ps[0].exec];
    *gn = (vd_gnode_t){x0->pnode, x0->replica, x0->mb, 0, 0, 0, 0, 0, np};
    gn->in_off = (uint32_t)g->n_idx;
    for (uint32_t k = 0; k < np; k++) {
      const exec_t *xk = &c->ex[ps[k].exec];
      uint32_t nin = p->nodes[xk->pnode].n_in;
      memcpy(g->idx + g->n_idx, g->idx + xk->off, nin * sizeof(uint32_t));
      g->n_idx += nin;
      gn->n_in += nin;
    }
    gn->out_off = (uint32_t)g->n_idx;
    for (uint32_t k = 0; k < np; k++) {
      const exec_t *xk = &c->ex[ps[k].exec];
      const vd_node_t *nk = &p->nodes[xk->pnode];
      memcpy(g->idx + g->n_idx, g->idx + xk->off + nk->n_in, nk->n_out * sizeof(uint32_t));
      g->n_idx += nk->n_out;
      gn->n_out += nk->n_out;
    }
    gn->part_off = (uint32_t)g->n_idx;
    for (uint32_t k = 0; k < np; k++) {
      const exec_t *xk = &c->ex[ps[k].exec];
      g->idx[g->n_idx++] = xk->pnode;
      g->idx[g->n_idx++] = (uint32_t)xk->replica;
      ex_gnode[ps[k].exec] = gi;
    }
    if (check_coll(c, ps, np) != VD_OK) {
      rc = VD_OOM(c->d);
      goto done;
    }
  }
done:
  vd_free(coff);
  vd_free(cgn);
  vd_free(sorted);
  return rc;
}

/* Producers from execs to graph nodes; consumers lists; is_final. */
static void link_values(bctx *c, const uint32_t *ex_gnode) {
  vd_graph_t *g = c->g;
  for (size_t v = 0; v < g->n_values; v++) {
    vd_value_t *val = &g->values[v];
    if (val->producer >= 0) val->producer = (int32_t)ex_gnode[val->producer];
    val->cons_off = NONE; /* last consumer seen, during counting */
    val->n_cons = 0;
  }
  for (size_t ni = 0; ni < g->n_nodes; ni++) {
    const vd_gnode_t *n = &g->nodes[ni];
    for (uint32_t k = 0; k < n->n_in; k++) {
      vd_value_t *val = &g->values[g->idx[n->in_off + k]];
      if (val->cons_off != ni) {
        val->cons_off = (uint32_t)ni;
        val->n_cons++;
      }
    }
  }
  size_t base = g->n_idx;
  for (size_t v = 0; v < g->n_values; v++) {
    g->values[v].cons_off = (uint32_t)base;
    base += g->values[v].n_cons;
    g->values[v].n_cons = 0;
  }
  for (size_t ni = 0; ni < g->n_nodes; ni++) {
    const vd_gnode_t *n = &g->nodes[ni];
    for (uint32_t k = 0; k < n->n_in; k++) {
      vd_value_t *val = &g->values[g->idx[n->in_off + k]];
      uint32_t *cl = g->idx + val->cons_off;
      if (val->n_cons == 0 || cl[val->n_cons - 1] != ni) cl[val->n_cons++] = (uint32_t)ni;
    }
  }
  g->n_idx = base;
  for (size_t i = 0; i < g->n_inst; i++)
    if (g->inst_last[i] >= 0) g->values[g->inst_last[i]].is_final = 1;
}

/* ---- public ------------------------------------------------------------ */

vd_rc vd_graph_build(const vd_plan_t *p, const vd_graph_opts *o, vd_graph_t *g, vd_diag *d) {
  memset(g, 0, sizeof(*g));
  g->plan = p;
  bctx c;
  memset(&c, 0, sizeof(c));
  c.p = p;
  c.g = g;
  c.d = d;
  c.R = p->world.stored_ranks;
  c.D = o && o->expand_replicas ? p->world.replicas : 1;
  if (c.D < 1) c.D = 1;
  g->replicas = c.D;
  uint32_t *ex_gnode = NULL;
  size_t n_ops = 0, n_outs = 0;
  vd_rc rc;

  if (VD_NEVER(c.R < 1 || !p->programs)) {
    rc = VD_ERR(d, VD_EINPUT, NULL, "world", "stored_ranks", "expected at least one stored rank, got %d", c.R);
    goto done;
  }
  if ((rc = index_nodes(&c)) != VD_OK) goto done;
  if ((rc = index_groups(&c)) != VD_OK) goto done;
  if ((rc = prepare(&c, &n_ops, &n_outs)) != VD_OK) goto done;
  if ((rc = execute(&c)) != VD_OK) goto done;
  ex_gnode = vd_malloc((c.n_ex ? c.n_ex : 1) * sizeof(*ex_gnode));
  if (!ex_gnode) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = merge(&c, ex_gnode)) != VD_OK) goto done;
  link_values(&c, ex_gnode);
  if ((rc = vd_graph_i_topo(g, d)) != VD_OK) goto done;

  if (g->n_issues) {
    qsort(g->issues, g->n_issues, sizeof(*g->issues), issue_cmp);
    const vd_graph_issue *is = &g->issues[0];
    char rec[128] = "";
    if (is->pnode >= 0)
      vd_graph_i_node_label(g, (uint32_t)is->pnode, is->replica < 0 ? 0 : is->replica, is->mb, rec,
                            sizeof(rec));
    else if (is->tensor >= 0)
      snprintf(rec, sizeof(rec), "tensor '%s'", tname(p, (uint32_t)is->tensor));
    size_t more = g->n_issues - 1 + g->n_issues_dropped;
    rc = VD_ERR(d, VD_EINPUT, NULL, rec, is->field, "%s: %s%s", vd_gissue_names[is->kind], is->detail,
                more ? " (and more dataflow issues)" : "");
  }
done:
  if (rc == VD_ENOMEM) VD_OOM(d); /* paths that only return the code (no-op if recorded) */
  (void)n_ops;
  (void)n_outs;
  vd_free(ex_gnode);
  vd_free(c.written);
  vd_free(c.ord);
  vd_free(c.rank_off);
  vd_free(c.step_lo);
  vd_free(c.step_hi);
  vd_free(c.gpos);
  vd_free(c.is_p2p);
  vd_free(c.ex);
  vd_free(c.ce);
  vd_free(c.map);
  vd_free(c.cdirect);
  vd_free(c.pend);
  vd_free(c.r_ex);
  vd_free(c.r_ops);
  vd_free(c.r_colls);
  return rc;
}

void vd_graph_free(vd_graph_t *g) {
  if (!g) return;
  vd_free(g->values);
  vd_free(g->nodes);
  vd_free(g->idx);
  vd_free(g->topo);
  vd_free(g->inst_base);
  vd_free(g->inst_per_replica);
  vd_free(g->inst_first);
  vd_free(g->inst_last);
  vd_free(g->issues);
  memset(g, 0, sizeof(*g));
}

static int32_t inst_index(const vd_graph_t *g, uint32_t tensor, int32_t replica, int32_t mb) {
  if (!g->plan || tensor >= g->plan->n_tensors || replica < 0 || replica >= g->replicas) return -1;
  uint32_t m = mb < 0 ? 0 : (uint32_t)mb;
  if (m >= g->inst_per_replica[tensor]) return -1;
  return (int32_t)(g->inst_base[tensor] + (uint32_t)replica * g->inst_per_replica[tensor] + m);
}

int32_t vd_graph_first(const vd_graph_t *g, uint32_t tensor, int32_t replica, int32_t mb) {
  int32_t i = inst_index(g, tensor, replica, mb);
  return i < 0 ? -1 : g->inst_first[i];
}

int32_t vd_graph_last(const vd_graph_t *g, uint32_t tensor, int32_t replica, int32_t mb) {
  int32_t i = inst_index(g, tensor, replica, mb);
  return i < 0 ? -1 : g->inst_last[i];
}
