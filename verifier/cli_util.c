/*
 * verifier/cli_util.c - helpers shared by the subcommands.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "../common/text.h"
#include "cli.h"

int vd_cli_report_diag(const vd_diag *d) {
  char line[2048];
  vd_diag_format(d, line, sizeof(line));
  fprintf(stderr, "verdict: %s\n", line);
  /* Running out of memory, an internal failure or a stop (common/ctl.h) is
   * not a fault of the input: no verdict was reached, which is
   * "inconclusive". */
  return d->rc == VD_ENOMEM || d->rc == VD_EINTERNAL || d->rc == VD_ECANCELED ? VD_EXIT_INCONCLUSIVE : VD_EXIT_BAD_INPUT;
}

long vd_cli_parse_long(const char *s) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0) return -1;
  return v;
}

int vd_cli_count_arg(const char *who, const char *opt, const char *v, long max, long *out) {
  *out = vd_cli_parse_long(v);
  if (*out < 0 || *out > max) {
    fprintf(stderr, "%s: %s: expected a non-negative integer, got '%s'\n", who, opt, VD_SHOW(v ? v : ""));
    return -1;
  }
  return 0;
}

static void vd_cli_put(FILE *f, const char *s, size_t n, vd_text_mode mode) {
  char piece[VD_TEXT_CHAR_MAX];
  for (size_t i = 0; i < n && s[i];) {
    size_t used, m = vd_text_escape_char(s + i, n - i, mode, piece, &used);
    fwrite(piece, 1, m, f);
    i += used;
  }
}

void vd_cli_plain_str(FILE *f, const char *s) {
  if (s) vd_cli_put(f, s, strlen(s), VD_TEXT_PLAIN);
}

/* Invalid UTF-8 becomes U+FFFD (common/text.h), so the output is always
 * UTF-8; control characters become \u00XX escapes as JSON requires. */
void vd_cli_json_str(FILE *f, const char *s) {
  char piece[VD_TEXT_CHAR_MAX];
  size_t n = strlen(s);
  fputc('"', f);
  for (size_t i = 0; i < n;) {
    size_t used, m = vd_text_escape_char(s + i, n - i, VD_TEXT_UTF8, piece, &used);
    unsigned char c = (unsigned char)piece[0];
    if (m == 1 && (c == '"' || c == '\\')) fprintf(f, "\\%c", c);
    else if (m == 1 && c < 0x20) fprintf(f, "\\u%04x", c);
    else fwrite(piece, 1, m, f);
    i += used;
  }
  fputc('"', f);
}

int vd_cli_edit_distance(const char *a, size_t na, const char *b, size_t nb) {
  if (na > 64 || nb > 64) return 99;
  int row[65];
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

const vd_cli_opt *vd_cli_opt_find(const vd_cli_opt *tab, const char *arg) {
  for (const vd_cli_opt *o = tab; o->name; o++)
    if (!strcmp(o->name, arg)) return o;
  return NULL;
}

int vd_cli_opt_id(const vd_cli_opt *tab, const char *arg) {
  const vd_cli_opt *o = vd_cli_opt_find(tab, arg);
  return o ? o->id : 0;
}

int vd_cli_opt_takes(const vd_cli_opt *tab, const char *arg) {
  const vd_cli_opt *o = vd_cli_opt_find(tab, arg);
  return o && o->arg;
}

/* Close means: at most 2 edits, or edits fewer than a third of the
 * argument's length; a prefix of 4+ characters counts as one edit
 * (--thread for --threads).  The first of equally close names wins. */
const char *vd_cli_closest(const char *arg, const char *const *names, size_t n) {
  size_t na = strlen(arg);
  int best = 99;
  const char *near = NULL;
  for (size_t i = 0; i < n; i++) {
    size_t k = strlen(names[i]);
    if (k < 2 || !strcmp(names[i], arg)) continue;
    int dist = vd_cli_edit_distance(arg, na, names[i], k);
    if (na >= 4 && k > na && !strncmp(names[i], arg, na)) dist = 1;
    if (dist < best) best = dist, near = names[i];
  }
  return best > 2 && best * 3 > (int)na ? NULL : near;
}

const char *vd_cli_opt_closest(const vd_cli_opt *tab, const char *arg) {
  const char *names[64];
  size_t n = 0;
  for (const vd_cli_opt *o = tab; o->name && n < sizeof(names) / sizeof(names[0]); o++) names[n++] = o->name;
  return vd_cli_closest(arg, names, n);
}

int vd_cli_unknown_option(const char *who, const char *arg, const vd_cli_opt *tab, const char *help) {
  const char *near = vd_cli_opt_closest(tab, arg);
  if (near) fprintf(stderr, "%s: unknown option '%s'; did you mean '%s'? (see %s)\n", who, VD_SHOW(arg), near, help);
  else fprintf(stderr, "%s: unknown option '%s' (see %s)\n", who, VD_SHOW(arg), help);
  return VD_EXIT_BAD_INPUT;
}

/* One escaper for both XML reports (report_html.c writes XHTML,
 * report_junit.c JUnit XML), so they cannot drift apart: common/text.h's
 * XML mode (characters XML 1.0 does not allow are shown escaped, never
 * written raw; invalid UTF-8 is shown as \\xNN). */
void vd_cli_xml_text(FILE *f, const char *s, size_t n) { vd_cli_put(f, s, n, VD_TEXT_XML); }
void vd_cli_xml_str(FILE *f, const char *s) { vd_cli_xml_text(f, s, strlen(s)); }
