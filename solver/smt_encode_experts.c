/*
 * solver/smt_encode_experts.c - the symbolic encoders of the mixture of
 * experts rows of ops/ops.def other than nnScaler's (smt_moe.c): topk_gate,
 * one function symbol per output element taking the whole row, and
 * grouped_mlp, the experts' silu-gated MLPs over the routed tokens, with
 * their backward.  Shared helpers and ENC are in smt_encode_int.h; the
 * representation choices in smt_encode.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smt_encode_int.h"

/* ---- mixture of experts -------------------------------------------------- */

static vd_rc topk(call_t *c, vd_smt *s, int backward) {
  int64_t t = IN(0)->shape.d[0], e = IN(0)->shape.d[1], k = aint(c, "k", 1);
  if (e > VD_LIM_TOPK_EXPERTS_MAX)
    VD_FAIL(c->diag, VD_EINPUT, NULL, rec(c), "inputs[0]", "topk_gate: rows of %lld experts exceed the %d arguments the symbol takes (reduce the expert dim; common/limits.h)", (long long)e, VD_LIM_TOPK_EXPERTS_MAX);
  vd_term args[2 * VD_LIM_TOPK_EXPERTS_MAX];
  char name[96];
  for (int64_t r = 0; r < t; r++) {
    for (int64_t j = 0; j < e; j++) {
      args[j] = IN(0)->t[r * e + j];
      if (backward) args[e + j] = IN(1)->t[r * e + j];
    }
    for (int64_t j = 0; j < e; j++) {
      snprintf(name, sizeof(name), "%s.k%lld.j%lld", backward ? "topk_gate_backward" : "topk_gate", (long long)k,
               (long long)j);
      OUT(0)->t[r * e + j] = vd_smt_uf(s, name, (size_t)(backward ? 2 * e : e), args);
    }
  }
  return VD_OK;
}
ENC(topk_gate) { return topk(c, s, 0); }
ENC(topk_gate_backward) { return topk(c, s, 1); }

typedef struct {
  int64_t t, h, f, el, G, col0;
} gmlp_geo;

static gmlp_geo gmlp_geometry(call_t *c) {
  gmlp_geo g;
  g.t = IN(0)->shape.d[0];
  g.h = IN(0)->shape.d[1];
  g.el = IN(2)->shape.d[0];
  g.f = IN(2)->shape.d[1];
  g.G = IN(1)->shape.d[1];
  g.col0 = g.G == g.el ? 0 : aint(c, "expert_start", 0);
  return g;
}

/* Count scales of the grouped MLP's contractions (t: token rows, h, f, el). */
typedef struct {
  vd_term t, h, f, el;
} gmlp_scale;

static gmlp_scale gmlp_scales(call_t *c, vd_smt *s, const gmlp_geo *g) {
  gmlp_scale k = {vd_smt_count_scale(s, full_in(c, 0)->d[0], g->t), vd_smt_count_scale(s, full_in(c, 0)->d[1], g->h),
                  vd_smt_count_scale(s, full_in(c, 2)->d[1], g->f), vd_smt_count_scale(s, full_in(c, 2)->d[0], g->el)};
  return k;
}

ENC(grouped_mlp) {
  gmlp_geo g = gmlp_geometry(c);
  gmlp_scale k = gmlp_scales(c, s, &g);
  int64_t nb = 3 * g.f + g.h + g.f + g.el + 1;
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)nb);
  if (!buf) return VD_OOM(c->diag);
  vd_term *a = buf, *b = a + g.f, *hd = b + g.f, *tmp = hd + g.f, *terms = tmp + g.h + g.f;
  const vd_term *w2 = IN(4)->t;
  for (int64_t t = 0; t < g.t; t++) {
    /* y[t,i] = sum_e gate[t,e] * sum_j w2[e,i,j] hd_e[j] */
    vd_term *oe = vd_malloc(sizeof(vd_term) * (size_t)(g.el * g.h + 1));
    if (!oe) {
      vd_free(buf);
      return VD_OOM(c->diag);
    }
    for (int64_t e = 0; e < g.el; e++) {
      vd_moe_i_swiglu_hidden(s, k.h, IN(0)->t + t * g.h, IN(2)->t, IN(3)->t, e, g.f, g.h, a, b, hd, tmp);
      vd_term gate = IN(1)->t[t * g.G + g.col0 + e];
      for (int64_t i = 0; i < g.h; i++) {
        for (int64_t j = 0; j < g.f; j++) tmp[j] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], hd[j]);
        oe[e * g.h + i] = vd_smt_mul(s, gate, vd_smt_csum(s, k.f, (size_t)g.f, tmp));
      }
    }
    for (int64_t i = 0; i < g.h; i++) {
      for (int64_t e = 0; e < g.el; e++) terms[e] = oe[e * g.h + i];
      OUT(0)->t[t * g.h + i] = vd_smt_csum(s, k.el, (size_t)g.el, terms);
    }
    vd_free(oe);
  }
  vd_free(buf);
  return VD_OK;
}

ENC(grouped_mlp_backward) {
  gmlp_geo g = gmlp_geometry(c);
  gmlp_scale k = gmlp_scales(c, s, &g);
  const vd_term *w1 = IN(2)->t, *w3 = IN(3)->t, *w2 = IN(4)->t;
  acc_t gx, gg, gw1, gw3, gw2;
  acc_t *accs[5] = {&gx, &gg, &gw1, &gw3, &gw2};
  int64_t each[5] = {2 * g.el * g.f, 1, g.t, g.t, g.t};
  for (int i = 0; i < 5; i++) {
    vd_rc rc = acc_init(accs[i], IN(i)->numel, each[i], c->diag);
    if (rc != VD_OK) {
      for (int q = 0; q < i; q++) acc_drop(accs[q]);
      return rc;
    }
  }
  vd_term *buf = vd_malloc(sizeof(vd_term) * (size_t)(6 * g.f + 2 * g.h + 1));
  if (!buf) {
    for (int i = 0; i < 5; i++) acc_drop(accs[i]);
    return VD_OOM(c->diag);
  }
  vd_term *a = buf, *b = a + g.f, *hd = b + g.f, *ga = hd + g.f, *gbv = ga + g.f, *tmp = gbv + g.f;
  vd_term *go = tmp + g.f + g.h;
  for (int64_t t = 0; t < g.t; t++) {
    const vd_term *x = IN(0)->t + t * g.h, *gy = IN(5)->t + t * g.h;
    for (int64_t e = 0; e < g.el; e++) {
      vd_term gate = IN(1)->t[t * g.G + g.col0 + e];
      vd_moe_i_swiglu_hidden(s, k.h, x, w1, w3, e, g.f, g.h, a, b, hd, tmp);
      /* ggate = sum_i gy_i o_i,  o_i = sum_j w2[e,i,j] hd_j;  go = gate gy */
      vd_term *gs = vd_malloc(sizeof(vd_term) * (size_t)(g.h + 1));
      if (!gs) {
        vd_free(buf);
        for (int i = 0; i < 5; i++) acc_drop(accs[i]);
        return VD_OOM(c->diag);
      }
      for (int64_t i = 0; i < g.h; i++) {
        for (int64_t j = 0; j < g.f; j++) tmp[j] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], hd[j]);
        gs[i] = vd_smt_mul(s, gy[i], vd_smt_csum(s, k.f, (size_t)g.f, tmp));
        go[i] = vd_smt_mul(s, gate, gy[i]);
      }
      acc_add(&gg, t * g.G + g.col0 + e, vd_smt_csum(s, k.h, (size_t)g.h, gs));
      vd_free(gs);
      for (int64_t j = 0; j < g.f; j++) {
        for (int64_t i = 0; i < g.h; i++) {
          tmp[i] = vd_smt_mul(s, w2[(e * g.h + i) * g.f + j], go[i]);
          acc_add(&gw2, (e * g.h + i) * g.f + j, vd_smt_mul(s, go[i], hd[j]));
        }
        vd_term gh = vd_smt_csum(s, k.h, (size_t)g.h, tmp);
        vd_term f3[3] = {gh, b[j], silu_grad_t(s, a[j])};
        ga[j] = vd_smt_prod(s, 3, f3);
        gbv[j] = vd_smt_mul(s, gh, silu_t(s, a[j]));
      }
      for (int64_t j = 0; j < g.f; j++)
        for (int64_t i = 0; i < g.h; i++) {
          int64_t w = (e * g.f + j) * g.h + i;
          acc_add(&gw1, w, vd_smt_mul(s, ga[j], x[i]));
          acc_add(&gw3, w, vd_smt_mul(s, gbv[j], x[i]));
          acc_add(&gx, t * g.h + i, vd_smt_mul(s, ga[j], w1[w]));
          acc_add(&gx, t * g.h + i, vd_smt_mul(s, gbv[j], w3[w]));
        }
    }
  }
  vd_free(buf);
  /* gx: over el experts and f; gg: one term; gw1, gw3, gw2: over t rows */
  vd_term kx = k.el && k.f ? vd_smt_mul(s, k.el, k.f) : k.el ? k.el : k.f;
  vd_term kacc[5] = {kx, NULL, k.t, k.t, k.t};
  for (int i = 0; i < 5; i++) acc_done(s, accs[i], OUT(i), kacc[i]);
  return VD_OK;
}
