/* fuzz_msg: bus frames (proto/msg.c). Every service decodes frames from
 * its peers; a frame that decodes must copy, encode and decode again to
 * the same type and id. */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "lib/buf.h"
#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    msg_t m, copy, back;
    cr_err_t err = {0};
    (void)msg_peek(data, size, &m, &err);
    if (msg_decode(data, size, &m, &err) != CR_OK)
        return 0;
    if (msg_copy(&m, &copy) != CR_OK) {
        msg_clear(&m);
        return 0;
    }
    cr_buf_t out;
    cr_buf_init(&out, MSG_FRAME_MAX + 1024);
    if (msg_encode(&copy, &out, &err) == CR_OK) {
        if (msg_decode(out.data, out.len, &back, &err) != CR_OK) {
            fprintf(stderr, "fuzz_msg: re-encoded frame does not decode: %s\n", err.msg);
            abort();
        }
        if (back.type != m.type || strcmp(back.id, m.id) != 0)
            abort();
        msg_clear(&back);
    }
    cr_buf_free(&out);
    msg_clear(&copy);
    msg_clear(&m);
    return 0;
}

/* Seeds: every message type, once with its required fields only and once
 * with all of them, each value a short one of its kind. */
static void fill(msg_t *m, const msg_desc_t *d, char *base, bool all, int depth)
{
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        if (!all && !f->required)
            continue;
        char *p = base + f->offset;
        switch (f->kind) {
        case MSG_KIND_STR:
            *(char **)p = msg_strdup(m, f->name);
            break;
        case MSG_KIND_I64:
            *(int64_t *)p = 7;
            break;
        case MSG_KIND_F64:
            *(double *)p = 0.5;
            break;
        case MSG_KIND_BOOL:
            *(bool *)p = true;
            break;
        case MSG_KIND_BIN: {
            msg_bytes_t *b = (msg_bytes_t *)p;
            b->len = 4;
            b->data = msg_alloc(m, b->len);
            break;
        }
        case MSG_KIND_I32S: {
            msg_i32s_t *a = (msg_i32s_t *)p;
            a->n = 2;
            a->v = msg_alloc(m, 2 * sizeof *a->v);
            a->v[1] = 5;
            break;
        }
        case MSG_KIND_STRS: {
            msg_strs_t *a = (msg_strs_t *)p;
            a->n = 1;
            a->v = msg_alloc(m, sizeof *a->v);
            a->v[0] = msg_strdup(m, f->name);
            break;
        }
        case MSG_KIND_REC: {
            if (depth > 3 && !f->required)
                continue;
            const msg_desc_t *sub = msg_record_desc(f->sub);
            char *rec = msg_alloc(m, sub->size);
            fill(m, sub, rec, all, depth + 1);
            *(char **)p = rec;
            break;
        }
        case MSG_KIND_RECS: {
            if (depth > 3 && !f->required)
                continue;
            const msg_desc_t *sub = msg_record_desc(f->sub);
            size_t n = 1;
            char *arr = msg_alloc(m, sub->size);
            fill(m, sub, arr, all, depth + 1);
            memcpy(p, &arr, sizeof arr);
            memcpy(p + sizeof(void *), &n, sizeof n);
            break;
        }
        }
        *(bool *)(base + f->has_offset) = true;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_seed_dir();
    if (!dir)
        return 0;
    for (int t = MSG_NONE + 1; t < MSG__COUNT; t++) {
        for (int all = 0; all < 2; all++) {
            msg_t m;
            msg_init(&m, (msg_type_t)t, "req-1");
            fill(&m, msg_body_desc((msg_type_t)t), (char *)&m.u, all, 0);
            cr_buf_t b;
            cr_buf_init(&b, MSG_FRAME_MAX);
            cr_err_t err = {0};
            if (msg_encode(&m, &b, &err) != CR_OK) {
                fprintf(stderr, "fuzz_msg: seed %s: %s\n", msg_type_name((msg_type_t)t), err.msg);
                exit(1);
            }
            char name[64];
            snprintf(name, sizeof name, "%s-%s", msg_type_name((msg_type_t)t),
                     all ? "all" : "required");
            fuzz_write_seed(dir, name, b.data, b.len);
            cr_buf_free(&b);
            msg_clear(&m);
        }
    }
    exit(0);
}
