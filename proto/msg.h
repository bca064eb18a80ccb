/* msg.h: the bus messages as C structs, and their codec.
 *
 * Structs, the type enum and the codec's field descriptors are all expanded
 * from proto/messages.def; nothing else in corral packs msgpack by hand.
 *
 * Ownership: a message filled by the caller for msg_encode() only borrows
 * its strings and arrays. A message produced by msg_decode() owns everything
 * it points to in one arena; free it with msg_clear(). */
#ifndef CR_MSG_H
#define CR_MSG_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#define MSG_PROTO_VERSION 1
#define MSG_ID_MAX 63                     /* request id bytes */
#define MSG_FRAME_MAX (64u * 1024 * 1024) /* largest frame we decode */
#define MSG_MAX_ARRAY 1048576             /* elements in any one array */
#define MSG_MAX_DEPTH 4                   /* record nesting */
/* Containers (maps and arrays) nested in one frame, counting the top map:
 * each record level is a map inside an array at most, plus a leaf array. */
#define MSG_MAX_WIRE_DEPTH (2 * MSG_MAX_DEPTH + 2)
#define MSG_MAX_VALUES (4u * MSG_MAX_ARRAY) /* msgpack values in one frame */

typedef struct msg_bytes {
    uint8_t *data;
    size_t len;
} msg_bytes_t;

typedef struct msg_i32s {
    int32_t *v;
    size_t n;
} msg_i32s_t;

typedef struct msg_strs {
    char **v;
    size_t n;
} msg_strs_t;

/* C types per field kind. */
#define MSG_CTYPE_STR(sub) char *
#define MSG_CTYPE_I64(sub) int64_t
#define MSG_CTYPE_F64(sub) double
#define MSG_CTYPE_BOOL(sub) bool
#define MSG_CTYPE_BIN(sub) msg_bytes_t
#define MSG_CTYPE_I32S(sub) msg_i32s_t
#define MSG_CTYPE_STRS(sub) msg_strs_t
#define MSG_CTYPE_REC(sub) struct msg_##sub *
#define MSG_CTYPE_RECS(sub) struct { struct msg_##sub *v; size_t n; }

#include "proto/messages.def"

#define MSG_FIELD_DECL(name, kind, sub, req) \
    MSG_CTYPE_##kind(sub) name;              \
    bool has_##name;

/* Records: struct msg_<name> { fields...; has_<field>... }. */
#define MSG_REC_STRUCT(rec)                          \
    typedef struct msg_##rec {                       \
        MSG_REC_##rec(MSG_FIELD_DECL) char _unused_; \
    } msg_##rec##_t;
MSG_RECORDS(MSG_REC_STRUCT)
#undef MSG_REC_STRUCT

/* Message bodies: struct msg_<name>_body. */
#define MSG_BODY_STRUCT(m)                         \
    typedef struct msg_##m##_body {                \
        MSG_MSG_##m(MSG_FIELD_DECL) char _unused_; \
    } msg_##m##_body_t;
MSG_MESSAGES(MSG_BODY_STRUCT)
#undef MSG_BODY_STRUCT

/* The head of a model request (MSG_REQUEST_HEAD in messages.def). */
typedef struct msg_request_head {
    MSG_REQUEST_HEAD(MSG_FIELD_DECL) char _unused_;
} msg_request_head_t;

/* Each request body starts with exactly that head. */
#define MSG_HEAD_FIELD_CHECK_(m, name)                                       \
    _Static_assert(offsetof(msg_##m##_body_t, name) ==                       \
                           offsetof(msg_request_head_t, name) &&             \
                       offsetof(msg_##m##_body_t, has_##name) ==             \
                           offsetof(msg_request_head_t, has_##name),         \
                   #m " does not start with the request head");
#define MSG_HEAD_CHECK_(m)                                                   \
    MSG_HEAD_FIELD_CHECK_(m, model) MSG_HEAD_FIELD_CHECK_(m, options)        \
    MSG_HEAD_FIELD_CHECK_(m, keep_alive_ms) MSG_HEAD_FIELD_CHECK_(m, format) \
    MSG_HEAD_FIELD_CHECK_(m, think) MSG_HEAD_FIELD_CHECK_(m, logprobs)       \
    MSG_HEAD_FIELD_CHECK_(m, truncate)
MSG_REQUESTS(MSG_HEAD_CHECK_)
#undef MSG_HEAD_CHECK_
#undef MSG_HEAD_FIELD_CHECK_

typedef enum msg_type {
    MSG_NONE = 0,
#define MSG_TYPE_ENUM(m) MSG_##m,
    MSG_MESSAGES(MSG_TYPE_ENUM)
#undef MSG_TYPE_ENUM
    MSG__COUNT
} msg_type_t;

/* ---- descriptors: the tables the codec walks ----
 *
 * One descriptor per record and per message body, expanded from
 * messages.def. They are public so tests and JSON converters can walk
 * messages generically; nothing in them is mutable. */

typedef enum msg_kind {
    MSG_KIND_STR = 1,
    MSG_KIND_I64,
    MSG_KIND_F64,
    MSG_KIND_BOOL,
    MSG_KIND_BIN,
    MSG_KIND_I32S,
    MSG_KIND_STRS,
    MSG_KIND_REC,
    MSG_KIND_RECS,
} msg_kind_t;

/* Nested record types, in MSG_RECORDS order. */
typedef enum msg_record {
    MSG_RECORD_NONE = 0,
#define MSG_RECORD_ENUM(r) MSG_RECORD_##r,
    MSG_RECORDS(MSG_RECORD_ENUM)
#undef MSG_RECORD_ENUM
    MSG_RECORD__COUNT
} msg_record_t;

typedef struct msg_field_desc {
    const char *name;  /* wire key and C member name */
    msg_kind_t kind;
    bool required;     /* REQ in messages.def */
    size_t offset;     /* offsetof the value in its struct */
    size_t has_offset; /* offsetof has_<name> in its struct */
    msg_record_t sub;  /* REC/RECS: the nested record; else MSG_RECORD_NONE */
} msg_field_desc_t;

typedef struct msg_desc {
    const char *name;               /* "generate", "options", ... */
    size_t size;                    /* sizeof the body or record struct */
    const msg_field_desc_t *fields; /* n_fields entries, messages.def order */
    size_t n_fields;
} msg_desc_t;

/* The body descriptor of a message type (offsets are from &m->u), or NULL
 * for MSG_NONE and out-of-range values. Static; never freed. */
const msg_desc_t *msg_body_desc(msg_type_t t);

/* The descriptor of a nested record, or NULL when out of range. */
const msg_desc_t *msg_record_desc(msg_record_t r);

/* "STR", "I64", ... or "unknown". */
const char *msg_kind_name(msg_kind_t k);

struct msg_arena;

/* One bus message: header plus the body selected by type. */
typedef struct msg {
    msg_type_t type;
    uint32_t version;
    char id[MSG_ID_MAX + 1]; /* request id; "" if none */
    union {
#define MSG_UNION_MEMBER(m) msg_##m##_body_t m;
        MSG_MESSAGES(MSG_UNION_MEMBER)
#undef MSG_UNION_MEMBER
        /* The common initial sequence of every MSG_REQUESTS body: valid
         * when msg_is_request(type). */
        msg_request_head_t request;
    } u;
    struct msg_arena *arena; /* owns decoded data; NULL for caller-built */
} msg_t;

/* Zeroes m and sets type, version and id (id may be NULL; truncated to
 * MSG_ID_MAX). For building a message to encode. m is overwritten, not
 * freed: msg_clear a decoded message before reusing it. */
void msg_init(msg_t *m, msg_type_t type, const char *id);

/* Frees what a decode allocated and zeroes m. Accepts a zeroed message. */
void msg_clear(msg_t *m);

/* The wire name of a type ("generate"), or "unknown". */
const char *msg_type_name(msg_type_t t);
/* The type for a wire name, or MSG_NONE. */
msg_type_t msg_type_from_name(const char *name);

/* Encodes m (fields whose has_ flag is set; required fields must be set)
 * and appends the frame to out. CR_E_INVALID if a required field is unset
 * (err names it: "chat: field 'messages[1].role' is missing"), or set with a
 * NULL string/record or an array with n > 0 and a NULL pointer;
 * CR_E_TOO_LARGE over MSG_FRAME_MAX or an array over MSG_MAX_ARRAY, or past
 * out->max_bytes. On error out is left as it was. */
cr_status_t msg_encode(const msg_t *m, cr_buf_t *out, cr_err_t *err);

/* Decodes one frame into *out (which the caller then owns; msg_clear it).
 * *out is overwritten, not freed.
 * Never trusts a length. Errors (CR_E_PROTO) name the field and message,
 * e.g. "generate: field 'model' is missing", "chat: field 'messages[2].role'
 * must be a string", "frame is truncated", "unsupported protocol version 7".
 * Unknown fields are ignored; a field whose value is nil counts as absent; a
 * known field given twice, or a string with a NUL byte, is an error.
 * CR_E_NOMEM if the arena cannot grow. On error *out is left zeroed except
 * out->id, which keeps the request id when the frame had a readable one (so
 * the receiver can address an error reply). */
cr_status_t msg_decode(const void *data, size_t len, msg_t *out, cr_err_t *err);

/* Reads only a frame's header: out->type, out->id and out->version, the
 * body left zeroed (nothing to msg_clear). The frame is checked as
 * msg_decode checks it (size, msgpack structure and limits, v, type, id)
 * but its fields are not: for a relay that forwards the frame as it is to
 * a peer that decodes it. Errors as msg_decode's; on error *out is zeroed. */
cr_status_t msg_peek(const void *data, size_t len, msg_t *out, cr_err_t *err);

/* True for the model requests (MSG_REQUESTS: generate, chat, embed,
 * tokenize), whose bodies are readable as m->u.request. */
bool msg_is_request(msg_type_t t);

/* Deep-copies src into *dst with its own arena (dst owned by the caller;
 * msg_clear it). Only fields whose has_ flag is set are copied; the others
 * are zeroed. dst is overwritten, not freed, and must not be src.
 * CR_E_NOMEM on failure, with *dst zeroed. */
cr_status_t msg_copy(const msg_t *src, msg_t *dst);

/* Arena allocation for building owned messages (e.g. a scheduler that edits
 * a decoded message): allocates from m's arena, creating it if needed.
 * The memory is zeroed and aligned for any type; bytes == 0 still yields a
 * unique pointer. Returns NULL on failure. The memory lives until
 * msg_clear(m). msg_strdup(m, NULL) returns NULL. */
void *msg_alloc(msg_t *m, size_t bytes);
char *msg_strdup(msg_t *m, const char *s);

/* Makes an error reply: type error with status and formatted message, id
 * copied from `id`. The message text is stored in m's arena (a static
 * "out of memory" text if that fails). m is overwritten as by msg_init. */
void msg_make_error(msg_t *m, const char *id, cr_status_t st,
                    const char *fmt, ...) CR_PRINTF(4, 5);

#endif
