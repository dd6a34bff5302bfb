/*
 * ops/reduce.h - the closed-form shape reduction over an arbitrary set of
 * values (docs/shape-reduction.md).
 *
 * The verifier reduces one stage at a time (vd_stage_reduce in stage.h is a
 * client of this interface); the numeric executor reduces a whole
 * single/parallel pair (oracle/exec_reduce.c).  Both describe their problem
 * the same way:
 *   - values: n shapes (one variable per dimension);
 *   - nodes: an operator over some values, constrained by the registry's
 *     reduction rule (ops/ops_reduce.c);
 *   - relations: a parallel value holds slice [lo, hi) of a single value
 *     (same ratio per dimension, the bounds are positions);
 *   - extra positions along a dimension (lineage shifts).
 * vd_reducer_solve then gives every class of tied dimensions one ratio g/m
 * (gcd of sizes and positions; MIN2/EVEN/KEEP; PROD groups) exactly as
 * documented for stages.  Queries afterwards: reduced sizes, scaled
 * positions, and the scaled position attributes the rules reported.
 *
 * Errors: VD_EINPUT when the original sizes contradict a rule's factor or a
 * slice's width (the diag's record is the `record` given with the node or
 * relation); VD_EINTERNAL for an operand index out of range; VD_ENOMEM.
 * Cost: O(dims * alpha + constraints + PROD restarts * groups * class size).
 */
#ifndef VD_REDUCE_H
#define VD_REDUCE_H

#include <stdint.h>

#include "../common/diag.h"
#include "../plans/plan.h"

typedef struct vd_reducer vd_reducer;

typedef struct {
  int32_t ndim;
  const int64_t *shape; /* ndim extents; copied */
} vd_red_value;

/* A problem over n values.  ndim must be in [0, VD_MAX_DIMS] (EINTERNAL). */
vd_rc vd_reducer_new(const vd_red_value *vals, uint32_t n, vd_reducer **out, vd_diag *d);
void vd_reducer_free(vd_reducer *r); /* accepts NULL */

/* Applies operator op's reduction rule (op must be a valid vd_op_id) to a
 * node over values in[0..n_in) -> out[0..n_out).  plan/node (may be NULL)
 * give the attributes.  tag is the caller's node identifier, returned with
 * the node's position attributes.  *norule = 1 when the rule does not cover
 * this operand form: the caller should not reduce (nothing else changes). */
vd_rc vd_reducer_node(vd_reducer *r, uint32_t tag, int op, const vd_plan_t *plan, const vd_node_t *node,
                      const uint32_t *in, uint32_t n_in, const uint32_t *out, uint32_t n_out,
                      const char *record, int *norule, vd_diag *d);

/* Value pv holds slice [lo, hi) of value sv (same ndim; hi - lo must equal
 * pv's extents). */
vd_rc vd_reducer_relate(vd_reducer *r, uint32_t pv, uint32_t sv, const int64_t *lo, const int64_t *hi,
                        const char *record, vd_diag *d);

/* x is a position along dimension dim of value v (g will divide it). */
void vd_reducer_position(vd_reducer *r, uint32_t v, int32_t dim, int64_t x);

/* Dimension dim of value v (and so every member of its class) keeps at
 * least k elements after reduction, or its original extent when that is
 * smaller (the class is then not reduced).  The verifier's rules never ask
 * for this (they use MIN2); the numeric executor does, for dimensions that
 * bound its random integer inputs (exec_reduce.c). */
void vd_reducer_min_extent(vd_reducer *r, uint32_t v, int32_t dim, int64_t k);

/* Dimension dim of value v (and so its whole class) keeps its original
 * extent (KEEP), as if a rule had asked for it. */
void vd_reducer_keep(vd_reducer *r, uint32_t v, int32_t dim);

/* Before vd_reducer_solve, after every node and relation: sets
 * mark[w * VD_MAX_DIMS + j] = 1 for every dimension j of every value w
 * linked to dimension dim of value v: in its class, or in a class that a
 * PROD group (a view's merge or split) joins to it, transitively.  mark has
 * n_vals * VD_MAX_DIMS entries; entries not linked are left as they are.
 * stages/shape.c's one-hot guard follows the classes of a one-hot's class
 * dimension with it.  VD_ENOMEM only. */
vd_rc vd_reducer_linked(vd_reducer *r, uint32_t v, int32_t dim, uint8_t *mark, vd_diag *d);

/* Computes the ratios.  *reduced = 0 when the PROD groups cannot be
 * satisfied (the caller then keeps every original size). */
vd_rc vd_reducer_solve(vd_reducer *r, int *reduced, vd_diag *d);

/* After a successful solve: x (a size or a position along dimension dim of
 * value v) on the reduced scale. */
int64_t vd_reducer_scale(vd_reducer *r, uint32_t v, int32_t dim, int64_t x);

/* Position attributes reported by the rules, in the order the nodes were
 * given: node tag, attribute name (static string), original and scaled
 * value.  i < vd_reducer_n_pos(r). */
size_t vd_reducer_n_pos(const vd_reducer *r);
void vd_reducer_pos(vd_reducer *r, size_t i, uint32_t *tag, const char **attr, int64_t *orig, int64_t *scaled);

/* Averaging nodes (AVG, docs/shape-reduction.md): node tag, the full-size
 * element count it averages over, and the count on the reduced shapes.
 * When they differ, the reduced node must divide by `full` (attribute
 * "divisor"), not by its own count.  i < vd_reducer_n_avg(r); valid after a
 * successful solve. */
size_t vd_reducer_n_avg(const vd_reducer *r);
void vd_reducer_avg(vd_reducer *r, size_t i, uint32_t *tag, int64_t *full, int64_t *reduced);

#endif
