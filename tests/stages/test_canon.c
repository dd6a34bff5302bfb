/*
 * tests/stages/test_canon.c - canonical forms and symmetry classes
 * (stages/canon.c) on hand-built stages and on real cut stages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "../../graph/graph.h"
#include "../../lineage/lineage.h"
#include "../../gen/gen.h"
#include "stage_builder.h"
#include "../support/fault.h"
#include "../support/pipeline.h"

/* One scaled TP shard stage: y = scale(x) on the single side, the parallel
 * side scales a hypothesis piece.  `name`, `gnode`, `replica` vary between
 * copies; `factor` is the constant. */
static void build_scale(tb_world *w, tb_stage *s, uint32_t id, const char *name, double factor, int32_t replica,
                        int64_t lo) {
  tb_stage_init(s, id);
  uint32_t g0 = tb_pnode(w, 0, "scale", name), g1 = tb_pnode(w, 1, "scale", name);
  vd_plan_attr_float(&w->plan[0], w->gnodes[0][g0].pnode, "factor", factor);
  vd_plan_attr_float(&w->plan[1], w->gnodes[1][g1].pnode, "factor", factor);
  uint32_t x = TB_V(s, 0, 8, 4), y = TB_V(s, 0, 8, 4);
  tb_node(s, w, 0, g0, TB_L(x), TB_L(y));
  int32_t px = tb_piece(w, 2, (int64_t[]){lo, 0}, (int64_t[]){lo + 4, 4}, 0, 1);
  uint32_t hx = tb_hyp(s, w, x, px), py = TB_V(s, 1, 4, 4);
  s->vals[hx].replica = replica;
  uint32_t n = tb_node(s, w, 1, g1, TB_L(hx), TB_L(py));
  s->nodes[n].replica = replica;
  tb_target(s, y, (int64_t[]){lo, 0}, (int64_t[]){lo + 4, 4}, 1, (uint32_t[]){(uint32_t)px}, (uint32_t[]){py}, 1);
}

static void test_classes(void **state) {
  (void)state;
  tb_world w;
  tb_world_init(&w);
  tb_stage s[5];
  build_scale(&w, &s[0], 0, "layers.0.scale", 0.5, 0, 0);
  build_scale(&w, &s[1], 1, "layers.1.scale", 0.5, 1, 0);   /* renamed, other replica: same */
  build_scale(&w, &s[2], 2, "layers.2.scale", 0.25, 0, 0);  /* other constant: different */
  build_scale(&w, &s[3], 3, "layers.3.scale", 0.5, 0, 4);   /* other slice: different */
  build_scale(&w, &s[4], 4, "layers.4.scale", 0.5 + 1e-16, 0, 0); /* one ulp above 0.5: exact bits differ */
  vd_stage_set set = {0};
  set.stages = vd_calloc(5, sizeof(vd_stage));
  assert_non_null(set.stages);
  set.n_stages = 5;
  vd_diag d;
  vd_diag_clear(&d);
  for (int i = 0; i < 5; i++) {
    assert_int_equal(vd_stage_reduce(&w.lt, &s[i].st, &d), VD_OK);
    set.stages[i] = s[i].st;
  }
  assert_int_equal(vd_stage_canon(&w.lt, &set, &d), VD_OK);
  assert_int_equal(set.stages[0].canon_class, 0);
  assert_int_equal(set.stages[1].canon_class, 0);
  assert_int_equal(set.stages[2].canon_class, 2);
  assert_int_equal(set.stages[3].canon_class, 3);
  assert_int_equal(set.stages[4].canon_class, 4);
  assert_true(set.stages[0].canon_hash != 0);
  assert_true(set.stages[0].canon_hash == set.stages[1].canon_hash);
  assert_true(set.stages[0].canon_hash != set.stages[2].canon_hash);
  vd_free(set.stages);
  tb_world_free(&w);
}

/* ---- real cut stages: symmetry across layers ------------------------------ */

typedef tp_pair real_t;

/* A generated Llama-3 pair (layers, tp) cut, every stage reduced, the
 * classes assigned; fails the test when a step does. */
static void real_build(real_t *r, int64_t layers, int64_t tp) {
  tp_pair_llama3_ok(r, layers, tp);
  vd_diag d;
  vd_diag_clear(&d);
  for (size_t i = 0; i < r->set.n_stages; i++) assert_int_equal(vd_stage_reduce(&r->lt, &r->set.stages[i], &d), VD_OK);
  assert_int_equal(vd_stage_canon(&r->lt, &r->set, &d), VD_OK);
}
static void real_free(real_t *r) { tp_pair_free(r); }

/* Layer of a stage: the one layer all its layered nodes belong to, -1 if
 * none, -2 if several. */
static int32_t stage_layer(const real_t *r, const vd_stage *st) {
  int32_t layer = -1;
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_graph_t *g = st->nodes[i].side ? &r->gp : &r->gs;
    int32_t l = g->plan->nodes[g->nodes[st->nodes[i].gnode].pnode].layer;
    if (l < 0) continue;
    if (layer >= 0 && l != layer) return -2;
    layer = l;
  }
  return layer;
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Sorted class ids of the stages of one layer; count to *n. */
static int32_t *layer_classes(const real_t *r, int32_t layer, size_t *n) {
  int32_t *c = calloc(r->set.n_stages + 1, sizeof(int32_t));
  *n = 0;
  for (size_t i = 0; i < r->set.n_stages; i++)
    if (stage_layer(r, &r->set.stages[i]) == layer) c[(*n)++] = r->set.stages[i].canon_class;
  qsort(c, *n, sizeof(int32_t), cmp_i32);
  return c;
}

static void test_real_symmetry(void **state) {
  (void)state;
  real_t r;
  real_build(&r, 4, 2);
  size_t n_classes = 0;
  for (size_t i = 0; i < r.set.n_stages; i++)
    if (r.set.stages[i].canon_class == (int32_t)r.set.stages[i].id) n_classes++;
  print_message("llama3 4 layers tp2: %zu stages, %zu classes\n", r.set.n_stages, n_classes);
  size_t n1, n2, n3;
  int32_t *c1 = layer_classes(&r, 1, &n1), *c2 = layer_classes(&r, 2, &n2), *c3 = layer_classes(&r, 3, &n3);
  assert_true(n1 > 0);
  assert_int_equal(n1, n2);
  for (size_t i = 0; i < n1; i++) assert_int_equal(c1[i], c2[i]);
  /* the last layer may differ where it meets the head; at least most match */
  size_t common = 0;
  for (size_t i = 0, j = 0; i < n1 && j < n3;) {
    if (c1[i] == c3[j]) { common++; i++; j++; }
    else if (c1[i] < c3[j]) i++;
    else j++;
  }
  assert_true(common * 2 >= n1);
  assert_true(n_classes * 2 < r.set.n_stages);

  /* A changed constant in one layer-2 stage puts it in another class. */
  size_t victim = (size_t)-1;
  uint32_t attr = 0;
  for (size_t i = 0; i < r.set.n_stages && victim == (size_t)-1; i++) {
    vd_stage *st = &r.set.stages[i];
    if (stage_layer(&r, st) != 2 || st->canon_class == (int32_t)st->id) continue;
    for (uint32_t k = 0; k < st->n_nodes && victim == (size_t)-1; k++) {
      if (!st->nodes[k].side) continue;
      const vd_node_t *pn = &r.p.nodes[r.gp.nodes[st->nodes[k].gnode].pnode];
      for (uint32_t a = 0; a < pn->n_attr; a++)
        if (r.p.attrs[pn->attr_off + a].kind == VD_ATTR_FLOAT) {
          victim = i;
          attr = pn->attr_off + a;
          break;
        }
    }
  }
  assert_true(victim != (size_t)-1);
  int32_t old = r.set.stages[victim].canon_class;
  r.p.attrs[attr].v.f *= 1.5;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_stage_canon(&r.lt, &r.set, &d), VD_OK);
  assert_true(r.set.stages[victim].canon_class != old);
  free(c1);
  free(c2);
  free(c3);
  real_free(&r);
}

/* ---- allocation failures ---------------------------------------------------- */

static vd_rc canon_run(void *ctx, vd_diag *d) {
  tp_pair *x = ctx;
  return vd_stage_canon(&x->lt, &x->set, d);
}

/* Every allocation of the class assignment may fail: VD_ENOMEM, and the
 * first run that completes assigns the classes of a run without faults. */
static void test_canon_under_faults(void **state) {
  (void)state;
  tp_pair x;
  real_build(&x, 1, 2);
  size_t n = x.set.n_stages;
  int32_t *cls = malloc(n * sizeof(*cls));
  uint64_t *hash = malloc(n * sizeof(*hash));
  assert_non_null(cls);
  assert_non_null(hash);
  size_t n_classes = 0;
  for (size_t i = 0; i < n; i++) {
    cls[i] = x.set.stages[i].canon_class;
    hash[i] = x.set.stages[i].canon_hash;
    n_classes += cls[i] == (int32_t)i;
  }
  assert_true(n_classes < n); /* some reuse, or the test shows nothing */
  long allocs = 0;
  assert_int_equal(tf_fail_each(canon_run, NULL, &x, 0, &allocs), VD_OK);
  assert_true(allocs > 0);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(x.set.stages[i].canon_class, cls[i]);
    assert_int_equal(x.set.stages[i].canon_hash, hash[i]);
  }
  free(cls);
  free(hash);
  tp_pair_free(&x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_classes),
      cmocka_unit_test(test_real_symmetry),
      cmocka_unit_test(test_canon_under_faults),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
