/*
 * graph/graph_int.h - private declarations shared by the .c files of graph/ only.
 *
 * ssa.c builds values and nodes; topo.c orders them (igraph's order, see
 * there) and reports cycles.  Issues are appended through one function
 * so the cap (VD_GRAPH_MAX_ISSUES) and the growth policy live in one place.
 */
#ifndef VD_GRAPH_INT_H
#define VD_GRAPH_INT_H

#include "graph.h"

/* Appends an issue (or counts it as dropped beyond the cap).  pnode, tensor
 * may be -1; field may be NULL.  Returns VD_ENOMEM only. */
vd_rc vd_graph_i_issue(vd_graph_t *g, vd_gissue_kind kind, int64_t tensor, int64_t pnode,
                       int32_t replica, int32_t mb, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Writes "node 12 'layers.0.attn' (rank 3, mb 1)" for plan node pnode run in
 * replica/mb into buf. */
void vd_graph_i_node_label(const vd_graph_t *g, uint32_t pnode, int32_t replica, int32_t mb,
                           char *buf, size_t size);

/* Fills g->topo (n_nodes entries) with the topological order that
 * igraph_topological_sorting would give.  If the dataflow has a cycle, adds
 * one VD_GISSUE_CYCLE naming the nodes of one cycle, and g->topo holds the acyclic prefix (Kahn order)
 * followed by the remaining nodes in index order.  Needs consumers lists.
 * Returns VD_OK, VD_ENOMEM or VD_EINTERNAL (a graph too large to index). */
vd_rc vd_graph_i_topo(vd_graph_t *g, vd_diag *d);

#endif
