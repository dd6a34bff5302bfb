/*
 * tests/solver/test_stage_solve.c - vd_stage_solve under allocation
 * failures: an equivalent stage and a failing one (which also runs the
 * diagnosis search, classify) of a generated Llama-3 tp2 pair with bug 1
 * (a tensor-parallel all_reduce dropped).  Every run that reaches the
 * failing allocation returns VD_ENOMEM (never a verdict: an out-of-memory
 * while classifying used to become WRONG_VALUE), and the first run that
 * completes gives the verdict and diagnosis of a run without faults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../bugs/bugs.h"
#include "../../gen/gen.h"
#include "../../solver/stage_solve.h"
#include "../support/fault.h"
#include "../support/pipeline.h"

typedef struct {
  tp_pair x;
  vd_smt *s;
  vd_stage_solve_opts o;
  const vd_stage *st;
  vd_stage_verdict v;
} solve_ctx;

static vd_rc solve_run(void *ctx, vd_diag *d) {
  solve_ctx *c = ctx;
  return vd_stage_solve(c->s, &c->x.lt, c->st, &c->o, &c->v, d);
}
static void solve_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  solve_ctx *c = ctx;
  if (rc != VD_OK) vd_stage_verdict_free(&c->v);
}

/* A mutated pair, cut and reduced. */
static void setup(solve_ctx *c) {
  memset(c, 0, sizeof(*c));
  vd_diag d;
  vd_diag_clear(&d);
  vd_gen_config g;
  vd_gen_config_default(&g);
  g.model = VD_GEN_LLAMA3;
  g.layers = 1;
  g.tp = 2;
  vd_plan_t p;
  assert_int_equal(vd_gen_build(&g, &c->x.s, &p, &d), VD_OK);
  vd_bug_opts bo;
  vd_bug_opts_default(&bo);
  vd_bug_result br;
  if (vd_bug_apply(&p, 1, &bo, &c->x.p, &br, &d) != VD_OK) fail_msg("bug 1: %s", d.msg);
  vd_plan_free(&p);
  assert_int_equal(tp_pair_cut(&c->x, &d), VD_OK);
  for (size_t i = 0; i < c->x.set.n_stages; i++) assert_int_equal(vd_stage_reduce(&c->x.lt, &c->x.set.stages[i], &d), VD_OK);
  assert_int_equal(vd_smt_new(&c->s, &d), VD_OK);
  c->o.timeout_ms = 20000;
  c->o.fast_path = 1;
  c->o.max_elems = 16384;
}

static void test_solve_under_faults(void **state) {
  (void)state;
  solve_ctx c;
  setup(&c);
  /* Reference verdicts without faults: one equivalent, one failing stage. */
  const vd_stage *eq = NULL, *ne = NULL;
  vd_smt_verdict ne_want = VD_SMT_EQUIVALENT;
  vd_diagnosis ne_dx = VD_DX_NONE;
  for (size_t i = 0; i < c.x.set.n_stages && (!eq || !ne); i++) {
    vd_diag d;
    vd_diag_clear(&d);
    c.st = &c.x.set.stages[i];
    assert_int_equal(solve_run(&c, &d), VD_OK);
    if (c.v.verdict == VD_SMT_EQUIVALENT && !eq) eq = c.st;
    if (c.v.verdict == VD_SMT_NOT_EQUIVALENT && !ne) {
      ne = c.st;
      ne_want = c.v.verdict;
      ne_dx = c.v.diagnosis;
    }
    vd_stage_verdict_free(&c.v);
  }
  assert_non_null(eq);
  assert_non_null(ne);
  assert_int_equal(ne_dx, VD_DX_MISSING_REDUCTION); /* bug 1's class, found by classify */

  long n_eq = 0, n_ne = 0;
  c.st = eq;
  assert_int_equal(tf_fail_each(solve_run, solve_after, &c, 0, &n_eq), VD_OK);
  assert_int_equal(c.v.verdict, VD_SMT_EQUIVALENT);
  vd_stage_verdict_free(&c.v);
  c.st = ne;
  assert_int_equal(tf_fail_each(solve_run, solve_after, &c, 0, &n_ne), VD_OK);
  assert_int_equal(c.v.verdict, ne_want);
  assert_int_equal(c.v.diagnosis, ne_dx);
  vd_stage_verdict_free(&c.v);
  print_message("allocations: equivalent stage %ld, failing stage %ld\n", n_eq, n_ne);
  assert_true(n_ne > n_eq); /* the failing stage also allocated while diagnosing */
  vd_smt_free(c.s);
  tp_pair_free(&c.x);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_solve_under_faults)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
