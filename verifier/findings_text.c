/*
 * verifier/findings_text.c - the words of a finding that every report
 * format prints the same way (findings.h): the plain-language hint of
 * each diagnosis class, the footprint line (ranks, microbatches, layers,
 * stages) and the title (class, operator, name, source line, call stack).
 */
#include "findings.h"

#include <string.h>

#include "../common/text.h"
#include "../ops/ops.h"

/* ---- hints ------------------------------------------------------------- */

static const char *const hints[VD_DX__COUNT] = {
    [VD_DX_NONE] = "",
    [VD_DX_MISSING_REDUCTION] =
        "the copies add up to the right value: a sum over ranks is missing; look for a dropped all_reduce or "
        "reduce_scatter after a row-parallel matmul, or a gradient not reduced over its TP, DP or tied-weight group",
    [VD_DX_EXTRA_REDUCTION] =
        "each copy is the value times the number of copies: a reduction runs twice, or over a value that was "
        "already whole (all_reduce of a replicated tensor)",
    [VD_DX_SCALE] =
        "each copy is the right value times a constant factor (named): look for a scaling constant, an average "
        "instead of a sum (or the reverse) in a gradient reducer, a loss normalized by a local count",
    [VD_DX_PERMUTED_SLICES] =
        "a copy holds the right values of another slice: look for an all_gather or concat in process-group "
        "order instead of slice order, or crossed send/recv endpoints",
    [VD_DX_WRONG_VALUE] =
        "the copy differs in a way that is not a sum, a factor or a permutation: look at the named node's "
        "constants and inputs on the flagged ranks (a changed epsilon, exponent, offset, a duplicated input)",
    [VD_DX_DATAFLOW] =
        "a value is read that nothing produces, or comes from the wrong rank: look for a removed collective "
        "whose consumers remain, a send/recv pair with the wrong peer, or a ZeRO parameter all_gather missing "
        "after the optimizer step",
    [VD_DX_SCHEDULE] =
        "an operation runs before its inputs are complete: look for a gradient reducer (DDP bucket hook, "
        "ZeRO reduce) launched before the last microbatch's backward",
    [VD_DX_ALIGNMENT] =
        "microbatches run different programs, or a per-microbatch value is used once per iteration: look at "
        "the pipeline schedule and at state kept across microbatches",
    [VD_DX_SHAPE] =
        "a node's output shape does not follow from its inputs: look for a collective replaced by another "
        "(all_reduce vs all_gather vs reduce_scatter) or a wrong split dimension",
    [VD_DX_BATCH] =
        "the two plans read different global batches (sample count or order): compare the data loader, "
        "global batch size and microbatch count of the two configurations",
};

const char *vd_findings_hint(vd_diagnosis dx) { return dx < VD_DX__COUNT && hints[dx] ? hints[dx] : ""; }

/* ---- one-line texts ------------------------------------------------------ */

static size_t put_list_i64(char *b, size_t n, size_t at, const int64_t *v, size_t k) {
  for (size_t i = 0; i < k && at < n; i++) {
    if (i == 16 && k > 20) {
      at += (size_t)snprintf(b + at, n - at, ",... (%zu in all)", k);
      break;
    }
    at += (size_t)snprintf(b + at, n - at, "%s%lld", i ? "," : "", (long long)v[i]);
  }
  return at;
}

void vd_rep_fmt_footprint(char *buf, size_t n, const vd_finding *f) {
  int64_t tmp[64];
  size_t at = (size_t)snprintf(buf, n, "ranks ");
  if (!f->n_ranks) at += (size_t)snprintf(buf + at, at < n ? n - at : 0, "-");
  at = put_list_i64(buf, n, at, f->ranks, f->n_ranks);
  if (at < n) at += (size_t)snprintf(buf + at, n - at, "; microbatches ");
  if (!f->n_mbs && at < n) at += (size_t)snprintf(buf + at, n - at, "- (once per iteration)");
  size_t k = f->n_mbs < 64 ? f->n_mbs : 64;
  for (size_t i = 0; i < k; i++) tmp[i] = f->mbs[i];
  at = put_list_i64(buf, n, at, tmp, k);
  if (at < n) at += (size_t)snprintf(buf + at, n - at, "; layers ");
  if (!f->n_layers && at < n) at += (size_t)snprintf(buf + at, n - at, "-");
  k = f->n_layers < 64 ? f->n_layers : 64;
  for (size_t i = 0; i < k; i++) tmp[i] = f->layers[i];
  at = put_list_i64(buf, n, at, tmp, k);
  if (at < n && f->n_stages)
    at += (size_t)snprintf(buf + at, n - at, "; %zu failing stage%s (%zu per replica)", f->n_stages,
                           f->n_stages == 1 ? "" : "s", f->n_instances);
  if (at < n && f->n_issues)
    snprintf(buf + at, n - at, "; %zu structural entr%s", f->n_issues, f->n_issues == 1 ? "y" : "ies");
}

const char *vd_rep_finding_stack(const vd_run *r, const vd_finding *f) {
  if (f->pnode < 0) return "";
  const vd_plan_t *p = f->side ? &r->pp : &r->sp;
  return vd_plan_s(p, p->nodes[f->pnode].stack);
}

void vd_rep_fmt_title(char *buf, size_t n, const vd_run *r, const vd_finding *f) {
  if (f->pnode < 0) {
    vd_text_fmt(buf, n, "%s (%s)", vd_diagnosis_names[f->diagnosis], f->why[0] ? VD_SHOW(f->why) : "no single node");
    return;
  }
  const vd_plan_t *p = f->side ? &r->pp : &r->sp;
  const vd_node_t *pn = &p->nodes[f->pnode];
  char src[160] = "";
  if (pn->src) vd_text_fmt(src, sizeof(src), ", %s", VD_SHOW(vd_plan_s(p, pn->src)));
  /* the user's call stack (a captured program's callers), innermost first,
   * on the one line that every format shows: which call of which layer */
  char stack[400] = "";
  if (pn->stack) {
    const char *st = vd_plan_s(p, pn->stack);
    size_t at = 0;
    for (int k = 0; *st && k < 4 && at + 8 < sizeof(stack); k++) {
      const char *e = strchr(st, '\n');
      size_t len = e ? (size_t)(e - st) : strlen(st);
      at += (size_t)snprintf(stack + at, sizeof(stack) - at, "%s%.*s", k ? " < " : "; stack: ", (int)len, st);
      if (!e) break;
      st = e + 1;
    }
  }
  vd_text_fmt(buf, n, "%s at %s%s '%s' (node %lld%s%s)", vd_diagnosis_names[f->diagnosis], f->side ? "" : "single ",
              VD_SHOW(vd_node_op(p, pn)), VD_SHOW(vd_plan_s(p, pn->name)), (long long)pn->id, src, VD_SHOW(stack));
}

void vd_rep_fmt_via(char *buf, size_t n, const vd_run *r, const vd_finding *f) {
  buf[0] = '\0';
  if (f->via_pnode < 0) return;
  const vd_node_t *pn = &r->pp.nodes[f->via_pnode];
  char src[160] = "", mb[24] = "";
  if (pn->src) vd_text_fmt(src, sizeof(src), ", %s", VD_SHOW(vd_plan_s(&r->pp, pn->src)));
  if (f->via_mb >= 0) snprintf(mb, sizeof(mb), " mb %d", f->via_mb);
  vd_text_fmt(buf, n, "rank %lld%s %s '%s' (node %lld%s)", (long long)f->via_rank, mb, VD_SHOW(vd_node_op(&r->pp, pn)),
              VD_SHOW(vd_plan_s(&r->pp, pn->name)), (long long)pn->id, src);
}
