/*
 * gen/gen_int.h - private to gen/: the SPMD emission engine the model
 * generators (mlp.c, llama3.c, moe.c) are written against.  The engine's
 * own cross-file internals are in gen_engine.h, the models in gen_models.h:
 * build.c -> models -> this API, and the engine never includes a model.
 *
 * A model is written ONCE, as forward code over distributed tensors
 * ("dtensors"): a dtensor lives on one pipeline stage and has one plan
 * tensor on each stored rank of that stage (tp x cp x ep ranks).  Its layout
 * says, per parallel axis, whether the axis splits a dimension, holds value
 * parts (partial sums), or replicates it; the lineage annotation of every
 * rank's tensor follows from the layout and the rank's coordinates.  The
 * same model code builds the single plan (every degree 1: collectives and
 * pipeline moves vanish) and the parallel plan.
 *
 * Forward ops are recorded on a tape and emitted at the end (so that
 * multi-consumed tensors get a multiref first); then the backward is derived
 * from the tape in reverse, one backward op per forward op; then gradient
 * reduction, clipping and the optimizer.  Nothing is emitted per
 * microbatch or per DP replica: segments are re-executed by schedule steps.
 */
#ifndef VD_GEN_INT_H
#define VD_GEN_INT_H

#include "gen.h"

enum { VD_GEN_AX_TP, VD_GEN_AX_CP, VD_GEN_AX_EP, VD_GEN_AX__N };
#define AX_TP VD_GEN_AX_TP
#define AX_CP VD_GEN_AX_CP
#define AX_EP VD_GEN_AX_EP
#define AX_N VD_GEN_AX__N

/* Per-axis layout values: >= 0 splits that dimension. */
#define LR (-1) /* replicated: every rank of the axis holds the same value */
#define LP (-2) /* partial: the axis' ranks hold value parts that sum to it */

typedef struct {
  int8_t ax[AX_N]; /* LR, LP, or the split dimension */
  int8_t bdim;     /* batch dimension (sliced by dp, then ep/axes, then nm), -1 none */
  int8_t dpart;    /* value part over DP replicas and microbatches (weight grads, loss) */
  uint8_t zero;    /* ZeRO shard: dim 0 further split over (axes in zmask) x dp */
  uint8_t zmask;   /* bit a: axis a is in the ZeRO group */
  uint8_t tcopy;   /* tied weight copies (pp > 1): 0 none, 1 first stage's, 2 last
                      stage's; the gradient of a copy is one more part digit */
} vd_gen_lay;

/* A rank-dependent integer attribute: base + sum(coef[a] * coord[a]). */
typedef struct {
  const char *key;
  vd_attr_kind kind; /* INT, FLOAT, STR, INTS */
  int64_t i, coef[AX_N];
  double f;
  const char *s;
  int64_t ints[VD_MAX_DIMS];
  uint32_t n_ints;
} vd_gen_attr;

#define VD_GEN_MAX_IO 8
#define VD_GEN_MAX_ATTR 8

typedef struct {
  char *name;
  int stage;
  int layer;
  int ndim;
  int64_t gshape[VD_MAX_DIMS]; /* single-device shape */
  vd_gen_lay fl, gl;           /* forward and gradient layouts */
  vd_dtype dtype;
  vd_role role;
  vd_scope scope;
  int rg;        /* requires grad */
  int is_weight; /* trainable parameter */
  uint32_t *t;   /* plan tensor index per rank of the stage (g->rps entries) */
  int uses;      /* forward consumers */
  int mr_first;  /* first multiref output dtensor, -1 until emitted */
  int mr_next;   /* next multiref output to hand out */
  int grad;      /* gradient dtensor, -1 none */
  int wacc;      /* weights: persistent gradient accumulator dtensor */
  int nolin;     /* never annotated (no single counterpart) */
  int gnolin;    /* its gradient is never annotated (a dead gradient of a
                    non-trainable value whose parallel value is no slice) */
  int tied;      /* tied weights: the other stage's copy, -1 none */
  int tgrad;     /* tied weights: gradient after the embedding-group all_reduce, -1 */
} vd_gen_dt;

typedef enum { K_COMPUTE, K_ENTRY, K_COLL, K_MOVE } vd_gen_kind;

typedef struct {
  const char *op;
  char *name;
  int layer;
  vd_gen_kind kind;
  int axis; /* K_ENTRY, K_COLL: the group axis */
  int in[VD_GEN_MAX_IO], nin;
  int out[VD_GEN_MAX_IO], nout;
  vd_gen_attr attrs[VD_GEN_MAX_ATTR];
  int nattr;
} vd_gen_op;

typedef struct vd_gen_ctx {
  const vd_gen_config *c;
  int par;   /* building the parallel plan */
  vd_plan_t *p;
  vd_diag *d;
  /* degrees used by this plan (all 1 for the single plan) */
  int64_t dp, tp, pp, nm, cp, ep, sp;
  int64_t deg[AX_N];
  int64_t rps; /* stored ranks per stage = tp * cp * ep */
  int64_t batch;
  /* stage of each layer, -1 .. layers (embedding is stage 0, head last) */
  int *layer_stage;
  int32_t *seg_zero, *seg_fwd, *seg_bwd, *seg_opt; /* per stage */
  int32_t seg_init; /* run once before the microbatches on the last stage (--loss-mask), -1 */
  int tied_w;       /* --tie-embeddings: the embedding table dtensor, -1 */
  vd_gen_dt *dts; size_t n_dts, cap_dts;
  vd_gen_op *ops; size_t n_ops, cap_ops;
  int *weights; size_t n_weights, cap_weights;
  int64_t next_key;
  int64_t next_tensor_id, next_node_id;
  vd_gen_op *emitted; size_t n_emitted, cap_emitted; /* forward ops as emitted */
  int loss_dt;
  /* single plan: name -> tensor id (open addressing); the parallel build
   * looks lineages up in the single build's table */
  char **names; int64_t *name_ids; size_t name_cap, n_names;
  const struct vd_gen_ctx *single; /* parallel build: the single build */
  char fmtbuf[8][256];
  int fmti;
  int failed;
} vd_gen_ctx;

/* ---- layouts ---------------------------------------------------------- */
vd_gen_lay vd_gen_i_lay(int8_t tp, int8_t cp, int8_t ep, int8_t bdim);

/* ---- dtensors --------------------------------------------------------- */
/* New activation/input dtensor on `stage` (per-microbatch scope). */
int vd_gen_i_act(vd_gen_ctx *g, int stage, const char *name, int ndim, const int64_t *gshape,
                 vd_gen_lay fl);
/* New data input (ids, labels, x) on stage. */
int vd_gen_i_input(vd_gen_ctx *g, int stage, const char *name, vd_dtype dt, int ndim,
                   const int64_t *gshape, vd_gen_lay fl);
/* New trainable weight; gl = layout of its gradient (split like the weight,
 * LP on axes whose ranks see different data). */
int vd_gen_i_weight(vd_gen_ctx *g, int stage, int layer, const char *name, int ndim,
                    const int64_t *gshape, vd_gen_lay fl, vd_gen_lay gl);
/* Marks dt as having no single counterpart (e.g. a flattened view whose
 * local part is not a slice): no lineage annotation, nor on its gradient. */
void vd_gen_i_nolin(vd_gen_ctx *g, int dt);
/* Overrides the gradient layout of an activation. */
void vd_gen_i_set_gl(vd_gen_ctx *g, int dt, vd_gen_lay gl);

/* ---- forward ops ------------------------------------------------------ */
/* Records op on the tape; returns the op index (attributes via vd_gen_i_a*). */
int vd_gen_i_op(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin,
                const int *out, int nout);
void vd_gen_i_ai(vd_gen_ctx *g, const char *key, int64_t v);
void vd_gen_i_ai_rank(vd_gen_ctx *g, const char *key, int64_t base, int axis, int64_t coef);
void vd_gen_i_af(vd_gen_ctx *g, const char *key, double v);
void vd_gen_i_aints(vd_gen_ctx *g, const char *key, const int64_t *v, uint32_t n);

/* Convenience: a one-output op whose output is a new activation. */
int vd_gen_i_f1(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin,
                int ndim, const int64_t *gshape, vd_gen_lay fl);

/* Parallel regions; all return x unchanged when the axis degree is 1. */
/* TP/CP region entry: forward identity, backward all_reduce. */
int vd_gen_i_enter(vd_gen_ctx *g, int axis, int x, const char *name, int layer);
/* all_reduce of a partial tensor (backward identity). */
int vd_gen_i_allreduce(vd_gen_ctx *g, int axis, int x, const char *name, int layer);
/* all_gather along dim (backward reduce_scatter). */
int vd_gen_i_allgather(vd_gen_ctx *g, int axis, int x, int dim, const char *name, int layer);
/* reduce_scatter of a partial tensor along dim (backward all_gather). */
int vd_gen_i_reducescatter(vd_gen_ctx *g, int axis, int x, int dim, const char *name, int layer);
/* all_to_all over axis (backward: the inverse all_to_all).  out is created
 * by the caller (its layout is model-specific). */
int vd_gen_i_alltoall(vd_gen_ctx *g, int axis, int x, int out, int split_dim, int concat_dim,
                      const char *name, int layer);
/* Pipeline move of x to stage `to` (send/recv, backward recv/send). */
int vd_gen_i_move(vd_gen_ctx *g, int x, int to, int layer);

/* sum over all elements (the sum loss). */
int vd_gen_i_sum_all(vd_gen_ctx *g, int x, const char *name, int layer);
/* Global token count sum(mask) for the masked loss.  Single plan: a
 * forward `sum` of mask.  Parallel plan: computed once, before the
 * microbatches (segment seg_init), from a persistent input holding the
 * rank's mask over all its microbatches, then all-reduced over the ranks
 * holding other tokens (cp, ep, DP replicas), so every microbatch divides
 * by the global count.  Returns the count dtensor (no gradient). */
int vd_gen_i_token_count(vd_gen_ctx *g, int mask, const char *name);
/* Marks the loss: its gradient is seeded with an input "loss.grad". */
void vd_gen_i_loss(vd_gen_ctx *g, int loss);

/* Stage of layer l (-1 embedding, layers = head). */
static inline int vd_gen_i_stage(const vd_gen_ctx *g, int64_t l) { return g->layer_stage[l + 1]; }

/* Formats into a small rotating buffer (names); not thread-safe per ctx only. */
const char *vd_gen_i_fmt(vd_gen_ctx *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
