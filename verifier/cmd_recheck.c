/*
 * verifier/cmd_recheck.c - `verdict recheck DIR`: re-proves a certificate
 * (verdict --certificate DIR, verifier/cert.c) with a solver verdict did
 * not write (docs/verifier.md section 9).
 *
 * For the manifest of DIR: every stage must be mapped to a class that has
 * an obligation (when the run was EQUIVALENT), every obligation file must
 * still have the SHA-256 the manifest recorded (a changed file is refused),
 * the plans given with --sm/--pm must have the recorded hashes; then per
 * class two solver calls:
 *   - the vacuity check: the script cut at its "; goal" line, plus
 *     (check-sat), must be sat (the hypotheses alone are satisfiable, or
 *     the "proof" proves nothing);
 *   - the obligation itself: unsat for a class verdict proved equivalent.
 * A solver that answers the opposite is a DISAGREEMENT (exit 1, with the
 * file to attach); unknown or a timeout is not a re-proof (exit 3).  The
 * solver runs as a separate process (Debian's cvc5 binary; z3's binary
 * when present, else Z3's library in a fresh context, solver/smt_cert.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/digest.h"
#include "../common/infile.h"
#include "../common/mem.h"
#include "../common/text.h"
#include "../solver/smt.h"
#include "cert.h"
#include "cli.h"

static void recheck_usage(FILE *f) {
  fprintf(f,
          "usage: verdict recheck DIR [--solver cvc5|z3] [--timeout S] [--sm SINGLE.plan --pm PARALLEL.plan]\n"
          "                           [--threads N] [-q]\n"
          "\n"
          "Re-proves a certificate written by `verdict --certificate DIR` with an independent solver.\n"
          "Checks that every stage of the manifest maps to a class with an obligation, that no\n"
          "obligation changed since it was written (SHA-256), that each obligation's hypotheses\n"
          "alone are satisfiable (sat: not vacuous), and that each obligation of a class proved\n"
          "equivalent is unsat.  Prints the classes re-proven, every disagreement, and the time.\n"
          "\n"
          "  --solver cvc5|z3   the solver (default cvc5: /usr/bin/cvc5 or cvc5 on PATH; z3: the\n"
          "                     z3 binary on PATH, else Z3's library)\n"
          "  --timeout S        per solver call, seconds (default 60)\n"
          "  --sm FILE, --pm FILE  also check the plans' content hashes against the manifest\n"
          "  --threads N        solver processes at a time (default: all cores)\n"
          "  -q                 only the summary and the problems\n"
          "\n"
          "exit codes: 0 every class re-proven, 1 a disagreement, a changed or vacuous obligation,\n"
          "or a stage without a class (the message names the file to attach), 2 bad input or usage,\n"
          "3 not every class re-proven (solver unknown or timeout, or no obligation written)\n");
}

/* Reads a whole file (NUL-terminated); NULL on error (errno set). */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *b;
  size_t n;
  vd_infile_rc rc = vd_infile_read_all(f, 0, &b, &n);
  fclose(f);
  if (rc != VD_INFILE_OK) return NULL;
  if (len) *len = n;
  return b;
}

static int exists_exec(const char *p) { return access(p, X_OK) == 0; }

/* The solver binary: an absolute path, or NULL when none (z3: use the
 * library). */
static const char *find_binary(const char *name, char *buf, size_t n) {
  const char *path = getenv("PATH");
  if (!strcmp(name, "cvc5") && exists_exec("/usr/bin/cvc5")) return "/usr/bin/cvc5";
  for (const char *p = path; p && *p;) {
    const char *e = strchr(p, ':');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    snprintf(buf, n, "%.*s/%s", (int)l, p, name);
    if (l && exists_exec(buf)) return buf;
    p += l + (e ? 1 : 0);
  }
  return NULL;
}

/* Runs binary on the script text (through its stdin) and puts the last
 * non-empty line of its output into answer. */
static void run_binary(const char *solver, const char *bin, const char *text, size_t len, unsigned timeout_ms,
                       char *answer, size_t an) {
  char tmpl[] = "/tmp/verdict-recheck-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0) {
    snprintf(answer, an, "error: temporary file: %s", strerror(errno));
    return;
  }
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
  if (off < len) {
    unlink(tmpl);
    snprintf(answer, an, "error: temporary file not written");
    return;
  }
  int pfd[2];
  if (pipe(pfd) != 0) {
    unlink(tmpl);
    snprintf(answer, an, "error: pipe: %s", strerror(errno));
    return;
  }
  char tl[64];
  pid_t pid = fork();
  if (pid == 0) {
    dup2(pfd[1], 1);
    dup2(pfd[1], 2);
    close(pfd[0]);
    close(pfd[1]);
    if (!strcmp(solver, "cvc5")) {
      snprintf(tl, sizeof(tl), "--tlimit=%u", timeout_ms);
      execl(bin, bin, "--lang=smt2", tl, tmpl, (char *)NULL);
    } else {
      snprintf(tl, sizeof(tl), "-T:%u", (timeout_ms + 999) / 1000);
      execl(bin, bin, "-smt2", tl, tmpl, (char *)NULL);
    }
    _exit(127);
  }
  close(pfd[1]);
  if (pid < 0) {
    close(pfd[0]);
    unlink(tmpl);
    snprintf(answer, an, "error: fork: %s", strerror(errno));
    return;
  }
  char out[8192];
  size_t on = 0;
  for (;;) {
    ssize_t k = read(pfd[0], on < sizeof(out) - 1 ? out + on : out, on < sizeof(out) - 1 ? sizeof(out) - 1 - on : sizeof(out) - 1);
    if (k <= 0) break;
    if (on < sizeof(out) - 1) on += (size_t)k;
  }
  close(pfd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  unlink(tmpl);
  out[on] = 0;
  size_t l = on;
  while (l && (out[l - 1] == '\n' || out[l - 1] == '\r' || out[l - 1] == ' ')) l--;
  size_t b = l;
  while (b && out[b - 1] != '\n') b--;
  if (l == 0) snprintf(answer, an, "error: no output (exit status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  else if (!strncmp(out + b, "unsat", 5) || !strncmp(out + b, "sat", 3) || !strncmp(out + b, "unknown", 7))
    snprintf(answer, an, "%.*s", (int)(l - b), out + b);
  else {
    /* an error message: its first line */
    size_t e = 0;
    while (e < on && out[e] != '\n') e++;
    snprintf(answer, an, "error: %.*s", (int)(e > 300 ? 300 : e), out);
  }
}

typedef struct {
  const char *file;          /* borrowed from the manifest */
  const char *sha;
  const char *verdict;
  long long cls;
  char ans[400], vac[400];   /* the solver's answers: obligation, hypotheses alone */
  int changed, missing;
  double secs;
} job;

static void solve(const char *solver, const char *bin, const char *text, size_t len, unsigned timeout_ms,
                  char *answer, size_t an) {
  if (bin) {
    run_binary(solver, bin, text, len, timeout_ms, answer, an);
    return;
  }
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_smt_run_script(text, timeout_ms, answer, an, &d) != VD_OK) snprintf(answer, an, "error: %.300s", d.msg);
}

/* The script cut at its goal: hypotheses (definitions) and (check-sat). */
static char *hypotheses_only(const char *text, size_t *len) {
  const char *g = strstr(text, "\n; goal\n");
  if (!g) return NULL;
  size_t k = (size_t)(g - text) + 1;
  char *h = vd_malloc(k + 32);
  if (!h) return NULL;
  memcpy(h, text, k);
  memcpy(h + k, "(check-sat)\n(exit)\n", 20);
  *len = k + 19;
  return h;
}

static void check_one(const char *dir, const char *solver, const char *bin, unsigned timeout_ms, job *j) {
  double t0 = vd_clock_s();
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, j->file);
  size_t len = 0;
  char *text = slurp(path, &len);
  if (!text) {
    j->missing = 1;
    return;
  }
  uint8_t dg[VD_DIGEST_BYTES];
  char hex[VD_DIGEST_HEX];
  if (vd_digest_bytes(text, len, dg) != VD_OK || (vd_digest_hex(dg, hex), strcmp(hex, j->sha) != 0)) {
    j->changed = 1;
    vd_free(text);
    return;
  }
  size_t hl = 0;
  char *hyp = hypotheses_only(text, &hl);
  if (!hyp) snprintf(j->vac, sizeof(j->vac), "error: no '; goal' line");
  else solve(solver, bin, hyp, hl, timeout_ms, j->vac, sizeof(j->vac));
  vd_free(hyp);
  solve(solver, bin, text, len, timeout_ms, j->ans, sizeof(j->ans));
  vd_free(text);
  j->secs = vd_clock_s() - t0;
}

static const char *jstr(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

static int plan_matches(const char *path, const char *want, const char *what) {
  uint8_t dg[VD_DIGEST_BYTES];
  char hex[VD_DIGEST_HEX];
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_digest_file(path, dg, &d) != VD_OK) {
    fprintf(stderr, "verdict recheck: %s: cannot read\n", VD_SHOW(path));
    return -1;
  }
  vd_digest_hex(dg, hex);
  if (!want || strcmp(hex, want) != 0) {
    printf("MISMATCH: %s plan %s has sha256 %s, the manifest records %s: the certificate is of other plans\n", what,
           path, hex, want ? want : "nothing");
    return 0;
  }
  return 1;
}

/* The options of recheck, in the order of its help text. */
enum { R_PM = 1, R_SOLVER, R_TIMEOUT, R_SM, R_THREADS, R_QUIET, R_HELP };
static const vd_cli_opt recheck_opts[] = {
    {"--pm", "FILE", R_PM},   {"--solver", "NAME", R_SOLVER}, {"--timeout", "S", R_TIMEOUT},
    {"--sm", "FILE", R_SM},   {"--threads", "N", R_THREADS},  {"-q", NULL, R_QUIET},
    {"-h", NULL, R_HELP},     {"--help", NULL, R_HELP},       {NULL, NULL, 0}};

/* The command line of recheck. */
typedef struct {
  const char *dir, *solver, *sm, *pm;
  unsigned timeout_ms;
  int threads, quiet;
} recheck_args;

/* Returns -1 to go on, else the exit code (help printed, or bad usage). */
static int parse_args(int argc, char **argv, recheck_args *ra) {
  *ra = (recheck_args){.solver = "cvc5", .timeout_ms = 60000};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int id = vd_cli_opt_id(recheck_opts, a);
    if (id == R_HELP) {
      recheck_usage(stdout);
      return VD_EXIT_OK;
    }
    if (vd_cli_opt_takes(recheck_opts, a) && !val) {
      fprintf(stderr, "verdict recheck: missing value for option '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    }
    if (id == R_SOLVER) {
      ra->solver = argv[++i];
      if (strcmp(ra->solver, "cvc5") && strcmp(ra->solver, "z3")) {
        fprintf(stderr, "verdict recheck: --solver: expected cvc5 or z3, got '%s'\n", VD_SHOW(ra->solver));
        return VD_EXIT_BAD_INPUT;
      }
    } else if (id == R_TIMEOUT) {
      char *end = NULL;
      double s = strtod(argv[++i], &end);
      if (!end || *end || !(s > 0) || s > 86400) {
        fprintf(stderr, "verdict recheck: --timeout: expected seconds in (0, 86400], got '%s'\n", VD_SHOW(argv[i]));
        return VD_EXIT_BAD_INPUT;
      }
      ra->timeout_ms = (unsigned)(s * 1000 + 0.5);
      if (!ra->timeout_ms) ra->timeout_ms = 1;
    } else if (id == R_SM) ra->sm = argv[++i];
    else if (id == R_PM) ra->pm = argv[++i];
    else if (id == R_THREADS) {
      long n = vd_cli_parse_long(argv[++i]);
      if (n < 1 || n > 1024) {
        fprintf(stderr, "verdict recheck: --threads: expected 1..1024, got '%s'\n", VD_SHOW(argv[i]));
        return VD_EXIT_BAD_INPUT;
      }
      ra->threads = (int)n;
    } else if (id == R_QUIET) ra->quiet = 1;
    else if (a[0] == '-') return vd_cli_unknown_option("verdict recheck", a, recheck_opts, "verdict recheck --help");
    else if (!ra->dir) ra->dir = a;
    else {
      fprintf(stderr, "verdict recheck: one certificate directory expected, got '%s' too\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    }
  }
  if (!ra->dir) {
    fprintf(stderr, "verdict recheck: a certificate directory is required (verdict --certificate DIR)\n");
    return VD_EXIT_BAD_INPUT;
  }
  return -1;
}

/* Reads DIR's manifest and checks its format; *mp is NULL on an error.
 * Returns -1 to go on, else the exit code. */
static int load_manifest(const char *mpath, json_t **mp, json_t **classes_p, json_t **stages_p,
                         const char **verdict_p) {
  json_error_t je;
  json_t *m = json_load_file(mpath, 0, &je);
  *mp = m;
  if (!m) {
    fprintf(stderr, "verdict recheck: %s: line %d: %s\n", VD_SHOW(mpath), je.line, VD_SHOW(je.text));
    return VD_EXIT_BAD_INPUT;
  }
  json_t *classes = json_object_get(m, "classes"), *stages = json_object_get(m, "stages");
  const char *fmt = jstr(m, "format"), *run_verdict = jstr(m, "verdict");
  *classes_p = classes, *stages_p = stages, *verdict_p = run_verdict;
  if (!fmt || strcmp(fmt, VD_CERT_FORMAT) || !json_is_array(classes) || !json_is_array(stages) || !run_verdict) {
    fprintf(stderr, "verdict recheck: %s: record manifest: field %s: missing or not of format %s\n", VD_SHOW(mpath),
            !fmt || strcmp(fmt, VD_CERT_FORMAT) ? "format" : !json_is_array(classes) ? "classes"
                                                             : !json_is_array(stages) ? "stages" : "verdict",
            VD_CERT_FORMAT);
    json_decref(m);
    *mp = NULL;
    return VD_EXIT_BAD_INPUT;
  }
  return -1;
}

/* The manifest's classes: one job per obligation, and which classes have
 * one (has) and were proved equivalent (proved). */
typedef struct {
  job *jobs;
  size_t n_jobs;
  long long max_cls;
  uint8_t *has, *proved;
} class_set;

static void class_set_free(class_set *cs) {
  vd_free(cs->jobs);
  vd_free(cs->has);
  vd_free(cs->proved);
}

/* Returns -1 to go on, else the exit code (the caller frees cs). */
static int collect_jobs(const char *mpath, json_t *classes, json_t *stages, int quiet, class_set *cs) {
  size_t nc = json_array_size(classes);
  long long max_cls = -1;
  for (size_t i = 0; i < nc; i++) {
    json_t *c = json_array_get(classes, i);
    json_t *cl = json_object_get(c, "class");
    /* a class is named by the stage id of its representative: below the stage count (and so the
     * tables below stay as large as the manifest) */
    if (!json_is_integer(cl) || json_integer_value(cl) < 0 ||
        (size_t)json_integer_value(cl) >= json_array_size(stages)) {
      fprintf(stderr, "verdict recheck: %s: record classes[%zu]: field class: expected a stage id below %zu\n", VD_SHOW(mpath),
              i, json_array_size(stages));
      return VD_EXIT_BAD_INPUT;
    }
    if (json_integer_value(cl) > max_cls) max_cls = json_integer_value(cl);
  }
  /* class id -> has an obligation */
  uint8_t *has = cs->has = vd_calloc((size_t)max_cls + 2, 1);
  uint8_t *proved = cs->proved = vd_calloc((size_t)max_cls + 2, 1);
  cs->max_cls = max_cls;
  for (size_t i = 0; has && proved && i < nc; i++) {
    json_t *c = json_array_get(classes, i);
    long long cl = json_integer_value(json_object_get(c, "class"));
    const char *file = jstr(c, "file"), *sha = jstr(c, "sha256"), *verdict = jstr(c, "verdict");
    proved[cl] = verdict && !strcmp(verdict, "equivalent");
    if (!file) {
      if (!quiet || proved[cl])
        printf("%s: class %lld (%s) has no obligation: %s\n", proved[cl] ? "NOT RE-PROVEN" : "note", cl,
               verdict ? verdict : "?", jstr(c, "why") ? jstr(c, "why") : "?");
      continue;
    }
    if (!sha || strlen(sha) != 64 || strchr(file, '/') || file[0] == '.') {
      fprintf(stderr, "verdict recheck: %s: record classes[%zu]: field %s: invalid\n", VD_SHOW(mpath), i,
              !sha || strlen(sha) != 64 ? "sha256" : "file");
      return VD_EXIT_BAD_INPUT;
    }
    has[cl] = 1;
    cs->jobs[cs->n_jobs++] = (job){.file = file, .sha = sha, .verdict = verdict ? verdict : "?", .cls = cl};
  }
  if (!has || !proved) {
    fprintf(stderr, "verdict recheck: out of memory\n");
    return VD_EXIT_INCONCLUSIVE;
  }
  return -1;
}

/* The stage -> class map, re-derived: the stages whose class has no
 * obligation (printed, the first 10). */
static size_t count_unmapped(const char *mpath, json_t *stages, const char *run_verdict, const class_set *cs) {
  size_t ns = json_array_size(stages), n_unmapped = 0;
  for (size_t i = 0; i < ns; i++) {
    json_t *v = json_array_get(stages, i);
    long long cl = json_is_integer(v) ? json_integer_value(v) : -1;
    if (cl < 0 || cl > cs->max_cls || (!cs->has[cl] && !strcmp(run_verdict, "equivalent"))) {
      if (n_unmapped++ < 10)
        printf("UNMAPPED: stage %zu maps to %s%lld, which has no obligation in %s\n", i, cl < 0 ? "no class " : "class ",
               cl, mpath);
    }
  }
  return n_unmapped;
}

/* What the solver calls said, counted. */
typedef struct {
  size_t reproven, refuted, vacuity_ok, disagree, unknown, changed;
  double solver_s;
} tally;

static void tally_job(const char *dir, const char *solver, const job *j, tally *tl) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s", dir, j->file);
  tl->solver_s += j->secs;
  if (j->missing) {
    printf("MISSING: class %lld: %s cannot be read\n", j->cls, path);
    tl->changed++;
    return;
  }
  if (j->changed) {
    printf("CHANGED: class %lld: %s does not have the SHA-256 the manifest recorded: refused\n", j->cls, path);
    tl->changed++;
    return;
  }
  int vac_sat = !strcmp(j->vac, "sat");
  if (vac_sat) tl->vacuity_ok++;
  else if (!strcmp(j->vac, "unsat")) {
    printf("VACUOUS: class %lld: %s says its hypotheses alone are unsat: the obligation proves nothing; attach %s\n",
           j->cls, solver, path);
    tl->disagree++;
  } else {
    printf("UNDECIDED: class %lld: vacuity check: %s says '%s' (%s)\n", j->cls, solver, j->vac, path);
    tl->unknown++;
  }
  int want_unsat = !strcmp(j->verdict, "equivalent"), want_sat = !strcmp(j->verdict, "not equivalent");
  if (!strcmp(j->ans, "unsat")) {
    if (want_unsat) tl->reproven++;
    else if (want_sat) {
      printf("DISAGREEMENT: class %lld: verdict says not equivalent, %s says unsat (equivalent); attach %s\n",
             j->cls, solver, path);
      tl->disagree++;
    }
  } else if (!strcmp(j->ans, "sat")) {
    if (want_sat) tl->refuted++;
    else if (want_unsat) {
      printf("DISAGREEMENT: class %lld: verdict says equivalent, %s says sat (a counterexample exists); attach %s\n",
             j->cls, solver, path);
      tl->disagree++;
    }
  } else if (want_unsat || want_sat) {
    printf("UNDECIDED: class %lld: %s says '%s' (%s)\n", j->cls, solver, j->ans, path);
    tl->unknown++;
  }
}

int vd_cmd_recheck(int argc, char **argv) {
  recheck_args ra;
  int rc = parse_args(argc, argv, &ra);
  if (rc >= 0) return rc;
  const char *dir = ra.dir, *solver = ra.solver;
  char bbuf[4096];
  const char *bin = find_binary(solver, bbuf, sizeof(bbuf));
  if (!bin && !strcmp(solver, "cvc5")) {
    fprintf(stderr, "verdict recheck: cvc5 not found (apt-get install cvc5)\n");
    return VD_EXIT_BAD_INPUT;
  }
  char mpath[4096];
  snprintf(mpath, sizeof(mpath), "%s/%s", dir, VD_CERT_MANIFEST);
  json_t *m, *classes, *stages;
  const char *run_verdict;
  if ((rc = load_manifest(mpath, &m, &classes, &stages, &run_verdict)) >= 0) return rc;
  int code = VD_EXIT_OK;
  double t0 = vd_clock_s();
  /* the plans */
  json_t *plans = json_object_get(m, "plans");
  if (ra.sm || ra.pm) {
    int ok1 = ra.sm ? plan_matches(ra.sm, jstr(json_object_get(plans, "single"), "sha256"), "single") : 1;
    int ok2 = ra.pm ? plan_matches(ra.pm, jstr(json_object_get(plans, "parallel"), "sha256"), "parallel") : 1;
    if (ok1 < 0 || ok2 < 0) {
      json_decref(m);
      return VD_EXIT_BAD_INPUT;
    }
    if (!ok1 || !ok2) code = VD_EXIT_NOT_EQUIV;
  }
  /* the classes */
  size_t nc = json_array_size(classes);
  class_set cs = {.jobs = vd_calloc(nc + 1, sizeof(job))};
  if (!cs.jobs) {
    json_decref(m);
    fprintf(stderr, "verdict recheck: out of memory\n");
    return VD_EXIT_INCONCLUSIVE;
  }
  if ((rc = collect_jobs(mpath, classes, stages, ra.quiet, &cs)) >= 0) {
    class_set_free(&cs);
    json_decref(m);
    return rc;
  }
  size_t ns = json_array_size(stages), n_unmapped = count_unmapped(mpath, stages, run_verdict, &cs);
  if (n_unmapped) code = VD_EXIT_NOT_EQUIV;
  /* the solver calls */
  int nt = ra.threads ? ra.threads : omp_get_max_threads();
  job *jobs = cs.jobs;
  size_t n_jobs = cs.n_jobs;
  unsigned timeout_ms = ra.timeout_ms;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (size_t k = 0; k < n_jobs; k++) check_one(dir, solver, bin, timeout_ms, &jobs[k]);
  tally tl = {0};
  for (size_t k = 0; k < n_jobs; k++) tally_job(dir, solver, &jobs[k], &tl);
  size_t want = 0;
  for (size_t i = 0; i < nc; i++) {
    const char *v = jstr(json_array_get(classes, i), "verdict");
    want += v && !strcmp(v, "equivalent");
  }
  printf("recheck: %zu of %zu class(es) proved equivalent re-proven by %s%s (unsat), %zu refutation(s) confirmed, "
         "%zu of %zu obligation(s) not vacuous (hypotheses sat); %zu stage(s) mapped to their class, %zu unmapped; "
         "%zu disagreement(s), %zu changed or missing, %zu undecided; %.2f s (%.2f s of solver calls)\n",
         tl.reproven, want, solver, bin ? "" : " (library)", tl.refuted, tl.vacuity_ok, n_jobs, ns - n_unmapped, n_unmapped,
         tl.disagree, tl.changed, tl.unknown, vd_clock_s() - t0, tl.solver_s);
  if (tl.disagree || tl.changed) code = VD_EXIT_NOT_EQUIV;
  else if (code == VD_EXIT_OK && (tl.unknown || tl.reproven < want)) code = VD_EXIT_INCONCLUSIVE;
  class_set_free(&cs);
  json_decref(m);
  return code;
}
