/*
 * ops/ops.c - the operator table, expanded from ops/ops.def, and its
 * accessors.
 *
 * The table is const and complete at compile time: a row missing a column
 * does not compile (the expansion below names all of them), a row without
 * evaluator or shape check does not link,
 * and tests/ops/test_ops_numeric.c checks that no required column is
 * NULL or empty and that docs/operators.md and the table name the same
 * operators.
 */
#include "ops.h"

#include <assert.h>
#include <string.h>

/* Prototypes of the evaluators and shape checks (ops/ops_num_*.c). */
#define VD_OP(ID, name, ...)                      \
  vd_rc vd_op_i_eval_##name(const vd_op_call *c); \
  vd_rc vd_op_i_shape_##name(const vd_op_call *c);
#include "ops.def"
#undef VD_OP

/* The index column: IX(slot, IN|OUT, t, dim, ndim, offset) or IX_NONE. */
#define IX_SIDE_IN 0
#define IX_SIDE_OUT 1
#define IX(slot, side, t, dim, ndim, offset) {slot, IX_SIDE_##side, t, dim, ndim, offset}
#define IX_NONE {-1, 0, 0, 0, 0, NULL}

/* Every column is named: a row with a column missing or extra does not
 * compile here (macro arity), whatever the other expansions read. */
const vd_op_info vd_op_table[VD_OP__COUNT] = {
#define VD_OP(ID, name, min_in, max_in, min_out, max_out, flags, bwd, attrs, eqv, prop, index, safety) \
  [VD_OP_##ID] = {#name, min_in, max_in, min_out, max_out, flags, VD_OP_##bwd,                        \
                  vd_op_i_eval_##name, vd_op_i_shape_##name, safety, index},
#include "ops.def"
#undef VD_OP
};

#undef IX
#undef IX_NONE
#undef IX_SIDE_IN
#undef IX_SIDE_OUT

int64_t vd_op_shape_numel(const vd_op_shape *s) {
  int64_t n = 1;
  for (int32_t i = 0; i < s->ndim; i++) n *= s->d[i];
  return n;
}

void vd_op_shape_unravel(const vd_op_shape *s, int64_t flat, int64_t *idx) {
  for (int32_t i = s->ndim - 1; i >= 0; i--) {
    int64_t e = s->d[i] > 0 ? s->d[i] : 1;
    idx[i] = flat % e;
    flat /= e;
  }
}

int64_t vd_op_shape_ravel(const vd_op_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int32_t i = 0; i < s->ndim; i++) f = f * s->d[i] + idx[i];
  return f;
}

int vd_op_bcast_to(const vd_op_shape *in, const vd_op_shape *out) {
  if (in->ndim > out->ndim) return 0;
  int32_t off = out->ndim - in->ndim;
  for (int32_t j = 0; j < in->ndim; j++)
    if (in->d[j] != 1 && in->d[j] != out->d[j + off]) return 0;
  return 1;
}

int64_t vd_op_bcast_src(const vd_op_shape *out, const vd_op_shape *in, const int64_t *idx) {
  int32_t off = out->ndim - in->ndim;
  int64_t f = 0;
  for (int32_t j = 0; j < in->ndim; j++) f = f * in->d[j] + (in->d[j] == 1 ? 0 : idx[j + off]);
  return f;
}

vd_op_id vd_op_lookup(const char *name) {
  if (!name) return VD_OP__UNKNOWN;
  for (int i = 0; i < VD_OP__COUNT; i++)
    if (strcmp(vd_op_table[i].name, name) == 0) return (vd_op_id)i;
  return VD_OP__UNKNOWN;
}

const vd_op_info *vd_op_get(vd_op_id op) {
  assert(op >= 0 && op < VD_OP__COUNT);
  return &vd_op_table[op];
}

const char *vd_op_name(vd_op_id op) { return vd_op_get(op)->name; }

int vd_op_copies_elements(int op) {
  return op >= 0 && op < VD_OP__COUNT && (vd_op_table[op].flags & VD_OPF_MOVES) != 0;
}
const vd_op_index *vd_op_index_of(vd_op_id op) { return &vd_op_get(op)->index; }
int vd_op_has(vd_op_id op, uint32_t flag) { return (vd_op_get(op)->flags & flag) != 0; }
vd_op_id vd_op_backward(vd_op_id op) { return (vd_op_id)vd_op_get(op)->backward; }

int vd_op_dropout_active(const vd_plan_t *plan, const vd_node_t *node, double *p) {
  *p = plan && node ? vd_node_attr_float(plan, node, "p", 0.5) : 0.5;
  if (!(*p > 0)) return 0;
  const vd_attr_t *t = plan && node ? vd_node_attr(plan, node, "training") : NULL;
  if (!t) return 1;
  if (t->kind == VD_ATTR_INT) return t->v.i != 0;
  if (t->kind == VD_ATTR_FLOAT) return t->v.f != 0;
  if (t->kind == VD_ATTR_STR) {
    const char *v = vd_node_attr_str(plan, node, "training", "");
    return strcmp(v, "False") && strcmp(v, "false") && strcmp(v, "0");
  }
  return 1;
}

vd_rc vd_op_check(const vd_op_call *c) {
  const char *rec = c->record ? c->record : "node";
  if (c->op < 0 || c->op >= VD_OP__COUNT)
    VD_FAIL(c->diag, VD_EINPUT, NULL, rec, "op", "expected a known operator, got id %d", c->op);
  const vd_op_info *oi = &vd_op_table[c->op];
  /* Collectives carry every participant: their shape rule checks arity
   * against the group size. */
  if (!(oi->flags & VD_OPF_COLLECTIVE)) {
    if (c->n_in < oi->min_in || (oi->max_in != VD_OP_MANY && c->n_in > oi->max_in))
      VD_FAIL(c->diag, VD_EINPUT, NULL, rec, "inputs",
              "%s: expected %u..%u inputs, got %u", oi->name, oi->min_in, oi->max_in, c->n_in);
    if (c->n_out < oi->min_out || (oi->max_out != VD_OP_MANY && c->n_out > oi->max_out))
      VD_FAIL(c->diag, VD_EINPUT, NULL, rec, "outputs",
              "%s: expected %u..%u outputs, got %u", oi->name, oi->min_out, oi->max_out, c->n_out);
  }
  return oi->shape(c);
}

vd_rc vd_op_eval(const vd_op_call *c) {
  VD_CHECK(vd_op_check(c));
  return vd_op_table[c->op].eval(c);
}
