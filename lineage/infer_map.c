/*
 * lineage/infer_map.c - the MAP rule of the lineage inference: the single node that computes
 * the same operator on the single values a parallel node's inputs hold,
 * and the dimension links of its reduction rule (map_node).
 */
#include "infer.h"

/* ---- MAP: single node match and dimension links ------------------------ */

/* 1 when single nodes a and b have outputs of the same roots (equal values). */
int same_outputs(const ictx *c, const vd_gnode_t *a, const vd_gnode_t *b) {
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

/* Whether single node inputs sin are the single values the parallel inputs
 * in hold (exact values, or values of the same copy root), input i against
 * single input i, or against single input 1 - i when swap (two inputs). */
static int reads_inputs(const ictx *c, const vd_gnode_t *pn, const uint32_t *in, const uint32_t *sin, int partial,
                        int exact, int swap) {
  for (uint32_t i = 0; i < pn->n_in; i++) {
    const vlin *x = vl_at(c, in[i]);
    if (partial && (!x->known || x->sv < 0)) continue;
    uint32_t s = sin[swap ? 1 - i : i];
    if (exact ? s != (uint32_t)x->sv : c->sroot[s] != c->sroot[x->sv]) return 0;
  }
  return 1;
}

/* Whether a binary add or mul of two same-shape tensors (no scalar) may be
 * matched with its operands in the other order (issue 26: inference must not
 * depend on how either side orders a commutative operator's operands).
 * Same shapes on both sides, so the operator's dimension links are the same
 * under the swap; a wrong match would only give a candidate its stage
 * refutes. */
static int commutes(const ictx *c, const vd_gnode_t *pn, int op, const vd_gnode_t *sn) {
  if ((op != VD_OP_ADD && op != VD_OP_MUL) || pn->n_in != 2 || sn->n_in != 2) return 0;
  if (vd_node_attr(c->pp, &c->pp->nodes[pn->pnode], "scalar")) return 0;
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *sin = vd_gnode_inputs(c->gs, sn);
  const vd_tensor_t *a = ptens(c, in[0]), *b = ptens(c, in[1]), *sa = stens(c, sin[0]), *sb = stens(c, sin[1]);
  return a->ndim == b->ndim && !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) &&
         sa->ndim == sb->ndim && !memcmp(sa->shape, sb->shape, (size_t)sa->ndim * sizeof(int64_t));
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
int32_t match_single_in(const ictx *c, const vd_gnode_t *pn, int op, int partial) {
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
        int ok = reads_inputs(c, pn, in, sin, partial, exact, 0);
        if (!ok && commutes(c, pn, op, sn)) ok = reads_inputs(c, pn, in, sin, partial, exact, 1);
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

int32_t match_single(const ictx *c, const vd_gnode_t *pn, int op) { return match_single_in(c, pn, op, 0); }

/* The Gs instance in microbatch mb of the single plan node named `name` on
 * rank `rank` with operator op, when exactly one exists (sbyname: single
 * plan nodes sorted by name). */
static int32_t single_named(const ictx *c, const char *name, int32_t rank, int op, int32_t mb) {
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
    if (c->sop[p] != op || c->sp->nodes[p].rank != rank) continue;
    for (int32_t g = c->sgfirst[p]; g >= 0; g = c->sgnext[g])
      if ((int32_t)c->gs->nodes[g].mb == mb) found = g, n_found++;
  }
  return n_found == 1 ? found : -1;
}

/* The one single multiref reading single value sv, else the one reading a
 * copy of it (its copy root's values); -1 if none or several.  Its fan-out
 * may differ from the parallel one's, so match_single, which pairs calls of
 * the same arity, does not apply. */
static int32_t single_multiref_of(const ictx *c, uint32_t sv) {
  uint32_t root = c->sroot[sv];
  for (int exact = 1; exact >= 0; exact--) {
    uint32_t q0 = exact ? 0 : c->rv_off[root], q1 = exact ? 1 : c->rv_off[root + 1];
    int32_t found = -1, n_found = 0;
    for (uint32_t q = q0; q < q1; q++) {
      const vd_value_t *x = &c->gs->values[exact ? sv : c->rv[q]];
      const uint32_t *cons = vd_value_consumers(c->gs, x);
      for (uint32_t k = 0; k < x->n_cons; k++)
        if (c->sop[c->gs->nodes[cons[k]].pnode] == VD_OP_MULTIREF && (int32_t)cons[k] != found)
          found = (int32_t)cons[k], n_found++;
    }
    if (n_found == 1) return found;
    if (n_found > 1) return -1;
  }
  return -1;
}

/* The single twin of multiref_backward Gp node gi when its fan-in differs
 * from the single one (a sum over an extra TP-entry branch), so that
 * match_single cannot find it: the backward of the single multiref that
 * copies what gi's forward multiref copies (single_multiref_of).  The forward is paired by
 * name inside the parallel plan (forward_partners), the backward by name
 * inside the single plan; no name is compared across the plans, which may
 * name everything differently.  Its inputs are then not the single node's,
 * but the candidate it yields is proven like any. */
int32_t multiref_twin(const ictx *c, uint32_t gi) {
  int32_t fp = c->fwd_of[gi];
  if (fp < 0) return -1;
  const vlin *l = vl_at(c, vd_gnode_inputs(c->gp, &c->gp->nodes[fp])[0]);
  if (!l->known || l->sv < 0) return -1;
  int32_t sf = single_multiref_of(c, (uint32_t)l->sv);
  if (sf < 0) return -1;
  const vd_gnode_t *sfn = &c->gs->nodes[sf];
  const vd_node_t *sfd = &c->sp->nodes[sfn->pnode];
  return single_named(c, vd_plan_s(c->sp, sfd->name), sfd->rank, VD_OP_MULTIREF_BACKWARD, sfn->mb);
}

/* Copy roots of the single graph: a value produced by identity,
 * contiguous, cast or multiref has its input's root.  rv lists the values
 * of each root (counting sort), so match_single finds every consumer of a
 * copy. */
vd_rc single_roots(ictx *c, vd_diag *d) {
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

int dix(const dsu *u, int out, int t, int dim) { return ((out ? u->n_in : 0) + t) * VD_MAX_DIMS + dim; }
int dfind(dsu *u, int x) {
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
int cmp_sname(const void *a, const void *b, void *arg) {
  const vd_plan_t *sp = arg;
  int r = strcmp(vd_plan_s(sp, sp->nodes[*(const uint32_t *)a].name), vd_plan_s(sp, sp->nodes[*(const uint32_t *)b].name));
  if (r) return r;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

int cmp_byname(const void *a, const void *b, void *arg) {
  const vd_plan_t *sort_plan = arg;
  const vd_node_t *x = &sort_plan->nodes[*(const uint32_t *)a], *y = &sort_plan->nodes[*(const uint32_t *)b];
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  int r = strcmp(vd_plan_s(sort_plan, x->name), vd_plan_s(sort_plan, y->name));
  if (r) return r;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* The sum form of a mean-like operator (mean -> sum, mean_backward ->
 * sum_backward; a sum is its own), or -1. */
static int sum_form(int op) {
  switch (op) {
  case VD_OP_SUM:
  case VD_OP_MEAN: return VD_OP_SUM;
  case VD_OP_SUM_BACKWARD:
  case VD_OP_MEAN_BACKWARD: return VD_OP_SUM_BACKWARD;
  default: return -1;
  }
}

static int is_mean(int op) { return op == VD_OP_MEAN || op == VD_OP_MEAN_BACKWARD; }

/* The forward partners of the Gp instances of backward plan node q (its
 * operator op), into fwd_of: per instance, the one Gp node of the same
 * microbatch among the instances of the plan nodes of q's rank, name and
 * layer whose operator's backward is op (or its sum form's), else -1.  They depend on names
 * and ranks only, so they are found once (the candidates once per plan
 * node, not per microbatch instance), in parallel: each q writes only its
 * own instances' entries. */
void forward_partners(ictx *c, uint32_t q, int op) {
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
    /* a block may copy two values (a multiref, a cast, a multiref again):
     * a multiref's backward sums one gradient per copy it made */
    uint32_t fanout = op == VD_OP_MULTIREF_BACKWARD ? nd->n_in : 0;
    for (size_t i = lo; i < c->pp->n_nodes; i++) {
      uint32_t p = c->byname[i];
      const vd_node_t *fd = &c->pp->nodes[p];
      if (fd->rank != nd->rank || strcmp(vd_plan_s(c->pp, fd->name), name)) break;
      if (c->pop[p] < 0 || fd->layer != nd->layer) continue;
      /* a sum's backward may follow a mean forward (and a mean's a sum):
       * the same slices, up to the constant reduction_twin accounts for */
      int bw = (int)vd_op_backward((vd_op_id)c->pop[p]);
      if (bw != op && (sum_form(op) < 0 || sum_form(bw) != sum_form(op))) continue;
      if (fanout && fd->n_out != fanout) continue;
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
 * scale and scale_backward (factor: the backward of a scale is the same
 * product, so a mixed-precision loss-gradient scaling by 1024 undone by a
 * scale by 1/1024 is a factor 1 like any other pair), mul by a scalar, div
 * by a scalar (1/scalar); *s is it. */
int scaling(const vd_plan_t *p, const vd_node_t *nd, int op, double *s) {
  if (nd->n_in != 1) return 0;
  if (op == VD_OP_SCALE || op == VD_OP_SCALE_BACKWARD) {
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

int vd_lin_scaling(const vd_plan_t *p, const vd_node_t *nd, double *s) {
  vd_op_id op = vd_op_lookup(vd_node_op(p, nd));
  return (int)op >= 0 && op < VD_OP__COUNT && scaling(p, nd, (int)op, s);
}

/* 1 when node nd adds (or subtracts) a nonzero scalar: x + c is neither
 * linear in x (parts, factors) nor the identity (python's sum() starts
 * with 0 + x, which is). */
int adds_constant(const vd_plan_t *p, const vd_node_t *nd, int op) {
  return (op == VD_OP_ADD || op == VD_OP_SUB) && vd_node_attr(p, nd, "scalar") &&
         vd_node_attr_float(p, nd, "scalar", 0.0) != 0.0;
}

/* Whether output o of a MAP node reads input i (lin OTHER, CONST, PAIRED). */
int reads(const vd_lin_prop_rule *ru, uint32_t o, uint32_t i) {
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
int out_factor(const ictx *c, const vd_gnode_t *pn, const vd_gnode_t *sn, int op, const vd_lin_prop_rule *ru,
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
int node_links(const ictx *c, const vd_gnode_t *pn, int op, dsu *u) {
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

/* The single node matching Gp node pn, or -1; *subset = 1 when a
 * multiref_backward matched by name sums only a subset of its single twin's
 * inputs (its output is then never emitted, see vlin.noemit). */
static int32_t map_twin(const ictx *c, const vd_gnode_t *pn, int op, int *subset) {
  int32_t sm = match_single(c, pn, op);
  *subset = 0;
  if (sm < 0 && op == VD_OP_MULTIREF_BACKWARD) {
    sm = multiref_twin(c, (uint32_t)(pn - c->gp->nodes));
    const uint32_t *pin = vd_gnode_inputs(c->gp, pn);
    *subset = sm >= 0 && c->gs->nodes[sm].n_in > pn->n_in;
    for (uint32_t i = 0; i < pn->n_in && *subset; i++) *subset = !vl_at(c, pin[i])->noemit;
  }
  return sm;
}

/* The Gp node that last changed factor fo of output o of node gi: a read
 * input's with that factor, else gi itself (-1 when fo is 1). */
static int32_t factor_source(const ictx *c, uint32_t gi, const vd_lin_prop_rule *ru, uint32_t o, double fo) {
  if (fo == 1.0) return -1;
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  const uint32_t *in = vd_gnode_inputs(c->gp, pn);
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (reads(ru, o, i) && vl_at(c, in[i])->f == fo && vl_at(c, in[i])->fsrc >= 0) return vl_at(c, in[i])->fsrc;
  return (int32_t)gi;
}

/* One node's call as map_node sees it: its Gp and single nodes, the link
 * classes of their operand dimensions, the forward partner (or -1). */
typedef struct {
  const vd_gnode_t *pn;
  const uint32_t *in;
  dsu *u;
  int32_t fw;
  int op;
} map_call;

/* The input dims linked to output dim j (class cj) whose single extent is
 * st's: counts them (*n_link, of which *n_uni uniform) and returns the one
 * to slice from (a slice from one that is not uniform, a broadcast, wins). */
static const vlin *linked_input(const ictx *c, const map_call *m, int cj, const vd_tensor_t *st,
                                const vd_tensor_t *pt, int32_t j, int *n_link, int *n_uni) {
  const vlin *from = NULL;
  int32_t fk = 0;
  *n_link = 0, *n_uni = 0;
  for (uint32_t i = 0; i < m->pn->n_in; i++) {
    const vlin *x = vl_at(c, m->in[i]);
    for (int32_t k = 0; k < x->nd; k++) {
      if (dfind(m->u, dix(m->u, 0, (int)i, k)) != cj) continue;
      const vd_tensor_t *xs = stens(c, x->sv);
      if (xs->shape[k] != st->shape[j]) continue;
      (*n_link)++;
      int un = (x->uni >> k) & 1;
      *n_uni += un;
      if (lwidth(x, k) != pt->shape[j]) continue;
      if (!from || (((from->uni >> fk) & 1) && !un)) from = x, fk = k;
    }
  }
  return from;
}

/* Slice of output dim j taken from a linked input dim; 1 if found. */
static int slice_from_input(const ictx *c, const map_call *m, int cj, const vlin *from, const vd_tensor_t *st,
                            const vd_tensor_t *pt, int32_t j, vlin *l) {
  for (uint32_t i = 0; i < m->pn->n_in; i++) {
    const vlin *x = vl_at(c, m->in[i]);
    for (int32_t k = 0; k < x->nd; k++) {
      if (dfind(m->u, dix(m->u, 0, (int)i, k)) != cj) continue;
      const vd_tensor_t *xs = stens(c, x->sv);
      if (xs->shape[k] != st->shape[j] || lwidth(x, k) != pt->shape[j]) continue;
      if (x->split == k + 1 && l->split) continue; /* one split dim per value */
      if (from && x != from && (x->uni >> k) & 1) continue; /* a broadcast dim gives way */
      l->lo[j] = x->lo[k], l->hi[j] = x->hi[k], l->dlo[j] = x->dlo[k];
      if (x->split == k + 1) l->split = j + 1, l->si = x->si, l->ilo = x->ilo, l->ihi = x->ihi, l->dil = x->dil;
      return 1;
    }
  }
  return 0;
}

/* Slice of output dim j of output o from the forward input it is the
 * gradient of: input o when its single shape is the output's, else the
 * first input that has it (embedding_backward's table is input 1); 1 if
 * found. */
static int slice_from_forward(const ictx *c, const map_call *m, uint32_t o, const vd_tensor_t *st,
                              const vd_tensor_t *pt, int32_t j, vlin *l) {
  int32_t fw = m->fw;
  for (uint32_t q = 0; fw >= 0 && q <= c->gp->nodes[fw].n_in; q++) {
    uint32_t fi = q == 0 ? o : q - 1;
    if (fi >= c->gp->nodes[fw].n_in || (q > 0 && fi == o)) continue;
    const vlin *x = vl_at(c, vd_gnode_inputs(c->gp, &c->gp->nodes[fw])[fi]);
    if (!x->known || x->zero || x->split == j + 1 || x->nd != st->ndim) continue;
    const vd_tensor_t *xs = stens(c, x->sv);
    int same = 1;
    for (int32_t e = 0; e < st->ndim; e++) same &= xs->shape[e] == st->shape[e];
    if (same && x->hi[j] - x->lo[j] == pt->shape[j]) {
      l->lo[j] = x->lo[j], l->hi[j] = x->hi[j], l->dlo[j] = x->dlo[j];
      return 1;
    }
  }
  return 0;
}

/* Dim j of output o's lineage l (single tensor st, parallel pt); marks its
 * link class in cls_used; 0 when no slice fits. */
static int map_dim(const ictx *c, const map_call *m, uint32_t o, const vd_tensor_t *st, const vd_tensor_t *pt,
                   int32_t j, uint8_t *cls_used, vlin *l) {
  int cj = dfind(m->u, dix(m->u, 1, (int)o, j));
  cls_used[cj] = 1;
  int n_link, n_uni;
  const vlin *from = linked_input(c, m, cj, st, pt, j, &n_link, &n_uni);
  if (n_link && n_link == n_uni) l->uni |= 1u << j;
  if (pt->shape[j] == st->shape[j]) {
    l->lo[j] = 0, l->hi[j] = st->shape[j];
    return 1;
  }
  if (slice_from_input(c, m, cj, from, st, pt, j, l)) return 1;
  if (slice_from_forward(c, m, o, st, pt, j, l)) return 1;
  if (!n_link && m->op == VD_OP_EXPAND) {
    /* a broadcast dim: every slice of it holds the same values */
    l->lo[j] = 0, l->hi[j] = pt->shape[j];
    l->uni |= 1u << j;
    return 1;
  }
  return 0;
}

/* Contractions: a sliced input dimension that no output dimension keeps
 * makes output o a partial sum over its slices (linear operators only).
 * Folds them into the parts (*k, *n, *dk); 0 when they have no part form. */
static int contract_parts(const ictx *c, const map_call *m, const vd_lin_prop_rule *ru, uint32_t o,
                          uint8_t *cls_used, int64_t *k, int64_t *n, int64_t *dk) {
  for (uint32_t i = 0; i < m->pn->n_in; i++) {
    if (!reads(ru, o, i)) continue;
    const vlin *x = vl_at(c, m->in[i]);
    const vd_tensor_t *xs = stens(c, x->sv);
    for (int32_t kd = 0; kd < x->nd; kd++) {
      int ck = dfind(m->u, dix(m->u, 0, (int)i, kd));
      int64_t w = x->hi[kd] - x->lo[kd];
      if (!cls_used[ck] && x->split == kd + 1) return 0; /* a split dim contracted: no part form */
      if (cls_used[ck] || w == xs->shape[kd]) continue;
      cls_used[ck] = 1; /* one contraction per class (x.b and dy.b sliced alike) */
      if (ru->lin == VD_PLIN_NONE || ru->lin == VD_PLIN_PAIRED || w <= 0 || xs->shape[kd] % w || x->lo[kd] % w ||
          x->dlo[kd] % w || ((x->uni >> kd) & 1))
        return 0;
      int64_t mm = xs->shape[kd] / w;
      *k = *k * mm + x->lo[kd] / w;
      *dk = *dk * mm + x->dlo[kd] / w;
      *n = *n * mm;
    }
  }
  return 1;
}

/* Elements a sum-form node adds up per output element (its backward: per
 * input element): the divisor of its mean form. */
static double reduced_count(const vd_graph_t *g, const vd_gnode_t *n, int op) {
  int64_t a = vd_tensor_numel(&g->plan->tensors[g->values[vd_gnode_inputs(g, n)[0]].tensor]);
  int64_t b = vd_tensor_numel(&g->plan->tensors[g->values[vd_gnode_outputs(g, n)[0]].tensor]);
  if (sum_form(op) == VD_OP_SUM_BACKWARD) {
    int64_t t = a;
    a = b, b = t;
  }
  return b > 0 ? (double)a / (double)b : 0.0;
}

/* Sum and mean are one linear operator up to a constant (issue 26: a sum
 * written as mean x count, a per-microbatch mean against a whole-batch sum,
 * a mean over a slice of the tokens).  For a sum-form node pn whose twin sm
 * (-1: none of pn's own operator) is a sum or a mean: reads pn with the sum
 * rule and returns the constant *rf that pn's value carries over its
 * twin's on those inputs, (1/count_p if pn is a mean) x (count_s if the
 * twin is one).  Returns the twin, or -1.  SOUNDNESS: it only proposes a
 * candidate; the stage proofs decide. */
static int32_t reduction_twin(const ictx *c, const vd_gnode_t *pn, int op, int32_t sm, double *rf) {
  *rf = 1.0;
  int sop = sm >= 0 ? op : is_mean(op) ? sum_form(op) : sum_form(op) == VD_OP_SUM ? VD_OP_MEAN : VD_OP_MEAN_BACKWARD;
  if (sm < 0) sm = match_single(c, pn, sop);
  if (sm < 0) return -1;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  const vd_attr_t *a = vd_node_attr(c->pp, &c->pp->nodes[pn->pnode], "dims");
  const vd_attr_t *b = vd_node_attr(c->sp, &c->sp->nodes[sn->pnode], "dims");
  if (!a != !b || (a && !vd_attr_equal(c->pp, a, c->sp, b))) return -1;
  double cp = reduced_count(c->gp, pn, op), cs = reduced_count(c->gs, sn, sop);
  if (cp <= 0.0 || cs <= 0.0) return -1;
  *rf = (is_mean(op) ? 1.0 / cp : 1.0) * (is_mean(sop) ? cs : 1.0);
  return sm;
}

void map_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru) {
  const vd_gnode_t *pn = &c->gp->nodes[gi];
  if (pn->n_in + pn->n_out > MAXOPD) return;
  int subset;
  int32_t sm = map_twin(c, pn, op, &subset);
  double rf = 1.0;
  if (sum_form(op) >= 0) {
    sm = reduction_twin(c, pn, op, sm, &rf);
    ru = &rules[sum_form(op)];
  }
  if (sm < 0) return;
  const vd_gnode_t *sn = &c->gs->nodes[sm];
  const uint32_t *in = vd_gnode_inputs(c->gp, pn), *out = vd_gnode_outputs(c->gp, pn);
  const uint32_t *sout = vd_gnode_outputs(c->gs, sn);
  for (uint32_t i = 0; i < pn->n_in; i++)
    if (!aligned_any(c, in[i])) return;
  dsu u;
  if (!node_links(c, pn, op, &u)) return;
  map_call m = {pn, in, &u, ru->bwd_pair ? forward_partner(c, gi) : -1, op};
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
    l.f = fo * rf;
    l.fsrc = rf == 1.0 ? factor_source(c, gi, ru, o, fo) : l.f != 1.0 ? (int32_t)gi : -1;
    l.sv = (int32_t)sout[o];
    l.nd = st->ndim;
    int ok = 1;
    uint8_t cls_used[2 * MAXOPD * VD_MAX_DIMS];
    memset(cls_used, 0, sizeof(cls_used));
    for (int32_t j = 0; j < pt->ndim && ok; j++) ok = map_dim(c, &m, o, st, pt, j, cls_used, &l);
    if (!ok || !contract_parts(c, &m, ru, o, cls_used, &pk, &pnn, &pdk)) continue;
    l.k0 = pk, l.cnt = 1, l.n = pnn, l.dk = pdk;
    l.noemit = (uint8_t)subset;
    vl_put(c, out[o], &l);
  }
}
