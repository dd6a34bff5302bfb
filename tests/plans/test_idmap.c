/*
 * tests/plans/test_idmap.c - the int64 -> uint32 id map (plans/idmap.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../common/mem.h"
#include "../../plans/idmap.h"

static void test_put_get_dup(void **state) {
  vd_idmap_t m;
  assert_int_equal(vd_idmap_init(&m, 0), VD_OK);
  const int64_t odd[] = {0, -1, INT64_MIN, INT64_MAX, 1, 42};
  for (uint32_t i = 0; i < 6; i++) assert_int_equal(vd_idmap_put(&m, odd[i], i, NULL), 0);
  /* growth from a tiny table, with strided keys that collide in low bits */
  for (uint32_t i = 0; i < 100000; i++) assert_int_equal(vd_idmap_put(&m, (int64_t)i * 4096 + 7, 10 + i, NULL), 0);
  assert_int_equal(m.n, 100006);
  uint32_t v = 0, old = 0;
  for (uint32_t i = 0; i < 6; i++) {
    assert_int_equal(vd_idmap_get(&m, odd[i], &v), 1);
    assert_int_equal(v, i);
  }
  assert_int_equal(vd_idmap_get(&m, 99999LL * 4096 + 7, &v), 1);
  assert_int_equal(v, 10 + 99999);
  assert_int_equal(vd_idmap_get(&m, 8, &v), 0);
  assert_int_equal(vd_idmap_put(&m, INT64_MIN, 77, &old), 1); /* duplicate keeps the first */
  assert_int_equal(old, 2);
  assert_int_equal(vd_idmap_get(&m, INT64_MIN, &v), 1);
  assert_int_equal(v, 2);
  vd_idmap_free(&m);
  vd_idmap_free(&m); /* idempotent */
  vd_idmap_free(NULL);
}

static void test_enomem(void **state) {
  vd_idmap_t m;
  assert_int_equal(vd_idmap_init(&m, 4), VD_OK);
  for (uint32_t i = 0; i < 8; i++) assert_int_equal(vd_idmap_put(&m, i, i, NULL), 0);
  vd_mem_fail_after(1); /* the next growth fails */
  int r = 0;
  for (uint32_t i = 8; i < 64 && r == 0; i++) r = vd_idmap_put(&m, i, i, NULL);
  vd_mem_fail_after(0);
  assert_int_equal(r, -1);
  uint32_t v;
  assert_int_equal(vd_idmap_get(&m, 3, &v), 1); /* the map is intact */
  assert_int_equal(v, 3);
  vd_idmap_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_put_get_dup), cmocka_unit_test(test_enomem)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
