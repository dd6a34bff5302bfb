/* verifier/cmd_gen.c - placeholder until the gen subcommand lands. */
#include <stdio.h>

#include "cli.h"

int vd_cmd_gen(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "verdict: 'gen' is not implemented yet\n");
  return VD_EXIT_BAD_INPUT;
}
