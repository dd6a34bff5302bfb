/*
 * oracle/exec.h - the numeric executor: the independent oracle of a verdict.
 *
 * vd_exec_compare runs one training iteration of a single-device plan and of
 * a parallel plan in double precision on the plans' own (small) shapes, with
 * random inputs, and compares every lineage-annotated parallel tensor's final
 * value with the slice of the single tensor it claims to hold.  It shares the
 * operator registry's evaluators with nothing symbolic, so it is an
 * independent check of the symbolic verifier (no false negatives in the
 * encoder go unnoticed on the test suite).
 *
 * Inputs.  Every initial value of the single plan gets deterministic random
 * values from (seed, tensor id, element): floats uniform in [-1, 1),
 * optimizer state in [0.1, 1) (Adam's v must stay positive), integer tensors
 * (i64/i32/bool dtype) uniform integers in [0, N) where N is the smallest
 * index range of the embedding tables / pick logits that consume them
 * (followed through data-movement ops; N = 2 when none is found).  Every
 * initial value of the parallel plan is derived from the single plan's
 * initial values through its lineage annotation, shifted for its replica and
 * microbatch (plans/plan.h): part k of n > 1 of slice S gets random values
 * for k < n-1 and S minus their sum for k = n-1, the same for every copy of
 * that part (seeded by (full, slice, part)).  A parallel initial value
 * without annotation, or whose single tensor is not an input of the single
 * plan, gets independent random values: nothing the plan did not say is
 * assumed.
 *
 * Verdict.  Parallel tensors: for every (tensor, replica, microbatch)
 * instance with a final value; part 0 of 1 must equal the slice, parts of
 * n > 1 must sum to it (one copy of each part, every copy checked).  Error is
 * |got - expected| / max(1, |expected|); the instance agrees when every
 * element is within tol.  AGREE needs every annotated tensor compared: an
 * annotation whose single tensor has no value in the single plan, an
 * annotated tensor that never holds a value, or a pair with no element
 * compared at all (no lineage, an empty plan) is DISAGREE with a reason.
 * A dataflow problem of the parallel graph, a shape
 * or attribute error of a parallel node, or an unknown operator are reported
 * as DISAGREE (or UNSUPPORTED for an operator outside the registry) with a
 * reason; the same problems in the single plan are bad input (VD_EINPUT).
 *
 * Cost: O(sum of executed node costs) time, one double array per graph
 * value (kept to the end: small shapes are the use case).
 *
 * Layer: oracle/ is the numeric executor, an independent judge of
 * equivalence; it may include common/, plans/, ops/, graph/ (no lineage/,
 * stages/ or solver/: it shares no symbolic code).  tools/check_layers.sh
 * (make lint) enforces the order.
 */
#ifndef VD_EXEC_H
#define VD_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../plans/plan.h"

typedef struct {
  uint64_t seed;             /* random inputs; any value, 0 included */
  double tol;                /* relative tolerance; <= 0 means 1e-9 */
  const char *single_name;   /* file names for messages; may be NULL */
  const char *parallel_name;
} vd_exec_opts;

typedef enum { VD_EXEC_AGREE, VD_EXEC_DISAGREE, VD_EXEC_UNSUPPORTED } vd_exec_status;

extern const char *const vd_exec_status_names[3];

/* The first disagreeing instance, in (tensor index, replica, mb) order. */
typedef struct {
  char name[128];       /* parallel tensor name */
  char full_name[128];  /* single tensor name */
  int64_t tensor_id, full_id;
  int32_t stored_rank, replica, mb;
  int64_t rank;         /* global rank */
  int32_t ndim;         /* of the single tensor (slice) */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
  int64_t part_k, part_n;
  int32_t pndim;        /* of the parallel tensor (index) */
  int64_t index[VD_MAX_DIMS]; /* element index in the parallel tensor */
  int64_t full_index[VD_MAX_DIMS]; /* the same element in the single tensor */
  double expected, got; /* got: the copy's value, or the sum of the parts */
  double rel_err;
  int missing_part;     /* >= 0: this part of the slice has no instance */
} vd_exec_mismatch;

typedef struct {
  vd_exec_status status;
  size_t n_tensors;     /* annotated parallel tensors with a compared instance */
  size_t n_instances;   /* (tensor, replica, mb) instances compared */
  size_t n_elements;    /* elements compared */
  size_t n_bad_instances;
  double max_rel_err;
  int has_mismatch;     /* `first` is set */
  vd_exec_mismatch first;
  char reason[1024]; /* non-value reason for DISAGREE/UNSUPPORTED, else "" */
} vd_exec_result;

/* Runs both plans and compares them.  Both plans must have passed
 * vd_plan_validate.  Returns VD_OK with the verdict in *r, or VD_EINPUT (the
 * single plan cannot be executed, or a lineage annotation is out of range),
 * VD_ENOMEM; details in d.  Deterministic for a given seed. */
vd_rc vd_exec_compare(const vd_plan_t *single, const vd_plan_t *parallel, const vd_exec_opts *o,
                      vd_exec_result *r, vd_diag *d);

/* Receives one value of the single plan: tensor t's initial (final = 0) or final (final = 1)
 * value, n = vd_tensor_numel(t) doubles in row-major order.  Borrowed pointers, valid during
 * the call.  A nonzero return stops the run (vd_exec_single returns VD_EINTERNAL). */
typedef int (*vd_exec_value_fn)(void *ctx, const vd_plan_t *p, const vd_tensor_t *t, int final, const double *x,
                                int64_t n);

/* Runs the single plan alone on the inputs vd_exec_compare gives it (same seed, same values)
 * and reports the initial and final value of every tensor that has one, in tensor order.
 * It lets a frontend check its capture against a real run of the framework (tools/torch2plan
 * --replay).  VD_OK, VD_EINPUT (the plan cannot be executed, or an operator is outside the
 * registry), VD_ENOMEM; details in d. */
vd_rc vd_exec_single(const vd_plan_t *single, const vd_exec_opts *o, vd_exec_value_fn fn, void *ctx, vd_diag *d);

/* ---- reduced shapes (oracle/exec_reduce.c) ----------------------------------
 *
 * Real plans are too large to execute in double precision.  vd_exec_reduce
 * builds copies of both plans on reduced shapes with the verifier's shape
 * reduction applied to the whole pair (ops/reduce.h,
 * docs/shape-reduction.md): one dimension class per set of dimensions tied by
 * an operator's reduction rule or a lineage slice, reduced by one ratio, so
 * shard boundaries, collective factors and position attributes (embedding
 * start, rope offset, mask offsets) scale exactly.  docs/verifier.md says what
 * running the executor on the copies assumes. */

typedef enum {
  VD_EXEC_RED_OK,             /* reduced (info->reduced) */
  VD_EXEC_RED_UNSUPPORTED,    /* an operator outside the registry */
  VD_EXEC_RED_CANNOT,         /* no reduction rule covers some node ("cannot reduce: ...") */
  VD_EXEC_RED_PARALLEL_SHAPE, /* the parallel plan's shapes contradict a rule or a slice */
} vd_exec_red_status;

typedef struct {
  vd_exec_red_status status;
  int reduced;                  /* 1: *rs and *rp hold the reduced copies */
  int64_t max_numel, rmax_numel; /* largest tensor of the pair, before / after */
  char reason[1024];            /* status != OK: one line naming the node */
} vd_exec_reduce_info;

/* Builds reduced copies *rs, *rp of two validated plans (o: file names for
 * messages; may be NULL).  VD_OK with info->status; the copies are owned by
 * the caller when info->reduced (free them with vd_plan_free), zeroed
 * otherwise.  VD_EINPUT when the single plan's graph cannot be built or its
 * shapes contradict a rule, or a lineage annotation names no single tensor
 * or one of another rank (vd_exec_compare rejects those too); VD_ENOMEM.  O(nodes + tensors) plus the graphs. */
vd_rc vd_exec_reduce(const vd_plan_t *single, const vd_plan_t *parallel, const vd_exec_opts *o, vd_plan_t *rs,
                     vd_plan_t *rp, vd_exec_reduce_info *info, vd_diag *d);

/* The element count of the plan's largest tensor. */
int64_t vd_exec_max_numel(const vd_plan_t *p);

#endif
