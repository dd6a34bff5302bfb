/*
 * gen/gen_engine.h - private to the engine files of gen/ (config.c,
 * dtensor.c, tape.c, emit.c, backward.c, optimizer.c, loss.c, build.c):
 * what they share beyond the model-facing API of gen_int.h.  The models
 * (mlp.c, llama3.c, moe.c) do not include it.
 */
#ifndef VD_GEN_ENGINE_H
#define VD_GEN_ENGINE_H

#include "gen_int.h"

/* Records the build's first failure (rc, message, record what) in g->d. */
void vd_gen_i_fail(vd_gen_ctx *g, vd_rc rc, const char *msg, const char *what);
/* The phase's vd_rc from the failure record (see dtensor.c). */
vd_rc vd_gen_i_rc(vd_gen_ctx *g);

/* Inside an index builder (returns -1): a plans/ call failed. */
#define CK(expr)                                                                               \
  do {                                                                                         \
    vd_rc ck_rc_ = (expr);                                                                     \
    if (ck_rc_ != VD_OK) {                                                                     \
      if (!g->failed) vd_gen_i_fail(g, ck_rc_, "building the plan failed (out of memory)", NULL); \
      return -1;                                                                               \
    }                                                                                          \
  } while (0)

/* A plans/ call (vd_rc) inside a phase. */
#define PLAN_CK(expr)                                                                          \
  do {                                                                                         \
    vd_rc pk_rc_ = (expr);                                                                     \
    if (pk_rc_ != VD_OK) {                                                                     \
      if (!g->failed) vd_gen_i_fail(g, pk_rc_, "building the plan failed (out of memory)", NULL); \
      return vd_gen_i_rc(g);                                                                   \
    }                                                                                          \
  } while (0)
#define GEN_CK(expr)                                                                           \
  do {                                                                                         \
    if ((expr) < 0) return vd_gen_i_rc(g);                                                     \
  } while (0)

/* ---- configuration (config.c) ----------------------------------------- */
/* c = in with the derived sizes filled in (heads, ffn, ...). */
void vd_gen_i_complete(const vd_gen_config *in, vd_gen_config *c);

/* ---- ranks and dtensors (dtensor.c) ------------------------------------ */
/* Axis coordinates (tp, cp, ep) of stage-rank r. */
void vd_gen_i_coords(const vd_gen_ctx *g, int64_t r, int64_t c[AX_N]);
/* Stored rank of stage-rank r of stage. */
int64_t vd_gen_i_rank_of(const vd_gen_ctx *g, int stage, int64_t r);
/* Gradient layout that goes with forward layout l by default. */
vd_gen_lay vd_gen_i_grad_default(vd_gen_lay l);
/* New dtensor with one plan tensor per stored rank of stage. */
int vd_gen_i_new_dt(vd_gen_ctx *g, int stage, int layer, const char *name, vd_dtype dtype, vd_role role,
                    vd_scope scope, int ndim, const int64_t *gshape, vd_gen_lay fl, int nolin);

/* ---- node emission (emit.c) -------------------------------------------- */
/* Emits one node on stage-rank r of `stage`. */
int vd_gen_i_emit(vd_gen_ctx *g, int stage, int64_t r, int32_t seg, const char *op, const char *name, int layer,
                  vd_phase phase, const uint32_t *in, int nin, const uint32_t *out, int nout,
                  const vd_gen_attr *attrs, int nattr, int64_t key, const int64_t *group, int ngroup,
                  int span);
/* Collective group (ranks of the axes in mask) of stage-rank r and its id. */
int vd_gen_i_group_of(const vd_gen_ctx *g, int stage, int64_t r, unsigned mask, int64_t *grp, int64_t *gid);
/* Collective op from dtensor x to y on every stored rank of stage, in
 * segment seg, over the axes in mask (and the replicas when span); one key
 * per group.  0, or -1 on failure. */
int vd_gen_i_emit_coll(vd_gen_ctx *g, int stage, int32_t seg, const char *op, const char *name, int layer, int x,
                       int y, unsigned mask, int span, const vd_gen_attr *at, int nat);
/* One node per stored rank of the op's stage, in segment segs[stage]. */
int vd_gen_i_emit_spmd(vd_gen_ctx *g, const char *op, const char *name, int layer, vd_phase phase, int32_t *segs,
                       const int *in, int nin, const int *out, int nout, const vd_gen_attr *attrs, int nattr,
                       int coll_axis);
/* send/recv pair moving x to y's stage. */
int vd_gen_i_emit_move(vd_gen_ctx *g, int x, int y, const char *name, int layer, int32_t *segs);

/* ---- the phases, in build order (build.c calls them) -------------------- */
vd_rc vd_gen_i_emit_forward(vd_gen_ctx *g);   /* emit.c */
vd_rc vd_gen_i_emit_backward(vd_gen_ctx *g);  /* backward.c */
vd_rc vd_gen_i_emit_optimizer(vd_gen_ctx *g); /* optimizer.c */
vd_rc vd_gen_i_emit_zero(vd_gen_ctx *g);      /* optimizer.c */

/* ---- optimizer helpers shared with loss.c (optimizer.c) ----------------- */
/* Bit a set when layout l holds value parts (LP) on axis a. */
unsigned vd_gen_i_lp_mask(vd_gen_lay l);
/* An integer attribute k = v. */
vd_gen_attr vd_gen_i_iattr(const char *k, int64_t v);

#endif
