/*
 * verifier/cmd_exec.c - `verdict exec`: the numeric oracle on the command
 * line.
 *
 *   verdict exec --sm single.plan --pm parallel.plan [--seed N] [--tol T]
 *                [--reduce | --no-reduce] [-q]
 *   verdict exec --sm single.plan --dump FILE [--seed N]
 *
 * Runs both plans in double precision on random inputs (oracle/exec.h) and
 * prints a short report.  Plans with a tensor of more than 2^22 elements (or
 * any plan under --reduce) run on reduced copies (vd_exec_reduce: the
 * verifier's shape reduction over the whole pair); the report says so.  Exit codes: 0 the plans agree, 1 they disagree,
 * 2 bad input or usage, 3 an operator outside the registry or a pair that
 * cannot be reduced (inconclusive).
 */
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plans/plan.h"
#include "../ops/ops.h"
#include "../oracle/exec.h"
#include "../common/limits.h"
#include "../common/outfile.h"
#include "cli.h"

/* Above this many elements in some tensor, exec reduces by default. */
#define EXEC_REDUCE_THRESHOLD ((int64_t)1 << 22)

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict exec --sm SINGLE.plan --pm PARALLEL.plan [--seed N] [--tol T]\n"
          "                    [--reduce | --no-reduce] [-q]\n"
          "       verdict exec --sm SINGLE.plan --dump FILE [--seed N]\n"
          "\n"
          "Executes both plans numerically (double precision, random inputs derived\n"
          "through the lineage annotations) and compares every annotated parallel\n"
          "tensor with its slice of the single-device tensor.\n"
          "  --seed N   random seed (default %d)\n"
          "  --tol T    relative tolerance (default 1e-9)\n"
          "  --reduce   run on reduced shapes (the verifier's shape reduction applied\n"
          "             to the whole pair); the default when some tensor has more\n"
          "             than 2^22 elements\n"
          "  --no-reduce  run on the plans' own shapes\n"
          "  -q         print only the verdict line\n"
          "  --dump FILE  run the single plan alone and write the initial and final value of\n"
          "             every tensor to FILE, one line each: 'initial|final ID NAME N v1 .. vN'\n"
          "             (%%.17g; NAME '-' when empty); a frontend compares them with a real run\n"
          "exit codes: 0 agree, 1 disagree, 2 bad input or usage,\n"
          "            3 unsupported operator or a pair that cannot be reduced\n",
          VD_LIM_SEED);
}

static void print_slice(const vd_exec_mismatch *m) {
  printf("[");
  for (int i = 0; i < m->ndim; i++) printf("%s%lld:%lld", i ? ", " : "", (long long)m->lo[i], (long long)m->hi[i]);
  printf("]");
}

static void print_index(const int64_t *idx, int n) {
  printf("[");
  for (int i = 0; i < n; i++) printf("%s%lld", i ? "," : "", (long long)idx[i]);
  printf("]");
}

typedef struct {
  const char *sm, *pm, *dump;
  vd_exec_opts o;
  int quiet, reduce; /* reduce -1: by size */
} exec_args;

/* The options of exec, in the order of its help text. */
enum { X_SM = 1, X_PM, X_NO_REDUCE, X_DUMP, X_SEED, X_TOL, X_REDUCE, X_QUIET, X_HELP };
static const vd_cli_opt exec_opts[] = {
    {"--sm", "FILE", X_SM},     {"--pm", "FILE", X_PM},   {"--no-reduce", NULL, X_NO_REDUCE},
    {"--dump", "FILE", X_DUMP}, {"--seed", "N", X_SEED},  {"--tol", "T", X_TOL},
    {"--reduce", NULL, X_REDUCE}, {"-q", NULL, X_QUIET}, {"--help", NULL, X_HELP},
    {"-h", NULL, X_HELP},       {NULL, NULL, 0}};

/* Returns -1 to go on, else the exit code (help printed, or bad usage). */
static int parse_args(int argc, char **argv, exec_args *x) {
  memset(x, 0, sizeof(*x));
  x->o.seed = VD_LIM_SEED;
  x->o.tol = 1e-9;
  x->reduce = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const vd_cli_opt *opt = vd_cli_opt_find(exec_opts, a);
    int id = opt ? opt->id : 0;
    if (id == X_HELP) {
      usage(stdout);
      return VD_EXIT_OK;
    } else if (id == X_QUIET) {
      x->quiet = 1;
    } else if (id == X_REDUCE || id == X_NO_REDUCE) {
      x->reduce = id == X_REDUCE;
    } else if (opt && opt->arg && i + 1 < argc) {
      const char *v = argv[++i];
      if (id == X_DUMP) {
        x->dump = v;
      } else if (id == X_SM) {
        x->sm = v;
      } else if (id == X_PM) {
        x->pm = v;
      } else if (id == X_SEED) {
        long sd;
        if (vd_cli_count_arg("verdict exec", "--seed", v, LONG_MAX, &sd) < 0) return VD_EXIT_BAD_INPUT;
        x->o.seed = (uint64_t)sd;
      } else {
        char *end;
        double t = strtod(v, &end);
        if (*end || !(t > 0) || !isfinite(t)) {
          fprintf(stderr, "verdict exec: --tol: expected a positive number, got '%s'\n", VD_SHOW(v));
          return VD_EXIT_BAD_INPUT;
        }
        x->o.tol = t;
      }
    } else if (opt && opt->arg) {
      fprintf(stderr, "verdict exec: missing value for option '%s'\n", VD_SHOW(a));
      return VD_EXIT_BAD_INPUT;
    } else {
      return vd_cli_unknown_option("verdict exec", a, exec_opts, "verdict exec --help");
    }
  }
  if (x->dump) {
    if (!x->sm || x->pm) {
      fprintf(stderr, "verdict exec: --dump takes --sm and no --pm\n");
      return VD_EXIT_BAD_INPUT;
    }
    x->o.single_name = x->sm;
    return -1;
  }
  if (!x->sm || !x->pm) {
    fprintf(stderr, "verdict exec: --sm and --pm are required\n");
    usage(stderr);
    return VD_EXIT_BAD_INPUT;
  }
  x->o.single_name = x->sm;
  x->o.parallel_name = x->pm;
  return -1;
}

/* Reduces the pair into (rs, rp).  Returns -1 to go on with the reduced
 * pair, else the exit code (the reduction's own verdict or an error). */
static int reduce_pair(const exec_args *x, const vd_plan_t *s, const vd_plan_t *p, vd_plan_t *rs, vd_plan_t *rp) {
  vd_exec_reduce_info ri;
  memset(&ri, 0, sizeof(ri));
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_exec_reduce(s, p, &x->o, rs, rp, &ri, &d) != VD_OK) return vd_cli_report_diag(&d);
  if (ri.status == VD_EXEC_RED_UNSUPPORTED || ri.status == VD_EXEC_RED_CANNOT) {
    printf("exec: UNSUPPORTED: %s\n", VD_SHOW(ri.reason));
    return VD_EXIT_INCONCLUSIVE;
  }
  if (ri.status == VD_EXEC_RED_PARALLEL_SHAPE) {
    printf("exec: DISAGREE: shape: %s\n", VD_SHOW(ri.reason));
    return VD_EXIT_NOT_EQUIV;
  }
  if (!x->quiet)
    printf("exec: running on reduced shapes (largest tensor %lld -> %lld elements); indices below are "
           "reduced\n",
           (long long)ri.max_numel, (long long)ri.rmax_numel);
  return -1;
}

/* Where the first mismatch is and what it should have been. */
static void print_first_mismatch(const vd_exec_mismatch *m) {
  printf("  first: tensor '%s' (id %lld) on rank %lld (stored rank %d, replica %d, mb %d)\n", VD_SHOW(m->name),
         (long long)m->tensor_id, (long long)m->rank, m->stored_rank, m->replica, m->mb);
  printf("  holds: slice ");
  print_slice(m);
  printf(" of '%s' (id %lld), part %lld of %lld\n", VD_SHOW(m->full_name), (long long)m->full_id, (long long)m->part_k,
         (long long)m->part_n);
  if (m->missing_part >= 0) {
    printf("  value part %d of %lld has no instance: the parts cannot sum to the slice\n", m->missing_part,
           (long long)m->part_n);
    return;
  }
  printf("  at index ");
  print_index(m->index, m->pndim);
  printf(" (single ");
  print_index(m->full_index, m->ndim);
  printf("): expected %.17g, got %.17g%s (relative error %.3g)\n", m->expected, m->got,
         m->part_n > 1 ? " (sum of the parts)" : "", m->rel_err);
}

/* Prints the result and returns its exit code. */
static int report(const exec_args *x, const vd_exec_result *r, int reduced) {
  const char *tag = reduced ? "; reduced shapes" : "";
  if (r->status == VD_EXEC_AGREE) {
    printf("exec: AGREE (%zu tensors, %zu instances, %zu elements; max relative error %.3g; seed %llu%s)\n",
           r->n_tensors, r->n_instances, r->n_elements, r->max_rel_err, (unsigned long long)x->o.seed, tag);
    return VD_EXIT_OK;
  }
  if (r->status == VD_EXEC_UNSUPPORTED) {
    printf("exec: UNSUPPORTED%s: %s\n", reduced ? " (reduced shapes)" : "", VD_SHOW(r->reason));
    return VD_EXIT_INCONCLUSIVE;
  }
  if (r->reason[0]) {
    printf("exec: DISAGREE%s: %s\n", reduced ? " (reduced shapes)" : "", VD_SHOW(r->reason));
    if (!x->quiet)
      printf("  compared: %zu tensors, %zu instances, %zu elements\n", r->n_tensors, r->n_instances, r->n_elements);
    return VD_EXIT_NOT_EQUIV;
  }
  printf("exec: DISAGREE (%zu of %zu instances of %zu tensors, %zu elements compared; max relative error %.3g; "
         "seed %llu%s)\n",
         r->n_bad_instances, r->n_instances, r->n_tensors, r->n_elements, r->max_rel_err,
         (unsigned long long)x->o.seed, tag);
  if (!x->quiet) print_first_mismatch(&r->first);
  return VD_EXIT_NOT_EQUIV;
}

static int dump_value(void *ctx, const vd_plan_t *p, const vd_tensor_t *t, int final, const double *x, int64_t n) {
  FILE *f = ctx;
  const char *name = vd_plan_s(p, t->name);
  /* One record per line: the name escaped so it cannot break the line. */
  fprintf(f, "%s %lld ", final ? "final" : "initial", (long long)t->id);
  vd_cli_plain_str(f, name[0] ? name : "-");
  fprintf(f, " %lld", (long long)n);
  for (int64_t i = 0; i < n; i++) fprintf(f, " %.17g", x[i]);
  return fputc('\n', f) == EOF;
}

/* --dump: the single plan's values for a frontend's faithfulness check. */
static int exec_dump(const char *sm, const char *path, const vd_exec_opts *o) {
  vd_plan_t s;
  memset(&s, 0, sizeof(s));
  vd_diag d;
  vd_diag_clear(&d);
  int code = VD_EXIT_BAD_INPUT;
  vd_outfile of = {0}; /* common/outfile.h */
  if (vd_plan_read_file(sm, &s, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  if (s.kind != VD_PLAN_SINGLE) {
    fprintf(stderr, "verdict exec: --dump expects a single-device plan for --sm\n");
    goto done;
  }
  if (vd_outfile_open(&of, path, 0, &d) != VD_OK || vd_exec_single(&s, o, dump_value, of.fp, &d) != VD_OK ||
      vd_outfile_commit(&of, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  printf("exec: wrote the values of %s (seed %llu) to %s\n", VD_SHOW(sm), (unsigned long long)o->seed, VD_SHOW(path));
  code = VD_EXIT_OK;
done:
  vd_outfile_abort(&of);
  vd_plan_free(&s);
  return code;
}

int vd_cmd_exec(int argc, char **argv) {
  exec_args x;
  int code = parse_args(argc, argv, &x);
  if (code >= 0) return code;
  if (x.dump) return exec_dump(x.sm, x.dump, &x.o);
  vd_plan_t s, p, rs, rp;
  memset(&s, 0, sizeof(s));
  memset(&p, 0, sizeof(p));
  memset(&rs, 0, sizeof(rs));
  memset(&rp, 0, sizeof(rp));
  vd_diag d;
  vd_diag_clear(&d);
  vd_exec_result r;
  code = VD_EXIT_BAD_INPUT;
  if (vd_plan_read_file(x.sm, &s, &d) != VD_OK || vd_plan_read_file(x.pm, &p, &d) != VD_OK ||
      vd_op_check_plan(&s, x.sm, &d) != VD_OK || vd_op_check_plan(&p, x.pm, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  if (s.kind != VD_PLAN_SINGLE || p.kind != VD_PLAN_PARALLEL) {
    fprintf(stderr, "verdict exec: expected a single-device plan for --sm and a parallel plan for --pm\n");
    goto done;
  }
  {
    /* The oracle runs every replica: a plan whose replicas ask for more
     * than its file allows is not run (plans/budget.c). */
    char why[400];
    if (vd_plan_replica_work(&p, why, sizeof(why), &d) != VD_OK) {
      code = vd_cli_report_diag(&d);
      goto done;
    }
    if (why[0]) {
      printf("exec: INCONCLUSIVE: %s: %s\n", x.pm, why);
      code = VD_EXIT_INCONCLUSIVE;
      goto done;
    }
  }
  if (x.reduce < 0) {
    int64_t m = vd_exec_max_numel(&s), mp = vd_exec_max_numel(&p);
    x.reduce = (m > mp ? m : mp) > EXEC_REDUCE_THRESHOLD;
  }
  if (x.reduce && (code = reduce_pair(&x, &s, &p, &rs, &rp)) >= 0) goto done;
  if (vd_exec_compare(x.reduce ? &rs : &s, x.reduce ? &rp : &p, &x.o, &r, &d) != VD_OK) {
    code = vd_cli_report_diag(&d);
    goto done;
  }
  code = report(&x, &r, x.reduce);
done:
  vd_plan_free(&rs);
  vd_plan_free(&rp);
  vd_plan_free(&s);
  vd_plan_free(&p);
  return code;
}
