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

struct vd_op_encode_call;

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
