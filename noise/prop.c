/*
 * noise/prop.c - values of every parallel value and the propagation of the
 * rounding-error bounds through the parallel graph (docs/noise.md, "The
 * model of floating point").
 *
 * For every parallel graph value (every replica) we keep its values (from the
 * parallel dump, else computed here by the registry's evaluator from its
 * node's inputs) and two bounds per element against the single-device value
 * (slice, or part) it stands for: a realistic standard deviation (erv) and a
 * first-order worst case (ewv, |error_e| <= ewv_e).  Initial values are exact
 * and bit-identical.  A node's outputs get
 *
 *   propagated:  its inputs' errors through the operator, measured by
 *                evaluating it (in double) on perturbed inputs against the
 *                node evaluated on the unperturbed ones: x + s (data movement,
 *                elementwise) or x + r s with random signs (others) for the
 *                realistic variances; for the worst case |f(x + W) - f(x)|
 *                (data movement), f(W, |x|) (sums and bilinear operators:
 *                exact |J| W), the larger of x +- W (elementwise), twice the
 *                largest of six sign patterns (others: an estimate);
 *   + split:     a contraction whose output is a partial sum the single plan
 *                computes whole (the output's part count exceeds its
 *                inputs'): both sides' roundings of their sums (the random
 *                walk of a recursive sum, r u^2 K (y^2/3 + sum t^2/2) (1 + n)
 *                per element; worst (gamma_K + gamma_nK) sum |t|);
 *   + combine:   an all_reduce or add of parts the single plan never sums
 *                separately: r u^2 (m-1) y^2; worst gamma_{m-1} sum |x_i|;
 *   + flips:     when the inputs differ, roundings of values that differ by d
 *                flip with probability |d| / ulp: (u |y| / ln 2) E|d|, at most
 *                2 r u^2 y^2 (times the internal roundings of a contraction
 *                or of a float kernel); worst 2u|y|.  E|d| is 0.8 sigma, or,
 *                for an elementwise operator, sigma^2 / q when smaller: the
 *                inputs' differences are multiples of their spacing, q once
 *                pushed through the operator, so a sigma below q means most
 *                elements do not differ at all;
 *   + kernels:   bfloat16/float16 kernels on another shape than the single
 *                plan's (vectorised body against scalar remainder, another
 *                blocking of a matmul) round differently, whatever their
 *                inputs: 2 r u^2 y^2, and for a contraction also the
 *                reassociation of its sums.
 * r = VD_NOISE_RV (noise.h): one rounding, uniform in half an ulp.  Data
 * movement on bit-identical inputs, and every operator on bit-identical
 * inputs that neither splits nor combines a sum nor runs a low-precision
 * kernel on another shape, keeps its output bit-identical.  Collectives are
 * taken to deliver the same bits to every participant (gloo's and NCCL's
 * all_reduce algorithms end by broadcasting the reduced chunks).
 *
 * The files: prop.c the values, the operator classes and the pass in
 * topological order; prop_probe.c the probes that push the inputs' errors
 * through a node; prop_node.c the steps of one node's bounds (propagated
 * plus the new roundings: split, combine, flips, kernels); prop_int.h what
 * they share.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "prop_int.h"

/* ---- small helpers --------------------------------------------------------- */

static uint64_t mix64(uint64_t x) { return vd_hash_splitmix64(x); }

/* Uniform in [0, 1) from a key. */
static double unit01(uint64_t k) { return vd_hash_unit01(mix64(k)); }

static double norm2(const double *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  return sqrt(s);
}

const vd_tensor_t *vd_noise_i_ptensor(const vd_noise_ctx *c, uint32_t v) {
  return &c->pp->tensors[c->gpx.values[v].tensor];
}

int vd_noise_i_is_float(vd_dtype dt) {
  return dt == VD_DT_F32 || dt == VD_DT_F16 || dt == VD_DT_BF16 || dt == VD_DT_F64;
}

/* Unit roundoff of a value: the run's precision (opts), or its plan dtype. */
double vd_noise_i_unit_of(const vd_noise_ctx *c, const vd_tensor_t *t) {
  if (!vd_noise_i_is_float(t->dtype)) return 0.0;
  if (c->o->dtype != VD_NOISE_PLAN) return vd_noise_unit(c->o->dtype);
  return vd_noise_unit_of_dtype(t->dtype);
}

double vd_noise_i_accum_unit(const vd_noise_ctx *c, double u_out) {
  if (c->o->accum == VD_NOISE_PLAN) return u_out;
  double ua = vd_noise_unit(c->o->accum);
  return ua < u_out ? ua : u_out;
}

int64_t vd_noise_i_part_n(const vd_tensor_t *t) { return t->has_lin && t->lin.part_n > 1 ? t->lin.part_n : 1; }

/* How each operator enters the model: a table indexed by operator id (the
 * registry, ops/ops.def, lists the operators; this is noise/'s reading of
 * them, one row each; operators without a row get the general rules).
 *   NZ_MOVE  only moves or selects elements: exact, no rounding;
 *   NZ_ELEM  elementwise: output e reads element e of each same-shaped input
 *            (a diagonal Jacobian);
 *   NZ_SUM   a sum of products (or of elements) of its inputs: its rounding
 *            grows with the number of terms; linear in each input;
 *   NZ_ADDS  a plain sum of its inputs (a combination of parts);
 *   NZ_KERN  a transcendental or normalising kernel: in bfloat16/float16 its
 *            vectorised body and scalar remainder may round differently, so
 *            another shape may give other bits on the same inputs. */
enum { NZ_MOVE = 1, NZ_ELEM = 2, NZ_SUM = 4, NZ_ADDS = 8, NZ_KERN = 16 };


static const uint8_t nz_class[VD_OP__COUNT] = {
    [VD_OP_IDENTITY] = NZ_MOVE | NZ_ELEM, [VD_OP_CONTIGUOUS] = NZ_MOVE, [VD_OP_VIEW] = NZ_MOVE,
    [VD_OP_RESHAPE] = NZ_MOVE, [VD_OP_TRANSPOSE] = NZ_MOVE, [VD_OP_MULTIREF] = NZ_MOVE, [VD_OP_CHUNK] = NZ_MOVE,
    [VD_OP_CHUNK_BACKWARD] = NZ_MOVE, [VD_OP_CONCAT] = NZ_MOVE, [VD_OP_EXPAND] = NZ_MOVE, [VD_OP_SEND] = NZ_MOVE,
    [VD_OP_RECV] = NZ_MOVE, [VD_OP_ALL_GATHER] = NZ_MOVE, [VD_OP_BROADCAST] = NZ_MOVE,
    [VD_OP_ALL_TO_ALL] = NZ_MOVE, [VD_OP_EMBEDDING] = NZ_MOVE, [VD_OP_PICK] = NZ_MOVE,
    [VD_OP_NEG] = NZ_MOVE | NZ_ELEM, [VD_OP_CAUSAL_MASK] = NZ_MOVE, [VD_OP_CREATE_MASK] = NZ_MOVE,
    [VD_OP_ADD] = NZ_ELEM | NZ_ADDS, [VD_OP_SUB] = NZ_ELEM, [VD_OP_MUL] = NZ_ELEM, [VD_OP_DIV] = NZ_ELEM,
    [VD_OP_POW] = NZ_ELEM | NZ_KERN, [VD_OP_SQRT] = NZ_ELEM | NZ_KERN, [VD_OP_RSQRT] = NZ_ELEM | NZ_KERN,
    [VD_OP_EXP] = NZ_ELEM | NZ_KERN, [VD_OP_LOG] = NZ_ELEM | NZ_KERN, [VD_OP_SIGMOID] = NZ_ELEM | NZ_KERN,
    [VD_OP_TANH] = NZ_ELEM | NZ_KERN, [VD_OP_SILU] = NZ_ELEM | NZ_KERN, [VD_OP_GELU] = NZ_ELEM | NZ_KERN,
    [VD_OP_SCALE] = NZ_ELEM, [VD_OP_CAST] = NZ_ELEM, [VD_OP_ACCUMULATE] = NZ_ELEM | NZ_ADDS,
    [VD_OP_MULTIREF_BACKWARD] = NZ_ELEM | NZ_ADDS, [VD_OP_ADD_BACKWARD] = NZ_ELEM,
    [VD_OP_SUB_BACKWARD] = NZ_ELEM, [VD_OP_MUL_BACKWARD] = NZ_ELEM, [VD_OP_DIV_BACKWARD] = NZ_ELEM,
    [VD_OP_NEG_BACKWARD] = NZ_ELEM, [VD_OP_SCALE_BACKWARD] = NZ_ELEM, [VD_OP_POW_BACKWARD] = NZ_ELEM | NZ_KERN,
    [VD_OP_SQRT_BACKWARD] = NZ_ELEM | NZ_KERN, [VD_OP_RSQRT_BACKWARD] = NZ_ELEM | NZ_KERN,
    [VD_OP_EXP_BACKWARD] = NZ_ELEM | NZ_KERN, [VD_OP_LOG_BACKWARD] = NZ_ELEM | NZ_KERN,
    [VD_OP_SIGMOID_BACKWARD] = NZ_ELEM | NZ_KERN, [VD_OP_TANH_BACKWARD] = NZ_ELEM | NZ_KERN,
    [VD_OP_SILU_BACKWARD] = NZ_ELEM | NZ_KERN, [VD_OP_GELU_BACKWARD] = NZ_ELEM | NZ_KERN,
    [VD_OP_MATMUL] = NZ_SUM, [VD_OP_LINEAR] = NZ_SUM, [VD_OP_MATMUL_BACKWARD] = NZ_SUM,
    [VD_OP_LINEAR_BACKWARD] = NZ_SUM, [VD_OP_SUM] = NZ_SUM, [VD_OP_MEAN] = NZ_SUM, [VD_OP_SUM_TO] = NZ_SUM,
    [VD_OP_EMBEDDING_BACKWARD] = NZ_SUM, [VD_OP_SUMSQ] = NZ_SUM,
    [VD_OP_SOFTMAX] = NZ_KERN, [VD_OP_SOFTMAX_BACKWARD] = NZ_KERN, [VD_OP_RMS_NORM] = NZ_KERN,
    [VD_OP_RMS_NORM_BACKWARD] = NZ_KERN, [VD_OP_LAYER_NORM] = NZ_KERN, [VD_OP_LAYER_NORM_BACKWARD] = NZ_KERN,
};

static int nz_is(int op, int cls) { return op >= 0 && op < VD_OP__COUNT && (nz_class[op] & cls); }
int vd_noise_i_is_move(int op) { return nz_is(op, NZ_MOVE); }
int vd_noise_i_is_elementwise(int op) { return nz_is(op, NZ_ELEM); }
int vd_noise_i_is_contraction(int op) { return nz_is(op, NZ_SUM); }
int vd_noise_i_kernel_dependent(int op) { return nz_is(op, NZ_KERN); }
int vd_noise_i_is_sum_of_inputs(int op) { return nz_is(op, NZ_ADDS); }

/* Whether parallel value v holds its single tensor whole (same shape, not a
 * part): the kernel then runs on the same shape on both sides. */
static const vd_tensor_t *single_of(const vd_noise_ctx *c, const vd_tensor_t *t) {
  if (!t->has_lin) return NULL;
  int64_t si = vd_plan_find_tensor(c->sp, t->lin.full);
  return si < 0 ? NULL : &c->sp->tensors[si];
}

int vd_noise_i_whole_single(const vd_noise_ctx *c, uint32_t v) {
  const vd_tensor_t *t = vd_noise_i_ptensor(c, v);
  if (!t->has_lin || t->lin.part_n > 1) return 0;
  const vd_tensor_t *st = single_of(c, t);
  if (!st || st->ndim != t->ndim) return 0;
  for (int32_t k = 0; k < t->ndim; k++)
    if (st->shape[k] != t->shape[k]) return 0;
  return 1;
}

/* The extents a GEMM kernel chooses its code path by, per matrix of tensor t: a linear flattens
 * its leading dims into rows, a matmul keeps them as a batch of matrices. */
static void gemm_extents(int op, const vd_tensor_t *t, int64_t *rows, int64_t *cols) {
  *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
  if (op == VD_OP_LINEAR || op == VD_OP_LINEAR_BACKWARD)
    *rows = *cols > 0 ? vd_tensor_numel(t) / *cols : 0;
  else
    *rows = t->ndim > 1 ? t->shape[t->ndim - 2] : 1;
}

/* Whether a contraction whose output v has another shape than its single tensor (no part of its
 * sums split: the caller checked) still sums each element in the single kernel's order.
 * Measured on PyTorch 2.9.1's CPU kernels (float32, docs/noise.md "Assumptions"): a GEMM computes
 * a row or column alike in an M x N and a 2M x N product when the extent that differs is at least
 * 12 on both sides (VD_NOISE_GEMM_PATH, 16, keeps a margin; below it MKL/oneDNN take small-matrix paths whose order along the contraction
 * differs, like a reassociated sum: up to 4 ulps at K = 100); a reduction keeps each output
 * element's order when its input's innermost extent is the single input's (a row-wise mean over
 * half the rows: bit-identical; a column sum over another number of columns: not). */
int vd_noise_i_contraction_keeps_order(const vd_noise_ctx *c, int op, uint32_t v, const uint32_t *iv,
                                       uint32_t n_in) {
  const vd_tensor_t *t = vd_noise_i_ptensor(c, v), *st = single_of(c, t);
  if (!st) return 0;
  if (op == VD_OP_MATMUL || op == VD_OP_LINEAR || op == VD_OP_MATMUL_BACKWARD || op == VD_OP_LINEAR_BACKWARD) {
    int64_t r, cl, sr, scl;
    gemm_extents(op, t, &r, &cl);
    gemm_extents(op, st, &sr, &scl);
    if (r != sr && (r < VD_NOISE_GEMM_PATH || sr < VD_NOISE_GEMM_PATH)) return 0;
    if (cl != scl && (cl < VD_NOISE_GEMM_PATH || scl < VD_NOISE_GEMM_PATH)) return 0;
    return 1;
  }
  for (uint32_t i = 0; i < n_in; i++) {
    const vd_tensor_t *x = vd_noise_i_ptensor(c, iv[i]), *sx = single_of(c, x);
    if (!vd_noise_i_is_float(x->dtype)) continue;
    if (!sx || x->ndim < 1 || sx->ndim != x->ndim || sx->shape[sx->ndim - 1] != x->shape[x->ndim - 1]) return 0;
  }
  return 1;
}

/* ---- evaluation ---------------------------------------------------------------- */


static vd_rc callbuf_fit(callbuf *b, uint32_t n, vd_diag *d) {
  if (n <= b->cap) return VD_OK;
  vd_free(b->in);
  vd_free(b->out);
  vd_free(b->is);
  vd_free(b->os);
  b->in = vd_calloc(n, sizeof(*b->in));
  b->out = vd_calloc(n, sizeof(*b->out));
  b->is = vd_calloc(n, sizeof(*b->is));
  b->os = vd_calloc(n, sizeof(*b->os));
  b->cap = n;
  if (!b->in || !b->out || !b->is || !b->os) {
    b->cap = 0;
    return VD_OOM(d);
  }
  return VD_OK;
}

static void callbuf_free(callbuf *b) {
  vd_free(b->in);
  vd_free(b->out);
  vd_free(b->is);
  vd_free(b->os);
  memset(b, 0, sizeof(*b));
}

/* Evaluates gpx node k on inputs in[] into out[]. */
vd_rc vd_noise_i_eval_node(vd_noise_ctx *c, uint32_t k, callbuf *b, const double *const *in, double *const *out,
                           vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const vd_node_t *pn = &c->pp->nodes[gn->pnode];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t i = 0; i < gn->n_in; i++) {
    const vd_tensor_t *t = vd_noise_i_ptensor(c, iv[i]);
    b->is[i].ndim = t->ndim;
    memcpy(b->is[i].d, t->shape, sizeof(t->shape));
  }
  for (uint32_t i = 0; i < gn->n_out; i++) {
    const vd_tensor_t *t = vd_noise_i_ptensor(c, ov[i]);
    b->os[i].ndim = t->ndim;
    memcpy(b->os[i].d, t->shape, sizeof(t->shape));
  }
  char label[96];
  snprintf(label, sizeof(label), "node %lld '%.60s'", (long long)pn->id, vd_plan_s(c->pp, pn->name));
  vd_op_call call = {.op = vd_op_lookup(vd_node_op(c->pp, pn)), .plan = c->pp, .node = pn, .record = label,
                     .n_in = gn->n_in, .n_out = gn->n_out, .n_part = gn->n_part ? gn->n_part : 1,
                     .in = (const double *const *)in, .in_shape = b->is, .out = out, .out_shape = b->os,
                     .diag = d};
  return vd_op_eval(&call);
}

/* ---- values ------------------------------------------------------------------------ */

const double *vd_noise_i_dumped(const vd_noise_dump *dump, const vd_graph_t *g, uint32_t v, int64_t *n) {
  if (!dump) return NULL;
  const vd_value_t *x = &g->values[v];
  const vd_tensor_t *t = &g->plan->tensors[x->tensor];
  int32_t last = vd_graph_last(g, x->tensor, x->replica, x->mb);
  int32_t first = vd_graph_first(g, x->tensor, x->replica, x->mb);
  const double *a = NULL;
  if ((int32_t)v == last) a = vd_noise_dump_get(dump, t->id, x->replica, 1, n);
  if (!a && (int32_t)v == first) a = vd_noise_dump_get(dump, t->id, x->replica, 0, n);
  return a;
}

/* Noise mode: the initial value of a parallel tensor, from its single
 * tensor's element through the lineage (so replicas agree and shards fit),
 * uniform in [-scale, scale]; optimizer state positive; integers 0. */
static vd_rc synth_initial(vd_noise_ctx *c, uint32_t v, vd_diag *d) {
  const vd_value_t *x = &c->gpx.values[v];
  const vd_tensor_t *t = vd_noise_i_ptensor(c, v);
  int64_t n = vd_tensor_numel(t);
  double *a = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!a) return VD_OOM(d);
  c->val[v] = a;
  c->own[v] = 1;
  if (!vd_noise_i_is_float(t->dtype)) return VD_OK;
  double X = c->o->scale > 0 ? c->o->scale : 1.0;
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  const vd_tensor_t *st = NULL;
  if (t->has_lin) {
    int64_t si = vd_plan_find_tensor(c->sp, t->lin.full);
    if (si >= 0) st = &c->sp->tensors[si];
    int64_t pk = 0;
    vd_tensor_lineage_at(t, x->replica, x->mb, lo, hi, &pk);
  }
  int64_t idx[VD_MAX_DIMS];
  for (int64_t e = 0; e < n; e++) {
    uint64_t key;
    if (st && st->ndim == t->ndim) {
      int64_t r = e, flat = 0;
      for (int32_t k = t->ndim - 1; k >= 0; k--) {
        idx[k] = r % t->shape[k];
        r /= t->shape[k];
      }
      for (int32_t k = 0; k < t->ndim; k++) flat = flat * st->shape[k] + lo[k] + idx[k];
      key = mix64(c->o->seed ^ mix64((uint64_t)t->lin.full * 0x100000001b3ULL)) ^ (uint64_t)flat;
    } else {
      key = mix64(c->o->seed ^ mix64((uint64_t)t->id)) ^ mix64((uint64_t)x->replica) ^
            (uint64_t)e;
    }
    double w = unit01(key);
    a[e] = t->role == VD_ROLE_OPTSTATE ? X * (0.01 + w) : X * (2.0 * w - 1.0);
    if (t->has_lin && t->lin.part_n > 1) a[e] /= (double)t->lin.part_n;
  }
  return VD_OK;
}

/* ---- the pass -------------------------------------------------------------------------- */

/* The per-value arrays of the context, all zero. */
static vd_rc alloc_value_arrays(vd_noise_ctx *c, vd_diag *d) {
  size_t nv = c->gpx.n_values;
  c->val = vd_calloc(nv + 1, sizeof(double *));
  c->own = vd_calloc(nv + 1, 1);
  c->dumped = vd_calloc(nv + 1, 1);
  c->bitid = vd_calloc(nv + 1, 1);
  c->ere = vd_calloc(nv + 1, sizeof(double));
  c->ewc = vd_calloc(nv + 1, sizeof(double));
  c->nrm = vd_calloc(nv + 1, sizeof(double));
  c->known = vd_calloc(nv + 1, 1);
  c->ewv = vd_calloc(nv + 1, sizeof(double *));
  c->erv = vd_calloc(nv + 1, sizeof(double *));
  if (!c->val || !c->own || !c->dumped || !c->bitid || !c->ere || !c->ewc || !c->nrm || !c->known || !c->ewv || !c->erv) return VD_OOM(d);
  return VD_OK;
}

/* Values from the dump (their lengths checked against the plan); initial values in noise mode.
 * Initial values are exact and bit-identical. */
static vd_rc load_values(vd_noise_ctx *c, vd_diag *d) {
  const vd_graph_t *g = &c->gpx;
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_tensor_t *t = vd_noise_i_ptensor(c, (uint32_t)v);
    int64_t want = vd_tensor_numel(t), n = 0;
    const double *a = vd_noise_i_dumped(c->pd, g, (uint32_t)v, &n);
    if (a) {
      if (n != want) {
        char rec[64];
        snprintf(rec, sizeof(rec), "tensor %lld replica %d", (long long)t->id, g->values[v].replica);
        VD_FAIL(d, VD_EINPUT, NULL, rec, "n", "%lld values, but the plan's tensor has %lld elements",
                (long long)n, (long long)want);
      }
      c->val[v] = (double *)a;
      c->dumped[v] = 1;
    } else if (!c->pd && g->values[v].is_initial) {
      VD_CHECK(synth_initial(c, (uint32_t)v, d));
    }
    if (g->values[v].is_initial) c->bitid[v] = c->known[v] = 1;
  }
  return VD_OK;
}

/* Node k evaluated when its inputs have values and an output has none: every output computed,
 * the dumped ones (the real run's) kept where present. */
static vd_rc evaluate_missing(vd_noise_ctx *c, uint32_t k, callbuf *b, vd_diag *d) {
  const vd_graph_t *g = &c->gpx;
  const vd_gnode_t *gn = &g->nodes[k];
  const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
  int have_in = 1, missing_out = 0;
  for (uint32_t i = 0; i < gn->n_in; i++) have_in &= c->val[iv[i]] != NULL;
  for (uint32_t j = 0; j < gn->n_out; j++) missing_out |= c->val[ov[j]] == NULL;
  if (!missing_out || !have_in) return VD_OK;
  double **outs = vd_calloc(gn->n_out + 1, sizeof(double *));
  if (!outs) return VD_OOM(d);
  vd_rc rc = VD_OK;
  for (uint32_t j = 0; j < gn->n_out && rc == VD_OK; j++) {
    int64_t n = vd_tensor_numel(vd_noise_i_ptensor(c, ov[j]));
    outs[j] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!outs[j]) rc = VD_OOM(d);
  }
  if (rc == VD_OK) {
    const double **ins = (const double **)b->in;
    for (uint32_t i = 0; i < gn->n_in; i++) ins[i] = c->val[iv[i]];
    rc = vd_noise_i_eval_node(c, k, b, ins, outs, d);
  }
  for (uint32_t j = 0; j < gn->n_out; j++) {
    if (rc == VD_OK && !c->val[ov[j]]) {
      c->val[ov[j]] = outs[j];
      c->own[ov[j]] = 1;
      c->n_evaluated++;
    } else {
      vd_free(outs[j]);
    }
  }
  vd_free(outs);
  return rc;
}

/* The 2-norms of node k's outputs, and of its initial inputs. */
static void record_norms(vd_noise_ctx *c, uint32_t k) {
  const vd_graph_t *g = &c->gpx;
  const vd_gnode_t *gn = &g->nodes[k];
  const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
  for (uint32_t j = 0; j < gn->n_out; j++)
    if (c->val[ov[j]]) c->nrm[ov[j]] = norm2(c->val[ov[j]], vd_tensor_numel(vd_noise_i_ptensor(c, ov[j])));
  for (uint32_t i = 0; i < gn->n_in; i++)
    if (c->val[iv[i]] && g->values[iv[i]].is_initial)
      c->nrm[iv[i]] = norm2(c->val[iv[i]], vd_tensor_numel(vd_noise_i_ptensor(c, iv[i])));
}

vd_rc vd_noise_i_propagate(vd_noise_ctx *c, vd_diag *d) {
  const vd_graph_t *g = &c->gpx;
  VD_CHECK(alloc_value_arrays(c, d));
  VD_CHECK(load_values(c, d));
  callbuf b;
  memset(&b, 0, sizeof(b));
  workbuf w;
  memset(&w, 0, sizeof(w));
  vd_rc rc = VD_OK;
  for (size_t ti = 0; ti < g->n_nodes && rc == VD_OK; ti++) {
    uint32_t k = g->topo[ti];
    const vd_gnode_t *gn = &g->nodes[k];
    rc = callbuf_fit(&b, gn->n_in + gn->n_out + 1, d);
    if (rc == VD_OK) rc = evaluate_missing(c, k, &b, d);
    if (rc != VD_OK) break;
    record_norms(c, k);
    rc = vd_noise_i_node_bounds(c, k, &b, &w, d);
  }
  callbuf_free(&b);
  vd_noise_i_work_free(&w);
  return rc;
}
