/*
 * lineage/lineage.h - lineages between single-device and parallel values.
 *
 * See docs/verifier.md section 1.  A lineage POINT is a virtual parallel value
 * (Gp value index, replica d) of an annotated tensor instance that is its
 * initial value or its final version.  Gp is built for replica 0 only; the
 * point's annotation for replica d comes from vd_tensor_lineage_at.
 *
 * A PIECE records one point's claim: "(value, replica) equals part k of n of
 * slice [lo,hi) of single value svalue".  The table groups pieces by single
 * value and moment (vd_lineage), sorted by (slice lo, slice hi, part_n, k,
 * replica, value), so the pieces of one slice are contiguous, and within
 * them the pieces of one (slice, part count) are contiguous: that is a
 * "slice group".  One slice may have several groups: each is an equal copy
 * of the slice (a copy held whole, n = 1, next to a copy held as n > 1
 * partial sums, e.g. before and after an all_reduce).
 *
 * Validation never assumes a lineage it was not given: a piece whose full id
 * is not a single tensor, whose slice leaves the single tensor, a moment whose
 * slices overlap partially or leave gaps, a slice group with missing parts,
 * and a required single output (final weight, optimizer state, loss) without
 * a complete lineage are all issues (vd_lin_issue), reported in a
 * deterministic order.
 *
 * Not here: proving anything (stages/, solver/).
 *
 * Layer: lineage/ is lineages between single-device and parallel values; it
 * may include common/, plans/, ops/, graph/.  tools/check_layers.sh (make
 * lint) enforces the order.
 */
#ifndef VD_LINEAGE_H
#define VD_LINEAGE_H

#include <stdint.h>

#include "../graph/graph.h"

typedef struct {
  uint32_t value;    /* Gp value index (replica-0 graph) */
  int32_t replica;   /* virtual replica */
  uint32_t ptensor;  /* parallel plan tensor index */
  int32_t mb;        /* microbatch instance, -1 for persistent */
  uint32_t lineage;  /* index of its vd_lineage in the table */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS]; /* slice, single-device coordinates */
  int64_t part_k, part_n;
  double f;          /* the value is f times its part (1 but for an inferred candidate's
                        factor, vd_lineage_ann.factor); the parts of one slice share it */
  uint8_t initial;   /* 1: the initial value (a hypothesis given by the plan) */
  uint8_t all_rep;   /* 1: one piece for every replica d of the point (replica = 0
                        here): its slice in replica d is lo/hi shifted by d times
                        the tensor's dp_shift, its part k is the same (dp_part = 0);
                        vd_lin_piece_at gives the shifted slice */
} vd_lin_piece;

typedef struct {
  uint32_t svalue;   /* Gs value index */
  uint32_t stensor;  /* single plan tensor index */
  uint8_t initial;   /* moment: 1 initial, 0 final */
  uint8_t required;  /* a final weight, optimizer state or loss of the single plan */
  uint32_t piece_off, n_pieces; /* into table->pieces, sorted as described above */
} vd_lineage;

typedef enum {
  VD_LISSUE_NO_SINGLE,     /* full id is not a tensor of the single plan */
  VD_LISSUE_OUT_OF_BOUNDS, /* slice leaves the single tensor */
  VD_LISSUE_OVERLAP,       /* two slices of one moment overlap without being equal */
  VD_LISSUE_GAP,           /* the slices of one moment do not cover the single tensor */
  VD_LISSUE_PARTS,         /* a slice group lacks parts, or a part index is outside 0..n-1 */
  VD_LISSUE_UNCOVERED,     /* a required single output has no lineage at all */
  VD_LISSUE_NO_VALUE,      /* annotated tensor instance that the graph never materialises */
  VD_LISSUE_BATCH,         /* a data input's replicas x microbatches span another extent than
                              the single tensor along one dimension: different global batches */
  VD_LISSUE_UNREAD,        /* a warning, not an issue: a declared input that neither step reads */
  VD_LISSUE__COUNT
} vd_lissue_kind;

extern const char *const vd_lissue_names[VD_LISSUE__COUNT];

/* Lineage issues are vd_issue (common/issue.h) with source "lineage", kind
 * a vd_lissue_kind, stensor the single tensor and tensor the parallel tensor
 * (-1 if none), rank the global rank holding the parallel tensor when the
 * replica is known.  Diagnosis: BATCH for VD_LISSUE_BATCH, else DATAFLOW. */
typedef vd_issue vd_lin_issue;

typedef struct vd_lin_table {
  const vd_graph_t *gs, *gp; /* borrowed */
  int32_t replicas;     /* DP replicas of the parallel plan (>= 1) */
  vd_lineage *lins;     size_t n_lins;
  vd_lin_piece *pieces; size_t n_pieces;
  /* Point lookup: point_pieces[point_first[v]] is the piece of (Gp value v,
   * replica 0) when point_first[v] >= 0; a point whose piece is all_rep has
   * only that one, otherwise its replicas follow consecutively. */
  int32_t *point_first;      /* n = gp->n_values */
  uint32_t *point_pieces;    /* piece indices */
  size_t n_point_pieces;
  /* Single value -> lineage index (or -1), one array per moment. */
  int32_t *lin_of_svalue_initial, *lin_of_svalue_final; /* n = gs->n_values */
  vd_lin_issue *issues; size_t n_issues;
  size_t n_issues_dropped; /* issues beyond VD_LIN_MAX_ISSUES, only counted */
  /* Warnings (kind VD_LISSUE_UNREAD, diagnosis NONE): left out of the
   * comparison, they cannot make a verdict fail. */
  vd_lin_issue *warnings; size_t n_warnings;
  size_t n_warnings_dropped;
} vd_lin_table;

/* At most this many issues are stored; the rest are only counted. */
#define VD_LIN_MAX_ISSUES ((size_t)VD_LIM_LIN_MAX_ISSUES) /* reason: common/limits.h */

/* Writes slice [lo, hi) of nd dimensions as "[0:4, 2:8]" into buf (n bytes,
 * truncated if short): the one notation of slices in every message. */
void vd_lin_fmt_slice(const int64_t *lo, const int64_t *hi, int32_t nd, char *buf, size_t n);

/* Up-front check that the parallel plan's annotations name tensors of this
 * single plan (lineage/pair.c): VD_EINPUT with one line naming what differs
 * when an annotation's rank differs from its single tensor's, or when most
 * annotations do not fit (another model or configuration). */
vd_rc vd_lin_check_pair(const vd_plan_t *sp, const char *sm_path, const vd_plan_t *pp, const char *pm_path,
                        vd_diag *d);

/* Builds and validates the lineage table of a (single, parallel) graph pair.
 * gp must be built with expand_replicas = 0; replicas are virtual.
 * Returns VD_OK even when issues were found (read t->issues); VD_ENOMEM or
 * VD_EINTERNAL only when the table could not be built.
 * Cost: O(points * replicas * log) for sorting plus coverage checks. */
vd_rc vd_lin_build(const vd_graph_t *gs, const vd_graph_t *gp, vd_lin_table *t, vd_diag *d);
void vd_lin_free(vd_lin_table *t); /* accepts NULL and zeroed tables */

/* Piece index of point (v, replica), or -1 if (v, replica) is not a point.
 * For an all_rep piece every replica gets the same index: read its slice in
 * that replica with vd_lin_piece_at. */
int32_t vd_lin_piece_of(const vd_lin_table *t, uint32_t v, int32_t replica);

/* The slice of piece `piece` in replica `replica` (single-device
 * coordinates): the piece's own slice unless it is all_rep, then shifted by
 * replica * dp_shift of its parallel tensor. */
void vd_lin_piece_at(const vd_lin_table *t, uint32_t piece, int32_t replica, int64_t lo[VD_MAX_DIMS],
                     int64_t hi[VD_MAX_DIMS]);

/* Whether an all_rep piece's slice moves with the replica (some dp_shift
 * is not zero); 0 for any other piece. */
int vd_lin_piece_moves(const vd_lin_table *t, uint32_t piece);

/* ---- lineage inference (lineage/infer.c) --------------------------------
 *
 * Infers CANDIDATE lineage annotations for the unannotated parallel tensors
 * of a boundary-only plan by propagating the annotated ones through the
 * operators (one rule per registry operator, vd_lin_prop_rule) and the
 * collectives, matching each parallel node with the single node that
 * computes the same operator on the single values its inputs hold.  A
 * candidate is written into the parallel plan as an ordinary annotation
 * (has_lin) and flagged in `inferred`; stages then take it as a TARGET to
 * prove, like an annotated final value.  A candidate never claims an initial
 * value (only tensors whose every instance is produced get one), so it is
 * never a hypothesis that nothing proves.  docs/verifier.md section 1b. */

typedef enum {
  VD_PROP_NONE,     /* no rule: the stage grows past the value */
  VD_PROP_COPY,     /* output = input 0 (identity, contiguous, multiref, broadcast, send/recv) */
  VD_PROP_MAP,      /* dimension map from the operator's reduction rule, single node matched */
  VD_PROP_ACCUM,    /* accumulate / add: sum of adjacent parts, zero + x = x, else MAP */
  VD_PROP_SCALE,    /* factor 0: a zero value; otherwise MAP */
  VD_PROP_CHUNK,    /* narrows input 0 along `dim` to chunk `index` of `chunks` */
  VD_PROP_VIEW,     /* view/reshape: the single node's reshape groups carry the box */
  VD_PROP_ALL_REDUCE,     /* partial sums -> the whole slice */
  VD_PROP_ALL_GATHER,     /* slices concatenated along `dim` */
  VD_PROP_REDUCE_SCATTER, /* partial sums -> slice j along `dim` of the whole */
  VD_PROP_ALL_TO_ALL,     /* chunk j along split_dim of every slice, concatenated along concat_dim */
  VD_PROP__COUNT
} vd_lin_prop_kind;

/* How partial sums pass an operator (MAP): NONE no partial input allowed
 * and no sliced contraction; SUM all inputs the same part (add); MULTI at
 * most one partial input, the output is linear in each input separately
 * (matmul, mul, scale); SEP no partial input, but the output is a sum of
 * independent terms over a contracted dimension, so slicing it gives parts
 * (an expert MLP sliced along its hidden dimension); OTHER: output o is
 * MULTI in the inputs other than input o, which it does not read
 * (mul_backward: the gradient of a in a*b is dy*b); CONST: the output
 * reads no input value, only shapes (create_mask), so partial inputs and
 * sliced dims that no output keeps change nothing; PAIRED: as NONE, but
 * the inputs other than input 2 come in (output 0, output 1) pairs and
 * output o reads input 2 and its own of each pair (apply_rotary_emb: q and
 * k rotate independently with shared frequencies). */
typedef enum {
  VD_PLIN_NONE,
  VD_PLIN_SUM,
  VD_PLIN_MULTI,
  VD_PLIN_SEP,
  VD_PLIN_OTHER,
  VD_PLIN_CONST,
  VD_PLIN_PAIRED
} vd_lin_prop_lin;

typedef struct {
  uint8_t set;       /* 1 for every row (completeness test) */
  uint8_t kind;      /* vd_lin_prop_kind */
  uint8_t lin;       /* vd_lin_prop_lin */
  uint8_t bwd_pair;  /* dims no input determines come from the forward node's input */
} vd_lin_prop_rule;

/* Rule of operator op (a vd_op_id, asserted valid). */
const vd_lin_prop_rule *vd_lin_prop_rule_of(int op);

/* 1 when plan node nd multiplies its one input by a constant (scale and its
 * backward, mul or div by a scalar; lineage inference's own test), *s that
 * constant (1/scalar for a div). */
int vd_lin_scaling(const vd_plan_t *p, const vd_node_t *nd, double *s);

typedef struct {
  size_t n_annotated;   /* parallel tensors annotated in the plan */
  size_t n_inferred;    /* candidates written */
  size_t n_values;      /* Gp values whose lineage propagation decided */
  size_t n_unknown;     /* unannotated, non-boundary tensors left without a candidate */
  /* Where propagation first stopped (Gp topological order): a node all of
   * whose inputs have lineages but whose output got none, or an annotated
   * result computed from a value that is a constant multiple of its
   * single-device value (FACTOR, with the node that made it so).  Informational
   * only (a legitimate rule gap looks the same); the report shows it next
   * to a NOT EQUIVALENT verdict, where it is usually the faulty operator's
   * first consumer.  stuck_node -1 when propagation never stopped so. */
  int64_t stuck_node;   /* parallel plan node index */
  int32_t stuck_mb;     /* its microbatch instance, -1 if none */
  int stuck_why;        /* vd_lin_stuck */
  uint32_t stuck_input; /* the input the reason is about */
  int64_t stuck_k, stuck_n; /* PARTIAL, SHARE: that input is part k of n */
  double stuck_f;       /* FACTOR, ADDEND, SHARE: that input's factor */
  int64_t stuck_origin; /* FACTOR, SHARE: plan node where the factor last changed, -1 unknown */
  /* 1 when the candidates carry no factor although every value whose
   * factor escapes is an update reading it beside an unscaled value (an
   * optimizer step): inferring again with VD_LIN_KEEP_UPDATE_FACTORS lets a
   * failing stage show the factor as the whole fault (SCALE). */
  int factors_withheld;
} vd_lin_infer_stats;

typedef enum {
  VD_LIN_STUCK_PARTIAL, /* an input is a partial sum the operator cannot pass (a missing reduction?) */
  VD_LIN_STUCK_FACTOR,  /* an input is a constant multiple of its single value (a scaling bug?) */
  VD_LIN_STUCK_ZERO,    /* an input is a known zero (a buffer nothing filled?) */
  VD_LIN_STUCK_NO_TWIN, /* the single plan computes no such operator on those values */
  VD_LIN_STUCK_SLICE,   /* a twin exists but the slices do not combine */
  VD_LIN_STUCK_ADDEND,  /* an annotated result reads f x one addend of the sum its single twin
                           reads (scaled by the same f): the other addends never arrived */
  VD_LIN_STUCK_SHARE,   /* an annotated result reads one copy's share of a mean (part k of n, times
                           n) as the whole value: the copies average to it (a missing reduction?) */
  VD_LIN_STUCK__COUNT
} vd_lin_stuck;

/* One line per vd_lin_stuck, for reports. */
extern const char *const vd_lin_stuck_text[VD_LIN_STUCK__COUNT];

/* Writes "input I <what it is> and the operator <why>" for s (stuck_node >= 0)
 * into buf (always terminated; truncated to n).  The one wording of the
 * text report, the JSON and the findings. */
void vd_lin_stuck_phrase(const vd_lin_infer_stats *s, char *buf, size_t n);

/* Infers candidates for every parallel tensor of pp (the plan gp was built
 * from; modified in place: has_lin and lin of the inferred tensors) that has
 * no annotation.  *inferred (taken: vd_free it) gets one byte per parallel
 * tensor, 1 for a candidate.  gp must be built with expand_replicas = 0.
 * VD_ENOMEM only; tensors where propagation cannot decide stay unannotated.
 * Cost: O(Gp nodes x single consumers of their first input). */
vd_rc vd_lin_infer(const vd_graph_t *gs, const vd_graph_t *gp, vd_plan_t *pp, uint8_t **inferred,
                   vd_lin_infer_stats *st, vd_diag *d);

/* vd_lin_infer with flags: VD_LIN_KEEP_UPDATE_FACTORS keeps the candidates'
 * factors where factors_withheld would be set (lineage/infer_emit.c
 * factor_escapes). */
#define VD_LIN_KEEP_UPDATE_FACTORS 1u
vd_rc vd_lin_infer_flags(const vd_graph_t *gs, const vd_graph_t *gp, vd_plan_t *pp, unsigned flags,
                         uint8_t **inferred, vd_lin_infer_stats *st, vd_diag *d);

#endif
