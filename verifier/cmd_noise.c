/*
 * verifier/cmd_noise.c - `verdict noise`: the rounding a parallel plan may
 * show against its single-device plan, per tensor, from the plan alone
 * (noise/, docs/noise.md).
 *
 *   verdict noise --sm S --pm P --dtype bf16|fp16|fp32|fp64 [--accum fp32]
 *                 [--scale X] [--lambda L] [--seed N] [--json F] [--html F] [-q]
 *
 * The bounds are evaluated on values of a stated scale: the parallel plan is
 * run on random inputs uniform in [-X, X] and the magnitudes of its values
 * enter the bounds (the output says so).  Exit 0 when the bounds were
 * computed, 2 on bad input.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/text.h"
#include "cli.h"
#include "report_noise.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict noise --sm SINGLE.plan --pm PARALLEL.plan --dtype bf16|fp16|fp32|fp64\n"
          "                     [--accum fp32] [--scale X] [--lambda L] [--seed N] [--json F|-] [--html F] [-q]\n"
          "  For every tensor the plans compute, a bound on how far the parallel value may be from the\n"
          "  single-device value from rounding alone: realistic (probabilistic, square-root growth) and\n"
          "  worst case (first order), relative in the 2-norm, and the tensors that must be bit-identical.\n"
          "  --dtype P    precision of every floating value of the run\n"
          "  --accum P    accumulation precision of sums and matmuls (e.g. fp32 for bf16 on CPU); default P\n"
          "  --scale X    the bounds are evaluated for random inputs uniform in [-X, X] (default 1)\n"
          "  --lambda L   realistic bound = L standard deviations (default 3)\n"
          "  --json F     per tensor: name, realistic and worst-case bound, bit-identical flag\n"
          "  --html F     the table and a plot of the bounds along the topological order\n"
          "  -q           the summary only\n"
          "  docs/noise.md explains the model, its assumptions and where it is not sound.\n"
          "  Exit: 0 computed, 2 bad input or usage.\n");
}

/* The options of noise, in the order of its help text. */
enum { N_SM = 1, N_PM, N_DTYPE, N_ACCUM, N_SCALE, N_LAMBDA, N_JSON, N_HTML, N_QUIET, N_SEED, N_HELP };
static const vd_cli_opt noise_opts[] = {
    {"--sm", "FILE", N_SM}, {"--pm", "FILE", N_PM}, {"--dtype", "T", N_DTYPE}, {"--accum", "T", N_ACCUM},
    {"--scale", "X", N_SCALE}, {"--lambda", "X", N_LAMBDA}, {"--json", "FILE", N_JSON}, {"--html", "FILE", N_HTML},
    {"-q", NULL, N_QUIET}, {"--seed", "N", N_SEED}, {"--help", NULL, N_HELP}, {"-h", NULL, N_HELP},
    {NULL, NULL, 0}};

/* The command line of noise. */
typedef struct {
  const char *sm, *pm, *json, *html;
  vd_noise_opts o;
  int quiet, have_dtype;
} noise_args;

/* Returns -1 to go on, else the exit code (help printed, or bad usage). */
static int parse_args(int argc, char **argv, noise_args *ca) {
  memset(ca, 0, sizeof(*ca));
  ca->o.dtype = VD_NOISE_PLAN;
  ca->o.accum = VD_NOISE_PLAN;
  ca->o.scale = 1.0;
  ca->o.lambda = 3.0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    const vd_cli_opt *opt = vd_cli_opt_find(noise_opts, a);
    int id = opt && (!opt->arg || v) ? opt->id : 0; /* a value option without its value is unknown */
    const char **path = id == N_SM ? &ca->sm : id == N_PM ? &ca->pm : id == N_JSON ? &ca->json
                      : id == N_HTML ? &ca->html : NULL;
    if (id == N_HELP) {
      usage(stdout);
      return VD_EXIT_OK;
    } else if (id == N_QUIET) {
      ca->quiet = 1;
    } else if (path) {
      *path = v, i++;
    } else if (id == N_DTYPE || id == N_ACCUM) {
      vd_noise_prec p;
      int rc = vd_noise_arg_prec("noise", a, v, &p);
      if (rc >= 0) return rc;
      if (id == N_DTYPE) ca->o.dtype = p, ca->have_dtype = 1;
      else ca->o.accum = p;
      i++;
    } else if (id == N_SCALE || id == N_LAMBDA) {
      double x;
      int rc = vd_noise_arg_positive("noise", a, v, &x);
      if (rc >= 0) return rc;
      if (id == N_SCALE) ca->o.scale = x;
      else ca->o.lambda = x;
      i++;
    } else if (id == N_SEED) {
      long s;
      if (vd_cli_count_arg("verdict noise", "--seed", v, LONG_MAX, &s) < 0) return VD_EXIT_BAD_INPUT;
      ca->o.seed = (uint64_t)s;
      i++;
    } else {
      return vd_cli_unknown_option("verdict noise", a, noise_opts, "verdict noise --help");
    }
  }
  return -1;
}

int vd_cmd_noise(int argc, char **argv) {
  noise_args ca;
  int prc = parse_args(argc, argv, &ca);
  if (prc >= 0) return prc;
  const char *sm = ca.sm, *pm = ca.pm, *json = ca.json, *html = ca.html;
  vd_noise_opts o = ca.o;
  int quiet = ca.quiet, have_dtype = ca.have_dtype;
  if (!sm || !pm || !have_dtype) {
    fprintf(stderr, "verdict noise: --sm, --pm and --dtype are required\n");
    usage(stderr);
    return VD_EXIT_BAD_INPUT;
  }
  o.sm = sm;
  o.pm = pm;
  vd_noise_pair np;
  int code = vd_noise_pair_load(&np, sm, pm);
  if (code < 0) {
    vd_diag d;
    vd_diag_clear(&d);
    if (vd_noise_run(&np.sp, &np.pp, NULL, NULL, &o, &np.r, &d) != VD_OK) {
      code = vd_cli_report_diag(&d);
    } else {
      vd_noise_report_ctx x = {.mode = "noise", .o = &o, .verbose = !quiet};
      if (!(json && !strcmp(json, "-"))) vd_noise_write_text(stdout, &np.r, &x);
      code = vd_noise_write_files(json, html, &np.r, &x, VD_EXIT_OK);
    }
  }
  vd_noise_pair_free(&np);
  return code;
}
