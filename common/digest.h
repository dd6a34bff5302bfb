/*
 * common/digest.h - SHA-256 content hashes (OpenSSL's libcrypto).
 *
 * Used wherever a hash must be stable across runs, machines and versions
 * and must not collide by accident or by design: the plans' content hashes
 * in reports, proof-cache keys, certificate manifests.  The in-memory
 * tables keep their fast mixer (common/hash.h); nothing here is for them.
 *
 * Layer: common/ (libcrypto stays behind this header).
 */
#ifndef VD_DIGEST_H
#define VD_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "diag.h"

#define VD_DIGEST_BYTES 32
#define VD_DIGEST_HEX (2 * VD_DIGEST_BYTES + 1)

/* An incremental SHA-256.  Opaque; create with vd_digest_new, free with
 * vd_digest_free (NULL is fine). */
typedef struct vd_digest vd_digest;

/* NULL when out of memory. */
vd_digest *vd_digest_new(void);
void vd_digest_update(vd_digest *h, const void *p, size_t n);
/* Writes the 32-byte digest to out; the object may not be updated after. */
void vd_digest_final(vd_digest *h, uint8_t out[VD_DIGEST_BYTES]);
void vd_digest_free(vd_digest *h);

/* One-shot digest of n bytes.  VD_ENOMEM if libcrypto cannot allocate. */
vd_rc vd_digest_bytes(const void *p, size_t n, uint8_t out[VD_DIGEST_BYTES]);
/* Digest of a whole file's content.  VD_EIO (diag names the file) when it
 * cannot be read. */
vd_rc vd_digest_file(const char *path, uint8_t out[VD_DIGEST_BYTES], vd_diag *d);
/* Lower-case hex of a digest, NUL-terminated. */
void vd_digest_hex(const uint8_t dg[VD_DIGEST_BYTES], char hex[VD_DIGEST_HEX]);

#endif
