/*
 * tests/support/graph_build.h - building a graph that must build, in tests.
 *
 * The graph tests (and any test that needs a plan's graph) build with
 * vd_graph_build and, when that fails unexpectedly, want the diag's message
 * in the test output rather than a bare rc mismatch.  These helpers do both.
 */
#ifndef VD_TEST_GRAPH_BUILD_H
#define VD_TEST_GRAPH_BUILD_H

#include "../../graph/graph.h"
#include "plan_builders.h"

/* Fails the test, printing what and d's formatted message, unless rc is VD_OK. */
void gb_assert_ok(vd_rc rc, const vd_diag *d, const char *what);
/* Builds p's graph into g (replicas expanded when expand) and asserts that it
 * built without issues.  The caller frees g. */
void gb_build_ok(const vd_plan_t *p, int expand, vd_graph_t *g);
/* p = the ready-made plan build makes (tests/support/plan_builders.h), g its
 * graph as gb_build_ok builds it.  The caller frees both. */
void gb_plan_graph(pb_plan_fn build, int expand, vd_plan_t *p, vd_graph_t *g);
/* Builds p's graph (replica 0 only) into g, which must report issues:
 * asserts VD_EINPUT and at least one issue.  d receives the first issue.
 * The caller frees g. */
void gb_build_bad(const vd_plan_t *p, vd_graph_t *g, vd_diag *d);
/* gb_build_bad where exactly one issue, of kind, is expected; returns it. */
const vd_graph_issue *gb_build_one_issue(const vd_plan_t *p, vd_graph_t *g, vd_diag *d, vd_gissue_kind kind);

#endif
