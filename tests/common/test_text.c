/*
 * tests/common/test_text.c - common/text: strict UTF-8 decoding, cuts on
 * character boundaries, each escaping mode (plain, XML, dot, UTF-8 repair),
 * the bounded escaper's ellipsis, vd_text_fmt's cut, and the diag line
 * (common/diag.c) escaping what it quotes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "../../common/diag.h"
#include "../../common/text.h"

/* Whether s is valid UTF-8 (the module's own decoder is what is tested
 * elsewhere; this one is written out differently on purpose). */
static int valid_utf8(const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  while (*u) {
    int k = *u < 0x80 ? 0 : (*u >> 5) == 6 ? 1 : (*u >> 4) == 14 ? 2 : (*u >> 3) == 30 ? 3 : -1;
    if (k < 0) return 0;
    for (int j = 1; j <= k; j++)
      if ((u[j] & 0xc0) != 0x80) return 0;
    u += k + 1;
  }
  return 1;
}

static void test_utf8_strict(void **state) {
  (void)state;
  uint32_t cp;
  assert_int_equal(vd_text_utf8_char("A", 1, &cp), 1);
  assert_int_equal(cp, 'A');
  assert_int_equal(vd_text_utf8_char("\xc3\xa9", 2, &cp), 2);
  assert_int_equal(cp, 0xe9);
  assert_int_equal(vd_text_utf8_char("\xe2\x82\xac", 3, &cp), 3);
  assert_int_equal(cp, 0x20ac);
  assert_int_equal(vd_text_utf8_char("\xf0\x9d\x84\x9e", 4, &cp), 4);
  assert_int_equal(cp, 0x1d11e);
  assert_int_equal(vd_text_utf8_char("\xef\xbf\xbf", 3, &cp), 3); /* U+FFFF is valid UTF-8 */
  assert_int_equal(vd_text_utf8_char("\xc0\xaf", 2, &cp), 0);     /* overlong */
  assert_int_equal(vd_text_utf8_char("\xed\xa0\x80", 3, &cp), 0); /* surrogate */
  assert_int_equal(vd_text_utf8_char("\xf4\x90\x80\x80", 4, &cp), 0); /* above U+10FFFF */
  assert_int_equal(vd_text_utf8_char("\xe2\x82", 2, &cp), 0);     /* truncated */
  assert_int_equal(vd_text_utf8_char("\x80", 1, &cp), 0);         /* lone continuation */
  assert_int_equal(vd_text_utf8_prefix("ab\xe2\x82\xac\xff", 6), 5);
}

static void test_cut_on_boundary(void **state) {
  (void)state;
  const char *s = "a\xe2\x82\xac" "b"; /* a, euro, b */
  assert_int_equal(vd_text_cut(s, 5, 1), 1);
  assert_int_equal(vd_text_cut(s, 5, 2), 1); /* inside the euro sign: back to its start */
  assert_int_equal(vd_text_cut(s, 5, 3), 1);
  assert_int_equal(vd_text_cut(s, 5, 4), 4);
  assert_int_equal(vd_text_cut(s, 5, 99), 5);
}

/* The escaping cases: in MODE, IN is escaped as WANT. */
static const struct {
  vd_text_mode mode;
  const char *in;
  const char *want;
} esc_cases[] = {
    {VD_TEXT_PLAIN, "layers.0.w\xc3\xa9", "layers.0.w\xc3\xa9"},
    {VD_TEXT_PLAIN, "\x1b[31m", "\\x1B[31m"},
    {VD_TEXT_PLAIN, "a\nEQUIVALENT\r\t", "a\\x0AEQUIVALENT\\x0D\\x09"},
    {VD_TEXT_PLAIN, "\x7f\xc2\x85", "\\x7F\\u0085"},
    {VD_TEXT_PLAIN, "\xe2\x80\xa8\xe2\x80\xae\xef\xbf\xbf\xef\xbf\xbe", "\\u2028\\u202E\\uFFFF\\uFFFE"},
    {VD_TEXT_PLAIN, "x\xff\xe2\x82", "x\\xFF\\xE2\\x82"},
    {VD_TEXT_PLAIN, "C:\\dir", "C:\\dir"}, /* backslashes kept */
    {VD_TEXT_XML, "<a & \"b\">]]>", "&lt;a &amp; &quot;b&quot;&gt;]]&gt;"},
    {VD_TEXT_XML, "l1\n\tl2\r\x01", "l1\n\tl2\\x0D\\x01"},
    {VD_TEXT_XML, "\xef\xbf\xbf\xff", "\\uFFFF\\xFF"},
    {VD_TEXT_DOT, "a\"b\\N&c\n\x1b", "a\\\"b\\\\N&amp;c\\\\x0A\\\\x1B"},
    {VD_TEXT_UTF8, "\x1b\xff\xc3\xa9", "\x1b\xef\xbf\xbd\xc3\xa9"},
};

/* Checks the cases of the plain mode (PLAIN set) or of the others. */
static void expect_escapes(int plain) {
  char b[256];
  for (size_t i = 0; i < sizeof(esc_cases) / sizeof(esc_cases[0]); i++)
    if ((esc_cases[i].mode == VD_TEXT_PLAIN) == plain)
      assert_string_equal(vd_text_esc(b, sizeof(b), esc_cases[i].in, esc_cases[i].mode), esc_cases[i].want);
}

static void test_plain(void **state) {
  (void)state;
  expect_escapes(1);
  /* Idempotent: escaping twice changes nothing more. */
  char b[256], c[256];
  vd_text_esc(b, sizeof(b), "\x1b\n\xef\xbf\xbf\xff" "ok", VD_TEXT_PLAIN);
  assert_string_equal(vd_text_esc(c, sizeof(c), b, VD_TEXT_PLAIN), b);
}

static void test_xml_dot_utf8(void **state) {
  (void)state;
  expect_escapes(0);
}

static void test_bounded_ellipsis(void **state) {
  (void)state;
  char b[10];
  /* 8 e-acutes (16 bytes) into 10 bytes: whole characters, then "...". */
  vd_text_esc(b, sizeof(b), "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", VD_TEXT_PLAIN);
  assert_string_equal(b, "\xc3\xa9\xc3\xa9\xc3\xa9...");
  /* An escape is never cut in half. */
  vd_text_esc(b, sizeof(b), "ab\x1b\x1b\x1b\x1b", VD_TEXT_PLAIN);
  assert_string_equal(b, "ab\\x1B...");
  /* What fits is not cut. */
  vd_text_esc(b, sizeof(b), "abcdefghi", VD_TEXT_PLAIN);
  assert_string_equal(b, "abcdefghi");
  char one[1];
  vd_text_esc(one, sizeof(one), "abc", VD_TEXT_PLAIN);
  assert_string_equal(one, "");
}

static void test_fmt_cut(void **state) {
  (void)state;
  char b[9];
  vd_text_fmt(b, sizeof(b), "%s", "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"); /* 9 bytes into 9 */
  assert_true(valid_utf8(b));
  assert_string_equal(b, "\xe2\x82\xac...");
  vd_text_fmt(b, sizeof(b), "%d", 42);
  assert_string_equal(b, "42");
}

static void test_diag_line_escaped(void **state) {
  (void)state;
  vd_diag d;
  vd_diag_clear(&d);
  char rec[300];
  memset(rec, 0, sizeof(rec));
  /* A record longer than the diag keeps, ending in multi-byte characters. */
  for (size_t i = 0; i + 3 < sizeof(rec) - 1; i += 3) memcpy(rec + i, "\xe2\x82\xac", 3);
  vd_diag_set(&d, VD_EINPUT, __FILE__, __LINE__, "a\nb.plan", rec, "f\x1b", "expected X, got '%s'", "\nEQUIVALENT");
  assert_true(valid_utf8(d.record));
  char line[2048];
  vd_diag_format(&d, line, sizeof(line));
  assert_true(valid_utf8(line));
  assert_null(strchr(line, '\n'));
  assert_null(strchr(line, '\x1b'));
  assert_non_null(strstr(line, "a\\x0Ab.plan: "));
  assert_non_null(strstr(line, "f\\x1B: expected X, got '\\x0AEQUIVALENT'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_utf8_strict),      cmocka_unit_test(test_cut_on_boundary), cmocka_unit_test(test_plain),
      cmocka_unit_test(test_xml_dot_utf8),     cmocka_unit_test(test_bounded_ellipsis), cmocka_unit_test(test_fmt_cut),
      cmocka_unit_test(test_diag_line_escaped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
