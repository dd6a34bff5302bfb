/*
 * solver/smt_idmap.c - the ast id -> int64_t map of smt_idmap.h: open
 * addressing at most half full, doubled when a put would pass that.
 */
#include "smt_idmap.h"

#include <string.h>

#include "../common/hash.h"
#include "../common/mem.h"
#include "../common/slots.h"

int64_t *vd_smt_i_idmap_get(const vd_smt_idmap *m, unsigned id) {
  if (!m->cap) return NULL;
  unsigned k = id + 1;
  size_t j = vd_hash_knuth32(k) & (m->cap - 1);
  while (m->key[j]) {
    if (m->key[j] == k) return &m->val[j];
    j = vd_slots_next(j, m->cap);
  }
  return NULL;
}

static uint64_t idmap_hash(const void *key) { return vd_hash_knuth32(*(const unsigned *)key); }

/* A slot is used when its key (id + 1) is not 0. */
static int idmap_used(const void *key, const void *val) {
  (void)val;
  return *(const unsigned *)key != 0;
}

static const vd_slots_kind idmap_kind = {sizeof(unsigned), sizeof(int64_t), idmap_hash, idmap_used};

int vd_smt_i_idmap_put(vd_smt_idmap *m, unsigned id, int64_t v) {
  if (vd_slots_crowded(m->n, m->cap) &&
      vd_slots_regrow(&idmap_kind, (void **)&m->key, (void **)&m->val, &m->cap, m->first_cap))
    return -1;
  unsigned k = id + 1;
  size_t j = vd_hash_knuth32(k) & (m->cap - 1);
  while (m->key[j] && m->key[j] != k) j = vd_slots_next(j, m->cap);
  if (!m->key[j]) m->n++;
  m->key[j] = k;
  m->val[j] = v;
  return 0;
}

void vd_smt_i_idmap_free(vd_smt_idmap *m) {
  vd_free(m->key);
  vd_free(m->val);
  size_t first = m->first_cap;
  memset(m, 0, sizeof(*m));
  m->first_cap = first;
}
