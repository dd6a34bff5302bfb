/*
 * common/mem.c - counted, overflow-checked allocation with a fault hook.
 *
 * Each block carries a 16-byte header holding its size, so vd_free can keep
 * the byte counters exact without a lookup table.
 *
 * OPTIMIZATION-ONLY: blocks of VD_MEM_HUGE_MIN bytes or more (graph and plan
 * arrays of large plans: hundreds of MB) are marked MADV_HUGEPAGE, so that
 * the kernel backs them with 2 MB pages where transparent huge pages are
 * enabled in "madvise" mode (the default of many distributions).  Filling
 * a 1 GB array otherwise costs 262144 page faults, and under a hypervisor
 * a fault costs microseconds: on a 166 MB plan the faults were half of the
 * load time.  The advice changes no byte of any result; where THP is off or
 * madvise fails it is ignored.  vd_calloc lets calloc skip clearing memory
 * that the kernel hands over zeroed (fresh mappings).
 */
#include "mem.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

typedef union {
  size_t size;
  max_align_t align;
} header_t;

static atomic_size_t cur_bytes;
static atomic_size_t peak_bytes;
static atomic_long fail_countdown; /* 0 = disabled */
static atomic_int fault_hit;

static int should_fail(void) {
  long c = atomic_load(&fail_countdown);
  if (c <= 0) return 0;
  if (atomic_fetch_sub(&fail_countdown, 1) == 1) {
    atomic_store(&fault_hit, 1);
    return 1;
  }
  return 0;
}

static void account(size_t add, size_t sub) {
  size_t now = atomic_fetch_add(&cur_bytes, add) + add;
  atomic_fetch_sub(&cur_bytes, sub);
  now -= sub;
  size_t peak = atomic_load(&peak_bytes);
  while (now > peak && !atomic_compare_exchange_weak(&peak_bytes, &peak, now)) {
  }
}

#define VD_MEM_HUGE_MIN ((size_t)16 << 20)

/* Marks the pages of block h (n user bytes) for transparent huge pages.
 * The whole mapping is advised (from the page h starts in), not just its
 * 2 MB-aligned interior: splitting the mapping in several areas would make
 * a later realloc's mremap fail and copy instead. */
static void advise_huge(header_t *h, size_t n) {
  if (n < VD_MEM_HUGE_MIN) return;
  static long page;
  if (!page) page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  uintptr_t lo = (uintptr_t)h & ~(uintptr_t)(page - 1);
  uintptr_t hi = ((uintptr_t)(h + 1) + n + (uintptr_t)(page - 1)) & ~(uintptr_t)(page - 1);
  if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
}

void *vd_malloc(size_t n) {
  if (n > SIZE_MAX - sizeof(header_t) || should_fail()) return NULL;
  header_t *h = malloc(sizeof(header_t) + n);
  if (!h) return NULL;
  h->size = n;
  account(n, 0);
  advise_huge(h, n);
  return h + 1;
}

void *vd_calloc(size_t count, size_t size) {
  if (size && count > (SIZE_MAX - sizeof(header_t)) / size) return NULL;
  size_t n = count * size;
  if (should_fail()) return NULL;
  header_t *h = calloc(1, sizeof(header_t) + n);
  if (!h) return NULL;
  h->size = n;
  account(n, 0);
  advise_huge(h, n);
  return h + 1;
}

void *vd_realloc_array(void *p, size_t count, size_t size) {
  if (size && count > (SIZE_MAX - sizeof(header_t)) / size) return NULL;
  size_t n = count * size;
  if (!p) return vd_malloc(n);
  if (should_fail()) return NULL;
  header_t *h = (header_t *)p - 1;
  size_t old = h->size;
  header_t *nh = realloc(h, sizeof(header_t) + n);
  if (!nh) return NULL;
  nh->size = n;
  account(n, old);
  advise_huge(nh, n);
  return nh + 1;
}

void vd_free(void *p) {
  if (!p) return;
  header_t *h = (header_t *)p - 1;
  atomic_fetch_sub(&cur_bytes, h->size);
  free(h);
}

void vd_free_n(void *const *p, size_t n) {
  for (size_t i = 0; i < n; i++) vd_free(p[i]);
}

static char *vd_strndup(const char *s, size_t n) {
  char *d = vd_malloc(n + 1);
  if (!d) return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

char *vd_strdup(const char *s) { return vd_strndup(s, strlen(s)); }

size_t vd_mem_current(void) { return atomic_load(&cur_bytes); }
size_t vd_mem_peak(void) { return atomic_load(&peak_bytes); }

void vd_mem_fail_after(long nth) {
  atomic_store(&fault_hit, 0);
  atomic_store(&fail_countdown, nth);
}

int vd_mem_fault_hit(void) { return atomic_load(&fault_hit); }

int vd_grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap : 8;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return -1;
    ncap *= 2;
  }
  void *n = vd_realloc_array(*arr, ncap, elem);
  if (!n) return -1;
  *arr = n;
  *cap = ncap;
  return 0;
}

/* glibc gives each thread that allocates its own malloc arena and reserves
 * 64 MB of address space for it.  Under a small `ulimit -v` those
 * reservations, not the data, exhaust the limit, and an allocation then
 * fails inside a library that does not survive it (Z3's context
 * constructor).  Below 4 GiB every thread shares the main arena; above,
 * the reservations (at most 8 arenas per core) are a small fraction and
 * per-thread arenas avoid lock contention. */
void vd_mem_setup(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < ((rlim_t)4 << 30))
    mallopt(M_ARENA_MAX, 1);
}
