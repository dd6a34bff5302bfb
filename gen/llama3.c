/*
 * gen/llama3.c - the Llama-3 style dense decoder:
 *   embedding -> L x [rms_norm, GQA attention with RoPE and causal mask,
 *   residual, rms_norm, SwiGLU FFN, residual] -> rms_norm -> LM head ->
 *   cross-entropy (written out as docs/operators.md says) or sum loss.
 * Parallel forms (Megatron-LM): vocab-parallel embedding and LM head,
 * column-parallel q/k/v/gate/up, row-parallel o/down, SP (reduce_scatter /
 * all_gather on the sequence dim instead of all_reduce / identity), CP
 * (sequence split; K and V all-gathered over the CP group; rope and the
 * causal mask at global positions).  The attention and head pieces are
 * shared with moe.c.
 */
#include "gen_models.h"

#include <math.h>
#include <stdio.h>

#define ROPE_THETA 500000.0
#define NORM_EPS 1e-5

/* residual stream: [B, S, H], batch dim 0, seq split by cp (and tp under SP) */
vd_gen_lay vd_gen_i_res_lay(const vd_gen_ctx *g) { return vd_gen_i_lay(g->sp ? 1 : LR, 1, LR, 0); }

/* gradient layout of a weight: split like it, parts over the ranks that see
 * other tokens (cp always; tp for norms under SP) */
static vd_gen_lay wgrad(const vd_gen_ctx *g, vd_gen_lay fl, int norm) {
  vd_gen_lay gl = fl;
  gl.ax[AX_CP] = LP;
  if (norm && g->sp) gl.ax[AX_TP] = LP;
  return gl;
}

static int weight(vd_gen_ctx *g, int st, int l, const char *name, int ndim, const int64_t *shape, vd_gen_lay fl,
                  int norm) {
  return vd_gen_i_weight(g, st, l, name, ndim, shape, fl, wgrad(g, fl, norm));
}

/* norm + entry into the TP region (all_gather under SP) */
static int norm_enter(vd_gen_ctx *g, int x, int st, int l, const char *pfx) {
  const vd_gen_config *c = g->c;
  int64_t ws[1] = {c->hidden};
  int w = weight(g, st, l, vd_gen_i_fmt(g, "%s.weight", pfx), 1, ws, vd_gen_i_lay(LR, LR, LR, -1), 1);
  int in[2] = {x, w};
  int64_t xs[3] = {c->batch, c->seq, c->hidden};
  int h = vd_gen_i_f1(g, "rms_norm", pfx, l, in, 2, 3, xs, vd_gen_i_res_lay(g));
  vd_gen_i_af(g, "eps", NORM_EPS);
  if (g->sp) return vd_gen_i_allgather(g, AX_TP, h, 1, vd_gen_i_fmt(g, "%s.all_gather", pfx), l);
  return vd_gen_i_enter(g, AX_TP, h, vd_gen_i_fmt(g, "%s.enter", pfx), l);
}

int vd_gen_i_region_exit(vd_gen_ctx *g, int y, int l, const char *pfx) {
  if (g->sp) return vd_gen_i_reducescatter(g, AX_TP, y, 1, vd_gen_i_fmt(g, "%s.reduce_scatter", pfx), l);
  return vd_gen_i_allreduce(g, AX_TP, y, vd_gen_i_fmt(g, "%s.all_reduce", pfx), l);
}

static int embed(vd_gen_ctx *g) {
  const vd_gen_config *c = g->c;
  int64_t B = c->batch, S = c->seq, H = c->hidden, V = c->vocab;
  int64_t is[2] = {B, S}, ts[2] = {V, H}, xs[3] = {B, S, H};
  int ids = vd_gen_i_input(g, 0, "tokens", VD_DT_I64, 2, is, vd_gen_i_lay(LR, 1, LR, 0));
  vd_gen_lay tl = vd_gen_i_lay(0, LR, LR, -1), tg = wgrad(g, tl, 0);
  /* tied with the LM head on another stage: this copy's gradient is one of
   * the two copies' parts (see tied_head) */
  if (c->tie_embeddings && g->pp > 1) tg.tcopy = 1;
  int tab = vd_gen_i_weight(g, 0, -1, "embed.weight", 2, ts, tl, tg);
  if (c->tie_embeddings) g->tied_w = tab;
  int in[2] = {ids, tab};
  int e = vd_gen_i_f1(g, "embedding", "embed", -1, in, 2, 3, xs, vd_gen_i_lay(LP, 1, LR, 0));
  vd_gen_i_ai_rank(g, "start", 0, AX_TP, V / g->tp);
  return vd_gen_i_region_exit(g, e, -1, "embed");
}

/* q/k/v projection + view to heads (+ rope) */
static int proj_heads(vd_gen_ctx *g, int h, int st, int l, const char *nm, int64_t nh, int rope) {
  const vd_gen_config *c = g->c;
  int64_t B = c->batch, S = c->seq, H = c->hidden, D = c->hidden / c->heads;
  int64_t ws[2] = {nh * D, H}, ys[3] = {B, S, nh * D}, y4[4] = {B, S, nh, D};
  int w = weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.attn.%s.weight", l, nm), 2, ws, vd_gen_i_lay(0, LR, LR, -1), 0);
  int in[2] = {h, w};
  int y = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "layers.%d.attn.%s", l, nm), l, in, 2, 3, ys, vd_gen_i_lay(2, 1, LR, 0));
  y = vd_gen_i_f1(g, "view", vd_gen_i_fmt(g, "layers.%d.attn.%s.view", l, nm), l, &y, 1, 4, y4, vd_gen_i_lay(2, 1, LR, 0));
  if (rope) {
    y = vd_gen_i_f1(g, "rope", vd_gen_i_fmt(g, "layers.%d.attn.%s.rope", l, nm), l, &y, 1, 4, y4,
                    vd_gen_i_lay(2, 1, LR, 0));
    vd_gen_i_af(g, "theta", ROPE_THETA);
    vd_gen_i_ai_rank(g, "pos_offset", 0, AX_CP, S / g->cp);
    vd_gen_i_ai(g, "seq_dim", 1);
  }
  return y;
}

/* k or v [B,S,kvh,D] -> (CP all_gather) -> [B,heads,S,D] (GQA repeat) */
static int kv_heads(vd_gen_ctx *g, int y, int l, const char *nm) {
  const vd_gen_config *c = g->c;
  int64_t B = c->batch, S = c->seq, D = c->hidden / c->heads, KV = c->kv_heads, NH = c->heads, R = NH / KV;
  y = vd_gen_i_allgather(g, AX_CP, y, 1, vd_gen_i_fmt(g, "layers.%d.attn.%s.all_gather", l, nm), l);
  int64_t ts[4] = {B, KV, S, D};
  int t = vd_gen_i_f1(g, "transpose", vd_gen_i_fmt(g, "layers.%d.attn.%s.t", l, nm), l, &y, 1, 4, ts,
                      vd_gen_i_lay(1, LR, LR, 0));
  vd_gen_i_ai(g, "dim0", 1);
  vd_gen_i_ai(g, "dim1", 2);
  /* after the CP all_gather every CP rank's queries add to the K/V gradient */
  vd_gen_lay pg = vd_gen_i_lay(1, LP, LR, 0);
  vd_gen_i_set_gl(g, t, pg);
  if (R == 1) return t;
  int64_t s5[5] = {B, KV, 1, S, D}, e5[5] = {B, KV, R, S, D}, o4[4] = {B, NH, S, D};
  t = vd_gen_i_f1(g, "view", vd_gen_i_fmt(g, "layers.%d.attn.%s.unsqueeze", l, nm), l, &t, 1, 5, s5,
                  vd_gen_i_lay(1, LR, LR, 0));
  vd_gen_i_set_gl(g, t, pg);
  t = vd_gen_i_f1(g, "expand", vd_gen_i_fmt(g, "layers.%d.attn.%s.expand", l, nm), l, &t, 1, 5, e5,
                  vd_gen_i_lay(1, LR, LR, 0));
  vd_gen_i_set_gl(g, t, pg);
  t = vd_gen_i_f1(g, "view", vd_gen_i_fmt(g, "layers.%d.attn.%s.repeat", l, nm), l, &t, 1, 4, o4,
                  vd_gen_i_lay(1, LR, LR, 0));
  vd_gen_i_set_gl(g, t, pg);
  return t;
}

int vd_gen_i_llama_attention(vd_gen_ctx *g, int l, int x) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t B = c->batch, S = c->seq, H = c->hidden, NH = c->heads, D = H / NH, KV = c->kv_heads;
  x = vd_gen_i_move(g, x, st, l);
  int h = norm_enter(g, x, st, l, vd_gen_i_fmt(g, "layers.%d.attn_norm", l));
  int q = proj_heads(g, h, st, l, "q", NH, 1);
  int k = proj_heads(g, h, st, l, "k", KV, 1);
  int v = proj_heads(g, h, st, l, "v", KV, 0);
  int64_t qs[4] = {B, NH, S, D}, kts[4] = {B, NH, D, S}, ss[4] = {B, NH, S, S};
  int qt = vd_gen_i_f1(g, "transpose", vd_gen_i_fmt(g, "layers.%d.attn.q.t", l), l, &q, 1, 4, qs,
                       vd_gen_i_lay(1, 2, LR, 0));
  vd_gen_i_ai(g, "dim0", 1);
  vd_gen_i_ai(g, "dim1", 2);
  int ke = kv_heads(g, k, l, "k");
  int ve = kv_heads(g, v, l, "v");
  int kt = vd_gen_i_f1(g, "transpose", vd_gen_i_fmt(g, "layers.%d.attn.k.tt", l), l, &ke, 1, 4, kts,
                       vd_gen_i_lay(1, LR, LR, 0));
  vd_gen_i_ai(g, "dim0", 2);
  vd_gen_i_ai(g, "dim1", 3);
  vd_gen_i_set_gl(g, kt, vd_gen_i_lay(1, LP, LR, 0));
  int in[2] = {qt, kt};
  int sc = vd_gen_i_f1(g, "matmul", vd_gen_i_fmt(g, "layers.%d.attn.scores", l), l, in, 2, 4, ss, vd_gen_i_lay(1, 2, LR, 0));
  sc = vd_gen_i_f1(g, "scale", vd_gen_i_fmt(g, "layers.%d.attn.scale", l), l, &sc, 1, 4, ss, vd_gen_i_lay(1, 2, LR, 0));
  vd_gen_i_af(g, "factor", 1.0 / sqrt((double)D));
  sc = vd_gen_i_f1(g, "causal_mask", vd_gen_i_fmt(g, "layers.%d.attn.mask", l), l, &sc, 1, 4, ss,
                   vd_gen_i_lay(1, 2, LR, 0));
  vd_gen_i_ai_rank(g, "q_offset", 0, AX_CP, S / g->cp);
  vd_gen_i_ai(g, "k_offset", 0);
  int pr = vd_gen_i_f1(g, "softmax", vd_gen_i_fmt(g, "layers.%d.attn.softmax", l), l, &sc, 1, 4, ss,
                       vd_gen_i_lay(1, 2, LR, 0));
  vd_gen_i_ai(g, "dim", -1);
  int in2[2] = {pr, ve};
  int o = vd_gen_i_f1(g, "matmul", vd_gen_i_fmt(g, "layers.%d.attn.context", l), l, in2, 2, 4, qs, vd_gen_i_lay(1, 2, LR, 0));
  int64_t os[4] = {B, S, NH, D}, o3[3] = {B, S, NH * D}, xs[3] = {B, S, H};
  o = vd_gen_i_f1(g, "transpose", vd_gen_i_fmt(g, "layers.%d.attn.context.t", l), l, &o, 1, 4, os, vd_gen_i_lay(2, 1, LR, 0));
  vd_gen_i_ai(g, "dim0", 1);
  vd_gen_i_ai(g, "dim1", 2);
  o = vd_gen_i_f1(g, "view", vd_gen_i_fmt(g, "layers.%d.attn.context.view", l), l, &o, 1, 3, o3, vd_gen_i_lay(2, 1, LR, 0));
  int64_t ws[2] = {H, NH * D};
  int wo = weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.attn.o.weight", l), 2, ws, vd_gen_i_lay(1, LR, LR, -1), 0);
  int in3[2] = {o, wo};
  int y = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "layers.%d.attn.o", l), l, in3, 2, 3, xs, vd_gen_i_lay(LP, 1, LR, 0));
  y = vd_gen_i_region_exit(g, y, l, vd_gen_i_fmt(g, "layers.%d.attn.o", l));
  int in4[2] = {x, y};
  return vd_gen_i_f1(g, "add", vd_gen_i_fmt(g, "layers.%d.attn.residual", l), l, in4, 2, 3, xs, vd_gen_i_res_lay(g));
}

int vd_gen_i_swiglu_core(vd_gen_ctx *g, int l, const char *pfx, int h, int w1, int w3, int w2) {
  const vd_gen_config *c = g->c;
  int64_t B = c->batch, S = c->seq, H = c->hidden, F = c->ffn;
  int64_t fs[3] = {B, S, F}, xs[3] = {B, S, H};
  vd_gen_lay fl = vd_gen_i_lay(2, 1, LR, 0);
  char p[256]; /* pfx may sit in the ring of vd_gen_i_fmt, which the names below reuse */
  snprintf(p, sizeof(p), "%s", pfx);
  int i1[2] = {h, w1}, i3[2] = {h, w3};
  int gt = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "%s.gate", p), l, i1, 2, 3, fs, fl);
  int up = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "%s.up", p), l, i3, 2, 3, fs, fl);
  int a = vd_gen_i_f1(g, "silu", vd_gen_i_fmt(g, "%s.silu", p), l, &gt, 1, 3, fs, fl);
  int im[2] = {a, up};
  int m = vd_gen_i_f1(g, "mul", vd_gen_i_fmt(g, "%s.mul", p), l, im, 2, 3, fs, fl);
  int i2[2] = {m, w2};
  return vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "%s.down", p), l, i2, 2, 3, xs, vd_gen_i_lay(LP, 1, LR, 0));
}

static int swiglu(vd_gen_ctx *g, int l, int x) {
  const vd_gen_config *c = g->c;
  int st = vd_gen_i_stage(g, l);
  int64_t B = c->batch, S = c->seq, H = c->hidden, F = c->ffn;
  int h = norm_enter(g, x, st, l, vd_gen_i_fmt(g, "layers.%d.ffn_norm", l));
  int64_t w13[2] = {F, H}, w2s[2] = {H, F}, xs[3] = {B, S, H};
  vd_gen_lay col = vd_gen_i_lay(0, LR, LR, -1), row = vd_gen_i_lay(1, LR, LR, -1);
  int w1 = weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.ffn.gate.weight", l), 2, w13, col, 0);
  int w3 = weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.ffn.up.weight", l), 2, w13, col, 0);
  int w2 = weight(g, st, l, vd_gen_i_fmt(g, "layers.%d.ffn.down.weight", l), 2, w2s, row, 0);
  int y = vd_gen_i_swiglu_core(g, l, vd_gen_i_fmt(g, "layers.%d.ffn", l), h, w1, w3, w2);
  y = vd_gen_i_region_exit(g, y, l, vd_gen_i_fmt(g, "layers.%d.ffn.down", l));
  int in4[2] = {x, y};
  return vd_gen_i_f1(g, "add", vd_gen_i_fmt(g, "layers.%d.ffn.residual", l), l, in4, 2, 3, xs, vd_gen_i_res_lay(g));
}

/* The LM head weight [V, H] (y = x W^T).  Tied: the embedding table itself
 * when it is on this stage (single plan, pp = 1: a multiref, whose backward
 * sums both uses' gradients); with pp > 1 a copy on the last stage, named
 * like the table (both copies are the single weight), whose gradient is the
 * other part; the optimizer all-reduces the two copies' gradients. */
static int head_weight(vd_gen_ctx *g, int st, int L) {
  const vd_gen_config *c = g->c;
  int64_t ws[2] = {c->vocab, c->hidden};
  vd_gen_lay fl = vd_gen_i_lay(0, LR, LR, -1);
  if (!c->tie_embeddings) return weight(g, st, L, "lm_head.weight", 2, ws, fl, 0);
  int e = g->tied_w;
  if (e < 0 || g->failed) return -1;
  if (g->dts[e].stage == st) return e;
  vd_gen_lay gl = wgrad(g, fl, 0);
  gl.tcopy = 2;
  int w = vd_gen_i_weight(g, st, L, g->dts[e].name, 2, ws, fl, gl);
  if (w < 0) return -1;
  g->dts[w].tied = e;
  g->dts[e].tied = w;
  return w;
}

/* Final norm, LM head and loss; marks the loss. */
static int head(vd_gen_ctx *g, int x) {
  const vd_gen_config *c = g->c;
  int st = (int)(g->pp - 1), L = -1;
  int64_t B = c->batch, S = c->seq, V = c->vocab;
  x = vd_gen_i_move(g, x, st, L);
  int h = norm_enter(g, x, st, L, "norm");
  int64_t ls[3] = {B, S, V}, bs[2] = {B, S}, fl2[2] = {B * S, V}, fl1[1] = {B * S};
  int w = head_weight(g, st, L);
  int in[2] = {h, w};
  int logits = vd_gen_i_f1(g, "linear", "lm_head", L, in, 2, 3, ls, vd_gen_i_lay(2, 1, LR, 0));
  int loss;
  if (c->loss == VD_GEN_LOSS_SUM) {
    loss = vd_gen_i_sum_all(g, logits, "loss", L);
  } else {
    int e = vd_gen_i_f1(g, "exp", "ce.exp", L, &logits, 1, 3, ls, vd_gen_i_lay(2, 1, LR, 0));
    int s = vd_gen_i_f1(g, "sum", "ce.sumexp", L, &e, 1, 2, bs, vd_gen_i_lay(LP, 1, LR, 0));
    int64_t dm[1] = {2};
    vd_gen_i_aints(g, "dims", dm, 1);
    vd_gen_i_ai(g, "keepdim", 0);
    s = vd_gen_i_allreduce(g, AX_TP, s, "ce.sumexp.all_reduce", L);
    int lse = vd_gen_i_f1(g, "log", "ce.lse", L, &s, 1, 2, bs, vd_gen_i_lay(LR, 1, LR, 0));
    int lab = vd_gen_i_input(g, st, "labels", VD_DT_I64, 2, bs, vd_gen_i_lay(LR, 1, LR, 0));
    /* pick works on [n, v]: flatten; a flattened [b, s] slice is not a slice of [B*S] */
    int lf = vd_gen_i_f1(g, "view", "ce.logits.flat", L, &logits, 1, 2, fl2, vd_gen_i_lay(1, 0, LR, 0));
    vd_gen_i_nolin(g, lf);
    int labf = vd_gen_i_f1(g, "view", "ce.labels.flat", L, &lab, 1, 1, fl1, vd_gen_i_lay(LR, 0, LR, 0));
    vd_gen_i_nolin(g, labf);
    int ip[2] = {lf, labf};
    int t = vd_gen_i_f1(g, "pick", "ce.pick", L, ip, 2, 1, fl1, vd_gen_i_lay(LP, 0, LR, 0));
    vd_gen_i_ai_rank(g, "start", 0, AX_TP, V / g->tp);
    vd_gen_i_nolin(g, t);
    t = vd_gen_i_f1(g, "view", "ce.target", L, &t, 1, 2, bs, vd_gen_i_lay(LP, 1, LR, 0));
    t = vd_gen_i_allreduce(g, AX_TP, t, "ce.target.all_reduce", L);
    int is[2] = {lse, t};
    int tok = vd_gen_i_f1(g, "sub", "ce.token_loss", L, is, 2, 2, bs, vd_gen_i_lay(LR, 1, LR, 0));
    int64_t one[1] = {1};
    if (c->loss_mask) {
      /* loss = sum(mask * tok) / sum(mask): each microbatch divides its masked
       * sum by the GLOBAL count (computed once, see vd_gen_i_token_count) */
      int m = vd_gen_i_input(g, st, "loss_mask", VD_DT_F32, 2, bs, vd_gen_i_lay(LR, 1, LR, 0));
      int cnt = vd_gen_i_token_count(g, m, "loss.count");
      int im[2] = {tok, m};
      int mt = vd_gen_i_f1(g, "mul", "ce.masked", L, im, 2, 2, bs, vd_gen_i_lay(LR, 1, LR, 0));
      int sum = vd_gen_i_sum_all(g, mt, "ce.sum", L);
      /* written as sum * count^-1, not div(sum, count): the sum of the parts
       * sum_i(a_i * r) = (sum_i a_i) * r is polynomial, while a/0 is
       * unspecified on the verifier's reals, so sum_i(a_i / C) = (sum_i a_i) / C
       * does not hold for every C (docs/models.md) */
      int inv = cnt < 0 ? -1 : vd_gen_i_f1(g, "pow", "loss.count.inv", L, &cnt, 1, 0, one, vd_gen_i_lay(LR, LR, LR, -1));
      vd_gen_i_af(g, "exponent", -1.0);
      int id[2] = {sum, inv};
      loss = vd_gen_i_f1(g, "mul", "loss", L, id, 2, 0, one, g->dts[sum < 0 ? 0 : sum].fl);
      /* d loss / d count^-1 is a per-rank part, not the single value: dead, unannotated */
      if (inv >= 0) g->dts[inv].gnolin = 1;
    } else {
      int sum = vd_gen_i_sum_all(g, tok, "ce.sum", L);
      loss = vd_gen_i_f1(g, "scale", "loss", L, &sum, 1, 0, one, g->dts[sum].fl);
      vd_gen_i_af(g, "factor", 1.0 / (double)(B * S));
    }
  }
  vd_gen_i_loss(g, loss);
  return loss;
}

vd_rc vd_gen_i_llama_decoder(vd_gen_ctx *g, vd_gen_ffn_fn ffn) {
  int x = embed(g);
  for (int l = 0; l < g->c->layers && !g->failed; l++) {
    x = vd_gen_i_llama_attention(g, l, x);
    x = ffn(g, l, x);
  }
  head(g, x);
  return VD_OK;
}

vd_rc vd_gen_i_llama3(vd_gen_ctx *g) { return vd_gen_i_llama_decoder(g, swiglu); }
