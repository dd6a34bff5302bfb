/*
 * graph/topo.c - topological order of the SSA graph and cycle reports.
 *
 * The order is igraph_topological_sorting's (IGRAPH_OUT), computed here by
 * the same Kahn's algorithm on our own adjacency arrays (vd_graph_i_topo says
 * why); verdict links no igraph code into this path any more, and
 * tests/graph/test_topo.c keeps igraph as the reference the order is
 * checked against.  For a cycle we run Kahn's algorithm again over the
 * values' consumers lists (to give the caller a complete, if partial,
 * order) and walk predecessors inside the unordered remainder until a node
 * repeats: that node lies on a cycle, and the walk between its two visits is
 * the cycle we name.
 */
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "graph_int.h"

/* Kahn's order into g->topo (prefix), the rest in index order; then one
 * CYCLE issue naming the nodes of one cycle. */
static vd_rc report_cycle(vd_graph_t *g, vd_diag *d) {
  size_t nn = g->n_nodes;
  uint32_t *indeg = vd_calloc(nn ? nn : 1, sizeof(*indeg));
  int32_t *mark = vd_malloc((nn ? nn : 1) * sizeof(*mark));
  uint32_t *path = vd_malloc((nn ? nn : 1) * sizeof(*path));
  vd_rc rc = VD_OK;
  if (!indeg || !mark || !path) {
    rc = VD_OOM(d);
    goto done;
  }
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *val = &g->values[v];
    if (val->producer < 0) continue;
    const uint32_t *cl = vd_value_consumers(g, val);
    for (uint32_t k = 0; k < val->n_cons; k++) indeg[cl[k]]++;
  }
  /* g->topo doubles as the Kahn queue. */
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < nn; i++)
    if (indeg[i] == 0) g->topo[tail++] = (uint32_t)i;
  while (head < tail) {
    const vd_gnode_t *n = &g->nodes[g->topo[head++]];
    const uint32_t *outs = vd_gnode_outputs(g, n);
    for (uint32_t k = 0; k < n->n_out; k++) {
      const vd_value_t *val = &g->values[outs[k]];
      const uint32_t *cl = vd_value_consumers(g, val);
      for (uint32_t j = 0; j < val->n_cons; j++)
        if (--indeg[cl[j]] == 0) g->topo[tail++] = cl[j];
    }
  }
  size_t ordered = tail;
  uint32_t start = UINT32_MAX;
  for (size_t i = 0; i < nn; i++) {
    mark[i] = -1;
    if (indeg[i] > 0) {
      if (start == UINT32_MAX) start = (uint32_t)i;
      g->topo[tail++] = (uint32_t)i;
    }
  }
  if (VD_NEVER(start == UINT32_MAX)) {
    rc = VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "the first topological pass saw a cycle that Kahn's order does not see");
    goto done;
  }
  /* Every unordered node has an unordered predecessor: walk back until a
   * node repeats. */
  size_t len = 0;
  uint32_t u = start;
  while (mark[u] < 0) {
    mark[u] = (int32_t)len;
    path[len++] = u;
    const vd_gnode_t *n = &g->nodes[u];
    const uint32_t *ins = vd_gnode_inputs(g, n);
    uint32_t next = UINT32_MAX;
    for (uint32_t k = 0; k < n->n_in && next == UINT32_MAX; k++) {
      int32_t pr = g->values[ins[k]].producer;
      if (pr >= 0 && indeg[pr] > 0) next = (uint32_t)pr;
    }
    if (VD_NEVER(next == UINT32_MAX)) {
      rc = VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "cycle walk lost its way");
      goto done;
    }
    u = next;
  }
  /* path[mark[u] .. len) walks the cycle backwards; print it forwards. */
  size_t c0 = (size_t)mark[u], clen = len - c0;
  char text[160] = "";
  size_t used = 0;
  for (size_t i = 0; i < clen && i < 3; i++) {
    const vd_gnode_t *n = &g->nodes[path[len - 1 - i]];
    char lab[128];
    vd_graph_i_node_label(g, n->pnode, n->replica, n->mb, lab, sizeof(lab));
    int w = snprintf(text + used, sizeof(text) - used, "%s%s", i ? " -> " : "", lab);
    if (w < 0 || (size_t)w >= sizeof(text) - used) break;
    used += (size_t)w;
  }
  const vd_gnode_t *cn = &g->nodes[u];
  rc = vd_graph_i_issue(g, VD_GISSUE_CYCLE, -1, cn->pnode, cn->replica, cn->mb, NULL,
                        "cycle of %zu nodes (%zu cannot be ordered): %s%s", clen, nn - ordered, text,
                        clen > 3 ? " -> ..." : "");
  if (rc != VD_OK) rc = VD_OOM(d);
done:
  vd_free(indeg);
  vd_free(mark);
  vd_free(path);
  return rc;
}

/* The graph's edges (producer -> consumer, one per consumers-list entry,
 * so two values of one producer read by one node are two edges) as
 * out-adjacency lists, each sorted by target: a stable bucketing by target
 * (in-lists), then a pass over targets in increasing order that appends each
 * target to its sources' lists.  *out_off (n_nodes + 1) and *adj (taken);
 * *indeg (taken) gets each node's in-degree.  O(nodes + edges). */
static vd_rc out_lists(const vd_graph_t *g, size_t ne, uint32_t **out_off, uint32_t **adj, uint32_t **indeg) {
  size_t nn = g->n_nodes;
  uint32_t *in_off = vd_calloc(nn + 1, sizeof(*in_off));
  uint32_t *in_src = vd_malloc((ne ? ne : 1) * sizeof(*in_src));
  uint32_t *oo = vd_calloc(nn + 1, sizeof(*oo));
  uint32_t *a = vd_malloc((ne ? ne : 1) * sizeof(*a));
  uint32_t *deg = vd_malloc((nn ? nn : 1) * sizeof(*deg));
  if (!in_off || !in_src || !oo || !a || !deg) {
    vd_free(in_off);
    vd_free(in_src);
    vd_free(oo);
    vd_free(a);
    vd_free(deg);
    return VD_ENOMEM;
  }
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *val = &g->values[v];
    if (val->producer < 0) continue;
    const uint32_t *cl = vd_value_consumers(g, val);
    oo[val->producer + 1] += val->n_cons;
    for (uint32_t k = 0; k < val->n_cons; k++) in_off[cl[k] + 1]++;
  }
  for (size_t i = 0; i < nn; i++) {
    deg[i] = in_off[i + 1];
    in_off[i + 1] += in_off[i];
    oo[i + 1] += oo[i];
  }
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *val = &g->values[v];
    if (val->producer < 0) continue;
    const uint32_t *cl = vd_value_consumers(g, val);
    for (uint32_t k = 0; k < val->n_cons; k++) in_src[in_off[cl[k]]++] = (uint32_t)val->producer;
  }
  /* in_off[i] is now the end of i's in-list (the start of i + 1's). */
  for (size_t i = 0, lo = 0; i < nn; i++) {
    for (size_t k = lo; k < in_off[i]; k++) a[oo[in_src[k]]++] = (uint32_t)i;
    lo = in_off[i];
  }
  /* oo[i] is now the end of i's out-list: shift back to starts. */
  memmove(oo + 1, oo, nn * sizeof(*oo));
  oo[0] = 0;
  vd_free(in_off);
  vd_free(in_src);
  *out_off = oo;
  *adj = a;
  *indeg = deg;
  return VD_OK;
}

/* OPTIMIZATION-ONLY: this is igraph_topological_sorting(IGRAPH_OUT) (igraph
 * 0.10, properties/dag.c) without building an igraph_t: Kahn's algorithm
 * with a FIFO queue seeded with the sources in index order, a node's
 * successors visited in increasing index order with multi-edges repeated
 * (what igraph_neighbors returns: edges indexed by (from, to)).  The order
 * is therefore the one igraph gives, node for node; tests/graph/test_topo.c
 * compares the two on random multigraphs.  Building the igraph_t (an edge
 * sort, two index vectors) and its is_dag + sorting passes, one
 * igraph_neighbors vector per node, cost several times this on plans of
 * millions of nodes.  A graph that Kahn cannot finish has a cycle
 * (igraph_is_dag would say the same): report_cycle then recomputes the
 * prefix and names one. */
vd_rc vd_graph_i_topo(vd_graph_t *g, vd_diag *d) {
  size_t nn = g->n_nodes, ne = 0;
  for (size_t v = 0; v < g->n_values; v++)
    if (g->values[v].producer >= 0) ne += g->values[v].n_cons;
  if (nn >= UINT32_MAX || ne >= UINT32_MAX)
    return VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "graph of %zu nodes and %zu edges too large to order", nn, ne);
  g->topo = vd_malloc((nn ? nn : 1) * sizeof(*g->topo));
  if (!g->topo) return VD_OOM(d);
  uint32_t *out_off = NULL, *adj = NULL, *indeg = NULL;
  if (out_lists(g, ne, &out_off, &adj, &indeg) != VD_OK) return VD_OOM(d);
  /* g->topo doubles as the queue. */
  size_t head = 0, tail = 0;
  for (size_t i = 0; i < nn; i++)
    if (indeg[i] == 0) g->topo[tail++] = (uint32_t)i;
  while (head < tail) {
    uint32_t u = g->topo[head++];
    for (uint32_t k = out_off[u]; k < out_off[u + 1]; k++)
      if (--indeg[adj[k]] == 0) g->topo[tail++] = adj[k];
  }
  vd_free(out_off);
  vd_free(adj);
  vd_free(indeg);
  if (tail == nn) return VD_OK;
  return report_cycle(g, d);
}
