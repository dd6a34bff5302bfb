/*
 * verifier/cli_util.c - helpers shared by the subcommands.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int vd_cli_report_diag(const vd_diag *d) {
  char line[1024];
  vd_diag_format(d, line, sizeof(line));
  fprintf(stderr, "verdict: %s\n", line);
  /* Running out of memory or an internal failure is not a fault of the
   * input: no verdict was reached, which is "inconclusive". */
  return d->rc == VD_ENOMEM || d->rc == VD_EINTERNAL ? VD_EXIT_INCONCLUSIVE : VD_EXIT_BAD_INPUT;
}

long vd_cli_parse_long(const char *s) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0) return -1;
  return v;
}

void vd_cli_json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}
