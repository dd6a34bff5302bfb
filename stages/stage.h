/*
 * stages/stage.h - proof obligations cut from the two graphs.
 *
 * See docs/verifier.md sections 2, 3 and 5.  A stage is self-contained: it
 * lists its own values and nodes (stage-local indices) in an order where
 * every node comes after the nodes producing its inputs, single side first.
 * The solver encodes it without looking at the graphs again, except to read
 * plan nodes (operator, attributes) and plan tensors (names).
 *
 * Values: single-side values (side 0) are Gs values; parallel-side values
 * (side 1) are virtual Gp values (value, replica).  A value is a leaf when no
 * node of the stage produces it: single leaves are free symbols, parallel
 * leaves are hypotheses (leaf_piece >= 0) whose terms are built from the
 * single value of their lineage (hyp_svalue, a stage-local single value).
 * A parallel leaf with leaf_piece = -1 (and hyp_svalue = -1) has no lineage
 * (state the single plan lacks, e.g. an accumulator before zero_grad, or a
 * DATAFLOW issue): it is a free symbol, like a single leaf.
 *
 * Shapes: `shape` is the original shape; `rshape` the reduced one that the
 * solver uses (equal to shape when the stage is not reduced).  Slices of
 * pieces in reduced single-device coordinates are rlo/rhi.  Attributes that
 * are positions along a reduced dimension are overridden per node
 * (attr_override), everything else is read from the plan node.
 *
 * Layer: stages/ is proof obligations: cutting, shape reduction, canonical
 * classes; it may include common/, plans/, ops/, graph/, lineage/.
 * tools/check_layers.sh (make lint) enforces the order.
 */
#ifndef VD_STAGE_H
#define VD_STAGE_H

#include <stdint.h>

#include "../lineage/lineage.h"

typedef struct {
  uint8_t side;        /* 0 single, 1 parallel */
  uint32_t value;      /* Gs or Gp value index */
  int32_t replica;     /* parallel: virtual replica; single: 0 */
  int32_t ndim;
  int64_t shape[VD_MAX_DIMS];
  int64_t rshape[VD_MAX_DIMS];
  int32_t producer;    /* stage-local node index, -1 for a leaf */
  int32_t leaf_piece;  /* parallel leaf: lineage piece (hypothesis), else -1 */
  int32_t hyp_svalue;  /* parallel leaf: stage-local single value of its lineage */
  int64_t rlo[VD_MAX_DIMS], rhi[VD_MAX_DIMS]; /* parallel leaf: reduced slice */
  /* Windows (stages/window.c): a single value's `shape` is the extent of its
   * window and woff its offset in the single tensor (0 when not windowed); a
   * hypothesis' slice in its single value's windowed coordinates is
   * plo/phi (valid when has_pslice; otherwise the lineage piece's slice). */
  int64_t woff[VD_MAX_DIMS];
  int64_t plo[VD_MAX_DIMS], phi[VD_MAX_DIMS];
  uint8_t has_pslice;
} vd_stage_value;

typedef struct {
  uint32_t key;   /* attribute name, plan string pool offset; VD_OVR_DIVISOR: "divisor" */
  int64_t value;  /* scaled position, or the full-size divisor */
} vd_attr_override;

/* Key of the override that gives an averaging node (mean, the norms) its
 * full-size divisor on reduced shapes (attribute "divisor", which the node
 * usually lacks, so the key is not a string of the plan).  See
 * docs/shape-reduction.md, AVG. */
#define VD_OVR_DIVISOR UINT32_MAX
#define VD_OVR_DIVISOR_NAME "divisor"

typedef struct {
  uint8_t side;
  uint32_t gnode;     /* Gs or Gp graph node index */
  int32_t replica;    /* parallel: virtual replica of the instance (span collectives: 0) */
  int op;             /* vd_op_id (ops/ops.h), or -1 when unknown to the registry */
  uint32_t in_off, n_in;   /* stage-local value indices in st->idx */
  uint32_t out_off, n_out; /* stage-local value indices in st->idx */
  uint32_t ovr_off, n_ovr; /* attribute overrides in st->ovr */
} vd_stage_node;

/* One target: the pieces of one slice group, to be proven equal to the
 * single value's slice (n = 1: each piece; n > 1: the sum of one piece per
 * part, and replicas of a part equal to each other). */
typedef struct {
  int32_t svalue;      /* stage-local single value */
  uint32_t lineage;    /* lineage index in the table */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];   /* slice, original coordinates */
  int64_t rlo[VD_MAX_DIMS], rhi[VD_MAX_DIMS]; /* slice, reduced coordinates */
  int64_t part_n;
  uint32_t piece_off, n_pieces; /* (piece index, stage-local parallel value) pairs in st->idx */
  /* The slice in the single value's windowed coordinates (lo - woff), valid
   * when has_bslice; lo/hi stay in tensor coordinates for reports. */
  int64_t blo[VD_MAX_DIMS], bhi[VD_MAX_DIMS];
  uint8_t has_bslice;
} vd_stage_target;

typedef struct vd_stage {
  uint32_t id;           /* deterministic: order of its first target in the table */
  vd_stage_value *vals;  uint32_t n_vals;
  vd_stage_node *nodes;  uint32_t n_nodes;
  vd_stage_target *targets; uint32_t n_targets;
  uint32_t *idx;         uint32_t n_idx;
  vd_attr_override *ovr; uint32_t n_ovr;
  uint32_t n_rep;        /* DP replicas this stage stands for: 1, or every replica when the
                            replica-0 stage is literally each replica's (stages/cut.c) */
  uint32_t n_mb;         /* microbatches it stands for: 1, or more when the stage of the
                            same group in other microbatches is literally this one */
  int32_t *mb_list;      /* n_mb > 1: those microbatches, its own first (owned), else NULL */
  uint8_t reduced;       /* shapes were reduced */
  uint64_t canon_hash;   /* canonical form hash (0 = not computed) */
  int32_t canon_class;   /* representative stage id of its class, -1 if none */
  int32_t noreduce_node; /* set by vd_stage_reduce: stage-local node whose operator has no
                            reduction rule, or that computes the index values a lookup
                            reads (the stage is then unreduced), -1 if none */
  int32_t onehot_kept_node; /* set by vd_stage_reduce: the node at which a one-hot
                            (pick_backward) reaches a use that is not affine in it, so its
                            class dimension keeps its extent (stages/shape.c), -1 if none */
  /* How it was cut (vd_stage_recut): lineage, slice group [cut_a, cut_b) of
   * the table's pieces, and the replica mode (-2 replica 0 for all, -1 all
   * replicas in one stage, d: replica d). */
  uint32_t cut_lin, cut_a, cut_b;
  int32_t cut_mode;
  uint8_t compact;       /* body freed by vd_stage_compact: only the target (with its
                            pieces at idx[0..]) and the counts are left */
  /* Sums by part (stages/cut.c, docs/verifier.md section 2): the stage proves
   * that every piece of ONE part of a sum target equals the single target
   * computed on that part's rows only (its target's part_n is 1; sum_parts
   * is the sum's part count, cut_part the part).  sum_mode asks
   * vd_stage_window for the row window of the node producing the target
   * (a sum over rows, vd_op_eqv.sum_outs); it sets sum_ok and the window
   * [sum_lo, sum_hi) of dimension sum_dim of Gs value sum_svalue, whose full
   * extent is sum_ext (the only row dimension not taken whole). */
  uint8_t sum_mode, sum_ok;
  int32_t sum_dim;
  uint32_t sum_svalue;
  int64_t sum_lo, sum_hi, sum_ext;
  int64_t sum_parts, cut_part;
} vd_stage;

typedef struct {
  vd_stage *stages; size_t n_stages;
  /* Structural problems found while cutting (DATAFLOW, SCHEDULE, ALIGNMENT,
   * SHAPE); see vd_stage_issue. */
  vd_issue *issues; size_t n_issues, cap_issues;
  size_t n_issues_dropped; /* always 0: every stage issue is kept */
} vd_stage_set;

typedef enum {
  VD_SISSUE_DATAFLOW,
  VD_SISSUE_SCHEDULE,
  VD_SISSUE_ALIGNMENT,
  VD_SISSUE_SHAPE,
  /* Not a problem of the plan: a limit of common/limits.h stopped the cut
   * of a target (its cone passed CONE_MAX).  Diagnosis NONE; the run keeps
   * these apart (vd_run.limits) and they make it INCONCLUSIVE, never NOT
   * EQUIVALENT. */
  VD_SISSUE_LIMIT,
  VD_SISSUE__COUNT
} vd_sissue_kind;

extern const char *const vd_sissue_names[VD_SISSUE__COUNT];

/* Stage issues are vd_issue (common/issue.h) with source "stages", kind a
 * vd_sissue_kind whose diagnosis has the same name, pnode/tensor indices of
 * the plan named by `single`, rank a global rank (-1 if none). */
typedef vd_issue vd_stage_issue;

/* Cuts stages for every target of the lineage table and reports structural
 * issues.  Stages are in deterministic order.  O(sum of cone sizes). */
vd_rc vd_stage_cut(const vd_lin_table *lt, vd_stage_set *set, vd_diag *d);

/* The same, calling hook(hook_ctx, set, i, d) on every stage i as soon as it
 * is final (windowed, replica and microbatch counts set), in stage order, so
 * that the caller can reduce, classify and compact it while the rest is
 * cut: memory then follows the classes, not the stages.  A hook error ends
 * the cut with that code. */
typedef vd_rc (*vd_stage_hook)(void *hook_ctx, vd_stage_set *set, size_t i, vd_diag *d);
vd_rc vd_stage_cut_hook(const vd_lin_table *lt, vd_stage_set *set, vd_stage_hook hook, void *hook_ctx, vd_diag *d);

/* Frees the body (values, nodes, overrides, operand lists) of a stage whose
 * proof is another stage's (a class member); keeps its target and pieces
 * (idx[0..2*n_pieces)) and its counts.  OPTIMIZATION-ONLY: a compact stage is
 * never solved; vd_stage_recut restores the body when a report needs it. */
void vd_stage_compact(vd_stage *st);

/* Cuts compact stage i again (the same members, windowed, unreduced: call
 * vd_stage_reduce after it); no-op for a full stage.  Cost O(plan) + O(cone). */
vd_rc vd_stage_recut(const vd_lin_table *lt, vd_stage_set *set, size_t i, vd_diag *d);

/* Restricts the single-device side of a stage to windows: along every
 * dimension class that each single-side operator treats equivariantly
 * (ops/ops.h, vd_op_eqv), a single value keeps only the hull of the rows its
 * hypotheses and targets touch, and slices are rebased to that hull
 * (docs/verifier.md section 5).  Called by vd_stage_cut on every stage;
 * public for tests.  O(stage size). */
vd_rc vd_stage_window(const vd_lin_table *lt, vd_stage *st, vd_diag *d);

/* Computes reduced shapes of one stage in closed form (docs/verifier.md
 * section 3).  Leaves the stage unreduced (reduced = 0, rshape = shape) when
 * some operator has no reduction rule; that is not an error. */
vd_rc vd_stage_reduce(const vd_lin_table *lt, vd_stage *st, vd_diag *d);

/* Canonical form hash of a (reduced) stage, and class assignment over a set:
 * stages with byte-identical canonical serializations share a class. */
vd_rc vd_stage_canon(const vd_lin_table *lt, vd_stage_set *set, vd_diag *d);

/* The same one stage at a time (stages added in id order get the classes
 * vd_stage_canon gives): st->canon_hash and canon_class are set. */
typedef struct vd_stage_canon_tab vd_stage_canon_tab;
/* The canonical serialization of one stage and its hash, computed apart from
 * the table (vd_stage_canon_key_of may run on several stages in parallel;
 * the insertions, vd_stage_canon_insert, in stage order give the classes
 * vd_stage_canon gives).  The buffer is reused across calls. */
typedef struct {
  uint8_t *b;
  size_t n, cap;
  int oom;
  uint64_t hash;
} vd_stage_canon_key;
vd_rc vd_stage_canon_key_of(const vd_lin_table *lt, const vd_stage *st, vd_stage_canon_key *k, vd_diag *d);
vd_rc vd_stage_canon_insert(vd_stage_canon_tab *t, vd_stage *st, const vd_stage_canon_key *k, vd_diag *d);
void vd_stage_canon_key_free(vd_stage_canon_key *k); /* the buffer; accepts NULL */
vd_rc vd_stage_canon_new(vd_stage_canon_tab **t, vd_diag *d);
void vd_stage_canon_free(vd_stage_canon_tab *t); /* accepts NULL */

void vd_stage_free(vd_stage *st);
void vd_stage_set_free(vd_stage_set *set);

#endif
