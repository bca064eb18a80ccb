/* test_registry_format.c: the registry's Go-compatible text: JSON floats
 * and strings, fmt %v/%#v values, Modelfile quoting, /api/show's
 * parameters text, parameter validation and conversions, human parameter
 * counts and times. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "proto/msg.h"
#include "services/registry/ggufinfo.h"
#include "services/registry/gojson.h"
#include "services/registry/params.h"
#include "services/registry/show.h"
#include "tests/unit/check.h"

#include <jansson.h>
#include <math.h>
#include <time.h>

static void check_float(double v, int bits, reg_float_style_t style,
                        const char *want)
{
    char buf[64];
    reg_gojson_float(v, bits, style, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, want), "%.17g (%d, %s): got '%s', want '%s'", v, bits,
              style == REG_FLOAT_JSON ? "json" : "fmt", buf, want);
}

static void test_floats(void)
{
    /* encoding/json */
    check_float(0.6, 64, REG_FLOAT_JSON, "0.6");
    check_float(1e-5, 64, REG_FLOAT_JSON, "0.00001");
    check_float(1e-6, 64, REG_FLOAT_JSON, "0.000001");
    check_float(1e-7, 64, REG_FLOAT_JSON, "1e-7");
    check_float(1.5e-10, 64, REG_FLOAT_JSON, "1.5e-10");
    check_float(500000, 64, REG_FLOAT_JSON, "500000");
    check_float(123456789, 64, REG_FLOAT_JSON, "123456789");
    check_float(1e20, 64, REG_FLOAT_JSON, "100000000000000000000");
    check_float(1e21, 64, REG_FLOAT_JSON, "1e+21");
    check_float(1.5e300, 64, REG_FLOAT_JSON, "1.5e+300");
    check_float(-0.5, 64, REG_FLOAT_JSON, "-0.5");
    check_float(0, 64, REG_FLOAT_JSON, "0");
    check_float(0.1 + 0.2, 64, REG_FLOAT_JSON, "0.30000000000000004");
    check_float((double)1e-5f, 32, REG_FLOAT_JSON, "0.00001");
    check_float((double)0.1f, 32, REG_FLOAT_JSON, "0.1");
    check_float((double)0.1f, 64, REG_FLOAT_JSON, "0.10000000149011612");
    check_float(NAN, 64, REG_FLOAT_JSON, "null");
    check_float(INFINITY, 64, REG_FLOAT_JSON, "null");
    /* fmt %v */
    check_float(4096, 64, REG_FLOAT_FMT, "4096");
    check_float(123456, 64, REG_FLOAT_FMT, "123456");
    check_float(1e6, 64, REG_FLOAT_FMT, "1e+06");
    check_float(1234567, 64, REG_FLOAT_FMT, "1.234567e+06");
    check_float(0.0001, 64, REG_FLOAT_FMT, "0.0001");
    check_float(0.00001, 64, REG_FLOAT_FMT, "1e-05");
    check_float(0.6, 64, REG_FLOAT_FMT, "0.6");
    check_float(1.1, 64, REG_FLOAT_FMT, "1.1");
    check_float(-2.5, 64, REG_FLOAT_FMT, "-2.5");
    check_float(1e100, 64, REG_FLOAT_FMT, "1e+100");
    check_float(NAN, 64, REG_FLOAT_FMT, "NaN");
    check_float(-INFINITY, 64, REG_FLOAT_FMT, "-Inf");
}

static char *dump(const json_t *v)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    cr_status_t st = reg_gojson_dump(v, &b);
    CHECK(st == CR_OK);
    return cr_buf_steal(&b);
}

static void test_json(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "z", json_integer(1));
    json_object_set_new(o, "a", json_real(0.25));
    json_object_set_new(o, "s", json_string("<a & b>\n\"q\"\\\x01\xe2\x80\xa8\xc3\xa9"));
    json_t *arr = json_array();
    json_array_append_new(arr, json_true());
    json_array_append_new(arr, json_false());
    json_array_append_new(arr, json_null());
    json_array_append_new(arr, json_object());
    json_object_set_new(o, "arr", arr);
    char *s = dump(o);
    CHECK_EQ_STR(s, "{\"z\":1,\"a\":0.25,\"s\":\"\\u003ca \\u0026 b\\u003e\\n\\\"q\\\"\\\\\\u0001"
                    "\\u2028\xc3\xa9\",\"arr\":[true,false,null,{}]}");
    free(s);
    json_decref(o);

    /* bytes that are not UTF-8 (GGUF strings may hold any) */
    json_t *bad = json_stringn_nocheck("a\xff" "b", 3);
    s = dump(bad);
    CHECK_EQ_STR(s, "\"a\\ufffdb\"");
    free(s);
    json_decref(bad);

    /* nesting past the limit is refused and leaves the buffer as it was */
    json_t *deep = json_array();
    json_t *cur = deep;
    for (int i = 0; i < 80; i++) {
        json_t *next = json_array();
        json_array_append_new(cur, next);
        cur = next;
    }
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    cr_buf_puts(&b, "keep");
    CHECK(reg_gojson_dump(deep, &b) == CR_E_INVALID);
    CHECK_EQ_STR(b.data, "keep");
    cr_buf_free(&b);
    json_decref(deep);

    /* a capped buffer fails cleanly */
    cr_buf_init(&b, 4);
    json_t *str = json_string("longer than four");
    CHECK(reg_gojson_dump(str, &b) == CR_E_TOO_LARGE);
    cr_buf_free(&b);
    cr_buf_init(&b, 64);
    CHECK(reg_gojson_dump_line(str, &b) == CR_OK);
    CHECK_EQ_STR(b.data, "\"longer than four\"\n");
    cr_buf_free(&b);
    json_decref(str);
}

static char *go_text(const json_t *v, bool sharp)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    CHECK(reg_go_value(v, sharp, &b) == CR_OK);
    return cr_buf_steal(&b);
}

static void test_go_values(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 1024);
    CHECK(reg_go_quote("a\"b\\c\n\t\x01\x7f\xc3\xa9\xff", 12, &b) == CR_OK);
    CHECK_EQ_STR(b.data, "\"a\\\"b\\\\c\\n\\t\\x01\\x7f\xc3\xa9\\xff\"");
    cr_buf_free(&b);

    json_t *v = json_string("<|eot_id|>");
    char *s = go_text(v, false);
    CHECK_EQ_STR(s, "<|eot_id|>");
    free(s);
    s = go_text(v, true);
    CHECK_EQ_STR(s, "\"<|eot_id|>\"");
    free(s);
    json_decref(v);
    v = json_integer(40);
    s = go_text(v, true);
    CHECK_EQ_STR(s, "40");
    free(s);
    json_decref(v);
    v = json_real(1.0);
    s = go_text(v, true);
    CHECK_EQ_STR(s, "1");
    free(s);
    json_decref(v);
    v = json_true();
    s = go_text(v, false);
    CHECK_EQ_STR(s, "true");
    free(s);
    v = json_null();
    s = go_text(v, false);
    CHECK_EQ_STR(s, "<nil>");
    free(s);
    v = json_pack("[s,i]", "a", 2);
    s = go_text(v, false);
    CHECK_EQ_STR(s, "[a 2]");
    free(s);
    s = go_text(v, true);
    CHECK_EQ_STR(s, "[]interface {}{\"a\", 2}");
    free(s);
    json_decref(v);
}

static char *mf_quote(const char *v)
{
    cr_buf_t b;
    cr_buf_init(&b, 1024);
    CHECK(reg_modelfile_quote(v, &b) == CR_OK);
    char *s = cr_buf_steal(&b);
    return s;
}

static void test_modelfile_quote(void)
{
    struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"", ""},
        {"has \"quotes\" only", "has \"quotes\" only"},
        {"two\nlines", "\"two\nlines\""},
        {" lead", "\" lead\""},
        {"trail ", "\"trail \""},
        {"say \"hi\"\nthen", "\"\"\"say \"hi\"\nthen\"\"\""},
        {" \"edge\"", "\"\"\" \"edge\"\"\"\""},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        char *s = mf_quote(cases[i].in);
        CHECK_MSG(!strcmp(s, cases[i].out), "'%s' -> '%s'", cases[i].in, s);
        free(s);
    }
}

typedef struct warned {
    char keys[8][32];
    char whys[8][16];
    int n;
} warned_t;

static void on_warn(void *ctx, const char *key, const char *why)
{
    warned_t *w = ctx;
    if (w->n < 8) {
        snprintf(w->keys[w->n], sizeof w->keys[0], "%s", key);
        snprintf(w->whys[w->n], sizeof w->whys[0], "%s", why);
        w->n++;
    }
}

static void test_params(void)
{
    json_t *in = json_loads("{\"top_k\":2.7,\"top_p\":1,\"stop\":\"one\",\"seed\":null,"
                            "\"use_mmap\":false,\"mirostat\":2,\"frobnicate\":1,"
                            "\"num_predict\":-1,\"draft_num_predict\":3}",
                            0, NULL);
    json_t *out = NULL;
    cr_err_t err;
    warned_t w = {0};
    CHECK(reg_params_validate(in, on_warn, &w, &out, &err) == CR_OK);
    char *s = dump(out);
    CHECK_EQ_STR(s, "{\"draft_num_predict\":3,\"num_predict\":-1,\"stop\":[\"one\"],"
                    "\"top_k\":2,\"top_p\":1,\"use_mmap\":false}");
    free(s);
    CHECK_EQ_INT(w.n, 2);
    for (int i = 0; i < w.n; i++) {
        if (!strcmp(w.keys[i], "mirostat"))
            CHECK_EQ_STR(w.whys[i], "deprecated");
        else
            CHECK(!strcmp(w.keys[i], "frobnicate") && !strcmp(w.whys[i], "unknown"));
    }
    /* show text: sorted, padded to 30, %#v values, one line per stop */
    cr_buf_t b;
    cr_buf_init(&b, 4096);
    CHECK(reg_params_show_text(out, &b) == CR_OK);
    CHECK_EQ_STR(b.data, "draft_num_predict              3\n"
                         "num_predict                    -1\n"
                         "stop                           \"one\"\n"
                         "top_k                          2\n"
                         "top_p                          1\n"
                         "use_mmap                       false");
    cr_buf_free(&b);
    cr_buf_init(&b, 4096);
    CHECK(reg_params_show_text(NULL, &b) == CR_OK);
    CHECK(b.len == 0);
    cr_buf_free(&b);

    /* to the bus record and back */
    msg_t m;
    msg_init(&m, MSG_resolved, "x");
    msg_options_t o;
    CHECK(reg_params_to_options(out, &o, &m) == CR_OK);
    CHECK(o.has_top_k && o.top_k == 2);
    CHECK(o.has_top_p && o.top_p == 1.0);
    CHECK(o.has_use_mmap && !o.use_mmap);
    CHECK(o.has_num_predict && o.num_predict == -1);
    CHECK(o.has_stop && o.stop.n == 1 && !strcmp(o.stop.v[0], "one"));
    CHECK(!o.has_seed && !o.has_temperature);
    json_t *back = reg_params_from_options(&o);
    s = dump(back);
    CHECK_EQ_STR(s, "{\"draft_num_predict\":3,\"num_predict\":-1,"
                    "\"stop\":[\"one\"],\"top_k\":2,\"top_p\":1,"
                    "\"use_mmap\":false}");
    free(s);
    json_decref(back);
    msg_clear(&m);

    /* merge: src wins, keys stay sorted */
    json_t *dst = json_loads("{\"temperature\":0.5,\"top_k\":20}", 0, NULL);
    json_t *src = json_loads("{\"temperature\":0.9,\"stop\":[\"x\"]}", 0, NULL);
    CHECK(reg_params_merge(dst, src) == CR_OK);
    s = dump(dst);
    CHECK_EQ_STR(s, "{\"stop\":[\"x\"],\"temperature\":0.9,\"top_k\":20}");
    free(s);
    json_decref(dst);
    json_decref(src);
    json_decref(out);
    json_decref(in);

    /* bad types */
    struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"temperature\":\"hot\"}", "option \"temperature\" must be of type float32"},
        {"{\"num_ctx\":\"4096\"}", "option \"num_ctx\" must be of type integer"},
        {"{\"num_ctx\":1e300}", "option \"num_ctx\" must be of type integer"},
        {"{\"use_mmap\":\"yes\"}", "option \"use_mmap\" must be of type boolean"},
        {"{\"stop\":{}}", "option \"stop\" must be of type array"},
        {"{\"stop\":[null]}", "option \"stop\" must be of an array of strings"},
        {"[]", "parameters must be an object"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        in = json_loads(bad[i].json, 0, NULL);
        out = NULL;
        CHECK(reg_params_validate(in, NULL, NULL, &out, &err) == CR_E_INVALID);
        CHECK_EQ_STR(err.msg, bad[i].msg);
        CHECK(out == NULL);
        json_decref(in);
    }
    /* too many stops */
    json_t *many = json_object();
    json_t *arr = json_array();
    for (int i = 0; i < REG_PARAMS_MAX_STOP + 1; i++)
        json_array_append_new(arr, json_string("s"));
    json_object_set_new(many, "stop", arr);
    CHECK(reg_params_validate(many, NULL, NULL, &out, &err) == CR_E_INVALID);
    json_decref(many);
    /* NULL in: an empty object */
    CHECK(reg_params_validate(NULL, NULL, NULL, &out, &err) == CR_OK);
    CHECK(json_object_size(out) == 0);
    json_decref(out);
}

static void test_human_and_time(void)
{
    char buf[32];
    CHECK_EQ_STR(reg_human_number(7615616512ull, buf, sizeof buf), "7.6B");
    CHECK_EQ_STR(reg_human_number(8000000000ull, buf, sizeof buf), "8B");
    CHECK_EQ_STR(reg_human_number(137500000ull, buf, sizeof buf), "137.50M");
    CHECK_EQ_STR(reg_human_number(1000000ull, buf, sizeof buf), "1M");
    CHECK_EQ_STR(reg_human_number(260123ull, buf, sizeof buf), "260K");
    CHECK_EQ_STR(reg_human_number(1500ull, buf, sizeof buf), "2K");
    CHECK_EQ_STR(reg_human_number(999ull, buf, sizeof buf), "999");
    CHECK_EQ_STR(reg_human_number(0ull, buf, sizeof buf), "0");

    setenv("TZ", "UTC", 1);
    tzset();
    char t[48];
    reg_go_time((struct timespec){1700000000, 500000000}, t, sizeof t);
    CHECK_EQ_STR(t, "2023-11-14T22:13:20.5Z");
    reg_go_time((struct timespec){1700000000, 0}, t, sizeof t);
    CHECK_EQ_STR(t, "2023-11-14T22:13:20Z");
    reg_go_time((struct timespec){1700000000, 123456789}, t, sizeof t);
    CHECK_EQ_STR(t, "2023-11-14T22:13:20.123456789Z");
    setenv("TZ", "EST5", 1);
    tzset();
    reg_go_time((struct timespec){1700000000, 1000}, t, sizeof t);
    CHECK_EQ_STR(t, "2023-11-14T17:13:20.000001-05:00");
    setenv("TZ", "UTC", 1);
    tzset();
}

/* Builds a GGUF in memory with the given tensors (types, ne0 x ne1). */
static cr_gguf_t *gguf_with(bool file_type, const cr_type_t *types,
                            const uint64_t (*ne)[2], size_t n, void **mem)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    static uint8_t zeros[1 << 16];
    cr_gguf_writer_add_str(w, "general.architecture", "llama", &err);
    if (file_type)
        cr_gguf_writer_add_u32(w, "general.file_type", 15, &err);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%zu", i);
        uint32_t dims = ne[i][1] > 1 ? 2 : 1;
        CHECK(cr_gguf_writer_add_tensor(w, name, dims, ne[i], types[i], zeros,
                                        NULL, &err) == CR_OK);
    }
    size_t len;
    CHECK(cr_gguf_writer_write_memory(w, mem, &len, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open_memory(*mem, len, &g, &err) == CR_OK);
    return g;
}

static void test_gguf_info(void)
{
    const cr_type_t types[] = {CR_TYPE_F32, CR_TYPE_Q8_0, CR_TYPE_F16, CR_TYPE_F32};
    const uint64_t ne[][2] = {{64, 1}, {64, 64}, {32, 32}, {4096, 1}};
    void *mem = NULL;
    /* no general.file_type: the 2-D majority type (the big F32 vector does
     * not count) */
    cr_gguf_t *g = gguf_with(false, types, ne, 4, &mem);
    if (g) {
        CHECK_EQ_STR(reg_gguf_file_type(g), "Q8_0");
        CHECK_EQ_INT(reg_gguf_param_count(g), 64 + 4096 + 1024 + 4096);
        CHECK_EQ_STR(reg_gguf_family(g), "llama");
        CHECK_EQ_STR(reg_gguf_media_type(g), "application/vnd.ollama.image.model");
        CHECK(!reg_gguf_is_embedding(g) && !reg_gguf_has_vision(g));
        cr_gguf_close(&g);
    }
    free(mem);
    g = gguf_with(true, types, ne, 4, &mem);
    if (g) {
        CHECK_EQ_STR(reg_gguf_file_type(g), "Q4_K_M");
        cr_gguf_close(&g);
    }
    free(mem);
    /* media types: a standalone vision model is a projector, general.type
     * adapter an adapter; pooling_type makes an embedding model */
    const char *kinds[][4] = {
        {"clip", "clip.vision.block_count", "", "application/vnd.ollama.image.projector"},
        {"llama", "llama.block_count", "adapter", "application/vnd.ollama.image.adapter"},
        {"llama", "llama.vision.block_count", "", "application/vnd.ollama.image.projector"},
        {"llama", "llama.pooling_type", "", "application/vnd.ollama.image.model"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(kinds); i++) {
        cr_gguf_writer_t *w = cr_gguf_writer_new();
        cr_err_t err;
        cr_gguf_writer_add_str(w, "general.architecture", kinds[i][0], &err);
        cr_gguf_writer_add_u32(w, kinds[i][1], 12, &err);
        if (kinds[i][2][0])
            cr_gguf_writer_add_str(w, "general.type", kinds[i][2], &err);
        size_t len;
        void *m2 = NULL;
        CHECK(cr_gguf_writer_write_memory(w, &m2, &len, &err) == CR_OK);
        cr_gguf_writer_destroy(&w);
        cr_gguf_t *k = NULL;
        CHECK(cr_gguf_open_memory(m2, len, &k, &err) == CR_OK);
        if (k) {
            CHECK_EQ_STR(reg_gguf_media_type(k), kinds[i][3]);
            CHECK(reg_gguf_is_embedding(k) == (i == 3));
            CHECK(reg_gguf_has_vision(k) == (i == 0 || i == 2));
            cr_gguf_close(&k);
        }
        free(m2);
    }
    g = gguf_with(false, types, ne, 1, &mem); /* only a vector */
    if (g) {
        CHECK_EQ_STR(reg_gguf_file_type(g), "unknown");
        cr_gguf_close(&g);
    }
    free(mem);
}

int main(void)
{
    test_floats();
    test_json();
    test_go_values();
    test_modelfile_quote();
    test_params();
    test_human_and_time();
    test_gguf_info();
    return check_finish("test_registry_format");
}
