/*
 * lineage/lineage.c - builds and validates the lineage table (vd_lin_build).
 *
 * What it does (docs/verifier.md section 1):
 *  1. Points: for every annotated parallel tensor instance of Gp (replica-0
 *     graph), its initial value (if the graph made it an initial value) and
 *     its final version (if something produces it).  Each point becomes one
 *     piece per virtual DP replica d, with the annotation shifted by
 *     vd_tensor_lineage_at (the one place that applies the shifts).
 *  2. Single value: the initial (vd_graph_first, which must be an initial
 *     value) or final (vd_graph_last) version of the single tensor `full`,
 *     instance mb 0 for per-microbatch single tensors, -1 for persistent ones.
 *  3. Grouping: pieces are written straight into one bucket per single
 *     tensor, each bucket sorted by (moment, slice, part_n, k, replica,
 *     value); one vd_lineage per (single tensor, moment).
 *  4. Validation, all reported as vd_lin_issue, never assumed away:
 *     NO_SINGLE, OUT_OF_BOUNDS, OVERLAP, GAP, PARTS, UNCOVERED, NO_VALUE.
 *
 * Coverage (GAP) uses coordinate compression: the distinct slices of one
 * moment cut every dimension at their bounds; each slice covers a box of
 * grid cells; a cell covered never is a gap.  Copies may overlap in any way
 * (each slice group is proven on its own).  Cost O(sum of slice cells);
 * beyond GRID_MAX cells it falls back to a sorted sweep with a volume
 * count, which can only tell nested copies apart, so a partial overlap on
 * such a fine grid is reported as OVERLAP (coverage undetermined).
 *
 * Not here: the closed-form (lattice) coverage check for huge DP/microbatch
 * counts that docs/verifier.md mentions; pieces are enumerated per replica.
 * Invariant: the table and its issues are deterministic at any thread
 * count: issues are found in index order (or merged in lineage order) and
 * sorted at the end; the parallel loops (writing pieces, sorting buckets,
 * validating lineages) each own disjoint slots of the result.
 */
#include "lineage.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/mem.h"
#include "../plans/idmap.h"

const char *const vd_lissue_names[VD_LISSUE__COUNT] = {"no_single", "out_of_bounds", "overlap", "gap",
                                                       "parts",     "uncovered",     "no_value",
                                                       "batch",     "unread_input"};

#define NONE UINT32_MAX
#define GRID_MAX ((size_t)VD_LIM_LIN_GRID_MAX) /* reason: common/limits.h */

/* An issue found while validating lineage li in parallel (validate). */
typedef struct {
  uint32_t li, seq;
  vd_lin_issue is;
} tissue_t;

typedef struct {
  vd_lin_table *t;
  vd_diag *d;
  const vd_plan_t *sp, *pp;
  int32_t D;
  size_t cap_issues, cap_warnings;
  /* validate() runs lineages in parallel: then a thread's issues go to its
   * own list (sink), tagged with the lineage, and are merged in lineage
   * order afterwards, so the table is the same at any thread count. */
  int to_sink;
  uint32_t cur_li;
  tissue_t *sink;
  size_t n_sink, cap_sink;
} lctx;

/* ---- issues ------------------------------------------------------------ */

/* Global rank holding parallel tensor ptensor in replica d. */
static long long grank(const lctx *c, uint32_t ptensor, int32_t d) {
  return (long long)d * c->pp->world.stored_ranks + c->pp->tensors[ptensor].rank;
}

static vd_rc add_issue(lctx *c, vd_lissue_kind kind, int64_t st, int64_t pt, int32_t rep, int32_t mb,
                       const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static vd_rc add_issue(lctx *c, vd_lissue_kind kind, int64_t st, int64_t pt, int32_t rep, int32_t mb,
                       const char *fmt, ...) {
  vd_lin_table *t = c->t;
  vd_issue is;
  vd_issue_init(&is, "lineage", (unsigned)kind, vd_lissue_names[kind],
                kind == VD_LISSUE_UNREAD  ? VD_DX_NONE
                : kind == VD_LISSUE_BATCH ? VD_DX_BATCH
                                          : VD_DX_DATAFLOW);
  is.stensor = st;
  is.tensor = pt;
  is.replica = rep;
  is.mb = mb;
  if (pt >= 0 && rep >= 0) is.rank = grank(c, (uint32_t)pt, rep);
  va_list ap;
  va_start(ap, fmt);
  vd_issue_vdetail(&is, fmt, ap);
  va_end(ap);
  if (kind == VD_LISSUE_UNREAD) {
    if (vd_issue_push(&t->warnings, &t->n_warnings, &c->cap_warnings, VD_LIN_MAX_ISSUES, &t->n_warnings_dropped, &is))
      return VD_OOM(c->d);
    return VD_OK;
  }
  if (c->to_sink) {
    if (VD_GROW(c->sink, c->cap_sink, c->n_sink + 1)) return VD_OOM(c->d);
    c->sink[c->n_sink] = (tissue_t){c->cur_li, (uint32_t)c->n_sink, is};
    c->n_sink++;
    return VD_OK;
  }
  if (vd_issue_push(&t->issues, &t->n_issues, &c->cap_issues, VD_LIN_MAX_ISSUES, &t->n_issues_dropped, &is))
    return VD_OOM(c->d);
  return VD_OK;
}

static int issue_cmp(const void *a, const void *b) {
  const vd_lin_issue *x = a, *y = b;
  /* BATCH first: it explains every other issue of a batch-mismatched pair. */
  int kx = x->kind == VD_LISSUE_BATCH ? -1 : (int)x->kind, ky = y->kind == VD_LISSUE_BATCH ? -1 : (int)y->kind;
  if (kx != ky) return kx < ky ? -1 : 1;
  if (x->stensor != y->stensor) return x->stensor < y->stensor ? -1 : 1;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
  return strcmp(x->detail, y->detail);
}

/* ---- formatting -------------------------------------------------------- */

void vd_lin_fmt_slice(const int64_t *lo, const int64_t *hi, int32_t nd, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < nd && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld:%lld", i ? ", " : "", (long long)lo[i], (long long)hi[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static void fmt_shape(const int64_t *s, int32_t nd, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static const char *sname(const lctx *c, uint32_t s) { return vd_plan_s(c->sp, c->sp->tensors[s].name); }
static const char *pname(const lctx *c, uint32_t p) { return vd_plan_s(c->pp, c->pp->tensors[p].name); }

/* "'r0.w1' (rank 0, mb 1)" for a piece. */
static void fmt_piece(const lctx *c, const vd_lin_piece *p, char *buf, size_t n) {
  if (p->mb >= 0)
    snprintf(buf, n, "'%s' (rank %lld, mb %d)", pname(c, p->ptensor), grank(c, p->ptensor, p->replica), p->mb);
  else
    snprintf(buf, n, "'%s' (rank %lld)", pname(c, p->ptensor), grank(c, p->ptensor, p->replica));
}

static const char *moment(uint8_t initial) { return initial ? "initial" : "final"; }

/* ---- sorting ----------------------------------------------------------- */

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

static int slice_cmp(const vd_lin_piece *x, const vd_lin_piece *y, int32_t nd) {
  for (int32_t i = 0; i < nd; i++) {
    int r = cmp_i64(x->lo[i], y->lo[i]);
    if (r) return r;
  }
  for (int32_t i = 0; i < nd; i++) {
    int r = cmp_i64(x->hi[i], y->hi[i]);
    if (r) return r;
  }
  return 0;
}

/* ---- step 1+2: points and pieces ---------------------------------------- */

/* The single value a lineage of single tensor s names (step 2): its initial
 * or its final version, of instance mb 0 for a per-microbatch tensor. */
static int32_t single_value(const lctx *c, uint32_t s, int initial) {
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
  int32_t sv_init = single_value(c, s, 1), sv_fin = single_value(c, s, 0);
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
        VD_CHECK(add_issue(c, VD_LISSUE_NO_VALUE, (int64_t)s, (int64_t)ti, -1, mb,
                           "'%s' (rank %d, mb %d) is annotated with '%s' but never holds a value", pname(c, ti),
                           pt->rank, mb, sname(c, s)));
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
          VD_CHECK(add_issue(c, VD_LISSUE_NO_VALUE, (int64_t)s, (int64_t)ti, -1, mb,
                             "'%s' (rank %d) claims the final value of '%s', which the single plan never "
                             "materialises",
                             pname(c, ti), pt->rank, sname(c, s)));
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
static vd_rc collect(lctx *c, vd_lin_piece **out, size_t *n_out, size_t *n_points, size_t **start_out) {
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
      rc = add_issue(c, VD_LISSUE_NO_SINGLE, -1, (int64_t)ti, -1, -1,
                     "'%s' (rank %d) claims single tensor id %lld, which the single plan does not have",
                     pname(c, (uint32_t)ti), pt->rank, (long long)pt->lin.full);
      continue;
    }
    if (unread_input(c, (uint32_t)ti, s)) {
      rc = add_issue(c, VD_LISSUE_UNREAD, (int64_t)s, (int64_t)ti, -1, -1,
                     "declared input '%s' (rank %d, as '%s') is read by neither step: left out of the "
                     "comparison",
                     pname(c, (uint32_t)ti), pt->rank, sname(c, s));
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
  int r = slice_cmp(x, y, *(const int32_t *)ndp);
  if (r) return r;
  if ((r = cmp_i64(x->part_n, y->part_n))) return r;
  if (x->f != y->f) return x->f < y->f ? -1 : 1; /* f x the slice: another claim */
  if ((r = cmp_i64(x->part_k, y->part_k))) return r;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  return x->value < y->value ? -1 : x->value > y->value;
}

/* Takes *pp (set to NULL once the table owns it) and start (the buckets of
 * collect).  Each bucket is sorted and becomes at most two lineages (its
 * moments), in parallel over buckets: the lineages own disjoint pieces and
 * points (a value is one moment of one tensor), so the table is the serial
 * one at any thread count. */
static vd_rc group(lctx *c, vd_lin_piece **pp, size_t n, size_t n_points, const size_t *start) {
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
      L->svalue = (uint32_t)single_value(c, (uint32_t)s, L->initial);
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

/* ---- step 4: validation ------------------------------------------------- */

/* Slice of piece p in replica d (see vd_lin_piece_at). */
static void shifted(const vd_plan_t *pp, int32_t D, const vd_lin_piece *p, int32_t d, int64_t *lo, int64_t *hi) {
  memcpy(lo, p->lo, sizeof(p->lo));
  memcpy(hi, p->hi, sizeof(p->hi));
  if (!p->all_rep || d <= 0 || d >= D) return;
  const int64_t *sh = pp->tensors[p->ptensor].lin.dp_shift;
  for (int32_t i = 0; i < VD_MAX_DIMS; i++) {
    lo[i] += (int64_t)d * sh[i];
    hi[i] += (int64_t)d * sh[i];
  }
}

static int box_oob(const int64_t *lo, const int64_t *hi, const vd_tensor_t *st) {
  for (int32_t i = 0; i < st->ndim; i++)
    if (lo[i] < 0 || hi[i] > st->shape[i] || lo[i] >= hi[i]) return 1;
  return 0;
}

/* Out of bounds in some replica: the shift is affine in d, so replica 0 and
 * the last replica bound every other.  *bad gets the replica found. */
static int piece_oob(const lctx *c, const vd_lin_piece *p, const vd_tensor_t *st, int32_t *bad) {
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  *bad = p->replica;
  if (box_oob(p->lo, p->hi, st)) return 1;
  if (!p->all_rep) return 0;
  shifted(c->pp, c->D, p, c->D - 1, lo, hi);
  *bad = c->D - 1;
  return box_oob(lo, hi, st);
}

/* Part completeness of the pieces [a, b) of one (slice, part_n, f) group:
 * the parts of f x the slice (an inferred factor makes another claim).
 * Messages are formatted only when an issue is found (this runs for every
 * group of the table). */
static vd_rc check_parts(lctx *c, const vd_lineage *L, size_t a, size_t b) {
  const vd_lin_table *t = c->t;
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  const vd_lin_piece *p0 = &t->pieces[a];
  char sl[96], who[96];
  int64_t n = p0->part_n;
  if (n < 1) {
    vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
    fmt_piece(c, p0, who, sizeof(who));
    return add_issue(c, VD_LISSUE_PARTS, L->stensor, p0->ptensor, p0->replica, p0->mb,
                     "'%s' %s slice %s: %s claims %lld parts", sname(c, L->stensor), moment(L->initial), sl, who,
                     (long long)n);
  }
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &t->pieces[i];
    if (p->part_k < 0 || p->part_k >= n) {
      vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
      fmt_piece(c, p, who, sizeof(who));
      VD_CHECK(add_issue(c, VD_LISSUE_PARTS, L->stensor, p->ptensor, p->replica, p->mb,
                         "'%s' %s slice %s: %s claims part %lld of %lld, outside 0..%lld", sname(c, L->stensor),
                         moment(L->initial), sl, who, (long long)p->part_k, (long long)n, (long long)(n - 1)));
    }
  }
  /* Missing parts: pieces are sorted by k within the group, so the parts
   * absent are the runs between consecutive listed k (and after the last):
   * counted by subtraction, O(listed pieces) whatever n is (counting them
   * one by one took 11 s at n = 2^30 and forever at 2^62).  Only the first
   * few are named. */
  char miss[80];
  size_t mo = 0;
  int64_t n_miss = 0, want = 0;
  for (size_t i = a; i <= b && want < n; i++) {
    int64_t k = i < b ? t->pieces[i].part_k : n;
    if (k < want) continue;
    if (k > n) k = n;
    for (int64_t w = want; w < k && n_miss + (w - want) < 6; w++)
      if (mo < sizeof(miss))
        mo += (size_t)snprintf(miss + mo, sizeof(miss) - mo, "%s%lld", mo ? ", " : "", (long long)w);
    n_miss += k - want;
    want = k + 1;
  }
  if (n_miss == 0) return VD_OK;
  vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
  fmt_piece(c, p0, who, sizeof(who));
  return add_issue(c, VD_LISSUE_PARTS, L->stensor, p0->ptensor, p0->replica, p0->mb,
                   "'%s' %s slice %s as %lld parts: part%s %s%s missing (present: %s)", sname(c, L->stensor),
                   moment(L->initial), sl, (long long)n, n_miss > 1 ? "s" : "", miss, n_miss > 6 ? ", ..." : "",
                   who);
}

/* Ascending order of int64 values, for qsort.  (A hand-written quicksort
 * with a median-of-three pivot was quadratic on the coordinate lists of
 * moving slices, [0, S, b, 2b, ...]: 64 s of lineage table at 30,000
 * replicas; glibc's qsort is O(n log n) on every input.) */
static int cmp_i64_q(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts a[0..m) and drops duplicates; returns the number of distinct values
 * or (size_t)-1 on ENOMEM.  OPTIMIZATION-ONLY: a coordinate list holds every
 * slice's bounds, every replica's translate included, so it is mostly
 * duplicates; they are dropped with a hash set before the sort. */
static size_t sort_unique(int64_t *a, size_t m) {
  size_t cap = 16;
  while (cap < 2 * m) cap *= 2;
  int64_t *tab = vd_malloc(cap * sizeof(*tab));
  uint8_t *used = vd_calloc(cap, 1);
  if (!tab || !used) {
    vd_free(tab);
    vd_free(used);
    return (size_t)-1;
  }
  size_t u = 0;
  for (size_t i = 0; i < m; i++) {
    size_t h = (size_t)((uint64_t)a[i] * 0x9E3779B97F4A7C15ull >> 17) & (cap - 1);
    while (used[h] && tab[h] != a[i]) h = (h + 1) & (cap - 1);
    if (used[h]) continue;
    used[h] = 1;
    tab[h] = a[i];
    a[u++] = a[i];
  }
  vd_free(tab);
  vd_free(used);
  qsort(a, u, sizeof(*a), cmp_i64_q);
  return u;
}

/* (key, tie) pairs of int64: by key, then tie (a total, deterministic order). */
static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  int r = cmp_i64(x[0], y[0]);
  return r ? r : cmp_i64(x[1], y[1]);
}

static size_t lower_i64(const int64_t *a, size_t n, int64_t x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static int box_contains(const vd_lin_piece *y, const vd_lin_piece *x, int32_t nd) {
  for (int32_t i = 0; i < nd; i++)
    if (x->lo[i] < y->lo[i] || x->hi[i] > y->hi[i]) return 0;
  return 1;
}

static int64_t box_volume(const vd_lin_piece *x, int32_t nd) {
  int64_t v = 1;
  for (int32_t i = 0; i < nd; i++) {
    int64_t w = x->hi[i] - x->lo[i];
    v = w > 0 && v > INT64_MAX / w ? INT64_MAX : v * w;
  }
  return v;
}

static vd_rc report_overlap(lctx *c, const vd_lineage *L, const vd_lin_piece *x, const vd_lin_piece *y) {
  int32_t nd = c->sp->tensors[L->stensor].ndim;
  char a[80], b[80], wa[80], wb[80];
  vd_lin_fmt_slice(x->lo, x->hi, nd, a, sizeof(a));
  vd_lin_fmt_slice(y->lo, y->hi, nd, b, sizeof(b));
  fmt_piece(c, x, wa, sizeof(wa));
  fmt_piece(c, y, wb, sizeof(wb));
  return add_issue(c, VD_LISSUE_OVERLAP, L->stensor, y->ptensor, y->replica, y->mb,
                   "'%s' %s: slice %s of %s overlaps slice %s of %s", sname(c, L->stensor), moment(L->initial), b, wb,
                   a, wa);
}

static int boxes_meet(const vd_lin_piece *x, const vd_lin_piece *y, int32_t nd) {
  for (int32_t i = 0; i < nd; i++)
    if (x->lo[i] >= y->hi[i] || y->lo[i] >= x->hi[i]) return 0;
  return 1;
}

/* Fallback for very fine grids: pairwise among slices sorted by lo[0],
 * pruned once a later slice starts past the current one's end; then the
 * volume count decides GAP. */
static vd_rc coverage_sweep(lctx *c, const vd_lineage *L, const vd_lin_piece *B, uint32_t *sl, size_t k) {
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  int32_t nd = st->ndim;
  /* sort (lo[0], piece index) pairs; the comparator reads the first */
  int64_t *key = vd_malloc(k * 2 * sizeof(*key));
  if (!key) return VD_OOM(c->d);
  for (size_t i = 0; i < k; i++) {
    key[2 * i] = B[sl[i]].lo[0];
    key[2 * i + 1] = (int64_t)sl[i];
  }
  qsort(key, k, 2 * sizeof(*key), cmp_pair);
  int overlap = 0;
  int64_t vol = 0, numel = 1;
  for (int32_t i = 0; i < nd; i++) numel *= st->shape[i];
  uint8_t *nested = vd_calloc(k, 1);
  if (!nested) {
    vd_free(key);
    return VD_OOM(c->d);
  }
  for (size_t i = 0; i < k; i++) {
    const vd_lin_piece *x = &B[key[2 * i + 1]];
    for (size_t j = i + 1; j < k; j++) {
      const vd_lin_piece *y = &B[key[2 * j + 1]];
      if (y->lo[0] >= x->hi[0]) break;
      if (!boxes_meet(x, y, nd)) continue;
      if (box_contains(x, y, nd)) nested[j] = 1;
      else if (box_contains(y, x, nd)) nested[i] = 1;
      else if (!overlap) {
        overlap = 1;
        vd_rc rc = report_overlap(c, L, x, y);
        if (rc) {
          vd_free(key);
          vd_free(nested);
          return rc;
        }
      }
    }
  }
  for (size_t i = 0; i < k; i++) {
    if (nested[i]) continue;
    int64_t v = box_volume(&B[key[2 * i + 1]], nd);
    vol = vol > INT64_MAX - v ? INT64_MAX : vol + v;
  }
  vd_free(nested);
  vd_free(key);
  if (overlap || vol == numel) return VD_OK;
  char sh[80];
  fmt_shape(st->shape, nd, sh, sizeof(sh));
  return add_issue(c, VD_LISSUE_GAP, L->stensor, -1, -1, -1, "'%s' %s: slices cover %lld of the %lld elements of %s",
                   sname(c, L->stensor), moment(L->initial), (long long)vol, (long long)numel, sh);
}

/* The grid of one moment: every dimension cut at the slices' bounds (and
 * the tensor's), cells numbered row-major. */
typedef struct {
  int32_t nd;
  int64_t *co[VD_MAX_DIMS]; /* cut coordinates per dimension, sorted, distinct */
  size_t nc[VD_MAX_DIMS], stride[VD_MAX_DIMS];
  size_t cells;
} grid_t;

static void grid_free(grid_t *g) {
  for (int32_t i = 0; i < g->nd; i++) vd_free(g->co[i]);
}

/* The cuts of the k slices sl of B on a tensor of shape st; *big when the
 * grid would pass GRID_MAX cells (then cells and strides are not set). */
static vd_rc grid_cut(lctx *c, const vd_tensor_t *st, const vd_lin_piece *B, const uint32_t *sl, size_t k,
                      grid_t *g, int *big) {
  g->nd = st->ndim;
  g->cells = 1;
  *big = 0;
  for (int32_t i = 0; i < g->nd; i++) {
    g->co[i] = vd_malloc((2 * k + 2) * sizeof(int64_t));
    if (!g->co[i]) return VD_OOM(c->d);
    size_t m = 0;
    g->co[i][m++] = 0;
    g->co[i][m++] = st->shape[i];
    for (size_t j = 0; j < k; j++) {
      g->co[i][m++] = B[sl[j]].lo[i];
      g->co[i][m++] = B[sl[j]].hi[i];
    }
    size_t u = sort_unique(g->co[i], m);
    if (u == (size_t)-1) return VD_OOM(c->d);
    g->nc[i] = u;
    if (u - 1 > 0 && g->cells > GRID_MAX / (u - 1)) *big = 1;
    else g->cells *= u - 1;
  }
  if (*big) return VD_OK;
  /* Row-major strides over cells. */
  size_t s = 1;
  for (int32_t i = g->nd - 1; i >= 0; i--) {
    g->stride[i] = s;
    s *= g->nc[i] - 1;
  }
  return VD_OK;
}

/* Largest slices first, so a cell's owner is the smallest slice covering
 * it so far: a later slice must fit inside it (a finer copy, e.g. ZeRO
 * master shards next to full weights) or it overlaps partially. */
static vd_rc sort_by_volume(lctx *c, const vd_lin_piece *B, uint32_t *sl, size_t k, int32_t nd) {
  int64_t *key = vd_malloc(k * 2 * sizeof(*key));
  if (!key) return VD_OOM(c->d);
  for (size_t j = 0; j < k; j++) {
    key[2 * j] = -box_volume(&B[sl[j]], nd);
    key[2 * j + 1] = (int64_t)j;
  }
  qsort(key, k, 2 * sizeof(*key), cmp_pair);
  uint32_t *tmp = vd_malloc(k * sizeof(*tmp));
  if (!tmp) {
    vd_free(key);
    return VD_OOM(c->d);
  }
  for (size_t j = 0; j < k; j++) tmp[j] = sl[key[2 * j + 1]];
  memcpy(sl, tmp, k * sizeof(*sl));
  vd_free(tmp);
  vd_free(key);
  return VD_OK;
}

/* Each cell's owner: the first slice (in sl's order) covering it, NONE for
 * none.  A slice that overlaps still claims its other cells (so the gap
 * reported is the real one), but visits are capped: after an overlap the
 * coverage verdict is already "bad". */
static void claim_cells(const grid_t *g, const vd_lin_piece *B, const uint32_t *sl, size_t k, uint32_t *owner) {
  int32_t nd = g->nd;
  for (size_t i = 0; i < g->cells; i++) owner[i] = NONE;
  size_t visits = 0, max_visits = 4 * g->cells + 4 * k + 1024;
  for (size_t j = 0; j < k && visits <= max_visits; j++) {
    const vd_lin_piece *x = &B[sl[j]];
    size_t a[VD_MAX_DIMS], b[VD_MAX_DIMS], cur[VD_MAX_DIMS];
    for (int32_t i = 0; i < nd; i++) {
      a[i] = lower_i64(g->co[i], g->nc[i], x->lo[i]);
      b[i] = lower_i64(g->co[i], g->nc[i], x->hi[i]);
      cur[i] = a[i];
    }
    for (;;) {
      size_t idx = 0;
      for (int32_t i = 0; i < nd; i++) idx += cur[i] * g->stride[i];
      visits++;
      /* SOUNDNESS: copies may overlap in any way (rows on some ranks,
       * columns on others, ZeRO shards inside full weights): each slice
       * group is its own claim, proven on its own, and nothing is assumed
       * about how copies combine.  Only the union must cover the tensor. */
      if (owner[idx] == NONE) owner[idx] = sl[j];
      int32_t i = nd - 1;
      for (; i >= 0; i--) {
        if (++cur[i] < b[i]) break;
        cur[i] = a[i];
      }
      if (i < 0) break;
    }
  }
}

/* One GAP issue naming the first cell no slice owns, if any. */
static vd_rc report_gap(lctx *c, const vd_lineage *L, const vd_tensor_t *st, const grid_t *g, const uint32_t *owner) {
  int32_t nd = g->nd;
  size_t first = NONE, n_gap = 0;
  for (size_t i = 0; i < g->cells; i++)
    if (owner[i] == NONE) {
      if (first == NONE) first = i;
      n_gap++;
    }
  if (!n_gap) return VD_OK;
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  size_t r = first;
  for (int32_t i = 0; i < nd; i++) {
    size_t ci = r / g->stride[i];
    r %= g->stride[i];
    lo[i] = g->co[i][ci];
    hi[i] = g->co[i][ci + 1];
  }
  char sl_s[96], sh[80];
  vd_lin_fmt_slice(lo, hi, nd, sl_s, sizeof(sl_s));
  fmt_shape(st->shape, nd, sh, sizeof(sh));
  return add_issue(c, VD_LISSUE_GAP, L->stensor, -1, -1, -1, "'%s' %s: slice %s of %s is not covered%s",
                   sname(c, L->stensor), moment(L->initial), sl_s, sh, n_gap > 1 ? " (nor are other cells)" : "");
}

/* Coverage of one moment: sl lists one piece of B per distinct slice (k > 0). */
static vd_rc coverage(lctx *c, const vd_lineage *L, const vd_lin_piece *B, uint32_t *sl, size_t k) {
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  grid_t g = {0};
  uint32_t *owner = NULL;
  int big = 0;
  vd_rc rc = grid_cut(c, st, B, sl, k, &g, &big);
  if (rc) goto done;
  if (big) {
    rc = coverage_sweep(c, L, B, sl, k);
    goto done;
  }
  if ((rc = sort_by_volume(c, B, sl, k, g.nd)) != VD_OK) goto done;
  owner = vd_malloc(g.cells * sizeof(*owner));
  if (!owner) {
    rc = VD_OOM(c->d);
    goto done;
  }
  claim_cells(&g, B, sl, k, owner);
  rc = report_gap(c, L, st, &g, owner);
done:
  grid_free(&g);
  vd_free(owner);
  return rc;
}

/* A data input (role input, per-microbatch) whose pieces, shifted over the
 * replicas and microbatches, end at another extent than the single tensor
 * along exactly one dimension (every other dimension spans the tensor): the
 * two plans read different global batches.  One BATCH issue names that
 * dimension and both extents; the out-of-bounds and gap issues it would
 * otherwise cause are not repeated.  Returns 1 when reported. */
static int batch_mismatch(lctx *c, const vd_lineage *L, vd_rc *rc) {
  const vd_lin_table *t = c->t;
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  if (st->role != VD_ROLE_INPUT || st->scope != VD_SCOPE_PER_MB || L->n_pieces == 0) return 0;
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  size_t a = L->piece_off, e = a + L->n_pieces;
  for (int32_t i = 0; i < st->ndim; i++) {
    lo[i] = INT64_MAX;
    hi[i] = INT64_MIN;
    for (size_t k = a; k < e; k++) {
      int64_t l1[VD_MAX_DIMS], h1[VD_MAX_DIMS];
      shifted(c->pp, c->D, &t->pieces[k], c->D - 1, l1, h1); /* the last replica's translate */
      int64_t l = t->pieces[k].lo[i] < l1[i] ? t->pieces[k].lo[i] : l1[i];
      int64_t h = t->pieces[k].hi[i] > h1[i] ? t->pieces[k].hi[i] : h1[i];
      if (l < lo[i]) lo[i] = l;
      if (h > hi[i]) hi[i] = h;
    }
  }
  int32_t dim = -1;
  for (int32_t i = 0; i < st->ndim; i++) {
    if (lo[i] == 0 && hi[i] == st->shape[i]) continue;
    if (dim >= 0 || lo[i] != 0) return 0;
    dim = i;
  }
  if (dim < 0) return 0;
  for (size_t i = 0; i < t->n_issues; i++) /* once per tensor, not per moment */
    if (t->issues[i].kind == VD_LISSUE_BATCH && t->issues[i].stensor == (int64_t)L->stensor) return 1;
  const vd_lin_piece *p0 = &t->pieces[a];
  int64_t rows = p0->hi[dim] - p0->lo[dim];
  *rc = add_issue(c, VD_LISSUE_BATCH, L->stensor, p0->ptensor, -1, -1,
                  "data input '%s' dim %d: the parallel plan's %d replica(s) x %d microbatch(es) of %lld read "
                  "[0:%lld), the single-device plan reads %lld: the plans run different global batches",
                  sname(c, L->stensor), (int)dim, (int)c->D, (int)(c->pp->world.nm > 0 ? c->pp->world.nm : 1),
                  (long long)rows, (long long)hi[dim], (long long)st->shape[dim]);
  return 1;
}

/* Scratch of one validating thread. */
typedef struct {
  uint32_t *sl, *vsl;
  vd_lin_piece *vp;
  size_t cap, cap_vp;
} vscratch;

static void vscratch_free(vscratch *x) {
  vd_free(x->sl);
  vd_free(x->vsl);
  vd_free(x->vp);
}

/* Bounds, parts and coverage of lineage li. */
static vd_rc validate_one(lctx *c, size_t li, vscratch *x) {
  const vd_lin_table *t = c->t;
  vd_rc rc = VD_OK;
  const vd_lineage *L = &t->lins[li];
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  size_t a = L->piece_off, e = a + L->n_pieces;
  int any_oob = 0;
  if (batch_mismatch(c, L, &rc)) return rc;
  for (size_t i = a; i < e; i++) {
    const vd_lin_piece *p0 = &t->pieces[i];
    int32_t bad;
    if (!piece_oob(c, p0, st, &bad)) continue;
    any_oob = 1;
    vd_lin_piece pb = *p0, *p = &pb;
    shifted(c->pp, c->D, p0, bad, pb.lo, pb.hi);
    pb.replica = bad;
    char sl_s[96], sh[80], who[96];
    vd_lin_fmt_slice(p->lo, p->hi, st->ndim, sl_s, sizeof(sl_s));
    fmt_shape(st->shape, st->ndim, sh, sizeof(sh));
    fmt_piece(c, p, who, sizeof(who));
    VD_CHECK(add_issue(c, VD_LISSUE_OUT_OF_BOUNDS, L->stensor, p->ptensor, p->replica, p->mb,
                       "%s claims slice %s of '%s' %s, outside (or empty in) its shape %s", who, sl_s,
                       sname(c, L->stensor), moment(L->initial), sh));
  }
  size_t k = 0;
  for (size_t i = a; i < e;) {
    size_t j = i + 1;
    while (j < e && slice_cmp(&t->pieces[i], &t->pieces[j], st->ndim) == 0) j++;
    if (VD_GROW(x->sl, x->cap, k + 1)) return VD_OOM(c->d);
    x->sl[k++] = (uint32_t)i;
    for (size_t g0 = i; g0 < j;) {
      size_t g1 = g0 + 1;
      while (g1 < j && t->pieces[g1].part_n == t->pieces[g0].part_n && t->pieces[g1].f == t->pieces[g0].f) g1++;
      VD_CHECK(check_parts(c, L, g0, g1));
      g0 = g1;
    }
    i = j;
  }
  if (any_oob || k == 0) return VD_OK;
  /* Every replica's translate of a moving all_rep piece is a slice of
   * its own: coverage is over all of them. */
  size_t m = 0;
  for (size_t j = 0; j < k; j++) m += vd_lin_piece_moves(t, x->sl[j]) ? (size_t)c->D : 1;
  if (m > x->cap_vp) {
    vd_free(x->vp);
    vd_free(x->vsl);
    x->cap_vp = m;
    x->vp = vd_malloc(m * sizeof(*x->vp));
    x->vsl = vd_malloc(m * sizeof(*x->vsl));
    if (!x->vp || !x->vsl) {
      x->cap_vp = 0;
      return VD_OOM(c->d);
    }
  }
  size_t q = 0;
  for (size_t j = 0; j < k; j++) {
    const vd_lin_piece *p = &t->pieces[x->sl[j]];
    int32_t nrep = vd_lin_piece_moves(t, x->sl[j]) ? c->D : 1;
    for (int32_t d = 0; d < nrep; d++, q++) {
      x->vp[q] = *p;
      shifted(c->pp, c->D, p, d, x->vp[q].lo, x->vp[q].hi);
      x->vp[q].replica = d;
      x->vsl[q] = (uint32_t)q;
    }
  }
  return coverage(c, L, x->vp, x->vsl, m);
}

static int tissue_cmp(const void *a, const void *b) {
  const tissue_t *x = a, *y = b;
  if (x->li != y->li) return x->li < y->li ? -1 : 1;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Validates every lineage, in parallel over lineages (OpenMP, the threads
 * the caller set).  Each thread's issues are tagged with their lineage and
 * merged in lineage order, as the serial loop would have pushed them (the
 * issue cap keeps the same ones); a BATCH issue is kept once per tensor
 * (its two moments may be checked by different threads). */
static vd_rc validate(lctx *c) {
  vd_lin_table *t = c->t;
  int nt = t->n_lins < 64 ? 1 : omp_get_max_threads();
  if (nt < 1) nt = 1;
  lctx *tc = vd_calloc((size_t)nt, sizeof(*tc));
  vd_diag *td = vd_calloc((size_t)nt, sizeof(*td));
  vd_rc rc = VD_OK;
  int failed = 0;
  if (!tc || !td) {
    vd_free(tc);
    vd_free(td);
    return VD_OOM(c->d);
  }
#pragma omp parallel num_threads(nt)
  {
    int me = omp_get_thread_num();
    lctx *my = &tc[me];
    vscratch x = {0};
    *my = *c;
    my->d = &td[me];
    my->to_sink = 1;
    my->sink = NULL;
    my->n_sink = my->cap_sink = 0;
    vd_diag_clear(my->d);
#pragma omp for schedule(dynamic, 8)
    for (size_t li = 0; li < t->n_lins; li++) {
      int stop;
#pragma omp atomic read
      stop = failed;
      if (stop) continue;
      my->cur_li = (uint32_t)li;
      /* every 64 lineages: the heartbeat's count, and a stop request */
      vd_rc r = VD_OK;
      if ((li & 63) == 0) {
        vd_ctl_add(VD_CTL_LIN_CHECKED, 64);
        if (vd_ctl_stopped()) r = vd_diag_set(my->d, VD_ECANCELED, __FILE__, __LINE__, NULL, NULL, NULL, "interrupted");
      }
      if (r == VD_OK) r = validate_one(my, li, &x);
      if (r != VD_OK) {
#pragma omp critical(vd_lin_validate_err)
        if (!failed) {
          failed = 1;
          rc = r;
          if (c->d) *c->d = *my->d;
        }
      }
    }
    vscratch_free(&x);
  }
  size_t n = 0;
  for (int i = 0; i < nt; i++) n += tc[i].n_sink;
  tissue_t *all = rc == VD_OK && n ? vd_malloc(n * sizeof(*all)) : NULL;
  if (rc == VD_OK && n && !all) rc = VD_OOM(c->d);
  if (all) {
    size_t q = 0;
    for (int i = 0; i < nt; i++)
      for (size_t j = 0; j < tc[i].n_sink; j++) all[q++] = tc[i].sink[j];
    qsort(all, n, sizeof(*all), tissue_cmp);
    for (size_t i = 0; i < n && rc == VD_OK; i++) {
      int dup = 0;
      if (all[i].is.kind == VD_LISSUE_BATCH)
        for (size_t j = 0; j < t->n_issues && !dup; j++)
          dup = t->issues[j].kind == VD_LISSUE_BATCH && t->issues[j].stensor == all[i].is.stensor;
      if (!dup && vd_issue_push(&t->issues, &t->n_issues, &c->cap_issues, VD_LIN_MAX_ISSUES, &t->n_issues_dropped,
                                &all[i].is))
        rc = VD_OOM(c->d);
    }
  }
  vd_free(all);
  for (int i = 0; i < nt; i++) vd_free(tc[i].sink);
  vd_free(tc);
  vd_free(td);
  return rc;
}

/* Required outputs: final weights and optimizer state that the single plan
 * updates, and the loss. */
static vd_rc required(lctx *c) {
  vd_lin_table *t = c->t;
  const vd_graph_t *gs = t->gs;
  for (size_t s = 0; s < c->sp->n_tensors; s++) {
    const vd_tensor_t *st = &c->sp->tensors[s];
    int32_t sv = single_value(c, (uint32_t)s, 0);
    if (sv < 0) continue;
    int req = st->role == VD_ROLE_LOSS ||
              ((st->role == VD_ROLE_WEIGHT || st->role == VD_ROLE_OPTSTATE) && gs->values[sv].producer >= 0);
    if (!req) continue;
    int32_t li = t->lin_of_svalue_final[sv];
    if (li >= 0) {
      t->lins[li].required = 1;
      continue;
    }
    VD_CHECK(add_issue(c, VD_LISSUE_UNCOVERED, (int64_t)s, -1, -1, -1,
                       "single %s '%s' (final value) has no lineage in the parallel plan: nothing proves it",
                       vd_role_names[st->role], sname(c, (uint32_t)s)));
  }
  return VD_OK;
}

/* ---- public ------------------------------------------------------------ */

vd_rc vd_lin_build(const vd_graph_t *gs, const vd_graph_t *gp, vd_lin_table *t, vd_diag *d) {
  memset(t, 0, sizeof(*t));
  t->gs = gs;
  t->gp = gp;
  if (VD_NEVER(!gs || !gp || !gs->plan || !gp->plan))
    return VD_ERR(d, VD_EINTERNAL, NULL, "lineage", "graphs", "expected two built graphs");
  if (VD_NEVER(gp->replicas != 1))
    return VD_ERR(d, VD_EINTERNAL, NULL, "lineage", "gp", "expected a replica-0 graph (expand_replicas = 0), got %d replicas",
                  gp->replicas);
  lctx c;
  memset(&c, 0, sizeof(c));
  c.t = t;
  c.d = d;
  c.sp = gs->plan;
  c.pp = gp->plan;
  c.D = c.pp->world.replicas > 0 ? c.pp->world.replicas : 1;
  t->replicas = c.D;
  vd_lin_piece *pieces = NULL;
  size_t n = 0, np = 0, *start = NULL;
  vd_rc rc = collect(&c, &pieces, &n, &np, &start);
  if (rc == VD_OK && vd_ctl_stopped()) rc = VD_ERR(d, VD_ECANCELED, NULL, NULL, NULL, "interrupted");
  if (rc == VD_OK) rc = group(&c, &pieces, n, np, start);
  vd_free(pieces);
  vd_free(start);
  if (rc == VD_OK && vd_ctl_stopped()) rc = VD_ERR(d, VD_ECANCELED, NULL, NULL, NULL, "interrupted");
  if (rc == VD_OK) rc = validate(&c);
  if (rc == VD_OK) rc = required(&c);
  if (rc != VD_OK) {
    vd_lin_free(t);
    return rc;
  }
  if (t->n_issues > 1) qsort(t->issues, t->n_issues, sizeof(*t->issues), issue_cmp);
  return VD_OK;
}

void vd_lin_free(vd_lin_table *t) {
  if (!t) return;
  vd_free(t->lins);
  vd_free(t->pieces);
  vd_free(t->point_first);
  vd_free(t->point_pieces);
  vd_free(t->lin_of_svalue_initial);
  vd_free(t->lin_of_svalue_final);
  vd_free(t->issues);
  vd_free(t->warnings);
  memset(t, 0, sizeof(*t));
}

int32_t vd_lin_piece_of(const vd_lin_table *t, uint32_t v, int32_t replica) {
  if (!t || !t->point_first || !t->gp || v >= t->gp->n_values || replica < 0) return -1;
  int32_t f = t->point_first[v];
  if (f < 0) return -1;
  int32_t D = t->gp->plan->world.replicas > 0 ? t->gp->plan->world.replicas : 1;
  if (replica >= D) return -1;
  uint32_t p0 = t->point_pieces[f];
  if (t->pieces[p0].all_rep) return (int32_t)p0;
  return (int32_t)t->point_pieces[(size_t)f + (size_t)replica];
}

void vd_lin_piece_at(const vd_lin_table *t, uint32_t piece, int32_t replica, int64_t lo[VD_MAX_DIMS],
                     int64_t hi[VD_MAX_DIMS]) {
  const vd_lin_piece *p = &t->pieces[piece];
  if (!p->all_rep || !t->gp || !t->gp->plan) {
    memcpy(lo, p->lo, sizeof(p->lo));
    memcpy(hi, p->hi, sizeof(p->hi));
    return;
  }
  shifted(t->gp->plan, t->replicas > 0 ? t->replicas : 1, p, replica, lo, hi);
}

int vd_lin_piece_moves(const vd_lin_table *t, uint32_t piece) {
  const vd_lin_piece *p = &t->pieces[piece];
  if (!p->all_rep || !t->gp || !t->gp->plan) return 0;
  const int64_t *sh = t->gp->plan->tensors[p->ptensor].lin.dp_shift;
  for (int32_t i = 0; i < VD_MAX_DIMS; i++)
    if (sh[i]) return 1;
  return 0;
}
