/*
 * common/mem.h - the one allocator of verdict.
 *
 * Every module allocates through vd_malloc/vd_calloc/vd_realloc/vd_free so
 * that (1) sizes are overflow-checked before the C library sees them,
 * (2) peak and current byte counts are available for the summary and the
 * benchmarks, and (3) tests can make the Nth allocation fail (VD_TEST fault
 * hook) to reach every error path.
 *
 * The counters are process-wide atomics: allocation happens inside OpenMP
 * regions too, and a lost update would only make figures wrong, but atomics
 * cost nothing measurable here.
 *
 * vd_free(NULL) does nothing.  None of these functions abort: callers turn a
 * NULL result into VD_ENOMEM.
 */
#ifndef VD_MEM_H
#define VD_MEM_H

#include <stddef.h>
#include <stdint.h>

void *vd_malloc(size_t n);
void *vd_calloc(size_t count, size_t size);
/* Resizes p to count*size bytes (overflow-checked); on failure p is untouched. */
void *vd_realloc_array(void *p, size_t count, size_t size);
void vd_free(void *p);
char *vd_strdup(const char *s);

/* Bytes currently allocated and the high-water mark since start. */
size_t vd_mem_current(void);
size_t vd_mem_peak(void);

/* Test hook: make the nth allocation from now fail (1 = the next one);
 * 0 disables.  Returns nothing; vd_mem_fault_hit() tells whether it fired. */
void vd_mem_fail_after(long nth);
int vd_mem_fault_hit(void);

/* Grows *arr (of *cap elements of size elem) so it holds at least need
 * elements.  Amortised doubling.  Returns 0 on success, -1 on ENOMEM (the
 * array is left as it was). */
int vd_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* One-time process setup, called first in main (malloc arenas under a
 * finite address-space limit; see mem.c). */
void vd_mem_setup(void);

#define VD_GROW(arr, cap, need) \
  vd_grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

/* Frees the n buffers an array of pointers owns, then the array; a NULL
 * array is nothing to free. */
#define VD_FREE_EACH(arr, n)                                                  \
  do {                                                                        \
    if (arr)                                                                  \
      for (size_t vd_i_ = 0; vd_i_ < (size_t)(n); vd_i_++) vd_free((arr)[vd_i_]); \
    vd_free(arr);                                                             \
  } while (0)

/* Frees the n buffers of p[0..n), in order (NULL ones are nothing to free). */
void vd_free_n(void *const *p, size_t n);

/* Frees every buffer listed, in order: VD_FREE_ALL(t->a, t->b) is
 * vd_free(t->a); vd_free(t->b); -- the teardown of a struct's owned arrays
 * as one list. */
#define VD_FREE_ALL(...) \
  vd_free_n((void *const[]){__VA_ARGS__}, sizeof((void *const[]){__VA_ARGS__}) / sizeof(void *))

/* Frees what p points to and forgets it (p is NULL after). */
#define VD_DROP(p) \
  do {             \
    vd_free(p);    \
    (p) = NULL;    \
  } while (0)

#endif
