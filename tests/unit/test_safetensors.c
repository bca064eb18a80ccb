/* test_safetensors.c: lib/safetensors.c over hand-written files: a good file
 * (tensors, dtypes, shapes, offsets, bytes, F16/BF16 widening, metadata), a
 * sharded set checked against an index, and a corpus of hostile files, each
 * refused with the status and a message naming the file and the tensor. */
#include "lib/prelude.h"
#include "lib/safetensors.h"
#include "tests/unit/check.h"

#include <unistd.h>

static char dir_g[] = "/tmp/corral-st-XXXXXX";

/* Writes header (with length prefix hlen, or its true length if hlen is
 * UINT64_MAX) and data_len bytes of data (byte i = i) to dir/name; returns
 * the path (static buffer). */
static const char *write_st(const char *name, const char *header, uint64_t hlen,
                            size_t data_len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir_g, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return path;
    uint64_t n = hlen == UINT64_MAX ? strlen(header) : hlen;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)(n >> (8 * i));
    fwrite(lenb, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i & 0xff), f);
    fclose(f);
    return path;
}

static void test_good(void)
{
    /* a: F32 [2,3] at 0..24; b: F16 [4] at 24..32; c: BF16 [2] at 32..36 */
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[24,32]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"c\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[32,36]},"
        "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[36,36]}}";
    const char *path = write_st("good.safetensors", hdr, UINT64_MAX, 36);
    cr_st_file_t *f = NULL;
    cr_err_t err = {0};
    CHECK_MSG(cr_st_open(path, "good.safetensors", &f, &err) == CR_OK, "%s", err.msg);
    if (!f)
        return;
    CHECK_EQ_INT(cr_st_tensor_count(f), 4);
    CHECK_EQ_STR(cr_st_metadata(f, "format"), "pt");
    CHECK(cr_st_metadata(f, "nope") == NULL);
    const cr_st_tensor_t *a = cr_st_tensor_at(f, 0);
    CHECK_EQ_STR(a->name, "a"); /* offset order, not header order */
    CHECK_EQ_INT(a->dtype, CR_ST_F32);
    CHECK_EQ_INT(a->n_dims, 2);
    CHECK_EQ_INT(a->shape[0], 2);
    CHECK_EQ_INT(a->shape[1], 3);
    CHECK_EQ_INT(a->n_elems, 6);
    CHECK_EQ_INT(a->offset, 8 + strlen(hdr));
    CHECK_EQ_INT(a->size_bytes, 24);
    uint8_t buf[24];
    CHECK(cr_st_read(f, a, buf, sizeof buf, &err) == CR_OK);
    CHECK(buf[0] == 0 && buf[23] == 23);
    CHECK(cr_st_read(f, a, buf, 23, &err) == CR_E_INVALID);

    /* F16 0x0504 and BF16 0x2120 widened exactly (bytes i = i). */
    const cr_st_tensor_t *b = cr_st_tensor_find(f, "b");
    float fb[4];
    CHECK(b && cr_st_read_f32(f, b, fb, 4, &err) == CR_OK);
    /* 0x1918: exponent 6, mantissa 0x118 -> (1 + 0x118/1024) * 2^-9 */
    CHECK(fb[0] == (1.0f + 0x118 / 1024.0f) / 512.0f);
    /* 0x1f1e: exponent 7, mantissa 0x31e */
    CHECK(fb[3] == (1.0f + 0x31e / 1024.0f) / 256.0f);
    const cr_st_tensor_t *c = cr_st_tensor_find(f, "c");
    float fc[2];
    CHECK(c && cr_st_read_f32(f, c, fc, 2, &err) == CR_OK);
    uint32_t bits = 0x21200000u;
    float want;
    memcpy(&want, &bits, 4);
    CHECK(fc[0] == want);
    CHECK(cr_st_tensor_find(f, "zz") == NULL);
    cr_st_close(&f);
    CHECK(f == NULL);
    cr_st_close(&f); /* NULL is fine */
}

static void test_half_special(void)
{
    /* subnormal 0x0001 = 2^-24, inf 0x7c00, -0 0x8000 */
    const char *hdr =
        "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]}}";
    const char *path = write_st("half.safetensors", hdr, UINT64_MAX, 0);
    FILE *fp = fopen(path, "ab");
    const uint8_t d[6] = {0x01, 0x00, 0x00, 0x7c, 0x00, 0x80};
    fwrite(d, 1, 6, fp);
    fclose(fp);
    cr_st_file_t *f = NULL;
    cr_err_t err;
    CHECK(cr_st_open(path, NULL, &f, &err) == CR_OK);
    float v[3];
    if (f && cr_st_read_f32(f, cr_st_tensor_at(f, 0), v, 3, &err) == CR_OK) {
        CHECK(v[0] == ldexpf(1.0f, -24));
        CHECK(isinf(v[1]) && v[1] > 0);
        CHECK(v[2] == 0.0f && signbit(v[2]));
    }
    cr_st_close(&f);
}

typedef struct bad_case {
    const char *name;
    const char *header;
    uint64_t hlen;    /* UINT64_MAX: the header's length */
    size_t data_len;
    cr_status_t want;
    const char *msg;  /* must appear in the error */
} bad_case_t;

static void test_hostile(void)
{
    static const bad_case_t cases[] = {
        {"lying_offsets",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "tensor 'w': data_offsets [0, 16] lie outside"},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         UINT64_MAX, 16, CR_E_CORRUPT, "tensor 'b' overlaps tensor 'a'"},
        {"overlap_past_empty",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         UINT64_MAX, 16, CR_E_CORRUPT, "tensor 'b' overlaps tensor 'a'"},
        {"wrong_size",
         "{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "tensor 'w': 8 bytes of data for 3 F16"},
        {"reversed",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "tensor 'w': data_offsets must be"},
        {"negative_dim",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "tensor 'w': shape[0]"},
        {"overflow_shape",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
         "\"data_offsets\":[0,4]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "tensor 'w': shape overflows"},
        {"dtype_i64",
         "{\"position_ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}",
         UINT64_MAX, 8, CR_E_UNSUPPORTED, "tensor 'position_ids': dtype I64"},
        {"huge_header", "{}", (uint64_t)1 << 40, 0, CR_E_TOO_LARGE,
         "header length 1099511627776 is over the limit"},
        {"header_past_end", "{}", 4096, 0, CR_E_TRUNCATED,
         "header length 4096 but the file has"},
        {"not_json", "{\"w\":", UINT64_MAX, 0, CR_E_CORRUPT, "header is not JSON"},
        {"not_object", "[1, 2]", UINT64_MAX, 0, CR_E_CORRUPT, "not a JSON object"},
        {"duplicate",
         "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         UINT64_MAX, 8, CR_E_CORRUPT, "header is not JSON"},
        {"missing_fields", "{\"w\":{\"dtype\":\"F32\"}}", UINT64_MAX, 0,
         CR_E_CORRUPT, "tensor 'w': needs dtype, shape"},
        {"bad_metadata", "{\"__metadata__\":{\"k\":1}}", UINT64_MAX, 0,
         CR_E_CORRUPT, "__metadata__.k is not a string"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        const bad_case_t *c = &cases[i];
        char fname[64];
        snprintf(fname, sizeof fname, "%s.safetensors", c->name);
        const char *path = write_st(fname, c->header, c->hlen, c->data_len);
        cr_st_file_t *f = NULL;
        cr_err_t err = {0};
        cr_status_t st = cr_st_open(path, fname, &f, &err);
        CHECK_MSG(st == c->want, "%s: status %d, want %d (%s)", c->name, st,
                  c->want, err.msg);
        CHECK_MSG(strstr(err.msg, c->msg) && strstr(err.msg, fname),
                  "%s: message '%s'", c->name, err.msg);
        CHECK(f == NULL);
    }

    /* Truncated: the header is whole but the data section is short. */
    const char *hdr =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}}";
    const char *path = write_st("short.safetensors", hdr, UINT64_MAX, 20);
    cr_st_file_t *f = NULL;
    cr_err_t err = {0};
    CHECK(cr_st_open(path, "short.safetensors", &f, &err) == CR_E_CORRUPT);
    CHECK_MSG(strstr(err.msg, "short.safetensors: tensor 'w'"), "%s", err.msg);
    /* Shorter than the 8-byte length itself. */
    FILE *fp = fopen(path, "wb");
    fwrite("\x10\x00", 1, 2, fp);
    fclose(fp);
    CHECK(cr_st_open(path, "tiny.safetensors", &f, &err) == CR_E_TRUNCATED);
    CHECK(strstr(err.msg, "tiny.safetensors") != NULL);
    CHECK(cr_st_open("/nonexistent/x.safetensors", NULL, &f, &err) == CR_E_IO);

    /* A file that shrinks after open: the read fails, naming the tensor. */
    path = write_st("shrinks.safetensors", hdr, UINT64_MAX, 32);
    CHECK(cr_st_open(path, "shrinks.safetensors", &f, &err) == CR_OK);
    CHECK(truncate(path, 8 + (off_t)strlen(hdr) + 4) == 0);
    float v[8];
    if (f) {
        CHECK(cr_st_read_f32(f, cr_st_tensor_at(f, 0), v, 8, &err) == CR_E_TRUNCATED);
        CHECK_MSG(strstr(err.msg, "shrinks.safetensors") && strstr(err.msg, "tensor 'w'"),
                  "%s", err.msg);
    }
    cr_st_close(&f);
}

static void test_set(void)
{
    const char *h1 = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const char *h2 = "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s", write_st("m-1.safetensors", h1, UINT64_MAX, 4));
    snprintf(p2, sizeof p2, "%s", write_st("m-2.safetensors", h2, UINT64_MAX, 4));
    const char *index =
        "{\"metadata\":{\"total_size\":8},\"weight_map\":"
        "{\"x\":\"m-1.safetensors\",\"y\":\"m-2.safetensors\"}}";
    char **names = NULL;
    size_t n = 0;
    cr_err_t err = {0};
    CHECK(cr_st_index_files(index, strlen(index), "idx", &names, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK_EQ_STR(names[0], "m-1.safetensors");
        CHECK_EQ_STR(names[1], "m-2.safetensors");
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);

    cr_st_set_t *s = cr_st_set_new();
    CHECK(cr_st_set_add_file(s, p1, "m-1.safetensors", &err) == CR_OK);
    CHECK(cr_st_set_add_file(s, p2, "m-2.safetensors", &err) == CR_OK);
    CHECK_EQ_INT(cr_st_set_tensor_count(s), 2);
    const cr_st_file_t *f = NULL;
    const cr_st_tensor_t *t = cr_st_set_find(s, "y", &f);
    CHECK(t && f && !strcmp(cr_st_name(f), "m-2.safetensors"));
    CHECK(cr_st_set_check_index(s, index, strlen(index), "idx", &err) == CR_OK);

    const char *wrong =
        "{\"weight_map\":{\"x\":\"m-2.safetensors\",\"y\":\"m-2.safetensors\"}}";
    CHECK(cr_st_set_check_index(s, wrong, strlen(wrong), "idx", &err) == CR_E_CORRUPT);
    CHECK_MSG(strstr(err.msg, "tensor 'x' is in m-1.safetensors, not m-2"), "%s", err.msg);
    const char *missing = "{\"weight_map\":{\"x\":\"m-1.safetensors\"}}";
    CHECK(cr_st_set_check_index(s, missing, strlen(missing), "idx", &err) == CR_E_CORRUPT);
    CHECK_MSG(strstr(err.msg, "tensor 'y' of m-2.safetensors is not in the weight_map"),
              "%s", err.msg);
    const char *extra =
        "{\"weight_map\":{\"x\":\"m-1.safetensors\",\"y\":\"m-2.safetensors\","
        "\"z\":\"m-3.safetensors\"}}";
    CHECK(cr_st_set_check_index(s, extra, strlen(extra), "idx", &err) == CR_E_CORRUPT);
    CHECK(strstr(err.msg, "tensor 'z' is not in m-3.safetensors") != NULL);
    CHECK(cr_st_index_files("{}", 2, "idx", &names, &n, &err) == CR_E_CORRUPT);
    CHECK(strstr(err.msg, "idx: no weight_map") != NULL);

    /* The same tensor name in two shards. */
    CHECK(cr_st_set_add_file(s, p1, "again.safetensors", &err) == CR_E_EXISTS);
    CHECK_MSG(strstr(err.msg, "again.safetensors: tensor 'x' is also in m-1.safetensors"),
              "%s", err.msg);
    CHECK_EQ_INT(cr_st_set_tensor_count(s), 2);
    cr_st_set_destroy(&s);
    CHECK(s == NULL);
}

/* cr_st_open_ex: an ignored tensor of any dtype is left out of the list
 * but its offsets are still checked; a set with an ignore list skips the
 * name in its index too. */
static void test_ignore(void)
{
    static const char *const ignore[] = {"embeddings.position_ids", NULL};
    const char *hdr =
        "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,2],"
        "\"data_offsets\":[0,16]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}";
    char path[512];
    snprintf(path, sizeof path, "%s", write_st("ign.safetensors", hdr, UINT64_MAX, 24));
    cr_st_file_t *f = NULL;
    cr_err_t err = {0};
    CHECK(cr_st_open(path, "ign.safetensors", &f, &err) == CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "tensor 'embeddings.position_ids': dtype I64") != NULL);
    CHECK_MSG(cr_st_open_ex(path, "ign.safetensors", ignore, &f, &err) == CR_OK, "%s",
              err.msg);
    CHECK(f && cr_st_tensor_count(f) == 1 && cr_st_tensor_find(f, "w") &&
          !cr_st_tensor_find(f, "embeddings.position_ids"));
    cr_st_close(&f);

    const char *bad[] = {
        /* overlaps w */
        "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,2],"
        "\"data_offsets\":[0,20]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
        /* past the data */
        "{\"embeddings.position_ids\":{\"dtype\":\"I64\",\"shape\":[1,2],"
        "\"data_offsets\":[0,99]},"
        "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
    };
    const char *want[] = {"tensor 'w' overlaps tensor 'embeddings.position_ids'",
                          "tensor 'embeddings.position_ids': data_offsets are not"};
    for (int i = 0; i < 2; i++) {
        const char *p = write_st("ign-bad.safetensors", bad[i], UINT64_MAX, 24);
        CHECK(cr_st_open_ex(p, "ign-bad.safetensors", ignore, &f, &err) == CR_E_CORRUPT);
        CHECK_MSG(strstr(err.msg, want[i]), "%s", err.msg);
    }

    cr_st_set_t *s = cr_st_set_new();
    cr_st_set_ignore(s, ignore);
    CHECK(cr_st_set_add_file(s, path, "ign.safetensors", &err) == CR_OK);
    const char *index = "{\"weight_map\":{\"w\":\"ign.safetensors\","
                        "\"embeddings.position_ids\":\"ign.safetensors\"}}";
    CHECK_MSG(cr_st_set_check_index(s, index, strlen(index), "idx", &err) == CR_OK, "%s",
              err.msg);
    cr_st_set_destroy(&s);
}

/* Name lookup across files: every tensor of 3 files of 300 found at its
 * index, an absent name gives SIZE_MAX. */
static void test_many(void)
{
    cr_st_set_t *s = cr_st_set_new();
    cr_err_t err = {0};
    for (int fi = 0; fi < 3; fi++) {
        char hdr[40000], name[32];
        size_t o = (size_t)snprintf(hdr, sizeof hdr, "{");
        for (int i = 0; i < 300; i++)
            o += (size_t)snprintf(hdr + o, sizeof hdr - o,
                                  "%s\"t%d.%d\":{\"dtype\":\"F32\",\"shape\":[1],"
                                  "\"data_offsets\":[%d,%d]}",
                                  i ? "," : "", fi, i, 4 * i, 4 * i + 4);
        snprintf(hdr + o, sizeof hdr - o, "}");
        snprintf(name, sizeof name, "f%d.safetensors", fi);
        const char *path = write_st(name, hdr, UINT64_MAX, 1200);
        CHECK_MSG(cr_st_set_add_file(s, path, name, &err) == CR_OK, "%s", err.msg);
    }
    CHECK_EQ_INT(cr_st_set_tensor_count(s), 900);
    int found = 0;
    for (int fi = 0; fi < 3; fi++)
        for (int i = 0; i < 300; i++) {
            char n[32];
            snprintf(n, sizeof n, "t%d.%d", fi, i);
            size_t idx = cr_st_set_index_of(s, n);
            const cr_st_tensor_t *t = idx == SIZE_MAX ? NULL : cr_st_set_tensor_at(s, idx, NULL);
            found += t && !strcmp(t->name, n);
        }
    CHECK_EQ_INT(found, 900);
    CHECK(cr_st_set_index_of(s, "t9.9") == SIZE_MAX);
    CHECK(cr_st_set_find(s, "t3.0", NULL) == NULL);
    cr_st_set_destroy(&s);
}

int main(void)
{
    if (!mkdtemp(dir_g)) {
        perror("mkdtemp");
        return 1;
    }
    test_good();
    test_half_special();
    test_hostile();
    test_set();
    test_ignore();
    test_many();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir_g);
    return check_finish("test_safetensors");
}
