/*
 * common/slots.c - the growth of slots.h's two-array open-addressing
 * tables: one reinsertion loop for every key and value type.
 */
#include "slots.h"

#include <string.h>

int vd_slots_regrow(const vd_slots_kind *kind, void **key, void **val, size_t *cap, size_t first) {
  size_t nc = vd_slots_grown(*cap, first);
  unsigned char *nk = vd_calloc(nc, kind->key_size);
  unsigned char *nv = vd_calloc(nc, kind->val_size);
  if (vd_slots_both(nk, nv)) return -1;
  const unsigned char *ok = *key, *ov = *val;
  size_t ks = kind->key_size, vs = kind->val_size;
  for (size_t i = 0; i < *cap; i++)
    if (kind->used(ok + i * ks, ov + i * vs)) {
      size_t j = kind->hash(ok + i * ks) & (nc - 1);
      while (kind->used(nk + j * ks, nv + j * vs)) j = vd_slots_next(j, nc);
      memcpy(nk + j * ks, ok + i * ks, ks);
      memcpy(nv + j * vs, ov + i * vs, vs);
    }
  vd_free(*key);
  vd_free(*val);
  *key = nk;
  *val = nv;
  *cap = nc;
  return 0;
}
