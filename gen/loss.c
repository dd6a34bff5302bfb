/*
 * gen/loss.c - the losses the models end in: the sum of every element, and the
 * global token count of the masked loss.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* Sum of every element of x (the sum loss): the result holds value parts
 * over every axis or batch slice that splits x. */
int vd_gen_i_sum_all(vd_gen_ctx *g, int x, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  vd_gen_dt *s = &g->dts[x];
  vd_gen_lay l = vd_gen_i_lay(LR, LR, LR, -1);
  for (int a = 0; a < AX_N; a++)
    if (s->fl.ax[a] >= 0 || s->fl.ax[a] == LP) l.ax[a] = LP;
  l.dpart = s->fl.bdim >= 0 || s->fl.dpart;
  int64_t dims[VD_MAX_DIMS];
  for (int i = 0; i < s->ndim; i++) dims[i] = i;
  int ndim = s->ndim;
  int64_t one[1] = {1};
  int y = vd_gen_i_act(g, s->stage, name, 0, one, l);
  if (y < 0) return -1;
  vd_gen_i_op(g, "sum", name, layer, &x, 1, &y, 1);
  vd_gen_i_aints(g, "dims", dims, (uint32_t)ndim);
  vd_gen_i_ai(g, "keepdim", 0);
  return y;
}

int vd_gen_i_token_count(vd_gen_ctx *g, int mask, const char *name) {
  if (g->failed || mask < 0) return -1;
  if (!g->par) return vd_gen_i_sum_all(g, mask, name, -1);
  vd_gen_dt m = g->dts[mask];
  int st = m.stage;
  if (g->seg_init < 0 || st != g->pp - 1) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: token count outside the last stage's init segment", name);
    return -1;
  }
  /* the rank's mask over all its microbatches (same single tensor) */
  int pm = vd_gen_i_new_dt(g, st, -1, m.name, m.dtype, VD_ROLE_INPUT, VD_SCOPE_PERSISTENT, m.ndim, m.gshape, m.fl, 0);
  vd_gen_lay ll = vd_gen_i_lay(LR, LR, LR, -1);
  for (int a = 0; a < AX_N; a++)
    if (m.fl.ax[a] >= 0 || m.fl.ax[a] == LP) ll.ax[a] = LP;
  ll.dpart = 1;
  int64_t one[1] = {1};
  int loc = vd_gen_i_new_dt(g, st, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, one, ll, 0);
  if (pm < 0 || loc < 0) return -1;
  vd_gen_attr at[2];
  memset(at, 0, sizeof(at));
  at[0].key = "dims";
  at[0].kind = VD_ATTR_INTS;
  at[0].n_ints = (uint32_t)m.ndim;
  for (int i = 0; i < m.ndim; i++) at[0].ints[i] = i;
  at[1] = vd_gen_i_iattr("keepdim", 0);
  for (int64_t r = 0; r < g->rps; r++) {
    uint32_t ti = g->dts[pm].t[r], to = g->dts[loc].t[r];
    if (vd_gen_i_emit(g, st, r, g->seg_init, "sum", name, -1, VD_PHASE_FWD, &ti, 1, &to, 1, at, 2, -1, NULL, 0, 0) < 0)
      return -1;
  }
  unsigned mk = vd_gen_i_lp_mask(g->dts[loc].fl);
  int64_t gsize = 1;
  for (int a = 0; a < AX_N; a++)
    if (mk & (1u << a)) gsize *= g->deg[a];
  if (gsize * g->dp == 1) return loc;
  /* the global count: all_reduce over the ranks holding other tokens
   * (cp, ep), spanning the DP replicas; TP ranks hold the same tokens */
  int tot = vd_gen_i_new_dt(g, st, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, one,
                   vd_gen_i_lay(LR, LR, LR, -1), 0);
  if (tot < 0) return -1;
  if (vd_gen_i_emit_coll(g, st, g->seg_init, "all_reduce", name, -1, loc, tot, mk, g->dp > 1, NULL, 0) < 0) return -1;
  return tot;
}
