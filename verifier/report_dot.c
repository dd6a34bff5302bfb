/*
 * verifier/report_dot.c - one stage as a Graphviz graph (--dot-stage, and
 * the pictures of the HTML report).
 *
 * Two clusters side by side: the single-device subgraph and the parallel
 * subgraph of the stage.  Values are ellipses (tensor name, shape; a
 * parallel value also its rank and microbatch), operators are boxes.
 * Dashed edges are lineages: from a single value to the parallel values
 * that hold its slices (hypotheses: proven or initial; targets: what the
 * stage proves).  In a failing stage the diverging node is filled red, the
 * copies that disagree in the counterexample are outlined red, and the
 * target edges carry the counterexample's exact values.  Stages larger than
 * MAX_DRAWN nodes are drawn in part (said in the graph's label): a picture
 * of thousands of nodes helps nobody.
 */
#include <string.h>

#include "../common/mem.h"
#include "../common/outfile.h"
#include "../common/text.h"
#include "report.h"

enum { MAX_DRAWN = 300 };

/* Writes s escaped for a dot double-quoted string (common/text.h's DOT
 * mode: quotes and backslashes escaped, & as an entity, control and other
 * unsafe characters shown as \\xNN), cut at LABEL_MAX bytes on a character
 * boundary: a picture needs no longer names, and dot's SVG stays
 * well-formed XML for any name. */
enum { LABEL_MAX = 240 };
static void dq(FILE *f, const char *s) {
  char buf[LABEL_MAX];
  fputs(vd_text_esc(buf, sizeof(buf), s, VD_TEXT_DOT), f);
}

static void shape_txt(char *b, size_t n, const int64_t *s, int nd) {
  size_t at = (size_t)snprintf(b, n, "[");
  for (int i = 0; i < nd && at < n; i++) at += (size_t)snprintf(b + at, n - at, "%s%lld", i ? "," : "", (long long)s[i]);
  if (at < n) snprintf(b + at, n - at, "]");
}

/* Whether stage-local value k is flagged (in fv[0..nf)). */
static int in_list(const uint32_t *v, size_t n, uint32_t k) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == k) return 1;
  return 0;
}

/* What every part of one stage's picture reads. */
typedef struct {
  const vd_run *r;
  const vd_stage *st;
  const vd_stage_verdict *v; /* NULL: not solved */
  int failing;
  uint32_t fv[64]; /* flagged values (failing stages) */
  size_t nf;
  uint8_t *vis; /* per stage value: drawn */
  uint32_t drawn_nodes;
  int32_t hl_node; /* the diverging node, filled red (-1: none) */
  FILE *f;
} dot_ctx;

/* Values drawn: those touched by a drawn node, plus targets and hypotheses. */
static void mark_drawn_values(dot_ctx *c) {
  const vd_stage *st = c->st;
  for (uint32_t k = 0; k < c->drawn_nodes; k++) {
    const vd_stage_node *sn = &st->nodes[k];
    for (uint32_t j = 0; j < sn->n_in; j++) c->vis[st->idx[sn->in_off + j]] = 1;
    for (uint32_t j = 0; j < sn->n_out; j++) c->vis[st->idx[sn->out_off + j]] = 1;
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    c->vis[st->targets[t].svalue] = 1;
    for (uint32_t j = 0; j < st->targets[t].n_pieces; j++) c->vis[st->idx[st->targets[t].piece_off + 2 * j + 1]] = 1;
  }
}

static void dot_header(const dot_ctx *c) {
  const vd_stage *st = c->st;
  const vd_stage_verdict *v = c->v;
  FILE *f = c->f;
  const char *verdict = !v ? "not solved"
                        : v->verdict == VD_SMT_EQUIVALENT ? "equivalent"
                        : v->verdict == VD_SMT_NOT_EQUIVALENT ? "NOT EQUIVALENT"
                                                             : "inconclusive";
  fprintf(f, "digraph stage_%u {\n  graph [fontname=\"Helvetica\", fontsize=11, newrank=true, label=\"stage %u: %s", st->id,
          st->id, verdict);
  if (c->failing) fprintf(f, " (%s)", vd_diagnosis_names[v->diagnosis]);
  if (c->drawn_nodes < st->n_nodes) fprintf(f, "; first %u of %u nodes drawn", c->drawn_nodes, st->n_nodes);
  fputs("\", labelloc=t];\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=9];\n", f);
}

/* The drawn values of one side: tensor, shape, rank/mb, input or hypothesis. */
static void dot_values(const dot_ctx *c, int side) {
  const vd_stage *st = c->st;
  FILE *f = c->f;
  char shp[128];
  for (uint32_t k = 0; k < st->n_vals; k++) {
    const vd_stage_value *sv = &st->vals[k];
    if (sv->side != side || !c->vis[k]) continue;
    const vd_graph_t *g = side ? &c->r->pg : &c->r->sg;
    const vd_value_t *gv = &g->values[sv->value];
    const vd_tensor_t *t = &g->plan->tensors[gv->tensor];
    shape_txt(shp, sizeof(shp), sv->shape, sv->ndim);
    fprintf(f, "    v%u [shape=ellipse, label=\"", k);
    dq(f, vd_plan_s(g->plan, t->name));
    fprintf(f, "\\n%s", shp);
    if (side) {
      fprintf(f, " rank %lld", (long long)vd_graph_rank(g, t->rank, sv->replica));
      if (gv->mb >= 0) fprintf(f, " mb %d", gv->mb);
    }
    if (sv->producer < 0) fputs(side && sv->leaf_piece >= 0 ? "\\nhypothesis" : "\\ninput", f);
    fputc('"', f);
    if (in_list(c->fv, c->nf, k)) fputs(", color=\"#c00000\", penwidth=2.5, fontcolor=\"#c00000\", class=\"flagged\"", f);
    fputs("];\n", f);
  }
}

/* The drawn nodes of one side with their input and output edges. */
static void dot_nodes(const dot_ctx *c, int side) {
  const vd_stage *st = c->st;
  const vd_run *r = c->r;
  FILE *f = c->f;
  for (uint32_t k = 0; k < c->drawn_nodes; k++) {
    const vd_stage_node *sn = &st->nodes[k];
    if (sn->side != side) continue;
    const vd_plan_t *p;
    const vd_node_t *pn = vd_rep_pnode(r, sn, &p);
    fprintf(f, "    n%u [shape=box, style=\"rounded,filled\", fillcolor=\"%s\", label=\"", k,
            (int32_t)k == c->hl_node ? "#ff9a9a" : side ? "#e8f4e8" : "#e6eefa");
    dq(f, vd_node_op(p, pn));
    fputs("\\n", f);
    dq(f, vd_plan_s(p, pn->name));
    fprintf(f, "\\nnode %lld", (long long)pn->id);
    if (side) {
      const vd_graph_t *g = &r->pg;
      fprintf(f, " rank %lld", (long long)vd_graph_rank(g, pn->rank, sn->replica));
      if (g->nodes[sn->gnode].mb >= 0) fprintf(f, " mb %d", g->nodes[sn->gnode].mb);
    }
    fputc('"', f);
    if ((int32_t)k == c->hl_node) fputs(", color=\"#c00000\", penwidth=3, class=\"diverging\", id=\"diverging\"", f);
    fputs("];\n", f);
    for (uint32_t j = 0; j < sn->n_in; j++) fprintf(f, "    v%u -> n%u;\n", st->idx[sn->in_off + j], k);
    for (uint32_t j = 0; j < sn->n_out; j++) fprintf(f, "    n%u -> v%u;\n", k, st->idx[sn->out_off + j]);
  }
}

/* Lineage edges: hypotheses (single value -> parallel leaf). */
static void dot_lineage_edges(const dot_ctx *c) {
  const vd_stage *st = c->st;
  FILE *f = c->f;
  char line[512];
  for (uint32_t k = 0; k < st->n_vals; k++) {
    const vd_stage_value *sv = &st->vals[k];
    if (sv->side != 1 || sv->leaf_piece < 0 || sv->hyp_svalue < 0 || !c->vis[k] || !c->vis[sv->hyp_svalue]) continue;
    const vd_lin_piece *pc = &c->r->lt.pieces[sv->leaf_piece];
    vd_lin_fmt_slice(pc->lo, pc->hi, sv->ndim, line, sizeof(line));
    fprintf(f, "  v%d -> v%u [style=dashed, color=\"#777777\", constraint=false, label=\"", sv->hyp_svalue, k);
    dq(f, line);
    if (pc->part_n > 1) fprintf(f, " part %lld/%lld", (long long)pc->part_k, (long long)pc->part_n);
    fputs("\"];\n", f);
  }
}

/* The counterexample's values of target t at one piece (failing stages). */
static void dot_cex_values(const dot_ctx *c, uint32_t t, int32_t piece) {
  const vd_stage_verdict *v = c->v;
  FILE *f = c->f;
  for (size_t e = 0; c->failing && e < v->n_elems; e++) {
    const vd_stage_cex_elem *ce = &v->elems[e];
    if (ce->target != t) continue;
    for (uint32_t k = 0; k < ce->n_copies; k++) {
      const vd_stage_cex_copy *cp = &v->copies[ce->copy_off + k];
      if (cp->piece != piece) continue;
      fputs("\\nTs = ", f);
      dq(f, ce->single_exact);
      fputs(", Tp = ", f);
      dq(f, cp->exact);
      if (cp->disagrees) fputs(" (differs)", f);
    }
  }
}

/* Target edges with the counterexample's values. */
static void dot_target_edges(const dot_ctx *c) {
  const vd_stage *st = c->st;
  FILE *f = c->f;
  char line[512];
  for (uint32_t t = 0; t < st->n_targets; t++) {
    const vd_stage_target *tg = &st->targets[t];
    for (uint32_t j = 0; j < tg->n_pieces; j++) {
      int32_t piece = (int32_t)st->idx[tg->piece_off + 2 * j];
      uint32_t lv = st->idx[tg->piece_off + 2 * j + 1];
      const vd_lin_piece *pc = &c->r->lt.pieces[piece];
      vd_lin_fmt_slice(pc->lo, pc->hi, st->vals[lv].ndim, line, sizeof(line));
      int bad = in_list(c->fv, c->nf, lv);
      fprintf(f, "  v%d -> v%u [style=dashed, constraint=false, color=\"%s\", penwidth=%s, label=\"target ", tg->svalue, lv,
              bad ? "#c00000" : "#2b7a2b", bad ? "2" : "1");
      dq(f, line);
      if (pc->part_n > 1) fprintf(f, " part %lld/%lld", (long long)pc->part_k, (long long)pc->part_n);
      dot_cex_values(c, t, piece);
      fputs("\"", f);
      if (bad) fputs(", fontcolor=\"#c00000\"", f);
      fputs("];\n", f);
    }
  }
}

void vd_report_dot(const vd_run *r, size_t i, int32_t hl_node, FILE *f) {
  dot_ctx c = {.r = r, .st = &r->set.stages[i], .hl_node = hl_node, .f = f};
  c.v = r->verdicts ? &r->verdicts[i] : NULL;
  c.failing = c.v && c.v->verdict == VD_SMT_NOT_EQUIVALENT;
  c.nf = c.failing ? vd_rep_flagged_values(r, i, c.fv, 64) : 0;
  c.drawn_nodes = c.st->n_nodes < MAX_DRAWN ? c.st->n_nodes : MAX_DRAWN;
  c.vis = vd_calloc(c.st->n_vals ? c.st->n_vals : 1, 1);
  if (!c.vis) return;
  mark_drawn_values(&c);
  dot_header(&c);
  for (int side = 0; side < 2; side++) {
    fprintf(f, "  subgraph cluster_%s {\n    label=\"%s\"; style=rounded; color=\"%s\";\n", side ? "parallel" : "single",
            side ? "parallel plan" : "single-device plan", side ? "#2b7a2b" : "#1f4e9c");
    dot_values(&c, side);
    dot_nodes(&c, side);
    fputs("  }\n", f);
  }
  dot_lineage_edges(&c);
  dot_target_edges(&c);
  fputs("}\n", f);
  vd_free(c.vis);
}

vd_rc vd_report_dot_stage(const vd_run *r, size_t stage, const char *path, vd_diag *d) {
  if (stage >= r->set.n_stages)
    VD_FAIL(d, VD_EUSAGE, NULL, "--dot-stage", NULL, "no stage %zu: the run has %zu stage(s) (0..%zu)", stage,
            r->set.n_stages, r->set.n_stages ? r->set.n_stages - 1 : 0);
  vd_outfile of; /* common/outfile.h */
  VD_CHECK(vd_outfile_open(&of, path, 0, d));
  FILE *f = of.fp;
  int32_t hl = -1;
  if (r->verdicts && r->verdicts[stage].verdict == VD_SMT_NOT_EQUIVALENT) {
    char why[256];
    hl = vd_rep_diverging(r, stage, why, sizeof(why));
  }
  vd_report_dot(r, stage, hl, f);
  return vd_outfile_commit(&of, d);
}
