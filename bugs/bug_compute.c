/*
 * bugs/bug_compute.c - computation and attention-scaling bugs: 7-13 (a
 * constant, an exponent or a scale wrong on one or several ranks, a backward
 * multiref reading a duplicated gradient, rope backward outputs swapped) and
 * 25 (rank-local instead of global positions under context parallelism).
 *
 * Our generators fuse rms_norm and scale attention with `scale`; imported
 * nnScaler plans write the norm out (pow/mean/add eps/rsqrt/mul) and scale
 * attention with a div by sqrt(d).  Each bug takes either form: 7/9 change
 * the constant the norm adds (rms_norm eps, or the add's scalar); 8 raises a
 * forward pow to 4 instead of 2 (a fused rms_norm is first written out, with
 * the fused backward kept correct: the bug is in the forward only); 11 swaps
 * the q/k outputs of the rope backward (two rope_backward nodes, or one
 * apply_rotary_emb_backward); 12/13 square the attention scale (scale
 * factor 1/sqrt(d) -> 1/d, or div by sqrt(d) -> by d), forward and backward.
 * "Several ranks" (9, 13) are the nodes with the same source name in the
 * pipeline stage, or, when each rank names its copy differently (nnScaler
 * numbers every partition), the k-th matching node of each rank's segment.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bug_int.h"

static vd_rc one_site(vd_bug_ctx *c, vd_bug_pred pred, const char *what, uint32_t *ni) {
  vd_bug_list l = {0};
  vd_rc rc = vd_bug_i_candidates(c, pred, &l);
  if (rc == VD_OK && l.n == 0)
    rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL, "bug %d does not apply: no %s%s", c->bug, what, vd_bug_i_filters(c));
  if (rc == VD_OK) *ni = vd_bug_i_pick(c, &l);
  vd_bug_i_list_free(&l);
  return rc;
}

/* Position of node ni among the nodes of its rank and segment that satisfy pred. */
static size_t ordinal(const vd_plan_t *p, uint32_t ni, vd_bug_pred pred) {
  const vd_node_t *n = &p->nodes[ni];
  size_t k = 0;
  for (uint32_t i = 0; i < ni; i++) {
    const vd_node_t *m = &p->nodes[i];
    if (m->rank == n->rank && m->segment == n->segment && pred(p, m)) k++;
  }
  return k;
}

/* The copies of node ni on the ranks of its pipeline stage: the nodes that
 * satisfy pred with ni's source name, or, when that finds ni alone, the
 * node at ni's ordinal on every rank of the stage (same segment). */
static vd_rc same_in_stage(vd_bug_ctx *c, uint32_t ni, vd_bug_pred pred, vd_bug_list *out) {
  const vd_plan_t *p = c->p;
  const vd_node_t *n = &p->nodes[ni];
  int32_t st = vd_bug_i_stage(p, n->rank);
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *m = &p->nodes[i];
    if (vd_bug_i_stage(p, m->rank) == st && pred(p, m) && strcmp(vd_bug_i_name(p, m), vd_bug_i_name(p, n)) == 0)
      VD_CHECK(vd_bug_i_list_push(out, (uint32_t)i));
  }
  if (out->n >= 2) return VD_OK;
  out->n = 0;
  size_t k = ordinal(p, ni, pred);
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *m = &p->nodes[i];
    if (vd_bug_i_stage(p, m->rank) == st && m->segment == n->segment && pred(p, m) &&
        ordinal(p, (uint32_t)i, pred) == k)
      VD_CHECK(vd_bug_i_list_push(out, (uint32_t)i));
  }
  return VD_OK;
}

/* The backward node `op` of forward node ni: same rank and source name
 * (our generators), or the name with nnScaler's "BW." prefix. */
static int64_t bwd_of(const vd_plan_t *p, uint32_t ni, const char *op) {
  const vd_node_t *n = &p->nodes[ni];
  int64_t b = vd_bug_i_find(p, n->rank, op, vd_bug_i_name(p, n), -1);
  if (b >= 0) return b;
  char bw[256];
  snprintf(bw, sizeof(bw), "BW.%s", vd_bug_i_name(p, n));
  return vd_bug_i_find(p, n->rank, op, bw, -1);
}

/* ---- 7, 9: the constant rms_norm adds --------------------------------------- */

static int fwd_norm(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "rms_norm") && vd_bug_i_is_fwd(p, n) && n->n_in == 2 && n->n_out == 1;
}

static double bad_eps(double eps) { return eps > 0 ? eps * 1000.0 : 1e-3; }

/* A written-out norm's "+ eps": a forward add of a constant. */
static int fwd_add_const(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "add") && vd_bug_i_is_fwd(p, n) && n->n_in == 1 && vd_node_attr(p, n, "scalar") != NULL;
}

static int fwd_norm_const(const vd_plan_t *p, const vd_node_t *n) { return fwd_norm(p, n) || fwd_add_const(p, n); }

static const char *const_key(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "rms_norm") ? "eps" : "scalar";
}

vd_rc vd_bug_i_07(vd_bug_ctx *c) {
  uint32_t ni;
  VD_CHECK(one_site(c, fwd_norm_const, "forward rms_norm or add of a constant", &ni));
  const vd_node_t *n = &c->p->nodes[ni];
  const char *key = const_key(c->p, n);
  double eps = vd_node_attr_float(c->p, n, key, 1e-5), e2 = bad_eps(eps);
  vd_bug_i_note_site(c, ni);
  vd_bug_i_what(c, "%s '%s' on rank %d adds %g instead of %g (mean(x^2) + eps), forward only",
                vd_bug_i_is(c->p, n, "add") ? "add" : "rms_norm", vd_bug_i_name(c->p, n), n->rank, e2, eps);
  return vd_bug_i_attr_float(c->p, ni, key, e2);
}

vd_rc vd_bug_i_09(vd_bug_ctx *c) {
  uint32_t ni;
  VD_CHECK(one_site(c, fwd_norm_const, "forward rms_norm or add of a constant", &ni));
  vd_bug_list l = {0};
  vd_rc rc = same_in_stage(c, ni, fwd_norm(c->p, &c->p->nodes[ni]) ? fwd_norm : fwd_add_const, &l);
  if (rc == VD_OK && l.n < 2)
    rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL,
                "bug 9 does not apply: '%s' runs on one rank only (needs tp > 1 or cp > 1)",
                vd_bug_i_name(c->p, &c->p->nodes[ni]));
  const char *key = const_key(c->p, &c->p->nodes[ni]);
  double eps = vd_node_attr_float(c->p, &c->p->nodes[ni], key, 1e-5);
  for (size_t i = 0; rc == VD_OK && i < l.n; i++) {
    vd_bug_i_note_site(c, l.v[i]);
    rc = vd_bug_i_attr_float(c->p, l.v[i], key, bad_eps(eps));
  }
  if (rc == VD_OK)
    vd_bug_i_what(c, "'%s' adds %g instead of %g on all %zu ranks of its stage, forward only",
                  vd_bug_i_name(c->p, &c->p->nodes[l.v[0]]), bad_eps(eps), eps, l.n);
  vd_bug_i_list_free(&l);
  return rc;
}

/* ---- 8: decomposed rms_norm with a wrong exponent ----------------------------- */

static int fwd_square(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "pow") && vd_bug_i_is_fwd(p, n) && vd_node_attr_float(p, n, "exponent", 0) == 2.0;
}

vd_rc vd_bug_i_08(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  uint32_t ni;
  vd_bug_list sq = {0};
  VD_CHECK(vd_bug_i_candidates(c, fwd_square, &sq));
  if (sq.n > 0) { /* the norm is already written out: change its pow */
    ni = vd_bug_i_pick(c, &sq);
    vd_bug_i_list_free(&sq);
    vd_bug_i_note_site(c, ni);
    vd_bug_i_what(c, "pow '%s' on rank %d raises to the power 4 instead of 2 (forward only)",
                  vd_bug_i_name(p, &p->nodes[ni]), p->nodes[ni].rank);
    return vd_bug_i_attr_float(p, ni, "exponent", 4.0);
  }
  vd_bug_i_list_free(&sq);
  VD_CHECK(one_site(c, fwd_norm, "forward rms_norm or pow(x, 2)", &ni));
  vd_node_t n = p->nodes[ni];
  uint32_t x = vd_node_inputs(p, &n)[0], w = vd_node_inputs(p, &n)[1], y = vd_node_outputs(p, &n)[0];
  double eps = vd_node_attr_float(p, &n, "eps", 1e-5);
  vd_tensor_t xt = p->tensors[x], yt = p->tensors[y];
  if (xt.ndim < 1) VD_BUG_NA(c, "bug 8 does not apply: rms_norm '%s' has a scalar input", vd_bug_i_name(p, &n));
  char base[200], nm[240];
  snprintf(base, sizeof(base), "%s", vd_bug_i_name(p, &n));
  int64_t red[VD_MAX_DIMS];
  memcpy(red, xt.shape, sizeof(red));
  red[xt.ndim - 1] = 1;
  uint32_t x2, ms, mse, rs, xn;
  const struct { uint32_t *idx; const char *sfx; const int64_t *shape; } nt[] = {
      {&x2, ".pow", xt.shape}, {&ms, ".mean", red}, {&mse, ".add_eps", red}, {&rs, ".rsqrt", red},
      {&xn, ".normed", xt.shape}};
  for (size_t i = 0; i < sizeof(nt) / sizeof(nt[0]); i++) {
    snprintf(nm, sizeof(nm), "%s%s", base, nt[i].sfx);
    VD_CHECK(vd_bug_i_add_tensor(p, &yt, nm, xt.ndim, nt[i].shape, nt[i].idx));
  }
  int64_t dim = xt.ndim - 1;
  uint32_t k;
  uint32_t in2[2];
  /* x2 = pow(x, 4)   <- the bug: exponent 4 instead of 2 (a cube would make the mean negative, rsqrt NaN) */
  snprintf(nm, sizeof(nm), "%s.pow", base);
  VD_CHECK(vd_bug_i_add_node(p, &n, "pow", nm, &x, 1, &x2, 1, &k));
  VD_CHECK(vd_plan_attr_float(p, k, "exponent", 4.0));
  vd_bug_i_note_site(c, k);
  snprintf(nm, sizeof(nm), "%s.mean", base);
  VD_CHECK(vd_bug_i_add_node(p, &n, "mean", nm, &x2, 1, &ms, 1, &k));
  VD_CHECK(vd_plan_attr_ints(p, k, "dims", &dim, 1));
  VD_CHECK(vd_plan_attr_int(p, k, "keepdim", 1));
  vd_bug_i_note_site(c, k);
  snprintf(nm, sizeof(nm), "%s.add_eps", base);
  VD_CHECK(vd_bug_i_add_node(p, &n, "add", nm, &ms, 1, &mse, 1, &k));
  VD_CHECK(vd_plan_attr_float(p, k, "scalar", eps));
  vd_bug_i_note_site(c, k);
  snprintf(nm, sizeof(nm), "%s.rsqrt", base);
  VD_CHECK(vd_bug_i_add_node(p, &n, "rsqrt", nm, &mse, 1, &rs, 1, &k));
  vd_bug_i_note_site(c, k);
  snprintf(nm, sizeof(nm), "%s.normed", base);
  in2[0] = x;
  in2[1] = rs;
  VD_CHECK(vd_bug_i_add_node(p, &n, "mul", nm, in2, 2, &xn, 1, &k));
  vd_bug_i_note_site(c, k);
  in2[0] = xn;
  in2[1] = w;
  VD_CHECK(vd_bug_i_add_node(p, &n, "mul", base, in2, 2, &y, 1, &k));
  vd_bug_i_note_site(c, k);
  /* The six new nodes are the last six: move them in place of the fused node, in order. */
  for (uint32_t i = 0; i < 6; i++) vd_bug_i_move(p, (uint32_t)(p->n_nodes - 6 + i), ni + 1 + i);
  vd_bug_i_delete_node(p, ni);
  vd_bug_i_what(c, "rms_norm '%s' on rank %d written out as pow/mean/add/rsqrt/mul/mul with pow exponent 4 "
                "instead of 2 (forward only)", base, n.rank);
  return VD_OK;
}

/* ---- 10: backward multiref reads one gradient twice --------------------------- */

static int bwd_multiref(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "multiref_backward") && n->n_in >= 2 && vd_bug_i_is_bwd(p, n) &&
         vd_node_inputs(p, n)[0] != vd_node_inputs(p, n)[1];
}

vd_rc vd_bug_i_10(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  uint32_t ni;
  VD_CHECK(one_site(c, bwd_multiref, "backward multiref with two different gradient inputs", &ni));
  const vd_node_t *n = &p->nodes[ni];
  uint32_t in[64];
  uint32_t k = n->n_in < 64 ? n->n_in : 64;
  memcpy(in, vd_node_inputs(p, n), k * sizeof(*in));
  int64_t lost = p->tensors[in[1]].id, dup = p->tensors[in[0]].id;
  in[1] = in[0];
  vd_bug_i_note_site(c, ni);
  vd_bug_i_what(c, "multiref_backward '%s' on rank %d sums gradient tensor %lld twice and drops tensor %lld",
                vd_bug_i_name(p, n), n->rank, (long long)dup, (long long)lost);
  return vd_bug_i_set_refs(p, ni, 0, in, k);
}

/* ---- 11: rope backward outputs swapped ------------------------------------------ */

static int bwd_rope(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "rope_backward") && vd_bug_i_is_bwd(p, n) && n->n_in == 1 && n->n_out == 1;
}

/* nnScaler's Llama rope: one backward node with the q and k gradients as outputs. */
static int bwd_rope_qk(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "apply_rotary_emb_backward") && vd_bug_i_is_bwd(p, n) && n->n_out == 2;
}

static int bwd_rope_any(const vd_plan_t *p, const vd_node_t *n) { return bwd_rope(p, n) || bwd_rope_qk(p, n); }

vd_rc vd_bug_i_11(vd_bug_ctx *c) {
  vd_plan_t *p = c->p;
  uint32_t ia;
  VD_CHECK(one_site(c, bwd_rope_any, "backward rope", &ia));
  if (bwd_rope_qk(p, &p->nodes[ia])) {
    const uint32_t *o = vd_node_outputs(p, &p->nodes[ia]);
    uint32_t sw[2] = {o[1], o[0]};
    vd_bug_i_note_site(c, ia);
    vd_bug_i_what(c, "rope backward '%s' on rank %d: q and k gradient outputs swapped (tensor %lld <-> %lld)",
                  vd_bug_i_name(p, &p->nodes[ia]), p->nodes[ia].rank, (long long)p->tensors[sw[1]].id,
                  (long long)p->tensors[sw[0]].id);
    return vd_bug_i_set_refs(p, ia, 1, sw, 2);
  }
  const vd_node_t *a = &p->nodes[ia];
  int64_t ib = -1;
  for (size_t i = 0; i < p->n_nodes && ib < 0; i++) {
    const vd_node_t *m = &p->nodes[i];
    if (i != ia && bwd_rope(p, m) && m->rank == a->rank && m->segment == a->segment && m->layer == a->layer)
      ib = (int64_t)i;
  }
  if (ib < 0) VD_BUG_NA(c, "bug 11 does not apply: rope backward '%s' has no q/k partner on its rank", vd_bug_i_name(p, a));
  uint32_t first = ia < (uint32_t)ib ? ia : (uint32_t)ib, second = ia < (uint32_t)ib ? (uint32_t)ib : ia;
  /* Fuse: the second rope backward moves next to the first (its input must exist by then). */
  int64_t prod = vd_bug_i_producer(p, vd_node_inputs(p, &p->nodes[second])[0], second);
  if (prod > (int64_t)first)
    VD_BUG_NA(c, "bug 11 does not apply: the two rope backwards of '%s' cannot be made adjacent", vd_bug_i_name(p, a));
  vd_bug_i_move(p, second, first + 1);
  second = first + 1;
  uint32_t oa = vd_node_outputs(p, &p->nodes[first])[0], ob = vd_node_outputs(p, &p->nodes[second])[0];
  vd_bug_i_note_site(c, first);
  vd_bug_i_note_site(c, second);
  vd_bug_i_what(c, "rope backwards '%s' and '%s' on rank %d: outputs swapped (tensor %lld <-> %lld)",
                vd_bug_i_name(p, &p->nodes[first]), vd_bug_i_name(p, &p->nodes[second]), p->nodes[first].rank,
                (long long)p->tensors[oa].id, (long long)p->tensors[ob].id);
  VD_CHECK(vd_bug_i_set_refs(p, first, 1, &ob, 1));
  return vd_bug_i_set_refs(p, second, 1, &oa, 1);
}

/* ---- 12, 13: attention scale ------------------------------------------------------- */

/* Our generators' `scale` named *attn.scale, or a forward div by a constant
 * (nnScaler's attention: scores / sqrt(d); the models have no other). */
static int attn_scale(const vd_plan_t *p, const vd_node_t *n) {
  if (!vd_bug_i_is_fwd(p, n)) return 0;
  if (vd_bug_i_is(p, n, "scale")) return vd_bug_i_ends(vd_bug_i_name(p, n), "attn.scale");
  return vd_bug_i_is(p, n, "div") && n->n_in == 1 && vd_node_attr(p, n, "scalar") != NULL;
}

/* The scale an attention-scale node applies: factor, or 1/scalar for a div. */
static double scale_of(const vd_plan_t *p, const vd_node_t *n) {
  if (vd_bug_i_is(p, n, "div")) return 1.0 / vd_node_attr_float(p, n, "scalar", 1.0);
  return vd_node_attr_float(p, n, "factor", 1.0);
}

static double bad_scale(double f) {
  double g = f * f; /* 1/d instead of 1/sqrt(d) */
  return fabs(g - f) > 1e-12 * fabs(f) ? g : f * 0.5;
}

/* Makes forward node ni and its backward apply scale f. */
static vd_rc set_scale(vd_bug_ctx *c, uint32_t ni, double f) {
  int div = vd_bug_i_is(c->p, &c->p->nodes[ni], "div");
  const char *key = div ? "scalar" : "factor";
  double v = div ? 1.0 / f : f;
  vd_bug_i_note_site(c, ni);
  VD_CHECK(vd_bug_i_attr_float(c->p, ni, key, v));
  int64_t b = bwd_of(c->p, ni, div ? "div_backward" : "scale_backward");
  if (b >= 0) {
    vd_bug_i_note_site(c, (uint32_t)b);
    VD_CHECK(vd_bug_i_attr_float(c->p, (uint32_t)b, key, v));
  }
  return VD_OK;
}

vd_rc vd_bug_i_12(vd_bug_ctx *c) {
  uint32_t ni;
  VD_CHECK(one_site(c, attn_scale, "attention scale node", &ni));
  const vd_node_t *n = &c->p->nodes[ni];
  double f = scale_of(c->p, n), g = bad_scale(f);
  vd_bug_i_what(c, "attention scale '%s' on rank %d: factor %g instead of %g (ratio %g), forward and backward",
                vd_bug_i_name(c->p, n), n->rank, g, f, g / f);
  return set_scale(c, ni, g);
}

vd_rc vd_bug_i_13(vd_bug_ctx *c) {
  uint32_t ni;
  VD_CHECK(one_site(c, attn_scale, "attention scale node", &ni));
  vd_bug_list l = {0};
  vd_rc rc = same_in_stage(c, ni, attn_scale, &l);
  if (rc == VD_OK && l.n < 2)
    rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL,
                "bug 13 does not apply: attention scale '%s' runs on one rank only (needs tp > 1 or cp > 1)",
                vd_bug_i_name(c->p, &c->p->nodes[ni]));
  double f = scale_of(c->p, &c->p->nodes[ni]), g = bad_scale(f);
  for (size_t i = 0; rc == VD_OK && i < l.n; i++) rc = set_scale(c, l.v[i], g);
  if (rc == VD_OK)
    vd_bug_i_what(c, "attention scale '%s': factor %g instead of %g (ratio %g) on all %zu ranks of its stage",
                  vd_bug_i_name(c->p, &c->p->nodes[l.v[0]]), g, f, g / f, l.n);
  vd_bug_i_list_free(&l);
  return rc;
}

/* ---- 25: local instead of global positions (CP) ------------------------------------ */

static int rope_offset(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "rope") && vd_bug_i_is_fwd(p, n) && vd_node_attr_int(p, n, "pos_offset", 0) != 0;
}

static int mask_offset(const vd_plan_t *p, const vd_node_t *n) {
  return vd_bug_i_is(p, n, "causal_mask") && vd_bug_i_is_fwd(p, n) && vd_node_attr_int(p, n, "q_offset", 0) != 0;
}

vd_rc vd_bug_i_25(vd_bug_ctx *c) {
  vd_bug_list l = {0};
  int mask = (int)(c->o->seed & 1);
  vd_rc rc = vd_bug_i_candidates(c, mask ? mask_offset : rope_offset, &l);
  if (rc == VD_OK && l.n == 0) {
    mask = !mask;
    rc = vd_bug_i_candidates(c, mask ? mask_offset : rope_offset, &l);
  }
  if (rc == VD_OK && l.n == 0)
    rc = VD_ERR(c->d, VD_EUSAGE, NULL, NULL, NULL,
                "bug 25 does not apply: no rope or causal_mask with a non-zero global offset%s (needs cp > 1)",
                vd_bug_i_filters(c));
  if (rc != VD_OK) {
    vd_bug_i_list_free(&l);
    return rc;
  }
  uint32_t ni = l.v[(size_t)((c->o->seed >> 1) % l.n)];
  vd_bug_i_list_free(&l);
  const char *key = mask ? "q_offset" : "pos_offset";
  const vd_node_t *n = &c->p->nodes[ni];
  int64_t off = vd_node_attr_int(c->p, n, key, 0);
  vd_bug_i_what(c, "%s '%s' on rank %d: %s 0 (local position) instead of %lld (global), forward and backward",
                vd_node_op(c->p, n), vd_bug_i_name(c->p, n), n->rank, key, (long long)off);
  vd_bug_i_note_site(c, ni);
  VD_CHECK(vd_bug_i_attr_int(c->p, ni, key, 0));
  int64_t b = bwd_of(c->p, ni, mask ? "causal_mask_backward" : "rope_backward");
  if (b >= 0) {
    vd_bug_i_note_site(c, (uint32_t)b);
    VD_CHECK(vd_bug_i_attr_int(c->p, (uint32_t)b, key, 0));
  }
  return VD_OK;
}
