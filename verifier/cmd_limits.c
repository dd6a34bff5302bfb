/*
 * verifier/cmd_limits.c - `verdict limits`: prints the table of limits and
 * defaults (common/limits.h) with the reason for each value, so the numbers
 * a run depends on can be read without opening the source.
 */
#include <stdio.h>
#include <string.h>

#include "../common/limits.h"
#include "cli.h"

int vd_cmd_limits(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: verdict limits\n\nEvery limit and default of verdict, its value, the option that\n"
             "overrides it (if any) and why it has that value (common/limits.h).\n");
      return VD_EXIT_OK;
    }
    fprintf(stderr, "verdict limits: unexpected argument '%s'\n", argv[i]);
    return VD_EXIT_BAD_INPUT;
  }
  for (int i = 0; i < VD_LIMI__COUNT; i++) {
    const vd_limit_info *l = &vd_limits[i];
    printf("%-18s %10lld  %s\n    %s\n", l->name, l->value, l->option ? l->option : "-", l->reason);
  }
  return VD_EXIT_OK;
}
