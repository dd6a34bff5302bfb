/*
 * ops/ops_num_moe.c - evaluators and shape checks of the mixture-of-experts
 * operators topk_gate and grouped_mlp (the nnScaler MoE kernels are in
 * ops_moe.c).
 * Semantics and the conventions of every evaluator: ops/ops_num.h.
 */
#include "ops_num.h"

/* ---- mixture of experts -------------------------------------------------- */

static vd_rc shape_topk(const vd_op_call *c, uint32_t n_in) {
  VD_CHECK(want_count(c, n_in, 1));
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  for (uint32_t i = 1; i < n_in; i++) VD_CHECK(want_shape(c, 0, i, &c->in_shape[0]));
  int64_t k = aint(c, "k", 1), e = c->in_shape[0].d[1];
  if (k < 1 || k > e) return bad(c, "attrs.k", "expected in [1, %lld], got %lld", (long long)e, (long long)k);
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
vd_rc vd_op_i_shape_topk_gate(const vd_op_call *c) { return shape_topk(c, 1); }
vd_rc vd_op_i_eval_topk_gate(const vd_op_call *c) {
  int64_t t = c->in_shape[0].d[0], e = c->in_shape[0].d[1], k = aint(c, "k", 1);
  unsigned char *sel = vd_malloc((size_t)e + 1);
  if (!sel) return VD_OOM(c->diag);
  for (int64_t r = 0; r < t; r++) topk_row(c->in[0] + r * e, e, k, sel, c->out[0] + r * e);
  vd_free(sel);
  return VD_OK;
}
vd_rc vd_op_i_shape_topk_gate_backward(const vd_op_call *c) { return shape_topk(c, 2); }
vd_rc vd_op_i_eval_topk_gate_backward(const vd_op_call *c) {
  int64_t t = c->in_shape[0].d[0], e = c->in_shape[0].d[1], k = aint(c, "k", 1);
  unsigned char *sel = vd_malloc((size_t)e + 1);
  double *p = vd_calloc((size_t)e + 1, sizeof(double));
  if (!sel || !p) {
    vd_free(sel);
    vd_free(p);
    return VD_OOM(c->diag);
  }
  for (int64_t r = 0; r < t; r++) {
    const double *g = c->in[1] + r * e;
    double *gx = c->out[0] + r * e, dot = 0;
    topk_row(c->in[0] + r * e, e, k, sel, p);
    for (int64_t j = 0; j < e; j++) dot += g[j] * p[j];
    for (int64_t j = 0; j < e; j++) gx[j] = sel[j] ? p[j] * (g[j] - dot) : 0.0;
  }
  vd_free(sel);
  vd_free(p);
  return VD_OK;
}

/* grouped_mlp: x [t,h], gates [t,G], w1 [el,f,h], w3 [el,f,h], w2 [el,h,f] */
typedef struct {
  int64_t t, h, f, el, G, col0; /* gate column of local expert e: col0 + e */
} gmlp_geo;
static vd_rc shape_gmlp(const vd_op_call *c, gmlp_geo *g) {
  const vd_op_shape *x = &c->in_shape[0], *ga = &c->in_shape[1], *w1 = &c->in_shape[2];
  VD_CHECK(want_ndim(c, 0, 0, 2, 2));
  VD_CHECK(want_ndim(c, 0, 1, 2, 2));
  VD_CHECK(want_ndim(c, 0, 2, 3, 3));
  g->t = x->d[0];
  g->h = x->d[1];
  g->el = w1->d[0];
  g->f = w1->d[1];
  g->G = ga->d[1];
  vd_op_shape w = {.ndim = 3, .d = {g->el, g->f, g->h}};
  VD_CHECK(want_shape(c, 0, 2, &w));
  VD_CHECK(want_shape(c, 0, 3, &w));
  vd_op_shape w2 = {.ndim = 3, .d = {g->el, g->h, g->f}};
  VD_CHECK(want_shape(c, 0, 4, &w2));
  if (ga->d[0] != g->t) return bad(c, "inputs[1]", "expected %lld rows (tokens), got %lld", (long long)g->t, (long long)ga->d[0]);
  int64_t es = aint(c, "expert_start", 0);
  if (g->G == g->el)
    g->col0 = 0;
  else if (es >= 0 && es + g->el <= g->G)
    g->col0 = es;
  else
    return bad(c, "inputs[1]", "expected %lld gate columns or expert_start+%lld <= columns, got %lld columns, expert_start %lld",
               (long long)g->el, (long long)g->el, (long long)g->G, (long long)es);
  return VD_OK;
}
vd_rc vd_op_i_shape_grouped_mlp(const vd_op_call *c) {
  VD_CHECK(want_count(c, 5, 1));
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  return want_shape(c, 1, 0, &c->in_shape[0]);
}
/* Per (token, expert): a = w1 x, b = w3 x, hd = silu(a) * b, o = w2 hd. */
/* grouped_mlp's geometry and its experts, vd_moe_expert (ops_moe.c), over
 * one scratch block of 5 f + 2 h doubles starting at x->a (the caller frees
 * it). */
static vd_rc gmlp_expert(const vd_op_call *c, gmlp_geo *g, vd_moe_expert *x) {
  VD_CHECK(shape_gmlp(c, g));
  double *buf = vd_calloc((size_t)(5 * g->f + 2 * g->h + 1), sizeof(double));
  if (!buf) return VD_OOM(c->diag);
  *x = (vd_moe_expert){g->h, g->f, c->in[2], c->in[3], c->in[4], buf, buf + g->f, buf + 2 * g->f,
                       buf + 5 * g->f, buf + 3 * g->f, buf + 4 * g->f, buf + 5 * g->f + g->h};
  return VD_OK;
}
vd_rc vd_op_i_eval_grouped_mlp(const vd_op_call *c) {
  gmlp_geo g;
  vd_moe_expert x;
  VD_CHECK(gmlp_expert(c, &g, &x));
  memset(c->out[0], 0, sizeof(double) * (size_t)(g.t * g.h));
  for (int64_t t = 0; t < g.t; t++)
    for (int64_t e = 0; e < g.el; e++) {
      double gate = c->in[1][t * g.G + g.col0 + e];
      vd_moe_expert_fwd(&x, e, c->in[0] + t * g.h);
      for (int64_t i = 0; i < g.h; i++) c->out[0][t * g.h + i] += gate * x.o[i];
    }
  vd_free(x.a);
  return VD_OK;
}
vd_rc vd_op_i_shape_grouped_mlp_backward(const vd_op_call *c) {
  VD_CHECK(want_count(c, 6, 5));
  gmlp_geo g;
  VD_CHECK(shape_gmlp(c, &g));
  VD_CHECK(want_shape(c, 0, 5, &c->in_shape[0]));
  for (uint32_t i = 0; i < 5; i++) VD_CHECK(want_shape(c, 1, i, &c->in_shape[i]));
  return VD_OK;
}
vd_rc vd_op_i_eval_grouped_mlp_backward(const vd_op_call *c) {
  gmlp_geo g;
  vd_moe_expert x;
  VD_CHECK(gmlp_expert(c, &g, &x));
  double *gx = c->out[0], *gg = c->out[1], *gw1 = c->out[2], *gw3 = c->out[3], *gw2 = c->out[4];
  for (uint32_t i = 0; i < 5; i++)
    memset(c->out[i], 0, sizeof(double) * (size_t)vd_op_shape_numel(&c->in_shape[i]));
  for (int64_t t = 0; t < g.t; t++) {
    const double *tok = c->in[0] + t * g.h, *gy = c->in[5] + t * g.h;
    for (int64_t e = 0; e < g.el; e++) {
      double gate = c->in[1][t * g.G + g.col0 + e];
      vd_moe_expert_fwd(&x, e, tok);
      gg[t * g.G + g.col0 + e] += vd_moe_expert_bwd(&x, e, tok, gy, gate, gx + t * g.h, gw1, gw3, gw2);
    }
  }
  vd_free(x.a);
  return VD_OK;
}
