/*
 * stages/shape.c - shape reduction of one stage (docs/verifier.md section 3,
 * docs/shape-reduction.md).
 *
 * Describes a stage to the closed-form reducer of ops/reduce.h: one value
 * per stage value (both sides), each node's registry reduction rule, the
 * lineage slices of hypotheses and targets as relations, then reads the
 * reduced shapes and scaled position attributes back into the stage.
 * A node whose operator is unknown, or whose rule does not cover its operand
 * form, leaves the whole stage unreduced (reduced = 0, rshape = shape,
 * noreduce_node set): not an error.
 */
#include "stage.h"

#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "../ops/ops.h"
#include "../ops/reduce.h"

/* ---- one stage ---------------------------------------------------------------- */

static const vd_graph_t *graph_of(const vd_lin_table *lt, uint8_t side) {
  if (!lt) return NULL;
  return side ? lt->gp : lt->gs;
}

/* Plan and plan node of stage node i (NULL when the stage has no graphs,
 * as in hand-built tests without plans). */
static const vd_node_t *plan_node(const vd_lin_table *lt, const vd_stage *st, uint32_t i, const vd_plan_t **plan) {
  const vd_stage_node *n = &st->nodes[i];
  const vd_graph_t *g = graph_of(lt, n->side);
  *plan = NULL;
  if (!g || !g->plan || n->gnode >= g->n_nodes) return NULL;
  *plan = g->plan;
  uint32_t pn = g->nodes[n->gnode].pnode;
  return pn < g->plan->n_nodes ? &g->plan->nodes[pn] : NULL;
}

/* Appends string x to rec at *o (bounded, NUL-terminated). */
static void rec_put(char *rec, size_t rsz, size_t *o, const char *x) {
  size_t l = strlen(x);
  if (*o + 1 >= rsz) return;
  if (l > rsz - 1 - *o) l = rsz - 1 - *o;
  memcpy(rec + *o, x, l);
  *o += l;
  rec[*o] = 0;
}

static void rec_int(char *rec, size_t rsz, size_t *o, long long v) {
  char b[24];
  size_t n = 0;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do b[n++] = (char)('0' + u % 10); while ((u /= 10) && n < sizeof(b) - 2);
  if (v < 0) b[n++] = '-';
  char r[24];
  for (size_t i = 0; i < n; i++) r[i] = b[n - 1 - i];
  r[n] = 0;
  rec_put(rec, rsz, o, r);
}

/* "stage S node I (single node N 'name', op OP)": the record every reduction
 * message of the node names.  Built by hand, not with snprintf: it is made
 * for every node of every stage cut and almost never printed
 * (OPTIMIZATION-ONLY, the same text). */
static void node_record(const vd_lin_table *lt, const vd_stage *st, uint32_t i, char *rec, size_t rsz) {
  const vd_plan_t *p;
  const vd_node_t *pn = plan_node(lt, st, i, &p);
  const vd_stage_node *n = &st->nodes[i];
  const char *op = n->op >= 0 && n->op < VD_OP__COUNT ? vd_op_name((vd_op_id)n->op) : "?";
  size_t o = 0;
  if (rsz) rec[0] = 0;
  rec_put(rec, rsz, &o, "stage ");
  rec_int(rec, rsz, &o, st->id);
  rec_put(rec, rsz, &o, " node ");
  rec_int(rec, rsz, &o, i);
  if (pn) {
    rec_put(rec, rsz, &o, n->side ? " (parallel node " : " (single node ");
    rec_int(rec, rsz, &o, (long long)pn->id);
    rec_put(rec, rsz, &o, " '");
    rec_put(rec, rsz, &o, vd_plan_s(p, pn->name));
    rec_put(rec, rsz, &o, "', op ");
  } else {
    rec_put(rec, rsz, &o, " (op ");
  }
  rec_put(rec, rsz, &o, op);
  rec_put(rec, rsz, &o, ")");
}

/* A hypothesis' slice in its single value's (windowed) coordinates. */
static void hyp_slice(const vd_lin_table *lt, const vd_stage_value *v, const int64_t **lo, const int64_t **hi) {
  if (v->has_pslice) {
    *lo = v->plo;
    *hi = v->phi;
  } else {
    *lo = lt->pieces[v->leaf_piece].lo;
    *hi = lt->pieces[v->leaf_piece].hi;
  }
}

/* A target's slice in its single value's (windowed) coordinates. */
static const int64_t *tg_lo(const vd_stage_target *t) { return t->has_bslice ? t->blo : t->lo; }
static const int64_t *tg_hi(const vd_stage_target *t) { return t->has_bslice ? t->bhi : t->hi; }

static void leave_unreduced(const vd_lin_table *lt, vd_stage *st) {
  st->reduced = 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &st->vals[i];
    memcpy(v->rshape, v->shape, sizeof(v->rshape));
    if (v->leaf_piece >= 0 && (v->has_pslice || (lt && (size_t)v->leaf_piece < lt->n_pieces))) {
      const int64_t *lo, *hi;
      hyp_slice(lt, v, &lo, &hi);
      memcpy(v->rlo, lo, sizeof(v->rlo));
      memcpy(v->rhi, hi, sizeof(v->rhi));
    }
  }
  for (uint32_t i = 0; i < st->n_targets; i++) {
    memcpy(st->targets[i].rlo, tg_lo(&st->targets[i]), sizeof(st->targets[i].rlo));
    memcpy(st->targets[i].rhi, tg_hi(&st->targets[i]), sizeof(st->targets[i].rhi));
  }
  for (uint32_t i = 0; i < st->n_nodes; i++) st->nodes[i].n_ovr = 0;
  vd_free(st->ovr);
  st->ovr = NULL;
  st->n_ovr = 0;
}

/* Fills rshape, rlo/rhi and attribute overrides from the class ratios. */
static vd_rc apply(vd_reducer *c, const vd_lin_table *lt, vd_stage *st, vd_diag *d) {
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &st->vals[i];
    for (int32_t j = 0; j < v->ndim; j++) v->rshape[j] = vd_reducer_scale(c, i, j, v->shape[j]);
    if (v->leaf_piece >= 0 && (v->has_pslice || (lt && (size_t)v->leaf_piece < lt->n_pieces)) &&
        v->hyp_svalue >= 0) {
      const int64_t *lo, *hi;
      hyp_slice(lt, v, &lo, &hi);
      for (int32_t j = 0; j < v->ndim; j++) {
        v->rlo[j] = vd_reducer_scale(c, (uint32_t)v->hyp_svalue, j, lo[j]);
        v->rhi[j] = vd_reducer_scale(c, (uint32_t)v->hyp_svalue, j, hi[j]);
      }
    }
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    vd_stage_target *tg = &st->targets[t];
    const vd_stage_value *s = &st->vals[tg->svalue];
    for (int32_t j = 0; j < s->ndim; j++) {
      tg->rlo[j] = vd_reducer_scale(c, (uint32_t)tg->svalue, j, tg_lo(tg)[j]);
      tg->rhi[j] = vd_reducer_scale(c, (uint32_t)tg->svalue, j, tg_hi(tg)[j]);
    }
  }
  /* Overrides, in node order (POS and AVG records were emitted node by
   * node, and a node emits its POS records before its AVG record). */
  size_t n = 0, n_pos = vd_reducer_n_pos(c), n_avg = vd_reducer_n_avg(c), ia = 0;
  vd_attr_override *ov = n_pos + n_avg ? vd_calloc(n_pos + n_avg, sizeof(*ov)) : NULL;
  if (n_pos + n_avg && !ov) return VD_OOM(d);
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    st->nodes[i].ovr_off = (uint32_t)n;
    st->nodes[i].n_ovr = 0;
  }
  for (size_t i = 0; i <= n_pos; i++) {
    uint32_t node = i < n_pos ? 0 : UINT32_MAX;
    const char *attr = NULL;
    int64_t orig = 0, r = 0;
    if (i < n_pos) vd_reducer_pos(c, i, &node, &attr, &orig, &r);
    /* AVG records of the nodes before this one: the full-size divisor. */
    for (; ia < n_avg; ia++) {
      uint32_t an;
      int64_t full, red;
      vd_reducer_avg(c, ia, &an, &full, &red);
      if (an > node || (an == node && i < n_pos)) break;
      if (full == red) continue;
      vd_stage_node *sn = &st->nodes[an];
      if (sn->n_ovr == 0) sn->ovr_off = (uint32_t)n;
      ov[n].key = VD_OVR_DIVISOR;
      ov[n].value = full;
      n++;
      sn->n_ovr++;
    }
    if (i == n_pos || r == orig) continue;
    const vd_plan_t *plan;
    const vd_node_t *pn = plan_node(lt, st, node, &plan);
    const vd_attr_t *a = pn ? vd_node_attr(plan, pn, attr) : NULL;
    if (!a) {
      vd_free(ov);
      char rec[200];
      node_record(lt, st, node, rec, sizeof(rec));
      VD_FAIL(d, VD_EINTERNAL, NULL, rec, attr, "position attribute vanished");
    }
    vd_stage_node *sn = &st->nodes[node];
    if (sn->n_ovr == 0) sn->ovr_off = (uint32_t)n;
    ov[n].key = a->key;
    ov[n].value = r;
    n++;
    sn->n_ovr++;
  }
  vd_free(st->ovr);
  st->ovr = ov;
  st->n_ovr = (uint32_t)n;
  return VD_OK;
}

/* The stage-local node that computes (not copies) the index values that
 * node i looks rows up with (embedding ids, pick labels), or -1.  Reduction
 * scales the rows an index selects, never the index values: that is
 * uniform while both sides compare the same id terms, but a computed index
 * (ids * 2 on one rank) can select rows that only the full row count tells
 * apart (id and 2 * id pick the same row once a vocabulary shard is one
 * row).  Such a stage is not reduced. */
static int32_t index_computed_by(const vd_stage *st, uint32_t i) {
  const vd_stage_node *n = &st->nodes[i];
  int32_t slot = n->op >= 0 && n->op < VD_OP__COUNT ? vd_op_index_of((vd_op_id)n->op)->slot : -1;
  if (slot < 0 || (uint32_t)slot >= n->n_in) return -1;
  /* Depth-first over the copies' inputs (a concat or all_gather copies
   * several), at most as many steps as the stage has nodes. */
  enum { CAP = 256 };
  uint32_t stack[CAP], top = 0, seen_nodes = 0;
  stack[top++] = st->idx[n->in_off + (uint32_t)slot];
  while (top) {
    int32_t pr = st->vals[stack[--top]].producer;
    if (pr < 0) continue;
    const vd_stage_node *p = &st->nodes[pr];
    if (!vd_op_copies_elements(p->op) || p->n_in == 0) return pr;
    if (++seen_nodes > st->n_nodes || top + p->n_in > CAP) return pr; /* too tangled to tell: not reduced */
    for (uint32_t k = 0; k < p->n_in; k++) stack[top++] = st->idx[p->in_off + k];
  }
  return -1;
}

/* Parallel leaves' reduced slices default to their original slices. */
static void default_reduced_slices(const vd_lin_table *lt, vd_stage *st) {
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &st->vals[i];
    if (v->leaf_piece >= 0 && (v->has_pslice || (lt && (size_t)v->leaf_piece < lt->n_pieces))) {
      const int64_t *lo, *hi;
      hyp_slice(lt, v, &lo, &hi);
      memcpy(v->rlo, lo, sizeof(v->rlo));
      memcpy(v->rhi, hi, sizeof(v->rhi));
    }
  }
}

/* The first node that rules out any reduction (an unknown operator, or
 * the computer of index values), or -1. */
static int32_t unreducible_node(const vd_stage *st) {
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    int32_t by = st->nodes[i].op < 0 || st->nodes[i].op >= VD_OP__COUNT ? (int32_t)i : index_computed_by(st, i);
    if (by >= 0) return by;
  }
  return -1;
}

/* The operator rules of every node; *norule gets the first node without a
 * rule (the stage is not reduced), or -1. */
static vd_rc operator_rules(vd_reducer *c, const vd_lin_table *lt, const vd_stage *st, int32_t *norule_node,
                            vd_diag *d) {
  char rec[200];
  *norule_node = -1;
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *n = &st->nodes[i];
    node_record(lt, st, i, rec, sizeof(rec));
    const vd_plan_t *plan;
    const vd_node_t *pn = plan_node(lt, st, i, &plan);
    int norule = 0;
    VD_CHECK(vd_reducer_node(c, i, n->op, plan, pn, st->idx + n->in_off, n->n_in, st->idx + n->out_off, n->n_out,
                             rec, &norule, d));
    if (norule) {
      *norule_node = (int32_t)i;
      return VD_OK;
    }
  }
  return VD_OK;
}

/* ---- the one-hot guard (docs/shape-reduction.md, ONEHOT) ----------------------
 * pick_backward writes g at the label's column and 0 at the others: a
 * one-hot row, not a block-replicated one.  Reduced, its class dimension C
 * (N classes to n, block b = N/n) carries g * n/N at the label's column
 * (ENC(pick_backward)): the block average A of the full-size one-hot (g/b on
 * the label's block).  A commutes with every operator that is affine in the
 * one-hot while its other operands are free of it (block-constant along C):
 * A(x + y) = A(x) + A(y), A(w * x) = w_r * A(x) for a replicated w, and a
 * contraction over C scaled by N/n (COUNT) gives b * sum A(x) = sum x
 * exactly, so the reduced sum of the one-hot over the classes is g, as at
 * full size.  Every reduced value derived from the one-hot is then the
 * block average of its full-size value (on replicated inputs), every other
 * value its exact reduced form (the existing argument).  A target T then
 * holds A(T) on both sides, T = U + c * onehot with U block-constant along
 * C (no other operator of the stage writes an index pattern along C: the
 * guard below) and c one coefficient per row; A(T_s) = A(T_p) for every
 * reduced input and label gives, at a column of the label's shard that is
 * not the label (MIN2: every shard of C keeps >= 2 columns), U_s = U_p
 * there, so, U being the same formula at every column of a shard, U_s =
 * U_p at the label's column too, and then c_s = c_p: T_s = T_p.  Soundness
 * and completeness both hold for the affine uses; at any other use (max,
 * exp, a product of two one-hot values, a pick or lookup that reads one
 * column of it, adam's g^2, sumsq) A does not commute, and the class C is
 * kept whole (KEEP): the stage is then checked unreduced along C, as exact
 * as a full-size check.  Also kept whole: a class C that an operator with an
 * index or position pattern of its own along it shares (embedding_backward's
 * scatter rows, the mask and rotary operators): their patterns are not block
 * averages, and a sum of the two representations could meet by accident. */

/* 1 when node n is affine in input slot k, every other input being free of
 * the one-hot (multilinear operators: the caller checks that only one input
 * holds it). */
static int onehot_affine(const vd_lin_table *lt, const vd_stage *st, uint32_t i, uint32_t k) {
  const vd_stage_node *n = &st->nodes[i];
  switch ((vd_op_id)n->op) {
  case VD_OP_EMBEDDING:
  case VD_OP_EMBEDDING_BACKWARD:
  case VD_OP_PICK:
  case VD_OP_PICK_BACKWARD:
  case VD_OP_APPLY_MASK:
  case VD_OP_APPLY_MASK_BACKWARD:
  case VD_OP_CAUSAL_MASK_BACKWARD:
    return 0; /* index or position patterns (F_LIN, but not block averages) */
  case VD_OP_MUL:
  case VD_OP_MATMUL:
  case VD_OP_LINEAR:
  case VD_OP_MUL_BACKWARD:
  case VD_OP_MATMUL_BACKWARD:
  case VD_OP_LINEAR_BACKWARD:
    return 1; /* multilinear */
  case VD_OP_DIV:
    return k == 0 || n->n_in == 1;
  case VD_OP_DIV_BACKWARD: /* (a, b, g) -> (g/b, -g a/b^2): affine in a and g */
    return n->n_in == 1 || k != 1;
  case VD_OP_POW_BACKWARD:
  case VD_OP_SQRT_BACKWARD:
  case VD_OP_RSQRT_BACKWARD:
  case VD_OP_EXP_BACKWARD:
  case VD_OP_LOG_BACKWARD:
  case VD_OP_SIGMOID_BACKWARD:
  case VD_OP_TANH_BACKWARD:
  case VD_OP_RELU_BACKWARD:
  case VD_OP_SILU_BACKWARD:
  case VD_OP_GELU_BACKWARD:
  case VD_OP_SOFTMAX_BACKWARD:
  case VD_OP_DROPOUT_BACKWARD:
    return k + 1 == n->n_in; /* linear in the gradient */
  case VD_OP_ALL_REDUCE: {
    const vd_plan_t *plan;
    const vd_node_t *pn = plan_node(lt, st, i, &plan);
    const char *r = pn ? vd_node_attr_str(plan, pn, "reduce", "sum") : "sum";
    return r && strcmp(r, "sum") == 0;
  }
  default:
    return n->op >= 0 && n->op < VD_OP__COUNT && vd_op_has((vd_op_id)n->op, VD_OPF_LINEAR);
  }
}

/* 1 when node i is affine in all its inputs together (several of them may
 * hold the one-hot): the linear operators and a summing all_reduce. */
static int onehot_joint(const vd_lin_table *lt, const vd_stage *st, uint32_t i) {
  int op = st->nodes[i].op;
  if (op == VD_OP_ALL_REDUCE) return onehot_affine(lt, st, i, 0);
  return op >= 0 && op < VD_OP__COUNT && vd_op_has((vd_op_id)op, VD_OPF_LINEAR) && onehot_affine(lt, st, i, 0);
}

/* Operators with an index or position pattern of their own along a dim. */
static int onehot_patterned(int op) {
  switch (op) {
  case VD_OP_EMBEDDING_BACKWARD:
  case VD_OP_CAUSAL_MASK:
  case VD_OP_CAUSAL_MASK_BACKWARD:
  case VD_OP_CREATE_MASK:
  case VD_OP_APPLY_MASK:
  case VD_OP_APPLY_MASK_BACKWARD:
  case VD_OP_ROPE:
  case VD_OP_ROPE_BACKWARD:
  case VD_OP_APPLY_ROTARY_EMB:
  case VD_OP_APPLY_ROTARY_EMB_BACKWARD:
  case VD_OP_TOPK_GATE: /* routing: a choice over the row, not block-constant where the row ties */
  case VD_OP_TOPK_GATE_BACKWARD:
  case VD_OP_GATE_FW:
  case VD_OP_GATE_FW_BACKWARD:
    return 1;
  default:
    return 0;
  }
}

static int has_mark(const uint8_t *mark, const vd_stage *st, uint32_t v) {
  for (int32_t j = 0; j < st->vals[v].ndim && j < VD_MAX_DIMS; j++)
    if (mark[(size_t)v * VD_MAX_DIMS + (size_t)j]) return 1;
  return 0;
}

/* The first node at which a one-hot (pick_backward's output) reaches a use
 * that is not affine in it along its class dimension, or an operator with a
 * pattern of its own shares that class; -1 when none.  The classes
 * (with PROD links) of every pick_backward's class dimension are marked;
 * a value holds the one-hot when a holder reaches it and it has a marked
 * dimension (a contraction over the whole class leaves none: its result is
 * exact).  Before the solve; *any is set when the stage has a pick_backward. */
static vd_rc onehot_nonaffine(vd_reducer *c, const vd_lin_table *lt, const vd_stage *st, int32_t *at, int *any,
                              vd_diag *d) {
  *at = -1;
  *any = 0;
  for (uint32_t i = 0; i < st->n_nodes && !*any; i++) *any = st->nodes[i].op == VD_OP_PICK_BACKWARD;
  if (!*any) return VD_OK;
  uint8_t *mark = vd_calloc((size_t)st->n_vals * VD_MAX_DIMS + 1, 1);
  uint8_t *hot = vd_calloc((size_t)st->n_vals + 1, 1);
  vd_rc rc = VD_OK;
  if (!mark || !hot) {
    rc = VD_OOM(d);
    goto done;
  }
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *n = &st->nodes[i];
    if (n->op != VD_OP_PICK_BACKWARD || n->n_out != 1) continue;
    uint32_t o = st->idx[n->out_off];
    if (st->vals[o].ndim != 2) continue;
    if ((rc = vd_reducer_linked(c, o, 1, mark, d)) != VD_OK) goto done;
    hot[o] = 1;
  }
  /* Stage nodes are in dependency order (each side's nodes after their
   * inputs' producers). */
  for (uint32_t i = 0; i < st->n_nodes && *at < 0; i++) {
    const vd_stage_node *n = &st->nodes[i];
    int patterned = onehot_patterned(n->op);
    uint32_t nhot = 0;
    for (uint32_t k = 0; k < n->n_in; k++) {
      uint32_t v = st->idx[n->in_off + k];
      if (patterned && has_mark(mark, st, v)) *at = (int32_t)i;
      if (hot[v] && has_mark(mark, st, v)) {
        nhot++;
        if (!onehot_affine(lt, st, i, k)) *at = (int32_t)i;
      }
    }
    for (uint32_t k = 0; k < n->n_out; k++)
      if (patterned && has_mark(mark, st, st->idx[n->out_off + k])) *at = (int32_t)i;
    if (nhot > 1 && !onehot_joint(lt, st, i)) *at = (int32_t)i;
    if (nhot && n->op != VD_OP_PICK_BACKWARD)
      for (uint32_t k = 0; k < n->n_out; k++) {
        uint32_t o = st->idx[n->out_off + k];
        if (has_mark(mark, st, o)) hot[o] = 1;
      }
  }
  if (*at < 0) goto done;
  /* Keep every one-hot's class whole. */
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *n = &st->nodes[i];
    if (n->op == VD_OP_PICK_BACKWARD && n->n_out == 1 && st->vals[st->idx[n->out_off]].ndim == 2)
      vd_reducer_keep(c, st->idx[n->out_off], 1);
  }
done:
  vd_free(mark);
  vd_free(hot);
  return rc;
}

/* Lineage: each hypothesis and each target piece relates its parallel
 * value to the single value it is a slice of. */
static vd_rc relate_lineage(vd_reducer *c, const vd_lin_table *lt, const vd_stage *st, vd_diag *d) {
  char rec[200];
  snprintf(rec, sizeof(rec), "stage %u", st->id);
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    if (v->leaf_piece < 0) continue;
    if (!lt || (size_t)v->leaf_piece >= lt->n_pieces || v->hyp_svalue < 0 || (uint32_t)v->hyp_svalue >= st->n_vals)
      return VD_ERR(d, VD_EINTERNAL, NULL, rec, "vals", "value %u: hypothesis without a lineage piece", i);
    const int64_t *plo, *phi;
    hyp_slice(lt, v, &plo, &phi);
    VD_CHECK(vd_reducer_relate(c, i, (uint32_t)v->hyp_svalue, plo, phi, rec, d));
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    const vd_stage_target *tg = &st->targets[t];
    if (tg->svalue < 0 || (uint32_t)tg->svalue >= st->n_vals)
      return VD_ERR(d, VD_EINTERNAL, NULL, rec, "targets", "target %u: bad single value", t);
    for (uint32_t k = 0; k < tg->n_pieces; k++) {
      uint32_t pv = st->idx[tg->piece_off + 2 * k + 1];
      if (pv >= st->n_vals) return VD_ERR(d, VD_EINTERNAL, NULL, rec, "targets", "target %u: bad piece value", t);
      VD_CHECK(vd_reducer_relate(c, pv, (uint32_t)tg->svalue, tg_lo(tg), tg_hi(tg), rec, d));
    }
  }
  return VD_OK;
}

vd_rc vd_stage_reduce(const vd_lin_table *lt, vd_stage *st, vd_diag *d) {
  vd_rc rc = VD_OK;
  vd_reducer *c = NULL;
  vd_red_value *rv = NULL;
  st->noreduce_node = -1;
  st->onehot_kept_node = -1;
  default_reduced_slices(lt, st);
  /* Unknown operators, and index values computed in the stage: no
   * reduction at all. */
  int32_t by = unreducible_node(st);
  if (by >= 0) {
    st->noreduce_node = by;
    leave_unreduced(lt, st);
    return VD_OK;
  }

  rv = vd_calloc((size_t)st->n_vals + 1, sizeof(*rv));
  if (!rv) return VD_OOM(d);
  for (uint32_t i = 0; i < st->n_vals; i++) rv[i] = (vd_red_value){st->vals[i].ndim, st->vals[i].shape};
  rc = vd_reducer_new(rv, st->n_vals, &c, d);
  vd_free(rv);
  if (rc != VD_OK) return rc;

  int32_t norule;
  if ((rc = operator_rules(c, lt, st, &norule, d)) != VD_OK) goto done;
  if (norule >= 0) {
    st->noreduce_node = norule;
    leave_unreduced(lt, st);
    goto done;
  }
  if ((rc = relate_lineage(c, lt, st, d)) != VD_OK) goto done;
  int32_t hot_at;
  int any_hot;
  if ((rc = onehot_nonaffine(c, lt, st, &hot_at, &any_hot, d)) != VD_OK) goto done;
  st->onehot_kept_node = hot_at;

  int reduced = 0;
  if ((rc = vd_reducer_solve(c, &reduced, d)) != VD_OK) goto done;
  if (!reduced) {
    leave_unreduced(lt, st);
    goto done;
  }
  rc = apply(c, lt, st, d);
  if (rc != VD_OK) goto done;
  st->reduced = 1;
done:
  vd_reducer_free(c);
  return rc;
}
