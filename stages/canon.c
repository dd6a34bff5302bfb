/*
 * stages/canon.c - canonical forms of stages, for symmetry reuse
 * (docs/verifier.md section 5).
 *
 * A stage is serialized into bytes that hold everything its proof depends
 * on, and nothing that names where it came from:
 *   - values in stage order: side, integer-valued or real, reduced shape
 *     (and the original shape when reduced: contractions scale by the ratio
 *     of full to reduced counts, docs/shape-reduction.md COUNT),
 *     producer (stage-local node), leaf kind: free single symbol, or
 *     hypothesis with its single value (stage-local), reduced slice and
 *     part k of n;
 *   - nodes in stage order: operator id (and name when unknown to the
 *     registry), every plan attribute sorted by name with the reduction's
 *     overrides applied (floats by exact bits, strings by content), operand
 *     wiring as stage-local indices (collective participants in group order),
 *     the participant count a collective's encoder reads;
 *   - targets: single value, reduced slice, part count, pieces (part k and
 *     stage-local value) in stage order.
 * Left out on purpose: plan node and tensor ids, graph indices, ranks,
 * replicas, microbatches, layers, source names, original shapes of an
 * unreduced stage (they are the reduced ones).
 *
 * SOUNDNESS: two stages share a class only if their serializations are
 * byte-identical (the 64-bit FNV-1a hash only picks the bucket; bytes are
 * always compared), so the solver would be asked the same query for both:
 * the encoders read exactly the serialized data (operator, attributes after
 * overrides, reduced and full shapes, lineage structure, wiring).  Uninterpreted
 * function symbols and rope/causal positions depend only on attribute values
 * and reduced shapes, which are serialized; integer-valued inputs (token ids,
 * labels) are marked per value.  Serialization is canonical only up to the
 * stage order chosen by stages/cut.c; a cut that orders two symmetric stages
 * differently only loses reuse, never soundness.
 *
 * The same bytes key the proof cache across runs and configurations
 * (verifier/cache.c, docs/verifier.md section 9): anything added to what the
 * solver reads must be added here, and VD_ENCODER_VERSION
 * (solver/stage_solve.h) bumped.
 *
 * Cost: O(total stage size) plus one byte comparison per hash hit.
 */
#include "stage.h"

#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "../ops/ops.h"

typedef vd_stage_canon_key buf_t; /* (hash unused while serializing) */

static void put(buf_t *b, const void *p, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n) nc *= 2;
    uint8_t *nb = vd_realloc_array(b->b, nc, 1);
    if (!nb) {
      b->oom = 1;
      return;
    }
    b->b = nb;
    b->cap = nc;
  }
  memcpy(b->b + b->n, p, n);
  b->n += n;
}
static void put_i64(buf_t *b, int64_t v) { put(b, &v, sizeof(v)); }
static void put_f64(buf_t *b, double v) { put(b, &v, sizeof(v)); }
static void put_str(buf_t *b, const char *s) {
  size_t n = strlen(s);
  put_i64(b, (int64_t)n);
  put(b, s, n);
}

static const vd_graph_t *graph_of(const vd_lin_table *lt, uint8_t side) {
  if (!lt) return NULL;
  return side ? lt->gp : lt->gs;
}

static const vd_node_t *plan_node(const vd_lin_table *lt, const vd_stage_node *n, const vd_plan_t **plan) {
  const vd_graph_t *g = graph_of(lt, n->side);
  *plan = NULL;
  if (!g || !g->plan || n->gnode >= g->n_nodes) return NULL;
  *plan = g->plan;
  uint32_t pn = g->nodes[n->gnode].pnode;
  return pn < g->plan->n_nodes ? &g->plan->nodes[pn] : NULL;
}

static int value_is_int(const vd_lin_table *lt, const vd_stage_value *v) {
  const vd_graph_t *g = graph_of(lt, v->side);
  if (!g || !g->plan || v->value >= g->n_values) return 0;
  uint32_t t = g->values[v->value].tensor;
  if (t >= g->plan->n_tensors) return 0;
  vd_dtype dt = g->plan->tensors[t].dtype;
  return dt == VD_DT_I64 || dt == VD_DT_I32 || dt == VD_DT_BOOL;
}

static void put_attrs(buf_t *b, const vd_stage *st, const vd_stage_node *n, const vd_plan_t *p, const vd_node_t *pn) {
  if (!pn) {
    put_i64(b, -1);
    return;
  }
  put_i64(b, pn->n_attr);
  /* Sorted by name: selection over the (few) attributes of one node. */
  uint32_t done_mask_words = (pn->n_attr + 63) / 64;
  uint64_t small[4] = {0};
  uint64_t *done = done_mask_words <= 4 ? small : vd_calloc(done_mask_words, sizeof(uint64_t));
  if (!done) {
    b->oom = 1;
    return;
  }
  for (uint32_t r = 0; r < pn->n_attr; r++) {
    int best = -1;
    for (uint32_t i = 0; i < pn->n_attr; i++) {
      if (done[i / 64] >> (i % 64) & 1) continue;
      if (best < 0 || strcmp(vd_plan_s(p, p->attrs[pn->attr_off + i].key),
                             vd_plan_s(p, p->attrs[pn->attr_off + (uint32_t)best].key)) < 0)
        best = (int)i;
    }
    done[best / 64] |= 1ull << (best % 64);
    const vd_attr_t *a = &p->attrs[pn->attr_off + (uint32_t)best];
    put_str(b, vd_plan_s(p, a->key));
    put_i64(b, a->kind);
    int overridden = 0;
    for (uint32_t k = 0; k < n->n_ovr; k++)
      if (st->ovr[n->ovr_off + k].key == a->key) {
        put_i64(b, st->ovr[n->ovr_off + k].value);
        overridden = 1;
      }
    if (overridden) continue;
    switch (a->kind) {
    case VD_ATTR_INT: put_i64(b, a->v.i); break;
    case VD_ATTR_FLOAT: put(b, &a->v.f, sizeof(double)); break; /* exact bits */
    case VD_ATTR_STR: put_str(b, vd_plan_s(p, a->v.s)); break;
    case VD_ATTR_INTS:
      put_i64(b, a->len);
      put(b, p->ints + a->v.off, sizeof(int64_t) * a->len);
      break;
    case VD_ATTR_FLOATS:
      put_i64(b, a->len);
      put(b, p->floats + a->v.off, sizeof(double) * a->len);
      break;
    }
  }
  /* The full-size divisor that shape reduction gives an averaging node
   * (an override of an attribute the node lacks): part of the proof. */
  for (uint32_t k = 0; k < n->n_ovr; k++)
    if (st->ovr[n->ovr_off + k].key == VD_OVR_DIVISOR) {
      put_str(b, VD_OVR_DIVISOR_NAME);
      put_i64(b, st->ovr[n->ovr_off + k].value);
    }
  if (done != small) vd_free(done);
}

/* The participant count a collective's encoder reads (solver/stage_solve.c,
 * node_parts: all_to_all splits by it), which the operand count alone does
 * not fix; 1 for an ordinary node. */
static int64_t node_parts(const vd_lin_table *lt, const vd_stage_node *n) {
  const vd_graph_t *g = graph_of(lt, n->side);
  if (!g || n->gnode >= g->n_nodes) return -1;
  const vd_gnode_t *gn = &g->nodes[n->gnode];
  int64_t parts = gn->n_part ? gn->n_part : 1;
  if (gn->n_in > 0 && n->n_in != gn->n_in) parts = parts * n->n_in / gn->n_in; /* virtual replicas */
  return parts;
}

/* Serializes st into b (b->oom on allocation failure). */
static void serialize(const vd_lin_table *lt, const vd_stage *st, buf_t *b) {
  put_i64(b, st->n_vals);
  put_i64(b, st->n_nodes);
  put_i64(b, st->n_targets);
  put_i64(b, st->reduced);
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    put_i64(b, v->side);
    put_i64(b, value_is_int(lt, v));
    put_i64(b, v->ndim);
    for (int32_t j = 0; j < v->ndim; j++) put_i64(b, v->rshape[j]);
    /* a reduced stage's contractions scale by full/reduced counts (COUNT) */
    if (st->reduced)
      for (int32_t j = 0; j < v->ndim; j++) put_i64(b, v->shape[j]);
    put_i64(b, v->producer);
    if (v->producer >= 0) continue;
    if (v->leaf_piece < 0) {
      put_i64(b, 1); /* free single symbol (or a parallel leaf without lineage) */
      continue;
    }
    put_i64(b, 2); /* hypothesis */
    put_i64(b, v->hyp_svalue);
    for (int32_t j = 0; j < v->ndim; j++) {
      put_i64(b, v->rlo[j]);
      put_i64(b, v->rhi[j]);
    }
    if (lt && (size_t)v->leaf_piece < lt->n_pieces) {
      put_i64(b, lt->pieces[v->leaf_piece].part_k);
      put_i64(b, lt->pieces[v->leaf_piece].part_n);
      put_f64(b, lt->pieces[v->leaf_piece].f);
    } else {
      put_i64(b, -1);
      put_i64(b, -1);
    }
  }
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *n = &st->nodes[i];
    const vd_plan_t *p;
    const vd_node_t *pn = plan_node(lt, n, &p);
    put_i64(b, n->side);
    put_i64(b, n->op);
    if (n->op < 0) put_str(b, pn ? vd_node_op(p, pn) : "");
    put_attrs(b, st, n, p, pn);
    put_i64(b, n->n_in);
    for (uint32_t k = 0; k < n->n_in; k++) put_i64(b, st->idx[n->in_off + k]);
    put_i64(b, n->n_out);
    for (uint32_t k = 0; k < n->n_out; k++) put_i64(b, st->idx[n->out_off + k]);
    put_i64(b, node_parts(lt, n));
  }
  for (uint32_t t = 0; t < st->n_targets; t++) {
    const vd_stage_target *tg = &st->targets[t];
    put_i64(b, tg->svalue);
    int32_t nd = tg->svalue >= 0 && (uint32_t)tg->svalue < st->n_vals ? st->vals[tg->svalue].ndim : 0;
    for (int32_t j = 0; j < nd; j++) {
      put_i64(b, tg->rlo[j]);
      put_i64(b, tg->rhi[j]);
    }
    put_i64(b, tg->part_n);
    put_i64(b, tg->n_pieces);
    for (uint32_t k = 0; k < tg->n_pieces; k++) {
      uint32_t piece = st->idx[tg->piece_off + 2 * k];
      /* A piece's part index is part of the claim only for a sum target
       * (part_n > 1); one part of a sum by part claims the piece whole. */
      if (tg->part_n > 1) put_i64(b, lt && piece < lt->n_pieces ? lt->pieces[piece].part_k : -1);
      put_f64(b, lt && piece < lt->n_pieces ? lt->pieces[piece].f : 1.0); /* an inferred factor */
      put_i64(b, st->idx[tg->piece_off + 2 * k + 1]);
    }
  }
}


typedef struct {
  uint64_t hash;
  uint32_t rep;   /* representative's stage id */
  uint8_t *bytes; /* its serialization (owned); NULL: empty slot */
  size_t n;
} slot_t;

struct vd_stage_canon_tab {
  slot_t *tab;
  size_t cap, n;
  buf_t b;
};

vd_rc vd_stage_canon_new(vd_stage_canon_tab **t, vd_diag *d) {
  *t = vd_calloc(1, sizeof(**t));
  if (!*t) return VD_OOM(d);
  (*t)->cap = 1024;
  (*t)->tab = vd_calloc((*t)->cap, sizeof(slot_t));
  if (!(*t)->tab) {
    vd_free(*t);
    *t = NULL;
    return VD_OOM(d);
  }
  return VD_OK;
}

void vd_stage_canon_free(vd_stage_canon_tab *t) {
  if (!t) return;
  for (size_t i = 0; i < t->cap; i++) vd_free(t->tab[i].bytes);
  vd_free(t->tab);
  vd_free(t->b.b);
  vd_free(t);
}

static int grow(vd_stage_canon_tab *t) {
  size_t nc = t->cap * 2;
  slot_t *nt = vd_calloc(nc, sizeof(*nt));
  if (!nt) return -1;
  for (size_t i = 0; i < t->cap; i++) {
    if (!t->tab[i].bytes) continue;
    size_t j = (size_t)t->tab[i].hash & (nc - 1);
    while (nt[j].bytes) j = (j + 1) & (nc - 1);
    nt[j] = t->tab[i];
  }
  vd_free(t->tab);
  t->tab = nt;
  t->cap = nc;
  return 0;
}

vd_rc vd_stage_canon_key_of(const vd_lin_table *lt, const vd_stage *st, vd_stage_canon_key *k, vd_diag *d) {
  k->n = 0;
  serialize(lt, st, k);
  if (k->oom) {
    k->oom = 0;
    return VD_OOM(d);
  }
  uint64_t h = vd_hash_bytes(k->b, k->n);
  k->hash = h ? h : 1; /* 0 means "not computed" */
  return VD_OK;
}

void vd_stage_canon_key_free(vd_stage_canon_key *k) {
  if (!k) return;
  vd_free(k->b);
  memset(k, 0, sizeof(*k));
}

static vd_rc vd_stage_canon_add(vd_stage_canon_tab *t, const vd_lin_table *lt, vd_stage *st, vd_diag *d) {
  VD_CHECK(vd_stage_canon_key_of(lt, st, &t->b, d));
  return vd_stage_canon_insert(t, st, &t->b, d);
}

vd_rc vd_stage_canon_insert(vd_stage_canon_tab *t, vd_stage *st, const vd_stage_canon_key *k, vd_diag *d) {
  if ((t->n + 1) * 2 > t->cap && grow(t)) return VD_OOM(d);
  uint64_t h = k->hash;
  st->canon_hash = h;
  for (size_t i = (size_t)h & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    slot_t *sl = &t->tab[i];
    if (!sl->bytes) {
      sl->bytes = vd_malloc(k->n ? k->n : 1);
      if (!sl->bytes) return VD_OOM(d);
      memcpy(sl->bytes, k->b, k->n);
      sl->n = k->n;
      sl->hash = h;
      sl->rep = st->id;
      t->n++;
      st->canon_class = (int32_t)st->id;
      return VD_OK;
    }
    /* Never trust the hash alone. */
    if (sl->hash == h && sl->n == k->n && memcmp(sl->bytes, k->b, k->n) == 0) {
      st->canon_class = (int32_t)sl->rep;
      return VD_OK;
    }
  }
}

vd_rc vd_stage_canon(const vd_lin_table *lt, vd_stage_set *set, vd_diag *d) {
  vd_stage_canon_tab *t = NULL;
  VD_CHECK(vd_stage_canon_new(&t, d));
  vd_rc rc = VD_OK;
  for (size_t s = 0; s < set->n_stages && rc == VD_OK; s++) rc = vd_stage_canon_add(t, lt, &set->stages[s], d);
  vd_stage_canon_free(t);
  return rc;
}
