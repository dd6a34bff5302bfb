/*
 * lineage/lineage_check.c - step 4 of the lineage table (lineage.c): every
 * lineage validated, all findings reported as vd_lin_issue, never assumed
 * away: NO_SINGLE, OUT_OF_BOUNDS, OVERLAP, GAP, PARTS, UNCOVERED, NO_VALUE,
 * BATCH.  Coverage (GAP) on a compressed grid, or by a sorted sweep beyond
 * GRID_MAX cells (lineage.c's header says what each can tell).
 *
 * Invariant: lineages are validated in parallel, each thread's issues into
 * its own sink, merged in lineage order: the same issues at any thread count.
 */
#include "lineage_int.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/mem.h"

/* ---- step 4: validation ------------------------------------------------- */

/* Slice of piece p in replica d (see vd_lin_piece_at). */
void vd_lin_i_shifted(const vd_plan_t *pp, int32_t D, const vd_lin_piece *p, int32_t d, int64_t *lo, int64_t *hi) {
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
  vd_lin_i_shifted(c->pp, c->D, p, c->D - 1, lo, hi);
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
    vd_lin_i_fmt_piece(c, p0, who, sizeof(who));
    return vd_lin_i_add_issue(c, VD_LISSUE_PARTS, L->stensor, p0->ptensor, p0->replica, p0->mb,
                     "'%s' %s slice %s: %s claims %lld parts", vd_lin_i_sname(c, L->stensor), vd_lin_i_moment(L->initial), sl, who,
                     (long long)n);
  }
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &t->pieces[i];
    if (p->part_k < 0 || p->part_k >= n) {
      vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
      vd_lin_i_fmt_piece(c, p, who, sizeof(who));
      VD_CHECK(vd_lin_i_add_issue(c, VD_LISSUE_PARTS, L->stensor, p->ptensor, p->replica, p->mb,
                         "'%s' %s slice %s: %s claims part %lld of %lld, outside 0..%lld", vd_lin_i_sname(c, L->stensor),
                         vd_lin_i_moment(L->initial), sl, who, (long long)p->part_k, (long long)n, (long long)(n - 1)));
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
  vd_lin_i_fmt_piece(c, p0, who, sizeof(who));
  return vd_lin_i_add_issue(c, VD_LISSUE_PARTS, L->stensor, p0->ptensor, p0->replica, p0->mb,
                   "'%s' %s slice %s as %lld parts: part%s %s%s missing (present: %s)", vd_lin_i_sname(c, L->stensor),
                   vd_lin_i_moment(L->initial), sl, (long long)n, n_miss > 1 ? "s" : "", miss, n_miss > 6 ? ", ..." : "",
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
  int r = vd_lin_i_cmp_i64(x[0], y[0]);
  return r ? r : vd_lin_i_cmp_i64(x[1], y[1]);
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
  vd_lin_i_fmt_piece(c, x, wa, sizeof(wa));
  vd_lin_i_fmt_piece(c, y, wb, sizeof(wb));
  return vd_lin_i_add_issue(c, VD_LISSUE_OVERLAP, L->stensor, y->ptensor, y->replica, y->mb,
                   "'%s' %s: slice %s of %s overlaps slice %s of %s", vd_lin_i_sname(c, L->stensor), vd_lin_i_moment(L->initial), b, wb,
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
  vd_lin_i_fmt_shape(st->shape, nd, sh, sizeof(sh));
  return vd_lin_i_add_issue(c, VD_LISSUE_GAP, L->stensor, -1, -1, -1, "'%s' %s: slices cover %lld of the %lld elements of %s",
                   vd_lin_i_sname(c, L->stensor), vd_lin_i_moment(L->initial), (long long)vol, (long long)numel, sh);
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
  vd_lin_i_fmt_shape(st->shape, nd, sh, sizeof(sh));
  return vd_lin_i_add_issue(c, VD_LISSUE_GAP, L->stensor, -1, -1, -1, "'%s' %s: slice %s of %s is not covered%s",
                   vd_lin_i_sname(c, L->stensor), vd_lin_i_moment(L->initial), sl_s, sh, n_gap > 1 ? " (nor are other cells)" : "");
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
      vd_lin_i_shifted(c->pp, c->D, &t->pieces[k], c->D - 1, l1, h1); /* the last replica's translate */
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
  *rc = vd_lin_i_add_issue(c, VD_LISSUE_BATCH, L->stensor, p0->ptensor, -1, -1,
                  "data input '%s' dim %d: the parallel plan's %d replica(s) x %d microbatch(es) of %lld read "
                  "[0:%lld), the single-device plan reads %lld: the plans run different global batches",
                  vd_lin_i_sname(c, L->stensor), (int)dim, (int)c->D, (int)(c->pp->world.nm > 0 ? c->pp->world.nm : 1),
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
    vd_lin_i_shifted(c->pp, c->D, p0, bad, pb.lo, pb.hi);
    pb.replica = bad;
    char sl_s[96], sh[80], who[96];
    vd_lin_fmt_slice(p->lo, p->hi, st->ndim, sl_s, sizeof(sl_s));
    vd_lin_i_fmt_shape(st->shape, st->ndim, sh, sizeof(sh));
    vd_lin_i_fmt_piece(c, p, who, sizeof(who));
    VD_CHECK(vd_lin_i_add_issue(c, VD_LISSUE_OUT_OF_BOUNDS, L->stensor, p->ptensor, p->replica, p->mb,
                       "%s claims slice %s of '%s' %s, outside (or empty in) its shape %s", who, sl_s,
                       vd_lin_i_sname(c, L->stensor), vd_lin_i_moment(L->initial), sh));
  }
  size_t k = 0;
  for (size_t i = a; i < e;) {
    size_t j = i + 1;
    while (j < e && vd_lin_i_slice_cmp(&t->pieces[i], &t->pieces[j], st->ndim) == 0) j++;
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
      vd_lin_i_shifted(c->pp, c->D, p, d, x->vp[q].lo, x->vp[q].hi);
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
vd_rc vd_lin_i_validate(lctx *c) {
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
vd_rc vd_lin_i_required(lctx *c) {
  vd_lin_table *t = c->t;
  const vd_graph_t *gs = t->gs;
  for (size_t s = 0; s < c->sp->n_tensors; s++) {
    const vd_tensor_t *st = &c->sp->tensors[s];
    int32_t sv = vd_lin_i_single_value(c, (uint32_t)s, 0);
    if (sv < 0) continue;
    int req = st->role == VD_ROLE_LOSS ||
              ((st->role == VD_ROLE_WEIGHT || st->role == VD_ROLE_OPTSTATE) && gs->values[sv].producer >= 0);
    if (!req) continue;
    int32_t li = t->lin_of_svalue_final[sv];
    if (li >= 0) {
      t->lins[li].required = 1;
      continue;
    }
    VD_CHECK(vd_lin_i_add_issue(c, VD_LISSUE_UNCOVERED, (int64_t)s, -1, -1, -1,
                       "single %s '%s' (final value) has no lineage in the parallel plan: nothing proves it",
                       vd_role_names[st->role], vd_lin_i_sname(c, (uint32_t)s)));
  }
  return VD_OK;
}
