/*
 * gen/tape.c - the forward tape: ops recorded by the models (with their
 * rank-dependent attributes) and the parallel regions (region entry,
 * all_reduce, all_gather, reduce_scatter, all_to_all, pipeline moves), to be
 * emitted once the whole forward is known.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- tape ------------------------------------------------------------- */

int vd_gen_i_op(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin,
                const int *out, int nout) {
  if (g->failed) return -1;
  for (int i = 0; i < nin; i++)
    if (in[i] < 0) return -1;
  for (int i = 0; i < nout; i++)
    if (out[i] < 0) return -1;
  if (VD_GROW(g->ops, g->cap_ops, g->n_ops + 1)) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  vd_gen_op *o = &g->ops[g->n_ops];
  memset(o, 0, sizeof(*o));
  o->op = op;
  o->name = vd_strdup(name);
  if (!o->name) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  o->layer = layer;
  o->kind = K_COMPUTE;
  o->axis = -1;
  o->nin = nin;
  o->nout = nout;
  int rg = 0;
  for (int i = 0; i < nin; i++) {
    o->in[i] = in[i];
    g->dts[in[i]].uses++;
    rg |= g->dts[in[i]].rg;
  }
  for (int i = 0; i < nout; i++) {
    o->out[i] = out[i];
    g->dts[out[i]].rg = rg;
    if (g->dts[out[i]].layer < 0) g->dts[out[i]].layer = layer;
  }
  return (int)g->n_ops++;
}

static vd_gen_attr *new_attr(vd_gen_ctx *g, const char *key) {
  if (g->failed || !g->n_ops) return NULL;
  vd_gen_op *o = &g->ops[g->n_ops - 1];
  if (o->nattr >= VD_GEN_MAX_ATTR) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: too many attributes", NULL);
    return NULL;
  }
  vd_gen_attr *a = &o->attrs[o->nattr++];
  memset(a, 0, sizeof(*a));
  a->key = key;
  return a;
}

void vd_gen_i_ai(vd_gen_ctx *g, const char *key, int64_t v) {
  vd_gen_attr *a = new_attr(g, key);
  if (a) a->kind = VD_ATTR_INT, a->i = v;
}
void vd_gen_i_ai_rank(vd_gen_ctx *g, const char *key, int64_t base, int axis, int64_t coef) {
  vd_gen_attr *a = new_attr(g, key);
  if (a) a->kind = VD_ATTR_INT, a->i = base, a->coef[axis] = coef;
}
void vd_gen_i_af(vd_gen_ctx *g, const char *key, double v) {
  vd_gen_attr *a = new_attr(g, key);
  if (a) a->kind = VD_ATTR_FLOAT, a->f = v;
}
void vd_gen_i_aints(vd_gen_ctx *g, const char *key, const int64_t *v, uint32_t n) {
  vd_gen_attr *a = new_attr(g, key);
  if (!a) return;
  a->kind = VD_ATTR_INTS;
  a->n_ints = n > VD_MAX_DIMS ? VD_MAX_DIMS : n;
  memcpy(a->ints, v, a->n_ints * sizeof(int64_t));
}

int vd_gen_i_f1(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin, int ndim,
                const int64_t *gshape, vd_gen_lay fl) {
  if (g->failed) return -1;
  int y = vd_gen_i_act(g, g->dts[in[0]].stage, name, ndim, gshape, fl);
  if (y < 0) return -1;
  vd_gen_i_op(g, op, name, layer, in, nin, &y, 1);
  return y;
}

static int comm_out(vd_gen_ctx *g, int x, vd_gen_lay fl) {
  vd_gen_dt *s = &g->dts[x];
  return vd_gen_i_act(g, s->stage, s->name, s->ndim, s->gshape, fl);
}

int vd_gen_i_enter(vd_gen_ctx *g, int axis, int x, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  if (g->deg[axis] == 1) return x;
  int y = comm_out(g, x, g->dts[x].fl);
  if (y < 0) return -1;
  vd_gen_lay gl = g->dts[y].gl;
  gl.ax[axis] = LP;
  g->dts[y].gl = gl;
  int o = vd_gen_i_op(g, "identity", name, layer, &x, 1, &y, 1);
  if (o >= 0) g->ops[o].kind = K_ENTRY, g->ops[o].axis = axis;
  return y;
}

static int coll(vd_gen_ctx *g, const char *op, int axis, int x, vd_gen_lay fl, vd_gen_lay gl, const char *name,
                int layer) {
  int y = comm_out(g, x, fl);
  if (y < 0) return -1;
  g->dts[y].gl = gl;
  int o = vd_gen_i_op(g, op, name, layer, &x, 1, &y, 1);
  if (o < 0) return -1;
  g->ops[o].kind = K_COLL;
  g->ops[o].axis = axis;
  return y;
}

int vd_gen_i_allreduce(vd_gen_ctx *g, int axis, int x, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  if (g->deg[axis] == 1) return x;
  vd_gen_lay fl = g->dts[x].fl;
  fl.ax[axis] = LR;
  return coll(g, "all_reduce", axis, x, fl, vd_gen_i_grad_default(fl), name, layer);
}

int vd_gen_i_allgather(vd_gen_ctx *g, int axis, int x, int dim, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  if (g->deg[axis] == 1) return x;
  vd_gen_lay fl = g->dts[x].fl, gl;
  fl.ax[axis] = LR;
  gl = vd_gen_i_grad_default(fl);
  gl.ax[axis] = LP;
  int y = coll(g, "all_gather", axis, x, fl, gl, name, layer);
  if (y >= 0) vd_gen_i_ai(g, "dim", dim);
  return y;
}

int vd_gen_i_reducescatter(vd_gen_ctx *g, int axis, int x, int dim, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  if (g->deg[axis] == 1) return x;
  vd_gen_lay fl = g->dts[x].fl;
  fl.ax[axis] = (int8_t)dim;
  int y = coll(g, "reduce_scatter", axis, x, fl, vd_gen_i_grad_default(fl), name, layer);
  if (y >= 0) vd_gen_i_ai(g, "dim", dim);
  return y;
}

int vd_gen_i_alltoall(vd_gen_ctx *g, int axis, int x, int out, int split_dim, int concat_dim, const char *name,
                      int layer) {
  if (g->failed || x < 0 || out < 0) return -1;
  int o = vd_gen_i_op(g, "all_to_all", name, layer, &x, 1, &out, 1);
  if (o < 0) return -1;
  g->ops[o].kind = K_COLL;
  g->ops[o].axis = axis;
  vd_gen_i_ai(g, "split_dim", split_dim);
  vd_gen_i_ai(g, "concat_dim", concat_dim);
  return out;
}

int vd_gen_i_move(vd_gen_ctx *g, int x, int to, int layer) {
  if (g->failed || x < 0) return -1;
  vd_gen_dt *s = &g->dts[x];
  if (s->stage == to) return x;
  int y = vd_gen_i_act(g, to, s->name, s->ndim, s->gshape, s->fl);
  if (y < 0) return -1;
  g->dts[y].gl = g->dts[x].gl;
  int o = vd_gen_i_op(g, "move", g->dts[x].name, layer, &x, 1, &y, 1);
  if (o >= 0) g->ops[o].kind = K_MOVE;
  return y;
}

void vd_gen_i_loss(vd_gen_ctx *g, int loss) {
  g->loss_dt = loss;
  if (loss < 0) return;
  /* The plan tensors were created with the role the value had then (an
   * activation): they are the loss, which a boundary-only plan keeps
   * annotated (plans/strip.c) and the verifier requires. */
  g->dts[loss].role = VD_ROLE_LOSS;
  for (int64_t r = 0; r < g->rps; r++) g->p->tensors[g->dts[loss].t[r]].role = VD_ROLE_LOSS;
}
