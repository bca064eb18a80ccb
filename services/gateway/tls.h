/* tls.h: HTTPS for the gateway. With CORRAL_TLS_CERT and CORRAL_TLS_KEY
 * set, microhttpd serves TLS (GnuTLS, as Debian builds it) with that
 * certificate; with CORRAL_API_KEY too, this is the way to expose corral
 * beyond localhost. */
#ifndef GW_TLS_H
#define GW_TLS_H

#include "lib/prelude.h"
#include "lib/status.h"

#define GW_TLS_PEM_MAX (1u << 20) /* bytes of a certificate chain or key file */

/* The PEM texts of a certificate and key file, read once at start (the
 * daemon holds them while it runs). */
typedef struct gw_tls {
    char *cert_pem; /* owned, NUL-terminated */
    char *key_pem;  /* owned, NUL-terminated; wiped before it is freed */
} gw_tls_t;

/* Reads both files. CR_E_UNSUPPORTED when this microhttpd has no TLS;
 * CR_E_IO naming the file (and the variable that named it) when one cannot
 * be read; CR_E_INVALID when one is empty, too large or not PEM. */
cr_status_t gw_tls_load(const char *cert_path, const char *key_path, gw_tls_t *out,
                        cr_err_t *err);

/* Frees what gw_tls_load read; accepts a zeroed one. */
void gw_tls_free(gw_tls_t *tls);

#endif
