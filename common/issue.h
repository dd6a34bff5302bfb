/*
 * common/issue.h - the one structural-issue record and the diagnosis classes.
 *
 * Three modules find structural problems before anything is proved: graph/
 * (dataflow of one plan), lineage/ (annotations that do not describe the
 * single tensors) and stages/ (shapes, DP reducer schedule, microbatch
 * alignment, values without lineage).  Each records them as vd_issue, and
 * the module that finds an issue also decides its diagnosis class, once,
 * where the facts are (e.g. graph/ssa.c knows that a READ_EARLY is a DP
 * gradient reducer overtaking its backward: SCHEDULE).  verifier/ only
 * collects and prints them.
 *
 * The diagnosis classes are shared with the stage verdicts of solver/
 * (stage_solve.h), so one enum and one name table serve both.
 *
 * Lists are arrays held by the producing module ((issues, n_issues,
 * n_issues_dropped) in vd_graph_t, vd_lin_table, vd_stage_set, vd_run); a
 * list may cap how many it stores and only count the rest.
 */
#ifndef VD_ISSUE_H
#define VD_ISSUE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"

typedef enum {
  VD_DX_NONE = 0,
  VD_DX_MISSING_REDUCTION, /* the copies sum to Ts while each claims the whole */
  VD_DX_EXTRA_REDUCTION,   /* a copy is Ts times the number of copies */
  VD_DX_SCALE,             /* a copy is c * Ts; factor named */
  VD_DX_PERMUTED_SLICES,   /* a copy holds Ts's values of another slice */
  VD_DX_WRONG_VALUE,       /* anything else */
  VD_DX_DATAFLOW,
  VD_DX_SCHEDULE,
  VD_DX_ALIGNMENT,
  VD_DX_SHAPE,
  VD_DX_BATCH,             /* the plans read different global batches */
  VD_DX__COUNT
} vd_diagnosis;

extern const char *const vd_diagnosis_names[VD_DX__COUNT];

typedef struct vd_issue {
  vd_diagnosis diagnosis; /* decided by the module that found the issue */
  const char *source;     /* "graph", "lineage", "stages" (static string) */
  const char *kind_name;  /* the module's kind name (static string) */
  unsigned kind;          /* the module's kind: vd_gissue_kind, vd_lissue_kind, vd_sissue_kind */
  uint8_t single;         /* 1: pnode and tensor index the single plan; 0: the parallel plan */
  int64_t pnode;          /* plan node involved, or -1 */
  int64_t tensor;         /* plan tensor involved, or -1 */
  int64_t stensor;        /* lineage issues: the single tensor, or -1 */
  int32_t replica, mb;    /* -1 if none */
  int64_t rank;           /* global rank, or -1 */
  char field[32];         /* operand of pnode involved ("in[0]"), "" if none */
  char detail[320];       /* one line with names, ranks, slices */
} vd_issue;

/* A blank issue: indices -1, strings empty; the caller fills the rest. */
void vd_issue_init(vd_issue *is, const char *source, unsigned kind, const char *kind_name, vd_diagnosis dx);

/* Formats is->detail from fmt. */
void vd_issue_vdetail(vd_issue *is, const char *fmt, va_list ap);

/* Appends a copy of *is to the array (*v, *n) of capacity *cap (grown as
 * needed).  With max > 0 and *n >= max the issue is only counted in
 * *dropped.  Returns VD_OK or VD_ENOMEM (nothing recorded in a diag). */
vd_rc vd_issue_push(vd_issue **v, size_t *n, size_t *cap, size_t max, size_t *dropped, const vd_issue *is);

#endif
