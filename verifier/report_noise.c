/*
 * verifier/report_noise.c - the reports of `verdict noise` and `verdict
 * compare`: text (a summary, the findings, the rows), JSON (every row; the
 * interface a CI relies on, docs/noise.md "JSON") and HTML (the rows and one
 * inline SVG plot per tensor family: observed deviation and bounds along the
 * topological order, log scale).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "../ops/ops.h"
#include "cli.h"
#include "report_noise.h"

int vd_noise_pair_load(vd_noise_pair *np, const char *sm, const char *pm) {
  memset(np, 0, sizeof(*np));
  vd_plan_t *sp = &np->sp, *pp = &np->pp;
  vd_diag d;
  vd_diag_clear(&d);
  const char *files[2] = {sm, pm};
  vd_plan_t *plans[2] = {sp, pp};
  for (int i = 0; i < 2; i++) {
    if (vd_plan_read_file(files[i], plans[i], &d) != VD_OK || vd_op_check_plan(plans[i], files[i], &d) != VD_OK)
      return vd_cli_report_diag(&d);
    vd_plan_kind want = i == 0 ? VD_PLAN_SINGLE : VD_PLAN_PARALLEL;
    if (plans[i]->kind != want) {
      fprintf(stderr, "verdict: %s: plan: kind: expected a %s plan for %s\n", files[i],
              i == 0 ? "single-device" : "parallel", i == 0 ? "--sm" : "--pm");
      return VD_EXIT_BAD_INPUT;
    }
  }
  if (vd_lin_check_pair(sp, sm, pp, pm, &d) != VD_OK) return vd_cli_report_diag(&d);
  return -1;
}

void vd_noise_pair_free(vd_noise_pair *np) {
  vd_noise_result_free(&np->r);
  vd_plan_free(&np->sp);
  vd_plan_free(&np->pp);
}

int vd_noise_arg_prec(const char *mode, const char *a, const char *v, vd_noise_prec *p) {
  if (!vd_noise_prec_parse(v, p) || *p == VD_NOISE_PLAN) {
    fprintf(stderr, "verdict %s: %s: expected bf16, fp16, fp32 or fp64, got '%s'\n", mode, VD_SHOW(a), VD_SHOW(v));
    return VD_EXIT_BAD_INPUT;
  }
  return -1;
}

int vd_noise_arg_positive(const char *mode, const char *a, const char *v, double *x) {
  char *e;
  *x = strtod(v, &e);
  if (*e || !(*x > 0) || *x > 1e30) {
    fprintf(stderr, "verdict %s: %s: expected a positive number, got '%s'\n", mode, VD_SHOW(a), VD_SHOW(v));
    return VD_EXIT_BAD_INPUT;
  }
  return -1;
}

int vd_noise_write_files(const char *json, const char *html, const vd_noise_result *r,
                         const vd_noise_report_ctx *x, int code) {
  if (json && vd_noise_write_json(json, r, x)) code = VD_EXIT_BAD_INPUT;
  if (html && vd_noise_write_html(html, r, x)) code = VD_EXIT_BAD_INPUT;
  return code;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static size_t vd_noise_ratio_stats(const vd_noise_result *r, double q[5]) {
  double *v = vd_calloc(r->n_rows + 1, sizeof(double));
  size_t n = 0;
  for (size_t i = 0; v && i < r->n_rows; i++) {
    const vd_noise_row *w = &r->rows[i];
    if (w->observed > 0 && isfinite(w->observed) && (w->status == VD_NOISE_WITHIN || w->status == VD_NOISE_BEYOND))
      v[n++] = w->realistic / w->observed;
  }
  for (int k = 0; k < 5; k++) q[k] = 0;
  if (n) {
    qsort(v, n, sizeof(double), cmp_double);
    q[0] = v[0];
    q[1] = v[(n - 1) / 10];
    q[2] = v[(n - 1) / 2];
    q[3] = v[(n - 1) * 9 / 10];
    q[4] = v[n - 1];
  }
  vd_free(v);
  return n;
}

static double row_worst_max(const vd_noise_result *r, int bitid_too, double *median) {
  double *v = vd_calloc(r->n_rows + 1, sizeof(double));
  size_t n = 0;
  double mx = 0;
  for (size_t i = 0; v && i < r->n_rows; i++) {
    if (r->rows[i].bitid && !bitid_too) continue;
    v[n++] = r->rows[i].realistic;
    if (r->rows[i].worst > mx) mx = r->rows[i].worst;
  }
  *median = 0;
  if (n) {
    qsort(v, n, sizeof(double), cmp_double);
    *median = v[(n - 1) / 2];
  }
  vd_free(v);
  return mx;
}

static void print_row(FILE *f, size_t i, const vd_noise_row *w, int compared) {
  fprintf(f, "  %5zu  %-15s %-9s %s  realistic %-9.3g worst %-9.3g", i, vd_noise_status_names[w->status],
          w->family, w->bitid ? "bit-identical" : "             ", w->realistic, w->worst);
  if (compared && w->observed >= 0) fprintf(f, " observed %-9.3g", w->observed);
  fprintf(f, " %s", w->name);
  if (w->why[0]) fprintf(f, " (%s)", w->why);
  fputc('\n', f);
}

/* The first lines: what was bounded (noise) or the outcome of the comparison (compare). */
static void text_heading(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  const vd_noise_opts *o = x->o;
  int cmp = r->compared;
  const char *dt = o->dtype == VD_NOISE_PLAN ? "each tensor's plan dtype" : vd_noise_prec_name(o->dtype);
  const char *ac = o->accum == VD_NOISE_PLAN ? "the same" : vd_noise_prec_name(o->accum);
  if (!cmp) {
    fprintf(f, "noise: rounding bounds of the parallel plan against the single-device plan, in %s "
               "(accumulation: %s)\n", dt, ac);
    fprintf(f, "  evaluated for inputs of scale %g (random, uniform in [-%g, %g]), not on your run's values: "
               "`verdict compare` evaluates them on a real run\n",
            o->scale > 0 ? o->scale : 1.0, o->scale > 0 ? o->scale : 1.0, o->scale > 0 ? o->scale : 1.0);
  } else {
    const char *v = r->n_count[VD_NOISE_BEYOND] ? "BEYOND ROUNDING"
                    : r->n_count[VD_NOISE_MISSING] ? "MISSING VALUES"
                                                   : "WITHIN ROUNDING";
    fprintf(f, "compare: %s (%zu tensors: %zu within rounding, %zu beyond, %zu missing, %zu without a bound)\n", v,
            r->n_rows, r->n_count[VD_NOISE_WITHIN], r->n_count[VD_NOISE_BEYOND], r->n_count[VD_NOISE_MISSING],
            r->n_count[VD_NOISE_NOBOUND]);
    fprintf(f, "  single dump %s, parallel dump %s; bounds in %s (accumulation: %s), evaluated on the dumps' values\n",
            x->single_dump, x->parallel_dump, dt, ac);
  }
}

/* The bounds' definition and the summary figures. */
static void text_summary(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  double lambda = x->o->lambda > 0 ? x->o->lambda : 3.0;
  fprintf(f, "  realistic = %g x the standard deviation of independent roundings (probabilistic, square-root "
             "growth); worst = first-order worst case (every rounding at its extreme, errors adding up); both "
             "relative, ||parallel - single||_2 / ||single||_2 (docs/noise.md)\n",
          lambda);
  double med = 0, wmax = row_worst_max(r, 0, &med);
  fprintf(f, "  %zu tensors, %zu must be bit-identical; realistic bound of the others: median %.3g; largest worst-case "
             "bound %.3g\n",
          r->n_rows, r->n_bitid, med, wmax);
  if (r->n_unrecorded)
    fprintf(f, "  %zu values the runs never held (operators the capture decomposes) are recomputed, not compared\n",
            r->n_unrecorded);
}

/* The first tensor beyond rounding, where the deviation departs, and what the plans' verdict says of it. */
static void text_first_beyond(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  const vd_noise_row *w = &r->rows[r->first_beyond];
  fprintf(f, "  first beyond rounding: #%lld %s (%s): observed %.3g%s\n", (long long)r->first_beyond, w->name,
          w->family, w->observed,
          w->bitid ? ", must be bit-identical (computed by the same operations on identical inputs)" : "");
  if (!w->bitid) fprintf(f, "    realistic bound %.3g, worst-case bound %.3g\n", w->realistic, w->worst);
  if (r->departure[0])
    fprintf(f, "  first point of departure: %s: its output has no single-device counterpart, and #%lld is computed "
               "from it through values that have none either: the deviation is attributed to it%s\n",
            r->departure, (long long)r->first_beyond,
            r->departure_is_stuck ? " (the node where lineage inference stopped, as the verifier's finding)" : "");
  if (x->plan_verdict && strcmp(x->plan_verdict, "EQUIVALENT") == 0)
    fprintf(f, "  The plans are proven EQUIVALENT, so this difference does not come from the plan: it comes from "
               "outside it (a kernel, the data order, a precision setting, non-determinism). Look at %s first.\n",
            w->name);
}

/* compare's findings: the ratio figures, the plans' verdict, the first tensor beyond rounding, where
 * inference stopped, the first missing one. */
static void text_findings(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  double q[5];
  size_t n = vd_noise_ratio_stats(r, q);
  if (n)
    fprintf(f, "  realistic bound / observed on the %zu tensors that differ: min %.3g, p10 %.3g, median %.3g, "
               "p90 %.3g, max %.3g\n",
            n, q[0], q[1], q[2], q[3], q[4]);
  if (x->plan_verdict) fprintf(f, "  plans: %s (verdict --sm --pm)\n", x->plan_verdict);
  if (r->first_beyond >= 0) text_first_beyond(f, r, x);
  if (r->first_beyond < 0 && x->plan_verdict && strcmp(x->plan_verdict, "NOT EQUIVALENT") == 0)
    fprintf(f, "  The plans are NOT EQUIVALENT although this run stays within rounding on every tensor compared: "
               "the difference is in values this run does not exercise, or past the point below (run verdict "
               "--sm --pm for the counterexample).\n");
  if (r->stuck[0])
    fprintf(f, "  lineage inference stopped at %s: the values past it have no single-device counterpart "
               "(the plan itself differs there; run verdict --sm --pm for the proof)\n",
            r->stuck);
  if (r->first_missing >= 0) {
    const vd_noise_row *w = &r->rows[r->first_missing];
    fprintf(f, "  first missing: #%lld %s: %s\n", (long long)r->first_missing, w->name, w->why);
  }
}

void vd_noise_write_text(FILE *f, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  int cmp = r->compared;
  text_heading(f, r, x);
  text_summary(f, r, x);
  if (cmp)
    text_findings(f, r, x);
  else if (r->stuck[0])
    fprintf(f, "  lineage inference stopped at %s: no bound past it\n", r->stuck);
  int all = x->verbose;
  size_t shown = 0;
  for (size_t i = 0; i < r->n_rows && (cmp || all); i++) {
    const vd_noise_row *w = &r->rows[i];
    if (!all && w->status == VD_NOISE_WITHIN) continue;
    if (!all && shown >= 20) {
      fprintf(f, "  ... (-v lists every tensor)\n");
      break;
    }
    if (shown == 0) fprintf(f, "  tensors in topological order:\n");
    print_row(f, i, w, cmp);
    shown++;
  }
}

static FILE *open_out(const char *path) { return strcmp(path, "-") == 0 ? stdout : fopen(path, "w"); }

static int close_out(FILE *f, const char *path) {
  if (f == stdout) return fflush(f) == 0 ? 0 : VD_EXIT_BAD_INPUT;
  if (fclose(f) != 0) {
    fprintf(stderr, "verdict: %s: write error\n", path);
    return VD_EXIT_BAD_INPUT;
  }
  return 0;
}

static void json_num(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

/* "summary": the counts, and for compare the ratio figures. */
static void json_summary(FILE *f, const vd_noise_result *r) {
  fprintf(f, ",\"summary\":{\"tensors\":%zu,\"bit_identical\":%zu,\"within\":%zu,\"beyond\":%zu,\"missing\":%zu,"
             "\"no_bound\":%zu,\"unrecorded\":%zu",
          r->n_rows, r->n_bitid, r->n_count[VD_NOISE_WITHIN], r->n_count[VD_NOISE_BEYOND],
          r->n_count[VD_NOISE_MISSING], r->n_count[VD_NOISE_NOBOUND], r->n_unrecorded);
  if (r->compared) {
    double q[5];
    size_t n = vd_noise_ratio_stats(r, q);
    fprintf(f, ",\"ratio\":{\"n\":%zu,\"min\":", n);
    json_num(f, q[0]);
    fprintf(f, ",\"p10\":");
    json_num(f, q[1]);
    fprintf(f, ",\"median\":");
    json_num(f, q[2]);
    fprintf(f, ",\"p90\":");
    json_num(f, q[3]);
    fprintf(f, ",\"max\":");
    json_num(f, q[4]);
    fputc('}', f);
  }
  fputc('}', f);
}

/* The first tensor beyond rounding, the point of departure, where inference stopped. */
static void json_findings(FILE *f, const vd_noise_result *r) {
  fprintf(f, ",\"first_beyond\":");
  if (r->first_beyond >= 0) {
    fprintf(f, "{\"index\":%lld,\"name\":", (long long)r->first_beyond);
    vd_cli_json_str(f, r->rows[r->first_beyond].name);
    fputc('}', f);
  } else {
    fputs("null", f);
  }
  fprintf(f, ",\"departure\":");
  if (r->departure[0]) {
    fprintf(f, "{\"node\":");
    vd_cli_json_str(f, r->departure);
    fprintf(f, ",\"inference_stopped_here\":%s}", r->departure_is_stuck ? "true" : "false");
  } else {
    fputs("null", f);
  }
  fprintf(f, ",\"inference_stopped_at\":");
  if (r->stuck[0])
    vd_cli_json_str(f, r->stuck);
  else
    fputs("null", f);
}

/* Every tensor with its bounds, status and (compare) observed deviation. */
static void json_tensors(FILE *f, const vd_noise_result *r) {
  fprintf(f, ",\"tensors\":[");
  for (size_t i = 0; i < r->n_rows; i++) {
    const vd_noise_row *w = &r->rows[i];
    fprintf(f, "%s\n{\"index\":%zu,\"id\":%lld,\"name\":", i ? "," : "", i, (long long)w->id);
    vd_cli_json_str(f, w->name);
    fprintf(f, ",\"family\":");
    vd_cli_json_str(f, w->family);
    fprintf(f, ",\"bit_identical\":%s,\"realistic\":", w->bitid ? "true" : "false");
    json_num(f, w->realistic);
    fprintf(f, ",\"worst\":");
    json_num(f, w->worst);
    fprintf(f, ",\"status\":");
    vd_cli_json_str(f, vd_noise_status_names[w->status]);
    if (r->compared) {
      fprintf(f, ",\"observed\":");
      json_num(f, w->observed);
    }
    if (w->why[0]) {
      fprintf(f, ",\"why\":");
      vd_cli_json_str(f, w->why);
    }
    fputc('}', f);
  }
  fprintf(f, "\n]");
}

int vd_noise_write_json(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  FILE *f = open_out(path);
  if (!f) {
    fprintf(stderr, "verdict: %s: cannot open for writing\n", path);
    return VD_EXIT_BAD_INPUT;
  }
  const vd_noise_opts *o = x->o;
  fprintf(f, "{\"format\":\"verdict-noise\",\"version\":1,\"mode\":");
  vd_cli_json_str(f, x->mode);
  fprintf(f, ",\"dtype\":\"%s\",\"accum\":\"%s\",\"scale\":", vd_noise_prec_name(o->dtype),
          vd_noise_prec_name(o->accum));
  json_num(f, r->compared ? 0 : (o->scale > 0 ? o->scale : 1.0));
  fprintf(f, ",\"lambda\":");
  json_num(f, o->lambda > 0 ? o->lambda : 3.0);
  fprintf(f, ",\"plan_verdict\":");
  if (x->plan_verdict)
    vd_cli_json_str(f, x->plan_verdict);
  else
    fputs("null", f);
  json_summary(f, r);
  json_findings(f, r);
  json_tensors(f, r);
  fprintf(f, "}\n");
  return close_out(f, path);
}

/* ---- HTML --------------------------------------------------------------------- */

static double ylog(double v, double lo, double hi, double h) {
  if (!(v > 0)) v = lo;
  double a = log10(v), l = log10(lo), u = log10(hi);
  if (a < l) a = l;
  if (a > u) a = u;
  return h - (a - l) / (u - l) * h;
}

static void svg_family(FILE *f, const vd_noise_result *r, const char *fam) {
  size_t n = 0;
  double lo = 1e300, hi = 0;
  for (size_t i = 0; i < r->n_rows; i++) {
    const vd_noise_row *w = &r->rows[i];
    if (strcmp(w->family, fam) != 0) continue;
    n++;
    double vals[3] = {w->realistic, w->worst, w->observed};
    for (int k = 0; k < 3; k++)
      if (vals[k] > 0 && isfinite(vals[k])) {
        if (vals[k] < lo) lo = vals[k];
        if (vals[k] > hi) hi = vals[k];
      }
  }
  if (!n) return;
  if (hi <= 0) {
    lo = 1e-20;
    hi = 1;
  }
  lo = pow(10, floor(log10(lo)));
  hi = pow(10, ceil(log10(hi)));
  if (hi <= lo) hi = lo * 10;
  double W = 900, H = 220, L = 60, T = 20;
  fprintf(f, "<h3>");
  vd_cli_xml_str(f, fam);
  fprintf(f, " (%zu tensors)</h3>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\">\n", n,
          W + L + 20, H + T + 40);
  fprintf(f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#888\"/>\n", L, T, W, H);
  for (double e = log10(lo); e <= log10(hi) + 0.5; e += 1) {
    double y = T + ylog(pow(10, e), lo, hi, H);
    fprintf(f, "<line x1=\"%g\" x2=\"%g\" y1=\"%g\" y2=\"%g\" stroke=\"#eee\"/>", L, L + W, y, y);
    fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"10\" text-anchor=\"end\">1e%d</text>\n", L - 4, y + 3, (int)e);
  }
  size_t j = 0;
  const char *col[3] = {"#1f77b4", "#bbbbbb", "#d62728"};
  for (int k = 0; k < 3; k++) {
    if (k == 2 && !r->compared) break;
    j = 0;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"", col[k], k == 2 ? "0" : "1.5");
    for (size_t i = 0; i < r->n_rows && k < 2; i++) {
      const vd_noise_row *w = &r->rows[i];
      if (strcmp(w->family, fam) != 0) continue;
      double x = L + (n > 1 ? (double)j / (double)(n - 1) * W : W / 2);
      fprintf(f, "%.1f,%.1f ", x, T + ylog(k == 0 ? w->realistic : w->worst, lo, hi, H));
      j++;
    }
    fprintf(f, "\"/>\n");
    if (k == 2) {
      for (size_t i = 0; i < r->n_rows; i++) {
        const vd_noise_row *w = &r->rows[i];
        if (strcmp(w->family, fam) != 0) continue;
        double x = L + (n > 1 ? (double)j / (double)(n - 1) * W : W / 2);
        j++;
        if (w->observed < 0) continue;
        const char *c = w->status == VD_NOISE_BEYOND ? "#d62728" : "#2ca02c";
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"><title>", x,
                T + ylog(w->observed > 0 ? w->observed : lo, lo, hi, H), c);
        vd_cli_xml_str(f, w->name);
        fprintf(f, ": observed %.3g, bound %.3g</title></circle>\n", w->observed, w->realistic);
      }
    }
  }
  fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"11\">topological order &#8594;  blue: realistic bound, grey: "
             "worst case%s</text>\n</svg>\n",
          L, T + H + 25, r->compared ? ", dots: observed (green within, red beyond; 0 drawn at the bottom)" : "");
}

int vd_noise_write_html(const char *path, const vd_noise_result *r, const vd_noise_report_ctx *x) {
  FILE *f = open_out(path);
  if (!f) {
    fprintf(stderr, "verdict: %s: cannot open for writing\n", path);
    return VD_EXIT_BAD_INPUT;
  }
  fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>verdict %s</title>\n"
             "<style>body{font-family:sans-serif;margin:1em}td,th{padding:2px 6px;font-size:12px}"
             ".beyond{background:#fdd}.missing{background:#ffd}pre{white-space:pre-wrap}</style></head><body>\n",
          x->mode);
  fprintf(f, "<h1>verdict %s</h1>\n<pre>", x->mode);
  /* the text summary, escaped */
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (m) {
    vd_noise_report_ctx y = *x;
    y.verbose = 0;
    vd_noise_write_text(m, r, &y);
    fclose(m);
    vd_cli_xml_text(f, buf, len);
    free(buf);
  }
  fprintf(f, "</pre>\n<h2>Deviation and bounds along the topological order, per tensor family</h2>\n");
  static const char *fams[] = {"input", "weight", "optstate", "fwd", "loss", "bwd", "opt", "update"};
  for (size_t k = 0; k < sizeof(fams) / sizeof(fams[0]); k++) svg_family(f, r, fams[k]);
  fprintf(f, "<h2>Tensors</h2>\n<table><tr><th>#</th><th>tensor</th><th>family</th><th>status</th>"
             "<th>bit-identical</th><th>realistic</th><th>worst</th><th>observed</th></tr>\n");
  for (size_t i = 0; i < r->n_rows; i++) {
    const vd_noise_row *w = &r->rows[i];
    fprintf(f, "<tr class=\"%s\"><td>%zu</td><td>", w->status == VD_NOISE_BEYOND ? "beyond"
                                                     : w->status == VD_NOISE_MISSING ? "missing" : "",
            i);
    vd_cli_xml_str(f, w->name);
    fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td><td>%.3g</td><td>%.3g</td><td>", w->family,
            vd_noise_status_names[w->status], w->bitid ? "yes" : "", w->realistic, w->worst);
    if (w->observed >= 0) fprintf(f, "%.3g", w->observed);
    fprintf(f, "</td></tr>\n");
  }
  fprintf(f, "</table></body></html>\n");
  return close_out(f, path);
}
