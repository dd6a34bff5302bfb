/*
 * plans/plan.h - the in-memory execution plan (format v1) and its builder.
 *
 * A plan is what one framework run executes in one training iteration: for a
 * single-device plan, one rank; for a parallel plan, the programs of the
 * ranks of ONE data-parallel replica ("stored ranks") plus a replication rule
 * for the other replicas, and per-microbatch re-execution of program
 * segments.  This keeps a 8192-rank plan as small as its 128 distinct
 * programs.  docs/plan-format.md specifies the file; this header is its
 * in-memory mirror.
 *
 * Model
 *  - tensors: a buffer on one stored rank.  Scope PER_MB tensors get one
 *    instance per microbatch (activations); PERSISTENT tensors have one
 *    instance per rank (weights, gradient accumulators, optimizer state) and
 *    may be updated in place: a node that reads T and writes T makes a new
 *    version (the graph module turns this into SSA).
 *  - lineage annotation (parallel plans): the tensor holds slice
 *    [lo, hi) of single-device tensor `full` (an id of the single plan), as
 *    value part k of n (n > 1: a partial sum; parts 0..n-1 sum to the slice).
 *    For replica d and microbatch m the annotation is shifted affinely:
 *        lo/hi[i] += d * dp_shift[i] + m * mb_shift[i]
 *        k        += d * dp_part     + m * mb_part
 *    The annotation holds for the tensor's initial value (if nothing
 *    produces it first) and for its final version.
 *  - nodes: one operator (or one rank's half of a collective) on one stored
 *    rank, in one segment.  Scalar constant operands are attributes.
 *  - segments and schedule: each stored rank executes a list of steps
 *    (segment, microbatch); a segment's nodes run in file order.  A step
 *    with microbatch -1 runs once (optimizer, reducers).
 *  - collectives: every participant has its own node with the same `coll`
 *    key and the same group (stored ranks, in group order).  Instances are
 *    matched by (coll, microbatch, replica).  If `span_replicas` is set, the
 *    group is the stored group repeated over all replicas
 *    (rank + d * stored_ranks for d = 0 .. replicas-1, replica-major).
 *    send/recv halves share a key; the group is [sender, receiver].
 *
 * Ownership: a vd_plan_t owns all its strings and arrays.  Indices (not
 * pointers) link records, so arrays may grow while building.
 * Identifiers: tensors and nodes have a file id (any int64, unique per kind)
 * and a dense index (position in the array) used everywhere in memory.
 *
 * Layer: plans/ is the plan format: in-memory model, reader/writer,
 * validation, generators; it may include common/.  tools/check_layers.sh
 * (make lint) enforces the order.
 */
#ifndef VD_PLAN_H
#define VD_PLAN_H

#include <stdint.h>
#include <stddef.h>

#include "../common/diag.h"

#define VD_PLAN_FORMAT "verdict-plan"
#define VD_PLAN_VERSION 1
#define VD_MAX_DIMS 8
#define VD_NO_ID (-1)

typedef enum { VD_PLAN_SINGLE, VD_PLAN_PARALLEL } vd_plan_kind;

typedef enum {
  VD_DT_F32, VD_DT_F16, VD_DT_BF16, VD_DT_F64, VD_DT_I64, VD_DT_I32, VD_DT_BOOL,
  VD_DT__COUNT
} vd_dtype;

typedef enum {
  VD_ROLE_INPUT,    /* data (tokens, labels, masks) */
  VD_ROLE_WEIGHT,   /* trainable parameter */
  VD_ROLE_GRAD,     /* gradient of a weight or an activation */
  VD_ROLE_ACT,      /* forward activation or other intermediate */
  VD_ROLE_LOSS,     /* the loss value */
  VD_ROLE_OPTSTATE, /* optimizer state (moments, step counters) */
  VD_ROLE__COUNT
} vd_role;

typedef enum { VD_SCOPE_PER_MB, VD_SCOPE_PERSISTENT, VD_SCOPE__COUNT } vd_scope;

typedef enum { VD_PHASE_FWD, VD_PHASE_BWD, VD_PHASE_COMM, VD_PHASE_OPT, VD_PHASE__COUNT } vd_phase;

/* Names used in files and printouts, indexed by the enums above. */
extern const char *const vd_dtype_names[VD_DT__COUNT];
extern const char *const vd_role_names[VD_ROLE__COUNT];
extern const char *const vd_scope_names[VD_SCOPE__COUNT];
extern const char *const vd_phase_names[VD_PHASE__COUNT];

typedef struct {
  int64_t full;                /* single-plan tensor id */
  int64_t lo[VD_MAX_DIMS];     /* slice start, single-device coordinates */
  int64_t hi[VD_MAX_DIMS];     /* slice end (exclusive) */
  int64_t part_k, part_n;      /* value part k of n; 0 of 1 = the whole value */
  int64_t dp_shift[VD_MAX_DIMS];
  int64_t mb_shift[VD_MAX_DIMS];
  int64_t dp_part, mb_part;
  /* In memory only, never in a file: an inferred candidate (lineage/infer.c)
   * may claim the value is `factor` times the part (a per-replica mean loss
   * with an averaging reducer makes every backward value dp x its share).
   * 0 stands for 1, so annotations read or built elsewhere need not set it. */
  double factor;
} vd_lineage_ann;

/* The factor of an annotation (1 when unset). */
static inline double vd_lineage_factor(const vd_lineage_ann *a) { return a->factor == 0.0 ? 1.0 : a->factor; }

typedef struct {
  int64_t id;            /* file id */
  uint32_t name;         /* offset into the string pool */
  int32_t rank;          /* stored rank that holds it */
  int32_t ndim;
  int64_t shape[VD_MAX_DIMS];
  vd_dtype dtype;
  vd_role role;
  vd_scope scope;
  int has_lin;
  vd_lineage_ann lin;
} vd_tensor_t;

typedef enum { VD_ATTR_INT, VD_ATTR_FLOAT, VD_ATTR_STR, VD_ATTR_INTS, VD_ATTR_FLOATS } vd_attr_kind;

typedef struct {
  uint32_t key;   /* string pool offset */
  vd_attr_kind kind;
  uint32_t len;   /* element count for INTS/FLOATS */
  union {
    int64_t i;
    double f;
    uint32_t s;   /* string pool offset */
    uint32_t off; /* offset into ints[] or floats[] */
  } v;
} vd_attr_t;

typedef struct {
  int64_t id;         /* file id */
  uint32_t op;        /* operator name, string pool offset */
  uint32_t name;      /* source name ("layers.3.attn.wq"), string pool offset */
  uint32_t src;       /* where the user's code calls it ("gpt.py:84 torch.sum"), pool offset; ""
                         when unknown.  Set with vd_plan_set_node_src (add_node clears it) */
  uint32_t stack;     /* the user's call stack (`stack`), innermost frame first, frames joined by
                         '\n', pool offset; "" when unknown.  vd_plan_set_node_stack */
  int32_t rank;       /* stored rank */
  int32_t segment;    /* index into segments */
  int32_t layer;      /* model layer, -1 if none */
  vd_phase phase;
  uint32_t in_off, n_in;     /* tensor indices in plan->refs */
  uint32_t out_off, n_out;   /* tensor indices in plan->refs */
  uint32_t attr_off, n_attr; /* into plan->attrs */
  int64_t coll;              /* collective / send-recv key, -1 if none */
  uint32_t group_off, n_group; /* stored ranks in plan->ints, group order */
  int span_replicas;
} vd_node_t;

typedef struct {
  int32_t segment;
  int32_t mb; /* -1: runs once */
} vd_step_t;

typedef struct {
  uint32_t step_off, n_steps; /* into plan->steps */
} vd_program_t;

typedef struct {
  int32_t dp, tp, pp, sp, cp, ep, nm; /* degrees; sp is 0/1 (a flag) */
  int32_t replicas;     /* how many replicas the stored ranks stand for */
  int32_t stored_ranks; /* ranks whose programs are stored */
  uint32_t layout;      /* string pool offset: rank order, fastest first, e.g. "tp,cp,pp,dp" */
} vd_world_t;

typedef struct vd_plan {
  vd_plan_kind kind;
  uint32_t model;       /* model description, string pool offset */
  vd_world_t world;

  vd_tensor_t *tensors; size_t n_tensors, cap_tensors;
  vd_node_t *nodes;     size_t n_nodes, cap_nodes;
  uint32_t *segments;   size_t n_segments, cap_segments; /* names (pool offsets) */
  vd_program_t *programs; /* world.stored_ranks of them */
  vd_step_t *steps;     size_t n_steps, cap_steps;

  uint32_t *refs;       size_t n_refs, cap_refs;   /* node inputs/outputs */
  vd_attr_t *attrs;     size_t n_attrs, cap_attrs;
  int64_t *ints;        size_t n_ints, cap_ints;   /* groups, INTS attrs */
  double *floats;       size_t n_floats, cap_floats;
  char *pool;           size_t n_pool, cap_pool;   /* NUL-terminated strings; offset 0 is "" */
  size_t file_bytes;    /* size of the file it was read from (plans/io.c); 0 when built in memory */
} vd_plan_t;

/* ---- lifetime --------------------------------------------------------- */

/* Initializes an empty plan (one stored rank, all degrees 1). */
vd_rc vd_plan_init(vd_plan_t *p, vd_plan_kind kind);
/* Frees everything the plan owns; accepts NULL and zeroed plans. */
void vd_plan_free(vd_plan_t *p);

/* ---- strings ---------------------------------------------------------- */

/* Interns s (copies it) and returns its offset in *off. */
vd_rc vd_plan_str(vd_plan_t *p, const char *s, uint32_t *off);
static inline const char *vd_plan_s(const vd_plan_t *p, uint32_t off) { return p->pool + off; }

/* ---- building (generators, readers, mutators) ------------------------- */

/* Sets the world; allocates empty programs for stored_ranks ranks. */
vd_rc vd_plan_set_world(vd_plan_t *p, const vd_world_t *w);

/* Adds a segment named name; its index goes to *seg. */
vd_rc vd_plan_add_segment(vd_plan_t *p, const char *name, int32_t *seg);

/* Appends step (segment, mb) to the program of stored rank `rank`.  Steps of
 * all ranks share one array, so they must be added rank by rank (all steps of
 * rank 0, then rank 1, ...); EINTERNAL otherwise. */
vd_rc vd_plan_add_step(vd_plan_t *p, int32_t rank, int32_t segment, int32_t mb);

/* Adds a tensor; t->name is ignored and `name` interned instead.  The id is
 * t->id.  Index to *idx (may be NULL). */
vd_rc vd_plan_add_tensor(vd_plan_t *p, const vd_tensor_t *t, const char *name, uint32_t *idx);

/* Adds a node with the given inputs/outputs (tensor indices) and group
 * (stored ranks).  n->in_off/out_off/attr_off/group_off are ignored.
 * Attributes are added afterwards with vd_plan_attr_* on the returned index,
 * which must be the last node added. */
vd_rc vd_plan_add_node(vd_plan_t *p, const vd_node_t *n, const char *op, const char *name,
                       const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out,
                       const int64_t *group, uint32_t n_group, uint32_t *idx);

/* Sets node idx's source location (docs/plan-format.md `src`); "" clears it. */
vd_rc vd_plan_set_node_src(vd_plan_t *p, uint32_t idx, const char *src);
/* Sets node idx's call stack (`stack`: frames joined by '\n'); "" clears it. */
vd_rc vd_plan_set_node_stack(vd_plan_t *p, uint32_t idx, const char *stack);
/* Most frames a node's `stack` may hold. */
#define VD_PLAN_STACK_MAX 32

vd_rc vd_plan_attr_int(vd_plan_t *p, uint32_t node, const char *key, int64_t v);
vd_rc vd_plan_attr_float(vd_plan_t *p, uint32_t node, const char *key, double v);
vd_rc vd_plan_attr_str(vd_plan_t *p, uint32_t node, const char *key, const char *v);
vd_rc vd_plan_attr_ints(vd_plan_t *p, uint32_t node, const char *key, const int64_t *v, uint32_t n);
vd_rc vd_plan_attr_floats(vd_plan_t *p, uint32_t node, const char *key, const double *v, uint32_t n);

/* Appends to node `node` of dst (the last node added) a copy of attribute a
 * of plan src (key, kind and value; strings and arrays are copied). */
vd_rc vd_plan_attr_copy(vd_plan_t *dst, uint32_t node, const vd_plan_t *src, const vd_attr_t *a);

/* ---- reading ---------------------------------------------------------- */

static inline const uint32_t *vd_node_inputs(const vd_plan_t *p, const vd_node_t *n) { return p->refs + n->in_off; }
static inline const uint32_t *vd_node_outputs(const vd_plan_t *p, const vd_node_t *n) { return p->refs + n->out_off; }
static inline const int64_t *vd_node_group(const vd_plan_t *p, const vd_node_t *n) { return p->ints + n->group_off; }
static inline const char *vd_node_op(const vd_plan_t *p, const vd_node_t *n) { return p->pool + n->op; }

/* Finds attribute key on node n; NULL if absent. */
const vd_attr_t *vd_node_attr(const vd_plan_t *p, const vd_node_t *n, const char *key);
/* Typed getters: return def when absent or of another kind (INT converts to float). */
int64_t vd_node_attr_int(const vd_plan_t *p, const vd_node_t *n, const char *key, int64_t def);
double vd_node_attr_float(const vd_plan_t *p, const vd_node_t *n, const char *key, double def);
const char *vd_node_attr_str(const vd_plan_t *p, const vd_node_t *n, const char *key, const char *def);

/* Names of the attribute kinds ("int", "float", "string", "ints", "floats"). */
extern const char *const vd_attr_kind_names[5];

/* Writes attribute a's value as stored, in JSON syntax, into buf (always
 * NUL-terminated; truncated with "..." past size): a float keeps a decimal
 * point even when integral ("2.0", not "2"), so a printout tells a float 2.0
 * from the int 2.  Returns buf. */
char *vd_attr_format(const vd_plan_t *p, const vd_attr_t *a, char *buf, size_t size);
/* Formats a double as vd_attr_format does ("%.17g", plus ".0" when integral). */
void vd_plan_fmt_double(double v, char *buf, size_t size);

/* 1 when attributes a (of plan pa) and b (of plan pb) have the same kind and
 * value (floats compare equal, or both NaN). */
int vd_attr_equal(const vd_plan_t *pa, const vd_attr_t *a, const vd_plan_t *pb, const vd_attr_t *b);

/* The lineage annotation of tensor t for replica `replica` and microbatch
 * `mb` (mb < 0 for persistent tensors: no microbatch shift): the slice
 * [lo, hi) in single-device coordinates and the part index k (of
 * t->lin.part_n).  t must have has_lin. */
void vd_tensor_lineage_at(const vd_tensor_t *t, int32_t replica, int32_t mb, int64_t lo[VD_MAX_DIMS],
                          int64_t hi[VD_MAX_DIMS], int64_t *part_k);

/* Number of elements of a tensor (product of its shape); 1 for scalars. */
int64_t vd_tensor_numel(const vd_tensor_t *t);

/* Finds a tensor or node by file id: index to *idx, or -1 if absent.
 * Linear scan; O(n).  Use a map for repeated lookups. */
int64_t vd_plan_find_tensor(const vd_plan_t *p, int64_t id);
int64_t vd_plan_find_node(const vd_plan_t *p, int64_t id);

/* Total replicated ranks: replicas * stored_ranks. */
static inline int64_t vd_plan_world_size(const vd_plan_t *p) {
  return (int64_t)p->world.replicas * p->world.stored_ranks;
}

/* ---- boundary-only plans (plans/strip.c) ------------------------------ */

/* *written (taken: vd_free it) gets one byte per tensor: 1 when some node
 * writes the tensor.  O(tensors + node outputs). */
vd_rc vd_plan_written(const vd_plan_t *p, uint8_t **written, vd_diag *d);
/* Whether tensor t is on the plan's boundary: role input, weight, optimizer
 * state or loss, or written by no node (written from vd_plan_written). */
int vd_plan_is_boundary(const vd_plan_t *p, const uint8_t *written, uint32_t t);
/* Removes every lineage annotation that is not on the boundary (in place);
 * counts of kept and removed annotations to the out-params (may be NULL). */
vd_rc vd_plan_strip(vd_plan_t *p, size_t *n_kept, size_t *n_stripped, vd_diag *d);

/* ---- work against the file size (plans/budget.c) ------------------------ */

/* *out gets the node executions of one replica (each node once per step of
 * its rank that runs its segment); counting stops once past `stop`.
 * O(steps + nodes). */
vd_rc vd_plan_executions(const vd_plan_t *p, uint64_t stop, uint64_t *out, vd_diag *d);
/* Executions and annotated tensor instances in all replicas against
 * REPLICA_EXEC_PER_BYTE * file_bytes +
 * REPLICA_EXEC_SLACK (common/limits.h).  Within: why[0] = 0.  Beyond: why
 * gets the one-line reason naming the limit (the caller reports it as
 * INCONCLUSIVE).  VD_OK either way; an error only for ENOMEM. */
vd_rc vd_plan_replica_work(const vd_plan_t *p, char *why, size_t n, vd_diag *d);

/* ---- file I/O (plans/io.c) -------------------------------------------- */

/* Reads and fully validates a plan file.  On failure the diag names the
 * file, the record and the field; *p is left freed.  Bounded memory: no
 * allocation is driven by a count that the file length cannot back. */
vd_rc vd_plan_read_file(const char *path, vd_plan_t *p, vd_diag *d);
/* Same, from a buffer; `name` is used in messages. */
vd_rc vd_plan_read_buffer(const char *buf, size_t len, const char *name, vd_plan_t *p, vd_diag *d);
/* Writes plan p (format v1).  Validates first (a plan we write must be one we read). */
vd_rc vd_plan_write_file(const vd_plan_t *p, const char *path, vd_diag *d);

/* ---- validation (plans/validate.c) ------------------------------------ */

/* Checks every structural rule of docs/plan-format.md on an in-memory plan:
 * ranges, dangling and duplicate ids, shapes against slices, node tensors on
 * the node's rank, schedule and collective consistency.  name is used in
 * messages. O(tensors + nodes) with hashing. */
vd_rc vd_plan_validate(const vd_plan_t *p, const char *name, vd_diag *d);

#endif
