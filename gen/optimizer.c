/*
 * gen/optimizer.c - after the backward: gradient reduction over DP and over
 * the axes whose ranks see different data, tied-embedding gradients,
 * global grad-norm clipping, the optimizer step (SGD or Adam, ZeRO-1) and
 * the zeroing of the gradient accumulators.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- gradient reduction, clipping, optimizer -------------------------- */

unsigned vd_gen_i_lp_mask(vd_gen_lay l) {
  unsigned m = 0;
  for (int a = 0; a < AX_N; a++)
    if (l.ax[a] == LP) m |= 1u << a;
  return m;
}

/* A one-rank-per-stage-rank op in the opt segment. */
static int opt_node(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin, const int *out,
                    int nout, const vd_gen_attr *at, int nat) {
  return vd_gen_i_emit_spmd(g, op, name, layer, VD_PHASE_OPT, g->seg_opt, in, nin, out, nout, at, nat, -1);
}

/* Collective over the axes in mask (+ replicas when span) in the opt segment. */
static int opt_coll(vd_gen_ctx *g, const char *op, const char *name, int layer, int x, int y, unsigned mask, int span,
                    const vd_gen_attr *at, int nat) {
  int stage = g->dts[x].stage;
  return vd_gen_i_emit_coll(g, stage, g->seg_opt[stage], op, name, layer, x, y, mask, span, at, nat);
}

/* One attribute, every other field zero. */
static vd_gen_attr fattr(const char *k, double v) { return (vd_gen_attr){.key = k, .kind = VD_ATTR_FLOAT, .f = v}; }
vd_gen_attr vd_gen_i_iattr(const char *k, int64_t v) { return (vd_gen_attr){.key = k, .kind = VD_ATTR_INT, .i = v}; }

typedef struct {
  int w, grad, wshard, zmask_used;
} wstate;

/* 0. Tied weights (pp > 1): the first and the last stage's copies sum their
 * gradients by an all_reduce over [first-stage rank, last-stage rank] of
 * the same (tp, cp, ep) coordinates (Megatron's embedding group), before
 * the DP reducer; afterwards both hold the same parts of the single grad. */
static vd_rc opt_tied(vd_gen_ctx *g) {
  for (size_t i = 0; i < g->n_weights; i++) {
    int w = g->weights[i], w2 = g->dts[w].tied;
    if (w2 < 0 || g->dts[w].stage != 0) continue;
    int pair[2] = {w, w2}, out[2];
    for (int k = 0; k < 2; k++) {
      vd_gen_dt W = g->dts[pair[k]];
      vd_gen_lay gl = W.gl;
      gl.tcopy = 0;
      out[k] = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, gl, 0);
      GEN_CK(out[k]);
    }
    for (int64_t r = 0; r < g->rps; r++) {
      int64_t key = g->next_key + r;
      int64_t grp[2] = {vd_gen_i_rank_of(g, g->dts[w].stage, r), vd_gen_i_rank_of(g, g->dts[w2].stage, r)};
      for (int k = 0; k < 2; k++) {
        vd_gen_dt *W = &g->dts[pair[k]];
        uint32_t ti = g->dts[W->wacc].t[r], to = g->dts[out[k]].t[r];
        GEN_CK(vd_gen_i_emit(g, W->stage, r, g->seg_opt[W->stage], "all_reduce", vd_gen_i_fmt(g, "%s.grad.tied", W->name),
                    W->layer, VD_PHASE_COMM, &ti, 1, &to, 1, NULL, 0, key, grp, 2, 0));
      }
    }
    g->next_key += g->rps;
    g->dts[w].tgrad = out[0];
    g->dts[w2].tgrad = out[1];
  }
  return VD_OK;
}

/* 1. Gradient reduction: all_reduce (or ZeRO reduce_scatter onto a weight
 * shard) over the ranks that hold value parts, spanning the DP replicas.
 * Fills ws[i] (weight, reduced gradient, the weight or its shard). */
static vd_rc opt_reduce(vd_gen_ctx *g, wstate *ws) {
  const vd_gen_config *c = g->c;
  for (size_t i = 0; i < g->n_weights; i++) {
    int w = g->weights[i];
    vd_gen_dt W = g->dts[w];
    int acc = W.tgrad >= 0 ? W.tgrad : W.wacc;
    unsigned mask = vd_gen_i_lp_mask(W.gl);
    int64_t gsize = 1;
    for (int a = 0; a < AX_N; a++)
      if (mask & (1u << a)) gsize *= g->deg[a];
    ws[i].w = w;
    ws[i].grad = acc;
    ws[i].wshard = w;
    if (c->zero && gsize * g->dp > 1 && g->par) {
      vd_gen_lay zl = W.fl;
      zl.zero = 1;
      zl.zmask = (uint8_t)mask;
      int gs = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, zl, 0);
      int wsh = vd_gen_i_new_dt(g, W.stage, W.layer, W.name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, W.ndim, W.gshape,
                       zl, 0);
      GEN_CK(gs);
      GEN_CK(wsh);
      vd_gen_attr at = vd_gen_i_iattr("dim", 0);
      GEN_CK(opt_coll(g, "reduce_scatter", vd_gen_i_fmt(g, "%s.grad", W.name), W.layer, acc, gs, mask, g->dp > 1, &at, 1));
      ws[i].grad = gs;
      ws[i].wshard = wsh;
      ws[i].zmask_used = 1;
    } else if (gsize * g->dp > 1) {
      vd_gen_lay fl = vd_gen_i_grad_default(W.gl);
      int gr = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, fl, 0);
      GEN_CK(gr);
      GEN_CK(opt_coll(g, "all_reduce", vd_gen_i_fmt(g, "%s.grad", W.name), W.layer, acc, gr, mask, g->dp > 1, NULL, 0));
      ws[i].grad = gr;
    }
  }
  return VD_OK;
}

/* 2a. Per stage, the sum of the squares of its gradients' elements, each
 * element counted once (local[s]; -1 for a stage without weights). */
static vd_rc clip_local_sums(vd_gen_ctx *g, const wstate *ws, int total_ranks, int *local) {
  size_t nw = g->n_weights;
  for (int s = 0; s < g->pp; s++) local[s] = -1;
  for (size_t i = 0; i < nw; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    int s = W.stage;
    /* a tied weight's elements are counted once: on the first stage's copy */
    if (W.tied >= 0 && s != 0) continue;
    int sq = vd_gen_i_new_dt(g, s, W.layer, vd_gen_i_fmt(g, "%s.grad.sumsq", W.name), VD_DT_F64, VD_ROLE_ACT,
                    VD_SCOPE_PERSISTENT, 0, W.gshape, vd_gen_i_lay(LR, LR, LR, -1), total_ranks);
    GEN_CK(sq);
    GEN_CK(opt_node(g, "sumsq", g->dts[sq].name, W.layer, &ws[i].grad, 1, &sq, 1, NULL, 0));
    /* each element counted once: divide by the number of stored ranks (and
     * replicas, when the all_reduce spans them) holding a copy */
    int64_t repl = 1;
    vd_gen_lay gl = g->dts[ws[i].grad].fl;
    for (int a = 0; a < AX_N; a++)
      if (gl.ax[a] < 0 && !(gl.zero && (gl.zmask & (1u << a)))) repl *= g->deg[a];
    if (repl > 1) {
      int sc = vd_gen_i_new_dt(g, s, W.layer, vd_gen_i_fmt(g, "%s.grad.sumsq.scaled", W.name), VD_DT_F64, VD_ROLE_ACT,
                      VD_SCOPE_PERSISTENT, 0, W.gshape, vd_gen_i_lay(LR, LR, LR, -1), 1);
      vd_gen_attr at = fattr("factor", 1.0 / (double)repl);
      GEN_CK(sc);
      GEN_CK(opt_node(g, "scale", g->dts[sc].name, W.layer, &sq, 1, &sc, 1, &at, 1));
      sq = sc;
    }
    if (local[s] < 0) {
      local[s] = sq;
      continue;
    }
    /* the last add of the single plan's chain is the total */
    int last = !total_ranks && i + 1 == nw;
    const char *snm = last ? "grad_norm_sq" : vd_gen_i_fmt(g, "grad_norm_sq.partial.%zu", i);
    int sum = vd_gen_i_new_dt(g, s, -1, snm, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, W.gshape,
                     vd_gen_i_lay(LR, LR, LR, -1), 1);
    int in[2] = {local[s], sq};
    GEN_CK(sum);
    GEN_CK(opt_node(g, "add", "grad_norm_sq", -1, in, 2, &sum, 1, NULL, 0));
    local[s] = sum;
  }
  return VD_OK;
}

/* 2b. The global squared norm on every stage (total[s]): an all_reduce of
 * the stages' local sums over every stored rank (and the replicas under
 * ZeRO); the single plan's local sum is already the total. */
static vd_rc clip_totals(vd_gen_ctx *g, const int *local, int total_ranks, int *total) {
  if (!total_ranks) {
    total[0] = local[0];
    return VD_OK;
  }
  int64_t noshape[1] = {1};
  int64_t nstored = g->rps * g->pp;
  int span = g->c->zero && g->dp > 1;
  int64_t key = g->next_key++;
  int64_t *grp = vd_malloc((size_t)nstored * sizeof(int64_t));
  if (!grp) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return vd_gen_i_rc(g);
  }
  for (int64_t r = 0; r < nstored; r++) grp[r] = r;
  for (int s = 0; s < g->pp; s++) {
    total[s] = vd_gen_i_new_dt(g, s, -1, "grad_norm_sq", VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, noshape,
                      vd_gen_i_lay(LR, LR, LR, -1), 0);
    if (total[s] < 0 || local[s] < 0) break;
    for (int64_t r = 0; r < g->rps; r++) {
      uint32_t ti = g->dts[local[s]].t[r], to = g->dts[total[s]].t[r];
      if (vd_gen_i_emit(g, s, r, g->seg_opt[s], "all_reduce", "grad_norm_sq", -1, VD_PHASE_COMM, &ti, 1, &to, 1, NULL, 0,
               key, grp, (int)nstored, span) < 0)
        break;
    }
  }
  vd_free(grp);
  return g->failed ? vd_gen_i_rc(g) : VD_OK;
}

/* 2. Global gradient-norm clipping: every gradient times clip_coef(norm). */
static vd_rc opt_clip(vd_gen_ctx *g, wstate *ws) {
  int64_t noshape[1] = {1};
  int64_t nstored = g->rps * g->pp;
  int total_ranks = g->par && (nstored > 1 || g->dp > 1);
  int *local = vd_calloc((size_t)g->pp, sizeof(int));
  int *total = vd_calloc((size_t)g->pp, sizeof(int));
  vd_rc rc = VD_OK;
  if (!local || !total) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    rc = vd_gen_i_rc(g);
    goto done;
  }
  if ((rc = clip_local_sums(g, ws, total_ranks, local)) != VD_OK) goto done;
  if ((rc = clip_totals(g, local, total_ranks, total)) != VD_OK) goto done;
  for (int s = 0; s < g->pp; s++) {
    int cc = vd_gen_i_new_dt(g, s, -1, "clip_coef", VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, noshape,
                    vd_gen_i_lay(LR, LR, LR, -1), 0);
    vd_gen_attr at = fattr("max_norm", g->c->grad_clip);
    if (cc < 0 || opt_node(g, "clip_coef", "clip_coef", -1, &total[s], 1, &cc, 1, &at, 1) < 0) {
      rc = vd_gen_i_rc(g);
      goto done;
    }
    total[s] = cc;
  }
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    vd_gen_dt G = g->dts[ws[i].grad];
    int cl = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad.clipped", W.name), VD_DT_F64, VD_ROLE_GRAD,
                    VD_SCOPE_PERSISTENT, W.ndim, W.gshape, G.fl, 0);
    int in[2] = {ws[i].grad, total[W.stage]};
    if (cl < 0 || opt_node(g, "mul", vd_gen_i_fmt(g, "%s.clip", W.name), W.layer, in, 2, &cl, 1, NULL, 0) < 0) {
      rc = vd_gen_i_rc(g);
      goto done;
    }
    ws[i].grad = cl;
  }
done:
  vd_free(local);
  vd_free(total);
  return rc;
}

/* 3. Optimizer step on the weight (or its ZeRO shard, then an all_gather
 * of the shards copied into the parameter). */
static vd_rc opt_step(vd_gen_ctx *g, const wstate *ws) {
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    int wsh = ws[i].wshard;
    vd_gen_lay sl = g->dts[wsh].fl;
    const char *nm = vd_gen_i_fmt(g, "%s.step", W.name);
    if (g->c->optimizer == VD_GEN_SGD) {
      vd_gen_attr at[2] = {fattr("lr", 0.01), fattr("weight_decay", 0.0)};
      int in[2] = {wsh, ws[i].grad};
      GEN_CK(opt_node(g, "sgd_step", nm, W.layer, in, 2, &wsh, 1, at, 2));
    } else {
      int m = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.exp_avg", W.name), VD_DT_F64, VD_ROLE_OPTSTATE,
                     VD_SCOPE_PERSISTENT, W.ndim, W.gshape, sl, 0);
      int v = vd_gen_i_new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.exp_avg_sq", W.name), VD_DT_F64, VD_ROLE_OPTSTATE,
                     VD_SCOPE_PERSISTENT, W.ndim, W.gshape, sl, 0);
      GEN_CK(m);
      GEN_CK(v);
      vd_gen_attr at[6] = {fattr("lr", 1e-3), fattr("beta1", 0.9), fattr("beta2", 0.95), fattr("eps", 1e-8),
                           vd_gen_i_iattr("step", 1), fattr("weight_decay", 0.1)};
      int in[4] = {wsh, ws[i].grad, m, v}, out[3] = {wsh, m, v};
      GEN_CK(opt_node(g, "adam_step", nm, W.layer, in, 4, out, 3, at, 6));
    }
    if (!ws[i].zmask_used) continue;
    /* gather the updated shards, then copy into the parameter (param.copy_
     * as zero + accumulate: a node that writes a tensor must read it) */
    vd_gen_attr at = vd_gen_i_iattr("dim", 0), z = fattr("factor", 0.0);
    int full = vd_gen_i_new_dt(g, W.stage, W.layer, W.name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, W.ndim, W.gshape,
                      W.fl, 0);
    GEN_CK(full);
    GEN_CK(opt_coll(g, "all_gather", W.name, W.layer, wsh, full, sl.zmask, g->dp > 1, &at, 1));
    int in[2] = {ws[i].w, full};
    GEN_CK(opt_node(g, "scale", vd_gen_i_fmt(g, "%s.copy", W.name), W.layer, &ws[i].w, 1, &ws[i].w, 1, &z, 1));
    GEN_CK(opt_node(g, "accumulate", vd_gen_i_fmt(g, "%s.copy", W.name), W.layer, in, 2, &ws[i].w, 1, NULL, 0));
  }
  return VD_OK;
}

/* Gradient reduction, clipping and the optimizer step, in the opt segment. */
vd_rc vd_gen_i_emit_optimizer(vd_gen_ctx *g) {
  wstate *ws = vd_calloc(g->n_weights ? g->n_weights : 1, sizeof(*ws));
  if (!ws) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return vd_gen_i_rc(g);
  }
  vd_rc rc = opt_tied(g);
  if (rc == VD_OK) rc = opt_reduce(g, ws);
  if (rc == VD_OK && g->c->grad_clip > 0) rc = opt_clip(g, ws);
  if (rc == VD_OK) rc = opt_step(g, ws);
  vd_free(ws);
  return rc;
}

/* Zeroes the persistent gradient accumulators once before the microbatches. */
vd_rc vd_gen_i_emit_zero(vd_gen_ctx *g) {
  if (g->nm == 1) return VD_OK;
  vd_gen_attr at = fattr("factor", 0.0);
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt *W = &g->dts[g->weights[i]];
    int acc = W->wacc;
    GEN_CK(vd_gen_i_emit_spmd(g, "scale", vd_gen_i_fmt(g, "%s.zero_grad", W->name), W->layer, VD_PHASE_OPT, g->seg_zero, &acc,
                     1, &acc, 1, &at, 1, -1));
  }
  return VD_OK;
}
