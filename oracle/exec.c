/*
 * oracle/exec.c - the numeric executor (see exec.h for the contract).
 *
 * Both plans become SSA graphs (graph/graph.h, every DP replica expanded);
 * every graph value gets one double array; nodes run in the graph's
 * topological order through the registry's evaluators (collectives are one
 * merged node carrying all participants, evaluated by the registry too).
 * Then the parallel plan's lineage claims are checked value by value.
 *
 * Not here: anything symbolic; floating-point tolerance beyond `tol` (plans
 * are compared on small shapes where double rounding is far below 1e-9).
 * Invariant: nothing but the seed drives the random values, and every loop
 * runs in index order, so two runs print the same report.
 */
#include "exec.h"
#include "exec_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "../graph/graph.h"
#include "../ops/ops.h"

const char *const vd_exec_status_names[3] = {"agree", "disagree", "unsupported"};

/* ---- random values ------------------------------------------------------- */

/* SplitMix64 (common/hash.h): the inputs are part of exec's output. */
static uint64_t mix64(uint64_t z) { return vd_hash_splitmix64(z); }
static double u01(uint64_t h) { return vd_hash_unit01(h); }

static int is_int_dtype(vd_dtype t) { return t == VD_DT_I64 || t == VD_DT_I32 || t == VD_DT_BOOL; }

/* ---- one executed plan ------------------------------------------------------ */

typedef struct {
  const vd_plan_t *p;
  const char *file;
  vd_graph_t g;
  double **val; /* per graph value, NULL until produced */
} run_t;

static void run_free(run_t *r) {
  VD_FREE_EACH(r->val, r->g.n_values);
  vd_graph_free(&r->g);
  memset(r, 0, sizeof(*r));
}

static const vd_tensor_t *vtensor(const run_t *r, uint32_t v) { return &r->p->tensors[r->g.values[v].tensor]; }

static vd_rc alloc_value(run_t *r, uint32_t v, vd_diag *d) {
  if (r->val[v]) return VD_OK;
  int64_t n = vd_tensor_numel(vtensor(r, v));
  r->val[v] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  return r->val[v] ? VD_OK : VD_OOM(d);
}

static void node_label(const vd_plan_t *p, uint32_t pnode, int32_t replica, int32_t mb, char *buf, size_t n) {
  const vd_node_t *nd = &p->nodes[pnode];
  snprintf(buf, n, "node %lld '%s' (%s, rank %d, replica %d, mb %d)", (long long)nd->id, vd_plan_s(p, nd->name),
           vd_node_op(p, nd), nd->rank, replica, mb);
}

/* Smallest index range of the consumers that index with integer value v
 * (the index column of ops.def: embedding ids, pick labels), followed
 * through data-movement operators that do not repeat elements
 * (depth-bounded). */
static int64_t int_bound(const run_t *r, uint32_t v, int depth) {
  int64_t best = INT64_MAX;
  const vd_value_t *val = &r->g.values[v];
  const uint32_t *cons = vd_value_consumers(&r->g, val);
  for (uint32_t c = 0; c < val->n_cons; c++) {
    const vd_gnode_t *gn = &r->g.nodes[cons[c]];
    const vd_node_t *pn = &r->p->nodes[gn->pnode];
    const uint32_t *in = vd_gnode_inputs(&r->g, gn), *out = vd_gnode_outputs(&r->g, gn);
    vd_op_id op = vd_op_lookup(vd_node_op(r->p, pn));
    int64_t b = INT64_MAX;
    if (op == VD_OP__UNKNOWN) continue;
    const vd_op_index *ix = vd_op_index_of(op);
    if (ix->slot >= 0 && gn->n_in == vd_op_get(op)->min_in && in[ix->slot] == v &&
        (!ix->from_out || gn->n_out == 1)) {
      const vd_tensor_t *x = vtensor(r, ix->from_out ? out[ix->t] : in[ix->t]);
      b = !ix->ndim || x->ndim == ix->ndim ? x->shape[ix->dim] + vd_node_attr_int(r->p, pn, ix->offset, 0) : INT64_MAX;
    } else if (depth < 8 && vd_op_has(op, VD_OPF_LINEAR) && vd_op_has(op, VD_OPF_MOVES) &&
               !vd_op_has(op, VD_OPF_REPEATS)) {
      for (uint32_t o = 0; o < gn->n_out; o++) {
        int64_t x = int_bound(r, out[o], depth + 1);
        if (x < b) b = x;
      }
    }
    if (b < best) best = b;
  }
  return best;
}

static void fill_random(double *x, int64_t n, uint64_t key, int kind, int64_t bound) {
  for (int64_t e = 0; e < n; e++) {
    double u = u01(mix64(key + (uint64_t)e));
    x[e] = kind == 1 ? floor(u * (double)bound) : kind == 2 ? 0.1 + 0.9 * u : 2.0 * u - 1.0;
  }
}

/* kind: 0 float, 1 integer in [0, bound), 2 positive (optimizer state) */
static int value_kind(const run_t *r, uint32_t v, int64_t *bound) {
  const vd_tensor_t *t = vtensor(r, v);
  if (is_int_dtype(t->dtype)) {
    int64_t b = int_bound(r, v, 0);
    *bound = b == INT64_MAX || b < 1 ? 2 : b;
    return 1;
  }
  return t->role == VD_ROLE_OPTSTATE ? 2 : 0;
}

/* Runs the graph's nodes in topological order.  On an unknown operator sets
 * *unsupported and the reason and stops (VD_OK).  Node errors: VD_EINPUT. */
static vd_rc eval_graph(run_t *r, int *unsupported, char *reason, size_t rsz, vd_diag *d) {
  vd_rc rc = VD_OK;
  size_t cap = 0;
  const double **in = NULL;
  double **out = NULL;
  vd_op_shape *is = NULL, *os = NULL;
  for (size_t k = 0; k < r->g.n_nodes; k++) {
    const vd_gnode_t *gn = &r->g.nodes[r->g.topo[k]];
    const vd_node_t *pn = &r->p->nodes[gn->pnode];
    char label[300];
    node_label(r->p, gn->pnode, gn->replica, gn->mb, label, sizeof(label));
    vd_op_id op = vd_op_lookup(vd_node_op(r->p, pn));
    if (op == VD_OP__UNKNOWN) {
      *unsupported = 1;
      snprintf(reason, rsz, "%s: operator '%s' is not in the registry", label, vd_node_op(r->p, pn));
      goto done;
    }
    size_t need = (gn->n_in > gn->n_out ? gn->n_in : gn->n_out) + 1;
    if (need > cap) {
      VD_FREE_ALL(in, out, is, os);
      in = vd_calloc(need, sizeof(*in));
      out = vd_calloc(need, sizeof(*out));
      is = vd_calloc(need, sizeof(*is));
      os = vd_calloc(need, sizeof(*os));
      cap = need;
      if (!in || !out || !is || !os) {
        rc = VD_OOM(d);
        goto done;
      }
    }
    const uint32_t *iv = vd_gnode_inputs(&r->g, gn), *ov = vd_gnode_outputs(&r->g, gn);
    for (uint32_t i = 0; i < gn->n_in; i++) {
      if (!r->val[iv[i]]) {
        rc = VD_ERR(d, VD_EINTERNAL, r->file, label, "inputs", "input value %u was never computed", iv[i]);
        goto done;
      }
      const vd_tensor_t *t = vtensor(r, iv[i]);
      in[i] = r->val[iv[i]];
      is[i].ndim = t->ndim;
      memcpy(is[i].d, t->shape, sizeof(t->shape));
    }
    for (uint32_t i = 0; i < gn->n_out; i++) {
      if ((rc = alloc_value(r, ov[i], d)) != VD_OK) goto done;
      const vd_tensor_t *t = vtensor(r, ov[i]);
      out[i] = r->val[ov[i]];
      os[i].ndim = t->ndim;
      memcpy(os[i].d, t->shape, sizeof(t->shape));
    }
    vd_op_call c = {.op = op, .plan = r->p, .node = pn, .record = label, .n_in = gn->n_in, .n_out = gn->n_out,
                    .n_part = gn->n_part ? gn->n_part : 1, .in = in, .in_shape = is, .out = out,
                    .out_shape = os, .diag = d};
    if ((rc = vd_op_eval(&c)) != VD_OK) {
      vd_diag_set_file(d, r->file);
      goto done;
    }
  }
done:
  VD_FREE_ALL(in, out, is, os);
  return rc;
}

static vd_rc build(run_t *r, const vd_plan_t *p, const char *file, vd_diag *d) {
  r->p = p;
  r->file = file;
  vd_graph_opts go = {.expand_replicas = 1};
  vd_rc rc = vd_graph_build(p, &go, &r->g, d);
  if (rc != VD_OK) {
    vd_diag_set_file(d, file);
    return rc;
  }
  r->val = vd_calloc(r->g.n_values + 1, sizeof(double *));
  return r->val ? VD_OK : VD_OOM(d);
}

/* ---- lineage ---------------------------------------------------------------- */


/* The annotation of tensor t for replica d and microbatch m (plans/plan.h). */
static vd_lineage_ann shifted(const vd_tensor_t *t, int32_t d, int32_t m) {
  vd_lineage_ann a = t->lin;
  int64_t mm = m < 0 ? 0 : m;
  for (int i = 0; i < VD_MAX_DIMS; i++) {
    a.lo[i] += d * t->lin.dp_shift[i] + mm * t->lin.mb_shift[i];
    a.hi[i] += d * t->lin.dp_shift[i] + mm * t->lin.mb_shift[i];
  }
  a.part_k += d * t->lin.dp_part + mm * t->lin.mb_part;
  return a;
}

/* Checks a shifted annotation of parallel tensor pt against single tensor st. */
static vd_rc check_ann(const vd_lineage_ann *a, const vd_tensor_t *pt, const vd_tensor_t *st, const vd_plan_t *pp,
                       const char *file, int32_t d, int32_t m, vd_diag *dg) {
  char rec[200];
  snprintf(rec, sizeof(rec), "tensor '%s' (replica %d, mb %d)", vd_plan_s(pp, pt->name), d, m);
  int64_t n = 1;
  for (int i = 0; i < st->ndim; i++) {
    if (a->lo[i] < 0 || a->hi[i] > st->shape[i] || a->lo[i] >= a->hi[i])
      VD_FAIL(dg, VD_EINPUT, file, rec, "lineage", "slice [%lld, %lld) of dim %d is outside single tensor extent %lld",
              (long long)a->lo[i], (long long)a->hi[i], i, (long long)st->shape[i]);
    n *= a->hi[i] - a->lo[i];
  }
  if (n != vd_tensor_numel(pt))
    VD_FAIL(dg, VD_EINPUT, file, rec, "lineage", "slice has %lld elements, the tensor %lld", (long long)n,
            (long long)vd_tensor_numel(pt));
  if (a->part_n < 1 || a->part_k < 0 || a->part_k >= a->part_n)
    VD_FAIL(dg, VD_EINPUT, file, rec, "lineage", "expected part k in [0, n), got %lld of %lld",
            (long long)a->part_k, (long long)a->part_n);
  return VD_OK;
}

/* Flat single-tensor index of slice element e (row-major over the slice). */
static int64_t slice_index(const vd_lineage_ann *a, const vd_tensor_t *st, int64_t e, int64_t *idx) {
  for (int i = st->ndim - 1; i >= 0; i--) {
    int64_t ext = a->hi[i] - a->lo[i];
    idx[i] = a->lo[i] + e % ext;
    e /= ext;
  }
  int64_t f = 0;
  for (int i = 0; i < st->ndim; i++) f = f * st->shape[i] + idx[i];
  return f;
}

static uint64_t ann_key(uint64_t seed, const vd_lineage_ann *a, int ndim, int64_t k) {
  uint64_t h = mix64(seed ^ 0x7061727473ull) ^ mix64((uint64_t)a->full);
  for (int i = 0; i < ndim; i++) h = mix64(h ^ (uint64_t)a->lo[i]) ^ mix64(h + (uint64_t)a->hi[i]);
  h = mix64(h ^ (uint64_t)a->part_n);
  return mix64(h + (uint64_t)k);
}

typedef struct {
  const vd_exec_opts *o;
  run_t s, q; /* single, parallel */
  vd_exec_i_id *ids;
  size_t n_ids;
} ctx_t;

static int64_t single_index(const ctx_t *c, int64_t id) {
  const vd_exec_i_id *f = vd_exec_i_ids_find(c->ids, c->n_ids, id);
  return f ? (int64_t)f->idx : -1;
}

/* Sets the single plan's initial values. */
static vd_rc init_single(ctx_t *c, vd_diag *d) {
  run_t *r = &c->s;
  for (size_t v = 0; v < r->g.n_values; v++) {
    if (!r->g.values[v].is_initial) continue;
    VD_CHECK(alloc_value(r, (uint32_t)v, d));
    int64_t bound = 0;
    int kind = value_kind(r, (uint32_t)v, &bound);
    const vd_tensor_t *t = vtensor(r, (uint32_t)v);
    fill_random(r->val[v], vd_tensor_numel(t), mix64(c->o->seed ^ mix64((uint64_t)t->id)), kind, bound);
  }
  return VD_OK;
}

/* Sets the parallel plan's initial values from the single plan's. */
static vd_rc init_parallel(ctx_t *c, vd_diag *d) {
  run_t *r = &c->q;
  for (size_t v = 0; v < r->g.n_values; v++) {
    const vd_value_t *val = &r->g.values[v];
    if (!val->is_initial) continue;
    VD_CHECK(alloc_value(r, (uint32_t)v, d));
    const vd_tensor_t *pt = vtensor(r, (uint32_t)v);
    int64_t n = vd_tensor_numel(pt);
    double *x = r->val[v];
    int64_t sidx = pt->has_lin ? single_index(c, pt->lin.full) : -1;
    int32_t sv = sidx >= 0 ? vd_graph_first(&c->s.g, (uint32_t)sidx, 0, -1) : -1;
    if (sv < 0 || !c->s.g.values[sv].is_initial) {
      /* No claim we can use: independent values. */
      int64_t bound = 0;
      int kind = value_kind(r, (uint32_t)v, &bound);
      uint64_t key = mix64(c->o->seed ^ 0x706172616c6cull) ^ mix64(((uint64_t)val->tensor << 32) ^
                                                                 ((uint64_t)(uint32_t)val->replica << 16) ^
                                                                 (uint64_t)(uint32_t)(val->mb + 1));
      fill_random(x, n, key, kind, bound);
      continue;
    }
    const vd_tensor_t *st = &c->s.p->tensors[sidx];
    vd_lineage_ann a = shifted(pt, val->replica, val->mb);
    VD_CHECK(check_ann(&a, pt, st, c->q.p, c->q.file, val->replica, val->mb, d));
    const double *full = c->s.val[sv];
    int integer = is_int_dtype(pt->dtype);
    int64_t idx[VD_MAX_DIMS];
    /* Part k of n is w_k - w_{k+1}, with w_0 the slice, w_n = 0 and w_1 ..
     * w_{n-1} random: the parts add up to the slice (the sum telescopes),
     * and each is O(elements) to make whatever n is (n <= LIN_PART_MAX;
     * making the last part as the slice minus all others was O(n) per
     * element). */
    int64_t k0 = a.part_k, n_parts = a.part_n;
    uint64_t key0 = ann_key(c->o->seed, &a, st->ndim, k0), key1 = ann_key(c->o->seed, &a, st->ndim, k0 + 1);
    for (int64_t e = 0; e < n; e++) {
      double w0, w1 = 0.0;
      if (k0 == 0) {
        w0 = full[slice_index(&a, st, e, idx)];
      } else {
        double u = u01(mix64(key0 + (uint64_t)e));
        w0 = integer ? floor(u * 5.0) - 2.0 : 2.0 * u - 1.0;
      }
      if (k0 + 1 < n_parts) {
        double u = u01(mix64(key1 + (uint64_t)e));
        w1 = integer ? floor(u * 5.0) - 2.0 : 2.0 * u - 1.0;
      }
      x[e] = n_parts == 1 ? w0 : w0 - w1;
    }
  }
  return VD_OK;
}

/* ---- comparison -------------------------------------------------------------- */

typedef struct {
  uint32_t t;
  int32_t d, m;
  uint32_t v;    /* parallel final value */
  int64_t sidx;  /* single tensor */
  int32_t sv;    /* single final value */
  vd_lineage_ann a;
  uint32_t group; /* UINT32_MAX for part 0 of 1 */
} inst_t;

static int cmp_ann(const vd_lineage_ann *x, const vd_lineage_ann *y, int nd) {
  if (x->full != y->full) return x->full < y->full ? -1 : 1;
  if (x->part_n != y->part_n) return x->part_n < y->part_n ? -1 : 1;
  for (int i = 0; i < nd; i++) {
    if (x->lo[i] != y->lo[i]) return x->lo[i] < y->lo[i] ? -1 : 1;
    if (x->hi[i] != y->hi[i]) return x->hi[i] < y->hi[i] ? -1 : 1;
  }
  return 0;
}

static double rel_err(double got, double want) {
  if (isnan(got) || isnan(want)) return isnan(got) && isnan(want) ? 0.0 : INFINITY;
  if (isinf(want) || isinf(got)) return got == want ? 0.0 : INFINITY;
  return fabs(got - want) / fmax(1.0, fabs(want));
}

static void set_first(vd_exec_result *r, const ctx_t *c, const inst_t *I, int64_t e, double want, double got,
                      double err, int missing) {
  vd_exec_mismatch *f = &r->first;
  const vd_tensor_t *pt = &c->q.p->tensors[I->t], *st = &c->s.p->tensors[I->sidx];
  memset(f, 0, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", vd_plan_s(c->q.p, pt->name));
  snprintf(f->full_name, sizeof(f->full_name), "%s", vd_plan_s(c->s.p, st->name));
  f->tensor_id = pt->id;
  f->full_id = st->id;
  f->stored_rank = pt->rank;
  f->replica = I->d;
  f->mb = I->m;
  f->rank = vd_graph_rank(&c->q.g, pt->rank, I->d);
  f->ndim = st->ndim;
  memcpy(f->lo, I->a.lo, sizeof(f->lo));
  memcpy(f->hi, I->a.hi, sizeof(f->hi));
  f->part_k = I->a.part_k;
  f->part_n = I->a.part_n;
  f->pndim = pt->ndim;
  vd_op_shape ps = {.ndim = pt->ndim};
  memcpy(ps.d, pt->shape, sizeof(pt->shape));
  int64_t ee = e < 0 ? 0 : e;
  for (int i = pt->ndim - 1; i >= 0; i--) {
    f->index[i] = ee % (ps.d[i] ? ps.d[i] : 1);
    ee /= ps.d[i] ? ps.d[i] : 1;
  }
  slice_index(&I->a, st, e < 0 ? 0 : e, f->full_index);
  f->expected = want;
  f->got = got;
  f->rel_err = err;
  f->missing_part = missing;
  r->has_mismatch = 1;
}

/* The comparison's working state: the annotated parallel instances and,
 * for those holding partial sums (part_n > 1), their groups (same
 * annotation of the same single tensor), the sum of each group's parts,
 * and per group the first instance holding each part k. */
typedef struct {
  inst_t *ins;
  size_t n_ins, cap;
  size_t n_groups;
  uint32_t *ord;      /* instances of partial sums by (group, part k, index) */
  size_t *gstart;     /* per group: its first position in ord (n_groups + 1 entries) */
  uint32_t *first;    /* per instance: the group's first instance holding the same part */
  double **sums;      /* per group: sum of one instance of every part */
  int64_t *missing;   /* per group: a part no instance holds, or -1 */
} cmp_t;

static void cmp_free(cmp_t *m) {
  if (m->sums)
    for (size_t gi = 0; gi < m->n_groups; gi++) vd_free(m->sums[gi]);
  VD_FREE_ALL(m->sums, m->missing, m->ord, m->gstart, m->first, m->ins);
}

/* 1. Every annotated instance with a value on both sides, in (tensor,
 * replica, mb) order.  An annotated tensor that never holds a value makes
 * the result DISAGREE (its claim is not met). */
static vd_rc collect_instances(ctx_t *c, vd_exec_result *r, cmp_t *m, vd_diag *d) {
  const vd_plan_t *pp = c->q.p;
  for (uint32_t t = 0; t < pp->n_tensors; t++) {
    const vd_tensor_t *pt = &pp->tensors[t];
    if (!pt->has_lin) continue;
    int64_t sidx = single_index(c, pt->lin.full);
    if (sidx < 0)
      return VD_ERR(d, VD_EINPUT, c->q.file, vd_plan_s(pp, pt->name), "lineage.full",
                    "expected a tensor id of the single plan, got %lld", (long long)pt->lin.full);
    int32_t sv = vd_graph_last(&c->s.g, (uint32_t)sidx, 0, -1);
    int32_t nm = (int32_t)(c->q.g.inst_per_replica ? c->q.g.inst_per_replica[t] : 1);
    int counted = 0, any_value = 0;
    for (int32_t dd = 0; dd < c->q.g.replicas; dd++)
      for (int32_t mi = 0; mi < (pt->scope == VD_SCOPE_PER_MB ? nm : 1); mi++) {
        int32_t mb = pt->scope == VD_SCOPE_PER_MB ? mi : -1;
        int32_t v = vd_graph_last(&c->q.g, t, dd, mb);
        any_value |= v >= 0 && c->q.val[v] != NULL;
        if (v < 0 || sv < 0 || !c->q.val[v] || !c->s.val[sv]) continue;
        inst_t I = {t, dd, mb, (uint32_t)v, sidx, sv, shifted(pt, dd, mb), UINT32_MAX};
        VD_CHECK(check_ann(&I.a, pt, &c->s.p->tensors[sidx], pp, c->q.file, dd, mb, d));
        if (VD_GROW(m->ins, m->cap, m->n_ins + 1)) return VD_OOM(d);
        m->ins[m->n_ins++] = I;
        counted = 1;
      }
    r->n_tensors += (size_t)counted;
    if ((sv < 0 || !c->s.val[sv]) && r->status != VD_EXEC_DISAGREE) {
      /* The counterpart the annotation names has no value in the single plan
       * (nothing produces or reads it): there is nothing to compare with, so
       * the claim cannot be confirmed; skipping it would let a plan agree on
       * nothing (an empty single plan). */
      snprintf(r->reason, sizeof(r->reason),
               "'%s' is annotated with single tensor '%s', which the single plan never produces or reads",
               vd_plan_s(pp, pt->name), vd_plan_s(c->s.p, c->s.p->tensors[sidx].name));
      r->status = VD_EXEC_DISAGREE;
    }
    if (!any_value && sv >= 0 && c->s.val[sv] && r->status != VD_EXEC_DISAGREE) {
      snprintf(r->reason, sizeof(r->reason), "'%s' is annotated with single tensor '%s' but never holds a value",
               vd_plan_s(pp, pt->name), vd_plan_s(c->s.p, c->s.p->tensors[sidx].name));
      r->status = VD_EXEC_DISAGREE;
    }
  }
  return VD_OK;
}

/* Order of the instances of partial sums: by annotation (the group), then
 * part k, then index (a total order: the result is unique). */
static int cmp_part_inst(const void *pa, const void *pb, void *arg) {
  const cmp_t *m = arg;
  const inst_t *A = &m->ins[*(const uint32_t *)pa], *B = &m->ins[*(const uint32_t *)pb];
  if (A->sidx != B->sidx) return A->sidx < B->sidx ? -1 : 1;
  int r = cmp_ann(&A->a, &B->a, VD_MAX_DIMS);
  if (r) return r;
  if (A->a.part_k != B->a.part_k) return A->a.part_k < B->a.part_k ? -1 : 1;
  return *(const uint32_t *)pa < *(const uint32_t *)pb ? -1 : 1;
}

/* 2. Groups of partial sums: instances with part_n > 1 sorted by
 * (annotation, part, index); equal annotations of one single tensor share
 * a group (ins[i].group).  Per group, the first instance of each part
 * (first[]) and the first part no instance holds (missing): one pass over
 * the sorted instances, O(listed parts log) whatever n is. */
static vd_rc group_partials(ctx_t *c, cmp_t *m, vd_diag *d) {
  (void)c;
  inst_t *ins = m->ins;
  m->ord = vd_calloc(m->n_ins + 1, sizeof(*m->ord));
  m->first = vd_calloc(m->n_ins + 1, sizeof(*m->first));
  m->gstart = vd_calloc(m->n_ins + 2, sizeof(*m->gstart));
  m->missing = vd_calloc(m->n_ins + 1, sizeof(*m->missing));
  if (!m->ord || !m->first || !m->gstart || !m->missing) return VD_OOM(d);
  size_t n_part = 0;
  for (size_t i = 0; i < m->n_ins; i++)
    if (ins[i].a.part_n > 1) m->ord[n_part++] = (uint32_t)i;
  /* Unused entries of lo/hi beyond ndim are zero (shifted()), so comparing
   * all VD_MAX_DIMS is comparing the slice. */
  qsort_r(m->ord, n_part, sizeof(*m->ord), cmp_part_inst, m);
  for (size_t i = 0; i < n_part;) {
    size_t j = i;
    const inst_t *A = &ins[m->ord[i]];
    while (j < n_part && ins[m->ord[j]].sidx == A->sidx && cmp_ann(&A->a, &ins[m->ord[j]].a, VD_MAX_DIMS) == 0) j++;
    size_t g = m->n_groups++;
    m->gstart[g] = i;
    int64_t want = 0, miss = -1;
    uint32_t first = UINT32_MAX;
    for (size_t k = i; k < j; k++) {
      inst_t *I = &ins[m->ord[k]];
      I->group = (uint32_t)g;
      if (k == i || I->a.part_k != ins[m->ord[k - 1]].a.part_k) {
        first = m->ord[k];
        if (miss < 0 && I->a.part_k > want) miss = want;
        want = I->a.part_k + 1;
      }
      m->first[m->ord[k]] = first;
    }
    if (miss < 0 && want < A->a.part_n) miss = want;
    m->missing[g] = miss;
    i = j;
  }
  m->gstart[m->n_groups] = n_part;
  return VD_OK;
}

/* 3. Per group, the sum of the first instance of each part, in ascending
 * part order. */
static vd_rc sum_groups(ctx_t *c, cmp_t *m, vd_diag *d) {
  size_t ng = m->n_groups;
  m->sums = vd_calloc(ng + 1, sizeof(*m->sums));
  if (!m->sums) return VD_OOM(d);
  for (size_t gi = 0; gi < ng; gi++) {
    const inst_t *I0 = &m->ins[m->ord[m->gstart[gi]]];
    int64_t n = vd_tensor_numel(&c->q.p->tensors[I0->t]);
    m->sums[gi] = vd_calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!m->sums[gi]) return VD_OOM(d);
    for (size_t k = m->gstart[gi]; k < m->gstart[gi + 1]; k++) {
      uint32_t f = m->ord[k];
      if (m->first[f] != f) continue;
      for (int64_t e = 0; e < n; e++) m->sums[gi][e] += c->q.val[m->ins[f].v][e];
    }
  }
  return VD_OK;
}

/* 4. One instance against its slice of the single tensor.  A part of a
 * group is compared as (group sum - the group's copy of this part + this
 * instance), so each copy of a part is checked on its own. */
static void compare_instance(ctx_t *c, const cmp_t *m, const inst_t *I, double tol, vd_exec_result *r) {
  const vd_tensor_t *st = &c->s.p->tensors[I->sidx];
  const double *got = c->q.val[I->v], *full = c->s.val[I->sv];
  const double *sum = I->group == UINT32_MAX ? NULL : m->sums[I->group];
  const double *mine_first = sum ? c->q.val[m->ins[m->first[I - m->ins]].v] : NULL;
  int64_t n = vd_tensor_numel(&c->q.p->tensors[I->t]), idx[VD_MAX_DIMS];
  int bad = 0;
  r->n_instances++;
  if (sum && m->missing[I->group] >= 0) {
    if (!r->has_mismatch) set_first(r, c, I, -1, NAN, NAN, INFINITY, (int)m->missing[I->group]);
    r->max_rel_err = INFINITY;
    r->n_bad_instances++;
    return;
  }
  for (int64_t e = 0; e < n; e++) {
    double want = full[slice_index(&I->a, st, e, idx)];
    double g = sum ? sum[e] - mine_first[e] + got[e] : got[e];
    double err = rel_err(g, want);
    r->n_elements++;
    if (err > r->max_rel_err || isnan(err)) r->max_rel_err = isnan(err) ? INFINITY : err;
    if (!(err <= tol)) {
      if (!bad && !r->has_mismatch) set_first(r, c, I, e, want, g, err, -1);
      bad = 1;
    }
  }
  r->n_bad_instances += (size_t)bad;
}

static vd_rc compare(ctx_t *c, vd_exec_result *r, vd_diag *d) {
  double tol = c->o->tol > 0 ? c->o->tol : 1e-9;
  cmp_t m;
  memset(&m, 0, sizeof(m));
  vd_rc rc = collect_instances(c, r, &m, d);
  if (rc == VD_OK) rc = group_partials(c, &m, d);
  if (rc == VD_OK) rc = sum_groups(c, &m, d);
  for (size_t i = 0; i < m.n_ins && rc == VD_OK; i++) compare_instance(c, &m, &m.ins[i], tol, r);
  cmp_free(&m);
  return rc;
}

/* ---- entry point ---------------------------------------------------------------- */

/* 1 (and the reason) when some node of p names an operator the registry lacks.
 * Runs before anything is built or allocated: real plans hold tensors of
 * gigabytes, and a plan we cannot evaluate must answer "unsupported", not run
 * out of memory on the tensors of the nodes before the unknown one. */
static int find_unsupported(const vd_plan_t *p, const char *file, char *reason, size_t rsz) {
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *nd = &p->nodes[i];
    if (vd_op_lookup(vd_node_op(p, nd)) != VD_OP__UNKNOWN) continue;
    snprintf(reason, rsz, "unsupported operator '%s' at node %lld '%s' (rank %d) of %s", vd_node_op(p, nd),
             (long long)nd->id, vd_plan_s(p, nd->name), nd->rank, file);
    return 1;
  }
  return 0;
}

/* A data input (role input, per microbatch) whose shifted slice leaves the
 * single tensor: the parallel plan reads more samples than the single one
 * (different global batches).  Nothing to execute: that is a disagreement,
 * named in r->reason.  Returns 1 when found. */
static int batch_mismatch(ctx_t *c, const vd_plan_t *pp, vd_exec_result *r) {
  int32_t nm = pp->world.nm > 0 ? pp->world.nm : 1, reps = pp->world.replicas > 0 ? pp->world.replicas : 1;
  for (uint32_t t = 0; t < pp->n_tensors; t++) {
    const vd_tensor_t *pt = &pp->tensors[t];
    if (!pt->has_lin || pt->role != VD_ROLE_INPUT || pt->scope != VD_SCOPE_PER_MB) continue;
    int64_t sidx = single_index(c, pt->lin.full);
    if (sidx < 0) continue;
    const vd_tensor_t *st = &c->s.p->tensors[sidx];
    if (st->ndim != pt->ndim) continue;
    for (int32_t dd = 0; dd < reps; dd++)
      for (int32_t m = 0; m < nm; m++) {
        vd_lineage_ann a = shifted(pt, dd, m);
        for (int i = 0; i < st->ndim; i++)
          if (a.hi[i] > st->shape[i]) {
            snprintf(r->reason, sizeof(r->reason),
                     "batch mismatch: data input '%s' (replica %d, mb %d) reads [%lld, %lld) of dim %d, single '%s' "
                     "has %lld: the plans run different global batches",
                     vd_plan_s(pp, pt->name), dd, m, (long long)a.lo[i], (long long)a.hi[i], i,
                     vd_plan_s(c->s.p, st->name), (long long)st->shape[i]);
            r->status = VD_EXEC_DISAGREE;
            return 1;
          }
      }
  }
  return 0;
}

static size_t count_annotated(const vd_plan_t *p) {
  size_t n = 0;
  for (size_t i = 0; i < p->n_tensors; i++) n += p->tensors[i].has_lin != 0;
  return n;
}

/* The single plan: must build and run cleanly, or the input is bad.  *stop when the pair is
 * settled already (r->status: a batch mismatch, an unsupported operator). */
static vd_rc run_single_plan(ctx_t *c, const vd_plan_t *single, const char *sname, const vd_plan_t *parallel,
                             vd_exec_result *r, int *stop, vd_diag *d) {
  int unsupported = 0;
  VD_CHECK(build(&c->s, single, sname, d));
  c->ids = vd_malloc((single->n_tensors + 1) * sizeof(*c->ids));
  if (!c->ids) return VD_OOM(d);
  vd_exec_i_ids_sort(single, c->ids);
  c->n_ids = single->n_tensors;
  if (batch_mismatch(c, parallel, r)) {
    *stop = 1;
    return VD_OK;
  }
  VD_CHECK(init_single(c, d));
  VD_CHECK(eval_graph(&c->s, &unsupported, r->reason, sizeof(r->reason), d));
  if (unsupported) {
    r->status = VD_EXEC_UNSUPPORTED;
    *stop = 1;
  }
  return VD_OK;
}

/* The parallel plan: a dataflow problem or a node error is a disagreement (*stop, r->status),
 * an unsupported operator settles it too. */
static vd_rc run_parallel_plan(ctx_t *c, const vd_plan_t *parallel, const char *pname, vd_exec_result *r,
                               int *stop, vd_diag *d) {
  int unsupported = 0;
  vd_diag pd;
  vd_diag_clear(&pd);
  vd_rc rc = build(&c->q, parallel, pname, &pd);
  if (rc == VD_EINPUT && c->q.g.n_issues > 0) {
    const vd_graph_issue *is = &c->q.g.issues[0];
    r->status = VD_EXEC_DISAGREE;
    snprintf(r->reason, sizeof(r->reason), "dataflow (%s): %s%s", vd_gissue_names[is->kind], is->detail,
             c->q.g.n_issues > 1 ? " (and more)" : "");
    *stop = 1;
    return VD_OK;
  }
  if (rc != VD_OK) {
    *d = pd;
    return rc;
  }
  VD_CHECK(init_parallel(c, d));
  rc = eval_graph(&c->q, &unsupported, r->reason, sizeof(r->reason), &pd);
  if (rc == VD_EINPUT) {
    char line[sizeof(r->reason)];
    vd_diag_format(&pd, line, sizeof(line));
    r->status = VD_EXEC_DISAGREE;
    snprintf(r->reason, sizeof(r->reason), "%s", line);
    *stop = 1;
    return VD_OK;
  }
  if (rc != VD_OK) {
    *d = pd;
    return rc;
  }
  if (unsupported) {
    r->status = VD_EXEC_UNSUPPORTED;
    *stop = 1;
  }
  return VD_OK;
}

vd_rc vd_exec_compare(const vd_plan_t *single, const vd_plan_t *parallel, const vd_exec_opts *o,
                      vd_exec_result *r, vd_diag *d) {
  vd_exec_opts defo = {0};
  if (!o) o = &defo;
  memset(r, 0, sizeof(*r));
  ctx_t c;
  memset(&c, 0, sizeof(c));
  c.o = o;
  const char *sname = o->single_name ? o->single_name : "single plan";
  const char *pname = o->parallel_name ? o->parallel_name : "parallel plan";
  vd_rc rc;
  int stop = 0;

  if (find_unsupported(single, sname, r->reason, sizeof(r->reason)) ||
      find_unsupported(parallel, pname, r->reason, sizeof(r->reason))) {
    r->status = VD_EXEC_UNSUPPORTED;
    return VD_OK;
  }
  if ((rc = run_single_plan(&c, single, sname, parallel, r, &stop, d)) != VD_OK || stop) goto done;
  if ((rc = run_parallel_plan(&c, parallel, pname, r, &stop, d)) != VD_OK || stop) goto done;
  if ((rc = compare(&c, r, d)) != VD_OK) goto done;
  if (r->status != VD_EXEC_DISAGREE && r->n_elements == 0) {
    /* AGREE means every annotated tensor was compared and matched; a pair
     * with nothing to compare (no lineage, no values) proves nothing. */
    snprintf(r->reason, sizeof(r->reason),
             "nothing to compare: %s has no lineage-annotated tensor with a value (%zu annotated tensors, %zu "
             "compared instances)",
             pname, count_annotated(parallel), r->n_instances);
    r->status = VD_EXEC_DISAGREE;
  }
  if (r->status != VD_EXEC_DISAGREE) r->status = r->n_bad_instances ? VD_EXEC_DISAGREE : VD_EXEC_AGREE;
done:
  vd_free(c.ids);
  run_free(&c.s);
  run_free(&c.q);
  return rc;
}

vd_rc vd_exec_single(const vd_plan_t *single, const vd_exec_opts *o, vd_exec_value_fn fn, void *ctx, vd_diag *d) {
  vd_exec_opts defo = {0};
  if (!o) o = &defo;
  ctx_t c;
  memset(&c, 0, sizeof(c));
  c.o = o;
  const char *sname = o->single_name ? o->single_name : "single plan";
  int unsupported = 0;
  char reason[1024] = "";
  vd_rc rc = build(&c.s, single, sname, d);
  if (rc != VD_OK) goto done;
  if ((rc = init_single(&c, d)) != VD_OK) goto done;
  if ((rc = eval_graph(&c.s, &unsupported, reason, sizeof(reason), d)) != VD_OK) goto done;
  if (unsupported) {
    rc = VD_ERR(d, VD_EINPUT, sname, "plan", "op", "%s", reason);
    goto done;
  }
  for (size_t t = 0; t < single->n_tensors; t++) {
    int32_t v0 = vd_graph_first(&c.s.g, (uint32_t)t, 0, single->tensors[t].scope == VD_SCOPE_PER_MB ? 0 : -1);
    int32_t v1 = vd_graph_last(&c.s.g, (uint32_t)t, 0, single->tensors[t].scope == VD_SCOPE_PER_MB ? 0 : -1);
    int64_t n = vd_tensor_numel(&single->tensors[t]);
    if (v0 >= 0 && c.s.val[v0] && c.s.g.values[v0].is_initial && fn(ctx, single, &single->tensors[t], 0, c.s.val[v0], n)) {
      rc = VD_ERR(d, VD_EINTERNAL, sname, "plan", "values", "the value consumer stopped");
      goto done;
    }
    if (v1 >= 0 && c.s.val[v1] && fn(ctx, single, &single->tensors[t], 1, c.s.val[v1], n)) {
      rc = VD_ERR(d, VD_EINTERNAL, sname, "plan", "values", "the value consumer stopped");
      goto done;
    }
  }
done:
  run_free(&c.s);
  return rc;
}
