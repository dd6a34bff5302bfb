/*
 * graph/ssa_exec.c - pass 2 of the SSA build (ssa.c): each built replica and
 * stored rank walks its steps; every plan node runs as an exec (node,
 * replica, mb) whose reads and writes create the values and versions of the
 * tensor instances; collective execs are keyed into instances.
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

/* ---- small helpers ----------------------------------------------------- */

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

/* Each walk's first exec, operand and collective exec: prefix sums of the per-rank totals. */
static void walk_bases(const bctx *c, size_t nw, uint64_t *base) {
  base[0] = base[1] = base[2] = 0;
  for (size_t k = 0; k < nw; k++) {
    int32_t r = (int32_t)(k % (size_t)c->R);
    base[3 * (k + 1)] = base[3 * k] + c->r_ex[r];
    base[3 * (k + 1) + 1] = base[3 * k + 1] + c->r_ops[r];
    base[3 * (k + 1) + 2] = base[3 * k + 2] + c->r_colls[r];
  }
}

/* Runs the walks: as one piece (*nwalk = 1), or each (replica, rank) on its own in parallel
 * (*nwalk = nw), its values in g->values grown to one slot per operand. */
static vd_rc run_walks(bctx *c, walk_t *w, size_t nw, int nt, const uint64_t *base, size_t *nwalk) {
  vd_graph_t *g = c->g;
  /* A plan whose nodes use other ranks' tensors (never a validated one) is
   * walked as one piece, in order: walks would share instances.  So is a
   * plan on one thread: its values go straight to g->values. */
  *nwalk = c->cross_rank || nt < 2 ? 1 : nw;
  if (*nwalk == 1) {
    walk(c, &w[0], 0, nw, base, g->values);
    return VD_OK;
  }
  /* g->values grows to one slot per operand; the walks' values are moved
   * down into place afterwards. */
  vd_value_t *vals = vd_realloc_array(g->values, base[3 * nw + 1] ? (size_t)base[3 * nw + 1] : 1, sizeof(*vals));
  if (!vals) return VD_OOM(c->d);
  g->values = vals;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (size_t k = 0; k < nw; k++) walk(c, &w[k], k, k + 1, base, vals);
  return VD_OK;
}

/* Value bases, issues and the first error, in walk order; *nv the values of all walks. */
static vd_rc gather_walks(bctx *c, walk_t *w, size_t nwalk, size_t *nv) {
  vd_graph_t *g = c->g;
  *nv = 0;
  for (size_t k = 0; k < nwalk; k++) {
    if (w[k].rc != VD_OK) {
      if (c->d) *c->d = w[k].dd;
      return w[k].rc;
    }
    for (size_t i = 0; i < w[k].g.n_issues; i++)
      if (vd_issue_push(&g->issues, &g->n_issues, &g->cap_issues, VD_GRAPH_MAX_ISSUES, &g->n_issues_dropped,
                        &w[k].g.issues[i]) != VD_OK)
        return VD_OOM(c->d);
    g->n_issues_dropped += w[k].g.n_issues_dropped;
    w[k].c.cap_values = *nv; /* reused: the walk's value base */
    *nv += w[k].g.n_values;
  }
  return VD_OK;
}

/* Walk k's values move down from vals + (its operand base) to its value base: in walk order, a
 * move never overwrites values still to move. */
static vd_rc compact_values(bctx *c, const walk_t *w, size_t nwalk) {
  vd_graph_t *g = c->g;
  for (size_t k = 0; k < nwalk; k++)
    if (w[k].g.n_values && w[k].g.values != g->values + w[k].c.cap_values)
      memmove(g->values + w[k].c.cap_values, w[k].g.values, w[k].g.n_values * sizeof(*g->values));
  /* Back to prepare's size: the walks' slices past it held no value now, and
   * shrinking returns their pages.  (A failed realloc, which only the
   * fault-injection tests make happen, is reported like any other.) */
  vd_value_t *shrunk = vd_realloc_array(g->values, c->cap_values, sizeof(*g->values));
  if (!shrunk) return VD_OOM(c->d);
  g->values = shrunk;
  return VD_OK;
}

/* Every value index a walk wrote (its operands, its instances' first and last values) shifted by
 * the walk's value base; t_off (R + 1, zero) and *t_by_rank (taken by the caller) list the
 * tensors by rank. */
static vd_rc shift_walk_indices(bctx *c, const walk_t *w, size_t nw, int nt, const uint64_t *base,
                                uint32_t *t_off, uint32_t **t_by_rank_out) {
  const vd_plan_t *p = c->p;
  vd_graph_t *g = c->g;
  uint32_t *t_by_rank = vd_malloc((p->n_tensors ? p->n_tensors : 1) * sizeof(*t_by_rank));
  *t_by_rank_out = t_by_rank;
  if (!t_by_rank) return VD_OOM(c->d);
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
  return VD_OK;
}

/* The totals of all walks, collective instances numbered, placeholders dropped. */
static void finish_graph(bctx *c, size_t nw, const uint64_t *base, size_t nv) {
  vd_graph_t *g = c->g;
  g->n_values = nv;
  c->n_ex = (size_t)base[3 * nw];
  g->n_idx = (size_t)base[3 * nw + 1];
  c->n_ce = (size_t)base[3 * nw + 2];
  number_colls(c);
  /* Placeholders never count as an instance's value. */
  for (size_t i = 0; i < g->n_inst; i++)
    if (g->inst_first[i] < 0) g->inst_last[i] = -1;
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
vd_rc vd_graph_i_execute(bctx *c) {
  size_t nw = (size_t)c->D * (size_t)c->R;
  walk_t *w = vd_calloc(nw, sizeof(*w));
  uint64_t *base = vd_malloc((nw + 1) * 3 * sizeof(*base)); /* ex, ops, ce */
  uint32_t *t_off = vd_calloc((size_t)c->R + 1, sizeof(*t_off)), *t_by_rank = NULL;
  size_t nwalk = 1, nv = 0;
  vd_rc rc = VD_OK;
  if (!w || !base || !t_off) {
    rc = VD_OOM(c->d);
    goto done;
  }
  walk_bases(c, nw, base);
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if ((rc = run_walks(c, w, nw, nt, base, &nwalk)) != VD_OK) goto done;
  if ((rc = gather_walks(c, w, nwalk, &nv)) != VD_OK) goto done;
  assert(nv <= c->cap_values);
  if (nwalk > 1) {
    if ((rc = compact_values(c, w, nwalk)) != VD_OK) goto done;
    if ((rc = shift_walk_indices(c, w, nw, nt, base, t_off, &t_by_rank)) != VD_OK) goto done;
  }
  finish_graph(c, nw, base, nv);
done:
  if (w)
    for (size_t k = 0; k < nw; k++) vd_free(w[k].g.issues);
  vd_free(w);
  vd_free(base);
  vd_free(t_off);
  vd_free(t_by_rank);
  return rc;
}
