/*
 * verifier/cmd_mutate.c - `verdict mutate`: inject one bug class of docs/bugs.md
 * into a correct parallel plan (bugs/bugs.h).
 *
 *   verdict mutate --list [--tsv]
 *   verdict mutate --bug N [--rank R] [--layer L] [--microbatch M] [--seed S] [-q] IN.plan OUT.plan
 *
 * Prints one line saying what was mutated (nodes, ranks, layer, whether the
 * mutated segment runs per microbatch).  Exit codes: 0 mutated, 2 bad input
 * or usage, or the bug does not apply to this plan (one line says why).
 * --list --tsv prints the table tab-separated for scripts:
 *   number, class, name, diagnosis, accepted diagnoses, needs, gen options,
 *   sites (';'-separated), every_site, description.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../bugs/bugs.h"
#include "../common/mem.h"
#include "../plans/plan.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict mutate --list [--tsv]\n"
          "       verdict mutate --bug N [--rank R] [--layer L] [--microbatch M] [--seed S] [-q] IN.plan OUT.plan\n"
          "\n"
          "Injects bug class N of docs/bugs.md into the correct parallel plan IN and writes OUT,\n"
          "a well-formed plan that computes something else.\n"
          "  --rank R        mutate at stored rank R (default: any)\n"
          "  --layer L       mutate in layer L (default: any)\n"
          "  --microbatch M  bug 14: the microbatch whose backward the reducer overtakes (default: last);\n"
          "                  other bugs: mutate microbatch M only (not collectives or code that runs once)\n"
          "  --seed S        picks among the matching sites and variants (default 0)\n"
          "  -q              no description line\n"
          "exit codes: 0 mutated, 2 bad input or usage, or the bug does not apply to the plan\n");
}

static int list(int tsv) {
  for (int i = 0; i < VD_BUG_COUNT; i++) {
    const vd_bug_info *b = &vd_bug_table[i];
    if (tsv)
      printf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", b->number, vd_bug_class_names[b->cls], b->name, b->diagnosis,
             b->accept, b->needs_text, b->gen_opts, b->sites, b->every_site, b->desc);
    else
      printf("%2d  %-15s %-28s %-18s needs %-20s %s\n", b->number, vd_bug_class_names[b->cls], b->name, b->diagnosis,
             b->needs_text, b->desc);
  }
  return VD_EXIT_OK;
}

static int opt_int(const char *name, const char *v, long *out) {
  return vd_cli_count_arg("verdict mutate", name, v, 0x7fffffffL, out) == 0;
}

/* The options of mutate, in the order of its help text. */
enum { M_LIST = 1, M_BUG, M_RANK, M_LAYER, M_MICROBATCH, M_SEED, M_QUIET, M_TSV, M_HELP };
static const vd_cli_opt mutate_opts[] = {
    {"--list", NULL, M_LIST},  {"--bug", "N", M_BUG},   {"--rank", "R", M_RANK},
    {"--layer", "L", M_LAYER}, {"--microbatch", "M", M_MICROBATCH}, {"--seed", "N", M_SEED},
    {"-q", NULL, M_QUIET},     {"--tsv", NULL, M_TSV},  {"--help", NULL, M_HELP},
    {"-h", NULL, M_HELP},      {NULL, NULL, 0}};

/* The command line of mutate. */
typedef struct {
  const char *files[2];
  int nfiles, do_list, tsv, quiet;
  long bug;
  vd_bug_opts o;
} mutate_args;

/* Returns -1 to go on, else the exit code (help printed, or bad usage). */
static int parse_args(int argc, char **argv, mutate_args *ma) {
  memset(ma, 0, sizeof(*ma));
  ma->bug = -1;
  long v;
  vd_bug_opts_default(&ma->o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const vd_cli_opt *opt = vd_cli_opt_find(mutate_opts, a);
    int id = opt ? opt->id : 0;
    if (id == M_HELP) {
      usage(stdout);
      return VD_EXIT_OK;
    } else if (id == M_LIST) {
      ma->do_list = 1;
    } else if (id == M_TSV) {
      ma->tsv = 1;
    } else if (id == M_QUIET) {
      ma->quiet = 1;
    } else if (opt && opt->arg && i + 1 < argc) {
      if (!opt_int(a, argv[++i], &v)) return VD_EXIT_BAD_INPUT;
      if (id == M_BUG) ma->bug = v;
      else if (id == M_RANK) ma->o.rank = (int32_t)v;
      else if (id == M_LAYER) ma->o.layer = (int32_t)v;
      else if (id == M_MICROBATCH) ma->o.mb = (int32_t)v;
      else ma->o.seed = (uint64_t)v;
    } else if (a[0] != '-' && ma->nfiles < 2) {
      ma->files[ma->nfiles++] = a;
    } else if (a[0] != '-') {
      fprintf(stderr, "verdict mutate: IN and OUT expected, got also '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    } else if (opt && opt->arg) {
      fprintf(stderr, "verdict mutate: missing value for option '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    } else {
      return vd_cli_unknown_option("verdict mutate", a, mutate_opts, "verdict mutate --help");
    }
  }
  return -1;
}

/* The line saying what was injected where, and the diagnosis to expect. */
static void describe(long bug, const vd_bug_result *r) {
  const vd_bug_info *b = vd_bug_info_get((int)bug);
  printf("mutate: bug %ld (%s, %s): %s\n", bug, b->name, vd_bug_class_names[b->cls], VD_SHOW(r->what));
  printf("  nodes");
  for (size_t i = 0; i < r->n_nodes; i++) printf("%s%lld", i ? "," : " ", (long long)r->nodes[i]);
  printf("; ranks");
  for (size_t i = 0; i < r->n_ranks; i++) printf("%s%d", i ? "," : " ", r->ranks[i]);
  printf("; layer %d; %s", r->layer, r->per_mb ? "runs per microbatch" : "runs once");
  if (r->mb >= 0) printf("; microbatch %d", r->mb);
  printf("; expected diagnosis %s\n", b->diagnosis);
}

int vd_cmd_mutate(int argc, char **argv) {
  mutate_args ma;
  int prc = parse_args(argc, argv, &ma);
  if (prc >= 0) return prc;
  const char *const *files = ma.files;
  int nfiles = ma.nfiles, do_list = ma.do_list, tsv = ma.tsv, quiet = ma.quiet;
  long bug = ma.bug;
  vd_bug_opts o = ma.o;
  if (do_list) return list(tsv);
  if (bug < 0 || nfiles != 2) {
    fprintf(stderr, "verdict mutate: --bug N, IN.plan and OUT.plan are required\n");
    usage(stderr);
    return VD_EXIT_BAD_INPUT;
  }
  if (!vd_bug_info_get((int)bug)) {
    fprintf(stderr, "verdict mutate: --bug: expected a bug number in [1, %d], got %ld\n", VD_BUG_COUNT, bug);
    return VD_EXIT_BAD_INPUT;
  }
  vd_plan_t in, out;
  memset(&in, 0, sizeof(in));
  memset(&out, 0, sizeof(out));
  vd_diag d;
  vd_diag_clear(&d);
  vd_bug_result *r = vd_calloc(1, sizeof(*r));
  int code = VD_EXIT_BAD_INPUT;
  if (!r) {
    fprintf(stderr, "verdict mutate: out of memory\n");
    return VD_EXIT_BAD_INPUT;
  }
  if (vd_plan_read_file(files[0], &in, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  vd_rc rc = vd_bug_apply(&in, (int)bug, &o, &out, r, &d);
  if (rc == VD_EUSAGE) {
    fprintf(stderr, "verdict mutate: %s: %s\n", VD_SHOW(files[0]), VD_SHOW(d.msg));
    goto done;
  }
  if (rc != VD_OK) {
    vd_diag_set_file(&d, files[0]);
    code = vd_cli_report_diag(&d);
    goto done;
  }
  if (vd_plan_write_file(&out, files[1], &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  if (!quiet) describe(bug, r);
  code = VD_EXIT_OK;
done:
  vd_plan_free(&in);
  vd_plan_free(&out);
  vd_free(r);
  return code;
}
