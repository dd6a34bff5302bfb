/*
 * plans/gen.c - the generator engine: config checks, the SPMD dtensor tape,
 * lineage from layouts, forward emission with multiref, the derived
 * backward, gradient accumulation and reduction, clipping, the optimizer and
 * the 1F1B schedules.  The models themselves are in gen_mlp.c,
 * gen_llama3.c, gen_moe.c (see gen_int.h for the model-facing API and
 * docs/models.md for what is emitted where and why).
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
#include "gen_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- config ----------------------------------------------------------- */

void vd_gen_config_default(vd_gen_config *c) {
  memset(c, 0, sizeof(*c));
  c->model = VD_GEN_LLAMA3;
  c->layers = 2;
  c->hidden = 64;
  c->heads = 4;
  c->seq = 16;
  c->batch = 8;
  c->dp = c->tp = c->pp = c->nm = c->cp = c->ep = 1;
  c->optimizer = VD_GEN_SGD;
  c->loss = VD_GEN_LOSS_DEFAULT;
  c->seed = 1;
}

static const char *const model_names[] = {"mlp", "llama3", "moe"};

int vd_gen_model_lookup(const char *name) {
  for (int i = 0; i < 3; i++)
    if (strcmp(model_names[i], name) == 0) return i;
  return -1;
}

const char *vd_gen_model_name(vd_gen_model m) { return (unsigned)m < 3 ? model_names[m] : "?"; }

/* Fills the model defaults of fields left 0. */
static void complete(const vd_gen_config *in, vd_gen_config *c) {
  *c = *in;
  if (!c->kv_heads) c->kv_heads = c->heads;
  if (!c->ffn) c->ffn = c->model == VD_GEN_MLP ? 4 * c->hidden : 2 * c->hidden;
  if (!c->vocab) c->vocab = 128;
  if (!c->experts) c->experts = 4;
  if (!c->topk) c->topk = 2;
  if (c->loss == VD_GEN_LOSS_DEFAULT) c->loss = c->model == VD_GEN_MLP ? VD_GEN_LOSS_SUM : VD_GEN_LOSS_CE;
}

#define BAD(...) VD_FAIL(d, VD_EUSAGE, NULL, NULL, NULL, __VA_ARGS__)
/* note: where b was not given, what it defaulted to (the user must not be
 * blamed for an option they never wrote). */
#define NEED_DIV_NOTE(a, an, b, bn, note)                                                      \
  do {                                                                                         \
    if ((b) % (a) != 0)                                                                        \
      BAD("%s %lld does not divide %s %lld%s", an, (long long)(a), bn, (long long)(b), note);  \
  } while (0)
#define NEED_DIV(a, an, b, bn) NEED_DIV_NOTE(a, an, b, bn, "")
#define DEFAULTED(field, what) (in->field ? "" : " (" what ")")

vd_rc vd_gen_check(const vd_gen_config *in, vd_diag *d) {
  vd_gen_config cc, *c = &cc;
  complete(in, c);
  if ((unsigned)c->model > VD_GEN_MOE) BAD("--model must be mlp, llama3 or moe");
  struct { const char *n; int64_t v; } pos[] = {
      {"--layers", c->layers}, {"--hidden", c->hidden}, {"--heads", c->heads},
      {"--kv-heads", c->kv_heads}, {"--ffn", c->ffn}, {"--vocab", c->vocab}, {"--seq", c->seq},
      {"--batch", c->batch}, {"--dp", c->dp}, {"--tp", c->tp}, {"--pp", c->pp}, {"--nm", c->nm},
      {"--cp", c->cp}, {"--ep", c->ep}, {"--experts", c->experts}, {"--topk", c->topk}};
  for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++)
    if (pos[i].v < 1 || pos[i].v > (1LL << 40)) BAD("%s must be a positive integer, got %lld", pos[i].n, (long long)pos[i].v);
  if (c->zero != 0 && c->zero != 1) BAD("--zero must be 0 or 1, got %d", c->zero);
  if (!(c->grad_clip >= 0) || isinf(c->grad_clip)) BAD("--grad-clip must be a finite number >= 0");
  if (c->pp > c->layers) BAD("--pp %lld exceeds --layers %lld (every stage needs a layer)", (long long)c->pp, (long long)c->layers);
  int64_t ranks = c->tp * c->cp * c->ep * c->pp;
  if (c->tp * c->cp * c->ep > 1024) BAD("tp*cp*ep must be <= 1024");
  if (ranks > (1 << 20) || c->dp > (1 << 20) || c->nm > (1 << 20)) BAD("degrees too large: tp*cp*ep*pp must be <= 2^20 and dp, nm <= 2^20");
  if (c->batch % (c->dp * c->ep * c->nm) != 0)
    BAD("--batch %lld is not divisible by dp*ep*nm = %lld", (long long)c->batch, (long long)(c->dp * c->ep * c->nm));
  if (c->model == VD_GEN_MLP) {
    if (c->tie_embeddings) BAD("--tie-embeddings applies to llama3 and moe, not mlp (no embedding)");
    if (c->loss_mask) BAD("--loss-mask applies to llama3 and moe, not mlp (no tokens)");
    if (c->cp > 1) BAD("--cp applies to llama3 and moe, not mlp");
    if (c->ep > 1) BAD("--ep applies to moe only");
    if (c->sp) BAD("--sp applies to llama3 and moe, not mlp");
    if (c->loss == VD_GEN_LOSS_CE) BAD("--loss ce needs a vocabulary: use --loss sum with --model mlp");
    NEED_DIV_NOTE(c->tp, "--tp", c->ffn, "--ffn", DEFAULTED(ffn, "not given: it defaults to 4 x --hidden"));
    return VD_OK;
  }
  if (c->ep > 1 && c->model != VD_GEN_MOE) BAD("--ep applies to moe only");
  if (c->loss_mask && c->loss != VD_GEN_LOSS_CE) BAD("--loss-mask needs --loss ce (it weights the per-token loss)");
  NEED_DIV(c->heads, "--heads", c->hidden, "--hidden");
  if ((c->hidden / c->heads) % 2) BAD("head dim --hidden/--heads = %lld must be even (rope pairs)", (long long)(c->hidden / c->heads));
  NEED_DIV(c->kv_heads, "--kv-heads", c->heads, "--heads");
  NEED_DIV_NOTE(c->tp, "--tp", c->kv_heads, "--kv-heads", DEFAULTED(kv_heads, "not given: it defaults to --heads"));
  NEED_DIV_NOTE(c->tp, "--tp", c->ffn, "--ffn", DEFAULTED(ffn, "not given: it defaults to 2 x --hidden"));
  NEED_DIV_NOTE(c->tp, "--tp", c->vocab, "--vocab", DEFAULTED(vocab, "not given: it defaults to 128"));
  NEED_DIV(c->cp, "--cp", c->seq, "--seq");
  if (c->sp && (c->seq / c->cp) % c->tp)
    BAD("--sp needs --seq/--cp = %lld divisible by --tp %lld", (long long)(c->seq / c->cp), (long long)c->tp);
  if (c->model == VD_GEN_MOE) {
    NEED_DIV_NOTE(c->ep, "--ep", c->experts, "--experts", DEFAULTED(experts, "not given: it defaults to 4"));
    if (c->topk > c->experts) BAD("--topk %lld exceeds --experts %lld", (long long)c->topk, (long long)c->experts);
  }
  return VD_OK;
}

/* ---- small helpers ---------------------------------------------------- */

const char *vd_gen_i_fmt(vd_gen_ctx *g, const char *fmt, ...) {
  char *b = g->fmtbuf[g->fmti++ & 7];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b, sizeof(g->fmtbuf[0]), fmt, ap);
  va_end(ap);
  return b;
}

static void fail(vd_gen_ctx *g, vd_rc rc, const char *msg, const char *what) {
  if (!g->failed) vd_diag_set(g->d, rc, __FILE__, __LINE__, NULL, what, NULL, "%s", msg);
  g->failed = rc ? (int)rc : 1;
}
#define CK(expr)                                   \
  do {                                             \
    vd_rc ck_rc_ = (expr);                         \
    if (ck_rc_ != VD_OK) {                         \
      if (!g->failed) fail(g, ck_rc_, "building the plan failed (out of memory)", NULL); \
      return -1;                                   \
    }                                              \
  } while (0)

/* The phases (emit_*) return vd_rc; the builders they call return an index
 * or -1, with the failure recorded in g->failed and the diag (an index
 * builder that returns -1 without recording anything ran out of memory).
 * gen_rc turns that record into the phase's vd_rc. */
static vd_rc gen_rc(vd_gen_ctx *g) {
  if (!g->failed) fail(g, VD_ENOMEM, "out of memory", NULL);
  return g->d && g->d->rc ? g->d->rc : (g->failed > 0 ? (vd_rc)g->failed : VD_EINTERNAL);
}
/* A plans/ call (vd_rc) inside a phase. */
#define PLAN_CK(expr)                                                          \
  do {                                                                         \
    vd_rc pk_rc_ = (expr);                                                     \
    if (pk_rc_ != VD_OK) {                                                     \
      if (!g->failed) fail(g, pk_rc_, "building the plan failed (out of memory)", NULL); \
      return gen_rc(g);                                                        \
    }                                                                          \
  } while (0)
#define GEN_CK(expr)                                                           \
  do {                                                                         \
    if ((expr) < 0) return gen_rc(g);                                          \
  } while (0)

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

/* Single build: remember name -> id; a duplicate is a generator bug. */
static int names_put(vd_gen_ctx *g, const char *name, int64_t id) {
  if ((g->n_names + 1) * 2 > g->name_cap) {
    size_t nc = g->name_cap ? g->name_cap * 2 : 1024;
    char **nn = vd_calloc(nc, sizeof(*nn));
    int64_t *ni = vd_calloc(nc, sizeof(*ni));
    if (!nn || !ni) {
      vd_free(nn);
      vd_free(ni);
      return -1;
    }
    for (size_t i = 0; i < g->name_cap; i++) {
      if (!g->names[i]) continue;
      size_t h = hash_str(g->names[i]) & (nc - 1);
      while (nn[h]) h = (h + 1) & (nc - 1);
      nn[h] = g->names[i];
      ni[h] = g->name_ids[i];
    }
    vd_free(g->names);
    vd_free(g->name_ids);
    g->names = nn;
    g->name_ids = ni;
    g->name_cap = nc;
  }
  size_t h = hash_str(name) & (g->name_cap - 1);
  while (g->names[h]) {
    if (strcmp(g->names[h], name) == 0) return -2;
    h = (h + 1) & (g->name_cap - 1);
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
    h = (h + 1) & (s->name_cap - 1);
  }
  return 0;
}

/* coordinates of rank-in-stage r */
static void coords(const vd_gen_ctx *g, int64_t r, int64_t c[AX_N]) {
  c[AX_TP] = r % g->tp;
  c[AX_CP] = (r / g->tp) % g->cp;
  c[AX_EP] = r / (g->tp * g->cp);
}
static int64_t rank_of(const vd_gen_ctx *g, int stage, int64_t r) { return r + g->rps * stage; }

vd_gen_lay vd_gen_i_lay(int8_t tp, int8_t cp, int8_t ep, int8_t bdim) {
  vd_gen_lay l;
  memset(&l, 0, sizeof(l));
  l.ax[AX_TP] = tp;
  l.ax[AX_CP] = cp;
  l.ax[AX_EP] = ep;
  l.bdim = bdim;
  return l;
}

static vd_gen_lay grad_default(vd_gen_lay l) {
  for (int a = 0; a < AX_N; a++)
    if (l.ax[a] == LP) l.ax[a] = LR;
  l.dpart = 0;
  l.zero = 0;
  l.tcopy = 0;
  return l;
}

/* ---- dtensors --------------------------------------------------------- */

static int new_dt(vd_gen_ctx *g, int stage, int layer, const char *name, vd_dtype dtype, vd_role role,
                  vd_scope scope, int ndim, const int64_t *gshape, vd_gen_lay fl, int nolin) {
  if (g->failed) return -1;
  int64_t gsh[VD_MAX_DIMS]; /* gshape may point into g->dts, which may move */
  if (ndim < 0 || ndim > VD_MAX_DIMS) {
    fail(g, VD_EINTERNAL, "generator bug: bad rank", name);
    return -1;
  }
  memcpy(gsh, gshape, (size_t)ndim * sizeof(int64_t));
  gshape = gsh;
  /* an axis of degree 1 neither splits nor holds parts */
  /* MoE: the EP ranks are data parallel for everything with a batch dim */
  if (g->c->model == VD_GEN_MOE && fl.bdim >= 0 && fl.ax[AX_EP] == LR) fl.ax[AX_EP] = fl.bdim;
  for (int a = 0; a < AX_N; a++)
    if (g->deg[a] == 1) fl.ax[a] = LR;
  if (VD_GROW(g->dts, g->cap_dts, g->n_dts + 1)) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  int id = (int)g->n_dts;
  vd_gen_dt *x = &g->dts[id];
  memset(x, 0, sizeof(*x));
  x->name = vd_strdup(name);
  x->t = vd_calloc((size_t)g->rps, sizeof(uint32_t));
  g->n_dts++;
  if (!x->name || !x->t) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  x->stage = stage;
  x->layer = layer;
  x->ndim = ndim;
  memcpy(x->gshape, gshape, (size_t)ndim * sizeof(int64_t));
  x->fl = fl;
  x->gl = grad_default(fl);
  x->dtype = dtype;
  x->role = role;
  x->scope = scope;
  x->mr_first = -1;
  x->grad = -1;
  x->wacc = -1;
  x->tied = -1;
  x->tgrad = -1;
  x->nolin = nolin;
  int64_t sid = -1;
  int has_single = g->par && !nolin && names_get(g->single, name, &sid);
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t c[AX_N];
    coords(g, r, c);
    vd_tensor_t t;
    memset(&t, 0, sizeof(t));
    t.id = g->next_tensor_id++;
    t.rank = (int32_t)rank_of(g, stage, r);
    t.ndim = ndim;
    t.dtype = dtype;
    t.role = role;
    t.scope = scope;
    vd_lineage_ann *L = &t.lin;
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
      if (i == 0 && fl.zero) {
        int64_t nst = 1, pos = 0;
        for (int a = AX_N - 1; a >= 0; a--)
          if (fl.zmask & (1u << a)) {
            nst *= g->deg[a];
            pos = pos * g->deg[a] + c[a];
          }
        if (ext % (nst * g->dp)) {
          fail(g, VD_EUSAGE,
               vd_gen_i_fmt(g, "--zero 1: dimension 0 (%lld) of '%s' on a rank is not divisible by the ZeRO group size %lld",
                            (long long)ext, name, (long long)(nst * g->dp)),
               NULL);
          return -1;
        }
        ext /= nst * g->dp;
        lo += pos * ext;
        L->dp_shift[0] = nst * ext;
      }
      t.shape[i] = ext;
      L->lo[i] = lo;
      L->hi[i] = lo + ext;
    }
    {
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
    if (has_single) {
      L->full = sid;
      t.has_lin = 1;
    }
    uint32_t idx;
    CK(vd_plan_add_tensor(g->p, &t, name, &idx));
    x = &g->dts[id];
    x->t[r] = idx;
    if (!g->par) {
      int rc = names_put(g, name, t.id);
      if (rc == -1) CK(VD_ENOMEM);
      if (rc == -2) {
        fail(g, VD_EINTERNAL, vd_gen_i_fmt(g, "generator bug: two single tensors named '%s'", name), NULL);
        return -1;
      }
    }
  }
  return id;
indivisible:
  fail(g, VD_EUSAGE,
       vd_gen_i_fmt(g, "tensor '%s' cannot be split evenly by the requested degrees", name), NULL);
  return -1;
}

int vd_gen_i_act(vd_gen_ctx *g, int stage, const char *name, int ndim, const int64_t *gshape, vd_gen_lay fl) {
  return new_dt(g, stage, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PER_MB, ndim, gshape, fl, 0);
}

int vd_gen_i_input(vd_gen_ctx *g, int stage, const char *name, vd_dtype dt, int ndim, const int64_t *gshape,
                   vd_gen_lay fl) {
  return new_dt(g, stage, -1, name, dt, VD_ROLE_INPUT, VD_SCOPE_PER_MB, ndim, gshape, fl, 0);
}

int vd_gen_i_weight(vd_gen_ctx *g, int stage, int layer, const char *name, int ndim, const int64_t *gshape,
                    vd_gen_lay fl, vd_gen_lay gl) {
  int w = new_dt(g, stage, layer, name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, ndim, gshape, fl, 0);
  if (w < 0) return -1;
  gl.dpart = 1;
  gl.bdim = -1;
  /* MoE: a weight that is not split over EP sees other tokens on each EP rank */
  if (g->c->model == VD_GEN_MOE && gl.ax[AX_EP] == LR) gl.ax[AX_EP] = LP;
  g->dts[w].gl = gl;
  g->dts[w].rg = 1;
  g->dts[w].is_weight = 1;
  /* the persistent gradient (accumulator when nm > 1) */
  int acc = new_dt(g, stage, layer, vd_gen_i_fmt(g, "%s.grad", name), VD_DT_F64, VD_ROLE_GRAD,
                   VD_SCOPE_PERSISTENT, ndim, gshape, gl, 0);
  if (acc < 0) return -1;
  g->dts[w].wacc = acc;
  if (VD_GROW(g->weights, g->cap_weights, g->n_weights + 1)) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
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

/* ---- tape ------------------------------------------------------------- */

int vd_gen_i_op(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin,
                const int *out, int nout) {
  if (g->failed) return -1;
  for (int i = 0; i < nin; i++)
    if (in[i] < 0) return -1;
  for (int i = 0; i < nout; i++)
    if (out[i] < 0) return -1;
  if (VD_GROW(g->ops, g->cap_ops, g->n_ops + 1)) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    return -1;
  }
  vd_gen_op *o = &g->ops[g->n_ops];
  memset(o, 0, sizeof(*o));
  o->op = op;
  o->name = vd_strdup(name);
  if (!o->name) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
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
    fail(g, VD_EINTERNAL, "generator bug: too many attributes", NULL);
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
void vd_gen_i_as(vd_gen_ctx *g, const char *key, const char *v) {
  vd_gen_attr *a = new_attr(g, key);
  if (a) a->kind = VD_ATTR_STR, a->s = v;
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
  return coll(g, "all_reduce", axis, x, fl, grad_default(fl), name, layer);
}

int vd_gen_i_allgather(vd_gen_ctx *g, int axis, int x, int dim, const char *name, int layer) {
  if (g->failed || x < 0) return -1;
  if (g->deg[axis] == 1) return x;
  vd_gen_lay fl = g->dts[x].fl, gl;
  fl.ax[axis] = LR;
  gl = grad_default(fl);
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
  int y = coll(g, "reduce_scatter", axis, x, fl, grad_default(fl), name, layer);
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

/* ---- node emission ---------------------------------------------------- */

static int64_t attr_val(const vd_gen_ctx *g, const vd_gen_attr *a, int64_t r) {
  int64_t c[AX_N];
  coords(g, r, c);
  int64_t v = a->i;
  for (int k = 0; k < AX_N; k++) v += a->coef[k] * c[k];
  return v;
}

/* Emits one node on stage-rank r of `stage`. */
static int emit(vd_gen_ctx *g, int stage, int64_t r, int32_t seg, const char *op, const char *name, int layer,
                vd_phase phase, const uint32_t *in, int nin, const uint32_t *out, int nout,
                const vd_gen_attr *attrs, int nattr, int64_t key, const int64_t *group, int ngroup,
                int span) {
  if (g->failed) return -1;
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.id = g->next_node_id++;
  n.rank = (int32_t)rank_of(g, stage, r);
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
static int group_of(const vd_gen_ctx *g, int stage, int64_t r, unsigned mask, int64_t *grp, int64_t *gid) {
  int64_t c[AX_N];
  coords(g, r, c);
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
    if (grp) grp[i] = rank_of(g, stage, rr);
    if (i == 0 && gid) *gid = rr;
  }
  return (int)n;
}

/* Emits op `o` (dtensor ins/outs) on every rank of its stage in segment segs[stage]. */
static int emit_spmd(vd_gen_ctx *g, const char *op, const char *name, int layer, vd_phase phase, int32_t *segs,
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
      int n = group_of(g, stage, r, 1u << coll_axis, grp, &gid);
      if (emit(g, stage, r, segs[stage], op, name, layer, VD_PHASE_COMM, ti, nin, to, nout, attrs, nattr,
               base + gid, grp, n, 0) < 0)
        return -1;
    } else if (emit(g, stage, r, segs[stage], op, name, layer, phase, ti, nin, to, nout, attrs, nattr, -1, NULL,
                    0, 0) < 0)
      return -1;
  }
  if (coll_axis >= 0) g->next_key += g->rps;
  return 0;
}

/* Pipeline move: send on x's stage, recv on y's stage. */
static int emit_move(vd_gen_ctx *g, int x, int y, const char *name, int layer, int32_t *segs) {
  int sx = g->dts[x].stage, sy = g->dts[y].stage;
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t key = g->next_key + r;
    int64_t grp[2] = {rank_of(g, sx, r), rank_of(g, sy, r)};
    uint32_t tx = g->dts[x].t[r], ty = g->dts[y].t[r];
    if (emit(g, sx, r, segs[sx], "send", name, layer, VD_PHASE_COMM, &tx, 1, NULL, 0, NULL, 0, key, grp, 2, 0) < 0)
      return -1;
    if (emit(g, sy, r, segs[sy], "recv", name, layer, VD_PHASE_COMM, NULL, 0, &ty, 1, NULL, 0, key, grp, 2, 0) < 0)
      return -1;
  }
  g->next_key += g->rps;
  return 0;
}

static int push_emitted(vd_gen_ctx *g, const vd_gen_op *o) {
  if (VD_GROW(g->emitted, g->cap_emitted, g->n_emitted + 1)) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
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
      fail(g, VD_EINTERNAL, "generator bug: tensor consumed too often", s->name);
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
      fail(g, VD_EINTERNAL, "generator bug: consumers not found", s->name);
      return -1;
    }
    for (int i = 0; i < n; i++) {
      s = &g->dts[x];
      char nm[512];
      snprintf(nm, sizeof(nm), "%s@%s", s->name, cons[i]);
      /* per microbatch: the multiref runs in the forward segment, also for a
       * persistent input (a tied weight read by the embedding and the head) */
      int y = new_dt(g, s->stage, s->layer, nm, s->dtype, VD_ROLE_ACT, VD_SCOPE_PER_MB, s->ndim, s->gshape, s->fl, 0);
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
    if (emit_spmd(g, "multiref", mo.name, mo.layer, VD_PHASE_FWD, g->seg_fwd, mo.in, 1, mo.out, n, NULL, 0, -1) < 0)
      return -1;
    if (push_emitted(g, &mo) < 0) return -1;
  }
  s = &g->dts[x];
  return s->mr_first + s->mr_next++;
}

static vd_rc emit_forward(vd_gen_ctx *g) {
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
      rc = emit_spmd(g, o.op, o.name, o.layer, VD_PHASE_FWD, g->seg_fwd, o.in, o.nin, o.out, o.nout, o.attrs,
                     o.nattr, -1);
      break;
    case K_COLL:
      rc = emit_spmd(g, o.op, o.name, o.layer, VD_PHASE_COMM, g->seg_fwd, o.in, o.nin, o.out, o.nout, o.attrs,
                     o.nattr, o.axis);
      break;
    case K_MOVE: rc = emit_move(g, o.in[0], o.out[0], o.name, o.layer, g->seg_fwd); break;
    }
    GEN_CK(rc);
    GEN_CK(push_emitted(g, &o));
  }
  return g->failed ? gen_rc(g) : VD_OK;
}

/* ---- backward --------------------------------------------------------- */

/* Gradient dtensor of forward dtensor x (a fresh one for weights when nm > 1). */
static int grad_for(vd_gen_ctx *g, int x) {
  vd_gen_dt *s = &g->dts[x];
  if (s->is_weight) {
    if (g->nm == 1) return s->wacc;
    vd_gen_lay gl = s->gl;
    return new_dt(g, s->stage, s->layer, vd_gen_i_fmt(g, "%s.grad", s->name), VD_DT_F64, VD_ROLE_GRAD,
                  VD_SCOPE_PER_MB, s->ndim, s->gshape, gl, 0);
  }
  char nm[256];
  snprintf(nm, sizeof(nm), "%s.grad", s->name);
  int gd = new_dt(g, s->stage, s->layer, nm, VD_DT_F64, VD_ROLE_GRAD, VD_SCOPE_PER_MB, s->ndim, s->gshape,
                  s->gl, s->nolin || s->gnolin);
  return gd;
}

typedef struct {
  const char *fwd, *bwd;
  int saved[6];  /* forward inputs read (index into forward inputs), -1 ends; 100 = forward output 0 */
  int grads[6];  /* forward inputs that get a gradient output, -1 ends */
} bwd_rule;

static const bwd_rule rules[] = {
    {"linear", "linear_backward", {0, 1, -1}, {0, 1, -1}},
    {"matmul", "matmul_backward", {0, 1, -1}, {0, 1, -1}},
    {"mul", "mul_backward", {0, 1, -1}, {0, 1, -1}},
    {"add", "add_backward", {-1}, {0, 1, -1}},
    {"sub", "sub_backward", {-1}, {0, 1, -1}},
    {"silu", "silu_backward", {0, -1}, {0, -1}},
    {"exp", "exp_backward", {0, -1}, {0, -1}},
    {"log", "log_backward", {0, -1}, {0, -1}},
    {"softmax", "softmax_backward", {100, -1}, {0, -1}},
    {"scale", "scale_backward", {-1}, {0, -1}},
    {"rope", "rope_backward", {-1}, {0, -1}},
    {"causal_mask", "causal_mask_backward", {-1}, {0, -1}},
    {"sum", "sum_backward", {-1}, {0, -1}},
    {"view", "view", {-1}, {0, -1}},
    {"transpose", "transpose", {-1}, {0, -1}},
    {"identity", "identity", {-1}, {0, -1}},
    {"expand", "sum_to", {-1}, {0, -1}},
    {"embedding", "embedding_backward", {0, -1}, {1, -1}},
    {"pick", "pick_backward", {1, -1}, {0, -1}},
    {"rms_norm", "rms_norm_backward", {0, 1, -1}, {0, 1, -1}},
    {"topk_gate", "topk_gate_backward", {0, -1}, {0, -1}},
    {"grouped_mlp", "grouped_mlp_backward", {0, 1, 2, 3, 4, -1}, {0, 1, 2, 3, 4, -1}},
};

/* Records gd as the gradient of forward input x; weights accumulate. */
static int set_grad(vd_gen_ctx *g, int x, int gd, const char *name, int layer) {
  vd_gen_dt *s = &g->dts[x];
  if (s->is_weight) {
    if (g->nm > 1) {
      int acc = s->wacc;
      int in[2] = {acc, gd};
      if (emit_spmd(g, "accumulate", name, layer, VD_PHASE_BWD, g->seg_bwd, in, 2, &acc, 1, NULL, 0, -1) < 0)
        return -1;
    }
    s->grad = s->wacc;
    return 0;
  }
  if (s->grad >= 0) {
    fail(g, VD_EINTERNAL, "generator bug: a tensor got two gradients without multiref", s->name);
    return -1;
  }
  s->grad = gd;
  return 0;
}

static int backward_op(vd_gen_ctx *g, const vd_gen_op *o) {
  /* output gradients */
  int gy[VD_GEN_MAX_IO], have = 0;
  for (int i = 0; i < o->nout; i++) {
    gy[i] = g->dts[o->out[i]].grad;
    have += gy[i] >= 0;
  }
  int rg = 0;
  for (int i = 0; i < o->nin; i++) rg |= g->dts[o->in[i]].rg;
  if (!have || !rg) return 0;
  if (have != o->nout) {
    fail(g, VD_EINTERNAL, "generator bug: an output of a forward op has no gradient", o->name);
    return -1;
  }
  if (o->kind == K_MOVE) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0 || emit_move(g, gy[0], gx, o->name, o->layer, g->seg_bwd) < 0) return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  if (o->kind == K_ENTRY || o->kind == K_COLL) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0) return -1;
    const char *bop = "identity";
    int axis = o->axis;
    vd_gen_attr at[2];
    int nat = 0;
    memset(at, 0, sizeof(at));
    if (o->kind == K_ENTRY) bop = "all_reduce";
    else if (!strcmp(o->op, "all_reduce")) bop = "identity", axis = -1;
    else if (!strcmp(o->op, "all_gather")) bop = "reduce_scatter", at[0] = o->attrs[0], nat = 1;
    else if (!strcmp(o->op, "reduce_scatter")) bop = "all_gather", at[0] = o->attrs[0], nat = 1;
    else if (!strcmp(o->op, "all_to_all")) {
      at[0] = o->attrs[1], at[0].key = "split_dim";
      at[1] = o->attrs[0], at[1].key = "concat_dim";
      bop = "all_to_all", nat = 2;
    }
    if (emit_spmd(g, bop, o->name, o->layer, axis >= 0 ? VD_PHASE_COMM : VD_PHASE_BWD, g->seg_bwd, gy, 1, &gx, 1,
                  at, nat, axis) < 0)
      return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  if (!strcmp(o->op, "multiref")) {
    int gx = grad_for(g, o->in[0]);
    if (gx < 0) return -1;
    if (emit_spmd(g, "multiref_backward", o->name, o->layer, VD_PHASE_BWD, g->seg_bwd, gy, o->nout, &gx, 1, NULL, 0,
                  -1) < 0)
      return -1;
    return set_grad(g, o->in[0], gx, o->name, o->layer);
  }
  const bwd_rule *ru = NULL;
  for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
    if (!strcmp(rules[i].fwd, o->op)) ru = &rules[i];
  if (!ru) {
    fail(g, VD_EINTERNAL, vd_gen_i_fmt(g, "generator bug: no backward rule for '%s'", o->op), o->name);
    return -1;
  }
  int bin[VD_GEN_MAX_IO], nbin = 0, bout[VD_GEN_MAX_IO], nbout = 0;
  for (int k = 0; ru->saved[k] >= 0; k++) bin[nbin++] = ru->saved[k] == 100 ? o->out[0] : o->in[ru->saved[k]];
  bin[nbin++] = gy[0];
  for (int k = 0; ru->grads[k] >= 0; k++) {
    int gx = grad_for(g, o->in[ru->grads[k]]);
    if (gx < 0) return -1;
    bout[nbout++] = gx;
  }
  if (emit_spmd(g, ru->bwd, o->name, o->layer, VD_PHASE_BWD, g->seg_bwd, bin, nbin, bout, nbout, o->attrs, o->nattr,
                -1) < 0)
    return -1;
  for (int k = 0; ru->grads[k] >= 0; k++)
    if (set_grad(g, o->in[ru->grads[k]], bout[k], o->name, o->layer) < 0) return -1;
  return 0;
}

static vd_rc emit_backward(vd_gen_ctx *g) {
  if (VD_NEVER(g->loss_dt < 0)) {
    fail(g, VD_EINTERNAL, "generator bug: no loss", NULL);
    return gen_rc(g);
  }
  vd_gen_dt *L = &g->dts[g->loss_dt];
  int seed = new_dt(g, L->stage, -1, "loss.grad", VD_DT_F64, VD_ROLE_GRAD, VD_SCOPE_PER_MB, L->ndim, L->gshape,
                    L->gl, 0);
  GEN_CK(seed);
  g->dts[g->loss_dt].grad = seed;
  for (size_t i = g->n_emitted; i-- > 0;) GEN_CK(backward_op(g, &g->emitted[i]));
  return VD_OK;
}

/* ---- gradient reduction, clipping, optimizer -------------------------- */

static unsigned lp_mask(vd_gen_lay l) {
  unsigned m = 0;
  for (int a = 0; a < AX_N; a++)
    if (l.ax[a] == LP) m |= 1u << a;
  return m;
}

/* A one-rank-per-stage-rank op in the opt segment. */
static int opt_node(vd_gen_ctx *g, const char *op, const char *name, int layer, const int *in, int nin, const int *out,
                    int nout, const vd_gen_attr *at, int nat) {
  return emit_spmd(g, op, name, layer, VD_PHASE_OPT, g->seg_opt, in, nin, out, nout, at, nat, -1);
}

/* Collective over the axes in mask (+ replicas when span) in the opt segment. */
static int opt_coll(vd_gen_ctx *g, const char *op, const char *name, int layer, int x, int y, unsigned mask, int span,
                    const vd_gen_attr *at, int nat) {
  int stage = g->dts[x].stage;
  int64_t base = g->next_key;
  int64_t grp[1 << 10];
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t gid = 0;
    int n = group_of(g, stage, r, mask, grp, &gid);
    uint32_t ti = g->dts[x].t[r], to = g->dts[y].t[r];
    if (emit(g, stage, r, g->seg_opt[stage], op, name, layer, VD_PHASE_COMM, &ti, 1, &to, 1, at, nat, base + gid, grp,
             n, span) < 0)
      return -1;
  }
  g->next_key += g->rps;
  return 0;
}

static vd_gen_attr fattr(const char *k, double v) {
  vd_gen_attr a;
  memset(&a, 0, sizeof(a));
  a.key = k;
  a.kind = VD_ATTR_FLOAT;
  a.f = v;
  return a;
}
static vd_gen_attr iattr(const char *k, int64_t v) {
  vd_gen_attr a;
  memset(&a, 0, sizeof(a));
  a.key = k;
  a.kind = VD_ATTR_INT;
  a.i = v;
  return a;
}

typedef struct {
  int w, grad, wshard, zmask_used;
} wstate;

/* 0. Tied weights (pp > 1): the first and the last stage's copies sum their
 * gradients by an all_reduce over [first-stage rank, last-stage rank] of
 * the same (tp, cp, ep) coordinates (Megatron's embedding group), before
 * the DP reducer; afterwards both hold the same parts of the single grad. */
static vd_rc opt_tied(vd_gen_ctx *g) {
  for (size_t i = 0; i < g->n_weights; i++) {
    int w = g->weights[i], w2 = g->dts[w].tied;
    if (w2 < 0 || g->dts[w].stage != 0) continue;
    int pair[2] = {w, w2}, out[2];
    for (int k = 0; k < 2; k++) {
      vd_gen_dt W = g->dts[pair[k]];
      vd_gen_lay gl = W.gl;
      gl.tcopy = 0;
      out[k] = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, gl, 0);
      GEN_CK(out[k]);
    }
    for (int64_t r = 0; r < g->rps; r++) {
      int64_t key = g->next_key + r;
      int64_t grp[2] = {rank_of(g, g->dts[w].stage, r), rank_of(g, g->dts[w2].stage, r)};
      for (int k = 0; k < 2; k++) {
        vd_gen_dt *W = &g->dts[pair[k]];
        uint32_t ti = g->dts[W->wacc].t[r], to = g->dts[out[k]].t[r];
        GEN_CK(emit(g, W->stage, r, g->seg_opt[W->stage], "all_reduce", vd_gen_i_fmt(g, "%s.grad.tied", W->name),
                    W->layer, VD_PHASE_COMM, &ti, 1, &to, 1, NULL, 0, key, grp, 2, 0));
      }
    }
    g->next_key += g->rps;
    g->dts[w].tgrad = out[0];
    g->dts[w2].tgrad = out[1];
  }
  return VD_OK;
}

/* 1. Gradient reduction: all_reduce (or ZeRO reduce_scatter onto a weight
 * shard) over the ranks that hold value parts, spanning the DP replicas.
 * Fills ws[i] (weight, reduced gradient, the weight or its shard). */
static vd_rc opt_reduce(vd_gen_ctx *g, wstate *ws) {
  const vd_gen_config *c = g->c;
  for (size_t i = 0; i < g->n_weights; i++) {
    int w = g->weights[i];
    vd_gen_dt W = g->dts[w];
    int acc = W.tgrad >= 0 ? W.tgrad : W.wacc;
    unsigned mask = lp_mask(W.gl);
    int64_t gsize = 1;
    for (int a = 0; a < AX_N; a++)
      if (mask & (1u << a)) gsize *= g->deg[a];
    ws[i].w = w;
    ws[i].grad = acc;
    ws[i].wshard = w;
    if (c->zero && gsize * g->dp > 1 && g->par) {
      vd_gen_lay zl = W.fl;
      zl.zero = 1;
      zl.zmask = (uint8_t)mask;
      int gs = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, zl, 0);
      int wsh = new_dt(g, W.stage, W.layer, W.name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, W.ndim, W.gshape,
                       zl, 0);
      GEN_CK(gs);
      GEN_CK(wsh);
      vd_gen_attr at = iattr("dim", 0);
      GEN_CK(opt_coll(g, "reduce_scatter", vd_gen_i_fmt(g, "%s.grad", W.name), W.layer, acc, gs, mask, g->dp > 1, &at, 1));
      ws[i].grad = gs;
      ws[i].wshard = wsh;
      ws[i].zmask_used = 1;
    } else if (gsize * g->dp > 1) {
      vd_gen_lay fl = grad_default(W.gl);
      int gr = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad", W.name), VD_DT_F64, VD_ROLE_GRAD,
                      VD_SCOPE_PERSISTENT, W.ndim, W.gshape, fl, 0);
      GEN_CK(gr);
      GEN_CK(opt_coll(g, "all_reduce", vd_gen_i_fmt(g, "%s.grad", W.name), W.layer, acc, gr, mask, g->dp > 1, NULL, 0));
      ws[i].grad = gr;
    }
  }
  return VD_OK;
}

/* 2a. Per stage, the sum of the squares of its gradients' elements, each
 * element counted once (local[s]; -1 for a stage without weights). */
static vd_rc clip_local_sums(vd_gen_ctx *g, const wstate *ws, int total_ranks, int *local) {
  size_t nw = g->n_weights;
  for (int s = 0; s < g->pp; s++) local[s] = -1;
  for (size_t i = 0; i < nw; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    int s = W.stage;
    /* a tied weight's elements are counted once: on the first stage's copy */
    if (W.tied >= 0 && s != 0) continue;
    int sq = new_dt(g, s, W.layer, vd_gen_i_fmt(g, "%s.grad.sumsq", W.name), VD_DT_F64, VD_ROLE_ACT,
                    VD_SCOPE_PERSISTENT, 0, W.gshape, vd_gen_i_lay(LR, LR, LR, -1), total_ranks);
    GEN_CK(sq);
    GEN_CK(opt_node(g, "sumsq", g->dts[sq].name, W.layer, &ws[i].grad, 1, &sq, 1, NULL, 0));
    /* each element counted once: divide by the number of stored ranks (and
     * replicas, when the all_reduce spans them) holding a copy */
    int64_t repl = 1;
    vd_gen_lay gl = g->dts[ws[i].grad].fl;
    for (int a = 0; a < AX_N; a++)
      if (gl.ax[a] < 0 && !(gl.zero && (gl.zmask & (1u << a)))) repl *= g->deg[a];
    if (repl > 1) {
      int sc = new_dt(g, s, W.layer, vd_gen_i_fmt(g, "%s.grad.sumsq.scaled", W.name), VD_DT_F64, VD_ROLE_ACT,
                      VD_SCOPE_PERSISTENT, 0, W.gshape, vd_gen_i_lay(LR, LR, LR, -1), 1);
      vd_gen_attr at = fattr("factor", 1.0 / (double)repl);
      GEN_CK(sc);
      GEN_CK(opt_node(g, "scale", g->dts[sc].name, W.layer, &sq, 1, &sc, 1, &at, 1));
      sq = sc;
    }
    if (local[s] < 0) {
      local[s] = sq;
      continue;
    }
    /* the last add of the single plan's chain is the total */
    int last = !total_ranks && i + 1 == nw;
    const char *snm = last ? "grad_norm_sq" : vd_gen_i_fmt(g, "grad_norm_sq.partial.%zu", i);
    int sum = new_dt(g, s, -1, snm, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, W.gshape,
                     vd_gen_i_lay(LR, LR, LR, -1), 1);
    int in[2] = {local[s], sq};
    GEN_CK(sum);
    GEN_CK(opt_node(g, "add", "grad_norm_sq", -1, in, 2, &sum, 1, NULL, 0));
    local[s] = sum;
  }
  return VD_OK;
}

/* 2b. The global squared norm on every stage (total[s]): an all_reduce of
 * the stages' local sums over every stored rank (and the replicas under
 * ZeRO); the single plan's local sum is already the total. */
static vd_rc clip_totals(vd_gen_ctx *g, const int *local, int total_ranks, int *total) {
  if (!total_ranks) {
    total[0] = local[0];
    return VD_OK;
  }
  int64_t noshape[1] = {1};
  int64_t nstored = g->rps * g->pp;
  int span = g->c->zero && g->dp > 1;
  int64_t key = g->next_key++;
  int64_t *grp = vd_malloc((size_t)nstored * sizeof(int64_t));
  if (!grp) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    return gen_rc(g);
  }
  for (int64_t r = 0; r < nstored; r++) grp[r] = r;
  for (int s = 0; s < g->pp; s++) {
    total[s] = new_dt(g, s, -1, "grad_norm_sq", VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, noshape,
                      vd_gen_i_lay(LR, LR, LR, -1), 0);
    if (total[s] < 0 || local[s] < 0) break;
    for (int64_t r = 0; r < g->rps; r++) {
      uint32_t ti = g->dts[local[s]].t[r], to = g->dts[total[s]].t[r];
      if (emit(g, s, r, g->seg_opt[s], "all_reduce", "grad_norm_sq", -1, VD_PHASE_COMM, &ti, 1, &to, 1, NULL, 0,
               key, grp, (int)nstored, span) < 0)
        break;
    }
  }
  vd_free(grp);
  return g->failed ? gen_rc(g) : VD_OK;
}

/* 2. Global gradient-norm clipping: every gradient times clip_coef(norm). */
static vd_rc opt_clip(vd_gen_ctx *g, wstate *ws) {
  int64_t noshape[1] = {1};
  int64_t nstored = g->rps * g->pp;
  int total_ranks = g->par && (nstored > 1 || g->dp > 1);
  int *local = vd_calloc((size_t)g->pp, sizeof(int));
  int *total = vd_calloc((size_t)g->pp, sizeof(int));
  vd_rc rc = VD_OK;
  if (!local || !total) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    rc = gen_rc(g);
    goto done;
  }
  if ((rc = clip_local_sums(g, ws, total_ranks, local)) != VD_OK) goto done;
  if ((rc = clip_totals(g, local, total_ranks, total)) != VD_OK) goto done;
  for (int s = 0; s < g->pp; s++) {
    int cc = new_dt(g, s, -1, "clip_coef", VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, noshape,
                    vd_gen_i_lay(LR, LR, LR, -1), 0);
    vd_gen_attr at = fattr("max_norm", g->c->grad_clip);
    if (cc < 0 || opt_node(g, "clip_coef", "clip_coef", -1, &total[s], 1, &cc, 1, &at, 1) < 0) {
      rc = gen_rc(g);
      goto done;
    }
    total[s] = cc;
  }
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    vd_gen_dt G = g->dts[ws[i].grad];
    int cl = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.grad.clipped", W.name), VD_DT_F64, VD_ROLE_GRAD,
                    VD_SCOPE_PERSISTENT, W.ndim, W.gshape, G.fl, 0);
    int in[2] = {ws[i].grad, total[W.stage]};
    if (cl < 0 || opt_node(g, "mul", vd_gen_i_fmt(g, "%s.clip", W.name), W.layer, in, 2, &cl, 1, NULL, 0) < 0) {
      rc = gen_rc(g);
      goto done;
    }
    ws[i].grad = cl;
  }
done:
  vd_free(local);
  vd_free(total);
  return rc;
}

/* 3. Optimizer step on the weight (or its ZeRO shard, then an all_gather
 * of the shards copied into the parameter). */
static vd_rc opt_step(vd_gen_ctx *g, const wstate *ws) {
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt W = g->dts[ws[i].w];
    int wsh = ws[i].wshard;
    vd_gen_lay sl = g->dts[wsh].fl;
    const char *nm = vd_gen_i_fmt(g, "%s.step", W.name);
    if (g->c->optimizer == VD_GEN_SGD) {
      vd_gen_attr at[2] = {fattr("lr", 0.01), fattr("weight_decay", 0.0)};
      int in[2] = {wsh, ws[i].grad};
      GEN_CK(opt_node(g, "sgd_step", nm, W.layer, in, 2, &wsh, 1, at, 2));
    } else {
      int m = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.exp_avg", W.name), VD_DT_F64, VD_ROLE_OPTSTATE,
                     VD_SCOPE_PERSISTENT, W.ndim, W.gshape, sl, 0);
      int v = new_dt(g, W.stage, W.layer, vd_gen_i_fmt(g, "%s.exp_avg_sq", W.name), VD_DT_F64, VD_ROLE_OPTSTATE,
                     VD_SCOPE_PERSISTENT, W.ndim, W.gshape, sl, 0);
      GEN_CK(m);
      GEN_CK(v);
      vd_gen_attr at[6] = {fattr("lr", 1e-3), fattr("beta1", 0.9), fattr("beta2", 0.95), fattr("eps", 1e-8),
                           iattr("step", 1), fattr("weight_decay", 0.1)};
      int in[4] = {wsh, ws[i].grad, m, v}, out[3] = {wsh, m, v};
      GEN_CK(opt_node(g, "adam_step", nm, W.layer, in, 4, out, 3, at, 6));
    }
    if (!ws[i].zmask_used) continue;
    /* gather the updated shards, then copy into the parameter (param.copy_
     * as zero + accumulate: a node that writes a tensor must read it) */
    vd_gen_attr at = iattr("dim", 0), z = fattr("factor", 0.0);
    int full = new_dt(g, W.stage, W.layer, W.name, VD_DT_F64, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, W.ndim, W.gshape,
                      W.fl, 0);
    GEN_CK(full);
    GEN_CK(opt_coll(g, "all_gather", W.name, W.layer, wsh, full, sl.zmask, g->dp > 1, &at, 1));
    int in[2] = {ws[i].w, full};
    GEN_CK(opt_node(g, "scale", vd_gen_i_fmt(g, "%s.copy", W.name), W.layer, &ws[i].w, 1, &ws[i].w, 1, &z, 1));
    GEN_CK(opt_node(g, "accumulate", vd_gen_i_fmt(g, "%s.copy", W.name), W.layer, in, 2, &ws[i].w, 1, NULL, 0));
  }
  return VD_OK;
}

/* Gradient reduction, clipping and the optimizer step, in the opt segment. */
static vd_rc emit_optimizer(vd_gen_ctx *g) {
  wstate *ws = vd_calloc(g->n_weights ? g->n_weights : 1, sizeof(*ws));
  if (!ws) {
    fail(g, VD_ENOMEM, "out of memory", NULL);
    return gen_rc(g);
  }
  vd_rc rc = opt_tied(g);
  if (rc == VD_OK) rc = opt_reduce(g, ws);
  if (rc == VD_OK && g->c->grad_clip > 0) rc = opt_clip(g, ws);
  if (rc == VD_OK) rc = opt_step(g, ws);
  vd_free(ws);
  return rc;
}

/* Zeroes the persistent gradient accumulators once before the microbatches. */
static vd_rc emit_zero(vd_gen_ctx *g) {
  if (g->nm == 1) return VD_OK;
  vd_gen_attr at = fattr("factor", 0.0);
  for (size_t i = 0; i < g->n_weights; i++) {
    vd_gen_dt *W = &g->dts[g->weights[i]];
    int acc = W->wacc;
    GEN_CK(emit_spmd(g, "scale", vd_gen_i_fmt(g, "%s.zero_grad", W->name), W->layer, VD_PHASE_OPT, g->seg_zero, &acc,
                     1, &acc, 1, &at, 1, -1));
  }
  return VD_OK;
}

/* ---- schedule --------------------------------------------------------- */

static vd_rc emit_schedule(vd_gen_ctx *g) {
  for (int s = 0; s < g->pp; s++)
    for (int64_t r = 0; r < g->rps; r++) {
      int32_t rank = (int32_t)rank_of(g, s, r);
      if (g->seg_init >= 0 && s == g->pp - 1) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_init, -1));
      if (g->nm > 1) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_zero[s], -1));
      /* 1F1B: warm-up forwards, then one forward / one backward, then cool-down */
      int64_t warm = g->pp - s - 1;
      if (warm > g->nm) warm = g->nm;
      int64_t f = 0, b = 0;
      for (; f < warm; f++) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_fwd[s], (int32_t)f));
      for (; f < g->nm; f++, b++) {
        PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_fwd[s], (int32_t)f));
        PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_bwd[s], (int32_t)b));
      }
      for (; b < g->nm; b++) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_bwd[s], (int32_t)b));
      PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_opt[s], -1));
    }
  return VD_OK;
}

/* ---- build ------------------------------------------------------------ */

static void ctx_free(vd_gen_ctx *g) {
  for (size_t i = 0; i < g->n_dts; i++) {
    vd_free(g->dts[i].name);
    vd_free(g->dts[i].t);
  }
  vd_free(g->dts);
  for (size_t i = 0; i < g->n_ops; i++) vd_free(g->ops[i].name);
  vd_free(g->ops);
  vd_free(g->emitted);
  vd_free(g->weights);
  vd_free(g->layer_stage);
  vd_free(g->seg_zero);
  vd_free(g->seg_fwd);
  vd_free(g->seg_bwd);
  vd_free(g->seg_opt);
  for (size_t i = 0; i < g->name_cap; i++) vd_free(g->names[i]);
  vd_free(g->names);
  vd_free(g->name_ids);
}

static vd_rc build_one(vd_gen_ctx *g, const vd_gen_config *c, int par, vd_plan_t *p, vd_diag *d,
                       const vd_gen_ctx *single) {
  memset(g, 0, sizeof(*g));
  g->c = c;
  g->par = par;
  g->p = p;
  g->d = d;
  g->single = single;
  g->loss_dt = -1;
  g->seg_init = -1;
  g->tied_w = -1;
  g->dp = par ? c->dp : 1;
  g->tp = par ? c->tp : 1;
  g->pp = par ? c->pp : 1;
  g->nm = par ? c->nm : 1;
  g->cp = par ? c->cp : 1;
  g->ep = par ? c->ep : 1;
  g->sp = par && c->tp > 1 ? c->sp : 0;
  g->deg[AX_TP] = g->tp;
  g->deg[AX_CP] = g->cp;
  g->deg[AX_EP] = g->ep;
  g->rps = g->tp * g->cp * g->ep;
  g->batch = c->batch;
  vd_rc rc = vd_plan_init(p, par ? VD_PLAN_PARALLEL : VD_PLAN_SINGLE);
  if (rc) return VD_OOM(d);
  char desc[512];
  snprintf(desc, sizeof(desc),
           "%s layers=%lld hidden=%lld heads=%lld kv_heads=%lld ffn=%lld vocab=%lld seq=%lld batch=%lld "
           "experts=%lld topk=%lld optimizer=%s loss=%s grad_clip=%g seed=%llu%s%s",
           vd_gen_model_name(c->model), (long long)c->layers, (long long)c->hidden, (long long)c->heads,
           (long long)c->kv_heads, (long long)c->ffn, (long long)c->vocab, (long long)c->seq, (long long)c->batch,
           (long long)c->experts, (long long)c->topk, c->optimizer == VD_GEN_ADAM ? "adam" : "sgd",
           c->loss == VD_GEN_LOSS_CE ? "ce" : "sum", c->grad_clip, (unsigned long long)c->seed,
           c->tie_embeddings ? " tie_embeddings=1" : "", c->loss_mask ? " loss_mask=1" : "");
  if (vd_plan_str(p, desc, &p->model)) return VD_OOM(d);
  vd_world_t w;
  memset(&w, 0, sizeof(w));
  w.dp = (int32_t)g->dp, w.tp = (int32_t)g->tp, w.pp = (int32_t)g->pp, w.sp = (int32_t)g->sp;
  w.cp = (int32_t)g->cp, w.ep = (int32_t)g->ep, w.nm = (int32_t)g->nm;
  w.replicas = (int32_t)g->dp;
  w.stored_ranks = (int32_t)(g->rps * g->pp);
  if (vd_plan_str(p, "tp,cp,ep,pp,dp", &w.layout)) return VD_OOM(d);
  if (vd_plan_set_world(p, &w)) return VD_OOM(d);
  /* layers over stages: ceil(L/pp) each, the first and last stages give
   * one back first (they also hold the embedding and the head), as Llama-3
   * 405B does with 126 layers on 16 stages */
  g->layer_stage = vd_malloc((size_t)(c->layers + 2) * sizeof(int));
  g->seg_zero = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_fwd = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_bwd = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_opt = vd_calloc((size_t)g->pp, sizeof(int32_t));
  int64_t *cnt = vd_calloc((size_t)g->pp, sizeof(int64_t));
  if (!g->layer_stage || !g->seg_zero || !g->seg_fwd || !g->seg_bwd || !g->seg_opt || !cnt) {
    vd_free(cnt);
    return VD_OOM(d);
  }
  int64_t q = (c->layers + g->pp - 1) / g->pp, deficit = q * g->pp - c->layers;
  for (int64_t s = 0; s < g->pp; s++) cnt[s] = q;
  for (int64_t k = 0; k < deficit; k++) {
    int64_t s = (k % 2 == 0) ? k / 2 : g->pp - 1 - k / 2;
    cnt[s]--;
  }
  int64_t l = 0;
  for (int64_t s = 0; s < g->pp; s++)
    for (int64_t k = 0; k < cnt[s]; k++) g->layer_stage[1 + l++] = (int)s;
  g->layer_stage[0] = 0;                          /* embedding: index -1 + 1 */
  g->layer_stage[c->layers + 1] = (int)(g->pp - 1); /* head */
  vd_free(cnt);
  if (par && c->loss_mask) {
    char nm[64];
    snprintf(nm, sizeof(nm), "stage%d.init", (int)(g->pp - 1));
    if (vd_plan_add_segment(p, nm, &g->seg_init)) return VD_OOM(d);
  }
  for (int s = 0; s < g->pp; s++) {
    char nm[64];
    if (g->nm > 1) {
      snprintf(nm, sizeof(nm), "stage%d.zero_grad", s);
      if (vd_plan_add_segment(p, nm, &g->seg_zero[s])) return VD_OOM(d);
    }
    snprintf(nm, sizeof(nm), "stage%d.fwd", s);
    if (vd_plan_add_segment(p, nm, &g->seg_fwd[s])) return VD_OOM(d);
    snprintf(nm, sizeof(nm), "stage%d.bwd", s);
    if (vd_plan_add_segment(p, nm, &g->seg_bwd[s])) return VD_OOM(d);
    snprintf(nm, sizeof(nm), "stage%d.opt", s);
    if (vd_plan_add_segment(p, nm, &g->seg_opt[s])) return VD_OOM(d);
  }
  switch (c->model) {
  case VD_GEN_MLP: rc = vd_gen_i_mlp(g); break;
  case VD_GEN_LLAMA3: rc = vd_gen_i_llama3(g); break;
  case VD_GEN_MOE: rc = vd_gen_i_moe(g); break;
  }
  if (!rc && !g->failed) rc = emit_zero(g);
  if (!rc && !g->failed) rc = emit_forward(g);
  if (!rc && !g->failed) rc = emit_backward(g);
  if (!rc && !g->failed) rc = emit_optimizer(g);
  if (!rc && !g->failed) rc = emit_schedule(g);
  if (g->failed) return d && d->rc ? d->rc : VD_EINTERNAL;
  return rc;
}

vd_rc vd_gen_build(const vd_gen_config *cin, vd_plan_t *single, vd_plan_t *parallel, vd_diag *d) {
  memset(single, 0, sizeof(*single));
  memset(parallel, 0, sizeof(*parallel));
  VD_CHECK(vd_gen_check(cin, d));
  vd_gen_config c;
  complete(cin, &c);
  vd_gen_ctx *gs = vd_calloc(1, sizeof(*gs)), *gp = vd_calloc(1, sizeof(*gp));
  vd_rc rc = VD_ENOMEM;
  if (!gs || !gp) {
    VD_OOM(d);
    goto done;
  }
  rc = build_one(gs, &c, 0, single, d, NULL);
  if (rc == VD_OK) rc = build_one(gp, &c, 1, parallel, d, gs);
done:
  if (gs) ctx_free(gs);
  if (gp) ctx_free(gp);
  vd_free(gs);
  vd_free(gp);
  return rc;
}

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
    fail(g, VD_EINTERNAL, "generator bug: token count outside the last stage's init segment", name);
    return -1;
  }
  /* the rank's mask over all its microbatches (same single tensor) */
  int pm = new_dt(g, st, -1, m.name, m.dtype, VD_ROLE_INPUT, VD_SCOPE_PERSISTENT, m.ndim, m.gshape, m.fl, 0);
  vd_gen_lay ll = vd_gen_i_lay(LR, LR, LR, -1);
  for (int a = 0; a < AX_N; a++)
    if (m.fl.ax[a] >= 0 || m.fl.ax[a] == LP) ll.ax[a] = LP;
  ll.dpart = 1;
  int64_t one[1] = {1};
  int loc = new_dt(g, st, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, one, ll, 0);
  if (pm < 0 || loc < 0) return -1;
  vd_gen_attr at[2];
  memset(at, 0, sizeof(at));
  at[0].key = "dims";
  at[0].kind = VD_ATTR_INTS;
  at[0].n_ints = (uint32_t)m.ndim;
  for (int i = 0; i < m.ndim; i++) at[0].ints[i] = i;
  at[1] = iattr("keepdim", 0);
  for (int64_t r = 0; r < g->rps; r++) {
    uint32_t ti = g->dts[pm].t[r], to = g->dts[loc].t[r];
    if (emit(g, st, r, g->seg_init, "sum", name, -1, VD_PHASE_FWD, &ti, 1, &to, 1, at, 2, -1, NULL, 0, 0) < 0)
      return -1;
  }
  unsigned mk = lp_mask(g->dts[loc].fl);
  int64_t gsize = 1;
  for (int a = 0; a < AX_N; a++)
    if (mk & (1u << a)) gsize *= g->deg[a];
  if (gsize * g->dp == 1) return loc;
  /* the global count: all_reduce over the ranks holding other tokens
   * (cp, ep), spanning the DP replicas; TP ranks hold the same tokens */
  int tot = new_dt(g, st, -1, name, VD_DT_F64, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 0, one,
                   vd_gen_i_lay(LR, LR, LR, -1), 0);
  if (tot < 0) return -1;
  int64_t base = g->next_key;
  int64_t grp[1 << 10];
  for (int64_t r = 0; r < g->rps; r++) {
    int64_t gid = 0;
    int n = group_of(g, st, r, mk, grp, &gid);
    uint32_t ti = g->dts[loc].t[r], to = g->dts[tot].t[r];
    if (emit(g, st, r, g->seg_init, "all_reduce", name, -1, VD_PHASE_COMM, &ti, 1, &to, 1, NULL, 0, base + gid, grp,
             n, g->dp > 1) < 0)
      return -1;
  }
  g->next_key += g->rps;
  return tot;
}
