/*
 * tests/soundness/soundness.c - the soundness fuzzer (`make soundness`).
 *
 * Generates small single/parallel plan pairs (mlp, llama3, moe; dp/tp/pp/nm
 * 2 with sp, cp, zero+adam, ep), applies random mutations to the parallel
 * plan, and judges every mutant twice: by the verifier (vd_run_verify, the
 * same run as `verdict --sm --pm`, shape reduction and all) and by the
 * numeric oracle on the plans' own, UNREDUCED shapes (vd_exec_compare, as
 * `verdict exec --no-reduce`).  The oracle is the referee:
 *   - verifier EQUIVALENT while the oracle disagrees: UNSOUND (the run fails,
 *     the mutant is kept in the output directory for reproduction);
 *   - verifier NOT EQUIVALENT while the oracle agrees: a false alarm
 *     (counted and reported with its rate, not a failure: the oracle runs one
 *     random input and cannot prove equivalence, and some rewrites are
 *     rejected by design, e.g. a dataflow the plan format forbids).
 * A mutant that the plan checks reject (vd_plan_validate, vd_op_check_plan)
 * is counted as "rejected" (exit 2 on the command line) and not judged.
 *
 * The mutations are written from docs/plan-format.md and docs/operators.md
 * alone (not from bugs/): constants and attributes, operand order, inserted
 * view/transpose pairs that cancel and permutations that do not, dropped and
 * duplicated nodes, collective groups and members, and schedule order.  Some
 * preserve values, most change them; the oracle decides which, so no
 * mutation needs to know its own effect.
 *
 *   soundness [-n N] [--first I] [--seed S] [--threads T] [--out DIR] [--no-cross-check] [--strip]
 *             [--deadline S] [--kind NAME] [--max-false-alarms N] [--max-inconclusive N] [-v]
 *
 * --strip strips the generated parallel plans to their boundary (as `verdict
 * plan strip --keep boundary`), so every other lineage is inferred, and adds
 * the rewrites inference must see through (scale split in two, loss scaling
 * then unscaling, mean as sum x 1/count, a renamed plan) to the kinds drawn.
 * --deadline S stops each verification after S s of wall clock (as `verdict
 * --deadline`: INCONCLUSIVE, counted like any); -v prints every mutant with
 * its verification time and configuration index (cfgN.single.plan in DIR);
 * --kind NAME draws only that kind (its name in the table).
 * --max-false-alarms N and --max-inconclusive N make the run fail (exit 1)
 * when more value-preserving mutants than N are NOT EQUIVALENT or
 * INCONCLUSIVE (`make soundness`: a false alarm blocks a correct launch, so
 * it fails the suite like an unsound verdict); default: no limit.
 *
 * N defaults to $N or 400; the seed is fixed (1) so `make test` is
 * deterministic.  Mutant i depends only on (seed, i), so a long run can be
 * split into shards (--first 0 -n 5000 and --first 5000 -n 5000 are the
 * 10,000-mutant run); --threads sets the verifier's OpenMP threads.  Everything runs in this one process: plans are generated
 * and mutated in memory, the mutant is written once to DIR (the verifier's
 * entry point reads files), and both judges run in-process.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/ctl.h"
#include "../../common/mem.h"
#include "../../oracle/exec.h"
#include "../../ops/ops.h"
#include "../../gen/gen.h"
#include "../../plans/plan.h"
#include "../../solver/smt.h"
#include "../../verifier/run.h"

/* ---- random numbers (splitmix64: deterministic per seed and mutant) ---- */

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t rnext(rng_t *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint32_t rbelow(rng_t *r, uint32_t n) { return n ? (uint32_t)(rnext(r) % n) : 0; }

/* ---- configurations ------------------------------------------------------ */

typedef struct {
  const char *name;
  vd_gen_config c;
} config_t;

static int make_configs(config_t *out) {
  int n = 0;
  vd_gen_config b;
#define BASE(model_)                                                                              \
  do {                                                                                            \
    vd_gen_config_default(&b);                                                                    \
    b.model = model_;                                                                             \
    b.layers = 2, b.hidden = 16, b.heads = 2, b.seq = 8, b.batch = 8, b.vocab = 32, b.experts = 4; \
  } while (0)
  BASE(VD_GEN_MLP);
  b.dp = 2, b.tp = 2, b.pp = 2, b.nm = 2;
  out[n++] = (config_t){"mlp dp2 tp2 pp2 nm2", b};
  BASE(VD_GEN_LLAMA3);
  b.dp = 2, b.tp = 2, b.pp = 2, b.nm = 2, b.sp = 1;
  out[n++] = (config_t){"llama3 dp2 tp2 pp2 nm2 sp", b};
  BASE(VD_GEN_LLAMA3);
  b.tp = 2, b.cp = 2;
  out[n++] = (config_t){"llama3 tp2 cp2", b};
  BASE(VD_GEN_LLAMA3);
  b.dp = 2, b.nm = 2, b.zero = 1, b.optimizer = VD_GEN_ADAM;
  out[n++] = (config_t){"llama3 dp2 nm2 zero adam", b};
  BASE(VD_GEN_MOE);
  b.dp = 2, b.ep = 2, b.tp = 2;
  out[n++] = (config_t){"moe dp2 tp2 ep2", b};
  BASE(VD_GEN_MOE);
  b.pp = 2, b.nm = 2, b.sp = 1, b.tp = 2;
  out[n++] = (config_t){"moe tp2 pp2 nm2 sp", b};
#undef BASE
  return n;
}

/* ---- plan rebuilding --------------------------------------------------------
 *
 * A mutation is a copy of the parallel plan with edits: tensors (plus new
 * ones), nodes in file order with some replaced, dropped, or preceded by
 * inserted nodes, and the schedule (optionally with two steps swapped). */

typedef struct {
  const char *op;
  uint32_t in[3], n_in;
  uint32_t out[2], n_out;
  int64_t coll;
  const int64_t *group;
  uint32_t n_group;
  int span;
  /* attributes: copied from node `attrs_from` of the source (if >= 0) with
   * overrides below */
  int64_t attrs_from;
  const char *set_key;
  vd_attr_kind set_kind;
  int64_t set_i;
  double set_f;
  const char *set_s;
  const char *ints_key; /* an INTS attribute override */
  const int64_t *ints;
  uint32_t n_ints;
} newnode_t;

#define MAX_INS 4

typedef struct {
  /* per source node: -1 keep, -2 drop, or index into repl[] */
  int32_t *action;
  newnode_t repl[4];
  int n_repl;
  /* inserted before source node `before`: ins[] */
  int64_t before;
  newnode_t ins[MAX_INS];
  int n_ins;
  int64_t after; /* inserted after source node `after`: aft[] */
  newnode_t aft[MAX_INS];
  int n_aft;
  /* new tensors: copies of source tensor proto[] without lineage, appended */
  uint32_t proto[8];
  int64_t new_shape[8][VD_MAX_DIMS];
  int new_ndim[8];
  int n_new;
  /* schedule: swap steps a and b (indices into steps) when a != b */
  int64_t swap_a, swap_b;
  /* group override per collective key */
  int64_t group_coll;
  int64_t group_perm[64];
  uint32_t group_n;
  int rename; /* M_RENAME: names written reversed with a prefix */
  char desc[256];
} edit_t;

/* M_RENAME's name for `name` (buf of n bytes). */
static const char *renamed(const edit_t *e, const char *name, char *buf, size_t n) {
  if (!e->rename) return name;
  size_t l = strlen(name), at = (size_t)snprintf(buf, n, "zz.");
  for (size_t i = 0; i < l && at + 1 < n; i++) buf[at++] = name[l - 1 - i];
  buf[at < n ? at : n - 1] = 0;
  return buf;
}

static vd_rc emit_node(vd_plan_t *q, const vd_plan_t *p, const vd_node_t *proto, const newnode_t *nn,
                       const char *name) {
  vd_node_t n = *proto;
  n.coll = nn->coll;
  n.span_replicas = nn->span;
  uint32_t idx;
  VD_CHECK(vd_plan_add_node(q, &n, nn->op, name, nn->in, nn->n_in, nn->out, nn->n_out, nn->group, nn->n_group,
                            &idx));
  if (nn->attrs_from >= 0) {
    const vd_node_t *src = &p->nodes[nn->attrs_from];
    for (uint32_t k = 0; k < src->n_attr; k++) {
      const vd_attr_t *a = &p->attrs[src->attr_off + k];
      const char *key = vd_plan_s(p, a->key);
      if ((nn->set_key && strcmp(key, nn->set_key) == 0) || (nn->ints_key && strcmp(key, nn->ints_key) == 0))
        continue;
      VD_CHECK(vd_plan_attr_copy(q, idx, p, a));
    }
  }
  if (nn->set_key) {
    if (nn->set_kind == VD_ATTR_INT) VD_CHECK(vd_plan_attr_int(q, idx, nn->set_key, nn->set_i));
    if (nn->set_kind == VD_ATTR_FLOAT) VD_CHECK(vd_plan_attr_float(q, idx, nn->set_key, nn->set_f));
    if (nn->set_kind == VD_ATTR_STR) VD_CHECK(vd_plan_attr_str(q, idx, nn->set_key, nn->set_s));
  }
  if (nn->ints_key) VD_CHECK(vd_plan_attr_ints(q, idx, nn->ints_key, nn->ints, nn->n_ints));
  return VD_OK;
}

/* q's header, world, segments and programs: p's, with the steps e swaps
 * swapped. */
static vd_rc copy_header(const vd_plan_t *p, const edit_t *e, vd_plan_t *q) {
  VD_CHECK(vd_plan_init(q, p->kind));
  VD_CHECK(vd_plan_str(q, vd_plan_s(p, p->model), &q->model));
  vd_world_t w = p->world;
  VD_CHECK(vd_plan_str(q, vd_plan_s(p, p->world.layout), &w.layout));
  VD_CHECK(vd_plan_set_world(q, &w));
  for (size_t i = 0; i < p->n_segments; i++) {
    int32_t s;
    VD_CHECK(vd_plan_add_segment(q, vd_plan_s(p, p->segments[i]), &s));
  }
  for (int32_t r = 0; r < p->world.stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    for (uint32_t k = 0; k < pr->n_steps; k++) {
      int64_t at = pr->step_off + k;
      if (at == e->swap_a) at = e->swap_b;
      else if (at == e->swap_b) at = e->swap_a;
      VD_CHECK(vd_plan_add_step(q, r, p->steps[at].segment, p->steps[at].mb));
    }
  }
  return VD_OK;
}

/* q's tensors: p's (renamed when e renames), then e's new ones. */
static vd_rc copy_tensors(const vd_plan_t *p, const edit_t *e, vd_plan_t *q) {
  char nbuf[400];
  for (size_t i = 0; i < p->n_tensors; i++)
    VD_CHECK(vd_plan_add_tensor(q, &p->tensors[i], renamed(e, vd_plan_s(p, p->tensors[i].name), nbuf, sizeof(nbuf)),
                                NULL));
  for (int k = 0; k < e->n_new; k++) {
    vd_tensor_t t = p->tensors[e->proto[k]];
    t.has_lin = 0;
    t.role = VD_ROLE_ACT;
    t.id = 900000000 + k;
    t.ndim = e->new_ndim[k];
    memcpy(t.shape, e->new_shape[k], sizeof(t.shape));
    char nm[160];
    snprintf(nm, sizeof(nm), "%s.fuzz%d", vd_plan_s(p, p->tensors[e->proto[k]].name), k);
    VD_CHECK(vd_plan_add_tensor(q, &t, nm, NULL));
  }
  return VD_OK;
}

/* Node i of p into q as it is (renamed, its collective's group permuted when
 * e permutes it); a node wider than a newnode_t is added directly. */
static vd_rc copy_node(const vd_plan_t *p, const edit_t *e, size_t i, vd_plan_t *q) {
  const vd_node_t *n = &p->nodes[i];
  char nbuf[400];
  newnode_t nn = {vd_node_op(p, n), {0}, n->n_in, {0}, n->n_out, n->coll, NULL, n->n_group, n->span_replicas,
                  (int64_t)i, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  if (n->n_in > 3 || n->n_out > 2) {
    /* wide node: add directly */
    uint32_t idx;
    const int64_t *g = vd_node_group(p, n);
    int64_t gp[64];
    if (n->coll == e->group_coll && e->group_n == n->n_group) {
      for (uint32_t k = 0; k < n->n_group; k++) gp[k] = vd_node_group(p, n)[e->group_perm[k]];
      g = gp;
    }
    VD_CHECK(vd_plan_add_node(q, n, vd_node_op(p, n), renamed(e, vd_plan_s(p, n->name), nbuf, sizeof(nbuf)),
                              vd_node_inputs(p, n), n->n_in,
                              vd_node_outputs(p, n), n->n_out, g, n->n_group, &idx));
    for (uint32_t k = 0; k < n->n_attr; k++) VD_CHECK(vd_plan_attr_copy(q, idx, p, &p->attrs[n->attr_off + k]));
    return VD_OK;
  }
  memcpy(nn.in, vd_node_inputs(p, n), n->n_in * sizeof(uint32_t));
  memcpy(nn.out, vd_node_outputs(p, n), n->n_out * sizeof(uint32_t));
  int64_t gp[64];
  nn.group = vd_node_group(p, n);
  if (n->coll >= 0 && n->coll == e->group_coll && e->group_n == n->n_group) {
    for (uint32_t k = 0; k < n->n_group; k++) gp[k] = vd_node_group(p, n)[e->group_perm[k]];
    nn.group = gp;
  }
  VD_CHECK(emit_node(q, p, n, &nn, renamed(e, vd_plan_s(p, n->name), nbuf, sizeof(nbuf))));
  return VD_OK;
}

static vd_rc rebuild(const vd_plan_t *p, const edit_t *e, vd_plan_t *q) {
  VD_CHECK(copy_header(p, e, q));
  VD_CHECK(copy_tensors(p, e, q));
  char nbuf[400];
  int64_t next_id = 800000000;
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    if ((int64_t)i == e->before)
      for (int k = 0; k < e->n_ins; k++) {
        vd_node_t proto = *n;
        proto.id = next_id++;
        proto.n_attr = 0;
        VD_CHECK(emit_node(q, p, &proto, &e->ins[k], "fuzz.inserted"));
      }
    int32_t act = e->action ? e->action[i] : -1;
    if (act == -2) continue;
    if (act >= 0) {
      VD_CHECK(emit_node(q, p, n, &e->repl[act], renamed(e, vd_plan_s(p, n->name), nbuf, sizeof(nbuf))));
    } else {
      VD_CHECK(copy_node(p, e, i, q));
    }
    if ((int64_t)i == e->after)
      for (int k = 0; k < e->n_aft; k++) {
        vd_node_t proto = *n;
        proto.id = next_id++;
        proto.n_attr = 0;
        proto.coll = -1;
        VD_CHECK(emit_node(q, p, &proto, &e->aft[k], "fuzz.inserted"));
      }
  }
  return VD_OK;
}

/* ---- mutations ------------------------------------------------------------- */

enum {
  M_CONST,      /* a float attribute (constant operand, factor, exponent, eps, ...) changed */
  M_ATTR,       /* an int attribute (dim, offset, start, index, keepdim, ...) changed */
  M_OPERANDS,   /* the two inputs of a binary node swapped */
  M_VIEW_PAIR,  /* view to another shape and back inserted before an input (cancels) */
  M_TPOSE_PAIR, /* transpose and transpose back inserted before an input (cancels) */
  M_PERMUTE,    /* view [.., d/2, 2] -> transpose -> view inserted (a permutation) */
  M_DROP,       /* a shape-preserving node dropped, its consumers reading its input */
  M_DUP,        /* a shape-preserving unary node applied twice */
  M_NEUTRAL,    /* scale by 1.0 inserted (value-preserving) */
  M_COLL_GROUP, /* a collective's group order permuted (all members) */
  M_COLL_MEMBER,/* one collective member's attribute or operator changed */
  M_SCHEDULE,   /* two steps of one rank's program swapped */
  M_OP_SWAP,    /* an operator replaced by a sibling of the same arity (add/sub, sum/mean, silu/gelu, ...) */
  M_SUM_MEAN,   /* sum over dims rewritten as mean * c, with c the element count (exact) or another value */
  M_COUNT,      /* input read through view [.., 1] -> expand [.., K] -> sum -> scale c: c = 1/K keeps the
                   value; any other c (1/2: the reduced count's inverse) changes it */
  M__BASE,      /* the kinds above run on annotated plans; those below only with --strip (issue 26:
                   rewrites that lineage inference must see through), so the annotated run's
                   mutants stay the ones it always drew */
  M_SCALE_SPLIT = M__BASE, /* scale(x, c) as scale(scale(x, a), c / a); a wrong c / a sometimes */
  M_LOSS_SCALE, /* scale_backward by 1024 then scale by 1/1024 before an input (mixed precision) */
  M_MEAN_SUM,   /* mean as sum * (1 / count), or a wrong count */
  M_RENAME,     /* every node and tensor renamed */
  M_NOOP,       /* a same-shape identity, contiguous or view inserted before an input (no single twin) */
  M_MATMUL,     /* linear(x, w) written as matmul(x, transpose(w)); transpose(w) back to w's layout sometimes */
  M__COUNT
};
static const char *const mname[M__COUNT] = {"const",     "attr",   "operand-order", "view-pair",
                                            "tpose-pair", "permute", "drop",          "duplicate",
                                            "neutral",   "coll-group", "coll-member", "schedule",
                                            "op-swap",   "sum-as-mean", "count",       "scale-split",
                                            "loss-scale", "mean-as-sum", "rename",
                                            "no-op",     "linear-matmul"};

static int is_op(const vd_plan_t *p, const vd_node_t *n, const char *op) { return strcmp(vd_node_op(p, n), op) == 0; }

static int same_shape(const vd_tensor_t *a, const vd_tensor_t *b) {
  return a->ndim == b->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof(int64_t)) == 0;
}

/* Picks a random node satisfying pred, trying a bounded number of times. */
typedef int (*pred_fn)(const vd_plan_t *p, const vd_node_t *n, void *arg);
static int64_t pick_node(const vd_plan_t *p, rng_t *r, pred_fn f, void *arg) {
  size_t cnt = 0;
  for (size_t i = 0; i < p->n_nodes; i++) cnt += f(p, &p->nodes[i], arg) != 0;
  if (!cnt) return -1;
  size_t want = rbelow(r, (uint32_t)cnt);
  for (size_t i = 0; i < p->n_nodes; i++)
    if (f(p, &p->nodes[i], arg) && want-- == 0) return (int64_t)i;
  return -1;
}

static int has_kind_attr(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  vd_attr_kind k = *(vd_attr_kind *)arg;
  for (uint32_t i = 0; i < n->n_attr; i++)
    if (p->attrs[n->attr_off + i].kind == k) return 1;
  return 0;
}

/* A node whose input `0` has the same shape as its output 0 and is unary
 * (so it can be dropped or doubled). */
static int unary_same(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  (void)arg;
  if (n->coll >= 0 || n->n_in != 1 || n->n_out != 1) return 0;
  const vd_tensor_t *a = &p->tensors[vd_node_inputs(p, n)[0]], *b = &p->tensors[vd_node_outputs(p, n)[0]];
  if (!same_shape(a, b) || a->scope != b->scope) return 0;
  /* In-place updates (optimizer, accumulation) are not rewired here. */
  return vd_node_inputs(p, n)[0] != vd_node_outputs(p, n)[0];
}

static int binary_node(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  (void)arg;
  return n->coll < 0 && n->n_in >= 2 && vd_node_inputs(p, n)[0] != vd_node_inputs(p, n)[1] &&
         vd_node_outputs(p, n)[0] != vd_node_inputs(p, n)[0];
}

/* A local node with an input of >= 1 dims and last extent even >= 2 (for
 * the view/transpose insertions), not in-place. */
static int has_view_input(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  (void)arg;
  if (n->coll >= 0 || n->n_in == 0) return 0;
  const vd_tensor_t *t = &p->tensors[vd_node_inputs(p, n)[0]];
  if (t->ndim < 2 || t->ndim >= VD_MAX_DIMS - 1 || t->shape[t->ndim - 1] % 2 || t->shape[t->ndim - 1] < 4) return 0;
  for (uint32_t k = 0; k < n->n_out; k++)
    if (vd_node_outputs(p, n)[k] == vd_node_inputs(p, n)[0]) return 0;
  return 1;
}

/* A local node with an input that is not also its output (any shape). */
static int local_input(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  (void)arg;
  if (n->coll >= 0 || n->n_in == 0 || n->n_in > 3 || n->n_out > 2) return 0;
  for (uint32_t k = 0; k < n->n_out; k++)
    if (vd_node_outputs(p, n)[k] == vd_node_inputs(p, n)[0]) return 0;
  return 1;
}

static int op_named(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  return n->n_in == 1 && n->n_out == 1 && vd_node_inputs(p, n)[0] != vd_node_outputs(p, n)[0] &&
         is_op(p, n, (const char *)arg);
}

/* A two-input node of operator arg (linear without a bias). */
static int op_named2(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  return n->coll < 0 && n->n_in == 2 && n->n_out == 1 && is_op(p, n, (const char *)arg);
}

static int coll_node(const vd_plan_t *p, const vd_node_t *n, void *arg) {
  (void)p;
  (void)arg;
  return n->coll >= 0 && n->n_group >= 2 && n->n_group <= 64 && !is_op(p, n, "send") && !is_op(p, n, "recv");
}

/* A new local node OP (scale or scale_backward) from tensor in to out, its
 * factor attribute set to factor. */
static newnode_t factor_node(const char *op, uint32_t in, uint32_t out, double factor) {
  return (newnode_t){op, {in}, 1, {out}, 1, -1, NULL, 0, 0, -1, "factor", VD_ATTR_FLOAT, 0, factor, NULL, NULL, NULL, 0};
}

/* The edit makes one new tensor, shaped and scoped like tensor like. */
static void one_new_like(const vd_plan_t *p, edit_t *e, uint32_t like) {
  e->n_new = 1;
  e->proto[0] = like;
  e->new_ndim[0] = p->tensors[like].ndim;
  memcpy(e->new_shape[0], p->tensors[like].shape, sizeof(e->new_shape[0]));
}

/* pick_node, then -1 (the mutation rejected) when the node has more inputs
 * or outputs than a replacement node holds (3 and 2). */
static int64_t pick_fitting(const vd_plan_t *p, rng_t *r, pred_fn f, void *arg) {
  int64_t ni = pick_node(p, r, f, arg);
  if (ni < 0 || p->nodes[ni].n_in > 3 || p->nodes[ni].n_out > 2) return -1;
  return ni;
}

static void keep_all(edit_t *e, size_t n, int32_t *act) {
  for (size_t i = 0; i < n; i++) act[i] = -1;
  e->action = act;
}

/* Redirects input 0 of node ni to new tensor index `nt` (a replacement). */
static void redirect_input(const vd_plan_t *p, edit_t *e, int64_t ni, uint32_t slot, uint32_t nt) {
  const vd_node_t *n = &p->nodes[ni];
  newnode_t *r = &e->repl[e->n_repl];
  *r = (newnode_t){vd_node_op(p, n), {0}, n->n_in, {0}, n->n_out, -1, NULL, 0, 0, ni, NULL, 0, 0, 0, NULL, NULL,
                   NULL, 0};
  memcpy(r->in, vd_node_inputs(p, n), n->n_in * sizeof(uint32_t));
  memcpy(r->out, vd_node_outputs(p, n), n->n_out * sizeof(uint32_t));
  r->in[slot] = nt;
  e->action[ni] = e->n_repl++;
}

/* Mutation: a float (M_CONST) or int (M_ATTR) attribute of a node changed. */
static int mut_attr(const vd_plan_t *p, int k, rng_t *r, edit_t *e, int32_t *act) {
  vd_attr_kind want = k == M_CONST ? VD_ATTR_FLOAT : VD_ATTR_INT;
  int64_t ni = pick_node(p, r, has_kind_attr, &want);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t cand[16], nc = 0;
  for (uint32_t i = 0; i < n->n_attr && nc < 16; i++)
    if (p->attrs[n->attr_off + i].kind == want) cand[nc++] = i;
  const vd_attr_t *a = &p->attrs[n->attr_off + cand[rbelow(r, nc)]];
  newnode_t *rp = &e->repl[0];
  *rp = (newnode_t){vd_node_op(p, n), {0}, n->n_in, {0}, n->n_out, n->coll, vd_node_group(p, n), n->n_group,
                    n->span_replicas, ni, vd_plan_s(p, a->key), want, 0, 0, NULL, NULL, NULL, 0};
  if (n->n_in > 3 || n->n_out > 2) return 0;
  memcpy(rp->in, vd_node_inputs(p, n), n->n_in * sizeof(uint32_t));
  memcpy(rp->out, vd_node_outputs(p, n), n->n_out * sizeof(uint32_t));
  if (want == VD_ATTR_FLOAT) {
    /* powers of two as well: extents shrink by powers of two under reduction */
    static const double f[] = {2.0, 0.5, -1.0, 1.5, 0.0, 8.0, 0.125, 4.0, 0.25};
    double g = f[rbelow(r, 9)];
    rp->set_f = g == 0.0 ? 0.0 : a->v.f * g;
    if (rp->set_f == a->v.f) rp->set_f = a->v.f + 1.0;
    snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d): %s %.17g -> %.17g", (long long)n->id,
             vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, rp->set_key, a->v.f, rp->set_f);
  } else {
    int64_t d = rbelow(r, 2) ? 1 : -1;
    rp->set_i = a->v.i + d;
    if (strcmp(rp->set_key, "keepdim") == 0) rp->set_i = !a->v.i;
    snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d): %s %lld -> %lld", (long long)n->id,
             vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, rp->set_key, (long long)a->v.i,
             (long long)rp->set_i);
  }
  act[ni] = 0;
  e->n_repl = 1;
  return 1;
}

/* Mutation: the two inputs of a binary node swapped. */
static int mut_operands(const vd_plan_t *p, rng_t *r, edit_t *e) {
  int64_t ni = pick_fitting(p, r, binary_node, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  redirect_input(p, e, ni, 0, vd_node_inputs(p, n)[1]);
  e->repl[0].in[1] = vd_node_inputs(p, n)[0];
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d): inputs 0 and 1 swapped", (long long)n->id,
           vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
  return 1;
}

/* M_COUNT for mut_view_input: input 0 of node ni read as the sum of K copies
 * of itself, times c. */
static int view_count(const vd_plan_t *p, rng_t *r, edit_t *e, int64_t ni, uint32_t nt0) {
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0];
  const vd_tensor_t *t = &p->tensors[x];
  int nd = t->ndim;
  /* K copies of x summed: K x, times c */
  enum { K = 8 };
  static const double alt[] = {0.5, 0.25, 1.0, 2.0 / K};
  double c = rbelow(r, 2) == 0 ? 1.0 / K : alt[rbelow(r, 4)];
  e->n_new = 4;
  e->proto[2] = e->proto[3] = x;
  e->new_ndim[0] = e->new_ndim[1] = nd + 1;
  memcpy(e->new_shape[0], t->shape, sizeof(t->shape));
  memcpy(e->new_shape[1], t->shape, sizeof(t->shape));
  e->new_shape[0][nd] = 1;
  e->new_shape[1][nd] = K;
  e->new_ndim[2] = e->new_ndim[3] = nd;
  memcpy(e->new_shape[2], t->shape, sizeof(t->shape));
  memcpy(e->new_shape[3], t->shape, sizeof(t->shape));
  e->ins[0] = (newnode_t){"view", {x}, 1, {nt0}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  e->ins[1] = (newnode_t){"expand", {nt0}, 1, {nt0 + 1}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  e->ins[2] = (newnode_t){"sum", {nt0 + 1}, 1, {nt0 + 2}, 1, -1, NULL, 0, 0, -1, "dims", VD_ATTR_INT, -1, 0, NULL,
                          NULL, NULL, 0};
  e->ins[3] = factor_node("scale", nt0 + 2, nt0 + 3, c);
  e->n_ins = 4;
  redirect_input(p, e, ni, 0, nt0 + 3);
  snprintf(e->desc, sizeof(e->desc), "input 0 of node %lld '%s' (%s, rank %d) read as sum of %d copies * %.17g",
           (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, K, c);
  return 1;
}

/* M_PERMUTE for mut_view_input: input 0 of node ni read through view [.., d/2, 2],
 * transpose and view back (a permutation of its last dim). */
static int view_permute(const vd_plan_t *p, edit_t *e, int64_t ni, uint32_t nt0) {
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0];
  const vd_tensor_t *t = &p->tensors[x];
  int nd = t->ndim;
  /* permutation: view [.., d/2, 2] -> transpose(-1, -2) -> view back */
  e->n_new = 3;
  e->proto[2] = x;
  e->new_ndim[0] = nd + 1;
  memcpy(e->new_shape[0], t->shape, sizeof(t->shape));
  e->new_shape[0][nd - 1] = t->shape[nd - 1] / 2;
  e->new_shape[0][nd] = 2;
  e->new_ndim[1] = nd + 1;
  memcpy(e->new_shape[1], e->new_shape[0], sizeof(t->shape));
  e->new_shape[1][nd - 1] = 2;
  e->new_shape[1][nd] = t->shape[nd - 1] / 2;
  e->new_ndim[2] = nd;
  memcpy(e->new_shape[2], t->shape, sizeof(t->shape));
  e->ins[0] = (newnode_t){"view", {x}, 1, {nt0}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  e->ins[1] = (newnode_t){"transpose", {nt0}, 1, {nt0 + 1}, 1, -1, NULL, 0, 0, -1, "dim0", VD_ATTR_INT, nd - 1,
                          0, NULL, NULL, NULL, 0};
  e->ins[2] = (newnode_t){"view", {nt0 + 1}, 1, {nt0 + 2}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL,
                          NULL, 0};
  e->n_ins = 3;
  redirect_input(p, e, ni, 0, nt0 + 2);
  snprintf(e->desc, sizeof(e->desc),
           "pair permutation (view/transpose/view) of input 0 of node %lld '%s' (%s, rank %d)",
           (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
  return 1;
}

/* Mutation: an input read through inserted views, transposes, a scale or a sum of copies. */
static int mut_view_input(const vd_plan_t *p, int k, rng_t *r, edit_t *e, uint32_t nt0) {
  int64_t ni = pick_fitting(p, r, has_view_input, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0];
  const vd_tensor_t *t = &p->tensors[x];
  int nd = t->ndim;
  e->before = ni;
  /* new tensors: [0] the intermediate, [1] the final (x's shape) */
  e->proto[0] = e->proto[1] = x;
  e->new_ndim[1] = nd;
  memcpy(e->new_shape[1], t->shape, sizeof(t->shape));
  if (k == M_NEUTRAL) {
    e->n_new = 1;
    e->new_ndim[0] = nd;
    memcpy(e->new_shape[0], t->shape, sizeof(t->shape));
    e->ins[0] = factor_node("scale", x, nt0, 1.0);
    e->n_ins = 1;
    redirect_input(p, e, ni, 0, nt0);
    snprintf(e->desc, sizeof(e->desc), "scale by 1.0 inserted before input 0 of node %lld '%s' (%s, rank %d)",
             (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
    return 1;
  }
  if (k == M_COUNT) return view_count(p, r, e, ni, nt0);
  e->n_new = 2;
  if (k == M_VIEW_PAIR) {
    /* merge the last two dims */
    e->new_ndim[0] = nd - 1;
    memcpy(e->new_shape[0], t->shape, sizeof(t->shape));
    e->new_shape[0][nd - 2] = t->shape[nd - 2] * t->shape[nd - 1];
    e->new_shape[0][nd - 1] = 0;
    e->ins[0] = (newnode_t){"view", {x}, 1, {nt0}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    e->ins[1] = (newnode_t){"view", {nt0}, 1, {nt0 + 1}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    e->n_ins = 2;
  } else if (k == M_TPOSE_PAIR) {
    e->new_ndim[0] = nd;
    memcpy(e->new_shape[0], t->shape, sizeof(t->shape));
    e->new_shape[0][nd - 2] = t->shape[nd - 1];
    e->new_shape[0][nd - 1] = t->shape[nd - 2];
    for (int j = 0; j < 2; j++) {
      e->ins[j] = (newnode_t){"transpose", {j ? nt0 : x}, 1, {nt0 + j}, 1, -1, NULL, 0, 0, -1, "dim0",
                              VD_ATTR_INT, nd - 2, 0, NULL, NULL, NULL, 0};
    }
    /* dim1 via a second attribute: use the ints_key slot is not possible; emit dim1 as set below */
    e->n_ins = 2;
  } else {
    return view_permute(p, e, ni, nt0);
  }
  redirect_input(p, e, ni, 0, nt0 + 1);
  snprintf(e->desc, sizeof(e->desc), "%s inserted before input 0 of node %lld '%s' (%s, rank %d)",
           k == M_VIEW_PAIR ? "view pair" : "transpose pair", (long long)n->id, vd_plan_s(p, n->name),
           vd_node_op(p, n), n->rank);
  return 1;
}

/* Mutation: a shape-preserving unary node dropped (M_DROP) or applied twice (M_DUP). */
static int mut_drop_dup(const vd_plan_t *p, int k, rng_t *r, edit_t *e, int32_t *act, uint32_t nt0) {
  int64_t ni = pick_node(p, r, unary_same, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0], y = vd_node_outputs(p, n)[0];
  if (k == M_DROP) {
    /* y = x instead: an identity keeps the dataflow well formed */
    e->repl[0] = (newnode_t){"identity", {x}, 1, {y}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
    act[ni] = 0;
    e->n_repl = 1;
    snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d) dropped (its output = its input)",
             (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
    return 1;
  }
  /* y = f(f(x)): first copy writes a new tensor, the original reads it */
  one_new_like(p, e, x);
  e->before = ni;
  e->ins[0] = (newnode_t){vd_node_op(p, n), {x}, 1, {nt0}, 1, -1, NULL, 0, 0, ni, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  e->n_ins = 1;
  redirect_input(p, e, ni, 0, nt0);
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d) applied twice", (long long)n->id,
           vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
  return 1;
}

/* Mutation: two positions of a collective's group swapped on every member. */
static int mut_coll_group(const vd_plan_t *p, rng_t *r, edit_t *e) {
  int64_t ni = pick_node(p, r, coll_node, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  e->group_coll = n->coll;
  e->group_n = n->n_group;
  for (uint32_t i = 0; i < n->n_group; i++) e->group_perm[i] = i;
  /* swap two positions */
  uint32_t a = rbelow(r, n->n_group), b = (a + 1 + rbelow(r, n->n_group - 1)) % n->n_group;
  e->group_perm[a] = b;
  e->group_perm[b] = a;
  snprintf(e->desc, sizeof(e->desc), "coll %lld (%s '%s'): group positions %u and %u swapped on every member",
           (long long)n->coll, vd_node_op(p, n), vd_plan_s(p, n->name), a, b);
  return 1;
}

/* Mutation: one collective member's attribute changed. */
static int mut_coll_member(const vd_plan_t *p, rng_t *r, edit_t *e, int32_t *act) {
  int64_t ni = pick_fitting(p, r, coll_node, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  newnode_t *rp = &e->repl[0];
  *rp = (newnode_t){vd_node_op(p, n), {0}, n->n_in, {0}, n->n_out, n->coll, vd_node_group(p, n), n->n_group,
                    n->span_replicas, ni, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  memcpy(rp->in, vd_node_inputs(p, n), n->n_in * sizeof(uint32_t));
  memcpy(rp->out, vd_node_outputs(p, n), n->n_out * sizeof(uint32_t));
  if (is_op(p, n, "all_reduce")) {
    rp->set_key = "reduce", rp->set_kind = VD_ATTR_STR, rp->set_s = "max";
  } else if (vd_node_attr(p, n, "dim")) {
    rp->set_key = "dim", rp->set_kind = VD_ATTR_INT, rp->set_i = vd_node_attr_int(p, n, "dim", 0) + 1;
  } else if (vd_node_attr(p, n, "split_dim")) {
    rp->set_key = "split_dim", rp->set_kind = VD_ATTR_INT, rp->set_i = vd_node_attr_int(p, n, "split_dim", 0) + 1;
  } else {
    return 0;
  }
  act[ni] = 0;
  e->n_repl = 1;
  snprintf(e->desc, sizeof(e->desc), "coll %lld member node %lld '%s' (%s, rank %d): attrs.%s changed",
           (long long)n->coll, (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, rp->set_key);
  return 1;
}

/* Mutation: an operator replaced by a sibling of the same arity. */
static int mut_op_swap(const vd_plan_t *p, rng_t *r, edit_t *e) {
  static const char *const pairs[][2] = {{"add", "sub"},   {"sub", "add"},     {"mul", "div"},    {"div", "mul"},
                                         {"sum", "mean"},  {"mean", "sum"},    {"silu", "gelu"},  {"gelu", "silu"},
                                         {"exp", "sigmoid"}, {"sigmoid", "exp"}, {"identity", "neg"},
                                         {"all_gather", "all_gather"}};
  int64_t cand[4096];
  uint32_t nc = 0;
  for (size_t i = 0; i < p->n_nodes && nc < 4096; i++)
    for (size_t j = 0; j + 1 < sizeof(pairs) / sizeof(pairs[0]); j++)
      if (is_op(p, &p->nodes[i], pairs[j][0]) && p->nodes[i].n_in <= 3 && p->nodes[i].n_out <= 2) cand[nc++] = (int64_t)i;
  if (!nc) return 0;
  int64_t ni = cand[rbelow(r, nc)];
  const vd_node_t *n = &p->nodes[ni];
  const char *to = NULL;
  for (size_t j = 0; j < sizeof(pairs) / sizeof(pairs[0]); j++)
    if (is_op(p, n, pairs[j][0])) to = pairs[j][1];
  redirect_input(p, e, ni, 0, vd_node_inputs(p, n)[0]);
  e->repl[0].op = to;
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d) became %s", (long long)n->id,
           vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, to);
  return 1;
}

/* Mutation: a sum rewritten as mean * c (the element count, or another value). */
static int mut_sum_mean(const vd_plan_t *p, rng_t *r, edit_t *e) {
  int64_t cand[4096];
  uint32_t nc = 0;
  for (size_t i = 0; i < p->n_nodes && nc < 4096; i++)
    if (is_op(p, &p->nodes[i], "sum") && p->nodes[i].n_in == 1 && p->nodes[i].n_out == 1) cand[nc++] = (int64_t)i;
  if (!nc) return 0;
  int64_t ni = cand[rbelow(r, nc)];
  const vd_node_t *n = &p->nodes[ni];
  const vd_tensor_t *x = &p->tensors[vd_node_inputs(p, n)[0]];
  uint32_t y = vd_node_outputs(p, n)[0];
  /* the element count the mean divides by */
  double cnt = 1;
  const vd_attr_t *da = vd_node_attr(p, n, "dims");
  if (!da) {
    for (int i = 0; i < x->ndim; i++) cnt *= (double)x->shape[i];
  } else {
    uint32_t nd = da->kind == VD_ATTR_INTS ? da->len : 1;
    for (uint32_t i = 0; i < nd; i++) {
      int64_t dd = da->kind == VD_ATTR_INTS ? p->ints[da->v.off + i] : da->v.i;
      if (dd < 0) dd += x->ndim;
      if (dd < 0 || dd >= x->ndim) return 0;
      cnt *= (double)x->shape[dd];
    }
  }
  static const double alt[] = {1.0, 0.0, 0.5, 2.0, 0.25};
  int exact = rbelow(r, 2) == 0;
  double c = exact ? cnt : cnt * alt[rbelow(r, 5)];
  if (!exact && c == cnt) c = cnt / 2;
  one_new_like(p, e, y);
  redirect_input(p, e, ni, 0, vd_node_inputs(p, n)[0]);
  e->repl[0].op = "mean";
  e->repl[0].out[0] = (uint32_t)p->n_tensors;
  e->after = ni;
  e->aft[0] = factor_node("scale", (uint32_t)p->n_tensors, y, c);
  e->n_aft = 1;
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (sum, rank %d) became mean * %.17g (element count %.17g)",
           (long long)n->id, vd_plan_s(p, n->name), n->rank, c, cnt);
  return 1;
}

/* Mutation: scale(x, c) as scale(scale(x, a), c / a), a wrong c / a sometimes. */
static int mut_scale_split(const vd_plan_t *p, rng_t *r, edit_t *e, uint32_t nt0) {
  int64_t ni = pick_node(p, r, op_named, rbelow(r, 2) ? "scale" : "scale_backward");
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  double c = vd_node_attr_float(p, n, "factor", 1.0), a = 4.0;
  if (c == 0.0) return 0;
  int exact = rbelow(r, 3) != 0;
  uint32_t x = vd_node_inputs(p, n)[0];
  one_new_like(p, e, x);
  e->before = ni;
  e->ins[0] = factor_node("scale", x, nt0, a);
  e->n_ins = 1;
  redirect_input(p, e, ni, 0, nt0);
  e->repl[0].set_key = "factor", e->repl[0].set_kind = VD_ATTR_FLOAT;
  e->repl[0].set_f = exact ? c / a : c / 2.0;
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (%s, rank %d): factor %.17g as %g x %.17g", (long long)n->id,
           vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, c, a, e->repl[0].set_f);
  return 1;
}

/* Mutation: scale_backward by 1024 then scale by 1/1024 (or 1/512) before an input. */
static int mut_loss_scale(const vd_plan_t *p, rng_t *r, edit_t *e, uint32_t nt0) {
  int64_t ni = pick_node(p, r, local_input, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0];
  double up = 1024.0, down = rbelow(r, 3) ? 1.0 / 1024.0 : 1.0 / 512.0;
  e->n_new = 2;
  e->proto[0] = e->proto[1] = x;
  for (int j = 0; j < 2; j++) {
    e->new_ndim[j] = p->tensors[x].ndim;
    memcpy(e->new_shape[j], p->tensors[x].shape, sizeof(e->new_shape[j]));
  }
  e->before = ni;
  e->ins[0] = factor_node("scale_backward", x, nt0, up);
  e->ins[1] = factor_node("scale", nt0, nt0 + 1, down);
  e->n_ins = 2;
  redirect_input(p, e, ni, 0, nt0 + 1);
  snprintf(e->desc, sizeof(e->desc), "input 0 of node %lld '%s' (%s, rank %d) scaled by %g then %g",
           (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank, up, down);
  return 1;
}

/* Mutation: a mean rewritten as sum * (1 / count), or a wrong count. */
static int mut_mean_sum(const vd_plan_t *p, rng_t *r, edit_t *e, uint32_t nt0) {
  int64_t ni = pick_node(p, r, op_named, "mean");
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  const vd_tensor_t *x = &p->tensors[vd_node_inputs(p, n)[0]];
  uint32_t y = vd_node_outputs(p, n)[0];
  double cnt = (double)vd_tensor_numel(x) / (double)vd_tensor_numel(&p->tensors[y]);
  int exact = rbelow(r, 3) != 0;
  double c = exact ? 1.0 / cnt : 2.0 / cnt;
  one_new_like(p, e, y);
  redirect_input(p, e, ni, 0, vd_node_inputs(p, n)[0]);
  e->repl[0].op = "sum";
  e->repl[0].out[0] = nt0;
  e->after = ni;
  e->aft[0] = factor_node("scale", nt0, y, c);
  e->n_aft = 1;
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (mean, rank %d) became sum * %.17g (count %.17g)",
           (long long)n->id, vd_plan_s(p, n->name), n->rank, c, cnt);
  return 1;
}

/* Mutation: a same-shape identity, contiguous or view inserted before an input. */
static int mut_noop(const vd_plan_t *p, rng_t *r, edit_t *e, uint32_t nt0) {
  static const char *const ops[] = {"identity", "contiguous", "view"};
  const char *op = ops[rbelow(r, 3)];
  int64_t ni = pick_node(p, r, local_input, NULL);
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t x = vd_node_inputs(p, n)[0];
  one_new_like(p, e, x);
  e->before = ni;
  e->ins[0] = (newnode_t){op, {x}, 1, {nt0}, 1, -1, NULL, 0, 0, -1, NULL, 0, 0, 0, NULL, NULL, NULL, 0};
  e->n_ins = 1;
  redirect_input(p, e, ni, 0, nt0);
  snprintf(e->desc, sizeof(e->desc), "%s (same shape) inserted before input 0 of node %lld '%s' (%s, rank %d)", op,
           (long long)n->id, vd_plan_s(p, n->name), vd_node_op(p, n), n->rank);
  return 1;
}

/* Mutation: linear(x, w) as matmul(x, transpose(w)); identity(w) sometimes. */
static int mut_matmul(const vd_plan_t *p, rng_t *r, edit_t *e, uint32_t nt0) {
  int64_t ni = pick_node(p, r, op_named2, "linear");
  if (ni < 0) return 0;
  const vd_node_t *n = &p->nodes[ni];
  uint32_t w = vd_node_inputs(p, n)[1];
  const vd_tensor_t *wt = &p->tensors[w];
  if (wt->ndim != 2) return 0;
  /* a wrong layout now and then: w itself, [in, out] read as [out, in] */
  int wrong = rbelow(r, 4) == 0 && wt->shape[0] == wt->shape[1];
  e->n_new = 1;
  e->proto[0] = vd_node_inputs(p, n)[0]; /* x's scope: written once per microbatch, as the linear runs */
  e->new_ndim[0] = 2;
  e->new_shape[0][0] = wt->shape[1];
  e->new_shape[0][1] = wt->shape[0];
  e->before = ni;
  e->ins[0] = (newnode_t){wrong ? "identity" : "transpose", {w}, 1, {nt0}, 1, -1, NULL, 0, 0, -1,
                          wrong ? NULL : "dim0", VD_ATTR_INT, 0, 0, NULL, NULL, NULL, 0};
  e->n_ins = 1;
  redirect_input(p, e, ni, 1, nt0);
  e->repl[0].op = "matmul";
  e->repl[0].attrs_from = -1;
  snprintf(e->desc, sizeof(e->desc), "node %lld '%s' (linear, rank %d) as matmul(x, %s(w))", (long long)n->id,
           vd_plan_s(p, n->name), n->rank, wrong ? "identity" : "transpose");
  return 1;
}

/* Mutation: two steps of one rank's program swapped. */
static int mut_schedule(const vd_plan_t *p, rng_t *r, edit_t *e) {
  int32_t rk = (int32_t)rbelow(r, (uint32_t)p->world.stored_ranks);
  const vd_program_t *pr = &p->programs[rk];
  if (pr->n_steps < 2) return 0;
  uint32_t a = rbelow(r, pr->n_steps - 1);
  e->swap_a = pr->step_off + a;
  e->swap_b = pr->step_off + a + 1;
  snprintf(e->desc, sizeof(e->desc), "rank %d: steps %u (%s@%d) and %u (%s@%d) swapped", rk, a,
           vd_plan_s(p, p->segments[p->steps[e->swap_a].segment]), p->steps[e->swap_a].mb, a + 1,
           vd_plan_s(p, p->segments[p->steps[e->swap_b].segment]), p->steps[e->swap_b].mb);
  return 1;
}

/* Returns 1 when a mutation of kind k was set up in e. */
static int mutate(const vd_plan_t *p, int k, rng_t *r, edit_t *e, int32_t *act) {
  memset(e, 0, sizeof(*e));
  e->before = e->after = -1;
  e->swap_a = e->swap_b = -1;
  e->group_coll = -1;
  keep_all(e, p->n_nodes, act);
  uint32_t nt0 = (uint32_t)p->n_tensors; /* index of the first new tensor */
  switch (k) {
  case M_CONST:
  case M_ATTR:
    return mut_attr(p, k, r, e, act);
  case M_OPERANDS:
    return mut_operands(p, r, e);
  case M_VIEW_PAIR:
  case M_TPOSE_PAIR:
  case M_PERMUTE:
  case M_NEUTRAL:
  case M_COUNT:
    return mut_view_input(p, k, r, e, nt0);
  case M_DROP:
  case M_DUP:
    return mut_drop_dup(p, k, r, e, act, nt0);
  case M_COLL_GROUP:
    return mut_coll_group(p, r, e);
  case M_COLL_MEMBER:
    return mut_coll_member(p, r, e, act);
  case M_OP_SWAP:
    return mut_op_swap(p, r, e);
  case M_SUM_MEAN:
    return mut_sum_mean(p, r, e);
  case M_SCALE_SPLIT:
    return mut_scale_split(p, r, e, nt0);
  case M_LOSS_SCALE:
    return mut_loss_scale(p, r, e, nt0);
  case M_MEAN_SUM:
    return mut_mean_sum(p, r, e, nt0);
  case M_NOOP:
    return mut_noop(p, r, e, nt0);
  case M_MATMUL:
    return mut_matmul(p, r, e, nt0);
  case M_RENAME:
    e->rename = 1;
    snprintf(e->desc, sizeof(e->desc), "every node and tensor renamed");
    return 1;
  case M_SCHEDULE:
    return mut_schedule(p, r, e);
  }
  return 0;
}

/* transpose pairs need dim1 as well: patched after rebuild */
static vd_rc fix_transpose_dim1(vd_plan_t *q) {
  for (size_t i = 0; i < q->n_nodes; i++) {
    vd_node_t *n = &q->nodes[i];
    if (strcmp(vd_node_op(q, n), "transpose") != 0 || strcmp(vd_plan_s(q, n->name), "fuzz.inserted") != 0) continue;
    if (vd_node_attr(q, n, "dim1")) continue;
    /* the attrs of an inserted node are its last ones: append requires it to
     * be the last node, so rewrite via the arrays directly */
    const vd_attr_t *d0 = vd_node_attr(q, n, "dim0");
    if (!d0 || n->n_attr != 1) continue;
    /* append a new attribute at the end of attrs and move this node's range */
    if (VD_GROW(q->attrs, q->cap_attrs, q->n_attrs + 2)) return VD_ENOMEM;
    uint32_t key;
    VD_CHECK(vd_plan_str(q, "dim1", &key));
    vd_attr_t a0 = q->attrs[n->attr_off];
    vd_attr_t a1 = a0;
    a1.key = key;
    a1.v.i = a0.v.i + 1;
    n->attr_off = (uint32_t)q->n_attrs;
    q->attrs[q->n_attrs++] = a0;
    q->attrs[q->n_attrs++] = a1;
    n->n_attr = 2;
  }
  return VD_OK;
}

/* ---- judging ---------------------------------------------------------------- */

typedef struct {
  long applied, rejected, v_eq, v_ne, v_inc, v_err, x_agree, x_dis, x_uns, unsound, false_alarm, both_ne;
} tally_t;

static const char *const verdict_name[4] = {"EQUIVALENT", "NOT EQUIVALENT", "error", "INCONCLUSIVE"};

/* The command line. */
typedef struct {
  long n_mut, first, max_fa, max_inc;
  uint64_t seed;
  const char *out;
  int verbose, threads, cross, strip;
  int only; /* --kind NAME: draw that kind only (-1: any) */
  double deadline;
} opts_t;

/* Reads the command line into *op; returns 0, or 2 (usage, said on stderr). */
static int parse_args(int argc, char **argv, opts_t *op) {
  *op = (opts_t){.n_mut = getenv("N") ? atol(getenv("N")) : 400, .seed = 1, .out = "build/soundness", .cross = 1,
                 .only = -1, .max_fa = -1, .max_inc = -1};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) op->n_mut = atol(argv[++i]);
    else if (strcmp(argv[i], "--first") == 0 && i + 1 < argc) op->first = atol(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) op->threads = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) op->seed = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) op->out = argv[++i];
    else if (strcmp(argv[i], "--deadline") == 0 && i + 1 < argc) op->deadline = atof(argv[++i]);
    else if (strcmp(argv[i], "--kind") == 0 && i + 1 < argc) {
      const char *want = argv[++i];
      for (int k = 0; k < M__COUNT; k++)
        if (strcmp(mname[k], want) == 0) op->only = k;
      if (op->only < 0) {
        fprintf(stderr, "soundness: unknown kind '%s'\n", want);
        return 2;
      }
    } else if (strcmp(argv[i], "-v") == 0) op->verbose = 1;
    else if (strcmp(argv[i], "--strip") == 0) op->strip = 1;
    else if (strcmp(argv[i], "--max-false-alarms") == 0 && i + 1 < argc) op->max_fa = atol(argv[++i]);
    else if (strcmp(argv[i], "--max-inconclusive") == 0 && i + 1 < argc) op->max_inc = atol(argv[++i]);
    else if (strcmp(argv[i], "--no-cross-check") == 0) op->cross = 0; /* for timing the cross-check */
    else {
      fprintf(stderr, "usage: soundness [-n N] [--first I] [--seed S] [--threads T] [--out DIR] [--no-cross-check] [--strip] [--deadline S] [--kind NAME] [--max-false-alarms N] [--max-inconclusive N] [-v]\n");
      return 2;
    }
  }
  return 0;
}

/* The configurations mutated: their single and parallel plans (the parallel
 * stripped with --strip) and the single plans' files. */
typedef struct {
  config_t cfg[16];
  int n_cfg;
  vd_plan_t sp[16], pp[16];
  char spath[16][300];
} corpus_t;

/* Generates the corpus; returns 0, or 2 (said on stderr). */
static int make_corpus(const opts_t *op, corpus_t *cp) {
  cp->n_cfg = make_configs(cp->cfg);
  vd_diag d;
  for (int c = 0; c < cp->n_cfg; c++) {
    vd_diag_clear(&d);
    if (vd_gen_build(&cp->cfg[c].c, &cp->sp[c], &cp->pp[c], &d) != VD_OK) {
      char line[600];
      vd_diag_format(&d, line, sizeof(line));
      fprintf(stderr, "soundness: gen '%s': %s\n", cp->cfg[c].name, line);
      return 2;
    }
    size_t kept = 0, stripped = 0;
    if (op->strip && vd_plan_strip(&cp->pp[c], &kept, &stripped, &d) != VD_OK) {
      fprintf(stderr, "soundness: strip '%s' failed\n", cp->cfg[c].name);
      return 2;
    }
    snprintf(cp->spath[c], sizeof(cp->spath[c]), "%s/cfg%d.single.plan", op->out, c);
    if (vd_plan_write_file(&cp->sp[c], cp->spath[c], &d) != VD_OK) {
      fprintf(stderr, "soundness: cannot write %s\n", cp->spath[c]);
      return 2;
    }
  }
  return 0;
}

/* The counts over every mutant judged. */
typedef struct {
  tally_t t[M__COUNT];
  long unsound, inc_agree;
  size_t cross_agree, cross_unknown, cross_disagree;
} totals_t;

/* Mutant i: its configuration c, kind k, edit, plan q and q's file. */
typedef struct {
  long i;
  int c, k;
  edit_t e;
  vd_plan_t q;
  char ppath[300];
} mutant_t;

/* Draws mutant m->i (up to 20 kinds tried) and builds its plan m->q; returns
 * 1, 0 when no kind applied, or 2 (out of memory or a failed rebuild). */
static int draw_mutant(const opts_t *op, const corpus_t *cp, mutant_t *m) {
  rng_t r = {op->seed * 0x100000001b3ull + (uint64_t)m->i * 0x9e3779b97f4a7c15ull};
  rnext(&r);
  int c = (int)rbelow(&r, (uint32_t)cp->n_cfg), k = -1;
  int32_t *act = vd_malloc((cp->pp[c].n_nodes + 1) * sizeof(int32_t));
  if (!act) return 2;
  for (int tries = 0; tries < 20; tries++) {
    k = (int)rbelow(&r, op->strip ? M__COUNT : M__BASE);
    if (op->only >= 0) k = op->only;
    if (mutate(&cp->pp[c], k, &r, &m->e, act)) break;
    k = -1;
  }
  m->c = c;
  m->k = k;
  if (k < 0) {
    vd_free(act);
    return 0;
  }
  memset(&m->q, 0, sizeof(m->q));
  vd_rc rc = rebuild(&cp->pp[c], &m->e, &m->q);
  if (rc == VD_OK) rc = fix_transpose_dim1(&m->q);
  vd_free(act);
  if (rc != VD_OK) {
    fprintf(stderr, "soundness: mutant %ld: rebuild failed (%s)\n", m->i, vd_rc_name(rc));
    vd_plan_free(&m->q);
    return 2;
  }
  return 1;
}

/* Validates m->q and writes it to m->ppath; returns 0 when it is rejected
 * (said with -v). */
static int accept_mutant(const opts_t *op, mutant_t *m) {
  vd_diag d;
  vd_diag_clear(&d);
  snprintf(m->ppath, sizeof(m->ppath), "%s/mutant.plan", op->out);
  if (vd_plan_validate(&m->q, "mutant", &d) != VD_OK || vd_op_check_plan(&m->q, "mutant", &d) != VD_OK ||
      vd_plan_write_file(&m->q, m->ppath, &d) != VD_OK) {
    if (op->verbose) {
      char line[600];
      vd_diag_format(&d, line, sizeof(line));
      printf("  #%ld %-13s rejected: %s [%s]\n", m->i, mname[m->k], line, m->e.desc);
    }
    return 0;
  }
  return 1;
}

/* The verifier on the mutant (its time in *vsec): returns its exit code;
 * counts the cross-check's classes and disagreements. */
static int verify_mutant(const opts_t *op, const corpus_t *cp, const mutant_t *m, totals_t *tot, double *vsec) {
  vd_run_opts o = {0};
  o.sm = cp->spath[m->c];
  o.pm = m->ppath;
  o.quiet = 1;
  o.seed = 1;
  o.max_failures = 1;
  o.threads = op->threads;
  o.deadline_s = op->deadline;
  /* every class the normal form proves is also given to Z3's solver: a
   * disagreement is a bug of the normal form (or of Z3), counted below */
  o.cross_check = op->cross;
  size_t cross_before = vd_smt_cross_disagreements();
  vd_run run;
  memset(&run, 0, sizeof(run));
  vd_diag d;
  vd_diag_clear(&d);
  int vcode;
  struct timespec tv0, tv1;
  clock_gettime(CLOCK_MONOTONIC, &tv0);
  vd_ctl_clear_stop(); /* a previous mutant's --deadline stop is not this one's */
  vd_rc rc = vd_run_verify(&o, &run, &d);
  clock_gettime(CLOCK_MONOTONIC, &tv1);
  *vsec = (double)(tv1.tv_sec - tv0.tv_sec) + 1e-9 * (double)(tv1.tv_nsec - tv0.tv_nsec);
  if (rc == VD_OK) vcode = vd_run_exit_code(&run);
  else vcode = rc == VD_EINPUT || rc == VD_EIO ? 2 : 3;
  for (size_t s_i = 0; rc == VD_OK && s_i < run.set.n_stages; s_i++) {
    const vd_stage *cst = &run.set.stages[s_i];
    if (cst->canon_class >= 0 && (size_t)cst->canon_class != s_i) continue;
    int cr = run.verdicts[s_i].cross;
    tot->cross_agree += cr == VD_SMT_CROSS_AGREE;
    tot->cross_unknown += cr == VD_SMT_CROSS_UNKNOWN;
  }
  if (vd_smt_cross_disagreements() > cross_before) {
    printf("  #%ld %-13s %-28s NORMAL FORM / Z3 DISAGREEMENT (%zu): %s\n", m->i, mname[m->k], cp->cfg[m->c].name,
           vd_smt_cross_disagreements() - cross_before, m->e.desc);
    tot->cross_disagree += vd_smt_cross_disagreements() - cross_before;
  }
  vd_run_free(&run);
  return vcode;
}

/* Judges the verifier's exit code vcode against the oracle on unreduced
 * shapes: counts it, says an unsound, false-alarm or unproven one (every
 * one with -v), and keeps an unsound mutant's plan. */
static void judge_mutant(const opts_t *op, const corpus_t *cp, const mutant_t *m, int vcode, double vsec,
                         totals_t *tot) {
  tally_t *t = &tot->t[m->k];
  int c = m->c;
  vd_exec_opts xo = {.seed = 1, .tol = 1e-9, .single_name = cp->spath[c], .parallel_name = m->ppath};
  vd_exec_result xr;
  vd_diag xd;
  vd_diag_clear(&xd);
  vd_rc xrc = vd_exec_compare(&cp->sp[c], &m->q, &xo, &xr, &xd);
  int x = xrc != VD_OK ? -1 : (int)xr.status;
  if (vcode == 0) t->v_eq++;
  else if (vcode == 1) t->v_ne++;
  else if (vcode == 3) t->v_inc++;
  else t->v_err++;
  if (x == VD_EXEC_AGREE) t->x_agree++;
  else if (x == VD_EXEC_DISAGREE) t->x_dis++;
  else t->x_uns++;
  int bad = vcode == 0 && x == VD_EXEC_DISAGREE;
  int fa = vcode == 1 && x == VD_EXEC_AGREE;
  int inc = vcode == 3 && x == VD_EXEC_AGREE; /* value-preserving and not proven */
  tot->inc_agree += inc;
  t->unsound += bad;
  t->false_alarm += fa;
  t->both_ne += vcode == 1 && x == VD_EXEC_DISAGREE;
  if (bad || fa || inc || op->verbose) {
    printf("  #%ld %-13s %-28s cfg%d %6.1fs verdict %s, exec %s: %s%s\n", m->i, mname[m->k], cp->cfg[c].name, c, vsec,
           verdict_name[vcode < 4 && vcode >= 0 ? vcode : 2],
           x < 0 ? "error" : vd_exec_status_names[x], m->e.desc, bad ? "  <-- UNSOUND" : fa ? "  (false alarm)" : inc ? "  (not proven)" : "");
    if (bad && x == VD_EXEC_DISAGREE && xr.reason[0]) printf("       exec: %s\n", xr.reason);
  }
  if (bad) {
    char keep[320];
    snprintf(keep, sizeof(keep), "%s/unsound_%ld.plan", op->out, m->i);
    vd_diag d;
    vd_diag_clear(&d);
    if (vd_plan_write_file(&m->q, keep, &d) == VD_OK)
      printf("       kept: %s (single: %s)\n", keep, cp->spath[c]);
    tot->unsound++;
  }
}

/* Prints the table of every kind and the summary lines; returns the exit
 * code: 1 on an unsound EQUIVALENT, a cross-check disagreement or more false
 * alarms or INCONCLUSIVEs than allowed. */
static int print_summary(const opts_t *op, const totals_t *tot, long secs) {
  const tally_t *t = tot->t;
  printf("\nsoundness: %ld mutants (#%ld..#%ld), seed %llu, %ld s%s\n", op->n_mut, op->first,
         op->first + op->n_mut - 1, (unsigned long long)op->seed, secs,
         op->strip ? ", boundary-only plans (--strip)" : "");
  printf("%-14s %7s %8s | %6s %6s %6s %5s | %6s %6s %5s | %7s %11s\n", "mutation", "applied", "rejected", "EQ", "NE",
         "INCONC", "err", "agree", "disagr", "unsup", "UNSOUND", "false-alarm");
  tally_t s;
  memset(&s, 0, sizeof(s));
  for (int k = 0; k < M__COUNT; k++) {
    printf("%-14s %7ld %8ld | %6ld %6ld %6ld %5ld | %6ld %6ld %5ld | %7ld %11ld\n", mname[k], t[k].applied,
           t[k].rejected, t[k].v_eq, t[k].v_ne, t[k].v_inc, t[k].v_err, t[k].x_agree, t[k].x_dis, t[k].x_uns,
           t[k].unsound, t[k].false_alarm);
    s.applied += t[k].applied, s.rejected += t[k].rejected, s.v_eq += t[k].v_eq, s.v_ne += t[k].v_ne;
    s.v_inc += t[k].v_inc, s.v_err += t[k].v_err, s.x_agree += t[k].x_agree, s.x_dis += t[k].x_dis;
    s.x_uns += t[k].x_uns, s.unsound += t[k].unsound, s.false_alarm += t[k].false_alarm;
  }
  printf("%-14s %7ld %8ld | %6ld %6ld %6ld %5ld | %6ld %6ld %5ld | %7ld %11ld\n", "total", s.applied, s.rejected,
         s.v_eq, s.v_ne, s.v_inc, s.v_err, s.x_agree, s.x_dis, s.x_uns, s.unsound, s.false_alarm);
  long caught = 0;
  for (int k = 0; k < M__COUNT; k++) caught += t[k].both_ne;
  printf("value-changing mutants (exec disagrees): %ld, NOT EQUIVALENT %ld, EQUIVALENT %ld (unsound), other %ld\n",
         s.x_dis, caught, s.unsound, s.x_dis - caught - s.unsound);
  printf("false-alarm rate: %ld of %ld value-preserving mutants (exec agrees) = %.1f%%\n", s.false_alarm, s.x_agree,
         s.x_agree ? 100.0 * (double)s.false_alarm / (double)s.x_agree : 0.0);
  printf("INCONCLUSIVE on value-preserving mutants: %ld\n", tot->inc_agree);
  printf("unsound EQUIVALENT: %ld\n", s.unsound);
  return s.unsound ? 1 : 0;
}

int main(int argc, char **argv) {
  opts_t op;
  if (parse_args(argc, argv, &op)) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0); /* findings appear as they happen in a long run's log */
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", op.out);
  if (system(cmd) != 0) return 2;
  static corpus_t cp;
  if (make_corpus(&op, &cp)) return 2;
  static totals_t tot;
  time_t t0 = time(NULL);
  for (long i = op.first; i < op.first + op.n_mut; i++) {
    mutant_t m = {.i = i};
    int drawn = draw_mutant(&op, &cp, &m);
    if (drawn == 2) return 2;
    if (!drawn) continue;
    tot.t[m.k].applied++;
    if (!accept_mutant(&op, &m)) {
      tot.t[m.k].rejected++;
      vd_plan_free(&m.q);
      continue;
    }
    double vsec;
    int vcode = verify_mutant(&op, &cp, &m, &tot, &vsec);
    judge_mutant(&op, &cp, &m, vcode, vsec, &tot);
    vd_plan_free(&m.q);
    if (!op.verbose && (i + 1) % 500 == 0) {
      fprintf(stderr, "soundness: %ld/%ld mutants, %ld unsound, %lds\n", i + 1 - op.first, op.n_mut, tot.unsound,
              (long)(time(NULL) - t0));
    }
  }
  int bad = print_summary(&op, &tot, (long)(time(NULL) - t0));
  for (int c = 0; c < cp.n_cfg; c++) {
    vd_plan_free(&cp.sp[c]);
    vd_plan_free(&cp.pp[c]);
  }
  printf("cross-check of the normal form against Z3 (every mutant): %zu class(es) agreed, %zu undecided by Z3, "
         "%zu disagreement(s)\n", tot.cross_agree, tot.cross_unknown, tot.cross_disagree);
  long false_alarms = 0;
  for (int k = 0; k < M__COUNT; k++) false_alarms += tot.t[k].false_alarm;
  int over_fa = op.max_fa >= 0 && false_alarms > op.max_fa, over_inc = op.max_inc >= 0 && tot.inc_agree > op.max_inc;
  if (over_fa) printf("FAIL: %ld false alarm(s), at most %ld allowed\n", false_alarms, op.max_fa);
  if (over_inc) printf("FAIL: %ld INCONCLUSIVE value-preserving mutant(s), at most %ld allowed\n", tot.inc_agree, op.max_inc);
  return bad || tot.cross_disagree || over_fa || over_inc ? 1 : 0;
}
