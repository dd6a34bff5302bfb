/*
 * solver/stage_solve.c - proving one stage (docs/verifier.md section 4).
 *
 * Steps: (1) single leaves become fresh symbols (Int symbols for integer
 * tensors such as token ids); (2) single nodes are encoded in stage order;
 * (3) parallel leaves are built from their lineage: a replica piece IS the
 * slice of its single value, n partial parts are n-1 fresh terms plus the
 * remainder; (4) parallel nodes are encoded; (5) every target element is
 * paired with its single-device element and vd_smt_check decides; (6) on a
 * counterexample, the failure is classified with further symbolic checks on
 * the same terms (missing reduction, scale factor, permuted slices).
 *
 * Files: this one (vd_stage_solve: the steps in order), stage_solve_encode.c,
 * stage_solve_diag.c, stage_solve_cex.c; stage_solve_int.h what they share.
 *
 * Attribute overrides (positions scaled by shape reduction) are applied by
 * encoding the node from a one-node scratch plan holding the rewritten
 * attributes, so encoders read attributes in one way only.
 */
#include "stage_solve_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/clock.h"
#include "../common/limits.h"
#include "../common/mem.h"

void vd_stage_verdict_free(vd_stage_verdict *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n_inputs; i++) {
    vd_free(v->inputs[i].name);
    vd_free(v->inputs[i].exact);
  }
  vd_free(v->inputs);
  vd_free(v->elems);
  vd_free(v->copies);
  vd_free(v->flagged_pieces);
  memset(v, 0, sizeof(*v));
}

/* ---- entry ------------------------------------------------------------------ */

/* Frees the stage's terms and resets the context for the next stage (a
 * reset's own failure is the next stage's to see). */
static void end_stage(solve_ctx *c) {
  if (c->ten)
    for (uint32_t i = 0; i < c->st->n_vals; i++) vd_smt_tensor_free(&c->ten[i]);
  vd_free(c->ten);
  c->ten = NULL;
  vd_diag reset_diag;
  vd_diag_clear(&reset_diag);
  vd_smt_reset(c->s, &reset_diag);
}

/* A stage holding an operator flagged VD_OPF_REFUTE_NUMERIC (max). */
static int numeric_refute(const vd_stage *st) {
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].op >= 0 && vd_op_has((vd_op_id)st->nodes[i].op, VD_OPF_REFUTE_NUMERIC)) return 1;
  return 0;
}

/* A stage leaf of an integer dtype (ids, labels). */
static int has_index_leaf(const solve_ctx *c) {
  for (uint32_t i = 0; i < c->st->n_vals; i++)
    if (c->st->vals[i].producer < 0 && is_int_dtype(tensor_of(c, &c->st->vals[i])->dtype)) return 1;
  return 0;
}

/* SOUNDNESS: a refutation of such a stage that the numeric evaluators (the
 * real exp, log and max) do not reproduce on random valid inputs rests on a
 * free interpretation of the kernels the normal form has no laws for yet,
 * or on index inputs outside their range (a label past the vocabulary,
 * which the solver's Int symbols allow and a real program never gets): the
 * stage is INCONCLUSIVE, never NOT EQUIVALENT, and never EQUIVALENT either.
 * The counterexample's own values count only when no input is an index. */
static vd_rc unconfirmed_refutation(solve_ctx *c, vd_stage_verdict *v) {
  if (!numeric_refute(c->st) || v->cex_eval == VD_CEX_EVAL_RANDOM) return VD_OK;
  int hit = 0;
  if (v->cex_eval == VD_CEX_EVAL_SAME && !has_index_leaf(c)) return VD_OK;
  if (v->cex_eval == VD_CEX_EVAL_SAME) VD_CHECK(vd_stage_solve_i_cex_random(c, v, &hit));
  if (hit) return VD_OK;
  char where[400];
  vd_stage_solve_i_stage_where(c, where, sizeof(where));
  v->verdict = VD_SMT_INCONCLUSIVE;
  v->diagnosis = 0;
  snprintf(v->reason, sizeof(v->reason),
           "unsupported: a refutation through max that the numeric evaluators do not reproduce (the "
           "solver's max, exp or log are free where the normal form has no law; docs/verifier.md); %.380s",
           where);
  return VD_OK;
}

vd_rc vd_stage_solve(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                     vd_stage_verdict *v, vd_diag *d) {
  double t0 = vd_clock_ms();
  memset(v, 0, sizeof(*v));
  solve_ctx c = {.s = s, .lt = lt, .st = st, .o = o, .d = d};
  pair_list pl = {0};
  vd_smt_result r;
  memset(&r, 0, sizeof(r));
  vd_rc rc = VD_OK;

  vd_smt_set_timeout(s, o->timeout_ms);
  vd_smt_set_seed(s, o->seed ? o->seed : (uint64_t)VD_LIM_SEED);
  vd_smt_set_fast_path(s, o->fast_path);
  vd_smt_set_witness_first(s, o->witness_first && st->n_nodes > o->witness_first);
  vd_smt_set_cross_check(s, o->cross_check);
  if (o->budget == UINT64_MAX) vd_smt_set_budget(s, 0, 0);
  else if (o->budget) vd_smt_set_budget(s, o->budget, o->budget);
  else vd_smt_set_budget(s, VD_SMT_DEFAULT_NF_STEPS, VD_SMT_DEFAULT_RLIMIT);
  int ready = 0;
  if ((rc = vd_stage_solve_i_encode_stage(&c, v, &ready)) != VD_OK || !ready) goto done;
  if ((rc = vd_stage_solve_i_build_pairs(&c, &pl)) != VD_OK) goto done;
  if ((rc = vd_smt_check(s, pl.par, pl.single, pl.n, &r, d)) != VD_OK) goto done;
  v->verdict = r.verdict;
  v->by_fast_path = r.by_fast_path;
  v->cross = r.cross;
  v->limit = r.limit;
  v->work = r.nf_steps + r.rlimit_used;
  if (r.verdict == VD_SMT_INCONCLUSIVE) {
    char where[500];
    vd_stage_solve_i_stage_where(&c, where, sizeof(where));
    if (r.limit == VD_SMT_LIMIT_BUDGET && r.rlimit_used == 0)
      snprintf(v->reason, sizeof(v->reason), "budget exhausted: %s; %s", r.reason, where);
    else if (r.limit == VD_SMT_LIMIT_BUDGET)
      snprintf(v->reason, sizeof(v->reason),
               "budget exhausted: solver: %s (%llu Z3 resource units; normal form %llu steps%s); %s",
               r.reason, (unsigned long long)r.rlimit_used, (unsigned long long)r.nf_steps,
               r.nf_gave_up ? ", gave up" : "", where);
    else if (r.limit == VD_SMT_LIMIT_WALL)
      snprintf(v->reason, sizeof(v->reason), "%s (normal form %llu steps%s); %s", r.reason,
               (unsigned long long)r.nf_steps, r.nf_gave_up ? ", gave up" : "", where);
    else
      snprintf(v->reason, sizeof(v->reason), "solver: %s; %s", r.reason[0] ? r.reason : "unknown", where);
  } else if (r.verdict == VD_SMT_NOT_EQUIVALENT && o->verdict_only && !numeric_refute(st)) {
    /* OPTIMIZATION-ONLY: the difference is proved (a witness or the
     * solver's model); reading its values back and trying the refined
     * diagnoses costs 5-10 times the check itself, for a failure the
     * caller will not report. */
    v->diagnosis = VD_DX_WRONG_VALUE;
    snprintf(v->reason, sizeof(v->reason), "%zu element(s) differ (values not read: verdict only)", r.n_diffs);
  } else if (r.verdict == VD_SMT_NOT_EQUIVALENT) {
    if ((rc = vd_stage_solve_i_record_cex(&c, &pl, &r, v)) != VD_OK) goto done;
    if (r.n_diffs > 0 && st->n_nodes > VD_STAGE_CLASSIFY_MAX_NODES) {
      /* OPTIMIZATION-ONLY: a stage the size of a model (a bug upstream of
       * the inferred lineages of a boundary-only plan) keeps the generic
       * diagnosis: each refinement below is another check of model-sized
       * terms.  The verdict is the counterexample's, unchanged. */
      v->diagnosis = VD_DX_WRONG_VALUE;
    } else if (r.n_diffs > 0) {
      const pair_meta *m = &pl.meta[r.diffs[0].index];
      if ((rc = vd_stage_solve_i_classify(&c, m->target, m->piece, &r.diffs[0], v)) != VD_OK) goto done;
    } else {
      v->diagnosis = VD_DX_WRONG_VALUE;
    }
    if (r.n_diffs > 0 && (rc = vd_stage_solve_i_cex_eval(&c, v)) != VD_OK) goto done;
    if (r.n_diffs || !r.reason[0]) snprintf(v->reason, sizeof(v->reason), "%zu element(s) differ", r.n_diffs);
    else snprintf(v->reason, sizeof(v->reason), "%s", r.reason); /* proved, values not computed */
    if ((rc = unconfirmed_refutation(&c, v)) != VD_OK) goto done;
  }
done:
  vd_smt_result_free(&r);
  vd_stage_solve_i_pairs_free(&pl);
  end_stage(&c);
  v->ms = vd_clock_ms() - t0;
  return rc;
}

vd_rc vd_stage_obligation(vd_smt *s, const vd_lin_table *lt, const vd_stage *st, const vd_stage_solve_opts *o,
                          const char *header, FILE *out, int *written, vd_smt_cert_stats *stats,
                          vd_stage_verdict *v, vd_diag *d) {
  memset(v, 0, sizeof(*v));
  memset(stats, 0, sizeof(*stats));
  *written = 0;
  solve_ctx c = {.s = s, .lt = lt, .st = st, .o = o, .d = d};
  pair_list pl = {0};
  int ready = 0;
  vd_rc rc = vd_stage_solve_i_encode_stage(&c, v, &ready);
  if (rc == VD_OK && ready) rc = vd_stage_solve_i_build_pairs(&c, &pl);
  if (rc == VD_OK && ready) rc = vd_smt_nf_note_laws(s, pl.par, pl.single, pl.n);
  if (rc == VD_OK && ready) rc = vd_smt_write_obligation(s, pl.par, pl.single, pl.n, header, out, stats, d);
  if (rc == VD_OK && ready) *written = 1;
  vd_stage_solve_i_pairs_free(&pl);
  end_stage(&c);
  return rc;
}
