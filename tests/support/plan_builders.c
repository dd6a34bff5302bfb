/*
 * tests/support/plan_builders.c - tiny in-memory plans for unit tests.
 *
 * See plan_builders.h.  Tensor names in the parallel plans carry the rank
 * ("r1.w2") so pb_find_tensor is unambiguous.  Shapes: batch 4 (2 per
 * microbatch or replica in mb2_accum / dp2), hidden 8, TP shards of 4.
 */
#include "plan_builders.h"

#include <stdio.h>
#include <string.h>

void pb_begin(pb_ctx *c, vd_plan_t *p, vd_plan_kind kind, int32_t ranks, int32_t replicas, int32_t nm) {
  c->p = p;
  c->rc = vd_plan_init(p, kind);
  if (c->rc != VD_OK) return;
  vd_world_t w = {.dp = replicas, .tp = 1, .pp = 1, .sp = 0, .cp = 1, .ep = 1, .nm = nm,
                  .replicas = replicas, .stored_ranks = ranks};
  c->rc = vd_plan_set_world(p, &w);
}

int32_t pb_segment(pb_ctx *c, const char *name) {
  int32_t s = -1;
  if (c->rc == VD_OK) c->rc = vd_plan_add_segment(c->p, name, &s);
  return s;
}

void pb_step(pb_ctx *c, int32_t rank, int32_t segment, int32_t mb) {
  if (c->rc == VD_OK) c->rc = vd_plan_add_step(c->p, rank, segment, mb);
}

uint32_t pb_tensor(pb_ctx *c, const char *name, int32_t rank, vd_role role, vd_scope scope, int ndim,
                   int64_t d0, int64_t d1) {
  uint32_t idx = UINT32_MAX;
  if (c->rc != VD_OK) return idx;
  vd_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.id = (int64_t)c->p->n_tensors + 1;
  t.rank = rank;
  t.ndim = ndim;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.dtype = VD_DT_F32;
  t.role = role;
  t.scope = scope;
  c->rc = vd_plan_add_tensor(c->p, &t, name, &idx);
  return idx;
}

void pb_lin(pb_ctx *c, uint32_t t, int64_t full, int64_t lo0, int64_t hi0, int64_t lo1, int64_t hi1,
            int64_t part_k, int64_t part_n) {
  if (c->rc != VD_OK) return;
  vd_tensor_t *x = &c->p->tensors[t];
  memset(&x->lin, 0, sizeof(x->lin));
  x->has_lin = 1;
  x->lin.full = full;
  x->lin.lo[0] = lo0;
  x->lin.hi[0] = hi0;
  x->lin.lo[1] = lo1;
  x->lin.hi[1] = hi1;
  x->lin.part_k = part_k;
  x->lin.part_n = part_n;
}

uint32_t pb_coll(pb_ctx *c, const char *op, const char *name, int32_t rank, int32_t seg,
                 const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out, int64_t coll,
                 const int64_t *group, uint32_t n_group, int span_replicas) {
  uint32_t idx = UINT32_MAX;
  if (c->rc != VD_OK) return idx;
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.id = (int64_t)c->p->n_nodes + 1;
  n.rank = rank;
  n.segment = seg;
  n.layer = -1;
  n.phase = coll >= 0 ? VD_PHASE_COMM : VD_PHASE_FWD;
  n.coll = coll;
  n.span_replicas = span_replicas;
  c->rc = vd_plan_add_node(c->p, &n, op, name, in, n_in, out, n_out, group, n_group, &idx);
  return idx;
}

uint32_t pb_node(pb_ctx *c, const char *op, const char *name, int32_t rank, int32_t seg, vd_phase ph,
                 const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out) {
  uint32_t idx = pb_coll(c, op, name, rank, seg, in, n_in, out, n_out, -1, NULL, 0, 0);
  if (c->rc == VD_OK) c->p->nodes[idx].phase = ph;
  return idx;
}

void pb_attr_float(pb_ctx *c, uint32_t node, const char *key, double v) {
  if (c->rc == VD_OK) c->rc = vd_plan_attr_float(c->p, node, key, v);
}

uint32_t pb_tensor_whole(pb_ctx *c, const char *name, int32_t rank, vd_role role, vd_scope scope, int ndim,
                         int64_t d0, int64_t d1, int64_t full) {
  uint32_t t = pb_tensor(c, name, rank, role, scope, ndim, d0, d1);
  pb_lin(c, t, full, 0, d0, 0, d1, 0, 1);
  return t;
}

uint32_t pb_rank_tensor(pb_ctx *c, const char *base, int32_t rank, vd_role role, vd_scope scope, int ndim,
                        int64_t d0, int64_t d1) {
  char nm[64];
  snprintf(nm, sizeof(nm), "r%d.%s", (int)rank, base);
  return pb_tensor(c, nm, rank, role, scope, ndim, d0, d1);
}

void pb_rank_xy(pb_ctx *c, int32_t ranks, int ndim, int64_t d0, int64_t d1, uint32_t *x, uint32_t *y) {
  for (int32_t r = 0; r < ranks; r++) {
    x[r] = pb_rank_tensor(c, "x", r, VD_ROLE_INPUT, VD_SCOPE_PER_MB, ndim, d0, d1);
    y[r] = pb_rank_tensor(c, "y", r, VD_ROLE_ACT, VD_SCOPE_PER_MB, ndim, d0, d1);
  }
}

void pb_steps_one_mb(pb_ctx *c, int32_t rank, int32_t fwd, int32_t bwd, int32_t opt) {
  pb_step(c, rank, fwd, 0);
  pb_step(c, rank, bwd, 0);
  pb_step(c, rank, opt, -1);
}

uint32_t pb_sgd(pb_ctx *c, const char *name, int32_t rank, int32_t seg, uint32_t w, uint32_t g) {
  uint32_t n = pb_node(c, "sgd_step", name, rank, seg, VD_PHASE_OPT, PB_T(w, g), PB_T(w));
  pb_attr_float(c, n, "lr", 0.1);
  return n;
}

void pb_use_make(pb_ctx *c, int32_t use_seg, int32_t make_seg, uint32_t *x, uint32_t *h, uint32_t *y) {
  uint32_t tx = pb_tensor(c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t th = pb_tensor(c, "h", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t ty = pb_tensor(c, "y", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  pb_node(c, "neg", "use", 0, use_seg, VD_PHASE_FWD, PB_T(th), PB_T(ty));
  pb_node(c, "neg", "make", 0, make_seg, VD_PHASE_FWD, PB_T(tx), PB_T(th));
  if (x) *x = tx;
  if (h) *h = th;
  if (y) *y = ty;
}

static vd_rc finish(pb_ctx *c) {
  if (c->rc != VD_OK) vd_plan_free(c->p);
  return c->rc;
}

/* ---- ready-made plans -------------------------------------------------- */

#define ACT VD_ROLE_ACT
#define GRAD VD_ROLE_GRAD
#define MB VD_SCOPE_PER_MB
#define PERS VD_SCOPE_PERSISTENT

vd_rc pb_plan_linear1(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, MB, 2, 4, 8);      /* id 1 */
  uint32_t w = pb_tensor(&c, "w", 0, VD_ROLE_WEIGHT, PERS, 2, 8, 8);   /* id 2 */
  uint32_t y = pb_tensor(&c, "y", 0, ACT, MB, 2, 4, 8);                /* id 3 */
  uint32_t l = pb_tensor(&c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);    /* id 4 */
  uint32_t gl = pb_tensor(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0); /* id 5 */
  uint32_t gy = pb_tensor(&c, "gy", 0, GRAD, MB, 2, 4, 8);             /* id 6 */
  uint32_t gx = pb_tensor(&c, "gx", 0, GRAD, MB, 2, 4, 8);             /* id 7 */
  uint32_t gw = pb_tensor(&c, "w.grad", 0, GRAD, PERS, 2, 8, 8);       /* id 8 */
  pb_node(&c, "linear", "fc", 0, fwd, VD_PHASE_FWD, PB_T(x, w), PB_T(y));
  pb_node(&c, "sum", "loss", 0, fwd, VD_PHASE_FWD, PB_T(y), PB_T(l));
  pb_node(&c, "sum_backward", "loss.bwd", 0, bwd, VD_PHASE_BWD, PB_T(gl), PB_T(gy));
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gw));
  pb_sgd(&c, "opt.w", 0, opt, w, gw);
  pb_steps_one_mb(&c, 0, fwd, bwd, opt);
  return finish(&c);
}

vd_rc pb_plan_linear2(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, MB, 2, 4, 8);       /* id 1 */
  uint32_t w1 = pb_tensor(&c, "w1", 0, VD_ROLE_WEIGHT, PERS, 2, 8, 8);  /* id 2 */
  uint32_t h = pb_tensor(&c, "h", 0, ACT, MB, 2, 4, 8);                 /* id 3 */
  uint32_t w2 = pb_tensor(&c, "w2", 0, VD_ROLE_WEIGHT, PERS, 2, 8, 8);  /* id 4 */
  uint32_t y = pb_tensor(&c, "y", 0, ACT, MB, 2, 4, 8);                 /* id 5 */
  uint32_t loss = pb_tensor(&c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);  /* id 6 */
  uint32_t gl = pb_tensor(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0);  /* id 7 */
  uint32_t gy = pb_tensor(&c, "gy", 0, GRAD, MB, 2, 4, 8);              /* id 8 */
  uint32_t gh = pb_tensor(&c, "gh", 0, GRAD, MB, 2, 4, 8);              /* id 9 */
  uint32_t gw2 = pb_tensor(&c, "w2.grad", 0, GRAD, PERS, 2, 8, 8);      /* id 10 */
  uint32_t gx = pb_tensor(&c, "gx", 0, GRAD, MB, 2, 4, 8);              /* id 11 */
  uint32_t gw1 = pb_tensor(&c, "w1.grad", 0, GRAD, PERS, 2, 8, 8);      /* id 12 */
  pb_node(&c, "linear", "l1", 0, fwd, VD_PHASE_FWD, PB_T(x, w1), PB_T(h));
  pb_node(&c, "linear", "l2", 0, fwd, VD_PHASE_FWD, PB_T(h, w2), PB_T(y));
  pb_node(&c, "sum", "loss", 0, fwd, VD_PHASE_FWD, PB_T(y), PB_T(loss));
  pb_node(&c, "sum_backward", "loss.bwd", 0, bwd, VD_PHASE_BWD, PB_T(gl), PB_T(gy));
  pb_node(&c, "linear_backward", "l2.bwd", 0, bwd, VD_PHASE_BWD, PB_T(h, w2, gy), PB_T(gh, gw2));
  pb_node(&c, "linear_backward", "l1.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w1, gh), PB_T(gx, gw1));
  pb_sgd(&c, "opt.w1", 0, opt, w1, gw1);
  pb_sgd(&c, "opt.w2", 0, opt, w2, gw2);
  pb_steps_one_mb(&c, 0, fwd, bwd, opt);
  return finish(&c);
}

vd_rc pb_plan_tp2(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 2, 1, 1);
  if (c.rc == VD_OK) p->world.tp = 2;
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  for (int32_t r = 0; r < 2; r++) {
    char nm[32];
#define T(name, role, scope, nd, a, b) \
  (snprintf(nm, sizeof(nm), "r%d." name, (int)r), pb_tensor(&c, nm, r, role, scope, nd, a, b))
#define N(op, name) (snprintf(nm, sizeof(nm), "r%d." name, (int)r), nm)
    int64_t s = 4 * r;
    uint32_t x = T("x", VD_ROLE_INPUT, MB, 2, 4, 8);
    pb_lin(&c, x, 1, 0, 4, 0, 8, 0, 1);
    uint32_t w1 = T("w1", VD_ROLE_WEIGHT, PERS, 2, 4, 8);
    pb_lin(&c, w1, 2, s, s + 4, 0, 8, 0, 1);
    uint32_t h = T("h", ACT, MB, 2, 4, 4);
    pb_lin(&c, h, 3, 0, 4, s, s + 4, 0, 1);
    uint32_t w2 = T("w2", VD_ROLE_WEIGHT, PERS, 2, 8, 4);
    pb_lin(&c, w2, 4, 0, 8, s, s + 4, 0, 1);
    uint32_t yp = T("y_partial", ACT, MB, 2, 4, 8);
    pb_lin(&c, yp, 5, 0, 4, 0, 8, r, 2);
    uint32_t y = T("y", ACT, MB, 2, 4, 8);
    pb_lin(&c, y, 5, 0, 4, 0, 8, 0, 1);
    uint32_t loss = T("loss", VD_ROLE_LOSS, MB, 0, 0, 0);
    pb_lin(&c, loss, 6, 0, 0, 0, 0, 0, 1);
    uint32_t gl = T("gloss", VD_ROLE_INPUT, MB, 0, 0, 0);
    pb_lin(&c, gl, 7, 0, 0, 0, 0, 0, 1);
    uint32_t gy = T("gy", GRAD, MB, 2, 4, 8);
    pb_lin(&c, gy, 8, 0, 4, 0, 8, 0, 1);
    uint32_t gh = T("gh", GRAD, MB, 2, 4, 4);
    pb_lin(&c, gh, 9, 0, 4, s, s + 4, 0, 1);
    uint32_t gw2 = T("w2.grad", GRAD, PERS, 2, 8, 4);
    pb_lin(&c, gw2, 10, 0, 8, s, s + 4, 0, 1);
    uint32_t gxp = T("gx_partial", GRAD, MB, 2, 4, 8);
    pb_lin(&c, gxp, 11, 0, 4, 0, 8, r, 2);
    uint32_t gx = T("gx", GRAD, MB, 2, 4, 8);
    pb_lin(&c, gx, 11, 0, 4, 0, 8, 0, 1);
    uint32_t gw1 = T("w1.grad", GRAD, PERS, 2, 4, 8);
    pb_lin(&c, gw1, 12, s, s + 4, 0, 8, 0, 1);
    pb_node(&c, "linear", N("linear", "l1"), r, fwd, VD_PHASE_FWD, PB_T(x, w1), PB_T(h));
    pb_node(&c, "linear", N("linear", "l2"), r, fwd, VD_PHASE_FWD, PB_T(h, w2), PB_T(yp));
    pb_coll(&c, "all_reduce", N("all_reduce", "l2.ar"), r, fwd, PB_T(yp), PB_T(y), 1, PB_G(0, 1), 0);
    pb_node(&c, "sum", N("sum", "loss"), r, fwd, VD_PHASE_FWD, PB_T(y), PB_T(loss));
    pb_node(&c, "sum_backward", N("sum_backward", "loss.bwd"), r, bwd, VD_PHASE_BWD, PB_T(gl), PB_T(gy));
    pb_node(&c, "linear_backward", N("linear_backward", "l2.bwd"), r, bwd, VD_PHASE_BWD, PB_T(h, w2, gy),
            PB_T(gh, gw2));
    pb_node(&c, "linear_backward", N("linear_backward", "l1.bwd"), r, bwd, VD_PHASE_BWD, PB_T(x, w1, gh),
            PB_T(gxp, gw1));
    pb_coll(&c, "all_reduce", N("all_reduce", "l1.bwd.ar"), r, bwd, PB_T(gxp), PB_T(gx), 2, PB_G(0, 1), 0);
    pb_sgd(&c, N("sgd_step", "opt.w1"), r, opt, w1, gw1);
    pb_sgd(&c, N("sgd_step", "opt.w2"), r, opt, w2, gw2);
#undef T
#undef N
  }
  for (int32_t r = 0; r < 2; r++) pb_steps_one_mb(&c, r, fwd, bwd, opt);
  return finish(&c);
}

vd_rc pb_plan_pp2(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 2, 1, 1);
  if (c.rc == VD_OK) p->world.pp = 2;
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  /* stage 0 */
  uint32_t x = pb_tensor_whole(&c, "r0.x", 0, VD_ROLE_INPUT, MB, 2, 4, 8, 1);
  uint32_t w1 = pb_tensor_whole(&c, "r0.w1", 0, VD_ROLE_WEIGHT, PERS, 2, 8, 8, 2);
  uint32_t h0 = pb_tensor_whole(&c, "r0.h", 0, ACT, MB, 2, 4, 8, 3);
  uint32_t gh0 = pb_tensor_whole(&c, "r0.gh", 0, GRAD, MB, 2, 4, 8, 9);
  uint32_t gx = pb_tensor_whole(&c, "r0.gx", 0, GRAD, MB, 2, 4, 8, 11);
  uint32_t gw1 = pb_tensor_whole(&c, "r0.w1.grad", 0, GRAD, PERS, 2, 8, 8, 12);
  pb_node(&c, "linear", "r0.l1", 0, fwd, VD_PHASE_FWD, PB_T(x, w1), PB_T(h0));
  pb_coll(&c, "send", "r0.h.send", 0, fwd, PB_T(h0), PB_NONE, 10, PB_G(0, 1), 0);
  pb_coll(&c, "recv", "r0.gh.recv", 0, bwd, PB_NONE, PB_T(gh0), 11, PB_G(1, 0), 0);
  pb_node(&c, "linear_backward", "r0.l1.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w1, gh0), PB_T(gx, gw1));
  pb_sgd(&c, "r0.opt.w1", 0, opt, w1, gw1);
  /* stage 1 */
  uint32_t h1 = pb_tensor_whole(&c, "r1.h", 1, ACT, MB, 2, 4, 8, 3);
  uint32_t w2 = pb_tensor_whole(&c, "r1.w2", 1, VD_ROLE_WEIGHT, PERS, 2, 8, 8, 4);
  uint32_t y = pb_tensor_whole(&c, "r1.y", 1, ACT, MB, 2, 4, 8, 5);
  uint32_t loss = pb_tensor_whole(&c, "r1.loss", 1, VD_ROLE_LOSS, MB, 0, 0, 0, 6);
  uint32_t gl = pb_tensor_whole(&c, "r1.gloss", 1, VD_ROLE_INPUT, MB, 0, 0, 0, 7);
  uint32_t gy = pb_tensor_whole(&c, "r1.gy", 1, GRAD, MB, 2, 4, 8, 8);
  uint32_t gh1 = pb_tensor_whole(&c, "r1.gh", 1, GRAD, MB, 2, 4, 8, 9);
  uint32_t gw2 = pb_tensor_whole(&c, "r1.w2.grad", 1, GRAD, PERS, 2, 8, 8, 10);
  pb_coll(&c, "recv", "r1.h.recv", 1, fwd, PB_NONE, PB_T(h1), 10, PB_G(0, 1), 0);
  pb_node(&c, "linear", "r1.l2", 1, fwd, VD_PHASE_FWD, PB_T(h1, w2), PB_T(y));
  pb_node(&c, "sum", "r1.loss", 1, fwd, VD_PHASE_FWD, PB_T(y), PB_T(loss));
  pb_node(&c, "sum_backward", "r1.loss.bwd", 1, bwd, VD_PHASE_BWD, PB_T(gl), PB_T(gy));
  pb_node(&c, "linear_backward", "r1.l2.bwd", 1, bwd, VD_PHASE_BWD, PB_T(h1, w2, gy), PB_T(gh1, gw2));
  pb_coll(&c, "send", "r1.gh.send", 1, bwd, PB_T(gh1), PB_NONE, 11, PB_G(1, 0), 0);
  pb_sgd(&c, "r1.opt.w2", 1, opt, w2, gw2);
  for (int32_t r = 0; r < 2; r++) pb_steps_one_mb(&c, r, fwd, bwd, opt);
  return finish(&c);
}

/* The one-layer model mb2_accum and dp2 share: x [2,8] (the 2 batch rows of
 * one microbatch or replica), w [8,8], y = linear(x, w) ("fc"),
 * loss = sum(y) ("loss"), and the backward's gloss, gy and gx; the plans
 * add their own weight-gradient tensors and backward. */
typedef struct {
  uint32_t x, w, y, loss, gl, gy, gx;
} fc_layer;
static fc_layer fc_layer_forward(pb_ctx *c, int32_t fwd) {
  fc_layer t;
  t.x = pb_tensor(c, "x", 0, VD_ROLE_INPUT, MB, 2, 2, 8);
  /* The weight and the loss are annotated: a parallel plan must annotate
   * the outputs of its iteration (plans/validate.c). */
  t.w = pb_tensor_whole(c, "w", 0, VD_ROLE_WEIGHT, PERS, 2, 8, 8, 2);
  t.y = pb_tensor(c, "y", 0, ACT, MB, 2, 2, 8);
  t.loss = pb_tensor(c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);
  pb_lin(c, t.loss, 4, 0, 0, 0, 0, 0, 2); /* part d (dp2) or m (mb2_accum) of 2: the shift is the plan's */
  t.gl = pb_tensor(c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0);
  t.gy = pb_tensor(c, "gy", 0, GRAD, MB, 2, 2, 8);
  t.gx = pb_tensor(c, "gx", 0, GRAD, MB, 2, 2, 8);
  pb_node(c, "linear", "fc", 0, fwd, VD_PHASE_FWD, PB_T(t.x, t.w), PB_T(t.y));
  pb_node(c, "sum", "loss", 0, fwd, VD_PHASE_FWD, PB_T(t.y), PB_T(t.loss));
  return t;
}

vd_rc pb_plan_mb2_accum(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 1, 1, 2);
  int32_t fwd = pb_segment(&c, "fwd"), bwd0 = pb_segment(&c, "bwd0"), bwd = pb_segment(&c, "bwd"),
          opt = pb_segment(&c, "opt");
  fc_layer t = fc_layer_forward(&c, fwd);
  if (c.rc == VD_OK) p->tensors[t.loss].lin.mb_part = 1;
  uint32_t gacc = pb_tensor(&c, "w.grad", 0, GRAD, PERS, 2, 8, 8);
  uint32_t gmb = pb_tensor(&c, "w.grad_mb", 0, GRAD, MB, 2, 8, 8);
  pb_node(&c, "sum_backward", "loss.bwd0", 0, bwd0, VD_PHASE_BWD, PB_T(t.gl), PB_T(t.gy));
  pb_node(&c, "linear_backward", "fc.bwd0", 0, bwd0, VD_PHASE_BWD, PB_T(t.x, t.w, t.gy), PB_T(t.gx, gacc));
  pb_node(&c, "sum_backward", "loss.bwd", 0, bwd, VD_PHASE_BWD, PB_T(t.gl), PB_T(t.gy));
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(t.x, t.w, t.gy), PB_T(t.gx, gmb));
  pb_node(&c, "accumulate", "fc.acc", 0, bwd, VD_PHASE_BWD, PB_T(gacc, gmb), PB_T(gacc));
  pb_sgd(&c, "opt.w", 0, opt, t.w, gacc);
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 0, bwd0, 0);
  pb_step(&c, 0, fwd, 1);
  pb_step(&c, 0, bwd, 1);
  pb_step(&c, 0, opt, -1);
  return finish(&c);
}

vd_rc pb_plan_dp2(vd_plan_t *p) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 1, 2, 1);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), opt = pb_segment(&c, "opt");
  fc_layer t = fc_layer_forward(&c, fwd);
  if (c.rc == VD_OK) p->tensors[t.loss].lin.dp_part = 1;
  uint32_t gw = pb_tensor(&c, "w.grad", 0, GRAD, PERS, 2, 8, 8);
  uint32_t gr = pb_tensor(&c, "w.grad_red", 0, GRAD, PERS, 2, 8, 8);
  pb_node(&c, "sum_backward", "loss.bwd", 0, bwd, VD_PHASE_BWD, PB_T(t.gl), PB_T(t.gy));
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(t.x, t.w, t.gy), PB_T(t.gx, gw));
  pb_coll(&c, "all_reduce", "dp.ar", 0, opt, PB_T(gw), PB_T(gr), 1, PB_G(0), 1);
  pb_sgd(&c, "opt.w", 0, opt, t.w, gr);
  pb_steps_one_mb(&c, 0, fwd, bwd, opt);
  return finish(&c);
}

const pb_plan_fn pb_ready_plans[] = {pb_plan_linear2, pb_plan_tp2, pb_plan_pp2, pb_plan_mb2_accum, pb_plan_dp2};
const size_t pb_n_ready_plans = sizeof(pb_ready_plans) / sizeof(pb_ready_plans[0]);

int64_t pb_find_tensor(const vd_plan_t *p, const char *name) {
  for (size_t i = 0; i < p->n_tensors; i++)
    if (strcmp(vd_plan_s(p, p->tensors[i].name), name) == 0) return (int64_t)i;
  return -1;
}

int64_t pb_find_node(const vd_plan_t *p, const char *name) {
  for (size_t i = 0; i < p->n_nodes; i++)
    if (strcmp(vd_plan_s(p, p->nodes[i].name), name) == 0) return (int64_t)i;
  return -1;
}
