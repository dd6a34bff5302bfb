/*
 * verifier/findings_int.h - private to the findings (findings.c, the
 * grouping; findings_locate.c, the diverging node): the facts about one
 * failing stage that both the choice of its diverging node and the
 * grouping's keys and diagnoses read.  Each is described where it is
 * defined, in findings_locate.c.
 */
#ifndef VD_FINDINGS_INT_H
#define VD_FINDINGS_INT_H

#include <stddef.h>
#include <stdint.h>

#include "findings.h"

/* Another failing stage whose values showed a repair (a missing reduction,
 * another rank's position) at a node that stage i holds too, or a copy of
 * it; *k that node in stage i.  -1 when none. */
ptrdiff_t vd_findings_i_reduce_elsewhere(const vd_run *r, size_t i, int32_t *k);

/* Whether node k of failing stage i is where lineage inference saw an
 * operator read a partial sum or one copy's share of a mean as whole. */
int vd_findings_i_reads_unreduced(const vd_run *r, size_t i, int32_t k);

/* Parallel graph node that made stage i's scaled leaf (a solver-proven
 * SCALE), past copies, views and operators that read the factor already;
 * -1 when stage i has no such leaf. */
int32_t vd_findings_i_scaled_producer(const vd_run *r, size_t i);

/* Where the factor of stage i's SCALE comes from (its origin): the earliest
 * node (topological position gpos) in the parallel cone above graph node
 * `from` (its scaled producer) that multiplies by a constant the
 * single-device plan does not apply (its lineages show the constant as the
 * factor it adds) and whose constant is the stage's factor, or a small
 * power of it (the square of an Adam moment); *s that constant.  -1 when
 * none (the factor then is only the product of several scalings, or comes
 * from a scaling that the single plan applies with another constant).  A
 * hint for the finding's location; nothing here changes a verdict.
 * Cost: the cone, at most 2^18 nodes. */
int32_t vd_findings_i_factor_origin(const vd_run *r, size_t i, int32_t from, const uint32_t *gpos, double *s);

#endif
