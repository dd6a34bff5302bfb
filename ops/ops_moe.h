/*
 * ops/ops_moe.h - the mixture-of-experts operators of the nnScaler
 * DeepSeek-style MoE models (gate_fw, nnscaler_moe_gmm and their backward
 * operators): numeric side and reduction rules in ops/ops_moe.c.  The
 * symbolic encoders are solver/'s (solver/smt_moe.h): ops/ declares
 * nothing that a module above it defines.
 *
 * The registry's X-macro tables reach them as every other row: the
 * numeric evaluators and shape checks by their vd_op_i_* names (declared by
 * the expansion in ops.c as well), the reduction rules through the
 * red_<name> aliases below, which ops_reduce.c picks up by including this
 * header.
 */
#ifndef VD_OPS_MOE_H
#define VD_OPS_MOE_H

#include <stddef.h>

#include "ops.h"

/* Largest expert count a routing symbol's numeric meaning handles (args are
 * the logits, plus the bias row). */
#define MOE_MAX_E 1024

/* gate_fw's configuration: sizes from the operand shapes, the rest from
 * the node's attributes. */
typedef struct {
  int softmax, bias;  /* score_func "softmax"; a bias input */
  int64_t T, H, E, ng, tg, k;
  double rs;          /* route_scale */
} vd_moe_gate_cfg;

/* nnscaler_moe_gmm's configuration (sizes from the operand shapes). */
typedef struct {
  int64_t T, H, K, El, F, start, end, nr;
} vd_moe_gmm_cfg;

/* Reads gate_fw's attributes into g (g->E set by the caller); NULL when they
 * are valid, else the offending field with a message in msg.  plan/node may
 * be NULL (defaults). */
const char *vd_moe_gate_attrs(const vd_plan_t *p, const vd_node_t *n, vd_moe_gate_cfg *g, char *msg, size_t m);
/* Reads nnscaler_moe_gmm's sizes from in[0..6) and its expert range. */
void vd_moe_gmm_read(const vd_plan_t *p, const vd_node_t *n, const vd_op_shape *in, vd_moe_gmm_cfg *g);
/* The routing symbol's name: "gate_fw.<score>.g<n>.tg<n>.k<n>.b<bias>." + what
 * (+ ".e<e>" when e >= 0) + ".j<j>". */
void vd_moe_gate_sym(char *buf, size_t n, const vd_moe_gate_cfg *g, const char *what, int64_t e, int64_t j);

/* Helpers of the numeric evaluators (ops/ops_num.c) that ops_moe.c shares: the one error line of a
 * numeric operator ("<op>: <text>" on record and field), silu and its
 * derivative. */
vd_rc vd_op_i_bad(const vd_op_call *c, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double vd_op_i_silu(double x);
double vd_op_i_silu_grad(double x);

/* One SwiGLU expert, shared by nnscaler_moe_gmm (here) and grouped_mlp
 * (ops/ops_num_moe.c): on token x [h], expert e of w1, w3 [E, f, h] and
 * w2 [E, h, f], a = x w1[e]^T, b = x w3[e]^T, hd = silu(a) * b,
 * o = hd w2[e]^T.  The scratch vectors (a, b, hd, ga, gb: f each; o, go: h
 * each) belong to the caller. */
typedef struct {
  int64_t h, f;
  const double *w1, *w3, *w2;
  double *a, *b, *hd, *o, *ga, *gb, *go;
} vd_moe_expert;

/* Fills a, b, hd and o for token x and expert e. */
void vd_moe_expert_fwd(const vd_moe_expert *x, int64_t e, const double *tok);

/* Backward of y += gate * o (after vd_moe_expert_fwd on the same token and
 * expert): adds to gx [h] and to expert e's rows of gw1, gw3, gw2, and
 * returns the gradient of the gate, gy . o. */
double vd_moe_expert_bwd(const vd_moe_expert *x, int64_t e, const double *tok, const double *gy, double gate,
                         double *gx, double *gw1, double *gw3, double *gw2);

/* Numeric evaluators and shape checks (the ops.def contract). */
vd_rc vd_op_i_eval_gate_fw(const vd_op_call *c);
vd_rc vd_op_i_shape_gate_fw(const vd_op_call *c);
vd_rc vd_op_i_eval_gate_fw_backward(const vd_op_call *c);
vd_rc vd_op_i_shape_gate_fw_backward(const vd_op_call *c);
vd_rc vd_op_i_eval_nnscaler_moe_gmm(const vd_op_call *c);
vd_rc vd_op_i_shape_nnscaler_moe_gmm(const vd_op_call *c);
vd_rc vd_op_i_eval_nnscaler_moe_gmm_backward(const vd_op_call *c);
vd_rc vd_op_i_shape_nnscaler_moe_gmm_backward(const vd_op_call *c);

/* Shape reduction rules (contract of vd_op_reduce_fn in ops.h). */
vd_rc vd_moe_red_gate_fw(const vd_op_reduce_call *c, int *norule);
vd_rc vd_moe_red_gate_fw_backward(const vd_op_reduce_call *c, int *norule);
vd_rc vd_moe_red_nnscaler_moe_gmm(const vd_op_reduce_call *c, int *norule);
vd_rc vd_moe_red_nnscaler_moe_gmm_backward(const vd_op_reduce_call *c, int *norule);

/* Numeric meaning of the routing symbols gate_fw.* (see vd_smt_uf_value):
 * 1 and *out for one of ours, 0 otherwise. */
int vd_moe_uf_value(const char *name, size_t n, const double *args, double *out);

#define red_gate_fw vd_moe_red_gate_fw
#define red_gate_fw_backward vd_moe_red_gate_fw_backward
#define red_nnscaler_moe_gmm vd_moe_red_nnscaler_moe_gmm
#define red_nnscaler_moe_gmm_backward vd_moe_red_nnscaler_moe_gmm_backward

#endif
