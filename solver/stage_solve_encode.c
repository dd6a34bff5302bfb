/*
 * solver/stage_solve_encode.c - steps (1)-(5) of proving one stage (stage_solve.c): leaves
 * (fresh single symbols, parallel leaves from their lineage), nodes encoded
 * in stage order (attribute overrides through a one-node scratch plan), and
 * the target pairs handed to vd_smt_check.
 */
#include "stage_solve_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/limits.h"
#include "../common/mem.h"

/* ---- per-stage working state -------------------------------------------- */

/* "node 12 'layers.0.wq' (rank 3, mb 1)" */
void vd_stage_solve_i_node_record(const solve_ctx *c, const vd_stage_node *sn, char *buf, size_t n) {
  const vd_graph_t *g = graph_of(c, sn->side);
  const vd_gnode_t *gn = &g->nodes[sn->gnode];
  const vd_node_t *pn = &g->plan->nodes[gn->pnode];
  snprintf(buf, n, "%s node %lld '%s' %s (rank %lld, mb %d)", sn->side ? "parallel" : "single",
           (long long)pn->id, vd_plan_s(g->plan, pn->name), vd_node_op(g->plan, pn),
           (long long)vd_graph_rank(g, pn->rank, sn->replica), gn->mb);
}

void vd_stage_solve_i_node_view(const solve_ctx *c, uint32_t ni, node_view *nv) {
  nv->sn = &c->st->nodes[ni];
  const vd_graph_t *g = graph_of(c, nv->sn->side);
  nv->gn = &g->nodes[nv->sn->gnode];
  nv->p = g->plan;
  nv->pn = &nv->p->nodes[nv->gn->pnode];
  vd_stage_solve_i_node_record(c, nv->sn, nv->record, sizeof(nv->record));
}

void vd_stage_solve_i_node_shapes(const vd_stage *st, const vd_stage_node *sn, vd_op_shape *sh) {
  for (uint32_t k = 0; k < sn->n_in; k++) shape_of(&st->vals[st->idx[sn->in_off + k]], &sh[k]);
  for (uint32_t k = 0; k < sn->n_out; k++) shape_of(&st->vals[st->idx[sn->out_off + k]], &sh[sn->n_in + k]);
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
vd_rc vd_stage_solve_i_scale_terms(solve_ctx *c, vd_smt_tensor *t, double f) {
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
  /* unscaled_check (stage_solve.c): a leaf of factor f != 1 is read as its
   * single value, and one copy's share of a mean (part k of n, times n) as
   * the mean of the copies: the whole slice; with unscaled 2, a partial
   * sum of factor 1 (part k of n) as the sum of the copies: the whole slice */
  int as_single = (c->unscaled == 1 && pc->f != 1.0 && (pc->part_n <= 1 || pc->f == (double)pc->part_n)) ||
                  (c->unscaled == 2 && pc->f == 1.0 && pc->part_n > 1);
  if (pc->part_n <= 1 || as_single) {
    rc = vd_smt_tensor_copy(&slice, &c->ten[i], c->d);
  } else {
    char key[256];
    char name[160];
    snprintf(name, sizeof(name), "%s@v%u", vd_plan_s(c->lt->gs->plan, tensor_of(c, hv)->name), hv->value);
    vd_smt_slice_key(key, sizeof(key), name, sv->ndim, sv->rlo, sv->rhi);
    rc = vd_smt_partial_parts(c->s, &slice, key, pc->part_n, pc->part_k, &c->ten[i], c->d);
  }
  vd_smt_tensor_free(&slice);
  if (rc == VD_OK && !as_single) rc = vd_stage_solve_i_scale_terms(c, &c->ten[i], pc->f);
  return rc;
}

/* A one-node plan *out (initialised here) holding a copy of node pn of p,
 * without operands or attributes; *idx its node index. */
vd_rc vd_stage_solve_i_lone_node(const vd_plan_t *p, const vd_node_t *pn, vd_plan_t *out, uint32_t *idx) {
  VD_CHECK(vd_plan_init(out, p->kind));
  vd_node_t nn = *pn;
  nn.segment = 0;
  return vd_plan_add_node(out, &nn, vd_node_op(p, pn), vd_plan_s(p, pn->name), NULL, 0, NULL, 0, vd_node_group(p, pn),
                          pn->n_group, idx);
}

/* Copies node pn's attributes into a one-node scratch plan, replacing the
 * overridden ones, so the encoder reads the scaled positions. */
static vd_rc scratch_node(const vd_plan_t *p, const vd_node_t *pn, const vd_attr_override *ovr, uint32_t n_ovr,
                          vd_plan_t *scratch) {
  uint32_t idx;
  VD_CHECK(vd_stage_solve_i_lone_node(p, pn, scratch, &idx));
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
uint32_t vd_stage_solve_i_node_parts(const vd_gnode_t *gn, const vd_stage_node *sn) {
  uint32_t n_part = gn->n_part ? gn->n_part : 1;
  if (gn->n_in > 0 && sn->n_in != gn->n_in) n_part = n_part * sn->n_in / gn->n_in; /* virtual replicas */
  return n_part;
}

/* The plan and node whose attributes the operator reads: pn itself, or a
 * one-node scratch copy with the stage's overrides applied. */
vd_rc vd_stage_solve_i_node_attrs(solve_ctx *c, const vd_plan_t *p, const vd_node_t *pn, const vd_stage_node *sn,
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
  node_view nv;
  vd_stage_solve_i_node_view(c, ni, &nv);
  const vd_stage_node *sn = nv.sn;
  if (sn->op < 0 || !vd_smt_encoder((vd_op_id)sn->op)) {
    snprintf(unsupported, n_unsupported, "unsupported operator '%s' at %s", vd_node_op(nv.p, nv.pn), nv.record);
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
  uint32_t n_part = vd_stage_solve_i_node_parts(nv.gn, sn);
  const vd_plan_t *ap;
  const vd_node_t *an;
  if ((rc = vd_stage_solve_i_node_attrs(c, nv.p, nv.pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
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
      .op = sn->op, .smt = c->s, .plan = ap, .node = an, .record = nv.record,
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
  const vd_stage_node *sn = &c->st->nodes[ni];
  if (sn->op < 0 || !vd_smt_encoder((vd_op_id)sn->op)) {
    *stop = 1;
    return VD_OK;
  }
  node_view nv;
  vd_stage_solve_i_node_view(c, ni, &nv);
  vd_op_shape *sh = vd_malloc(sizeof(vd_op_shape) * ((size_t)sn->n_in + sn->n_out + 1));
  vd_plan_t scratch = {0};
  vd_rc rc = VD_OK;
  if (!sh) return VD_OOM(c->d);
  vd_stage_solve_i_node_shapes(c->st, sn, sh);
  uint32_t n_part = vd_stage_solve_i_node_parts(nv.gn, sn);
  const vd_plan_t *ap;
  const vd_node_t *an;
  if ((rc = vd_stage_solve_i_node_attrs(c, nv.p, nv.pn, sn, &scratch, &ap, &an)) != VD_OK) goto done;
  vd_op_call oc = {.op = sn->op, .plan = ap, .node = an, .record = nv.record, .n_in = sn->n_in, .n_out = sn->n_out,
                   .n_part = n_part, .in_shape = sh, .out_shape = sh + sn->n_in, .diag = c->d};
  rc = vd_op_check(&oc);
done:
  vd_plan_free(&scratch);
  vd_free(sh);
  return rc;
}

/* ---- targets ------------------------------------------------------------ */

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

void vd_stage_solve_i_pairs_free(pair_list *pl) {
  vd_free(pl->par);
  vd_free(pl->single);
  vd_free(pl->meta);
  memset(pl, 0, sizeof(*pl));
}

/* Builds the target slice of the single value (reduced coordinates). */
vd_rc vd_stage_solve_i_target_slice(solve_ctx *c, const vd_stage_target *t, vd_smt_tensor *slice) {
  return vd_smt_tensor_slice(&c->ten[t->svalue], t->rlo, t->rhi, slice, c->d);
}

/* Sum over one representative piece per part (the first of each k), in
 * ascending k.  O(n + pieces): the first piece of each part is found in one
 * pass (n <= LIN_PART_MAX, plans/io.c), not by a scan per part. */
vd_rc vd_stage_solve_i_parts_sum(solve_ctx *c, const vd_stage_target *t, const vd_smt_tensor *slice, vd_term *sum) {
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

vd_rc vd_stage_solve_i_build_pairs(solve_ctx *c, pair_list *pl) {
  const vd_stage *st = c->st;
  vd_rc rc = VD_OK;
  for (uint32_t ti = 0; ti < st->n_targets && rc == VD_OK; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const uint32_t *pp = target_pairs(st, t);
    vd_smt_tensor slice = {0};
    vd_term *sum = NULL;
    if ((rc = vd_stage_solve_i_target_slice(c, t, &slice)) != VD_OK) break;
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
      if (t->n_pieces) rc = vd_stage_solve_i_scale_terms(c, &slice, c->lt->pieces[pp[0]].f);
      sum = vd_calloc((size_t)slice.numel, sizeof(*sum));
      if (!sum) rc = VD_OOM(c->d);
      if (rc == VD_OK) rc = vd_stage_solve_i_parts_sum(c, t, &slice, sum);
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

/* Sets v INCONCLUSIVE and returns 1 when a value of the stage has more
 * elements than --max-elems allows. */
static int too_large(const solve_ctx *c, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    int64_t n = 1;
    for (int k = 0; k < st->vals[i].ndim; k++) n *= st->vals[i].rshape[k];
    if (c->o->max_elems > 0 && n > c->o->max_elems) {
      v->verdict = VD_SMT_INCONCLUSIVE;
      snprintf(v->reason, sizeof(v->reason), "stage too large to check: a value has %lld elements%s",
               (long long)n, st->reduced ? "" : " (shapes could not be reduced)");
      return 1;
    }
  }
  return 0;
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
 * solver too): sets v and returns 0. */
static int hypotheses_are_definitions(const solve_ctx *c, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
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
      return 0;
    }
  }
  return 1;
}

/* The shape prechecks, then the terms: single leaves, then nodes in stage
 * order (single side first by construction); parallel leaves are made
 * when first reached, after the single values they are built from exist.
 * unsupported: set at the first operator without an encoder. */
static vd_rc encode_values(solve_ctx *c, char *unsupported, size_t n_unsupported) {
  const vd_stage *st = c->st;
  vd_rc rc = VD_OK;
  int stop = 0;
  for (uint32_t ni = 0; ni < st->n_nodes && rc == VD_OK && !stop; ni++) rc = precheck_node(c, ni, &stop);
  for (uint32_t i = 0; i < st->n_vals && rc == VD_OK; i++)
    if (st->vals[i].side == 0 && st->vals[i].producer < 0) rc = make_single_leaf(c, i);
  int leaves_done = 0;
  for (uint32_t ni = 0; ni <= st->n_nodes && rc == VD_OK && !unsupported[0]; ni++) {
    if (!leaves_done && (ni == st->n_nodes || st->nodes[ni].side == 1)) {
      for (uint32_t i = 0; i < st->n_vals && rc == VD_OK; i++)
        if (st->vals[i].side == 1 && st->vals[i].producer < 0) rc = make_parallel_leaf(c, i);
      leaves_done = 1;
    }
    if (ni < st->n_nodes && rc == VD_OK) rc = encode_node(c, ni, unsupported, n_unsupported);
    /* reducer_check (stage_solve.c): this node's outputs rescaled */
    for (uint32_t o = 0; ni < st->n_nodes && c->rescale_node == ni + 1 && o < st->nodes[ni].n_out && rc == VD_OK; o++)
      rc = vd_stage_solve_i_scale_terms(c, &c->ten[st->idx[st->nodes[ni].out_off + o]], c->rescale_f);
  }
  return rc;
}

/* Steps (1)-(4): the terms of every stage value.  *ready = 1 when the
 * pairs can be built; otherwise v holds an INCONCLUSIVE verdict with its
 * reason (a stage too large, an operator without an encoder, an encoder
 * that refused a node, hypotheses that are not definitions). */
vd_rc vd_stage_solve_i_encode_stage(solve_ctx *c, vd_stage_verdict *v, int *ready) {
  const vd_stage *st = c->st;
  vd_diag *d = c->d;
  char unsupported[300] = "";
  *ready = 0;
  if (too_large(c, v) || !hypotheses_are_definitions(c, v)) return VD_OK;
  c->ten = vd_calloc(st->n_vals ? st->n_vals : 1, sizeof(*c->ten));
  if (!c->ten) {
    return VD_OOM(d);
  }
  vd_rc rc = encode_values(c, unsupported, sizeof(unsupported));
  if (rc == VD_EINPUT) {
    /* An encoder refused the node (shape or attribute it cannot handle):
     * not a proof, so inconclusive, with the encoder's message. */
    char line[VD_DIAG_TEXT + 200];
    vd_diag_format(d, line, sizeof(line));
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason), "encoder refused: %s", line);
    vd_diag_clear(d);
    return VD_OK;
  }
  if (rc != VD_OK) return rc;
  if (unsupported[0]) {
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason), "%s", unsupported);
    return VD_OK;
  }
  *ready = 1;
  return VD_OK;
}
