/*
 * ops/ops_num_move.c - evaluators and shape checks of the operators that
 * move data: views, transpose, multiref, chunk, concat, expand, and the
 * collectives and point-to-point moves (one call = every participant).
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- data movement ------------------------------------------------------- */

vd_rc vd_op_i_shape_identity(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_identity(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_contiguous(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_contiguous(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_cast(const vd_op_call *c) { return shape_same1(c); }
vd_rc vd_op_i_eval_cast(const vd_op_call *c) { copy0(c); return VD_OK; }

static vd_rc shape_view(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int64_t a = vd_op_shape_numel(&c->in_shape[0]), b = vd_op_shape_numel(&c->out_shape[0]);
  if (a != b)
    return bad(c, "outputs[0]", "expected %lld elements (as inputs[0]), got %lld", (long long)a, (long long)b);
  return VD_OK;
}
vd_rc vd_op_i_shape_view(const vd_op_call *c) { return shape_view(c); }
vd_rc vd_op_i_eval_view(const vd_op_call *c) { copy0(c); return VD_OK; }
vd_rc vd_op_i_shape_reshape(const vd_op_call *c) { return shape_view(c); }
vd_rc vd_op_i_eval_reshape(const vd_op_call *c) { copy0(c); return VD_OK; }

vd_rc vd_op_i_shape_transpose(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  int32_t d0, d1;
  VD_CHECK(get_dim(c, "dim0", 0, c->in_shape[0].ndim, &d0));
  VD_CHECK(get_dim(c, "dim1", 1, c->in_shape[0].ndim, &d1));
  vd_op_shape w = c->in_shape[0];
  w.d[d0] = c->in_shape[0].d[d1];
  w.d[d1] = c->in_shape[0].d[d0];
  return want_shape(c, 1, 0, &w);
}
vd_rc vd_op_i_eval_transpose(const vd_op_call *c) {
  int32_t d0, d1;
  VD_CHECK(get_dim(c, "dim0", 0, c->in_shape[0].ndim, &d0));
  VD_CHECK(get_dim(c, "dim1", 1, c->in_shape[0].ndim, &d1));
  int64_t n = vd_op_shape_numel(&c->in_shape[0]), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(&c->in_shape[0], f, idx);
    int64_t t = idx[d0];
    idx[d0] = idx[d1];
    idx[d1] = t;
    c->out[0][vd_op_shape_ravel(&c->out_shape[0], idx)] = c->in[0][f];
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_multiref(const vd_op_call *c) {
  if (c->n_in != 1) return bad(c, "inputs", "expected 1 input, got %u", c->n_in);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_multiref(const vd_op_call *c) {
  size_t n = (size_t)vd_op_shape_numel(&c->in_shape[0]);
  for (uint32_t i = 0; i < c->n_out; i++) memcpy(c->out[i], c->in[0], n * sizeof(double));
  return VD_OK;
}

vd_rc vd_op_i_shape_multiref_backward(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  for (uint32_t i = 0; i < c->n_in; i++) VD_CHECK(want_shape(c, 0, i, &c->out_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_multiref_backward(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]);
  for (int64_t e = 0; e < n; e++) {
    double s = 0;
    for (uint32_t i = 0; i < c->n_in; i++) s += c->in[i][e];
    c->out[0][e] = s;
  }
  return VD_OK;
}

/* chunk attributes against the FULL shape `full`. */
static vd_rc chunk_attrs(const vd_op_call *c, const vd_op_shape *full, int32_t *dim, int64_t *index,
                         int64_t *chunks) {
  VD_CHECK(get_dim(c, "dim", 0, full->ndim, dim));
  *chunks = aint(c, "chunks", 1);
  *index = aint(c, "index", 0);
  if (*chunks < 1) return bad(c, "attrs.chunks", "expected >= 1, got %lld", (long long)*chunks);
  if (*index < 0 || *index >= *chunks)
    return bad(c, "attrs.index", "expected in [0, %lld), got %lld", (long long)*chunks, (long long)*index);
  if (full->d[*dim] % *chunks != 0)
    return bad(c, "attrs.chunks", "dimension %d of extent %lld is not divisible by %lld chunks", *dim,
               (long long)full->d[*dim], (long long)*chunks);
  return VD_OK;
}

/* chunk (fw: the full tensor is the input, the part the output) and
 * chunk_backward (the other way round) share one shape rule and one copy. */
static vd_rc shape_chunk(const vd_op_call *c, int fw) {
  VD_CHECK(want_count(c, 1, 1));
  const vd_op_shape *full = fw ? &c->in_shape[0] : &c->out_shape[0];
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, full, &dim, &index, &chunks));
  vd_op_shape w = *full;
  w.d[dim] /= chunks;
  return want_shape(c, fw, 0, &w);
}
vd_rc vd_op_i_shape_chunk(const vd_op_call *c) { return shape_chunk(c, 1); }
/* Copies slice [off, off+ext) along dim between a full and a part tensor;
 * to_part: full -> part, else part -> full (positions outside untouched). */
static void slice_copy(const double *src, double *dst, const vd_op_shape *full, const vd_op_shape *part,
                       int32_t dim, int64_t off, int to_part) {
  int64_t n = vd_op_shape_numel(part), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(part, f, idx);
    idx[dim] += off;
    int64_t g = vd_op_shape_ravel(full, idx);
    if (to_part)
      dst[f] = src[g];
    else
      dst[g] = src[f];
  }
}
/* The part is slice `index` of the full tensor along dim; the backward's
 * output is zero outside it. */
static vd_rc eval_chunk(const vd_op_call *c, int fw) {
  const vd_op_shape *full = fw ? &c->in_shape[0] : &c->out_shape[0], *part = fw ? &c->out_shape[0] : &c->in_shape[0];
  int32_t dim;
  int64_t index, chunks;
  VD_CHECK(chunk_attrs(c, full, &dim, &index, &chunks));
  if (!fw) memset(c->out[0], 0, sizeof(double) * (size_t)vd_op_shape_numel(full));
  slice_copy(c->in[0], c->out[0], full, part, dim, index * part->d[dim], fw);
  return VD_OK;
}
vd_rc vd_op_i_eval_chunk(const vd_op_call *c) { return eval_chunk(c, 1); }
vd_rc vd_op_i_shape_chunk_backward(const vd_op_call *c) { return shape_chunk(c, 0); }
vd_rc vd_op_i_eval_chunk_backward(const vd_op_call *c) { return eval_chunk(c, 0); }

/* n parts (shapes ps) concatenated along dim give `full`. */
static vd_rc concat_shapes(const vd_op_call *c, const vd_op_shape *ps, uint32_t n, int is_out,
                           const vd_op_shape *full, const char *ffield, int32_t dim) {
  int64_t tot = 0;
  char f[32];
  for (uint32_t i = 0; i < n; i++) {
    vd_op_shape w = *full;
    w.d[dim] = ps[i].d[dim];
    if (ps[i].ndim != full->ndim || !same(&w, &ps[i])) {
      char a[96], b[96];
      shape_str(full, a, sizeof(a));
      shape_str(&ps[i], b, sizeof(b));
      return bad(c, fname(f, sizeof(f), is_out ? "outputs" : "inputs", i),
                 "expected shape %s except along dim %d, got %s", a, dim, b);
    }
    tot += ps[i].d[dim];
  }
  if (tot != full->d[dim])
    return bad(c, ffield, "expected extent %lld along dim %d (sum of the pieces), got %lld", (long long)tot, dim,
               (long long)full->d[dim]);
  return VD_OK;
}

vd_rc vd_op_i_shape_concat(const vd_op_call *c) {
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->out_shape[0].ndim, &dim));
  return concat_shapes(c, c->in_shape, c->n_in, 0, &c->out_shape[0], "outputs[0]", dim);
}
static void concat_into(double *out, const vd_op_shape *os, const double *const *in, const vd_op_shape *is,
                        uint32_t n, int32_t dim) {
  int64_t off = 0;
  for (uint32_t i = 0; i < n; i++) {
    slice_copy(in[i], out, os, &is[i], dim, off, 0);
    off += is[i].d[dim];
  }
}
vd_rc vd_op_i_eval_concat(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->out_shape[0].ndim, &dim));
  concat_into(c->out[0], &c->out_shape[0], c->in, c->in_shape, c->n_in, dim);
  return VD_OK;
}


vd_rc vd_op_i_shape_expand(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_bcast(c, &c->in_shape[0], &c->out_shape[0], "inputs[0]");
}
vd_rc vd_op_i_eval_expand(const vd_op_call *c) {
  int64_t n = vd_op_shape_numel(&c->out_shape[0]), idx[VD_MAX_DIMS];
  for (int64_t f = 0; f < n; f++) {
    vd_op_shape_unravel(&c->out_shape[0], f, idx);
    c->out[0][f] = c->in[0][vd_op_bcast_src(&c->out_shape[0], &c->in_shape[0], idx)];
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_sum_to(const vd_op_call *c) {
  VD_CHECK(want_count(c, 1, 1));
  return want_bcast(c, &c->out_shape[0], &c->in_shape[0], "outputs[0]");
}
vd_rc vd_op_i_eval_sum_to(const vd_op_call *c) {
  sum_to(c->in[0], &c->in_shape[0], c->out[0], &c->out_shape[0], 1.0);
  return VD_OK;
}

/* ---- collectives (one call = every participant, group order) ------------- */

static uint32_t parts(const vd_op_call *c) { return c->n_part ? c->n_part : c->n_in; }

/* P inputs and P outputs, all inputs of one shape. */
static vd_rc shape_coll(const vd_op_call *c) {
  uint32_t P = parts(c);
  VD_CHECK(want_count(c, P, P));
  for (uint32_t i = 1; i < P; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  return VD_OK;
}

vd_rc vd_op_i_shape_all_reduce(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  const char *r = astr(c, "reduce", "sum");
  if (strcmp(r, "sum") != 0 && strcmp(r, "max") != 0)
    return bad(c, "attrs.reduce", "expected \"sum\" or \"max\", got \"%s\"", r);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_reduce(const vd_op_call *c) {
  int mx = strcmp(astr(c, "reduce", "sum"), "max") == 0;
  int64_t n = vd_op_shape_numel(&c->in_shape[0]);
  for (int64_t e = 0; e < n; e++) {
    double s = c->in[0][e];
    for (uint32_t i = 1; i < c->n_in; i++) s = mx ? fmax(s, c->in[i][e]) : s + c->in[i][e];
    for (uint32_t i = 0; i < c->n_out; i++) c->out[i][e] = s;
  }
  return VD_OK;
}

vd_rc vd_op_i_shape_all_gather(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  vd_op_shape w = c->in_shape[0];
  w.d[dim] *= parts(c);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_gather(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  for (uint32_t i = 0; i < c->n_out; i++) concat_into(c->out[i], &c->out_shape[i], c->in, c->in_shape, c->n_in, dim);
  return VD_OK;
}

vd_rc vd_op_i_shape_reduce_scatter(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  uint32_t P = parts(c);
  if (c->in_shape[0].d[dim] % P)
    return bad(c, "inputs[0]", "extent %lld along dim %d is not divisible by the group size %u",
               (long long)c->in_shape[0].d[dim], dim, P);
  vd_op_shape w = c->in_shape[0];
  w.d[dim] /= P;
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_reduce_scatter(const vd_op_call *c) {
  int32_t dim;
  VD_CHECK(get_dim(c, "dim", 0, c->in_shape[0].ndim, &dim));
  const vd_op_shape *os = &c->out_shape[0];
  int64_t n = vd_op_shape_numel(os), idx[VD_MAX_DIMS];
  for (uint32_t p = 0; p < c->n_out; p++)
    for (int64_t f = 0; f < n; f++) {
      vd_op_shape_unravel(os, f, idx);
      idx[dim] += (int64_t)p * os->d[dim];
      int64_t src = vd_op_shape_ravel(&c->in_shape[0], idx);
      double s = 0;
      for (uint32_t i = 0; i < c->n_in; i++) s += c->in[i][src];
      c->out[p][f] = s;
    }
  return VD_OK;
}

static vd_rc a2a_dims(const vd_op_call *c, int32_t *sd, int32_t *cd) {
  VD_CHECK(get_dim(c, "split_dim", 0, c->in_shape[0].ndim, sd));
  return get_dim(c, "concat_dim", 0, c->in_shape[0].ndim, cd);
}
vd_rc vd_op_i_shape_all_to_all(const vd_op_call *c) {
  VD_CHECK(shape_coll(c));
  int32_t sd, cd;
  VD_CHECK(a2a_dims(c, &sd, &cd));
  uint32_t P = parts(c);
  if (c->in_shape[0].d[sd] % P)
    return bad(c, "inputs[0]", "extent %lld along split_dim %d is not divisible by the group size %u",
               (long long)c->in_shape[0].d[sd], sd, P);
  vd_op_shape w = c->in_shape[0];
  w.d[sd] /= P;
  w.d[cd] *= P;
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &w));
  return VD_OK;
}
vd_rc vd_op_i_eval_all_to_all(const vd_op_call *c) {
  int32_t sd, cd;
  VD_CHECK(a2a_dims(c, &sd, &cd));
  uint32_t P = parts(c);
  const vd_op_shape *xs = &c->in_shape[0], *ys = &c->out_shape[0];
  int64_t cs_sd = xs->d[sd] / P; /* chunk extent along split_dim */
  int64_t cs_cd = sd == cd ? cs_sd : xs->d[cd]; /* chunk extent along concat_dim */
  int64_t n = vd_op_shape_numel(ys), idx[VD_MAX_DIMS];
  for (uint32_t i = 0; i < c->n_out; i++)
    for (int64_t f = 0; f < n; f++) {
      vd_op_shape_unravel(ys, f, idx);
      int64_t j = idx[cd] / cs_cd;
      idx[cd] -= j * cs_cd;
      idx[sd] += (int64_t)i * cs_sd;
      c->out[i][f] = c->in[j][vd_op_shape_ravel(xs, idx)];
    }
  return VD_OK;
}

vd_rc vd_op_i_shape_broadcast(const vd_op_call *c) {
  if (c->n_in != 1) return bad(c, "inputs", "expected 1 input (the root's), got %u", c->n_in);
  int64_t root = aint(c, "root", 0);
  if (root < 0 || (c->n_part && root >= c->n_part))
    return bad(c, "attrs.root", "expected a group position in [0, %u), got %lld", c->n_part, (long long)root);
  for (uint32_t i = 0; i < c->n_out; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[0]));
  return VD_OK;
}
vd_rc vd_op_i_eval_broadcast(const vd_op_call *c) {
  size_t n = (size_t)vd_op_shape_numel(&c->in_shape[0]);
  for (uint32_t i = 0; i < c->n_out; i++) memcpy(c->out[i], c->in[0], n * sizeof(double));
  return VD_OK;
}

/* send and recv: a merged pair has the sender's x and the receiver's y. */
static vd_rc shape_move(const vd_op_call *c) {
  if (c->n_in > 1 || c->n_out > 1) return bad(c, "inputs", "a move has one input and one output");
  if (c->n_out == 1 && c->n_in == 0) return bad(c, "inputs", "recv without a matching send");
  if (c->n_out == 1) return want_shape(c, 1, 0, &c->in_shape[0]);
  return VD_OK;
}
static vd_rc eval_move(const vd_op_call *c) {
  if (c->n_in == 1 && c->n_out == 1) copy0(c);
  return VD_OK;
}
vd_rc vd_op_i_shape_send(const vd_op_call *c) { return shape_move(c); }
vd_rc vd_op_i_eval_send(const vd_op_call *c) { return eval_move(c); }
vd_rc vd_op_i_shape_recv(const vd_op_call *c) { return shape_move(c); }
vd_rc vd_op_i_eval_recv(const vd_op_call *c) { return eval_move(c); }

