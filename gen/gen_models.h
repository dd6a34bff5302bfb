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
int vd_gen_i_llama_embed(vd_gen_ctx *g);
/* Attention block of layer l on residual x (returns the new residual). */
int vd_gen_i_llama_attention(vd_gen_ctx *g, int l, int x);
/* Final norm, LM head and loss; marks the loss. */
int vd_gen_i_llama_head(vd_gen_ctx *g, int x);
/* Residual-stream layout (seq split by cp, and by tp under SP). */
vd_gen_lay vd_gen_i_res_lay(const vd_gen_ctx *g);

#endif
