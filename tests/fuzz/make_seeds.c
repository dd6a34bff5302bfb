/*
 * tests/fuzz/make_seeds.c - writes the valid seed plans of tests/fuzz/seeds.
 *
 * Not part of the build; regenerate with
 *   cc -std=c11 -D_GNU_SOURCE -o /tmp/make_seeds tests/fuzz/make_seeds.c \
 *      common/diag.c common/mem.c plans/plan.c plans/io.c plans/validate.c plans/idmap.c -lmsgpackc
 *   /tmp/make_seeds tests/fuzz/seeds
 * Seeds are small on purpose (the fuzzer mutates them): a single-device
 * plan, a TP=2 linear + all-reduce plan with lineage shifts and attributes of
 * every kind, and a PP=2 plan with a send/recv pair and a span_replicas
 * gradient all-reduce.
 */
#include <stdio.h>
#include <string.h>

#include "../../plans/plan.h"

#define CK(x) do { if ((x) != VD_OK) { fprintf(stderr, "failed: %s\n", #x); return 1; } } while (0)

static int write(vd_plan_t *p, const char *dir, const char *name) {
  char path[512];
  vd_diag d;
  vd_diag_clear(&d);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  if (vd_plan_write_file(p, path, &d) != VD_OK) {
    char line[600];
    vd_diag_format(&d, line, sizeof(line));
    fprintf(stderr, "%s\n", line);
    return 1;
  }
  vd_plan_free(p);
  return 0;
}

static int single(const char *dir) {
  vd_plan_t p;
  int32_t s;
  uint32_t x, w, y, n;
  CK(vd_plan_init(&p, VD_PLAN_SINGLE));
  CK(vd_plan_str(&p, "mlp", &p.model));
  CK(vd_plan_add_segment(&p, "fwd", &s));
  CK(vd_plan_add_step(&p, 0, 0, -1));
  vd_tensor_t tx = {.id = 1, .ndim = 2, .shape = {4, 8}, .role = VD_ROLE_INPUT, .scope = VD_SCOPE_PER_MB};
  vd_tensor_t tw = {.id = 2, .ndim = 2, .shape = {8, 6}, .role = VD_ROLE_WEIGHT, .scope = VD_SCOPE_PERSISTENT};
  vd_tensor_t ty = {.id = 3, .ndim = 2, .shape = {4, 6}, .role = VD_ROLE_ACT, .scope = VD_SCOPE_PER_MB};
  CK(vd_plan_add_tensor(&p, &tx, "x", &x));
  CK(vd_plan_add_tensor(&p, &tw, "w", &w));
  CK(vd_plan_add_tensor(&p, &ty, "y", &y));
  uint32_t in[2] = {x, w};
  vd_node_t nd = {.id = 1, .segment = 0, .layer = 0, .phase = VD_PHASE_FWD, .coll = -1};
  CK(vd_plan_add_node(&p, &nd, "linear", "fc", in, 2, &y, 1, NULL, 0, &n));
  return write(&p, dir, "single.plan");
}

static int tp2(const char *dir) {
  vd_plan_t p;
  int32_t s;
  uint32_t t[8], n;
  CK(vd_plan_init(&p, VD_PLAN_PARALLEL));
  vd_world_t w = {.dp = 2, .tp = 2, .pp = 1, .cp = 1, .ep = 1, .nm = 2, .replicas = 2, .stored_ranks = 2};
  CK(vd_plan_str(&p, "tp,dp", &w.layout));
  CK(vd_plan_set_world(&p, &w));
  CK(vd_plan_add_segment(&p, "fwd", &s));
  for (int r = 0; r < 2; r++) {
    CK(vd_plan_add_step(&p, r, 0, 0));
    CK(vd_plan_add_step(&p, r, 0, 1));
  }
  for (int r = 0; r < 2; r++) {
    vd_tensor_t x = {.id = 10 * r + 1, .rank = r, .ndim = 2, .shape = {4, 4}, .role = VD_ROLE_INPUT,
                     .scope = VD_SCOPE_PER_MB, .has_lin = 1,
                     .lin = {.full = 1, .lo = {0, 4 * r}, .hi = {4, 4 * r + 4}, .part_n = 1, .dp_shift = {8, 0},
                             .mb_shift = {4, 0}}};
    vd_tensor_t wt = {.id = 10 * r + 2, .rank = r, .ndim = 2, .shape = {4, 6}, .dtype = VD_DT_BF16,
                      .role = VD_ROLE_WEIGHT, .scope = VD_SCOPE_PERSISTENT, .has_lin = 1,
                      .lin = {.full = 2, .lo = {4 * r, 0}, .hi = {4 * r + 4, 6}, .part_n = 1}};
    vd_tensor_t y = {.id = 10 * r + 3, .rank = r, .ndim = 2, .shape = {4, 6}, .role = VD_ROLE_ACT,
                     .scope = VD_SCOPE_PER_MB, .has_lin = 1,
                     .lin = {.full = 3, .lo = {0, 0}, .hi = {4, 6}, .part_k = r, .part_n = 2, .dp_shift = {8, 0},
                             .mb_shift = {4, 0}}};
    vd_tensor_t z = y;
    z.id = 10 * r + 4;
    z.lin.part_k = 0;
    z.lin.part_n = 1;
    CK(vd_plan_add_tensor(&p, &x, "x", &t[4 * r]));
    CK(vd_plan_add_tensor(&p, &wt, "w", &t[4 * r + 1]));
    CK(vd_plan_add_tensor(&p, &y, "y", &t[4 * r + 2]));
    CK(vd_plan_add_tensor(&p, &z, "z", &t[4 * r + 3]));
  }
  for (int r = 0; r < 2; r++) {
    uint32_t in[2] = {t[4 * r], t[4 * r + 1]};
    vd_node_t l = {.id = 100 * r + 1, .rank = r, .segment = 0, .layer = 0, .phase = VD_PHASE_FWD, .coll = -1};
    CK(vd_plan_add_node(&p, &l, "linear", "layers.0.fc", in, 2, &t[4 * r + 2], 1, NULL, 0, &n));
    CK(vd_plan_attr_int(&p, n, "bias", 0));
    CK(vd_plan_attr_float(&p, n, "scale", 0.5));
    CK(vd_plan_attr_str(&p, n, "mode", "row"));
    int64_t dims[2] = {0, -1};
    CK(vd_plan_attr_ints(&p, n, "dims", dims, 2));
    double fs[2] = {1.0, -2.5};
    CK(vd_plan_attr_floats(&p, n, "fs", fs, 2));
    int64_t g[2] = {0, 1};
    vd_node_t a = {.id = 100 * r + 2, .rank = r, .segment = 0, .layer = 0, .phase = VD_PHASE_COMM, .coll = 7};
    CK(vd_plan_add_node(&p, &a, "all_reduce", "", &t[4 * r + 2], 1, &t[4 * r + 3], 1, g, 2, &n));
  }
  return write(&p, dir, "tp2.plan");
}

static int pp2(const char *dir) {
  vd_plan_t p;
  int32_t s;
  uint32_t a0, b1, g0, g1, n;
  CK(vd_plan_init(&p, VD_PLAN_PARALLEL));
  vd_world_t w = {.dp = 2, .tp = 1, .pp = 2, .cp = 1, .ep = 1, .nm = 1, .replicas = 2, .stored_ranks = 2};
  CK(vd_plan_str(&p, "pp,dp", &w.layout));
  CK(vd_plan_set_world(&p, &w));
  CK(vd_plan_add_segment(&p, "fwd", &s));
  CK(vd_plan_add_segment(&p, "opt", &s));
  for (int r = 0; r < 2; r++) {
    CK(vd_plan_add_step(&p, r, 0, 0));
    CK(vd_plan_add_step(&p, r, 1, -1));
  }
  vd_tensor_t ta = {.id = 1, .rank = 0, .ndim = 1, .shape = {8}, .role = VD_ROLE_ACT, .scope = VD_SCOPE_PER_MB};
  vd_tensor_t tb = {.id = 2, .rank = 1, .ndim = 1, .shape = {8}, .role = VD_ROLE_ACT, .scope = VD_SCOPE_PER_MB};
  vd_tensor_t tg0 = {.id = 3, .rank = 0, .ndim = 1, .shape = {8}, .role = VD_ROLE_GRAD,
                     .scope = VD_SCOPE_PERSISTENT, .has_lin = 1, .lin = {.full = 5, .lo = {0}, .hi = {8}, .part_n = 1}};
  vd_tensor_t tg1 = tg0;
  tg1.id = 4;
  tg1.rank = 1;
  tg1.lin.full = 6;
  CK(vd_plan_add_tensor(&p, &ta, "h", &a0));
  CK(vd_plan_add_tensor(&p, &tb, "h", &b1));
  CK(vd_plan_add_tensor(&p, &tg0, "g", &g0));
  CK(vd_plan_add_tensor(&p, &tg1, "g", &g1));
  int64_t sr[2] = {0, 1};
  vd_node_t snd = {.id = 1, .rank = 0, .segment = 0, .layer = -1, .phase = VD_PHASE_COMM, .coll = 1};
  CK(vd_plan_add_node(&p, &snd, "send", "", &a0, 1, NULL, 0, sr, 2, &n));
  vd_node_t rcv = {.id = 2, .rank = 1, .segment = 0, .layer = -1, .phase = VD_PHASE_COMM, .coll = 1};
  CK(vd_plan_add_node(&p, &rcv, "recv", "", NULL, 0, &b1, 1, sr, 2, &n));
  for (int r = 0; r < 2; r++) {
    int64_t g[1] = {r};
    uint32_t gi = r ? g1 : g0;
    vd_node_t ar = {.id = 10 + r, .rank = r, .segment = 1, .layer = -1, .phase = VD_PHASE_COMM, .coll = 2 + r,
                    .span_replicas = 1};
    CK(vd_plan_add_node(&p, &ar, "all_reduce", "dp_grad", &gi, 1, &gi, 1, g, 1, &n));
  }
  return write(&p, dir, "pp2.plan");
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "tests/fuzz/seeds";
  return single(dir) || tp2(dir) || pp2(dir);
}
