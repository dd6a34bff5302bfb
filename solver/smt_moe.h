/*
 * solver/smt_moe.h - the symbolic encoders of the nnScaler MoE operators
 * (gate_fw, nnscaler_moe_gmm and their backward operators), defined in
 * solver/smt_moe.c; their numeric side and reduction rules are ops/'s
 * (ops/ops_moe.h).
 *
 * smt_encode.c's table reaches them as every other ops.def row, through
 * the vd_smt_i_enc_<name> aliases below (smt_encode_int.h).
 */
#ifndef VD_SMT_MOE_H
#define VD_SMT_MOE_H

#include "../common/diag.h"
#include "smt.h"

struct vd_op_encode_call;

/* The hidden layer of SwiGLU expert e on token x [H] (w1, w3 [E, F, H]):
 * a_f = w1[e,f,:] . x, b_f = w3[e,f,:] . x (count scale kh over H), and
 * hd_f = silu(a_f) b_f.  tmp holds H terms.  Shared by nnscaler_moe_gmm
 * (smt_moe.c) and grouped_mlp (smt_encode_experts.c). */
void vd_moe_i_swiglu_hidden(vd_smt *s, vd_term kh, const vd_term *x, const vd_term *w1, const vd_term *w3,
                            int64_t e, int64_t F, int64_t H, vd_term *a, vd_term *b, vd_term *hd, vd_term *tmp);

/* Contract of struct vd_op_encode_call in smt.h. */
vd_rc vd_moe_enc_gate_fw(const struct vd_op_encode_call *c);
vd_rc vd_moe_enc_gate_fw_backward(const struct vd_op_encode_call *c);
vd_rc vd_moe_enc_nnscaler_moe_gmm(const struct vd_op_encode_call *c);
vd_rc vd_moe_enc_nnscaler_moe_gmm_backward(const struct vd_op_encode_call *c);

#define vd_smt_i_enc_gate_fw vd_moe_enc_gate_fw
#define vd_smt_i_enc_gate_fw_backward vd_moe_enc_gate_fw_backward
#define vd_smt_i_enc_nnscaler_moe_gmm vd_moe_enc_nnscaler_moe_gmm
#define vd_smt_i_enc_nnscaler_moe_gmm_backward vd_moe_enc_nnscaler_moe_gmm_backward

#endif
