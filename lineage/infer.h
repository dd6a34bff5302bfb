/*
 * lineage/infer.h - what the files of the lineage inference share
 * (lineage/infer*.c; docs/verifier.md section 1b, and lineage/infer.c
 * for how propagation works): a value's candidate lineage (vlin), the
 * inference context (ictx), and the functions one file calls in another.
 * Internal to lineage/: the public entry is vd_lin_infer (lineage.h).
 *
 * The shared functions keep their short names inside these files; the
 * #defines give them a vd_lin_i_ prefix in the library's symbol table.
 */
#ifndef VD_LIN_INFER_H
#define VD_LIN_INFER_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lineage.h"
#include "../common/ctl.h"
#include "../common/mem.h"
#include "../ops/ops.h"
#include "../plans/idmap.h"

#define aligned vd_lin_i_aligned
#define aligned_any vd_lin_i_aligned_any
#define lwidth vd_lin_i_lwidth
#define norm_part vd_lin_i_norm_part
#define ptens vd_lin_i_ptens
#define rules vd_lin_i_rules
#define stens vd_lin_i_stens
#define vl_at vd_lin_i_vl_at
#define vl_put vd_lin_i_vl_put
#define vl_slot vd_lin_i_vl_slot
#define factor_escapes vd_lin_i_factor_escapes
#define find_stuck vd_lin_i_find_stuck
#define guess_node vd_lin_i_guess_node
#define guess_outputs vd_lin_i_guess_outputs
#define is_sum vd_lin_i_is_sum
#define prop_node vd_lin_i_prop_node
#define adds_constant vd_lin_i_adds_constant
#define cancels_factor vd_lin_i_cancels_factor
#define cmp_byname vd_lin_i_cmp_byname
#define cmp_sname vd_lin_i_cmp_sname
#define dfind vd_lin_i_dfind
#define dix vd_lin_i_dix
#define forward_partners vd_lin_i_forward_partners
#define map_node vd_lin_i_map_node
#define multiref_twin vd_lin_i_multiref_twin
#define match_single vd_lin_i_match_single
#define match_single_in vd_lin_i_match_single_in
#define node_links vd_lin_i_node_links
#define out_factor vd_lin_i_out_factor
#define reads vd_lin_i_reads
#define same_outputs vd_lin_i_same_outputs
#define scaling vd_lin_i_scaling
#define single_roots vd_lin_i_single_roots

typedef struct {
  uint8_t known, zero;
  int32_t sv; /* Gs value */
  int32_t nd; /* single ndim */
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS], dlo[VD_MAX_DIMS];
  int64_t k0, cnt, n, dk; /* parts [k0 + d*dk, + cnt) of n */
  /* A split dim (a [b*s] flattening of a sequence-sliced [b, s]): when
   * split = j + 1, single dim j is read as [shape[j] / si, si] and the
   * value holds the box [lo[j], hi[j]) x [ilo, ihi) of that pair (replica
   * shifts dlo[j], dil), row-major, which is no slice of dim j.  Only MAP
   * (a dim linked to the split one keeps it) and views (which merge it or
   * take it apart again) accept such a value; it is never emitted. */
  int32_t split;
  int64_t si, ilo, ihi, dil;
  /* Propagated but never written as a candidate: the sum of a subset of a
   * gradient fan-in (a multiref_backward matched by name with fewer inputs
   * than the single one), and what copies or collectives make of it.  It
   * lets the node that completes the sum match; as a candidate it would
   * fail its proof and cost a round. */
  uint8_t noemit;
  uint8_t guess; /* guessed from a consumer (guess_node), not propagated */
  double f;               /* the value is f times the lineage's (1 for a candidate) */
  int32_t fsrc;           /* Gp node that last changed f (f != 1), else -1 */
  uint32_t uni;           /* dims along which the single value is constant (a broadcast):
                             there the slice's position is free */
} vlin;

typedef struct {
  const vd_graph_t *gs, *gp;
  const vd_plan_t *sp, *pp;
  /* Lineages of Gp values: vix[v] is 0 (unknown) or 1 + the record's index
   * in vchunk (chunks of VL_CHUNK records, allocated as values get their
   * first lineage, never moved): only the values that get one cost a
   * record, which is GBs less on large plans (vl_at, vl_slot, vl_put). */
  uint32_t *vix;
  vlin **vchunk;
  uint32_t n_rec;
  int oom;
  int stopped; /* a stop was requested (common/ctl.h): the sweeps end early, the result is dropped */
  uint8_t *seeded; /* per Gp value: an annotated initial or final value */
  int *pop;      /* per parallel plan node: vd_op_id */
  int *sop;      /* per single plan node */
  int32_t *fwd_of; /* per Gp node: forward partner Gp node or -1 (forward_partners) */
  uint32_t *byname; /* parallel plan nodes sorted by (rank, name) */
  int32_t *gfirst, *gnext; /* Gp nodes of each plan node, as a list */
  uint32_t *sroot, *rv_off, *rv; /* single copy roots (single_roots) */
  uint32_t *sbyname;             /* single plan nodes sorted by name */
  int32_t *sgfirst, *sgnext;     /* Gs nodes of each single plan node */
  /* The worklist (see sweep): per Gp node its topological position; the
   * backward nodes whose forward partner is each node (CSR); per Gp value
   * whether it is counted known; one bitset over topological positions per
   * kind of sweep (propagate, guess_node, guess_outputs). */
  uint32_t *tpos;
  uint32_t *rfw_off, *rfw;
  uint8_t *noted;
  size_t n_known;
  uint64_t *dirty[3];
  int factor_escapes; /* a factor does not cancel somewhere (factor_escapes): no candidate carries one */
} ictx;

#define VL_CHUNK ((size_t)1 << 16)

#define MAXOPD 16

typedef struct {
  int n_in, n_out;
  int par[2 * MAXOPD * VD_MAX_DIMS];
} dsu;


/* infer.c */
int aligned(const ictx *c, uint32_t v);
int aligned_any(const ictx *c, uint32_t v);
int64_t lwidth(const vlin *l, int32_t i);
int norm_part(const vlin *l, int64_t *k, int64_t *n, int64_t *dk);
const vd_tensor_t *ptens(const ictx *c, uint32_t v);
extern const vd_lin_prop_rule rules[VD_OP__COUNT];
const vd_tensor_t *stens(const ictx *c, int32_t sv);
const vlin *vl_at(const ictx *c, uint32_t v);
void vl_put(ictx *c, uint32_t v, const vlin *l);
vlin *vl_slot(ictx *c, uint32_t v);
void vd_lin_i_mark_readers(ictx *c, uint32_t v);
/* infer_emit.c */
int vd_lin_i_emit_tensor(ictx *c, uint32_t ti, vd_plan_t *pp);
int factor_escapes(const ictx *c, int *into_updates);
void find_stuck(ictx *c, vd_lin_infer_stats *s);
/* infer_guess.c */
int guess_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru);
int guess_outputs(ictx *c, uint32_t gi, int op);
/* infer_kinds.c */
int is_sum(const vd_plan_t *p, const vd_node_t *nd, int op, uint32_t n_in);
int prop_node(ictx *c, uint32_t gi);
/* infer_moved.c */
void moved_box(ictx *c, uint32_t gi);
int moved_interior(const ictx *c, const vd_gnode_t *pn);
/* infer_map.c */
int adds_constant(const vd_plan_t *p, const vd_node_t *nd, int op);
int cancels_factor(const ictx *c, const vd_gnode_t *pn, int op);
int cmp_byname(const void *a, const void *b, void *arg);
int cmp_sname(const void *a, const void *b, void *arg);
int dfind(dsu *u, int x);
int dix(const dsu *u, int out, int t, int dim);
void forward_partners(ictx *c, uint32_t q, int op);
void map_node(ictx *c, uint32_t gi, int op, const vd_lin_prop_rule *ru);
int32_t multiref_twin(const ictx *c, uint32_t gi);
int32_t match_single(const ictx *c, const vd_gnode_t *pn, int op);
int32_t match_single_in(const ictx *c, const vd_gnode_t *pn, int op, int partial);
int node_links(const ictx *c, const vd_gnode_t *pn, int op, dsu *u);
int out_factor(const ictx *c, const vd_gnode_t *pn, const vd_gnode_t *sn, int op, const vd_lin_prop_rule *ru,
                      uint32_t o, double *fo);
int reads(const vd_lin_prop_rule *ru, uint32_t o, uint32_t i);
int same_outputs(const ictx *c, const vd_gnode_t *a, const vd_gnode_t *b);
int scaling(const vd_plan_t *p, const vd_node_t *nd, int op, double *s);
vd_rc single_roots(ictx *c, vd_diag *d);

#endif
