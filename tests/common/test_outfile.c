/*
 * tests/common/test_outfile.c - common/outfile: what an output path may be
 * (issue 29 item 1).  A FIFO, a device, a directory, a symbolic link or a
 * missing directory is refused with VD_EIO naming the path, and left as it
 * was; an existing file keeps its mode; the temporary is created exclusively
 * under a random name beside the target and never survives; "-" is stdout
 * only where the caller allows it; a target swapped for a FIFO between open
 * and commit is refused; every allocation failure is VD_ENOMEM.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../../common/outfile.h"
#include "../support/fault.h"

static void tmp_dir(char *buf, size_t n) {
  snprintf(buf, n, "/tmp/vd-outfile-XXXXXX");
  assert_non_null(mkdtemp(buf));
}

/* A fresh directory, the path of out.txt in it and a cleared diag: the
 * ground of each test that writes one file. */
typedef struct {
  char dir[64], path[128];
  vd_diag d;
} target;

static void target_init(target *t) {
  tmp_dir(t->dir, sizeof(t->dir));
  snprintf(t->path, sizeof(t->path), "%s/out.txt", t->dir);
  vd_diag_clear(&t->d);
}

/* Entries of dir, dot files included (a temporary starts with '.'). */
static int entries(const char *dir) {
  DIR *dh = opendir(dir);
  assert_non_null(dh);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(dh)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(dh);
  return n;
}

static void rm_dir(const char *dir) {
  DIR *dh = opendir(dir);
  struct dirent *e;
  char p[512];
  while ((e = readdir(dh))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    unlink(p);
  }
  closedir(dh);
  rmdir(dir);
}

static void put(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  assert_int_equal(chmod(path, mode), 0);
}

static void expect_content(const char *path, const char *text) {
  char buf[256] = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  assert_string_equal(buf, text);
}

/* open + write + commit through the mechanism. */
static vd_rc write_text(const char *path, const char *text, unsigned flags, vd_diag *d) {
  vd_outfile o;
  VD_CHECK(vd_outfile_open(&o, path, flags, d));
  fputs(text, o.fp);
  return vd_outfile_commit(&o, d);
}

/* The path is refused by both the check and the open, the diag names it
 * and says why, and nothing is created in dir. */
static void expect_refused(const char *dir, const char *path, const char *why) {
  vd_diag d;
  int before = entries(dir);
  vd_diag_clear(&d);
  assert_int_equal(vd_outfile_check(path, 0, &d), VD_EIO);
  assert_string_equal(d.file, path);
  assert_non_null(strstr(d.msg, why));
  vd_diag_clear(&d);
  assert_int_equal(write_text(path, "new", 0, &d), VD_EIO);
  assert_string_equal(d.file, path);
  assert_non_null(strstr(d.msg, why));
  assert_int_equal(entries(dir), before);
}

static void test_new_file_and_kept_mode(void **state) {
  target t;
  target_init(&t);
  mode_t old = umask(022);
  assert_int_equal(write_text(t.path, "one", 0, &t.d), VD_OK);
  expect_content(t.path, "one");
  struct stat st;
  assert_int_equal(stat(t.path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644); /* 0666 minus the umask, as fopen */
  /* An existing 0600 file stays 0600; a 0640 one 0640. */
  assert_int_equal(chmod(t.path, 0600), 0);
  assert_int_equal(write_text(t.path, "two", 0, &t.d), VD_OK);
  expect_content(t.path, "two");
  assert_int_equal(stat(t.path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(chmod(t.path, 0640), 0);
  assert_int_equal(write_text(t.path, "three", 0, &t.d), VD_OK);
  assert_int_equal(stat(t.path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0640);
  assert_int_equal(entries(t.dir), 1); /* no temporary left */
  umask(old);
  rm_dir(t.dir);
}

static void test_refused_paths(void **state) {
  char dir[64], p[160], q[160];
  tmp_dir(dir, sizeof(dir));
  /* FIFO: refused without blocking, still a FIFO. */
  snprintf(p, sizeof(p), "%s/fifo", dir);
  assert_int_equal(mkfifo(p, 0644), 0);
  expect_refused(dir, p, "FIFO");
  struct stat st;
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  /* A symbolic link to a regular file: neither replaced nor written through. */
  snprintf(q, sizeof(q), "%s/target", dir);
  put(q, "keep", 0644);
  snprintf(p, sizeof(p), "%s/link", dir);
  assert_int_equal(symlink(q, p), 0);
  expect_refused(dir, p, "symbolic link");
  assert_int_equal(lstat(p, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  expect_content(q, "keep");
  /* A dangling link too (writing would create its target). */
  snprintf(p, sizeof(p), "%s/dangling", dir);
  snprintf(q, sizeof(q), "%s/nowhere", dir);
  assert_int_equal(symlink(q, p), 0);
  expect_refused(dir, p, "symbolic link");
  assert_int_equal(access(q, F_OK), -1);
  /* A directory, a path ending in '/', a missing directory. */
  snprintf(p, sizeof(p), "%s/sub", dir);
  assert_int_equal(mkdir(p, 0755), 0);
  expect_refused(dir, p, "a directory");
  snprintf(p, sizeof(p), "%s/sub/", dir);
  expect_refused(dir, p, "directory path");
  snprintf(p, sizeof(p), "%s/missing/out.txt", dir);
  expect_refused(dir, p, "does not exist");
  /* Character devices: /dev/null, and one made here when we may (root). */
  expect_refused(dir, "/dev/null", "character device");
  snprintf(p, sizeof(p), "%s/null", dir);
  if (mknod(p, S_IFCHR | 0666, makedev(1, 3)) == 0) {
    expect_refused(dir, p, "character device");
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
  }
  /* "-" only with VD_OUTFILE_STDOUT; empty names never. */
  expect_refused(dir, "-", "standard output");
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_outfile_check("", 0, &d), VD_EIO);
  rm_dir(dir);
}

static void test_stdout(void **state) {
  vd_outfile o;
  vd_diag d;
  vd_diag_clear(&d);
  assert_int_equal(vd_outfile_open(&o, "-", VD_OUTFILE_STDOUT, &d), VD_OK);
  assert_ptr_equal(o.fp, stdout);
  assert_null(o.tmp);
  assert_int_equal(vd_outfile_commit(&o, &d), VD_OK);
  assert_null(o.path);
}

static void test_temporary_is_exclusive(void **state) {
  target t;
  vd_outfile a, b;
  target_init(&t);
  put(t.path, "old", 0644);
  assert_int_equal(vd_outfile_open(&a, t.path, 0, &t.d), VD_OK);
  assert_int_equal(vd_outfile_open(&b, t.path, 0, &t.d), VD_OK);
  /* Beside the target, regular, private until commit, and two writers of
   * one target never share a temporary (the old writer used PATH.tmp). */
  assert_true(!strncmp(a.tmp, t.dir, strlen(t.dir)) && a.tmp[strlen(t.dir)] == '/');
  assert_string_not_equal(a.tmp, b.tmp);
  char fixed[160];
  snprintf(fixed, sizeof(fixed), "%s.tmp", t.path);
  assert_string_not_equal(a.tmp, fixed);
  struct stat st;
  assert_int_equal(lstat(a.tmp, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 0077, 0);
  fputs("from a", a.fp);
  fputs("from b", b.fp);
  /* Abort leaves the target as it was and removes the temporary. */
  char tmp_b[256];
  snprintf(tmp_b, sizeof(tmp_b), "%s", b.tmp);
  vd_outfile_abort(&b);
  assert_int_equal(access(tmp_b, F_OK), -1);
  expect_content(t.path, "old");
  vd_outfile_abort(&b); /* released: a no-op */
  assert_int_equal(vd_outfile_commit(&a, &t.d), VD_OK);
  expect_content(t.path, "from a");
  assert_int_equal(entries(t.dir), 1);
  rm_dir(t.dir);
}

static void test_target_swapped_before_commit(void **state) {
  target t;
  vd_outfile o;
  target_init(&t);
  assert_int_equal(vd_outfile_open(&o, t.path, 0, &t.d), VD_OK);
  fputs("data", o.fp);
  assert_int_equal(mkfifo(t.path, 0644), 0); /* planted while we write */
  assert_int_equal(vd_outfile_commit(&o, &t.d), VD_EIO);
  assert_string_equal(t.d.file, t.path);
  assert_non_null(strstr(t.d.msg, "FIFO"));
  struct stat st;
  assert_int_equal(lstat(t.path, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  assert_int_equal(entries(t.dir), 1); /* the temporary is gone */
  rm_dir(t.dir);
}

static void test_write_error_reported(void **state) {
  /* Writes that fail (a file-size limit: EFBIG): the commit fails, the
   * target keeps its content and the temporary is removed. */
  target t;
  vd_outfile o;
  target_init(&t);
  put(t.path, "old", 0644);
  struct rlimit old;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(vd_outfile_open(&o, t.path, 0, &t.d), VD_OK);
  struct rlimit lim = {4, old.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  fputs("0123456789", o.fp);
  vd_rc rc = vd_outfile_commit(&o, &t.d);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  assert_int_equal(rc, VD_EIO);
  assert_non_null(strstr(t.d.msg, "write failed"));
  expect_content(t.path, "old");
  assert_int_equal(entries(t.dir), 1);
  rm_dir(t.dir);
}

typedef struct {
  char path[160];
} fault_ctx;

static vd_rc fault_run(void *ctx, vd_diag *d) {
  fault_ctx *c = ctx;
  return write_text(c->path, "x", 0, d);
}

static void test_allocation_failures(void **state) {
  char dir[64];
  fault_ctx c;
  tmp_dir(dir, sizeof(dir));
  snprintf(c.path, sizeof(c.path), "%s/out.txt", dir);
  assert_int_equal(tf_fail_each(fault_run, NULL, &c, 1, NULL), VD_OK);
  assert_int_equal(entries(dir), 1);
  rm_dir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_new_file_and_kept_mode), cmocka_unit_test(test_refused_paths),
      cmocka_unit_test(test_stdout),                 cmocka_unit_test(test_temporary_is_exclusive),
      cmocka_unit_test(test_target_swapped_before_commit), cmocka_unit_test(test_write_error_reported),
      cmocka_unit_test(test_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
