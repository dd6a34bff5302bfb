/*
 * verifier/report.c - the human report and the JSON report of a run.
 *
 * Both print the same content in the same deterministic order: the verdict,
 * the summary (stages, classes, time per phase, memory), every structural
 * issue, then every failing stage (up to --max-failures in detail) with its
 * target lineage, nodes, hypotheses, the counterexample's exact values with
 * the disagreeing copies flagged, the first diverging parallel node and the
 * diagnosis; then inconclusive stages with their reasons.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "cli.h"
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


static const vd_node_t *stage_pnode(const vd_run *r, const vd_stage_node *sn, const vd_plan_t **plan) {
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  *plan = g->plan;
  return &g->plan->nodes[g->nodes[sn->gnode].pnode];
}

static int attr_equal(const vd_plan_t *a, const vd_attr_t *x, const vd_plan_t *b, const vd_attr_t *y) {
  if (x->kind != y->kind || x->len != y->len) return 0;
  switch (x->kind) {
  case VD_ATTR_INT: return x->v.i == y->v.i;
  case VD_ATTR_FLOAT: return x->v.f == y->v.f;
  case VD_ATTR_STR: return strcmp(vd_plan_s(a, x->v.s), vd_plan_s(b, y->v.s)) == 0;
  case VD_ATTR_INTS: return memcmp(a->ints + x->v.off, b->ints + y->v.off, x->len * sizeof(int64_t)) == 0;
  case VD_ATTR_FLOATS: return memcmp(a->floats + x->v.off, b->floats + y->v.off, x->len * sizeof(double)) == 0;
  }
  return 0;
}

static void fmt_attr(char *buf, size_t n, const vd_plan_t *p, const vd_attr_t *a) {
  switch (a->kind) {
  case VD_ATTR_INT: snprintf(buf, n, "%lld", (long long)a->v.i); break;
  case VD_ATTR_FLOAT: snprintf(buf, n, "%.17g", a->v.f); break;
  case VD_ATTR_STR: snprintf(buf, n, "'%s'", vd_plan_s(p, a->v.s)); break;
  default: snprintf(buf, n, "[%u values]", a->len); break;
  }
}

/* First diverging parallel node of a failing stage: the first parallel node
 * (stage order) whose attributes differ from the single plan's node of the
 * same source name and operator; else the producer of the first flagged
 * piece.  Writes a one-line description; returns the stage node or -1. */
static int32_t first_diverging(const vd_run *r, const vd_stage *st, const vd_stage_verdict *v, char *why,
                               size_t n_why) {
  why[0] = '\0';
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *sn = &st->nodes[i];
    if (!sn->side) continue;
    const vd_plan_t *pp;
    const vd_node_t *pn = stage_pnode(r, sn, &pp);
    const char *name = vd_plan_s(pp, pn->name);
    if (!name[0]) continue;
    for (size_t k = 0; k < r->sp.n_nodes; k++) {
      const vd_node_t *sn2 = &r->sp.nodes[k];
      if (strcmp(vd_plan_s(&r->sp, sn2->name), name) || strcmp(vd_node_op(&r->sp, sn2), vd_node_op(pp, pn))) continue;
      for (uint32_t a = 0; a < pn->n_attr; a++) {
        const vd_attr_t *pa = &pp->attrs[pn->attr_off + a];
        const vd_attr_t *sa = vd_node_attr(&r->sp, sn2, vd_plan_s(pp, pa->key));
        if (sa && !attr_equal(pp, pa, &r->sp, sa)) {
          char x[64], y[64];
          fmt_attr(x, sizeof(x), pp, pa);
          fmt_attr(y, sizeof(y), &r->sp, sa);
          snprintf(why, n_why, "attribute '%s' is %s here, %s in the single-device plan", vd_plan_s(pp, pa->key), x, y);
          return (int32_t)i;
        }
      }
      break;
    }
  }
  if (v->n_flagged > 0) {
    const vd_lin_piece *pc = &r->lt.pieces[v->flagged_pieces[0]];
    for (uint32_t i = 0; i < st->n_vals; i++) {
      const vd_stage_value *sv = &st->vals[i];
      if (sv->side == 1 && sv->value == pc->value && sv->replica == pc->replica && sv->producer >= 0) {
        snprintf(why, n_why, "produces the first disagreeing copy");
        return sv->producer;
      }
    }
  }
  return -1;
}

static void fmt_node(char *buf, size_t n, const vd_run *r, const vd_stage_node *sn) {
  const vd_plan_t *p;
  const vd_node_t *pn = stage_pnode(r, sn, &p);
  const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
  int32_t mb = g->nodes[sn->gnode].mb;
  char mbs[24] = "";
  if (mb >= 0) snprintf(mbs, sizeof(mbs), " mb %d", mb);
  if (sn->side)
    snprintf(buf, n, "rank %lld%s %s '%s' (node %lld)", (long long)vd_graph_rank(g, pn->rank, sn->replica), mbs,
             vd_node_op(p, pn), vd_plan_s(p, pn->name), (long long)pn->id);
  else
    snprintf(buf, n, "single %s '%s' (node %lld)", vd_node_op(p, pn), vd_plan_s(p, pn->name), (long long)pn->id);
}

/* ---- text -------------------------------------------------------------------- */

static void text_stage_failure(const vd_run *r, const vd_stage *st, const vd_stage_verdict *v, FILE *f) {
  fprintf(f, "\n-- stage %u: NOT EQUIVALENT -- diagnosis %s", st->id, vd_diagnosis_names[v->diagnosis]);
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
    fmt_node(line, sizeof(line), r, &st->nodes[i]);
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
  int32_t dn = first_diverging(r, st, v, why, sizeof(why));
  if (dn >= 0) {
    fmt_node(line, sizeof(line), r, &st->nodes[dn]);
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

void vd_report_text(const vd_run *r, const vd_run_opts *o, FILE *f) {
  fprintf(f, "%s\n", verdict_word(r));
  fprintf(f, "  stages %zu (classes solved %zu, reduced %zu, by normal form %zu): %zu equivalent, %zu not equivalent, %zu inconclusive\n",
          r->set.n_stages, r->n_solved, r->n_reduced, r->n_fast, r->n_equiv, r->n_not_equiv, r->n_inconclusive);
  if (r->n_represented > r->set.n_stages)
    fprintf(f, "  replica and microbatch symmetry: the %zu stages stand for %zu per-replica, per-microbatch stages\n", r->set.n_stages,
            r->n_represented);
  if (r->n_issues_dropped)
    fprintf(f, "  structural problems: %zu (%zu listed)\n", r->n_issues + r->n_issues_dropped, r->n_issues);
  else if (r->n_issues)
    fprintf(f, "  structural problems: %zu\n", r->n_issues);
  if (r->infer.n_inferred)
    fprintf(f, "  lineages: %zu annotated, %zu inferred (%zu dropped after a failed proof, %d round(s)), %zu "
               "unannotated left to the stages\n",
            r->infer.n_annotated, r->infer.n_inferred - r->n_dropped, r->n_dropped, r->infer_rounds,
            r->infer.n_unknown + r->n_dropped);
  if (o->verbose && r->inferred) text_inferred(r, f);
  if (!o->quiet) {
    fprintf(f, "  time:");
    for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, " %s %.3fs", vd_run_phase_names[i], r->phase_s[i]);
    fprintf(f, "; peak %.1f MB; %d thread(s)\n", (double)r->peak_bytes / 1e6, r->threads_used);
    if (o->verbose && r->verdicts) text_slowest(r, f);
  }
  for (size_t i = 0; i < r->n_issues; i++) {
    const vd_issue *is = &r->issues[i];
    fprintf(f, "\n-- %s (%s %s)", vd_diagnosis_names[is->diagnosis], is->source, is->kind_name);
    if (is->rank >= 0) fprintf(f, " rank %lld", (long long)is->rank);
    if (is->mb >= 0) fprintf(f, " mb %lld", (long long)is->mb);
    fprintf(f, "\n   %s\n", is->detail);
  }
  int shown = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (o->max_failures > 0 && shown >= o->max_failures) {
      fprintf(f, "\n(%zu failing stages in all; --max-failures %d)\n", r->n_not_equiv, o->max_failures);
      break;
    }
    text_stage_failure(r, &r->set.stages[i], v, f);
    shown++;
  }
  for (size_t i = 0; i < r->set.n_stages; i++) {
    const vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict == VD_SMT_INCONCLUSIVE) fprintf(f, "\n-- stage %zu: INCONCLUSIVE: %s\n", i, v->reason);
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

static void json_stage_failure(const vd_run *r, const vd_stage *st, const vd_stage_verdict *v, FILE *f) {
  fprintf(f, "{\"kind\":\"stage\",\"stage\":%u,\"diagnosis\":\"%s\",\"factor\":", st->id, vd_diagnosis_names[v->diagnosis]);
  vd_cli_json_str(f, v->factor);
  fputs(",\"targets\":[", f);
  for (uint32_t ti = 0; ti < st->n_targets; ti++) {
    const vd_stage_target *t = &st->targets[ti];
    const vd_stage_value *sv = &st->vals[t->svalue];
    const vd_tensor_t *ts = &r->sp.tensors[r->sg.values[sv->value].tensor];
    fprintf(f, "%s{\"single\":", ti ? "," : "");
    vd_cli_json_str(f, vd_plan_s(&r->sp, ts->name));
    fputs(",\"slice\":", f);
    jslice(f, t->lo, t->hi, sv->ndim);
    fprintf(f, ",\"parts\":%lld}", (long long)t->part_n);
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
  char line[512];
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    fmt_node(line, sizeof(line), r, &st->nodes[i]);
    if (i) fputc(',', f);
    vd_cli_json_str(f, line);
  }
  fputs("],\"first_diverging_node\":", f);
  char why[256];
  int32_t dn = first_diverging(r, st, v, why, sizeof(why));
  if (dn >= 0) {
    const vd_plan_t *p;
    const vd_stage_node *sn = &st->nodes[dn];
    const vd_node_t *pn = stage_pnode(r, sn, &p);
    const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
    fprintf(f, "{\"node\":%lld,\"rank\":%lld,\"mb\":%d,\"op\":", (long long)pn->id,
            (long long)vd_graph_rank(g, pn->rank, sn->replica), g->nodes[sn->gnode].mb);
    vd_cli_json_str(f, vd_node_op(p, pn));
    fputs(",\"name\":", f);
    vd_cli_json_str(f, vd_plan_s(p, pn->name));
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
      else fputs("\"sum of parts\"", f);
      fputs(",\"value\":", f);
      vd_cli_json_str(f, cp->exact);
      fprintf(f, ",\"differs\":%s}", cp->disagrees ? "true" : "false");
    }
    fputs("]}", f);
  }
  fputs("]}", f);
}

vd_rc vd_report_json(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  FILE *f = fopen(path, "w");
  if (!f) VD_FAIL(d, VD_EIO, path, NULL, NULL, "cannot write the JSON report");
  fprintf(f, "{\"verdict\":\"%s\",\"exit_code\":%d,\n\"summary\":{\"stages\":%zu,\"classes\":%zu,\"reduced\":%zu,"
             "\"by_normal_form\":%zu,\"equivalent\":%zu,\"not_equivalent\":%zu,\"inconclusive\":%zu,\"structural\":%zu,\"structural_not_listed\":%zu,"
             "\"lineages_annotated\":%zu,\"lineages_inferred\":%zu,\"lineages_dropped\":%zu,"
             "\"threads\":%d,\"peak_bytes\":%zu,\"seconds\":{",
          verdict_json(r), vd_run_exit_code(r), r->set.n_stages, r->n_solved, r->n_reduced, r->n_fast, r->n_equiv,
          r->n_not_equiv, r->n_inconclusive, r->n_issues + r->n_issues_dropped, r->n_issues_dropped,
          r->infer.n_annotated, r->infer.n_inferred - r->n_dropped, r->n_dropped, r->threads_used, r->peak_bytes);
  for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, "%s\"%s\":%.4f", i ? "," : "", vd_run_phase_names[i], r->phase_s[i]);
  fputs("}},\n\"failures\":[", f);
  int n = 0;
  for (size_t i = 0; i < r->n_issues; i++) {
    const vd_issue *is = &r->issues[i];
    fprintf(f, "%s\n{\"kind\":\"structural\",\"diagnosis\":\"%s\",\"source\":\"%s\",\"issue\":\"%s\",\"rank\":%lld,\"mb\":%lld,\"detail\":",
            n++ ? "," : "", vd_diagnosis_names[is->diagnosis], is->source, is->kind_name, (long long)is->rank, (long long)is->mb);
    vd_cli_json_str(f, is->detail);
    fputc('}', f);
  }
  int shown = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    if (o->max_failures > 0 && shown >= o->max_failures) break;
    fputs(n++ ? ",\n" : "\n", f);
    json_stage_failure(r, &r->set.stages[i], &r->verdicts[i], f);
    shown++;
  }
  fputs("],\n\"inconclusive\":[", f);
  n = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    if (r->verdicts[i].verdict != VD_SMT_INCONCLUSIVE) continue;
    fprintf(f, "%s\n{\"stage\":%zu,\"limit\":\"%s\",\"work\":%llu,\"reason\":", n++ ? "," : "", i,
            vd_smt_limit_names[r->verdicts[i].limit], (unsigned long long)r->verdicts[i].work);
    vd_cli_json_str(f, r->verdicts[i].reason);
    fputc('}', f);
  }
  fputs("]}\n", f);
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the JSON report failed");
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
      fmt_node(line, sizeof(line), r, &st->nodes[k]);
      fprintf(f, "  n%u %s\n", k, line);
    }
  }
  if (fclose(f) != 0) VD_FAIL(d, VD_EIO, path, NULL, NULL, "writing the stage dump failed");
  return VD_OK;
}
