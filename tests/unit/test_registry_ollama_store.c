/* test_registry_ollama_store.c: an existing Ollama store is read as is.
 *
 * The fixture is written byte for byte the way Ollama lays out its store
 * (OLLAMA_MODELS): compact Go-JSON manifests under
 * manifests/<host>/<namespace>/<model>/<tag>, blobs named sha256-<hex>, a
 * config blob with rootfs.diff_ids, a params layer, a template, a system
 * prompt and a license; plus a namespaced model, an hf.co model and a blob
 * still under its legacy `sha256:` name. The registry must list, show and
 * resolve them without rewriting anything it did not have to. */
#include "lib/prelude.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "proto/msg.h"
#include "services/registry/ops.h"
#include "services/registry/store.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

static char root_g[256];

static int rm_one(const char *p, const struct stat *sb, int f, struct FTW *w)
{
    CR_UNUSED(sb);
    CR_UNUSED(f);
    CR_UNUSED(w);
    return remove(p);
}

static void mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    mkdir(tmp, 0755);
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f)
        fclose(f);
}

/* Stores data as a blob (hex out) and returns its size. */
static size_t put_blob(const char *models, const void *data, size_t len,
                       char hex[65], bool legacy_name)
{
    reg_sha256_hex(data, len, hex);
    char path[1024];
    snprintf(path, sizeof path, "%s/blobs/sha256%c%s", models,
             legacy_name ? ':' : '-', hex);
    write_file(path, data, len);
    return len;
}

/* One layer of a manifest, as Go's json.Marshal writes it. */
static void layer(cr_buf_t *b, bool first, const char *media, const char *hex,
                  size_t size)
{
    cr_buf_printf(b,
                  "%s{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":%zu}",
                  first ? "" : ",", media, hex, size);
}

/* Writes a model the way `ollama pull` leaves it; returns the manifest's
 * hex digest in mdigest. */
static void write_model(const char *models, const char *rel_manifest,
                        const char *gguf_hex, size_t gguf_size,
                        bool with_extras, char mdigest[65])
{
    char t_hex[65], p_hex[65], s_hex[65], l_hex[65], c_hex[65];
    const char *tmpl = "{{ if .System }}<|system|>{{ .System }}{{ end }}"
                       "{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}"
                       "{{ end }}<|assistant|>";
    const char *params = "{\"stop\":[\"<|end|>\",\"<|user|>\"],"
                         "\"temperature\":0.6}";
    const char *system = "You are a helpful assistant.";
    const char *license = "MIT License\n\nCopyright (c) the authors";
    size_t t_size = put_blob(models, tmpl, strlen(tmpl), t_hex, false);
    size_t p_size = put_blob(models, params, strlen(params), p_hex, false);
    size_t s_size = put_blob(models, system, strlen(system), s_hex, false);
    size_t l_size = put_blob(models, license, strlen(license), l_hex, false);
    cr_buf_t cfg;
    cr_buf_init(&cfg, 1 << 16);
    cr_buf_printf(&cfg,
                  "{\"model_format\":\"gguf\",\"model_family\":\"llama\","
                  "\"model_families\":[\"llama\"],\"model_type\":\"8.0B\","
                  "\"file_type\":\"Q4_K_M\",\"architecture\":\"amd64\","
                  "\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\","
                  "\"diff_ids\":[\"sha256:%s\"]}}",
                  gguf_hex);
    size_t c_size = put_blob(models, cfg.data, cfg.len, c_hex, false);
    cr_buf_free(&cfg);

    cr_buf_t m;
    cr_buf_init(&m, 1 << 16);
    cr_buf_printf(&m,
                  "{\"schemaVersion\":2,\"mediaType\":\"application/"
                  "vnd.docker.distribution.manifest.v2+json\",\"config\":{"
                  "\"mediaType\":\"application/"
                  "vnd.docker.container.image.v1+json\",\"digest\":"
                  "\"sha256:%s\",\"size\":%zu},\"layers\":[",
                  c_hex, c_size);
    layer(&m, true, "application/vnd.ollama.image.model", gguf_hex, gguf_size);
    if (with_extras) {
        layer(&m, false, "application/vnd.ollama.image.template", t_hex, t_size);
        layer(&m, false, "application/vnd.ollama.image.license", l_hex, l_size);
        layer(&m, false, "application/vnd.ollama.image.system", s_hex, s_size);
        layer(&m, false, "application/vnd.ollama.image.params", p_hex, p_size);
    }
    cr_buf_puts(&m, "]}");
    char path[1024];
    snprintf(path, sizeof path, "%s/manifests/%s", models, rel_manifest);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(dir);
    write_file(path, m.data, m.len);
    reg_sha256_hex(m.data, m.len, mdigest);
    cr_buf_free(&m);
}

static const msg_model_entry_t *find_entry(const msg_t *r, const char *name)
{
    for (size_t i = 0; i < r->u.tags_reply.models.n; i++)
        if (!strcmp(r->u.tags_reply.models.v[i].name, name))
            return &r->u.tags_reply.models.v[i];
    return NULL;
}

int main(void)
{
    snprintf(root_g, sizeof root_g, "/tmp/corral-ollama-store-XXXXXX");
    if (!mkdtemp(root_g))
        return 1;
    char models[512], blobs[600];
    snprintf(models, sizeof models, "%s/models", root_g);
    snprintf(blobs, sizeof blobs, "%s/blobs", models);
    mkdirs(blobs);

    /* The weights: a small GGUF, stored once, shared by three models; the
     * hf.co model's weights still carry the legacy `sha256:` name. */
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    void *gguf = NULL;
    size_t gguf_len = 0;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write_memory(&so, &gguf, &gguf_len, &err), CR_OK);
    char g_hex[65];
    put_blob(models, gguf, gguf_len, g_hex, false);
    so.seed = 99;
    void *gguf2 = NULL;
    size_t gguf2_len = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&so, &gguf2, &gguf2_len, &err), CR_OK);
    char g2_hex[65];
    put_blob(models, gguf2, gguf2_len, g2_hex, true);

    char d1[65], d2[65], d3[65];
    write_model(models, "registry.ollama.ai/library/llama3.2/latest", g_hex,
                gguf_len, true, d1);
    write_model(models, "registry.ollama.ai/someone/tuned/v1", g_hex, gguf_len,
                false, d2);
    write_model(models, "hf.co/someone/repo-GGUF/Q4_K_M", g2_hex, gguf2_len,
                false, d3);

    reg_store_t *s = reg_store_new(models, &err);
    CHECK_MSG(s != NULL, "store: %s", err.msg);
    if (!s)
        return check_finish("registry_ollama_store");

    /* tags: Ollama's display names, manifest digests, sizes, details. */
    msg_t r;
    CHECK_EQ_INT(reg_op_tags(s, "t", &r, &err), CR_OK);
    CHECK_EQ_INT(r.u.tags_reply.models.n, 3);
    const msg_model_entry_t *e = find_entry(&r, "llama3.2:latest");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_STR(e->digest, d1);
        CHECK(e->size > (int64_t)gguf_len);
        CHECK_EQ_STR(e->details->family, "llama");
        CHECK_EQ_STR(e->details->parameter_size, "8.0B");
        CHECK_EQ_STR(e->details->quantization_level, "Q4_K_M");
        CHECK_EQ_STR(e->details->format, "gguf");
    }
    e = find_entry(&r, "someone/tuned:v1");
    CHECK(e && !strcmp(e->digest, d2));
    e = find_entry(&r, "hf.co/someone/repo-GGUF:Q4_K_M");
    CHECK(e && !strcmp(e->digest, d3));
    msg_clear(&r);

    /* show: template, system, parameters, license from their layers. */
    msg_show_body_t sreq = {0};
    sreq.model = "LLAMA3.2"; /* names match case-insensitively */
    sreq.has_model = true;
    CHECK_EQ_INT(reg_op_show(s, "s", &sreq, &r, &err), CR_OK);
    json_t *body = json_loads(r.u.show_reply.body ? r.u.show_reply.body : "",
                              0, NULL);
    const char *tmpl = json_string_value(json_object_get(body, "template"));
    CHECK(tmpl && strstr(tmpl, "<|assistant|>"));
    CHECK_EQ_STR(json_string_value(json_object_get(body, "system")),
                 "You are a helpful assistant.");
    const char *params = json_string_value(json_object_get(body, "parameters"));
    CHECK(params && strstr(params, "<|end|>") && strstr(params, "temperature"));
    CHECK(json_string_value(json_object_get(body, "license")) &&
          strstr(json_string_value(json_object_get(body, "license")), "MIT"));
    json_decref(body);
    msg_clear(&r);

    /* resolve: the weights blob, the params as options. */
    msg_resolve_body_t rreq = {0};
    rreq.model = "llama3.2";
    rreq.has_model = true;
    CHECK_EQ_INT(reg_op_resolve(s, "r", &rreq, &r, &err), CR_OK);
    CHECK(r.u.resolved.model_path && strstr(r.u.resolved.model_path, g_hex));
    CHECK(r.u.resolved.params && r.u.resolved.params->has_temperature);
    CHECK(r.u.resolved.params && r.u.resolved.params->stop.n == 2);
    msg_clear(&r);
    rreq.model = "hf.co/someone/repo-GGUF:Q4_K_M";
    CHECK_EQ_INT(reg_op_resolve(s, "r", &rreq, &r, &err), CR_OK);
    CHECK(r.u.resolved.model_path &&
          access(r.u.resolved.model_path, R_OK) == 0); /* legacy name fixed */
    msg_clear(&r);

    /* The manifests Ollama wrote are untouched. */
    char path[1024];
    snprintf(path, sizeof path,
             "%s/manifests/registry.ollama.ai/library/llama3.2/latest", models);
    FILE *f = fopen(path, "rb");
    char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    char hex[65];
    reg_sha256_hex(buf, n, hex);
    CHECK_EQ_STR(hex, d1);

    reg_store_destroy(&s);
    free(gguf);
    free(gguf2);
    nftw(root_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_finish("registry_ollama_store");
}
