/*
 * solver/stage_solve_int.h - private to the files that prove one stage:
 * stage_solve.c (the steps in order, vd_stage_solve), stage_solve_encode.c
 * (steps 1-5: leaves, nodes, target pairs), stage_solve_diag.c (step 6:
 * the classification of a counterexample), stage_solve_cex.c (its numeric
 * evaluation).  The per-stage working state and what the steps hand on.
 */
#ifndef VD_STAGE_SOLVE_INT_H
#define VD_STAGE_SOLVE_INT_H

#include "stage_solve.h"

typedef struct {
  vd_smt *s;
  const vd_lin_table *lt;
  const vd_stage *st;
  const vd_stage_solve_opts *o;
  vd_smt_tensor *ten; /* one per stage value */
  vd_diag *d;
  int unscaled;       /* unscaled_check: 1 parallel leaves are built without their lineage factor,
                         2 partial sums (factor 1) as the sum of their copies; 0 neither */
  uint32_t rescale_node; /* 1 + a stage node whose outputs are multiplied by rescale_f once
                            encoded (reducer_check), 0 none */
  double rescale_f;
} solve_ctx;

static inline const vd_graph_t *graph_of(const solve_ctx *c, int side) { return side ? c->lt->gp : c->lt->gs; }

static inline const vd_tensor_t *tensor_of(const solve_ctx *c, const vd_stage_value *sv) {
  const vd_graph_t *g = graph_of(c, sv->side);
  return &g->plan->tensors[g->values[sv->value].tensor];
}

static inline void shape_of(const vd_stage_value *sv, vd_op_shape *sh) {
  sh->ndim = sv->ndim;
  for (int i = 0; i < sv->ndim; i++) sh->d[i] = sv->rshape[i];
}

static inline int is_int_dtype(vd_dtype t) { return t == VD_DT_I64 || t == VD_DT_I32 || t == VD_DT_BOOL; }

/* "node 12 'layers.0.wq' (rank 3, mb 1)" */
void vd_stage_solve_i_node_record(const solve_ctx *c, const vd_stage_node *sn, char *buf, size_t n);

/* Stage node ni with what encoding, the shape check and the numeric check
 * each read of it: its graph node, its plan and plan node, its record. */
typedef struct {
  const vd_stage_node *sn;
  const vd_gnode_t *gn;
  const vd_plan_t *p;
  const vd_node_t *pn;
  char record[256];
} node_view;
void vd_stage_solve_i_node_view(const solve_ctx *c, uint32_t ni, node_view *nv);
/* The stage (reduced) shapes of the node's operands: sh[0, n_in) its inputs,
 * sh[n_in, n_in + n_out) its outputs. */
void vd_stage_solve_i_node_shapes(const vd_stage *st, const vd_stage_node *sn, vd_op_shape *sh);

/* ---- encoding (stage_solve_encode.c) ---------------------------------------- */
typedef struct {
  uint32_t target;
  int32_t piece;   /* piece compared, -1 for the sum of the parts */
  int64_t elem;    /* flat index in the target slice */
} pair_meta;

typedef struct {
  vd_term *par, *single;
  pair_meta *meta;
  size_t n, cap;
} pair_list;

static inline const uint32_t *target_pairs(const vd_stage *st, const vd_stage_target *t) { return st->idx + t->piece_off; }

uint32_t vd_stage_solve_i_node_parts(const vd_gnode_t *gn, const vd_stage_node *sn);
/* A one-node plan *out (initialised here) holding a copy of node pn of p
 * without operands or attributes (stage_solve_encode.c); *idx its index. */
vd_rc vd_stage_solve_i_lone_node(const vd_plan_t *p, const vd_node_t *pn, vd_plan_t *out, uint32_t *idx);
/* The node's attributes, from the scratch plan when overridden. */
vd_rc vd_stage_solve_i_node_attrs(solve_ctx *c, const vd_plan_t *p, const vd_node_t *pn, const vd_stage_node *sn,
                                  vd_plan_t *scratch, const vd_plan_t **ap, const vd_node_t **an);
void vd_stage_solve_i_pairs_free(pair_list *pl);
/* Builds the target slice of the single value (reduced coordinates). */
vd_rc vd_stage_solve_i_target_slice(solve_ctx *c, const vd_stage_target *t, vd_smt_tensor *slice);
vd_rc vd_stage_solve_i_parts_sum(solve_ctx *c, const vd_stage_target *t, const vd_smt_tensor *slice, vd_term *sum);
/* t[e] := f * t[e] for a factor f != 1, f's numeral as a lineage factor's. */
vd_rc vd_stage_solve_i_scale_terms(solve_ctx *c, vd_smt_tensor *t, double f);
/* Step (5): every target element paired with its single element. */
vd_rc vd_stage_solve_i_build_pairs(solve_ctx *c, pair_list *pl);
/* Steps (1)-(4); *ready = 1 when the pairs can be built (see there). */
vd_rc vd_stage_solve_i_encode_stage(solve_ctx *c, vd_stage_verdict *v, int *ready);

/* ---- diagnosis (stage_solve_diag.c) ----------------------------------------- */
/* Stages above this many nodes get WRONG_VALUE without the refinements of
 * classify (docs/verifier.md section 4). */
#define VD_STAGE_CLASSIFY_MAX_NODES 400u
void vd_stage_solve_i_unflatten(const int64_t *lo, const int64_t *hi, int ndim, int64_t flat, int64_t *elem);
/* Refines WRONG_VALUE of target ti from one differing element df. */
vd_rc vd_stage_solve_i_classify(solve_ctx *c, uint32_t ti, int32_t piece, const vd_smt_diff *df, vd_stage_verdict *v);
/* The counterexample r into the verdict v. */
vd_rc vd_stage_solve_i_record_cex(solve_ctx *c, const pair_list *pl, vd_smt_result *r, vd_stage_verdict *v);
/* Where the stage sits ("ranks 0,1 ..."), for reasons. */
void vd_stage_solve_i_stage_where(const solve_ctx *c, char *buf, size_t n);

/* ---- numeric check of the counterexample (stage_solve_cex.c) ---------------- */
vd_rc vd_stage_solve_i_cex_eval(solve_ctx *c, vd_stage_verdict *v);
/* 1 in *hit when 3 random inputs (index inputs 0 or 1) reproduce a
 * disagreement numerically (stage_solve_cex.c). */
vd_rc vd_stage_solve_i_cex_random(solve_ctx *c, vd_stage_verdict *v, int *hit);

#endif
