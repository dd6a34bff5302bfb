/*
 * tests/stages/test_cut.c - stage cutting (stages/cut.c): the stages of the
 * builder's tp2 pair (leaves, single cone, node order), a DP reducer stage
 * with leaves from both virtual replicas, generated pairs without issues,
 * and each structural issue (SHAPE, DATAFLOW, SCHEDULE, ALIGNMENT) with the
 * node, tensor, rank and microbatch it must name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../graph/graph.h"
#include "../../lineage/lineage.h"
#include "../../gen/gen.h"
#include "../../ops/ops.h"
#include "../../stages/stage.h"
#include "../support/plan_builders.h"
#include "../support/fault.h"
#include "../support/pipeline.h"

typedef tp_pair pair_t;

static uint32_t T(const vd_plan_t *p, const char *name) {
  int64_t t = pb_find_tensor(p, name);
  if (t < 0) fail_msg("no tensor '%s'", name);
  return (uint32_t)t;
}

static uint32_t N(const vd_plan_t *p, const char *name) {
  int64_t n = pb_find_node(p, name);
  if (n < 0) fail_msg("no node '%s'", name);
  return (uint32_t)n;
}

static void cut(pair_t *x) {
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(tp_pair_cut(x, &d), VD_OK);
}

static void pair_free(pair_t *x) { tp_pair_free(x); }

static void dump(const vd_stage_set *s) {
  for (size_t i = 0; i < s->n_issues; i++)
    fprintf(stderr, "  issue %s: %s\n", vd_sissue_names[s->issues[i].kind], s->issues[i].detail);
}

static const vd_stage_issue *issue_with(const vd_stage_set *s, vd_sissue_kind k, const char *needle) {
  for (size_t i = 0; i < s->n_issues; i++)
    if (s->issues[i].kind == k && strstr(s->issues[i].detail, needle)) return &s->issues[i];
  dump(s);
  fail_msg("no %s issue with '%s'", vd_sissue_names[k], needle);
  return NULL;
}

static size_t count(const vd_stage_set *s, vd_sissue_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_issues; i++) n += s->issues[i].kind == k;
  return n;
}

static void has(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("'%s' does not contain '%s'", hay, needle);
}

static const char *vname(const pair_t *x, const vd_stage_value *v) {
  const vd_graph_t *g = v->side ? &x->gp : &x->gs;
  return vd_plan_s(g->plan, g->plan->tensors[g->values[v->value].tensor].name);
}

static const char *node_name(const pair_t *x, const vd_stage_node *n) {
  const vd_graph_t *g = n->side ? &x->gp : &x->gs;
  return vd_plan_s(g->plan, g->plan->nodes[g->nodes[n->gnode].pnode].name);
}

/* The stage whose target is single tensor `sname` (final) at slice lo0/lo1. */
static const vd_stage *stage_for(const pair_t *x, const char *sname, int64_t lo0, int64_t lo1, int64_t part_n) {
  for (size_t i = 0; i < x->set.n_stages; i++) {
    const vd_stage *st = &x->set.stages[i];
    const vd_stage_target *tg = &st->targets[0];
    const vd_lineage *L = &x->lt.lins[tg->lineage];
    if (!strcmp(vd_plan_s(&x->s, x->s.tensors[L->stensor].name), sname) && tg->lo[0] == lo0 && tg->lo[1] == lo1 &&
        tg->part_n == part_n)
      return st;
  }
  fail_msg("no stage for %s", sname);
  return NULL;
}

/* Stage invariants: producers before consumers, single nodes first,
 * operand indices in range, leaves and producers consistent. */
static void check_stage(const vd_stage *st) {
  int seen_par = 0;
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *n = &st->nodes[i];
    if (n->side) seen_par = 1;
    else assert_false(seen_par);
    for (uint32_t k = 0; k < n->n_in; k++) {
      uint32_t v = st->idx[n->in_off + k];
      assert_true(v < st->n_vals);
      assert_true(st->vals[v].producer < (int32_t)i);
      assert_int_equal(st->vals[v].side, n->side);
    }
    for (uint32_t k = 0; k < n->n_out; k++) assert_int_equal(st->vals[st->idx[n->out_off + k]].producer, (int32_t)i);
  }
  for (uint32_t v = 0; v < st->n_vals; v++) {
    const vd_stage_value *sv = &st->vals[v];
    assert_true(sv->producer < (int32_t)st->n_nodes);
    if (sv->leaf_piece >= 0) {
      assert_int_equal(sv->producer, -1);
      assert_true(sv->hyp_svalue >= 0 && (uint32_t)sv->hyp_svalue < st->n_vals);
      assert_int_equal(st->vals[sv->hyp_svalue].side, 0);
    }
    assert_memory_equal(sv->shape, sv->rshape, sizeof(sv->shape));
  }
  assert_int_equal(st->reduced, 0);
  assert_int_equal(st->n_targets, 1);
  const vd_stage_target *tg = &st->targets[0];
  assert_int_equal(st->vals[tg->svalue].side, 0);
  for (uint32_t k = 0; k < tg->n_pieces; k++) {
    uint32_t v = st->idx[tg->piece_off + 2 * k + 1];
    assert_int_equal(st->vals[v].side, 1);
    assert_true(st->vals[v].producer >= 0); /* targets are produced */
  }
}

/* ---- correct pairs --------------------------------------------------------- */

static void tp2(pair_t *x) {
  memset(x, 0, sizeof(*x));
  assert_int_equal(pb_plan_linear2(&x->s), VD_OK);
  assert_int_equal(pb_plan_tp2(&x->p), VD_OK);
}

static void test_tp2_linear_stage(void **st_) {
  (void)st_;
  pair_t x;
  tp2(&x);
  cut(&x);
  if (x.set.n_issues) dump(&x.set);
  assert_int_equal(x.set.n_issues, 0);
  assert_int_equal(x.set.n_stages, 18);
  for (size_t i = 0; i < x.set.n_stages; i++) {
    assert_int_equal(x.set.stages[i].id, i);
    check_stage(&x.set.stages[i]);
  }
  /* h[0:4, 0:4] = r0.h = linear(r0.x, r0.w1) */
  const vd_stage *st = stage_for(&x, "h", 0, 0, 1);
  assert_int_equal(st->n_nodes, 2);
  assert_int_equal(st->nodes[0].side, 0);
  assert_string_equal(node_name(&x, &st->nodes[0]), "l1");
  assert_int_equal(st->nodes[0].op, VD_OP_LINEAR);
  assert_int_equal(st->nodes[1].side, 1);
  assert_string_equal(node_name(&x, &st->nodes[1]), "r0.l1");
  assert_int_equal(st->nodes[1].op, VD_OP_LINEAR);
  const vd_stage_target *tg = &st->targets[0];
  assert_int_equal(tg->n_pieces, 1);
  assert_int_equal(tg->hi[1], 4);
  assert_string_equal(vname(&x, &st->vals[tg->svalue]), "h");
  assert_string_equal(vname(&x, &st->vals[st->idx[tg->piece_off + 1]]), "r0.h");
  /* parallel leaves: the initial pieces of r0.x and r0.w1, whose
   * hypotheses refer to the single leaves x and w1 */
  int n_leaf = 0;
  for (uint32_t v = 0; v < st->n_vals; v++) {
    const vd_stage_value *sv = &st->vals[v];
    if (!sv->side || sv->producer >= 0) continue;
    n_leaf++;
    assert_true(sv->leaf_piece >= 0);
    const vd_lin_piece *p = &x.lt.pieces[sv->leaf_piece];
    assert_int_equal(p->initial, 1);
    const char *nm = vname(&x, sv);
    if (!strcmp(nm, "r0.x")) {
      assert_string_equal(vname(&x, &st->vals[sv->hyp_svalue]), "x");
    } else {
      assert_string_equal(nm, "r0.w1");
      assert_string_equal(vname(&x, &st->vals[sv->hyp_svalue]), "w1");
      assert_int_equal(sv->rlo[0], 0);
      assert_int_equal(sv->rhi[0], 4);
    }
    assert_int_equal(st->vals[sv->hyp_svalue].producer, -1);
  }
  assert_int_equal(n_leaf, 2);
  /* y = all_reduce(y_partial): the collective is the only node, its leaves
   * are both ranks' partial parts, the single side is y itself */
  st = stage_for(&x, "y", 0, 0, 1);
  assert_int_equal(st->n_nodes, 1);
  assert_int_equal(st->nodes[0].op, VD_OP_ALL_REDUCE);
  assert_int_equal(st->nodes[0].n_in, 2);
  assert_int_equal(st->nodes[0].n_out, 2);
  assert_int_equal(st->targets[0].n_pieces, 2);
  int parts = 0;
  for (uint32_t v = 0; v < st->n_vals; v++)
    if (st->vals[v].side && st->vals[v].producer < 0) parts |= 1 << x.lt.pieces[st->vals[v].leaf_piece].part_k;
  assert_int_equal(parts, 3);
  pair_free(&x);
}

static void test_deterministic(void **st_) {
  (void)st_;
  pair_t a, b;
  tp2(&a);
  tp2(&b);
  cut(&a);
  cut(&b);
  assert_int_equal(a.set.n_stages, b.set.n_stages);
  for (size_t i = 0; i < a.set.n_stages; i++) {
    const vd_stage *x = &a.set.stages[i], *y = &b.set.stages[i];
    assert_int_equal(x->n_vals, y->n_vals);
    assert_int_equal(x->n_idx, y->n_idx);
    assert_memory_equal(x->idx, y->idx, x->n_idx * sizeof(*x->idx));
    assert_memory_equal(x->nodes, y->nodes, x->n_nodes * sizeof(*x->nodes));
  }
  pair_free(&a);
  pair_free(&b);
}

static void test_gen_pairs_clean(void **st_) {
  (void)st_;
  static const int cfg[][6] = {
      {VD_GEN_MLP, 2, 2, 2, 2, 0}, {VD_GEN_LLAMA3, 2, 2, 2, 2, 0}, {VD_GEN_LLAMA3, 2, 2, 1, 2, 1},
      {VD_GEN_MOE, 2, 1, 2, 2, 0}};
  for (size_t i = 0; i < sizeof(cfg) / sizeof(cfg[0]); i++) {
    pair_t x;
    memset(&x, 0, sizeof(x));
    vd_gen_config c;
    vd_gen_config_default(&c);
    c.model = (vd_gen_model)cfg[i][0];
    c.layers = 2;
    c.dp = cfg[i][1], c.tp = cfg[i][2], c.pp = cfg[i][3], c.nm = cfg[i][4], c.zero = cfg[i][5];
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(vd_gen_build(&c, &x.s, &x.p, &d), VD_OK);
    cut(&x);
    if (x.set.n_issues) dump(&x.set);
    assert_int_equal(x.set.n_issues, 0);
    assert_true(x.set.n_stages > 0);
    size_t n_targets = 0;
    for (size_t li = 0; li < x.lt.n_lins; li++) {
      const vd_lineage *L = &x.lt.lins[li];
      if (L->initial) continue;
      for (uint32_t k = 0; k < L->n_pieces; k++) {
        const vd_lin_piece *p = &x.lt.pieces[L->piece_off + k], *q = k ? p - 1 : NULL;
        int32_t nd = x.s.tensors[L->stensor].ndim;
        if (!q || q->part_n != p->part_n || memcmp(q->lo, p->lo, (size_t)nd * 8) || memcmp(q->hi, p->hi, (size_t)nd * 8))
          /* a group of pieces that move with the replica is one target per replica */
          n_targets += vd_lin_piece_moves(&x.lt, L->piece_off + k) ? (size_t)x.p.world.replicas : 1;
      }
    }
    /* every target is proven once: by its own stage, or by replica 0's stage
     * standing for all replicas (n_rep), or by microbatch m0's stage standing
     * for the same group in other microbatches (n_mb) */
    /* A sum by part stands for n_rep x n_mb of its group's parts; the
     * group's stages together stand for every part once, and the group is
     * one target. */
    size_t represented = 0, n_mb_stages = 0, parts = 0, parts_needed = 0;
    for (size_t s = 0; s < x.set.n_stages; s++) {
      const vd_stage *st = &x.set.stages[s];
      if (st->sum_parts) {
        assert_int_equal(st->targets[0].part_n, 1);
        parts += (size_t)st->n_rep * st->n_mb;
        int first = 1;
        for (size_t q = 0; q < s; q++)
          if (x.set.stages[q].sum_parts && x.set.stages[q].cut_lin == st->cut_lin && x.set.stages[q].cut_a == st->cut_a)
            first = 0;
        if (first) {
          parts_needed += (size_t)st->sum_parts;
          represented++;
        }
        n_mb_stages += st->n_mb > 1;
        continue;
      }
      represented += (vd_lin_piece_moves(&x.lt, st->idx[st->targets[0].piece_off]) ? st->n_rep : 1) * st->n_mb;
      assert_true(st->n_mb >= 1 && st->n_mb <= (uint32_t)x.p.world.nm);
      n_mb_stages += st->n_mb > 1;
    }
    /* nm 2: the per-microbatch activations' stages are cut once */
    assert_true(n_mb_stages > 0);
    assert_int_equal(represented, n_targets);
    assert_int_equal(parts, parts_needed);
    for (size_t s = 0; s < x.set.n_stages; s++) check_stage(&x.set.stages[s]);
    pair_free(&x);
  }
}

/* ---- DP: one layer, replicas virtual ----------------------------------------- */

/* Annotation with a DP shift along dim 0 and a DP part step. */
static void ann(vd_plan_t *p, const char *name, int64_t full, int64_t hi0, int64_t hi1, int64_t n, int64_t dps,
                int64_t dpp) {
  pb_ctx c = {p, VD_OK};
  uint32_t t = T(p, name);
  pb_lin(&c, t, full, 0, hi0, 0, hi1, 0, n);
  assert_int_equal(c.rc, VD_OK);
  p->tensors[t].lin.dp_shift[0] = dps;
  p->tensors[t].lin.dp_part = dpp;
}

static void dp2(pair_t *x) {
  memset(x, 0, sizeof(*x));
  assert_int_equal(pb_plan_linear1(&x->s), VD_OK);
  assert_int_equal(pb_plan_dp2(&x->p), VD_OK);
  ann(&x->p, "x", 1, 2, 8, 1, 2, 0);
  ann(&x->p, "w", 2, 8, 8, 1, 0, 0);
  ann(&x->p, "y", 3, 2, 8, 1, 2, 0);
  ann(&x->p, "loss", 4, 0, 0, 2, 0, 1);
  ann(&x->p, "gloss", 5, 0, 0, 1, 0, 0);
  ann(&x->p, "gy", 6, 2, 8, 1, 2, 0);
  ann(&x->p, "gx", 7, 2, 8, 1, 2, 0);
  ann(&x->p, "w.grad", 8, 8, 8, 2, 0, 1);
  ann(&x->p, "w.grad_red", 8, 8, 8, 1, 0, 0);
}

static void test_dp2_reducer_stage(void **st_) {
  (void)st_;
  pair_t x;
  dp2(&x);
  cut(&x);
  if (x.lt.n_issues || x.set.n_issues) dump(&x.set);
  assert_int_equal(x.lt.n_issues, 0);
  assert_int_equal(x.set.n_issues, 0);
  const vd_stage *st = stage_for(&x, "w.grad", 0, 0, 1);
  check_stage(st);
  assert_int_equal(st->n_nodes, 1);
  const vd_stage_node *n = &st->nodes[0];
  assert_string_equal(node_name(&x, n), "dp.ar");
  assert_int_equal(n->op, VD_OP_ALL_REDUCE);
  assert_int_equal(n->n_in, 2); /* replica 0's and replica 1's input */
  assert_int_equal(n->n_out, 2);
  const vd_stage_value *a = &st->vals[st->idx[n->in_off]], *b = &st->vals[st->idx[n->in_off + 1]];
  assert_string_equal(vname(&x, a), "w.grad");
  assert_string_equal(vname(&x, b), "w.grad");
  assert_int_equal(a->replica, 0);
  assert_int_equal(b->replica, 1);
  assert_int_equal(a->value, b->value); /* one Gp value, two virtual replicas */
  assert_int_equal(x.lt.pieces[a->leaf_piece].part_k, 0);
  assert_int_equal(x.lt.pieces[b->leaf_piece].part_k, 1);
  assert_int_equal(x.lt.pieces[b->leaf_piece].part_n, 2);
  assert_int_equal(a->hyp_svalue, b->hyp_svalue);
  assert_string_equal(vname(&x, &st->vals[a->hyp_svalue]), "w.grad");
  /* target: both replicas' reduced gradient */
  assert_int_equal(st->targets[0].n_pieces, 2);
  assert_int_equal(st->n_rep, 1); /* spans replicas: materialized, not a class of replicas */
  /* the per-replica forward: replica 1's rows 2:4 run replica 0's program on
   * the next rows, so replica 0's stage (rows 0:2, windowed) stands for both */
  st = stage_for(&x, "y", 0, 0, 1);
  check_stage(st);
  assert_int_equal(st->n_rep, 2);
  assert_int_equal(st->nodes[st->n_nodes - 1].replica, 0);
  assert_string_equal(node_name(&x, &st->nodes[st->n_nodes - 1]), "fc");
  for (size_t i = 0; i < x.set.n_stages; i++) { /* no separate stage for replica 1's rows */
    const vd_stage_target *tg = &x.set.stages[i].targets[0];
    const vd_lineage *L = &x.lt.lins[tg->lineage];
    if (!strcmp(vd_plan_s(&x.s, x.s.tensors[L->stensor].name), "y")) assert_int_equal(tg->lo[0], 0);
  }
  pair_free(&x);
}

/* ---- structural issues --------------------------------------------------------- */

static void test_shape_issue(void **st_) {
  (void)st_;
  pair_t x;
  tp2(&x);
  uint32_t ag;
  assert_int_equal(vd_plan_str(&x.p, "all_gather", &ag), VD_OK);
  x.p.nodes[N(&x.p, "r0.l2.ar")].op = ag; /* all_reduce turned into all_gather */
  x.p.nodes[N(&x.p, "r1.l2.ar")].op = ag;
  cut(&x);
  assert_int_equal(count(&x.set, VD_SISSUE_SHAPE), 1);
  const vd_stage_issue *is = issue_with(&x.set, VD_SISSUE_SHAPE, "all_gather 'r0.l2.ar'");
  assert_int_equal(is->pnode, N(&x.p, "r0.l2.ar"));
  assert_int_equal(is->rank, 0);
  assert_int_equal(is->mb, 0);
  assert_int_equal(is->single, 0);
  has(is->detail, "outputs[0]");
  has(is->detail, "all_gather 'r0.l2.ar' (node 3, rank 0, mb 0): outputs[0]: expected shape [8,8], got [4,8]");
  pair_free(&x);
}

static void test_dataflow_removed_all_reduce(void **st_) {
  (void)st_;
  pair_t x;
  tp2(&x);
  int32_t unused;
  assert_int_equal(vd_plan_add_segment(&x.p, "unscheduled", &unused), VD_OK);
  x.p.nodes[N(&x.p, "r0.l2.ar")].segment = unused; /* the all_reduce never runs */
  x.p.nodes[N(&x.p, "r1.l2.ar")].segment = unused;
  cut(&x);
  /* The graph reports it, once, with its diagnosis and global rank; the
   * cut does not repeat graph issues (verifier/run.c cuts no stage while
   * the parallel graph has any). */
  const vd_issue *is = NULL, *is1 = NULL;
  for (size_t i = 0; i < x.gp.n_issues; i++) {
    if (strstr(x.gp.issues[i].detail, "tensor 'r0.y' read by sum 'r0.loss'")) is = &x.gp.issues[i];
    if (strstr(x.gp.issues[i].detail, "tensor 'r1.y' read by sum 'r1.loss'")) is1 = &x.gp.issues[i];
  }
  assert_non_null(is);
  assert_non_null(is1);
  assert_int_equal(is->kind, VD_GISSUE_UNPRODUCED);
  assert_string_equal(is->kind_name, "unproduced");
  assert_string_equal(is->source, "graph");
  assert_int_equal(is->diagnosis, VD_DX_DATAFLOW);
  assert_int_equal(is->single, 0);
  assert_int_equal(is->pnode, N(&x.p, "r0.loss"));
  assert_int_equal(is->tensor, T(&x.p, "r0.y"));
  assert_int_equal(is->rank, 0);
  assert_int_equal(is->mb, 0);
  assert_int_equal(is1->rank, 1);
  for (size_t i = 0; i < x.set.n_issues; i++) assert_null(strstr(x.set.issues[i].detail, "read by sum"));
  pair_free(&x);
}

static void test_dataflow_no_lineage(void **st_) {
  (void)st_;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r0.x")].has_lin = 0;
  cut(&x);
  const vd_stage_issue *is =
      issue_with(&x.set, VD_SISSUE_DATAFLOW, "value 'r0.x' (rank 0, mb 0, version 0) feeds target 'h' final slice [0:4, 0:4]");
  has(is->detail, "has no lineage");
  assert_int_equal(is->tensor, T(&x.p, "r0.x"));
  assert_int_equal(is->rank, 0);
  /* reported once even though several targets read r0.x */
  assert_int_equal(count(&x.set, VD_SISSUE_DATAFLOW), 1);
  /* the stage keeps r0.x as a free leaf */
  const vd_stage *st = stage_for(&x, "h", 0, 0, 1);
  int free_leaf = 0;
  for (uint32_t v = 0; v < st->n_vals; v++)
    if (st->vals[v].side && st->vals[v].producer < 0 && st->vals[v].leaf_piece < 0) {
      assert_string_equal(vname(&x, &st->vals[v]), "r0.x");
      assert_int_equal(st->vals[v].hyp_svalue, -1);
      free_leaf++;
    }
  assert_int_equal(free_leaf, 1);
  pair_free(&x);
}

/* One rank, 2 replicas, 2 microbatches; weight gradient accumulated per
 * microbatch and reduced over replicas.  sched: 0 correct, 1 reducer between
 * the microbatches, 2 backward of mb 1 missing. */
static void accum_dp(vd_plan_t *p, int sched) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 1, 2, 2);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd"), red = pb_segment(&c, "reduce"),
          opt = pb_segment(&c, "opt");
#define MB VD_SCOPE_PER_MB
#define PS VD_SCOPE_PERSISTENT
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, MB, 2, 1, 8);
  uint32_t w = pb_tensor(&c, "w", 0, VD_ROLE_WEIGHT, PS, 2, 8, 8);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, MB, 2, 1, 8);
  uint32_t l = pb_tensor(&c, "loss", 0, VD_ROLE_LOSS, MB, 0, 0, 0);
  uint32_t gl = pb_tensor(&c, "gloss", 0, VD_ROLE_INPUT, MB, 0, 0, 0);
  uint32_t gy = pb_tensor(&c, "gy", 0, VD_ROLE_GRAD, MB, 2, 1, 8);
  uint32_t gx = pb_tensor(&c, "gx", 0, VD_ROLE_GRAD, MB, 2, 1, 8);
  uint32_t gmb = pb_tensor(&c, "w.grad_mb", 0, VD_ROLE_GRAD, MB, 2, 8, 8);
  uint32_t gacc = pb_tensor(&c, "w.grad", 0, VD_ROLE_GRAD, PS, 2, 8, 8);
  uint32_t gred = pb_tensor(&c, "w.grad_red", 0, VD_ROLE_GRAD, PS, 2, 8, 8);
#undef MB
#undef PS
  pb_node(&c, "linear", "fc", 0, fwd, VD_PHASE_FWD, PB_T(x, w), PB_T(y));
  pb_node(&c, "sum", "loss", 0, fwd, VD_PHASE_FWD, PB_T(y), PB_T(l));
  pb_node(&c, "sum_backward", "loss.bwd", 0, bwd, VD_PHASE_BWD, PB_T(gl), PB_T(gy));
  pb_node(&c, "linear_backward", "fc.bwd", 0, bwd, VD_PHASE_BWD, PB_T(x, w, gy), PB_T(gx, gmb));
  pb_node(&c, "accumulate", "fc.acc", 0, bwd, VD_PHASE_BWD, PB_T(gacc, gmb), PB_T(gacc));
  pb_coll(&c, "all_reduce", "dp.ar", 0, red, PB_T(gacc), PB_T(gred), 7, PB_G(0), 1);
  pb_sgd(&c, "opt.w", 0, opt, w, gred);
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 0, bwd, 0);
  if (sched == 1) pb_step(&c, 0, red, -1);
  pb_step(&c, 0, fwd, 1);
  if (sched != 2) pb_step(&c, 0, bwd, 1);
  if (sched != 1) pb_step(&c, 0, red, -1);
  pb_step(&c, 0, opt, -1);
  assert_int_equal(c.rc, VD_OK);
}

static void test_schedule(void **st_) {
  (void)st_;
  pair_t x;
  memset(&x, 0, sizeof(x));
  assert_int_equal(pb_plan_linear1(&x.s), VD_OK);
  accum_dp(&x.p, 0);
  cut(&x);
  assert_int_equal(count(&x.set, VD_SISSUE_SCHEDULE), 0);
  assert_int_equal(count(&x.set, VD_SISSUE_ALIGNMENT), 0);
  pair_free(&x);

  memset(&x, 0, sizeof(x));
  assert_int_equal(pb_plan_linear1(&x.s), VD_OK);
  accum_dp(&x.p, 1); /* bwd@0, reduce, bwd@1 */
  cut(&x);
  assert_int_equal(count(&x.set, VD_SISSUE_SCHEDULE), 1);
  const vd_stage_issue *is = issue_with(&x.set, VD_SISSUE_SCHEDULE, "reducer all_reduce 'dp.ar'");
  has(is->detail, "reads 'w.grad' before the contribution of mb 1 arrives");
  has(is->detail, "accumulate 'fc.acc'");
  assert_int_equal(is->pnode, N(&x.p, "dp.ar"));
  assert_int_equal(is->tensor, T(&x.p, "w.grad"));
  assert_int_equal(is->mb, 1);
  assert_int_equal(is->rank, 0);
  assert_int_equal(count(&x.set, VD_SISSUE_ALIGNMENT), 0);
  pair_free(&x);
}

static void test_alignment(void **st_) {
  (void)st_;
  pair_t x;
  memset(&x, 0, sizeof(x));
  assert_int_equal(pb_plan_linear1(&x.s), VD_OK);
  accum_dp(&x.p, 2); /* bwd runs for mb 0 only */
  cut(&x);
  assert_int_equal(count(&x.set, VD_SISSUE_ALIGNMENT), 1);
  const vd_stage_issue *is = issue_with(&x.set, VD_SISSUE_ALIGNMENT, "segment 'bwd' on rank 0");
  has(is->detail, "missing mb 1");
  assert_int_equal(is->rank, 0);
  assert_int_equal(is->mb, 1);
  pair_free(&x);

  /* a duplicated microbatch */
  memset(&x, 0, sizeof(x));
  assert_int_equal(pb_plan_linear1(&x.s), VD_OK);
  accum_dp(&x.p, 0);
  x.p.steps[2].mb = 0; /* fwd@1 becomes a second fwd@0 */
  cut(&x);
  is = issue_with(&x.set, VD_SISSUE_ALIGNMENT, "segment 'fwd' on rank 0");
  has(is->detail, "missing mb 1");
  has(is->detail, "repeated mb 0 (2 times)");
  assert_int_equal(is->mb, 0);
  pair_free(&x);
}

static vd_rc cut_run(void *ctx, vd_diag *d) {
  pair_t *x = ctx;
  return vd_stage_cut(&x->lt, &x->set, d);
}
static void cut_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  pair_t *x = ctx;
  if (hit) assert_int_equal(x->set.n_stages, 0); /* nothing left behind */
  vd_stage_set_free(&x->set);
}

static void test_free_null_and_alloc_failures(void **st_) {
  (void)st_;
  vd_stage_set_free(NULL);
  vd_stage_free(NULL);
  pair_t x;
  dp2(&x);
  cut(&x);
  vd_stage_set_free(&x.set);
  assert_int_equal(tf_fail_each(cut_run, cut_after, &x, 1, NULL), VD_OK);
  pair_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tp2_linear_stage),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_gen_pairs_clean),
      cmocka_unit_test(test_dp2_reducer_stage),
      cmocka_unit_test(test_shape_issue),
      cmocka_unit_test(test_dataflow_removed_all_reduce),
      cmocka_unit_test(test_dataflow_no_lineage),
      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_alignment),
      cmocka_unit_test(test_free_null_and_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
