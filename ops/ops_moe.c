/*
 * ops/ops_moe.c - the routed-expert operators of the nnScaler
 * DeepSeek-style MoE models, under nnScaler's own names (as
 * tools/nnscaler2plan emits them): numeric evaluators, shape checks and
 * shape-reduction rules (the symbolic encoders are in solver/smt_moe.c) of
 *
 *   gate_fw(x [T,H], weight [E,H] (, bias [E])) -> topk_weight [T,k], topk_idx [T,k]
 *   nnscaler_moe_gmm(x [T,H], topk_idx [T,k], topk_weight [T,k],
 *                    w1 [El,F,H], w3 [El,F,H], w2 [El,H,F]) -> y [T,H]
 *
 * and their backward operators.  Why a separate pair from topk_gate /
 * grouped_mlp: those take dense [T,E] gates (our generator's convention);
 * nnScaler routes with an (index, weight) pair per slot, and the expert
 * parallel split is expressed by the local_expert_start/end attributes.
 *
 * Semantics (DeepSeek-V3 Gate, the nnScaler example model's gate_fw):
 *   scores = sigmoid(x W^T) (score_func "sigmoid") or softmax(x W^T);
 *   selection key = scores (+ bias, which only steers the selection);
 *   n_groups > 1: keep the topk_groups groups (experts split into n_groups
 *   equal consecutive groups) with the best group score (max key, or the
 *   sum of the two best keys when there is a bias), then
 *   topk_idx = the k best keys among the kept experts, best first, ties to
 *   the lower index; topk_weight = scores at topk_idx, normalised to sum 1
 *   for sigmoid, times route_scale.
 *   nnscaler_moe_gmm: y[t] = sum_j sum_{e in [start,end)} [idx[t,j] == e]
 *   weight[t,j] * expert_e(x[t]), expert_e(x) = (silu(x w1_e^T) * (x w3_e^T))
 *   w2_e^T with w*_e the row e - start of the local weights; experts outside
 *   [start,end) contribute 0, so expert-parallel ranks produce partial sums.
 * Gradients: the selection is piecewise constant (no gradient through the
 * index or the bias); gate_fw_backward differentiates the weights through
 * the scores of the logits; the gmm's weight gradient is <gy, expert(x)>.
 *
 * Symbolic encoding: the logits x W^T are interpreted (a linear form); the
 * routing of a row is uninterpreted: topk_idx[t,j] = I_j(logits row),
 * topk_weight[t,j] = route_scale * W_j(logits row) and the Jacobian
 * dW_j/dlogit_e = J_ej(logits row), function symbols named after every
 * attribute that changes them (gate_fw.<score>.g<n>.tg<n>.k<n>.b<0|1>.*), the
 * bias row appended to the arguments.  No property of sorting is assumed,
 * so this is sound under congruence for every interpretation.  The gmm is
 * interpreted given the index term: the gate of local expert e in slot j is
 * ite(idx == e, 1, 0) * weight, so a wrong expert range or offset is a
 * different term.  Index inputs may be Int terms (stage inputs) or the
 * Real-valued I_j terms; numerals follow the term's sort.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "ops_moe.h"
#include "ops_red.h"


/* ---- attributes and messages ---------------------------------------------- */

static int64_t ai(const vd_plan_t *p, const vd_node_t *n, const char *key, int64_t def) {
  return p && n ? vd_node_attr_int(p, n, key, def) : def;
}
static double af(const vd_plan_t *p, const vd_node_t *n, const char *key, double def) {
  return p && n ? vd_node_attr_float(p, n, key, def) : def;
}
static const char *as(const vd_plan_t *p, const vd_node_t *n, const char *key, const char *def) {
  return p && n ? vd_node_attr_str(p, n, key, def) : def;
}


#define bad vd_op_i_bad

static vd_rc want(const vd_op_call *c, int is_out, uint32_t i, int32_t nd, int64_t d0, int64_t d1, int64_t d2) {
  const vd_op_shape *s = is_out ? &c->out_shape[i] : &c->in_shape[i];
  int64_t w[3] = {d0, d1, d2};
  int ok = s->ndim == nd;
  for (int32_t k = 0; ok && k < nd; k++) ok = s->d[k] == w[k];
  if (ok) return VD_OK;
  char f[32], got[96] = "[", exp_[96];
  snprintf(f, sizeof(f), "%s[%u]", is_out ? "outputs" : "inputs", i);
  for (int32_t k = 0; k < s->ndim && k < VD_MAX_DIMS; k++) {
    size_t o = strlen(got);
    snprintf(got + o, sizeof(got) - o, k ? ",%lld" : "%lld", (long long)s->d[k]);
  }
  strncat(got, "]", sizeof(got) - strlen(got) - 1);
  if (nd == 1) snprintf(exp_, sizeof(exp_), "[%lld]", (long long)d0);
  else if (nd == 2) snprintf(exp_, sizeof(exp_), "[%lld,%lld]", (long long)d0, (long long)d1);
  else snprintf(exp_, sizeof(exp_), "[%lld,%lld,%lld]", (long long)d0, (long long)d1, (long long)d2);
  return bad(c, f, "expected shape %s, got %s", exp_, got);
}

static vd_rc want_ndim(const vd_op_call *c, uint32_t i, int32_t nd) {
  if (c->in_shape[i].ndim == nd) return VD_OK;
  char f[32];
  snprintf(f, sizeof(f), "inputs[%u]", i);
  return bad(c, f, "expected %d dimensions, got %d", nd, c->in_shape[i].ndim);
}

static int64_t to_int(double v) {
  if (!(v > -9e15 && v < 9e15)) return INT64_MIN;
  return (int64_t)llround(v);
}
static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }
#define silu_f vd_op_i_silu
#define silu_g vd_op_i_silu_grad

/* ---- the gate: configuration and numeric routing ----------------------------- */

typedef vd_moe_gate_cfg gate_cfg;

/* Reads the attributes; NULL if they are valid for E experts, else the
 * offending field with a message in msg. */
const char *vd_moe_gate_attrs(const vd_plan_t *p, const vd_node_t *n, gate_cfg *g, char *msg, size_t m) {
  const char *sf = as(p, n, "score_func", "sigmoid");
  if (strcmp(sf, "sigmoid") != 0 && strcmp(sf, "softmax") != 0) {
    snprintf(msg, m, "expected \"sigmoid\" or \"softmax\", got \"%s\"", sf);
    return "attrs.score_func";
  }
  g->softmax = sf[1] == 'o';
  g->ng = ai(p, n, "n_groups", 1);
  g->tg = ai(p, n, "topk_groups", g->ng);
  g->k = ai(p, n, "topk", 1);
  g->rs = af(p, n, "route_scale", 1.0);
  if (g->E < 1 || g->E > MOE_MAX_E) {
    snprintf(msg, m, "expected 1..%d experts, got %lld", MOE_MAX_E, (long long)g->E);
    return "inputs[1]";
  }
  if (g->ng < 1 || g->E % g->ng != 0) {
    snprintf(msg, m, "expected a divisor of the %lld experts, got %lld", (long long)g->E, (long long)g->ng);
    return "attrs.n_groups";
  }
  if (g->tg < 1 || g->tg > g->ng) {
    snprintf(msg, m, "expected in [1, n_groups=%lld], got %lld", (long long)g->ng, (long long)g->tg);
    return "attrs.topk_groups";
  }
  int64_t avail = g->tg * (g->E / g->ng);
  if (g->k < 1 || g->k > avail) {
    snprintf(msg, m, "expected in [1, %lld] (experts of the kept groups), got %lld", (long long)avail, (long long)g->k);
    return "attrs.topk";
  }
  if (g->bias && g->ng > 1 && g->E / g->ng < 2) {
    snprintf(msg, m, "a bias needs >= 2 experts per group (group score = sum of the best two), got %lld",
             (long long)(g->E / g->ng));
    return "attrs.n_groups";
  }
  if (!isfinite(g->rs)) {
    snprintf(msg, m, "expected a finite number");
    return "attrs.route_scale";
  }
  return NULL;
}

/* Work space of one row (E entries each). */
typedef struct {
  double *s, *key, *gs;
  unsigned char *allow, *taken;
  int64_t *idx;
  double *W;
  double S; /* sum of the selected scores (sigmoid), 1 (softmax) */
} route_t;

static int route_alloc(route_t *r, int64_t E) {
  size_t n = (size_t)E + 1;
  r->s = vd_calloc(3 * n, sizeof(double));
  r->W = vd_calloc(n, sizeof(double));
  r->idx = vd_calloc(n, sizeof(int64_t));
  r->allow = vd_calloc(2 * n, 1);
  if (!r->s || !r->W || !r->idx || !r->allow) return 0;
  r->key = r->s + n;
  r->gs = r->s + 2 * n;
  r->taken = r->allow + n;
  return 1;
}
static void route_free(route_t *r) {
  vd_free(r->s);
  vd_free(r->W);
  vd_free(r->idx);
  vd_free(r->allow);
}

/* Index of the largest v[i] with ok[i] (ok NULL = all) and !taken[i]; ties
 * to the lower index; -1 when none. */
static int64_t argbest(const double *v, int64_t n, const unsigned char *ok, const unsigned char *taken) {
  int64_t b = -1;
  for (int64_t i = 0; i < n; i++)
    if ((!ok || ok[i]) && !taken[i] && (b < 0 || v[i] > v[b])) b = i;
  return b;
}

/* Routing of one row of logits l (bias b or NULL): r->idx[0..k), r->W[0..k)
 * (without route_scale), r->s the scores. */
static void route_row(const gate_cfg *g, const double *l, const double *b, route_t *r) {
  int64_t E = g->E;
  if (g->softmax) {
    double mx = l[0], z = 0;
    for (int64_t e = 1; e < E; e++) mx = fmax(mx, l[e]);
    for (int64_t e = 0; e < E; e++) z += (r->s[e] = exp(l[e] - mx));
    for (int64_t e = 0; e < E; e++) r->s[e] /= z;
  } else {
    for (int64_t e = 0; e < E; e++) r->s[e] = sigm(l[e]);
  }
  for (int64_t e = 0; e < E; e++) r->key[e] = r->s[e] + (b ? b[e] : 0.0);
  memset(r->taken, 0, (size_t)E);
  if (g->ng > 1) {
    int64_t gsz = E / g->ng;
    for (int64_t q = 0; q < g->ng; q++) {
      const double *kq = r->key + q * gsz;
      int64_t a = argbest(kq, gsz, NULL, r->taken);
      double v = kq[a];
      if (b) { /* sum of the best two of the group */
        r->taken[a] = 1;
        v += kq[argbest(kq, gsz, NULL, r->taken)];
        r->taken[a] = 0;
      }
      r->gs[q] = v;
    }
    memset(r->allow, 0, (size_t)E);
    for (int64_t t = 0; t < g->tg; t++) {
      int64_t q = argbest(r->gs, g->ng, NULL, r->taken);
      r->taken[q] = 1;
      memset(r->allow + q * gsz, 1, (size_t)gsz);
    }
    memset(r->taken, 0, (size_t)g->ng);
  } else {
    memset(r->allow, 1, (size_t)E);
  }
  double S = 0;
  for (int64_t j = 0; j < g->k; j++) {
    int64_t e = argbest(r->key, E, r->allow, r->taken);
    r->taken[e] = 1;
    r->idx[j] = e;
    S += (r->W[j] = r->s[e]);
  }
  r->S = g->softmax ? 1.0 : S;
  if (!g->softmax)
    for (int64_t j = 0; j < g->k; j++) r->W[j] /= S;
}

/* dW_j / dlogit_e of the routed row r (without route_scale). */
static double route_jac(const gate_cfg *g, const route_t *r, int64_t e, int64_t j) {
  double same = r->idx[j] == e ? 1.0 : 0.0;
  if (g->softmax) return r->s[r->idx[j]] * (same - r->s[e]);
  if (!r->taken[e]) return 0.0;
  return r->s[e] * (1.0 - r->s[e]) * (same - r->W[j]) / r->S;
}

/* ---- gate_fw: shapes and numeric evaluation ---------------------------------- */

/* x [T,H], w [E,H], (bias [E]): fills g from the inputs. */
static vd_rc gate_shape_in(const vd_op_call *c, int bias, gate_cfg *g) {
  VD_CHECK(want_ndim(c, 0, 2));
  VD_CHECK(want_ndim(c, 1, 2));
  g->T = c->in_shape[0].d[0];
  g->H = c->in_shape[0].d[1];
  g->E = c->in_shape[1].d[0];
  g->bias = bias;
  VD_CHECK(want(c, 0, 1, 2, g->E, g->H, 0));
  if (bias) VD_CHECK(want(c, 0, 2, 1, g->E, 0, 0));
  char msg[200];
  const char *field = vd_moe_gate_attrs(c->plan, c->node, g, msg, sizeof(msg));
  if (field) return bad(c, field, "%s", msg);
  return VD_OK;
}

vd_rc vd_op_i_shape_gate_fw(const vd_op_call *c) {
  gate_cfg g;
  if (c->n_out != 2) return bad(c, "outputs", "expected 2 outputs (topk_weight, topk_idx), got %u", c->n_out);
  VD_CHECK(gate_shape_in(c, c->n_in == 3, &g));
  VD_CHECK(want(c, 1, 0, 2, g.T, g.k, 0));
  return want(c, 1, 1, 2, g.T, g.k, 0);
}

/* Backward inputs: x, w, (bias,) topk_weight, topk_idx, g; outputs gx, gw (, gbias). */
vd_rc vd_op_i_shape_gate_fw_backward(const vd_op_call *c) {
  gate_cfg g;
  int bias = c->n_in == 6;
  if (c->n_out != 2u + (unsigned)bias)
    return bad(c, "outputs", "expected %d outputs (one gradient per forward input), got %u", 2 + bias, c->n_out);
  VD_CHECK(gate_shape_in(c, bias, &g));
  for (uint32_t i = 2u + (unsigned)bias; i < c->n_in; i++) VD_CHECK(want(c, 0, i, 2, g.T, g.k, 0));
  for (uint32_t i = 0; i < c->n_out; i++) {
    const vd_op_shape *s = &c->in_shape[i];
    VD_CHECK(want(c, 1, i, s->ndim, s->d[0], s->ndim > 1 ? s->d[1] : 0, 0));
  }
  return VD_OK;
}

static void gate_read(const vd_op_call *c, int bias, gate_cfg *g) {
  char msg[8];
  g->T = c->in_shape[0].d[0];
  g->H = c->in_shape[0].d[1];
  g->E = c->in_shape[1].d[0];
  g->bias = bias;
  (void)vd_moe_gate_attrs(c->plan, c->node, g, msg, sizeof(msg)); /* validated by the shape check */
}

static void logits_row(const gate_cfg *g, const double *x, const double *w, double *l) {
  for (int64_t e = 0; e < g->E; e++) {
    double a = 0;
    for (int64_t h = 0; h < g->H; h++) a += x[h] * w[e * g->H + h];
    l[e] = a;
  }
}

vd_rc vd_op_i_eval_gate_fw(const vd_op_call *c) {
  gate_cfg g;
  gate_read(c, c->n_in == 3, &g);
  route_t r;
  double *l = vd_calloc((size_t)g.E + 1, sizeof(double));
  if (!l || !route_alloc(&r, g.E)) {
    vd_free(l);
    route_free(&r);
    return VD_OOM(c->diag);
  }
  for (int64_t t = 0; t < g.T; t++) {
    logits_row(&g, c->in[0] + t * g.H, c->in[1], l);
    route_row(&g, l, g.bias ? c->in[2] : NULL, &r);
    for (int64_t j = 0; j < g.k; j++) {
      c->out[0][t * g.k + j] = g.rs * r.W[j];
      c->out[1][t * g.k + j] = (double)r.idx[j];
    }
  }
  vd_free(l);
  route_free(&r);
  return VD_OK;
}

vd_rc vd_op_i_eval_gate_fw_backward(const vd_op_call *c) {
  gate_cfg g;
  int bias = c->n_in == 6;
  gate_read(c, bias, &g);
  const double *x = c->in[0], *w = c->in[1], *gy = c->in[c->n_in - 1];
  double *gx = c->out[0], *gw = c->out[1];
  route_t r;
  double *l = vd_calloc(2 * (size_t)g.E + 1, sizeof(double));
  if (!l || !route_alloc(&r, g.E)) {
    vd_free(l);
    route_free(&r);
    return VD_OOM(c->diag);
  }
  double *dl = l + g.E;
  memset(gx, 0, sizeof(double) * (size_t)(g.T * g.H));
  memset(gw, 0, sizeof(double) * (size_t)(g.E * g.H));
  if (bias) memset(c->out[2], 0, sizeof(double) * (size_t)g.E);
  for (int64_t t = 0; t < g.T; t++) {
    logits_row(&g, x + t * g.H, w, l);
    route_row(&g, l, bias ? c->in[2] : NULL, &r);
    for (int64_t e = 0; e < g.E; e++) {
      double a = 0;
      for (int64_t j = 0; j < g.k; j++) a += route_jac(&g, &r, e, j) * gy[t * g.k + j];
      dl[e] = g.rs * a;
    }
    for (int64_t e = 0; e < g.E; e++)
      for (int64_t h = 0; h < g.H; h++) {
        gx[t * g.H + h] += dl[e] * w[e * g.H + h];
        gw[e * g.H + h] += dl[e] * x[t * g.H + h];
      }
  }
  vd_free(l);
  route_free(&r);
  return VD_OK;
}

/* ---- nnscaler_moe_gmm: shapes and numeric evaluation ------------------------- */

typedef vd_moe_gmm_cfg gmm_cfg;

void vd_moe_gmm_read(const vd_plan_t *p, const vd_node_t *n, const vd_op_shape *in, gmm_cfg *g) {
  g->T = in[0].d[0];
  g->H = in[0].d[1];
  g->K = in[1].ndim == 2 ? in[1].d[1] : 0;
  g->El = in[3].ndim == 3 ? in[3].d[0] : 0;
  g->F = in[3].ndim == 3 ? in[3].d[1] : 0;
  g->start = ai(p, n, "local_expert_start", 0);
  g->end = ai(p, n, "local_expert_end", g->start + g->El);
  g->nr = ai(p, n, "n_routed_experts", g->end);
}

static vd_rc gmm_shape_in(const vd_op_call *c, gmm_cfg *g) {
  VD_CHECK(want_ndim(c, 0, 2));
  VD_CHECK(want_ndim(c, 1, 2));
  VD_CHECK(want_ndim(c, 3, 3));
  vd_moe_gmm_read(c->plan, c->node, c->in_shape, g);
  VD_CHECK(want(c, 0, 1, 2, g->T, g->K, 0));
  VD_CHECK(want(c, 0, 2, 2, g->T, g->K, 0));
  VD_CHECK(want(c, 0, 4, 3, g->El, g->F, g->H));
  VD_CHECK(want(c, 0, 3, 3, g->El, g->F, g->H));
  VD_CHECK(want(c, 0, 5, 3, g->El, g->H, g->F));
  if (g->start < 0 || g->end - g->start != g->El)
    return bad(c, "attrs.local_expert_end",
               "expected local_expert_end - local_expert_start = %lld (local experts of the weights), got [%lld, %lld)",
               (long long)g->El, (long long)g->start, (long long)g->end);
  if (g->end > g->nr)
    return bad(c, "attrs.n_routed_experts", "expected >= local_expert_end %lld, got %lld", (long long)g->end,
               (long long)g->nr);
  return VD_OK;
}

vd_rc vd_op_i_shape_nnscaler_moe_gmm(const vd_op_call *c) {
  gmm_cfg g;
  if (c->n_in != 6) return bad(c, "inputs", "expected 6 inputs, got %u", c->n_in);
  if (c->n_out != 1) return bad(c, "outputs", "expected 1 output, got %u", c->n_out);
  VD_CHECK(gmm_shape_in(c, &g));
  return want(c, 1, 0, 2, g.T, g.H, 0);
}

/* Backward inputs: x, idx, weight, w1, w3, w2, y, gy; outputs gx, gweight, gw1, gw3, gw2. */
vd_rc vd_op_i_shape_nnscaler_moe_gmm_backward(const vd_op_call *c) {
  gmm_cfg g;
  if (c->n_in != 8) return bad(c, "inputs", "expected 8 inputs, got %u", c->n_in);
  if (c->n_out != 5) return bad(c, "outputs", "expected 5 outputs, got %u", c->n_out);
  VD_CHECK(gmm_shape_in(c, &g));
  VD_CHECK(want(c, 0, 6, 2, g.T, g.H, 0));
  VD_CHECK(want(c, 0, 7, 2, g.T, g.H, 0));
  static const uint32_t src[5] = {0, 2, 3, 4, 5};
  for (uint32_t i = 0; i < 5; i++) {
    const vd_op_shape *s = &c->in_shape[src[i]];
    VD_CHECK(want(c, 1, i, s->ndim, s->d[0], s->d[1], s->ndim > 2 ? s->d[2] : 0));
  }
  return VD_OK;
}

/* Combined gate of local expert e for token t: sum of the weights of the
 * slots routed to it; *hit = 0 when none is. */
static double gmm_gate(const gmm_cfg *g, const double *idx, const double *w, int64_t t, int64_t e, int *hit) {
  double v = 0;
  *hit = 0;
  for (int64_t j = 0; j < g->K; j++)
    if (to_int(idx[t * g->K + j]) == g->start + e) {
      v += w[t * g->K + j];
      *hit = 1;
    }
  return v;
}

/* a = w1_e x, b = w3_e x, hd = silu(a) b; o = w2_e hd. */
void vd_moe_expert_fwd(const vd_moe_expert *x, int64_t e, const double *tok) {
  for (int64_t f = 0; f < x->f; f++) {
    double sa = 0, sb = 0;
    for (int64_t h = 0; h < x->h; h++) {
      sa += x->w1[(e * x->f + f) * x->h + h] * tok[h];
      sb += x->w3[(e * x->f + f) * x->h + h] * tok[h];
    }
    x->a[f] = sa;
    x->b[f] = sb;
    x->hd[f] = silu_f(sa) * sb;
  }
  for (int64_t h = 0; h < x->h; h++) {
    double s = 0;
    for (int64_t f = 0; f < x->f; f++) s += x->w2[(e * x->h + h) * x->f + f] * x->hd[f];
    x->o[h] = s;
  }
}

double vd_moe_expert_bwd(const vd_moe_expert *x, int64_t e, const double *tok, const double *gy, double gate,
                         double *gx, double *gw1, double *gw3, double *gw2) {
  double dot = 0;
  for (int64_t h = 0; h < x->h; h++) {
    dot += gy[h] * x->o[h];
    x->go[h] = gate * gy[h];
  }
  for (int64_t f = 0; f < x->f; f++) {
    double gh = 0;
    for (int64_t h = 0; h < x->h; h++) {
      gh += x->w2[(e * x->h + h) * x->f + f] * x->go[h];
      gw2[(e * x->h + h) * x->f + f] += x->go[h] * x->hd[f];
    }
    x->ga[f] = gh * x->b[f] * silu_g(x->a[f]);
    x->gb[f] = gh * silu_f(x->a[f]);
  }
  for (int64_t f = 0; f < x->f; f++)
    for (int64_t h = 0; h < x->h; h++) {
      int64_t w = (e * x->f + f) * x->h + h;
      gw1[w] += x->ga[f] * tok[h];
      gw3[w] += x->gb[f] * tok[h];
      gx[h] += x->ga[f] * x->w1[w] + x->gb[f] * x->w3[w];
    }
  return dot;
}

/* y = sum over the routed local experts of gate * expert(token), per token. */
static void gmm_forward(const vd_op_call *c, const gmm_cfg *g, const vd_moe_expert *x) {
  double *y = c->out[0];
  memset(y, 0, sizeof(double) * (size_t)(g->T * g->H));
  for (int64_t t = 0; t < g->T; t++)
    for (int64_t e = 0; e < g->El; e++) {
      int hit;
      double gate = gmm_gate(g, c->in[1], c->in[2], t, e, &hit);
      if (!hit) continue;
      vd_moe_expert_fwd(x, e, c->in[0] + t * g->H);
      for (int64_t h = 0; h < g->H; h++) y[t * g->H + h] += gate * x->o[h];
    }
}

/* The gradients of the tokens, the routing weights and the three expert
 * weights, summed over the routed (token, local expert) pairs. */
static void gmm_backward(const vd_op_call *c, const gmm_cfg *g, const vd_moe_expert *x) {
  const double *idx = c->in[1], *wt = c->in[2];
  double *gx = c->out[0], *gwt = c->out[1], *gw1 = c->out[2], *gw3 = c->out[3], *gw2 = c->out[4];
  static const uint32_t src[5] = {0, 2, 3, 4, 5};
  for (uint32_t i = 0; i < 5; i++)
    memset(c->out[i], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[src[i]]));
  for (int64_t t = 0; t < g->T; t++) {
    const double *tok = c->in[0] + t * g->H, *gy = c->in[7] + t * g->H;
    for (int64_t e = 0; e < g->El; e++) {
      int hit;
      double gate = gmm_gate(g, idx, wt, t, e, &hit);
      if (!hit) continue;
      vd_moe_expert_fwd(x, e, tok);
      double dot = vd_moe_expert_bwd(x, e, tok, gy, gate, gx + t * g->H, gw1, gw3, gw2);
      for (int64_t j = 0; j < g->K; j++)
        if (to_int(idx[t * g->K + j]) == g->start + e) gwt[t * g->K + j] += dot;
    }
  }
}

/* An nnscaler_moe_gmm evaluation, forward or backward (pass): the call's
 * configuration and the expert helper (weights inputs 3, 4, 5) over one
 * zeroed buffer of 5 F + 2 H doubles. */
static vd_rc gmm_eval(const vd_op_call *c,
                      void (*pass)(const vd_op_call *c, const gmm_cfg *g, const vd_moe_expert *x)) {
  gmm_cfg g;
  vd_moe_gmm_read(c->plan, c->node, c->in_shape, &g);
  int64_t h = g.H, f = g.F;
  double *b = vd_calloc((size_t)(5 * f + 2 * h + 1), sizeof(double));
  if (!b) return VD_OOM(c->diag);
  vd_moe_expert x = {h, f, c->in[3], c->in[4], c->in[5], b, b + f, b + 2 * f, b + 5 * f, b + 3 * f, b + 4 * f,
                     b + 5 * f + h};
  pass(c, &g, &x);
  vd_free(b);
  return VD_OK;
}

vd_rc vd_op_i_eval_nnscaler_moe_gmm(const vd_op_call *c) { return gmm_eval(c, gmm_forward); }
vd_rc vd_op_i_eval_nnscaler_moe_gmm_backward(const vd_op_call *c) { return gmm_eval(c, gmm_backward); }

/* ---- routing symbols: names and numeric meaning ------------------------------- */

/* "gate_fw.<score>.g<n_groups>.tg<topk_groups>.k<topk>.b<bias>." + what */
void vd_moe_gate_sym(char *buf, size_t n, const gate_cfg *g, const char *what, int64_t e, int64_t j) {
  int o = snprintf(buf, n, "gate_fw.%s.g%lld.tg%lld.k%lld.b%d.", g->softmax ? "softmax" : "sigmoid",
                   (long long)g->ng, (long long)g->tg, (long long)g->k, g->bias);
  if (o < 0 || (size_t)o >= n) return;
  if (e >= 0)
    snprintf(buf + o, n - (size_t)o, "%s.e%lld.j%lld", what, (long long)e, (long long)j);
  else
    snprintf(buf + o, n - (size_t)o, "%s.j%lld", what, (long long)j);
}

int vd_moe_uf_value(const char *name, size_t n, const double *a, double *out) {
  if (!name || strncmp(name, "gate_fw.", 8) != 0) return 0;
  char sf[16];
  long long ng, tg, k, e = -1, j;
  int b, pos = 0, end = 0;
  if (sscanf(name, "gate_fw.%15[a-z].g%lld.tg%lld.k%lld.b%d.%n", sf, &ng, &tg, &k, &b, &pos) != 5 || pos == 0)
    return 0;
  const char *rest = name + pos;
  int what; /* 0 idx, 1 weight, 2 jacobian */
  if (sscanf(rest, "idx.j%lld%n", &j, &end) == 1 && rest[end] == 0) what = 0;
  else if (sscanf(rest, "w.j%lld%n", &j, &end) == 1 && rest[end] == 0) what = 1;
  else if (sscanf(rest, "jac.e%lld.j%lld%n", &e, &j, &end) == 2 && rest[end] == 0) what = 2;
  else return 0;
  if ((b != 0 && b != 1) || (strcmp(sf, "sigmoid") != 0 && strcmp(sf, "softmax") != 0)) return 0;
  gate_cfg g = {.softmax = sf[1] == 'o', .bias = b, .T = 1, .H = 1, .ng = ng, .tg = tg, .k = k, .rs = 1.0};
  g.E = b ? (int64_t)n / 2 : (int64_t)n;
  if ((b && n % 2) || g.E < 1 || g.E > MOE_MAX_E || j < 0 || j >= k || e >= g.E || (what == 2 && e < 0)) return 0;
  /* gate_attrs reads defaults from a NULL node: check the parsed values directly. */
  if (ng < 1 || g.E % ng || tg < 1 || tg > ng || k < 1 || k > tg * (g.E / ng) || (b && ng > 1 && g.E / ng < 2))
    return 0;
  route_t r;
  if (!route_alloc(&r, g.E)) {
    route_free(&r);
    return 0;
  }
  route_row(&g, a, b ? a + g.E : NULL, &r);
  *out = what == 0 ? (double)r.idx[j] : what == 1 ? r.W[j] : route_jac(&g, &r, e, j);
  route_free(&r);
  return 1;
}

/* ---- shape reduction rules --------------------------------------------------------- */

/* Every dim of (oa,ta) moves with the same dim of (ob,tb); 0 on a rank mismatch. */
static int rsame(const vd_op_reduce_call *c, int oa, uint32_t ta, int ob, uint32_t tb, vd_rc *rc) {
  const vd_op_shape *a = shp(c, dr(oa, ta, 0)), *b = shp(c, dr(ob, tb, 0));
  if (a->ndim != b->ndim) return 0;
  for (int32_t j = 0; j < a->ndim && *rc == VD_OK; j++) *rc = eq(c, dr(oa, ta, j), dr(ob, tb, j));
  return 1;
}

/* gate_fw: tokens T move together (x, outputs, backward grads); the hidden
 * dim H is contracted (logits) so >= 2; the expert dim E is kept: the
 * routing symbols take the whole row, and n_groups / topk_groups / topk are
 * stated in experts (E must stay a multiple of n_groups with >= topk
 * experts in the kept groups); the slot dim k is the topk attribute: kept.
 * Backward also contracts T (weight gradient): >= 2. */
static vd_rc gate_rule(const vd_op_reduce_call *c, int backward, int *norule) {
  int bias = backward ? c->n_in == 6 : c->n_in == 3;
  uint32_t first_k = backward ? 2u + (unsigned)bias : 0; /* first [T,k] input */
  if (c->n_in < 2 || c->in_shape[0].ndim != 2 || c->in_shape[1].ndim != 2) goto none;
  if (!backward && (c->n_out != 2 || c->out_shape[0].ndim != 2 || c->out_shape[1].ndim != 2)) goto none;
  if (backward && c->n_out != 2u + (unsigned)bias) goto none;
  VD_CHECK(eq(c, dr(0, 0, 1), dr(0, 1, 1)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 1)));
  VD_CHECK(mark(c, VD_RED_KEEP, dr(0, 1, 0)));
  if (bias) {
    if (c->in_shape[2].ndim != 1) goto none;
    VD_CHECK(mark(c, VD_RED_KEEP, dr(0, 2, 0)));
  }
  if (!backward) {
    for (uint32_t o = 0; o < 2; o++) {
      VD_CHECK(eq(c, dr(1, o, 0), dr(0, 0, 0)));
      VD_CHECK(mark(c, VD_RED_KEEP, dr(1, o, 1)));
    }
    return VD_OK;
  }
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 0)));
  for (uint32_t i = first_k; i < c->n_in; i++) {
    if (c->in_shape[i].ndim != 2) goto none;
    VD_CHECK(eq(c, dr(0, i, 0), dr(0, 0, 0)));
    VD_CHECK(mark(c, VD_RED_KEEP, dr(0, i, 1)));
  }
  vd_rc rc = VD_OK;
  for (uint32_t o = 0; o < c->n_out; o++)
    if (!rsame(c, 1, o, 0, o, &rc)) goto none;
  return rc;
none:
  *norule = 1;
  return VD_OK;
}
vd_rc vd_moe_red_gate_fw(const vd_op_reduce_call *c, int *norule) { return gate_rule(c, 0, norule); }
vd_rc vd_moe_red_gate_fw_backward(const vd_op_reduce_call *c, int *norule) { return gate_rule(c, 1, norule); }

/* nnscaler_moe_gmm: token rows move together (x, idx, weight, y and the
 * backward's gradients); H and F are contracted (>= 2); the slot dim k is
 * kept.  The local expert dim of w1/w3/w2 is reduced like embedding's
 * vocabulary: the index is a value compared with positions along it, so
 * local_expert_start/end and n_routed_experts are POS attributes scaled by
 * the same g/m (g divides every expert range of both plans, so a wrong
 * range or a weight shard that disagrees with its range stays wrong after
 * the injective scaling; the gate's index terms are shared, arbitrary
 * values).  Backward also contracts T. */
static vd_rc gmm_rule(const vd_op_reduce_call *c, int backward, int *norule) {
  const vd_op_shape *in = c->in_shape;
  if (c->n_in != (backward ? 8u : 6u) || c->n_out != (backward ? 5u : 1u)) goto none;
  if (in[0].ndim != 2 || in[1].ndim != 2 || in[2].ndim != 2 || in[3].ndim != 3 || in[4].ndim != 3 ||
      in[5].ndim != 3)
    goto none;
  for (uint32_t i = 1; i <= 2; i++) {
    VD_CHECK(eq(c, dr(0, i, 0), dr(0, 0, 0)));
    VD_CHECK(mark(c, VD_RED_KEEP, dr(0, i, 1)));
  }
  VD_CHECK(eq(c, dr(0, 4, 0), dr(0, 3, 0)));
  VD_CHECK(eq(c, dr(0, 5, 0), dr(0, 3, 0)));
  static const char *const posattr[3] = {"local_expert_start", "local_expert_end", "n_routed_experts"};
  for (int k = 0; k < 3; k++)
    if (c->plan && c->node && vd_node_attr(c->plan, c->node, posattr[k])) {
      vd_op_red r = {.kind = VD_RED_POS, .a = dr(0, 3, 0), .attr = posattr[k],
                     .pos = vd_node_attr_int(c->plan, c->node, posattr[k], 0)};
      VD_CHECK(c->emit(c->sink, &r));
    }
  VD_CHECK(eq(c, dr(0, 3, 2), dr(0, 0, 1)));
  VD_CHECK(eq(c, dr(0, 4, 2), dr(0, 0, 1)));
  VD_CHECK(eq(c, dr(0, 5, 1), dr(0, 0, 1)));
  VD_CHECK(eq(c, dr(0, 4, 1), dr(0, 3, 1)));
  VD_CHECK(eq(c, dr(0, 5, 2), dr(0, 3, 1)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 1)));
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 3, 1)));
  vd_rc rc = VD_OK;
  if (!backward) {
    if (!rsame(c, 1, 0, 0, 0, &rc)) goto none;
    return rc;
  }
  VD_CHECK(mark(c, VD_RED_MIN2, dr(0, 0, 0)));
  static const uint32_t src[5] = {0, 2, 3, 4, 5};
  if (!rsame(c, 0, 6, 0, 0, &rc) || !rsame(c, 0, 7, 0, 0, &rc)) goto none;
  for (uint32_t o = 0; o < 5 && rc == VD_OK; o++)
    if (!rsame(c, 1, o, 0, src[o], &rc)) goto none;
  return rc;
none:
  *norule = 1;
  return VD_OK;
}
vd_rc vd_moe_red_nnscaler_moe_gmm(const vd_op_reduce_call *c, int *norule) { return gmm_rule(c, 0, norule); }
vd_rc vd_moe_red_nnscaler_moe_gmm_backward(const vd_op_reduce_call *c, int *norule) {
  return gmm_rule(c, 1, norule);
}
