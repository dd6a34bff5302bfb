/*
 * graph/graph.h - the SSA dataflow DAG of one plan.
 *
 * Built from a vd_plan_t by walking every stored rank's schedule (and, when
 * asked, every DP replica): each (plan node, replica, microbatch) execution
 * becomes a graph node, except that the participants of one collective or
 * send/recv pair instance merge into ONE graph node whose inputs and outputs
 * are the participants' in group order.  Every tensor value is produced once:
 * a node that reads and writes the same persistent tensor (in-place update,
 * gradient accumulation, optimizer step) produces a new version.
 *
 * Values and nodes are integer-indexed arrays; consumer and operand lists are
 * ranges of one shared index array.  The topological order is igraph's
 * (igraph_topological_sorting), computed in topo.c on these arrays.
 *
 * Structural problems are collected as vd_graph_issue records (all of them,
 * in deterministic order) so the verifier can report DATAFLOW errors with
 * names and ranks; the build still succeeds unless the graph cannot be formed
 * at all.  vd_graph_build returns VD_EINPUT when any issue was found and puts
 * the first into the diag.
 *
 * Layer: graph/ is the SSA dataflow DAG of one plan; it may include common/,
 * plans/, ops/.  tools/check_layers.sh (make lint) enforces the order.
 */
#ifndef VD_GRAPH_H
#define VD_GRAPH_H

#include <stdint.h>

#include "../common/issue.h"
#include "../common/limits.h"
#include "../plans/plan.h"

typedef struct {
  uint32_t tensor;   /* plan tensor index */
  int32_t replica;   /* DP replica (0 .. replicas-1) */
  int32_t mb;        /* microbatch instance, -1 for persistent tensors */
  uint32_t version;  /* 0 = first value of this instance */
  int32_t producer;  /* graph node index, -1 for an initial value */
  uint32_t cons_off, n_cons; /* consumers (graph node indices) in g->idx */
  uint8_t is_initial; /* no producer: an input of the iteration (which first reads
                         are initial: tensor_initial in graph/ssa.c) */
  uint8_t is_final;   /* last version of its instance */
} vd_value_t;

typedef struct {
  uint32_t pnode;    /* plan node (for a collective: the group's first participant) */
  int32_t replica;   /* replica of that participant */
  int32_t mb;        /* microbatch of the step that ran it, -1 if none */
  uint32_t in_off, n_in;     /* value indices in g->idx */
  uint32_t out_off, n_out;   /* value indices in g->idx */
  uint32_t part_off, n_part; /* participants: (plan node, replica) pairs in g->idx,
                                2 entries per participant, group order; n_part = count;
                                0 for an ordinary (non-collective) node */
} vd_gnode_t;

typedef enum {
  VD_GISSUE_UNPRODUCED,   /* a non-initial tensor is read but nothing produced it */
  VD_GISSUE_READ_EARLY,   /* read on its rank before the step that produces it */
  VD_GISSUE_DOUBLE_WRITE, /* written again by a node that does not read it (weights and
                             optimizer state excepted: overwriting them is an update) */
  VD_GISSUE_COLL_MISMATCH,/* collective participants missing, extra or inconsistent */
  VD_GISSUE_CYCLE,        /* the dataflow has a cycle */
  VD_GISSUE_MB_SCOPE,     /* a per-microbatch tensor used in a step that runs once (mb -1);
                             the graph uses its microbatch-0 instance */
  VD_GISSUE__COUNT
} vd_gissue_kind;

extern const char *const vd_gissue_names[VD_GISSUE__COUNT];

/* Graph issues are vd_issue (common/issue.h) with source "graph", kind a
 * vd_gissue_kind, tensor and pnode indices of this graph's plan (-1 if
 * none), rank the global rank of pnode (else of tensor), and field the
 * operand of pnode involved ("in[0]", "out[1]").  Their diagnosis is
 * DATAFLOW, except a READ_EARLY by a DP gradient reducer: SCHEDULE (see
 * vd_graph_i_issue). */
typedef vd_issue vd_graph_issue;

/* At most this many issues are stored; the rest are only counted. */
#define VD_GRAPH_MAX_ISSUES ((size_t)VD_LIM_GRAPH_MAX_ISSUES) /* reason: common/limits.h */

typedef struct {
  int expand_replicas; /* 1: build every DP replica; 0: replica 0 only, and
                          collectives spanning replicas keep replica 0's part */
} vd_graph_opts;

typedef struct vd_graph {
  const vd_plan_t *plan; /* borrowed; must outlive the graph */
  int32_t replicas;      /* replicas built */
  vd_value_t *values; size_t n_values;
  vd_gnode_t *nodes;  size_t n_nodes;
  uint32_t *idx;      size_t n_idx;        /* shared index storage */
  uint32_t *topo;     /* n_nodes graph node indices in a topological order */
  /* Per tensor instance: first and last value.  Instance of (tensor t,
   * replica r, mb m): inst_base[t] + r * inst_per_replica[t] + (m < 0 ? 0 : m). */
  uint32_t *inst_base; uint32_t *inst_per_replica;
  int32_t *inst_first, *inst_last; /* value index or -1 if never materialised */
  size_t n_inst;
  vd_graph_issue *issues; size_t n_issues, cap_issues;
  size_t n_issues_dropped; /* issues found beyond VD_GRAPH_MAX_ISSUES */
} vd_graph_t;

/* Builds the SSA graph of plan p (which must have passed vd_plan_validate).
 * Cost O(executed node instances + their operands) plus an O(V+E)
 * topological sort.  On VD_EINPUT the graph is still complete enough to read
 * g->issues; free it with vd_graph_free in every case. */
vd_rc vd_graph_build(const vd_plan_t *p, const vd_graph_opts *o, vd_graph_t *g, vd_diag *d);
void vd_graph_free(vd_graph_t *g); /* accepts NULL and zeroed graphs */

/* Value index of instance (tensor, replica, mb): first or last version; -1 if
 * the instance has no value. */
int32_t vd_graph_first(const vd_graph_t *g, uint32_t tensor, int32_t replica, int32_t mb);
int32_t vd_graph_last(const vd_graph_t *g, uint32_t tensor, int32_t replica, int32_t mb);

static inline const uint32_t *vd_gnode_inputs(const vd_graph_t *g, const vd_gnode_t *n) { return g->idx + n->in_off; }
static inline const uint32_t *vd_gnode_outputs(const vd_graph_t *g, const vd_gnode_t *n) { return g->idx + n->out_off; }
static inline const uint32_t *vd_value_consumers(const vd_graph_t *g, const vd_value_t *v) { return g->idx + v->cons_off; }

/* Global rank of stored rank r in replica d. */
static inline int64_t vd_graph_rank(const vd_graph_t *g, int32_t rank, int32_t replica) {
  return (int64_t)replica * g->plan->world.stored_ranks + rank;
}

#endif
