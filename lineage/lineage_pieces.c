/*
 * lineage/lineage_pieces.c - steps 1 to 3 of the lineage table (lineage.c):
 * the points of the annotated parallel tensors, one piece per virtual DP
 * replica each, with the single value they name, then the pieces grouped
 * into one sorted bucket per single tensor and one vd_lineage per (single
 * tensor, moment).  Validation is lineage_check.c's.
 *
 * Invariant: deterministic at any thread count: the parallel loops (writing
 * pieces, sorting buckets) each own disjoint slots of the result.
 */
#include "lineage_int.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/mem.h"
#include "../plans/idmap.h"

/* ---- step 1+2: points and pieces ---------------------------------------- */

/* The single value a lineage of single tensor s names (step 2): its initial
 * or its final version, of instance mb 0 for a per-microbatch tensor. */
int32_t vd_lin_i_single_value(const lctx *c, uint32_t s, int initial) {
  int32_t smb = c->sp->tensors[s].scope == VD_SCOPE_PER_MB ? 0 : -1;
  return initial ? vd_graph_first(c->t->gs, s, 0, smb) : vd_graph_last(c->t->gs, s, 0, smb);
}

/* 1 when annotated parallel tensor ti is a declared input that no instance
 * of it, and no instance of its single tensor s, ever holds a value: an input
 * both steps declare and neither reads.  It is left out of the comparison
 * with a warning.  SOUNDNESS: an input's points are only assumptions of the
 * proofs (nothing is claimed about its value), so leaving one out can only
 * make a proof harder.  An input one step reads and the other does not stays
 * a NO_VALUE issue: the steps then compute from different data. */
static int unread_input(const lctx *c, uint32_t ti, uint32_t s) {
  const vd_graph_t *gs = c->t->gs, *gp = c->t->gp;
  if (c->pp->tensors[ti].role != VD_ROLE_INPUT) return 0;
  for (uint32_t k = 0; k < gp->inst_per_replica[ti]; k++)
    for (int32_t d = 0; d < c->D; d++)
      if (vd_graph_first(gp, ti, d, c->pp->tensors[ti].scope == VD_SCOPE_PER_MB ? (int32_t)k : -1) >= 0) return 0;
  for (uint32_t k = 0; k < gs->inst_per_replica[s]; k++)
    if (vd_graph_first(gs, s, 0, c->sp->tensors[s].scope == VD_SCOPE_PER_MB ? (int32_t)k : -1) >= 0) return 0;
  return 1;
}

/* What the first pass learns of one parallel tensor: its single tensor (NONE
 * without one) and where its pieces go in the bucketed piece array. */
typedef struct {
  uint32_t s;
  uint32_t n; /* pieces */
  size_t off;
} tslot_t;

/* The points of annotated parallel tensor ti, whose single tensor is s.
 * Counting (out == NULL): adds its pieces to *n and its points to *np, and
 * reports its NO_VALUE issues.  Filling: writes the same pieces, in the same
 * order, to out (nothing can fail then). */
static vd_rc tensor_pieces(lctx *c, uint32_t ti, uint32_t s, vd_lin_piece *out, size_t *n, size_t *np) {
  const vd_graph_t *gs = c->t->gs, *gp = c->t->gp;
  const vd_tensor_t *pt = &c->pp->tensors[ti], *st = &c->sp->tensors[s];
  int32_t sv_init = vd_lin_i_single_value(c, s, 1), sv_fin = vd_lin_i_single_value(c, s, 0);
  int init_ok = sv_init >= 0 && gs->values[sv_init].is_initial;
  int warned_fin = 0;
  uint32_t per = pt->scope == VD_SCOPE_PER_MB ? gp->inst_per_replica[ti] : 1;
  /* Replicas whose part index does not move share one piece: their slices
   * are translates (vd_lin_piece_at), so the table stays O(points), not
   * O(points x replicas). */
  int compact = c->D > 1 && pt->lin.dp_part == 0;
  for (uint32_t m = 0; m < per; m++) {
    int32_t mb = pt->scope == VD_SCOPE_PER_MB ? (int32_t)m : -1;
    int32_t first = vd_graph_first(gp, ti, 0, mb), last = vd_graph_last(gp, ti, 0, mb);
    if (first < 0) {
      if (!out)
        VD_CHECK(vd_lin_i_add_issue(c, VD_LISSUE_NO_VALUE, (int64_t)s, (int64_t)ti, -1, mb,
                           "'%s' (rank %d, mb %d) is annotated with '%s' but never holds a value", vd_lin_i_pname(c, ti),
                           pt->rank, mb, vd_lin_i_sname(c, s)));
      continue;
    }
    for (int k = 0; k < 2; k++) {
      int initial = k == 0;
      int32_t v = initial ? first : last;
      if (initial && !gp->values[v].is_initial) continue;
      if (!initial && (v < 0 || gp->values[v].producer < 0)) continue;
      /* SOUNDNESS: the initial value of a parallel tensor whose single
       * tensor is produced (e.g. a gradient accumulator carried over from
       * the previous iteration and zeroed before use) has nothing to equal
       * in the single plan: it is not a point, and stages take it as a free
       * symbol, which can only make a proof harder. */
      if (initial && !init_ok) continue;
      if (!initial && sv_fin < 0) {
        if (!out && !warned_fin)
          VD_CHECK(vd_lin_i_add_issue(c, VD_LISSUE_NO_VALUE, (int64_t)s, (int64_t)ti, -1, mb,
                             "'%s' (rank %d) claims the final value of '%s', which the single plan never "
                             "materialises",
                             vd_lin_i_pname(c, ti), pt->rank, vd_lin_i_sname(c, s)));
        warned_fin = 1;
        continue;
      }
      (*np)++;
      for (int32_t d = 0; d < (compact ? 1 : c->D); d++, (*n)++) {
        if (!out) continue;
        vd_lin_piece *x = &out[*n];
        memset(x, 0, sizeof(*x));
        x->value = (uint32_t)v;
        x->replica = d;
        x->ptensor = ti;
        x->mb = mb;
        x->initial = (uint8_t)initial;
        x->all_rep = (uint8_t)compact;
        vd_tensor_lineage_at(pt, d, mb, x->lo, x->hi, &x->part_k);
        x->part_n = pt->lin.part_n;
        x->f = vd_lineage_factor(&pt->lin);
        for (int32_t i = st->ndim; i < VD_MAX_DIMS; i++) x->lo[i] = x->hi[i] = 0;
      }
    }
  }
  return VD_OK;
}

/* Collects every piece into one array bucketed by single tensor: bucket s
 * is [start[s], start[s + 1]), its tensors' pieces in tensor index order.
 * A serial first pass counts (and reports issues in tensor order); the
 * pieces are then written in parallel, each tensor to its own slots, so the
 * array is the same at any thread count and is allocated once, exactly. */
vd_rc vd_lin_i_collect(lctx *c, vd_lin_piece **out, size_t *n_out, size_t *n_points, size_t **start_out) {
  const vd_plan_t *sp = c->sp, *pp = c->pp;
  vd_idmap_t ids;
  if (vd_idmap_init(&ids, sp->n_tensors)) return VD_OOM(c->d);
  tslot_t *slot = vd_calloc(pp->n_tensors ? pp->n_tensors : 1, sizeof(*slot));
  size_t *start = vd_calloc(sp->n_tensors + 1, sizeof(*start));
  vd_lin_piece *pieces = NULL;
  size_t n = 0, np = 0;
  vd_rc rc = slot && start ? VD_OK : VD_OOM(c->d);
  for (size_t s = 0; s < sp->n_tensors && rc == VD_OK; s++)
    if (vd_idmap_put(&ids, sp->tensors[s].id, (uint32_t)s, NULL) < 0) rc = VD_OOM(c->d);
  for (size_t ti = 0; ti < pp->n_tensors && rc == VD_OK; ti++) {
    const vd_tensor_t *pt = &pp->tensors[ti];
    /* every 1024 tensors: the heartbeat's count, and a stop request */
    if ((ti & 1023) == 0) {
      vd_ctl_set(VD_CTL_LIN_PIECES, n);
      if (vd_ctl_stopped()) {
        rc = VD_ERR(c->d, VD_ECANCELED, NULL, NULL, NULL, "interrupted");
        break;
      }
    }
    slot[ti].s = NONE;
    if (!pt->has_lin) continue;
    uint32_t s;
    if (!vd_idmap_get(&ids, pt->lin.full, &s)) {
      rc = vd_lin_i_add_issue(c, VD_LISSUE_NO_SINGLE, -1, (int64_t)ti, -1, -1,
                     "'%s' (rank %d) claims single tensor id %lld, which the single plan does not have",
                     vd_lin_i_pname(c, (uint32_t)ti), pt->rank, (long long)pt->lin.full);
      continue;
    }
    if (unread_input(c, (uint32_t)ti, s)) {
      rc = vd_lin_i_add_issue(c, VD_LISSUE_UNREAD, (int64_t)s, (int64_t)ti, -1, -1,
                     "declared input '%s' (rank %d, as '%s') is read by neither step: left out of the "
                     "comparison",
                     vd_lin_i_pname(c, (uint32_t)ti), pt->rank, vd_lin_i_sname(c, s));
      continue;
    }
    size_t before = n;
    rc = tensor_pieces(c, (uint32_t)ti, s, NULL, &n, &np);
    slot[ti].s = s;
    slot[ti].n = (uint32_t)(n - before);
    slot[ti].off = start[s + 1]; /* offset inside bucket s for now */
    start[s + 1] += n - before;
  }
  vd_idmap_free(&ids);
  if (rc == VD_OK) {
    for (size_t s = 0; s < sp->n_tensors; s++) start[s + 1] += start[s];
    pieces = vd_malloc((n ? n : 1) * sizeof(*pieces));
    if (!pieces) rc = VD_OOM(c->d);
  }
  if (rc == VD_OK) {
#pragma omp parallel for schedule(dynamic, 64)
    for (size_t ti = 0; ti < pp->n_tensors; ti++) {
      if (slot[ti].s == NONE || !slot[ti].n) continue;
      size_t k = start[slot[ti].s] + slot[ti].off, kp = 0;
      tensor_pieces(c, (uint32_t)ti, slot[ti].s, pieces, &k, &kp);
    }
  }
  vd_free(slot);
  if (rc != VD_OK) {
    vd_free(pieces);
    vd_free(start);
    return rc;
  }
  *out = pieces;
  *n_out = n;
  *n_points = np;
  *start_out = start;
  return VD_OK;
}

/* ---- step 3: grouping --------------------------------------------------- */

/* Orders the pieces of one single tensor (nd dimensions): initial first,
 * then slice, part_n, factor, part k, replica, value.  A total order (value and
 * replica tell any two pieces apart), so the result is unique. */
static int piece_cmp(const void *a, const void *b, void *ndp) {
  const vd_lin_piece *x = a, *y = b;
  if (x->initial != y->initial) return x->initial > y->initial ? -1 : 1;
  int r = vd_lin_i_slice_cmp(x, y, *(const int32_t *)ndp);
  if (r) return r;
  if ((r = vd_lin_i_cmp_i64(x->part_n, y->part_n))) return r;
  if (x->f != y->f) return x->f < y->f ? -1 : 1; /* f x the slice: another claim */
  if ((r = vd_lin_i_cmp_i64(x->part_k, y->part_k))) return r;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  return x->value < y->value ? -1 : x->value > y->value;
}

/* Takes *pp (set to NULL once the table owns it) and start (the buckets of
 * collect).  Each bucket is sorted and becomes at most two lineages (its
 * moments), in parallel over buckets: the lineages own disjoint pieces and
 * points (a value is one moment of one tensor), so the table is the serial
 * one at any thread count. */
vd_rc vd_lin_i_group(lctx *c, vd_lin_piece **pp, size_t n, size_t n_points, const size_t *start) {
  vd_lin_table *t = c->t;
  const vd_graph_t *gs = t->gs, *gp = t->gp;
  size_t ns = c->sp->n_tensors;
  vd_lin_piece *pieces = *pp;
  size_t nl = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : nl)
  for (size_t s = 0; s < ns; s++) {
    size_t a = start[s], b = start[s + 1];
    if (a == b) continue;
    int32_t nd = c->sp->tensors[s].ndim;
    if (b - a > 1) qsort_r(pieces + a, b - a, sizeof(*pieces), piece_cmp, &nd);
    nl += 1 + (pieces[a].initial && !pieces[b - 1].initial);
  }
  t->pieces = pieces;
  *pp = NULL;
  t->n_pieces = n;
  t->lins = vd_calloc(nl ? nl : 1, sizeof(*t->lins));
  t->point_first = vd_malloc((gp->n_values ? gp->n_values : 1) * sizeof(*t->point_first));
  t->point_pieces = vd_malloc((n ? n : 1) * sizeof(*t->point_pieces));
  t->lin_of_svalue_initial = vd_malloc((gs->n_values ? gs->n_values : 1) * sizeof(int32_t));
  t->lin_of_svalue_final = vd_malloc((gs->n_values ? gs->n_values : 1) * sizeof(int32_t));
  if (!t->lins || !t->point_first || !t->point_pieces || !t->lin_of_svalue_initial || !t->lin_of_svalue_final)
    return VD_OOM(c->d);
  for (size_t v = 0; v < gp->n_values; v++) t->point_first[v] = -1;
  for (size_t v = 0; v < gs->n_values; v++) t->lin_of_svalue_initial[v] = t->lin_of_svalue_final[v] = -1;
  size_t li = 0;
  for (size_t s = 0; s < ns; s++)
    for (size_t i = start[s]; i < start[s + 1]; li++) {
      vd_lineage *L = &t->lins[li];
      L->stensor = (uint32_t)s;
      L->initial = pieces[i].initial;
      L->svalue = (uint32_t)vd_lin_i_single_value(c, (uint32_t)s, L->initial);
      L->piece_off = (uint32_t)i;
      while (i < start[s + 1] && pieces[i].initial == L->initial) i++;
      L->n_pieces = (uint32_t)(i - L->piece_off);
      (L->initial ? t->lin_of_svalue_initial : t->lin_of_svalue_final)[L->svalue] = (int32_t)li;
    }
  t->n_lins = nl;
  /* Point lookup: a lineage's points take its own slots (one per piece),
   * in order of first appearance among its pieces. */
  size_t np = 0, bad = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : np, bad)
  for (size_t l = 0; l < nl; l++) {
    const vd_lineage *L = &t->lins[l];
    size_t slots = L->piece_off;
    for (size_t i = L->piece_off; i < (size_t)L->piece_off + L->n_pieces; i++) {
      vd_lin_piece *p = &t->pieces[i];
      p->lineage = (uint32_t)l;
      if (t->point_first[p->value] < 0) {
        t->point_first[p->value] = (int32_t)slots;
        slots += p->all_rep ? 1 : (size_t)c->D;
        np++;
      }
      size_t at = (size_t)t->point_first[p->value] + (p->all_rep ? 0 : (size_t)p->replica);
      if (at < (size_t)L->piece_off + L->n_pieces)
        t->point_pieces[at] = (uint32_t)i;
      else
        bad++;
    }
    bad += slots != (size_t)L->piece_off + L->n_pieces;
  }
  if (VD_NEVER(np != n_points || bad))
    return VD_ERR(c->d, VD_EINTERNAL, NULL, "lineage", "points", "expected %zu points, got %zu (%zu misplaced)",
                  n_points, np, bad);
  t->n_point_pieces = n;
  return VD_OK;
}
