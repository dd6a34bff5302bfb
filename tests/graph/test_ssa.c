/*
 * tests/graph/test_ssa.c - SSA construction: versions, initial values,
 * collective and send/recv merging, replica expansion, every issue kind with
 * the names it must carry, and allocation-failure injection.
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
#include "../support/plan_builders.h"
#include "../support/fault.h"
#include "../support/graph_build.h"

static uint32_t T(const vd_plan_t *p, const char *name) {
  int64_t t = pb_find_tensor(p, name);
  assert_true(t >= 0);
  return (uint32_t)t;
}

static uint32_t N(const vd_plan_t *p, const char *name) {
  int64_t n = pb_find_node(p, name);
  assert_true(n >= 0);
  return (uint32_t)n;
}

/* The graph node whose participants (or own pnode) include plan node pn run in
 * replica d, microbatch mb. */
static const vd_gnode_t *gnode_of(const vd_graph_t *g, uint32_t pn, int32_t d, int32_t mb) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const vd_gnode_t *n = &g->nodes[i];
    if (n->mb != mb) continue;
    if (n->n_part == 0) {
      if (n->pnode == pn && n->replica == d) return n;
      continue;
    }
    for (uint32_t k = 0; k < n->n_part; k++)
      if (g->idx[n->part_off + 2 * k] == pn && (int32_t)g->idx[n->part_off + 2 * k + 1] == d) return n;
  }
  return NULL;
}

static uint32_t gidx(const vd_graph_t *g, const vd_gnode_t *n) { return (uint32_t)(n - g->nodes); }

/* The one graph node (replica 0, mb 0) that merges plan nodes a and b, in
 * that participant order and named by a: asserted, then returned. */
static const vd_gnode_t *merged_pair(const vd_graph_t *g, uint32_t a, uint32_t b) {
  const vd_gnode_t *n = gnode_of(g, a, 0, 0);
  assert_non_null(n);
  assert_ptr_equal(n, gnode_of(g, b, 0, 0));
  assert_int_equal(n->pnode, a);
  assert_int_equal(n->n_part, 2);
  assert_int_equal(g->idx[n->part_off], a);
  assert_int_equal(g->idx[n->part_off + 2], b);
  return n;
}

/* ---- builders ---------------------------------------------------------- */

static void test_builders_validate(void **state) {
  for (size_t i = 0; i < pb_n_ready_plans; i++) {
    vd_plan_t p;
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(pb_ready_plans[i](&p), VD_OK);
    gb_assert_ok(vd_plan_validate(&p, "builder", &d), &d, "vd_plan_validate");
    vd_plan_free(&p);
  }
}

/* ---- values and versions ------------------------------------------------ */

static void test_initial_weights_and_update(void **state) {
  vd_plan_t p;
  vd_graph_t g;
  gb_plan_graph(pb_plan_linear2, 0, &p, &g);
  assert_int_equal(g.n_nodes, p.n_nodes);
  assert_int_equal(g.replicas, 1);

  uint32_t w1 = T(&p, "w1");
  int32_t f = vd_graph_first(&g, w1, 0, -1), l = vd_graph_last(&g, w1, 0, -1);
  assert_true(f >= 0 && l >= 0 && f != l);
  const vd_value_t *v0 = &g.values[f], *v1 = &g.values[l];
  assert_int_equal(v0->version, 0);
  assert_int_equal(v0->producer, -1);
  assert_int_equal(v0->is_initial, 1);
  assert_int_equal(v0->is_final, 0);
  assert_int_equal(v0->mb, -1);
  /* v0 feeds l1 (fwd) and l1.bwd. */
  assert_int_equal(v0->n_cons, 3); /* l1, l1.bwd, opt.w1 */
  assert_int_equal(v1->version, 1);
  assert_int_equal(v1->is_initial, 0);
  assert_int_equal(v1->is_final, 1);
  assert_int_equal(g.nodes[v1->producer].pnode, N(&p, "opt.w1"));
  assert_int_equal(v1->n_cons, 0);

  /* x is per-microbatch: instance mb 0 exists, initial. */
  int32_t x = vd_graph_first(&g, T(&p, "x"), 0, 0);
  assert_true(x >= 0);
  assert_int_equal(g.values[x].is_initial, 1);
  assert_int_equal(g.values[x].mb, 0);
  assert_int_equal(vd_graph_first(&g, T(&p, "x"), 0, 1), -1); /* out of range */
  assert_int_equal(vd_graph_first(&g, T(&p, "x"), 1, 0), -1); /* replica not built */

  /* h: produced by l1, consumed by l2 and l2.bwd, in that order. */
  int32_t h = vd_graph_first(&g, T(&p, "h"), 0, 0);
  assert_int_equal(h, vd_graph_last(&g, T(&p, "h"), 0, 0));
  const vd_value_t *hv = &g.values[h];
  assert_int_equal(g.nodes[hv->producer].pnode, N(&p, "l1"));
  assert_int_equal(hv->n_cons, 2);
  assert_int_equal(g.nodes[vd_value_consumers(&g, hv)[0]].pnode, N(&p, "l2"));
  assert_int_equal(g.nodes[vd_value_consumers(&g, hv)[1]].pnode, N(&p, "l2.bwd"));
  assert_int_equal(hv->is_final, 1);

  /* Every plain node's operands are the plan node's tensors. */
  for (size_t i = 0; i < g.n_nodes; i++) {
    const vd_gnode_t *n = &g.nodes[i];
    const vd_node_t *pn = &p.nodes[n->pnode];
    assert_int_equal(n->n_in, pn->n_in);
    assert_int_equal(n->n_out, pn->n_out);
    assert_int_equal(n->n_part, 0);
    for (uint32_t k = 0; k < n->n_in; k++)
      assert_int_equal(g.values[vd_gnode_inputs(&g, n)[k]].tensor, vd_node_inputs(&p, pn)[k]);
    for (uint32_t k = 0; k < n->n_out; k++) {
      const vd_value_t *ov = &g.values[vd_gnode_outputs(&g, n)[k]];
      assert_int_equal(ov->tensor, vd_node_outputs(&p, pn)[k]);
      assert_int_equal(ov->producer, (int32_t)i);
    }
  }
  vd_graph_free(&g);
  vd_graph_free(&g); /* idempotent on a zeroed graph */
  vd_plan_free(&p);
}

static void test_gradient_accumulation_versions(void **state) {
  vd_plan_t p;
  vd_graph_t g;
  gb_plan_graph(pb_plan_mb2_accum, 0, &p, &g);
  uint32_t ga = T(&p, "w.grad");
  int32_t f = vd_graph_first(&g, ga, 0, -1), l = vd_graph_last(&g, ga, 0, -1);
  assert_true(f >= 0 && l >= 0 && f != l);
  const vd_value_t *v0 = &g.values[f], *v1 = &g.values[l];
  assert_int_equal(v0->version, 0);
  assert_int_equal(v0->is_initial, 0);
  assert_int_equal(v0->is_final, 0);
  assert_int_equal(g.nodes[v0->producer].pnode, N(&p, "fc.bwd0"));
  assert_int_equal(g.nodes[v0->producer].mb, 0);
  assert_int_equal(v1->version, 1);
  assert_int_equal(v1->is_final, 1);
  const vd_gnode_t *acc = &g.nodes[v1->producer];
  assert_int_equal(acc->pnode, N(&p, "fc.acc"));
  assert_int_equal(acc->mb, 1);
  assert_int_equal(vd_gnode_inputs(&g, acc)[0], (uint32_t)f); /* reads v0 */
  assert_int_equal(v0->n_cons, 1);
  assert_int_equal(vd_value_consumers(&g, v0)[0], gidx(&g, acc));
  assert_int_equal(v1->n_cons, 1);
  assert_int_equal(g.nodes[vd_value_consumers(&g, v1)[0]].pnode, N(&p, "opt.w"));
  /* Only two versions of w.grad exist, and exactly one is final. */
  int count = 0, finals = 0;
  for (size_t v = 0; v < g.n_values; v++)
    if (g.values[v].tensor == ga) {
      count++;
      finals += g.values[v].is_final;
    }
  assert_int_equal(count, 2);
  assert_int_equal(finals, 1);
  /* x has one initial instance per microbatch; fc ran twice. */
  assert_true(vd_graph_first(&g, T(&p, "x"), 0, 0) >= 0);
  assert_true(vd_graph_first(&g, T(&p, "x"), 0, 1) >= 0);
  assert_non_null(gnode_of(&g, N(&p, "fc"), 0, 0));
  assert_non_null(gnode_of(&g, N(&p, "fc"), 0, 1));
  /* w: initial v0 read by both microbatches, then v1 by the optimizer. */
  const vd_value_t *w0 = &g.values[vd_graph_first(&g, T(&p, "w"), 0, -1)];
  assert_int_equal(w0->is_initial, 1);
  assert_int_equal(w0->n_cons, 5); /* fc x2, fc.bwd0, fc.bwd, opt.w */
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* ---- collectives --------------------------------------------------------- */

static void test_allreduce_merged(void **state) {
  vd_plan_t p;
  vd_graph_t g;
  gb_plan_graph(pb_plan_tp2, 0, &p, &g);
  assert_int_equal(g.n_nodes, p.n_nodes - 2); /* two all_reduces merge pairwise */
  uint32_t a0 = N(&p, "r0.l2.ar"), a1 = N(&p, "r1.l2.ar");
  const vd_gnode_t *n = merged_pair(&g, a0, a1);
  assert_int_equal(g.idx[n->part_off + 1], 0); /* both participants in replica 0 */
  assert_int_equal(g.idx[n->part_off + 3], 0);
  assert_int_equal(n->n_in, 2);
  assert_int_equal(n->n_out, 2);
  assert_int_equal(vd_gnode_inputs(&g, n)[0], (uint32_t)vd_graph_last(&g, T(&p, "r0.y_partial"), 0, 0));
  assert_int_equal(vd_gnode_inputs(&g, n)[1], (uint32_t)vd_graph_last(&g, T(&p, "r1.y_partial"), 0, 0));
  assert_int_equal(vd_gnode_outputs(&g, n)[0], (uint32_t)vd_graph_first(&g, T(&p, "r0.y"), 0, 0));
  assert_int_equal(vd_gnode_outputs(&g, n)[1], (uint32_t)vd_graph_first(&g, T(&p, "r1.y"), 0, 0));
  int32_t y1 = vd_graph_first(&g, T(&p, "r1.y"), 0, 0);
  assert_int_equal(g.values[y1].producer, (int32_t)gidx(&g, n));
  /* the partial sums are consumed by the merged node only */
  const vd_value_t *yp1 = &g.values[vd_graph_last(&g, T(&p, "r1.y_partial"), 0, 0)];
  assert_int_equal(yp1->n_cons, 1);
  assert_int_equal(vd_value_consumers(&g, yp1)[0], gidx(&g, n));
  vd_graph_free(&g);
  vd_plan_free(&p);
}

static void test_send_recv_merged(void **state) {
  vd_plan_t p;
  vd_graph_t g;
  gb_plan_graph(pb_plan_pp2, 0, &p, &g);
  assert_int_equal(g.n_nodes, p.n_nodes - 2);
  uint32_t s = N(&p, "r0.h.send"), r = N(&p, "r1.h.recv");
  const vd_gnode_t *n = merged_pair(&g, s, r);
  assert_int_equal(n->n_in, 1);
  assert_int_equal(n->n_out, 1);
  assert_int_equal(vd_gnode_inputs(&g, n)[0], (uint32_t)vd_graph_last(&g, T(&p, "r0.h"), 0, 0));
  assert_int_equal(vd_gnode_outputs(&g, n)[0], (uint32_t)vd_graph_first(&g, T(&p, "r1.h"), 0, 0));
  /* the backward move goes the other way: its first participant is rank 1's send */
  const vd_gnode_t *b = merged_pair(&g, N(&p, "r1.gh.send"), N(&p, "r0.gh.recv"));
  assert_int_equal(vd_gnode_outputs(&g, b)[0], (uint32_t)vd_graph_first(&g, T(&p, "r0.gh"), 0, 0));
  vd_graph_free(&g);
  vd_plan_free(&p);
}

static void test_span_replicas(void **state) {
  vd_plan_t p;
  vd_graph_t g;
  assert_int_equal(pb_plan_dp2(&p), VD_OK);
  uint32_t ar = N(&p, "dp.ar");

  gb_build_ok(&p, 1, &g);
  assert_int_equal(g.replicas, 2);
  assert_int_equal(g.n_nodes, 2 * p.n_nodes - 1);
  const vd_gnode_t *n = gnode_of(&g, ar, 0, -1);
  assert_non_null(n);
  assert_ptr_equal(n, gnode_of(&g, ar, 1, -1));
  assert_int_equal(n->n_part, 2);
  assert_int_equal(g.idx[n->part_off + 1], 0);
  assert_int_equal(g.idx[n->part_off + 3], 1); /* replica-major group order */
  uint32_t gw = T(&p, "w.grad"), gr = T(&p, "w.grad_red");
  assert_int_equal(vd_gnode_inputs(&g, n)[0], (uint32_t)vd_graph_last(&g, gw, 0, -1));
  assert_int_equal(vd_gnode_inputs(&g, n)[1], (uint32_t)vd_graph_last(&g, gw, 1, -1));
  assert_int_equal(vd_gnode_outputs(&g, n)[0], (uint32_t)vd_graph_first(&g, gr, 0, -1));
  assert_int_equal(vd_gnode_outputs(&g, n)[1], (uint32_t)vd_graph_first(&g, gr, 1, -1));
  assert_int_equal(g.values[vd_graph_first(&g, gr, 1, -1)].replica, 1);
  /* each replica's weight has its own versions */
  int32_t w1 = vd_graph_last(&g, T(&p, "w"), 1, -1);
  assert_int_equal(g.values[w1].version, 1);
  assert_int_equal(g.values[w1].replica, 1);
  assert_int_equal(g.nodes[g.values[w1].producer].replica, 1);
  vd_graph_free(&g);

  gb_build_ok(&p, 0, &g); /* replica 0 only: a one-participant node, no issue */
  assert_int_equal(g.replicas, 1);
  assert_int_equal(g.n_nodes, p.n_nodes);
  n = gnode_of(&g, ar, 0, -1);
  assert_non_null(n);
  assert_int_equal(n->n_part, 1);
  assert_int_equal(n->n_in, 1);
  assert_int_equal(vd_graph_first(&g, gw, 1, -1), -1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* ---- issues -------------------------------------------------------------- */

/* tp2 without rank 1's forward all_reduce (as if removed): r1.y is read by
 * r1.loss but nothing writes it, and the all_reduce misses a participant. */
static void test_unproduced(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd");
  for (int32_t r = 0; r < 2; r++) {
    uint32_t x = pb_rank_tensor(&c, "x", r, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 2, 4, 8);
    uint32_t yp = pb_rank_tensor(&c, "yp", r, VD_ROLE_ACT, VD_SCOPE_PER_MB, 2, 4, 8);
    uint32_t y = pb_rank_tensor(&c, "y", r, VD_ROLE_ACT, VD_SCOPE_PER_MB, 2, 4, 8);
    uint32_t l = pb_rank_tensor(&c, "l", r, VD_ROLE_LOSS, VD_SCOPE_PER_MB, 0, 0, 0);
    pb_node(&c, "identity", r ? "r1.id" : "r0.id", r, fwd, VD_PHASE_FWD, PB_T(x), PB_T(yp));
    if (r == 0) pb_coll(&c, "all_reduce", "r0.ar", 0, fwd, PB_T(yp), PB_T(y), 7, PB_G(0, 1), 0);
    pb_node(&c, "sum", r ? "r1.sum" : "r0.sum", r, fwd, VD_PHASE_FWD, PB_T(y), PB_T(l));
  }
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 1, fwd, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_bad(&p, &g, &d);
  assert_int_equal(g.n_issues, 2);
  const vd_graph_issue *is = &g.issues[0]; /* UNPRODUCED sorts first */
  assert_int_equal(is->kind, VD_GISSUE_UNPRODUCED);
  assert_int_equal(is->tensor, T(&p, "r1.y"));
  assert_int_equal(is->pnode, N(&p, "r1.sum"));
  assert_int_equal(is->replica, 0);
  assert_int_equal(is->mb, 0);
  assert_string_equal(is->field, "in[0]");
  assert_non_null(strstr(is->detail, "'r1.y'"));
  assert_non_null(strstr(is->detail, "sum 'r1.sum'"));
  assert_non_null(strstr(is->detail, "rank 1"));
  assert_non_null(strstr(is->detail, "mb 0"));
  /* diag: the first issue, with record and field */
  assert_int_equal(d.rc, VD_EINPUT);
  char rec[64];
  snprintf(rec, sizeof(rec), "node %lld 'r1.sum' (rank 1, mb 0)", (long long)p.nodes[N(&p, "r1.sum")].id);
  assert_string_equal(d.record, rec);
  assert_string_equal(d.field, "in[0]");
  assert_non_null(strstr(d.msg, "unproduced"));
  /* the orphan all_reduce is reported too */
  assert_int_equal(g.issues[1].kind, VD_GISSUE_COLL_MISMATCH);
  assert_int_equal(g.issues[1].pnode, N(&p, "r0.ar"));
  assert_non_null(strstr(g.issues[1].detail, "no participant on rank 1"));
  /* the graph is complete: r1.sum has an input value (a placeholder) */
  const vd_gnode_t *s = gnode_of(&g, N(&p, "r1.sum"), 0, 0);
  assert_non_null(s);
  assert_int_equal(s->n_in, 1);
  const vd_value_t *ph = &g.values[vd_gnode_inputs(&g, s)[0]];
  assert_int_equal(ph->producer, -1);
  assert_int_equal(ph->is_initial, 0);
  assert_int_equal(vd_graph_first(&g, T(&p, "r1.y"), 0, 0), -1);
  assert_non_null(g.topo);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

static void test_read_early(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 2);
  int32_t a = pb_segment(&c, "a"), b = pb_segment(&c, "b");
  uint32_t h;
  pb_use_make(&c, a, b, NULL, &h, NULL);
  pb_step(&c, 0, b, 0); /* mb 0: right order */
  pb_step(&c, 0, a, 0);
  pb_step(&c, 0, a, 1); /* mb 1: consumer first */
  pb_step(&c, 0, b, 1);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  const vd_graph_issue *is = gb_build_one_issue(&p, &g, &d, VD_GISSUE_READ_EARLY);
  assert_int_equal(is->tensor, h);
  assert_int_equal(is->pnode, N(&p, "use"));
  assert_int_equal(is->mb, 1);
  assert_string_equal(is->field, "in[0]");
  assert_non_null(strstr(is->detail, "'h'"));
  assert_non_null(strstr(is->detail, "neg 'use'"));
  assert_non_null(strstr(is->detail, "mb 1"));
  assert_non_null(strstr(d.msg, "read_early"));
  assert_non_null(strstr(d.record, "'use' (rank 0, mb 1)"));
  /* mb 1's h is still produced (version 0) by make */
  int32_t h1 = vd_graph_first(&g, h, 0, 1);
  assert_true(h1 >= 0);
  assert_int_equal(g.values[h1].version, 0);
  assert_int_equal(g.nodes[g.values[h1].producer].pnode, N(&p, "make"));
  vd_graph_free(&g);
  vd_plan_free(&p);
}

static void test_double_write(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t s = pb_segment(&c, "bwd");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t gw = pb_tensor(&c, "w.grad", 0, VD_ROLE_GRAD, VD_SCOPE_PERSISTENT, 1, 4, 0);
  pb_node(&c, "identity", "first", 0, s, VD_PHASE_BWD, PB_T(x), PB_T(gw));
  pb_node(&c, "neg", "second", 0, s, VD_PHASE_BWD, PB_T(x), PB_T(gw));
  pb_step(&c, 0, s, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  const vd_graph_issue *is = gb_build_one_issue(&p, &g, &d, VD_GISSUE_DOUBLE_WRITE);
  assert_int_equal(is->tensor, gw);
  assert_int_equal(is->pnode, N(&p, "second"));
  assert_string_equal(is->field, "out[0]");
  assert_non_null(strstr(is->detail, "'w.grad'"));
  assert_non_null(strstr(is->detail, "neg 'second'"));
  assert_non_null(strstr(is->detail, "identity 'first'"));
  assert_string_equal(d.field, "out[0]");
  /* the graph still has both versions */
  int32_t l = vd_graph_last(&g, gw, 0, -1);
  assert_int_equal(g.values[l].version, 1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Rank 1 runs its forward segment only for microbatch 0; the all_reduce of
 * microbatch 1 misses rank 1's participant. */
static void test_coll_missing_participant(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 2);
  int32_t fwd = pb_segment(&c, "fwd");
  uint32_t x[2], y[2];
  pb_rank_xy(&c, 2, 1, 4, 0, x, y);
  for (int32_t r = 0; r < 2; r++)
    pb_coll(&c, "all_reduce", r ? "r1.ar" : "r0.ar", r, fwd, PB_T(x[r]), PB_T(y[r]), 3, PB_G(0, 1), 0);
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 0, fwd, 1);
  pb_step(&c, 1, fwd, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_validate(&p, "t", &d), VD_OK); /* statically fine */
  vd_graph_t g;
  const vd_graph_issue *is = gb_build_one_issue(&p, &g, &d, VD_GISSUE_COLL_MISMATCH);
  assert_int_equal(is->pnode, N(&p, "r0.ar"));
  assert_int_equal(is->mb, 1);
  assert_non_null(strstr(is->detail, "coll 3 (mb 1"));
  assert_non_null(strstr(is->detail, "no participant on rank 1"));
  assert_non_null(strstr(d.msg, "coll_mismatch"));
  /* mb 0 merged fine; mb 1 is a one-participant node */
  const vd_gnode_t *n0 = gnode_of(&g, N(&p, "r0.ar"), 0, 0), *n1 = gnode_of(&g, N(&p, "r0.ar"), 0, 1);
  assert_int_equal(n0->n_part, 2);
  assert_int_equal(n1->n_part, 1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Participants that disagree in op and an extra participant. */
static void test_coll_inconsistent(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd");
  uint32_t x[2], y[2];
  pb_rank_xy(&c, 2, 1, 4, 0, x, y);
  uint32_t z0 = pb_tensor(&c, "r0.z", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  pb_coll(&c, "all_reduce", "r0.ar", 0, fwd, PB_T(x[0]), PB_T(y[0]), 3, PB_G(0, 1), 0);
  pb_coll(&c, "all_reduce", "r0.ar.again", 0, fwd, PB_T(x[0]), PB_T(z0), 3, PB_G(0, 1), 0);
  pb_coll(&c, "all_gather", "r1.ag", 1, fwd, PB_T(x[1]), PB_T(y[1]), 3, PB_G(0, 1), 0);
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 1, fwd, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_bad(&p, &g, &d);
  assert_int_equal(g.n_issues, 2);
  int extra = 0, op = 0;
  for (size_t i = 0; i < g.n_issues; i++) {
    assert_int_equal(g.issues[i].kind, VD_GISSUE_COLL_MISMATCH);
    if (strstr(g.issues[i].detail, "extra participant all_reduce 'r0.ar.again'")) extra++;
    if (strstr(g.issues[i].detail, "all_gather 'r1.ag' on rank 1 disagrees in op")) op++;
  }
  assert_int_equal(extra, 1);
  assert_int_equal(op, 1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Cause 3 of issue 11: members of one collective that disagree in an
 * attribute (reduce=max on one all_reduce member, another split dim on one
 * all_to_all member) are a COLL_MISMATCH naming the member's rank, the
 * attribute and both values, whichever member is the odd one. */
static void coll_attr_plan(vd_plan_t *p, const char *op, int odd, int absent) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd");
  uint32_t x[2], y[2];
  pb_rank_xy(&c, 2, 2, 4, 4, x, y);
  for (int r = 0; r < 2; r++) {
    char n[16];
    snprintf(n, sizeof(n), "r%d.c", r);
    uint32_t k = pb_coll(&c, op, n, r, fwd, PB_T(x[r]), PB_T(y[r]), 5, PB_G(0, 1), 0);
    if (c.rc != VD_OK) break;
    if (strcmp(op, "all_reduce") == 0) {
      if (!(absent && r != odd)) c.rc = vd_plan_attr_str(p, k, "reduce", r == odd ? "max" : "sum");
    } else {
      c.rc = vd_plan_attr_int(p, k, "split_dim", r == odd ? 1 : 0);
      if (c.rc == VD_OK) c.rc = vd_plan_attr_int(p, k, "concat_dim", 0);
    }
  }
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 1, fwd, 0);
  assert_int_equal(c.rc, VD_OK);
}

static void test_coll_attr_mismatch(void **state) {
  static const struct {
    const char *op;
    int absent;
    const char *want[2]; /* detail fragments for odd member 0 and 1 */
  } cases[] = {
      {"all_reduce", 0,
       {"all_reduce 'r1.c' on rank 1 (group position 1) has attrs.reduce = \"sum\", but all_reduce 'r0.c' on rank 0 (group position 0) has \"max\"",
        "all_reduce 'r1.c' on rank 1 (group position 1) has attrs.reduce = \"max\", but all_reduce 'r0.c' on rank 0 (group position 0) has \"sum\""}},
      {"all_reduce", 1,
       {"has attrs.reduce = <absent>, but all_reduce 'r0.c' on rank 0 (group position 0) has \"max\"",
        "all_reduce 'r1.c' on rank 1 (group position 1) has attrs.reduce = \"max\", but all_reduce 'r0.c' on rank 0 (group position 0) has <absent>"}},
      {"all_to_all", 0,
       {"has attrs.split_dim = 0, but all_to_all 'r0.c' on rank 0 (group position 0) has 1",
        "has attrs.split_dim = 1, but all_to_all 'r0.c' on rank 0 (group position 0) has 0"}},
  };
  (void)state;
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
    for (int odd = 0; odd < 2; odd++) {
      vd_plan_t p;
      coll_attr_plan(&p, cases[k].op, odd, cases[k].absent);
      vd_graph_t g;
      vd_diag d;
      gb_build_one_issue(&p, &g, &d, VD_GISSUE_COLL_MISMATCH);
      assert_true(strncmp(g.issues[0].field, "attrs.", 6) == 0);
      if (!strstr(g.issues[0].detail, cases[k].want[odd])) print_error("detail: %s\n", g.issues[0].detail);
      assert_non_null(strstr(g.issues[0].detail, cases[k].want[odd]));
      vd_graph_free(&g);
      vd_plan_free(&p);
    }
  /* Members that agree are not an issue. */
  vd_plan_t p;
  pb_ctx c;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t fwd = pb_segment(&c, "fwd");
  uint32_t x[2], y[2];
  pb_rank_xy(&c, 2, 1, 4, 0, x, y);
  for (int32_t r = 0; r < 2; r++) {
    uint32_t k = pb_coll(&c, "all_reduce", r ? "b" : "a", r, fwd, PB_T(x[r]), PB_T(y[r]), 3, PB_G(0, 1), 0);
    assert_int_equal(vd_plan_attr_str(&p, k, "reduce", "max"), VD_OK);
  }
  pb_step(&c, 0, fwd, 0);
  pb_step(&c, 1, fwd, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  gb_build_ok(&p, 0, &g);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

static void test_mb_scope(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t s = pb_segment(&c, "opt");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, VD_SCOPE_PERSISTENT, 1, 4, 0);
  pb_node(&c, "neg", "n", 0, s, VD_PHASE_OPT, PB_T(x), PB_T(y));
  pb_step(&c, 0, s, -1);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_one_issue(&p, &g, &d, VD_GISSUE_MB_SCOPE);
  assert_int_equal(g.issues[0].tensor, x);
  assert_string_equal(g.issues[0].field, "in[0]");
  assert_non_null(strstr(g.issues[0].detail, "'x'"));
  assert_true(vd_graph_first(&g, x, 0, 0) >= 0);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Which first reads are initial values: see tensor_initial in graph/ssa.c. */
static void test_initial_rules(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t s = pb_segment(&c, "s");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t seed = pb_tensor(&c, "loss.grad", 0, VD_ROLE_GRAD, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t acc = pb_tensor(&c, "acc", 0, VD_ROLE_GRAD, VD_SCOPE_PERSISTENT, 1, 4, 0);
  uint32_t w = pb_tensor(&c, "w", 0, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, 1, 4, 0);
  uint32_t shard = pb_tensor(&c, "w.shard", 0, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, 1, 4, 0);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t gr = pb_tensor(&c, "gr", 0, VD_ROLE_GRAD, VD_SCOPE_PERSISTENT, 1, 4, 0);
  uint32_t z = pb_tensor(&c, "z", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t zg = pb_node(&c, "scale", "zero_grad", 0, s, VD_PHASE_OPT, PB_T(acc), PB_T(acc)); /* state read first */
  pb_attr_float(&c, zg, "factor", 0.0);
  pb_node(&c, "mul", "fwd", 0, s, VD_PHASE_FWD, PB_T(x, w), PB_T(y));
  pb_node(&c, "accumulate", "acc", 0, s, VD_PHASE_BWD, PB_T(acc, seed), PB_T(acc)); /* seed: unwritten grad */
  pb_node(&c, "identity", "gather", 0, s, VD_PHASE_OPT, PB_T(shard), PB_T(w)); /* overwrite: update */
  pb_node(&c, "neg", "use_gr", 0, s, VD_PHASE_OPT, PB_T(gr), PB_T(z));         /* gr has a plain writer */
  pb_node(&c, "identity", "make_gr", 0, s, VD_PHASE_OPT, PB_T(acc), PB_T(gr));
  pb_step(&c, 0, s, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_one_issue(&p, &g, &d, VD_GISSUE_READ_EARLY); /* only gr */
  assert_int_equal(g.issues[0].tensor, gr);
  assert_int_equal(g.issues[0].pnode, N(&p, "use_gr"));
  const vd_value_t *a0 = &g.values[vd_graph_first(&g, acc, 0, -1)];
  assert_int_equal(a0->is_initial, 1);
  assert_int_equal(g.values[vd_graph_last(&g, acc, 0, -1)].version, 2);
  assert_int_equal(g.values[vd_graph_first(&g, seed, 0, 0)].is_initial, 1);
  const vd_value_t *w1 = &g.values[vd_graph_last(&g, w, 0, -1)];
  assert_int_equal(w1->version, 1);
  assert_int_equal(g.nodes[w1->producer].pnode, N(&p, "gather"));
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Issues come out sorted: kind, then plan node, replica, mb. */
static void test_issue_order(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 3);
  int32_t s = pb_segment(&c, "s");
  uint32_t x;
  pb_use_make(&c, s, s, &x, NULL, NULL);
  uint32_t gw = pb_tensor(&c, "gw", 0, VD_ROLE_GRAD, VD_SCOPE_PERSISTENT, 1, 4, 0);
  pb_node(&c, "neg", "grad", 0, s, VD_PHASE_FWD, PB_T(x), PB_T(gw));
  for (int m = 2; m >= 0; m--) pb_step(&c, 0, s, m);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_bad(&p, &g, &d);
  assert_int_equal(g.n_issues, 5); /* 3 read_early, 2 double_write */
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(g.issues[i].kind, VD_GISSUE_READ_EARLY);
    assert_int_equal(g.issues[i].mb, (int32_t)i);
  }
  assert_int_equal(g.issues[3].kind, VD_GISSUE_DOUBLE_WRITE);
  assert_int_equal(g.issues[3].mb, 0);
  assert_int_equal(g.issues[4].mb, 1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* ---- allocation failures ------------------------------------------------- */

typedef struct {
  const vd_plan_t *p;
  vd_graph_opts o;
  vd_graph_t g;
} fault_ctx;
static vd_rc graph_run(void *ctx, vd_diag *d) {
  fault_ctx *f = ctx;
  return vd_graph_build(f->p, &f->o, &f->g, d);
}
static void graph_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  vd_graph_free(&((fault_ctx *)ctx)->g);
}
static void fault_run(const vd_plan_t *p, int expand, vd_rc want) {
  fault_ctx f = {.p = p, .o = {.expand_replicas = expand}};
  assert_int_equal(tf_fail_each(graph_run, graph_after, &f, 1, NULL), want);
}

static void test_fault_injection(void **state) {
  vd_plan_t p;
  size_t before = vd_mem_current();
  static const struct {
    pb_plan_fn build;
    int expand;
  } plans[] = {{pb_plan_tp2, 0}, {pb_plan_dp2, 1}, {pb_plan_mb2_accum, 0}};
  for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
    assert_int_equal(plans[i].build(&p), VD_OK);
    fault_run(&p, plans[i].expand, VD_OK);
    vd_plan_free(&p);
  }
  /* a plan with issues: the issue array's growth fails too */
  pb_ctx c;
  pb_begin(&c, &p, VD_PLAN_SINGLE, 1, 1, 12);
  int32_t s = pb_segment(&c, "s");
  pb_use_make(&c, s, s, NULL, NULL, NULL);
  for (int m = 0; m < 12; m++) pb_step(&c, 0, s, m);
  assert_int_equal(c.rc, VD_OK);
  fault_run(&p, 0, VD_EINPUT);
  vd_plan_free(&p);
  assert_int_equal(vd_mem_current(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builders_validate),
      cmocka_unit_test(test_initial_weights_and_update),
      cmocka_unit_test(test_gradient_accumulation_versions),
      cmocka_unit_test(test_allreduce_merged),
      cmocka_unit_test(test_send_recv_merged),
      cmocka_unit_test(test_span_replicas),
      cmocka_unit_test(test_unproduced),
      cmocka_unit_test(test_read_early),
      cmocka_unit_test(test_double_write),
      cmocka_unit_test(test_coll_missing_participant),
      cmocka_unit_test(test_coll_inconsistent),
      cmocka_unit_test(test_coll_attr_mismatch),
      cmocka_unit_test(test_mb_scope),
      cmocka_unit_test(test_initial_rules),
      cmocka_unit_test(test_issue_order),
      cmocka_unit_test(test_fault_injection),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
