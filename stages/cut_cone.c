/*
 * stages/cut_cone.c - phase 2 of the cut, the cones: the parallel cone walks Gp
 * back from a target's pieces over virtual values (value, replica) to the
 * lineage points; the single cone walks Gs back to the hypotheses' single
 * values and the initial values (see cut.c for the soundness argument).
 */
#include "cut_int.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/hash.h"
#include "../common/mem.h"
#include "../ops/ops.h"

/* ---- phase 2: cones ------------------------------------------------------ */

void vd_stage_i_cone_reset(cone_t *k) {
  k->n = 0;
  k->n_nd = 0;
  hmap_reset(&k->vmap);
  hmap_reset(&k->nmap);
}

void vd_stage_i_cone_free(cone_t *k) {
  vd_free(k->v);
  vd_free(k->nd);
  hmap_free(&k->vmap);
  hmap_free(&k->nmap);
}

/* Index of value key in cone k, inserting it if new (*fresh = 1). */
static vd_rc cone_value(cctx *c, cone_t *k, uint64_t key, uint32_t *idx, int *fresh) {
  uint32_t i = hmap_get(&k->vmap, key);
  *fresh = 0;
  if (i == NONE) {
    if (VD_GROW(k->v, k->cap, k->n + 1)) return VD_OOM(c->d);
    i = (uint32_t)k->n++;
    k->v[i] = (cval_t){key, -1, 0, 0, NONE};
    if (hmap_put(&k->vmap, key, i)) return VD_OOM(c->d);
    *fresh = 1;
  }
  *idx = i;
  return VD_OK;
}

static vd_rc push(cctx *c, uint32_t i) {
  if (VD_GROW(c->stack, c->cap_stack, c->n_stack + 1)) return VD_OOM(c->d);
  c->stack[c->n_stack++] = i;
  return VD_OK;
}

/* Adds graph node gn (virtual replica rep) to cone k: its outputs become
 * produced values, its new inputs are pushed.  D = 1 on the single side. */
static vd_rc cone_node(cctx *c, cone_t *k, const vd_graph_t *g, uint32_t gnode, uint32_t rep, uint32_t D,
                       const uint32_t *pos, int span) {
  uint64_t nkey = (uint64_t)gnode * D + rep;
  if (hmap_get(&k->nmap, nkey) != NONE) return VD_OK;
  if (VD_GROW(k->nd, k->cap_nd, k->n_nd + 1)) return VD_OOM(c->d);
  k->nd[k->n_nd] = (cnode_t){gnode, (int32_t)rep, (uint8_t)span, pos[gnode], NONE};
  if (hmap_put(&k->nmap, nkey, (uint32_t)k->n_nd)) return VD_OOM(c->d);
  k->n_nd++;
  const vd_gnode_t *gn = &g->nodes[gnode];
  const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
  uint32_t r0 = span ? 0 : rep, r1 = span ? D : rep + 1;
  for (uint32_t r = r0; r < r1; r++) {
    for (uint32_t o = 0; o < gn->n_out; o++) {
      uint32_t i;
      int fresh;
      VD_CHECK(cone_value(c, k, (uint64_t)ov[o] * D + r, &i, &fresh));
      k->v[i].produced = 1;
    }
    for (uint32_t u = 0; u < gn->n_in; u++) {
      uint32_t i;
      int fresh;
      VD_CHECK(cone_value(c, k, (uint64_t)iv[u] * D + r, &i, &fresh));
      if (fresh) VD_CHECK(push(c, i));
    }
  }
  return VD_OK;
}

/* Target description for messages: "'y' final slice [0:4, 0:8]". */
void vd_stage_i_target_label(cctx *c, const vd_lineage *L, const vd_lin_piece *p0, char *buf, size_t n) {
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  char sl[96];
  vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
  snprintf(buf, n, "'%s' %s slice %s", tname(c->sp, L->stensor), L->initial ? "initial" : "final", sl);
}

/* Parallel cone of the target pieces [a, b).  *ok = 0 when it is too big. */
vd_rc vd_stage_i_parallel_cone(cctx *c, const vd_lineage *L, int *ok) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gp;
  cone_t *k = &c->pc;
  uint32_t D = c->D;
  size_t a = c->mp[0];
  c->n_stack = 0;
  *ok = 1;
  for (size_t i = 0; i < c->n_mem; i++) {
    const vd_lin_piece *p = &lt->pieces[c->mp[i]];
    uint32_t vi;
    int fresh;
    VD_CHECK(cone_value(c, k, (uint64_t)p->value * D + (uint32_t)c->mr[i], &vi, &fresh));
    k->v[vi].target = 1;
    if (fresh) VD_CHECK(push(c, vi));
  }
  while (c->n_stack) {
    uint32_t vi = c->stack[--c->n_stack];
    uint64_t key = k->v[vi].key;
    uint32_t v = (uint32_t)(key / D), d = (uint32_t)(key % D);
    if (!k->v[vi].target) {
      int32_t pc = vd_lin_piece_of(lt, v, (int32_t)d);
      if (pc >= 0) {
        k->v[vi].piece = pc;
        continue;
      }
    }
    int32_t pr = g->values[v].producer;
    if (pr < 0) {
      /* An annotated tensor's initial value that is no point is state the
       * single plan does not have (see lineage.c): a free leaf, no issue.
       * An unannotated initial value is a DATAFLOW issue.  Placeholders
       * (unproduced reads) are graph issues already. */
      /* An unannotated initial value that a later version overwrites (an
       * accumulator before zero_grad in a boundary-only plan) is such state
       * too: a free leaf. */
      const vd_value_t *x0 = &g->values[v];
      if (x0->is_initial && !c->pp->tensors[x0->tensor].has_lin && !c->nolin[v] &&
          vd_graph_last(g, x0->tensor, x0->replica, x0->mb) == (int32_t)v) {
        c->nolin[v] = 1;
        if (c->log_nolin) {
          if (VD_GROW(c->nolin_log, c->cap_nolin_log, c->n_nolin_log + 1)) return VD_OOM(c->d);
          c->nolin_log[c->n_nolin_log++] = v;
        }
        char tl[160];
        vd_stage_i_target_label(c, L, &lt->pieces[a], tl, sizeof(tl));
        const vd_value_t *x = &g->values[v];
        const vd_tensor_t *t = &c->pp->tensors[x->tensor];
        VD_CHECK(vd_stage_i_add_issue(c, VD_SISSUE_DATAFLOW, 0, -1, (int64_t)x->tensor,
                           (int32_t)vd_graph_rank(g, t->rank, (int32_t)d), x->mb,
                           "value '%s' (rank %lld, mb %d, version %u) feeds target %s but has no lineage",
                           tname(c->pp, x->tensor), (long long)vd_graph_rank(g, t->rank, (int32_t)d), x->mb,
                           x->version, tl));
        c->iss_val[c->set->n_issues - 1] = v;
      }
      continue;
    }
    int span = is_span(c, &g->nodes[pr]);
    VD_CHECK(cone_node(c, k, g, (uint32_t)pr, span ? 0 : d, D, c->ppos, span));
    if (k->n_nd > CONE_MAX || k->n > CONE_VALUES_MAX) {
      *ok = 0;
      return VD_OK;
    }
  }
  return VD_OK;
}

/* Single cone from svalue, stopping at the hypotheses' single values. */
/* Walks the single cone back from the target's single value.  Stops at the
 * single values that parallel hypotheses refer to and at initial values.
 * The target value itself is computed (not a leaf) when some hypothesis
 * refers to another single value: pieces computed from those need the
 * target's own formula.  When every hypothesis is a slice of the target
 * itself, or computing it would take more than SINGLE_SOFT nodes, the
 * target is a leaf instead.  SOUNDNESS: either way every single leaf is a
 * free symbol, so the proof holds for the real values. */
#define SINGLE_SOFT 64u

/* When the single value of stop value vi is a rearrangement (a chain of at
 * most 4 view-like nodes) of another stop value's single value, adds that
 * chain to cone k.  Without it the two would be unrelated free symbols in
 * the stage (a rank reading the labels and another reading their flattened
 * view): sound, but a false alarm once one rank's inferred lineage stops at
 * an inserted view and the other's does not. */
static vd_rc bridge_stop(cctx *c, cone_t *k, uint32_t vi) {
  const vd_graph_t *g = c->gs;
  uint32_t chain[4], n = 0;
  uint64_t v = k->v[vi].key;
  while (n < 4) {
    int32_t pr = g->values[v].producer;
    if (pr < 0) return VD_OK;
    const vd_gnode_t *gn = &g->nodes[pr];
    if (gn->n_in != 1 || !vd_op_copies_elements(c->sop[gn->pnode])) return VD_OK;
    chain[n++] = (uint32_t)pr;
    v = vd_gnode_inputs(g, gn)[0];
    uint32_t at = hmap_get(&k->vmap, v);
    if (at != NONE && k->v[at].piece >= 0 && !k->v[at].target) {
      for (uint32_t i = 0; i < n; i++) VD_CHECK(cone_node(c, k, g, chain[i], 0, 1, c->spos, 0));
      return VD_OK;
    }
  }
  return VD_OK;
}

/* When the single value of stop value vi is a broadcast of a scalar (one
 * input of one element: the loss gradient's sum_backward, an expand), adds
 * its producer to cone k: the stage then knows that every element of the
 * hypothesis is the same term.  As free symbols they were unrelated, and a
 * rank that permutes such a value (a correct program: it is constant) was a
 * false alarm (soundness fuzzer, llama3 tp2 cp2: a pair permutation of the
 * token loss's gradient).  SOUNDNESS: the node is the single plan's own;
 * its input becomes a free symbol, so the proof still holds for the real
 * values. */
static vd_rc bridge_broadcast(cctx *c, cone_t *k, uint32_t vi) {
  const vd_graph_t *g = c->gs;
  uint64_t v = k->v[vi].key;
  int32_t pr = g->values[v].producer;
  if (pr < 0) return VD_OK;
  const vd_gnode_t *gn = &g->nodes[pr];
  if (gn->n_in != 1 || gn->n_out != 1) return VD_OK;
  const vd_tensor_t *x = &g->plan->tensors[g->values[vd_gnode_inputs(g, gn)[0]].tensor];
  const vd_tensor_t *y = &g->plan->tensors[g->values[v].tensor];
  if (vd_tensor_numel(x) != 1 || vd_tensor_numel(y) < 2) return VD_OK;
  return cone_node(c, k, g, (uint32_t)pr, 0, 1, c->spos, 0);
}

/* A stop value is a leaf of the single cone: a hypothesis' single value.
 * Reached: some node of the cone reads it. */
static int is_stop(const cone_t *k, uint32_t vi) {
  return k->v[vi].piece >= 0 && !k->v[vi].target && !k->v[vi].produced;
}

/* unread[i] = 1 for every stop value of cone k no node of it reads; *n_stops
 * = the stop values; returns the unread ones. */
static size_t mark_unread(cctx *c, cone_t *k, uint8_t *unread, size_t *n_stops) {
  const vd_graph_t *g = c->gs;
  size_t n = 0;
  *n_stops = 0;
  for (uint32_t i = 0; i < k->n; i++) *n_stops += unread[i] = (uint8_t)is_stop(k, i);
  for (size_t i = 0; i < k->n_nd; i++) {
    const vd_gnode_t *gn = &g->nodes[k->nd[i].gnode];
    for (uint32_t u = 0; u < gn->n_in; u++) unread[hmap_get(&k->vmap, vd_gnode_inputs(g, gn)[u])] = 0;
  }
  for (uint32_t i = 0; i < k->n; i++) n += unread[i];
  return n;
}

/* Single-side nodes between stop value vi and the stop values upstream of
 * it, walked back at most BRIDGE_NODES nodes (the walk stops at stop values
 * and initial values).  *hits = 1 when the walk meets a stop value in
 * unreached[]. */
#define BRIDGE_NODES 48u
static size_t upstream_walk(const cctx *c, cone_t *k, uint32_t vi, const uint8_t *unreached,
                            uint32_t *nodes, int *hits) {
  const vd_graph_t *g = c->gs;
  uint32_t todo[BRIDGE_NODES * 4];
  size_t n = 0, nt = 0;
  *hits = 0;
  todo[nt++] = (uint32_t)k->v[vi].key;
  while (nt) {
    uint32_t v = todo[--nt];
    int32_t pr = g->values[v].producer;
    if (pr < 0) continue;
    size_t j = 0;
    while (j < n && nodes[j] != (uint32_t)pr) j++;
    if (j < n) continue;
    if (n == BRIDGE_NODES) return 0;
    nodes[n++] = (uint32_t)pr;
    const vd_gnode_t *gn = &g->nodes[pr];
    for (uint32_t u = 0; u < gn->n_in; u++) {
      uint32_t x = vd_gnode_inputs(g, gn)[u], xi = hmap_get(&k->vmap, x);
      if (xi != NONE && is_stop(k, xi)) {
        *hits |= unreached[xi];
        continue;
      }
      if (nt == sizeof(todo) / sizeof(*todo)) return 0;
      todo[nt++] = x;
    }
  }
  return n;
}

/* Relates the stop values to each other when the cone leaves some unread.
 * A hypothesis whose single value the target's walk never reads is one
 * rank's frontier lying upstream of another's: one rank's inferred lineage
 * stops at a value (the summed loss, a loss-gradient) that the other rank
 * computes again from further upstream (its copy had no inferred lineage:
 * the sum written as mean x count, a permuted gradient).  As free symbols
 * the value and its own inputs were unrelated, and the stage failed on
 * values the plan can never hold (soundness fuzzer, --strip: #65 moe
 * ce.sum, #29 llama3 ce.token_loss.grad).  So each read stop value whose
 * single computation reaches an unread one within BRIDGE_NODES nodes is
 * computed in the stage, when the unread stop values are the fewer and all
 * such computations together take at most BRIDGE_NODES nodes.  A cone
 * whose stop values are mostly unread (a DDP bucket's gradients under
 * fp16_compress_hook: 40 of 44) is not one frontier behind another: there
 * the bridges pulled in whole backward blocks and the stage outgrew the
 * solver (INCONCLUSIVE at 30 s); it is left as it was.  The fuzzer's
 * bridges have 1 or 2 unread stop values and up to 27 nodes (#338).
 * SOUNDNESS: the nodes are the single plan's own
 * and their other inputs are free symbols, so the proof still holds for the
 * real values; a cone where every stop value is read is unchanged. */
static vd_rc bridge_unreached(cctx *c, cone_t *k) {
  uint8_t *unreached = vd_calloc(k->n ? k->n : 1, 1);
  if (!unreached) return VD_OOM(c->d);
  size_t n_values = k->n, n_stops, n_unreached = mark_unread(c, k, unreached, &n_stops), n_all = 0;
  uint32_t nodes[BRIDGE_NODES], all[BRIDGE_NODES];
  int fits = 2 * n_unreached <= n_stops;
  for (uint32_t i = 0; i < n_values && n_unreached && fits; i++) {
    if (!is_stop(k, i) || unreached[i]) continue;
    int hits;
    size_t n = upstream_walk(c, k, i, unreached, nodes, &hits);
    if (!hits) continue;
    fits = n_all + n <= BRIDGE_NODES;
    for (size_t j = 0; fits && j < n; j++) all[n_all++] = nodes[j];
  }
  vd_rc rc = VD_OK;
  for (size_t j = 0; fits && j < n_all && rc == VD_OK; j++) rc = cone_node(c, k, c->gs, all[j], 0, 1, c->spos, 0);
  c->n_stack = 0; /* the inputs cone_node pushed are leaves: nothing walks them */
  vd_free(unreached);
  return rc;
}

static vd_rc single_walk(cctx *c, uint32_t svalue, int target_is_leaf, int *ok) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gs;
  cone_t *k = &c->sc, *pk = &c->pc;
  vd_stage_i_cone_reset(k);
  c->n_stack = 0;
  c->s_reached = 0;
  *ok = 1;
  /* Stop values first, flagged by piece >= 0 (the lineage's piece). */
  for (size_t i = 0; i < pk->n; i++) {
    if (pk->v[i].piece < 0 || pk->v[i].produced) continue;
    uint32_t sv = lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue;
    uint32_t si;
    int fresh;
    VD_CHECK(cone_value(c, k, sv, &si, &fresh));
    k->v[si].piece = pk->v[i].piece;
  }
  uint32_t si;
  int fresh;
  VD_CHECK(cone_value(c, k, svalue, &si, &fresh));
  k->v[si].target = 1;
  VD_CHECK(push(c, si));
  while (c->n_stack) {
    uint32_t vi = c->stack[--c->n_stack];
    if (k->v[vi].piece >= 0 && (target_is_leaf || !k->v[vi].target)) { /* a hypothesis' single value */
      c->s_reached += !k->v[vi].target;
      continue;
    }
    int32_t pr = g->values[k->v[vi].key].producer;
    if (pr < 0) continue;
    VD_CHECK(cone_node(c, k, g, (uint32_t)pr, 0, 1, c->spos, 0));
    if (k->n_nd > (target_is_leaf ? CONE_MAX : SINGLE_SOFT) || k->n > CONE_VALUES_MAX) {
      *ok = 0;
      return VD_OK;
    }
  }
  /* Hypothesis values the walk met as node inputs: they were in the cone
   * before the walk, so cone_node never pushes them and the pop above only
   * sees the target's own.  Each is first related to the other stop values
   * it rearranges (bridge_stop; the nodes it adds come after the walk's). */
  VD_CHECK(bridge_unreached(c, k));
  size_t n_walked = k->n_nd;
  for (size_t i = 0; i < n_walked; i++) {
    const vd_gnode_t *gn = &g->nodes[k->nd[i].gnode];
    for (uint32_t u = 0; u < gn->n_in; u++) {
      uint32_t xi = hmap_get(&k->vmap, vd_gnode_inputs(g, gn)[u]);
      if (k->v[xi].piece >= 0 && !k->v[xi].target && !k->v[xi].produced) VD_CHECK(bridge_stop(c, k, xi));
      if (k->v[xi].piece >= 0 && !k->v[xi].target && !k->v[xi].produced) VD_CHECK(bridge_broadcast(c, k, xi));
    }
  }
  for (size_t i = 0; i < k->n_nd; i++) {
    const vd_gnode_t *gn = &g->nodes[k->nd[i].gnode];
    const uint32_t *iv = vd_gnode_inputs(g, gn);
    for (uint32_t u = 0; u < gn->n_in; u++) {
      const cval_t *x = &k->v[hmap_get(&k->vmap, iv[u])];
      c->s_reached += x->piece >= 0 && !x->target;
    }
  }
  return VD_OK;
}

vd_rc vd_stage_i_single_cone(cctx *c, uint32_t svalue, int *ok) {
  const vd_lin_table *lt = c->lt;
  const cone_t *pk = &c->pc;
  int other = 0;
  for (size_t i = 0; i < pk->n && !other; i++)
    if (pk->v[i].piece >= 0 && !pk->v[i].produced && lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue != svalue)
      other = 1;
  c->s_unrelated = -1;
  if (other) {
    VD_CHECK(single_walk(c, svalue, 0, ok));
    if (*ok) return VD_OK;
  }
  VD_CHECK(single_walk(c, svalue, 1, ok));
  /* The target's single-device computation reaches none of the values the
   * parallel pieces are computed from, and is large: the parallel value is
   * computed from the wrong inputs (e.g. swapped gradients).  Reported as a
   * DATAFLOW problem rather than handed to the solver as a whole-model
   * formula. */
  if (*ok && other && c->s_reached == 0 && c->sc.n_nd > SINGLE_SOFT)
    for (size_t i = 0; i < pk->n && c->s_unrelated < 0; i++)
      if (pk->v[i].piece >= 0 && !pk->v[i].produced && lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue != svalue)
        c->s_unrelated = pk->v[i].piece;
  return VD_OK;
}
