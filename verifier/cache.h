/*
 * verifier/cache.h - the proof cache: stage classes proven EQUIVALENT,
 * remembered across the configurations of a gate run (in memory) and
 * across runs (a directory, --cache DIR).  docs/verifier.md section 9 and
 * docs/gate.md.
 *
 * A class is keyed by the SHA-256 (common/digest.h) of its full canonical
 * form (stages/canon.c: operators, attributes after shape reduction's
 * overrides, constants, reduced and full shapes, lineage structure, wiring,
 * collective participant counts: exactly what the solver reads) together
 * with verdict's encoder version (VD_ENCODER_VERSION, solver/stage_solve.h)
 * and the SHA-256 of the running binary itself.  An entry holds the whole
 * canonical form and an HMAC-SHA256 of its content under a key kept
 * outside the directory (VERDICT_CACHE_KEY, or ~/.config/verdict/cache.key);
 * a lookup hits only when the stored form equals the current one byte for
 * byte and the MAC holds, so neither a corrupted file, nor a hash
 * collision, nor an entry written without the key can make a class pass.  Only EQUIVALENT results are stored: never a failure, never
 * an inconclusive one.
 *
 * SOUNDNESS: a hit asserts "the solver proved exactly this question
 * before"; docs/verifier.md section 9 says what a hostile writer of the
 * directory can and cannot do.
 *
 * Not thread-safe: the run looks up and stores from its serial code only.
 * Safe across processes: entries are written to a private temporary file
 * (mkstemp) and renamed into place, readers treat a missing, short or
 * malformed file as a miss.
 */
#ifndef VD_CACHE_H
#define VD_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/diag.h"

/* Default directory of gate runs, relative to the working directory. */
#define VD_CACHE_DEFAULT_DIR ".verdict-cache"
/* Default size cap of the directory: past it, the entries least recently
 * used (oldest mtime; a hit refreshes it) are removed when the cache is
 * closed, down to 3/4 of the cap.  A proven class of the 405B shape is a
 * few KB; 256 MB hold tens of thousands. */
#define VD_CACHE_DEFAULT_MAX_MB 256

typedef struct vd_cache vd_cache;

typedef struct {
  size_t hits_memory;  /* classes proven earlier in this process (another configuration of a gate) */
  size_t hits_disk;    /* classes read from the directory */
  size_t stored;       /* classes proven and written */
  size_t ignored;      /* entries found but not used: corrupt, truncated, of another version */
  size_t write_errors; /* entries that could not be written (the run goes on) */
  size_t evicted;      /* entries removed by the size cap */
  size_t config_hits;  /* whole configurations found unchanged since a proven run */
  char last_ignored[600];  /* "PATH: why" of the last ignored entry, "" if none */
} vd_cache_stats;

/* Opens the cache.  dir NULL: memory only (a gate run with --no-cache still
 * proves shared classes once).  dir is created (mode 0700) when missing;
 * VD_EIO (diag names dir) when it cannot be, or is not a directory.
 * max_bytes 0: the default cap. */
vd_rc vd_cache_open(const char *dir, uint64_t max_bytes, vd_cache **c, vd_diag *d);
/* Applies the size cap (when dir) and frees everything; accepts NULL. */
void vd_cache_close(vd_cache *c);

/* 1 when a proof of exactly this canonical form is known (memory, then
 * disk); 0 otherwise, also on any error (a miss costs a proof, never a
 * verdict). */
int vd_cache_lookup(vd_cache *c, const uint8_t *canon, size_t n);
/* Remembers that this canonical form was proven EQUIVALENT.  Errors only
 * count in the stats. */
void vd_cache_store(vd_cache *c, const uint8_t *canon, size_t n);

/* Whole configurations (a gate's configuration unchanged since a run
 * proved it EQUIVALENT): the question is the pair's input files, by their
 * SHA-256 (plans, or nnScaler pickles together with the importer's
 * sources), in `what` (the caller's bytes: kind, file digests); the entry
 * stores `what` whole, the counts of the proof, and a MAC, and a
 * lookup hits only when `what` matches byte for byte.  Stored only for
 * EQUIVALENT configurations.  A PyTorch program is never keyed so: it may
 * import files the key would not see. */
typedef struct {
  uint64_t n_stages, n_classes, n_represented; /* of the run that proved it */
} vd_cache_config;
int vd_cache_config_lookup(vd_cache *c, const uint8_t *what, size_t n, vd_cache_config *out);
void vd_cache_config_store(vd_cache *c, const uint8_t *what, size_t n, const vd_cache_config *info);

/* Counters since open; vd_cache_stats_since gives the difference to an
 * earlier snapshot (one configuration's share). */
void vd_cache_stats_get(const vd_cache *c, vd_cache_stats *s);
void vd_cache_stats_since(const vd_cache_stats *before, const vd_cache_stats *now, vd_cache_stats *out);
const char *vd_cache_dir(const vd_cache *c); /* NULL for memory only */

/* The file an entry of this canonical form lives in (for tests and the
 * docs' forging argument): DIR/<hex of the key>.vdp.  0 on success. */
int vd_cache_entry_path(const vd_cache *c, const uint8_t *canon, size_t n, char *buf, size_t cap);

#endif
