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
 * Files: this one (vd_graph_build and the issues), ssa_index.c (pass 1),
 * ssa_exec.c (pass 2), ssa_merge.c (pass 3); ssa_int.h what they share.
 *
 * Not here: the topological order (topo.c), lineage, any judgement of operator semantics.
 *
 * Invariants: a value's producer is -1 only for an initial value or for a
 * placeholder (an unproduced read, always accompanied by an issue); a
 * placeholder is never registered as an instance's first/last value.
 * Cross-rank dependencies exist only through collective and send/recv nodes.
 * Memory: O(executions + operands + tensor instances); nothing per rank pair.
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

const char *const vd_gissue_names[VD_GISSUE__COUNT] = {
    "unproduced", "read_early", "double_write", "coll_mismatch", "cycle", "mb_scope"};

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
  if ((rc = vd_graph_i_index_nodes(&c)) != VD_OK) goto done;
  if ((rc = vd_graph_i_index_groups(&c)) != VD_OK) goto done;
  if ((rc = vd_graph_i_prepare(&c, &n_ops, &n_outs)) != VD_OK) goto done;
  if ((rc = vd_graph_i_execute(&c)) != VD_OK) goto done;
  ex_gnode = vd_malloc((c.n_ex ? c.n_ex : 1) * sizeof(*ex_gnode));
  if (!ex_gnode) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = vd_graph_i_merge(&c, ex_gnode)) != VD_OK) goto done;
  vd_graph_i_link_values(&c, ex_gnode);
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
  VD_FREE_ALL(ex_gnode, c.written, c.ord, c.rank_off, c.step_lo, c.step_hi, c.gpos, c.is_p2p, c.ex, c.ce, c.map,
              c.cdirect, c.pend, c.r_ex, c.r_ops, c.r_colls);
  return rc;
}

void vd_graph_free(vd_graph_t *g) {
  if (!g) return;
  VD_FREE_ALL(g->values, g->nodes, g->idx, g->topo, g->inst_base, g->inst_per_replica, g->inst_first, g->inst_last,
              g->issues);
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
