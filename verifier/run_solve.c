/*
 * verifier/run_solve.c - the solve scheduling of one round: class
 * representatives in tiers and chunks by size, solved under OpenMP (each
 * thread owning its Z3 context), the stages a decided round leaves
 * unsolved, members taking their representative's verdict, and the
 * reported failures solved again serially so that their counterexamples
 * do not depend on the thread count.
 */
#include "run_int.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/mem.h"

/* Whether every target of st is an annotated value (no inferred candidate):
 * its failure is a failure of the plan. */
static int plan_targets_only(const vd_run *r, const vd_stage *st) { return !r->inferred || !vd_run_i_targets_candidate(r, st); }

/* Failing class representatives whose counterexamples are recomputed
 * serially (deterministic) beyond the --max-failures first failing stages;
 * past it, a representative keeps the counterexample its thread found. */
#define VD_RUN_MAX_RESOLVED_REPS 256

/* Stage classes are solved in tiers of size (nodes): at most 64, at most
 * 400, the rest.  When a tier has a failing stage, the larger tiers are not
 * solved: the verdict is NOT EQUIVALENT already, and stages that large only
 * arise past a bug in a boundary-only plan (inferred lineages stop at the
 * faulty operator, so the stages downstream of it span the rest of the
 * model: 1900 nodes and seconds each on the captured Llama with a loss
 * scaled wrongly, where the failing stage at the logged loss has 26).  The
 * tiers depend on the stages only, so the outcome is deterministic.
 * OPTIMIZATION-ONLY in the sense that no verdict changes: a correct plan
 * solves every tier. */
static const uint32_t vd_run_tier_nodes[] = {64, 400};

/* Stages that grew over a dropped candidate try the witness first from this
 * size on (a failing stage of 100 nodes: 20 ms for the witness, 5 times that
 * for the normal form's probe; a correct one pays one evaluation). */
#define VD_RUN_GROWN_WITNESS_NODES 64

/* Whether stage st computes a value of a tensor whose candidate was dropped
 * in an earlier round (it grew over it). */
static int grew_over_dropped(const vd_run *r, const vd_stage *st) {
  if (!r->dropped || st->compact) return 0;
  for (uint32_t k = 0; k < st->n_vals; k++)
    if (st->vals[k].side && st->vals[k].producer >= 0 && r->dropped[r->pg.values[st->vals[k].value].tensor]) return 1;
  return 0;
}

/* Segments of solve_stages: one for the first tier, chunks doubling in
 * size for each other (at most 64 each: log2 of a size_t count). */
#define VD_RUN_N_TIERS (sizeof(vd_run_tier_nodes) / sizeof(vd_run_tier_nodes[0]))
#define VD_RUN_MAX_SEGMENTS (1 + 64 * VD_RUN_N_TIERS)

/* The first issue of the cut that is the plan's own whatever the lineages
 * say: a node whose output shape does not follow from its inputs (SHAPE) or
 * a gradient reducer that runs before a contribution (SCHEDULE), both found
 * from the parallel graph alone (stages/cut.c, check_shapes and
 * check_schedule read no lineage).  NULL when there is none. */
static const vd_issue *plan_structural_issue(const vd_run *r) {
  for (size_t i = 0; i < r->set.n_issues; i++) {
    const vd_issue *si = &r->set.issues[i];
    if (!si->single && (si->kind == VD_SISSUE_SHAPE || si->kind == VD_SISSUE_SCHEDULE)) return si;
  }
  return NULL;
}

/* Whether a target piece of stage st is a value marked in moot. */
static int targets_moot(const vd_run *r, const vd_stage *st, const uint8_t *moot) {
  for (uint32_t k = 0; k < st->n_targets; k++) {
    const vd_stage_target *tg = &st->targets[k];
    for (uint32_t j = 0; j < tg->n_pieces; j++)
      if (moot[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].value]) return 1;
  }
  return 0;
}

/* The first chunk of a chunked tier: two stages, so that on two threads
 * neither waits at its barrier (from one, a correct plan with gradient
 * clipping, 25 stages of 191-197 nodes in the middle tier, paid 0.1 s of a
 * 1.4 s run).  A constant, not the thread count: see order_segments. */
#define VD_RUN_FIRST_CHUNK 2

struct seg_key {
  uint32_t nodes, id;
};

static int seg_key_cmp(const void *a, const void *b) {
  const struct seg_key *x = a, *y = b;
  if (x->nodes != y->nodes) return x->nodes < y->nodes ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* The class representatives reps[0..n_reps) in solving order, cut into
 * segments (seg_end[k]: end of segment k in order[]; at most
 * VD_RUN_MAX_SEGMENTS).  The tiers of vd_run_tier_nodes come first, the
 * first one (the small stages) in stage order, as one segment.  With
 * candidates, every later tier (stages of more than 64 nodes: past a bug
 * in a boundary-only plan they run from the last proven lineage to the
 * loss or a weight update) is sorted by size and cut into chunks of 1, 2,
 * 4, ... times VD_RUN_FIRST_CHUNK stages, so that the smallest of them
 * are solved first, and a grounded failure there ends the round before the
 * others are solved (solve_stages; a bug row had 19 failing stages of
 * 198-394 nodes in one tier, all solved and all their counterexamples
 * recomputed).  A correct plan solves every chunk: log2 of their count
 * extra barriers per tier.  The chunks depend on the stages only, never on
 * the thread count: which stages are solved before a stop, and so the
 * report, are the same at any thread count. */
static void order_segments(const vd_run *r, const uint32_t *reps, size_t n_reps, uint32_t *order, size_t *seg_end,
                           size_t *n_seg) {
  size_t n_tiers = sizeof(vd_run_tier_nodes) / sizeof(vd_run_tier_nodes[0]), at = 0, ns = 0;
  int chunk = r->inferred && r->infer.n_inferred;
  for (size_t t = 0; t <= n_tiers; t++) {
    uint32_t lo = t ? vd_run_tier_nodes[t - 1] : 0, hi = t < n_tiers ? vd_run_tier_nodes[t] : UINT32_MAX;
    size_t start = at;
    for (size_t k = 0; k < n_reps; k++) {
      uint32_t nn = r->set.stages[reps[k]].n_nodes;
      if ((t == 0 || nn > lo) && nn <= hi) order[at++] = reps[k];
    }
    struct seg_key *key = t > 0 && chunk && at - start > 1 ? vd_calloc(at - start, sizeof(*key)) : NULL;
    if (!key) { /* one segment (also without memory: OPTIMIZATION-ONLY) */
      seg_end[ns++] = at;
      continue;
    }
    for (size_t k = start; k < at; k++) key[k - start] = (struct seg_key){r->set.stages[order[k]].n_nodes, order[k]};
    qsort(key, at - start, sizeof(*key), seg_key_cmp);
    for (size_t k = start; k < at; k++) order[k] = key[k - start].id;
    vd_free(key);
    for (size_t e = start, c = VD_RUN_FIRST_CHUNK; e < at; c *= 2) {
      e = at - e > c && ns + 1 + (n_tiers - t) < VD_RUN_MAX_SEGMENTS ? e + c : at;
      seg_end[ns++] = e;
    }
  }
  *n_seg = ns;
}

/* A class not solved because the run was stopped (common/ctl.h). */
static void interrupted_verdict(vd_stage_verdict *v) {
  v->verdict = VD_SMT_INCONCLUSIVE;
  v->limit = VD_SMT_LIMIT_NONE;
  snprintf(v->reason, sizeof(v->reason), "not solved (run interrupted)");
}

/* After a stop: every stage not proven equivalent whose check the stop
 * prevented or cut short (skipped 4, its own or its representative's) is
 * "not solved (run interrupted)", and a failure found before the stop is
 * not confirmed (its counterexample is not computed, and with inferred
 * lineages it may rest on a candidate that a later round would drop): both
 * INCONCLUSIVE, counted in n_interrupted (n_unconfirmed).  SOUNDNESS: a stop
 * removes evidence only; nothing becomes equivalent. */
static void interrupt_stages(vd_run *r, const vd_run_opts *o, uint8_t *skipped) {
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    size_t rep = o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
    vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict == VD_SMT_NOT_EQUIVALENT) {
      v->verdict = VD_SMT_INCONCLUSIVE;
      v->limit = VD_SMT_LIMIT_NONE;
      snprintf(v->reason, sizeof(v->reason),
               "not solved (run interrupted): its check had found a difference, not confirmed before the stop");
      r->n_unconfirmed++;
      skipped[i] = 4;
    } else if (v->verdict == VD_SMT_INCONCLUSIVE && (skipped[i] == 4 || skipped[rep] == 4)) {
      interrupted_verdict(v);
      skipped[i] = 4;
    }
  }
}

/* The proof cache (verifier/cache.h): a class representative's canonical
 * form, computed again as the classes were (stages/canon.c) on the stage
 * as it is solved.  Without memory: no hit, nothing stored
 * (OPTIMIZATION-ONLY). */
static int cache_hit(const vd_run *r, const vd_run_opts *o, const vd_stage *st) {
  vd_stage_canon_key k = {0};
  int hit = vd_stage_canon_key_of(&r->lt, st, &k, NULL) == VD_OK && vd_cache_lookup(o->cache, k.b, k.n);
  vd_stage_canon_key_free(&k);
  return hit;
}

static void cache_store(const vd_run *r, const vd_run_opts *o, const vd_stage *st) {
  vd_stage_canon_key k = {0};
  if (vd_stage_canon_key_of(&r->lt, st, &k, NULL) == VD_OK) vd_cache_store(o->cache, k.b, k.n);
  vd_stage_canon_key_free(&k);
}

/* One round's solve: the stages' bookkeeping, the solving order, the
 * threads' contexts, and what the failures found so far decide. */
struct solve_round {
  vd_run *r;
  const vd_run_opts *o;
  size_t n;
  uint32_t *reps;
  size_t n_reps;
  /* done[i]: stage i's verdict is set (solved, skipped, or proven in an
   * earlier round); fresh[i]: solved in a context of its own */
  uint8_t *done, *fresh;
  uint8_t *skipped; /* r->skipped */
  uint32_t *order, *todo;
  size_t n_todo;
  size_t seg_end[VD_RUN_MAX_SEGMENTS], n_seg;
  int threads;
  /* per thread: its context, made once per round (tctx_made) */
  vd_smt **tctx;
  vd_rc *tctx_rc;
  vd_diag *tctx_d;
  uint8_t *tctx_made;
  vd_stage_solve_opts so;
  size_t done_count;
  vd_rc first_rc;
  vd_diag first_diag;
  /* plan_fail_nodes: size of the smallest stage targeting only annotated
   * values that failed (0: none yet); stop_stage: the first grounded
   * failure (SIZE_MAX: none yet). */
  uint32_t plan_fail_nodes;
  size_t stop_stage;
  /* moot[v]: Gp value v is computed from a candidate that failed in this
   * round (moot_marks); NULL until one fails, or when this round's drop
   * does not take descendants along. */
  uint8_t *moot;
  int cands;
  uint32_t big;
  const vd_issue *decided;
};

static void solve_round_free(struct solve_round *ss) {
  if (ss->tctx)
    for (int k = 0; k < ss->threads; k++) vd_smt_free(ss->tctx[k]);
  VD_FREE_ALL(ss->tctx, ss->tctx_rc, ss->tctx_d, ss->tctx_made, ss->order, ss->todo, ss->done, ss->moot, ss->fresh,
              ss->reps);
  ss->tctx = NULL;
  ss->tctx_rc = NULL;
  ss->tctx_d = NULL;
  ss->tctx_made = NULL;
  ss->order = ss->todo = ss->reps = NULL;
  ss->done = ss->moot = ss->fresh = NULL;
}

/* The class representatives to solve, in stage order (reps); a stage
 * proven in an earlier round takes that verdict instead. */
static vd_rc pick_representatives(struct solve_round *ss, vd_diag *d) {
  vd_run *r = ss->r;
  const vd_run_opts *o = ss->o;
  size_t n = ss->n;
  r->verdicts = vd_calloc(n ? n : 1, sizeof(*r->verdicts));
  r->stage_rc = vd_calloc(n ? n : 1, sizeof(*r->stage_rc));
  ss->reps = vd_calloc(n ? n : 1, sizeof(*ss->reps));
  ss->done = vd_calloc(n ? n : 1, 1);
  ss->fresh = vd_calloc(n ? n : 1, 1);
  if (!r->verdicts || !r->stage_rc || !ss->reps || !ss->done || !ss->fresh) return VD_OOM(d);
  uint64_t *sigbuf = NULL;
  size_t sigcap = 0;
  for (size_t i = 0; i < n; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (!(o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i)) continue;
    if (r->n_pv) {
      size_t ns = 0;
      if (vd_run_i_stage_sig(r, st, &sigbuf, &sigcap, &ns) != VD_OK) {
        vd_free(sigbuf);
        return VD_OOM(d);
      }
      if (vd_run_i_sig_known(r, sigbuf, ns)) {
        r->verdicts[i].verdict = VD_SMT_EQUIVALENT;
        ss->done[i] = 1;
        snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "proven in an earlier round");
        r->n_reused_rounds++;
        continue;
      }
    }
    ss->reps[ss->n_reps++] = (uint32_t)i;
  }
  vd_free(sigbuf);
  r->n_classes = ss->n_reps;
  return VD_OK;
}

/* The solving order in segments, the threads' slots and the solve options.
 * Segments: the tiers by size (the first one in stage order; see
 * vd_run_tier_nodes), every later one cut into chunks of 2, 4, 8, ...
 * stages by size when there are candidates (order_segments). */
static vd_rc prepare_schedule(struct solve_round *ss, vd_diag *d) {
  vd_run *r = ss->r;
  const vd_run_opts *o = ss->o;
  size_t n = ss->n, n_reps = ss->n_reps;
  vd_free(r->skipped);
  ss->skipped = r->skipped = vd_calloc(n ? n : 1, 1);
  ss->order = vd_calloc(n_reps ? n_reps : 1, sizeof(*ss->order));
  ss->todo = vd_calloc(n_reps ? n_reps : 1, sizeof(*ss->todo));
  ss->threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  ss->tctx = vd_calloc((size_t)ss->threads, sizeof(*ss->tctx));
  ss->tctx_rc = vd_calloc((size_t)ss->threads, sizeof(*ss->tctx_rc));
  ss->tctx_d = vd_calloc((size_t)ss->threads, sizeof(*ss->tctx_d));
  ss->tctx_made = vd_calloc((size_t)ss->threads, 1);
  if (!ss->skipped || !ss->order || !ss->todo || !ss->tctx || !ss->tctx_rc || !ss->tctx_d || !ss->tctx_made)
    return VD_OOM(d);
  order_segments(r, ss->reps, n_reps, ss->order, ss->seg_end, &ss->n_seg);
  ss->so = (vd_stage_solve_opts){.timeout_ms = o->stage_timeout_ms, .budget = o->stage_budget,
                            .fast_path = !o->no_fast_path, .max_elems = VD_LIM_STAGE_MAX_ELEMS,
                            .max_cex_elems = VD_LIM_CEX_ELEMS, .seed = o->seed, .cross_check = o->cross_check,
                            /* once candidates failed in a chain (taint_descendants),
                             * a large stage probably fails: a bug upstream */
                            .witness_first = r->infer_rounds > VD_RUN_TAINT_ROUND ? VD_STAGE_WITNESS_FIRST_NODES : 0};
  vd_ctl_set(VD_CTL_CLASSES_DONE, 0);
  vd_progress_phase(&r->prog, "solving", VD_CTL_CLASSES_DONE, "stage classes", n_reps ? n_reps : 1);
  vd_diag_clear(&ss->first_diag);
  r->threads_used = ss->threads;
  ss->stop_stage = SIZE_MAX;
  ss->cands = r->inferred && r->infer.n_inferred;
  ss->big = vd_run_tier_nodes[VD_RUN_N_TIERS - 1];
  /* OPTIMIZATION-ONLY: with candidates, a structural problem of the plan
   * itself (plan_structural_issue) decides NOT EQUIVALENT before any stage
   * is solved, as it does with full annotations; the stages would only
   * grow round after round around the faulty node (a reduce_scatter
   * replaced by an all_reduce: 28 failing candidate stages of 300-1000
   * nodes in the first round).  So none is solved and the round is the
   * last.  SOUNDNESS: leaving stages unsolved only removes evidence; they
   * are INCONCLUSIVE, never proved. */
  ss->decided = ss->cands ? plan_structural_issue(r) : NULL;
  return VD_OK;
}

/* SOUNDNESS: a stop request (common/ctl.h): every class not solved yet
 * (from order[lo] on) is INCONCLUSIVE, never left at the zeroed verdict
 * (which reads as equivalent). */
static void mark_unsolved_interrupted(struct solve_round *ss, size_t lo) {
  ss->r->interrupted = vd_ctl_stopped();
  for (size_t k = lo; k < ss->n_reps; k++) {
    uint32_t i = ss->order[k];
    if (ss->done[i]) continue;
    interrupted_verdict(&ss->r->verdicts[i]);
    ss->skipped[i] = 4;
    ss->done[i] = 1;
  }
}

/* Stage i of the current segment: left unsolved (with the reason), taken
 * from the proof cache, or queued for solving (returns 1). */
static int settle_or_queue(struct solve_round *ss, uint32_t i) {
  vd_run *r = ss->r;
  const vd_run_opts *o = ss->o;
  const vd_stage *st = &r->set.stages[i];
  vd_stage_verdict *v = &r->verdicts[i];
  if (ss->decided) {
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason),
             "not solved: a structural problem of the plan (%s) already proves the plans differ "
             "(docs/verifier.md 1b)", vd_sissue_names[ss->decided->kind]);
    ss->skipped[i] = 3;
    ss->done[i] = 1;
    ss->done_count++;
    return 0;
  } else if (ss->stop_stage != SIZE_MAX) {
    /* OPTIMIZATION-ONLY: stage stop_stage is a grounded failure
     * (mark_grounded): the plans differ whatever this stage gives. */
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason),
             "not solved: stage %zu already proves the plans differ (a grounded failure, docs/verifier.md 1b), "
             "and this stage of %u nodes is solved after it",
             ss->stop_stage, st->n_nodes);
  } else if (ss->moot && targets_moot(r, st, ss->moot)) {
    /* OPTIMIZATION-ONLY: this round drops the failed candidate and
     * every candidate computed from it (taint_descendants), so the
     * stage is cut again without them: whatever it gives now is
     * neither reused (its hypotheses change) nor reported (the round
     * is not the last).  Left unsolved, its candidate targets count
     * as not proven (and are among the dropped descendants anyway). */
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason),
             "not solved: its target is computed from an inferred lineage that failed in this round "
             "(docs/verifier.md 1b)");
  } else if (ss->plan_fail_nodes && plan_targets_only(r, st)) {
    /* SOUNDNESS: the verdict is already NOT EQUIVALENT when this is the
     * last round (a smaller stage whose targets are all annotated
     * failed: with no candidate dropped it is grounded); the stages
     * that target only annotated values are left unsolved and say so,
     * never counted as proved.  A stage targeting an inferred candidate
     * is still solved: its outcome decides whether the candidate is
     * kept (a candidate left unproved would be dropped in another
     * round). */
    v->verdict = VD_SMT_INCONCLUSIVE;
    snprintf(v->reason, sizeof(v->reason),
             "not solved: a stage of %u nodes already proves the plans differ, and a stage of %u nodes "
             "is cut past that failure (docs/verifier.md 6)",
             ss->plan_fail_nodes, st->n_nodes);
  } else if (o->cache && cache_hit(r, o, st)) {
    /* SOUNDNESS: the cache holds only EQUIVALENT results, and hits only
     * on this stage's canonical form byte for byte (verifier/cache.c):
     * the solver proved exactly this question before.  Looked up only
     * for a stage this round would solve, so no skip above changes. */
    v->verdict = VD_SMT_EQUIVALENT;
    snprintf(v->reason, sizeof(v->reason), "proven before (proof cache)");
    r->n_cache_reused++;
    ss->done[i] = 1;
    ss->done_count++;
    return 0;
  } else {
    return 1;
  }
  ss->skipped[i] = 1;
  ss->done[i] = 1;
  ss->done_count++;
  return 0;
}

/* Solves stage i on a thread whose context is s (trc: how making it went,
 * td: its diag).  Runs inside the parallel region of solve_segment. */
static void solve_one(struct solve_round *ss, vd_smt *s, const vd_diag *td, vd_rc trc, uint32_t i) {
  vd_run *r = ss->r;
  if (vd_ctl_stopped()) { /* SOUNDNESS: never left at the zeroed verdict */
    interrupted_verdict(&r->verdicts[i]);
    ss->skipped[i] = 4;
    return;
  }
  vd_diag sd;
  vd_diag_clear(&sd);
  /* OPTIMIZATION-ONLY: a stage of the last tier is solved in a context
   * of its own, as the reported-failure pass below would solve it: when
   * it fails, its counterexample is already the deterministic one and
   * is not recomputed (a model-sized stage past a bug: seconds each).
   * With candidates, so is a stage targeting given annotations only
   * once candidates were dropped (a bug upstream is likely: it is a
   * stage that will be reported).  Not before: a context costs about
   * what a small stage does, and a correct boundary-only plan with
   * gradient clipping has dozens of stages over 64 nodes targeting
   * weights (2x its time when each had its own context). */
  int own = trc == VD_OK && (r->set.stages[i].n_nodes > ss->big ||
                             (ss->cands && r->n_dropped && plan_targets_only(r, &r->set.stages[i])));
  /* OPTIMIZATION-ONLY: a failure targeting a candidate is never
   * reported (it is dropped, or demoted in the last round) */
  vd_stage_solve_opts sso = ss->so;
  sso.verdict_only = ss->cands && vd_run_i_targets_candidate(r, &r->set.stages[i]);
  /* OPTIMIZATION-ONLY: a stage that grew over a candidate dropped in
   * an earlier round probably fails again (a bug upstream): the
   * witness first, from a smaller size on */
  if (!sso.witness_first && grew_over_dropped(r, &r->set.stages[i])) sso.witness_first = VD_RUN_GROWN_WITNESS_NODES;
  vd_smt *os = NULL;
  vd_rc orc = own ? vd_smt_new(&os, &sd) : VD_OK;
  /* Once Z3 ran out of memory anywhere, no stage is started: the run
   * ends in "out of memory" (solver/smt.c, "out of memory"). */
  vd_rc rc = trc != VD_OK            ? trc
             : orc != VD_OK           ? orc
             : vd_smt_out_of_memory() ? vd_diag_set(&sd, VD_ENOMEM, __FILE__, __LINE__, NULL, NULL, NULL,
                                                    "out of memory (Z3)")
                                      : vd_stage_solve(own ? os : s, &r->lt, &r->set.stages[i], &sso, &r->verdicts[i], &sd);
  vd_smt_free(os);
  ss->fresh[i] = own && rc == VD_OK;
  r->stage_rc[i] = rc;
  if (rc != VD_OK) {
    /* The machinery failed on this stage: inconclusive, with the reason. */
    r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
    char line[VD_DIAG_TEXT + 200];
    vd_diag_format(trc != VD_OK ? td : &sd, line, sizeof(line));
    snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
#pragma omp critical(vd_run_err)
    if (ss->first_rc == VD_OK && rc == VD_ENOMEM) {
      ss->first_rc = rc;
      ss->first_diag = trc != VD_OK ? *td : sd;
    }
  }
  /* A check that a stop cut short is not a result (a proof found
   * before it stands) */
  if (vd_ctl_stopped() && r->verdicts[i].verdict != VD_SMT_EQUIVALENT) ss->skipped[i] = 4;
#pragma omp atomic update
  ++ss->done_count;
  vd_ctl_add(VD_CTL_CLASSES_DONE, 1);
}

/* Solves the queued stages (todo) in parallel.  OPTIMIZATION-ONLY: an
 * empty segment (every stage of it skipped or proven in an earlier round)
 * creates no solver contexts. */
static void solve_segment(struct solve_round *ss) {
  size_t n_todo = ss->n_todo;
#pragma omp parallel num_threads(ss->threads) if (n_todo > 0)
  if (n_todo > 0) {
    /* Each thread's context is made once per round and kept across the
     * segments (OPTIMIZATION-ONLY: with chunks, a context per thread per
     * segment cost a correct plan with gradient clipping a third of its
     * time); one thread uses it at a time, the regions being sequential. */
    int tid = omp_get_thread_num();
    if (!ss->tctx_made[tid]) {
      vd_diag_clear(&ss->tctx_d[tid]);
      ss->tctx_rc[tid] = vd_smt_new(&ss->tctx[tid], &ss->tctx_d[tid]);
      ss->tctx_made[tid] = 1;
    }
    vd_smt *s = ss->tctx[tid];
    vd_diag td = ss->tctx_d[tid];
    vd_rc trc = ss->tctx_rc[tid];
#pragma omp for schedule(dynamic, 1)
    for (size_t k = 0; k < n_todo; k++) solve_one(ss, s, &td, trc, ss->todo[k]);
  }
}

/* After a segment: its stages are done, its proofs go to the cache, and
 * its failures set plan_fail_nodes.  Returns whether one failed. */
static int note_segment_results(struct solve_round *ss) {
  vd_run *r = ss->r;
  const vd_run_opts *o = ss->o;
  int any_fail = 0;
  for (size_t k = 0; k < ss->n_todo; k++) {
    uint32_t i = ss->todo[k];
    ss->done[i] = 1;
    if (o->cache && r->verdicts[i].verdict == VD_SMT_EQUIVALENT && r->stage_rc[i] == VD_OK)
      cache_store(r, o, &r->set.stages[i]);
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    any_fail = 1;
    /* at the round limit a failure that is not grounded is demoted: it
     * must not keep the larger stages from being solved */
    if (plan_targets_only(r, &r->set.stages[i]) && (!ss->cands || r->infer_rounds < VD_RUN_MAX_INFER_ROUNDS) &&
        (!ss->plan_fail_nodes || r->set.stages[i].n_nodes < ss->plan_fail_nodes))
      ss->plan_fail_nodes = r->set.stages[i].n_nodes;
  }
  return any_fail;
}

/* With candidates, after a failing segment sg that is not the last: the
 * values its failures make moot, and the first grounded failure. */
static void decide_from_failures(struct solve_round *ss, size_t sg) {
  vd_run *r = ss->r;
  if (sg + 1 < ss->n_seg && r->infer_rounds >= VD_RUN_TAINT_ROUND && r->infer_rounds < VD_RUN_MAX_INFER_ROUNDS) {
    if (!ss->moot) ss->moot = vd_calloc(r->pg.n_values ? r->pg.n_values : 1, 1);
    if (ss->moot && !vd_run_i_moot_marks(r, ss->o, ss->done, ss->moot)) {
      vd_free(ss->moot); /* nothing failed that this round drops: nothing is moot */
      ss->moot = NULL;
    }
  }
  if (ss->stop_stage == SIZE_MAX && sg + 1 < ss->n_seg) {
    /* members' verdicts count too: take them from their representatives */
    uint8_t *g = vd_calloc(ss->n ? ss->n : 1, 1);
    if (g && vd_run_i_mark_grounded(r, ss->o, ss->done, g))
      for (size_t i = 0; i < ss->n && ss->stop_stage == SIZE_MAX; i++)
        if (g[i]) ss->stop_stage = i;
    vd_free(g);
  }
}

/* The segments in order: each one's stages settled or solved, until a stop. */
static void solve_segments(struct solve_round *ss) {
  vd_run *r = ss->r;
  for (size_t sg = 0, lo = 0; sg < ss->n_seg; lo = ss->seg_end[sg], sg++) {
    size_t hi = ss->seg_end[sg];
    ss->n_todo = 0;
    if (vd_ctl_stopped()) {
      mark_unsolved_interrupted(ss, lo);
      break;
    }
    for (size_t k = lo; k < hi; k++)
      if (settle_or_queue(ss, ss->order[k])) ss->todo[ss->n_todo++] = ss->order[k];
    solve_segment(ss);
    if (vd_ctl_stopped()) r->interrupted = vd_ctl_stopped();
    int any_fail = note_segment_results(ss);
    if (r->interrupted) continue; /* the next segment marks the rest */
    if (ss->cands && any_fail) decide_from_failures(ss, sg);
  }
}

/* Members take their representative's verdict: their canonical forms are
 * byte-identical, so the solver was asked the same question.  Their own
 * counterexamples (own pieces and ranks) come from the reported-failure
 * pass (resolve_reported), which solves each reported stage itself. */
static void copy_member_verdicts(vd_run *r, const vd_run_opts *o) {
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i) continue;
    const vd_stage_verdict *rep = &r->verdicts[st->canon_class];
    vd_stage_verdict *v = &r->verdicts[i];
    v->verdict = rep->verdict;
    v->diagnosis = rep->diagnosis;
    v->by_fast_path = rep->by_fast_path;
    v->limit = rep->limit;
    memcpy(v->factor, rep->factor, sizeof(v->factor)); /* v != rep: i is not its class id */
    memcpy(v->reason, rep->reason, sizeof(v->reason));
    r->stage_rc[i] = r->stage_rc[st->canon_class];
  }
}

/* Whether the round just solved is the last.  OPTIMIZATION-ONLY: a round
 * that drops candidates is followed by another; its failures are never
 * reported, so they need no counterexamples (a boundary-only plan with a
 * bug: several rounds of model-sized failing stages).  A round with a
 * grounded failure is the last: the plans differ, and dropping candidates
 * to prove more cannot change that (mark_grounded). */
static vd_rc close_round(struct solve_round *ss, int *last_round, vd_diag *d) {
  vd_run *r = ss->r;
  size_t n_grounded = 0;
  uint8_t *grounded = NULL;
  if (ss->cands && !r->interrupted) {
    grounded = vd_calloc(ss->n ? ss->n : 1, 1);
    if (!grounded) return VD_OOM(d);
    n_grounded = vd_run_i_mark_grounded(r, ss->o, NULL, grounded);
  }
  *last_round = r->interrupted || n_grounded > 0 || ss->decided || !vd_run_i_round_drops(r);
  r->round_final = *last_round;
  if (*last_round && ss->cands && !r->interrupted) {
    /* SOUNDNESS: only grounded failures are reported (demote_ungrounded) */
    vd_run_i_demote_ungrounded(r, grounded, ss->skipped);
  }
  vd_free(grounded);
  return VD_OK;
}

/* Solves failing stage i again in a fresh context (reported_failures). */
static vd_rc resolve_failure(struct solve_round *ss, size_t i, vd_diag *d) {
  vd_run *r = ss->r;
  vd_smt *s = NULL;
  vd_rc rc;
  vd_diag sd;
  vd_diag_clear(&sd);
  if ((rc = vd_smt_new(&s, d)) != VD_OK) return rc;
  vd_stage_verdict_free(&r->verdicts[i]);
  r->stage_rc[i] = vd_stage_solve(s, &r->lt, &r->set.stages[i], &ss->so, &r->verdicts[i], &sd);
  vd_smt_free(s);
  vd_ctl_add(VD_CTL_CEX_DONE, 1);
  if (r->stage_rc[i] == VD_ENOMEM) rc = vd_diag_set(d, VD_ENOMEM, __FILE__, __LINE__, NULL, NULL, NULL, "out of memory");
  else if (r->stage_rc[i] != VD_OK) {
    r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
    char line[VD_DIAG_TEXT + 200];
    vd_diag_format(&sd, line, sizeof(line));
    snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
  }
  return rc;
}

/* A Z3 model depends on the context's history (which stages the thread
 * solved before), so the counterexamples that are reported are recomputed
 * serially, each in a fresh context: the report is then byte-identical at
 * any thread count.  Also the failing class representatives (up to a cap):
 * the findings (verifier/findings.c) take their counterexamples and
 * diverging nodes.  Only after the last round. */
static vd_rc resolve_reported(struct solve_round *ss, vd_rc rc, vd_diag *d) {
  vd_run *r = ss->r;
  const vd_run_opts *o = ss->o;
  vd_ctl_set(VD_CTL_CEX_DONE, 0);
  for (size_t i = 0; i < ss->n && !r->interrupted; i++)
    if (r->verdicts[i].verdict == VD_SMT_NOT_EQUIVALENT) {
      vd_progress_phase(&r->prog, "computing the counterexamples of the failing stages", VD_CTL_CEX_DONE, "counterexamples", 0);
      break;
    }
  if (rc == VD_OK && !r->interrupted) rc = vd_run_i_recut_reported(r, o, d);
  if (rc == VD_ECANCELED) {
    r->interrupted = vd_ctl_stopped();
    rc = VD_OK;
  }
  int reported = 0, reps_done = 0;
  for (size_t i = 0; i < ss->n && rc == VD_OK && !r->interrupted; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (vd_ctl_stopped()) {
      r->interrupted = vd_ctl_stopped();
      break;
    }
    const vd_stage *st = &r->set.stages[i];
    /* OPTIMIZATION-ONLY: a failure targeting a candidate is never reported
     * as such (the candidate is dropped, or the failure becomes
     * INCONCLUSIVE after the last round): no counterexample is needed. */
    if (r->inferred && vd_run_i_targets_candidate(r, st)) continue;
    int is_rep = o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i;
    int want = o->max_failures <= 0 || reported < o->max_failures;
    if (!want && !(is_rep && reps_done < VD_RUN_MAX_RESOLVED_REPS)) continue;
    reported += want;
    reps_done += is_rep;
    if (ss->fresh[i]) continue; /* its counterexample is already this pass's (solved in a context of its own) */
    rc = resolve_failure(ss, i, d);
  }
  return rc;
}

/* The round's counts, by verdict and by why a stage was left unsolved. */
static void count_verdicts(vd_run *r, const vd_run_opts *o, uint8_t *skipped) {
  for (size_t i = 0; i < r->set.n_stages; i++) {
    switch (r->verdicts[i].verdict) {
    case VD_SMT_EQUIVALENT: r->n_equiv++; break;
    case VD_SMT_NOT_EQUIVALENT: r->n_not_equiv++; break;
    case VD_SMT_INCONCLUSIVE:
      r->n_inconclusive++;
      /* a member is unsolved when its representative is (1, 3); a demoted
       * failure (2) is the stage's own */
      if (!skipped[i] && !o->no_reuse && r->set.stages[i].canon_class >= 0 &&
          (skipped[r->set.stages[i].canon_class] == 1 || skipped[r->set.stages[i].canon_class] == 3))
        skipped[i] = skipped[r->set.stages[i].canon_class];
      r->n_skipped_large += skipped[i] == 1;
      r->n_demoted += skipped[i] == 2;
      r->n_skipped_decided += skipped[i] == 3;
      r->n_interrupted += skipped[i] == 4;
      break;
    }
    r->n_fast += r->verdicts[i].by_fast_path;
  }
}

vd_rc vd_run_i_solve_stages(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  struct solve_round ss = {.r = r, .o = o, .n = r->set.n_stages};
  vd_rc rc = pick_representatives(&ss, d);
  if (rc == VD_OK) rc = prepare_schedule(&ss, d);
  if (rc != VD_OK) {
    solve_round_free(&ss);
    return rc;
  }
  solve_segments(&ss);
  /* the threads' contexts, the order and the marks are done with */
  uint8_t *fresh = ss.fresh, *skipped = ss.skipped;
  uint32_t *reps = ss.reps;
  ss.fresh = NULL;
  ss.reps = NULL;
  solve_round_free(&ss);
  copy_member_verdicts(r, o);
  int last_round = 0;
  rc = close_round(&ss, &last_round, d);
  if (rc != VD_OK) {
    vd_free(fresh);
    vd_free(reps);
    return rc;
  }
  rc = ss.first_rc;
  ss.fresh = fresh;
  if (last_round) rc = resolve_reported(&ss, rc, d);
  else vd_ctl_set(VD_CTL_CEX_DONE, 0);
  if (ss.first_rc != VD_OK && d) *d = ss.first_diag;
  /* A stop during the last re-solve above cut that check short (its
   * verdict reads "run interrupted") with no stage left to look again:
   * the run is interrupted, whatever the loop saw. */
  if (vd_ctl_stopped()) r->interrupted = vd_ctl_stopped();
  if (r->interrupted) interrupt_stages(r, o, skipped);
  count_verdicts(r, o, skipped);
  r->n_solved = ss.n_reps;
  vd_free(reps);
  vd_free(fresh);
  return rc;
}
