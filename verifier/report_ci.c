/*
 * verifier/report_ci.c - the facts the CI-facing writers share
 * (report_ci.h): stable finding names, source locations, the status of
 * each single-device tensor's proofs, a configuration's outcome.
 *
 * Nothing here changes a verdict; it only names what the run found.  A
 * source location comes from the node's `src` (docs/plan-format.md: the
 * importer and the PyTorch capture write "FILE:LINE op"), or, for plans
 * captured before `src` was written, from a node name that starts with
 * "FILE.py:LINE" (tools/torch2plan names nodes by their source line).
 */
#include "report_ci.h"

#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"

int vd_report_ci_parse_loc(const char *s, char *file, size_t n_file, long *line) {
  if (!s) return 0;
  size_t end = 0;
  while (s[end] && s[end] != ' ' && s[end] != '\t') end++;
  size_t colon = end;
  while (colon > 0 && s[colon - 1] != ':') colon--;
  if (colon < 2 || colon == end) return 0; /* no "X:" or nothing after the colon */
  long v = 0;
  for (size_t i = colon; i < end; i++) {
    if (s[i] < '0' || s[i] > '9' || v > 100000000) return 0;
    v = v * 10 + (s[i] - '0');
  }
  if (v < 1 || colon - 1 >= n_file) return 0;
  memcpy(file, s, colon - 1);
  file[colon - 1] = '\0';
  *line = v;
  return 1;
}

/* The node's source name without the capture's " [mb N]" suffix: the same
 * operator in another microbatch is the same place in the user's code. */
static void stable_node_name(char *out, size_t n, const char *name) {
  vd_text_fmt(out, n, "%s", name);
  char *m = strstr(out, " [mb ");
  while (m && strstr(m + 1, " [mb ")) m = strstr(m + 1, " [mb ");
  if (!m) return;
  size_t i = 5;
  while (m[i] >= '0' && m[i] <= '9') i++;
  if (i > 5 && m[i] == ']' && m[i + 1] == '\0') *m = '\0';
}

static int ends_with(const char *s, size_t n, const char *suf) {
  size_t k = strlen(suf);
  return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static void node_facts(const vd_run *r, vd_ci_finding *c, int side, int64_t pnode) {
  const vd_plan_t *p = side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[pnode];
  char nm[256];
  stable_node_name(nm, sizeof(nm), vd_plan_s(p, pn->name));
  if (!nm[0]) vd_text_fmt(nm, sizeof(nm), "unnamed");
  vd_text_fmt(c->logical, sizeof(c->logical), "%s%s '%s'", side ? "" : "single ", vd_node_op(p, pn), nm);
  if (pn->src && vd_report_ci_parse_loc(vd_plan_s(p, pn->src), c->file, sizeof(c->file), &c->line)) return;
  /* A name "FILE.py:LINE ..." (torch2plan) places the node too. */
  char f[512];
  long ln;
  if (vd_report_ci_parse_loc(nm, f, sizeof(f), &ln) && ends_with(f, strlen(f), ".py")) {
    vd_text_fmt(c->file, sizeof(c->file), "%s", f);
    c->line = ln;
  }
}

static void tensor_name(const vd_plan_t *p, int64_t t, char *out, size_t n) {
  const char *s = vd_plan_s(p, p->tensors[t].name);
  if (s[0]) vd_text_fmt(out, n, "%s", s);
  else vd_text_fmt(out, n, "t%lld", (long long)p->tensors[t].id);
}

/* The single tensor that target ti of stage st checks, read from its lineage:
 * a compact stage (vd_stage_compact) keeps its targets but not its values. */
static uint32_t target_tensor(const vd_run *r, const vd_stage *st, uint32_t ti) {
  return r->lt.lins[st->targets[ti].lineage].stensor;
}

static void finding_facts(const vd_run *r, const vd_finding *fd, vd_ci_finding *c) {
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  vd_rep_fmt_title(c->title, sizeof(c->title), r, fd);
  vd_rep_fmt_footprint(c->footprint, sizeof(c->footprint), fd);
  const char *dx = vd_diagnosis_names[fd->diagnosis];
  char tn[256];
  if (fd->pnode >= 0) {
    node_facts(r, c, fd->side, fd->pnode);
    vd_text_fmt(c->name, sizeof(c->name), "%s at %s", dx, c->logical);
    return;
  }
  if (fd->structural) {
    const vd_issue *is = &r->issues[fd->rep];
    const vd_plan_t *ip = is->single ? &r->sp : &r->pp;
    if (is->tensor >= 0 && (size_t)is->tensor < ip->n_tensors) {
      tensor_name(ip, is->tensor, tn, sizeof(tn));
      vd_text_fmt(c->logical, sizeof(c->logical), "%stensor '%s'", is->single ? "single " : "", tn);
    } else if (is->stensor >= 0 && (size_t)is->stensor < r->sp.n_tensors) {
      tensor_name(&r->sp, is->stensor, tn, sizeof(tn));
      vd_text_fmt(c->logical, sizeof(c->logical), "single tensor '%s'", tn);
    } else {
      vd_text_fmt(c->logical, sizeof(c->logical), "%s %s", is->source, is->kind_name);
    }
    vd_text_fmt(c->name, sizeof(c->name), "%s (%s) on %s", dx, is->kind_name, c->logical);
    return;
  }
  /* A failing stage without a diverging node: its first target. */
  const vd_stage *st = &r->set.stages[fd->rep];
  if (st->n_targets) {
    tensor_name(&r->sp, target_tensor(r, st, 0), tn, sizeof(tn));
    vd_text_fmt(c->logical, sizeof(c->logical), "single tensor '%s'", tn);
  } else {
    vd_text_fmt(c->logical, sizeof(c->logical), "a stage without target");
  }
  vd_text_fmt(c->name, sizeof(c->name), "%s on %s", dx, c->logical);
}

/* Sort order for naming duplicates: by name, then report order. */
typedef struct {
  const char *name;
  size_t k;
} name_ix;

static int by_name(const void *a, const void *b) {
  const name_ix *x = a, *y = b;
  int c = strcmp(x->name, y->name);
  return c ? c : (x->k > y->k) - (x->k < y->k);
}

vd_rc vd_report_ci_findings(const vd_run *r, const vd_findings *fs, vd_ci_finding **out, vd_diag *d) {
  *out = vd_calloc(fs->n ? fs->n : 1, sizeof(vd_ci_finding));
  name_ix *ix = vd_calloc(fs->n ? fs->n : 1, sizeof(name_ix));
  if (!*out || !ix) {
    vd_free(*out), vd_free(ix);
    *out = NULL;
    return VD_OOM(d);
  }
  vd_ci_finding *c = *out;
  for (size_t k = 0; k < fs->n; k++) {
    finding_facts(r, &fs->v[k], &c[k]);
    ix[k].name = c[k].name;
    ix[k].k = k;
  }
  /* Equal names (two causes at one operator, e.g. on two plans' sides
   * named alike) get an ordinal in report order, which is deterministic;
   * sorted, so O(n log n) for a run with many findings.  The names are
   * extended only after the walk (ix points into them). */
  qsort(ix, fs->n, sizeof(name_ix), by_name);
  size_t *ord = vd_calloc(fs->n ? fs->n : 1, sizeof(size_t));
  if (!ord) {
    vd_free(*out), vd_free(ix);
    *out = NULL;
    return VD_OOM(d);
  }
  for (size_t i = 1, run = 1; i < fs->n; i++) {
    run = strcmp(ix[i - 1].name, ix[i].name) == 0 ? run + 1 : 1;
    if (run > 1) ord[ix[i].k] = run;
  }
  for (size_t k = 0; k < fs->n; k++) {
    if (!ord[k]) continue;
    size_t len = strlen(c[k].name);
    if (len + 24 > sizeof(c[k].name)) len = sizeof(c[k].name) - 24;
    vd_text_fmt(c[k].name + len, sizeof(c[k].name) - len, " (%zu)", ord[k]);
  }
  vd_free(ord);
  vd_free(ix);
  return VD_OK;
}

static const char *skip_reason(uint8_t kind) {
  switch (kind) {
  case 1: return "not solved: larger than a failing stage, it lies past the failure (docs/verifier.md 6)";
  case 2: return "not decided: its proof rested on an inferred lineage that did not hold after the failure";
  case 3: return "not solved: a structural problem of the plan already decides";
  default: return "not solved";
  }
}

vd_rc vd_report_ci_tensors(const vd_run *r, const vd_findings *fs, const vd_ci_finding *cf, vd_ci_tensor **out,
                           size_t *n_out, vd_diag *d) {
  *out = NULL;
  *n_out = 0;
  size_t ns = r->verdicts ? r->set.n_stages : 0, nt = r->sp.n_tensors;
  if (!ns || !nt) return VD_OK;
  vd_ci_tensor *t = vd_calloc(nt, sizeof(vd_ci_tensor));
  int32_t *fof = vd_calloc(ns, sizeof(int32_t));          /* stage -> finding + 1 */
  size_t *last = vd_calloc(nt, sizeof(size_t));           /* tensor -> last stage + 1 counted */
  if (!t || !fof || !last) {
    vd_free(t), vd_free(fof), vd_free(last);
    return VD_OOM(d);
  }
  for (size_t k = fs->n; k-- > 0;)
    for (size_t j = 0; j < fs->v[k].n_stages; j++)
      if (fs->v[k].stages[j] < ns) fof[fs->v[k].stages[j]] = (int32_t)k + 1;
  int run_failed = vd_run_exit_code(r) == 1;
  for (size_t i = 0; i < ns; i++) {
    const vd_stage *st = &r->set.stages[i];
    const vd_stage_verdict *v = &r->verdicts[i];
    uint8_t sk = r->skipped ? r->skipped[i] : 0;
    for (uint32_t ti = 0; ti < st->n_targets; ti++) {
      uint32_t x = target_tensor(r, st, ti);
      if (x >= nt || last[x] == i + 1) continue;
      last[x] = i + 1;
      vd_ci_tensor *e = &t[x];
      e->n_stages++;
      e->seconds += v->ms / 1e3;
      if (v->verdict == VD_SMT_EQUIVALENT) {
        e->n_equiv++;
      } else if (v->verdict == VD_SMT_NOT_EQUIVALENT) {
        if (!e->n_fail && fof[i]) e->finding = cf[fof[i] - 1].name;
        e->n_fail++;
      } else if (sk == 1 || sk == 3 || (sk == 2 && run_failed)) {
        if (!e->n_skipped) e->reason = skip_reason(sk);
        e->n_skipped++;
      } else {
        if (!e->n_error) e->reason = v->reason[0] ? v->reason : sk ? skip_reason(sk) : "inconclusive";
        e->n_error++;
      }
    }
  }
  size_t m = 0;
  for (size_t x = 0; x < nt; x++) {
    if (!t[x].n_stages) continue;
    vd_ci_tensor e = t[x];
    e.name = vd_plan_s(&r->sp, r->sp.tensors[x].name);
    e.id = r->sp.tensors[x].id;
    e.status = e.n_fail ? VD_CI_FAILURE : e.n_error ? VD_CI_ERROR : e.n_skipped ? VD_CI_SKIPPED : VD_CI_PASS;
    if (e.status == VD_CI_FAILURE) e.reason = NULL;
    t[m++] = e;
  }
  vd_free(fof);
  vd_free(last);
  *out = t;
  *n_out = m;
  return VD_OK;
}

int vd_report_ci_expected(const vd_report_config *c) { return c->expected >= 0 ? c->expected : 0; }

/* A manifest that names the class of the expected bug is met only by a
 * finding of that class (a NOT EQUIVALENT for another reason is not the
 * bug the configuration documents).  Without memory for the findings the
 * class cannot be confirmed: not as expected. */
static int has_expected_class(const vd_report_config *c) {
  if (c->expected != 1 || c->expected_dx == VD_DX_NONE || !c->run) return 1;
  vd_findings fs;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_findings_build(c->run, &fs, &d) != VD_OK) return 0;
  int found = 0;
  for (size_t k = 0; k < fs.n && !found; k++) found = (int)fs.v[k].diagnosis == c->expected_dx;
  vd_findings_free(&fs);
  return found;
}

int vd_report_ci_as_expected(const vd_report_config *c) {
  return c->exit_code == vd_report_ci_expected(c) && has_expected_class(c);
}

const char *vd_report_ci_outcome(int exit_code) {
  switch (exit_code) {
  case 0: return "EQUIVALENT";
  case 1: return "NOT EQUIVALENT";
  case 2: return "BAD INPUT";
  default: return "INCONCLUSIVE";
  }
}

void vd_report_ci_outcome_line(const vd_report_config *c, size_t n_findings, char *buf, size_t n) {
  const vd_run *r = c->run;
  if (!r) {
    vd_text_fmt(buf, n, "%s: %s", vd_report_ci_outcome(c->exit_code), c->error ? c->error : "no run");
    return;
  }
  if (c->exit_code == 1) {
    vd_text_fmt(buf, n, "NOT EQUIVALENT: %zu finding%s", n_findings, n_findings == 1 ? "" : "s");
  } else if (c->exit_code == 3) {
    const char *why = c->error;
    if (!why && r->n_limits) why = r->limits[0].detail; /* a limit reached outside any stage */
    for (size_t i = 0; !why && r->verdicts && i < r->set.n_stages; i++)
      if (r->verdicts[i].verdict != VD_SMT_EQUIVALENT && r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT &&
          r->verdicts[i].reason[0])
        why = r->verdicts[i].reason;
    vd_text_fmt(buf, n, "INCONCLUSIVE: %zu stage%s not decided%s%s", r->n_inconclusive, r->n_inconclusive == 1 ? "" : "s",
             why ? "; first: " : "", why ? why : "");
  } else {
    vd_text_fmt(buf, n, "%s", vd_report_ci_outcome(c->exit_code));
  }
  if (!vd_report_ci_as_expected(c)) {
    size_t len = strlen(buf);
    if (len < n) vd_text_fmt(buf + len, n - len, " (expected %s)", vd_report_ci_outcome(vd_report_ci_expected(c)));
  }
}

static const char *const class_text[VD_DX__COUNT] = {
    [VD_DX_NONE] = "",
    [VD_DX_MISSING_REDUCTION] = "The parallel copies add up to the single-device value: a sum over ranks is missing.",
    [VD_DX_EXTRA_REDUCTION] = "Each parallel copy is the single-device value times the number of copies: a reduction "
                              "runs once too often.",
    [VD_DX_SCALE] = "Each parallel copy is the single-device value times a constant factor.",
    [VD_DX_PERMUTED_SLICES] = "A parallel copy holds the values of another slice of the single-device tensor.",
    [VD_DX_WRONG_VALUE] = "A parallel copy differs from the single-device value, not by a sum, a factor or a "
                          "permutation.",
    [VD_DX_DATAFLOW] = "A value is read that nothing produces, or that comes from the wrong rank.",
    [VD_DX_SCHEDULE] = "An operation runs before its inputs are complete (a reducer before the last microbatch).",
    [VD_DX_ALIGNMENT] = "Microbatches run different programs, or a per-microbatch value is used once per iteration.",
    [VD_DX_SHAPE] = "A node's output shape does not follow from its inputs.",
    [VD_DX_BATCH] = "The parallel plan reads another global batch than the single-device plan.",
};

const char *vd_report_ci_class_text(vd_diagnosis dx) { return dx < VD_DX__COUNT && class_text[dx] ? class_text[dx] : ""; }

void vd_report_config_single(vd_report_config *c, const vd_run *r, const vd_run_opts *o) {
  memset(c, 0, sizeof(*c));
  const char *slash = strrchr(o->pm, '/');
  c->name = slash && slash[1] ? slash + 1 : o->pm;
  c->run = r;
  c->opts = o;
  c->exit_code = vd_run_exit_code(r);
  c->expected = -1;
}
