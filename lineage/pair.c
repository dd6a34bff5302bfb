/*
 * lineage/pair.c - do a single-device plan and a parallel plan belong
 * together?  Checked once, up front, before any graph is built.
 *
 * Every lineage annotation of the parallel plan names a tensor of the
 * single plan by id (docs/plan-format.md).  Each file is validated alone by
 * the reader, which cannot see the other file, so three things are checked
 * here:
 *
 *  - an annotation whose slice has another number of dims than the single
 *    tensor it names is malformed input (the format maps a tensor to a
 *    slice of the same rank): exit 2, naming the tensor and both ranks;
 *  - a pair where most annotations do not fit (an id the single plan lacks,
 *    a slice outside the single tensor at the first or last replica and
 *    microbatch, a parameter, input or optimizer state annotated with a
 *    tensor of another role) is two plans of different models or configs:
 *    one line saying what differs, exit 2, instead of thousands of
 *    structural problems;
 *    a pair of the same model on a larger global batch is not refused: its
 *    weights fit and only the batch differs, and the lineage checks report
 *    it as BATCH (NOT EQUIVALENT, exit 1), naming the tensor and extents;
 *  - a few misfits are left to the lineage checks (lineage.c), which report
 *    each as a structural problem of a plan that otherwise fits: that is
 *    what an injected bug looks like.
 */
#include <stdio.h>
#include <string.h>

#include "../plans/idmap.h"
#include "lineage.h"

/* Boundary roles must match: a parameter is annotated with a parameter. */
static int boundary_role(vd_role r) {
  return r == VD_ROLE_INPUT || r == VD_ROLE_WEIGHT || r == VD_ROLE_OPTSTATE || r == VD_ROLE_LOSS;
}

/* The slice of pt at replica d and microbatch m lies inside st. */
static int slice_inside(const vd_tensor_t *pt, const vd_tensor_t *st, int32_t d, int32_t m) {
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS], k;
  vd_tensor_lineage_at(pt, d, pt->scope == VD_SCOPE_PER_MB ? m : -1, lo, hi, &k);
  for (int32_t i = 0; i < st->ndim; i++)
    if (lo[i] < 0 || hi[i] > st->shape[i] || lo[i] >= hi[i]) return 0;
  return 1;
}

/* A data input (role input, read per microbatch) whose slice fits at the
 * first replica and microbatch, and at the last one runs past the end of
 * the single tensor along exactly one dimension, inside it along every
 * other: the parallel plan reads more samples than the single one. */
static int runs_past_end(const vd_tensor_t *pt, const vd_tensor_t *st, int32_t d, int32_t m) {
  if (pt->role != VD_ROLE_INPUT || st->role != VD_ROLE_INPUT || st->scope != VD_SCOPE_PER_MB) return 0;
  if (!slice_inside(pt, st, 0, 0)) return 0;
  int64_t lo[VD_MAX_DIMS], hi[VD_MAX_DIMS], k;
  vd_tensor_lineage_at(pt, d, pt->scope == VD_SCOPE_PER_MB ? m : -1, lo, hi, &k);
  int past = 0;
  for (int32_t i = 0; i < st->ndim; i++) {
    if (lo[i] < 0 || lo[i] >= hi[i]) return 0;
    if (hi[i] > st->shape[i]) past++;
  }
  return past == 1;
}

enum { MIS_ID, MIS_ROLE, MIS_SLICE, MIS__COUNT };

vd_rc vd_lin_check_pair(const vd_plan_t *sp, const char *sm_path, const vd_plan_t *pp, const char *pm_path,
                        vd_diag *d) {
  vd_idmap_t ids;
  if (vd_idmap_init(&ids, sp->n_tensors) != VD_OK) return VD_OOM(d);
  for (size_t s = 0; s < sp->n_tensors; s++)
    if (vd_idmap_put(&ids, sp->tensors[s].id, (uint32_t)s, NULL) < 0) {
      vd_idmap_free(&ids);
      return VD_OOM(d);
    }
  int32_t last_d = pp->world.replicas > 0 ? pp->world.replicas - 1 : 0;
  int32_t last_m = pp->world.nm > 0 ? pp->world.nm - 1 : 0;
  size_t annotated = 0, mis[MIS__COUNT] = {0}, mis_state = 0;
  int batch_like = 0;
  char first[MIS__COUNT][256];
  vd_rc rc = VD_OK;
  for (size_t ti = 0; ti < pp->n_tensors && rc == VD_OK; ti++) {
    const vd_tensor_t *pt = &pp->tensors[ti];
    if (!pt->has_lin) continue;
    annotated++;
    const char *pn = vd_plan_s(pp, pt->name);
    uint32_t s;
    int kind = -1;
    char msg[256];
    if (!vd_idmap_get(&ids, pt->lin.full, &s)) {
      kind = MIS_ID;
      snprintf(msg, sizeof(msg), "'%s' names single tensor id %lld, which %s does not have", pn,
               (long long)pt->lin.full, sm_path);
    } else {
      const vd_tensor_t *st = &sp->tensors[s];
      const char *sn = vd_plan_s(sp, st->name);
      if (st->ndim != pt->ndim) {
        rc = VD_ERR(d, VD_EINPUT, pm_path, pn, "lin.full",
                    "tensor '%s' (id %lld, rank %d) has %d dim(s) but is annotated with single tensor '%s' "
                    "(id %lld) of %d dim(s); an annotation maps a tensor to a slice of the same rank%s",
                    pn, (long long)pt->id, pt->rank, pt->ndim, sn, (long long)st->id, st->ndim,
                    annotated == 1 ? " (do --sm and --pm come from the same model?)" : "");
        break;
      }
      if (boundary_role(pt->role) && st->role != pt->role) {
        kind = MIS_ROLE;
        snprintf(msg, sizeof(msg), "'%s' (%s) is annotated with '%s', a tensor of role %s", pn,
                 vd_role_names[pt->role], sn, vd_role_names[st->role]);
      } else if (!slice_inside(pt, st, 0, 0) || !slice_inside(pt, st, last_d, last_m)) {
        kind = MIS_SLICE;
        snprintf(msg, sizeof(msg), "the slice of '%s' leaves single tensor '%s'", pn, sn);
        mis_state += pt->role == VD_ROLE_WEIGHT || pt->role == VD_ROLE_OPTSTATE;
        batch_like |= runs_past_end(pt, st, last_d, last_m);
      }
    }
    if (kind >= 0 && mis[kind]++ == 0) memcpy(first[kind], msg, sizeof(msg)); /* report the first */
  }
  vd_idmap_free(&ids);
  if (rc != VD_OK) return rc;
  size_t bad = mis[MIS_ID] + mis[MIS_ROLE] + mis[MIS_SLICE];
  /* More misfits than fits: not a bug in one plan but two plans that do
   * not belong together. */
  /* ...unless only the batch differs: every weight and optimizer state
   * fits, and a data input read per microbatch runs past the end of its
   * single tensor along one dimension.  That is the same model run on
   * another global batch, a configuration bug the lineage checks report as
   * BATCH, naming the tensor and both extents (lineage.c, batch_mismatch):
   * NOT EQUIVALENT, exit 1. */
  if (annotated && 2 * bad > annotated && batch_like && !mis[MIS_ID] && !mis[MIS_ROLE] && !mis_state) return VD_OK;
  if (annotated && 2 * bad > annotated) {
    int k = mis[MIS_ID] ? MIS_ID : mis[MIS_ROLE] ? MIS_ROLE : MIS_SLICE;
    VD_FAIL(d, VD_EINPUT, pm_path, NULL, "lin",
            "the plans do not belong together: %zu of %zu lineage annotations do not fit %s "
            "(%zu name a tensor id it lacks, %zu a tensor of another role, %zu a slice outside the tensor; "
            "first: %s); check that --sm and --pm come from the same model and global batch",
            bad, annotated, sm_path, mis[MIS_ID], mis[MIS_ROLE], mis[MIS_SLICE], first[k]);
  }
  return VD_OK;
}
