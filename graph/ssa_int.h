/*
 * graph/ssa_int.h - private to the SSA build of graph/ (ssa.c, ssa_index.c,
 * ssa_exec.c, ssa_merge.c): the build context, its exec records, and the
 * three passes ssa.c runs in order.
 */
#ifndef VD_GRAPH_SSA_INT_H
#define VD_GRAPH_SSA_INT_H

#include "graph_int.h"

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

static inline const char *tname(const vd_plan_t *p, uint32_t t) { return vd_plan_s(p, p->tensors[t].name); }
static inline const char *nname(const vd_plan_t *p, uint32_t n) { return vd_plan_s(p, p->nodes[n].name); }
static inline const char *nop(const vd_plan_t *p, uint32_t n) { return vd_node_op(p, &p->nodes[n]); }

/* "plan too large for the graph: more than 2^31-2 <what>" (VD_EINPUT). */
vd_rc vd_graph_i_too_large(bctx *c, const char *what);

/* ---- pass 1 (ssa_index.c) ------------------------------------------------- */
/* Sorts plan nodes by (rank, segment, index) and checks ranges. */
vd_rc vd_graph_i_index_nodes(bctx *c);
/* Per-node group position and send/recv flag. */
vd_rc vd_graph_i_index_groups(bctx *c);
/* Instance layout, written flags, step ranges and exact totals. */
vd_rc vd_graph_i_prepare(bctx *c, size_t *n_ops, size_t *n_outs);

/* ---- pass 2 (ssa_exec.c) --------------------------------------------------- */
/* The walks of every (replica, rank), in parallel, numbered as the serial
 * walk would number them (see ssa_exec.c). */
vd_rc vd_graph_i_execute(bctx *c);

/* ---- pass 3 (ssa_merge.c) -------------------------------------------------- */
/* Graph nodes from the execs; ex_gnode[e] = the node of exec e. */
vd_rc vd_graph_i_merge(bctx *c, uint32_t *ex_gnode);
/* Producers from execs to graph nodes; consumers lists; is_final. */
void vd_graph_i_link_values(bctx *c, const uint32_t *ex_gnode);

#endif
