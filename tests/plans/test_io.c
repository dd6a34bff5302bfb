/*
 * tests/plans/test_io.c - plan format v1 reader and writer (plans/io.c).
 *
 * Round trip: a plan built with the builder (lineage with every shift, attrs
 * of every kind, collectives, segments and schedule) is written, read back
 * and compared field by field.  Error paths: a valid plan is written as
 * JSON-like text in this file, converted to msgpack by a tiny converter
 * below, and one substring is replaced per test; each test asserts the return
 * code and the record, field and message of the one-line diagnostic.
 * Raw-byte cases (truncation, huge counts, trailing bytes) are built by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/mem.h"
#include "../../plans/plan.h"
#include "../support/fault.h"

/* ---- JSON-like text -> msgpack (test input only; no escapes) ----------- */

static size_t count_items(const char *s) {
  int depth = 0, instr = 0, any = 0;
  size_t n = 0;
  for (; *s; s++) {
    if (instr) {
      if (*s == '"') instr = 0;
      continue;
    }
    if (*s == '"') { instr = 1; any = 1; continue; }
    if (*s == '[' || *s == '{') { depth++; any = 1; continue; }
    if (*s == ']' || *s == '}') {
      if (depth == 0) break;
      depth--;
      continue;
    }
    if (*s == ',' && depth == 0) n++;
    else if (!isspace((unsigned char)*s)) any = 1;
  }
  return any ? n + 1 : 0;
}

static void ws(const char **s) {
  while (isspace((unsigned char)**s)) (*s)++;
}

static void conv(const char **s, msgpack_packer *pk) {
  ws(s);
  char ch = **s;
  if (ch == '{' || ch == '[') {
    (*s)++;
    size_t n = count_items(*s);
    if (ch == '{') msgpack_pack_map(pk, n);
    else msgpack_pack_array(pk, n);
    for (size_t i = 0; i < n; i++) {
      conv(s, pk);
      ws(s);
      if (ch == '{') {
        assert_int_equal(**s, ':');
        (*s)++;
        conv(s, pk);
        ws(s);
      }
      if (**s == ',') (*s)++;
    }
    ws(s);
    assert_true(**s == (ch == '{' ? '}' : ']'));
    (*s)++;
  } else if (ch == '"') {
    const char *e = strchr(*s + 1, '"');
    assert_non_null(e);
    msgpack_pack_str(pk, (size_t)(e - *s - 1));
    msgpack_pack_str_body(pk, *s + 1, (size_t)(e - *s - 1));
    *s = e + 1;
  } else if (strncmp(*s, "true", 4) == 0) { msgpack_pack_true(pk); *s += 4; }
  else if (strncmp(*s, "false", 5) == 0) { msgpack_pack_false(pk); *s += 5; }
  else if (strncmp(*s, "null", 4) == 0) { msgpack_pack_nil(pk); *s += 4; }
  else {
    const char *e = *s;
    int isf = 0;
    while (*e && strchr("+-0123456789.eE", *e)) {
      if (*e == '.' || *e == 'e' || *e == 'E') isf = 1;
      e++;
    }
    assert_true(e > *s);
    if (isf) msgpack_pack_double(pk, strtod(*s, NULL));
    else if (**s == '-') msgpack_pack_int64(pk, strtoll(*s, NULL, 10));
    else msgpack_pack_uint64(pk, strtoull(*s, NULL, 10));
    *s = e;
  }
}

static void json_to_msgpack(const char *json, msgpack_sbuffer *sb) {
  msgpack_sbuffer_init(sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
  conv(&json, &pk);
  ws(&json);
  assert_int_equal(*json, '\0');
}

/* A 2-rank tensor-parallel (row-parallel) linear layer with an all-reduce,
 * 2 replicas, 2 microbatches.  Single plan: x[16,8] @ w[8,6] = z[16,6]. */
static const char *const BASE =
    "{\"format\":\"verdict-plan\",\"version\":1,\"kind\":\"parallel\",\"model\":\"tp-linear\","
    "\"world\":{\"dp\":2,\"tp\":2,\"pp\":1,\"sp\":0,\"cp\":1,\"ep\":1,\"nm\":2,\"replicas\":2,"
    "\"stored_ranks\":2,\"layout\":\"tp,dp\"},"
    "\"segments\":[\"fwd\",\"bwd\"],"
    "\"schedule\":[[[0,0],[0,1],[1,-1]],[[0,0],[0,1],[1,-1]]],"
    "\"tensors\":["
    "{\"id\":10,\"name\":\"x0\",\"shape\":[4,4],\"role\":\"input\",\"scope\":\"mb\","
    "\"lin\":{\"full\":1,\"dp_shift\":[8,0],\"mb_shift\":[4,0]}},"
    "{\"id\":11,\"name\":\"w0\",\"shape\":[4,6],\"role\":\"weight\",\"scope\":\"persistent\",\"lin\":{\"full\":2}},"
    "{\"id\":12,\"name\":\"y0\",\"shape\":[4,6],\"role\":\"act\",\"scope\":\"mb\","
    "\"lin\":{\"full\":3,\"part\":[0,2],\"dp_shift\":[8,0],\"mb_shift\":[4,0]}},"
    "{\"id\":13,\"name\":\"z0\",\"shape\":[4,6],\"role\":\"act\",\"scope\":\"mb\","
    "\"lin\":{\"full\":3,\"dp_shift\":[8,0],\"mb_shift\":[4,0]}},"
    "{\"id\":20,\"name\":\"x1\",\"rank\":1,\"shape\":[4,4],\"dtype\":\"bf16\",\"role\":\"input\",\"scope\":\"mb\","
    "\"lin\":{\"full\":1,\"lo\":[0,4],\"dp_shift\":[8,0],\"mb_shift\":[4,0]}},"
    "{\"id\":21,\"name\":\"w1\",\"rank\":1,\"shape\":[4,6],\"role\":\"weight\",\"scope\":\"persistent\","
    "\"lin\":{\"full\":2,\"lo\":[4,0]}},"
    "{\"id\":22,\"name\":\"y1\",\"rank\":1,\"shape\":[4,6],\"role\":\"act\",\"scope\":\"mb\","
    "\"lin\":{\"full\":3,\"part\":[1,2],\"dp_shift\":[8,0],\"mb_shift\":[4,0]}},"
    "{\"id\":23,\"name\":\"z1\",\"rank\":1,\"shape\":[4,6],\"role\":\"act\",\"scope\":\"mb\"}"
    "],"
    "\"nodes\":["
    "{\"id\":100,\"op\":\"linear\",\"name\":\"fc\",\"segment\":0,\"layer\":0,\"phase\":\"fwd\","
    "\"in\":[10,11],\"out\":[12],\"attrs\":{\"bias\":false,\"scale\":0.5,\"mode\":\"row\",\"dims\":[1,2],\"w\":[1,2.5]}},"
    "{\"id\":101,\"op\":\"all_reduce\",\"segment\":0,\"phase\":\"comm\",\"in\":[12],\"out\":[13],"
    "\"coll\":7,\"group\":[0,1]},"
    "{\"id\":200,\"op\":\"linear\",\"name\":\"fc\",\"rank\":1,\"segment\":0,\"layer\":0,\"phase\":\"fwd\","
    "\"in\":[20,21],\"out\":[22]},"
    "{\"id\":201,\"op\":\"all_reduce\",\"rank\":1,\"segment\":0,\"phase\":\"comm\",\"in\":[22],\"out\":[23],"
    "\"coll\":7,\"group\":[0,1],\"x_note\":\"extension keys are ignored\"}"
    "]}";

/* Returns BASE with the first occurrence of `from` replaced by `to`. */
static char *patch(const char *from, const char *to) {
  const char *at = strstr(BASE, from);
  if (!at) fail_msg("patch target not in BASE: %s", from);
  size_t n = strlen(BASE) - strlen(from) + strlen(to) + 1;
  char *s = malloc(n);
  size_t pre = (size_t)(at - BASE);
  memcpy(s, BASE, pre);
  strcpy(s + pre, to);
  strcat(s, at + strlen(from));
  return s;
}

static vd_rc read_json(const char *json, vd_plan_t *p, vd_diag *d, char *line, size_t n) {
  msgpack_sbuffer sb;
  json_to_msgpack(json, &sb);
  vd_diag_clear(d);
  vd_rc rc = vd_plan_read_buffer(sb.data, sb.size, "t.plan", p, d);
  msgpack_sbuffer_destroy(&sb);
  line[0] = '\0';
  if (rc != VD_OK) vd_diag_format(d, line, n);
  return rc;
}

/* Applies one patch to BASE and expects an input error naming the record,
 * the field and a message fragment. */
static void expect_err(const char *from, const char *to, const char *record, const char *field, const char *msg) {
  char *json = patch(from, to);
  vd_plan_t p;
  vd_diag d;
  char line[1024];
  vd_rc rc = read_json(json, &p, &d, line, sizeof(line));
  free(json);
  if (rc != VD_EINPUT) fail_msg("expected EINPUT for %s -> %s, got %d (%s)", from, to, rc, line);
  assert_string_equal(d.file, "t.plan");
  if (record && strcmp(d.record, record) != 0) fail_msg("record: want '%s', got line: %s", record, line);
  if (field && strcmp(d.field, field) != 0) fail_msg("field: want '%s', got line: %s", field, line);
  if (msg && !strstr(d.msg, msg)) fail_msg("msg: want '%s' in line: %s", msg, line);
  assert_null(p.tensors); /* left freed */
  assert_null(p.pool);
}

/* ---- the base plan reads, with the right contents ------------------------ */

static void test_base_reads(void **state) {
  vd_plan_t p;
  vd_diag d;
  char line[512];
  assert_int_equal(read_json(BASE, &p, &d, line, sizeof(line)), VD_OK);
  assert_int_equal(p.kind, VD_PLAN_PARALLEL);
  assert_string_equal(vd_plan_s(&p, p.model), "tp-linear");
  assert_int_equal(p.world.tp, 2);
  assert_int_equal(p.world.nm, 2);
  assert_int_equal(p.world.stored_ranks, 2);
  assert_string_equal(vd_plan_s(&p, p.world.layout), "tp,dp");
  assert_int_equal(p.n_segments, 2);
  assert_int_equal(p.programs[1].n_steps, 3);
  assert_int_equal(p.steps[p.programs[1].step_off + 2].mb, -1);
  assert_int_equal(p.n_tensors, 8);
  const vd_tensor_t *x1 = &p.tensors[4];
  assert_int_equal(x1->id, 20);
  assert_int_equal(x1->rank, 1);
  assert_int_equal(x1->dtype, VD_DT_BF16);
  assert_int_equal(p.tensors[0].dtype, VD_DT_F32); /* default */
  assert_int_equal(x1->lin.lo[1], 4);
  assert_int_equal(x1->lin.hi[1], 8); /* default hi = lo + shape */
  assert_int_equal(x1->lin.part_n, 1);
  assert_int_equal(p.tensors[6].lin.part_k, 1);
  assert_int_equal(p.tensors[6].lin.part_n, 2);
  assert_int_equal(p.tensors[0].lin.dp_shift[0], 8);
  assert_false(p.tensors[7].has_lin);
  const vd_node_t *n = &p.nodes[0];
  assert_string_equal(vd_node_op(&p, n), "linear");
  assert_int_equal(n->layer, 0);
  assert_int_equal(p.nodes[1].layer, -1);
  assert_int_equal(vd_node_inputs(&p, n)[1], 1); /* tensor id 11 -> index 1 */
  assert_int_equal(vd_node_attr_int(&p, n, "bias", 7), 0);
  assert_true(vd_node_attr_float(&p, n, "scale", 0) == 0.5);
  assert_string_equal(vd_node_attr_str(&p, n, "mode", ""), "row");
  const vd_attr_t *a = vd_node_attr(&p, n, "dims");
  assert_int_equal(a->kind, VD_ATTR_INTS);
  assert_int_equal(p.ints[a->v.off + 1], 2);
  a = vd_node_attr(&p, n, "w");
  assert_int_equal(a->kind, VD_ATTR_FLOATS); /* any float makes it floats */
  assert_true(p.floats[a->v.off] == 1.0 && p.floats[a->v.off + 1] == 2.5);
  assert_int_equal(p.nodes[3].coll, 7);
  assert_int_equal(p.nodes[3].n_group, 2);
  assert_int_equal(p.nodes[0].coll, -1);
  vd_plan_free(&p);
}

/* The example in docs/plan-format.md is a valid plan (tests run from the
 * repository root). */
static void test_doc_example(void **state) {
  FILE *f = fopen("docs/plan-format.md", "rb");
  assert_non_null(f);
  static char doc[200000];
  size_t n = fread(doc, 1, sizeof(doc) - 1, f);
  fclose(f);
  doc[n] = '\0';
  char *start = strstr(doc, "```json\n");
  assert_non_null(start);
  start += 8;
  char *end = strstr(start, "```");
  assert_non_null(end);
  *end = '\0';
  vd_plan_t p;
  vd_diag d;
  char line[512];
  if (read_json(start, &p, &d, line, sizeof(line)) != VD_OK) fail_msg("doc example: %s", line);
  assert_int_equal(p.n_tensors, 8);
  assert_int_equal(p.n_nodes, 4);
  assert_int_equal(p.tensors[6].lin.part_k, 1);
  vd_plan_free(&p);
}

/* ---- round trip ---------------------------------------------------------- */

/* build_rich's tensors of rank r, into t[0..3]: an annotated activation, a
 * scalar optimizer state with a negative id and no name, a bool loss and an
 * 8-dim gradient. */
static void rich_tensors(vd_plan_t *p, int r, uint32_t *t) {
  vd_tensor_t a = {.id = 100 * r + 1, .rank = r, .ndim = 3, .shape = {2, 3, 5}, .dtype = VD_DT_F16,
                   .role = VD_ROLE_ACT, .scope = VD_SCOPE_PER_MB, .has_lin = 1};
  a.lin = (vd_lineage_ann){.full = 9, .lo = {0, 3 * r, 1}, .hi = {2, 3 * r + 3, 6}, .part_k = r, .part_n = 4,
                           .dp_shift = {4, 0, 0}, .mb_shift = {2, 0, 0}, .dp_part = 2, .mb_part = 0};
  assert_int_equal(vd_plan_add_tensor(p, &a, r ? "a1" : "a0", &t[0]), VD_OK);
  vd_tensor_t b = {.id = -(100 * r + 2), .rank = r, .ndim = 0, .dtype = VD_DT_I64, .role = VD_ROLE_OPTSTATE,
                   .scope = VD_SCOPE_PERSISTENT, .has_lin = 1};
  b.lin = (vd_lineage_ann){.full = 12, .part_n = 1}; /* optimizer state must be annotated (validate.c) */
  assert_int_equal(vd_plan_add_tensor(p, &b, "", &t[1]), VD_OK);
  vd_tensor_t c = {.id = 100 * r + 3, .rank = r, .ndim = 1, .shape = {7}, .dtype = VD_DT_BOOL,
                   .role = VD_ROLE_LOSS, .scope = VD_SCOPE_PER_MB, .has_lin = 1};
  c.lin = (vd_lineage_ann){.full = 11, .lo = {0}, .hi = {7}, .part_k = 0, .part_n = 2, .mb_part = 1};
  assert_int_equal(vd_plan_add_tensor(p, &c, "loss", &t[2]), VD_OK);
  vd_tensor_t e = {.id = 100 * r + 4, .rank = r, .ndim = 8, .shape = {1, 2, 1, 2, 1, 2, 1, 2},
                   .dtype = VD_DT_F64, .role = VD_ROLE_GRAD, .scope = VD_SCOPE_PERSISTENT};
  assert_int_equal(vd_plan_add_tensor(p, &e, "g", &t[3]), VD_OK);
}

/* build_rich's attributes of node ni: one of every kind, with extreme values. */
static void rich_attrs(vd_plan_t *p, uint32_t ni) {
  assert_int_equal(vd_plan_attr_int(p, ni, "i", -42), VD_OK);
  assert_int_equal(vd_plan_attr_int(p, ni, "big", INT64_MIN), VD_OK);
  assert_int_equal(vd_plan_attr_float(p, ni, "f", 1e-5), VD_OK);
  assert_int_equal(vd_plan_attr_float(p, ni, "ninf", -INFINITY), VD_OK);
  assert_int_equal(vd_plan_attr_float(p, ni, "whole", 2.0), VD_OK); /* stays float */
  assert_int_equal(vd_plan_attr_str(p, ni, "s", "causal"), VD_OK);
  int64_t iv[3] = {-1, 0, INT64_MAX};
  assert_int_equal(vd_plan_attr_ints(p, ni, "ints", iv, 3), VD_OK);
  assert_int_equal(vd_plan_attr_ints(p, ni, "none", NULL, 0), VD_OK);
  double fv[3] = {0.25, -3.0, 1e300};
  assert_int_equal(vd_plan_attr_floats(p, ni, "floats", fv, 3), VD_OK);
}

static void build_rich(vd_plan_t *p) {
  assert_int_equal(vd_plan_init(p, VD_PLAN_PARALLEL), VD_OK);
  assert_int_equal(vd_plan_str(p, "rich model", &p->model), VD_OK);
  vd_world_t w = {.dp = 2, .tp = 2, .pp = 1, .sp = 1, .cp = 1, .ep = 1, .nm = 2, .replicas = 2, .stored_ranks = 2};
  assert_int_equal(vd_plan_str(p, "tp,dp", &w.layout), VD_OK);
  assert_int_equal(vd_plan_set_world(p, &w), VD_OK);
  int32_t s;
  assert_int_equal(vd_plan_add_segment(p, "fwd", &s), VD_OK);
  assert_int_equal(vd_plan_add_segment(p, "bwd", &s), VD_OK);
  assert_int_equal(vd_plan_add_segment(p, "opt", &s), VD_OK);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(vd_plan_add_step(p, r, 0, 0), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 0, 1), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 1, 1), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 1, 0), VD_OK);
    assert_int_equal(vd_plan_add_step(p, r, 2, -1), VD_OK);
  }
  uint32_t t[8];
  for (int r = 0; r < 2; r++) rich_tensors(p, r, &t[4 * r]);
  uint32_t ni;
  for (int r = 0; r < 2; r++) {
    vd_node_t n = {.id = 1000 + r, .rank = r, .segment = 0, .layer = 3, .phase = VD_PHASE_FWD, .coll = -1};
    uint32_t in[2] = {t[4 * r], t[4 * r]}, out[2] = {t[4 * r + 2], t[4 * r + 3]};
    n.src = 12345; /* a foreign pool offset: add_node must not keep it */
    assert_int_equal(vd_plan_add_node(p, &n, "mul", "layers.3.mul", in, 2, out, 2, NULL, 0, &ni), VD_OK);
    assert_int_equal(p->nodes[ni].src, 0);
    if (r) assert_int_equal(vd_plan_set_node_src(p, ni, "model.py:42 torch.mul"), VD_OK);
    if (r) assert_int_equal(vd_plan_set_node_stack(p, ni, "model.py:42 in forward\ntrain.py:7 in step"), VD_OK);
    rich_attrs(p, ni);
  }
  for (int r = 0; r < 2; r++) {
    int64_t g[2] = {1, 0};
    vd_node_t n = {.id = 2000 + r, .rank = r, .segment = 1, .layer = -1, .phase = VD_PHASE_COMM, .coll = 5,
                   .span_replicas = 1};
    uint32_t io = t[4 * r + 3];
    assert_int_equal(vd_plan_add_node(p, &n, "all_reduce", "", &io, 1, &io, 1, g, 2, &ni), VD_OK);
    vd_node_t o = {.id = 3000 + r, .rank = r, .segment = 2, .layer = -1, .phase = VD_PHASE_OPT, .coll = -1};
    uint32_t b = t[4 * r + 1];
    assert_int_equal(vd_plan_add_node(p, &o, "adam", "opt", &b, 1, &b, 1, NULL, 0, &ni), VD_OK);
  }
  /* a send/recv pair sharing a key */
  int64_t sr[2] = {0, 1};
  vd_node_t snd = {.id = 4000, .rank = 0, .segment = 0, .layer = -1, .phase = VD_PHASE_COMM, .coll = 6};
  assert_int_equal(vd_plan_add_node(p, &snd, "send", "", &t[0], 1, NULL, 0, sr, 2, &ni), VD_OK);
  vd_node_t rcv = {.id = 4001, .rank = 1, .segment = 0, .layer = -1, .phase = VD_PHASE_COMM, .coll = 6};
  assert_int_equal(vd_plan_add_node(p, &rcv, "recv", "", NULL, 0, &t[4], 1, sr, 2, &ni), VD_OK);
  vd_diag d;
  vd_diag_clear(&d);
  char line[512];
  if (vd_plan_validate(p, "rich", &d) != VD_OK) {
    vd_diag_format(&d, line, sizeof(line));
    fail_msg("rich plan invalid: %s", line);
  }
}

static void same_str(const vd_plan_t *a, uint32_t x, const vd_plan_t *b, uint32_t y) {
  assert_string_equal(vd_plan_s(a, x), vd_plan_s(b, y));
}

/* The header, world, segments and every rank's program of a and b agree. */
static void same_header(const vd_plan_t *a, const vd_plan_t *b) {
  assert_int_equal(a->kind, b->kind);
  same_str(a, a->model, b, b->model);
  const vd_world_t *wa = &a->world, *wb = &b->world;
  assert_true(wa->dp == wb->dp && wa->tp == wb->tp && wa->pp == wb->pp && wa->sp == wb->sp && wa->cp == wb->cp &&
              wa->ep == wb->ep && wa->nm == wb->nm && wa->replicas == wb->replicas &&
              wa->stored_ranks == wb->stored_ranks);
  same_str(a, wa->layout, b, wb->layout);
  assert_int_equal(a->n_segments, b->n_segments);
  for (size_t i = 0; i < a->n_segments; i++) same_str(a, a->segments[i], b, b->segments[i]);
  for (int r = 0; r < wa->stored_ranks; r++) {
    assert_int_equal(a->programs[r].n_steps, b->programs[r].n_steps);
    for (uint32_t i = 0; i < a->programs[r].n_steps; i++) {
      const vd_step_t *sa = &a->steps[a->programs[r].step_off + i], *sb = &b->steps[b->programs[r].step_off + i];
      assert_int_equal(sa->segment, sb->segment);
      assert_int_equal(sa->mb, sb->mb);
    }
  }
}

/* Tensor x of plan a and tensor y of plan b agree, lineage annotation included. */
static void same_tensor(const vd_plan_t *a, const vd_tensor_t *x, const vd_plan_t *b, const vd_tensor_t *y) {
  assert_int_equal(x->id, y->id);
  same_str(a, x->name, b, y->name);
  assert_int_equal(x->rank, y->rank);
  assert_int_equal(x->ndim, y->ndim);
  for (int k = 0; k < x->ndim; k++) assert_int_equal(x->shape[k], y->shape[k]);
  assert_int_equal(x->dtype, y->dtype);
  assert_int_equal(x->role, y->role);
  assert_int_equal(x->scope, y->scope);
  assert_int_equal(x->has_lin, y->has_lin);
  if (!x->has_lin) return;
  const vd_lineage_ann *l = &x->lin, *m = &y->lin;
  assert_int_equal(l->full, m->full);
  for (int k = 0; k < x->ndim; k++) {
    assert_int_equal(l->lo[k], m->lo[k]);
    assert_int_equal(l->hi[k], m->hi[k]);
    assert_int_equal(l->dp_shift[k], m->dp_shift[k]);
    assert_int_equal(l->mb_shift[k], m->mb_shift[k]);
  }
  assert_int_equal(l->part_k, m->part_k);
  assert_int_equal(l->part_n, m->part_n);
  assert_int_equal(l->dp_part, m->dp_part);
  assert_int_equal(l->mb_part, m->mb_part);
}

/* Attribute p of plan a and attribute q of plan b agree (floats bit for bit). */
static void same_attr(const vd_plan_t *a, const vd_attr_t *p, const vd_plan_t *b, const vd_attr_t *q) {
  same_str(a, p->key, b, q->key);
  assert_int_equal(p->kind, q->kind);
  switch (p->kind) {
  case VD_ATTR_INT: assert_int_equal(p->v.i, q->v.i); break;
  case VD_ATTR_FLOAT: assert_memory_equal(&p->v.f, &q->v.f, sizeof(double)); break;
  case VD_ATTR_STR: same_str(a, p->v.s, b, q->v.s); break;
  case VD_ATTR_INTS:
    assert_int_equal(p->len, q->len);
    for (uint32_t j = 0; j < p->len; j++) assert_int_equal(a->ints[p->v.off + j], b->ints[q->v.off + j]);
    break;
  case VD_ATTR_FLOATS:
    assert_int_equal(p->len, q->len);
    for (uint32_t j = 0; j < p->len; j++)
      assert_memory_equal(&a->floats[p->v.off + j], &b->floats[q->v.off + j], sizeof(double));
    break;
  }
}

/* Node x of plan a and node y of plan b agree, attributes included. */
static void same_node(const vd_plan_t *a, const vd_node_t *x, const vd_plan_t *b, const vd_node_t *y) {
  assert_int_equal(x->id, y->id);
  same_str(a, x->op, b, y->op);
  same_str(a, x->name, b, y->name);
  same_str(a, x->src, b, y->src);
  same_str(a, x->stack, b, y->stack);
  assert_int_equal(x->rank, y->rank);
  assert_int_equal(x->segment, y->segment);
  assert_int_equal(x->layer, y->layer);
  assert_int_equal(x->phase, y->phase);
  assert_int_equal(x->n_in, y->n_in);
  assert_int_equal(x->n_out, y->n_out);
  for (uint32_t k = 0; k < x->n_in; k++) assert_int_equal(vd_node_inputs(a, x)[k], vd_node_inputs(b, y)[k]);
  for (uint32_t k = 0; k < x->n_out; k++) assert_int_equal(vd_node_outputs(a, x)[k], vd_node_outputs(b, y)[k]);
  assert_int_equal(x->coll, y->coll);
  assert_int_equal(x->span_replicas, y->span_replicas);
  assert_int_equal(x->n_group, y->n_group);
  for (uint32_t k = 0; k < x->n_group; k++) assert_int_equal(vd_node_group(a, x)[k], vd_node_group(b, y)[k]);
  assert_int_equal(x->n_attr, y->n_attr);
  for (uint32_t k = 0; k < x->n_attr; k++) same_attr(a, &a->attrs[x->attr_off + k], b, &b->attrs[y->attr_off + k]);
}

static void compare_plans(const vd_plan_t *a, const vd_plan_t *b) {
  same_header(a, b);
  assert_int_equal(a->n_tensors, b->n_tensors);
  for (size_t i = 0; i < a->n_tensors; i++) same_tensor(a, &a->tensors[i], b, &b->tensors[i]);
  assert_int_equal(a->n_nodes, b->n_nodes);
  for (size_t i = 0; i < a->n_nodes; i++) same_node(a, &a->nodes[i], b, &b->nodes[i]);
}

static void tmp_dir(char *buf, size_t n) {
  snprintf(buf, n, "/tmp/vd_test_io_XXXXXX");
  assert_non_null(mkdtemp(buf));
}

static int count_files(const char *dir) {
  DIR *dh = opendir(dir);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh)))
    if (e->d_name[0] != '.') n++;
  closedir(dh);
  return n;
}

static void test_round_trip(void **state) {
  vd_plan_t a, b, c;
  vd_diag d;
  char dir[64], path[128], line[512];
  build_rich(&a);
  tmp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/rich.plan", dir);
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_write_file(&a, path, &d), VD_OK);
  assert_int_equal(count_files(dir), 1); /* no temporary left behind */
  vd_rc rc = vd_plan_read_file(path, &b, &d);
  if (rc != VD_OK) {
    vd_diag_format(&d, line, sizeof(line));
    fail_msg("read back: %s", line);
  }
  compare_plans(&a, &b);
  /* Writing the read plan gives the same bytes (defaults stay omitted). */
  char path2[160];
  snprintf(path2, sizeof(path2), "%s/again.plan", dir);
  assert_int_equal(vd_plan_write_file(&b, path2, &d), VD_OK);
  assert_int_equal(vd_plan_read_file(path2, &c, &d), VD_OK);
  compare_plans(&a, &c);
  FILE *f1 = fopen(path, "rb"), *f2 = fopen(path2, "rb");
  char b1[8192], b2[8192];
  size_t n1 = fread(b1, 1, sizeof(b1), f1), n2 = fread(b2, 1, sizeof(b2), f2);
  fclose(f1);
  fclose(f2);
  assert_int_equal(n1, n2);
  assert_memory_equal(b1, b2, n1);
  unlink(path);
  unlink(path2);
  rmdir(dir);
  vd_plan_free(&a);
  vd_plan_free(&b);
  vd_plan_free(&c);
}

static void test_empty_floats_become_ints(void **state) {
  /* msgpack cannot tell an empty float array from an empty int array; the
   * format defines it as ints (docs/plan-format.md). */
  char *json = patch("\"w\":[1,2.5]", "\"w\":[]");
  vd_plan_t p;
  vd_diag d;
  char line[256];
  assert_int_equal(read_json(json, &p, &d, line, sizeof(line)), VD_OK);
  free(json);
  const vd_attr_t *a = vd_node_attr(&p, &p.nodes[0], "w");
  assert_int_equal(a->kind, VD_ATTR_INTS);
  assert_int_equal(a->len, 0);
  vd_plan_free(&p);
}

static void test_write_refuses_invalid(void **state) {
  vd_plan_t a;
  vd_diag d;
  char dir[64], path[128];
  build_rich(&a);
  a.tensors[0].shape[2] = -3;
  tmp_dir(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/bad.plan", dir);
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_write_file(&a, path, &d), VD_EINPUT);
  assert_string_equal(d.field, "shape[2]");
  assert_string_equal(d.record, "tensor 1 'a0'");
  assert_int_equal(count_files(dir), 0);
  rmdir(dir);
  vd_plan_free(&a);
}

static void test_missing_file(void **state) {
  vd_plan_t p;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_read_file("/nonexistent/x.plan", &p, &d), VD_EIO);
  assert_string_equal(d.file, "/nonexistent/x.plan");
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_read_file("/tmp", &p, &d), VD_EIO);
}

/* ---- reader error paths: one per field class ------------------------------ */

static void test_err_format(void **state) {
  expect_err("\"format\":\"verdict-plan\"", "\"format\":\"onnx\"", "plan", "format", "verdict-plan");
  expect_err("\"format\":\"verdict-plan\"", "\"format\":3", "plan", "format", "got an integer");
  expect_err("\"format\":\"verdict-plan\",", "", "plan", "format", "missing required key");
}

static void test_err_version(void **state) {
  expect_err("\"version\":1", "\"version\":2", "plan", "version", "expected 1 (the only format version");
  expect_err("\"version\":1", "\"version\":\"1\"", "plan", "version", "expected an integer, got a string");
}

static void test_err_missing_key(void **state) {
  expect_err("\"kind\":\"parallel\",", "", "plan", "kind", "missing required key");
  expect_err("\"name\":\"w0\",\"shape\":[4,6],", "\"name\":\"w0\",", "tensor 11 'w0'", "shape", "missing");
  expect_err("{\"id\":101,\"op\":\"all_reduce\",", "{\"id\":101,", "node 101", "op", "missing");
  expect_err("{\"id\":10,", "{", "tensors[0]", "id", "missing");
  expect_err("\"lin\":{\"full\":2}", "\"lin\":{}", "tensor 11 'w0'", "lin.full", "missing");
}

static void test_err_wrong_type(void **state) {
  expect_err("\"shape\":[4,4],\"role\":\"input\"", "\"shape\":\"4x4\",\"role\":\"input\"", "tensor 10 'x0'", "shape",
             "expected an array, got a string");
  expect_err("\"shape\":[4,4],\"role\":\"input\"", "\"shape\":[4,4.0],\"role\":\"input\"", "tensor 10 'x0'",
             "shape[1]", "expected an integer, got a float");
  expect_err("\"in\":[10,11]", "\"in\":10", "node 100 'fc'", "in", "expected an array");
  expect_err("\"world\":{", "\"world\":[1],\"x_w\":{", "world", "world", "expected a map");
  expect_err("\"coll\":7,\"group\":[0,1]}", "\"coll\":7,\"group\":[0,1],\"span_replicas\":1}", "node 101",
             "span_replicas", "expected a boolean");
  expect_err("\"dims\":[1,2]", "\"dims\":[1,\"x\"]", "node 100 'fc'", "attrs.dims[1]", "expected a number");
  expect_err("\"mode\":\"row\"", "\"mode\":{\"a\":1}", "node 100 'fc'", "attrs.mode", "got a map");
  expect_err("\"id\":100,", "\"id\":18446744073709551615,", "nodes[0]", "id", "fits in int64");
  expect_err("\"stored_ranks\":2", "\"stored_ranks\":4294967298", "world", "stored_ranks", "2^31");
  expect_err("\"segments\":[\"fwd\",\"bwd\"]", "\"segments\":[\"fwd\",2]", "plan", "segments[1]", "expected a string");
  expect_err("\"in\":[10,11]", "\"in\":[10,11],\"stack\":\"m.py:3 in f\"", "node 100 'fc'", "stack",
             "expected an array of strings, got a string");
  expect_err("\"in\":[10,11]", "\"in\":[10,11],\"stack\":[\"m.py:3 in f\",7]", "node 100 'fc'", "stack",
             "expected a string, got");
  expect_err("\"in\":[10,11]", "\"in\":[10,11],\"stack\":[\"m.py:3 in f\nm.py:9 in g\"]", "node 100 'fc'",
             "stack", "frame 0: expected one line");
  expect_err("[[0,0],[0,1],[1,-1]]", "[[0,0],[0],[1,-1]]", "schedule of rank 0", "step[1]", "[segment, mb]");
}

static void test_err_enum(void **state) {
  expect_err("\"role\":\"weight\"", "\"role\":\"param\"", "tensor 11 'w0'", "role", "input, weight, grad");
  expect_err("\"kind\":\"parallel\"", "\"kind\":\"multi\"", "plan", "kind", "single, parallel");
  expect_err("\"dtype\":\"bf16\"", "\"dtype\":\"fp8\"", "tensor 20 'x1'", "dtype", "f32, f16, bf16");
  expect_err("\"scope\":\"persistent\"", "\"scope\":\"global\"", "tensor 11 'w0'", "scope", "mb, persistent");
  expect_err("\"phase\":\"comm\"", "\"phase\":\"comms\"", "node 101", "phase", "fwd, bwd, comm, opt");
}

static void test_err_unknown_or_duplicate_key(void **state) {
  expect_err("\"layer\":0", "\"layr\":0", "node 100 'fc'", "layr", "unknown key");
  expect_err("\"full\":2}", "\"full\":2,\"lo\":[0,0],\"lo\":[0,0]}", "tensor 11 'w0'", "lin.lo", "twice");
  expect_err("\"model\":", "\"modle\":", "plan", "modle", "unknown key");
}

static void test_err_dangling(void **state) {
  expect_err("\"in\":[10,11]", "\"in\":[10,99]", "node 100 'fc'", "in[1]", "got 99 (no such tensor)");
  expect_err("\"out\":[12]", "\"out\":[98]", "node 100 'fc'", "out[0]", "got 98 (no such tensor)");
}

static void test_err_duplicate_ids(void **state) {
  expect_err("{\"id\":20,", "{\"id\":10,", "tensor 10 'x1'", "id", "duplicate tensor id 10");
  expect_err("{\"id\":200,", "{\"id\":100,", "node 100 'fc'", "id", "duplicate node id 100");
}

static void test_err_shape_and_slice(void **state) {
  expect_err("\"shape\":[4,6],\"role\":\"weight\"", "\"shape\":[4,6,-3],\"role\":\"weight\"", "tensor 11 'w0'",
             "shape[2]", "expected a positive size, got -3");
  expect_err("\"shape\":[4,6],\"role\":\"weight\"", "\"shape\":[1,2,3,4,5,6,7,8,9],\"role\":\"weight\"",
             "tensor 11 'w0'", "shape", "at most 8 dims");
  expect_err("\"shape\":[4,6],\"role\":\"weight\"",
             "\"shape\":[4294967296,4294967296],\"role\":\"weight\",\"x_\":0", "tensor 11 'w0'", "shape[1]",
             "overflows");
  expect_err("\"lo\":[0,4]", "\"lo\":[0,4],\"hi\":[4,9]", "tensor 20 'x1'", "lin.hi[1]", "hi - lo = 4");
  expect_err("\"lo\":[0,4]", "\"lo\":[4]", "tensor 20 'x1'", "lin.lo", "expected 2 values");
  expect_err("\"lo\":[0,4]", "\"lo\":[0,-4]", "tensor 20 'x1'", "lin.lo[1]", ">= 0");
}

static void test_err_part(void **state) {
  expect_err("\"part\":[1,2]", "\"part\":[2,2]", "tensor 22 'y1'", "lin.part", "expected part k in [0, 2), got 2");
  expect_err("\"part\":[1,2]", "\"part\":[1,0]", "tensor 22 'y1'", "lin.part", "n >= 1");
  expect_err("\"part\":[1,2]", "\"part\":[1]", "tensor 22 'y1'", "lin.part", "[k, n]");
  /* shifted by replica 1: k = 1 + 1*1 = 2 >= n */
  expect_err("\"part\":[1,2]", "\"part\":[1,2],\"dp_part\":1", "tensor 22 'y1'", "lin.dp_part", "replica 1");
  /* lineage annotations exist only in parallel plans */
  expect_err("\"kind\":\"parallel\"", "\"kind\":\"single\"", "world", "stored_ranks", "single-device");
}

static void test_err_ranks(void **state) {
  expect_err("{\"id\":20,\"name\":\"x1\",\"rank\":1", "{\"id\":20,\"name\":\"x1\",\"rank\":5", "tensor 20 'x1'",
             "rank", "expected a stored rank in [0, 2), got 5");
  expect_err("\"op\":\"linear\",\"name\":\"fc\",\"rank\":1", "\"op\":\"linear\",\"name\":\"fc\",\"rank\":-1",
             "node 200 'fc'", "rank", "got -1");
  /* a node reading a tensor of another rank */
  expect_err("\"in\":[10,11]", "\"in\":[10,21]", "node 100 'fc'", "in[1]", "on rank 1");
  expect_err("\"group\":[0,1]", "\"group\":[0,3]", "node 101", "group[1]", "got 3");
  expect_err("\"group\":[0,1]", "\"group\":[1]", "node 101", "group", "containing the node's rank 0");
  expect_err("\"group\":[0,1]", "\"group\":[0,0]", "node 101", "group[1]", "twice");
  expect_err("\"group\":[0,1]", "\"group\":[1,0]", "node 201", "group", "same group as node 101");
  expect_err("\"coll\":7,\"group\":[0,1]}", "\"coll\":8,\"group\":[0,1]}", "node 101", "coll", "rank 1 has none");
  expect_err("\"stored_ranks\":2", "\"stored_ranks\":3", "plan", "schedule", "one program per stored rank");
  expect_err("\"dp\":2", "\"dp\":0", "world", "dp", "degree >= 1");
}

static void test_err_segment_and_mb(void **state) {
  expect_err("{\"id\":101,\"op\":\"all_reduce\",\"segment\":0", "{\"id\":101,\"op\":\"all_reduce\",\"segment\":9",
             "node 101", "segment", "got 9 (no such segment)");
  expect_err("[[0,0],[0,1],[1,-1]]", "[[0,0],[0,2],[1,-1]]", "schedule of rank 0", "step[1].mb",
             "[0, 2) or -1");
  expect_err("[[0,0],[0,1],[1,-1]]", "[[0,0],[0,1],[2,-1]]", "schedule of rank 0", "step[2].segment",
             "no such segment");
  expect_err("[[0,0],[0,1],[1,-1]]", "[[0,0],[0,1],[1,-2]]", "schedule of rank 0", "step[2].mb", "got -2");
  expect_err("\"layer\":0", "\"layer\":-2", "node 100 'fc'", "layer", "got -2");
}

/* ---- raw bytes ------------------------------------------------------------ */

static vd_rc read_raw(const void *buf, size_t len, vd_diag *d) {
  vd_plan_t p;
  vd_diag_clear(d);
  vd_rc rc = vd_plan_read_buffer(buf, len, "raw.plan", &p, d);
  vd_plan_free(&p);
  return rc;
}

static void test_err_truncated(void **state) {
  msgpack_sbuffer sb;
  vd_diag d;
  json_to_msgpack(BASE, &sb);
  assert_int_equal(read_raw(sb.data, sb.size, &d), VD_OK);
  /* Every proper prefix is an error, never a crash (ASan build). */
  for (size_t n = 0; n < sb.size; n++) {
    char *copy = malloc(n ? n : 1); /* exact size: ASan sees any overread */
    memcpy(copy, sb.data, n);
    assert_int_equal(read_raw(copy, n, &d), VD_EINPUT);
    free(copy);
  }
  assert_int_equal(read_raw(sb.data, sb.size / 2, &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "truncated"));
  assert_string_equal(d.file, "raw.plan");
  /* trailing garbage */
  char *longer = malloc(sb.size + 3);
  memcpy(longer, sb.data, sb.size);
  memcpy(longer + sb.size, "\x01\x02\x03", 3);
  assert_int_equal(read_raw(longer, sb.size + 3, &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "trailing"));
  free(longer);
  msgpack_sbuffer_destroy(&sb);
}

static void test_err_not_a_map(void **state) {
  vd_diag d;
  const unsigned char arr[] = {0x92, 0x01, 0x02};
  assert_int_equal(read_raw(arr, sizeof(arr), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "expected a msgpack map at the top level"));
  assert_non_null(strstr(d.msg, "got an array"));
  const unsigned char bad[] = {0xc1};
  assert_int_equal(read_raw(bad, sizeof(bad), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "invalid type byte 0xc1"));
  assert_int_equal(read_raw("", 0, &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "empty"));
}

static void test_err_huge_counts(void **state) {
  vd_diag d;
  /* {"format": array32 of 4294967295 elements} in 14 bytes */
  const unsigned char a[] = {0x81, 0xa6, 'f', 'o', 'r', 'm', 'a', 't', 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
  size_t before = vd_mem_current();
  assert_int_equal(read_raw(a, sizeof(a), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "container of 4294967295 objects"));
  assert_int_equal(vd_mem_current(), before);
  /* map32 of 2^32-1 pairs */
  const unsigned char m[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00};
  assert_int_equal(read_raw(m, sizeof(m), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "only 2 bytes left"));
  /* str32 claiming 4 GiB */
  const unsigned char s[] = {0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a'};
  assert_int_equal(read_raw(s, sizeof(s), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "value of 4294967295 bytes"));
  /* nested arrays each claiming what remains: the total owed is bounded too */
  unsigned char nest[64];
  for (int i = 0; i < 64; i++) nest[i] = 0x9f; /* fixarray of 15 */
  assert_int_equal(read_raw(nest, sizeof(nest), &d), VD_EINPUT);
  /* deep nesting */
  unsigned char deep[200];
  for (int i = 0; i < 199; i++) deep[i] = 0x91;
  deep[199] = 0x00;
  assert_int_equal(read_raw(deep, sizeof(deep), &d), VD_EINPUT);
  assert_non_null(strstr(d.msg, "nested deeper"));
}

/* Every allocation of the reader may fail: the result is ENOMEM (never a
 * crash, a leak under ASan, or a half-built plan). */
typedef struct {
  msgpack_sbuffer sb;
  vd_plan_t p;
  size_t before;
} read_ctx;
static vd_rc read_run(void *ctx, vd_diag *d) {
  read_ctx *x = ctx;
  return vd_plan_read_buffer(x->sb.data, x->sb.size, "f.plan", &x->p, d);
}
static void read_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  read_ctx *x = ctx;
  if (rc == VD_OK) vd_plan_free(&x->p);
  else assert_null(x->p.pool); /* no half-built plan */
  assert_int_equal(vd_mem_current(), x->before);
}

static void test_alloc_failures(void **state) {
  read_ctx x;
  json_to_msgpack(BASE, &x.sb);
  x.before = vd_mem_current();
  assert_int_equal(tf_fail_each(read_run, read_after, &x, 0, NULL), VD_OK);
  msgpack_sbuffer_destroy(&x.sb);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_reads),
      cmocka_unit_test(test_doc_example),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_empty_floats_become_ints),
      cmocka_unit_test(test_write_refuses_invalid),
      cmocka_unit_test(test_missing_file),
      cmocka_unit_test(test_err_format),
      cmocka_unit_test(test_err_version),
      cmocka_unit_test(test_err_missing_key),
      cmocka_unit_test(test_err_wrong_type),
      cmocka_unit_test(test_err_enum),
      cmocka_unit_test(test_err_unknown_or_duplicate_key),
      cmocka_unit_test(test_err_dangling),
      cmocka_unit_test(test_err_duplicate_ids),
      cmocka_unit_test(test_err_shape_and_slice),
      cmocka_unit_test(test_err_part),
      cmocka_unit_test(test_err_ranks),
      cmocka_unit_test(test_err_segment_and_mb),
      cmocka_unit_test(test_err_truncated),
      cmocka_unit_test(test_err_not_a_map),
      cmocka_unit_test(test_err_huge_counts),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
