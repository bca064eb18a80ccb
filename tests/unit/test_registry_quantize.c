/* test_registry_quantize.c: /api/create with `quantize`, through the
 * registry server object in-process and through reg_create_ex, with the
 * real corral-runner doing the work as a child process.
 *
 * Needs a corral-runner that has the `quantize` tool: CORRAL_RUNNER_BIN if
 * set, else $CORRAL_BUILD_DIR/bin/corral-runner; skips (77) without one.
 * Checks: Ollama's progress statuses in order ("parsing GGUF", "quantizing
 * F16 model to Q4_K_M" with digest/total/completed rising to the total,
 * "verifying conversion", layers, "writing manifest", "success"); the new
 * model's layer is a Q4_K_M GGUF with the mix's tensor types and the same
 * metadata, its config says Q4_K_M, the source model is untouched; a
 * quantized source, an unknown type, a missing or failing runner all fail
 * with the right status and leave no manifest, temp file or new blob; a
 * canceled create kills its quantization and leaves none either. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "proto/msg.h"
#include "services/registry/create.h"
#include "services/registry/model.h"
#include "services/registry/server.h"
#include "services/registry/store.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

#include <dirent.h>
#include <signal.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_g[256];
static char runner_g[4096];

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(p);
}

/* ---- reply capture ---- */

#define MAX_REPLIES 512
#include "tests/unit/reg_capture.h"

static void send_msg(reg_server_t *s, const msg_t *m, capture_t *c)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    CHECK_MSG(msg_encode(m, &b, &err) == CR_OK, "encode: %s", err.msg);
    capture_clear(c);
    reg_server_handle_frame(s, b.data, b.len, capture_fn, c);
    cr_buf_free(&b);
    /* A quantizing create answers from a job thread: collect until its
     * ok or error (a minute at most). */
    for (int waited = 0; waited < 600; waited++) {
        if (c->n && c->v[c->n - 1].type != MSG_progress)
            break;
        reg_server_pump(s, 100, capture_fn, c);
    }
}

/* Progress messages of reg_create_ex, copied. */
typedef struct prog {
    char status[128][96];
    char digest[128][32];
    int64_t total[128], completed[128];
    bool counted[128];
    int n;
} prog_t;

static void prog_fn(void *ctx, const msg_progress_body_t *p)
{
    prog_t *g = ctx;
    if (g->n >= 128)
        return;
    snprintf(g->status[g->n], sizeof g->status[0], "%s", p->status);
    snprintf(g->digest[g->n], sizeof g->digest[0], "%s",
             p->has_digest && p->digest ? p->digest : "");
    g->counted[g->n] = p->has_total && p->has_completed;
    g->total[g->n] = p->total;
    g->completed[g->n] = p->completed;
    g->n++;
}

/* ---- store helpers ---- */

static int count_blobs(reg_server_t *s, int *temps)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(reg_server_store(s)));
    DIR *d = opendir(dir);
    int n = 0;
    *temps = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strncmp(e->d_name, "sha256-", 7))
            n++;
        else if (e->d_name[0] == '.' && strcmp(e->d_name, ".") &&
                 strcmp(e->d_name, ".."))
            (*temps)++;
    }
    if (d)
        closedir(d);
    return n;
}

static bool put_synth(reg_server_t *s, cr_type_t type,
                      char digest[8 + REG_HEX_LEN])
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.seed = 5;
    o.type = type;
    o.dim = 256;
    o.ffn = 512;
    o.n_heads = 4;
    o.n_kv_heads = 2;
    o.name = "reg-quant-src";
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    bool ok = rn_synth_write_memory(&o, &bytes, &len, &err) == CR_OK;
    CHECK_MSG(ok, "synth: %s", err.msg);
    char hex[REG_HEX_LEN + 1];
    bool created = false;
    if (ok)
        ok = reg_store_blob_put(reg_server_store(s), bytes, len, hex, &created,
                                &err) == CR_OK;
    CHECK(ok);
    snprintf(digest, 8 + REG_HEX_LEN, "sha256:%s", hex);
    free(bytes);
    return ok;
}

static void create_msg(msg_t *m, const char *id, const char *model,
                       msg_file_ref_t *file, const char *from,
                       const char *quantize)
{
    msg_init(m, MSG_create, id);
    m->u.create.model = (char *)model;
    m->u.create.has_model = true;
    if (file) {
        m->u.create.files.v = file;
        m->u.create.files.n = 1;
        m->u.create.has_files = true;
    }
    if (from) {
        m->u.create.from = (char *)from;
        m->u.create.has_from = true;
    }
    if (quantize) {
        m->u.create.quantize = (char *)quantize;
        m->u.create.has_quantize = true;
    }
}

static bool model_exists(reg_server_t *s, const char *name)
{
    cr_model_name_t n, stored;
    if (cr_model_name_parse(name, &n, NULL))
        return false;
    return reg_store_manifest_find(reg_server_store(s), &n, &stored) == CR_OK;
}

/* Opens name's model layer as GGUF. */
static cr_gguf_t *open_model(reg_server_t *s, const char *name,
                             reg_model_t **mout)
{
    cr_model_name_t n;
    cr_err_t err;
    *mout = NULL;
    if (cr_model_name_parse(name, &n, NULL) ||
        reg_model_load(reg_server_store(s), &n, mout, &err) ||
        !(*mout)->model_layer)
        return NULL;
    char path[REG_PATH_MAX];
    if (!reg_store_blob_path(reg_server_store(s), (*mout)->model_layer->hex,
                             path, sizeof path))
        return NULL;
    cr_gguf_t *g = NULL;
    if (cr_gguf_open(path, &g, &err))
        return NULL;
    return g;
}

/* ---- tests ---- */

static void test_server_create(reg_server_t *s, const char *f16_digest)
{
    capture_t *c = calloc(1, sizeof *c);
    msg_file_ref_t file = {.name = "m.gguf", .has_name = true,
                           .digest = (char *)f16_digest, .has_digest = true};
    msg_t m;
    create_msg(&m, "cq", "src-f16", &file, NULL, NULL);
    send_msg(s, &m, c);
    CHECK(c->n > 0 && c->v[c->n - 1].type == MSG_ok);

    create_msg(&m, "cq", "quant:q4km", &file, NULL, "q4_K_M");
    send_msg(s, &m, c);
    CHECK(c->n >= 6 && c->v[c->n - 1].type == MSG_ok);
    if (c->n && c->v[c->n - 1].type == MSG_error)
        fprintf(stderr, "create failed: %s\n", c->v[c->n - 1].u.error.message);
    int i_parse = -1, i_quant = -1, i_verify = -1, i_write = -1, i_ok = -1;
    for (int i = 0; i < c->n; i++) {
        CHECK_EQ_STR(c->v[i].id, "cq");
        if (c->v[i].type != MSG_progress)
            continue;
        const char *st = c->v[i].u.progress.status;
        if (!strcmp(st, "parsing GGUF") && i_parse < 0)
            i_parse = i;
        if (!strcmp(st, "quantizing F16 model to Q4_K_M") && i_quant < 0)
            i_quant = i;
        if (!strcmp(st, "verifying conversion"))
            i_verify = i;
        if (!strcmp(st, "writing manifest"))
            i_write = i;
        if (!strcmp(st, "success"))
            i_ok = i;
    }
    /* The server forwards the counts once it calls reg_create_ex (with
     * reg_create only the statuses arrive); when present they must rise to
     * the total. */
    int64_t last = -1, total = -1;
    for (int i = 0; i < c->n; i++) {
        const msg_progress_body_t *pb = &c->v[i].u.progress;
        if (c->v[i].type != MSG_progress || !pb->has_total)
            continue;
        CHECK_EQ_STR(pb->status, "quantizing F16 model to Q4_K_M");
        CHECK(pb->has_completed && pb->has_digest);
        CHECK(pb->completed >= last && pb->completed <= pb->total);
        last = pb->completed;
        total = pb->total;
    }
    CHECK(last == total);
    CHECK(i_parse == 0);
    CHECK(i_quant > i_parse);
    CHECK(i_verify > i_quant);
    CHECK(i_write > i_verify);
    CHECK(i_ok == i_write + 1);
    capture_clear(c);

    /* The stored model: Q4_K_M in the config and in the file. */
    msg_init(&m, MSG_tags, "t");
    send_msg(s, &m, c);
    bool seen = false;
    for (size_t i = 0; c->n == 1 && i < c->v[0].u.tags_reply.models.n; i++) {
        const msg_model_entry_t *e = &c->v[0].u.tags_reply.models.v[i];
        if (!strcmp(e->name, "quant:q4km")) {
            seen = true;
            CHECK_EQ_STR(e->details->quantization_level, "Q4_K_M");
        } else if (!strcmp(e->name, "src-f16:latest")) {
            CHECK_EQ_STR(e->details->quantization_level, "F16");
        }
    }
    CHECK(seen);
    capture_clear(c);
    reg_model_t *qm = NULL, *fm = NULL;
    cr_gguf_t *gq = open_model(s, "quant:q4km", &qm);
    cr_gguf_t *gf = open_model(s, "src-f16", &fm);
    CHECK(gq && gf);
    if (gq && gf) {
        uint32_t ft = 0;
        CHECK(cr_gguf_get_u32(gq, "general.file_type", &ft) && ft == 15);
        CHECK(cr_gguf_get_u32(gf, "general.file_type", &ft) && ft == 1);
        CHECK(strcmp(qm->model_layer->hex, fm->model_layer->hex) != 0);
        CHECK(qm->model_layer->size < fm->model_layer->size);
        CHECK(qm->model_layer->from == NULL);
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(gq, "output.weight");
        CHECK(t && t->type == CR_TYPE_Q6_K);
        t = cr_gguf_tensor_find(gq, "blk.0.attn_q.weight");
        CHECK(t && t->type == CR_TYPE_Q4_K);
        t = cr_gguf_tensor_find(gq, "blk.1.ffn_down.weight");
        CHECK(t && t->type == CR_TYPE_Q6_K);
        t = cr_gguf_tensor_find(gq, "blk.0.attn_norm.weight");
        CHECK(t && t->type == CR_TYPE_F32);
        CHECK_EQ_INT(cr_gguf_tensor_count(gq), cr_gguf_tensor_count(gf));
        char a[64] = "", b[64] = "";
        CHECK(cr_gguf_get_strz(gq, "general.name", a, sizeof a));
        cr_gguf_get_strz(gf, "general.name", b, sizeof b);
        CHECK_EQ_STR(a, b);
        const cr_gguf_kv_t *ka = cr_gguf_kv_find(gq, "tokenizer.ggml.tokens");
        const cr_gguf_kv_t *kb = cr_gguf_kv_find(gf, "tokenizer.ggml.tokens");
        CHECK(ka && kb && ka->v.arr.n == kb->v.arr.n);
    }
    cr_gguf_close(&gq);
    cr_gguf_close(&gf);
    reg_model_destroy(&qm);
    reg_model_destroy(&fm);
    int temps = 0;
    count_blobs(s, &temps);
    CHECK_EQ_INT(temps, 0);
    free(c);
}

static void test_counts_and_from(reg_server_t *s)
{
    /* From an existing F16 model, through reg_create_ex: counted
     * progress. */
    prog_t *p = calloc(1, sizeof *p);
    msg_t m;
    create_msg(&m, "cx", "quant:q8", NULL, "src-f16", "Q8_0");
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = reg_create_ex(reg_server_store(s), &m.u.create, NULL,
                                   prog_fn, p, &err);
    CHECK_MSG(st == CR_OK, "create: %s", err.msg);
    int n_counted = 0;
    int64_t last = -1, total = 0;
    for (int i = 0; i < p->n; i++) {
        if (strcmp(p->status[i], "quantizing F16 model to Q8_0"))
            continue;
        CHECK(p->counted[i]);
        CHECK_EQ_STR(p->digest[i], "0000000000000000000");
        CHECK(p->completed[i] >= last);
        CHECK(p->completed[i] <= p->total[i]);
        last = p->completed[i];
        total = p->total[i];
        n_counted++;
    }
    CHECK(n_counted >= 2);
    CHECK(total > 0 && last == total);
    CHECK(p->n > 0 && !strcmp(p->status[p->n - 1], "success"));
    free(p);
    reg_model_t *qm = NULL;
    cr_gguf_t *g = open_model(s, "quant:q8", &qm);
    uint32_t ft = 0;
    CHECK(g && cr_gguf_get_u32(g, "general.file_type", &ft) && ft == 7);
    const cr_gguf_tensor_t *t = g ? cr_gguf_tensor_find(g, "output.weight") : NULL;
    CHECK(t && t->type == CR_TYPE_Q8_0);
    cr_gguf_close(&g);
    reg_model_destroy(&qm);
}

static void expect_error(reg_server_t *s, msg_t *m, cr_status_t want,
                         const char *text, const char *model)
{
    capture_t *c = calloc(1, sizeof *c);
    int temps = 0;
    int before = count_blobs(s, &temps);
    send_msg(s, m, c);
    CHECK(c->n > 0 && c->v[c->n - 1].type == MSG_error);
    if (c->n > 0 && c->v[c->n - 1].type == MSG_error) {
        CHECK_MSG(c->v[c->n - 1].u.error.status == want, "status %d for %s",
                  (int)c->v[c->n - 1].u.error.status, text);
        CHECK_MSG(strstr(c->v[c->n - 1].u.error.message, text) != NULL,
                  "\"%s\" lacks \"%s\"", c->v[c->n - 1].u.error.message, text);
    }
    CHECK(!model_exists(s, model));
    CHECK_EQ_INT(count_blobs(s, &temps), before);
    CHECK_EQ_INT(temps, 0);
    capture_clear(c);
    free(c);
}

static void test_errors(reg_server_t *s, const char *q8_digest)
{
    msg_file_ref_t file = {.name = "m.gguf", .has_name = true,
                           .digest = (char *)q8_digest, .has_digest = true};
    msg_t m;
    /* A quantized source (an uploaded Q8_0 file, or a quantized model). */
    create_msg(&m, "e1", "bad1", &file, NULL, "q4_K_M");
    expect_error(s, &m, CR_E_INVALID,
                 "quantization is only supported for F16, BF16 and F32 models",
                 "bad1");
    create_msg(&m, "e2", "bad2", NULL, "quant:q4km", "q4_0");
    expect_error(s, &m, CR_E_INVALID,
                 "quantization is only supported for F16, BF16 and F32 models",
                 "bad2");
    /* An unknown type, named. */
    create_msg(&m, "e3", "bad3", NULL, "src-f16", "q9_x");
    expect_error(s, &m, CR_E_INVALID, "unsupported quantization type q9_x",
                 "bad3");
    create_msg(&m, "e4", "bad4", NULL, "src-f16", "F16");
    expect_error(s, &m, CR_E_INVALID, "unsupported quantization type F16",
                 "bad4");
    /* No runner, a runner that fails, a runner that writes nothing. */
    setenv("CORRAL_RUNNER_BIN", "/nonexistent/corral-runner", 1);
    create_msg(&m, "e5", "bad5", NULL, "src-f16", "q8_0");
    expect_error(s, &m, CR_E_NOT_FOUND, "CORRAL_RUNNER_BIN", "bad5");
    setenv("CORRAL_RUNNER_BIN", "/bin/false", 1);
    create_msg(&m, "e6", "bad6", NULL, "src-f16", "q8_0");
    expect_error(s, &m, CR_E_RUNNER, "quantizing failed", "bad6");
    setenv("CORRAL_RUNNER_BIN", "/bin/true", 1);
    create_msg(&m, "e7", "bad7", NULL, "src-f16", "q8_0");
    expect_error(s, &m, CR_E_RUNNER, "not valid GGUF", "bad7");
    setenv("CORRAL_RUNNER_BIN", runner_g, 1);
    /* Bad parameters fail before any quantizing. */
    create_msg(&m, "e8", "bad8", NULL, "src-f16", "q8_0");
    m.u.create.parameters = "{\"temperature\": \"hot\"}";
    m.u.create.has_parameters = true;
    expect_error(s, &m, CR_E_INVALID, "temperature", "bad8");
}

/* A quantization runs in a job thread: while a slow one runs, the loop
 * answers tags at once, and the create's error arrives afterwards. */
static void test_loop_not_blocked(reg_server_t *s)
{
    char slow[300];
    snprintf(slow, sizeof slow, "%s/slow-runner.sh", tmp_g);
    FILE *f = fopen(slow, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs("#!/bin/sh\nsleep 2\nexit 1\n", f);
    fclose(f);
    chmod(slow, 0755);
    setenv("CORRAL_RUNNER_BIN", slow, 1);

    capture_t *cq = calloc(1, sizeof *cq);
    capture_t *ct = calloc(1, sizeof *ct);
    msg_t m;
    create_msg(&m, "slowq", "slow", NULL, "src-f16", "q8_0");
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    CHECK(msg_encode(&m, &b, &err) == CR_OK);
    reg_server_handle_frame(s, b.data, b.len, capture_fn, cq);
    cr_buf_free(&b);
    for (int i = 0; i < cq->n; i++)
        CHECK_MSG(cq->v[i].type == MSG_progress,
                  "create answered %s before its job ran",
                  msg_type_name(cq->v[i].type));

    msg_init(&m, MSG_tags, "tags-meanwhile");
    send_msg(s, &m, ct);
    CHECK(ct->n == 1 && ct->v[0].type == MSG_tags_reply);
    /* Still running (an earlier job may be finishing its exit too). */
    CHECK(reg_server_jobs(s) >= 1);

    for (int waited = 0; waited < 300; waited++) {
        if (cq->n && cq->v[cq->n - 1].type != MSG_progress)
            break;
        reg_server_pump(s, 100, capture_fn, cq);
    }
    CHECK(cq->n > 0 && cq->v[cq->n - 1].type == MSG_error);
    if (cq->n > 0 && cq->v[cq->n - 1].type == MSG_error) {
        CHECK_EQ_STR(cq->v[cq->n - 1].id, "slowq");
        CHECK(strstr(cq->v[cq->n - 1].u.error.message, "quantizing failed"));
    }
    setenv("CORRAL_RUNNER_BIN", runner_g, 1);
    capture_clear(cq);
    capture_clear(ct);
    free(cq);
    free(ct);
}

/* A canceled create (its client left) kills its quantization at once:
 * a stand-in runner that starts its staging file as the real tool does
 * (<out>.tmp-XXXXXX), says it has begun and then would work for five
 * minutes. The create must fail `canceled` long before that, the stand-in
 * be gone, and no manifest, temp file or new blob remain. */
static void test_cancel(reg_server_t *s)
{
    char slow[300], pidfile[300];
    snprintf(slow, sizeof slow, "%s/working-runner.sh", tmp_g);
    snprintf(pidfile, sizeof pidfile, "%s/working-runner.pid", tmp_g);
    unlink(pidfile);
    FILE *f = fopen(slow, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    /* argv: quantize --in SRC --out DST --type T --progress */
    fprintf(f, "#!/bin/sh\nprintf 'partial' > \"$5.tmp-abc123\"\n"
               "echo 1/100\necho $$ > '%s'\nexec sleep 300\n", pidfile);
    fclose(f);
    chmod(slow, 0755);
    setenv("CORRAL_RUNNER_BIN", slow, 1);
    int temps0 = 0;
    int blobs0 = count_blobs(s, &temps0);

    capture_t *c = calloc(1, sizeof *c);
    msg_t m;
    create_msg(&m, "gone", "left-behind", NULL, "src-f16", "q4_K_M");
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    CHECK(msg_encode(&m, &b, &err) == CR_OK);
    reg_server_handle_frame(s, b.data, b.len, capture_fn, c);
    cr_buf_free(&b);
    pid_t pid = 0;
    for (int i = 0; i < 600 && !(pid = test_read_pid(pidfile)); i++) /* 60 s */
        reg_server_pump(s, 100, capture_fn, c);
    CHECK_MSG(pid > 0, "the stand-in runner did not start");
    int temps = 0;
    count_blobs(s, &temps);
    CHECK_MSG(temps > temps0, "no staging file while quantizing");

    msg_init(&m, MSG_cancel, "gone");
    reg_server_handle(s, &m, capture_fn, c);
    /* Its answer, well before the stand-in's five minutes. */
    for (int i = 0; i < 600; i++) {
        if (c->n && c->v[c->n - 1].type != MSG_progress)
            break;
        reg_server_pump(s, 100, capture_fn, c);
    }
    CHECK(c->n > 0 && c->v[c->n - 1].type == MSG_error);
    if (c->n > 0 && c->v[c->n - 1].type == MSG_error) {
        CHECK_EQ_INT(c->v[c->n - 1].u.error.status, CR_E_CANCELED);
        CHECK_EQ_STR(c->v[c->n - 1].u.error.message, "canceled");
    }
    /* The registry reaped its child: no such process, not even a zombie. */
    CHECK_MSG(pid > 0 && kill(pid, 0) != 0, "the quantization still runs");
    if (pid > 0 && kill(pid, 0) == 0)
        kill(pid, SIGKILL); /* do not leave it behind on failure */
    CHECK(!model_exists(s, "left-behind"));
    temps = 0;
    CHECK_EQ_INT(count_blobs(s, &temps), blobs0);
    CHECK_EQ_INT(temps, temps0);
    setenv("CORRAL_RUNNER_BIN", runner_g, 1);
    capture_clear(c);
    free(c);
}

/* The runner must have the quantize tool: its usage names --in. */
static bool runner_has_quantize(const char *bin)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "'%s' quantize 2>&1 | grep -q -- '--in SRC'", bin);
    return system(cmd) == 0;
}

int main(void)
{
    const char *env = getenv("CORRAL_RUNNER_BIN");
    const char *bd = getenv("CORRAL_BUILD_DIR");
    if (env && *env)
        snprintf(runner_g, sizeof runner_g, "%s", env);
    else if (bd && *bd)
        snprintf(runner_g, sizeof runner_g, "%s/bin/corral-runner", bd);
    if (!runner_g[0] || access(runner_g, X_OK) || !runner_has_quantize(runner_g))
        return check_skip("test_registry_quantize",
                          "no corral-runner with the quantize tool");
    setenv("CORRAL_RUNNER_BIN", runner_g, 1);
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-test-regq-XXXXXX");
    if (!mkdtemp(tmp_g)) {
        perror("mkdtemp");
        return 1;
    }
    char root[300];
    snprintf(root, sizeof root, "%s/models", tmp_g);
    cr_err_t err;
    cr_err_clear(&err);
    reg_server_t *s = reg_server_new(root, &err);
    CHECK_MSG(s != NULL, "server: %s", err.msg);
    char f16[8 + REG_HEX_LEN], q8[8 + REG_HEX_LEN];
    if (s && put_synth(s, CR_TYPE_F16, f16) && put_synth(s, CR_TYPE_Q8_0, q8)) {
        test_server_create(s, f16);
        test_counts_and_from(s);
        test_errors(s, q8);
        test_loop_not_blocked(s);
        test_cancel(s);
    }
    reg_server_destroy(&s);
    nftw(tmp_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_finish("test_registry_quantize");
}
