/*
 * verifier/provenance.c - the "what was proven" header of the reports
 * (provenance.h).
 */
#include "provenance.h"

#include <stdlib.h>
#include <string.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "../common/text.h"
#include "../plans/idmap.h"
#include "cli.h"
#include "json_out.h"

void vd_prov_build(const vd_run *r, vd_provenance *p) {
  memset(p, 0, sizeof(*p));
  const vd_world_t *w = &r->pp.world;
  size_t at = 0;
  const struct {
    const char *name;
    int32_t v;
  } deg[] = {{"dp", w->dp}, {"tp", w->tp}, {"pp", w->pp}, {"cp", w->cp}, {"ep", w->ep}, {"nm", w->nm}};
  for (size_t k = 0; k < sizeof(deg) / sizeof(deg[0]) && at < sizeof(p->config); k++)
    if (deg[k].v > 1) at += (size_t)snprintf(p->config + at, sizeof(p->config) - at, "%s%s%d", at ? " " : "", deg[k].name, deg[k].v);
  if (w->sp && at < sizeof(p->config)) snprintf(p->config + at, sizeof(p->config) - at, "%ssp", at ? " " : "");
  p->ranks = (size_t)(w->stored_ranks > 0 ? w->stored_ranks : 0) * (size_t)(w->replicas > 0 ? w->replicas : 1);
  p->microbatches = w->nm > 0 ? w->nm : 1;
  p->model = r->pp.pool && r->pp.model ? vd_plan_s(&r->pp, r->pp.model) : "";
  if (!p->model[0] && r->sp.pool && r->sp.model) p->model = vd_plan_s(&r->sp, r->sp.model);
  p->n_single = r->sp.n_tensors;
  p->up_to = "nothing (the run stopped before the plans were read)";
  if (!r->sp.n_tensors || !r->pp.n_tensors) return;
  /* Single tensors that some parallel tensor holds a lineage to (given or
   * inferred and still standing): those the stages compare. */
  uint8_t *mark = vd_calloc(r->sp.n_tensors, 1), *written = NULL;
  vd_idmap_t ids = {0};
  if (!mark || vd_idmap_init(&ids, r->sp.n_tensors) != VD_OK || vd_plan_written(&r->sp, &written, NULL) != VD_OK) {
    vd_free(mark);
    vd_idmap_free(&ids);
    p->up_to = "unknown (out of memory)";
    return;
  }
  for (size_t i = 0; i < r->sp.n_tensors; i++) vd_idmap_put(&ids, r->sp.tensors[i].id, (uint32_t)i, NULL);
  for (size_t t = 0; t < r->pp.n_tensors; t++) {
    uint32_t s;
    if (r->pp.tensors[t].has_lin && vd_idmap_get(&ids, r->pp.tensors[t].lin.full, &s)) mark[s] = 1;
  }
  size_t n_weights_updated = 0;
  for (size_t s = 0; s < r->sp.n_tensors; s++) {
    const vd_tensor_t *ts = &r->sp.tensors[s];
    int upd = (ts->role == VD_ROLE_WEIGHT || ts->role == VD_ROLE_OPTSTATE) && written[s];
    n_weights_updated += upd && ts->role == VD_ROLE_WEIGHT;
    if (!mark[s]) continue;
    p->n_compared++;
    if ((int)ts->role >= 0 && ts->role < VD_ROLE__COUNT) p->n_role[ts->role]++;
    p->n_updated += upd;
  }
  if (n_weights_updated && p->n_updated) p->up_to = "the updated weights";
  else if (p->n_role[VD_ROLE_GRAD]) p->up_to = "the gradients (the plans update no weight)";
  else if (p->n_role[VD_ROLE_LOSS]) p->up_to = "the loss (no gradient is compared)";
  else p->up_to = "the forward values only";
  vd_free(written);
  vd_free(mark);
  vd_idmap_free(&ids);
}

static void limits_text(const vd_run_opts *o, char *buf, size_t n) {
  char budget[48], timeout[48], deadline[48];
  if (o->stage_budget == UINT64_MAX) snprintf(budget, sizeof(budget), "none");
  else snprintf(budget, sizeof(budget), "%g M steps", (double)(o->stage_budget ? o->stage_budget : VD_LIM_STAGE_BUDGET) / 1e6);
  if (o->stage_timeout_ms) snprintf(timeout, sizeof(timeout), "%g s", o->stage_timeout_ms / 1e3);
  else snprintf(timeout, sizeof(timeout), "none");
  if (o->deadline_s > 0) snprintf(deadline, sizeof(deadline), "%g s", o->deadline_s);
  else snprintf(deadline, sizeof(deadline), "none");
  snprintf(buf, n, "stage budget %s, stage timeout %s, deadline %s, seed %llu%s%s%s%s", budget, timeout, deadline,
           (unsigned long long)o->seed, o->no_reuse ? ", --no-reuse" : "", o->no_fast_path ? ", --no-fast-path" : "",
           o->no_reduce ? ", --no-reduce" : "", o->no_infer ? ", --no-infer" : "");
}

static void coverage_text(const vd_provenance *p, char *buf, size_t n) {
  static const struct {
    vd_role role;
    const char *one, *many;
  } names[] = {{VD_ROLE_WEIGHT, "weight", "weights"},
               {VD_ROLE_GRAD, "gradient", "gradients"},
               {VD_ROLE_OPTSTATE, "optimizer state", "optimizer states"},
               {VD_ROLE_ACT, "activation", "activations"},
               {VD_ROLE_LOSS, "loss", "losses"},
               {VD_ROLE_INPUT, "input", "inputs"}};
  size_t at = 0;
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && at < n; k++) {
    size_t c = p->n_role[names[k].role];
    if (c) at += (size_t)snprintf(buf + at, n - at, "%s%zu %s", at ? ", " : "", c, c == 1 ? names[k].one : names[k].many);
  }
  if (!at) snprintf(buf, n, "no tensor");
}

void vd_prov_text_interrupted(const vd_run *r, FILE *f) {
  if (!r->interrupted) return;
  fprintf(f, "  run interrupted by %s while %s, after %.1f s: no verdict (exit 3)\n",
          vd_stop_reason_name(r->interrupted), r->stop_phase ? r->stop_phase : "starting", r->stop_s);
  if (r->verdicts)
    fprintf(f, "  proven before the stop: %zu of %zu stages equivalent (%zu stage classes solved)\n", r->n_equiv,
            r->set.n_stages, vd_ctl_get(VD_CTL_CLASSES_DONE));
  else
    fprintf(f, "  proven before the stop: nothing (stopped before solving; %zu stages cut so far)\n",
            r->n_stages_cut_at_stop);
}

void vd_prov_text(const vd_run *r, const vd_run_opts *o, const vd_provenance *p, FILE *f) {
  char cov[256];
  coverage_text(p, cov, sizeof(cov));
  /* the model's name: the first word of its description ("llama3 layers=2 ...") */
  char model[48];
  size_t mlen = 0;
  while (p->model[mlen] && p->model[mlen] != ' ' && mlen < 40) mlen++;
  vd_text_fmt(model, sizeof(model), "%.*s", (int)mlen, p->model); /* cut between characters */
  fprintf(f, "  plans: %s against %s: %s%s%s%s%zu ranks, %d microbatch%s\n", VD_SHOW(o->pm), VD_SHOW(o->sm),
          VD_SHOW(model), mlen ? " " : "", p->config, p->config[0] ? "; " : "", p->ranks, p->microbatches,
          p->microbatches == 1 ? "" : "es");
  fprintf(f, "  compared: %zu of %zu single-device tensors (%s), up to %s\n", p->n_compared, p->n_single, cov, p->up_to);
  if (o->verbose) {
    char lim[256];
    limits_text(o, lim, sizeof(lim));
    fprintf(f, "  model: %s\n", p->model[0] ? VD_SHOW(p->model) : "(not stated)");
    fprintf(f, "  single-device plan: %s sha256 %s\n", VD_SHOW(o->sm), r->sm_sha256[0] ? r->sm_sha256 : "(not read)");
    fprintf(f, "  parallel plan: %s sha256 %s\n", VD_SHOW(o->pm), r->pm_sha256[0] ? r->pm_sha256 : "(not read)");
    fprintf(f, "  limits: %s\n", lim);
  }
}

static json_t *json_side(vd_jb *b, const char *path, const char *hex) {
  json_t *side = vd_jb_obj(b);
  vd_jb_set(b, side, "path", vd_jb_str(b, path));
  vd_jb_set(b, side, "sha256", hex[0] ? vd_jb_str(b, hex) : json_null());
  return side;
}

static json_t *json_config(vd_jb *b, const vd_run *r, const vd_provenance *p) {
  const vd_world_t *w = &r->pp.world;
  json_t *c = vd_jb_obj(b);
  vd_jb_set(b, c, "text", vd_jb_str(b, p->config));
  const struct { const char *key; int64_t v; } deg[] = {
      {"dp", w->dp}, {"tp", w->tp}, {"pp", w->pp}};
  for (size_t i = 0; i < sizeof deg / sizeof deg[0]; i++) vd_jb_set(b, c, deg[i].key, vd_jb_int(b, deg[i].v));
  vd_jb_set(b, c, "sp", vd_jb_bool(b, w->sp));
  vd_jb_set(b, c, "cp", vd_jb_int(b, w->cp));
  vd_jb_set(b, c, "ep", vd_jb_int(b, w->ep));
  vd_jb_set(b, c, "nm", vd_jb_int(b, w->nm));
  vd_jb_set(b, c, "ranks", vd_jb_int(b, (int64_t)p->ranks));
  vd_jb_set(b, c, "microbatches", vd_jb_int(b, p->microbatches));
  return c;
}

static json_t *json_coverage(vd_jb *b, const vd_provenance *p) {
  json_t *c = vd_jb_obj(b);
  const struct { const char *key; size_t v; } n[] = {
      {"single_tensors", p->n_single},        {"compared", p->n_compared},
      {"weights", p->n_role[VD_ROLE_WEIGHT]}, {"gradients", p->n_role[VD_ROLE_GRAD]},
      {"optimizer_states", p->n_role[VD_ROLE_OPTSTATE]}, {"activations", p->n_role[VD_ROLE_ACT]},
      {"losses", p->n_role[VD_ROLE_LOSS]},    {"inputs", p->n_role[VD_ROLE_INPUT]},
      {"updated", p->n_updated}};
  for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) vd_jb_set(b, c, n[i].key, vd_jb_int(b, (int64_t)n[i].v));
  vd_jb_set(b, c, "up_to", vd_jb_str(b, p->up_to));
  return c;
}

static json_t *json_limits(vd_jb *b, const vd_run_opts *o) {
  json_t *l = vd_jb_obj(b);
  vd_jb_set(b, l, "stage_budget",
            o->stage_budget == UINT64_MAX ? json_null()
                                          : vd_jb_int(b, (int64_t)(o->stage_budget ? o->stage_budget : VD_LIM_STAGE_BUDGET)));
  vd_jb_set(b, l, "stage_timeout_s", o->stage_timeout_ms ? vd_jb_double(b, o->stage_timeout_ms / 1e3) : json_null());
  vd_jb_set(b, l, "deadline_s", o->deadline_s > 0 ? vd_jb_double(b, o->deadline_s) : json_null());
  /* (the thread count is not a limit, and the report is the same at any) */
  vd_jb_set(b, l, "max_failures", vd_jb_int(b, o->max_failures));
  vd_jb_set(b, l, "seed", vd_jb_int(b, (int64_t)o->seed));
  vd_jb_set(b, l, "reuse", vd_jb_bool(b, !o->no_reuse));
  vd_jb_set(b, l, "fast_path", vd_jb_bool(b, !o->no_fast_path));
  vd_jb_set(b, l, "reduce", vd_jb_bool(b, !o->no_reduce));
  vd_jb_set(b, l, "infer", vd_jb_bool(b, !o->no_infer));
  return l;
}

static json_t *json_interrupted(vd_jb *b, const vd_run *r) {
  if (!r->interrupted) return json_null();
  json_t *i = vd_jb_obj(b);
  vd_jb_set(b, i, "reason",
            vd_jb_str(b, r->interrupted == VD_STOP_SIGINT    ? "SIGINT"
                         : r->interrupted == VD_STOP_SIGTERM  ? "SIGTERM"
                         : r->interrupted == VD_STOP_DEADLINE ? "deadline"
                                                              : "stop"));
  vd_jb_set(b, i, "phase", vd_jb_str(b, r->stop_phase ? r->stop_phase : "starting"));
  vd_jb_set(b, i, "seconds", vd_jb_real(b, r->stop_s, 3));
  vd_jb_set(b, i, "stages_cut", vd_jb_int(b, (int64_t)(r->verdicts ? r->set.n_stages : r->n_stages_cut_at_stop)));
  vd_jb_set(b, i, "stages_proven", vd_jb_int(b, (int64_t)r->n_equiv));
  vd_jb_set(b, i, "classes_solved", vd_jb_int(b, (int64_t)(r->verdicts ? vd_ctl_get(VD_CTL_CLASSES_DONE) : 0)));
  vd_jb_set(b, i, "not_solved", vd_jb_int(b, (int64_t)r->n_interrupted));
  vd_jb_set(b, i, "unconfirmed_failures", vd_jb_int(b, (int64_t)r->n_unconfirmed));
  return i;
}

void vd_prov_json(vd_jb *b, json_t *root, const vd_run *r, const vd_run_opts *o, const vd_provenance *p) {
  json_t *pv = vd_jb_obj(b);
  vd_jb_set(b, pv, "version", vd_jb_str(b, VD_VERSION_STRING));
  vd_jb_set(b, pv, "configuration", json_config(b, r, p));
  vd_jb_set(b, pv, "model", vd_jb_str(b, p->model));
  vd_jb_set(b, pv, "sm", json_side(b, o->sm, r->sm_sha256));
  vd_jb_set(b, pv, "pm", json_side(b, o->pm, r->pm_sha256));
  vd_jb_set(b, pv, "coverage", json_coverage(b, p));
  vd_jb_set(b, pv, "limits", json_limits(b, o));
  vd_jb_set(b, root, "provenance", pv);
  vd_jb_set(b, root, "interrupted", json_interrupted(b, r));
}

void vd_prov_html(const vd_run *r, const vd_run_opts *o, const vd_provenance *p, FILE *f) {
  char buf[256];
  fputs("<tr><th>configuration</th><td id=\"configuration\">", f);
  vd_cli_xml_str(f, p->config[0] ? p->config : "single device");
  fprintf(f, "; %zu ranks, %d microbatch%s</td></tr>\n<tr><th>model</th><td>", p->ranks, p->microbatches,
          p->microbatches == 1 ? "" : "es");
  vd_cli_xml_str(f, p->model[0] ? p->model : "(not stated)");
  fputs("</td></tr>\n<tr><th>single-device plan SHA-256</th><td class=\"sha\" id=\"sm-sha256\">", f);
  vd_cli_xml_str(f, r->sm_sha256[0] ? r->sm_sha256 : "(not read)");
  fputs("</td></tr>\n<tr><th>parallel plan SHA-256</th><td class=\"sha\" id=\"pm-sha256\">", f);
  vd_cli_xml_str(f, r->pm_sha256[0] ? r->pm_sha256 : "(not read)");
  coverage_text(p, buf, sizeof(buf));
  fprintf(f, "</td></tr>\n<tr><th>compared</th><td id=\"coverage\">%zu of %zu single-device tensors (", p->n_compared,
          p->n_single);
  vd_cli_xml_str(f, buf);
  fputs("), up to ", f);
  vd_cli_xml_str(f, p->up_to);
  limits_text(o, buf, sizeof(buf));
  fputs("</td></tr>\n<tr><th>limits</th><td>", f);
  vd_cli_xml_str(f, buf);
  fputs("</td></tr>\n", f);
  if (r->interrupted) {
    fputs("<tr><th>interrupted</th><td id=\"interrupted\">", f);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (m) {
      vd_prov_text_interrupted(r, m);
      fclose(m);
    }
    if (text) vd_cli_xml_text(f, text, len);
    free(text); /* open_memstream's buffer comes from the C library */
    fputs("</td></tr>\n", f);
  }
}
