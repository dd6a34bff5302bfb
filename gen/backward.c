/*
 * gen/backward.c - the derived backward: one backward op per forward op of the
 * tape, in reverse, by a per-operator rule table; gradients of
 * multi-consumed tensors summed, weight gradients accumulated over the
 * microbatches.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- backward --------------------------------------------------------- */

/* Gradient dtensor of forward dtensor x (a fresh one for weights when nm > 1). */
static int grad_for(vd_gen_ctx *g, int x) {
  vd_gen_dt *s = &g->dts[x];
  if (s->is_weight) {
    if (g->nm == 1) return s->wacc;
    vd_gen_lay gl = s->gl;
    return vd_gen_i_new_dt(g, s->stage, s->layer, vd_gen_i_fmt(g, "%s.grad", s->name), VD_DT_F64, VD_ROLE_GRAD,
                  VD_SCOPE_PER_MB, s->ndim, s->gshape, gl, 0);
  }
  char nm[256];
  snprintf(nm, sizeof(nm), "%s.grad", s->name);
  int gd = vd_gen_i_new_dt(g, s->stage, s->layer, nm, VD_DT_F64, VD_ROLE_GRAD, VD_SCOPE_PER_MB, s->ndim, s->gshape,
                  s->gl, s->nolin || s->gnolin);
  return gd;
}

typedef struct {
  const char *fwd, *bwd;
  int saved[6];  /* forward inputs read (index into forward inputs), -1 ends; 100 = forward output 0 */
  int grads[6];  /* forward inputs that get a gradient output, -1 ends */
} bwd_rule;

static const bwd_rule rules[] = {
    {"linear", "linear_backward", {0, 1, -1}, {0, 1, -1}},
    {"matmul", "matmul_backward", {0, 1, -1}, {0, 1, -1}},
    {"mul", "mul_backward", {0, 1, -1}, {0, 1, -1}},
    {"add", "add_backward", {-1}, {0, 1, -1}},
    {"sub", "sub_backward", {-1}, {0, 1, -1}},
    {"silu", "silu_backward", {0, -1}, {0, -1}},
    {"exp", "exp_backward", {0, -1}, {0, -1}},
    {"log", "log_backward", {0, -1}, {0, -1}},
    {"softmax", "softmax_backward", {100, -1}, {0, -1}},
    {"scale", "scale_backward", {-1}, {0, -1}},
    {"rope", "rope_backward", {-1}, {0, -1}},
    {"causal_mask", "causal_mask_backward", {-1}, {0, -1}},
    {"sum", "sum_backward", {-1}, {0, -1}},
    {"view", "view", {-1}, {0, -1}},
    {"transpose", "transpose", {-1}, {0, -1}},
    {"identity", "identity", {-1}, {0, -1}},
    {"expand", "sum_to", {-1}, {0, -1}},
    {"embedding", "embedding_backward", {0, -1}, {1, -1}},
    {"pick", "pick_backward", {1, -1}, {0, -1}},
    {"rms_norm", "rms_norm_backward", {0, 1, -1}, {0, 1, -1}},
    {"topk_gate", "topk_gate_backward", {0, -1}, {0, -1}},
    {"grouped_mlp", "grouped_mlp_backward", {0, 1, 2, 3, 4, -1}, {0, 1, 2, 3, 4, -1}},
};

/* Records gd as the gradient of forward input x; weights accumulate. */
static int set_grad(vd_gen_ctx *g, int x, int gd, const char *name, int layer) {
  vd_gen_dt *s = &g->dts[x];
  if (s->is_weight) {
    if (g->nm > 1) {
      int acc = s->wacc;
      int in[2] = {acc, gd};
      if (vd_gen_i_emit_spmd(g, "accumulate", name, layer, VD_PHASE_BWD, g->seg_bwd, in, 2, &acc, 1, NULL, 0, -1) < 0)
        return -1;
    }
    s->grad = s->wacc;
    return 0;
  }
  if (s->grad >= 0) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: a tensor got two gradients without multiref", s->name);
    return -1;
  }
  s->grad = gd;
  return 0;
}

static int backward_op(vd_gen_ctx *g, const vd_gen_op *o) {
  /* output gradients */
  int gy[VD_GEN_MAX_IO], have = 0;
  for (int i = 0; i < o->nout; i++) {
    gy[i] = g->dts[o->out[i]].grad;
    have += gy[i] >= 0;
  }
  int rg = 0;
  for (int i = 0; i < o->nin; i++) rg |= g->dts[o->in[i]].rg;
  if (!have || !rg) return 0;
  if (have != o->nout) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: an output of a forward op has no gradient", o->name);
    return -1;
  }
  if (o->kind == K_MOVE) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0 || vd_gen_i_emit_move(g, gy[0], gx, o->name, o->layer, g->seg_bwd) < 0) return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  if (o->kind == K_ENTRY || o->kind == K_COLL) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0) return -1;
    const char *bop = "identity";
    int axis = o->axis;
    vd_gen_attr at[2];
    int nat = 0;
    memset(at, 0, sizeof(at));
    if (o->kind == K_ENTRY) bop = "all_reduce";
    else if (!strcmp(o->op, "all_reduce")) bop = "identity", axis = -1;
    else if (!strcmp(o->op, "all_gather")) bop = "reduce_scatter", at[0] = o->attrs[0], nat = 1;
    else if (!strcmp(o->op, "reduce_scatter")) bop = "all_gather", at[0] = o->attrs[0], nat = 1;
    else if (!strcmp(o->op, "all_to_all")) {
      at[0] = o->attrs[1], at[0].key = "split_dim";
      at[1] = o->attrs[0], at[1].key = "concat_dim";
      bop = "all_to_all", nat = 2;
    }
    if (vd_gen_i_emit_spmd(g, bop, o->name, o->layer, axis >= 0 ? VD_PHASE_COMM : VD_PHASE_BWD, g->seg_bwd, gy, 1, &gx, 1,
                  at, nat, axis) < 0)
      return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  if (!strcmp(o->op, "multiref")) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0) return -1;
    if (vd_gen_i_emit_spmd(g, "multiref_backward", o->name, o->layer, VD_PHASE_BWD, g->seg_bwd, gy, o->nout, &gx, 1, NULL, 0,
                  -1) < 0)
      return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  const bwd_rule *ru = NULL;
  for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
    if (!strcmp(rules[i].fwd, o->op)) ru = &rules[i];
  if (!ru) {
    vd_gen_i_fail(g, VD_EINTERNAL, vd_gen_i_fmt(g, "generator bug: no backward rule for '%s'", o->op), o->name);
    return -1;
  }
  int bin[VD_GEN_MAX_IO], nbin = 0, bout[VD_GEN_MAX_IO], nbout = 0;
  for (int k = 0; ru->saved[k] >= 0; k++) bin[nbin++] = ru->saved[k] == 100 ? o->out[0] : o->in[ru->saved[k]];
  bin[nbin++] = gy[0];
  for (int k = 0; ru->grads[k] >= 0; k++) {
    int gx = grad_for(g, o->in[ru->grads[k]]);
    if (gx < 0) return -1;
    bout[nbout++] = gx;
  }
  if (vd_gen_i_emit_spmd(g, ru->bwd, o->name, o->layer, VD_PHASE_BWD, g->seg_bwd, bin, nbin, bout, nbout, o->attrs, o->nattr,
                -1) < 0)
    return -1;
  for (int k = 0; ru->grads[k] >= 0; k++)
    if (set_grad(g, o->in[ru->grads[k]], bout[k], o->name, o->layer) < 0) return -1;
  return 0;
}

vd_rc vd_gen_i_emit_backward(vd_gen_ctx *g) {
  if (VD_NEVER(g->loss_dt < 0)) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: no loss", NULL);
    return vd_gen_i_rc(g);
  }
  vd_gen_dt *L = &g->dts[g->loss_dt];
  int seed = vd_gen_i_new_dt(g, L->stage, -1, "loss.grad", VD_DT_F64, VD_ROLE_GRAD, VD_SCOPE_PER_MB, L->ndim, L->gshape,
                    L->gl, 0);
  GEN_CK(seed);
  g->dts[g->loss_dt].grad = seed;
  for (size_t i = g->n_emitted; i-- > 0;) GEN_CK(backward_op(g, &g->emitted[i]));
  return VD_OK;
}
