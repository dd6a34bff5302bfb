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

void vd_cli_put(FILE *f, const char *s, size_t n, vd_text_mode mode) {
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

/* The options a command knows are the ones its usage text lists: reading
 * them from there keeps one list per command (no second table to forget). */
static void closest_option(const char *arg, void (*usage)(FILE *), char *out, size_t n) {
  out[0] = '\0';
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) return;
  usage(m);
  if (fclose(m) != 0 || !text) {
    free(text);
    return;
  }
  size_t na = strlen(arg);
  int best = 99;
  for (const char *p = text; *p; p++) {
    if (*p != '-' || (p > text && !isspace((unsigned char)p[-1]) && p[-1] != ',')) continue;
    size_t k = 0;
    while (p[k] && (isalnum((unsigned char)p[k]) || p[k] == '-' || p[k] == '_')) k++;
    if (k < 2 || (k == na && !strncmp(p, arg, k))) {
      p += k ? k - 1 : 0;
      continue;
    }
    int dist = vd_cli_edit_distance(arg, na, p, k);
    /* a unique-looking prefix counts as close (--thread for --threads) */
    if (na >= 4 && k > na && !strncmp(p, arg, na)) dist = 1;
    if (dist < best) {
      best = dist;
      snprintf(out, n, "%.*s", (int)k, p);
    }
    p += k - 1;
  }
  free(text); /* open_memstream's buffer comes from malloc */
  if (best > 2 && best * 3 > (int)na) out[0] = '\0';
}

int vd_cli_unknown_option(const char *who, const char *arg, void (*usage)(FILE *), const char *help) {
  char near[64];
  closest_option(arg, usage, near, sizeof(near));
  if (near[0]) fprintf(stderr, "%s: unknown option '%s'; did you mean '%s'? (see %s)\n", who, VD_SHOW(arg), near, help);
  else fprintf(stderr, "%s: unknown option '%s' (see %s)\n", who, VD_SHOW(arg), help);
  return VD_EXIT_BAD_INPUT;
}

/* One escaper for both XML reports (report_html.c writes XHTML,
 * report_junit.c JUnit XML), so they cannot drift apart: common/text.h's
 * XML mode (characters XML 1.0 does not allow are shown escaped, never
 * written raw; invalid UTF-8 is shown as \\xNN). */
void vd_cli_xml_text(FILE *f, const char *s, size_t n) { vd_cli_put(f, s, n, VD_TEXT_XML); }
void vd_cli_xml_str(FILE *f, const char *s) { vd_cli_xml_text(f, s, strlen(s)); }
