/*
 * solver/smt_encode.c - the symbolic encoders of every operator of
 * docs/operators.md, keyed by vd_op_id (ops/ops.h), forward and
 * backward, plus the collectives applied to a merged instance.
 *
 * Each encoder computes, over tensors of terms, exactly what the numeric
 * evaluator of ops/ops_num_*.c computes over doubles (the test
 * tests/solver/test_smt_encode.c checks that on random inputs), with these
 * representation choices:
 *  - linear and polynomial operators are interpreted (add .. matmul, sums,
 *    integer powers, real division);
 *  - transcendental kernels are uninterpreted function symbols (the names
 *    are listed with vd_smt_uf_value in smt.h), shared by both graphs of a
 *    context.  Composite kernels are written out over them: silu =
 *    x * sigmoid(x), softmax = exp(x) / sum(exp(x)) (the numeric max-shift
 *    cancels on reals), norms over rsqrt, Adam over sqrt;
 *  - a routing decision (topk_gate) is one function symbol per output
 *    element of a row, taking the whole row: the routing may depend on every
 *    logit, and nothing else is assumed;
 *  - index inputs (embedding ids, pick labels) are Int terms or numerals;
 *    a lookup is an ite chain over the rows this tensor holds (start ..
 *    start+rows-1), 0 outside, so vocab-parallel shards need no special
 *    case;
 *  - attribute constants become exact rationals of their doubles; constants
 *    that the numeric side computes in double from attributes (Adam's bias
 *    corrections) are computed the same way and then converted exactly.
 * Any change here that can change a verdict bumps VD_ENCODER_VERSION
 * (stage_solve.h): the proof cache keys its entries by it.
 * SOUNDNESS: an encoder must never be more precise than "for all real
 * inputs and all interpretations of the function symbols": no encoder
 * evaluates an uninterpreted kernel or assumes a property of one.
 *
 * Every encoder first runs the registry's arity and shape check
 * (vd_op_check with NULL data), so bodies may assume their shapes.
 *
 * This file holds the prologue/epilogue every encoder runs, the table and
 * the numeric meaning of the symbols.  The encoders themselves are in one
 * file per family of ops/ops.def (ENC(name), smt_encode_int.h):
 * smt_encode_move.c (data movement, collectives), smt_encode_arith.c
 * (arithmetic, linear algebra, lookups, optimizer), smt_encode_layer.c
 * (normalization, rotary embedding, masks, softmax) and
 * smt_encode_experts.c (topk_gate, grouped_mlp; the nnScaler MoE rows are
 * smt_moe.c's).
 */
#include <stdio.h>

#include "smt_encode_int.h"
#include "../ops/ops_moe.h" /* vd_moe_uf_value */

/* A contraction whose reduced instance adds `red` terms per output element
 * where the full-size one adds `full` is multiplied by full/red: a sum of
 * n copies of one term is then N times it on both scales, and a plan
 * literal cannot equal a reduced count by accident (smt.h). */
vd_term vd_smt_count_scale(vd_smt *s, int64_t full, int64_t red) {
  if (full == red || full <= 0 || red <= 0) return NULL;
  char pq[48];
  snprintf(pq, sizeof(pq), "%lld/%lld", (long long)full, (long long)red);
  return vd_smt_num_rat(s, pq);
}

vd_term vd_smt_csum(vd_smt *s, vd_term k, size_t n, const vd_term *t) {
  vd_term r = vd_smt_sum(s, n, t);
  return k ? vd_smt_mul(s, k, r) : r;
}

/* ---- the prologue/epilogue every encoder runs ------------------------------ */

vd_rc vd_smt_i_enc_run(call_t *c, body_fn body) {
  if (!c->smt) VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "smt", "no solver context");
  uint32_t n_in = c->n_in, n_out = c->n_out;
  vd_op_shape *sh = vd_malloc(sizeof(vd_op_shape) * ((size_t)n_in + n_out + 1));
  if (!sh) return VD_OOM(c->diag);
  for (uint32_t i = 0; i < n_in; i++) sh[i] = c->in[i]->shape;
  for (uint32_t i = 0; i < n_out; i++) sh[n_in + i] = c->out[i]->shape;
  vd_op_call oc = {.op = c->op, .plan = c->plan, .node = c->node, .record = c->record,
                   .n_in = n_in, .n_out = n_out, .n_part = c->n_part,
                   .in = NULL, .in_shape = sh, .out = NULL, .out_shape = sh + n_in, .diag = c->diag};
  vd_rc rc = vd_op_check(&oc);
  vd_free(sh);
  VD_CHECK(rc);
  for (uint32_t i = 0; i < n_out; i++)
    if (!c->out[i]->t && c->out[i]->numel > 0)
      VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "outputs", "output %u has no term array (vd_smt_tensor_init)", i);
  VD_CHECK(body(c, c->smt));
  VD_CHECK(vd_smt_status(c->smt, c->diag, rec(c)));
  for (uint32_t i = 0; i < n_out; i++)
    for (int64_t f = 0; f < c->out[i]->numel; f++)
      if (VD_NEVER(!c->out[i]->t[f]))
        VD_FAIL(c->diag, VD_EINTERNAL, NULL, rec(c), "outputs", "%s: output %u element %lld not encoded",
                vd_op_name((vd_op_id)c->op), i, (long long)f);
  return VD_OK;
}
/* ---- the table ----------------------------------------------------------- */

/* One entry per row of ops/ops.def: a row without an encoder (enc_<name>)
 * does not compile. */
static const vd_op_encode_fn enc_table[VD_OP__COUNT] = {
#define VD_OP(ID, name, ...) [VD_OP_##ID] = vd_smt_i_enc_##name,
#include "../ops/ops.def"
#undef VD_OP
};

vd_op_encode_fn vd_smt_encoder(vd_op_id op) {
  if (op < 0 || op >= VD_OP__COUNT) return NULL;
  return enc_table[op];
}

vd_rc vd_smt_encode(const struct vd_op_encode_call *c) {
  vd_op_encode_fn f = vd_smt_encoder((vd_op_id)c->op);
  if (!f)
    VD_FAIL(c->diag, VD_EINPUT, NULL, rec(c), "op", "operator id %d has no symbolic encoder (unsupported)", c->op);
  return f(c);
}

/* ---- numeric meaning of the symbols -------------------------------------- */

int vd_smt_uf_value(const char *name, size_t n, const double *a, double *out) {
  /* One definition of each symbol: the registry's (ops/ops_num_arith.c), plus
   * the MoE routing symbols (ops_moe.c). */
  return vd_op_symbol_value(name, n, a, out) || vd_moe_uf_value(name, n, a, out);
}
