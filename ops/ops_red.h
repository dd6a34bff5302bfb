/*
 * ops/ops_red.h - the building blocks of the shape-reduction rules
 * (ops/ops_reduce.c and the MoE rules of ops/ops_moe.c): a reference to one
 * dimension of an operand, the operand's shape, and the constraints a rule
 * emits (two dimensions' sizes in a fixed ratio, a mark on one dimension).
 * Internal to ops/ (file-local: each rule file gets its own copy).
 */
#ifndef VD_OPS_RED_H
#define VD_OPS_RED_H

#include "ops.h"

/* Dimension d of output (out 1) or input (out 0) t. */
static inline vd_op_dimref dr(int out, uint32_t t, int32_t d) {
  vd_op_dimref r = {(uint8_t)out, (uint8_t)d, (uint16_t)t};
  return r;
}

static inline const vd_op_shape *shp(const vd_op_reduce_call *c, vd_op_dimref r) {
  return r.out ? &c->out_shape[r.t] : &c->in_shape[r.t];
}

/* size(a) * den == size(b) * num; num == 0: same ratio, no fixed factor. */
static inline vd_rc eqf(const vd_op_reduce_call *c, vd_op_dimref a, vd_op_dimref b, int64_t num, int64_t den) {
  vd_op_red r = {.kind = VD_RED_EQ, .a = a, .b = b, .num = num, .den = den};
  return c->emit(c->sink, &r);
}
static inline vd_rc eq(const vd_op_reduce_call *c, vd_op_dimref a, vd_op_dimref b) { return eqf(c, a, b, 1, 1); }

static inline vd_rc mark(const vd_op_reduce_call *c, vd_op_red_kind k, vd_op_dimref a) {
  vd_op_red r = {.kind = k, .a = a};
  return c->emit(c->sink, &r);
}

#endif
