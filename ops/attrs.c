/*
 * ops/attrs.c - the attribute schema of every operator, and the check of a
 * plan's nodes against it (vd_op_check_plan).
 *
 * Why: the evaluators, encoders and reduction rules read attributes with
 * typed getters that fall back to a default when the key is absent OR of
 * another kind (plans/plan.h).  A softmax `dim` written as the float 2.0, a
 * rope `pos_offset` of 3.0 or an all_reduce `reduce` given as an integer were
 * therefore silently replaced by the default, in BOTH plans' encodings and in
 * the oracle alike, so a plan could be verified with semantics it does not
 * have.  Every attribute is now checked once, on load, against this table:
 * name, type, range, required or optional; an unknown key is an error too
 * (a misspelt "dims" would otherwise also read as the default).  The check
 * also enforces the arity of inputs and outputs per node (ops.def gives it
 * for local operators; collectives give their per-member arity here, since
 * ops.def's arity is that of the merged instance).
 *
 * Not here: ranges that depend on shapes (a dim against the tensor's rank,
 * chunk index against chunks) stay with the shape checks of ops/ops_num_*.c,
 * which name the node and field as well.  Operators outside the registry are
 * skipped: the verifier reports them as unsupported (exit 3).
 *
 * Which list an operator takes is the attrs column of its ops.def row
 * (AT(list), or AT_MEMBER for a collective's per-member arity); the lists
 * are below.  A row without that column does not compile (ops/ops.c names
 * every column); tests/ops/test_attrs.c checks every operator has a schema.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

/* ---- attribute lists ------------------------------------------------------ */

#define END {NULL, 0, 0, 0, 0, NULL}
#define DIM(n, req) {n, VD_AT_DIM, req, -VD_MAX_DIMS, VD_MAX_DIMS - 1, NULL}
#define INT(n, req, lo, hi) {n, VD_AT_INT, req, lo, hi, NULL}
#define NUM(n, req, lo, hi) {n, VD_AT_NUM, req, lo, hi, NULL}
#define BOOL(n) {n, VD_AT_INT, VD_AT_OPTIONAL, 0, 1, NULL}
#define ANYNUM(n, req) {n, VD_AT_NUM, req, -INFINITY, INFINITY, NULL}
#define BIG 9.0e18

static const vd_op_attr_spec A_NONE[] = {END};
static const vd_op_attr_spec A_TRANSPOSE[] = {DIM("dim0", VD_AT_REQUIRED), DIM("dim1", VD_AT_REQUIRED), END};
static const vd_op_attr_spec A_CHUNK[] = {DIM("dim", VD_AT_REQUIRED), INT("index", VD_AT_REQUIRED, 0, BIG),
                                          INT("chunks", VD_AT_REQUIRED, 1, BIG), END};
static const vd_op_attr_spec A_DIM[] = {DIM("dim", VD_AT_OPTIONAL), END};
/* add/sub/mul/div: the scalar operand is required exactly in the one-input
 * form; their backward operators carry it along (used by the one-input forms
 * of mul/div_backward). */
static const vd_op_attr_spec A_SCALAR[] = {ANYNUM("scalar", VD_AT_UNARY), END};
static const vd_op_attr_spec A_SCALAR_OPT[] = {ANYNUM("scalar", VD_AT_OPTIONAL), END};
static const vd_op_attr_spec A_EXPONENT[] = {ANYNUM("exponent", VD_AT_REQUIRED), END};
static const vd_op_attr_spec A_REDUCE[] = {{"dims", VD_AT_DIMS, VD_AT_OPTIONAL, -VD_MAX_DIMS, VD_MAX_DIMS - 1, NULL},
                                           BOOL("keepdim"), END};
static const vd_op_attr_spec A_FACTOR[] = {ANYNUM("factor", VD_AT_REQUIRED), END};
static const vd_op_attr_spec A_START[] = {INT("start", VD_AT_OPTIONAL, -BIG, BIG), END};
/* pick: checked = 1 when the program fails on a label outside [start, start +
 * classes) (nll_loss checks its targets); 0: such a label picks 0 (a masked
 * vocab shard's gather). */
static const vd_op_attr_spec A_PICK[] = {INT("start", VD_AT_OPTIONAL, -BIG, BIG), BOOL("checked"), END};
/* gelu: tanh = 1 for the tanh approximation (PyTorch's approximate="tanh",
 * GPT-2's gelu_new), another function than the exact erf form. */
static const vd_op_attr_spec A_GELU[] = {BOOL("tanh"), END};
static const vd_op_attr_spec A_EPS[] = {NUM("eps", VD_AT_OPTIONAL, 0, INFINITY), END};
static const vd_op_attr_spec A_ROPE[] = {NUM("theta", VD_AT_OPTIONAL, 0, INFINITY),
                                         INT("pos_offset", VD_AT_OPTIONAL, -BIG, BIG), DIM("seq_dim", VD_AT_OPTIONAL),
                                         END};
static const vd_op_attr_spec A_MASK[] = {INT("q_offset", VD_AT_OPTIONAL, -BIG, BIG),
                                         INT("k_offset", VD_AT_OPTIONAL, -BIG, BIG),
                                         ANYNUM("fill", VD_AT_OPTIONAL), END};
static const vd_op_attr_spec A_FILL[] = {ANYNUM("fill", VD_AT_OPTIONAL), END};
static const vd_op_attr_spec A_DROPOUT[] = {NUM("p", VD_AT_OPTIONAL, 0, 1),
                                            {"training", VD_AT_INT_OR_STR, VD_AT_OPTIONAL, 0, 1, NULL},
                                            BOOL("inplace"), END};
static const vd_op_attr_spec A_TOPK[] = {INT("k", VD_AT_OPTIONAL, 1, BIG), END};
static const vd_op_attr_spec A_GMLP[] = {INT("expert_start", VD_AT_OPTIONAL, 0, BIG), END};
static const vd_op_attr_spec A_GATE_FW[] = {{"score_func", VD_AT_STR, VD_AT_OPTIONAL, 0, 0, "sigmoid|softmax"},
                                            INT("n_groups", VD_AT_OPTIONAL, 1, BIG),
                                            INT("topk_groups", VD_AT_OPTIONAL, 1, BIG),
                                            INT("topk", VD_AT_OPTIONAL, 1, BIG),
                                            ANYNUM("route_scale", VD_AT_OPTIONAL), END};
static const vd_op_attr_spec A_MOE_GMM[] = {INT("n_routed_experts", VD_AT_OPTIONAL, 1, BIG),
                                            INT("local_expert_start", VD_AT_OPTIONAL, 0, BIG),
                                            INT("local_expert_end", VD_AT_OPTIONAL, 0, BIG), END};
static const vd_op_attr_spec A_ALL_REDUCE[] = {{"reduce", VD_AT_STR, VD_AT_OPTIONAL, 0, 0, "sum|max"}, END};
static const vd_op_attr_spec A_ALL_TO_ALL[] = {DIM("split_dim", VD_AT_OPTIONAL), DIM("concat_dim", VD_AT_OPTIONAL),
                                               END};
static const vd_op_attr_spec A_ROOT[] = {INT("root", VD_AT_OPTIONAL, 0, BIG), END};
static const vd_op_attr_spec A_CLIP[] = {NUM("max_norm", VD_AT_OPTIONAL, 0, INFINITY), END};
static const vd_op_attr_spec A_SGD[] = {ANYNUM("lr", VD_AT_OPTIONAL), ANYNUM("weight_decay", VD_AT_OPTIONAL), END};
static const vd_op_attr_spec A_ADAM[] = {ANYNUM("lr", VD_AT_OPTIONAL),
                                         NUM("beta1", VD_AT_OPTIONAL, 0, 1),
                                         NUM("beta2", VD_AT_OPTIONAL, 0, 1),
                                         NUM("eps", VD_AT_OPTIONAL, 0, INFINITY),
                                         INT("step", VD_AT_OPTIONAL, 1, BIG),
                                         ANYNUM("weight_decay", VD_AT_OPTIONAL), END};

/* ---- the table: ops.def's attrs column ------------------------------------- */

#define AT(list) {list, 0, 0, 0, 0, 0}
/* A collective's node is one member: its own inputs and outputs. */
#define AT_MEMBER(list, in_lo, in_hi, out_lo, out_hi) {list, 1, in_lo, in_hi, out_lo, out_hi}

static const vd_op_schema schema[VD_OP__COUNT] = {
#define VD_OP(ID, name, min_in, max_in, min_out, max_out, flags, bwd, attrs, ...) [VD_OP_##ID] = attrs,
#include "ops.def"
#undef VD_OP
};

#undef AT
#undef AT_MEMBER

const vd_op_schema *vd_op_attr_schema(vd_op_id op) {
  if (op < 0 || op >= VD_OP__COUNT) return NULL;
  return schema[op].attrs ? &schema[op] : NULL;
}

/* Inputs and outputs one node of op may have (hi = UINT32_MAX: unbounded). */
static void node_arity(vd_op_id op, uint32_t *in_lo, uint32_t *in_hi, uint32_t *out_lo, uint32_t *out_hi) {
  const vd_op_schema *s = vd_op_attr_schema(op);
  if (s && s->member_arity) {
    *in_lo = s->in_lo, *in_hi = s->in_hi, *out_lo = s->out_lo, *out_hi = s->out_hi;
    return;
  }
  const vd_op_info *i = vd_op_get(op);
  *in_lo = i->min_in, *in_hi = i->max_in == VD_OP_MANY ? UINT32_MAX : i->max_in;
  *out_lo = i->min_out, *out_hi = i->max_out == VD_OP_MANY ? UINT32_MAX : i->max_out;
}

/* ---- the check ----------------------------------------------------------------- */

typedef struct {
  const vd_plan_t *p;
  const char *file;
  const vd_node_t *n;
  vd_diag *d;
  char rec[160];
} actx;

static const char *rec(actx *c) {
  const char *nm = vd_plan_s(c->p, c->n->name);
  if (*nm)
    snprintf(c->rec, sizeof(c->rec), "node %lld '%s' (%s)", (long long)c->n->id, nm, vd_node_op(c->p, c->n));
  else
    snprintf(c->rec, sizeof(c->rec), "node %lld (%s)", (long long)c->n->id, vd_node_op(c->p, c->n));
  return c->rec;
}

#define BAD(c, field, ...) VD_FAIL((c)->d, VD_EINPUT, (c)->file, rec(c), (field), __VA_ARGS__)

static const char *type_text(vd_op_attr_type t) {
  switch (t) {
  case VD_AT_INT: return "an int";
  case VD_AT_NUM: return "a number";
  case VD_AT_STR: return "a string";
  case VD_AT_DIM: return "an int (a dimension)";
  case VD_AT_DIMS: return "an int or a list of ints (dimensions)";
  case VD_AT_INT_OR_STR: return "an int or a string";
  }
  return "?";
}

/* One value: kind against the type, then the range. */
static vd_rc check_value(actx *c, const vd_op_attr_spec *s, const vd_attr_t *a, const char *field) {
  char got[96];
  vd_attr_format(c->p, a, got, sizeof(got));
  int kind_ok = 0;
  switch (s->type) {
  case VD_AT_INT:
  case VD_AT_DIM: kind_ok = a->kind == VD_ATTR_INT; break;
  case VD_AT_NUM: kind_ok = a->kind == VD_ATTR_INT || a->kind == VD_ATTR_FLOAT; break;
  case VD_AT_STR: kind_ok = a->kind == VD_ATTR_STR; break;
  case VD_AT_DIMS: kind_ok = a->kind == VD_ATTR_INT || a->kind == VD_ATTR_INTS; break;
  case VD_AT_INT_OR_STR: kind_ok = a->kind == VD_ATTR_INT || a->kind == VD_ATTR_STR; break;
  }
  if (!kind_ok) BAD(c, field, "expected %s, got %s %s", type_text(s->type), vd_attr_kind_names[a->kind], got);
  if (a->kind == VD_ATTR_STR) {
    if (!s->choices) return VD_OK;
    const char *v = vd_plan_s(c->p, a->v.s);
    size_t lv = strlen(v);
    for (const char *o = s->choices; *o;) {
      const char *bar = strchr(o, '|');
      size_t lo = bar ? (size_t)(bar - o) : strlen(o);
      if (lo == lv && strncmp(o, v, lv) == 0) return VD_OK;
      o += lo + (bar ? 1 : 0);
    }
    BAD(c, field, "expected one of %s, got %s", s->choices, got);
  }
  if (a->kind == VD_ATTR_INTS) {
    for (uint32_t k = 0; k < a->len; k++) {
      int64_t v = c->p->ints[a->v.off + k];
      if ((double)v < s->lo || (double)v > s->hi)
        BAD(c, field, "expected every element in [%.0f, %.0f], got %s", s->lo, s->hi, got);
    }
    return VD_OK;
  }
  double v = a->kind == VD_ATTR_INT ? (double)a->v.i : a->v.f;
  if (s->type == VD_AT_INT_OR_STR) return VD_OK;
  /* NaN is allowed only where any number is (fill values). */
  if (isnan(v) ? !(isinf(s->lo) && isinf(s->hi)) : (v < s->lo || v > s->hi)) {
    char lo[32], hi[32];
    vd_plan_fmt_double(s->lo, lo, sizeof(lo));
    vd_plan_fmt_double(s->hi, hi, sizeof(hi));
    if (s->type != VD_AT_NUM) {
      snprintf(lo, sizeof(lo), "%.0f", s->lo);
      snprintf(hi, sizeof(hi), "%.0f", s->hi);
    }
    if (s->hi >= BIG) BAD(c, field, "expected a value >= %s, got %s", lo, got);
    BAD(c, field, "expected a value in [%s, %s], got %s", lo, hi, got);
  }
  return VD_OK;
}

static vd_rc check_node(actx *c) {
  const vd_plan_t *p = c->p;
  const vd_node_t *n = c->n;
  vd_op_id op = vd_op_lookup(vd_node_op(p, n));
  if (op == VD_OP__UNKNOWN) return VD_OK; /* unsupported: the verifier's answer (exit 3) */
  const vd_op_schema *s = vd_op_attr_schema(op);
  if (VD_NEVER(!s)) VD_FAIL(c->d, VD_EINTERNAL, c->file, rec(c), "op", "operator without an attribute schema");

  uint32_t il, ih, ol, oh;
  node_arity(op, &il, &ih, &ol, &oh);
  if (n->n_in < il || n->n_in > ih) {
    if (il == ih) BAD(c, "in", "expected %u input(s), got %u", il, n->n_in);
    if (ih == UINT32_MAX) BAD(c, "in", "expected at least %u input(s), got %u", il, n->n_in);
    BAD(c, "in", "expected %u to %u inputs, got %u", il, ih, n->n_in);
  }
  if (n->n_out < ol || n->n_out > oh) {
    if (ol == oh) BAD(c, "out", "expected %u output(s), got %u", ol, n->n_out);
    if (oh == UINT32_MAX) BAD(c, "out", "expected at least %u output(s), got %u", ol, n->n_out);
    BAD(c, "out", "expected %u to %u outputs, got %u", ol, oh, n->n_out);
  }

  char field[96];
  for (uint32_t i = 0; i < n->n_attr; i++) {
    const vd_attr_t *a = &p->attrs[n->attr_off + i];
    const char *key = vd_plan_s(p, a->key);
    const vd_op_attr_spec *sp = NULL;
    for (const vd_op_attr_spec *x = s->attrs; x->name; x++)
      if (strcmp(x->name, key) == 0) sp = x;
    snprintf(field, sizeof(field), "attrs.%s", key);
    if (!sp) {
      char known[256] = "";
      size_t used = 0;
      for (const vd_op_attr_spec *x = s->attrs; x->name && used + 2 < sizeof(known); x++) {
        int w = snprintf(known + used, sizeof(known) - used, "%s%s", used ? ", " : "", x->name);
        if (w < 0) break;
        used += (size_t)w;
      }
      if (!s->attrs[0].name) BAD(c, field, "unknown attribute: %s takes no attributes", vd_op_name(op));
      BAD(c, field, "unknown attribute of %s (known: %s)", vd_op_name(op), known);
    }
    VD_CHECK(check_value(c, sp, a, field));
  }
  for (const vd_op_attr_spec *x = s->attrs; x->name; x++) {
    int need = x->req == VD_AT_REQUIRED || (x->req == VD_AT_UNARY && n->n_in == 1);
    int forbid = x->req == VD_AT_UNARY && n->n_in != 1;
    const vd_attr_t *a = vd_node_attr(p, n, x->name);
    snprintf(field, sizeof(field), "attrs.%s", x->name);
    if (need && !a) {
      if (x->req == VD_AT_UNARY) BAD(c, field, "missing: %s with one input needs the scalar operand", vd_op_name(op));
      BAD(c, field, "missing (required by %s)", vd_op_name(op));
    }
    if (forbid && a && op != VD_OP_MUL_BACKWARD && op != VD_OP_DIV_BACKWARD)
      BAD(c, field, "unexpected: %s with %u inputs has no scalar operand", vd_op_name(op), n->n_in);
  }
  return VD_OK;
}

vd_rc vd_op_check_plan(const vd_plan_t *p, const char *file, vd_diag *d) {
  actx c = {p, file, NULL, d, ""};
  for (size_t i = 0; i < p->n_nodes; i++) {
    c.n = &p->nodes[i];
    VD_CHECK(check_node(&c));
  }
  return VD_OK;
}
