/*
 * stages/stage.c - stage lifetime and the names of stage issue kinds.
 *
 * The cutting lives in cut.c, shape reduction in shape.c, canonical forms in
 * canon.c; this file only frees what they build.
 */
#include "stage.h"

#include <string.h>

#include "../common/mem.h"

const char *const vd_sissue_names[VD_SISSUE__COUNT] = {"dataflow", "schedule", "alignment", "shape", "limit"};

void vd_stage_free(vd_stage *st) {
  if (!st) return;
  VD_FREE_ALL(st->vals, st->nodes, st->targets, st->idx, st->ovr, st->mb_list);
  memset(st, 0, sizeof(*st));
}

void vd_stage_set_free(vd_stage_set *set) {
  if (!set) return;
  for (size_t i = 0; i < set->n_stages; i++) vd_stage_free(&set->stages[i]);
  vd_free(set->stages);
  vd_free(set->issues);
  memset(set, 0, sizeof(*set));
}
