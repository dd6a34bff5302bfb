/*
 * bugs/bug_train.c - training-loop bugs: the gradient reducer scheduled too
 * early (14), reducer and accumulation scaling (15, 16), loss normalization
 * (17), grad-norm clipping without the cross-rank reduction (23) and ZeRO
 * shard bugs (24).
 *
 * DP gradient reducers are recognised structurally (vd_bug_i_is_reducer):
 * a collective spanning replicas, in a segment that runs once, reducing a
 * gradient.  The generators fold the loss-consistent scale into the loss
 * (1 / global tokens), so a correct reducer is a plain sum; bugs 15-17 add
 * the factors real frameworks get wrong.
 */
#include <stdio.h>
#include <string.h>

#include "bug_int.h"

static int reducer(const vd_plan_t *p, const vd_node_t *n) { return vd_bug_i_is_reducer(p, n); }

/* Candidates into *l; on failure (none, or ENOMEM) *l is freed. */
static vd_rc need(vd_bug_ctx *c, vd_bug_pred pred, const char *what, vd_bug_list *l) {
  vd_rc rc = vd_bug_i_candidates(c, pred, l);
  if (rc == VD_OK && l->n == 0)
    rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL, "bug %d does not apply: no %s%s", c->bug, what, vd_bug_i_filters(c));
  if (rc != VD_OK) vd_bug_i_list_free(l);
  return rc;
}

/* Inserts, right after node index at, an in-place `scale(t) -> (t)` with
 * factor f, in at's segment and phase `ph`; returns its index in *idx. */
static vd_rc insert_scale_after(vd_plan_t *p, uint32_t at, uint32_t t, double f, vd_phase ph, const char *sfx,
                                uint32_t *idx) {
  vd_node_t tmpl = p->nodes[at];
  tmpl.phase = ph;
  char nm[256];
  snprintf(nm, sizeof(nm), "%s%s", vd_bug_i_name(p, &p->nodes[at]), sfx);
  uint32_t k;
  VD_CHECK(vd_bug_i_add_node(p, &tmpl, "scale", nm, &t, 1, &t, 1, &k));
  VD_CHECK(vd_plan_attr_float(p, k, "factor", f));
  vd_bug_i_move_last(p, at + 1);
  *idx = at + 1;
  return VD_OK;
}

/* ---- 14: reducer before the last microbatch's backward -------------------- */

/* The per-microbatch segment that accumulates tensor ti on rank r; -1 if none. */
static int32_t accum_segment(const vd_plan_t *p, int32_t r, uint32_t ti) {
  for (size_t i = p->n_nodes; i-- > 0;) {
    const vd_node_t *n = &p->nodes[i];
    if (n->rank != r || !vd_bug_i_seg_per_mb(p, n->segment)) continue;
    const uint32_t *o = vd_node_outputs(p, n);
    for (uint32_t k = 0; k < n->n_out; k++)
      if (o[k] == ti) return n->segment;
  }
  return -1;
}

vd_rc vd_bug_i_14(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0}, parts = {0};
  vd_rc rc = need(c, reducer, "DP gradient reducer (a collective spanning replicas; needs dp > 1)", &l);
  if (rc == VD_OK) rc = vd_bug_i_coll_nodes(p, p->nodes[vd_bug_i_pick(c, &l)].coll, &parts);
  int32_t mb = c->o->mb >= 0 ? c->o->mb : p->world.nm - 1;
  int32_t seg = -1;
  for (size_t i = 0; rc == VD_OK && i < parts.n; i++) {
    vd_node_t *n = &p->nodes[parts.v[i]];
    int32_t bseg = accum_segment(p, n->rank, vd_node_inputs(p, n)[0]);
    const vd_program_t *pr = &p->programs[n->rank];
    uint32_t pos = pr->n_steps;
    for (uint32_t s = 0; s < pr->n_steps && bseg >= 0; s++)
      if (p->steps[pr->step_off + s].segment == bseg && p->steps[pr->step_off + s].mb == mb) {
        pos = s;
        break;
      }
    if (bseg < 0 || pos == pr->n_steps) {
      rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL,
                  "bug 14 does not apply: reducer '%s' on rank %d: no per-microbatch accumulation of its input "
                  "run at microbatch %d",
                  vd_bug_i_name(p, n), n->rank, mb);
      break;
    }
    if (seg < 0) {
      char nm[256];
      snprintf(nm, sizeof(nm), "%s.reduce_early.%lld", vd_bug_i_seg_name(p, n->segment), (long long)n->coll);
      if ((rc = vd_plan_add_segment(p, nm, &seg)) != VD_OK) break;
      n = &p->nodes[parts.v[i]];
      vd_bug_i_what(c, "reducer '%s' (coll %lld) moved to its own segment '%s', run before microbatch %d's backward",
                    vd_bug_i_name(p, n), (long long)n->coll, nm, mb);
    }
    n->segment = seg;
    vd_bug_i_note_site(c, parts.v[i]);
    rc = vd_bug_i_insert_step(p, n->rank, pos, seg, -1);
  }
  c->r->mb = mb;
  vd_bug_i_list_free(&l);
  vd_bug_i_list_free(&parts);
  return rc;
}

/* ---- 15: reducer averages / divides by the wrong group size --------------- */

vd_rc vd_bug_i_15(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0};
  VD_CHECK(need(c, reducer, "DP gradient reducer (needs dp > 1)", &l));
  const vd_world_t *w = &p->world;
  int variant = (int)(c->o->seed % 3);
  if (variant == 1 && w->cp < 2) variant = 0;
  if (variant == 2 && w->tp < 2) variant = 0;
  double div = variant == 0 ? w->replicas : variant == 1 ? (double)w->replicas * w->cp : w->tp;
  const char *why = variant == 0 ? "averages over the dp replicas" : variant == 1 ? "divides by dp * cp"
                                                                                  : "divides by the tp size";
  if (div <= 1) {
    vd_bug_i_list_free(&l);
    VD_BUG_NA(c, "bug 15 does not apply: the reducer's group size is 1 (needs dp > 1)");
  }
  vd_rc rc = VD_OK;
  for (size_t i = l.n; i-- > 0 && rc == VD_OK;) {
    uint32_t at = l.v[i], k;
    vd_bug_i_note_site(c, at);
    rc = insert_scale_after(p, at, vd_node_outputs(p, &p->nodes[at])[0], 1.0 / div, VD_PHASE_OPT, ".average", &k);
    if (rc == VD_OK) vd_bug_i_note_site(c, k);
  }
  vd_bug_i_what(c, "%zu DP gradient reducer(s) %s: reduced gradient scaled by 1/%g", l.n, why, div);
  vd_bug_i_list_free(&l);
  return rc;
}

/* ---- 16: accumulation rescales at every microbatch ------------------------- */

static int mb_accumulate(const vd_plan_t *p, const vd_node_t *n) {
  if (!vd_bug_i_is(p, n, "accumulate") || n->n_in != 2 || n->n_out != 1) return 0;
  if (!vd_bug_i_seg_per_mb(p, n->segment)) return 0;
  const vd_tensor_t *t = &p->tensors[vd_node_inputs(p, n)[0]];
  return t->role == VD_ROLE_GRAD && t->scope == VD_SCOPE_PERSISTENT;
}

vd_rc vd_bug_i_16(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  if (p->world.nm < 2) VD_BUG_NA(c, "bug 16 does not apply: one microbatch (needs nm > 1)");
  vd_bug_list l = {0};
  VD_CHECK(need(c, mb_accumulate, "per-microbatch gradient accumulation", &l));
  vd_rc rc = VD_OK;
  for (size_t i = l.n; i-- > 0 && rc == VD_OK;) {
    uint32_t at = l.v[i], k;
    vd_bug_i_note_site(c, at);
    rc = insert_scale_after(p, at, vd_node_inputs(p, &p->nodes[at])[0], 1.0 / p->world.nm, VD_PHASE_BWD, ".rescale",
                            &k);
    if (rc == VD_OK) vd_bug_i_note_site(c, k);
  }
  vd_bug_i_what(c, "%zu gradient accumulator(s) divided by nm = %d after every microbatch's accumulation", l.n,
                p->world.nm);
  vd_bug_i_list_free(&l);
  return rc;
}

/* ---- 17: loss normalized by the local token count --------------------------- */

static int loss_scale(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "scale") && vd_bug_i_is_fwd(p, n) && strcmp(vd_bug_i_name(p, n), "loss") == 0;
}

/* --loss-mask plans (gen/llama3.c): loss = ce.sum * pow(count, -1)
 * with count all-reduced once, before the microbatches, from each rank's
 * local sum(mask). */
static int count_inv(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "pow") && vd_bug_i_is_fwd(p, n) && n->n_in == 1 &&
         strcmp(vd_bug_i_name(p, n), "loss.count.inv") == 0;
}

/* Masked loss: the rank divides by its local count sum(mask), i.e. the
 * reciprocal reads the count all_reduce's input instead of its output. */
static vd_rc bug17_masked(vd_bug_ctx *c, vd_bug_list *l) {
  vd_plan_t *p = c->p;
  vd_rc rc = VD_OK;
  size_t done = 0;
  for (size_t i = 0; i < l->n && rc == VD_OK; i++) {
    uint32_t at = l->v[i];
    uint32_t cnt = vd_node_inputs(p, &p->nodes[at])[0];
    int64_t ar = vd_bug_i_producer(p, cnt, -1);
    if (ar < 0 || !vd_bug_i_is(p, &p->nodes[ar], "all_reduce") || p->nodes[ar].n_in != 1) continue;
    uint32_t loc = vd_node_inputs(p, &p->nodes[ar])[0];
    vd_bug_i_note_site(c, at);
    rc = vd_bug_i_set_refs(p, at, 0, &loc, 1);
    done++;
  }
  if (rc == VD_OK && done == 0)
    VD_BUG_NA(c, "bug 17 does not apply: the token count is not all-reduced (every rank holds all tokens; needs dp, "
                 "ep or cp > 1)%s",
              vd_bug_i_filters(c));
  if (rc == VD_OK)
    vd_bug_i_what(c, "masked loss on %zu rank(s) divided by the rank's local token count sum(mask) instead of the "
                     "all-reduced global count",
                  done);
  return rc;
}

vd_rc vd_bug_i_17(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  {
    vd_bug_list m = {0};
    VD_CHECK(vd_bug_i_candidates(c, count_inv, &m));
    if (m.n) {
      vd_rc rc = bug17_masked(c, &m);
      vd_bug_i_list_free(&m);
      return rc;
    }
    vd_bug_i_list_free(&m);
  }
  const vd_world_t *w = &p->world;
  int64_t shards = (int64_t)w->dp * w->ep * w->nm * w->cp;
  if (shards < 2)
    VD_BUG_NA(c, "bug 17 does not apply: every rank holds all tokens (needs dp, ep, cp or nm > 1)");
  vd_bug_list l = {0};
  VD_CHECK(need(c, loss_scale, "loss normalization (a forward 'scale' node named 'loss')", &l));
  vd_rc rc = VD_OK;
  double f = 0, g = 0;
  for (size_t i = 0; i < l.n && rc == VD_OK; i++) {
    uint32_t at = l.v[i];
    f = vd_node_attr_float(p, &p->nodes[at], "factor", 1.0);
    g = f * (double)shards;
    vd_bug_i_note_site(c, at);
    rc = vd_bug_i_attr_float(p, at, "factor", g);
    int64_t b = vd_bug_i_find(p, p->nodes[at].rank, "scale_backward", "loss", -1);
    if (rc == VD_OK && b >= 0) {
      vd_bug_i_note_site(c, (uint32_t)b);
      rc = vd_bug_i_attr_float(p, (uint32_t)b, "factor", g);
    }
  }
  vd_bug_i_what(c,
                "loss on %zu rank(s) scaled by 1/%g (local tokens of one rank and microbatch) instead of 1/%g "
                "(global tokens): factor %lld",
                l.n, 1.0 / g, 1.0 / f, (long long)shards);
  vd_bug_i_list_free(&l);
  return rc;
}

/* ---- 23: grad norm without the cross-rank reduction ----------------------- */

static int norm_ar(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "all_reduce") && n->coll >= 0 && n->n_in == 1 && !vd_bug_i_seg_per_mb(p, n->segment) &&
         p->tensors[vd_node_inputs(p, n)[0]].ndim == 0;
}

vd_rc vd_bug_i_23(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0}, parts = {0};
  vd_rc rc = need(c, norm_ar, "all_reduce of a squared grad norm (needs --grad-clip)", &l);
  if (rc == VD_OK) rc = vd_bug_i_coll_nodes(p, p->nodes[vd_bug_i_pick(c, &l)].coll, &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &p->nodes[parts.v[0]];
    vd_bug_i_what(c, "grad-norm all_reduce '%s' (coll %lld, %u ranks%s) -> identity: each rank clips with its local norm",
                  vd_bug_i_name(p, n), (long long)n->coll, n->n_group, n->span_replicas ? " x replicas" : "");
    for (size_t i = 0; i < parts.n && rc == VD_OK; i++) {
      vd_bug_i_note_site(c, parts.v[i]);
      rc = vd_bug_i_set_op(p, parts.v[i], "identity");
      if (rc == VD_OK) rc = vd_bug_i_set_group(p, parts.v[i], -1, NULL, 0, 0);
      vd_bug_i_clear_attrs(p, parts.v[i]);
    }
  }
  vd_bug_i_list_free(&l);
  vd_bug_i_list_free(&parts);
  return rc;
}

/* ---- 24: ZeRO shards ----------------------------------------------------------- */

static int zero_gather(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "all_gather") && n->coll >= 0 && n->span_replicas && n->n_in == 1 &&
         !vd_bug_i_seg_per_mb(p, n->segment) && p->tensors[vd_node_inputs(p, n)[0]].role == VD_ROLE_WEIGHT;
}

static int zero_rs(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is_reducer(p, n) && vd_bug_i_is(p, n, "reduce_scatter") && n->n_group == 1 &&
         p->world.replicas > 1;
}

/* The all_gather after the update is missing: the full parameter keeps its
 * stale value (the copy from the gathered buffer goes too). */
static vd_rc zero_missing_gather(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0}, parts = {0}, del = {0};
  vd_rc rc = need(c, zero_gather, "ZeRO parameter all_gather after the update (needs --zero 1)", &l);
  if (rc == VD_OK) rc = vd_bug_i_coll_nodes(p, p->nodes[vd_bug_i_pick(c, &l)].coll, &parts);
  for (size_t i = 0; rc == VD_OK && i < parts.n; i++) {
    const vd_node_t *g = &p->nodes[parts.v[i]];
    uint32_t buf = vd_node_outputs(p, g)[0];
    if ((rc = vd_bug_i_list_push(&del, parts.v[i])) != VD_OK) break;
    /* Consumers of the gathered buffer in the segment, and what writes their destinations there. */
    for (size_t j = 0; j < p->n_nodes && rc == VD_OK; j++) {
      const vd_node_t *m = &p->nodes[j];
      if (m->rank != g->rank || m->segment != g->segment) continue;
      int reads = 0;
      for (uint32_t k = 0; k < m->n_in; k++) reads |= vd_node_inputs(p, m)[k] == buf;
      if (!reads) continue;
      for (size_t q = 0; q < p->n_nodes && rc == VD_OK; q++) {
        const vd_node_t *z = &p->nodes[q];
        if (z->rank != m->rank || z->segment != m->segment || strcmp(vd_bug_i_name(p, z), vd_bug_i_name(p, m)) != 0)
          continue;
        rc = vd_bug_i_list_push(&del, (uint32_t)q);
      }
    }
  }
  if (rc == VD_OK) {
    const vd_node_t *g = &p->nodes[parts.v[0]];
    vd_bug_i_what(c, "ZeRO all_gather '%s' (coll %lld) after the update removed with the copy into the full "
                  "parameter (%zu nodes): the full parameter stays stale",
                  vd_bug_i_name(p, g), (long long)g->coll, del.n);
    /* Delete in descending index order, without duplicates. */
    for (size_t i = 0; i < del.n; i++)
      for (size_t j = i + 1; j < del.n; j++)
        if (del.v[j] > del.v[i]) {
          uint32_t t = del.v[i];
          del.v[i] = del.v[j];
          del.v[j] = t;
        }
    for (size_t i = 0; i < del.n; i++) {
      if (i && del.v[i] == del.v[i - 1]) continue;
      vd_bug_i_note_site(c, del.v[i]);
      vd_bug_i_delete_node(p, del.v[i]);
    }
  }
  vd_bug_i_list_free(&l);
  vd_bug_i_list_free(&parts);
  vd_bug_i_list_free(&del);
  return rc;
}

/* Every replica takes gradient shard 0 (a hard-coded shard index): the
 * reduce_scatter becomes an all_reduce and a chunk with index 0. */
static vd_rc zero_wrong_shard(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0};
  VD_CHECK(need(c, zero_rs, "ZeRO gradient reduce_scatter over the DP replicas (needs --zero 1, dp > 1)", &l));
  uint32_t ni = vd_bug_i_pick(c, &l);
  vd_bug_i_list_free(&l);
  vd_node_t n = p->nodes[ni];
  uint32_t gin = vd_node_inputs(p, &n)[0], gout = vd_node_outputs(p, &n)[0];
  int64_t dim = vd_node_attr_int(p, &n, "dim", 0);
  vd_tensor_t it = p->tensors[gin];
  char nm[256];
  snprintf(nm, sizeof(nm), "%s.reduced", vd_bug_i_name(p, &n));
  uint32_t full, k;
  VD_CHECK(vd_bug_i_add_tensor(p, &it, nm, it.ndim, it.shape, &full));
  VD_CHECK(vd_bug_i_set_op(p, ni, "all_reduce"));
  vd_bug_i_clear_attrs(p, ni);
  VD_CHECK(vd_bug_i_set_refs(p, ni, 1, &full, 1));
  vd_node_t tmpl = n;
  tmpl.phase = VD_PHASE_OPT;
  snprintf(nm, sizeof(nm), "%s.shard", vd_bug_i_name(p, &n));
  VD_CHECK(vd_bug_i_add_node(p, &tmpl, "chunk", nm, &full, 1, &gout, 1, &k));
  VD_CHECK(vd_plan_attr_int(p, k, "dim", dim));
  VD_CHECK(vd_plan_attr_int(p, k, "index", 0));
  VD_CHECK(vd_plan_attr_int(p, k, "chunks", (int64_t)n.n_group * p->world.replicas));
  vd_bug_i_move_last(p, ni + 1);
  vd_bug_i_note_site(c, ni);
  vd_bug_i_note_site(c, ni + 1);
  vd_bug_i_what(c, "ZeRO reducer '%s' on rank %d: every replica takes gradient shard 0 (all_reduce + chunk index 0), "
                "so replicas 1.. update shards they do not own with shard 0's gradient",
                vd_bug_i_name(p, &n), n.rank);
  return VD_OK;
}

vd_rc vd_bug_i_24(vd_bug_ctx *c) { return (c->o->seed & 1) ? zero_wrong_shard(c) : zero_missing_gather(c); }
