/* test_hf_import.c: the safetensors import (services/registry/hf_import.c,
 * hf_vocab.c) without downloads. corral-gguf-to-hf writes a Hugging Face
 * folder from a GGUF (stories260K, tiny-spm-f16 from the shared testdata;
 * synthetic llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3 and bert
 * models), reg_hf_import converts it back, and:
 *  - the logits of both files are bit-identical for every position of a
 *    prompt (F32 and F16 tensors are copied, Q/K rows permuted and back:
 *    nothing is rounded, so no tolerance);
 *  - the vocab test strings of testdata/vocab tokenize the same through the
 *    original vocabulary and the one rebuilt from tokenizer.json
 *    (llama-spm, phi-3, gpt-2, llama-bpe, bert-bge);
 *  - two facts checked apart from the round trip: llama's Q rows are
 *    permuted as llama.cpp does, gemma's norms are stored as 1 + w;
 *  - the chat template comes through (from tokenizer_config.json, or from
 *    chat_template.jinja for the MoE model);
 *  - bad folders fail naming the file and tensor, leaving no output file.
 * Needs $CORRAL_BUILD_DIR/bin/corral-gguf-to-hf (skips without); the
 * testdata parts skip without CORRAL_TESTDATA. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/safetensors.h"
#include "services/registry/hf_config.h"
#include "services/registry/hf_import.h"
#include "services/registry/hf_vocab.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/text/tokenizer.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/forward_check.h"

#include <dirent.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static be_backend_t *be_g;
static char tmp_g[] = "/tmp/corral-hfimport-XXXXXX";
static char tool_g[1024];

typedef struct folder {
    char names[16][256];
    char paths[16][1024];
    reg_hf_file_t files[16];
    size_t n;
} folder_t;

static void folder_read(folder_t *f, const char *dir)
{
    f->n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && f->n < 16) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(f->names[f->n], sizeof f->names[0], "%s", e->d_name);
        snprintf(f->paths[f->n], sizeof f->paths[0], "%s/%s", dir, e->d_name);
        f->files[f->n] = (reg_hf_file_t){f->names[f->n], f->paths[f->n]};
        f->n++;
    }
    if (d)
        closedir(d);
}

static bool run_tool(const char *gguf, const char *dir, const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' %s", tool_g, gguf, dir, extra ? extra : "");
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "%s failed (%d)", cmd, rc);
    return rc == 0;
}

/* Logits of every position of toks through the model at path (*count =
 * n_vocab * n), or for an encoder its unnormalized mean-pooled embedding
 * (*count = dim); NULL (and a failed check) on error. */
static float *logits_of(const char *path, const int32_t *toks, int n, size_t *count)
{
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    if (cr_gguf_open(path, &g, &err) || rn_model_load_gguf(&g, be_g, &m, &err)) {
        CHECK_MSG(false, "%s: %s", path, err.msg);
        cr_gguf_close(&g);
        return NULL;
    }
    const rn_hparams_t *hp = rn_model_hparams(m);
    bool encoder = !strcmp(hp->arch, "bert");
    *count = encoder ? (size_t)hp->dim : (size_t)hp->n_vocab * (size_t)n;
    rn_ctx_t *c = new_ctx(m, 64, 0);
    float *out = calloc(*count, sizeof *out);
    cr_status_t st = !c || !out ? CR_E_NOMEM
                     : encoder  ? rn_ctx_embed(c, toks, n, false, out, &err)
                                : rn_ctx_eval(c, toks, n, 0, out, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", path, err.msg);
    if (st) {
        free(out);
        out = NULL;
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    return out;
}

/* The Q rows of the imported GGUF are llama.cpp's permutation of the
 * Hugging Face rows (stated here, independently of both converters): in
 * each head of hd rows, GGUF row 2i + j is HF row j * hd/2 + i, so the
 * first head's GGUF rows 0, 1, 2, 3 are HF rows 0, hd/2, 1, hd/2 + 1. */
static void check_q_permutation(const char *dir, const char *gguf, int hd)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_st_file_t *f = NULL;
    cr_gguf_t *g = NULL;
    cr_err_t err;
    if (cr_st_open(path, NULL, &f, &err) || cr_gguf_open(gguf, &g, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        cr_st_close(&f);
        return;
    }
    const cr_st_tensor_t *t = cr_st_tensor_find(f, "model.layers.0.self_attn.q_proj.weight");
    const cr_gguf_tensor_t *q = cr_gguf_tensor_find(g, "blk.0.attn_q.weight");
    CHECK(t && q && t->dtype == CR_ST_F32 && q->type == CR_TYPE_F32);
    if (t && q) {
        size_t cols = (size_t)t->shape[1];
        float *hf = malloc(t->size_bytes);
        CHECK(cr_st_read(f, t, hf, (size_t)t->size_bytes, &err) == CR_OK);
        const float *gg = q->data;
        const int want[4] = {0, hd / 2, 1, hd / 2 + 1};
        for (int r = 0; r < 4; r++)
            CHECK_MSG(!memcmp(gg + (size_t)r * cols, hf + (size_t)want[r] * cols,
                              cols * sizeof(float)),
                      "GGUF attn_q row %d is not HF row %d", r, want[r]);
        /* and the permutation is not the identity */
        CHECK(memcmp(gg + cols, hf + cols, cols * sizeof(float)) != 0);
        free(hf);
    }
    cr_st_close(&f);
    cr_gguf_close(&g);
}

/* Gemma's RMSNorm weights: Hugging Face holds w (near 0; the model
 * multiplies by 1 + w), llama.cpp's GGUF holds 1 + w. */
static void check_gemma_norm(const char *dir, const char *gguf)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_st_file_t *f = NULL;
    cr_gguf_t *g = NULL;
    cr_err_t err;
    if (cr_st_open(path, NULL, &f, &err) || cr_gguf_open(gguf, &g, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        cr_st_close(&f);
        return;
    }
    const cr_st_tensor_t *t = cr_st_tensor_find(f, "model.layers.0.input_layernorm.weight");
    const cr_gguf_tensor_t *n = cr_gguf_tensor_find(g, "blk.0.attn_norm.weight");
    CHECK(t && n && n->type == CR_TYPE_F32 && t->n_elems == n->n_elems);
    if (t && n && t->n_elems == n->n_elems) {
        float hf[256];
        CHECK(t->n_elems <= 256 && cr_st_read_f32(f, t, hf, 256, &err) == CR_OK);
        double mean_abs = 0;
        bool plus_one = true;
        for (uint64_t i = 0; i < t->n_elems && i < 256; i++) {
            float v;
            memcpy(&v, (const char *)n->data + 4 * i, 4);
            plus_one &= v == hf[i] + 1.0f;
            mean_abs += fabs(hf[i]) / (double)t->n_elems;
        }
        CHECK_MSG(plus_one, "GGUF attn_norm is not 1 + the HF weight");
        CHECK_MSG(mean_abs < 0.5, "HF gemma norm weights average |w| %.3f", mean_abs);
    }
    cr_st_close(&f);
    cr_gguf_close(&g);
}

static void roundtrip(const char *label, const char *gguf, const char *extra)
{
    char dir[1200], out[1300];
    snprintf(dir, sizeof dir, "%s/%s", tmp_g, label);
    snprintf(out, sizeof out, "%s/%s.gguf", tmp_g, label);
    if (!run_tool(gguf, dir, extra))
        return;
    folder_t f;
    folder_read(&f, dir);
    cr_err_t err;
    cr_err_clear(&err);
    char arch[32] = "";
    cr_status_t st = reg_hf_import(f.files, f.n, out, arch, sizeof arch, NULL, NULL, &err);
    CHECK_MSG(st == CR_OK, "%s: import: %s", label, err.msg);
    if (st)
        return;
    cr_gguf_t *ga = NULL, *gb = NULL;
    cr_gguf_str_t ta = {0}, tb = {0};
    if (!cr_gguf_open(gguf, &ga, &err) && !cr_gguf_open(out, &gb, &err)) {
        bool ha = cr_gguf_get_str(ga, "tokenizer.chat_template", &ta);
        bool hb = cr_gguf_get_str(gb, "tokenizer.chat_template", &tb);
        CHECK_MSG(ha == hb && ta.len == tb.len && (!ha || !memcmp(ta.ptr, tb.ptr, ta.len)),
                  "%s: chat template not carried over", label);
        uint32_t fa = 0, fb = 0;
        if (cr_gguf_get_u32(ga, "general.file_type", &fa))
            CHECK_MSG(cr_gguf_get_u32(gb, "general.file_type", &fb) && fa == fb,
                      "%s: file type %u, source %u", label, fb, fa);
    }
    cr_gguf_close(&ga);
    cr_gguf_close(&gb);
    const int32_t toks[] = {1, 5, 17, 200, 33, 90, 250, 7, 3, 120, 64, 11};
    int n = (int)CR_ARRAY_LEN(toks);
    size_t va = 0, vb = 0;
    float *a = logits_of(gguf, toks, n, &va), *b = logits_of(out, toks, n, &vb);
    CHECK_MSG(a && b && va == vb && same(a, b, va),
              "%s: logits differ after the round trip", label);
    CHECK_MSG(a && all_finite(a, va), "%s: non-finite logits", label);
    printf("  %-14s %s, %zu %s bit-identical\n", label, arch, va,
           strcmp(arch, "bert") ? "logits" : "embedding values");
    if (!strcmp(label, "synth-llama"))
        check_q_permutation(dir, out, 16); /* dim 64 / 4 heads */
    if (!strcmp(label, "synth-gemma2"))
        check_gemma_norm(dir, out);
    free(a);
    free(b);
}

static void synth_roundtrip_opts(const char *label, rn_synth_opts_t o, const char *extra);

static void synth_roundtrip(const char *label, const char *arch, cr_type_t type,
                            const char *extra)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = arch;
    o.type = type;
    o.seed = 7;
    synth_roundtrip_opts(label, o, extra);
}

static void synth_roundtrip_opts(const char *label, rn_synth_opts_t o, const char *extra)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/%s-src.gguf", tmp_g, label);
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_synth_write(&o, path, &err) == CR_OK, "%s: synth: %s", label, err.msg);
    roundtrip(label, path, extra);
}

/* ---- vocabularies ---- */

static json_t *load_json(const char *dir, const char *name)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return json_load_file(path, 0, NULL);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    *len = (size_t)n;
    fclose(f);
    return s;
}

/* metaspace: the SentencePiece prefix as Mistral v0.3's tokenizer.json
 * writes it (no normalizer; a Metaspace pre-tokenizer, prepend_scheme
 * "first") instead of a Prepend normalizer. */
static void vocab_roundtrip(const char *root, const char *name, bool metaspace)
{
    char src[1200], dir[1300], inp_path[1300];
    snprintf(src, sizeof src, "%s/vocab/ggml-vocab-%s.gguf", root, name);
    snprintf(inp_path, sizeof inp_path, "%s.inp", src);
    snprintf(dir, sizeof dir, "%s/vocab-%s", tmp_g, name);
    if (!run_tool(src, dir, "--vocab-only"))
        return;
    json_t *tj = load_json(dir, "tokenizer.json"), *tc = load_json(dir, "tokenizer_config.json");
    CHECK_MSG(tj && tc, "%s: tokenizer files unreadable", name);
    if (tj && metaspace) {
        json_object_set_new(tj, "normalizer", json_null());
        json_object_set_new(tj, "pre_tokenizer",
                            json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace",
                                      "replacement", "\xe2\x96\x81", "prepend_scheme",
                                      "first", "split", 0));
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    cr_err_clear(&err);
    uint32_t n_tok = 0;
    void *mem = NULL;
    size_t mem_len = 0;
    cr_status_t st = tj && tc ? reg_hf_vocab_add(w, tj, tc, NULL, 0, &n_tok, &err) : CR_E_IO;
    CHECK_MSG(st == CR_OK, "%s: %s", name, err.msg);
    st = st ? st : cr_gguf_writer_add_str(w, "general.architecture", "llama", &err);
    st = st ? st : cr_gguf_writer_write_memory(w, &mem, &mem_len, &err);
    cr_gguf_writer_destroy(&w);
    json_decref(tj);
    json_decref(tc);
    cr_gguf_t *ga = NULL, *gb = NULL;
    rn_tokenizer_t *ta = NULL, *tb = NULL;
    if (!st) {
        CHECK(cr_gguf_open(src, &ga, &err) == CR_OK && rn_tokenizer_load(ga, &ta, &err) == CR_OK);
        CHECK_MSG(cr_gguf_open_memory(mem, mem_len, &gb, &err) == CR_OK &&
                      rn_tokenizer_load(gb, &tb, &err) == CR_OK,
                  "%s: rebuilt vocabulary: %s", name, err.msg);
    }
    size_t len = 0;
    char *inp = read_all(inp_path, &len);
    int cases = 0, fails = 0;
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    for (char *p = inp; ta && tb && p && *p;) {
        char *end = strstr(p, SEP);
        if (!end)
            break;
        int32_t a[4096], b[4096];
        size_t na = 0, nb = 0;
        for (int special = 0; special < 2; special++) {
            rn_tokenize(ta, p, (size_t)(end - p), special, special, a, 4096, &na, &err);
            rn_tokenize(tb, p, (size_t)(end - p), special, special, b, 4096, &nb, &err);
            cases++;
            if (na != nb || memcmp(a, b, na * sizeof *a)) {
                fails++;
                fprintf(stderr, "%s: \"%.*s\" tokenizes differently\n", name,
                        (int)CR_MIN(end - p, 60), p);
            }
        }
        p = end + strlen(SEP);
    }
    CHECK_MSG(cases > 10 && fails == 0, "%s: %d of %d cases differ", name, fails, cases);
    printf("  vocab %-10s %d cases identical%s\n", name, cases - fails,
           metaspace ? " (Metaspace form)" : "");
    free(inp);
    rn_tokenizer_destroy(&ta);
    rn_tokenizer_destroy(&tb);
    cr_gguf_close(&ga);
    cr_gguf_close(&gb);
    free(mem);
}

/* ---- bad folders ---- */

static void rewrite(const char *path, const char *from, const char *to)
{
    size_t len = 0;
    char *s = read_all(path, &len);
    char *at = s ? memmem(s, len, from, strlen(from)) : NULL;
    CHECK_MSG(at != NULL, "%s has no '%s'", path, from);
    if (!at) {
        free(s);
        return;
    }
    FILE *f = fopen(path, "wb");
    size_t head = (size_t)(at - s), tail = strlen(from);
    fwrite(s, 1, head, f);
    fputs(to, f);
    fwrite(at + tail, 1, len - head - tail, f);
    fclose(f);
    free(s);
}

static void expect_fail(const char *label, const char *dir, const char *drop,
                        cr_status_t want, const char *msg1, const char *msg2)
{
    folder_t f;
    folder_read(&f, dir);
    folder_t g = {0};
    for (size_t i = 0; i < f.n; i++)
        if (!drop || strcmp(f.names[i], drop))
            g.files[g.n++] = f.files[i];
    char out[1300];
    snprintf(out, sizeof out, "%s/bad.gguf", tmp_g);
    unlink(out);
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = reg_hf_import(g.files, g.n, out, NULL, 0, NULL, NULL, &err);
    CHECK_MSG(st == want, "%s: status %d, want %d (%s)", label, st, want, err.msg);
    CHECK_MSG(strstr(err.msg, msg1) && (!msg2 || strstr(err.msg, msg2)), "%s: '%s'",
              label, err.msg);
    CHECK_MSG(access(out, F_OK) != 0, "%s: output left behind", label);
    printf("  bad %-16s %s\n", label, err.msg);
}

static void bad_folders(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "qwen2";
    char src[1300], dir[1300], path[1400];
    snprintf(src, sizeof src, "%s/bad-src.gguf", tmp_g);
    cr_err_t err;
    CHECK(rn_synth_write(&o, src, &err) == CR_OK);
    snprintf(dir, sizeof dir, "%s/bad", tmp_g);
    char cmd[5000];
    if (!run_tool(src, dir, NULL))
        return;

    expect_fail("no config", dir, "config.json", CR_E_INVALID, "config.json is missing", NULL);
    expect_fail("no tokenizer", dir, "tokenizer.json", CR_E_INVALID,
                "tokenizer.json is missing", NULL);
    expect_fail("no weights", dir, "model.safetensors", CR_E_INVALID, "no tensors", NULL);

    /* wrong shape: config says a longer FFN than the tensors have */
    snprintf(path, sizeof path, "%s/config.json", dir);
    rewrite(path, "\"intermediate_size\": 128", "\"intermediate_size\": 96");
    expect_fail("wrong shape", dir, NULL, CR_E_INVALID,
                "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has "
                "shape [128, 64], config.json implies [96, 64]", NULL);
    rewrite(path, "\"intermediate_size\": 96", "\"intermediate_size\": 128");
    rewrite(path, "\"vocab_size\": 499", "\"vocab_size\": 500");
    expect_fail("vocab size", dir, NULL, CR_E_INVALID,
                "model.safetensors: tensor 'model.embed_tokens.weight' has 499 rows, "
                "config.json's vocab_size is 500", NULL);
    rewrite(path, "\"vocab_size\": 500", "\"vocab_size\": 499");
    rewrite(path, "Qwen2ForCausalLM", "FooForCausalLM");
    expect_fail("unknown arch", dir, NULL, CR_E_UNSUPPORTED,
                "architecture FooForCausalLM is not supported", NULL);
    rewrite(path, "FooForCausalLM", "Qwen2ForCausalLM");
    rewrite(path, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    expect_fail("extra tensor", dir, NULL, CR_E_INVALID, "model.safetensors: tensor "
                "'model.layers.1.", "is not part of a qwen2 model of 1 layers");
    rewrite(path, "\"num_hidden_layers\": 1", "\"num_hidden_layers\": 2");

    /* a header that lies: the first tensor's end offset past the data */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s.orig'", path, path);
    CHECK(system(cmd) == 0);
    rewrite(path, "\"data_offsets\":[0,1", "\"data_offsets\":[0,9"); /* same length */
    expect_fail("lying header", dir, NULL, CR_E_CORRUPT, "model.safetensors: tensor '",
                "lie outside the data");
    snprintf(cmd, sizeof cmd, "cp '%s.orig' '%s' && truncate -s -100 '%s'", path, path,
             path);
    CHECK(system(cmd) == 0);
    expect_fail("truncated", dir, NULL, CR_E_CORRUPT, "model.safetensors: tensor '",
                "lie outside the data");
    snprintf(cmd, sizeof cmd, "mv '%s.orig' '%s'", path, path);
    CHECK(system(cmd) == 0);

    /* Mistral's consolidated.safetensors beside model.safetensors: left
     * out (its names are not Hugging Face's; here, the same names twice) */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/consolidated.safetensors'", path, dir);
    CHECK(system(cmd) == 0);
    folder_t cf;
    folder_read(&cf, dir);
    char cout[1300];
    snprintf(cout, sizeof cout, "%s/consolidated.gguf", tmp_g);
    CHECK_MSG(reg_hf_import(cf.files, cf.n, cout, NULL, 0, NULL, NULL, &err) == CR_OK,
              "consolidated.safetensors beside model.safetensors: %s", err.msg);
    snprintf(cmd, sizeof cmd, "rm '%s/consolidated.safetensors'", dir);
    CHECK(system(cmd) == 0);

    /* a tokenizer whose pre-tokenizer corral does not know */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    size_t len;
    char *s = read_all(path, &len);
    json_t *tj = s ? json_loads(s, 0, NULL) : NULL;
    free(s);
    json_object_set_new(tj, "pre_tokenizer",
                        json_pack("{s:s, s:b}", "type", "ByteLevel", "use_regex", 0));
    json_dump_file(tj, path, 0);
    json_decref(tj);
    expect_fail("unknown pre", dir, NULL, CR_E_UNSUPPORTED,
                "tokenizer.json: pre_tokenizer not recognised", NULL);
    tj = json_load_file(path, 0, NULL);
    json_object_set_new(tj, "pre_tokenizer",
                        json_pack("{s:s, s:b, s:b}", "type", "ByteLevel", "use_regex", 1,
                                  "add_prefix_space", 1));
    json_dump_file(tj, path, 0);
    json_decref(tj);
    expect_fail("prefix space", dir, NULL, CR_E_UNSUPPORTED,
                "a step of type ByteLevel with add_prefix_space", NULL);
    json_t *model = json_object_get(tj = json_load_file(path, 0, NULL), "model");
    json_object_set_new(model, "type", json_string("Unigram"));
    json_dump_file(tj, path, 0);
    json_decref(tj);
    expect_fail("unigram", dir, NULL, CR_E_UNSUPPORTED,
                "tokenizer.json: model type Unigram is not supported", NULL);
}

/* config.json read with its limits: each bad one named. */
static void bad_configs(void)
{
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"{}", "config.json: no architectures"},
        {"{\"architectures\":[\"LlamaForCausalLM\"]}", "hidden_size is missing"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":4,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":8,\"intermediate_size\":8}",
         "leaves no head_dim"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
         "\"num_hidden_layers\":100000,\"num_attention_heads\":4,"
         "\"intermediate_size\":8}",
         "num_hidden_layers must be an integer in 1..1024"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
         "\"intermediate_size\":8}",
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":64,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"intermediate_size\":8,"
         "\"partial_rotary_factor\":2.5}",
         "partial_rotary_factor must be in (0, 1]"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,"
         "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"intermediate_size\":8,"
         "\"rms_norm_eps\":-1}",
         "rms_norm_eps must be a positive number"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        json_t *cfg = json_loads(cases[i].json, 0, NULL);
        reg_hf_hparams_t hp = {0};
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = cfg ? reg_hf_hparams_read(cfg, &hp, &err) : CR_E_INTERNAL;
        CHECK_MSG(st == CR_E_INVALID && strstr(err.msg, cases[i].msg), "case %zu: %d %s", i,
                  st, err.msg);
        json_decref(cfg);
    }
    /* a rope scaling the import does not know is refused by name */
    json_t *cfg = json_loads("{\"rope_scaling\":{\"rope_type\":\"dynamic\","
                             "\"factor\":2.0}}", 0, NULL);
    reg_hf_hparams_t hp = {.arch = "llama", .flags = REG_HF_PERMUTE_QK, .rope_dims = 16};
    reg_hf_rope_t rope = {0};
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    CHECK(reg_hf_rope_add(w, cfg, &hp, &rope, &err) == CR_E_UNSUPPORTED &&
          strstr(err.msg, "rope_scaling type dynamic is not supported"));
    reg_hf_rope_free(&rope);
    cr_gguf_writer_destroy(&w);
    json_decref(cfg);
}

/* BERT checkpoints may carry embeddings.position_ids as I64: a BERT import
 * leaves it out (as llama.cpp does); any other architecture refuses it,
 * naming the dtype. */
static void position_ids(void)
{
    static const char *const archs[] = {"bert", "qwen2"};
    for (int a = 0; a < 2; a++) {
        rn_synth_opts_t o;
        rn_synth_defaults(&o);
        o.arch = archs[a];
        o.n_kv_heads = o.n_heads;
        char src[1300], dir[1300], path[1400], out[1300];
        snprintf(src, sizeof src, "%s/pos-%s.gguf", tmp_g, archs[a]);
        snprintf(dir, sizeof dir, "%s/pos-%s", tmp_g, archs[a]);
        snprintf(out, sizeof out, "%s/pos-%s-out.gguf", tmp_g, archs[a]);
        cr_err_t err;
        CHECK(rn_synth_write(&o, src, &err) == CR_OK);
        if (!run_tool(src, dir, NULL))
            return;
        /* a second file holding only the buffer, as torch saves it */
        snprintf(path, sizeof path, "%s/model-extra.safetensors", dir);
        const char *hdr = "{\"embeddings.position_ids\":{\"dtype\":\"I64\","
                          "\"shape\":[1,4],\"data_offsets\":[0,32]}}";
        FILE *fp = fopen(path, "wb");
        uint64_t n = strlen(hdr);
        uint8_t lenb[8];
        for (int i = 0; i < 8; i++)
            lenb[i] = (uint8_t)(n >> (8 * i));
        int64_t ids[4] = {0, 1, 2, 3};
        if (fp) {
            fwrite(lenb, 1, 8, fp);
            fwrite(hdr, 1, n, fp);
            fwrite(ids, 1, sizeof ids, fp);
            fclose(fp);
        }
        folder_t f;
        folder_read(&f, dir);
        cr_err_clear(&err);
        cr_status_t st = reg_hf_import(f.files, f.n, out, NULL, 0, NULL, NULL, &err);
        if (a == 0)
            CHECK_MSG(st == CR_OK, "bert with position_ids: %s", err.msg);
        else
            CHECK_MSG(st == CR_E_UNSUPPORTED &&
                          strstr(err.msg, "model-extra.safetensors: tensor "
                                          "'embeddings.position_ids': dtype I64"),
                      "qwen2 with position_ids: %d %s", st, err.msg);
    }
    printf("  embeddings.position_ids (I64): left out for bert, refused for qwen2\n");
}

/* gemma3: embedding rows past the tokenizer's tokens are dropped (as
 * llama.cpp does), the rest copied; and an lm_head beside the tied
 * embedding is left out. */
static void gemma3_cut(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "gemma3";
    o.seed = 12;
    char src[1300], dir[1300], path[1400], out[1300];
    snprintf(src, sizeof src, "%s/cut-src.gguf", tmp_g);
    snprintf(dir, sizeof dir, "%s/cut", tmp_g);
    snprintf(out, sizeof out, "%s/cut.gguf", tmp_g);
    cr_err_t err;
    CHECK(rn_synth_write(&o, src, &err) == CR_OK); /* untied: has output.weight */
    if (!run_tool(src, dir, NULL))
        return;
    /* the tokenizer loses its last 4 tokens; config.json its vocab_size */
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_t *tj = json_load_file(path, 0, NULL);
    json_t *vocab = json_object_get(json_object_get(tj, "model"), "vocab");
    int n = rn_synth_builtin_vocab_size();
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(vocab, tmp, k, v) {
        if (json_integer_value(v) >= n - 4)
            json_object_del(vocab, k);
    }
    json_dump_file(tj, path, 0);
    json_decref(tj);
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cj = json_load_file(path, 0, NULL);
    json_object_del(cj, "vocab_size");
    json_dump_file(cj, path, 0);
    json_decref(cj);
    folder_t f;
    folder_read(&f, dir);
    cr_err_clear(&err);
    CHECK_MSG(reg_hf_import(f.files, f.n, out, NULL, 0, NULL, NULL, &err) == CR_OK, "%s", err.msg);
    cr_gguf_t *ga = NULL, *gb = NULL;
    if (cr_gguf_open(src, &ga, &err) || cr_gguf_open(out, &gb, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        cr_gguf_close(&ga);
        return;
    }
    const cr_gguf_tensor_t *ea = cr_gguf_tensor_find(ga, "token_embd.weight");
    const cr_gguf_tensor_t *eb = cr_gguf_tensor_find(gb, "token_embd.weight");
    const cr_gguf_array_t *toks = NULL;
    CHECK(cr_gguf_get_arr(gb, "tokenizer.ggml.tokens", &toks) && toks->n == (uint64_t)n - 4);
    CHECK(ea && eb && eb->ne[1] == (uint64_t)n - 4 && eb->ne[0] == ea->ne[0]);
    if (ea && eb && eb->ne[1] == (uint64_t)n - 4)
        CHECK(!memcmp(ea->data, eb->data, eb->size_bytes));
    CHECK(cr_gguf_tensor_find(gb, "output.weight") == NULL);
    cr_gguf_close(&ga);
    cr_gguf_close(&gb);
    printf("  gemma3 embedding cut to the tokenizer's %d tokens, lm_head left out\n", n - 4);
}

/* phi3: LongRoPE from config.json's rope_scaling (factor tensors, original
 * context, llama.cpp's attention factor sqrt(1 + ln(s) / ln(orig)), s =
 * context / orig) and partial_rotary_factor (rotated dims
 * int(f * hidden) / heads). */
static void phi3_rope(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "phi3";
    o.longrope = true; /* factors [8], original context 16, context 256 */
    char src[1300], dir[1300], path[1400], out[1300];
    snprintf(src, sizeof src, "%s/phi3-src.gguf", tmp_g);
    snprintf(dir, sizeof dir, "%s/phi3", tmp_g);
    snprintf(out, sizeof out, "%s/phi3.gguf", tmp_g);
    cr_err_t err;
    CHECK(rn_synth_write(&o, src, &err) == CR_OK);
    if (!run_tool(src, dir, NULL))
        return;
    folder_t f;
    folder_read(&f, dir);
    cr_err_clear(&err);
    CHECK_MSG(reg_hf_import(f.files, f.n, out, NULL, 0, NULL, NULL, &err) == CR_OK, "%s", err.msg);
    cr_gguf_t *ga = NULL, *gb = NULL;
    if (cr_gguf_open(src, &ga, &err) || cr_gguf_open(out, &gb, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        cr_gguf_close(&ga);
        return;
    }
    float attn = 0;
    uint32_t orig = 0;
    CHECK(cr_gguf_get_f32(gb, "phi3.rope.scaling.attn_factor", &attn) &&
          attn == (float)sqrt(1.0 + log(256.0 / 16.0) / log(16.0)));
    CHECK(cr_gguf_get_u32(gb, "phi3.rope.scaling.original_context_length", &orig) &&
          orig == 16);
    static const char *const names[] = {"rope_factors_long.weight",
                                        "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++) {
        const cr_gguf_tensor_t *a = cr_gguf_tensor_find(ga, names[i]);
        const cr_gguf_tensor_t *b = cr_gguf_tensor_find(gb, names[i]);
        CHECK_MSG(a && b && b->type == CR_TYPE_F32 && a->size_bytes == b->size_bytes &&
                      !memcmp(a->data, b->data, a->size_bytes),
                  "%s not carried over", names[i]);
    }
    cr_gguf_close(&ga);
    cr_gguf_close(&gb);

    /* half the head rotated: 16-dim heads (64 / 4) rotate 8 */
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cj = json_load_file(path, 0, NULL);
    json_object_del(cj, "rope_scaling");
    json_object_del(cj, "head_dim");
    json_object_set_new(cj, "partial_rotary_factor", json_real(0.5));
    json_dump_file(cj, path, 0);
    json_decref(cj);
    unlink(out);
    CHECK_MSG(reg_hf_import(f.files, f.n, out, NULL, 0, NULL, NULL, &err) == CR_OK, "%s", err.msg);
    uint32_t rd = 0;
    if (!cr_gguf_open(out, &gb, &err))
        CHECK(cr_gguf_get_u32(gb, "phi3.rope.dimension_count", &rd) && rd == 8);
    cr_gguf_close(&gb);
    printf("  phi3 LongRoPE: attn_factor %.6f, factors copied; partial rotary: %u dims\n",
           attn, rd);
}

/* llama with Llama 3.1's rope_scaling: rope_freqs.weight as the converter
 * computes it, here evaluated in double (the import evaluates the base
 * frequency in float as the converter's float32 tensor does: relative
 * difference within 1e-6). 16-dim heads, theta 10000, original 256,
 * low 1, high 4: wavelengths 6.3, 19.9, 62.8 (factor 1), 198.7 (smooth),
 * 628 and up (factor 8). */
static void llama3_rope(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "llama";
    char src[1300], dir[1300], path[1400], out[1300];
    snprintf(src, sizeof src, "%s/l3-src.gguf", tmp_g);
    snprintf(dir, sizeof dir, "%s/l3", tmp_g);
    snprintf(out, sizeof out, "%s/l3.gguf", tmp_g);
    cr_err_t err;
    CHECK(rn_synth_write(&o, src, &err) == CR_OK);
    if (!run_tool(src, dir, NULL))
        return;
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *cj = json_load_file(path, 0, NULL);
    json_object_set_new(cj, "rope_scaling",
                        json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                                  8.0, "low_freq_factor", 1.0, "high_freq_factor", 4.0,
                                  "original_max_position_embeddings", 256));
    json_dump_file(cj, path, 0);
    json_decref(cj);
    folder_t f;
    folder_read(&f, dir);
    CHECK_MSG(reg_hf_import(f.files, f.n, out, NULL, 0, NULL, NULL, &err) == CR_OK, "%s", err.msg);
    cr_gguf_t *g = NULL;
    if (cr_gguf_open(out, &g, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        return;
    }
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "rope_freqs.weight");
    CHECK(t && t->type == CR_TYPE_F32 && t->n_elems == 8);
    int kinds[3] = {0, 0, 0};
    for (int i = 0; t && t->n_elems == 8 && i < 8; i++) {
        double fr = pow(10000.0, -2.0 * i / 16.0), wave = 2 * M_PI / fr, want;
        if (wave < 256.0 / 4.0) {
            want = 1.0;
            kinds[0]++;
        } else if (wave > 256.0) {
            want = 8.0;
            kinds[2]++;
        } else {
            double sm = (256.0 / wave - 1.0) / 3.0;
            want = 1.0 / ((1.0 - sm) / 8.0 + sm);
            kinds[1]++;
        }
        float got;
        memcpy(&got, (const char *)t->data + 4 * i, 4);
        CHECK_MSG(fabs(got - want) <= 1e-6 * want, "rope_freqs[%d] = %.9g, want %.9g", i,
                  got, want);
    }
    CHECK(kinds[0] == 3 && kinds[1] == 1 && kinds[2] == 4);
    cr_gguf_close(&g);
    printf("  llama3 rope: rope_freqs.weight matches the formula (3 x 1, 1 smooth, 4 x 8)\n");
}

int main(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    snprintf(tool_g, sizeof tool_g, "%s/bin/corral-gguf-to-hf", bd ? bd : ".");
    if (access(tool_g, X_OK) != 0)
        return check_skip("test_hf_import", "no corral-gguf-to-hf in $CORRAL_BUILD_DIR/bin");
    cr_err_t err;
    if (be_cpu_new(2, &be_g, &err) || !mkdtemp(tmp_g)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    synth_roundtrip("synth-llama", "llama", CR_TYPE_F32, NULL);
    synth_roundtrip("synth-llama-f16", "llama", CR_TYPE_F16, "--shards 3");
    synth_roundtrip("synth-qwen2", "qwen2", CR_TYPE_F32, NULL);
    synth_roundtrip("synth-qwen2-bf16", "qwen2", CR_TYPE_BF16, NULL);
    synth_roundtrip("synth-qwen3", "qwen3", CR_TYPE_F16, "--shards 2");
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "qwen3moe";
    o.n_experts = 4;
    o.n_experts_used = 2;
    o.expert_ffn = 32;
    o.expert_norm = 1;
    o.seed = 9;
    o.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n"
                      "{{ m.content }}<|im_end|>\n{% endfor %}";
    synth_roundtrip_opts("synth-qwen3moe", o, "--jinja-file");
    rn_synth_defaults(&o);
    o.arch = "gemma2";
    o.tied_output = true; /* gemma reads its embedding; an lm_head is left out */
    o.head_dim = 32; /* != dim / heads: key_length matters */
    o.sliding_window = 8;
    o.attn_softcap = 20.0f;
    o.final_softcap = 15.0f;
    o.seed = 3;
    synth_roundtrip_opts("synth-gemma2", o, NULL);
    rn_synth_defaults(&o);
    o.arch = "gemma3";
    o.tied_output = true;
    o.sliding_window = 4;
    o.swa_pattern = 2;
    o.rope_linear = 4.0f;
    o.n_layers = 3;
    o.type = CR_TYPE_F16;
    o.seed = 4;
    synth_roundtrip_opts("synth-gemma3", o, NULL);
    synth_roundtrip("synth-phi3", "phi3", CR_TYPE_F32, NULL);
    rn_synth_defaults(&o);
    o.arch = "bert";
    o.n_kv_heads = o.n_heads; /* BERT has no grouped heads */
    o.seed = 6;
    synth_roundtrip_opts("synth-bert", o, NULL);
    position_ids();
    bad_folders();
    gemma3_cut();
    bad_configs();
    phi3_rope();
    llama3_rope();
    const char *root = check_testdata("models/stories260K.gguf") ? getenv("CORRAL_TESTDATA")
                                                                 : NULL;
    if (root) {
        char p[1200];
        snprintf(p, sizeof p, "%s/models/stories260K.gguf", root);
        roundtrip("stories260K", p, NULL);
        snprintf(p, sizeof p, "%s/models/tiny-spm-f16.gguf", root);
        roundtrip("tiny-spm-f16", p, "--shards 2");
        static const char *const vocabs[] = {"llama-spm", "phi-3", "gpt-2", "llama-bpe",
                                             "bert-bge"};
        for (size_t i = 0; i < CR_ARRAY_LEN(vocabs); i++)
            vocab_roundtrip(root, vocabs[i], false);
        vocab_roundtrip(root, "llama-spm", true);
    } else {
        printf("  testdata parts skipped: CORRAL_TESTDATA not set or incomplete\n");
    }
    be_destroy(&be_g);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_g);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_g);
    return check_finish("test_hf_import");
}
