/*
 * ops/reduce.c - closed-form shape reduction over any set of values
 * (docs/verifier.md section 3, docs/shape-reduction.md).
 *
 * Every dimension of every stage value (both sides) is a variable.  The
 * registry's reduction rules (ops/ops_reduce.c) and the lineage of the
 * stage's hypotheses and targets relate them:
 *   - EQ: two dimensions reduce by the same ratio (their original sizes
 *     must satisfy the rule's exact factor, else the stage's shape
 *     constraints contradict each other: VD_EINPUT naming the node);
 *   - a piece's dimension and its single value's dimension reduce by the
 *     same ratio, and the slice bounds are positions along that class;
 *   - MIN2 / EVEN / KEEP flags, POS attributes, PROD (view merge/split).
 * Union-find puts EQ-related dimensions in one class.  Because every member
 * has a known original size, the exact rational factor between two members
 * is their size ratio; a class is reduced by ONE ratio g/m, so all those
 * factors (shard ratios, all_gather/chunk factors) are kept exactly.
 *
 * Closed form per class: g = gcd(member sizes, positions along the class);
 * m in {1, 2} the smallest making every member >= 2 (class has a MIN2
 * member) and even (EVEN); g < m or KEEP: the class keeps its sizes.
 * Reduced size = size * m / g; reduced position = position * m / g (exact:
 * g divides both).  Each member keeps >= 1 element since g divides it.
 *
 * PROD groups (view/reshape) need prod(ratios of one run) == prod(ratios of
 * the other).  When they differ and one side is a single dimension (a pure
 * merge or split), that dimension's class is pinned to the product ratio if
 * the ratio is valid for all its members and positions; if it is invalid
 * only because of a MIN2/EVEN minimum, the innermost class of the other run
 * is bumped to m = 2 and everything is recomputed; otherwise every class of
 * the group keeps its original sizes.  Each restart adds a KEEP or a bump,
 * so this terminates; past a generous bound the stage is left unreduced.
 *
 * A node whose operator is unknown (op == -1) or whose rule does not cover
 * its operand form leaves the whole stage unreduced (reduced = 0, rshape =
 * shape, noreduce_node set): not an error.
 *
 * The union-find and the closed form work on any set of values
 * (ops/reduce.h, struct vd_reducer); stages/shape.c describes one stage
 * to it (vd_stage_reduce).  The numeric executor describes a whole
 * single/parallel pair (oracle/exec_reduce.c).
 *
 * Cost: O(stage dims * alpha + constraints + PROD restarts * groups).
 */
#include "reduce.h"

#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "ops.h"

enum { F_MIN2 = 1, F_EVEN = 2, F_KEEP = 4 };

typedef struct {
  uint32_t node, var; /* node: the caller's tag */
  const char *attr;
  int64_t pos;
} pos_rec;

typedef struct {
  uint32_t node;     /* the caller's tag */
  uint32_t n;
  uint32_t var[VD_MAX_DIMS];
} avg_rec;

typedef struct {
  uint32_t node;
  uint8_t na, nb;
  uint32_t a[VD_MAX_DIMS], b[VD_MAX_DIMS];
} prod_rec;

typedef struct {
  int64_t g;       /* gcd of sizes and positions */
  int64_t rn, rd;  /* ratio: reduced = size * rd / rn */
  uint8_t flags;   /* F_* of any member, plus bumps */
  uint8_t pinned;  /* ratio set by a PROD group */
  uint8_t oddq;    /* some member's size / g is odd */
  int64_t min_size;
  int64_t mink;    /* every member keeps >= mink elements (vd_reducer_min_extent); 0: none */
} cls;

struct vd_reducer {
  vd_diag *d;
  uint32_t n_vals;
  int32_t *ndim;    /* per value */
  uint32_t *vbase;  /* first variable of each value */
  uint32_t nvar;
  int64_t *size;
  uint32_t *parent;
  uint8_t *flag;
  int64_t *vgcd;    /* per variable: gcd of positions seen along it */
  int64_t *vmin;    /* per variable: minimum reduced extent (0: none) */
  uint32_t *next;   /* after solve: next member of the variable's class, ~0u at the end */
  pos_rec *pos;  size_t n_pos, cap_pos;
  prod_rec *prod; size_t n_prod, cap_prod;
  avg_rec *avg; size_t n_avg, cap_avg;
  uint32_t cur_call; /* counts vd_reducer_node calls: AVG dims of one call group */
  uint32_t avg_call; /* call of the last avg record */
  cls *cl;          /* per variable, meaningful at roots */
  vd_op_shape *ish, *osh; uint32_t cap_in, cap_out;
  /* node being processed */
  const uint32_t *cur_in, *cur_out;
  uint32_t cur_nin, cur_nout, node;
  char rec[200];
};

static int64_t gcd64(int64_t a, int64_t b) {
  if (a < 0) a = -a;
  if (b < 0) b = -b;
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static uint32_t find(vd_reducer *c, uint32_t x) {
  uint32_t r = x;
  while (c->parent[r] != r) r = c->parent[r];
  while (c->parent[x] != r) {
    uint32_t n = c->parent[x];
    c->parent[x] = r;
    x = n;
  }
  return r;
}

static void unite(vd_reducer *c, uint32_t a, uint32_t b) {
  a = find(c, a);
  b = find(c, b);
  if (a == b) return;
  if (a < b) c->parent[b] = a; else c->parent[a] = b;
}

/* Variable of operand dimension r of the current node; ~0u if out of range. */
static uint32_t var_of(vd_reducer *c, vd_op_dimref r) {
  if (r.out ? r.t >= c->cur_nout : r.t >= c->cur_nin) return ~0u;
  uint32_t v = r.out ? c->cur_out[r.t] : c->cur_in[r.t];
  if (v >= c->n_vals || r.dim >= c->ndim[v]) return ~0u;
  return c->vbase[v] + r.dim;
}

static void dim_name(vd_reducer *c, vd_op_dimref r, char *buf, size_t n) {
  uint32_t v = var_of(c, r);
  snprintf(buf, n, "%s[%u] dim %u (extent %lld)", r.out ? "outputs" : "inputs", r.t, r.dim,
           v == ~0u ? -1LL : (long long)c->size[v]);
}

/* EQ: a * den == b * num (when num > 0), then one class. */
static vd_rc emit_eq(vd_reducer *c, const vd_op_red *r, uint32_t a) {
  uint32_t b = var_of(c, r->b);
  if (b == ~0u)
    VD_FAIL(c->d, VD_EINTERNAL, NULL, c->rec, "reduce", "rule names an absent operand dimension");
  if (r->num > 0) {
    __int128 lhs = (__int128)c->size[a] * r->den, rhs = (__int128)c->size[b] * r->num;
    if (lhs != rhs) {
      char da[96], db[96];
      dim_name(c, r->a, da, sizeof(da));
      dim_name(c, r->b, db, sizeof(db));
      VD_FAIL(c->d, VD_EINPUT, NULL, c->rec, "shape",
              "the shape constraints of the stage contradict each other: expected %s * %lld == %s * %lld",
              da, (long long)r->den, db, (long long)r->num);
    }
  }
  unite(c, a, b);
  return VD_OK;
}

/* AVG: dimension a joins the averaged group of the current call. */
static vd_rc emit_avg(vd_reducer *c, uint32_t a) {
  avg_rec *last = c->n_avg && c->avg_call == c->cur_call ? &c->avg[c->n_avg - 1] : NULL;
  if (!last) {
    if (VD_GROW(c->avg, c->cap_avg, c->n_avg + 1)) return VD_OOM(c->d);
    last = &c->avg[c->n_avg++];
    last->node = c->node;
    last->n = 0;
    c->avg_call = c->cur_call;
  }
  if (last->n < VD_MAX_DIMS) last->var[last->n++] = a;
  return VD_OK;
}

/* POS: a position along dimension a (an attribute's value). */
static vd_rc emit_pos(vd_reducer *c, const vd_op_red *r, uint32_t a) {
  if (c->n_pos == c->cap_pos) {
    size_t nc = c->cap_pos ? 2 * c->cap_pos : 16;
    pos_rec *np = vd_realloc_array(c->pos, nc, sizeof(*np));
    if (!np) return VD_OOM(c->d);
    c->pos = np;
    c->cap_pos = nc;
  }
  c->pos[c->n_pos++] = (pos_rec){c->node, a, r->attr, r->pos};
  c->vgcd[a] = gcd64(c->vgcd[a], r->pos);
  return VD_OK;
}

/* PROD: the run of na dimensions from a has the product of the run of nb
 * from b. */
static vd_rc emit_prod(vd_reducer *c, const vd_op_red *r) {
  prod_rec pr = {.node = c->node, .na = r->na, .nb = r->nb};
  if (!r->na || !r->nb || r->na > VD_MAX_DIMS || r->nb > VD_MAX_DIMS)
    VD_FAIL(c->d, VD_EINTERNAL, NULL, c->rec, "reduce", "bad PROD run");
  for (uint32_t k = 0; k < r->na + r->nb; k++) {
    vd_op_dimref x = k < r->na ? r->a : r->b;
    x.dim = (uint8_t)(x.dim + (k < r->na ? k : k - r->na));
    uint32_t v = var_of(c, x);
    if (v == ~0u) VD_FAIL(c->d, VD_EINTERNAL, NULL, c->rec, "reduce", "PROD run leaves the operand");
    if (k < r->na) pr.a[k] = v; else pr.b[k - r->na] = v;
  }
  if (r->na > 1 && r->nb > 1) {
    /* Neither a merge nor a split: the element order cannot be kept by
     * per-dimension ratios, so these dimensions keep their sizes. */
    for (uint32_t k = 0; k < r->na; k++) c->flag[pr.a[k]] |= F_KEEP;
    for (uint32_t k = 0; k < r->nb; k++) c->flag[pr.b[k]] |= F_KEEP;
    return VD_OK;
  }
  if (VD_GROW(c->prod, c->cap_prod, c->n_prod + 1)) return VD_OOM(c->d);
  c->prod[c->n_prod++] = pr;
  return VD_OK;
}

static vd_rc emit(void *sink, const vd_op_red *r) {
  vd_reducer *c = sink;
  uint32_t a = var_of(c, r->a);
  if (a == ~0u)
    VD_FAIL(c->d, VD_EINTERNAL, NULL, c->rec, "reduce", "rule names operand dimension %u of %s %u, absent",
            r->a.dim, r->a.out ? "output" : "input", r->a.t);
  switch (r->kind) {
  case VD_RED_EQ: return emit_eq(c, r, a);
  case VD_RED_MIN2: c->flag[a] |= F_MIN2; return VD_OK;
  case VD_RED_EVEN: c->flag[a] |= F_EVEN; return VD_OK;
  case VD_RED_KEEP: c->flag[a] |= F_KEEP; return VD_OK;
  case VD_RED_MINK:
    if (r->pos > c->vmin[a]) c->vmin[a] = r->pos;
    if (r->num > 0) c->vgcd[a] = gcd64(c->vgcd[a], r->num);
    return VD_OK;
  case VD_RED_AVG: return emit_avg(c, a);
  case VD_RED_POS: return emit_pos(c, r, a);
  case VD_RED_PROD: return emit_prod(c, r);
  }
  VD_FAIL(c->d, VD_EINTERNAL, NULL, c->rec, "reduce", "unknown constraint kind %d", (int)r->kind);
}

/* Relates a parallel value (a hypothesis or a target piece) to slice
 * [lo, hi) of single value sv: same ratio per dim, bounds are positions. */
static vd_rc relate_piece(vd_reducer *c, uint32_t pv, uint32_t sv, const int64_t *lo, const int64_t *hi) {
  if (c->ndim[pv] != c->ndim[sv])
    VD_FAIL(c->d, VD_EINPUT, NULL, c->rec, "shape",
            "the shape constraints of the stage contradict each other: parallel value %u has %d dims, its single value %d",
            pv, c->ndim[pv], c->ndim[sv]);
  for (int32_t j = 0; j < c->ndim[pv]; j++) {
    uint32_t a = c->vbase[pv] + (uint32_t)j, b = c->vbase[sv] + (uint32_t)j;
    if (hi[j] - lo[j] != c->size[a])
      VD_FAIL(c->d, VD_EINPUT, NULL, c->rec, "shape",
              "the shape constraints of the stage contradict each other: parallel value %u dim %d has extent %lld, "
              "its lineage slice [%lld, %lld) of the single value",
              pv, j, (long long)c->size[a], (long long)lo[j], (long long)hi[j]);
    unite(c, a, b);
    c->vgcd[b] = gcd64(c->vgcd[b], gcd64(lo[j], hi[j]));
  }
  return VD_OK;
}

/* Base ratio of class at root r from its gcd and flags. */
static void base_ratio(cls *k) {
  k->pinned = 0;
  if ((k->flags & F_KEEP) || k->g <= 1) {
    k->rn = k->rd = 1;
    return;
  }
  int64_t m = 1;
  int64_t q = k->min_size / k->g; /* smallest member, reduced with m = 1 */
  if ((k->flags & F_MIN2) && q < 2) m = 2;
  if (k->mink > 0 && q > 0 && q * m < k->mink) m = (k->mink + q - 1) / q;
  if ((k->flags & F_EVEN) && (q < 2 || k->oddq) && m < 2) m = 2;
  if ((k->flags & F_EVEN) && k->oddq && m % 2) m++; /* only when mink made m odd */
  if (k->g < m) {
    k->rn = k->rd = 1;
    return;
  }
  k->rn = k->g;
  k->rd = m;
  int64_t t = gcd64(k->rn, k->rd);
  k->rn /= t;
  k->rd /= t;
}

/* Is reduced = size * rd / rn valid for every member and position of the
 * class rooted at r?  *why: 1 divisibility, 2 a minimum (MIN2/EVEN). */
static int valid_ratio(vd_reducer *c, uint32_t r, int64_t rn, int64_t rd, int *why) {
  const cls *k = &c->cl[r];
  if (rn < rd) {
    *why = 1;
    return 0;
  }
  for (uint32_t v = r; v != ~0u; v = c->next[v]) {
    __int128 s = (__int128)c->size[v] * rd;
    __int128 p = (__int128)c->vgcd[v] * rd;
    if (s % rn || p % rn) {
      *why = 1;
      return 0;
    }
    int64_t red = (int64_t)(s / rn);
    if (c->size[v] > 0 && (((k->flags & F_MIN2) && red < 2) || ((k->flags & F_EVEN) && (red < 2 || red % 2)) ||
                           red < k->mink)) {
      *why = 2;
      return 0;
    }
  }
  return 1;
}

/* Product of the ratios of a run, reduced; 0 on overflow. */
static int run_ratio(vd_reducer *c, const uint32_t *vars, uint32_t n, int64_t *rn, int64_t *rd) {
  int64_t a = 1, b = 1;
  for (uint32_t i = 0; i < n; i++) {
    const cls *k = &c->cl[find(c, vars[i])];
    if (__builtin_mul_overflow(a, k->rn, &a) || __builtin_mul_overflow(b, k->rd, &b)) return 0;
    int64_t t = gcd64(a, b);
    a /= t;
    b /= t;
  }
  *rn = a;
  *rd = b;
  return 1;
}

/* Sets flag f on every class of a PROD group; returns whether anything changed. */
static int flag_group(vd_reducer *c, const prod_rec *p, uint8_t f) {
  int changed = 0;
  for (uint32_t i = 0; i < (uint32_t)p->na + p->nb; i++) {
    uint32_t r = find(c, i < p->na ? p->a[i] : p->b[i - p->na]);
    if (!(c->cl[r].flags & f)) changed = 1;
    c->cl[r].flags |= f;
  }
  return changed;
}

/* What one PROD group did in a pass of resolve_prods. */
enum { PROD_EQUAL, PROD_CHANGED, PROD_REDO, PROD_FAIL };

/* Keeps every class of the group; a restart, or failure when they all
 * were kept already (unequal all the same: cannot happen). */
static int keep_group(vd_reducer *c, const prod_rec *p) {
  return flag_group(c, p, F_KEEP) ? PROD_REDO : PROD_FAIL;
}

/* Pins the innermost class of run other[0..n) that can take the factor the
 * single class k misses (ratio tn/td of the run): its ratio times single /
 * run, when valid for its members.  Whether one was pinned. */
static int pin_run_class(vd_reducer *c, const cls *k, const uint32_t *other, uint32_t n_other, int64_t tn,
                         int64_t td) {
  for (uint32_t j = n_other; j-- > 0;) {
    uint32_t ro = find(c, other[j]);
    cls *o = &c->cl[ro];
    if ((o->flags & F_KEEP) || o->pinned) continue;
    __int128 nn = (__int128)o->rn * k->rn * td, dd = (__int128)o->rd * k->rd * tn;
    if (nn > INT64_MAX || dd > INT64_MAX) continue;
    int64_t rn2 = (int64_t)nn, rd2 = (int64_t)dd, t = gcd64(rn2, rd2);
    rn2 /= t;
    rd2 /= t;
    int w2;
    if (valid_ratio(c, ro, rn2, rd2, &w2)) {
      o->rn = rn2;
      o->rd = rd2;
      o->pinned = 1;
      return 1;
    }
  }
  return 0;
}

/* Bumps (MIN2) the innermost class of run other[0..n) that can grow.
 * Whether one was. */
static int bump_run_class(vd_reducer *c, const uint32_t *other, uint32_t n_other) {
  for (uint32_t j = n_other; j-- > 0;) {
    cls *o = &c->cl[find(c, other[j])];
    if (!(o->flags & (F_KEEP | F_MIN2)) && o->g >= 2) {
      o->flags |= F_MIN2;
      return 1;
    }
  }
  return 0;
}

/* One PROD group against the current ratios: equal runs, or a pure merge
 * or split whose single dimension's class (or a class of the run) gets
 * pinned, or a bump or keep that restarts the resolution. */
static int settle_prod(vd_reducer *c, const prod_rec *p) {
  int64_t an, ad, bn, bd;
  if (!run_ratio(c, p->a, p->na, &an, &ad) || !run_ratio(c, p->b, p->nb, &bn, &bd)) return keep_group(c, p);
  if (an == bn && ad == bd) return PROD_EQUAL;
  /* A pure merge or split: pin the single dimension's class. */
  const uint32_t *other = NULL;
  uint32_t n_other = 0, single = ~0u;
  int64_t tn = 0, td = 0;
  if (p->na == 1) {
    single = p->a[0]; other = p->b; n_other = p->nb; tn = bn; td = bd;
  } else if (p->nb == 1) {
    single = p->b[0]; other = p->a; n_other = p->na; tn = an; td = ad;
  }
  if (single == ~0u) return keep_group(c, p);
  int why = 1;
  uint32_t r = find(c, single);
  cls *k = &c->cl[r];
  if (!(k->flags & F_KEEP) && !k->pinned && valid_ratio(c, r, tn, td, &why)) {
    k->rn = tn;
    k->rd = td;
    k->pinned = 1;
    return PROD_CHANGED;
  }
  /* The run reduces more than the single dimension can (its product
   * ratio does not divide every member: a hidden dimension split in
   * halves by a chunk, and into heads x head_dim by the view): let
   * the run reduce less, as for a minimum. */
  int finer = why == 1 && (__int128)tn * k->rd > (__int128)k->rn * td;
  if (finer && !(k->flags & F_KEEP) && !k->pinned && pin_run_class(c, k, other, n_other, tn, td))
    return PROD_CHANGED;
  if ((why == 2 || finer) && !(k->flags & F_KEEP) && !k->pinned && bump_run_class(c, other, n_other))
    return PROD_REDO;
  return keep_group(c, p);
}

/* Resolves PROD groups; 1 on success, 0 if the stage should stay unreduced. */
static int resolve_prods(vd_reducer *c) {
  size_t bound = 4 * (size_t)c->nvar + 16;
  for (size_t restart = 0; restart < bound; restart++) {
    for (uint32_t v = 0; v < c->nvar; v++)
      if (find(c, v) == v) base_ratio(&c->cl[v]);
    int redo = 0;
    for (size_t pass = 0; pass <= c->n_prod && !redo; pass++) {
      int changed = 0;
      for (size_t i = 0; i < c->n_prod && !redo; i++) {
        int o = settle_prod(c, &c->prod[i]);
        if (o == PROD_FAIL) return 0;
        if (o == PROD_CHANGED) changed = 1;
        if (o == PROD_REDO) redo = 1;
      }
      if (!changed) break;
    }
    if (!redo) return 1;
  }
  return 0;
}

static int64_t scale_by(const cls *k, int64_t x) { return (int64_t)((__int128)x * k->rd / k->rn); }

/* ---- the generic reducer (reduce.h) ------------------------------------------ */

vd_rc vd_reducer_new(const vd_red_value *vals, uint32_t n, vd_reducer **out, vd_diag *d) {
  *out = NULL;
  vd_reducer *c = vd_calloc(1, sizeof(*c));
  if (!c) return VD_OOM(d);
  c->n_vals = n;
  c->ndim = vd_calloc((size_t)n + 1, sizeof(int32_t));
  c->vbase = vd_calloc((size_t)n + 1, sizeof(uint32_t));
  if (!c->ndim || !c->vbase) goto oom;
  for (uint32_t i = 0; i < n; i++) {
    if (vals[i].ndim < 0 || vals[i].ndim > VD_MAX_DIMS) {
      vd_reducer_free(c);
      VD_FAIL(d, VD_EINTERNAL, NULL, "stage", "vals", "value %u has %d dims", i, vals[i].ndim);
    }
    c->ndim[i] = vals[i].ndim;
    c->vbase[i + 1] = c->vbase[i] + (uint32_t)vals[i].ndim;
  }
  c->nvar = c->vbase[n];
  size_t nv = c->nvar ? c->nvar : 1;
  c->size = vd_calloc(nv, sizeof(int64_t));
  c->parent = vd_calloc(nv, sizeof(uint32_t));
  c->flag = vd_calloc(nv, 1);
  c->vgcd = vd_calloc(nv, sizeof(int64_t));
  c->vmin = vd_calloc(nv, sizeof(int64_t));
  c->next = vd_calloc(nv, sizeof(uint32_t));
  c->cl = vd_calloc(nv, sizeof(cls));
  if (!c->size || !c->parent || !c->flag || !c->vgcd || !c->vmin || !c->next || !c->cl) goto oom;
  for (uint32_t i = 0; i < n; i++)
    for (int32_t j = 0; j < vals[i].ndim; j++) c->size[c->vbase[i] + (uint32_t)j] = vals[i].shape[j];
  for (uint32_t v = 0; v < c->nvar; v++) c->parent[v] = v;
  *out = c;
  return VD_OK;
oom:
  vd_reducer_free(c);
  return VD_OOM(d);
}

void vd_reducer_free(vd_reducer *c) {
  if (!c) return;
  VD_FREE_ALL(c->ndim, c->vbase, c->size, c->parent, c->flag, c->vgcd, c->vmin, c->next, c->cl, c->pos, c->prod, c->avg,
              c->ish, c->osh, c);
}

/* c->rec = r, truncated (a copy per node: snprintf was a tenth of cutting). */
static void set_rec(vd_reducer *c, const char *r) {
  size_t l = strlen(r);
  if (l >= sizeof(c->rec)) l = sizeof(c->rec) - 1;
  memcpy(c->rec, r, l);
  c->rec[l] = 0;
}

vd_rc vd_reducer_node(vd_reducer *c, uint32_t tag, int op, const vd_plan_t *plan, const vd_node_t *node,
                      const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out,
                      const char *record, int *norule, vd_diag *d) {
  *norule = 0;
  c->d = d;
  set_rec(c, record ? record : "node");
  if (n_in > c->cap_in) {
    vd_free(c->ish);
    c->ish = vd_calloc(n_in, sizeof(*c->ish));
    c->cap_in = c->ish ? n_in : 0;
    if (!c->ish) return VD_OOM(d);
  }
  if (n_out > c->cap_out) {
    vd_free(c->osh);
    c->osh = vd_calloc(n_out, sizeof(*c->osh));
    c->cap_out = c->osh ? n_out : 0;
    if (!c->osh) return VD_OOM(d);
  }
  for (uint32_t k = 0; k < n_in + n_out; k++) {
    uint32_t v = k < n_in ? in[k] : out[k - n_in];
    if (v >= c->n_vals)
      VD_FAIL(d, VD_EINTERNAL, NULL, c->rec, "idx", "operand names value %u of %u", v, c->n_vals);
    vd_op_shape *s = k < n_in ? &c->ish[k] : &c->osh[k - n_in];
    memset(s, 0, sizeof(*s));
    s->ndim = c->ndim[v];
    for (int32_t j = 0; j < c->ndim[v]; j++) s->d[j] = c->size[c->vbase[v] + (uint32_t)j];
  }
  c->cur_in = in;
  c->cur_out = out;
  c->cur_nin = n_in;
  c->cur_nout = n_out;
  c->node = tag;
  c->cur_call++;
  vd_op_reduce_call call = {.op = op, .plan = plan, .node = node, .n_in = n_in, .n_out = n_out,
                            .in_shape = c->ish, .out_shape = c->osh, .emit = emit, .sink = c};
  return vd_op_reduce_rule((vd_op_id)op)(&call, norule);
}

vd_rc vd_reducer_relate(vd_reducer *c, uint32_t pv, uint32_t sv, const int64_t *lo, const int64_t *hi,
                        const char *record, vd_diag *d) {
  c->d = d;
  set_rec(c, record ? record : "lineage");
  if (pv >= c->n_vals || sv >= c->n_vals)
    VD_FAIL(d, VD_EINTERNAL, NULL, c->rec, "idx", "relation names values %u, %u of %u", pv, sv, c->n_vals);
  return relate_piece(c, pv, sv, lo, hi);
}

void vd_reducer_position(vd_reducer *c, uint32_t v, int32_t dim, int64_t x) {
  if (v >= c->n_vals || dim < 0 || dim >= c->ndim[v]) return;
  uint32_t a = c->vbase[v] + (uint32_t)dim;
  c->vgcd[a] = gcd64(c->vgcd[a], x);
}

void vd_reducer_min_extent(vd_reducer *c, uint32_t v, int32_t dim, int64_t k) {
  if (v >= c->n_vals || dim < 0 || dim >= c->ndim[v]) return;
  uint32_t a = c->vbase[v] + (uint32_t)dim;
  if (k > c->vmin[a]) c->vmin[a] = k;
}

void vd_reducer_keep(vd_reducer *c, uint32_t v, int32_t dim) {
  if (v >= c->n_vals || dim < 0 || dim >= c->ndim[v]) return;
  c->flag[c->vbase[v] + (uint32_t)dim] |= F_KEEP;
}

vd_rc vd_reducer_linked(vd_reducer *c, uint32_t v, int32_t dim, uint8_t *mark, vd_diag *d) {
  if (v >= c->n_vals || dim < 0 || dim >= c->ndim[v]) return VD_OK;
  uint8_t *hot = vd_calloc((size_t)c->nvar + 1, 1); /* per class root */
  if (!hot) return VD_OOM(d);
  hot[find(c, c->vbase[v] + (uint32_t)dim)] = 1;
  /* Along PROD groups, to a fixpoint: a merge of a run holding a linked
   * class into one dimension links that dimension; a split of a linked
   * dimension links the run's members that are linked already, or, when
   * none is, every member (which factor holds the class is not known); a
   * regrouping of runs on both sides links both sides whole. */
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t q = 0; q < c->n_prod; q++) {
      const prod_rec *p = &c->prod[q];
      int ha = 0, hb = 0;
      for (uint32_t k = 0; k < p->na; k++) ha |= hot[find(c, p->a[k])];
      for (uint32_t k = 0; k < p->nb; k++) hb |= hot[find(c, p->b[k])];
      if (!ha && !hb) continue;
      int all_a, all_b;
      if (p->na > 1 && p->nb > 1) {
        all_a = all_b = 1;
      } else if (p->na == 1) { /* a single, b the run */
        all_a = hb;
        all_b = !hb;
      } else {
        all_b = ha;
        all_a = !ha;
      }
      for (uint32_t k = 0; all_a && k < p->na; k++) {
        uint32_t r = find(c, p->a[k]);
        if (!hot[r]) hot[r] = changed = 1;
      }
      for (uint32_t k = 0; all_b && k < p->nb; k++) {
        uint32_t r = find(c, p->b[k]);
        if (!hot[r]) hot[r] = changed = 1;
      }
    }
  }
  for (uint32_t w = 0; w < c->n_vals; w++)
    for (int32_t j = 0; j < c->ndim[w] && j < VD_MAX_DIMS; j++)
      if (hot[find(c, c->vbase[w] + (uint32_t)j)]) mark[(size_t)w * VD_MAX_DIMS + (size_t)j] = 1;
  vd_free(hot);
  return VD_OK;
}

/* The single dimension and the run of a pure merge/split group; 0 if the
 * group is neither. */
static int split_of(const prod_rec *p, uint32_t *single, const uint32_t **run, uint32_t *n) {
  if (p->na == 1 && p->nb >= 2) {
    *single = p->a[0], *run = p->b, *n = p->nb;
    return 1;
  }
  if (p->nb == 1 && p->na >= 2) {
    *single = p->b[0], *run = p->a, *n = p->na;
    return 1;
  }
  return 0;
}

/* Two pure splits (or merges) of one class into runs of equal length
 * describe the same factorisation: a weight's rows (h d 3) viewed on the
 * single device and on a head-sharded rank, hidden (h d) before attention in
 * both plans.  Their k-th dimensions are united.  Otherwise each side's head
 * dimension reduces by its own gcd (16 heads -> 1, a shard's 8 -> 1), the
 * two products disagree and the whole group keeps its sizes; united, the
 * heads reduce by a common factor.  Uniting only adds constraints, so any
 * reduction still found satisfies every operator's rule. */
static void unite_same_splits(vd_reducer *c) {
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < c->n_prod; i++) {
      uint32_t si, ni;
      const uint32_t *ri;
      if (!split_of(&c->prod[i], &si, &ri, &ni)) continue;
      for (size_t j = i + 1; j < c->n_prod; j++) {
        uint32_t sj, nj;
        const uint32_t *rj;
        if (!split_of(&c->prod[j], &sj, &rj, &nj) || nj != ni || find(c, si) != find(c, sj)) continue;
        for (uint32_t k = 0; k < ni; k++)
          if (find(c, ri[k]) != find(c, rj[k])) {
            unite(c, ri[k], rj[k]);
            changed = 1;
          }
      }
    }
  }
}

/* Appends the classes of run i to seq (at most cap), a class that is the
 * single dimension of another pure run replaced by that run's factors
 * (depth-bounded: chains of views). */
static void run_classes(vd_reducer *c, size_t i, int depth, uint32_t *seq, uint32_t *n, uint32_t cap) {
  uint32_t si, ni;
  const uint32_t *ri;
  if (!split_of(&c->prod[i], &si, &ri, &ni)) return;
  for (uint32_t k = 0; k < ni; k++) {
    uint32_t x = find(c, ri[k]);
    size_t j = c->n_prod;
    if (depth < 3)
      for (j = 0; j < c->n_prod; j++) {
        uint32_t sj, nj;
        const uint32_t *rj;
        if (j != i && split_of(&c->prod[j], &sj, &rj, &nj) && find(c, sj) == x) break;
      }
    if (j < c->n_prod) {
      run_classes(c, j, depth + 1, seq, n, cap);
    } else if (*n < cap) {
      seq[(*n)++] = x;
    }
  }
}

static int pos_in(const uint32_t *seq, uint32_t n, uint32_t x) {
  for (uint32_t k = 0; k < n; k++)
    if (seq[k] == x) return (int)k;
  return -1;
}

/* SOUNDNESS (docs/shape-reduction.md, ORDER): the operators permute
 * elements inside one dimension only by splitting it into factors, moving
 * factors (transpose) and merging them in another order (view [.., d/2, 2]
 * -> transpose -> view [.., d], the interleaved rope pairs), or by comparing
 * two factorisations of one class in different orders.  Every pair of
 * classes that two runs (views expanded through chains of views) order
 * differently keeps >= 2, and so does a class that one run holds twice:
 * then the reduced index map is still a non-identity permutation. */
static vd_rc order_rule(vd_reducer *c) {
  enum { CAP = 4 * VD_MAX_DIMS };
  if (c->n_prod < 2) return VD_OK;
  uint32_t *seq = vd_calloc(c->n_prod * CAP, sizeof(uint32_t)), *len = vd_calloc(c->n_prod, sizeof(uint32_t));
  if (!seq || !len) {
    vd_free(seq);
    vd_free(len);
    return VD_OOM(c->d);
  }
  for (size_t i = 0; i < c->n_prod; i++) {
    uint32_t *s = seq + i * CAP;
    run_classes(c, i, 0, s, &len[i], CAP);
    for (uint32_t a = 0; a < len[i]; a++)
      for (uint32_t b = a + 1; b < len[i]; b++)
        if (s[a] == s[b]) c->flag[s[a]] |= F_MIN2;
  }
  for (size_t i = 0; i < c->n_prod; i++)
    for (size_t j = i + 1; j < c->n_prod; j++) {
      const uint32_t *si = seq + i * CAP, *sj = seq + j * CAP;
      for (uint32_t a = 0; a < len[i]; a++)
        for (uint32_t b = a + 1; b < len[i]; b++) {
          int pa = pos_in(sj, len[j], si[a]), pb = pos_in(sj, len[j], si[b]);
          if (pa >= 0 && pb >= 0 && pa > pb) {
            c->flag[si[a]] |= F_MIN2;
            c->flag[si[b]] |= F_MIN2;
          }
        }
    }
  vd_free(seq);
  vd_free(len);
  return VD_OK;
}

vd_rc vd_reducer_solve(vd_reducer *c, int *reduced, vd_diag *d) {
  c->d = d;
  *reduced = 0;
  unite_same_splits(c);
  VD_CHECK(order_rule(c));
  /* Two dimensions of one value in one class (a transpose, a square
   * attention score, q and k of a causal mask): with one element they could
   * not tell a permutation of indices from the identity, so they keep >= 2. */
  for (uint32_t i = 0; i < c->n_vals; i++)
    for (int32_t j = 0; j < c->ndim[i]; j++)
      for (int32_t k = j + 1; k < c->ndim[i]; k++) {
        uint32_t a = c->vbase[i] + (uint32_t)j, b = c->vbase[i] + (uint32_t)k;
        if (find(c, a) == find(c, b)) c->flag[a] |= F_MIN2;
      }

  /* Classes, with their member lists (root first). */
  for (uint32_t v = 0; v < c->nvar; v++) {
    c->cl[v].min_size = INT64_MAX;
    c->cl[v].g = 0;
    c->cl[v].mink = 0;
    c->next[v] = ~0u;
  }
  for (uint32_t v = c->nvar; v-- > 0;) {
    uint32_t r = find(c, v);
    if (r != v) {
      c->next[v] = c->next[r];
      c->next[r] = v;
    }
  }
  for (uint32_t v = 0; v < c->nvar; v++) {
    cls *k = &c->cl[find(c, v)];
    k->g = gcd64(k->g, gcd64(c->size[v], c->vgcd[v]));
    k->flags |= c->flag[v];
    if (c->size[v] > 0 && c->size[v] < k->min_size) k->min_size = c->size[v];
    if (c->vmin[v] > k->mink) k->mink = c->vmin[v];
  }
  for (uint32_t v = 0; v < c->nvar; v++) {
    cls *k = &c->cl[v];
    if (find(c, v) != v) continue;
    if (k->g == 0) k->g = 1;
    if (k->min_size == INT64_MAX) k->min_size = 0;
  }
  for (uint32_t v = 0; v < c->nvar; v++) {
    cls *k = &c->cl[find(c, v)];
    if (c->size[v] > 0 && (c->size[v] / k->g) % 2) k->oddq = 1;
  }
  *reduced = resolve_prods(c);
  return VD_OK;
}

int64_t vd_reducer_scale(vd_reducer *c, uint32_t v, int32_t dim, int64_t x) {
  if (v >= c->n_vals || dim < 0 || dim >= c->ndim[v]) return x;
  return scale_by(&c->cl[find(c, c->vbase[v] + (uint32_t)dim)], x);
}

size_t vd_reducer_n_pos(const vd_reducer *c) { return c->n_pos; }

void vd_reducer_pos(vd_reducer *c, size_t i, uint32_t *tag, const char **attr, int64_t *orig, int64_t *scaled) {
  const pos_rec *p = &c->pos[i];
  *tag = p->node;
  *attr = p->attr;
  *orig = p->pos;
  *scaled = scale_by(&c->cl[find(c, p->var)], p->pos);
}

size_t vd_reducer_n_avg(const vd_reducer *c) { return c->n_avg; }

void vd_reducer_avg(vd_reducer *c, size_t i, uint32_t *tag, int64_t *full, int64_t *reduced) {
  const avg_rec *a = &c->avg[i];
  int64_t f = 1, r = 1;
  for (uint32_t k = 0; k < a->n; k++) {
    f *= c->size[a->var[k]];
    r *= scale_by(&c->cl[find(c, a->var[k])], c->size[a->var[k]]);
  }
  *tag = a->node;
  *full = f;
  *reduced = r;
}
