/*
 * verifier/cert.c - the certificate of a run: one SMT-LIB2 obligation per
 * class and the manifest (verifier/cert.h; docs/verifier.md section 9).
 *
 * The obligations are built after the run, from the final round's class
 * representatives, by the same encoding the proof used
 * (vd_stage_obligation: stage_solve.c's encode_stage and build_pairs), one
 * solver context per thread; the files and the manifest are the same bytes
 * at any thread count (each class's file depends on its stage only, and the
 * manifest is assembled in stage order).
 *
 * The manifest is JSON (jansson).  Its fields are documented in
 * docs/verifier.md section 9; cmd_recheck.c reads them back.
 */
#include "cert.h"

#include <errno.h>
#include <jansson.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/clock.h"
#include "../common/digest.h"
#include "../common/mem.h"
#include "cli.h"

static size_t rep_of(const vd_run *r, const vd_run_opts *o, size_t i) {
  const vd_stage *st = &r->set.stages[i];
  return o->no_reuse || st->canon_class < 0 ? i : (size_t)st->canon_class;
}

static const char *tensor_name(const vd_run *r, const vd_stage_value *sv) {
  const vd_graph_t *g = sv->side ? &r->pg : &r->sg;
  return vd_plan_s(g->plan, g->plan->tensors[g->values[sv->value].tensor].name);
}

static json_t *int_array(const int64_t *v, int n) {
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(v[i]));
  return a;
}

static const char *proved_by(const vd_stage_verdict *v) {
  if (v->verdict != VD_SMT_EQUIVALENT) return NULL;
  if (strstr(v->reason, "earlier round")) return "an earlier round";
  return v->by_fast_path ? "normal form" : "z3";
}

/* Why the class's stage may be checked on its reduced shapes, or why it is
 * not reduced. */
static json_t *reduction_json(const vd_run *r, const vd_run_opts *o, const vd_stage *st, json_t *rules) {
  json_t *j = json_object();
  json_object_set_new(j, "reduced", json_boolean(st->reduced));
  if (!st->reduced) {
    char why[300];
    if (o->no_reduce) snprintf(why, sizeof(why), "--no-reduce");
    else if (st->noreduce_node >= 0 && (uint32_t)st->noreduce_node < st->n_nodes) {
      int op = st->nodes[st->noreduce_node].op;
      snprintf(why, sizeof(why),
               "node %d (operator %s) has no reduction rule for its operand form, or computes the index values a "
               "lookup reads: the stage is checked on its original shapes",
               st->noreduce_node, op >= 0 && op < VD_OP__COUNT ? vd_op_name((vd_op_id)op) : "unknown");
    } else {
      snprintf(why, sizeof(why), "the closed-form ratios leave every shape as it is (already minimal, or a "
                                 "product group that cannot be scaled): original shapes");
    }
    json_object_set_new(j, "why", json_string(why));
    return j;
  }
  json_object_set_new(j, "rule",
                      json_string("every class of tied dimensions is scaled by one ratio g/m (gcd of sizes and "
                                  "positions; MIN2/EVEN/KEEP; PROD groups), contractions keep their full-size counts "
                                  "(COUNT, AVG): docs/shape-reduction.md"));
  /* the operators whose rules tie the dimensions, in registry order */
  uint8_t seen[VD_OP__COUNT] = {0};
  for (uint32_t i = 0; i < st->n_nodes; i++)
    if (st->nodes[i].op >= 0 && st->nodes[i].op < VD_OP__COUNT) seen[st->nodes[i].op] = 1;
  json_t *ops = json_array();
  for (int op = 0; op < VD_OP__COUNT; op++)
    if (seen[op]) {
      const char *name = vd_op_name((vd_op_id)op);
      json_array_append_new(ops, json_string(name));
      if (!json_object_get(rules, name)) {
        const char *why = vd_op_get((vd_op_id)op)->reduction_safety;
        json_object_set_new(rules, name, json_string(why ? why : ""));
      }
    }
  json_object_set_new(j, "operators", ops);
  /* scaled position attributes and full-size divisors */
  json_t *ovr = json_array();
  for (uint32_t i = 0; i < st->n_nodes; i++) {
    const vd_stage_node *sn = &st->nodes[i];
    for (uint32_t k = 0; k < sn->n_ovr; k++) {
      const vd_attr_override *a = &st->ovr[sn->ovr_off + k];
      const vd_graph_t *g = sn->side ? &r->pg : &r->sg;
      json_t *e = json_object();
      json_object_set_new(e, "node", json_integer(i));
      json_object_set_new(e, "attr",
                          json_string(a->key == VD_OVR_DIVISOR ? VD_OVR_DIVISOR_NAME : vd_plan_s(g->plan, a->key)));
      json_object_set_new(e, "value", json_integer(a->value));
      json_array_append_new(ovr, e);
    }
  }
  json_object_set_new(j, "overrides", ovr);
  return j;
}

static json_t *shapes_json(const vd_run *r, const vd_stage *st) {
  json_t *a = json_array();
  for (uint32_t i = 0; i < st->n_vals; i++) {
    const vd_stage_value *sv = &st->vals[i];
    json_t *e = json_object();
    json_object_set_new(e, "side", json_string(sv->side ? "parallel" : "single"));
    json_object_set_new(e, "tensor", json_string(tensor_name(r, sv)));
    json_object_set_new(e, "shape", int_array(sv->shape, sv->ndim));
    json_object_set_new(e, "reduced", int_array(sv->rshape, sv->ndim));
    json_array_append_new(a, e);
  }
  return a;
}

static json_t *targets_json(const vd_run *r, const vd_stage *st) {
  json_t *a = json_array();
  for (uint32_t t = 0; t < st->n_targets; t++) {
    const vd_stage_target *tg = &st->targets[t];
    const vd_stage_value *sv = &st->vals[tg->svalue];
    json_t *e = json_object();
    json_object_set_new(e, "tensor", json_string(tensor_name(r, sv)));
    json_object_set_new(e, "lo", int_array(tg->lo, sv->ndim));
    json_object_set_new(e, "hi", int_array(tg->hi, sv->ndim));
    json_object_set_new(e, "parts", json_integer(tg->part_n));
    json_object_set_new(e, "pieces", json_integer(tg->n_pieces));
    json_array_append_new(a, e);
  }
  return a;
}

typedef struct {
  int written;
  char sha[VD_DIGEST_HEX];
  vd_smt_cert_stats stats;
  char why[800];  /* no obligation: why */
  size_t bytes;
  vd_rc rc;
  vd_diag d;
} class_out;

static void class_file(char *buf, size_t n, size_t rep) { snprintf(buf, n, "class-%06zu.smt2", rep); }

/* One class's obligation file. */
static void write_class(vd_run *r, const vd_run_opts *o, const char *dir, size_t rep, vd_smt *s,
                        const char *hs, const char *hp, class_out *co) {
  const vd_stage *st = &r->set.stages[rep];
  const vd_stage_verdict *v = &r->verdicts[rep];
  char name[64], path[4096], header[1024];
  class_file(name, sizeof(name), rep);
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  const char *pb = proved_by(v);
  snprintf(header, sizeof(header),
           "verdict proof obligation (%s), class %zu (representative stage %zu, %u nodes, %u targets)\n"
           "single plan sha256 %s\nparallel plan sha256 %s\n"
           "verdict: %s%s%s\n"
           "unsat <=> every target element of the parallel plan equals its single-device element, for all values\n"
           "of the free symbols and every interpretation of the kernels (docs/verifier.md section 9)",
           VD_CERT_FORMAT, rep, rep, st->n_nodes, st->n_targets, hs, hp, vd_smt_verdict_name(v->verdict),
           pb ? ", proved by " : "", pb ? pb : "");
  if (st->compact) {
    snprintf(co->why, sizeof(co->why), "the stage's body was not kept");
    return;
  }
  FILE *f = fopen(path, "w");
  if (!f) {
    co->rc = vd_diag_set(&co->d, VD_EIO, __FILE__, __LINE__, path, NULL, NULL, "cannot create: %s", strerror(errno));
    return;
  }
  vd_stage_solve_opts so = {.max_elems = VD_LIM_STAGE_MAX_ELEMS, .fast_path = 1};
  (void)o;
  vd_stage_verdict ov;
  co->rc = vd_stage_obligation(s, &r->lt, st, &so, header, f, &co->written, &co->stats, &ov, &co->d);
  if (co->rc == VD_OK && !co->written) snprintf(co->why, sizeof(co->why), "%s", ov.reason);
  vd_stage_verdict_free(&ov);
  if (fclose(f) != 0 && co->rc == VD_OK)
    co->rc = vd_diag_set(&co->d, VD_EIO, __FILE__, __LINE__, path, NULL, NULL, "write failed: %s", strerror(errno));
  if (co->rc != VD_OK || !co->written) {
    remove(path);
    co->written = 0;
    return;
  }
  uint8_t dg[VD_DIGEST_BYTES];
  co->rc = vd_digest_file(path, dg, &co->d);
  if (co->rc == VD_OK) vd_digest_hex(dg, co->sha);
  struct stat sb;
  if (stat(path, &sb) == 0) co->bytes = (size_t)sb.st_size;
}

static vd_rc plan_hash(const char *path, char hex[VD_DIGEST_HEX], vd_diag *d) {
  uint8_t dg[VD_DIGEST_BYTES];
  VD_CHECK(vd_digest_file(path, dg, d));
  vd_digest_hex(dg, hex);
  return VD_OK;
}

static vd_rc make_cert_dir(const char *dir, vd_diag *d) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    VD_FAIL(d, VD_EIO, dir, NULL, NULL, "cannot create the certificate directory: %s", strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) VD_FAIL(d, VD_EIO, dir, NULL, NULL, "not a directory");
  return VD_OK;
}

/* Writes the obligation of every class reps[0..n_reps) into out[k], one
 * solver context per thread; out[k] carries each class's result. */
static void write_classes(vd_run *r, const vd_run_opts *o, const char *dir, const size_t *reps, size_t n_reps,
                          const char *hs, const char *hp, class_out *out) {
  int threads = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel num_threads(threads)
  {
    vd_smt *s = NULL;
    vd_diag sd;
    vd_diag_clear(&sd);
    vd_rc src = vd_smt_new(&s, &sd);
#pragma omp for schedule(dynamic, 1)
    for (size_t k = 0; k < n_reps; k++) {
      class_out *co = &out[k];
      vd_diag_clear(&co->d);
      if (src != VD_OK) {
        co->rc = src;
        co->d = sd;
        continue;
      }
      write_class(r, o, dir, reps[k], s, hs, hp, co);
    }
    vd_smt_free(s);
  }
}

static json_t *plans_json(const vd_run_opts *o, const char *hs, const char *hp) {
  json_t *plans = json_object();
  json_t *ps = json_object(), *pp = json_object();
  json_object_set_new(ps, "path", json_string(o->sm));
  json_object_set_new(ps, "sha256", json_string(hs));
  json_object_set_new(pp, "path", json_string(o->pm));
  json_object_set_new(pp, "sha256", json_string(hp));
  json_object_set_new(plans, "single", ps);
  json_object_set_new(plans, "parallel", pp);
  return plans;
}

/* The manifest's entry of class `rep` (its file or why there is none, its
 * verdict, targets and reduction); counts it into *sum. */
static json_t *class_json(const vd_run *r, const vd_run_opts *o, size_t rep, const class_out *co, json_t *rules,
                          vd_cert_summary *sum) {
  const vd_stage *st = &r->set.stages[rep];
  const vd_stage_verdict *v = &r->verdicts[rep];
  json_t *c = json_object();
  json_object_set_new(c, "class", json_integer((json_int_t)rep));
  char name[64];
  class_file(name, sizeof(name), rep);
  if (co->written) {
    json_object_set_new(c, "file", json_string(name));
    json_object_set_new(c, "sha256", json_string(co->sha));
    json_object_set_new(c, "pairs", json_integer((json_int_t)co->stats.n_pairs));
    json_object_set_new(c, "definitions", json_integer((json_int_t)co->stats.n_defs));
    json_object_set_new(c, "symbols", json_integer((json_int_t)co->stats.n_decls));
    sum->n_written++;
    sum->bytes += co->bytes;
  } else {
    json_object_set_new(c, "file", json_null());
    json_object_set_new(c, "why", json_string(co->why));
    sum->n_missing++;
  }
  json_object_set_new(c, "verdict", json_string(vd_smt_verdict_name(v->verdict)));
  const char *pb = proved_by(v);
  json_object_set_new(c, "proved_by", pb ? json_string(pb) : json_null());
  json_object_set_new(c, "targets", targets_json(r, st));
  if (!st->compact) {
    json_object_set_new(c, "reduction", reduction_json(r, o, st, rules));
    json_object_set_new(c, "values", shapes_json(r, st));
  }
  return c;
}

/* The certificate's manifest: format, verdict, plans, every class, and
 * the class of every stage. */
static json_t *manifest_json(const vd_run *r, const vd_run_opts *o, const char *hs, const char *hp, const size_t *reps,
                             size_t n_reps, const class_out *out, vd_cert_summary *sum) {
  size_t n = r->set.n_stages;
  json_t *root = json_object();
  json_object_set_new(root, "format", json_string(VD_CERT_FORMAT));
  json_object_set_new(root, "verdict_version", json_string(VD_VERSION_STRING));
  int code = vd_run_exit_code(r);
  json_object_set_new(root, "verdict", json_string(code == 0 ? "equivalent" : code == 1 ? "not_equivalent"
                                                                                          : "inconclusive"));
  json_object_set_new(root, "plans", plans_json(o, hs, hp));
  json_object_set_new(root, "n_stages", json_integer((json_int_t)n));
  json_object_set_new(root, "n_classes", json_integer((json_int_t)n_reps));
  json_t *rules = json_object();
  json_t *classes = json_array();
  for (size_t k = 0; k < n_reps; k++) json_array_append_new(classes, class_json(r, o, reps[k], &out[k], rules, sum));
  json_object_set_new(root, "reduction_rules", rules);
  json_object_set_new(root, "classes", classes);
  json_t *stages = json_array();
  for (size_t i = 0; i < n; i++) json_array_append_new(stages, json_integer((json_int_t)rep_of(r, o, i)));
  json_object_set_new(root, "stages", stages);
  return root;
}

vd_rc vd_cert_write(vd_run *r, const vd_run_opts *o, const char *dir, vd_cert_summary *sum, vd_diag *d) {
  double t0 = vd_clock_s();
  memset(sum, 0, sizeof(*sum));
  VD_CHECK(make_cert_dir(dir, d));
  char hs[VD_DIGEST_HEX], hp[VD_DIGEST_HEX];
  VD_CHECK(plan_hash(o->sm, hs, d));
  VD_CHECK(plan_hash(o->pm, hp, d));
  size_t n = r->set.n_stages;
  size_t *reps = vd_calloc(n + 1, sizeof(size_t));
  class_out *out = vd_calloc(n + 1, sizeof(class_out));
  if (!reps || !out) {
    vd_free(reps);
    vd_free(out);
    return VD_OOM(d);
  }
  size_t n_reps = 0;
  for (size_t i = 0; i < n; i++)
    if (rep_of(r, o, i) == i) reps[n_reps++] = i;
  write_classes(r, o, dir, reps, n_reps, hs, hp, out);
  vd_rc rc = VD_OK;
  for (size_t k = 0; k < n_reps && rc == VD_OK; k++)
    if (out[k].rc != VD_OK) {
      *d = out[k].d;
      rc = out[k].rc;
    }
  json_t *root = NULL;
  if (rc == VD_OK) {
    root = manifest_json(r, o, hs, hp, reps, n_reps, out, sum);
    char mpath[4096];
    snprintf(mpath, sizeof(mpath), "%s/%s", dir, VD_CERT_MANIFEST);
    if (json_dump_file(root, mpath, JSON_INDENT(1) | JSON_PRESERVE_ORDER) != 0)
      rc = VD_ERR(d, VD_EIO, mpath, NULL, NULL, "cannot write the manifest");
  }
  json_decref(root);
  sum->n_classes = n_reps;
  sum->secs = vd_clock_s() - t0;
  vd_free(reps);
  vd_free(out);
  return rc;
}

size_t vd_cert_cross_summary(const vd_run *r, const vd_run_opts *o, FILE *f) {
  size_t agree = 0, unknown = 0, disagree = 0;
  for (size_t i = 0; i < r->set.n_stages; i++) {
    if (rep_of(r, o, i) != i || !r->verdicts) continue;
    int c = r->verdicts[i].cross;
    agree += c == VD_SMT_CROSS_AGREE;
    unknown += c == VD_SMT_CROSS_UNKNOWN;
    disagree += c == VD_SMT_CROSS_DISAGREE;
  }
  size_t all = vd_smt_cross_disagreements();
  fprintf(f, "cross-check: %zu class(es) proved by the normal form also proved by Z3, %zu undecided by Z3, "
             "%zu disagreement(s)\n", agree, unknown, all);
  for (size_t i = 0; i < r->set.n_stages && disagree; i++)
    if (rep_of(r, o, i) == i && r->verdicts[i].cross == VD_SMT_CROSS_DISAGREE)
      fprintf(f, "INTERNAL ERROR: stage %zu: %s\n", i, r->verdicts[i].reason);
  if (all > disagree)
    fprintf(f, "INTERNAL ERROR: %zu disagreement(s) in stages of earlier rounds (targets of inferred lineages)\n",
            all - disagree);
  return all;
}
