/* test_msg.c: the bus codec. Every message round-trips with every field
 * set and with only its required fields; hostile frames (truncated,
 * garbage, wrong types, huge lengths) each get a named case. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "proto/msg.h"
#include "tests/unit/check.h"

#include <msgpack.h>
#include <stdalign.h>

/* ---- a generic filler and comparer over the descriptors ---- */

static const int64_t i64_values[] = {
    0, -1, 1, 127, 128, -32, -33, 255, 65535, 65536, -32769,
    INT64_MAX, INT64_MIN, (int64_t)1 << 40, -((int64_t)1 << 40),
};

static const char *const str_values[] = {
    "", "hello", "quote \" and \\ backslash", "line\nbreak\ttab",
    "caf\xc3\xa9 \xe2\x9c\x93", /* UTF-8 */
    "\xff\xfe raw high bytes",   /* not UTF-8: still carried as is */
};

/* Fills the struct at base. all=false sets only required fields. `k`
 * varies the values between fields. */
static void fill(msg_t *m, const msg_desc_t *d, char *base, bool all, int *k)
{
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        if (!all && !f->required)
            continue;
        char *p = base + f->offset;
        int v = (*k)++;
        switch (f->kind) {
        case MSG_KIND_STR: {
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%s-%s-%d", f->name,
                     str_values[v % CR_ARRAY_LEN(str_values)], v);
            *(char **)p = msg_strdup(m, tmp);
            break;
        }
        case MSG_KIND_I64:
            *(int64_t *)p = i64_values[v % CR_ARRAY_LEN(i64_values)];
            break;
        case MSG_KIND_F64:
            *(double *)p = (v % 2 ? -1.0 : 1.0) * (0.25 + v * 1.5e-3);
            break;
        case MSG_KIND_BOOL:
            *(bool *)p = v % 2 == 0;
            break;
        case MSG_KIND_BIN: {
            msg_bytes_t *b = (msg_bytes_t *)p;
            b->len = 300;
            b->data = msg_alloc(m, b->len);
            for (size_t j = 0; j < b->len; j++)
                b->data[j] = (uint8_t)(j + (size_t)v); /* includes NULs */
            break;
        }
        case MSG_KIND_I32S: {
            msg_i32s_t *a = (msg_i32s_t *)p;
            static const int32_t vals[] = {0, -1, INT32_MAX, INT32_MIN, 1 << 20, 7};
            a->n = CR_ARRAY_LEN(vals);
            a->v = msg_alloc(m, sizeof vals);
            memcpy(a->v, vals, sizeof vals);
            a->v[5] = v;
            break;
        }
        case MSG_KIND_STRS: {
            msg_strs_t *a = (msg_strs_t *)p;
            a->n = 3;
            a->v = msg_alloc(m, a->n * sizeof *a->v);
            a->v[0] = msg_strdup(m, "");
            a->v[1] = msg_strdup(m, f->name);
            a->v[2] = msg_strdup(m, str_values[v % CR_ARRAY_LEN(str_values)]);
            break;
        }
        case MSG_KIND_REC: {
            const msg_desc_t *sub = msg_record_desc(f->sub);
            char *rec = msg_alloc(m, sub->size);
            fill(m, sub, rec, all, k);
            *(char **)p = rec;
            break;
        }
        case MSG_KIND_RECS: {
            const msg_desc_t *sub = msg_record_desc(f->sub);
            size_t n = 2;
            char *arr = msg_alloc(m, n * sub->size);
            for (size_t j = 0; j < n; j++)
                fill(m, sub, arr + j * sub->size, all, k);
            memcpy(p, &arr, sizeof arr);
            memcpy(p + sizeof(void *), &n, sizeof n);
            break;
        }
        }
        *(bool *)(base + f->has_offset) = true;
    }
}

/* Compares two structs field by field; reports the first difference with
 * its path. Returns true when equal. */
static bool same(const msg_desc_t *d, const char *a, const char *b,
                 const char *path)
{
    bool ok = true;
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        char fp[256];
        snprintf(fp, sizeof fp, "%s.%s", path, f->name);
        bool ha = *(const bool *)(a + f->has_offset);
        bool hb = *(const bool *)(b + f->has_offset);
        if (ha != hb) {
            fprintf(stderr, "  %s: has_ %d vs %d\n", fp, ha, hb);
            ok = false;
            continue;
        }
        if (!ha)
            continue;
        const char *pa = a + f->offset, *pb = b + f->offset;
        bool eq = true;
        switch (f->kind) {
        case MSG_KIND_STR:
            eq = !strcmp(*(char *const *)pa, *(char *const *)pb);
            break;
        case MSG_KIND_I64:
            eq = *(const int64_t *)pa == *(const int64_t *)pb;
            break;
        case MSG_KIND_F64:
            eq = *(const double *)pa == *(const double *)pb;
            break;
        case MSG_KIND_BOOL:
            eq = *(const bool *)pa == *(const bool *)pb;
            break;
        case MSG_KIND_BIN: {
            const msg_bytes_t *x = (const msg_bytes_t *)pa, *y = (const msg_bytes_t *)pb;
            eq = x->len == y->len && (!x->len || !memcmp(x->data, y->data, x->len));
            break;
        }
        case MSG_KIND_I32S: {
            const msg_i32s_t *x = (const msg_i32s_t *)pa, *y = (const msg_i32s_t *)pb;
            eq = x->n == y->n && (!x->n || !memcmp(x->v, y->v, x->n * sizeof *x->v));
            break;
        }
        case MSG_KIND_STRS: {
            const msg_strs_t *x = (const msg_strs_t *)pa, *y = (const msg_strs_t *)pb;
            eq = x->n == y->n;
            for (size_t j = 0; eq && j < x->n; j++)
                eq = !strcmp(x->v[j], y->v[j]);
            break;
        }
        case MSG_KIND_REC:
            eq = same(msg_record_desc(f->sub), *(char *const *)pa,
                      *(char *const *)pb, fp);
            break;
        case MSG_KIND_RECS: {
            const msg_desc_t *sub = msg_record_desc(f->sub);
            const char *va, *vb;
            size_t na, nb;
            memcpy(&va, pa, sizeof va);
            memcpy(&vb, pb, sizeof vb);
            memcpy(&na, pa + sizeof(void *), sizeof na);
            memcpy(&nb, pb + sizeof(void *), sizeof nb);
            eq = na == nb;
            for (size_t j = 0; eq && j < na; j++) {
                char ep[300];
                snprintf(ep, sizeof ep, "%s[%zu]", fp, j);
                eq = same(sub, va + j * sub->size, vb + j * sub->size, ep);
            }
            break;
        }
        }
        if (!eq) {
            fprintf(stderr, "  %s: values differ\n", fp);
            ok = false;
        }
    }
    return ok;
}

/* Encodes m, decodes it, and checks it came back the same; also checks a
 * deep copy. */
static void round_trip(msg_t *m, const char *what)
{
    const msg_desc_t *d = msg_body_desc(m->type);
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = msg_encode(m, &b, &err);
    CHECK_MSG(st == CR_OK, "%s %s: encode: %s", d->name, what, err.msg);
    if (st) {
        cr_buf_free(&b);
        return;
    }
    /* Decode from a private copy that is scribbled over afterwards: the
     * result must not point into the frame. */
    char *frame = malloc(b.len);
    memcpy(frame, b.data, b.len);
    msg_t out;
    /* The header alone, as a relay reads it. */
    CHECK_MSG(msg_peek(frame, b.len, &out, &err) == CR_OK, "%s %s: peek: %s",
              d->name, what, err.msg);
    CHECK(out.type == m->type && !strcmp(out.id, m->id) && !out.arena);
    st = msg_decode(frame, b.len, &out, &err);
    memset(frame, 0xAA, b.len);
    free(frame);
    CHECK_MSG(st == CR_OK, "%s %s: decode: %s", d->name, what, err.msg);
    if (!st) {
        CHECK_EQ_INT(out.type, m->type);
        CHECK_EQ_INT(out.version, MSG_PROTO_VERSION);
        CHECK_EQ_STR(out.id, m->id);
        CHECK_MSG(same(d, (const char *)&m->u, (const char *)&out.u, d->name),
                  "%s %s: decoded differs", d->name, what);
        msg_t copy;
        CHECK_EQ_INT(msg_copy(&out, &copy), CR_OK);
        msg_clear(&out); /* the copy must not share the original's arena */
        CHECK_MSG(same(d, (const char *)&m->u, (const char *)&copy.u, d->name),
                  "%s %s: copy differs", d->name, what);
        CHECK_EQ_STR(copy.id, m->id);
        msg_clear(&copy);
        CHECK(copy.arena == NULL && copy.type == MSG_NONE);
    }
    cr_buf_free(&b);
}

static void test_round_trip_every_type(void)
{
    for (int t = MSG_NONE + 1; t < MSG__COUNT; t++) {
        const msg_desc_t *d = msg_body_desc((msg_type_t)t);
        CHECK(d != NULL);
        msg_t m;
        char id[40];
        snprintf(id, sizeof id, "req-%d", t);
        int k = t;

        msg_init(&m, (msg_type_t)t, id);
        fill(&m, d, (char *)&m.u, true, &k);
        round_trip(&m, "all fields");
        msg_clear(&m);

        msg_init(&m, (msg_type_t)t, id);
        fill(&m, d, (char *)&m.u, false, &k);
        round_trip(&m, "required only");
        msg_clear(&m);
    }
}

/* Required-only: the decoded optional has_ flags are all false. */
static void test_required_only_flags(void)
{
    msg_t m, out;
    msg_init(&m, MSG_generate, "abc");
    m.u.generate.model = "llama3";
    m.u.generate.has_model = true;
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    CHECK_EQ_INT(msg_encode(&m, &b, NULL), CR_OK);
    CHECK_EQ_INT(msg_decode(b.data, b.len, &out, NULL), CR_OK);
    CHECK_EQ_STR(out.u.generate.model, "llama3");
    CHECK(out.u.generate.has_model);
    CHECK(!out.u.generate.has_prompt && !out.u.generate.has_options &&
          !out.u.generate.has_context && !out.u.generate.has_raw &&
          !out.u.generate.has_keep_alive_ms);
    CHECK(out.u.generate.prompt == NULL && out.u.generate.options == NULL);
    CHECK(out.arena != NULL);
    msg_clear(&out);
    cr_buf_free(&b);

    /* A message without fields at all. */
    msg_init(&m, MSG_ping, NULL);
    cr_buf_init(&b, 1 << 20);
    CHECK_EQ_INT(msg_encode(&m, &b, NULL), CR_OK);
    CHECK_EQ_INT(msg_decode(b.data, b.len, &out, NULL), CR_OK);
    CHECK_EQ_INT(out.type, MSG_ping);
    CHECK_EQ_STR(out.id, "");
    msg_clear(&out);
    cr_buf_free(&b);
}

/* ---- nested records by hand ---- */

static cr_status_t encode_decode(msg_t *m, msg_t *out)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    cr_status_t st = msg_encode(m, &b, &err);
    if (!st)
        st = msg_decode(b.data, b.len, out, &err);
    if (st)
        fprintf(stderr, "  encode_decode: %s\n", err.msg);
    cr_buf_free(&b);
    return st;
}

static void test_nested_chat(void)
{
    msg_t m, out;
    msg_init(&m, MSG_chat, "chat-1");
    msg_chat_body_t *c = &m.u.chat;
    c->model = "llava";
    c->has_model = true;
    char *imgs[] = {"aW1nMQ==", "aW1nMg=="};
    msg_message_t msgs[3];
    memset(msgs, 0, sizeof msgs);
    msgs[0].role = "system";
    msgs[0].has_role = true;
    msgs[0].content = "be brief";
    msgs[0].has_content = true;
    msgs[1].role = "user";
    msgs[1].has_role = true;
    msgs[1].content = "what is in these?";
    msgs[1].has_content = true;
    msgs[1].images.v = imgs;
    msgs[1].images.n = 2;
    msgs[1].has_images = true;
    msgs[2].role = "tool";
    msgs[2].has_role = true;
    msgs[2].tool_name = "weather";
    msgs[2].has_tool_name = true;
    c->messages.v = msgs;
    c->messages.n = 3;
    c->has_messages = true;
    char *stops[] = {"\n\n", "User:"};
    msg_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.temperature = 0.7;
    opt.has_temperature = true;
    opt.num_ctx = 4096;
    opt.has_num_ctx = true;
    opt.stop.v = stops;
    opt.stop.n = 2;
    opt.has_stop = true;
    c->options = &opt;
    c->has_options = true;

    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    msg_chat_body_t *o = &out.u.chat;
    CHECK_EQ_STR(out.id, "chat-1");
    CHECK_EQ_STR(o->model, "llava");
    CHECK_EQ_INT(o->messages.n, 3);
    if (o->messages.n == 3) {
        CHECK_EQ_STR(o->messages.v[0].role, "system");
        CHECK_EQ_STR(o->messages.v[0].content, "be brief");
        CHECK(!o->messages.v[0].has_images);
        CHECK_EQ_INT(o->messages.v[1].images.n, 2);
        CHECK(o->messages.v[1].has_images);
        if (o->messages.v[1].images.n == 2) {
            CHECK_EQ_STR(o->messages.v[1].images.v[0], "aW1nMQ==");
            CHECK_EQ_STR(o->messages.v[1].images.v[1], "aW1nMg==");
        }
        CHECK_EQ_STR(o->messages.v[2].tool_name, "weather");
        CHECK(!o->messages.v[2].has_content);
    }
    CHECK(o->has_options && o->options);
    if (o->options) {
        CHECK_NEAR(o->options->temperature, 0.7, 0);
        CHECK_EQ_INT(o->options->num_ctx, 4096);
        CHECK(!o->options->has_top_k);
        CHECK_EQ_INT(o->options->stop.n, 2);
        if (o->options->stop.n == 2) {
            CHECK_EQ_STR(o->options->stop.v[0], "\n\n");
            CHECK_EQ_STR(o->options->stop.v[1], "User:");
        }
    }
    CHECK(!o->has_tools && !o->has_format);
    msg_clear(&out);
}

static void test_nested_tags(void)
{
    msg_t m, out;
    msg_init(&m, MSG_tags_reply, "t");
    char *fams[] = {"llama", "clip"};
    msg_details_t det;
    memset(&det, 0, sizeof det);
    det.format = "gguf";
    det.has_format = true;
    det.families.v = fams;
    det.families.n = 2;
    det.has_families = true;
    det.quantization_level = "Q4_K_M";
    det.has_quantization_level = true;
    msg_model_entry_t ents[2];
    memset(ents, 0, sizeof ents);
    ents[0].name = "llama3:latest";
    ents[0].has_name = true;
    ents[0].size = 4661224676LL;
    ents[0].has_size = true;
    ents[0].details = &det;
    ents[0].has_details = true;
    ents[1].name = "tiny:1b";
    ents[1].has_name = true;
    m.u.tags_reply.models.v = ents;
    m.u.tags_reply.models.n = 2;
    m.u.tags_reply.has_models = true;

    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    msg_tags_reply_body_t *t = &out.u.tags_reply;
    CHECK_EQ_INT(t->models.n, 2);
    if (t->models.n == 2) {
        CHECK_EQ_STR(t->models.v[0].name, "llama3:latest");
        CHECK_EQ_INT(t->models.v[0].size, 4661224676LL);
        CHECK(t->models.v[0].details != NULL);
        if (t->models.v[0].details) {
            CHECK_EQ_STR(t->models.v[0].details->format, "gguf");
            CHECK_EQ_STR(t->models.v[0].details->quantization_level, "Q4_K_M");
            CHECK_EQ_INT(t->models.v[0].details->families.n, 2);
            CHECK_EQ_STR(t->models.v[0].details->families.v[1], "clip");
            CHECK(!t->models.v[0].details->has_family);
        }
        CHECK_EQ_STR(t->models.v[1].name, "tiny:1b");
        CHECK(!t->models.v[1].has_details && t->models.v[1].details == NULL);
    }
    msg_clear(&out);

    /* An empty array survives as present with n == 0. */
    msg_init(&m, MSG_tags_reply, "t");
    m.u.tags_reply.has_models = true;
    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    CHECK(out.u.tags_reply.has_models && out.u.tags_reply.models.n == 0);
    msg_clear(&out);
}

static void test_bin_and_ints(void)
{
    msg_t m, out;
    msg_init(&m, MSG_embeddings, "e");
    size_t n = 1 << 20;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (uint8_t)(i * 31);
    m.u.embeddings.data.data = data;
    m.u.embeddings.data.len = n;
    m.u.embeddings.has_data = true;
    m.u.embeddings.n_inputs = 1;
    m.u.embeddings.has_n_inputs = true;
    m.u.embeddings.dims = -5; /* negative integers survive */
    m.u.embeddings.has_dims = true;
    m.u.embeddings.total_duration = INT64_MIN;
    m.u.embeddings.has_total_duration = true;
    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    CHECK_EQ_INT(out.u.embeddings.data.len, n);
    CHECK(out.u.embeddings.data.data &&
          !memcmp(out.u.embeddings.data.data, data, n));
    CHECK_EQ_INT(out.u.embeddings.dims, -5);
    CHECK(out.u.embeddings.total_duration == INT64_MIN);
    msg_clear(&out);
    free(data);

    /* Empty bytes stay present. */
    msg_init(&m, MSG_blob_put, "b");
    m.u.blob_put.digest = "sha256:00";
    m.u.blob_put.has_digest = true;
    m.u.blob_put.offset = 0;
    m.u.blob_put.has_offset = true;
    m.u.blob_put.has_data = true;
    m.u.blob_put.last = true;
    m.u.blob_put.has_last = true;
    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    CHECK(out.u.blob_put.has_data && out.u.blob_put.data.len == 0);
    CHECK(out.u.blob_put.last && out.u.blob_put.has_last);
    msg_clear(&out);
}

/* ---- hand-built frames ---- */

typedef struct frame {
    msgpack_sbuffer sb;
    msgpack_packer pk;
} frame_t;

static void fr_init(frame_t *f)
{
    msgpack_sbuffer_init(&f->sb);
    msgpack_packer_init(&f->pk, &f->sb, msgpack_sbuffer_write);
}

static void fr_free(frame_t *f)
{
    msgpack_sbuffer_destroy(&f->sb);
}

static void pk_str(frame_t *f, const char *s)
{
    msgpack_pack_str(&f->pk, strlen(s));
    msgpack_pack_str_body(&f->pk, s, strlen(s));
}

/* A top map of n_extra + 3 entries starting with v, type, id. */
static void fr_header(frame_t *f, uint32_t n_extra, const char *type)
{
    msgpack_pack_map(&f->pk, n_extra + 3);
    pk_str(f, "v");
    msgpack_pack_int(&f->pk, MSG_PROTO_VERSION);
    pk_str(f, "type");
    pk_str(f, type);
    pk_str(f, "id");
    pk_str(f, "req-9");
}

/* Decodes bytes and checks status and exact message; the output must be
 * zeroed (id aside) after an error. */
static void expect_err_at(int line, const void *data, size_t len,
                          cr_status_t want, const char *want_msg)
{
    msg_t out;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = msg_decode(data, len, &out, &err);
    CHECK_MSG(st == want, "line %d: status %d, want %d (%s)", line, (int)st,
              (int)want, err.msg);
    if (want_msg)
        CHECK_MSG(!strcmp(err.msg, want_msg), "line %d: \"%s\" != \"%s\"",
                  line, err.msg, want_msg);
    CHECK_MSG(out.type == MSG_NONE && out.arena == NULL, "line %d: not zeroed",
              line);
    if (!st)
        msg_clear(&out);
}
#define EXPECT_ERR(f, msg) expect_err_at(__LINE__, (f)->sb.data, (f)->sb.size, CR_E_PROTO, msg)

/* msg_peek reads the header only: header errors are msg_decode's, body
 * errors are not seen. */
static void test_peek(void)
{
    frame_t f;
    msg_t h;
    cr_err_t err;
    fr_init(&f); /* a chunk whose body has the wrong type */
    msgpack_pack_map(&f.pk, 4);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, MSG_PROTO_VERSION);
    pk_str(&f, "type");
    pk_str(&f, "chunk");
    pk_str(&f, "id");
    pk_str(&f, "r1");
    pk_str(&f, "response");
    msgpack_pack_int(&f.pk, 5);
    CHECK_EQ_INT(msg_peek(f.sb.data, f.sb.size, &h, &err), CR_OK);
    CHECK(h.type == MSG_chunk && !strcmp(h.id, "r1"));
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &h, &err), CR_E_PROTO);
    fr_free(&f);

    fr_init(&f); /* an unknown type */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, MSG_PROTO_VERSION);
    pk_str(&f, "type");
    pk_str(&f, "nope");
    CHECK_EQ_INT(msg_peek(f.sb.data, f.sb.size, &h, &err), CR_E_PROTO);
    CHECK(strstr(err.msg, "unknown message type 'nope'") != NULL);
    CHECK(h.type == MSG_NONE && !h.id[0]);
    fr_free(&f);

    static const uint8_t garbage[] = {0x92, 0x01};
    CHECK_EQ_INT(msg_peek(garbage, sizeof garbage, &h, &err), CR_E_PROTO);
    CHECK_EQ_INT(msg_peek(NULL, 0, &h, &err), CR_E_PROTO);
}

static void test_truncated_prefixes(void)
{
    msg_t m;
    msg_init(&m, MSG_chat, "trunc");
    int k = 3;
    fill(&m, msg_body_desc(MSG_chat), (char *)&m.u, true, &k);
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    CHECK_EQ_INT(msg_encode(&m, &b, NULL), CR_OK);
    msg_clear(&m);
    int failed_ok = 0;
    for (size_t len = 0; len < b.len; len++) {
        /* Each prefix in a buffer of exactly its size, so ASan sees any
         * read past it. */
        char *p = malloc(len ? len : 1);
        memcpy(p, b.data, len);
        msg_t out;
        cr_err_t err;
        cr_status_t st = msg_decode(p, len, &out, &err);
        if (st == CR_E_PROTO && out.type == MSG_NONE && out.arena == NULL)
            failed_ok++;
        else
            msg_clear(&out);
        free(p);
    }
    CHECK_EQ_INT(failed_ok, b.len);
    expect_err_at(__LINE__, b.data, 0, CR_E_PROTO, "frame is empty");
    expect_err_at(__LINE__, NULL, 0, CR_E_PROTO, "frame is empty");
    expect_err_at(__LINE__, b.data, b.len - 1, CR_E_PROTO, "frame is truncated");
    cr_buf_free(&b);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_garbage(void)
{
    int decoded = 0, rejected = 0;
    /* Random bytes of random lengths. */
    for (int i = 0; i < 5000; i++) {
        size_t len = rng() % 200;
        uint8_t *p = malloc(len ? len : 1);
        for (size_t j = 0; j < len; j++)
            p[j] = (uint8_t)rng();
        /* Start many with a map byte so the walk gets past the top. */
        if (len && i % 2)
            p[0] = 0x80 | (p[0] & 0x0f);
        msg_t out;
        if (msg_decode(p, len, &out, NULL) == CR_OK) {
            decoded++;
            msg_clear(&out);
        } else {
            rejected++;
            CHECK(out.type == MSG_NONE && out.arena == NULL);
        }
        free(p);
    }
    /* Valid frames with a few random bytes changed: reaches the field walk. */
    msg_t m;
    msg_init(&m, MSG_resolved, "mut");
    int k = 1;
    fill(&m, msg_body_desc(MSG_resolved), (char *)&m.u, true, &k);
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    CHECK_EQ_INT(msg_encode(&m, &b, NULL), CR_OK);
    msg_clear(&m);
    for (int i = 0; i < 5000; i++) {
        uint8_t *p = malloc(b.len);
        memcpy(p, b.data, b.len);
        int flips = 1 + (int)(rng() % 4);
        for (int j = 0; j < flips; j++)
            p[rng() % b.len] = (uint8_t)rng();
        size_t len = b.len - (i % 3 == 0 ? rng() % 8 : 0);
        msg_t out;
        if (msg_decode(p, len, &out, NULL) == CR_OK) {
            decoded++;
            CHECK(out.type > MSG_NONE && out.type < MSG__COUNT);
            msg_clear(&out);
        } else {
            rejected++;
        }
        free(p);
    }
    cr_buf_free(&b);
    CHECK_EQ_INT(decoded + rejected, 10000);
    CHECK(rejected > 0);
}

static void test_header_errors(void)
{
    frame_t f;

    fr_init(&f); /* wrong version */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 7);
    pk_str(&f, "type");
    pk_str(&f, "ping");
    EXPECT_ERR(&f, "unsupported protocol version 7");
    fr_free(&f);

    fr_init(&f); /* negative version */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, -1);
    pk_str(&f, "type");
    pk_str(&f, "ping");
    EXPECT_ERR(&f, "unsupported protocol version -1");
    fr_free(&f);

    fr_init(&f); /* version of the wrong type */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    pk_str(&f, "1");
    pk_str(&f, "type");
    pk_str(&f, "ping");
    EXPECT_ERR(&f, "field 'v' must be an integer");
    fr_free(&f);

    fr_init(&f); /* no version */
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "type");
    pk_str(&f, "ping");
    EXPECT_ERR(&f, "field 'v' is missing");
    fr_free(&f);

    fr_init(&f); /* unknown type */
    fr_header(&f, 0, "bogus");
    EXPECT_ERR(&f, "unknown message type 'bogus'");
    fr_free(&f);

    fr_init(&f); /* unknown type with hostile bytes is sanitized */
    fr_header(&f, 0, "a\x01\x1b[31mb");
    EXPECT_ERR(&f, "unknown message type 'a??[31mb'");
    fr_free(&f);

    fr_init(&f); /* no type */
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 1);
    EXPECT_ERR(&f, "field 'type' is missing");
    fr_free(&f);

    fr_init(&f); /* type not a string */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "type");
    msgpack_pack_int(&f.pk, 3);
    EXPECT_ERR(&f, "field 'type' must be a string");
    fr_free(&f);

    fr_init(&f); /* id too long */
    msgpack_pack_map(&f.pk, 3);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "type");
    pk_str(&f, "ping");
    pk_str(&f, "id");
    pk_str(&f, "0123456789012345678901234567890123456789012345678901234567890123");
    EXPECT_ERR(&f, "ping: field 'id' is longer than 63 bytes");
    fr_free(&f);

    fr_init(&f); /* id not a string */
    msgpack_pack_map(&f.pk, 3);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "type");
    pk_str(&f, "ping");
    pk_str(&f, "id");
    msgpack_pack_int(&f.pk, 5);
    EXPECT_ERR(&f, "ping: field 'id' must be a string");
    fr_free(&f);

    fr_init(&f); /* duplicate header key */
    fr_header(&f, 1, "ping");
    pk_str(&f, "type");
    pk_str(&f, "pong");
    EXPECT_ERR(&f, "field 'type' appears twice");
    fr_free(&f);

    fr_init(&f); /* no id at all is fine: id "" */
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "v");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "type");
    pk_str(&f, "shutdown");
    msg_t out;
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, NULL), CR_OK);
    CHECK_EQ_INT(out.type, MSG_shutdown);
    CHECK_EQ_STR(out.id, "");
    msg_clear(&out);
    fr_free(&f);
}

static void test_top_level(void)
{
    frame_t f;
    fr_init(&f); /* an array */
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "generate");
    EXPECT_ERR(&f, "frame is not a map");
    fr_free(&f);

    fr_init(&f); /* a bare integer */
    msgpack_pack_int(&f.pk, 1);
    EXPECT_ERR(&f, "frame is not a map");
    fr_free(&f);

    fr_init(&f); /* trailing garbage after a good message */
    fr_header(&f, 0, "pong");
    msgpack_pack_int(&f.pk, 0);
    msgpack_pack_int(&f.pk, 0);
    EXPECT_ERR(&f, "frame has trailing bytes after the message (2)");
    fr_free(&f);

    fr_init(&f); /* two messages in one frame */
    fr_header(&f, 0, "pong");
    fr_header(&f, 0, "pong");
    CHECK(f.sb.size > 20);
    msg_t out;
    cr_err_t err;
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, &err), CR_E_PROTO);
    CHECK(strstr(err.msg, "trailing") != NULL);
    fr_free(&f);

    /* A byte that msgpack never uses. */
    const uint8_t c1[] = {0x81, 0xa1, 'v', 0xc1};
    expect_err_at(__LINE__, c1, sizeof c1, CR_E_PROTO,
                  "frame has the invalid byte 0xc1 at offset 3");

    /* Over the frame limit: refused before a byte is read. */
    expect_err_at(__LINE__, c1, (size_t)MSG_FRAME_MAX + 1, CR_E_PROTO,
                  "frame of 67108865 bytes is over the limit of 67108864");
}

static void test_hostile_lengths(void)
{
    frame_t f;
    /* A 4-billion-element array declared in a tiny frame. */
    fr_init(&f);
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "context");
    const char huge[] = {(char)0xdd, (char)0xff, (char)0xff, (char)0xff, (char)0xff, 1, 2};
    msgpack_sbuffer_write(&f.sb, huge, sizeof huge);
    msg_t out;
    cr_err_t err;
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, &err), CR_E_PROTO);
    CHECK_MSG(strstr(err.msg, "an array of 4294967295 entries") &&
                  strstr(err.msg, "over the limit of 1048576"),
              "%s", err.msg);
    fr_free(&f);

    /* Under the limit but more elements than bytes left. */
    fr_init(&f);
    fr_header(&f, 1, "generate");
    pk_str(&f, "context");
    const char many[] = {(char)0xdc, 0x03, (char)0xe8, 1, 2, 3};
    msgpack_sbuffer_write(&f.sb, many, sizeof many);
    EXPECT_ERR(&f, "frame is truncated");
    fr_free(&f);

    /* A huge map declared at the top. */
    const uint8_t bigmap[] = {0xdf, 0x7f, 0xff, 0xff, 0xff, 0xa1, 'v', 1};
    expect_err_at(__LINE__, bigmap, sizeof bigmap, CR_E_PROTO,
                  "frame has a map of 2147483647 entries at offset 0, over "
                  "the limit of 1048576");

    /* A string and bytes that claim 4 GiB. */
    const uint8_t bigstr[] = {0x81, 0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b'};
    expect_err_at(__LINE__, bigstr, sizeof bigstr, CR_E_PROTO, "frame is truncated");
    const uint8_t bigbin[] = {0x81, 0xa1, 'x', 0xc6, 0x10, 0, 0, 0, 1};
    expect_err_at(__LINE__, bigbin, sizeof bigbin, CR_E_PROTO, "frame is truncated");
    const uint8_t bigext[] = {0x81, 0xa1, 'x', 0xc9, 0x10, 0, 0, 0, 1, 2};
    expect_err_at(__LINE__, bigext, sizeof bigext, CR_E_PROTO, "frame is truncated");

    /* Deep nesting in an unknown field. */
    fr_init(&f);
    fr_header(&f, 1, "ping");
    pk_str(&f, "deep");
    for (int i = 0; i < 40; i++)
        msgpack_pack_array(&f.pk, 1);
    msgpack_pack_nil(&f.pk);
    EXPECT_ERR(&f, "frame nests deeper than 10 levels");
    fr_free(&f);

    /* Nesting up to the limit in an unknown field is fine. */
    fr_init(&f);
    fr_header(&f, 1, "ping");
    pk_str(&f, "deep");
    for (int i = 0; i < MSG_MAX_WIRE_DEPTH - 1; i++)
        msgpack_pack_array(&f.pk, 1);
    msgpack_pack_nil(&f.pk);
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, NULL), CR_OK);
    msg_clear(&out);
    fr_free(&f);
}

static void test_missing_required(void)
{
    frame_t f;
    fr_init(&f);
    fr_header(&f, 1, "generate");
    pk_str(&f, "prompt");
    pk_str(&f, "hi");
    EXPECT_ERR(&f, "generate: field 'model' is missing");
    /* The request id survives the error, for the reply. */
    msg_t out;
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, NULL), CR_E_PROTO);
    CHECK_EQ_STR(out.id, "req-9");
    CHECK(out.type == MSG_NONE && out.arena == NULL);
    fr_free(&f);

    fr_init(&f); /* nil counts as absent */
    fr_header(&f, 1, "generate");
    pk_str(&f, "model");
    msgpack_pack_nil(&f.pk);
    EXPECT_ERR(&f, "generate: field 'model' is missing");
    fr_free(&f);

    fr_init(&f); /* nested: a chat message without a role */
    fr_header(&f, 2, "chat");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "messages");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "role");
    pk_str(&f, "user");
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "content");
    pk_str(&f, "hello");
    EXPECT_ERR(&f, "chat: field 'messages[1].role' is missing");
    fr_free(&f);

    fr_init(&f); /* error needs both of its fields */
    fr_header(&f, 1, "error");
    pk_str(&f, "status");
    msgpack_pack_int(&f.pk, 2);
    EXPECT_ERR(&f, "error: field 'message' is missing");
    fr_free(&f);
}

/* One chat frame whose field `key` holds what `put` packs. */
typedef void (*put_fn)(frame_t *f);

static void chat_with(frame_t *f, const char *key, put_fn put)
{
    fr_init(f);
    fr_header(f, 2, "chat");
    pk_str(f, "model");
    pk_str(f, "m");
    pk_str(f, key);
    put(f);
}

static void put_int(frame_t *f) { msgpack_pack_int(&f->pk, 5); }
static void put_str(frame_t *f) { pk_str(f, "x"); }
static void put_map0(frame_t *f) { msgpack_pack_map(&f->pk, 0); }
static void put_float(frame_t *f) { msgpack_pack_double(&f->pk, 1.5); }

static void put_msgs_bad_role(frame_t *f)
{
    msgpack_pack_array(&f->pk, 3);
    for (int i = 0; i < 3; i++) {
        msgpack_pack_map(&f->pk, 1);
        pk_str(f, "role");
        if (i == 2)
            msgpack_pack_int(&f->pk, 7);
        else
            pk_str(f, "user");
    }
}

static void put_msgs_not_map(frame_t *f)
{
    msgpack_pack_array(&f->pk, 2);
    msgpack_pack_map(&f->pk, 1);
    pk_str(f, "role");
    pk_str(f, "user");
    pk_str(f, "oops");
}

static void put_msgs_bad_images(frame_t *f)
{
    msgpack_pack_array(&f->pk, 1);
    msgpack_pack_map(&f->pk, 2);
    pk_str(f, "role");
    pk_str(f, "user");
    pk_str(f, "images");
    msgpack_pack_array(&f->pk, 2);
    pk_str(f, "aaaa");
    msgpack_pack_true(&f->pk);
}

static void put_opts_bad_stop(frame_t *f)
{
    msgpack_pack_map(&f->pk, 2);
    pk_str(f, "temperature");
    msgpack_pack_float(&f->pk, 0.5f);
    pk_str(f, "stop");
    msgpack_pack_array(&f->pk, 2);
    pk_str(f, "a");
    msgpack_pack_int(&f->pk, 1);
}

static void put_opts_bad_temp(frame_t *f)
{
    msgpack_pack_map(&f->pk, 1);
    pk_str(f, "temperature");
    pk_str(f, "hot");
}

static void put_opts_bad_mmap(frame_t *f)
{
    msgpack_pack_map(&f->pk, 1);
    pk_str(f, "use_mmap");
    msgpack_pack_int(&f->pk, 1);
}

static void expect_chat_err(int line, const char *key, put_fn put,
                            const char *want)
{
    frame_t f;
    chat_with(&f, key, put);
    expect_err_at(line, f.sb.data, f.sb.size, CR_E_PROTO, want);
    fr_free(&f);
}

static void test_wrong_types(void)
{
    expect_chat_err(__LINE__, "messages", put_str,
                    "chat: field 'messages' must be an array of maps");
    expect_chat_err(__LINE__, "messages", put_msgs_bad_role,
                    "chat: field 'messages[2].role' must be a string");
    expect_chat_err(__LINE__, "messages", put_msgs_not_map,
                    "chat: field 'messages[1]' must be a map");
    expect_chat_err(__LINE__, "messages", put_msgs_bad_images,
                    "chat: field 'messages[0].images[1]' must be a string");
    expect_chat_err(__LINE__, "options", put_str,
                    "chat: field 'options' must be a map");
    expect_chat_err(__LINE__, "options", put_opts_bad_stop,
                    "chat: field 'options.stop[1]' must be a string");
    expect_chat_err(__LINE__, "options", put_opts_bad_temp,
                    "chat: field 'options.temperature' must be a number");
    expect_chat_err(__LINE__, "options", put_opts_bad_mmap,
                    "chat: field 'options.use_mmap' must be a boolean");
    expect_chat_err(__LINE__, "keep_alive_ms", put_float,
                    "chat: field 'keep_alive_ms' must be an integer");
    expect_chat_err(__LINE__, "keep_alive_ms", put_str,
                    "chat: field 'keep_alive_ms' must be an integer");
    expect_chat_err(__LINE__, "logprobs", put_int,
                    "chat: field 'logprobs' must be a boolean");
    expect_chat_err(__LINE__, "tools", put_map0,
                    "chat: field 'tools' must be a string");
    expect_chat_err(__LINE__, "model", put_str,
                    "chat: field 'model' appears twice");

    frame_t f;
    fr_init(&f); /* top-level string of the wrong type */
    fr_header(&f, 1, "generate");
    pk_str(&f, "model");
    msgpack_pack_int(&f.pk, 5);
    EXPECT_ERR(&f, "generate: field 'model' must be a string");
    fr_free(&f);

    fr_init(&f); /* I32S element of the wrong type */
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "context");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_int(&f.pk, 1);
    msgpack_pack_double(&f.pk, 2.0);
    EXPECT_ERR(&f, "generate: field 'context[1]' must be an integer");
    fr_free(&f);

    fr_init(&f); /* I32S that is not an array */
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "images");
    pk_str(&f, "img");
    EXPECT_ERR(&f, "generate: field 'images' must be an array of strings");
    fr_free(&f);

    fr_init(&f);
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "context");
    msgpack_pack_map(&f.pk, 0);
    EXPECT_ERR(&f, "generate: field 'context' must be an array of integers");
    fr_free(&f);

    fr_init(&f); /* BIN given as a string */
    fr_header(&f, 3, "embeddings");
    pk_str(&f, "n_inputs");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "dims");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "data");
    pk_str(&f, "abcd");
    EXPECT_ERR(&f, "embeddings: field 'data' must be bytes");
    fr_free(&f);

    fr_init(&f); /* three levels deep: tags_reply models[0].details.families */
    fr_header(&f, 1, "tags_reply");
    pk_str(&f, "models");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "name");
    pk_str(&f, "a");
    pk_str(&f, "details");
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "families");
    pk_str(&f, "llama");
    EXPECT_ERR(&f, "tags_reply: field 'models[0].details.families' must be "
                   "an array of strings");
    fr_free(&f);

    fr_init(&f); /* a NUL inside a string */
    fr_header(&f, 1, "generate");
    pk_str(&f, "model");
    msgpack_pack_str(&f.pk, 3);
    msgpack_pack_str_body(&f.pk, "a\0b", 3);
    EXPECT_ERR(&f, "generate: field 'model' contains a NUL byte");
    fr_free(&f);

    fr_init(&f); /* NUL inside a string array element */
    fr_header(&f, 2, "embed");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "input");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_str(&f.pk, 2);
    msgpack_pack_str_body(&f.pk, "\0x", 2);
    EXPECT_ERR(&f, "embed: field 'input[0]' contains a NUL byte");
    fr_free(&f);
}

static void test_numbers(void)
{
    frame_t f;
    msg_t out;

    fr_init(&f); /* I32S overflow both ways */
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "context");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_int(&f.pk, 1);
    msgpack_pack_int64(&f.pk, (int64_t)INT32_MAX + 1);
    EXPECT_ERR(&f, "generate: field 'context[1]' is out of range for int32");
    fr_free(&f);

    fr_init(&f);
    fr_header(&f, 1, "done");
    pk_str(&f, "context");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_int64(&f.pk, (int64_t)INT32_MIN - 1);
    EXPECT_ERR(&f, "done: field 'context[0]' is out of range for int32");
    fr_free(&f);

    fr_init(&f); /* I32S limits themselves are fine */
    fr_header(&f, 2, "done");
    pk_str(&f, "done_reason");
    pk_str(&f, "stop");
    pk_str(&f, "context");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_int64(&f.pk, INT32_MIN);
    msgpack_pack_uint64(&f.pk, INT32_MAX);
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, NULL), CR_OK);
    CHECK(out.u.done.context.n == 2 && out.u.done.context.v[0] == INT32_MIN &&
          out.u.done.context.v[1] == INT32_MAX);
    msg_clear(&out);
    fr_free(&f);

    fr_init(&f); /* I64 from a uint64 over INT64_MAX */
    fr_header(&f, 2, "done");
    pk_str(&f, "done_reason");
    pk_str(&f, "stop");
    pk_str(&f, "eval_count");
    msgpack_pack_uint64(&f.pk, (uint64_t)INT64_MAX + 1);
    EXPECT_ERR(&f, "done: field 'eval_count' is out of range for int64");
    fr_free(&f);

    fr_init(&f); /* F64 takes float32, float64, and integers of both signs */
    fr_header(&f, 2, "generate");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "options");
    msgpack_pack_map(&f.pk, 4);
    pk_str(&f, "temperature");
    msgpack_pack_float(&f.pk, 0.5f);
    pk_str(&f, "top_p");
    msgpack_pack_int(&f.pk, 1);
    pk_str(&f, "min_p");
    msgpack_pack_int(&f.pk, -2);
    pk_str(&f, "typical_p");
    msgpack_pack_double(&f.pk, 0.125);
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, NULL), CR_OK);
    CHECK(out.u.generate.options != NULL);
    if (out.u.generate.options) {
        CHECK_NEAR(out.u.generate.options->temperature, 0.5, 0);
        CHECK_NEAR(out.u.generate.options->top_p, 1.0, 0);
        CHECK_NEAR(out.u.generate.options->min_p, -2.0, 0);
        CHECK_NEAR(out.u.generate.options->typical_p, 0.125, 0);
    }
    msg_clear(&out);
    fr_free(&f);
}

static void test_unknown_fields_ignored(void)
{
    frame_t f;
    fr_init(&f);
    fr_header(&f, 5, "generate");
    pk_str(&f, "future_field");
    msgpack_pack_map(&f.pk, 1);
    pk_str(&f, "x");
    msgpack_pack_array(&f.pk, 2);
    msgpack_pack_int(&f.pk, 1);
    msgpack_pack_nil(&f.pk);
    msgpack_pack_int(&f.pk, 42); /* a non-string key */
    pk_str(&f, "ignored");
    pk_str(&f, "model");
    pk_str(&f, "llama3");
    pk_str(&f, "stream");
    msgpack_pack_true(&f.pk);
    pk_str(&f, "ext");
    msgpack_pack_ext(&f.pk, 3, 5);
    msgpack_pack_ext_body(&f.pk, "abc", 3);
    msg_t out;
    cr_err_t err;
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, &err), CR_OK);
    CHECK_EQ_STR(out.u.generate.model, "llama3");
    CHECK_EQ_STR(out.id, "req-9");
    msg_clear(&out);
    fr_free(&f);

    /* Unknown keys inside a nested record too. */
    fr_init(&f);
    fr_header(&f, 2, "chat");
    pk_str(&f, "model");
    pk_str(&f, "m");
    pk_str(&f, "messages");
    msgpack_pack_array(&f.pk, 1);
    msgpack_pack_map(&f.pk, 2);
    pk_str(&f, "role");
    pk_str(&f, "user");
    pk_str(&f, "mood");
    pk_str(&f, "cheerful");
    CHECK_EQ_INT(msg_decode(f.sb.data, f.sb.size, &out, &err), CR_OK);
    CHECK(out.u.chat.messages.n == 1 &&
          !strcmp(out.u.chat.messages.v[0].role, "user"));
    msg_clear(&out);
    fr_free(&f);
}

static void test_encode_errors(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    cr_buf_puts(&b, "keep");
    cr_err_t err;
    msg_t m;

    msg_init(&m, MSG_generate, "x");
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "generate: field 'model' is missing");
    CHECK_EQ_STR(b.data, "keep"); /* unchanged on error */

    m.u.generate.has_model = true; /* set but NULL */
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "generate: field 'model' is set but NULL");
    CHECK_EQ_INT(b.len, 4);

    msg_message_t msgs[2];
    memset(msgs, 0, sizeof msgs);
    msgs[0].role = "user";
    msgs[0].has_role = true;
    msg_init(&m, MSG_chat, "x");
    m.u.chat.model = "m";
    m.u.chat.has_model = true;
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = 2;
    m.u.chat.has_messages = true;
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "chat: field 'messages[1].role' is missing");
    CHECK_EQ_INT(b.len, 4);

    m.u.chat.messages.v = NULL; /* n > 0 with no array */
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "chat: field 'messages' has elements but a NULL array");

    msg_init(&m, MSG_done, "x");
    m.u.done.done_reason = "stop";
    m.u.done.has_done_reason = true;
    int32_t one = 1;
    m.u.done.context.v = &one;
    m.u.done.context.n = (size_t)MSG_MAX_ARRAY + 1;
    m.u.done.has_context = true;
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_TOO_LARGE);
    CHECK_EQ_STR(err.msg, "done: field 'context' has 1048577 elements, over "
                          "the limit of 1048576");

    /* Output buffer too small: refused, buffer unchanged. */
    cr_buf_t small;
    cr_buf_init(&small, 16);
    msg_init(&m, MSG_generate, "a-long-enough-request-id");
    m.u.generate.model = "m";
    m.u.generate.has_model = true;
    CHECK_EQ_INT(msg_encode(&m, &small, &err), CR_E_TOO_LARGE);
    CHECK_EQ_INT(small.len, 0);
    cr_buf_free(&small);

    /* A message over MSG_FRAME_MAX. */
    cr_buf_t big;
    cr_buf_init(&big, (size_t)MSG_FRAME_MAX * 2);
    msg_init(&m, MSG_blob_put, "x");
    m.u.blob_put.digest = "d";
    m.u.blob_put.has_digest = true;
    m.u.blob_put.has_offset = true;
    m.u.blob_put.data.len = MSG_FRAME_MAX;
    m.u.blob_put.data.data = calloc(1, MSG_FRAME_MAX);
    m.u.blob_put.has_data = true;
    CHECK_EQ_INT(msg_encode(&m, &big, &err), CR_E_TOO_LARGE);
    CHECK_EQ_STR(err.msg, "blob_put: frame is larger than 67108864 bytes");
    CHECK_EQ_INT(big.len, 0);
    free(m.u.blob_put.data.data);
    cr_buf_free(&big);

    msg_init(&m, MSG_NONE, "x");
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    m.type = (msg_type_t)999;
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_E_INVALID);
    CHECK_EQ_INT(b.len, 4);
    cr_buf_free(&b);
}

static void test_helpers(void)
{
    /* Type names both ways. */
    for (int t = MSG_NONE + 1; t < MSG__COUNT; t++)
        CHECK_EQ_INT(msg_type_from_name(msg_type_name((msg_type_t)t)), t);
    CHECK_EQ_STR(msg_type_name(MSG_blob_put), "blob_put");
    CHECK_EQ_STR(msg_type_name(MSG_NONE), "unknown");
    CHECK_EQ_STR(msg_type_name((msg_type_t)-3), "unknown");
    CHECK_EQ_INT(msg_type_from_name("nope"), MSG_NONE);
    CHECK_EQ_INT(msg_type_from_name(NULL), MSG_NONE);
    CHECK_EQ_INT(msg_type_from_name("generat"), MSG_NONE);

    /* Descriptors: unique names, none clashing with the header keys, sub
     * records exactly for REC/RECS. */
    CHECK(msg_body_desc(MSG_NONE) == NULL && msg_body_desc(MSG__COUNT) == NULL);
    CHECK(msg_record_desc(MSG_RECORD_NONE) == NULL);
    for (int t = MSG_NONE + 1; t < MSG__COUNT + MSG_RECORD__COUNT - 1; t++) {
        const msg_desc_t *d = t < MSG__COUNT
                                  ? msg_body_desc((msg_type_t)t)
                                  : msg_record_desc((msg_record_t)(t - MSG__COUNT + 1));
        CHECK(d != NULL);
        if (!d)
            continue;
        for (size_t i = 0; i < d->n_fields; i++) {
            const msg_field_desc_t *f = &d->fields[i];
            CHECK_MSG(strcmp(f->name, "v") && strcmp(f->name, "type") &&
                          strcmp(f->name, "id"),
                      "%s.%s clashes with a header key", d->name, f->name);
            for (size_t j = 0; j < i; j++)
                CHECK(strcmp(f->name, d->fields[j].name) != 0);
            bool rec = f->kind == MSG_KIND_REC || f->kind == MSG_KIND_RECS;
            CHECK(rec == (f->sub != MSG_RECORD_NONE));
            CHECK(f->offset < d->size && f->has_offset < d->size);
            CHECK(strcmp(msg_kind_name(f->kind), "unknown") != 0);
        }
    }
    const msg_desc_t *g = msg_body_desc(MSG_generate);
    CHECK_EQ_STR(g->name, "generate");
    CHECK_EQ_STR(g->fields[0].name, "model");
    CHECK(g->fields[0].required && g->fields[0].kind == MSG_KIND_STR);
    CHECK_EQ_INT(g->fields[0].offset, offsetof(msg_generate_body_t, model));
    CHECK_EQ_INT(g->fields[0].has_offset, offsetof(msg_generate_body_t, has_model));
    CHECK_EQ_INT(msg_body_desc(MSG_cancel)->n_fields, 0);
    CHECK_EQ_INT(msg_record_desc(MSG_RECORD_options)->size, sizeof(msg_options_t));
    CHECK_EQ_STR(msg_kind_name(MSG_KIND_RECS), "RECS");

    /* Arena helpers. */
    msg_t m;
    msg_init(&m, MSG_ok, "0123456789012345678901234567890123456789012345678901234567890123456789");
    CHECK_EQ_INT(strlen(m.id), MSG_ID_MAX);
    CHECK_EQ_INT(m.version, MSG_PROTO_VERSION);
    uint8_t *z = msg_alloc(&m, 1000);
    bool zero = z != NULL;
    for (int i = 0; z && i < 1000; i++)
        zero = zero && z[i] == 0;
    CHECK(zero);
    CHECK(((uintptr_t)z % alignof(max_align_t)) == 0);
    void *a0 = msg_alloc(&m, 0), *b0 = msg_alloc(&m, 0);
    CHECK(a0 && b0 && a0 != b0);
    void *large = msg_alloc(&m, 5u << 20); /* its own chunk */
    CHECK(large != NULL);
    char *s = msg_strdup(&m, "dup me");
    CHECK_EQ_STR(s, "dup me");
    CHECK(msg_strdup(&m, NULL) == NULL);
    for (int i = 0; i < 2000; i++) /* many chunks */
        CHECK(msg_alloc(&m, 100 + (size_t)i) != NULL);
    msg_clear(&m);
    CHECK(m.arena == NULL && m.type == MSG_NONE);
    msg_clear(&m); /* twice is fine */
    msg_clear(NULL);

    /* Error replies. */
    msg_make_error(&m, "req-7", CR_E_NOT_FOUND, "model '%s' not found", "x");
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_STR(m.id, "req-7");
    CHECK_EQ_INT(m.u.error.status, CR_E_NOT_FOUND);
    CHECK_EQ_STR(m.u.error.message, "model 'x' not found");
    CHECK(m.u.error.has_status && m.u.error.has_message);
    msg_t out;
    CHECK_EQ_INT(encode_decode(&m, &out), CR_OK);
    CHECK_EQ_STR(out.u.error.message, "model 'x' not found");
    CHECK_EQ_INT(out.u.error.status, CR_E_NOT_FOUND);
    msg_clear(&out);
    msg_clear(&m);
    msg_make_error(&m, NULL, CR_E_BUSY, "busy");
    CHECK_EQ_STR(m.id, "");
    msg_clear(&m);

    /* msg_copy of a caller-built message; unset fields are zeroed. */
    msg_init(&m, MSG_show, "c");
    m.u.show.model = "m";
    m.u.show.has_model = true;
    m.u.show.system = "dangling"; /* has_system false: not copied */
    msg_t c;
    CHECK_EQ_INT(msg_copy(&m, &c), CR_OK);
    CHECK_EQ_STR(c.u.show.model, "m");
    CHECK(c.u.show.model != m.u.show.model);
    CHECK(c.u.show.system == NULL && !c.u.show.has_system);
    msg_clear(&c);
    msg_init(&m, MSG_NONE, NULL);
    CHECK_EQ_INT(msg_copy(&m, &c), CR_E_INVALID);
    CHECK(c.arena == NULL);
}

int main(void)
{
    test_round_trip_every_type();
    test_required_only_flags();
    test_nested_chat();
    test_nested_tags();
    test_bin_and_ints();
    test_truncated_prefixes();
    test_garbage();
    test_header_errors();
    test_peek();
    test_top_level();
    test_hostile_lengths();
    test_missing_required();
    test_wrong_types();
    test_numbers();
    test_unknown_fields_ignored();
    test_encode_errors();
    test_helpers();
    return check_finish("test_msg");
}
