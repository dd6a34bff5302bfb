/*
 * tests/support/files.c - temporary files and whole-file reads for the unit
 * tests (see files.h).  Test support only: failures fail the running
 * cmocka test.
 */
#include "files.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

void tfile_temp(char *path) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
}

void tfile_temp_text(char *path, const char *text) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *f = fdopen(fd, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

char *tfile_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = calloc(1, (size_t)n + 1);
  assert_non_null(b);
  size_t got = fread(b, 1, (size_t)n, f);
  b[got] = '\0';
  fclose(f);
  return b;
}
