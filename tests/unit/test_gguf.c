/* test_gguf.c: the GGUF reader and writer: round trips, real files from the
 * shared testdata, a named corpus of corrupt inputs and a byte-flip fuzz. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "tests/unit/check.h"
#include "tests/unit/smaps.h"

#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void test_transplant(const char *root);

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void check_stories(const cr_gguf_t *g)
{
    CHECK_EQ_STR(cr_gguf_arch(g), "llama");
    uint32_t v = 0;
    CHECK(cr_gguf_get_u32(g, "llama.block_count", &v) && v == 5);
    CHECK(cr_gguf_get_u32(g, "llama.embedding_length", &v) && v == 64);
    const cr_gguf_array_t *toks = NULL;
    CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks));
    if (toks) {
        CHECK_EQ_INT(toks->type, CR_GGUF_STRING);
        CHECK_EQ_INT(toks->n, 512);
        CHECK(toks->strs != NULL);
    }
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "token_embd.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->n_dims, 2);
        CHECK_EQ_INT(t->ne[0], 64);
        CHECK_EQ_INT(t->ne[1], 512);
        CHECK_EQ_INT(t->n_elems, 64 * 512);
        CHECK((const uint8_t *)t->data + t->size_bytes <=
              (const uint8_t *)cr_gguf_tensor_at(g, 0)->data +
                  cr_gguf_file_size(g));
    }
    CHECK(cr_gguf_tensor_find(g, "no.such.tensor") == NULL);
}

/* Opens every *.gguf under dir; returns how many were seen. */
static int open_dir(const char *root, const char *sub)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int seen = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".gguf"))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        cr_gguf_t *g = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = cr_gguf_open(path, &g, &err);
        seen++;
        if (strstr(de->d_name, "dbrx-corrupt")) {
            CHECK_MSG(st == CR_E_CORRUPT, "%s opened (status %d)", path, st);
            CHECK_MSG(strstr(err.msg, "duplicate metadata key") != NULL,
                      "%s", err.msg);
            CHECK(g == NULL);
            continue;
        }
        CHECK_MSG(st == CR_OK, "%s: %s", path, err.msg);
        if (!g)
            continue;
        CHECK(cr_gguf_version(g) == 2 || cr_gguf_version(g) == 3);
        CHECK(cr_gguf_kv_count(g) > 0);
        /* Every key is findable by name and lands on itself. */
        for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
            const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
            char key[1024];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            CHECK(cr_gguf_kv_find(g, key) == kv);
        }
        for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            CHECK(cr_gguf_tensor_find(g, t->name) == t);
        }
        if (!strcmp(sub, "vocab")) {
            CHECK_EQ_INT(cr_gguf_tensor_count(g), 0);
            const cr_gguf_array_t *toks = NULL;
            CHECK_MSG(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) &&
                          toks->n > 0,
                      "%s: no tokens", path);
        }
        if (!strncmp(de->d_name, "stories260K", 11))
            check_stories(g);
        cr_gguf_close(&g);
        CHECK(g == NULL);
    }
    closedir(d);
    return seen;
}

static void test_testdata_files(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (!root) {
        printf("test_gguf: testdata absent, skipping real-file checks\n");
        return;
    }
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", root);
    int n = open_dir(saved, "vocab");
    CHECK(n >= 10);
    int m = open_dir(saved, "models");
    if (m == 0)
        printf("test_gguf: no models/*.gguf, skipping model checks\n");
    test_transplant(saved);
}

/* ---- writer round trips ----------------------------------------------- */

/* Writes w to memory and opens the result; the bytes are kept in *bytes_out
 * (caller frees) because the handle borrows them. */
static cr_gguf_t *write_and_open(cr_gguf_writer_t *w, void **bytes_out,
                                 size_t *len_out)
{
    cr_err_t err;
    cr_err_clear(&err);
    void *bytes = NULL;
    size_t len = 0;
    cr_status_t st = cr_gguf_writer_write_memory(w, &bytes, &len, &err);
    CHECK_MSG(st == CR_OK, "write_memory: %s", err.msg);
    *bytes_out = bytes;
    if (len_out)
        *len_out = len;
    if (st)
        return NULL;
    cr_gguf_t *g = NULL;
    st = cr_gguf_open_memory(bytes, len, &g, &err);
    CHECK_MSG(st == CR_OK, "reopen: %s", err.msg);
    return g;
}

static void test_kv_roundtrip(void)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    CHECK(w != NULL);
    CHECK(!cr_gguf_writer_add_u8(w, "k.u8", 200, &err));
    CHECK(!cr_gguf_writer_add_i8(w, "k.i8", -100, &err));
    CHECK(!cr_gguf_writer_add_u16(w, "k.u16", 65000, &err));
    CHECK(!cr_gguf_writer_add_i16(w, "k.i16", -32000, &err));
    CHECK(!cr_gguf_writer_add_u32(w, "k.u32", 4000000000u, &err));
    CHECK(!cr_gguf_writer_add_i32(w, "k.i32", -2000000000, &err));
    CHECK(!cr_gguf_writer_add_u64(w, "k.u64", UINT64_MAX, &err));
    CHECK(!cr_gguf_writer_add_i64(w, "k.i64", INT64_MIN, &err));
    CHECK(!cr_gguf_writer_add_f32(w, "k.f32", 1.5f, &err));
    CHECK(!cr_gguf_writer_add_f64(w, "k.f64", -2.25e300, &err));
    CHECK(!cr_gguf_writer_add_bool(w, "k.bool", true, &err));
    CHECK(!cr_gguf_writer_add_bool(w, "k.false", false, &err));
    CHECK(!cr_gguf_writer_add_str(w, "general.architecture", "llama", &err));
    CHECK(!cr_gguf_writer_add_strn(w, "k.bin", "a\0b", 3, &err));
    CHECK(!cr_gguf_writer_add_str(w, "k.empty", "", &err));
    const uint32_t u32s[] = {1, 2, 0xffffffffu};
    const float f32s[] = {0.5f, -1.0f};
    const int32_t i32s[] = {-5, 6};
    const uint8_t bools[] = {1, 0, 1};
    CHECK(!cr_gguf_writer_add_arr(w, "a.u32", CR_GGUF_U32, u32s, 3, &err));
    CHECK(!cr_gguf_writer_add_arr(w, "a.f32", CR_GGUF_F32, f32s, 2, &err));
    CHECK(!cr_gguf_writer_add_arr(w, "a.i32", CR_GGUF_I32, i32s, 2, &err));
    CHECK(!cr_gguf_writer_add_arr(w, "a.bool", CR_GGUF_BOOL, bools, 3, &err));
    CHECK(!cr_gguf_writer_add_arr(w, "a.none", CR_GGUF_U8, NULL, 0, &err));
    const char *strs[] = {"hello", "", "w\xc3\xb6rld"};
    CHECK(!cr_gguf_writer_add_arr_str(w, "a.str", strs, 3, &err));
    CHECK(!cr_gguf_writer_add_arr_str(w, "a.nostr", strs, 0, &err));
    cr_gguf_str_t gs[] = {{"x\0y", 3}, {"zz", 2}};
    CHECK(!cr_gguf_writer_add_arr_gstr(w, "a.gstr", gs, 2, &err));
    /* Refused by the writer. */
    CHECK_EQ_INT(cr_gguf_writer_add_arr(w, "a.bad", CR_GGUF_STRING, strs, 1, &err),
                 CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_arr(w, "a.bad", CR_GGUF_ARRAY, u32s, 1, &err),
                 CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_u32(w, "", 1, &err), CR_E_INVALID);
    /* Replacement keeps the position and the count. */
    size_t n_before = cr_gguf_writer_kv_count(w);
    CHECK(!cr_gguf_writer_add_u32(w, "k.u32", 4000000000u, &err));
    CHECK_EQ_INT(cr_gguf_writer_kv_count(w), n_before);
    CHECK(!cr_gguf_writer_add_str(w, "k.gone", "x", &err));
    CHECK(cr_gguf_writer_remove(w, "k.gone"));
    CHECK(!cr_gguf_writer_remove(w, "k.gone"));
    CHECK_EQ_INT(cr_gguf_writer_kv_count(w), n_before);

    void *bytes = NULL;
    cr_gguf_t *g = write_and_open(w, &bytes, NULL);
    if (g) {
        CHECK_EQ_INT(cr_gguf_version(g), 3);
        CHECK_EQ_INT(cr_gguf_kv_count(g), n_before);
        CHECK_EQ_INT(cr_gguf_tensor_count(g), 0);
        CHECK_EQ_INT(cr_gguf_alignment(g), 32);
        CHECK(cr_gguf_str_eq(cr_gguf_kv_at(g, 0)->key, "k.u8"));
        CHECK(cr_gguf_kv_at(g, n_before) == NULL);
        uint64_t u = 0;
        int64_t i = 0;
        uint32_t u32 = 0;
        float f = 0;
        bool b = false;
        CHECK(cr_gguf_get_u64(g, "k.u8", &u) && u == 200);
        CHECK(cr_gguf_get_i64(g, "k.i8", &i) && i == -100);
        CHECK(!cr_gguf_get_u64(g, "k.i8", &u)); /* negative: no u64 */
        CHECK(cr_gguf_get_u32(g, "k.u16", &u32) && u32 == 65000);
        CHECK(cr_gguf_get_i64(g, "k.u16", &i) && i == 65000);
        CHECK(cr_gguf_get_i64(g, "k.i16", &i) && i == -32000);
        CHECK(cr_gguf_get_u32(g, "k.u32", &u32) && u32 == 4000000000u);
        CHECK(cr_gguf_get_i64(g, "k.i32", &i) && i == -2000000000);
        CHECK(cr_gguf_get_u64(g, "k.u64", &u) && u == UINT64_MAX);
        CHECK(!cr_gguf_get_u32(g, "k.u64", &u32)); /* out of range */
        CHECK(!cr_gguf_get_i64(g, "k.u64", &i));
        CHECK(cr_gguf_get_i64(g, "k.i64", &i) && i == INT64_MIN);
        CHECK(cr_gguf_get_f32(g, "k.f32", &f) && f == 1.5f);
        CHECK(!cr_gguf_get_f32(g, "k.f64", &f)); /* beyond float range */
        CHECK(!cr_gguf_get_u64(g, "k.f32", &u)); /* floats are not ints */
        CHECK(!cr_gguf_get_f32(g, "k.u8", &f));
        const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, "k.f64");
        CHECK(kv && kv->type == CR_GGUF_F64 && kv->v.f64 == -2.25e300);
        CHECK(cr_gguf_get_bool(g, "k.bool", &b) && b);
        CHECK(cr_gguf_get_bool(g, "k.false", &b) && !b);
        CHECK(!cr_gguf_get_bool(g, "k.u8", &b));
        CHECK_EQ_STR(cr_gguf_arch(g), "llama");
        cr_gguf_str_t s;
        CHECK(cr_gguf_get_str(g, "k.bin", &s) && s.len == 3 &&
              !memcmp(s.ptr, "a\0b", 3));
        CHECK(cr_gguf_get_str(g, "k.empty", &s) && s.len == 0);
        char small[4];
        CHECK(cr_gguf_get_strz(g, "general.architecture", small, sizeof small));
        CHECK_EQ_STR(small, "lla");
        CHECK(!cr_gguf_get_strz(g, "k.u8", small, sizeof small));
        CHECK(!cr_gguf_get_str(g, "missing", &s));
        CHECK(cr_gguf_kv_find(g, "missing") == NULL);
        CHECK(cr_gguf_kv_find(g, "k.u8x") == NULL);

        const cr_gguf_array_t *a = NULL;
        CHECK(cr_gguf_get_arr(g, "a.u32", &a) && a->type == CR_GGUF_U32 &&
              a->n == 3 && a->strs == NULL);
        CHECK(cr_gguf_arr_get_u64(a, 2, &u) && u == 0xffffffffu);
        CHECK(!cr_gguf_arr_get_u64(a, 3, &u));
        CHECK(!cr_gguf_arr_get_str(a, 0, &s));
        CHECK(cr_gguf_get_arr(g, "a.f32", &a) && a->n == 2);
        CHECK(cr_gguf_arr_get_f32(a, 1, &f) && f == -1.0f);
        CHECK(cr_gguf_get_arr(g, "a.i32", &a));
        CHECK(cr_gguf_arr_get_i64(a, 0, &i) && i == -5);
        CHECK(!cr_gguf_arr_get_u64(a, 0, &u));
        CHECK(cr_gguf_get_arr(g, "a.bool", &a) && a->type == CR_GGUF_BOOL &&
              a->n == 3 && !memcmp(a->data, bools, 3));
        CHECK(cr_gguf_get_arr(g, "a.none", &a) && a->n == 0);
        CHECK(cr_gguf_get_arr(g, "a.str", &a) && a->type == CR_GGUF_STRING &&
              a->n == 3 && a->strs != NULL);
        if (a && a->strs) {
            CHECK(cr_gguf_str_eq(a->strs[0], "hello"));
            CHECK(cr_gguf_str_eq(a->strs[1], ""));
            CHECK(cr_gguf_str_eq(a->strs[2], "w\xc3\xb6rld"));
            CHECK(cr_gguf_arr_get_str(a, 2, &s) && s.len == 6);
            CHECK(!cr_gguf_arr_get_f32(a, 0, &f));
        }
        CHECK(cr_gguf_get_arr(g, "a.nostr", &a) && a->n == 0 && a->strs);
        CHECK(cr_gguf_get_arr(g, "a.gstr", &a) && a->n == 2);
        if (a && a->strs)
            CHECK(a->strs[0].len == 3 && !memcmp(a->strs[0].ptr, "x\0y", 3));
        CHECK(!cr_gguf_get_arr(g, "k.u8", &a));
        CHECK_EQ_STR(cr_gguf_vtype_name(CR_GGUF_STRING), "string");
        CHECK_EQ_STR(cr_gguf_vtype_name((cr_gguf_vtype_t)77), "unknown");

        /* Copying every KV into a new writer reproduces the same bytes. */
        cr_gguf_writer_t *w2 = cr_gguf_writer_new();
        CHECK(!cr_gguf_writer_copy_prefix(w2, g, "", &err));
        void *b1 = NULL, *b2 = NULL;
        size_t l1 = 0, l2 = 0;
        CHECK(!cr_gguf_writer_write_memory(w, &b1, &l1, &err));
        CHECK(!cr_gguf_writer_write_memory(w2, &b2, &l2, &err));
        CHECK(l1 == l2 && b1 && b2 && !memcmp(b1, b2, l1));
        free(b1);
        free(b2);
        cr_gguf_writer_destroy(&w2);
        CHECK(w2 == NULL);
        cr_gguf_close(&g);
    }
    free(bytes);
    cr_gguf_writer_destroy(&w);
    CHECK(w == NULL);
    cr_gguf_writer_destroy(&w); /* NULL is fine */
    cr_gguf_close(&g);
}

/* Distinct bytes per tensor, so a mixed-up offset shows. */
static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 7);
}

typedef struct cb_ctx {
    const uint8_t *src;
    int calls;
    int mode; /* 0 exact in two pieces, 1 short, 2 long */
} cb_ctx_t;

static cr_status_t tensor_cb(void *ctx, const char *name, uint64_t size,
                             cr_gguf_sink_t *sink, cr_err_t *err)
{
    cb_ctx_t *c = ctx;
    c->calls++;
    CR_UNUSED(name);
    size_t half = (size_t)size / 2;
    cr_status_t st = cr_gguf_sink_write(sink, c->src, half, err);
    if (st || c->mode == 1)
        return st;
    st = cr_gguf_sink_write(sink, c->src + half, (size_t)size - half, err);
    if (st || c->mode == 0)
        return st;
    return cr_gguf_sink_write(sink, c->src, 1, err);
}

static void check_tensors(uint32_t alignment)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    if (alignment != CR_GGUF_DEFAULT_ALIGNMENT)
        CHECK(!cr_gguf_writer_set_alignment(w, alignment, &err));
    static uint8_t f32[4 * 5 * 3], f16[2 * 8 * 2], q8[34 * 2 * 3], q4[18 * 4];
    fill(f32, sizeof f32, 1);
    fill(f16, sizeof f16, 2);
    fill(q8, sizeof q8, 3);
    fill(q4, sizeof q4, 4);
    uint64_t ne_f32[] = {5, 3}, ne_f16[] = {8, 2}, ne_q8[] = {64, 1, 3},
             ne_q4[] = {32, 2, 1, 2};
    uint64_t size = 0;
    CHECK(!cr_gguf_writer_add_str(w, "general.architecture", "test", &err));
    CHECK(!cr_gguf_writer_add_tensor(w, "t.f32", 2, ne_f32, CR_TYPE_F32, f32,
                                     &size, &err) && size == sizeof f32);
    CHECK(!cr_gguf_writer_add_tensor(w, "t.f16", 2, ne_f16, CR_TYPE_F16, f16,
                                     &size, &err) && size == sizeof f16);
    CHECK(!cr_gguf_writer_add_tensor(w, "t.q8_0", 3, ne_q8, CR_TYPE_Q8_0, q8,
                                     &size, &err) && size == sizeof q8);
    cb_ctx_t cb = {q4, 0, 0};
    CHECK(!cr_gguf_writer_add_tensor_fn(w, "t.q4_0", 4, ne_q4, CR_TYPE_Q4_0,
                                        tensor_cb, &cb, &size, &err) &&
          size == sizeof q4);
    CHECK_EQ_INT(cr_gguf_writer_tensor_count(w), 4);

    void *bytes = NULL;
    size_t len = 0;
    cr_gguf_t *g = write_and_open(w, &bytes, &len);
    CHECK_EQ_INT(cb.calls, 1);
    if (g) {
        CHECK_EQ_INT(cr_gguf_alignment(g), alignment);
        CHECK_EQ_INT(cr_gguf_data_offset(g) % alignment, 0);
        CHECK_EQ_INT(cr_gguf_file_size(g), len);
        CHECK_EQ_INT(cr_gguf_tensor_count(g), 4);
        const uint8_t *srcs[] = {f32, f16, q8, q4};
        const size_t sizes[] = {sizeof f32, sizeof f16, sizeof q8, sizeof q4};
        const cr_type_t types[] = {CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_Q8_0,
                                   CR_TYPE_Q4_0};
        uint64_t expect_off = 0;
        for (size_t i = 0; i < 4; i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            expect_off = (expect_off + alignment - 1) / alignment * alignment;
            CHECK_EQ_INT(t->offset, expect_off);
            CHECK_EQ_INT(t->type, types[i]);
            CHECK_EQ_INT(t->size_bytes, sizes[i]);
            CHECK(t->data == (const uint8_t *)bytes + cr_gguf_data_offset(g) +
                                 t->offset);
            CHECK(!memcmp(t->data, srcs[i], sizes[i]));
            expect_off += sizes[i];
        }
        /* The file ends padded after the last tensor. */
        uint64_t end = cr_gguf_data_offset(g) + expect_off;
        CHECK_EQ_INT(len, (end + alignment - 1) / alignment * alignment);
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "t.q4_0");
        CHECK(t && t->n_dims == 4 && t->ne[0] == 32 && t->ne[1] == 2 &&
              t->ne[2] == 1 && t->ne[3] == 2 && t->n_elems == 128);
        t = cr_gguf_tensor_find(g, "t.f32");
        CHECK(t && t->n_dims == 2 && t->ne[2] == 1 && t->ne[3] == 1 &&
              t->n_elems == 15);
        CHECK(cr_gguf_tensor_at(g, 4) == NULL);
        cr_gguf_close(&g);
    }
    free(bytes);
    cr_gguf_writer_destroy(&w);
}

static void test_tensors(void)
{
    check_tensors(32);
    check_tensors(64);
    check_tensors(1);
    check_tensors(4096);

    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    uint8_t data[64] = {0};
    uint64_t ne[] = {16, 1, 1, 1, 1};
    uint64_t ne0[] = {0};
    uint64_t ne33[] = {33};
    uint64_t big[] = {1ull << 40, 1ull << 40};
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 0, ne, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 5, ne, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 1, ne0, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 1, ne33, CR_TYPE_Q8_0,
                                           data, NULL, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "block size") != NULL);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 1, ne, (cr_type_t)5, data,
                                           NULL, &err), CR_E_UNSUPPORTED);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 2, big, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "", 1, ne, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "y", 1, ne, CR_TYPE_F32, NULL,
                                           NULL, &err), CR_E_INVALID);
    char long_name[CR_GGUF_MAX_NAME_BYTES + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, long_name, 1, ne, CR_TYPE_F32,
                                           data, NULL, &err), CR_E_INVALID);
    long_name[CR_GGUF_MAX_NAME_BYTES] = '\0'; /* exactly the limit: fine */
    CHECK(!cr_gguf_writer_add_tensor(w, long_name, 1, ne, CR_TYPE_F32, data,
                                     NULL, &err));
    CHECK(!cr_gguf_writer_add_tensor(w, "x", 1, ne, CR_TYPE_F32, data, NULL,
                                     &err));
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, "x", 1, ne, CR_TYPE_F32, data,
                                           NULL, &err), CR_E_EXISTS);
    CHECK(strstr(err.msg, "'x'") != NULL);
    CHECK_EQ_INT(cr_gguf_writer_tensor_count(w), 2);
    CHECK_EQ_INT(cr_gguf_writer_set_alignment(w, 0, &err), CR_E_INVALID);
    CHECK_EQ_INT(cr_gguf_writer_set_alignment(w, 48, &err), CR_E_INVALID);
    /* A bad general.alignment added by hand is refused at write time. */
    CHECK(!cr_gguf_writer_add_u32(w, "general.alignment", 3, &err));
    void *bytes = NULL;
    size_t len = 0;
    CHECK_EQ_INT(cr_gguf_writer_write_memory(w, &bytes, &len, &err),
                 CR_E_INVALID);
    CHECK(bytes == NULL);
    CHECK(!cr_gguf_writer_add_u8(w, "general.alignment", 8, &err));
    CHECK_EQ_INT(cr_gguf_writer_write_memory(w, &bytes, &len, &err),
                 CR_E_INVALID);
    CHECK(cr_gguf_writer_remove(w, "general.alignment"));
    CHECK(!cr_gguf_writer_write_memory(w, &bytes, &len, &err));
    cr_gguf_t *g = NULL;
    CHECK(!cr_gguf_open_memory(bytes, len, &g, &err));
    const cr_gguf_tensor_t *t = g ? cr_gguf_tensor_find(g, long_name) : NULL;
    CHECK(t && strlen(t->name) == CR_GGUF_MAX_NAME_BYTES);
    cr_gguf_close(&g);
    free(bytes);
    cr_gguf_writer_destroy(&w);

    /* Callbacks that write too little or too much fail the write. */
    static uint8_t src[18 * 2];
    uint64_t ne_q4[] = {64};
    for (int mode = 1; mode <= 2; mode++) {
        w = cr_gguf_writer_new();
        cb_ctx_t cb = {src, 0, mode};
        CHECK(!cr_gguf_writer_add_tensor_fn(w, "cb", 1, ne_q4, CR_TYPE_Q4_0,
                                            tensor_cb, &cb, NULL, &err));
        bytes = NULL;
        CHECK_EQ_INT(cr_gguf_writer_write_memory(w, &bytes, &len, &err),
                     CR_E_INVALID);
        CHECK(strstr(err.msg, "'cb'") || strstr(err.msg, "callback"));
        CHECK(bytes == NULL);
        cr_gguf_writer_destroy(&w);
    }
    w = cr_gguf_writer_new();
    CHECK_EQ_INT(cr_gguf_writer_add_tensor_fn(w, "cb", 1, ne_q4, CR_TYPE_Q4_0,
                                              NULL, NULL, NULL, &err),
                 CR_E_INVALID);
    cr_gguf_writer_destroy(&w);
}

/* The writer's bytes for a tiny file, spelled out from the GGUF spec. */
static void test_golden_bytes(void)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    const float data[2] = {1.0f, 2.0f};
    uint64_t ne[] = {2};
    CHECK(!cr_gguf_writer_add_u8(w, "a", 5, &err));
    CHECK(!cr_gguf_writer_add_tensor(w, "t", 1, ne, CR_TYPE_F32, data, NULL,
                                     &err));
    uint8_t want[128] = {0};
    size_t n = 0;
#define PUT(p, len) (memcpy(want + n, (p), (len)), n += (len))
    uint32_t v3 = 3, t_u8 = CR_GGUF_U8, n_dims = 1, t_f32 = CR_TYPE_F32;
    uint64_t one = 1, two = 2, zero = 0;
    uint8_t five = 5;
    PUT("GGUF", 4);
    PUT(&v3, 4);
    PUT(&one, 8); /* tensor_count */
    PUT(&one, 8); /* kv_count */
    PUT(&one, 8);
    PUT("a", 1);
    PUT(&t_u8, 4);
    PUT(&five, 1);
    PUT(&one, 8);
    PUT("t", 1);
    PUT(&n_dims, 4);
    PUT(&two, 8);
    PUT(&t_f32, 4);
    PUT(&zero, 8);
    CHECK_EQ_INT(n, 71);
    n = 96; /* padding to 32 */
    PUT(data, 8);
#undef PUT
    void *bytes = NULL;
    size_t len = 0;
    CHECK(!cr_gguf_writer_write_memory(w, &bytes, &len, &err));
    CHECK_EQ_INT(len, sizeof want);
    CHECK(bytes && len == sizeof want && !memcmp(bytes, want, len));
    cr_gguf_t *g = NULL;
    CHECK(!cr_gguf_open_memory(want, sizeof want, &g, &err));
    if (g) {
        CHECK_EQ_INT(cr_gguf_data_offset(g), 96);
        CHECK(cr_gguf_tensor_at(g, 0)->data == want + 96);
        cr_gguf_close(&g);
    }
    free(bytes);
    cr_gguf_writer_destroy(&w);
}

/* cr_gguf_drop_metadata_pages: a big metadata value (as a large vocabulary
 * is) leaves this process's resident memory, and still reads the same. */
static void test_drop_metadata(void)
{
    char dir[] = "/tmp/test_gguf_drop.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(false, "mkdtemp: %s", strerror(errno));
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    enum { BIG = 512 * 1024 };
    char *big = malloc(BIG + 1);
    for (int i = 0; i < BIG; i++)
        big[i] = (char)('a' + i % 26);
    big[BIG] = '\0';
    static float weights[32];
    uint64_t ne[] = {32};
    cr_err_t err;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    CHECK(!cr_gguf_writer_add_str(w, "general.architecture", "llama", &err));
    CHECK(!cr_gguf_writer_add_str(w, "big", big, &err));
    CHECK(!cr_gguf_writer_add_tensor(w, "w", 1, ne, CR_TYPE_F32, weights, NULL, &err));
    CHECK_MSG(!cr_gguf_writer_write(w, path, &err), "%s", err.msg);
    cr_gguf_writer_destroy(&w);
    cr_gguf_t *g = NULL;
    CHECK_MSG(!cr_gguf_open(path, &g, &err), "%s", err.msg);
    cr_gguf_str_t v = {0};
    if (g && cr_gguf_get_str(g, "big", &v) && v.len == BIG) {
        CHECK(!memcmp(v.ptr, big, BIG)); /* touches every page */
        long before = mapping_rss_kb(v.ptr);
        cr_gguf_drop_metadata_pages(g);
        long after = mapping_rss_kb(v.ptr);
        CHECK_MSG(before >= 500 && after >= 0 && after <= before - 400,
                  "metadata resident %ld kB -> %ld kB", before, after);
        CHECK(!memcmp(v.ptr, big, BIG)); /* read back from the page cache */
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "w");
        CHECK(t && !memcmp(t->data, weights, sizeof weights));
    } else {
        CHECK_MSG(false, "the big value did not read back");
    }
    cr_gguf_close(&g);
    free(big);
    unlink(path);
    rmdir(dir);
}

static void test_file_write(void)
{
    char dir[] = "/tmp/test_gguf.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK_MSG(false, "mkdtemp: %s", strerror(errno));
        return;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    static float weights[32 * 4];
    for (size_t i = 0; i < CR_ARRAY_LEN(weights); i++)
        weights[i] = (float)i * 0.25f;
    uint64_t ne[] = {32, 4};
    CHECK(!cr_gguf_writer_add_str(w, "general.architecture", "llama", &err));
    CHECK(!cr_gguf_writer_add_tensor(w, "w", 2, ne, CR_TYPE_F32, weights,
                                     NULL, &err));
    CHECK_MSG(!cr_gguf_writer_write(w, path, &err), "%s", err.msg);
    /* Overwrite in place: the rename replaces the old file. */
    CHECK(!cr_gguf_writer_add_u32(w, "llama.block_count", 2, &err));
    CHECK_MSG(!cr_gguf_writer_write(w, path, &err), "%s", err.msg);
    cr_gguf_t *g = NULL;
    CHECK_MSG(!cr_gguf_open(path, &g, &err), "%s", err.msg);
    if (g) {
        uint32_t v = 0;
        CHECK(cr_gguf_get_u32(g, "llama.block_count", &v) && v == 2);
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "w");
        CHECK(t && !memcmp(t->data, weights, sizeof weights));
        CHECK(((uintptr_t)t->data % 32) == 0); /* mmap base is page-aligned */
        cr_gguf_close(&g);
    }
    /* Nothing but the file is left in the folder (no temp files). */
    DIR *d = opendir(dir);
    int entries = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.')
            entries++;
    if (d)
        closedir(d);
    CHECK_EQ_INT(entries, 1);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644);

    /* Writing into a missing folder fails with CR_E_IO. */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/nope/model.gguf", dir);
    CHECK_EQ_INT(cr_gguf_writer_write(w, bad, &err), CR_E_IO);
    CHECK(strstr(err.msg, "nope") != NULL);

    /* Open errors: missing file, a folder, an empty file. */
    snprintf(bad, sizeof bad, "%s/missing.gguf", dir);
    CHECK_EQ_INT(cr_gguf_open(bad, &g, &err), CR_E_IO);
    CHECK(g == NULL && strstr(err.msg, "missing.gguf"));
    CHECK_EQ_INT(cr_gguf_open(dir, &g, &err), CR_E_IO);
    snprintf(bad, sizeof bad, "%s/empty.gguf", dir);
    FILE *f = fopen(bad, "wb");
    if (f)
        fclose(f);
    CHECK_EQ_INT(cr_gguf_open(bad, &g, &err), CR_E_TRUNCATED);
    unlink(bad);
    /* Errors from a bad file name the path. */
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    f = fopen(bad, "wb");
    if (f) {
        fwrite("GGUF\x01\0\0\0", 1, 8, f);
        fclose(f);
    }
    CHECK_EQ_INT(cr_gguf_open(bad, &g, &err), CR_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "bad.gguf") && strstr(err.msg, "version 1"),
              "%s", err.msg);
    unlink(bad);
    unlink(path);
    rmdir(dir);
    cr_gguf_writer_destroy(&w);
}

/* 100k lookups among the first n keys of g (about 10 ms: long enough
 * that a preemption cannot multiply it tenfold); returns the seconds
 * taken and counts the hits in *found. */
static double lookups(const cr_gguf_t *g, uint32_t n, int *found)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 0; i < 100000; i++) {
        char key[32];
        uint32_t v = 0;
        snprintf(key, sizeof key, "key.%u", i % n);
        *found += cr_gguf_get_u32(g, key, &v) && v == i % n;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* Many keys: every one is found, and a lookup does not scan them: among
 * 5000 keys it costs about what it costs among the first 50 (a scan would
 * cost ~100 times more). Rounds alternate the two and the medians are
 * compared, so the machine's speed and load do not decide; no duration is
 * asserted. */
static void test_many_keys(void)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    enum { N = 5000, ROUNDS = 9 };
    for (uint32_t i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "key.%u", i);
        CHECK(!cr_gguf_writer_add_u32(w, key, i, &err));
    }
    void *bytes = NULL;
    cr_gguf_t *g = write_and_open(w, &bytes, NULL);
    if (g) {
        int found = 0;
        double few[ROUNDS], many[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            few[r] = lookups(g, 50, &found);
            many[r] = lookups(g, N, &found);
        }
        CHECK_EQ_INT(found, 2 * ROUNDS * 100000);
        for (int i = 0; i < ROUNDS; i++) /* sort both for the medians */
            for (int j = i + 1; j < ROUNDS; j++) {
                double t;
                if (few[j] < few[i])
                    t = few[i], few[i] = few[j], few[j] = t;
                if (many[j] < many[i])
                    t = many[i], many[i] = many[j], many[j] = t;
            }
        double ratio = many[ROUNDS / 2] / few[ROUNDS / 2];
        printf("gguf: 100k lookups among %d keys %.2f ms, among 50 %.2f ms (%.1fx)\n", N,
               many[ROUNDS / 2] * 1e3, few[ROUNDS / 2] * 1e3, ratio);
        CHECK_MSG(ratio < 10, "lookups among %d keys cost %.1fx those among 50: a scan?", N,
                  ratio);
        CHECK(cr_gguf_kv_find(g, "key.5000") == NULL);
        CHECK_EQ_STR(cr_gguf_arch(g), ""); /* no general.architecture */
        cr_gguf_close(&g);
    }
    free(bytes);
    cr_gguf_writer_destroy(&w);
}

/* ---- corrupt inputs --------------------------------------------------- */

/* The base file of the corrupt corpus: every kind of field, tensors whose
 * data ends exactly at the end of the file (so every truncation is wrong). */
static void *base_file(size_t *len)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    const uint32_t u32s[] = {1, 2, 3};
    const char *strs[] = {"a", "bb"};
    static uint8_t q8[34], f32[4 * 8 * 4];
    uint64_t ne_q8[] = {32}, ne_f32[] = {8, 4};
    cr_status_t st = cr_gguf_writer_set_alignment(w, 32, &err);
    st = st ? st : cr_gguf_writer_add_str(w, "general.architecture", "llama", &err);
    st = st ? st : cr_gguf_writer_add_arr(w, "t.nested", CR_GGUF_U32, u32s, 3, &err);
    st = st ? st : cr_gguf_writer_add_str(w, "t.str", "hello", &err);
    st = st ? st : cr_gguf_writer_add_arr_str(w, "t.strs", strs, 2, &err);
    st = st ? st : cr_gguf_writer_add_u32(w, "t.u32", 7, &err);
    st = st ? st : cr_gguf_writer_add_tensor(w, "b.weight", 1, ne_q8, CR_TYPE_Q8_0, q8, NULL, &err);
    st = st ? st : cr_gguf_writer_add_tensor(w, "a.weight", 2, ne_f32, CR_TYPE_F32, f32, NULL, &err);
    void *bytes = NULL;
    st = st ? st : cr_gguf_writer_write_memory(w, &bytes, len, &err);
    CHECK_MSG(st == CR_OK, "base file: %s", err.msg);
    cr_gguf_writer_destroy(&w);
    return bytes;
}

/* Offset just past the first occurrence of a length-prefixed name. */
static size_t after(const uint8_t *b, size_t len, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 8; i + n <= len; i++) {
        uint64_t l;
        memcpy(&l, b + i - 8, 8);
        if (l == n && !memcmp(b + i, name, n))
            return i + n;
    }
    CHECK_MSG(false, "'%s' not in base file", name);
    return 0;
}

static void put32(uint8_t *b, size_t off, uint32_t v) { memcpy(b + off, &v, 4); }
static void put64(uint8_t *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

/* Opens an exact-size heap copy (so ASan sees any over-read). */
static cr_status_t open_copy(const uint8_t *b, size_t len, cr_err_t *err)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return CR_E_NOMEM;
    if (len)
        memcpy(copy, b, len);
    cr_gguf_t *g = NULL;
    cr_err_clear(err);
    cr_status_t st = cr_gguf_open_memory(copy, len, &g, err);
    if (!st) {
        /* Touch everything the handle claims, as a loader would. */
        volatile uint8_t sink = 0;
        for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
            const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
            if (kv->key.len)
                sink ^= (uint8_t)kv->key.ptr[kv->key.len - 1];
            if (kv->type == CR_GGUF_STRING && kv->v.str.len)
                sink ^= (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
            if (kv->type == CR_GGUF_ARRAY && kv->v.arr.type == CR_GGUF_STRING)
                for (uint64_t j = 0; j < kv->v.arr.n; j++)
                    if (kv->v.arr.strs[j].len)
                        sink ^= (uint8_t)kv->v.arr.strs[j].ptr[kv->v.arr.strs[j].len - 1];
            uint64_t u;
            if (kv->type == CR_GGUF_ARRAY && kv->v.arr.n &&
                cr_gguf_arr_get_u64(&kv->v.arr, kv->v.arr.n - 1, &u))
                sink ^= (uint8_t)u;
        }
        for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            if (t->size_bytes)
                sink ^= ((const uint8_t *)t->data)[t->size_bytes - 1];
            CHECK(cr_gguf_tensor_find(g, t->name) == t);
        }
        (void)sink;
        cr_gguf_close(&g);
    }
    free(copy);
    return st;
}

typedef struct corrupt_case {
    const char *name;
    cr_status_t want;
    const char *msg_has; /* substring of the error, or NULL */
} corrupt_case_t;

static void expect(const corrupt_case_t *c, const uint8_t *b, size_t len)
{
    cr_err_t err;
    cr_status_t st = open_copy(b, len, &err);
    CHECK_MSG(st == c->want, "case '%s': status %d (%s), want %d: %s",
              c->name, st, cr_status_str(st), c->want, err.msg);
    if (c->msg_has)
        CHECK_MSG(strstr(err.msg, c->msg_has) != NULL,
                  "case '%s': message \"%s\" lacks \"%s\"", c->name, err.msg,
                  c->msg_has);
}

static void test_corrupt(void)
{
    size_t len = 0;
    uint8_t *base = base_file(&len);
    if (!base)
        return;
    cr_err_t err;
    CHECK_MSG(open_copy(base, len, &err) == CR_OK, "base: %s", err.msg);
    uint8_t *b = malloc(len);
    size_t k_nested = after(base, len, "t.nested");
    size_t k_str = after(base, len, "t.str");
    size_t k_strs = after(base, len, "t.strs");
    size_t k_u32 = after(base, len, "t.u32");
    size_t k_align = after(base, len, "general.alignment");
    size_t t_a = after(base, len, "a.weight");   /* n_dims u32, ne[2], type, off */
    size_t t_b = after(base, len, "b.weight");   /* n_dims u32, ne[1], type, off */
    size_t first_key = 24;                      /* first key's length */

#define CASE(label, want_st, has, mutate)                         \
    do {                                                          \
        memcpy(b, base, len);                                     \
        mutate;                                                   \
        corrupt_case_t c_ = {label, want_st, has};                \
        expect(&c_, b, len);                                      \
    } while (0)

    CASE("bad magic", CR_E_CORRUPT, "magic", b[0] = 'X');
    CASE("version 1", CR_E_UNSUPPORTED, "version 1", put32(b, 4, 1));
    CASE("version 99", CR_E_UNSUPPORTED, "version 99", put32(b, 4, 99));
    CASE("big-endian", CR_E_UNSUPPORTED, "big-endian", put32(b, 4, 3u << 24));
    CASE("version 2 accepted", CR_OK, NULL, put32(b, 4, 2));
    CASE("kv_count 2^60", CR_E_CORRUPT, "kv_count", put64(b, 16, 1ull << 60));
    CASE("tensor_count 2^60", CR_E_CORRUPT, "tensor_count", put64(b, 8, 1ull << 60));
    CASE("kv_count past bytes", CR_E_TRUNCATED, "cannot fit", put64(b, 16, 60000));
    CASE("tensor_count past bytes", CR_E_TRUNCATED, "cannot fit", put64(b, 8, 60000));
    CASE("kv_count one too many", CR_E_CORRUPT, NULL, put64(b, 16, 7));
    CASE("key length over limit", CR_E_CORRUPT, "limit", put64(b, first_key, 1u << 20));
    CASE("key length past end", CR_E_TRUNCATED, "remain", put64(b, first_key, 60000));
    CASE("empty key", CR_E_CORRUPT, "empty", put64(b, first_key, 0));
    CASE("key with NUL", CR_E_CORRUPT, "NUL", b[first_key + 8] = 0);
    CASE("string length past end", CR_E_TRUNCATED, "t.str", put64(b, k_str + 4, 1000000));
    CASE("string length 2^64-1", CR_E_TRUNCATED, "t.str", put64(b, k_str + 4, UINT64_MAX));
    CASE("nested array", CR_E_CORRUPT, "nested", put32(b, k_nested + 4, CR_GGUF_ARRAY));
    CASE("unknown array element type", CR_E_CORRUPT, "element type", put32(b, k_nested + 4, 13));
    CASE("array count over limit", CR_E_CORRUPT, "t.nested", put64(b, k_nested + 8, 1ull << 40));
    CASE("array count past end", CR_E_TRUNCATED, "t.nested", put64(b, k_nested + 8, 100000));
    CASE("string array count past end", CR_E_TRUNCATED, "t.strs", put64(b, k_strs + 8, 100000));
    CASE("string array element past end", CR_E_TRUNCATED, "element 1",
         put64(b, k_strs + 16 + 8 + 1, 1000000));
    CASE("unknown value type", CR_E_CORRUPT, "unknown value type", put32(b, k_u32, 13));
    CASE("value type 2^31", CR_E_CORRUPT, "t.u32", put32(b, k_u32, 1u << 31));
    CASE("duplicate key", CR_E_CORRUPT, "duplicate metadata key 't.str'",
         memcpy(b + k_u32 - 5, "t.str", 5));
    CASE("alignment 0", CR_E_CORRUPT, "alignment", put32(b, k_align + 4, 0));
    CASE("alignment 3", CR_E_CORRUPT, "alignment", put32(b, k_align + 4, 3));
    CASE("alignment not u32", CR_E_CORRUPT, "alignment", put32(b, k_align, CR_GGUF_I32));
    CASE("alignment 64 misplaces data", CR_E_TRUNCATED, NULL, put32(b, k_align + 4, 64));
    CASE("unknown tensor type", CR_E_UNSUPPORTED, "a.weight", put32(b, t_a + 4 + 16, 5));
    CASE("tensor type 2^32-1", CR_E_UNSUPPORTED, "unknown type", put32(b, t_a + 4 + 16, UINT32_MAX));
    CASE("n_dims 0", CR_E_CORRUPT, "0 dimensions", put32(b, t_a, 0));
    CASE("n_dims 5", CR_E_CORRUPT, "5 dimensions", put32(b, t_a, 5));
    CASE("dim 0", CR_E_CORRUPT, "size 0", put64(b, t_a + 4 + 8, 0));
    CASE("element-count overflow", CR_E_CORRUPT, "overflow",
         put64(b, t_a + 4, 1ull << 32); put64(b, t_a + 12, 1ull << 32));
    CASE("row not whole blocks", CR_E_CORRUPT, "block size", put64(b, t_b + 4, 33));
    CASE("tensor offset unaligned", CR_E_CORRUPT, "not a multiple", put64(b, t_a + 24, 4));
    CASE("tensor data past EOF", CR_E_TRUNCATED, "outside the file", put64(b, t_a + 24, 1u << 20));
    CASE("tensor offset 2^63", CR_E_TRUNCATED, "outside the file", put64(b, t_a + 24, 1ull << 63));
    CASE("tensor size past EOF", CR_E_TRUNCATED, "a.weight", put64(b, t_a + 12, 400));
    CASE("tensor data overlap", CR_E_CORRUPT, "overlaps", put64(b, t_a + 24, 0));
    CASE("duplicate tensor name", CR_E_CORRUPT, "duplicate tensor name 'a.weight'",
         memcpy(b + t_b - 8, "a.weight", 8));
    CASE("tensor name over limit", CR_E_CORRUPT, "limit", put64(b, t_b - 16, 300));
    CASE("tensor name with NUL", CR_E_CORRUPT, "NUL", b[t_a - 1] = 0);
#undef CASE

    /* Empty and NULL input. */
    corrupt_case_t empty = {"empty input", CR_E_TRUNCATED, "magic"};
    expect(&empty, base, 0);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(NULL, 0, &g, &err), CR_E_TRUNCATED);
    CHECK_EQ_INT(cr_gguf_open_memory(NULL, 5, &g, &err), CR_E_INVALID);
    CHECK(g == NULL);

    /* Truncated at every byte length: all fail cleanly. */
    int ok_count = 0;
    for (size_t n = 0; n < len; n++) {
        cr_status_t st = open_copy(base, n, &err);
        if (st == CR_OK)
            ok_count++;
        else if (st != CR_E_TRUNCATED && st != CR_E_CORRUPT)
            CHECK_MSG(false, "truncated at %zu: status %d: %s", n, st, err.msg);
    }
    CHECK_EQ_INT(ok_count, 0);

    free(b);
    free(base);
}

/* MXFP4 (17-byte blocks of 32, no f16 field): the size follows its own
 * block geometry, and a tensor whose shape or bytes do not fit is refused
 * naming it: row not whole blocks, one row more than the data holds, the
 * data cut by one byte. (gpt-oss ships its experts in this type.) */
static void test_mxfp4_sizes(void)
{
    const char *name = "blk.0.ffn_gate_exps.weight";
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    static uint8_t data[3 * 34];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7);
    uint64_t ne[] = {64, 3}, ne48[] = {48, 3};
    CHECK_EQ_INT(cr_gguf_writer_add_tensor(w, name, 2, ne48, CR_TYPE_MXFP4, data, NULL, &err),
                 CR_E_INVALID);
    CHECK(strstr(err.msg, name) && strstr(err.msg, "MXFP4 block size 32"));
    cr_status_t st = cr_gguf_writer_set_alignment(w, 32, &err);
    st = st ? st : cr_gguf_writer_add_str(w, "general.architecture", "llama", &err);
    st = st ? st : cr_gguf_writer_add_tensor(w, name, 2, ne, CR_TYPE_MXFP4, data, NULL, &err);
    void *bytes = NULL;
    size_t len = 0;
    st = st ? st : cr_gguf_writer_write_memory(w, &bytes, &len, &err);
    cr_gguf_writer_destroy(&w);
    CHECK_MSG(st == CR_OK, "mxfp4 file: %s", err.msg);
    if (st)
        return;
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    const cr_gguf_tensor_t *t = g ? cr_gguf_tensor_find(g, name) : NULL;
    CHECK(t && t->type == CR_TYPE_MXFP4 && t->size_bytes == 3 * 34 &&
          !memcmp(t->data, data, sizeof data));
    /* where the tensor's bytes end (the file may pad past them) */
    size_t data_end = t ? (size_t)((const uint8_t *)t->data - (const uint8_t *)bytes) + 102 : len;
    cr_gguf_close(&g);

    uint8_t *b = malloc(len);
    size_t t_at = after(bytes, len, name); /* n_dims u32, ne[2], type, off */
    memcpy(b, bytes, len);
    put64(b, t_at + 4, 48);
    CHECK_EQ_INT(open_copy(b, len, &err), CR_E_CORRUPT);
    CHECK_MSG(strstr(err.msg, name) && strstr(err.msg, "MXFP4 block size 32"), "row of 48: %s",
              err.msg);
    memcpy(b, bytes, len);
    put64(b, t_at + 12, 4);
    corrupt_case_t c2 = {"mxfp4 one row too many", CR_E_TRUNCATED, "blk.0.ffn_gate_exps.weight"};
    expect(&c2, b, len);
    corrupt_case_t c3 = {"mxfp4 data cut by a byte", CR_E_TRUNCATED,
                         "blk.0.ffn_gate_exps.weight"};
    expect(&c3, bytes, data_end - 1);
    /* Ollama's first gpt-oss blobs: MXFP4 under the retired Q4_2 id 4. */
    memcpy(b, bytes, len);
    put32(b, t_at + 20, 4);
    g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(b, len, &g, &err), CR_OK);
    t = g ? cr_gguf_tensor_find(g, name) : NULL;
    CHECK_MSG(t && t->type == CR_TYPE_MXFP4 && t->size_bytes == 3 * 34, "type id 4: %s",
              g ? "wrong type or size" : err.msg);
    cr_gguf_close(&g);
    put32(b, t_at + 20, 5); /* the retired Q4_3 stays unknown */
    CHECK_EQ_INT(open_copy(b, len, &err), CR_E_UNSUPPORTED);
    free(b);
    free(bytes);
}

/* xorshift64*: a fixed seed makes every failure reproducible. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static void test_fuzz(void)
{
    size_t len = 0;
    uint8_t *base = base_file(&len);
    if (!base)
        return;
    uint8_t *b = malloc(len);
    size_t header = after(base, len, "a.weight") + 4 + 16 + 4 + 8;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    int opened = 0, refused = 0;
    for (int iter = 0; iter < 5000; iter++) {
        memcpy(b, base, len);
        int flips = 1 + (int)(rng_next(&seed) % 4);
        for (int f = 0; f < flips; f++) {
            /* Three in four land in the header, where the parser looks. */
            size_t span = rng_next(&seed) % 4 ? header : len;
            size_t pos = (size_t)(rng_next(&seed) % span);
            uint64_t r = rng_next(&seed);
            switch (r % 4) {
            case 0: b[pos] ^= (uint8_t)(1u << ((r >> 8) % 8)); break;
            case 1: b[pos] = (uint8_t)(r >> 16); break;
            case 2: b[pos] = 0xff; break;
            default: b[pos] = 0; break;
            }
        }
        size_t n = len;
        if (rng_next(&seed) % 8 == 0)
            n = (size_t)(rng_next(&seed) % len);
        cr_err_t err;
        cr_status_t st = open_copy(b, n, &err);
        if (st == CR_OK) {
            opened++;
        } else {
            refused++;
            CHECK_MSG(err.msg[0] != '\0', "iteration %d: empty message", iter);
        }
    }
    printf("test_gguf: fuzz: %d opened, %d refused\n", opened, refused);
    CHECK(opened + refused == 5000);
    CHECK(refused > 0);
    free(b);
    free(base);
}

/* ---- real files ------------------------------------------------------- */

static void test_transplant(const char *root)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf",
                 root) >= (int)sizeof path)
        return;
    cr_gguf_t *src = NULL;
    cr_err_t err;
    if (cr_gguf_open(path, &src, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        return;
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    CHECK(!cr_gguf_writer_add_str(w, "general.architecture", "llama", &err));
    CHECK(!cr_gguf_writer_copy_prefix(w, src, "tokenizer.", &err));
    CHECK_EQ_INT(cr_gguf_writer_copy_key(w, src, "no.such.key", &err),
                 CR_E_NOT_FOUND);
    void *bytes = NULL;
    cr_gguf_t *g = write_and_open(w, &bytes, NULL);
    if (g) {
        const cr_gguf_array_t *a = NULL, *b = NULL;
        CHECK(cr_gguf_get_arr(src, "tokenizer.ggml.tokens", &a));
        CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &b));
        if (a && b) {
            CHECK_EQ_INT(a->n, 32000);
            CHECK_EQ_INT(b->n, a->n);
            bool same = a->n == b->n;
            for (uint64_t i = 0; same && i < a->n; i++)
                same = a->strs[i].len == b->strs[i].len &&
                       !memcmp(a->strs[i].ptr, b->strs[i].ptr,
                               (size_t)a->strs[i].len);
            CHECK(same);
        }
        CHECK(cr_gguf_get_arr(src, "tokenizer.ggml.scores", &a));
        CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.scores", &b));
        if (a && b)
            CHECK(a->type == CR_GGUF_F32 && b->n == a->n &&
                  !memcmp(a->data, b->data, (size_t)a->n * 4));
        for (size_t i = 0; i < cr_gguf_kv_count(src); i++) {
            const cr_gguf_kv_t *kv = cr_gguf_kv_at(src, i);
            if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10))
                continue;
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            const cr_gguf_kv_t *kv2 = cr_gguf_kv_find(g, key);
            CHECK_MSG(kv2 && kv2->type == kv->type, "%s", key);
        }
        uint32_t bos = 0, bos2 = 1;
        CHECK(cr_gguf_get_u32(src, "tokenizer.ggml.bos_token_id", &bos));
        CHECK(cr_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos2));
        CHECK_EQ_INT(bos, bos2);
        cr_gguf_close(&g);
    }
    free(bytes);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&src);
}

int main(void)
{
    test_drop_metadata();
    test_kv_roundtrip();
    test_tensors();
    test_golden_bytes();
    test_file_write();
    test_many_keys();
    test_corrupt();
    test_mxfp4_sizes();
    test_fuzz();
    test_testdata_files();
    return check_finish("test_gguf");
}
