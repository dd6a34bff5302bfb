/*
 * noise/dump.c - reads a dump of a real run's values (docs/noise.md, "Dump
 * format"; written by tools/torchcap/dump.py).
 *
 * The whole file is read and parsed once: records go to one array sorted by
 * (id, replica, moment), values to one array of doubles.  Memory is bounded
 * by the file size (every value takes at least two bytes of text).  Any
 * malformed line is bad input: one message naming the file, the line and the
 * field, never a partial dump.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/infile.h"
#include "../common/mem.h"
#include "noise.h"

typedef struct {
  int64_t id;
  int32_t replica;
  int32_t last;
  size_t off;
  int64_t n;
  size_t line;
} rec_t;

struct vd_noise_dump {
  char kind[16];
  rec_t *recs;
  size_t n_recs, cap_recs;
  double *vals;
  size_t n_vals, cap_vals;
};

static int cmp_rec(const void *a, const void *b) {
  const rec_t *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  if (x->replica != y->replica) return x->replica < y->replica ? -1 : 1;
  return (x->last > y->last) - (x->last < y->last);
}

void vd_noise_dump_free(vd_noise_dump *dump) {
  if (!dump) return;
  vd_free(dump->recs);
  vd_free(dump->vals);
  vd_free(dump);
}

const char *vd_noise_dump_kind(const vd_noise_dump *dump) { return dump->kind; }

/* Reads the whole file (a regular file; at most 4 GiB). */
static vd_rc slurp(const char *path, char **buf, size_t *len, vd_diag *d) {
  FILE *f = fopen(path, "rb");
  if (!f) VD_FAIL(d, VD_EINPUT, path, NULL, NULL, "cannot open: %s", strerror(errno));
  vd_infile_rc rc = vd_infile_read_all(f, (size_t)1 << 32, buf, len);
  fclose(f);
  if (rc == VD_INFILE_NOMEM) return VD_OOM(d);
  if (rc == VD_INFILE_TOO_BIG) VD_FAIL(d, VD_EINPUT, path, NULL, NULL, "larger than 4 GiB");
  if (rc != VD_INFILE_OK) VD_FAIL(d, VD_EINPUT, path, NULL, NULL, "read error");
  return VD_OK;
}

/* Next whitespace-separated token of the line [*p, end); NULL at the end. */
static char *token(char **p, char *end) {
  char *s = *p;
  while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
  if (s >= end) return NULL;
  char *t = s;
  while (s < end && *s != ' ' && *s != '\t' && *s != '\r') s++;
  if (s < end) *s++ = '\0';
  *p = s;
  return t;
}

/* Line 1: 'verdict-dump 1 single|parallel' (t0 its first token, q the rest of the line). */
static vd_rc parse_header(vd_noise_dump *dp, const char *path, const char *rec, char *t0, char *q, char *end,
                          vd_diag *d) {
  char *t1 = token(&q, end), *t2 = token(&q, end);
  if (!t0 || strcmp(t0, "verdict-dump") != 0 || !t1 || strcmp(t1, "1") != 0 || !t2 ||
      (strcmp(t2, "single") != 0 && strcmp(t2, "parallel") != 0) || token(&q, end))
    VD_FAIL(d, VD_EINPUT, path, rec, "header",
                   "expected 'verdict-dump 1 single|parallel' (docs/noise.md, dump format)");
  snprintf(dp->kind, sizeof(dp->kind), "%s", t2);
  return VD_OK;
}

/* Room for one more record of n values. */
static vd_rc reserve_record(vd_noise_dump *dp, long long n, vd_diag *d) {
  if (dp->n_recs == dp->cap_recs) {
    size_t nc = dp->cap_recs ? dp->cap_recs * 2 : 256;
    rec_t *nr = vd_realloc_array(dp->recs, nc, sizeof(*nr));
    if (!nr) return VD_OOM(d);
    dp->recs = nr;
    dp->cap_recs = nc;
  }
  if (dp->n_vals + (size_t)n > dp->cap_vals) {
    size_t nc = dp->cap_vals ? dp->cap_vals : 4096;
    while (nc < dp->n_vals + (size_t)n) nc *= 2;
    double *nv = vd_realloc_array(dp->vals, nc, sizeof(*nv));
    if (!nv) return VD_OOM(d);
    dp->vals = nv;
    dp->cap_vals = nc;
  }
  return VD_OK;
}

/* A 'v' record, 'v ID REPLICA first|last N VALUES...' (q: after the 'v'), of line `line` of a
 * file of len bytes (N cannot exceed it). */
static vd_rc parse_record(vd_noise_dump *dp, const char *path, const char *rec, char *q, char *end, size_t line,
                          size_t len, vd_diag *d) {
  char *ti = token(&q, end), *tr = token(&q, end), *tm = token(&q, end), *tn = token(&q, end);
  char *e;
  if (!ti) VD_FAIL(d, VD_EINPUT, path, rec, "id", "missing");
  errno = 0;
  long long id = strtoll(ti, &e, 10);
  if (*e || errno) VD_FAIL(d, VD_EINPUT, path, rec, "id", "expected an integer, got '%.32s'", ti);
  if (!tr) VD_FAIL(d, VD_EINPUT, path, rec, "replica", "missing");
  long long rep = strtoll(tr, &e, 10);
  if (*e || errno || rep < 0 || rep > 0x7fffffff)
    VD_FAIL(d, VD_EINPUT, path, rec, "replica", "expected a replica >= 0, got '%.32s'", tr);
  if (!tm || (strcmp(tm, "first") != 0 && strcmp(tm, "last") != 0))
    VD_FAIL(d, VD_EINPUT, path, rec, "moment", "expected 'first' or 'last', got '%.32s'", tm ? tm : "");
  if (!tn) VD_FAIL(d, VD_EINPUT, path, rec, "n", "missing");
  long long n = strtoll(tn, &e, 10);
  if (*e || errno || n < 0 || (size_t)n > len)
    VD_FAIL(d, VD_EINPUT, path, rec, "n", "expected an element count, got '%.32s'", tn);
  VD_CHECK(reserve_record(dp, n, d));
  rec_t *r = &dp->recs[dp->n_recs];
  r->id = id;
  r->replica = (int32_t)rep;
  r->last = strcmp(tm, "last") == 0;
  r->off = dp->n_vals;
  r->n = n;
  r->line = line;
  for (long long i = 0; i < n; i++) {
    char *tv = token(&q, end);
    if (!tv)
      VD_FAIL(d, VD_EINPUT, path, rec, "values", "expected %lld values, got %lld", n, i);
    errno = 0;
    double v = strtod(tv, &e);
    if (*e) VD_FAIL(d, VD_EINPUT, path, rec, "values", "value %lld: not a number: '%.32s'", i, tv);
    dp->vals[dp->n_vals++] = v;
  }
  if (token(&q, end)) VD_FAIL(d, VD_EINPUT, path, rec, "values", "more than the %lld values announced", n);
  dp->n_recs++;
  return VD_OK;
}

/* The records sorted; a tensor's value written twice is an error at the later line. */
static vd_rc sort_records(vd_noise_dump *dp, const char *path, vd_diag *d) {
  char rec[48];
  qsort(dp->recs, dp->n_recs, sizeof(*dp->recs), cmp_rec);
  for (size_t i = 1; i < dp->n_recs; i++)
    if (cmp_rec(&dp->recs[i - 1], &dp->recs[i]) == 0) {
      snprintf(rec, sizeof(rec), "line %zu", dp->recs[i].line > dp->recs[i - 1].line ? dp->recs[i].line
                                                                                     : dp->recs[i - 1].line);
      VD_FAIL(d, VD_EINPUT, path, rec, "id", "tensor %lld replica %d %s is written twice",
                     (long long)dp->recs[i].id, dp->recs[i].replica, dp->recs[i].last ? "last" : "first");
    }
  return VD_OK;
}

static vd_rc parse(vd_noise_dump *dp, const char *path, char *buf, size_t len, vd_diag *d) {
  char *p = buf, *stop = buf + len;
  size_t line = 0;
  char rec[48];
  while (p < stop) {
    char *end = memchr(p, '\n', (size_t)(stop - p));
    if (!end) end = stop;
    *end = '\0';
    line++;
    snprintf(rec, sizeof(rec), "line %zu", line);
    char *q = p;
    p = end + 1;
    char *t0 = token(&q, end);
    if (line == 1) {
      VD_CHECK(parse_header(dp, path, rec, t0, q, end, d));
      continue;
    }
    if (!t0 || t0[0] == '#') continue;
    if (strcmp(t0, "v") != 0)
      VD_FAIL(d, VD_EINPUT, path, rec, "record", "expected a 'v' record, got '%.32s'", t0);
    VD_CHECK(parse_record(dp, path, rec, q, end, line, len, d));
  }
  if (!dp->kind[0]) VD_FAIL(d, VD_EINPUT, path, "line 1", "header", "empty file (expected 'verdict-dump 1 ...')");
  return sort_records(dp, path, d);
}

vd_rc vd_noise_dump_read(const char *path, vd_noise_dump **out, vd_diag *d) {
  *out = NULL;
  char *buf = NULL;
  size_t len = 0;
  VD_CHECK(slurp(path, &buf, &len, d));
  vd_noise_dump *dp = vd_calloc(1, sizeof(*dp));
  if (!dp) {
    vd_free(buf);
    return VD_OOM(d);
  }
  vd_rc rc = parse(dp, path, buf, len, d);
  vd_free(buf);
  if (rc != VD_OK) {
    vd_noise_dump_free(dp);
    return rc;
  }
  *out = dp;
  return VD_OK;
}

const double *vd_noise_dump_get(const vd_noise_dump *dump, int64_t id, int32_t replica, int last, int64_t *n) {
  rec_t key = {.id = id, .replica = replica, .last = last};
  const rec_t *r = bsearch(&key, dump->recs, dump->n_recs, sizeof(*dump->recs), cmp_rec);
  if (!r) return NULL;
  *n = r->n;
  return dump->vals + r->off;
}
