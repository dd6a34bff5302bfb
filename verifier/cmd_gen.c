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

int vd_cmd_gen(int argc, char **argv) {
  vd_gen_config c;
  vd_gen_config_default(&c);
  const char *single = NULL, *parallel = NULL;
  struct {
    const char *opt;
    int64_t *dst;
  } ints[] = {{"--layers", &c.layers}, {"--hidden", &c.hidden}, {"--heads", &c.heads},
              {"--kv-heads", &c.kv_heads}, {"--ffn", &c.ffn}, {"--vocab", &c.vocab},
              {"--seq", &c.seq}, {"--batch", &c.batch}, {"--dp", &c.dp}, {"--tp", &c.tp},
              {"--pp", &c.pp}, {"--nm", &c.nm}, {"--cp", &c.cp}, {"--ep", &c.ep},
              {"--experts", &c.experts}, {"--topk", &c.topk}};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return VD_EXIT_OK;
    }
    if (!strcmp(a, "--sp")) {
      c.sp = 1;
      continue;
    }
    if (!strcmp(a, "--tie-embeddings")) {
      c.tie_embeddings = 1;
      continue;
    }
    if (!strcmp(a, "--loss-mask")) {
      c.loss_mask = 1;
      continue;
    }
    if (a[0] != '-' || a[1] != '-') return bad("unexpected argument", a);
    if (i + 1 >= argc) return bad("option needs a value", a);
    const char *v = argv[++i];
    int done = 0;
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++)
      if (!strcmp(a, ints[k].opt)) {
        long x = vd_cli_parse_long(v);
        if (x <= 0) {
          fprintf(stderr, "verdict gen: %s needs a positive integer, got '%s'\n", a, VD_SHOW(v));
          return VD_EXIT_BAD_INPUT;
        }
        *ints[k].dst = x;
        done = 1;
      }
    if (done) continue;
    if (!strcmp(a, "--model")) {
      int m = vd_gen_model_lookup(v);
      if (m < 0) {
        fprintf(stderr, "verdict gen: --model must be mlp, llama3 or moe, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
      c.model = (vd_gen_model)m;
    } else if (!strcmp(a, "--optimizer")) {
      if (!strcmp(v, "sgd")) c.optimizer = VD_GEN_SGD;
      else if (!strcmp(v, "adam")) c.optimizer = VD_GEN_ADAM;
      else {
        fprintf(stderr, "verdict gen: --optimizer must be sgd or adam, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
    } else if (!strcmp(a, "--loss")) {
      if (!strcmp(v, "ce")) c.loss = VD_GEN_LOSS_CE;
      else if (!strcmp(v, "sum")) c.loss = VD_GEN_LOSS_SUM;
      else {
        fprintf(stderr, "verdict gen: --loss must be ce or sum, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
    } else if (!strcmp(a, "--zero")) {
      long x = vd_cli_parse_long(v);
      if (x != 0 && x != 1) {
        fprintf(stderr, "verdict gen: --zero must be 0 or 1, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
      c.zero = (int)x;
    } else if (!strcmp(a, "--grad-clip")) {
      char *end;
      double x = strtod(v, &end);
      if (*end || end == v || !(x >= 0) || x > 1e300) {
        fprintf(stderr, "verdict gen: --grad-clip needs a number >= 0, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
      c.grad_clip = x;
    } else if (!strcmp(a, "--seed")) {
      long x = vd_cli_parse_long(v);
      if (x < 0) {
        fprintf(stderr, "verdict gen: --seed needs a non-negative integer, got '%s'\n", VD_SHOW(v));
        return VD_EXIT_BAD_INPUT;
      }
      c.seed = (uint64_t)x;
    } else if (!strcmp(a, "--single")) {
      single = v;
    } else if (!strcmp(a, "--parallel")) {
      parallel = v;
    } else {
      return vd_cli_unknown_option("verdict gen", a, usage, "verdict gen --help");
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
