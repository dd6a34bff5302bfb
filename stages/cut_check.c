/*
 * stages/cut_check.c - phase 1 of the cut (cut.c): the structural checks SHAPE,
 * SCHEDULE and ALIGNMENT, and the stage issue records every phase adds.
 */
#include "cut_int.h"

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

vd_rc vd_stage_i_add_issue(cctx *c, vd_sissue_kind kind, int single, int64_t pnode, int64_t ptensor,
                           int32_t rank, int32_t mb, const char *fmt, ...) {
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

int vd_stage_i_issue_cmp(const void *a, const void *b) {
  const vd_stage_issue *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->single != y->single) return x->single > y->single ? -1 : 1;
  if (x->pnode != y->pnode) return x->pnode < y->pnode ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->mb != y->mb) return x->mb < y->mb ? -1 : 1;
  if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
  return strcmp(x->detail, y->detail);
}

static void node_label(const vd_graph_t *g, uint32_t pnode, int32_t rep, int32_t mb, char *buf, size_t n) {
  const vd_plan_t *p = g->plan;
  const vd_node_t *x = &p->nodes[pnode];
  snprintf(buf, n, "%s '%s' (node %lld, rank %lld, mb %d)", vd_node_op(p, x), vd_plan_s(p, x->name),
           (long long)x->id, (long long)vd_graph_rank(g, x->rank, rep), mb);
}

/* ---- phase 1: structural checks ------------------------------------------ */

vd_rc vd_stage_i_check_shapes(cctx *c, const vd_graph_t *g, const int *ops, int single) {
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
      if ((rc = vd_stage_i_add_issue(c, VD_SISSUE_SHAPE, single, (int64_t)gn->pnode, -1, (int32_t)rk, gn->mb,
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
vd_rc vd_stage_i_check_schedule(cctx *c) {
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
        /* the optimizer's write is the next step's value, not a microbatch's contribution
         * (FSDP and ZeRO-3 gather a weight before its update) */
        if (p->nodes[g->nodes[pr].pnode].phase == VD_PHASE_OPT) continue;
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
      if ((rc = vd_stage_i_add_issue(c, VD_SISSUE_SCHEDULE, 0, (int64_t)gn->pnode, (int64_t)g->values[u].tensor,
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
vd_rc vd_stage_i_check_alignment(cctx *c) {
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
      if ((rc = vd_stage_i_add_issue(c, VD_SISSUE_ALIGNMENT, 0, -1, -1, r, first,
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
