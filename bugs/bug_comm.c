/*
 * bugs/bug_comm.c - communication, rank-assignment and group bugs:
 * 1-6 (collectives replaced, removed, dropped; pipeline endpoints crossed)
 * and 18-22 (SP norm gradients, tied embeddings, reduce_scatter/all_to_all
 * replaced, wrong group, permuted all_gather order).
 *
 * A collective is edited on every participant (same coll key), so the plan
 * stays well formed: a framework bug in the code that emits a collective
 * shows up on every rank that runs it.
 */
#include <stdio.h>
#include <string.h>

#include "bug_int.h"

typedef vd_bug_pred node_pred;

#define candidates vd_bug_i_candidates

static int is_ar(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "all_reduce") && n->coll >= 0 && !n->span_replicas && n->n_group >= 2;
}

static int fwd_ar(const vd_plan_t *p, const vd_node_t *n) {
  return is_ar(p, n) && vd_bug_i_is_fwd(p, n) && n->n_in == 1 && p->tensors[vd_node_inputs(p, n)[0]].ndim >= 1;
}

/* *pred = narrow when some node meets it (the bug's documented site), else
 * wide (the same mutation where the plan has no such site). */
static vd_rc prefer(vd_bug_ctx *c, node_pred narrow, node_pred wide, node_pred *pred) {
  vd_bug_list l = {0};
  vd_rc rc = candidates(c, narrow, &l);
  *pred = l.n ? narrow : wide;
  vd_bug_i_list_free(&l);
  return rc;
}

/* Picks one candidate and lists the participants of its collective in *parts. */
static vd_rc pick_coll(vd_bug_ctx *c, node_pred pred, const char *what, vd_bug_list *parts) {
  vd_bug_list l = {0};
  vd_rc rc = candidates(c, pred, &l);
  if (rc == VD_OK && l.n == 0) rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL, "bug %d does not apply: no %s%s", c->bug, what, vd_bug_i_filters(c));
  if (rc == VD_OK) rc = vd_bug_i_coll_nodes(c->p, c->p->nodes[vd_bug_i_pick(c, &l)].coll, parts);
  vd_bug_i_list_free(&l);
  return rc;
}

/* Every participant becomes a local node with op `op` (identity). */
static vd_rc to_local(vd_bug_ctx *c, const vd_bug_list *parts, const char *op) {
  for (size_t i = 0; i < parts->n; i++) {
    VD_CHECK(vd_bug_i_set_op(c->p, parts->v[i], op));
    VD_CHECK(vd_bug_i_set_group(c->p, parts->v[i], -1, NULL, 0, 0));
    vd_bug_i_clear_attrs(c->p, parts->v[i]);
  }
  return VD_OK;
}

static vd_rc replace_coll(vd_bug_ctx *c, node_pred pred, const char *what, const char *op, const char *why) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, pred, what, &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "%s '%s' (coll %lld, %zu ranks) -> %s%s", vd_node_op(c->p, n), vd_bug_i_name(c->p, n),
                  (long long)n->coll, parts.n, op, why);
    rc = to_local(c, &parts, op);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

/* 1: forward all_reduce -> identity. */
vd_rc vd_bug_i_01(vd_bug_ctx *c) {
  return replace_coll(c, fwd_ar, "forward all_reduce over >= 2 ranks", "identity",
                      "; each rank keeps its partial sum as if it were the whole");
}

/* 2: forward all_reduce removed. */
vd_rc vd_bug_i_02(vd_bug_ctx *c) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, fwd_ar, "forward all_reduce over >= 2 ranks", &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    uint32_t out = vd_node_outputs(c->p, n)[0];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "all_reduce '%s' (coll %lld) removed on %zu ranks; its output (tensor %lld) has no producer",
                  vd_bug_i_name(c->p, n), (long long)n->coll, parts.n, (long long)c->p->tensors[out].id);
    for (size_t i = parts.n; i-- > 0;) vd_bug_i_delete_node(c->p, parts.v[i]);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

/* 3: all_reduce -> all_gather (last dim), output shape kept. */
vd_rc vd_bug_i_03(vd_bug_ctx *c) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, fwd_ar, "forward all_reduce over >= 2 ranks", &parts);
  for (size_t i = 0; rc == VD_OK && i < parts.n; i++) {
    uint32_t ni = parts.v[i];
    int64_t dim = c->p->tensors[vd_node_inputs(c->p, &c->p->nodes[ni])[0]].ndim - 1;
    if ((rc = vd_bug_i_set_op(c->p, ni, "all_gather")) != VD_OK) break;
    vd_bug_i_clear_attrs(c->p, ni);
    rc = vd_bug_i_attr_int(c->p, ni, "dim", dim);
  }
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "all_reduce '%s' (coll %lld) -> all_gather along the last dim; output shape unchanged",
                  vd_bug_i_name(c->p, n), (long long)n->coll);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

static int fwd_ag(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "all_gather") && n->coll >= 0 && vd_bug_i_is_fwd(p, n);
}

static int any_ag(const vd_plan_t *p, const vd_node_t *n) { return vd_bug_i_is(p, n, "all_gather") && n->coll >= 0; }

/* 4: all_gather -> all_reduce, output shape kept. */
vd_rc vd_bug_i_04(vd_bug_ctx *c) {
  node_pred pred;
  vd_rc rc = prefer(c, fwd_ag, any_ag, &pred);
  if (rc != VD_OK) return rc;
  vd_bug_list parts = {0};
  rc = pick_coll(c, pred, "all_gather (the plan needs sp, cp or zero)", &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "all_gather '%s' (coll %lld, %zu ranks) -> all_reduce; output shape unchanged",
                  vd_bug_i_name(c->p, n), (long long)n->coll, parts.n);
    for (size_t i = 0; i < parts.n && rc == VD_OK; i++) {
      rc = vd_bug_i_set_op(c->p, parts.v[i], "all_reduce");
      vd_bug_i_clear_attrs(c->p, parts.v[i]);
    }
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

static int bwd_enter_ar(const vd_plan_t *p, const vd_node_t *n) {
  return is_ar(p, n) && vd_bug_i_is_bwd(p, n) && vd_bug_i_ends(vd_bug_i_name(p, n), ".enter");
}

static int bwd_ar(const vd_plan_t *p, const vd_node_t *n) { return is_ar(p, n) && vd_bug_i_is_bwd(p, n); }

/* 5: the backward all_reduce of a fused identity/all_reduce adapter dropped. */
vd_rc vd_bug_i_05(vd_bug_ctx *c) {
  node_pred pred;
  vd_rc rc = prefer(c, bwd_enter_ar, bwd_ar, &pred);
  if (rc != VD_OK) return rc;
  return replace_coll(c, pred, "backward all_reduce (TP-region entry adapter)", "identity",
                      "; the adapter's backward no longer sums the input-gradient parts");
}

/* ---- 6: pipeline endpoints crossed --------------------------------------- */

static int is_send(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "send") && n->coll >= 0 && n->n_group == 2 && n->n_in == 1;
}

static int64_t recv_of(const vd_plan_t *p, int64_t key) {
  for (size_t i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].coll == key && vd_bug_i_is(p, &p->nodes[i], "recv")) return (int64_t)i;
  return -1;
}

static int same_lineage(const vd_tensor_t *a, const vd_tensor_t *b) {
  if (!a->has_lin || !b->has_lin) return 0;
  if (a->lin.full != b->lin.full || a->lin.part_k != b->lin.part_k || a->lin.part_n != b->lin.part_n) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->lin.lo[i] != b->lin.lo[i] || a->lin.hi[i] != b->lin.hi[i]) return 0;
  return 1;
}

vd_rc vd_bug_i_06(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  vd_bug_list l = {0};
  vd_rc rc = candidates(c, is_send, &l);
  if (rc != VD_OK || l.n == 0) {
    vd_bug_i_list_free(&l);
    if (rc != VD_OK) return rc;
    VD_BUG_NA(c, "bug 6 does not apply: no pipeline send%s (needs pp > 1)", vd_bug_i_filters(c));
  }
  int identical = 0;
  /* Try candidates from the seed-picked one on, and for each the TP then CP partner. */
  for (size_t t = 0; t < l.n; t++) {
    uint32_t ia = l.v[(size_t)((c->o->seed + t) % l.n)];
    const vd_node_t *sa = &p->nodes[ia];
    const int64_t axes[2][2] = {{1, p->world.tp}, {p->world.tp, p->world.cp}}; /* stride, size */
    for (int ax = 0; ax < 2; ax++) {
      int64_t stride = axes[ax][0], size = axes[ax][1];
      if (size < 2) continue;
      int64_t coord = (sa->rank / stride) % size;
      int32_t rb = (int32_t)(sa->rank + (((coord + 1) % size) - coord) * stride);
      int64_t ib = vd_bug_i_find(p, rb, "send", vd_bug_i_name(p, sa), sa->segment);
      if (ib < 0) continue;
      const vd_node_t *sb = &p->nodes[ib];
      if (same_lineage(&p->tensors[vd_node_inputs(p, sa)[0]], &p->tensors[vd_node_inputs(p, sb)[0]])) {
        identical = 1;
        continue;
      }
      int64_t ka = sa->coll, kb = sb->coll;
      int64_t qa = vd_node_group(p, sa)[1], qb = vd_node_group(p, sb)[1];
      int64_t ra_i = recv_of(p, ka), rb_i = recv_of(p, kb);
      if (ra_i < 0 || rb_i < 0) continue;
      int32_t ra = sa->rank;
      int64_t ga[2] = {ra, qb}, gb[2] = {rb, qa};
      vd_bug_i_note_node(c, sa->id);
      vd_bug_i_note_node(c, sb->id);
      vd_bug_i_note_node(c, p->nodes[ra_i].id);
      vd_bug_i_note_node(c, p->nodes[rb_i].id);
      vd_bug_i_note_rank(c, ra);
      vd_bug_i_note_rank(c, rb);
      vd_bug_i_note_rank(c, (int32_t)qa);
      vd_bug_i_note_rank(c, (int32_t)qb);
      vd_bug_i_note_layer(c, sa->layer);
      vd_bug_i_note_seg(c, sa->segment);
      vd_bug_i_what(c,
                    "send/recv '%s' crossed between %s ranks %d and %d: rank %d now sends to rank %lld and rank %d "
                    "to rank %lld",
                    vd_bug_i_name(p, sa), ax == 0 ? "TP" : "CP", ra, rb, ra, (long long)qb, rb, (long long)qa);
      /* ra -> qb under key ka; rb -> qa under key kb. */
      rc = vd_bug_i_set_group(p, ia, ka, ga, 2, 0);
      if (rc == VD_OK) rc = vd_bug_i_set_group(p, (uint32_t)rb_i, ka, ga, 2, 0);
      if (rc == VD_OK) rc = vd_bug_i_set_group(p, (uint32_t)ib, kb, gb, 2, 0);
      if (rc == VD_OK) rc = vd_bug_i_set_group(p, (uint32_t)ra_i, kb, gb, 2, 0);
      vd_bug_i_list_free(&l);
      return rc;
    }
  }
  vd_bug_i_list_free(&l);
  if (identical)
    VD_BUG_NA(c,
              "bug 6 does not apply: the TP/CP ranks at the stage boundary send identical replicas, so crossing "
              "them changes no value (use --sp or --cp)");
  VD_BUG_NA(c, "bug 6 does not apply: no pair of sends on TP or CP partner ranks%s", vd_bug_i_filters(c));
}

/* ---- 18: SP norm weight gradient not reduced over TP ---------------------- */

static int sp_norm_reducer(const vd_plan_t *p, const vd_node_t *n) {
  if (!p->world.sp || !vd_bug_i_is_reducer(p, n) || !vd_bug_i_is(p, n, "all_reduce") || n->n_group < 2) return 0;
  return strstr(p->pool + p->tensors[vd_node_inputs(p, n)[0]].name, "norm") != NULL;
}

/* Every participant reduces over its own replicas only (group [rank]). */
static vd_rc split_group(vd_bug_ctx *c, const vd_bug_list *parts) {
  int64_t next = vd_bug_i_new_coll(c->p);
  for (size_t i = 0; i < parts->n; i++) {
    vd_node_t *n = &c->p->nodes[parts->v[i]];
    int64_t g = n->rank;
    int64_t key = i == 0 ? n->coll : next++;
    VD_CHECK(vd_bug_i_set_group(c->p, parts->v[i], key, &g, 1, 1));
  }
  return VD_OK;
}

vd_rc vd_bug_i_18(vd_bug_ctx *c) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, sp_norm_reducer, "sequence-parallel norm weight gradient reducer (needs --sp)", &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "reducer '%s' (coll %lld) reduces over the DP replicas only, not over its %u TP ranks",
                  vd_bug_i_name(c->p, n), (long long)n->coll, n->n_group);
    rc = split_group(c, &parts);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

/* ---- 19: tied embedding gradient not reduced across stages ---------------- */

static int cross_stage_grad_ar(const vd_plan_t *p, const vd_node_t *n) {
  if (!vd_bug_i_is(p, n, "all_reduce") || n->coll < 0 || n->n_in != 1) return 0;
  if (p->tensors[vd_node_inputs(p, n)[0]].role != VD_ROLE_GRAD) return 0;
  const int64_t *g = vd_node_group(p, n);
  for (uint32_t i = 1; i < n->n_group; i++)
    if (vd_bug_i_stage(p, (int32_t)g[i]) != vd_bug_i_stage(p, (int32_t)g[0])) return 1;
  return 0;
}

vd_rc vd_bug_i_19(vd_bug_ctx *c) {
  vd_bug_list l = {0};
  vd_rc rc = candidates(c, cross_stage_grad_ar, &l);
  size_t n = l.n;
  vd_bug_i_list_free(&l);
  if (rc != VD_OK) return rc;
  if (n == 0)
    VD_BUG_NA(c,
              "bug 19 does not apply: no weight-gradient all_reduce between pipeline stages (tied embedding)%s; the "
              "generator must emit tied embeddings: one single-plan weight used by the embedding and the LM head, a "
              "copy on the first and on the last stage, and an all_reduce of their gradients over "
              "[first-stage rank, last-stage rank] per TP rank before the optimizer",
              vd_bug_i_filters(c));
  return replace_coll(c, cross_stage_grad_ar, "cross-stage gradient all_reduce", "identity",
                      "; the first and last stage update the tied weight with different gradients");
}

/* ---- 20: reduce_scatter -> all_reduce, all_to_all -> all_gather ------------ */

static int rs_or_a2a(const vd_plan_t *p, const vd_node_t *n) {
  if (n->coll < 0 || n->span_replicas || n->n_group < 2) return 0;
  return vd_bug_i_is(p, n, "reduce_scatter") || vd_bug_i_is(p, n, "all_to_all");
}

vd_rc vd_bug_i_20(vd_bug_ctx *c) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, rs_or_a2a, "reduce_scatter or all_to_all over >= 2 stored ranks (needs --sp or --ep)",
                       &parts);
  if (rc != VD_OK) {
    vd_bug_i_list_free(&parts);
    return rc;
  }
  const vd_node_t *n = &c->p->nodes[parts.v[0]];
  int a2a = vd_bug_i_is(c->p, n, "all_to_all");
  int64_t cdim = vd_node_attr_int(c->p, n, "concat_dim", 0);
  vd_bug_i_note_list(c, &parts);
  vd_bug_i_what(c, "%s '%s' (coll %lld) -> %s; output shape unchanged", vd_node_op(c->p, n), vd_bug_i_name(c->p, n),
                (long long)n->coll, a2a ? "all_gather" : "all_reduce");
  for (size_t i = 0; i < parts.n && rc == VD_OK; i++) {
    rc = vd_bug_i_set_op(c->p, parts.v[i], a2a ? "all_gather" : "all_reduce");
    vd_bug_i_clear_attrs(c->p, parts.v[i]);
    if (rc == VD_OK && a2a) rc = vd_bug_i_attr_int(c->p, parts.v[i], "dim", cdim);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

/* ---- 21: collective over the wrong group (the DP group) ------------------- */

static int group_shape_ok(const vd_plan_t *p, const vd_node_t *n) {
  if (n->coll < 0 || n->span_replicas || n->n_group < 2 || p->world.replicas < 2) return 0;
  if (!vd_bug_i_seg_per_mb(p, n->segment)) return 0;
  if (vd_bug_i_is(p, n, "all_reduce")) return 1;
  if (vd_bug_i_is(p, n, "all_gather") || vd_bug_i_is(p, n, "reduce_scatter") || vd_bug_i_is(p, n, "all_to_all"))
    return (int64_t)n->n_group == p->world.replicas; /* same group size: shapes still fit */
  return 0;
}

static int wrong_group_a2a(const vd_plan_t *p, const vd_node_t *n) {
  return group_shape_ok(p, n) && vd_bug_i_is(p, n, "all_to_all");
}

vd_rc vd_bug_i_21(vd_bug_ctx *c) {
  node_pred pred;
  vd_rc rc = prefer(c, wrong_group_a2a, group_shape_ok, &pred); /* an EP exchange first, as in docs/bugs.md */
  if (rc != VD_OK) return rc;
  vd_bug_list parts = {0};
  rc = pick_coll(c, pred, "per-microbatch collective whose group could be swapped for the DP group (needs dp > 1)",
                 &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "%s '%s' (coll %lld) runs over each rank's DP group (its %d replicas) instead of its %u-rank group",
                  vd_node_op(c->p, n), vd_bug_i_name(c->p, n), (long long)n->coll, c->p->world.replicas, n->n_group);
    rc = split_group(c, &parts);
  }
  vd_bug_i_list_free(&parts);
  return rc;
}

/* ---- 22: all_gather in a permuted group order ------------------------------ */

static int multi_ag(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "all_gather") && n->coll >= 0 && n->n_group >= 2 && n->n_group <= VD_BUG_MAX_RANKS;
}

vd_rc vd_bug_i_22(vd_bug_ctx *c) {
  vd_bug_list parts = {0};
  vd_rc rc = pick_coll(c, multi_ag, "all_gather over >= 2 stored ranks (needs --sp or --cp)", &parts);
  if (rc == VD_OK) {
    const vd_node_t *n = &c->p->nodes[parts.v[0]];
    uint32_t k = n->n_group;
    int64_t g[VD_BUG_MAX_RANKS];
    if (k > VD_BUG_MAX_RANKS) k = VD_BUG_MAX_RANKS;
    /* Rotate by one: group order no longer matches slice order (a swap for 2 ranks). */
    for (uint32_t i = 0; i < k; i++) g[i] = vd_node_group(c->p, n)[(i + 1) % k];
    vd_bug_i_note_list(c, &parts);
    vd_bug_i_what(c, "all_gather '%s' (coll %lld) concatenates in group order rotated by one (%u ranks)",
                  vd_bug_i_name(c->p, n), (long long)n->coll, k);
    for (size_t i = 0; i < parts.n && rc == VD_OK; i++) {
      const vd_node_t *m = &c->p->nodes[parts.v[i]];
      rc = vd_bug_i_set_group(c->p, parts.v[i], m->coll, g, k, m->span_replicas);
    }
  }
  vd_bug_i_list_free(&parts);
  return rc;
}
