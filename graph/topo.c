/*
 * graph/topo.c - topological order of the SSA graph and cycle reports.
 *
 * The only file of verdict that includes igraph.  igraph's default error
 * handler aborts the process, so every entry installs the ignoring handler
 * (which also unwinds igraph's own cleanup stack) and a silent warning
 * handler, and every igraph_error_t is converted to a vd_rc: IGRAPH_ENOMEM
 * becomes VD_ENOMEM, anything else VD_EINTERNAL (our edges are valid by
 * construction, so another error is a bug of ours).  Serial phase only: the
 * handlers are process-wide in a non-thread-safe igraph build.
 *
 * igraph_topological_sorting fails on a cyclic graph, so igraph_is_dag is
 * asked first.  For a cycle we run Kahn's algorithm ourselves (to give the
 * caller a complete, if partial, order) and walk predecessors inside the
 * unordered remainder until a node repeats: that node lies on a cycle, and
 * the walk between its two visits is the cycle we name.
 * igraph memory does not go through vd_malloc, so fault injection cannot
 * reach igraph's allocations; the conversion is still there for real OOM.
 */
#include <igraph.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "graph_int.h"

static vd_rc from_igraph(igraph_error_t e, vd_diag *d, const char *what) {
  if (e == IGRAPH_SUCCESS) return VD_OK;
  if (e == IGRAPH_ENOMEM) return VD_OOM(d);
  return VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "igraph %s failed: %s", what, igraph_strerror(e));
}

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
    rc = VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "igraph reported a cycle that Kahn's order does not see");
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

vd_rc vd_graph_i_topo(vd_graph_t *g, vd_diag *d) {
  igraph_set_error_handler(igraph_error_handler_ignore);
  igraph_set_warning_handler(igraph_warning_handler_ignore);
  size_t nn = g->n_nodes, ne = 0;
  for (size_t v = 0; v < g->n_values; v++)
    if (g->values[v].producer >= 0) ne += g->values[v].n_cons;
  g->topo = vd_malloc((nn ? nn : 1) * sizeof(*g->topo));
  if (!g->topo) return VD_OOM(d);

  igraph_vector_int_t edges, order;
  igraph_t ig;
  int have_edges = 0, have_graph = 0, have_order = 0;
  igraph_bool_t dag = 0;
  vd_rc rc = from_igraph(igraph_vector_int_init(&edges, (igraph_integer_t)(2 * ne)), d, "vector_init");
  if (rc != VD_OK) goto done;
  have_edges = 1;
  size_t e = 0;
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *val = &g->values[v];
    if (val->producer < 0) continue;
    const uint32_t *cl = vd_value_consumers(g, val);
    for (uint32_t k = 0; k < val->n_cons; k++) {
      VECTOR(edges)[e++] = val->producer;
      VECTOR(edges)[e++] = cl[k];
    }
  }
  rc = from_igraph(igraph_create(&ig, &edges, (igraph_integer_t)nn, IGRAPH_DIRECTED), d, "create");
  if (rc != VD_OK) goto done;
  have_graph = 1;
  igraph_vector_int_destroy(&edges); /* the graph keeps its own copy */
  have_edges = 0;
  rc = from_igraph(igraph_is_dag(&ig, &dag), d, "is_dag");
  if (rc != VD_OK) goto done;
  if (!dag) {
    rc = report_cycle(g, d);
    goto done;
  }
  rc = from_igraph(igraph_vector_int_init(&order, 0), d, "vector_init");
  if (rc != VD_OK) goto done;
  have_order = 1;
  rc = from_igraph(igraph_topological_sorting(&ig, &order, IGRAPH_OUT), d, "topological_sorting");
  if (rc != VD_OK) goto done;
  if (VD_NEVER((size_t)igraph_vector_int_size(&order) != nn)) {
    rc = VD_ERR(d, VD_EINTERNAL, NULL, NULL, NULL, "igraph ordered %ld of %zu nodes",
                (long)igraph_vector_int_size(&order), nn);
    goto done;
  }
  for (size_t i = 0; i < nn; i++) g->topo[i] = (uint32_t)VECTOR(order)[i];
done:
  if (have_order) igraph_vector_int_destroy(&order);
  if (have_graph) igraph_destroy(&ig);
  if (have_edges) igraph_vector_int_destroy(&edges);
  return rc;
}
