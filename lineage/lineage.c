/*
 * lineage/lineage.c - builds and validates the lineage table (vd_lin_build).
 *
 * What it does (docs/verifier.md section 1):
 *  1. Points: for every annotated parallel tensor instance of Gp (replica-0
 *     graph), its initial value (if the graph made it an initial value) and
 *     its final version (if something produces it).  Each point becomes one
 *     piece per virtual DP replica d, with the annotation shifted by
 *     vd_tensor_lineage_at (the one place that applies the shifts).
 *  2. Single value: the initial (vd_graph_first, which must be an initial
 *     value) or final (vd_graph_last) version of the single tensor `full`,
 *     instance mb 0 for per-microbatch single tensors, -1 for persistent ones.
 *  3. Grouping: pieces are written straight into one bucket per single
 *     tensor, each bucket sorted by (moment, slice, part_n, k, replica,
 *     value); one vd_lineage per (single tensor, moment).
 *  4. Validation, all reported as vd_lin_issue, never assumed away:
 *     NO_SINGLE, OUT_OF_BOUNDS, OVERLAP, GAP, PARTS, UNCOVERED, NO_VALUE.
 *
 * Coverage (GAP) uses coordinate compression: the distinct slices of one
 * moment cut every dimension at their bounds; each slice covers a box of
 * grid cells; a cell covered never is a gap.  Copies may overlap in any way
 * (each slice group is proven on its own).  Cost O(sum of slice cells);
 * beyond GRID_MAX cells it falls back to a sorted sweep with a volume
 * count, which can only tell nested copies apart, so a partial overlap on
 * such a fine grid is reported as OVERLAP (coverage undetermined).
 *
 * Not here: the closed-form (lattice) coverage check for huge DP/microbatch
 * counts that docs/verifier.md mentions; pieces are enumerated per replica.
 * Invariant: the table and its issues are deterministic at any thread
 * count: issues are found in index order (or merged in lineage order) and
 * sorted at the end; the parallel loops (writing pieces, sorting buckets,
 * validating lineages) each own disjoint slots of the result.
 *
 * Files: this one (issues, formatting, vd_lin_build and the table's
 * accessors), lineage_pieces.c (steps 1 to 3), lineage_check.c (step 4);
 * lineage_int.h what they share.
 */
#include "lineage_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/mem.h"

const char *const vd_lissue_names[VD_LISSUE__COUNT] = {"no_single", "out_of_bounds", "overlap", "gap",
                                                       "parts",     "uncovered",     "no_value",
                                                       "batch",     "unread_input"};

/* ---- issues ------------------------------------------------------------ */

/* Global rank holding parallel tensor ptensor in replica d. */
static long long grank(const lctx *c, uint32_t ptensor, int32_t d) {
  return (long long)d * c->pp->world.stored_ranks + c->pp->tensors[ptensor].rank;
}

vd_rc vd_lin_i_add_issue(lctx *c, vd_lissue_kind kind, int64_t st, int64_t pt, int32_t rep, int32_t mb,
                         const char *fmt, ...) {
  vd_lin_table *t = c->t;
  vd_issue is;
  vd_issue_init(&is, "lineage", (unsigned)kind, vd_lissue_names[kind],
                kind == VD_LISSUE_UNREAD  ? VD_DX_NONE
                : kind == VD_LISSUE_BATCH ? VD_DX_BATCH
                                          : VD_DX_DATAFLOW);
  is.stensor = st;
  is.tensor = pt;
  is.replica = rep;
  is.mb = mb;
  if (pt >= 0 && rep >= 0) is.rank = grank(c, (uint32_t)pt, rep);
  va_list ap;
  va_start(ap, fmt);
  vd_issue_vdetail(&is, fmt, ap);
  va_end(ap);
  if (kind == VD_LISSUE_UNREAD) {
    if (vd_issue_push(&t->warnings, &t->n_warnings, &c->cap_warnings, VD_LIN_MAX_ISSUES, &t->n_warnings_dropped, &is))
      return VD_OOM(c->d);
    return VD_OK;
  }
  if (c->to_sink) {
    if (VD_GROW(c->sink, c->cap_sink, c->n_sink + 1)) return VD_OOM(c->d);
    c->sink[c->n_sink] = (tissue_t){c->cur_li, (uint32_t)c->n_sink, is};
    c->n_sink++;
    return VD_OK;
  }
  if (vd_issue_push(&t->issues, &t->n_issues, &c->cap_issues, VD_LIN_MAX_ISSUES, &t->n_issues_dropped, &is))
    return VD_OOM(c->d);
  return VD_OK;
}

static int issue_cmp(const void *a, const void *b) {
  const vd_lin_issue *x = a, *y = b;
  /* BATCH first: it explains every other issue of a batch-mismatched pair. */
  int kx = x->kind == VD_LISSUE_BATCH ? -1 : (int)x->kind, ky = y->kind == VD_LISSUE_BATCH ? -1 : (int)y->kind;
  if (kx != ky) return kx < ky ? -1 : 1;
  if (x->stensor != y->stensor) return x->stensor < y->stensor ? -1 : 1;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
  return strcmp(x->detail, y->detail);
}

/* ---- formatting -------------------------------------------------------- */

void vd_lin_fmt_slice(const int64_t *lo, const int64_t *hi, int32_t nd, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < nd && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld:%lld", i ? ", " : "", (long long)lo[i], (long long)hi[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

void vd_lin_i_fmt_shape(const int64_t *s, int32_t nd, char *buf, size_t n) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int32_t i = 0; i < nd && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)s[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

const char *vd_lin_i_sname(const lctx *c, uint32_t s) { return vd_plan_s(c->sp, c->sp->tensors[s].name); }
const char *vd_lin_i_pname(const lctx *c, uint32_t p) { return vd_plan_s(c->pp, c->pp->tensors[p].name); }

/* "'r0.w1' (rank 0, mb 1)" for a piece. */
void vd_lin_i_fmt_piece(const lctx *c, const vd_lin_piece *p, char *buf, size_t n) {
  if (p->mb >= 0)
    snprintf(buf, n, "'%s' (rank %lld, mb %d)", vd_lin_i_pname(c, p->ptensor), grank(c, p->ptensor, p->replica), p->mb);
  else
    snprintf(buf, n, "'%s' (rank %lld)", vd_lin_i_pname(c, p->ptensor), grank(c, p->ptensor, p->replica));
}

const char *vd_lin_i_moment(uint8_t initial) { return initial ? "initial" : "final"; }

/* ---- sorting ----------------------------------------------------------- */

int vd_lin_i_cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

int vd_lin_i_slice_cmp(const vd_lin_piece *x, const vd_lin_piece *y, int32_t nd) {
  for (int32_t i = 0; i < nd; i++) {
    int r = vd_lin_i_cmp_i64(x->lo[i], y->lo[i]);
    if (r) return r;
  }
  for (int32_t i = 0; i < nd; i++) {
    int r = vd_lin_i_cmp_i64(x->hi[i], y->hi[i]);
    if (r) return r;
  }
  return 0;
}

/* ---- public ------------------------------------------------------------ */

vd_rc vd_lin_build(const vd_graph_t *gs, const vd_graph_t *gp, vd_lin_table *t, vd_diag *d) {
  memset(t, 0, sizeof(*t));
  t->gs = gs;
  t->gp = gp;
  if (VD_NEVER(!gs || !gp || !gs->plan || !gp->plan))
    return VD_ERR(d, VD_EINTERNAL, NULL, "lineage", "graphs", "expected two built graphs");
  if (VD_NEVER(gp->replicas != 1))
    return VD_ERR(d, VD_EINTERNAL, NULL, "lineage", "gp", "expected a replica-0 graph (expand_replicas = 0), got %d replicas",
                  gp->replicas);
  lctx c;
  memset(&c, 0, sizeof(c));
  c.t = t;
  c.d = d;
  c.sp = gs->plan;
  c.pp = gp->plan;
  c.D = c.pp->world.replicas > 0 ? c.pp->world.replicas : 1;
  t->replicas = c.D;
  vd_lin_piece *pieces = NULL;
  size_t n = 0, np = 0, *start = NULL;
  vd_rc rc = vd_lin_i_collect(&c, &pieces, &n, &np, &start);
  if (rc == VD_OK && vd_ctl_stopped()) rc = VD_ERR(d, VD_ECANCELED, NULL, NULL, NULL, "interrupted");
  if (rc == VD_OK) rc = vd_lin_i_group(&c, &pieces, n, np, start);
  vd_free(pieces);
  vd_free(start);
  if (rc == VD_OK && vd_ctl_stopped()) rc = VD_ERR(d, VD_ECANCELED, NULL, NULL, NULL, "interrupted");
  if (rc == VD_OK) rc = vd_lin_i_validate(&c);
  if (rc == VD_OK) rc = vd_lin_i_required(&c);
  if (rc != VD_OK) {
    vd_lin_free(t);
    return rc;
  }
  if (t->n_issues > 1) qsort(t->issues, t->n_issues, sizeof(*t->issues), issue_cmp);
  return VD_OK;
}

void vd_lin_free(vd_lin_table *t) {
  if (!t) return;
  VD_FREE_ALL(t->lins, t->pieces, t->point_first, t->point_pieces, t->lin_of_svalue_initial, t->lin_of_svalue_final,
              t->issues, t->warnings);
  memset(t, 0, sizeof(*t));
}

int32_t vd_lin_piece_of(const vd_lin_table *t, uint32_t v, int32_t replica) {
  if (!t || !t->point_first || !t->gp || v >= t->gp->n_values || replica < 0) return -1;
  int32_t f = t->point_first[v];
  if (f < 0) return -1;
  int32_t D = t->gp->plan->world.replicas > 0 ? t->gp->plan->world.replicas : 1;
  if (replica >= D) return -1;
  uint32_t p0 = t->point_pieces[f];
  if (t->pieces[p0].all_rep) return (int32_t)p0;
  return (int32_t)t->point_pieces[(size_t)f + (size_t)replica];
}

void vd_lin_piece_at(const vd_lin_table *t, uint32_t piece, int32_t replica, int64_t lo[VD_MAX_DIMS],
                     int64_t hi[VD_MAX_DIMS]) {
  const vd_lin_piece *p = &t->pieces[piece];
  if (!p->all_rep || !t->gp || !t->gp->plan) {
    memcpy(lo, p->lo, sizeof(p->lo));
    memcpy(hi, p->hi, sizeof(p->hi));
    return;
  }
  vd_lin_i_shifted(t->gp->plan, t->replicas > 0 ? t->replicas : 1, p, replica, lo, hi);
}

int vd_lin_piece_moves(const vd_lin_table *t, uint32_t piece) {
  const vd_lin_piece *p = &t->pieces[piece];
  if (!p->all_rep || !t->gp || !t->gp->plan) return 0;
  const int64_t *sh = t->gp->plan->tensors[p->ptensor].lin.dp_shift;
  for (int32_t i = 0; i < VD_MAX_DIMS; i++)
    if (sh[i]) return 1;
  return 0;
}
