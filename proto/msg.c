/* msg.c: the bus message codec, driven by descriptor tables.
 *
 * Owns the descriptor tables expanded from messages.def, the per-message
 * arena, the generic msgpack encoder and decoder, and deep copy. Sockets are
 * bus.c's; JSON is the gateway's.
 *
 * Decoding takes two passes. A bounds-checked scan of the raw bytes first
 * checks every length, count and nesting level against the bytes that remain
 * and against our limits, because msgpack-c allocates a declared array's
 * elements before it reads them. Only a frame that passes is unpacked into a
 * msgpack_object tree, which is walked with the descriptors; every string
 * and array is copied into the message's arena, so the result does not
 * depend on the frame buffer. */
#include "lib/prelude.h"
#include "proto/msg.h"

#include <msgpack.h>
#include <stdalign.h>

/* ---- descriptor tables ----
 *
 * Each record and body gets a function holding its field table in block
 * scope, because a block-scope typedef (ST) is the only way to hand the
 * struct type to the X-macro's F(name, kind, sub, req), which does not name
 * it. */

#define REQ_OF_REQ true
#define REQ_OF_OPT false
#define SUB_OF_STR(sub) MSG_RECORD_NONE
#define SUB_OF_I64(sub) MSG_RECORD_NONE
#define SUB_OF_F64(sub) MSG_RECORD_NONE
#define SUB_OF_BOOL(sub) MSG_RECORD_NONE
#define SUB_OF_BIN(sub) MSG_RECORD_NONE
#define SUB_OF_I32S(sub) MSG_RECORD_NONE
#define SUB_OF_STRS(sub) MSG_RECORD_NONE
#define SUB_OF_REC(sub) MSG_RECORD_##sub
#define SUB_OF_RECS(sub) MSG_RECORD_##sub

#define FIELD_DESC(name, kind, sub, req)                                  \
    {#name, MSG_KIND_##kind, REQ_OF_##req, offsetof(ST, name),            \
     offsetof(ST, has_##name), SUB_OF_##kind(sub)},

/* The generic code reads every array field as {pointer, count}; the RECS
 * structs are anonymous, so check their layout field by field. */
#define LAYOUT_STR(name)
#define LAYOUT_I64(name)
#define LAYOUT_F64(name)
#define LAYOUT_BOOL(name)
#define LAYOUT_BIN(name)
#define LAYOUT_I32S(name)
#define LAYOUT_STRS(name)
#define LAYOUT_REC(name)
#define LAYOUT_RECS(name)                                                 \
    _Static_assert(offsetof(ST, name.n) ==                                \
                       offsetof(ST, name) + sizeof(void *),               \
                   "RECS layout");
#define FIELD_LAYOUT(name, kind, sub, req) LAYOUT_##kind(name)

#define DESC_FN(fn, type, label, FIELDS)                                  \
    static const msg_desc_t *fn(void)                                     \
    {                                                                     \
        typedef type ST;                                                  \
        FIELDS(FIELD_LAYOUT)                                              \
        static const msg_field_desc_t fields[] = {                        \
            FIELDS(FIELD_DESC){NULL, 0, false, 0, 0, MSG_RECORD_NONE}};   \
        static const msg_desc_t desc = {label, sizeof(ST), fields,        \
                                        CR_ARRAY_LEN(fields) - 1};        \
        return &desc;                                                     \
    }

#define REC_DESC_FN(rec) \
    DESC_FN(rec_desc_##rec, msg_##rec##_t, #rec, MSG_REC_##rec)
MSG_RECORDS(REC_DESC_FN)
#undef REC_DESC_FN

#define BODY_DESC_FN(m) \
    DESC_FN(body_desc_##m, msg_##m##_body_t, #m, MSG_MSG_##m)
MSG_MESSAGES(BODY_DESC_FN)
#undef BODY_DESC_FN

_Static_assert(offsetof(msg_i32s_t, n) == sizeof(void *), "I32S layout");
_Static_assert(offsetof(msg_strs_t, n) == sizeof(void *), "STRS layout");

typedef const msg_desc_t *(*desc_fn_t)(void);

static const desc_fn_t record_descs[MSG_RECORD__COUNT] = {
#define REC_ENTRY(rec) [MSG_RECORD_##rec] = rec_desc_##rec,
    MSG_RECORDS(REC_ENTRY)
#undef REC_ENTRY
};

static const desc_fn_t body_descs[MSG__COUNT] = {
#define BODY_ENTRY(m) [MSG_##m] = body_desc_##m,
    MSG_MESSAGES(BODY_ENTRY)
#undef BODY_ENTRY
};

static const char *const type_names[MSG__COUNT] = {
#define TYPE_NAME(m) [MSG_##m] = #m,
    MSG_MESSAGES(TYPE_NAME)
#undef TYPE_NAME
};

const msg_desc_t *msg_body_desc(msg_type_t t)
{
    if ((int)t <= MSG_NONE || t >= MSG__COUNT)
        return NULL;
    return body_descs[t]();
}

const msg_desc_t *msg_record_desc(msg_record_t r)
{
    if ((int)r <= MSG_RECORD_NONE || r >= MSG_RECORD__COUNT)
        return NULL;
    return record_descs[r]();
}

const char *msg_kind_name(msg_kind_t k)
{
    switch (k) {
    case MSG_KIND_STR: return "STR";
    case MSG_KIND_I64: return "I64";
    case MSG_KIND_F64: return "F64";
    case MSG_KIND_BOOL: return "BOOL";
    case MSG_KIND_BIN: return "BIN";
    case MSG_KIND_I32S: return "I32S";
    case MSG_KIND_STRS: return "STRS";
    case MSG_KIND_REC: return "REC";
    case MSG_KIND_RECS: return "RECS";
    }
    return "unknown";
}

const char *msg_type_name(msg_type_t t)
{
    if ((int)t <= MSG_NONE || t >= MSG__COUNT)
        return "unknown";
    return type_names[t];
}

/* The type for a wire name of n bytes (not NUL-terminated). */
static msg_type_t type_from_bytes(const char *name, size_t n)
{
    for (int t = MSG_NONE + 1; t < MSG__COUNT; t++) {
        if (strlen(type_names[t]) == n && !memcmp(type_names[t], name, n))
            return (msg_type_t)t;
    }
    return MSG_NONE;
}

msg_type_t msg_type_from_name(const char *name)
{
    return name ? type_from_bytes(name, strlen(name)) : MSG_NONE;
}

/* ---- field access ----
 *
 * Every array kind is laid out as {pointer, count} (checked above); read
 * and write it through memcpy so no struct type is punned. */

typedef struct vec {
    void *v;
    size_t n;
} vec_t;

static vec_t vec_get(const char *p)
{
    vec_t x;
    memcpy(&x.v, p, sizeof x.v);
    memcpy(&x.n, p + sizeof(void *), sizeof x.n);
    return x;
}

static void vec_set(char *p, void *v, size_t n)
{
    memcpy(p, &v, sizeof v);
    memcpy(p + sizeof(void *), &n, sizeof n);
}

static bool field_has(const char *base, const msg_field_desc_t *f)
{
    bool b;
    memcpy(&b, base + f->has_offset, sizeof b);
    return b;
}

static void field_set_has(char *base, const msg_field_desc_t *f, bool b)
{
    memcpy(base + f->has_offset, &b, sizeof b);
}

static void *ptr_get(const char *p)
{
    void *v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void ptr_set(char *p, const void *v)
{
    memcpy(p, &v, sizeof v);
}

/* Bytes a field's value occupies in its struct. */
static size_t kind_size(msg_kind_t k)
{
    switch (k) {
    case MSG_KIND_STR: return sizeof(char *);
    case MSG_KIND_I64: return sizeof(int64_t);
    case MSG_KIND_F64: return sizeof(double);
    case MSG_KIND_BOOL: return sizeof(bool);
    case MSG_KIND_BIN: return sizeof(msg_bytes_t);
    case MSG_KIND_I32S: return sizeof(msg_i32s_t);
    case MSG_KIND_STRS: return sizeof(msg_strs_t);
    case MSG_KIND_REC: return sizeof(void *);
    case MSG_KIND_RECS: return sizeof(vec_t);
    }
    return 0;
}

/* ---- arena ---- */

typedef struct chunk {
    struct chunk *next;
    size_t cap;  /* usable bytes after the header */
    size_t used; /* bytes handed out */
} chunk_t;

#define ARENA_ALIGN alignof(max_align_t)
#define CHUNK_HDR ((sizeof(chunk_t) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN)
#define CHUNK_FIRST 4096u
#define CHUNK_GROW_MAX (1u << 20)

struct msg_arena {
    chunk_t *head;   /* small allocations come from here */
    size_t next_cap; /* capacity of the next ordinary chunk */
};

static void *arena_alloc(struct msg_arena *a, size_t bytes, bool zero)
{
    if (bytes == 0)
        bytes = 1; /* a unique pointer even for empty arrays */
    if (bytes > SIZE_MAX - CHUNK_HDR - ARENA_ALIGN)
        return NULL;
    size_t need = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    chunk_t *c = a->head;
    void *p;
    if (c && c->cap - c->used >= need) {
        p = (char *)c + CHUNK_HDR + c->used;
        c->used += need;
    } else {
        /* Big pieces get a chunk of their own behind the head, so the
         * head's free space stays in use for the small ones. */
        bool own = need > a->next_cap / 4;
        size_t cap = own ? need : a->next_cap;
        chunk_t *n = malloc(CHUNK_HDR + cap);
        if (!n)
            return NULL;
        n->cap = cap;
        n->used = need;
        if (own && c) {
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
            if (!own && a->next_cap < CHUNK_GROW_MAX)
                a->next_cap *= 2;
        }
        p = (char *)n + CHUNK_HDR;
    }
    if (zero)
        memset(p, 0, bytes);
    return p;
}

static void *alloc_raw(msg_t *m, size_t bytes, bool zero)
{
    if (!m->arena) {
        m->arena = calloc(1, sizeof *m->arena);
        if (!m->arena)
            return NULL;
        m->arena->next_cap = CHUNK_FIRST;
    }
    return arena_alloc(m->arena, bytes, zero);
}

void *msg_alloc(msg_t *m, size_t bytes)
{
    return alloc_raw(m, bytes, true);
}

/* n elements of size bytes each, zeroed; NULL on overflow or failure. */
static void *alloc_array(msg_t *m, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    return alloc_raw(m, n * size, true);
}

/* Copies n bytes into the arena and NUL-terminates them. */
static char *dup_bytes(msg_t *m, const void *p, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    char *s = alloc_raw(m, n + 1, false);
    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

char *msg_strdup(msg_t *m, const char *s)
{
    return s ? dup_bytes(m, s, strlen(s)) : NULL;
}

/* ---- plain operations ---- */

void msg_init(msg_t *m, msg_type_t type, const char *id)
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->version = MSG_PROTO_VERSION;
    if (id) {
        size_t n = strnlen(id, MSG_ID_MAX);
        memcpy(m->id, id, n);
        m->id[n] = '\0';
    }
}

void msg_clear(msg_t *m)
{
    if (!m)
        return;
    if (m->arena) {
        chunk_t *c = m->arena->head;
        while (c) {
            chunk_t *next = c->next;
            free(c);
            c = next;
        }
        free(m->arena);
    }
    memset(m, 0, sizeof *m);
}

void msg_make_error(msg_t *m, const char *id, cr_status_t st,
                    const char *fmt, ...)
{
    msg_init(m, MSG_error, id);
    m->u.error.status = st;
    m->u.error.has_status = true;
    char *text = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0) {
        text = msg_alloc(m, (size_t)n + 1);
        if (text) {
            va_start(ap, fmt);
            vsnprintf(text, (size_t)n + 1, fmt, ap);
            va_end(ap);
        }
    }
    /* The caller is already failing; a static text is better than none. */
    m->u.error.message = text ? text : (char *)"out of memory";
    m->u.error.has_message = true;
}

/* ---- field paths for error messages: "messages[2].role" ---- */

#define PATH_CAP 256

typedef struct path {
    char s[PATH_CAP];
    size_t len;
} path_t;

static void path_add(path_t *p, const char *fmt, ...) CR_PRINTF(2, 3);

static void path_add(path_t *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->s + p->len, sizeof p->s - p->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        p->len = CR_MIN(p->len + (size_t)n, sizeof p->s - 1);
}

/* Appends a field name; returns the length to restore. */
static size_t path_field(path_t *p, const char *name)
{
    size_t old = p->len;
    if (p->len)
        path_add(p, ".%s", name);
    else
        path_add(p, "%s", name);
    return old;
}

static size_t path_index(path_t *p, size_t i)
{
    size_t old = p->len;
    path_add(p, "[%zu]", i);
    return old;
}

static void path_restore(path_t *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* ---- encoder ---- */

typedef struct enc {
    msgpack_packer pk;
    cr_buf_t *out;
    size_t start;      /* out->len before this frame */
    cr_status_t wst;   /* why the write callback refused */
    bool over_frame;   /* ... because of MSG_FRAME_MAX */
    const char *mname; /* message name for errors */
    cr_err_t *err;
    path_t path;
} enc_t;

static int enc_write(void *data, const char *buf, size_t len)
{
    enc_t *e = data;
    size_t used = e->out->len - e->start;
    if (len > MSG_FRAME_MAX - used) {
        e->wst = CR_E_TOO_LARGE;
        e->over_frame = true;
        return -1;
    }
    cr_status_t st = cr_buf_append(e->out, buf, len);
    if (st) {
        e->wst = st;
        return -1;
    }
    return 0;
}

static cr_status_t enc_write_failed(enc_t *e)
{
    if (e->wst == CR_E_NOMEM)
        return cr_err_set(e->err, CR_E_NOMEM, "%s: out of memory encoding",
                          e->mname);
    if (e->over_frame)
        return cr_err_set(e->err, CR_E_TOO_LARGE,
                          "%s: frame is larger than %u bytes", e->mname,
                          MSG_FRAME_MAX);
    return cr_err_set(e->err, CR_E_TOO_LARGE,
                      "%s: frame does not fit the output buffer (%zu bytes)",
                      e->mname, e->out->max_bytes);
}

static cr_status_t enc_field_err(enc_t *e, cr_status_t st, const char *what)
{
    return cr_err_set(e->err, st, "%s: field '%s' %s", e->mname, e->path.s,
                      what);
}

#define PACK(e, call)                   \
    do {                                \
        if ((call) != 0)                \
            return enc_write_failed(e); \
    } while (0)

static cr_status_t enc_str(enc_t *e, const char *s, size_t n)
{
    if (n > MSG_FRAME_MAX)
        return enc_field_err(e, CR_E_TOO_LARGE, "is too large");
    PACK(e, msgpack_pack_str(&e->pk, n));
    PACK(e, msgpack_pack_str_body(&e->pk, s, n));
    return CR_OK;
}

static cr_status_t enc_record(enc_t *e, const msg_desc_t *d, const char *base,
                              int depth);

/* Checks an array's count and pointer before packing it. */
static cr_status_t enc_array_ok(enc_t *e, vec_t x)
{
    if (x.n > MSG_MAX_ARRAY) {
        char what[96];
        snprintf(what, sizeof what, "has %zu elements, over the limit of %d",
                 x.n, MSG_MAX_ARRAY);
        return enc_field_err(e, CR_E_TOO_LARGE, what);
    }
    if (x.n && !x.v)
        return enc_field_err(e, CR_E_INVALID, "has elements but a NULL array");
    return CR_OK;
}

static cr_status_t enc_value(enc_t *e, const msg_field_desc_t *f,
                             const char *p, int depth)
{
    cr_status_t st;
    switch (f->kind) {
    case MSG_KIND_STR: {
        const char *s = ptr_get(p);
        if (!s)
            return enc_field_err(e, CR_E_INVALID, "is set but NULL");
        return enc_str(e, s, strlen(s));
    }
    case MSG_KIND_I64: {
        int64_t v;
        memcpy(&v, p, sizeof v);
        PACK(e, msgpack_pack_int64(&e->pk, v));
        return CR_OK;
    }
    case MSG_KIND_F64: {
        double v;
        memcpy(&v, p, sizeof v);
        PACK(e, msgpack_pack_double(&e->pk, v));
        return CR_OK;
    }
    case MSG_KIND_BOOL: {
        bool v;
        memcpy(&v, p, sizeof v);
        PACK(e, v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk));
        return CR_OK;
    }
    case MSG_KIND_BIN: {
        msg_bytes_t b;
        memcpy(&b, p, sizeof b);
        if (b.len && !b.data)
            return enc_field_err(e, CR_E_INVALID, "has a length but no data");
        if (b.len > MSG_FRAME_MAX)
            return enc_field_err(e, CR_E_TOO_LARGE, "is too large");
        PACK(e, msgpack_pack_bin(&e->pk, b.len));
        PACK(e, msgpack_pack_bin_body(&e->pk, b.data, b.len));
        return CR_OK;
    }
    case MSG_KIND_I32S: {
        vec_t x = vec_get(p);
        if ((st = enc_array_ok(e, x)))
            return st;
        PACK(e, msgpack_pack_array(&e->pk, x.n));
        const int32_t *v = x.v;
        for (size_t i = 0; i < x.n; i++)
            PACK(e, msgpack_pack_int32(&e->pk, v[i]));
        return CR_OK;
    }
    case MSG_KIND_STRS: {
        vec_t x = vec_get(p);
        if ((st = enc_array_ok(e, x)))
            return st;
        PACK(e, msgpack_pack_array(&e->pk, x.n));
        char *const *v = x.v;
        for (size_t i = 0; i < x.n; i++) {
            size_t old = path_index(&e->path, i);
            if (!v[i])
                return enc_field_err(e, CR_E_INVALID, "is NULL");
            if ((st = enc_str(e, v[i], strlen(v[i]))))
                return st;
            path_restore(&e->path, old);
        }
        return CR_OK;
    }
    case MSG_KIND_REC: {
        const char *rec = ptr_get(p);
        if (!rec)
            return enc_field_err(e, CR_E_INVALID, "is set but NULL");
        return enc_record(e, msg_record_desc(f->sub), rec, depth + 1);
    }
    case MSG_KIND_RECS: {
        vec_t x = vec_get(p);
        if ((st = enc_array_ok(e, x)))
            return st;
        const msg_desc_t *sub = msg_record_desc(f->sub);
        PACK(e, msgpack_pack_array(&e->pk, x.n));
        for (size_t i = 0; i < x.n; i++) {
            size_t old = path_index(&e->path, i);
            st = enc_record(e, sub, (const char *)x.v + i * sub->size,
                            depth + 1);
            if (st)
                return st;
            path_restore(&e->path, old);
        }
        return CR_OK;
    }
    }
    return cr_err_set(e->err, CR_E_INTERNAL, "%s: field '%s' has kind %d",
                      e->mname, e->path.s, (int)f->kind);
}

/* Checks required fields, then packs every set field of one struct as map
 * entries (the caller packs the map header; `extra` entries come first). */
static cr_status_t enc_fields(enc_t *e, const msg_desc_t *d, const char *base,
                              int depth, uint32_t extra, bool header_only)
{
    uint32_t n = extra;
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        if (field_has(base, f)) {
            n++;
        } else if (f->required) {
            size_t old = path_field(&e->path, f->name);
            cr_status_t st = enc_field_err(e, CR_E_INVALID, "is missing");
            path_restore(&e->path, old);
            return st;
        }
    }
    if (header_only) {
        PACK(e, msgpack_pack_map(&e->pk, n));
        return CR_OK;
    }
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        if (!field_has(base, f))
            continue;
        size_t old = path_field(&e->path, f->name);
        cr_status_t st = enc_str(e, f->name, strlen(f->name));
        if (!st)
            st = enc_value(e, f, base + f->offset, depth);
        if (st)
            return st;
        path_restore(&e->path, old);
    }
    return CR_OK;
}

static cr_status_t enc_record(enc_t *e, const msg_desc_t *d, const char *base,
                              int depth)
{
    if (depth > MSG_MAX_DEPTH)
        return enc_field_err(e, CR_E_INVALID, "nests records too deeply");
    cr_status_t st = enc_fields(e, d, base, depth, 0, true);
    if (!st)
        st = enc_fields(e, d, base, depth, 0, false);
    return st;
}

cr_status_t msg_encode(const msg_t *m, cr_buf_t *out, cr_err_t *err)
{
    const msg_desc_t *d = msg_body_desc(m->type);
    if (!d)
        return cr_err_set(err, CR_E_INVALID,
                          "cannot encode a message of unknown type %d",
                          (int)m->type);
    enc_t e;
    memset(&e, 0, sizeof e);
    e.out = out;
    e.start = out->len;
    e.mname = d->name;
    e.err = err;
    msgpack_packer_init(&e.pk, &e, enc_write);

    const char *base = (const char *)&m->u;
    size_t id_len = strnlen(m->id, MSG_ID_MAX);
    cr_status_t st = enc_fields(&e, d, base, 0, 3, true);
    if (st)
        goto fail;
    if ((st = enc_str(&e, "v", 1)))
        goto fail;
    if (msgpack_pack_int64(&e.pk, MSG_PROTO_VERSION)) {
        st = enc_write_failed(&e);
        goto fail;
    }
    if ((st = enc_str(&e, "type", 4)) || (st = enc_str(&e, d->name, strlen(d->name))))
        goto fail;
    if ((st = enc_str(&e, "id", 2)) || (st = enc_str(&e, m->id, id_len)))
        goto fail;
    if ((st = enc_fields(&e, d, base, 0, 3, false)))
        goto fail;
    return CR_OK;

fail:
    /* Leave the buffer as it was before this frame. */
    out->len = e.start;
    if (out->data)
        out->data[e.start] = '\0';
    return st;
}

/* ---- frame scan: structure and limits before msgpack-c sees the bytes ---- */

static uint64_t read_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

static cr_status_t scan_truncated(cr_err_t *err)
{
    return cr_err_set(err, CR_E_PROTO, "frame is truncated");
}

/* Walks one msgpack value with an explicit stack and checks: every length
 * fits the bytes left, every container declares no more entries than bytes
 * remain and at most MSG_MAX_ARRAY, nesting stays within MSG_MAX_WIRE_DEPTH,
 * the frame holds at most MSG_MAX_VALUES values, and nothing follows. */
static cr_status_t scan_frame(const uint8_t *p, size_t len, cr_err_t *err)
{
    uint32_t left[MSG_MAX_WIRE_DEPTH]; /* children still to read per level */
    int depth = 0;
    size_t pos = 0, values = 0;
    for (;;) {
        if (pos >= len)
            return scan_truncated(err);
        if (++values > MSG_MAX_VALUES)
            return cr_err_set(err, CR_E_PROTO,
                              "frame has more than %u values", MSG_MAX_VALUES);
        size_t at = pos;
        uint8_t b = p[pos++];
        uint64_t skip = 0;   /* payload bytes after the header */
        size_t len_bytes = 0; /* size of a big-endian length that follows */
        uint64_t extra = 0;  /* bytes between that length and the payload */
        int container = 0;   /* 1 array, 2 map */
        uint64_t count = 0;  /* entries of a container */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            /* fixint, nil, bool: the byte is the whole value */
        } else if (b <= 0x8f) {
            container = 2;
            count = b & 0x0f;
        } else if (b <= 0x9f) {
            container = 1;
            count = b & 0x0f;
        } else if (b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: len_bytes = 1; break; /* bin 8/16/32 */
            case 0xc5: len_bytes = 2; break;
            case 0xc6: len_bytes = 4; break;
            case 0xc7: len_bytes = 1; extra = 1; break; /* ext 8/16/32 */
            case 0xc8: len_bytes = 2; extra = 1; break;
            case 0xc9: len_bytes = 4; extra = 1; break;
            case 0xca: skip = 4; break; /* float 32/64 */
            case 0xcb: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break; /* (u)int 8..64 */
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break; /* fixext 1..16 plus its type */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xd9: len_bytes = 1; break; /* str 8/16/32 */
            case 0xda: len_bytes = 2; break;
            case 0xdb: len_bytes = 4; break;
            case 0xdc: container = 1; len_bytes = 2; break;
            case 0xdd: container = 1; len_bytes = 4; break;
            case 0xde: container = 2; len_bytes = 2; break;
            case 0xdf: container = 2; len_bytes = 4; break;
            default:
                return cr_err_set(err, CR_E_PROTO,
                                  "frame has the invalid byte 0x%02x at "
                                  "offset %zu", b, at);
            }
        }
        if (len_bytes) {
            if (len - pos < len_bytes)
                return scan_truncated(err);
            uint64_t n = read_be(p + pos, len_bytes);
            pos += len_bytes;
            if (container)
                count = n;
            else
                skip = n + extra;
        }
        if (skip > len - pos)
            return scan_truncated(err);
        pos += (size_t)skip;

        uint64_t children = 0;
        if (container) {
            if (count > MSG_MAX_ARRAY)
                return cr_err_set(err, CR_E_PROTO,
                                  "frame has %s of %" PRIu64 " entries at "
                                  "offset %zu, over the limit of %d",
                                  container == 1 ? "an array" : "a map",
                                  count, at, MSG_MAX_ARRAY);
            children = container == 2 ? 2 * count : count;
            /* Each child takes at least one byte. */
            if (children > len - pos)
                return scan_truncated(err);
            if (depth >= MSG_MAX_WIRE_DEPTH)
                return cr_err_set(err, CR_E_PROTO,
                                  "frame nests deeper than %d levels",
                                  MSG_MAX_WIRE_DEPTH);
        }
        if (depth > 0)
            left[depth - 1]--;
        if (children)
            left[depth++] = (uint32_t)children;
        while (depth > 0 && left[depth - 1] == 0)
            depth--;
        if (depth == 0)
            break;
    }
    if (pos != len)
        return cr_err_set(err, CR_E_PROTO,
                          "frame has trailing bytes after the message "
                          "(%zu)",
                          len - pos);
    return CR_OK;
}

/* ---- decoder ---- */

typedef struct dec {
    msg_t *m;          /* owns the arena */
    const char *mname; /* message name for errors */
    cr_err_t *err;
    path_t path;
} dec_t;

static cr_status_t dec_err(dec_t *d, const char *fmt, ...) CR_PRINTF(2, 3);

/* "<msg>: field '<path>' <what>". */
static cr_status_t dec_err(dec_t *d, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return cr_err_set(d->err, CR_E_PROTO, "%s: field '%s' %s", d->mname,
                      d->path.s, what);
}

static cr_status_t dec_nomem(dec_t *d)
{
    return cr_err_set(d->err, CR_E_NOMEM,
                      "%s: out of memory decoding field '%s'", d->mname,
                      d->path.s);
}

static const char *kind_expect(msg_kind_t k)
{
    switch (k) {
    case MSG_KIND_STR: return "a string";
    case MSG_KIND_I64: return "an integer";
    case MSG_KIND_F64: return "a number";
    case MSG_KIND_BOOL: return "a boolean";
    case MSG_KIND_BIN: return "bytes";
    case MSG_KIND_I32S: return "an array of integers";
    case MSG_KIND_STRS: return "an array of strings";
    case MSG_KIND_REC: return "a map";
    case MSG_KIND_RECS: return "an array of maps";
    }
    return "something else";
}

static cr_status_t dec_str(dec_t *d, const msgpack_object *o, char **out)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return dec_err(d, "must be a string");
    if (o->via.str.size && memchr(o->via.str.ptr, '\0', o->via.str.size))
        return dec_err(d, "contains a NUL byte");
    *out = dup_bytes(d->m, o->via.str.ptr, o->via.str.size);
    return *out ? CR_OK : dec_nomem(d);
}

/* An integer within [lo, hi]; `what` names the range for errors. */
static cr_status_t dec_int(dec_t *d, const msgpack_object *o, int64_t lo,
                           int64_t hi, const char *range, int64_t *out)
{
    int64_t v;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return dec_err(d, "is out of range for %s", range);
        v = (int64_t)o->via.u64;
    } else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        v = o->via.i64;
    } else {
        return dec_err(d, "must be an integer");
    }
    if (v < lo || v > hi)
        return dec_err(d, "is out of range for %s", range);
    *out = v;
    return CR_OK;
}

/* Checks an array field against MSG_MAX_ARRAY (the scan did too; this keeps
 * the walk safe on its own). */
static cr_status_t dec_array(dec_t *d, const msgpack_object *o,
                             msg_kind_t kind)
{
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return dec_err(d, "must be %s", kind_expect(kind));
    if (o->via.array.size > MSG_MAX_ARRAY)
        return dec_err(d, "has %u elements, over the limit of %d",
                       o->via.array.size, MSG_MAX_ARRAY);
    return CR_OK;
}

static cr_status_t dec_record(dec_t *d, const msg_desc_t *desc, char *base,
                              const msgpack_object *o, int depth);

static cr_status_t dec_value(dec_t *d, const msg_field_desc_t *f, char *p,
                             const msgpack_object *o, int depth)
{
    cr_status_t st;
    switch (f->kind) {
    case MSG_KIND_STR: {
        char *s;
        if ((st = dec_str(d, o, &s)))
            return st;
        ptr_set(p, s);
        return CR_OK;
    }
    case MSG_KIND_I64: {
        int64_t v;
        if ((st = dec_int(d, o, INT64_MIN, INT64_MAX, "int64", &v)))
            return st;
        memcpy(p, &v, sizeof v);
        return CR_OK;
    }
    case MSG_KIND_F64: {
        double v;
        if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
            v = o->via.f64;
        else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            v = (double)o->via.u64;
        else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            v = (double)o->via.i64;
        else
            return dec_err(d, "must be a number");
        memcpy(p, &v, sizeof v);
        return CR_OK;
    }
    case MSG_KIND_BOOL: {
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
            return dec_err(d, "must be a boolean");
        bool v = o->via.boolean;
        memcpy(p, &v, sizeof v);
        return CR_OK;
    }
    case MSG_KIND_BIN: {
        if (o->type != MSGPACK_OBJECT_BIN)
            return dec_err(d, "must be bytes");
        msg_bytes_t b = {NULL, o->via.bin.size};
        b.data = alloc_raw(d->m, b.len, false);
        if (!b.data)
            return dec_nomem(d);
        if (b.len)
            memcpy(b.data, o->via.bin.ptr, b.len);
        memcpy(p, &b, sizeof b);
        return CR_OK;
    }
    case MSG_KIND_I32S: {
        if ((st = dec_array(d, o, f->kind)))
            return st;
        size_t n = o->via.array.size;
        int32_t *v = alloc_array(d->m, n, sizeof *v);
        if (!v)
            return dec_nomem(d);
        for (size_t i = 0; i < n; i++) {
            size_t old = path_index(&d->path, i);
            int64_t x;
            if ((st = dec_int(d, &o->via.array.ptr[i], INT32_MIN, INT32_MAX,
                              "int32", &x)))
                return st;
            v[i] = (int32_t)x;
            path_restore(&d->path, old);
        }
        vec_set(p, v, n);
        return CR_OK;
    }
    case MSG_KIND_STRS: {
        if ((st = dec_array(d, o, f->kind)))
            return st;
        size_t n = o->via.array.size;
        char **v = alloc_array(d->m, n, sizeof *v);
        if (!v)
            return dec_nomem(d);
        for (size_t i = 0; i < n; i++) {
            size_t old = path_index(&d->path, i);
            if ((st = dec_str(d, &o->via.array.ptr[i], &v[i])))
                return st;
            path_restore(&d->path, old);
        }
        vec_set(p, v, n);
        return CR_OK;
    }
    case MSG_KIND_REC: {
        if (o->type != MSGPACK_OBJECT_MAP)
            return dec_err(d, "must be a map");
        const msg_desc_t *sub = msg_record_desc(f->sub);
        char *rec = msg_alloc(d->m, sub->size);
        if (!rec)
            return dec_nomem(d);
        if ((st = dec_record(d, sub, rec, o, depth + 1)))
            return st;
        ptr_set(p, rec);
        return CR_OK;
    }
    case MSG_KIND_RECS: {
        if ((st = dec_array(d, o, f->kind)))
            return st;
        const msg_desc_t *sub = msg_record_desc(f->sub);
        size_t n = o->via.array.size;
        char *v = alloc_array(d->m, n, sub->size);
        if (!v)
            return dec_nomem(d);
        for (size_t i = 0; i < n; i++) {
            size_t old = path_index(&d->path, i);
            const msgpack_object *e = &o->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_MAP)
                return dec_err(d, "must be a map");
            if ((st = dec_record(d, sub, v + i * sub->size, e, depth + 1)))
                return st;
            path_restore(&d->path, old);
        }
        vec_set(p, v, n);
        return CR_OK;
    }
    }
    return cr_err_set(d->err, CR_E_INTERNAL, "%s: field '%s' has kind %d",
                      d->mname, d->path.s, (int)f->kind);
}

static const msg_field_desc_t *find_field(const msg_desc_t *desc,
                                          const msgpack_object *key)
{
    if (key->type != MSGPACK_OBJECT_STR)
        return NULL;
    for (size_t i = 0; i < desc->n_fields; i++) {
        const char *name = desc->fields[i].name;
        if (strlen(name) == key->via.str.size &&
            !memcmp(name, key->via.str.ptr, key->via.str.size))
            return &desc->fields[i];
    }
    return NULL;
}

/* Fills the struct at base from map o (which the caller checked is a map).
 * Unknown keys and non-string keys are ignored; nil counts as absent. */
static cr_status_t dec_record(dec_t *d, const msg_desc_t *desc, char *base,
                              const msgpack_object *o, int depth)
{
    if (depth > MSG_MAX_DEPTH)
        return dec_err(d, "nests records deeper than %d", MSG_MAX_DEPTH);
    const msgpack_object_map *map = &o->via.map;
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object_kv *kv = &map->ptr[i];
        const msg_field_desc_t *f = find_field(desc, &kv->key);
        if (!f || kv->val.type == MSGPACK_OBJECT_NIL)
            continue;
        size_t old = path_field(&d->path, f->name);
        if (field_has(base, f))
            return dec_err(d, "appears twice");
        cr_status_t st = dec_value(d, f, base + f->offset, &kv->val, depth);
        if (st)
            return st;
        field_set_has(base, f, true);
        path_restore(&d->path, old);
    }
    for (size_t i = 0; i < desc->n_fields; i++) {
        const msg_field_desc_t *f = &desc->fields[i];
        if (f->required && !field_has(base, f)) {
            path_field(&d->path, f->name);
            return dec_err(d, "is missing");
        }
    }
    return CR_OK;
}

/* Finds a header key in the top map: NULL if absent (or nil); *dup when it
 * appears more than once. */
static const msgpack_object *header_key(const msgpack_object_map *map,
                                        const char *key, bool *dup)
{
    const msgpack_object *found = NULL;
    size_t n = strlen(key);
    *dup = false;
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object *k = &map->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size != n ||
            memcmp(k->via.str.ptr, key, n))
            continue;
        if (found)
            *dup = true;
        if (map->ptr[i].val.type != MSGPACK_OBJECT_NIL)
            found = &map->ptr[i].val;
    }
    return found;
}

/* Copies at most 40 bytes of an untrusted name for an error message, with
 * anything but printable ASCII shown as '?'. */
static void safe_name(char *out, size_t cap, const char *p, size_t n)
{
    size_t max = CR_MIN(n, (size_t)40);
    size_t j = 0;
    for (size_t i = 0; i < max && j + 1 < cap; i++)
        out[j++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    if (n > max && j + 4 < cap) {
        memcpy(out + j, "...", 3);
        j += 3;
    }
    out[j] = '\0';
}

/* Reads and checks "v", "type" and "id" from the top map. */
static cr_status_t dec_header(const msgpack_object_map *map, msg_t *out,
                              cr_err_t *err)
{
    bool dup;
    const msgpack_object *v = header_key(map, "v", &dup);
    if (dup)
        return cr_err_set(err, CR_E_PROTO, "field 'v' appears twice");
    if (!v)
        return cr_err_set(err, CR_E_PROTO, "field 'v' is missing");
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return cr_err_set(err, CR_E_PROTO,
                          "unsupported protocol version %" PRId64, v->via.i64);
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return cr_err_set(err, CR_E_PROTO, "field 'v' must be an integer");
    if (v->via.u64 != MSG_PROTO_VERSION)
        return cr_err_set(err, CR_E_PROTO,
                          "unsupported protocol version %" PRIu64, v->via.u64);

    const msgpack_object *t = header_key(map, "type", &dup);
    if (dup)
        return cr_err_set(err, CR_E_PROTO, "field 'type' appears twice");
    if (!t)
        return cr_err_set(err, CR_E_PROTO, "field 'type' is missing");
    if (t->type != MSGPACK_OBJECT_STR)
        return cr_err_set(err, CR_E_PROTO, "field 'type' must be a string");
    msg_type_t type = type_from_bytes(t->via.str.ptr, t->via.str.size);
    if (type == MSG_NONE) {
        char name[48];
        safe_name(name, sizeof name, t->via.str.ptr, t->via.str.size);
        return cr_err_set(err, CR_E_PROTO, "unknown message type '%s'", name);
    }
    const char *mname = msg_type_name(type);

    const msgpack_object *id = header_key(map, "id", &dup);
    if (dup)
        return cr_err_set(err, CR_E_PROTO, "%s: field 'id' appears twice",
                          mname);
    if (id) {
        if (id->type != MSGPACK_OBJECT_STR)
            return cr_err_set(err, CR_E_PROTO,
                              "%s: field 'id' must be a string", mname);
        if (id->via.str.size > MSG_ID_MAX)
            return cr_err_set(err, CR_E_PROTO,
                              "%s: field 'id' is longer than %d bytes", mname,
                              MSG_ID_MAX);
        if (id->via.str.size &&
            memchr(id->via.str.ptr, '\0', id->via.str.size))
            return cr_err_set(err, CR_E_PROTO,
                              "%s: field 'id' contains a NUL byte", mname);
        memcpy(out->id, id->via.str.ptr, id->via.str.size);
        out->id[id->via.str.size] = '\0';
    }
    out->type = type;
    out->version = MSG_PROTO_VERSION;
    return CR_OK;
}

/* Best effort for error replies: the request id of a top map, if it is a
 * short string without NUL bytes, else "". */
static void peek_id(const msgpack_object_map *map, char *out)
{
    bool dup;
    const msgpack_object *id = header_key(map, "id", &dup);
    out[0] = '\0';
    if (!id || dup || id->type != MSGPACK_OBJECT_STR ||
        id->via.str.size > MSG_ID_MAX ||
        (id->via.str.size && memchr(id->via.str.ptr, '\0', id->via.str.size)))
        return;
    memcpy(out, id->via.str.ptr, id->via.str.size);
    out[id->via.str.size] = '\0';
}

/* Checks a frame (size, msgpack structure and limits) and unpacks it into
 * u (initialized by the caller, who destroys it) as one top-level map. */
static cr_status_t unpack_frame(const void *data, size_t len,
                                msgpack_unpacked *u, cr_err_t *err)
{
    if (!data || len == 0)
        return cr_err_set(err, CR_E_PROTO, "frame is empty");
    if (len > MSG_FRAME_MAX)
        return cr_err_set(err, CR_E_PROTO,
                          "frame of %zu bytes is over the limit of %u", len,
                          MSG_FRAME_MAX);
    cr_status_t st = scan_frame(data, len, err);
    if (st)
        return st;
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack_next(u, data, len, &off);
    if (r == MSGPACK_UNPACK_NOMEM_ERROR)
        return cr_err_set(err, CR_E_NOMEM, "out of memory unpacking a frame");
    /* The scan accepted it, so this is a disagreement with msgpack-c. */
    if (r != MSGPACK_UNPACK_SUCCESS || off != len)
        return cr_err_set(err, CR_E_PROTO, "frame is not valid msgpack");
    if (u->data.type != MSGPACK_OBJECT_MAP)
        return cr_err_set(err, CR_E_PROTO, "frame is not a map");
    return CR_OK;
}

cr_status_t msg_decode(const void *data, size_t len, msg_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    char id[MSG_ID_MAX + 1] = "";
    cr_status_t st = unpack_frame(data, len, &u, err);
    if (st)
        goto out;
    peek_id(&u.data.via.map, id);
    if ((st = dec_header(&u.data.via.map, out, err)))
        goto out;

    dec_t d;
    memset(&d, 0, sizeof d);
    d.m = out;
    d.mname = msg_type_name(out->type);
    d.err = err;
    st = dec_record(&d, msg_body_desc(out->type), (char *)&out->u, &u.data, 0);

out:
    msgpack_unpacked_destroy(&u);
    if (st) {
        msg_clear(out);
        memcpy(out->id, id, sizeof id);
    }
    return st;
}

bool msg_is_request(msg_type_t t)
{
#define REQUEST_CASE(m) case MSG_##m:
    switch (t) {
        MSG_REQUESTS(REQUEST_CASE)
        return true;
    default:
        return false;
    }
#undef REQUEST_CASE
}

cr_status_t msg_peek(const void *data, size_t len, msg_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    cr_status_t st = unpack_frame(data, len, &u, err);
    if (!st)
        st = dec_header(&u.data.via.map, out, err);
    msgpack_unpacked_destroy(&u);
    if (st)
        memset(out, 0, sizeof *out);
    return st;
}

/* ---- deep copy ---- */

static cr_status_t copy_record(msg_t *dst, const msg_desc_t *d, char *base);

/* Replaces each set pointer field in the struct at base (already a shallow
 * copy of the source) with a copy in dst's arena; zeroes unset fields. */
static cr_status_t copy_value(msg_t *dst, const msg_field_desc_t *f, char *p)
{
    switch (f->kind) {
    case MSG_KIND_I64:
    case MSG_KIND_F64:
    case MSG_KIND_BOOL:
        return CR_OK;
    case MSG_KIND_STR: {
        const char *s = ptr_get(p);
        if (s) {
            char *c = msg_strdup(dst, s);
            if (!c)
                return CR_E_NOMEM;
            ptr_set(p, c);
        }
        return CR_OK;
    }
    case MSG_KIND_BIN: {
        msg_bytes_t b;
        memcpy(&b, p, sizeof b);
        if (b.data) {
            uint8_t *c = alloc_raw(dst, b.len, false);
            if (!c)
                return CR_E_NOMEM;
            if (b.len)
                memcpy(c, b.data, b.len);
            b.data = c;
            memcpy(p, &b, sizeof b);
        }
        return CR_OK;
    }
    case MSG_KIND_I32S:
    case MSG_KIND_STRS:
    case MSG_KIND_RECS: {
        vec_t x = vec_get(p);
        if (!x.v)
            return CR_OK;
        const msg_desc_t *sub = msg_record_desc(f->sub);
        size_t size = f->kind == MSG_KIND_I32S   ? sizeof(int32_t)
                      : f->kind == MSG_KIND_STRS ? sizeof(char *)
                                                 : sub->size;
        char *c = alloc_array(dst, x.n, size);
        if (!c)
            return CR_E_NOMEM;
        if (x.n)
            memcpy(c, x.v, x.n * size);
        for (size_t i = 0; i < x.n; i++) {
            if (f->kind == MSG_KIND_STRS) {
                char **sv = (char **)(void *)c;
                if (sv[i] && !(sv[i] = msg_strdup(dst, sv[i])))
                    return CR_E_NOMEM;
            } else if (f->kind == MSG_KIND_RECS) {
                cr_status_t st = copy_record(dst, sub, c + i * size);
                if (st)
                    return st;
            }
        }
        vec_set(p, c, x.n);
        return CR_OK;
    }
    case MSG_KIND_REC: {
        const char *rec = ptr_get(p);
        if (rec) {
            const msg_desc_t *sub = msg_record_desc(f->sub);
            char *c = alloc_raw(dst, sub->size, false);
            if (!c)
                return CR_E_NOMEM;
            memcpy(c, rec, sub->size);
            ptr_set(p, c);
            return copy_record(dst, sub, c);
        }
        return CR_OK;
    }
    }
    return CR_E_INTERNAL;
}

static cr_status_t copy_record(msg_t *dst, const msg_desc_t *d, char *base)
{
    for (size_t i = 0; i < d->n_fields; i++) {
        const msg_field_desc_t *f = &d->fields[i];
        if (!field_has(base, f)) {
            memset(base + f->offset, 0, kind_size(f->kind));
            continue;
        }
        cr_status_t st = copy_value(dst, f, base + f->offset);
        if (st)
            return st;
    }
    return CR_OK;
}

cr_status_t msg_copy(const msg_t *src, msg_t *dst)
{
    memset(dst, 0, sizeof *dst);
    const msg_desc_t *d = msg_body_desc(src->type);
    if (!d)
        return CR_E_INVALID;
    dst->type = src->type;
    dst->version = src->version;
    memcpy(dst->id, src->id, sizeof dst->id);
    dst->id[MSG_ID_MAX] = '\0';
    memcpy(&dst->u, &src->u, sizeof dst->u);
    cr_status_t st = copy_record(dst, d, (char *)&dst->u);
    if (st)
        msg_clear(dst);
    return st;
}
