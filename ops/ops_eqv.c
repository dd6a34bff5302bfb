/*
 * ops/ops_eqv.c - translation equivariance of every operator (the per-operator
 * property that stages/window.c relies on to restrict a stage's single-device
 * side to the rows its parallel side touches, docs/verifier.md section 5).
 *
 * An operator is row-local and translation-invariant along an operand
 * dimension when output index i along that dimension depends only on index i
 * of the linked input dimensions, by a function that does not depend on i.
 * Then the rows [lo, hi) of the output are the operator applied to rows
 * [lo, hi) of the inputs, wherever [lo, hi) lies.
 *
 * Which dimensions are linked is read from the operator's shape-reduction rule
 * (ops/ops_reduce.c): an EQ constraint with factor 1 between an input and an
 * output dimension links them.  This table says, per operator, whether such a
 * link is an equivariance:
 *   VD_EQV_NONE    never: positions, index structure (chunk, concat, gathers,
 *                  embedding rows), collectives, optimizer state, anything not
 *                  reviewed.  Every dimension of every operand is pinned.
 *   VD_EQV_RULE    every 1:1 input/output link of the rule is an equivariance,
 *                  except dimensions the rule also marks as contracted or reduced
 *                  over (MIN2), kept (KEEP), even (EVEN), positional (POS) or
 *                  merged/split (PROD), and dimensions not linked at all (an
 *                  index dimension such as pick's classes): those are pinned.
 *                  Elementwise ops (their uninterpreted kernels are functions of
 *                  the element's value only), matmul/linear (batch rows and
 *                  output features; the contracted dimension is MIN2),
 *                  reductions and normalizations (the reduced dimension is MIN2),
 *                  softmax (its dimension is MIN2), view/transpose (pure
 *                  relabelling; merges are PROD), embedding (token dimensions;
 *                  table rows are indexed, unlinked), top-k gating and the
 *                  grouped expert MLP (per token row; experts KEEP).
 *   VD_EQV_LEAD    like RULE, but only dimensions before the operator's position
 *                  dimension count: rotary embeddings and causal masks compute
 *                  from absolute positions along the sequence (and key) dimension,
 *                  so that dimension and everything after it is pinned even when
 *                  no position attribute is written (absent means offset 0,
 *                  which is still an absolute position).  lead_attr names the
 *                  attribute holding that dimension (NULL: lead_def counts from
 *                  the end when negative).
 *
 * bwd0_rows: linear and norm backward compute the input
 * gradient row by row but the weight gradients as sums over the rows, which
 * pins the rows of the whole node.  A stage that never uses the weight
 * gradients (dead outputs: no consumer, no target) may window the rows of
 * the input gradient; the weight gradients are then sums over the window,
 * which nothing in the stage reads (stages/window.c).
 *
 * sum_outs: those weight gradients (and bias gradients) are sums over the
 * rows of a term computed from row r of the bwd0_rows inputs and the
 * other inputs whole, the same function for every r; computed on a window
 * of rows they are the sum over that window.  stages/cut.c proves a sum of
 * per-replica, per-microbatch gradients part by part on that basis.
 *
 * bcast_out: sum_backward copies the output gradient to every position of
 * the summed dimensions, so its output is constant along them; windowing
 * them keeps the same value on fewer rows (the rule marks them MIN2 for
 * shape reduction, which is not a contraction here).
 *
 * SOUNDNESS: a wrong VD_EQV_RULE entry could merge stages whose proofs differ,
 * so the default is NONE and every other row is listed explicitly below; the
 * _Static_assert keeps the table complete when ops.def grows.
 */
#include "ops.h"

#include <assert.h>
#include <string.h>

#define R {VD_EQV_RULE, NULL, 0, 0, 0}
#define N {VD_EQV_NONE, NULL, 0, 0, 0}

/* An entry left out is VD_EQV__UNSET (0); tests/ops checks that none is. */

static const vd_op_eqv eqv_table[VD_OP__COUNT] = {
    [VD_OP_IDENTITY] = R, [VD_OP_CONTIGUOUS] = R, [VD_OP_CAST] = R,
    [VD_OP_VIEW] = R, [VD_OP_RESHAPE] = R, [VD_OP_TRANSPOSE] = R,
    [VD_OP_MULTIREF] = R, [VD_OP_MULTIREF_BACKWARD] = R,
    /* index structure: which shard goes where depends on absolute offsets */
    [VD_OP_CHUNK] = N, [VD_OP_CHUNK_BACKWARD] = N, [VD_OP_CONCAT] = N,
    [VD_OP_EXPAND] = R,
    [VD_OP_ADD] = R, [VD_OP_SUB] = R, [VD_OP_MUL] = R, [VD_OP_DIV] = R, [VD_OP_NEG] = R, [VD_OP_POW] = R,
    [VD_OP_SQRT] = R, [VD_OP_RSQRT] = R, [VD_OP_EXP] = R, [VD_OP_LOG] = R, [VD_OP_SIGMOID] = R,
    [VD_OP_TANH] = R, [VD_OP_SILU] = R, [VD_OP_GELU] = R,
    [VD_OP_SUM] = R, [VD_OP_MEAN] = R, [VD_OP_SUM_TO] = R, [VD_OP_ACCUMULATE] = R, [VD_OP_SCALE] = R,
    [VD_OP_ADD_BACKWARD] = R, [VD_OP_SUB_BACKWARD] = R, [VD_OP_MUL_BACKWARD] = R, [VD_OP_DIV_BACKWARD] = R,
    [VD_OP_NEG_BACKWARD] = R, [VD_OP_SCALE_BACKWARD] = R, [VD_OP_POW_BACKWARD] = R,
    [VD_OP_SQRT_BACKWARD] = R, [VD_OP_RSQRT_BACKWARD] = R, [VD_OP_EXP_BACKWARD] = R,
    [VD_OP_LOG_BACKWARD] = R, [VD_OP_SIGMOID_BACKWARD] = R, [VD_OP_TANH_BACKWARD] = R,
    [VD_OP_SILU_BACKWARD] = R, [VD_OP_GELU_BACKWARD] = R,
    /* the gradient of a sum is the output gradient copied to every summed
     * position: constant along those dimensions (not mean_backward, whose
     * value divides by the extent) */
    [VD_OP_SUM_BACKWARD] = {VD_EQV_RULE, NULL, 0, 0, 1},
    [VD_OP_MEAN_BACKWARD] = R,
    [VD_OP_MATMUL] = R, [VD_OP_LINEAR] = R, [VD_OP_EMBEDDING] = R,
    [VD_OP_RMS_NORM] = R, [VD_OP_LAYER_NORM] = R,
    [VD_OP_ROPE] = {VD_EQV_LEAD, "seq_dim", 1, 0, 0},
    [VD_OP_CAUSAL_MASK] = {VD_EQV_LEAD, NULL, -2, 0, 0},
    [VD_OP_SOFTMAX] = R,
    [VD_OP_PICK] = R,
    /* (x, w, g) -> gx, gw (, gb): gx = g w row by row; x stays row-aligned with g for gw */
    [VD_OP_LINEAR_BACKWARD] = {.kind = VD_EQV_RULE, .bwd0_rows = (1u << 0) | (1u << 2), .sum_outs = (1u << 1) | (1u << 2)},
    [VD_OP_MATMUL_BACKWARD] = R, [VD_OP_EMBEDDING_BACKWARD] = R,
    /* (x, w, g) -> gx, gw (, gb): gx normalizes over the last dimension, row by row in x and g */
    [VD_OP_RMS_NORM_BACKWARD] = {.kind = VD_EQV_RULE, .bwd0_rows = (1u << 0) | (1u << 2), .sum_outs = 1u << 1},
    [VD_OP_LAYER_NORM_BACKWARD] = {.kind = VD_EQV_RULE, .bwd0_rows = (1u << 0) | (1u << 2), .sum_outs = (1u << 1) | (1u << 2)},
    [VD_OP_ROPE_BACKWARD] = {VD_EQV_LEAD, "seq_dim", 1, 0, 0},
    [VD_OP_CAUSAL_MASK_BACKWARD] = {VD_EQV_LEAD, NULL, -2, 0, 0},
    [VD_OP_SOFTMAX_BACKWARD] = R, [VD_OP_PICK_BACKWARD] = R,
    /* nnScaler's mask and rotary kernels: built from absolute positions */
    [VD_OP_CREATE_MASK] = N, [VD_OP_APPLY_MASK] = R,
    [VD_OP_APPLY_ROTARY_EMB] = {VD_EQV_LEAD, NULL, 1, 0, 0}, [VD_OP_APPLY_MASK_BACKWARD] = R,
    [VD_OP_APPLY_ROTARY_EMB_BACKWARD] = {VD_EQV_LEAD, NULL, 1, 0, 0},
    [VD_OP_DROPOUT] = R, [VD_OP_DROPOUT_BACKWARD] = R,
    [VD_OP_TOPK_GATE] = R, [VD_OP_GROUPED_MLP] = R, [VD_OP_TOPK_GATE_BACKWARD] = R,
    /* (x, gates, w1, w3, w2, gy) -> gx, ggates, gw1, gw3, gw2 (solver/smt_encode.c):
     * gx[t] and ggates[t] are computed from x[t], gates[t], gy[t] and the
     * expert weights whole, the same function for every t (output 1 is a row
     * output); gw1, gw3, gw2 are sums over t of a term of row t, so the rule's
     * MIN2 on t pinned the token rows of every stage through the EP dispatch
     * backward (each replica's and microbatch's its own class) and kept
     * expert weight gradients from being proven by part. */
    [VD_OP_GROUPED_MLP_BACKWARD] = {.kind = VD_EQV_RULE,
                                    .bwd0_rows = (1u << 0) | (1u << 1) | (1u << 5),
                                    .row_outs = 1u << 1,
                                    .sum_outs = (1u << 2) | (1u << 3) | (1u << 4)},
    /* nnScaler's fused gate and expert kernels (ops/ops_moe.c, encoders in
     * solver/smt_moe.c), reviewed along the token rows T:
     * gate_fw: row t of both outputs is the routing symbols applied to the
     *   logits row x[t] w^T (+ bias): the same function of x[t] for every t;
     *   the rule links only T (H is MIN2, E and the slots are KEEP).
     * nnscaler_moe_gmm: y[t] = sum_j sum_e [idx[t,j] == e] weight[t,j]
     *   expert_e(x[t]): row t of y from rows t of x, idx, weight; the expert
     *   dims are POS and H, F are MIN2, so only T is linked.
     * gate_fw_backward (x, w, [bias,] weight, idx, gy) -> gx, gw [, gbias]:
     *   gx[t] = sum_e w[e] rs sum_j J_ej(logits row t) gy[t,j], row by row in
     *   x and gy (weight and idx are not read); gw sums over t, so only the
     *   bwd0 form applies: bits 0, 2-5 (bias, 1-D, never matches gx's rank).
     * nnscaler_moe_gmm_backward (x, idx, weight, w1, w3, w2, y, gy) -> gx,
     *   gweight, gw1, gw3, gw2: gx[t] and gweight[t] (<gy[t], expert_e(x[t])>
     *   per routed slot) are row by row in x, idx, weight, gy (y is not read),
     *   so output 1 is a row output too; the expert weight gradients sum
     *   over t and must be dead. */
    [VD_OP_GATE_FW] = R, [VD_OP_NNSCALER_MOE_GMM] = R,
    [VD_OP_GATE_FW_BACKWARD] = {.kind = VD_EQV_RULE,
                                .bwd0_rows = (1u << 0) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5),
                                .sum_outs = (1u << 1) | (1u << 2)},
    [VD_OP_NNSCALER_MOE_GMM_BACKWARD] = {.kind = VD_EQV_RULE,
                                         .bwd0_rows = (1u << 0) | (1u << 1) | (1u << 2) | (1u << 6) | (1u << 7),
                                         .row_outs = 1u << 1,
                                         .sum_outs = (1u << 2) | (1u << 3) | (1u << 4)},
    [VD_OP_ALL_REDUCE] = N, [VD_OP_ALL_GATHER] = N, [VD_OP_REDUCE_SCATTER] = N, [VD_OP_ALL_TO_ALL] = N,
    [VD_OP_BROADCAST] = N, [VD_OP_SEND] = N, [VD_OP_RECV] = N,
    [VD_OP_SUMSQ] = N, [VD_OP_CLIP_COEF] = N, [VD_OP_SGD_STEP] = N, [VD_OP_ADAM_STEP] = N,
};
_Static_assert(sizeof(eqv_table) / sizeof(eqv_table[0]) == VD_OP__COUNT, "one equivariance entry per operator");

#undef R
#undef N

const vd_op_eqv *vd_op_eqv_of(vd_op_id op) {
  assert(op >= 0 && op < VD_OP__COUNT);
  return &eqv_table[op];
}

int32_t vd_op_eqv_lead(vd_op_id op, const vd_plan_t *plan, const vd_node_t *node, int32_t ndim) {
  const vd_op_eqv *e = vd_op_eqv_of(op);
  if (e->kind != VD_EQV_LEAD) return ndim;
  int64_t v = e->lead_def;
  if (e->lead_attr && plan && node) v = vd_node_attr_int(plan, node, e->lead_attr, e->lead_def);
  if (v < 0) v += ndim;
  if (v < 0) v = 0;
  if (v > ndim) v = ndim;
  return (int32_t)v;
}
