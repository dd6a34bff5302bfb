/*
 * stages/cut.c - cuts the two graphs into stages (vd_stage_cut).
 *
 * docs/verifier.md section 2.  Two phases:
 *  1. Structural checks, all reported as vd_stage_issue (never a crash):
 *     SHAPE     every graph node's shapes against the registry's shape rule
 *               (vd_op_check with NULL data; once per plan node);
 *     DATAFLOW  a value that feeds a target without a lineage (the graph
 *               issues of Gp and Gs are the graphs' own: verifier/run.c
 *               reports them and cuts no stage while there are any);
 *     SCHEDULE  a DP reducer (collective spanning replicas) reading a version
 *               of a persistent tensor that a per-microbatch node writes
 *               again later (those microbatches' contributions are missed);
 *     ALIGNMENT a segment run with a microbatch on a rank must run exactly
 *               once for each microbatch 0..nm-1 on that rank.
 *  2. Targets and cones: one stage per slice group of every FINAL lineage
 *     (initial lineages are given, not proven).  The parallel cone walks Gp
 *     back from the target pieces over virtual values (value, replica) and
 *     stops at lineage points (hypotheses); a span-replica collective's
 *     inputs are (u, d') for every replica d'.  The single cone walks Gs back
 *     from the target's single value and stops at the single values of the
 *     hypotheses and at initial values.
 *
 * SOUNDNESS: a parallel leaf is either a lineage point (a hypothesis that is
 * itself an initial lineage or the target of another stage) or a value
 * without lineage, kept as an unconstrained leaf (leaf_piece = -1): the
 * proof must hold for every value of it, so the stage can only fail, never
 * pass vacuously.  An unannotated one is also reported as DATAFLOW.  Single
 * leaves are free symbols (stronger than needed).
 *
 * Stage layout (stage.h): single nodes first, then parallel ones, each in
 * the graph's topological order (parallel: by (topo position, replica),
 * which respects every virtual edge because a virtual node's producers are
 * graph nodes earlier in Gp's order).  Values: single leaves by value index,
 * single node outputs in node order, parallel leaves by (value, replica),
 * parallel node outputs in node order.  For a span-replica node the inputs
 * and outputs are replica-major: for each replica, the merged node's list.
 *
 * Not here: shape reduction (shape.c), canonical forms (canon.c).
 */
#include "stage.h"

#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/ctl.h"
#include "../common/limits.h"
#include "../common/hash.h"
#include "../common/mem.h"
#include "../ops/ops.h"

#define NONE UINT32_MAX
#define CONE_MAX ((uint32_t)VD_LIM_CONE_MAX) /* reason: common/limits.h */
#define CONE_VALUES_MAX ((size_t)VD_LIM_CONE_VALUES_MAX)

/* ---- a small open-addressing map, reset in O(1) by generation ---------- */

typedef struct {
  uint64_t key;
  uint32_t val;
  uint32_t gen;
} hent_t;

typedef struct {
  hent_t *e;
  size_t cap, n;
  uint32_t gen;
} hmap_t;

static void hmap_reset(hmap_t *m) {
  m->gen++;
  m->n = 0;
}

static hent_t *hmap_slot(hmap_t *m, uint64_t key) {
  size_t mask = m->cap - 1;
  for (size_t i = (size_t)vd_hash_mix64(key) & mask;; i = (i + 1) & mask)
    if (m->e[i].gen != m->gen || m->e[i].key == key) return &m->e[i];
}

/* Value of key or NONE. */
static uint32_t hmap_get(hmap_t *m, uint64_t key) {
  if (!m->cap) return NONE;
  hent_t *s = hmap_slot(m, key);
  return s->gen == m->gen ? s->val : NONE;
}

/* Inserts key -> val (key must be absent).  -1 on ENOMEM. */
static int hmap_put(hmap_t *m, uint64_t key, uint32_t val) {
  if ((m->n + 1) * 2 > m->cap) {
    /* Generation 0 marks the empty slots of a fresh (zeroed) table. */
    uint32_t gen = m->gen ? m->gen : 1;
    size_t nc = m->cap ? m->cap * 2 : 64;
    hmap_t nm = {vd_calloc(nc, sizeof(hent_t)), nc, 0, gen};
    if (!nm.e) return -1;
    for (size_t i = 0; i < m->cap; i++)
      if (m->e[i].gen == m->gen) {
        hent_t *s = hmap_slot(&nm, m->e[i].key);
        *s = m->e[i];
        s->gen = gen;
        nm.n++;
      }
    vd_free(m->e);
    *m = nm;
  }
  hent_t *s = hmap_slot(m, key);
  s->key = key;
  s->val = val;
  s->gen = m->gen;
  m->n++;
  return 0;
}

static void hmap_free(hmap_t *m) {
  vd_free(m->e);
  memset(m, 0, sizeof(*m));
}

/* ---- context ------------------------------------------------------------ */

typedef struct {
  uint64_t key;     /* value * D + replica (single side: value) */
  int32_t piece;    /* parallel: lineage piece when it is a hypothesis leaf */
  uint8_t produced; /* some node of the stage produces it */
  uint8_t target;
  uint32_t loc;     /* stage-local index, assigned at assembly */
} cval_t;

typedef struct {
  uint32_t gnode;
  int32_t rep;
  uint8_t span;
  uint32_t pos; /* topological position of gnode */
  uint32_t loc;
} cnode_t;

typedef struct {
  cval_t *v;
  size_t n, cap;
  cnode_t *nd;
  size_t n_nd, cap_nd;
  hmap_t vmap, nmap;
} cone_t;

typedef struct {
  const vd_lin_table *lt;
  vd_stage_set *set;
  vd_diag *d;
  const vd_graph_t *gs, *gp;
  const vd_plan_t *sp, *pp;
  uint32_t D;
  int *sop, *pop;        /* registry op id per plan node, -1 if unknown */
  uint32_t *spos, *ppos; /* topological position per graph node */
  uint8_t *nolin;        /* per Gp value: "no lineage" already reported */
  size_t cap_stages;
  cone_t pc, sc;
  uint32_t *stack;
  size_t n_stack, cap_stack;
  uint32_t *mp;          /* target members of the stage being cut: piece mp[i] in replica mr[i] */
  int32_t *mr;
  size_t n_mem, cap_mem, cap_mr;
  size_t s_reached;      /* hypothesis values met by the last single walk */
  int32_t s_unrelated;   /* piece of a hypothesis the target's computation never uses, or -1 */
  /* Microbatch classes (mb_family): nm > 1 and no ALIGNMENT issue. */
  uint32_t nm;
  int mb_ok;
  uint32_t *inst;        /* Gp node of (plan node p, microbatch m) at p * nm + m, or NONE */
  uint32_t *grp;         /* per piece: first piece of its slice group */
  uint8_t *done;         /* per group (first piece): cut, or covered by another mb's stage */
  uint32_t *tp;          /* scratch: translated piece per stage value */
  size_t cap_tp;
  vd_stage_hook hook;    /* called on every finished stage, or NULL */
  void *hook_ctx;
  /* Sums by part: values whose nolin flag was set while a sum was tried
   * (cleared again when the try is rolled back). */
  uint32_t *nolin_log;
  size_t n_nolin_log, cap_nolin_log;
  int log_nolin;
  /* Parallel cut (cut_all): per issue of the set, the value whose "no
   * lineage" it reports (NONE for other issues), so that the merge keeps
   * one per value as the serial cut does. */
  uint32_t *iss_val;
  size_t cap_iss_val;
} cctx;

static vd_rc add_issue(cctx *c, vd_sissue_kind kind, int single, int64_t pnode, int64_t ptensor, int32_t rank,
                       int32_t mb, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static vd_rc add_issue(cctx *c, vd_sissue_kind kind, int single, int64_t pnode, int64_t ptensor, int32_t rank,
                       int32_t mb, const char *fmt, ...) {
  /* Each stage issue kind is the diagnosis of the same name. */
  static const vd_diagnosis dx[VD_SISSUE__COUNT] = {VD_DX_DATAFLOW, VD_DX_SCHEDULE, VD_DX_ALIGNMENT, VD_DX_SHAPE,
                                                      VD_DX_NONE};
  vd_stage_set *s = c->set;
  vd_issue is;
  vd_issue_init(&is, "stages", (unsigned)kind, vd_sissue_names[kind], dx[kind]);
  is.single = (uint8_t)single;
  is.pnode = pnode;
  is.tensor = ptensor;
  is.rank = rank;
  is.mb = mb;
  va_list ap;
  va_start(ap, fmt);
  vd_issue_vdetail(&is, fmt, ap);
  va_end(ap);
  if (vd_issue_push(&s->issues, &s->n_issues, &s->cap_issues, 0, &s->n_issues_dropped, &is)) return VD_OOM(c->d);
  if (VD_GROW(c->iss_val, c->cap_iss_val, s->n_issues)) return VD_OOM(c->d);
  c->iss_val[s->n_issues - 1] = NONE;
  return VD_OK;
}

static int issue_cmp(const void *a, const void *b) {
  const vd_stage_issue *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->single != y->single) return x->single > y->single ? -1 : 1;
  if (x->pnode != y->pnode) return x->pnode < y->pnode ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  return strcmp(x->detail, y->detail);
}

static const char *tname(const vd_plan_t *p, uint32_t t) { return vd_plan_s(p, p->tensors[t].name); }
static const char *nop(const vd_plan_t *p, uint32_t n) { return vd_node_op(p, &p->nodes[n]); }

static void node_label(const vd_graph_t *g, uint32_t pnode, int32_t rep, int32_t mb, char *buf, size_t n) {
  const vd_plan_t *p = g->plan;
  const vd_node_t *x = &p->nodes[pnode];
  snprintf(buf, n, "%s '%s' (node %lld, rank %lld, mb %d)", vd_node_op(p, x), vd_plan_s(p, x->name),
           (long long)x->id, (long long)vd_graph_rank(g, x->rank, rep), mb);
}


static int is_span(const cctx *c, const vd_gnode_t *gn) {
  return gn->n_part > 0 && c->pp->nodes[gn->pnode].span_replicas && c->D > 1;
}

/* ---- phase 1: structural checks ------------------------------------------ */

static vd_rc check_shapes(cctx *c, const vd_graph_t *g, const int *ops, int single) {
  const vd_plan_t *p = g->plan;
  vd_rc rc = VD_OK;
  uint8_t *done = vd_calloc(p->n_nodes ? p->n_nodes : 1, 1);
  vd_op_shape *is = NULL, *os = NULL;
  size_t cap = 0;
  if (!done) return VD_OOM(c->d);
  for (size_t ni = 0; ni < g->n_nodes; ni++) {
    const vd_gnode_t *gn = &g->nodes[ni];
    const vd_node_t *pn = &p->nodes[gn->pnode];
    if (done[gn->pnode] || ops[gn->pnode] < 0) continue;
    done[gn->pnode] = 1;
    uint32_t rep = 1, np = 1;
    if (gn->n_part > 0) {
      int p2p = !strcmp(vd_node_op(p, pn), "send") || !strcmp(vd_node_op(p, pn), "recv");
      uint32_t want = p2p ? 2 : pn->n_group;
      if (gn->n_part != want) continue; /* COLL_MISMATCH already says it */
      rep = !single && !p2p && pn->span_replicas ? c->D : 1;
      np = gn->n_part * rep;
    }
    size_t need = (size_t)(gn->n_in > gn->n_out ? gn->n_in : gn->n_out) * rep + 1;
    if (need > cap) {
      vd_free(is);
      vd_free(os);
      is = vd_calloc(need, sizeof(*is));
      os = vd_calloc(need, sizeof(*os));
      cap = need;
      if (!is || !os) {
        rc = VD_OOM(c->d);
        goto done;
      }
    }
    const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
    for (uint32_t r = 0; r < rep; r++) {
      for (uint32_t i = 0; i < gn->n_in; i++) {
        const vd_tensor_t *t = &p->tensors[g->values[iv[i]].tensor];
        vd_op_shape *s = &is[r * gn->n_in + i];
        s->ndim = t->ndim;
        memcpy(s->d, t->shape, sizeof(s->d));
      }
      for (uint32_t i = 0; i < gn->n_out; i++) {
        const vd_tensor_t *t = &p->tensors[g->values[ov[i]].tensor];
        vd_op_shape *s = &os[r * gn->n_out + i];
        s->ndim = t->ndim;
        memcpy(s->d, t->shape, sizeof(s->d));
      }
    }
    char label[160];
    node_label(g, gn->pnode, gn->replica, gn->mb, label, sizeof(label));
    vd_diag dg;
    vd_diag_clear(&dg);
    vd_op_call call = {.op = ops[gn->pnode], .plan = p, .node = pn, .record = label, .n_in = gn->n_in * rep,
                       .n_out = gn->n_out * rep, .n_part = np, .in = NULL, .in_shape = is, .out = NULL,
                       .out_shape = os, .diag = &dg};
    vd_rc r = vd_op_check(&call);
    if (r == VD_ENOMEM) {
      rc = VD_OOM(c->d);
      goto done;
    }
    if (r != VD_OK) {
      int64_t rk = vd_graph_rank(g, pn->rank, gn->replica);
      /* The registry's message starts with the operator name: the label
       * has it already. */
      const char *msg = dg.msg, *opn = vd_node_op(p, pn);
      size_t ol = strlen(opn);
      if (!strncmp(msg, opn, ol) && msg[ol] == ':' && msg[ol + 1] == ' ') msg += ol + 2;
      if ((rc = add_issue(c, VD_SISSUE_SHAPE, single, (int64_t)gn->pnode, -1, (int32_t)rk, gn->mb,
                          "%s%s: %s: %s", single ? "single plan " : "", label, dg.field, msg)))
        goto done;
    }
  }
done:
  vd_free(done);
  vd_free(is);
  vd_free(os);
  return rc;
}

/* SCHEDULE: see the file comment.  next[v] is the next version of v's
 * instance (values of an instance are created in version order). */
static vd_rc check_schedule(cctx *c) {
  const vd_graph_t *g = c->gp;
  const vd_plan_t *p = c->pp;
  vd_rc rc = VD_OK;
  int has_span = 0;
  for (size_t ni = 0; ni < g->n_nodes && !has_span; ni++)
    has_span = g->nodes[ni].n_part > 0 && p->nodes[g->nodes[ni].pnode].span_replicas;
  if (!has_span) return VD_OK;
  uint32_t *next = vd_malloc((g->n_values ? g->n_values : 1) * sizeof(*next));
  uint32_t *last = vd_malloc((g->n_inst ? g->n_inst : 1) * sizeof(*last));
  if (!next || !last) {
    rc = VD_OOM(c->d);
    goto done;
  }
  for (size_t i = 0; i < g->n_inst; i++) last[i] = NONE;
  for (size_t v = 0; v < g->n_values; v++) {
    const vd_value_t *x = &g->values[v];
    next[v] = NONE;
    size_t inst = g->inst_base[x->tensor] + (size_t)x->replica * g->inst_per_replica[x->tensor] +
                  (size_t)(x->mb < 0 ? 0 : x->mb);
    if (last[inst] != NONE) next[last[inst]] = (uint32_t)v;
    last[inst] = (uint32_t)v;
  }
  for (size_t ni = 0; ni < g->n_nodes; ni++) {
    const vd_gnode_t *gn = &g->nodes[ni];
    if (gn->n_part == 0 || !p->nodes[gn->pnode].span_replicas) continue;
    const uint32_t *iv = vd_gnode_inputs(g, gn);
    for (uint32_t i = 0; i < gn->n_in; i++) {
      uint32_t u = iv[i];
      const vd_tensor_t *t = &p->tensors[g->values[u].tensor];
      if (t->scope != VD_SCOPE_PERSISTENT) continue;
      char mbs[64] = "";
      size_t mo = 0;
      int n_late = 0;
      int32_t first_mb = -1;
      uint32_t writer = NONE;
      for (uint32_t w = next[u]; w != NONE; w = next[w]) {
        int32_t pr = g->values[w].producer;
        if (pr < 0 || (size_t)pr == ni || g->nodes[pr].mb < 0) continue;
        if (writer == NONE) {
          writer = (uint32_t)pr;
          first_mb = g->nodes[pr].mb;
        }
        if (mo < sizeof(mbs))
          mo += (size_t)snprintf(mbs + mo, sizeof(mbs) - mo, "%s%d", n_late ? ", " : "", g->nodes[pr].mb);
        n_late++;
      }
      if (writer == NONE) continue;
      char lr[160], lw[160];
      node_label(g, gn->pnode, 0, gn->mb, lr, sizeof(lr));
      node_label(g, g->nodes[writer].pnode, g->nodes[writer].replica, first_mb, lw, sizeof(lw));
      if ((rc = add_issue(c, VD_SISSUE_SCHEDULE, 0, (int64_t)gn->pnode, (int64_t)g->values[u].tensor,
                          (int32_t)vd_graph_rank(g, t->rank, 0), first_mb,
                          "reducer %s reads '%s' before the contribution of mb %s arrives (later write by %s)", lr,
                          tname(p, g->values[u].tensor), mbs, lw)))
        goto done;
    }
  }
done:
  vd_free(next);
  vd_free(last);
  return rc;
}

/* Signature of the code a segment runs on a rank: the operators, source
 * names and layers of its nodes there, in order (0 when it has none). */
static vd_rc segment_signatures(cctx *c, uint64_t **sig) {
  const vd_plan_t *p = c->pp;
  size_t ns = p->n_segments, nr = (size_t)p->world.stored_ranks;
  *sig = NULL;
  if (!ns || nr * ns > ((size_t)1 << 26)) return VD_OK; /* no variants recognised */
  uint64_t *h = vd_calloc(nr * ns, sizeof(*h));
  if (!h) return VD_OOM(c->d);
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    if (n->rank < 0 || (size_t)n->rank >= nr || n->segment < 0 || (size_t)n->segment >= ns) continue;
    uint64_t x = 1469598103934665603ull;
    for (const char *q = nop(p, (uint32_t)i); *q; q++) x = (x ^ (uint8_t)*q) * 1099511628211ull;
    x = (x ^ 0xff) * 1099511628211ull;
    for (const char *q = vd_plan_s(p, n->name); *q; q++) x = (x ^ (uint8_t)*q) * 1099511628211ull;
    uint64_t *slot = &h[(size_t)n->rank * ns + (size_t)n->segment];
    *slot = vd_hash_mix64(*slot * 31 + x + (uint64_t)(uint32_t)n->layer + 1);
  }
  *sig = h;
  return VD_OK;
}

/* ALIGNMENT.  A segment that does not run once per microbatch on its own may
 * be one of several variants of the same code (same operators, names and
 * layers on the rank: `verdict mutate --microbatch` writes a bug that way);
 * then the variants together must run once per microbatch.  The values each
 * variant computes are the stages' business. */
static vd_rc check_alignment(cctx *c) {
  const vd_plan_t *p = c->pp;
  int32_t nm = p->world.nm > 0 ? p->world.nm : 1;
  size_t ns = p->n_segments;
  uint32_t *cnt = vd_calloc(ns * (size_t)(nm + 1) + 1, sizeof(*cnt)); /* slot nm: mb >= nm */
  uint8_t *per = vd_calloc(ns + 1, 1);
  uint32_t *rep = vd_malloc((ns + 1) * sizeof(*rep));
  uint64_t *sig = NULL;
  vd_rc rc = VD_OK;
  if (!cnt || !per || !rep) {
    rc = VD_OOM(c->d);
    goto done;
  }
  if ((rc = segment_signatures(c, &sig)) != VD_OK) goto done;
  for (int32_t r = 0; r < p->world.stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    memset(cnt, 0, ns * (size_t)(nm + 1) * sizeof(*cnt));
    memset(per, 0, ns);
    for (uint32_t s = pr->step_off; s < pr->step_off + pr->n_steps; s++) {
      const vd_step_t *st = &p->steps[s];
      if (st->mb < 0 || st->segment < 0 || (size_t)st->segment >= ns) continue;
      per[st->segment] = 1;
      cnt[(size_t)st->segment * (size_t)(nm + 1) + (size_t)(st->mb < nm ? st->mb : nm)]++;
    }
    /* Misaligned segments with one signature count together, under the
     * first of them. */
    for (size_t sg = 0; sg < ns; sg++) {
      rep[sg] = (uint32_t)sg;
      if (!per[sg] || !sig) continue;
      const uint32_t *k = cnt + sg * (size_t)(nm + 1);
      int aligned = k[nm] == 0;
      for (int32_t m = 0; m < nm && aligned; m++) aligned = k[m] == 1;
      uint64_t h = sig[(size_t)r * ns + sg];
      if (aligned || !h) continue;
      for (size_t s2 = 0; s2 < sg; s2++)
        if (per[s2] && rep[s2] == s2 && sig[(size_t)r * ns + s2] == h) {
          rep[sg] = (uint32_t)s2;
          uint32_t *dst = cnt + s2 * (size_t)(nm + 1);
          for (int32_t m = 0; m <= nm; m++) dst[m] += k[m];
          break;
        }
    }
    for (size_t sg = 0; sg < ns; sg++) {
      if (!per[sg] || rep[sg] != sg) continue;
      const uint32_t *k = cnt + sg * (size_t)(nm + 1);
      char miss[64] = "", dup[64] = "";
      size_t mo = 0, dpo = 0;
      int32_t first = -1;
      for (int32_t m = 0; m < nm; m++) {
        if (k[m] == 1) continue;
        if (first < 0) first = m;
        if (k[m] == 0 && mo < sizeof(miss))
          mo += (size_t)snprintf(miss + mo, sizeof(miss) - mo, "%s%d", mo ? ", " : "", m);
        if (k[m] > 1 && dpo < sizeof(dup))
          dpo += (size_t)snprintf(dup + dpo, sizeof(dup) - dpo, "%s%d (%u times)", dpo ? ", " : "", m, k[m]);
      }
      if (first < 0 && k[nm] == 0) continue;
      if (first < 0) first = nm;
      char extra[48] = "";
      if (k[nm]) snprintf(extra, sizeof(extra), "%s%u step(s) with mb >= %d", (mo || dpo) ? "; " : "", k[nm], nm);
      if ((rc = add_issue(c, VD_SISSUE_ALIGNMENT, 0, -1, -1, r, first,
                          "segment '%s' on rank %d runs per microbatch but not once for each of mb 0..%d:%s%s%s%s%s",
                          vd_plan_s(p, p->segments[sg]), r, nm - 1, mo ? " missing mb " : "", miss,
                          dpo ? (mo ? "; repeated mb " : " repeated mb ") : "", dup, extra)))
        goto done;
    }
  }
done:
  vd_free(cnt);
  vd_free(per);
  vd_free(rep);
  vd_free(sig);
  return rc;
}

/* ---- phase 2: cones ------------------------------------------------------ */

static void cone_reset(cone_t *k) {
  k->n = 0;
  k->n_nd = 0;
  hmap_reset(&k->vmap);
  hmap_reset(&k->nmap);
}

static void cone_free(cone_t *k) {
  vd_free(k->v);
  vd_free(k->nd);
  hmap_free(&k->vmap);
  hmap_free(&k->nmap);
}

/* Index of value key in cone k, inserting it if new (*fresh = 1). */
static vd_rc cone_value(cctx *c, cone_t *k, uint64_t key, uint32_t *idx, int *fresh) {
  uint32_t i = hmap_get(&k->vmap, key);
  *fresh = 0;
  if (i == NONE) {
    if (VD_GROW(k->v, k->cap, k->n + 1)) return VD_OOM(c->d);
    i = (uint32_t)k->n++;
    k->v[i] = (cval_t){key, -1, 0, 0, NONE};
    if (hmap_put(&k->vmap, key, i)) return VD_OOM(c->d);
    *fresh = 1;
  }
  *idx = i;
  return VD_OK;
}

static vd_rc push(cctx *c, uint32_t i) {
  if (VD_GROW(c->stack, c->cap_stack, c->n_stack + 1)) return VD_OOM(c->d);
  c->stack[c->n_stack++] = i;
  return VD_OK;
}

/* Adds graph node gn (virtual replica rep) to cone k: its outputs become
 * produced values, its new inputs are pushed.  D = 1 on the single side. */
static vd_rc cone_node(cctx *c, cone_t *k, const vd_graph_t *g, uint32_t gnode, uint32_t rep, uint32_t D,
                       const uint32_t *pos, int span) {
  uint64_t nkey = (uint64_t)gnode * D + rep;
  if (hmap_get(&k->nmap, nkey) != NONE) return VD_OK;
  if (VD_GROW(k->nd, k->cap_nd, k->n_nd + 1)) return VD_OOM(c->d);
  k->nd[k->n_nd] = (cnode_t){gnode, (int32_t)rep, (uint8_t)span, pos[gnode], NONE};
  if (hmap_put(&k->nmap, nkey, (uint32_t)k->n_nd)) return VD_OOM(c->d);
  k->n_nd++;
  const vd_gnode_t *gn = &g->nodes[gnode];
  const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
  uint32_t r0 = span ? 0 : rep, r1 = span ? D : rep + 1;
  for (uint32_t r = r0; r < r1; r++) {
    for (uint32_t o = 0; o < gn->n_out; o++) {
      uint32_t i;
      int fresh;
      VD_CHECK(cone_value(c, k, (uint64_t)ov[o] * D + r, &i, &fresh));
      k->v[i].produced = 1;
    }
    for (uint32_t u = 0; u < gn->n_in; u++) {
      uint32_t i;
      int fresh;
      VD_CHECK(cone_value(c, k, (uint64_t)iv[u] * D + r, &i, &fresh));
      if (fresh) VD_CHECK(push(c, i));
    }
  }
  return VD_OK;
}

/* Target description for messages: "'y' final slice [0:4, 0:8]". */
static void target_label(cctx *c, const vd_lineage *L, const vd_lin_piece *p0, char *buf, size_t n) {
  const vd_tensor_t *st = &c->sp->tensors[L->stensor];
  char sl[96];
  vd_lin_fmt_slice(p0->lo, p0->hi, st->ndim, sl, sizeof(sl));
  snprintf(buf, n, "'%s' %s slice %s", tname(c->sp, L->stensor), L->initial ? "initial" : "final", sl);
}

/* Parallel cone of the target pieces [a, b).  *ok = 0 when it is too big. */
static vd_rc parallel_cone(cctx *c, const vd_lineage *L, int *ok) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gp;
  cone_t *k = &c->pc;
  uint32_t D = c->D;
  size_t a = c->mp[0];
  c->n_stack = 0;
  *ok = 1;
  for (size_t i = 0; i < c->n_mem; i++) {
    const vd_lin_piece *p = &lt->pieces[c->mp[i]];
    uint32_t vi;
    int fresh;
    VD_CHECK(cone_value(c, k, (uint64_t)p->value * D + (uint32_t)c->mr[i], &vi, &fresh));
    k->v[vi].target = 1;
    if (fresh) VD_CHECK(push(c, vi));
  }
  while (c->n_stack) {
    uint32_t vi = c->stack[--c->n_stack];
    uint64_t key = k->v[vi].key;
    uint32_t v = (uint32_t)(key / D), d = (uint32_t)(key % D);
    if (!k->v[vi].target) {
      int32_t pc = vd_lin_piece_of(lt, v, (int32_t)d);
      if (pc >= 0) {
        k->v[vi].piece = pc;
        continue;
      }
    }
    int32_t pr = g->values[v].producer;
    if (pr < 0) {
      /* An annotated tensor's initial value that is no point is state the
       * single plan does not have (see lineage.c): a free leaf, no issue.
       * An unannotated initial value is a DATAFLOW issue.  Placeholders
       * (unproduced reads) are graph issues already. */
      /* An unannotated initial value that a later version overwrites (an
       * accumulator before zero_grad in a boundary-only plan) is such state
       * too: a free leaf. */
      const vd_value_t *x0 = &g->values[v];
      if (x0->is_initial && !c->pp->tensors[x0->tensor].has_lin && !c->nolin[v] &&
          vd_graph_last(g, x0->tensor, x0->replica, x0->mb) == (int32_t)v) {
        c->nolin[v] = 1;
        if (c->log_nolin) {
          if (VD_GROW(c->nolin_log, c->cap_nolin_log, c->n_nolin_log + 1)) return VD_OOM(c->d);
          c->nolin_log[c->n_nolin_log++] = v;
        }
        char tl[160];
        target_label(c, L, &lt->pieces[a], tl, sizeof(tl));
        const vd_value_t *x = &g->values[v];
        const vd_tensor_t *t = &c->pp->tensors[x->tensor];
        VD_CHECK(add_issue(c, VD_SISSUE_DATAFLOW, 0, -1, (int64_t)x->tensor,
                           (int32_t)vd_graph_rank(g, t->rank, (int32_t)d), x->mb,
                           "value '%s' (rank %lld, mb %d, version %u) feeds target %s but has no lineage",
                           tname(c->pp, x->tensor), (long long)vd_graph_rank(g, t->rank, (int32_t)d), x->mb,
                           x->version, tl));
        c->iss_val[c->set->n_issues - 1] = v;
      }
      continue;
    }
    int span = is_span(c, &g->nodes[pr]);
    VD_CHECK(cone_node(c, k, g, (uint32_t)pr, span ? 0 : d, D, c->ppos, span));
    if (k->n_nd > CONE_MAX || k->n > CONE_VALUES_MAX) {
      *ok = 0;
      return VD_OK;
    }
  }
  return VD_OK;
}

/* Single cone from svalue, stopping at the hypotheses' single values. */
/* Walks the single cone back from the target's single value.  Stops at the
 * single values that parallel hypotheses refer to and at initial values.
 * The target value itself is computed (not a leaf) when some hypothesis
 * refers to another single value: pieces computed from those need the
 * target's own formula.  When every hypothesis is a slice of the target
 * itself, or computing it would take more than SINGLE_SOFT nodes, the
 * target is a leaf instead.  SOUNDNESS: either way every single leaf is a
 * free symbol, so the proof holds for the real values. */
#define SINGLE_SOFT 64u

/* When the single value of stop value vi is a rearrangement (a chain of at
 * most 4 view-like nodes) of another stop value's single value, adds that
 * chain to cone k.  Without it the two would be unrelated free symbols in
 * the stage (a rank reading the labels and another reading their flattened
 * view): sound, but a false alarm once one rank's inferred lineage stops at
 * an inserted view and the other's does not. */
static vd_rc bridge_stop(cctx *c, cone_t *k, uint32_t vi) {
  const vd_graph_t *g = c->gs;
  uint32_t chain[4], n = 0;
  uint64_t v = k->v[vi].key;
  while (n < 4) {
    int32_t pr = g->values[v].producer;
    if (pr < 0) return VD_OK;
    const vd_gnode_t *gn = &g->nodes[pr];
    if (gn->n_in != 1 || !vd_op_copies_elements(c->sop[gn->pnode])) return VD_OK;
    chain[n++] = (uint32_t)pr;
    v = vd_gnode_inputs(g, gn)[0];
    uint32_t at = hmap_get(&k->vmap, v);
    if (at != NONE && k->v[at].piece >= 0 && !k->v[at].target) {
      for (uint32_t i = 0; i < n; i++) VD_CHECK(cone_node(c, k, g, chain[i], 0, 1, c->spos, 0));
      return VD_OK;
    }
  }
  return VD_OK;
}

/* When the single value of stop value vi is a broadcast of a scalar (one
 * input of one element: the loss gradient's sum_backward, an expand), adds
 * its producer to cone k: the stage then knows that every element of the
 * hypothesis is the same term.  As free symbols they were unrelated, and a
 * rank that permutes such a value (a correct program: it is constant) was a
 * false alarm (soundness fuzzer, llama3 tp2 cp2: a pair permutation of the
 * token loss's gradient).  SOUNDNESS: the node is the single plan's own;
 * its input becomes a free symbol, so the proof still holds for the real
 * values. */
static vd_rc bridge_broadcast(cctx *c, cone_t *k, uint32_t vi) {
  const vd_graph_t *g = c->gs;
  uint64_t v = k->v[vi].key;
  int32_t pr = g->values[v].producer;
  if (pr < 0) return VD_OK;
  const vd_gnode_t *gn = &g->nodes[pr];
  if (gn->n_in != 1 || gn->n_out != 1) return VD_OK;
  const vd_tensor_t *x = &g->plan->tensors[g->values[vd_gnode_inputs(g, gn)[0]].tensor];
  const vd_tensor_t *y = &g->plan->tensors[g->values[v].tensor];
  if (vd_tensor_numel(x) != 1 || vd_tensor_numel(y) < 2) return VD_OK;
  return cone_node(c, k, g, (uint32_t)pr, 0, 1, c->spos, 0);
}

static vd_rc single_walk(cctx *c, uint32_t svalue, int target_is_leaf, int *ok) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gs;
  cone_t *k = &c->sc, *pk = &c->pc;
  cone_reset(k);
  c->n_stack = 0;
  c->s_reached = 0;
  *ok = 1;
  /* Stop values first, flagged by piece >= 0 (the lineage's piece). */
  for (size_t i = 0; i < pk->n; i++) {
    if (pk->v[i].piece < 0 || pk->v[i].produced) continue;
    uint32_t sv = lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue;
    uint32_t si;
    int fresh;
    VD_CHECK(cone_value(c, k, sv, &si, &fresh));
    k->v[si].piece = pk->v[i].piece;
  }
  uint32_t si;
  int fresh;
  VD_CHECK(cone_value(c, k, svalue, &si, &fresh));
  k->v[si].target = 1;
  VD_CHECK(push(c, si));
  while (c->n_stack) {
    uint32_t vi = c->stack[--c->n_stack];
    if (k->v[vi].piece >= 0 && (target_is_leaf || !k->v[vi].target)) { /* a hypothesis' single value */
      c->s_reached += !k->v[vi].target;
      continue;
    }
    int32_t pr = g->values[k->v[vi].key].producer;
    if (pr < 0) continue;
    VD_CHECK(cone_node(c, k, g, (uint32_t)pr, 0, 1, c->spos, 0));
    if (k->n_nd > (target_is_leaf ? CONE_MAX : SINGLE_SOFT) || k->n > CONE_VALUES_MAX) {
      *ok = 0;
      return VD_OK;
    }
  }
  /* Hypothesis values the walk met as node inputs: they were in the cone
   * before the walk, so cone_node never pushes them and the pop above only
   * sees the target's own.  Each is first related to the other stop values
   * it rearranges (bridge_stop; the nodes it adds come after the walk's). */
  size_t n_walked = k->n_nd;
  for (size_t i = 0; i < n_walked; i++) {
    const vd_gnode_t *gn = &g->nodes[k->nd[i].gnode];
    for (uint32_t u = 0; u < gn->n_in; u++) {
      uint32_t xi = hmap_get(&k->vmap, vd_gnode_inputs(g, gn)[u]);
      if (k->v[xi].piece >= 0 && !k->v[xi].target && !k->v[xi].produced) VD_CHECK(bridge_stop(c, k, xi));
      if (k->v[xi].piece >= 0 && !k->v[xi].target && !k->v[xi].produced) VD_CHECK(bridge_broadcast(c, k, xi));
    }
  }
  for (size_t i = 0; i < k->n_nd; i++) {
    const vd_gnode_t *gn = &g->nodes[k->nd[i].gnode];
    const uint32_t *iv = vd_gnode_inputs(g, gn);
    for (uint32_t u = 0; u < gn->n_in; u++) {
      const cval_t *x = &k->v[hmap_get(&k->vmap, iv[u])];
      c->s_reached += x->piece >= 0 && !x->target;
    }
  }
  return VD_OK;
}

static vd_rc single_cone(cctx *c, uint32_t svalue, int *ok) {
  const vd_lin_table *lt = c->lt;
  const cone_t *pk = &c->pc;
  int other = 0;
  for (size_t i = 0; i < pk->n && !other; i++)
    if (pk->v[i].piece >= 0 && !pk->v[i].produced && lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue != svalue)
      other = 1;
  c->s_unrelated = -1;
  if (other) {
    VD_CHECK(single_walk(c, svalue, 0, ok));
    if (*ok) return VD_OK;
  }
  VD_CHECK(single_walk(c, svalue, 1, ok));
  /* The target's single-device computation reaches none of the values the
   * parallel pieces are computed from, and is large: the parallel value is
   * computed from the wrong inputs (e.g. swapped gradients).  Reported as a
   * DATAFLOW problem rather than handed to the solver as a whole-model
   * formula. */
  if (*ok && other && c->s_reached == 0 && c->sc.n_nd > SINGLE_SOFT)
    for (size_t i = 0; i < pk->n && c->s_unrelated < 0; i++)
      if (pk->v[i].piece >= 0 && !pk->v[i].produced && lt->lins[lt->pieces[pk->v[i].piece].lineage].svalue != svalue)
        c->s_unrelated = pk->v[i].piece;
  return VD_OK;
}

static int cnode_cmp(const void *a, const void *b) {
  const cnode_t *x = a, *y = b;
  if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
  return x->rep < y->rep ? -1 : x->rep > y->rep;
}

static int cval_cmp(const void *a, const void *b) {
  const cval_t *x = *(const cval_t *const *)a, *y = *(const cval_t *const *)b;
  return x->key < y->key ? -1 : x->key > y->key;
}

/* Assigns stage-local value indices to the leaves of cone k (sorted by key)
 * starting at *nv. */
static vd_rc number_leaves(cctx *c, cone_t *k, uint32_t *nv) {
  cval_t **lv = vd_malloc((k->n ? k->n : 1) * sizeof(*lv));
  if (!lv) return VD_OOM(c->d);
  size_t n = 0;
  for (size_t i = 0; i < k->n; i++)
    if (!k->v[i].produced) lv[n++] = &k->v[i];
  qsort(lv, n, sizeof(*lv), cval_cmp);
  for (size_t i = 0; i < n; i++) lv[i]->loc = (*nv)++;
  vd_free(lv);
  return VD_OK;
}

static void fill_value(cctx *c, vd_stage_value *sv, int side, uint32_t value, int32_t rep) {
  const vd_graph_t *g = side ? c->gp : c->gs;
  const vd_tensor_t *t = &g->plan->tensors[g->values[value].tensor];
  memset(sv, 0, sizeof(*sv));
  sv->side = (uint8_t)side;
  sv->value = value;
  sv->replica = rep;
  sv->ndim = t->ndim;
  memcpy(sv->shape, t->shape, sizeof(sv->shape));
  memcpy(sv->rshape, t->shape, sizeof(sv->rshape));
  sv->producer = -1;
  sv->leaf_piece = -1;
  sv->hyp_svalue = -1;
}

/* Builds the stage from the two cones. */
static vd_rc assemble(cctx *c, const vd_lineage *L, uint32_t li, vd_stage *st) {
  const vd_lin_table *lt = c->lt;
  cone_t *sk = &c->sc, *pk = &c->pc;
  uint32_t D = c->D;
  memset(st, 0, sizeof(*st));
  st->canon_class = -1;
  /* Extra single leaves: every hypothesis' single value is in sk already
   * (single_cone inserts them before walking). */
  if (sk->n_nd > 1) qsort(sk->nd, sk->n_nd, sizeof(*sk->nd), cnode_cmp);
  if (pk->n_nd > 1) qsort(pk->nd, pk->n_nd, sizeof(*pk->nd), cnode_cmp);
  /* Numbering: single leaves, single node outputs, parallel leaves,
   * parallel node outputs. */
  uint32_t nv = 0;
  VD_CHECK(number_leaves(c, sk, &nv));
  size_t n_idx = 2 * c->n_mem;
  for (size_t i = 0; i < sk->n_nd; i++) {
    const vd_gnode_t *gn = &c->gs->nodes[sk->nd[i].gnode];
    const uint32_t *ov = vd_gnode_outputs(c->gs, gn);
    for (uint32_t o = 0; o < gn->n_out; o++) {
      cval_t *x = &sk->v[hmap_get(&sk->vmap, ov[o])];
      if (x->loc == NONE) x->loc = nv++;
    }
    n_idx += gn->n_in + gn->n_out;
  }
  VD_CHECK(number_leaves(c, pk, &nv));
  for (size_t i = 0; i < pk->n_nd; i++) {
    const cnode_t *cn = &pk->nd[i];
    const vd_gnode_t *gn = &c->gp->nodes[cn->gnode];
    const uint32_t *ov = vd_gnode_outputs(c->gp, gn);
    uint32_t r0 = cn->span ? 0 : (uint32_t)cn->rep, r1 = cn->span ? D : (uint32_t)cn->rep + 1;
    for (uint32_t r = r0; r < r1; r++)
      for (uint32_t o = 0; o < gn->n_out; o++) {
        cval_t *x = &pk->v[hmap_get(&pk->vmap, (uint64_t)ov[o] * D + r)];
        if (x->loc == NONE) x->loc = nv++;
      }
    n_idx += (size_t)(gn->n_in + gn->n_out) * (r1 - r0);
  }
  if (VD_NEVER(nv != sk->n + pk->n))
    return VD_ERR(c->d, VD_EINTERNAL, NULL, "stage", "values", "expected %zu values, numbered %u", sk->n + pk->n, nv);
  uint32_t nn = (uint32_t)(sk->n_nd + pk->n_nd);
  st->vals = vd_calloc(nv ? nv : 1, sizeof(*st->vals));
  st->nodes = vd_calloc(nn ? nn : 1, sizeof(*st->nodes));
  st->targets = vd_calloc(1, sizeof(*st->targets));
  st->idx = vd_malloc((n_idx ? n_idx : 1) * sizeof(*st->idx));
  if (!st->vals || !st->nodes || !st->targets || !st->idx) return VD_OOM(c->d);
  st->n_vals = nv;
  st->n_nodes = nn;
  for (size_t i = 0; i < sk->n; i++) fill_value(c, &st->vals[sk->v[i].loc], 0, (uint32_t)sk->v[i].key, 0);
  for (size_t i = 0; i < pk->n; i++) {
    const cval_t *x = &pk->v[i];
    vd_stage_value *sv = &st->vals[x->loc];
    fill_value(c, sv, 1, (uint32_t)(x->key / D), (int32_t)(x->key % D));
    if (!x->produced && x->piece >= 0) {
      const vd_lin_piece *p = &lt->pieces[x->piece];
      sv->leaf_piece = x->piece;
      sv->hyp_svalue = (int32_t)sk->v[hmap_get(&sk->vmap, lt->lins[p->lineage].svalue)].loc;
      vd_lin_piece_at(lt, (uint32_t)x->piece, sv->replica, sv->plo, sv->phi);
      memcpy(sv->rlo, sv->plo, sizeof(sv->rlo));
      memcpy(sv->rhi, sv->phi, sizeof(sv->rhi));
      sv->has_pslice = 1;
    }
  }
  /* Nodes with their operand lists. */
  uint32_t ix = 0, ni = 0;
  for (int side = 0; side < 2; side++) {
    cone_t *k = side ? pk : sk;
    const vd_graph_t *g = side ? c->gp : c->gs;
    const int *ops = side ? c->pop : c->sop;
    uint32_t Dk = side ? D : 1;
    for (size_t i = 0; i < k->n_nd; i++, ni++) {
      const cnode_t *cn = &k->nd[i];
      const vd_gnode_t *gn = &g->nodes[cn->gnode];
      const uint32_t *iv = vd_gnode_inputs(g, gn), *ov = vd_gnode_outputs(g, gn);
      uint32_t r0 = cn->span ? 0 : (uint32_t)cn->rep, r1 = cn->span ? Dk : (uint32_t)cn->rep + 1;
      vd_stage_node *sn = &st->nodes[ni];
      sn->side = (uint8_t)side;
      sn->gnode = cn->gnode;
      sn->replica = cn->rep;
      sn->op = ops[gn->pnode];
      sn->in_off = ix;
      for (uint32_t r = r0; r < r1; r++)
        for (uint32_t u = 0; u < gn->n_in; u++)
          st->idx[ix++] = k->v[hmap_get(&k->vmap, (uint64_t)iv[u] * Dk + r)].loc;
      sn->n_in = ix - sn->in_off;
      sn->out_off = ix;
      for (uint32_t r = r0; r < r1; r++)
        for (uint32_t o = 0; o < gn->n_out; o++) {
          uint32_t loc = k->v[hmap_get(&k->vmap, (uint64_t)ov[o] * Dk + r)].loc;
          st->idx[ix++] = loc;
          st->vals[loc].producer = (int32_t)ni;
        }
      sn->n_out = ix - sn->out_off;
    }
  }
  /* The target. */
  vd_stage_target *tg = &st->targets[0];
  const vd_lin_piece *p0 = &lt->pieces[c->mp[0]];
  tg->svalue = (int32_t)sk->v[hmap_get(&sk->vmap, L->svalue)].loc;
  tg->lineage = li;
  vd_lin_piece_at(lt, c->mp[0], c->mr[0], tg->lo, tg->hi);
  memcpy(tg->rlo, tg->lo, sizeof(tg->rlo));
  memcpy(tg->rhi, tg->hi, sizeof(tg->rhi));
  memcpy(tg->blo, tg->lo, sizeof(tg->blo));
  memcpy(tg->bhi, tg->hi, sizeof(tg->bhi));
  tg->has_bslice = 1;
  tg->part_n = p0->part_n;
  tg->piece_off = ix;
  for (size_t i = 0; i < c->n_mem; i++) {
    const vd_lin_piece *p = &lt->pieces[c->mp[i]];
    st->idx[ix++] = c->mp[i];
    st->idx[ix++] = pk->v[hmap_get(&pk->vmap, (uint64_t)p->value * D + (uint32_t)c->mr[i])].loc;
  }
  tg->n_pieces = (uint32_t)c->n_mem;
  st->n_rep = 1;
  st->n_mb = 1;
  st->n_targets = 1;
  st->n_idx = ix;
  return VD_OK;
}

/* Cuts the stage of the current members (c->mp/mr).  *out gets the new
 * stage's index, or -1 when a structural issue was recorded instead. */
static vd_rc cut_target(cctx *c, uint32_t li, int64_t *out) {
  const vd_lineage *L = &c->lt->lins[li];
  size_t a = c->mp[0];
  *out = -1;
  cone_reset(&c->pc);
  cone_reset(&c->sc);
  int ok = 1;
  VD_CHECK(parallel_cone(c, L, &ok));
  if (ok) VD_CHECK(single_cone(c, L->svalue, &ok));
  if (!ok) {
    char tl[160];
    target_label(c, L, &c->lt->pieces[a], tl, sizeof(tl));
    const vd_lin_piece *p = &c->lt->pieces[a];
    /* SOUNDNESS: a limit, not a finding.  The target is neither proven nor
     * refuted; the run is INCONCLUSIVE (verifier/run.c, vd_run.limits).
     * It was a DATAFLOW issue (NOT EQUIVALENT) on correct plans. */
    return add_issue(c, VD_SISSUE_LIMIT, 0, -1, (int64_t)p->ptensor, -1, p->mb,
                     "target %s not proven: its stage passes CONE_MAX = %u graph nodes or CONE_VALUES_MAX = %zu "
                     "values (`verdict limits`); annotating a tensor between it and the proven lineages splits "
                     "the stage",
                     tl, CONE_MAX, CONE_VALUES_MAX);
  }
  if (c->s_unrelated >= 0) {
    char tl[160];
    target_label(c, L, &c->lt->pieces[a], tl, sizeof(tl));
    const vd_lin_piece *p = &c->lt->pieces[a], *h = &c->lt->pieces[c->s_unrelated];
    const vd_lineage *HL = &c->lt->lins[h->lineage];
    int64_t rank = (int64_t)c->mr[0] * c->pp->world.stored_ranks + c->pp->tensors[p->ptensor].rank;
    return add_issue(c, VD_SISSUE_DATAFLOW, 0, -1, (int64_t)p->ptensor, (int32_t)rank, p->mb,
                     "target %s on rank %lld is computed from '%s' (rank %lld), which the single-device computation "
                     "of the target does not use",
                     tl, (long long)rank, tname(c->sp, HL->stensor),
                     (long long)((int64_t)h->replica * c->pp->world.stored_ranks + c->pp->tensors[h->ptensor].rank));
  }
  vd_stage_set *set = c->set;
  if (VD_GROW(set->stages, c->cap_stages, set->n_stages + 1)) return VD_OOM(c->d);
  vd_stage *st = &set->stages[set->n_stages];
  vd_rc rc = assemble(c, L, li, st);
  if (rc) {
    vd_stage_free(st);
    return rc;
  }
  st->id = (uint32_t)set->n_stages++;
  *out = (int64_t)st->id;
  return VD_OK;
}

static vd_rc add_member(cctx *c, uint32_t piece, int32_t rep) {
  if (VD_GROW(c->mp, c->cap_mem, c->n_mem + 1) || VD_GROW(c->mr, c->cap_mr, c->n_mem + 1)) return VD_OOM(c->d);
  c->mp[c->n_mem] = piece;
  c->mr[c->n_mem++] = rep;
  return VD_OK;
}

/* Whether the stage cut for replica 0 is literally the stage of every other
 * replica after windowing, so it stands for all of them (docs/verifier.md
 * section 5).  Conditions: no collective spanning replicas in it (its
 * operands would change with the replica); every hypothesis is a piece for
 * all replicas (all_rep: same part index in every replica); and the windowed
 * slices of replica 1 (slices moved by dp_shift) equal those of replica 0.
 * The shift is affine in the replica, and windows are hulls, so equality at
 * replica 1 means every slice of a window class moves by one common amount
 * and slices of pinned classes do not move: then the same holds at every
 * replica.  A partial-sum target (n > 1) that does not move also needs the
 * replicas of a part to be equal to each other across replicas, which is
 * only literal when nothing moves; a moving target's group is its own
 * replica's (another slice per replica). */
static vd_rc replica_uniform(cctx *c, vd_stage *st, int *uniform) {
  const vd_lin_table *lt = c->lt;
  vd_stage t1 = *st;
  vd_rc rc = VD_OK;
  int moves = 0;
  *uniform = 0;
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].side && is_span(c, &c->gp->nodes[st->nodes[i].gnode])) return VD_OK;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    if (!v->side || v->producer >= 0 || v->leaf_piece < 0) continue;
    if (!lt->pieces[v->leaf_piece].all_rep) return VD_OK;
    moves |= vd_lin_piece_moves(lt, (uint32_t)v->leaf_piece);
  }
  int tmoves = 0;
  for (uint32_t k = 0; k < st->targets[0].n_pieces; k++)
    tmoves |= vd_lin_piece_moves(lt, st->idx[st->targets[0].piece_off + 2 * k]);
  if (!moves && !tmoves) {
    *uniform = 1;
    return VD_OK;
  }
  /* A target that stays put while its inputs move: its copies in different
   * replicas form one group whose parts must equal each other across
   * replicas, which no single replica's stage states. */
  if (st->targets[0].part_n > 1 && !tmoves) return VD_OK;
  t1.vals = vd_malloc(st->n_vals * sizeof(*t1.vals));
  t1.targets = vd_malloc(st->n_targets * sizeof(*t1.targets));
  if (!t1.vals || !t1.targets) {
    rc = VD_OOM(c->d);
    goto done;
  }
  memcpy(t1.vals, st->vals, st->n_vals * sizeof(*t1.vals));
  memcpy(t1.targets, st->targets, st->n_targets * sizeof(*t1.targets));
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &t1.vals[i];
    if (!v->side || v->producer >= 0 || v->leaf_piece < 0) continue;
    vd_lin_piece_at(lt, (uint32_t)v->leaf_piece, 1, v->plo, v->phi);
  }
  vd_stage_target *tg = &t1.targets[0];
  vd_lin_piece_at(lt, st->idx[tg->piece_off], 1, tg->blo, tg->bhi);
  for (uint32_t k = 1; k < tg->n_pieces; k++) { /* every copy of the target moves alike */
    int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS];
    vd_lin_piece_at(lt, st->idx[tg->piece_off + 2 * k], 1, lo, hi);
    if (memcmp(lo, tg->blo, sizeof(lo)) || memcmp(hi, tg->bhi, sizeof(hi))) goto done;
  }
  if ((rc = vd_stage_window(lt, st, c->d)) != VD_OK || (rc = vd_stage_window(lt, &t1, c->d)) != VD_OK) goto done;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *a = &st->vals[i], *b = &t1.vals[i];
    if (memcmp(a->shape, b->shape, sizeof(a->shape)) || memcmp(a->plo, b->plo, sizeof(a->plo)) ||
        memcmp(a->phi, b->phi, sizeof(a->phi)))
      goto done;
  }
  if (memcmp(st->targets[0].blo, tg->blo, sizeof(tg->blo)) || memcmp(st->targets[0].bhi, tg->bhi, sizeof(tg->bhi)))
    goto done;
  *uniform = 2; /* windowed already */
done:
  vd_free(t1.vals);
  vd_free(t1.targets);
  return rc;
}

/* Drops the last stage of the set (a replica-0 stage that does not stand for
 * the other replicas). */
static void drop_last(cctx *c) {
  vd_stage_set *set = c->set;
  vd_stage_free(&set->stages[--set->n_stages]);
}

/* One slice group [a, b) of lineage li.  Pieces for every replica (all_rep)
 * are cut once, for replica 0, when that stage stands for all replicas
 * (replica_uniform); otherwise, and for groups listing replicas one by one,
 * every replica is materialized: one stage holding all replicas when the
 * target slice does not move with the replica, one per replica when it does. */
/* Members of slice group [a, b) for one way of cutting it (mode): -2 every
 * piece for replica 0 (a stage standing for all replicas); -1 every replica
 * of every piece (a target slice that does not move); d >= 0 replica d's
 * copies of the pieces that move (and the per-replica pieces at d = 0). */
static vd_rc group_members(cctx *c, size_t a, size_t b, int32_t mode) {
  const vd_lin_table *lt = c->lt;
  c->n_mem = 0;
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    if (mode == -2) {
      VD_CHECK(add_member(c, (uint32_t)i, 0));
    } else if (!p->all_rep) {
      if (mode <= 0) VD_CHECK(add_member(c, (uint32_t)i, p->replica));
    } else if (mode >= 0) {
      VD_CHECK(add_member(c, (uint32_t)i, mode));
    } else {
      for (int32_t r = 0; r < (int32_t)c->D; r++) VD_CHECK(add_member(c, (uint32_t)i, r));
    }
  }
  return VD_OK;
}

/* Records how stage sid was cut, so that vd_stage_recut can cut it again. */
static void note_cut(cctx *c, int64_t sid, uint32_t li, size_t a, size_t b, int32_t mode) {
  vd_stage *st = &c->set->stages[sid];
  st->cut_lin = li;
  st->cut_a = (uint32_t)a;
  st->cut_b = (uint32_t)b;
  st->cut_mode = mode;
}

static vd_rc cut_group(cctx *c, uint32_t li, size_t a, size_t b) {
  const vd_lin_table *lt = c->lt;
  int all = c->D > 1, moving = 0;
  for (size_t i = a; i < b; i++) {
    all &= lt->pieces[i].all_rep;
    moving |= vd_lin_piece_moves(lt, (uint32_t)i);
  }
  int64_t sid;
  if (all) {
    VD_CHECK(group_members(c, a, b, -2));
    VD_CHECK(cut_target(c, li, &sid));
    if (sid < 0) return VD_OK;
    vd_stage *st = &c->set->stages[sid];
    int uniform;
    VD_CHECK(replica_uniform(c, st, &uniform));
    if (uniform) {
      if (uniform == 1) VD_CHECK(vd_stage_window(lt, st, c->d));
      st->n_rep = c->D;
      note_cut(c, sid, li, a, b, -2);
      return VD_OK;
    }
    drop_last(c);
  }
  for (int32_t d = 0; d < (int32_t)c->D; d++) {
    if (d > 0 && !moving) break;
    int32_t mode = moving ? d : -1;
    VD_CHECK(group_members(c, a, b, mode));
    if (!c->n_mem) continue;
    VD_CHECK(cut_target(c, li, &sid));
    if (sid >= 0) {
      VD_CHECK(vd_stage_window(lt, &c->set->stages[sid], c->d));
      note_cut(c, sid, li, a, b, mode);
    }
  }
  return VD_OK;
}

/* ---- microbatch classes by construction ------------------------------------
 *
 * A slice group whose pieces all belong to microbatch m0 is cut for m0 only
 * when its stages are literally the stages of the same group in microbatch
 * m (docs/verifier.md section 2, "Microbatch classes").  The translation
 * tau_m maps a Gp node of microbatch m0 to the instance of the same plan node
 * in microbatch m, a per-microbatch value to the value of the same tensor,
 * version and output slot in microbatch m, and a persistent value to itself.
 * A stage stands for microbatch m when tau_m maps every parallel node to a
 * node with exactly the translated operands, every leaf to a leaf that is a
 * point with the same lineage, part and replica structure, every produced
 * non-target value to a value that is no point, and the target group onto a
 * whole slice group of microbatch m that is not cut yet; and when its
 * windowed slices do not move (checked at one m, which suffices because the
 * slices are affine in m; see window_same). */

/* Instance of Gp node g (microbatch m0) in microbatch m, or NONE. */
static uint32_t tr_node(const cctx *c, uint32_t g, int32_t m0, int32_t m) {
  const vd_gnode_t *gn = &c->gp->nodes[g];
  if (gn->mb != m0 || gn->pnode >= c->pp->n_nodes) return NONE;
  uint32_t t = c->inst[(size_t)gn->pnode * c->nm + (uint32_t)m];
  if (t == NONE) return NONE;
  const vd_gnode_t *tn = &c->gp->nodes[t];
  if (tn->pnode != gn->pnode || tn->mb != m || tn->replica != gn->replica || tn->n_in != gn->n_in ||
      tn->n_out != gn->n_out || tn->n_part != gn->n_part)
    return NONE;
  return t;
}

/* tau_m of Gp value u, or NONE. */
static uint32_t tr_value(const cctx *c, uint32_t u, int32_t m0, int32_t m) {
  const vd_graph_t *g = c->gp;
  const vd_value_t *x = &g->values[u];
  if (x->mb < 0) return u;
  if (x->mb != m0) return NONE;
  if (x->producer < 0) {
    int32_t f = vd_graph_first(g, x->tensor, x->replica, m);
    if (f < 0 || g->values[f].producer >= 0 || g->values[f].version != x->version) return NONE;
    return (uint32_t)f;
  }
  uint32_t t = tr_node(c, (uint32_t)x->producer, m0, m);
  if (t == NONE) return NONE;
  const vd_gnode_t *gn = &g->nodes[x->producer];
  const uint32_t *ov = vd_gnode_outputs(g, gn), *tv = vd_gnode_outputs(g, &g->nodes[t]);
  for (uint32_t o = 0; o < gn->n_out; o++)
    if (ov[o] == u) {
      const vd_value_t *y = &g->values[tv[o]];
      return y->tensor == x->tensor && y->version == x->version && y->mb == m ? tv[o] : NONE;
    }
  return NONE;
}

/* Whether two pieces make the same claim up to their slice (same lineage,
 * part, part count and replica structure). */
static int piece_like(const vd_lin_table *lt, uint32_t a, uint32_t b) {
  const vd_lin_piece *p = &lt->pieces[a], *q = &lt->pieces[b];
  return p->lineage == q->lineage && p->part_k == q->part_k && p->part_n == q->part_n && p->f == q->f &&
         p->all_rep == q->all_rep &&
         p->replica == q->replica && p->initial == q->initial;
}

/* Whether stage st translates to microbatch m (structure only); fills
 * c->tp[value] with the translated piece of every hypothesis leaf. */
static int stage_translates(cctx *c, const vd_stage *st, int32_t m0, int32_t m) {
  const vd_lin_table *lt = c->lt;
  const vd_graph_t *g = c->gp;
  for (uint32_t k = 0; k < st->n_nodes; k++) {
    const vd_stage_node *sn = &st->nodes[k];
    if (!sn->side) continue;
    uint32_t t = tr_node(c, sn->gnode, m0, m);
    if (t == NONE) return 0;
    const vd_gnode_t *gn = &g->nodes[sn->gnode], *tn = &g->nodes[t];
    const uint32_t *iv = vd_gnode_inputs(g, gn), *tiv = vd_gnode_inputs(g, tn);
    const uint32_t *ov = vd_gnode_outputs(g, gn), *tov = vd_gnode_outputs(g, tn);
    for (uint32_t i = 0; i < gn->n_in; i++)
      if (tr_value(c, iv[i], m0, m) != tiv[i]) return 0;
    for (uint32_t o = 0; o < gn->n_out; o++)
      if (tr_value(c, ov[o], m0, m) != tov[o]) return 0;
  }
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    c->tp[i] = NONE;
    if (!v->side) continue;
    uint32_t tu = tr_value(c, v->value, m0, m);
    if (tu == NONE) return 0;
    int32_t pc = vd_lin_piece_of(lt, tu, v->replica);
    if (v->producer >= 0) {
      /* a produced value: a point only if it is a target (checked by the
       * caller through the group), never a hypothesis in microbatch m */
      if (pc >= 0 && vd_lin_piece_of(lt, v->value, v->replica) < 0) return 0;
      continue;
    }
    if (v->leaf_piece < 0 || pc < 0 || !piece_like(lt, (uint32_t)v->leaf_piece, (uint32_t)pc)) return 0;
    c->tp[i] = (uint32_t)pc;
  }
  return 1;
}

/* Copies the values and targets of st with unwindowed shapes and the slices
 * of its hypotheses and target taken from pieces tp (NONE: the stage's own
 * piece) and target piece tpiece, then windows the copy. */
static vd_rc window_copy_r(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, int32_t dr,
                           vd_stage *w);
static vd_rc window_copy(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, vd_stage *w) {
  return window_copy_r(c, st, tp, tpiece, 0, w);
}

/* The same with every hypothesis taken in replica (its replica + dr). */
static vd_rc window_copy_r(cctx *c, const vd_stage *st, const uint32_t *tp, uint32_t tpiece, int32_t dr,
                           vd_stage *w) {
  const vd_lin_table *lt = c->lt;
  *w = *st;
  w->vals = vd_malloc((st->n_vals ? st->n_vals : 1) * sizeof(*w->vals));
  w->targets = vd_malloc(sizeof(*w->targets));
  if (!w->vals || !w->targets) return VD_OOM(c->d);
  memcpy(w->vals, st->vals, st->n_vals * sizeof(*w->vals));
  w->targets[0] = st->targets[0];
  w->n_targets = 1;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    vd_stage_value *v = &w->vals[i];
    if (!v->side) {
      memcpy(v->shape, c->sp->tensors[c->gs->values[v->value].tensor].shape, sizeof(v->shape));
      memcpy(v->rshape, v->shape, sizeof(v->rshape));
      memset(v->woff, 0, sizeof(v->woff));
      continue;
    }
    if (v->producer >= 0 || v->leaf_piece < 0) continue;
    vd_lin_piece_at(lt, tp && tp[i] != NONE ? tp[i] : (uint32_t)v->leaf_piece, v->replica + dr, v->plo, v->phi);
  }
  vd_stage_target *tg = &w->targets[0];
  const vd_stage_value *tv = &st->vals[st->idx[tg->piece_off + 1]];
  vd_lin_piece_at(lt, tpiece, tv->replica, tg->blo, tg->bhi);
  tg->has_bslice = 1;
  return vd_stage_window(lt, w, c->d);
}

/* Whether the windowed slices and shapes of st are the same with the
 * translated pieces (c->tp, target piece tpiece) as with its own.  Slices are
 * affine in the microbatch (lo + m * mb_shift per tensor), and a window is
 * the hull of a class's slices: equality at one m != m0 means every slice of
 * a window class moves by one common amount and slices of pinned classes do
 * not move, hence equality at every m (as for replicas, replica_uniform). */
static vd_rc window_same(cctx *c, const vd_stage *st, uint32_t tpiece, int *same) {
  vd_stage a = {0}, b = {0};
  vd_rc rc;
  *same = 0;
  if ((rc = window_copy(c, st, NULL, st->idx[st->targets[0].piece_off], &a)) == VD_OK &&
      (rc = window_copy(c, st, c->tp, tpiece, &b)) == VD_OK) {
    int eq = !memcmp(a.targets[0].blo, b.targets[0].blo, sizeof(a.targets[0].blo)) &&
             !memcmp(a.targets[0].bhi, b.targets[0].bhi, sizeof(a.targets[0].bhi));
    for (uint32_t i = 0; i < st->n_vals && eq; i++) {
      const vd_stage_value *x = &a.vals[i], *y = &b.vals[i];
      eq = !memcmp(x->shape, y->shape, sizeof(x->shape)) && !memcmp(x->plo, y->plo, sizeof(x->plo)) &&
           !memcmp(x->phi, y->phi, sizeof(x->phi));
    }
    *same = eq;
  }
  vd_free(a.vals);
  vd_free(a.targets);
  vd_free(b.vals);
  vd_free(b.targets);
  return rc;
}

/* Translates the slice group [a, b) (microbatch m0) to microbatch m: the
 * first piece of the translated group, or NONE when the translation is not
 * a whole slice group of microbatch m that is still to be cut. */
static uint32_t tr_group(cctx *c, size_t a, size_t b, int32_t m0, int32_t m) {
  const vd_lin_table *lt = c->lt;
  uint32_t g0 = NONE;
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    uint32_t tv = tr_value(c, p->value, m0, m);
    if (tv == NONE) return NONE;
    int32_t q = vd_lin_piece_of(lt, tv, p->replica);
    if (q < 0 || !piece_like(lt, (uint32_t)i, (uint32_t)q) || lt->pieces[q].mb != m ||
        lt->pieces[q].lineage != p->lineage)
      return NONE;
    if (g0 == NONE) g0 = c->grp[q];
    if (c->grp[q] != g0) return NONE;
  }
  size_t n = 0;
  for (size_t j = g0; j < lt->n_pieces && c->grp[j] == g0; j++) n++;
  return n == b - a && !c->done[g0] ? g0 : NONE;
}

/* After cutting the stages [s0, n_stages) of slice group [a, b): the other
 * microbatches' groups these stages stand for are marked done, and the
 * stages count them (n_mb).  Only what really differs (a microbatch whose
 * program, wiring or lineage differs, the accumulation that reads several
 * microbatches) is left to be cut on its own. */
static vd_rc mb_family(cctx *c, size_t a, size_t b, size_t s0) {
  const vd_lin_table *lt = c->lt;
  vd_stage_set *set = c->set;
  int32_t m0 = lt->pieces[a].mb;
  if (!c->mb_ok || m0 < 0 || s0 >= set->n_stages) return VD_OK;
  for (size_t i = a; i < b; i++)
    if (lt->pieces[i].mb != m0) return VD_OK;
  int windows_checked = 0;
  uint32_t covered = 0;
  int32_t *list = vd_malloc((c->nm + 1) * sizeof(*list));
  if (!list) return VD_OOM(c->d);
  list[0] = m0;
  for (int32_t m = 0; m < (int32_t)c->nm; m++) {
    if (m == m0) continue;
    uint32_t g = tr_group(c, a, b, m0, m);
    if (g == NONE) continue;
    int ok = 1;
    for (size_t s = s0; s < set->n_stages && ok; s++) {
      const vd_stage *st = &set->stages[s];
      if (VD_GROW(c->tp, c->cap_tp, st->n_vals + 1)) {
        vd_free(list);
        return VD_OOM(c->d);
      }
      ok = stage_translates(c, st, m0, m);
      if (ok && !windows_checked) {
        const vd_lin_piece *p = &lt->pieces[st->idx[st->targets[0].piece_off]];
        int32_t q = vd_lin_piece_of(lt, tr_value(c, p->value, m0, m), p->replica);
        vd_rc rc = window_same(c, st, (uint32_t)q, &ok);
        if (rc != VD_OK || !ok) { /* !ok: the slices move inside a window, at every m */
          vd_free(list);
          return rc;
        }
      }
    }
    if (!ok) continue;
    windows_checked = 1;
    c->done[g] = 1;
    list[++covered] = m;
  }
  for (size_t s = s0; s < set->n_stages && covered; s++) {
    vd_stage *st = &set->stages[s];
    st->n_mb = 1 + covered;
    st->mb_list = vd_malloc((size_t)st->n_mb * sizeof(*st->mb_list));
    if (!st->mb_list) {
      vd_free(list);
      return VD_OOM(c->d);
    }
    memcpy(st->mb_list, list, (size_t)st->n_mb * sizeof(*list));
  }
  vd_free(list);
  return VD_OK;
}

/* ---- sums by part ------------------------------------------------------------
 *
 * A target that is a sum of n parts, one per (replica, microbatch) that ran
 * the same backward on other batch rows (a weight gradient annotated per
 * replica and microbatch), is proven part by part instead of in one stage
 * holding all n contributions (docs/verifier.md section 2, "Sums by part").
 * The members of the slice group are bucketed by part; each part's members
 * must be of one replica d and one microbatch m (several parts may share
 * (d, m): the data-parallel EP ranks of one replica).
 * A bucket's stage claims that each of its pieces equals the single target
 * computed on the bucket's rows only: the node producing the single target
 * sums over rows (vd_op_eqv.sum_outs), and vd_stage_window (sum_mode) cuts
 * its row input to the rows the bucket's hypotheses hold along exactly one
 * row dimension, [lo, hi).  One bucket's stage stands for the buckets it
 * translates to (other replicas when no collective spans replicas and every
 * hypothesis is a piece for all replicas; other microbatches by tau_m, as in
 * mb_family), whose windows move by a common amount per replica (A) and per
 * microbatch (B); any other bucket is cut on its own.  Then the windows of
 * all buckets must tile the row dimension exactly once.
 *
 * SOUNDNESS: every piece of part k equals S_W(k) = sum over the rows of W(k)
 * of phi(row) (the node's summed output on those rows; the windowed single
 * side computes exactly the rows of the whole computation, section 5), and
 * the W(k) partition the rows, so the sum over k of one piece per part is
 * sum over all rows of phi(row) = the single target, and pieces of one part
 * equal each other.  Parts and buckets correspond one to one, so no part is
 * missed or counted twice.  Whatever fails (a bucket that does not window,
 * windows that overlap or leave a gap, a structural issue) rolls the group
 * back to the one stage holding every part. */

typedef struct {
  int32_t d, m;       /* replica and microbatch of its members; d = -1 before the first */
  uint32_t first, n;  /* members sm[first .. first+n) */
  int64_t lo, hi;     /* row window, once covered */
  uint8_t covered;
} sbucket_t;

typedef struct {
  uint32_t piece;
  int32_t rep;
} smember_t;

static int smember_cmp(const void *a, const void *b) {
  const smember_t *x = a, *y = b;
  if (x->piece != y->piece) return x->piece < y->piece ? -1 : 1;
  return (x->rep > y->rep) - (x->rep < y->rep);
}

/* The bucket (part) holding exactly the translates of the members of the
 * representative bucket rb (at replica rb->d, microbatch m0) into replica d,
 * microbatch m: the piece of the translated value in replica d for each of
 * them; -1 when there is none, or it is covered already. */
static int64_t bucket_translate(cctx *c, const smember_t *sm, const sbucket_t *bk, const sbucket_t *rb, int32_t d,
                                int32_t m0, int32_t m, smember_t *tmp, size_t a, size_t b) {
  const vd_lin_table *lt = c->lt;
  for (uint32_t i = 0; i < rb->n; i++) {
    const vd_lin_piece *p = &lt->pieces[sm[rb->first + i].piece];
    uint32_t tv = m == m0 ? p->value : tr_value(c, p->value, m0, m);
    if (tv == NONE) return -1;
    int32_t q = vd_lin_piece_of(lt, tv, d);
    if (q < 0 || (size_t)q < a || (size_t)q >= b) return -1;
    tmp[i] = (smember_t){(uint32_t)q, d};
  }
  int64_t k = lt->pieces[tmp[0].piece].part_k;
  const sbucket_t *tb = &bk[k];
  if (tb->n != rb->n || tb->covered || tb->d != d || tb->m != m) return -1;
  qsort(tmp, rb->n, sizeof(*tmp), smember_cmp);
  for (uint32_t i = 0; i < rb->n; i++)
    if (tmp[i].piece != sm[tb->first + i].piece || tmp[i].rep != sm[tb->first + i].rep) return -1;
  return k;
}

/* Window of st's sum with its hypotheses translated (c->tp when tp, replica
 * + dr): *same when every windowed shape and slice equals st's, and *lo the
 * translated window's start. */
static vd_rc sum_window_at(cctx *c, const vd_stage *st, const uint32_t *tp, int32_t dr, int *same, int64_t *lo) {
  vd_stage w = {0};
  vd_rc rc = window_copy_r(c, st, tp, st->idx[st->targets[0].piece_off], dr, &w);
  *same = 0;
  if (rc == VD_OK && w.sum_ok && w.sum_dim == st->sum_dim && w.sum_svalue == st->sum_svalue &&
      w.sum_hi - w.sum_lo == st->sum_hi - st->sum_lo) {
    int eq = !memcmp(w.targets[0].blo, st->targets[0].blo, sizeof(w.targets[0].blo)) &&
             !memcmp(w.targets[0].bhi, st->targets[0].bhi, sizeof(w.targets[0].bhi));
    for (uint32_t i = 0; i < st->n_vals && eq; i++) {
      const vd_stage_value *x = &st->vals[i], *y = &w.vals[i];
      eq = !memcmp(x->shape, y->shape, sizeof(x->shape)) && !memcmp(x->plo, y->plo, sizeof(x->plo)) &&
           !memcmp(x->phi, y->phi, sizeof(x->phi));
    }
    *same = eq;
    *lo = w.sum_lo;
  }
  vd_free(w.vals);
  vd_free(w.targets);
  return rc;
}

/* Whether the stage of replica d0 is literally the stage of every replica up
 * to where its slices sit (replica_uniform's conditions (a) and (b)). */
static int sum_rep_ok(const cctx *c, const vd_stage *st) {
  if (c->D < 2) return 0;
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].side && is_span(c, &c->gp->nodes[st->nodes[i].gnode])) return 0;
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *v = &st->vals[i];
    if (v->side && v->producer < 0 && v->leaf_piece >= 0 && !c->lt->pieces[v->leaf_piece].all_rep) return 0;
  }
  return 1;
}

static int i64_pair_cmp(const void *a, const void *b) {
  const int64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Representatives are taken in (replica, microbatch, first member) order:
 * replica 0's earliest microbatch first; members' offsets are distinct, so
 * the order is total and the cut deterministic. */
typedef struct {
  int32_t d, m;
  uint32_t first, k;
} sorder_t;

static int sorder_cmp(const void *a, const void *b) {
  const sorder_t *x = a, *y = b;
  if (x->d != y->d) return x->d < y->d ? -1 : 1;
  if (x->m != y->m) return x->m < y->m ? -1 : 1;
  return (x->first > y->first) - (x->first < y->first);
}

typedef struct {
  smember_t *sm;
  sbucket_t *bk;      /* one per part index */
  smember_t *tmp;
  int32_t *mset;
  int64_t *win;
  sorder_t *order;    /* parts by (replica, microbatch, first member) */
  int64_t *tk;        /* scratch: translated buckets */
} sum_scratch;

static void sum_scratch_free(sum_scratch *x) {
  vd_free(x->sm);
  vd_free(x->bk);
  vd_free(x->tmp);
  vd_free(x->mset);
  vd_free(x->win);
  vd_free(x->order);
  vd_free(x->tk);
}

/* Cuts the representative of part kr (its bucket at replica d0, microbatch
 * m0) and covers the parts it stands for.  *ok = 0: roll the group back. */
static vd_rc sum_bucket(cctx *c, uint32_t li, size_t a, size_t b, sum_scratch *x, int64_t kr, int64_t n, int *ok) {
  const vd_lin_table *lt = c->lt;
  sbucket_t *bk = x->bk;
  sbucket_t *rb = &bk[kr];
  int32_t d0 = rb->d, m0 = rb->m;
  int64_t sid;
  *ok = 0;
  c->n_mem = 0;
  for (uint32_t i = 0; i < rb->n; i++) VD_CHECK(add_member(c, x->sm[rb->first + i].piece, x->sm[rb->first + i].rep));
  VD_CHECK(cut_target(c, li, &sid));
  if (sid < 0) return VD_OK;
  vd_stage *st = &c->set->stages[sid];
  st->sum_mode = 1;
  VD_CHECK(vd_stage_window(lt, st, c->d));
  if (!st->sum_ok) return VD_OK;
  st->targets[0].part_n = 1;
  st->sum_parts = n;
  st->cut_part = kr;
  note_cut(c, sid, li, a, b, -3);
  /* Replicas: all of them, or d0 alone; a step of one replica moves the
   * window by A. */
  int32_t nd = 1, dstep = 0;
  int64_t A = 0, B = 0;
  if (sum_rep_ok(c, st)) {
    int32_t d1 = d0 + 1 < (int32_t)c->D ? d0 + 1 : d0 - 1;
    int same;
    int64_t lo1;
    VD_CHECK(sum_window_at(c, st, NULL, d1 - d0, &same, &lo1));
    if (same && (lo1 - st->sum_lo) % (d1 - d0) == 0) {
      A = (lo1 - st->sum_lo) / (d1 - d0);
      nd = (int32_t)c->D;
      dstep = 1;
    }
  }
  int32_t dlo = dstep ? 0 : d0;
  /* Microbatches: m0 and every m whose buckets (in every replica covered)
   * are translates; the first one fixes B (the window moves by a common
   * amount per microbatch, checked once as in mb_family).  x->tk holds the
   * translated part of (microbatch q of mset, replica d). */
  uint32_t nms = 0;
  x->mset[nms++] = m0;
  /* The replicas' own buckets at m0. */
  for (int32_t d = dlo; d < dlo + nd; d++) {
    int64_t k = d == d0 ? kr : bucket_translate(c, x->sm, bk, rb, d, m0, m0, x->tmp, a, b);
    if (k < 0) return VD_OK;
    x->tk[d - dlo] = k;
  }
  int windows_checked = 0;
  for (int32_t m = 0; c->mb_ok && m0 >= 0 && m < (int32_t)c->nm; m++) {
    if (m == m0) continue;
    if (VD_GROW(c->tp, c->cap_tp, st->n_vals + 1)) return VD_OOM(c->d);
    if (!stage_translates(c, st, m0, m)) continue;
    int all = 1;
    int64_t *row = x->tk + (size_t)nms * (size_t)nd;
    for (int32_t d = dlo; d < dlo + nd && all; d++) {
      row[d - dlo] = bucket_translate(c, x->sm, bk, rb, d, m0, m, x->tmp, a, b);
      all = row[d - dlo] >= 0;
    }
    if (!all) continue;
    if (!windows_checked) {
      int same;
      int64_t lom;
      VD_CHECK(sum_window_at(c, st, c->tp, 0, &same, &lom));
      if (!same || (lom - st->sum_lo) % (m - m0)) break; /* the slices move inside a window, at every m */
      B = (lom - st->sum_lo) / (m - m0);
      windows_checked = 1;
    }
    x->mset[nms++] = m;
  }
  int64_t w = st->sum_hi - st->sum_lo;
  for (uint32_t q = 0; q < nms; q++)
    for (int32_t d = dlo; d < dlo + nd; d++) {
      sbucket_t *t = &bk[x->tk[(size_t)q * (size_t)nd + (size_t)(d - dlo)]];
      t->covered = 1;
      t->lo = st->sum_lo + (int64_t)(d - d0) * A + (int64_t)(x->mset[q] - m0) * B;
      t->hi = t->lo + w;
    }
  st->n_rep = (uint32_t)nd;
  if (nms > 1) {
    st->n_mb = nms;
    st->mb_list = vd_malloc(nms * sizeof(*st->mb_list));
    if (!st->mb_list) return VD_OOM(c->d);
    memcpy(st->mb_list, x->mset, nms * sizeof(*x->mset));
  }
  *ok = 1;
  return VD_OK;
}

/* Tries slice group [a, b) of lineage li as a sum by part; *done = 1 when it
 * was cut that way, 0 when nothing was left behind (the caller cuts it as
 * one stage). */
static vd_rc cut_sum_group(cctx *c, uint32_t li, size_t a, size_t b, int *done) {
  const vd_lin_table *lt = c->lt;
  vd_stage_set *set = c->set;
  int64_t n = lt->pieces[a].part_n;
  uint32_t D = c->D, nmk = c->nm + 1;
  *done = 0;
  if (n < 2) return VD_OK;
  size_t cnt = 0;
  for (size_t i = a; i < b; i++) {
    if (vd_lin_piece_moves(lt, (uint32_t)i) || lt->pieces[i].mb >= (int32_t)c->nm) return VD_OK;
    cnt += lt->pieces[i].all_rep ? D : 1;
  }
  /* every part needs a member (PARTS otherwise, reported by lineage/) */
  if ((size_t)n > cnt) return VD_OK;
  sum_scratch x = {0};
  vd_rc rc = VD_OK;
  x.sm = vd_malloc(cnt * sizeof(*x.sm));
  x.bk = vd_calloc((size_t)n, sizeof(*x.bk));
  x.tmp = vd_malloc(cnt * sizeof(*x.tmp));
  x.mset = vd_malloc(nmk * sizeof(*x.mset));
  x.win = vd_malloc(2 * (size_t)n * sizeof(*x.win));
  x.order = vd_malloc((size_t)n * sizeof(*x.order));
  x.tk = vd_malloc((size_t)nmk * D * sizeof(*x.tk));
  if (!x.sm || !x.bk || !x.tmp || !x.mset || !x.win || !x.order || !x.tk) {
    sum_scratch_free(&x);
    return VD_OOM(c->d);
  }
  /* Buckets by part index; each part's members must be of one replica and
   * one microbatch (several parts may share a replica and microbatch: the
   * data-parallel EP ranks of one replica), members sorted by (piece,
   * replica). */
  for (int64_t k = 0; k < n; k++) x.bk[k].d = -1;
  int good = 1;
  for (size_t i = a; i < b && good; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? D : (uint32_t)p->replica + 1) && good; r++) {
      if (p->part_k < 0 || p->part_k >= n) {
        good = 0;
        break;
      }
      sbucket_t *t = &x.bk[p->part_k];
      if (t->d >= 0 && (t->d != (int32_t)r || t->m != p->mb)) good = 0;
      t->d = (int32_t)r;
      t->m = p->mb;
      t->n++;
    }
  }
  size_t off = 0;
  for (int64_t k = 0; k < n && good; k++) {
    if (!x.bk[k].n) good = 0;
    x.bk[k].first = (uint32_t)off;
    off += x.bk[k].n;
    x.bk[k].n = 0;
  }
  if (!good) {
    sum_scratch_free(&x);
    return VD_OK;
  }
  for (size_t i = a; i < b; i++) {
    const vd_lin_piece *p = &lt->pieces[i];
    for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? D : (uint32_t)p->replica + 1); r++) {
      sbucket_t *t = &x.bk[p->part_k];
      x.sm[t->first + t->n++] = (smember_t){(uint32_t)i, (int32_t)r};
    }
  }
  /* (pieces come in order, so each bucket is sorted by (piece, replica)) */
  /* Representatives in (replica, microbatch, first piece) order: replica
   * 0's earliest microbatch first, as with one part per bucket. */
  for (int64_t k = 0; k < n; k++)
    x.order[k] = (sorder_t){x.bk[k].d, x.bk[k].m, x.bk[k].first, (uint32_t)k};
  qsort(x.order, (size_t)n, sizeof(*x.order), sorder_cmp);
  size_t s0 = set->n_stages, i0 = set->n_issues;
  c->log_nolin = 1;
  c->n_nolin_log = 0;
  int ok = 1;
  for (int64_t q = 0; q < n && ok && rc == VD_OK; q++) {
    uint32_t k = x.order[q].k;
    if (x.bk[k].covered) continue;
    rc = sum_bucket(c, li, a, b, &x, k, n, &ok);
  }
  if (rc == VD_OK && ok) {
    /* every representative windows the same single value and dimension */
    for (size_t s = s0 + 1; s < set->n_stages && ok; s++)
      ok = set->stages[s].sum_svalue == set->stages[s0].sum_svalue &&
           set->stages[s].sum_dim == set->stages[s0].sum_dim;
    for (int64_t k = 0; k < n; k++) {
      x.win[2 * k] = x.bk[k].lo;
      x.win[2 * k + 1] = x.bk[k].hi;
      ok = ok && x.bk[k].covered;
    }
    qsort(x.win, (size_t)n, 2 * sizeof(*x.win), i64_pair_cmp);
    int64_t at = 0;
    for (int64_t i = 0; i < n && ok; i++) {
      ok = x.win[2 * i] == at && x.win[2 * i + 1] > at;
      at = x.win[2 * i + 1];
    }
    ok = ok && set->n_stages > s0 && at == set->stages[s0].sum_ext;
  }
  c->log_nolin = 0;
  if (rc == VD_OK && !ok) {
    /* roll back: no stage, no issue, no nolin mark of the try survives */
    while (set->n_stages > s0) drop_last(c);
    set->n_issues = i0;
    for (size_t i = 0; i < c->n_nolin_log; i++) c->nolin[c->nolin_log[i]] = 0;
  }
  *done = rc == VD_OK && ok;
  sum_scratch_free(&x);
  return rc;
}

/* Slice groups (first piece per piece) and, with microbatches, the Gp
 * instance of every plan node per microbatch. */
static vd_rc prepare_groups(cctx *c) {
  const vd_lin_table *lt = c->lt;
  c->grp = vd_malloc((lt->n_pieces ? lt->n_pieces : 1) * sizeof(*c->grp));
  c->done = vd_calloc(lt->n_pieces ? lt->n_pieces : 1, 1);
  if (!c->grp || !c->done) return VD_OOM(c->d);
  for (uint32_t li = 0; li < lt->n_lins; li++) {
    const vd_lineage *L = &lt->lins[li];
    int32_t nd = c->sp->tensors[L->stensor].ndim;
    size_t e = L->piece_off + L->n_pieces;
    for (size_t a = L->piece_off; a < e;) {
      size_t b = a + 1;
      const vd_lin_piece *p = &lt->pieces[a];
      while (b < e && lt->pieces[b].part_n == p->part_n && lt->pieces[b].f == p->f &&
             !memcmp(lt->pieces[b].lo, p->lo, (size_t)nd * sizeof(int64_t)) &&
             !memcmp(lt->pieces[b].hi, p->hi, (size_t)nd * sizeof(int64_t)))
        b++;
      for (size_t i = a; i < b; i++) c->grp[i] = (uint32_t)a;
      a = b;
    }
  }
  if (!c->mb_ok) return VD_OK;
  size_t n = c->pp->n_nodes * (size_t)c->nm;
  c->inst = vd_malloc((n ? n : 1) * sizeof(*c->inst));
  if (!c->inst) return VD_OOM(c->d);
  for (size_t i = 0; i < n; i++) c->inst[i] = NONE;
  for (size_t ni = 0; ni < c->gp->n_nodes; ni++) {
    const vd_gnode_t *gn = &c->gp->nodes[ni];
    if (gn->mb < 0 || (uint32_t)gn->mb >= c->nm || gn->replica != 0) continue;
    uint32_t *slot = &c->inst[(size_t)gn->pnode * c->nm + (uint32_t)gn->mb];
    /* two instances of one plan node in one microbatch: not a translation */
    *slot = *slot == NONE ? (uint32_t)ni : NONE - 1;
  }
  for (size_t i = 0; i < n; i++)
    if (c->inst[i] == NONE - 1) c->inst[i] = NONE;
  return VD_OK;
}

/* The final lineage li: every slice group not covered yet, cut into c->set. */
static vd_rc cut_lineage(cctx *c, uint32_t li) {
  const vd_lin_table *lt = c->lt;
  const vd_lineage *L = &lt->lins[li];
  int32_t nd = c->sp->tensors[L->stensor].ndim;
  size_t e = L->piece_off + L->n_pieces;
  for (size_t a = L->piece_off; a < e;) {
    size_t b = a + 1;
    const vd_lin_piece *p = &lt->pieces[a];
    while (b < e && lt->pieces[b].part_n == p->part_n && lt->pieces[b].f == p->f && !memcmp(lt->pieces[b].lo, p->lo, (size_t)nd * sizeof(int64_t)) &&
           !memcmp(lt->pieces[b].hi, p->hi, (size_t)nd * sizeof(int64_t)))
      b++;
    if (!c->done[a]) {
      size_t s0 = c->set->n_stages;
      int sum = 0;
      c->done[a] = 1;
      VD_CHECK(cut_sum_group(c, li, a, b, &sum));
      if (!sum) {
        VD_CHECK(cut_group(c, li, a, b));
        VD_CHECK(mb_family(c, a, b, s0));
      }
    }
    a = b;
  }
  return VD_OK;
}

/* Per-thread copy of the context: shares the read-only tables and `done`
 * (whose marks stay inside one lineage: a group covers only groups of its
 * own lineage), owns its cones, scratch and "no lineage" marks. */
static vd_rc ctx_fork(const cctx *c, cctx *t) {
  *t = *c;
  t->pc = t->sc = (cone_t){0};
  t->stack = NULL;
  t->n_stack = t->cap_stack = 0;
  t->mp = NULL;
  t->mr = NULL;
  t->n_mem = t->cap_mem = t->cap_mr = 0;
  t->tp = NULL;
  t->cap_tp = 0;
  t->nolin_log = NULL;
  t->n_nolin_log = t->cap_nolin_log = 0;
  t->iss_val = NULL;
  t->cap_iss_val = 0;
  t->set = NULL;
  t->cap_stages = 0;
  t->nolin = vd_calloc(c->gp->n_values ? c->gp->n_values : 1, 1);
  return t->nolin ? VD_OK : VD_ERR(c->d, VD_ENOMEM, NULL, "stages", "cut", "out of memory");
}

static void ctx_unfork(cctx *t) {
  vd_free(t->stack);
  vd_free(t->mp);
  vd_free(t->mr);
  vd_free(t->tp);
  vd_free(t->nolin_log);
  vd_free(t->iss_val);
  vd_free(t->nolin);
  cone_free(&t->pc);
  cone_free(&t->sc);
}

/* One lineage's stages and issues, cut by some thread. */
typedef struct {
  vd_stage_set set;
  uint32_t *iss_val;
  vd_rc rc;
  vd_diag d;
} lcut_t;

/* Appends a lineage's stages (renumbered) and issues to the set, keeping the
 * first "no lineage" issue per value, and hands the stages to the hook. */
static vd_rc merge_lineage(cctx *c, lcut_t *r, uint8_t *reported) {
  vd_stage_set *set = c->set;
  for (size_t i = 0; i < r->set.n_issues; i++) {
    uint32_t v = r->iss_val ? r->iss_val[i] : NONE;
    if (v != NONE) {
      if (reported[v]) continue;
      reported[v] = 1;
    }
    if (vd_issue_push(&set->issues, &set->n_issues, &set->cap_issues, 0, &set->n_issues_dropped, &r->set.issues[i]))
      return VD_OOM(c->d);
  }
  size_t s0 = set->n_stages;
  if (r->set.n_stages && VD_GROW(set->stages, c->cap_stages, set->n_stages + r->set.n_stages)) return VD_OOM(c->d);
  for (size_t i = 0; i < r->set.n_stages; i++) {
    set->stages[set->n_stages] = r->set.stages[i];
    set->stages[set->n_stages].id = (uint32_t)set->n_stages;
    set->n_stages++;
  }
  r->set.n_stages = 0; /* the stages moved */
  for (size_t k = s0; c->hook && k < set->n_stages; k++) VD_CHECK(c->hook(c->hook_ctx, set, k, c->d));
  return VD_OK;
}

/* Cuts every final lineage.  Lineages are independent (a stage's members,
 * the groups it stands for and its cone bookkeeping are its lineage's), so
 * windows of them are cut in parallel (OpenMP, the caller's team), each
 * into a set of its own, and merged in lineage order: stage ids, issues
 * and the hook's order are those of a serial cut at any thread count. */
#define CUT_WINDOW 64u
static vd_rc cut_all(cctx *c) {
  const vd_lin_table *lt = c->lt;
  vd_rc rc = VD_OK;
  uint32_t *fin = vd_malloc((lt->n_lins ? lt->n_lins : 1) * sizeof(*fin));
  uint8_t *reported = vd_calloc(c->gp->n_values ? c->gp->n_values : 1, 1);
  lcut_t *res = vd_calloc(CUT_WINDOW, sizeof(*res));
  int nt = omp_get_max_threads();
  if (nt < 1) nt = 1;
  cctx *tc = vd_calloc((size_t)nt, sizeof(*tc));
  int forked = 0;
  if (!fin || !reported || !res || !tc) {
    rc = VD_OOM(c->d);
    goto done;
  }
  size_t nf = 0;
  for (uint32_t li = 0; li < lt->n_lins; li++)
    if (!lt->lins[li].initial) fin[nf++] = li;
  for (int i = 0; i < nt && rc == VD_OK; i++) {
    rc = ctx_fork(c, &tc[i]);
    forked = i + 1;
  }
  for (size_t w0 = 0; w0 < nf && rc == VD_OK; w0 += CUT_WINDOW) {
    size_t nw = nf - w0 < CUT_WINDOW ? nf - w0 : CUT_WINDOW;
    /* a stop request (common/ctl.h) ends the cut between windows */
    if (vd_ctl_stopped()) {
      rc = VD_ERR(c->d, VD_ECANCELED, NULL, NULL, NULL, "stage cutting interrupted");
      break;
    }
    vd_ctl_add(VD_CTL_CUT_LINEAGES, nw);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (size_t j = 0; j < nw; j++) {
      cctx *t = &tc[omp_get_thread_num()];
      lcut_t *r = &res[j];
      memset(r, 0, sizeof(*r));
      vd_diag_clear(&r->d);
      t->set = &r->set;
      t->cap_stages = 0;
      t->d = &r->d;
      r->rc = cut_lineage(t, fin[w0 + j]);
      r->iss_val = t->iss_val; /* this lineage's tags (the thread starts a new list) */
      t->iss_val = NULL;
      t->cap_iss_val = 0;
    }
    for (size_t j = 0; j < nw; j++) {
      lcut_t *r = &res[j];
      if (rc == VD_OK && r->rc != VD_OK) {
        rc = r->rc;
        if (c->d) *c->d = r->d;
      }
      if (rc == VD_OK) rc = merge_lineage(c, r, reported);
      vd_stage_set_free(&r->set);
      vd_free(r->iss_val);
      r->iss_val = NULL;
    }
  }
done:
  for (int i = 0; i < forked; i++) ctx_unfork(&tc[i]);
  vd_free(tc);
  vd_free(res);
  vd_free(reported);
  vd_free(fin);
  return rc;
}

/* ---- public --------------------------------------------------------------- */

static vd_rc prepare(cctx *c) {
  const vd_graph_t *gs = c->gs, *gp = c->gp;
  c->sop = vd_malloc((c->sp->n_nodes ? c->sp->n_nodes : 1) * sizeof(int));
  c->pop = vd_malloc((c->pp->n_nodes ? c->pp->n_nodes : 1) * sizeof(int));
  c->spos = vd_malloc((gs->n_nodes ? gs->n_nodes : 1) * sizeof(uint32_t));
  c->ppos = vd_malloc((gp->n_nodes ? gp->n_nodes : 1) * sizeof(uint32_t));
  c->nolin = vd_calloc(gp->n_values ? gp->n_values : 1, 1);
  if (!c->sop || !c->pop || !c->spos || !c->ppos || !c->nolin) return VD_OOM(c->d);
  for (size_t i = 0; i < c->sp->n_nodes; i++) c->sop[i] = vd_op_lookup(nop(c->sp, (uint32_t)i));
  for (size_t i = 0; i < c->pp->n_nodes; i++) c->pop[i] = vd_op_lookup(nop(c->pp, (uint32_t)i));
  for (size_t i = 0; i < gs->n_nodes; i++) c->spos[gs->topo[i]] = (uint32_t)i;
  for (size_t i = 0; i < gp->n_nodes; i++) c->ppos[gp->topo[i]] = (uint32_t)i;
  return VD_OK;
}

static void ctx_init(cctx *c, const vd_lin_table *lt, vd_stage_set *set, vd_diag *d) {
  memset(c, 0, sizeof(*c));
  c->lt = lt;
  c->set = set;
  c->d = d;
  c->gs = lt->gs;
  c->gp = lt->gp;
  c->sp = c->gs->plan;
  c->pp = c->gp->plan;
  c->D = c->pp->world.replicas > 0 ? (uint32_t)c->pp->world.replicas : 1;
}

/* The shared tables, then what each forked context owns too. */
static void ctx_free(cctx *c) {
  vd_free(c->sop);
  vd_free(c->pop);
  vd_free(c->spos);
  vd_free(c->ppos);
  vd_free(c->inst);
  vd_free(c->grp);
  vd_free(c->done);
  ctx_unfork(c);
}

vd_rc vd_stage_cut_hook(const vd_lin_table *lt, vd_stage_set *set, vd_stage_hook hook, void *hook_ctx, vd_diag *d) {
  memset(set, 0, sizeof(*set));
  if (VD_NEVER(!lt || !lt->gs || !lt->gp || !lt->gp->topo || !lt->gs->topo))
    return VD_ERR(d, VD_EINTERNAL, NULL, "stages", "lineage", "expected a built lineage table");
  cctx c;
  ctx_init(&c, lt, set, d);
  c.hook = hook;
  c.hook_ctx = hook_ctx;
  vd_rc rc = prepare(&c);
  if (!rc) rc = check_shapes(&c, c.gs, c.sop, 1);
  if (!rc) rc = check_shapes(&c, c.gp, c.pop, 0);
  if (!rc) rc = check_schedule(&c);
  if (!rc) rc = check_alignment(&c);
  if (!rc) {
    /* Microbatch classes are formed only when every per-microbatch segment
     * runs once per microbatch (or its variants do together); with an
     * ALIGNMENT issue every stage is cut. */
    c.nm = c.pp->world.nm > 1 ? (uint32_t)c.pp->world.nm : 1;
    c.mb_ok = c.nm > 1;
    for (size_t i = 0; i < set->n_issues; i++)
      if (set->issues[i].kind == VD_SISSUE_ALIGNMENT) c.mb_ok = 0;
    rc = prepare_groups(&c);
  }
  if (!rc) rc = cut_all(&c);
  ctx_free(&c);
  if (rc) {
    vd_stage_set_free(set);
    return rc;
  }
  if (set->n_issues > 1) qsort(set->issues, set->n_issues, sizeof(*set->issues), issue_cmp);
  return VD_OK;
}

vd_rc vd_stage_cut(const vd_lin_table *lt, vd_stage_set *set, vd_diag *d) {
  return vd_stage_cut_hook(lt, set, NULL, NULL, d);
}

void vd_stage_compact(vd_stage *st) {
  if (st->compact || st->n_targets != 1) return;
  vd_stage_target *tg = &st->targets[0];
  /* keep the target's (piece, value) pairs at the front of idx */
  memmove(st->idx, st->idx + tg->piece_off, (size_t)tg->n_pieces * 2 * sizeof(*st->idx));
  uint32_t *ni = vd_realloc_array(st->idx, (size_t)tg->n_pieces * 2 + 1, sizeof(*ni));
  if (ni) st->idx = ni;
  tg->piece_off = 0;
  st->n_idx = tg->n_pieces * 2;
  vd_free(st->vals);
  vd_free(st->nodes);
  vd_free(st->ovr);
  st->vals = NULL;
  st->nodes = NULL;
  st->ovr = NULL;
  st->n_vals = st->n_nodes = st->n_ovr = 0;
  st->compact = 1;
}

vd_rc vd_stage_recut(const vd_lin_table *lt, vd_stage_set *set, size_t i, vd_diag *d) {
  vd_stage *st = &set->stages[i];
  if (!st->compact) return VD_OK;
  vd_stage_set tmp;
  memset(&tmp, 0, sizeof(tmp));
  cctx c;
  ctx_init(&c, lt, &tmp, d);
  int64_t sid = -1;
  vd_rc rc = prepare(&c);
  if (!rc && st->cut_mode == -3) { /* one part of a sum by part: its pieces in every replica they name */
    for (size_t k = st->cut_a; k < st->cut_b && !rc; k++) {
      const vd_lin_piece *p = &lt->pieces[k];
      if (p->part_k != st->cut_part) continue;
      for (uint32_t r = p->all_rep ? 0 : (uint32_t)p->replica; r < (p->all_rep ? c.D : (uint32_t)p->replica + 1) && !rc;
           r++)
        rc = add_member(&c, (uint32_t)k, (int32_t)r);
    }
  } else if (!rc) {
    rc = group_members(&c, st->cut_a, st->cut_b, st->cut_mode);
  }
  if (!rc) rc = cut_target(&c, st->cut_lin, &sid);
  if (!rc && sid != 0)
    rc = VD_ERR(d, VD_EINTERNAL, NULL, "stage", "recut", "stage %u could not be cut again", st->id);
  if (!rc) {
    tmp.stages[0].sum_mode = st->sum_mode;
    rc = vd_stage_window(lt, &tmp.stages[0], d);
  }
  if (!rc && st->sum_mode && !tmp.stages[0].sum_ok)
    rc = VD_ERR(d, VD_EINTERNAL, NULL, "stage", "recut", "stage %u: the sum by part did not window again", st->id);
  if (!rc) {
    vd_stage *n = &tmp.stages[0];
    if (st->sum_mode) n->targets[0].part_n = 1;
    n->sum_parts = st->sum_parts;
    n->cut_part = st->cut_part;
    n->id = st->id;
    n->n_rep = st->n_rep;
    n->n_mb = st->n_mb;
    n->mb_list = st->mb_list;
    st->mb_list = NULL;
    n->canon_hash = st->canon_hash;
    n->canon_class = st->canon_class;
    n->cut_lin = st->cut_lin;
    n->cut_a = st->cut_a;
    n->cut_b = st->cut_b;
    n->cut_mode = st->cut_mode;
    vd_stage_free(st);
    *st = *n;
    memset(n, 0, sizeof(*n));
  }
  ctx_free(&c);
  vd_stage_set_free(&tmp);
  return rc;
}
