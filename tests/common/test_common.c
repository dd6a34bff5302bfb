/*
 * tests/common/test_common.c - common/: the structural-issue list (a cap
 * that counts what it drops, the report's "N more" figure) and the limits
 * table (every limit has its value and a reason).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/issue.h"
#include "../../common/limits.h"
#include "../../common/mem.h"

static void test_issue_cap_counts_dropped(void **state) {
  (void)state;
  vd_issue *v = NULL;
  size_t n = 0, cap = 0, dropped = 0;
  vd_issue is;
  vd_issue_init(&is, "lineage", 3, "gap", VD_DX_DATAFLOW);
  assert_int_equal(is.pnode, -1);
  assert_int_equal(is.tensor, -1);
  assert_int_equal(is.stensor, -1);
  assert_int_equal(is.rank, -1);
  assert_int_equal(is.mb, -1);
  for (int i = 0; i < 20; i++) {
    is.tensor = i;
    assert_int_equal(vd_issue_push(&v, &n, &cap, 12, &dropped, &is), VD_OK);
  }
  assert_int_equal(n, 12);
  assert_int_equal(dropped, 8); /* counted, so the report can say how many were not listed */
  assert_int_equal(v[11].tensor, 11);
  assert_string_equal(v[0].kind_name, "gap");
  assert_int_equal(v[0].diagnosis, VD_DX_DATAFLOW);
  /* growth failure: VD_ENOMEM, the list intact */
  vd_mem_fail_after(1);
  size_t n2 = n;
  vd_rc rc = VD_OK;
  for (int i = 0; i < 64 && rc == VD_OK; i++) rc = vd_issue_push(&v, &n2, &cap, 0, &dropped, &is);
  vd_mem_fail_after(0);
  assert_int_equal(rc, VD_ENOMEM);
  assert_int_equal(v[11].tensor, 11);
  vd_free(v);
}

static void test_limits_table(void **state) {
  (void)state;
  assert_int_equal(vd_limits[VD_LIMI_STAGE_TIMEOUT_MS].value, VD_LIM_STAGE_TIMEOUT_MS);
  assert_int_equal(vd_limits[VD_LIMI_CEX_ELEMS].value, VD_LIM_CEX_ELEMS);
  assert_string_equal(vd_limits[VD_LIMI_STAGE_TIMEOUT_MS].option, "--stage-timeout");
  for (int i = 0; i < VD_LIMI__COUNT; i++) {
    assert_non_null(vd_limits[i].name);
    assert_true(vd_limits[i].value > 0);
    assert_non_null(vd_limits[i].reason);
    if (strlen(vd_limits[i].reason) < 60) fail_msg("%s: the reason is too short", vd_limits[i].name);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_issue_cap_counts_dropped),
                                     cmocka_unit_test(test_limits_table)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
