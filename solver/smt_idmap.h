/*
 * solver/smt_idmap.h - private to solver/: a map from Z3 ast ids to
 * int64_t values (open addressing, linear probing, Knuth's multiplicative
 * hash), used by the certificate writer (smt_cert.c: ast -> definition
 * slot, declaration -> index) and the random witness (smt_check_witness.c:
 * application -> nesting level).
 *
 * Not iterated: nothing printed depends on its layout.  Start from
 * {.first_cap = N} (N a power of 2, the first table's size); free with
 * vd_smt_i_idmap_free.
 */
#ifndef VD_SMT_IDMAP_H
#define VD_SMT_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  unsigned *key; /* ast id + 1, 0 = empty */
  int64_t *val;
  size_t cap, n;
  size_t first_cap; /* the table's size at the first put (a power of 2) */
} vd_smt_idmap;

/* The value of id (borrowed, valid until the next put), NULL when absent. */
int64_t *vd_smt_i_idmap_get(const vd_smt_idmap *m, unsigned id);
/* Sets id's value; -1 when out of memory (the map is unchanged). */
int vd_smt_i_idmap_put(vd_smt_idmap *m, unsigned id, int64_t v);
void vd_smt_i_idmap_free(vd_smt_idmap *m);

#endif
