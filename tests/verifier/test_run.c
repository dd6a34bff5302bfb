/*
 * tests/verifier/test_run.c - verifier/run.c: symmetry-class reuse and
 * determinism.
 *
 * Class reuse is OPTIMIZATION-ONLY: solving one stage per class must give
 * every stage the verdict and diagnosis it gets when each stage is solved
 * on its own (--no-reuse).  And the result must not depend on the thread
 * count: the per-stage verdicts and the text report (without timings) are
 * identical with 1 and 2 threads.  Checked on a correct generated pair and
 * on the same pair with bug 1 (a tensor-parallel all_reduce dropped).
 *
 * And on both stripped to their boundary (lineages inferred): the correct
 * pair is EQUIVALENT; the mutated one is NOT EQUIVALENT at a grounded
 * failure (docs/verifier.md 1b): the run stops at the first failing stage
 * of the model-sized ones (it solved and reported 38 before), every stage
 * reported NOT EQUIVALENT targets annotated values only, and the report
 * does not depend on the thread count.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../bugs/bugs.h"
#include "../../common/ctl.h"
#include "../../gen/gen.h"
#include "../../verifier/report.h"
#include "../../verifier/run.h"
#include "../support/pipeline.h"

static char s_path[64], p_path[64], m_path[64], pb_path[64], mb_path[64];

/* Writes plan file `in` stripped to its boundary to `out`. */
static int strip_file(const char *in, const char *out) {
  vd_plan_t p;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_plan_read_file(in, &p, &d) != VD_OK) return -1;
  size_t kept = 0, gone = 0;
  int bad = vd_plan_strip(&p, &kept, &gone, &d) != VD_OK || gone == 0 || vd_plan_write_file(&p, out, &d) != VD_OK;
  vd_plan_free(&p);
  return bad ? -1 : 0;
}

static int setup(void **state) {
  (void)state;
  snprintf(s_path, sizeof(s_path), "/tmp/vd_test_run_%d.s.plan", (int)getpid());
  snprintf(p_path, sizeof(p_path), "/tmp/vd_test_run_%d.p.plan", (int)getpid());
  snprintf(m_path, sizeof(m_path), "/tmp/vd_test_run_%d.m.plan", (int)getpid());
  snprintf(pb_path, sizeof(pb_path), "/tmp/vd_test_run_%d.pb.plan", (int)getpid());
  snprintf(mb_path, sizeof(mb_path), "/tmp/vd_test_run_%d.mb.plan", (int)getpid());
  vd_gen_config g;
  tp_gen_config(&g, &(tp_sizes){VD_GEN_LLAMA3, .layers = 2, .tp = 2, .dp = 2});
  vd_plan_t s, p, m;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_gen_build(&g, &s, &p, &d) != VD_OK) return -1;
  vd_bug_opts bo;
  vd_bug_opts_default(&bo);
  vd_bug_result br;
  int bad = vd_bug_apply(&p, 1, &bo, &m, &br, &d) != VD_OK;
  bad = bad || vd_plan_write_file(&s, s_path, &d) != VD_OK || vd_plan_write_file(&p, p_path, &d) != VD_OK ||
        vd_plan_write_file(&m, m_path, &d) != VD_OK;
  vd_plan_free(&s);
  vd_plan_free(&p);
  vd_plan_free(&m);
  bad = bad || strip_file(p_path, pb_path) || strip_file(m_path, mb_path);
  return bad ? -1 : 0;
}

static int teardown(void **state) {
  (void)state;
  unlink(s_path);
  unlink(p_path);
  unlink(m_path);
  unlink(pb_path);
  unlink(mb_path);
  return 0;
}

/* The options of every run here: s_path against pm, every failing stage
 * reported (max_failures 0), seed 1, quiet (no timings: the report must
 * then be byte-identical). */
static void run_opts(vd_run_opts *o, const char *pm, int threads, int no_reuse) {
  memset(o, 0, sizeof(*o));
  o->sm = s_path;
  o->pm = pm;
  o->threads = threads;
  o->no_reuse = no_reuse;
  o->stage_timeout_ms = 60000;
  o->seed = 1;
  o->quiet = 1;
}

static void run(const char *pm, int threads, int no_reuse, vd_run *r, char **text) {
  vd_run_opts o;
  run_opts(&o, pm, threads, no_reuse);
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_run_verify(&o, r, &d) != VD_OK) fail_msg("run: %s", d.msg);
  size_t len = 0;
  FILE *f = open_memstream(text, &len);
  assert_non_null(f);
  vd_report_text(r, &o, f);
  fclose(f);
}

/* Every stage has the same verdict and diagnosis in a and b. */
static void same_verdicts(const vd_run *a, const vd_run *b) {
  assert_int_equal(a->set.n_stages, b->set.n_stages);
  for (size_t i = 0; i < a->set.n_stages; i++) {
    if (a->verdicts[i].verdict != b->verdicts[i].verdict || a->verdicts[i].diagnosis != b->verdicts[i].diagnosis)
      fail_msg("stage %zu: verdict %d/%d, diagnosis %s/%s", i, (int)a->verdicts[i].verdict, (int)b->verdicts[i].verdict,
               vd_diagnosis_names[a->verdicts[i].diagnosis], vd_diagnosis_names[b->verdicts[i].diagnosis]);
  }
  assert_int_equal(vd_run_exit_code(a), vd_run_exit_code(b));
}

static void check_pair(const char *pm, int want_exit) {
  vd_run r1, r2, rn;
  char *t1 = NULL, *t2 = NULL, *tn = NULL;
  run(pm, 1, 0, &r1, &t1);
  run(pm, 2, 0, &r2, &t2);
  run(pm, 2, 1, &rn, &tn);
  assert_int_equal(vd_run_exit_code(&r1), want_exit);
  /* reuse happened: fewer classes solved than stages */
  assert_true(r1.n_classes < r1.set.n_stages);
  assert_int_equal(rn.n_classes, rn.set.n_stages);
  same_verdicts(&r1, &r2);
  same_verdicts(&r1, &rn);
  assert_string_equal(t1, t2); /* thread count changes nothing, counterexamples included */
  print_message("%s: %zu stages, %zu classes, exit %d\n", pm, r1.set.n_stages, r1.n_classes, vd_run_exit_code(&r1));
  free(t1);
  free(t2);
  free(tn);
  vd_run_free(&r1);
  vd_run_free(&r2);
  vd_run_free(&rn);
}

static void test_correct_pair(void **state) {
  (void)state;
  check_pair(p_path, 0);
}

static void test_mutated_pair(void **state) {
  (void)state;
  check_pair(m_path, 1);
}

static void test_stripped_pairs(void **state) {
  (void)state;
  vd_run r1, r2;
  char *t1 = NULL, *t2 = NULL;
  run(pb_path, 2, 0, &r1, &t1);
  assert_int_equal(vd_run_exit_code(&r1), 0);
  assert_true(r1.infer.n_inferred > 0);
  free(t1);
  vd_run_free(&r1);

  run(mb_path, 1, 0, &r1, &t1);
  run(mb_path, 2, 0, &r2, &t2);
  assert_int_equal(vd_run_exit_code(&r1), 1);
  same_verdicts(&r1, &r2);
  assert_string_equal(t1, t2);
  /* the first grounded failure ends the run: the model-sized stages past
   * it are left unsolved instead of each being solved and reported */
  assert_true(r1.n_not_equiv >= 1 && r1.n_not_equiv <= 2);
  assert_true(r1.n_skipped_large > 0);
  for (size_t i = 0; i < r1.set.n_stages; i++) {
    if (r1.verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    const vd_stage *st = &r1.set.stages[i];
    for (uint32_t k = 0; k < st->n_targets; k++)
      for (uint32_t j = 0; j < st->targets[k].n_pieces; j++) {
        uint32_t t = r1.lt.pieces[st->idx[st->targets[k].piece_off + 2 * j]].ptensor;
        if (r1.inferred[t]) fail_msg("stage %zu is reported NOT EQUIVALENT on an inferred lineage (tensor %u)", i, t);
      }
  }
  print_message("%s: %zu stages, %zu not equivalent, %zu not solved, %d rounds\n", mb_path, r1.set.n_stages,
                r1.n_not_equiv, r1.n_skipped_large, r1.infer_rounds);
  free(t1);
  free(t2);
  vd_run_free(&r1);
  vd_run_free(&r2);
}

/* A stop requested before the run (common/ctl.h): INCONCLUSIVE, exit 3,
 * nothing proven, the report says why. */
static void test_stop_before_run(void **state) {
  (void)state;
  assert_int_equal(vd_ctl_request_stop(VD_STOP_SIGTERM), 0);
  assert_int_equal(vd_ctl_request_stop(VD_STOP_SIGINT), VD_STOP_SIGTERM); /* the first reason stays */
  vd_run r;
  char *t = NULL;
  run(p_path, 2, 0, &r, &t);
  vd_ctl_clear_stop();
  assert_int_equal(r.interrupted, VD_STOP_SIGTERM);
  assert_int_equal(vd_run_exit_code(&r), 3);
  assert_int_equal(r.n_equiv, 0);
  assert_non_null(strstr(t, "INCONCLUSIVE\n  run interrupted by SIGTERM while "));
  assert_non_null(strstr(t, "proven before the stop: nothing"));
  free(t);
  vd_run_free(&r);
}

/* SOUNDNESS of a stop at any moment: on the mutated pair, a run stopped by
 * its deadline at several points (before, during and after solving,
 * depending on the machine) is INCONCLUSIVE when stopped, and no stage that
 * fails in the full run is EQUIVALENT in a stopped one (an unsolved class
 * is never left at its zeroed verdict, which reads as equivalent). */
static void test_stop_anywhere(void **state) {
  (void)state;
  vd_run full;
  char *tf = NULL;
  run(m_path, 2, 1, &full, &tf);
  assert_int_equal(vd_run_exit_code(&full), 1);
  static const double deadlines[] = {0.05, 0.15, 0.3, 0.5, 0.8};
  int stopped_solving = 0;
  for (size_t k = 0; k < sizeof(deadlines) / sizeof(deadlines[0]); k++) {
    vd_run_opts o;
    run_opts(&o, m_path, 2, 1);
    o.deadline_s = deadlines[k];
    vd_run r;
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(vd_run_verify(&o, &r, &d), VD_OK);
    vd_ctl_clear_stop();
    if (r.interrupted) {
      assert_int_equal(r.interrupted, VD_STOP_DEADLINE);
      assert_int_equal(vd_run_exit_code(&r), 3);
      assert_int_equal(r.n_not_equiv, 0);
      if (r.verdicts) {
        stopped_solving++;
        assert_int_equal(r.set.n_stages, full.set.n_stages);
        for (size_t i = 0; i < r.set.n_stages; i++)
          if (full.verdicts[i].verdict != VD_SMT_EQUIVALENT && r.verdicts[i].verdict == VD_SMT_EQUIVALENT)
            fail_msg("deadline %g s: stage %zu fails in the full run, equivalent in the stopped one", deadlines[k], i);
      }
    } else {
      assert_int_equal(vd_run_exit_code(&r), 1);
    }
    print_message("deadline %.2f s: %s%s\n", deadlines[k], r.interrupted ? "stopped in " : "finished",
                  r.interrupted ? r.stop_phase : "");
    vd_run_free(&r);
  }
  print_message("%d of the stopped runs stopped while solving\n", stopped_solving);
  free(tf);
  vd_run_free(&full);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_correct_pair), cmocka_unit_test(test_mutated_pair),
                                     cmocka_unit_test(test_stripped_pairs), cmocka_unit_test(test_stop_before_run),
                                     cmocka_unit_test(test_stop_anywhere)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
