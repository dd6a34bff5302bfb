/*
 * tests/verifier/test_json_out.c - verifier/json_out: strings repaired to
 * UTF-8 before jansson sees them (it refuses anything else), control
 * characters escaped, none-as-null integers, rounded timings, and the
 * reports' layout (a top-level member per line, a record per line).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../verifier/json_out.h"

static char *written(json_t *root) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  assert_non_null(m);
  assert_int_equal(vd_jb_write(root, m, 10), 0);
  fclose(m);
  return text;
}

static void test_strings_and_layout(void **state) {
  (void)state;
  vd_jb b = {0};
  json_t *root = vd_jb_obj(&b), *arr = vd_jb_arr(&b), *rec = vd_jb_obj(&b), *rec2 = vd_jb_obj(&b);
  vd_jb_set(&b, root, "name", vd_jb_str(&b, "a\x1b\n\xff" "b")); /* ESC, newline, an invalid byte */
  vd_jb_set(&b, root, "none", vd_jb_int_or_null(&b, -1));
  vd_jb_set(&b, root, "seconds", vd_jb_real(&b, 0.123449, 4));
  vd_jb_set(&b, root, "path", vd_jb_str(&b, NULL));
  vd_jb_set(&b, rec, "k", vd_jb_int(&b, 1));
  vd_jb_set(&b, rec2, "k", vd_jb_bool(&b, 1));
  vd_jb_push(&b, arr, rec);
  vd_jb_push(&b, arr, rec2);
  vd_jb_set(&b, root, "list", arr);
  assert_false(b.oom);
  char *text = written(root);
  assert_string_equal(text, "{\"name\":\"a\\u001B\\n\xef\xbf\xbd" "b\",\n\"none\":null,\n\"seconds\":0.1234,\n"
                            "\"path\":null,\n\"list\":[\n{\"k\":1},\n{\"k\":true}]}\n");
  free(text);
  json_decref(root);
}

static void test_null_container_flags_oom(void **state) {
  (void)state;
  vd_jb b = {0};
  vd_jb_set(&b, NULL, "k", vd_jb_int(&b, 1)); /* the value is taken and freed, the failure recorded */
  assert_true(b.oom);
  vd_jb b2 = {0};
  vd_jb_push(&b2, NULL, vd_jb_str(&b2, "x"));
  assert_true(b2.oom);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_strings_and_layout),
                                     cmocka_unit_test(test_null_container_flags_oom)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
