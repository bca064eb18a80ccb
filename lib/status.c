/* status.c: names of status codes and the error record helpers. */
#include "lib/prelude.h"
#include "lib/status.h"

static const char *const status_names[CR_E__COUNT] = {
    [CR_OK] = "ok",
    [CR_E_INVALID] = "invalid",
    [CR_E_NOT_FOUND] = "not found",
    [CR_E_NOMEM] = "out of memory",
    [CR_E_IO] = "i/o error",
    [CR_E_CORRUPT] = "corrupt data",
    [CR_E_TRUNCATED] = "truncated data",
    [CR_E_TOO_LARGE] = "too large",
    [CR_E_UNSUPPORTED] = "unsupported",
    [CR_E_TIMEOUT] = "timed out",
    [CR_E_CANCELED] = "canceled",
    [CR_E_BUSY] = "busy",
    [CR_E_RUNNER] = "runner failed",
    [CR_E_INTERNAL] = "internal error",
    [CR_E_PROTO] = "protocol error",
    [CR_E_EXISTS] = "already exists",
    [CR_E_UNAUTHORIZED] = "unauthorized",
    [CR_E_FORBIDDEN] = "forbidden",
    [CR_E_UNAVAILABLE] = "unavailable",
};

const char *cr_status_str(cr_status_t st)
{
    if ((int)st < 0 || st >= CR_E__COUNT || !status_names[st])
        return "unknown status";
    return status_names[st];
}

cr_status_t cr_err_set(cr_err_t *err, cr_status_t st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = st;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

cr_status_t cr_err_wrap(cr_err_t *err, const char *fmt, ...)
{
    if (!err)
        return CR_E_INTERNAL;
    char prefix[CR_ERR_MSG_MAX];
    char old[CR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Both halves are bounded by the message size; the result is cut to it. */
    size_t n = strnlen(prefix, sizeof err->msg - 3);
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3;
    size_t m = strnlen(old, room);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = '\0';
    return err->status;
}

void cr_err_clear(cr_err_t *err)
{
    if (err) {
        err->status = CR_OK;
        err->msg[0] = '\0';
    }
}

void cr_msg_redact(char *text, size_t cap, const char *path, const char *shown)
{
    size_t plen = path ? strlen(path) : 0;
    if (!text || !cap || !plen)
        return;
    char out[CR_ERR_MSG_MAX * 2];
    size_t o = 0, lim = CR_MIN(cap, sizeof out) - 1;
    for (const char *p = text; *p && o < lim;) {
        if (!strncmp(p, path, plen)) {
            for (const char *q = shown; *q && o < lim; q++)
                out[o++] = *q;
            p += plen;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    memcpy(text, out, o + 1);
}
