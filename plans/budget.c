/*
 * plans/budget.c - what a plan asks of verdict, against what its file size
 * allows (common/limits.h says why each bound has its value).
 *
 * A node runs once per step of its rank that names its segment, and every
 * replica runs every stored rank's program: a few bytes of schedule or a
 * large `replicas` would otherwise buy work out of all proportion to the
 * file.  Two bounds, both proportional to the file:
 *  - executions of one replica (EXEC_PER_BYTE, EXEC_SLACK): a format rule,
 *    checked by the reader; beyond it the file is bad input (exit 2);
 *  - executions and annotated instances in all replicas
 *    (REPLICA_EXEC_PER_BYTE, REPLICA_EXEC_SLACK):
 *    the plan is well formed, but the verifier's lineage table and the
 *    oracle's runs are per replica; beyond it verify and exec stop at once
 *    with INCONCLUSIVE (exit 3) naming the limit (verifier/run.c,
 *    verifier/cmd_exec.c).
 * O(steps + nodes), no allocation driven by a count the file cannot back.
 */
#include <inttypes.h>
#include <stdio.h>

#include "../common/limits.h"
#include "../common/mem.h"
#include "idmap.h"
#include "plan.h"

vd_rc vd_plan_executions(const vd_plan_t *p, uint64_t stop, uint64_t *out, vd_diag *d) {
  vd_idmap_t runs; /* rank * n_segments + segment -> steps that run it */
  *out = 0;
  if (vd_idmap_init(&runs, p->n_steps) != VD_OK) return VD_OOM(d);
  vd_rc rc = VD_OK;
  uint32_t *count = vd_calloc(p->n_steps ? p->n_steps : 1, sizeof(*count));
  if (!count) rc = VD_OOM(d);
  uint32_t used = 0;
  for (int32_t r = 0; r < p->world.stored_ranks && rc == VD_OK; r++) {
    const vd_program_t *pr = &p->programs[r];
    for (uint32_t i = 0; i < pr->n_steps && rc == VD_OK; i++) {
      int64_t key = (int64_t)r * (int64_t)p->n_segments + p->steps[pr->step_off + i].segment;
      uint32_t at;
      int put = vd_idmap_put(&runs, key, used, &at);
      if (put < 0) rc = VD_OOM(d);
      else if (put == 0) count[used++] = 1;
      else count[at]++;
    }
  }
  uint64_t exec = 0;
  for (size_t i = 0; i < p->n_nodes && rc == VD_OK && exec <= stop; i++) {
    const vd_node_t *n = &p->nodes[i];
    uint32_t at;
    if (vd_idmap_get(&runs, (int64_t)n->rank * (int64_t)p->n_segments + n->segment, &at)) exec += count[at];
  }
  vd_free(count);
  vd_idmap_free(&runs);
  *out = exec;
  return rc;
}

vd_rc vd_plan_replica_work(const vd_plan_t *p, char *why, size_t n, vd_diag *d) {
  uint64_t budget = (uint64_t)VD_LIM_REPLICA_EXEC_SLACK + (uint64_t)VD_LIM_REPLICA_EXEC_PER_BYTE * p->file_bytes;
  uint64_t reps = p->world.replicas > 0 ? (uint64_t)p->world.replicas : 1, exec = 0;
  if (n) why[0] = '\0';
  VD_CHECK(vd_plan_executions(p, UINT64_MAX, &exec, d));
  /* Annotated instances count as executions: each is a lineage point per
   * replica, and one node may read 65535 of them. */
  uint64_t nm = p->world.nm > 0 ? (uint64_t)p->world.nm : 1;
  for (size_t t = 0; t < p->n_tensors; t++)
    if (p->tensors[t].has_lin) exec += p->tensors[t].scope == VD_SCOPE_PER_MB ? nm : 1;
  if (exec <= budget / reps) return VD_OK;
  if (n)
    snprintf(why, n,
             "%" PRIu64 " node executions and annotated instances in all %" PRIu64 " replicas pass "
             "REPLICA_EXEC_PER_BYTE (%d per byte of this %zu-byte plan, plus %d; `verdict limits`)",
             exec * reps < exec ? UINT64_MAX : exec * reps, reps, VD_LIM_REPLICA_EXEC_PER_BYTE, p->file_bytes,
             VD_LIM_REPLICA_EXEC_SLACK);
  return VD_OK;
}
