/*
 * gen/gen_models.h - private to gen/: the model builders.  Each records the
 * forward of its model on the engine's tape (gen_int.h); build.c calls them,
 * and moe.c reuses the Llama-3 pieces.  The engine files never include this.
 */
#ifndef VD_GEN_MODELS_H
#define VD_GEN_MODELS_H

#include "gen_int.h"

/* Model builders (mlp.c, llama3.c, moe.c): record the forward. */
vd_rc vd_gen_i_mlp(vd_gen_ctx *g);
vd_rc vd_gen_i_llama3(vd_gen_ctx *g);
vd_rc vd_gen_i_moe(vd_gen_ctx *g);
/* Llama-3 pieces shared with the MoE model (llama3.c). */
/* The feed-forward block of layer l on residual x (returns the new residual). */
typedef int (*vd_gen_ffn_fn)(vd_gen_ctx *g, int l, int x);
/* The decoder: embedding; per layer, attention then ffn; final norm, LM
 * head and loss (marked).  Stops adding layers once g has failed. */
vd_rc vd_gen_i_llama_decoder(vd_gen_ctx *g, vd_gen_ffn_fn ffn);
/* Attention block of layer l on residual x (returns the new residual). */
int vd_gen_i_llama_attention(vd_gen_ctx *g, int l, int x);
/* The SwiGLU of layer l on h with the weights w1 (gate), w3 (up), w2 (down),
 * column then row parallel, nodes named "<pfx>.gate" ... "<pfx>.down":
 * returns its output [B, S, H], a partial sum over TP. */
int vd_gen_i_swiglu_core(vd_gen_ctx *g, int l, const char *pfx, int h, int w1, int w3, int w2);
/* The partial output y of a row-parallel block back to the residual layout:
 * reduce_scatter under SP, else all_reduce, named "<pfx>.<collective>". */
int vd_gen_i_region_exit(vd_gen_ctx *g, int y, int l, const char *pfx);
/* Residual-stream layout (seq split by cp, and by tp under SP). */
vd_gen_lay vd_gen_i_res_lay(const vd_gen_ctx *g);

#endif
