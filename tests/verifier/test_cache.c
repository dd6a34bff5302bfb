/*
 * tests/verifier/test_cache.c - verifier/cache.c, the proof cache
 * (docs/verifier.md section 9): a stored form is found again, by another
 * cache object on the same directory (another run); anything but the exact
 * entry is a miss and is counted as ignored: a flipped bit, a truncated
 * file, another form's entry under this form's name, an entry written with
 * another cache key; memory-only caches share within the process; the cap
 * evicts; whole-configuration entries likewise.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../verifier/cache.h"

static char dir[64], cfg[64];

static int setup(void **state) {
  (void)state;
  snprintf(cfg, sizeof(cfg), "/tmp/vd_cache_cfg_XXXXXX");
  if (!mkdtemp(cfg)) return -1;
  setenv("XDG_CONFIG_HOME", cfg, 1);
  unsetenv("VERDICT_CACHE_KEY");
  snprintf(dir, sizeof(dir), "/tmp/vd_cache_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, cfg);
  return system(cmd) == 0 ? 0 : -1;
}

static vd_cache *open_dir(const char *d_) {
  vd_cache *c = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_cache_open(d_, 0, &c, &d), VD_OK);
  return c;
}

static void rewrite(const char *path, void (*edit)(uint8_t *b, size_t *n)) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  uint8_t b[4096];
  size_t n = fread(b, 1, sizeof(b), f);
  fclose(f);
  edit(b, &n);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
}
static void flip(uint8_t *b, size_t *n) { b[*n / 2] ^= 0x10; }
static void cut(uint8_t *b, size_t *n) { (void)b; *n -= 7; }

static const uint8_t form_a[] = "stage form A: operators, attributes, shapes, wiring";
static const uint8_t form_b[] = "stage form B: another class, of the same length!!!";

/* A run on the directory finds form A's entry unusable: a miss, counted as
 * ignored with WHY in the reason (NULL: any reason); REPROVE stores A again
 * (proven again, the entry rewritten). */
static void expect_a_ignored(const char *why, int reprove) {
  vd_cache *c = open_dir(dir);
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 0);
  vd_cache_stats s;
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.ignored, 1);
  if (why) assert_non_null(strstr(s.last_ignored, why));
  if (reprove) vd_cache_store(c, form_a, sizeof(form_a));
  vd_cache_close(c);
}

static void test_roundtrip_and_misses(void **state) {
  (void)state;
  vd_cache *c = open_dir(dir);
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 0);
  vd_cache_store(c, form_a, sizeof(form_a));
  vd_cache_store(c, form_b, sizeof(form_b));
  vd_cache_stats s;
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.stored, 2);
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 1); /* memory */
  vd_cache_close(c);

  /* another run on the directory */
  c = open_dir(dir);
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 1);
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.hits_disk, 1);
  /* a form one byte different is another question */
  uint8_t other[sizeof(form_a)];
  memcpy(other, form_a, sizeof(other));
  other[3] ^= 1;
  assert_int_equal(vd_cache_lookup(c, other, sizeof(other)), 0);
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.ignored, 0); /* no file: a plain miss */
  vd_cache_close(c);

  char pa[4300], pb[4300];
  c = open_dir(dir);
  assert_int_equal(vd_cache_entry_path(c, form_a, sizeof(form_a), pa, sizeof(pa)), 0);
  assert_int_equal(vd_cache_entry_path(c, form_b, sizeof(form_b), pb, sizeof(pb)), 0);
  vd_cache_close(c);

  /* B's entry under A's name: the forms differ, ignored */
  assert_int_equal(rename(pb, pa), 0);
  expect_a_ignored("canonical form differs", 1);
  /* a flipped bit */
  rewrite(pa, flip);
  expect_a_ignored(NULL, 1);
  /* truncated */
  rewrite(pa, cut);
  expect_a_ignored("size", 1);
  /* written under another cache key: authentication fails */
  setenv("VERDICT_CACHE_KEY", "another key", 1);
  expect_a_ignored("authentication", 0);
  unsetenv("VERDICT_CACHE_KEY");
  c = open_dir(dir); /* the key file's key again */
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 1);
  vd_cache_close(c);
}

static void test_memory_only(void **state) {
  (void)state;
  vd_cache *c = open_dir(NULL);
  assert_null(vd_cache_dir(c));
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 0);
  vd_cache_store(c, form_a, sizeof(form_a));
  assert_int_equal(vd_cache_lookup(c, form_a, sizeof(form_a)), 1);
  assert_int_equal(vd_cache_lookup(c, form_b, sizeof(form_b)), 0);
  vd_cache_stats s;
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.hits_memory, 1);
  assert_int_equal(s.stored, 0); /* nothing written */
  /* many forms: the table grows */
  for (int i = 0; i < 5000; i++) vd_cache_store(c, (const uint8_t *)&i, sizeof(i));
  for (int i = 0; i < 5000; i += 97) assert_int_equal(vd_cache_lookup(c, (const uint8_t *)&i, sizeof(i)), 1);
  vd_cache_close(c);
}

static void test_config_entries(void **state) {
  (void)state;
  const uint8_t what[] = "plans\0\0\0 and two SHA-256 digests of the files";
  vd_cache_config in = {822, 116, 2722}, out = {0};
  vd_cache *c = open_dir(dir);
  assert_int_equal(vd_cache_config_lookup(c, what, sizeof(what), &out), 0);
  vd_cache_config_store(c, what, sizeof(what), &in);
  vd_cache_close(c);
  c = open_dir(dir);
  assert_int_equal(vd_cache_config_lookup(c, what, sizeof(what), &out), 1);
  assert_int_equal(out.n_stages, 822);
  assert_int_equal(out.n_classes, 116);
  uint8_t other[sizeof(what)];
  memcpy(other, what, sizeof(other));
  other[10] ^= 1;
  assert_int_equal(vd_cache_config_lookup(c, other, sizeof(other), &out), 0);
  vd_cache_close(c);
  setenv("VERDICT_CACHE_KEY", "forger without the key", 1);
  c = open_dir(dir);
  assert_int_equal(vd_cache_config_lookup(c, what, sizeof(what), &out), 0);
  vd_cache_stats s;
  vd_cache_stats_get(c, &s);
  assert_int_equal(s.ignored, 1);
  vd_cache_close(c);
  unsetenv("VERDICT_CACHE_KEY");
}

static void test_cap_evicts(void **state) {
  (void)state;
  char small[80];
  snprintf(small, sizeof(small), "%s/small", dir);
  vd_cache *c = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_cache_open(small, 1 << 20, &c, &d), VD_OK);
  static uint8_t big[64 << 10];
  for (int i = 0; i < 40; i++) { /* 40 entries of 64 KiB: 2.5 MiB */
    memset(big, i + 1, sizeof(big));
    vd_cache_store(c, big, sizeof(big));
  }
  vd_cache_close(c);
  char cmd[200];
  snprintf(cmd, sizeof(cmd), "test $(du -sk %s | cut -f1) -le 1100", small);
  assert_int_equal(system(cmd), 0);
  /* a file where the directory should be */
  char file[90];
  snprintf(file, sizeof(file), "%s/afile", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  vd_diag_clear(&d);
  assert_int_equal(vd_cache_open(file, 0, &c, &d), VD_EIO);
  assert_null(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip_and_misses),
      cmocka_unit_test(test_memory_only),
      cmocka_unit_test(test_config_entries),
      cmocka_unit_test(test_cap_evicts),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
