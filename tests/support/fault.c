/*
 * tests/support/fault.c - the fail-Nth-allocation loop (fault.h).
 */
#include "fault.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../common/mem.h"

vd_rc tf_fail_each(tf_run_fn run, tf_after_fn after, void *ctx, int want_diag, long *n_allocs) {
  for (long n = 1; n < TF_MAX_ALLOCS; n++) {
    vd_diag d;
    vd_diag_clear(&d);
    vd_mem_fail_after(n);
    vd_rc rc = run(ctx, &d);
    int hit = vd_mem_fault_hit();
    vd_mem_fail_after(0);
    if (hit) {
      if (rc != VD_ENOMEM) print_error("allocation %ld failed, but the run returned rc %d: %s\n", n, (int)rc, d.msg);
      assert_int_equal(rc, VD_ENOMEM);
      if (want_diag) assert_int_equal(d.rc, VD_ENOMEM);
    }
    if (after) after(ctx, rc, hit, n, &d);
    if (!hit) {
      if (n_allocs) *n_allocs = n - 1;
      return rc;
    }
  }
  fail_msg("no run completed within %ld allocations", TF_MAX_ALLOCS);
  return VD_EINTERNAL;
}
