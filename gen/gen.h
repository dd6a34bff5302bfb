/*
 * gen/gen.h - plan generators for real model families.
 *
 * From one model description (vd_gen_config) vd_gen_build emits two plans:
 * the single-device plan (the same model at dp=tp=pp=cp=ep=1, nm=1, global
 * batch = batch) and the parallel plan (Megatron-LM style DP/TP/SP/PP/CP/EP,
 * microbatches, ZeRO-1), with lineage annotations that relate every
 * corresponding parallel tensor to its single-device tensor.  Both plans are
 * built with the in-memory builder of plans/plan.h only, and use the operator
 * names and conventions of docs/operators.md.  docs/models.md describes each
 * model, each parallel scheme, where its collectives sit and the rank layout.
 *
 * Models: "mlp" (Megatron MLP blocks, sum loss), "llama3" (dense decoder with
 * GQA, RoPE, SwiGLU, cross-entropy or sum loss), "moe" (llama3 attention with
 * a DeepSeek-style routed + shared expert FFN).
 *
 * Both plans contain the full training iteration: forward, explicit backward
 * (one backward node per forward node, multiref for multi-consumed tensors),
 * gradient accumulation and reduction, optional global grad-norm clipping and
 * the optimizer step (SGD or Adam), so they end in updated weights.
 */
#ifndef VD_GEN_H
#define VD_GEN_H

#include <stdint.h>

#include "../common/diag.h"
#include "../plans/plan.h"

typedef enum { VD_GEN_MLP, VD_GEN_LLAMA3, VD_GEN_MOE } vd_gen_model;
typedef enum { VD_GEN_SGD, VD_GEN_ADAM } vd_gen_optimizer;
typedef enum { VD_GEN_LOSS_DEFAULT, VD_GEN_LOSS_CE, VD_GEN_LOSS_SUM } vd_gen_loss; /* default: sum for mlp, ce otherwise */

typedef struct {
  vd_gen_model model;
  int64_t layers, hidden, heads, kv_heads, ffn, vocab, seq, batch;
  int64_t dp, tp, pp, nm, cp, ep;
  int sp;   /* sequence parallelism (0/1), needs tp */
  int zero; /* 0 or 1 (ZeRO-1: optimizer state sharded over DP) */
  vd_gen_optimizer optimizer;
  vd_gen_loss loss;
  int64_t experts, topk;
  double grad_clip; /* max global grad norm; 0 = no clipping */
  int tie_embeddings; /* llama3/moe: the LM head reuses the embedding table (0/1) */
  int loss_mask;      /* llama3/moe --loss ce: input loss_mask [batch, seq] weights the
                         per-token loss; loss = sum(mask * tok) / sum(mask) (0/1) */
  uint64_t seed;    /* recorded in the model description; plans are deterministic */
} vd_gen_config;

/* Fills c with the defaults (llama3, 2 layers, hidden 64, 4 heads, seq 16,
 * batch 8, all degrees 1, sgd, default loss: sum for mlp, ce otherwise).
 * Fields left 0 by a caller in
 * kv_heads, ffn, vocab, experts, topk get model defaults in vd_gen_build. */
void vd_gen_config_default(vd_gen_config *c);

/* Checks c: sizes positive, degrees dividing the sizes they split, options
 * the model supports.  On failure returns VD_EUSAGE with a one-line message
 * naming the option (e.g. "--tp 3 does not divide --heads 4"). */
vd_rc vd_gen_check(const vd_gen_config *c, vd_diag *d);

/* Builds both plans.  single and parallel are out-params (initialized here;
 * the caller frees them with vd_plan_free, also on failure).
 * Returns VD_OK, VD_EUSAGE (bad config, see vd_gen_check) or VD_ENOMEM.
 * Cost: O(stored ranks * layers per stage) nodes; independent of dp and nm. */
vd_rc vd_gen_build(const vd_gen_config *c, vd_plan_t *single, vd_plan_t *parallel, vd_diag *d);

/* Model name <-> enum ("mlp", "llama3", "moe"); -1 if unknown. */
int vd_gen_model_lookup(const char *name);
const char *vd_gen_model_name(vd_gen_model m);

#endif
