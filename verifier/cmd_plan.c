/*
 * verifier/cmd_plan.c - `verdict plan validate|dump|stats FILE`.
 *
 * validate: reads the file with full validation; exit 0 or 2.
 * dump:     the whole plan as readable text, or as JSON with --json
 *           (the same content as the file, ids as in the file).
 * strip:    boundary-only copy of a parallel plan (plans/strip.c).
 * stats:    ranks, nodes by phase and operator, tensors by role, bytes,
 *           executed node instances after microbatch/replica expansion.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/mem.h"
#include "../ops/ops.h"
#include "../plans/plan.h"
#include "cli.h"

static void plan_usage(FILE *f) {
  fprintf(f,
          "usage: verdict plan validate FILE\n"
          "       verdict plan dump [--json] FILE\n"
          "       verdict plan stats FILE\n"
          "       verdict plan strip --keep boundary IN OUT\n"
          "\n"
          "validate  read FILE with every check of docs/plan-format.md (exit 0 valid, 2 not)\n"
          "dump      print the whole plan as text, or as JSON with --json\n"
          "stats     ranks, nodes by phase and operator, tensors by role, bytes\n"
          "strip     write IN without its intermediate lineage annotations: only the\n"
          "          boundary (inputs, weights, optimizer state, losses, unwritten tensors)\n"
          "          keeps them; the verifier infers the rest (docs/verifier.md)\n");
}

static const char *kind_name(vd_plan_kind k) { return k == VD_PLAN_SINGLE ? "single" : "parallel"; }

typedef unsigned __int128 u128;

/* Decimal text of v into buf (at least 40 bytes); returns buf. */
static char *u128_str(char *buf, u128 v) {
  char tmp[48];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + (int)(v % 10));
    v /= 10;
  } while (v);
  for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  buf[n] = '\0';
  return buf;
}

static int dtype_bytes(vd_dtype t) {
  switch (t) {
  case VD_DT_F64: case VD_DT_I64: return 8;
  case VD_DT_F32: case VD_DT_I32: return 4;
  case VD_DT_F16: case VD_DT_BF16: return 2;
  case VD_DT_BOOL: return 1;
  default: return 4;
  }
}

/* ---- JSON output ---------------------------------------------------- */

static void json_ints(FILE *f, const int64_t *v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)v[i]);
  fputc(']', f);
}

/* Floats keep a decimal point ("2.0"): the dump shows what is stored. */
static void json_double(FILE *f, double v) {
  char b[64];
  vd_plan_fmt_double(v, b, sizeof(b));
  fputs(b, f);
}

static void json_attr_value(FILE *f, const vd_plan_t *p, const vd_attr_t *a) {
  switch (a->kind) {
  case VD_ATTR_INT: fprintf(f, "%lld", (long long)a->v.i); break;
  case VD_ATTR_FLOAT: json_double(f, a->v.f); break;
  case VD_ATTR_STR: vd_cli_json_str(f, vd_plan_s(p, a->v.s)); break;
  case VD_ATTR_INTS: json_ints(f, p->ints + a->v.off, (int)a->len); break;
  case VD_ATTR_FLOATS:
    fputc('[', f);
    for (uint32_t i = 0; i < a->len; i++) {
      if (i) fputc(',', f);
      json_double(f, p->floats[a->v.off + i]);
    }
    fputc(']', f);
    break;
  }
}

static void json_tensor(FILE *f, const vd_plan_t *p, const vd_tensor_t *t) {
  fprintf(f, "{\"id\":%lld,\"name\":", (long long)t->id);
  vd_cli_json_str(f, vd_plan_s(p, t->name));
  fprintf(f, ",\"rank\":%d,\"shape\":", t->rank);
  json_ints(f, t->shape, t->ndim);
  fprintf(f, ",\"dtype\":\"%s\",\"role\":\"%s\",\"scope\":\"%s\"", vd_dtype_names[t->dtype],
          vd_role_names[t->role], vd_scope_names[t->scope]);
  if (t->has_lin) {
    const vd_lineage_ann *l = &t->lin;
    fprintf(f, ",\"lin\":{\"full\":%lld,\"lo\":", (long long)l->full);
    json_ints(f, l->lo, t->ndim);
    fputs(",\"hi\":", f);
    json_ints(f, l->hi, t->ndim);
    fprintf(f, ",\"part\":[%lld,%lld],\"dp_shift\":", (long long)l->part_k, (long long)l->part_n);
    json_ints(f, l->dp_shift, t->ndim);
    fputs(",\"mb_shift\":", f);
    json_ints(f, l->mb_shift, t->ndim);
    fprintf(f, ",\"dp_part\":%lld,\"mb_part\":%lld}", (long long)l->dp_part, (long long)l->mb_part);
  }
  fputc('}', f);
}

static void json_tensor_ids(FILE *f, const vd_plan_t *p, const uint32_t *v, uint32_t n) {
  fputc('[', f);
  for (uint32_t i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)p->tensors[v[i]].id);
  fputc(']', f);
}

static void json_node(FILE *f, const vd_plan_t *p, const vd_node_t *n) {
  fprintf(f, "{\"id\":%lld,\"op\":", (long long)n->id);
  vd_cli_json_str(f, vd_node_op(p, n));
  fputs(",\"name\":", f);
  vd_cli_json_str(f, vd_plan_s(p, n->name));
  if (n->src) {
    fputs(",\"src\":", f);
    vd_cli_json_str(f, vd_plan_s(p, n->src));
  }
  fprintf(f, ",\"rank\":%d,\"segment\":%d,\"layer\":%d,\"phase\":\"%s\",\"in\":", n->rank, n->segment,
          n->layer, vd_phase_names[n->phase]);
  json_tensor_ids(f, p, vd_node_inputs(p, n), n->n_in);
  fputs(",\"out\":", f);
  json_tensor_ids(f, p, vd_node_outputs(p, n), n->n_out);
  fputs(",\"attrs\":{", f);
  for (uint32_t i = 0; i < n->n_attr; i++) {
    const vd_attr_t *a = &p->attrs[n->attr_off + i];
    if (i) fputc(',', f);
    vd_cli_json_str(f, vd_plan_s(p, a->key));
    fputc(':', f);
    json_attr_value(f, p, a);
  }
  fputc('}', f);
  if (n->coll >= 0) {
    fprintf(f, ",\"coll\":%lld,\"group\":", (long long)n->coll);
    json_ints(f, vd_node_group(p, n), (int)n->n_group);
    fprintf(f, ",\"span_replicas\":%s", n->span_replicas ? "true" : "false");
  }
  fputc('}', f);
}

static void dump_json(FILE *f, const vd_plan_t *p) {
  const vd_world_t *w = &p->world;
  fprintf(f, "{\"format\":\"%s\",\"version\":%d,\"kind\":\"%s\",\"model\":", VD_PLAN_FORMAT,
          VD_PLAN_VERSION, kind_name(p->kind));
  vd_cli_json_str(f, vd_plan_s(p, p->model));
  fprintf(f,
          ",\n\"world\":{\"dp\":%d,\"tp\":%d,\"pp\":%d,\"sp\":%d,\"cp\":%d,\"ep\":%d,\"nm\":%d,"
          "\"replicas\":%d,\"stored_ranks\":%d,\"layout\":",
          w->dp, w->tp, w->pp, w->sp, w->cp, w->ep, w->nm, w->replicas, w->stored_ranks);
  vd_cli_json_str(f, vd_plan_s(p, w->layout));
  fputs("},\n\"segments\":[", f);
  for (size_t i = 0; i < p->n_segments; i++) {
    if (i) fputc(',', f);
    vd_cli_json_str(f, vd_plan_s(p, p->segments[i]));
  }
  fputs("],\n\"schedule\":[", f);
  for (int r = 0; r < w->stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    fprintf(f, "%s[", r ? ",\n " : "");
    for (uint32_t s = 0; s < pr->n_steps; s++) {
      const vd_step_t *st = &p->steps[pr->step_off + s];
      fprintf(f, "%s[%d,%d]", s ? "," : "", st->segment, st->mb);
    }
    fputc(']', f);
  }
  fputs("],\n\"tensors\":[", f);
  for (size_t i = 0; i < p->n_tensors; i++) {
    fputs(i ? ",\n " : "\n ", f);
    json_tensor(f, p, &p->tensors[i]);
  }
  fputs("],\n\"nodes\":[", f);
  for (size_t i = 0; i < p->n_nodes; i++) {
    fputs(i ? ",\n " : "\n ", f);
    json_node(f, p, &p->nodes[i]);
  }
  fputs("]}\n", f);
}

/* ---- text output ---------------------------------------------------- */

static void text_shape(FILE *f, const int64_t *s, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)s[i]);
  fputc(']', f);
}

static void text_tensor(FILE *f, const vd_plan_t *p, const vd_tensor_t *t) {
  fprintf(f, "  t%-6lld r%-3d %-9s %-10s %-4s ", (long long)t->id, t->rank, vd_role_names[t->role],
          vd_scope_names[t->scope], vd_dtype_names[t->dtype]);
  text_shape(f, t->shape, t->ndim);
  fprintf(f, " %s", VD_SHOW(vd_plan_s(p, t->name)));
  if (t->has_lin) {
    const vd_lineage_ann *l = &t->lin;
    fprintf(f, "  <- t%lld[", (long long)l->full);
    for (int i = 0; i < t->ndim; i++)
      fprintf(f, "%s%lld:%lld", i ? "," : "", (long long)l->lo[i], (long long)l->hi[i]);
    fputc(']', f);
    if (l->part_n > 1) fprintf(f, " part %lld/%lld", (long long)l->part_k, (long long)l->part_n);
    int any_dp = l->dp_part != 0, any_mb = l->mb_part != 0;
    for (int i = 0; i < t->ndim; i++) {
      any_dp |= l->dp_shift[i] != 0;
      any_mb |= l->mb_shift[i] != 0;
    }
    if (any_dp) {
      fputs(" dp+", f);
      text_shape(f, l->dp_shift, t->ndim);
      if (l->dp_part) fprintf(f, "/part+%lld", (long long)l->dp_part);
    }
    if (any_mb) {
      fputs(" mb+", f);
      text_shape(f, l->mb_shift, t->ndim);
      if (l->mb_part) fprintf(f, "/part+%lld", (long long)l->mb_part);
    }
  }
  fputc('\n', f);
}

static void text_node(FILE *f, const vd_plan_t *p, const vd_node_t *n) {
  fprintf(f, "  n%-6lld r%-3d %-4s %-18s (", (long long)n->id, n->rank, vd_phase_names[n->phase],
          VD_SHOW(vd_node_op(p, n)));
  const uint32_t *in = vd_node_inputs(p, n), *out = vd_node_outputs(p, n);
  for (uint32_t i = 0; i < n->n_in; i++) fprintf(f, "%st%lld", i ? ", " : "", (long long)p->tensors[in[i]].id);
  fputs(") -> (", f);
  for (uint32_t i = 0; i < n->n_out; i++) fprintf(f, "%st%lld", i ? ", " : "", (long long)p->tensors[out[i]].id);
  fputc(')', f);
  for (uint32_t i = 0; i < n->n_attr; i++) {
    const vd_attr_t *a = &p->attrs[n->attr_off + i];
    fprintf(f, " %s=", VD_SHOW(vd_plan_s(p, a->key)));
    if (a->kind == VD_ATTR_STR) fprintf(f, "\"%s\"", VD_SHOW(vd_plan_s(p, a->v.s)));
    else json_attr_value(f, p, a);
  }
  if (n->coll >= 0) {
    fprintf(f, " coll=%lld group=", (long long)n->coll);
    text_shape(f, vd_node_group(p, n), (int)n->n_group);
    if (n->span_replicas) fputs(" span_replicas", f);
  }
  fprintf(f, "  seg=%s", VD_SHOW(vd_plan_s(p, p->segments[n->segment])));
  if (n->layer >= 0) fprintf(f, " layer=%d", n->layer);
  if (n->name) fprintf(f, "  %s", VD_SHOW(vd_plan_s(p, n->name)));
  if (n->src) fprintf(f, "  (%s)", VD_SHOW(vd_plan_s(p, n->src)));
  fputc('\n', f);
}

static void dump_text(FILE *f, const vd_plan_t *p) {
  const vd_world_t *w = &p->world;
  fprintf(f, "plan: %s, model '%s'\n", kind_name(p->kind), VD_SHOW(vd_plan_s(p, p->model)));
  fprintf(f, "world: dp=%d tp=%d pp=%d sp=%d cp=%d ep=%d nm=%d; %d stored rank(s) x %d replica(s), layout '%s'\n",
          w->dp, w->tp, w->pp, w->sp, w->cp, w->ep, w->nm, w->stored_ranks, w->replicas,
          VD_SHOW(vd_plan_s(p, w->layout)));
  fprintf(f, "segments:");
  for (size_t i = 0; i < p->n_segments; i++) fprintf(f, " %zu=%s", i, VD_SHOW(vd_plan_s(p, p->segments[i])));
  fprintf(f, "\nschedule:\n");
  for (int r = 0; r < w->stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    fprintf(f, "  rank %d:", r);
    for (uint32_t s = 0; s < pr->n_steps; s++) {
      const vd_step_t *st = &p->steps[pr->step_off + s];
      fprintf(f, " %s", VD_SHOW(vd_plan_s(p, p->segments[st->segment])));
      if (st->mb >= 0) fprintf(f, "@%d", st->mb);
    }
    fputc('\n', f);
  }
  fprintf(f, "tensors (%zu):\n", p->n_tensors);
  for (size_t i = 0; i < p->n_tensors; i++) text_tensor(f, p, &p->tensors[i]);
  fprintf(f, "nodes (%zu):\n", p->n_nodes);
  for (size_t i = 0; i < p->n_nodes; i++) text_node(f, p, &p->nodes[i]);
}

/* ---- stats ---------------------------------------------------------- */

typedef struct {
  const char *op;
  long count[VD_PHASE__COUNT];
} op_count_t;

static int cmp_op_count(const void *a, const void *b) {
  return strcmp(((const op_count_t *)a)->op, ((const op_count_t *)b)->op);
}

static int stats(FILE *f, const vd_plan_t *p, const char *path) {
  const vd_world_t *w = &p->world;
  struct stat st;
  long long file_bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
  fprintf(f, "plan:     %s (%s, model '%s'), %lld bytes on disk\n", VD_SHOW(path), kind_name(p->kind),
          VD_SHOW(vd_plan_s(p, p->model)), file_bytes);
  fprintf(f, "world:    dp=%d tp=%d pp=%d sp=%d cp=%d ep=%d nm=%d\n", w->dp, w->tp, w->pp, w->sp, w->cp,
          w->ep, w->nm);
  fprintf(f, "ranks:    %lld (%d stored x %d replicas)\n", (long long)vd_plan_world_size(p),
          w->stored_ranks, w->replicas);

  /* Executed instances: a node runs once per schedule step of its segment on its rank. */
  long *seg_runs = vd_calloc((size_t)w->stored_ranks * (p->n_segments ? p->n_segments : 1), sizeof(long));
  op_count_t *ops = vd_calloc(p->n_nodes ? p->n_nodes : 1, sizeof(*ops));
  if (!seg_runs || !ops) {
    vd_free(seg_runs);
    vd_free(ops);
    fprintf(stderr, "verdict: out of memory\n");
    return VD_EXIT_BAD_INPUT;
  }
  for (int r = 0; r < w->stored_ranks; r++) {
    const vd_program_t *pr = &p->programs[r];
    for (uint32_t s = 0; s < pr->n_steps; s++)
      seg_runs[(size_t)r * p->n_segments + (size_t)p->steps[pr->step_off + s].segment]++;
  }
  long by_phase[VD_PHASE__COUNT] = {0};
  long long executed = 0;
  size_t n_ops = 0;
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    by_phase[n->phase]++;
    executed += seg_runs[(size_t)n->rank * p->n_segments + (size_t)n->segment];
    const char *op = vd_node_op(p, n);
    size_t j = 0;
    while (j < n_ops && strcmp(ops[j].op, op) != 0) j++;
    if (j == n_ops) ops[n_ops++].op = op;
    ops[j].count[n->phase]++;
  }
  char all[48];
  fprintf(f, "nodes:    %zu stored; executed per replica %lld, in all replicas %s\n", p->n_nodes,
          executed, u128_str(all, (u128)(uint64_t)executed * (u128)(uint64_t)w->replicas));
  fprintf(f, "          by phase:");
  for (int ph = 0; ph < VD_PHASE__COUNT; ph++) fprintf(f, " %s %ld", vd_phase_names[ph], by_phase[ph]);
  fprintf(f, "\n          by operator:\n");
  qsort(ops, n_ops, sizeof(*ops), cmp_op_count);
  for (size_t j = 0; j < n_ops; j++) {
    long tot = 0;
    for (int ph = 0; ph < VD_PHASE__COUNT; ph++) tot += ops[j].count[ph];
    fprintf(f, "            %-22s %8ld\n", VD_SHOW(ops[j].op), tot);
  }
  long by_role[VD_ROLE__COUNT] = {0};
  /* A valid plan may hold 2^62-element tensors: byte totals need more than
   * 64 bits (numel < 2^63, 8 bytes, fewer than 2^32 tensors: < 2^98). */
  u128 bytes_role[VD_ROLE__COUNT] = {0};
  u128 bytes = 0;
  long annotated = 0;
  for (size_t i = 0; i < p->n_tensors; i++) {
    const vd_tensor_t *t = &p->tensors[i];
    u128 b = (u128)(uint64_t)vd_tensor_numel(t) * (u128)dtype_bytes(t->dtype);
    by_role[t->role]++;
    bytes_role[t->role] += b;
    bytes += b;
    annotated += t->has_lin;
  }
  char num[48];
  fprintf(f, "tensors:  %zu stored (%ld with lineage), %s bytes per replica (one microbatch)\n",
          p->n_tensors, annotated, u128_str(num, bytes));
  for (int r = 0; r < VD_ROLE__COUNT; r++)
    if (by_role[r])
      fprintf(f, "            %-10s %8ld  %14s bytes\n", vd_role_names[r], by_role[r], u128_str(num, bytes_role[r]));
  fprintf(f, "segments: %zu, schedule steps %zu\n", p->n_segments, p->n_steps);
  vd_free(seg_runs);
  vd_free(ops);
  return VD_EXIT_OK;
}

/* The options of plan's subcommands (--keep: strip; --json: dump), in the
 * order of plan_usage, and the subcommands. */
enum { P_KEEP = 1, P_JSON, P_HELP };
static const vd_cli_opt plan_opts[] = {
    {"--keep", "boundary", P_KEEP}, {"--json", NULL, P_JSON}, {"--help", NULL, P_HELP}, {"-h", NULL, P_HELP},
    {NULL, NULL, 0}};
static const char *const plan_subs[] = {"validate", "dump", "stats", "strip"};

/* verdict plan strip --keep boundary IN OUT */
static int cmd_strip(int argc, char **argv) {
  const char *keep = NULL, *in = NULL, *out = NULL;
  for (int i = 2; i < argc; i++) {
    int id = vd_cli_opt_id(plan_opts, argv[i]);
    if (id == P_HELP) {
      plan_usage(stdout);
      return VD_EXIT_OK;
    }
    if (id == P_KEEP && i + 1 < argc) keep = argv[++i];
    else if (argv[i][0] == '-' && argv[i][1]) {
      return vd_cli_unknown_option("verdict plan strip", argv[i], plan_opts, "verdict plan --help");
    } else if (!in) in = argv[i];
    else if (!out) out = argv[i];
    else {
      fprintf(stderr, "verdict: plan strip: IN and OUT expected, got also '%s'\n", VD_SHOW(argv[i]));
      return VD_EXIT_BAD_INPUT;
    }
  }
  if (!keep || strcmp(keep, "boundary") != 0) {
    fprintf(stderr, "verdict: plan strip: --keep boundary expected%s%s\n", keep ? ", got " : "", VD_SHOW(keep ? keep : ""));
    return VD_EXIT_BAD_INPUT;
  }
  if (!in || !out) {
    fprintf(stderr, "verdict: plan strip: missing %s\n", in ? "OUT" : "IN");
    return VD_EXIT_BAD_INPUT;
  }
  vd_plan_t p;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_plan_read_file(in, &p, &d) != VD_OK) return vd_cli_report_diag(&d);
  size_t kept = 0, stripped = 0;
  if (p.kind != VD_PLAN_PARALLEL) {
    fprintf(stderr, "verdict: plan strip: %s: kind: expected a parallel plan, got a single plan\n", VD_SHOW(in));
    vd_plan_free(&p);
    return VD_EXIT_BAD_INPUT;
  }
  vd_rc rc = vd_plan_strip(&p, &kept, &stripped, &d);
  if (rc == VD_OK) rc = vd_plan_write_file(&p, out, &d);
  vd_plan_free(&p);
  if (rc != VD_OK) return vd_cli_report_diag(&d);
  printf("%s: kept %zu boundary annotations, removed %zu intermediate ones\n", VD_SHOW(out), kept, stripped);
  return VD_EXIT_OK;
}

int vd_cmd_plan(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "strip") == 0) return cmd_strip(argc, argv);
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    plan_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? VD_EXIT_BAD_INPUT : VD_EXIT_OK;
  }
  const char *sub = argv[1];
  int json = 0;
  const char *path = NULL;
  for (int i = 2; i < argc; i++) {
    int id = vd_cli_opt_id(plan_opts, argv[i]);
    if (id == P_HELP) {
      plan_usage(stdout);
      return VD_EXIT_OK;
    }
    if (id == P_JSON && strcmp(sub, "dump") == 0) json = 1;
    else if (argv[i][0] == '-' && argv[i][1]) {
      char who[64];
      snprintf(who, sizeof(who), "verdict plan %s", sub);
      return vd_cli_unknown_option(who, argv[i], plan_opts, "verdict plan --help");
    } else if (!path) path = argv[i];
    else {
      fprintf(stderr, "verdict: plan %s: one FILE expected, got also '%s'\n", VD_SHOW(sub), VD_SHOW(argv[i]));
      return VD_EXIT_BAD_INPUT;
    }
  }
  if (strcmp(sub, "validate") && strcmp(sub, "dump") && strcmp(sub, "stats")) {
    const char *near = vd_cli_closest(sub, plan_subs, sizeof(plan_subs) / sizeof(plan_subs[0]));
    if (near)
      fprintf(stderr, "verdict: plan: unknown subcommand '%s'; did you mean '%s'? (validate, dump, stats, strip)\n",
              VD_SHOW(sub), near);
    else fprintf(stderr, "verdict: plan: unknown subcommand '%s' (validate, dump, stats, strip)\n", VD_SHOW(sub));
    return VD_EXIT_BAD_INPUT;
  }
  if (!path) {
    fprintf(stderr, "verdict: plan %s: missing FILE\n", sub);
    return VD_EXIT_BAD_INPUT;
  }
  vd_plan_t p;
  vd_diag d;
  vd_diag_clear(&d);
  if (vd_plan_read_file(path, &p, &d) != VD_OK) return vd_cli_report_diag(&d);
  int rc = VD_EXIT_OK;
  /* validate also checks operator arity and attributes against the registry
   * (ops/attrs.c); dump and stats print any readable plan. */
  if (strcmp(sub, "validate") == 0 && vd_op_check_plan(&p, path, &d) != VD_OK) {
    rc = vd_cli_report_diag(&d);
    vd_plan_free(&p);
    return rc;
  }
  if (strcmp(sub, "validate") == 0)
    printf("%s: valid %s plan, %zu tensors, %zu nodes, %d stored ranks x %d replicas\n", VD_SHOW(path),
           kind_name(p.kind), p.n_tensors, p.n_nodes, p.world.stored_ranks, p.world.replicas);
  else if (strcmp(sub, "dump") == 0)
    json ? dump_json(stdout, &p) : dump_text(stdout, &p);
  else
    rc = stats(stdout, &p, path);
  vd_plan_free(&p);
  return rc;
}
