/* tools.c: `corral-runner tokenize` and `corral-runner logits`. */
#include "lib/prelude.h"
#include "services/runner/tools.h"

#include "services/runner/template/template.h"

#include "lib/buf.h"
#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/jinja/jinja.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/model/quantize.h"
#include "services/runner/text/tokenizer.h"

#define TOOL_INPUT_MAX (64u << 20)
#define TOOL_MAX_TOKENS 1000000

int rn_tool_tokenize(const char *model_path, bool add_special,
                     bool parse_special)
{
    cr_err_t err;
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    cr_buf_t in;
    cr_buf_init(&in, TOOL_INPUT_MAX);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0)
        if (cr_buf_append(&in, chunk, n)) {
            fprintf(stderr, "input is over %u bytes\n", TOOL_INPUT_MAX);
            goto out;
        }
    if (cr_gguf_open(model_path, &g, &err) ||
        rn_tokenizer_load(g, &tok, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    size_t need = 0;
    const char *text = in.data ? in.data : "";
    cr_status_t st = rn_tokenize(tok, text, in.len, add_special, parse_special,
                                 NULL, 0, &need, &err);
    if (st && st != CR_E_TOO_LARGE) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    ids = malloc((need ? need : 1) * sizeof *ids);
    if (!ids || rn_tokenize(tok, text, in.len, add_special, parse_special, ids,
                            need, &need, &err)) {
        fprintf(stderr, "tokenize failed\n");
        goto out;
    }
    for (size_t i = 0; i < need; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    rc = 0;
out:
    free(ids);
    cr_buf_free(&in);
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    return rc;
}

static int parse_ids(const char *s, int32_t **out, int *n_out)
{
    int cap = 64, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    while (v && *s) {
        while (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t')
            s++;
        if (!*s)
            break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX || n >= TOOL_MAX_TOKENS) {
            free(v);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            int32_t *w = realloc(v, (size_t)cap * sizeof *v);
            if (!w) {
                free(v);
                return -1;
            }
            v = w;
        }
        v[n++] = (int32_t)x;
        s = end;
    }
    *out = v;
    *n_out = n;
    return v && n > 0 ? 0 : -1;
}

int rn_tool_logits(const char *model_path, const char *tokens,
                   const char *out_path, const char *kv_cache_type)
{
    cr_err_t err;
    int32_t *ids = NULL;
    int n = 0;
    cr_type_t kv_type;
    if (!cr_kv_cache_type_parse(kv_cache_type, &kv_type)) {
        fprintf(stderr, "--kv-cache-type must be f16, q8_0 or q4_0\n");
        return 2;
    }
    if (parse_ids(tokens, &ids, &n)) {
        fprintf(stderr, "--tokens must be non-negative integer ids\n");
        return 2;
    }
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *ctx = NULL;
    float *logits = NULL;
    FILE *f = NULL;
    int rc = 1;
    if (be_cpu_new(0, &be, &err) || rn_model_load(model_path, be, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    rn_ctx_opts_t co = {.n_ctx = n, .kv_type = kv_type};
    if (rn_ctx_new(m, &co, &ctx, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    size_t n_vocab = (size_t)rn_ctx_n_vocab(ctx);
    logits = malloc((size_t)n * n_vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "out of memory\n");
        goto out;
    }
    if (rn_ctx_eval(ctx, ids, n, 0, logits, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        goto out;
    }
    f = fopen(out_path, "wb");
    if (!f || fwrite(logits, sizeof *logits, (size_t)n * n_vocab, f) !=
                  (size_t)n * n_vocab) {
        fprintf(stderr, "cannot write %s\n", out_path);
        goto out;
    }
    rc = 0;
out:
    if (f && fclose(f))
        rc = 1;
    free(logits);
    free(ids);
    rn_ctx_destroy(&ctx);
    rn_model_destroy(&m);
    be_destroy(&be);
    return rc;
}

/* ---- quantize --------------------------------------------------------- */

static const char *flag(int argc, char **argv, const char *name)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return NULL;
}

static void print_progress(void *ctx, uint64_t done, uint64_t total)
{
    CR_UNUSED(ctx);
    printf("%" PRIu64 "/%" PRIu64 "\n", done, total);
    fflush(stdout);
}

int rn_tool_quantize(int argc, char **argv)
{
    const char *in = flag(argc, argv, "--in");
    const char *out = flag(argc, argv, "--out");
    const char *type = flag(argc, argv, "--type");
    bool progress = false;
    for (int i = 2; i < argc; i++)
        progress |= !strcmp(argv[i], "--progress");
    if (!in || !out || !type) {
        fprintf(stderr, "usage: corral-runner quantize --in SRC.gguf --out "
                        "DST.gguf --type Q4_K_M [--progress]\n");
        return 2;
    }
    uint32_t ftype;
    if (!rn_quant_ftype_parse(type, &ftype)) {
        fprintf(stderr, "unsupported quantization type %s\n", type);
        return 1;
    }
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_quantize_file(in, out, ftype, progress ? print_progress : NULL,
                         NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}

int rn_tool_check_template(const char *model_path)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    if (cr_gguf_open(model_path, &g, &err)) {
        fprintf(stderr, "%s: %s\n", model_path, err.msg);
        return 1;
    }
    cr_gguf_str_t src;
    int rc = 0;
    if (!cr_gguf_get_str(g, "tokenizer.chat_template", &src) || !src.len) {
        printf("none\n");
    } else {
        jj_template_t *t = jj_template_new(src.ptr, (size_t)src.len, &err);
        /* Filters and tests are looked up when reached (Jinja2 does the
         * same), so one missing from the renderer shows only in a render:
         * a plain one-message chat finds those on the common path. Other
         * errors there depend on the conversation, not on the renderer. */
        json_t *ctx = t ? json_pack("{s:[{s:s, s:s}], s:b, s:s, s:s}", "messages", "role", "user",
                                    "content", "Hello", "add_generation_prompt", 1, "bos_token",
                                    "", "eos_token", "")
                        : NULL;
        cr_buf_t out;
        cr_buf_init(&out, (size_t)16 << 20);
        if (ctx && jj_render(t, ctx, NULL, &out, &err) &&
            (strstr(err.msg, "No filter named") || strstr(err.msg, "No test named"))) {
            jj_template_destroy(&t);
        }
        cr_buf_free(&out);
        json_decref(ctx);
        if (t)
            printf("ok\n");
        else
            fprintf(stderr, "%s\n", err.msg);
        rc = t ? 0 : 1;
        jj_template_destroy(&t);
    }
    cr_gguf_close(&g);
    return rc;
}

#define GO_TEMPLATE_MAX (4u << 20) /* the registry's text layer limit */

int rn_tool_check_go_template(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open the template: %s\n", strerror(errno));
        return 2;
    }
    char *src = malloc(GO_TEMPLATE_MAX + 1);
    size_t n = src ? fread(src, 1, GO_TEMPLATE_MAX + 1, f) : 0;
    fclose(f);
    if (!src || n > GO_TEMPLATE_MAX) {
        fprintf(stderr, "template over %u bytes\n", GO_TEMPLATE_MAX);
        free(src);
        return 1;
    }
    rn_tmpl_t *t = NULL;
    cr_err_t err = {0};
    int rc = 0;
    if (rn_tmpl_parse(src, n, &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        rc = 1;
    } else {
        printf("ok\n");
    }
    rn_tmpl_destroy(&t);
    free(src);
    return rc;
}

int rn_tool_check_model(const char *model_path)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    if (cr_gguf_open(model_path, &g, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    const char *arch = cr_gguf_arch(g);
    int rc = 0;
    if (rn_model_arch_supported(arch)) {
        printf("ok\n");
    } else {
        fprintf(stderr, "unsupported architecture '%.64s'\n", arch ? arch : "");
        rc = 1;
    }
    cr_gguf_close(&g);
    return rc;
}
