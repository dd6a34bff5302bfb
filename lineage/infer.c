/*
 * lineage/infer.c - candidate lineages for the unannotated tensors of a
 * parallel plan (docs/verifier.md section 1b): the rule table, value
 * lineages and seeds, the worklist, and the entry point vd_lin_infer.
 * The other files: infer_map.c (MAP), infer_kinds.c (the other rules),
 * infer_guess.c (guesses from consumers), infer_emit.c (emission).
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
#include "infer.h"

/* ---- the rule table ------------------------------------------------------ */

/* ops.def's prop column: PR(kind, partial-sum rule, bwd_pair). */
#define PR(kind, lin, bwd) {1, VD_PROP_##kind, VD_PLIN_##lin, bwd}
const vd_lin_prop_rule rules[VD_OP__COUNT] = {
#define VD_OP(ID, name, min_in, max_in, min_out, max_out, flags, bwd, attrs, eqv, prop, ...) [VD_OP_##ID] = prop,
#include "../ops/ops.def"
#undef VD_OP
};
#undef PR

const vd_lin_prop_rule *vd_lin_prop_rule_of(int op) { return &rules[op]; }

/* ---- value lineages ---------------------------------------------------- */

/* Every unknown value reads as this all-zero lineage (known = 0). */
static const vlin vl_unknown;

const vlin *vl_at(const ictx *c, uint32_t v) {
  uint32_t r = c->vix[v];
  return r ? &c->vchunk[(r - 1) / VL_CHUNK][(r - 1) % VL_CHUNK] : &vl_unknown;
}

/* The record of v for writing, all zero when new; NULL (and c->oom) when
 * out of memory. */
vlin *vl_slot(ictx *c, uint32_t v) {
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

void vl_put(ictx *c, uint32_t v, const vlin *l) {
  vlin *d = vl_slot(c, v);
  if (d) *d = *l;
}

const vd_tensor_t *ptens(const ictx *c, uint32_t v) { return &c->pp->tensors[c->gp->values[v].tensor]; }
const vd_tensor_t *stens(const ictx *c, int32_t sv) { return &c->sp->tensors[c->gs->values[sv].tensor]; }

/* Normalized part: parts [k0, k0+cnt) of n as part k of n/cnt.  0 if not aligned. */
int norm_part(const vlin *l, int64_t *k, int64_t *n, int64_t *dk) {
  if (l->cnt < 1 || l->k0 % l->cnt || l->n % l->cnt || l->dk % l->cnt) return 0;
  *k = l->k0 / l->cnt;
  *n = l->n / l->cnt;
  *dk = l->dk / l->cnt;
  return 1;
}

/* Width of lineage l along single dim i (a split dim: the box's size). */
int64_t lwidth(const vlin *l, int32_t i) {
  int64_t w = l->hi[i] - l->lo[i];
  return l->split == i + 1 ? w * (l->ihi - l->ilo) : w;
}

/* The parallel tensor of v holds its slice dimension by dimension (same
 * rank, widths equal to the shape), split dims allowed. */
int aligned_any(const ictx *c, uint32_t v) {
  const vlin *l = vl_at(c, v);
  const vd_tensor_t *t = ptens(c, v);
  if (!l->known || l->zero || t->ndim != l->nd) return 0;
  for (int32_t i = 0; i < t->ndim; i++)
    if (lwidth(l, i) != t->shape[i]) return 0;
  return 1;
}

/* The same without split dims: the form every rule but MAP and views assumes. */
int aligned(const ictx *c, uint32_t v) { return !vl_at(c, v)->split && aligned_any(c, v); }

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

/* Marks the nodes that read v although v did not change: a rule that reads
 * further upstream than its node's inputs failed at v's producer, and a
 * reader's may not (moved_box, lineage/infer_moved.c). */
void vd_lin_i_mark_readers(ictx *c, uint32_t v) {
  const vd_value_t *val = &c->gp->values[v];
  const uint32_t *cons = vd_value_consumers(c->gp, val);
  for (uint32_t k = 0; k < val->n_cons; k++) mark_node(c, cons[k]);
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

/* ---- the entry point ---------------------------------------------------- */

/* Allocates c's per-value and per-node arrays (zeroed); 0 when out of
 * memory (ictx_free releases what was allocated). */
static int ictx_alloc(ictx *c) {
  const vd_graph_t *gs = c->gs, *gp = c->gp;
  const vd_plan_t *pp = c->pp;
  c->vix = vd_calloc(gp->n_values ? gp->n_values : 1, sizeof(*c->vix));
  c->vchunk = vd_calloc(gp->n_values / VL_CHUNK + 1, sizeof(*c->vchunk));
  c->seeded = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  c->pop = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c->pop));
  c->sop = vd_calloc(c->sp->n_nodes ? c->sp->n_nodes : 1, sizeof(*c->sop));
  c->fwd_of = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c->fwd_of));
  c->byname = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c->byname));
  c->gfirst = vd_calloc(pp->n_nodes ? pp->n_nodes : 1, sizeof(*c->gfirst));
  c->gnext = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c->gnext));
  c->sbyname = vd_calloc(c->sp->n_nodes ? c->sp->n_nodes : 1, sizeof(*c->sbyname));
  c->sgfirst = vd_calloc(c->sp->n_nodes ? c->sp->n_nodes : 1, sizeof(*c->sgfirst));
  c->sgnext = vd_calloc(gs->n_nodes ? gs->n_nodes : 1, sizeof(*c->sgnext));
  size_t nw = (gp->n_nodes + 63) / 64;
  c->tpos = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c->tpos));
  c->rfw_off = vd_calloc(gp->n_nodes + 1, sizeof(*c->rfw_off));
  c->rfw = vd_calloc(gp->n_nodes ? gp->n_nodes : 1, sizeof(*c->rfw));
  c->noted = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  for (int k = 0; k < 3; k++) c->dirty[k] = vd_calloc(nw ? nw : 1, sizeof(uint64_t));
  return c->vix && c->vchunk && c->seeded && c->pop && c->sop && c->fwd_of && c->byname && c->gfirst &&
         c->gnext && c->sbyname && c->sgfirst && c->sgnext && c->tpos && c->rfw_off && c->rfw && c->noted &&
         c->dirty[0] && c->dirty[1] && c->dirty[2];
}

static void ictx_free(ictx *c) {
  for (size_t i = 0; c->vchunk && i < c->gp->n_values / VL_CHUNK + 1; i++) vd_free(c->vchunk[i]);
  vd_free(c->vchunk);
  vd_free(c->vix);
  vd_free(c->seeded);
  vd_free(c->pop);
  vd_free(c->sop);
  vd_free(c->fwd_of);
  vd_free(c->byname);
  vd_free(c->gfirst);
  vd_free(c->gnext);
  vd_free(c->sroot);
  vd_free(c->sbyname);
  vd_free(c->sgfirst);
  vd_free(c->sgnext);
  vd_free(c->rv_off);
  vd_free(c->rv);
  vd_free(c->tpos);
  vd_free(c->rfw_off);
  vd_free(c->rfw);
  vd_free(c->noted);
  for (int k = 0; k < 3; k++) vd_free(c->dirty[k]);
}

/* Operator ids of both plans' nodes, the nodes sorted by name, and the
 * graph nodes of each plan node as lists. */
static void index_nodes(ictx *c) {
  const vd_graph_t *gs = c->gs, *gp = c->gp;
  const vd_plan_t *pp = c->pp;
  for (size_t i = 0; i < pp->n_nodes; i++) c->pop[i] = vd_op_lookup(vd_node_op(pp, &pp->nodes[i]));
  for (size_t i = 0; i < c->sp->n_nodes; i++) c->sop[i] = vd_op_lookup(vd_node_op(c->sp, &c->sp->nodes[i]));
  for (size_t i = 0; i < pp->n_nodes; i++) c->byname[i] = (uint32_t)i, c->gfirst[i] = -1;
  qsort_r(c->byname, pp->n_nodes, sizeof(*c->byname), cmp_byname, (void *)pp);
  for (size_t i = 0; i < c->sp->n_nodes; i++) c->sbyname[i] = (uint32_t)i, c->sgfirst[i] = -1;
  qsort_r(c->sbyname, c->sp->n_nodes, sizeof(*c->sbyname), cmp_sname, (void *)c->sp);
  for (size_t i = gs->n_nodes; i-- > 0;) {
    c->sgnext[i] = c->sgfirst[gs->nodes[i].pnode];
    c->sgfirst[gs->nodes[i].pnode] = (int32_t)i;
  }
  for (size_t i = gp->n_nodes; i-- > 0;) {
    c->gnext[i] = c->gfirst[gp->nodes[i].pnode];
    c->gfirst[gp->nodes[i].pnode] = (int32_t)i;
  }
}

/* Single tensor id -> index (the first tensor of an id, as
 * vd_plan_find_tensor). */
static vd_rc single_ids(const ictx *c, vd_idmap_t *sid, vd_diag *d) {
  if (vd_idmap_init(sid, c->sp->n_tensors) != VD_OK) return VD_OOM(d);
  for (size_t i = 0; i < c->sp->n_tensors; i++)
    if (vd_idmap_put(sid, c->sp->tensors[i].id, (uint32_t)i, NULL) < 0) return VD_OOM(d);
  return VD_OK;
}

/* Forward partners, the backward nodes of each forward node listed (they
 * read its inputs: note_value), topological positions, and the worklist
 * with every node dirty and the seeds counted. */
static void worklist_init(ictx *c) {
  const vd_graph_t *gp = c->gp;
  const vd_plan_t *pp = c->pp;
  size_t nw = (gp->n_nodes + 63) / 64;
  for (size_t i = 0; i < gp->n_nodes; i++) c->fwd_of[i] = -1;
#pragma omp parallel for schedule(dynamic, 1024)
  for (size_t q = 0; q < pp->n_nodes; q++) {
    int op = c->pop[q];
    if (op >= 0 && (rules[op].bwd_pair || op == VD_OP_MULTIREF_BACKWARD)) forward_partners(c, (uint32_t)q, op);
  }
  for (size_t i = 0; i < gp->n_nodes; i++)
    if (c->fwd_of[i] >= 0) c->rfw_off[c->fwd_of[i]]++;
  for (size_t i = 0; i < gp->n_nodes; i++) c->rfw_off[i + 1] += c->rfw_off[i]; /* ends */
  for (size_t i = gp->n_nodes; i-- > 0;)
    if (c->fwd_of[i] >= 0) c->rfw[--c->rfw_off[c->fwd_of[i]]] = (uint32_t)i; /* ends become starts */
  for (size_t t = 0; t < gp->n_nodes; t++) c->tpos[gp->topo[t]] = (uint32_t)t;
  /* every node is visited by the first sweep of each kind */
  for (int k = 0; k < 3; k++)
    for (size_t w = 0; w < nw; w++)
      c->dirty[k][w] = w + 1 < nw || gp->n_nodes % 64 == 0 ? ~0ull : (1ull << (gp->n_nodes % 64)) - 1;
  for (size_t v = 0; v < gp->n_values; v++)
    if (vl_at(c, (uint32_t)v)->known) c->noted[v] = 1, c->n_known++;
}

/* Propagation to a fixpoint, then guesses from consumers where it left
 * values undecided, then propagation from the guesses, and so on. */
static void infer_rounds(ictx *c, vd_lin_infer_stats *s) {
  for (int guesses = 0; guesses < 16 && !c->stopped; guesses++) {
    for (int pass = 0; pass < 8 && !c->stopped; pass++) {
      propagate(c);
      size_t known = c->n_known;
      if (known == s->n_values) break;
      s->n_values = known;
    }
    /* the hint names where propagation itself stopped, before any guess */
    if (guesses == 0) find_stuck(c, s);
    int n_guess = guess_pass(c);
    if (!n_guess) break;
    s->n_values += (size_t)n_guess;
  }
}

/* Writes the candidates of every unannotated, non-boundary tensor (inf[t]
 * = 1 for each), in parallel: each tensor writes only its own annotation
 * and flag, and reads lineages that no longer change. */
static void emit_all(ictx *c, vd_plan_t *pp, const uint8_t *written, uint8_t *inf, vd_lin_infer_stats *s) {
  size_t n_inferred = 0, n_unknown = 0;
#pragma omp parallel for schedule(dynamic, 1024) reduction(+ : n_inferred, n_unknown)
  for (size_t t = 0; t < pp->n_tensors; t++) {
    if (pp->tensors[t].has_lin || vd_plan_is_boundary(pp, written, (uint32_t)t)) continue;
    if (vd_lin_i_emit_tensor(c, (uint32_t)t, pp)) {
      inf[t] = 1;
      n_inferred++;
    } else {
      n_unknown++;
    }
  }
  s->n_inferred += n_inferred;
  s->n_unknown += n_unknown;
}

vd_rc vd_lin_infer(const vd_graph_t *gs, const vd_graph_t *gp, vd_plan_t *pp, uint8_t **inferred,
                   vd_lin_infer_stats *st, vd_diag *d) {
  return vd_lin_infer_flags(gs, gp, pp, 0, inferred, st, d);
}

vd_rc vd_lin_infer_flags(const vd_graph_t *gs, const vd_graph_t *gp, vd_plan_t *pp, unsigned flags,
                         uint8_t **inferred, vd_lin_infer_stats *st, vd_diag *d) {
  ictx c;
  memset(&c, 0, sizeof(c));
  c.gs = gs, c.gp = gp, c.sp = gs->plan, c.pp = pp;
  vd_rc rc = VD_OK;
  uint8_t *inf = vd_calloc(pp->n_tensors ? pp->n_tensors : 1, 1);
  uint8_t *written = NULL;
  vd_idmap_t sid = {0};
  vd_lin_infer_stats s;
  if (!ictx_alloc(&c) || !inf) {
    rc = VD_OOM(d);
    goto done;
  }
  if ((rc = vd_plan_written(pp, &written, d)) != VD_OK) goto done;
  index_nodes(&c);
  if ((rc = single_roots(&c, d)) != VD_OK) goto done;
  memset(&s, 0, sizeof(s));
  for (size_t t = 0; t < pp->n_tensors; t++) s.n_annotated += pp->tensors[t].has_lin != 0;
  if ((rc = single_ids(&c, &sid, d)) != VD_OK) goto done;
  seed(&c, &sid);
  worklist_init(&c);
  vd_ctl_set(VD_CTL_INFER_VALUES, c.n_known); /* the seeds: the heartbeat's first count */
  infer_rounds(&c, &s);
  if (c.oom) { /* a lineage record could not be allocated (vl_slot) */
    rc = VD_OOM(d);
    goto done;
  }
  if (c.stopped) { /* the sweeps ended early: their lineages are partial */
    rc = vd_diag_set(d, VD_ECANCELED, __FILE__, __LINE__, NULL, NULL, NULL, "lineage inference interrupted");
    goto done;
  }
  int into_updates = 0;
  c.factor_escapes = factor_escapes(&c, &into_updates);
  if (c.factor_escapes && into_updates) {
    if (flags & VD_LIN_KEEP_UPDATE_FACTORS) c.factor_escapes = 0;
    else s.factors_withheld = 1;
  }
  emit_all(&c, pp, written, inf, &s);
  if (st) *st = s;
  *inferred = inf;
  inf = NULL;
done:
  vd_free(written);
  vd_idmap_free(&sid);
  vd_free(inf);
  ictx_free(&c);
  return rc;
}
