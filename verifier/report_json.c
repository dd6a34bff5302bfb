/*
 * verifier/report_json.c - the JSON report of a run (--json) and the
 * --dump-stages listing.
 *
 * The JSON report prints the human report's content (report.c) in the same
 * deterministic order: verdict, summary, structural issues, every failing
 * stage in "failures" with its counterexample, "findings", inconclusive
 * stages.  docs/report-format.md is its contract.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/outfile.h"
#include "../common/text.h"
#include "cli.h"
#include "findings.h"
#include "json_out.h"
#include "provenance.h"
#include "report.h"
#include "report_int.h"
#include "run.h"

static const char *verdict_json(const vd_run *r) {
  switch (vd_run_exit_code(r)) {
  case 0: return "equivalent";
  case 1: return "not_equivalent";
  default: return "inconclusive";
  }
}

/* ---- JSON ------------------------------------------------------------------- */

/* Built with jansson (verifier/json_out.h): every string goes through
 * vd_jb_str, which repairs invalid UTF-8, and jansson escapes it; keys and
 * their order are docs/report-format.md's contract. */

static json_t *jslice(vd_jb *b, const int64_t *lo, const int64_t *hi, int ndim) {
  json_t *a = vd_jb_arr(b);
  for (int i = 0; i < ndim; i++) {
    json_t *p = vd_jb_arr(b);
    vd_jb_push(b, p, vd_jb_int(b, lo[i]));
    vd_jb_push(b, p, vd_jb_int(b, hi[i]));
    vd_jb_push(b, a, p);
  }
  return a;
}

static json_t *jpiece(vd_jb *b, const vd_run *r, int32_t piece) {
  piece_info pi;
  vd_report_i_piece_facts(r, piece, &pi);
  json_t *o = vd_jb_obj(b), *part = vd_jb_arr(b);
  vd_jb_set(b, o, "tensor", vd_jb_str(b, pi.tensor));
  vd_jb_set(b, o, "tensor_id", vd_jb_int(b, pi.id));
  vd_jb_set(b, o, "rank", vd_jb_int(b, pi.rank));
  vd_jb_set(b, o, "replica", vd_jb_int(b, pi.replica));
  vd_jb_set(b, o, "mb", vd_jb_int(b, pi.mb));
  vd_jb_push(b, part, vd_jb_int(b, pi.part_k));
  vd_jb_push(b, part, vd_jb_int(b, pi.part_n));
  vd_jb_set(b, o, "part", part);
  vd_jb_set(b, o, "slice", jslice(b, pi.lo, pi.hi, pi.ndim));
  return o;
}

/* A plan node's fields into o: "node","plan","op","name","src","rank","mb","layer"; src is null when
 * the plan does not say where the user's code calls the operator. */
static void jplan_node_fields(vd_jb *b, json_t *o, const vd_run *r, int side, int64_t pnode, int64_t rank, int64_t mb) {
  const vd_plan_t *p = side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[pnode];
  vd_jb_set(b, o, "node", vd_jb_int(b, pn->id));
  vd_jb_set(b, o, "plan", vd_jb_str(b, side ? "parallel" : "single"));
  vd_jb_set(b, o, "op", vd_jb_str(b, vd_node_op(p, pn)));
  vd_jb_set(b, o, "name", vd_jb_str(b, vd_plan_s(p, pn->name)));
  vd_jb_set(b, o, "src", vd_jb_str(b, pn->src ? vd_plan_s(p, pn->src) : NULL));
  vd_jb_set(b, o, "rank", vd_jb_int_or_null(b, rank));
  vd_jb_set(b, o, "mb", vd_jb_int_or_null(b, mb));
  vd_jb_set(b, o, "layer", vd_jb_int_or_null(b, pn->layer));
}

static json_t *jplan_node(vd_jb *b, const vd_run *r, int side, int64_t pnode, int64_t rank, int64_t mb) {
  json_t *o = vd_jb_obj(b);
  jplan_node_fields(b, o, r, side, pnode, rank, mb);
  return o;
}

static json_t *jstage_node(vd_jb *b, const vd_run *r, const vd_stage_node *sn) {
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  uint32_t pn = g->nodes[sn->gnode].pnode;
  return jplan_node(b, r, sn->side, pn, sn->side ? vd_graph_rank(g, g->plan->nodes[pn].rank, sn->replica) : -1,
                    g->nodes[sn->gnode].mb);
}

/* Distinct flagged ranks (pass 0) or microbatches (pass 1), sorted. */
static json_t *jflagged_distinct(vd_jb *b, const vd_run *r, const vd_stage_verdict *v, int pass) {
  json_t *a = vd_jb_arr(b);
  int64_t prev = -1;
  for (;;) {
    int64_t best = -1;
    for (size_t i = 0; i < v->n_flagged; i++) {
      piece_info pi;
      vd_report_i_piece_facts(r, v->flagged_pieces[i], &pi);
      int64_t x = pass == 0 ? pi.rank : pi.mb;
      if (x > prev && (best < 0 || x < best)) best = x;
    }
    if (best < 0) break;
    vd_jb_push(b, a, vd_jb_int(b, best));
    prev = best;
  }
  return a;
}

static json_t *jelements(vd_jb *b, const vd_run *r, const vd_stage *st, const vd_stage_verdict *v) {
  json_t *a = vd_jb_arr(b);
  for (size_t e = 0; e < v->n_elems; e++) {
    const vd_stage_cex_elem *ce = &v->elems[e];
    const vd_stage_value *sv = &st->vals[st->targets[ce->target].svalue];
    json_t *o = vd_jb_obj(b), *idx = vd_jb_arr(b), *copies = vd_jb_arr(b);
    vd_jb_set(b, o, "target", vd_jb_int(b, ce->target));
    for (int k = 0; k < sv->ndim; k++) vd_jb_push(b, idx, vd_jb_int(b, ce->elem[k]));
    vd_jb_set(b, o, "index", idx);
    vd_jb_set(b, o, "single", vd_jb_str(b, ce->single_exact)); /* exact rationals stay strings */
    for (uint32_t k = 0; k < ce->n_copies; k++) {
      const vd_stage_cex_copy *cp = &v->copies[ce->copy_off + k];
      json_t *c = vd_jb_obj(b);
      vd_jb_set(b, c, "piece", cp->piece >= 0 ? jpiece(b, r, cp->piece) : json_null());
      vd_jb_set(b, c, "sum_of_parts", vd_jb_bool(b, cp->piece < 0));
      vd_jb_set(b, c, "value", vd_jb_str(b, cp->exact));
      vd_jb_set(b, c, "differs", vd_jb_bool(b, cp->disagrees));
      vd_jb_push(b, copies, c);
    }
    vd_jb_set(b, o, "copies", copies);
    vd_jb_push(b, a, o);
  }
  return a;
}

static json_t *json_stage_failure(vd_jb *b, const vd_run *r, size_t stage) {
  const vd_stage *st = &r->set.stages[stage];
  const vd_stage_verdict *v = &r->verdicts[stage];
  json_t *o = vd_jb_obj(b), *targets = vd_jb_arr(b), *flagged = vd_jb_arr(b), *nodes = vd_jb_arr(b),
         *hyps = vd_jb_arr(b), *inputs = vd_jb_arr(b);
  vd_jb_set(b, o, "kind", vd_jb_str(b, "stage"));
  vd_jb_set(b, o, "stage", vd_jb_int(b, st->id));
  vd_jb_set(b, o, "class", vd_jb_int_or_null(b, st->canon_class));
  vd_jb_set(b, o, "replicas", vd_jb_int(b, st->n_rep ? st->n_rep : 1));
  vd_jb_set(b, o, "diagnosis", vd_jb_str(b, vd_diagnosis_names[v->diagnosis]));
  vd_jb_set(b, o, "factor", vd_jb_str(b, v->factor));
  vd_jb_set(b, o, "has_counterexample", vd_jb_bool(b, v->n_elems != 0));
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
    int inf = r->inferred && t->n_pieces && r->inferred[r->lt.pieces[st->idx[t->piece_off]].ptensor];
    json_t *to = vd_jb_obj(b);
    vd_jb_set(b, to, "single", vd_jb_str(b, vd_plan_s(&r->sp, ts->name)));
    vd_jb_set(b, to, "slice", jslice(b, t->lo, t->hi, sv->ndim));
    vd_jb_set(b, to, "parts", vd_jb_int(b, t->part_n));
    vd_jb_set(b, to, "pieces", vd_jb_int(b, t->n_pieces));
    vd_jb_set(b, to, "inferred", vd_jb_bool(b, inf));
    vd_jb_push(b, targets, to);
  }
  vd_jb_set(b, o, "targets", targets);
  for (size_t i = 0; i < v->n_flagged; i++) vd_jb_push(b, flagged, jpiece(b, r, v->flagged_pieces[i]));
  vd_jb_set(b, o, "flagged", flagged);
  vd_jb_set(b, o, "ranks", jflagged_distinct(b, r, v, 0));
  vd_jb_set(b, o, "microbatches", jflagged_distinct(b, r, v, 1));
  for (uint32_t i = 0; i < st->n_nodes; i++) vd_jb_push(b, nodes, jstage_node(b, r, &st->nodes[i]));
  vd_jb_set(b, o, "nodes", nodes);
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    if (sv->side != 1 || sv->producer >= 0 || sv->leaf_piece < 0) continue;
    vd_jb_push(b, hyps, jpiece(b, r, sv->leaf_piece));
  }
  vd_jb_set(b, o, "hypotheses", hyps);
  char why[256];
  int32_t dn = vd_rep_diverging(r, stage, why, sizeof(why));
  if (dn >= 0) {
    const vd_stage_node *sn = &st->nodes[dn];
    const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
    uint32_t pn = g->nodes[sn->gnode].pnode;
    json_t *d = vd_jb_obj(b);
    vd_jb_set(b, d, "stage_node", vd_jb_int(b, dn));
    jplan_node_fields(b, d, r, sn->side, pn, sn->side ? vd_graph_rank(g, g->plan->nodes[pn].rank, sn->replica) : -1,
                      g->nodes[sn->gnode].mb);
    vd_jb_set(b, d, "why", vd_jb_str(b, why));
    vd_jb_set(b, o, "first_diverging_node", d);
  } else {
    vd_jb_set(b, o, "first_diverging_node", json_null());
  }
  for (size_t i = 0; i < v->n_inputs; i++) {
    json_t *in = vd_jb_obj(b);
    vd_jb_set(b, in, "name", vd_jb_str(b, v->inputs[i].name));
    vd_jb_set(b, in, "value", vd_jb_str(b, v->inputs[i].exact));
    vd_jb_push(b, inputs, in);
  }
  vd_jb_set(b, o, "inputs", inputs);
  vd_jb_set(b, o, "elements", jelements(b, r, st, v));
  return o;
}

/* A structural entry with structured fields: plan, node record, tensor
 * record, rank/replica/mb (null when none), operand field, detail. */
static json_t *json_issue(vd_jb *b, const vd_run *r, const vd_issue *is) {
  const vd_plan_t *p = is->single ? &r->sp : &r->pp;
  json_t *o = vd_jb_obj(b);
  vd_jb_set(b, o, "kind", vd_jb_str(b, "structural"));
  vd_jb_set(b, o, "diagnosis", vd_jb_str(b, vd_diagnosis_names[is->diagnosis]));
  vd_jb_set(b, o, "source", vd_jb_str(b, is->source));
  vd_jb_set(b, o, "issue", vd_jb_str(b, is->kind_name));
  vd_jb_set(b, o, "plan", vd_jb_str(b, is->single ? "single" : "parallel"));
  vd_jb_set(b, o, "node",
            is->pnode >= 0 && (size_t)is->pnode < p->n_nodes ? jplan_node(b, r, !is->single, is->pnode, is->rank, is->mb)
                                                             : json_null());
  if (is->tensor >= 0 && (size_t)is->tensor < p->n_tensors) {
    const vd_tensor_t *t = &p->tensors[is->tensor];
    json_t *to = vd_jb_obj(b);
    vd_jb_set(b, to, "tensor_id", vd_jb_int(b, t->id));
    vd_jb_set(b, to, "name", vd_jb_str(b, vd_plan_s(p, t->name)));
    vd_jb_set(b, o, "tensor", to);
  } else {
    vd_jb_set(b, o, "tensor", json_null());
  }
  vd_jb_set(b, o, "single_tensor",
            vd_jb_str(b, is->stensor >= 0 && (size_t)is->stensor < r->sp.n_tensors
                             ? vd_plan_s(&r->sp, r->sp.tensors[is->stensor].name)
                             : NULL));
  vd_jb_set(b, o, "rank", vd_jb_int_or_null(b, is->rank));
  vd_jb_set(b, o, "replica", vd_jb_int_or_null(b, is->replica));
  vd_jb_set(b, o, "mb", vd_jb_int_or_null(b, is->mb));
  vd_jb_set(b, o, "field", vd_jb_str(b, is->field[0] ? is->field : NULL));
  vd_jb_set(b, o, "detail", vd_jb_str(b, is->detail));
  return o;
}

static json_t *jints64(vd_jb *b, const int64_t *v, size_t n) {
  json_t *a = vd_jb_arr(b);
  for (size_t i = 0; i < n; i++) vd_jb_push(b, a, vd_jb_int(b, v[i]));
  return a;
}
static json_t *jints32(vd_jb *b, const int32_t *v, size_t n) {
  json_t *a = vd_jb_arr(b);
  for (size_t i = 0; i < n; i++) vd_jb_push(b, a, vd_jb_int(b, v[i]));
  return a;
}

/* '\n'-joined lines as an array of strings ([] for ""). */
static json_t *jlines(vd_jb *b, const char *lines) {
  json_t *a = vd_jb_arr(b);
  for (const char *s = lines; *s;) {
    const char *e = strchr(s, '\n');
    char line[512];
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len >= sizeof(line)) len = sizeof(line) - 1; /* a frame is a path, a line and a function */
    memcpy(line, s, len);
    line[len] = '\0';
    vd_jb_push(b, a, vd_jb_str(b, line));
    if (!e) break;
    s = e + 1;
  }
  return a;
}

static json_t *json_finding(vd_jb *b, const vd_run *r, const vd_finding *fd) {
  char title[512];
  vd_rep_fmt_title(title, sizeof(title), r, fd);
  json_t *o = vd_jb_obj(b), *stages = vd_jb_arr(b);
  vd_jb_set(b, o, "diagnosis", vd_jb_str(b, vd_diagnosis_names[fd->diagnosis]));
  vd_jb_set(b, o, "title", vd_jb_str(b, title));
  vd_jb_set(b, o, "factor", vd_jb_str(b, fd->structural ? "" : r->verdicts[fd->rep].factor));
  vd_jb_set(b, o, "node", fd->pnode >= 0 ? jplan_node(b, r, fd->side, fd->pnode, fd->node_rank, fd->node_mb) : json_null());
  vd_jb_set(b, o, "why", vd_jb_str(b, fd->why));
  if (fd->via_pnode >= 0) vd_jb_set(b, o, "via_node", jplan_node(b, r, 1, fd->via_pnode, fd->via_rank, fd->via_mb));
  vd_jb_set(b, o, "stack", jlines(b, vd_rep_finding_stack(r, fd)));
  vd_jb_set(b, o, "hint", vd_jb_str(b, vd_findings_hint(fd->diagnosis)));
  vd_jb_set(b, o, "ranks", jints64(b, fd->ranks, fd->n_ranks));
  vd_jb_set(b, o, "microbatches", jints32(b, fd->mbs, fd->n_mbs));
  vd_jb_set(b, o, "layers", jints32(b, fd->layers, fd->n_layers));
  for (size_t i = 0; i < fd->n_stages; i++) vd_jb_push(b, stages, vd_jb_int(b, (int64_t)fd->stages[i]));
  vd_jb_set(b, o, "stages", stages);
  vd_jb_set(b, o, "stage_count", vd_jb_int(b, (int64_t)fd->n_stages));
  vd_jb_set(b, o, "per_replica_stages", vd_jb_int(b, (int64_t)fd->n_instances));
  vd_jb_set(b, o, "structural_entries", vd_jb_int(b, (int64_t)fd->n_issues));
  vd_jb_set(b, o, "representative",
            fd->structural ? json_issue(b, r, &r->issues[fd->rep]) : json_stage_failure(b, r, fd->rep));
  return o;
}

static json_t *json_summary(vd_jb *b, const vd_run *r, const vd_findings *fs, int cache_on) {
  size_t cg_eq, cg_inc;
  vd_rep_class_counts(r, &cg_eq, &cg_inc);
  json_t *o = vd_jb_obj(b), *secs = vd_jb_obj(b);
  const struct {
    const char *key;
    size_t v;
  } counts[] = {
      {"stages", r->set.n_stages},
      {"classes", r->n_solved},
      {"reduced", r->n_reduced},
      {"by_normal_form", r->n_fast},
      {"equivalent", r->n_equiv},
      {"not_equivalent", r->n_not_equiv},
      {"inconclusive", r->n_inconclusive},
      {"structural", r->n_issues + r->n_issues_dropped},
      {"structural_not_listed", r->n_issues_dropped},
      {"findings", fs->n},
      {"per_replica_stages", r->n_represented},
      {"class_groups_equivalent", cg_eq},
      {"class_groups_inconclusive", cg_inc},
      {"lineages_annotated", r->infer.n_annotated},
      {"lineages_inferred", r->infer.n_inferred - r->n_dropped},
      {"lineages_dropped", r->n_dropped},
  };
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
    vd_jb_set(b, o, counts[i].key, vd_jb_int(b, (int64_t)counts[i].v));
  vd_jb_set(b, o, "threads", vd_jb_int(b, r->threads_used));
  vd_jb_set(b, o, "peak_bytes", vd_jb_int(b, (int64_t)r->peak_bytes));
  vd_jb_set(b, o, "peak_tracked_bytes", vd_jb_int(b, (int64_t)r->peak_tracked_bytes));
  for (int i = 0; i < VD_RUN_PHASES; i++) vd_jb_set(b, secs, vd_run_phase_names[i], vd_jb_real(b, r->phase_s[i], 4));
  vd_jb_set(b, o, "seconds", secs);
  if (r->config_cached) {
    json_t *u = vd_jb_obj(b);
    vd_jb_set(b, u, "stages", vd_jb_int(b, (int64_t)r->cached.n_stages));
    vd_jb_set(b, u, "classes", vd_jb_int(b, (int64_t)r->cached.n_classes));
    vd_jb_set(b, o, "unchanged_since_proven", u);
  }
  if (cache_on) {
    const vd_cache_stats *cs = &r->cache_stats;
    json_t *c = vd_jb_obj(b);
    const struct {
      const char *key;
      size_t v;
    } pc[] = {{"reused", r->n_cache_reused}, {"from_directory", cs->hits_disk}, {"from_process", cs->hits_memory},
              {"stored", cs->stored},        {"ignored", cs->ignored},       {"write_errors", cs->write_errors}};
    for (size_t i = 0; i < sizeof(pc) / sizeof(pc[0]); i++) vd_jb_set(b, c, pc[i].key, vd_jb_int(b, (int64_t)pc[i].v));
    vd_jb_set(b, o, "proof_cache", c);
  }
  return o;
}

/* The whole report as a jansson document (NULL-free unless b->oom). */
static json_t *json_report(vd_jb *b, const vd_run *r, const vd_run_opts *o, const vd_findings *fs) {
  json_t *root = vd_jb_obj(b), *tool = vd_jb_obj(b), *inputs = vd_jb_obj(b);
  json_t *findings = vd_jb_arr(b), *failures = vd_jb_arr(b), *inconclusive = vd_jb_arr(b);
  vd_jb_set(b, root, "schema_version", vd_jb_int(b, VD_REPORT_SCHEMA_VERSION));
  vd_jb_set(b, tool, "name", vd_jb_str(b, "verdict"));
  vd_jb_set(b, tool, "version", vd_jb_str(b, VD_VERSION_STRING));
  vd_jb_set(b, root, "tool", tool);
  vd_jb_set(b, inputs, "single", vd_jb_str(b, o->sm));
  vd_jb_set(b, inputs, "parallel", vd_jb_str(b, o->pm));
  vd_jb_set(b, root, "inputs", inputs);
  vd_provenance pv;
  vd_prov_build(r, &pv);
  vd_prov_json(b, root, r, o, &pv);
  vd_jb_set(b, root, "verdict", vd_jb_str(b, verdict_json(r)));
  vd_jb_set(b, root, "exit_code", vd_jb_int(b, vd_run_exit_code(r)));
  vd_jb_set(b, root, "summary", json_summary(b, r, fs, o->cache != NULL));
  for (size_t k = 0; k < fs->n && !b->oom; k++) vd_jb_push(b, findings, json_finding(b, r, &fs->v[k]));
  vd_jb_set(b, root, "findings", findings);
  for (size_t i = 0; i < r->n_issues && !b->oom; i++) vd_jb_push(b, failures, json_issue(b, r, &r->issues[i]));
  int shown = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages && !b->oom; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (o->max_failures > 0 && shown >= o->max_failures) break;
    vd_jb_push(b, failures, json_stage_failure(b, r, i));
    shown++;
  }
  vd_jb_set(b, root, "failures", failures);
  for (size_t i = 0; r->verdicts && i < r->set.n_stages && !b->oom; i++) {
    if (r->verdicts[i].verdict != VD_SMT_INCONCLUSIVE) continue;
    json_t *e = vd_jb_obj(b);
    vd_jb_set(b, e, "stage", vd_jb_int(b, (int64_t)i));
    vd_jb_set(b, e, "limit", vd_jb_str(b, vd_smt_limit_names[r->verdicts[i].limit]));
    vd_jb_set(b, e, "work", vd_jb_int(b, (int64_t)r->verdicts[i].work));
    vd_jb_set(b, e, "reason", vd_jb_str(b, r->verdicts[i].reason));
    vd_jb_push(b, inconclusive, e);
  }
  /* Limits reached outside any stage: no stage, the limit named in the
   * reason; "cut": a bound of the stage cut (stages/); "replicas": the
   * replica work checked before anything is cut (verifier/run.c). */
  for (size_t i = 0; i < r->n_limits && !b->oom; i++) {
    json_t *e = vd_jb_obj(b);
    vd_jb_set(b, e, "stage", json_null());
    vd_jb_set(b, e, "limit", vd_jb_str(b, strcmp(r->limits[i].source, "stages") ? "replicas" : "cut"));
    vd_jb_set(b, e, "work", vd_jb_int(b, 0));
    vd_jb_set(b, e, "reason", vd_jb_str(b, r->limits[i].detail));
    vd_jb_push(b, inconclusive, e);
  }
  vd_jb_set(b, root, "inconclusive", inconclusive);
  json_t *warnings = vd_jb_arr(b);
  for (size_t i = 0; i < r->lt.n_warnings && !b->oom; i++) {
    json_t *e = vd_jb_obj(b);
    vd_jb_set(b, e, "kind", vd_jb_str(b, r->lt.warnings[i].kind_name));
    vd_jb_set(b, e, "detail", vd_jb_str(b, r->lt.warnings[i].detail));
    vd_jb_push(b, warnings, e);
  }
  vd_jb_set(b, root, "warnings", warnings);
  return root;
}

vd_rc vd_report_json(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  vd_findings fs;
  VD_CHECK(vd_findings_build(r, &fs, d));
  vd_jb b = {0};
  json_t *root = json_report(&b, r, o, &fs);
  vd_findings_free(&fs);
  if (b.oom) {
    json_decref(root);
    return VD_OOM(d);
  }
  vd_outfile of; /* common/outfile.h: "-" is stdout */
  vd_rc orc = vd_outfile_open(&of, path, VD_OUTFILE_STDOUT, d);
  if (orc != VD_OK) {
    json_decref(root);
    return orc;
  }
  int wrc = vd_jb_write(root, of.fp, 10);
  json_decref(root);
  if (wrc != 0) {
    vd_outfile_abort(&of);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JSON report failed");
  }
  return vd_outfile_commit(&of, d);
}

/* ---- --dump-stages ------------------------------------------------------------ */

static void shape_str(char *buf, size_t n, const int64_t *s, int ndim) {
  size_t at = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && at < n; i++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "," : "", (long long)s[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

vd_rc vd_report_stages(const vd_run *r, const char *path, vd_diag *d) {
  vd_outfile of;
  VD_CHECK(vd_outfile_open(&of, path, 0, d));
  FILE *f = of.fp;
  char line[512], a[128], b[128];
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    const vd_stage_verdict *v = r->verdicts ? &r->verdicts[i] : NULL;
    fprintf(f, "stage %u class %d %s%s", st->id, st->canon_class, st->reduced ? "reduced" : "unreduced",
            v ? (v->verdict == VD_SMT_EQUIVALENT ? " equivalent" : v->verdict == VD_SMT_NOT_EQUIVALENT ? " NOT-EQUIVALENT" : " inconclusive") : "");
    if (st->n_rep > 1) fprintf(f, " (stands for %u replicas)", st->n_rep);
    if (st->n_mb > 1) fprintf(f, " (stands for %u microbatches)", st->n_mb);
    if (st->sum_parts)
      fprintf(f, " (part %lld of a sum of %lld by part, rows [%lld, %lld) of %lld)", (long long)st->cut_part,
              (long long)st->sum_parts, (long long)st->sum_lo, (long long)st->sum_hi, (long long)st->sum_ext);
    if (st->reduced && st->onehot_kept_node >= 0 && (uint32_t)st->onehot_kept_node < st->n_nodes) {
      int op = st->nodes[st->onehot_kept_node].op;
      fprintf(f, " (one-hot classes kept whole: node %d, %s, is not affine in it)", st->onehot_kept_node,
              op >= 0 && op < VD_OP__COUNT ? vd_op_name((vd_op_id)op) : "?");
    }
    fputc('\n', f);
    for (uint32_t t = 0; t < st->n_targets; t++) {
      const vd_stage_target *tg = &st->targets[t];
      const vd_stage_value *sv = &st->vals[tg->svalue];
      const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
      vd_lin_fmt_slice(tg->lo, tg->hi, sv->ndim, a, sizeof(a));
      vd_lin_fmt_slice(tg->rlo, tg->rhi, sv->ndim, b, sizeof(b));
      fprintf(f, "  target '%s' %s (reduced %s) parts %lld, %u piece(s)\n", VD_SHOW(vd_plan_s(&r->sp, ts->name)), a, b,
              (long long)tg->part_n, tg->n_pieces);
    }
    for (uint32_t k = 0; k < st->n_vals; k++) {
      const vd_stage_value *sv = &st->vals[k];
      const vd_graph_t *g = sv->side ? &r->pg : &r->sg;
      const vd_tensor_t *t = &g->plan->tensors[g->values[sv->value].tensor];
      shape_str(a, sizeof(a), sv->shape, sv->ndim);
      shape_str(b, sizeof(b), sv->rshape, sv->ndim);
      fprintf(f, "  v%u %s '%s' %s -> %s%s\n", k, sv->side ? "parallel" : "single", VD_SHOW(vd_plan_s(g->plan, t->name)), a, b,
              sv->producer < 0 ? (sv->leaf_piece >= 0 ? " hypothesis" : " leaf") : "");
    }
    for (uint32_t k = 0; k < st->n_nodes; k++) {
      vd_rep_fmt_node(line, sizeof(line), r, &st->nodes[k]);
      fprintf(f, "  n%u %s\n", k, VD_SHOW(line));
    }
  }
  return vd_outfile_commit(&of, d);
}
