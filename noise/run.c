/*
 * noise/run.c - one analysis: graphs, lineage inference and table, values
 * and bounds (prop.c), rows (map.c).
 *
 * The lineages are those the verifier works with: the plan's annotations and
 * the candidates lineage inference finds for the unannotated tensors
 * (lineage/infer.c).  Candidates are not proven here: a candidate that does
 * not hold shows up as a deviation beyond rounding, which is what a compare
 * is for.  Where inference stopped (a partial sum an operator cannot pass, a
 * constant factor) is kept: it is the node the verifier's hint names, and
 * the values past it have no single-device counterpart to compare with.
 */
#include <stdio.h>
#include <string.h>

#include "../common/mem.h"
#include "../common/text.h"
#include "noise_int.h"

static void ctx_free(vd_noise_ctx *c) {
  if (c->val && c->own)
    for (size_t v = 0; v < c->gpx.n_values; v++)
      if (c->own[v]) vd_free(c->val[v]);
  if (c->ewv)
    for (size_t v = 0; v < c->gpx.n_values; v++) vd_free(c->ewv[v]);
  if (c->erv)
    for (size_t v = 0; v < c->gpx.n_values; v++) vd_free(c->erv[v]);
  VD_FREE_ALL(c->erv, c->ewv, c->val, c->own, c->dumped, c->bitid, c->ere, c->ewc, c->nrm, c->known, c->inferred);
  vd_lin_free(&c->lt);
  vd_graph_free(&c->gs);
  vd_graph_free(&c->gp0);
  vd_graph_free(&c->gpx);
}

void vd_noise_result_free(vd_noise_result *r) {
  if (!r) return;
  vd_free(r->rows);
  memset(r, 0, sizeof(*r));
}

static void describe_stuck(const vd_noise_ctx *c, vd_noise_result *r) {
  const vd_lin_infer_stats *is = &r->infer;
  r->stuck[0] = '\0';
  if (is->stuck_node < 0 || (size_t)is->stuck_node >= c->pp->n_nodes) return;
  const vd_node_t *n = &c->pp->nodes[is->stuck_node];
  char why[256];
  vd_lin_stuck_phrase(is, why, sizeof(why));
  char origin[200] = "";
  if (is->stuck_why == VD_LIN_STUCK_FACTOR && is->stuck_origin >= 0 && (size_t)is->stuck_origin < c->pp->n_nodes) {
    const vd_node_t *on = &c->pp->nodes[is->stuck_origin];
    vd_text_fmt(origin, sizeof(origin), "; the factor comes from %s '%.120s'", vd_node_op(c->pp, on),
             vd_plan_s(c->pp, on->name));
  }
  /* cut between characters (common/text.h): names are any UTF-8 */
  vd_text_fmt(r->stuck, sizeof(r->stuck), "%s '%.120s' on rank %d: %s%s", vd_node_op(c->pp, n),
           vd_plan_s(c->pp, n->name), n->rank, why, origin);
}

/* The first point of departure (map.c found the node): "OP 'NAME' on rank R". */
static void describe_departure(const vd_noise_ctx *c, vd_noise_result *r) {
  r->departure[0] = '\0';
  r->departure_is_stuck = 0;
  if (r->departure_node < 0 || (size_t)r->departure_node >= c->pp->n_nodes) return;
  const vd_node_t *n = &c->pp->nodes[r->departure_node];
  r->departure_is_stuck = r->infer.stuck_node == r->departure_node;
  snprintf(r->departure, sizeof(r->departure), "%s '%.200s' on rank %d", vd_node_op(c->pp, n),
           vd_plan_s(c->pp, n->name), n->rank);
}

vd_rc vd_noise_run(const vd_plan_t *sp, vd_plan_t *pp, const vd_noise_dump *sd, const vd_noise_dump *pd,
                   const vd_noise_opts *o, vd_noise_result *r, vd_diag *d) {
  memset(r, 0, sizeof(*r));
  r->first_beyond = r->first_missing = -1;
  r->departure_node = -1;
  r->compared = sd != NULL;
  vd_noise_ctx c;
  memset(&c, 0, sizeof(c));
  c.sp = sp;
  c.pp = pp;
  c.sd = sd;
  c.pd = pd;
  c.o = o;
  vd_rc rc = VD_OK;
  if (sd && (sp->world.nm > 1 || pp->world.nm > 1)) {
    rc = vd_diag_set(d, VD_EINPUT, __FILE__, __LINE__, o->pm, "world", "nm",
                     "compare needs plans whose microbatches are unrolled (nm = 1, as tools/torch2plan "
                     "writes them): a dump has no microbatch index");
    goto done;
  }
  vd_graph_opts all = {.expand_replicas = 1}, one = {.expand_replicas = 0};
  if ((rc = vd_graph_build(sp, &all, &c.gs, d)) != VD_OK) {
    vd_diag_set_file(d, o->sm);
    goto done;
  }
  if ((rc = vd_graph_build(pp, &one, &c.gp0, d)) != VD_OK || (rc = vd_graph_build(pp, &all, &c.gpx, d)) != VD_OK) {
    vd_diag_set_file(d, o->pm);
    goto done;
  }
  if ((rc = vd_lin_infer(&c.gs, &c.gp0, pp, &c.inferred, &r->infer, d)) != VD_OK) goto done;
  /* The mapping compares a dump with its single value's: a candidate with a
   * factor (f x the part) would need one more bound; left unmapped. */
  for (size_t ti = 0; ti < pp->n_tensors; ti++)
    if (c.inferred && c.inferred[ti] && pp->tensors[ti].lin.factor != 0.0) {
      pp->tensors[ti].has_lin = 0;
      c.inferred[ti] = 0;
      if (r->infer.n_inferred) r->infer.n_inferred--;
    }
  if ((rc = vd_lin_build(&c.gs, &c.gp0, &c.lt, d)) != VD_OK) goto done;
  if ((rc = vd_noise_i_propagate(&c, d)) != VD_OK) {
    vd_diag_set_file(d, pd ? "the parallel dump" : o->pm);
    goto done;
  }
  if ((rc = vd_noise_i_map(&c, r, d)) != VD_OK) goto done;
  r->n_parallel_values = c.gpx.n_values;
  r->n_evaluated = c.n_evaluated;
  describe_stuck(&c, r);
  describe_departure(&c, r);
done:
  ctx_free(&c);
  return rc;
}
