/*
 * tests/bugs/test_bugs.c - the mutation engine (bugs/): every bug class
 * applied to a generated plan at a requested site.  For each: the mutated
 * plan validates (and survives a write/read round trip), the result names
 * exactly the requested ranks (and layer, microbatch, per-microbatch flag),
 * the named nodes exist in the output, and the numeric executor - the
 * independent witness - DISAGREES on the mutated plan while it AGREES on the
 * unmutated one.  Also: mutations that do not apply say so (VD_EUSAGE with a
 * reason), and no bug crashes or produces an invalid plan on any plan of a
 * small configuration matrix.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../bugs/bugs.h"
#include "../../common/mem.h"
#include "../../gen/gen.h"
#include "../../oracle/exec.h"
#include "../support/fault.h"
#include "../support/files.h"
#include "../support/pipeline.h"

typedef enum { CFG_BASE, CFG_SP, CFG_CP, CFG_ZERO, CFG_CLIP, CFG__COUNT } cfg_id;

typedef struct {
  vd_plan_t s[CFG__COUNT], p[CFG__COUNT];
  int built[CFG__COUNT];
} fixture;

static void config(cfg_id id, vd_gen_config *c) {
  tp_gen_config(c, &(tp_sizes){VD_GEN_LLAMA3, .layers = 2, .hidden = 16, .heads = 4, .seq = 8, .batch = 8, .dp = 2,
                               .tp = 2, .pp = 2, .nm = 2});
  if (id == CFG_SP) c->sp = 1;
  if (id == CFG_CP) c->cp = 2;
  if (id == CFG_ZERO) {
    c->zero = 1;
    c->optimizer = VD_GEN_ADAM;
  }
  if (id == CFG_CLIP) c->grad_clip = 0.001;
}

static vd_exec_status run_exec(const vd_plan_t *s, const vd_plan_t *p) {
  vd_exec_opts o = {.seed = 1, .tol = 1e-9};
  vd_exec_result r;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_exec_compare(s, p, &o, &r, &d), VD_OK);
  return r.status;
}

static int setup(void **state) {
  fixture *f = test_calloc(1, sizeof(*f));
  for (int i = 0; i < CFG__COUNT; i++) {
    vd_gen_config c;
    config((cfg_id)i, &c);
    vd_diag d;
    vd_diag_clear(&d);
    if (vd_gen_build(&c, &f->s[i], &f->p[i], &d) != VD_OK) return -1;
    f->built[i] = 1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  for (int i = 0; i < CFG__COUNT; i++) {
    vd_plan_free(&f->s[i]);
    vd_plan_free(&f->p[i]);
  }
  test_free(f);
  return 0;
}

/* Every unmutated configuration agrees: no false alarm from the witness. */
static void test_correct_plans_agree(void **state) {
  fixture *f = *state;
  for (int i = 0; i < CFG__COUNT; i++) assert_int_equal(run_exec(&f->s[i], &f->p[i]), VD_EXEC_AGREE);
}

typedef struct {
  int bug;
  cfg_id cfg;
  int32_t rank, layer, mb;
  uint64_t seed;
  int32_t ranks[8];
  size_t n_ranks;
  int32_t want_layer; /* -3: don't care */
  int per_mb;         /* -1: don't care */
} site;

/* Writes and re-reads the plan: the reader accepts what a mutation makes. */
static void round_trip(const vd_plan_t *p) {
  char path[] = "/tmp/vd_test_bugs_XXXXXX";
  tfile_temp(path);
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_plan_write_file(p, path, &d), VD_OK);
  vd_plan_t q;
  assert_int_equal(vd_plan_read_file(path, &q, &d), VD_OK);
  assert_int_equal(q.n_nodes, p->n_nodes);
  vd_plan_free(&q);
  unlink(path);
}

static void apply_site(fixture *f, const site *s, vd_plan_t *out, vd_bug_result *r) {
  vd_bug_opts o;
  vd_bug_opts_default(&o);
  o.rank = s->rank;
  o.layer = s->layer;
  o.mb = s->mb;
  o.seed = s->seed;
  vd_diag d;
  vd_diag_clear(&d);
  vd_rc rc = vd_bug_apply(&f->p[s->cfg], s->bug, &o, out, r, &d);
  if (rc != VD_OK) print_error("bug %d: %s\n", s->bug, d.msg);
  assert_int_equal(rc, VD_OK);
  assert_int_equal(vd_plan_validate(out, "mutated", &d), VD_OK);
  assert_int_equal(r->bug, s->bug);
  assert_true(r->what[0] != '\0');
}

static void check_site(fixture *f, const site *s) {
  vd_plan_t out;
  vd_bug_result r;
  apply_site(f, s, &out, &r);
  if (r.n_ranks != s->n_ranks) print_error("bug %d: %zu ranks, expected %zu\n", s->bug, r.n_ranks, s->n_ranks);
  assert_int_equal(r.n_ranks, s->n_ranks);
  for (size_t i = 0; i < s->n_ranks; i++) assert_int_equal(r.ranks[i], s->ranks[i]);
  if (s->want_layer != -3) assert_int_equal(r.layer, s->want_layer);
  if (s->per_mb >= 0) assert_int_equal(r.per_mb, s->per_mb);
  assert_true(r.n_nodes >= 1);
  /* Named nodes exist on the named ranks (bugs that remove nodes name input ids). */
  int removes = s->bug == 2 || (s->bug == 24 && !(s->seed & 1));
  for (size_t i = 0; i < r.n_nodes; i++) {
    const vd_plan_t *where = removes ? &f->p[s->cfg] : &out;
    int64_t ni = vd_plan_find_node(where, r.nodes[i]);
    assert_true(ni >= 0);
    int32_t rk = where->nodes[ni].rank;
    int found = 0;
    for (size_t k = 0; k < r.n_ranks; k++) found |= r.ranks[k] == rk;
    assert_true(found);
  }
  round_trip(&out);
  vd_exec_status st = run_exec(&f->s[s->cfg], &out);
  if (st != VD_EXEC_DISAGREE) print_error("bug %d: the executor does not disagree (%s)\n", s->bug, r.what);
  assert_int_equal(st, VD_EXEC_DISAGREE);
  vd_plan_free(&out);
}

#define R(...) {__VA_ARGS__}, sizeof((int32_t[]){__VA_ARGS__}) / sizeof(int32_t)

static const site sites[] = {
    {1, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {1, CFG_BASE, -1, 1, -1, 0, R(2, 3), 1, 1},
    {2, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {2, CFG_BASE, 3, -1, -1, 0, R(2, 3), -3, 1},
    {3, CFG_BASE, -1, 1, -1, 0, R(2, 3), 1, 1},
    {3, CFG_BASE, 0, 0, -1, 0, R(0, 1), 0, 1},
    {4, CFG_SP, -1, 0, -1, 0, R(0, 1), 0, 1},
    {4, CFG_SP, 3, 1, -1, 0, R(2, 3), 1, 1},
    {5, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {5, CFG_BASE, -1, 1, -1, 0, R(2, 3), 1, 1},
    {6, CFG_SP, 0, -1, -1, 0, R(0, 1, 2, 3), -3, 1},
    {6, CFG_SP, 2, -1, -1, 0, R(0, 1, 2, 3), -3, 1},
    {6, CFG_CP, 0, -1, -1, 0, R(0, 2, 4, 6), -3, 1},
    {7, CFG_BASE, 1, 0, -1, 0, R(1), 0, 1},
    {7, CFG_BASE, 2, 1, -1, 0, R(2), 1, 1},
    {8, CFG_BASE, 0, 0, -1, 0, R(0), 0, 1},
    {8, CFG_BASE, 3, 1, -1, 0, R(3), 1, 1},
    {9, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {9, CFG_BASE, -1, 1, -1, 0, R(2, 3), 1, 1},
    {10, CFG_BASE, 0, 0, -1, 0, R(0), 0, 1},
    {10, CFG_BASE, 3, 1, -1, 0, R(3), 1, 1},
    {11, CFG_BASE, 1, 0, -1, 0, R(1), 0, 1},
    {11, CFG_BASE, 2, 1, -1, 0, R(2), 1, 1},
    {12, CFG_BASE, 0, 0, -1, 0, R(0), 0, 1},
    {12, CFG_BASE, 3, 1, -1, 0, R(3), 1, 1},
    {13, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {13, CFG_CP, -1, 1, -1, 0, R(4, 5, 6, 7), 1, 1},
    {14, CFG_BASE, 0, 0, -1, 0, R(0), 0, 0},
    {14, CFG_BASE, 2, 1, 0, 0, R(2), 1, 0},
    {14, CFG_ZERO, 1, 0, -1, 0, R(1), 0, 0},
    {15, CFG_BASE, 3, -1, -1, 0, R(3), -1, 0},
    {15, CFG_CP, 2, 0, -1, 1, R(2), 0, 0},
    {15, CFG_BASE, 1, 0, -1, 2, R(1), 0, 0},
    {16, CFG_BASE, 1, 0, -1, 0, R(1), 0, 1},
    {16, CFG_BASE, 2, 1, -1, 0, R(2), 1, 1},
    {17, CFG_BASE, 2, -1, -1, 0, R(2), -1, 1},
    {17, CFG_BASE, 3, -1, -1, 0, R(3), -1, 1},
    {18, CFG_SP, -1, 0, -1, 0, R(0, 1), 0, 0},
    {18, CFG_SP, -1, 1, -1, 0, R(2, 3), 1, 0},
    {20, CFG_SP, -1, 0, -1, 0, R(0, 1), 0, 1},
    {20, CFG_SP, -1, 1, -1, 0, R(2, 3), 1, 1},
    {21, CFG_BASE, -1, 0, -1, 0, R(0, 1), 0, 1},
    {21, CFG_BASE, -1, 1, -1, 0, R(2, 3), 1, 1},
    {22, CFG_SP, -1, 0, -1, 0, R(0, 1), 0, 1},
    {22, CFG_CP, -1, 1, -1, 0, R(4, 6), 1, 1},
    {23, CFG_CLIP, 0, -1, -1, 0, R(0, 1, 2, 3), -1, 0},
    {23, CFG_CLIP, 3, -1, -1, 0, R(0, 1, 2, 3), -1, 0},
    {24, CFG_ZERO, 1, 0, -1, 0, R(1), 0, 0},
    {24, CFG_ZERO, 2, 1, -1, 1, R(2), 1, 0},
    {25, CFG_CP, 2, 0, -1, 0, R(2), 0, 1},
    {25, CFG_CP, 7, 1, -1, 1, R(7), 1, 1},
};

static void test_every_site(void **state) {
  fixture *f = *state;
  int covered[VD_BUG_COUNT + 1] = {0};
  for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
    check_site(f, &sites[i]);
    covered[sites[i].bug]++;
  }
  /* Every bug class but 19 (tied embeddings: the generator has none) at two sites or more. */
  for (int b = 1; b <= VD_BUG_COUNT; b++)
    if (b != 19) assert_true(covered[b] >= 2);
}

/* Bug 8's decomposition is right except for the exponent: with exponent 2
 * restored, the executor agrees again. */
static void test_pow_decomposition_is_exact(void **state) {
  fixture *f = *state;
  site s = {8, CFG_BASE, 0, 0, -1, 0, R(0), 0, 1};
  vd_plan_t out;
  vd_bug_result r;
  apply_site(f, &s, &out, &r);
  int fixed = 0;
  for (size_t i = 0; i < out.n_nodes; i++) {
    vd_node_t *n = &out.nodes[i];
    if (strcmp(vd_node_op(&out, n), "pow") != 0) continue;
    assert_true(vd_node_attr_float(&out, n, "exponent", 0) == 4.0);
    for (uint32_t k = 0; k < n->n_attr; k++)
      if (!strcmp(out.pool + out.attrs[n->attr_off + k].key, "exponent")) out.attrs[n->attr_off + k].v.f = 2.0;
    fixed++;
  }
  assert_int_equal(fixed, 1);
  assert_int_equal(run_exec(&f->s[CFG_BASE], &out), VD_EXEC_AGREE);
  vd_plan_free(&out);
}

/* Bug 14: the reducer runs in its own once-only segment, scheduled right
 * before the requested microbatch's backward on its rank. */
static void test_reducer_schedule(void **state) {
  fixture *f = *state;
  site s = {14, CFG_BASE, 2, 1, -1, 0, R(2), 1, 0};
  vd_plan_t out;
  vd_bug_result r;
  apply_site(f, &s, &out, &r);
  const vd_plan_t *in = &f->p[CFG_BASE];
  assert_int_equal(r.mb, 1);
  assert_int_equal(out.n_segments, in->n_segments + 1);
  assert_int_equal(out.programs[2].n_steps, in->programs[2].n_steps + 1);
  assert_int_equal(out.programs[0].n_steps, in->programs[0].n_steps);
  const vd_step_t *st = out.steps + out.programs[2].step_off;
  int found = 0;
  for (uint32_t i = 0; i + 1 < out.programs[2].n_steps; i++)
    if (st[i].segment == (int32_t)out.n_segments - 1) {
      assert_int_equal(st[i].mb, -1);
      assert_int_equal(st[i + 1].mb, 1);
      assert_non_null(strstr(out.pool + out.segments[st[i + 1].segment], "bwd"));
      found = 1;
    }
  assert_true(found);
  int64_t ni = vd_plan_find_node(&out, r.nodes[0]);
  assert_int_equal(out.nodes[ni].segment, (int32_t)out.n_segments - 1);
  vd_plan_free(&out);
}

static void expect_na(fixture *f, int bug, cfg_id cfg, int32_t rank, const char *needle) {
  vd_bug_opts o;
  vd_bug_opts_default(&o);
  o.rank = rank;
  vd_plan_t out;
  vd_bug_result r;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_bug_apply(&f->p[cfg], bug, &o, &out, &r, &d), VD_EUSAGE);
  if (!strstr(d.msg, needle)) print_error("bug %d: '%s' lacks '%s'\n", bug, d.msg, needle);
  assert_non_null(strstr(d.msg, "does not apply"));
  assert_non_null(strstr(d.msg, needle));
  vd_plan_free(&out);
}

static void test_not_applicable(void **state) {
  fixture *f = *state;
  expect_na(f, 6, CFG_BASE, -1, "identical replicas");
  expect_na(f, 18, CFG_BASE, -1, "--sp");
  expect_na(f, 19, CFG_BASE, -1, "tied");
  expect_na(f, 22, CFG_BASE, -1, "all_gather");
  expect_na(f, 23, CFG_BASE, -1, "--grad-clip");
  expect_na(f, 24, CFG_BASE, -1, "--zero 1");
  expect_na(f, 25, CFG_BASE, -1, "cp > 1");
  expect_na(f, 25, CFG_CP, 0, "--rank"); /* cp rank 0: its offsets are 0 already */
  expect_na(f, 17, CFG_BASE, 0, "loss");
  /* Bad arguments. */
  vd_bug_opts o;
  vd_bug_opts_default(&o);
  vd_plan_t out;
  vd_bug_result r;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_bug_apply(&f->p[CFG_BASE], 26, &o, &out, &r, &d), VD_EUSAGE);
  vd_plan_free(&out);
  vd_diag_clear(&d);
  assert_int_equal(vd_bug_apply(&f->s[CFG_BASE], 1, &o, &out, &r, &d), VD_EINPUT);
  vd_plan_free(&out);
  o.rank = 99;
  vd_diag_clear(&d);
  assert_int_equal(vd_bug_apply(&f->p[CFG_BASE], 1, &o, &out, &r, &d), VD_EUSAGE);
  assert_string_equal(d.field, "--rank");
  vd_plan_free(&out);
}

/* Never crash, never write an invalid plan: every bug, several seeds, on
 * every configuration plus tp=1 / pp=1 / nm=1 and mlp / moe plans. */
static void test_no_crash_matrix(void **state) {
  fixture *f = *state;
  vd_plan_t extra_s[4], extra_p[4];
  vd_gen_config c[4];
  for (int i = 0; i < 4; i++) config(CFG_BASE, &c[i]);
  c[0].tp = 1;
  c[1].pp = 1;
  c[1].nm = 1;
  c[1].dp = 1;
  c[2].model = VD_GEN_MLP;
  c[2].loss = VD_GEN_LOSS_DEFAULT;
  c[3].model = VD_GEN_MOE;
  c[3].ep = 2;
  const vd_plan_t *plans[CFG__COUNT + 4];
  int np = 0;
  for (int i = 0; i < CFG__COUNT; i++) plans[np++] = &f->p[i];
  for (int i = 0; i < 4; i++) {
    vd_diag d;
    vd_diag_clear(&d);
    assert_int_equal(vd_gen_build(&c[i], &extra_s[i], &extra_p[i], &d), VD_OK);
    plans[np++] = &extra_p[i];
  }
  int applied = 0;
  for (int k = 0; k < np; k++)
    for (int bug = 1; bug <= VD_BUG_COUNT; bug++)
      for (uint64_t seed = 0; seed < 3; seed++) {
        vd_bug_opts o;
        vd_bug_opts_default(&o);
        o.seed = seed;
        vd_plan_t out;
        vd_bug_result r;
        vd_diag d;
        vd_diag_clear(&d);
        vd_rc rc = vd_bug_apply(plans[k], bug, &o, &out, &r, &d);
        if (rc != VD_OK && rc != VD_EUSAGE) print_error("plan %d bug %d: %s\n", k, bug, d.msg);
        assert_true(rc == VD_OK || rc == VD_EUSAGE);
        if (rc == VD_OK) {
          assert_int_equal(vd_plan_validate(&out, "mutated", &d), VD_OK);
          assert_true(r.n_nodes >= 1 && r.n_ranks >= 1);
          applied++;
        } else {
          assert_non_null(strstr(d.msg, "does not apply"));
        }
        vd_plan_free(&out);
      }
  assert_true(applied > 100);
  for (int i = 0; i < 4; i++) {
    vd_plan_free(&extra_s[i]);
    vd_plan_free(&extra_p[i]);
  }
}

/* Allocation failures at every point of a mutation return VD_ENOMEM and
 * leak nothing (ASan's leak checker runs this test too). */
typedef struct {
  const fixture *f;
  const site *st;
  vd_plan_t out;
} bug_ctx;
static vd_rc bug_run(void *ctx, vd_diag *d) {
  bug_ctx *x = ctx;
  vd_bug_opts o;
  vd_bug_opts_default(&o);
  o.rank = x->st->rank;
  o.layer = x->st->layer;
  o.mb = x->st->mb;
  o.seed = x->st->seed;
  vd_bug_result r;
  return vd_bug_apply(&x->f->p[x->st->cfg], x->st->bug, &o, &x->out, &r, d);
}
static void bug_after(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d) {
  vd_plan_free(&((bug_ctx *)ctx)->out);
}

static void test_alloc_failures(void **state) {
  fixture *f = *state;
  for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
    bug_ctx x = {.f = f, .st = &sites[i]};
    if (tf_fail_each(bug_run, bug_after, &x, 1, NULL) != VD_OK) fail_msg("bug %d: the mutation failed", sites[i].bug);
  }
}

/* The table is complete and consistent. */
static void test_table(void **state) {
  (void)state;
  for (int b = 1; b <= VD_BUG_COUNT; b++) {
    const vd_bug_info *i = vd_bug_info_get(b);
    assert_non_null(i);
    assert_int_equal(i->number, b);
    assert_true(i->cls < VD_BUG_CLASS__COUNT);
    assert_non_null(i->name);
    assert_non_null(i->desc);
    assert_non_null(i->gen_opts);
    assert_non_null(strchr(i->sites, ';'));
    /* The expected diagnosis is the first accepted one. */
    assert_int_equal(strncmp(i->accept, i->diagnosis, strlen(i->diagnosis)), 0);
  }
  assert_null(vd_bug_info_get(0));
  assert_null(vd_bug_info_get(VD_BUG_COUNT + 1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_correct_plans_agree),
      cmocka_unit_test(test_every_site),
      cmocka_unit_test(test_pow_decomposition_is_exact),
      cmocka_unit_test(test_reducer_schedule),
      cmocka_unit_test(test_not_applicable),
      cmocka_unit_test(test_no_crash_matrix),
      cmocka_unit_test(test_alloc_failures),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
