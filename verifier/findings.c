/*
 * verifier/findings.c - failures grouped by root cause (findings.h).
 *
 * Grouping is a union-find over the run's structural issues and failing
 * stages, joined by string keys (sorted, equal neighbours united):
 *   - two failing stages with the same diagnosis and the same diverging
 *     node up to renaming: same symmetry class and same stage-local node
 *     (stages/canon.c: a class is the same stage up to rank, microbatch and
 *     layer renaming), or the same side, operator and source name once
 *     numeric path components ("layers.1.") are taken out (a backward
 *     operator counts as its forward: one changed operator, both passes);
 *   - two failing stages with the same diagnosis and the same factor (or
 *     none) at nodes of one operator whose names end alike
 *     ("*.grad.average", "*.rescale");
 *   - two failing stages that the solver proved SCALE with the same factor
 *     on a scaled hypothesis or at a reducer (solver/stage_solve.c
 *     unscaled_check, reducer_check): every gradient summed where a mean
 *     belongs, whichever operator made each one;
 *   - two structural issues of the same diagnosis and kind at the same node
 *     or the same tensor, up to the same renaming, or (without a node) on
 *     one rank in one module (first three name components);
 *   - a failing stage whose diverging node is, up to renaming, the node of
 *     a structural issue follows from that issue (SCHEDULE then WRONG_VALUE
 *     at the reducer that ran early): one finding, the issue's;
 *   - every DATAFLOW issue joins the first BATCH issue: when the plans read
 *     different global batches, the missing values follow from it.
 * Nothing here changes a verdict: findings only regroup what the run found.
 * The first diverging node of a failing stage, which the keys use, is
 * found in findings_locate.c; the hints and one-line texts of a finding
 * are in findings_text.c.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "findings_int.h"

/* ---- grouping ---------------------------------------------------------- */

/* Name with its numeric path components ("layers.1.attn" -> "layers.*.attn")
 * taken out: the renaming of layers (and experts) that symmetry allows. */
static void norm_name(char *out, size_t n, const char *s) {
  size_t o = 0;
  for (size_t i = 0; s[i] && o + 2 < n;) {
    int start = i == 0 || s[i - 1] == '.' || s[i - 1] == '_';
    size_t j = i;
    while (s[j] >= '0' && s[j] <= '9') j++;
    if (start && j > i && (s[j] == '\0' || s[j] == '.' || s[j] == '_')) {
      out[o++] = '*';
      i = j;
    } else {
      out[o++] = s[i++];
    }
  }
  out[o] = '\0';
}

/* Side, operator and renamed source name of a plan node.  A backward
 * operator is keyed as its forward ("rope_backward" as "rope"): a changed
 * operator of the model changes both passes, and that is one cause. */
static void node_sig(char *out, size_t n, const vd_plan_t *p, int64_t pnode, int side) {
  char nm[200], op[96];
  const vd_node_t *pn = &p->nodes[pnode];
  norm_name(nm, sizeof(nm), vd_plan_s(p, pn->name));
  if (!nm[0]) snprintf(nm, sizeof(nm), "#%lld", (long long)pn->id); /* unnamed: only itself */
  snprintf(op, sizeof(op), "%s", vd_node_op(p, pn));
  size_t l = strlen(op), b = strlen("_backward");
  if (l > b && !strcmp(op + l - b, "_backward")) op[l - b] = '\0';
  snprintf(out, n, "%d|%s|%s", side, op, nm);
}

/* The first k dot-separated components of s (renamed): the module. */
static void prefix_comps(char *out, size_t n, const char *s, int k) {
  norm_name(out, n, s);
  for (char *c = out; *c; c++)
    if (*c == '.' && --k == 0) {
      *c = '\0';
      break;
    }
}

/* The last dot-separated component of s, or NULL when s has only one. */
static const char *last_comp(const char *s) {
  const char *d = strrchr(s, '.');
  return d ? d + 1 : NULL;
}

typedef struct {
  char *key;
  size_t item;
} kv;

typedef struct {
  kv *v;
  size_t n, cap;
  int oom;
} kvs;

static void add_key(kvs *k, size_t item, const char *fmt_key) {
  if (k->oom) return;
  if (VD_GROW(k->v, k->cap, k->n + 1)) {
    k->oom = 1;
    return;
  }
  char *s = vd_strdup(fmt_key);
  if (!s) {
    k->oom = 1;
    return;
  }
  k->v[k->n++] = (kv){s, item};
}

static int kv_cmp(const void *a, const void *b) {
  const kv *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->item > y->item) - (x->item < y->item);
}

static size_t uf_find(size_t *p, size_t x) {
  while (p[x] != x) x = p[x] = p[p[x]];
  return x;
}
static void uf_union(size_t *p, size_t a, size_t b) {
  a = uf_find(p, a);
  b = uf_find(p, b);
  if (a == b) return;
  /* the smaller index stays the root: issues before stages, lower first */
  if (a < b) p[b] = a;
  else p[a] = b;
}

/* Topological positions: per graph node, and per plan node (its earliest
 * instance, collective participants included). */
static vd_rc topo_positions(const vd_graph_t *g, uint32_t **gpos, uint32_t **ppos) {
  *gpos = vd_malloc((g->n_nodes ? g->n_nodes : 1) * sizeof(uint32_t));
  *ppos = vd_malloc((g->plan->n_nodes ? g->plan->n_nodes : 1) * sizeof(uint32_t));
  if (!*gpos || !*ppos) return VD_ENOMEM;
  for (size_t i = 0; i < g->plan->n_nodes; i++) (*ppos)[i] = UINT32_MAX;
  for (size_t k = 0; k < g->n_nodes; k++) {
    uint32_t gi = g->topo ? g->topo[k] : (uint32_t)k;
    const vd_gnode_t *gn = &g->nodes[gi];
    (*gpos)[gi] = (uint32_t)k;
    if ((*ppos)[gn->pnode] == UINT32_MAX) (*ppos)[gn->pnode] = (uint32_t)k;
    for (uint32_t j = 0; j < gn->n_part; j++) {
      uint32_t pn = g->idx[gn->part_off + 2 * j];
      if (pn < g->plan->n_nodes && (*ppos)[pn] == UINT32_MAX) (*ppos)[pn] = (uint32_t)k;
    }
  }
  return VD_OK;
}

typedef struct {
  int64_t *r; size_t nr, cr;
  int32_t *m; size_t nm, cm;
  int32_t *l; size_t nl, cl;
  int oom;
} foot;

static void foot_rank(foot *f, int64_t x) {
  if (x < 0 || f->oom) return;
  if (VD_GROW(f->r, f->cr, f->nr + 1)) f->oom = 1;
  else f->r[f->nr++] = x;
}
static void foot_i32(foot *f, int32_t **v, size_t *n, size_t *c, int32_t x) {
  if (x < 0 || f->oom) return;
  if (vd_grow((void **)v, c, *n + 1, sizeof(**v))) f->oom = 1;
  else (*v)[(*n)++] = x;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}
/* Sorts v (n elements of size sz, in cmp's order) and keeps one of each
 * value at its front; returns how many it kept. */
static size_t sort_uniq(void *v, size_t n, size_t sz, int (*cmp)(const void *, const void *)) {
  if (!n) return 0;
  qsort(v, n, sz, cmp);
  char *b = v;
  size_t k = 1;
  for (size_t i = 1; i < n; i++)
    if (cmp(b + i * sz, b + (k - 1) * sz)) memcpy(b + k++ * sz, b + i * sz, sz);
  return k;
}

/* Ranks of a stage-local parallel value: every replica the stage stands for. */
static void foot_value(foot *f, const vd_run *r, const vd_stage *st, uint32_t lv) {
  const vd_stage_value *sv = &st->vals[lv];
  if (!sv->side) return;
  const vd_value_t *gv = &r->pg.values[sv->value];
  int32_t rank = r->pp.tensors[gv->tensor].rank;
  if (st->n_rep > 1)
    for (uint32_t k = 0; k < st->n_rep; k++) foot_rank(f, vd_graph_rank(&r->pg, rank, (int32_t)k));
  else
    foot_rank(f, vd_graph_rank(&r->pg, rank, sv->replica));
  foot_i32(f, &f->m, &f->nm, &f->cm, gv->mb);
  /* a stage standing for other microbatches fails in each of them */
  for (uint32_t k = 1; gv->mb >= 0 && st->mb_list && k < st->n_mb; k++) foot_i32(f, &f->m, &f->nm, &f->cm, st->mb_list[k]);
}

static void foot_node(foot *f, const vd_run *r, const vd_stage *st, int32_t ln, int ranks) {
  const vd_stage_node *sn = &st->nodes[ln];
  if (!sn->side) return;
  const vd_gnode_t *gn = &r->pg.nodes[sn->gnode];
  const vd_node_t *pn = &r->pp.nodes[gn->pnode];
  foot_i32(f, &f->l, &f->nl, &f->cl, pn->layer);
  if (!ranks) return;
  if (st->n_rep > 1)
    for (uint32_t k = 0; k < st->n_rep; k++) foot_rank(f, vd_graph_rank(&r->pg, pn->rank, (int32_t)k));
  else
    foot_rank(f, vd_graph_rank(&r->pg, pn->rank, sn->replica));
  foot_i32(f, &f->m, &f->nm, &f->cm, gn->mb);
  for (uint32_t k = 1; gn->mb >= 0 && st->mb_list && k < st->n_mb; k++) foot_i32(f, &f->m, &f->nm, &f->cm, st->mb_list[k]);
}

void vd_findings_free(vd_findings *fs) {
  if (!fs) return;
  for (size_t i = 0; i < fs->n; i++) {
    vd_free(fs->v[i].stages);
    vd_free(fs->v[i].issues);
    vd_free(fs->v[i].ranks);
    vd_free(fs->v[i].mbs);
    vd_free(fs->v[i].layers);
  }
  vd_free(fs->v);
  fs->v = NULL;
  fs->n = 0;
}

static int cmp_finding(const void *a, const void *b) {
  const vd_finding *x = a, *y = b;
  if (x->topo != y->topo) return x->topo < y->topo ? -1 : 1;
  if (x->structural != y->structural) return y->structural - x->structural;
  return (x->rep > y->rep) - (x->rep < y->rep);
}

/* Plan of an issue's node or tensor, or NULL. */
static const vd_plan_t *issue_plan(const vd_run *r, const vd_issue *is) { return is->single ? &r->sp : &r->pp; }

/* The grouping of one run's issues and failing stages into findings:
 * items 0..ni are the issues, ni..ni+ns the stages; parent is their
 * union-find, dn the stages' diverging nodes, *pos the nodes' topological
 * positions in the four graphs, keys the grouping keys. */
struct grouping {
  const vd_run *r;
  size_t ni, ns, n;
  size_t *parent;
  int32_t *dn;
  int32_t *og; /* failing stage -> vd_findings_i_factor_origin (graph node), -1 none */
  uint32_t *sgpos, *sppos, *pgpos, *pppos;
  kvs keys;
};

/* Issues: by node and by tensor; BATCH absorbs DATAFLOW. */
static void key_issues(struct grouping *g) {
  const vd_run *r = g->r;
  char key[512], sig[400];
  size_t batch = SIZE_MAX;
  for (size_t i = 0; i < g->ni; i++)
    if (r->issues[i].diagnosis == VD_DX_BATCH && batch == SIZE_MAX) batch = i;
  for (size_t i = 0; i < g->ni; i++) {
    const vd_issue *is = &r->issues[i];
    const vd_plan_t *p = issue_plan(r, is);
    if (batch != SIZE_MAX && is->diagnosis == VD_DX_DATAFLOW) uf_union(g->parent, batch, i);
    if (is->pnode >= 0 && (size_t)is->pnode < p->n_nodes) {
      node_sig(sig, sizeof(sig), p, is->pnode, !is->single);
      snprintf(key, sizeof(key), "I|%d|%s|%s|%s", (int)is->diagnosis, is->source, is->kind_name, sig);
      add_key(&g->keys, i, key);
      snprintf(key, sizeof(key), "C|%s", sig);
      add_key(&g->keys, i, key);
    }
    if (is->tensor >= 0 && (size_t)is->tensor < p->n_tensors) {
      char nm[200];
      norm_name(nm, sizeof(nm), vd_plan_s(p, p->tensors[is->tensor].name));
      snprintf(key, sizeof(key), "T|%d|%s|%s|%d|%s", (int)is->diagnosis, is->source, is->kind_name, !is->single, nm);
      add_key(&g->keys, i, key);
      if (is->pnode < 0) {
        /* No node: the same kind of problem in one module on one rank
         * (two swapped gradients are two such entries, one cause). */
        prefix_comps(nm, sizeof(nm), vd_plan_s(p, p->tensors[is->tensor].name), 3);
        snprintf(key, sizeof(key), "M|%d|%s|%s|%d|%lld|%s", (int)is->diagnosis, is->source, is->kind_name, !is->single,
                 (long long)is->rank, nm);
        add_key(&g->keys, i, key);
      }
    }
  }
}

/* Failing stages: diverging node of class representatives (members use
 * the same stage-local node). */
static void key_stages(struct grouping *g) {
  const vd_run *r = g->r;
  char key[512], sig[400], why[256];
  int32_t *dn = g->dn;
  for (size_t i = 0; i < g->ns; i++) g->og[i] = -2; /* not yet computed */
  for (size_t i = 0; i < g->ns; i++) {
    dn[i] = -1;
    const vd_stage *st = &r->set.stages[i];
    const vd_stage_verdict *v = &r->verdicts[i];
    if (v->verdict != VD_SMT_NOT_EQUIVALENT) continue;
    size_t c = st->canon_class >= 0 ? (size_t)st->canon_class : i;
    if (c < i && r->verdicts[c].verdict == VD_SMT_NOT_EQUIVALENT && dn[c] >= 0 && (uint32_t)dn[c] < st->n_nodes)
      dn[i] = dn[c];
    else
      dn[i] = vd_rep_diverging(r, i, why, sizeof(why));
    snprintf(key, sizeof(key), "S|%d|%zu|%d", (int)v->diagnosis, c, dn[i]);
    add_key(&g->keys, g->ni + i, key);
    /* SCALE proven by the solver on a hypothesis or at a reducer
     * (solver/stage_solve.c unscaled_check, reducer_check): one factor
     * throughout is one cause (every gradient summed over its copies where
     * their mean belongs), whichever operator each stage's value came from */
    if (v->diagnosis == VD_DX_SCALE && (v->scaled_leaf || v->scaled_node)) {
      snprintf(key, sizeof(key), "F|%s", v->factor);
      add_key(&g->keys, g->ni + i, key);
    }
    /* a SCALE on a scaled hypothesis is keyed by the node that made it,
     * which its finding names (describe_by_stage) */
    int32_t sp = vd_findings_i_scaled_producer(r, c);
    /* a SCALE whose factor one scaling applied, as it is or raised to a
     * power (Adam's second moment reads g * g): one cause with every other
     * failure of that origin */
    double s;
    g->og[i] = c < i && g->og[c] >= -1 ? g->og[c] : vd_findings_i_factor_origin(r, c, sp, g->pgpos, &s);
    if (g->og[i] >= 0) {
      snprintf(key, sizeof(key), "O|%d", g->og[i]);
      add_key(&g->keys, g->ni + i, key);
    }
    if (sp >= 0 || (dn[i] >= 0 && st->nodes[dn[i]].side)) {
      uint32_t pn = sp >= 0 ? r->pg.nodes[sp].pnode : r->pg.nodes[st->nodes[dn[i]].gnode].pnode;
      node_sig(sig, sizeof(sig), &r->pp, pn, 1);
      snprintf(key, sizeof(key), "N|%s", sig);
      add_key(&g->keys, g->ni + i, key);
      /* The same kind of node under many names with the same diagnosis and
       * factor (every DP reducer of a rank averaging, every accumulator of a
       * layer rescaled): one cause. */
      const char *lc = last_comp(vd_plan_s(&r->pp, r->pp.nodes[pn].name));
      if (lc) {
        snprintf(key, sizeof(key), "R|%d|%s|%s|%s", (int)v->diagnosis, v->factor, vd_node_op(&r->pp, &r->pp.nodes[pn]), lc);
        add_key(&g->keys, g->ni + i, key);
      }
      snprintf(key, sizeof(key), "C|%s", sig);
      add_key(&g->keys, g->ni + i, key);
    }
  }
}

/* Items sharing a key are one group. */
static void join_keys(struct grouping *g) {
  kvs *keys = &g->keys;
  if (keys->n > 1) qsort(keys->v, keys->n, sizeof(*keys->v), kv_cmp); /* keys.v is NULL when empty */
  for (size_t k = 1; k < keys->n; k++)
    if (!strcmp(keys->v[k].key, keys->v[k - 1].key)) {
      /* C| keys join a stage to an issue only (two stages need N| or S|). */
      if (keys->v[k].key[0] == 'C' && keys->v[k - 1].item >= g->ni) continue;
      uf_union(g->parent, keys->v[k - 1].item, keys->v[k].item);
    }
}

/* Findings, one per root (roots are each group's lowest item), with their
 * issues and stages (n_ranks / n_mbs serve as their capacities here). */
static vd_rc gather_findings(const struct grouping *g, size_t *root_of, vd_findings *out) {
  const vd_run *r = g->r;
  size_t ni = g->ni, cap_f = 0;
  for (size_t i = 0; i < g->n; i++) root_of[i] = SIZE_MAX;
  for (size_t i = 0; i < g->n; i++) {
    if (i >= ni && r->verdicts[i - ni].verdict != VD_SMT_NOT_EQUIVALENT) continue;
    size_t root = uf_find(g->parent, i);
    if (root_of[root] == SIZE_MAX) {
      if (VD_GROW(out->v, cap_f, out->n + 1)) return VD_ENOMEM;
      memset(&out->v[out->n], 0, sizeof(out->v[0]));
      root_of[root] = out->n++;
    }
    vd_finding *f = &out->v[root_of[root]];
    if (i < ni) {
      if (VD_GROW(f->issues, f->n_ranks, f->n_issues + 1)) return VD_ENOMEM;
      f->issues[f->n_issues++] = i;
    } else {
      if (VD_GROW(f->stages, f->n_mbs, f->n_stages + 1)) return VD_ENOMEM;
      f->stages[f->n_stages++] = i - ni;
    }
  }
  return VD_OK;
}

/* A structural finding: its representative issue is a BATCH one when there
 * is one, else the earliest by node position, else the first listed. */
static void describe_by_issue(const struct grouping *g, vd_finding *f, foot *ft) {
  const vd_run *r = g->r;
  size_t best = f->issues[0];
  uint64_t bpos = UINT64_MAX;
  for (size_t j = 0; j < f->n_issues; j++) {
    const vd_issue *is = &r->issues[f->issues[j]];
    uint64_t pos = UINT64_MAX - 1;
    if (is->pnode >= 0)
      pos = is->single ? g->sppos[is->pnode] : (uint64_t)1 << 32 | g->pppos[is->pnode];
    if (is->diagnosis == VD_DX_BATCH) pos = 0;
    if (pos < bpos) {
      bpos = pos;
      best = f->issues[j];
    }
  }
  const vd_issue *is = &r->issues[best];
  f->rep = best;
  f->diagnosis = is->diagnosis;
  f->topo = bpos;
  f->pnode = is->pnode;
  f->side = !is->single;
  f->node_rank = is->rank;
  f->node_mb = is->mb;
  vd_text_fmt(f->why, sizeof(f->why), "%s %s", VD_SHOW(is->source), VD_SHOW(is->kind_name));
  for (size_t j = 0; j < f->n_issues; j++) {
    const vd_issue *js = &r->issues[f->issues[j]];
    foot_rank(ft, js->rank);
    foot_i32(ft, &ft->m, &ft->nm, &ft->cm, (int32_t)js->mb);
    if (!js->single && js->pnode >= 0) foot_i32(ft, &ft->l, &ft->nl, &ft->cl, r->pp.nodes[js->pnode].layer);
  }
}

/* A finding of failing stages: its representative stage is, among those
 * with their own counterexample, the one whose diverging node comes first. */
static void describe_by_stage(const struct grouping *g, vd_finding *f) {
  const vd_run *r = g->r;
  size_t rep = f->stages[0];
  uint64_t rpos = UINT64_MAX;
  int rcex = 0;
  for (size_t j = 0; j < f->n_stages; j++) {
    size_t i = f->stages[j];
    int cex = r->verdicts[i].n_elems > 0;
    uint64_t pos = UINT64_MAX - 1;
    if (g->dn[i] >= 0) {
      const vd_stage_node *sn = &r->set.stages[i].nodes[g->dn[i]];
      pos = sn->side ? (uint64_t)1 << 32 | g->pgpos[sn->gnode] : g->sgpos[sn->gnode];
    }
    if ((cex && !rcex) || (cex == rcex && pos < rpos)) {
      rep = i;
      rpos = pos;
      rcex = cex;
    }
  }
  f->rep = rep;
  f->diagnosis = r->verdicts[rep].diagnosis;
  f->local_node = vd_rep_diverging(r, rep, f->why, sizeof(f->why));
  if (f->diagnosis == VD_DX_WRONG_VALUE && vd_findings_i_reads_unreduced(r, rep, f->local_node))
    f->diagnosis = VD_DX_MISSING_REDUCTION;
  /* the values show more than the generic class (stage_solve_cex.c locate):
   * the node's copies reduced repair the stage, or it rearranges a value */
  const vd_stage_verdict *rv = &r->verdicts[rep];
  int32_t elsewhere = -1;
  if (f->diagnosis == VD_DX_WRONG_VALUE && f->local_node >= 0 && f->local_node == rv->loc_node) {
    if (rv->loc_kind == VD_LOC_REDUCE) f->diagnosis = VD_DX_MISSING_REDUCTION;
    else if (rv->loc_kind == VD_LOC_PERMUTED) f->diagnosis = VD_DX_PERMUTED_SLICES;
  } else if (f->diagnosis == VD_DX_WRONG_VALUE && f->local_node >= 0) {
    ptrdiff_t other = vd_findings_i_reduce_elsewhere(r, rep, &elsewhere);
    if (other >= 0 && elsewhere == f->local_node && r->verdicts[other].loc_kind == VD_LOC_REDUCE)
      f->diagnosis = VD_DX_MISSING_REDUCTION;
  }
  f->topo = UINT64_MAX - 1;
  if (f->local_node >= 0) {
    const vd_stage_node *sn = &r->set.stages[rep].nodes[f->local_node];
    const vd_graph_t *gr = sn->side ? &r->pg : &r->sg;
    f->side = sn->side;
    f->pnode = gr->nodes[sn->gnode].pnode;
    f->node_rank = sn->side ? vd_graph_rank(gr, gr->plan->nodes[f->pnode].rank, sn->replica) : -1;
    f->node_mb = gr->nodes[sn->gnode].mb;
    f->topo = sn->side ? (uint64_t)1 << 32 | g->pgpos[sn->gnode] : g->sgpos[sn->gnode];
  }
  /* SCALE proven on a hypothesis the stage reads (its factor is the whole
   * fault): the finding names the operator that made that value */
  int32_t sp = vd_findings_i_scaled_producer(r, rep);
  if (sp >= 0) {
    const vd_stage *st = &r->set.stages[rep];
    const vd_stage_value *lv = &st->vals[r->verdicts[rep].scaled_leaf - 1];
    const vd_gnode_t *gn = &r->pg.nodes[sp];
    const vd_tensor_t *t = &r->pp.tensors[r->pg.values[lv->value].tensor];
    f->side = 1;
    f->pnode = gn->pnode;
    f->node_rank = vd_graph_rank(&r->pg, r->pp.nodes[gn->pnode].rank, lv->replica);
    f->node_mb = gn->mb;
    f->topo = (uint64_t)1 << 32 | g->pgpos[sp];
    vd_text_fmt(f->why, sizeof(f->why),
                "it makes '%s' (t%lld), which the failing stage reads: %s x its single-device value (an inferred "
                "lineage, proven); read as that value, the stage holds",
                VD_SHOW(vd_plan_s(&r->pp, t->name)), (long long)t->id, VD_SHOW(r->verdicts[rep].factor));
  }
  /* the scaling that applied the factor (its origin), when the plans show
   * one: the finding names it, the node above stays in why as context */
  double s = 1.0;
  int32_t og = vd_findings_i_factor_origin(r, rep, sp, g->pgpos, &s);
  if (og >= 0) {
    const vd_stage_value *lv = &r->set.stages[rep].vals[r->verdicts[rep].scaled_leaf - 1];
    const vd_node_t *on = &r->pp.nodes[r->pg.nodes[og].pnode], *sn = &r->pp.nodes[r->pg.nodes[sp].pnode];
    char ctx[160] = "";
    if (sn->src) vd_text_fmt(ctx, sizeof(ctx), ", %s", VD_SHOW(vd_plan_s(&r->pp, sn->src)));
    f->pnode = r->pg.nodes[og].pnode;
    f->node_rank = vd_graph_rank(&r->pg, on->rank, lv->replica);
    f->node_mb = r->pg.nodes[og].mb;
    f->topo = (uint64_t)1 << 32 | g->pgpos[og];
    f->via_pnode = r->pg.nodes[sp].pnode;
    f->via_rank = vd_graph_rank(&r->pg, sn->rank, lv->replica);
    f->via_mb = r->pg.nodes[sp].mb;
    vd_text_fmt(f->why, sizeof(f->why),
                "it multiplies by %g where the single-device plan does not: the factor %s of the values that "
                "reach rank %lld %s '%s' (node %lld%s), which the failing stage reads",
                s, VD_SHOW(r->verdicts[rep].factor), (long long)vd_graph_rank(&r->pg, sn->rank, lv->replica),
                VD_SHOW(vd_node_op(&r->pp, sn)), VD_SHOW(vd_plan_s(&r->pp, sn->name)), (long long)sn->id, ctx);
  }
}

/* One finding's representative and footprint (ranks, microbatches,
 * layers); the footprint covers its failing stages too, also those that
 * follow from an issue. */
static vd_rc describe_finding(const struct grouping *g, vd_finding *f) {
  const vd_run *r = g->r;
  f->n_ranks = f->n_mbs = 0;
  foot ft = {0};
  f->structural = f->n_issues > 0;
  f->local_node = -1;
  f->pnode = -1;
  f->node_rank = -1;
  f->node_mb = -1;
  f->via_pnode = -1;
  if (f->structural) describe_by_issue(g, f, &ft);
  else describe_by_stage(g, f);
  for (size_t j = 0; j < f->n_stages; j++) {
    size_t i = f->stages[j];
    const vd_stage *st = &r->set.stages[i];
    f->n_instances += (size_t)(st->n_rep ? st->n_rep : 1) * (st->n_mb ? st->n_mb : 1);
    if (f->structural) continue;
    uint32_t fv[64];
    size_t nf = vd_rep_flagged_values(r, i, fv, 64);
    for (size_t q = 0; q < nf; q++) foot_value(&ft, r, st, fv[q]);
    if (g->dn[i] >= 0) foot_node(&ft, r, st, g->dn[i], nf == 0);
  }
  if (ft.oom) {
    vd_free(ft.r);
    vd_free(ft.m);
    vd_free(ft.l);
    return VD_ENOMEM;
  }
  f->ranks = ft.r;
  f->n_ranks = sort_uniq(ft.r, ft.nr, sizeof(*ft.r), cmp_i64);
  f->mbs = ft.m;
  f->n_mbs = sort_uniq(ft.m, ft.nm, sizeof(*ft.m), cmp_i32);
  f->layers = ft.l;
  f->n_layers = sort_uniq(ft.l, ft.nl, sizeof(*ft.l), cmp_i32);
  return VD_OK;
}

/* Groups the issues and failing stages of g (set up) into out. */
static vd_rc group_findings(struct grouping *g, vd_findings *out) {
  if (topo_positions(&g->r->pg, &g->pgpos, &g->pppos) != VD_OK) return VD_ENOMEM;
  if (topo_positions(&g->r->sg, &g->sgpos, &g->sppos) != VD_OK) return VD_ENOMEM;
  for (size_t i = 0; i < g->n; i++) g->parent[i] = i;
  key_issues(g);
  key_stages(g);
  if (g->keys.oom) return VD_ENOMEM;
  join_keys(g);
  size_t *root_of = vd_malloc((g->n ? g->n : 1) * sizeof(size_t));
  if (!root_of) return VD_ENOMEM;
  vd_rc rc = gather_findings(g, root_of, out);
  vd_free(root_of);
  for (size_t k = 0; k < out->n && rc == VD_OK; k++) rc = describe_finding(g, &out->v[k]);
  if (rc == VD_OK && out->n > 1) qsort(out->v, out->n, sizeof(*out->v), cmp_finding);
  return rc;
}

vd_rc vd_findings_build(const vd_run *r, vd_findings *out, vd_diag *d) {
  memset(out, 0, sizeof(*out));
  /* A run stopped before its graphs were built (common/ctl.h) has nothing
   * to group. */
  if (!r->pg.plan || !r->sg.plan) return VD_OK;
  struct grouping g = {.r = r, .ni = r->n_issues, .ns = r->verdicts ? r->set.n_stages : 0};
  g.n = g.ni + g.ns;
  g.parent = vd_malloc((g.n ? g.n : 1) * sizeof(size_t));
  g.dn = vd_malloc((g.ns ? g.ns : 1) * sizeof(int32_t));
  g.og = vd_malloc((g.ns ? g.ns : 1) * sizeof(int32_t));
  vd_rc rc = g.parent && g.dn && g.og ? group_findings(&g, out) : VD_ENOMEM;
  if (rc != VD_OK) {
    rc = VD_OOM(d);
    vd_findings_free(out);
  }
  for (size_t k = 0; k < g.keys.n; k++) vd_free(g.keys.v[k].key);
  vd_free(g.keys.v);
  vd_free(g.parent);
  vd_free(g.dn);
  vd_free(g.og);
  vd_free(g.sgpos);
  vd_free(g.sppos);
  vd_free(g.pgpos);
  vd_free(g.pppos);
  return rc;
}

void vd_rep_class_counts(const vd_run *r, size_t *n_equiv, size_t *n_inconclusive) {
  *n_equiv = *n_inconclusive = 0;
  for (size_t i = 0; r->verdicts && i < r->set.n_stages; i++) {
    const vd_stage *st = &r->set.stages[i];
    if (st->canon_class >= 0 && (size_t)st->canon_class != i) continue; /* counted with its representative */
    if (r->verdicts[i].verdict == VD_SMT_EQUIVALENT) (*n_equiv)++;
    else if (r->verdicts[i].verdict == VD_SMT_INCONCLUSIVE) (*n_inconclusive)++;
  }
}
