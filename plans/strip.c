/*
 * plans/strip.c - removes a parallel plan's intermediate lineage annotations,
 * keeping only its boundary (docs/plan-format.md, "Boundary-only plans").
 *
 * The boundary is what a captured training program knows without tracing
 * every intermediate tensor: data inputs, parameters and optimizer state
 * (whose one annotation states both the initial and the updated value), the
 * loss, and every tensor that no node writes (an input of the iteration, such
 * as the loss gradient seed).  Everything else (activations, gradients,
 * accumulators, communication buffers) loses its annotation; the verifier
 * then infers candidate lineages for them (lineage/infer.c).
 *
 * Why "no writer" is boundary: an unwritten tensor's only value is its
 * initial one, a hypothesis given by the plan; nothing can infer it.
 */
#include "plan.h"

#include <string.h>

#include "../common/mem.h"

int vd_plan_is_boundary(const vd_plan_t *p, const uint8_t *written, uint32_t t) {
  const vd_tensor_t *x = &p->tensors[t];
  if (x->role == VD_ROLE_INPUT || x->role == VD_ROLE_WEIGHT || x->role == VD_ROLE_OPTSTATE ||
      x->role == VD_ROLE_LOSS)
    return 1;
  return !written[t];
}

vd_rc vd_plan_written(const vd_plan_t *p, uint8_t **written, vd_diag *d) {
  uint8_t *w = vd_calloc(p->n_tensors ? p->n_tensors : 1, 1);
  if (!w) return VD_OOM(d);
  for (size_t i = 0; i < p->n_nodes; i++) {
    const vd_node_t *n = &p->nodes[i];
    const uint32_t *out = vd_node_outputs(p, n);
    for (uint32_t k = 0; k < n->n_out; k++) w[out[k]] = 1;
  }
  *written = w;
  return VD_OK;
}

vd_rc vd_plan_strip(vd_plan_t *p, size_t *n_kept, size_t *n_stripped, vd_diag *d) {
  uint8_t *w = NULL;
  VD_CHECK(vd_plan_written(p, &w, d));
  size_t kept = 0, stripped = 0;
  for (size_t t = 0; t < p->n_tensors; t++) {
    vd_tensor_t *x = &p->tensors[t];
    if (!x->has_lin) continue;
    if (vd_plan_is_boundary(p, w, (uint32_t)t)) {
      kept++;
      continue;
    }
    x->has_lin = 0;
    memset(&x->lin, 0, sizeof(x->lin));
    stripped++;
  }
  vd_free(w);
  if (n_kept) *n_kept = kept;
  if (n_stripped) *n_stripped = stripped;
  return VD_OK;
}
