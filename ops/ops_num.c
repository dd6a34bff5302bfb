/*
 * ops/ops_num.c - the helpers of ops/ops_num.h that other files call by
 * address or from ops_moe.c: the one error line of a numeric operator, and
 * silu with its derivative.
 */
#include "ops_num.h"

vd_rc vd_op_i_bad(const vd_op_call *c, const char *field, const char *fmt, ...) {
  char buf[VD_DIAG_TEXT - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return vd_diag_set(c->diag, VD_EINPUT, __FILE__, __LINE__, NULL, rec(c), field, "%s: %s",
                     opname(c), buf);
}

double vd_op_i_silu(double x) { return x * sigm(x); }
double vd_op_i_silu_grad(double x) {
  double s = sigm(x);
  return s * (1.0 + x * (1.0 - s));
}
