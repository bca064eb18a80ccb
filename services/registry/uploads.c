/* uploads.c: chunked blob uploads (see uploads.h). */
#include "lib/prelude.h"
#include "services/registry/uploads.h"
#include "lib/log.h"

typedef struct upload {
    bool used;
    char id[MSG_ID_MAX + 1];
    char hex[REG_HEX_LEN + 1];
    reg_blob_writer_t *w; /* NULL when the blob already exists (discard) */
    int64_t offset;       /* bytes received */
    int64_t last_ms;      /* time of the last piece */
} upload_t;

struct reg_uploads {
    reg_store_t *store;
    int64_t timeout_ms;
    upload_t slots[REG_UPLOADS_MAX];
};

reg_uploads_t *reg_uploads_new(reg_store_t *s, int64_t timeout_ms)
{
    reg_uploads_t *u = calloc(1, sizeof *u);
    if (u) {
        u->store = s;
        u->timeout_ms = timeout_ms;
    }
    return u;
}

static void drop(upload_t *up)
{
    reg_blob_writer_destroy(&up->w); /* removes the temp file */
    memset(up, 0, sizeof *up);
}

void reg_uploads_destroy(reg_uploads_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    for (size_t i = 0; i < REG_UPLOADS_MAX; i++)
        if ((*self_p)->slots[i].used)
            drop(&(*self_p)->slots[i]);
    free(*self_p);
    *self_p = NULL;
}

static upload_t *find(reg_uploads_t *u, const char *id)
{
    for (size_t i = 0; i < REG_UPLOADS_MAX; i++)
        if (u->slots[i].used && !strcmp(u->slots[i].id, id))
            return &u->slots[i];
    return NULL;
}

static cr_status_t start(reg_uploads_t *u, const char *id, const char *hex,
                         int64_t now_ms, upload_t **out, cr_err_t *err)
{
    upload_t *up = NULL;
    *out = NULL;
    for (size_t i = 0; i < REG_UPLOADS_MAX && !up; i++)
        if (!u->slots[i].used)
            up = &u->slots[i];
    if (!up)
        return cr_err_set(err, CR_E_BUSY, "too many blob uploads in progress");
    memset(up, 0, sizeof *up);
    if (!reg_store_blob_exists(u->store, hex, NULL)) {
        cr_status_t st = reg_blob_writer_new(u->store, hex, &up->w, err);
        if (st)
            return st;
    }
    up->used = true;
    snprintf(up->id, sizeof up->id, "%s", id);
    memcpy(up->hex, hex, sizeof up->hex);
    up->last_ms = now_ms;
    *out = up;
    return CR_OK;
}

cr_status_t reg_uploads_put(reg_uploads_t *u, const char *id,
                            const msg_blob_put_body_t *piece, int64_t now_ms,
                            bool *done, bool *created, cr_err_t *err)
{
    *done = false;
    *created = false;
    upload_t *up = find(u, id ? id : "");
    char hex[REG_HEX_LEN + 1];
    cr_status_t st = reg_digest_parse(piece->digest, hex, err);
    if (st) {
        if (up)
            drop(up);
        return st;
    }
    if (up && piece->offset == 0 && up->offset > 0) {
        drop(up); /* the client started over */
        up = NULL;
    }
    if (!up) {
        if (piece->offset != 0)
            return cr_err_set(err, CR_E_INVALID,
                              "blob upload: no upload in progress for offset "
                              "%" PRId64,
                              piece->offset);
        st = start(u, id ? id : "", hex, now_ms, &up, err);
        if (st)
            return st;
    }
    if (strcmp(up->hex, hex) != 0) {
        drop(up);
        return cr_err_set(err, CR_E_INVALID,
                          "blob upload: digest changed during the upload");
    }
    if (piece->offset != up->offset) {
        int64_t want = up->offset;
        drop(up);
        return cr_err_set(err, CR_E_INVALID,
                          "blob upload: piece at offset %" PRId64
                          ", expected %" PRId64,
                          piece->offset, want);
    }
    size_t len = piece->has_data ? piece->data.len : 0;
    if (len && up->w) {
        st = reg_blob_writer_write(up->w, piece->data.data, len, err);
        if (st) {
            drop(up);
            return st;
        }
    }
    up->offset += (int64_t)len;
    up->last_ms = now_ms;
    if (!(piece->has_last && piece->last))
        return CR_OK;
    *done = true;
    if (up->w)
        st = reg_blob_writer_finish(up->w, NULL, created, err);
    drop(up);
    return st;
}

bool reg_uploads_has(const reg_uploads_t *u, const char *id)
{
    for (size_t i = 0; i < REG_UPLOADS_MAX; i++)
        if (u->slots[i].used && !strcmp(u->slots[i].id, id ? id : ""))
            return true;
    return false;
}

bool reg_uploads_cancel(reg_uploads_t *u, const char *id)
{
    upload_t *up = find(u, id ? id : "");
    if (!up)
        return false;
    cr_log_info("blob upload %s of sha256:%s canceled after %" PRId64 " bytes",
                up->id, up->hex, up->offset);
    drop(up);
    return true;
}

size_t reg_uploads_expire(reg_uploads_t *u, int64_t now_ms)
{
    size_t n = 0;
    for (size_t i = 0; i < REG_UPLOADS_MAX; i++) {
        upload_t *up = &u->slots[i];
        if (up->used && now_ms - up->last_ms > u->timeout_ms) {
            cr_log_info("blob upload %s of sha256:%s abandoned after %" PRId64
                        " bytes",
                        up->id, up->hex, up->offset);
            drop(up);
            n++;
        }
    }
    return n;
}

size_t reg_uploads_count(const reg_uploads_t *u)
{
    size_t n = 0;
    for (size_t i = 0; i < REG_UPLOADS_MAX; i++)
        n += u->slots[i].used;
    return n;
}
