/*
 * ops/ops.h - the operator registry: one table row per operator and
 * collective of docs/operators.md.
 *
 * ops/ops.def is the only list of operators (an X-macro); ops.c expands
 * it into vd_op_table and ops_num_*.c hold the double-precision
 * evaluators and shape checks.  Everything outside solver/ reads operator
 * properties through the vd_op_* accessors below, never with a switch.
 *
 * Numeric evaluation (vd_op_eval) is the oracle side: it computes what the
 * operator means on real numbers (uninterpreted kernels use the real
 * function: exp, log, erf-form gelu, ...).  A call describes ONE execution:
 * for a local operator, one node's inputs and outputs; for a collective or
 * a send/recv pair, the merged instance of graph/graph.h: the inputs and
 * outputs of all participants in group order, so the executor needs no
 * per-collective code.
 *
 * Not here: the symbolic encoders.  ops/ must not depend on solver/ (make
 * lint), so the encoders cannot be a column of this table without an
 * opaque slot that nothing here could fill.  solver/smt_encode.c expands
 * the same ops.def X-macro into its own table (enc_table, enc_<name> per
 * row, defined in solver/smt_encode_<family>.c: a row without its encoder
 * does not link).  ops.def stays the
 * only list of operators; every per-operator table (this one, the
 * attribute schema of attrs.c, the equivariances of ops_eqv.c, the
 * reduction rules of ops_reduce.c, lineage's propagation rules, the
 * encoders) is an expansion of its rows.
 *
 * Layer: ops/ is the operator registry and everything per-operator that is
 * not SMT; it may include common/ and plans/ (never solver/: the encoders
 * are solver/'s expansion of ops.def).  tools/check_layers.sh (make lint)
 * enforces the order.
 */
#ifndef VD_OPS_H
#define VD_OPS_H

#include <stdint.h>

#include "../common/diag.h"
#include "../plans/plan.h"

/* ---- operator ids ------------------------------------------------------ */

typedef enum {
  VD_OP__NONE = -1,    /* "no backward operator" */
#define VD_OP(ID, ...) VD_OP_##ID,
#include "ops.def"
#undef VD_OP
  VD_OP__COUNT
} vd_op_id;

/* vd_op_lookup's answer for a name that is not in the registry. */
#define VD_OP__UNKNOWN VD_OP__NONE

/* Variadic arity bound (multiref outputs, concat inputs, collective groups). */
#define VD_OP_MANY 0xffff

/* ---- flags ------------------------------------------------------------- */

enum {
  VD_OPF_LINEAR = 1u << 0,        /* linear in its (non-integer) inputs */
  VD_OPF_COMMUTATIVE = 1u << 1,   /* the two inputs may be swapped */
  VD_OPF_UNINTERPRETED = 1u << 2, /* symbolic form uses a shared function symbol */
  VD_OPF_FORWARD_ONLY = 1u << 3,  /* no backward operator in the registry */
  VD_OPF_COLLECTIVE = 1u << 4,    /* spans ranks; a call carries all participants */
  VD_OPF_BACKWARD = 1u << 5,      /* is the backward operator of some forward op */
  VD_OPF_INPLACE_OK = 1u << 6,    /* may read and write the same persistent tensor */
  VD_OPF_MOVES = 1u << 7,         /* every output element is a copy of an input element */
  VD_OPF_REPEATS = 1u << 8,       /* a MOVES operator that repeats elements (expand) */
  /* a counterexample of a stage holding it stands only when the numeric
   * evaluators reproduce it; otherwise the stage is INCONCLUSIVE (max: the
   * max-shifted log-sum-exp needs exp/log laws the normal form lacks, so
   * the solver's counterexamples interpret exp and log freely) */
  VD_OPF_REFUTE_NUMERIC = 1u << 9,
};

/* The integer index operand of a gather or scatter (ops.def column
 * `index`): input `slot` holds indices into dimension `dim` of operand t
 * (an output when from_out), shifted by the int attribute `offset` (the
 * index range is [offset, offset + extent)); ndim > 0: only when that
 * operand has rank ndim.  slot < 0: the operator has no index operand. */
typedef struct {
  int8_t slot;
  uint8_t from_out;
  uint8_t t, dim, ndim;
  const char *offset;
} vd_op_index;

/* ---- one call ------------------------------------------------------------ */

typedef struct {
  int32_t ndim;
  int64_t d[VD_MAX_DIMS];
} vd_op_shape;

/* The lines along dim of a shape: element (o, j, i) sits at (o * len + j) * inner + i
 * (softmax, norms and other per-line operators, in the evaluators and the encoders). */
typedef struct {
  int64_t outer, len, inner;
} vd_op_lines;
static inline vd_op_lines vd_op_lines_of(const vd_op_shape *s, int32_t dim) {
  vd_op_lines l = {1, s->d[dim], 1};
  for (int32_t i = 0; i < dim; i++) l.outer *= s->d[i];
  for (int32_t i = dim + 1; i < s->ndim; i++) l.inner *= s->d[i];
  return l;
}

int64_t vd_op_shape_numel(const vd_op_shape *s);

/* Row-major index helpers shared by the numeric evaluators and solver/'s
 * encoders, so both read an element at the same place.  unravel: flat
 * index -> per-dimension index (idx has s->ndim entries); ravel: the
 * inverse.  vd_op_bcast_to: whether `in` broadcasts to `out` (NumPy rules,
 * trailing dimensions aligned).  vd_op_bcast_src: the flat index in `in` of
 * the element that broadcasts to out-index idx (in must broadcast to out). */
void vd_op_shape_unravel(const vd_op_shape *s, int64_t flat, int64_t *idx);
int64_t vd_op_shape_ravel(const vd_op_shape *s, const int64_t *idx);
int vd_op_bcast_to(const vd_op_shape *in, const vd_op_shape *out);
int64_t vd_op_bcast_src(const vd_op_shape *out, const vd_op_shape *in, const int64_t *idx);

/* Batched matmul geometry, shared by the evaluator and the encoder:
 * a [..., m, k] x b [..., k, n] -> o [..., m, n]; ab, bb, ob are the batch
 * shapes (all dimensions but the last two; a's and b's broadcast to o's). */
typedef struct {
  vd_op_shape ab, bb, ob;
  int64_t m, k, n, nbatch;
} vd_op_mm_geo;
vd_op_mm_geo vd_op_mm_geometry(const vd_op_shape *a, const vd_op_shape *b, const vd_op_shape *o);

/* One evaluation.  All pointers are borrowed.  For a shape check only, the
 * data pointers (in/out) may be NULL.  Attributes are read from plan+node
 * (node may be NULL: every attribute then takes its default).  `record`
 * names the node in messages ("node 12 'layers.0.wq'"); NULL means "node".
 * n_part: participants of a collective instance (inputs and outputs are
 * then those of the participants in group order); 1 for local operators. */
typedef struct vd_op_call {
  int op; /* vd_op_id */
  const vd_plan_t *plan;
  const vd_node_t *node;
  const char *record;
  uint32_t n_in, n_out, n_part;
  const double *const *in;
  const vd_op_shape *in_shape;
  double *const *out;
  const vd_op_shape *out_shape;
  vd_diag *diag;
} vd_op_call;

typedef vd_rc (*vd_op_eval_fn)(const vd_op_call *c);
typedef vd_rc (*vd_op_shape_fn)(const vd_op_call *c);

typedef struct {
  const char *name;
  uint16_t min_in, max_in;   /* VD_OP_MANY = unbounded */
  uint16_t min_out, max_out;
  uint32_t flags;
  int backward;              /* vd_op_id or VD_OP__NONE */
  vd_op_eval_fn eval;        /* numeric evaluator (assumes shape checked) */
  vd_op_shape_fn shape;      /* shape and arity check, VD_EINPUT on mismatch */
  const char *reduction_safety; /* why checking on reduced shapes is sound */
  vd_op_index index;         /* the integer index operand, slot -1 if none */
} vd_op_info;

extern const vd_op_info vd_op_table[VD_OP__COUNT];

/* ---- accessors ----------------------------------------------------------- */

/* Id of operator `name`, VD_OP__UNKNOWN if absent (or name is NULL).
 * Linear scan with strcmp over ~90 rows: callers that look up per node
 * should cache the id. */
vd_op_id vd_op_lookup(const char *name);

/* Accessors; op must be a valid id (asserted). */
const vd_op_info *vd_op_get(vd_op_id op);
const char *vd_op_name(vd_op_id op);
/* 1 when every output element of op is a copy of an input element (views,
 * transposes, chunks, concatenation, expand, gathers, moves): the values
 * are rearranged, never computed. */
int vd_op_copies_elements(int op);
/* The index operand of op (slot -1: none). */
const vd_op_index *vd_op_index_of(vd_op_id op);
int vd_op_has(vd_op_id op, uint32_t flag);
vd_op_id vd_op_backward(vd_op_id op);

/* Whether dropout node `node` of `plan` (either may be NULL: torch's
 * defaults) drops, with its rate in *p: p > 0 and `training` not false.
 * `training` may be nnScaler's traced string "self.training" (true in a
 * training iteration); only "False", "false", "0" and a numeric 0 read as
 * false.  One test for the evaluator and the encoder. */
int vd_op_dropout_active(const vd_plan_t *plan, const vd_node_t *node, double *p);

/* The real function that a symbol of solver/'s encoders stands for (exp,
 * gelu, rope_cos, topk_gate.k<K>.j<J>, ...; the list is in solver/smt.h,
 * vd_smt_uf_value), applied to n arguments with the evaluators' own
 * definitions: 1 and *out, or 0 for a name or arity that is not one. */
int vd_op_symbol_value(const char *name, size_t n, const double *a, double *out);

/* Checks arity (against the table) and shapes (the op's rule), then
 * evaluates.  Errors are VD_EINPUT with the diag naming c->record and the
 * offending field (e.g. "inputs[1]"). */
vd_rc vd_op_check(const vd_op_call *c);
vd_rc vd_op_eval(const vd_op_call *c);

/* ---- shape reduction rules (ops/ops_reduce.c) --------------------------
 *
 * A rule tells stages/shape.c how an operator relates the dimensions of its
 * operands, as constraints emitted one by one (docs/shape-reduction.md says
 * why each is sound).  An operand dimension is (out, t, dim): input or
 * output t of the call, dimension dim (normalized, >= 0). */

typedef struct {
  uint8_t out;  /* 0 input, 1 output */
  uint8_t dim;
  uint16_t t;
} vd_op_dimref;

typedef enum {
  VD_RED_EQ,   /* a and b are reduced by the same ratio; num > 0: size(a)*den == size(b)*num
                  must hold (else the stage's constraints contradict each other); num == 0: no
                  fixed factor (concat inputs) */
  VD_RED_MIN2, /* a is contracted or reduced over: >= 2 elements after reduction */
  VD_RED_EVEN, /* a stays even and >= 2 (rope's rotated pairs) */
  VD_RED_POS,  /* attribute `attr` (value pos) is a position along a: scaled with it */
  VD_RED_KEEP, /* a keeps its original extent */
  VD_RED_AVG,  /* the node averages over a (mean, the norms): its divisor is the full-size
                * element count of all its AVG dims, reported as attribute "divisor" when
                * reduction changes that count (docs/shape-reduction.md, AVG) */
  VD_RED_PROD, /* product of na dims of a.t starting at a.dim == product of nb dims of b.t
                  starting at b.dim (view/reshape merge or split) */
  VD_RED_MINK, /* a keeps >= pos elements after reduction (topk_gate: k + 1 experts); num > 0:
                  and num divides the ratio's g, so chunks of num elements stay whole and the
                  reduced extent a multiple of its chunk count (all_to_all along one dim) */
} vd_op_red_kind;

typedef struct {
  vd_op_red_kind kind;
  vd_op_dimref a, b;
  int64_t num, den;  /* EQ */
  uint8_t na, nb;    /* PROD */
  const char *attr;  /* POS: attribute name (static string) */
  int64_t pos;       /* POS: attribute value; MINK: the minimum extent */
} vd_op_red;

/* One rule application.  Pointers are borrowed.  node may be NULL (defaults).
 * emit receives every constraint; its error is returned by the rule. */
typedef struct vd_op_reduce_call {
  int op; /* vd_op_id */
  const vd_plan_t *plan;
  const vd_node_t *node;
  uint32_t n_in, n_out;
  const vd_op_shape *in_shape, *out_shape;
  vd_rc (*emit)(void *sink, const vd_op_red *r);
  void *sink;
} vd_op_reduce_call;

/* Emits c's constraints.  *norule = 1 (and nothing need be emitted) when
 * this instance has no rule (an operand form the rule does not cover, a
 * malformed dimension attribute): the caller then leaves its stage
 * unreduced.  Errors: whatever emit returns. */
typedef vd_rc (*vd_op_reduce_fn)(const vd_op_reduce_call *c, int *norule);

/* The rule of op (every operator has one; the table is checked complete at
 * compile time).  op must be a valid id. */
vd_op_reduce_fn vd_op_reduce_rule(vd_op_id op);

/* ---- translation equivariance (ops/ops_eqv.c) ---------------------------
 *
 * Whether the links of an operator's reduction rule (EQ between operand
 * dimensions) are also translation equivariances: rows [lo, hi) of the
 * output along a linked dimension are the operator applied to rows [lo, hi)
 * of the inputs.  stages/window.c restricts a stage's single-device side to
 * the rows its hypotheses and targets touch along such dimensions (so
 * replicas and microbatches that differ only by their batch offset share one
 * canonical form).  ops_eqv.c says which operators qualify and why. */

typedef enum {
  VD_EQV__UNSET = 0, /* not reviewed: a table row left out (a test rejects it) */
  VD_EQV_NONE,       /* pins every dimension of every operand */
  VD_EQV_RULE,       /* 1:1 EQ links of the reduction rule are equivariances */
  VD_EQV_LEAD,       /* same, for dimensions before the position dimension only */
} vd_op_eqv_kind;

typedef struct {
  vd_op_eqv_kind kind;
  const char *lead_attr; /* LEAD: attribute holding the position dimension, or NULL */
  int32_t lead_def;      /* LEAD: its default (negative: from the end) */
  /* Backward operators whose output 0 is an input gradient computed row by
   * row (all dimensions but the last) while the other outputs (weight
   * gradients) sum over the rows: when a stage uses only output 0, the
   * inputs in bwd0_rows are row-aligned with it (linked on all dimensions
   * but the last) and every other input is pinned.  0: no such form. */
  uint8_t bwd0_rows;
  /* The dimensions of the outputs that the rule marks MIN2 are broadcasts:
   * every element along them is the same value, whatever its position
   * (sum_backward spreads the gradient of a sum).  They are not pinned. */
  uint8_t bcast_out;
  /* Further outputs computed row by row like output 0 (bit k: output k),
   * e.g. the routing-weight gradient of the MoE expert kernel: they may be
   * live too, and are row-aligned with output 0 the same way. */
  uint8_t row_outs;
  /* Outputs that are sums over the rows (all dimensions but the last of
   * output 0) of a term computed from row r of the bwd0_rows inputs alone
   * and the other inputs whole, by the same function for every r (bit k:
   * output k; the weight and bias gradients of linear and norm backward).
   * The weight gradient computed on a window of rows is then the sum over
   * those rows only: stages/cut.c proves a sum of per-part gradients part by
   * part (docs/verifier.md section 2, "Sums by part"). */
  uint8_t sum_outs;
} vd_op_eqv;

const vd_op_eqv *vd_op_eqv_of(vd_op_id op);
/* First pinned dimension of an operand of rank ndim (ndim when every
 * dimension may be linked): the position dimension of LEAD operators. */
int32_t vd_op_eqv_lead(vd_op_id op, const vd_plan_t *plan, const vd_node_t *node, int32_t ndim);

/* ---- attribute schema (ops/attrs.c) --------------------------------------
 *
 * Per operator: every attribute it takes (name, type, range, required or
 * optional) and, for collectives, the arity of one member node.  Plans are
 * checked against it on load (vd_op_check_plan), so that no attribute of the
 * wrong kind silently reads as its default. */

typedef enum {
  VD_AT_INT,        /* int (booleans are ints 0/1) in [lo, hi] */
  VD_AT_NUM,        /* int or float in [lo, hi] (a real constant; an int converts exactly) */
  VD_AT_STR,        /* string; one of `choices` ("a|b") unless NULL */
  VD_AT_DIM,        /* int: a dimension index, negative from the end */
  VD_AT_DIMS,       /* int or list of ints: dimension indices */
  VD_AT_INT_OR_STR, /* int or string (dropout's `training`, which may be "self.training") */
} vd_op_attr_type;

typedef enum {
  VD_AT_OPTIONAL,
  VD_AT_REQUIRED,
  VD_AT_UNARY, /* required in the one-input form, not allowed with two inputs (scalar operands) */
} vd_op_attr_req;

typedef struct {
  const char *name; /* NULL ends a list */
  vd_op_attr_type type;
  vd_op_attr_req req;
  double lo, hi;       /* range (NUM, INT, DIM, DIMS elements) */
  const char *choices; /* STR: '|'-separated accepted values, NULL = any */
} vd_op_attr_spec;

typedef struct {
  const vd_op_attr_spec *attrs; /* terminated by a NULL name; never NULL for a complete row */
  int member_arity;             /* 1: the arity below is one member's (collectives) */
  uint32_t in_lo, in_hi, out_lo, out_hi;
} vd_op_schema;

/* The schema of op, or NULL if op is out of range or its row is missing
 * (tests/ops/test_attrs.c checks that no row is missing). */
const vd_op_schema *vd_op_attr_schema(vd_op_id op);

/* Checks every node of p whose operator is in the registry against its
 * schema: input and output counts, attribute names (unknown keys are
 * errors), kinds, ranges, required attributes.  Operators outside the
 * registry are left to the verifier (unsupported).  VD_EINPUT with the diag
 * naming file, node ("node 12 'name' (softmax)") and field ("attrs.dim",
 * "in"); O(nodes x attributes). */
vd_rc vd_op_check_plan(const vd_plan_t *p, const char *file, vd_diag *d);

#endif
