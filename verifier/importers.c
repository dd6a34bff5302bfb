/*
 * verifier/importers.c - running the Python front ends (importers.h) in a
 * child process: fork, execv of the interpreter on the tool (no shell, so
 * no file name is ever interpreted), stdout to /dev/null, stderr to a file
 * of the temporary directory whose last line becomes the error message.
 */
#include "importers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/digest.h"
#include "../common/mem.h"

int vd_import_is_pickle(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char b[2];
  size_t n = fread(b, 1, 2, f);
  fclose(f);
  return n == 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5;
}

static const char *python(void) {
  const char *p = getenv("VERDICT_PYTHON");
  return p && *p ? p : "/usr/bin/python3";
}

/* BIN/../tools/NAME, or VERDICT_TOOLS/NAME. */
static int tool_path(const char *name, char *buf, size_t cap) {
  const char *env = getenv("VERDICT_TOOLS");
  if (env && *env) return snprintf(buf, cap, "%s/%s", env, name) < (int)cap ? 0 : -1;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return -1;
  *slash = '\0';
  return snprintf(buf, cap, "%s/../tools/%s", exe, name) < (int)cap ? 0 : -1;
}

static vd_rc make_tmp(vd_import_tmp *t, vd_diag *d) {
  const char *base = getenv("TMPDIR");
  snprintf(t->dir, sizeof(t->dir), "%s/verdict-import.XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(t->dir)) {
    int e = errno;
    t->dir[0] = '\0';
    VD_FAIL(d, VD_EIO, NULL, NULL, NULL, "cannot create a temporary directory for the conversion: %s", strerror(e));
  }
  snprintf(t->single, sizeof(t->single), "%s/single.plan", t->dir);
  snprintf(t->parallel, sizeof(t->parallel), "%s/parallel.plan", t->dir);
  return VD_OK;
}

void vd_import_cleanup(vd_import_tmp *t) {
  if (!t || !t->dir[0]) return;
  DIR *dd = opendir(t->dir);
  if (dd) {
    struct dirent *de;
    char p[4400];
    while ((de = readdir(dd))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      snprintf(p, sizeof(p), "%s/%s", t->dir, de->d_name);
      unlink(p);
    }
    closedir(dd);
  }
  rmdir(t->dir);
  t->dir[0] = '\0';
}

/* The last non-empty line of the child's stderr (its one-line error). */
static void last_line(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    if (n) snprintf(buf, cap, "%s", line);
  }
  fclose(f);
}

/* Runs python TOOL args... ; returns the exit status (128+signal when
 * killed, -1 when it could not be started), err gets its last stderr line. */
static int run_tool(const vd_import_tmp *t, char *const argv[], char *err, size_t cap) {
  char log[4400];
  snprintf(log, sizeof(log), "%s/stderr.log", t->dir);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, cap, "cannot start %s: %s", argv[0], strerror(errno));
    return -1;
  }
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd >= 0) dup2(fd, 2);
    if (nul >= 0) {
      dup2(nul, 1);
      dup2(nul, 0);
    }
    execv(argv[0], argv);
    dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      snprintf(err, cap, "waiting for %s failed", argv[0]);
      return -1;
    }
  last_line(log, err, cap);
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

static vd_rc check_tools(const char *tool, char *tp, size_t cap, vd_diag *d) {
  /* (t->tool_exit stays -1 when the tool cannot be run at all) */
  if (access(python(), X_OK) != 0)
    VD_FAIL(d, VD_EINPUT, python(), NULL, NULL,
            "no Python interpreter here; %s needs Debian's /usr/bin/python3 with python3-msgpack%s "
            "(make deps installs them; VERDICT_PYTHON names another)",
            tool, strcmp(tool, "torch2plan") ? "" : " (PyTorch itself comes from the project's .venv)");
  if (tool_path(tool, tp, cap) != 0 || access(tp, R_OK) != 0)
    VD_FAIL(d, VD_EINPUT, tp, NULL, NULL, "the converter tools/%s is not found next to the verdict binary "
            "(VERDICT_TOOLS=DIR names its folder)", tool);
  return VD_OK;
}

vd_rc vd_import_nnscaler(const char *sm, const char *pm, vd_import_tmp *t, vd_diag *d) {
  char tp[4200];
  memset(t, 0, sizeof(*t));
  t->tool_exit = -1;
  VD_CHECK(check_tools("nnscaler2plan", tp, sizeof(tp), d));
  VD_CHECK(make_tmp(t, d));
  char *argv[] = {(char *)python(), tp, "--sm", (char *)sm, "--pm", (char *)pm,
                  "--single", t->single, "--parallel", t->parallel, NULL};
  char err[600];
  int rc = run_tool(t, argv, err, sizeof(err));
  if (rc == 0) return VD_OK;
  vd_import_cleanup(t);
  t->tool_exit = rc;
  /* the importer's messages start with "nnscaler2plan: FILE: ..." */
  VD_FAIL(d, VD_EINPUT, NULL, NULL, NULL, "converting the nnScaler pickles failed (exit %d): %s", rc,
          err[0] ? err : "no message");
}

vd_rc vd_import_torch(const char *single_py, const char *parallel_py, int nproc, char *const *sets, size_t n_sets,
                      vd_import_tmp *t, vd_diag *d) {
  char tp[4200], np[32];
  memset(t, 0, sizeof(*t));
  t->tool_exit = -1;
  VD_CHECK(check_tools("torch2plan", tp, sizeof(tp), d));
  VD_CHECK(make_tmp(t, d));
  snprintf(np, sizeof(np), "%d", nproc);
  char *fixed[] = {(char *)python(), tp, "--single", (char *)single_py, "--parallel", (char *)parallel_py,
                   "--nproc", np, "--out-single", t->single, "--out-parallel", t->parallel};
  size_t nf = sizeof(fixed) / sizeof(fixed[0]);
  char **argv = vd_calloc(nf + 2 * n_sets + 1, sizeof(*argv));
  if (!argv) {
    vd_import_cleanup(t);
    return VD_OOM(d);
  }
  memcpy(argv, fixed, sizeof(fixed));
  for (size_t k = 0; k < n_sets; k++) {
    argv[nf + 2 * k] = "--set";
    argv[nf + 2 * k + 1] = sets[k];
  }
  char err[600];
  int rc = run_tool(t, argv, err, sizeof(err));
  vd_free(argv);
  if (rc == 0) return VD_OK;
  vd_import_cleanup(t);
  /* torch2plan: 1 the DP replicas ran different programs (a bug of the
   * parallel program), 2 not capturable, 3 a program crashed */
  t->tool_exit = rc;
  VD_FAIL(d, VD_EINPUT, NULL, NULL, NULL, "capturing the PyTorch programs failed (torch2plan exit %d): %s",
          rc, err[0] ? err : "no message");
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

vd_rc vd_import_nnscaler_digest(uint8_t out[32], vd_diag *d) {
  char tp[4200], dir[4200];
  if (tool_path("nnscaler2plan", tp, sizeof(tp)) || tool_path("nnscaler", dir, sizeof(dir)))
    VD_FAIL(d, VD_EIO, NULL, NULL, NULL, "the importer tools/nnscaler2plan is not found next to the verdict binary");
  vd_digest *h = vd_digest_new();
  if (!h) return VD_OOM(d);
  uint8_t one[VD_DIGEST_BYTES];
  vd_rc rc = vd_digest_file(tp, one, d);
  if (rc == VD_OK) vd_digest_update(h, one, sizeof(one));
  DIR *dd = rc == VD_OK ? opendir(dir) : NULL;
  if (rc == VD_OK && !dd) rc = VD_ERR(d, VD_EIO, dir, NULL, NULL, "cannot read the importer's folder");
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *de;
  while (dd && rc == VD_OK && (de = readdir(dd))) {
    size_t len = strlen(de->d_name);
    if (len < 4 || strcmp(de->d_name + len - 3, ".py")) continue;
    if (VD_GROW(names, cap, n + 1) || !(names[n] = vd_strdup(de->d_name))) rc = VD_OOM(d);
    else n++;
  }
  if (dd) closedir(dd);
  if (n) qsort(names, n, sizeof(*names), name_cmp);
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    char p[8400];
    snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
    if ((rc = vd_digest_file(p, one, d)) == VD_OK) {
      vd_digest_update(h, names[i], strlen(names[i]) + 1);
      vd_digest_update(h, one, sizeof(one));
    }
  }
  VD_FREE_EACH(names, n);
  vd_digest_final(h, out);
  vd_digest_free(h);
  return rc;
}
