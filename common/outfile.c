/*
 * common/outfile.c - checked targets and exclusive temporaries for every
 * output file (see outfile.h for the rules and why).
 *
 * Invariants: a temporary is only ever created by open(O_CREAT | O_EXCL |
 * O_NOFOLLOW) under a random name, so a name planted in advance (a symlink,
 * a FIFO) is never followed or reused; the target is judged with lstat,
 * never stat, so a link is seen as a link.
 */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mem.h"

static const char *kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

/* The directory part of path into buf ("." or "/" when there is none). */
static void dir_of(const char *path, char *buf, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(buf, n, ".");
  else if (slash == path) snprintf(buf, n, "/");
  else snprintf(buf, n, "%.*s", (int)(slash - path), path);
}

/* The rules of outfile.h.  *exists and *st describe an existing regular
 * target on success. */
static vd_rc judge(const char *path, unsigned flags, int *exists, struct stat *st, vd_diag *d) {
  *exists = 0;
  if (!path || !*path) VD_FAIL(d, VD_EIO, NULL, NULL, NULL, "expected an output file name, got an empty one");
  if (!strcmp(path, "-")) {
    if (flags & VD_OUTFILE_STDOUT) return VD_OK;
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "'-' (standard output) is not accepted for this output; give a file name "
                                         "(./- for a file called '-')");
  }
  size_t len = strlen(path);
  if (path[len - 1] == '/') VD_FAIL(d, VD_EIO, path, NULL, NULL, "expected a file name, got a directory path");
  if (lstat(path, st) == 0) {
    if (S_ISLNK(st->st_mode))
      VD_FAIL(d, VD_EIO, path, NULL, NULL, "is a symbolic link: refused (verdict neither replaces a link nor writes "
                                           "through it; give the file it points to)");
    if (!S_ISREG(st->st_mode))
      VD_FAIL(d, VD_EIO, path, NULL, NULL, "exists and is %s: refused (verdict writes only regular files)",
              kind_of(st->st_mode));
    if (faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0)
      VD_FAIL(d, VD_EIO, path, NULL, NULL, "the file is not writable: %s", strerror(errno));
    *exists = 1;
  } else if (errno != ENOENT) {
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot be used as an output: %s", strerror(errno));
  }
  char dir[4096];
  struct stat ds;
  dir_of(path, dir, sizeof(dir));
  if (stat(dir, &ds) != 0) {
    if (errno == ENOENT) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot create the file: directory '%s' does not exist", dir);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot create the file in '%s': %s", dir, strerror(errno));
  }
  if (!S_ISDIR(ds.st_mode)) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot create the file: '%s' is not a directory", dir);
  if (faccessat(AT_FDCWD, dir, W_OK | X_OK, AT_EACCESS) != 0)
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot create the file: directory '%s' is not writable", dir);
  return VD_OK;
}

vd_rc vd_outfile_check(const char *path, unsigned flags, vd_diag *d) {
  int exists;
  struct stat st;
  return judge(path, flags, &exists, &st, d);
}

static void release(vd_outfile *o) {
  vd_free(o->path);
  vd_free(o->tmp);
  memset(o, 0, sizeof(*o));
}

/* 64 random bits for a temporary's name; getrandom never blocks once the
 * pool is initialised, and the clock and pid are a fallback only (O_EXCL
 * keeps a guessed name harmless either way). */
static uint64_t name_bits(unsigned attempt) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r)) return r;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^ attempt;
}

vd_rc vd_outfile_open(vd_outfile *o, const char *path, unsigned flags, vd_diag *d) {
  memset(o, 0, sizeof(*o));
  int exists = 0;
  struct stat st;
  VD_CHECK(judge(path, flags, &exists, &st, d));
  if (!strcmp(path, "-")) {
    o->fp = stdout;
    o->path = vd_strdup(path);
    if (!o->path) return VD_OOM(d);
    return VD_OK;
  }
  char dir[4096];
  dir_of(path, dir, sizeof(dir));
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t n = strlen(dir) + strlen(base) + 40;
  o->path = vd_strdup(path);
  o->tmp = vd_malloc(n);
  if (!o->path || !o->tmp) {
    release(o);
    return VD_OOM(d);
  }
  /* The base name is cut to 64 bytes so that the temporary's name stays
   * under NAME_MAX however long the target's is. */
  int fd = -1, err = 0;
  for (unsigned attempt = 0; attempt < 64 && fd < 0; attempt++) {
    snprintf(o->tmp, n, "%s/.%.64s.%016llx.tmp", dir, base, (unsigned long long)name_bits(attempt));
    /* A new file gets 0666 minus the umask, as fopen would give it; one
     * that replaces a file starts private and gets that file's mode at
     * commit, so a 0600 file's new content is never readable by others. */
    fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, exists ? 0600 : 0666);
    err = errno;
    if (fd < 0 && err != EEXIST) break;
  }
  if (fd < 0) {
    release(o);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot create a temporary file in '%s': %s", dir, strerror(err));
  }
  o->fp = fdopen(fd, "wb");
  if (!o->fp) {
    err = errno;
    close(fd);
    unlink(o->tmp);
    release(o);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot open the temporary file: %s", strerror(err));
  }
  o->replace = exists;
  if (exists) {
    o->mode = st.st_mode & 07777;
    o->uid = st.st_uid;
    o->gid = st.st_gid;
  }
  return VD_OK;
}

void vd_outfile_abort(vd_outfile *o) {
  if (!o->path) return;
  if (o->tmp) {
    if (o->fp) fclose(o->fp);
    unlink(o->tmp);
  }
  release(o);
}

vd_rc vd_outfile_commit(vd_outfile *o, vd_diag *d) {
  if (VD_NEVER(!o->path || !o->fp))
    return vd_diag_set(d, VD_EINTERNAL, __FILE__, __LINE__, NULL, NULL, NULL, "commit of an output that is not open");
  vd_rc rc = VD_OK;
  if (!o->tmp) { /* stdout: flushed, never closed */
    if (fflush(o->fp) != 0 || ferror(o->fp))
      rc = VD_ERR(d, VD_EIO, NULL, NULL, NULL, "writing to standard output failed: %s", strerror(errno));
    release(o);
    return rc;
  }
  int bad = fflush(o->fp) != 0 || ferror(o->fp);
  int err = errno;
  int fd = fileno(o->fp);
  if (!bad && o->replace) {
    /* The owner first: fchown clears set-id bits, fchmod then restores
     * the mode.  Changing the owner needs privilege; without it the file
     * becomes the writer's, as it would with any editor. */
    if (fchown(fd, o->uid, o->gid) != 0) { /* not permitted: keep ours */
    }
    if (fchmod(fd, o->mode) != 0) bad = 1, err = errno;
  }
  if (fclose(o->fp) != 0 && !bad) bad = 1, err = errno;
  o->fp = NULL;
  struct stat st;
  if (bad) {
    rc = VD_ERR(d, VD_EIO, o->path, NULL, NULL, "write failed: %s", strerror(err));
  } else if (lstat(o->path, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* The target may have been replaced since open: judged again right
     * before the rename (a FIFO or a device planted meanwhile is refused). */
    rc = VD_ERR(d, VD_EIO, o->path, NULL, NULL, "became %s while it was written: refused", kind_of(st.st_mode));
  } else if (rename(o->tmp, o->path) != 0) {
    rc = VD_ERR(d, VD_EIO, o->path, NULL, NULL, "write failed: %s", strerror(errno));
  }
  if (rc != VD_OK) unlink(o->tmp);
  release(o);
  return rc;
}
