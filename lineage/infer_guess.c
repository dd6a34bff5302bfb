/*
 * lineage/infer_guess.c - guesses of the lineage inference from a consumer
 * (guess_node, guess_outputs, fanin_inputs): where propagation stops, a
 * consumer's single twin suggests a candidate (each only a candidate).
 */
#include "infer.h"

/* ---- guesses from a consumer -------------------------------------------- */

/* Whether Gp value v and Gs value sv are the same output of the same
 * operator, each input of one holding the other's: known inputs the single
 * values (or copies of them, same copy root), undecided ones produced alike
 * (recursively, depth levels deep).  A view of a gradient reads nothing
 * known; the chain under it reaches the backward of one forward node, which
 * reads that node's inputs, known before its gradient is
 * (match_single_in, partial).  Structure only: the two plans may name
 * everything differently. */
static int produced_alike(const ictx *c, uint32_t v, uint32_t sv, int depth) {
  int32_t p = c->gp->values[v].producer, q = c->gs->values[sv].producer;
  if (p < 0 || q < 0) return 0;
  const vd_gnode_t *pn = &c->gp->nodes[p], *sn = &c->gs->nodes[q];
  int op = c->pop[pn->pnode];
  if (op < 0 || op != c->sop[sn->pnode]) return 0;
  if (match_single_in(c, pn, op, 1) == q) return 1;
  if (depth == 0 || pn->n_in != sn->n_in || pn->n_out != sn->n_out) return 0;
  const uint32_t *out = vd_gnode_outputs(c->gp, pn), *s_out = vd_gnode_outputs(c->gs, sn);
  for (uint32_t k = 0; k < pn->n_out; k++)
    if ((out[k] == v) != (s_out[k] == sv)) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *s_in = vd_gnode_inputs(c->gs, sn);
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (x->known ? x->sv < 0 || c->sroot[s_in[i]] != c->sroot[x->sv] : !produced_alike(c, in[i], s_in[i], depth - 1))
      return 0;
  }
  return 1;
}

/* Whether Gp value v and Gs value sv come from nodes of one operator. */
static int same_operator(const ictx *c, uint32_t v, uint32_t sv) {
  int32_t p = c->gp->values[v].producer, q = c->gs->values[sv].producer;
  return p >= 0 && q >= 0 && c->pop[c->gp->nodes[p].pnode] >= 0 &&
         c->pop[c->gp->nodes[p].pnode] == c->sop[c->gs->nodes[q].pnode];
}

/* Whether the producers of v and sv have one name: a tie-break among
 * candidates of one operator for plans that share their names. */
static int same_name(const ictx *c, uint32_t v, uint32_t sv) {
  const vd_node_t *a = &c->pp->nodes[c->gp->nodes[c->gp->values[v].producer].pnode];
  const vd_node_t *b = &c->sp->nodes[c->gs->nodes[c->gs->values[sv].producer].pnode];
  return !strcmp(vd_plan_s(c->pp, a->name), vd_plan_s(c->sp, b->name));
}

/* The one unused single input that undecided Gp value v stands for: the
 * one produced alike (produced_alike), else the one left whose producer has
 * v's producer's operator (the expert-parallel dispatch puts a chain with
 * no single twin under a view the single plan applies to the experts'
 * output), else among those the one of the same name; -1 if none or
 * several. */
static int32_t pick_single_input(const ictx *c, uint32_t v, const uint32_t *s_in, uint32_t n, const uint8_t *used) {
  enum { ALIKE_DEPTH = 6 };
  int32_t alike = -1, n_alike = 0, same_op = -1, n_op = 0, named = -1, n_named = 0;
  for (uint32_t j = 0; j < n; j++) {
    if (used[j] || !same_operator(c, v, s_in[j])) continue;
    if (produced_alike(c, v, s_in[j], ALIKE_DEPTH)) alike = (int32_t)j, n_alike++;
    if (same_name(c, v, s_in[j])) named = (int32_t)j, n_named++;
    same_op = (int32_t)j, n_op++;
  }
  if (n_alike) return n_alike == 1 ? alike : -1;
  if (n_op == 1) return same_op;
  return n_named == 1 ? named : -1;
}

/* The single inputs of gradient sum sn (the multiref_backward multiref_twin
 * pairs with the parallel one) that parallel multiref_backward pn's inputs stand for, when
 * the parallel fan-in is split differently (tensor parallelism sums the
 * branches inside the TP region first, then all-reduces, then adds the rest:
 * fewer inputs than the single node).  Each known input takes a distinct
 * single input holding its value (exact, else the same copy root); each
 * undecided input the one remaining single input pick_single_input finds
 * for it.  sin[i] is input i's; 0 when some input has none or more than
 * one.  A heuristic only: the guess it feeds is a candidate like any other. */
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
    int32_t pick = pick_single_input(c, in[i], s_in, sn->n_in, used);
    if (pick < 0) return 0;
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
 * part and factor as the known inputs (known_factor).  SOUNDNESS: nothing follows from the guess
 * but a candidate (a stage target, proven or dropped like any other); it
 * only splits the undecided region into stages that end at it.  Returns
 * the number of values guessed. */
/* Whether node pn is one to guess at: some inputs known (each a plain
 * lineage), and the others undecided values that a reshaping or a
 * collective produced (the dispatch and combine chains): where a computing
 * operator's rule stopped, its stage decides better than a guess
 * (nnScaler's written-out norms would otherwise get a guess per gradient,
 * doubling the stages). */
static int guess_applies(const ictx *c, const vd_gnode_t *pn) {
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
    int pop = c->pop[c->gp->nodes[v->producer].pnode];
    if (pop < 0 || rules[pop].kind == VD_PROP_MAP || rules[pop].kind == VD_PROP_ACCUM ||
        rules[pop].kind == VD_PROP_SCALE)
      return 0;
    n_open++;
  }
  return n_known && n_open;
}

/* The single inputs sin[] of pn's single twin (a multiref_backward
 * found through its forward multiref: its fan-in's); 0 when there is none. */
static int guess_twin_inputs(ictx *c, const vd_gnode_t *pn, int op, uint32_t *sin) {
  int32_t sm = match_single_in(c, pn, op, 1);
  if (sm >= 0) {
    if (pn->n_in > MAXOPD) return 0;
    memcpy(sin, vd_gnode_inputs(c->gs, &c->gs->nodes[sm]), pn->n_in * sizeof(*sin));
    return 1;
  }
  if (op != VD_OP_MULTIREF_BACKWARD) return 0;
  sm = multiref_twin(c, (uint32_t)(pn - c->gp->nodes));
  return sm >= 0 && fanin_inputs(c, pn, &c->gs->nodes[sm], sin);
}

/* The part the known inputs are (a SUM rule adds parts of one slice; other
 * rules: the whole, 0 of 1); 0 when the known inputs disagree. */
static int known_part(const ictx *c, const vd_gnode_t *pn, const vd_lin_prop_rule *ru, int64_t *k, int64_t *n,
                      int64_t *dk) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  *k = 0, *n = 1, *dk = 0;
  if (ru->lin != VD_PLIN_SUM) return 1;
  int first = 1;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (!vl_at(c, in[i])->known) continue;
    int64_t ki, ni, dki;
    if (!norm_part(vl_at(c, in[i]), &ki, &ni, &dki)) return 0;
    if (!first && (ki != *k || ni != *n || dki != *dk)) return 0;
    *k = ki, *n = ni, *dk = dki, first = 0;
  }
  return 1;
}

/* The factor *f (and its source node *fsrc) a guessed input of pn takes:
 * under a SUM rule the one its known addends share, since a sum's addends
 * carry one factor (out_factor; a DDP backward carries the world size, or
 * its inverse, on every addend: a guessed addend of factor 1 beside known
 * ones of factor 2 is a wrong guess, dropped after a failed proof); 0 when
 * the known addends' factors disagree, for then no factor makes the sum
 * one (nothing is guessed).  Other rules: 1, the guess's factor before
 * (a factor of a multilinear operator's input is no factor of another's).
 * SOUNDNESS: the factor is part of the candidate the stage proves. */
static int known_factor(const ictx *c, const vd_gnode_t *pn, const vd_lin_prop_rule *ru, double *f,
                        int32_t *fsrc) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  *f = 1.0, *fsrc = -1;
  if (ru->lin != VD_PLIN_SUM) return 1;
  int first = 1;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (!x->known) continue;
    if (!first && x->f != *f) return 0;
    if (first || (*fsrc < 0 && x->fsrc >= 0)) *fsrc = x->fsrc;
    *f = x->f, first = 0;
  }
  if (*f == 1.0) *fsrc = -1;
  return 1;
}

/* A guess of Gs value sv (nd dims), factor 1: parts [k0 + d*dk, + 1) of n;
 * the boxes are left to the caller (zero). */
static void guess_start(vlin *l, int32_t sv, int32_t nd, int64_t k0, int64_t n, int64_t dk) {
  memset(l, 0, sizeof(*l));
  l->known = 1, l->guess = 1;
  l->sv = sv;
  l->nd = nd;
  l->f = 1.0, l->fsrc = -1;
  l->k0 = k0, l->cnt = 1, l->n = n, l->dk = dk;
}

/* Dim j of the guess l for undecided input i: whole where its parallel
 * width is the single one, else the slice of a known input dim linked to
 * it; 0 when none fits. */
static int guess_dim(const ictx *c, dsu *u, const vd_gnode_t *pn, uint32_t i, const vd_tensor_t *st,
                     const vd_tensor_t *pt, int32_t j, vlin *l) {
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  l->lo[j] = 0, l->hi[j] = st->shape[j];
  if (pt->shape[j] == st->shape[j]) return 1;
  int cj = dfind(u, dix(u, 0, (int)i, j));
  for (uint32_t i2 = 0; i2 < pn->n_in; i2++) {
    const vlin *x = vl_at(c, in[i2]);
    if (!x->known) continue;
    for (int32_t k2 = 0; k2 < x->nd; k2++) {
      if (dfind(u, dix(u, 0, (int)i2, k2)) != cj || stens(c, x->sv)->shape[k2] != st->shape[j] ||
          x->hi[k2] - x->lo[k2] != pt->shape[j])
        continue;
      l->lo[j] = x->lo[k2], l->hi[j] = x->hi[k2], l->dlo[j] = x->dlo[k2];
      return 1;
    }
  }
  return 0;
}

int guess_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in < 2) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  if (!guess_applies(c, pn)) return 0;
  uint32_t sin[MAXOPD];
  if (!guess_twin_inputs(c, pn, op, sin)) return 0;
  dsu u;
  if (!node_links(c, pn, op, &u)) return 0;
  int64_t k, n, dk;
  if (!known_part(c, pn, ru, &k, &n, &dk)) return 0;
  double f;
  int32_t fsrc;
  if (!known_factor(c, pn, ru, &f, &fsrc)) return 0;
  int guessed = 0;
  for (uint32_t i = 0; i < pn->n_in; i++) {
    if (vl_at(c, in[i])->known) continue;
    const vd_tensor_t *pt = ptens(c, in[i]), *st = stens(c, (int32_t)sin[i]);
    if (pt->ndim != st->ndim) continue;
    vlin l;
    guess_start(&l, (int32_t)sin[i], st->ndim, k, n, dk);
    l.f = f, l.fsrc = fsrc;
    int ok = 1;
    for (int32_t j = 0; j < pt->ndim && ok; j++) ok = guess_dim(c, &u, pn, i, st, pt, j, &l);
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
int guess_outputs(ictx *c, uint32_t gi, int op) {
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
    guess_start(&l, (int32_t)sout[o], st->ndim, 0, 1, 0);
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
