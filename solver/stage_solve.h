/*
 * solver/stage_solve.h - proving one stage: encode both cones with the
 * registry's encoders, compare the targets, diagnose a failure.
 *
 * docs/verifier.md section 4.  A stage is checked on its reduced shapes.
 * Single leaves are fresh symbols; parallel leaves are built from their
 * lineage (a replica is the single slice's terms, n partial parts are n-1
 * free terms plus the remainder).  The result is a vd_stage_verdict: data,
 * never an exit code.
 */
#ifndef VD_STAGE_SOLVE_H
#define VD_STAGE_SOLVE_H

#include "../common/issue.h"
#include "../stages/stage.h"
#include "smt.h"

/* vd_diagnosis and its names: common/issue.h (shared with structural issues). */

/* One element of a target that disagrees in the counterexample. */
typedef struct {
  uint32_t target;       /* stage target index */
  int64_t elem[VD_MAX_DIMS]; /* element, reduced single-device coordinates */
  char single_exact[96]; double single_value;
  uint32_t n_copies;     /* copies of this element (pieces, or 1 for a sum of parts) */
  uint32_t copy_off;     /* into res->copies */
} vd_stage_cex_elem;

typedef struct {
  int32_t piece;         /* lineage piece, -1 for "sum of the parts" */
  char exact[96]; double value;
  uint8_t disagrees;
} vd_stage_cex_copy;

typedef struct {
  vd_smt_verdict verdict;
  vd_diagnosis diagnosis;
  char factor[96];       /* SCALE: the factor c (exact), else "" */
  /* SCALE by unscaled_check (stage_solve.c): 1 + the stage-local parallel
   * leaf whose factor is the whole fault (a hypothesis f x its single value
   * that the stage reads as the single value), 0 otherwise */
  uint32_t scaled_leaf;
  /* SCALE by reducer_check: 1 + the stage-local summing collective whose
   * outputs, divided by its group size (the factor), make the stage hold */
  uint32_t scaled_node;
  char reason[800];      /* inconclusive: why; not equivalent: one-line summary */
  int by_fast_path;
  int cross;             /* the cross-check of a normal-form proof: VD_SMT_CROSS_* (smt.h) */
  vd_smt_limit limit;    /* inconclusive: which limit was hit (reason says where) */
  uint64_t work;         /* deterministic work of the main check: normal-form steps + Z3 resource units */
  double ms;             /* wall time of encoding + checking */
  vd_smt_value *inputs; size_t n_inputs; /* counterexample inputs */
  vd_stage_cex_elem *elems; size_t n_elems;
  vd_stage_cex_copy *copies; size_t n_copies;
  int32_t *flagged_pieces; size_t n_flagged; /* pieces holding a wrong value, sorted */
  /* The counterexample re-evaluated numerically (vd_stage_cex_eval): the
   * stage's nodes run through the numeric evaluators (ops/ops_numeric.c)
   * with the real kernels.  VD_CEX_EVAL_*; cex_eval_note says what was
   * compared. */
  int cex_eval;
  char cex_eval_note[240];
  /* Where the disagreement enters, from the values that reproduced it
   * (stage_solve_cex.c, a hint for the report, never a verdict): loc_node
   * is a stage-local parallel node, -1 if none; loc_kind VD_LOC_*;
   * loc_note says what the values show there. */
  int32_t loc_node;
  int loc_kind;
  char loc_note[240];
} vd_stage_verdict;

enum {
  VD_LOC_NONE = 0,
  VD_LOC_TWINLESS,        /* the earliest node of the disagreement's cone whose value has no twin
                             (equal values) among the single-device values, from inputs that all have */
  VD_LOC_PERMUTED,        /* that node holds a single value's values in another arrangement */
  VD_LOC_REDUCE,          /* its copies on the ranks, reduced (sum or max, loc_note), make every
                             target agree: a missing reduction there */
  VD_LOC_POSITION,        /* a position attribute that all its copies read alike, moved on this copy
                             by a multiple of an extent, makes every target agree: another rank's */
};

enum {
  VD_CEX_EVAL_NONE = 0,   /* not tried (no values: verdict only, or not NOT EQUIVALENT) */
  VD_CEX_EVAL_SAME,       /* the counterexample's own values reproduce the disagreement */
  VD_CEX_EVAL_RANDOM,     /* they do not (the symbolic counterexample interprets the kernels freely),
                             random values do: the plans disagree on concrete numbers too */
  VD_CEX_EVAL_NOT,        /* neither reproduces it: flagged loudly in the report */
  VD_CEX_EVAL_FAILED,     /* an evaluator refused the stage (cex_eval_note says why) */
};

typedef struct {
  unsigned timeout_ms;   /* wall-clock backstop per solver check; 0 = none */
  uint64_t budget;       /* deterministic work budget per check (normal-form steps and Z3
                          * resource units); 0 = VD_SMT_DEFAULT_*, UINT64_MAX = unlimited */
  int fast_path;         /* simplifier fast path on (default 1) */
  int64_t max_elems;     /* refuse (inconclusive) stages with a value larger than this */
  size_t max_cex_elems;  /* counterexample elements kept; 0 = VD_LIM_CEX_ELEMS */
  uint64_t seed;         /* of the solver's random witness; 0 = VD_LIM_SEED */
  uint32_t witness_first; /* OPTIMIZATION-ONLY: 0, or a node count: stages of more nodes try the
                            * random witness first (the caller expects them to fail) */
  int cross_check;       /* every normal-form proof is also given to Z3 (vd_smt_set_cross_check) */
  int verdict_only;      /* OPTIMIZATION-ONLY: a failure's values and diagnosis are not computed
                          * (the caller never reports it: a stage targeting an inferred
                          * candidate); the verdict is the same */
} vd_stage_solve_opts;

/* Version of what a stage's proof means: the encoders (smt_encode.c,
 * smt_moe.c, smt_tensor.c), the normal forms and the check (smt_poly.c,
 * smt_check.c), this file's leaf and target construction, and the
 * canonical serialization (stages/canon.c).  BUMP IT on any change to one
 * of them that could change a verdict: the proof cache
 * (verifier/cache.c) keys every entry by it, so entries proven under the
 * old meaning are never taken (the binary's own SHA-256 joins the key too,
 * a second guard for a forgotten bump). */
#define VD_ENCODER_VERSION 1

/* A stage this large whose caller expects a failure pays one evaluation of
 * its terms before the normal form; smaller ones are cheap either way. */
#define VD_STAGE_WITNESS_FIRST_NODES 200

/* Proves or refutes stage st.  s is the calling thread's context; it is reset
 * before returning.  gs/gp are the graphs of the lineage table.  Errors
 * (VD_ENOMEM, VD_EINTERNAL) only for failures of the machinery; an
 * unsupported operator or a timeout is an INCONCLUSIVE verdict, VD_OK. */
vd_rc vd_stage_solve(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                     vd_stage_verdict *v, vd_diag *d);
void vd_stage_verdict_free(vd_stage_verdict *v);

/* Writes stage st's proof obligation (the pairs vd_stage_solve would check)
 * as a standalone SMT-LIB2 script to out (vd_smt_write_obligation, header
 * as comment lines).  *written = 0 when the stage has no obligation (too
 * large, an operator without an encoder, an encoder that refused it): v
 * then holds the INCONCLUSIVE verdict and reason vd_stage_solve would
 * give.  s is reset before returning. */
vd_rc vd_stage_obligation(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                          const char *header, FILE *out, int *written, vd_smt_cert_stats *stats,
                          vd_stage_verdict *v, vd_diag *d);

#endif
