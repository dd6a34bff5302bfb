/*
 * common/text.c - UTF-8 decoding, cutting on character boundaries, and the
 * per-output escaper (text.h says what each mode guarantees).
 *
 * One table of what is unsafe (unsafe_cp) serves every mode, so the text
 * report, the XML reports and the dot pictures cannot disagree about which
 * characters a name may carry raw.  No allocation: callers give buffers.
 */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

size_t vd_text_utf8_char(const char *s, size_t n, uint32_t *cp) {
  const uint8_t *u = (const uint8_t *)s;
  if (!n) return 0;
  uint8_t b = u[0];
  size_t k;
  uint32_t c, min;
  if (b < 0x80) {
    if (cp) *cp = b;
    return 1;
  } else if ((b & 0xe0) == 0xc0) k = 1, c = b & 0x1f, min = 0x80;
  else if ((b & 0xf0) == 0xe0) k = 2, c = b & 0x0f, min = 0x800;
  else if ((b & 0xf8) == 0xf0) k = 3, c = b & 0x07, min = 0x10000;
  else return 0;
  if (n <= k) return 0;
  for (size_t j = 1; j <= k; j++) {
    if ((u[j] & 0xc0) != 0x80) return 0;
    c = (c << 6) | (u[j] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  if (cp) *cp = c;
  return k + 1;
}

size_t vd_text_utf8_prefix(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t k = vd_text_utf8_char(s + i, n - i, NULL);
    if (!k) return i;
    i += k;
  }
  return n;
}

size_t vd_text_cut(const char *s, size_t n, size_t budget) {
  size_t k = n < budget ? n : budget;
  if (k == n) return n;
  /* s[k] starts the part cut off: step back while it is a continuation
   * byte (at most 3 steps in valid UTF-8). */
  for (int back = 0; k > 0 && back < 4 && ((uint8_t)s[k] & 0xc0) == 0x80; back++) k--;
  return k;
}

/* Whether code point c is shown escaped in PLAIN mode: C0, DEL, C1, line and
 * paragraph separators, bidirectional controls, the BMP noncharacters. */
static int unsafe_cp(uint32_t c) {
  return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 || c == 0x2029 || c == 0x200e || c == 0x200f ||
         (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0xfffe || c == 0xffff;
}

size_t vd_text_escape_char(const char *s, size_t n, vd_text_mode mode, char *out, size_t *used) {
  uint32_t c = 0;
  size_t k = vd_text_utf8_char(s, n, &c);
  const char *bs = mode == VD_TEXT_DOT ? "\\\\" : "\\";
  if (!k) {
    *used = 1;
    if (mode == VD_TEXT_UTF8) {
      memcpy(out, "\xef\xbf\xbd", 3); /* U+FFFD */
      return 3;
    }
    return (size_t)snprintf(out, VD_TEXT_CHAR_MAX, "%sx%02X", bs, (unsigned)(uint8_t)s[0]);
  }
  *used = k;
  if (mode == VD_TEXT_UTF8) {
    memcpy(out, s, k);
    return k;
  }
  if (unsafe_cp(c) && !(mode == VD_TEXT_XML && (c == '\n' || c == '\t'))) {
    if (c < 0x80) return (size_t)snprintf(out, VD_TEXT_CHAR_MAX, "%sx%02X", bs, (unsigned)c);
    return (size_t)snprintf(out, VD_TEXT_CHAR_MAX, "%su%04X", bs, (unsigned)c);
  }
  const char *rep = NULL;
  if (mode == VD_TEXT_XML) {
    switch (c) {
    case '<': rep = "&lt;"; break;
    case '>': rep = "&gt;"; break;
    case '&': rep = "&amp;"; break;
    case '"': rep = "&quot;"; break;
    default: break;
    }
  } else if (mode == VD_TEXT_DOT) {
    switch (c) {
    case '"': rep = "\\\""; break;
    case '\\': rep = "\\\\"; break;
    case '&': rep = "&amp;"; break;
    default: break;
    }
  }
  if (rep) {
    size_t m = strlen(rep);
    memcpy(out, rep, m);
    return m;
  }
  memcpy(out, s, k);
  return k;
}

static char *vd_text_escape(char *dst, size_t cap, const char *s, size_t n, vd_text_mode mode) {
  const size_t el = sizeof(VD_TEXT_ELLIPSIS) - 1;
  size_t at = 0, safe = 0, i = 0;
  char piece[VD_TEXT_CHAR_MAX];
  if (!cap) return dst;
  if (!s) s = "";
  while (i < n && s[i]) {
    size_t used, m = vd_text_escape_char(s + i, n - i, mode, piece, &used);
    if (at + m > cap - 1) {
      /* Does not fit: back to the last boundary that leaves room for the
       * ellipsis. */
      at = safe;
      if (at + el <= cap - 1) {
        memcpy(dst + at, VD_TEXT_ELLIPSIS, el);
        at += el;
      }
      break;
    }
    memcpy(dst + at, piece, m);
    at += m;
    if (at + el <= cap - 1) safe = at;
    i += used;
  }
  dst[at] = '\0';
  return dst;
}

char *vd_text_esc(char *dst, size_t cap, const char *s, vd_text_mode mode) {
  return vd_text_escape(dst, cap, s ? s : "", s ? strlen(s) : 0, mode);
}

void vd_text_fix_cut(char *buf, size_t n, int truncated) {
  const size_t el = sizeof(VD_TEXT_ELLIPSIS) - 1;
  if (!n) return;
  size_t len = strnlen(buf, n - 1);
  if (truncated && n - 1 >= el) {
    size_t k = vd_text_cut(buf, len, n - 1 - el);
    memcpy(buf + k, VD_TEXT_ELLIPSIS, el + 1);
  } else {
    buf[vd_text_cut(buf, len, n - 1)] = '\0';
  }
}

char *vd_text_fmt(char *buf, size_t n, const char *fmt, ...) {
  if (!n) return buf;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  if (w < 0) buf[0] = '\0';
  else if ((size_t)w >= n) vd_text_fix_cut(buf, n, 1);
  return buf;
}
