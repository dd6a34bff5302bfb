/*
 * stages/cut.c - cuts the two graphs into stages (vd_stage_cut).
 *
 * docs/verifier.md section 2.  Two phases:
 *  1. Structural checks, all reported as vd_stage_issue (never a crash):
 *     SHAPE     every graph node's shapes against the registry's shape rule
 *               (vd_op_check with NULL data; once per plan node);
 *     DATAFLOW  a value that feeds a target without a lineage (the graph
 *               issues of Gp and Gs are the graphs' own: verifier/run.c
 *               reports them and cuts no stage while there are any);
 *     SCHEDULE  a DP reducer (collective spanning replicas) reading a version
 *               of a persistent tensor that a per-microbatch node writes
 *               again later (those microbatches' contributions are missed);
 *     ALIGNMENT a segment run with a microbatch on a rank must run exactly
 *               once for each microbatch 0..nm-1 on that rank.
 *  2. Targets and cones: one stage per slice group of every FINAL lineage
 *     (initial lineages are given, not proven).  The parallel cone walks Gp
 *     back from the target pieces over virtual values (value, replica) and
 *     stops at lineage points (hypotheses); a span-replica collective's
 *     inputs are (u, d') for every replica d'.  The single cone walks Gs back
 *     from the target's single value and stops at the single values of the
 *     hypotheses and at initial values.
 *
 * SOUNDNESS: a parallel leaf is either a lineage point (a hypothesis that is
 * itself an initial lineage or the target of another stage) or a value
 * without lineage, kept as an unconstrained leaf (leaf_piece = -1): the
 * proof must hold for every value of it, so the stage can only fail, never
 * pass vacuously.  An unannotated one is also reported as DATAFLOW.  Single
 * leaves are free symbols (stronger than needed).
 *
 * Stage layout (stage.h): single nodes first, then parallel ones, each in
 * the graph's topological order (parallel: by (topo position, replica),
 * which respects every virtual edge because a virtual node's producers are
 * graph nodes earlier in Gp's order).  Values: single leaves by value index,
 * single node outputs in node order, parallel leaves by (value, replica),
 * parallel node outputs in node order.  For a span-replica node the inputs
 * and outputs are replica-major: for each replica, the merged node's list.
 *
 * Files: cut_check.c (phase 1), cut_cone.c and cut_stage.c (phase 2),
 * cut_mb.c (microbatch classes), cut_sum.c (sums by part); this file the
 * driver over every final lineage (serial, or forked over threads and
 * merged) and the public API; cut_int.h what they share.
 *
 * Not here: shape reduction (shape.c), canonical forms (canon.c).
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

/* The end of the slice group that starts at piece a of a lineage whose
 * pieces end at e: the pieces after a of the same slice (nd dimensions),
 * part count and factor. */
static size_t slice_group_end(const vd_lin_table *lt, size_t a, size_t e, int32_t nd) {
  size_t b = a + 1;
  const vd_lin_piece *p = &lt->pieces[a];
  while (b < e && lt->pieces[b].part_n == p->part_n && lt->pieces[b].f == p->f &&
         !memcmp(lt->pieces[b].lo, p->lo, (size_t)nd * sizeof(int64_t)) &&
         !memcmp(lt->pieces[b].hi, p->hi, (size_t)nd * sizeof(int64_t)))
    b++;
  return b;
}

static vd_rc prepare_groups(cctx *c) {
  const vd_lin_table *lt = c->lt;
  c->grp = vd_malloc((lt->n_pieces ? lt->n_pieces : 1) * sizeof(*c->grp));
  c->done = vd_calloc(lt->n_pieces ? lt->n_pieces : 1, 1);
  if (!c->grp || !c->done) return VD_OOM(c->d);
  for (uint32_t li = 0; li < lt->n_lins; li++) {
    const vd_lineage *L = &lt->lins[li];
    int32_t nd = c->sp->tensors[L->stensor].ndim;
    size_t e = L->piece_off + L->n_pieces;
    for (size_t a = L->piece_off; a < e;) {
      size_t b = slice_group_end(lt, a, e, nd);
      for (size_t i = a; i < b; i++) c->grp[i] = (uint32_t)a;
      a = b;
    }
  }
  if (!c->mb_ok) return VD_OK;
  size_t n = c->pp->n_nodes * (size_t)c->nm;
  c->inst = vd_malloc((n ? n : 1) * sizeof(*c->inst));
  if (!c->inst) return VD_OOM(c->d);
  for (size_t i = 0; i < n; i++) c->inst[i] = NONE;
  for (size_t ni = 0; ni < c->gp->n_nodes; ni++) {
    const vd_gnode_t *gn = &c->gp->nodes[ni];
    if (gn->mb < 0 || (uint32_t)gn->mb >= c->nm || gn->replica != 0) continue;
    uint32_t *slot = &c->inst[(size_t)gn->pnode * c->nm + (uint32_t)gn->mb];
    /* two instances of one plan node in one microbatch: not a translation */
    *slot = *slot == NONE ? (uint32_t)ni : NONE - 1;
  }
  for (size_t i = 0; i < n; i++)
    if (c->inst[i] == NONE - 1) c->inst[i] = NONE;
  return VD_OK;
}

/* The final lineage li: every slice group not covered yet, cut into c->set. */
static vd_rc cut_lineage(cctx *c, uint32_t li) {
  const vd_lin_table *lt = c->lt;
  const vd_lineage *L = &lt->lins[li];
  int32_t nd = c->sp->tensors[L->stensor].ndim;
  size_t e = L->piece_off + L->n_pieces;
  for (size_t a = L->piece_off; a < e;) {
    size_t b = slice_group_end(lt, a, e, nd);
    if (!c->done[a]) {
      size_t s0 = c->set->n_stages;
      int sum = 0;
      c->done[a] = 1;
      VD_CHECK(vd_stage_i_cut_sum_group(c, li, a, b, &sum));
      if (!sum) {
        VD_CHECK(vd_stage_i_cut_group(c, li, a, b));
        VD_CHECK(vd_stage_i_mb_family(c, a, b, s0));
      }
    }
    a = b;
  }
  return VD_OK;
}

/* Per-thread copy of the context: shares the read-only tables and `done`
 * (whose marks stay inside one lineage: a group covers only groups of its
 * own lineage), owns its cones, scratch and "no lineage" marks. */
static vd_rc ctx_fork(const cctx *c, cctx *t) {
  *t = *c;
  t->pc = t->sc = (cone_t){0};
  t->stack = NULL;
  t->n_stack = t->cap_stack = 0;
  t->mp = NULL;
  t->mr = NULL;
  t->n_mem = t->cap_mem = t->cap_mr = 0;
  t->tp = NULL;
  t->cap_tp = 0;
  t->nolin_log = NULL;
  t->n_nolin_log = t->cap_nolin_log = 0;
  t->iss_val = NULL;
  t->cap_iss_val = 0;
  t->set = NULL;
  t->cap_stages = 0;
  t->nolin = vd_calloc(c->gp->n_values ? c->gp->n_values : 1, 1);
  return t->nolin ? VD_OK : VD_ERR(c->d, VD_ENOMEM, NULL, "stages", "cut", "out of memory");
}

static void ctx_unfork(cctx *t) {
  VD_FREE_ALL(t->stack, t->mp, t->mr, t->tp, t->nolin_log, t->iss_val, t->nolin);
  vd_stage_i_cone_free(&t->pc);
  vd_stage_i_cone_free(&t->sc);
}

/* One lineage's stages and issues, cut by some thread. */
typedef struct {
  vd_stage_set set;
  uint32_t *iss_val;
  vd_rc rc;
  vd_diag d;
} lcut_t;

/* Appends a lineage's stages (renumbered) and issues to the set, keeping the
 * first "no lineage" issue per value, and hands the stages to the hook. */
static vd_rc merge_lineage(cctx *c, lcut_t *r, uint8_t *reported) {
  vd_stage_set *set = c->set;
  for (size_t i = 0; i < r->set.n_issues; i++) {
    uint32_t v = r->iss_val ? r->iss_val[i] : NONE;
    if (v != NONE) {
      if (reported[v]) continue;
      reported[v] = 1;
    }
    if (vd_issue_push(&set->issues, &set->n_issues, &set->cap_issues, 0, &set->n_issues_dropped, &r->set.issues[i]))
      return VD_OOM(c->d);
  }
  size_t s0 = set->n_stages;
  if (r->set.n_stages && VD_GROW(set->stages, c->cap_stages, set->n_stages + r->set.n_stages)) return VD_OOM(c->d);
  for (size_t i = 0; i < r->set.n_stages; i++) {
    set->stages[set->n_stages] = r->set.stages[i];
    set->stages[set->n_stages].id = (uint32_t)set->n_stages;
    set->n_stages++;
  }
  r->set.n_stages = 0; /* the stages moved */
  for (size_t k = s0; c->hook && k < set->n_stages; k++) VD_CHECK(c->hook(c->hook_ctx, set, k, c->d));
  return VD_OK;
}

/* Cuts every final lineage.  Lineages are independent (a stage's members,
 * the groups it stands for and its cone bookkeeping are its lineage's), so
 * windows of them are cut in parallel (OpenMP, the caller's team), each
 * into a set of its own, and merged in lineage order: stage ids, issues
 * and the hook's order are those of a serial cut at any thread count. */
#define CUT_WINDOW 64u
static vd_rc cut_all(cctx *c) {
  const vd_lin_table *lt = c->lt;
  vd_rc rc = VD_OK;
  uint32_t *fin = vd_malloc((lt->n_lins ? lt->n_lins : 1) * sizeof(*fin));
  uint8_t *reported = vd_calloc(c->gp->n_values ? c->gp->n_values : 1, 1);
  lcut_t *res = vd_calloc(CUT_WINDOW, sizeof(*res));
  int nt = omp_get_max_threads();
  if (nt < 1) nt = 1;
  cctx *tc = vd_calloc((size_t)nt, sizeof(*tc));
  int forked = 0;
  if (!fin || !reported || !res || !tc) {
    rc = VD_OOM(c->d);
    goto done;
  }
  size_t nf = 0;
  for (uint32_t li = 0; li < lt->n_lins; li++)
    if (!lt->lins[li].initial) fin[nf++] = li;
  for (int i = 0; i < nt && rc == VD_OK; i++) {
    rc = ctx_fork(c, &tc[i]);
    forked = i + 1;
  }
  for (size_t w0 = 0; w0 < nf && rc == VD_OK; w0 += CUT_WINDOW) {
    size_t nw = nf - w0 < CUT_WINDOW ? nf - w0 : CUT_WINDOW;
    /* a stop request (common/ctl.h) ends the cut between windows */
    if (vd_ctl_stopped()) {
      rc = VD_ERR(c->d, VD_ECANCELED, NULL, NULL, NULL, "stage cutting interrupted");
      break;
    }
    vd_ctl_add(VD_CTL_CUT_LINEAGES, nw);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (size_t j = 0; j < nw; j++) {
      cctx *t = &tc[omp_get_thread_num()];
      lcut_t *r = &res[j];
      memset(r, 0, sizeof(*r));
      vd_diag_clear(&r->d);
      t->set = &r->set;
      t->cap_stages = 0;
      t->d = &r->d;
      r->rc = cut_lineage(t, fin[w0 + j]);
      r->iss_val = t->iss_val; /* this lineage's tags (the thread starts a new list) */
      t->iss_val = NULL;
      t->cap_iss_val = 0;
    }
    for (size_t j = 0; j < nw; j++) {
      lcut_t *r = &res[j];
      if (rc == VD_OK && r->rc != VD_OK) {
        rc = r->rc;
        if (c->d) *c->d = r->d;
      }
      if (rc == VD_OK) rc = merge_lineage(c, r, reported);
      vd_stage_set_free(&r->set);
      vd_free(r->iss_val);
      r->iss_val = NULL;
    }
  }
done:
  for (int i = 0; i < forked; i++) ctx_unfork(&tc[i]);
  VD_FREE_ALL(tc, res, reported, fin);
  return rc;
}

/* ---- public --------------------------------------------------------------- */

static vd_rc prepare(cctx *c) {
  const vd_graph_t *gs = c->gs, *gp = c->gp;
  c->sop = vd_malloc((c->sp->n_nodes ? c->sp->n_nodes : 1) * sizeof(int));
  c->pop = vd_malloc((c->pp->n_nodes ? c->pp->n_nodes : 1) * sizeof(int));
  c->spos = vd_malloc((gs->n_nodes ? gs->n_nodes : 1) * sizeof(uint32_t));
  c->ppos = vd_malloc((gp->n_nodes ? gp->n_nodes : 1) * sizeof(uint32_t));
  c->nolin = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  if (!c->sop || !c->pop || !c->spos || !c->ppos || !c->nolin) return VD_OOM(c->d);
  for (size_t i = 0; i < c->sp->n_nodes; i++) c->sop[i] = vd_op_lookup(nop(c->sp, (uint32_t)i));
  for (size_t i = 0; i < c->pp->n_nodes; i++) c->pop[i] = vd_op_lookup(nop(c->pp, (uint32_t)i));
  for (size_t i = 0; i < gs->n_nodes; i++) c->spos[gs->topo[i]] = (uint32_t)i;
  for (size_t i = 0; i < gp->n_nodes; i++) c->ppos[gp->topo[i]] = (uint32_t)i;
  return VD_OK;
}

static void ctx_init(cctx *c, const vd_lin_table *lt, vd_stage_set *set, vd_diag *d) {
  memset(c, 0, sizeof(*c));
  c->lt = lt;
  c->set = set;
  c->d = d;
  c->gs = lt->gs;
  c->gp = lt->gp;
  c->sp = c->gs->plan;
  c->pp = c->gp->plan;
  c->D = c->pp->world.replicas > 0 ? (uint32_t)c->pp->world.replicas : 1;
}

/* The shared tables, then what each forked context owns too. */
static void ctx_free(cctx *c) {
  VD_FREE_ALL(c->sop, c->pop, c->spos, c->ppos, c->inst, c->grp, c->done);
  ctx_unfork(c);
}

vd_rc vd_stage_cut_hook(const vd_lin_table *lt, vd_stage_set *set, vd_stage_hook hook, void *hook_ctx, vd_diag *d) {
  memset(set, 0, sizeof(*set));
  if (VD_NEVER(!lt || !lt->gs || !lt->gp || !lt->gp->topo || !lt->gs->topo))
    return VD_ERR(d, VD_EINTERNAL, NULL, "stages", "lineage", "expected a built lineage table");
  cctx c;
  ctx_init(&c, lt, set, d);
  c.hook = hook;
  c.hook_ctx = hook_ctx;
  vd_rc rc = prepare(&c);
  if (!rc) rc = vd_stage_i_check_shapes(&c, c.gs, c.sop, 1);
  if (!rc) rc = vd_stage_i_check_shapes(&c, c.gp, c.pop, 0);
  if (!rc) rc = vd_stage_i_check_schedule(&c);
  if (!rc) rc = vd_stage_i_check_alignment(&c);
  if (!rc) {
    /* Microbatch classes are formed only when every per-microbatch segment
     * runs once per microbatch (or its variants do together); with an
     * ALIGNMENT issue every stage is cut. */
    c.nm = c.pp->world.nm > 1 ? (uint32_t)c.pp->world.nm : 1;
    c.mb_ok = c.nm > 1;
    for (size_t i = 0; i < set->n_issues; i++)
      if (set->issues[i].kind == VD_SISSUE_ALIGNMENT) c.mb_ok = 0;
    rc = prepare_groups(&c);
  }
  if (!rc) rc = cut_all(&c);
  ctx_free(&c);
  if (rc) {
    vd_stage_set_free(set);
    return rc;
  }
  if (set->n_issues > 1) qsort(set->issues, set->n_issues, sizeof(*set->issues), vd_stage_i_issue_cmp);
  return VD_OK;
}

vd_rc vd_stage_cut(const vd_lin_table *lt, vd_stage_set *set, vd_diag *d) {
  return vd_stage_cut_hook(lt, set, NULL, NULL, d);
}

void vd_stage_compact(vd_stage *st) {
  if (st->compact || st->n_targets != 1) return;
  vd_stage_target *tg = &st->targets[0];
  /* keep the target's (piece, value) pairs at the front of idx */
  memmove(st->idx, st->idx + tg->piece_off, (size_t)tg->n_pieces * 2 * sizeof(*st->idx));
  uint32_t *ni = vd_realloc_array(st->idx, (size_t)tg->n_pieces * 2 + 1, sizeof(*ni));
  if (ni) st->idx = ni;
  tg->piece_off = 0;
  st->n_idx = tg->n_pieces * 2;
  VD_DROP(st->vals);
  VD_DROP(st->nodes);
  VD_DROP(st->ovr);
  st->n_vals = st->n_nodes = st->n_ovr = 0;
  st->compact = 1;
}

vd_rc vd_stage_recut(const vd_lin_table *lt, vd_stage_set *set, size_t i, vd_diag *d) {
  vd_stage *st = &set->stages[i];
  if (!st->compact) return VD_OK;
  vd_stage_set tmp;
  memset(&tmp, 0, sizeof(tmp));
  cctx c;
  ctx_init(&c, lt, &tmp, d);
  int64_t sid = -1;
  vd_rc rc = prepare(&c);
  if (!rc && st->cut_mode == -3) { /* one part of a sum by part: its pieces in every replica they name */
    for (size_t k = st->cut_a; k < st->cut_b && !rc; k++) {
      const vd_lin_piece *p = &lt->pieces[k];
      if (p->part_k != st->cut_part) continue;
      for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? c.D : (uint32_t)p->replica + 1) && !rc;
           r++)
        rc = vd_stage_i_add_member(&c, (uint32_t)k, (int32_t)r);
    }
  } else if (!rc) {
    rc = vd_stage_i_group_members(&c, st->cut_a, st->cut_b, st->cut_mode);
  }
  if (!rc) rc = vd_stage_i_cut_target(&c, st->cut_lin, &sid);
  if (!rc && sid != 0)
    rc = VD_ERR(d, VD_EINTERNAL, NULL, "stage", "recut", "stage %u could not be cut again", st->id);
  if (!rc) {
    tmp.stages[0].sum_mode = st->sum_mode;
    rc = vd_stage_window(lt, &tmp.stages[0], d);
  }
  if (!rc && st->sum_mode && !tmp.stages[0].sum_ok)
    rc = VD_ERR(d, VD_EINTERNAL, NULL, "stage", "recut", "stage %u: the sum by part did not window again", st->id);
  if (!rc) {
    vd_stage *n = &tmp.stages[0];
    if (st->sum_mode) n->targets[0].part_n = 1;
    n->sum_parts = st->sum_parts;
    n->cut_part = st->cut_part;
    n->id = st->id;
    n->n_rep = st->n_rep;
    n->n_mb = st->n_mb;
    n->mb_list = st->mb_list;
    st->mb_list = NULL;
    n->canon_hash = st->canon_hash;
    n->canon_class = st->canon_class;
    n->cut_lin = st->cut_lin;
    n->cut_a = st->cut_a;
    n->cut_b = st->cut_b;
    n->cut_mode = st->cut_mode;
    vd_stage_free(st);
    *st = *n;
    memset(n, 0, sizeof(*n));
  }
  ctx_free(&c);
  vd_stage_set_free(&tmp);
  return rc;
}
