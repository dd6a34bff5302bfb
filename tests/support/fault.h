/*
 * tests/support/fault.h - the fail-Nth-allocation loop of the fault tests.
 *
 * Every module's fault test does the same thing: run one operation with
 * allocation 1 failing, then allocation 2, ... until a run completes
 * without reaching the fault; every run that reached it must fail with
 * VD_ENOMEM and leave nothing behind.  tf_fail_each is that loop, written
 * once (it was copied in six test files with caps from 200 to 100000).
 */
#ifndef VD_TEST_FAULT_H
#define VD_TEST_FAULT_H

#include "../../common/diag.h"

/* One cap for every test: the loop stops at the first run that completes,
 * so the cap only bounds an operation that never completes. */
#define TF_MAX_ALLOCS 1000000L

/* One run of the operation under test, with a cleared diag. */
typedef vd_rc (*tf_run_fn)(void *ctx, vd_diag *d);
/* Called after every run: assert on its result and free what it built.
 * hit: the run reached the failing allocation. */
typedef void (*tf_after_fn)(void *ctx, vd_rc rc, int hit, long nth, const vd_diag *d);

/* Runs run(ctx) with allocation n failing for n = 1, 2, ...; every run
 * that reaches the fault must return VD_ENOMEM (and, with want_diag, record
 * it in the diag).  after (may be NULL) is called after each run.  Returns
 * the rc of the first run that completes without reaching the fault (the
 * test asserts it), and its allocation count in *n_allocs (may be NULL).
 * Fails the test when no run completes within TF_MAX_ALLOCS. */
vd_rc tf_fail_each(tf_run_fn run, tf_after_fn after, void *ctx, int want_diag, long *n_allocs);

#endif
