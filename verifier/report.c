/*
 * verifier/report.c - the human report and the JSON report of a run.
 *
 * Both print the same content in the same deterministic order: the verdict,
 * the summary (stages, classes, time per phase, memory), every structural
 * issue, then every failing stage (up to --max-failures in detail) with its
 * target lineage, nodes, hypotheses, the counterexample's exact values with
 * the disagreeing copies flagged, the first diverging parallel node and the
 * diagnosis; then inconclusive stages with their reasons.
 *
 * Failures are reported as findings (verifier/findings.c): one block per
 * root cause with its footprint, a hint, and one representative stage or
 * structural entry printed in full.  The JSON report keeps every failing
 * stage in "failures" and adds "findings"; docs/report-format.md is its
 * contract.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "cli.h"
#include "findings.h"
#include "report.h"
#include "run.h"

static const char *verdict_word(const vd_run *r) {
  switch (vd_run_exit_code(r)) {
  case 0: return "EQUIVALENT";
  case 1: return "NOT EQUIVALENT";
  default: return "INCONCLUSIVE";
  }
}

static const char *verdict_json(const vd_run *r) {
  switch (vd_run_exit_code(r)) {
  case 0: return "equivalent";
  case 1: return "not_equivalent";
  default: return "inconclusive";
  }
}

/* ---- facts about pieces and nodes ------------------------------------------ */

typedef struct {
  const char *tensor;
  int64_t id;     /* parallel tensor file id */
  int64_t rank;   /* global */
  int32_t mb, replica;
  int64_t part_k, part_n;
  const int64_t *lo, *hi;
  int ndim;
} piece_info;

static void piece_facts(const vd_run *r, int32_t piece, piece_info *pi) {
  const vd_lin_piece *pc = &r->lt.pieces[piece];
  const vd_tensor_t *t = &r->pp.tensors[pc->ptensor];
  pi->tensor = vd_plan_s(&r->pp, t->name);
  pi->id = t->id;
  pi->rank = (int64_t)pc->replica * r->pp.world.stored_ranks + t->rank;
  pi->mb = pc->mb;
  pi->replica = pc->replica;
  pi->part_k = pc->part_k;
  pi->part_n = pc->part_n;
  pi->lo = pc->lo;
  pi->hi = pc->hi;
  pi->ndim = t->ndim;
}


/* ---- text -------------------------------------------------------------------- */

void vd_report_text_stage(const vd_run *r, size_t stage, FILE *f) {
  const vd_stage *st = &r->set.stages[stage];
  const vd_stage_verdict *v = &r->verdicts[stage];
  fprintf(f, "-- stage %u: NOT EQUIVALENT -- diagnosis %s", st->id, vd_diagnosis_names[v->diagnosis]);
  if (v->factor[0]) fprintf(f, " (%s%s)", v->diagnosis == VD_DX_SCALE || v->diagnosis == VD_DX_EXTRA_REDUCTION ? "factor " : "", v->factor);
  fputc('\n', f);
  char sl[256], line[512];
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
    vd_lin_fmt_slice(t->lo, t->hi, sv->ndim, sl, sizeof(sl));
    int inf = r->inferred && t->n_pieces && r->inferred[r->lt.pieces[st->idx[t->piece_off]].ptensor];
    fprintf(f, "   target: single '%s' %s%s, %u parallel piece(s)%s\n", vd_plan_s(&r->sp, ts->name), sl,
            t->part_n > 1 ? " as a sum of parts" : "", t->n_pieces, inf ? " (inferred lineage)" : "");
  }
  uint32_t n_single = 0, n_par = 0;
  for (uint32_t i = 0; i < st->n_nodes; i++) n_single += st->nodes[i].side == 0;
  fprintf(f, "   parallel nodes (%u single-device nodes not listed):\n", n_single);
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    if (st->nodes[i].side == 0) continue;
    if (++n_par > 24) {
      fprintf(f, "     ... (%u parallel nodes in all)\n", st->n_nodes - n_single);
      break;
    }
    vd_rep_fmt_node(line, sizeof(line), r, &st->nodes[i]);
    fprintf(f, "     %s\n", line);
  }
  fprintf(f, "   hypotheses (proven or initial lineages):\n");
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    if (sv->side != 1 || sv->producer >= 0 || sv->leaf_piece < 0) continue;
    piece_info pi;
    piece_facts(r, sv->leaf_piece, &pi);
    vd_lin_fmt_slice(pi.lo, pi.hi, pi.ndim, sl, sizeof(sl));
    fprintf(f, "     '%s' (t%lld) rank %lld", pi.tensor, (long long)pi.id, (long long)pi.rank);
    if (pi.mb >= 0) fprintf(f, " mb %d", pi.mb);
    fprintf(f, " = %s", sl);
    if (pi.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pi.part_k, (long long)pi.part_n);
    if (r->inferred && r->inferred[r->lt.pieces[sv->leaf_piece].ptensor]) fputs(" (inferred, proven)", f);
    fputc('\n', f);
  }
  if (v->n_inputs) {
    fprintf(f, "   counterexample inputs (reduced shapes):");
    for (size_t i = 0; i < v->n_inputs && i < 12; i++) fprintf(f, "%s %s=%s", i ? "," : "", v->inputs[i].name, v->inputs[i].exact);
    if (v->n_inputs > 12) fprintf(f, ", ... (%zu in all)", v->n_inputs);
    fputc('\n', f);
  }
  for (size_t e = 0; e < v->n_elems; e++) {
    const vd_stage_cex_elem *ce = &v->elems[e];
    const vd_stage_value *sv = &st->vals[st->targets[ce->target].svalue];
    char el[128] = "";
    size_t at = 0;
    for (int k = 0; k < sv->ndim && at < sizeof(el); k++)
      at += (size_t)snprintf(el + at, sizeof(el) - at, "%s%lld", k ? "," : "", (long long)ce->elem[k]);
    fprintf(f, "   element [%s] (reduced): Ts = %s\n", el, ce->single_exact);
    for (uint32_t k = 0; k < ce->n_copies; k++) {
      const vd_stage_cex_copy *cp = &v->copies[ce->copy_off + k];
      if (cp->piece >= 0) {
        piece_info pi;
        piece_facts(r, cp->piece, &pi);
        fprintf(f, "     Tp '%s' (t%lld) rank %lld", pi.tensor, (long long)pi.id, (long long)pi.rank);
        if (pi.mb >= 0) fprintf(f, " mb %d", pi.mb);
        if (pi.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pi.part_k, (long long)pi.part_n);
      } else {
        fprintf(f, "     sum of the parts");
      }
      fprintf(f, " = %s%s\n", cp->exact, cp->disagrees ? "   <-- differs" : "");
    }
  }
  if (v->diagnosis == VD_DX_MISSING_REDUCTION)
    fprintf(f, "   Ts = sum of the Tp copies, while each copy claims the whole value: a reduction is missing\n");
  char why[256];
  int32_t dn = vd_rep_diverging(r, stage, why, sizeof(why));
  if (dn >= 0) {
    vd_rep_fmt_node(line, sizeof(line), r, &st->nodes[dn]);
    fprintf(f, "   first diverging parallel node: %s: %s\n", line, why);
  }
  if (v->n_flagged) {
    fprintf(f, "   flagged:");
    for (size_t i = 0; i < v->n_flagged; i++) {
      piece_info pi;
      piece_facts(r, v->flagged_pieces[i], &pi);
      fprintf(f, "%s '%s' (t%lld) rank %lld", i ? "," : "", pi.tensor, (long long)pi.id, (long long)pi.rank);
      if (pi.mb >= 0) fprintf(f, " mb %d", pi.mb);
    }
    fputc('\n', f);
  }
}

/* -v: the stages that took longest to solve, and the stages that did the
 * most deterministic work (normal-form steps + Z3 resource units: the
 * measure that --stage-budget limits, the same on every machine);
 * representatives of their class only (members copy their verdict), with
 * their sizes, so a slow run can be traced to its stages (then
 * --dump-stages shows them). */
static double key_ms(const vd_stage_verdict *v) { return v->ms; }
static double key_work(const vd_stage_verdict *v) { return (double)v->work; }

static void text_top(const vd_run *r, FILE *f, double (*key)(const vd_stage_verdict *), const char *title) {
  enum { TOP = 5 };
  size_t top[TOP], n = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (st->canon_class >= 0 && (uint32_t)st->canon_class != st->id) continue;
    double ms = key(&r->verdicts[i]);
    size_t k = n < TOP ? n++ : TOP;
    if (k == TOP && ms <= key(&r->verdicts[top[TOP - 1]])) continue;
    if (k == TOP) k = TOP - 1;
    while (k > 0 && key(&r->verdicts[top[k - 1]]) < ms) {
      top[k] = top[k - 1];
      k--;
    }
    top[k] = i;
  }
  if (!n) return;
  fprintf(f, "  %s:", title);
  for (size_t k = 0; k < n; k++) {
    const vd_stage *st = &r->set.stages[top[k]];
    const vd_stage_verdict *v = &r->verdicts[top[k]];
    fprintf(f, "%s %u (%.3fs, work %llu, %u nodes, %u values)", k ? "," : "", st->id, v->ms / 1e3,
            (unsigned long long)v->work, st->n_nodes, st->n_vals);
  }
  fputc('\n', f);
}

/* -v: every inferred lineage still standing (proven when the verdict is
 * EQUIVALENT), one line per parallel tensor. */
static void text_inferred(const vd_run *r, FILE *f) {
  char sl[256];
  for (size_t t = 0; t < r->pp.n_tensors; t++) {
    if (!r->inferred[t]) continue;
    const vd_tensor_t *pt = &r->pp.tensors[t];
    int64_t s = vd_plan_find_tensor(&r->sp, pt->lin.full);
    vd_lin_fmt_slice(pt->lin.lo, pt->lin.hi, pt->ndim, sl, sizeof(sl));
    fprintf(f, "  inferred: '%s' (t%lld, rank %d) = '%s' %s", vd_plan_s(&r->pp, pt->name), (long long)pt->id, pt->rank,
            s >= 0 ? vd_plan_s(&r->sp, r->sp.tensors[s].name) : "?", sl);
    if (pt->lin.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pt->lin.part_k, (long long)pt->lin.part_n);
    fputc('\n', f);
  }
}

static void text_slowest(const vd_run *r, FILE *f) {
  text_top(r, f, key_ms, "slowest stages");
  text_top(r, f, key_work, "hardest stages by work");
}

void vd_report_text_issue(const vd_run *r, const vd_issue *is, FILE *f) {
  (void)r;
  fprintf(f, "-- %s (%s %s)", vd_diagnosis_names[is->diagnosis], is->source, is->kind_name);
  if (is->rank >= 0) fprintf(f, " rank %lld", (long long)is->rank);
  if (is->mb >= 0) fprintf(f, " mb %lld", (long long)is->mb);
  fprintf(f, "\n   %s\n", is->detail);
}

void vd_report_text_finding(const vd_run *r, const vd_finding *fd, FILE *f) {
  char title[512], fp[1024];
  vd_rep_fmt_title(title, sizeof(title), r, fd);
  vd_rep_fmt_footprint(fp, sizeof(fp), fd);
  fprintf(f, "%s\n", title);
  fprintf(f, "   footprint: %s\n", fp);
  if (fd->n_stages > 1 || (fd->structural && fd->n_stages)) {
    fprintf(f, "   %s:", fd->structural ? "failing stages that follow from it" : "stages");
    for (size_t j = 0; j < fd->n_stages && j < 24; j++) fprintf(f, " %zu", fd->stages[j]);
    if (fd->n_stages > 24) fprintf(f, " ... (%zu in all)", fd->n_stages);
    fputc('\n', f);
  }
  fprintf(f, "   hint: %s\n", vd_findings_hint(fd->diagnosis));
  if (fd->structural) {
    fprintf(f, "   representative entry%s:\n", fd->n_issues > 1 ? " (the others differ in rank, microbatch or layer)" : "");
    vd_report_text_issue(r, &r->issues[fd->rep], f);
  } else {
    fprintf(f, "   representative stage:\n");
    vd_report_text_stage(r, fd->rep, f);
  }
}

void vd_report_xml_text_finding(const vd_run *r, const vd_finding *fd, FILE *f) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (m) {
    vd_report_text_finding(r, fd, m);
    fclose(m);
  }
  if (text) vd_cli_xml_text(f, text, len);
  free(text); /* open_memstream's buffer comes from the C library */
}

/* One block per finding: title, footprint, hint, and its representative in
 * full; beyond --max-failures, one line per finding. */
static void text_findings(const vd_run *r, const vd_run_opts *o, const vd_findings *fs, FILE *f) {
  char title[512], fp[1024];
  for (size_t k = 0; k < fs->n; k++) {
    const vd_finding *fd = &fs->v[k];
    vd_rep_fmt_title(title, sizeof(title), r, fd);
    vd_rep_fmt_footprint(fp, sizeof(fp), fd);
    if (o->max_failures > 0 && k >= (size_t)o->max_failures) {
      /* Past the cap, the titles of as many more; --json lists them all. */
      if (k == (size_t)o->max_failures)
        fprintf(f, "\n(%zu findings in all; --max-failures %d; --json lists every one)\n", fs->n, o->max_failures);
      if (k >= 2 * (size_t)o->max_failures) break;
      fprintf(f, "== finding %zu: %s; %s\n", k + 1, title, fp);
      continue;
    }
    fprintf(f, "\n== finding %zu of %zu: ", k + 1, fs->n);
    vd_report_text_finding(r, fd, f);
  }
}

/* For a data movement (send/recv) graph node: the participant on rank
 * (the recv), and *from the other participant's rank. */
static int64_t move_end(const vd_run *r, const vd_gnode_t *pg, int32_t rank, int32_t *from) {
  const vd_graph_t *g = &r->pg;
  int64_t mine = -1;
  *from = -1;
  for (uint32_t j = 0; j < pg->n_part; j++) {
    uint32_t q = g->idx[pg->part_off + 2 * j];
    if (q >= r->pp.n_nodes) continue;
    if (r->pp.nodes[q].rank == rank && mine < 0) mine = q;
    else if (*from < 0) *from = r->pp.nodes[q].rank;
  }
  return mine >= 0 ? mine : pg->pnode;
}

/* The plan node that produced input stuck_input of the stuck node (replica
 * 0, its microbatch instance), for the hint line: for a send/recv, the
 * participant on the stuck node's rank (the recv), and *from the rank it
 * receives from.  -1 when the input is an initial value. */
static int64_t stuck_producer(const vd_run *r, int32_t *from) {
  const vd_lin_infer_stats *is = &r->infer;
  const vd_graph_t *g = &r->pg;
  *from = -1;
  if (is->stuck_node < 0 || (size_t)is->stuck_node >= r->pp.n_nodes) return -1;
  int32_t rank = r->pp.nodes[is->stuck_node].rank;
  for (size_t k = 0; k < g->n_nodes; k++) {
    const vd_gnode_t *gn = &g->nodes[k];
    if (gn->mb != is->stuck_mb) continue;
    /* A collective's inputs are its participants' inputs, in group order. */
    int64_t at = -1;
    if (!gn->n_part) {
      if (gn->pnode == (uint32_t)is->stuck_node && gn->replica == 0 && is->stuck_input < gn->n_in)
        at = is->stuck_input;
    } else {
      uint32_t off = 0;
      for (uint32_t j = 0; j < gn->n_part && at < 0; j++) {
        uint32_t q = g->idx[gn->part_off + 2 * j], rep = g->idx[gn->part_off + 2 * j + 1];
        if (q >= r->pp.n_nodes) break;
        if (q == (uint32_t)is->stuck_node && rep == 0 && is->stuck_input < r->pp.nodes[q].n_in)
          at = off + is->stuck_input;
        off += r->pp.nodes[q].n_in;
      }
      if (at >= (int64_t)gn->n_in) at = -1;
    }
    if (at < 0) continue;
    int32_t pk = g->values[g->idx[gn->in_off + (uint32_t)at]].producer;
    if (pk < 0) return -1;
    const vd_gnode_t *pg = &g->nodes[pk];
    if (!pg->n_part) return pg->pnode;
    return move_end(r, pg, rank, from);
  }
  return -1;
}

/* Slices that do not combine usually come from a recv of the wrong peer
 * some operators upstream (elementwise operators keep a slice): the first
 * recv on this rank along the first inputs of the stuck input's producers,
 * at most 32 operators up, or -1. */
static int64_t upstream_recv(const vd_run *r, int64_t producer, int32_t *from) {
  const vd_graph_t *g = &r->pg;
  const vd_lin_infer_stats *is = &r->infer;
  *from = -1;
  if (producer < 0) return -1;
  int32_t rank = r->pp.nodes[producer].rank;
  for (size_t k = 0; k < g->n_nodes; k++) {
    const vd_gnode_t *gn = &g->nodes[k];
    if (gn->n_part || gn->pnode != (uint64_t)producer || gn->replica != 0 || gn->mb != is->stuck_mb) continue;
    for (int steps = 0; steps < 32 && gn->n_in; steps++) {
      int32_t pk = g->values[g->idx[gn->in_off]].producer;
      if (pk < 0) return -1;
      gn = &g->nodes[pk];
      if (gn->n_part) {
        int64_t q = move_end(r, gn, rank, from);
        return q >= 0 && !strcmp(vd_node_op(&r->pp, &r->pp.nodes[q]), "recv") ? q : -1;
      }
    }
    return -1;
  }
  return -1;
}

void vd_report_text(const vd_run *r, const vd_run_opts *o, FILE *f) {
  vd_findings fs;
  vd_diag d;
  vd_diag_clear(&d);
  int have_fs = vd_findings_build(r, &fs, &d) == VD_OK;
  fprintf(f, "%s\n", verdict_word(r));
  fprintf(f, "  stages %zu (classes solved %zu, reduced %zu, by normal form %zu): %zu equivalent, %zu not equivalent, %zu inconclusive\n",
          r->set.n_stages, r->n_solved, r->n_reduced, r->n_fast, r->n_equiv, r->n_not_equiv, r->n_inconclusive);
  if (r->n_skipped_large)
    fprintf(f, "  not solved: %zu of the inconclusive stages, larger than a failing one (they lie past the failure; "
               "docs/verifier.md 6)\n", r->n_skipped_large);
  if (r->n_skipped_decided)
    fprintf(f, "  not solved: %zu of the inconclusive stages, a structural problem of the plan already decides "
               "(docs/verifier.md 1b)\n", r->n_skipped_decided);
  if (r->n_demoted)
    fprintf(f, "  not reported: %zu of the inconclusive stages, failures that rest on an inferred lineage which did "
               "not hold (docs/verifier.md 1b)\n", r->n_demoted);
  if (have_fs && fs.n)
    fprintf(f, "  findings: %zu (failures grouped by root cause; %zu failing stages, %zu structural entries)\n", fs.n,
            r->n_not_equiv, r->n_issues + r->n_issues_dropped);
  if (r->n_represented > r->set.n_stages)
    fprintf(f, "  replica and microbatch symmetry: the %zu stages stand for %zu per-replica, per-microbatch stages\n", r->set.n_stages,
            r->n_represented);
  if (r->n_sum_stages)
    fprintf(f, "  sums by part: %zu stages prove %zu parts of gradient sums, each on its own batch rows\n", r->n_sum_stages,
            r->n_sum_parts);
  if (r->n_limits)
    fprintf(f, "  limits reached: %zu, listed below (`verdict limits`): what they stop is not proven, and is not a "
               "difference\n", r->n_limits);
  if (r->n_issues_dropped)
    fprintf(f, "  structural problems: %zu (%zu listed)\n", r->n_issues + r->n_issues_dropped, r->n_issues);
  else if (r->n_issues)
    fprintf(f, "  structural problems: %zu\n", r->n_issues);
  if (r->infer.n_inferred)
    fprintf(f, "  lineages: %zu annotated, %zu inferred (%zu dropped after a failed proof, %d round(s)), %zu "
               "unannotated left to the stages\n",
            r->infer.n_annotated, r->infer.n_inferred - r->n_dropped, r->n_dropped, r->infer_rounds,
            r->infer.n_unknown + r->n_dropped);
  if (r->inferred && r->infer.stuck_node >= 0 && vd_run_exit_code(r) != 0) {
    /* A hint, not evidence: where propagation first stopped is usually the
     * faulty operator's first consumer (a bug makes the parallel values
     * stop matching the single ones there). */
    const vd_node_t *sn = &r->pp.nodes[r->infer.stuck_node];
    const vd_lin_infer_stats *is = &r->infer;
    fprintf(f, "  lineage inference stopped first at rank %d", sn->rank);
    if (is->stuck_mb >= 0) fprintf(f, " mb %d", is->stuck_mb);
    char phrase[512];
    vd_lin_stuck_phrase(is, phrase, sizeof(phrase));
    fprintf(f, " %s '%s' (node %lld): %s", vd_node_op(&r->pp, sn), vd_plan_s(&r->pp, sn->name), (long long)sn->id,
            phrase);
    if (is->stuck_origin >= 0) {
      const vd_node_t *on = &r->pp.nodes[is->stuck_origin];
      fprintf(f, "; the factor comes from rank %d %s '%s' (node %lld)", on->rank, vd_node_op(&r->pp, on),
              vd_plan_s(&r->pp, on->name), (long long)on->id);
    } else {
      int32_t from = -1;
      int64_t pk = stuck_producer(r, &from);
      if (pk >= 0) {
        const vd_node_t *qn = &r->pp.nodes[pk];
        fprintf(f, "; input %u comes from rank %d %s '%s' (node %lld)", is->stuck_input, qn->rank, vd_node_op(&r->pp, qn),
                vd_plan_s(&r->pp, qn->name), (long long)qn->id);
        if (from >= 0) fprintf(f, ", sent by rank %d", from);
        int64_t rq = is->stuck_why == VD_LIN_STUCK_SLICE && from < 0 ? upstream_recv(r, pk, &from) : -1;
        if (rq >= 0) {
          const vd_node_t *rn = &r->pp.nodes[rq];
          fprintf(f, ", computed from what rank %d %s '%s' (node %lld) received", rn->rank, vd_node_op(&r->pp, rn),
                  vd_plan_s(&r->pp, rn->name), (long long)rn->id);
          if (from >= 0) fprintf(f, " from rank %d", from);
        }
      }
    }
    fprintf(f, "\n");
  }
  if (o->verbose && r->inferred) text_inferred(r, f);
  if (!o->quiet) {
    fprintf(f, "  time:");
    for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, " %s %.3fs", vd_run_phase_names[i], r->phase_s[i]);
    fprintf(f, "; peak %.1f MB (process; verdict's own allocations %.1f MB); %d thread(s)\n", (double)r->peak_bytes / 1e6,
            (double)r->peak_tracked_bytes / 1e6, r->threads_used);
    if (o->verbose && r->cut_budget)
      fprintf(f, "  cut: %llu stage values in the last round (CUT_VALUES_PER_VALUE allows %llu)\n",
              (unsigned long long)r->cut_values, (unsigned long long)r->cut_budget);
    if (o->verbose && r->verdicts) text_slowest(r, f);
  }
  /* --max-failures caps the findings printed in detail (the rest get one
   * line each) and the inconclusive stages listed. */
  size_t cap = o->max_failures > 0 ? (size_t)o->max_failures : SIZE_MAX;
  if (have_fs) {
    text_findings(r, o, &fs, f);
    vd_findings_free(&fs);
  } else {
    fprintf(f, "\n(out of memory while grouping the failures into findings)\n");
  }
  size_t inconclusive = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_INCONCLUSIVE) continue;
    if (r->skipped && r->skipped[i]) continue; /* counted in the "not solved" line above */
    if (inconclusive++ >= cap) {
      fprintf(f, "\n(%zu inconclusive stages in all; --max-failures %d)\n", r->n_inconclusive - r->n_skipped_large - r->n_demoted - r->n_skipped_decided,
              o->max_failures);
      break;
    }
    fprintf(f, "\n-- stage %zu: INCONCLUSIVE: %s\n", i, v->reason);
  }
  for (size_t i = 0; i < r->n_limits; i++) {
    if (i >= cap) {
      fprintf(f, "\n(%zu limits reached in all; --max-failures %d)\n", r->n_limits, o->max_failures);
      break;
    }
    fprintf(f, "\n-- INCONCLUSIVE (limit): %s\n", r->limits[i].detail);
  }
}

/* ---- JSON ------------------------------------------------------------------- */

static void jslice(FILE *f, const int64_t *lo, const int64_t *hi, int ndim) {
  fputc('[', f);
  for (int i = 0; i < ndim; i++) fprintf(f, "%s[%lld,%lld]", i ? "," : "", (long long)lo[i], (long long)hi[i]);
  fputc(']', f);
}

static void jpiece(FILE *f, const vd_run *r, int32_t piece) {
  piece_info pi;
  piece_facts(r, piece, &pi);
  fputs("{\"tensor\":", f);
  vd_cli_json_str(f, pi.tensor);
  fprintf(f, ",\"tensor_id\":%lld", (long long)pi.id);
  fprintf(f, ",\"rank\":%lld,\"replica\":%d,\"mb\":%d,\"part\":[%lld,%lld],\"slice\":", (long long)pi.rank, pi.replica,
          pi.mb, (long long)pi.part_k, (long long)pi.part_n);
  jslice(f, pi.lo, pi.hi, pi.ndim);
  fputc('}', f);
}

/* An integer or null (for "none", i.e. negative). */
static void jint(FILE *f, int64_t x) {
  if (x < 0) fputs("null", f);
  else fprintf(f, "%lld", (long long)x);
}

/* A plan node as a record: {"node","plan","op","name","src","rank","mb","layer"}; src is null when
 * the plan does not say where the user's code calls the operator. */
static void jplan_node_fields(FILE *f, const vd_run *r, int side, int64_t pnode, int64_t rank, int64_t mb) {
  const vd_plan_t *p = side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[pnode];
  fprintf(f, "\"node\":%lld,\"plan\":\"%s\",\"op\":", (long long)pn->id, side ? "parallel" : "single");
  vd_cli_json_str(f, vd_node_op(p, pn));
  fputs(",\"name\":", f);
  vd_cli_json_str(f, vd_plan_s(p, pn->name));
  fputs(",\"src\":", f);
  if (pn->src) vd_cli_json_str(f, vd_plan_s(p, pn->src));
  else fputs("null", f);
  fputs(",\"rank\":", f);
  jint(f, rank);
  fputs(",\"mb\":", f);
  jint(f, mb);
  fputs(",\"layer\":", f);
  jint(f, pn->layer);
}

static void jplan_node(FILE *f, const vd_run *r, int side, int64_t pnode, int64_t rank, int64_t mb) {
  fputc('{', f);
  jplan_node_fields(f, r, side, pnode, rank, mb);
  fputc('}', f);
}

static void jstage_node(FILE *f, const vd_run *r, const vd_stage_node *sn) {
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  uint32_t pn = g->nodes[sn->gnode].pnode;
  jplan_node(f, r, sn->side, pn, sn->side ? vd_graph_rank(g, g->plan->nodes[pn].rank, sn->replica) : -1,
             g->nodes[sn->gnode].mb);
}

static void json_stage_failure(const vd_run *r, size_t stage, FILE *f) {
  const vd_stage *st = &r->set.stages[stage];
  const vd_stage_verdict *v = &r->verdicts[stage];
  fprintf(f, "{\"kind\":\"stage\",\"stage\":%u,\"class\":", st->id);
  jint(f, st->canon_class);
  fprintf(f, ",\"replicas\":%u,\"diagnosis\":\"%s\",\"factor\":", st->n_rep ? st->n_rep : 1, vd_diagnosis_names[v->diagnosis]);
  vd_cli_json_str(f, v->factor);
  fprintf(f, ",\"has_counterexample\":%s,\"targets\":[", v->n_elems ? "true" : "false");
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
    int inf = r->inferred && t->n_pieces && r->inferred[r->lt.pieces[st->idx[t->piece_off]].ptensor];
    fprintf(f, "%s{\"single\":", ti ? "," : "");
    vd_cli_json_str(f, vd_plan_s(&r->sp, ts->name));
    fputs(",\"slice\":", f);
    jslice(f, t->lo, t->hi, sv->ndim);
    fprintf(f, ",\"parts\":%lld,\"pieces\":%u,\"inferred\":%s}", (long long)t->part_n, t->n_pieces, inf ? "true" : "false");
  }
  fputs("],\"flagged\":[", f);
  for (size_t i = 0; i < v->n_flagged; i++) {
    if (i) fputc(',', f);
    jpiece(f, r, v->flagged_pieces[i]);
  }
  /* Distinct flagged ranks and microbatches, sorted. */
  fputs("],\"ranks\":[", f);
  for (int pass = 0; pass < 2; pass++) {
    int first = 1;
    int64_t prev = -1;
    for (;;) {
      int64_t best = -1;
      for (size_t i = 0; i < v->n_flagged; i++) {
        piece_info pi;
        piece_facts(r, v->flagged_pieces[i], &pi);
        int64_t x = pass == 0 ? pi.rank : pi.mb;
        if (x > prev && (best < 0 || x < best)) best = x;
      }
      if (best < 0) break;
      fprintf(f, "%s%lld", first ? "" : ",", (long long)best);
      first = 0;
      prev = best;
    }
    if (pass == 0) fputs("],\"microbatches\":[", f);
  }
  fputs("],\"nodes\":[", f);
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    if (i) fputc(',', f);
    jstage_node(f, r, &st->nodes[i]);
  }
  fputs("],\"hypotheses\":[", f);
  int nh = 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    if (sv->side != 1 || sv->producer >= 0 || sv->leaf_piece < 0) continue;
    if (nh++) fputc(',', f);
    jpiece(f, r, sv->leaf_piece);
  }
  fputs("],\"first_diverging_node\":", f);
  char why[256];
  int32_t dn = vd_rep_diverging(r, stage, why, sizeof(why));
  if (dn >= 0) {
    const vd_stage_node *sn = &st->nodes[dn];
    const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
    uint32_t pn = g->nodes[sn->gnode].pnode;
    fprintf(f, "{\"stage_node\":%d,", dn);
    jplan_node_fields(f, r, sn->side, pn, sn->side ? vd_graph_rank(g, g->plan->nodes[pn].rank, sn->replica) : -1,
                      g->nodes[sn->gnode].mb);
    fputs(",\"why\":", f);
    vd_cli_json_str(f, why);
    fputc('}', f);
  } else {
    fputs("null", f);
  }
  fputs(",\"inputs\":[", f);
  for (size_t i = 0; i < v->n_inputs; i++) {
    fprintf(f, "%s{\"name\":", i ? "," : "");
    vd_cli_json_str(f, v->inputs[i].name);
    fputs(",\"value\":", f);
    vd_cli_json_str(f, v->inputs[i].exact);
    fputc('}', f);
  }
  fputs("],\"elements\":[", f);
  for (size_t e = 0; e < v->n_elems; e++) {
    const vd_stage_cex_elem *ce = &v->elems[e];
    const vd_stage_value *sv = &st->vals[st->targets[ce->target].svalue];
    fprintf(f, "%s{\"target\":%u,\"index\":[", e ? "," : "", ce->target);
    for (int k = 0; k < sv->ndim; k++) fprintf(f, "%s%lld", k ? "," : "", (long long)ce->elem[k]);
    fputs("],\"single\":", f);
    vd_cli_json_str(f, ce->single_exact);
    fputs(",\"copies\":[", f);
    for (uint32_t k = 0; k < ce->n_copies; k++) {
      const vd_stage_cex_copy *cp = &v->copies[ce->copy_off + k];
      fputs(k ? ",{" : "{", f);
      fputs("\"piece\":", f);
      if (cp->piece >= 0) jpiece(f, r, cp->piece);
      else fputs("null", f);
      fprintf(f, ",\"sum_of_parts\":%s,\"value\":", cp->piece >= 0 ? "false" : "true");
      vd_cli_json_str(f, cp->exact);
      fprintf(f, ",\"differs\":%s}", cp->disagrees ? "true" : "false");
    }
    fputs("]}", f);
  }
  fputs("]}", f);
}

/* A structural entry with structured fields: plan, node record, tensor
 * record, rank/replica/mb (null when none), operand field, detail. */
static void json_issue(FILE *f, const vd_run *r, const vd_issue *is) {
  const vd_plan_t *p = is->single ? &r->sp : &r->pp;
  fprintf(f, "{\"kind\":\"structural\",\"diagnosis\":\"%s\",\"source\":\"%s\",\"issue\":\"%s\",\"plan\":\"%s\",\"node\":",
          vd_diagnosis_names[is->diagnosis], is->source, is->kind_name, is->single ? "single" : "parallel");
  if (is->pnode >= 0 && (size_t)is->pnode < p->n_nodes) jplan_node(f, r, !is->single, is->pnode, is->rank, is->mb);
  else fputs("null", f);
  fputs(",\"tensor\":", f);
  if (is->tensor >= 0 && (size_t)is->tensor < p->n_tensors) {
    const vd_tensor_t *t = &p->tensors[is->tensor];
    fprintf(f, "{\"tensor_id\":%lld,\"name\":", (long long)t->id);
    vd_cli_json_str(f, vd_plan_s(p, t->name));
    fputs("}", f);
  } else {
    fputs("null", f);
  }
  fputs(",\"single_tensor\":", f);
  if (is->stensor >= 0 && (size_t)is->stensor < r->sp.n_tensors) vd_cli_json_str(f, vd_plan_s(&r->sp, r->sp.tensors[is->stensor].name));
  else fputs("null", f);
  fputs(",\"rank\":", f);
  jint(f, is->rank);
  fputs(",\"replica\":", f);
  jint(f, is->replica);
  fputs(",\"mb\":", f);
  jint(f, is->mb);
  fputs(",\"field\":", f);
  if (is->field[0]) vd_cli_json_str(f, is->field);
  else fputs("null", f);
  fputs(",\"detail\":", f);
  vd_cli_json_str(f, is->detail);
  fputc('}', f);
}

static void json_finding(FILE *f, const vd_run *r, const vd_finding *fd) {
  char title[512];
  vd_rep_fmt_title(title, sizeof(title), r, fd);
  fprintf(f, "{\"diagnosis\":\"%s\",\"title\":", vd_diagnosis_names[fd->diagnosis]);
  vd_cli_json_str(f, title);
  fputs(",\"factor\":", f);
  vd_cli_json_str(f, fd->structural ? "" : r->verdicts[fd->rep].factor);
  fputs(",\"node\":", f);
  if (fd->pnode >= 0) jplan_node(f, r, fd->side, fd->pnode, fd->node_rank, fd->node_mb);
  else fputs("null", f);
  fputs(",\"why\":", f);
  vd_cli_json_str(f, fd->why);
  fputs(",\"hint\":", f);
  vd_cli_json_str(f, vd_findings_hint(fd->diagnosis));
  fputs(",\"ranks\":[", f);
  for (size_t i = 0; i < fd->n_ranks; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)fd->ranks[i]);
  fputs("],\"microbatches\":[", f);
  for (size_t i = 0; i < fd->n_mbs; i++) fprintf(f, "%s%d", i ? "," : "", fd->mbs[i]);
  fputs("],\"layers\":[", f);
  for (size_t i = 0; i < fd->n_layers; i++) fprintf(f, "%s%d", i ? "," : "", fd->layers[i]);
  fputs("],\"stages\":[", f);
  for (size_t i = 0; i < fd->n_stages; i++) fprintf(f, "%s%zu", i ? "," : "", fd->stages[i]);
  fprintf(f, "],\"stage_count\":%zu,\"per_replica_stages\":%zu,\"structural_entries\":%zu,\"representative\":",
          fd->n_stages, fd->n_instances, fd->n_issues);
  if (fd->structural) json_issue(f, r, &r->issues[fd->rep]);
  else json_stage_failure(r, fd->rep, f);
  fputc('}', f);
}

vd_rc vd_report_json(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  vd_findings fs;
  VD_CHECK(vd_findings_build(r, &fs, d));
  size_t cg_eq, cg_inc;
  vd_rep_class_counts(r, &cg_eq, &cg_inc);
  int to_stdout = !strcmp(path, "-");
  FILE *f = to_stdout ? stdout : fopen(path, "w");
  if (!f) {
    vd_findings_free(&fs);
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the JSON report");
  }
  fprintf(f, "{\"schema_version\":%d,\"tool\":{\"name\":\"verdict\",\"version\":\"%s\"},\"inputs\":{\"single\":",
          VD_REPORT_SCHEMA_VERSION, VD_VERSION_STRING);
  vd_cli_json_str(f, o->sm);
  fputs(",\"parallel\":", f);
  vd_cli_json_str(f, o->pm);
  fputs("},\n", f);
  fprintf(f, "\"verdict\":\"%s\",\"exit_code\":%d,\n\"summary\":{\"stages\":%zu,\"classes\":%zu,\"reduced\":%zu,"
             "\"by_normal_form\":%zu,\"equivalent\":%zu,\"not_equivalent\":%zu,\"inconclusive\":%zu,\"structural\":%zu,\"structural_not_listed\":%zu,"
             "\"findings\":%zu,\"per_replica_stages\":%zu,\"class_groups_equivalent\":%zu,\"class_groups_inconclusive\":%zu,"
             "\"lineages_annotated\":%zu,\"lineages_inferred\":%zu,\"lineages_dropped\":%zu,"
             "\"threads\":%d,\"peak_bytes\":%zu,\"peak_tracked_bytes\":%zu,\"seconds\":{",
          verdict_json(r), vd_run_exit_code(r), r->set.n_stages, r->n_solved, r->n_reduced, r->n_fast, r->n_equiv,
          r->n_not_equiv, r->n_inconclusive, r->n_issues + r->n_issues_dropped, r->n_issues_dropped, fs.n,
          r->n_represented, cg_eq, cg_inc, r->infer.n_annotated, r->infer.n_inferred - r->n_dropped, r->n_dropped, r->threads_used,
          r->peak_bytes, r->peak_tracked_bytes);
  for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, "%s\"%s\":%.4f", i ? "," : "", vd_run_phase_names[i], r->phase_s[i]);
  fputs("}},\n\"findings\":[", f);
  for (size_t k = 0; k < fs.n; k++) {
    fputs(k ? ",\n" : "\n", f);
    json_finding(f, r, &fs.v[k]);
  }
  fputs("],\n\"failures\":[", f);
  int n = 0;
  for (size_t i = 0; i < r->n_issues; i++) {
    fputs(n++ ? ",\n" : "\n", f);
    json_issue(f, r, &r->issues[i]);
  }
  int shown = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (o->max_failures > 0 && shown >= o->max_failures) break;
    fputs(n++ ? ",\n" : "\n", f);
    json_stage_failure(r, i, f);
    shown++;
  }
  fputs("],\n\"inconclusive\":[", f);
  n = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_INCONCLUSIVE) continue;
    fprintf(f, "%s\n{\"stage\":%zu,\"limit\":\"%s\",\"work\":%llu,\"reason\":", n++ ? "," : "", i,
            vd_smt_limit_names[r->verdicts[i].limit], (unsigned long long)r->verdicts[i].work);
    vd_cli_json_str(f, r->verdicts[i].reason);
    fputc('}', f);
  }
  /* Limits reached while cutting: no stage, the limit named in the reason. */
  for (size_t i = 0; i < r->n_limits; i++) {
    /* "cut": a bound of the stage cut (stages/); "replicas": the replica
     * work checked before anything is cut (verifier/run.c). */
    fprintf(f, "%s\n{\"stage\":null,\"limit\":\"%s\",\"work\":0,\"reason\":", n++ ? "," : "",
            strcmp(r->limits[i].source, "stages") ? "replicas" : "cut");
    vd_cli_json_str(f, r->limits[i].detail);
    fputc('}', f);
  }
  fputs("]}\n", f);
  vd_findings_free(&fs);
  if (to_stdout) {
    if (fflush(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JSON report to stdout failed");
  } else if (fclose(f) != 0) {
    VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JSON report failed");
  }
  return VD_OK;
}

/* ---- --dump-stages ------------------------------------------------------------ */

static void shape_str(char *buf, size_t n, const int64_t *s, int ndim) {
  size_t at = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && at < n; i++) at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? "," : "", (long long)s[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

vd_rc vd_report_stages(const vd_run *r, const char *path, vd_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the stage dump");
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
    fputc('\n', f);
    for (uint32_t t = 0; t < st->n_targets; t++) {
      const vd_stage_target *tg = &st->targets[t];
      const vd_stage_value *sv = &st->vals[tg->svalue];
      const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
      vd_lin_fmt_slice(tg->lo, tg->hi, sv->ndim, a, sizeof(a));
      vd_lin_fmt_slice(tg->rlo, tg->rhi, sv->ndim, b, sizeof(b));
      fprintf(f, "  target '%s' %s (reduced %s) parts %lld, %u piece(s)\n", vd_plan_s(&r->sp, ts->name), a, b,
              (long long)tg->part_n, tg->n_pieces);
    }
    for (uint32_t k = 0; k < st->n_vals; k++) {
      const vd_stage_value *sv = &st->vals[k];
      const vd_graph_t *g = sv->side ? &r->pg : &r->sg;
      const vd_tensor_t *t = &g->plan->tensors[g->values[sv->value].tensor];
      shape_str(a, sizeof(a), sv->shape, sv->ndim);
      shape_str(b, sizeof(b), sv->rshape, sv->ndim);
      fprintf(f, "  v%u %s '%s' %s -> %s%s\n", k, sv->side ? "parallel" : "single", vd_plan_s(g->plan, t->name), a, b,
              sv->producer < 0 ? (sv->leaf_piece >= 0 ? " hypothesis" : " leaf") : "");
    }
    for (uint32_t k = 0; k < st->n_nodes; k++) {
      vd_rep_fmt_node(line, sizeof(line), r, &st->nodes[k]);
      fprintf(f, "  n%u %s\n", k, line);
    }
  }
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the stage dump failed");
  return VD_OK;
}
