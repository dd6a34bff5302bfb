/*
 * verifier/report_html.c - the run as one self-contained HTML page
 * (--html FILE): summary, findings, and for each finding a picture of its
 * representative stage drawn by Graphviz.
 *
 * The page needs no network: the style sheet is inline and the pictures
 * are inline SVG.  Each picture is the stage's dot text
 * (verifier/report_dot.c) rendered by running Graphviz's `dot -Tsvg` as a
 * child process (posix_spawnp, no shell) on temporary files; without
 * Graphviz the page says so where the picture would be and the run goes on.
 * The page is well-formed XML (XHTML served as HTML), so tests and tools
 * can parse it with an XML parser.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/mem.h"
#include "../common/outfile.h"
#include "cli.h"
#include "provenance.h"
#include "report.h"

extern char **environ;

/* Writes Graphviz's <svg ...> opening tag tag[0..n) to f without its fixed
 * width and height attributes, which made a wide picture overflow the page
 * and clip its right edge (where the parallel subgraph and its red
 * diverging node are drawn): the picture gets its natural width as a style
 * with max-width 100%, so the viewBox scales it down to the page and it is
 * never clipped. */
static void fit_svg_tag(const char *tag, size_t n, FILE *f) {
  char width[64] = "";
  for (size_t i = 0; i < n;) {
    int is_w = i + 8 <= n && !strncmp(tag + i, " width=\"", 8);
    int is_h = i + 9 <= n && !strncmp(tag + i, " height=\"", 9);
    if (is_w || is_h) {
      size_t v = i + (is_w ? 8 : 9), e = v;
      while (e < n && tag[e] != '"') e++;
      if (is_w && e - v < sizeof(width)) snprintf(width, sizeof(width), "%.*s", (int)(e - v), tag + v);
      i = e < n ? e + 1 : n;
      continue;
    }
    fputc(tag[i++], f);
  }
  /* the attribute values are Graphviz's numbers with a unit ("412pt") */
  int plain = width[0] != '\0';
  for (const char *c = width; *c; c++)
    if (!((*c >= '0' && *c <= '9') || *c == '.' || (*c >= 'a' && *c <= 'z') || *c == '%')) plain = 0;
  fprintf(f, " style=\"display:block;max-width:100%%;height:auto;%s%s%s\"", plain ? "width:" : "", plain ? width : "",
          plain ? ";" : "");
}

/* Runs dot -Tsvg on stage i and copies the <svg> element into f.  Returns 0
 * on success; otherwise writes why into why. */
static int inline_svg(const vd_run *r, size_t i, int32_t hl, FILE *f, char *why, size_t n_why) {
  char in[] = "/tmp/verdict-dot-XXXXXX", out[] = "/tmp/verdict-svg-XXXXXX";
  int fi = mkstemp(in), fo = -1, ok = -1;
  if (fi < 0) {
    snprintf(why, n_why, "cannot create a temporary file");
    return -1;
  }
  fo = mkstemp(out);
  FILE *df = fdopen(fi, "w");
  if (fo < 0 || !df) {
    snprintf(why, n_why, "cannot create a temporary file");
    if (df) fclose(df);
    else close(fi);
    if (fo >= 0) close(fo);
    unlink(in);
    if (fo >= 0) unlink(out);
    return -1;
  }
  vd_report_dot(r, i, hl, df);
  fclose(df);
  close(fo);
  char *argv[] = {"dot", "-Tsvg", "-o", out, in, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int sp = posix_spawnp(&pid, "dot", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  if (sp != 0) {
    snprintf(why, n_why, "Graphviz 'dot' could not be run (install the graphviz package)");
  } else if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(why, n_why, "Graphviz 'dot' failed on the stage graph (exit status %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  } else {
    FILE *sf = fopen(out, "r");
    char *svg = NULL;
    size_t len = 0;
    if (sf) {
      FILE *m = open_memstream(&svg, &len);
      char buf[8192];
      size_t nr;
      while (m && (nr = fread(buf, 1, sizeof(buf), sf)) > 0) fwrite(buf, 1, nr, m);
      if (m) fclose(m);
      fclose(sf);
    }
    if (!svg) {
      snprintf(why, n_why, "cannot read Graphviz's output");
    } else {
      /* Skip the XML declaration, doctype and comments before <svg. */
      char *at = strstr(svg, "<svg");
      char *end = at ? strchr(at, '>') : NULL;
      if (!end) {
        snprintf(why, n_why, "Graphviz wrote no <svg> element");
      } else {
        fit_svg_tag(at, (size_t)(end - at), f);
        fwrite(end, 1, len - (size_t)(end - svg), f);
        ok = 0;
      }
    }
    free(svg); /* open_memstream's buffer comes from the C library */
  }
  unlink(in);
  unlink(out);
  return ok;
}

static const char *const CSS =
    "body{font-family:Helvetica,Arial,sans-serif;margin:2em;color:#222;max-width:1400px}"
    "h1{font-size:1.6em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}"
    ".v{display:inline-block;padding:.2em .6em;border-radius:4px;color:#fff;font-weight:bold}"
    ".v0{background:#2b7a2b}.v1{background:#c00000}.v3{background:#b07000}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}"
    ".hint{background:#fff8e0;border-left:4px solid #e0b000;padding:.5em 1em}"
    ".pic{overflow:auto;border:1px solid #ddd;padding:.5em;margin:.5em 0}.sha{font-family:monospace}"
    "pre{background:#f6f6f6;padding:.8em;overflow:auto;font-size:.85em}"
    ".finding{margin-bottom:2em}";

static void html_head(FILE *f, int code) {
  const char *word = code == 0 ? "EQUIVALENT" : code == 1 ? "NOT EQUIVALENT" : "INCONCLUSIVE";
  fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
        "<title>verdict report</title>\n<style>",
        f);
  fputs(CSS, f);
  fputs("</style>\n</head>\n<body>\n<h1>verdict report</h1>\n", f);
  fprintf(f, "<p><span class=\"v v%d\" id=\"verdict\">%s</span></p>\n", code, word);
}

/* The summary row of the stages: how many were proven, failed, were not
 * solved and why; then the structural entries' row. */
static void html_stage_rows(const vd_run *r, FILE *f) {
  size_t unsolved = r->n_skipped_large + r->n_skipped_decided + r->n_demoted + r->n_interrupted;
  size_t other = r->n_inconclusive > unsolved ? r->n_inconclusive - unsolved : 0;
  fprintf(f, "<tr><th>stages (proof obligations)</th><td id=\"stages\">%zu: %zu proven equivalent, %zu failing",
          r->set.n_stages, r->n_equiv, r->n_not_equiv);
  if (other) fprintf(f, ", %zu inconclusive", other);
  if (r->n_skipped_decided)
    fprintf(f, ", %zu not solved because a structural problem of the plan already decides", r->n_skipped_decided);
  if (r->n_skipped_large) fprintf(f, ", %zu not solved (larger than a failing one)", r->n_skipped_large);
  if (r->n_demoted) fprintf(f, ", %zu failures not reported (resting on an inferred lineage)", r->n_demoted);
  if (r->n_interrupted) fprintf(f, ", %zu not solved (run interrupted)", r->n_interrupted);
  if (r->n_represented > r->set.n_stages)
    fprintf(f, "; by symmetry they stand for %zu per-replica, per-microbatch stages", r->n_represented);
  fprintf(f, "</td></tr>\n<tr><th>structural entries</th><td>%zu</td></tr>\n", r->n_issues + r->n_issues_dropped);
}

static void html_summary(const vd_run *r, const vd_run_opts *o, const vd_findings *fs, FILE *f) {
  fputs("<table class=\"summary\">\n<tr><th>single-device plan</th><td>", f);
  vd_cli_xml_str(f, o->sm);
  fputs("</td></tr>\n<tr><th>parallel plan</th><td>", f);
  vd_cli_xml_str(f, o->pm);
  fprintf(f, "</td></tr>\n<tr><th>findings</th><td id=\"n-findings\">%zu</td></tr>\n", fs->n);
  html_stage_rows(r, f);
  vd_provenance pv;
  vd_prov_build(r, &pv);
  vd_prov_html(r, o, &pv, f);
  fputs("<tr><th>time</th><td>", f);
  for (int i = 0; i < VD_RUN_PHASES; i++) fprintf(f, "%s%s %.3f s", i ? ", " : "", vd_run_phase_names[i], r->phase_s[i]);
  fprintf(f, "; peak memory %.1f MB; %d thread(s)</td></tr>\n", (double)r->peak_bytes / 1e6, r->threads_used);
  fprintf(f, "<tr><th>tool</th><td>verdict %s</td></tr>\n</table>\n", VD_VERSION_STRING);
}

/* The finding's node cell: side, operator, name, id and why it diverges. */
static void html_finding_node(const vd_run *r, const vd_finding *fd, FILE *f) {
  if (fd->pnode < 0) {
    fputs("-", f);
    return;
  }
  const vd_plan_t *p = fd->side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[fd->pnode];
  fprintf(f, "%s ", fd->side ? "parallel" : "single");
  vd_cli_xml_str(f, vd_node_op(p, pn));
  fputs(" '", f);
  vd_cli_xml_str(f, vd_plan_s(p, pn->name));
  fprintf(f, "' (node %lld)", (long long)pn->id);
  if (fd->why[0]) {
    fputs(": ", f);
    vd_cli_xml_str(f, fd->why);
  }
}

/* Finding k (0-based): its table, hint, the picture of its stage and the
 * representative in text. */
static void html_finding(const vd_run *r, const vd_finding *fd, size_t k, FILE *f) {
  char title[512], fp[1024];
  vd_rep_fmt_title(title, sizeof(title), r, fd);
  vd_rep_fmt_footprint(fp, sizeof(fp), fd);
  fprintf(f, "<div class=\"finding\" id=\"finding-%zu\">\n<h2>Finding %zu: ", k + 1, k + 1);
  vd_cli_xml_str(f, title);
  fputs("</h2>\n<table>\n<tr><th>diagnosis</th><td class=\"diagnosis\">", f);
  vd_cli_xml_str(f, vd_diagnosis_names[fd->diagnosis]);
  if (!fd->structural && r->verdicts[fd->rep].factor[0]) {
    fputs(" (", f);
    vd_cli_xml_str(f, r->verdicts[fd->rep].factor);
    fputs(")", f);
  }
  fputs("</td></tr>\n<tr><th>node</th><td class=\"node\">", f);
  html_finding_node(r, fd, f);
  fputs("</td></tr>\n<tr><th>footprint</th><td>", f);
  vd_cli_xml_str(f, fp);
  fputs("</td></tr>\n</table>\n<p class=\"hint\">", f);
  vd_cli_xml_str(f, vd_findings_hint(fd->diagnosis));
  fputs("</p>\n", f);
  if (!fd->structural) {
    char why[256];
    fprintf(f, "<h3>Stage %zu</h3>\n<div class=\"pic\">\n", fd->rep);
    if (inline_svg(r, fd->rep, fd->local_node, f, why, sizeof(why)) != 0) {
      fputs("<p><em>", f);
      vd_cli_xml_str(f, why);
      fputs("</em></p>", f);
      fprintf(stderr, "verdict: --html: stage %zu: %s\n", fd->rep, why);
    }
    fputs("\n</div>\n", f);
  }
  fputs("<details><summary>the representative in text</summary>\n<pre>", f);
  vd_report_xml_text_finding(r, fd, f);
  fputs("</pre></details>\n</div>\n", f);
}

static void html_findings(const vd_run *r, const vd_findings *fs, FILE *f) {
  fputs("<h2>Findings</h2>\n<p>Failures grouped by root cause, earliest first (topological order of the diverging "
        "node).  In each picture the single-device subgraph is on the left, the parallel one on the right; dashed "
        "edges are lineages; the diverging node is filled red, the copies that disagree are outlined red, and the "
        "target edges carry the counterexample's exact values.</p>\n<ol>\n",
        f);
  char title[512];
  for (size_t k = 0; k < fs->n; k++) {
    vd_rep_fmt_title(title, sizeof(title), r, &fs->v[k]);
    fprintf(f, "<li><a href=\"#finding-%zu\">", k + 1);
    vd_cli_xml_str(f, title);
    fputs("</a></li>\n", f);
  }
  fputs("</ol>\n", f);
  for (size_t k = 0; k < fs->n; k++) html_finding(r, &fs->v[k], k, f);
}

/* One entry per distinct reason (a structural failure leaves hundreds of
 * stages unsolved for the same reason).  Returns 0 when out of memory. */
static int html_inconclusive(const vd_run *r, FILE *f) {
  size_t *order = NULL, *groups = NULL, ng = 0;
  if (vd_rep_inconclusive_groups(r, 0, &order, &groups, &ng) != VD_OK) return 0;
  fputs("<h2>Inconclusive stages</h2>\n<ul id=\"inconclusive\">\n", f);
  for (size_t g = 0; g < ng; g++) {
    size_t a = groups[3 * g + 1], b = groups[3 * g + 2];
    if (b - a == 1) fprintf(f, "<li>stage %zu: ", order[a]);
    else fprintf(f, "<li>%zu stages: ", b - a);
    vd_cli_xml_str(f, r->verdicts[order[a]].reason);
    if (b - a > 1) {
      fputs(" (stages", f);
      for (size_t j = a; j < b && j < a + 24; j++) fprintf(f, " %zu", order[j]);
      if (b - a > 24) fputs(" ...", f);
      fputs(")", f);
    }
    fputs("</li>\n", f);
  }
  fputs("</ul>\n", f);
  vd_free(order);
  vd_free(groups);
  return 1;
}

static void html_limits(const vd_run *r, FILE *f) {
  fputs("<h2>Limits reached (INCONCLUSIVE)</h2>\n<ul>\n", f);
  for (size_t i = 0; i < r->n_limits; i++) {
    fputs("<li>", f);
    vd_cli_xml_str(f, r->limits[i].detail);
    fputs("</li>\n", f);
  }
  fputs("</ul>\n", f);
}

vd_rc vd_report_html(const vd_run *r, const vd_run_opts *o, const char *path, vd_diag *d) {
  vd_findings fs;
  VD_CHECK(vd_findings_build(r, &fs, d));
  vd_outfile of; /* common/outfile.h */
  vd_rc orc = vd_outfile_open(&of, path, 0, d);
  if (orc != VD_OK) {
    vd_findings_free(&fs);
    return orc;
  }
  FILE *f = of.fp;
  html_head(f, vd_run_exit_code(r));
  html_summary(r, o, &fs, f);
  if (fs.n) html_findings(r, &fs, f);
  if (r->n_inconclusive && !html_inconclusive(r, f)) {
    vd_findings_free(&fs);
    fclose(f);
    return VD_OOM(d);
  }
  if (r->n_limits) html_limits(r, f);
  fputs("</body>\n</html>\n", f);
  vd_findings_free(&fs);
  return vd_outfile_commit(&of, d);
}
