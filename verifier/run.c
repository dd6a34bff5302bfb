/*
 * verifier/run.c - orchestration of one verification run.
 *
 * Serial phases (load, graph, lineage, stage cutting, reduction, canonical
 * classes) and one parallel phase: the representative stage of every class
 * is solved under OpenMP with a dynamic schedule, each thread owning its Z3
 * context and diag.  Members of a class take the representative's verdict
 * (SOUNDNESS: their canonical serializations are byte-identical, so the
 * proof is the same proof); failing members are re-solved on their own so
 * that their counterexamples name their own ranks.  Results are stored per
 * stage id, so the output does not depend on the thread count.
 */
#include "run.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/ctl.h"
#include "../common/digest.h"
#include "../common/limits.h"
#include "../common/mem.h"
#include "../ops/ops.h"

const char *const vd_run_phase_names[VD_RUN_PHASES] = {"load", "graph", "lineage", "stages", "solve"};

void vd_run_free(vd_run *r) {
  if (!r) return;
  if (r->verdicts)
    for (size_t i = 0; i < r->set.n_stages; i++) vd_stage_verdict_free(&r->verdicts[i]);
  vd_free(r->verdicts);
  vd_free(r->skipped);
  vd_free(r->stage_rc);
  vd_free(r->issues);
  vd_free(r->limits);
  vd_free(r->inferred);
  vd_free(r->dropped);
  vd_free(r->pv_pool);
  vd_free(r->pv);
  vd_stage_set_free(&r->set);
  vd_lin_free(&r->lt);
  vd_graph_free(&r->pg);
  vd_graph_free(&r->sg);
  vd_plan_free(&r->pp);
  vd_plan_free(&r->sp);
  memset(r, 0, sizeof(*r));
}

int vd_run_exit_code(const vd_run *r) {
  if (r->interrupted) return 3; /* whatever was found so far: no verdict was reached */
  if (r->n_issues > 0 || r->n_issues_dropped > 0 || r->n_not_equiv > 0) return 1;
  if (r->n_inconclusive > 0 || r->n_limits > 0 || r->n_limits_dropped > 0) return 3;
  return 0;
}

/* Appends one module's issues to the run's list: each already carries its
 * diagnosis (common/issue.h), so nothing is mapped here.  prefix, if not
 * NULL, goes before each detail ("parallel plan: "). */
static vd_rc collect_issues(vd_run *r, const vd_issue *v, size_t n, size_t dropped, const char *prefix) {
  for (size_t i = 0; i < n; i++) {
    vd_issue is = v[i];
    if (prefix) snprintf(is.detail, sizeof(is.detail), "%s%s", prefix, v[i].detail);
    /* SOUNDNESS: a limit reached is no finding (exit 3, never 1). */
    if (is.kind_name && !strcmp(is.kind_name, "limit"))
      VD_CHECK(vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is));
    else
      VD_CHECK(vd_issue_push(&r->issues, &r->n_issues, &r->cap_issues, 0, &r->n_issues_dropped, &is));
  }
  r->n_issues_dropped += dropped;
  return VD_OK;
}

/* A stage whose shape constraints contradict each other: SHAPE.  The
 * node comes from the reducer's record ("stage S node K ..."), so that the
 * report can group the entry with the SHAPE issue of the same node. */
static void shape_issue(const vd_run *r, const vd_stage *st, const char *record, const char *detail, vd_issue *out) {
  vd_issue is;
  vd_issue_init(&is, "stages", VD_SISSUE_SHAPE, "shape_constraints", VD_DX_SHAPE);
  unsigned sid, k;
  if (record && sscanf(record, "stage %u node %u", &sid, &k) == 2 && k < st->n_nodes && st->nodes[k].side) {
    const vd_gnode_t *gn = &r->pg.nodes[st->nodes[k].gnode];
    is.pnode = gn->pnode;
    is.mb = gn->mb;
    is.replica = st->nodes[k].replica;
    is.rank = vd_graph_rank(&r->pg, r->pp.nodes[gn->pnode].rank, st->nodes[k].replica);
  }
  snprintf(is.detail, sizeof(is.detail), "%.*s", (int)sizeof(is.detail) - 1, detail);
  *out = is;
}

static vd_rc load_plan(const char *path, vd_plan_kind want, vd_plan_t *p, vd_diag *d) {
  VD_CHECK(vd_plan_read_file(path, p, d));
  VD_CHECK(vd_op_check_plan(p, path, d)); /* arity and attributes: exit 2, not a default */
  if (p->kind != want)
    VD_FAIL(d, VD_EINPUT, path, NULL, "kind", "expected a %s plan for %s, got a %s plan%s",
            want == VD_PLAN_SINGLE ? "single-device" : "parallel", want == VD_PLAN_SINGLE ? "--sm" : "--pm",
            p->kind == VD_PLAN_SINGLE ? "single-device" : "parallel",
            want == VD_PLAN_SINGLE ? " (were --sm and --pm swapped?)" : "");
  return VD_OK;
}

/* ---- stages proven in an earlier round --------------------------------
 *
 * OPTIMIZATION-ONLY: a stage's proof obligation is a function of its nodes
 * (graph node, side, replica), its leaves (value, replica, and whether it
 * is a hypothesis) and its targets' points, given the annotations of the
 * tensors involved; dropping a candidate only removes annotations, and a
 * stage whose leaves and targets are all still points has the same
 * annotations.  So a stage of a later round with exactly the same content
 * (compared in full, not by hash) asks the same question. */

struct vd_run_sig {
  uint64_t h;
  size_t off, len;
};

static vd_rc stage_sig(const vd_run *r, const vd_stage *st, uint64_t **buf, size_t *cap, size_t *n) {
  size_t need = 1 + st->n_nodes + st->n_vals + st->n_targets;
  for (uint32_t k = 0; k < st->n_targets; k++) need += st->targets[k].n_pieces;
  if (need > *cap) {
    uint64_t *nb = vd_realloc_array(*buf, need, sizeof(**buf));
    if (!nb) return VD_ENOMEM;
    *buf = nb;
    *cap = need;
  }
  uint64_t *b = *buf;
  size_t i = 0;
  b[i++] = ((uint64_t)st->n_nodes << 32) | st->n_vals;
  for (uint32_t k = 0; k < st->n_nodes; k++)
    b[i++] = ((uint64_t)st->nodes[k].side << 63) | ((uint64_t)st->nodes[k].gnode << 24) | (uint32_t)st->nodes[k].replica;
  for (uint32_t k = 0; k < st->n_vals; k++)
    b[i++] = ((uint64_t)st->vals[k].side << 63) | ((uint64_t)(st->vals[k].leaf_piece >= 0) << 62) |
             ((uint64_t)st->vals[k].value << 24) | (uint32_t)st->vals[k].replica;
  for (uint32_t k = 0; k < st->n_targets; k++) {
    const vd_stage_target *tg = &st->targets[k];
    b[i++] = tg->n_pieces;
    for (uint32_t j = 0; j < tg->n_pieces; j++) {
      const vd_lin_piece *pc = &r->lt.pieces[st->idx[tg->piece_off + 2 * j]];
      b[i++] = ((uint64_t)pc->value << 24) | (uint32_t)pc->replica;
    }
  }
  *n = i;
  return VD_OK;
}

static uint64_t sig_hash(const uint64_t *b, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static int sig_known(const vd_run *r, const uint64_t *b, size_t n) {
  uint64_t h = sig_hash(b, n);
  size_t lo = 0, hi = r->n_pv;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (r->pv[mid].h < h) lo = mid + 1;
    else hi = mid;
  }
  for (; lo < r->n_pv && r->pv[lo].h == h; lo++)
    if (r->pv[lo].len == n && !memcmp(r->pv_pool + r->pv[lo].off, b, n * sizeof(*b))) return 1;
  return 0;
}

/* Records the proven stages of this round (only when candidates exist:
 * without them there is no next round). */
static vd_rc remember_proven(vd_run *r) {
  uint64_t *b = NULL;
  size_t cap = 0, n = 0;
  vd_rc rc = VD_OK;
  for (size_t i = 0; i < r->set.n_stages && rc == VD_OK; i++) {
    if (r->verdicts[i].verdict != VD_SMT_EQUIVALENT || r->set.stages[i].compact) continue;
    if ((rc = stage_sig(r, &r->set.stages[i], &b, &cap, &n)) != VD_OK) break;
    if (sig_known(r, b, n)) continue;
    if (VD_GROW(r->pv_pool, r->cap_pv_pool, r->n_pv_pool + n) || VD_GROW(r->pv, r->cap_pv, r->n_pv + 1)) {
      rc = VD_ENOMEM;
      break;
    }
    memcpy(r->pv_pool + r->n_pv_pool, b, n * sizeof(*b));
    r->pv[r->n_pv++] = (struct vd_run_sig){sig_hash(b, n), r->n_pv_pool, n};
    r->n_pv_pool += n;
    /* keep sorted by hash for sig_known (insertion: rounds are few) */
    for (size_t k = r->n_pv - 1; k > 0 && r->pv[k - 1].h > r->pv[k].h; k--) {
      struct vd_run_sig t = r->pv[k];
      r->pv[k] = r->pv[k - 1];
      r->pv[k - 1] = t;
    }
  }
  vd_free(b);
  return rc;
}

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

static vd_rc recut_reported(vd_run *r, const vd_run_opts *o, vd_diag *d);
static int targets_candidate(const vd_run *r, const vd_stage *st);
static int round_drops(const vd_run *r);
static size_t mark_grounded(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *grounded);
static void taint_values(const vd_run *r, const uint8_t *kill, uint8_t *bad);
static int moot_marks(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *bad);
static void demote_ungrounded(vd_run *r, const uint8_t *grounded, uint8_t *mark);

/* Whether every target of st is an annotated value (no inferred candidate):
 * its failure is a failure of the plan. */
static int plan_targets_only(const vd_run *r, const vd_stage *st) { return !r->inferred || !targets_candidate(r, st); }

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

static vd_rc solve_stages(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  size_t n = r->set.n_stages;
  r->verdicts = vd_calloc(n ? n : 1, sizeof(*r->verdicts));
  r->stage_rc = vd_calloc(n ? n : 1, sizeof(*r->stage_rc));
  uint32_t *reps = vd_calloc(n ? n : 1, sizeof(*reps));
  /* done[i]: stage i's verdict is set (solved, skipped, or proven in an
   * earlier round); fresh[i]: solved in a context of its own */
  uint8_t *done = vd_calloc(n ? n : 1, 1), *fresh = vd_calloc(n ? n : 1, 1);
  if (!r->verdicts || !r->stage_rc || !reps || !done || !fresh) {
    vd_free(reps);
    vd_free(done);
    vd_free(fresh);
    return VD_OOM(d);
  }
  size_t n_reps = 0;
  uint64_t *sigbuf = NULL;
  size_t sigcap = 0;
  for (size_t i = 0; i < n; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (!(o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i)) continue;
    if (r->n_pv) {
      size_t ns = 0;
      if (stage_sig(r, st, &sigbuf, &sigcap, &ns) != VD_OK) {
        vd_free(reps);
        vd_free(sigbuf);
        vd_free(done);
        vd_free(fresh);
        return VD_OOM(d);
      }
      if (sig_known(r, sigbuf, ns)) {
        r->verdicts[i].verdict = VD_SMT_EQUIVALENT;
        done[i] = 1;
        snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "proven in an earlier round");
        r->n_reused_rounds++;
        continue;
      }
    }
    reps[n_reps++] = (uint32_t)i;
  }
  vd_free(sigbuf);
  r->n_classes = n_reps;
  /* Segments: the tiers by size (the first one in stage order; see
   * vd_run_tier_nodes), every later one cut into chunks of 2, 4, 8, ...
   * stages by size when there are candidates (order_segments). */
  size_t n_tiers = sizeof(vd_run_tier_nodes) / sizeof(vd_run_tier_nodes[0]);
  vd_free(r->skipped);
  uint8_t *skipped = r->skipped = vd_calloc(n ? n : 1, 1);
  uint32_t *order = vd_calloc(n_reps ? n_reps : 1, sizeof(*order));
  uint32_t *todo = vd_calloc(n_reps ? n_reps : 1, sizeof(*todo));
  size_t seg_end[VD_RUN_MAX_SEGMENTS], n_seg = 0;
  int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
  vd_smt **tctx = vd_calloc((size_t)threads, sizeof(*tctx));
  vd_rc *tctx_rc = vd_calloc((size_t)threads, sizeof(*tctx_rc));
  vd_diag *tctx_d = vd_calloc((size_t)threads, sizeof(*tctx_d));
  uint8_t *tctx_made = vd_calloc((size_t)threads, 1);
  if (!skipped || !done || !fresh || !order || !todo || !tctx || !tctx_rc || !tctx_d || !tctx_made) {
    vd_free(tctx);
    vd_free(tctx_rc);
    vd_free(tctx_d);
    vd_free(tctx_made);
    vd_free(done);
    vd_free(fresh);
    vd_free(order);
    vd_free(todo);
    vd_free(reps);
    return VD_OOM(d);
  }
  order_segments(r, reps, n_reps, order, seg_end, &n_seg);
  vd_stage_solve_opts so = {.timeout_ms = o->stage_timeout_ms, .budget = o->stage_budget,
                            .fast_path = !o->no_fast_path, .max_elems = VD_LIM_STAGE_MAX_ELEMS,
                            .max_cex_elems = VD_LIM_CEX_ELEMS, .seed = o->seed, .cross_check = o->cross_check,
                            /* once candidates failed in a chain (taint_descendants),
                             * a large stage probably fails: a bug upstream */
                            .witness_first = r->infer_rounds > VD_RUN_TAINT_ROUND ? VD_STAGE_WITNESS_FIRST_NODES : 0};
  size_t done_count = 0;
  vd_ctl_set(VD_CTL_CLASSES_DONE, 0);
  vd_progress_phase(&r->prog, "solving", VD_CTL_CLASSES_DONE, "stage classes", n_reps ? n_reps : 1);
  vd_rc first_rc = VD_OK;
  vd_diag first_diag;
  vd_diag_clear(&first_diag);
  r->threads_used = threads;
  /* plan_fail_nodes: size of the smallest stage targeting only annotated
   * values that failed (0: none yet); stop_stage: the first grounded
   * failure (SIZE_MAX: none yet). */
  uint32_t plan_fail_nodes = 0;
  size_t stop_stage = SIZE_MAX;
  /* moot[v]: Gp value v is computed from a candidate that failed in this
   * round (moot_marks); NULL until one fails, or when this round's drop
   * does not take descendants along. */
  uint8_t *moot = NULL;
  int cands = r->inferred && r->infer.n_inferred;
  uint32_t big = vd_run_tier_nodes[n_tiers - 1];
  /* OPTIMIZATION-ONLY: with candidates, a structural problem of the plan
   * itself (plan_structural_issue) decides NOT EQUIVALENT before any stage
   * is solved, as it does with full annotations; the stages would only
   * grow round after round around the faulty node (a reduce_scatter
   * replaced by an all_reduce: 28 failing candidate stages of 300-1000
   * nodes in the first round).  So none is solved and the round is the
   * last.  SOUNDNESS: leaving stages unsolved only removes evidence; they
   * are INCONCLUSIVE, never proved. */
  const vd_issue *decided = cands ? plan_structural_issue(r) : NULL;
  for (size_t sg = 0, lo = 0; sg < n_seg; lo = seg_end[sg], sg++) {
    size_t hi = seg_end[sg], n_todo = 0;
    if (vd_ctl_stopped()) {
      /* SOUNDNESS: a stop request (common/ctl.h): every class not solved
       * yet is INCONCLUSIVE, never left at the zeroed verdict (which reads
       * as equivalent). */
      r->interrupted = vd_ctl_stopped();
      for (size_t k = lo; k < n_reps; k++) {
        uint32_t i = order[k];
        if (done[i]) continue;
        interrupted_verdict(&r->verdicts[i]);
        skipped[i] = 4;
        done[i] = 1;
      }
      break;
    }
    for (size_t k = lo; k < hi; k++) {
      uint32_t i = order[k];
      const vd_stage *st = &r->set.stages[i];
      vd_stage_verdict *v = &r->verdicts[i];
      if (decided) {
        v->verdict = VD_SMT_INCONCLUSIVE;
        snprintf(v->reason, sizeof(v->reason),
                 "not solved: a structural problem of the plan (%s) already proves the plans differ "
                 "(docs/verifier.md 1b)", vd_sissue_names[decided->kind]);
        skipped[i] = 3;
        done[i] = 1;
        done_count++;
        continue;
      } else if (stop_stage != SIZE_MAX) {
        /* OPTIMIZATION-ONLY: stage stop_stage is a grounded failure
         * (mark_grounded): the plans differ whatever this stage gives. */
        v->verdict = VD_SMT_INCONCLUSIVE;
        snprintf(v->reason, sizeof(v->reason),
                 "not solved: stage %zu already proves the plans differ (a grounded failure, docs/verifier.md 1b), "
                 "and this stage of %u nodes is solved after it",
                 stop_stage, st->n_nodes);
      } else if (moot && targets_moot(r, st, moot)) {
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
      } else if (plan_fail_nodes && plan_targets_only(r, st)) {
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
                 plan_fail_nodes, st->n_nodes);
      } else if (o->cache && cache_hit(r, o, st)) {
        /* SOUNDNESS: the cache holds only EQUIVALENT results, and hits only
         * on this stage's canonical form byte for byte (verifier/cache.c):
         * the solver proved exactly this question before.  Looked up only
         * for a stage this round would solve, so no skip above changes. */
        v->verdict = VD_SMT_EQUIVALENT;
        snprintf(v->reason, sizeof(v->reason), "proven before (proof cache)");
        r->n_cache_reused++;
        done[i] = 1;
        done_count++;
        continue;
      } else {
        todo[n_todo++] = i;
        continue;
      }
      skipped[i] = 1;
      done[i] = 1;
      done_count++;
    }
    /* OPTIMIZATION-ONLY: an empty segment (every stage of it skipped or
     * proven in an earlier round) creates no solver contexts */
#pragma omp parallel num_threads(threads) if (n_todo > 0)
  if (n_todo > 0) {
    /* Each thread's context is made once per round and kept across the
     * segments (OPTIMIZATION-ONLY: with chunks, a context per thread per
     * segment cost a correct plan with gradient clipping a third of its
     * time); one thread uses it at a time, the regions being sequential. */
    int tid = omp_get_thread_num();
    if (!tctx_made[tid]) {
      vd_diag_clear(&tctx_d[tid]);
      tctx_rc[tid] = vd_smt_new(&tctx[tid], &tctx_d[tid]);
      tctx_made[tid] = 1;
    }
    vd_smt *s = tctx[tid];
    vd_diag td = tctx_d[tid];
    vd_rc trc = tctx_rc[tid];
#pragma omp for schedule(dynamic, 1)
    for (size_t k = 0; k < n_todo; k++) {
      uint32_t i = todo[k];
      if (vd_ctl_stopped()) { /* SOUNDNESS: never left at the zeroed verdict */
        interrupted_verdict(&r->verdicts[i]);
        skipped[i] = 4;
        continue;
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
      int own = trc == VD_OK &&
                (r->set.stages[i].n_nodes > big || (cands && r->n_dropped && plan_targets_only(r, &r->set.stages[i])));
      /* OPTIMIZATION-ONLY: a failure targeting a candidate is never
       * reported (it is dropped, or demoted in the last round) */
      vd_stage_solve_opts sso = so;
      sso.verdict_only = cands && targets_candidate(r, &r->set.stages[i]);
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
      fresh[i] = own && rc == VD_OK;
      r->stage_rc[i] = rc;
      if (rc != VD_OK) {
        /* The machinery failed on this stage: inconclusive, with the reason. */
        r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
        char line[VD_DIAG_TEXT + 200];
        vd_diag_format(trc != VD_OK ? &td : &sd, line, sizeof(line));
        snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
#pragma omp critical(vd_run_err)
        if (first_rc == VD_OK && rc == VD_ENOMEM) {
          first_rc = rc;
          first_diag = trc != VD_OK ? td : sd;
        }
      }
      /* A check that a stop cut short is not a result (a proof found
       * before it stands) */
      if (vd_ctl_stopped() && r->verdicts[i].verdict != VD_SMT_EQUIVALENT) skipped[i] = 4;
#pragma omp atomic update
      ++done_count;
      vd_ctl_add(VD_CTL_CLASSES_DONE, 1);
    }
  }
    if (vd_ctl_stopped()) r->interrupted = vd_ctl_stopped();
    int any_fail = 0;
    for (size_t k = 0; k < n_todo; k++) {
      uint32_t i = todo[k];
      done[i] = 1;
      if (o->cache && r->verdicts[i].verdict == VD_SMT_EQUIVALENT && r->stage_rc[i] == VD_OK)
        cache_store(r, o, &r->set.stages[i]);
      if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
      any_fail = 1;
      /* at the round limit a failure that is not grounded is demoted: it
       * must not keep the larger stages from being solved */
      if (plan_targets_only(r, &r->set.stages[i]) && (!cands || r->infer_rounds < VD_RUN_MAX_INFER_ROUNDS) &&
          (!plan_fail_nodes || r->set.stages[i].n_nodes < plan_fail_nodes))
        plan_fail_nodes = r->set.stages[i].n_nodes;
    }
    if (r->interrupted) continue; /* the next segment marks the rest */
    if (cands && any_fail && sg + 1 < n_seg && r->infer_rounds >= VD_RUN_TAINT_ROUND &&
        r->infer_rounds < VD_RUN_MAX_INFER_ROUNDS) {
      if (!moot) moot = vd_calloc(r->pg.n_values ? r->pg.n_values : 1, 1);
      if (moot && !moot_marks(r, o, done, moot)) {
        vd_free(moot); /* nothing failed that this round drops: nothing is moot */
        moot = NULL;
      }
    }
    if (cands && any_fail && stop_stage == SIZE_MAX && sg + 1 < n_seg) {
      /* members' verdicts count too: take them from their representatives */
      uint8_t *g = vd_calloc(n ? n : 1, 1);
      if (g && mark_grounded(r, o, done, g))
        for (size_t i = 0; i < n && stop_stage == SIZE_MAX; i++)
          if (g[i]) stop_stage = i;
      vd_free(g);
    }
  }
  for (int k = 0; k < threads; k++) vd_smt_free(tctx[k]);
  vd_free(tctx);
  vd_free(tctx_rc);
  vd_free(tctx_d);
  vd_free(tctx_made);
  vd_free(order);
  vd_free(todo);
  vd_free(done);
  vd_free(moot);
  done = NULL;
  /* Members take their representative's verdict: their canonical forms are
   * byte-identical, so the solver was asked the same question.  Their own
   * counterexamples (own pieces and ranks) come from the reported-failure
   * pass below, which solves each reported stage itself. */
  vd_smt *s = NULL;
  vd_rc rc = first_rc;
  for (size_t i = 0; i < n; i++) {
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
  /* OPTIMIZATION-ONLY: a round that drops candidates is followed by
   * another; its failures are never reported, so they need no
   * counterexamples (a boundary-only plan with a bug: several rounds of
   * model-sized failing stages).  A round with a grounded failure is the
   * last: the plans differ, and dropping candidates to prove more cannot
   * change that (mark_grounded). */
  size_t n_grounded = 0;
  uint8_t *grounded = NULL;
  if (cands && !r->interrupted) {
    grounded = vd_calloc(n ? n : 1, 1);
    if (!grounded) {
      vd_free(fresh);
      vd_free(reps);
      return VD_OOM(d);
    }
    n_grounded = mark_grounded(r, o, NULL, grounded);
  }
  int last_round = r->interrupted || n_grounded > 0 || decided || !round_drops(r);
  r->round_final = last_round;
  if (last_round && cands && !r->interrupted) {
    /* SOUNDNESS: only grounded failures are reported (demote_ungrounded) */
    demote_ungrounded(r, grounded, skipped);
  }
  vd_free(grounded);
  vd_ctl_set(VD_CTL_CEX_DONE, 0);
  for (size_t i = 0; i < n && last_round && !r->interrupted; i++)
    if (r->verdicts[i].verdict == VD_SMT_NOT_EQUIVALENT) {
      vd_progress_phase(&r->prog, "computing the counterexamples of the failing stages", VD_CTL_CEX_DONE, "counterexamples", 0);
      break;
    }
  /* A Z3 model depends on the context's history (which stages the thread
   * solved before), so the counterexamples that are reported are
   * recomputed serially, each in a fresh context: the report is then
   * byte-identical at any thread count. */
  if (rc == VD_OK && last_round && !r->interrupted) rc = recut_reported(r, o, d);
  if (rc == VD_ECANCELED) {
    r->interrupted = vd_ctl_stopped();
    rc = VD_OK;
  }
  /* Also the failing class representatives (up to a cap): the findings
   * (verifier/findings.c) take their counterexamples and diverging nodes. */
  int reported = 0, reps_done = 0;
  for (size_t i = 0; i < n && rc == VD_OK && last_round && !r->interrupted; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (vd_ctl_stopped()) {
      r->interrupted = vd_ctl_stopped();
      break;
    }
    const vd_stage *st = &r->set.stages[i];
    /* OPTIMIZATION-ONLY: a failure targeting a candidate is never reported
     * as such (the candidate is dropped, or the failure becomes
     * INCONCLUSIVE after the last round): no counterexample is needed. */
    if (r->inferred && targets_candidate(r, st)) continue;
    int is_rep = o->no_reuse || st->canon_class < 0 || (size_t)st->canon_class == i;
    int want = o->max_failures <= 0 || reported < o->max_failures;
    if (!want && !(is_rep && reps_done < VD_RUN_MAX_RESOLVED_REPS)) continue;
    reported += want;
    reps_done += is_rep;
    if (fresh[i]) continue; /* its counterexample is already this pass's (solved in a context of its own) */
    vd_diag sd;
    vd_diag_clear(&sd);
    if ((rc = vd_smt_new(&s, d)) != VD_OK) break;
    vd_stage_verdict_free(&r->verdicts[i]);
    r->stage_rc[i] = vd_stage_solve(s, &r->lt, &r->set.stages[i], &so, &r->verdicts[i], &sd);
    vd_smt_free(s);
    s = NULL;
    vd_ctl_add(VD_CTL_CEX_DONE, 1);
    if (r->stage_rc[i] == VD_ENOMEM) rc = vd_diag_set(d, VD_ENOMEM, __FILE__, __LINE__, NULL, NULL, NULL, "out of memory");
    else if (r->stage_rc[i] != VD_OK) {
      r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&sd, line, sizeof(line));
      snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason), "internal: %s", line);
    }
  }
  if (first_rc != VD_OK && d) *d = first_diag;
  /* A stop during the last re-solve above cut that check short (its
   * verdict reads "run interrupted") with no stage left to look again:
   * the run is interrupted, whatever the loop saw. */
  if (vd_ctl_stopped()) r->interrupted = vd_ctl_stopped();
  if (r->interrupted) interrupt_stages(r, o, skipped);
  for (size_t i = 0; i < n; i++) {
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
  r->n_solved = n_reps;
  vd_free(reps);
  vd_free(fresh);
  return rc;
}


/* Stages smaller than this keep their body when they join a class: freeing
 * it saves little, and they are cheap to keep for reports. */
#define VD_RUN_COMPACT_MIN_VALUES 32

/* Stages are reduced and keyed in batches of this many, in parallel. */
#define VD_RUN_HOOK_BATCH 256

struct stage_hook {
  vd_run *r;
  const vd_run_opts *o;
  vd_stage_canon_tab *tab;
  vd_issue *shape; /* SHAPE issues of contradicting constraints, reported after the cut's */
  size_t n_shape, cap_shape, n_shape_dropped;
  /* The batch: stage indices, and per entry the reduction's result and
   * diag and the canonical key (buffers reused across batches). */
  size_t pend[VD_RUN_HOOK_BATCH], n_pend;
  vd_rc prc[VD_RUN_HOOK_BATCH];
  vd_diag pd[VD_RUN_HOOK_BATCH];
  vd_stage_canon_key key[VD_RUN_HOOK_BATCH];
  uint64_t cut_values, cut_budget; /* stage values cut so far, and the bound (CUT_VALUES_PER_VALUE) */
  int over;                        /* the bound was passed: the cut stopped */
};

/* Reduces and classifies the pending stages, and frees the body of a large
 * class member (its class representative is solved).  The reductions and
 * the canonical keys are computed in parallel (each touches its own stage
 * only); the results are taken in stage order, so the classes, the issues
 * and the compacted stages are those of a serial run at any thread count. */
static vd_rc hook_flush(struct stage_hook *h, vd_stage_set *set, vd_diag *d) {
  size_t n = h->n_pend;
  int nt = n >= 8 ? omp_get_max_threads() : 1;
  h->n_pend = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (size_t j = 0; j < n; j++) {
    vd_stage *st = &set->stages[h->pend[j]];
    vd_diag_clear(&h->pd[j]);
    h->prc[j] = VD_OK;
    if (!h->o->no_reduce) h->prc[j] = vd_stage_reduce(&h->r->lt, st, &h->pd[j]);
    if ((h->prc[j] == VD_OK || h->prc[j] == VD_EINPUT) && h->tab) {
      vd_diag kd;
      vd_diag_clear(&kd);
      vd_rc krc = vd_stage_canon_key_of(&h->r->lt, st, &h->key[j], &kd);
      if (krc != VD_OK) {
        h->prc[j] = krc;
        h->pd[j] = kd;
      }
    }
  }
  for (size_t j = 0; j < n; j++) {
    vd_stage *st = &set->stages[h->pend[j]];
    if (h->prc[j] == VD_EINPUT) {
      char line[VD_DIAG_TEXT + 200];
      vd_diag_format(&h->pd[j], line, sizeof(line));
      vd_issue is;
      shape_issue(h->r, st, h->pd[j].record, line, &is);
      VD_CHECK(vd_issue_push(&h->shape, &h->n_shape, &h->cap_shape, 0, &h->n_shape_dropped, &is));
    } else if (h->prc[j] != VD_OK) {
      if (d) *d = h->pd[j];
      return h->prc[j];
    }
    if (!h->tab) continue;
    VD_CHECK(vd_stage_canon_insert(h->tab, st, &h->key[j], d));
    if (!h->o->dump_stages && (uint32_t)st->canon_class != st->id && st->n_vals >= VD_RUN_COMPACT_MIN_VALUES)
      vd_stage_compact(st);
  }
  return VD_OK;
}

/* Called by the cut on every finished stage: queued, and the queue is
 * processed when full (hook_flush; the caller flushes the rest). */
static vd_rc stage_hook(void *p, vd_stage_set *set, size_t i, vd_diag *d) {
  struct stage_hook *h = p;
  vd_ctl_add(VD_CTL_STAGES_CUT, 1);
  /* Stages copy the nodes they hold: a node with many outputs read by many
   * targets is copied into each (one node of 1000 outputs into a concat,
   * inferred outputs: 1000 stages of 1000 values, 2.3 GB for a 49 KB plan).
   * Past CUT_VALUES_PER_VALUE the cut stops; the round is INCONCLUSIVE
   * (analyse). */
  /* Operand references (st->idx, 4 bytes each) count 1/16 of a value: a
   * node listing 65535 inputs copied into many stages is the same blow-up. */
  h->cut_values += set->stages[i].n_vals + set->stages[i].n_idx / 16;
  if (h->cut_values > h->cut_budget) {
    h->over = 1;
    return VD_EINPUT; /* stops the cut; analyse records the limit */
  }
  h->pend[h->n_pend++] = i;
  if (h->n_pend == VD_RUN_HOOK_BATCH) return hook_flush(h, set, d);
  return VD_OK;
}

/* Restores the bodies of the compact stages that reports and findings read:
 * every failing one (inconclusive ones are reported by their reason only).
 * A restored stage is as large as its class representative; a run failing
 * in thousands of large stages can run out of memory here (exit 3), never
 * report a stage without its body. */
static vd_rc recut_reported(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  for (size_t i = 0; i < r->set.n_stages; i++) {
    vd_stage *st = &r->set.stages[i];
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT || !st->compact) continue;
    if (r->inferred && targets_candidate(r, st)) continue; /* not reported (solve_stages) */
    VD_CHECK(vd_stage_recut(&r->lt, &r->set, i, d));
    if (!o->no_reduce) {
      vd_diag sd;
      vd_diag_clear(&sd);
      vd_rc rc = vd_stage_reduce(&r->lt, st, &sd);
      if (rc != VD_OK && rc != VD_EINPUT) {
        if (d) *d = sd;
        return rc;
      }
    }
  }
  return VD_OK;
}

static vd_rc drop_candidates_of_issues(vd_run *r, size_t *n_drop, vd_diag *d);

/* One round: lineage table, stages, solving (with the current candidates). */
static vd_rc analyse(vd_run *r, const vd_run_opts *o, vd_diag *d) {
  double t = vd_clock_s();
  vd_rc rc;
  vd_ctl_set(VD_CTL_LIN_PIECES, 0);
  vd_ctl_set(VD_CTL_LIN_CHECKED, 0);
  vd_progress_phase(&r->prog, "checking the lineage table", VD_CTL_LIN_PIECES, "pieces collected", 0);
  vd_progress_second(&r->prog, VD_CTL_LIN_CHECKED, "lineages checked");
  VD_CHECK(vd_lin_build(&r->sg, &r->pg, &r->lt, d));
  /* Candidates a lineage issue implicates (a gap or a missing part left by
   * candidates dropped in the round before: the other part of a partial
   * sum, the other shards of a slice) are dropped before any stage is cut,
   * and the table is built again: they would only fail and cost a round of
   * model-sized stages.  Dropping only removes candidates (SOUNDNESS as in
   * drop_failed_candidates); each pass drops at least one, so this ends. */
  while (r->inferred && r->infer.n_inferred && r->lt.n_issues) {
    size_t n_drop = 0;
    VD_CHECK(drop_candidates_of_issues(r, &n_drop, d));
    if (!n_drop) break;
    r->n_dropped += n_drop;
    vd_lin_free(&r->lt);
    memset(&r->lt, 0, sizeof(r->lt));
    VD_CHECK(vd_lin_build(&r->sg, &r->pg, &r->lt, d));
  }
  VD_CHECK(collect_issues(r, r->lt.issues, r->lt.n_issues, r->lt.n_issues_dropped, NULL));
  r->phase_s[VD_RUN_LINEAGE] += vd_clock_s() - t;
  /* Different global batches: every stage downstream of the data compares
   * different samples, so solving would only repeat the BATCH diagnosis. */
  for (size_t i = 0; i < r->lt.n_issues; i++)
    if (r->lt.issues[i].kind == VD_LISSUE_BATCH) return VD_OK;

  t = vd_clock_s();
  /* Each stage is reduced and classified as soon as it is cut; a class
   * member's body is freed at once (OPTIMIZATION-ONLY: memory follows the
   * classes, not the stages; vd_stage_recut restores it for reports). */
  vd_ctl_set(VD_CTL_STAGES_CUT, 0);
  vd_ctl_set(VD_CTL_CUT_LINEAGES, 0);
  vd_progress_phase(&r->prog, "cutting stages", VD_CTL_STAGES_CUT, "stages cut", 0);
  vd_progress_second(&r->prog, VD_CTL_CUT_LINEAGES, "lineages cut");
  struct stage_hook *h = vd_calloc(1, sizeof(*h)); /* (its batch is large: not on the stack) */
  if (!h) return VD_OOM(d);
  h->r = r;
  h->o = o;
  {
    /* Per value of the two graphs, plus one per node execution in all
     * replicas (sums by part and collectives spanning replicas hold every
     * replica's piece; REPLICA_EXEC_PER_BYTE bounds those executions). */
    uint64_t ex = 0;
    rc = vd_plan_executions(&r->pp, UINT64_MAX, &ex, d);
    if (rc != VD_OK) {
      vd_free(h);
      return rc;
    }
    uint64_t reps = r->pp.world.replicas > 0 ? (uint64_t)r->pp.world.replicas : 1;
    h->cut_budget = (uint64_t)VD_LIM_CUT_VALUES_SLACK + ex * reps +
                    (uint64_t)VD_LIM_CUT_VALUES_PER_VALUE * ((uint64_t)r->sg.n_values + (uint64_t)r->pg.n_values);
  }
  rc = o->no_reuse ? VD_OK : vd_stage_canon_new(&h->tab, d);
  if (rc == VD_OK) rc = vd_stage_cut_hook(&r->lt, &r->set, stage_hook, h, d);
  if (rc == VD_OK) rc = hook_flush(h, &r->set, d);
  r->cut_values = h->cut_values;
  r->cut_budget = h->cut_budget;
  if (h->over) {
    /* SOUNDNESS: nothing of this round is solved (its stages are dropped);
     * the limit makes the run INCONCLUSIVE, never EQUIVALENT. */
    vd_issue is;
    vd_issue_init(&is, "stages", 0, "limit", VD_DX_NONE);
    snprintf(is.detail, sizeof(is.detail),
             "the stages cut so far hold %llu values, past CUT_VALUES_PER_VALUE (%d per value of the two graphs, "
             "plus the node executions of all replicas, plus %d; `verdict limits`): a node with many outputs is copied into every stage "
             "that reads one of them",
             (unsigned long long)h->cut_values, VD_LIM_CUT_VALUES_PER_VALUE, VD_LIM_CUT_VALUES_SLACK);
    vd_stage_set_free(&r->set);
    memset(&r->set, 0, sizeof(r->set));
    for (size_t j = 0; j < VD_RUN_HOOK_BATCH; j++) vd_stage_canon_key_free(&h->key[j]);
    vd_stage_canon_free(h->tab);
    vd_free(h->shape);
    vd_free(h);
    if (d) vd_diag_clear(d);
    VD_CHECK(vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is));
    r->round_final = 1;
    r->phase_s[VD_RUN_STAGES] += vd_clock_s() - t;
    return VD_OK;
  }
  vd_stage_canon_free(h->tab);
  for (size_t j = 0; j < VD_RUN_HOOK_BATCH; j++) vd_stage_canon_key_free(&h->key[j]);
  if (rc == VD_OK) rc = collect_issues(r, r->set.issues, r->set.n_issues, r->set.n_issues_dropped, NULL);
  for (size_t i = 0; i < h->n_shape && rc == VD_OK; i++)
    rc = vd_issue_push(&r->issues, &r->n_issues, &r->cap_issues, 0, &r->n_issues_dropped, &h->shape[i]);
  vd_free(h->shape);
  vd_free(h);
  if (rc != VD_OK) return rc;
  vd_progress_phase(&r->prog, "grouping stages into symmetry classes", -1, NULL, 0);
  r->n_represented = 0;
  r->n_sum_stages = r->n_sum_parts = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    r->n_represented += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    r->n_reduced += st->reduced;
    if (st->sum_parts) {
      r->n_sum_stages++;
      r->n_sum_parts += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    }
  }
  r->phase_s[VD_RUN_STAGES] += vd_clock_s() - t;

  t = vd_clock_s();
  rc = solve_stages(r, o, d);
  r->phase_s[VD_RUN_SOLVE] += vd_clock_s() - t;
  return rc;
}

static void reset_round(vd_run *r, size_t n_graph_issues, size_t n_graph_dropped) {
  if (r->verdicts)
    for (size_t i = 0; i < r->set.n_stages; i++) vd_stage_verdict_free(&r->verdicts[i]);
  vd_free(r->verdicts);
  vd_free(r->skipped);
  vd_free(r->stage_rc);
  r->skipped = NULL;
  r->verdicts = NULL;
  r->stage_rc = NULL;
  vd_stage_set_free(&r->set);
  memset(&r->set, 0, sizeof(r->set));
  vd_lin_free(&r->lt);
  memset(&r->lt, 0, sizeof(r->lt));
  r->n_issues = n_graph_issues;
  r->n_issues_dropped = n_graph_dropped;
  r->n_limits = r->n_limits_dropped = 0;
  r->n_classes = r->n_solved = r->n_fast = r->n_reduced = 0;
  r->n_equiv = r->n_not_equiv = r->n_inconclusive = r->n_skipped_large = r->n_demoted = r->n_skipped_decided = 0;
  r->round_final = 0;
}

/* Whether one of stage st's target pieces is a candidate. */
static int targets_candidate(const vd_run *r, const vd_stage *st) {
  for (uint32_t k = 0; k < st->n_targets; k++) {
    const vd_stage_target *tg = &st->targets[k];
    for (uint32_t j = 0; j < tg->n_pieces; j++)
      if (r->inferred[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor]) return 1;
  }
  return 0;
}

/* From round VD_RUN_TAINT_ROUND on (the first), a failing candidate takes
 * every candidate computed from it along: they were inferred from the same
 * lineage, which did not hold (a bug upstream, or a wrong guess).  kill[t] =
 * 1 for every tensor with a Gp value downstream of a killed candidate's
 * values, so that the next round cuts straight to the given annotations
 * after the failure instead of growing one candidate per round (before, the
 * stages downstream of a forward bug failed again round after round).
 * Dropping only removes candidates: it cannot change a verdict's soundness
 * (docs/verifier.md 1b). */
static void taint_values(const vd_run *r, const uint8_t *kill, uint8_t *bad);

static void taint_descendants(vd_run *r, uint8_t *kill) {
  const vd_graph_t *g = &r->pg;
  uint8_t *bad = vd_calloc(g->n_values ? g->n_values : 1, 1);
  if (!bad) return; /* OPTIMIZATION-ONLY: without memory, drop as before */
  taint_values(r, kill, bad);
  for (size_t v = 0; v < g->n_values; v++)
    if (bad[v]) kill[g->values[v].tensor] = 1;
  vd_free(bad);
}

/* Candidates implicated by the lineage table and the cut: a lineage issue
 * names them or their single tensor (gaps, missing parts, overlaps; an issue
 * naming an annotated tensor implicates the candidates of its single tensor
 * too, since only they can have made it), or a structural issue names them.
 * These need no stage result. */
static void implicated_by_issues(const vd_run *r, uint8_t *kill) {
  for (size_t i = 0; i < r->lt.n_issues; i++) {
    const vd_issue *li = &r->lt.issues[i];
    uint32_t full = 0;
    int have_full = 0;
    if (!li->single && li->tensor >= 0 && (size_t)li->tensor < r->pp.n_tensors) {
      kill[li->tensor] = 1;
      if (!r->inferred[li->tensor] && r->pp.tensors[li->tensor].has_lin) {
        full = r->pp.tensors[li->tensor].lin.full;
        have_full = 1;
      }
    } else if (li->stensor >= 0) {
      full = r->sp.tensors[li->stensor].id;
      have_full = 1;
    }
    if (have_full)
      for (size_t t = 0; t < r->pp.n_tensors; t++)
        if (r->inferred[t] && r->pp.tensors[t].lin.full == full) kill[t] = 1;
  }
  for (size_t i = 0; i < r->set.n_issues; i++) {
    const vd_issue *si = &r->set.issues[i];
    if (!si->single && si->tensor >= 0) kill[si->tensor] = 1;
  }
}

/* The verdict stage i has while the round is being solved: its own, or its
 * class representative's; a stage whose verdict is not set yet (done[rep]
 * = 0) counts as not proven.  done = NULL: every verdict is final. */
static vd_smt_verdict verdict_now(const vd_run *r, const vd_run_opts *o, const uint8_t *done, size_t i) {
  if (!done) return r->verdicts[i].verdict;
  const vd_stage *st = &r->set.stages[i];
  size_t rep = o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
  return done[rep] ? r->verdicts[rep].verdict : VD_SMT_INCONCLUSIVE;
}

/* SOUNDNESS (docs/verifier.md 1b): a candidate is implicated when its own
 * lineage is inconsistent (a lineage issue names it or its single tensor),
 * when a structural problem names it, or when a stage TARGETING it did not
 * hold (or is not solved yet, with done).  Implicated candidates are dropped
 * (their annotation removed); a failing stage whose targets are all
 * annotated stays a failure of the plan. */
static void implicated_now(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *kill) {
  implicated_by_issues(r, kill);
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (verdict_now(r, o, done, i) == VD_SMT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[i];
    for (uint32_t k = 0; k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; j < tg->n_pieces; j++) kill[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor] = 1;
    }
  }
}

static void implicated(const vd_run *r, uint8_t *kill) { implicated_now(r, NULL, NULL, kill); }

/* bad[v] = 1 for every Gp value computed from a value of a killed candidate
 * (the candidate's own values included): the forward closure, in
 * topological order.  Replicas and microbatches are not told apart (a value
 * stands for all its replicas), which only makes more values bad. */
static void taint_values(const vd_run *r, const uint8_t *kill, uint8_t *bad) {
  const vd_graph_t *g = &r->pg;
  for (size_t v = 0; v < g->n_values; v++) {
    uint32_t t = g->values[v].tensor;
    bad[v] = kill[t] && r->inferred[t];
  }
  for (size_t k = 0; k < g->n_nodes; k++) {
    const vd_gnode_t *n = &g->nodes[g->topo[k]];
    const uint32_t *in = vd_gnode_inputs(g, n), *out = vd_gnode_outputs(g, n);
    int b = 0;
    for (uint32_t i = 0; i < n->n_in && !b; i++) b = bad[in[i]];
    for (uint32_t q = 0; b && q < n->n_out; q++) bad[out[q]] = 1;
  }
}

/* During a round whose drop takes descendants along (taint_descendants):
 * bad[v] = 1 for every Gp value computed from a candidate whose stage was
 * solved and did not hold so far (done[i]: stage i solved; members take
 * their representative's verdict), or that a lineage or structural issue
 * implicates.  Returns whether any candidate is marked.  OPTIMIZATION-ONLY
 * (solve_stages skips the stages these values make moot). */
static int moot_marks(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *bad) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return 0;
  implicated_by_issues(r, kill);
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    size_t rep = o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
    if (!done[rep] || r->verdicts[rep].verdict == VD_SMT_EQUIVALENT || r->skipped[rep]) continue;
    for (uint32_t k = 0; k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; j < tg->n_pieces; j++) kill[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].ptensor] = 1;
    }
  }
  int any = 0;
  for (size_t t = 0; t < r->pp.n_tensors && !any; t++) any = kill[t] && r->inferred[t];
  if (any) taint_values(r, kill, bad);
  vd_free(kill);
  return any;
}

/* Grounded failures.  A stage is a GROUNDED failure when it is NOT
 * EQUIVALENT, every target is an annotation the plan gives, and no value
 * upstream of its targets belongs to an implicated candidate (taint_values).
 * SOUNDNESS: its hypotheses are then given, or candidates every stage of
 * which holds; each such stage's hypotheses are upstream of the candidate
 * and so of the failing target, hence again given or candidates whose
 * stages hold, down to the initial values (a stage's cone ends at lineage
 * points, so every point on a path into a target is a hypothesis of some
 * stage on that path).  By induction over that finite upstream set every
 * hypothesis is true, and the failing stage's genuine counterexample is one
 * of the plan itself: the same standard as a failure in a round where no
 * candidate fails.  One grounded failure decides NOT EQUIVALENT; nothing
 * solved later can change that (OPTIMIZATION-ONLY: stopping there).
 * grounded (may be NULL) gets 1 per grounded stage; returns their count.
 * Without memory: 0 (no early stop, the rounds run as before). */
static size_t mark_grounded(const vd_run *r, const vd_run_opts *o, const uint8_t *done, uint8_t *grounded) {
  size_t n = r->set.n_stages, count = 0;
  if (!r->verdicts) return 0;
  uint8_t *kill = NULL, *bad = NULL;
  int cands = r->inferred && r->infer.n_inferred;
  if (cands) {
    kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
    bad = vd_calloc(r->pg.n_values ? r->pg.n_values : 1, 1);
    if (!kill || !bad) {
      vd_free(kill);
      vd_free(bad);
      return 0;
    }
    implicated_now(r, o, done, kill);
    taint_values(r, kill, bad);
  }
  for (size_t i = 0; i < n; i++) {
    if (verdict_now(r, o, done, i) != VD_SMT_NOT_EQUIVALENT) continue;
    const vd_stage *st = &r->set.stages[i];
    int ok = !cands || !targets_candidate(r, st);
    for (uint32_t k = 0; ok && k < st->n_targets; k++) {
      const vd_stage_target *tg = &st->targets[k];
      for (uint32_t j = 0; ok && j < tg->n_pieces; j++) ok = !bad[r->lt.pieces[st->idx[tg->piece_off + 2 * j]].value];
    }
    if (!ok) continue;
    count++;
    if (grounded) grounded[i] = 1;
  }
  vd_free(kill);
  vd_free(bad);
  return count;
}

/* The last round of a run with candidates: a failure that is not grounded
 * says nothing about the plan (its target is a candidate, or a hypothesis
 * rests on one that did not hold), so it becomes INCONCLUSIVE with the
 * reason, and mark[i] = 2 (not listed one by one in the text report).
 * SOUNDNESS: after this, every NOT EQUIVALENT stage is grounded. */
static void demote_ungrounded(vd_run *r, const uint8_t *grounded, uint8_t *mark) {
  size_t first = SIZE_MAX;
  for (size_t i = 0; i < r->set.n_stages && first == SIZE_MAX; i++)
    if (grounded[i]) first = i;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_NOT_EQUIVALENT || grounded[i]) continue;
    int cand = targets_candidate(r, &r->set.stages[i]);
    char why[120];
    if (first != SIZE_MAX)
      snprintf(why, sizeof(why), "not retried: stage %zu already proves the plans differ", first);
    else
      snprintf(why, sizeof(why), "still failing after %d rounds", r->infer_rounds);
    snprintf(v->reason, sizeof(v->reason), "%s; %s (docs/verifier.md 1b)",
             cand ? "target is an inferred lineage that did not hold"
                  : "a hypothesis rests on an inferred lineage that did not hold in this round",
             why);
    v->verdict = VD_SMT_INCONCLUSIVE;
    mark[i] = 2;
  }
}

/* Whether this round ends by dropping candidates (and so is not the last:
 * its failures are not reported).  Without memory: 0 (counterexamples are
 * computed as for a last round). */
static int round_drops(const vd_run *r) {
  if (!r->inferred || !r->infer.n_inferred || r->infer_rounds >= VD_RUN_MAX_INFER_ROUNDS) return 0;
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return 0;
  implicated(r, kill);
  int any = 0;
  for (size_t t = 0; t < r->pp.n_tensors && !any; t++) any = kill[t] && r->inferred[t];
  vd_free(kill);
  return any;
}

/* Drops every candidate marked in kill (one byte per parallel tensor,
 * borrowed): its lineage is cleared and r->dropped remembers it. */
static vd_rc drop_marked(vd_run *r, const uint8_t *kill, size_t *n_drop, vd_diag *d) {
  size_t n = 0;
  if (!r->dropped && !(r->dropped = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1))) return VD_OOM(d);
  for (size_t t = 0; t < r->pp.n_tensors; t++) {
    if (!kill[t] || !r->inferred[t]) continue;
    r->dropped[t] = 1;
    r->inferred[t] = 0;
    r->pp.tensors[t].has_lin = 0;
    memset(&r->pp.tensors[t].lin, 0, sizeof(r->pp.tensors[t].lin));
    n++;
  }
  *n_drop = n;
  return VD_OK;
}

static vd_rc drop_failed_candidates(vd_run *r, size_t *n_drop, vd_diag *d) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return VD_OOM(d);
  implicated(r, kill);
  if (r->infer_rounds >= VD_RUN_TAINT_ROUND) taint_descendants(r, kill);
  vd_rc rc = drop_marked(r, kill, n_drop, d);
  vd_free(kill);
  return rc;
}

/* Drops the candidates that the lineage table's issues implicate (no stage
 * is needed for those; analyse). */
static vd_rc drop_candidates_of_issues(vd_run *r, size_t *n_drop, vd_diag *d) {
  uint8_t *kill = vd_calloc(r->pp.n_tensors ? r->pp.n_tensors : 1, 1);
  if (!kill) return VD_OOM(d);
  implicated_by_issues(r, kill); /* (before the cut: r->set has no issues yet) */
  vd_rc rc = drop_marked(r, kill, n_drop, d);
  vd_free(kill);
  return rc;
}

/* After the last round: failures that still target candidates say nothing
 * about the plan (the candidate may be wrong), so they are inconclusive. */
static void candidates_inconclusive(vd_run *r) {
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT || !targets_candidate(r, &r->set.stages[i])) continue;
    r->verdicts[i].verdict = VD_SMT_INCONCLUSIVE;
    snprintf(r->verdicts[i].reason, sizeof(r->verdicts[i].reason),
             "target is an inferred lineage still failing after %d rounds", VD_RUN_MAX_INFER_ROUNDS);
    r->n_not_equiv--;
    r->n_inconclusive++;
  }
}

/* The process's peak resident set size in bytes (Linux: ru_maxrss in KiB). */
static size_t process_peak(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024u;
}

static vd_rc run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d);

/* -v: one line per round of cut-and-solve on stderr (how inference and the
 * drops went; docs/verifier.md 1b). */
static void trace_round(vd_run *r, const vd_run_opts *o, double secs) {
  if (!o->verbose || o->quiet || !r->infer.n_inferred) return;
  size_t nf = 0, nfc = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict == VD_SMT_EQUIVALENT) continue;
    nf++;
    nfc += r->inferred && targets_candidate(r, &r->set.stages[i]);
  }
  vd_progress_note(&r->prog, "verdict: round %d: %zu stages, %zu classes solved, %zu not proven (%zu target candidates), "
                  "%zu candidates dropped so far%s (%.2f s)\n",
          r->infer_rounds, r->set.n_stages, r->n_classes, nf, nfc, r->n_dropped, r->round_final ? ", last round" : "",
          secs);
}

vd_rc vd_run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  memset(r, 0, sizeof(*r));
  vd_ctl_reset();
  vd_progress_init(&r->prog, o->quiet, o->deadline_s);
  vd_cache_stats before, after;
  vd_cache_stats_get(o->cache, &before);
  vd_rc rc = run_verify(o, r, d);
  vd_cache_stats_get(o->cache, &after);
  vd_cache_stats_since(&before, &after, &r->cache_stats);
  if (rc == VD_ECANCELED || r->interrupted) {
    /* Stopped (common/ctl.h): a partial report, INCONCLUSIVE.  Stopped
     * before solving, the stages cut so far are dropped (they have no
     * verdicts); the report says how many there were. */
    r->interrupted = vd_ctl_stopped() ? vd_ctl_stopped() : -1;
    r->stop_phase = vd_progress_current(&r->prog);
    r->stop_s = vd_clock_s() - r->prog.t_start;
    if (!r->verdicts) {
      r->n_stages_cut_at_stop = r->set.n_stages ? r->set.n_stages : vd_ctl_get(VD_CTL_STAGES_CUT);
      vd_stage_set_free(&r->set);
      memset(&r->set, 0, sizeof(r->set));
    }
    if (d) vd_diag_clear(d);
    rc = VD_OK;
  }
  vd_progress_end(&r->prog);
  r->peak_tracked_bytes = vd_mem_peak();
  r->peak_bytes = process_peak();
  return rc;
}

static vd_rc run_verify(const vd_run_opts *o, vd_run *r, vd_diag *d) {
  double t = vd_clock_s();
  /* The phases before solving (lineage validation) use OpenMP's default
   * team: the solver's thread count. */
  if (o->threads > 0) omp_set_num_threads(o->threads);
  vd_progress_phase(&r->prog, "loading the plans", -1, NULL, 0);
  VD_CHECK(load_plan(o->sm, VD_PLAN_SINGLE, &r->sp, d));
  VD_CHECK(load_plan(o->pm, VD_PLAN_PARALLEL, &r->pp, d));
  /* The reports' content hashes (verifier/provenance.h) */
  uint8_t dg[VD_DIGEST_BYTES];
  VD_CHECK(vd_digest_file(o->sm, dg, d));
  vd_digest_hex(dg, r->sm_sha256);
  VD_CHECK(vd_digest_file(o->pm, dg, d));
  vd_digest_hex(dg, r->pm_sha256);
  VD_CHECK(vd_lin_check_pair(&r->sp, o->sm, &r->pp, o->pm, d));
  r->phase_s[VD_RUN_LOAD] = vd_clock_s() - t;
  /* A stop request (common/ctl.h) is looked at between the phases too:
   * loading and the graphs do not poll it. */
  if (vd_ctl_stopped()) return VD_ECANCELED;

  t = vd_clock_s();
  vd_progress_phase(&r->prog, "building the graphs", -1, NULL, 0);
  vd_graph_opts sgo = {.expand_replicas = 1}, pgo = {.expand_replicas = 0};
  vd_rc rc = vd_graph_build(&r->sp, &sgo, &r->sg, d);
  if (rc == VD_EINPUT) {
    /* The reference plan itself is broken: that is bad input, not a verdict. */
    vd_diag_set_file(d, o->sm);
    return rc;
  }
  VD_CHECK(rc);
  vd_diag gd;
  vd_diag_clear(&gd);
  rc = vd_graph_build(&r->pp, &pgo, &r->pg, &gd);
  if (rc != VD_OK && rc != VD_EINPUT) {
    if (d) *d = gd;
    return rc;
  }
  VD_CHECK(collect_issues(r, r->pg.issues, r->pg.n_issues, r->pg.n_issues_dropped, "parallel plan: "));
  r->phase_s[VD_RUN_GRAPH] = vd_clock_s() - t;
  if (r->n_issues || r->n_issues_dropped) return VD_OK; /* stages need a well-formed graph */
  if (vd_ctl_stopped()) return VD_ECANCELED;
  {
    /* The lineage table and the stages work per replica: a plan whose
     * replicas ask for more than its file allows stops here, INCONCLUSIVE
     * naming the limit (plans/budget.c), before inference, the lineage table
     * or a stage (the replica-0 graphs are the file's size). */
    vd_issue is;
    vd_issue_init(&is, "verifier", 0, "limit", VD_DX_NONE);
    char why[sizeof(is.detail)];
    VD_CHECK(vd_plan_replica_work(&r->pp, why, sizeof(why), d));
    if (why[0]) {
      snprintf(is.detail, sizeof(is.detail), "%.100s: %.200s", o->pm, why);
      return vd_issue_push(&r->limits, &r->n_limits, &r->cap_limits, 0, &r->n_limits_dropped, &is) ? VD_OOM(d)
                                                                                                  : VD_OK;
    }
  }

  if (!o->no_infer) {
    t = vd_clock_s();
    vd_ctl_set(VD_CTL_INFER_VALUES, 0);
    vd_progress_phase(&r->prog, "inferring lineages", VD_CTL_INFER_VALUES, "values with a lineage", 0);
    VD_CHECK(vd_lin_infer(&r->sg, &r->pg, &r->pp, &r->inferred, &r->infer, d));
    r->phase_s[VD_RUN_LINEAGE] += vd_clock_s() - t;
  }
  size_t n_graph_issues = r->n_issues, n_graph_dropped = r->n_issues_dropped;
  for (;;) {
    r->infer_rounds++;
    double tr = vd_clock_s();
    VD_CHECK(analyse(r, o, d));
    trace_round(r, o, vd_clock_s() - tr);
    if (r->interrupted || r->round_final || !r->infer.n_inferred) break;
    size_t n_drop = 0;
    VD_CHECK(drop_failed_candidates(r, &n_drop, d));
    if (n_drop && r->verdicts && remember_proven(r) != VD_OK) return VD_OOM(d);
    if (!n_drop) break;
    if (r->infer_rounds >= VD_RUN_MAX_INFER_ROUNDS) {
      candidates_inconclusive(r);
      break;
    }
    /* SOUNDNESS: the next round re-cuts without the dropped candidates:
     * every stage that took one as a hypothesis grows past it. */
    r->n_dropped += n_drop;
    reset_round(r, n_graph_issues, n_graph_dropped);
  }
  return rc;
}
