/*
 * gen/dtensor.c - distributed tensors ("dtensors") of the engine: the
 * failure record of a build, the single build's name table (the parallel
 * build annotates lineages through it), rank coordinates, layouts, and the
 * creation of a dtensor with one plan tensor per stored rank of its stage.
 * 
 * Rank layout (documented in docs/models.md): stored rank
 *     r = tp_rank + tp * (cp_rank + cp * (ep_rank + ep * pp_stage))
 * i.e. "tp,cp,ep,pp,dp", tp fastest; DP replicas are not stored.
 * 
 * Invariants: the single plan is built first with every degree 1; its
 * tensor names are unique and the parallel build annotates a tensor with
 * the single tensor of the same name (if any), so the two builds must name
 * corresponding tensors identically and nothing else alike.
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/slots.h"

/* ---- small helpers ---------------------------------------------------- */

const char *vd_gen_i_fmt(vd_gen_ctx *g, const char *fmt, ...) {
  char *b = g->fmtbuf[g->fmti++ & 7];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof(g->fmtbuf[0]), fmt, ap);
  va_end(ap);
  return b;
}

void vd_gen_i_fail(vd_gen_ctx *g, vd_rc rc, const char *msg, const char *what) {
  if (!g->failed) vd_diag_set(g->d, rc, __FILE__, __LINE__, NULL, what, NULL, "%s", msg);
  g->failed = rc ? (int)rc : 1;
}

/* The phases (emit_*) return vd_rc; the builders they call return an index
 * or -1, with the failure recorded in g->failed and the diag (an index
 * builder that returns -1 without recording anything ran out of memory).
 * vd_gen_i_rc turns that record into the phase's vd_rc. */
vd_rc vd_gen_i_rc(vd_gen_ctx *g) {
  if (!g->failed) vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
  return g->d && g->d->rc ? g->d->rc : (g->failed > 0 ? (vd_rc)g->failed : VD_EINTERNAL);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

static uint64_t name_hash(const void *key) { return hash_str(*(char *const *)key); }

/* A slot is used when its name is not NULL. */
static int name_used(const void *key, const void *val) {
  (void)val;
  return *(char *const *)key != NULL;
}

static const vd_slots_kind names_kind = {sizeof(char *), sizeof(int64_t), name_hash, name_used};

/* Single build: remember name -> id; a duplicate is a generator bug. */
static int names_put(vd_gen_ctx *g, const char *name, int64_t id) {
  if (vd_slots_crowded(g->n_names, g->name_cap) &&
      vd_slots_regrow(&names_kind, (void **)&g->names, (void **)&g->name_ids, &g->name_cap, 1024))
    return -1;
  size_t h = hash_str(name) & (g->name_cap - 1);
  while (g->names[h]) {
    if (strcmp(g->names[h], name) == 0) return -2;
    h = vd_slots_next(h, g->name_cap);
  }
  g->names[h] = vd_strdup(name);
  if (!g->names[h]) return -1;
  g->name_ids[h] = id;
  g->n_names++;
  return 0;
}

static int names_get(const vd_gen_ctx *s, const char *name, int64_t *id) {
  if (!s || !s->name_cap) return 0;
  size_t h = hash_str(name) & (s->name_cap - 1);
  while (s->names[h]) {
    if (strcmp(s->names[h], name) == 0) {
      *id = s->name_ids[h];
      return 1;
    }
    h = vd_slots_next(h, s->name_cap);
  }
  return 0;
}

/* coordinates of rank-in-stage r */
void vd_gen_i_coords(const vd_gen_ctx *g, int64_t r, int64_t c[AX_N]) {
  c[AX_TP] = r % g->tp;
  c[AX_CP] = (r / g->tp) % g->cp;
  c[AX_EP] = r / (g->tp * g->cp);
}
int64_t vd_gen_i_rank_of(const vd_gen_ctx *g, int stage, int64_t r) { return r + g->rps * stage; }

vd_gen_lay vd_gen_i_lay(int8_t tp, int8_t cp, int8_t ep, int8_t bdim) {
  vd_gen_lay l;
  memset(&l, 0, sizeof(l));
  l.ax[AX_TP] = tp;
  l.ax[AX_CP] = cp;
  l.ax[AX_EP] = ep;
  l.bdim = bdim;
  return l;
}

vd_gen_lay vd_gen_i_grad_default(vd_gen_lay l) {
  for (int a = 0; a < AX_N; a++)
    if (l.ax[a] == LP) l.ax[a] = LR;
  l.dpart = 0;
  l.zero = 0;
  l.tcopy = 0;
  return l;
}

/* ---- dtensors --------------------------------------------------------- */

/* The engine's record of a new dtensor (its plan tensors come after), or
 * -1 on failure (recorded). */
static int dt_record(vd_gen_ctx *g, int stage, int layer, const char *name, vd_dtype dtype, vd_role role,
                     vd_scope scope, int ndim, const int64_t *gshape, vd_gen_lay fl, int nolin) {
  if (VD_GROW(g->dts, g->cap_dts, g->n_dts + 1)) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  int id = (int)g->n_dts;
  vd_gen_dt *x = &g->dts[id];
  memset(x, 0, sizeof(*x));
  x->name = vd_strdup(name);
  x->t = vd_calloc((size_t)g->rps, sizeof(uint32_t));
  g->n_dts++;
  if (!x->name || !x->t) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  x->stage = stage;
  x->layer = layer;
  x->ndim = ndim;
  memcpy(x->gshape, gshape, (size_t)ndim * sizeof(int64_t));
  x->fl = fl;
  x->gl = vd_gen_i_grad_default(fl);
  x->dtype = dtype;
  x->role = role;
  x->scope = scope;
  x->mr_first = -1;
  x->grad = -1;
  x->wacc = -1;
  x->tied = -1;
  x->tgrad = -1;
  x->nolin = nolin;
  return id;
}

/* Dimension 0 of a ZeRO-sharded tensor: the rank's shard of the extent
 * *ext (already split by the axes) at offset *lo; -1 (recorded) when the
 * extent does not divide. */
static int zero_shard(vd_gen_ctx *g, const char *name, const int64_t c[AX_N], vd_gen_lay fl, int64_t *ext,
                      int64_t *lo, vd_lineage_ann *L) {
  int64_t nst = 1, pos = 0;
  for (int a = AX_N - 1; a >= 0; a--)
    if (fl.zmask & (1u << a)) {
      nst *= g->deg[a];
      pos = pos * g->deg[a] + c[a];
    }
  if (*ext % (nst * g->dp)) {
    vd_gen_i_fail(g, VD_EUSAGE,
         vd_gen_i_fmt(g, "--zero 1: dimension 0 (%lld) of '%s' on a rank is not divisible by the ZeRO group size %lld",
                      (long long)*ext, name, (long long)(nst * g->dp)),
         NULL);
    return -1;
  }
  *ext /= nst * g->dp;
  *lo += pos * *ext;
  L->dp_shift[0] = nst * *ext;
  return 0;
}

/* The local shape of t (rank coordinates c) and its lineage's box
 * lo..hi and shifts; -1 (recorded) when a degree does not divide. */
static int local_box(vd_gen_ctx *g, const char *name, const int64_t c[AX_N], vd_gen_lay fl, vd_scope scope,
                     int ndim, const int64_t *gshape, vd_tensor_t *t) {
  vd_lineage_ann *L = &t->lin;
  for (int i = 0; i < ndim; i++) {
    int64_t ext = gshape[i], lo = 0;
    if (i == fl.bdim) {
      if (ext % g->dp) goto indivisible;
      ext /= g->dp;
      L->dp_shift[i] = ext;
    }
    /* microbatches before the axes: microbatch m of a replica is one block
     * of rows for all its EP ranks (docs/models.md), so a gradient summed
     * over the EP ranks' tokens of one microbatch (the experts') sums one
     * block and is proven by part */
    if (i == fl.bdim && scope == VD_SCOPE_PER_MB) {
      if (ext % g->nm) goto indivisible;
      ext /= g->nm;
      L->mb_shift[i] = ext;
    }
    static const int order[AX_N] = {AX_EP, AX_CP, AX_TP};
    for (int k = 0; k < AX_N; k++) {
      int a = order[k];
      if (fl.ax[a] != i) continue;
      if (ext % g->deg[a]) goto indivisible;
      ext /= g->deg[a];
      lo += c[a] * ext;
    }
    if (i == 0 && fl.zero && zero_shard(g, name, c, fl, &ext, &lo, L)) return -1;
    t->shape[i] = ext;
    L->lo[i] = lo;
    L->hi[i] = lo + ext;
  }
  return 0;
indivisible:
  vd_gen_i_fail(g, VD_EUSAGE,
       vd_gen_i_fmt(g, "tensor '%s' cannot be split evenly by the requested degrees", name), NULL);
  return -1;
}

/* Which part of the sum the rank's value is (part_k of part_n): its digits
 * on the LP axes, the copy of a tied weight, then microbatch and replica. */
static void value_part(const vd_gen_ctx *g, const int64_t c[AX_N], vd_gen_lay fl, vd_scope scope,
                       vd_lineage_ann *L) {
  int64_t k = 0, n = 1;
  for (int a = 0; a < AX_N; a++)
    if (fl.ax[a] == LP) {
      k = k * g->deg[a] + c[a];
      n *= g->deg[a];
    }
  if (fl.tcopy) { /* copy 0/1 of a tied weight: least significant part digit */
    k = k * 2 + (fl.tcopy - 1);
    n *= 2;
  }
  if (fl.dpart) {
    if (scope == VD_SCOPE_PER_MB) {
      L->mb_part = n;
      n *= g->nm;
    }
    L->dp_part = n;
    n *= g->dp;
  }
  L->part_k = k;
  L->part_n = n;
}

/* Adds t to the plan as dtensor id's tensor of stage-rank r; the single
 * build also enters its name. 0, or -1 (recorded). */
static int add_rank_tensor(vd_gen_ctx *g, int id, int64_t r, const char *name, const vd_tensor_t *t) {
  uint32_t idx;
  CK(vd_plan_add_tensor(g->p, t, name, &idx));
  g->dts[id].t[r] = idx;
  if (!g->par) {
    int rc = names_put(g, name, t->id);
    if (rc == -1) CK(VD_ENOMEM);
    if (rc == -2) {
      vd_gen_i_fail(g, VD_EINTERNAL, vd_gen_i_fmt(g, "generator bug: two single tensors named '%s'", name), NULL);
      return -1;
    }
  }
  return 0;
}

int vd_gen_i_new_dt(vd_gen_ctx *g, int stage, int layer, const char *name, vd_dtype dtype, vd_role role,
                  vd_scope scope, int ndim, const int64_t *gshape, vd_gen_lay fl, int nolin) {
  if (g->failed) return -1;
  int64_t gsh[VD_MAX_DIMS]; /* gshape may point into g->dts, which may move */
  if (ndim < 0 || ndim > VD_MAX_DIMS) {
    vd_gen_i_fail(g, VD_EINTERNAL, "generator bug: bad rank", name);
    return -1;
  }
  memcpy(gsh, gshape, (size_t)ndim * sizeof(int64_t));
  gshape = gsh;
  /* an axis of degree 1 neither splits nor holds parts */
  /* MoE: the EP ranks are data parallel for everything with a batch dim */
  if (g->c->model == VD_GEN_MOE && fl.bdim >= 0 && fl.ax[AX_EP] == LR) fl.ax[AX_EP] = fl.bdim;
  for (int a = 0; a < AX_N; a++)
    if (g->deg[a] == 1) fl.ax[a] = LR;
  int id = dt_record(g, stage, layer, name, dtype, role, scope, ndim, gshape, fl, nolin);
  if (id < 0) return -1;
  int64_t sid = -1;
  int has_single = g->par && !nolin && names_get(g->single, name, &sid);
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t c[AX_N];
    vd_gen_i_coords(g, r, c);
    vd_tensor_t t;
    memset(&t, 0, sizeof(t));
    t.id = g->next_tensor_id++;
    t.rank = (int32_t)vd_gen_i_rank_of(g, stage, r);
    t.ndim = ndim;
    t.dtype = dtype;
    t.role = role;
    t.scope = scope;
    if (local_box(g, name, c, fl, scope, ndim, gshape, &t)) return -1;
    value_part(g, c, fl, scope, &t.lin);
    if (has_single) {
      t.lin.full = sid;
      t.has_lin = 1;
    }
    if (add_rank_tensor(g, id, r, name, &t)) return -1;
  }
  return id;
}

int vd_gen_i_act(vd_gen_ctx *g, int stage, const char *name, int ndim, const int64_t *gshape, vd_gen_lay fl) {
  return vd_gen_i_new_dt(g, stage, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PER_MB, ndim, gshape, fl, 0);
}

int vd_gen_i_input(vd_gen_ctx *g, int stage, const char *name, vd_dtype dt, int ndim, const int64_t *gshape,
                   vd_gen_lay fl) {
  return vd_gen_i_new_dt(g, stage, -1, name, dt, VD_ROLE_INPUT, VD_SCOPE_PER_MB, ndim, gshape, fl, 0);
}

int vd_gen_i_weight(vd_gen_ctx *g, int stage, int layer, const char *name, int ndim, const int64_t *gshape,
                    vd_gen_lay fl, vd_gen_lay gl) {
  int w = vd_gen_i_new_dt(g, stage, layer, name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, ndim, gshape, fl, 0);
  if (w < 0) return -1;
  gl.dpart = 1;
  gl.bdim = -1;
  /* MoE: a weight that is not split over EP sees other tokens on each EP rank */
  if (g->c->model == VD_GEN_MOE && gl.ax[AX_EP] == LR) gl.ax[AX_EP] = LP;
  g->dts[w].gl = gl;
  g->dts[w].rg = 1;
  g->dts[w].is_weight = 1;
  /* the persistent gradient (accumulator when nm > 1) */
  int acc = vd_gen_i_new_dt(g, stage, layer, vd_gen_i_fmt(g, "%s.grad", name), VD_DT_F64, VD_ROLE_GRAD,
                   VD_SCOPE_PERSISTENT, ndim, gshape, gl, 0);
  if (acc < 0) return -1;
  g->dts[w].wacc = acc;
  if (VD_GROW(g->weights, g->cap_weights, g->n_weights + 1)) {
    vd_gen_i_fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  g->weights[g->n_weights++] = w;
  return w;
}

void vd_gen_i_set_gl(vd_gen_ctx *g, int dt, vd_gen_lay gl) {
  if (dt >= 0) g->dts[dt].gl = gl;
}

void vd_gen_i_nolin(vd_gen_ctx *g, int dt) {
  if (dt < 0) return;
  g->dts[dt].nolin = 1;
  for (int64_t r = 0; r < g->rps; r++) {
    vd_tensor_t *t = &g->p->tensors[g->dts[dt].t[r]];
    t->has_lin = 0;
    memset(&t->lin, 0, sizeof(t->lin));
  }
}
