/* verifier/cmd_exec.c - placeholder until the exec subcommand lands. */
#include <stdio.h>

#include "cli.h"

int vd_cmd_exec(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "verdict: 'exec' is not implemented yet\n");
  return VD_EXIT_BAD_INPUT;
}
