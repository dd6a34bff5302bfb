/*
 * verifier/cmd_gen.c - `verdict gen`: build a single-device and a parallel
 * plan for a model (gen/gen.h) and write them with vd_plan_write_file.
 * Every error is one line on stderr and exit code 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/outfile.h"
#include "../gen/gen.h"
#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: verdict gen --model mlp|llama3|moe [options] --single S.plan --parallel P.plan\n"
          "\n"
          "Builds one training iteration (forward, backward, gradient reduction, optional\n"
          "clipping, optimizer step) of a model as a single-device plan and as a parallel\n"
          "plan with lineage annotations.  See docs/models.md.\n"
          "\n"
          "model:\n"
          "  --model M          mlp, llama3 (default) or moe\n"
          "  --layers N         layers (default 2)\n"
          "  --hidden N         hidden size (default 64)\n"
          "  --heads N          attention heads (default 4)\n"
          "  --kv-heads N       key/value heads, grouped-query attention (default: heads)\n"
          "  --ffn N            FFN size (default 4*hidden for mlp, 2*hidden otherwise)\n"
          "  --vocab N          vocabulary (default 128)\n"
          "  --seq N            sequence length (default 16)\n"
          "  --batch N          global batch (default 8)\n"
          "  --experts N        routed experts, moe (default 4)\n"
          "  --topk N           experts per token, moe (default 2)\n"
          "  --loss ce|sum      cross-entropy (default) or sum of the logits (mlp: sum only)\n"
          "  --optimizer sgd|adam  (default sgd)\n"
          "  --grad-clip X      clip the global gradient norm to X (default 0: off)\n"
          "  --tie-embeddings   the LM head reuses the embedding table (llama3, moe)\n"
          "  --loss-mask        input loss_mask [batch, seq] weights the per-token loss:\n"
          "                     sum(mask * loss) / sum(mask), global count (llama3, moe; ce)\n"
          "  --seed N           recorded in the plan's model description\n"
          "parallelism (each must divide the sizes it splits):\n"
          "  --dp N --tp N --pp N --nm N   data, tensor, pipeline degrees, microbatches\n"
          "  --sp               sequence parallelism in the TP group\n"
          "  --cp N             context parallelism (llama3, moe)\n"
          "  --ep N             expert parallelism (moe)\n"
          "  --zero 0|1         ZeRO-1: optimizer state sharded over data parallel ranks\n"
          "output:\n"
          "  --single FILE      single-device plan\n"
          "  --parallel FILE    parallel plan\n"
          "  --help             this text\n");
}

static int bad(const char *msg, const char *arg) {
  fprintf(stderr, "verdict gen: %s%s%s (see verdict gen --help)\n", msg, arg ? ": " : "", VD_SHOW(arg ? arg : ""));
  return VD_EXIT_BAD_INPUT;
}

/* The options of gen, in the order of its help text: the integer sizes
 * (G_LAYERS..G_EP) and the flags (G_SP..G_LOSS_MASK) are ranges. */
enum {
  G_HELP = 1, G_MODEL, G_SINGLE, G_PARALLEL, G_LAYERS, G_HIDDEN, G_HEADS, G_KV_HEADS, G_FFN, G_VOCAB, G_SEQ,
  G_BATCH, G_EXPERTS, G_TOPK, G_DP, G_TP, G_PP, G_NM, G_CP, G_EP, G_SP, G_TIE, G_LOSS_MASK, G_LOSS, G_OPTIMIZER,
  G_GRAD_CLIP, G_SEED, G_ZERO
};
static const vd_cli_opt gen_opts[] = {
    {"--model", "NAME", G_MODEL}, {"--single", "FILE", G_SINGLE}, {"--parallel", "FILE", G_PARALLEL},
    {"--layers", "N", G_LAYERS}, {"--hidden", "N", G_HIDDEN}, {"--heads", "N", G_HEADS},
    {"--kv-heads", "N", G_KV_HEADS}, {"--ffn", "N", G_FFN}, {"--vocab", "N", G_VOCAB}, {"--seq", "N", G_SEQ},
    {"--batch", "N", G_BATCH}, {"--experts", "N", G_EXPERTS}, {"--topk", "N", G_TOPK}, {"--loss", "ce|sum", G_LOSS},
    {"--optimizer", "sgd|adam", G_OPTIMIZER}, {"--grad-clip", "X", G_GRAD_CLIP},
    {"--tie-embeddings", NULL, G_TIE}, {"--loss-mask", NULL, G_LOSS_MASK}, {"--seed", "N", G_SEED},
    {"--dp", "N", G_DP}, {"--tp", "N", G_TP}, {"--pp", "N", G_PP}, {"--nm", "N", G_NM}, {"--sp", NULL, G_SP},
    {"--cp", "N", G_CP}, {"--ep", "N", G_EP}, {"--zero", "0|1", G_ZERO}, {"--help", NULL, G_HELP},
    {"-h", NULL, G_HELP}, {NULL, NULL, 0}};

/* 0 when v is w0, 1 when it is w1; else -1, said on stderr (opt's value). */
static int word_of(const char *opt, const char *v, const char *w0, const char *w1) {
  if (!strcmp(v, w0)) return 0;
  if (!strcmp(v, w1)) return 1;
  fprintf(stderr, "verdict gen: %s must be %s or %s, got '%s'\n", opt, w0, w1, VD_SHOW(v));
  return -1;
}

/* --model, --optimizer, --loss, --zero, --grad-clip and --seed: a value
 * checked against its own rule.  Returns 0, or the exit code. */
static int set_choice(vd_gen_config *c, int id, const char *v) {
  if (id == G_MODEL) {
    int m = vd_gen_model_lookup(v);
    if (m < 0) {
      fprintf(stderr, "verdict gen: --model must be mlp, llama3 or moe, got '%s'\n", VD_SHOW(v));
      return VD_EXIT_BAD_INPUT;
    }
    c->model = (vd_gen_model)m;
  } else if (id == G_OPTIMIZER) {
    int k = word_of("--optimizer", v, "sgd", "adam");
    if (k < 0) return VD_EXIT_BAD_INPUT;
    c->optimizer = k ? VD_GEN_ADAM : VD_GEN_SGD;
  } else if (id == G_LOSS) {
    int k = word_of("--loss", v, "ce", "sum");
    if (k < 0) return VD_EXIT_BAD_INPUT;
    c->loss = k ? VD_GEN_LOSS_SUM : VD_GEN_LOSS_CE;
  } else if (id == G_ZERO) {
    long x = vd_cli_parse_long(v);
    if (x != 0 && x != 1) {
      fprintf(stderr, "verdict gen: --zero must be 0 or 1, got '%s'\n", VD_SHOW(v));
      return VD_EXIT_BAD_INPUT;
    }
    c->zero = (int)x;
  } else if (id == G_GRAD_CLIP) {
    char *end;
    double x = strtod(v, &end);
    if (*end || end == v || !(x >= 0) || x > 1e300) {
      fprintf(stderr, "verdict gen: --grad-clip needs a number >= 0, got '%s'\n", VD_SHOW(v));
      return VD_EXIT_BAD_INPUT;
    }
    c->grad_clip = x;
  } else { /* G_SEED */
    long x = vd_cli_parse_long(v);
    if (x < 0) {
      fprintf(stderr, "verdict gen: --seed needs a non-negative integer, got '%s'\n", VD_SHOW(v));
      return VD_EXIT_BAD_INPUT;
    }
    c->seed = (uint64_t)x;
  }
  return 0;
}

int vd_cmd_gen(int argc, char **argv) {
  vd_gen_config c;
  vd_gen_config_default(&c);
  const char *single = NULL, *parallel = NULL;
  int64_t *ints[] = {[G_LAYERS] = &c.layers, [G_HIDDEN] = &c.hidden, [G_HEADS] = &c.heads,
                     [G_KV_HEADS] = &c.kv_heads, [G_FFN] = &c.ffn, [G_VOCAB] = &c.vocab, [G_SEQ] = &c.seq,
                     [G_BATCH] = &c.batch, [G_DP] = &c.dp, [G_TP] = &c.tp, [G_PP] = &c.pp, [G_NM] = &c.nm,
                     [G_CP] = &c.cp, [G_EP] = &c.ep, [G_EXPERTS] = &c.experts, [G_TOPK] = &c.topk};
  int *flags[] = {[G_SP] = &c.sp, [G_TIE] = &c.tie_embeddings, [G_LOSS_MASK] = &c.loss_mask};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int id = vd_cli_opt_id(gen_opts, a);
    if (id == G_HELP) {
      usage(stdout);
      return VD_EXIT_OK;
    }
    if (id >= G_SP && id <= G_LOSS_MASK) {
      *flags[id] = 1;
      continue;
    }
    if (a[0] != '-' || a[1] != '-') return bad("unexpected argument", a);
    if (i + 1 >= argc) return bad("option needs a value", a);
    const char *v = argv[++i];
    if (id >= G_LAYERS && id <= G_EP) {
      long x = vd_cli_parse_long(v);
      if (x <= 0) {
        fprintf(stderr, "verdict gen: %s needs a positive integer, got '%s'\n", a, VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
      *ints[id] = x;
    } else if (id == G_SINGLE) {
      single = v;
    } else if (id == G_PARALLEL) {
      parallel = v;
    } else if (id) {
      int rc = set_choice(&c, id, v);
      if (rc) return rc;
    } else {
      return vd_cli_unknown_option("verdict gen", a, gen_opts, "verdict gen --help");
    }
  }
  if (!single || !parallel) return bad("both --single FILE and --parallel FILE are required", NULL);
  vd_diag d;
  vd_diag_clear(&d);
  vd_plan_t s, p;
  memset(&s, 0, sizeof(s));
  memset(&p, 0, sizeof(p));
  /* Both outputs judged before anything is built or written. */
  vd_rc rc = vd_outfile_check(single, 0, &d);
  if (rc == VD_OK) rc = vd_outfile_check(parallel, 0, &d);
  if (rc == VD_OK) rc = vd_gen_build(&c, &s, &p, &d);
  if (rc == VD_OK) rc = vd_plan_write_file(&s, single, &d);
  if (rc == VD_OK) rc = vd_plan_write_file(&p, parallel, &d);
  vd_plan_free(&s);
  vd_plan_free(&p);
  if (rc != VD_OK) {
    char line[1024];
    vd_diag_format(&d, line, sizeof(line));
    fprintf(stderr, "verdict gen: %s\n", line);
    return VD_EXIT_BAD_INPUT;
  }
  return VD_EXIT_OK;
}
