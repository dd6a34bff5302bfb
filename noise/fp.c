/*
 * noise/fp.c - the floating-point model: unit roundoff of each precision and
 * Higham's gamma_k.
 *
 * Round-to-nearest with p significand bits (the implicit bit included) has
 * unit roundoff u = 2^-p: fl(x op y) = (x op y)(1 + d), |d| <= u.  Subnormals,
 * overflow and underflow are outside the model (docs/noise.md, "Where the
 * bound is not sound").
 */
#include <math.h>
#include <string.h>

#include "noise.h"

int vd_noise_prec_parse(const char *s, vd_noise_prec *p) {
  static const struct {
    const char *name;
    vd_noise_prec p;
  } names[] = {{"bf16", VD_NOISE_BF16},   {"bfloat16", VD_NOISE_BF16}, {"fp16", VD_NOISE_FP16},
               {"float16", VD_NOISE_FP16}, {"fp32", VD_NOISE_FP32},    {"float32", VD_NOISE_FP32},
               {"fp64", VD_NOISE_FP64},    {"float64", VD_NOISE_FP64}, {"plan", VD_NOISE_PLAN}};
  if (!s) return 0;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strcmp(s, names[i].name) == 0) {
      *p = names[i].p;
      return 1;
    }
  return 0;
}

const char *vd_noise_prec_name(vd_noise_prec p) {
  switch (p) {
  case VD_NOISE_BF16: return "bf16";
  case VD_NOISE_FP16: return "fp16";
  case VD_NOISE_FP32: return "fp32";
  case VD_NOISE_FP64: return "fp64";
  default: return "plan";
  }
}

double vd_noise_unit(vd_noise_prec p) {
  switch (p) {
  case VD_NOISE_BF16: return ldexp(1.0, -8);
  case VD_NOISE_FP16: return ldexp(1.0, -11);
  case VD_NOISE_FP32: return ldexp(1.0, -24);
  case VD_NOISE_FP64: return ldexp(1.0, -53);
  default: return ldexp(1.0, -24);
  }
}

double vd_noise_unit_of_dtype(vd_dtype dt) {
  switch (dt) {
  case VD_DT_F32: return vd_noise_unit(VD_NOISE_FP32);
  case VD_DT_F16: return vd_noise_unit(VD_NOISE_FP16);
  case VD_DT_BF16: return vd_noise_unit(VD_NOISE_BF16);
  case VD_DT_F64: return vd_noise_unit(VD_NOISE_FP64);
  default: return 0.0; /* integers and booleans are exact */
  }
}

double vd_noise_gamma(double k, double u) {
  double ku = k * u;
  return ku >= 1.0 ? INFINITY : ku / (1.0 - ku);
}
