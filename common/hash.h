/*
 * common/hash.h - the 64-bit mixer of verdict's open-addressing tables.
 *
 * MurmurHash3's fmix64 finaliser: every input bit affects every output
 * bit, so keys built from small consecutive ids (node, replica, mb) spread
 * over the whole table.  Tables only; no output depends on hash values
 * except through the tables' deterministic lookups.
 */
#ifndef VD_HASH_H
#define VD_HASH_H

#include <stdint.h>

static inline uint64_t vd_hash_mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

#endif
