/*
 * tests/support/pipeline.h - a (single, parallel) plan pair taken through
 * the pipeline's front half: graphs, lineage table, stages.
 *
 * The lineage and stages tests all need the same fixture: two plans, their
 * replica-0 graphs (expand_replicas = 0, as verifier/run.c builds the
 * parallel one), the lineage table and, for stages/, the cut.  tp_pair
 * holds them and frees them in one call.
 */
#ifndef VD_TEST_PIPELINE_H
#define VD_TEST_PIPELINE_H

#include "../../gen/gen.h"
#include "../../graph/graph.h"
#include "../../lineage/lineage.h"
#include "../../plans/plan.h"
#include "../../stages/stage.h"

typedef struct {
  vd_plan_t s, p;   /* single and parallel plans (owned) */
  vd_graph_t gs, gp;
  vd_lin_table lt;
  vd_stage_set set;
} tp_pair;

/* Builds both graphs and the lineage table of x->s and x->p.  A graph with
 * issues (VD_EINPUT) is kept, so that a test can read g.issues; any other
 * error is returned. */
vd_rc tp_pair_lineage(tp_pair *x, vd_diag *d);
/* tp_pair_lineage, then vd_stage_cut into x->set. */
vd_rc tp_pair_cut(tp_pair *x, vd_diag *d);
/* x = a generated Llama-3 pair (layers, tp; other settings default),
 * cut into stages. */
vd_rc tp_pair_llama3(tp_pair *x, int64_t layers, int64_t tp, vd_diag *d);
/* tp_pair_llama3 that must succeed and cut at least one stage: fails the
 * test, printing the diag's message, otherwise. */
void tp_pair_llama3_ok(tp_pair *x, int64_t layers, int64_t tp);
/* The model and sizes of a small generated configuration; a size left 0
 * keeps the generator's default. */
typedef struct {
  vd_gen_model model;
  int64_t layers, hidden, heads, seq, batch, dp, tp, pp, nm;
} tp_sizes;
/* *c = the generator's defaults (vd_gen_config_default) with z's model and
 * its sizes that are not 0. */
void tp_gen_config(vd_gen_config *c, const tp_sizes *z);
/* Frees everything x holds (a zeroed or partly built pair too). */
void tp_pair_free(tp_pair *x);

#endif
