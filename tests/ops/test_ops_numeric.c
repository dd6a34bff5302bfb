/*
 * tests/ops/test_ops_numeric.c - the operator registry and its numeric
 * evaluators.
 *
 *  - every backward evaluator against central finite differences of its
 *    forward evaluator (vector-Jacobian products on random inputs); a
 *    coverage check makes sure no forward op with a backward op escapes;
 *  - direct values of matmul, rms_norm, rope, causal_mask, softmax,
 *    embedding/pick with start offsets, chunk/concat, the collectives;
 *  - shape and arity errors name the node and the field;
 *  - the table is complete and matches docs/operators.md (run from the
 *    repository root).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../common/hash.h"
#include "../../common/mem.h"
#include "../../ops/ops.h"
#include "../support/files.h"

/* ---- helpers ------------------------------------------------------------- */

#define MAXT 8

typedef struct {
  vd_plan_t plan;
  uint32_t node;
} attr_node;

/* Parses "k=2 dim=-1 eps=1e-5 dims=[0,2] reduce=max" into node attributes:
 * [..] is a list of ints, a value with '.', 'e' or 'i'/'n' (inf/nan) is a
 * float, a value starting with a letter is a string, else an int. */
static void make_node(attr_node *an, const char *attrs) {
  assert_int_equal(vd_plan_init(&an->plan, VD_PLAN_SINGLE), VD_OK);
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.coll = -1;
  assert_int_equal(vd_plan_add_node(&an->plan, &n, "op", "test.node", NULL, 0, NULL, 0, NULL, 0, &an->node), VD_OK);
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", attrs ? attrs : "");
  for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
    char *eq = strchr(tok, '=');
    assert_non_null(eq);
    *eq = 0;
    const char *v = eq + 1;
    if (v[0] == '[') {
      int64_t ints[8];
      uint32_t k = 0;
      for (const char *s = v + 1; *s && *s != ']';) {
        char *end;
        ints[k++] = strtoll(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
      }
      assert_int_equal(vd_plan_attr_ints(&an->plan, an->node, tok, ints, k), VD_OK);
    } else if ((v[0] >= 'a' && v[0] <= 'z')) {
      assert_int_equal(vd_plan_attr_str(&an->plan, an->node, tok, v), VD_OK);
    } else if (strpbrk(v, ".e")) {
      assert_int_equal(vd_plan_attr_float(&an->plan, an->node, tok, atof(v)), VD_OK);
    } else {
      assert_int_equal(vd_plan_attr_int(&an->plan, an->node, tok, atoll(v)), VD_OK);
    }
  }
}

static vd_op_shape shp(int nd, ...) {
  vd_op_shape s = {.ndim = nd};
  va_list ap;
  va_start(ap, nd);
  for (int i = 0; i < nd; i++) s.d[i] = va_arg(ap, int64_t);
  va_end(ap);
  return s;
}
#define S0() shp(0)
#define S1(a) shp(1, (int64_t)(a))
#define S2(a, b) shp(2, (int64_t)(a), (int64_t)(b))
#define S3(a, b, c) shp(3, (int64_t)(a), (int64_t)(b), (int64_t)(c))
#define S4(a, b, c, d) shp(4, (int64_t)(a), (int64_t)(b), (int64_t)(c), (int64_t)(d))

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* splitmix64 -> [0,1) */
  uint64_t z = vd_hash_splitmix_fin(rng_state += 0x9e3779b97f4a7c15ull);
  return (double)(z >> 11) / 9007199254740992.0;
}

typedef struct {
  vd_op_id op;
  uint32_t n_in, n_out, n_part;
  vd_op_shape is[MAXT], os[MAXT];
  double *in[MAXT], *out[MAXT];
  vd_diag diag;
  vd_op_call c;
} call_t;

static void call_init(call_t *t, const char *op, const attr_node *an, uint32_t n_in, const vd_op_shape *is,
                      uint32_t n_out, const vd_op_shape *os) {
  memset(t, 0, sizeof(*t));
  t->op = vd_op_lookup(op);
  assert_true(t->op != VD_OP__UNKNOWN);
  t->n_in = n_in;
  t->n_out = n_out;
  for (uint32_t i = 0; i < n_in; i++) {
    t->is[i] = is[i];
    t->in[i] = calloc((size_t)vd_op_shape_numel(&is[i]) + 1, sizeof(double));
  }
  for (uint32_t i = 0; i < n_out; i++) {
    t->os[i] = os[i];
    t->out[i] = calloc((size_t)vd_op_shape_numel(&os[i]) + 1, sizeof(double));
  }
  t->c = (vd_op_call){.op = t->op, .plan = an ? &an->plan : NULL, .node = an ? &an->plan.nodes[an->node] : NULL,
                      .record = "node 7 'test.node'", .n_in = n_in, .n_out = n_out, .n_part = 1,
                      .in = (const double *const *)t->in, .in_shape = t->is, .out = t->out,
                      .out_shape = t->os, .diag = &t->diag};
}
static void call_free(call_t *t) {
  for (uint32_t i = 0; i < t->n_in; i++) free(t->in[i]);
  for (uint32_t i = 0; i < t->n_out; i++) free(t->out[i]);
}
static void set_in(call_t *t, uint32_t i, const double *v) {
  memcpy(t->in[i], v, sizeof(double) * (size_t)vd_op_shape_numel(&t->is[i]));
}
static vd_rc run(call_t *t) {
  vd_diag_clear(&t->diag);
  return vd_op_eval(&t->c);
}

/* ---- finite differences -------------------------------------------------- */

typedef struct {
  const char *fwd, *bwd, *attrs;
  uint32_t n_in;
  vd_op_shape in[6];
  uint32_t n_out;
  vd_op_shape out[5];
  uint32_t int_mask;  /* integer inputs (ids, labels): values in [0, int_bound) */
  int64_t int_bound;
  uint32_t pos_mask;  /* inputs drawn from [0.5, 1.5] */
  const char *bargs;  /* backward inputs: iN forward input, oN forward output, gN upstream grad */
  const char *bouts;  /* forward input index of each backward output, e.g. "0 1" */
} fd_spec;

static fd_spec *specs(size_t *n) {
  static fd_spec s[96];
  size_t k = 0;
#define SPEC(...) s[k++] = (fd_spec){__VA_ARGS__}
  SPEC("identity", "identity", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("contiguous", "contiguous", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("cast", "cast", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("view", "view", "", 1, {S2(2, 3)}, 1, {S3(3, 2, 1)}, 0, 0, 0, "g0", "0");
  SPEC("reshape", "reshape", "", 1, {S3(2, 3, 2)}, 1, {S2(3, 4)}, 0, 0, 0, "g0", "0");
  SPEC("transpose", "transpose", "dim0=0 dim1=-1", 1, {S3(2, 3, 4)}, 1, {S3(4, 3, 2)}, 0, 0, 0, "g0", "0");
  SPEC("multiref", "multiref_backward", "", 1, {S2(2, 3)}, 3, {S2(2, 3), S2(2, 3), S2(2, 3)}, 0, 0, 0,
       "g0 g1 g2", "0");
  SPEC("chunk", "chunk_backward", "dim=1 chunks=3 index=1", 1, {S2(2, 6)}, 1, {S2(2, 2)}, 0, 0, 0, "g0", "0");
  SPEC("expand", "sum_to", "", 1, {S2(3, 1)}, 1, {S3(2, 3, 4)}, 0, 0, 0, "g0", "0");
  SPEC("sum_to", "expand", "", 1, {S3(2, 3, 4)}, 1, {S2(3, 1)}, 0, 0, 0, "g0", "0");
  SPEC("add", "add_backward", "", 2, {S2(2, 3), S1(3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0 1");
  SPEC("add", "add_backward", "scalar=1.5", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("sub", "sub_backward", "", 2, {S2(2, 1), S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0 1");
  SPEC("sub", "sub_backward", "scalar=0.5", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("mul", "mul_backward", "", 2, {S3(2, 3, 4), S2(3, 1)}, 1, {S3(2, 3, 4)}, 0, 0, 0, "i0 i1 g0", "0 1");
  SPEC("mul", "mul_backward", "scalar=-2.5", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("div", "div_backward", "", 2, {S2(2, 3), S1(3)}, 1, {S2(2, 3)}, 0, 0, 2, "i0 i1 g0", "0 1");
  SPEC("div", "div_backward", "scalar=4", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("neg", "neg_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("pow", "pow_backward", "exponent=3", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  SPEC("pow", "pow_backward", "exponent=0.5", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 1, "i0 g0", "0");
  SPEC("sqrt", "sqrt_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 1, "i0 g0", "0");
  SPEC("rsqrt", "rsqrt_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 1, "i0 g0", "0");
  SPEC("exp", "exp_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  SPEC("log", "log_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 1, "i0 g0", "0");
  SPEC("sigmoid", "sigmoid_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  SPEC("tanh", "tanh_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  SPEC("relu", "relu_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "o0 g0", "0");
  SPEC("silu", "silu_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  SPEC("gelu", "gelu_backward", "", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 g0", "0");
  /* dropout: finite differences see the identity branch only.  The active
   * branch's mask is a function of x by abstraction (the surrogate would be
   * differentiated too), while the backward holds it fixed as torch does:
   * test_dropout_values checks gx = g * y / x there. */
  SPEC("dropout", "dropout_backward", "p=0.2 training=False", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0,
       "i0 o0 g0", "0");
  SPEC("dropout", "dropout_backward", "p=0.0", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "i0 o0 g0", "0");
  SPEC("sum", "sum_backward", "dims=[1]", 1, {S3(2, 3, 4)}, 1, {S2(2, 4)}, 0, 0, 0, "g0", "0");
  SPEC("sum", "sum_backward", "dims=[0,-1] keepdim=1", 1, {S3(2, 3, 4)}, 1, {S3(1, 3, 1)}, 0, 0, 0, "g0", "0");
  SPEC("sum", "sum_backward", "", 1, {S2(2, 3)}, 1, {S0()}, 0, 0, 0, "g0", "0");
  SPEC("mean", "mean_backward", "dims=[-1]", 1, {S3(2, 3, 4)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("mean", "mean_backward", "dims=[0] keepdim=1", 1, {S2(3, 2)}, 1, {S2(1, 2)}, 0, 0, 0, "g0", "0");
  SPEC("scale", "scale_backward", "factor=0.25", 1, {S2(2, 3)}, 1, {S2(2, 3)}, 0, 0, 0, "g0", "0");
  SPEC("matmul", "matmul_backward", "", 2, {S3(2, 3, 4), S2(4, 5)}, 1, {S3(2, 3, 5)}, 0, 0, 0, "i0 i1 g0", "0 1");
  SPEC("matmul", "matmul_backward", "", 2, {S4(2, 1, 2, 3), S3(3, 3, 2)}, 1, {S4(2, 3, 2, 2)}, 0, 0, 0,
       "i0 i1 g0", "0 1");
  SPEC("linear", "linear_backward", "", 2, {S3(2, 3, 4), S2(5, 4)}, 1, {S3(2, 3, 5)}, 0, 0, 0, "i0 i1 g0", "0 1");
  SPEC("linear", "linear_backward", "", 3, {S2(3, 4), S2(2, 4), S1(2)}, 1, {S2(3, 2)}, 0, 0, 0, "i0 i1 g0",
       "0 1 2");
  SPEC("embedding", "embedding_backward", "start=2", 2, {S2(2, 4), S2(3, 2)}, 1, {S3(2, 4, 2)}, 1, 6, 0, "i0 g0",
       "1");
  SPEC("rms_norm", "rms_norm_backward", "eps=1e-5", 2, {S3(2, 2, 4), S1(4)}, 1, {S3(2, 2, 4)}, 0, 0, 0,
       "i0 i1 g0", "0 1");
  SPEC("layer_norm", "layer_norm_backward", "eps=1e-5", 3, {S2(3, 4), S1(4), S1(4)}, 1, {S2(3, 4)}, 0, 0, 0,
       "i0 i1 g0", "0 1 2");
  SPEC("rope", "rope_backward", "theta=100.0 pos_offset=3", 1, {S4(2, 3, 2, 4)}, 1, {S4(2, 3, 2, 4)}, 0, 0, 0,
       "g0", "0");
  SPEC("rope", "rope_backward", "theta=10000.0 seq_dim=0", 1, {S3(3, 2, 6)}, 1, {S3(3, 2, 6)}, 0, 0, 0, "g0", "0");
  SPEC("causal_mask", "causal_mask_backward", "q_offset=1 k_offset=2", 1, {S3(2, 3, 4)}, 1, {S3(2, 3, 4)}, 0, 0,
       0, "g0", "0");
  SPEC("apply_mask", "apply_mask_backward", "", 2, {S4(2, 2, 3, 3), S4(1, 1, 3, 3)}, 1, {S4(2, 2, 3, 3)}, 0, 0, 0,
       "i0 i1 o0 g0", "0");
  SPEC("apply_rotary_emb", "apply_rotary_emb_backward", "", 3, {S4(2, 3, 2, 4), S4(2, 3, 1, 4), S2(3, 2)}, 2,
       {S4(2, 3, 2, 4), S4(2, 3, 1, 4)}, 0, 0, 0, "i0 i1 i2 o0 o1 g0 g1", "0 1");
  SPEC("softmax", "softmax_backward", "dim=1", 1, {S3(2, 3, 4)}, 1, {S3(2, 3, 4)}, 0, 0, 0, "o0 g0", "0");
  SPEC("pick", "pick_backward", "start=2", 2, {S2(4, 3), S1(4)}, 1, {S1(4)}, 2, 7, 0, "i1 g0", "0");
  SPEC("topk_gate", "topk_gate_backward", "k=2", 1, {S2(3, 5)}, 1, {S2(3, 5)}, 0, 0, 0, "i0 g0", "0");
  SPEC("grouped_mlp", "grouped_mlp_backward", "", 5, {S2(3, 4), S2(3, 2), S3(2, 5, 4), S3(2, 5, 4), S3(2, 4, 5)},
       1, {S2(3, 4)}, 0, 0, 0, "i0 i1 i2 i3 i4 g0", "0 1 2 3 4");
  SPEC("grouped_mlp", "grouped_mlp_backward", "expert_start=1",
       5, {S2(2, 3), S2(2, 4), S3(2, 2, 3), S3(2, 2, 3), S3(2, 3, 2)}, 1, {S2(2, 3)}, 0, 0, 0,
       "i0 i1 i2 i3 i4 g0", "0 1 2 3 4");
  /* nnScaler MoE (ops/ops_moe.c): the routing is piecewise constant, so
   * the finite differences see the weights' smooth part only. */
  SPEC("gate_fw", "gate_fw_backward", "score_func=sigmoid n_groups=4 topk_groups=2 topk=3 route_scale=2.5", 2,
       {S2(3, 4), S2(8, 4)}, 2, {S2(3, 3), S2(3, 3)}, 0, 0, 0, "i0 i1 o0 o1 g0", "0 1");
  SPEC("gate_fw", "gate_fw_backward", "score_func=softmax topk=2 route_scale=1.5", 2, {S2(3, 4), S2(6, 4)}, 2,
       {S2(3, 2), S2(3, 2)}, 0, 0, 0, "i0 i1 o0 o1 g0", "0 1");
  SPEC("gate_fw", "gate_fw_backward", "score_func=sigmoid n_groups=2 topk_groups=1 topk=2", 3,
       {S2(3, 4), S2(8, 4), S1(8)}, 2, {S2(3, 2), S2(3, 2)}, 0, 0, 0, "i0 i1 i2 o0 o1 g0", "0 1 2");
  SPEC("nnscaler_moe_gmm", "nnscaler_moe_gmm_backward", "n_routed_experts=6 local_expert_start=2 local_expert_end=5",
       6, {S2(4, 3), S2(4, 2), S2(4, 2), S3(3, 2, 3), S3(3, 2, 3), S3(3, 3, 2)}, 1, {S2(4, 3)}, 0x2, 6, 0,
       "i0 i1 i2 i3 i4 i5 o0 g0", "0 2 3 4 5");
#undef SPEC
  *n = k;
  return s;
}

static void fill_inputs(call_t *t, const fd_spec *sp) {
  for (uint32_t i = 0; i < t->n_in; i++) {
    int64_t n = vd_op_shape_numel(&t->is[i]);
    for (int64_t e = 0; e < n; e++) {
      if (sp->int_mask & (1u << i))
        t->in[i][e] = floor(urand() * (double)sp->int_bound);
      else if (sp->pos_mask & (1u << i))
        t->in[i][e] = 0.5 + urand();
      else
        t->in[i][e] = 2.0 * urand() - 1.0;
    }
  }
}

/* Forward outputs of fwd's current inputs, copied into y. */
static void fwd_outputs(call_t *fwd, double **y) {
  assert_int_equal(run(fwd), VD_OK);
  for (uint32_t o = 0; o < fwd->n_out; o++)
    memcpy(y[o], fwd->out[o], sizeof(double) * (size_t)vd_op_shape_numel(&fwd->os[o]));
}

/* Runs c; a failure fails the test with the diag (op's dir: forward or backward). */
static void run_ok(call_t *c, const char *op, const char *dir) {
  if (run(c) != VD_OK) {
    char line[600];
    vd_diag_format(&c->diag, line, sizeof(line));
    fail_msg("%s %s: %s", op, dir, line);
  }
}

/* The backward's inputs as sp->bargs names them (iN: forward input N, oN:
 * forward output N, gN: upstream gradient N, from g), into bis and bsrc;
 * returns their count. */
static uint32_t backward_inputs(const fd_spec *sp, const call_t *fwd, double **g, vd_op_shape *bis,
                                const double **bsrc) {
  uint32_t nb = 0;
  char buf[64];
  snprintf(buf, sizeof(buf), "%s", sp->bargs);
  for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
    int k = atoi(tok + 1);
    if (tok[0] == 'i') {
      bis[nb] = sp->in[k];
      bsrc[nb++] = fwd->in[k];
    } else if (tok[0] == 'o') {
      bis[nb] = sp->out[k];
      bsrc[nb++] = fwd->out[k];
    } else {
      bis[nb] = sp->out[k];
      bsrc[nb++] = g[k];
    }
  }
  return nb;
}

/* The backward's outputs: the forward input of each (sp->bouts) into outs,
 * its shape into bos; returns their count. */
static uint32_t backward_outputs(const fd_spec *sp, uint32_t *outs, vd_op_shape *bos) {
  uint32_t nbo = 0;
  char buf[64];
  snprintf(buf, sizeof(buf), "%s", sp->bouts);
  for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
    outs[nbo] = (uint32_t)atoi(tok);
    bos[nbo] = sp->in[outs[nbo]];
    nbo++;
  }
  return nbo;
}

/* Every element of every backward output j (the gradient of forward input
 * outs[j]) against the central finite difference of <g, forward outputs>. */
static void compare_finite_differences(const fd_spec *sp, call_t *fwd, const call_t *bwd, double **g,
                                       const uint32_t *outs, uint32_t nbo) {
  const double eps = 1e-6;
  double *yp[MAXT] = {0}, *ym[MAXT] = {0};
  for (uint32_t o = 0; o < sp->n_out; o++) {
    yp[o] = calloc((size_t)vd_op_shape_numel(&sp->out[o]) + 1, sizeof(double));
    ym[o] = calloc((size_t)vd_op_shape_numel(&sp->out[o]) + 1, sizeof(double));
  }
  for (uint32_t j = 0; j < nbo; j++) {
    uint32_t i = outs[j];
    assert_false(sp->int_mask & (1u << i));
    int64_t n = vd_op_shape_numel(&sp->in[i]);
    for (int64_t e = 0; e < n; e++) {
      double x0 = fwd->in[i][e];
      fwd->in[i][e] = x0 + eps;
      fwd_outputs(fwd, yp);
      fwd->in[i][e] = x0 - eps;
      fwd_outputs(fwd, ym);
      fwd->in[i][e] = x0;
      /* <g, y+ - y-> elementwise: constant outputs (mask fill) cancel exactly. */
      double fd = 0, an_ = bwd->out[j][e];
      for (uint32_t o = 0; o < sp->n_out; o++)
        for (int64_t k = 0; k < vd_op_shape_numel(&sp->out[o]); k++) fd += g[o][k] * (yp[o][k] - ym[o][k]);
      fd /= 2 * eps;
      if (!(fabs(fd - an_) <= 1e-6 * fmax(1.0, fabs(an_))))
        fail_msg("%s/%s [%s]: d input %u elem %lld: finite difference %.12g, backward %.12g", sp->fwd, sp->bwd,
                 sp->attrs, i, (long long)e, fd, an_);
    }
  }
  for (uint32_t o = 0; o < sp->n_out; o++) {
    free(yp[o]);
    free(ym[o]);
  }
}

static void check_spec(const fd_spec *sp) {
  attr_node an;
  make_node(&an, sp->attrs);
  call_t fwd;
  call_init(&fwd, sp->fwd, &an, sp->n_in, sp->in, sp->n_out, sp->out);
  fill_inputs(&fwd, sp);
  run_ok(&fwd, sp->fwd, "forward");
  double *g[MAXT] = {0};
  for (uint32_t o = 0; o < sp->n_out; o++) {
    int64_t n = vd_op_shape_numel(&sp->out[o]);
    g[o] = calloc((size_t)n + 1, sizeof(double));
    for (int64_t e = 0; e < n; e++) g[o][e] = 2.0 * urand() - 1.0;
  }
  vd_op_shape bis[MAXT], bos[MAXT];
  const double *bsrc[MAXT];
  uint32_t outs[MAXT];
  uint32_t nb = backward_inputs(sp, &fwd, g, bis, bsrc), nbo = backward_outputs(sp, outs, bos);
  call_t bwd;
  call_init(&bwd, sp->bwd, &an, nb, bis, nbo, bos);
  for (uint32_t i = 0; i < nb; i++) set_in(&bwd, i, bsrc[i]);
  run_ok(&bwd, sp->bwd, "backward");
  compare_finite_differences(sp, &fwd, &bwd, g, outs, nbo);
  for (uint32_t o = 0; o < sp->n_out; o++) free(g[o]);
  call_free(&fwd);
  call_free(&bwd);
  vd_plan_free(&an.plan);
}

static void test_backward_matches_finite_differences(void **state) {
  (void)state;
  size_t n;
  fd_spec *s = specs(&n);
  for (size_t i = 0; i < n; i++) {
    /* The spec's backward must be the registry's backward of the forward op. */
    vd_op_id f = vd_op_lookup(s[i].fwd), b = vd_op_lookup(s[i].bwd);
    assert_true(f != VD_OP__UNKNOWN && b != VD_OP__UNKNOWN);
    assert_int_equal(vd_op_backward(f), b);
    for (int rep = 0; rep < 3; rep++) check_spec(&s[i]);
  }
}

/* Every forward op with a backward op is covered by a spec (concat by its
 * own test below). */
static void test_every_backward_is_checked(void **state) {
  (void)state;
  size_t n;
  fd_spec *s = specs(&n);
  for (int op = 0; op < VD_OP__COUNT; op++) {
    if (vd_op_backward((vd_op_id)op) == VD_OP__NONE) continue;
    if (strcmp(vd_op_name((vd_op_id)op), "concat") == 0) continue;
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= strcmp(s[i].fwd, vd_op_name((vd_op_id)op)) == 0;
    if (!found) fail_msg("no finite-difference check for %s", vd_op_name((vd_op_id)op));
  }
}

/* concat's backward is chunk, once per input (equal pieces). */
static void test_concat_backward_is_chunk(void **state) {
  (void)state;
  attr_node an, ac[3];
  make_node(&an, "dim=1");
  vd_op_shape is[3] = {S2(2, 2), S2(2, 2), S2(2, 2)}, os[1] = {S2(2, 6)};
  call_t cat;
  call_init(&cat, "concat", &an, 3, is, 1, os);
  for (int i = 0; i < 3; i++)
    for (int e = 0; e < 4; e++) cat.in[i][e] = 10 * i + e;
  assert_int_equal(run(&cat), VD_OK);
  const double want[12] = {0, 1, 10, 11, 20, 21, 2, 3, 12, 13, 22, 23};
  for (int e = 0; e < 12; e++) assert_true(cat.out[0][e] == want[e]);
  assert_int_equal(vd_op_backward(vd_op_lookup("concat")), vd_op_lookup("chunk"));
  /* Round trip: chunk i of the concatenation is input i. */
  for (int i = 0; i < 3; i++) {
    char a[64];
    snprintf(a, sizeof(a), "dim=1 chunks=3 index=%d", i);
    make_node(&ac[i], a);
    call_t ch;
    call_init(&ch, "chunk", &ac[i], 1, os, 1, &is[i]);
    set_in(&ch, 0, cat.out[0]);
    assert_int_equal(run(&ch), VD_OK);
    for (int e = 0; e < 4; e++) assert_true(ch.out[0][e] == cat.in[i][e]);
    call_free(&ch);
    vd_plan_free(&ac[i].plan);
  }
  call_free(&cat);
  vd_plan_free(&an.plan);
}

/* ---- direct values ------------------------------------------------------- */

static void test_matmul_values(void **state) {
  (void)state;
  vd_op_shape is[2] = {S2(2, 3), S2(3, 2)}, os[1] = {S2(2, 2)};
  call_t t;
  call_init(&t, "matmul", NULL, 2, is, 1, os);
  set_in(&t, 0, (double[]){1, 2, 3, 4, 5, 6});
  set_in(&t, 1, (double[]){7, 8, 9, 10, 11, 12});
  assert_int_equal(run(&t), VD_OK);
  assert_true(t.out[0][0] == 58 && t.out[0][1] == 64 && t.out[0][2] == 139 && t.out[0][3] == 154);
  call_free(&t);
}

static void test_rms_norm_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "eps=0.0");
  vd_op_shape is[2] = {S2(1, 2), S1(2)}, os[1] = {S2(1, 2)};
  call_t t;
  call_init(&t, "rms_norm", &an, 2, is, 1, os);
  set_in(&t, 0, (double[]){3, 4});
  set_in(&t, 1, (double[]){1, 2});
  assert_int_equal(run(&t), VD_OK);
  double r = 1.0 / sqrt(12.5);
  assert_true(fabs(t.out[0][0] - 3 * r) < 1e-15 && fabs(t.out[0][1] - 8 * r) < 1e-15);
  call_free(&t);
  vd_plan_free(&an.plan);
}

static void test_rope_rotation(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "theta=10000.0 pos_offset=1");
  /* [b=1, s=2, heads=1, d=4]: pair (0,2) turns by pos, pair (1,3) by pos/100. */
  vd_op_shape s[1] = {S4(1, 2, 1, 4)};
  call_t t;
  call_init(&t, "rope", &an, 1, s, 1, s);
  set_in(&t, 0, (double[]){1, 0, 0, 1, 0.5, -2, 1.5, 3});
  assert_int_equal(run(&t), VD_OK);
  /* position 1 (offset 1 + s 0): (1, 0) turns by 1 rad. */
  assert_true(fabs(t.out[0][0] - cos(1.0)) < 1e-15 && fabs(t.out[0][2] - sin(1.0)) < 1e-15);
  /* pair (1, 3) = (0, 1) turns by 1 * 10000^(-2/4) = 0.01 rad. */
  assert_true(fabs(t.out[0][1] + sin(0.01)) < 1e-15 && fabs(t.out[0][3] - cos(0.01)) < 1e-15);
  /* A rotation keeps each pair's norm. */
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 2; i++) {
      double a = t.in[0][r * 4 + i], b = t.in[0][r * 4 + i + 2], c = t.out[0][r * 4 + i], d = t.out[0][r * 4 + i + 2];
      assert_true(fabs(a * a + b * b - c * c - d * d) < 1e-12);
    }
  /* rope_backward is the inverse rotation. */
  call_t b;
  call_init(&b, "rope_backward", &an, 1, s, 1, s);
  set_in(&b, 0, t.out[0]);
  assert_int_equal(run(&b), VD_OK);
  for (int e = 0; e < 8; e++) assert_true(fabs(b.out[0][e] - t.in[0][e]) < 1e-14);
  call_free(&t);
  call_free(&b);
  vd_plan_free(&an.plan);
}

static void test_causal_mask_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "q_offset=2 k_offset=1 fill=-7.0");
  vd_op_shape s[1] = {S2(2, 3)};
  call_t t;
  call_init(&t, "causal_mask", &an, 1, s, 1, s);
  set_in(&t, 0, (double[]){1, 2, 3, 4, 5, 6});
  assert_int_equal(run(&t), VD_OK);
  /* row i=0 (q 2): keys 1,2 allowed, 3 masked; row 1 (q 3): all allowed. */
  const double want[6] = {1, 2, -7, 4, 5, 6};
  for (int e = 0; e < 6; e++) assert_true(t.out[0][e] == want[e]);
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* create_mask: 0 on and below the diagonal, fill above, whatever the tokens. */
static void test_create_mask_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "fill=-9.0");
  vd_op_shape is[2] = {S2(2, 3), S3(2, 3, 4)}, os[1] = {S4(1, 1, 3, 3)};
  call_t t;
  call_init(&t, "create_mask", &an, 2, is, 1, os);
  set_in(&t, 0, (double[]){5, 1, 2, 7, 3, 0});
  assert_int_equal(run(&t), VD_OK);
  const double want[9] = {0, -9, -9, 0, 0, -9, 0, 0, 0};
  for (int e = 0; e < 9; e++) assert_true(t.out[0][e] == want[e]);
  call_free(&t);
  /* the mask must be [1,1,s,s] of the tokens' s */
  vd_op_shape bad_os[1] = {S4(1, 1, 2, 3)};
  call_init(&t, "create_mask", &an, 2, is, 1, bad_os);
  assert_int_equal(run(&t), VD_EINPUT);
  assert_string_equal(t.diag.field, "outputs[0]");
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* apply_rotary_emb rotates interleaved pairs (2j, 2j+1) of position s by the
 * angle freqs[s, j]; the backward is the inverse rotation. */
static void test_apply_rotary_emb_values(void **state) {
  (void)state;
  vd_op_shape is[3] = {S4(1, 2, 1, 4), S4(1, 2, 1, 4), S2(2, 2)}, os[2] = {S4(1, 2, 1, 4), S4(1, 2, 1, 4)};
  call_t t;
  call_init(&t, "apply_rotary_emb", NULL, 3, is, 2, os);
  const double x[8] = {1, 0, 1, 0, 1, 0, 0, 1};
  set_in(&t, 0, x);
  set_in(&t, 1, x);
  set_in(&t, 2, (double[]){0, M_PI / 2, M_PI, M_PI / 2});
  assert_int_equal(run(&t), VD_OK);
  /* s=0: pair 0 by 0 -> (1,0); pair 1 by pi/2 -> (0,1); s=1: pair 0 by pi -> (-1,0); (0,1) by pi/2 -> (-1,0) */
  const double want[8] = {1, 0, 0, 1, -1, 0, -1, 0};
  for (int e = 0; e < 8; e++) assert_true(fabs(t.out[0][e] - want[e]) < 1e-15 && t.out[1][e] == t.out[0][e]);
  vd_op_shape bs[7] = {is[0], is[1], is[2], os[0], os[1], os[0], os[1]};
  call_t b;
  call_init(&b, "apply_rotary_emb_backward", NULL, 7, bs, 2, os);
  set_in(&b, 2, t.in[2]);
  set_in(&b, 5, t.out[0]);
  set_in(&b, 6, t.out[1]);
  assert_int_equal(run(&b), VD_OK);
  for (int e = 0; e < 8; e++) assert_true(fabs(b.out[0][e] - x[e]) < 1e-15 && fabs(b.out[1][e] - x[e]) < 1e-15);
  call_free(&b);
  /* freqs rows must match s */
  vd_op_shape bad_is[3] = {is[0], is[1], S2(3, 2)};
  call_init(&b, "apply_rotary_emb", NULL, 3, bad_is, 2, os);
  assert_int_equal(run(&b), VD_EINPUT);
  assert_string_equal(b.diag.field, "inputs[0]");
  call_free(&b);
  call_free(&t);
}

static void test_softmax_rows_sum_to_one(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "dim=-1");
  vd_op_shape s[1] = {S2(3, 5)};
  call_t t;
  call_init(&t, "softmax", &an, 1, s, 1, s);
  for (int e = 0; e < 15; e++) t.in[0][e] = 40.0 * urand() - 20.0;
  assert_int_equal(run(&t), VD_OK);
  for (int r = 0; r < 3; r++) {
    double sum = 0;
    for (int j = 0; j < 5; j++) {
      assert_true(t.out[0][r * 5 + j] > 0);
      sum += t.out[0][r * 5 + j];
    }
    assert_true(fabs(sum - 1.0) < 1e-14);
  }
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* dropout: y = x m(x) with the surrogate mask, gx = g m(x) with the same
 * mask (so gx == y / x * g), identity when not training or p == 0. */
static void test_dropout_values(void **state) {
  (void)state;
  const char *modes[3] = {"p=0.2 training=self.training", "p=0.2 training=False", "p=0.0 training=1"};
  for (int m = 0; m < 3; m++) {
    attr_node an;
    make_node(&an, modes[m]);
    vd_op_shape s[3] = {S1(4), S1(4), S1(4)};
    call_t f, b;
    call_init(&f, "dropout", &an, 1, s, 1, s);
    call_init(&b, "dropout_backward", &an, 3, s, 1, s);
    double x[4] = {0.5, -1.25, 2.0, 0.75};
    set_in(&f, 0, x);
    assert_int_equal(run(&f), VD_OK);
    set_in(&b, 0, x);
    set_in(&b, 1, f.out[0]);
    double g[4];
    for (int i = 0; i < 4; i++) g[i] = 2.0 * urand() - 1.0;
    set_in(&b, 2, g);
    assert_int_equal(run(&b), VD_OK);
    for (int i = 0; i < 4; i++) {
      double want = m == 0 ? x[i] * (1.0 + 0.5 * sin(3.0 * x[i])) / 0.8 : x[i];
      assert_true(fabs(f.out[0][i] - want) < 1e-15);
      /* the backward applies the forward's mask to g: gx = g * (y / x) */
      assert_true(fabs(b.out[0][i] * x[i] - g[i] * f.out[0][i]) < 1e-14);
    }
    call_free(&f);
    call_free(&b);
    vd_plan_free(&an.plan);
  }
}

/* gate_fw: group-limited selection (the best group scores keep groups 0
 * and 1, so expert 4 (2.8) loses to expert 1 (-1), which ties expert 3 and
 * wins by the lower index), weights = normalised sigmoid scores * scale;
 * a bias steers the selection but not the weight.  nnscaler_moe_gmm sums
 * the routed local experts only. */
static void test_moe_gate_and_gmm_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "score_func=sigmoid n_groups=4 topk_groups=2 topk=3 route_scale=2.5");
  const double lg[8] = {3.0, -1.0, 2.9, -1.0, 2.8, 2.75, 0.0, 0.0};
  vd_op_shape gi[3] = {S2(1, 1), S2(8, 1), S1(8)}, go[2] = {S2(1, 3), S2(1, 3)};
  call_t t;
  call_init(&t, "gate_fw", &an, 2, gi, 2, go);
  set_in(&t, 0, (double[]){1.0});
  set_in(&t, 1, lg);
  assert_int_equal(run(&t), VD_OK);
  const int64_t want[3] = {0, 2, 1};
  double sg[3], S = 0;
  for (int j = 0; j < 3; j++) S += (sg[j] = 1.0 / (1.0 + exp(-lg[want[j]])));
  for (int j = 0; j < 3; j++) {
    assert_true(t.out[1][j] == (double)want[j]);
    assert_true(fabs(t.out[0][j] - 2.5 * sg[j] / S) < 1e-15);
  }
  call_free(&t);
  vd_plan_free(&an.plan);

  make_node(&an, "score_func=sigmoid topk=1 route_scale=2.0");
  double bias[8] = {0};
  bias[6] = 10.0;
  call_init(&t, "gate_fw", &an, 3, gi, 2, (vd_op_shape[]){S2(1, 1), S2(1, 1)});
  set_in(&t, 0, (double[]){1.0});
  set_in(&t, 1, lg);
  set_in(&t, 2, bias);
  assert_int_equal(run(&t), VD_OK);
  assert_true(t.out[1][0] == 6.0 && fabs(t.out[0][0] - 2.0) < 1e-15);
  call_free(&t);
  vd_plan_free(&an.plan);

  /* gmm: 1 token, h = f = 1, local experts 2..3 of 4 with w1 = w3 = 1, w2 = 2 and 3:
   * expert e gives w2_e * silu(x) * x; slots route to experts 3 (0.25) and 0 (0.75). */
  make_node(&an, "n_routed_experts=4 local_expert_start=2 local_expert_end=4");
  vd_op_shape mi[6] = {S2(1, 1), S2(1, 2), S2(1, 2), S3(2, 1, 1), S3(2, 1, 1), S3(2, 1, 1)}, mo[1] = {S2(1, 1)};
  call_init(&t, "nnscaler_moe_gmm", &an, 6, mi, 1, mo);
  set_in(&t, 0, (double[]){0.5});
  set_in(&t, 1, (double[]){3.0, 0.0});
  set_in(&t, 2, (double[]){0.25, 0.75});
  set_in(&t, 3, (double[]){1.0, 1.0});
  set_in(&t, 4, (double[]){1.0, 1.0});
  set_in(&t, 5, (double[]){2.0, 3.0});
  assert_int_equal(run(&t), VD_OK);
  double silu = 0.5 / (1.0 + exp(-0.5));
  assert_true(fabs(t.out[0][0] - 0.25 * 3.0 * silu * 0.5) < 1e-15);
  call_free(&t);
  vd_plan_free(&an.plan);
}

static void test_embedding_and_pick_offsets(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "start=3");
  vd_op_shape is[2] = {S1(4), S2(2, 2)}, os[1] = {S2(4, 2)};
  call_t t;
  call_init(&t, "embedding", &an, 2, is, 1, os);
  set_in(&t, 0, (double[]){2, 3, 4, 5});
  set_in(&t, 1, (double[]){10, 11, 20, 21});
  assert_int_equal(run(&t), VD_OK);
  const double want[8] = {0, 0, 10, 11, 20, 21, 0, 0};
  for (int e = 0; e < 8; e++) assert_true(t.out[0][e] == want[e]);
  call_free(&t);

  vd_op_shape ps[2] = {S2(3, 2), S1(3)}, po[1] = {S1(3)};
  call_t p;
  call_init(&p, "pick", &an, 2, ps, 1, po);
  set_in(&p, 0, (double[]){1, 2, 3, 4, 5, 6});
  set_in(&p, 1, (double[]){3, 4, 9});
  assert_int_equal(run(&p), VD_OK);
  assert_true(p.out[0][0] == 1 && p.out[0][1] == 4 && p.out[0][2] == 0);
  call_free(&p);
  vd_plan_free(&an.plan);
}

static void test_topk_gate_ties(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "k=2");
  vd_op_shape s[1] = {S2(1, 4)};
  call_t t;
  call_init(&t, "topk_gate", &an, 1, s, 1, s);
  set_in(&t, 0, (double[]){1, 3, 1, 1});
  assert_int_equal(run(&t), VD_OK);
  /* experts 1 and (tie) 0 are chosen. */
  double e = exp(-2.0);
  assert_true(fabs(t.out[0][1] - 1 / (1 + e)) < 1e-15 && fabs(t.out[0][0] - e / (1 + e)) < 1e-15);
  assert_true(t.out[0][2] == 0 && t.out[0][3] == 0);
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* max over a dim: the largest element of each row, negative values included
 * (the accumulator does not start at 0), keepdim keeps a size-1 dim. */
static void test_max_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "dims=[1] keepdim=1");
  vd_op_shape x[1] = {S2(2, 3)}, y[1] = {S2(2, 1)};
  call_t t;
  call_init(&t, "max", &an, 1, x, 1, y);
  set_in(&t, 0, (double[]){-3, -1, -2, 4, 7, 5});
  assert_int_equal(run(&t), VD_OK);
  assert_true(t.out[0][0] == -1 && t.out[0][1] == 7);
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* Collectives take every participant in group order. */
static void test_collectives(void **state) {
  (void)state;
  vd_op_shape x[2] = {S2(2, 2), S2(2, 2)};
  const double a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  attr_node an;
  make_node(&an, "reduce=max");
  call_t t;
  call_init(&t, "all_reduce", NULL, 2, x, 2, x);
  t.c.n_part = 2;
  set_in(&t, 0, a);
  set_in(&t, 1, b);
  assert_int_equal(run(&t), VD_OK);
  for (int i = 0; i < 2; i++)
    for (int e = 0; e < 4; e++) assert_true(t.out[i][e] == a[e] + b[e]);
  call_free(&t);
  call_init(&t, "all_reduce", &an, 2, x, 2, x);
  t.c.n_part = 2;
  set_in(&t, 0, (double[]){1, 50, 3, 4});
  set_in(&t, 1, b);
  assert_int_equal(run(&t), VD_OK);
  assert_true(t.out[1][0] == 10 && t.out[1][1] == 50);
  call_free(&t);
  vd_plan_free(&an.plan);

  make_node(&an, "dim=1");
  vd_op_shape g[2] = {S2(2, 4), S2(2, 4)};
  call_init(&t, "all_gather", &an, 2, x, 2, g);
  t.c.n_part = 2;
  set_in(&t, 0, a);
  set_in(&t, 1, b);
  assert_int_equal(run(&t), VD_OK);
  const double wg[8] = {1, 2, 10, 20, 3, 4, 30, 40};
  for (int e = 0; e < 8; e++) assert_true(t.out[1][e] == wg[e]);
  call_free(&t);

  vd_op_shape r[2] = {S2(2, 1), S2(2, 1)};
  call_init(&t, "reduce_scatter", &an, 2, x, 2, r);
  t.c.n_part = 2;
  set_in(&t, 0, a);
  set_in(&t, 1, b);
  assert_int_equal(run(&t), VD_OK);
  assert_true(t.out[0][0] == 11 && t.out[0][1] == 33 && t.out[1][0] == 22 && t.out[1][1] == 44);
  call_free(&t);
  vd_plan_free(&an.plan);

  /* all_to_all: split rows, concat columns. */
  make_node(&an, "split_dim=0 concat_dim=1");
  vd_op_shape y[2] = {S2(1, 4), S2(1, 4)};
  call_init(&t, "all_to_all", &an, 2, x, 2, y);
  t.c.n_part = 2;
  set_in(&t, 0, a);
  set_in(&t, 1, b);
  assert_int_equal(run(&t), VD_OK);
  const double y0[4] = {1, 2, 10, 20}, y1[4] = {3, 4, 30, 40};
  for (int e = 0; e < 4; e++) assert_true(t.out[0][e] == y0[e] && t.out[1][e] == y1[e]);
  call_free(&t);
  vd_plan_free(&an.plan);

  call_init(&t, "broadcast", NULL, 1, x, 2, x);
  t.c.n_part = 2;
  set_in(&t, 0, a);
  assert_int_equal(run(&t), VD_OK);
  for (int e = 0; e < 4; e++) assert_true(t.out[0][e] == a[e] && t.out[1][e] == a[e]);
  call_free(&t);
}

static void test_optimizer_values(void **state) {
  (void)state;
  attr_node an;
  make_node(&an, "lr=0.1 beta1=0.5 beta2=0.75 eps=0.0 step=1");
  vd_op_shape s[4] = {S1(1), S1(1), S1(1), S1(1)};
  call_t t;
  call_init(&t, "adam_step", &an, 4, s, 3, s);
  set_in(&t, 0, (double[]){1.0});
  set_in(&t, 1, (double[]){2.0});
  set_in(&t, 2, (double[]){0.0});
  set_in(&t, 3, (double[]){0.0});
  assert_int_equal(run(&t), VD_OK);
  /* m' = 1, v' = 1; corrected 2 and 4; w' = 1 - 0.1 * 2 / 2 = 0.9. */
  assert_true(fabs(t.out[1][0] - 1.0) < 1e-15 && fabs(t.out[2][0] - 1.0) < 1e-15);
  assert_true(fabs(t.out[0][0] - 0.9) < 1e-15);
  call_free(&t);
  vd_plan_free(&an.plan);
}

/* ---- errors -------------------------------------------------------------- */

typedef struct {
  const char *op, *attrs;
  uint32_t n_in;
  vd_op_shape in[6];
  uint32_t n_out;
  vd_op_shape out[3];
  const char *field;
} err_case;

static void test_shape_errors_name_node_and_field(void **state) {
  (void)state;
  static const err_case cs[] = {
      {"matmul", "", 2, {{2, {2, 3}}, {2, {4, 2}}}, 1, {{2, {2, 2}}}, "inputs[1]"},
      {"matmul", "", 2, {{2, {2, 3}}, {2, {3, 2}}}, 1, {{2, {2, 3}}}, "outputs[0]"},
      {"add", "", 2, {{2, {2, 3}}, {1, {2}}}, 1, {{2, {2, 3}}}, "inputs[1]"},
      {"add", "", 1, {{2, {2, 3}}}, 1, {{2, {2, 3}}}, "attrs.scalar"},
      {"add", "", 3, {{1, {2}}, {1, {2}}, {1, {2}}}, 1, {{1, {2}}}, "inputs"},
      {"identity", "", 1, {{1, {2}}}, 2, {{1, {2}}, {1, {2}}}, "outputs"},
      {"chunk", "dim=0 chunks=3 index=0", 1, {{1, {4}}}, 1, {{1, {1}}}, "attrs.chunks"},
      {"chunk", "dim=0 chunks=2 index=2", 1, {{1, {4}}}, 1, {{1, {2}}}, "attrs.index"},
      {"transpose", "dim0=3 dim1=0", 1, {{2, {2, 3}}}, 1, {{2, {3, 2}}}, "attrs.dim0"},
      {"view", "", 1, {{2, {2, 3}}}, 1, {{1, {5}}}, "outputs[0]"},
      {"concat", "dim=0", 2, {{2, {2, 3}}, {2, {2, 4}}}, 1, {{2, {4, 3}}}, "inputs[1]"},
      {"embedding", "", 2, {{1, {3}}, {2, {5, 4}}}, 1, {{2, {3, 5}}}, "outputs[0]"},
      {"linear", "", 2, {{2, {3, 4}}, {2, {5, 3}}}, 1, {{2, {3, 5}}}, "inputs[1]"},
      {"linear_backward", "", 3, {{2, {3, 4}}, {2, {5, 4}}, {2, {3, 5}}}, 2, {{2, {3, 4}}, {2, {4, 5}}}, "outputs[1]"},
      {"rms_norm", "", 2, {{2, {3, 4}}, {1, {3}}}, 1, {{2, {3, 4}}}, "inputs[1]"},
      {"rope", "", 1, {{4, {1, 2, 1, 3}}}, 1, {{4, {1, 2, 1, 3}}}, "inputs[0]"},
      {"softmax", "dim=2", 1, {{2, {2, 3}}}, 1, {{2, {2, 3}}}, "attrs.dim"},
      {"sum", "dims=[1]", 1, {{2, {2, 3}}}, 1, {{1, {3}}}, "outputs[0]"},
      {"pick", "", 2, {{2, {3, 5}}, {1, {4}}}, 1, {{1, {3}}}, "inputs[1]"},
      {"topk_gate", "k=6", 1, {{2, {3, 5}}}, 1, {{2, {3, 5}}}, "attrs.k"},
      {"gate_fw", "n_groups=4 topk_groups=1 topk=3", 2, {{2, {3, 4}}, {2, {8, 4}}}, 2, {{2, {3, 3}}, {2, {3, 3}}}, "attrs.topk"},
      {"gate_fw", "n_groups=3", 2, {{2, {3, 4}}, {2, {8, 4}}}, 2, {{2, {3, 1}}, {2, {3, 1}}}, "attrs.n_groups"},
      {"gate_fw", "score_func=relu", 2, {{2, {3, 4}}, {2, {8, 4}}}, 2, {{2, {3, 1}}, {2, {3, 1}}}, "attrs.score_func"},
      {"gate_fw", "topk=2", 2, {{2, {3, 4}}, {2, {8, 4}}}, 2, {{2, {3, 2}}, {2, {2, 2}}}, "outputs[1]"},
      {"nnscaler_moe_gmm", "local_expert_start=2 local_expert_end=5", 6, {{2, {3, 4}}, {2, {3, 2}}, {2, {3, 2}}, {3, {2, 5, 4}}, {3, {2, 5, 4}}, {3, {2, 4, 5}}}, 1, {{2, {3, 4}}}, "attrs.local_expert_end"},
      {"nnscaler_moe_gmm", "local_expert_start=2 local_expert_end=4 n_routed_experts=3", 6, {{2, {3, 4}}, {2, {3, 2}}, {2, {3, 2}}, {3, {2, 5, 4}}, {3, {2, 5, 4}}, {3, {2, 4, 5}}}, 1, {{2, {3, 4}}}, "attrs.n_routed_experts"},
      {"nnscaler_moe_gmm", "", 6, {{2, {3, 4}}, {2, {3, 2}}, {2, {3, 1}}, {3, {2, 5, 4}}, {3, {2, 5, 4}}, {3, {2, 4, 5}}}, 1, {{2, {3, 4}}}, "inputs[2]"},
      {"grouped_mlp", "", 5, {{2, {3, 4}}, {2, {3, 2}}, {3, {2, 5, 4}}, {3, {2, 5, 3}}, {3, {2, 4, 5}}}, 1, {{2, {3, 4}}}, "inputs[3]"},
      {"all_gather", "dim=0", 2, {{1, {2}}, {1, {2}}}, 2, {{1, {4}}, {1, {2}}}, "outputs[1]"},
      {"reduce_scatter", "dim=0", 2, {{1, {3}}, {1, {3}}}, 2, {{1, {1}}, {1, {1}}}, "inputs[0]"},
      {"all_reduce", "reduce=mean", 2, {{1, {3}}, {1, {3}}}, 2, {{1, {3}}, {1, {3}}}, "attrs.reduce"},
      {"adam_step", "step=0", 4, {{1, {3}}, {1, {3}}, {1, {3}}, {1, {3}}}, 3, {{1, {3}}, {1, {3}}, {1, {3}}}, "attrs.step"},
  };
  for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
    attr_node an;
    make_node(&an, cs[i].attrs);
    call_t t;
    call_init(&t, cs[i].op, &an, cs[i].n_in, cs[i].in, cs[i].n_out, cs[i].out);
    if (vd_op_has(t.op, VD_OPF_COLLECTIVE)) t.c.n_part = cs[i].n_in;
    vd_rc rc = run(&t);
    if (rc != VD_EINPUT || strcmp(t.diag.field, cs[i].field) != 0 || strcmp(t.diag.record, "node 7 'test.node'") != 0 ||
        strstr(t.diag.msg, cs[i].op) == NULL)
      fail_msg("case %zu (%s): rc %s field '%s' record '%s' msg '%s', expected field %s", i, cs[i].op, vd_rc_name(rc),
               t.diag.field, t.diag.record, t.diag.msg, cs[i].field);
    call_free(&t);
    vd_plan_free(&an.plan);
  }
  assert_int_equal(vd_op_lookup("no_such_op"), VD_OP__UNKNOWN);
  assert_int_equal(vd_op_lookup(NULL), VD_OP__UNKNOWN);
}

/* ---- the table ----------------------------------------------------------- */

static void test_table_complete(void **state) {
  (void)state;
  assert_true(VD_OP__COUNT > 60);
  for (int op = 0; op < VD_OP__COUNT; op++) {
    const vd_op_info *i = vd_op_get((vd_op_id)op);
    assert_non_null(i->name);
    assert_true(i->name[0] != 0);
    assert_non_null(i->eval);
    assert_non_null(i->shape);
    assert_non_null(i->reduction_safety);
    if (strlen(i->reduction_safety) < 20) fail_msg("%s: reduction-safety sentence too short", i->name);
    assert_int_equal(vd_op_lookup(i->name), op);
    assert_true(i->min_in <= i->max_in && i->min_out <= i->max_out);
    /* forward-only <=> no backward op (backward ops are neither) */
    int fwd_only = (i->flags & VD_OPF_FORWARD_ONLY) != 0;
    if (i->flags & VD_OPF_BACKWARD)
      assert_int_equal(i->backward, VD_OP__NONE);
    else if (fwd_only != (i->backward == VD_OP__NONE))
      fail_msg("%s: FORWARD_ONLY flag and backward op disagree", i->name);
    if (i->backward != VD_OP__NONE) assert_true(i->backward >= 0 && i->backward < VD_OP__COUNT);
  }
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == ' ' || s[n - 1] == '`')) s[--n] = 0;
  size_t k = 0;
  while (s[k] == ' ' || s[k] == '`') k++;
  memmove(s, s + k, strlen(s + k) + 1);
}

/* Every op in the first column of a docs table is in the registry, and every
 * registry op is named in the docs. */
static void test_docs_and_registry_agree(void **state) {
  (void)state;
  char *doc = tfile_slurp("docs/operators.md");
  if (!doc) fail_msg("cannot read docs/operators.md (run the tests from the repository root)");
  int n_doc = 0;
  for (char *line = strtok(doc, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] != '|') continue;
    char cell[128];
    const char *end = strchr(line + 1, '|');
    if (!end) continue;
    size_t len = (size_t)(end - line - 1);
    if (len >= sizeof(cell)) len = sizeof(cell) - 1;
    memcpy(cell, line + 1, len);
    cell[len] = 0;
    trim(cell);
    if (strcmp(cell, "op") == 0 || strncmp(cell, "---", 3) == 0) continue;
    char *save = NULL;
    for (char *nm = strtok_r(cell, ",/", &save); nm; nm = strtok_r(NULL, ",/", &save)) {
      trim(nm);
      if (!*nm) continue;
      n_doc++;
      if (vd_op_lookup(nm) == VD_OP__UNKNOWN) fail_msg("docs/operators.md names '%s', not in the registry", nm);
    }
  }
  free(doc);
  assert_true(n_doc > 40);
  doc = tfile_slurp("docs/operators.md");
  for (int op = 0; op < VD_OP__COUNT; op++) {
    const char *nm = vd_op_name((vd_op_id)op);
    int found = 0;
    for (const char *p = strstr(doc, nm); p && !found; p = strstr(p + 1, nm)) {
      char before = p == doc ? ' ' : p[-1], after = p[strlen(nm)];
      int word = !(before == '_' || (before >= 'a' && before <= 'z')) && !(after == '_' || (after >= 'a' && after <= 'z'));
      found = word;
    }
    if (!found) fail_msg("registry op '%s' is not described in docs/operators.md", nm);
  }
  free(doc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_complete),
      cmocka_unit_test(test_docs_and_registry_agree),
      cmocka_unit_test(test_every_backward_is_checked),
      cmocka_unit_test(test_backward_matches_finite_differences),
      cmocka_unit_test(test_concat_backward_is_chunk),
      cmocka_unit_test(test_matmul_values),
      cmocka_unit_test(test_rms_norm_values),
      cmocka_unit_test(test_rope_rotation),
      cmocka_unit_test(test_causal_mask_values),
      cmocka_unit_test(test_create_mask_values),
      cmocka_unit_test(test_apply_rotary_emb_values),
      cmocka_unit_test(test_softmax_rows_sum_to_one),
      cmocka_unit_test(test_dropout_values),
      cmocka_unit_test(test_embedding_and_pick_offsets),
      cmocka_unit_test(test_moe_gate_and_gmm_values),
      cmocka_unit_test(test_topk_gate_ties),
      cmocka_unit_test(test_max_values),
      cmocka_unit_test(test_collectives),
      cmocka_unit_test(test_optimizer_values),
      cmocka_unit_test(test_shape_errors_name_node_and_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
