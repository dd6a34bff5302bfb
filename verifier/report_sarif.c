/*
 * verifier/report_sarif.c - configurations as SARIF 2.1.0 (--sarif FILE),
 * the static-analysis interchange format that code-scanning services read.
 *
 * One run (tool.driver "verdict": version, one rule per diagnosis class
 * with its description and the hint of docs/reading-a-report.md as help,
 * plus INCONCLUSIVE, BAD_INPUT and UNEXPECTED_OUTCOME), one invocation per
 * configuration (exit code; a configuration that failed before a run has
 * executionSuccessful false and a notification with its error), and:
 *   - one result per finding: ruleId = diagnosis class, level "error"
 *     ("note" when the configuration is expected not to be equivalent),
 *     the message in plain words (title, footprint, hint), located at the
 *     user's source file and line when the plan's node says it
 *     (report_ci.c), else at the parallel plan file, always with a logical
 *     location (the operator or tensor); partialFingerprints from the
 *     configuration and the finding's stable name, so a service tracks the
 *     same finding across runs;
 *   - one result per configuration that did not end as expected for
 *     another reason: INCONCLUSIVE (warning), BAD_INPUT (error; also every
 *     configuration without a run that is not inconclusive),
 *     UNEXPECTED_OUTCOME (error: equivalent where a failure was expected).
 * Written with jansson (keys in insertion order, so the same run gives the
 * same bytes).  Strings that are not valid UTF-8 (names from a plan) have
 * their stray bytes replaced by '?'.  Validated against the OASIS schema in
 * tests/e2e/50_ci_outputs.sh; docs/report-format.md.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../common/digest.h"
#include "../common/mem.h"
#include "../common/outfile.h"
#include "cli.h"
#include "report.h"
#include "report_ci.h"

#define SARIF_SCHEMA "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

enum { RULE_INCONCLUSIVE = VD_DX__COUNT, RULE_BAD_INPUT, RULE_UNEXPECTED, N_RULES };

typedef struct {
  int oom;
} ctx;

/* A JSON string of s; invalid UTF-8 bytes become '?'. */
static json_t *jstr(ctx *x, const char *s) {
  json_t *v = json_string(s ? s : "");
  if (!v && s) {
    size_t n = strlen(s);
    char *t = vd_malloc(n + 1);
    if (t) {
      for (size_t i = 0; i <= n; i++) t[i] = (unsigned char)s[i] >= 0x80 || (s[i] && (unsigned char)s[i] < 0x20 &&
                                                                              s[i] != '\n' && s[i] != '\t') ? '?' : s[i];
      v = json_string(t);
      vd_free(t);
    }
  }
  if (!v) x->oom = 1;
  return v;
}

static json_t *obj(ctx *x) {
  json_t *o = json_object();
  if (!o) x->oom = 1;
  return o;
}

static json_t *arr(ctx *x) {
  json_t *a = json_array();
  if (!a) x->oom = 1;
  return a;
}

/* o[key] = v (v taken); nothing when o is NULL. */
static void put(ctx *x, json_t *o, const char *key, json_t *v) {
  if (!o || !v || json_object_set_new(o, key, v) != 0) {
    json_decref(v);
    x->oom = 1;
  }
}

static void push(ctx *x, json_t *a, json_t *v) {
  if (!a || !v || json_array_append_new(a, v) != 0) {
    json_decref(v);
    x->oom = 1;
  }
}

static json_t *text_msg(ctx *x, const char *s) {
  json_t *m = obj(x);
  put(x, m, "text", jstr(x, s));
  return m;
}

static const char *rule_id(int k) {
  if (k < VD_DX__COUNT) return vd_diagnosis_names[k];
  return k == RULE_INCONCLUSIVE ? "INCONCLUSIVE" : k == RULE_BAD_INPUT ? "BAD_INPUT" : "UNEXPECTED_OUTCOME";
}

static json_t *rules(ctx *x) {
  json_t *a = arr(x);
  for (int k = 1; k < N_RULES; k++) {
    const char *shortd, *help;
    if (k < VD_DX__COUNT) {
      shortd = vd_report_ci_class_text((vd_diagnosis)k);
      help = vd_findings_hint((vd_diagnosis)k);
    } else if (k == RULE_INCONCLUSIVE) {
      shortd = "No verdict was reached for some stages (a limit, a solver unknown, an unsupported operator).";
      help = "verdict --help lists the limits (--stage-budget, --stage-timeout); `verdict limits` says why each has its "
             "value. An inconclusive configuration is neither proven nor refuted.";
    } else if (k == RULE_BAD_INPUT) {
      shortd = "A configuration could not be checked: a plan file is missing or malformed, or an option is wrong.";
      help = "The message names the file, the record and the field; fix the input and run again.";
    } else {
      shortd = "A configuration ended otherwise than its manifest expects.";
      help = "An expected failure that is now equivalent: the bug was fixed, or the configuration changed; update the "
             "manifest's expectation.";
    }
    json_t *r = obj(x);
    put(x, r, "id", jstr(x, rule_id(k)));
    put(x, r, "shortDescription", text_msg(x, shortd));
    put(x, r, "fullDescription", text_msg(x, shortd));
    put(x, r, "help", text_msg(x, help));
    json_t *dc = obj(x);
    put(x, dc, "level", jstr(x, k == RULE_INCONCLUSIVE ? "warning" : "error"));
    put(x, r, "defaultConfiguration", dc);
    push(x, a, r);
  }
  return a;
}

/* A URI reference for a file path: relative paths stay relative (to the
 * source root), absolute ones become file:// URIs; bytes outside the
 * unreserved set and '/' are percent-encoded. */
static json_t *artifact(ctx *x, const char *path) {
  size_t n = strlen(path);
  char *u = vd_malloc(3 * n + 8);
  if (!u) {
    x->oom = 1;
    return NULL;
  }
  size_t o = 0;
  int abs = path[0] == '/';
  if (abs) memcpy(u, "file://", 7), o = 7;
  static const char hex[] = "0123456789ABCDEF";
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)path[i];
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("-._~/", ch)) {
      u[o++] = (char)ch;
    } else {
      u[o++] = '%', u[o++] = hex[ch >> 4], u[o++] = hex[ch & 15];
    }
  }
  u[o] = '\0';
  json_t *a = obj(x);
  put(x, a, "uri", jstr(x, u));
  if (!abs) put(x, a, "uriBaseId", jstr(x, "%SRCROOT%"));
  vd_free(u);
  return a;
}

static json_t *location(ctx *x, const char *file, long line, const char *plan, const char *logical,
                        const char *logical_kind, const char *cfg) {
  json_t *loc = obj(x);
  if (file && file[0]) {
    json_t *pl = obj(x);
    put(x, pl, "artifactLocation", artifact(x, file));
    if (line > 0) {
      json_t *reg = obj(x);
      put(x, reg, "startLine", json_integer(line));
      put(x, pl, "region", reg);
    }
    put(x, loc, "physicalLocation", pl);
  } else if (plan) {
    json_t *pl = obj(x);
    put(x, pl, "artifactLocation", artifact(x, plan));
    put(x, loc, "physicalLocation", pl);
  }
  if (logical) {
    json_t *ll = arr(x), *l = obj(x);
    char fq[800];
    snprintf(fq, sizeof(fq), "%s/%s", cfg, logical);
    put(x, l, "name", jstr(x, logical));
    put(x, l, "fullyQualifiedName", jstr(x, fq));
    put(x, l, "kind", jstr(x, logical_kind));
    push(x, ll, l);
    put(x, loc, "logicalLocations", ll);
  }
  return loc;
}

static json_t *fingerprint(ctx *x, const char *cfg, const char *name) {
  size_t a = strlen(cfg), b = strlen(name);
  char *buf = vd_malloc(a + b + 2);
  uint8_t dg[VD_DIGEST_BYTES];
  char hex[VD_DIGEST_HEX];
  if (!buf) {
    x->oom = 1;
    return NULL;
  }
  memcpy(buf, cfg, a + 1);
  memcpy(buf + a + 1, name, b + 1);
  vd_rc rc = vd_digest_bytes(buf, a + b + 2, dg);
  vd_free(buf);
  if (rc != VD_OK) {
    x->oom = 1;
    return NULL;
  }
  vd_digest_hex(dg, hex);
  json_t *f = obj(x);
  put(x, f, "verdictFinding/v1", jstr(x, hex));
  return f;
}

static json_t *result(ctx *x, int rule, const char *level, const char *msg, json_t *loc, const char *cfg,
                      const char *stable) {
  json_t *r = obj(x);
  put(x, r, "ruleId", jstr(x, rule_id(rule)));
  put(x, r, "ruleIndex", json_integer(rule - 1));
  put(x, r, "level", jstr(x, level));
  put(x, r, "message", text_msg(x, msg));
  if (loc) {
    json_t *ls = arr(x);
    push(x, ls, loc);
    put(x, r, "locations", ls);
  }
  put(x, r, "partialFingerprints", fingerprint(x, cfg, stable));
  json_t *p = obj(x);
  put(x, p, "configuration", jstr(x, cfg));
  put(x, r, "properties", p);
  return r;
}

/* Results of one configuration, appended to res. */
static vd_rc config_results(ctx *x, const vd_report_config *c, json_t *res, vd_diag *d) {
  char line[1200], msg[2400];
  vd_report_ci_outcome_line(c, 0, line, sizeof(line));
  const char *plan = c->opts ? c->opts->pm : NULL;
  if (c->exit_code == 2 || !c->run) {
    int bad = c->exit_code != 3;
    push(x, res, result(x, bad ? RULE_BAD_INPUT : RULE_INCONCLUSIVE, bad ? "error" : "warning", line,
                        plan ? location(x, NULL, 0, plan, NULL, NULL, c->name) : NULL, c->name,
                        bad ? "BAD_INPUT" : "INCONCLUSIVE"));
    return VD_OK;
  }
  vd_findings fs;
  vd_ci_finding *cf = NULL;
  VD_CHECK(vd_findings_build(c->run, &fs, d));
  vd_rc rc = vd_report_ci_findings(c->run, &fs, &cf, d);
  if (rc != VD_OK) {
    vd_findings_free(&fs);
    return rc;
  }
  int expected_fail = c->exit_code == 1 && vd_report_ci_expected(c) == 1;
  for (size_t k = 0; k < fs.n; k++) {
    const vd_ci_finding *f = &cf[k];
    snprintf(msg, sizeof(msg), "%s in configuration '%s' (%s). %s %s: %s.", f->title, c->name, f->footprint,
             vd_report_ci_class_text(f->fd->diagnosis), "What to look for", vd_findings_hint(f->fd->diagnosis));
    json_t *loc = location(x, f->file, f->line, plan, f->logical, f->fd->pnode >= 0 ? "function" : "variable", c->name);
    push(x, res, result(x, f->fd->diagnosis, expected_fail ? "note" : "error", msg, loc, c->name, f->name));
  }
  vd_free(cf);
  vd_findings_free(&fs);
  if (c->exit_code == 3 && !vd_report_ci_as_expected(c))
    push(x, res, result(x, RULE_INCONCLUSIVE, "warning", line, location(x, NULL, 0, plan, NULL, NULL, c->name), c->name,
                        "INCONCLUSIVE"));
  if (c->exit_code == 0 && !vd_report_ci_as_expected(c))
    push(x, res, result(x, RULE_UNEXPECTED, "error", line, location(x, NULL, 0, plan, NULL, NULL, c->name), c->name,
                        "UNEXPECTED_OUTCOME"));
  return VD_OK;
}

static json_t *invocation(ctx *x, const vd_report_config *c) {
  json_t *inv = obj(x);
  /* Bad input is a failed execution; an inconclusive stop is not. */
  put(x, inv, "executionSuccessful", json_boolean(c->exit_code != 2));
  put(x, inv, "exitCode", json_integer(c->exit_code));
  put(x, inv, "exitCodeDescription", jstr(x, vd_report_ci_outcome(c->exit_code)));
  if (!c->run || c->exit_code == 2) {
    json_t *ns = arr(x), *n = obj(x);
    put(x, n, "level", jstr(x, c->exit_code == 3 ? "warning" : "error"));
    put(x, n, "message", text_msg(x, c->error ? c->error : "the configuration could not be checked"));
    push(x, ns, n);
    put(x, inv, "toolExecutionNotifications", ns);
  }
  json_t *p = obj(x);
  put(x, p, "configuration", jstr(x, c->name));
  put(x, p, "expectedExitCode", json_integer(vd_report_ci_expected(c)));
  put(x, inv, "properties", p);
  return inv;
}

vd_rc vd_report_sarif_configs(const vd_report_config *c, size_t n, const char *path, vd_diag *d) {
  ctx x = {0};
  vd_rc rc = VD_OK;
  json_t *root = obj(&x), *run = obj(&x), *tool = obj(&x), *drv = obj(&x), *runs = arr(&x);
  json_t *invs = arr(&x), *res = arr(&x);
  put(&x, root, "$schema", jstr(&x, SARIF_SCHEMA));
  put(&x, root, "version", jstr(&x, "2.1.0"));
  put(&x, drv, "name", jstr(&x, "verdict"));
  put(&x, drv, "version", jstr(&x, VD_VERSION_STRING));
  put(&x, drv, "semanticVersion", jstr(&x, VD_VERSION_STRING));
  put(&x, drv, "rules", rules(&x));
  put(&x, tool, "driver", drv);
  put(&x, run, "tool", tool);
  for (size_t i = 0; i < n && rc == VD_OK; i++) {
    push(&x, invs, invocation(&x, &c[i]));
    rc = config_results(&x, &c[i], res, d);
  }
  put(&x, run, "invocations", invs);
  put(&x, run, "results", res);
  push(&x, runs, run);
  put(&x, root, "runs", runs);
  if (rc == VD_OK && x.oom) rc = VD_OOM(d);
  if (rc == VD_OK) {
    vd_outfile of; /* common/outfile.h */
    rc = vd_outfile_open(&of, path, 0, d);
    if (rc == VD_OK) {
      int bad = json_dumpf(root, of.fp, JSON_INDENT(2)) != 0;
      bad |= fputc('\n', of.fp) == EOF;
      if (bad) {
        vd_outfile_abort(&of);
        rc = VD_ERR(d, VD_EIO, path, NULL, NULL, "writing the SARIF report failed");
      } else {
        rc = vd_outfile_commit(&of, d);
      }
    }
  }
  json_decref(root);
  return rc;
}
