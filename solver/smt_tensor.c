/*
 * solver/smt_tensor.c - tensors of terms: constructors (fresh symbols,
 * exact constants), slicing, concatenation, and the partial-sum parts that
 * eliminate a parallel plan's inputs by construction.
 *
 * A vd_smt_tensor owns its array of term pointers; the terms belong to the
 * context's arena, so slices and copies share terms freely.  Not here: any
 * operator semantics (smt_encode.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "smt.h"

vd_rc vd_smt_tensor_init(vd_smt_tensor *t, const vd_op_shape *shape) {
  memset(t, 0, sizeof(*t));
  if (shape->ndim < 0 || shape->ndim > VD_MAX_DIMS) return VD_EINPUT;
  int64_t n = 1;
  for (int32_t i = 0; i < shape->ndim; i++) {
    if (shape->d[i] < 0 || (shape->d[i] > 0 && n > INT64_MAX / 16 / shape->d[i])) return VD_EINPUT;
    n *= shape->d[i];
  }
  t->shape = *shape;
  t->numel = n;
  t->t = vd_calloc(n ? (size_t)n : 1, sizeof(vd_term));
  return t->t ? VD_OK : VD_ENOMEM;
}

void vd_smt_tensor_free(vd_smt_tensor *t) {
  if (!t) return;
  vd_free(t->t);
  t->t = NULL;
  t->numel = 0;
}

static vd_rc init_or_fail(vd_smt_tensor *t, const vd_op_shape *shape, vd_diag *d, const char *what) {
  vd_rc rc = vd_smt_tensor_init(t, shape);
  if (rc == VD_ENOMEM) return VD_OOM(d);
  if (rc != VD_OK) VD_FAIL(d, rc, NULL, what, "shape", "expected 0..%d non-negative dimensions", VD_MAX_DIMS);
  return VD_OK;
}

/* The context's status after building t's terms (what names the tensor in
 * the message); t is freed when it failed. */
static vd_rc built_or_free(vd_smt *s, vd_smt_tensor *t, vd_diag *d, const char *what) {
  vd_rc rc = vd_smt_status(s, d, what);
  if (rc != VD_OK) vd_smt_tensor_free(t);
  return rc;
}

/* "prefix[i,j,..]" for flat element f of shape. */
static void elem_name(char *buf, size_t size, const char *prefix, const vd_op_shape *shape, int64_t f) {
  int64_t idx[VD_MAX_DIMS];
  for (int32_t i = shape->ndim - 1; i >= 0; i--) {
    int64_t e = shape->d[i] ? shape->d[i] : 1;
    idx[i] = f % e;
    f /= e;
  }
  size_t at = (size_t)snprintf(buf, size, "%s[", prefix);
  for (int32_t i = 0; i < shape->ndim && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, i ? ",%lld" : "%lld", (long long)idx[i]);
  if (at < size) snprintf(buf + at, size - at, "]");
}

static vd_rc vars(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const char *prefix, vd_diag *d,
                  int is_int) {
  VD_CHECK(init_or_fail(t, shape, d, prefix));
  char name[512];
  for (int64_t f = 0; f < t->numel; f++) {
    elem_name(name, sizeof(name), prefix, shape, f);
    t->t[f] = is_int ? vd_smt_int_var(s, name) : vd_smt_var(s, name);
  }
  return built_or_free(s, t, d, prefix);
}

vd_rc vd_smt_tensor_vars(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const char *prefix,
                         vd_diag *d) {
  return vars(s, t, shape, prefix, d, 0);
}

vd_rc vd_smt_tensor_int_vars(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const char *prefix,
                             vd_diag *d) {
  return vars(s, t, shape, prefix, d, 1);
}

static vd_rc consts(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const double *vals, vd_diag *d,
                    int is_int) {
  VD_CHECK(init_or_fail(t, shape, d, "constant"));
  for (int64_t f = 0; f < t->numel; f++) {
    if (is_int) {
      double v = vals[f];
      if (!(v > -9e15 && v < 9e15)) {
        vd_smt_tensor_free(t);
        VD_FAIL(d, VD_EINPUT, NULL, "constant", "value", "expected an integer, got %g at element %lld", v,
                (long long)f);
      }
      t->t[f] = vd_smt_int_num(s, (int64_t)llround(v));
    } else {
      t->t[f] = vd_smt_num_double(s, vals[f]);
    }
  }
  return built_or_free(s, t, d, "constant");
}

vd_rc vd_smt_tensor_consts(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const double *vals,
                           vd_diag *d) {
  return consts(s, t, shape, vals, d, 0);
}

vd_rc vd_smt_tensor_int_consts(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *shape, const double *vals,
                               vd_diag *d) {
  return consts(s, t, shape, vals, d, 1);
}

vd_rc vd_smt_tensor_slice(const vd_smt_tensor *src, const int64_t *lo, const int64_t *hi, vd_smt_tensor *out,
                          vd_diag *d) {
  vd_op_shape sh = {.ndim = src->shape.ndim};
  for (int32_t i = 0; i < sh.ndim; i++) {
    if (lo[i] < 0 || hi[i] < lo[i] || hi[i] > src->shape.d[i])
      VD_FAIL(d, VD_EINPUT, NULL, "slice", "lo/hi", "expected 0 <= lo <= hi <= %lld in dimension %d, got [%lld, %lld)",
              (long long)src->shape.d[i], i, (long long)lo[i], (long long)hi[i]);
    sh.d[i] = hi[i] - lo[i];
  }
  VD_CHECK(init_or_fail(out, &sh, d, "slice"));
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < out->numel; f++) {
    int64_t r = f, g = 0;
    for (int32_t i = sh.ndim - 1; i >= 0; i--) {
      idx[i] = r % sh.d[i] + lo[i];
      r /= sh.d[i];
    }
    for (int32_t i = 0; i < sh.ndim; i++) g = g * src->shape.d[i] + idx[i];
    out->t[f] = src->t[g];
  }
  return VD_OK;
}

vd_rc vd_smt_tensor_copy(const vd_smt_tensor *src, vd_smt_tensor *out, vd_diag *d) {
  VD_CHECK(init_or_fail(out, &src->shape, d, "copy"));
  if (src->numel) memcpy(out->t, src->t, sizeof(vd_term) * (size_t)src->numel);
  return VD_OK;
}

void vd_smt_slice_key(char *buf, size_t size, const char *name, int32_t ndim, const int64_t *lo,
                      const int64_t *hi) {
  size_t at = (size_t)snprintf(buf, size, "%s[", name);
  for (int32_t i = 0; i < ndim && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, i ? ",%lld:%lld" : "%lld:%lld", (long long)lo[i], (long long)hi[i]);
  if (at < size) snprintf(buf + at, size - at, "]");
}

vd_rc vd_smt_partial_parts(vd_smt *s, const vd_smt_tensor *slice, const char *key, int64_t n, int64_t k,
                           vd_smt_tensor *out, vd_diag *d) {
  if (n < 1 || k < 0 || k >= n)
    VD_FAIL(d, VD_EINPUT, NULL, key, "part", "expected part k of n with 0 <= k < n, got %lld of %lld",
            (long long)k, (long long)n);
  if (n == 1) return vd_smt_tensor_copy(slice, out, d);
  VD_CHECK(init_or_fail(out, &slice->shape, d, key));
  char prefix[400], name[512];
  if (k < n - 1) {
    /* A free part: its own symbols, named from (key, n, k). */
    snprintf(prefix, sizeof(prefix), "%s%%%lld.%lld", key, (long long)n, (long long)k);
    for (int64_t f = 0; f < out->numel; f++) {
      elem_name(name, sizeof(name), prefix, &slice->shape, f);
      out->t[f] = vd_smt_var(s, name);
    }
  } else {
    /* SOUNDNESS: the remainder, so that the parts sum to the slice exactly. */
    vd_term *frees = vd_malloc(sizeof(vd_term) * (size_t)n);
    if (!frees) {
      vd_smt_tensor_free(out);
      return VD_OOM(d);
    }
    for (int64_t f = 0; f < out->numel; f++) {
      frees[0] = slice->t[f];
      for (int64_t j = 0; j < n - 1; j++) {
        snprintf(prefix, sizeof(prefix), "%s%%%lld.%lld", key, (long long)n, (long long)j);
        elem_name(name, sizeof(name), prefix, &slice->shape, f);
        frees[j + 1] = vd_smt_neg(s, vd_smt_var(s, name));
      }
      out->t[f] = vd_smt_sum(s, (size_t)n, frees);
    }
    vd_free(frees);
  }
  return built_or_free(s, out, d, key);
}
