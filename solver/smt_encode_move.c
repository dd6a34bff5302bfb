/*
 * solver/smt_encode_move.c - the symbolic encoders of the operators that
 * move elements without computing (identity .. sum_to of ops/ops.def's
 * data movement) and of the collectives on a merged instance (all
 * participants, group order).  Shared helpers and ENC are in
 * smt_encode_int.h; the representation choices in smt_encode.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smt_encode_int.h"

/* ---- data movement ------------------------------------------------------- */

ENC(identity) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(contiguous) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(cast) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(view) { (void)s; return copy_into(IN(0), OUT(0)); }
ENC(reshape) { (void)s; return copy_into(IN(0), OUT(0)); }

ENC(transpose) {
  (void)s;
  int32_t nd = IN(0)->shape.ndim;
  int32_t d0 = adim(c, "dim0", 0, nd), d1 = adim(c, "dim1", 1, nd);
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < IN(0)->numel; f++) {
    vd_op_shape_unravel(&IN(0)->shape, f, idx);
    int64_t t = idx[d0];
    idx[d0] = idx[d1];
    idx[d1] = t;
    OUT(0)->t[vd_op_shape_ravel(&OUT(0)->shape, idx)] = IN(0)->t[f];
  }
  return VD_OK;
}

ENC(multiref) {
  (void)s;
  for (uint32_t i = 0; i < c->n_out; i++) copy_into(IN(0), OUT(i));
  return VD_OK;
}

ENC(multiref_backward) {
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t f = 0; f < OUT(0)->numel; f++) {
    for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[f];
    OUT(0)->t[f] = vd_smt_sum(s, c->n_in, buf);
  }
  vd_free(buf);
  return VD_OK;
}

/* Element f of `part` sits at index idx (+off along dim) of `full`. */
static int64_t slice_pos(const vd_op_shape *full, const vd_op_shape *part, int32_t dim, int64_t off, int64_t f) {
  int64_t idx[VD_MAX_DIMS];
  vd_op_shape_unravel(part, f, idx);
  idx[dim] += off;
  return vd_op_shape_ravel(full, idx);
}

ENC(chunk) {
  (void)s;
  const vd_op_shape *x = &IN(0)->shape, *y = &OUT(0)->shape;
  int32_t dim = adim(c, "dim", 0, x->ndim);
  int64_t off = aint(c, "index", 0) * y->d[dim];
  for (int64_t f = 0; f < OUT(0)->numel; f++) OUT(0)->t[f] = IN(0)->t[slice_pos(x, y, dim, off, f)];
  return VD_OK;
}

ENC(chunk_backward) {
  const vd_op_shape *gx = &OUT(0)->shape, *g = &IN(0)->shape;
  int32_t dim = adim(c, "dim", 0, gx->ndim);
  int64_t off = aint(c, "index", 0) * g->d[dim];
  vd_term zero = I(s, 0);
  for (int64_t f = 0; f < OUT(0)->numel; f++) OUT(0)->t[f] = zero;
  for (int64_t f = 0; f < IN(0)->numel; f++) OUT(0)->t[slice_pos(gx, g, dim, off, f)] = IN(0)->t[f];
  return VD_OK;
}

static void concat_into(vd_smt_tensor *out, const vd_smt_tensor *const *in, uint32_t n, int32_t dim) {
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    for (int64_t f = 0; f < in[i]->numel; f++) out->t[slice_pos(&out->shape, &in[i]->shape, dim, off, f)] = in[i]->t[f];
    off += in[i]->shape.d[dim];
  }
}

ENC(concat) {
  (void)s;
  concat_into(OUT(0), c->in, c->n_in, adim(c, "dim", 0, OUT(0)->shape.ndim));
  return VD_OK;
}

ENC(expand) {
  (void)s;
  int64_t idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < OUT(0)->numel; f++) {
    vd_op_shape_unravel(&OUT(0)->shape, f, idx);
    OUT(0)->t[f] = IN(0)->t[vd_op_bcast_src(&OUT(0)->shape, &IN(0)->shape, idx)];
  }
  return VD_OK;
}

ENC(sum_to) { return sum_to(s, c, 0, NULL); }

/* ---- collectives (merged instance: all participants, group order) -------- */

static uint32_t parts(call_t *c) { return c->n_part ? c->n_part : c->n_in; }

ENC(all_reduce) {
  int mx = strcmp(astr(c, "reduce", "sum"), "max") == 0;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  for (int64_t e = 0; e < IN(0)->numel; e++) {
    vd_term r;
    if (mx) {
      r = IN(0)->t[e];
      for (uint32_t i = 1; i < c->n_in; i++) r = vd_smt_max(s, r, IN(i)->t[e]);
    } else {
      for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[e];
      r = vd_smt_sum(s, c->n_in, buf);
    }
    for (uint32_t i = 0; i < c->n_out; i++) OUT(i)->t[e] = r;
  }
  vd_free(buf);
  return VD_OK;
}

ENC(all_gather) {
  (void)s;
  int32_t dim = adim(c, "dim", 0, IN(0)->shape.ndim);
  for (uint32_t i = 0; i < c->n_out; i++) concat_into(OUT(i), c->in, c->n_in, dim);
  return VD_OK;
}

ENC(reduce_scatter) {
  int32_t dim = adim(c, "dim", 0, IN(0)->shape.ndim);
  const vd_op_shape *os = &OUT(0)->shape;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (c->n_in + 1));
  if (!buf) return VD_OOM(c->diag);
  int64_t idx[VD_MAX_DIMS];
  for (uint32_t p = 0; p < c->n_out; p++)
    for (int64_t f = 0; f < OUT(p)->numel; f++) {
      vd_op_shape_unravel(os, f, idx);
      idx[dim] += (int64_t)p * os->d[dim];
      int64_t src = vd_op_shape_ravel(&IN(0)->shape, idx);
      for (uint32_t i = 0; i < c->n_in; i++) buf[i] = IN(i)->t[src];
      OUT(p)->t[f] = vd_smt_sum(s, c->n_in, buf);
    }
  vd_free(buf);
  return VD_OK;
}

ENC(all_to_all) {
  (void)s;
  int32_t nd = IN(0)->shape.ndim;
  int32_t sd = adim(c, "split_dim", 0, nd), cd = adim(c, "concat_dim", 0, nd);
  uint32_t P = parts(c);
  const vd_op_shape *xs = &IN(0)->shape, *ys = &OUT(0)->shape;
  int64_t cs_sd = xs->d[sd] / P, cs_cd = sd == cd ? cs_sd : xs->d[cd];
  int64_t idx[VD_MAX_DIMS];
  for (uint32_t i = 0; i < c->n_out; i++)
    for (int64_t f = 0; f < OUT(i)->numel; f++) {
      vd_op_shape_unravel(ys, f, idx);
      int64_t j = idx[cd] / cs_cd;
      idx[cd] -= j * cs_cd;
      idx[sd] += (int64_t)i * cs_sd;
      OUT(i)->t[f] = IN(j)->t[vd_op_shape_ravel(xs, idx)];
    }
  return VD_OK;
}

ENC(broadcast) {
  (void)s;
  for (uint32_t i = 0; i < c->n_out; i++) copy_into(IN(0), OUT(i));
  return VD_OK;
}

static vd_rc move(call_t *c) {
  if (c->n_in == 1 && c->n_out == 1) copy_into(IN(0), OUT(0));
  return VD_OK;
}
ENC(send) { (void)s; return move(c); }
ENC(recv) { (void)s; return move(c); }
