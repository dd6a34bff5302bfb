/*
 * tests/stages/test_window.c - windows on the single-device side of a stage
 * (stages/window.c) and the operator equivariance table (ops/ops_eqv.c).
 *
 *  - every operator has a reviewed equivariance entry;
 *  - rows of an elementwise/linear chain are cut to the rows the pieces
 *    touch, and two stages that differ only by that row offset (two DP
 *    replicas) get one canonical class;
 *  - a dimension that an operator reduces over (sum), indexes (pick) or
 *    reads as a position (rope) is never windowed, so stages at other
 *    offsets stay different classes;
 *  - nnScaler's gate backward windows its token rows only while its weight
 *    gradient (a sum over the rows) is dead, and so does the generator's
 *    expert kernel grouped_mlp_backward (gates gradient a row output);
 *  - a view that merges [rows, cols] into tokens windows the tokens by whole
 *    rows (scaled link), and a slice that splits a row pins the class.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "stage_builder.h"

static void test_table_complete(void **state) {
  (void)state;
  for (int op = 0; op < VD_OP__COUNT; op++) {
    const vd_op_eqv *e = vd_op_eqv_of((vd_op_id)op);
    if (e->kind == VD_EQV__UNSET) fail_msg("operator %s has no equivariance entry", vd_op_name((vd_op_id)op));
  }
  assert_int_equal(vd_op_eqv_of(VD_OP_ROPE)->kind, VD_EQV_LEAD);
  assert_int_equal(vd_op_eqv_of(VD_OP_CHUNK)->kind, VD_EQV_NONE);
  assert_int_equal(vd_op_eqv_of(VD_OP_ALL_GATHER)->kind, VD_EQV_NONE);
  assert_int_equal(vd_op_eqv_lead(VD_OP_CAUSAL_MASK, NULL, NULL, 4), 2);
  assert_int_equal(vd_op_eqv_lead(VD_OP_ADD, NULL, NULL, 3), 3);
}

/* A parallel hypothesis of single value sv: piece pc of it, with the slice
 * the window reads. */
static uint32_t hyp_sliced(tb_world *w, tb_stage *s, uint32_t sv, int32_t pc) {
  uint32_t h = tb_hyp(s, w, sv, pc);
  s->vals[h].has_pslice = 1;
  memcpy(s->vals[h].plo, w->pieces[pc].lo, sizeof(s->vals[h].plo));
  memcpy(s->vals[h].phi, w->pieces[pc].hi, sizeof(s->vals[h].phi));
  return h;
}

/* A parallel hypothesis of single value sv: rows [r, r + 2) of a [n, c]
 * value (whole when whole != 0). */
static uint32_t hyp_rows(tb_world *w, tb_stage *s, uint32_t sv, int64_t r, int whole) {
  int64_t c = s->vals[sv].shape[1], n = s->vals[sv].shape[0];
  int64_t lo[2] = {whole ? 0 : r, 0}, hi[2] = {whole ? n : r + 2, c};
  return hyp_sliced(w, s, sv, tb_piece(w, 2, lo, hi, 0, 1));
}

/* A target: rows [r, r + 2) of single value sv ([n, c]), computed whole by
 * parallel value pv. */
static void target_rows(tb_world *w, tb_stage *s, uint32_t sv, uint32_t pv, int64_t r) {
  int64_t c = s->vals[sv].shape[1];
  int32_t pt = tb_piece(w, 2, (int64_t[]){r, 0}, (int64_t[]){r + 2, c}, 0, 1);
  tb_target(s, sv, (int64_t[]){r, 0}, (int64_t[]){r + 2, c}, 1, (uint32_t[]){(uint32_t)pt}, (uint32_t[]){pv}, 1);
}

/* A target: the whole of single value sv (ndim dims, extents hi), of which
 * parallel value pv is part 0 of 4 (a partial sum). */
static void target_part(tb_world *w, tb_stage *s, uint32_t sv, uint32_t pv, int ndim, const int64_t *hi) {
  const int64_t lo[VD_MAX_DIMS] = {0};
  int32_t pw = tb_piece(w, ndim, lo, hi, 0, 4);
  tb_target(s, sv, lo, hi, 4, (uint32_t[]){(uint32_t)pw}, (uint32_t[]){pv}, 1);
}

/* Single y = op(x) (x, y [8, 4]); the parallel side holds rows [r, r + 2) of
 * x as a hypothesis and y's rows [r, r + 2) as the target, computed by the
 * same op (arg: the op's name).  Returns the single x value. */
static uint32_t build_rows(tb_world *w, tb_stage *s, int64_t r, const void *arg) {
  const char *op = arg;
  uint32_t gs = tb_pnode(w, 0, op, "f"), gp = tb_pnode(w, 1, op, "f");
  uint32_t x = TB_V(s, 0, 8, 4), y = TB_V(s, 0, 8, 4);
  tb_node(s, w, 0, gs, TB_L(x), TB_L(y));
  uint32_t hx = hyp_rows(w, s, x, r, 0);
  uint32_t py = TB_V(s, 1, 2, 4);
  tb_node(s, w, 1, gp, TB_L(hx), TB_L(py));
  target_rows(w, s, y, py, r);
  return x;
}

/* Windows stage s (every target's batch slice is its slice) and, with
 * reduce, reduces it; x_rows gets value x's windowed rows. */
static void window_stage(tb_world *w, tb_stage *s, uint32_t x, int reduce, int64_t *x_rows) {
  vd_diag d;
  vd_diag_clear(&d);
  for (uint32_t t = 0; t < s->st.n_targets; t++) {
    vd_stage_target *tg = &s->targets[t];
    tg->has_bslice = 1;
    memcpy(tg->blo, tg->lo, sizeof(tg->blo));
    memcpy(tg->bhi, tg->hi, sizeof(tg->bhi));
  }
  assert_int_equal(vd_stage_window(&w->lt, &s->st, &d), VD_OK);
  *x_rows = s->vals[x].shape[0];
  if (reduce) assert_int_equal(vd_stage_reduce(&w->lt, &s->st, &d), VD_OK);
}

/* Builds one stage of a pair, the parallel side at row offset r; returns
 * the single value whose windowed rows the test reads. */
typedef uint32_t (*stage_fn)(tb_world *w, tb_stage *s, int64_t r, const void *arg);

/* Builds the stages at row offsets r0 and r1 with build(arg), windows them
 * (and reduces them, with reduce) and classifies them (canon allocates
 * nothing the stages own).  x_rows gets each one's windowed rows of the
 * value build returned.  Returns 1 when they share a class. */
static int pair_same_class(stage_fn build, const void *arg, int reduce, int64_t r0, int64_t r1, int64_t *x_rows) {
  tb_world w;
  tb_world_init(&w);
  tb_stage s[2];
  int64_t r[2] = {r0, r1};
  for (int i = 0; i < 2; i++) {
    tb_stage_init(&s[i], (uint32_t)i);
    uint32_t x = build(&w, &s[i], r[i], arg);
    window_stage(&w, &s[i], x, reduce, &x_rows[i]);
  }
  vd_diag d;
  vd_diag_clear(&d);
  vd_stage set_st[2] = {s[0].st, s[1].st};
  vd_stage_set set = {.stages = set_st, .n_stages = 2};
  assert_int_equal(vd_stage_canon(&w.lt, &set, &d), VD_OK);
  int same = set_st[1].canon_class == 0;
  tb_world_free(&w);
  return same;
}

/* Windows, reduces and classifies two y = op(x) stages at row offsets r0
 * and r1.  Returns 1 when they share a class. */
static int same_class(const char *op, int64_t r0, int64_t r1, int64_t *x_rows) {
  return pair_same_class(build_rows, op, 1, r0, r1, x_rows);
}

static void test_rows_windowed_and_merged(void **state) {
  (void)state;
  int64_t rows[2];
  assert_true(same_class("silu", 2, 6, rows));
  assert_int_equal(rows[0], 2); /* x [8, 4] cut to the 2 rows the pieces touch */
  assert_int_equal(rows[1], 2);
  assert_true(same_class("identity", 0, 4, rows));
}

static void test_softmax_dim_pinned(void **state) {
  (void)state;
  int64_t rows[2];
  /* softmax over the last dimension: rows are still independent */
  assert_true(same_class("softmax", 2, 6, rows));
  assert_int_equal(rows[0], 2);
}

static void test_positions_pinned(void **state) {
  (void)state;
  int64_t rows[2];
  /* rope with seq_dim 1 (default) on [8, 4]: dimension 0 is before the
   * sequence dimension, so rows still window; the rotated dim 1 stays whole */
  assert_true(same_class("rope", 2, 6, rows));
  /* causal_mask on [8, 4]: both dims are positions: nothing windows, the
   * two offsets are different queries */
  assert_false(same_class("causal_mask", 2, 6, rows));
  assert_int_equal(rows[0], 8);
}

/* nnScaler's gate_fw_backward (x [8, 4], w [4, 4], weight, idx, gy [8, 2])
 * -> (gx [8, 4], gw [4, 4]) on both sides; the parallel side holds rows
 * [r, r + 2).  The target is gx's rows (gw dead: the row form applies), or
 * with *gw_live (arg) also the whole gw, a sum over every row.  Returns x. */
static uint32_t build_gate(tb_world *w, tb_stage *s, int64_t r, const void *arg) {
  const int *gw_live = arg;
  uint32_t gs = tb_pnode(w, 0, "gate_fw_backward", "g"), gp = tb_pnode(w, 1, "gate_fw_backward", "g");
  uint32_t x = TB_V(s, 0, 8, 4), wt = TB_V(s, 0, 4, 4), tw = TB_V(s, 0, 8, 2), ti = TB_V(s, 0, 8, 2),
           gy = TB_V(s, 0, 8, 2), gx = TB_V(s, 0, 8, 4), gw = TB_V(s, 0, 4, 4);
  tb_node(s, w, 0, gs, TB_L(x, wt, tw, ti, gy), TB_L(gx, gw));
  uint32_t hx = hyp_rows(w, s, x, r, 0), hw = hyp_rows(w, s, wt, 0, 1), htw = hyp_rows(w, s, tw, r, 0),
           hti = hyp_rows(w, s, ti, r, 0), hgy = hyp_rows(w, s, gy, r, 0);
  uint32_t pgx = TB_V(s, 1, 2, 4), pgw = TB_V(s, 1, 4, 4);
  tb_node(s, w, 1, gp, TB_L(hx, hw, htw, hti, hgy), TB_L(pgx, pgw));
  target_rows(w, s, gx, pgx, r);
  if (*gw_live) target_part(w, s, gw, pgw, 2, (int64_t[]){4, 4}); /* this rank's rows of gw */
  return x;
}

/* A row-by-row backward of two replicas (token rows [2, 4) and [6, 8)),
 * built by build: with only its row output live the token rows window to 2
 * and the stages are one class; with a weight gradient live too (a sum over
 * every token row) nothing windows (all 8 rows) and they are not. */
static void expect_token_rows_window(stage_fn build) {
  int64_t rows[2];
  const int dead = 0, live = 1;
  assert_true(pair_same_class(build, &dead, 0, 2, 6, rows));
  assert_int_equal(rows[0], 2);
  assert_int_equal(rows[1], 2);
  assert_false(pair_same_class(build, &live, 0, 2, 6, rows));
  assert_int_equal(rows[0], 8);
}

static void test_moe_gate_rows(void **state) {
  (void)state;
  /* only the input gradient is used: gx[t] is row t of x and gy, so the
   * token rows window and two replicas' stages are one class; the gate
   * weight gradient sums over every token row: nothing windows */
  expect_token_rows_window(build_gate);
}

/* grouped_mlp_backward (x [8, 4], gates [8, 2], w1 [2, 3, 4], w3 [2, 3, 4],
 * w2 [2, 4, 3], gy [8, 4]) -> (gx, ggates, gw1, gw3, gw2) on both sides; the
 * parallel side holds token rows [r, r + 2).  The target is ggates' rows
 * (a row output), or with *gw_live (arg) also the whole gw1, a sum over
 * every row.  Returns x. */
static uint32_t build_gmlp(tb_world *w, tb_stage *s, int64_t r, const void *arg) {
  const int *gw_live = arg;
  uint32_t gs = tb_pnode(w, 0, "grouped_mlp_backward", "e"), gp = tb_pnode(w, 1, "grouped_mlp_backward", "e");
  uint32_t x = TB_V(s, 0, 8, 4), ga = TB_V(s, 0, 8, 2), w1 = TB_V(s, 0, 2, 3, 4), w3 = TB_V(s, 0, 2, 3, 4),
           w2 = TB_V(s, 0, 2, 4, 3), gy = TB_V(s, 0, 8, 4);
  uint32_t gx = TB_V(s, 0, 8, 4), gg = TB_V(s, 0, 8, 2), g1 = TB_V(s, 0, 2, 3, 4), g3 = TB_V(s, 0, 2, 3, 4),
           g2 = TB_V(s, 0, 2, 4, 3);
  tb_node(s, w, 0, gs, TB_L(x, ga, w1, w3, w2, gy), TB_L(gx, gg, g1, g3, g2));
  uint32_t hx = hyp_rows(w, s, x, r, 0), hga = hyp_rows(w, s, ga, r, 0), hw1 = hyp_rows(w, s, w1, 0, 1),
           hw3 = hyp_rows(w, s, w3, 0, 1), hw2 = hyp_rows(w, s, w2, 0, 1), hgy = hyp_rows(w, s, gy, r, 0);
  uint32_t pgx = TB_V(s, 1, 2, 4), pgg = TB_V(s, 1, 2, 2), p1 = TB_V(s, 1, 2, 3, 4), p3 = TB_V(s, 1, 2, 3, 4),
           p2 = TB_V(s, 1, 2, 4, 3);
  tb_node(s, w, 1, gp, TB_L(hx, hga, hw1, hw3, hw2, hgy), TB_L(pgx, pgg, p1, p3, p2));
  target_rows(w, s, gg, pgg, r);
  if (*gw_live) target_part(w, s, g1, p1, 3, (int64_t[]){2, 3, 4});
  return x;
}

static void test_grouped_mlp_rows(void **state) {
  (void)state;
  /* the gates gradient is row by row in x, gates and gy: token rows window,
   * two replicas' stages (EP dispatch backward) are one class; an expert
   * weight gradient sums over every token row: nothing windows */
  expect_token_rows_window(build_gmlp);
}

/* Single y = view(x), x [8, 4] -> y [32]; the hypothesis is x's rows
 * [r, r + 2), the target y's tokens [t0, t0 + 8) computed by a parallel view
 * [2, 4] -> [8].  Returns the windowed extents of x rows and y tokens. */
static void view_window(int64_t r, int64_t t0, int64_t *xr, int64_t *yt) {
  tb_world w;
  tb_world_init(&w);
  tb_stage s;
  tb_stage_init(&s, 0);
  uint32_t gs = tb_pnode(&w, 0, "view", "flat"), gp = tb_pnode(&w, 1, "view", "flat");
  uint32_t x = TB_V(&s, 0, 8, 4), y = TB_V(&s, 0, 32);
  tb_node(&s, &w, 0, gs, TB_L(x), TB_L(y));
  uint32_t hx = hyp_rows(&w, &s, x, r, 0);
  uint32_t py = TB_V(&s, 1, 8);
  tb_node(&s, &w, 1, gp, TB_L(hx), TB_L(py));
  int32_t pt = tb_piece(&w, 1, (int64_t[]){t0}, (int64_t[]){t0 + 8}, 0, 1);
  tb_target(&s, y, (int64_t[]){t0}, (int64_t[]){t0 + 8}, 1, (uint32_t[]){(uint32_t)pt}, (uint32_t[]){py}, 1);
  window_stage(&w, &s, x, 0, xr);
  *yt = s.vals[y].shape[0];
  if (*xr < 8) {
    assert_int_equal(s.vals[x].woff[0], r);
    assert_int_equal(s.vals[y].woff[0], 4 * r);
    assert_int_equal(s.targets[0].blo[0], t0 - 4 * r);
  }
  tb_world_free(&w);
}

static void test_view_merge_windowed(void **state) {
  (void)state;
  int64_t xr, yt;
  view_window(2, 8, &xr, &yt); /* rows 2..3 are tokens 8..15 */
  assert_int_equal(xr, 2);
  assert_int_equal(yt, 8);
  view_window(4, 16, &xr, &yt);
  assert_int_equal(xr, 2);
  assert_int_equal(yt, 8);
  view_window(2, 6, &xr, &yt); /* tokens 6..13 split rows 1 and 3: pinned */
  assert_int_equal(xr, 8);
  assert_int_equal(yt, 32);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table_complete),
      cmocka_unit_test(test_rows_windowed_and_merged),
      cmocka_unit_test(test_softmax_dim_pinned),
      cmocka_unit_test(test_positions_pinned),
      cmocka_unit_test(test_moe_gate_rows),
      cmocka_unit_test(test_grouped_mlp_rows),
      cmocka_unit_test(test_view_merge_windowed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
