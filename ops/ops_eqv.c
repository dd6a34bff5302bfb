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
 * every row of ops.def states its eqv column explicitly (a row without one
 * does not compile), and the reasons for the non-trivial ones are comments
 * next to those rows.
 */
#include "ops.h"

#include <assert.h>
#include <string.h>

/* The eqv column of ops.def (the per-row reasons are comments there). */
#define EQ_RULE {VD_EQV_RULE, NULL, 0, 0, 0, 0, 0}
#define EQ_NONE {VD_EQV_NONE, NULL, 0, 0, 0, 0, 0}
#define EQ_LEAD(attr, def) {VD_EQV_LEAD, attr, def, 0, 0, 0, 0}
#define EQ_BCAST_OUT {VD_EQV_RULE, NULL, 0, 0, 1, 0, 0}
#define EQ_ROWS(bwd0_rows, row_outs, sum_outs) {VD_EQV_RULE, NULL, 0, bwd0_rows, 0, row_outs, sum_outs}
/* B(i, j, ...): the bit set {i, j, ...} of operand indices (at most 8;
 * the -1 padding adds no bit). */
#define B_BIT(i) ((1u << ((i) & 7)) * ((i) >= 0))
#define B_(a, b, c, d, e, f, g, h, ...) \
  (B_BIT(a) | B_BIT(b) | B_BIT(c) | B_BIT(d) | B_BIT(e) | B_BIT(f) | B_BIT(g) | B_BIT(h))
#define B(...) B_(__VA_ARGS__, -1, -1, -1, -1, -1, -1, -1, -1)

static const vd_op_eqv eqv_table[VD_OP__COUNT] = {
#define VD_OP(ID, name, min_in, max_in, min_out, max_out, flags, bwd, attrs, eqv, ...) [VD_OP_##ID] = eqv,
#include "ops.def"
#undef VD_OP
};

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
