/*
 * verifier/cmd_compare.c - `verdict compare`: a real run's values against
 * the rounding bounds of the plan (noise/, docs/noise.md).
 *
 *   verdict compare --sm S --pm P --single-dump A --parallel-dump B
 *                   [--dtype P] [--accum P] [--lambda L] [--no-verify]
 *                   [--json F] [--html F] [-q] [-v]
 *
 * The dumps (tools/torch2plan --dump-single / --dump-parallel) are mapped
 * through the lineages onto the single-device tensors; each deviation is set
 * against its bound, in topological order.  The plans are verified too
 * (unless --no-verify): when they are EQUIVALENT and the run still exceeds
 * its bounds, the difference comes from outside the plan and the report says
 * so.  Exit 0 every tensor within rounding, 1 one beyond (or missing), 2 bad
 * input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/text.h"
#include "cli.h"
#include "report_noise.h"
#include "run.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict compare --sm SINGLE.plan --pm PARALLEL.plan --single-dump A --parallel-dump B\n"
          "                       [--dtype P] [--accum P] [--lambda L] [--no-verify] [--json F|-] [--html F] [-q] [-v]\n"
          "  Real tensors from one step of each run (dumps written by tools/torch2plan --dump-single/\n"
          "  --dump-parallel), mapped through the lineages onto the single-device tensors (shards\n"
          "  concatenated, partial sums added, replicas compared), each deviation set against its rounding\n"
          "  bound, in topological order: within rounding, beyond rounding (the first is where to look),\n"
          "  or missing.\n"
          "  --dtype P    precision of the run (bf16, fp16, fp32, fp64); default: each tensor's plan dtype\n"
          "  --accum P    accumulation precision of sums and matmuls (fp32 for bf16 on CPU)\n"
          "  --lambda L   realistic bound = L standard deviations (default 3)\n"
          "  --no-verify  do not verify the plans (the report then cannot say the difference is outside them)\n"
          "  --json F     every tensor with its bounds, observed deviation and status\n"
          "  --html F     the report with a plot of observed deviation against bound per tensor family\n"
          "  -q           the verdict line only; -v every tensor\n"
          "  docs/noise.md explains the model and the dump format.\n"
          "  Exit: 0 every tensor within rounding, 1 one beyond rounding or missing, 2 bad input or usage.\n");
}

/* The options of compare, in the order of its help text. */
enum { C_SM = 1, C_PM, C_SINGLE_DUMP, C_PARALLEL_DUMP, C_DTYPE, C_ACCUM, C_LAMBDA, C_NO_VERIFY, C_JSON, C_HTML,
       C_QUIET, C_VERBOSE, C_HELP };
static const vd_cli_opt compare_opts[] = {
    {"--sm", "FILE", C_SM}, {"--pm", "FILE", C_PM}, {"--single-dump", "A", C_SINGLE_DUMP},
    {"--parallel-dump", "B", C_PARALLEL_DUMP}, {"--dtype", "T", C_DTYPE}, {"--accum", "T", C_ACCUM},
    {"--lambda", "X", C_LAMBDA}, {"--no-verify", NULL, C_NO_VERIFY}, {"--json", "FILE", C_JSON},
    {"--html", "FILE", C_HTML}, {"-q", NULL, C_QUIET}, {"-v", NULL, C_VERBOSE}, {"--help", NULL, C_HELP},
    {"-h", NULL, C_HELP}, {NULL, NULL, 0}};

/* The command line of compare. */
typedef struct {
  const char *sm, *pm, *sdp, *pdp, *json, *html;
  vd_noise_opts o;
  int quiet, verbose, verify;
} compare_args;

/* Returns -1 to go on, else the exit code (help printed, or bad usage). */
static int parse_args(int argc, char **argv, compare_args *ca) {
  memset(ca, 0, sizeof(*ca));
  ca->o.dtype = VD_NOISE_PLAN;
  ca->o.accum = VD_NOISE_PLAN;
  ca->o.lambda = 3.0;
  ca->verify = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    const vd_cli_opt *opt = vd_cli_opt_find(compare_opts, a);
    int id = opt && (!opt->arg || v) ? opt->id : 0; /* a value option without its value is unknown */
    const char **path = id == C_SM ? &ca->sm : id == C_PM ? &ca->pm : id == C_SINGLE_DUMP ? &ca->sdp
                      : id == C_PARALLEL_DUMP ? &ca->pdp : id == C_JSON ? &ca->json : id == C_HTML ? &ca->html : NULL;
    if (id == C_HELP) {
      usage(stdout);
      return VD_EXIT_OK;
    } else if (id == C_QUIET) {
      ca->quiet = 1;
    } else if (id == C_VERBOSE) {
      ca->verbose = 1;
    } else if (id == C_NO_VERIFY) {
      ca->verify = 0;
    } else if (path) {
      *path = v, i++;
    } else if (id == C_DTYPE || id == C_ACCUM) {
      vd_noise_prec p;
      int rc = vd_noise_arg_prec("compare", a, v, &p);
      if (rc >= 0) return rc;
      if (id == C_DTYPE) ca->o.dtype = p;
      else ca->o.accum = p;
      i++;
    } else if (id == C_LAMBDA) {
      int rc = vd_noise_arg_positive("compare", a, v, &ca->o.lambda);
      if (rc >= 0) return rc;
      i++;
    } else {
      return vd_cli_unknown_option("verdict compare", a, compare_opts, "verdict compare --help");
    }
  }
  return -1;
}

/* The verdict on the plan pair itself (quiet, one failure), or NULL when
 * it could not be reached. */
static const char *plan_verdict_of(const char *sm, const char *pm) {
  const char *plan_verdict = NULL;
  vd_run_opts ro;
  memset(&ro, 0, sizeof(ro));
  ro.sm = sm;
  ro.pm = pm;
  ro.quiet = 1;
  ro.max_failures = 1;
  vd_run run;
  memset(&run, 0, sizeof(run));
  vd_diag vd;
  vd_diag_clear(&vd);
  if (vd_run_verify(&ro, &run, &vd) == VD_OK) {
    int rc = vd_run_exit_code(&run);
    plan_verdict = rc == 0 ? "EQUIVALENT" : rc == 1 ? "NOT EQUIVALENT" : "INCONCLUSIVE";
  }
  vd_run_free(&run);
  return plan_verdict;
}

int vd_cmd_compare(int argc, char **argv) {
  compare_args ca;
  int prc = parse_args(argc, argv, &ca);
  if (prc >= 0) return prc;
  const char *sm = ca.sm, *pm = ca.pm, *sdp = ca.sdp, *pdp = ca.pdp, *json = ca.json, *html = ca.html;
  vd_noise_opts o = ca.o;
  int quiet = ca.quiet, verbose = ca.verbose, verify = ca.verify;
  if (!sm || !pm || !sdp || !pdp) {
    fprintf(stderr, "verdict compare: --sm, --pm, --single-dump and --parallel-dump are required\n");
    usage(stderr);
    return VD_EXIT_BAD_INPUT;
  }
  o.sm = sm;
  o.pm = pm;
  vd_noise_pair np;
  vd_noise_result *r = &np.r;
  vd_noise_dump *sd = NULL, *pd = NULL;
  vd_diag d;
  vd_diag_clear(&d);
  const char *plan_verdict = NULL;
  int code = vd_noise_pair_load(&np, sm, pm);
  if (code >= 0) goto done;
  if (vd_noise_dump_read(sdp, &sd, &d) != VD_OK || vd_noise_dump_read(pdp, &pd, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  if (strcmp(vd_noise_dump_kind(sd), "single") != 0 || strcmp(vd_noise_dump_kind(pd), "parallel") != 0) {
    fprintf(stderr, "verdict: %s: line 1: header: expected a %s dump\n",
            VD_SHOW(strcmp(vd_noise_dump_kind(sd), "single") != 0 ? sdp : pdp),
            strcmp(vd_noise_dump_kind(sd), "single") != 0 ? "single" : "parallel");
    code = VD_EXIT_BAD_INPUT;
    goto done;
  }
  if (verify) plan_verdict = plan_verdict_of(sm, pm);
  if (vd_noise_run(&np.sp, &np.pp, sd, pd, &o, r, &d) != VD_OK) {
    if (!d.file[0]) vd_diag_set_file(&d, pdp);
    code = vd_cli_report_diag(&d);
    goto done;
  }
  vd_noise_report_ctx x = {.mode = "compare", .o = &o, .plan_verdict = plan_verdict, .single_dump = sdp,
                           .parallel_dump = pdp, .verbose = verbose};
  if (!(json && !strcmp(json, "-"))) {
    if (quiet) {
      printf("compare: %s\n", r->n_count[VD_NOISE_BEYOND] ? "BEYOND ROUNDING"
                              : r->n_count[VD_NOISE_MISSING] ? "MISSING VALUES" : "WITHIN ROUNDING");
    } else {
      vd_noise_write_text(stdout, r, &x);
    }
  }
  code = vd_noise_write_files(json, html, r, &x,
                              r->n_count[VD_NOISE_BEYOND] || r->n_count[VD_NOISE_MISSING] ? VD_EXIT_NOT_EQUIV : VD_EXIT_OK);
done:
  vd_noise_dump_free(sd);
  vd_noise_dump_free(pd);
  vd_noise_pair_free(&np);
  return code;
}
