/*
 * tests/support/graph_build.c - building a graph that must build, in tests
 * (graph_build.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "graph_build.h"

void gb_assert_ok(vd_rc rc, const vd_diag *d, const char *what) {
  if (rc != VD_OK) {
    char buf[1024];
    vd_diag_format(d, buf, sizeof(buf));
    print_error("%s: %s\n", what, buf);
  }
  assert_int_equal(rc, VD_OK);
}

void gb_build_ok(const vd_plan_t *p, int expand, vd_graph_t *g) {
  vd_graph_opts o = {.expand_replicas = expand};
  vd_diag d;
  vd_diag_clear(&d);
  gb_assert_ok(vd_graph_build(p, &o, g, &d), &d, "vd_graph_build");
  assert_int_equal(g->n_issues, 0);
}

void gb_plan_graph(pb_plan_fn build, int expand, vd_plan_t *p, vd_graph_t *g) {
  assert_int_equal(build(p), VD_OK);
  gb_build_ok(p, expand, g);
}

void gb_build_bad(const vd_plan_t *p, vd_graph_t *g, vd_diag *d) {
  vd_graph_opts o = {0}; /* replica 0 only */
  vd_diag_clear(d);
  assert_int_equal(vd_graph_build(p, &o, g, d), VD_EINPUT);
  assert_true(g->n_issues >= 1);
}

const vd_graph_issue *gb_build_one_issue(const vd_plan_t *p, vd_graph_t *g, vd_diag *d, vd_gissue_kind kind) {
  gb_build_bad(p, g, d);
  assert_int_equal(g->n_issues, 1);
  assert_int_equal(g->issues[0].kind, kind);
  return &g->issues[0];
}
