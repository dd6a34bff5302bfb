/*
 * common/text.h - strings from the input made safe for every output: UTF-8
 * decoding, cutting at a byte budget on a character boundary, and one
 * escaper with a mode per output syntax.
 *
 * Names (tensors, nodes, operators, sources, attribute strings, file
 * paths) come from files and command lines: any valid UTF-8 the plan
 * reader accepts (plans/io.c refuses invalid UTF-8 and NUL bytes), and any
 * bytes for paths.  Each writer passes every such string through
 * vd_text_esc (or vd_text_escape_char when streaming) with its mode, so
 * that:
 *   - every output is valid UTF-8 (a byte that is not part of a valid,
 *     shortest-form, non-surrogate UTF-8 sequence is shown as \xNN, or
 *     replaced by U+FFFD in VD_TEXT_UTF8);
 *   - VD_TEXT_PLAIN (terminals, the text report, plan dump, error lines)
 *     never holds a control character: C0 (newline and tab included), DEL
 *     and C1 are shown as \xNN (\u0085 for C1), and so are the characters
 *     that end a line or reorder text on a terminal (U+2028, U+2029, the
 *     bidirectional controls U+200E/F, U+202A..E, U+2066..9) and the
 *     noncharacters U+FFFE/U+FFFF: a name can never start a line;
 *   - VD_TEXT_XML (XML 1.0 text and double-quoted attribute values) holds
 *     only characters XML 1.0 allows, with & < > " as entities; tab and
 *     newline stay (blocks of report text are multi-line), everything
 *     VD_TEXT_PLAIN escapes otherwise is shown the same visible way;
 *   - VD_TEXT_DOT (a Graphviz double-quoted string) has " and \ escaped
 *     and & written as &amp; (dot passes entities through to its SVG), and
 *     the PLAIN escapes written with a doubled backslash so dot shows them;
 *   - VD_TEXT_UTF8 only repairs invalid UTF-8 (U+FFFD): for a JSON library
 *     that escapes control characters itself.
 * A backslash in the input is kept as is in PLAIN and XML (paths and
 * sources are shown unchanged), so "\x1b" in an output may also be those
 * four characters in the name; the JSON report carries the exact name.
 *
 * Layer: common/ (includes nothing else of verdict).
 */
#ifndef VD_TEXT_H
#define VD_TEXT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { VD_TEXT_PLAIN, VD_TEXT_XML, VD_TEXT_DOT, VD_TEXT_UTF8 } vd_text_mode;

/* The marker that ends a string cut to its budget. */
#define VD_TEXT_ELLIPSIS "..."

/* Longest output of vd_text_escape_char (a \uXXXX escape in DOT mode). */
enum { VD_TEXT_CHAR_MAX = 16 };

/* Length (1..4) of the valid UTF-8 character at s[0..n), its code point in
 * *cp (may be NULL); 0 when s does not start with one (strict: no overlong
 * forms, no surrogates, nothing above U+10FFFF, no truncated sequence). */
size_t vd_text_utf8_char(const char *s, size_t n, uint32_t *cp);

/* Length of the longest valid UTF-8 prefix of s[0..n) (n when valid). */
size_t vd_text_utf8_prefix(const char *s, size_t n);

/* The largest k <= min(n, budget) such that s[0..k) does not end inside a
 * UTF-8 sequence (it stops before a continuation byte). */
size_t vd_text_cut(const char *s, size_t n, size_t budget);

/* Escapes the character (or invalid byte) at s[0..n), n >= 1, for mode into
 * out (at most VD_TEXT_CHAR_MAX bytes, not NUL-terminated); returns the
 * output length and sets *used to the input bytes consumed (>= 1). */
size_t vd_text_escape_char(const char *s, size_t n, vd_text_mode mode, char *out, size_t *used);

/* Writes the NUL-terminated s (NULL counts as "") escaped for mode into
 * dst, cap >= 1 bytes, always NUL-terminated.  When the escaped text does
 * not fit it is cut between two escaped characters and ends with
 * VD_TEXT_ELLIPSIS.  Returns dst. */
char *vd_text_esc(char *dst, size_t cap, const char *s, vd_text_mode mode);

/* An escaped name for a printf argument, in a buffer local to the enclosing
 * block (a compound literal): fprintf(f, "'%s'", VD_SHOW(name)).  Names
 * longer than VD_TEXT_SHOW bytes once escaped are cut with the ellipsis. */
enum { VD_TEXT_SHOW = 640 };
#define VD_SHOW(s) vd_text_esc((char[VD_TEXT_SHOW]){0}, VD_TEXT_SHOW, (s), VD_TEXT_PLAIN)

/* snprintf that never leaves a partial UTF-8 character at the end: when
 * the text does not fit in n bytes it is cut on a character boundary and
 * ends with VD_TEXT_ELLIPSIS.  Returns buf. */
char *vd_text_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Cuts the NUL-terminated buf (a buffer of n bytes that vsnprintf or
 * strncpy may have filled to the brim) back to a character boundary,
 * marking the cut with VD_TEXT_ELLIPSIS when truncated is set. */
void vd_text_fix_cut(char *buf, size_t n, int truncated);

#endif
