/*
 * common/hash.h - the 64-bit mixer of verdict's open-addressing tables.
 *
 * MurmurHash3's fmix64 finaliser: every input bit affects every output
 * bit, so keys built from small consecutive ids (node, replica, mb) spread
 * over the whole table.  Tables only; no output depends on hash values
 * except through the tables' deterministic lookups.
 *
 * SplitMix64 (vd_hash_splitmix64, and its finaliser alone) is the other
 * mixer: the deterministic random values of noise/, oracle/ and the tests,
 * and the id map of plans/idmap.c.  Those values are part of the output (noise
 * bounds, generated inputs): its constants never change.
 */
#ifndef VD_HASH_H
#define VD_HASH_H

#include <stdint.h>
#include <string.h>

static inline uint64_t vd_hash_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* Knuth's multiplicative hash of a 32-bit id (the ast id tables of solver/):
 * the product wraps at 32 bits, the table masks its low bits. */
static inline unsigned vd_hash_knuth32(unsigned k) { return k * 2654435761u; }

/* SplitMix64's finaliser (Steele, Lea and Flood's variant 13). */
static inline uint64_t vd_hash_splitmix_fin(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* SplitMix64 of one state: the golden-ratio step, then the finaliser. */
static inline uint64_t vd_hash_splitmix64(uint64_t x) { return vd_hash_splitmix_fin(x + 0x9e3779b97f4a7c15ULL); }

/* A double uniform in [0, 1) from the top 53 bits of a mixed value. */
static inline double vd_hash_unit01(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

/* Hash of n bytes, a 64-bit word at a time (canonical stage forms are
 * kilobytes; a byte-at-a-time hash was a tenth of the cut's CPU). */
static inline uint64_t vd_hash_bytes(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
  for (; n >= 8; b += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, b, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  memcpy(&w, b, n);
  return vd_hash_mix64(h ^ w);
}

#endif
