/*
 * bugs/bugs.h - the mutation engine: the 25 bug classes of docs/bugs.md as
 * mutations of a correct parallel plan.
 *
 * A mutation turns a correct parallel plan (from the generators, or any plan
 * with the same naming conventions) into a plan that is still well formed
 * (vd_plan_validate and the reader accept it) but means something else, the
 * way a real framework bug would look in the framework's output: a
 * collective replaced or dropped, a constant changed on one rank, a reducer
 * scheduled too early, a group permuted, ...  The single-device plan is never
 * touched.  Only the plans/ API is used: the input plan is copied and the
 * copy is edited in memory; the caller writes it with vd_plan_write_file.
 *
 * Site selection.  Every bug has a list of candidate sites (nodes that match
 * its pattern).  opts.rank and opts.layer filter them (-1: any); "one-site"
 * bugs then take the (seed mod count)-th candidate, "every-site" bugs (the
 * ones docs/bugs.md phrases as "on several ranks" or that a framework would make
 * everywhere) take all candidates that pass the filters.  opts.mb is
 * used by bug 14 (which microbatch's backward the reducer overtakes; default
 * the last); for every other bug opts.mb confines the mutation to that
 * microbatch (the changed nodes run in a variant segment for that microbatch
 * only; collectives and nodes that run once cannot be confined).  A plan
 * without a candidate is not an error of the plan: the mutation "does not
 * apply" (VD_EUSAGE, one-line reason in the diag).
 *
 * The result names what was changed: node file ids (of the output plan;
 * nodes removed by the mutation are named by their id in the input plan),
 * the stored ranks, the layer, and whether the mutated code runs once per
 * microbatch.
 *
 * Layer: bugs/ is bug injection (docs/bugs.md); it may include common/ and plans/
 * only.  tools/check_layers.sh (make lint) enforces the order.
 */
#ifndef VD_BUGS_H
#define VD_BUGS_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"
#include "../plans/plan.h"

#define VD_BUG_COUNT 25

typedef enum {
  VD_BUG_COMMUNICATION,
  VD_BUG_RANK_ASSIGNMENT,
  VD_BUG_COMPUTATION,
  VD_BUG_SCALING,
  VD_BUG_SCHEDULING,
  VD_BUG_GROUP,
  VD_BUG_OPTIMIZER,
  VD_BUG_CLASS__COUNT
} vd_bug_class;

/* Plan features a bug needs (vd_bug_info.needs). */
enum {
  VD_BUG_NEED_TP = 1u << 0,   /* tp > 1 */
  VD_BUG_NEED_PP = 1u << 1,   /* pp > 1 */
  VD_BUG_NEED_DP = 1u << 2,   /* dp > 1 (a reducer spanning replicas) */
  VD_BUG_NEED_NM = 1u << 3,   /* nm > 1 */
  VD_BUG_NEED_SP = 1u << 4,   /* sequence parallelism */
  VD_BUG_NEED_CP = 1u << 5,   /* context parallelism */
  VD_BUG_NEED_EP = 1u << 6,   /* expert parallelism (moe) */
  VD_BUG_NEED_ZERO = 1u << 7, /* ZeRO-1 optimizer */
  VD_BUG_NEED_CLIP = 1u << 8, /* global grad-norm clipping */
  VD_BUG_NEED_TIED = 1u << 9, /* tied embedding / LM head weights */
  VD_BUG_NEED_GATHER = 1u << 10, /* an all_gather: sp, cp or zero */
};

typedef struct {
  int number;            /* 1..25, the row of docs/bugs.md */
  vd_bug_class cls;
  const char *name;      /* short identifier, e.g. "fwd-allreduce-identity" */
  const char *desc;      /* one line: what the mutation does */
  const char *diagnosis; /* expected verdict class, e.g. "MISSING_REDUCTION" */
  const char *accept;    /* every acceptable class, '|'-separated (diagnosis first) */
  unsigned needs;        /* VD_BUG_NEED_* (any one of SP/CP/ZERO for NEED_GATHER) */
  const char *needs_text;/* the same, readable: "tp>1, sp" */
  const char *gen_opts;  /* `verdict gen` options (beyond the model sizes) the suite uses */
  const char *sites;     /* two site selections the suite tries, ';'-separated ("--layer 0;--layer 1") */
  int every_site;        /* 1: mutates every candidate that passes the filters */
} vd_bug_info;

/* The table, indexed by number - 1. */
extern const vd_bug_info vd_bug_table[VD_BUG_COUNT];
extern const char *const vd_bug_class_names[VD_BUG_CLASS__COUNT];

/* The row of bug number `bug` (1..25), or NULL. */
const vd_bug_info *vd_bug_info_get(int bug);

typedef struct {
  int32_t rank;  /* stored rank filter, -1: any */
  int32_t layer; /* layer filter, -1: any */
  int32_t mb;    /* bug 14: the overtaken microbatch; others: confine to it; -1: default */
  uint64_t seed; /* picks among candidates and variants; 0 is fine */
} vd_bug_opts;

/* Sets rank = layer = mb = -1, seed = 0. */
void vd_bug_opts_default(vd_bug_opts *o);

#define VD_BUG_MAX_NODES 256
#define VD_BUG_MAX_RANKS 64

typedef struct {
  int bug;
  size_t n_nodes;                       /* mutated/inserted/removed nodes */
  int64_t nodes[VD_BUG_MAX_NODES];      /* their file ids (removed: id in the input plan) */
  size_t n_ranks;
  int32_t ranks[VD_BUG_MAX_RANKS];      /* stored ranks whose programs changed, ascending */
  int32_t layer;                        /* the layer of the mutated site(s), -1 none/several */
  int per_mb;                           /* 1: the mutated segment runs once per microbatch */
  int32_t mb;                           /* microbatch named by the bug (14: the one missed), else -1 */
  char what[512];                       /* one line: what was changed */
} vd_bug_result;

/* Applies bug `bug` to parallel plan `in` (borrowed, not modified) and
 * builds the mutated plan in `out` (initialized here; the caller frees it
 * with vd_plan_free, also on failure).  The output passes vd_plan_validate.
 * Returns VD_OK with *r filled; VD_EUSAGE when the bug does not apply to
 * this plan or the options (the diag says why in one line, e.g. "bug 18
 * does not apply: no sequence-parallel norm weight gradient reducer");
 * VD_EINPUT when `in` is not a parallel plan; VD_ENOMEM.
 * Cost: O(plan size) per mutation, plus O(nodes) per candidate lookup. */
vd_rc vd_bug_apply(const vd_plan_t *in, int bug, const vd_bug_opts *o, vd_plan_t *out, vd_bug_result *r,
                   vd_diag *d);

#endif
