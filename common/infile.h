/*
 * common/infile.h - reading the whole of an input file into memory, for the
 * readers that parse text they hold entirely (value dumps of noise/dump.c,
 * the obligations `verdict recheck` re-proves).  The plan reader does not
 * use it: it sizes its buffer from the file length (plans/io.c).
 *
 * The buffer doubles from 64 KiB, so reading n bytes costs O(n) time and at
 * most 2n bytes; it ends in a NUL that the length does not count.
 */
#ifndef VD_INFILE_H
#define VD_INFILE_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
  VD_INFILE_OK = 0,
  VD_INFILE_NOMEM,   /* the buffer could not grow */
  VD_INFILE_TOO_BIG, /* the buffer reached max bytes before the end */
  VD_INFILE_EIO      /* ferror(f) after the last read */
} vd_infile_rc;

/* Reads the rest of f (left open) into *buf (vd_malloc'd, NUL-terminated,
 * out) of *len bytes.  max: the buffer may not grow past it (0: no bound).
 * *buf is NULL on every result but VD_INFILE_OK. */
vd_infile_rc vd_infile_read_all(FILE *f, size_t max, char **buf, size_t *len);

#endif
