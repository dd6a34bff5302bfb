/*
 * verifier/cli.h - subcommands of the verdict binary.
 *
 * Each subcommand lives in its own verifier/cmd_<name>.c and is reached
 * through the table in main.c.  A subcommand returns the process exit code:
 *   0 equivalent / success, 1 not equivalent, 2 bad input or usage,
 *   3 inconclusive.
 * Only verifier/ prints to stdout/stderr or decides exit codes.
 *
 * Layer: verifier/ is the verdict binary: command line, orchestration,
 * reports, exit codes; it may include every module.  tools/check_layers.sh
 * (make lint) enforces the order.
 */
#ifndef VD_CLI_H
#define VD_CLI_H

#include <stdio.h>

#include "../common/diag.h"
#include "../common/text.h"

enum { VD_EXIT_OK = 0, VD_EXIT_NOT_EQUIV = 1, VD_EXIT_BAD_INPUT = 2, VD_EXIT_INCONCLUSIVE = 3 };

#define VD_VERSION_STRING "0.1.0"

/* argv[0] is the subcommand name. */
int vd_cmd_plan(int argc, char **argv);   /* plan validate|dump|stats */
int vd_cmd_gen(int argc, char **argv);    /* generators */
int vd_cmd_exec(int argc, char **argv);   /* numeric executor */
int vd_cmd_verify(int argc, char **argv); /* --sm/--pm main form */
int vd_cmd_mutate(int argc, char **argv); /* bug injection (bugs/) */
int vd_cmd_limits(int argc, char **argv); /* the table of limits (common/limits.h) */
int vd_cmd_gate(int argc, char **argv);   /* many configurations in one run (docs/gate.md) */
int vd_cmd_noise(int argc, char **argv);   /* rounding bounds of a plan pair (noise/) */
int vd_cmd_compare(int argc, char **argv); /* a real run's dumps against the bounds (noise/) */
int vd_cmd_recheck(int argc, char **argv); /* re-prove a certificate (cmd_recheck.c) */

/* Prints "verdict: <one-line diag>" to stderr and returns the exit code:
 * 2 for bad input, usage or i/o; 3 (inconclusive: no verdict reached) for
 * ENOMEM, internal errors and a stop (VD_ECANCELED). */
int vd_cli_report_diag(const vd_diag *d);

/* Writes s escaped for a terminal or a plain-text report (no control
 * characters, no line breaks; NULL writes nothing). */
void vd_cli_plain_str(FILE *f, const char *s);
/* Writes s as a JSON string literal (quoted, escaped, valid UTF-8). */
void vd_cli_json_str(FILE *f, const char *s);
/* Writes at most n bytes of s (stopping at a NUL) escaped for XML text and
 * attribute values; vd_cli_xml_str writes all of s. */
void vd_cli_xml_text(FILE *f, const char *s, size_t n);
void vd_cli_xml_str(FILE *f, const char *s);

/* One row of a command's option table: the option as typed, the value it
 * takes (NULL: a flag) and the command's code for it (> 0).  The table is
 * the one list of a command's options: its parser looks every argument up
 * in it, and an unknown option is matched against it ("did you mean").
 * Rows stand in the order of the command's help text, so that of two
 * equally close options the one listed first is suggested; a table ends
 * with a row whose name is NULL. */
typedef struct {
  const char *name;
  const char *arg;
  int id;
} vd_cli_opt;

/* The row of tab whose name is arg, or NULL. */
const vd_cli_opt *vd_cli_opt_find(const vd_cli_opt *tab, const char *arg);
/* Its id, or 0 when arg is not an option of tab. */
int vd_cli_opt_id(const vd_cli_opt *tab, const char *arg);
/* Whether arg is an option of tab that takes a value. */
int vd_cli_opt_takes(const vd_cli_opt *tab, const char *arg);

/* Prints "WHO: unknown option 'ARG'; did you mean '--x'? (see HELP)" to
 * stderr, the suggestion being the closest option of tab (none when no
 * option is close), and returns the exit code of a usage error. */
int vd_cli_unknown_option(const char *who, const char *arg, const vd_cli_opt *tab, const char *help);

/* The closest option of tab to arg (vd_cli_closest), or NULL. */
const char *vd_cli_opt_closest(const vd_cli_opt *tab, const char *arg);

/* The closest of names[0..n) to arg (edit distance, a long prefix counting
 * as close; arg itself excluded), or NULL when none is close enough. */
const char *vd_cli_closest(const char *arg, const char *const *names, size_t n);

/* Levenshtein distance of two short strings (over 64 bytes: 99). */
int vd_cli_edit_distance(const char *a, size_t na, const char *b, size_t nb);

/* Parses a non-negative decimal integer option value; returns -1 on error. */
long vd_cli_parse_long(const char *s);

/* The value v (may be NULL) of option opt of command who ("verdict exec"):
 * a non-negative decimal integer of at most max.  Returns 0 with *out set,
 * else prints "<who>: <opt>: expected a non-negative integer, got '<v>'"
 * and returns -1. */
int vd_cli_count_arg(const char *who, const char *opt, const char *v, long max, long *out);

#endif
