/*
 * common/digest.c - SHA-256 through OpenSSL's EVP interface (digest.h).
 *
 * EVP, not the deprecated SHA256_* calls: they are the interface OpenSSL 3
 * keeps.  A failing EVP call can only mean an allocation failure inside
 * libcrypto here (SHA-256 is always available), reported as VD_ENOMEM.
 */
#include "digest.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "mem.h"

struct vd_digest {
  EVP_MD_CTX *ctx;
};

vd_digest *vd_digest_new(void) {
  vd_digest *h = vd_calloc(1, sizeof *h);
  if (!h) return NULL;
  h->ctx = EVP_MD_CTX_new();
  if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
    vd_digest_free(h);
    return NULL;
  }
  return h;
}

void vd_digest_update(vd_digest *h, const void *p, size_t n) {
  if (n) EVP_DigestUpdate(h->ctx, p, n);
}

void vd_digest_final(vd_digest *h, uint8_t out[VD_DIGEST_BYTES]) {
  unsigned len = 0;
  EVP_DigestFinal_ex(h->ctx, out, &len);
}

void vd_digest_free(vd_digest *h) {
  if (!h) return;
  EVP_MD_CTX_free(h->ctx);
  vd_free(h);
}

vd_rc vd_digest_bytes(const void *p, size_t n, uint8_t out[VD_DIGEST_BYTES]) {
  unsigned len = 0;
  if (EVP_Digest(p, n, out, &len, EVP_sha256(), NULL) != 1) return VD_ENOMEM;
  return VD_OK;
}

vd_rc vd_digest_file(const char *path, uint8_t out[VD_DIGEST_BYTES], vd_diag *d) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return vd_diag_set(d, VD_EIO, __FILE__, __LINE__, path, "", "", "cannot open: %s",
                       strerror(errno));
  vd_digest *h = vd_digest_new();
  if (!h) {
    fclose(f);
    return VD_ENOMEM;
  }
  unsigned char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) vd_digest_update(h, buf, got);
  int bad = ferror(f);
  fclose(f);
  vd_digest_final(h, out);
  vd_digest_free(h);
  if (bad) return vd_diag_set(d, VD_EIO, __FILE__, __LINE__, path, "", "", "read error");
  return VD_OK;
}

void vd_digest_hex(const uint8_t dg[VD_DIGEST_BYTES], char hex[VD_DIGEST_HEX]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < VD_DIGEST_BYTES; i++) {
    hex[2 * i] = digits[dg[i] >> 4];
    hex[2 * i + 1] = digits[dg[i] & 15];
  }
  hex[2 * VD_DIGEST_BYTES] = 0;
}
