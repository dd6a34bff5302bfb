/*
 * tests/ops/test_op_table.c - every row of ops/ops.def has every column and
 * function it needs, and the columns agree with each other.
 *
 * A row missing a column does not compile (ops/ops.c names all thirteen);
 * a row without its evaluator, shape check, reduction rule or encoder does
 * not link.  What the compiler cannot see is checked here over all VD_OP
 * values: a column that is present but inconsistent with the row's arity,
 * attributes or flags (an index operand past the inputs, an equivariance
 * attribute the schema does not accept, a REPEATS copy that is not a copy,
 * an output bit past the outputs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../lineage/lineage.h"
#include "../../ops/ops.h"
#include "../../solver/smt.h"

/* The spec of attribute `name` in op's schema, or NULL. */
static const vd_op_attr_spec *attr_of(vd_op_id op, const char *name) {
  const vd_op_schema *s = vd_op_attr_schema(op);
  if (!s) return NULL;
  for (const vd_op_attr_spec *a = s->attrs; a->name; a++)
    if (strcmp(a->name, name) == 0) return a;
  return NULL;
}

/* Largest operand count of a side (VD_OP_MANY: any of 8 bits may be set). */
static unsigned bound(uint16_t hi) { return hi == VD_OP_MANY ? 8u : hi; }

/* Calls check on every row (operator, its info, its name); returns the sum of
 * what the calls return. */
static int each_row(int (*check)(vd_op_id op, const vd_op_info *in, const char *nm)) {
  int n = 0;
  for (int i = 0; i < VD_OP__COUNT; i++) n += check((vd_op_id)i, vd_op_get((vd_op_id)i), vd_op_name((vd_op_id)i));
  return n;
}

static int has_its_functions(vd_op_id op, const vd_op_info *in, const char *nm) {
  if (!in->eval || !in->shape) fail_msg("%s: no evaluator or shape check", nm);
  if (!vd_op_reduce_rule(op)) fail_msg("%s: no reduction rule", nm);
  if (!vd_smt_encoder(op)) fail_msg("%s: no encoder", nm);
  if (!vd_op_attr_schema(op)) fail_msg("%s: no attribute schema", nm);
  if (vd_op_eqv_of(op)->kind == VD_EQV__UNSET) fail_msg("%s: no equivariance", nm);
  if (!vd_lin_prop_rule_of(op)->set) fail_msg("%s: no propagation rule", nm);
  if (!in->reduction_safety || !*in->reduction_safety) fail_msg("%s: no reduction safety text", nm);
  return 0;
}

static void test_every_row_has_its_functions(void **st) {
  (void)st;
  each_row(has_its_functions);
}

/* 1 when the row has an index operand (and it fits), 0 when it has none. */
static int index_fits(vd_op_id op, const vd_op_info *in, const char *nm) {
  const vd_op_index *ix = vd_op_index_of(op);
  if (ix->slot < 0) return 0;
  /* the oracle and shape.c read in[slot] and operand t of every call */
  if ((unsigned)ix->slot >= in->min_in) fail_msg("%s: index slot %d past its inputs", nm, ix->slot);
  unsigned side = ix->from_out ? in->min_out : in->min_in;
  if (ix->t >= side || (!ix->from_out && ix->t == (unsigned)ix->slot))
    fail_msg("%s: index operand t=%u is not another operand", nm, ix->t);
  if (ix->ndim && ix->dim >= ix->ndim) fail_msg("%s: index dim %u past rank %u", nm, ix->dim, ix->ndim);
  const vd_op_attr_spec *a = ix->offset ? attr_of(op, ix->offset) : NULL;
  if (!a || a->type != VD_AT_INT) fail_msg("%s: index offset attribute is not an int attribute", nm);
  return 1;
}

static void test_index_column_fits_the_row(void **st) {
  (void)st;
  assert_int_equal(each_row(index_fits), 4); /* embedding, pick and their backward operators */
  assert_int_equal(vd_op_index_of(VD_OP_PICK)->slot, 1);
  assert_int_equal(vd_op_index_of(VD_OP_MATMUL)->slot, -1);
}

static int flags_agree(vd_op_id op, const vd_op_info *in, const char *nm) {
  (void)in;
  if (vd_op_has(op, VD_OPF_REPEATS) && !vd_op_has(op, VD_OPF_MOVES)) fail_msg("%s: REPEATS without MOVES", nm);
  /* a copy of elements is linear in its inputs */
  if (vd_op_has(op, VD_OPF_MOVES) && !vd_op_has(op, VD_OPF_LINEAR)) fail_msg("%s: MOVES but not LINEAR", nm);
  assert_int_equal(vd_op_copies_elements((int)op), vd_op_has(op, VD_OPF_MOVES));
  vd_op_id b = vd_op_backward(op);
  if (b != VD_OP__NONE && b != op && !vd_op_has(b, VD_OPF_BACKWARD) && !vd_op_has(op, VD_OPF_LINEAR))
    fail_msg("%s: backward %s is neither a backward operator nor a linear self-adjoint", nm, vd_op_name(b));
  return 0;
}

static void test_flags_agree(void **st) {
  (void)st;
  each_row(flags_agree);
  assert_true(vd_op_has(VD_OP_EXPAND, VD_OPF_REPEATS));
  assert_false(vd_op_copies_elements(VD_OP_ADD));
  assert_false(vd_op_copies_elements(-1));
}

static int eqv_fits(vd_op_id op, const vd_op_info *in, const char *nm) {
  const vd_op_eqv *e = vd_op_eqv_of(op);
  if (e->kind == VD_EQV_LEAD && e->lead_attr) {
    const vd_op_attr_spec *a = attr_of(op, e->lead_attr);
    if (!a || a->type != VD_AT_DIM) fail_msg("%s: position attribute %s is not a dim attribute", nm, e->lead_attr);
  }
  if (e->bwd0_rows >> bound(in->max_in)) fail_msg("%s: bwd0_rows names an input past max_in", nm);
  if ((e->row_outs | e->sum_outs) >> bound(in->max_out)) fail_msg("%s: an output bit past max_out", nm);
  if ((e->row_outs | e->sum_outs) && !e->bwd0_rows) fail_msg("%s: row or sum outputs without bwd0_rows", nm);
  if (e->kind != VD_EQV_RULE && (e->bwd0_rows || e->bcast_out)) fail_msg("%s: row forms need kind RULE", nm);
  return 0;
}

static void test_eqv_column_fits_the_row(void **st) {
  (void)st;
  each_row(eqv_fits);
  assert_int_equal(vd_op_eqv_of(VD_OP_GATE_FW_BACKWARD)->bwd0_rows, 0x3d);
  assert_int_equal(vd_op_eqv_of(VD_OP_GROUPED_MLP_BACKWARD)->sum_outs, 0x1c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_row_has_its_functions),
      cmocka_unit_test(test_index_column_fits_the_row),
      cmocka_unit_test(test_flags_agree),
      cmocka_unit_test(test_eqv_column_fits_the_row),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
