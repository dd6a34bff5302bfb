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
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "noise_int.h"

/* ---- small helpers --------------------------------------------------------- */

static uint64_t mix64(uint64_t x) { return vd_hash_splitmix64(x); }

/* Uniform in [0, 1) from a key. */
static double unit01(uint64_t k) { return vd_hash_unit01(mix64(k)); }

static double norm2(const double *x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
  return sqrt(s);
}

static const vd_tensor_t *ptensor(const vd_noise_ctx *c, uint32_t v) {
  return &c->pp->tensors[c->gpx.values[v].tensor];
}

static int is_float(vd_dtype dt) { return dt == VD_DT_F32 || dt == VD_DT_F16 || dt == VD_DT_BF16 || dt == VD_DT_F64; }

/* Unit roundoff of a value: the run's precision (opts), or its plan dtype. */
static double unit_of(const vd_noise_ctx *c, const vd_tensor_t *t) {
  if (!is_float(t->dtype)) return 0.0;
  if (c->o->dtype != VD_NOISE_PLAN) return vd_noise_unit(c->o->dtype);
  return vd_noise_unit_of_dtype(t->dtype);
}

static double accum_unit(const vd_noise_ctx *c, double u_out) {
  if (c->o->accum == VD_NOISE_PLAN) return u_out;
  double ua = vd_noise_unit(c->o->accum);
  return ua < u_out ? ua : u_out;
}

static int64_t part_n(const vd_tensor_t *t) { return t->has_lin && t->lin.part_n > 1 ? t->lin.part_n : 1; }

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

/* A contraction's output against its single tensor: the same shape; another shape, each element
 * summed in the same order (contraction_keeps_order); another shape and another order. */
enum { SAME_SHAPE = 0, SAME_ORDER = 1, REORDERED = 2 };

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
static int is_move(int op) { return nz_is(op, NZ_MOVE); }
static int is_elementwise(int op) { return nz_is(op, NZ_ELEM); }
static int is_contraction(int op) { return nz_is(op, NZ_SUM); }
static int kernel_dependent(int op) { return nz_is(op, NZ_KERN); }
static int is_sum_of_inputs(int op) { return nz_is(op, NZ_ADDS); }

/* Whether parallel value v holds its single tensor whole (same shape, not a
 * part): the kernel then runs on the same shape on both sides. */
static const vd_tensor_t *single_of(const vd_noise_ctx *c, const vd_tensor_t *t) {
  if (!t->has_lin) return NULL;
  int64_t si = vd_plan_find_tensor(c->sp, t->lin.full);
  return si < 0 ? NULL : &c->sp->tensors[si];
}

static int whole_single(const vd_noise_ctx *c, uint32_t v) {
  const vd_tensor_t *t = ptensor(c, v);
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
static int contraction_keeps_order(const vd_noise_ctx *c, int op, uint32_t v, const uint32_t *iv,
                                   uint32_t n_in) {
  const vd_tensor_t *t = ptensor(c, v), *st = single_of(c, t);
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
    const vd_tensor_t *x = ptensor(c, iv[i]), *sx = single_of(c, x);
    if (!is_float(x->dtype)) continue;
    if (!sx || x->ndim < 1 || sx->ndim != x->ndim || sx->shape[sx->ndim - 1] != x->shape[x->ndim - 1]) return 0;
  }
  return 1;
}

/* ---- evaluation ---------------------------------------------------------------- */

typedef struct {
  const double **in;
  double **out;
  vd_op_shape *is, *os;
  uint32_t cap;
} callbuf;

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
static vd_rc eval_node(vd_noise_ctx *c, uint32_t k, callbuf *b, const double *const *in, double *const *out,
                       vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const vd_node_t *pn = &c->pp->nodes[gn->pnode];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t i = 0; i < gn->n_in; i++) {
    const vd_tensor_t *t = ptensor(c, iv[i]);
    b->is[i].ndim = t->ndim;
    memcpy(b->is[i].d, t->shape, sizeof(t->shape));
  }
  for (uint32_t i = 0; i < gn->n_out; i++) {
    const vd_tensor_t *t = ptensor(c, ov[i]);
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
  const vd_tensor_t *t = ptensor(c, v);
  int64_t n = vd_tensor_numel(t);
  double *a = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!a) return VD_OOM(d);
  c->val[v] = a;
  c->own[v] = 1;
  if (!is_float(t->dtype)) return VD_OK;
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
      key = mix64(c->o->seed ^ mix64((uint64_t)t->id)) ^ mix64((uint64_t)x->replica) ^ (uint64_t)e;
    }
    double w = unit01(key);
    a[e] = t->role == VD_ROLE_OPTSTATE ? X * (0.01 + w) : X * (2.0 * w - 1.0);
    if (t->has_lin && t->lin.part_n > 1) a[e] /= (double)t->lin.part_n;
  }
  return VD_OK;
}

/* ---- one node's bounds -------------------------------------------------------------- */

typedef struct {
  double *tmpd;            /* perturbed input */
  double *tmpc;            /* 5 per output: contraction terms */
  double **wvec, **wtmp, **s1v; /* per output: worst-case bound vector, a probe's, sum |terms| */
  double **base;           /* per output: the node evaluated in double on its inputs (the probes' origin) */
  double **rvar;           /* per output: realistic variance per element */
  double **kv, **s2v;      /* per output: terms per element, sum of squared terms (contractions) */
  double **blk;            /* per output: the block wtmp, s1v, base, kv, s2v point into */
  double **absd;           /* per input: |x| */
  int64_t *abscap;
  double **tmpo;           /* outputs of a probe */
  const double **ins;
  uint32_t cap;
  int64_t tcap;
  int64_t *ocap;
} workbuf;

/* Frees the buffers sized by the operand count (w->cap); tmpd is sized by
 * elements and outlives a regrowth. */
static void work_free_slots(workbuf *w) {
  VD_FREE_EACH(w->tmpo, w->cap);
  vd_free(w->ins);
  vd_free(w->ocap);
  vd_free(w->tmpc);
  VD_FREE_EACH(w->absd, w->cap);
  vd_free(w->abscap);
  vd_free(w->wvec);
  vd_free(w->wtmp);
  vd_free(w->s1v);
  vd_free(w->base);
  vd_free(w->rvar);
  vd_free(w->kv);
  vd_free(w->s2v);
  vd_free(w->blk);
}

static vd_rc work_fit(workbuf *w, uint32_t n, vd_diag *d) {
  if (n > w->cap) {
    work_free_slots(w);
    w->blk = vd_calloc(n, sizeof(double *));
    w->kv = vd_calloc(n, sizeof(double *));
    w->s2v = vd_calloc(n, sizeof(double *));
    w->rvar = vd_calloc(n, sizeof(double *));
    w->base = vd_calloc(n, sizeof(double *));
    w->wvec = vd_calloc(n, sizeof(double *));
    w->wtmp = vd_calloc(n, sizeof(double *));
    w->s1v = vd_calloc(n, sizeof(double *));
    w->tmpc = vd_calloc((size_t)n * 5, sizeof(double));
    w->absd = vd_calloc(n, sizeof(double *));
    w->abscap = vd_calloc(n, sizeof(int64_t));
    w->tmpo = vd_calloc(n, sizeof(double *));
    w->ins = vd_calloc(n, sizeof(double *));
    w->ocap = vd_calloc(n, sizeof(int64_t));
    w->cap = n;
    if (!w->tmpo || !w->ins || !w->ocap || !w->tmpc || !w->absd ||
        !w->abscap || !w->wvec || !w->wtmp || !w->s1v || !w->base || !w->rvar || !w->kv || !w->s2v || !w->blk) {
      w->cap = 0;
      return VD_OOM(d);
    }
  }
  return VD_OK;
}

static vd_rc buf_at_least(double **p, int64_t *cap, int64_t n, vd_diag *d) {
  if (n <= *cap) return VD_OK;
  vd_free(*p);
  *p = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  if (!*p) {
    *cap = 0;
    return VD_OOM(d);
  }
  *cap = n;
  return VD_OK;
}

static void work_free(workbuf *w) {
  work_free_slots(w);
  vd_free(w->tmpd);
  memset(w, 0, sizeof(*w));
}

/* Probe outputs sized for node k. */
static vd_rc probe_outputs(vd_noise_ctx *c, uint32_t k, workbuf *w, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t j = 0; j < gn->n_out; j++)
    VD_CHECK(buf_at_least(&w->tmpo[j], &w->ocap[j], vd_tensor_numel(ptensor(c, ov[j])), d));
  return VD_OK;
}

/* Evaluates node k with input i replaced by w->tmpd; outputs in w->tmpo. */
static vd_rc probe(vd_noise_ctx *c, uint32_t k, uint32_t i, callbuf *b, workbuf *w, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn);
  for (uint32_t q = 0; q < gn->n_in; q++) w->ins[q] = q == i ? w->tmpd : c->val[iv[q]];
  return eval_node(c, k, b, w->ins, w->tmpo, d);
}

/* |w->tmpo[j][e] - w->base[j][e]|: how far a probe moved output j's
 * element e; infinite when either side is not finite, 0 when both are NaN. */
static double moved(const workbuf *w, uint32_t j, int64_t e) {
  double y = w->base[j][e], t = w->tmpo[j][e], g = fabs(t - y);
  return isfinite(g) ? g : isnan(t) && isnan(y) ? 0 : INFINITY;
}

/* What the steps of one node's bounds share (node_bounds). */
typedef struct {
  vd_noise_ctx *c;
  uint32_t k;
  callbuf *b;
  workbuf *w;
  vd_diag *d;
  const vd_gnode_t *gn;
  const vd_node_t *pn;
  int op;
  const uint32_t *iv, *ov;
  int bit_in, any_wc;   /* every input bit-identical; some input has a worst-case vector */
  int64_t in_parts, out_parts, maxn;
  int coll_sum;         /* a sum all_reduce / reduce_scatter over several participants */
  int combine;          /* adds parts the single plan never sums separately */
  int quant;            /* the quantised-difference rule applies (kv holds q) */
  int low;              /* bfloat16/float16 kernels: shape-dependent code paths */
  double u, ua;         /* unit roundoff of the outputs, of the accumulation */
  double *nfac, *km, *reblock; /* per output (w->tmpc): split factor, largest K, SAME_SHAPE/... */
} nodestep;

/* The realistic probe of input i: its per-element standard deviations s_e
 * pushed through the operator, E[d_e^2] added to the output's variances
 * (w->rvar).  Data movement and elementwise operators: one probe x + s (their
 * Jacobian maps each element on its own: exact to first order); the others:
 * the mean of two probes x + r s with random signs r (E[(J r s)_e^2] =
 * sum_c J_ec^2 s_c^2: the variance of independent input errors). */
static vd_rc probe_realistic(const nodestep *s, uint32_t i) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  uint32_t v = s->iv[i];
  const double *x = c->val[v], *sd = c->erv[v];
  int64_t n = vd_tensor_numel(ptensor(c, v));
  int det = is_move(s->op) || is_elementwise(s->op);
  int probes = det ? 1 : 2;
  for (int pr = 0; pr < probes; pr++) {
    uint64_t base = mix64(c->o->seed ^ mix64(((uint64_t)s->k << 20) ^ ((uint64_t)i << 4) ^ (uint64_t)pr ^ 0x5157ULL));
    for (int64_t e = 0; e < n; e++)
      w->tmpd[e] = x[e] + (det || (mix64(base + (uint64_t)e) & 1) ? sd[e] : -sd[e]);
    VD_CHECK(probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < s->gn->n_out; j++) {
      int64_t m = vd_tensor_numel(ptensor(c, s->ov[j]));
      for (int64_t e = 0; e < m; e++) {
        double dd = moved(w, j, e);
        w->rvar[j][e] += dd * dd / probes;
      }
    }
  }
  return VD_OK;
}

/* Does output j of node k read input i?  (linear_backward's dx does not
 * read x: the contraction rule below would otherwise charge it.)  One
 * evaluation with input i moved. */
static vd_rc reads_input(const nodestep *s, uint32_t i, uint8_t *dep) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  const double *x = c->val[s->iv[i]];
  int64_t n = vd_tensor_numel(ptensor(c, s->iv[i]));
  for (int64_t e = 0; e < n; e++) w->tmpd[e] = x[e] * 1.25 + 0.5;
  VD_CHECK(probe(c, s->k, i, s->b, w, s->d));
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    const double *y = w->base[j];
    int64_t m = vd_tensor_numel(ptensor(c, s->ov[j]));
    dep[j] = 0;
    for (int64_t e = 0; e < m && !dep[j]; e++) dep[j] = w->tmpo[j][e] != y[e];
  }
  return VD_OK;
}

/* The worst case, componentwise and to first order: input i's error bound
 * vector E (|error| <= E elementwise) reaches output element e as
 * sum_c |dy_e/dx_c| E_c:
 *   data movement                |f(x + E) - f(x)| (exact: a linear map that copies elements);
 *   sums and bilinear operators  f(E in place of input i, |x| for the others) (exact |J| E);
 *   elementwise                  max(|f(x + E) - f(x)|, |f(x - E) - f(x)|) (first order);
 *   other operators              (softmax, norms, their backward) an estimate: twice the largest
 *                                |f(x + s E) - f(x)| over s = +1, -1 and four random sign
 *                                patterns (not rigorous; docs/noise.md).
 * Adds into w->wvec[j]. */
static vd_rc probe_worst(const nodestep *s, uint32_t i) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  const vd_gnode_t *gn = s->gn;
  const uint32_t *iv = s->iv, *ov = s->ov;
  uint8_t dep[64];
  int use_dep = gn->n_out > 1 && gn->n_out <= 64;
  if (use_dep) VD_CHECK(reads_input(s, i, dep));
  const double *x = c->val[iv[i]], *E = c->ewv[iv[i]];
  int64_t n = vd_tensor_numel(ptensor(c, iv[i]));
  if (is_contraction(s->op) && s->op != VD_OP_SUMSQ) {
    for (uint32_t q = 0; q < gn->n_in; q++) {
      const vd_tensor_t *t = ptensor(c, iv[q]);
      int64_t m = vd_tensor_numel(t);
      double *buf = NULL;
      if (q == i) {
        buf = w->tmpd;
        for (int64_t e = 0; e < m; e++) buf[e] = E[e];
      } else if (is_float(t->dtype)) {
        VD_CHECK(buf_at_least(&w->absd[q], &w->abscap[q], m, s->d));
        buf = w->absd[q];
        for (int64_t e = 0; e < m; e++) buf[e] = fabs(c->val[iv[q]][e]);
      }
      w->ins[q] = buf ? buf : c->val[iv[q]];
    }
    VD_CHECK(eval_node(c, s->k, s->b, w->ins, w->tmpo, s->d));
    for (uint32_t j = 0; j < gn->n_out; j++) {
      if (use_dep && !dep[j]) continue;
      int64_t m = vd_tensor_numel(ptensor(c, ov[j]));
      for (int64_t e = 0; e < m; e++) w->wvec[j][e] += fabs(w->tmpo[j][e]);
    }
    return VD_OK;
  }
  int move = is_move(s->op), elem = is_elementwise(s->op);
  int probes = move ? 1 : elem ? 2 : 6;
  for (uint32_t j = 0; j < gn->n_out; j++) {
    int64_t m = vd_tensor_numel(ptensor(c, ov[j]));
    for (int64_t e = 0; e < m; e++) w->wtmp[j][e] = 0;
  }
  for (int pr = 0; pr < probes; pr++) {
    uint64_t base = mix64(c->o->seed ^ mix64(((uint64_t)s->k << 20) ^ ((uint64_t)i << 4) ^ (uint64_t)pr ^ 0x77ULL));
    for (int64_t e = 0; e < n; e++) {
      double sg = pr == 0 ? 1.0 : pr == 1 ? -1.0 : (mix64(base + (uint64_t)e) & 1 ? 1.0 : -1.0);
      w->tmpd[e] = x[e] + sg * E[e];
    }
    VD_CHECK(probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < gn->n_out; j++) {
      int64_t m = vd_tensor_numel(ptensor(c, ov[j]));
      for (int64_t e = 0; e < m; e++) {
        double g = moved(w, j, e);
        if (g > w->wtmp[j][e]) w->wtmp[j][e] = g;
      }
    }
  }
  for (uint32_t j = 0; j < gn->n_out; j++) {
    if (use_dep && !dep[j]) continue;
    int64_t m = vd_tensor_numel(ptensor(c, ov[j]));
    double f = move || elem ? 1.0 : 2.0;
    for (int64_t e = 0; e < m; e++) w->wvec[j][e] += f * w->wtmp[j][e];
  }
  return VD_OK;
}

/* From the node evaluated on all-ones, |x| and x^2 (outs[0..2]), per output: the per-element
 * term counts (kv), sums of |terms| (s1v) and of terms^2 (s2v), the largest count (kmax), the
 * max-norm of the |terms| sums (s1n) and the one-side variance summed (vsum). */
static void terms_of_outputs(vd_noise_ctx *c, uint32_t k, int op, double **outs[3], double *kmax,
                             double *s1n, double *vsum, double u_acc, const double *nfac, double **s1v,
                             double **kv, double **s2v) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  for (uint32_t j = 0; j < gn->n_out; j++) {
    const double *y = c->val[ov[j]];
    int64_t n = vd_tensor_numel(ptensor(c, ov[j]));
    int64_t nin = vd_tensor_numel(ptensor(c, iv[0]));
    double s1 = 0, v = 0;
    kmax[j] = 1;
    for (int64_t e = 0; e < n; e++) {
      double K = outs[0][j][e];
      if (op == VD_OP_MEAN) K = (double)nin / (double)(n > 0 ? n : 1);
      if (!(K >= 1)) K = 1;
      if (K > kmax[j]) kmax[j] = K;
      double a = outs[1][j][e], q = outs[2][j][e];
      if (op == VD_OP_MEAN) {
        a *= K;
        q *= K * K;
      }
      if (a > s1) s1 = a;
      s1v[j][e] = a;
      kv[j][e] = K;
      s2v[j][e] = q;
      /* one side's variance, r u^2 K (y^2/3 + sum t^2 / 2); the single side's nK terms */
      double ye = op == VD_OP_MEAN ? y[e] * K : y[e];
      v += VD_NOISE_RV * u_acc * u_acc * K * (ye * ye / 3.0 + q / 2.0) * (1.0 + nfac[j]);
    }
    s1n[j] = s1; /* max-norm of |terms| summed */
    vsum[j] = v;
  }
}

/* Per-element term counts and sums of |terms| and terms^2 of a contraction:
 * the node evaluated on all-ones, |x| and x^2 floating inputs (integer inputs,
 * indices, are kept).  Exact for sums of products of its inputs. */
static vd_rc contraction_terms(vd_noise_ctx *c, uint32_t k, int op, callbuf *b, double *kmax, double *s1n,
                               double *vsum, double u_acc, const double *nfac, double **s1v, double **kv,
                               double **s2v, vd_diag *d) {
  const vd_gnode_t *gn = &c->gpx.nodes[k];
  const uint32_t *iv = vd_gnode_inputs(&c->gpx, gn), *ov = vd_gnode_outputs(&c->gpx, gn);
  int64_t tot = 0;
  for (uint32_t i = 0; i < gn->n_in; i++) tot += vd_tensor_numel(ptensor(c, iv[i]));
  double *pool = vd_calloc((size_t)(tot > 0 ? tot : 1) * 3, sizeof(double));
  const double **in3 = vd_calloc((size_t)gn->n_in * 3 + 1, sizeof(double *));
  double **outs[3] = {NULL, NULL, NULL};
  vd_rc rc = VD_OK;
  if (!pool || !in3) {
    rc = VD_OOM(d);
    goto done;
  }
  int64_t off = 0;
  for (uint32_t i = 0; i < gn->n_in; i++) {
    const vd_tensor_t *t = ptensor(c, iv[i]);
    int64_t n = vd_tensor_numel(t);
    const double *x = c->val[iv[i]];
    for (int m = 0; m < 3; m++) {
      double *p = pool + (size_t)tot * (size_t)m + (size_t)off;
      for (int64_t e = 0; e < n; e++)
        p[e] = !is_float(t->dtype) ? x[e] : m == 0 ? 1.0 : m == 1 ? fabs(x[e]) : x[e] * x[e];
      in3[(size_t)m * gn->n_in + i] = p;
    }
    off += n;
  }
  for (int m = 0; m < 3; m++) {
    outs[m] = vd_calloc(gn->n_out + 1, sizeof(double *));
    if (!outs[m]) {
      rc = VD_OOM(d);
      goto done;
    }
    for (uint32_t j = 0; j < gn->n_out; j++) {
      int64_t n = vd_tensor_numel(ptensor(c, ov[j]));
      outs[m][j] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
      if (!outs[m][j]) {
        rc = VD_OOM(d);
        goto done;
      }
    }
    if ((rc = eval_node(c, k, b, in3 + (size_t)m * gn->n_in, outs[m], d)) != VD_OK) goto done;
  }
  terms_of_outputs(c, k, op, outs, kmax, s1n, vsum, u_acc, nfac, s1v, kv, s2v);
done:
  for (int m = 0; m < 3; m++) {
    if (outs[m])
      for (uint32_t j = 0; j < gn->n_out; j++) vd_free(outs[m][j]);
    vd_free(outs[m]);
  }
  vd_free(pool);
  vd_free(in3);
  return rc;
}


/* Reads the operands' state into s: 0 when an input has no value or no bound, or an output no
 * value (the outputs then get no bound). */
static int scan_operands(nodestep *s) {
  vd_noise_ctx *c = s->c;
  s->bit_in = 1;
  s->any_wc = 0;
  s->in_parts = 1;
  s->maxn = 1;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (!c->val[v] || !c->known[v]) return 0;
    s->bit_in &= c->bitid[v];
    s->any_wc |= c->ewv[v] != NULL;
    int64_t pnn = part_n(ptensor(c, v));
    if (pnn > s->in_parts) s->in_parts = pnn;
    int64_t n = vd_tensor_numel(ptensor(c, v));
    if (n > s->maxn) s->maxn = n;
  }
  s->out_parts = 1;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    if (!c->val[s->ov[j]]) return 0;
    int64_t pnn = part_n(ptensor(c, s->ov[j]));
    if (pnn > s->out_parts) s->out_parts = pnn;
  }
  return 1;
}

/* Per-output worst-case and variance vectors, and the node's scratch vectors in one block:
 * a probe's, sum |t|, the origin, K, sum t^2. */
static vd_rc alloc_output_vectors(nodestep *s) {
  workbuf *w = s->w;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t m = vd_tensor_numel(ptensor(s->c, s->ov[j]));
    w->wvec[j] = vd_calloc((size_t)(m > 0 ? m : 1), sizeof(double));
    w->rvar[j] = vd_calloc((size_t)(m > 0 ? m : 1), sizeof(double));
    size_t mm = (size_t)(m > 0 ? m : 1);
    w->blk[j] = mm < SIZE_MAX / 5 ? vd_calloc(5 * mm, sizeof(double)) : NULL;
    if (!w->wvec[j] || !w->rvar[j] || !w->blk[j]) return VD_OOM(s->d);
    w->wtmp[j] = w->blk[j];
    w->s1v[j] = w->blk[j] + mm;
    w->base[j] = w->blk[j] + 2 * mm;
    w->kv[j] = w->blk[j] + 3 * mm;
    w->s2v[j] = w->blk[j] + 4 * mm;
  }
  return VD_OK;
}

/* The probes' origin: the node in double on the real inputs (a dumped output also holds the
 * run's own rounding, which is not a difference between the runs). */
static vd_rc eval_origin(nodestep *s) {
  vd_noise_ctx *c = s->c;
  int need = 0;
  for (uint32_t i = 0; i < s->gn->n_in; i++) need |= c->erv[s->iv[i]] != NULL || c->ewv[s->iv[i]] != NULL;
  if (!need) return VD_OK;
  for (uint32_t i = 0; i < s->gn->n_in; i++) s->w->ins[i] = c->val[s->iv[i]];
  return eval_node(c, s->k, s->b, s->w->ins, s->w->base, s->d);
}

/* The sum collective applied to per-element vectors of its inputs, src (erv squared when sq:
 * independent errors add their variances; ewv as it is: a sum of nonnegative vectors); the
 * result's magnitude added into dst (w->rvar or w->wvec). */
static vd_rc collective_on(nodestep *s, double *const *src, int sq, double **dst) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    int64_t n = vd_tensor_numel(ptensor(c, s->iv[i]));
    VD_CHECK(buf_at_least(&w->absd[i], &w->abscap[i], n, s->d));
    const double *x = src[s->iv[i]];
    for (int64_t e = 0; e < n; e++) w->absd[i][e] = x ? (sq ? x[e] * x[e] : x[e]) : 0.0;
    w->ins[i] = w->absd[i];
  }
  VD_CHECK(eval_node(c, s->k, s->b, w->ins, w->tmpo, s->d));
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t m = vd_tensor_numel(ptensor(c, s->ov[j]));
    for (int64_t e = 0; e < m; e++) dst[j][e] += fabs(w->tmpo[j][e]);
  }
  return VD_OK;
}

/* The inputs' errors propagated through the node into w->rvar and w->wvec. */
static vd_rc propagate_inputs(nodestep *s) {
  vd_noise_ctx *c = s->c;
  if (s->coll_sum) {
    int any_re = 0;
    for (uint32_t i = 0; i < s->gn->n_in; i++) any_re |= c->erv[s->iv[i]] != NULL;
    if (any_re) VD_CHECK(collective_on(s, c->erv, 1, s->w->rvar));
    if (s->any_wc) VD_CHECK(collective_on(s, c->ewv, 0, s->w->wvec));
    return VD_OK;
  }
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (c->erv[v]) VD_CHECK(probe_realistic(s, i));
    if (c->ewv[v]) VD_CHECK(probe_worst(s, i));
  }
  return VD_OK;
}

/* Per output: the split factor of a contraction (nfac: its part count over its inputs', or 1
 * for a reblocked sum) and whether it reblocks; returns whether any output splits. */
static int split_factors(nodestep *s) {
  int any_split = 0;
  for (uint32_t j = 0; j < s->gn->n_out; j++) {
    int64_t pj = part_n(ptensor(s->c, s->ov[j]));
    s->nfac[j] = is_contraction(s->op) && pj > s->in_parts ? (double)pj / (double)s->in_parts : 0.0;
    /* a contraction on another shape than the single plan's, none of its sums split: PyTorch 2's
       CPU kernels (oneDNN/MKL) may choose another code path by the shape (1.13's did not).  The
       worst case takes its sums as reassociated; the realistic bound only where the measured
       rule of contraction_keeps_order says the order changes */
    s->reblock[j] = SAME_SHAPE;
    if (is_contraction(s->op) && s->nfac[j] == 0 && !whole_single(s->c, s->ov[j])) {
      s->nfac[j] = 1.0;
      s->reblock[j] = contraction_keeps_order(s->c, s->op, s->ov[j], s->iv, s->gn->n_in) ? SAME_ORDER : REORDERED;
    }
    any_split |= s->nfac[j] > 0;
    s->km[j] = 1;
  }
  return any_split;
}

/* Differences are quantised: two floats near y differ by a multiple of their spacing, so the
 * difference an elementwise operator's inputs carry into it is a multiple of q_e, their ulps
 * pushed through the operator (the smallest over the inputs that differ; kept in kv, which only
 * a contraction uses).  A standard deviation sigma below q means most elements do not differ at
 * all: the mean |d| that makes roundings flip is then sigma^2 / q (a difference of q with
 * probability sigma^2 / q^2), not the 0.8 sigma of a Gaussian. */
static vd_rc quantum_probes(nodestep *s) {
  vd_noise_ctx *c = s->c;
  workbuf *w = s->w;
  for (uint32_t i = 0; s->quant && i < s->gn->n_in; i++) {
    uint32_t v = s->iv[i];
    if (!c->erv[v]) continue;
    const double *x = c->val[v];
    double ui = unit_of(c, ptensor(c, v));
    int64_t n = vd_tensor_numel(ptensor(c, v));
    for (int64_t e = 0; e < n; e++) w->tmpd[e] = x[e] + ui * fabs(x[e]); /* the smallest spacing near x */
    VD_CHECK(probe(c, s->k, i, s->b, w, s->d));
    for (uint32_t j = 0; j < s->gn->n_out; j++) {
      int64_t m = vd_tensor_numel(ptensor(c, s->ov[j]));
      double *q = w->kv[j];
      for (int64_t e = 0; e < m; e++) {
        double dq = fabs(w->tmpo[j][e] - w->base[j][e]);
        if (dq > 0 && isfinite(dq) && (q[e] == 0 || dq < q[e])) q[e] = dq;
      }
    }
  }
  return VD_OK;
}

/* Which new roundings output j of the node gets, and their constant factors. */
typedef struct {
  uint32_t j;
  int split, kernel, amp;
  double gsplit, nm, gcomb, g2;
} out_rules;

static out_rules output_rules(const nodestep *s, uint32_t j) {
  out_rules r;
  int op = s->op;
  r.j = j;
  r.split = s->nfac[j] > 0 && s->reblock[j] != SAME_ORDER;
  /* a low-precision kernel on another shape takes another code path whatever its inputs: for a
     contraction too (bfloat16 batched matmuls of another batch shape were measured to differ by
     whole output roundings on bit-identical inputs) */
  r.kernel = (((kernel_dependent(op) || is_contraction(op)) && s->low) || s->reblock[j] == REORDERED) &&
             !whole_single(s->c, s->ov[j]);
  r.amp = !s->bit_in && !is_move(op) && s->u > 0;
  r.gsplit = s->nfac[j] > 0 ? vd_noise_gamma(s->km[j], s->ua) + vd_noise_gamma(s->km[j] * s->nfac[j], s->ua) : 0;
  r.nm = s->coll_sum ? (double)s->gn->n_part : (double)s->gn->n_in;
  r.gcomb = vd_noise_gamma(r.nm - 1.0, s->ua);
  r.g2 = 2.0 * vd_noise_gamma(s->km[j], s->ua);
  return r;
}

/* A split sum: both sides' roundings of the sum, in the accumulation precision. */
static void add_split(const nodestep *s, const out_rules *r, int64_t e, double ye, double *rv, double *wv) {
  uint32_t j = r->j;
  double u = s->u, ua = s->ua;
  const double *k1e = s->w->kv[j];
  double K = k1e[e] >= 1 ? k1e[e] : 1;
  double var = VD_NOISE_RV * ua * ua * K * (ye * ye / 3.0 + s->w->s2v[j][e] / 2.0) * (1.0 + s->nfac[j]);
  rv[e] += var;
  if (ua < u) { /* both sides round their (different) accumulators to the output precision */
    double a2 = VD_NOISE_ULP * u * ye * 0.8 * sqrt(var), cap = 2.0 * VD_NOISE_RV * u * u * ye * ye;
    rv[e] += a2 < cap ? a2 : cap;
    wv[e] += 2.0 * u * ye;
  }
}

/* The sum of |inputs| at output element e of m that a combination of parts rounds (an
 * all_reduce: its own participants' inputs only). */
static double combined_magnitude(const nodestep *s, int64_t e, int64_t m) {
  vd_noise_ctx *c = s->c;
  double sx = 0;
  for (uint32_t i = 0; i < s->gn->n_in; i++) {
    int64_t ni = vd_tensor_numel(ptensor(c, s->iv[i]));
    if (ni > 0) sx += fabs(c->val[s->iv[i]][ni == m ? e : e % ni]);
  }
  if (s->op == VD_OP_ALL_REDUCE) sx = 0;
  if (s->op == VD_OP_ALL_REDUCE)
    for (uint32_t i = 0; i < s->gn->n_in; i++)
      if (vd_tensor_numel(ptensor(c, s->iv[i])) == m) sx += fabs(c->val[s->iv[i]][e]);
  return sx;
}

/* Roundings of values that differ by d flip with probability |d| / ulp: the output's, and the
 * internal ones (K partial sums of a contraction, in the accumulation precision; a few in a
 * float kernel of the output precision).  prop: the propagated variance of element e. */
static void add_flips(const nodestep *s, const out_rules *r, int64_t e, double ye, double prop, double *rv,
                      double *wv) {
  int op = s->op;
  double u = s->u, ua = s->ua;
  const double *s1e = s->w->s1v[r->j], *k1e = s->w->kv[r->j];
  double K = is_contraction(op) ? (k1e[e] >= 1 ? k1e[e] : 1) : 1.0;
  double Kk = kernel_dependent(op) && !s->low && op != VD_OP_SQRT ? 4.0 : 1.0; /* IEEE sqrt: one correct rounding */
  double ui = is_contraction(op) ? ua : u;
  double sig = sqrt(prop), ead = 0.8 * sig;
  if (s->quant && k1e[e] > 0 && sig * sig / k1e[e] < ead) ead = sig * sig / k1e[e];
  double a2 = VD_NOISE_ULP * ye * ead * (u * Kk + (is_contraction(op) ? ui * K : 0.0));
  double cap = 2.0 * VD_NOISE_RV * ye * ye * (u * u * Kk + (is_contraction(op) ? ui * ui * K : 0.0));
  rv[e] += a2 < cap ? a2 : cap;
  wv[e] += is_contraction(op) ? r->g2 * s1e[e] + 2.0 * u * ye : 2.0 * u * ye * Kk;
}

/* The new rounding discrepancies of output j, per element, added to its propagated bounds. */
static void add_new_roundings(const nodestep *s, const out_rules *r) {
  uint32_t j = r->j, v = s->ov[j];
  const double *yv = s->c->val[v];
  int64_t m = vd_tensor_numel(ptensor(s->c, v));
  double *rv = s->w->rvar[j], *wv = s->w->wvec[j];
  const double *s1e = s->w->s1v[j];
  double u = s->u, ua = s->ua;
  for (int64_t e = 0; e < m; e++) {
    double ye = fabs(yv[e]), prop = rv[e];
    if (s->nfac[j] > 0) wv[e] += r->gsplit * s1e[e]; /* worst case: a split or reblocked sum, as if reassociated */
    if (r->split) add_split(s, r, e, ye, rv, wv);
    if (s->combine) { /* the sum of the parts, rounded in an order the single plan never uses */
      rv[e] += VD_NOISE_RV * ua * ua * (r->nm - 1.0) * ye * ye;
      wv[e] += r->gcomb * combined_magnitude(s, e, m);
    }
    if (r->kernel) { /* another shape: another code path of the kernel, at most an ulp apart */
      rv[e] += 2.0 * VD_NOISE_RV * u * u * ye * ye;
      wv[e] += 2.0 * u * ye;
    }
    if (r->amp) add_flips(s, r, e, ye, prop, rv, wv);
  }
}

/* Output j's bounds into the context: its norms, and its vectors (taken from w) when nonzero. */
static void store_bounds(nodestep *s, const out_rules *r) {
  vd_noise_ctx *c = s->c;
  uint32_t j = r->j, v = s->ov[j];
  int64_t m = vd_tensor_numel(ptensor(c, v));
  double *rv = s->w->rvar[j], *wv = s->w->wvec[j];
  double tot = 0, mx = 0;
  for (int64_t e = 0; e < m; e++) {
    tot += rv[e];
    if (!(wv[e] <= mx)) mx = wv[e];
  }
  c->ere[v] = sqrt(tot);
  c->ewc[v] = mx;
  if (tot > 0 || isnan(tot)) {
    for (int64_t e = 0; e < m; e++) rv[e] = sqrt(rv[e]);
    c->erv[v] = rv;
    s->w->rvar[j] = NULL;
  }
  if (mx > 0 || isnan(mx)) {
    c->ewv[v] = wv;
    s->w->wvec[j] = NULL;
  }
  c->bitid[v] = s->bit_in && !r->split && !s->combine && !r->kernel;
  c->known[v] = 1;
}

/* The new rounding discrepancies of the node (split sums, combined parts, kernels on another
 * shape, flips), then every output's bounds stored. */
static vd_rc new_roundings(nodestep *s) {
  int op = s->op;
  workbuf *w = s->w;
  uint32_t n_out = s->gn->n_out;
  s->combine = s->coll_sum || (is_sum_of_inputs(op) && s->in_parts > s->out_parts);
  s->nfac = w->tmpc;
  double *vs = w->tmpc + n_out, *s1 = w->tmpc + 2 * n_out;
  s->km = w->tmpc + 3 * n_out;
  s->reblock = w->tmpc + 4 * n_out; /* per output: SAME_SHAPE, SAME_ORDER or REORDERED */
  const vd_tensor_t *t0 = ptensor(s->c, s->ov[0]);
  s->u = unit_of(s->c, t0);
  s->ua = accum_unit(s->c, s->u);
  /* bfloat16 and float16 kernels (float inside, rounded back) take shape-dependent code paths */
  s->low = s->u > ldexp(1.0, -20);
  int any_split = split_factors(s);
  for (uint32_t j = 0; j < n_out; j++) vs[j] = s1[j] = 0;
  if (is_contraction(op) && (any_split || !s->bit_in))
    VD_CHECK(contraction_terms(s->c, s->k, op, s->b, s->km, s1, vs, s->ua, s->nfac, w->s1v, w->kv, w->s2v, s->d));
  s->quant = is_elementwise(op) && !is_contraction(op) && !s->bit_in && s->u > 0;
  VD_CHECK(quantum_probes(s));
  for (uint32_t j = 0; j < n_out; j++) {
    out_rules r = output_rules(s, j);
    add_new_roundings(s, &r);
    store_bounds(s, &r);
  }
  return VD_OK;
}

/* The bounds of node k's outputs: its inputs' errors propagated, plus the new roundings. */
static vd_rc node_bounds(vd_noise_ctx *c, uint32_t k, callbuf *b, workbuf *w, vd_diag *d) {
  nodestep s = {.c = c, .k = k, .b = b, .w = w, .d = d, .gn = &c->gpx.nodes[k]};
  s.pn = &c->pp->nodes[s.gn->pnode];
  s.op = vd_op_lookup(vd_node_op(c->pp, s.pn));
  s.iv = vd_gnode_inputs(&c->gpx, s.gn);
  s.ov = vd_gnode_outputs(&c->gpx, s.gn);
  VD_CHECK(work_fit(w, s.gn->n_out + s.gn->n_in + 1, d));
  if (!scan_operands(&s)) return VD_OK; /* no values or no bound: the outputs get none */
  s.coll_sum = (s.op == VD_OP_ALL_REDUCE || s.op == VD_OP_REDUCE_SCATTER) && s.gn->n_part > 1 &&
               strcmp(vd_node_attr_str(c->pp, s.pn, "reduce", "sum"), "sum") == 0;
  vd_rc rc = alloc_output_vectors(&s);
  if (rc == VD_OK) rc = buf_at_least(&w->tmpd, &w->tcap, s.maxn, d);
  if (rc == VD_OK) rc = probe_outputs(c, k, w, d);
  if (rc == VD_OK) rc = eval_origin(&s);
  if (rc == VD_OK) rc = propagate_inputs(&s);
  if (rc == VD_OK) rc = new_roundings(&s);
  for (uint32_t j = 0; j < s.gn->n_out; j++) {
    vd_free(w->wvec[j]);
    vd_free(w->rvar[j]);
    vd_free(w->blk[j]);
    w->wvec[j] = w->wtmp[j] = w->s1v[j] = w->base[j] = w->rvar[j] = w->kv[j] = w->s2v[j] = w->blk[j] = NULL;
  }
  return rc;
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
    const vd_tensor_t *t = ptensor(c, (uint32_t)v);
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
    int64_t n = vd_tensor_numel(ptensor(c, ov[j]));
    outs[j] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!outs[j]) rc = VD_OOM(d);
  }
  if (rc == VD_OK) {
    const double **ins = (const double **)b->in;
    for (uint32_t i = 0; i < gn->n_in; i++) ins[i] = c->val[iv[i]];
    rc = eval_node(c, k, b, ins, outs, d);
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
    if (c->val[ov[j]]) c->nrm[ov[j]] = norm2(c->val[ov[j]], vd_tensor_numel(ptensor(c, ov[j])));
  for (uint32_t i = 0; i < gn->n_in; i++)
    if (c->val[iv[i]] && g->values[iv[i]].is_initial)
      c->nrm[iv[i]] = norm2(c->val[iv[i]], vd_tensor_numel(ptensor(c, iv[i])));
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
    rc = node_bounds(c, k, &b, &w, d);
  }
  callbuf_free(&b);
  work_free(&w);
  return rc;
}
