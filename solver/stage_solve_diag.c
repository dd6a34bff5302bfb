/*
 * solver/stage_solve_diag.c - step (6) of proving one stage (stage_solve.c): a
 * counterexample classified by further symbolic checks on the same terms
 * (missing or extra reduction, scale factor, permuted slices), recorded in
 * the verdict, with where in the stage it sits.
 */
#include "stage_solve_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/limits.h"
#include "../common/mem.h"

/* ---- diagnosis ------------------------------------------------------------ */

/* 1 when a[i] = b[i] for all i is proved (fast path or solver); 0 otherwise
 * (including inconclusive: a diagnosis is only claimed when proved). */
/* *eq = 1 when a == b is proved.  A solver failure other than out of
 * memory only leaves the hypothesis unproved (the diagnosis is a hint on a
 * verdict already reached); VD_ENOMEM is returned (with c->d set). */
static vd_rc proves_equal(solve_ctx *c, const vd_term *a, const vd_term *b, size_t n, int *eq) {
  vd_smt_result r;
  memset(&r, 0, sizeof(r));
  vd_diag scratch;
  vd_diag_clear(&scratch);
  vd_rc rc = vd_smt_check(c->s, a, b, n, &r, &scratch);
  *eq = rc == VD_OK && r.verdict == VD_SMT_EQUIVALENT;
  vd_smt_result_free(&r);
  if (rc == VD_ENOMEM) return VD_OOM(c->d);
  return VD_OK;
}

void vd_stage_solve_i_unflatten(const int64_t *lo, const int64_t *hi, int ndim, int64_t flat, int64_t *elem) {
  for (int i = ndim - 1; i >= 0; i--) {
    int64_t w = hi[i] - lo[i];
    elem[i] = lo[i] + (w > 0 ? flat % w : 0);
    flat = w > 0 ? flat / w : 0;
  }
}

/* Gathers block `blk` (of size b along dimension dim) of a row-major
 * tensor of extents ext[] (flat terms src) into dst, in row-major order. */
static size_t gather_block(const vd_term *src, const int64_t *ext, int ndim, int dim, int64_t b, int64_t blk,
                           vd_term *dst) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= ext[i];
  int64_t inner = 1;
  for (int i = dim + 1; i < ndim; i++) inner *= ext[i];
  size_t k = 0;
  for (int64_t e = 0; e < n; e++) {
    int64_t at = (e / inner) % ext[dim];
    if (at / b == blk) dst[k++] = src[e];
  }
  return k;
}

/* PERMUTED_SLICES inside a target slice: tries k = 2..8 equal blocks along
 * each dimension; when every block of the candidate equals a distinct block
 * of the single slice, and the order is not the identity, the diagnosis is
 * PERMUTED_SLICES with the order in v->factor.  At most 64 equality checks
 * per dimension and k (small: shapes are reduced). */
static vd_rc block_permutation(solve_ctx *c, const vd_stage_target *t, const vd_smt_tensor *slice, const vd_term *acc,
                               vd_stage_verdict *v) {
  const vd_stage_value *sv = &c->st->vals[t->svalue];
  int nd = sv->ndim;
  int64_t ext[VD_MAX_DIMS], n = 1;
  for (int i = 0; i < nd; i++) {
    ext[i] = t->rhi[i] - t->rlo[i];
    n *= ext[i];
  }
  if ((size_t)slice->numel != (size_t)n || n <= 1) return VD_OK;
  vd_term *a = vd_calloc((size_t)n, sizeof(*a)), *b = vd_calloc((size_t)n, sizeof(*b));
  if (!a || !b) {
    vd_free(a);
    vd_free(b);
    return VD_OOM(c->d);
  }
  vd_rc rc = VD_OK;
  for (int dim = 0; dim < nd && v->diagnosis == VD_DX_WRONG_VALUE; dim++) {
    for (int64_t k = 2; k <= 8 && k <= ext[dim] && v->diagnosis == VD_DX_WRONG_VALUE; k++) {
      if (ext[dim] % k) continue;
      int64_t bs = ext[dim] / k, perm[8];
      int used[8] = {0}, ok = 1, ident = 1;
      for (int64_t i = 0; i < k && ok; i++) {
        size_t m = gather_block(acc, ext, nd, dim, bs, i, a);
        perm[i] = -1;
        for (int64_t j = 0; j < k && perm[i] < 0; j++) {
          if (used[j]) continue;
          gather_block(slice->t, ext, nd, dim, bs, j, b);
          int eq = 0;
          if ((rc = proves_equal(c, a, b, m, &eq)) != VD_OK) goto out;
          if (eq) {
            perm[i] = j;
            used[j] = 1;
          }
        }
        ok = perm[i] >= 0;
        ident &= perm[i] == i;
      }
      if (!ok || ident) continue;
      v->diagnosis = VD_DX_PERMUTED_SLICES;
      size_t at = (size_t)snprintf(v->factor, sizeof(v->factor), "the %lld blocks of dim %d hold blocks [", (long long)k, dim);
      for (int64_t i = 0; i < k && at < sizeof(v->factor); i++)
        at += (size_t)snprintf(v->factor + at, sizeof(v->factor) - at, "%s%lld", i ? "," : "", (long long)perm[i]);
      if (at < sizeof(v->factor)) snprintf(v->factor + at, sizeof(v->factor) - at, "]");
    }
  }
out:
  vd_free(a);
  vd_free(b);
  return rc;
}

/* What the classification of one target reads and writes. */
typedef struct {
  solve_ctx *c;
  const vd_stage_target *t;
  const uint32_t *pp;  /* the target's (piece, stage value) pairs */
  vd_smt_tensor slice; /* the single value's slice (the target) */
  vd_term *acc;        /* the candidate: the flagged piece or the parts' sum */
  vd_term *scaled;     /* scratch, n terms */
  size_t n;
  vd_stage_verdict *v;
} classify_t;

/* The candidate tensor: the flagged piece, or the sum of the parts. */
static vd_rc candidate(classify_t *k, int32_t piece) {
  const vd_smt_tensor *cand = NULL;
  if (piece >= 0)
    for (uint32_t j = 0; j < k->t->n_pieces; j++)
      if ((int32_t)k->pp[2 * j] == piece) cand = &k->c->ten[k->pp[2 * j + 1]];
  if (!cand) return vd_stage_solve_i_parts_sum(k->c, k->t, &k->slice, k->acc);
  for (size_t e = 0; e < k->n; e++) k->acc[e] = cand->t[e];
  return VD_OK;
}

/* SCALE: candidate = f * slice for the factor f seen in the model
 * (EXTRA_REDUCTION when f is the number of copies). */
static vd_rc try_scale(classify_t *k, const vd_smt_diff *df) {
  solve_ctx *c = k->c;
  if (!(df && df->single.value != 0.0 && df->single.exact && df->parallel.exact)) return VD_OK;
  vd_term pv = vd_smt_num_rat(c->s, df->parallel.exact), sv = vd_smt_num_rat(c->s, df->single.exact);
  vd_term f = pv && sv ? vd_smt_simplify(c->s, vd_smt_div(c->s, pv, sv)) : NULL;
  double fv = 0;
  char fexact[96] = "";
  if (!(f && vd_smt_numeral(c->s, f, &fv, fexact, sizeof(fexact)) && fv != 1.0)) return VD_OK;
  for (size_t e = 0; e < k->n; e++) k->scaled[e] = vd_smt_mul(c->s, f, k->slice.t[e]);
  int eq = 0;
  VD_CHECK(proves_equal(c, k->acc, k->scaled, k->n, &eq));
  if (eq) {
    double copies = (double)k->t->n_pieces;
    k->v->diagnosis = (k->t->part_n <= 1 && copies >= 2 && fv == copies) ? VD_DX_EXTRA_REDUCTION : VD_DX_SCALE;
    snprintf(k->v->factor, sizeof(k->v->factor), "%s", fexact);
  }
  return VD_OK;
}

/* The number of distinct parts (part_k) among the target's pieces. */
static int64_t distinct_parts(const classify_t *k) {
  int64_t parts_seen = 0;
  for (uint32_t j = 0; j < k->t->n_pieces; j++) {
    int64_t pk = k->c->lt->pieces[k->pp[2 * j]].part_k;
    int first = 1;
    for (uint32_t i = 0; i < j && first; i++)
      if (k->c->lt->pieces[k->pp[2 * i]].part_k == pk) first = 0;
    parts_seen += first;
  }
  return parts_seen;
}

/* MISSING_REDUCTION: each part (the whole slice when part_n = 1) has cpp
 * copies that should all equal it, but they hold partial sums over groups
 * of g ranks that were never reduced: the sum of all pieces is then
 * cpp/g times the slice instead of cpp times.  Tried for every g >= 2
 * dividing cpp (g = cpp: each part's copies sum to the part), then, for
 * whole copies, g = 1: copies that differ (the stage failed) but sum to
 * cpp times the slice average to it, each one copy's share of a mean that
 * no reducer averaged (an SGD step on a replica's own gradient). */
static vd_rc try_missing_reduction(classify_t *k) {
  solve_ctx *c = k->c;
  const vd_stage_target *t = k->t;
  size_t n = k->n;
  int64_t parts_seen = distinct_parts(k);
  if (t->n_pieces <= (uint32_t)parts_seen) return VD_OK;
  vd_term *scaled = k->scaled, *want = NULL;
  for (size_t e = 0; e < n; e++) scaled[e] = NULL;
  for (uint32_t j = 0; j < t->n_pieces; j++) {
    const vd_smt_tensor *pt = &c->ten[k->pp[2 * j + 1]];
    for (size_t e = 0; e < n; e++) scaled[e] = scaled[e] ? vd_smt_add(c->s, scaled[e], pt->t[e]) : pt->t[e];
  }
  int64_t cpp = (int64_t)t->n_pieces / parts_seen;
  if (cpp * parts_seen == (int64_t)t->n_pieces && !(want = vd_calloc(n ? n : 1, sizeof(*want)))) return VD_OOM(c->d);
  vd_rc rc = VD_OK;
  int eq = 0;
  for (int64_t g = cpp; want && g >= 1; g--) {
    if (cpp % g || (g == 1 && (t->part_n > 1 || cpp < 2))) continue;
    vd_term f = vd_smt_num_int(c->s, cpp / g);
    for (size_t e = 0; e < n; e++) want[e] = cpp / g == 1 ? k->slice.t[e] : vd_smt_mul(c->s, f, k->slice.t[e]);
    if ((rc = proves_equal(c, scaled, want, n, &eq)) != VD_OK) break;
    if (eq) {
      k->v->diagnosis = VD_DX_MISSING_REDUCTION;
      if (g == 1)
        snprintf(k->v->factor, sizeof(k->v->factor), "the %lld copies average to it: their mean is missing", (long long)cpp);
      else if (cpp / g != 1)
        snprintf(k->v->factor, sizeof(k->v->factor), "partial sums over groups of %lld", (long long)g);
      break;
    }
  }
  vd_free(want);
  return rc;
}

/* PERMUTED_SLICES: the candidate equals another slice of the same width
 * of the single value (tried along each dimension, aligned shifts). */
static vd_rc try_other_slice(classify_t *k) {
  solve_ctx *c = k->c;
  const vd_stage_target *t = k->t;
  const vd_stage_value *sv = &c->st->vals[t->svalue];
  vd_stage_verdict *v = k->v;
  for (int dim = 0; dim < sv->ndim && v->diagnosis == VD_DX_WRONG_VALUE; dim++) {
    int64_t w = t->rhi[dim] - t->rlo[dim];
    if (w <= 0 || w == sv->rshape[dim]) continue;
    for (int64_t start = 0; start + w <= sv->rshape[dim]; start += w) {
      if (start == t->rlo[dim]) continue;
      int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
      memcpy(lo, t->rlo, sizeof(lo));
      memcpy(hi, t->rhi, sizeof(hi));
      lo[dim] = start;
      hi[dim] = start + w;
      vd_smt_tensor other = {0};
      vd_diag scratch;
      vd_diag_clear(&scratch);
      vd_rc rc = vd_smt_tensor_slice(&c->ten[t->svalue], lo, hi, &other, &scratch);
      if (rc == VD_ENOMEM) return VD_OOM(c->d);
      if (rc != VD_OK) break; /* a slice outside the value: no candidate here */
      int eq = 0;
      if ((size_t)other.numel == k->n) rc = proves_equal(c, k->acc, other.t, k->n, &eq);
      vd_smt_tensor_free(&other);
      VD_CHECK(rc);
      if (eq) {
        v->diagnosis = VD_DX_PERMUTED_SLICES;
        snprintf(v->factor, sizeof(v->factor), "holds dim %d [%lld:%lld) of the reduced single tensor", dim,
                 (long long)start, (long long)(start + w));
        break;
      }
    }
  }
  return VD_OK;
}

/* Tries MISSING_REDUCTION, EXTRA_REDUCTION / SCALE and PERMUTED_SLICES on
 * target ti, given one differing element's values (p parallel, s single).
 * v->diagnosis stays WRONG_VALUE when none is proved.  Errors: VD_ENOMEM
 * (a failure of the machinery, never a diagnosis), or target_slice's. */
vd_rc vd_stage_solve_i_classify(solve_ctx *c, uint32_t ti, int32_t piece, const vd_smt_diff *df, vd_stage_verdict *v) {
  classify_t k = {.c = c, .t = &c->st->targets[ti], .v = v};
  k.pp = target_pairs(c->st, k.t);
  v->diagnosis = VD_DX_WRONG_VALUE;
  vd_rc rc = vd_stage_solve_i_target_slice(c, k.t, &k.slice);
  if (rc != VD_OK) goto done;
  k.n = (size_t)k.slice.numel;
  k.acc = vd_calloc(k.n ? k.n : 1, sizeof(*k.acc));
  k.scaled = vd_calloc(k.n ? k.n : 1, sizeof(*k.scaled));
  if (!k.acc || !k.scaled) {
    rc = VD_OOM(c->d);
    goto done;
  }
  if ((rc = candidate(&k, piece)) != VD_OK) goto done;
  if ((rc = try_scale(&k, df)) != VD_OK || v->diagnosis != VD_DX_WRONG_VALUE) goto done;
  if ((rc = try_missing_reduction(&k)) != VD_OK || v->diagnosis != VD_DX_WRONG_VALUE) goto done;
  if ((rc = try_other_slice(&k)) != VD_OK) goto done;
  /* PERMUTED_SLICES within the slice: the candidate's k equal blocks along
   * one dimension are the slice's blocks in another order (an all_gather
   * that concatenates in process-group order instead of slice order). */
  if (v->diagnosis == VD_DX_WRONG_VALUE) rc = block_permutation(c, k.t, &k.slice, k.acc, v);
done:
  vd_free(k.acc);
  vd_free(k.scaled);
  vd_smt_tensor_free(&k.slice);
  return rc;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Fills the counterexample (elements, copies, flagged pieces) from the
 * solver's differing pairs. */
vd_rc vd_stage_solve_i_record_cex(solve_ctx *c, const pair_list *pl, vd_smt_result *r, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  size_t max_elems = c->o->max_cex_elems ? c->o->max_cex_elems : VD_LIM_CEX_ELEMS;
  /* Inputs: move them over. */
  v->inputs = r->inputs;
  v->n_inputs = r->n_inputs;
  r->inputs = NULL;
  r->n_inputs = 0;
  v->flagged_pieces = vd_calloc(r->n_diffs ? r->n_diffs : 1, sizeof(int32_t));
  v->elems = vd_calloc(max_elems, sizeof(*v->elems));
  if (!v->flagged_pieces || !v->elems) return VD_OOM(c->d);
  for (size_t i = 0; i < r->n_diffs; i++) {
    const pair_meta *m = &pl->meta[r->diffs[i].index];
    if (m->piece >= 0) {
      size_t k = 0;
      while (k < v->n_flagged && v->flagged_pieces[k] != m->piece) k++;
      if (k == v->n_flagged) v->flagged_pieces[v->n_flagged++] = m->piece;
    } else {
      /* A sum of parts disagrees: every piece of the target is implicated. */
      const vd_stage_target *t = &st->targets[m->target];
      const uint32_t *pp = target_pairs(st, t);
      int32_t *nf = vd_realloc_array(v->flagged_pieces, v->n_flagged + t->n_pieces + 1, sizeof(int32_t));
      if (!nf) return VD_OOM(c->d);
      v->flagged_pieces = nf;
      for (uint32_t j = 0; j < t->n_pieces; j++) {
        size_t k = 0;
        while (k < v->n_flagged && v->flagged_pieces[k] != (int32_t)pp[2 * j]) k++;
        if (k == v->n_flagged) v->flagged_pieces[v->n_flagged++] = (int32_t)pp[2 * j];
      }
    }
  }
  qsort(v->flagged_pieces, v->n_flagged, sizeof(int32_t), cmp_i32);

  /* Elements: the first differing elements, each with every copy's value. */
  for (size_t i = 0; i < r->n_diffs && v->n_elems < max_elems; i++) {
    const pair_meta *m = &pl->meta[r->diffs[i].index];
    int seen = 0;
    for (size_t k = 0; k < v->n_elems; k++) {
      const vd_stage_target *t = &st->targets[m->target];
      int64_t e[VD_MAX_DIMS] = {0};
      vd_stage_solve_i_unflatten(t->rlo, t->rhi, st->vals[t->svalue].ndim, m->elem, e);
      if (v->elems[k].target == m->target && memcmp(v->elems[k].elem, e, sizeof(e)) == 0) seen = 1;
    }
    if (seen) continue;
    const vd_stage_target *t = &st->targets[m->target];
    vd_stage_cex_elem *ce = &v->elems[v->n_elems++];
    memset(ce, 0, sizeof(*ce));
    ce->target = m->target;
    vd_stage_solve_i_unflatten(t->rlo, t->rhi, st->vals[t->svalue].ndim, m->elem, ce->elem);
    snprintf(ce->single_exact, sizeof(ce->single_exact), "%s", r->diffs[i].single.exact ? r->diffs[i].single.exact : "?");
    ce->single_value = r->diffs[i].single.value;
    /* Copies: every pair of this (target, element). */
    ce->copy_off = (uint32_t)v->n_copies;
    for (size_t q = 0; q < pl->n; q++) {
      if (pl->meta[q].target != m->target || pl->meta[q].elem != m->elem) continue;
      vd_stage_cex_copy *nc = vd_realloc_array(v->copies, v->n_copies + 1, sizeof(*nc));
      if (!nc) return VD_OOM(c->d);
      v->copies = nc;
      vd_stage_cex_copy *cp = &v->copies[v->n_copies++];
      memset(cp, 0, sizeof(*cp));
      cp->piece = pl->meta[q].piece;
      /* A pair absent from the diffs holds the single value in the model. */
      snprintf(cp->exact, sizeof(cp->exact), "%s", ce->single_exact);
      cp->value = ce->single_value;
      for (size_t k = 0; k < r->n_diffs; k++)
        if (r->diffs[k].index == q) {
          snprintf(cp->exact, sizeof(cp->exact), "%s", r->diffs[k].parallel.exact ? r->diffs[k].parallel.exact : "?");
          cp->value = r->diffs[k].parallel.value;
          cp->disagrees = 1;
        }
      ce->n_copies++;
    }
  }
  return VD_OK;
}

/* "target 'name' [lo:hi,..] parts N; operators: grouped_mlp x5, view x15":
 * where a limit was hit (the stage id is the report's), so the reader can
 * tell which lineage and which operator mix is hard. */
void vd_stage_solve_i_stage_where(const solve_ctx *c, char *buf, size_t n) {
  const vd_stage *st = c->st;
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t ti = 0; ti < st->n_targets && ti < 2 && at < n; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    at += (size_t)snprintf(buf + at, n - at, "%starget '%s' [", ti ? ", " : "", vd_plan_s(c->lt->gs->plan, tensor_of(c, sv)->name));
    for (int k = 0; k < sv->ndim && at < n; k++)
      at += (size_t)snprintf(buf + at, n - at, "%s%lld:%lld", k ? "," : "", (long long)t->lo[k], (long long)t->hi[k]);
    if (at < n) at += (size_t)snprintf(buf + at, n - at, "]");
    if (t->part_n > 1 && at < n) at += (size_t)snprintf(buf + at, n - at, " parts %lld", (long long)t->part_n);
  }
  if (st->n_targets > 2 && at < n) at += (size_t)snprintf(buf + at, n - at, " (+%u targets)", st->n_targets - 2);
  /* Operator mix, in registry order (deterministic). */
  uint32_t count[VD_OP__COUNT] = {0}, other = 0;
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    if (st->nodes[i].op >= 0 && st->nodes[i].op < VD_OP__COUNT) count[st->nodes[i].op]++;
    else other++;
  }
  if (at < n) at += (size_t)snprintf(buf + at, n - at, "; operators:");
  int first = 1;
  for (int op = 0; op < VD_OP__COUNT && at < n; op++)
    if (count[op]) {
      at += (size_t)snprintf(buf + at, n - at, "%s %s x%u", first ? "" : ",", vd_op_name((vd_op_id)op), count[op]);
      first = 0;
    }
  if (other && at < n) snprintf(buf + at, n - at, "%s other x%u", first ? "" : ",", other);
}
