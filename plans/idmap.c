/*
 * plans/idmap.c - int64 -> uint32 open-addressing map (see idmap.h).
 */
#include "idmap.h"

#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"

/* splitmix64 finaliser: consecutive ids spread over the whole table. */
static inline uint64_t mix(int64_t k) { return vd_hash_splitmix_fin((uint64_t)k); }

static vd_rc alloc_table(vd_idmap_t *m, size_t cap) {
  m->keys = vd_malloc(cap * sizeof(*m->keys));
  m->vals = vd_calloc(cap, sizeof(*m->vals));
  if (!m->keys || !m->vals) {
    vd_free(m->keys);
    vd_free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    return VD_ENOMEM;
  }
  m->cap = cap;
  return VD_OK;
}

vd_rc vd_idmap_init(vd_idmap_t *m, size_t expect) {
  memset(m, 0, sizeof(*m));
  size_t cap = 16;
  while (cap < expect * 2 && cap < ((size_t)1 << 62)) cap <<= 1;
  return alloc_table(m, cap);
}

void vd_idmap_free(vd_idmap_t *m) {
  if (!m) return;
  vd_free(m->keys);
  vd_free(m->vals);
  memset(m, 0, sizeof(*m));
}

static void insert_raw(vd_idmap_t *m, int64_t key, uint32_t stored) {
  size_t mask = m->cap - 1;
  size_t i = (size_t)mix(key) & mask;
  while (m->vals[i]) i = (i + 1) & mask;
  m->keys[i] = key;
  m->vals[i] = stored;
}

static int grow(vd_idmap_t *m) {
  vd_idmap_t big = {0};
  if (alloc_table(&big, m->cap * 2) != VD_OK) return -1;
  for (size_t i = 0; i < m->cap; i++)
    if (m->vals[i]) insert_raw(&big, m->keys[i], m->vals[i]);
  big.n = m->n;
  vd_idmap_free(m);
  *m = big;
  return 0;
}

int vd_idmap_put(vd_idmap_t *m, int64_t key, uint32_t val, uint32_t *old) {
  if (m->cap == 0 && alloc_table(m, 16) != VD_OK) return -1;
  size_t mask = m->cap - 1;
  size_t i = (size_t)mix(key) & mask;
  while (m->vals[i]) {
    if (m->keys[i] == key) {
      if (old) *old = m->vals[i] - 1;
      return 1;
    }
    i = (i + 1) & mask;
  }
  if ((m->n + 1) * 2 > m->cap) {
    if (grow(m)) return -1;
    insert_raw(m, key, val + 1);
  } else {
    m->keys[i] = key;
    m->vals[i] = val + 1;
  }
  m->n++;
  return 0;
}

int vd_idmap_get(const vd_idmap_t *m, int64_t key, uint32_t *val) {
  if (m->cap == 0) return 0;
  size_t mask = m->cap - 1;
  size_t i = (size_t)mix(key) & mask;
  while (m->vals[i]) {
    if (m->keys[i] == key) {
      *val = m->vals[i] - 1;
      return 1;
    }
    i = (i + 1) & mask;
  }
  return 0;
}
