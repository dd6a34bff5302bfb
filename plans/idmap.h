/*
 * plans/idmap.h - open-addressing hash map from int64 keys to uint32 values.
 *
 * Used by the plan reader and validator to resolve and de-duplicate file ids
 * in O(1) per lookup (the linear vd_plan_find_* must not be called per
 * record: 300k tensors would make that quadratic).  Any int64 is a valid key
 * (ids may be negative); values are dense indices below UINT32_MAX.
 * Linear probing, power-of-two capacity, load factor at most 1/2.
 * Not thread-safe; one map per user.
 */
#ifndef VD_IDMAP_H
#define VD_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"

typedef struct {
  int64_t *keys;
  uint32_t *vals; /* value + 1; 0 marks an empty slot */
  size_t cap;     /* power of two, or 0 */
  size_t n;
} vd_idmap_t;

/* Initializes an empty map sized for `expect` keys (may grow later). */
vd_rc vd_idmap_init(vd_idmap_t *m, size_t expect);
/* Frees the map; accepts NULL and zeroed maps. */
void vd_idmap_free(vd_idmap_t *m);
/* Inserts key -> val unless key is present.  *old (may be NULL) gets the
 * existing value and the return is 1 if the key was already there, 0 if it
 * was inserted, -1 on ENOMEM.  val must be < UINT32_MAX. */
int vd_idmap_put(vd_idmap_t *m, int64_t key, uint32_t val, uint32_t *old);
/* Looks key up: 1 and *val if present, else 0. */
int vd_idmap_get(const vd_idmap_t *m, int64_t key, uint32_t *val);

#endif
