/*
 * gen/moe.c - DeepSeek-style mixture of experts: Llama-3 attention
 * (llama3.c) and an FFN made of a router (linear + topk_gate), routed
 * experts (grouped_mlp) and a shared expert (SwiGLU), summed.
 *
 * Parallel forms: the router runs on the norm output before the TP region
 * (so its gradient is not counted once per TP rank); the gates and the
 * tokens enter the TP region; experts are TP-split on their FFN dim (their
 * output is a partial sum, reduced with the shared expert's); EP spreads the
 * experts over the EP ranks, which are data parallel for everything else:
 * an all_to_all dispatches every token (and its gates for the receiver's
 * experts) to every EP rank, a second all_to_all brings the contributions
 * back, and a sum combines them.  Flattened token tensors and the dispatched
 * buffers have no single counterpart that is a slice: they carry no lineage.
 */
#include "gen_models.h"

/* view helper */
static int view(vd_gen_ctx *g, int x, const char *name, int l, int ndim, const int64_t *shape, vd_gen_lay fl,
                int nolin) {
  int y = vd_gen_i_f1(g, "view", name, l, &x, 1, ndim, shape, fl);
  if (nolin) vd_gen_i_nolin(g, y);
  return y;
}

/* The FFN norm of x (out: *hn) and the router on it, before the TP region:
 * returns the gates [B, S, E]. */
static int norm_and_route(vd_gen_ctx *g, int l, int x, int *hn) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t B = c->batch, S = c->seq, H = c->hidden, E = c->experts, T = B * S;
  vd_gen_lay res = vd_gen_i_res_lay(g);
  int64_t ws[1] = {H}, xs[3] = {B, S, H};
  /* norm (its gradient: parts over cp, ep; over tp under SP) */
  vd_gen_lay nl = vd_gen_i_lay(g->sp ? LP : LR, LP, LP, -1);
  int wn = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.ffn_norm.weight", l), 1, ws,
                           vd_gen_i_lay(LR, LR, LR, -1), nl);
  int in[2] = {x, wn};
  *hn = vd_gen_i_f1(g, "rms_norm", vd_gen_i_fmt(g, "layers.%d.ffn_norm", l), l, in, 2, 3, xs, res);
  vd_gen_i_af(g, "eps", 1e-5);
  /* router on the norm output, before the TP region */
  int64_t rs[2] = {E, H}, ls[3] = {B, S, E}, lf[2] = {T, E};
  int wr = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.router.weight", l), 2, rs,
                           vd_gen_i_lay(LR, LR, LR, -1), nl);
  int ir[2] = {*hn, wr};
  int logits = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "layers.%d.moe.router", l), l, ir, 2, 3, ls, res);
  vd_gen_lay tokr = vd_gen_i_lay(g->sp ? 0 : LR, 0, 0, 0);
  int lflat = view(g, logits, vd_gen_i_fmt(g, "layers.%d.moe.router.flat", l), l, 2, lf, tokr, 1);
  int gates = vd_gen_i_f1(g, "topk_gate", vd_gen_i_fmt(g, "layers.%d.moe.gate", l), l, &lflat, 1, 2, lf, tokr);
  vd_gen_i_ai(g, "k", c->topk);
  vd_gen_i_nolin(g, gates);
  return view(g, gates, vd_gen_i_fmt(g, "layers.%d.moe.gates", l), l, 3, ls, res, 0);
}

/* EP dispatch: every token (hflat) to every EP rank, with its gates
 * (gflat) for that rank's experts; out: the received tokens and gates. */
static void dispatch(vd_gen_ctx *g, int l, int hflat, int gflat, int *xd, int *gd) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t H = c->hidden, E = c->experts, EP = g->ep, T = c->batch * c->seq;
  int64_t x1[3] = {1, T, H}, xr[3] = {EP, T, H}, xa[2] = {EP * T, H};
  vd_gen_lay r1 = vd_gen_i_lay(LR, 1, 1, 1);
  int t1 = view(g, hflat, vd_gen_i_fmt(g, "layers.%d.moe.dispatch.unsqueeze", l), l, 3, x1, r1, 1);
  int t2 = vd_gen_i_f1(g, "expand", vd_gen_i_fmt(g, "layers.%d.moe.dispatch.expand", l), l, &t1, 1, 3, xr, r1);
  vd_gen_i_nolin(g, t2);
  int t3 = vd_gen_i_act(g, st, vd_gen_i_fmt(g, "layers.%d.moe.dispatch.tokens", l), 3, xr, r1);
  vd_gen_i_nolin(g, t3);
  vd_gen_i_alltoall(g, AX_EP, t2, t3, 0, 0, vd_gen_i_fmt(g, "layers.%d.moe.dispatch", l), l);
  *xd = view(g, t3, vd_gen_i_fmt(g, "layers.%d.moe.dispatch.flat", l), l, 2, xa, vd_gen_i_lay(LR, 0, 0, 0), 1);
  int64_t g3[3] = {T, EP, E / EP}, gt[3] = {EP, T, E / EP}, ga[2] = {EP * T, E / EP};
  int u1 = view(g, gflat, vd_gen_i_fmt(g, "layers.%d.moe.gates.split", l), l, 3, g3, vd_gen_i_lay(LR, 0, 0, 0), 1);
  int u2 = vd_gen_i_f1(g, "transpose", vd_gen_i_fmt(g, "layers.%d.moe.gates.t", l), l, &u1, 1, 3, gt, r1);
  vd_gen_i_ai(g, "dim0", 0);
  vd_gen_i_ai(g, "dim1", 1);
  vd_gen_i_nolin(g, u2);
  int u3 = vd_gen_i_act(g, st, vd_gen_i_fmt(g, "layers.%d.moe.dispatch.gates", l), 3, gt, r1);
  vd_gen_i_nolin(g, u3);
  vd_gen_i_alltoall(g, AX_EP, u2, u3, 0, 0, vd_gen_i_fmt(g, "layers.%d.moe.dispatch_gates", l), l);
  *gd = view(g, u3, vd_gen_i_fmt(g, "layers.%d.moe.dispatch.gates.flat", l), l, 2, ga, vd_gen_i_lay(LR, 0, 0, 0), 1);
}

/* EP combine: the experts' contributions y back to the tokens' ranks,
 * summed; returns the sum [T, H]. */
static int combine(vd_gen_ctx *g, int l, int y) {
  int st = vd_gen_i_stage(g, l);
  int64_t H = g->c->hidden, EP = g->ep, T = g->c->batch * g->c->seq;
  int64_t xr[3] = {EP, T, H}, xf2[2] = {T, H};
  vd_gen_lay r1 = vd_gen_i_lay(LP, 1, 1, 1);
  int c1 = view(g, y, vd_gen_i_fmt(g, "layers.%d.moe.combine.split", l), l, 3, xr, r1, 1);
  int c2 = vd_gen_i_act(g, st, vd_gen_i_fmt(g, "layers.%d.moe.combine.tokens", l), 3, xr, r1);
  vd_gen_i_nolin(g, c2);
  vd_gen_i_alltoall(g, AX_EP, c1, c2, 0, 0, vd_gen_i_fmt(g, "layers.%d.moe.combine", l), l);
  y = vd_gen_i_f1(g, "sum", vd_gen_i_fmt(g, "layers.%d.moe.combine.sum", l), l, &c2, 1, 2, xf2,
                  vd_gen_i_lay(LP, 0, 0, 0));
  int64_t d0[1] = {0};
  vd_gen_i_aints(g, "dims", d0, 1);
  vd_gen_i_ai(g, "keepdim", 0);
  vd_gen_i_nolin(g, y);
  return y;
}

/* The routed experts on the TP region's tokens h and gates: returns their
 * output [B, S, H], a partial sum over TP. */
static int routed_experts(vd_gen_ctx *g, int l, int h, int gates) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t B = c->batch, S = c->seq, H = c->hidden, F = c->ffn, E = c->experts, EP = g->ep, T = B * S;
  vd_gen_lay tok = vd_gen_i_lay(LR, 0, 0, 0); /* flat tokens [T, *]: batch*seq rows */
  int64_t xs[3] = {B, S, H}, lf[2] = {T, E}, xf[2] = {T, H};
  int hflat = view(g, h, vd_gen_i_fmt(g, "layers.%d.moe.tokens", l), l, 2, xf, tok, 1);
  int gflat = view(g, gates, vd_gen_i_fmt(g, "layers.%d.moe.gates.flat", l), l, 2, lf, tok, 1);
  int64_t w13[3] = {E, F, H}, w2s[3] = {E, H, F};
  vd_gen_lay l13 = vd_gen_i_lay(1, LR, 0, -1), l2 = vd_gen_i_lay(2, LR, 0, -1);
  vd_gen_lay g13 = vd_gen_i_lay(1, LP, 0, -1), g2 = vd_gen_i_lay(2, LP, 0, -1);
  int w1 = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.experts.w1", l), 3, w13, l13, g13);
  int w3 = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.experts.w3", l), 3, w13, l13, g13);
  int w2 = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.experts.w2", l), 3, w2s, l2, g2);
  int xd = hflat, gd = gflat;
  if (EP > 1) dispatch(g, l, hflat, gflat, &xd, &gd);
  int64_t ys[2] = {EP * T, H};
  vd_gen_lay yl = vd_gen_i_lay(LP, 0, 0, 0);
  int gi[5] = {xd, gd, w1, w3, w2};
  int y = vd_gen_i_f1(g, "grouped_mlp", vd_gen_i_fmt(g, "layers.%d.moe.experts", l), l, gi, 5, 2, EP > 1 ? ys : xf, yl);
  vd_gen_i_ai_rank(g, "expert_start", 0, AX_EP, E / EP);
  vd_gen_i_nolin(g, y);
  if (EP > 1) y = combine(g, l, y);
  vd_gen_lay part = vd_gen_i_lay(LP, 1, LR, 0);
  return view(g, y, vd_gen_i_fmt(g, "layers.%d.moe.routed", l), l, 3, xs, part, 0);
}

/* The shared expert (SwiGLU, column/row parallel) on h: returns its output
 * [B, S, H], a partial sum over TP. */
static int shared_expert(vd_gen_ctx *g, int l, int h) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t H = c->hidden, F = c->ffn;
  int64_t s13[2] = {F, H}, s2[2] = {H, F};
  vd_gen_lay col = vd_gen_i_lay(0, LR, LR, -1), row = vd_gen_i_lay(1, LR, LR, -1);
  vd_gen_lay colg = col, rowg = row;
  colg.ax[AX_CP] = LP, rowg.ax[AX_CP] = LP;
  int sg = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.shared.gate.weight", l), 2, s13, col, colg);
  int su = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.shared.up.weight", l), 2, s13, col, colg);
  int sd = vd_gen_i_weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.moe.shared.down.weight", l), 2, s2, row, rowg);
  return vd_gen_i_swiglu_core(g, l, vd_gen_i_fmt(g, "layers.%d.moe.shared", l), h, sg, su, sd);
}

static int moe_ffn(vd_gen_ctx *g, int l, int x) {
  const vd_gen_config *c = g->c;
  int64_t xs[3] = {c->batch, c->seq, c->hidden};
  vd_gen_lay res = vd_gen_i_res_lay(g);
  int hn;
  int gates = norm_and_route(g, l, x, &hn);
  /* into the TP region */
  int h;
  if (g->sp) {
    gates = vd_gen_i_allgather(g, AX_TP, gates, 1, vd_gen_i_fmt(g, "layers.%d.moe.gates.all_gather", l), l);
    h = vd_gen_i_allgather(g, AX_TP, hn, 1, vd_gen_i_fmt(g, "layers.%d.ffn_norm.all_gather", l), l);
  } else {
    gates = vd_gen_i_enter(g, AX_TP, gates, vd_gen_i_fmt(g, "layers.%d.moe.gates.enter", l), l);
    h = vd_gen_i_enter(g, AX_TP, hn, vd_gen_i_fmt(g, "layers.%d.ffn_norm.enter", l), l);
  }
  /* hn also feeds the router: the entered copy's gradient is only the
   * experts' share of hn's, so it is not annotated as hn's */
  if (h != hn) vd_gen_i_nolin(g, h);
  int routed = routed_experts(g, l, h, gates);
  int shared = shared_expert(g, l, h);
  vd_gen_lay part = vd_gen_i_lay(LP, 1, LR, 0);
  int ia[2] = {routed, shared};
  int out = vd_gen_i_f1(g, "add", vd_gen_i_fmt(g, "layers.%d.moe.out", l), l, ia, 2, 3, xs, part);
  out = vd_gen_i_region_exit(g, out, l, vd_gen_i_fmt(g, "layers.%d.moe", l));
  int ir2[2] = {x, out};
  return vd_gen_i_f1(g, "add", vd_gen_i_fmt(g, "layers.%d.ffn.residual", l), l, ir2, 2, 3, xs, res);
}

vd_rc vd_gen_i_moe(vd_gen_ctx *g) { return vd_gen_i_llama_decoder(g, moe_ffn); }
