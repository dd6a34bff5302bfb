/*
 * lineage/lineage_int.h - what the files of the lineage table's builder
 * share (lineage.c, lineage_pieces.c, lineage_check.c); private to lineage/.
 *
 * The builder's context (lctx) carries the table being built and where its
 * issues go; the steps are in docs/verifier.md section 1 and lineage.c's
 * header: points and pieces, grouping (lineage_pieces.c), validation
 * (lineage_check.c).
 */
#ifndef VD_LINEAGE_INT_H
#define VD_LINEAGE_INT_H

#include "lineage.h"

#include "../common/limits.h"

#define NONE UINT32_MAX
#define GRID_MAX ((size_t)VD_LIM_LIN_GRID_MAX) /* reason: common/limits.h */


/* An issue found while validating lineage li in parallel (validate). */
typedef struct {
  uint32_t li, seq;
  vd_lin_issue is;
} tissue_t;

typedef struct {
  vd_lin_table *t;
  vd_diag *d;
  const vd_plan_t *sp, *pp;
  int32_t D;
  size_t cap_issues, cap_warnings;
  /* validate() runs lineages in parallel: then a thread's issues go to its
   * own list (sink), tagged with the lineage, and are merged in lineage
   * order afterwards, so the table is the same at any thread count. */
  int to_sink;
  uint32_t cur_li;
  tissue_t *sink;
  size_t n_sink, cap_sink;
} lctx;

/* ---- issues and formatting (lineage.c) ---------------------------------- */

/* Records an issue of kind on single tensor st / parallel tensor pt in
 * replica rep, microbatch mb (-1: none): an UNREAD warning, into the
 * thread's sink while validate() runs in parallel, or into the table. */
vd_rc vd_lin_i_add_issue(lctx *c, vd_lissue_kind kind, int64_t st, int64_t pt, int32_t rep, int32_t mb,
                         const char *fmt, ...) __attribute__((format(printf, 7, 8)));
void vd_lin_i_fmt_shape(const int64_t *s, int32_t nd, char *buf, size_t n);
const char *vd_lin_i_sname(const lctx *c, uint32_t s);
const char *vd_lin_i_pname(const lctx *c, uint32_t p);
/* "'r0.w1' (rank 0, mb 1)" for a piece. */
void vd_lin_i_fmt_piece(const lctx *c, const vd_lin_piece *p, char *buf, size_t n);
const char *vd_lin_i_moment(uint8_t initial);
int vd_lin_i_cmp_i64(int64_t a, int64_t b);
/* Orders slices by lo, then hi, dimension by dimension. */
int vd_lin_i_slice_cmp(const vd_lin_piece *x, const vd_lin_piece *y, int32_t nd);

/* ---- steps 1 to 3: points, pieces, grouping (lineage_pieces.c) ----------- */

/* The single value a lineage of single tensor s names, or -1. */
int32_t vd_lin_i_single_value(const lctx *c, uint32_t s, int initial);
/* Steps 1 and 2: the pieces of every point (out, taken), n_points points,
 * start (out, taken): where each point's pieces begin. */
vd_rc vd_lin_i_collect(lctx *c, vd_lin_piece **out, size_t *n_out, size_t *n_points, size_t **start_out);
/* Step 3: the pieces (*pp, taken) into the table's lineages. */
vd_rc vd_lin_i_group(lctx *c, vd_lin_piece **pp, size_t n, size_t n_points, const size_t *start);

/* ---- step 4: validation (lineage_check.c) ------------------------------- */

/* Slice of piece p in replica d (see vd_lin_piece_at). */
void vd_lin_i_shifted(const vd_plan_t *pp, int32_t D, const vd_lin_piece *p, int32_t d, int64_t *lo, int64_t *hi);
/* Every lineage checked, issues merged in lineage order. */
vd_rc vd_lin_i_validate(lctx *c);
/* Required outputs without a lineage: UNCOVERED. */
vd_rc vd_lin_i_required(lctx *c);

#endif
