/*
 * lineage/infer.c - candidate lineages for the unannotated tensors of a
 * parallel plan (docs/verifier.md section 1b).
 *
 * Propagation runs once over Gp (replica-0 graph) in topological order.  A
 * value's lineage is "(Gs value sv) slice [lo, hi) (single coordinates),
 * parts [k0, k0 + cnt) of n", plus its per-replica shift (dlo, dk): replica d
 * holds slice lo + d*dlo and parts from k0 + d*dk, as the plan's affine
 * annotations do.  A special lineage "zero" stands for a value known to be 0
 * (a zero_grad scale), so that an accumulator's first addition copies its
 * addend.  Seeds are the annotated tensors' initial values and final
 * versions.  Each operator's rule (vd_lin_prop_rule, one row per registry
 * operator: the prop column of ops/ops.def) says how a node maps its
 * inputs' lineages to its outputs:
 *  - COPY: output = input (no single node needed: the output holds the same
 *    single value as the input);
 *  - MAP: the single node computing the same operator on the single values
 *    the inputs hold is found; the operator's reduction rule (ops/reduce.h)
 *    links input and output dimensions, so an output dimension takes the
 *    slice of a linked input dimension, a dimension held whole stays whole,
 *    and a sliced dimension that no output keeps (a contraction) makes the
 *    output a partial sum, its part index the slice's position.
 *    The single node reading exactly the named single values is preferred
 *    to one reading other copies of them (match_single's exact pass);
 *  - sums (sum_node): accumulate, multiref_backward or a two-input add of
 *    one slice of single values x1..xk is that slice of the single sum of
 *    the same multiset, whichever of the three operators computes it;
 *  - collectives: all_reduce makes partial sums whole, all_gather
 *    concatenates slices, reduce_scatter sums and slices, send/recv move.
 * Where propagation stops, guesses from consumers (guess_node,
 * guess_outputs, fanin_inputs) seed it again; each is only a candidate.
 * Where a rule cannot decide, the value has no lineage, and neither has
 * anything computed from it: its stage grows to the next lineage.
 *
 * Cost: passes are repeated (a backward node may precede its forward
 * partner; guesses seed new rounds), but each pass after the first visits
 * only the nodes that read a value decided since their last visit (the
 * worklist below: OPTIMIZATION-ONLY, the same lineages as full passes).
 * Only decided values get a lineage record (vl_slot).  Forward partners,
 * seeds' single tensors and the emission are found once, the first and the
 * last in parallel; the result does not depend on the thread count.
 *
 * SOUNDNESS: nothing here is trusted.  A candidate is written as an
 * annotation of the tensor's FINAL value only (tensors with an initial
 * value get none), so it becomes a stage target that must be proven before
 * anything may use it as a hypothesis (verifier/run.c drops candidates whose
 * proof fails and re-cuts; see docs/verifier.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lineage.h"

#include "../common/ctl.h"
#include "../common/mem.h"
#include "../ops/ops.h"
#include "../plans/idmap.h"

/* ---- the rule table ------------------------------------------------------ */

/* ops.def's prop column: PR(kind, partial-sum rule, bwd_pair). */
#define PR(kind, lin, bwd) {1, VD_PROP_##kind, VD_PLIN_##lin, bwd}
static const vd_lin_prop_rule rules[VD_OP__COUNT] = {
#define VD_OP(ID, name, min_in, max_in, min_out, max_out, flags, bwd, attrs, eqv, prop, ...) [VD_OP_##ID] = prop,
#include "../ops/ops.def"
#undef VD_OP
};
#undef PR

const vd_lin_prop_rule *vd_lin_prop_rule_of(int op) { return &rules[op]; }

/* ---- value lineages ---------------------------------------------------- */

typedef struct {
  uint8_t known, zero;
  int32_t sv; /* Gs value */
  int32_t nd; /* single ndim */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS], dlo[VD_MAX_DIMS];
  int64_t k0, cnt, n, dk; /* parts [k0 + d*dk, + cnt) of n */
  /* A split dim (a [b*s] flattening of a sequence-sliced [b, s]): when
   * split = j + 1, single dim j is read as [shape[j] / si, si] and the
   * value holds the box [lo[j], hi[j]) x [ilo, ihi) of that pair (replica
   * shifts dlo[j], dil), row-major, which is no slice of dim j.  Only MAP
   * (a dim linked to the split one keeps it) and views (which merge it or
   * take it apart again) accept such a value; it is never emitted. */
  int32_t split;
  int64_t si, ilo, ihi, dil;
  /* Propagated but never written as a candidate: the sum of a subset of a
   * gradient fan-in (a multiref_backward matched by name with fewer inputs
   * than the single one), and what copies or collectives make of it.  It
   * lets the node that completes the sum match; as a candidate it would
   * fail its proof and cost a round. */
  uint8_t noemit;
  uint8_t guess; /* guessed from a consumer (guess_node), not propagated */
  double f;               /* the value is f times the lineage's (1 for a candidate) */
  int32_t fsrc;           /* Gp node that last changed f (f != 1), else -1 */
  uint32_t uni;           /* dims along which the single value is constant (a broadcast):
                             there the slice's position is free */
} vlin;

typedef struct {
  const vd_graph_t *gs, *gp;
  const vd_plan_t *sp, *pp;
  /* Lineages of Gp values: vix[v] is 0 (unknown) or 1 + the record's index
   * in vchunk (chunks of VL_CHUNK records, allocated as values get their
   * first lineage, never moved): only the values that get one cost a
   * record, which is GBs less on large plans (vl_at, vl_slot, vl_put). */
  uint32_t *vix;
  vlin **vchunk;
  uint32_t n_rec;
  int oom;
  int stopped; /* a stop was requested (common/ctl.h): the sweeps end early, the result is dropped */
  uint8_t *seeded; /* per Gp value: an annotated initial or final value */
  int *pop;      /* per parallel plan node: vd_op_id */
  int *sop;      /* per single plan node */
  int32_t *fwd_of; /* per Gp node: forward partner Gp node or -1 (forward_partners) */
  uint32_t *byname; /* parallel plan nodes sorted by (rank, name) */
  int32_t *gfirst, *gnext; /* Gp nodes of each plan node, as a list */
  uint32_t *sroot, *rv_off, *rv; /* single copy roots (single_roots) */
  uint32_t *sbyname;             /* single plan nodes sorted by name */
  int32_t *sgfirst, *sgnext;     /* Gs nodes of each single plan node */
  /* The worklist (see sweep): per Gp node its topological position; the
   * backward nodes whose forward partner is each node (CSR); per Gp value
   * whether it is counted known; one bitset over topological positions per
   * kind of sweep (propagate, guess_node, guess_outputs). */
  uint32_t *tpos;
  uint32_t *rfw_off, *rfw;
  uint8_t *noted;
  size_t n_known;
  uint64_t *dirty[3];
  int factor_escapes; /* a factor does not cancel somewhere (factor_escapes): no candidate carries one */
} ictx;

#define VL_CHUNK ((size_t)1 << 16)

/* Every unknown value reads as this all-zero lineage (known = 0). */
static const vlin vl_unknown;

static const vlin *vl_at(const ictx *c, uint32_t v) {
  uint32_t r = c->vix[v];
  return r ? &c->vchunk[(r - 1) / VL_CHUNK][(r - 1) % VL_CHUNK] : &vl_unknown;
}

/* The record of v for writing, all zero when new; NULL (and c->oom) when
 * out of memory. */
static vlin *vl_slot(ictx *c, uint32_t v) {
  if (c->vix[v]) return (vlin *)vl_at(c, v);
  size_t k = c->n_rec / VL_CHUNK;
  if (!c->vchunk[k]) {
    size_t n = c->gp->n_values - k * VL_CHUNK; /* never more records than values */
    c->vchunk[k] = vd_malloc((n < VL_CHUNK ? n : VL_CHUNK) * sizeof(vlin));
    if (!c->vchunk[k]) {
      c->oom = 1;
      return NULL;
    }
  }
  vlin *l = &c->vchunk[k][c->n_rec % VL_CHUNK];
  memset(l, 0, sizeof(*l));
  c->vix[v] = ++c->n_rec;
  return l;
}

static void vl_put(ictx *c, uint32_t v, const vlin *l) {
  vlin *d = vl_slot(c, v);
  if (d) *d = *l;
}

static const vd_tensor_t *ptens(const ictx *c, uint32_t v) { return &c->pp->tensors[c->gp->values[v].tensor]; }
static const vd_tensor_t *stens(const ictx *c, int32_t sv) { return &c->sp->tensors[c->gs->values[sv].tensor]; }

/* Normalized part: parts [k0, k0+cnt) of n as part k of n/cnt.  0 if not aligned. */
static int norm_part(const vlin *l, int64_t *k, int64_t *n, int64_t *dk) {
  if (l->cnt < 1 || l->k0 % l->cnt || l->n % l->cnt || l->dk % l->cnt) return 0;
  *k = l->k0 / l->cnt;
  *n = l->n / l->cnt;
  *dk = l->dk / l->cnt;
  return 1;
}

/* Width of lineage l along single dim i (a split dim: the box's size). */
static int64_t lwidth(const vlin *l, int32_t i) {
  int64_t w = l->hi[i] - l->lo[i];
  return l->split == i + 1 ? w * (l->ihi - l->ilo) : w;
}

/* The parallel tensor of v holds its slice dimension by dimension (same
 * rank, widths equal to the shape), split dims allowed. */
static int aligned_any(const ictx *c, uint32_t v) {
  const vlin *l = vl_at(c, v);
  const vd_tensor_t *t = ptens(c, v);
  if (!l->known || l->zero || t->ndim != l->nd) return 0;
  for (int32_t i = 0; i < t->ndim; i++)
    if (lwidth(l, i) != t->shape[i]) return 0;
  return 1;
}

/* The same without split dims: the form every rule but MAP and views assumes. */
static int aligned(const ictx *c, uint32_t v) { return !vl_at(c, v)->split && aligned_any(c, v); }

/* The annotated tensors' values. */
static void seed(ictx *c, const vd_idmap_t *sid) {
  const vd_graph_t *gp = c->gp, *gs = c->gs;
  for (size_t ti = 0; ti < c->pp->n_tensors; ti++) {
    const vd_tensor_t *pt = &c->pp->tensors[ti];
    if (!pt->has_lin) continue;
    uint32_t s;
    if (!vd_idmap_get(sid, pt->lin.full, &s)) continue;
    const vd_tensor_t *st = &c->sp->tensors[s];
    if (st->ndim != pt->ndim) continue;
    int32_t smb = st->scope == VD_SCOPE_PER_MB ? 0 : -1;
    uint32_t per = pt->scope == VD_SCOPE_PER_MB ? gp->inst_per_replica[ti] : 1;
    for (uint32_t m = 0; m < per; m++) {
      int32_t mb = pt->scope == VD_SCOPE_PER_MB ? (int32_t)m : -1;
      int32_t vv[2] = {vd_graph_first(gp, (uint32_t)ti, 0, mb), vd_graph_last(gp, (uint32_t)ti, 0, mb)};
      int32_t ss[2] = {vd_graph_first(gs, (uint32_t)s, 0, smb), vd_graph_last(gs, (uint32_t)s, 0, smb)};
      for (int k = 0; k < 2; k++) {
        if (vv[k] < 0 || ss[k] < 0) continue;
        if (k == 0 && !(gp->values[vv[k]].is_initial && gs->values[ss[k]].is_initial)) continue;
        vlin *l = vl_slot(c, (uint32_t)vv[k]);
        if (!l) return;
        c->seeded[vv[k]] = 1;
        memset(l, 0, sizeof(*l));
        l->known = 1;
        l->f = 1.0;
        l->fsrc = -1;
        l->sv = ss[k];
        l->nd = st->ndim;
        vd_tensor_lineage_at(pt, 0, mb, l->lo, l->hi, &l->k0);
        for (int32_t i = 0; i < st->ndim; i++) l->dlo[i] = pt->lin.dp_shift[i];
        l->cnt = 1;
        l->n = pt->lin.part_n;
        l->dk = pt->lin.dp_part;
      }
    }
  }
}

/* ---- MAP: single node match and dimension links ------------------------ */

/* 1 when single nodes a and b have outputs of the same roots (equal values). */
static int same_outputs(const ictx *c, const vd_gnode_t *a, const vd_gnode_t *b) {
  const uint32_t *oa = vd_gnode_outputs(c->gs, a), *ob = vd_gnode_outputs(c->gs, b);
  for (uint32_t o = 0; o < a->n_out; o++)
    if (c->sroot[oa[o]] != c->sroot[ob[o]]) return 0;
  return 1;
}

/* Names equal up to their instance numbers ("#141" in an nnScaler block
 * name): a recomputed block (the backward of a checkpointed attention runs
 * its forward again) computes the same value from the same inputs as the
 * forward in both plans, under the block's own names. */
static int same_block_name(const char *a, const char *b) {
  for (;;) {
    if (*a == '#' && *b == '#') {
      a++, b++;
      while (*a >= '0' && *a <= '9') a++;
      while (*b >= '0' && *b <= '9') b++;
      continue;
    }
    if (*a != *b) return 0;
    if (!*a) return 1;
    a++, b++;
  }
}

/* The single node with operator op whose inputs are the single values the
 * parallel inputs hold; -1 if none or ambiguous (ties broken by name, then
 * by the name up to instance numbers).  Exact matches come first: a single
 * node reading exactly those single values is preferred to one reading
 * other copies of them (same copy root).  The single plan may copy one value
 * several times (nnScaler: multiref, `float` cast, multiref again), and the
 * two multirefs then read values of one root; naming the parallel output
 * after the multiref of the OTHER copy would give a candidate its stage
 * cannot prove (the stage's leaves are the named values, and it does not see
 * through the single copies outside it), dropped after a failed round. */
static int32_t match_single_in(const ictx *c, const vd_gnode_t *pn, int op, int partial) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  if (pn->n_in == 0) return -1;
  uint32_t first = pn->n_in;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    int has = vl_at(c, in[i])->known && vl_at(c, in[i])->sv >= 0;
    if (!has && !partial) return -1;
    if (has && first == pn->n_in) first = i;
  }
  if (first == pn->n_in) return -1;
  const char *pname = vd_plan_s(c->pp, c->pp->nodes[pn->pnode].name);
  /* Pass 0: consumers of the exact single value; pass 1: copies (multiref,
   * identity) are seen through on the single side, since the parallel plan
   * may fan a value out differently. */
  for (int exact = 1; exact >= 0; exact--) {
    uint32_t sv = (uint32_t)vl_at(c, in[first])->sv, root = c->sroot[sv];
    uint32_t q0 = exact ? 0 : c->rv_off[root], q1 = exact ? 1 : c->rv_off[root + 1];
    int32_t found = -1, n_found = 0, named = -1, block = -1, n_block = 0;
    for (uint32_t q = q0; q < q1; q++) {
      const vd_value_t *sv0 = &c->gs->values[exact ? sv : c->rv[q]];
      const uint32_t *cons = vd_value_consumers(c->gs, sv0);
      for (uint32_t k = 0; k < sv0->n_cons; k++) {
        const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
        if (c->sop[sn->pnode] != op || sn->n_in != pn->n_in || sn->n_out != pn->n_out) continue;
        const uint32_t *sin = vd_gnode_inputs(c->gs, sn);
        int ok = 1;
        for (uint32_t i = 0; i < pn->n_in && ok; i++) {
          const vlin *x = vl_at(c, in[i]);
          if (partial && (!x->known || x->sv < 0)) continue;
          ok = exact ? sin[i] == (uint32_t)x->sv : c->sroot[sin[i]] == c->sroot[x->sv];
        }
        if (!ok || (int32_t)cons[k] == found) continue;
        if (found >= 0 && same_outputs(c, &c->gs->nodes[found], sn)) continue; /* one value, computed twice */
        found = (int32_t)cons[k];
        n_found++;
        const char *sname = vd_plan_s(c->sp, c->sp->nodes[sn->pnode].name);
        if (strcmp(sname, pname) == 0) named = found;
        if (same_block_name(sname, pname)) block = found, n_block++;
      }
    }
    if (n_found == 1) return found;
    if (named >= 0) return named;
    if (n_block == 1) return block;
    /* none or ambiguous among exact matches: the copies decide as before */
  }
  return -1;
}

static int32_t match_single(const ictx *c, const vd_gnode_t *pn, int op) { return match_single_in(c, pn, op, 0); }

/* The single node with operator op and the same source name, when exactly
 * one exists (sbyname: single plan nodes sorted by name).  The fallback
 * for a gradient sum whose parallel fan-in differs from the single one
 * (a multiref_backward over an extra TP-entry branch): its inputs are then
 * not the single node's, but the candidate it yields is proven like any. */
static int32_t match_by_name(const ictx *c, const vd_gnode_t *pn, int op) {
  const char *name = vd_plan_s(c->pp, c->pp->nodes[pn->pnode].name);
  if (!*name) return -1;
  size_t lo = 0, hi = c->sp->n_nodes;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (strcmp(vd_plan_s(c->sp, c->sp->nodes[c->sbyname[mid]].name), name) < 0) lo = mid + 1;
    else hi = mid;
  }
  int32_t found = -1, n_found = 0;
  for (; lo < c->sp->n_nodes && !strcmp(vd_plan_s(c->sp, c->sp->nodes[c->sbyname[lo]].name), name); lo++) {
    uint32_t p = c->sbyname[lo];
    if (c->sop[p] != op) continue;
    for (int32_t g = c->sgfirst[p]; g >= 0; g = c->sgnext[g]) {
      found = g;
      n_found++;
    }
  }
  return n_found == 1 ? found : -1;
}

/* Copy roots of the single graph: a value produced by identity,
 * contiguous, cast or multiref has its input's root.  rv lists the values
 * of each root (counting sort), so match_single finds every consumer of a
 * copy. */
static vd_rc single_roots(ictx *c, vd_diag *d) {
  const vd_graph_t *gs = c->gs;
  size_t nv = gs->n_values;
  c->sroot = vd_calloc(nv ? nv : 1, sizeof(*c->sroot));
  c->rv_off = vd_calloc(nv + 1, sizeof(*c->rv_off));
  c->rv = vd_calloc(nv ? nv : 1, sizeof(*c->rv));
  if (!c->sroot || !c->rv_off || !c->rv) return VD_OOM(d);
  for (size_t v = 0; v < nv; v++) c->sroot[v] = (uint32_t)v;
  for (size_t t = 0; t < gs->n_nodes; t++) {
    const vd_gnode_t *n = &gs->nodes[gs->topo[t]];
    int op = c->sop[n->pnode];
    if (op < 0 || rules[op].kind != VD_PROP_COPY || n->n_part || n->n_in != 1) continue;
    const uint32_t *in = vd_gnode_inputs(gs, n), *out = vd_gnode_outputs(gs, n);
    for (uint32_t o = 0; o < n->n_out; o++) c->sroot[out[o]] = c->sroot[in[0]];
  }
  for (size_t v = 0; v < nv; v++) c->rv_off[c->sroot[v] + 1]++;
  for (size_t v = 0; v < nv; v++) c->rv_off[v + 1] += c->rv_off[v];
  uint32_t *fill = vd_calloc(nv ? nv : 1, sizeof(*fill));
  if (!fill) return VD_OOM(d);
  for (size_t v = 0; v < nv; v++) c->rv[c->rv_off[c->sroot[v]] + fill[c->sroot[v]]++] = (uint32_t)v;
  vd_free(fill);
  return VD_OK;
}

/* Union-find over the operand dimensions of one call. */
#define MAXOPD 16
typedef struct {
  int n_in, n_out;
  int par[2 * MAXOPD * VD_MAX_DIMS];
} dsu;

static int dix(const dsu *u, int out, int t, int dim) { return ((out ? u->n_in : 0) + t) * VD_MAX_DIMS + dim; }
static int dfind(dsu *u, int x) {
  while (u->par[x] != x) x = u->par[x] = u->par[u->par[x]];
  return x;
}

static vd_rc link_dims(void *sink, const vd_op_red *r) {
  dsu *u = sink;
  if (r->kind != VD_RED_EQ || r->num == 0 || r->num != r->den) return VD_OK;
  if (r->a.dim >= VD_MAX_DIMS || r->b.dim >= VD_MAX_DIMS) return VD_OK;
  int a = dfind(u, dix(u, r->a.out, r->a.t, r->a.dim)), b = dfind(u, dix(u, r->b.out, r->b.t, r->b.dim));
  u->par[a] = b;
  return VD_OK;
}

/* Plan nodes sorted by name (single plan), by (rank, name) (parallel plan:
 * c->byname, for forward_partners). */
static int cmp_sname(const void *a, const void *b, void *arg) {
  const vd_plan_t *sp = arg;
  int r = strcmp(vd_plan_s(sp, sp->nodes[*(const uint32_t *)a].name), vd_plan_s(sp, sp->nodes[*(const uint32_t *)b].name));
  if (r) return r;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int cmp_byname(const void *a, const void *b, void *arg) {
  const vd_plan_t *sort_plan = arg;
  const vd_node_t *x = &sort_plan->nodes[*(const uint32_t *)a], *y = &sort_plan->nodes[*(const uint32_t *)b];
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  int r = strcmp(vd_plan_s(sort_plan, x->name), vd_plan_s(sort_plan, y->name));
  if (r) return r;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* The forward partners of the Gp instances of backward plan node q (its
 * operator op), into fwd_of: per instance, the one Gp node of the same
 * microbatch among the instances of the plan nodes of q's rank, name and
 * layer whose operator's backward is op, else -1.  They depend on names
 * and ranks only, so they are found once (the candidates once per plan
 * node, not per microbatch instance), in parallel: each q writes only its
 * own instances' entries. */
static void forward_partners(ictx *c, uint32_t q, int op) {
  const vd_node_t *nd = &c->pp->nodes[q];
  const char *name = vd_plan_s(c->pp, nd->name);
  /* lower bound of (rank, name) */
  size_t lo = 0, hi = c->pp->n_nodes;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const vd_node_t *m = &c->pp->nodes[c->byname[mid]];
    int r = m->rank != nd->rank ? (m->rank < nd->rank ? -1 : 1) : strcmp(vd_plan_s(c->pp, m->name), name);
    if (r < 0) lo = mid + 1;
    else hi = mid;
  }
  for (int32_t gi = c->gfirst[q]; gi >= 0; gi = c->gnext[gi]) {
    int32_t best = -1, n_best = 0, mb = c->gp->nodes[gi].mb;
    for (size_t i = lo; i < c->pp->n_nodes; i++) {
      uint32_t p = c->byname[i];
      const vd_node_t *fd = &c->pp->nodes[p];
      if (fd->rank != nd->rank || strcmp(vd_plan_s(c->pp, fd->name), name)) break;
      if (c->pop[p] < 0 || vd_op_backward((vd_op_id)c->pop[p]) != op || fd->layer != nd->layer) continue;
      for (int32_t g = c->gfirst[p]; g >= 0; g = c->gnext[g])
        if (c->gp->nodes[g].mb == mb) {
          best = g;
          n_best++;
        }
    }
    c->fwd_of[gi] = n_best == 1 ? best : -1;
  }
}

/* Forward partner of backward node gi: the parallel node of the same name,
 * rank, layer and microbatch whose operator's backward is gi's; -1 if none
 * or ambiguous (forward_partners). */
static int32_t forward_partner(const ictx *c, uint32_t gi) { return c->fwd_of[gi]; }

/* 1 when node nd (operator op) multiplies its one input by a constant:
 * scale (factor), mul by a scalar, div by a scalar (1/scalar); *s is it. */
static int scaling(const vd_plan_t *p, const vd_node_t *nd, int op, double *s) {
  if (nd->n_in != 1) return 0;
  if (op == VD_OP_SCALE) {
    *s = vd_node_attr_float(p, nd, "factor", 1.0);
    return 1;
  }
  if ((op != VD_OP_MUL && op != VD_OP_DIV) || !vd_node_attr(p, nd, "scalar")) return 0;
  double v = vd_node_attr_float(p, nd, "scalar", 1.0);
  if (op == VD_OP_DIV) {
    if (v == 0.0) return 0;
    v = 1.0 / v;
  }
  *s = v;
  return 1;
}

/* 1 when node nd adds (or subtracts) a nonzero scalar: x + c is neither
 * linear in x (parts, factors) nor the identity (python's sum() starts
 * with 0 + x, which is). */
static int adds_constant(const vd_plan_t *p, const vd_node_t *nd, int op) {
  return (op == VD_OP_ADD || op == VD_OP_SUB) && vd_node_attr(p, nd, "scalar") &&
         vd_node_attr_float(p, nd, "scalar", 0.0) != 0.0;
}

/* Whether output o of a MAP node reads input i (lin OTHER, CONST, PAIRED). */
static int reads(const vd_lin_prop_rule *ru, uint32_t o, uint32_t i) {
  switch (ru->lin) {
  case VD_PLIN_OTHER: return i != o;
  case VD_PLIN_CONST: return 0;
  case VD_PLIN_PAIRED: return i == 2 || (i < 2 ? i : i - 1) % 2 == o;
  default: return 1;
  }
}

/* The part that the partial inputs of a MAP node give output o (k of n,
 * replica shift dk); 0 when the rule admits no such combination. */
static int input_parts(const ictx *c, const vd_gnode_t *pn, const vd_lin_prop_rule *ru, uint32_t o, int64_t *pk,
                       int64_t *pnn, int64_t *pdk) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  int n_partial = 0;
  uint32_t n_read = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (!reads(ru, o, i)) continue;
    n_read++;
    int64_t k, n, dk;
    if (!norm_part(vl_at(c, in[i]), &k, &n, &dk)) return 0;
    if (n == 1) continue;
    if (ru->lin == VD_PLIN_NONE || ru->lin == VD_PLIN_SEP || ru->lin == VD_PLIN_PAIRED) return 0;
    /* the parts of x + c do not sum to x + c */
    if (adds_constant(c->pp, &c->pp->nodes[pn->pnode], c->pop[pn->pnode])) return 0;
    if (n_partial && (ru->lin != VD_PLIN_SUM || k != *pk || n != *pnn || dk != *pdk)) return 0;
    *pk = k, *pnn = n, *pdk = dk;
    n_partial++;
  }
  return !(ru->lin == VD_PLIN_SUM && n_partial && (uint32_t)n_partial != n_read);
}

/* Factor of the output of node pn (operator op, rule ru, single twin sn)
 * from its inputs' factors; 0 when it has none (the value is not a multiple
 * of the twin's).  A linear rule passes factors (SUM: all equal; MULTI:
 * their product, for one output); a constant scaling contributes the ratio
 * of its constant to the twin's (the program that divides the loss by the
 * microbatch count where the single one does not, or scales a mean over a
 * microbatch's tokens). */
static int out_factor(const ictx *c, const vd_gnode_t *pn, const vd_gnode_t *sn, int op, const vd_lin_prop_rule *ru,
                      uint32_t o, double *fo) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  double f = 1.0, sp, ss;
  if (scaling(c->pp, nd, op, &sp)) {
    /* x * s (div by a scalar too, whose rule is NONE for its 2-input form) */
    if (!scaling(c->sp, &c->sp->nodes[sn->pnode], op, &ss)) return 0;
    if (ss == 0.0) {
      if (sp != 0.0) return 0;
      *fo = vl_at(c, in[0])->f;
    } else {
      *fo = vl_at(c, in[0])->f * sp / ss;
    }
    return 1;
  }
  int all_one = 1;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (!reads(ru, o, i)) continue;
    double fi = vl_at(c, in[i])->f;
    all_one &= fi == 1.0;
    if (ru->lin == VD_PLIN_SUM) {
      if (i == 0) f = fi;
      else if (fi != f) return 0;
    } else {
      f *= fi;
    }
  }
  if (!all_one && ru->lin == VD_PLIN_NONE && vd_op_has((vd_op_id)op, VD_OPF_BACKWARD) &&
      op != VD_OP_APPLY_ROTARY_EMB_BACKWARD) {
    /* A backward operator is linear in the incoming gradient (its last
     * input; a vector-Jacobian product): the factor of g passes when the
     * saved forward values have none. */
    for (uint32_t i = 0; i + 1 < pn->n_in; i++)
      if (reads(ru, o, i) && vl_at(c, in[i])->f != 1.0) return 0;
    f = vl_at(c, in[pn->n_in - 1])->f;
    all_one = 1;
  }
  if (!all_one && (ru->lin == VD_PLIN_NONE || ru->lin == VD_PLIN_SEP || ru->lin == VD_PLIN_PAIRED ||
                   (ru->lin == VD_PLIN_MULTI && pn->n_out != 1)))
    return 0;
  /* x + c is not a multiple of anything: add/sub of a scalar needs factor 1 */
  if (adds_constant(c->pp, nd, op) && !all_one) return 0;
  *fo = f;
  return 1;
}

/* Dimension links of node pn (operator op) from its reduction rule, on the
 * parallel shapes; 0 when the operator has none or the node is too wide. */
static int node_links(const ictx *c, const vd_gnode_t *pn, int op, dsu *u) {
  if (pn->n_in + pn->n_out > MAXOPD) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  u->n_in = (int)pn->n_in;
  u->n_out = (int)pn->n_out;
  for (int i = 0; i < 2 * MAXOPD * VD_MAX_DIMS; i++) u->par[i] = i;
  vd_op_shape ish[MAXOPD], osh[MAXOPD];
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vd_tensor_t *t = ptens(c, in[i]);
    ish[i].ndim = t->ndim;
    memcpy(ish[i].d, t->shape, sizeof(ish[i].d));
  }
  for (uint32_t i = 0; i < pn->n_out; i++) {
    const vd_tensor_t *t = ptens(c, out[i]);
    osh[i].ndim = t->ndim;
    memcpy(osh[i].d, t->shape, sizeof(osh[i].d));
  }
  vd_op_reduce_call rc = {.op = op, .plan = c->pp, .node = &c->pp->nodes[pn->pnode], .n_in = pn->n_in,
                          .n_out = pn->n_out, .in_shape = ish, .out_shape = osh, .emit = link_dims, .sink = u};
  int norule = 0;
  return vd_op_reduce_rule((vd_op_id)op)(&rc, &norule) == VD_OK && !norule;
}

static void map_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in + pn->n_out > MAXOPD) return;
  int32_t sm = match_single(c, pn, op);
  int subset = 0;
  if (sm < 0 && op == VD_OP_MULTIREF_BACKWARD) {
    sm = match_by_name(c, pn, op);
    const uint32_t *pin = vd_gnode_inputs(c->gp, pn);
    subset = sm >= 0 && c->gs->nodes[sm].n_in > pn->n_in;
    for (uint32_t i = 0; i < pn->n_in && subset; i++) subset = !vl_at(c, pin[i])->noemit;
  }
  if (sm < 0) return;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  const uint32_t *sout = vd_gnode_outputs(c->gs, sn);
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned_any(c, in[i])) return;
  dsu u;
  if (!node_links(c, pn, op, &u)) return;
  int32_t fw = ru->bwd_pair ? forward_partner(c, gi) : -1;
  for (uint32_t o = 0; o < pn->n_out; o++) {
    const vd_tensor_t *pt = ptens(c, out[o]);
    const vd_tensor_t *st = stens(c, (int32_t)sout[o]);
    if (st->ndim != pt->ndim) continue;
    /* Parts of the inputs output o reads. */
    int64_t pk = 0, pnn = 1, pdk = 0;
    if (!input_parts(c, pn, ru, o, &pk, &pnn, &pdk)) continue;
    double fo;
    if (!out_factor(c, pn, sn, op, ru, o, &fo)) continue;
    vlin l;
    memset(&l, 0, sizeof(l));
    l.known = 1;
    l.f = fo;
    l.fsrc = -1;
    if (fo != 1.0) {
      /* from a read input with that factor, else this node changed it */
      l.fsrc = (int32_t)gi;
      for (uint32_t i = 0; i < pn->n_in; i++)
        if (reads(ru, o, i) && vl_at(c, in[i])->f == fo && vl_at(c, in[i])->fsrc >= 0) {
          l.fsrc = vl_at(c, in[i])->fsrc;
          break;
        }
    }
    l.sv = (int32_t)sout[o];
    l.nd = st->ndim;
    int ok = 1;
    uint8_t cls_used[2 * MAXOPD * VD_MAX_DIMS];
    memset(cls_used, 0, sizeof(cls_used));
    for (int32_t j = 0; j < pt->ndim && ok; j++) {
      int cj = dfind(&u, dix(&u, 1, (int)o, j));
      cls_used[cj] = 1;
      /* The input dims linked to j: a slice from one that is not uniform
       * (a broadcast) wins; j is uniform when every linked dim is. */
      const vlin *from = NULL;
      int32_t fk = 0;
      int n_link = 0, n_uni = 0;
      for (uint32_t i = 0; i < pn->n_in; i++) {
        const vlin *x = vl_at(c, in[i]);
        for (int32_t k = 0; k < x->nd; k++) {
          if (dfind(&u, dix(&u, 0, (int)i, k)) != cj) continue;
          const vd_tensor_t *xs = stens(c, x->sv);
          if (xs->shape[k] != st->shape[j]) continue;
          n_link++;
          int un = (x->uni >> k) & 1;
          n_uni += un;
          if (lwidth(x, k) != pt->shape[j]) continue;
          if (!from || (((from->uni >> fk) & 1) && !un)) from = x, fk = k;
        }
      }
      if (n_link && n_link == n_uni) l.uni |= 1u << j;
      if (pt->shape[j] == st->shape[j]) {
        l.lo[j] = 0, l.hi[j] = st->shape[j];
        continue;
      }
      int done = 0;
      for (uint32_t i = 0; i < pn->n_in && !done; i++) {
        const vlin *x = vl_at(c, in[i]);
        for (int32_t k = 0; k < x->nd && !done; k++) {
          if (dfind(&u, dix(&u, 0, (int)i, k)) != cj) continue;
          const vd_tensor_t *xs = stens(c, x->sv);
          if (xs->shape[k] != st->shape[j] || lwidth(x, k) != pt->shape[j]) continue;
          if (x->split == k + 1 && l.split) continue; /* one split dim per value */
          if (from && x != from && (x->uni >> k) & 1) continue; /* a broadcast dim gives way */
          l.lo[j] = x->lo[k], l.hi[j] = x->hi[k], l.dlo[j] = x->dlo[k];
          if (x->split == k + 1) l.split = j + 1, l.si = x->si, l.ilo = x->ilo, l.ihi = x->ihi, l.dil = x->dil;
          done = 1;
        }
      }
      /* the forward input this output is the gradient of: input o when its
       * single shape is the output's, else the first input that has it
       * (embedding_backward's table is input 1) */
      for (uint32_t q = 0; !done && fw >= 0 && q <= c->gp->nodes[fw].n_in; q++) {
        uint32_t fi = q == 0 ? o : q - 1;
        if (fi >= c->gp->nodes[fw].n_in || (q > 0 && fi == o)) continue;
        const vlin *x = vl_at(c, vd_gnode_inputs(c->gp, &c->gp->nodes[fw])[fi]);
        if (!x->known || x->zero || x->split == j + 1 || x->nd != st->ndim) continue;
        const vd_tensor_t *xs = stens(c, x->sv);
        int same = 1;
        for (int32_t e = 0; e < st->ndim; e++) same &= xs->shape[e] == st->shape[e];
        if (same && x->hi[j] - x->lo[j] == pt->shape[j]) {
          l.lo[j] = x->lo[j], l.hi[j] = x->hi[j], l.dlo[j] = x->dlo[j];
          done = 1;
        }
      }
      if (!done && !n_link && op == VD_OP_EXPAND) {
        /* a broadcast dim: every slice of it holds the same values */
        l.lo[j] = 0, l.hi[j] = pt->shape[j];
        l.uni |= 1u << j;
        done = 1;
      }
      ok = done;
    }
    if (!ok) continue;
    /* Contractions: a sliced input dimension that no output dimension keeps
     * makes the output a partial sum over its slices (linear operators only). */
    int64_t k = pk, n = pnn, dk = pdk;
    for (uint32_t i = 0; i < pn->n_in && ok; i++) {
      if (!reads(ru, o, i)) continue;
      const vlin *x = vl_at(c, in[i]);
      const vd_tensor_t *xs = stens(c, x->sv);
      for (int32_t kd = 0; kd < x->nd && ok; kd++) {
        int ck = dfind(&u, dix(&u, 0, (int)i, kd));
        int64_t w = x->hi[kd] - x->lo[kd];
        if (!cls_used[ck] && x->split == kd + 1) { /* a split dim contracted: no part form */
          ok = 0;
          break;
        }
        if (cls_used[ck] || w == xs->shape[kd]) continue;
        cls_used[ck] = 1; /* one contraction per class (x.b and dy.b sliced alike) */
        if (ru->lin == VD_PLIN_NONE || ru->lin == VD_PLIN_PAIRED || w <= 0 || xs->shape[kd] % w || x->lo[kd] % w ||
            x->dlo[kd] % w || ((x->uni >> kd) & 1)) {
          ok = 0;
          break;
        }
        int64_t m = xs->shape[kd] / w;
        k = k * m + x->lo[kd] / w;
        dk = dk * m + x->dlo[kd] / w;
        n = n * m;
      }
    }
    if (!ok) continue;
    l.k0 = k, l.cnt = 1, l.n = n, l.dk = dk;
    l.noemit = (uint8_t)subset;
    vl_put(c, out[o], &l);
  }
}

/* ---- guesses from a consumer -------------------------------------------- */

/* The producer of Gp value v and of Gs value sv are nodes of the same name
 * and operator (the backward of one forward view, say). */
static int same_producer(const ictx *c, uint32_t v, uint32_t sv) {
  int32_t p = c->gp->values[v].producer, q = c->gs->values[sv].producer;
  if (p < 0 || q < 0) return 0;
  const vd_node_t *a = &c->pp->nodes[c->gp->nodes[p].pnode], *b = &c->sp->nodes[c->gs->nodes[q].pnode];
  return c->pop[c->gp->nodes[p].pnode] == c->sop[c->gs->nodes[q].pnode] &&
         !strcmp(vd_plan_s(c->pp, a->name), vd_plan_s(c->sp, b->name));
}

/* The single inputs of gradient sum sn (a multiref_backward of the parallel
 * node's name) that parallel multiref_backward pn's inputs stand for, when
 * the parallel fan-in is split differently (tensor parallelism sums the
 * branches inside the TP region first, then all-reduces, then adds the rest:
 * fewer inputs than the single node).  Each known input takes a distinct
 * single input holding its value (exact, else the same copy root); each
 * undecided input the one remaining single input whose producer has its
 * producer's name and operator (the backward of the same forward node).
 * sin[i] is input i's; 0 when some input has none or more than one.  A
 * naming heuristic only: the guess it feeds is a candidate like any other. */
static int fanin_inputs(const ictx *c, const vd_gnode_t *pn, const vd_gnode_t *sn, uint32_t *sin) {
  if (pn->n_in > MAXOPD || sn->n_in > 4 * MAXOPD || sn->n_in < pn->n_in) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *s_in = vd_gnode_inputs(c->gs, sn);
  uint8_t used[4 * MAXOPD], placed[MAXOPD];
  memset(used, 0, sizeof(used));
  memset(placed, 0, sizeof(placed));
  for (int exact = 1; exact >= 0; exact--)
    for (uint32_t i = 0; i < pn->n_in; i++) {
      const vlin *x = vl_at(c, in[i]);
      if (!x->known || placed[i]) continue;
      for (uint32_t j = 0; j < sn->n_in && !placed[i]; j++) {
        if (used[j] || (exact ? s_in[j] != (uint32_t)x->sv : c->sroot[s_in[j]] != c->sroot[x->sv])) continue;
        used[j] = placed[i] = 1;
        sin[i] = s_in[j];
      }
    }
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (vl_at(c, in[i])->known) {
      if (!placed[i]) return 0;
      continue;
    }
    int32_t pick = -1, n_pick = 0;
    for (uint32_t j = 0; j < sn->n_in; j++)
      if (!used[j] && same_producer(c, in[i], s_in[j])) pick = (int32_t)j, n_pick++;
    if (n_pick != 1) return 0;
    used[pick] = 1;
    sin[i] = s_in[pick];
  }
  return 1;
}


/* A value that propagation left undecided (its producers have no rule that
 * decides it: the expert-parallel dispatch, whose unsqueeze, expand,
 * all_to_all and view chain has no single twin) gets a GUESS from one of
 * its consumers: a MAP or ACCUM node whose other inputs are known and that
 * matches a single node on them (the residual add of the routed MoE output
 * and the shared expert's, the gradient sum of a normalised input, the
 * grouped expert MLP on annotated expert weights).  The undecided input is
 * then taken to hold the single node's corresponding input, sliced like
 * the known inputs along the dimensions the operator links, whole where
 * its parallel width is the single one; under a SUM rule it is the same
 * part as the known inputs.  SOUNDNESS: nothing follows from the guess
 * but a candidate (a stage target, proven or dropped like any other); it
 * only splits the undecided region into stages that end at it.  Returns
 * the number of values guessed. */
static int guess_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in < 2) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  int n_known = 0, n_open = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (x->known && (x->zero || x->sv < 0 || x->split)) return 0;
    if (x->known) {
      n_known++;
      continue;
    }
    const vd_value_t *v = &c->gp->values[in[i]];
    if (c->seeded[in[i]] || v->is_initial || v->producer < 0) return 0;
    /* only values a reshaping or a collective produced (the dispatch and
     * combine chains): where a computing operator's rule stopped, its
     * stage decides better than a guess (nnScaler's written-out norms
     * would otherwise get a guess per gradient, doubling the stages) */
    int pop = c->pop[c->gp->nodes[v->producer].pnode];
    if (pop < 0 || rules[pop].kind == VD_PROP_MAP || rules[pop].kind == VD_PROP_ACCUM ||
        rules[pop].kind == VD_PROP_SCALE)
      return 0;
    n_open++;
  }
  if (!n_known || !n_open) return 0;
  int32_t sm = match_single_in(c, pn, op, 1);
  uint32_t sin[MAXOPD];
  if (sm >= 0) {
    if (pn->n_in > MAXOPD) return 0;
    memcpy(sin, vd_gnode_inputs(c->gs, &c->gs->nodes[sm]), pn->n_in * sizeof(*sin));
  } else if (op == VD_OP_MULTIREF_BACKWARD) {
    sm = match_by_name(c, pn, op);
    if (sm < 0 || !fanin_inputs(c, pn, &c->gs->nodes[sm], sin)) return 0;
  } else {
    return 0;
  }
  dsu u;
  if (!node_links(c, pn, op, &u)) return 0;
  /* the part the known inputs are (a SUM rule adds parts of one slice) */
  int64_t k = 0, n = 1, dk = 0;
  if (ru->lin == VD_PLIN_SUM) {
    int first = 1;
    for (uint32_t i = 0; i < pn->n_in; i++) {
      if (!vl_at(c, in[i])->known) continue;
      int64_t ki, ni, dki;
      if (!norm_part(vl_at(c, in[i]), &ki, &ni, &dki)) return 0;
      if (!first && (ki != k || ni != n || dki != dk)) return 0;
      k = ki, n = ni, dk = dki, first = 0;
    }
  }
  int guessed = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (vl_at(c, in[i])->known) continue;
    const vd_tensor_t *pt = ptens(c, in[i]), *st = stens(c, (int32_t)sin[i]);
    if (pt->ndim != st->ndim) continue;
    vlin l;
    memset(&l, 0, sizeof(l));
    l.known = 1, l.guess = 1;
    l.sv = (int32_t)sin[i];
    l.nd = st->ndim;
    l.f = 1.0, l.fsrc = -1;
    l.k0 = k, l.cnt = 1, l.n = n, l.dk = dk;
    int ok = 1;
    for (int32_t j = 0; j < pt->ndim && ok; j++) {
      l.lo[j] = 0, l.hi[j] = st->shape[j];
      if (pt->shape[j] == st->shape[j]) continue;
      int cj = dfind(&u, dix(&u, 0, (int)i, j)), done = 0;
      for (uint32_t i2 = 0; i2 < pn->n_in && !done; i2++) {
        const vlin *x = vl_at(c, in[i2]);
        if (!x->known) continue;
        for (int32_t k2 = 0; k2 < x->nd && !done; k2++) {
          if (dfind(&u, dix(&u, 0, (int)i2, k2)) != cj || stens(c, x->sv)->shape[k2] != st->shape[j] ||
              x->hi[k2] - x->lo[k2] != pt->shape[j])
            continue;
          l.lo[j] = x->lo[k2], l.hi[j] = x->hi[k2], l.dlo[j] = x->dlo[k2];
          done = 1;
        }
      }
      ok = done;
    }
    if (!ok) continue;
    vl_put(c, in[i], &l);
    guessed++;
  }
  return guessed;
}

/* The other guess: a MAP or ACCUM node whose inputs all have lineages but
 * whose rule cannot combine them (a partial sum or a constant factor where
 * the operator needs the whole value: a missing reduction or a wrong scale
 * upstream, or a legitimate rule gap) is guessed to compute its single
 * twin's output, whole and unscaled, sliced along the linked dimensions like
 * its inputs.  When the inputs are wrong, the guess fails its proof in a
 * stage as small as the node, instead of leaving the rest of the model to
 * one stage (the bug is then reported at the first annotated value after
 * it, docs/bugs.md); when the rule was only too weak, the guess is right.
 * SOUNDNESS as for guess_node: a candidate only. */
static int guess_outputs(ictx *c, uint32_t gi, int op) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in == 0 || pn->n_out == 0) return 0;
  /* forward computation only: partial sums and factors legitimately meet
   * in the backward and the optimizer (a gradient norm adds the squared
   * norms of sharded and replicated gradients), where a guess would only
   * fail and cost a round */
  if (c->pp->nodes[pn->pnode].phase != VD_PHASE_FWD || vd_op_has((vd_op_id)op, VD_OPF_BACKWARD)) return 0;
  int odd = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (!x->known || x->zero || x->sv < 0 || x->split || x->noemit) return 0;
    int64_t k, n, dk;
    if (!norm_part(x, &k, &n, &dk)) return 0;
    odd |= n > 1 || x->f != 1.0;
  }
  if (!odd) return 0; /* only partial sums and factors: other gaps stay gaps */
  for (uint32_t o = 0; o < pn->n_out; o++)
    if (vl_at(c, out[o])->known || c->seeded[out[o]]) return 0;
  int32_t sm = match_single(c, pn, op);
  if (sm < 0) return 0;
  dsu u;
  if (!node_links(c, pn, op, &u)) return 0;
  const uint32_t *sout = vd_gnode_outputs(c->gs, &c->gs->nodes[sm]);
  int guessed = 0;
  for (uint32_t o = 0; o < pn->n_out; o++) {
    const vd_tensor_t *pt = ptens(c, out[o]), *st = stens(c, (int32_t)sout[o]);
    if (pt->ndim != st->ndim) continue;
    vlin l;
    memset(&l, 0, sizeof(l));
    l.known = 1, l.guess = 1;
    l.sv = (int32_t)sout[o];
    l.nd = st->ndim;
    l.f = 1.0, l.fsrc = -1;
    l.k0 = 0, l.cnt = 1, l.n = 1, l.dk = 0;
    int ok = 1;
    for (int32_t j = 0; j < pt->ndim && ok; j++) {
      l.lo[j] = 0, l.hi[j] = st->shape[j];
      if (pt->shape[j] == st->shape[j]) continue;
      int cj = dfind(&u, dix(&u, 1, (int)o, j)), done = 0;
      for (uint32_t i = 0; i < pn->n_in && !done; i++) {
        const vlin *x = vl_at(c, in[i]);
        for (int32_t k2 = 0; k2 < x->nd && !done; k2++) {
          if (dfind(&u, dix(&u, 0, (int)i, k2)) != cj || stens(c, x->sv)->shape[k2] != st->shape[j] ||
              x->hi[k2] - x->lo[k2] != pt->shape[j] || ((x->uni >> k2) & 1))
            continue;
          l.lo[j] = x->lo[k2], l.hi[j] = x->hi[k2], l.dlo[j] = x->dlo[k2];
          done = 1;
        }
      }
      ok = done;
    }
    if (!ok) continue;
    vl_put(c, out[o], &l);
    guessed++;
  }
  return guessed;
}



/* ---- view / reshape ------------------------------------------------------ */

typedef struct {
  vd_op_red g[VD_MAX_DIMS];
  int n;
} vgroups;

static vd_rc view_group(void *sink, const vd_op_red *r) {
  vgroups *v = sink;
  if (v->n >= VD_MAX_DIMS) return VD_OK;
  if (r->kind == VD_RED_EQ) {
    vd_op_red e = *r;
    e.kind = VD_RED_PROD;
    e.na = e.nb = 1;
    v->g[v->n++] = e;
  } else if (r->kind == VD_RED_PROD) {
    v->g[v->n++] = *r;
  }
  return VD_OK;
}

/* A view maps single coordinates to single coordinates.  The single node's
 * reshape groups (a run of input dims whose product is a run of output
 * dims, from the reduction rule on the SINGLE shapes) carry a box to a box
 * when, in each group, every dim but the first is held whole on the input
 * side, and the flat range then splits into a slice of the first output dim
 * times whole inner dims.  Dims of size 1 are outside every group. */
static void view_node(ictx *c, uint32_t gi, int op) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in != 1 || pn->n_out != 1) return;
  int32_t sm = match_single(c, pn, op);
  uint32_t in = vd_gnode_inputs(c->gp, pn)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  if (sm < 0 || !aligned_any(c, in)) return;
  const vlin *x = vl_at(c, in);
  int32_t so = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[sm])[0];
  const vd_tensor_t *xs = stens(c, x->sv), *ys = stens(c, so), *pt = ptens(c, out);
  if (ys->ndim != pt->ndim) return;
  vd_op_shape ish, osh;
  ish.ndim = xs->ndim;
  memcpy(ish.d, xs->shape, sizeof(ish.d));
  osh.ndim = ys->ndim;
  memcpy(osh.d, ys->shape, sizeof(osh.d));
  vgroups v;
  v.n = 0;
  vd_op_reduce_call rc = {.op = op, .plan = c->sp, .node = &c->sp->nodes[c->gs->nodes[sm].pnode], .n_in = 1,
                          .n_out = 1, .in_shape = &ish, .out_shape = &osh, .emit = view_group, .sink = &v};
  int norule = 0;
  if (vd_op_reduce_rule((vd_op_id)op)(&rc, &norule) != VD_OK || norule) return;
  vlin l = *x;
  l.sv = so;
  l.nd = ys->ndim;
  l.split = 0, l.si = l.ilo = l.ihi = l.dil = 0;
  l.uni = 0;
  uint8_t set[VD_MAX_DIMS] = {0};
  for (int32_t j = 0; j < ys->ndim; j++) {
    l.lo[j] = 0, l.hi[j] = ys->shape[j], l.dlo[j] = 0;
    if (ys->shape[j] == 1) set[j] = 1;
  }
  for (int q = 0; q < v.n; q++) {
    const vd_op_red *g = &v.g[q];
    int32_t a0 = g->a.dim, b0 = g->b.dim;
    if (a0 + g->na > xs->ndim || b0 + g->nb > ys->ndim) return;
    if (x->split > a0 && x->split <= a0 + g->na) {
      /* A split input dim: kept by a 1-1 group, or taken apart into its
       * [outer, inner] pair, which is a box again. */
      if (g->na != 1) return;
      if (g->nb == 1) {
        l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
        l.split = b0 + 1, l.si = x->si, l.ilo = x->ilo, l.ihi = x->ihi, l.dil = x->dil;
      } else if (g->nb == 2 && ys->shape[b0 + 1] == x->si) {
        l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
        l.lo[b0 + 1] = x->ilo, l.hi[b0 + 1] = x->ihi, l.dlo[b0 + 1] = x->dil;
      } else {
        return;
      }
      for (int e = 0; e < g->nb; e++) set[b0 + e] = 1;
      continue;
    }
    if (g->na == 2 && g->nb == 1 && x->hi[a0 + 1] - x->lo[a0 + 1] != xs->shape[a0 + 1] && !l.split) {
      /* [b, s] merged with s sliced: the rows are no range of [b*s], but
       * a box of the split pair. */
      l.lo[b0] = x->lo[a0], l.hi[b0] = x->hi[a0], l.dlo[b0] = x->dlo[a0];
      l.split = b0 + 1, l.si = xs->shape[a0 + 1];
      l.ilo = x->lo[a0 + 1], l.ihi = x->hi[a0 + 1], l.dil = x->dlo[a0 + 1];
      set[b0] = 1;
      continue;
    }
    int64_t inner_i = 1, inner_o = 1;
    for (int e = 1; e < g->na; e++) {
      if (x->hi[a0 + e] - x->lo[a0 + e] != xs->shape[a0 + e]) return;
      inner_i *= xs->shape[a0 + e];
    }
    for (int e = 1; e < g->nb; e++) inner_o *= ys->shape[b0 + e];
    int64_t lo = x->lo[a0] * inner_i, w = (x->hi[a0] - x->lo[a0]) * inner_i, dl = x->dlo[a0] * inner_i;
    if (lo % inner_o || w % inner_o || dl % inner_o) return;
    l.lo[b0] = lo / inner_o, l.hi[b0] = (lo + w) / inner_o, l.dlo[b0] = dl / inner_o;
    if (g->na == 1 && g->nb == 1 && ((x->uni >> a0) & 1)) l.uni |= 1u << b0;
    set[b0] = 1;
    for (int e = 1; e < g->nb; e++) set[b0 + e] = 1;
  }
  for (int32_t j = 0; j < ys->ndim; j++)
    if (!set[j]) return;
  vl_put(c, out, &l);
}

/* ---- the other rule kinds --------------------------------------------- */

static void copy_node(ictx *c, const vd_gnode_t *pn, int op) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_part) {
    /* send/recv, broadcast: the merged instance's outputs take the source's lineage. */
    if (pn->n_in < 1 || !vl_at(c, in[0])->known) return;
    for (uint32_t i = 0; i < pn->n_in; i++)
      if (!vl_at(c, in[i])->known) return;
    for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], vl_at(c, in[pn->n_in == pn->n_out ? o : 0]));
    return;
  }
  if (pn->n_in < 1 || !vl_at(c, in[0])->known) return;
  /* When the single plan runs the same operator on the same value (a
   * multiref the single plan has too), the outputs name ITS outputs, so
   * that single consumers downstream match; otherwise the output holds the
   * input's single value. */
  int32_t sm = vl_at(c, in[0])->zero ? -1 : match_single(c, pn, op);
  for (uint32_t o = 0; o < pn->n_out; o++) {
    vlin l = *vl_at(c, in[0]);
    if (sm >= 0) l.sv = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[sm])[o];
    vl_put(c, out[o], &l);
  }
}

static int same_slice(const vlin *a, const vlin *b) {
  if (a->sv != b->sv || a->nd != b->nd || a->split || b->split) return 0;
  for (int32_t i = 0; i < a->nd; i++)
    if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i] || a->dlo[i] != b->dlo[i]) return 0;
  return 1;
}

/* The same slice (bounds and shifts) of two single values of one shape. */
static int same_slice_shape(const ictx *c, const vlin *a, const vlin *b) {
  if (a->nd != b->nd || a->split || b->split) return 0;
  const vd_tensor_t *x = stens(c, a->sv), *y = stens(c, b->sv);
  if (x->ndim != y->ndim) return 0;
  for (int32_t i = 0; i < a->nd; i++)
    if (x->shape[i] != y->shape[i] || a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i] || a->dlo[i] != b->dlo[i])
      return 0;
  return 1;
}

/* accumulate / add: 0 + x = x; parts [a, a+p) + [a+p, a+p+q) of one slice
 * are parts [a, a+p+q).  Returns 1 when decided. */
static int accum_node(ictx *c, const vd_gnode_t *pn) {
  if (pn->n_in != 2 || pn->n_out != 1) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  uint32_t out = vd_gnode_outputs(c->gp, pn)[0];
  const vlin *a = vl_at(c, in[0]), *b = vl_at(c, in[1]);
  if (!a->known || !b->known) return 0;
  if (a->zero || b->zero) {
    vl_put(c, out, a->zero ? b : a);
    return 1;
  }
  if (!same_slice(a, b) || a->n != b->n || a->dk != b->dk || a->n < 2 || a->f != b->f) return 0;
  const vlin *lo = a->k0 < b->k0 ? a : b, *hi = a->k0 < b->k0 ? b : a;
  if (lo->k0 + lo->cnt != hi->k0) return 0;
  vlin l = *lo;
  l.cnt = lo->cnt + hi->cnt;
  vl_put(c, out, &l);
  return 1;
}

/* A plain elementwise sum of whole operands of one shape: multiref_backward,
 * accumulate, a two-input add (no scalar). */
static int is_sum(const vd_plan_t *p, const vd_node_t *nd, int op, uint32_t n_in) {
  if (op == VD_OP_MULTIREF_BACKWARD || op == VD_OP_ACCUMULATE) return 1;
  return op == VD_OP_ADD && n_in == 2 && !vd_node_attr(p, nd, "scalar");
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* A sum whose single twin is another summing operator, or the same one
 * with its operands in another order: the parallel plan accumulates a
 * gradient fan-in (accumulate of a received part and a local one) where
 * the single plan has one multiref_backward of the same two values.  When
 * every input holds the same slice, parts and factor of single values
 * x1..xk, and exactly one single sum node (up to equal outputs) reads the
 * multiset {x1..xk} (exact values first, then copy roots, as match_single),
 * the output holds that slice and parts of its output: the slice of a sum
 * is the sum of the slices, and part k of a sum of partial sums is the sum
 * of the parts k.  SOUNDNESS: as any rule, it only proposes a candidate.
 * Returns 1 when decided. */
static int sum_node(ictx *c, const vd_gnode_t *pn, int op) {
  if (pn->n_out != 1 || pn->n_in < 2 || pn->n_in > MAXOPD || pn->n_part) return 0;
  if (!is_sum(c->pp, &c->pp->nodes[pn->pnode], op, pn->n_in)) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  const vlin *a = vl_at(c, in[0]);
  uint32_t want[MAXOPD], have[MAXOPD];
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (!x->known || x->zero || x->sv < 0 || x->noemit || !aligned(c, in[i])) return 0;
    if (i && (!same_slice_shape(c, a, x) || x->k0 != a->k0 || x->cnt != a->cnt || x->n != a->n || x->dk != a->dk ||
              x->f != a->f))
      return 0;
  }
  const vd_tensor_t *at = stens(c, a->sv);
  for (int exact = 1; exact >= 0; exact--) {
    for (uint32_t i = 0; i < pn->n_in; i++)
      want[i] = exact ? (uint32_t)vl_at(c, in[i])->sv : c->sroot[vl_at(c, in[i])->sv];
    qsort(want, pn->n_in, sizeof(*want), cmp_u32);
    uint32_t root = c->sroot[a->sv];
    int32_t found = -1, n_found = 0;
    for (uint32_t q = c->rv_off[root]; q < c->rv_off[root + 1]; q++) {
      const vd_value_t *sv0 = &c->gs->values[c->rv[q]];
      if (exact && c->rv[q] != (uint32_t)a->sv) continue;
      const uint32_t *cons = vd_value_consumers(c->gs, sv0);
      for (uint32_t k = 0; k < sv0->n_cons; k++) {
        const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
        int sop = c->sop[sn->pnode];
        if ((int32_t)cons[k] == found || sn->n_in != pn->n_in || sn->n_out != 1 || sn->n_part || sop < 0 ||
            !is_sum(c->sp, &c->sp->nodes[sn->pnode], sop, sn->n_in))
          continue;
        const uint32_t *sin = vd_gnode_inputs(c->gs, sn);
        const vd_tensor_t *ot = stens(c, (int32_t)vd_gnode_outputs(c->gs, sn)[0]);
        int ok = ot->ndim == at->ndim;
        for (int32_t j = 0; j < at->ndim && ok; j++) ok = ot->shape[j] == at->shape[j];
        for (uint32_t i = 0; i < sn->n_in && ok; i++) have[i] = exact ? sin[i] : c->sroot[sin[i]];
        if (!ok) continue;
        qsort(have, sn->n_in, sizeof(*have), cmp_u32);
        if (memcmp(have, want, sn->n_in * sizeof(*have))) continue;
        if (found >= 0 && same_outputs(c, &c->gs->nodes[found], sn)) continue;
        found = (int32_t)cons[k];
        n_found++;
      }
    }
    if (n_found > 1) return 0;
    if (n_found == 1) {
      vlin l = *a;
      l.sv = (int32_t)vd_gnode_outputs(c->gs, &c->gs->nodes[found])[0];
      l.guess = 0;
      for (uint32_t i = 1; i < pn->n_in; i++) l.uni &= vl_at(c, in[i])->uni;
      vl_put(c, vd_gnode_outputs(c->gp, pn)[0], &l);
      return 1;
    }
  }
  return 0;
}

static int attr_dim(const ictx *c, const vd_gnode_t *pn, int32_t nd, int32_t *dim) {
  int64_t d = vd_node_attr_int(c->pp, &c->pp->nodes[pn->pnode], "dim", 0);
  if (d < 0) d += nd;
  if (d < 0 || d >= nd) return 0;
  *dim = (int32_t)d;
  return 1;
}

/* When the single plan chunks the same value along the same dim and one of
 * its chunks contains slice l (rotate_half's x[..., :h] on a head-sharded
 * x), l is rewritten as a slice of that chunk's output, so that the single
 * consumers of the chunk (rotate_half's neg and cat) match downstream. */
static void rebase_on_single_chunk(const ictx *c, vlin *l, int32_t dim) {
  uint32_t root = c->sroot[l->sv];
  int64_t w = stens(c, l->sv)->shape[dim];
  for (uint32_t q = c->rv_off[root]; q < c->rv_off[root + 1]; q++) {
    const vd_value_t *sv0 = &c->gs->values[c->rv[q]];
    const uint32_t *cons = vd_value_consumers(c->gs, sv0);
    for (uint32_t k = 0; k < sv0->n_cons; k++) {
      const vd_gnode_t *sn = &c->gs->nodes[cons[k]];
      if (c->sop[sn->pnode] != VD_OP_CHUNK || sn->n_in != 1 || sn->n_out != 1) continue;
      const vd_node_t *nd = &c->sp->nodes[sn->pnode];
      int64_t d = vd_node_attr_int(c->sp, nd, "dim", 0);
      if (d < 0) d += l->nd;
      int64_t chunks = vd_node_attr_int(c->sp, nd, "chunks", 1), index = vd_node_attr_int(c->sp, nd, "index", 0);
      if (d != dim || chunks < 1 || w % chunks || index < 0 || index >= chunks) continue;
      int64_t lo = index * (w / chunks), hi = lo + w / chunks;
      int32_t so = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
      if (l->lo[dim] < lo || l->hi[dim] > hi || stens(c, so)->ndim != l->nd) continue;
      l->sv = so;
      l->lo[dim] -= lo;
      l->hi[dim] -= lo;
      return;
    }
  }
}

static void chunk_node(ictx *c, const vd_gnode_t *pn) {
  uint32_t in = vd_gnode_inputs(c->gp, pn)[0], out = vd_gnode_outputs(c->gp, pn)[0];
  if (!aligned(c, in)) return;
  const vlin *x = vl_at(c, in);
  int32_t dim;
  if (!attr_dim(c, pn, x->nd, &dim)) return;
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  int64_t chunks = vd_node_attr_int(c->pp, nd, "chunks", 1), index = vd_node_attr_int(c->pp, nd, "index", 0);
  int64_t w = x->hi[dim] - x->lo[dim];
  if (chunks < 1 || w % chunks || index < 0 || index >= chunks) return;
  vlin l = *x;
  l.lo[dim] = x->lo[dim] + index * (w / chunks);
  l.hi[dim] = l.lo[dim] + w / chunks;
  /* Replica shifts along dim scale with the chunk only when the replicas
   * chunk alike, which they do (one program); the shift itself is kept. */
  if (l.dlo[dim] == 0) rebase_on_single_chunk(c, &l, dim);
  vl_put(c, out, &l);
}

static void coll_node(ictx *c, const vd_gnode_t *pn, int kind) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in == 0 || pn->n_in != pn->n_out) return;
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned(c, in[i])) return;
  const vlin *x0 = vl_at(c, in[0]);
  if (kind == VD_PROP_ALL_REDUCE || kind == VD_PROP_REDUCE_SCATTER) {
    /* Every participant holds a part of one slice. */
    for (uint32_t i = 0; i < pn->n_in; i++) {
      const vlin *x = vl_at(c, in[i]);
      if (!same_slice(x0, x) || x->n != x0->n || x->n < 2 || x->f != x0->f) return;
    }
    vlin l = *x0;
    l.k0 = 0, l.cnt = 1, l.n = 1, l.dk = 0;
    if (kind == VD_PROP_ALL_REDUCE) {
      for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], &l);
      return;
    }
    int32_t dim;
    if (!attr_dim(c, pn, x0->nd, &dim)) return;
    int64_t w = x0->hi[dim] - x0->lo[dim], p = pn->n_out;
    if (w % p) return;
    for (uint32_t o = 0; o < pn->n_out; o++) {
      vlin y = l;
      y.lo[dim] = x0->lo[dim] + (int64_t)o * (w / p);
      y.hi[dim] = y.lo[dim] + w / p;
      vl_put(c, out[o], &y);
    }
    return;
  }
  /* all_gather: whole parts, contiguous along dim in group order. */
  int32_t dim;
  if (!attr_dim(c, pn, x0->nd, &dim)) return;
  vlin l = *x0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (x->sv != x0->sv || x->n != 1 || x->cnt != 1 || x->f != x0->f) return;
    for (int32_t j = 0; j < x->nd; j++) {
      if (j == dim) continue;
      if (x->lo[j] != x0->lo[j] || x->hi[j] != x0->hi[j] || x->dlo[j] != x0->dlo[j]) return;
    }
    if (i > 0 && (x->lo[dim] != l.hi[dim] || x->dlo[dim] != x0->dlo[dim])) return;
    l.hi[dim] = x->hi[dim];
  }
  for (uint32_t o = 0; o < pn->n_out; o++) vl_put(c, out[o], &l);
}

/* all_to_all (split_dim s, concat_dim t, group order): output j is chunk j
 * along s of every input, concatenated along t.  A box when the inputs are
 * whole slices of one value, equal except along t, where they follow each
 * other in group order (as all_gather's), and their common s slice splits
 * evenly.  s == t (a pure permutation of chunks) is left undecided. */
static void a2a_node(ictx *c, const vd_gnode_t *pn) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in == 0 || pn->n_in != pn->n_out) return;
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned(c, in[i])) return;
  const vlin *x0 = vl_at(c, in[0]);
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  int64_t sd = vd_node_attr_int(c->pp, nd, "split_dim", -1), td = vd_node_attr_int(c->pp, nd, "concat_dim", -1);
  if (sd < 0) sd += x0->nd;
  if (td < 0) td += x0->nd;
  if (sd < 0 || sd >= x0->nd || td < 0 || td >= x0->nd || sd == td) return;
  int64_t p = pn->n_in, w = x0->hi[sd] - x0->lo[sd];
  if (w % p) return;
  vlin l = *x0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (x->sv != x0->sv || x->n != 1 || x->cnt != 1 || x->f != x0->f) return;
    for (int32_t j = 0; j < x->nd; j++) {
      if (j == td) continue;
      if (x->lo[j] != x0->lo[j] || x->hi[j] != x0->hi[j] || x->dlo[j] != x0->dlo[j]) return;
    }
    if (i > 0 && (x->lo[td] != l.hi[td] || x->dlo[td] != x0->dlo[td])) return;
    l.hi[td] = x->hi[td];
  }
  for (uint32_t o = 0; o < pn->n_out; o++) {
    vlin y = l;
    y.lo[sd] = x0->lo[sd] + (int64_t)o * (w / p);
    y.hi[sd] = y.lo[sd] + w / p;
    vl_put(c, out[o], &y);
  }
}

/* After the operator's own rule: a constant scaling without a single twin
 * (x / 1, a loss divided by the microbatch count) keeps its input's lineage
 * with the factor multiplied, and so does x + 0; a scalar added to a known zero whose twin the
 * single plan adds the same scalar to is that twin's constant (the ones of
 * a loss gradient seed, written 0*x + 1). */
static void scale_through(ictx *c, const vd_gnode_t *pn, int op) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  if (pn->n_in != 1) return;
  const vlin *x = vl_at(c, in[0]);
  const vd_node_t *nd = &c->pp->nodes[pn->pnode];
  double s;
  if (x->known && !x->zero && scaling(c->pp, nd, op, &s) && s != 0.0) {
    vlin l = *x;
    l.f *= s;
    if (s != 1.0) l.fsrc = l.f != 1.0 ? (int32_t)(pn - c->gp->nodes) : -1;
    vl_put(c, out[0], &l);
    return;
  }
  if (x->known && (op == VD_OP_ADD || op == VD_OP_SUB) && vd_node_attr(c->pp, nd, "scalar") &&
      !adds_constant(c->pp, nd, op)) {
    vl_put(c, out[0], x); /* x + 0 (python's sum() starts with 0 + x) */
    return;
  }
  if (!x->known || !x->zero || x->sv < 0 || (op != VD_OP_ADD && op != VD_OP_SUB)) return;
  const vd_attr_t *a = vd_node_attr(c->pp, nd, "scalar");
  int32_t sm = a ? match_single(c, pn, op) : -1;
  if (sm < 0) return;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  const vd_attr_t *b = vd_node_attr(c->sp, &c->sp->nodes[sn->pnode], "scalar");
  if (!b || !vd_attr_equal(c->pp, a, c->sp, b)) return;
  vlin l = *x;
  l.zero = 0;
  l.sv = (int32_t)vd_gnode_outputs(c->gs, sn)[0];
  l.k0 = 0, l.cnt = 1, l.n = 1, l.dk = 0, l.f = 1.0, l.fsrc = -1;
  if (stens(c, l.sv)->ndim != l.nd) return;
  vl_put(c, out[0], &l);
}

/* The rule of Gp node gi, applied when none of its outputs has a lineage
 * yet; 1 when it was applied (its outputs may have got lineages). */
static int prop_node(ictx *c, uint32_t gi) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  int op = c->pop[pn->pnode];
  if (op < 0) return 0;
  const vd_lin_prop_rule *ru = &rules[op];
  const uint32_t *out = vd_gnode_outputs(c->gp, pn);
  /* Outputs already seeded (annotated final versions) keep their annotation. */
  int seeded = 0;
  for (uint32_t o = 0; o < pn->n_out; o++) seeded |= vl_at(c, out[o])->known;
  if (seeded) return 0;
  switch (ru->kind) {
  case VD_PROP_COPY: copy_node(c, pn, op); break;
  case VD_PROP_MAP:
    map_node(c, gi, op, ru);
    if (!vl_at(c, out[0])->known) sum_node(c, pn, op);
    break;
  case VD_PROP_ACCUM:
    if (!accum_node(c, pn)) map_node(c, gi, op, ru);
    if (!vl_at(c, out[0])->known) sum_node(c, pn, op);
    break;
  case VD_PROP_SCALE:
    map_node(c, gi, op, ru);
    if (vd_node_attr_float(c->pp, &c->pp->nodes[pn->pnode], "factor", 1.0) == 0.0 && pn->n_out == 1) {
      /* a known zero, named after the single twin's zero when there is one */
      vlin *l = vl_slot(c, out[0]);
      if (!l) break;
      if (!l->known) {
        memset(l, 0, sizeof(*l));
        l->sv = -1;
      }
      l->known = l->zero = 1;
      l->f = 1.0;
      l->fsrc = -1;
    }
    break;
  case VD_PROP_CHUNK: chunk_node(c, pn); break;
  case VD_PROP_VIEW: view_node(c, gi, op); break;
  case VD_PROP_ALL_REDUCE:
  case VD_PROP_ALL_GATHER:
  case VD_PROP_REDUCE_SCATTER: coll_node(c, pn, ru->kind); break;
  case VD_PROP_ALL_TO_ALL: a2a_node(c, pn); break;
  default: break;
  }
  if (pn->n_out == 1 && !vl_at(c, out[0])->known) scale_through(c, pn, op);
  return 1;
}

/* ---- the worklist ---------------------------------------------------------
 *
 * OPTIMIZATION-ONLY.  The serial algorithm is: passes of prop_node over
 * every Gp node in topological order, and passes of guess_node (then
 * guess_outputs) over every MAP and ACCUM node.  Each of the three node
 * functions is a deterministic function of the static context and of the
 * lineages of a fixed set of values (prop_node: the node's inputs, its
 * outputs' known flags and its forward partner's inputs; guess_node: its
 * inputs; guess_outputs: its inputs and outputs), and it only ever turns
 * values from unknown to known (a known value never changes again: a node
 * with a known output is skipped, and guesses only fill unknown values).
 * So applying a node function again when none of those values changed
 * since its last application (which decided nothing, or the node would
 * have a known value among them) repeats that application: nothing.
 * A sweep therefore visits, in topological order, only the nodes marked
 * since their last visit: note_value marks every consumer of a value that
 * became known and every backward node whose forward partner consumes it,
 * in all three bitsets.  (Not its producer: a known output only makes the
 * producer's functions do nothing.)  A mark at a position the sweep has
 * not reached yet is visited in this sweep, which is exactly when the full
 * pass would have seen the change; a mark at or behind the sweep's position
 * waits for the next sweep of that kind, as in the full pass.  Each sweep
 * thus leaves every lineage as the full pass does, and the pass counts, the
 * known count (n_known, counted on each value's first change) and the
 * guess counts are the serial ones. */
enum { SWEEP_PROP, SWEEP_GUESS_IN, SWEEP_GUESS_OUT };

static void mark_node(ictx *c, uint32_t gi) {
  uint32_t t = c->tpos[gi];
  for (int k = 0; k < 3; k++) c->dirty[k][t >> 6] |= 1ull << (t & 63);
}

/* Counts v once when it has become known and marks the nodes that read it. */
static void note_value(ictx *c, uint32_t v) {
  if (c->noted[v] || !vl_at(c, v)->known) return;
  c->noted[v] = 1;
  c->n_known++;
  const vd_value_t *val = &c->gp->values[v];
  const uint32_t *cons = vd_value_consumers(c->gp, val);
  for (uint32_t k = 0; k < val->n_cons; k++) {
    mark_node(c, cons[k]);
    for (uint32_t q = c->rfw_off[cons[k]]; q < c->rfw_off[cons[k] + 1]; q++) mark_node(c, c->rfw[q]);
  }
}

/* One node of a sweep: the node function, then its changes noted. */
static int sweep_node(ictx *c, int kind, uint32_t gi) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  int op = c->pop[pn->pnode], n = 0;
  if (op < 0) return 0;
  if (kind == SWEEP_PROP) {
    if (!prop_node(c, gi)) return 0;
  } else {
    const vd_lin_prop_rule *ru = &rules[op];
    if (ru->kind != VD_PROP_MAP && ru->kind != VD_PROP_ACCUM) return 0;
    n = kind == SWEEP_GUESS_OUT ? guess_outputs(c, gi, op) : guess_node(c, gi, op, ru);
    if (!n) return 0;
    const uint32_t *in = vd_gnode_inputs(c->gp, pn);
    for (uint32_t i = 0; i < pn->n_in; i++) note_value(c, in[i]);
  }
  const uint32_t *out = vd_gnode_outputs(c->gp, pn);
  for (uint32_t o = 0; o < pn->n_out; o++) note_value(c, out[o]);
  return n;
}

/* One sweep of the given kind over the marked nodes, in topological order
 * (a node marked behind the sweep's position waits for the next sweep);
 * returns the sum of the guess counts. */
static int sweep(ictx *c, int kind) {
  uint64_t *bits = c->dirty[kind];
  size_t nw = (c->gp->n_nodes + 63) / 64;
  int n = 0;
  for (size_t w = 0; w < nw; w++) {
    /* every 64K nodes: the heartbeat's count, and a stop request */
    if ((w & 1023) == 0) {
      vd_ctl_set(VD_CTL_INFER_VALUES, c->n_known);
      if (vd_ctl_stopped()) {
        c->stopped = 1;
        return n;
      }
    }
    uint64_t behind = 0; /* bits of word w at or before the current position */
    for (;;) {
      uint64_t word = bits[w] & ~behind;
      if (!word) break;
      int b = __builtin_ctzll(word);
      behind = b == 63 ? ~0ull : (2ull << b) - 1;
      bits[w] &= ~(1ull << b);
      n += sweep_node(c, kind, c->gp->topo[w * 64 + (size_t)b]);
    }
  }
  return n;
}

/* One pass of propagation.  A backward node can precede its forward partner
 * in topological order (a loss gradient seed depends on nothing), so
 * vd_lin_infer repeats passes while they decide new values. */
static void propagate(ictx *c) { (void)sweep(c, SWEEP_PROP); }

/* One pass of guesses over Gp (topological order); the number made.  Output
 * guesses only when no input was guessed: a guessed input must first be
 * propagated (its consumer's own rule may then decide). */
static int guess_pass(ictx *c) {
  int n = sweep(c, SWEEP_GUESS_IN);
  if (!n) n = sweep(c, SWEEP_GUESS_OUT);
  return n;
}

/* ---- emission ------------------------------------------------------------ */

/* The factor of output o of node pn from its inputs', as propagation would
 * give it: through the rule of the single twin computing o's single value
 * (an annotated output's is its annotation's), or for a copy or a constant
 * scaling without one (scale_through: the logged loss's average over the
 * replicas) directly; 0 when none fits. */
static int node_factor(const ictx *c, const vd_gnode_t *pn, int op, uint32_t o, double *fo) {
  const double f0 = vl_at(c, vd_gnode_inputs(c->gp, pn)[0])->f;
  const vlin *y = vl_at(c, vd_gnode_outputs(c->gp, pn)[o]);
  double s;
  if (rules[op].kind == VD_PROP_COPY && pn->n_in == 1) return *fo = f0, 1;
  int32_t sm = match_single(c, pn, op);
  const vd_gnode_t *sn = sm >= 0 ? &c->gs->nodes[sm] : NULL;
  if (sn && y->known && (o >= sn->n_out || (int32_t)vd_gnode_outputs(c->gs, sn)[o] != y->sv)) sn = NULL;
  if (sn) return out_factor(c, pn, sn, op, &rules[op], o, fo);
  if (pn->n_in == 1 && scaling(c->pp, &c->pp->nodes[pn->pnode], op, &s) && s != 0.0) return *fo = f0 * s, 1;
  return 0;
}

/* Whether a constant factor that some value carries fails to cancel: a node
 * reads a value of factor f != 1 and computes an annotated value (factor 1)
 * with another factor, or no factor fits its output at all.  That is a
 * scaling bug's signature (a loss divided by a local count, a sum where a
 * mean belongs), and then no candidate carries a factor: the stages grow
 * from the annotated values to the operator that introduced it, which the
 * failing stage then contains and the finding names (verifier/findings.c
 * factor_origin).  With factors, each stage would hold only where the
 * factor first shows, far from its cause.  A correct program whose factors
 * cancel (a per-replica mean loss, an averaging reducer) keeps them. */
static int factor_escapes(const ictx *c) {
  for (size_t g = 0; g < c->gp->n_nodes; g++) {
    const vd_gnode_t *pn = &c->gp->nodes[g];
    int op = c->pop[pn->pnode];
    if (op < 0 || pn->n_in == 0 || pn->n_out == 0) continue;
    const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
    int scaled = 0, all_in = 1, any_out = 0;
    for (uint32_t i = 0; i < pn->n_in; i++) {
      const vlin *x = vl_at(c, in[i]);
      all_in &= x->known;
      scaled |= x->known && !x->zero && fabs(x->f - 1.0) > 1e-12;
    }
    if (!scaled || !all_in) continue;
    for (uint32_t o = 0; o < pn->n_out; o++) {
      any_out |= vl_at(c, out[o])->known;
      double fo;
      if (c->seeded[out[o]] && (!node_factor(c, pn, op, o, &fo) || fabs(fo - 1.0) > 1e-12)) return 1;
    }
    double fo;
    if (!any_out && !node_factor(c, pn, op, 0, &fo)) return 1;
  }
  return 0;
}

/* Writes the candidate of tensor ti when every instance's final value has a
 * lineage that fits the plan's affine annotation form; 1 if written. */
static int emit(ictx *c, uint32_t ti, vd_plan_t *pp) {
  const vd_graph_t *gp = c->gp, *gs = c->gs;
  vd_tensor_t *pt = &pp->tensors[ti];
  uint32_t per = pt->scope == VD_SCOPE_PER_MB ? gp->inst_per_replica[ti] : 1;
  vd_lineage_ann a;
  memset(&a, 0, sizeof(a));
  int64_t k_first = 0;
  int32_t stensor = -1;
  for (uint32_t m = 0; m < per; m++) {
    int32_t mb = pt->scope == VD_SCOPE_PER_MB ? (int32_t)m : -1;
    int32_t first = vd_graph_first(gp, ti, 0, mb), last = vd_graph_last(gp, ti, 0, mb);
    if (first < 0 || last < 0) return 0;
    /* SOUNDNESS: a candidate must not state an initial value (that would
     * be a hypothesis nothing proves). */
    if (gp->values[first].is_initial || gp->values[first].producer < 0) return 0;
    const vlin *l = vl_at(c, last);
    /* A factor f != 1 is written (vd_lineage_ann.factor): the claim is then
     * "f x the part", proven like any other (an averaging DP reducer's
     * inputs are dp x their share; without it the whole backward had no
     * candidate).  f must be finite and the same in every microbatch. */
    if (!aligned(c, (uint32_t)last) || l->noemit || !isfinite(l->f) || l->f == 0.0) return 0;
    if (c->factor_escapes && fabs(l->f - 1.0) > 1e-12) return 0;
    if (m > 0 && l->f != vd_lineage_factor(&a)) return 0;
    /* A slice of a broadcast dim is right wherever it sits, but the copies
     * of one claim must cover the single tensor: no candidate; the stages
     * that read it grow to its producers. */
    for (int32_t i = 0; i < l->nd; i++)
      if (((l->uni >> i) & 1) && l->hi[i] - l->lo[i] != stens(c, l->sv)->shape[i]) return 0;
    int64_t k, n, dk;
    if (!norm_part(l, &k, &n, &dk)) return 0;
    uint32_t s = gs->values[l->sv].tensor;
    const vd_tensor_t *st = &c->sp->tensors[s];
    int32_t smb = st->scope == VD_SCOPE_PER_MB ? 0 : -1;
    if (vd_graph_last(gs, s, 0, smb) != l->sv) return 0; /* the annotation names the final single value */
    if (m == 0) {
      stensor = (int32_t)s;
      a.full = st->id;
      memcpy(a.lo, l->lo, sizeof(a.lo));
      memcpy(a.hi, l->hi, sizeof(a.hi));
      memcpy(a.dp_shift, l->dlo, sizeof(a.dp_shift));
      a.part_k = k, a.part_n = n, a.dp_part = dk;
      a.factor = fabs(l->f - 1.0) <= 1e-12 ? 0.0 : l->f;
      k_first = k;
    } else {
      if ((int32_t)s != stensor || n != a.part_n || dk != a.dp_part) return 0;
      for (int32_t i = 0; i < l->nd; i++) {
        if (l->dlo[i] != a.dp_shift[i]) return 0;
        int64_t sh = l->lo[i] - a.lo[i];
        if (m == 1) a.mb_shift[i] = sh;
        else if (sh != (int64_t)m * a.mb_shift[i]) return 0;
      }
      int64_t kp = k - k_first;
      if (m == 1) a.mb_part = kp;
      else if (kp != (int64_t)m * a.mb_part) return 0;
    }
  }
  if (stensor < 0) return 0;
  pt->lin = a;
  pt->has_lin = 1;
  return 1;
}

const char *const vd_lin_stuck_text[VD_LIN_STUCK__COUNT] = {
    [VD_LIN_STUCK_PARTIAL] = "reads a partial sum where the single-device operator reads the whole value "
                             "(a missing reduction?)",
    [VD_LIN_STUCK_FACTOR] = "reads a value scaled by a constant the single-device computation does not apply "
                            "(a scaling bug?)",
    [VD_LIN_STUCK_ZERO] = "reads a known zero (a buffer a missing collective should have filled?)",
    [VD_LIN_STUCK_NO_TWIN] = "computes what the single-device plan never computes from the values it reads "
                             "(wrong operands, e.g. a value from the wrong rank?)",
    [VD_LIN_STUCK_SLICE] = "reads slices that do not combine into a slice of the single-device result",
    [VD_LIN_STUCK_ADDEND] = "misses the sum's other addends (a missing reduction, e.g. of a shared or tied "
                            "weight's gradient?)",
};

void vd_lin_stuck_phrase(const vd_lin_infer_stats *s, char *buf, size_t n) {
  switch (s->stuck_why) {
  case VD_LIN_STUCK_PARTIAL:
    snprintf(buf, n, "input %u is part %lld of %lld and the operator %s", s->stuck_input, (long long)s->stuck_k,
             (long long)s->stuck_n, vd_lin_stuck_text[s->stuck_why]);
    break;
  case VD_LIN_STUCK_FACTOR:
    snprintf(buf, n, "input %u is %g x its single-device value and the operator %s", s->stuck_input, s->stuck_f,
             vd_lin_stuck_text[s->stuck_why]);
    break;
  case VD_LIN_STUCK_ADDEND:
    snprintf(buf, n, "input %u is %g x one addend of the sum that the single-device operator reads (scaled alike) "
             "and the operator %s", s->stuck_input, s->stuck_f, vd_lin_stuck_text[s->stuck_why]);
    break;
  default:
    snprintf(buf, n, "input %u and the operator %s", s->stuck_input, vd_lin_stuck_text[s->stuck_why]);
  }
}

/* Whether single value x is an addend of single value v: v is computed from
 * x through copies, constant scalings and at least one sum of two or more
 * inputs (sum: one was passed already), within depth nodes. */
static int addend_of(const ictx *c, uint32_t v, uint32_t x, int sum, int depth) {
  if (v == x) return sum;
  const vd_value_t *val = &c->gs->values[v];
  if (depth == 0 || val->producer < 0) return 0;
  const vd_gnode_t *sn = &c->gs->nodes[val->producer];
  int op = c->sop[sn->pnode];
  if (op < 0) return 0;
  int is_sum = rules[op].lin == VD_PLIN_SUM && sn->n_in >= 2;
  if (!is_sum && rules[op].kind != VD_PROP_COPY && rules[op].kind != VD_PROP_SCALE) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gs, sn);
  for (uint32_t i = 0; i < sn->n_in; i++)
    if (addend_of(c, in[i], x, sum | is_sum, depth - 1)) return 1;
  return 0;
}

/* For an annotated result (output o of pn) that reads input i at factor f:
 * whether the single-device producer of o's single value, the same
 * operator, reads at input i a value that contains x's single value as one
 * addend.  Then the factor is the single program's too (an optimizer's
 * learning rate) and what is wrong is the value: only one addend of a sum
 * arrived (the tied-weight gradient that was never all-reduced between its
 * two pipeline stages), not a scaling bug. */
static int reads_one_addend(const ictx *c, const vd_gnode_t *pn, int op, uint32_t o, uint32_t i) {
  const vlin *ov = vl_at(c, vd_gnode_outputs(c->gp, pn)[o]), *x = vl_at(c, vd_gnode_inputs(c->gp, pn)[i]);
  if (ov->sv < 0 || x->sv < 0) return 0;
  int32_t prod = c->gs->values[ov->sv].producer;
  if (prod < 0) return 0;
  const vd_gnode_t *sn = &c->gs->nodes[prod];
  if (c->sop[sn->pnode] != op || sn->n_in != pn->n_in) return 0;
  return addend_of(c, vd_gnode_inputs(c->gs, sn)[i], (uint32_t)x->sv, 0, 8);
}

/* The first node (topological order) whose inputs all have lineages and
 * whose outputs got none, and why (see vd_lin_infer_stats). */
static void find_stuck(ictx *c, vd_lin_infer_stats *s) {
  s->stuck_node = -1;
  s->stuck_origin = -1;
  for (size_t t = 0; t < c->gp->n_nodes; t++) {
    const vd_gnode_t *pn = &c->gp->nodes[c->gp->topo[t]];
    int op = c->pop[pn->pnode];
    if (op < 0 || rules[op].kind == VD_PROP_NONE || pn->n_in == 0 || pn->n_out == 0) continue;
    const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
    int all_in = 1, any_out = 0, seeded = 0;
    for (uint32_t i = 0; i < pn->n_in; i++) all_in &= vl_at(c, in[i])->known;
    for (uint32_t o = 0; o < pn->n_out; o++) any_out |= vl_at(c, out[o])->known;
    uint32_t seeded_out = 0;
    for (uint32_t o = 0; o < pn->n_out; o++)
      if (c->seeded[out[o]]) seeded = 1, seeded_out = o;
    double fo;
    if (all_in && seeded && !(node_factor(c, pn, op, seeded_out, &fo) && fabs(fo - 1.0) <= 1e-12)) {
      /* an annotated result (an updated weight, the loss) computed from a
       * value that is a constant multiple of its single-device value, or
       * of one addend of what the single twin reads (a factor that the
       * operator cancels, as the logged loss's average does, is not) */
      for (uint32_t i = 0; i < pn->n_in; i++) {
        const vlin *x = vl_at(c, in[i]);
        if (x->zero || x->f == 1.0) continue;
        s->stuck_node = pn->pnode;
        s->stuck_mb = pn->mb;
        s->stuck_why = reads_one_addend(c, pn, op, seeded_out, i) ? VD_LIN_STUCK_ADDEND : VD_LIN_STUCK_FACTOR;
        s->stuck_input = i;
        s->stuck_k = x->k0, s->stuck_n = x->n, s->stuck_f = x->f;
        s->stuck_origin = s->stuck_why == VD_LIN_STUCK_FACTOR && x->fsrc >= 0 ? (int64_t)c->gp->nodes[x->fsrc].pnode : -1;
        return;
      }
    }
    if (!all_in || any_out || seeded) continue;
    int why = VD_LIN_STUCK_SLICE;
    uint32_t at = 0;
    int32_t sm = -1;
    for (uint32_t i = 0; i < pn->n_in && why == VD_LIN_STUCK_SLICE; i++)
      if (vl_at(c, in[i])->zero) why = VD_LIN_STUCK_ZERO, at = i;
    if (why == VD_LIN_STUCK_SLICE && rules[op].kind != VD_PROP_COPY) sm = match_single(c, pn, op);
    if (why == VD_LIN_STUCK_SLICE && sm >= 0 && !out_factor(c, pn, &c->gs->nodes[sm], op, &rules[op], 0, &fo)) {
      why = VD_LIN_STUCK_FACTOR;
      for (uint32_t i = pn->n_in; i-- > 0;)
        if (vl_at(c, in[i])->f != 1.0) at = i;
    }
    for (uint32_t i = 0; i < pn->n_in && why == VD_LIN_STUCK_SLICE; i++) {
      const vlin *x = vl_at(c, in[i]);
      if (x->n / (x->cnt ? x->cnt : 1) > 1) why = VD_LIN_STUCK_PARTIAL, at = i;
    }
    if (why == VD_LIN_STUCK_SLICE && rules[op].kind == VD_PROP_MAP && sm < 0) why = VD_LIN_STUCK_NO_TWIN;
    s->stuck_node = pn->pnode;
    s->stuck_mb = pn->mb;
    s->stuck_why = why;
    s->stuck_input = at;
    s->stuck_k = vl_at(c, in[at])->k0;
    s->stuck_n = vl_at(c, in[at])->n;
    s->stuck_f = vl_at(c, in[at])->f;
    s->stuck_origin = why == VD_LIN_STUCK_FACTOR && vl_at(c, in[at])->fsrc >= 0
                          ? (int64_t)c->gp->nodes[vl_at(c, in[at])->fsrc].pnode : -1;
    return;
  }
}

vd_rc vd_lin_infer(const vd_graph_t *gs, const vd_graph_t *gp, vd_plan_t *pp, uint8_t **inferred,
                   vd_lin_infer_stats *st, vd_diag *d) {
  ictx c;
  memset(&c, 0, sizeof(c));
  c.gs = gs, c.gp = gp, c.sp = gs->plan, c.pp = pp;
  vd_rc rc = VD_OK;
  uint8_t *inf = vd_calloc(pp->n_tensors ? pp->n_tensors : 1, 1);
  uint8_t *written = NULL;
  vd_idmap_t sid = {0};
  c.vix = vd_calloc(gp->n_values ? gp->n_values : 1, sizeof(*c.vix));
  c.vchunk = vd_calloc(gp->n_values / VL_CHUNK + 1, sizeof(*c.vchunk));
  c.seeded = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  c.pop = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c.pop));
  c.sop = vd_calloc(c.sp->n_nodes ? c.sp->n_nodes : 1, sizeof(*c.sop));
  c.fwd_of = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c.fwd_of));
  c.byname = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c.byname));
  c.gfirst = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c.gfirst));
  c.gnext = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c.gnext));
  c.sbyname = vd_calloc(c.sp->n_nodes ? c.sp->n_nodes : 1, sizeof(*c.sbyname));
  c.sgfirst = vd_calloc(c.sp->n_nodes ? c.sp->n_nodes : 1, sizeof(*c.sgfirst));
  c.sgnext = vd_calloc(gs->n_nodes ? gs->n_nodes : 1, sizeof(*c.sgnext));
  size_t nw = (gp->n_nodes + 63) / 64;
  c.tpos = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c.tpos));
  c.rfw_off = vd_calloc(gp->n_nodes + 1, sizeof(*c.rfw_off));
  c.rfw = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c.rfw));
  c.noted = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  for (int k = 0; k < 3; k++) c.dirty[k] = vd_calloc(nw ? nw : 1, sizeof(uint64_t));
  if (!inf || !c.vix || !c.vchunk || !c.seeded || !c.pop || !c.sop || !c.fwd_of || !c.byname || !c.gfirst ||
      !c.gnext || !c.sbyname || !c.sgfirst || !c.sgnext || !c.tpos || !c.rfw_off || !c.rfw || !c.noted ||
      !c.dirty[0] || !c.dirty[1] || !c.dirty[2]) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = vd_plan_written(pp, &written, d)) != VD_OK) goto done;
  for (size_t i = 0; i < pp->n_nodes; i++) c.pop[i] = vd_op_lookup(vd_node_op(pp, &pp->nodes[i]));
  for (size_t i = 0; i < c.sp->n_nodes; i++) c.sop[i] = vd_op_lookup(vd_node_op(c.sp, &c.sp->nodes[i]));
  for (size_t i = 0; i < pp->n_nodes; i++) c.byname[i] = (uint32_t)i, c.gfirst[i] = -1;
  qsort_r(c.byname, pp->n_nodes, sizeof(*c.byname), cmp_byname, pp);
  for (size_t i = 0; i < c.sp->n_nodes; i++) c.sbyname[i] = (uint32_t)i, c.sgfirst[i] = -1;
  qsort_r(c.sbyname, c.sp->n_nodes, sizeof(*c.sbyname), cmp_sname, (void *)c.sp);
  for (size_t i = gs->n_nodes; i-- > 0;) {
    c.sgnext[i] = c.sgfirst[gs->nodes[i].pnode];
    c.sgfirst[gs->nodes[i].pnode] = (int32_t)i;
  }
  for (size_t i = gp->n_nodes; i-- > 0;) {
    c.gnext[i] = c.gfirst[gp->nodes[i].pnode];
    c.gfirst[gp->nodes[i].pnode] = (int32_t)i;
  }
  if ((rc = single_roots(&c, d)) != VD_OK) goto done;
  vd_lin_infer_stats s;
  memset(&s, 0, sizeof(s));
  for (size_t t = 0; t < pp->n_tensors; t++) s.n_annotated += pp->tensors[t].has_lin != 0;
  /* single tensor id -> index (the first tensor of an id, as vd_plan_find_tensor) */
  if (vd_idmap_init(&sid, c.sp->n_tensors) != VD_OK) {
    rc = VD_OOM(d);
    goto done;
  }
  for (size_t i = 0; i < c.sp->n_tensors; i++)
    if (vd_idmap_put(&sid, c.sp->tensors[i].id, (uint32_t)i, NULL) < 0) {
      rc = VD_OOM(d);
      goto done;
    }
  seed(&c, &sid);
  /* Forward partners, and the backward nodes of each forward node listed
   * (they read its inputs: note_value). */
  for (size_t i = 0; i < gp->n_nodes; i++) c.fwd_of[i] = -1;
#pragma omp parallel for schedule(dynamic, 1024)
  for (size_t q = 0; q < pp->n_nodes; q++) {
    int op = c.pop[q];
    if (op >= 0 && rules[op].bwd_pair) forward_partners(&c, (uint32_t)q, op);
  }
  for (size_t i = 0; i < gp->n_nodes; i++)
    if (c.fwd_of[i] >= 0) c.rfw_off[c.fwd_of[i]]++;
  for (size_t i = 0; i < gp->n_nodes; i++) c.rfw_off[i + 1] += c.rfw_off[i]; /* ends */
  for (size_t i = gp->n_nodes; i-- > 0;)
    if (c.fwd_of[i] >= 0) c.rfw[--c.rfw_off[c.fwd_of[i]]] = (uint32_t)i; /* ends become starts */
  for (size_t t = 0; t < gp->n_nodes; t++) c.tpos[gp->topo[t]] = (uint32_t)t;
  /* every node is visited by the first sweep of each kind */
  for (int k = 0; k < 3; k++)
    for (size_t w = 0; w < nw; w++)
      c.dirty[k][w] = w + 1 < nw || gp->n_nodes % 64 == 0 ? ~0ull : (1ull << (gp->n_nodes % 64)) - 1;
  for (size_t v = 0; v < gp->n_values; v++)
    if (vl_at(&c, (uint32_t)v)->known) c.noted[v] = 1, c.n_known++;
  vd_ctl_set(VD_CTL_INFER_VALUES, c.n_known); /* the seeds: the heartbeat's first count */
  /* Propagation to a fixpoint, then guesses from consumers where it left
   * values undecided, then propagation from the guesses, and so on. */
  for (int guesses = 0; guesses < 16 && !c.stopped; guesses++) {
    for (int pass = 0; pass < 8 && !c.stopped; pass++) {
      propagate(&c);
      size_t known = c.n_known;
      if (known == s.n_values) break;
      s.n_values = known;
    }
    /* the hint names where propagation itself stopped, before any guess */
    if (guesses == 0) find_stuck(&c, &s);
    int n_guess = guess_pass(&c);
    if (!n_guess) break;
    s.n_values += (size_t)n_guess;
  }
  if (c.oom) { /* a lineage record could not be allocated (vl_slot) */
    rc = VD_OOM(d);
    goto done;
  }
  if (c.stopped) { /* the sweeps ended early: their lineages are partial */
    rc = vd_diag_set(d, VD_ECANCELED, __FILE__, __LINE__, NULL, NULL, NULL, "lineage inference interrupted");
    goto done;
  }
  c.factor_escapes = factor_escapes(&c);
  /* In parallel: each tensor writes only its own annotation and flag, and
   * reads lineages that no longer change. */
  size_t n_inferred = 0, n_unknown = 0;
#pragma omp parallel for schedule(dynamic, 1024) reduction(+ : n_inferred, n_unknown)
  for (size_t t = 0; t < pp->n_tensors; t++) {
    if (pp->tensors[t].has_lin || vd_plan_is_boundary(pp, written, (uint32_t)t)) continue;
    if (emit(&c, (uint32_t)t, pp)) {
      inf[t] = 1;
      n_inferred++;
    } else {
      n_unknown++;
    }
  }
  s.n_inferred += n_inferred;
  s.n_unknown += n_unknown;
  if (st) *st = s;
  *inferred = inf;
  inf = NULL;
done:
  vd_free(written);
  vd_idmap_free(&sid);
  vd_free(inf);
  for (size_t i = 0; c.vchunk && i < gp->n_values / VL_CHUNK + 1; i++) vd_free(c.vchunk[i]);
  vd_free(c.vchunk);
  vd_free(c.vix);
  vd_free(c.seeded);
  vd_free(c.pop);
  vd_free(c.sop);
  vd_free(c.fwd_of);
  vd_free(c.byname);
  vd_free(c.gfirst);
  vd_free(c.gnext);
  vd_free(c.sroot);
  vd_free(c.sbyname);
  vd_free(c.sgfirst);
  vd_free(c.sgnext);
  vd_free(c.rv_off);
  vd_free(c.rv);
  vd_free(c.tpos);
  vd_free(c.rfw_off);
  vd_free(c.rfw);
  vd_free(c.noted);
  for (int k = 0; k < 3; k++) vd_free(c.dirty[k]);
  return rc;
}
