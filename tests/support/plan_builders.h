/*
 * tests/support/plan_builders.h - tiny in-memory plans for unit tests.
 *
 * Two layers:
 *  - pb_ctx + pb_tensor/pb_node/...: terse wrappers over the vd_plan_* builder
 *    API with a sticky error (the first failure is kept in c->rc and later
 *    calls do nothing), so a test can write a plan as a list of statements
 *    and check one rc at the end.  Tensor and node file ids are assigned
 *    1, 2, 3, ... in creation order, so id == index + 1.
 *  - ready-made plans (pb_plan_*), all of which pass vd_plan_validate:
 *      linear1     single device: y = linear(x, w) on x [4,8], w [8,8],
 *                  loss = sum(y), backward, sgd: the single-device twin of
 *                  mb2_accum and dp2 (not in pb_ready_plans).
 *      linear2     single device: y = linear(linear(x, w1), w2), loss = sum(y),
 *                  backward, sgd on both weights.  Tensor ids are the "full"
 *                  ids the parallel plans' lineage annotations refer to.
 *      tp2         the same model, Megatron TP=2 (w1 column-, w2 row-parallel),
 *                  all_reduce of the partial y (coll 1) and of the partial gx
 *                  (coll 2).
 *      pp2         the same model on a 2-stage pipeline: h moves rank 0 -> 1
 *                  (send/recv coll 10), gh moves back (coll 11).
 *      mb2_accum   one linear layer, 2 microbatches, weight gradient
 *                  accumulated into the persistent tensor 'w.grad' (written
 *                  in mb 0, accumulated in mb 1), then sgd.
 *      dp2         one linear layer, dp=2 stored as 1 replica with
 *                  replicas=2; the weight gradient goes through a
 *                  span_replicas all_reduce (coll 1) into 'w.grad_red'.
 * The names of the tensors and nodes are listed in plan_builders.c.
 */
#ifndef VD_TEST_PLAN_BUILDERS_H
#define VD_TEST_PLAN_BUILDERS_H

#include "../../plans/plan.h"

typedef struct {
  vd_plan_t *p;
  vd_rc rc;
} pb_ctx;

/* Initializes plan p (kind) and the context; ranks stored ranks, replicas
 * replicas, nm microbatches (world degrees: dp = replicas, others 1). */
void pb_begin(pb_ctx *c, vd_plan_t *p, vd_plan_kind kind, int32_t ranks, int32_t replicas, int32_t nm);
int32_t pb_segment(pb_ctx *c, const char *name);
void pb_step(pb_ctx *c, int32_t rank, int32_t segment, int32_t mb);
/* A tensor with ndim dims (0..2) of shape d0 x d1; returns its index. */
uint32_t pb_tensor(pb_ctx *c, const char *name, int32_t rank, vd_role role, vd_scope scope, int ndim,
                   int64_t d0, int64_t d1);
/* Sets a lineage annotation: slice [lo, hi) of single tensor `full` (2-d at
 * most), part k of n. */
void pb_lin(pb_ctx *c, uint32_t t, int64_t full, int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1,
            int64_t part_k, int64_t part_n);
/* A plain node; returns its index. */
uint32_t pb_node(pb_ctx *c, const char *op, const char *name, int32_t rank, int32_t seg, vd_phase ph,
                 const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out);
/* A collective / send / recv half with key `coll` and a group of stored ranks. */
uint32_t pb_coll(pb_ctx *c, const char *op, const char *name, int32_t rank, int32_t seg,
                 const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out, int64_t coll,
                 const int64_t *group, uint32_t n_group, int span_replicas);
void pb_attr_float(pb_ctx *c, uint32_t node, const char *key, double v);

/* Shorthands for what many test plans repeat. */
/* pb_tensor plus a lineage annotation saying it is the whole of single
 * tensor `full` (slice [0, d0) x [0, d1), part 0 of 1). */
uint32_t pb_tensor_whole(pb_ctx *c, const char *name, int32_t rank, vd_role role, vd_scope scope, int ndim,
                         int64_t d0, int64_t d1, int64_t full);
/* pb_tensor named "r<rank>.<base>", the parallel plans' naming. */
uint32_t pb_rank_tensor(pb_ctx *c, const char *base, int32_t rank, vd_role role, vd_scope scope, int ndim,
                        int64_t d0, int64_t d1);
/* For each stored rank r < ranks: per-microbatch input "r<r>.x" then
 * activation "r<r>.y" (ndim, d0 x d1) into x[r], y[r]: the operands of the
 * small collective plans. */
void pb_rank_xy(pb_ctx *c, int32_t ranks, int ndim, int64_t d0, int64_t d1, uint32_t *x, uint32_t *y);
/* Rank's schedule for one microbatch: segment fwd and bwd in mb 0, then
 * opt once (mb -1). */
void pb_steps_one_mb(pb_ctx *c, int32_t rank, int32_t fwd, int32_t bwd, int32_t opt);
/* w = sgd_step(w, g) with lr 0.1 in optimizer segment seg; returns the node. */
uint32_t pb_sgd(pb_ctx *c, const char *name, int32_t rank, int32_t seg, uint32_t w, uint32_t g);
/* Per-microbatch 1x4 tensors x (input), h, y and two neg nodes, the reader
 * of h added first: "use" (h -> y) in segment use_seg, then "make"
 * (x -> h) in make_seg.  The steps decide whether h is read before it is
 * written.  x, h, y may be NULL. */
void pb_use_make(pb_ctx *c, int32_t use_seg, int32_t make_seg, uint32_t *x, uint32_t *h, uint32_t *y);

/* List helpers: PB_T(a, b) expands to "(const uint32_t[]){a, b}, 2". */
#define PB_NARGS_(...) (uint32_t)(sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))
#define PB_T(...) (const uint32_t[]){__VA_ARGS__}, PB_NARGS_(__VA_ARGS__)
#define PB_NONE NULL, 0
#define PB_G(...) (const int64_t[]){__VA_ARGS__}, (uint32_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* Ready-made plans.  On failure the plan is freed. */
vd_rc pb_plan_linear1(vd_plan_t *p);
vd_rc pb_plan_linear2(vd_plan_t *p);
vd_rc pb_plan_tp2(vd_plan_t *p);
vd_rc pb_plan_pp2(vd_plan_t *p);
vd_rc pb_plan_mb2_accum(vd_plan_t *p);
vd_rc pb_plan_dp2(vd_plan_t *p);
/* All of the above, for tests that run every ready-made plan. */
typedef vd_rc (*pb_plan_fn)(vd_plan_t *p);
extern const pb_plan_fn pb_ready_plans[];
extern const size_t pb_n_ready_plans;

/* Index of the tensor / node named name, or -1. */
int64_t pb_find_tensor(const vd_plan_t *p, const char *name);
int64_t pb_find_node(const vd_plan_t *p, const char *name);

#endif
