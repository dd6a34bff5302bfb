/*
 * solver/smt_check_int.h - private to the equivalence check's files of
 * solver/: smt_check.c (the paths in order, the fast path, the entry),
 * smt_check_model.c (free symbols, model values), smt_check_job.c (the
 * solver path on its abandonable thread), smt_check_witness.c (the random
 * witness).  What one of them hands to another.
 */
#ifndef VD_SMT_CHECK_INT_H
#define VD_SMT_CHECK_INT_H

#include <z3.h>

#include "smt.h"

/* A set of Z3 ast ids (open addressing). */
typedef struct {
  unsigned *slot; /* id + 1, 0 = empty */
  size_t cap, n;
} idset;

/* A growable vector of terms. */
typedef struct {
  vd_term *v;
  size_t n, cap;
} termvec;

/* What a job runs: the random witness (the counterexample it finds is
 * evaluated there too), or Z3's simplifier and solver. */
enum { JOB_SOLVE, JOB_WITNESS };

/* ---- smt_check.c ----------------------------------------------------------- */
void vd_smt_i_chk_value_free(vd_smt_value *v);
/* Whether t is the numeral 0. */
int vd_smt_i_chk_is_zero(vd_smt *s, vd_term t);
/* OPTIMIZATION-ONLY: marks proved[i] for the pairs whose normal forms agree;
 * simp receives the simplified sides (par at 2i, single at 2i+1). */
vd_rc vd_smt_i_chk_fast_path(vd_smt *s, const vd_term *par, const vd_term *single, size_t n, int *proved,
                             vd_term *simp, size_t *n_proved);

/* ---- smt_check_model.c ----------------------------------------------------- */
/* 1 if id was added, 0 if present, -1 on ENOMEM. */
int vd_smt_i_chk_idset_add(idset *h, unsigned id);
/* Appends t; -1 on ENOMEM. */
int vd_smt_i_chk_termvec_push(termvec *v, vd_term t);
/* One DAG walk under roots (each node once): the uninterpreted constants
 * into *syms and, when funcs is not NULL, the distinct uninterpreted
 * function symbols of arity > 0 into *funcs, both in walk order. */
vd_rc vd_smt_i_chk_collect_uninterpreted(vd_smt *s, const vd_term *roots, size_t n, termvec *syms, termvec *funcs);
/* Whether s failed for lack of memory (Z3's or the term arena's). */
int vd_smt_i_chk_out_of_memory(vd_smt *s);
/* Evaluates t[0..n) in model m into out (see smt_check_model.c). */
vd_rc vd_smt_i_chk_eval_many(vd_smt *s, Z3_model m, const vd_term *t, size_t n, vd_term *out, int *ok);
/* The result's inputs and diffs from model m over the open pairs. */
vd_rc vd_smt_i_chk_fill_model(vd_smt *s, Z3_model m, const vd_term *par, const vd_term *single, const size_t *open,
                              size_t n_open, vd_smt_result *res, int *complete);
/* fill_model for a proved difference: *no_diff when the values show none. */
vd_rc vd_smt_i_chk_fill_proof(vd_smt *s, Z3_model m, const vd_term *par, const vd_term *single, const size_t *open,
                              size_t n_open, vd_smt_result *res, const char *found, int *no_diff);

/* ---- smt_check_job.c -------------------------------------------------------- */
/* The solver path on the open pairs (in the job's fresh context). */
vd_rc vd_smt_i_chk_solve(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                         vd_smt_result *res, int *found);
/* Runs mode (JOB_WITNESS or JOB_SOLVE) on the open pairs as a job on a
 * helper thread, waiting at most ms milliseconds (see smt_check_job.c). */
vd_rc vd_smt_i_chk_run_job(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                           int mode, unsigned ms, vd_smt_result *res, vd_diag *d);

/* ---- smt_check_witness.c ---------------------------------------------------- */
/* OPTIMIZATION-ONLY: random interpretations; *found = 1 with a genuine
 * counterexample in res. */
vd_rc vd_smt_i_chk_witness(vd_smt *s, const vd_term *par, const vd_term *single, const size_t *open, size_t n_open,
                           vd_smt_result *res, int *found);

#endif
