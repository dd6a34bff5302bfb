/*
 * tests/solver/test_smt_encode.c - every symbolic encoder agrees with the
 * numeric evaluator of the registry (vd_op_eval) on random inputs.
 *
 * Method: inputs are random dyadic rationals (k/8, exact as doubles), bound
 * as numerals; the encoder's output terms are simplified, and every
 * uninterpreted application whose arguments have become numerals is
 * replaced by the real function's value (vd_smt_uf_value, converted to an
 * exact rational), innermost first, until the term is a numeral.  That
 * value must match vd_op_eval within 1e-9 relative.  Every operator of the
 * registry must have at least one case here (a registry op without a case
 * fails the test; an op whose evaluator is NULL is reported and skipped).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <z3.h>

#include "../../common/mem.h"
#include "../../solver/smt.h"

typedef struct {
  const char *op;
  const char *in;    /* "2x3,i4,1": shapes; 'i' = integer-valued (ids, labels); "s" = scalar [] */
  const char *out;
  const char *attrs; /* "k=2;eps=1e-6;reduce=s:max;dims=I:0,1" (float when it has . or e) */
  uint32_t n_part;
  int positive;      /* inputs drawn from (0, 4] (log, sqrt, ...) */
} tcase;

static const tcase cases[] = {
    {"identity", "2x3", "2x3", "", 0, 0},
    {"contiguous", "2x3", "2x3", "", 0, 0},
    {"cast", "2x3", "2x3", "", 0, 0},
    {"view", "2x3", "3x2", "", 0, 0},
    {"reshape", "2x3", "6", "", 0, 0},
    {"transpose", "2x3x4", "4x3x2", "dim0=0;dim1=2", 0, 0},
    {"transpose", "2x3", "3x2", "", 0, 0},
    {"multiref", "2x3", "2x3,2x3", "", 0, 0},
    {"multiref_backward", "2x3,2x3,2x3", "2x3", "", 0, 0},
    {"chunk", "4x3", "2x3", "dim=0;index=1;chunks=2", 0, 0},
    {"chunk", "2x6", "2x2", "dim=-1;index=2;chunks=3", 0, 0},
    {"chunk_backward", "2x3", "4x3", "dim=0;index=1;chunks=2", 0, 0},
    {"concat", "2x3,1x3", "3x3", "dim=0", 0, 0},
    {"concat", "2x1,2x2", "2x3", "dim=1", 0, 0},
    {"expand", "1x3", "2x3", "", 0, 0},
    {"expand", "3", "2x2x3", "", 0, 0},
    {"add", "2x3,3", "2x3", "", 0, 0},
    {"add", "2x3", "2x3", "scalar=0.5", 0, 0},
    {"sub", "2x1,1x3", "2x3", "", 0, 0},
    {"sub", "2x3", "2x3", "scalar=-1.25", 0, 0},
    {"mul", "2x3,2x3", "2x3", "", 0, 0},
    {"mul", "2x3", "2x3", "scalar=3.0", 0, 0},
    {"div", "2x3,1x3", "2x3", "", 0, 0},
    {"div", "2x3", "2x3", "scalar=0.1", 0, 0},
    {"neg", "2x3", "2x3", "", 0, 0},
    {"pow", "2x3", "2x3", "exponent=3.0", 0, 0},
    {"pow", "2x3", "2x3", "exponent=-2.0", 0, 0},
    {"pow", "2x3", "2x3", "exponent=0.5", 0, 1},
    {"sqrt", "2x3", "2x3", "", 0, 1},
    {"rsqrt", "2x3", "2x3", "", 0, 1},
    {"exp", "2x3", "2x3", "", 0, 0},
    {"log", "2x3", "2x3", "", 0, 1},
    {"sigmoid", "2x3", "2x3", "", 0, 0},
    {"tanh", "2x3", "2x3", "", 0, 0},
    {"relu", "2x3", "2x3", "", 0, 0},
    {"silu", "2x3", "2x3", "", 0, 0},
    {"gelu", "2x3", "2x3", "", 0, 0},
    {"sum", "2x3x4", "2x4", "dims=I:1", 0, 0},
    {"sum", "2x3", "1", "", 0, 0},
    {"sum", "2x3", "2x1", "dims=1;keepdim=1", 0, 0},
    {"mean", "2x3x4", "3", "dims=I:0,2", 0, 0},
    {"max", "2x3x4", "2x4", "dims=I:1", 0, 0},
    {"max", "2x3", "2x1", "dims=1;keepdim=1", 0, 0},
    {"max", "2x3", "1", "", 0, 0},
    {"mean", "2x3", "s", "", 0, 0},
    {"sum_to", "2x3", "1x3", "", 0, 0},
    {"sum_to", "2x2x3", "3", "", 0, 0},
    {"accumulate", "2x3,2x3", "2x3", "", 0, 0},
    {"scale", "2x3", "2x3", "factor=0.25", 0, 0},
    {"add_backward", "2x3", "2x3,1x3", "", 0, 0},
    {"add_backward", "2x3", "2x3", "", 0, 0},
    {"sub_backward", "2x3", "2x3,3", "", 0, 0},
    {"mul_backward", "2x3,1x3,2x3", "2x3,1x3", "", 0, 0},
    {"mul_backward", "2x3", "2x3", "scalar=1.5", 0, 0},
    {"div_backward", "2x3,1x3,2x3", "2x3,1x3", "", 0, 0},
    {"div_backward", "2x3", "2x3", "scalar=0.3", 0, 0},
    {"neg_backward", "2x3", "2x3", "", 0, 0},
    {"scale_backward", "2x3", "2x3", "factor=-0.5", 0, 0},
    {"pow_backward", "2x3,2x3", "2x3", "exponent=3.0", 0, 0},
    {"pow_backward", "2x3,2x3", "2x3", "exponent=0.0", 0, 0},
    {"pow_backward", "2x3,2x3", "2x3", "exponent=1.5", 0, 1},
    {"sqrt_backward", "2x3,2x3", "2x3", "", 0, 1},
    {"rsqrt_backward", "2x3,2x3", "2x3", "", 0, 1},
    {"exp_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"log_backward", "2x3,2x3", "2x3", "", 0, 1},
    {"sigmoid_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"tanh_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"relu_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"silu_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"gelu_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"dropout", "2x3", "2x3", "p=0.2;training=s:self.training", 0, 0},
    {"dropout", "2x3", "2x3", "p=0.5;training=0", 0, 0},
    {"dropout", "2x3", "2x3", "p=0.0", 0, 0},
    {"dropout_backward", "2x3,2x3,2x3", "2x3", "p=0.1;training=1", 0, 0},
    {"dropout_backward", "2x3,2x3,2x3", "2x3", "p=0.3;training=s:False", 0, 0},
    {"sum_backward", "2x4", "2x3x4", "dims=I:1", 0, 0},
    {"sum_backward", "1", "2x3", "", 0, 0},
    {"mean_backward", "2x4", "2x3x4", "dims=I:1", 0, 0},
    {"mean_backward", "2x1", "2x3", "dims=1;keepdim=1", 0, 0},
    {"matmul", "2x3,3x2", "2x2", "", 0, 0},
    {"matmul", "2x2x3,3x2", "2x2x2", "", 0, 0},
    {"matmul", "2x1x2x3,3x3x2", "2x3x2x2", "", 0, 0},
    {"linear", "2x3,4x3", "2x4", "", 0, 0},
    {"linear", "2x2x3,4x3,4", "2x2x4", "", 0, 0},
    {"embedding", "i2x2,4x3", "2x2x3", "start=1", 0, 0},
    {"embedding", "i5,4x2", "5x2", "", 0, 0},
    {"rms_norm", "2x4,4", "2x4", "eps=1e-6", 0, 0},
    {"layer_norm", "2x4,4,4", "2x4", "eps=1e-5", 0, 0},
    {"rope", "1x3x2x4", "1x3x2x4", "theta=10000.0;pos_offset=2", 0, 0},
    {"rope", "3x2x4", "3x2x4", "theta=500000.0;seq_dim=0", 0, 0},
    {"causal_mask", "2x3x3", "2x3x3", "q_offset=1;k_offset=0", 0, 0},
    {"causal_mask", "3x4", "3x4", "q_offset=0;k_offset=2;fill=-1e9", 0, 0},
    {"softmax", "2x3", "2x3", "", 0, 0},
    {"softmax", "3x2x2", "3x2x2", "dim=0", 0, 0},
    {"pick", "3x4,i3", "3", "start=1", 0, 0},
    {"matmul_backward", "2x3,3x2,2x2", "2x3,3x2", "", 0, 0},
    {"matmul_backward", "2x2x3,3x2,2x2x2", "2x2x3,3x2", "", 0, 0},
    {"linear_backward", "2x3,4x3,2x4", "2x3,4x3,4", "", 0, 0},
    {"linear_backward", "2x2x3,4x3,2x2x4", "2x2x3,4x3", "", 0, 0},
    {"embedding_backward", "i2x2,2x2x3", "4x3", "start=1", 0, 0},
    {"rms_norm_backward", "2x4,4,2x4", "2x4,4", "eps=1e-6", 0, 0},
    {"layer_norm_backward", "2x4,4,2x4", "2x4,4,4", "eps=1e-5", 0, 0},
    {"rope_backward", "1x3x2x4", "1x3x2x4", "theta=10000.0;pos_offset=5", 0, 0},
    {"causal_mask_backward", "2x3x3", "2x3x3", "q_offset=1;k_offset=1", 0, 0},
    {"create_mask", "i2x3,2x3x4", "1x1x3x3", "", 0, 0},
    {"create_mask", "i1x2,1x2x2", "1x1x2x2", "fill=-1e9", 0, 0},
    {"apply_mask", "2x2x3x3,1x1x3x3", "2x2x3x3", "", 0, 0},
    {"apply_mask_backward", "2x2x3x3,1x1x3x3,2x2x3x3,2x2x3x3", "2x2x3x3", "", 0, 0},
    {"apply_rotary_emb", "2x3x2x4,2x3x1x4,3x2", "2x3x2x4,2x3x1x4", "", 0, 0},
    {"apply_rotary_emb_backward", "2x3x2x4,2x3x1x4,3x2,2x3x2x4,2x3x1x4,2x3x2x4,2x3x1x4", "2x3x2x4,2x3x1x4", "", 0, 0},
    {"softmax_backward", "2x3,2x3", "2x3", "", 0, 0},
    {"pick_backward", "i3,3", "3x4", "start=1", 0, 0},
    {"topk_gate", "3x4", "3x4", "k=2", 0, 0},
    {"topk_gate_backward", "3x4,3x4", "3x4", "k=2", 0, 0},
    {"grouped_mlp", "3x4,3x2,2x3x4,2x3x4,2x4x3", "3x4", "", 0, 0},
    {"grouped_mlp", "3x4,3x4,2x3x4,2x3x4,2x4x3", "3x4", "expert_start=2", 0, 0},
    {"grouped_mlp_backward", "3x4,3x2,2x3x4,2x3x4,2x4x3,3x4", "3x4,3x2,2x3x4,2x3x4,2x4x3", "", 0, 0},
    {"gate_fw", "3x4,8x4", "3x2,3x2", "score_func=s:sigmoid;n_groups=4;topk_groups=2;topk=2;route_scale=2.5", 0, 0},
    {"gate_fw", "3x4,6x4", "3x3,3x3", "score_func=s:softmax;topk=3", 0, 0},
    {"gate_fw", "3x4,8x4,8", "3x2,3x2", "score_func=s:sigmoid;n_groups=2;topk_groups=1;topk=2;route_scale=1.5", 0, 0},
    {"gate_fw_backward", "3x4,8x4,3x2,i3x2,3x2", "3x4,8x4", "score_func=s:sigmoid;n_groups=4;topk_groups=2;topk=2;route_scale=2.5", 0, 0},
    {"gate_fw_backward", "3x4,6x4,3x3,i3x3,3x3", "3x4,6x4", "score_func=s:softmax;topk=3", 0, 0},
    {"gate_fw_backward", "3x4,8x4,8,3x2,i3x2,3x2", "3x4,8x4,8", "score_func=s:sigmoid;n_groups=2;topk_groups=1;topk=2", 0, 0},
    {"nnscaler_moe_gmm", "3x4,i3x2,3x2,2x3x4,2x3x4,2x4x3", "3x4", "n_routed_experts=6;local_expert_start=2;local_expert_end=4", 0, 0},
    {"nnscaler_moe_gmm", "3x2,i3x3,3x3,6x2x2,6x2x2,6x2x2", "3x2", "", 0, 0},
    {"nnscaler_moe_gmm_backward", "3x4,i3x2,3x2,2x3x4,2x3x4,2x4x3,3x4,3x4", "3x4,3x2,2x3x4,2x3x4,2x4x3",
     "n_routed_experts=6;local_expert_start=3;local_expert_end=5", 0, 0},
    {"all_reduce", "2x3,2x3", "2x3,2x3", "", 2, 0},
    {"all_reduce", "2x3,2x3,2x3", "2x3,2x3,2x3", "reduce=s:max", 3, 0},
    {"all_gather", "2x3,2x3", "4x3,4x3", "dim=0", 2, 0},
    {"all_gather", "2x3,2x3", "2x6,2x6", "dim=1", 2, 0},
    {"reduce_scatter", "4x3,4x3", "2x3,2x3", "dim=0", 2, 0},
    {"all_to_all", "4x2,4x2", "2x4,2x4", "split_dim=0;concat_dim=1", 2, 0},
    {"all_to_all", "2x6,2x6,2x6", "6x2,6x2,6x2", "split_dim=1;concat_dim=0", 3, 0},
    {"broadcast", "2x3", "2x3,2x3", "root=1", 2, 0},
    {"send", "2x3", "2x3", "", 2, 0},
    {"recv", "2x3", "2x3", "", 2, 0},
    {"sumsq", "2x3", "1", "", 0, 0},
    {"clip_coef", "1", "1", "max_norm=1.0", 0, 1},
    {"sgd_step", "2x3,2x3", "2x3", "lr=0.1;weight_decay=0.01", 0, 0},
    {"adam_step", "2x3,2x3,2x3,2x3", "2x3,2x3,2x3",
     "lr=0.001;beta1=0.9;beta2=0.999;eps=1e-8;step=3;weight_decay=0.01", 0, 1},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* ---- parsing ---------------------------------------------------------------- */

static uint32_t parse_shapes(const char *spec, vd_op_shape *sh, int *is_int) {
  uint32_t n = 0;
  const char *p = spec;
  while (*p) {
    vd_op_shape s = {0};
    is_int[n] = 0;
    if (*p == 'i') {
      is_int[n] = 1;
      p++;
    }
    if (*p == 's') {
      p++;
    } else {
      for (;;) {
        s.d[s.ndim++] = strtoll(p, (char **)&p, 10);
        if (*p != 'x') break;
        p++;
      }
    }
    sh[n++] = s;
    if (*p == ',') p++;
  }
  return n;
}

static void add_attrs(vd_plan_t *plan, uint32_t node, const char *spec) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec);
  for (char *tok = strtok(buf, ";"); tok; tok = strtok(NULL, ";")) {
    char *eq = strchr(tok, '=');
    assert_non_null(eq);
    *eq = '\0';
    const char *key = tok, *v = eq + 1;
    if (!strncmp(v, "s:", 2)) {
      assert_int_equal(vd_plan_attr_str(plan, node, key, v + 2), VD_OK);
    } else if (!strncmp(v, "I:", 2)) {
      int64_t ints[8];
      uint32_t n = 0;
      const char *p = v + 2;
      while (*p) {
        ints[n++] = strtoll(p, (char **)&p, 10);
        if (*p == ',') p++;
      }
      assert_int_equal(vd_plan_attr_ints(plan, node, key, ints, n), VD_OK);
    } else if (strpbrk(v, ".e")) {
      assert_int_equal(vd_plan_attr_float(plan, node, key, strtod(v, NULL)), VD_OK);
    } else {
      assert_int_equal(vd_plan_attr_int(plan, node, key, strtoll(v, NULL, 10)), VD_OK);
    }
  }
}

/* ---- random dyadic inputs ------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng >> 33);
}
/* k/8, k in [-16, 16] \ {0}, or (0, 4] when positive: exact in binary. */
static double dyadic(int positive) {
  int k = (int)(next_u32() % 32u) + 1;
  if (positive) return k / 8.0;
  return (k <= 16 ? -k : k - 16) / 8.0;
}

/* ---- interpretation of uninterpreted applications ------------------------------ */

/* Collects applications of uninterpreted functions whose arguments are all
 * numerals (innermost ones) under t. */
static void collect_apps(Z3_context z, Z3_ast t, Z3_ast *apps, unsigned *n, unsigned cap, unsigned *seen,
                         unsigned *n_seen) {
  unsigned id = Z3_get_ast_id(z, t);
  for (unsigned i = 0; i < *n_seen; i++)
    if (seen[i] == id) return;
  if (*n_seen < 4096) seen[(*n_seen)++] = id;
  if (Z3_get_ast_kind(z, t) != Z3_APP_AST) return;
  Z3_app a = Z3_to_app(z, t);
  unsigned na = Z3_get_app_num_args(z, a);
  int all_num = 1;
  for (unsigned i = 0; i < na; i++) {
    Z3_ast arg = Z3_get_app_arg(z, a, i);
    if (!Z3_is_numeral_ast(z, arg)) all_num = 0;
    collect_apps(z, arg, apps, n, cap, seen, n_seen);
  }
  if (na > 0 && all_num && Z3_get_decl_kind(z, Z3_get_app_decl(z, a)) == Z3_OP_UNINTERPRETED && *n < cap)
    apps[(*n)++] = t;
}

/* Numeric value of t with every symbol interpreted; fails the test if some
 * symbol is not one of ours. */
static double interpret(vd_smt *s, vd_term t, const char *op) {
  Z3_context z = vd_smt_i_z3(s);
  for (int round = 0; round < 16; round++) {
    t = vd_smt_simplify(s, t);
    assert_non_null(t);
    double v;
    if (vd_smt_numeral(s, t, &v, NULL, 0)) return v;
    static Z3_ast apps[512], vals[512];
    static unsigned seen[4096];
    unsigned n = 0, n_seen = 0;
    collect_apps(z, t, apps, &n, 512, seen, &n_seen);
    if (n == 0) fail_msg("%s: term is neither a numeral nor reducible: %s", op, vd_smt_to_string(s, t));
    for (unsigned i = 0; i < n; i++) {
      Z3_app a = Z3_to_app(z, apps[i]);
      unsigned na = Z3_get_app_num_args(z, a);
      double args[64];
      for (unsigned k = 0; k < na; k++) assert_true(vd_smt_numeral(s, Z3_get_app_arg(z, a, k), &args[k], NULL, 0));
      char name[128];
      snprintf(name, sizeof(name), "%s", Z3_get_symbol_string(z, Z3_get_decl_name(z, Z3_get_app_decl(z, a))));
      double out;
      if (!vd_smt_uf_value(name, na, args, &out)) fail_msg("%s: unknown symbol %s/%u", op, name, na);
      vals[i] = vd_smt_num_double(s, out);
      assert_non_null(vals[i]);
    }
    t = vd_smt_i_keep(s, Z3_substitute(z, t, n, apps, vals));
    assert_non_null(t);
  }
  fail_msg("%s: too many rounds of interpretation", op);
  return 0;
}

/* ---- one case --------------------------------------------------------------------- */

/* A plan of one node of operator op with attributes attrs; its index. */
static uint32_t one_node_plan(vd_plan_t *plan, const char *op, const char *attrs) {
  assert_int_equal(vd_plan_init(plan, VD_PLAN_SINGLE), VD_OK);
  vd_node_t nd = {.id = 1, .layer = -1, .coll = -1};
  uint32_t node;
  assert_int_equal(vd_plan_add_node(plan, &nd, op, "n", NULL, 0, NULL, 0, NULL, 0, &node), VD_OK);
  add_attrs(plan, node, attrs);
  return node;
}

/* Random values for an input of shape sh (integers 0..5 for ids and labels)
 * bound as numerals in t. */
static double *bind_random(vd_smt *s, vd_smt_tensor *t, const vd_op_shape *sh, int is_int, int positive, vd_diag *d) {
  int64_t n = vd_op_shape_numel(sh);
  double *v = vd_calloc((size_t)n + 1, sizeof(double));
  for (int64_t e = 0; e < n; e++) v[e] = is_int ? (double)(next_u32() % 6u) : dyadic(positive);
  if (is_int)
    assert_int_equal(vd_smt_tensor_int_consts(s, t, sh, v, d), VD_OK);
  else
    assert_int_equal(vd_smt_tensor_consts(s, t, sh, v, d), VD_OK);
  return v;
}

static void free_case(vd_smt_tensor *tin, double **in, uint32_t n_in, vd_smt_tensor *tout, double **out,
                      uint32_t n_out, vd_plan_t *plan) {
  for (uint32_t i = 0; i < n_in; i++) {
    vd_smt_tensor_free(&tin[i]);
    vd_free(in[i]);
  }
  for (uint32_t i = 0; i < n_out; i++) {
    vd_smt_tensor_free(&tout[i]);
    vd_free(out[i]);
  }
  vd_plan_free(plan);
}

static void run_case(vd_smt *s, const tcase *tc, int rep) {
  vd_op_id op = vd_op_lookup(tc->op);
  assert_int_not_equal(op, VD_OP__UNKNOWN);
  vd_op_shape ish[16], osh[16];
  int iint[16], oint[16];
  uint32_t n_in = parse_shapes(tc->in, ish, iint), n_out = parse_shapes(tc->out, osh, oint);
  vd_plan_t plan;
  uint32_t node = one_node_plan(&plan, tc->op, tc->attrs);

  double *in[16], *out[16];
  vd_smt_tensor tin[16], tout[16];
  const vd_smt_tensor *pin[16];
  vd_smt_tensor *pout[16];
  vd_diag d;
  vd_diag_clear(&d);
  for (uint32_t i = 0; i < n_in; i++) {
    in[i] = bind_random(s, &tin[i], &ish[i], iint[i], tc->positive, &d);
    pin[i] = &tin[i];
  }
  for (uint32_t i = 0; i < n_out; i++) {
    out[i] = vd_calloc((size_t)vd_op_shape_numel(&osh[i]) + 1, sizeof(double));
    assert_int_equal(vd_smt_tensor_init(&tout[i], &osh[i]), VD_OK);
    pout[i] = &tout[i];
  }
  char recname[64];
  snprintf(recname, sizeof(recname), "case %s rep %d", tc->op, rep);
  vd_op_call nc = {.op = op, .plan = &plan, .node = &plan.nodes[node], .record = recname,
                   .n_in = n_in, .n_out = n_out, .n_part = tc->n_part,
                   .in = (const double *const *)in, .in_shape = ish, .out = out, .out_shape = osh, .diag = &d};
  vd_rc rc = vd_op_eval(&nc);
  if (rc != VD_OK) fail_msg("%s: numeric eval failed: %s", tc->op, d.msg);
  struct vd_op_encode_call ec = {.op = op, .smt = s, .plan = &plan, .node = &plan.nodes[node],
                                 .record = recname, .n_in = n_in, .n_out = n_out, .n_part = tc->n_part,
                                 .in = pin, .out = pout, .diag = &d};
  rc = vd_smt_encode(&ec);
  if (rc != VD_OK) fail_msg("%s: encode failed: %s", tc->op, d.msg);
  for (uint32_t i = 0; i < n_out; i++)
    for (int64_t e = 0; e < tout[i].numel; e++) {
      double sym = interpret(s, tout[i].t[e], tc->op), num = out[i][e];
      double tol = 1e-9 * fmax(1.0, fmax(fabs(sym), fabs(num)));
      if (!(fabs(sym - num) <= tol))
        fail_msg("%s (attrs %s) output %u element %lld: symbolic %.17g, numeric %.17g", tc->op, tc->attrs, i,
                 (long long)e, sym, num);
    }
  free_case(tin, in, n_in, tout, out, n_out, &plan);
}

static void test_every_encoder_matches_numeric(void **state) {
  (void)state;
  vd_smt *s = NULL;
  assert_int_equal(vd_smt_new(&s, NULL), VD_OK);
  for (size_t c = 0; c < N_CASES; c++) {
    vd_op_id op = vd_op_lookup(cases[c].op);
    assert_int_not_equal(op, VD_OP__UNKNOWN);
    if (!vd_op_get(op)->eval) {
      print_message("skipped %s: no numeric evaluator\n", cases[c].op);
      continue;
    }
    for (int rep = 0; rep < 3; rep++) {
      run_case(s, &cases[c], rep);
      assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
      assert_int_equal(vd_smt_term_count(s), 0);
    }
  }
  vd_smt_free(s);
}

/* ---- COUNT: a reduced contraction is the full one on replicated inputs ---------- */

/* Shape reduction keeps every index pattern of a stage's non-positional
 * operators and scales each contraction by its full/reduced count
 * (docs/shape-reduction.md, COUNT).  Then the encoder on the reduced shapes
 * computes exactly what the full-size operator computes on inputs that
 * repeat each reduced element over a block (x_full[i] = x_red[i * r / f]
 * per dim), at the first element of each output block.  A missing scale (a
 * reduced sum of 64 copies that is 2 copies) fails this. */
typedef struct {
  const char *op, *in, *in_full, *out, *out_full, *attrs;
} rcase;

static const rcase rcases[] = {
    {"sum", "2x3x4", "2x6x4", "2x4", "2x4", "dims=I:1"},
    {"sum", "2x3", "4x6", "1", "1", ""},
    {"max", "2x3x4", "2x6x4", "2x4", "2x4", "dims=I:1"},
    {"mean", "2x3x4", "4x3x8", "3", "3", "dims=I:0,2;divisor=32"},
    {"sum_to", "2x3", "8x3", "1x3", "1x3", ""},
    {"add_backward", "2x3", "4x3", "2x3,1x3", "4x3,1x3", ""},
    {"mul_backward", "2x3,1x3,2x3", "4x6,1x6,4x6", "2x3,1x3", "4x6,1x6", ""},
    {"matmul", "2x3,3x2", "4x6,6x2", "2x2", "4x2", ""},
    {"matmul_backward", "2x3,3x2,2x2", "4x6,6x4,4x4", "2x3,3x2", "4x6,6x4", ""},
    {"linear", "2x2x3,4x3,4", "2x4x6,4x6,4", "2x2x4", "2x4x4", ""},
    {"linear_backward", "2x3,4x3,2x4", "4x6,8x6,4x8", "2x3,4x3,4", "4x6,8x6,8", ""},
    {"embedding_backward", "i2x2,2x2x3", "i2x4,2x4x6", "4x3", "4x6", "start=1"},
    {"rms_norm", "2x4,4", "2x8,8", "2x4", "2x8", "eps=1e-6;divisor=8"},
    {"rms_norm_backward", "2x4,4,2x4", "4x8,8,4x8", "2x4,4", "4x8,8", "eps=1e-6;divisor=8"},
    {"layer_norm", "2x4,4,4", "2x8,8,8", "2x4", "2x8", "eps=1e-5;divisor=8"},
    {"layer_norm_backward", "2x4,4,2x4", "4x8,8,4x8", "2x4,4,4", "4x8,8,8", "eps=1e-5;divisor=8"},
    {"softmax", "2x3", "2x6", "2x3", "2x6", ""},
    {"softmax_backward", "2x3,2x3", "2x6,2x6", "2x3", "2x6", ""},
    {"sumsq", "2x3", "4x6", "1", "1", ""},
    {"grouped_mlp", "3x4,3x2,2x3x4,2x3x4,2x4x3", "6x8,6x2,2x6x8,2x6x8,2x8x6", "3x4", "6x8", ""},
    {"grouped_mlp_backward", "3x4,3x2,2x3x4,2x3x4,2x4x3,3x4", "6x8,6x2,2x6x8,2x6x8,2x8x6,6x8",
     "3x4,3x2,2x3x4,2x3x4,2x4x3", "6x8,6x2,2x6x8,2x6x8,2x8x6", ""},
};

/* Flat index in `to` of the element that the block map sends flat index f
 * of `from` to (idx * to.d / from.d per dim). */
static int64_t block_index(const vd_op_shape *from, const vd_op_shape *to, int64_t f) {
  int64_t idx[VD_MAX_DIMS];
  vd_op_shape_unravel(from, f, idx);
  for (int32_t j = 0; j < from->ndim; j++) idx[j] = idx[j] * to->d[j] / from->d[j];
  return vd_op_shape_ravel(to, idx);
}

static void run_rcase(vd_smt *s, const rcase *rc) {
  vd_op_id op = vd_op_lookup(rc->op);
  assert_int_not_equal(op, VD_OP__UNKNOWN);
  vd_op_shape ish[16], fsh[16], osh[16], fosh[16];
  int iint[16], fint[16], oint[16];
  uint32_t n_in = parse_shapes(rc->in, ish, iint), n_out = parse_shapes(rc->out, osh, oint);
  assert_int_equal(parse_shapes(rc->in_full, fsh, fint), n_in);
  assert_int_equal(parse_shapes(rc->out_full, fosh, oint), n_out);
  vd_plan_t plan;
  uint32_t node = one_node_plan(&plan, rc->op, rc->attrs);
  vd_diag d;
  vd_diag_clear(&d);
  double *in[16], *full[16], *out[16];
  vd_smt_tensor tin[16], tout[16];
  const vd_smt_tensor *pin[16];
  vd_smt_tensor *pout[16];
  for (uint32_t i = 0; i < n_in; i++) {
    int64_t nf = vd_op_shape_numel(&fsh[i]);
    in[i] = bind_random(s, &tin[i], &ish[i], iint[i], 0, &d);
    full[i] = vd_calloc((size_t)nf + 1, sizeof(double));
    for (int64_t e = 0; e < nf; e++) full[i][e] = in[i][block_index(&fsh[i], &ish[i], e)];
    pin[i] = &tin[i];
  }
  for (uint32_t i = 0; i < n_out; i++) {
    out[i] = vd_calloc((size_t)vd_op_shape_numel(&fosh[i]) + 1, sizeof(double));
    assert_int_equal(vd_smt_tensor_init(&tout[i], &osh[i]), VD_OK);
    pout[i] = &tout[i];
  }
  vd_op_call nc = {.op = op, .plan = &plan, .node = &plan.nodes[node], .record = rc->op, .n_in = n_in,
                   .n_out = n_out, .in = (const double *const *)full, .in_shape = fsh, .out = out,
                   .out_shape = fosh, .diag = &d};
  if (vd_op_eval(&nc) != VD_OK) fail_msg("%s: numeric eval at full size failed: %s", rc->op, d.msg);
  struct vd_op_encode_call ec = {.op = op, .smt = s, .plan = &plan, .node = &plan.nodes[node], .record = rc->op,
                                 .n_in = n_in, .n_out = n_out, .in = pin, .out = pout, .diag = &d,
                                 .in_full = fsh, .out_full = fosh};
  if (vd_smt_encode(&ec) != VD_OK) fail_msg("%s: encode failed: %s", rc->op, d.msg);
  for (uint32_t i = 0; i < n_out; i++)
    for (int64_t e = 0; e < tout[i].numel; e++) {
      double sym = interpret(s, tout[i].t[e], rc->op), num = out[i][block_index(&osh[i], &fosh[i], e)];
      if (!(fabs(sym - num) <= 1e-9 * fmax(1.0, fmax(fabs(sym), fabs(num)))))
        fail_msg("%s output %u element %lld: reduced with count scales %.17g, full size on replicated inputs %.17g",
                 rc->op, i, (long long)e, sym, num);
    }
  for (uint32_t i = 0; i < n_in; i++) vd_free(full[i]);
  free_case(tin, in, n_in, tout, out, n_out, &plan);
}

static void test_reduced_contractions_scale(void **state) {
  (void)state;
  vd_smt *s = NULL;
  assert_int_equal(vd_smt_new(&s, NULL), VD_OK);
  for (size_t c = 0; c < sizeof(rcases) / sizeof(rcases[0]); c++) {
    for (int rep = 0; rep < 2; rep++) {
      run_rcase(s, &rcases[c]);
      assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
    }
  }
  vd_smt_free(s);
}

/* ---- ONEHOT: the reduced one-hot is the block average of the full one ---------- */

/* pick_backward reduced from V = 12 classes to v = 3 (block b = 4, start 4
 * -> 1): the label's column carries g * v/V, so the reduced output is the
 * block average (1/b) sum_{j in block} of the full-size one-hot of any
 * label of the block, and a reduced sum over the classes (COUNT: times
 * V/v) is g, the full-size sum (docs/shape-reduction.md, ONEHOT).  Without
 * the scale the sum would count g b times: the false difference against
 * Megatron's vocab-parallel cross-entropy that this scale removes. */
static void test_reduced_onehot(void **state) {
  (void)state;
  vd_smt *s = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_new(&s, &d), VD_OK);
  enum { N = 4, V = 12, v = 3, B = V / v };
  vd_op_shape lsh = {.ndim = 1, .d = {N}}, osh = {.ndim = 2, .d = {N, v}}, fosh = {.ndim = 2, .d = {N, V}};
  for (int rep = 0; rep < 4; rep++) {
    double lab[N], labf[N];
    for (int i = 0; i < N; i++) {
      lab[i] = 1 + (double)(next_u32() % v);                   /* reduced label in [1, 1 + v) */
      labf[i] = lab[i] * B + (double)(next_u32() % B);        /* any full label of its block */
    }
    vd_smt_tensor tl, tg, to, tsum;
    assert_int_equal(vd_smt_tensor_int_consts(s, &tl, &lsh, lab, &d), VD_OK);
    double *g = bind_random(s, &tg, &lsh, 0, 0, &d);
    assert_int_equal(vd_smt_tensor_init(&to, &osh), VD_OK);
    vd_plan_t rplan, fplan, splan;
    uint32_t rn = one_node_plan(&rplan, "pick_backward", "start=1");
    uint32_t fn = one_node_plan(&fplan, "pick_backward", "start=4");
    uint32_t sn = one_node_plan(&splan, "sum", "dims=I:1");
    /* full size, numerically */
    double full[N * V];
    const double *fin[2] = {labf, g};
    double *fout[1] = {full};
    vd_op_shape fish[3] = {lsh, lsh, fosh};
    vd_op_call nc = {.op = VD_OP_PICK_BACKWARD, .plan = &fplan, .node = &fplan.nodes[fn], .record = "pick_backward",
                     .n_in = 2, .n_out = 1, .in = fin, .in_shape = fish, .out = fout, .out_shape = fish + 2,
                     .diag = &d};
    assert_int_equal(vd_op_eval(&nc), VD_OK);
    /* reduced, symbolically, with the full shapes */
    const vd_smt_tensor *pin[2] = {&tl, &tg};
    vd_smt_tensor *pout[1] = {&to};
    vd_op_shape rfull[3] = {lsh, lsh, fosh};
    struct vd_op_encode_call ec = {.op = VD_OP_PICK_BACKWARD, .smt = s, .plan = &rplan, .node = &rplan.nodes[rn],
                                   .record = "pick_backward", .n_in = 2, .n_out = 1, .in = pin, .out = pout,
                                   .diag = &d, .in_full = rfull, .out_full = rfull + 2};
    assert_int_equal(vd_smt_encode(&ec), VD_OK);
    for (int i = 0; i < N; i++)
      for (int j = 0; j < v; j++) {
        double avg = 0;
        for (int k = 0; k < B; k++) avg += full[i * V + j * B + k];
        avg /= B;
        double sym = interpret(s, to.t[i * v + j], "pick_backward");
        if (!(fabs(sym - avg) <= 1e-12 * fmax(1.0, fabs(avg))))
          fail_msg("pick_backward [%d,%d]: reduced %.17g, block average of the full one-hot %.17g", i, j, sym, avg);
      }
    /* the reduced sum over the classes is g, as at full size */
    vd_op_shape rsh = {.ndim = 1, .d = {N}};
    assert_int_equal(vd_smt_tensor_init(&tsum, &rsh), VD_OK);
    const vd_smt_tensor *sin[1] = {&to};
    vd_smt_tensor *sout[1] = {&tsum};
    vd_op_shape sfull[2] = {fosh, rsh};
    struct vd_op_encode_call sc = {.op = VD_OP_SUM, .smt = s, .plan = &splan, .node = &splan.nodes[sn],
                                   .record = "sum", .n_in = 1, .n_out = 1, .in = sin, .out = sout, .diag = &d,
                                   .in_full = sfull, .out_full = sfull + 1};
    assert_int_equal(vd_smt_encode(&sc), VD_OK);
    for (int i = 0; i < N; i++) {
      double fs = 0;
      for (int j = 0; j < V; j++) fs += full[i * V + j];
      double sym = interpret(s, tsum.t[i], "sum");
      assert_true(fabs(fs - g[i]) <= 1e-12 * fmax(1.0, fabs(fs)));
      if (!(fabs(sym - fs) <= 1e-12 * fmax(1.0, fabs(fs))))
        fail_msg("sum of the reduced one-hot, row %d: %.17g, full-size sum %.17g", i, sym, fs);
    }
    vd_smt_tensor_free(&tl);
    vd_smt_tensor_free(&tg);
    vd_smt_tensor_free(&to);
    vd_smt_tensor_free(&tsum);
    vd_free(g);
    vd_plan_free(&rplan);
    vd_plan_free(&fplan);
    vd_plan_free(&splan);
    assert_int_equal(vd_smt_reset(s, NULL), VD_OK);
  }
  vd_smt_free(s);
}

/* Every registry operator has an encoder and at least one case above. */
static void test_registry_covered(void **state) {
  (void)state;
  for (int op = 0; op < VD_OP__COUNT; op++) {
    assert_non_null(vd_smt_encoder((vd_op_id)op));
    int found = 0;
    for (size_t c = 0; c < N_CASES && !found; c++) found = strcmp(cases[c].op, vd_op_name((vd_op_id)op)) == 0;
    if (!found) fail_msg("operator %s has no encoder test case", vd_op_name((vd_op_id)op));
  }
  assert_null(vd_smt_encoder(VD_OP__COUNT));
  assert_null(vd_smt_encoder(VD_OP__NONE));
}

/* Uninterpreted kernels are applied structurally: exp(x) is the symbol exp
 * of exactly x, shared across calls; a wrong rope offset is another term. */
static void test_uf_structure(void **state) {
  (void)state;
  vd_smt *s = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_new(&s, &d), VD_OK);
  vd_op_shape sh = {.ndim = 1, .d = {2}};
  vd_smt_tensor x, y1, y2;
  assert_int_equal(vd_smt_tensor_vars(s, &x, &sh, "x", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_init(&y1, &sh), VD_OK);
  assert_int_equal(vd_smt_tensor_init(&y2, &sh), VD_OK);
  const vd_smt_tensor *in[1] = {&x};
  vd_smt_tensor *o1[1] = {&y1}, *o2[1] = {&y2};
  struct vd_op_encode_call c = {.op = VD_OP_EXP, .smt = s, .n_in = 1, .n_out = 1, .in = in, .out = o1, .diag = &d};
  assert_int_equal(vd_smt_encode(&c), VD_OK);
  c.out = o2;
  assert_int_equal(vd_smt_encode(&c), VD_OK);
  assert_ptr_equal(y1.t[0], y2.t[0]); /* hash-consed: the same symbol on the same argument */
  assert_string_equal(vd_smt_to_string(s, y1.t[1]), "(exp |x[1]|)");
  vd_smt_tensor_free(&y1);
  vd_smt_tensor_free(&y2);
  vd_smt_tensor_free(&x);
  vd_smt_free(s);
}

/* A shape mismatch is rejected by the registry's shape rule before encoding. */
static void test_encode_rejects_bad_shapes(void **state) {
  (void)state;
  vd_smt *s = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_smt_new(&s, &d), VD_OK);
  vd_op_shape a = {.ndim = 2, .d = {2, 3}}, b = {.ndim = 2, .d = {4, 2}}, y = {.ndim = 2, .d = {2, 2}};
  vd_smt_tensor ta, tb, ty;
  assert_int_equal(vd_smt_tensor_vars(s, &ta, &a, "a", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_vars(s, &tb, &b, "b", &d), VD_OK);
  assert_int_equal(vd_smt_tensor_init(&ty, &y), VD_OK);
  const vd_smt_tensor *in[2] = {&ta, &tb};
  vd_smt_tensor *out[1] = {&ty};
  struct vd_op_encode_call c = {.op = VD_OP_MATMUL, .smt = s, .record = "node 7", .n_in = 2, .n_out = 1,
                                .in = in, .out = out, .diag = &d};
  assert_int_equal(vd_smt_encode(&c), VD_EINPUT);
  assert_string_equal(d.record, "node 7");
  assert_string_equal(d.field, "inputs[1]");
  vd_smt_tensor_free(&ta);
  vd_smt_tensor_free(&tb);
  vd_smt_tensor_free(&ty);
  vd_smt_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_covered),
      cmocka_unit_test(test_every_encoder_matches_numeric),
      cmocka_unit_test(test_reduced_contractions_scale),
      cmocka_unit_test(test_reduced_onehot),
      cmocka_unit_test(test_uf_structure),
      cmocka_unit_test(test_encode_rejects_bad_shapes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
