/*
 * verifier/main.c - entry point of the verdict binary: global options and
 * dispatch to subcommands (verifier/cmd_*.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "cli.h"

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command_t;

static const command_t commands[] = {
    {"plan", vd_cmd_plan, "plan validate|dump|stats FILE: inspect a plan file"},
    {"gen", vd_cmd_gen, "generate a single-device and a parallel plan for a model"},
    {"exec", vd_cmd_exec, "run both plans numerically and compare (the oracle)"},
    {"mutate", vd_cmd_mutate, "inject a bug class of docs/bugs.md into a parallel plan"},
    {"limits", vd_cmd_limits, "every limit and default, with the reason for its value"},
    {"gate", vd_cmd_gate, "verify every configuration of a manifest in one run (docs/gate.md)"},
    {"noise", vd_cmd_noise, "rounding bounds of the parallel plan against the single-device plan"},
    {"compare", vd_cmd_compare, "a real run's dumps against the rounding bounds (noise or bug?)"},
    {"recheck", vd_cmd_recheck, "re-prove a certificate (verdict --certificate DIR) with cvc5"},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict --sm SINGLE.plan --pm PARALLEL.plan [options]\n"
          "       verdict <command> [args]\n"
          "\n"
          "Proves that one training iteration of a parallel execution plan computes the\n"
          "same values as the single-device plan, or prints a counterexample.\n"
          "\n"
          "commands:\n");
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    fprintf(f, "  %-7s %s\n", commands[i].name, commands[i].summary);
  fprintf(f,
          "\n"
          "options of the main form (verdict --sm S --pm P --help for all):\n"
          "  --sm FILE        single-device plan\n"
          "  --pm FILE        parallel plan\n"
          "  --help, -h       this text\n"
          "  --version        print the version\n"
          "\n"
          "exit codes: 0 equivalent (or success), 1 not equivalent, 2 bad input or usage,\n"
          "            3 inconclusive (timeout, unknown, unsupported operator)\n"
          "Run 'verdict <command> --help' for a command's options.\n");
}

/* A full disk or a closed pipe must not end in exit 0 with a truncated
 * report: every command's output goes through stdout (or files that their
 * writers check), so its buffered errors are checked once, here. */
static int finish(int rc) {
  errno = 0;
  int bad = fflush(stdout) != 0 || ferror(stdout);
  int err = errno;
  if (fclose(stdout) != 0 && !bad) {
    bad = 1;
    err = errno;
  }
  if (bad) {
    fprintf(stderr, "verdict: error writing standard output: %s\n", err ? strerror(err) : "write failed");
    return VD_EXIT_BAD_INPUT;
  }
  return rc;
}

static int run(int argc, char **argv);

/* Test hook (tests/e2e/14_reliability.sh): VERDICT_FAIL_ALLOC=N makes the
 * Nth allocation of the run fail, to reach every out-of-memory path from
 * the command line; the run says on stderr when the failure fired. */
static long fault_hook(void) {
  const char *e = getenv("VERDICT_FAIL_ALLOC");
  if (!e || !*e) return 0;
  char *end;
  long n = strtol(e, &end, 10);
  if (*end || n <= 0) return 0;
  vd_mem_fail_after(n);
  return n;
}

int main(int argc, char **argv) {
  vd_mem_setup();
  long nth = fault_hook();
  int rc = finish(run(argc, argv));
  if (nth && vd_mem_fault_hit()) fprintf(stderr, "verdict: injected failure of allocation %ld fired\n", nth);
  return rc;
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return VD_EXIT_BAD_INPUT;
  }
  const char *a = argv[1];
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 || strcmp(a, "help") == 0) {
    usage(stdout);
    return VD_EXIT_OK;
  }
  if (strcmp(a, "--version") == 0) {
    printf("verdict %s (plan format v1)\n", VD_VERSION_STRING);
    return VD_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
    if (strcmp(a, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  if (a[0] == '-') return vd_cmd_verify(argc, argv);
  /* `verdict single.plan tp2.plan`: the main form names its plans. */
  if (strchr(a, '.') || strchr(a, '/')) {
    fprintf(stderr, "verdict: '%s' is not a command; to verify a pair of plans: verdict --sm SINGLE.plan --pm "
                    "PARALLEL.plan (see verdict --help)\n", a);
    return VD_EXIT_BAD_INPUT;
  }
  const char *near = NULL;
  int best = 3;
  for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
    int dist = vd_cli_edit_distance(a, strlen(a), commands[i].name, strlen(commands[i].name));
    if (dist < best) best = dist, near = commands[i].name;
  }
  if (near) fprintf(stderr, "verdict: unknown command '%s'; did you mean '%s'? (see verdict --help)\n", a, near);
  else fprintf(stderr, "verdict: unknown command '%s' (see verdict --help)\n", VD_SHOW(a));
  return VD_EXIT_BAD_INPUT;
}
