/*
 * verifier/manifest.c - reading the gate manifest (manifest.h,
 * docs/gate.md): one pass over the lines, one entry per [name] section,
 * then a check that each entry is complete.
 */
#include "manifest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"

void vd_manifest_free(vd_manifest *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n; i++) {
    vd_free(m->v[i].single);
    vd_free(m->v[i].parallel);
    for (size_t k = 0; k < m->v[i].n_sets; k++) vd_free(m->v[i].sets[k]);
    vd_free(m->v[i].sets);
  }
  vd_free(m->v);
  memset(m, 0, sizeof(*m));
}

static char *trim(char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* dir/value, or value when absolute. */
static char *resolve(const char *dir, const char *value) {
  if (value[0] == '/' || !dir[0]) return vd_strdup(value);
  size_t n = strlen(dir) + 1 + strlen(value) + 1;
  char *p = vd_malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, value);
  return p;
}

static int valid_name(const char *s) {
  if (!*s || strlen(s) >= VD_MANIFEST_MAX_NAME) return 0;
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr("._-+", *s)) return 0;
  return 1;
}

/* "equivalent", "not-equivalent [CLASS]", "inconclusive". */
static int parse_expect(char *v, vd_mf_entry *e) {
  char *sp = v + strcspn(v, " \t");
  char *rest = trim(sp);
  if (*sp) *sp = '\0';
  e->expect_dx = -1;
  if (!strcmp(v, "equivalent") && !*rest) e->expected = 0;
  else if (!strcmp(v, "inconclusive") && !*rest) e->expected = 3;
  else if (!strcmp(v, "not-equivalent")) {
    e->expected = 1;
    if (*rest) {
      for (int k = 1; k < VD_DX__COUNT; k++)
        if (!strcmp(rest, vd_diagnosis_names[k])) e->expect_dx = k;
      if (e->expect_dx < 0) return -1;
    }
  } else
    return -1;
  return 0;
}

#define BAD(...) VD_FAIL(d, VD_EINPUT, path, rec, key, __VA_ARGS__)

/* A "[name]" line (s): opens configuration `name`. */
static vd_rc parse_section(const char *path, const char *rec, int ln, char *s, vd_manifest *m, uint32_t *seen,
                           vd_diag *d) {
  const char *key = NULL;
  char *end = strchr(s, ']');
  if (!end || *trim(end + 1)) BAD("expected a section header '[name]'");
  *end = '\0';
  char *name = trim(s + 1);
  if (!valid_name(name))
    BAD("configuration name '%.100s': letters, digits and ._-+ only, 1 to %d characters", name,
        VD_MANIFEST_MAX_NAME - 1);
  for (size_t i = 0; i < m->n; i++)
    if (!strcmp(m->v[i].name, name)) BAD("configuration '%s' is named twice (first at line %d)", name, m->v[i].line);
  if (m->n >= VD_MANIFEST_MAX_ENTRIES) BAD("more than %d configurations", VD_MANIFEST_MAX_ENTRIES);
  if (VD_GROW(m->v, m->cap, m->n + 1)) return VD_OOM(d);
  vd_mf_entry *e = &m->v[m->n++];
  memset(e, 0, sizeof(*e));
  snprintf(e->name, sizeof(e->name), "%s", name);
  e->line = ln;
  e->expected = -1;
  e->expect_dx = -1;
  *seen = 0;
  return VD_OK;
}

/* The value v of key number ki of keys[] (parse_line) into entry e. */
static vd_rc parse_value(const char *path, const char *rec, const char *key, const char *dir, int ki, char *v,
                         vd_mf_entry *e, uint32_t seen, vd_diag *d) {
  switch (ki) {
  case 0: case 1: case 2: case 3: {
    int torch = ki >= 2;
    if ((seen & (torch ? 3u : 12u)) != 0)
      BAD("configuration '%s' mixes plan or pickle files (single, parallel) with PyTorch programs (torch-single, "
          "torch-parallel)", e->name);
    e->kind = torch ? VD_MF_TORCH : VD_MF_PLANS;
    char **slot = ki % 2 == 0 ? &e->single : &e->parallel;
    if (!(*slot = resolve(dir, v))) return VD_OOM(d);
    break;
  }
  case 4: {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 1 || n > 64) BAD("expected a rank count 1..64, got '%.40s'", v);
    e->nproc = (int)n;
    break;
  }
  case 6: {
    if (!strchr(v, '=') || *v == '=') BAD("expected KEY=VALUE (passed to both programs: torch2plan --set)");
    if (e->n_sets >= 64) BAD("more than 64 'set' lines in configuration '%s'", e->name);
    char **ns = vd_realloc_array(e->sets, e->n_sets + 1, sizeof(*ns));
    if (!ns) return VD_OOM(d);
    e->sets = ns;
    if (!(e->sets[e->n_sets] = vd_strdup(v))) return VD_OOM(d);
    e->n_sets++;
    break;
  }
  case 5:
    if (parse_expect(v, e))
      BAD("expected 'equivalent', 'inconclusive' or 'not-equivalent [CLASS]' with CLASS a diagnosis class "
          "(MISSING_REDUCTION, SCALE, ..., BATCH; docs/gate.md), got '%.80s'", v);
    break;
  }
  return VD_OK;
}

static vd_rc parse_line(const char *path, const char *dir, int ln, char *line, vd_manifest *m, uint32_t *seen,
                        vd_diag *d) {
  char rec[32];
  snprintf(rec, sizeof(rec), "line %d", ln);
  const char *key = NULL;
  char *s = trim(line);
  if (!*s || *s == '#' || *s == ';') return VD_OK;
  if (*s == '[') return parse_section(path, rec, ln, s, m, seen, d);
  char *eq = strchr(s, '=');
  if (!eq) BAD("expected 'key = value' or '[name]'");
  *eq = '\0';
  char *k = trim(s), *v = trim(eq + 1);
  char *hash = strstr(v, " #"); /* a trailing comment */
  if (hash) *hash = '\0', v = trim(v);
  key = k;
  if (!m->n) BAD("'%s' before the first [name] section", k);
  vd_mf_entry *e = &m->v[m->n - 1];
  static const char *const keys[] = {"single", "parallel", "torch-single", "torch-parallel", "nproc", "expect", "set"};
  int ki = -1;
  for (int i = 0; i < (int)(sizeof(keys) / sizeof(keys[0])); i++)
    if (!strcmp(k, keys[i])) ki = i;
  if (ki < 0) BAD("unknown key (known: single, parallel, torch-single, torch-parallel, nproc, set, expect)");
  if (ki != 6 && (*seen >> ki & 1)) BAD("given twice in configuration '%s'", e->name);
  *seen |= 1u << ki;
  if (!*v) BAD("empty value");
  return parse_value(path, rec, key, dir, ki, v, e, *seen, d);
}

vd_rc vd_manifest_read(const char *path, vd_manifest *m, vd_diag *d) {
  memset(m, 0, sizeof(*m));
  FILE *f = fopen(path, "r");
  if (!f) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot read the manifest");
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  else dir[0] = '\0';
  char line[VD_MANIFEST_MAX_LINE + 2];
  int ln = 0;
  uint32_t seen = 0;
  vd_rc rc = VD_OK;
  while (rc == VD_OK && fgets(line, sizeof(line), f)) {
    ln++;
    size_t n = strlen(line);
    if (n && line[n - 1] != '\n' && !feof(f)) {
      char rec[32];
      snprintf(rec, sizeof(rec), "line %d", ln);
      rc = VD_ERR(d, VD_EINPUT, path, rec, NULL, "line longer than %d bytes", VD_MANIFEST_MAX_LINE);
      break;
    }
    if (memchr(line, '\0', n)) {
      rc = VD_ERR(d, VD_EINPUT, path, NULL, NULL, "not a text file");
      break;
    }
    rc = parse_line(path, dir, ln, line, m, &seen, d);
  }
  if (rc == VD_OK && ferror(f)) rc = VD_ERR(d, VD_EIO, path, NULL, NULL, "reading the manifest failed");
  fclose(f);
  for (size_t i = 0; i < m->n && rc == VD_OK; i++) {
    vd_mf_entry *e = &m->v[i];
    char rec[160];
    snprintf(rec, sizeof(rec), "configuration '%s' (line %d)", e->name, e->line);
    const char *need = !e->single ? (e->kind == VD_MF_TORCH ? "torch-single" : "single")
                       : !e->parallel ? (e->kind == VD_MF_TORCH ? "torch-parallel" : "parallel")
                       : e->expected < 0 ? "expect"
                       : e->kind == VD_MF_TORCH && !e->nproc ? "nproc"
                                                             : NULL;
    if (need) rc = VD_ERR(d, VD_EINPUT, path, rec, need, "missing");
    else if (e->kind == VD_MF_PLANS && (e->nproc || e->n_sets))
      rc = VD_ERR(d, VD_EINPUT, path, rec, e->nproc ? "nproc" : "set",
                  "only for PyTorch programs (torch-single, torch-parallel)");
  }
  if (rc == VD_OK && !m->n) rc = VD_ERR(d, VD_EINPUT, path, NULL, NULL, "no configuration ([name] sections) in the manifest");
  if (rc != VD_OK) vd_manifest_free(m);
  return rc;
}
