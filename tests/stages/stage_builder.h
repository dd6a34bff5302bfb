/*
 * tests/stages/stage_builder.h - hand-built stages for the shape reduction
 * and canonical form tests (header-only, included by one test file each).
 *
 * A tb_world holds one plan per side (for node attributes), fake graphs whose
 * node i runs plan node i, and a lineage table holding only pieces.  A
 * tb_stage grows a vd_stage value by value and node by node.
 */
#ifndef VD_TEST_STAGE_BUILDER_H
#define VD_TEST_STAGE_BUILDER_H

#include <string.h>

#include "../../common/mem.h"
#include "../../plans/plan.h"
#include "../../ops/ops.h"
#include "../../stages/stage.h"

#define TB_MAX 64

typedef struct {
  vd_plan_t plan[2];
  vd_gnode_t gnodes[2][TB_MAX];
  vd_graph_t g[2];
  vd_lin_piece pieces[TB_MAX];
  vd_lin_table lt;
} tb_world;

static void tb_world_init(tb_world *w) {
  memset(w, 0, sizeof(*w));
  for (int s = 0; s < 2; s++) {
    vd_plan_init(&w->plan[s], s ? VD_PLAN_PARALLEL : VD_PLAN_SINGLE);
    w->g[s].plan = &w->plan[s];
    w->g[s].nodes = w->gnodes[s];
  }
  w->lt.gs = &w->g[0];
  w->lt.gp = &w->g[1];
  w->lt.pieces = w->pieces;
}
static void tb_world_free(tb_world *w) {
  vd_plan_free(&w->plan[0]);
  vd_plan_free(&w->plan[1]);
}

/* Adds a plan node of `op` named `name` on side s; returns its graph node. */
static uint32_t tb_pnode(tb_world *w, int s, const char *op, const char *name) {
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.layer = -1;
  n.coll = -1;
  uint32_t idx = 0;
  vd_plan_add_node(&w->plan[s], &n, op, name, NULL, 0, NULL, 0, NULL, 0, &idx);
  uint32_t gi = (uint32_t)w->g[s].n_nodes++;
  w->gnodes[s][gi].pnode = idx;
  return gi;
}

/* A lineage piece: slice [lo, hi) (ndim dims), part k of n. */
static int32_t tb_piece(tb_world *w, int ndim, const int64_t *lo, const int64_t *hi, int64_t k, int64_t n) {
  vd_lin_piece *p = &w->pieces[w->lt.n_pieces];
  memset(p, 0, sizeof(*p));
  for (int j = 0; j < ndim; j++) {
    p->lo[j] = lo[j];
    p->hi[j] = hi[j];
  }
  p->part_k = k;
  p->part_n = n;
  return (int32_t)w->lt.n_pieces++;
}

typedef struct {
  vd_stage st;
  vd_stage_value vals[TB_MAX];
  vd_stage_node nodes[TB_MAX];
  vd_stage_target targets[8];
  uint32_t idx[4 * TB_MAX];
} tb_stage;

static void tb_stage_init(tb_stage *s, uint32_t id) {
  memset(s, 0, sizeof(*s));
  s->st.id = id;
  s->st.vals = s->vals;
  s->st.nodes = s->nodes;
  s->st.targets = s->targets;
  s->st.idx = s->idx;
  s->st.canon_class = -1;
}

/* A value of side `side` with shape dims[0..ndim). */
static uint32_t tb_val(tb_stage *s, int side, int ndim, const int64_t *dims) {
  vd_stage_value *v = &s->vals[s->st.n_vals];
  memset(v, 0, sizeof(*v));
  v->side = (uint8_t)side;
  v->value = s->st.n_vals;
  v->ndim = ndim;
  for (int j = 0; j < ndim; j++) v->shape[j] = dims[j];
  v->producer = -1;
  v->leaf_piece = -1;
  v->hyp_svalue = -1;
  return s->st.n_vals++;
}
#define TB_V(s, side, ...) \
  tb_val((s), (side), (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__})

/* A parallel hypothesis value: piece `piece` of single value sv. */
static uint32_t tb_hyp(tb_stage *s, tb_world *w, uint32_t sv, int32_t piece) {
  const vd_stage_value *single = &s->vals[sv];
  int64_t d[VD_MAX_DIMS];
  for (int j = 0; j < single->ndim; j++) d[j] = w->pieces[piece].hi[j] - w->pieces[piece].lo[j];
  uint32_t v = tb_val(s, 1, single->ndim, d);
  s->vals[v].leaf_piece = piece;
  s->vals[v].hyp_svalue = (int32_t)sv;
  return v;
}

/* A node on side `side` running graph node gnode (op looked up by name, -1
 * when unknown). */
static uint32_t tb_node(tb_stage *s, tb_world *w, int side, uint32_t gnode, const uint32_t *in, uint32_t n_in,
                        const uint32_t *out, uint32_t n_out) {
  vd_stage_node *n = &s->nodes[s->st.n_nodes];
  memset(n, 0, sizeof(*n));
  n->side = (uint8_t)side;
  n->gnode = gnode;
  const vd_plan_t *p = &w->plan[side];
  n->op = vd_op_lookup(vd_node_op(p, &p->nodes[w->gnodes[side][gnode].pnode]));
  n->in_off = s->st.n_idx;
  for (uint32_t i = 0; i < n_in; i++) s->idx[s->st.n_idx++] = in[i];
  n->n_in = n_in;
  n->out_off = s->st.n_idx;
  for (uint32_t i = 0; i < n_out; i++) {
    s->idx[s->st.n_idx++] = out[i];
    s->vals[out[i]].producer = (int32_t)s->st.n_nodes;
  }
  n->n_out = n_out;
  return s->st.n_nodes++;
}
#define TB_L(...) (const uint32_t[]){__VA_ARGS__}, (uint32_t)(sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t))

/* A target: single value sv, slice [lo, hi), part_n, pieces (piece, value). */
static void tb_target(tb_stage *s, uint32_t sv, const int64_t *lo, const int64_t *hi, int64_t part_n,
                      const uint32_t *pieces, const uint32_t *pvals, uint32_t n) {
  vd_stage_target *t = &s->targets[s->st.n_targets++];
  memset(t, 0, sizeof(*t));
  t->svalue = (int32_t)sv;
  for (int j = 0; j < s->vals[sv].ndim; j++) {
    t->lo[j] = lo[j];
    t->hi[j] = hi[j];
  }
  t->part_n = part_n;
  t->piece_off = s->st.n_idx;
  t->n_pieces = n;
  for (uint32_t i = 0; i < n; i++) {
    s->idx[s->st.n_idx++] = pieces[i];
    s->idx[s->st.n_idx++] = pvals[i];
  }
}

#endif
