/*
 * verifier/cache.c - the proof cache (cache.h): an in-memory set of proven
 * canonical forms and, optionally, a directory of entry files.
 *
 * Entry file DIR/<key hex>.vdp, native byte order (a cache is a local
 * directory, not an exchange format):
 *   "VDPC0001"                      8 bytes, magic and layout version
 *   encoder version                 u32 (VD_ENCODER_VERSION)
 *   verdict                         u32, always 1 (EQUIVALENT)
 *   binary digest                   32 bytes: SHA-256 of the verdict binary that proved it
 *   n                               u64, length of the canonical form
 *   canonical form                  n bytes (stages/canon.c)
 *   MAC                             32 bytes: HMAC-SHA256 of everything above under
 *                                   the cache key (load_key: kept outside the directory)
 * key = SHA-256("verdict proof cache" NUL, encoder version, binary digest,
 * canonical form).  A lookup reads the whole file and uses it only when
 * every field matches the current question: the size, the magic, the
 * version, the verdict, the binary digest, n, the canonical form byte for
 * byte, and the MAC.  Anything else is a miss, counted as "ignored"
 * when the file existed (docs/verifier.md section 9).
 */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/digest.h"
#include "../common/mem.h"
#include "../solver/stage_solve.h"

#define MAGIC "VDPC0001"
#define HEAD_BYTES (8 + 4 + 4 + VD_DIGEST_BYTES + 8)
#define KEY_TAG "verdict proof cache"

typedef struct {
  uint8_t key[VD_DIGEST_BYTES];
  uint8_t *canon; /* NULL: empty slot */
  size_t n;
} slot_t;

struct vd_cache {
  char *dir;
  uint64_t max_bytes;
  uint8_t exe[VD_DIGEST_BYTES]; /* SHA-256 of the running binary (zeros if unreadable) */
  uint8_t mac_key[VD_DIGEST_BYTES]; /* the entries' HMAC key (load_key) */
  slot_t *tab;
  size_t cap, used;
  vd_cache_stats st;
};

static void note_ignored(vd_cache *c, const char *path, const char *why) {
  c->st.ignored++;
  snprintf(c->st.last_ignored, sizeof(c->st.last_ignored), "%.400s: %s", path, why);
}

/* HMAC-SHA256 (RFC 2104) of p under the cache's key, through digest.h. */
static int mac(const vd_cache *c, const uint8_t *p, size_t n, uint8_t out[VD_DIGEST_BYTES]) {
  uint8_t pad[64], inner[VD_DIGEST_BYTES];
  vd_digest *h = vd_digest_new();
  if (!h) return -1;
  memset(pad, 0x36, sizeof(pad));
  for (int i = 0; i < VD_DIGEST_BYTES; i++) pad[i] ^= c->mac_key[i];
  vd_digest_update(h, pad, sizeof(pad));
  vd_digest_update(h, p, n);
  vd_digest_final(h, inner);
  vd_digest_free(h);
  if (!(h = vd_digest_new())) return -1;
  memset(pad, 0x5c, sizeof(pad));
  for (int i = 0; i < VD_DIGEST_BYTES; i++) pad[i] ^= c->mac_key[i];
  vd_digest_update(h, pad, sizeof(pad));
  vd_digest_update(h, inner, sizeof(inner));
  vd_digest_final(h, out);
  vd_digest_free(h);
  return 0;
}

static int mkdirs(const char *path) {
  char b[4096];
  snprintf(b, sizeof(b), "%s", path);
  for (char *q = b + 1; *q; q++)
    if (*q == '/') {
      *q = '\0';
      if (mkdir(b, 0700) != 0 && errno != EEXIST) return -1;
      *q = '/';
    }
  return mkdir(b, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* The entries' authentication key, kept outside the cache directory, so
 * that whoever can write the directory (a shared CI cache restored into a
 * job) cannot forge an entry without it: VERDICT_CACHE_KEY (a secret
 * string, e.g. a CI secret; hashed), else the file
 * ${XDG_CONFIG_HOME:-$HOME/.config}/verdict/cache.key (32 random bytes,
 * mode 0600, created on first use: written to a private temporary file and
 * linked into place, so concurrent first uses agree on one key).  Without
 * either, a key random to this process: entries of other processes are then
 * never trusted (they fail authentication), only this run's. */
static void load_key(vd_cache *c) {
  const char *env = getenv("VERDICT_CACHE_KEY");
  if (env && *env) {
    vd_digest *h = vd_digest_new();
    if (h) {
      vd_digest_update(h, "verdict cache key", 18);
      vd_digest_update(h, env, strlen(env));
      vd_digest_final(h, c->mac_key);
      vd_digest_free(h);
      return;
    }
  }
  char dir[4096], path[4200], tmp[4300];
  const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
  int ok = 0;
  if (xdg && *xdg) ok = snprintf(dir, sizeof(dir), "%s/verdict", xdg) < (int)sizeof(dir);
  else if (home && *home) ok = snprintf(dir, sizeof(dir), "%s/.config/verdict", home) < (int)sizeof(dir);
  uint8_t rnd[VD_DIGEST_BYTES];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  int have_rnd = fd >= 0 && read(fd, rnd, sizeof(rnd)) == (ssize_t)sizeof(rnd);
  if (fd >= 0) close(fd);
  if (!have_rnd) { /* no randomness: a per-process key from time and pid (never trusted across processes) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
    vd_digest_bytes(x, sizeof(x), rnd);
  }
  memcpy(c->mac_key, rnd, sizeof(rnd));
  if (!ok || !have_rnd || mkdirs(dir) != 0) return;
  snprintf(path, sizeof(path), "%s/cache.key", dir);
  for (int attempt = 0; attempt < 2; attempt++) {
    fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      uint8_t k[VD_DIGEST_BYTES];
      struct stat sb;
      int good = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == (off_t)sizeof(k) &&
                 read(fd, k, sizeof(k)) == (ssize_t)sizeof(k);
      close(fd);
      if (good) memcpy(c->mac_key, k, sizeof(k));
      return;
    }
    if (attempt) return;
    snprintf(tmp, sizeof(tmp), "%s/.cache.key-XXXXXX", dir);
    fd = mkstemp(tmp);
    if (fd < 0) return;
    int bad = write(fd, rnd, sizeof(rnd)) != (ssize_t)sizeof(rnd);
    bad |= close(fd) != 0;
    if (!bad) (void)link(tmp, path); /* fails when another process won: read its key */
    unlink(tmp);
  }
}

vd_rc vd_cache_open(const char *dir, uint64_t max_bytes, vd_cache **out, vd_diag *d) {
  *out = NULL;
  vd_cache *c = vd_calloc(1, sizeof(*c));
  if (!c) return VD_OOM(d);
  c->max_bytes = max_bytes ? max_bytes : (uint64_t)VD_CACHE_DEFAULT_MAX_MB << 20;
  c->cap = 1024;
  c->tab = vd_calloc(c->cap, sizeof(slot_t));
  if (!c->tab) {
    vd_free(c);
    return VD_OOM(d);
  }
  /* The binary's own digest joins every key: an entry proven by another
   * build is never taken, even if VD_ENCODER_VERSION was not bumped. */
  vd_diag ed;
  vd_diag_clear(&ed);
  if (vd_digest_file("/proc/self/exe", c->exe, &ed) != VD_OK) memset(c->exe, 0, sizeof(c->exe));
  if (dir) load_key(c);
  if (dir) {
    c->dir = vd_strdup(dir);
    if (!c->dir) {
      vd_cache_close(c);
      return VD_OOM(d);
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      vd_cache_close(c);
      VD_FAIL(d, VD_EIO, dir, NULL, NULL, "cannot create the proof cache directory: %s", strerror(e));
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      vd_cache_close(c);
      VD_FAIL(d, VD_EIO, dir, NULL, NULL, "the proof cache path is not a directory");
    }
    if (access(dir, R_OK | W_OK | X_OK) != 0) {
      vd_cache_close(c);
      VD_FAIL(d, VD_EIO, dir, NULL, NULL, "the proof cache directory is not readable and writable");
    }
  }
  *out = c;
  return VD_OK;
}

/* SHA-256(tag with its NUL, encoder version, binary digest, the n bytes):
 * the key of a proof or of a configuration entry, which differ in the tag
 * only.  -1 when libcrypto cannot allocate. */
static int tagged_key(const vd_cache *c, const char *tag, const uint8_t *b, size_t n, uint8_t key[VD_DIGEST_BYTES]) {
  vd_digest *h = vd_digest_new();
  if (!h) return -1;
  uint32_t ver = VD_ENCODER_VERSION;
  vd_digest_update(h, tag, strlen(tag) + 1);
  vd_digest_update(h, &ver, sizeof(ver));
  vd_digest_update(h, c->exe, sizeof(c->exe));
  vd_digest_update(h, b, n);
  vd_digest_final(h, key);
  vd_digest_free(h);
  return 0;
}

/* The key of a canonical form; -1 when libcrypto cannot allocate. */
static int key_of(const vd_cache *c, const uint8_t *canon, size_t n, uint8_t key[VD_DIGEST_BYTES]) {
  return tagged_key(c, KEY_TAG, canon, n, key);
}

static size_t slot_of(const vd_cache *c, const uint8_t key[VD_DIGEST_BYTES]) {
  uint64_t h;
  memcpy(&h, key, sizeof(h));
  return (size_t)h & (c->cap - 1);
}

/* The memory slot holding key, or the empty slot where it goes. */
static slot_t *find(vd_cache *c, const uint8_t key[VD_DIGEST_BYTES]) {
  for (size_t i = slot_of(c, key);; i = (i + 1) & (c->cap - 1))
    if (!c->tab[i].canon || !memcmp(c->tab[i].key, key, VD_DIGEST_BYTES)) return &c->tab[i];
}

static int mem_has(vd_cache *c, const uint8_t key[VD_DIGEST_BYTES], const uint8_t *canon, size_t n) {
  const slot_t *s = find(c, key);
  return s->canon && s->n == n && !memcmp(s->canon, canon, n);
}

static void mem_put(vd_cache *c, const uint8_t key[VD_DIGEST_BYTES], const uint8_t *canon, size_t n) {
  if ((c->used + 1) * 2 > c->cap) {
    size_t nc = c->cap * 2;
    slot_t *nt = vd_calloc(nc, sizeof(*nt));
    if (!nt) return; /* OPTIMIZATION-ONLY: not remembered */
    slot_t *old = c->tab;
    size_t oc = c->cap;
    c->tab = nt;
    c->cap = nc;
    for (size_t i = 0; i < oc; i++)
      if (old[i].canon) *find(c, old[i].key) = old[i];
    vd_free(old);
  }
  slot_t *s = find(c, key);
  if (s->canon) return;
  s->canon = vd_malloc(n ? n : 1);
  if (!s->canon) return;
  memcpy(s->canon, canon, n);
  memcpy(s->key, key, VD_DIGEST_BYTES);
  s->n = n;
  c->used++;
}

int vd_cache_entry_path(const vd_cache *c, const uint8_t *canon, size_t n, char *buf, size_t cap) {
  uint8_t key[VD_DIGEST_BYTES];
  char hex[VD_DIGEST_HEX];
  if (!c || !c->dir || key_of(c, canon, n, key)) return -1;
  vd_digest_hex(key, hex);
  int w = snprintf(buf, cap, "%s/%s.vdp", c->dir, hex);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

/* The head every entry starts with (HEAD_BYTES: magic, encoder version,
 * a 32-bit word, this binary's digest, the body's length), then the body;
 * returns the bytes written. */
static size_t put_head(const vd_cache *c, uint8_t *b, const char *magic, uint32_t word, const uint8_t *body, size_t n) {
  uint32_t ver = VD_ENCODER_VERSION;
  uint64_t nn = n;
  size_t at = 0;
  memcpy(b + at, magic, 8), at += 8;
  memcpy(b + at, &ver, 4), at += 4;
  memcpy(b + at, &word, 4), at += 4;
  memcpy(b + at, c->exe, VD_DIGEST_BYTES), at += VD_DIGEST_BYTES;
  memcpy(b + at, &nn, 8), at += 8;
  memcpy(b + at, body, n), at += n;
  return at;
}

/* The entry's bytes for this canonical form (what a store writes and a
 * lookup must find), or NULL without memory. */
static uint8_t *entry_bytes(const vd_cache *c, const uint8_t *canon, size_t n, size_t *len) {
  size_t total = HEAD_BYTES + n + VD_DIGEST_BYTES;
  uint8_t *b = vd_malloc(total);
  if (!b) return NULL;
  size_t at = put_head(c, b, MAGIC, 1, canon, n); /* word: the verdict, 1 = EQUIVALENT */
  if (mac(c, b, at, b + at)) {
    vd_free(b);
    return NULL;
  }
  *len = total;
  return b;
}

/* Entries larger than this are not read (a hostile file must not cost
 * unbounded memory); a canonical form of the largest stage is far below. */
#define MAX_ENTRY_BYTES ((size_t)256 << 20)

/* Reads the whole file at path (at most MAX_ENTRY_BYTES) into a fresh
 * buffer.  1: read (*len its size); 0: no such file; -1: unusable (why). */
static int read_entry(const char *path, uint8_t **out, size_t *len, const char **why) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    *why = errno == ELOOP ? "a symbolic link, not an entry" : "cannot be opened";
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    *why = "not a regular file";
    return -1;
  }
  if (sb.st_size < HEAD_BYTES + VD_DIGEST_BYTES || (uint64_t)sb.st_size > MAX_ENTRY_BYTES) {
    close(fd);
    *why = "wrong size (truncated or corrupt)";
    return -1;
  }
  size_t want = (size_t)sb.st_size;
  uint8_t *b = vd_malloc(want);
  if (!b) {
    close(fd);
    *why = "out of memory";
    return -1;
  }
  size_t got = 0;
  while (got < want) {
    ssize_t r = read(fd, b + got, want - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got == want) (void)futimens(fd, NULL); /* recently used: evicted last */
  close(fd);
  if (got != want) {
    vd_free(b);
    *why = "short read";
    return -1;
  }
  *out = b;
  *len = want;
  return 1;
}

/* Why entry `got` (glen bytes) is not `want` (wlen bytes), of the same
 * layout: the first field that differs. */
static const char *mismatch(const uint8_t *got, size_t glen, const uint8_t *want, size_t wlen) {
  if (memcmp(got, want, 8)) return "bad magic";
  if (memcmp(got + 8, want + 8, 8)) return "another encoder version or verdict";
  if (memcmp(got + 16, want + 16, VD_DIGEST_BYTES)) return "written by another verdict binary";
  if (memcmp(got + HEAD_BYTES - 8, want + HEAD_BYTES - 8, 8)) return "its canonical form differs from this class's";
  if (glen != wlen) return "wrong size (truncated or corrupt)";
  if (memcmp(got + HEAD_BYTES, want + HEAD_BYTES, wlen - HEAD_BYTES - VD_DIGEST_BYTES))
    return "its canonical form differs from this class's";
  return "authentication failed (corrupt, or not written with this cache key)";
}

int vd_cache_lookup(vd_cache *c, const uint8_t *canon, size_t n) {
  if (!c) return 0;
  uint8_t key[VD_DIGEST_BYTES];
  if (key_of(c, canon, n, key)) return 0;
  if (mem_has(c, key, canon, n)) {
    c->st.hits_memory++;
    return 1;
  }
  if (!c->dir) return 0;
  char path[4200], hex[VD_DIGEST_HEX];
  vd_digest_hex(key, hex);
  snprintf(path, sizeof(path), "%s/%s.vdp", c->dir, hex);
  size_t len = 0, glen = 0;
  uint8_t *want = entry_bytes(c, canon, n, &len);
  if (!want) return 0;
  uint8_t *got = NULL;
  const char *why = NULL;
  int r = read_entry(path, &got, &glen, &why);
  int hit = 0;
  if (r < 0) note_ignored(c, path, why);
  else if (r > 0) {
    /* SOUNDNESS: the whole entry must be the one this run would write for
     * this question: magic, version, verdict, binary, the canonical form
     * byte for byte, and a MAC over all of it under the cache key. */
    if (glen == len && memcmp(got, want, len) == 0) hit = 1;
    else note_ignored(c, path, mismatch(got, glen, want, len));
    vd_free(got);
  }
  vd_free(want);
  if (hit) {
    c->st.hits_disk++;
    mem_put(c, key, canon, n);
  }
  return hit;
}

static int write_all(int fd, const uint8_t *b, size_t n) {
  size_t at = 0;
  while (at < n) {
    ssize_t w = write(fd, b + at, n - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    at += (size_t)w;
  }
  return 0;
}

void vd_cache_store(vd_cache *c, const uint8_t *canon, size_t n) {
  if (!c) return;
  uint8_t key[VD_DIGEST_BYTES];
  if (key_of(c, canon, n, key)) return;
  if (mem_has(c, key, canon, n)) return;
  mem_put(c, key, canon, n);
  if (!c->dir) return;
  size_t len = 0;
  uint8_t *b = entry_bytes(c, canon, n, &len);
  if (!b) {
    c->st.write_errors++;
    return;
  }
  char path[4200], tmp[4200], hex[VD_DIGEST_HEX];
  vd_digest_hex(key, hex);
  snprintf(path, sizeof(path), "%s/%s.vdp", c->dir, hex);
  snprintf(tmp, sizeof(tmp), "%s/.tmp-%s-XXXXXX", c->dir, hex);
  /* A private temporary file (mkstemp: O_EXCL, mode 0600), renamed into
   * place: a concurrent reader sees no file or a whole one. */
  int fd = mkstemp(tmp);
  if (fd < 0) {
    c->st.write_errors++;
    vd_free(b);
    return;
  }
  int bad = write_all(fd, b, len) != 0;
  bad |= close(fd) != 0;
  if (!bad) bad = rename(tmp, path) != 0;
  if (bad) {
    unlink(tmp);
    c->st.write_errors++;
  } else {
    c->st.stored++;
  }
  vd_free(b);
}

typedef struct {
  char *name;
  uint64_t size;
  struct timespec mtime;
} ent_t;

static int ent_cmp(const void *a, const void *b) {
  const ent_t *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

/* The size cap: the least recently used entries go until the directory
 * holds at most 3/4 of the cap; temporary files of runs that died more
 * than ten minutes ago go too.  Races with other runs are harmless: an
 * entry removed under a reader is a miss. */
static void evict(vd_cache *c) {
  DIR *dd = opendir(c->dir);
  if (!dd) return;
  ent_t *v = NULL;
  size_t n = 0, cap = 0;
  uint64_t total = 0;
  time_t now = time(NULL);
  struct dirent *de;
  char path[4200];
  while ((de = readdir(dd))) {
    int tmpf = !strncmp(de->d_name, ".tmp-", 5);
    if (!tmpf && !has_suffix(de->d_name, ".vdp") && !has_suffix(de->d_name, ".vdc")) continue;
    snprintf(path, sizeof(path), "%s/%s", c->dir, de->d_name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
    if (tmpf) {
      if (now - sb.st_mtime > 600) unlink(path);
      continue;
    }
    if (VD_GROW(v, cap, n + 1)) break;
    v[n].name = vd_strdup(de->d_name);
    if (!v[n].name) break;
    v[n].size = (uint64_t)sb.st_size;
    v[n].mtime = sb.st_mtim;
    total += v[n].size;
    n++;
  }
  closedir(dd);
  if (total > c->max_bytes) {
    qsort(v, n, sizeof(*v), ent_cmp);
    uint64_t goal = c->max_bytes / 4 * 3;
    for (size_t i = 0; i < n && total > goal; i++) {
      snprintf(path, sizeof(path), "%s/%s", c->dir, v[i].name);
      if (unlink(path) == 0) c->st.evicted++;
      total -= v[i].size;
    }
  }
  for (size_t i = 0; i < n; i++) vd_free(v[i].name);
  vd_free(v);
}

void vd_cache_close(vd_cache *c) {
  if (!c) return;
  if (c->dir) evict(c);
  for (size_t i = 0; c->tab && i < c->cap; i++) vd_free(c->tab[i].canon);
  vd_free(c->tab);
  vd_free(c->dir);
  vd_free(c);
}

void vd_cache_stats_get(const vd_cache *c, vd_cache_stats *s) {
  if (!c) {
    memset(s, 0, sizeof(*s));
    return;
  }
  *s = c->st;
}

void vd_cache_stats_since(const vd_cache_stats *a, const vd_cache_stats *b, vd_cache_stats *out) {
  *out = *b;
  out->hits_memory = b->hits_memory - a->hits_memory;
  out->hits_disk = b->hits_disk - a->hits_disk;
  out->stored = b->stored - a->stored;
  out->ignored = b->ignored - a->ignored;
  out->write_errors = b->write_errors - a->write_errors;
  out->evicted = b->evicted - a->evicted;
  out->config_hits = b->config_hits - a->config_hits;
  if (a->ignored == b->ignored) out->last_ignored[0] = '\0';
}

const char *vd_cache_dir(const vd_cache *c) { return c ? c->dir : NULL; }

/* ---- whole configurations ------------------------------------------------
 *
 * Entry DIR/<key hex>.vdc: "VDCF0001", encoder version u32, 0 u32, binary
 * digest, n u64, `what` (n bytes), the three counts (u64 each),
 * HMAC-SHA256 (cache key) of everything before.  key = SHA-256("verdict config cache" NUL,
 * version, binary digest, what). */

#define CMAGIC "VDCF0001"
#define CTAG "verdict config cache"

static int ckey_of(const vd_cache *c, const uint8_t *what, size_t n, uint8_t key[VD_DIGEST_BYTES]) {
  return tagged_key(c, CTAG, what, n, key);
}

static uint8_t *centry_bytes(const vd_cache *c, const uint8_t *what, size_t n, const vd_cache_config *info,
                             size_t *len) {
  size_t total = HEAD_BYTES + n + 24 + VD_DIGEST_BYTES;
  uint8_t *b = vd_malloc(total);
  if (!b) return NULL;
  uint64_t cnt[3] = {info->n_stages, info->n_classes, info->n_represented};
  size_t at = put_head(c, b, CMAGIC, 0, what, n);
  memcpy(b + at, cnt, 24), at += 24;
  if (mac(c, b, at, b + at)) {
    vd_free(b);
    return NULL;
  }
  *len = total;
  return b;
}

static int cpath(const vd_cache *c, const uint8_t *what, size_t n, char *path, size_t cap) {
  uint8_t key[VD_DIGEST_BYTES];
  char hex[VD_DIGEST_HEX];
  if (ckey_of(c, what, n, key)) return -1;
  vd_digest_hex(key, hex);
  int w = snprintf(path, cap, "%s/%s.vdc", c->dir, hex);
  return w < 0 || (size_t)w >= cap ? -1 : 0;
}

int vd_cache_config_lookup(vd_cache *c, const uint8_t *what, size_t n, vd_cache_config *out) {
  if (!c || !c->dir) return 0;
  char path[4200];
  if (cpath(c, what, n, path, sizeof(path))) return 0;
  vd_cache_config zero = {0};
  size_t len = 0;
  /* the expected bytes up to the counts; the counts are read from the file */
  uint8_t *want = centry_bytes(c, what, n, &zero, &len);
  if (!want) return 0;
  uint8_t *got = NULL;
  const char *why = NULL;
  size_t glen = 0;
  int r = read_entry(path, &got, &glen, &why);
  int hit = 0;
  if (r < 0) note_ignored(c, path, why);
  else if (r > 0) {
    size_t body = HEAD_BYTES + n;
    uint8_t sum[VD_DIGEST_BYTES];
    if (glen != len) note_ignored(c, path, "wrong size (truncated or corrupt)");
    else if (memcmp(got, want, body)) note_ignored(c, path, "another question, version or binary (or corrupt)");
    else if (mac(c, got, body + 24, sum) || memcmp(sum, got + body + 24, VD_DIGEST_BYTES))
      note_ignored(c, path, "authentication failed (corrupt, or not written with this cache key)");
    else {
      uint64_t cnt[3];
      memcpy(cnt, got + body, 24);
      out->n_stages = cnt[0];
      out->n_classes = cnt[1];
      out->n_represented = cnt[2];
      hit = 1;
      c->st.config_hits++;
    }
    vd_free(got);
  }
  vd_free(want);
  return hit;
}

void vd_cache_config_store(vd_cache *c, const uint8_t *what, size_t n, const vd_cache_config *info) {
  if (!c || !c->dir) return;
  char path[4200], tmp[4300];
  if (cpath(c, what, n, path, sizeof(path))) return;
  size_t len = 0;
  uint8_t *b = centry_bytes(c, what, n, info, &len);
  if (!b) {
    c->st.write_errors++;
    return;
  }
  snprintf(tmp, sizeof(tmp), "%s/.tmp-config-XXXXXX", c->dir);
  int fd = mkstemp(tmp);
  int bad = fd < 0;
  if (!bad) {
    bad = write_all(fd, b, len) != 0;
    bad |= close(fd) != 0;
    if (!bad) bad = rename(tmp, path) != 0;
    if (bad) unlink(tmp);
  }
  if (bad) c->st.write_errors++;
  vd_free(b);
}
