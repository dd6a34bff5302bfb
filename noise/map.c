/*
 * noise/map.c - the bounds and the observed deviations of the single-device
 * values, through the lineage pieces (docs/noise.md, "Mapping").
 *
 * For every lineage of the table (a single value and the parallel pieces
 * that hold it: slices, partial sums, replicas) the parallel value of each
 * slice is rebuilt the way the lineage says: a copy held whole is compared
 * as it is (every copy, the worst one counts: replicas are compared with the
 * single value and so with each other), the parts of a partial sum are added
 * (in double precision: the comparison adds no rounding of its own).  The
 * slices' errors add in the 2-norm; the bound of a slice is the largest of
 * its copies' bounds, or the parts' bounds added (realistic: in quadrature).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "noise_int.h"

const char *const vd_noise_status_names[5] = {"bound", "within rounding", "beyond rounding", "missing",
                                              "no bound"};

typedef struct {
  uint32_t x;       /* gpx value */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  int64_t k, n;
} inst_t;

static int cmp_inst(const void *a, const void *b) {
  const inst_t *x = a, *y = b;
  for (int i = 0; i < VD_MAX_DIMS; i++) {
    if (x->lo[i] != y->lo[i]) return x->lo[i] < y->lo[i] ? -1 : 1;
    if (x->hi[i] != y->hi[i]) return x->hi[i] < y->hi[i] ? -1 : 1;
  }
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  if (x->k != y->k) return x->k < y->k ? -1 : 1;
  return (x->x > y->x) - (x->x < y->x);
}

static int same_slice(const inst_t *a, const inst_t *b) {
  return memcmp(a->lo, b->lo, sizeof(a->lo)) == 0 && memcmp(a->hi, b->hi, sizeof(a->hi)) == 0;
}

/* Flat index in the single tensor of element e of a slice [lo, hi). */
static int64_t single_index(const vd_tensor_t *st, const inst_t *s, int64_t e) {
  int64_t idx[VD_MAX_DIMS], r = e;
  for (int32_t k = st->ndim - 1; k >= 0; k--) {
    int64_t ext = s->hi[k] - s->lo[k];
    idx[k] = r % ext;
    r /= ext;
  }
  int64_t flat = 0;
  for (int32_t k = 0; k < st->ndim; k++) flat = flat * st->shape[k] + s->lo[k] + idx[k];
  return flat;
}

static double diff(double p, double s) {
  if (p == s) return 0;
  if (isnan(p) && isnan(s)) return 0;
  double d = p - s;
  return isfinite(d) ? d : INFINITY;
}

static void row_name(const vd_noise_ctx *c, uint32_t sv, vd_noise_row *row) {
  const vd_value_t *x = &c->gs.values[sv];
  const vd_tensor_t *t = &c->sp->tensors[x->tensor];
  const char *tn = vd_plan_s(c->sp, t->name);
  const char *fam = "fwd";
  if (t->role == VD_ROLE_INPUT) fam = "input";
  else if (t->role == VD_ROLE_WEIGHT) fam = x->is_initial ? "weight" : "update";
  else if (t->role == VD_ROLE_OPTSTATE) fam = x->is_initial ? "optstate" : "update";
  else if (t->role == VD_ROLE_LOSS) fam = "loss";
  if (x->producer >= 0) {
    const vd_node_t *pn = &c->sp->nodes[c->gs.nodes[x->producer].pnode];
    if (t->role == VD_ROLE_ACT || t->role == VD_ROLE_GRAD)
      fam = pn->phase == VD_PHASE_FWD ? "fwd" : pn->phase == VD_PHASE_OPT ? "opt" : "bwd";
    if (tn[0])
      snprintf(row->name, sizeof(row->name), "%s%s", tn, x->is_final && !x->is_initial ? " (updated)" : "");
    else
      snprintf(row->name, sizeof(row->name), "%.100s %s #%lld", vd_plan_s(c->sp, pn->name),
               vd_node_op(c->sp, pn), (long long)t->id);
  } else {
    snprintf(row->name, sizeof(row->name), "%s", tn[0] ? tn : "(unnamed input)");
  }
  snprintf(row->family, sizeof(row->family), "%s", fam);
}

typedef struct {
  int64_t pos;
  uint32_t stensor;
  uint8_t initial;
  size_t row;
} order_t;

static int cmp_order(const void *a, const void *b) {
  const order_t *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  if (x->stensor != y->stensor) return x->stensor < y->stensor ? -1 : 1;
  return (y->initial > x->initial) - (y->initial < x->initial);
}

/* One lineage's working state (one_lineage and its steps). */
typedef struct {
  vd_noise_ctx *c;
  const vd_tensor_t *st; /* the single tensor */
  const double *sv;      /* its values in the single dump, or NULL */
  int64_t sn;            /* its elements */
  inst_t *ins;           /* the parallel instances of its pieces */
  size_t ni;
  double *acc, *acw, *acr; /* a partial sum's parts added: values, worst-case bounds, variances */
  double *wsv, *rsv;       /* per single element: the worst-case bound, the variance */
  int any_missing, any_dumped, any_unknown, bitid;
  char why[160];           /* the first missing instance */
} lineage_work;

static void lineage_work_free(lineage_work *lw) {
  VD_FREE_ALL(lw->ins, lw->acc, lw->acw, lw->wsv, lw->rsv, lw->acr);
}

/* Instances: every piece, all_rep pieces once per replica; one vector per single element. */
static vd_rc lineage_work_alloc(lineage_work *lw, const vd_lineage *L, vd_diag *d) {
  const vd_lin_table *lt = &lw->c->lt;
  size_t cap = 0;
  for (uint32_t i = 0; i < L->n_pieces; i++) {
    const vd_lin_piece *p = &lt->pieces[L->piece_off + i];
    cap += p->all_rep ? (size_t)lt->replicas : 1;
  }
  size_t sn = (size_t)(lw->sn > 0 ? lw->sn : 1);
  lw->ins = vd_calloc(cap + 1, sizeof(*lw->ins));
  lw->acc = vd_calloc(sn, sizeof(double));
  lw->acw = vd_calloc(sn, sizeof(double));
  lw->wsv = vd_calloc(sn, sizeof(double));
  lw->rsv = vd_calloc(sn, sizeof(double));
  lw->acr = vd_calloc(sn, sizeof(double));
  if (!lw->ins || !lw->acc || !lw->acw || !lw->wsv || !lw->rsv || !lw->acr) {
    lineage_work_free(lw);
    return VD_OOM(d);
  }
  return VD_OK;
}

/* The instance of piece pi on replica rep: its gpx value (the last, or first for an initial
 * piece) and slice; notes whether it is missing, dumped, without a bound. */
static void add_instance(lineage_work *lw, uint32_t pi, int32_t rep) {
  vd_noise_ctx *c = lw->c;
  const vd_lin_piece *p = &c->lt.pieces[pi];
  int32_t x = p->initial ? vd_graph_first(&c->gpx, p->ptensor, rep, p->mb)
                         : vd_graph_last(&c->gpx, p->ptensor, rep, p->mb);
  if (x < 0) return;
  inst_t *s = &lw->ins[lw->ni++];
  s->x = (uint32_t)x;
  memset(s->lo, 0, sizeof(s->lo));
  memset(s->hi, 0, sizeof(s->hi));
  vd_lin_piece_at(&c->lt, pi, rep, s->lo, s->hi);
  s->k = p->part_k;
  s->n = p->part_n;
  if (!c->val[x]) {
    lw->any_missing = 1;
    if (!lw->why[0])
      snprintf(lw->why, sizeof(lw->why), "parallel tensor %lld (replica %d) has no value",
               (long long)c->pp->tensors[p->ptensor].id, rep);
  } else if (c->pd && !c->dumped[x]) {
    lw->any_missing = 1;
    if (!lw->why[0])
      snprintf(lw->why, sizeof(lw->why), "parallel tensor %lld (replica %d) is not in the parallel dump",
               (long long)c->pp->tensors[p->ptensor].id, rep);
  } else {
    lw->any_dumped |= c->dumped[x];
  }
  if (c->val[x] && !c->known[x]) lw->any_unknown = 1;
}

static void collect_instances(lineage_work *lw, const vd_lineage *L) {
  const vd_lin_table *lt = &lw->c->lt;
  for (uint32_t i = 0; i < L->n_pieces; i++) {
    uint32_t pi = L->piece_off + i;
    const vd_lin_piece *p = &lt->pieces[pi];
    int32_t r0 = p->all_rep ? 0 : p->replica, r1 = p->all_rep ? lt->replicas : p->replica + 1;
    for (int32_t rep = r0; rep < r1; rep++) add_instance(lw, pi, rep);
  }
}

/* Copies held whole, instances [g, h) of m elements: the largest squared deviation (*o), the
 * first copy's squared norm (*rn); each single element's bounds the largest of its copies'. */
static void copies_deviation(lineage_work *lw, size_t g, size_t h, int64_t m, double *o, double *rn) {
  vd_noise_ctx *c = lw->c;
  for (size_t q = g; q < h; q++) {
    const inst_t *s = &lw->ins[q];
    const double *pv = c->val[s->x];
    if (!pv) continue;
    double oo = 0, nn = 0;
    for (int64_t e = 0; e < m; e++) {
      nn += pv[e] * pv[e];
      if (lw->sv) {
        double dd = diff(pv[e], lw->sv[single_index(lw->st, s, e)]);
        oo += dd * dd;
      }
    }
    if (oo > *o) *o = oo;
    if (q == g) *rn = nn;
    const double *er = c->erv[s->x];
    if (er)
      for (int64_t e = 0; e < m; e++) {
        int64_t si = single_index(lw->st, s, e);
        if (!(er[e] * er[e] <= lw->rsv[si])) lw->rsv[si] = er[e] * er[e];
      }
    const double *ew = c->ewv[s->x];
    if (ew)
      for (int64_t e = 0; e < m; e++) {
        int64_t si = single_index(lw->st, s, e);
        if (!(ew[e] <= lw->wsv[si])) lw->wsv[si] = ew[e];
      }
    lw->bitid &= c->bitid[s->x];
  }
}

/* The parts of a partial sum, instances [g, h) of m elements: one copy of each part added (in
 * double), plus the single plan's roundings of that sum; the squared deviation (*o) and norm (*rn). */
static void parts_deviation(lineage_work *lw, size_t g, size_t h, int64_t m, double *o, double *rn) {
  vd_noise_ctx *c = lw->c;
  const vd_tensor_t *st = lw->st;
  double *acc = lw->acc, *acw = lw->acw, *acr = lw->acr;
  lw->bitid = 0;
  for (int64_t e = 0; e < m; e++) acc[e] = acw[e] = acr[e] = 0;
  int64_t lastk = -1;
  for (size_t q = g; q < h; q++) {
    if (lw->ins[q].k == lastk) continue; /* one copy of each part */
    lastk = lw->ins[q].k;
    const double *pv = c->val[lw->ins[q].x];
    if (!pv) continue;
    for (int64_t e = 0; e < m; e++) acc[e] += pv[e];
    const double *ew = c->ewv[lw->ins[q].x];
    if (ew)
      for (int64_t e = 0; e < m; e++) acw[e] += ew[e];
    const double *er = c->erv[lw->ins[q].x];
    if (er)
      for (int64_t e = 0; e < m; e++) acr[e] += er[e] * er[e];
  }
  /* the single plan adds these parts in floating point where the comparison adds them
     exactly: its roundings, n - 1 additions per element */
  const inst_t *s = &lw->ins[g];
  double us = vd_noise_unit_of_dtype(st->dtype);
  if (c->o->dtype != VD_NOISE_PLAN && us > 0) us = vd_noise_unit(c->o->dtype);
  double gn1 = vd_noise_gamma((double)(s->n - 1), us);
  for (int64_t e = 0; e < m; e++) {
    int64_t si = single_index(st, s, e);
    acr[e] += VD_NOISE_RV * us * us * (double)(s->n - 1) * acc[e] * acc[e];
    acw[e] += gn1 * fabs(acc[e]) * (double)s->n;
    if (!(acw[e] <= lw->wsv[si])) lw->wsv[si] = acw[e];
    if (!(acr[e] <= lw->rsv[si])) lw->rsv[si] = acr[e];
  }
  for (int64_t e = 0; e < m; e++) {
    *rn += acc[e] * acc[e];
    if (lw->sv) {
      double dd = diff(acc[e], lw->sv[single_index(st, s, e)]);
      *o += dd * dd;
    }
  }
}

/* The sorted instances, slice by slice, each slice grouped by part count: the squared
 * deviations (*obs2) and norms (*rn2) of the slices added, each slice's the largest of its groups'. */
static void slices_deviation(lineage_work *lw, double *obs2, double *rn2) {
  const inst_t *ins = lw->ins;
  size_t ni = lw->ni;
  for (size_t a = 0; a < ni;) {
    size_t b = a;
    while (b < ni && same_slice(&ins[a], &ins[b])) b++;
    /* one slice [a, b): groups by part count */
    double s_obs = 0, s_rn = 0;
    int64_t m = vd_tensor_numel(&lw->c->pp->tensors[lw->c->gpx.values[ins[a].x].tensor]);
    for (size_t g = a; g < b;) {
      size_t h = g;
      while (h < b && ins[h].n == ins[g].n) h++;
      double o = 0, rn = 0;
      if (ins[g].n == 1)
        copies_deviation(lw, g, h, m, &o, &rn);
      else
        parts_deviation(lw, g, h, m, &o, &rn);
      if (o > s_obs) s_obs = o;
      if (rn > s_rn) s_rn = rn;
      g = h;
    }
    *obs2 += s_obs;
    *rn2 += s_rn;
    a = b;
  }
}

/* The row's norm, bounds (relative to the norm) and observed deviation. */
static void row_bounds(const lineage_work *lw, double obs2, double rn2, vd_noise_row *row) {
  const vd_noise_ctx *c = lw->c;
  const double *sv = lw->sv;
  int64_t sn = lw->sn;
  double sn2 = 0;
  if (sv)
    for (int64_t e = 0; e < sn; e++) sn2 += sv[e] * sv[e];
  row->norm = sqrt(sv ? sn2 : rn2);
  double den = row->norm > 0 ? row->norm : 1.0;
  double lambda = c->o->lambda > 0 ? c->o->lambda : 3.0;
  double rv2 = 0;
  for (int64_t e = 0; e < sn; e++) rv2 += lw->rsv[e];
  /* rounding is quantised: where two values differ they differ by at least an ulp, so a bound
     below one ulp of the largest element is no bound for a small tensor (one flip is enough) */
  double ulp1 = 0;
  if (rv2 > 0 && sv) {
    double u = c->o->dtype != VD_NOISE_PLAN ? vd_noise_unit(c->o->dtype) : vd_noise_unit_of_dtype(lw->st->dtype);
    double mx = 0;
    for (int64_t e = 0; e < sn; e++)
      if (fabs(sv[e]) > mx) mx = fabs(sv[e]);
    ulp1 = 2.0 * u * mx;
  }
  row->realistic = (lambda * sqrt(rv2) + ulp1) / den;
  double wc2 = 0;
  for (int64_t e = 0; e < sn; e++) wc2 += lw->wsv[e] * lw->wsv[e];
  row->worst = sqrt(wc2) / den; /* componentwise bound, measured like the deviation */
  row->bitid = (uint8_t)lw->bitid;
  row->abs_observed = sqrt(obs2);
  row->observed = c->sd ? row->abs_observed / den : -1;
}

static void row_status(const lineage_work *lw, vd_noise_row *row) {
  if (!lw->c->sd) {
    row->status = lw->any_unknown ? VD_NOISE_NOBOUND : VD_NOISE_BOUND;
  } else if (!lw->sv || lw->any_missing) {
    row->status = VD_NOISE_MISSING;
    snprintf(row->why, sizeof(row->why), "%s",
             !lw->sv ? "the single dump has no value of this tensor" : lw->why);
  } else if (lw->any_unknown) {
    row->status = VD_NOISE_NOBOUND;
    snprintf(row->why, sizeof(row->why), "an input of its computation has no value in the parallel run");
  } else if (lw->bitid) {
    row->status = row->abs_observed > 0 ? VD_NOISE_BEYOND : VD_NOISE_WITHIN;
  } else {
    row->status = row->observed <= row->realistic * (1.0 + 1e-9) ? VD_NOISE_WITHIN : VD_NOISE_BEYOND;
  }
}

/* One lineage: fills row (status set by the caller's rules). Returns 0 when
 * the value was recorded on neither side (a decomposed intermediate). */
static vd_rc one_lineage(vd_noise_ctx *c, const vd_lineage *L, vd_noise_row *row, int *recorded, vd_diag *d) {
  lineage_work lw;
  memset(&lw, 0, sizeof(lw));
  lw.c = c;
  lw.st = &c->sp->tensors[L->stensor];
  lw.sn = vd_tensor_numel(lw.st);
  int64_t nsd = 0;
  lw.sv = vd_noise_i_dumped(c->sd, &c->gs, L->svalue, &nsd);
  if (lw.sv && nsd != lw.sn) {
    char rec[64];
    snprintf(rec, sizeof(rec), "tensor %lld", (long long)lw.st->id);
    VD_FAIL(d, VD_EINPUT, c->o->sm, rec, "n", "the single dump has %lld values, the tensor %lld elements",
            (long long)nsd, (long long)lw.sn);
  }
  VD_CHECK(lineage_work_alloc(&lw, L, d));
  collect_instances(&lw, L);
  *recorded = 1;
  if (c->sd && !lw.sv && !lw.any_dumped) *recorded = 0; /* a value the real runs never had (decomposition) */
  row->n_pieces = (uint32_t)lw.ni;
  qsort(lw.ins, lw.ni, sizeof(*lw.ins), cmp_inst);
  lw.bitid = lw.ni > 0;
  double obs2 = 0, rn2 = 0;
  slices_deviation(&lw, &obs2, &rn2);
  row_bounds(&lw, obs2, rn2, row);
  row_status(&lw, row);
  lineage_work_free(&lw);
  return VD_OK;
}

/* Is gpx value v mapped: an initial value, or a tensor with a lineage (annotated or inferred)? */
static int mapped(const vd_noise_ctx *c, uint32_t v) {
  return c->gpx.values[v].is_initial || c->pp->tensors[c->gpx.values[v].tensor].has_lin;
}

/* The first point of departure of the first tensor beyond rounding (docs/noise.md): walking back
 * (breadth first) from the parallel pieces of that single tensor through the values with no
 * single-device counterpart (no lineage), the producers of those values.  The one named is the node
 * where lineage inference stopped when the walk reaches it (the lineages were lost there, and it is
 * the node the verifier's finding names); else the nearest producer that carries data from a mapped
 * value into the un-mapped region; else the nearest producer.  A node that reads nothing mapped, or
 * whose output is zero everywhere (a buffer created empty: zeros_like(x) is captured as x scaled by
 * 0), carries no data.  -1 when every input the pieces' producers read is mapped, or when lineage
 * inference stopped at a piece's own producer (the first beyond tensor is itself the departure). */
static vd_rc find_departure(vd_noise_ctx *c, vd_noise_result *r, int64_t c_stuck, vd_diag *d) {
  const vd_graph_t *g = &c->gpx;
  const vd_noise_row *row = &r->rows[r->first_beyond];
  const vd_lin_table *lt = &c->lt;
  const vd_lineage *L = NULL;
  for (size_t li = 0; li < lt->n_lins && !L; li++)
    if (lt->lins[li].svalue == row->svalue && lt->lins[li].initial == row->initial) L = &lt->lins[li];
  if (!L) return VD_OK;
  uint8_t *seen = vd_calloc(g->n_values + 1, 1);
  uint32_t *stack = vd_calloc(g->n_values + 1, sizeof(uint32_t));
  if (!seen || !stack) {
    vd_free(seen);
    vd_free(stack);
    return VD_OOM(d);
  }
  size_t sp = 0;
  for (uint32_t i = 0; i < L->n_pieces; i++) {
    const vd_lin_piece *p = &lt->pieces[L->piece_off + i];
    int32_t r0 = p->all_rep ? 0 : p->replica, r1 = p->all_rep ? lt->replicas : p->replica + 1;
    for (int32_t rep = r0; rep < r1; rep++) {
      int32_t x = p->initial ? vd_graph_first(g, p->ptensor, rep, p->mb) : vd_graph_last(g, p->ptensor, rep, p->mb);
      if (x >= 0 && !seen[x]) {
        seen[x] = 1;
        stack[sp++] = (uint32_t)x;
      }
    }
  }
  int64_t best = -1, best_src = -1, stuck = -1; /* gpx nodes: carrying data; any; the stuck node */
  int piece_stuck = 0;
  for (size_t head = 0; head < sp; head++) {
    uint32_t x = stack[head];
    int32_t k = g->values[x].producer;
    if (k < 0) continue;
    const vd_gnode_t *gn = &g->nodes[k];
    const uint32_t *iv = vd_gnode_inputs(g, gn);
    int reads_mapped = 0;
    for (uint32_t i = 0; i < gn->n_in; i++) {
      uint32_t u = iv[i];
      if (mapped(c, u)) {
        reads_mapped = 1;
        continue;
      }
      if (!seen[u]) {
        seen[u] = 1;
        stack[sp++] = u;
      }
    }
    if (mapped(c, x)) { /* a piece itself: its producer is the row's own node */
      if ((int64_t)gn->pnode == c_stuck) piece_stuck = 1;
      continue;
    }
    /* an output that is zero everywhere carries nothing of what the node read (a buffer created
       empty: zeros_like(x) is captured as x scaled by 0): a source, not a departure */
    if (reads_mapped && c->val[x]) {
      int64_t n = vd_tensor_numel(&c->pp->tensors[g->values[x].tensor]), e = 0;
      while (e < n && c->val[x][e] == 0) e++;
      if (e == n) reads_mapped = 0;
    }
    if (reads_mapped && best < 0) best = k;
    if (best_src < 0) best_src = k;
    if (stuck < 0 && (int64_t)gn->pnode == c_stuck) stuck = k;
  }
  if (stuck >= 0) best = stuck;
  if (best < 0) best = best_src;
  if (piece_stuck) best = -1; /* lineage inference stopped at the tensor's own producer: it is the departure */
  r->departure_node = best >= 0 ? (int64_t)g->nodes[best].pnode : -1;
  vd_free(seen);
  vd_free(stack);
  return VD_OK;
}

vd_rc vd_noise_i_map(vd_noise_ctx *c, vd_noise_result *r, vd_diag *d) {
  const vd_lin_table *lt = &c->lt;
  r->rows = vd_calloc(lt->n_lins + 1, sizeof(*r->rows));
  order_t *ord = vd_calloc(lt->n_lins + 1, sizeof(*ord));
  int64_t *tpos = vd_calloc(c->gs.n_nodes + 1, sizeof(int64_t));
  if (!r->rows || !ord || !tpos) {
    vd_free(ord);
    vd_free(tpos);
    return VD_OOM(d);
  }
  for (size_t i = 0; i < c->gs.n_nodes; i++) tpos[c->gs.topo[i]] = (int64_t)i;
  size_t n = 0;
  vd_rc rc = VD_OK;
  for (size_t li = 0; li < lt->n_lins; li++) {
    const vd_lineage *L = &lt->lins[li];
    vd_noise_row row;
    memset(&row, 0, sizeof(row));
    int recorded = 1;
    if ((rc = one_lineage(c, L, &row, &recorded, d)) != VD_OK) break;
    if (!recorded) {
      r->n_unrecorded++;
      continue;
    }
    row.svalue = L->svalue;
    row.stensor = L->stensor;
    row.id = c->sp->tensors[L->stensor].id;
    row.initial = L->initial;
    row_name(c, L->svalue, &row);
    const vd_value_t *x = &c->gs.values[L->svalue];
    ord[n].pos = x->producer >= 0 ? tpos[x->producer] : -1;
    ord[n].stensor = L->stensor;
    ord[n].initial = L->initial;
    ord[n].row = n;
    r->rows[n++] = row;
  }
  if (rc == VD_OK) {
    qsort(ord, n, sizeof(*ord), cmp_order);
    vd_noise_row *sorted = vd_calloc(n + 1, sizeof(*sorted));
    if (!sorted) {
      rc = VD_OOM(d);
    } else {
      for (size_t i = 0; i < n; i++) sorted[i] = r->rows[ord[i].row];
      vd_free(r->rows);
      r->rows = sorted;
      r->n_rows = n;
      r->first_beyond = r->first_missing = -1;
      for (size_t i = 0; i < n; i++) {
        r->n_count[r->rows[i].status]++;
        r->n_bitid += r->rows[i].bitid;
        if (r->rows[i].status == VD_NOISE_BEYOND && r->first_beyond < 0) r->first_beyond = (int64_t)i;
        if (r->rows[i].status == VD_NOISE_MISSING && r->first_missing < 0) r->first_missing = (int64_t)i;
      }
      r->departure_node = -1;
      if (r->first_beyond >= 0) rc = find_departure(c, r, r->infer.stuck_node, d);
    }
  }
  vd_free(ord);
  vd_free(tpos);
  return rc;
}
