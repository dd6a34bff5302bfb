/*
 * common/slots.h - the shared arithmetic of verdict's open-addressing
 * tables: a power-of-two array of slots kept at most half full, doubled
 * (from a first size of the table's choosing) when an insertion would pass
 * that, probed linearly.  Each table keeps its own key type, hash and
 * empty-slot marker; only the steps that do not depend on them are here.
 */
#ifndef VD_SLOTS_H
#define VD_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "mem.h"

/* 1 when a table of cap slots holding n keys must grow before one more. */
static inline int vd_slots_crowded(size_t n, size_t cap) { return 2 * (n + 1) > cap; }

/* The slot count after growing a table of cap slots (0: not yet allocated). */
static inline size_t vd_slots_grown(size_t cap, size_t first) { return cap ? 2 * cap : first; }

/* The slot probed after slot j. */
static inline size_t vd_slots_next(size_t j, size_t cap) { return (j + 1) & (cap - 1); }

/* 0 when both arrays of a grown table (two per slot, e.g. keys and
 * values) were allocated; otherwise frees the one that was and returns -1
 * (ENOMEM). */
static inline int vd_slots_both(void *a, void *b) {
  if (a && b) return 0;
  vd_free(a);
  vd_free(b);
  return -1;
}

/* A table of two parallel arrays, a key and a value per slot: their element
 * sizes, the hash of a key, and whether a slot (its key and value) is used. */
typedef struct {
  size_t key_size, val_size;
  uint64_t (*hash)(const void *key);
  int (*used)(const void *key, const void *val);
} vd_slots_kind;

/* Moves the used slots of *key / *val (*cap slots) into new zeroed arrays
 * of vd_slots_grown(*cap, first) slots, in slot order, and frees the old
 * ones; -1 on ENOMEM (the table is unchanged).  Pass the arrays as
 * (void **)&t->key, as VD_GROW does. */
int vd_slots_regrow(const vd_slots_kind *kind, void **key, void **val, size_t *cap, size_t first);

#endif
