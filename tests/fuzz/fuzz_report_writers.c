/*
 * tests/fuzz/fuzz_report_writers.c - libFuzzer target for the report
 * writers: names from the fuzzer, every format written, every output
 * checked for well-formedness in the process.
 *
 * Once (LLVMFuzzerInitialize): a small MLP pair (dp2 tp2) is generated and
 * verified twice, with a missing reduction (a failing stage with a
 * counterexample, bug 1) and with a removed all_reduce (structural DATAFLOW
 * entries, bug 2), on one thread.  Each input then picks a run (first
 * byte), is split at NUL bytes into names (any bytes: valid UTF-8 or not),
 * and those names replace the tensor names, node names and node source
 * locations of both plans, the two plan paths, structural details,
 * factors and inconclusive reasons; the run's other facts stay as
 * verified.  Written: the text report (open_memstream), --json, --junit,
 * --html (with Graphviz kept off PATH: a picture per input would make the
 * target slow; tests/e2e/18_names.sh runs dot on nasty names), the dot text of
 * every failing stage, and --dump-stages.  Checked, independently of
 * common/text.c:
 *   - every output is valid UTF-8 (a decoder of its own here);
 *   - the JSON parses (jansson, strict) and keeps the plan paths' valid
 *     UTF-8 exactly;
 *   - JUnit and HTML parse as XML 1.0 (libxml2, no recovery, no network);
 *   - the text report and the stage dump hold no control character but
 *     newline (C0, DEL, C1, U+2028/9, bidi controls, U+FFFE/F) and no
 *     line but the first reads as a verdict;
 *   - the dot text: every quoted string closes on its line, holds no raw
 *     control character and no '&' that is not "&amp;".
 * libxml2 is linked here only (DEB_PACKAGES has libxml2-dev).
 */
#include <jansson.h>
#include <libxml/parser.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../bugs/bugs.h"
#include "../../gen/gen.h"
#include "../../verifier/report.h"
#include "../../verifier/run.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_NAMES = 16 };

static struct {
  vd_run r;
  vd_run_opts o;
  size_t sp_pool, pp_pool; /* pool sizes as verified: names appended past them are dropped per input */
} runs[2];
static char dir[] = "/tmp/verdict-fuzz-rw-XXXXXX";
static char path_json[64], path_junit[64], path_html[64], path_stages[64];

static void die(const char *what, const vd_diag *d) {
  char line[1024] = "";
  if (d) vd_diag_format(d, line, sizeof(line));
  fprintf(stderr, "fuzz_report_writers: %s: %s\n", what, line);
  abort();
}

static void make_run(int k, int bug) {
  vd_gen_config c;
  vd_plan_t s, p, b;
  vd_bug_opts bo;
  vd_bug_result br;
  vd_diag d;
  vd_diag_clear(&d);
  vd_gen_config_default(&c);
  c.model = VD_GEN_MLP;
  c.dp = 2;
  c.tp = 2;
  if (vd_gen_build(&c, &s, &p, &d) != VD_OK) die("gen", &d);
  vd_bug_opts_default(&bo);
  if (vd_bug_apply(&p, bug, &bo, &b, &br, &d) != VD_OK) die("mutate", &d);
  static char sm[2][64], pm[2][64];
  snprintf(sm[k], sizeof(sm[k]), "%s/s%d.plan", dir, k);
  snprintf(pm[k], sizeof(pm[k]), "%s/p%d.plan", dir, k);
  if (vd_plan_write_file(&s, sm[k], &d) != VD_OK || vd_plan_write_file(&b, pm[k], &d) != VD_OK) die("write", &d);
  vd_plan_free(&s);
  vd_plan_free(&p);
  vd_plan_free(&b);
  vd_run_opts *o = &runs[k].o;
  memset(o, 0, sizeof(*o));
  o->sm = sm[k];
  o->pm = pm[k];
  o->threads = 1;
  o->quiet = 1;
  o->max_failures = 10;
  if (vd_run_verify(o, &runs[k].r, &d) != VD_OK) die("verify", &d);
  runs[k].sp_pool = runs[k].r.sp.n_pool;
  runs[k].pp_pool = runs[k].r.pp.n_pool;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  if (!mkdtemp(dir)) abort();
  setenv("PATH", "/nonexistent", 1); /* no Graphviz: the HTML says so where a picture would be */
  snprintf(path_json, sizeof(path_json), "%s/r.json", dir);
  snprintf(path_junit, sizeof(path_junit), "%s/r.xml", dir);
  snprintf(path_html, sizeof(path_html), "%s/r.html", dir);
  snprintf(path_stages, sizeof(path_stages), "%s/stages.txt", dir);
  make_run(0, 1);
  make_run(1, 2);
  return 0;
}

/* ---- checks (independent of common/text.c) ---------------------------- */

/* Next code point of valid UTF-8 at s[0..n) in *cp; its length, 0 if invalid. */
static size_t dec(const unsigned char *s, size_t n, uint32_t *cp) {
  if (s[0] < 0x80) return *cp = s[0], 1;
  size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : 0;
  if (!len || len > n) return 0;
  uint32_t c = s[0] & (0xff >> (len + 1));
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    c = c << 6 | (s[i] & 0x3f);
  }
  static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  return *cp = c, len;
}

static void check_utf8(const char *what, const char *s, size_t n) {
  uint32_t c;
  for (size_t i = 0; i < n;) {
    size_t k = dec((const unsigned char *)s + i, n - i, &c);
    if (!k) {
      fprintf(stderr, "%s: invalid UTF-8 at byte %zu\n", what, i);
      abort();
    }
    i += k;
  }
}

static int unsafe(uint32_t c) {
  return (c < 0x20 && c != '\n') || (c >= 0x7f && c <= 0x9f) || c == 0x2028 || c == 0x2029 || c == 0x200e ||
         c == 0x200f || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) || c == 0xfffe || c == 0xffff;
}

/* Plain text: no unsafe character; no line but the first starts like a verdict. */
static void check_plain(const char *what, const char *s, size_t n, int verdict_first) {
  check_utf8(what, s, n);
  uint32_t c;
  for (size_t i = 0; i < n;) {
    size_t k = dec((const unsigned char *)s + i, n - i, &c);
    if (unsafe(c)) {
      fprintf(stderr, "%s: raw U+%04X at byte %zu\n", what, (unsigned)c, i);
      abort();
    }
    i += k;
  }
  static const char *const words[] = {"EQUIVALENT", "NOT EQUIVALENT", "INCONCLUSIVE"};
  for (size_t i = 0; i < n; i++) {
    if (i && s[i - 1] != '\n') continue;
    if (i == 0 && verdict_first) continue;
    for (size_t w = 0; w < 3; w++)
      if (n - i >= strlen(words[w]) && !memcmp(s + i, words[w], strlen(words[w]))) {
        fprintf(stderr, "%s: a line at byte %zu reads as a verdict\n", what, i);
        abort();
      }
  }
}

static void check_xml(const char *what, const char *s, size_t n) {
  check_utf8(what, s, n);
  xmlDocPtr doc = xmlReadMemory(s, (int)n, "r.xml", "UTF-8", XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) {
    const xmlError *e = xmlGetLastError();
    fprintf(stderr, "%s: not well-formed XML: %s", what, e && e->message ? e->message : "?\n");
    abort();
  }
  xmlFreeDoc(doc);
}

/* The dot text: each "..." string closes on its line; inside, a backslash
 * escapes the next byte, no control byte appears raw, '&' only as "&amp;". */
static void check_dot(const char *s, size_t n) {
  check_utf8("dot", s, n);
  int in = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!in) {
      if (c == '"') in = 1;
      continue;
    }
    if (c == '\n' || c < 0x20 || c == 0x7f) {
      fprintf(stderr, "dot: raw control byte 0x%02x in a string at byte %zu\n", c, i);
      abort();
    }
    if (c == '\\') {
      if (i + 1 >= n || s[i + 1] == '\n') abort();
      i++;
    } else if (c == '&' && (n - i < 5 || memcmp(s + i, "&amp;", 5))) {
      fprintf(stderr, "dot: raw '&' at byte %zu\n", i);
      abort();
    } else if (c == '"') {
      in = 0;
    }
  }
  if (in) abort();
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) abort();
  char *buf = NULL;
  size_t cap = 0;
  *n = 0;
  for (;;) {
    if (*n + 65536 > cap) {
      cap = cap * 2 + 65536;
      buf = realloc(buf, cap + 1);
      if (!buf) abort();
    }
    size_t k = fread(buf + *n, 1, cap - *n, f);
    *n += k;
    if (k == 0) break;
  }
  fclose(f);
  buf[*n] = '\0';
  return buf;
}

static void check_json(const char *s, size_t n, const char *sm) {
  check_utf8("json", s, n);
  json_error_t err;
  json_t *j = json_loadb(s, n, 0, &err);
  if (!j) {
    fprintf(stderr, "json: %s (line %d)\n", err.text, err.line);
    abort();
  }
  /* A valid UTF-8 path is carried exactly. */
  const char *got = json_string_value(json_object_get(json_object_get(j, "inputs"), "single"));
  size_t ln = strlen(sm);
  uint32_t c;
  size_t i = 0;
  while (i < ln) {
    size_t k = dec((const unsigned char *)sm + i, ln - i, &c);
    if (!k) break;
    i += k;
  }
  if (!got || (i == ln && strcmp(got, sm))) abort();
  json_decref(j);
}

/* ---- one input ---------------------------------------------------------- */

static uint32_t add(vd_plan_t *p, const char *s) {
  uint32_t off = 0;
  if (vd_plan_str(p, s, &off) != VD_OK) abort();
  return off;
}

enum { SAVED_TEXT = 8 }; /* structural details an input renames */

/* What one input changed in a run: put back by restore after the writers. */
typedef struct {
  size_t pool[2]; /* the plans' pool sizes as verified */
  uint32_t *tensor_name[2], *node_name[2], *node_src[2];
  char detail[SAVED_TEXT][sizeof(((vd_run *)0)->issues[0].detail)];
  size_t n_det;
  char factor[sizeof(((vd_run *)0)->verdicts[0].factor)];
  size_t fstage; /* the first failing stage, whose factor is renamed (SIZE_MAX: none) */
} disguise_t;

/* Splits buf (n bytes, the last a NUL) at NUL bytes into at most MAX_NAMES
 * names; returns their count. */
static size_t split_names(const char *buf, size_t n, const char **names) {
  size_t nn = 0;
  for (size_t i = 0; i < n && nn < MAX_NAMES;) {
    names[nn++] = buf + i;
    i += strlen(buf + i) + 1;
  }
  return nn;
}

/* Renames the tensors and nodes (names and source locations) of both plans
 * of run k with the nn names (appended to the pools, dropped by restore). */
static void disguise_plans(int k, const char **names, size_t nn, disguise_t *sv) {
  vd_plan_t *plans[2] = {&runs[k].r.sp, &runs[k].r.pp};
  sv->pool[0] = runs[k].sp_pool;
  sv->pool[1] = runs[k].pp_pool;
  for (int q = 0; q < 2; q++) {
    vd_plan_t *p = plans[q];
    sv->tensor_name[q] = malloc((p->n_tensors + 1) * sizeof(uint32_t));
    sv->node_name[q] = malloc((p->n_nodes + 1) * 2 * sizeof(uint32_t));
    sv->node_src[q] = sv->node_name[q] + p->n_nodes + 1;
    if (!sv->tensor_name[q] || !sv->node_name[q]) abort();
    uint32_t off[MAX_NAMES];
    for (size_t j = 0; j < nn; j++) off[j] = add(p, names[j]);
    for (size_t t = 0; t < p->n_tensors; t++) {
      sv->tensor_name[q][t] = p->tensors[t].name;
      p->tensors[t].name = off[(t * 7 + (size_t)q) % nn];
    }
    for (size_t j = 0; j < p->n_nodes; j++) {
      sv->node_name[q][j] = p->nodes[j].name;
      sv->node_src[q][j] = p->nodes[j].src;
      p->nodes[j].name = off[(j * 5 + 1) % nn];
      p->nodes[j].src = off[(j * 3 + 2) % nn];
    }
  }
}

/* Renames the run's first structural details and its first failing stage's
 * factor with the names. */
static void disguise_run(vd_run *r, const char **names, size_t nn, disguise_t *sv) {
  sv->n_det = r->n_issues < SAVED_TEXT ? r->n_issues : SAVED_TEXT;
  for (size_t i = 0; i < sv->n_det; i++) {
    memcpy(sv->detail[i], r->issues[i].detail, sizeof(sv->detail[i]));
    snprintf(r->issues[i].detail, sizeof(r->issues[i].detail), "%s", names[(i + 2) % nn]);
  }
  sv->fstage = SIZE_MAX;
  for (size_t i = 0; i < r->set.n_stages && sv->fstage == SIZE_MAX; i++)
    if (r->verdicts[i].verdict == VD_SMT_NOT_EQUIVALENT) sv->fstage = i;
  if (sv->fstage != SIZE_MAX) {
    memcpy(sv->factor, r->verdicts[sv->fstage].factor, sizeof(sv->factor));
    snprintf(r->verdicts[sv->fstage].factor, sizeof(sv->factor), "%s", names[nn - 1]);
  }
}

/* Puts back what disguise_plans and disguise_run changed in run k. */
static void restore(int k, disguise_t *sv) {
  vd_run *r = &runs[k].r;
  vd_plan_t *plans[2] = {&r->sp, &r->pp};
  if (sv->fstage != SIZE_MAX) memcpy(r->verdicts[sv->fstage].factor, sv->factor, sizeof(sv->factor));
  for (size_t i = 0; i < sv->n_det; i++) memcpy(r->issues[i].detail, sv->detail[i], sizeof(sv->detail[i]));
  for (int q = 0; q < 2; q++) {
    vd_plan_t *p = plans[q];
    for (size_t t = 0; t < p->n_tensors; t++) p->tensors[t].name = sv->tensor_name[q][t];
    for (size_t j = 0; j < p->n_nodes; j++) {
      p->nodes[j].name = sv->node_name[q][j];
      p->nodes[j].src = sv->node_src[q][j];
    }
    p->n_pool = sv->pool[q];
    free(sv->tensor_name[q]);
    free(sv->node_name[q]);
  }
}

/* Writes every format of r and checks each output. */
static void write_every_format(const vd_run *r, const vd_run_opts *o) {
  vd_diag d;
  vd_diag_clear(&d);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) abort();
  vd_report_text(r, o, m);
  fclose(m);
  check_plain("text", text, len, 1);
  free(text);
  size_t n;
  char *out;
  if (vd_report_json(r, o, path_json, &d) != VD_OK) die("json", &d);
  out = slurp(path_json, &n);
  check_json(out, n, o->sm);
  free(out);
  if (vd_report_junit(r, o, path_junit, &d) != VD_OK) die("junit", &d);
  out = slurp(path_junit, &n);
  check_xml("junit", out, n);
  free(out);
  if (vd_report_html(r, o, path_html, &d) != VD_OK) die("html", &d);
  out = slurp(path_html, &n);
  check_xml("html", out, n);
  free(out);
  if (vd_report_stages(r, path_stages, &d) != VD_OK) die("stages", &d);
  out = slurp(path_stages, &n);
  check_plain("stages", out, n, 0);
  free(out);
  for (size_t i = 0; i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT && i != 0) continue;
    m = open_memstream(&text, &len);
    if (!m) abort();
    vd_report_dot(r, i, 0, m);
    fclose(m);
    check_dot(text, len);
    free(text);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  int k = data[0] & 1;
  vd_run *r = &runs[k].r;
  /* Names: the rest split at NUL bytes (at most MAX_NAMES). */
  char *buf = malloc(size);
  if (!buf) abort();
  memcpy(buf, data + 1, size - 1);
  buf[size - 1] = '\0';
  const char *names[MAX_NAMES];
  size_t nn = split_names(buf, size - 1, names);
  /* Rename: tensors and nodes of both plans (names appended to the pools,
   * dropped again below), paths, details, factors, reasons. */
  disguise_t sv;
  disguise_plans(k, names, nn, &sv);
  vd_run_opts o = runs[k].o;
  o.sm = names[0];
  o.pm = names[nn > 1 ? 1 : 0];
  o.max_failures = 1 + (data[0] >> 1 & 3);
  disguise_run(r, names, nn, &sv);
  write_every_format(r, &o);
  restore(k, &sv);
  free(buf);
  return 0;
}
