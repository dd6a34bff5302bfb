/*
 * verifier/cmd_limits.c - `verdict limits`: prints the table of limits and
 * defaults (common/limits.h) with the reason for each value, so the numbers
 * a run depends on can be read without opening the source.
 */
#include <stdio.h>
#include <string.h>

#include "../common/limits.h"
#include "cli.h"

/* limits has no options but its help. */
static const vd_cli_opt limits_opts[] = {{"--help", NULL, 1}, {"-h", NULL, 1}, {NULL, NULL, 0}};

int vd_cmd_limits(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (vd_cli_opt_id(limits_opts, argv[i])) {
      printf("usage: verdict limits\n\nEvery limit and default of verdict, its value, the option that\n"
             "overrides it (if any) and why it has that value (common/limits.h).\n");
      return VD_EXIT_OK;
    }
    const char *near = argv[i][0] == '-' ? vd_cli_opt_closest(limits_opts, argv[i]) : NULL;
    if (near) fprintf(stderr, "verdict limits: unexpected argument '%s'; did you mean '%s'?\n", argv[i], near);
    else fprintf(stderr, "verdict limits: unexpected argument '%s'\n", argv[i]);
    return VD_EXIT_BAD_INPUT;
  }
  for (int i = 0; i < VD_LIMI__COUNT; i++) {
    const vd_limit_info *l = &vd_limits[i];
    printf("%-18s %10lld  %s\n    %s\n", l->name, l->value, l->option ? l->option : "-", l->reason);
  }
  return VD_EXIT_OK;
}
