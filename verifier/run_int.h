/*
 * verifier/run_int.h - what the files of one verification run share
 * (verifier/run.c and run_*.c); private to verifier/.
 */
#ifndef VD_RUN_INT_H
#define VD_RUN_INT_H

#include <stdint.h>

#include "run.h"

/* Rounds of cut-and-solve when candidates are dropped (each round drops at
 * least one, so this bounds the work, not the outcome's soundness). */
#define VD_RUN_MAX_INFER_ROUNDS 16

/* The round from which a failing candidate takes its descendants with it
 * (taint_descendants), a round skips the stages that its failures make moot
 * (moot_marks), and, in the rounds after it, large stages try the witness
 * first.  1: from the first drop.  It was 3 while correct plans (nnScaler's
 * Llama pairs) dropped candidates in a round or two; since the exact-first
 * match and sum_node no correct plan of the matrix, the corpus or the bug
 * suite drops any, and a drop means a bug upstream (or a wrong guess: then
 * the stages grow to the given annotations, slower but as sound).  At 3 a
 * forward bug cost two extra rounds of one candidate each, the stages
 * downstream of the fault failing again in every round. */
#define VD_RUN_TAINT_ROUND 1

/* verifier/run.c */
vd_rc vd_run_i_collect_issues(vd_run *r, const vd_issue *v, size_t n, size_t dropped, const char *prefix);

/* verifier/run_reuse.c */
vd_rc vd_run_i_stage_sig(const vd_run *r, const vd_stage *st, uint64_t **buf, size_t *cap, size_t *n);
int vd_run_i_sig_known(const vd_run *r, const uint64_t *b, size_t n);
vd_rc vd_run_i_remember_proven(vd_run *r);

/* verifier/run_round.c */
vd_rc vd_run_i_analyse(vd_run *r, const vd_run_opts *o, vd_diag *d);
vd_rc vd_run_i_recut_reported(vd_run *r, const vd_run_opts *o, vd_diag *d);
void vd_run_i_reset_round(vd_run *r, size_t n_graph_issues, size_t n_graph_dropped);

/* verifier/run_solve.c */
vd_rc vd_run_i_solve_stages(vd_run *r, const vd_run_opts *o, vd_diag *d);

/* verifier/run_candidates.c */
int vd_run_i_targets_candidate(const vd_run *r, const vd_stage *st);
int vd_run_i_round_drops(const vd_run *r);
size_t vd_run_i_mark_grounded(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *grounded);
int vd_run_i_moot_marks(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *bad);
void vd_run_i_demote_ungrounded(vd_run *r, const uint8_t *grounded, uint8_t *mark);
vd_rc vd_run_i_drop_failed_candidates(vd_run *r, size_t *n_drop, vd_diag *d);
vd_rc vd_run_i_drop_candidates_of_issues(vd_run *r, size_t *n_drop, vd_diag *d);
void vd_run_i_candidates_inconclusive(vd_run *r);

#endif
