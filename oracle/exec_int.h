/*
 * oracle/exec_int.h - private to oracle/: the single plan's tensor ids in
 * sorted order, by which the executor (exec.c) and the pair reducer
 * (exec_reduce.c) find the single tensor a lineage names.
 */
#ifndef VD_EXEC_INT_H
#define VD_EXEC_INT_H

#include <stdlib.h>

#include "../plans/plan.h"

typedef struct {
  int64_t id;
  uint32_t idx; /* its index in the plan's tensors */
} vd_exec_i_id;

static inline int vd_exec_i_id_cmp(const void *a, const void *b) {
  int64_t x = ((const vd_exec_i_id *)a)->id, y = ((const vd_exec_i_id *)b)->id;
  return x < y ? -1 : x > y;
}

/* ids[0, p->n_tensors) (caller storage): every tensor id of p with its
 * index, sorted by id.  O(n log n). */
static inline void vd_exec_i_ids_sort(const vd_plan_t *p, vd_exec_i_id *ids) {
  for (size_t i = 0; i < p->n_tensors; i++) ids[i] = (vd_exec_i_id){p->tensors[i].id, (uint32_t)i};
  qsort(ids, p->n_tensors, sizeof(*ids), vd_exec_i_id_cmp);
}

/* The entry of id in the sorted ids[0, n), or NULL. */
static inline const vd_exec_i_id *vd_exec_i_ids_find(const vd_exec_i_id *ids, size_t n, int64_t id) {
  vd_exec_i_id key = {id, 0};
  return bsearch(&key, ids, n, sizeof(*ids), vd_exec_i_id_cmp);
}

#endif
