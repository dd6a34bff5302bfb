/*
 * gen/mlp.c - the MLP model: a stack of Megatron MLP blocks
 *     x -> linear(fc1, h -> ffn) -> silu -> linear(fc2, ffn -> h) -> next
 * with a sum loss.  TP: fc1 column-parallel (region entry: forward
 * identity, backward all_reduce), fc2 row-parallel with an all_reduce of its
 * partial output.  DP/PP/microbatches come from the engine (gen_int.h).
 */
#include "gen_models.h"

vd_rc vd_gen_i_mlp(vd_gen_ctx *g) {
  const vd_gen_config *c = g->c;
  int64_t B = c->batch, H = c->hidden, F = c->ffn;
  int64_t xs[2] = {B, H};
  int x = vd_gen_i_input(g, 0, "x", VD_DT_F64, 2, xs, vd_gen_i_lay(LR, LR, LR, 0));
  for (int64_t l = 0; l < c->layers && !g->failed; l++) {
    int st = vd_gen_i_stage(g, l);
    int L = (int)l;
    x = vd_gen_i_move(g, x, st, L);
    int xin = vd_gen_i_enter(g, AX_TP, x, vd_gen_i_fmt(g, "layers.%d.fc1.enter", L), L);
    int64_t w1s[2] = {F, H}, w2s[2] = {H, F};
    vd_gen_lay col = vd_gen_i_lay(0, LR, LR, -1), row = vd_gen_i_lay(1, LR, LR, -1);
    int w1 = vd_gen_i_weight(g, st, L, vd_gen_i_fmt(g, "layers.%d.fc1.weight", L), 2, w1s, col, col);
    int w2 = vd_gen_i_weight(g, st, L, vd_gen_i_fmt(g, "layers.%d.fc2.weight", L), 2, w2s, row, row);
    int64_t hs[2] = {B, F};
    int in1[2] = {xin, w1};
    int h = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "layers.%d.fc1", L), L, in1, 2, 2, hs,
                        vd_gen_i_lay(1, LR, LR, 0));
    int a = vd_gen_i_f1(g, "silu", vd_gen_i_fmt(g, "layers.%d.act", L), L, &h, 1, 2, hs, vd_gen_i_lay(1, LR, LR, 0));
    int in2[2] = {a, w2};
    int y = vd_gen_i_f1(g, "linear", vd_gen_i_fmt(g, "layers.%d.fc2", L), L, in2, 2, 2, xs,
                        vd_gen_i_lay(LP, LR, LR, 0));
    x = vd_gen_i_allreduce(g, AX_TP, y, vd_gen_i_fmt(g, "layers.%d.fc2.all_reduce", L), L);
  }
  int loss = vd_gen_i_sum_all(g, x, "loss", -1);
  vd_gen_i_loss(g, loss);
  return VD_OK;
}
