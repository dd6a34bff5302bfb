/*
 * common/issue.c - structural issues and diagnosis names (common/issue.h).
 */
#include "issue.h"

#include <stdio.h>
#include <string.h>

#include "mem.h"

const char *const vd_diagnosis_names[VD_DX__COUNT] = {
    "NONE", "MISSING_REDUCTION", "EXTRA_REDUCTION", "SCALE", "PERMUTED_SLICES", "WRONG_VALUE",
    "DATAFLOW", "SCHEDULE", "ALIGNMENT", "SHAPE", "BATCH"};

void vd_issue_init(vd_issue *is, const char *source, unsigned kind, const char *kind_name, vd_diagnosis dx) {
  memset(is, 0, sizeof(*is));
  is->diagnosis = dx;
  is->source = source;
  is->kind = kind;
  is->kind_name = kind_name;
  is->pnode = is->tensor = is->stensor = is->rank = -1;
  is->replica = is->mb = -1;
}

void vd_issue_vdetail(vd_issue *is, const char *fmt, va_list ap) {
  vsnprintf(is->detail, sizeof(is->detail), fmt, ap);
}

vd_rc vd_issue_push(vd_issue **v, size_t *n, size_t *cap, size_t max, size_t *dropped, const vd_issue *is) {
  if (max > 0 && *n >= max) {
    (*dropped)++;
    return VD_OK;
  }
  if (*n >= *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    vd_issue *nv = vd_realloc_array(*v, nc, sizeof(*nv));
    if (!nv) return VD_ENOMEM;
    *v = nv;
    *cap = nc;
  }
  (*v)[(*n)++] = *is;
  return VD_OK;
}
