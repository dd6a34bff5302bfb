/*
 * gen/build.c - vd_gen_build: one build of a plan (single or parallel) from a
 * configuration: context, stages of the layers, the model's forward (gen/mlp.c,
 * gen/llama3.c, gen/moe.c), backward, optimizer and the 1F1B schedules.
 */
#include "gen_engine.h"
#include "gen_models.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- schedule --------------------------------------------------------- */

static vd_rc emit_schedule(vd_gen_ctx *g) {
  for (int s = 0; s < g->pp; s++)
    for (int64_t r = 0; r < g->rps; r++) {
      int32_t rank = (int32_t)vd_gen_i_rank_of(g, s, r);
      if (g->seg_init >= 0 && s == g->pp - 1) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_init, -1));
      if (g->nm > 1) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_zero[s], -1));
      /* 1F1B: warm-up forwards, then one forward / one backward, then cool-down */
      int64_t warm = g->pp - s - 1;
      if (warm > g->nm) warm = g->nm;
      int64_t f = 0, b = 0;
      for (; f < warm; f++) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_fwd[s], (int32_t)f));
      for (; f < g->nm; f++, b++) {
        PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_fwd[s], (int32_t)f));
        PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_bwd[s], (int32_t)b));
      }
      for (; b < g->nm; b++) PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_bwd[s], (int32_t)b));
      PLAN_CK(vd_plan_add_step(g->p, rank, g->seg_opt[s], -1));
    }
  return VD_OK;
}

/* ---- build ------------------------------------------------------------ */

static void ctx_free(vd_gen_ctx *g) {
  for (size_t i = 0; i < g->n_dts; i++) {
    vd_free(g->dts[i].name);
    vd_free(g->dts[i].t);
  }
  vd_free(g->dts);
  for (size_t i = 0; i < g->n_ops; i++) vd_free(g->ops[i].name);
  vd_free(g->ops);
  vd_free(g->emitted);
  vd_free(g->weights);
  vd_free(g->layer_stage);
  vd_free(g->seg_zero);
  vd_free(g->seg_fwd);
  vd_free(g->seg_bwd);
  vd_free(g->seg_opt);
  VD_FREE_EACH(g->names, g->name_cap);
  vd_free(g->name_ids);
}

/* The context of one build: the degrees (all 1 for the single plan). */
static void ctx_init(vd_gen_ctx *g, const vd_gen_config *c, int par, vd_plan_t *p, vd_diag *d,
                     const vd_gen_ctx *single) {
  memset(g, 0, sizeof(*g));
  g->c = c;
  g->par = par;
  g->p = p;
  g->d = d;
  g->single = single;
  g->loss_dt = -1;
  g->seg_init = -1;
  g->tied_w = -1;
  g->dp = par ? c->dp : 1;
  g->tp = par ? c->tp : 1;
  g->pp = par ? c->pp : 1;
  g->nm = par ? c->nm : 1;
  g->cp = par ? c->cp : 1;
  g->ep = par ? c->ep : 1;
  g->sp = par && c->tp > 1 ? c->sp : 0;
  g->deg[AX_TP] = g->tp;
  g->deg[AX_CP] = g->cp;
  g->deg[AX_EP] = g->ep;
  g->rps = g->tp * g->cp * g->ep;
  g->batch = c->batch;
}

/* The plan's model description and world. */
static vd_rc plan_header(vd_gen_ctx *g) {
  const vd_gen_config *c = g->c;
  vd_plan_t *p = g->p;
  vd_diag *d = g->d;
  char desc[512];
  snprintf(desc, sizeof(desc),
           "%s layers=%lld hidden=%lld heads=%lld kv_heads=%lld ffn=%lld vocab=%lld seq=%lld batch=%lld "
           "experts=%lld topk=%lld optimizer=%s loss=%s grad_clip=%g seed=%llu%s%s",
           vd_gen_model_name(c->model), (long long)c->layers, (long long)c->hidden, (long long)c->heads,
           (long long)c->kv_heads, (long long)c->ffn, (long long)c->vocab, (long long)c->seq, (long long)c->batch,
           (long long)c->experts, (long long)c->topk, c->optimizer == VD_GEN_ADAM ? "adam" : "sgd",
           c->loss == VD_GEN_LOSS_CE ? "ce" : "sum", c->grad_clip, (unsigned long long)c->seed,
           c->tie_embeddings ? " tie_embeddings=1" : "", c->loss_mask ? " loss_mask=1" : "");
  if (vd_plan_str(p, desc, &p->model)) return VD_OOM(d);
  vd_world_t w;
  memset(&w, 0, sizeof(w));
  w.dp = (int32_t)g->dp, w.tp = (int32_t)g->tp, w.pp = (int32_t)g->pp, w.sp = (int32_t)g->sp;
  w.cp = (int32_t)g->cp, w.ep = (int32_t)g->ep, w.nm = (int32_t)g->nm;
  w.replicas = (int32_t)g->dp;
  w.stored_ranks = (int32_t)(g->rps * g->pp);
  if (vd_plan_str(p, "tp,cp,ep,pp,dp", &w.layout)) return VD_OOM(d);
  if (vd_plan_set_world(p, &w)) return VD_OOM(d);
  return VD_OK;
}

/* Layers over stages: ceil(L/pp) each, the first and last stages give
 * one back first (they also hold the embedding and the head), as Llama-3
 * 405B does with 126 layers on 16 stages.  Also allocates the stages'
 * segment ids. */
static vd_rc place_layers(vd_gen_ctx *g) {
  const vd_gen_config *c = g->c;
  g->layer_stage = vd_malloc((size_t)(c->layers + 2) * sizeof(int));
  g->seg_zero = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_fwd = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_bwd = vd_calloc((size_t)g->pp, sizeof(int32_t));
  g->seg_opt = vd_calloc((size_t)g->pp, sizeof(int32_t));
  int64_t *cnt = vd_calloc((size_t)g->pp, sizeof(int64_t));
  if (!g->layer_stage || !g->seg_zero || !g->seg_fwd || !g->seg_bwd || !g->seg_opt || !cnt) {
    vd_free(cnt);
    return VD_OOM(g->d);
  }
  int64_t q = (c->layers + g->pp - 1) / g->pp, deficit = q * g->pp - c->layers;
  for (int64_t s = 0; s < g->pp; s++) cnt[s] = q;
  for (int64_t k = 0; k < deficit; k++) {
    int64_t s = (k % 2 == 0) ? k / 2 : g->pp - 1 - k / 2;
    cnt[s]--;
  }
  int64_t l = 0;
  for (int64_t s = 0; s < g->pp; s++)
    for (int64_t k = 0; k < cnt[s]; k++) g->layer_stage[1 + l++] = (int)s;
  g->layer_stage[0] = 0;                          /* embedding: index -1 + 1 */
  g->layer_stage[c->layers + 1] = (int)(g->pp - 1); /* head */
  vd_free(cnt);
  return VD_OK;
}

/* The segments: the last stage's init (loss mask), then per stage
 * zero_grad (microbatches only), fwd, bwd, opt. */
static vd_rc add_segments(vd_gen_ctx *g) {
  vd_plan_t *p = g->p;
  vd_diag *d = g->d;
  if (g->par && g->c->loss_mask) {
    char nm[64];
    snprintf(nm, sizeof(nm), "stage%d.init", (int)(g->pp - 1));
    if (vd_plan_add_segment(p, nm, &g->seg_init)) return VD_OOM(d);
  }
  for (int s = 0; s < g->pp; s++) {
    char nm[64];
    if (g->nm > 1) {
      snprintf(nm, sizeof(nm), "stage%d.zero_grad", s);
      if (vd_plan_add_segment(p, nm, &g->seg_zero[s])) return VD_OOM(d);
    }
    snprintf(nm, sizeof(nm), "stage%d.fwd", s);
    if (vd_plan_add_segment(p, nm, &g->seg_fwd[s])) return VD_OOM(d);
    snprintf(nm, sizeof(nm), "stage%d.bwd", s);
    if (vd_plan_add_segment(p, nm, &g->seg_bwd[s])) return VD_OOM(d);
    snprintf(nm, sizeof(nm), "stage%d.opt", s);
    if (vd_plan_add_segment(p, nm, &g->seg_opt[s])) return VD_OOM(d);
  }
  return VD_OK;
}

static vd_rc build_one(vd_gen_ctx *g, const vd_gen_config *c, int par, vd_plan_t *p, vd_diag *d,
                       const vd_gen_ctx *single) {
  ctx_init(g, c, par, p, d, single);
  vd_rc rc = vd_plan_init(p, par ? VD_PLAN_PARALLEL : VD_PLAN_SINGLE);
  if (rc) return VD_OOM(d);
  VD_CHECK(plan_header(g));
  VD_CHECK(place_layers(g));
  VD_CHECK(add_segments(g));
  switch (c->model) {
  case VD_GEN_MLP: rc = vd_gen_i_mlp(g); break;
  case VD_GEN_LLAMA3: rc = vd_gen_i_llama3(g); break;
  case VD_GEN_MOE: rc = vd_gen_i_moe(g); break;
  }
  if (!rc && !g->failed) rc = vd_gen_i_emit_zero(g);
  if (!rc && !g->failed) rc = vd_gen_i_emit_forward(g);
  if (!rc && !g->failed) rc = vd_gen_i_emit_backward(g);
  if (!rc && !g->failed) rc = vd_gen_i_emit_optimizer(g);
  if (!rc && !g->failed) rc = emit_schedule(g);
  if (g->failed) return d && d->rc ? d->rc : VD_EINTERNAL;
  return rc;
}

vd_rc vd_gen_build(const vd_gen_config *cin, vd_plan_t *single, vd_plan_t *parallel, vd_diag *d) {
  memset(single, 0, sizeof(*single));
  memset(parallel, 0, sizeof(*parallel));
  VD_CHECK(vd_gen_check(cin, d));
  vd_gen_config c;
  vd_gen_i_complete(cin, &c);
  vd_gen_ctx *gs = vd_calloc(1, sizeof(*gs)), *gp = vd_calloc(1, sizeof(*gp));
  vd_rc rc = VD_ENOMEM;
  if (!gs || !gp) {
    VD_OOM(d);
    goto done;
  }
  rc = build_one(gs, &c, 0, single, d, NULL);
  if (rc == VD_OK) rc = build_one(gp, &c, 1, parallel, d, gs);
done:
  if (gs) ctx_free(gs);
  if (gp) ctx_free(gp);
  vd_free(gs);
  vd_free(gp);
  return rc;
}
