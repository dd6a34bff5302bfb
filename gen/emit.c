/*
 * gen/emit.c - node emission: one plan node per stored rank of a stage (SPMD),
 * collective groups, pipeline moves, and the forward tape emitted in order
 * with a multiref in front of every multi-consumed tensor.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- node emission ---------------------------------------------------- */

static int64_t attr_val(const vd_gen_ctx *g, const vd_gen_attr *a, int64_t r) {
  int64_t c[AX_N];
  vd_gen_i_coords(g, r, c);
  int64_t v = a->i;
  for (int k = 0; k < AX_N; k++) v += a->coef[k] * c[k];
  return v;
}

/* Emits one node on stage-rank r of `stage`. */
int vd_gen_i_emit(vd_gen_ctx *g, int stage, int64_t r, int32_t seg, const char *op, const char *name, int layer,
                vd_phase phase, const uint32_t *in, int nin, const uint32_t *out, int nout,
                const vd_gen_attr *attrs, int nattr, int64_t key, const int64_t *group, int ngroup,
                int span) {
  if (g->failed) return -1;
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.id = g->next_node_id++;
  n.rank = (int32_t)vd_gen_i_rank_of(g, stage, r);
  n.segment = seg;
  n.layer = layer;
  n.phase = phase;
  n.coll = key;
  n.span_replicas = span;
  uint32_t idx;
  CK(vd_plan_add_node(g->p, &n, op, name, in, (uint32_t)nin, out, (uint32_t)nout, group, (uint32_t)ngroup, &idx));
  for (int i = 0; i < nattr; i++) {
    const vd_gen_attr *a = &attrs[i];
    switch (a->kind) {
    case VD_ATTR_INT: CK(vd_plan_attr_int(g->p, idx, a->key, attr_val(g, a, r))); break;
    case VD_ATTR_FLOAT: CK(vd_plan_attr_float(g->p, idx, a->key, a->f)); break;
    case VD_ATTR_STR: CK(vd_plan_attr_str(g->p, idx, a->key, a->s)); break;
    case VD_ATTR_INTS: CK(vd_plan_attr_ints(g->p, idx, a->key, a->ints, a->n_ints)); break;
    case VD_ATTR_FLOATS: break;
    }
  }
  return 0;
}

/* Group of stage-rank r over the axes in mask (tp fastest), as global
 * stored ranks; returns its size and the group's index base (r with the
 * mask coordinates zeroed). */
int vd_gen_i_group_of(const vd_gen_ctx *g, int stage, int64_t r, unsigned mask, int64_t *grp, int64_t *gid) {
  int64_t c[AX_N];
  vd_gen_i_coords(g, r, c);
  int64_t n = 1;
  for (int a = 0; a < AX_N; a++)
    if (mask & (1u << a)) n *= g->deg[a];
  for (int64_t i = 0; i < n; i++) {
    int64_t cc[AX_N], rest = i;
    for (int a = 0; a < AX_N; a++) {
      cc[a] = c[a];
      if (mask & (1u << a)) {
        cc[a] = rest % g->deg[a];
        rest /= g->deg[a];
      }
    }
    int64_t rr = cc[AX_TP] + g->tp * (cc[AX_CP] + g->cp * cc[AX_EP]);
    if (grp) grp[i] = vd_gen_i_rank_of(g, stage, rr);
    if (i == 0 && gid) *gid = rr;
  }
  return (int)n;
}

int vd_gen_i_emit_coll(vd_gen_ctx *g, int stage, int32_t seg, const char *op, const char *name, int layer, int x,
                       int y, unsigned mask, int span, const vd_gen_attr *at, int nat) {
  int64_t base = g->next_key;
  int64_t grp[1 << 10];
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t gid = 0;
    int n = vd_gen_i_group_of(g, stage, r, mask, grp, &gid);
    uint32_t ti = g->dts[x].t[r], to = g->dts[y].t[r];
    if (vd_gen_i_emit(g, stage, r, seg, op, name, layer, VD_PHASE_COMM, &ti, 1, &to, 1, at, nat, base + gid, grp, n,
                      span) < 0)
      return -1;
  }
  g->next_key += g->rps;
  return 0;
}

/* Emits op `o` (dtensor ins/outs) on every rank of its stage in segment segs[stage]. */
int vd_gen_i_emit_spmd(vd_gen_ctx *g, const char *op, const char *name, int layer, vd_phase phase, int32_t *segs,
                     const int *in, int nin, const int *out, int nout, const vd_gen_attr *attrs, int nattr,
                     int coll_axis) {
  int stage = g->dts[nout ? out[0] : in[0]].stage;
  int64_t base = g->next_key;
  int64_t grp[1 << 10];
  for (int64_t r = 0; r < g->rps; r++) {
    uint32_t ti[VD_GEN_MAX_IO], to[VD_GEN_MAX_IO];
    for (int i = 0; i < nin; i++) ti[i] = g->dts[in[i]].t[r];
    for (int i = 0; i < nout; i++) to[i] = g->dts[out[i]].t[r];
    if (coll_axis >= 0) {
      int64_t gid = 0;
      int n = vd_gen_i_group_of(g, stage, r, 1u << coll_axis, grp, &gid);
      if (vd_gen_i_emit(g, stage, r, segs[stage], op, name, layer, VD_PHASE_COMM, ti, nin, to, nout, attrs, nattr,
               base + gid, grp, n, 0) < 0)
        return -1;
    } else if (vd_gen_i_emit(g, stage, r, segs[stage], op, name, layer, phase, ti, nin, to, nout, attrs, nattr, -1, NULL,
                    0, 0) < 0)
      return -1;
  }
  if (coll_axis >= 0) g->next_key += g->rps;
  return 0;
}

/* Pipeline move: send on x's stage, recv on y's stage. */
int vd_gen_i_emit_move(vd_gen_ctx *g, int x, int y, const char *name, int layer, int32_t *segs) {
  int sx = g->dts[x].stage, sy = g->dts[y].stage;
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t key = g->next_key + r;
    int64_t grp[2] = {vd_gen_i_rank_of(g, sx, r), vd_gen_i_rank_of(g, sy, r)};
    uint32_t tx = g->dts[x].t[r], ty = g->dts[y].t[r];
    if (vd_gen_i_emit(g, sx, r, segs[sx], "send", name, layer, VD_PHASE_COMM, &tx, 1, NULL, 0, NULL, 0, key, grp, 2, 0) < 0)
      return -1;
    if (vd_gen_i_emit(g, sy, r, segs[sy], "recv", name, layer, VD_PHASE_COMM, NULL, 0, &ty, 1, NULL, 0, key, grp, 2, 0) < 0)
      return -1;
  }
  g->next_key += g->rps;
  return 0;
}

static int push_emitted(vd_gen_ctx *g, const vd_gen_op *o) {
  if (VD_GROW(g->emitted, g->cap_emitted, g->n_emitted + 1)) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  g->emitted[g->n_emitted++] = *o;
  return 0;
}

/* The tensor a consumer reads: x itself, or its next multiref copy. */
static int take_input(vd_gen_ctx *g, int x, int layer, size_t at) {
  vd_gen_dt *s = &g->dts[x];
  if (!s->rg || s->uses <= 1) return x;
  if (s->mr_first < 0) {
    int n = s->uses;
    int outs[VD_GEN_MAX_IO];
    if (n > VD_GEN_MAX_IO) {
      vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: tensor consumed too often", s->name);
      return -1;
    }
    /* outputs are named after their consumers ("x@layers.0.attn.q"): the
     * consumers' names are the same in both plans even where the parallel
     * plan routes some uses through a region entry */
    const char *cons[VD_GEN_MAX_IO];
    int nc = 0;
    for (size_t k = at; k < g->n_ops && nc < n; k++)
      for (int j = 0; j < g->ops[k].nin && nc < n; j++)
        if (g->ops[k].in[j] == x) cons[nc++] = g->ops[k].name;
    if (nc != n) {
      vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: consumers not found", s->name);
      return -1;
    }
    for (int i = 0; i < n; i++) {
      s = &g->dts[x];
      char nm[512];
      snprintf(nm, sizeof(nm), "%s@%s", s->name, cons[i]);
      /* per microbatch: the multiref runs in the forward segment, also for a
       * persistent input (a tied weight read by the embedding and the head) */
      int y = vd_gen_i_new_dt(g, s->stage, s->layer, nm, s->dtype, VD_ROLE_ACT, VD_SCOPE_PER_MB, s->ndim, s->gshape, s->fl, 0);
      if (y < 0) return -1;
      g->dts[y].gl = g->dts[x].gl;
      g->dts[y].rg = 1;
      outs[i] = y;
    }
    s = &g->dts[x];
    s->mr_first = outs[0];
    s->mr_next = 0;
    vd_gen_op mo;
    memset(&mo, 0, sizeof(mo));
    mo.op = "multiref";
    mo.name = s->name; /* borrowed: the dtensor outlives the emitted list */
    mo.layer = s->layer >= 0 ? s->layer : layer;
    mo.kind = K_COMPUTE;
    mo.axis = -1;
    mo.in[0] = x;
    mo.nin = 1;
    mo.nout = n;
    memcpy(mo.out, outs, sizeof(int) * (size_t)n);
    if (vd_gen_i_emit_spmd(g, "multiref", mo.name, mo.layer, VD_PHASE_FWD, g->seg_fwd, mo.in, 1, mo.out, n, NULL, 0, -1) < 0)
      return -1;
    if (push_emitted(g, &mo) < 0) return -1;
  }
  s = &g->dts[x];
  return s->mr_first + s->mr_next++;
}

vd_rc vd_gen_i_emit_forward(vd_gen_ctx *g) {
  for (size_t i = 0; i < g->n_ops && !g->failed; i++) {
    vd_gen_op o = g->ops[i];
    for (int k = 0; k < o.nin; k++) {
      o.in[k] = take_input(g, o.in[k], o.layer, i);
      GEN_CK(o.in[k]);
    }
    int rc = 0;
    switch (o.kind) {
    case K_COMPUTE:
    case K_ENTRY:
      rc = vd_gen_i_emit_spmd(g, o.op, o.name, o.layer, VD_PHASE_FWD, g->seg_fwd, o.in, o.nin, o.out, o.nout, o.attrs,
                     o.nattr, -1);
      break;
    case K_COLL:
      rc = vd_gen_i_emit_spmd(g, o.op, o.name, o.layer, VD_PHASE_COMM, g->seg_fwd, o.in, o.nin, o.out, o.nout, o.attrs,
                     o.nattr, o.axis);
      break;
    case K_MOVE: rc = vd_gen_i_emit_move(g, o.in[0], o.out[0], o.name, o.layer, g->seg_fwd); break;
    }
    GEN_CK(rc);
    GEN_CK(push_emitted(g, &o));
  }
  return g->failed ? vd_gen_i_rc(g) : VD_OK;
}
