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

typedef enum msg_type {
    MSG_NONE = 0,
#define MSG_TYPE_ENUM(m) MSG_##m,
    MSG_MESSAGES(MSG_TYPE_ENUM)
#undef MSG_TYPE_ENUM
    MSG__COUNT
} msg_type_t;

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
    } u;
    struct msg_arena *arena; /* owns decoded data; NULL for caller-built */
} msg_t;

/* Zeroes m and sets type, version and id (id may be NULL; truncated to
 * MSG_ID_MAX). For building a message to encode. */
void msg_init(msg_t *m, msg_type_t type, const char *id);

/* Frees what a decode allocated and zeroes m. Accepts a zeroed message. */
void msg_clear(msg_t *m);

/* The wire name of a type ("generate"), or "unknown". */
const char *msg_type_name(msg_type_t t);
/* The type for a wire name, or MSG_NONE. */
msg_type_t msg_type_from_name(const char *name);

/* Encodes m (fields whose has_ flag is set; required fields must be set)
 * and appends the frame to out. CR_E_INVALID if a required field is unset
 * (err names it), CR_E_TOO_LARGE over MSG_FRAME_MAX. */
cr_status_t msg_encode(const msg_t *m, cr_buf_t *out, cr_err_t *err);

/* Decodes one frame into *out (which the caller then owns; msg_clear it).
 * Never trusts a length. Errors (CR_E_PROTO) name the field and message,
 * e.g. "generate: field 'model' is missing", "chat: field 'messages[2].role'
 * must be a string", "frame is truncated", "unsupported protocol version 7".
 * Unknown fields are ignored. On error *out is left zeroed. */
cr_status_t msg_decode(const void *data, size_t len, msg_t *out, cr_err_t *err);

/* Deep-copies src into *dst with its own arena (dst owned by the caller). */
cr_status_t msg_copy(const msg_t *src, msg_t *dst);

/* Arena allocation for building owned messages (e.g. a scheduler that edits
 * a decoded message): allocates from m's arena, creating it if needed.
 * Returns NULL on failure. The memory lives until msg_clear(m). */
void *msg_alloc(msg_t *m, size_t bytes);
char *msg_strdup(msg_t *m, const char *s);

/* Makes an error reply: type error with status and formatted message, id
 * copied from `id`. The message text is stored in m's arena. */
void msg_make_error(msg_t *m, const char *id, cr_status_t st,
                    const char *fmt, ...) CR_PRINTF(4, 5);

#endif
