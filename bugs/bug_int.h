/*
 * bugs/bug_int.h - private to bugs/: the editing machinery shared by the
 * mutations (bugs/mutate.c) and the per-class mutation functions
 * (bugs/bug_comm.c, bug_compute.c, bug_train.c).
 *
 * Editing model.  The mutated plan is a deep copy of the input that is edited
 * in place.  Records point into shared arrays by (offset, count) ranges; an
 * edit that changes a range's length appends the new range at the end of the
 * array and repoints the record (the old elements stay, unreferenced: the
 * writer and the validator walk records, never the raw arrays).  Nodes are not
 * referenced by index from anywhere else, so they can be inserted and deleted
 * by moving the node array.  Tensor indices stay stable (tensors are only
 * appended).
 */
#ifndef VD_BUG_INT_H
#define VD_BUG_INT_H

#include "bugs.h"

typedef struct {
  vd_plan_t *p;          /* the plan being mutated (the copy) */
  const vd_plan_t *in;   /* the original, borrowed */
  const vd_bug_opts *o;
  vd_bug_result *r;
  vd_diag *d;
  int bug;
} vd_bug_ctx;

typedef struct {
  uint32_t *v;
  size_t n, cap;
} vd_bug_list;

vd_rc vd_bug_i_list_push(vd_bug_list *l, uint32_t v);
void vd_bug_i_list_free(vd_bug_list *l);


/* ---- queries ---------------------------------------------------------- */

const char *vd_bug_i_name(const vd_plan_t *p, const vd_node_t *n);
const char *vd_bug_i_seg_name(const vd_plan_t *p, int32_t seg);
int vd_bug_i_is(const vd_plan_t *p, const vd_node_t *n, const char *op);
int vd_bug_i_ends(const char *s, const char *suffix);
/* 1 when some step of some rank runs segment seg with a microbatch >= 0. */
int vd_bug_i_seg_per_mb(const vd_plan_t *p, int32_t seg);
/* Forward / backward node: its segment is per-microbatch and its phase (or,
 * for comm nodes, the segment name suffix ".fwd"/".bwd") says so. */
int vd_bug_i_is_fwd(const vd_plan_t *p, const vd_node_t *n);
int vd_bug_i_is_bwd(const vd_plan_t *p, const vd_node_t *n);
/* A DP gradient reducer: a collective spanning replicas in a run-once segment. */
int vd_bug_i_is_reducer(const vd_plan_t *p, const vd_node_t *n);
/* " matching --rank" etc. for messages, "" without filters. */
const char *vd_bug_i_filters(const vd_bug_ctx *c);
typedef int (*vd_bug_pred)(const vd_plan_t *p, const vd_node_t *n);
/* Candidates: node indices satisfying pred that pass the rank/layer filters. */
vd_rc vd_bug_i_candidates(vd_bug_ctx *c, vd_bug_pred pred, vd_bug_list *out);
/* Pipeline stage of a stored rank (rank layout of docs/models.md). */
int32_t vd_bug_i_stage(const vd_plan_t *p, int32_t rank);
/* Index of the last node before node index `before` (or anywhere if
 * before < 0) that lists tensor ti as an output; -1 if none. */
int64_t vd_bug_i_producer(const vd_plan_t *p, uint32_t ti, int64_t before);
/* Node indices with coll key k, in file order. */
vd_rc vd_bug_i_coll_nodes(const vd_plan_t *p, int64_t k, vd_bug_list *out);
/* Node on `rank` with op and source name, in segment seg (-1 any); -1 if none. */
int64_t vd_bug_i_find(const vd_plan_t *p, int32_t rank, const char *op, const char *name, int32_t seg);
/* New unique ids. */
int64_t vd_bug_i_new_node_id(const vd_plan_t *p);
/* Confines the mutation made in c->p (against c->in) to microbatch mb: each
 * changed node runs in a variant segment for mb only, the original node for
 * the other microbatches (mutate_mb.c).  VD_EUSAGE when a changed node is a
 * collective or runs once, or the bug added or removed nodes or steps. */
vd_rc vd_bug_i_confine_mb(vd_bug_ctx *c, int32_t mb);
int64_t vd_bug_i_new_coll(const vd_plan_t *p);

/* ---- edits (on c->p) -------------------------------------------------- */

vd_rc vd_bug_i_set_op(vd_plan_t *p, uint32_t ni, const char *op);
/* coll < 0: no collective (group must be empty, span 0). */
vd_rc vd_bug_i_set_group(vd_plan_t *p, uint32_t ni, int64_t coll, const int64_t *g, uint32_t n, int span);
vd_rc vd_bug_i_set_refs(vd_plan_t *p, uint32_t ni, int outputs, const uint32_t *v, uint32_t n);
void vd_bug_i_clear_attrs(vd_plan_t *p, uint32_t ni);
vd_rc vd_bug_i_attr_float(vd_plan_t *p, uint32_t ni, const char *key, double v);
vd_rc vd_bug_i_attr_int(vd_plan_t *p, uint32_t ni, const char *key, int64_t v);
/* Moves the last node of the array to index pos (pos <= n_nodes - 1). */
void vd_bug_i_move_last(vd_plan_t *p, uint32_t pos);
/* Moves node from index `from` to index `to` (shifting the ones between). */
void vd_bug_i_move(vd_plan_t *p, uint32_t from, uint32_t to);
/* Appends a node like template tmpl (rank, segment, layer, phase; no coll)
 * with op/name/inputs/outputs and no attributes, at the end; *idx gets it. */
vd_rc vd_bug_i_add_node(vd_plan_t *p, const vd_node_t *tmpl, const char *op, const char *name, const uint32_t *in,
                        uint32_t n_in, const uint32_t *out, uint32_t n_out, uint32_t *idx);
/* Appends a tensor like t (same rank/dtype/role/scope) with shape, no lineage. */
vd_rc vd_bug_i_add_tensor(vd_plan_t *p, const vd_tensor_t *like, const char *name, int32_t ndim, const int64_t *shape,
                          uint32_t *idx);
void vd_bug_i_delete_node(vd_plan_t *p, uint32_t ni);
/* Takes p's steps out to rebuild them: *old (out, taken) a copy of the
 * steps, *prog (out, taken) of the programs (their offsets into *old); p is
 * left with every program empty.  VD_ENOMEM leaves p as it was. */
vd_rc vd_bug_i_take_steps(vd_plan_t *p, vd_step_t **old, vd_program_t **prog);
/* Inserts step (seg, mb) into rank's program before its step number pos. */
vd_rc vd_bug_i_insert_step(vd_plan_t *p, int32_t rank, uint32_t pos, int32_t seg, int32_t mb);

/* ---- result ------------------------------------------------------------ */

void vd_bug_i_note_node(vd_bug_ctx *c, int64_t id);
void vd_bug_i_note_rank(vd_bug_ctx *c, int32_t rank);
void vd_bug_i_note_layer(vd_bug_ctx *c, int32_t layer);
/* Sets per_mb when segment seg runs per microbatch. */
void vd_bug_i_note_seg(vd_bug_ctx *c, int32_t seg);
/* Notes node ni of c->p: its id, rank, layer and segment. */
void vd_bug_i_note_site(vd_bug_ctx *c, uint32_t ni);
/* Notes every node (id, rank, layer, segment) of a list. */
void vd_bug_i_note_list(vd_bug_ctx *c, const vd_bug_list *l);
void vd_bug_i_what(vd_bug_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "does not apply" failure: VD_EUSAGE with a one-line reason. */
#define VD_BUG_NA(c, ...) VD_FAIL((c)->d, VD_EUSAGE, NULL, NULL, NULL, __VA_ARGS__)

/* Picks the (seed mod n)-th element. */
static inline uint32_t vd_bug_i_pick(const vd_bug_ctx *c, const vd_bug_list *l) {
  return l->v[(size_t)(c->o->seed % l->n)];
}

/* Mutation functions, one per bug (bug_comm.c, bug_compute.c, bug_train.c). */
typedef vd_rc (*vd_bug_fn)(vd_bug_ctx *c);
vd_rc vd_bug_i_01(vd_bug_ctx *c);
vd_rc vd_bug_i_02(vd_bug_ctx *c);
vd_rc vd_bug_i_03(vd_bug_ctx *c);
vd_rc vd_bug_i_04(vd_bug_ctx *c);
vd_rc vd_bug_i_05(vd_bug_ctx *c);
vd_rc vd_bug_i_06(vd_bug_ctx *c);
vd_rc vd_bug_i_07(vd_bug_ctx *c);
vd_rc vd_bug_i_08(vd_bug_ctx *c);
vd_rc vd_bug_i_09(vd_bug_ctx *c);
vd_rc vd_bug_i_10(vd_bug_ctx *c);
vd_rc vd_bug_i_11(vd_bug_ctx *c);
vd_rc vd_bug_i_12(vd_bug_ctx *c);
vd_rc vd_bug_i_13(vd_bug_ctx *c);
vd_rc vd_bug_i_14(vd_bug_ctx *c);
vd_rc vd_bug_i_15(vd_bug_ctx *c);
vd_rc vd_bug_i_16(vd_bug_ctx *c);
vd_rc vd_bug_i_17(vd_bug_ctx *c);
vd_rc vd_bug_i_18(vd_bug_ctx *c);
vd_rc vd_bug_i_19(vd_bug_ctx *c);
vd_rc vd_bug_i_20(vd_bug_ctx *c);
vd_rc vd_bug_i_21(vd_bug_ctx *c);
vd_rc vd_bug_i_22(vd_bug_ctx *c);
vd_rc vd_bug_i_23(vd_bug_ctx *c);
vd_rc vd_bug_i_24(vd_bug_ctx *c);
vd_rc vd_bug_i_25(vd_bug_ctx *c);

#endif
