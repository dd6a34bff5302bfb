/*
 * tests/plans/test_validate.c - vd_plan_validate on in-memory plans.
 *
 * Generators and mutators build plans with the builder and never go through
 * msgpack, so every rule is tested here on a plan edited in memory: one
 * valid 2-rank plan (TP linear + all-reduce, a send/recv pair, lineage with
 * shifts), then one mutation per test, asserting the rc, record and field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../../common/mem.h"
#include "../../plans/plan.h"
#include "../support/fault.h"

/* tensor indices: rank r has x (4r), w (4r+1), y (4r+2), z (4r+3) */
static void build(vd_plan_t *p, vd_plan_kind kind) {
  assert_int_equal(vd_plan_init(p, kind), VD_OK);
  int ranks = kind == VD_PLAN_PARALLEL ? 2 : 1;
  vd_world_t w = {.dp = 2, .tp = ranks, .pp = 1, .cp = 1, .ep = 1, .nm = 2, .replicas = ranks,
                  .stored_ranks = ranks};
  assert_int_equal(vd_plan_str(p, "tp,dp", &w.layout), VD_OK);
  assert_int_equal(vd_plan_set_world(p, &w), VD_OK);
  int32_t s;
  assert_int_equal(vd_plan_add_segment(p, "fwd", &s), VD_OK);
  assert_int_equal(vd_plan_add_segment(p, "opt", &s), VD_OK);
  for (int r = 0; r < ranks; r++) {
    assert_int_equal(vd_plan_add_step(p, r, 0, 0), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 0, 1), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 1, -1), VD_OK);
  }
  int par = kind == VD_PLAN_PARALLEL;
  for (int r = 0; r < ranks; r++) {
    vd_tensor_t x = {.id = 10 * r + 1, .rank = r, .ndim = 2, .shape = {4, 4}, .role = VD_ROLE_INPUT,
                     .scope = VD_SCOPE_PER_MB, .has_lin = par};
    x.lin = (vd_lineage_ann){.full = 1, .lo = {0, 4 * r}, .hi = {4, 4 * r + 4}, .part_n = 1, .dp_shift = {8, 0},
                             .mb_shift = {4, 0}};
    vd_tensor_t wt = {.id = 10 * r + 2, .rank = r, .ndim = 2, .shape = {4, 6}, .role = VD_ROLE_WEIGHT,
                      .scope = VD_SCOPE_PERSISTENT, .has_lin = par};
    wt.lin = (vd_lineage_ann){.full = 2, .lo = {4 * r, 0}, .hi = {4 * r + 4, 6}, .part_n = 1};
    vd_tensor_t y = {.id = 10 * r + 3, .rank = r, .ndim = 2, .shape = {4, 6}, .role = VD_ROLE_ACT,
                     .scope = VD_SCOPE_PER_MB, .has_lin = par};
    y.lin = (vd_lineage_ann){.full = 3, .lo = {0, 0}, .hi = {4, 6}, .part_k = r, .part_n = 2, .dp_shift = {8, 0},
                             .mb_shift = {4, 0}};
    vd_tensor_t z = y;
    z.id = 10 * r + 4;
    z.lin.part_k = 0;
    z.lin.part_n = 1;
    assert_int_equal(vd_plan_add_tensor(p, &x, "x", NULL), VD_OK);
    assert_int_equal(vd_plan_add_tensor(p, &wt, "w", NULL), VD_OK);
    assert_int_equal(vd_plan_add_tensor(p, &y, "y", NULL), VD_OK);
    assert_int_equal(vd_plan_add_tensor(p, &z, "z", NULL), VD_OK);
  }
  uint32_t ni;
  for (int r = 0; r < ranks; r++) {
    uint32_t in[2] = {4 * r, 4 * r + 1}, y = 4 * r + 2, z = 4 * r + 3;
    vd_node_t lin = {.id = 100 * r + 1, .rank = r, .segment = 0, .layer = 0, .phase = VD_PHASE_FWD, .coll = -1};
    assert_int_equal(vd_plan_add_node(p, &lin, "linear", "fc", in, 2, &y, 1, NULL, 0, &ni), VD_OK);
    assert_int_equal(vd_plan_attr_int(p, ni, "bias", 0), VD_OK);
    int64_t g[2] = {0, 1};
    vd_node_t ar = {.id = 100 * r + 2, .rank = r, .segment = 0, .layer = 0, .phase = VD_PHASE_COMM,
                    .coll = par ? 7 : -1};
    assert_int_equal(vd_plan_add_node(p, &ar, par ? "all_reduce" : "identity", "", &y, 1, &z, 1, g,
                                      par ? 2 : 0, &ni), VD_OK);
  }
}

static vd_rc run(const vd_plan_t *p, vd_diag *d, char *line, size_t n) {
  vd_diag_clear(d);
  vd_rc rc = vd_plan_validate(p, "m.plan", d);
  line[0] = '\0';
  if (rc) vd_diag_format(d, line, n);
  return rc;
}

static void expect(const vd_plan_t *p, vd_rc want, const char *record, const char *field, const char *msg) {
  vd_diag d;
  char line[1024];
  vd_rc rc = run(p, &d, line, sizeof(line));
  if (rc != want) fail_msg("want rc %d, got %d: %s", want, rc, line);
  assert_string_equal(d.file, "m.plan");
  if (record && strcmp(d.record, record)) fail_msg("record: want '%s': %s", record, line);
  if (field && strcmp(d.field, field)) fail_msg("field: want '%s': %s", field, line);
  if (msg && !strstr(d.msg, msg)) fail_msg("msg: want '%s': %s", msg, line);
}

static void test_valid(void **state) {
  vd_plan_t p;
  vd_diag d;
  char line[512];
  build(&p, VD_PLAN_PARALLEL);
  if (run(&p, &d, line, sizeof(line))) fail_msg("%s", line);
  vd_plan_free(&p);
  build(&p, VD_PLAN_SINGLE);
  if (run(&p, &d, line, sizeof(line))) fail_msg("%s", line);
  vd_plan_free(&p);
}

static void test_world(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  p.world.tp = 0;
  expect(&p, VD_EINPUT, "world", "tp", "degree >= 1, got 0");
  p.world.tp = 2;
  p.world.sp = 2;
  expect(&p, VD_EINPUT, "world", "sp", "0 or 1");
  p.world.sp = 0;
  assert_int_equal(vd_plan_str(&p, "tp,tp", &p.world.layout), VD_OK);
  expect(&p, VD_EINPUT, "world", "layout", "distinct dims");
  assert_int_equal(vd_plan_str(&p, "tp,zz", &p.world.layout), VD_OK);
  expect(&p, VD_EINPUT, "world", "layout", "'tp,zz'");
  vd_plan_free(&p);
  build(&p, VD_PLAN_SINGLE);
  p.world.replicas = 2;
  expect(&p, VD_EINPUT, "world", "replicas", "single-device");
  vd_plan_free(&p);
}

static void test_schedule(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  p.steps[p.programs[1].step_off + 2].segment = 2;
  expect(&p, VD_EINPUT, "schedule of rank 1", "step[2].segment", "[0, 2), got 2");
  p.steps[p.programs[1].step_off + 2].segment = 1;
  p.steps[1].mb = 2;
  expect(&p, VD_EINPUT, "schedule of rank 0", "step[1].mb", "[0, 2) or -1");
  p.steps[1].mb = 1;
  p.programs[1].n_steps = 100;
  expect(&p, VD_EINTERNAL, "schedule of rank 1", "steps", "outside");
  vd_plan_free(&p);
}

static void test_tensor_fields(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  p.tensors[1].shape[1] = 0;
  expect(&p, VD_EINPUT, "tensor 2 'w'", "shape[1]", "positive size, got 0");
  p.tensors[1].shape[1] = 6;
  p.tensors[1].ndim = 9;
  expect(&p, VD_EINPUT, "tensor 2 'w'", "shape", "at most 8 dims");
  p.tensors[1].ndim = 2;
  p.tensors[5].rank = 2;
  expect(&p, VD_EINPUT, "tensor 12 'w'", "rank", "[0, 2), got 2");
  p.tensors[5].rank = 1;
  p.tensors[5].dtype = (vd_dtype)99;
  expect(&p, VD_EINPUT, "tensor 12 'w'", "dtype", "got 99");
  p.tensors[5].dtype = VD_DT_F32;
  p.tensors[6].id = 11;
  expect(&p, VD_EINPUT, "tensor 11 'y'", "id", "duplicate tensor id 11 (also tensors[4])");
  vd_plan_free(&p);
}

static void test_numel_overflow(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_SINGLE);
  vd_tensor_t *t = &p.tensors[0];
  t->ndim = 3;
  t->shape[0] = t->shape[1] = t->shape[2] = (int64_t)1 << 21; /* 2^63: one past */
  expect(&p, VD_EINPUT, "tensor 1 'x'", "shape[2]", "overflows");
  vd_plan_free(&p);
}

static void test_lineage(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  p.tensors[4].lin.hi[1] = 9; /* [4, 9) is 5 wide, shape[1] is 4 */
  expect(&p, VD_EINPUT, "tensor 11 'x'", "lin.hi[1]", "hi - lo = 4");
  p.tensors[4].lin.hi[1] = 8;
  p.tensors[6].lin.part_k = 2;
  expect(&p, VD_EINPUT, "tensor 13 'y'", "lin.part", "[0, 2), got 2");
  p.tensors[6].lin.part_k = 1;
  p.tensors[6].lin.mb_part = 1; /* mb 1 gives k = 2 */
  expect(&p, VD_EINPUT, "tensor 13 'y'", "lin.mb_part", "microbatch 1");
  p.tensors[6].lin.mb_part = 0;
  p.tensors[1].lin.mb_shift[0] = 4; /* persistent: one instance for all mbs */
  expect(&p, VD_EINPUT, "tensor 2 'w'", "lin.mb_shift[0]", "persistent");
  p.tensors[1].lin.mb_shift[0] = 0;
  p.tensors[0].lin.dp_shift[0] = -8; /* replica 1 starts at -8 */
  expect(&p, VD_EINPUT, "tensor 1 'x'", "lin.dp_shift[0]", "replica 1");
  p.tensors[0].lin.dp_shift[0] = INT64_MAX; /* overflow is an error, not UB */
  expect(&p, VD_EINPUT, "tensor 1 'x'", "lin.dp_shift[0]", "overflow");
  vd_plan_free(&p);

  build(&p, VD_PLAN_SINGLE);
  p.tensors[2].has_lin = 1;
  p.tensors[2].lin.part_n = 1;
  expect(&p, VD_EINPUT, "tensor 3 'y'", "lin", "single-device plan");
  vd_plan_free(&p);
}

static void test_node_fields(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  p.nodes[2].segment = 5;
  expect(&p, VD_EINPUT, "node 101 'fc'", "segment", "got 5 (no such segment)");
  p.nodes[2].segment = 0;
  p.nodes[2].rank = 7;
  expect(&p, VD_EINPUT, "node 101 'fc'", "rank", "got 7");
  p.nodes[2].rank = 1;
  p.nodes[2].phase = VD_PHASE__COUNT;
  expect(&p, VD_EINPUT, "node 101 'fc'", "phase", NULL);
  p.nodes[2].phase = VD_PHASE_FWD;
  p.nodes[2].layer = -5;
  expect(&p, VD_EINPUT, "node 101 'fc'", "layer", "got -5");
  p.nodes[2].layer = 0;
  p.nodes[3].id = 101;
  expect(&p, VD_EINPUT, "node 101", "id", "duplicate node id 101");
  p.nodes[3].id = 102;
  p.nodes[0].op = 0;
  expect(&p, VD_EINPUT, "node 1 'fc'", "op", "operator name");
  vd_plan_free(&p);
}

static void test_refs(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  uint32_t *in = p.refs + p.nodes[0].in_off;
  in[1] = 999;
  expect(&p, VD_EINPUT, "node 1 'fc'", "in[1]", "no such tensor");
  in[1] = 5; /* w of rank 1 */
  expect(&p, VD_EINPUT, "node 1 'fc'", "in[1]", "tensor 12 on rank 1");
  in[1] = 1;
  p.nodes[0].out_off = p.nodes[0].in_off;
  p.nodes[0].n_out = 2;
  in[1] = 0;
  expect(&p, VD_EINPUT, "node 1 'fc'", "out[1]", "listed twice");
  vd_plan_free(&p);
}

static void test_attrs(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_SINGLE);
  uint32_t last = (uint32_t)p.n_nodes - 1;
  assert_int_equal(vd_plan_attr_float(&p, last, "eps", 1e-5), VD_OK);
  assert_int_equal(vd_plan_attr_float(&p, last, "eps", 1e-6), VD_OK);
  expect(&p, VD_EINPUT, "node 2", "attrs.eps", "duplicate");
  vd_plan_free(&p);
  /* many attributes: the sorted path */
  build(&p, VD_PLAN_SINGLE);
  last = (uint32_t)p.n_nodes - 1;
  char key[16];
  for (int i = 0; i < 40; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    assert_int_equal(vd_plan_attr_int(&p, last, key, i), VD_OK);
  }
  vd_diag d;
  char line[256];
  assert_int_equal(run(&p, &d, line, sizeof(line)), VD_OK);
  assert_int_equal(vd_plan_attr_int(&p, last, "k17", 0), VD_OK);
  expect(&p, VD_EINPUT, "node 2", "attrs.k17", "duplicate");
  p.attrs[p.n_attrs - 1].kind = VD_ATTR_INTS;
  p.attrs[p.n_attrs - 1].v.off = 1000;
  p.attrs[p.n_attrs - 1].len = 3;
  expect(&p, VD_EINTERNAL, "node 2", "attrs.k17", "outside");
  vd_plan_free(&p);
}

static void test_collectives(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  int64_t *g = p.ints + p.nodes[1].group_off;
  g[1] = 0;
  expect(&p, VD_EINPUT, "node 2", "group[1]", "twice");
  g[1] = 2;
  expect(&p, VD_EINPUT, "node 2", "group[1]", "[0, 2), got 2");
  g[0] = 1;
  g[1] = 1;
  p.nodes[1].n_group = 1;
  expect(&p, VD_EINPUT, "node 2", "group", "containing the node's rank 0");
  g[0] = 0;
  g[1] = 1;
  p.nodes[1].n_group = 2;
  p.nodes[1].span_replicas = 1;
  expect(&p, VD_EINPUT, "node 102", "span_replicas", "same span_replicas as node 2");
  p.nodes[1].span_replicas = 0;
  p.nodes[3].coll = 8;
  expect(&p, VD_EINPUT, "node 2", "coll", "rank 1 has none");
  p.nodes[3].coll = -1;
  expect(&p, VD_EINPUT, "node 102", "group", "without a coll key");
  p.nodes[3].coll = -3;
  expect(&p, VD_EINPUT, "node 102", "coll", "got -3");
  /* two nodes of one rank with one key */
  p.nodes[3].coll = 7;
  p.nodes[2].coll = 7;
  p.nodes[2].group_off = p.nodes[3].group_off;
  p.nodes[2].n_group = 2;
  expect(&p, VD_EINPUT, "node 102", "coll", "rank 1 has two");
  vd_plan_free(&p);
  build(&p, VD_PLAN_SINGLE);
  p.nodes[1].span_replicas = 1;
  expect(&p, VD_EINPUT, "node 2", "span_replicas", "without a coll key");
  vd_plan_free(&p);
}

static vd_rc validate_run(void *ctx, vd_diag *d) { return vd_plan_validate(ctx, "m.plan", d); }

static void test_alloc_failures(void **state) {
  vd_plan_t p;
  build(&p, VD_PLAN_PARALLEL);
  assert_int_equal(tf_fail_each(validate_run, NULL, &p, 0, NULL), VD_OK);
  vd_plan_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_valid),       cmocka_unit_test(test_world),      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_tensor_fields), cmocka_unit_test(test_numel_overflow), cmocka_unit_test(test_lineage),
      cmocka_unit_test(test_node_fields), cmocka_unit_test(test_refs),       cmocka_unit_test(test_attrs),
      cmocka_unit_test(test_collectives), cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
