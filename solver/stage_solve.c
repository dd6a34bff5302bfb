/*
 * solver/stage_solve.c - proving one stage (docs/verifier.md section 4).
 *
 * Steps: (1) single leaves become fresh symbols (Int symbols for integer
 * tensors such as token ids); (2) single nodes are encoded in stage order;
 * (3) parallel leaves are built from their lineage: a replica piece IS the
 * slice of its single value, n partial parts are n-1 fresh terms plus the
 * remainder; (4) parallel nodes are encoded; (5) every target element is
 * paired with its single-device element and vd_smt_check decides; (6) on a
 * counterexample, the failure is classified with further symbolic checks on
 * the same terms (missing reduction, scale factor, permuted slices).
 *
 * Attribute overrides (positions scaled by shape reduction) are applied by
 * encoding the node from a one-node scratch plan holding the rewritten
 * attributes, so encoders read attributes in one way only.
 */
#include "stage_solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/limits.h"
#include "../common/mem.h"

void vd_stage_verdict_free(vd_stage_verdict *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n_inputs; i++) {
    vd_free(v->inputs[i].name);
    vd_free(v->inputs[i].exact);
  }
  vd_free(v->inputs);
  vd_free(v->elems);
  vd_free(v->copies);
  vd_free(v->flagged_pieces);
  memset(v, 0, sizeof(*v));
}

/* ---- per-stage working state -------------------------------------------- */

typedef struct {
  vd_smt *s;
  const vd_lin_table *lt;
  const vd_stage *st;
  const vd_stage_solve_opts *o;
  vd_smt_tensor *ten; /* one per stage value */
  vd_diag *d;
} solve_ctx;

static const vd_graph_t *graph_of(const solve_ctx *c, int side) { return side ? c->lt->gp : c->lt->gs; }

static const vd_tensor_t *tensor_of(const solve_ctx *c, const vd_stage_value *sv) {
  const vd_graph_t *g = graph_of(c, sv->side);
  return &g->plan->tensors[g->values[sv->value].tensor];
}

static void shape_of(const vd_stage_value *sv, vd_op_shape *sh) {
  sh->ndim = sv->ndim;
  for (int i = 0; i < sv->ndim; i++) sh->d[i] = sv->rshape[i];
}

static int is_int_dtype(vd_dtype t) { return t == VD_DT_I64 || t == VD_DT_I32 || t == VD_DT_BOOL; }

/* "node 12 'layers.0.wq' (rank 3, mb 1)" */
static void node_record(const solve_ctx *c, const vd_stage_node *sn, char *buf, size_t n) {
  const vd_graph_t *g = graph_of(c, sn->side);
  const vd_gnode_t *gn = &g->nodes[sn->gnode];
  const vd_node_t *pn = &g->plan->nodes[gn->pnode];
  snprintf(buf, n, "%s node %lld '%s' %s (rank %lld, mb %d)", sn->side ? "parallel" : "single",
           (long long)pn->id, vd_plan_s(g->plan, pn->name), vd_node_op(g->plan, pn),
           (long long)vd_graph_rank(g, pn->rank, sn->replica), gn->mb);
}

static vd_rc make_single_leaf(solve_ctx *c, uint32_t i) {
  const vd_stage_value *sv = &c->st->vals[i];
  const vd_tensor_t *t = tensor_of(c, sv);
  vd_op_shape sh;
  shape_of(sv, &sh);
  char prefix[160];
  snprintf(prefix, sizeof(prefix), "%s@v%u", vd_plan_s(c->lt->gs->plan, t->name), sv->value);
  if (is_int_dtype(t->dtype)) return vd_smt_tensor_int_vars(c->s, &c->ten[i], &sh, prefix, c->d);
  return vd_smt_tensor_vars(c->s, &c->ten[i], &sh, prefix, c->d);
}

/* The numeral of a lineage factor f: the rational of smallest denominator
 * (up to 4096) within 1e-12 of f, else f's exact binary value.  SOUNDNESS:
 * any numeral will do, as long as the stage proving a candidate and every
 * stage assuming it read the same one: both come from the piece's f here. */
static vd_term factor_num(vd_smt *s, double f) {
  for (int64_t q = 1; q <= 4096 && fabs(f) < 1e12; q++) {
    double p = nearbyint(f * (double)q);
    if (fabs(p / (double)q - f) <= 1e-12 * fabs(f)) {
      char pq[64];
      snprintf(pq, sizeof(pq), "%lld/%lld", (long long)p, (long long)q);
      return vd_smt_num_rat(s, pq);
    }
  }
  return vd_smt_num_double(s, f);
}

/* t[e] := f * t[e] for a factor f != 1. */
static vd_rc scale_terms(solve_ctx *c, vd_smt_tensor *t, double f) {
  if (f == 1.0) return VD_OK;
  vd_term k = factor_num(c->s, f);
  for (int64_t e = 0; e < t->numel; e++) t->t[e] = vd_smt_mul(c->s, k, t->t[e]);
  return vd_smt_status(c->s, c->d, "lineage factor");
}

/* SOUNDNESS: a parallel leaf is a proven (or given) lineage point; its terms
 * are the single value's slice (replica) or a part of it (partial sum),
 * times the lineage's factor (an inferred candidate's, proven like it). */
static vd_rc make_parallel_leaf(solve_ctx *c, uint32_t i) {
  const vd_stage_value *sv = &c->st->vals[i];
  if (sv->leaf_piece < 0 || sv->hyp_svalue < 0) {
    /* SOUNDNESS: an initial parallel value with no lineage (state carried
     * in, e.g. a gradient accumulator before it is zeroed) is unrelated to
     * the single plan: fresh symbols, so the proof holds for every value it
     * may have.  A target that depends on it is refuted, as it should be. */
    const vd_tensor_t *t = tensor_of(c, sv);
    vd_op_shape sh;
    shape_of(sv, &sh);
    char prefix[200];
    snprintf(prefix, sizeof(prefix), "%s@p%u.r%d", vd_plan_s(c->lt->gp->plan, t->name), sv->value, sv->replica);
    if (is_int_dtype(t->dtype)) return vd_smt_tensor_int_vars(c->s, &c->ten[i], &sh, prefix, c->d);
    return vd_smt_tensor_vars(c->s, &c->ten[i], &sh, prefix, c->d);
  }
  const vd_lin_piece *pc = &c->lt->pieces[sv->leaf_piece];
  const vd_stage_value *hv = &c->st->vals[sv->hyp_svalue];
  vd_smt_tensor slice = {0};
  VD_CHECK(vd_smt_tensor_slice(&c->ten[sv->hyp_svalue], sv->rlo, sv->rhi, &slice, c->d));
  vd_rc rc;
  if (pc->part_n <= 1) {
    rc = vd_smt_tensor_copy(&slice, &c->ten[i], c->d);
  } else {
    char key[256];
    char name[160];
    snprintf(name, sizeof(name), "%s@v%u", vd_plan_s(c->lt->gs->plan, tensor_of(c, hv)->name), hv->value);
    vd_smt_slice_key(key, sizeof(key), name, sv->ndim, sv->rlo, sv->rhi);
    rc = vd_smt_partial_parts(c->s, &slice, key, pc->part_n, pc->part_k, &c->ten[i], c->d);
  }
  vd_smt_tensor_free(&slice);
  if (rc == VD_OK) rc = scale_terms(c, &c->ten[i], pc->f);
  return rc;
}

/* Copies node pn's attributes into a one-node scratch plan, replacing the
 * overridden ones, so the encoder reads the scaled positions. */
static vd_rc scratch_node(const vd_plan_t *p, const vd_node_t *pn, const vd_attr_override *ovr, uint32_t n_ovr,
                          vd_plan_t *scratch) {
  VD_CHECK(vd_plan_init(scratch, p->kind));
  vd_node_t nn = *pn;
  nn.segment = 0;
  uint32_t idx;
  VD_CHECK(vd_plan_add_node(scratch, &nn, vd_node_op(p, pn), vd_plan_s(p, pn->name), NULL, 0, NULL, 0,
                            vd_node_group(p, pn), pn->n_group, &idx));
  for (uint32_t a = 0; a < pn->n_attr; a++) {
    const vd_attr_t *at = &p->attrs[pn->attr_off + a];
    const char *key = vd_plan_s(p, at->key);
    int overridden = 0;
    for (uint32_t k = 0; k < n_ovr; k++)
      if (ovr[k].key != VD_OVR_DIVISOR && strcmp(vd_plan_s(p, ovr[k].key), key) == 0) {
        VD_CHECK(vd_plan_attr_int(scratch, idx, key, ovr[k].value));
        overridden = 1;
        break;
      }
    if (!overridden) VD_CHECK(vd_plan_attr_copy(scratch, idx, p, at));
  }
  /* Shape reduction's full-size divisor of an averaging node (the node has
   * no such attribute: docs/shape-reduction.md, AVG). */
  for (uint32_t k = 0; k < n_ovr; k++)
    if (ovr[k].key == VD_OVR_DIVISOR) VD_CHECK(vd_plan_attr_int(scratch, idx, VD_OVR_DIVISOR_NAME, ovr[k].value));
  return VD_OK;
}

/* Participants of a merged collective instance (virtual replicas included). */
static uint32_t node_parts(const vd_gnode_t *gn, const vd_stage_node *sn) {
  uint32_t n_part = gn->n_part ? gn->n_part : 1;
  if (gn->n_in > 0 && sn->n_in != gn->n_in) n_part = n_part * sn->n_in / gn->n_in; /* virtual replicas */
  return n_part;
}

/* The plan and node whose attributes the operator reads: pn itself, or a
 * one-node scratch copy with the stage's overrides applied. */
static vd_rc node_attrs(solve_ctx *c, const vd_plan_t *p, const vd_node_t *pn, const vd_stage_node *sn,
                        vd_plan_t *scratch, const vd_plan_t **ap, const vd_node_t **an) {
  *ap = p;
  *an = pn;
  if (!sn->n_ovr) return VD_OK;
  vd_rc rc = scratch_node(p, pn, c->st->ovr + sn->ovr_off, sn->n_ovr, scratch);
  if (rc == VD_ENOMEM) VD_OOM(c->d);
  if (rc != VD_OK) return rc;
  *ap = scratch;
  *an = &scratch->nodes[0];
  return VD_OK;
}

/* Encodes one stage node.  *unsupported is set (and VD_OK returned) when the
 * operator has no encoder. */
static vd_rc encode_node(solve_ctx *c, uint32_t ni, char *unsupported, size_t n_unsupported) {
  const vd_stage *st = c->st;
  const vd_stage_node *sn = &st->nodes[ni];
  const vd_graph_t *g = graph_of(c, sn->side);
  const vd_gnode_t *gn = &g->nodes[sn->gnode];
  const vd_plan_t *p = g->plan;
  const vd_node_t *pn = &p->nodes[gn->pnode];
  char record[256];
  node_record(c, sn, record, sizeof(record));
  if (sn->op < 0 || !vd_smt_encoder((vd_op_id)sn->op)) {
    snprintf(unsupported, n_unsupported, "unsupported operator '%s' at %s", vd_node_op(p, pn), record);
    return VD_OK;
  }
  const vd_smt_tensor **in = vd_calloc(sn->n_in ? sn->n_in : 1, sizeof(*in));
  vd_smt_tensor **out = vd_calloc(sn->n_out ? sn->n_out : 1, sizeof(*out));
  vd_plan_t scratch = {0};
  vd_op_shape *full = NULL;
  vd_rc rc = VD_OK;
  if (!in || !out) {
    rc = VD_OOM(c->d);
    goto done;
  }
  for (uint32_t k = 0; k < sn->n_in; k++) in[k] = &c->ten[st->idx[sn->in_off + k]];
  for (uint32_t k = 0; k < sn->n_out; k++) {
    uint32_t vi = st->idx[sn->out_off + k];
    vd_op_shape sh;
    shape_of(&st->vals[vi], &sh);
    vd_smt_tensor_free(&c->ten[vi]);
    if ((rc = vd_smt_tensor_init(&c->ten[vi], &sh)) != VD_OK) {
      rc = VD_OOM(c->d);
      goto done;
    }
    out[k] = &c->ten[vi];
  }
  uint32_t n_part = node_parts(gn, sn);
  const vd_plan_t *ap;
  const vd_node_t *an;
  if ((rc = node_attrs(c, p, pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
  /* Full-size operand shapes of a reduced stage: contractions scale by
   * full/reduced counts (docs/shape-reduction.md, COUNT). */
  if (st->reduced) {
    full = vd_malloc(sizeof(vd_op_shape) * ((size_t)sn->n_in + sn->n_out + 1));
    if (!full) {
      rc = VD_OOM(c->d);
      goto done;
    }
    for (uint32_t k = 0; k < sn->n_in + sn->n_out; k++) {
      const vd_stage_value *v = &st->vals[st->idx[(k < sn->n_in ? sn->in_off + k : sn->out_off + k - sn->n_in)]];
      full[k].ndim = v->ndim;
      for (int32_t j = 0; j < v->ndim; j++) full[k].d[j] = v->shape[j];
    }
  }
  struct vd_op_encode_call call = {
      .op = sn->op, .smt = c->s, .plan = ap, .node = an, .record = record,
      .n_in = sn->n_in, .n_out = sn->n_out, .n_part = n_part,
      .in = in, .out = out, .diag = c->d,
      .in_full = full, .out_full = full ? full + sn->n_in : NULL};
  rc = vd_smt_encode(&call);
done:
  vd_plan_free(&scratch);
  vd_free(full);
  vd_free(in);
  vd_free(out);
  return rc;
}

/* The registry's shape check of node ni on the stage's shapes, before any
 * term is built: a stage whose shapes contradict an operator (its shape
 * reduction failed, e.g. on a mutated collective) is refused at once
 * instead of after encoding every node before it on the unreduced shapes
 * (measured: 7 s per stage on bug 20 of the MoE ep2 plan).  *stop is set
 * at an operator without an encoder (encode_node reports it).  Returns
 * VD_EINPUT with the same message the encoder would give. */
static vd_rc precheck_node(solve_ctx *c, uint32_t ni, int *stop) {
  const vd_stage *st = c->st;
  const vd_stage_node *sn = &st->nodes[ni];
  const vd_graph_t *g = graph_of(c, sn->side);
  const vd_gnode_t *gn = &g->nodes[sn->gnode];
  const vd_plan_t *p = g->plan;
  const vd_node_t *pn = &p->nodes[gn->pnode];
  if (sn->op < 0 || !vd_smt_encoder((vd_op_id)sn->op)) {
    *stop = 1;
    return VD_OK;
  }
  char record[256];
  node_record(c, sn, record, sizeof(record));
  vd_op_shape *sh = vd_malloc(sizeof(vd_op_shape) * ((size_t)sn->n_in + sn->n_out + 1));
  vd_plan_t scratch = {0};
  vd_rc rc = VD_OK;
  if (!sh) return VD_OOM(c->d);
  for (uint32_t k = 0; k < sn->n_in; k++) shape_of(&st->vals[st->idx[sn->in_off + k]], &sh[k]);
  for (uint32_t k = 0; k < sn->n_out; k++) shape_of(&st->vals[st->idx[sn->out_off + k]], &sh[sn->n_in + k]);
  uint32_t n_part = node_parts(gn, sn);
  const vd_plan_t *ap;
  const vd_node_t *an;
  if ((rc = node_attrs(c, p, pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
  vd_op_call oc = {.op = sn->op, .plan = ap, .node = an, .record = record, .n_in = sn->n_in, .n_out = sn->n_out,
                   .n_part = n_part, .in_shape = sh, .out_shape = sh + sn->n_in, .diag = c->d};
  rc = vd_op_check(&oc);
done:
  vd_plan_free(&scratch);
  vd_free(sh);
  return rc;
}

/* ---- targets ------------------------------------------------------------ */

typedef struct {
  uint32_t target;
  int32_t piece;   /* piece compared, -1 for the sum of the parts */
  int64_t elem;    /* flat index in the target slice */
} pair_meta;

typedef struct {
  vd_term *par, *single;
  pair_meta *meta;
  size_t n, cap;
} pair_list;

static int pairs_push(pair_list *pl, vd_term p, vd_term s, pair_meta m) {
  if (pl->n == pl->cap) {
    size_t nc = pl->cap ? pl->cap * 2 : 64;
    vd_term *np = vd_realloc_array(pl->par, nc, sizeof(vd_term));
    if (!np) return -1;
    pl->par = np;
    vd_term *ns = vd_realloc_array(pl->single, nc, sizeof(vd_term));
    if (!ns) return -1;
    pl->single = ns;
    pair_meta *nm = vd_realloc_array(pl->meta, nc, sizeof(pair_meta));
    if (!nm) return -1;
    pl->meta = nm;
    pl->cap = nc;
  }
  pl->par[pl->n] = p;
  pl->single[pl->n] = s;
  pl->meta[pl->n] = m;
  pl->n++;
  return 0;
}

static void pairs_free(pair_list *pl) {
  vd_free(pl->par);
  vd_free(pl->single);
  vd_free(pl->meta);
  memset(pl, 0, sizeof(*pl));
}

static const uint32_t *target_pairs(const vd_stage *st, const vd_stage_target *t) { return st->idx + t->piece_off; }

/* Builds the target slice of the single value (reduced coordinates). */
static vd_rc target_slice(solve_ctx *c, const vd_stage_target *t, vd_smt_tensor *slice) {
  return vd_smt_tensor_slice(&c->ten[t->svalue], t->rlo, t->rhi, slice, c->d);
}

/* Sum over one representative piece per part (the first of each k), in
 * ascending k.  O(n + pieces): the first piece of each part is found in one
 * pass (n <= LIN_PART_MAX, plans/io.c), not by a scan per part. */
static vd_rc parts_sum(solve_ctx *c, const vd_stage_target *t, const vd_smt_tensor *slice, vd_term *sum) {
  const uint32_t *pp = target_pairs(c->st, t);
  for (int64_t e = 0; e < slice->numel; e++) sum[e] = NULL;
  if (t->part_n < 1) return vd_smt_status(c->s, c->d, "sum of parts");
  uint32_t *first = vd_malloc((size_t)t->part_n * sizeof(*first));
  if (!first) return VD_OOM(c->d);
  for (int64_t k = 0; k < t->part_n; k++) first[k] = UINT32_MAX;
  for (uint32_t j = 0; j < t->n_pieces; j++) {
    int64_t k = c->lt->pieces[pp[2 * j]].part_k;
    if (k >= 0 && k < t->part_n && first[k] == UINT32_MAX) first[k] = j;
  }
  for (int64_t k = 0; k < t->part_n; k++) {
    if (first[k] == UINT32_MAX) continue;
    const vd_smt_tensor *pt = &c->ten[pp[2 * first[k] + 1]];
    if (pt->numel != slice->numel) {
      vd_free(first);
      VD_FAIL(c->d, VD_EINTERNAL, NULL, "target", "shape", "piece has %lld elements, slice %lld",
              (long long)pt->numel, (long long)slice->numel);
    }
    for (int64_t e = 0; e < slice->numel; e++) sum[e] = sum[e] ? vd_smt_add(c->s, sum[e], pt->t[e]) : pt->t[e];
  }
  vd_free(first);
  return vd_smt_status(c->s, c->d, "sum of parts");
}

static vd_rc build_pairs(solve_ctx *c, pair_list *pl) {
  const vd_stage *st = c->st;
  vd_rc rc = VD_OK;
  for (uint32_t ti = 0; ti < st->n_targets && rc == VD_OK; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const uint32_t *pp = target_pairs(st, t);
    vd_smt_tensor slice = {0};
    vd_term *sum = NULL;
    if ((rc = target_slice(c, t, &slice)) != VD_OK) break;
    if (t->part_n <= 1) {
      for (uint32_t j = 0; j < t->n_pieces && rc == VD_OK; j++) {
        const vd_smt_tensor *pt = &c->ten[pp[2 * j + 1]];
        double f = c->lt->pieces[pp[2 * j]].f;
        vd_term k = f == 1.0 ? NULL : factor_num(c->s, f);
        if (pt->numel != slice.numel) {
          rc = VD_ERR(c->d, VD_EINTERNAL, NULL, "target", "shape", "piece has %lld elements, slice %lld",
                      (long long)pt->numel, (long long)slice.numel);
          break;
        }
        for (int64_t e = 0; e < slice.numel; e++)
          if (pairs_push(pl, pt->t[e], k ? vd_smt_mul(c->s, k, slice.t[e]) : slice.t[e],
                         (pair_meta){ti, (int32_t)pp[2 * j], e}))
            rc = VD_OOM(c->d);
        if (rc == VD_OK && k) rc = vd_smt_status(c->s, c->d, "lineage factor");
      }
    } else {
      /* one factor for every part (lineage/lineage.c check_parts) */
      if (t->n_pieces) rc = scale_terms(c, &slice, c->lt->pieces[pp[0]].f);
      sum = vd_calloc((size_t)slice.numel, sizeof(*sum));
      if (!sum) rc = VD_OOM(c->d);
      if (rc == VD_OK) rc = parts_sum(c, t, &slice, sum);
      for (int64_t e = 0; rc == VD_OK && e < slice.numel; e++)
        if (pairs_push(pl, sum[e], slice.t[e], (pair_meta){ti, -1, e})) rc = VD_OOM(c->d);
      /* Replicas of one part must agree with the first piece of that part. */
      for (uint32_t j = 0; rc == VD_OK && j < t->n_pieces; j++) {
        const vd_lin_piece *pc = &c->lt->pieces[pp[2 * j]];
        uint32_t first = j;
        for (uint32_t q = 0; q < j; q++)
          if (c->lt->pieces[pp[2 * q]].part_k == pc->part_k) {
            first = q;
            break;
          }
        if (first == j) continue;
        const vd_smt_tensor *a = &c->ten[pp[2 * j + 1]], *b = &c->ten[pp[2 * first + 1]];
        for (int64_t e = 0; e < a->numel && e < b->numel; e++)
          if (pairs_push(pl, a->t[e], b->t[e], (pair_meta){ti, (int32_t)pp[2 * j], e})) rc = VD_OOM(c->d);
      }
    }
    vd_free(sum);
    vd_smt_tensor_free(&slice);
  }
  return rc;
}

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

static void unflatten(const int64_t *lo, const int64_t *hi, int ndim, int64_t flat, int64_t *elem) {
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

/* Tries MISSING_REDUCTION, EXTRA_REDUCTION / SCALE and PERMUTED_SLICES on
 * target ti, given one differing element's values (p parallel, s single).
 * v->diagnosis stays WRONG_VALUE when none is proved.  Errors: VD_ENOMEM
 * (a failure of the machinery, never a diagnosis), or target_slice's. */
/* Stages above this many nodes get WRONG_VALUE without the refinements of
 * classify (docs/verifier.md section 4). */
#define VD_STAGE_CLASSIFY_MAX_NODES 400u

static vd_rc classify(solve_ctx *c, uint32_t ti, int32_t piece, const vd_smt_diff *df, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  const vd_stage_target *t = &st->targets[ti];
  const uint32_t *pp = target_pairs(st, t);
  vd_smt_tensor slice = {0};
  vd_term *acc = NULL, *scaled = NULL, *want = NULL;
  int eq = 0;
  v->diagnosis = VD_DX_WRONG_VALUE;
  vd_rc rc = target_slice(c, t, &slice);
  if (rc != VD_OK) goto done;
  size_t n = (size_t)slice.numel;
  acc = vd_calloc(n ? n : 1, sizeof(*acc));
  scaled = vd_calloc(n ? n : 1, sizeof(*scaled));
  if (!acc || !scaled) {
    rc = VD_OOM(c->d);
    goto done;
  }

  /* The candidate tensor: the flagged piece, or the sum of the parts. */
  const vd_smt_tensor *cand = NULL;
  if (piece >= 0)
    for (uint32_t j = 0; j < t->n_pieces; j++)
      if ((int32_t)pp[2 * j] == piece) cand = &c->ten[pp[2 * j + 1]];
  if (!cand) {
    if ((rc = parts_sum(c, t, &slice, acc)) != VD_OK) goto done;
  } else {
    for (size_t e = 0; e < n; e++) acc[e] = cand->t[e];
  }

  /* SCALE: candidate = f * slice for the factor f seen in the model. */
  if (df && df->single.value != 0.0 && df->single.exact && df->parallel.exact) {
    vd_term pv = vd_smt_num_rat(c->s, df->parallel.exact), sv = vd_smt_num_rat(c->s, df->single.exact);
    vd_term f = pv && sv ? vd_smt_simplify(c->s, vd_smt_div(c->s, pv, sv)) : NULL;
    double fv = 0;
    char fexact[96] = "";
    if (f && vd_smt_numeral(c->s, f, &fv, fexact, sizeof(fexact)) && fv != 1.0) {
      for (size_t e = 0; e < n; e++) scaled[e] = vd_smt_mul(c->s, f, slice.t[e]);
      if ((rc = proves_equal(c, acc, scaled, n, &eq)) != VD_OK) goto done;
      if (eq) {
        double copies = (double)t->n_pieces;
        v->diagnosis = (t->part_n <= 1 && copies >= 2 && fv == copies) ? VD_DX_EXTRA_REDUCTION : VD_DX_SCALE;
        snprintf(v->factor, sizeof(v->factor), "%s", fexact);
        goto done;
      }
    }
  }

  /* MISSING_REDUCTION: each part (the whole slice when part_n = 1) has cpp
   * copies that should all equal it, but they hold partial sums over groups
   * of g ranks that were never reduced: the sum of all pieces is then
   * cpp/g times the slice instead of cpp times.  Tried for every g >= 2
   * dividing cpp (g = cpp: each part's copies sum to the part). */
  int64_t parts_seen = 0;
  for (uint32_t j = 0; j < t->n_pieces; j++) {
    int64_t k = c->lt->pieces[pp[2 * j]].part_k;
    int first = 1;
    for (uint32_t i = 0; i < j && first; i++)
      if (c->lt->pieces[pp[2 * i]].part_k == k) first = 0;
    parts_seen += first;
  }
  if (t->n_pieces > (uint32_t)parts_seen) {
    for (size_t e = 0; e < n; e++) scaled[e] = NULL;
    for (uint32_t j = 0; j < t->n_pieces; j++) {
      const vd_smt_tensor *pt = &c->ten[pp[2 * j + 1]];
      for (size_t e = 0; e < n; e++) scaled[e] = scaled[e] ? vd_smt_add(c->s, scaled[e], pt->t[e]) : pt->t[e];
    }
    int64_t cpp = (int64_t)t->n_pieces / parts_seen;
    if (cpp * parts_seen == (int64_t)t->n_pieces && !(want = vd_calloc(n ? n : 1, sizeof(*want)))) {
      rc = VD_OOM(c->d);
      goto done;
    }
    for (int64_t g = cpp; want && g >= 2; g--) {
      if (cpp % g) continue;
      vd_term f = vd_smt_num_int(c->s, cpp / g);
      for (size_t e = 0; e < n; e++) want[e] = cpp / g == 1 ? slice.t[e] : vd_smt_mul(c->s, f, slice.t[e]);
      if ((rc = proves_equal(c, scaled, want, n, &eq)) != VD_OK) goto done;
      if (eq) {
        v->diagnosis = VD_DX_MISSING_REDUCTION;
        if (cpp / g != 1) snprintf(v->factor, sizeof(v->factor), "partial sums over groups of %lld", (long long)g);
        break;
      }
    }
    if (v->diagnosis == VD_DX_MISSING_REDUCTION) goto done;
  }

  /* PERMUTED_SLICES: the candidate equals another slice of the same width
   * of the single value (tried along each dimension, aligned shifts). */
  const vd_stage_value *sv = &st->vals[t->svalue];
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
      if ((rc = vd_smt_tensor_slice(&c->ten[t->svalue], lo, hi, &other, &scratch)) != VD_OK) {
        if (rc == VD_ENOMEM) {
          rc = VD_OOM(c->d);
          goto done;
        }
        rc = VD_OK; /* a slice outside the value: no candidate here */
        break;
      }
      eq = 0;
      if ((size_t)other.numel == n) rc = proves_equal(c, acc, other.t, n, &eq);
      vd_smt_tensor_free(&other);
      if (rc != VD_OK) goto done;
      if (eq) {
        v->diagnosis = VD_DX_PERMUTED_SLICES;
        snprintf(v->factor, sizeof(v->factor), "holds dim %d [%lld:%lld) of the reduced single tensor", dim,
                 (long long)start, (long long)(start + w));
        break;
      }
    }
  }
  /* PERMUTED_SLICES within the slice: the candidate's k equal blocks along
   * one dimension are the slice's blocks in another order (an all_gather
   * that concatenates in process-group order instead of slice order). */
  if (v->diagnosis == VD_DX_WRONG_VALUE && rc == VD_OK) rc = block_permutation(c, t, &slice, acc, v);
done:
  vd_free(want);
  vd_free(acc);
  vd_free(scaled);
  vd_smt_tensor_free(&slice);
  return rc;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Fills the counterexample (elements, copies, flagged pieces) from the
 * solver's differing pairs. */
static vd_rc record_cex(solve_ctx *c, const pair_list *pl, vd_smt_result *r, vd_stage_verdict *v) {
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
      unflatten(t->rlo, t->rhi, st->vals[t->svalue].ndim, m->elem, e);
      if (v->elems[k].target == m->target && memcmp(v->elems[k].elem, e, sizeof(e)) == 0) seen = 1;
    }
    if (seen) continue;
    const vd_stage_target *t = &st->targets[m->target];
    vd_stage_cex_elem *ce = &v->elems[v->n_elems++];
    memset(ce, 0, sizeof(*ce));
    ce->target = m->target;
    unflatten(t->rlo, t->rhi, st->vals[t->svalue].ndim, m->elem, ce->elem);
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
static void stage_where(const solve_ctx *c, char *buf, size_t n) {
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

/* Steps (1)-(4): the terms of every stage value.  *ready = 1 when the
 * pairs can be built; otherwise v holds an INCONCLUSIVE verdict with its
 * reason (a stage too large, an operator without an encoder, an encoder
 * that refused a node, hypotheses that are not definitions). */
static vd_rc encode_stage(solve_ctx *c, vd_stage_verdict *v, int *ready) {
  const vd_stage *st = c->st;
  const vd_stage_solve_opts *o = c->o;
  vd_diag *d = c->d;
  vd_rc rc = VD_OK;
  char unsupported[300] = "";
  *ready = 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    int64_t n = 1;
    for (int k = 0; k < st->vals[i].ndim; k++) n *= st->vals[i].rshape[k];
    if (o->max_elems > 0 && n > o->max_elems) {
      v->verdict = VD_SMT_INCONCLUSIVE;
      snprintf(v->reason, sizeof(v->reason), "stage too large to check: a value has %lld elements%s",
               (long long)n, st->reduced ? "" : " (shapes could not be reduced)");
      return rc;
    }
  }
  /* SOUNDNESS (vacuity): the obligation's only hypotheses are the lineage
   * of the parallel leaves, and they are eliminated by construction: each
   * hypothesis leaf is DEFINED as terms of its single value's slice (a
   * replica is the slice itself; n partial parts are n-1 fresh symbols and
   * the remainder), over single leaves that are distinct free symbols.  A
   * set of definitions of fresh names over free symbols is satisfiable, so
   * the proof is never vacuous.  The cheap part of that argument is checked
   * here: every hypothesis leaf is defined from a single value of this
   * stage, within that value's reduced extent.  A stage that fails it is
   * INCONCLUSIVE (recheck checks the written obligation's hypotheses with a
   * solver too). */
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    if (sv->side != 1 || sv->producer >= 0 || sv->leaf_piece < 0) continue;
    int ok = sv->hyp_svalue >= 0 && (uint32_t)sv->hyp_svalue < st->n_vals && st->vals[sv->hyp_svalue].side == 0 &&
             (size_t)sv->leaf_piece < c->lt->n_pieces && st->vals[sv->hyp_svalue].ndim == sv->ndim;
    for (int k = 0; ok && k < sv->ndim; k++)
      ok = sv->rlo[k] >= 0 && sv->rlo[k] <= sv->rhi[k] && sv->rhi[k] <= st->vals[sv->hyp_svalue].rshape[k];
    if (!ok) {
      v->verdict = VD_SMT_INCONCLUSIVE;
      snprintf(v->reason, sizeof(v->reason),
               "vacuity check: the hypothesis of parallel value %u is not a definition over a single value of the "
               "stage (internal error, docs/verifier.md section 4)", i);
      return VD_OK;
    }
  }
  c->ten = vd_calloc(st->n_vals ? st->n_vals : 1, sizeof(*c->ten));
  if (!c->ten) {
    return VD_OOM(d);
  }
  int stop = 0;
  for (uint32_t ni = 0; ni < st->n_nodes && rc == VD_OK && !stop; ni++) rc = precheck_node(c, ni, &stop);
  /* Single leaves, then nodes in stage order (single side first by
   * construction); parallel leaves are made when first reached, after the
   * single values they are built from exist. */
  for (uint32_t i = 0; i < st->n_vals && rc == VD_OK; i++)
    if (st->vals[i].side == 0 && st->vals[i].producer < 0) rc = make_single_leaf(c, i);
  int leaves_done = 0;
  for (uint32_t ni = 0; ni <= st->n_nodes && rc == VD_OK && !unsupported[0]; ni++) {
    if (!leaves_done && (ni == st->n_nodes || st->nodes[ni].side == 1)) {
      for (uint32_t i = 0; i < st->n_vals && rc == VD_OK; i++)
        if (st->vals[i].side == 1 && st->vals[i].producer < 0) rc = make_parallel_leaf(c, i);
      leaves_done = 1;
    }
    if (ni < st->n_nodes && rc == VD_OK) rc = encode_node(c, ni, unsupported, sizeof(unsupported));
  }
  if (rc == VD_EINPUT) {
    /* An encoder refused the node (shape or attribute it cannot handle):
     * not a proof, so inconclusive, with the encoder's message. */
    char line[VD_DIAG_TEXT + 200];
    vd_diag_format(d, line, sizeof(line));
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason), "encoder refused: %s", line);
    vd_diag_clear(d);
    rc = VD_OK;
    return rc;
  }
  if (rc != VD_OK) return rc;
  if (unsupported[0]) {
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason), "%s", unsupported);
    return rc;
  }
  *ready = 1;
  return VD_OK;
}

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
  n->rng ^= n->rng << 13;
  n->rng ^= n->rng >> 7;
  n->rng ^= n->rng << 17;
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
  const vd_stage_node *sn = &st->nodes[ni];
  const vd_graph_t *g = graph_of(c, sn->side);
  const vd_gnode_t *gn = &g->nodes[sn->gnode];
  const vd_plan_t *p = g->plan;
  const vd_node_t *pn = &p->nodes[gn->pnode];
  char record[256];
  node_record(c, sn, record, sizeof(record));
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
  for (uint32_t k = 0; k < sn->n_in; k++) {
    in[k] = n->val[st->idx[sn->in_off + k]];
    shape_of(&st->vals[st->idx[sn->in_off + k]], &sh[k]);
  }
  for (uint32_t k = 0; k < sn->n_out; k++) {
    out[k] = n->val[st->idx[sn->out_off + k]];
    shape_of(&st->vals[st->idx[sn->out_off + k]], &sh[sn->n_in + k]);
  }
  const vd_plan_t *ap;
  const vd_node_t *an;
  solve_ctx quiet = *c;
  quiet.d = d;
  if ((rc = node_attrs(&quiet, p, pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
  vd_op_call oc = {.op = sn->op, .plan = ap, .node = an, .record = record, .n_in = sn->n_in, .n_out = sn->n_out,
                   .n_part = node_parts(gn, sn), .in = in, .in_shape = sh, .out = out, .out_shape = sh + sn->n_in,
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
        unflatten(t->rlo, t->rhi, ss.ndim, e, el);
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

static vd_rc cex_eval(solve_ctx *c, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  num_ctx n = {.in = v->inputs, .n_in = v->n_inputs, .rng = 0x9e3779b97f4a7c15ull ^ st->id};
  n.val = vd_calloc(st->n_vals + 1, sizeof(double *));
  if (!n.val) return VD_OOM(c->d);
  vd_rc rc = VD_OK;
  for (uint32_t i = 0; i < st->n_vals && rc == VD_OK; i++) {
    vd_op_shape sh;
    shape_of(&st->vals[i], &sh);
    int64_t ne = numel_of(&sh);
    if (!(n.val[i] = vd_calloc((size_t)(ne > 0 ? ne : 1), sizeof(double)))) rc = VD_OOM(c->d);
  }
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
  for (uint32_t i = 0; i < st->n_vals; i++) vd_free(n.val[i]);
  vd_free(n.val);
  return rc;
}

/* ---- entry ------------------------------------------------------------------ */

vd_rc vd_stage_solve(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                     vd_stage_verdict *v, vd_diag *d) {
  double t0 = vd_clock_ms();
  memset(v, 0, sizeof(*v));
  solve_ctx c = {.s = s, .lt = lt, .st = st, .o = o, .d = d};
  pair_list pl = {0};
  vd_smt_result r;
  memset(&r, 0, sizeof(r));
  vd_rc rc = VD_OK;

  vd_smt_set_timeout(s, o->timeout_ms);
  vd_smt_set_seed(s, o->seed ? o->seed : (uint64_t)VD_LIM_SEED);
  vd_smt_set_fast_path(s, o->fast_path);
  vd_smt_set_witness_first(s, o->witness_first && st->n_nodes > o->witness_first);
  vd_smt_set_cross_check(s, o->cross_check);
  if (o->budget == UINT64_MAX) vd_smt_set_budget(s, 0, 0);
  else if (o->budget) vd_smt_set_budget(s, o->budget, o->budget);
  else vd_smt_set_budget(s, VD_SMT_DEFAULT_NF_STEPS, VD_SMT_DEFAULT_RLIMIT);
  int ready = 0;
  if ((rc = encode_stage(&c, v, &ready)) != VD_OK || !ready) goto done;
  if ((rc = build_pairs(&c, &pl)) != VD_OK) goto done;
  if ((rc = vd_smt_check(s, pl.par, pl.single, pl.n, &r, d)) != VD_OK) goto done;
  v->verdict = r.verdict;
  v->by_fast_path = r.by_fast_path;
  v->cross = r.cross;
  v->limit = r.limit;
  v->work = r.nf_steps + r.rlimit_used;
  if (r.verdict == VD_SMT_INCONCLUSIVE) {
    char where[500];
    stage_where(&c, where, sizeof(where));
    if (r.limit == VD_SMT_LIMIT_BUDGET && r.rlimit_used == 0)
      snprintf(v->reason, sizeof(v->reason), "budget exhausted: %s; %s", r.reason, where);
    else if (r.limit == VD_SMT_LIMIT_BUDGET)
      snprintf(v->reason, sizeof(v->reason),
               "budget exhausted: solver: %s (%llu Z3 resource units; normal form %llu steps%s); %s",
               r.reason, (unsigned long long)r.rlimit_used, (unsigned long long)r.nf_steps,
               r.nf_gave_up ? ", gave up" : "", where);
    else if (r.limit == VD_SMT_LIMIT_WALL)
      snprintf(v->reason, sizeof(v->reason), "%s (normal form %llu steps%s); %s", r.reason,
               (unsigned long long)r.nf_steps, r.nf_gave_up ? ", gave up" : "", where);
    else
      snprintf(v->reason, sizeof(v->reason), "solver: %s; %s", r.reason[0] ? r.reason : "unknown", where);
  } else if (r.verdict == VD_SMT_NOT_EQUIVALENT && o->verdict_only) {
    /* OPTIMIZATION-ONLY: the difference is proved (a witness or the
     * solver's model); reading its values back and trying the refined
     * diagnoses costs 5-10 times the check itself, for a failure the
     * caller will not report. */
    v->diagnosis = VD_DX_WRONG_VALUE;
    snprintf(v->reason, sizeof(v->reason), "%zu element(s) differ (values not read: verdict only)", r.n_diffs);
  } else if (r.verdict == VD_SMT_NOT_EQUIVALENT) {
    if ((rc = record_cex(&c, &pl, &r, v)) != VD_OK) goto done;
    if (r.n_diffs > 0 && st->n_nodes > VD_STAGE_CLASSIFY_MAX_NODES) {
      /* OPTIMIZATION-ONLY: a stage the size of a model (a bug upstream of
       * the inferred lineages of a boundary-only plan) keeps the generic
       * diagnosis: each refinement below is another check of model-sized
       * terms.  The verdict is the counterexample's, unchanged. */
      v->diagnosis = VD_DX_WRONG_VALUE;
    } else if (r.n_diffs > 0) {
      const pair_meta *m = &pl.meta[r.diffs[0].index];
      if ((rc = classify(&c, m->target, m->piece, &r.diffs[0], v)) != VD_OK) goto done;
    } else {
      v->diagnosis = VD_DX_WRONG_VALUE;
    }
    if (r.n_diffs > 0 && (rc = cex_eval(&c, v)) != VD_OK) goto done;
    if (r.n_diffs || !r.reason[0]) snprintf(v->reason, sizeof(v->reason), "%zu element(s) differ", r.n_diffs);
    else snprintf(v->reason, sizeof(v->reason), "%s", r.reason); /* proved, values not computed */
  }
done:
  vd_smt_result_free(&r);
  pairs_free(&pl);
  if (c.ten)
    for (uint32_t i = 0; i < st->n_vals; i++) vd_smt_tensor_free(&c.ten[i]);
  vd_free(c.ten);
  vd_diag reset_diag;
  vd_diag_clear(&reset_diag);
  vd_smt_reset(s, &reset_diag);
  v->ms = vd_clock_ms() - t0;
  return rc;
}

vd_rc vd_stage_obligation(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                          const char *header, FILE *out, int *written, vd_smt_cert_stats *stats,
                          vd_stage_verdict *v, vd_diag *d) {
  memset(v, 0, sizeof(*v));
  memset(stats, 0, sizeof(*stats));
  *written = 0;
  solve_ctx c = {.s = s, .lt = lt, .st = st, .o = o, .d = d};
  pair_list pl = {0};
  int ready = 0;
  vd_rc rc = encode_stage(&c, v, &ready);
  if (rc == VD_OK && ready) rc = build_pairs(&c, &pl);
  if (rc == VD_OK && ready) rc = vd_smt_write_obligation(s, pl.par, pl.single, pl.n, header, out, stats, d);
  if (rc == VD_OK && ready) *written = 1;
  pairs_free(&pl);
  if (c.ten)
    for (uint32_t i = 0; i < st->n_vals; i++) vd_smt_tensor_free(&c.ten[i]);
  vd_free(c.ten);
  vd_diag reset_diag;
  vd_diag_clear(&reset_diag);
  vd_smt_reset(s, &reset_diag);
  return rc;
}
