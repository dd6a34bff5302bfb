/*
 * verifier/cmd_gate.c - verdict gate MANIFEST: every configuration of a
 * manifest (verifier/manifest.h, docs/gate.md) verified in one process,
 * with one summary table and one exit code.
 *
 * The configurations run one after the other, each with all the solver
 * threads, through the same vd_run_verify as `verdict --sm --pm`; one proof
 * cache (verifier/cache.h) is shared by all of them, so a stage class that
 * two configurations share is proven once (the second takes it from
 * memory), and, with a cache directory (the default .verdict-cache), once
 * across runs.  nnScaler pickles and PyTorch programs are converted first
 * (verifier/importers.h).
 *
 * Outcome of a configuration: its exit code as `verdict --sm --pm` would
 * give it (0, 1, 3; 2 when its files are bad input), as expected when it
 * equals the manifest's and, for an expected NOT EQUIVALENT with a class,
 * one finding has that diagnosis class.  Exit code of the gate: 0 when
 * every configuration is as expected; otherwise 1 when one is
 * unexpectedly NOT EQUIVALENT (or unexpectedly EQUIVALENT: a bug the gate
 * should catch went through, or the wrong class), else 2 when one is bad
 * input, else 3 (inconclusive).
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/digest.h"
#include "../common/limits.h"
#include "../common/mem.h"
#include "../common/text.h"
#include "cache.h"
#include "cli.h"
#include "importers.h"
#include "manifest.h"
#include "report.h"
#include "run.h"

static void gate_usage(FILE *f) {
  fprintf(f,
          "usage: verdict gate MANIFEST [options]\n"
          "\n"
          "Verifies every configuration of MANIFEST (docs/gate.md: pairs of plans, nnScaler\n"
          "pickles or PyTorch programs, each with its expected outcome) in one process, with\n"
          "one summary table and one exit code.  Stage classes shared between configurations\n"
          "are proven once; with the proof cache, once across runs.\n"
          "\n"
          "  --cache DIR          proof cache directory (default %s, relative to the\n"
          "                       working directory); it can save work, never change a verdict\n"
          "  --no-cache           no cache directory (classes are still shared within the run)\n"
          "  --cache-max-mb N     size cap of the cache directory (default %d)\n"
          "  --json FILE          the gate as JSON: every configuration with its full report\n"
          "  --junit FILE         JUnit XML, one test case per configuration and per finding\n"
          "  --sarif FILE         SARIF 2.1.0\n"
          "  --github             GitHub Actions annotations on stdout, and the Markdown summary\n"
          "                       appended to $GITHUB_STEP_SUMMARY when it is set\n"
          "  --threads N          solver threads (default: all cores)\n"
          "  --stage-timeout S    wall-clock backstop per stage (as verdict --sm --pm)\n"
          "  --stage-budget N     work limit per stage, millions of steps (as verdict --sm --pm)\n"
          "  -q                   only the summary table\n"
          "  -v                   every configuration's full report (default: those not as expected)\n"
          "  -h, --help           this text\n"
          "\n"
          "exit codes: 0 every configuration as expected; 1 one is NOT EQUIVALENT (or EQUIVALENT, or\n"
          "            of another class) against the manifest; 2 bad manifest or input;\n"
          "            3 a configuration is inconclusive\n",
          VD_CACHE_DEFAULT_DIR, VD_CACHE_DEFAULT_MAX_MB);
}

typedef struct {
  const vd_mf_entry *e;
  vd_run run;
  int have_run;
  vd_run_opts opts;
  int exit_code;
  char error[700];
  int as_expected;
  char classes[200]; /* diagnosis classes of the findings, "BATCH, SCALE" */
  int has_expected_dx;
  double secs;
} gcfg;

typedef struct {
  const char *manifest, *cache_dir, *json, *junit, *sarif;
  int no_cache, github, quiet, verbose, threads;
  long cache_max_mb;
  unsigned stage_timeout_ms;
  uint64_t stage_budget;
} gopts;

static int parse_positive_double(const char *opt, const char *val, double lo, double hi, double *out) {
  char *end = NULL;
  double v = val ? strtod(val, &end) : NAN;
  if (!val || end == val || *end || !isfinite(v) || v <= lo || v > hi) {
    fprintf(stderr, "verdict gate: %s: expected a number in (%g, %g], got '%s'\n", opt, lo, hi, VD_SHOW(val ? val : ""));
    return -1;
  }
  *out = v;
  return 0;
}

/* The options of gate, in the order of its help text. */
enum {
  GT_CACHE = 1, GT_NO_CACHE, GT_CACHE_MAX_MB, GT_JSON, GT_JUNIT, GT_SARIF, GT_GITHUB, GT_THREADS, GT_STAGE_TIMEOUT,
  GT_STAGE_BUDGET, GT_QUIET, GT_VERBOSE, GT_HELP
};
static const vd_cli_opt gate_opts[] = {
    {"--cache", "DIR", GT_CACHE}, {"--no-cache", NULL, GT_NO_CACHE}, {"--cache-max-mb", "N", GT_CACHE_MAX_MB},
    {"--json", "FILE", GT_JSON}, {"--junit", "FILE", GT_JUNIT}, {"--sarif", "FILE", GT_SARIF},
    {"--github", NULL, GT_GITHUB}, {"--threads", "N", GT_THREADS}, {"--stage-timeout", "S", GT_STAGE_TIMEOUT},
    {"--stage-budget", "N", GT_STAGE_BUDGET}, {"-q", NULL, GT_QUIET}, {"-v", NULL, GT_VERBOSE},
    {"-h", NULL, GT_HELP}, {"--help", NULL, GT_HELP}, {NULL, NULL, 0}};

static int parse(int argc, char **argv, gopts *g) {
  memset(g, 0, sizeof(*g));
  g->stage_timeout_ms = VD_LIM_STAGE_TIMEOUT_MS;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    int id = vd_cli_opt_id(gate_opts, a);
    if (id == GT_HELP) {
      gate_usage(stdout);
      return -1;
    }
    if (vd_cli_opt_takes(gate_opts, a) && !val) {
      fprintf(stderr, "verdict gate: missing value for option '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    }
    double x;
    if (id == GT_CACHE) g->cache_dir = argv[++i];
    else if (id == GT_NO_CACHE) g->no_cache = 1;
    else if (id == GT_JSON) g->json = argv[++i];
    else if (id == GT_JUNIT) g->junit = argv[++i];
    else if (id == GT_SARIF) g->sarif = argv[++i];
    else if (id == GT_GITHUB) g->github = 1;
    else if (id == GT_QUIET) g->quiet = 1;
    else if (id == GT_VERBOSE) g->verbose = 1;
    else if (id == GT_THREADS) {
      long n = vd_cli_parse_long(argv[++i]);
      if (n < 1 || n > 1024) return fprintf(stderr, "verdict gate: --threads: expected 1..1024, got '%s'\n", VD_SHOW(argv[i])), 2;
      g->threads = (int)n;
    } else if (id == GT_CACHE_MAX_MB) {
      long n = vd_cli_parse_long(argv[++i]);
      if (n < 1 || n > 1000000)
        return fprintf(stderr, "verdict gate: --cache-max-mb: expected 1..1000000, got '%s'\n", VD_SHOW(argv[i])), 2;
      g->cache_max_mb = n;
    } else if (id == GT_STAGE_TIMEOUT) {
      if (!strcmp(argv[++i], "none")) g->stage_timeout_ms = 0;
      else if (parse_positive_double(a, argv[i], 0, 4000000, &x)) return VD_EXIT_BAD_INPUT;
      else g->stage_timeout_ms = (unsigned)ceil(x * 1000);
    } else if (id == GT_STAGE_BUDGET) {
      if (!strcmp(argv[++i], "none")) g->stage_budget = UINT64_MAX;
      else if (parse_positive_double(a, argv[i], 0, 4000, &x)) return VD_EXIT_BAD_INPUT;
      else g->stage_budget = (uint64_t)ceil(x * 1e6);
    } else if (a[0] == '-' && a[1]) {
      return vd_cli_unknown_option("verdict gate", a, gate_opts, "verdict gate --help");
    } else if (g->manifest) {
      fprintf(stderr, "verdict gate: one manifest only (got '%s' and '%s')\n", VD_SHOW(g->manifest), VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    } else
      g->manifest = a;
  }
  if (!g->manifest) {
    fprintf(stderr, "verdict gate: no manifest given (usage: verdict gate MANIFEST; docs/gate.md)\n");
    return VD_EXIT_BAD_INPUT;
  }
  if (g->no_cache && g->cache_dir) {
    fprintf(stderr, "verdict gate: --cache and --no-cache exclude each other\n");
    return VD_EXIT_BAD_INPUT;
  }
  return 0;
}

static const char *expect_word(int code) {
  return code == 0 ? "EQUIVALENT" : code == 1 ? "NOT EQUIVALENT" : code == 2 ? "BAD INPUT" : "INCONCLUSIVE";
}

/* The diagnosis classes of the run's findings, distinct, in finding order;
 * whether dx is one of them. */
static int finding_classes(const vd_run *r, int dx, char *buf, size_t cap) {
  buf[0] = '\0';
  vd_findings fs;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_findings_build(r, &fs, &d) != VD_OK) return 0;
  int seen[VD_DX__COUNT] = {0}, has = 0;
  size_t at = 0;
  for (size_t k = 0; k < fs.n; k++) {
    int x = (int)fs.v[k].diagnosis;
    if (x < 0 || x >= VD_DX__COUNT || seen[x]) continue;
    seen[x] = 1;
    has |= x == dx;
    int w = snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", vd_diagnosis_names[x]);
    if (w < 0 || (size_t)w >= cap - at) break;
    at += (size_t)w;
  }
  vd_findings_free(&fs);
  return has;
}

/* The whole-configuration cache's question (verifier/cache.h) for a pair
 * of plan files or pickles: kind, the SHA-256 of both files and, for
 * pickles, of the importer's sources.  -1 when a file cannot be read (the
 * run then says why) or for PyTorch programs (never keyed so). */
static int config_question(const vd_mf_entry *e, uint8_t *what, size_t *n) {
  if (e->kind != VD_MF_PLANS) return -1;
  vd_diag d;
  vd_diag_clear(&d);
  int pk = vd_import_is_pickle(e->single);
  if (pk != vd_import_is_pickle(e->parallel)) return -1;
  size_t at = 0;
  memcpy(what, pk ? "nnscaler" : "plans\0\0\0", 8), at += 8;
  if (vd_digest_file(e->single, what + at, &d) != VD_OK) return -1;
  at += VD_DIGEST_BYTES;
  if (vd_digest_file(e->parallel, what + at, &d) != VD_OK) return -1;
  at += VD_DIGEST_BYTES;
  if (pk) {
    if (vd_import_nnscaler_digest(what + at, &d) != VD_OK) return -1;
    at += VD_DIGEST_BYTES;
  }
  *n = at;
  return 0;
}

/* A configuration whose files a run already proved EQUIVALENT: no run,
 * empty but valid plans and graphs (every report writer can walk them). */
static void use_cached(gcfg *c, vd_cache *cache, double t0) {
  const vd_mf_entry *e = c->e;
  c->run.config_cached = 1;
  c->have_run = 1;
  /* empty but valid plans and graphs: every report writer can walk them */
  if (vd_plan_init(&c->run.sp, VD_PLAN_SINGLE) != VD_OK || vd_plan_init(&c->run.pp, VD_PLAN_PARALLEL) != VD_OK) {
    vd_run_free(&c->run);
    c->have_run = 0;
    snprintf(c->error, sizeof(c->error), "out of memory");
    c->exit_code = VD_EXIT_INCONCLUSIVE;
    return;
  }
  c->run.sg.plan = &c->run.sp;
  c->run.pg.plan = &c->run.pp;
  memset(&c->opts, 0, sizeof(c->opts));
  c->opts.sm = e->single;
  c->opts.pm = e->parallel;
  c->opts.quiet = 1;
  c->opts.max_failures = VD_LIM_MAX_FAILURES;
  c->opts.cache = cache;
  c->exit_code = VD_EXIT_OK;
  c->as_expected = e->expected == VD_EXIT_OK;
  c->secs = vd_clock_s() - t0;
}

/* Converts (when needed) and verifies one configuration. */
static void run_one(gcfg *c, const gopts *g, vd_cache *cache) {
  const vd_mf_entry *e = c->e;
  double t0 = vd_clock_s();
  vd_diag d;
  vd_diag_clear(&d);
  uint8_t what[8 + 3 * VD_DIGEST_BYTES];
  size_t n_what = 0;
  int keyed = vd_cache_dir(cache) && config_question(e, what, &n_what) == 0;
  if (keyed && vd_cache_config_lookup(cache, what, n_what, &c->run.cached)) {
    /* SOUNDNESS: the same files, by SHA-256, were proven EQUIVALENT by this
     * binary (docs/verifier.md section 9) */
    use_cached(c, cache, t0);
    return;
  }
  vd_import_tmp imp;
  memset(&imp, 0, sizeof(imp));
  const char *sm = e->single, *pm = e->parallel;
  vd_rc rc = VD_OK;
  if (e->kind == VD_MF_TORCH) {
    rc = vd_import_torch(e->single, e->parallel, e->nproc, e->sets, e->n_sets, &imp, &d);
  } else {
    int ps = vd_import_is_pickle(sm), pp = vd_import_is_pickle(pm);
    if (ps != pp)
      rc = VD_ERR(&d, VD_EINPUT, ps ? pm : sm, NULL, NULL, "is not an nnScaler pickle while %s is: give both as "
                  "pickles or both as verdict plans", ps ? sm : pm);
    else if (ps)
      rc = vd_import_nnscaler(sm, pm, &imp, &d);
  }
  if (rc == VD_OK && imp.dir[0]) sm = imp.single, pm = imp.parallel;
  vd_run_opts *o = &c->opts;
  memset(o, 0, sizeof(*o));
  o->sm = sm;
  o->pm = pm;
  o->threads = g->threads;
  o->stage_timeout_ms = g->stage_timeout_ms;
  o->stage_budget = g->stage_budget;
  o->max_failures = VD_LIM_MAX_FAILURES;
  o->seed = VD_LIM_SEED;
  o->quiet = g->quiet; /* a long configuration shows its phases (progress.h) */
  o->cache = cache;
  if (rc == VD_OK) {
    rc = vd_run_verify(o, &c->run, &d);
    c->have_run = 1;
  }
  vd_import_cleanup(&imp);
  /* the reports name the manifest's files, not the temporary plans */
  o->sm = e->single;
  o->pm = e->parallel;
  if (rc != VD_OK) {
    vd_diag_format(&d, c->error, sizeof(c->error));
    c->exit_code = d.rc == VD_ENOMEM || d.rc == VD_EINTERNAL ? VD_EXIT_INCONCLUSIVE : VD_EXIT_BAD_INPUT;
    /* torch2plan's exit 1: the DP replicas ran different programs, a bug
     * of the parallel program (docs/torch.md) */
    if (e->kind == VD_MF_TORCH && imp.tool_exit == 1) c->exit_code = VD_EXIT_NOT_EQUIV;
    if (e->kind == VD_MF_TORCH && imp.tool_exit == 3) c->exit_code = VD_EXIT_INCONCLUSIVE;
    if (c->have_run) vd_run_free(&c->run);
    c->have_run = 0;
  } else {
    c->exit_code = vd_run_exit_code(&c->run);
    c->has_expected_dx = finding_classes(&c->run, e->expect_dx, c->classes, sizeof(c->classes));
    if (keyed && c->exit_code == VD_EXIT_OK) {
      vd_cache_config info = {c->run.set.n_stages, c->run.n_solved, c->run.n_represented};
      vd_cache_config_store(cache, what, n_what, &info);
    }
  }
  c->as_expected = c->exit_code == e->expected && (e->expected != 1 || e->expect_dx < 0 || c->has_expected_dx);
  c->secs = vd_clock_s() - t0;
}

/* ---- JSON (jansson) ---------------------------------------------------- */

/* The configuration's own JSON report (vd_report_json), parsed back. */
static json_t *run_json(const gcfg *c) {
  char tmp[4200];
  const char *base = getenv("TMPDIR");
  snprintf(tmp, sizeof(tmp), "%s/verdict-gate-json.XXXXXX", base && *base ? base : "/tmp");
  int fd = mkstemp(tmp);
  if (fd < 0) return NULL;
  close(fd);
  vd_diag d;
  vd_diag_clear(&d);
  json_t *j = NULL;
  if (vd_report_json(&c->run, &c->opts, tmp, &d) == VD_OK) j = json_load_file(tmp, 0, NULL);
  unlink(tmp);
  return j;
}

static vd_rc write_json(const gcfg *cs, size_t n, const gopts *g, int code, const vd_cache *cache,
                        const vd_cache_stats *tot, vd_diag *d) {
  json_t *root = json_object(), *arr = json_array();
  if (!root || !arr) {
    json_decref(root);
    json_decref(arr);
    return VD_OOM(d);
  }
  json_object_set_new(root, "schema", json_string("verdict-gate"));
  json_object_set_new(root, "schema_version", json_integer(1));
  json_object_set_new(root, "tool", json_pack("{s:s,s:s}", "name", "verdict", "version", VD_VERSION_STRING));
  json_object_set_new(root, "manifest", json_string(g->manifest));
  json_object_set_new(root, "exit_code", json_integer(code));
  size_t ok = 0;
  for (size_t i = 0; i < n; i++) ok += cs[i].as_expected;
  json_object_set_new(root, "as_expected", json_integer((json_int_t)ok));
  json_object_set_new(root, "configurations_total", json_integer((json_int_t)n));
  json_object_set_new(root, "proof_cache",
                      json_pack("{s:o,s:I,s:I,s:I,s:I,s:I}", "directory",
                                vd_cache_dir(cache) ? json_string(vd_cache_dir(cache)) : json_null(), "from_directory",
                                (json_int_t)tot->hits_disk, "from_process", (json_int_t)tot->hits_memory, "stored",
                                (json_int_t)tot->stored, "ignored", (json_int_t)tot->ignored, "configurations_unchanged",
                                (json_int_t)tot->config_hits));
  for (size_t i = 0; i < n; i++) {
    const gcfg *c = &cs[i];
    const vd_mf_entry *e = c->e;
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(e->name));
    json_object_set_new(o, "kind", json_string(e->kind == VD_MF_TORCH ? "torch" : "plans"));
    json_object_set_new(o, "single", json_string(e->single));
    json_object_set_new(o, "parallel", json_string(e->parallel));
    json_object_set_new(o, "expected_exit_code", json_integer(e->expected));
    json_object_set_new(o, "expected_class", e->expect_dx >= 0 ? json_string(vd_diagnosis_names[e->expect_dx]) : json_null());
    json_object_set_new(o, "exit_code", json_integer(c->exit_code));
    json_object_set_new(o, "outcome", json_string(expect_word(c->exit_code)));
    json_object_set_new(o, "as_expected", json_boolean(c->as_expected));
    json_object_set_new(o, "seconds", json_real(c->secs));
    json_object_set_new(o, "error", c->have_run ? json_null() : json_string(c->error));
    if (c->have_run) {
      json_t *cl = json_array();
      char tmp[sizeof(c->classes)];
      snprintf(tmp, sizeof(tmp), "%s", c->classes);
      for (char *t = strtok(tmp, ", "); t; t = strtok(NULL, ", ")) json_array_append_new(cl, json_string(t));
      json_object_set_new(o, "finding_classes", cl);
      json_object_set_new(o, "classes_reused_from_cache", json_integer((json_int_t)c->run.n_cache_reused));
      json_object_set_new(o, "unchanged_since_proven", json_boolean(c->run.config_cached));
      json_t *rep = run_json(c);
      json_object_set_new(o, "report", rep ? rep : json_null());
    }
    json_array_append_new(arr, o);
  }
  json_object_set_new(root, "configurations", arr);
  int bad;
  if (!strcmp(g->json, "-")) {
    bad = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_SORT_KEYS) != 0 || fputc('\n', stdout) == EOF;
  } else {
    bad = json_dump_file(root, g->json, JSON_INDENT(1) | JSON_SORT_KEYS) != 0;
  }
  json_decref(root);
  if (bad) VD_FAIL(d, VD_EIO, g->json, NULL, NULL, "writing the gate's JSON report failed");
  return VD_OK;
}

/* ---- the command --------------------------------------------------------- */

/* The gate's exit code (file header): every configuration as expected,
 * else the worst kind of surprise; *n_ok counts the expected ones. */
static int gate_exit_code(const gcfg *cs, size_t n, int *n_ok) {
  int any1 = 0, any2 = 0, any3 = 0;
  for (size_t i = 0; i < n; i++) {
    const gcfg *c = &cs[i];
    if (c->as_expected) {
      (*n_ok)++;
      continue;
    }
    /* a verdict against the manifest: NOT EQUIVALENT unexpectedly or of
     * another class, or EQUIVALENT where another outcome was expected */
    if (c->exit_code == VD_EXIT_NOT_EQUIV || c->exit_code == VD_EXIT_OK) any1 = 1;
    else if (c->exit_code == 2) any2 = 1;
    else any3 = 1;
  }
  return any1 ? VD_EXIT_NOT_EQUIV : any2 ? VD_EXIT_BAD_INPUT : any3 ? VD_EXIT_INCONCLUSIVE : VD_EXIT_OK;
}

/* The summary table: a row per configuration. */
static void print_table(FILE *out, const gcfg *cs, const vd_manifest *m, int code, int n_ok) {
  fprintf(out, "%s: %d of %zu configurations as expected\n", code ? "GATE FAILED" : "GATE PASSED", n_ok, m->n);
  size_t w = 13;
  for (size_t i = 0; i < m->n; i++)
    if (strlen(m->v[i].name) > w) w = strlen(m->v[i].name);
  fprintf(out, "  %-*s  %-34s  %-34s  %-8s  %15s  %8s\n", (int)w, "configuration", "outcome", "expected", "as exp.",
          "classes/reused", "seconds");
  for (size_t i = 0; i < m->n; i++) {
    const gcfg *c = &cs[i];
    char oc[64], ex[64], cl[48];
    snprintf(oc, sizeof(oc), "%s%s%.20s", expect_word(c->exit_code), c->classes[0] ? ": " : "", c->classes);
    snprintf(ex, sizeof(ex), "%s%s%s", expect_word(c->e->expected), c->e->expect_dx >= 0 ? ": " : "",
             c->e->expect_dx >= 0 ? vd_diagnosis_names[c->e->expect_dx] : "");
    if (c->run.config_cached) snprintf(cl, sizeof(cl), "unchanged");
    else if (c->have_run) snprintf(cl, sizeof(cl), "%zu/%zu", c->run.n_solved, c->run.n_cache_reused);
    else snprintf(cl, sizeof(cl), "-");
    fprintf(out, "  %-*s  %-34s  %-34s  %-8s  %15s  %8.2f\n", (int)w, c->e->name, oc, ex, c->as_expected ? "yes" : "NO",
            cl, c->secs);
  }
}

/* The machine-readable outputs the options name; returns the exit code
 * (code, or that of an output that could not be written). */
static int write_outputs(gcfg *cs, size_t n, const gopts *g, int code, vd_cache *cache, const vd_cache_stats *tot,
                         vd_diag *d) {
  vd_report_config *rc = vd_calloc(n, sizeof(*rc));
  if (!rc) code = VD_EXIT_INCONCLUSIVE;
  for (size_t i = 0; rc && i < n; i++) {
    rc[i].name = cs[i].e->name;
    rc[i].run = cs[i].have_run ? &cs[i].run : NULL;
    rc[i].opts = cs[i].have_run ? &cs[i].opts : NULL;
    rc[i].exit_code = cs[i].exit_code;
    rc[i].expected = cs[i].e->expected;
    rc[i].error = cs[i].have_run ? NULL : cs[i].error;
    rc[i].expected_dx = cs[i].e->expect_dx > 0 ? cs[i].e->expect_dx : VD_DX_NONE;
  }
  vd_diag_clear(d);
  if (rc && g->json && write_json(cs, n, g, code, cache, tot, d) != VD_OK) code = vd_cli_report_diag(d);
  if (rc && g->junit && vd_report_junit_configs(rc, n, g->junit, d) != VD_OK) code = vd_cli_report_diag(d);
  if (rc && g->sarif && vd_report_sarif_configs(rc, n, g->sarif, d) != VD_OK) code = vd_cli_report_diag(d);
  if (rc && g->github) {
    const char *sum = getenv("GITHUB_STEP_SUMMARY");
    if (vd_report_github_configs(rc, n, stdout, sum && *sum ? sum : NULL, d) != VD_OK) code = vd_cli_report_diag(d);
  }
  vd_free(rc);
  return code;
}

int vd_cmd_gate(int argc, char **argv) {
  gopts g;
  int prc = parse(argc, argv, &g);
  if (prc) return prc < 0 ? VD_EXIT_OK : prc;
  vd_diag d;
  vd_diag_clear(&d);
  vd_manifest m;
  if (vd_manifest_read(g.manifest, &m, &d) != VD_OK) return vd_cli_report_diag(&d);
  vd_cache *cache = NULL;
  const char *dir = g.no_cache ? NULL : g.cache_dir ? g.cache_dir : VD_CACHE_DEFAULT_DIR;
  if (vd_cache_open(dir, (uint64_t)g.cache_max_mb << 20, &cache, &d) != VD_OK) {
    vd_manifest_free(&m);
    return vd_cli_report_diag(&d);
  }
  gcfg *cs = vd_calloc(m.n, sizeof(*cs));
  if (!cs) {
    vd_cache_close(cache);
    vd_manifest_free(&m);
    fprintf(stderr, "verdict gate: out of memory\n");
    return VD_EXIT_INCONCLUSIVE;
  }
  double t0 = vd_clock_s();
  /* With --json - the JSON owns stdout and the text goes to stderr. */
  FILE *out = g.json && !strcmp(g.json, "-") ? stderr : stdout;
  for (size_t i = 0; i < m.n; i++) {
    cs[i].e = &m.v[i];
    run_one(&cs[i], &g, cache);
    if (!g.quiet)
      fprintf(stderr, "verdict gate: [%zu/%zu] %s: %s%s%s (%.2f s)\n", i + 1, m.n, m.v[i].name,
              expect_word(cs[i].exit_code), cs[i].classes[0] ? ": " : "", cs[i].classes, cs[i].secs);
  }
  double total = vd_clock_s() - t0;
  int n_ok = 0;
  int code = gate_exit_code(cs, m.n, &n_ok);
  vd_cache_stats tot;
  vd_cache_stats_get(cache, &tot);
  print_table(out, cs, &m, code, n_ok);
  fprintf(out, "  proof cache%s%s: %zu classes reused (%zu from the directory, %zu shared between configurations), "
               "%zu proven and stored",
          dir ? " " : " (memory only)", dir ? VD_SHOW(dir) : "", tot.hits_disk + tot.hits_memory, tot.hits_disk, tot.hits_memory,
          tot.stored);
  if (tot.config_hits) fprintf(out, "; %zu configuration(s) unchanged since a run proved them", tot.config_hits);
  if (tot.ignored) fprintf(out, "; %zu entries ignored, not trusted (last: %s)", tot.ignored, VD_SHOW(tot.last_ignored));
  fprintf(out, "\n  time: %.2f s\n", total);
  for (size_t i = 0; i < m.n; i++) {
    const gcfg *c = &cs[i];
    if (c->as_expected && !g.verbose) continue;
    if (g.quiet && c->as_expected) continue;
    fprintf(out, "\n==== configuration %s: %s (expected %s)\n", c->e->name, expect_word(c->exit_code),
            expect_word(c->e->expected));
    if (c->have_run) vd_report_text(&c->run, &c->opts, out);
    else fprintf(out, "%s\n", VD_SHOW(c->error));
  }
  code = write_outputs(cs, m.n, &g, code, cache, &tot, &d);
  for (size_t i = 0; i < m.n; i++)
    if (cs[i].have_run) vd_run_free(&cs[i].run);
  vd_free(cs);
  vd_cache_close(cache);
  vd_manifest_free(&m);
  if (vd_smt_orphans()) {
    fflush(stdout);
    fflush(stderr);
    _exit(code);
  }
  return code;
}
