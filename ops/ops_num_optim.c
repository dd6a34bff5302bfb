/*
 * ops/ops_num_optim.c - evaluators and shape checks of the optimizer steps
 * (sgd_step, adam_step), the squared norm and the clipping coefficient.
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- optimizer and clipping ---------------------------------------------- */

vd_rc vd_op_i_shape_sumsq(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  if (vd_op_shape_numel(&c->out_shape[0]) != 1) return bad(c, "outputs[0]", "expected a scalar");
  return VD_OK;
}
vd_rc vd_op_i_eval_sumsq(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += c->in[0][i] * c->in[0][i];
  c->out[0][0] = s;
  return VD_OK;
}
vd_rc vd_op_i_shape_clip_coef(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  if (vd_op_shape_numel(&c->in_shape[0]) != 1) return bad(c, "inputs[0]", "expected a scalar");
  if (vd_op_shape_numel(&c->out_shape[0]) != 1) return bad(c, "outputs[0]", "expected a scalar");
  return VD_OK;
}
vd_rc vd_op_i_eval_clip_coef(const vd_op_call *c) {
  c->out[0][0] = clip_coef_f(c->in[0][0], aflt(c, "max_norm", 1.0));
  return VD_OK;
}
vd_rc vd_op_i_shape_sgd_step(const vd_op_call *c) {
  VD_CHECK(want_count(c, 2, 1));
  VD_CHECK(want_shape(c, 0, 1, &c->in_shape[0]));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_eval_sgd_step(const vd_op_call *c) {
  double lr = aflt(c, "lr", 1e-3), wd = aflt(c, "weight_decay", 0.0);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t i = 0; i < n; i++) {
    double w = c->in[0][i];
    c->out[0][i] = w - lr * (c->in[1][i] + wd * w);
  }
  return VD_OK;
}
vd_rc vd_op_i_shape_adam_step(const vd_op_call *c) {
  VD_CHECK(want_count(c, 4, 3));
  for (uint32_t i = 1; i < 4; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  for (uint32_t i = 0; i < 3; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  if (aint(c, "step", 1) < 1) return bad(c, "attrs.step", "expected >= 1, got %lld", (long long)aint(c, "step", 1));
  return VD_OK;
}
vd_rc vd_op_i_eval_adam_step(const vd_op_call *c) {
  double lr = aflt(c, "lr", 1e-3), b1 = aflt(c, "beta1", 0.9), b2 = aflt(c, "beta2", 0.999);
  double eps = aflt(c, "eps", 1e-8), wd = aflt(c, "weight_decay", 0.0);
  double step = (double)aint(c, "step", 1);
  double c1 = 1.0 - pow(b1, step), c2 = 1.0 - pow(b2, step);
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t i = 0; i < n; i++) {
    double w = c->in[0][i], g = c->in[1][i];
    double m = b1 * c->in[2][i] + (1.0 - b1) * g;
    double v = b2 * c->in[3][i] + (1.0 - b2) * g * g;
    c->out[0][i] = w - lr * (m / c1) / (sqrt(v / c2) + eps) - lr * wd * w;
    c->out[1][i] = m;
    c->out[2][i] = v;
  }
  return VD_OK;
}
