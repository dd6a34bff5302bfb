/*
 * common/infile.c - the whole of an input file in memory (infile.h).
 */
#include "infile.h"

#include "mem.h"

vd_infile_rc vd_infile_read_all(FILE *f, size_t max, char **buf, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *b = vd_malloc(cap);
  *buf = NULL;
  if (!b) return VD_INFILE_NOMEM;
  for (;;) {
    if (n + 1 >= cap) {
      if (max && cap >= max) {
        vd_free(b);
        return VD_INFILE_TOO_BIG;
      }
      char *nb = vd_realloc_array(b, cap, 2);
      if (!nb) {
        vd_free(b);
        return VD_INFILE_NOMEM;
      }
      b = nb;
      cap *= 2;
    }
    size_t got = fread(b + n, 1, cap - 1 - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) {
    vd_free(b);
    return VD_INFILE_EIO;
  }
  b[n] = '\0';
  *buf = b;
  *len = n;
  return VD_INFILE_OK;
}
