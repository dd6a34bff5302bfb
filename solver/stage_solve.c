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

/* The factor f != 1 that the stage's parallel leaves carry (hypotheses
 * that are f x their single value, or one copy's share of a mean: part k
 * of n times n; inferred candidates, proven like any other), with *leaf
 * the first of them and *shares 1 when they are all shares of a mean, 0
 * when none is; 0 when no leaf carries one, two carry different ones, or
 * shares and whole values mix. */
static double leaf_factor(const solve_ctx *c, uint32_t *leaf, int *shares) {
  double f = 0.0;
  *shares = -1;
  for (uint32_t i = 0; i < c->st->n_vals; i++) {
    const vd_stage_value *sv = &c->st->vals[i];
    if (!sv->side || sv->producer >= 0 || sv->leaf_piece < 0 || sv->hyp_svalue < 0) continue;
    const vd_lin_piece *pc = &c->lt->pieces[sv->leaf_piece];
    if (pc->f == 1.0) continue;
    int share = pc->part_n > 1;
    if (share && pc->f != (double)pc->part_n) return 0.0; /* a part scaled otherwise */
    if (f == 0.0) f = pc->f, *leaf = i, *shares = share;
    else if (pc->f != f || share != *shares) return 0.0;
  }
  return f;
}

/* Whether the stage's parallel leaves include a partial sum of factor 1
 * (part k of n: the copies sum to the single value), *leaf the first; 0
 * when none, or when a leaf carries a factor (leaf_factor's case). */
static int partial_leaf(const solve_ctx *c, uint32_t *leaf) {
  int found = 0;
  for (uint32_t i = 0; i < c->st->n_vals; i++) {
    const vd_stage_value *sv = &c->st->vals[i];
    if (!sv->side || sv->producer >= 0 || sv->leaf_piece < 0 || sv->hyp_svalue < 0) continue;
    const vd_lin_piece *pc = &c->lt->pieces[sv->leaf_piece];
    if (pc->f != 1.0) return 0;
    if (pc->part_n > 1 && !found) *leaf = i, found = 1;
  }
  return found;
}

/* "p/q" (or "p") of smallest denominator up to 4096 within 1e-12 of f,
 * else %.17g: the factor as the report names it. */
static void factor_text(double f, char *buf, size_t n) {
  for (int64_t q = 1; q <= 4096 && fabs(f) < 1e12; q++) {
    double p = nearbyint(f * (double)q);
    if (fabs(p / (double)q - f) > 1e-12 * fabs(f)) continue;
    if (q == 1) snprintf(buf, n, "%lld", (long long)p);
    else snprintf(buf, n, "%lld/%lld", (long long)p, (long long)q);
    return;
  }
  snprintf(buf, n, "%.17g", f);
}

/* Each refinement check of a failing stage (reducer_check, unscaled_check)
 * gets this share of the stage's work budget.  Deterministic: the budget is
 * counted in normal-form steps and Z3 resource units (rlimit), not wall
 * time, so a diagnosis is the same on a slow machine as on a fast one; the
 * wall-clock backstops stay the user's (--stage-timeout per check, the
 * run's --timeout through common/ctl.h), as for every other check. */
#define REFINE_SHARE 10u

/* The stage encoded again as c now says (unscaled leaves, a rescaled
 * node) and checked: *holds = 1 when it is proven equivalent.  Every other
 * outcome is 0, never an error but VD_ENOMEM (these checks only refine a
 * diagnosis).  c's terms are freed before and after. */
static vd_rc holds_now(solve_ctx *c, int *holds) {
  *holds = 0;
  end_stage(c);
  /* a tenth of a stage's budget each: a refinement never costs much more
   * than the check that found the failure */
  const vd_stage_solve_opts *o = c->o;
  uint64_t nf = o->budget == UINT64_MAX ? 0 : o->budget ? o->budget : VD_SMT_DEFAULT_NF_STEPS;
  uint64_t rl = o->budget == UINT64_MAX ? 0 : o->budget ? o->budget : VD_SMT_DEFAULT_RLIMIT;
  vd_smt_set_budget(c->s, nf ? nf / REFINE_SHARE + 1 : VD_SMT_DEFAULT_NF_STEPS / REFINE_SHARE,
                    rl ? rl / REFINE_SHARE + 1 : VD_SMT_DEFAULT_RLIMIT / REFINE_SHARE);
  vd_diag scratch, *d = c->d;
  vd_diag_clear(&scratch);
  vd_stage_verdict sv;
  memset(&sv, 0, sizeof(sv));
  pair_list pl = {0};
  vd_smt_result r;
  memset(&r, 0, sizeof(r));
  c->d = &scratch;
  int ready = 0;
  vd_rc rc = vd_stage_solve_i_encode_stage(c, &sv, &ready);
  if (rc == VD_OK && ready) rc = vd_stage_solve_i_build_pairs(c, &pl);
  if (rc == VD_OK && ready) rc = vd_smt_check(c->s, pl.par, pl.single, pl.n, &r, &scratch);
  *holds = rc == VD_OK && ready && r.verdict == VD_SMT_EQUIVALENT;
  vd_smt_set_budget(c->s, nf, rl);
  c->d = d;
  vd_smt_result_free(&r);
  vd_stage_solve_i_pairs_free(&pl);
  vd_stage_verdict_free(&sv);
  end_stage(c);
  return rc == VD_ENOMEM ? VD_OOM(d) : VD_OK;
}

/* SCALE of a failing stage whose targets are no multiple of their single
 * values, but whose hypotheses are: when the stage reads parallel leaves
 * that are f x their single values (one factor f != 1) and it holds once
 * they are read as their single values (the same stage encoded again with
 * those factors left out), the factor on them is the whole fault.  An
 * optimizer step w - lr * 2g is no multiple of w - lr * g, but the
 * gradient it reads is 2g (a reduce-scatter that sums where the loss is a
 * mean); the stage that proved the candidate showed that, this check that
 * nothing else is wrong.  Likewise MISSING_REDUCTION when the leaves are
 * each one copy's share of a mean (part k of n, times n) and the stage
 * holds once they are read as the copies' mean: a gradient no reducer
 * averaged (a parameter left out of DDP's reducer, FSDP1 without a root
 * unit); and MISSING_REDUCTION when the leaves carry no factor but some are
 * partial sums (part k of n) and the stage holds once every partial sum is
 * read as the sum of its copies: a value whose sum over the group no
 * collective made (Megatron's copy_to_tensor_model_parallel_region left
 * out, so the input gradient of a column-parallel layer is one rank's
 * part).  A diagnosis only, claimed when proved: any other outcome leaves
 * WRONG_VALUE.  VD_ENOMEM is the only error. */
static vd_rc unscaled_check(solve_ctx *c, vd_stage_verdict *v) {
  uint32_t leaf = 0;
  int shares = 0;
  double f = leaf_factor(c, &leaf, &shares);
  if (v->diagnosis != VD_DX_WRONG_VALUE || c->st->n_nodes > VD_STAGE_CLASSIFY_MAX_NODES) return VD_OK;
  if (f == 0.0 && partial_leaf(c, &leaf)) {
    /* no factor, but a partial sum read: the same check with the partial
     * sums read as the sum of their copies (unscaled 2) */
    f = 1.0;
    shares = 2;
  }
  if (f == 0.0 || !isfinite(f)) return VD_OK;
  int holds = 0;
  c->unscaled = shares == 2 ? 2 : 1;
  vd_rc rc = holds_now(c, &holds);
  c->unscaled = 0;
  if (rc == VD_OK && holds) {
    v->diagnosis = shares ? VD_DX_MISSING_REDUCTION : VD_DX_SCALE;
    if (!shares) factor_text(f, v->factor, sizeof(v->factor));
    v->scaled_leaf = leaf + 1;
  }
  return rc;
}

/* At most this many divisions of a reducer of one failing stage are tried
 * by reducer_check (each try is a proof of the whole stage). */
#define REDUCER_TRIES 4

/* SCALE at a reducer inside a failing stage whose targets are no multiple
 * of their single values: when the stage holds once the outputs of one
 * of its summing collectives (all_reduce, reduce_scatter over n copies)
 * are divided by n, the fault is that sum where the copies' mean belongs
 * (a gradient reduce-scatter summing per-replica mean gradients, whose
 * result then reaches the optimizer step: w - lr * 2g is no multiple of
 * w - lr * g); or divided by the factor f of the stage's scaled
 * hypotheses, when f is not n (nested reducers that both sum).  At most
 * REDUCER_TRIES proofs, on the stage's collectives from the last (the
 * nearest the targets: dividing it undoes what every earlier sum did).  A
 * diagnosis only, claimed when proved. */
static vd_rc reducer_check(solve_ctx *c, vd_stage_verdict *v) {
  const vd_stage *st = c->st;
  if (v->diagnosis != VD_DX_WRONG_VALUE || st->n_nodes > VD_STAGE_CLASSIFY_MAX_NODES) return VD_OK;
  /* the factor of the stage's scaled hypotheses, when they have one: the
   * divisor that two nested reducers miss together (HSDP: a shard group's
   * reduce-scatter, then an all-reduce over the replicas) */
  uint32_t leaf = 0;
  int shares = 0;
  double lf = leaf_factor(c, &leaf, &shares);
  int tries = 0;
  for (uint32_t ni = st->n_nodes; ni-- > 0 && tries < REDUCER_TRIES;) {
    const vd_stage_node *sn = &st->nodes[ni];
    if (!sn->side || sn->n_in < 2 || (sn->op != VD_OP_ALL_REDUCE && sn->op != VD_OP_REDUCE_SCATTER)) continue;
    const vd_gnode_t *gn = &c->lt->gp->nodes[sn->gnode];
    const vd_plan_t *p = c->lt->gp->plan;
    if (strcmp(vd_node_attr_str(p, &p->nodes[gn->pnode], "reduce", "sum"), "sum")) continue;
    double divisors[2] = {(double)sn->n_in, lf > 1.0 && isfinite(lf) && lf != (double)sn->n_in ? lf : 0.0};
    for (int k = 0; k < 2 && tries < REDUCER_TRIES; k++) {
      if (divisors[k] == 0.0) continue;
      tries++;
      int holds = 0;
      c->rescale_node = ni + 1;
      c->rescale_f = 1.0 / divisors[k];
      vd_rc rc = holds_now(c, &holds);
      c->rescale_node = 0;
      if (rc != VD_OK) return rc;
      if (holds) {
        v->diagnosis = VD_DX_SCALE;
        factor_text(divisors[k], v->factor, sizeof(v->factor));
        v->scaled_node = ni + 1;
        return VD_OK;
      }
    }
  }
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
    /* a reducer in the stage first: it names the fault more precisely
     * than a scaled hypothesis, whose factor any later step could undo */
    if (v->verdict == VD_SMT_NOT_EQUIVALENT && (rc = reducer_check(&c, v)) != VD_OK) goto done;
    if (v->verdict == VD_SMT_NOT_EQUIVALENT && (rc = unscaled_check(&c, v)) != VD_OK) goto done;
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
