/*
 * solver/smt_idmap.c - the ast id -> int64_t map of smt_idmap.h: open
 * addressing at most half full, doubled when a put would pass that.
 */
#include "smt_idmap.h"

#include <string.h>

#include "../common/mem.h"

int64_t *vd_smt_i_idmap_get(const vd_smt_idmap *m, unsigned id) {
  if (!m->cap) return NULL;
  unsigned k = id + 1;
  size_t j = (k * 2654435761u) & (m->cap - 1);
  while (m->key[j]) {
    if (m->key[j] == k) return &m->val[j];
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

int vd_smt_i_idmap_put(vd_smt_idmap *m, unsigned id, int64_t v) {
  if (2 * (m->n + 1) > m->cap) {
    size_t nc = m->cap ? 2 * m->cap : m->first_cap;
    unsigned *nk = vd_calloc(nc, sizeof(unsigned));
    int64_t *nv = vd_calloc(nc, sizeof(int64_t));
    if (!nk || !nv) {
      vd_free(nk);
      vd_free(nv);
      return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
      if (m->key[i]) {
        size_t j = (m->key[i] * 2654435761u) & (nc - 1);
        while (nk[j]) j = (j + 1) & (nc - 1);
        nk[j] = m->key[i];
        nv[j] = m->val[i];
      }
    vd_free(m->key);
    vd_free(m->val);
    m->key = nk;
    m->val = nv;
    m->cap = nc;
  }
  unsigned k = id + 1;
  size_t j = (k * 2654435761u) & (m->cap - 1);
  while (m->key[j] && m->key[j] != k) j = (j + 1) & (m->cap - 1);
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
