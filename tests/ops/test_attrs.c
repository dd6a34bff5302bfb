/*
 * tests/ops/test_attrs.c - the attribute schema (ops/attrs.c): every
 * operator has a row, and vd_op_check_plan rejects the mis-typed, unknown,
 * missing and out-of-range attributes and the wrong arities that used to be
 * read as defaults (issue 11, cause 4), naming the node and the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../ops/ops.h"
#include "../support/plan_builders.h"

static void test_every_operator_has_a_schema(void **state) {
  (void)state;
  for (int op = 0; op < VD_OP__COUNT; op++) {
    const vd_op_schema *s = vd_op_attr_schema((vd_op_id)op);
    if (!s) fail_msg("operator '%s' has no attribute schema row", vd_op_name((vd_op_id)op));
    /* Collectives state one member's arity; local operators use ops.def's. */
    assert_int_equal(s->member_arity != 0, vd_op_has((vd_op_id)op, VD_OPF_COLLECTIVE));
    for (const vd_op_attr_spec *a = s->attrs; a->name; a++) {
      assert_true(a->lo <= a->hi || a->type == VD_AT_STR);
      for (const vd_op_attr_spec *b = a + 1; b->name; b++) assert_string_not_equal(a->name, b->name);
    }
  }
  assert_null(vd_op_attr_schema(VD_OP__COUNT));
}

typedef enum { K_INT, K_FLOAT, K_STR, K_NONE } kind;

/* A one-rank plan: x[2,4] -> op -> y[2,4] (n_in inputs of x), with one
 * attribute (key = value of kind k). */
static void one_node(vd_plan_t *p, const char *op, uint32_t n_in, const char *key, kind k, double v,
                     const char *sv) {
  pb_ctx c;
  pb_begin(&c, p, VD_PLAN_SINGLE, 1, 1, 1);
  int32_t seg = pb_segment(&c, "fwd");
  uint32_t x = pb_tensor(&c, "x", 0, VD_ROLE_INPUT, VD_SCOPE_PER_MB, 2, 2, 4);
  uint32_t w = pb_tensor(&c, "w", 0, VD_ROLE_WEIGHT, VD_SCOPE_PERSISTENT, 2, 4, 4);
  uint32_t y = pb_tensor(&c, "y", 0, VD_ROLE_ACT, VD_SCOPE_PER_MB, 2, 2, 4);
  uint32_t ins[3] = {x, w, w};
  uint32_t n = pb_node(&c, op, "the_node", 0, seg, VD_PHASE_FWD, ins, n_in, PB_T(y));
  if (c.rc == VD_OK && k == K_INT) c.rc = vd_plan_attr_int(p, n, key, (int64_t)v);
  if (c.rc == VD_OK && k == K_FLOAT) c.rc = vd_plan_attr_float(p, n, key, v);
  if (c.rc == VD_OK && k == K_STR) c.rc = vd_plan_attr_str(p, n, key, sv);
  pb_step(&c, 0, seg, -1);
  assert_int_equal(c.rc, VD_OK);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_validate(p, "t.plan", &d), VD_OK); /* the reader's rules hold */
}

static void expect_bad(const char *op, uint32_t n_in, const char *key, kind k, double v, const char *sv,
                       const char *field, const char *text) {
  vd_plan_t p;
  one_node(&p, op, n_in, key, k, v, sv);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_op_check_plan(&p, "t.plan", &d), VD_EINPUT);
  char line[600];
  vd_diag_format(&d, line, sizeof(line));
  if (strcmp(d.field, field) != 0 || !strstr(line, text) || !strstr(line, "t.plan") ||
      !strstr(line, "node 1 'the_node'"))
    fail_msg("%s/%s: got '%s' (field '%s')", op, key ? key : "-", line, d.field);
  vd_plan_free(&p);
}

static void expect_ok(const char *op, uint32_t n_in, const char *key, kind k, double v, const char *sv) {
  vd_plan_t p;
  one_node(&p, op, n_in, key, k, v, sv);
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_op_check_plan(&p, "t.plan", &d) != VD_OK) {
    char line[600];
    vd_diag_format(&d, line, sizeof(line));
    fail_msg("%s/%s: unexpected: %s", op, key ? key : "-", line);
  }
  vd_plan_free(&p);
}

static void test_mistyped_attributes(void **state) {
  (void)state;
  /* The three examples of the issue: each read as its default before. */
  expect_bad("softmax", 1, "dim", K_FLOAT, 2.0, NULL, "attrs.dim", "expected an int (a dimension), got float 2.0");
  expect_bad("rope", 1, "pos_offset", K_FLOAT, 3.0, NULL, "attrs.pos_offset", "expected an int, got float 3.0");
  expect_bad("all_reduce", 1, "reduce", K_INT, 1, NULL, "attrs.reduce", "expected a string, got int 1");
  /* Strings out of their set, ranges, unknown keys, missing required ones. */
  expect_bad("all_reduce", 1, "reduce", K_STR, 0, "mean", "attrs.reduce", "expected one of sum|max, got \"mean\"");
  expect_bad("sum", 1, "dim", K_INT, 0, NULL, "attrs.dim", "unknown attribute of sum (known: dims, keepdim)");
  expect_bad("sum", 1, "keepdim", K_INT, 2, NULL, "attrs.keepdim", "expected a value in [0, 1], got 2");
  expect_bad("exp", 1, "scale", K_FLOAT, 2, NULL, "attrs.scale", "exp takes no attributes");
  expect_bad("pow", 1, NULL, K_NONE, 0, NULL, "attrs.exponent", "missing");
  expect_bad("mul", 1, NULL, K_NONE, 0, NULL, "attrs.scalar", "needs the scalar operand");
  expect_bad("mul", 2, "scalar", K_FLOAT, 2, NULL, "attrs.scalar", "has no scalar operand");
  expect_bad("dropout", 1, "p", K_FLOAT, 1.5, NULL, "attrs.p", "expected a value in [0.0, 1.0], got 1.5");
  expect_bad("transpose", 1, "dim0", K_INT, 0, NULL, "attrs.dim1", "missing");
  /* Accepted forms: an int for a real constant, a string or int flag. */
  expect_ok("scale", 1, "factor", K_INT, 2, NULL);
  expect_ok("softmax", 1, "dim", K_INT, -1, NULL);
  expect_ok("dropout", 1, "training", K_STR, 0, "self.training");
  expect_ok("all_reduce", 1, "reduce", K_STR, 0, "max");
  expect_ok("frobnicate", 1, "anything", K_FLOAT, 1, NULL); /* unsupported: the verifier says so (exit 3) */
}

static void test_arity(void **state) {
  (void)state;
  /* A linear with one input failed deep inside shape reduction (exit 3). */
  expect_bad("linear", 1, NULL, K_NONE, 0, NULL, "in", "expected 2 to 3 inputs, got 1");
  expect_bad("exp", 2, NULL, K_NONE, 0, NULL, "in", "expected 1 input(s), got 2");
  /* A collective member has one input and one output of its own. */
  expect_bad("all_gather", 2, NULL, K_NONE, 0, NULL, "in", "expected 1 input(s), got 2");
  expect_ok("linear", 3, NULL, K_NONE, 0, NULL);
}

static void test_generated_plans_pass(void **state) {
  (void)state;
  vd_rc (*mk[])(vd_plan_t *) = {pb_plan_linear2, pb_plan_tp2, pb_plan_pp2, pb_plan_mb2_accum, pb_plan_dp2};
  for (size_t i = 0; i < sizeof(mk) / sizeof(mk[0]); i++) {
    vd_plan_t p;
    assert_int_equal(mk[i](&p), VD_OK);
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(vd_op_check_plan(&p, "t.plan", &d), VD_OK);
    vd_plan_free(&p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_operator_has_a_schema),
      cmocka_unit_test(test_mistyped_attributes),
      cmocka_unit_test(test_arity),
      cmocka_unit_test(test_generated_plans_pass),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
