/* test_gateway_console.c: the web console's files over real HTTP.
 *
 * A gateway on a private 127.0.0.1 port (no scheduler or registry: the
 * console's files need neither) answers /ui and every embedded file byte
 * for byte with its content type and the strict Content-Security-Policy;
 * index.html loads its scripts by src only (no inline script, nothing
 * from another origin); unknown names and nested paths are 404, other
 * methods 405; `/` still answers "Ollama is running". With an API key
 * set, the files are served without it while the API still asks for it,
 * and a "/ui/../api" path does not slip past the key. /api/console/status
 * asks for the key, answers 502 without a scheduler, and renders the
 * scheduler's status reply as documented (docs/api.md "Console status"). */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/gateway/auth.h"
#include "services/gateway/console.h"
#include "services/gateway/console_status.h"
#include "services/gateway/server.h"
#include "tests/unit/check.h"

#include <curl/curl.h>
#include <jansson.h>
#include <strings.h>

static int port_g;

typedef struct resp {
    long status;
    cr_buf_t body;
    char ctype[128];
    char csp[512];
    bool nosniff;
} resp_t;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    resp_t *r = arg;
    return cr_buf_append(&r->body, p, size * n) ? 0 : size * n;
}

/* Copies the value of header "name: value" into out when line is it. */
static void take_header(const char *line, size_t len, const char *name,
                        char *out, size_t cap)
{
    size_t n = strlen(name);
    if (len <= n + 1 || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return;
    const char *v = line + n + 1;
    size_t vlen = len - n - 1;
    while (vlen && (*v == ' '))
        v++, vlen--;
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n'))
        vlen--;
    snprintf(out, cap, "%.*s", (int)vlen, v);
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    resp_t *r = arg;
    size_t len = size * n;
    char v[32] = "";
    take_header(p, len, "Content-Type", r->ctype, sizeof r->ctype);
    take_header(p, len, "Content-Security-Policy", r->csp, sizeof r->csp);
    take_header(p, len, "X-Content-Type-Options", v, sizeof v);
    if (!strcmp(v, "nosniff"))
        r->nosniff = true;
    return len;
}

/* One request; key (may be NULL) goes as a Bearer header. */
static resp_t req(const char *method, const char *path, const char *key)
{
    resp_t r = {0};
    cr_buf_init(&r.body, 4u << 20);
    CURL *c = curl_easy_init();
    char url[512], auth[300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port_g, path);
    struct curl_slist *h = NULL;
    if (key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    /* "/ui/../x" must reach the server as written, not resolved by curl. */
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    CURLcode rc = curl_easy_perform(c);
    CHECK_MSG(rc == CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    cr_buf_putc(&r.body, '\0');
    r.body.len--;
    return r;
}

static bool body_is(const resp_t *r, const char *text)
{
    return r->body.len == strlen(text) && !memcmp(r->body.data, text, r->body.len);
}

/* True when every "<script" in html has a src attribute and no body. */
static bool scripts_by_src_only(const char *html)
{
    for (const char *p = strstr(html, "<script"); p; p = strstr(p + 1, "<script")) {
        const char *end = strchr(p, '>');
        if (!end)
            return false;
        const char *src = strstr(p, " src=");
        if (!src || src > end || strncmp(end, "></script>", 10) != 0)
            return false;
    }
    return true;
}

static void test_files(void)
{
    resp_t r = req("GET", "/", NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK(body_is(&r, "Ollama is running"));
    cr_buf_free(&r.body);

    const gw_console_asset_t *index = gw_console_asset_find("index.html");
    CHECK(index != NULL);
    const char *paths[] = {"/ui", "/ui/", "/ui/index.html"};
    for (size_t i = 0; index && i < CR_ARRAY_LEN(paths); i++) {
        r = req("GET", paths[i], NULL);
        CHECK_EQ_INT(r.status, 200);
        CHECK_EQ_STR(r.ctype, "text/html; charset=utf-8");
        CHECK_EQ_STR(r.csp, GW_CONSOLE_CSP);
        CHECK(r.nosniff);
        CHECK(r.body.len == index->len &&
              !memcmp(r.body.data, index->data, index->len));
        CHECK_MSG(scripts_by_src_only(r.body.data),
                  "index.html has an inline script");
        /* Loads nothing from another origin: no absolute URLs at all. */
        CHECK(!strstr(r.body.data, "http:") && !strstr(r.body.data, "https:") &&
              !strstr(r.body.data, "//cdn"));
        CHECK(strstr(r.body.data, "src=\"/ui/app.js\"") != NULL);
        cr_buf_free(&r.body);
    }

    size_t total = 0;
    CHECK(gw_console_n_assets >= 5);
    for (size_t i = 0; i < gw_console_n_assets; i++) {
        const gw_console_asset_t *a = &gw_console_assets[i];
        char path[200];
        snprintf(path, sizeof path, "/ui/%s", a->name);
        r = req("GET", path, NULL);
        CHECK_MSG(r.status == 200, "%s: %ld", path, r.status);
        CHECK(r.body.len == a->len && !memcmp(r.body.data, a->data, a->len));
        CHECK_EQ_STR(r.ctype, gw_console_content_type(a->name));
        CHECK_EQ_STR(r.csp, GW_CONSOLE_CSP);
        CHECK(r.nosniff);
        CHECK_MSG(strcmp(r.ctype, "application/octet-stream") != 0,
                  "%s has no known content type", a->name);
        total += a->len;
        cr_buf_free(&r.body);
    }
    /* The bound: a few hundred KB at most. */
    CHECK_MSG(total < 300 * 1024, "the console is %zu bytes", total);
    CHECK_EQ_STR(gw_console_content_type("app.js"), "text/javascript; charset=utf-8");
    CHECK_EQ_STR(gw_console_content_type("x.css"), "text/css; charset=utf-8");
    CHECK_EQ_STR(gw_console_content_type("noext"), "application/octet-stream");
    CHECK(gw_console_asset_find("nope.js") == NULL);

    r = req("HEAD", "/ui/app.js", NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_INT((long)r.body.len, 0);
    cr_buf_free(&r.body);

    const char *missing[] = {"/ui/nope.js", "/ui/a/app.js", "/ui/../app.js",
                             "/uix", "/ui//app.js"};
    for (size_t i = 0; i < CR_ARRAY_LEN(missing); i++) {
        r = req("GET", missing[i], NULL);
        CHECK_MSG(r.status == 404, "%s: %ld", missing[i], r.status);
        cr_buf_free(&r.body);
    }
    r = req("POST", "/ui/app.js", NULL);
    CHECK_EQ_INT(r.status, 405);
    cr_buf_free(&r.body);
    r = req("DELETE", "/ui", NULL);
    CHECK_EQ_INT(r.status, 405);
    cr_buf_free(&r.body);
}

static void test_key(void)
{
    CHECK(!gw_auth_required("k", "/ui"));
    CHECK(!gw_auth_required("k", "/ui/"));
    CHECK(!gw_auth_required("k", "/ui/app.js"));
    CHECK(gw_auth_required("k", "/uix"));
    CHECK(gw_auth_required("k", "/api/ps"));
    CHECK(gw_auth_required("k", "/api/console/status"));

    resp_t r = req("GET", "/ui", NULL);
    CHECK_EQ_INT(r.status, 200);
    cr_buf_free(&r.body);
    r = req("GET", "/ui/api.js", NULL);
    CHECK_EQ_INT(r.status, 200);
    cr_buf_free(&r.body);
    r = req("GET", "/api/tags", NULL);
    CHECK_EQ_INT(r.status, 401);
    cr_buf_free(&r.body);
    r = req("GET", "/metrics", NULL);
    CHECK_EQ_INT(r.status, 401);
    cr_buf_free(&r.body);
    r = req("GET", "/api/console/status", NULL);
    CHECK_EQ_INT(r.status, 401);
    cr_buf_free(&r.body);
    /* Past the key check, routing sees the same raw path: no API route. */
    r = req("GET", "/ui/../api/tags", NULL);
    CHECK_MSG(r.status == 404, "/ui/../api/tags: %ld", r.status);
    cr_buf_free(&r.body);
    r = req("GET", "/uix", NULL);
    CHECK_EQ_INT(r.status, 401);
    cr_buf_free(&r.body);
}

/* No scheduler listens: the status route says so, as /api/ps would. */
static void test_status_unavailable(void)
{
    resp_t r = req("GET", "/api/console/status", NULL);
    CHECK_EQ_INT(r.status, 502);
    CHECK_MSG(r.body.data && strstr(r.body.data, "\"error\""), "%s",
              r.body.data ? r.body.data : "");
    cr_buf_free(&r.body);
    r = req("POST", "/api/console/status", NULL);
    CHECK_EQ_INT(r.status, 405);
    cr_buf_free(&r.body);
}

static json_int_t jint(json_t *j, const char *path)
{
    json_t *v = j;
    char key[64];
    for (const char *p = path; v && *p;) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        v = (key[0] >= '0' && key[0] <= '9') ? json_array_get(v, (size_t)atoi(key))
                                               : json_object_get(v, key);
        p += n + (p[n] == '.');
    }
    CHECK_MSG(json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

/* The scheduler's reply, rendered: a split model, two hosts, a queue. */
static void test_status_render(void)
{
    msg_device_split_t dev = {.index = 1, .has_index = true, .uuid = "GPU-x",
                              .has_uuid = true, .first_layer = 10,
                              .has_first_layer = true, .layers = 20,
                              .has_layers = true, .bytes = 3000,
                              .has_bytes = true};
    msg_loaded_model_t model = {.name = "a:latest", .has_name = true,
                                .size = 4000, .has_size = true,
                                .size_vram = 3000, .has_size_vram = true,
                                .queued = 2, .has_queued = true,
                                .devices = {&dev, 1}, .has_devices = true};
    msg_gpu_status_t gpus[2] = {
        {.index = 0, .has_index = true, .name = "GPU A", .has_name = true,
         .total = 8000, .has_total = true, .used = 0, .has_used = true,
         .free = 8000, .has_free = true},
        {.index = 1, .has_index = true, .name = "GPU B", .has_name = true,
         .total = 4000, .has_total = true, .used = 3000, .has_used = true,
         .free = 500, .has_free = true}};
    msg_host_status_t hosts[2] = {
        {.ram_total = 16000, .has_ram_total = true, .ram_used = 1000,
         .has_ram_used = true, .ram_free = 9000, .has_ram_free = true,
         .gpus = {gpus, 2}, .has_gpus = true},
        {.name = "gpu-box", .has_name = true, .ram_total = 64000,
         .has_ram_total = true, .fake = true, .has_fake = true}};
    msg_queue_entry_t queue[2] = {
        {.model = "a:latest", .has_model = true, .waiting = 2,
         .has_waiting = true, .oldest_ms = 4500, .has_oldest_ms = true},
        {.model = "new", .has_model = true, .waiting = 1, .has_waiting = true}};
    msg_status_reply_body_t st = {.models = {&model, 1}, .has_models = true,
                                  .hosts = {hosts, 2}, .has_hosts = true,
                                  .queue = {queue, 2}, .has_queue = true};
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    CHECK_EQ_INT(gw_render_console_status(&b, &st), CR_OK);
    json_error_t jerr;
    json_t *j = json_loadb(b.data, b.len, 0, &jerr);
    CHECK_MSG(j != NULL, "not JSON: %s", jerr.text);
    if (j) {
        json_t *m = json_array_get(json_object_get(j, "models"), 0);
        CHECK_EQ_STR(json_string_value(json_object_get(m, "name")), "a:latest");
        CHECK_EQ_INT((int)jint(m, "size_cpu"), 1000);
        CHECK_EQ_INT((int)jint(m, "queued"), 2);
        CHECK_EQ_INT((int)jint(m, "gpus.0.index"), 1);
        CHECK_EQ_INT((int)jint(m, "gpus.0.layers"), 20);
        CHECK_EQ_INT((int)jint(m, "gpus.0.first_layer"), 10);
        CHECK_EQ_INT((int)jint(m, "gpus.0.bytes"), 3000);
        json_t *h0 = json_array_get(json_object_get(j, "hosts"), 0);
        json_t *h1 = json_array_get(json_object_get(j, "hosts"), 1);
        CHECK(json_is_true(json_object_get(h0, "local")));
        CHECK(json_object_get(h0, "name") == NULL);
        CHECK(json_is_false(json_object_get(h0, "described")));
        CHECK_EQ_INT((int)jint(h0, "ram.total"), 16000);
        CHECK_EQ_INT((int)jint(h0, "ram.used"), 1000);
        CHECK_EQ_INT((int)jint(h0, "ram.free"), 9000);
        CHECK_EQ_STR(json_string_value(json_object_get(
                         json_array_get(json_object_get(h0, "gpus"), 1), "name")),
                     "GPU B");
        CHECK_EQ_INT((int)jint(h0, "gpus.1.used"), 3000);
        CHECK_EQ_INT((int)jint(h0, "gpus.1.free"), 500);
        CHECK(json_is_false(json_object_get(h1, "local")));
        CHECK(json_is_true(json_object_get(h1, "described")));
        CHECK_EQ_STR(json_string_value(json_object_get(h1, "name")), "gpu-box");
        CHECK_EQ_INT((int)json_array_size(json_object_get(h1, "gpus")), 0);
        json_t *q0 = json_array_get(json_object_get(j, "queue"), 0);
        CHECK_EQ_STR(json_string_value(json_object_get(q0, "model")), "a:latest");
        CHECK_EQ_INT((int)jint(q0, "waiting"), 2);
        CHECK_NEAR(json_number_value(json_object_get(q0, "oldest_seconds")), 4.5, 1e-9);
        CHECK_EQ_INT((int)jint(j, "queue_depth"), 3);
        json_decref(j);
    }
    cr_buf_free(&b);
}

static gw_server_t *start(const char *key, cr_err_t *err)
{
    gw_config_t cfg;
    CHECK_EQ_INT(gw_config_from_env(&cfg, err), CR_OK);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1:0");
    snprintf(cfg.api_key, sizeof cfg.api_key, "%s", key);
    cfg.origins[0] = '\0';
    cfg.connect_timeout_ms = 500;
    cfg.reply_timeout_ms = 500;
    gw_server_t *srv = NULL;
    if (gw_server_new(&cfg, &srv, err))
        return NULL;
    port_g = gw_server_port(srv);
    return srv;
}

int main(void)
{
    zsys_handler_set(NULL);
    char dir[] = "/tmp/corral-gw-console-XXXXXX";
    if (!mkdtemp(dir))
        return check_skip("test_gateway_console", "cannot make a temp dir");
    setenv("CORRAL_RUNTIME_DIR", dir, 1);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");
    unsetenv("CORRAL_REGISTRY_ENDPOINT");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    cr_err_t err;

    gw_server_t *srv = start("", &err);
    CHECK_MSG(srv != NULL, "cannot start: %s", err.msg);
    if (srv) {
        test_files();
        test_status_unavailable();
    }
    gw_server_destroy(&srv);
    test_status_render();

    srv = start("sekrit", &err);
    CHECK_MSG(srv != NULL, "cannot start: %s", err.msg);
    if (srv)
        test_key();
    gw_server_destroy(&srv);

    curl_global_cleanup();
    if (rmdir(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("test_gateway_console");
}
