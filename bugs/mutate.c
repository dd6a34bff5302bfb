/*
 * bugs/mutate.c - the bug table, vd_bug_apply, and the editing machinery
 * every mutation uses: deep copy, node queries, in-place edits of ops,
 * attributes, inputs/outputs, groups, node insertion/deletion and schedule
 * steps (see bug_int.h for the editing model).
 *
 * Not here: the mutations themselves (bug_comm.c, bug_compute.c,
 * bug_train.c).  Invariant: every function here leaves the plan structurally
 * valid when its caller's edit is (vd_bug_apply validates the result anyway
 * and reports VD_EINTERNAL if a mutation broke the format).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "bug_int.h"

/* ---- the table ---------------------------------------------------------- */

const char *const vd_bug_class_names[VD_BUG_CLASS__COUNT] = {
    "communication", "rank assignment", "computation", "scaling", "scheduling", "group", "optimizer"};

/* gen_opts are added to the suite's base configuration
 * (llama3 dp2 tp2 pp2 nm2, small sizes); "-" means the base alone. */
const vd_bug_info vd_bug_table[VD_BUG_COUNT] = {
    {1, VD_BUG_COMMUNICATION, "fwd-allreduce-identity",
     "a forward TP all_reduce becomes identity on every participant (dataflow kept)", "MISSING_REDUCTION",
     "MISSING_REDUCTION", VD_BUG_NEED_TP, "tp>1", "-", "--layer 0;--layer 1", 0},
    {2, VD_BUG_COMMUNICATION, "fwd-allreduce-removed",
     "a forward TP all_reduce is removed; its consumers read a tensor nothing produces", "DATAFLOW", "DATAFLOW",
     VD_BUG_NEED_TP, "tp>1", "-", "--layer 0;--layer 1", 0},
    {3, VD_BUG_COMMUNICATION, "allreduce-to-allgather",
     "a forward all_reduce becomes an all_gather (last dim), output shape left as is", "SHAPE", "SHAPE", VD_BUG_NEED_TP,
     "tp>1", "-", "--layer 0;--layer 1", 0},
    {4, VD_BUG_COMMUNICATION, "allgather-to-allreduce",
     "an all_gather becomes an all_reduce, output shape left as is", "SHAPE", "SHAPE", VD_BUG_NEED_GATHER,
     "an all_gather (sp, cp or zero)", "--sp", "--layer 0;--layer 1", 0},
    {5, VD_BUG_COMMUNICATION, "fused-bwd-allreduce-dropped",
     "the backward all_reduce of a TP-entry adapter (forward identity / backward all_reduce) becomes identity",
     "MISSING_REDUCTION", "MISSING_REDUCTION|WRONG_VALUE", VD_BUG_NEED_TP, "tp>1", "-", "--layer 0;--layer 1", 0},
    {6, VD_BUG_RANK_ASSIGNMENT, "pp-sendrecv-crossed",
     "pipeline send/recv endpoints crossed between two TP (or CP) ranks holding different slices",
     "PERMUTED_SLICES", "PERMUTED_SLICES|DATAFLOW|WRONG_VALUE", VD_BUG_NEED_PP | VD_BUG_NEED_SP,
     "pp>1 and sp (or cp>1): the crossed ranks must hold different slices", "--sp", "--rank 0;--rank 2", 0},
    {7, VD_BUG_COMPUTATION, "rank-add-constant",
     "one rank's forward rms_norm (or written-out norm's add) adds a different constant (eps in mean(x^2) + eps)", "WRONG_VALUE",
     "WRONG_VALUE", 0, "-", "-", "--layer 0 --rank 1;--layer 1 --rank 2", 0},
    {8, VD_BUG_COMPUTATION, "rank-pow-exponent",
     "one rank's forward pow(x, 2) raises to the power 4 (a fused rms_norm is first written out as pow/mean/add/rsqrt/mul)", "WRONG_VALUE",
     "WRONG_VALUE", 0, "-", "-", "--layer 0 --rank 0;--layer 1 --rank 3", 0},
    {9, VD_BUG_COMPUTATION, "ranks-add-constant",
     "the rms_norm constant of one layer changed on every rank of a TP group", "WRONG_VALUE", "WRONG_VALUE",
     VD_BUG_NEED_TP, "tp>1", "-", "--layer 0;--layer 1", 1},
    {10, VD_BUG_COMPUTATION, "bwd-multiref-duplicate",
     "a backward multiref sums one gradient twice instead of two different ones", "WRONG_VALUE", "WRONG_VALUE|DATAFLOW", 0,
     "-", "-", "--layer 0 --rank 0;--layer 1 --rank 3", 0},
    {11, VD_BUG_COMPUTATION, "bwd-rope-outputs-swapped",
     "the q and k rotary-embedding backward outputs swapped (fused into adjacent nodes)", "WRONG_VALUE",
     "WRONG_VALUE|DATAFLOW|SHAPE", 0, "-", "-", "--layer 0 --rank 1;--layer 1 --rank 2", 0},
    {12, VD_BUG_SCALING, "rank-attn-scale",
     "one rank's attention scale 1/sqrt(d) becomes 1/d (forward and backward)", "SCALE", "SCALE", 0, "-", "-",
     "--layer 0 --rank 0;--layer 1 --rank 3", 0},
    {13, VD_BUG_SCALING, "ranks-attn-scale", "the attention scale of one layer becomes 1/d on every rank of a TP group",
     "SCALE", "SCALE", VD_BUG_NEED_TP, "tp>1", "-", "--layer 0;--layer 1", 1},
    {14, VD_BUG_SCHEDULING, "reducer-early",
     "a DP gradient reducer is scheduled before the last microbatch's backward", "SCHEDULE", "SCHEDULE",
     VD_BUG_NEED_DP, "dp>1 (a reducer spanning replicas)", "-", "--layer 0 --rank 0;--layer 1 --rank 2", 0},
    {15, VD_BUG_SCALING, "reducer-averages",
     "DP gradient reducers average (divide by dp, dp*cp or tp) although the loss is already globally normalized",
     "SCALE", "SCALE", VD_BUG_NEED_DP, "dp>1", "-", "--rank 0;--rank 3", 1},
    {16, VD_BUG_SCALING, "accumulate-rescale",
     "gradient accumulation divides the accumulator by nm after every microbatch", "WRONG_VALUE",
     "WRONG_VALUE|SCALE", VD_BUG_NEED_NM, "nm>1", "-", "--layer 0 --rank 1;--layer 1 --rank 2", 1},
    {17, VD_BUG_SCALING, "loss-local-tokens",
     "the loss is normalized by the rank's local token count instead of the global one", "SCALE",
     "SCALE|WRONG_VALUE|MISSING_REDUCTION", 0, "a scaled loss; uneven token counts need --loss-mask", "--loss-mask", "--rank 2;--rank 3", 1},
    {18, VD_BUG_COMMUNICATION, "sp-norm-grad-unreduced",
     "a sequence-parallel norm weight gradient is not reduced over the TP group (DP reduction kept)",
     "MISSING_REDUCTION", "MISSING_REDUCTION|WRONG_VALUE", VD_BUG_NEED_SP, "sp", "--sp", "--layer 0;--layer 1", 0},
    {19, VD_BUG_COMMUNICATION, "tied-grad-unreduced",
     "tied embedding / LM head: the gradient reduction between first and last stage becomes identity",
     "MISSING_REDUCTION", "MISSING_REDUCTION|WRONG_VALUE", VD_BUG_NEED_TIED | VD_BUG_NEED_PP,
     "tied embeddings and pp>1", "--tie-embeddings", "--rank 0;--rank 1", 0},
    {20, VD_BUG_COMMUNICATION, "rs-to-ar-or-a2a-to-ag",
     "a reduce_scatter becomes an all_reduce, or an all_to_all an all_gather (output shape left as is)", "SHAPE",
     "SHAPE|WRONG_VALUE", VD_BUG_NEED_SP | VD_BUG_NEED_EP, "sp, or ep (moe)", "--sp", "--layer 0;--layer 1", 0},
    {21, VD_BUG_GROUP, "collective-wrong-group",
     "a TP/EP collective runs over the DP group (the rank's replicas) instead of its own group", "WRONG_VALUE",
     "WRONG_VALUE|DATAFLOW", VD_BUG_NEED_DP, "dp>1 and a TP, CP or EP collective of the DP group's size", "-",
     "--layer 0;--layer 1", 0},
    {22, VD_BUG_GROUP, "allgather-group-order",
     "an all_gather concatenates in a permuted process-group order instead of slice order", "PERMUTED_SLICES",
     "PERMUTED_SLICES", VD_BUG_NEED_GATHER, "an all_gather over >= 2 stored ranks (sp or cp)", "--sp",
     "--layer 0;--layer 1", 0},
    {23, VD_BUG_OPTIMIZER, "gradnorm-unreduced",
     "the squared grad norm for clipping is not all-reduced: each rank clips with its local norm", "WRONG_VALUE",
     "WRONG_VALUE|MISSING_REDUCTION", VD_BUG_NEED_CLIP, "--grad-clip", "--grad-clip 0.001", "--rank 0;--rank 3", 0},
    {24, VD_BUG_OPTIMIZER, "zero-shard",
     "ZeRO: the parameter all_gather after the update is missing (seed even), or every replica updates shard 0 "
     "(seed odd)",
     "WRONG_VALUE", "WRONG_VALUE|DATAFLOW|PERMUTED_SLICES", VD_BUG_NEED_ZERO, "--zero 1", "--zero 1 --optimizer adam",
     "--layer 0 --rank 1;--layer 1 --rank 2", 0},
    {25, VD_BUG_COMPUTATION, "local-position",
     "a CP rank's rope offset (seed even) or causal-mask offset (seed odd) uses the local position", "WRONG_VALUE",
     "WRONG_VALUE", VD_BUG_NEED_CP, "cp>1", "--cp 2", "--layer 0 --rank 2;--layer 1 --rank 7", 0},
};

static const vd_bug_fn bug_fns[VD_BUG_COUNT] = {
    vd_bug_i_01, vd_bug_i_02, vd_bug_i_03, vd_bug_i_04, vd_bug_i_05, vd_bug_i_06, vd_bug_i_07,
    vd_bug_i_08, vd_bug_i_09, vd_bug_i_10, vd_bug_i_11, vd_bug_i_12, vd_bug_i_13, vd_bug_i_14,
    vd_bug_i_15, vd_bug_i_16, vd_bug_i_17, vd_bug_i_18, vd_bug_i_19, vd_bug_i_20, vd_bug_i_21,
    vd_bug_i_22, vd_bug_i_23, vd_bug_i_24, vd_bug_i_25};

const vd_bug_info *vd_bug_info_get(int bug) {
  return bug >= 1 && bug <= VD_BUG_COUNT ? &vd_bug_table[bug - 1] : NULL;
}

void vd_bug_opts_default(vd_bug_opts *o) {
  o->rank = -1;
  o->layer = -1;
  o->mb = -1;
  o->seed = 0;
}

/* ---- lists ---------------------------------------------------------------- */

vd_rc vd_bug_i_list_push(vd_bug_list *l, uint32_t v) {
  if (VD_GROW(l->v, l->cap, l->n + 1)) return VD_ENOMEM;
  l->v[l->n++] = v;
  return VD_OK;
}

void vd_bug_i_list_free(vd_bug_list *l) {
  if (!l) return;
  vd_free(l->v);
  memset(l, 0, sizeof(*l));
}

/* ---- copy ----------------------------------------------------------------- */

static vd_rc dup_array(void **dst, size_t *cap, const void *src, size_t n, size_t elem) {
  size_t m = n ? n : 1;
  *dst = vd_realloc_array(NULL, m, elem);
  if (!*dst) return VD_ENOMEM;
  if (n) memcpy(*dst, src, n * elem);
  if (cap) *cap = m;
  return VD_OK;
}

static vd_rc vd_bug_i_copy(const vd_plan_t *in, vd_plan_t *out) {
  memset(out, 0, sizeof(*out));
  out->kind = in->kind;
  out->model = in->model;
  out->world = in->world;
  out->n_tensors = in->n_tensors;
  out->n_nodes = in->n_nodes;
  out->n_segments = in->n_segments;
  out->n_steps = in->n_steps;
  out->n_refs = in->n_refs;
  out->n_attrs = in->n_attrs;
  out->n_ints = in->n_ints;
  out->n_floats = in->n_floats;
  out->n_pool = in->n_pool;
  VD_CHECK(dup_array((void **)&out->tensors, &out->cap_tensors, in->tensors, in->n_tensors, sizeof(*in->tensors)));
  VD_CHECK(dup_array((void **)&out->nodes, &out->cap_nodes, in->nodes, in->n_nodes, sizeof(*in->nodes)));
  VD_CHECK(dup_array((void **)&out->segments, &out->cap_segments, in->segments, in->n_segments,
                     sizeof(*in->segments)));
  VD_CHECK(dup_array((void **)&out->programs, NULL, in->programs, (size_t)in->world.stored_ranks,
                     sizeof(*in->programs)));
  VD_CHECK(dup_array((void **)&out->steps, &out->cap_steps, in->steps, in->n_steps, sizeof(*in->steps)));
  VD_CHECK(dup_array((void **)&out->refs, &out->cap_refs, in->refs, in->n_refs, sizeof(*in->refs)));
  VD_CHECK(dup_array((void **)&out->attrs, &out->cap_attrs, in->attrs, in->n_attrs, sizeof(*in->attrs)));
  VD_CHECK(dup_array((void **)&out->ints, &out->cap_ints, in->ints, in->n_ints, sizeof(*in->ints)));
  VD_CHECK(dup_array((void **)&out->floats, &out->cap_floats, in->floats, in->n_floats, sizeof(*in->floats)));
  VD_CHECK(dup_array((void **)&out->pool, &out->cap_pool, in->pool, in->n_pool, 1));
  return VD_OK;
}

/* ---- queries ---------------------------------------------------------------- */

const char *vd_bug_i_name(const vd_plan_t *p, const vd_node_t *n) { return p->pool + n->name; }

const char *vd_bug_i_seg_name(const vd_plan_t *p, int32_t seg) {
  return seg >= 0 && (size_t)seg < p->n_segments ? p->pool + p->segments[seg] : "";
}

int vd_bug_i_is(const vd_plan_t *p, const vd_node_t *n, const char *op) { return strcmp(p->pool + n->op, op) == 0; }

int vd_bug_i_ends(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

int vd_bug_i_seg_per_mb(const vd_plan_t *p, int32_t seg) {
  for (size_t i = 0; i < p->n_steps; i++)
    if (p->steps[i].segment == seg && p->steps[i].mb >= 0) return 1;
  return 0;
}

/* The direction of a collective is its segment's: named "<x>.fwd" by our
 * generators, "fwd.<x>" by nnscaler2plan (docs/plan-format.md, segments). */
static int seg_is(const vd_plan_t *p, int32_t seg, const char *dir) {
  const char *s = vd_bug_i_seg_name(p, seg);
  size_t k = strlen(dir);
  return vd_bug_i_ends(s, dir) || (strncmp(s, dir, k) == 0 && s[k] == '.');
}

int vd_bug_i_is_fwd(const vd_plan_t *p, const vd_node_t *n) {
  if (!vd_bug_i_seg_per_mb(p, n->segment)) return 0;
  if (n->phase == VD_PHASE_FWD) return 1;
  return n->phase == VD_PHASE_COMM && seg_is(p, n->segment, "fwd");
}

int vd_bug_i_is_bwd(const vd_plan_t *p, const vd_node_t *n) {
  if (!vd_bug_i_seg_per_mb(p, n->segment)) return 0;
  if (n->phase == VD_PHASE_BWD) return 1;
  return n->phase == VD_PHASE_COMM && seg_is(p, n->segment, "bwd");
}

int vd_bug_i_is_reducer(const vd_plan_t *p, const vd_node_t *n) {
  return n->coll >= 0 && n->span_replicas && !vd_bug_i_seg_per_mb(p, n->segment) &&
         (vd_bug_i_is(p, n, "all_reduce") || vd_bug_i_is(p, n, "reduce_scatter")) && n->n_in == 1 &&
         p->tensors[vd_node_inputs(p, n)[0]].role == VD_ROLE_GRAD;
}

static int vd_bug_i_passes(const vd_bug_ctx *c, const vd_node_t *n) {
  if (c->o->rank >= 0 && n->rank != c->o->rank) return 0;
  if (c->o->layer >= 0 && n->layer != c->o->layer) return 0;
  return 1;
}

const char *vd_bug_i_filters(const vd_bug_ctx *c) {
  if (c->o->rank >= 0 && c->o->layer >= 0) return " matching --rank and --layer";
  if (c->o->rank >= 0) return " matching --rank";
  if (c->o->layer >= 0) return " matching --layer";
  return "";
}

vd_rc vd_bug_i_candidates(vd_bug_ctx *c, vd_bug_pred pred, vd_bug_list *out) {
  for (size_t i = 0; i < c->p->n_nodes; i++) {
    const vd_node_t *n = &c->p->nodes[i];
    if (pred(c->p, n) && vd_bug_i_passes(c, n)) VD_CHECK(vd_bug_i_list_push(out, (uint32_t)i));
  }
  return VD_OK;
}

int32_t vd_bug_i_stage(const vd_plan_t *p, int32_t rank) {
  int64_t per = (int64_t)p->world.tp * p->world.cp * p->world.ep;
  if (per < 1) per = 1;
  return (int32_t)(rank / per);
}

int64_t vd_bug_i_producer(const vd_plan_t *p, uint32_t ti, int64_t before) {
  int64_t end = before < 0 ? (int64_t)p->n_nodes : before;
  for (int64_t i = end - 1; i >= 0; i--) {
    const vd_node_t *n = &p->nodes[i];
    const uint32_t *o = vd_node_outputs(p, n);
    for (uint32_t k = 0; k < n->n_out; k++)
      if (o[k] == ti) return i;
  }
  return -1;
}

vd_rc vd_bug_i_coll_nodes(const vd_plan_t *p, int64_t k, vd_bug_list *out) {
  for (size_t i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].coll == k) VD_CHECK(vd_bug_i_list_push(out, (uint32_t)i));
  return VD_OK;
}

int64_t vd_bug_i_find(const vd_plan_t *p, int32_t rank, const char *op, const char *name, int32_t seg) {
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    if (n->rank == rank && (seg < 0 || n->segment == seg) && vd_bug_i_is(p, n, op) &&
        strcmp(vd_bug_i_name(p, n), name) == 0)
      return (int64_t)i;
  }
  return -1;
}

int64_t vd_bug_i_new_node_id(const vd_plan_t *p) {
  int64_t m = -1;
  for (size_t i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].id > m) m = p->nodes[i].id;
  return m + 1;
}

static int64_t vd_bug_i_new_tensor_id(const vd_plan_t *p) {
  int64_t m = -1;
  for (size_t i = 0; i < p->n_tensors; i++)
    if (p->tensors[i].id > m) m = p->tensors[i].id;
  return m + 1;
}

int64_t vd_bug_i_new_coll(const vd_plan_t *p) {
  int64_t m = -1;
  for (size_t i = 0; i < p->n_nodes; i++)
    if (p->nodes[i].coll > m) m = p->nodes[i].coll;
  return m + 1;
}

/* ---- edits ------------------------------------------------------------------ */

vd_rc vd_bug_i_set_op(vd_plan_t *p, uint32_t ni, const char *op) {
  uint32_t off;
  VD_CHECK(vd_plan_str(p, op, &off));
  p->nodes[ni].op = off;
  return VD_OK;
}

vd_rc vd_bug_i_set_group(vd_plan_t *p, uint32_t ni, int64_t coll, const int64_t *g, uint32_t n, int span) {
  vd_node_t *nd = &p->nodes[ni];
  if (coll < 0) {
    nd->coll = -1;
    nd->n_group = 0;
    nd->span_replicas = 0;
    return VD_OK;
  }
  if (p->n_ints + n > UINT32_MAX) return VD_ENOMEM;
  if (VD_GROW(p->ints, p->cap_ints, p->n_ints + n)) return VD_ENOMEM;
  nd = &p->nodes[ni];
  if (n) memmove(p->ints + p->n_ints, g, n * sizeof(*g));
  nd->group_off = (uint32_t)p->n_ints;
  nd->n_group = n;
  p->n_ints += n;
  nd->coll = coll;
  nd->span_replicas = span;
  return VD_OK;
}

vd_rc vd_bug_i_set_refs(vd_plan_t *p, uint32_t ni, int outputs, const uint32_t *v, uint32_t n) {
  if (p->n_refs + n > UINT32_MAX) return VD_ENOMEM;
  if (VD_GROW(p->refs, p->cap_refs, p->n_refs + n)) return VD_ENOMEM;
  if (n) memmove(p->refs + p->n_refs, v, n * sizeof(*v));
  vd_node_t *nd = &p->nodes[ni];
  if (outputs) {
    nd->out_off = (uint32_t)p->n_refs;
    nd->n_out = n;
  } else {
    nd->in_off = (uint32_t)p->n_refs;
    nd->n_in = n;
  }
  p->n_refs += n;
  return VD_OK;
}

void vd_bug_i_clear_attrs(vd_plan_t *p, uint32_t ni) { p->nodes[ni].n_attr = 0; }

/* Finds key on node ni; when absent, relocates the node's attributes to the
 * end of the array with one more slot for key and returns that slot. */
static vd_rc attr_slot(vd_plan_t *p, uint32_t ni, const char *key, vd_attr_t **out) {
  vd_node_t *n = &p->nodes[ni];
  for (uint32_t i = 0; i < n->n_attr; i++) {
    vd_attr_t *a = &p->attrs[n->attr_off + i];
    if (strcmp(p->pool + a->key, key) == 0) {
      *out = a;
      return VD_OK;
    }
  }
  uint32_t k;
  VD_CHECK(vd_plan_str(p, key, &k));
  size_t base = p->n_attrs, cnt = n->n_attr;
  if (VD_GROW(p->attrs, p->cap_attrs, base + cnt + 1)) return VD_ENOMEM;
  n = &p->nodes[ni];
  if (cnt) memmove(p->attrs + base, p->attrs + n->attr_off, cnt * sizeof(*p->attrs));
  memset(&p->attrs[base + cnt], 0, sizeof(*p->attrs));
  p->attrs[base + cnt].key = k;
  n->attr_off = (uint32_t)base;
  n->n_attr = (uint32_t)(cnt + 1);
  p->n_attrs = base + cnt + 1;
  *out = &p->attrs[base + cnt];
  return VD_OK;
}

/* Sets key on node ni to the scalar kind and value of v. */
static vd_rc set_scalar(vd_plan_t *p, uint32_t ni, const char *key, vd_attr_t v) {
  vd_attr_t *a;
  VD_CHECK(attr_slot(p, ni, key, &a));
  a->kind = v.kind;
  a->len = 0;
  a->v = v.v;
  return VD_OK;
}

vd_rc vd_bug_i_attr_float(vd_plan_t *p, uint32_t ni, const char *key, double v) {
  return set_scalar(p, ni, key, (vd_attr_t){.kind = VD_ATTR_FLOAT, .v.f = v});
}

vd_rc vd_bug_i_attr_int(vd_plan_t *p, uint32_t ni, const char *key, int64_t v) {
  return set_scalar(p, ni, key, (vd_attr_t){.kind = VD_ATTR_INT, .v.i = v});
}

void vd_bug_i_move(vd_plan_t *p, uint32_t from, uint32_t to) {
  if (from == to) return;
  vd_node_t tmp = p->nodes[from];
  if (from > to)
    memmove(p->nodes + to + 1, p->nodes + to, (from - to) * sizeof(*p->nodes));
  else
    memmove(p->nodes + from, p->nodes + from + 1, (to - from) * sizeof(*p->nodes));
  p->nodes[to] = tmp;
}

void vd_bug_i_move_last(vd_plan_t *p, uint32_t pos) { vd_bug_i_move(p, (uint32_t)(p->n_nodes - 1), pos); }

vd_rc vd_bug_i_add_node(vd_plan_t *p, const vd_node_t *tmpl, const char *op, const char *name, const uint32_t *in,
                        uint32_t n_in, const uint32_t *out, uint32_t n_out, uint32_t *idx) {
  vd_node_t n;
  memset(&n, 0, sizeof(n));
  n.id = vd_bug_i_new_node_id(p);
  n.rank = tmpl->rank;
  n.segment = tmpl->segment;
  n.layer = tmpl->layer;
  n.phase = tmpl->phase;
  n.coll = -1;
  return vd_plan_add_node(p, &n, op, name, in, n_in, out, n_out, NULL, 0, idx);
}

vd_rc vd_bug_i_add_tensor(vd_plan_t *p, const vd_tensor_t *like, const char *name, int32_t ndim, const int64_t *shape,
                          uint32_t *idx) {
  vd_tensor_t t = *like;
  t.id = vd_bug_i_new_tensor_id(p);
  t.ndim = ndim;
  memset(t.shape, 0, sizeof(t.shape));
  for (int32_t i = 0; i < ndim && i < VD_MAX_DIMS; i++) t.shape[i] = shape[i];
  t.has_lin = 0;
  /* An inserted tensor is an intermediate: a weight, optimizer state or
   * loss must be annotated (plans/validate.c), and this one has no lineage. */
  if (t.role == VD_ROLE_WEIGHT || t.role == VD_ROLE_OPTSTATE || t.role == VD_ROLE_LOSS) t.role = VD_ROLE_ACT;
  return vd_plan_add_tensor(p, &t, name, idx);
}

void vd_bug_i_delete_node(vd_plan_t *p, uint32_t ni) {
  memmove(p->nodes + ni, p->nodes + ni + 1, (p->n_nodes - ni - 1) * sizeof(*p->nodes));
  p->n_nodes--;
}

vd_rc vd_bug_i_take_steps(vd_plan_t *p, vd_step_t **old_out, vd_program_t **prog_out) {
  size_t n = p->n_steps;
  vd_step_t *old = vd_realloc_array(NULL, n ? n : 1, sizeof(*old));
  vd_program_t *prog = vd_realloc_array(NULL, (size_t)p->world.stored_ranks, sizeof(*prog));
  *old_out = NULL;
  *prog_out = NULL;
  if (!old || !prog) {
    vd_free(old);
    vd_free(prog);
    return VD_ENOMEM;
  }
  memcpy(old, p->steps, n * sizeof(*old));
  memcpy(prog, p->programs, (size_t)p->world.stored_ranks * sizeof(*prog));
  p->n_steps = 0;
  for (int32_t r = 0; r < p->world.stored_ranks; r++) p->programs[r].n_steps = 0;
  *old_out = old;
  *prog_out = prog;
  return VD_OK;
}

vd_rc vd_bug_i_insert_step(vd_plan_t *p, int32_t rank, uint32_t pos, int32_t seg, int32_t mb) {
  vd_step_t *old;
  vd_program_t *prog;
  VD_CHECK(vd_bug_i_take_steps(p, &old, &prog));
  vd_rc rc = VD_OK;
  for (int32_t r = 0; r < p->world.stored_ranks && rc == VD_OK; r++) {
    for (uint32_t i = 0; i <= prog[r].n_steps && rc == VD_OK; i++) {
      if (r == rank && i == pos) rc = vd_plan_add_step(p, r, seg, mb);
      if (rc == VD_OK && i < prog[r].n_steps) {
        const vd_step_t *s = &old[prog[r].step_off + i];
        rc = vd_plan_add_step(p, r, s->segment, s->mb);
      }
    }
  }
  vd_free(old);
  vd_free(prog);
  return rc;
}

/* ---- result ------------------------------------------------------------------ */

void vd_bug_i_note_node(vd_bug_ctx *c, int64_t id) {
  vd_bug_result *r = c->r;
  for (size_t i = 0; i < r->n_nodes; i++)
    if (r->nodes[i] == id) return;
  if (r->n_nodes < VD_BUG_MAX_NODES) r->nodes[r->n_nodes++] = id;
}

void vd_bug_i_note_rank(vd_bug_ctx *c, int32_t rank) {
  vd_bug_result *r = c->r;
  size_t i = 0;
  while (i < r->n_ranks && r->ranks[i] < rank) i++;
  if (i < r->n_ranks && r->ranks[i] == rank) return;
  if (r->n_ranks >= VD_BUG_MAX_RANKS) return;
  memmove(r->ranks + i + 1, r->ranks + i, (r->n_ranks - i) * sizeof(*r->ranks));
  r->ranks[i] = rank;
  r->n_ranks++;
}

/* -2: nothing noted yet; -1: none or several. */
void vd_bug_i_note_layer(vd_bug_ctx *c, int32_t layer) {
  if (c->r->layer == -2) c->r->layer = layer;
  else if (c->r->layer != layer) c->r->layer = -1;
}

void vd_bug_i_note_seg(vd_bug_ctx *c, int32_t seg) {
  if (vd_bug_i_seg_per_mb(c->p, seg)) c->r->per_mb = 1;
}

void vd_bug_i_note_site(vd_bug_ctx *c, uint32_t ni) {
  const vd_node_t *n = &c->p->nodes[ni];
  vd_bug_i_note_node(c, n->id);
  vd_bug_i_note_rank(c, n->rank);
  vd_bug_i_note_layer(c, n->layer);
  vd_bug_i_note_seg(c, n->segment);
}

void vd_bug_i_note_list(vd_bug_ctx *c, const vd_bug_list *l) {
  for (size_t i = 0; i < l->n; i++) vd_bug_i_note_site(c, l->v[i]);
}

void vd_bug_i_what(vd_bug_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->r->what, sizeof(c->r->what), fmt, ap);
  va_end(ap);
}

/* ---- entry ------------------------------------------------------------------- */

vd_rc vd_bug_apply(const vd_plan_t *in, int bug, const vd_bug_opts *o, vd_plan_t *out, vd_bug_result *r,
                   vd_diag *d) {
  vd_bug_opts def;
  memset(out, 0, sizeof(*out));
  memset(r, 0, sizeof(*r));
  r->bug = bug;
  r->mb = -1;
  r->layer = -2;
  if (!o) {
    vd_bug_opts_default(&def);
    o = &def;
  }
  const vd_bug_info *info = vd_bug_info_get(bug);
  if (!info) VD_FAIL(d, VD_EUSAGE, NULL, NULL, "bug", "expected a bug number in [1, %d], got %d", VD_BUG_COUNT, bug);
  if (in->kind != VD_PLAN_PARALLEL)
    VD_FAIL(d, VD_EINPUT, NULL, "plan", "kind", "expected a parallel plan to mutate, got a single-device plan");
  if (o->rank >= in->world.stored_ranks)
    VD_FAIL(d, VD_EUSAGE, NULL, NULL, "--rank", "expected a stored rank in [0, %d), got %d", in->world.stored_ranks,
            o->rank);
  if (o->mb >= in->world.nm)
    VD_FAIL(d, VD_EUSAGE, NULL, NULL, "--microbatch", "expected a microbatch in [0, %d), got %d", in->world.nm,
            o->mb);
  if (vd_bug_i_copy(in, out) != VD_OK) return VD_OOM(d);
  vd_bug_ctx c = {.p = out, .in = in, .o = o, .r = r, .d = d, .bug = bug};
  vd_rc rc = bug_fns[bug - 1](&c);
  /* Bug 14's microbatch is the one its reducer overtakes; for the others
   * --microbatch confines the mutation to that microbatch (mutate_mb.c). */
  if (rc == VD_OK && o->mb >= 0 && bug != 14) rc = vd_bug_i_confine_mb(&c, o->mb);
  if (r->layer == -2) r->layer = -1;
  if (rc == VD_ENOMEM) return VD_OOM(d);
  if (rc != VD_OK) return rc;
  vd_diag vd;
  vd_diag_clear(&vd);
  rc = vd_plan_validate(out, "mutated plan", &vd);
  if (rc == VD_ENOMEM) return VD_OOM(d);
  if (rc != VD_OK) {
    char line[768];
    vd_diag_format(&vd, line, sizeof(line));
    VD_FAIL(d, VD_EINTERNAL, NULL, NULL, NULL, "bug %d produced an invalid plan: %s", bug, line);
  }
  return VD_OK;
}
