/*
 * solver/stage_solve_cex.c - SOUNDNESS-NEUTRAL: the counterexample of a stage evaluated
 * numerically, a check of a verdict already reached (stage_solve.c).
 */
#include "stage_solve_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/limits.h"
#include "../common/mem.h"
#include "../common/text.h"

/* ---- the counterexample, evaluated numerically ------------------------------ */

/* SOUNDNESS-NEUTRAL (a check of a verdict already reached, never a
 * verdict): the stage is run again on doubles, through the numeric
 * evaluators of ops/ops_numeric.c (vd_op_eval) with the real kernels, on
 * the reduced shapes, from the counterexample's input values: single leaves
 * and the free parts of partial sums are read by their symbol names (a
 * symbol the model leaves out is 0, as Z3's model completion gives), the
 * parallel leaves are built from their lineage as the encoder builds them.
 * The disagreement is reproduced when a target element's copy differs from
 * its single value by more than 1e-9 relative.  The symbolic counterexample
 * may owe its difference to a free interpretation of a kernel (exp as a
 * constant function): then 3 random inputs (fixed seed) are tried, and a
 * difference there still shows the plans disagree on concrete numbers.
 * Neither: VD_CEX_EVAL_NOT, which the report flags.  Reduced stages run
 * without the COUNT scaling of contractions on both sides (as the numeric
 * oracle runs a reduced pair): a smaller instance of the same computation. */

typedef struct {
  double **val;          /* per stage value, rshape numel doubles */
  const vd_smt_value *in; size_t n_in; /* counterexample inputs, sorted by name (NULL: random) */
  uint64_t rng;
  /* A repair tried by locate (below): once the last of the nodes rep[0..n_rep)
   * has run, output 0 of each is replaced by their elementwise sum
   * (rep_max 0) or max (1), as an all_reduce of the copies would give. */
  const uint32_t *rep; size_t n_rep; int rep_max;
  /* Another repair: node pos_node reads its integer attribute pos_key
   * (a position the shape reduction scaled) as pos_value; -1: none. */
  int64_t pos_node; const char *pos_key; int64_t pos_value;
  const uint32_t *pos_more; size_t n_pos_more; /* more nodes read pos_value (the same rank's) */
} num_ctx;

static int by_input_name(const void *k, const void *e) { return strcmp(k, ((const vd_smt_value *)e)->name); }

static double rnd(num_ctx *n) {
  vd_smt_i_xorshift(&n->rng);
  return ((double)(n->rng % 2001) - 1000.0) / 250.0; /* [-4, 4] */
}

static double sym_value(num_ctx *n, const char *name, int is_int) {
  if (!n->in) {
    double x = rnd(n);
    return is_int ? (double)(n->rng >> 40 & 1) : x; /* index inputs: 0 or 1, valid rows at any reduced size */
  }
  const vd_smt_value *v = bsearch(name, n->in, n->n_in, sizeof(vd_smt_value), by_input_name);
  return v ? (is_int ? (double)llround(v->value) : v->value) : 0.0;
}

static void idx_name(char *buf, size_t size, const char *prefix, const vd_op_shape *sh, int64_t flat) {
  int64_t idx[VD_MAX_DIMS];
  for (int i = sh->ndim - 1; i >= 0; i--) {
    idx[i] = sh->d[i] ? flat % sh->d[i] : 0;
    flat = sh->d[i] ? flat / sh->d[i] : 0;
  }
  size_t at = (size_t)snprintf(buf, size, "%s[", prefix);
  for (int32_t i = 0; i < sh->ndim && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, i ? ",%lld" : "%lld", (long long)idx[i]);
  if (at < size) snprintf(buf + at, size - at, "]");
}

static int64_t numel_of(const vd_op_shape *sh) {
  int64_t n = 1;
  for (int i = 0; i < sh->ndim; i++) n *= sh->d[i];
  return n;
}

/* Flat index in a tensor of shape `full` of element `flat` of its slice [lo, hi). */
static int64_t slice_at(const vd_op_shape *full, const int64_t *lo, const int64_t *hi, int64_t flat) {
  int64_t idx[VD_MAX_DIMS];
  for (int i = full->ndim - 1; i >= 0; i--) {
    int64_t w = hi[i] - lo[i];
    idx[i] = lo[i] + (w > 0 ? flat % w : 0);
    flat = w > 0 ? flat / w : 0;
  }
  int64_t o = 0;
  for (int i = 0; i < full->ndim; i++) o = o * full->d[i] + idx[i];
  return o;
}

/* The values [*lo, *hi) that index leaf i may take on the reduced shapes,
 * for the random inputs: every lookup that reads it (through copies: a view
 * of the labels) with offset 0, or checked (nll_loss's pick, which raises
 * outside its range), selects among its operand's reduced extent from its
 * (scaled) offset; an unchecked lookup with an offset (a vocabulary shard
 * that masks the others' labels) takes any value.  0 when no lookup bounds
 * it (the caller draws 0 or 1, valid rows at any reduced size) or the
 * bounds leave no value.  Drawing across the range puts labels in every
 * vocabulary shard, where 0 and 1 only reach the first. */
static int index_span(solve_ctx *c, uint32_t i, int64_t *lo, int64_t *hi) {
  const vd_stage *st = c->st;
  uint8_t *in = vd_calloc((size_t)st->n_vals + 1, 1);
  if (!in) return 0;
  in[i] = 1;
  int bounded = 0;
  *lo = 0, *hi = INT64_MAX;
  for (uint32_t ni = 0; ni < st->n_nodes; ni++) {
    const vd_stage_node *sn = &st->nodes[ni];
    if (sn->op < 0 || sn->op >= VD_OP__COUNT) continue;
    const vd_op_index *ix = vd_op_index_of((vd_op_id)sn->op);
    if (ix->slot >= 0 && (uint32_t)ix->slot < sn->n_in && in[st->idx[sn->in_off + (uint32_t)ix->slot]]) {
      uint32_t t = ix->t;
      if (ix->from_out ? t >= sn->n_out : t >= sn->n_in) continue;
      const vd_stage_value *ov = &st->vals[st->idx[(ix->from_out ? sn->out_off : sn->in_off) + t]];
      if (ix->ndim && ov->ndim != ix->ndim) continue;
      if (ix->dim >= ov->ndim) continue;
      node_view nv;
      vd_stage_solve_i_node_view(c, ni, &nv);
      vd_plan_t scratch = {0};
      const vd_plan_t *ap;
      const vd_node_t *an;
      if (!nv.p || !nv.pn || vd_stage_solve_i_node_attrs(c, nv.p, nv.pn, sn, &scratch, &ap, &an) != VD_OK) {
        vd_plan_free(&scratch);
        bounded = 0, *hi = 0; /* unknown: no range */
        break;
      }
      int64_t off = ix->offset ? vd_node_attr_int(ap, an, ix->offset, 0) : 0;
      int checked = vd_node_attr_int(ap, an, "checked", 0) != 0;
      vd_plan_free(&scratch);
      if (off != 0 && !checked) continue;
      int64_t top = off + ov->rshape[ix->dim];
      if (top < *hi) *hi = top;
      if (checked && off > *lo) *lo = off;
      bounded = 1;
      continue;
    }
    if (!vd_op_copies_elements(sn->op)) continue;
    int reads = 0;
    for (uint32_t k = 0; k < sn->n_in && !reads; k++) reads = in[st->idx[sn->in_off + k]];
    for (uint32_t k = 0; reads && k < sn->n_out; k++) in[st->idx[sn->out_off + k]] = 1;
  }
  vd_free(in);
  return bounded && *hi > *lo;
}

static void leaf_fill(solve_ctx *c, num_ctx *n, uint32_t i) {
  const vd_stage_value *sv = &c->st->vals[i];
  const vd_tensor_t *t = tensor_of(c, sv);
  int is_int = is_int_dtype(t->dtype);
  vd_op_shape sh;
  shape_of(sv, &sh);
  int64_t ne = numel_of(&sh);
  char prefix[320], name[400];
  if (sv->side == 0) {
    snprintf(prefix, sizeof(prefix), "%s@v%u", vd_plan_s(c->lt->gs->plan, t->name), sv->value);
  } else if (sv->leaf_piece < 0 || sv->hyp_svalue < 0) {
    snprintf(prefix, sizeof(prefix), "%s@p%u.r%d", vd_plan_s(c->lt->gp->plan, t->name), sv->value, sv->replica);
  } else {
    const vd_lin_piece *pc = &c->lt->pieces[sv->leaf_piece];
    const vd_stage_value *hv = &c->st->vals[sv->hyp_svalue];
    vd_op_shape hs;
    shape_of(hv, &hs);
    const double *src = n->val[sv->hyp_svalue];
    for (int64_t e = 0; e < ne; e++) n->val[i][e] = src[slice_at(&hs, sv->rlo, sv->rhi, e)];
    if (pc->part_n <= 1) {
      for (int64_t e = 0; pc->f != 1.0 && e < ne; e++) n->val[i][e] *= pc->f;
      return;
    }
    char key[256], hname[160];
    snprintf(hname, sizeof(hname), "%s@v%u", vd_plan_s(c->lt->gs->plan, tensor_of(c, hv)->name), hv->value);
    vd_smt_slice_key(key, sizeof(key), hname, sv->ndim, sv->rlo, sv->rhi);
    /* parts 0..n-2 free, part n-1 the remainder (vd_smt_partial_parts) */
    for (int64_t e = 0; e < ne; e++) {
      double slice = n->val[i][e], rest = slice;
      for (int64_t j = 0; j + 1 < pc->part_n; j++) {
        snprintf(prefix, sizeof(prefix), "%s%%%lld.%lld", key, (long long)pc->part_n, (long long)j);
        idx_name(name, sizeof(name), prefix, &sh, e);
        double pj = sym_value(n, name, 0);
        rest -= pj;
        if (j == pc->part_k) n->val[i][e] = pj;
      }
      if (pc->part_k == pc->part_n - 1) n->val[i][e] = rest;
      n->val[i][e] *= pc->f;
    }
    return;
  }
  int64_t lo, hi;
  if (!n->in && is_int && index_span(c, i, &lo, &hi)) {
    for (int64_t e = 0; e < ne; e++) {
      vd_smt_i_xorshift(&n->rng);
      n->val[i][e] = (double)(lo + (int64_t)((n->rng >> 20) % (uint64_t)(hi - lo)));
    }
    return;
  }
  for (int64_t e = 0; e < ne; e++) {
    idx_name(name, sizeof(name), prefix, &sh, e);
    n->val[i][e] = sym_value(n, name, is_int);
  }
}

/* A one-node copy of (p, pn) in *out whose integer attribute key is v. */
static vd_rc with_attr(const vd_plan_t *p, const vd_node_t *pn, const char *key, int64_t v, vd_plan_t *out) {
  uint32_t idx;
  VD_CHECK(vd_stage_solve_i_lone_node(p, pn, out, &idx));
  for (uint32_t a = 0; a < pn->n_attr; a++) {
    const vd_attr_t *at = &p->attrs[pn->attr_off + a];
    if (!strcmp(vd_plan_s(p, at->key), key)) VD_CHECK(vd_plan_attr_int(out, idx, key, v));
    else VD_CHECK(vd_plan_attr_copy(out, idx, p, at));
  }
  return VD_OK;
}

static vd_rc eval_node(solve_ctx *c, num_ctx *n, uint32_t ni, vd_diag *d) {
  const vd_stage *st = c->st;
  node_view nv;
  vd_stage_solve_i_node_view(c, ni, &nv);
  const vd_stage_node *sn = nv.sn;
  size_t na = (size_t)sn->n_in + sn->n_out + 1;
  const double **in = vd_calloc(na, sizeof(*in));
  double **out = vd_calloc(na, sizeof(*out));
  vd_op_shape *sh = vd_calloc(na, sizeof(*sh));
  vd_plan_t scratch = {0};
  vd_rc rc = VD_OK;
  if (!in || !out || !sh) {
    rc = VD_ENOMEM;
    goto done;
  }
  for (uint32_t k = 0; k < sn->n_in; k++) in[k] = n->val[st->idx[sn->in_off + k]];
  for (uint32_t k = 0; k < sn->n_out; k++) out[k] = n->val[st->idx[sn->out_off + k]];
  vd_stage_solve_i_node_shapes(st, sn, sh);
  const vd_plan_t *ap;
  const vd_node_t *an;
  solve_ctx quiet = *c;
  quiet.d = d;
  if ((rc = vd_stage_solve_i_node_attrs(&quiet, nv.p, nv.pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
  vd_plan_t moved = {0};
  int moves = n->pos_node == (int64_t)ni;
  for (size_t q = 0; q < n->n_pos_more && !moves; q++) moves = n->pos_more[q] == ni;
  if (moves) {
    if ((rc = with_attr(ap, an, n->pos_key, n->pos_value, &moved)) != VD_OK) {
      vd_plan_free(&moved);
      goto done;
    }
    ap = &moved;
    an = &moved.nodes[0];
  }
  vd_op_call oc = {.op = sn->op, .plan = ap, .node = an, .record = nv.record, .n_in = sn->n_in, .n_out = sn->n_out,
                   .n_part = vd_stage_solve_i_node_parts(nv.gn, sn), .in = in, .in_shape = sh, .out = out, .out_shape = sh + sn->n_in,
                   .diag = d};
  rc = vd_op_eval(&oc);
  vd_plan_free(&moved);
done:
  vd_plan_free(&scratch);
  vd_free(in);
  vd_free(out);
  vd_free(sh);
  return rc;
}

static int differs(double a, double b) {
  double m = fabs(b) > 1.0 ? fabs(b) : 1.0;
  return !(fabs(a - b) <= 1e-9 * m); /* NaN differs */
}

/* The repair of num_ctx: output 0 of the nodes n->rep, reduced elementwise. */
static void reduce_copies(solve_ctx *c, num_ctx *n) {
  const vd_stage *st = c->st;
  uint32_t v0 = st->idx[st->nodes[n->rep[0]].out_off];
  vd_op_shape sh;
  shape_of(&st->vals[v0], &sh);
  int64_t ne = numel_of(&sh);
  for (int64_t e = 0; e < ne; e++) {
    double acc = n->val[v0][e];
    for (size_t j = 1; j < n->n_rep; j++) {
      double x = n->val[st->idx[st->nodes[n->rep[j]].out_off]][e];
      acc = n->rep_max ? (x > acc ? x : acc) : acc + x;
    }
    for (size_t j = 0; j < n->n_rep; j++) n->val[st->idx[st->nodes[n->rep[j]].out_off]][e] = acc;
  }
}

/* Runs the stage once from n's inputs; *hit = 1 when some target copy
 * differs from its single value (only_elems: the counterexample's flagged
 * elements, else every element). */
static vd_rc eval_once(solve_ctx *c, num_ctx *n, const vd_stage_verdict *v, int only_elems, int *hit,
                       char *note, size_t nn, vd_diag *d) {
  const vd_stage *st = c->st;
  *hit = 0;
  for (uint32_t i = 0; i < st->n_vals; i++)
    if (st->vals[i].side == 0 && st->vals[i].producer < 0) leaf_fill(c, n, i);
  int leaves_done = 0;
  for (uint32_t ni = 0; ni <= st->n_nodes; ni++) {
    if (!leaves_done && (ni == st->n_nodes || st->nodes[ni].side == 1)) {
      for (uint32_t i = 0; i < st->n_vals; i++)
        if (st->vals[i].side == 1 && st->vals[i].producer < 0) leaf_fill(c, n, i);
      leaves_done = 1;
    }
    if (ni < st->n_nodes) VD_CHECK(eval_node(c, n, ni, d));
    if (ni < st->n_nodes && n->n_rep && ni == n->rep[n->n_rep - 1]) reduce_copies(c, n);
  }
  for (uint32_t ti = 0; ti < st->n_targets && !*hit; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const uint32_t *pp = target_pairs(st, t);
    vd_op_shape ss;
    shape_of(&st->vals[t->svalue], &ss);
    int64_t ne = 1;
    for (int k = 0; k < ss.ndim; k++) ne *= t->rhi[k] - t->rlo[k];
    for (int64_t e = 0; e < ne && !*hit; e++) {
      if (only_elems) {
        int want = 0;
        int64_t el[VD_MAX_DIMS];
        vd_stage_solve_i_unflatten(t->rlo, t->rhi, ss.ndim, e, el);
        for (size_t q = 0; q < v->n_elems && !want; q++)
          want = v->elems[q].target == ti && !memcmp(v->elems[q].elem, el, sizeof(int64_t) * (size_t)ss.ndim);
        if (!want) continue;
      }
      double sv = n->val[t->svalue][slice_at(&ss, t->rlo, t->rhi, e)];
      if (t->part_n <= 1) {
        for (uint32_t j = 0; j < t->n_pieces && !*hit; j++)
          if (differs(n->val[pp[2 * j + 1]][e], c->lt->pieces[pp[2 * j]].f * sv)) {
            *hit = 1;
            snprintf(note, nn, "target %u element %lld: a copy evaluates to %.17g, the single value to %.17g", ti,
                     (long long)e, n->val[pp[2 * j + 1]][e], sv);
          }
      } else {
        double sum = 0;
        for (int64_t k = 0; k < t->part_n; k++)
          for (uint32_t j = 0; j < t->n_pieces; j++)
            if (c->lt->pieces[pp[2 * j]].part_k == k) {
              sum += n->val[pp[2 * j + 1]][e];
              break;
            }
        if (t->n_pieces) sv *= c->lt->pieces[pp[0]].f;
        if (differs(sum, sv)) {
          *hit = 1;
          snprintf(note, nn, "target %u element %lld: the sum of the parts evaluates to %.17g, the single value to %.17g",
                   ti, (long long)e, sum, sv);
        }
        for (uint32_t j = 0; j < t->n_pieces && !*hit; j++)
          for (uint32_t q = 0; q < j; q++)
            if (c->lt->pieces[pp[2 * q]].part_k == c->lt->pieces[pp[2 * j]].part_k) {
              if (differs(n->val[pp[2 * j + 1]][e], n->val[pp[2 * q + 1]][e])) {
                *hit = 1;
                snprintf(note, nn, "target %u element %lld: two replicas of part %lld evaluate to %.17g and %.17g", ti,
                         (long long)e, (long long)c->lt->pieces[pp[2 * j]].part_k, n->val[pp[2 * j + 1]][e],
                         n->val[pp[2 * q + 1]][e]);
              }
              break;
            }
      }
    }
  }
  return VD_OK;
}

/* ---- where the disagreement enters ----------------------------------------- */

/* SOUNDNESS-NEUTRAL (a hint for the report's "first diverging parallel
 * node", never a verdict).  On the values that reproduced the
 * disagreement, a parallel value has a twin when a single-device value of
 * the stage holds the same numbers: the same flat sequence (a reshape), or
 * an aligned box of a value of as many dims (a shard).  The copies that
 * disagree have none; walking back from their producers through values
 * without a twin reaches the nodes where the disagreement enters: nodes
 * whose inputs all have a twin (or are the stage's leaves).  The earliest
 * such node is the hint.  Two sharper readings of it: its value holds a
 * single value's numbers in another arrangement (VD_LOC_PERMUTED: a gather
 * along the wrong dim, blocks in another order), or its copies on the other
 * ranks (the nodes of the same source name and operator), summed or maxed
 * elementwise as an all_reduce would, make every target agree when the
 * stage runs again (VD_LOC_REDUCE: the reduction is missing there).  A
 * value legitimately without a twin (a partial sum, a per-shard max) is a
 * root too, and the report names a root only with the sharper reading.
 * The repair is tried at the region's first LOC_REPAIRS nodes that have
 * copies, in stage order (a sum of exp never all-reduced sits after the
 * root, a shifted logit without a twin).  Costs: one pass over value pairs
 * (bounded by LOC_WORK elements compared) and at most 2 * LOC_REPAIRS + 1
 * re-runs of the stage. */
#define LOC_WORK 4000000
#define LOC_REPAIRS 16

static int same_elems(const double *a, const double *b, int64_t ne) {
  for (int64_t e = 0; e < ne; e++)
    if (differs(a[e], b[e])) return 0;
  return 1;
}

/* Whether parallel value pv equals a single value's numbers (flat, or an
 * aligned box); *work counts the elements compared. */
static int has_twin(solve_ctx *c, num_ctx *n, uint32_t pv, int64_t *work) {
  const vd_stage *st = c->st;
  vd_op_shape ps;
  shape_of(&st->vals[pv], &ps);
  int64_t ne = numel_of(&ps);
  if (ne <= 0) return 1;
  for (uint32_t s = 0; s < st->n_vals && *work < LOC_WORK; s++) {
    if (st->vals[s].side) continue;
    vd_op_shape ss;
    shape_of(&st->vals[s], &ss);
    int64_t sn = numel_of(&ss);
    if (sn == ne) {
      *work += ne;
      if (same_elems(n->val[pv], n->val[s], ne)) return 1;
    }
    if (ss.ndim != ps.ndim || sn <= ne) continue;
    int64_t nb[VD_MAX_DIMS], boxes = 1;
    int ok = 1;
    for (int d = 0; d < ps.ndim && ok; d++) {
      ok = ps.d[d] > 0 && ss.d[d] % ps.d[d] == 0;
      nb[d] = ok ? ss.d[d] / ps.d[d] : 1;
      boxes *= nb[d];
    }
    for (int64_t b = 0; ok && b < boxes && boxes <= 64; b++) {
      int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS], q = b;
      for (int d = ps.ndim - 1; d >= 0; d--) {
        lo[d] = (q % nb[d]) * ps.d[d];
        hi[d] = lo[d] + ps.d[d];
        q /= nb[d];
      }
      int eq = 1;
      for (int64_t e = 0; e < ne && eq; e++) eq = !differs(n->val[pv][e], n->val[s][slice_at(&ss, lo, hi, e)]);
      *work += ne;
      if (eq) return 1;
    }
  }
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Whether parallel value pv (floating point, not constant) holds the
 * numbers of a single value of its size in another order; *which gets it. */
static vd_rc rearranges(solve_ctx *c, num_ctx *n, uint32_t pv, int *hit, uint32_t *which) {
  const vd_stage *st = c->st;
  *hit = 0;
  if (is_int_dtype(tensor_of(c, &st->vals[pv])->dtype)) return VD_OK;
  vd_op_shape ps;
  shape_of(&st->vals[pv], &ps);
  int64_t ne = numel_of(&ps);
  if (ne < 2) return VD_OK;
  double *a = vd_malloc((size_t)ne * sizeof(double)), *b = vd_malloc((size_t)ne * sizeof(double));
  if (!a || !b) {
    vd_free(a);
    vd_free(b);
    return VD_OOM(c->d);
  }
  memcpy(a, n->val[pv], (size_t)ne * sizeof(double));
  qsort(a, (size_t)ne, sizeof(double), cmp_double);
  int distinct = differs(a[0], a[ne - 1]);
  for (uint32_t s = 0; distinct && s < st->n_vals && !*hit; s++) {
    vd_op_shape ss;
    if (st->vals[s].side) continue;
    shape_of(&st->vals[s], &ss);
    if (numel_of(&ss) != ne) continue;
    memcpy(b, n->val[s], (size_t)ne * sizeof(double));
    qsort(b, (size_t)ne, sizeof(double), cmp_double);
    if (same_elems(a, b, ne)) *hit = 1, *which = s;
  }
  vd_free(a);
  vd_free(b);
  return VD_OK;
}

/* The stage's parallel nodes that are copies of node k on other ranks (same
 * plan source name and operator, output 0 of the same reduced shape), k
 * among them, ascending; 0 when there are none or a node between the first
 * and the last copy reads one (a reduction could not sit there). */
static size_t copies_of(solve_ctx *c, uint32_t k, uint32_t *out, size_t cap) {
  const vd_stage *st = c->st;
  node_view kv;
  vd_stage_solve_i_node_view(c, k, &kv);
  const vd_stage_node *kn = &st->nodes[k];
  if (!kn->n_out) return 0;
  const char *name = vd_plan_s(kv.p, kv.pn->name);
  if (!name[0]) return 0;
  const vd_stage_value *kval = &st->vals[st->idx[kn->out_off]];
  size_t m = 0;
  for (uint32_t j = 0; j < st->n_nodes && m < cap; j++) {
    const vd_stage_node *sn = &st->nodes[j];
    if (!sn->side || sn->op != kn->op || !sn->n_out) continue;
    node_view jv;
    vd_stage_solve_i_node_view(c, j, &jv);
    const vd_stage_value *jval = &st->vals[st->idx[sn->out_off]];
    if (strcmp(vd_plan_s(jv.p, jv.pn->name), name) || jval->ndim != kval->ndim ||
        memcmp(jval->rshape, kval->rshape, sizeof(int64_t) * (size_t)kval->ndim))
      continue;
    if (j != k && jv.pn->rank == kv.pn->rank && sn->replica == kn->replica) continue; /* the same rank again */
    out[m++] = j;
  }
  if (m < 2) return 0;
  for (uint32_t j = out[0] + 1; j < out[m - 1]; j++) {
    const vd_stage_node *sn = &st->nodes[j];
    int member = 0;
    for (size_t q = 0; q < m; q++) member |= out[q] == j;
    for (uint32_t i = 0; !member && i < sn->n_in; i++) {
      int32_t pq = st->vals[st->idx[sn->in_off + i]].producer;
      for (size_t q = 0; q < m; q++)
        if (pq == (int32_t)out[q]) return 0;
    }
  }
  return m;
}

/* The value a stage node reads for integer attribute key: the stage's
 * override (a position the shape reduction scaled) or the plan's; 0 when
 * the node has no such integer attribute. */
static int int_attr(solve_ctx *c, uint32_t k, const char *key, int64_t *val) {
  const vd_stage_node *sn = &c->st->nodes[k];
  node_view nv;
  vd_stage_solve_i_node_view(c, k, &nv);
  for (uint32_t q = 0; q < sn->n_ovr; q++) {
    const vd_attr_override *o = &c->st->ovr[sn->ovr_off + q];
    if (o->key != VD_OVR_DIVISOR && !strcmp(vd_plan_s(nv.p, o->key), key)) {
      *val = o->value;
      return 1;
    }
  }
  const vd_attr_t *a = vd_node_attr(nv.p, nv.pn, key);
  if (!a || a->kind != VD_ATTR_INT) return 0;
  *val = a->v.i;
  return 1;
}

/* The position repair at the group of copies of node k: an integer
 * attribute (a slice start, a vocabulary range) that every copy reads
 * alike, moved on one copy by a multiple of an extent of its input 0,
 * makes every target agree: that copy uses another rank's position.  Sets
 * v (VD_LOC_POSITION); returns 1 when some run was made; *rc the error. */
static int try_positions(solve_ctx *c, num_ctx *n, vd_stage_verdict *v, const num_ctx *again, uint32_t k,
                         vd_rc *rc) {
  const vd_stage *st = c->st;
  uint32_t cp[64];
  size_t m = copies_of(c, k, cp, 64);
  int ran = 0;
  *rc = VD_OK;
  const vd_stage_node *kn = &st->nodes[k];
  if (!kn->n_in) return 0;
  node_view kv;
  vd_stage_solve_i_node_view(c, k, &kv);
  /* a node alone in the stage is compared with its copies in the plan */
  size_t ranks = m;
  if (!m) {
    cp[0] = k, m = 1, ranks = 1;
    for (size_t q = 0; q < kv.p->n_nodes; q++) {
      const vd_node_t *on = &kv.p->nodes[q];
      ranks += on != kv.pn && on->rank != kv.pn->rank && !strcmp(vd_plan_s(kv.p, on->name), vd_plan_s(kv.p, kv.pn->name)) &&
               !strcmp(vd_node_op(kv.p, on), vd_node_op(kv.p, kv.pn));
    }
    if (ranks < 2) return 0;
  }
  const vd_stage_value *in0 = &st->vals[st->idx[kn->in_off]];
  for (uint32_t a = 0; a < kv.pn->n_attr && v->loc_kind != VD_LOC_POSITION; a++) {
    const vd_attr_t *at = &kv.p->attrs[kv.pn->attr_off + a];
    if (at->kind != VD_ATTR_INT) continue;
    const char *key = vd_plan_s(kv.p, at->key);
    int64_t val, other;
    int same = int_attr(c, k, key, &val);
    for (size_t j = 1; j < m && same; j++) same = int_attr(c, cp[j], key, &other) && other == val;
    for (size_t q = 0; q < kv.p->n_nodes && same && ranks > m; q++) { /* the plan's copies */
      const vd_node_t *on = &kv.p->nodes[q];
      if (on == kv.pn || on->rank == kv.pn->rank || strcmp(vd_plan_s(kv.p, on->name), vd_plan_s(kv.p, kv.pn->name)) ||
          strcmp(vd_node_op(kv.p, on), vd_node_op(kv.p, kv.pn)))
        continue;
      const vd_attr_t *oa = vd_node_attr(kv.p, on, key);
      same = oa && oa->kind == VD_ATTR_INT && oa->v.i == at->v.i;
    }
    if (!same) continue;
    /* moved by the (reduced) extent of a dim of input 0, the last dims
     * first (a range of columns) */
    for (size_t j = 0; j < m && v->loc_kind != VD_LOC_POSITION; j++)
      for (int d = in0->ndim - 1; d >= 0 && v->loc_kind != VD_LOC_POSITION; d--)
        for (int64_t step = 1; step < (int64_t)ranks && v->loc_kind != VD_LOC_POSITION; step++)
          for (int sg = 1; sg >= -1 && v->loc_kind != VD_LOC_POSITION; sg -= 2) {
            int64_t nv = val + sg * step * in0->rshape[d];
            if (nv < 0) continue;
            num_ctx t = *again;
            t.val = n->val;
            t.pos_node = cp[j], t.pos_key = key, t.pos_value = nv;
            /* the rank's other nodes that read the same position move with it
             * (a range used forward and backward) */
            uint32_t more[32];
            size_t n_more = 0;
            node_view jv0;
            vd_stage_solve_i_node_view(c, cp[j], &jv0);
            for (uint32_t q = 0; q < st->n_nodes && n_more < 32; q++) {
              int64_t qv;
              if (q == cp[j] || !st->nodes[q].side || st->nodes[q].replica != st->nodes[cp[j]].replica) continue;
              node_view qv0;
              vd_stage_solve_i_node_view(c, q, &qv0);
              if (qv0.pn->rank == jv0.pn->rank && int_attr(c, q, key, &qv) && qv == val) more[n_more++] = q;
            }
            t.pos_more = more, t.n_pos_more = n_more;
            int hit = 1;
            char note[200];
            vd_diag ed;
            vd_diag_clear(&ed);
            vd_rc erc = eval_once(c, &t, v, 0, &hit, note, sizeof(note), &ed);
            ran = 1;
            if (erc == VD_ENOMEM) {
              *rc = VD_OOM(c->d);
              return ran;
            }
            if (erc != VD_OK || hit) continue;
            node_view jv;
            vd_stage_solve_i_node_view(c, cp[j], &jv);
            const vd_attr_t *raw = vd_node_attr(jv.p, jv.pn, key);
            long long was = raw && raw->kind == VD_ATTR_INT ? (long long)raw->v.i : (long long)val;
            v->loc_kind = VD_LOC_POSITION;
            v->loc_node = (int32_t)cp[j];
            vd_text_fmt(v->loc_note, sizeof(v->loc_note),
                        "this copy reads %s=%lld as its copies on the other ranks do; with %s moved by %+lld x the "
                        "extent of its input's dim %d (%lld) every target agrees: it uses another rank's position",
                        VD_SHOW(key), was, VD_SHOW(key), (long long)(sg * step), d, (long long)in0->shape[d]);
          }
  }
  return ran;
}

/* The region (reg[k] 1, roots 2) of the parallel nodes that reach the
 * disagreeing copies through values without a twin; 0 when the stage is
 * too large to tell (LOC_WORK). */
static int find_region(solve_ctx *c, num_ctx *n, const vd_stage_verdict *v, uint8_t *twin, uint8_t *reg,
                       uint32_t *stack) {
  const vd_stage *st = c->st;
  int64_t work = 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    /* leaves, and the outputs of nodes without inputs (constants), count as twins */
    twin[i] = !sv->side || sv->producer < 0 || !st->nodes[sv->producer].n_in;
    if (!twin[i] && work < LOC_WORK) twin[i] = (uint8_t)has_twin(c, n, i, &work);
  }
  if (work >= LOC_WORK) return 0;
  size_t top = 0;
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const uint32_t *pp = target_pairs(st, t);
    for (uint32_t j = 0; j < t->n_pieces; j++) {
      int flagged = !v->n_flagged;
      for (size_t f = 0; f < v->n_flagged && !flagged; f++) flagged = v->flagged_pieces[f] == (int32_t)pp[2 * j];
      int32_t q = st->vals[pp[2 * j + 1]].producer;
      if (flagged && q >= 0 && st->nodes[q].side && !reg[q]) reg[q] = 1, stack[top++] = (uint32_t)q;
    }
  }
  while (top) {
    uint32_t k = stack[--top];
    const vd_stage_node *sn = &st->nodes[k];
    int is_root = 1;
    for (uint32_t i = 0; i < sn->n_in; i++) {
      uint32_t u = st->idx[sn->in_off + i];
      int32_t q = st->vals[u].producer;
      if (twin[u] || q < 0 || !st->nodes[q].side) continue;
      is_root = 0;
      if (!reg[q]) reg[q] = 1, stack[top++] = (uint32_t)q;
    }
    reg[k] = is_root ? 2 : 1;
  }
  return 1;
}

/* The groups of copies (by first copy) the repairs try, in stage order, at
 * most LOC_REPAIRS: with moves 0, the region's nodes that have copies on
 * other ranks, data movement left out (a view repairs whenever its input
 * does: the node that computed the value is named; one copy may equal a
 * single value by chance, a rank whose shard holds the maximum, so the
 * group counts); with moves 1, every region node (a node alone is compared
 * with its copies in the plan: try_positions). */
static size_t repair_sites(solve_ctx *c, const uint8_t *reg, int moves, uint32_t *tries) {
  const vd_stage *st = c->st;
  uint32_t cp[64];
  size_t n_tries = 0;
  for (uint32_t k = 0; k < st->n_nodes && n_tries < LOC_REPAIRS; k++) {
    if (!reg[k] || !st->nodes[k].side) continue;
    const vd_op_info *oi = st->nodes[k].op >= 0 ? vd_op_get((vd_op_id)st->nodes[k].op) : NULL;
    size_t m = copies_of(c, k, cp, 64);
    if (!moves && ((oi && (oi->flags & VD_OPF_MOVES)) || !m)) continue;
    uint32_t first = m ? cp[0] : k;
    int known = 0;
    for (size_t q = 0; q < n_tries; q++) known |= tries[q] == first;
    if (!known) tries[n_tries++] = first;
  }
  return n_tries;
}

/* The reduction repair at the sites: the last group whose copies, reduced,
 * repair the stage (operators linear in the value between it and the first
 * non-linear one repair it as well: the all_reduce belongs after them).
 * Sets v (VD_LOC_REDUCE); *ran 1 when some run was made. */
static vd_rc try_reductions(solve_ctx *c, num_ctx *n, vd_stage_verdict *v, const num_ctx *again, const uint32_t *tries,
                            size_t n_tries, int *ran) {
  uint32_t cp[64];
  int best_max = 0;
  for (size_t r = 0; r < n_tries; r++) {
    size_t m = copies_of(c, tries[r], cp, 64);
    /* a max's copies are tried maxed first: any shift the ranks share (their
     * sum too) cancels in a softmax, the max is what the code means */
    node_view rv;
    vd_stage_solve_i_node_view(c, tries[r], &rv);
    int max_first = strstr(vd_node_op(rv.p, rv.pn), "max") != NULL;
    for (int step = 0; m && step < 2; step++) {
      int mx = max_first ? !step : step;
      num_ctx t = *again;
      t.val = n->val;
      t.rep = cp, t.n_rep = m, t.rep_max = mx;
      *ran = 1;
      int hit = 1;
      char note[200];
      vd_diag ed;
      vd_diag_clear(&ed);
      vd_rc erc = eval_once(c, &t, v, 0, &hit, note, sizeof(note), &ed);
      if (erc == VD_ENOMEM) return VD_OOM(c->d);
      if (erc != VD_OK || hit) continue;
      /* a max repair outranks a sum repair found later (a shared shift of
       * the max's copies, their sum, cancels downstream as well) */
      if (v->loc_kind == VD_LOC_REDUCE && best_max && !mx) break;
      best_max = mx;
      v->loc_kind = VD_LOC_REDUCE;
      v->loc_node = (int32_t)tries[r];
      snprintf(v->loc_note, sizeof(v->loc_note),
               "its %zu copies, reduced elementwise by %s over their ranks (as an all_reduce(%s) would), make every "
               "target agree on the values that reproduce the disagreement: the reduction is missing here",
               m, mx ? "max" : "sum", mx ? "MAX" : "SUM");
      break;
    }
  }
  return VD_OK;
}

/* The rearrangement reading of root node k: VD_LOC_PERMUTED when an output
 * holds a single value's numbers in another order. */
static vd_rc read_rearranged(solve_ctx *c, num_ctx *n, vd_stage_verdict *v, uint32_t k) {
  const vd_stage *st = c->st;
  const vd_stage_node *rn = &st->nodes[k];
  for (uint32_t o = 0; o < rn->n_out; o++) {
    int hit = 0;
    uint32_t which = 0;
    VD_CHECK(rearranges(c, n, st->idx[rn->out_off + o], &hit, &which));
    if (!hit) continue;
    char sh[96] = "";
    size_t at = 0;
    const vd_stage_value *sv = &st->vals[which];
    for (int d = 0; d < sv->ndim && at < sizeof(sh); d++)
      at += (size_t)snprintf(sh + at, sizeof(sh) - at, d ? ", %lld" : "%lld", (long long)sv->shape[d]);
    v->loc_kind = VD_LOC_PERMUTED;
    /* the single value by its tensor name, else by its producer's name */
    const vd_graph_t *gs = c->lt->gs;
    const char *nm = vd_plan_s(gs->plan, tensor_of(c, sv)->name);
    int32_t gp = gs->values[sv->value].producer;
    if (!nm[0] && gp >= 0) nm = vd_plan_s(gs->plan, gs->plan->nodes[gs->nodes[gp].pnode].name);
    vd_text_fmt(v->loc_note, sizeof(v->loc_note),
                "on the values that reproduce the disagreement, its value holds the numbers of the single-device "
                "value of '%s' [%s] in another arrangement (gathered or concatenated along another dim, or its "
                "blocks in another order)",
                VD_SHOW(nm), sh);
    break;
  }
  return VD_OK;
}

static vd_rc locate(solve_ctx *c, num_ctx *n, vd_stage_verdict *v, const num_ctx *again) {
  const vd_stage *st = c->st;
  uint8_t *twin = vd_calloc(st->n_vals + 1, 1), *reg = vd_calloc(st->n_nodes + 1, 1);
  uint32_t *stack = vd_calloc(st->n_nodes + 1, sizeof(uint32_t));
  vd_rc rc = VD_OK;
  if (!twin || !reg || !stack) {
    rc = VD_OOM(c->d);
    goto done;
  }
  if (!find_region(c, n, v, twin, reg, stack)) goto done; /* too large to tell: no hint */
  int32_t root = -1;
  for (uint32_t k = 0; k < st->n_nodes && root < 0; k++)
    if (reg[k] == 2) root = (int32_t)k;
  if (root < 0) goto done;
  uint32_t tries[LOC_REPAIRS];
  int reran = 0;
  /* OPTIMIZATION-ONLY: a stage the size of a model keeps to the cheap
   * reading, as classify does (stage_solve.c) */
  int small = st->n_nodes <= VD_STAGE_CLASSIFY_MAX_NODES;
  size_t n_tries = small ? repair_sites(c, reg, 0, tries) : 0;
  if ((rc = try_reductions(c, n, v, again, tries, n_tries, &reran)) != VD_OK || v->loc_kind == VD_LOC_REDUCE) goto done;
  /* the position repair (data movement included: a masked pick reads a
   * vocabulary range) */
  n_tries = small ? repair_sites(c, reg, 1, tries) : 0;
  for (size_t r = 0; r < n_tries && v->loc_kind != VD_LOC_POSITION; r++) {
    reran |= try_positions(c, n, v, again, tries[r], &rc) != 0;
    if (rc != VD_OK) goto done;
  }
  if (v->loc_kind == VD_LOC_POSITION) goto done;
  /* the values of the repairs' runs replaced the located run's: run it again */
  if (reran) {
    num_ctx t = *again;
    t.val = n->val;
    int hit = 0;
    char note[200];
    vd_diag ed;
    vd_diag_clear(&ed);
    if (eval_once(c, &t, v, 0, &hit, note, sizeof(note), &ed) != VD_OK) goto done;
  }
  v->loc_node = root;
  v->loc_kind = VD_LOC_TWINLESS;
  snprintf(v->loc_note, sizeof(v->loc_note),
           "on the values that reproduce the disagreement, the first value of the disagreeing copies' computation "
           "that no single-device value equals, computed from values that all have their equal");
  rc = read_rearranged(c, n, v, (uint32_t)root);
done:
  vd_free(twin);
  vd_free(reg);
  vd_free(stack);
  return rc;
}

/* One array of doubles per stage value (its reduced numel); values_free
 * frees what values_alloc made, also after a partial failure. */
static vd_rc values_alloc(solve_ctx *c, num_ctx *n) {
  n->val = vd_calloc(c->st->n_vals + 1, sizeof(double *));
  if (!n->val) return VD_OOM(c->d);
  for (uint32_t i = 0; i < c->st->n_vals; i++) {
    vd_op_shape sh;
    shape_of(&c->st->vals[i], &sh);
    int64_t ne = numel_of(&sh);
    if (!(n->val[i] = vd_calloc((size_t)(ne > 0 ? ne : 1), sizeof(double)))) return VD_OOM(c->d);
  }
  return VD_OK;
}

static void values_free(solve_ctx *c, num_ctx *n) { VD_FREE_EACH(n->val, c->st->n_vals); }

vd_rc vd_stage_solve_i_cex_eval(solve_ctx *c, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  num_ctx n = {.in = v->inputs, .n_in = v->n_inputs, .rng = 0x9e3779b97f4a7c15ull ^ st->id, .pos_node = -1};
  vd_rc rc = values_alloc(c, &n);
  vd_diag ed;
  vd_diag_clear(&ed);
  int hit = 0;
  char note[200] = "";
  if (rc == VD_OK) {
    vd_rc erc = eval_once(c, &n, v, 1, &hit, note, sizeof(note), &ed);
    if (erc == VD_ENOMEM) rc = VD_OOM(c->d);
    else if (erc != VD_OK) {
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&ed, line, sizeof(line));
      v->cex_eval = VD_CEX_EVAL_FAILED;
      snprintf(v->cex_eval_note, sizeof(v->cex_eval_note), "the numeric evaluators refused the stage: %.180s", line);
    } else if (hit) {
      v->cex_eval = VD_CEX_EVAL_SAME;
      snprintf(v->cex_eval_note, sizeof(v->cex_eval_note), "%s", note);
      num_ctx again = n;
      rc = locate(c, &n, v, &again);
    }
  }
  for (int trial = 0; rc == VD_OK && !v->cex_eval && trial < 3 && !hit; trial++) {
    n.in = NULL; /* random values */
    num_ctx again = n; /* the trial's random state, for locate's runs */
    vd_rc erc = eval_once(c, &n, v, 0, &hit, note, sizeof(note), &ed);
    if (erc == VD_ENOMEM) rc = VD_OOM(c->d);
    else if (erc != VD_OK) break;
    if (hit) {
      v->cex_eval = VD_CEX_EVAL_RANDOM;
      snprintf(v->cex_eval_note, sizeof(v->cex_eval_note), "at random inputs: %s", note);
      rc = locate(c, &n, v, &again);
    }
  }
  if (rc == VD_OK && !v->cex_eval) {
    v->cex_eval = VD_CEX_EVAL_NOT;
    snprintf(v->cex_eval_note, sizeof(v->cex_eval_note),
             "neither the counterexample's values nor 3 random inputs make the numeric evaluators disagree");
  }
  values_free(c, &n);
  return rc;
}

/* 1 when random inputs (3 trials, fixed seed; index inputs 0 or 1, valid at
 * every reduced size) make the numeric evaluators disagree; 0 when they do
 * not or an evaluator refuses the stage. */
vd_rc vd_stage_solve_i_cex_random(solve_ctx *c, vd_stage_verdict *v, int *hit) {
  const vd_stage *st = c->st;
  *hit = 0;
  num_ctx n = {.in = NULL, .rng = 0x9e3779b97f4a7c15ull ^ st->id, .pos_node = -1};
  vd_rc rc = values_alloc(c, &n);
  vd_diag ed;
  vd_diag_clear(&ed);
  char note[200] = "";
  for (int trial = 0; rc == VD_OK && trial < 3 && !*hit; trial++) {
    vd_rc erc = eval_once(c, &n, v, 0, hit, note, sizeof(note), &ed);
    if (erc == VD_ENOMEM) rc = VD_OOM(c->d);
    else if (erc != VD_OK) *hit = 0, trial = 3;
  }
  values_free(c, &n);
  return rc;
}
