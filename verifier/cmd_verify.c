/*
 * verifier/cmd_verify.c - the main form: verdict --sm SINGLE --pm PARALLEL.
 *
 * Parses the options, runs the verification (verifier/run.c), prints the
 * human report (stdout) and the JSON report (--json), and maps the result
 * to the exit code: 0 equivalent, 1 not equivalent, 2 bad input or usage,
 * 3 inconclusive.
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/outfile.h"
#include "cache.h"
#include "cli.h"
#include "importers.h"
#include "cert.h"
#include "report.h"
#include "run.h"

/* --cache DIR and --cache-max-mb N (not in vd_run_opts: the cache object is) */
typedef struct {
  const char *dir;
  long max_mb;
} cache_args;

static void verify_usage(FILE *f) {
  /* Defaults come from common/limits.h (`verdict limits` says why). */
  fprintf(f,
          "usage: verdict --sm SINGLE.plan --pm PARALLEL.plan [options]\n"
          "\n"
          "Proves that one training iteration of PARALLEL computes the values of SINGLE.\n"
          "\n"
          "  --sm FILE            single-device plan (required); an nnScaler pickle is converted\n"
          "                       in the same run (tools/nnscaler2plan, nothing in it executed)\n"
          "  --pm FILE            parallel plan (required); a pickle when --sm is one\n"
          "  --threads N          solver threads (default: all cores)\n"
          "  --json FILE          also write the report as JSON (docs/report-format.md);\n"
          "                       '-' writes it to stdout (the text report then goes to stderr)\n"
          "  --html FILE          also write a self-contained HTML page with a Graphviz picture\n"
          "                       of each finding's representative stage\n"
          "  --junit FILE         also write JUnit XML: a test case for the outcome, one per\n"
          "                       finding, one per proven tensor (stable names across runs)\n"
          "  --sarif FILE         also write SARIF 2.1.0: a result per finding at the user's\n"
          "                       source line when the plan records it\n"
          "  --github             print GitHub Actions annotations (::error file=F,line=N::...)\n"
          "                       after the report and append a Markdown step summary to the\n"
          "                       file $GITHUB_STEP_SUMMARY names\n"
          "  --summary FILE       append the Markdown step summary to FILE (with or without\n"
          "                       --github)\n"
          "  --dot-stage N FILE   write stage N's graph (any verdict) in Graphviz dot\n"
          "  --stage-budget N     deterministic work limit per stage, in millions of steps of\n"
          "                       the normal form and of Z3 resource units (default %g;\n"
          "                       fractions allowed; 'none' = unlimited; 0 is refused).\n"
          "                       Decides the same way on any machine and load.\n"
          "  --stage-timeout S    wall-clock backstop per stage in seconds, fractions allowed\n"
          "                       (default %d; 'none' = no limit; 0 is refused).  Load-\n"
          "                       dependent: a stage it stops is INCONCLUSIVE (wall-clock)\n"
          "  --deadline S         stop the whole run after S seconds (fractions allowed) and\n"
          "                       write a partial report: INCONCLUSIVE, what was proven so\n"
          "                       far, exit 3.  SIGINT (Ctrl-C) and SIGTERM do the same; a\n"
          "                       second Ctrl-C (or SIGTERM) exits at once without a report\n"
          "                       (exit 130, or 143 for SIGTERM)\n"
          "  --max-failures N     entries of each list printed (failing stages, structural\n"
          "                       problems, inconclusive stages; default %d, 0 = all)\n"
          "  --seed N             seed of the solver's random witness, >= 1 (default %d)\n"
          "  --no-reuse           solve every stage, not one per symmetry class\n"
          "  --no-fast-path       skip the normal-form comparison, always call the solver\n"
          "  --no-reduce          check stages on their original shapes\n"
          "  --no-infer           do not infer lineages of unannotated tensors (docs/verifier.md 1b)\n"
          "  --dump-stages FILE   write every stage (class, targets, shapes, nodes) to FILE\n"
          "  --cache DIR          proof cache: reuse the classes proven EQUIVALENT by earlier runs,\n"
          "                       store the new ones (docs/gate.md; never changes a verdict)\n"
          "  --cache-max-mb N     size cap of the cache directory (default %d)\n"
          "  --certificate DIR    write every class's proof obligation (SMT-LIB2) and a manifest\n"
          "                       (plan hashes, stage -> class, reduced shapes and rules) into DIR;\n"
          "                       `verdict recheck DIR` re-proves them with cvc5 (docs/verifier.md 10)\n"
          "  --cross-check        give every class the normal form proves to Z3 as well; a\n"
          "                       disagreement is an internal error (INCONCLUSIVE, exit 3)\n"
          "  -q                   no progress or timings, only the verdict and failures\n"
          "  -v                   the details: the model, the plans' SHA-256, the limits,\n"
          "                       the proof's counts, phase times and the slowest stages\n"
          "                       (find them with --dump-stages)\n"
          "  --version            print verdict's version\n"
          "  -h, --help           this text\n"
          "\n"
          "Progress goes to stderr: a line redrawn on a terminal; otherwise (CI logs) after\n"
          "5 s a line per phase and a heartbeat with counters at least every 5 s.\n"
          "\n"
          "exit codes: 0 equivalent, 1 not equivalent, 2 bad input or usage, 3 inconclusive\n",
          VD_LIM_STAGE_BUDGET / 1e6, VD_LIM_STAGE_TIMEOUT_MS / 1000, VD_LIM_MAX_FAILURES, VD_LIM_SEED,
          VD_CACHE_DEFAULT_MAX_MB);
}

static int need_num(const char *opt, const char *val, long *out) {
  return vd_cli_count_arg("verdict", opt, val, LONG_MAX, out);
}

/* val as a number in (0, max] (fractions allowed) or "none": 1 for
 * "none", 0 for a number (*v), -1 for anything else. */
static int positive_or_none(const char *val, double max, double *v) {
  if (val && strcmp(val, "none") == 0) return 1;
  char *end = NULL;
  *v = val ? strtod(val, &end) : NAN;
  if (!val || end == val || *end || !isfinite(*v) || *v <= 0 || *v > max) return -1;
  return 0;
}

/* val: a positive number up to max (fractions allowed), times scale and
 * rounded up, at least 1, in *out; or "none" (returns 1).  0 when parsed,
 * -1 after printing "expected <what> or 'none'". */
static int scaled_or_none(const char *opt, const char *val, double max, double scale, const char *what, double *out) {
  double v = 0;
  int k = positive_or_none(val, max, &v);
  if (k < 0) {
    fprintf(stderr, "verdict: %s: expected %s or 'none', got '%s'\n", opt, what, VD_SHOW(val ? val : ""));
    return -1;
  }
  if (k == 0) {
    double m = ceil(v * scale);
    *out = m < 1 ? 1 : m;
  }
  return k;
}

/* A positive number of seconds (fractions allowed) or "none".  0 is refused
 * rather than silently meaning "no limit". */
static int parse_seconds(const char *opt, const char *val, unsigned *ms) {
  double m = 0;
  int k = scaled_or_none(opt, val, 4000000, 1000.0, "seconds > 0 (e.g. 2.5)", &m);
  if (k < 0) return -1;
  *ms = k ? 0 : (unsigned)m;
  return 0;
}

/* A positive number of millions of work units (fractions allowed) or
 * "none" (UINT64_MAX: unlimited). */
static int parse_budget(const char *opt, const char *val, uint64_t *units) {
  double u = 0;
  int k = scaled_or_none(opt, val, 4000, 1e6, "millions of steps in (0, 4000] (e.g. 20 or 0.5)", &u);
  if (k < 0) return -1;
  *units = k ? UINT64_MAX : (uint64_t)u;
  return 0;
}

/* Whether an output file can be written (common/outfile.h: a regular file
 * or a new one in an existing directory; no FIFO, device or link).  "-"
 * (stdout) only where allowed. */
static int writable(const char *opt, const char *path, int dash_ok) {
  if (!strcmp(path, "-") && !dash_ok) {
    fprintf(stderr, "verdict: %s: '-' (stdout) is only accepted by --json; give a file name\n", opt);
    return 0;
  }
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_outfile_check(path, VD_OUTFILE_STDOUT, &d) == VD_OK) return 1;
  char line[1024];
  vd_diag_format(&d, line, sizeof(line));
  fprintf(stderr, "verdict: %s %s\n", opt, line);
  return 0;
}

/* The options of the main form, in the order of verify_usage. */
enum {
  O_SM = 1, O_PM, O_THREADS, O_JSON, O_HTML, O_JUNIT, O_SARIF, O_GITHUB, O_SUMMARY, O_DOT_STAGE, O_STAGE_BUDGET,
  O_STAGE_TIMEOUT, O_DEADLINE, O_MAX_FAILURES, O_SEED, O_NO_REUSE, O_NO_FAST_PATH, O_NO_REDUCE, O_NO_INFER,
  O_DUMP_STAGES, O_CACHE, O_CACHE_MAX_MB, O_CERTIFICATE, O_CROSS_CHECK, O_QUIET, O_VERBOSE, O_VERSION, O_HELP
};
static const vd_cli_opt verify_opts[] = {
    {"--sm", "FILE", O_SM}, {"--pm", "FILE", O_PM}, {"--threads", "N", O_THREADS}, {"--json", "FILE", O_JSON},
    {"--html", "FILE", O_HTML}, {"--junit", "FILE", O_JUNIT}, {"--sarif", "FILE", O_SARIF}, {"--github", NULL, O_GITHUB},
    {"--summary", "FILE", O_SUMMARY}, {"--dot-stage", "N FILE", O_DOT_STAGE}, {"--stage-budget", "N", O_STAGE_BUDGET},
    {"--stage-timeout", "S", O_STAGE_TIMEOUT}, {"--deadline", "S", O_DEADLINE}, {"--max-failures", "N", O_MAX_FAILURES},
    {"--seed", "N", O_SEED}, {"--no-reuse", NULL, O_NO_REUSE}, {"--no-fast-path", NULL, O_NO_FAST_PATH},
    {"--no-reduce", NULL, O_NO_REDUCE}, {"--no-infer", NULL, O_NO_INFER}, {"--dump-stages", "FILE", O_DUMP_STAGES},
    {"--cache", "DIR", O_CACHE}, {"--cache-max-mb", "N", O_CACHE_MAX_MB}, {"--certificate", "DIR", O_CERTIFICATE},
    {"--cross-check", NULL, O_CROSS_CHECK}, {"-q", NULL, O_QUIET}, {"-v", NULL, O_VERBOSE},
    {"--version", NULL, O_VERSION}, {"-h", NULL, O_HELP}, {"--help", NULL, O_HELP}, {NULL, NULL, 0}};

/* The options that only set a path or a flag: where each one goes. */
static const char **path_of(int id, vd_run_opts *o, cache_args *ca) {
  switch (id) {
  case O_SM: return &o->sm;
  case O_PM: return &o->pm;
  case O_JSON: return &o->json_path;
  case O_DUMP_STAGES: return &o->dump_stages;
  case O_HTML: return &o->html_path;
  case O_JUNIT: return &o->junit_path;
  case O_SARIF: return &o->sarif_path;
  case O_SUMMARY: return &o->summary_path;
  case O_CACHE: return &ca->dir;
  case O_CERTIFICATE: return &o->certificate;
  default: return NULL;
  }
}

static int *flag_of(int id, vd_run_opts *o) {
  switch (id) {
  case O_GITHUB: return &o->github;
  case O_CROSS_CHECK: return &o->cross_check;
  case O_NO_REUSE: return &o->no_reuse;
  case O_NO_FAST_PATH: return &o->no_fast_path;
  case O_NO_REDUCE: return &o->no_reduce;
  case O_NO_INFER: return &o->no_infer;
  case O_QUIET: return &o->quiet;
  case O_VERBOSE: return &o->verbose;
  default: return NULL;
  }
}

/* An option with a checked value at argv[*i] (the option itself at
 * argv[*i - 1]); advances *i past what it used.  Returns 0, or the exit
 * code. */
static int set_value(int id, int argc, char **argv, int *i, vd_run_opts *o, cache_args *ca) {
  const char *a = argv[*i - 1];
  long n;
  unsigned ms = 0;
  switch (id) {
  case O_CACHE_MAX_MB:
    if (need_num(a, argv[*i], &n) || n < 1 || n > 1000000) {
      if (n >= 0) fprintf(stderr, "verdict: --cache-max-mb: expected 1..1000000, got %ld\n", n);
      return VD_EXIT_BAD_INPUT;
    }
    ca->max_mb = n;
    return 0;
  case O_DOT_STAGE:
    if (need_num(a, argv[*i], &n) || *i + 1 >= argc) {
      if (n >= 0) fprintf(stderr, "verdict: --dot-stage N FILE: missing FILE\n");
      return VD_EXIT_BAD_INPUT;
    }
    o->dot_stage = n;
    o->dot_path = argv[++*i];
    return 0;
  case O_THREADS:
    if (need_num(a, argv[*i], &n) || n < 1 || n > 1024) {
      if (n >= 0) fprintf(stderr, "verdict: --threads: expected 1..1024, got %ld\n", n);
      return VD_EXIT_BAD_INPUT;
    }
    o->threads = (int)n;
    return 0;
  case O_STAGE_TIMEOUT: return parse_seconds(a, argv[*i], &o->stage_timeout_ms) ? VD_EXIT_BAD_INPUT : 0;
  case O_DEADLINE:
    if (parse_seconds(a, argv[*i], &ms)) return VD_EXIT_BAD_INPUT;
    o->deadline_s = ms / 1000.0;
    return 0;
  case O_STAGE_BUDGET: return parse_budget(a, argv[*i], &o->stage_budget) ? VD_EXIT_BAD_INPUT : 0;
  case O_MAX_FAILURES:
    if (need_num(a, argv[*i], &n)) return VD_EXIT_BAD_INPUT;
    o->max_failures = (int)(n > 1000000 ? 1000000 : n);
    return 0;
  default: /* O_SEED */
    if (need_num(a, argv[*i], &n)) return VD_EXIT_BAD_INPUT;
    if (n < 1) {
      /* 0 is the solver options' "unset" (vd_stage_solve_opts.seed). */
      fprintf(stderr, "verdict: --seed: expected a positive integer, got 0\n");
      return VD_EXIT_BAD_INPUT;
    }
    o->seed = (uint64_t)n;
    return 0;
  }
}

/* Returns 0 to go on, -1 when help or the version was printed, else the
 * exit code of a usage error. */
static int parse_args(int argc, char **argv, vd_run_opts *o, cache_args *ca) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const vd_cli_opt *opt = vd_cli_opt_find(verify_opts, a);
    int id = opt ? opt->id : 0;
    if (id == O_HELP) {
      verify_usage(stdout);
      return -1;
    }
    if (opt && opt->arg && i + 1 >= argc) {
      fprintf(stderr, "verdict: missing value for option '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    }
    const char **path = path_of(id, o, ca);
    int *flag = flag_of(id, o);
    if (path) *path = argv[++i];
    else if (flag) *flag = 1;
    else if (id == O_VERSION) {
      printf("verdict %s (plan format v1)\n", VD_VERSION_STRING);
      return -1;
    } else if (opt) {
      i++;
      int rc = set_value(id, argc, argv, &i, o, ca);
      if (rc) return rc;
    } else if (a[0] != '-') {
      return fprintf(stderr, "verdict: unexpected argument '%s': plans are given as --sm SINGLE.plan --pm "
                             "PARALLEL.plan\n", VD_SHOW(a)), VD_EXIT_BAD_INPUT;
    } else {
      return vd_cli_unknown_option("verdict", a, verify_opts, "verdict --sm S --pm P --help");
    }
  }
  return 0;
}

static int parse(int argc, char **argv, vd_run_opts *o, cache_args *ca) {
  memset(o, 0, sizeof(*o));
  memset(ca, 0, sizeof(*ca));
  o->stage_timeout_ms = VD_LIM_STAGE_TIMEOUT_MS;
  o->stage_budget = 0; /* VD_LIM_STAGE_BUDGET */
  o->max_failures = VD_LIM_MAX_FAILURES;
  o->seed = VD_LIM_SEED;
  int rc = parse_args(argc, argv, o, ca);
  if (rc) return rc;
  if (!o->sm || !o->pm) {
    fprintf(stderr, "verdict: both --sm SINGLE and --pm PARALLEL are required\n");
    return VD_EXIT_BAD_INPUT;
  }
  /* --github appends the step summary where GitHub says, unless --summary
   * names a file (an empty variable: no summary). */
  if (o->github && !o->summary_path) {
    const char *env = getenv("GITHUB_STEP_SUMMARY");
    if (env && env[0]) o->summary_path = env;
  }
  /* An output that cannot be written is a usage error found now, not after
   * a full run. */
  const char *outs[][2] = {{"--json", o->json_path}, {"--html", o->html_path}, {"--junit", o->junit_path},
                           {"--sarif", o->sarif_path}, {"--summary", o->summary_path},
                           {"--dump-stages", o->dump_stages}, {"--dot-stage", o->dot_path}};
  for (size_t k = 0; k < sizeof(outs) / sizeof(outs[0]); k++)
    if (outs[k][1] && !writable(outs[k][0], outs[k][1], !strcmp(outs[k][0], "--json"))) return VD_EXIT_BAD_INPUT;
  return 0;
}

/* SIGINT and SIGTERM: the first asks the run to stop (common/ctl.h: a
 * lock-free atomic store, async-signal-safe); the run then writes its
 * partial report (INCONCLUSIVE, exit 3).  A second signal exits at once
 * (128 + the signal), writing one line with write(2), the only output
 * that is safe here. */
static void on_signal(int sig) {
  int prev = vd_ctl_request_stop(sig == SIGINT ? VD_STOP_SIGINT : VD_STOP_SIGTERM);
  if (prev == VD_STOP_SIGINT || prev == VD_STOP_SIGTERM) {
    static const char msg[] = "\nverdict: interrupted again: exiting at once, without a report\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(128 + sig);
  }
}

static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* The reports of a finished run: the text one and every file the options
 * name.  Returns the exit code (the verdict's, or that of a report that
 * could not be written). */
static int write_reports(const vd_run *r, const vd_run_opts *o, vd_diag *d) {
  /* With --json - the JSON owns stdout and the text report goes to stderr. */
  vd_report_text(r, o, o->json_path && !strcmp(o->json_path, "-") ? stderr : stdout);
  int code = vd_run_exit_code(r);
  if (o->json_path && vd_report_json(r, o, o->json_path, d) != VD_OK) code = vd_cli_report_diag(d);
  if (o->html_path && vd_report_html(r, o, o->html_path, d) != VD_OK) code = vd_cli_report_diag(d);
  /* The CI outputs take configurations; a verify run is one. */
  vd_report_config cfg;
  vd_report_config_single(&cfg, r, o);
  if (o->junit_path && vd_report_junit_configs(&cfg, 1, o->junit_path, d) != VD_OK) code = vd_cli_report_diag(d);
  if (o->sarif_path && vd_report_sarif_configs(&cfg, 1, o->sarif_path, d) != VD_OK) code = vd_cli_report_diag(d);
  if ((o->github || o->summary_path) &&
      vd_report_github_configs(&cfg, 1, o->github ? (o->json_path && !strcmp(o->json_path, "-") ? stderr : stdout) : NULL,
                               o->summary_path, d) != VD_OK)
    code = vd_cli_report_diag(d);
  if (o->dot_path && vd_report_dot_stage(r, (size_t)o->dot_stage, o->dot_path, d) != VD_OK) code = vd_cli_report_diag(d);
  if (o->dump_stages && vd_report_stages(r, o->dump_stages, d) != VD_OK) code = vd_cli_report_diag(d);
  return code;
}

int vd_cmd_verify(int argc, char **argv) {
  vd_run_opts o;
  cache_args ca;
  int rc = parse(argc, argv, &o, &ca);
  if (rc) return rc < 0 ? VD_EXIT_OK : rc;
  catch_signals();
  vd_run r;
  vd_diag d;
  vd_diag_clear(&d);
  /* nnScaler pickles are converted first, into a private temporary
   * directory; the reports name the pickles. */
  const char *sm_name = o.sm, *pm_name = o.pm;
  int pk_s = vd_import_is_pickle(o.sm), pk_p = vd_import_is_pickle(o.pm);
  vd_import_tmp imp;
  memset(&imp, 0, sizeof(imp));
  if (pk_s != pk_p) {
    fprintf(stderr, "verdict: %s is an nnScaler pickle but %s is not: give both as pickles (converted in the run) or "
                    "both as verdict plans\n", pk_s ? o.sm : o.pm, pk_s ? o.pm : o.sm);
    return VD_EXIT_BAD_INPUT;
  }
  if (pk_s) {
    if (vd_import_nnscaler(o.sm, o.pm, &imp, &d) != VD_OK) return vd_cli_report_diag(&d);
    o.sm = imp.single;
    o.pm = imp.parallel;
  }
  vd_cache *cache = NULL;
  if (ca.dir && vd_cache_open(ca.dir, (uint64_t)ca.max_mb << 20, &cache, &d) != VD_OK) {
    vd_import_cleanup(&imp);
    return vd_cli_report_diag(&d);
  }
  o.cache = cache;
  vd_rc vrc = vd_run_verify(&o, &r, &d);
  o.sm = sm_name;
  o.pm = pm_name;
  vd_import_cleanup(&imp);
  if (vrc != VD_OK) {
    vd_run_free(&r);
    vd_cache_close(cache);
    return vd_cli_report_diag(&d);
  }
  int code = write_reports(&r, &o, &d);
  FILE *tf = o.json_path && !strcmp(o.json_path, "-") ? stderr : stdout;
  if (o.cross_check && vd_cert_cross_summary(&r, &o, tf) > 0 && code != VD_EXIT_BAD_INPUT) {
    /* SOUNDNESS: the normal form proved something Z3 refutes: no verdict
     * of this run is trusted, whatever it was. */
    fprintf(tf, "INCONCLUSIVE (internal error: the normal form and Z3 disagree; rerun with --certificate DIR and "
                "report it)\n");
    code = VD_EXIT_INCONCLUSIVE;
  }
  if (o.certificate) {
    vd_cert_summary cs;
    if (vd_cert_write(&r, &o, o.certificate, &cs, &d) != VD_OK) {
      code = vd_cli_report_diag(&d);
    } else {
      fprintf(tf, "certificate: %zu obligation(s) of %zu class(es) in %s (%.1f MB, %.2f s)", cs.n_written,
              cs.n_classes, o.certificate, cs.bytes / 1e6, cs.secs);
      if (cs.n_missing) fprintf(tf, "; %zu class(es) without one (see manifest.json)", cs.n_missing);
      fprintf(tf, "; check it: verdict recheck %s\n", o.certificate);
    }
  }
  vd_run_free(&r);
  vd_cache_close(cache);
  if (vd_smt_orphans()) {
    /* Checks abandoned at their wall-clock limit are still inside Z3 on
     * their own threads: exiting through exit() would run Z3's static
     * destructors under them.  The reports are written; leave now. */
    fflush(stdout);
    fflush(stderr);
    _exit(code);
  }
  return code;
}
