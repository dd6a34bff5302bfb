/*
 * tests/lineage/test_lineage.c - the lineage table (lineage/lineage.c):
 * points and pieces of correct pairs (builder tp2, generated mlp/llama3
 * including ZeRO's nested copies), virtual DP replicas, and every issue kind
 * with the names, slices and ranks it must carry.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <omp.h>

#include "../../common/mem.h"
#include "../../graph/graph.h"
#include "../../lineage/lineage.h"
#include "../../gen/gen.h"
#include "../support/plan_builders.h"
#include "../support/fault.h"
#include "../support/pipeline.h"

typedef tp_pair pair_t;

static uint32_t T(const vd_plan_t *p, const char *name) {
  int64_t t = pb_find_tensor(p, name);
  assert_true(t >= 0);
  return (uint32_t)t;
}

/* Builds graphs (replica-0 parallel graph) and the table of x->s, x->p. */
static void build(pair_t *x) {
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(tp_pair_lineage(x, &d), VD_OK);
}

static void pair_free(pair_t *x) { tp_pair_free(x); }

static void tp2(pair_t *x) {
  memset(x, 0, sizeof(*x));
  assert_int_equal(pb_plan_linear2(&x->s), VD_OK);
  assert_int_equal(pb_plan_tp2(&x->p), VD_OK);
}

static void dump(const vd_lin_table *t) {
  for (size_t i = 0; i < t->n_issues; i++)
    fprintf(stderr, "  issue %s: %s\n", vd_lissue_names[t->issues[i].kind], t->issues[i].detail);
}

/* The first issue of kind k, asserting there is one. */
static const vd_lin_issue *issue(const vd_lin_table *t, vd_lissue_kind k) {
  for (size_t i = 0; i < t->n_issues; i++)
    if (t->issues[i].kind == k) return &t->issues[i];
  dump(t);
  fail_msg("no %s issue", vd_lissue_names[k]);
  return NULL;
}

/* Asserts some issue of kind k contains needle; returns it. */
static const vd_lin_issue *issue_with(const vd_lin_table *t, vd_lissue_kind k, const char *needle) {
  for (size_t i = 0; i < t->n_issues; i++)
    if (t->issues[i].kind == k && strstr(t->issues[i].detail, needle)) return &t->issues[i];
  dump(t);
  fail_msg("no %s issue with '%s'", vd_lissue_names[k], needle);
  return NULL;
}

static size_t count(const vd_lin_table *t, vd_lissue_kind k) {
  size_t n = 0;
  for (size_t i = 0; i < t->n_issues; i++) n += t->issues[i].kind == k;
  return n;
}

static void has(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("'%s' does not contain '%s'", hay, needle);
}

/* ---- correct pairs ------------------------------------------------------- */

static void test_tp2_points(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  build(&x);
  if (x.lt.n_issues) dump(&x.lt);
  assert_int_equal(x.lt.n_issues, 0);
  /* per rank: 4 initial (x, w1, w2, gloss) + 12 final (every tensor that
   * something produces, w1 and w2 updated by sgd) */
  assert_int_equal(x.lt.n_pieces, 32);
  assert_int_equal(x.lt.n_point_pieces, 32);
  /* r1.h's final value holds h[0:4, 4:8] */
  int32_t v = vd_graph_last(&x.gp, T(&x.p, "r1.h"), 0, 0);
  int32_t pi = vd_lin_piece_of(&x.lt, (uint32_t)v, 0);
  assert_true(pi >= 0);
  const vd_lin_piece *p = &x.lt.pieces[pi];
  assert_int_equal(p->lo[0], 0);
  assert_int_equal(p->hi[0], 4);
  assert_int_equal(p->lo[1], 4);
  assert_int_equal(p->hi[1], 8);
  assert_int_equal(p->initial, 0);
  const vd_lineage *L = &x.lt.lins[p->lineage];
  assert_string_equal(vd_plan_s(&x.s, x.s.tensors[L->stensor].name), "h");
  assert_int_equal(L->svalue, (uint32_t)vd_graph_last(&x.gs, T(&x.s, "h"), 0, 0));
  assert_int_equal(x.lt.lin_of_svalue_final[L->svalue], (int32_t)p->lineage);
  assert_int_equal(vd_lin_piece_of(&x.lt, (uint32_t)v, 1), -1); /* only one replica */
  /* pieces are grouped: each lineage's pieces are sorted by slice */
  for (size_t li = 0; li < x.lt.n_lins; li++) {
    const vd_lineage *l = &x.lt.lins[li];
    for (uint32_t k = 1; k < l->n_pieces; k++) {
      const vd_lin_piece *a = &x.lt.pieces[l->piece_off + k - 1], *b = &x.lt.pieces[l->piece_off + k];
      assert_true(a->lo[0] < b->lo[0] || (a->lo[0] == b->lo[0] && a->lo[1] <= b->lo[1]) || a->lo[0] == b->lo[0]);
      assert_int_equal(b->lineage, li);
    }
  }
  /* w1 (updated) and loss are required outputs */
  int32_t lw = x.lt.lin_of_svalue_final[vd_graph_last(&x.gs, T(&x.s, "w1"), 0, -1)];
  assert_true(lw >= 0);
  assert_int_equal(x.lt.lins[lw].required, 1);
  assert_int_equal(x.lt.lins[lw].n_pieces, 2);
  /* y's final lineage holds both copies: y (n = 1, two replicas) and
   * y_partial (n = 2) */
  int32_t ly = x.lt.lin_of_svalue_final[vd_graph_last(&x.gs, T(&x.s, "y"), 0, 0)];
  assert_true(ly >= 0);
  assert_int_equal(x.lt.lins[ly].n_pieces, 4);
  assert_int_equal(x.lt.pieces[x.lt.lins[ly].piece_off].part_n, 1);
  assert_int_equal(x.lt.pieces[x.lt.lins[ly].piece_off + 2].part_n, 2);
  pair_free(&x);
}

/* Independent count: a Gp value of an annotated tensor is a point if it is
 * produced and final, or initial with an initial single counterpart. */
/* One piece per point, times the replicas for points whose part index moves
 * with the replica (dp_part != 0); other points have one all_rep piece. */
static size_t expected_pieces(const pair_t *x) {
  size_t n = 0;
  for (size_t v = 0; v < x->gp.n_values; v++) {
    const vd_value_t *val = &x->gp.values[v];
    const vd_tensor_t *t = &x->p.tensors[val->tensor];
    if (!t->has_lin) continue;
    size_t per = x->p.world.replicas > 1 && t->lin.dp_part != 0 ? (size_t)x->p.world.replicas : 1;
    if (val->producer >= 0 && val->is_final) n += per;
    if (val->is_initial) {
      int64_t s = vd_plan_find_tensor(&x->s, t->lin.full);
      assert_true(s >= 0);
      int32_t sv = vd_graph_first(&x->gs, (uint32_t)s, 0, x->s.tensors[s].scope == VD_SCOPE_PER_MB ? 0 : -1);
      if (sv >= 0 && x->gs.values[sv].is_initial) n += per;
    }
  }
  return n;
}

static void gen_pair(pair_t *x, vd_gen_model m, int dp, int tp, int pp, int nm, int zero) {
  memset(x, 0, sizeof(*x));
  vd_gen_config c;
  vd_gen_config_default(&c);
  c.model = m;
  c.layers = 2;
  c.dp = dp, c.tp = tp, c.pp = pp, c.nm = nm, c.zero = zero;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_gen_build(&c, &x->s, &x->p, &d), VD_OK);
  build(x);
}

static void test_gen_pairs_clean(void **st) {
  (void)st;
  static const int cfg[][6] = {
      {VD_GEN_MLP, 1, 2, 1, 1, 0},    {VD_GEN_MLP, 2, 2, 2, 2, 0}, {VD_GEN_LLAMA3, 2, 2, 2, 2, 0},
      {VD_GEN_LLAMA3, 2, 2, 1, 2, 1}, {VD_GEN_MOE, 2, 1, 2, 2, 0},
  };
  for (size_t i = 0; i < sizeof(cfg) / sizeof(cfg[0]); i++) {
    pair_t x;
    gen_pair(&x, (vd_gen_model)cfg[i][0], cfg[i][1], cfg[i][2], cfg[i][3], cfg[i][4], cfg[i][5]);
    if (x.lt.n_issues) dump(&x.lt);
    assert_int_equal(x.lt.n_issues, 0);
    assert_int_equal(x.lt.n_pieces, expected_pieces(&x));
    /* every required output (updated weights, loss) is covered */
    size_t req = 0;
    for (size_t li = 0; li < x.lt.n_lins; li++) req += x.lt.lins[li].required;
    assert_true(req > 0);
    pair_free(&x);
  }
}

/* Whether x sorts before y (lineage.c's tpiece_cmp inside one lineage). */
static int piece_before(const vd_lin_piece *x, const vd_lin_piece *y) {
  for (int i = 0; i < VD_MAX_DIMS; i++)
    if (x->lo[i] != y->lo[i]) return x->lo[i] < y->lo[i];
  for (int i = 0; i < VD_MAX_DIMS; i++)
    if (x->hi[i] != y->hi[i]) return x->hi[i] < y->hi[i];
  if (x->part_n != y->part_n) return x->part_n < y->part_n;
  if (x->part_k != y->part_k) return x->part_k < y->part_k;
  if (x->replica != y->replica) return x->replica < y->replica;
  return x->value < y->value;
}

/* The pieces are written, sorted and grouped in parallel over single tensors
 * (lineage.c, collect and group): the table, its point lookup included, must
 * be the serial one, byte for byte, and its lineages in single-tensor order
 * with initial before final. */
static void test_sort_parallel_same(void **st) {
  (void)st;
  pair_t a, b;
  pair_t *x[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    memset(x[i], 0, sizeof(*x[i]));
    vd_gen_config c;
    vd_gen_config_default(&c);
    c.model = VD_GEN_LLAMA3;
    c.layers = 8, c.batch = 64, c.dp = 4, c.tp = 2, c.pp = 2, c.nm = 8;
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(vd_gen_build(&c, &x[i]->s, &x[i]->p, &d), VD_OK);
    omp_set_num_threads(i + 1);
    build(x[i]);
  }
  assert_true(a.lt.n_pieces > 4096);
  assert_int_equal(a.lt.n_pieces, b.lt.n_pieces);
  assert_int_equal(a.lt.n_lins, b.lt.n_lins);
  assert_memory_equal(a.lt.pieces, b.lt.pieces, a.lt.n_pieces * sizeof(*a.lt.pieces));
  assert_memory_equal(a.lt.point_first, b.lt.point_first, a.gp.n_values * sizeof(*a.lt.point_first));
  assert_memory_equal(a.lt.point_pieces, b.lt.point_pieces, a.lt.n_point_pieces * sizeof(*a.lt.point_pieces));
  for (size_t li = 0; li < a.lt.n_lins; li++) {
    assert_int_equal(a.lt.lins[li].piece_off, b.lt.lins[li].piece_off);
    assert_int_equal(a.lt.lins[li].svalue, b.lt.lins[li].svalue);
    if (li) {
      const vd_lineage *p = &a.lt.lins[li - 1], *q = &a.lt.lins[li];
      assert_true(p->stensor < q->stensor || (p->stensor == q->stensor && p->initial && !q->initial));
    }
    /* inside a lineage: the comparator's order (slice, parts, replica, value) */
    const vd_lineage *L = &a.lt.lins[li];
    for (uint32_t i = 1; i < L->n_pieces; i++) assert_true(piece_before(&a.lt.pieces[L->piece_off + i - 1], &a.lt.pieces[L->piece_off + i]));
  }
  pair_free(&a);
  pair_free(&b);
}

/* mlp tp2: the pieces of the first layer's fc1 weight (column-parallel). */
static void test_mlp_tp2_weight(void **st) {
  (void)st;
  pair_t x;
  gen_pair(&x, VD_GEN_MLP, 1, 2, 1, 1, 0);
  assert_int_equal(x.lt.n_issues, 0);
  int64_t s = pb_find_tensor(&x.s, "layers.0.fc1.weight");
  assert_true(s >= 0);
  int32_t li = x.lt.lin_of_svalue_initial[vd_graph_first(&x.gs, (uint32_t)s, 0, -1)];
  assert_true(li >= 0);
  const vd_lineage *L = &x.lt.lins[li];
  assert_int_equal(L->n_pieces, 2); /* one shard per TP rank */
  const vd_lin_piece *a = &x.lt.pieces[L->piece_off], *b = a + 1;
  assert_int_equal(a->hi[0] - a->lo[0], x.s.tensors[s].shape[0] / 2);
  assert_int_equal(b->lo[0], a->hi[0]);
  assert_int_not_equal(x.p.tensors[a->ptensor].rank, x.p.tensors[b->ptensor].rank);
  pair_free(&x);
}

/* ---- virtual replicas ------------------------------------------------------ */

static void test_dp_virtual_replicas(void **st) {
  (void)st;
  pair_t x;
  gen_pair(&x, VD_GEN_MLP, 2, 1, 1, 1, 0);
  assert_int_equal(x.lt.n_issues, 0);
  assert_int_equal(x.gp.replicas, 1);
  /* the input's two replicas hold different batch rows of one single value */
  int64_t px = -1;
  for (size_t i = 0; i < x.p.n_tensors && px < 0; i++)
    if (x.p.tensors[i].has_lin && x.p.tensors[i].role == VD_ROLE_INPUT && x.p.tensors[i].ndim >= 1 &&
        x.p.tensors[i].scope == VD_SCOPE_PER_MB)
      px = (int64_t)i;
  assert_true(px >= 0);
  int32_t v = vd_graph_first(&x.gp, (uint32_t)px, 0, 0);
  int32_t p0 = vd_lin_piece_of(&x.lt, (uint32_t)v, 0), p1 = vd_lin_piece_of(&x.lt, (uint32_t)v, 1);
  assert_true(p0 >= 0 && p1 >= 0);
  assert_int_equal(vd_lin_piece_of(&x.lt, (uint32_t)v, 2), -1);
  /* one all_rep piece for both replicas; replica 1's slice is its translate */
  assert_int_equal(p0, p1);
  assert_int_equal(x.lt.pieces[p0].all_rep, 1);
  assert_int_equal(x.lt.pieces[p0].replica, 0);
  assert_true(vd_lin_piece_moves(&x.lt, (uint32_t)p0));
  int64_t lo0[VD_MAX_DIMS], hi0[VD_MAX_DIMS], lo1[VD_MAX_DIMS], hi1[VD_MAX_DIMS];
  vd_lin_piece_at(&x.lt, (uint32_t)p0, 0, lo0, hi0);
  vd_lin_piece_at(&x.lt, (uint32_t)p1, 1, lo1, hi1);
  assert_true(lo0[0] != lo1[0]);
  assert_int_equal(lo1[0] - lo0[0], hi0[0] - lo0[0]); /* the next rows of the batch */
  pair_free(&x);
}

/* ---- issues ---------------------------------------------------------------- */

static void test_gap(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r1.w1")].has_lin = 0; /* rows 4:8 of w1 lose their lineage */
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_GAP), 2); /* initial and final */
  const vd_lin_issue *is = issue_with(&x.lt, VD_LISSUE_GAP, "'w1' initial: slice [4:8, 0:8] of [8, 8] is not covered");
  assert_int_equal(is->stensor, T(&x.s, "w1"));
  is = issue_with(&x.lt, VD_LISSUE_GAP, "'w1' final: slice [4:8, 0:8] of [8, 8] is not covered");
  assert_int_equal(is->stensor, T(&x.s, "w1"));
  assert_int_equal(count(&x.lt, VD_LISSUE_OVERLAP), 0);
  pair_free(&x);
}

/* Overlapping copies are each their own claim (proven separately); only the
 * union must cover the tensor, so the rows nobody claims are the issue. */
static void test_overlap(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  uint32_t w = T(&x.p, "r1.w1");
  x.p.tensors[w].lin.lo[0] = 2; /* rank 1 claims rows 2:6 instead of 4:8 */
  x.p.tensors[w].lin.hi[0] = 6;
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_OVERLAP), 0);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_GAP);
  assert_int_equal(is->stensor, T(&x.s, "w1"));
  has(is->detail, "slice [6:8, 0:8] of [8, 8] is not covered");
  pair_free(&x);
}

static void test_parts(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r1.y_partial")].has_lin = 0; /* part 1 of y's partial sum is gone */
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_PARTS), 1);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_PARTS);
  assert_int_equal(is->stensor, T(&x.s, "y"));
  has(is->detail, "'y' final slice [0:4, 0:8] as 2 parts: part 1 missing");
  has(is->detail, "'r0.y_partial' (rank 0, mb 0)");
  pair_free(&x);

  tp2(&x);
  x.p.tensors[T(&x.p, "r1.y_partial")].lin.part_k = 2; /* out of range, and part 1 missing */
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_PARTS), 2);
  int seen = 0;
  for (size_t i = 0; i < x.lt.n_issues; i++)
    if (x.lt.issues[i].kind == VD_LISSUE_PARTS && strstr(x.lt.issues[i].detail, "claims part 2 of 2, outside 0..1")) {
      has(x.lt.issues[i].detail, "'r1.y_partial' (rank 1, mb 0)");
      assert_int_equal(x.lt.issues[i].tensor, T(&x.p, "r1.y_partial"));
      seen = 1;
    }
  assert_true(seen);
  pair_free(&x);
}

static void test_no_single(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r0.h")].lin.full = 999;
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_NO_SINGLE), 1);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_NO_SINGLE);
  assert_int_equal(is->tensor, T(&x.p, "r0.h"));
  assert_int_equal(is->stensor, -1);
  has(is->detail, "'r0.h' (rank 0) claims single tensor id 999");
  /* and h now has a gap where r0.h was */
  has(issue(&x.lt, VD_LISSUE_GAP)->detail, "'h' final: slice [0:4, 0:4] of [4, 8] is not covered");
  pair_free(&x);
}

static void test_out_of_bounds(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r1.w2")].lin.hi[1] = 9;
  build(&x);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_OUT_OF_BOUNDS);
  assert_int_equal(is->tensor, T(&x.p, "r1.w2"));
  has(is->detail, "'r1.w2' (rank 1) claims slice [0:8, 4:9] of 'w2'");
  has(is->detail, "its shape [8, 8]");
  pair_free(&x);
}

static void test_uncovered(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r0.loss")].has_lin = 0;
  x.p.tensors[T(&x.p, "r1.loss")].has_lin = 0;
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_UNCOVERED), 1);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_UNCOVERED);
  assert_int_equal(is->stensor, T(&x.s, "loss"));
  has(is->detail, "single loss 'loss' (final value) has no lineage");
  pair_free(&x);
}

static void test_no_value(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  /* an annotated tensor that no node touches */
  vd_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.id = 1000;
  t.rank = 1;
  t.ndim = 2;
  t.shape[0] = 4;
  t.shape[1] = 8;
  t.role = VD_ROLE_ACT;
  t.scope = VD_SCOPE_PER_MB;
  t.has_lin = 1;
  t.lin.full = 5;
  t.lin.hi[0] = 4;
  t.lin.hi[1] = 8;
  t.lin.part_n = 1;
  uint32_t idx;
  assert_int_equal(vd_plan_add_tensor(&x.p, &t, "r1.orphan", &idx), VD_OK);
  build(&x);
  const vd_lin_issue *is = issue(&x.lt, VD_LISSUE_NO_VALUE);
  assert_int_equal(is->tensor, idx);
  assert_int_equal(is->mb, 0);
  has(is->detail, "'r1.orphan' (rank 1, mb 0) is annotated with 'y' but never holds a value");
  pair_free(&x);
}

/* An input tensor of shape 4 x 8, annotated with the whole of single tensor full. */
static vd_tensor_t input_4x8(int64_t id, int32_t rank, int64_t full) {
  vd_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.id = id;
  t.rank = rank;
  t.ndim = 2;
  t.shape[0] = 4;
  t.shape[1] = 8;
  t.role = VD_ROLE_INPUT;
  t.scope = VD_SCOPE_PER_MB;
  t.has_lin = full >= 0;
  t.lin.full = full;
  t.lin.hi[0] = 4;
  t.lin.hi[1] = 8;
  t.lin.part_n = 1;
  return t;
}

/* A declared input that neither plan reads is a warning and no issue; one
 * that the single plan reads and the parallel plan never does stays a
 * NO_VALUE issue (the steps compute from different data). */
static void test_unread_input(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  vd_tensor_t su = input_4x8(2000, 0, -1), pu = input_4x8(2000, 0, 2000), py = input_4x8(2001, 1, 5);
  uint32_t idx, iy;
  assert_int_equal(vd_plan_add_tensor(&x.s, &su, "mask", &idx), VD_OK);
  assert_int_equal(vd_plan_add_tensor(&x.p, &pu, "r0.mask", &idx), VD_OK);
  assert_int_equal(vd_plan_add_tensor(&x.p, &py, "r1.y_unread", &iy), VD_OK);
  build(&x);
  assert_int_equal(x.lt.n_warnings, 1);
  assert_int_equal(x.lt.warnings[0].kind, VD_LISSUE_UNREAD);
  assert_int_equal(x.lt.warnings[0].diagnosis, VD_DX_NONE);
  assert_int_equal(x.lt.warnings[0].tensor, idx);
  has(x.lt.warnings[0].detail, "declared input 'r0.mask' (rank 0, as 'mask') is read by neither step");
  assert_int_equal(count(&x.lt, VD_LISSUE_UNREAD), 0);
  assert_int_equal(issue(&x.lt, VD_LISSUE_NO_VALUE)->tensor, iy);
  pair_free(&x);
}

/* A data input whose replicas x microbatches read another batch than the
 * single plan: one BATCH issue naming the dimension and both extents, listed
 * first, instead of per-piece gaps. */
static void test_batch_mismatch(void **st) {
  (void)st;
  pair_t x;
  gen_pair(&x, VD_GEN_MLP, 2, 1, 1, 2, 0);
  assert_int_equal(x.lt.n_issues, 0);
  int64_t px = -1;
  for (size_t i = 0; i < x.p.n_tensors && px < 0; i++)
    if (x.p.tensors[i].has_lin && x.p.tensors[i].role == VD_ROLE_INPUT && x.p.tensors[i].scope == VD_SCOPE_PER_MB)
      px = (int64_t)i;
  assert_true(px >= 0);
  vd_tensor_t *t = &x.p.tensors[px];
  int64_t b = t->shape[0];
  assert_int_equal(t->lin.dp_shift[0], 2 * b); /* dp2 x nm2 rows of b */
  /* the two replicas read the same samples: rows [0, 2b) of a 4b batch */
  t->lin.dp_shift[0] = 0;
  vd_lin_free(&x.lt);
  vd_graph_free(&x.gs);
  vd_graph_free(&x.gp);
  build(&x);
  assert_int_equal(count(&x.lt, VD_LISSUE_BATCH), 1);
  assert_int_equal(x.lt.issues[0].kind, VD_LISSUE_BATCH);
  char want[160];
  snprintf(want, sizeof(want), "dim 0: the parallel plan's 2 replica(s) x 2 microbatch(es) of %lld read [0:%lld), "
           "the single-device plan reads %lld", (long long)b, (long long)(2 * b), (long long)(4 * b));
  has(x.lt.issues[0].detail, want);
  pair_free(&x);
}

static void test_issues_sorted_and_free_null(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  x.p.tensors[T(&x.p, "r1.w1")].has_lin = 0;
  x.p.tensors[T(&x.p, "r0.h")].lin.full = 999;
  build(&x);
  for (size_t i = 1; i < x.lt.n_issues; i++) assert_true(x.lt.issues[i - 1].kind <= x.lt.issues[i].kind);
  vd_lin_free(NULL);
  vd_lin_table z;
  memset(&z, 0, sizeof(z));
  vd_lin_free(&z);
  assert_int_equal(vd_lin_piece_of(&z, 0, 0), -1);
  pair_free(&x);
}

static vd_rc lin_run(void *ctx, vd_diag *d) {
  pair_t *x = ctx;
  return vd_lin_build(&x->gs, &x->gp, &x->lt, d);
}
static void lin_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  pair_t *x = ctx;
  if (hit) assert_null(x->lt.pieces); /* nothing left behind */
  vd_lin_free(&x->lt);
}

static void test_alloc_failures(void **st) {
  (void)st;
  pair_t x;
  tp2(&x);
  vd_diag d;
  vd_graph_opts o = {0};
  vd_graph_build(&x.s, &o, &x.gs, &d);
  vd_graph_build(&x.p, &o, &x.gp, &d);
  assert_int_equal(tf_fail_each(lin_run, lin_after, &x, 1, NULL), VD_OK);
  pair_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tp2_points),     cmocka_unit_test(test_gen_pairs_clean),
      cmocka_unit_test(test_mlp_tp2_weight), cmocka_unit_test(test_dp_virtual_replicas),
      cmocka_unit_test(test_gap),            cmocka_unit_test(test_overlap),
      cmocka_unit_test(test_parts),          cmocka_unit_test(test_no_single),
      cmocka_unit_test(test_out_of_bounds),  cmocka_unit_test(test_uncovered),
      cmocka_unit_test(test_no_value),       cmocka_unit_test(test_unread_input),
             cmocka_unit_test(test_issues_sorted_and_free_null),
      cmocka_unit_test(test_alloc_failures), cmocka_unit_test(test_batch_mismatch),
      cmocka_unit_test(test_sort_parallel_same),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
