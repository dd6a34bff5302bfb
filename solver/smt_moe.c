/*
 * solver/smt_moe.c - symbolic encoders of the nnScaler MoE operators
 * (gate_fw, nnscaler_moe_gmm and their backward operators).  Their
 * semantics, shapes, numeric evaluators and reduction rules are in
 * ops/ops_moe.c, whose header comment states the encoding argument:
 * the logits are interpreted, the routing of a row is an uninterpreted
 * function of it, the grouped expert MLP is interpreted given the index term.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "../ops/ops_moe.h"
#include "smt_moe.h"
#include "smt.h"

typedef vd_moe_gate_cfg gate_cfg;
typedef vd_moe_gmm_cfg gmm_cfg;

/* ---- symbolic encoders ------------------------------------------------------------ */

typedef const struct vd_op_encode_call call_t;
#define IN(i) (c->in[i])
#define OUT(i) (c->out[i])

static const char *erec(call_t *c) { return c->record ? c->record : "node"; }

/* The registry's arity and shape check on the terms' shapes. */
static vd_rc enc_check(call_t *c) {
  if (!c->smt) VD_FAIL(c->diag, VD_EINTERNAL, NULL, erec(c), "smt", "no solver context");
  vd_op_shape sh[16];
  if (c->n_in + c->n_out > 16) VD_FAIL(c->diag, VD_EINPUT, NULL, erec(c), "inputs", "too many operands");
  for (uint32_t i = 0; i < c->n_in; i++) sh[i] = c->in[i]->shape;
  for (uint32_t i = 0; i < c->n_out; i++) sh[c->n_in + i] = c->out[i]->shape;
  vd_op_call oc = {.op = c->op, .plan = c->plan, .node = c->node, .record = c->record, .n_in = c->n_in,
                   .n_out = c->n_out, .n_part = c->n_part, .in_shape = sh, .out_shape = sh + c->n_in,
                   .diag = c->diag};
  VD_CHECK(vd_op_check(&oc));
  for (uint32_t i = 0; i < c->n_out; i++)
    if (!c->out[i]->t && c->out[i]->numel > 0)
      VD_FAIL(c->diag, VD_EINTERNAL, NULL, erec(c), "outputs", "output %u has no term array", i);
  return VD_OK;
}

/* Sticky Z3 error, then every output element encoded. */
static vd_rc enc_done(call_t *c) {
  VD_CHECK(vd_smt_status(c->smt, c->diag, erec(c)));
  for (uint32_t i = 0; i < c->n_out; i++)
    for (int64_t f = 0; f < c->out[i]->numel; f++)
      if (VD_NEVER(!c->out[i]->t[f]))
        VD_FAIL(c->diag, VD_EINTERNAL, NULL, erec(c), "outputs", "%s: output %u element %lld not encoded",
                vd_op_name((vd_op_id)c->op), i, (long long)f);
  return VD_OK;
}

/* A MoE encoder: the call's checks, its body, then the check that every
 * output element got a term (a body's error is returned as it is). */
static vd_rc moe_enc(call_t *c, vd_rc (*body)(call_t *c, vd_smt *s)) {
  VD_CHECK(enc_check(c));
  VD_CHECK(body(c, c->smt));
  return enc_done(c);
}

/* Refuses term arrays too large to build (the stage was not reduced). */
static vd_rc enc_budget(call_t *c, int64_t a, int64_t b, int64_t d) {
  if (a < 0 || b < 0 || d < 0 || (double)a * (double)b * (double)d > (double)(1 << 26))
    VD_FAIL(c->diag, VD_EINPUT, NULL, erec(c), "inputs", "%s: too large to encode (%lld x %lld x %lld terms)",
            vd_op_name((vd_op_id)c->op), (long long)a, (long long)b, (long long)d);
  return VD_OK;
}

static void gate_cfg_enc(call_t *c, int bias, gate_cfg *g) {
  char msg[8];
  g->T = IN(0)->shape.d[0];
  g->H = IN(0)->shape.d[1];
  g->E = IN(1)->shape.d[0];
  g->bias = bias;
  (void)vd_moe_gate_attrs(c->plan, c->node, g, msg, sizeof(msg));
}

/* The count scale of a contraction over dim d of input i (smt.h, COUNT). */
static vd_term dim_scale(vd_smt *s, call_t *c, uint32_t i, int32_t d) {
  return vd_smt_count_scale(s, vd_enc_full_dim(c, i, d), IN(i)->shape.d[d]);
}

/* args[0..E) = logits of row t (x[t] . w[e]), args[E..2E) = bias. */
static void gate_args(vd_smt *s, call_t *c, const gate_cfg *g, int64_t t, vd_term *args, vd_term *tmp) {
  const vd_term *x = IN(0)->t + t * g->H, *w = IN(1)->t;
  vd_term kh = dim_scale(s, c, 0, 1);
  for (int64_t e = 0; e < g->E; e++) {
    for (int64_t h = 0; h < g->H; h++) tmp[h] = vd_smt_mul(s, x[h], w[e * g->H + h]);
    args[e] = vd_smt_csum(s, kh, (size_t)g->H, tmp);
  }
  if (g->bias)
    for (int64_t e = 0; e < g->E; e++) args[g->E + e] = IN(2)->t[e];
}

static vd_rc body_gate_fw(call_t *c, vd_smt *s) {
  gate_cfg g;
  gate_cfg_enc(c, c->n_in == 3, &g);
  VD_CHECK(enc_budget(c, g.T, g.E, g.k + g.H));
  size_t na = (size_t)(g.bias ? 2 * g.E : g.E);
  vd_term *args = vd_malloc(sizeof(vd_term) * (na + (size_t)g.H + 1));
  if (!args) return VD_OOM(c->diag);
  vd_term *tmp = args + na, rs = vd_smt_num_double(s, g.rs);
  char name[160];
  for (int64_t t = 0; t < g.T; t++) {
    gate_args(s, c, &g, t, args, tmp);
    for (int64_t j = 0; j < g.k; j++) {
      vd_moe_gate_sym(name, sizeof(name), &g, "idx", -1, j);
      OUT(1)->t[t * g.k + j] = vd_smt_uf(s, name, na, args);
      vd_moe_gate_sym(name, sizeof(name), &g, "w", -1, j);
      OUT(0)->t[t * g.k + j] = vd_smt_mul(s, rs, vd_smt_uf(s, name, na, args));
    }
  }
  vd_free(args);
  return VD_OK;
}
vd_rc vd_moe_enc_gate_fw(const struct vd_op_encode_call *c) { return moe_enc(c, body_gate_fw); }

static vd_rc body_gate_fw_backward(call_t *c, vd_smt *s) {
  gate_cfg g;
  int bias = c->n_in == 6;
  gate_cfg_enc(c, bias, &g);
  VD_CHECK(enc_budget(c, g.T, g.E, g.k + g.H));
  size_t na = (size_t)(bias ? 2 * g.E : g.E);
  int64_t nt = g.T > g.E ? g.T : g.E;
  if (nt < g.H) nt = g.H;
  if (nt < g.k) nt = g.k;
  vd_term *dl = vd_malloc(sizeof(vd_term) * ((size_t)(g.T * g.E) + na + (size_t)nt + 1));
  if (!dl) return VD_OOM(c->diag);
  vd_term *args = dl + g.T * g.E, *tmp = args + na, rs = vd_smt_num_double(s, g.rs);
  const vd_term *gy = IN(c->n_in - 1)->t, *x = IN(0)->t, *w = IN(1)->t;
  char name[160];
  for (int64_t t = 0; t < g.T; t++) {
    gate_args(s, c, &g, t, args, tmp);
    for (int64_t e = 0; e < g.E; e++) {
      for (int64_t j = 0; j < g.k; j++) {
        vd_moe_gate_sym(name, sizeof(name), &g, "jac", e, j);
        tmp[j] = vd_smt_mul(s, vd_smt_uf(s, name, na, args), gy[t * g.k + j]);
      }
      dl[t * g.E + e] = vd_smt_mul(s, rs, vd_smt_csum(s, dim_scale(s, c, c->n_in - 1, 1), (size_t)g.k, tmp));
    }
  }
  vd_term ke = dim_scale(s, c, 1, 0), kt = dim_scale(s, c, 0, 0);
  for (int64_t t = 0; t < g.T; t++)
    for (int64_t h = 0; h < g.H; h++) {
      for (int64_t e = 0; e < g.E; e++) tmp[e] = vd_smt_mul(s, dl[t * g.E + e], w[e * g.H + h]);
      OUT(0)->t[t * g.H + h] = vd_smt_csum(s, ke, (size_t)g.E, tmp);
    }
  for (int64_t e = 0; e < g.E; e++)
    for (int64_t h = 0; h < g.H; h++) {
      for (int64_t t = 0; t < g.T; t++) tmp[t] = vd_smt_mul(s, dl[t * g.E + e], x[t * g.H + h]);
      OUT(1)->t[e * g.H + h] = vd_smt_csum(s, kt, (size_t)g.T, tmp);
    }
  if (bias)
    for (int64_t e = 0; e < g.E; e++) OUT(2)->t[e] = vd_smt_num_int(s, 0);
  vd_free(dl);
  return VD_OK;
}
vd_rc vd_moe_enc_gate_fw_backward(const struct vd_op_encode_call *c) { return moe_enc(c, body_gate_fw_backward); }

/* [idx == start + e] as a 0/1 Real term; the numeral follows idx's sort. */
static vd_term routed(vd_smt *s, vd_term idx, int64_t e) {
  vd_term num = vd_smt_i_is_int(s, idx) ? vd_smt_int_num(s, e) : vd_smt_num_int(s, e);
  return vd_smt_ite(s, vd_smt_eq(s, idx, num), vd_smt_num_int(s, 1), vd_smt_num_int(s, 0));
}

static vd_term silu_t(vd_smt *s, vd_term x) { return vd_smt_mul(s, x, vd_smt_uf(s, "sigmoid", 1, &x)); }
static vd_term silu_grad_t(vd_smt *s, vd_term x) {
  vd_term sg = vd_smt_uf(s, "sigmoid", 1, &x), one = vd_smt_num_int(s, 1);
  return vd_smt_mul(s, sg, vd_smt_add(s, one, vd_smt_mul(s, x, vd_smt_sub(s, one, sg))));
}

void vd_moe_i_swiglu_hidden(vd_smt *s, vd_term kh, const vd_term *x, const vd_term *w1, const vd_term *w3,
                            int64_t e, int64_t F, int64_t H, vd_term *a, vd_term *b, vd_term *hd, vd_term *tmp) {
  for (int64_t f = 0; f < F; f++) {
    for (int64_t h = 0; h < H; h++) tmp[h] = vd_smt_mul(s, w1[(e * F + f) * H + h], x[h]);
    a[f] = vd_smt_csum(s, kh, (size_t)H, tmp);
    for (int64_t h = 0; h < H; h++) tmp[h] = vd_smt_mul(s, w3[(e * F + f) * H + h], x[h]);
    b[f] = vd_smt_csum(s, kh, (size_t)H, tmp);
    hd[f] = vd_smt_mul(s, silu_t(s, a[f]), b[f]);
  }
}

/* Per (token t, local expert e): ind[j] = [idx[t,j] routed to e], gate =
 * sum_j ind[j] weight[t,j], a/b/hd (F) and o = w2_e hd (H).  tmp: H+F+K. */
static void gmm_expert_t(vd_smt *s, call_t *c, const gmm_cfg *g, int64_t t, int64_t e, vd_term *ind, vd_term *gate,
                         vd_term *a, vd_term *b, vd_term *hd, vd_term *o, vd_term *tmp) {
  const vd_term *x = IN(0)->t + t * g->H, *w1 = IN(3)->t, *w3 = IN(4)->t, *w2 = IN(5)->t;
  vd_term kk = dim_scale(s, c, 1, 1), kh = dim_scale(s, c, 0, 1), kf = dim_scale(s, c, 3, 1);
  for (int64_t j = 0; j < g->K; j++) {
    ind[j] = routed(s, IN(1)->t[t * g->K + j], g->start + e);
    tmp[j] = vd_smt_mul(s, ind[j], IN(2)->t[t * g->K + j]);
  }
  *gate = vd_smt_csum(s, kk, (size_t)g->K, tmp);
  vd_moe_i_swiglu_hidden(s, kh, x, w1, w3, e, g->F, g->H, a, b, hd, tmp);
  for (int64_t h = 0; h < g->H; h++) {
    for (int64_t f = 0; f < g->F; f++) tmp[f] = vd_smt_mul(s, w2[(e * g->H + h) * g->F + f], hd[f]);
    o[h] = vd_smt_csum(s, kf, (size_t)g->F, tmp);
  }
}

static vd_rc gmm_cfg_enc(call_t *c, gmm_cfg *g) {
  vd_op_shape sh[6];
  for (int i = 0; i < 6; i++) sh[i] = IN(i)->shape;
  vd_moe_gmm_read(c->plan, c->node, sh, g);
  return enc_budget(c, g->T, g->El, g->F + g->H + g->K);
}

static vd_rc body_nnscaler_moe_gmm(call_t *c, vd_smt *s) {
  gmm_cfg g;
  VD_CHECK(gmm_cfg_enc(c, &g));
  size_t nb = (size_t)(g.K + 3 * g.F + g.H + (g.H + g.F + g.K) + g.El * g.H + g.El + 1);
  vd_term *buf = vd_malloc(sizeof(vd_term) * nb);
  if (!buf) return VD_OOM(c->diag);
  vd_term *ind = buf, *a = ind + g.K, *b = a + g.F, *hd = b + g.F, *o = hd + g.F, *tmp = o + g.H;
  vd_term *ye = tmp + g.H + g.F + g.K, *terms = ye + g.El * g.H;
  vd_term kel = dim_scale(s, c, 3, 0);
  for (int64_t t = 0; t < g.T; t++) {
    for (int64_t e = 0; e < g.El; e++) {
      vd_term gate;
      gmm_expert_t(s, c, &g, t, e, ind, &gate, a, b, hd, o, tmp);
      for (int64_t h = 0; h < g.H; h++) ye[e * g.H + h] = vd_smt_mul(s, gate, o[h]);
    }
    for (int64_t h = 0; h < g.H; h++) {
      for (int64_t e = 0; e < g.El; e++) terms[e] = ye[e * g.H + h];
      OUT(0)->t[t * g.H + h] = vd_smt_csum(s, kel, (size_t)g.El, terms);
    }
  }
  vd_free(buf);
  return VD_OK;
}
vd_rc vd_moe_enc_nnscaler_moe_gmm(const struct vd_op_encode_call *c) { return moe_enc(c, body_nnscaler_moe_gmm); }

static vd_rc body_nnscaler_moe_gmm_backward(call_t *c, vd_smt *s) {
  gmm_cfg g;
  VD_CHECK(gmm_cfg_enc(c, &g));
  int64_t TE = g.T * g.El, nt = g.T;
  if (nt < 2 * g.El * g.F) nt = 2 * g.El * g.F;
  if (nt < g.H + g.F + g.K) nt = g.H + g.F + g.K;
  if (nt < g.El) nt = g.El;
  /* per (t,e): ga, gb, hd (F each), go (H); per (j,e) of the current t: dot terms */
  size_t nb = (size_t)(3 * TE * g.F + TE * g.H + g.K * g.El + 3 * g.F + g.H + g.K + nt + 1);
  vd_term *buf = vd_malloc(sizeof(vd_term) * nb);
  if (!buf) return VD_OOM(c->diag);
  vd_term *GA = buf, *GB = GA + TE * g.F, *HD = GB + TE * g.F, *GO = HD + TE * g.F;
  vd_term *dots = GO + TE * g.H, *a = dots + g.K * g.El, *b = a + g.F, *o = b + g.F, *ind = o + g.H;
  vd_term *tmp = ind + g.K, *hd = NULL;
  const vd_term *w1 = IN(3)->t, *w3 = IN(4)->t, *w2 = IN(5)->t;
  vd_term kh = dim_scale(s, c, 0, 1), kel = dim_scale(s, c, 3, 0), kt = dim_scale(s, c, 0, 0);
  vd_term kf = dim_scale(s, c, 3, 1), kx = kel && kf ? vd_smt_mul(s, kel, kf) : kel ? kel : kf;
  for (int64_t t = 0; t < g.T; t++) {
    const vd_term *gy = IN(7)->t + t * g.H;
    for (int64_t e = 0; e < g.El; e++) {
      int64_t te = t * g.El + e;
      vd_term gate;
      hd = HD + te * g.F;
      gmm_expert_t(s, c, &g, t, e, ind, &gate, a, b, hd, o, tmp);
      for (int64_t h = 0; h < g.H; h++) {
        tmp[h] = vd_smt_mul(s, gy[h], o[h]);
        GO[te * g.H + h] = vd_smt_mul(s, gate, gy[h]);
      }
      vd_term dot = vd_smt_csum(s, kh, (size_t)g.H, tmp);
      for (int64_t j = 0; j < g.K; j++) dots[j * g.El + e] = vd_smt_mul(s, ind[j], dot);
      for (int64_t f = 0; f < g.F; f++) {
        for (int64_t h = 0; h < g.H; h++) tmp[h] = vd_smt_mul(s, w2[(e * g.H + h) * g.F + f], GO[te * g.H + h]);
        vd_term gh = vd_smt_csum(s, kh, (size_t)g.H, tmp);
        vd_term f3[3] = {gh, b[f], silu_grad_t(s, a[f])};
        GA[te * g.F + f] = vd_smt_prod(s, 3, f3);
        GB[te * g.F + f] = vd_smt_mul(s, gh, silu_t(s, a[f]));
      }
    }
    /* gweight[t,j] = sum_e [routed] <gy, o_e> */
    for (int64_t j = 0; j < g.K; j++) OUT(1)->t[t * g.K + j] = vd_smt_csum(s, kel, (size_t)g.El, dots + j * g.El);
    /* gx[t,h] = sum_e sum_f ga w1 + gb w3 */
    for (int64_t h = 0; h < g.H; h++) {
      int64_t n = 0;
      for (int64_t e = 0; e < g.El; e++)
        for (int64_t f = 0; f < g.F; f++) {
          int64_t te = t * g.El + e, w = (e * g.F + f) * g.H + h;
          tmp[n++] = vd_smt_mul(s, GA[te * g.F + f], w1[w]);
          tmp[n++] = vd_smt_mul(s, GB[te * g.F + f], w3[w]);
        }
      OUT(0)->t[t * g.H + h] = vd_smt_csum(s, kx, (size_t)n, tmp);
    }
  }
  /* weight gradients: contractions over the tokens */
  for (int64_t e = 0; e < g.El; e++)
    for (int64_t f = 0; f < g.F; f++)
      for (int64_t h = 0; h < g.H; h++) {
        int64_t w = (e * g.F + f) * g.H + h;
        for (int64_t t = 0; t < g.T; t++) tmp[t] = vd_smt_mul(s, GA[(t * g.El + e) * g.F + f], IN(0)->t[t * g.H + h]);
        OUT(2)->t[w] = vd_smt_csum(s, kt, (size_t)g.T, tmp);
        for (int64_t t = 0; t < g.T; t++) tmp[t] = vd_smt_mul(s, GB[(t * g.El + e) * g.F + f], IN(0)->t[t * g.H + h]);
        OUT(3)->t[w] = vd_smt_csum(s, kt, (size_t)g.T, tmp);
      }
  for (int64_t e = 0; e < g.El; e++)
    for (int64_t h = 0; h < g.H; h++)
      for (int64_t f = 0; f < g.F; f++) {
        for (int64_t t = 0; t < g.T; t++)
          tmp[t] = vd_smt_mul(s, GO[(t * g.El + e) * g.H + h], HD[(t * g.El + e) * g.F + f]);
        OUT(4)->t[(e * g.H + h) * g.F + f] = vd_smt_csum(s, kt, (size_t)g.T, tmp);
      }
  vd_free(buf);
  return VD_OK;
}
vd_rc vd_moe_enc_nnscaler_moe_gmm_backward(const struct vd_op_encode_call *c) {
  return moe_enc(c, body_nnscaler_moe_gmm_backward);
}

