/*
 * stages/cut_sum.c - sums by part: a target that is a sum of one part per
 * (replica, microbatch) is proven part by part, one stage per bucket of
 * parts, when the parts' stages translate into each other.
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

/* ---- sums by part ------------------------------------------------------------
 *
 * A target that is a sum of n parts, one per (replica, microbatch) that ran
 * the same backward on other batch rows (a weight gradient annotated per
 * replica and microbatch), is proven part by part instead of in one stage
 * holding all n contributions (docs/verifier.md section 2, "Sums by part").
 * The members of the slice group are bucketed by part; each part's members
 * must be of one replica d and one microbatch m (several parts may share
 * (d, m): the data-parallel EP ranks of one replica).
 * A bucket's stage claims that each of its pieces equals the single target
 * computed on the bucket's rows only: the node producing the single target
 * sums over rows (vd_op_eqv.sum_outs), and vd_stage_window (sum_mode) cuts
 * its row input to the rows the bucket's hypotheses hold along exactly one
 * row dimension, [lo, hi).  One bucket's stage stands for the buckets it
 * translates to (other replicas when no collective spans replicas and every
 * hypothesis is a piece for all replicas; other microbatches by tau_m, as in
 * vd_stage_i_mb_family), whose windows move by a common amount per replica (A) and per
 * microbatch (B); any other bucket is cut on its own.  Then the windows of
 * all buckets must tile the row dimension exactly once.
 *
 * SOUNDNESS: every piece of part k equals S_W(k) = sum over the rows of W(k)
 * of phi(row) (the node's summed output on those rows; the windowed single
 * side computes exactly the rows of the whole computation, section 5), and
 * the W(k) partition the rows, so the sum over k of one piece per part is
 * sum over all rows of phi(row) = the single target, and pieces of one part
 * equal each other.  Parts and buckets correspond one to one, so no part is
 * missed or counted twice.  Whatever fails (a bucket that does not window,
 * windows that overlap or leave a gap, a structural issue) rolls the group
 * back to the one stage holding every part. */

typedef struct {
  int32_t d, m;       /* replica and microbatch of its members; d = -1 before the first */
  uint32_t first, n;  /* members sm[first .. first+n) */
  int64_t lo, hi;     /* row window, once covered */
  uint8_t covered;
} sbucket_t;

typedef struct {
  uint32_t piece;
  int32_t rep;
} smember_t;

static int smember_cmp(const void *a, const void *b) {
  const smember_t *x = a, *y = b;
  if (x->piece != y->piece) return x->piece < y->piece ? -1 : 1;
  return (x->rep > y->rep) - (x->rep < y->rep);
}

/* The bucket (part) holding exactly the translates of the members of the
 * representative bucket rb (at replica rb->d, microbatch m0) into replica d,
 * microbatch m: the piece of the translated value in replica d for each of
 * them; -1 when there is none, or it is covered already. */
static int64_t bucket_translate(cctx *c, const smember_t *sm, const sbucket_t *bk, const sbucket_t *rb, int32_t d,
                                int32_t m0, int32_t m, smember_t *tmp, size_t a, size_t b) {
  const vd_lin_table *lt = c->lt;
  for (uint32_t i = 0; i < rb->n; i++) {
    const vd_lin_piece *p = &lt->pieces[sm[rb->first + i].piece];
    uint32_t tv = m == m0 ? p->value : vd_stage_i_tr_value(c, p->value, m0, m);
    if (tv == NONE) return -1;
    int32_t q = vd_lin_piece_of(lt, tv, d);
    if (q < 0 || (size_t)q < a || (size_t)q >= b) return -1;
    tmp[i] = (smember_t){(uint32_t)q, d};
  }
  int64_t k = lt->pieces[tmp[0].piece].part_k;
  const sbucket_t *tb = &bk[k];
  if (tb->n != rb->n || tb->covered || tb->d != d || tb->m != m) return -1;
  qsort(tmp, rb->n, sizeof(*tmp), smember_cmp);
  for (uint32_t i = 0; i < rb->n; i++)
    if (tmp[i].piece != sm[tb->first + i].piece || tmp[i].rep != sm[tb->first + i].rep) return -1;
  return k;
}

/* Window of st's sum with its hypotheses translated (c->tp when tp, replica
 * + dr): *same when every windowed shape and slice equals st's, and *lo the
 * translated window's start. */
static vd_rc sum_window_at(cctx *c, const vd_stage *st, const uint32_t *tp, int32_t dr, int *same, int64_t *lo) {
  vd_stage w = {0};
  vd_rc rc = vd_stage_i_window_copy_r(c, st, tp, st->idx[st->targets[0].piece_off], dr, &w);
  *same = 0;
  if (rc == VD_OK && w.sum_ok && w.sum_dim == st->sum_dim && w.sum_svalue == st->sum_svalue &&
      w.sum_hi - w.sum_lo == st->sum_hi - st->sum_lo) {
    int eq = !memcmp(w.targets[0].blo, st->targets[0].blo, sizeof(w.targets[0].blo)) &&
             !memcmp(w.targets[0].bhi, st->targets[0].bhi, sizeof(w.targets[0].bhi));
    for (uint32_t i = 0; i < st->n_vals && eq; i++) {
      const vd_stage_value *x = &st->vals[i], *y = &w.vals[i];
      eq = !memcmp(x->shape, y->shape, sizeof(x->shape)) && !memcmp(x->plo, y->plo, sizeof(x->plo)) &&
           !memcmp(x->phi, y->phi, sizeof(x->phi));
    }
    *same = eq;
    *lo = w.sum_lo;
  }
  vd_free(w.vals);
  vd_free(w.targets);
  return rc;
}

/* Whether the stage of replica d0 is literally the stage of every replica up
 * to where its slices sit (replica_uniform's conditions (a) and (b)). */
static int sum_rep_ok(const cctx *c, const vd_stage *st) {
  if (c->D < 2) return 0;
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].side && is_span(c, &c->gp->nodes[st->nodes[i].gnode])) return 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    if (v->side && v->producer < 0 && v->leaf_piece >= 0 && !c->lt->pieces[v->leaf_piece].all_rep) return 0;
  }
  return 1;
}

static int i64_pair_cmp(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Representatives are taken in (replica, microbatch, first member) order:
 * replica 0's earliest microbatch first; members' offsets are distinct, so
 * the order is total and the cut deterministic. */
typedef struct {
  int32_t d, m;
  uint32_t first, k;
} sorder_t;

static int sorder_cmp(const void *a, const void *b) {
  const sorder_t *x = a, *y = b;
  if (x->d != y->d) return x->d < y->d ? -1 : 1;
  if (x->m != y->m) return x->m < y->m ? -1 : 1;
  return (x->first > y->first) - (x->first < y->first);
}

typedef struct {
  smember_t *sm;
  sbucket_t *bk;      /* one per part index */
  smember_t *tmp;
  int32_t *mset;
  int64_t *win;
  sorder_t *order;    /* parts by (replica, microbatch, first member) */
  int64_t *tk;        /* scratch: translated buckets */
} sum_scratch;

static void sum_scratch_free(sum_scratch *x) {
  VD_FREE_ALL(x->sm, x->bk, x->tmp, x->mset, x->win, x->order, x->tk);
}

/* The buckets one representative's stage stands for: replicas
 * dlo .. dlo+nd (its window moving by A per replica) times microbatches
 * x->mset[0 .. nms) (by B per microbatch); x->tk holds the bucket of
 * (microbatch q of mset, replica d). */
typedef struct {
  int32_t d0, m0, dlo, nd;
  int64_t A, B;
  uint32_t nms;
} sfamily_t;

/* Cuts the stage of bucket kr in sum mode; *sid = -1 when it does not
 * cut or does not window (the group rolls back). */
static vd_rc cut_representative(cctx *c, uint32_t li, size_t a, size_t b, const sum_scratch *x, int64_t kr,
                                int64_t n, int64_t *sid) {
  const sbucket_t *rb = &x->bk[kr];
  c->n_mem = 0;
  for (uint32_t i = 0; i < rb->n; i++) VD_CHECK(vd_stage_i_add_member(c, x->sm[rb->first + i].piece, x->sm[rb->first + i].rep));
  VD_CHECK(vd_stage_i_cut_target(c, li, sid));
  if (*sid < 0) return VD_OK;
  vd_stage *st = &c->set->stages[*sid];
  st->sum_mode = 1;
  VD_CHECK(vd_stage_window(c->lt, st, c->d));
  if (!st->sum_ok) {
    *sid = -1;
    return VD_OK;
  }
  st->targets[0].part_n = 1;
  st->sum_parts = n;
  st->cut_part = kr;
  vd_stage_i_note_cut(c, *sid, li, a, b, -3);
  return VD_OK;
}

/* Replicas: all of them, or d0 alone; a step of one replica moves the
 * window by A. */
static vd_rc replica_family(cctx *c, const vd_stage *st, sfamily_t *f) {
  int32_t d0 = f->d0;
  f->nd = 1;
  f->A = 0;
  int dstep = 0;
  if (sum_rep_ok(c, st)) {
    int32_t d1 = d0 + 1 < (int32_t)c->D ? d0 + 1 : d0 - 1;
    int same;
    int64_t lo1;
    VD_CHECK(sum_window_at(c, st, NULL, d1 - d0, &same, &lo1));
    if (same && (lo1 - st->sum_lo) % (d1 - d0) == 0) {
      f->A = (lo1 - st->sum_lo) / (d1 - d0);
      f->nd = (int32_t)c->D;
      dstep = 1;
    }
  }
  f->dlo = dstep ? 0 : d0;
  return VD_OK;
}

/* Microbatches: m0 and every m whose buckets (in every replica covered)
 * are translates; the first one fixes B (the window moves by a common
 * amount per microbatch, checked once as in vd_stage_i_mb_family).
 * *ok = 0 when a replica's own bucket at m0 is not a translate. */
static vd_rc mb_family(cctx *c, const vd_stage *st, sum_scratch *x, int64_t kr, size_t a, size_t b, sfamily_t *f,
                       int *ok) {
  sbucket_t *bk = x->bk, *rb = &bk[kr];
  int32_t d0 = f->d0, m0 = f->m0, dlo = f->dlo, nd = f->nd;
  uint32_t nms = 0;
  x->mset[nms++] = m0;
  *ok = 0;
  /* The replicas' own buckets at m0. */
  for (int32_t d = dlo; d < dlo + nd; d++) {
    int64_t k = d == d0 ? kr : bucket_translate(c, x->sm, bk, rb, d, m0, m0, x->tmp, a, b);
    if (k < 0) return VD_OK;
    x->tk[d - dlo] = k;
  }
  int windows_checked = 0;
  f->B = 0;
  for (int32_t m = 0; c->mb_ok && m0 >= 0 && m < (int32_t)c->nm; m++) {
    if (m == m0) continue;
    if (VD_GROW(c->tp, c->cap_tp, st->n_vals + 1)) return VD_OOM(c->d);
    if (!vd_stage_i_stage_translates(c, st, m0, m)) continue;
    int all = 1;
    int64_t *row = x->tk + (size_t)nms * (size_t)nd;
    for (int32_t d = dlo; d < dlo + nd && all; d++) {
      row[d - dlo] = bucket_translate(c, x->sm, bk, rb, d, m0, m, x->tmp, a, b);
      all = row[d - dlo] >= 0;
    }
    if (!all) continue;
    if (!windows_checked) {
      int same;
      int64_t lom;
      VD_CHECK(sum_window_at(c, st, c->tp, 0, &same, &lom));
      if (!same || (lom - st->sum_lo) % (m - m0)) break; /* the slices move inside a window, at every m */
      f->B = (lom - st->sum_lo) / (m - m0);
      windows_checked = 1;
    }
    x->mset[nms++] = m;
  }
  f->nms = nms;
  *ok = 1;
  return VD_OK;
}

/* Marks the family's buckets covered, each with its window. */
static void cover_family(sum_scratch *x, const vd_stage *st, const sfamily_t *f) {
  int64_t w = st->sum_hi - st->sum_lo;
  for (uint32_t q = 0; q < f->nms; q++)
    for (int32_t d = f->dlo; d < f->dlo + f->nd; d++) {
      sbucket_t *t = &x->bk[x->tk[(size_t)q * (size_t)f->nd + (size_t)(d - f->dlo)]];
      t->covered = 1;
      t->lo = st->sum_lo + (int64_t)(d - f->d0) * f->A + (int64_t)(x->mset[q] - f->m0) * f->B;
      t->hi = t->lo + w;
    }
}

/* Cuts the representative of part kr (its bucket at replica d0, microbatch
 * m0) and covers the parts it stands for.  *ok = 0: roll the group back. */
static vd_rc sum_bucket(cctx *c, uint32_t li, size_t a, size_t b, sum_scratch *x, int64_t kr, int64_t n, int *ok) {
  sfamily_t f = {0};
  int64_t sid;
  *ok = 0;
  f.d0 = x->bk[kr].d;
  f.m0 = x->bk[kr].m;
  VD_CHECK(cut_representative(c, li, a, b, x, kr, n, &sid));
  if (sid < 0) return VD_OK;
  vd_stage *st = &c->set->stages[sid];
  VD_CHECK(replica_family(c, st, &f));
  int fam_ok;
  VD_CHECK(mb_family(c, st, x, kr, a, b, &f, &fam_ok));
  if (!fam_ok) return VD_OK;
  cover_family(x, st, &f);
  st->n_rep = (uint32_t)f.nd;
  if (f.nms > 1) {
    st->n_mb = f.nms;
    st->mb_list = vd_malloc(f.nms * sizeof(*st->mb_list));
    if (!st->mb_list) return VD_OOM(c->d);
    memcpy(st->mb_list, x->mset, f.nms * sizeof(*x->mset));
  }
  *ok = 1;
  return VD_OK;
}

static vd_rc sum_scratch_alloc(cctx *c, sum_scratch *x, size_t cnt, int64_t n) {
  uint32_t nmk = c->nm + 1;
  x->sm = vd_malloc(cnt * sizeof(*x->sm));
  x->bk = vd_calloc((size_t)n, sizeof(*x->bk));
  x->tmp = vd_malloc(cnt * sizeof(*x->tmp));
  x->mset = vd_malloc(nmk * sizeof(*x->mset));
  x->win = vd_malloc(2 * (size_t)n * sizeof(*x->win));
  x->order = vd_malloc((size_t)n * sizeof(*x->order));
  x->tk = vd_malloc((size_t)nmk * c->D * sizeof(*x->tk));
  if (!x->sm || !x->bk || !x->tmp || !x->mset || !x->win || !x->order || !x->tk) {
    sum_scratch_free(x);
    return VD_OOM(c->d);
  }
  return VD_OK;
}

/* Buckets by part index; each part's members must be of one replica and
 * one microbatch (several parts may share a replica and microbatch: the
 * data-parallel EP ranks of one replica), members sorted by (piece,
 * replica).  0 when the group's pieces do not bucket that way. */
static int fill_buckets(cctx *c, size_t a, size_t b, int64_t n, sum_scratch *x) {
  const vd_lin_table *lt = c->lt;
  uint32_t D = c->D;
  for (int64_t k = 0; k < n; k++) x->bk[k].d = -1;
  int good = 1;
  for (size_t i = a; i < b && good; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? D : (uint32_t)p->replica + 1) && good; r++) {
      if (p->part_k < 0 || p->part_k >= n) {
        good = 0;
        break;
      }
      sbucket_t *t = &x->bk[p->part_k];
      if (t->d >= 0 && (t->d != (int32_t)r || t->m != p->mb)) good = 0;
      t->d = (int32_t)r;
      t->m = p->mb;
      t->n++;
    }
  }
  size_t off = 0;
  for (int64_t k = 0; k < n && good; k++) {
    if (!x->bk[k].n) good = 0;
    x->bk[k].first = (uint32_t)off;
    off += x->bk[k].n;
    x->bk[k].n = 0;
  }
  if (!good) return 0;
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? D : (uint32_t)p->replica + 1); r++) {
      sbucket_t *t = &x->bk[p->part_k];
      x->sm[t->first + t->n++] = (smember_t){(uint32_t)i, (int32_t)r};
    }
  }
  /* (pieces come in order, so each bucket is sorted by (piece, replica)) */
  return 1;
}

/* Whether the stages from s0 on (one per representative) window the same
 * single value and dimension, and the n buckets' windows tile it exactly
 * once. */
static int windows_tile(const vd_stage_set *set, size_t s0, sum_scratch *x, int64_t n) {
  int ok = 1;
  for (size_t s = s0 + 1; s < set->n_stages && ok; s++)
    ok = set->stages[s].sum_svalue == set->stages[s0].sum_svalue &&
         set->stages[s].sum_dim == set->stages[s0].sum_dim;
  for (int64_t k = 0; k < n; k++) {
    x->win[2 * k] = x->bk[k].lo;
    x->win[2 * k + 1] = x->bk[k].hi;
    ok = ok && x->bk[k].covered;
  }
  qsort(x->win, (size_t)n, 2 * sizeof(*x->win), i64_pair_cmp);
  int64_t at = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    ok = x->win[2 * i] == at && x->win[2 * i + 1] > at;
    at = x->win[2 * i + 1];
  }
  return ok && set->n_stages > s0 && at == set->stages[s0].sum_ext;
}

/* Tries slice group [a, b) of lineage li as a sum by part; *done = 1 when it
 * was cut that way, 0 when nothing was left behind (the caller cuts it as
 * one stage). */
vd_rc vd_stage_i_cut_sum_group(cctx *c, uint32_t li, size_t a, size_t b, int *done) {
  const vd_lin_table *lt = c->lt;
  vd_stage_set *set = c->set;
  int64_t n = lt->pieces[a].part_n;
  uint32_t D = c->D;
  *done = 0;
  if (n < 2) return VD_OK;
  size_t cnt = 0;
  for (size_t i = a; i < b; i++) {
    if (vd_lin_piece_moves(lt, (uint32_t)i) || lt->pieces[i].mb >= (int32_t)c->nm) return VD_OK;
    cnt += lt->pieces[i].all_rep ? D : 1;
  }
  /* every part needs a member (PARTS otherwise, reported by lineage/) */
  if ((size_t)n > cnt) return VD_OK;
  sum_scratch x = {0};
  vd_rc rc = VD_OK;
  VD_CHECK(sum_scratch_alloc(c, &x, cnt, n));
  if (!fill_buckets(c, a, b, n, &x)) {
    sum_scratch_free(&x);
    return VD_OK;
  }
  /* Representatives in (replica, microbatch, first piece) order: replica
   * 0's earliest microbatch first, as with one part per bucket. */
  for (int64_t k = 0; k < n; k++)
    x.order[k] = (sorder_t){x.bk[k].d, x.bk[k].m, x.bk[k].first, (uint32_t)k};
  qsort(x.order, (size_t)n, sizeof(*x.order), sorder_cmp);
  size_t s0 = set->n_stages, i0 = set->n_issues;
  c->log_nolin = 1;
  c->n_nolin_log = 0;
  int ok = 1;
  for (int64_t q = 0; q < n && ok && rc == VD_OK; q++) {
    uint32_t k = x.order[q].k;
    if (x.bk[k].covered) continue;
    rc = sum_bucket(c, li, a, b, &x, k, n, &ok);
  }
  if (rc == VD_OK && ok) ok = windows_tile(set, s0, &x, n);
  c->log_nolin = 0;
  if (rc == VD_OK && !ok) {
    /* roll back: no stage, no issue, no nolin mark of the try survives */
    while (set->n_stages > s0) vd_stage_i_drop_last(c);
    set->n_issues = i0;
    for (size_t i = 0; i < c->n_nolin_log; i++) c->nolin[c->nolin_log[i]] = 0;
  }
  *done = rc == VD_OK && ok;
  sum_scratch_free(&x);
  return rc;
}

/* Slice groups (first piece per piece) and, with microbatches, the Gp
 * instance of every plan node per microbatch. */
