/*
 * verifier/report.c - the human report of a run (the JSON report, which
 * prints the same content, is report_json.c).
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
#include "../common/outfile.h"
#include "../common/text.h"
#include "cli.h"
#include "findings.h"
#include "provenance.h"
#include "report.h"
#include "report_int.h"
#include "run.h"

static const char *verdict_word(const vd_run *r) {
  switch (vd_run_exit_code(r)) {
  case 0: return "EQUIVALENT";
  case 1: return "NOT EQUIVALENT";
  default: return "INCONCLUSIVE";
  }
}

/* ---- facts about pieces and nodes ------------------------------------------ */

void vd_report_i_piece_facts(const vd_run *r, int32_t piece, piece_info *pi) {
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

/* 'tensor' (t<id>) rank <r>[ mb <m>]: how every text block names a piece. */
static void text_piece(FILE *f, const piece_info *pi) {
  fprintf(f, "'%s' (t%lld) rank %lld", VD_SHOW(pi->tensor), (long long)pi->id, (long long)pi->rank);
  if (pi->mb >= 0) fprintf(f, " mb %d", pi->mb);
}

static void stage_targets(const vd_run *r, const vd_stage *st, FILE *f) {
  char sl[256];
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
    vd_lin_fmt_slice(t->lo, t->hi, sv->ndim, sl, sizeof(sl));
    int inf = r->inferred && t->n_pieces && r->inferred[r->lt.pieces[st->idx[t->piece_off]].ptensor];
    fprintf(f, "   target: single '%s' %s%s, %u parallel piece(s)%s\n", VD_SHOW(vd_plan_s(&r->sp, ts->name)), sl,
            t->part_n > 1 ? " as a sum of parts" : "", t->n_pieces, inf ? " (inferred lineage)" : "");
  }
}

/* The parallel side's nodes, the first 24 of them. */
static void stage_nodes(const vd_run *r, const vd_stage *st, FILE *f) {
  char line[512];
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
    fprintf(f, "     %s\n", VD_SHOW(line));
  }
}

/* The parallel leaves the stage assumes: proven or initial lineages. */
static void stage_hypotheses(const vd_run *r, const vd_stage *st, FILE *f) {
  char sl[256];
  fprintf(f, "   hypotheses (proven or initial lineages):\n");
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    if (sv->side != 1 || sv->producer >= 0 || sv->leaf_piece < 0) continue;
    piece_info pi;
    vd_report_i_piece_facts(r, sv->leaf_piece, &pi);
    vd_lin_fmt_slice(pi.lo, pi.hi, pi.ndim, sl, sizeof(sl));
    fputs("     ", f);
    text_piece(f, &pi);
    fprintf(f, " = %s", sl);
    if (pi.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pi.part_k, (long long)pi.part_n);
    if (r->lt.pieces[sv->leaf_piece].f != 1.0) fprintf(f, " times %.17g", r->lt.pieces[sv->leaf_piece].f);
    if (r->inferred && r->inferred[r->lt.pieces[sv->leaf_piece].ptensor]) fputs(" (inferred, proven)", f);
    fputc('\n', f);
  }
}

/* The counterexample: its inputs (the first 12), then per disagreeing
 * element the single value and every parallel copy. */
static void stage_cex(const vd_run *r, const vd_stage *st, const vd_stage_verdict *v, FILE *f) {
  if (v->n_inputs) {
    fprintf(f, "   counterexample inputs (reduced shapes):");
    for (size_t i = 0; i < v->n_inputs && i < 12; i++) fprintf(f, "%s %s=%s", i ? "," : "", VD_SHOW(v->inputs[i].name), VD_SHOW(v->inputs[i].exact));
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
    fprintf(f, "   element [%s] (reduced): Ts = %s\n", el, VD_SHOW(ce->single_exact));
    for (uint32_t k = 0; k < ce->n_copies; k++) {
      const vd_stage_cex_copy *cp = &v->copies[ce->copy_off + k];
      if (cp->piece >= 0) {
        piece_info pi;
        vd_report_i_piece_facts(r, cp->piece, &pi);
        fputs("     Tp ", f);
        text_piece(f, &pi);
        if (pi.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pi.part_k, (long long)pi.part_n);
      } else {
        fprintf(f, "     sum of the parts");
      }
      fprintf(f, " = %s%s\n", VD_SHOW(cp->exact), cp->disagrees ? "   <-- differs" : "");
    }
  }
}

/* What the numeric evaluators made of the counterexample (issue 28). */
static void stage_cex_evaluation(const vd_stage_verdict *v, FILE *f) {
  if (v->cex_eval == VD_CEX_EVAL_SAME)
    fprintf(f, "   checked by evaluation: these values, run through the numeric evaluators (real kernels), reproduce "
               "the disagreement (%s)\n", v->cex_eval_note);
  else if (v->cex_eval == VD_CEX_EVAL_RANDOM)
    fprintf(f, "   checked by evaluation: random inputs run through the numeric evaluators reproduce the disagreement "
               "(%s); these values interpret a kernel symbolically\n", v->cex_eval_note);
  else if (v->cex_eval == VD_CEX_EVAL_NOT)
    fprintf(f, "   WARNING: NOT REPRODUCED BY EVALUATION: %s; the symbolic counterexample stands, but please report "
               "this stage with the plans\n", v->cex_eval_note);
  else if (v->cex_eval == VD_CEX_EVAL_FAILED)
    fprintf(f, "   not checked by evaluation: %s\n", v->cex_eval_note);
}

/* Where the parallel side first goes wrong, and the pieces flagged. */
static void stage_blame(const vd_run *r, size_t stage, FILE *f) {
  const vd_stage *st = &r->set.stages[stage];
  const vd_stage_verdict *v = &r->verdicts[stage];
  char why[256], line[512];
  int32_t dn = vd_rep_diverging(r, stage, why, sizeof(why));
  if (dn >= 0) {
    vd_rep_fmt_node(line, sizeof(line), r, &st->nodes[dn]);
    fprintf(f, "   first diverging parallel node: %s: %s\n", VD_SHOW(line), VD_SHOW(why));
  }
  if (v->n_flagged) {
    fprintf(f, "   flagged:");
    for (size_t i = 0; i < v->n_flagged; i++) {
      piece_info pi;
      vd_report_i_piece_facts(r, v->flagged_pieces[i], &pi);
      fputs(i ? ", " : " ", f);
      text_piece(f, &pi);
    }
    fputc('\n', f);
  }
}

/* A stage failure block, as the text report prints it. */
static void text_stage(const vd_run *r, size_t stage, FILE *f) {
  const vd_stage *st = &r->set.stages[stage];
  const vd_stage_verdict *v = &r->verdicts[stage];
  fprintf(f, "-- stage %u: NOT EQUIVALENT -- diagnosis %s", st->id, vd_diagnosis_names[v->diagnosis]);
  if (v->factor[0]) fprintf(f, " (%s%s)", v->diagnosis == VD_DX_SCALE || v->diagnosis == VD_DX_EXTRA_REDUCTION ? "factor " : "", VD_SHOW(v->factor));
  fputc('\n', f);
  stage_targets(r, st, f);
  stage_nodes(r, st, f);
  stage_hypotheses(r, st, f);
  stage_cex(r, st, v, f);
  if (v->diagnosis == VD_DX_MISSING_REDUCTION)
    fprintf(f, "   Ts = sum of the Tp copies, while each copy claims the whole value: a reduction is missing\n");
  stage_cex_evaluation(v, f);
  stage_blame(r, stage, f);
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
    fprintf(f, "  inferred: '%s' (t%lld, rank %d) = '%s' %s", VD_SHOW(vd_plan_s(&r->pp, pt->name)), (long long)pt->id,
            pt->rank, VD_SHOW(s >= 0 ? vd_plan_s(&r->sp, r->sp.tensors[s].name) : "?"), sl);
    if (pt->lin.part_n > 1) fprintf(f, " part %lld/%lld", (long long)pt->lin.part_k, (long long)pt->lin.part_n);
    if (vd_lineage_factor(&pt->lin) != 1.0) fprintf(f, " x %g", vd_lineage_factor(&pt->lin));
    fputc('\n', f);
  }
}

static void text_slowest(const vd_run *r, FILE *f) {
  text_top(r, f, key_ms, "slowest stages");
  text_top(r, f, key_work, "hardest stages by work");
}

/* A structural entry, as the text report prints it. */
static void text_issue(const vd_run *r, const vd_issue *is, FILE *f) {
  (void)r;
  fprintf(f, "-- %s (%s %s)", vd_diagnosis_names[is->diagnosis], VD_SHOW(is->source), VD_SHOW(is->kind_name));
  if (is->rank >= 0) fprintf(f, " rank %lld", (long long)is->rank);
  if (is->mb >= 0) fprintf(f, " mb %lld", (long long)is->mb);
  fputs("\n   ", f);
  vd_cli_plain_str(f, is->detail);
  fputc('\n', f);
}

/* The user's call stack at a finding's node, a frame per line: the line that
 * computed the value and the calls that led there (which layer, which step). */
static void text_stack(FILE *f, const char *stack) {
  if (!*stack) return;
  fputs("   call stack, innermost first:\n", f);
  for (const char *s = stack;;) {
    const char *e = strchr(s, '\n');
    char frame[512];
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len >= sizeof(frame)) len = sizeof(frame) - 1;
    memcpy(frame, s, len);
    frame[len] = '\0';
    fprintf(f, "      %s\n", VD_SHOW(frame));
    if (!e) break;
    s = e + 1;
  }
}

/* A finding's block: title, footprint, stages, hint, representative. */
static void text_finding(const vd_run *r, const vd_finding *fd, FILE *f) {
  char title[512], fp[1024];
  vd_rep_fmt_title(title, sizeof(title), r, fd);
  vd_rep_fmt_footprint(fp, sizeof(fp), fd);
  fprintf(f, "%s\n", VD_SHOW(title));
  text_stack(f, vd_rep_finding_stack(r, fd));
  if (fd->via_pnode >= 0) {
    char via[400];
    vd_rep_fmt_via(via, sizeof(via), r, fd);
    fprintf(f, "   the factor reaches the failing stages through %s\n", VD_SHOW(via));
  }
  fprintf(f, "   footprint: %s\n", VD_SHOW(fp));
  if (fd->n_stages > 1 || (fd->structural && fd->n_stages)) {
    fprintf(f, "   %s:", fd->structural ? "failing stages that follow from it" : "stages");
    for (size_t j = 0; j < fd->n_stages && j < 24; j++) fprintf(f, " %zu", fd->stages[j]);
    if (fd->n_stages > 24) fprintf(f, " ... (%zu in all)", fd->n_stages);
    fputc('\n', f);
  }
  fprintf(f, "   hint: %s\n", vd_findings_hint(fd->diagnosis));
  if (fd->structural) {
    fprintf(f, "   representative entry%s:\n", fd->n_issues > 1 ? " (the others differ in rank, microbatch or layer)" : "");
    text_issue(r, &r->issues[fd->rep], f);
  } else {
    fprintf(f, "   representative stage:\n");
    text_stage(r, fd->rep, f);
  }
}

void vd_report_xml_text_finding(const vd_run *r, const vd_finding *fd, FILE *f) {
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (m) {
    text_finding(r, fd, m);
    fclose(m);
  }
  if (text) vd_cli_xml_text(f, text, len);
  free(text); /* open_memstream's buffer comes from the C library */
}

/* One block per finding: title, footprint, hint, and its representative in
 * full; beyond --max-failures, one line per finding. */
static void text_findings(const vd_run *r, const vd_run_opts *o, const vd_findings *fs, FILE *f) {
  char title[512], fp[1024];
  if (fs->n)
    fprintf(f, "\n(In the blocks below, Ts is a value of the single-device plan and Tp a copy of it in the parallel "
               "plan; indices and values are on reduced shapes; an input named x@v80[0:1]%%2.0[0] is part 0 of a sum "
               "of 2 parts of that slice.  docs/reading-a-report.md explains a report.)\n");
  for (size_t k = 0; k < fs->n; k++) {
    const vd_finding *fd = &fs->v[k];
    vd_rep_fmt_title(title, sizeof(title), r, fd);
    vd_rep_fmt_footprint(fp, sizeof(fp), fd);
    if (o->max_failures > 0 && k >= (size_t)o->max_failures) {
      /* Past the cap, the titles of as many more; --json lists them all. */
      if (k == (size_t)o->max_failures)
        fprintf(f, "\n(%zu findings in all; --max-failures %d; --json lists every one)\n", fs->n, o->max_failures);
      if (k >= 2 * (size_t)o->max_failures) break;
      fprintf(f, "== finding %zu: %s; %s\n", k + 1, VD_SHOW(title), VD_SHOW(fp));
      continue;
    }
    fprintf(f, "\n== finding %zu of %zu: ", k + 1, fs->n);
    text_finding(r, fd, f);
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

/* ---- inconclusive stages, grouped by reason ------------------------------ */

static int reason_cmp(const void *a, const void *b, void *arg) {
  const vd_run *r = arg;
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  int c = strcmp(r->verdicts[x].reason, r->verdicts[y].reason);
  return c ? c : (x > y) - (x < y);
}

static int group_cmp(const void *a, const void *b) {
  const size_t *x = a, *y = b; /* {first stage, start in order, end} */
  return (x[0] > y[0]) - (x[0] < y[0]);
}

vd_rc vd_rep_inconclusive_groups(const vd_run *r, int skip_counted, size_t **order_out, size_t **groups_out,
                                 size_t *n_groups) {
  size_t n = 0, *order = NULL, *groups = NULL, ng = 0;
  *order_out = *groups_out = NULL;
  *n_groups = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++)
    n += r->verdicts[i].verdict == VD_SMT_INCONCLUSIVE && !(skip_counted && r->skipped && r->skipped[i]);
  if (!n) return VD_OK;
  order = vd_malloc(n * sizeof(*order));
  groups = vd_malloc(3 * n * sizeof(*groups));
  if (!order || !groups) {
    vd_free(order);
    vd_free(groups);
    return VD_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < r->set.n_stages; i++)
    if (r->verdicts[i].verdict == VD_SMT_INCONCLUSIVE && !(skip_counted && r->skipped && r->skipped[i])) order[k++] = i;
  qsort_r(order, n, sizeof(*order), reason_cmp, (void *)r);
  for (size_t a = 0, b; a < n; a = b) {
    for (b = a + 1; b < n && !strcmp(r->verdicts[order[a]].reason, r->verdicts[order[b]].reason); b++) {}
    groups[3 * ng] = order[a];
    groups[3 * ng + 1] = a;
    groups[3 * ng + 2] = b;
    ng++;
  }
  qsort(groups, ng, 3 * sizeof(*groups), group_cmp);
  *order_out = order;
  *groups_out = groups;
  *n_groups = ng;
  return VD_OK;
}

/* Inconclusive stages not counted in a "not solved" line: one line per
 * distinct reason, with the stages that share it (a limit that stops 400
 * stages is one line, not 400). */
static void text_inconclusive(const vd_run *r, const vd_run_opts *o, FILE *f) {
  size_t *order, *groups, ng;
  if (vd_rep_inconclusive_groups(r, 1, &order, &groups, &ng) != VD_OK) {
    fprintf(f, "\n(out of memory while listing the inconclusive stages)\n");
    return;
  }
  size_t cap = o->max_failures > 0 ? (size_t)o->max_failures : SIZE_MAX;
  for (size_t g = 0; g < ng; g++) {
    if (g >= cap) {
      fprintf(f, "\n(%zu reasons in all; --max-failures %d; --json lists every stage)\n", ng, o->max_failures);
      break;
    }
    size_t a = groups[3 * g + 1], b = groups[3 * g + 2];
    if (b - a == 1) {
      fprintf(f, "\n-- stage %zu: INCONCLUSIVE: %s\n", order[a], VD_SHOW(r->verdicts[order[a]].reason));
      continue;
    }
    fprintf(f, "\n-- %zu stages INCONCLUSIVE: %s\n   stages:", b - a, VD_SHOW(r->verdicts[order[a]].reason));
    size_t *sorted = order + a; /* ascending within the group (reason_cmp) */
    for (size_t j = 0; j < b - a && j < 24; j++) fprintf(f, " %zu", sorted[j]);
    if (b - a > 24) fprintf(f, " ... (%zu in all)", b - a);
    fputc('\n', f);
  }
  vd_free(order);
  vd_free(groups);
}

/* The plain words of a diagnosis class, for the one-line findings of the
 * first screen (the hint, longer, is in each finding's block). */
static const char *dx_plain(vd_diagnosis dx) {
  switch (dx) {
  case VD_DX_MISSING_REDUCTION: return "a sum over ranks is missing";
  case VD_DX_EXTRA_REDUCTION: return "values are summed over ranks once too often";
  case VD_DX_SCALE: return "values are off by a constant factor";
  case VD_DX_PERMUTED_SLICES: return "pieces of a tensor are in the wrong place or order";
  case VD_DX_WRONG_VALUE: return "a wrong value is computed";
  case VD_DX_DATAFLOW: return "a value is read from the wrong place, or never produced";
  case VD_DX_SCHEDULE: return "an operation runs before all its inputs have arrived";
  case VD_DX_ALIGNMENT: return "microbatches run different programs";
  case VD_DX_SHAPE: return "a node's output shape does not follow from its inputs";
  case VD_DX_BATCH: return "the two plans read different global batches";
  default: return "the plans differ";
  }
}

/* The summary in plain words: how many stages (proof obligations) were
 * proven, failed, or were left unsolved and why.  The counts a developer of
 * verdict reads (classes, normal form, sums by part, symmetry) are under -v,
 * explained once there. */
static void text_proof(const vd_run *r, const vd_run_opts *o, FILE *f) {
  size_t unsolved = r->n_skipped_large + r->n_skipped_decided + r->n_demoted + r->n_interrupted;
  size_t other = r->n_inconclusive > unsolved ? r->n_inconclusive - unsolved : 0;
  if (r->set.n_stages || !r->interrupted) {
    fprintf(f, "  proof: %zu stage%s (one proof obligation each): %zu proven equivalent", r->set.n_stages,
            r->set.n_stages == 1 ? "" : "s", r->n_equiv);
    if (r->n_not_equiv) fprintf(f, ", %zu failing", r->n_not_equiv);
    if (other) fprintf(f, ", %zu inconclusive (a limit or the solver stopped them; listed below)", other);
    if (unsolved) fprintf(f, ", %zu not solved (why below)", unsolved);
    fputc('\n', f);
  }
  if (r->n_interrupted) {
    fprintf(f, "  not solved: %zu stage%s, because the run was interrupted", r->n_interrupted,
            r->n_interrupted == 1 ? "" : "s");
    if (r->n_unconfirmed)
      fprintf(f, " (%zu of them had failed before the stop; not confirmed, no counterexample computed)", r->n_unconfirmed);
    fputc('\n', f);
  }
  if (r->n_skipped_decided)
    fprintf(f, "  not solved: %zu stage%s, because a structural problem of the plan already decides NOT EQUIVALENT "
               "(docs/verifier.md 1b)\n", r->n_skipped_decided, r->n_skipped_decided == 1 ? "" : "s");
  if (r->n_skipped_large)
    fprintf(f, "  not solved: %zu stage%s larger than a failing one (they lie past the failure; docs/verifier.md 6)\n",
            r->n_skipped_large, r->n_skipped_large == 1 ? "" : "s");
  if (r->n_demoted)
    fprintf(f, "  not reported: %zu failure%s resting on an inferred lineage which did not hold (docs/verifier.md 1b)\n",
            r->n_demoted, r->n_demoted == 1 ? "" : "s");
  if (o->verbose) {
    /* -v: the proof's own counts, with their words explained once. */
    fprintf(f, "  stages %zu (classes solved %zu, reduced %zu, by normal form %zu): %zu equivalent, %zu not equivalent, "
               "%zu inconclusive\n",
            r->set.n_stages, r->n_solved, r->n_reduced, r->n_fast, r->n_equiv, r->n_not_equiv, r->n_inconclusive);
    fprintf(f, "    (a class is a set of stages equal up to renaming, proven by one proof; reduced: checked on small "
               "shapes; by normal form: proven by the polynomial normal form without calling Z3)\n");
    if (r->n_represented > r->set.n_stages)
      fprintf(f, "  replica and microbatch symmetry: the %zu stages stand for %zu per-replica, per-microbatch stages\n",
              r->set.n_stages, r->n_represented);
    if (r->n_sum_stages)
      fprintf(f, "  sums by part: %zu stages prove %zu parts of gradient sums, each on its own batch rows\n",
              r->n_sum_stages, r->n_sum_parts);
  }
}

/* One line per finding, in plain words, on the first screen; the blocks
 * with the evidence follow below. */
static void text_finding_lines(const vd_run *r, const vd_run_opts *o, const vd_findings *fs, FILE *f) {
  if (!fs->n) return;
  fprintf(f, "  findings: %zu (failures grouped by root cause, earliest first; details below)\n", fs->n);
  size_t cap = o->max_failures > 0 ? 2 * (size_t)o->max_failures : SIZE_MAX;
  char title[512], fp[1024];
  for (size_t k = 0; k < fs->n && k < cap; k++) {
    vd_rep_fmt_title(title, sizeof(title), r, &fs->v[k]);
    vd_rep_fmt_footprint(fp, sizeof(fp), &fs->v[k]);
    fprintf(f, "   %zu. %s: %s; %s\n", k + 1, dx_plain(fs->v[k].diagnosis), VD_SHOW(title), VD_SHOW(fp));
  }
  if (fs->n > cap) fprintf(f, "   ... (%zu findings in all; --json lists every one)\n", fs->n);
}

/* A pair the proof cache already holds as EQUIVALENT: nothing else to say. */
static void text_cached(const vd_run *r, FILE *f) {
  fprintf(f, "%s\n", verdict_word(r));
  fprintf(f, "  unchanged since a run proved it: the proof cache holds this pair (the SHA-256 of both input files, "
             "this verdict binary) as EQUIVALENT, proven with %llu stages (%llu classes); nothing was solved again\n",
          (unsigned long long)r->cached.n_stages, (unsigned long long)r->cached.n_classes);
}

static void text_cache_stats(const vd_run *r, FILE *f) {
  const vd_cache_stats *cs = &r->cache_stats;
  fprintf(f, "  proof cache: %zu of %zu classes reused (%zu from the cache directory, %zu proven earlier in this "
             "process), %zu proven and stored\n",
          r->n_cache_reused, r->n_solved, cs->hits_disk, cs->hits_memory, cs->stored);
  if (cs->ignored)
    fprintf(f, "  proof cache: %zu entr%s ignored, not trusted (last: %s)\n", cs->ignored, cs->ignored == 1 ? "y" : "ies",
            VD_SHOW(cs->last_ignored));
  if (cs->write_errors) fprintf(f, "  proof cache: %zu entr%s could not be written\n", cs->write_errors,
                                cs->write_errors == 1 ? "y" : "ies");
}

/* The structural problems' count, the lineage warnings, and what
 * inference annotated. */
static void text_structure(const vd_run *r, FILE *f) {
  if (r->n_issues_dropped)
    fprintf(f, "  structural problems: %zu (%zu listed)\n", r->n_issues + r->n_issues_dropped, r->n_issues);
  else if (r->n_issues)
    fprintf(f, "  structural problems: %zu\n", r->n_issues);
  for (size_t i = 0; i < r->lt.n_warnings; i++) fprintf(f, "  warning: %s\n", VD_SHOW(r->lt.warnings[i].detail));
  if (r->infer.n_inferred)
    fprintf(f, "  lineages: %zu annotated, %zu inferred (%zu dropped after a failed proof, %d round(s)), %zu "
               "unannotated left to the stages\n",
            r->infer.n_annotated, r->infer.n_inferred - r->n_dropped, r->n_dropped, r->infer_rounds,
            r->infer.n_unknown + r->n_dropped);
}

/* rank <r> <op> '<name>' (node <id>) */
static void text_node_words(const vd_run *r, const vd_node_t *n, FILE *f) {
  fprintf(f, "rank %d %s '%s' (node %lld)", n->rank, VD_SHOW(vd_node_op(&r->pp, n)), VD_SHOW(vd_plan_s(&r->pp, n->name)),
          (long long)n->id);
}

/* Where the stuck input of inference came from: the factor's origin, or
 * the producer of the input (and who sent it, or what it was computed
 * from). */
static void text_stuck_source(const vd_run *r, FILE *f) {
  const vd_lin_infer_stats *is = &r->infer;
  if (is->stuck_origin >= 0) {
    fputs("; the factor comes from ", f);
    text_node_words(r, &r->pp.nodes[is->stuck_origin], f);
    return;
  }
  int32_t from = -1;
  int64_t pk = stuck_producer(r, &from);
  if (pk < 0) return;
  fprintf(f, "; input %u comes from ", is->stuck_input);
  text_node_words(r, &r->pp.nodes[pk], f);
  if (from >= 0) fprintf(f, ", sent by rank %d", from);
  int64_t rq = is->stuck_why == VD_LIN_STUCK_SLICE && from < 0 ? upstream_recv(r, pk, &from) : -1;
  if (rq >= 0) {
    fputs(", computed from what ", f);
    text_node_words(r, &r->pp.nodes[rq], f);
    fputs(" received", f);
    if (from >= 0) fprintf(f, " from rank %d", from);
  }
}

/* A hint, not evidence: where propagation first stopped is usually the
 * faulty operator's first consumer (a bug makes the parallel values stop
 * matching the single ones there). */
static void text_stuck(const vd_run *r, FILE *f) {
  const vd_node_t *sn = &r->pp.nodes[r->infer.stuck_node];
  const vd_lin_infer_stats *is = &r->infer;
  fprintf(f, "  lineage inference stopped first at rank %d", sn->rank);
  if (is->stuck_mb >= 0) fprintf(f, " mb %d", is->stuck_mb);
  char phrase[512];
  vd_lin_stuck_phrase(is, phrase, sizeof(phrase));
  fprintf(f, " %s '%s' (node %lld): %s", VD_SHOW(vd_node_op(&r->pp, sn)), VD_SHOW(vd_plan_s(&r->pp, sn->name)),
          (long long)sn->id, VD_SHOW(phrase));
  text_stuck_source(r, f);
  fprintf(f, "\n");
}

/* -v: the time per phase, memory, the cut's budget and the slowest
 * stages; else one line of time and memory (nothing under -q). */
static void text_time(const vd_run *r, const vd_run_opts *o, FILE *f) {
  if (!o->quiet && o->verbose) {
    fprintf(f, "  time:");
    for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, " %s %.3fs", vd_run_phase_names[i], r->phase_s[i]);
    fprintf(f, "; peak %.1f MB (process; verdict's own allocations %.1f MB); %d thread(s)\n", (double)r->peak_bytes / 1e6,
            (double)r->peak_tracked_bytes / 1e6, r->threads_used);
    if (r->cut_budget)
      fprintf(f, "  cut: %llu stage values in the last round (CUT_VALUES_PER_VALUE allows %llu)\n",
              (unsigned long long)r->cut_values, (unsigned long long)r->cut_budget);
    if (r->verdicts) text_slowest(r, f);
  } else if (!o->quiet) {
    double secs = 0;
    for (int i = 0; i < VD_RUN_PHASES; i++) secs += r->phase_s[i];
    if (r->interrupted) secs = r->stop_s;
    fprintf(f, "  verdict %s; %.1f s; peak %.1f MB", VD_VERSION_STRING, secs, (double)r->peak_bytes / 1e6);
    if (r->threads_used) fprintf(f, "; %d thread(s)", r->threads_used);
    fprintf(f, " (-v: plan hashes, limits, the proof's counts and times)\n");
  }
}

/* The limits reached, up to --max-failures. */
static void text_limits(const vd_run *r, const vd_run_opts *o, FILE *f) {
  size_t cap = o->max_failures > 0 ? (size_t)o->max_failures : SIZE_MAX;
  for (size_t i = 0; i < r->n_limits; i++) {
    if (i >= cap) {
      fprintf(f, "\n(%zu limits reached in all; --max-failures %d)\n", r->n_limits, o->max_failures);
      break;
    }
    fprintf(f, "\n-- INCONCLUSIVE (limit): %s\n", VD_SHOW(r->limits[i].detail));
  }
}

void vd_report_text(const vd_run *r, const vd_run_opts *o, FILE *f) {
  vd_findings fs;
  vd_diag d;
  vd_diag_clear(&d);
  if (r->config_cached) {
    text_cached(r, f);
    return;
  }
  int have_fs = vd_findings_build(r, &fs, &d) == VD_OK;
  vd_provenance pv;
  vd_prov_build(r, &pv);
  fprintf(f, "%s\n", verdict_word(r));
  vd_prov_text_interrupted(r, f);
  vd_prov_text(r, o, &pv, f);
  text_proof(r, o, f);
  if (o->cache) text_cache_stats(r, f);
  if (r->n_limits)
    fprintf(f, "  limits reached: %zu, listed below (`verdict limits`): what they stop is not proven, and is not a "
               "difference\n", r->n_limits);
  if (have_fs) text_finding_lines(r, o, &fs, f);
  text_structure(r, f);
  if (r->inferred && r->infer.stuck_node >= 0 && vd_run_exit_code(r) != 0) text_stuck(r, f);
  if (o->verbose && r->inferred) text_inferred(r, f);
  text_time(r, o, f);
  /* --max-failures caps the findings printed in detail (the rest get one
   * line each) and the inconclusive reasons listed. */
  if (have_fs) {
    text_findings(r, o, &fs, f);
    vd_findings_free(&fs);
  } else {
    fprintf(f, "\n(out of memory while grouping the failures into findings)\n");
  }
  text_inconclusive(r, o, f);
  text_limits(r, o, f);
}
