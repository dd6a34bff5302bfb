/*
 * graph/ssa_merge.c - pass 3 of the SSA build (ssa.c): plain execs become graph
 * nodes, the execs of one collective instance one merged node in group
 * order; producers remapped from execs to nodes, consumers linked.
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

/* Groups collective execs by instance (stable, coff: the offsets into sorted), then by position;
 * cgn (per instance: its graph node) all NONE. */
static void group_by_instance(bctx *c, uint32_t *coff, uint32_t *cgn, cexec_t *sorted) {
  uint32_t nci = c->n_cinst;
  for (size_t i = 0; i < c->n_ce; i++) coff[c->ce[i].cinst + 1]++;
  for (uint32_t i = 0; i < nci; i++) coff[i + 1] += coff[i];
  memcpy(cgn, coff, ((size_t)nci + 1) * sizeof(*cgn));
  for (size_t i = 0; i < c->n_ce; i++) sorted[cgn[c->ce[i].cinst]++] = c->ce[i];
  for (uint32_t i = 0; i < nci; i++) {
    if (coff[i + 1] - coff[i] > 1) qsort(sorted + coff[i], coff[i + 1] - coff[i], sizeof(*sorted), ce_cmp);
    cgn[i] = NONE;
  }
}

/* The graph's nodes, and idx grown to its exact need: collective copies (+2 per participant)
 * and consumers (at most one per input operand). */
static vd_rc alloc_graph_nodes(bctx *c) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  uint64_t extra = 0, ins = 0;
  for (size_t e = 0; e < c->n_ex; e++) ins += p->nodes[c->ex[e].pnode].n_in;
  for (size_t i = 0; i < c->n_ce; i++) {
    const vd_node_t *n = &p->nodes[c->ex[c->ce[i].exec].pnode];
    extra += n->n_in + n->n_out + 2;
  }
  if (g->n_idx + extra + ins >= UINT32_MAX) return vd_graph_i_too_large(c, "index entries");
  uint32_t *ni = vd_realloc_array(g->idx, g->n_idx + extra + ins + 1, sizeof(*ni));
  g->nodes = vd_malloc((c->n_ex ? c->n_ex : 1) * sizeof(*g->nodes));
  if (ni) g->idx = ni;
  if (!ni || !g->nodes) return VD_OOM(c->d);
  return VD_OK;
}

/* One graph node for the np participants ps of a collective instance: their inputs, then their
 * outputs, then (plan node, replica) per participant; each participant's exec maps to it. */
static uint32_t merge_participants(bctx *c, const cexec_t *ps, uint32_t np, uint32_t *ex_gnode) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  uint32_t gi = (uint32_t)g->n_nodes++;
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
  return gi;
}

vd_rc vd_graph_i_merge(bctx *c, uint32_t *ex_gnode) {
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
  group_by_instance(c, coff, cgn, sorted);
  if ((rc = alloc_graph_nodes(c)) != VD_OK) goto done;
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
    cgn[ci] = merge_participants(c, ps, np, ex_gnode);
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
void vd_graph_i_link_values(bctx *c, const uint32_t *ex_gnode) {
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
