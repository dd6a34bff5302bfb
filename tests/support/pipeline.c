/*
 * tests/support/pipeline.c - plan pair fixture through graphs, lineage and
 * stages (pipeline.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "pipeline.h"

vd_rc tp_pair_lineage(tp_pair *x, vd_diag *d) {
  vd_graph_opts o = {.expand_replicas = 0};
  vd_rc rc = vd_graph_build(&x->s, &o, &x->gs, d);
  if (rc != VD_OK && rc != VD_EINPUT) return rc;
  rc = vd_graph_build(&x->p, &o, &x->gp, d);
  if (rc != VD_OK && rc != VD_EINPUT) return rc;
  vd_diag_clear(d);
  return vd_lin_build(&x->gs, &x->gp, &x->lt, d);
}

vd_rc tp_pair_cut(tp_pair *x, vd_diag *d) {
  VD_CHECK(tp_pair_lineage(x, d));
  return vd_stage_cut(&x->lt, &x->set, d);
}

void tp_gen_config(vd_gen_config *c, const tp_sizes *z) {
  vd_gen_config_default(c);
  c->model = z->model;
  const int64_t *from[] = {&z->layers, &z->hidden, &z->heads, &z->seq, &z->batch, &z->dp, &z->tp, &z->pp, &z->nm};
  int64_t *to[] = {&c->layers, &c->hidden, &c->heads, &c->seq, &c->batch, &c->dp, &c->tp, &c->pp, &c->nm};
  for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++)
    if (*from[i]) *to[i] = *from[i];
}

vd_rc tp_pair_llama3(tp_pair *x, int64_t layers, int64_t tp, vd_diag *d) {
  memset(x, 0, sizeof(*x));
  vd_gen_config c;
  tp_gen_config(&c, &(tp_sizes){VD_GEN_LLAMA3, .layers = layers, .tp = tp});
  VD_CHECK(vd_gen_build(&c, &x->s, &x->p, d));
  return tp_pair_cut(x, d);
}

void tp_pair_llama3_ok(tp_pair *x, int64_t layers, int64_t tp) {
  vd_diag d;
  vd_diag_clear(&d);
  vd_rc rc = tp_pair_llama3(x, layers, tp, &d);
  char line[1024];
  vd_diag_format(&d, line, sizeof(line));
  if (rc != VD_OK) fail_msg("llama3 %lld layers tp%lld: %s", (long long)layers, (long long)tp, line);
  if (x->set.n_stages == 0) fail_msg("llama3 %lld layers tp%lld: no stages", (long long)layers, (long long)tp);
}

void tp_pair_free(tp_pair *x) {
  vd_stage_set_free(&x->set);
  vd_lin_free(&x->lt);
  vd_graph_free(&x->gs);
  vd_graph_free(&x->gp);
  vd_plan_free(&x->s);
  vd_plan_free(&x->p);
}
