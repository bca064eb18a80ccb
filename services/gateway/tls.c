/* tls.c: reads the gateway's certificate and key (tls.h). */
#include "services/gateway/tls.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cr_status_t read_pem(const char *path, const char *var, char **out, cr_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "%s: cannot open %s: %s", var, path, strerror(errno));
    char *buf = malloc(GW_TLS_PEM_MAX + 1);
    if (!buf) {
        fclose(f);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    size_t n = fread(buf, 1, GW_TLS_PEM_MAX + 1, f);
    bool failed = ferror(f);
    fclose(f);
    cr_status_t st = CR_OK;
    if (failed)
        st = cr_err_set(err, CR_E_IO, "%s: cannot read %s", var, path);
    else if (n > GW_TLS_PEM_MAX)
        st = cr_err_set(err, CR_E_INVALID, "%s: %s is over %u bytes", var, path,
                        GW_TLS_PEM_MAX);
    else if (n == 0 || memchr(buf, '\0', n) || !strstr((buf[n] = '\0', buf), "-----BEGIN "))
        st = cr_err_set(err, CR_E_INVALID, "%s: %s is not a PEM file", var, path);
    if (st) {
        memset(buf, 0, n < GW_TLS_PEM_MAX ? n : GW_TLS_PEM_MAX);
        free(buf);
        return st;
    }
    *out = buf;
    return CR_OK;
}

cr_status_t gw_tls_load(const char *cert_path, const char *key_path, gw_tls_t *out,
                        cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "CORRAL_TLS_CERT is set, but this libmicrohttpd was built without TLS");
    cr_status_t st = read_pem(cert_path, "CORRAL_TLS_CERT", &out->cert_pem, err);
    if (!st)
        st = read_pem(key_path, "CORRAL_TLS_KEY", &out->key_pem, err);
    if (st)
        gw_tls_free(out);
    return st;
}

void gw_tls_free(gw_tls_t *tls)
{
    if (tls->key_pem)
        memset(tls->key_pem, 0, strlen(tls->key_pem));
    free(tls->key_pem);
    free(tls->cert_pem);
    tls->key_pem = tls->cert_pem = NULL;
}
