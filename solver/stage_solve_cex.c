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
  for (int64_t e = 0; e < ne; e++) {
    idx_name(name, sizeof(name), prefix, &sh, e);
    n->val[i][e] = sym_value(n, name, is_int);
  }
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
  vd_op_call oc = {.op = sn->op, .plan = ap, .node = an, .record = nv.record, .n_in = sn->n_in, .n_out = sn->n_out,
                   .n_part = vd_stage_solve_i_node_parts(nv.gn, sn), .in = in, .in_shape = sh, .out = out, .out_shape = sh + sn->n_in,
                   .diag = d};
  rc = vd_op_eval(&oc);
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
  num_ctx n = {.in = v->inputs, .n_in = v->n_inputs, .rng = 0x9e3779b97f4a7c15ull ^ st->id};
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
    }
  }
  for (int trial = 0; rc == VD_OK && !v->cex_eval && trial < 3 && !hit; trial++) {
    n.in = NULL; /* random values */
    vd_rc erc = eval_once(c, &n, v, 0, &hit, note, sizeof(note), &ed);
    if (erc == VD_ENOMEM) rc = VD_OOM(c->d);
    else if (erc != VD_OK) break;
    if (hit) {
      v->cex_eval = VD_CEX_EVAL_RANDOM;
      snprintf(v->cex_eval_note, sizeof(v->cex_eval_note), "at random inputs: %s", note);
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
  num_ctx n = {.in = NULL, .rng = 0x9e3779b97f4a7c15ull ^ st->id};
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
