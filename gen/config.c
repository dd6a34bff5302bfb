/*
 * gen/config.c - the generator configuration: defaults, model names, completion of
 * the derived sizes and the checks of vd_gen_check (what a configuration
 * must satisfy before anything is built).
 */
#include "gen_engine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"

/* ---- config ----------------------------------------------------------- */

void vd_gen_config_default(vd_gen_config *c) {
  memset(c, 0, sizeof(*c));
  c->model = VD_GEN_LLAMA3;
  c->layers = 2;
  c->hidden = 64;
  c->heads = 4;
  c->seq = 16;
  c->batch = 8;
  c->dp = c->tp = c->pp = c->nm = c->cp = c->ep = 1;
  c->optimizer = VD_GEN_SGD;
  c->loss = VD_GEN_LOSS_DEFAULT;
  c->seed = 1;
}

static const char *const model_names[] = {"mlp", "llama3", "moe"};

int vd_gen_model_lookup(const char *name) {
  for (int i = 0; i < 3; i++)
    if (strcmp(model_names[i], name) == 0) return i;
  return -1;
}

const char *vd_gen_model_name(vd_gen_model m) { return (unsigned)m < 3 ? model_names[m] : "?"; }

/* Fills the model defaults of fields left 0. */
void vd_gen_i_complete(const vd_gen_config *in, vd_gen_config *c) {
  *c = *in;
  if (!c->kv_heads) c->kv_heads = c->heads;
  if (!c->ffn) c->ffn = c->model == VD_GEN_MLP ? 4 * c->hidden : 2 * c->hidden;
  if (!c->vocab) c->vocab = 128;
  if (!c->experts) c->experts = 4;
  if (!c->topk) c->topk = 2;
  if (c->loss == VD_GEN_LOSS_DEFAULT) c->loss = c->model == VD_GEN_MLP ? VD_GEN_LOSS_SUM : VD_GEN_LOSS_CE;
}

#define BAD(...) VD_FAIL(d, VD_EUSAGE, NULL, NULL, NULL, __VA_ARGS__)
/* note: where b was not given, what it defaulted to (the user must not be
 * blamed for an option they never wrote). */
#define NEED_DIV_NOTE(a, an, b, bn, note)                                                      \
  do {                                                                                         \
    if ((b) % (a) != 0)                                                                        \
      BAD("%s %lld does not divide %s %lld%s", an, (long long)(a), bn, (long long)(b), note);  \
  } while (0)
#define NEED_DIV(a, an, b, bn) NEED_DIV_NOTE(a, an, b, bn, "")
#define DEFAULTED(field, what) (in->field ? "" : " (" what ")")

vd_rc vd_gen_check(const vd_gen_config *in, vd_diag *d) {
  vd_gen_config cc, *c = &cc;
  vd_gen_i_complete(in, c);
  if ((unsigned)c->model > VD_GEN_MOE) BAD("--model must be mlp, llama3 or moe");
  struct { const char *n; int64_t v; } pos[] = {
      {"--layers", c->layers}, {"--hidden", c->hidden}, {"--heads", c->heads},
      {"--kv-heads", c->kv_heads}, {"--ffn", c->ffn}, {"--vocab", c->vocab}, {"--seq", c->seq},
      {"--batch", c->batch}, {"--dp", c->dp}, {"--tp", c->tp}, {"--pp", c->pp}, {"--nm", c->nm},
      {"--cp", c->cp}, {"--ep", c->ep}, {"--experts", c->experts}, {"--topk", c->topk}};
  for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++)
    if (pos[i].v < 1 || pos[i].v > (1LL << 40)) BAD("%s must be a positive integer, got %lld", pos[i].n, (long long)pos[i].v);
  if (c->zero != 0 && c->zero != 1) BAD("--zero must be 0 or 1, got %d", c->zero);
  if (!(c->grad_clip >= 0) || isinf(c->grad_clip)) BAD("--grad-clip must be a finite number >= 0");
  if (c->pp > c->layers) BAD("--pp %lld exceeds --layers %lld (every stage needs a layer)", (long long)c->pp, (long long)c->layers);
  int64_t ranks = c->tp * c->cp * c->ep * c->pp;
  if (c->tp * c->cp * c->ep > 1024) BAD("tp*cp*ep must be <= 1024");
  if (ranks > (1 << 20) || c->dp > (1 << 20) || c->nm > (1 << 20)) BAD("degrees too large: tp*cp*ep*pp must be <= 2^20 and dp, nm <= 2^20");
  if (c->batch % (c->dp * c->ep * c->nm) != 0)
    BAD("--batch %lld is not divisible by dp*ep*nm = %lld", (long long)c->batch, (long long)(c->dp * c->ep * c->nm));
  if (c->model == VD_GEN_MLP) {
    if (c->tie_embeddings) BAD("--tie-embeddings applies to llama3 and moe, not mlp (no embedding)");
    if (c->loss_mask) BAD("--loss-mask applies to llama3 and moe, not mlp (no tokens)");
    if (c->cp > 1) BAD("--cp applies to llama3 and moe, not mlp");
    if (c->ep > 1) BAD("--ep applies to moe only");
    if (c->sp) BAD("--sp applies to llama3 and moe, not mlp");
    if (c->loss == VD_GEN_LOSS_CE) BAD("--loss ce needs a vocabulary: use --loss sum with --model mlp");
    NEED_DIV_NOTE(c->tp, "--tp", c->ffn, "--ffn", DEFAULTED(ffn, "not given: it defaults to 4 x --hidden"));
    return VD_OK;
  }
  if (c->ep > 1 && c->model != VD_GEN_MOE) BAD("--ep applies to moe only");
  if (c->loss_mask && c->loss != VD_GEN_LOSS_CE) BAD("--loss-mask needs --loss ce (it weights the per-token loss)");
  NEED_DIV(c->heads, "--heads", c->hidden, "--hidden");
  if ((c->hidden / c->heads) % 2) BAD("head dim --hidden/--heads = %lld must be even (rope pairs)", (long long)(c->hidden / c->heads));
  NEED_DIV(c->kv_heads, "--kv-heads", c->heads, "--heads");
  NEED_DIV_NOTE(c->tp, "--tp", c->kv_heads, "--kv-heads", DEFAULTED(kv_heads, "not given: it defaults to --heads"));
  NEED_DIV_NOTE(c->tp, "--tp", c->ffn, "--ffn", DEFAULTED(ffn, "not given: it defaults to 2 x --hidden"));
  NEED_DIV_NOTE(c->tp, "--tp", c->vocab, "--vocab", DEFAULTED(vocab, "not given: it defaults to 128"));
  NEED_DIV(c->cp, "--cp", c->seq, "--seq");
  if (c->sp && (c->seq / c->cp) % c->tp)
    BAD("--sp needs --seq/--cp = %lld divisible by --tp %lld", (long long)(c->seq / c->cp), (long long)c->tp);
  if (c->model == VD_GEN_MOE) {
    NEED_DIV_NOTE(c->ep, "--ep", c->experts, "--experts", DEFAULTED(experts, "not given: it defaults to 4"));
    if (c->topk > c->experts) BAD("--topk %lld exceeds --experts %lld", (long long)c->topk, (long long)c->experts);
  }
  return VD_OK;
}
