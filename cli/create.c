/* create.c: `corral create MODEL -f Modelfile`.
 *
 * Parses the Modelfile here (client side, as Ollama does), hashes every
 * local file it names (FROM, ADAPTER, DRAFT) with SHA-256, uploads the
 * blobs the server lacks (HEAD then POST /api/blobs/sha256:<hex>), and sends
 * POST /api/create with `files` {basename: digest} and the other fields,
 * drawing the uploads and the server's progress on stderr (progress.h). A
 * FROM naming a model the server lacks is pulled by the server first
 * (`--insecure` allows a plain-http registry for that pull). */
#include "lib/prelude.h"
#include "cli/cli.h"
#include "cli/modelfile.h"
#include "cli/progress.h"

#include <dirent.h>
#include <fnmatch.h>
#include <libgen.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#define MAX_DIR_FILES 1024

/* SHA-256 of a file as "sha256:<64 hex>". */
static cr_status_t file_digest(const char *path, char out[72], uint64_t *size,
                               cr_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char *buf = NULL;
    cr_status_t st = CR_OK;
    if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        st = cr_err_set(err, CR_E_INTERNAL, "sha256: cannot initialize");
        goto out;
    }
    enum { CHUNK = 1 << 20 };
    buf = malloc(CHUNK);
    if (!buf) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    uint64_t total = 0;
    size_t n;
    while ((n = fread(buf, 1, CHUNK, f)) > 0) {
        if (EVP_DigestUpdate(md, buf, n) != 1) {
            st = cr_err_set(err, CR_E_INTERNAL, "sha256: update failed");
            goto out;
        }
        total += n;
    }
    if (ferror(f)) {
        st = cr_err_set(err, CR_E_IO, "read %s: %s", path, strerror(errno));
        goto out;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    if (EVP_DigestFinal_ex(md, digest, &dlen) != 1 || dlen != 32) {
        st = cr_err_set(err, CR_E_INTERNAL, "sha256: final failed");
        goto out;
    }
    strcpy(out, "sha256:");
    for (unsigned int i = 0; i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", digest[i]);
    *size = total;
out:
    free(buf);
    EVP_MD_CTX_free(md);
    fclose(f);
    return st;
}

typedef struct upload {
    cli_progress_t *p;
    const char *digest;
} upload_t;

static void upload_progress(void *ctx, uint64_t sent, uint64_t total)
{
    upload_t *u = ctx;
    if (!total)
        return;
    char msg[128];
    snprintf(msg, sizeof msg, "copying file %s %d%%", u->digest, (int)(sent * 100 / total));
    cli_progress_message(u->p, msg);
}

/* Makes sure the server has the blob for path; fills digest. */
static cr_status_t ensure_blob(cli_http_t *h, const char *path, char digest[72],
                               cli_progress_t *prog, cr_err_t *err)
{
    uint64_t size = 0;
    cr_status_t st = file_digest(path, digest, &size, err);
    if (st)
        return st;
    char url[128];
    snprintf(url, sizeof url, "/api/blobs/%s", digest);
    long code = 0;
    if ((st = cli_http_head(h, url, &code, err)))
        return st;
    if (code == 200)
        return CR_OK;
    if (code != 404)
        return cr_err_set(err, CR_E_INTERNAL, "HEAD %s: HTTP status %ld", url, code);
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    char msg[128];
    snprintf(msg, sizeof msg, "copying file %s", digest);
    cli_progress_phase(prog, msg);
    snprintf(msg, sizeof msg, "copying file %s 0%%", digest);
    cli_progress_message(prog, msg); /* a terminal shows the percentage */
    upload_t u = {prog, digest};
    st = cli_http_post_file(h, url, f, size, upload_progress, &u, &code, err);
    fclose(f);
    if (st)
        return st;
    snprintf(msg, sizeof msg, "copying file %s 100%%", digest);
    cli_progress_message(prog, msg);
    return CR_OK;
}

/* Adds {basename(path): digest} to map after uploading the blob. */
static cr_status_t add_file(cli_http_t *h, json_t *map, const char *path, cli_progress_t *p,
                            cr_err_t *err)
{
    char digest[72];
    cr_status_t st = ensure_blob(h, path, digest, p, err);
    if (st)
        return st;
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    if (json_object_set_new(map, basename(copy), json_string(digest)))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    return CR_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The model files of a directory: *.gguf, or safetensors with their JSON
 * and tokenizer files. */
static cr_status_t add_dir(cli_http_t *h, json_t *map, const char *dir, cli_progress_t *p,
                           cr_err_t *err)
{
    static const char *const model_globs[] = {"*.gguf", "model*.safetensors",
                                              "adapter_model*.safetensors",
                                              "consolidated*.safetensors"};
    static const char *const extra_globs[] = {"*.json", "tokenizer.model",
                                              "chat_template.jinja"};
    DIR *d = opendir(dir);
    if (!d)
        return cr_err_set(err, CR_E_IO, "open %s: %s", dir, strerror(errno));
    char *names[MAX_DIR_FILES];
    size_t n = 0;
    bool has_model = false, is_gguf = false;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_DIR_FILES) {
        for (size_t g = 0; g < CR_ARRAY_LEN(model_globs); g++) {
            if (!fnmatch(model_globs[g], e->d_name, 0)) {
                has_model = true;
                is_gguf |= g == 0;
            }
        }
        bool want = false;
        for (size_t g = 0; g < CR_ARRAY_LEN(model_globs); g++)
            want |= !fnmatch(model_globs[g], e->d_name, 0);
        for (size_t g = 0; g < CR_ARRAY_LEN(extra_globs); g++)
            want |= !fnmatch(extra_globs[g], e->d_name, 0);
        if (want && !(names[n++] = strdup(e->d_name))) {
            n--;
            break;
        }
    }
    closedir(d);
    cr_status_t st = CR_OK;
    if (!has_model)
        st = cr_err_set(err, CR_E_NOT_FOUND, "no Modelfile or safetensors files found in %s",
                        dir);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n && !st; i++) {
        /* a GGUF directory sends only its .gguf files */
        if (is_gguf && fnmatch("*.gguf", names[i], 0))
            continue;
        char path[PATH_MAX];
        int w = snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (w < 0 || (size_t)w >= sizeof path)
            continue; /* a name too long to open */
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode))
            continue;
        st = add_file(h, map, path, p, err);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    return st;
}

/* FROM/ADAPTER/DRAFT: a local file or directory goes into `map`; for FROM
 * and DRAFT a missing path is a model name (*is_name set). */
static cr_status_t local_source(cli_http_t *h, const cli_mf_command_t *c, const char *rel_dir,
                                json_t *map, bool *is_name, cli_progress_t *p, cr_err_t *err)
{
    char path[PATH_MAX];
    *is_name = false;
    cr_status_t st = cli_mf_expand_path(c->args, rel_dir, path, sizeof path, err);
    bool may_be_name = c->kind == CLI_MF_FROM || c->kind == CLI_MF_DRAFT;
    if (st && may_be_name) {
        *is_name = true; /* "~nobody" and the like: a name, let the server judge */
        return CR_OK;
    }
    if (st)
        return st;
    struct stat sb;
    if (stat(path, &sb)) {
        if (errno == ENOENT && may_be_name) {
            *is_name = true;
            return CR_OK;
        }
        return cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return add_dir(h, map, path, p, err);
    return add_file(h, map, path, p, err);
}

static bool create_line(void *ctx, json_t *obj)
{
    cli_progress_event(ctx, obj);
    return true;
}

/* Builds and sends the create request for a parsed Modelfile. */
static cr_status_t create_from(cli_ctx_t *ctx, const char *model, const cli_modelfile_t *mf,
                               const char *rel_dir, const char *quantize, bool insecure,
                               cr_err_t *err)
{
    cli_http_t *h;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = json_pack("{s:s, s:b}", "model", model, "stream", 1);
    json_t *files = json_object(), *adapters = json_object(), *drafts = json_object();
    json_t *licenses = json_array(), *messages = json_array(), *params = NULL;
    cli_progress_t *p = cli_progress_new(stderr, ctx->stderr_tty, 0, "creating");
    if (!req || !files || !adapters || !drafts || !licenses || !messages || !p) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if (insecure && json_object_set_new(req, "insecure", json_true())) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    cli_progress_phase(p, "gathering model components");
    for (size_t i = 0; i < mf->n && !st; i++) {
        const cli_mf_command_t *c = &mf->cmds[i];
        bool is_name = false;
        int rc = 0;
        switch (c->kind) {
        case CLI_MF_FROM:
            st = local_source(h, c, rel_dir, files, &is_name, p, err);
            if (!st && is_name)
                rc = json_object_set_new(req, "from", json_string(c->args));
            break;
        case CLI_MF_ADAPTER:
            st = local_source(h, c, rel_dir, adapters, &is_name, p, err);
            break;
        case CLI_MF_DRAFT:
            st = local_source(h, c, rel_dir, drafts, &is_name, p, err);
            if (!st && is_name)
                rc = json_object_set_new(req, "draft", json_string(c->args));
            break;
        case CLI_MF_TEMPLATE:
            rc = json_object_set_new(req, "template", json_string(c->args));
            break;
        case CLI_MF_SYSTEM:
            rc = json_object_set_new(req, "system", json_string(c->args));
            break;
        case CLI_MF_LICENSE:
            rc = json_array_append_new(licenses, json_string(c->args));
            break;
        case CLI_MF_MESSAGE:
            rc = json_array_append_new(messages, json_pack("{s:s, s:s}", "role", c->name,
                                                           "content", c->args));
            break;
        case CLI_MF_REQUIRES:
            rc = json_object_set_new(req, "requires",
                                     json_string(c->args[0] == 'v' ? c->args + 1 : c->args));
            break;
        case CLI_MF_RENDERER:
            rc = json_object_set_new(req, "renderer", json_string(c->args));
            break;
        case CLI_MF_PARSER:
            rc = json_object_set_new(req, "parser", json_string(c->args));
            break;
        case CLI_MF_PARAMETER:
            break;
        }
        if (rc && !st)
            st = cr_err_set(err, CR_E_INVALID, "line %d: value is not valid UTF-8", c->line);
    }
    if (st)
        goto out;
    if ((st = cli_modelfile_params_json(mf, &params, err)))
        goto out;
    int rc = 0;
    if (json_object_size(files))
        rc |= json_object_set(req, "files", files);
    if (json_object_size(adapters))
        rc |= json_object_set(req, "adapters", adapters);
    if (json_object_size(drafts))
        rc |= json_object_set(req, "draft_files", drafts);
    if (json_array_size(licenses))
        rc |= json_object_set(req, "license", licenses);
    if (json_array_size(messages))
        rc |= json_object_set(req, "messages", messages);
    if (json_object_size(params))
        rc |= json_object_set(req, "parameters", params);
    if (quantize && *quantize)
        rc |= json_object_set_new(req, "quantize", json_string(quantize));
    if (rc) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    st = cli_http_json(h, "POST", "/api/create", req, create_line, p, NULL, NULL, err);
out:
    cli_progress_destroy(&p);
    json_decref(req);
    json_decref(files);
    json_decref(adapters);
    json_decref(drafts);
    json_decref(licenses);
    json_decref(messages);
    json_decref(params);
    return st;
}

/* Reads a whole (bounded) file. */
static cr_status_t read_file(const char *path, char **out, size_t *len, cr_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    char *buf = malloc((size_t)CLI_MF_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, (size_t)CLI_MF_MAX_BYTES + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!buf)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (bad) {
        free(buf);
        return cr_err_set(err, CR_E_IO, "read %s", path);
    }
    if (n > CLI_MF_MAX_BYTES) {
        free(buf);
        return cr_err_set(err, CR_E_TOO_LARGE, "%s: larger than %u bytes", path,
                          CLI_MF_MAX_BYTES);
    }
    *out = buf;
    *len = n;
    return CR_OK;
}

cr_status_t cli_cmd_create(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("Create a model from a Modelfile\n\nUsage:\n  corral create MODEL [flags]\n\n"
               "Flags:\n  -f, --file string       Name of the Modelfile (default "
               "\"Modelfile\")\n"
               "  -q, --quantize string   Quantize model to this level (e.g. q4_K_M)\n"
               "      --insecure          Use an insecure registry to pull a FROM model\n");
        return CR_OK;
    }
    const char *file = NULL, *quantize = NULL, *model = NULL;
    bool insecure = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--insecure"))
            insecure = true;
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc)
            file = argv[++i];
        else if (!strncmp(a, "--file=", 7))
            file = a + 7;
        else if ((!strcmp(a, "-q") || !strcmp(a, "--quantize") ||
                  !strcmp(a, "--quantization")) && i + 1 < argc)
            quantize = argv[++i];
        else if (!strncmp(a, "--quantize=", 11))
            quantize = a + 11;
        else if (a[0] == '-')
            return cr_err_set(err, CR_E_INVALID, "unknown flag or missing value: %s", a);
        else if (model)
            return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received more");
        else
            model = a;
    }
    if (!model)
        return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received 0");

    /* No -f and no ./Modelfile: the current directory is the model. */
    char *text = NULL;
    size_t len = 0;
    cr_status_t st;
    bool implicit = !file;
    if (implicit && access("Modelfile", F_OK)) {
        text = strdup("FROM .\n");
        len = text ? strlen(text) : 0;
        st = text ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
        file = "Modelfile";
    } else {
        if (!file)
            file = "Modelfile";
        st = read_file(file, &text, &len, err);
    }
    if (st)
        return st;
    cli_modelfile_t *mf = NULL;
    st = cli_modelfile_parse(text, len, &mf, err);
    free(text);
    if (st)
        return st;
    for (size_t i = 0; i < mf->n_warnings; i++)
        printf("warning: %s\n", mf->warnings[i]);

    char abs[PATH_MAX], rel_dir[PATH_MAX];
    st = cli_mf_expand_path(file, ".", abs, sizeof abs, err);
    if (!st) {
        snprintf(rel_dir, sizeof rel_dir, "%s", dirname(abs));
        st = create_from(ctx, model, mf, rel_dir, quantize, insecure, err);
    }
    cli_modelfile_destroy(&mf);
    return st;
}
