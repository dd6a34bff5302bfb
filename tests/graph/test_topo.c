/*
 * tests/graph/test_topo.c - topological order and cycle reports.
 *
 * graph/topo.c computes igraph_topological_sorting's order without igraph;
 * test_igraph_order keeps igraph as the reference for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <igraph.h>

#include "../../graph/graph.h"
#include "../../common/mem.h"
#include "../../graph/graph_int.h"
#include "../support/graph_build.h"
#include "../support/plan_builders.h"

/* topo is a permutation and every producer comes before its consumers. */
static void assert_topo_valid(const vd_graph_t *g) {
  size_t n = g->n_nodes;
  uint32_t *pos = malloc((n ? n : 1) * sizeof(*pos));
  assert_non_null(pos);
  for (size_t i = 0; i < n; i++) pos[i] = UINT32_MAX;
  for (size_t i = 0; i < n; i++) {
    assert_true(g->topo[i] < n);
    assert_int_equal(pos[g->topo[i]], UINT32_MAX);
    pos[g->topo[i]] = (uint32_t)i;
  }
  size_t edges = 0;
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *val = &g->values[v];
    if (val->producer < 0) continue;
    for (uint32_t k = 0; k < val->n_cons; k++) {
      assert_true(pos[val->producer] < pos[vd_value_consumers(g, val)[k]]);
      edges++;
    }
  }
  /* consumers lists agree with the nodes' inputs */
  for (size_t i = 0; i < n; i++) {
    const vd_gnode_t *nd = &g->nodes[i];
    for (uint32_t k = 0; k < nd->n_in; k++) {
      const vd_value_t *val = &g->values[vd_gnode_inputs(g, nd)[k]];
      int found = 0;
      for (uint32_t j = 0; j < val->n_cons; j++) found |= vd_value_consumers(g, val)[j] == i;
      assert_true(found);
    }
  }
  free(pos);
}

static void test_builders_ordered(void **state) {
  for (size_t i = 0; i < pb_n_ready_plans; i++)
    for (int expand = 0; expand < 2; expand++) {
      vd_plan_t p;
      vd_graph_t g;
      gb_plan_graph(pb_ready_plans[i], expand, &p, &g);
      assert_topo_valid(&g);
      vd_graph_free(&g);
      vd_plan_free(&p);
    }
}

/* Two ranks run two all_reduces in opposite orders, each feeding the next:
 * a deadlock, i.e. a cycle between the merged nodes. */
static void test_cycle_between_collectives(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t s = pb_segment(&c, "fwd");
  uint32_t x[2], y[2], z[2];
  pb_rank_xy(&c, 2, 1, 4, 0, x, y);
  for (int32_t r = 0; r < 2; r++) z[r] = pb_rank_tensor(&c, "z", r, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  pb_coll(&c, "all_reduce", "r0.A", 0, s, PB_T(x[0]), PB_T(y[0]), 1, PB_G(0, 1), 0);
  pb_coll(&c, "all_reduce", "r0.B", 0, s, PB_T(y[0]), PB_T(z[0]), 2, PB_G(0, 1), 0);
  pb_coll(&c, "all_reduce", "r1.B", 1, s, PB_T(x[1]), PB_T(z[1]), 2, PB_G(0, 1), 0);
  pb_coll(&c, "all_reduce", "r1.A", 1, s, PB_T(z[1]), PB_T(y[1]), 1, PB_G(0, 1), 0);
  pb_step(&c, 0, s, 0);
  pb_step(&c, 1, s, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  const vd_graph_issue *is = gb_build_one_issue(&p, &g, &d, VD_GISSUE_CYCLE);
  assert_int_equal(g.n_nodes, 2);
  /* the node named is one of the two merged collectives (first participant on rank 0) */
  assert_true(is->pnode == pb_find_node(&p, "r0.A") || is->pnode == pb_find_node(&p, "r0.B"));
  assert_non_null(strstr(is->detail, "cycle of 2 nodes"));
  assert_non_null(strstr(is->detail, "'r0.A'"));
  assert_non_null(strstr(is->detail, "'r0.B'"));
  assert_non_null(strstr(d.msg, "cycle"));
  assert_non_null(strstr(d.record, "'r0."));
  /* topo is still a permutation */
  int seen[2] = {0, 0};
  for (size_t i = 0; i < 2; i++) seen[g.topo[i]]++;
  assert_int_equal(seen[0], 1);
  assert_int_equal(seen[1], 1);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* A recv that runs before its own send on the same rank, and the send sends
 * what the recv produced: a self-loop.  Plus an ordinary node after it that
 * is downstream of the cycle but not on it. */
static void test_self_loop(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, 2, 1, 1);
  int32_t s = pb_segment(&c, "fwd");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t a = pb_tensor(&c, "a", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  uint32_t z = pb_tensor(&c, "z", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  pb_node(&c, "neg", "pre", 0, s, VD_PHASE_FWD, PB_T(x), PB_T(a));
  pb_coll(&c, "recv", "loop.recv", 0, s, PB_NONE, PB_T(y), 5, PB_G(0, 0), 0);
  pb_coll(&c, "send", "loop.send", 0, s, PB_T(y), PB_NONE, 5, PB_G(0, 0), 0);
  pb_node(&c, "add", "post", 0, s, VD_PHASE_FWD, PB_T(a, y), PB_T(z));
  pb_step(&c, 0, s, 0);
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  vd_diag d;
  gb_build_one_issue(&p, &g, &d, VD_GISSUE_CYCLE);
  assert_int_equal(g.n_nodes, 3);
  /* the merged node is named by its first participant: the send */
  assert_int_equal(g.issues[0].pnode, pb_find_node(&p, "loop.send"));
  assert_non_null(strstr(g.issues[0].detail, "'loop.send'"));
  assert_non_null(strstr(g.issues[0].detail, "cycle of 1 nodes (2 cannot be ordered)"));
  /* the acyclic prefix comes first: 'pre' */
  assert_int_equal(g.nodes[g.topo[0]].pnode, pb_find_node(&p, "pre"));
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* The pipeline of test_pipeline_order: stages, TP ranks per stage, layers per
 * stage, microbatches. */
enum { PIPE_S = 3, PIPE_TP = 2, PIPE_L = 4, PIPE_M = 4 };

/* test_pipeline_order's rank r = st * PIPE_TP + t: its stage input (received from
 * the previous stage after the first), PIPE_L layers of mul then all_reduce over
 * the stage's TP pair, the send to the next stage, and the backward's
 * gradient chain back to the stage input. */
static void pipeline_rank(pb_ctx *c, int32_t fwd, int32_t bwd, int st, int t) {
  char nm[64];
  int64_t key = 100;
  int32_t r = st * PIPE_TP + t;
  uint32_t cur;
  snprintf(nm, sizeof(nm), "r%d.in", r);
  cur = pb_tensor(c, nm, r, st == 0 ? VD_ROLE_INPUT : VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
  if (st > 0) {
    snprintf(nm, sizeof(nm), "r%d.recv", r);
    pb_coll(c, "recv", nm, r, fwd, PB_NONE, PB_T(cur), 10000 + (st - 1) * PIPE_TP + t, PB_G(r - PIPE_TP, r), 0);
  }
  uint32_t first = cur;
  for (int l = 0; l < PIPE_L; l++) {
    snprintf(nm, sizeof(nm), "r%d.w%d", r, l);
    uint32_t w = pb_tensor(c, nm, r, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, 1, 4, 0);
    snprintf(nm, sizeof(nm), "r%d.p%d", r, l);
    uint32_t part = pb_tensor(c, nm, r, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
    snprintf(nm, sizeof(nm), "r%d.h%d", r, l);
    uint32_t h = pb_tensor(c, nm, r, VD_ROLE_ACT, VD_SCOPE_PER_MB, 1, 4, 0);
    snprintf(nm, sizeof(nm), "r%d.mul%d", r, l);
    pb_node(c, "mul", nm, r, fwd, VD_PHASE_FWD, PB_T(cur, w), PB_T(part));
    snprintf(nm, sizeof(nm), "r%d.ar%d", r, l);
    pb_coll(c, "all_reduce", nm, r, fwd, PB_T(part), PB_T(h), key + st * PIPE_L + l,
            PB_G(st * PIPE_TP, st * PIPE_TP + 1), 0);
    cur = h;
  }
  if (st < PIPE_S - 1) {
    snprintf(nm, sizeof(nm), "r%d.send", r);
    pb_coll(c, "send", nm, r, fwd, PB_T(cur), PB_NONE, 10000 + st * PIPE_TP + t, PB_G(r, r + PIPE_TP), 0);
  }
  /* backward: a gradient chain back to the stage input */
  snprintf(nm, sizeof(nm), "r%d.g", r);
  uint32_t g = pb_tensor(c, nm, r, VD_ROLE_GRAD, VD_SCOPE_PER_MB, 1, 4, 0);
  snprintf(nm, sizeof(nm), "r%d.gacc", r);
  uint32_t gacc = pb_tensor(c, nm, r, VD_ROLE_GRAD, VD_SCOPE_PERSISTENT, 1, 4, 0);
  if (st < PIPE_S - 1) {
    snprintf(nm, sizeof(nm), "r%d.grecv", r);
    pb_coll(c, "recv", nm, r, bwd, PB_NONE, PB_T(g), 20000 + st * PIPE_TP + t, PB_G(r + PIPE_TP, r), 0);
  } else {
    snprintf(nm, sizeof(nm), "r%d.loss_bwd", r);
    pb_node(c, "neg", nm, r, bwd, VD_PHASE_BWD, PB_T(cur), PB_T(g));
  }
  snprintf(nm, sizeof(nm), "r%d.acc", r);
  pb_node(c, "accumulate", nm, r, bwd, VD_PHASE_BWD, PB_T(gacc, g, first), PB_T(gacc));
  if (st > 0) {
    snprintf(nm, sizeof(nm), "r%d.gsend", r);
    pb_coll(c, "send", nm, r, bwd, PB_T(g), PB_NONE, 20000 + (st - 1) * PIPE_TP + t, PB_G(r, r - PIPE_TP), 0);
  }
}

/* A larger pipeline: PIPE_S stages x PIPE_M microbatches, PIPE_L layers per
 * stage, with a TP pair per stage (all_reduce after each layer) and send/recv between
 * stages; 1F1B-like interleaving is approximated by running all forwards
 * then all backwards in reverse microbatch order. */
static void test_pipeline_order(void **state) {
  pb_ctx c;
  vd_plan_t p;
  pb_begin(&c, &p, VD_PLAN_PARALLEL, PIPE_S * PIPE_TP, 1, PIPE_M);
  int32_t fwd = pb_segment(&c, "fwd"), bwd = pb_segment(&c, "bwd");
  char nm[64];
  for (int st = 0; st < PIPE_S; st++)
    for (int t = 0; t < PIPE_TP; t++) pipeline_rank(&c, fwd, bwd, st, t);
  /* gacc is accumulated into, so a once-only 'zero' step writes it first. */
  assert_int_equal(c.rc, VD_OK);
  int32_t zero = pb_segment(&c, "zero");
  for (int r = 0; r < PIPE_S * PIPE_TP; r++) {
    snprintf(nm, sizeof(nm), "r%d.gacc", r);
    uint32_t gacc = (uint32_t)pb_find_tensor(&p, nm);
    snprintf(nm, sizeof(nm), "r%d.zero", r);
    pb_node(&c, "scale", nm, r, zero, VD_PHASE_BWD, PB_NONE, PB_T(gacc));
  }
  for (int r = 0; r < PIPE_S * PIPE_TP; r++) {
    pb_step(&c, r, zero, -1);
    for (int m = 0; m < PIPE_M; m++) pb_step(&c, r, fwd, m);
    for (int m = PIPE_M - 1; m >= 0; m--) pb_step(&c, r, bwd, m);
  }
  assert_int_equal(c.rc, VD_OK);
  vd_graph_t g;
  gb_build_ok(&p, 0, &g);
  /* per rank and mb: PIPE_L mul + PIPE_L ar halves + recv/send halves + bwd nodes; merged pairwise */
  size_t plain = (size_t)PIPE_S * PIPE_TP * (PIPE_L * PIPE_M + 1 + PIPE_M); /* mul, zero, acc */
  plain += (size_t)PIPE_TP * PIPE_M; /* loss_bwd on the last stage */
  size_t merged = (size_t)PIPE_S * PIPE_L * PIPE_M + (size_t)(PIPE_S - 1) * PIPE_TP * PIPE_M * 2;
  assert_int_equal(g.n_nodes, plain + merged);
  assert_topo_valid(&g);
  /* gacc: version 0 from zero, then PIPE_M accumulations */
  int32_t last = vd_graph_last(&g, (uint32_t)pb_find_tensor(&p, "r0.gacc"), 0, -1);
  assert_int_equal(g.values[last].version, PIPE_M);
  vd_graph_free(&g);
  vd_plan_free(&p);
}

/* Random DAG as topo.c sees it: values with a producer and a consumers list
 * (increasing, distinct, as link_values builds it).  Nodes are ranked by a
 * hidden random permutation and a value's consumers rank after its
 * producer, so several values of one producer read by one node give
 * multi-edges.  g->topo must equal igraph_topological_sorting's order on
 * the same edges, in the same sequence. */
static uint64_t rnd_state = 88172645463325252ULL;
static uint32_t rnd(uint32_t n) {
  rnd_state ^= rnd_state << 13;
  rnd_state ^= rnd_state >> 7;
  rnd_state ^= rnd_state << 17;
  return (uint32_t)(rnd_state % n);
}

static void random_dag_vs_igraph(uint32_t nn, uint32_t nv, uint32_t maxc) {
  vd_graph_t g;
  memset(&g, 0, sizeof(g));
  uint32_t *perm = malloc(nn * sizeof(*perm)), *rank = malloc(nn * sizeof(*rank));
  uint8_t *seen = calloc(nn, 1);
  g.values = calloc(nv, sizeof(*g.values));
  g.idx = malloc((size_t)nv * maxc * sizeof(*g.idx));
  assert_true(perm && rank && seen && g.values && g.idx);
  for (uint32_t i = 0; i < nn; i++) perm[i] = i;
  for (uint32_t i = nn - 1; i > 0; i--) {
    uint32_t j = rnd(i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (uint32_t i = 0; i < nn; i++) rank[perm[i]] = i;
  g.n_nodes = nn;
  g.n_values = nv;
  igraph_vector_int_t edges, order;
  assert_int_equal(igraph_vector_int_init(&edges, 0), IGRAPH_SUCCESS);
  for (uint32_t v = 0; v < nv; v++) {
    vd_value_t *val = &g.values[v];
    val->cons_off = (uint32_t)g.n_idx;
    val->producer = rnd(5) == 0 ? -1 : (int32_t)rnd(nn);
    uint32_t from = val->producer < 0 ? 0 : rank[val->producer] + 1, nc = rnd(maxc + 1);
    if (from >= nn) continue;
    for (uint32_t k = 0; k < nc; k++) seen[perm[from + rnd(nn - from)]] = 1;
    for (uint32_t c = 0; c < nn; c++)
      if (seen[c]) {
        seen[c] = 0;
        g.idx[g.n_idx++] = c;
        val->n_cons++;
        if (val->producer >= 0) {
          assert_int_equal(igraph_vector_int_push_back(&edges, val->producer), IGRAPH_SUCCESS);
          assert_int_equal(igraph_vector_int_push_back(&edges, c), IGRAPH_SUCCESS);
        }
      }
  }
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_graph_i_topo(&g, &d), VD_OK);
  assert_int_equal(g.n_issues, 0);
  igraph_t ig;
  assert_int_equal(igraph_create(&ig, &edges, (igraph_integer_t)nn, IGRAPH_DIRECTED), IGRAPH_SUCCESS);
  assert_int_equal(igraph_vector_int_init(&order, 0), IGRAPH_SUCCESS);
  assert_int_equal(igraph_topological_sorting(&ig, &order, IGRAPH_OUT), IGRAPH_SUCCESS);
  assert_int_equal(igraph_vector_int_size(&order), nn);
  for (uint32_t i = 0; i < nn; i++) assert_int_equal(g.topo[i], VECTOR(order)[i]);
  igraph_vector_int_destroy(&order);
  igraph_destroy(&ig);
  igraph_vector_int_destroy(&edges);
  free(perm);
  free(rank);
  free(seen);
  free(g.values);
  free(g.idx);
  vd_free(g.topo);
}

static void test_igraph_order(void **state) {
  random_dag_vs_igraph(1, 1, 1);
  random_dag_vs_igraph(5, 3, 2);
  for (int i = 0; i < 20; i++) random_dag_vs_igraph(2 + rnd(60), 1 + rnd(120), 1 + rnd(6));
  random_dag_vs_igraph(3000, 5000, 4);
  random_dag_vs_igraph(2000, 20, 200); /* few wide values: long out-lists */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builders_ordered),
      cmocka_unit_test(test_cycle_between_collectives),
      cmocka_unit_test(test_self_loop),
      cmocka_unit_test(test_pipeline_order),
      cmocka_unit_test(test_igraph_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
