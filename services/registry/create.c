/* create.c: /api/create (see create.h). */
#include "lib/prelude.h"
#include "services/registry/create.h"
#include "services/registry/draft.h"
#include "lib/chat_formats.h"
#include "lib/env.h"
#include "lib/gguf.h"
#include "lib/log.h"
#include "lib/lora.h"
#include "lib/model_name.h"
#include "services/registry/ggufinfo.h"
#include "services/registry/gojson.h"
#include "services/registry/hf_import.h"
#include "services/registry/manifest.h"
#include "services/registry/model.h"
#include "services/registry/peft_import.h"
#include "services/registry/ops.h"
#include "services/registry/params.h"
#include "services/registry/quantize.h"
#include "services/registry/template_check.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 1024 /* files + adapters in one create */
#define COPY_CHUNK (1u << 20) /* bytes read at a time into a blob */
/* Ollama sends this placeholder digest with quantizing progress. */
#define QUANT_DIGEST "0000000000000000000"

#if defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "amd64"
#endif

typedef struct build {
    reg_store_t *s;
    reg_create_progress_fn fn;
    void *ctx;
    const atomic_bool *cancel; /* the client left (may be NULL) */
    reg_manifest_t man;  /* the manifest being built */
    json_t *params;      /* inherited params object, or NULL */
    char format[16];     /* config fields: the first GGUF layer wins */
    char family[128];
    char model_type[32];
    char file_type[32];
    json_t *families;    /* array of unique architectures */
    char (*created)[REG_HEX_LEN + 1]; /* blobs this create wrote */
    size_t n_created;
    char (*pinned)[REG_HEX_LEN + 1]; /* blobs it pinned (store.h), one pin each */
    size_t n_pinned;
    const char *renderer;           /* config renderer/parser: the request's, */
    const char *parser;             /* else inherited from `from`; NULL: none */
    char *inherited_renderer, *inherited_parser; /* owned copies of the base's */
    char *draft_name; /* config "draft": the draft model's name (owned), or NULL */
    char auto_hex[REG_HEX_LEN + 1]; /* autodetected template layer, or "" */
    const char *auto_name;          /* its name */
} build_t;

/* Chat templates for GGUF imports without one, chosen by the markers of the
 * file's tokenizer.chat_template (Ollama matches known Jinja templates and
 * reports "using autodetected template <name>"). Each template ranges over
 * .Messages; stop strings become default parameters. */
typedef struct auto_tmpl {
    const char *name;
    const char *marker, *marker2; /* both must appear (marker2 may be NULL) */
    const char *tmpl;
    const char *stops[4];
} auto_tmpl_t;

static const auto_tmpl_t auto_tmpls[] = {
    {"chatml", "<|im_start|>", NULL,
     "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
     "{{ .Content }}<|im_end|>\n"
     "{{ end }}<|im_start|>assistant\n",
     {"<|im_start|>", "<|im_end|>", NULL}},
    {"llama3-instruct", "<|start_header_id|>", "<|eot_id|>",
     "{{- range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
     "{{ .Content }}<|eot_id|>"
     "{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n",
     {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", NULL}},
    {"gemma-instruct", "<start_of_turn>", NULL,
     "{{- range .Messages }}<start_of_turn>"
     "{{ if eq .Role \"assistant\" }}model{{ else }}user{{ end }}\n"
     "{{ .Content }}<end_of_turn>\n"
     "{{ end }}<start_of_turn>model\n",
     {"<start_of_turn>", "<end_of_turn>", NULL}},
    {"phi-3", "<|user|>", "<|end|>",
     "{{- range .Messages }}<|{{ .Role }}|>\n"
     "{{ .Content }}<|end|>\n"
     "{{ end }}<|assistant|>\n",
     {"<|end|>", "<|user|>", "<|assistant|>", NULL}},
    {"zephyr", "<|user|>", NULL,
     "{{- range .Messages }}<|{{ .Role }}|>\n"
     "{{ .Content }}</s>\n"
     "{{ end }}<|assistant|>\n",
     {"<|system|>", "<|user|>", "<|assistant|>", "</s>"}},
    {"mistral-instruct", "[INST]", NULL,
     "{{- range .Messages }}"
     "{{- if eq .Role \"assistant\" }} {{ .Content }}</s>"
     "{{- else }}[INST] {{ .Content }} [/INST]{{ end }}"
     "{{- end }}",
     {"[INST]", "[/INST]", NULL}},
};

/* The template for a GGUF's tokenizer.chat_template, or NULL. */
static const auto_tmpl_t *detect_template(const cr_gguf_t *g)
{
    cr_gguf_str_t jinja;
    if (!cr_gguf_get_str(g, "tokenizer.chat_template", &jinja) || !jinja.len)
        return NULL;
    for (size_t i = 0; i < CR_ARRAY_LEN(auto_tmpls); i++) {
        const auto_tmpl_t *t = &auto_tmpls[i];
        if (memmem(jinja.ptr, (size_t)jinja.len, t->marker, strlen(t->marker)) &&
            (!t->marker2 || memmem(jinja.ptr, (size_t)jinja.len, t->marker2,
                                   strlen(t->marker2))))
            return t;
    }
    return NULL;
}

static void progress(build_t *b, const char *fmt, ...) CR_PRINTF(2, 3);
static void progress(build_t *b, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (b->fn) {
        msg_progress_body_t p = {.status = text, .has_status = true};
        b->fn(b->ctx, &p);
    }
}

static bool was_created(const build_t *b, const char *hex)
{
    for (size_t i = 0; i < b->n_created; i++)
        if (!strcmp(b->created[i], hex))
            return true;
    return false;
}

/* Records that this create wrote blob hex (so a failure removes it). */
static cr_status_t note_created(build_t *b, const char *hex, cr_err_t *err)
{
    if (was_created(b, hex))
        return CR_OK;
    void *v = realloc(b->created, (b->n_created + 1) * sizeof *b->created);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    b->created = v;
    memcpy(b->created[b->n_created++], hex, REG_HEX_LEN + 1);
    return CR_OK;
}

/* Pins blob hex for this create (store.h: no prune removes it until the
 * manifest is written or the create fails); must_exist as reg_store_pin. */
static cr_status_t pin(build_t *b, const char *hex, bool must_exist, cr_err_t *err)
{
    void *v = realloc(b->pinned, (b->n_pinned + 1) * sizeof *b->pinned);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    b->pinned = v;
    cr_status_t st = reg_store_pin(b->s, hex, must_exist, err);
    if (!st)
        memcpy(b->pinned[b->n_pinned++], hex, REG_HEX_LEN + 1);
    return st;
}

static void unpin_all(build_t *b)
{
    for (size_t i = 0; i < b->n_pinned; i++)
        reg_store_unpin(b->s, b->pinned[i]);
    b->n_pinned = 0;
}

static cr_status_t put_blob(build_t *b, const void *data, size_t len,
                            char hex[REG_HEX_LEN + 1], cr_err_t *err)
{
    /* Pinned before it is looked for: an equal blob that exists now is not
     * pruned before the manifest names it. */
    reg_sha256_hex(data, len, hex);
    bool created = false;
    cr_status_t st = pin(b, hex, false, err);
    if (!st)
        st = reg_store_blob_put(b->s, data, len, hex, &created, err);
    if (st || !created)
        return st;
    return note_created(b, hex, err);
}

static cr_status_t add_blob_layer(build_t *b, const char *mt, const void *data,
                                  size_t len, cr_err_t *err)
{
    char hex[REG_HEX_LEN + 1];
    cr_status_t st = put_blob(b, data, len, hex, err);
    if (st)
        return st;
    if (reg_manifest_add(&b->man, mt, hex, (int64_t)len, NULL, NULL))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    return CR_OK;
}

static cr_status_t add_json_layer(build_t *b, const char *mt, const json_t *v,
                                  cr_err_t *err)
{
    cr_buf_t text;
    cr_buf_init(&text, REG_MESSAGES_LAYER_MAX);
    cr_status_t st = reg_gojson_dump_line(v, &text);
    if (st)
        st = cr_err_set(err, st, "encoding %s: %s", mt, cr_status_str(st));
    else
        st = add_blob_layer(b, mt, text.data, text.len, err);
    cr_buf_free(&text);
    return st;
}

/* Records a GGUF layer's metadata in the config fields. */
static void note_gguf(build_t *b, const cr_gguf_t *g)
{
    const char *fam = reg_gguf_family(g);
    if (!b->format[0])
        snprintf(b->format, sizeof b->format, "gguf");
    if (!b->family[0])
        snprintf(b->family, sizeof b->family, "%s", fam);
    if (!b->model_type[0])
        reg_human_number(reg_gguf_param_count(g), b->model_type,
                         sizeof b->model_type);
    if (!b->file_type[0])
        snprintf(b->file_type, sizeof b->file_type, "%s",
                 reg_gguf_file_type(g));
    for (size_t i = 0; i < json_array_size(b->families); i++)
        if (!strcmp(json_string_value(json_array_get(b->families, i)), fam))
            return;
    json_array_append_new(b->families, json_string(fam));
}

/* Opens blob hex as GGUF: CR_E_NOT_FOUND if it was never uploaded,
 * CR_E_INVALID if it is not GGUF or does not validate. */
static cr_status_t open_blob_gguf(build_t *b, const char *hex, cr_gguf_t **g,
                                  cr_err_t *err)
{
    char path[REG_PATH_MAX];
    *g = NULL;
    if (!reg_store_blob_path(b->s, hex, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cr_err_set(err, CR_E_NOT_FOUND,
                          "blob sha256:%s not found; upload it first", hex);
    char magic[4] = {0};
    ssize_t r = read(fd, magic, sizeof magic);
    close(fd);
    if (r != 4 || memcmp(magic, "GGUF", 4) != 0)
        return cr_err_set(err, CR_E_INVALID,
                          "supplied file was not in GGUF format");
    cr_err_t gerr;
    if (cr_gguf_open(path, g, &gerr)) {
        /* The blob by its digest: a client never learns the store's path. */
        char shown[REG_HEX_LEN + 8];
        snprintf(shown, sizeof shown, "sha256-%s", hex);
        cr_msg_redact(gerr.msg, sizeof gerr.msg, path, shown);
        return cr_err_set(err, CR_E_INVALID, "invalid GGUF file: %s", gerr.msg);
    }
    return CR_OK;
}

/* Go's fs.ValidPath: relative, slash-separated, no "", "." or ".."
 * elements (backslashes refused too). */
static bool valid_rel_path(const char *p)
{
    if (!p || !*p || strchr(p, '\\'))
        return false;
    if (!strcmp(p, "."))
        return true;
    const char *e = p;
    for (;;) {
        const char *slash = strchr(e, '/');
        size_t n = slash ? (size_t)(slash - e) : strlen(e);
        if (n == 0 || (n == 1 && e[0] == '.') ||
            (n == 2 && e[0] == '.' && e[1] == '.'))
            return false;
        if (!slash)
            return true;
        e = slash + 1;
    }
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static cr_status_t add_auto_template(build_t *b, const auto_tmpl_t *at,
                                     cr_err_t *err)
{
    cr_status_t st = add_blob_layer(b, REG_MT_TEMPLATE, at->tmpl,
                                    strlen(at->tmpl), err);
    if (st)
        return st;
    memcpy(b->auto_hex, b->man.layers[b->man.n_layers - 1].hex,
           sizeof b->auto_hex);
    b->auto_name = at->name;
    json_t *stops = json_array();
    for (size_t i = 0; i < CR_ARRAY_LEN(at->stops) && at->stops[i]; i++)
        json_array_append_new(stops, json_string(at->stops[i]));
    if (!b->params)
        b->params = json_object();
    if (!b->params || !stops) {
        json_decref(stops);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    json_object_set_new(b->params, "stop", stops);
    return CR_OK;
}

static cr_status_t store_file(build_t *b, const char *path,
                              char hex[REG_HEX_LEN + 1], int64_t *size,
                              cr_err_t *err);
static cr_status_t check_cancel(const build_t *b, cr_err_t *err);

/* Between two tensors of a conversion (hf_import.h): the test hook's point,
 * then the client's cancel. */
static cr_status_t convert_step(void *ctx, cr_err_t *err)
{
    build_t *b = ctx;
    reg_store_step(b->s, "convert tensor");
    return check_cancel(b, err);
}

/* A Hugging Face folder (config.json, *.safetensors, tokenizer files):
 * converted to GGUF in a temp file beside the blobs, then stored as the
 * model layer. The temp file goes whatever happens. */
static cr_status_t from_hf_folder(build_t *b, const msg_file_ref_t *files,
                                  size_t n, cr_err_t *err)
{
    reg_hf_file_t *hf = calloc(n, sizeof *hf);
    char (*paths)[REG_PATH_MAX] = calloc(n, sizeof *paths);
    cr_status_t st = hf && paths ? CR_OK
                                 : cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n; i++) {
        char hex[REG_HEX_LEN + 1];
        uint64_t size = 0;
        if ((st = reg_digest_parse(files[i].digest, hex, err)))
            break;
        if (!reg_store_blob_path(b->s, hex, paths[i], sizeof paths[i]))
            st = cr_err_set(err, CR_E_INVALID, "invalid digest format");
        else if (!reg_store_blob_exists(b->s, hex, &size))
            st = cr_err_set(err, CR_E_NOT_FOUND, "blob sha256:%s (%s) not found; "
                            "upload it first", hex, files[i].name);
        hf[i] = (reg_hf_file_t){files[i].name, paths[i]};
    }
    char out[REG_PATH_MAX];
    out[0] = '\0';
    if (!st) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int w = snprintf(out, sizeof out,
                         "%s/blobs/.corral-tmp-convert-%ld-%ld.gguf",
                         reg_store_root(b->s), (long)getpid(), (long)ts.tv_nsec);
        if (w < 0 || (size_t)w >= sizeof out)
            st = cr_err_set(err, CR_E_TOO_LARGE, "store path too long");
    }
    if (!st) {
        progress(b, "converting model");
        st = reg_hf_import(hf, n, out, NULL, 0, convert_step, b, err);
    }
    char hex[REG_HEX_LEN + 1];
    int64_t size = 0;
    st = st ? st : store_file(b, out, hex, &size, err);
    cr_gguf_t *g = NULL;
    if (!st && !(st = open_blob_gguf(b, hex, &g, err))) {
        note_gguf(b, g);
        const auto_tmpl_t *at = b->auto_hex[0] ? NULL : detect_template(g);
        cr_gguf_close(&g);
        if (reg_manifest_add(&b->man, REG_MT_MODEL, hex, size, NULL, NULL))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        if (!st && at)
            st = add_auto_template(b, at, err);
    }
    if (out[0])
        unlink(out);
    free(hf);
    free(paths);
    return st;
}

/* Refuses an adapter the runner would not apply to the model layer
 * (lib/lora.h: not a LoRA adapter, another architecture, tensor names or
 * shapes that do not fit, an unsupported target or type), or one too many;
 * never stores one to be ignored. */
static cr_status_t check_adapter(build_t *b, const cr_gguf_t *ad, const char *label,
                                 cr_err_t *err)
{
    size_t n_have = 0;
    for (size_t i = 0; i < b->man.n_layers; i++)
        n_have += !strcmp(b->man.layers[i].media_type, REG_MT_ADAPTER);
    if (n_have >= CR_LORA_MAX_ADAPTERS)
        return cr_err_set(err, CR_E_INVALID, "too many adapters (at most %d)",
                          CR_LORA_MAX_ADAPTERS);
    const reg_layer_t *model = reg_manifest_find(&b->man, REG_MT_MODEL);
    if (!model)
        return cr_err_set(err, CR_E_INVALID, "adapter %s needs a model to apply to (FROM)",
                          label);
    cr_gguf_t *base = NULL;
    cr_status_t st = open_blob_gguf(b, model->hex, &base, err);
    cr_lora_pair_t *pairs = NULL;
    size_t n = 0;
    if (!st)
        st = cr_lora_pairs(base, ad, label, &pairs, &n, err);
    free(pairs);
    cr_gguf_close(&base);
    return st;
}

/* The blob paths of files[0..n-1] into paths, as reg_hf_file_t in hf. */
static cr_status_t blob_files(build_t *b, const msg_file_ref_t *files, size_t n,
                              reg_hf_file_t *hf, char (*paths)[REG_PATH_MAX], cr_err_t *err)
{
    for (size_t i = 0; i < n; i++) {
        char hex[REG_HEX_LEN + 1];
        uint64_t size = 0;
        cr_status_t st = reg_digest_parse(files[i].digest, hex, err);
        if (st)
            return st;
        if (!reg_store_blob_path(b->s, hex, paths[i], sizeof paths[i]))
            return cr_err_set(err, CR_E_INVALID, "invalid digest format");
        if (!reg_store_blob_exists(b->s, hex, &size))
            return cr_err_set(err, CR_E_NOT_FOUND, "blob sha256:%s (%s) not found; "
                              "upload it first", hex, files[i].name);
        hf[i] = (reg_hf_file_t){files[i].name, paths[i]};
    }
    return CR_OK;
}

/* A PEFT adapter folder among the adapter files: converted to a GGUF LoRA
 * for the model layer (peft_import.h) in a temp file beside the blobs,
 * checked as any adapter, and stored as an adapter layer. */
static cr_status_t from_peft(build_t *b, const msg_file_ref_t *files, size_t n,
                             cr_err_t *err)
{
    const reg_layer_t *model = reg_manifest_find(&b->man, REG_MT_MODEL);
    if (!model)
        return cr_err_set(err, CR_E_INVALID, "a PEFT adapter needs a model to apply to "
                          "(FROM)");
    reg_hf_file_t *hf = calloc(n, sizeof *hf);
    char (*paths)[REG_PATH_MAX] = calloc(n, sizeof *paths);
    cr_gguf_t *base = NULL, *g = NULL;
    char out[REG_PATH_MAX] = "";
    cr_status_t st = hf && paths ? blob_files(b, files, n, hf, paths, err)
                                 : cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = open_blob_gguf(b, model->hex, &base, err);
    if (!st) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int w = snprintf(out, sizeof out, "%s/blobs/.corral-tmp-peft-%ld-%ld.gguf",
                         reg_store_root(b->s), (long)getpid(), (long)ts.tv_nsec);
        if (w < 0 || (size_t)w >= sizeof out)
            st = cr_err_set(err, CR_E_TOO_LARGE, "store path too long");
    }
    if (!st) {
        progress(b, "converting adapter");
        st = reg_peft_import(hf, n, base, out, convert_step, b, err);
    }
    char hex[REG_HEX_LEN + 1];
    int64_t size = 0;
    if (!st)
        st = store_file(b, out, hex, &size, err);
    if (!st)
        st = open_blob_gguf(b, hex, &g, err);
    if (!st)
        st = check_adapter(b, g, "adapter_model.safetensors", err);
    if (!st && reg_manifest_add(&b->man, REG_MT_ADAPTER, hex, size, NULL, NULL))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (out[0])
        unlink(out);
    cr_gguf_close(&g);
    cr_gguf_close(&base);
    free(hf);
    free(paths);
    return st;
}

/* A GGUF whose architecture the engine does not run would be listed and
 * then fail every load: the create fails instead. Without a runner binary
 * to ask, the load reports it (logged). */
static cr_status_t check_arch(build_t *b, const char *hex, cr_err_t *err)
{
    char path[REG_PATH_MAX];
    if (!reg_store_blob_path(b->s, hex, path, sizeof path))
        return CR_OK;
    cr_err_t cerr;
    cr_err_clear(&cerr);
    cr_status_t st = reg_model_arch_check(path, &cerr);
    if (st == CR_E_INVALID)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s", cerr.msg);
    if (st)
        cr_log_warn("create: architecture not checked: %s", cerr.msg);
    return CR_OK;
}

static cr_status_t from_files(build_t *b, const msg_file_ref_t *files, size_t n,
                              bool adapters, cr_err_t *err)
{
    if (n == 0)
        return cr_err_set(err, CR_E_INVALID, "no files provided to convert");
    if (n > MAX_FILES)
        return cr_err_set(err, CR_E_INVALID, "too many files (%zu)", n);
    for (size_t i = 0; i < n; i++) {
        const char *fname = files[i].name ? files[i].name : "";
        if (!valid_rel_path(fname))
            return cr_err_set(err, CR_E_INVALID,
                              "file path must be relative: %s", fname);
    }
    for (size_t i = 0; adapters && i < n; i++) {
        if (reg_peft_is_folder_file(files[i].name)) {
            cr_status_t st = from_peft(b, files, n, err);
            if (st)
                return st;
            break;
        }
    }
    for (size_t i = 0; !adapters && i < n; i++)
        if (reg_hf_is_folder_file(files[i].name))
            return from_hf_folder(b, files, n, err);
    for (size_t i = 0; i < n; i++) {
        const char *fname = files[i].name;
        if (adapters && reg_peft_is_folder_file(fname))
            continue; /* converted above */
        if (has_suffix(fname, ".json"))
            return cr_err_set(err, CR_E_INVALID,
                              "%s without config.json and *.safetensors is not "
                              "a model", fname);
        char hex[REG_HEX_LEN + 1];
        cr_status_t st = reg_digest_parse(files[i].digest, hex, err);
        if (st)
            return st;
        progress(b, "parsing GGUF");
        cr_gguf_t *g = NULL;
        if ((st = pin(b, hex, false, err)) || (st = open_blob_gguf(b, hex, &g, err)))
            return st;
        const char *mt = adapters ? REG_MT_ADAPTER : reg_gguf_media_type(g);
        if (adapters && (st = check_adapter(b, g, fname, err))) {
            cr_gguf_close(&g);
            return st;
        }
        note_gguf(b, g);
        const auto_tmpl_t *at = NULL;
        if (!strcmp(mt, REG_MT_MODEL) && !b->auto_hex[0])
            at = detect_template(g);
        cr_gguf_close(&g);
        if (!strcmp(mt, REG_MT_MODEL) && (st = check_arch(b, hex, err)))
            return st;
        uint64_t size = 0;
        reg_store_blob_exists(b->s, hex, &size);
        if (reg_manifest_add(&b->man, mt, hex, (int64_t)size, NULL, NULL))
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        if (at) {
            st = add_auto_template(b, at, err);
            if (st)
                return st;
        }
    }
    return CR_OK;
}

bool reg_create_runs_long(const reg_store_t *s, const msg_create_body_t *req)
{
    if ((req->has_quantize && req->quantize && *req->quantize) ||
        reg_create_needs_pull(s, req))
        return true;
    for (size_t i = 0; req->has_files && i < req->files.n; i++)
        if (req->files.v[i].name && reg_hf_is_folder_file(req->files.v[i].name))
            return true;
    for (size_t i = 0; req->has_adapters && i < req->adapters.n; i++)
        if (req->adapters.v[i].name && reg_peft_is_folder_file(req->adapters.v[i].name))
            return true;
    return false;
}

bool reg_create_needs_pull(const reg_store_t *s, const msg_create_body_t *req)
{
    cr_model_name_t name, stored;
    if (!req->from || !*req->from || cr_model_name_parse(req->from, &name, NULL))
        return false;
    return reg_store_manifest_find(s, &name, &stored) == CR_E_NOT_FOUND;
}

static cr_status_t from_model(build_t *b, const char *from, cr_err_t *err)
{
    cr_model_name_t fname;
    if (cr_model_name_parse(from, &fname, NULL))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    reg_model_t *base = NULL;
    cr_status_t st = reg_model_load(b->s, &fname, &base, err);
    if (st == CR_E_NOT_FOUND)
        return cr_err_set(err, st, "model \"%s\" not found", from);
    if (st)
        return st;
    for (size_t i = 0; !st && i < base->manifest.n_layers; i++) {
        const reg_layer_t *l = &base->manifest.layers[i];
        /* Kept until the manifest is written, though `from` be deleted or
         * replaced meanwhile. */
        if (pin(b, l->hex, true, err)) {
            st = cr_err_set(err, CR_E_NOT_FOUND, "model \"%s\": blob sha256:%s is "
                            "missing", from, l->hex);
            break;
        }
        if (!strcmp(l->media_type, REG_MT_MODEL) ||
            !strcmp(l->media_type, REG_MT_PROJECTOR) ||
            !strcmp(l->media_type, REG_MT_ADAPTER)) {
            cr_gguf_t *g = NULL;
            st = open_blob_gguf(b, l->hex, &g, err);
            if (st)
                break;
            note_gguf(b, g);
            cr_gguf_close(&g);
        }
        if (reg_manifest_add(&b->man, l->media_type, l->hex, l->size,
                             base->display, l->name))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    if (!st && base->params)
        b->params = json_incref(base->params);
    /* A derived model keeps its base's renderer and parser (Ollama's
     * create does the same) unless the request names its own. */
    const char *br = reg_model_config_str(base, "renderer");
    const char *bp = reg_model_config_str(base, "parser");
    const char *bd = reg_model_config_str(base, "draft"); /* its draft layer came along */
    if (!st && ((*br && !(b->inherited_renderer = strdup(br))) ||
                (*bp && !(b->inherited_parser = strdup(bp))) ||
                (*bd && !(b->draft_name = strdup(bd)))))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    reg_model_destroy(&base);
    return st;
}

static json_t *message_json(const msg_message_t *m)
{
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(m->role ? m->role : ""));
    json_object_set_new(o, "content",
                        json_string(m->has_content && m->content ? m->content : ""));
    if (m->has_thinking && m->thinking && *m->thinking)
        json_object_set_new(o, "thinking", json_string(m->thinking));
    if (m->has_images && m->images.n) {
        json_t *imgs = json_array();
        for (size_t i = 0; i < m->images.n; i++)
            json_array_append_new(imgs, json_string(m->images.v[i]));
        json_object_set_new(o, "images", imgs);
    }
    if (m->has_tool_calls && m->tool_calls && *m->tool_calls) {
        json_t *tc = json_loads(m->tool_calls, 0, NULL);
        if (tc)
            json_object_set_new(o, "tool_calls", tc);
    }
    if (m->has_tool_name && m->tool_name && *m->tool_name)
        json_object_set_new(o, "tool_name", json_string(m->tool_name));
    if (m->has_tool_call_id && m->tool_call_id && *m->tool_call_id)
        json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
    return o;
}

static void warn_param(void *ctx, const char *key, const char *why)
{
    CR_UNUSED(ctx);
    cr_log_warn("create: ignoring %s parameter '%s'", why, key);
}

static cr_status_t write_config(build_t *b, cr_err_t *err)
{
    json_t *cfg = json_object();
    json_object_set_new(cfg, "model_format", json_string(b->format));
    json_object_set_new(cfg, "model_family", json_string(b->family));
    json_object_set_new(cfg, "model_families", json_incref(b->families));
    json_object_set_new(cfg, "model_type", json_string(b->model_type));
    json_object_set_new(cfg, "file_type", json_string(b->file_type));
    if (b->renderer && *b->renderer)
        json_object_set_new(cfg, "renderer", json_string(b->renderer));
    if (b->parser && *b->parser)
        json_object_set_new(cfg, "parser", json_string(b->parser));
    if (b->draft_name)
        json_object_set_new(cfg, "draft", json_string(b->draft_name));
    json_object_set_new(cfg, "architecture", json_string(HOST_ARCH));
    json_object_set_new(cfg, "os", json_string("linux"));
    json_t *rootfs = json_object();
    json_t *diff = json_array();
    for (size_t i = 0; i < b->man.n_layers; i++) {
        char d[8 + REG_HEX_LEN];
        snprintf(d, sizeof d, "sha256:%s", b->man.layers[i].hex);
        json_array_append_new(diff, json_string(d));
    }
    json_object_set_new(rootfs, "type", json_string("layers"));
    json_object_set_new(rootfs, "diff_ids", diff);
    json_object_set_new(cfg, "rootfs", rootfs);
    cr_buf_t text;
    cr_buf_init(&text, REG_CONFIG_MAX);
    cr_status_t st = reg_gojson_dump_line(cfg, &text);
    json_decref(cfg);
    char hex[REG_HEX_LEN + 1];
    if (!st)
        st = put_blob(b, text.data, text.len, hex, err);
    else
        cr_err_set(err, st, "encoding config: %s", cr_status_str(st));
    if (!st && reg_manifest_set_config(&b->man, hex, (int64_t)text.len))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_buf_free(&text);
    return st;
}

/* The request's `draft`: the named model's weights become the draft layer
 * (the same blob, shared) once its vocabulary is the model's. */
static cr_status_t add_draft(build_t *b, const char *name, cr_err_t *err)
{
    cr_model_name_t dn;
    if (cr_model_name_parse(name, &dn, NULL))
        return cr_err_set(err, CR_E_INVALID, "draft: " CR_NAME_INVALID_MSG);
    const reg_layer_t *tl = reg_manifest_find(&b->man, REG_MT_MODEL);
    if (!tl)
        return cr_err_set(err, CR_E_INVALID, "draft: the model has no weights to speculate for");
    reg_model_t *dm = NULL;
    cr_status_t st = reg_model_load(b->s, &dn, &dm, err);
    if (st == CR_E_NOT_FOUND)
        return cr_err_set(err, CR_E_INVALID, "draft model \"%s\" not found", name);
    if (st)
        return st;
    cr_gguf_t *tg = NULL, *dg = NULL;
    if (!dm->model_layer)
        st = cr_err_set(err, CR_E_INVALID, "draft model \"%s\" has no weights", name);
    else if (!(st = pin(b, dm->model_layer->hex, false, err)) &&
             !(st = open_blob_gguf(b, tl->hex, &tg, err)) &&
             !(st = open_blob_gguf(b, dm->model_layer->hex, &dg, err)))
        st = reg_draft_check_vocab(tg, dg, dm->display, err);
    if (!st) {
        free(b->draft_name);
        reg_manifest_remove(&b->man, REG_MT_DRAFT);
        if (!(b->draft_name = strdup(dm->display)) ||
            reg_manifest_add(&b->man, REG_MT_DRAFT, dm->model_layer->hex, dm->model_layer->size,
                             dm->display, NULL))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    cr_gguf_close(&tg);
    cr_gguf_close(&dg);
    reg_model_destroy(&dm);
    return st;
}

/* ---- quantize ---- */

typedef struct quant_progress {
    build_t *b;
    char status[96];
} quant_progress_t;

static void on_quant_progress(void *ctx, int64_t done, int64_t total)
{
    quant_progress_t *q = ctx;
    if (!q->b->fn)
        return;
    msg_progress_body_t p = {.status = q->status, .has_status = true,
                             .digest = QUANT_DIGEST, .has_digest = true,
                             .total = total, .has_total = true,
                             .completed = done, .has_completed = true};
    q->b->fn(q->b->ctx, &p);
}

/* CR_E_CANCELED once the client has left: a create it no longer waits
 * for stops before its next long step and before its manifest. */
static cr_status_t check_cancel(const build_t *b, cr_err_t *err)
{
    if (b->cancel && atomic_load(b->cancel))
        return cr_err_set(err, CR_E_CANCELED, "canceled");
    return CR_OK;
}

/* Streams the file at path into the store; *hex and *size describe the
 * blob. */
static cr_status_t store_file(build_t *b, const char *path,
                              char hex[REG_HEX_LEN + 1], int64_t *size,
                              cr_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    reg_blob_writer_t *w = NULL;
    char *buf = malloc(COPY_CHUNK);
    cr_status_t st = buf ? reg_blob_writer_new(b->s, NULL, &w, err)
                         : cr_err_set(err, CR_E_NOMEM, "out of memory");
    while (!st && !(st = check_cancel(b, err))) {
        ssize_t n = read(fd, buf, COPY_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            st = cr_err_set(err, CR_E_IO, "read %s: %s", path, strerror(errno));
        if (n <= 0)
            break;
        st = reg_blob_writer_write(w, buf, (size_t)n, err);
    }
    bool created = false;
    if (!st) {
        *size = (int64_t)reg_blob_writer_size(w);
        st = reg_blob_writer_finish(w, hex, &created, err);
    }
    /* An equal blob that was there (created false) may have been pruned
     * since: then this create fails rather than name a missing blob. */
    if (!st && (st = pin(b, hex, true, err)) == CR_E_NOT_FOUND)
        st = cr_err_set(err, CR_E_IO, "blob sha256:%s was removed while it was "
                        "stored; try again", hex);
    if (!st && created)
        st = note_created(b, hex, err);
    reg_blob_writer_destroy(&w);
    free(buf);
    close(fd);
    return st;
}

/* Replaces the model layer with its quantization to type (canonical name,
 * GGUF file type ftype). */
static cr_status_t quantize_model(build_t *b, const char *type, uint32_t ftype,
                                  cr_err_t *err)
{
    reg_layer_t *layer = NULL;
    for (size_t i = 0; i < b->man.n_layers && !layer; i++)
        if (!strcmp(b->man.layers[i].media_type, REG_MT_MODEL))
            layer = &b->man.layers[i];
    if (!layer)
        return cr_err_set(err, CR_E_INVALID, "no model layer to quantize");
    char src[REG_PATH_MAX], out[REG_PATH_MAX];
    if (!reg_store_blob_path(b->s, layer->hex, src, sizeof src))
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int w = snprintf(out, sizeof out, "%s/blobs/.corral-tmp-quantize-%ld-%ld.gguf",
                     reg_store_root(b->s), (long)getpid(), (long)ts.tv_nsec);
    if (w < 0 || (size_t)w >= sizeof out)
        return cr_err_set(err, CR_E_TOO_LARGE, "store path too long");

    quant_progress_t qp = {.b = b};
    snprintf(qp.status, sizeof qp.status, "quantizing %s model to %s",
             b->file_type, type);
    cr_status_t st = reg_quantize_run(src, out, type, b->cancel,
                                      on_quant_progress, &qp, err);
    if (st || (st = check_cancel(b, err)))
        goto out;
    progress(b, "verifying conversion");
    cr_gguf_t *g = NULL;
    cr_err_t gerr;
    if (cr_gguf_open(out, &g, &gerr)) {
        st = cr_err_set(err, CR_E_RUNNER, "quantized model is not valid GGUF: %s",
                        gerr.msg);
        goto out;
    }
    uint32_t got = 0;
    bool ok = cr_gguf_get_u32(g, "general.file_type", &got) && got == ftype;
    cr_gguf_close(&g);
    if (!ok) {
        st = cr_err_set(err, CR_E_RUNNER, "quantized model has file type %s, "
                        "not %s", cr_file_type_name(got), type);
        goto out;
    }
    char hex[REG_HEX_LEN + 1];
    int64_t size = 0;
    st = store_file(b, out, hex, &size, err);
    if (st)
        goto out;
    memcpy(layer->hex, hex, sizeof layer->hex);
    layer->size = size;
    free(layer->from);
    free(layer->name);
    layer->from = layer->name = NULL;
    snprintf(b->file_type, sizeof b->file_type, "%s", type);
out:
    unlink(out);
    return st;
}

/* Refuses a renderer or parser name corral does not have, naming it and
 * the known ones (Ollama would fail only at the first chat). */
static cr_status_t check_format(cr_format_kind_t kind, const char *name,
                                cr_err_t *err)
{
    if (!name || !*name || cr_format_is_known(kind, name))
        return CR_OK;
    char known[256];
    cr_format_names(kind, known, sizeof known);
    return cr_err_set(err, CR_E_INVALID, "unknown %s \"%s\" (built-in %ss: %s)",
                      cr_format_kind_name(kind), name, cr_format_kind_name(kind),
                      known);
}

/* A TEMPLATE that does not parse would fail every generate: the create
 * fails instead, with the parser's error. Without a runner binary to ask,
 * the generate reports it (logged). */
static cr_status_t check_go_template(build_t *b, cr_err_t *err)
{
    const reg_layer_t *l = reg_manifest_find(&b->man, REG_MT_TEMPLATE);
    char path[REG_PATH_MAX];
    if (!l || !reg_store_blob_path(b->s, l->hex, path, sizeof path))
        return CR_OK;
    cr_err_t cerr;
    cr_err_clear(&cerr);
    cr_status_t st = reg_go_template_check(path, &cerr);
    if (st == CR_E_INVALID)
        return cr_err_set(err, st, "%s", cerr.msg);
    if (st)
        cr_log_warn("create: template not checked: %s", cerr.msg);
    return CR_OK;
}

/* A text layer over REG_TEXT_LAYER_MAX is refused (CR_E_TOO_LARGE). */
static cr_status_t check_text_size(const char *what, bool has, const char *text,
                                   cr_err_t *err)
{
    size_t n = has && text ? strlen(text) : 0;
    if (n > REG_TEXT_LAYER_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s is %zu bytes; at most %u",
                          what, n, REG_TEXT_LAYER_MAX);
    return CR_OK;
}

static cr_status_t build_layers(build_t *b, const msg_create_body_t *req,
                                cr_err_t *err)
{
    cr_status_t st;
    const char *renderer = req->has_renderer ? req->renderer : NULL;
    const char *parser = req->has_parser ? req->parser : NULL;
    if ((st = check_format(CR_FORMAT_RENDERER, renderer, err)) ||
        (st = check_format(CR_FORMAT_PARSER, parser, err)))
        return st;
    bool has_from = req->has_from && req->from && *req->from;
    if (has_from)
        st = from_model(b, req->from, err);
    else if (req->has_files)
        st = from_files(b, req->files.v, req->files.n, false, err);
    else
        return cr_err_set(err, CR_E_INVALID,
                          "neither 'from' or 'files' was specified");
    if (st)
        return st;
    b->renderer = renderer && *renderer ? renderer : b->inherited_renderer;
    b->parser = parser && *parser ? parser : b->inherited_parser;
    if (req->has_adapters && req->adapters.n) {
        st = from_files(b, req->adapters.v, req->adapters.n, true, err);
        if (st)
            return st;
    }
    if (req->has_draft && req->draft && *req->draft && (st = add_draft(b, req->draft, err)))
        return st;

    const char *qtype = NULL;
    uint32_t qftype = 0;
    if (req->has_quantize && req->quantize && *req->quantize) {
        if (strcmp(b->file_type, "F16") && strcmp(b->file_type, "BF16") &&
            strcmp(b->file_type, "F32"))
            return cr_err_set(err, CR_E_INVALID,
                              "quantization is only supported for F16, BF16 "
                              "and F32 models");
        qtype = reg_quantize_type(req->quantize, &qftype);
        if (!qtype)
            return cr_err_set(err, CR_E_INVALID,
                              "unsupported quantization type %s",
                              req->quantize);
    }

    /* Sizes the store reads back (model.c caps every layer it loads): a
     * model over them would be created and then fail every show and
     * generate. */
    if ((st = check_text_size("template", req->has_template, req->template, err)) ||
        (st = check_text_size("system", req->has_system, req->system, err)))
        return st;
    for (size_t i = 0; req->has_license && i < req->license.n; i++)
        if ((st = check_text_size("license", true, req->license.v[i], err)))
            return st;
    if (req->has_messages && req->messages.n > REG_MESSAGES_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "%zu messages; a model stores at most %u",
                          req->messages.n, REG_MESSAGES_MAX);

    /* Validate parameters before anything is written. */
    json_t *newp = NULL;
    if (req->has_parameters && req->parameters && *req->parameters) {
        json_error_t jerr;
        json_t *in = json_loads(req->parameters, JSON_REJECT_DUPLICATES, &jerr);
        if (!in)
            return cr_err_set(err, CR_E_INVALID, "parameters: %s", jerr.text);
        st = reg_params_validate(in, warn_param, NULL, &newp, err);
        json_decref(in);
        if (st)
            return st;
    }

    if (req->has_template && req->template && *req->template) {
        reg_manifest_remove(&b->man, REG_MT_TEMPLATE);
        reg_manifest_remove(&b->man, REG_MT_PROMPT);
        st = add_blob_layer(b, REG_MT_TEMPLATE, req->template,
                            strlen(req->template), err);
        if (!st)
            st = check_go_template(b, err);
    }
    if (!st && req->has_system && req->system && *req->system) {
        reg_manifest_remove(&b->man, REG_MT_SYSTEM);
        st = add_blob_layer(b, REG_MT_SYSTEM, req->system, strlen(req->system),
                            err);
    }
    for (size_t i = 0; !st && req->has_license && i < req->license.n; i++) {
        const char *l = req->license.v[i];
        if (l && *l)
            st = add_blob_layer(b, REG_MT_LICENSE, l, strlen(l), err);
    }
    if (!st) {
        json_t *merged = json_object();
        if (b->params)
            reg_params_merge(merged, b->params);
        if (newp)
            reg_params_merge(merged, newp);
        if (json_object_size(merged) > 0) {
            reg_manifest_remove(&b->man, REG_MT_PARAMS);
            st = add_json_layer(b, REG_MT_PARAMS, merged, err);
        }
        json_decref(merged);
    }
    json_decref(newp);
    if (!st && req->has_messages && req->messages.n > 0) {
        reg_manifest_remove(&b->man, REG_MT_MESSAGES);
        json_t *arr = json_array();
        for (size_t i = 0; i < req->messages.n; i++)
            json_array_append_new(arr, message_json(&req->messages.v[i]));
        st = add_json_layer(b, REG_MT_MESSAGES, arr, err);
        json_decref(arr);
    }
    /* Last, so that bad parameters fail before minutes of work. */
    if (!st && qtype)
        st = quantize_model(b, qtype, qftype, err);
    return st;
}

/* Without a template layer the runner renders the GGUF's own Jinja chat
 * template: one it cannot parse fails the create here, naming the
 * construct. Without a runner binary to ask, the load reports it instead.
 * Sets b->parser from the template when neither PARSER nor RENDERER is. */
static cr_status_t check_jinja(build_t *b, cr_err_t *err)
{
    if (reg_manifest_find(&b->man, REG_MT_TEMPLATE))
        return CR_OK;
    const reg_layer_t *model = reg_manifest_find(&b->man, REG_MT_MODEL);
    char path[REG_PATH_MAX];
    if (!model || !reg_store_blob_path(b->s, model->hex, path, sizeof path))
        return CR_OK;
    cr_gguf_t *g = NULL;
    cr_gguf_str_t src;
    bool has_jinja = false;
    if (!open_blob_gguf(b, model->hex, &g, NULL))
        has_jinja = cr_gguf_get_str(g, "tokenizer.chat_template", &src) && src.len;
    /* The built-in parser matching the template's output format is stored
     * as the model's PARSER (show lists it; the runner splits by it). */
    if (has_jinja && !(b->parser && *b->parser) && !(b->renderer && *b->renderer))
        b->parser = cr_jinja_parser_infer(src.ptr, (size_t)src.len);
    cr_gguf_close(&g);
    if (!has_jinja)
        return CR_OK;
    progress(b, "checking the chat template");
    cr_err_t cerr = {0};
    cr_status_t st = reg_template_check(path, &cerr);
    if (st == CR_E_NOT_FOUND || st == CR_E_IO || st == CR_E_RUNNER) {
        cr_log_warn("create: chat template not checked: %s", cerr.msg);
        return CR_OK;
    }
    if (st)
        return cr_err_set(err, st, "%s", cerr.msg);
    return CR_OK;
}

typedef struct status_only {
    reg_progress_fn fn;
    void *ctx;
} status_only_t;

static void forward_status(void *ctx, const msg_progress_body_t *p)
{
    status_only_t *so = ctx;
    so->fn(so->ctx, p->status);
}

cr_status_t reg_create(reg_store_t *s, const msg_create_body_t *req,
                       reg_progress_fn fn, void *ctx, cr_err_t *err)
{
    status_only_t so = {fn, ctx};
    return reg_create_ex(s, req, NULL, fn ? forward_status : NULL, &so, err);
}

cr_status_t reg_create_ex(reg_store_t *s, const msg_create_body_t *req,
                          const atomic_bool *cancel,
                          reg_create_progress_fn fn, void *ctx,
                          cr_err_t *err)
{
    cr_model_name_t name;
    if (!req->model || cr_model_name_parse(req->model, &name, NULL))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);

    build_t b = {.s = s, .fn = fn, .ctx = ctx, .cancel = cancel};
    reg_manifest_t old = {0};
    bool locked = false;
    cr_buf_t text;
    cr_buf_init(&text, REG_MANIFEST_MAX);
    cr_status_t st = reg_manifest_init(&b.man);
    b.families = json_array();
    if (st || !b.families) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    st = build_layers(&b, req, err);
    if (st)
        goto out;
    st = check_jinja(&b, err);
    if (st)
        goto out;
    st = write_config(&b, err);
    if (st)
        goto out;
    for (size_t i = 0; i < b.man.n_layers; i++) {
        const char *hex = b.man.layers[i].hex;
        bool created = was_created(&b, hex);
        if (!created)
            reg_store_blob_touch(s, hex);
        if (b.auto_name && !strcmp(hex, b.auto_hex) &&
            !strcmp(b.man.layers[i].media_type, REG_MT_TEMPLATE))
            progress(&b, "using autodetected template %s", b.auto_name);
        else
            progress(&b, "%s sha256:%s",
                     created ? "creating new layer" : "using existing layer",
                     hex);
    }
    if ((st = check_cancel(&b, err)))
        goto out;
    progress(&b, "writing manifest");
    st = reg_manifest_encode(&b.man, &text);
    if (st) {
        cr_err_set(err, st, "encoding manifest: %s", cr_status_str(st));
        goto out;
    }
    /* The commit (store.h): the manifest this one replaces is read under
     * the lock, so of two creates or a create and a pull of one name the
     * later prunes what the earlier wrote. An existing model of the same
     * name (any case) is replaced in place. */
    reg_store_lock(s);
    locked = true;
    cr_model_name_t stored;
    bool have_old = false;
    if (reg_store_manifest_find(s, &name, &stored) == CR_OK) {
        name = stored;
        char *bytes = NULL;
        size_t len = 0;
        if (!reg_store_manifest_read(s, &name, &bytes, &len, NULL, NULL) &&
            !reg_manifest_parse(bytes, len, &old, NULL))
            have_old = true;
        free(bytes);
    }
    st = reg_store_manifest_write(s, &name, text.data, text.len, err);
    if (st)
        goto out;
    unpin_all(&b); /* the manifest names them now */
    /* A blob this create wrote but then replaced (an autodetected template
     * overridden by the request's) is referenced by nothing, unless a
     * create or pull running beside this one took it too. */
    reg_manifest_t orphans = {0};
    for (size_t i = 0; i < b.n_created; i++)
        if (!reg_manifest_references(&b.man, b.created[i]))
            reg_manifest_add(&orphans, REG_MT_MODEL, b.created[i], 0, NULL, NULL);
    if (orphans.n_layers)
        reg_prune_unreferenced(s, &orphans);
    reg_manifest_free(&orphans);
    if (have_old && !cr_env_bool("NOPRUNE", false))
        reg_prune_unreferenced(s, &old);
    reg_store_unlock(s);
    locked = false;
    progress(&b, "success");
out:
    if (locked)
        reg_store_unlock(s);
    unpin_all(&b);
    if (st && b.n_created) {
        /* Nothing will reference what this failed create wrote, unless a
         * create or pull beside it took the same blob (pinned, or named by
         * a manifest by now: the prune keeps it). */
        reg_manifest_t wrote = {0};
        for (size_t i = 0; i < b.n_created; i++)
            reg_manifest_add(&wrote, REG_MT_MODEL, b.created[i], 0, NULL, NULL);
        reg_prune_unreferenced(s, &wrote);
        reg_manifest_free(&wrote);
    }
    cr_buf_free(&text);
    reg_manifest_free(&b.man);
    reg_manifest_free(&old);
    json_decref(b.params);
    json_decref(b.families);
    free(b.inherited_renderer);
    free(b.inherited_parser);
    free(b.draft_name);
    free(b.created);
    free(b.pinned);
    return st;
}
