/* test_registry_create_jobs.c: a create that converts a safetensors folder
 * runs as a registry job, stopped by its client's cancel (issue 20).
 *
 * In process: a registry server over a private store. A synthetic qwen2
 * GGUF (tools/synth) becomes a Hugging Face folder (corral-gguf-to-hf),
 * whose files are stored as blobs, as `corral create` uploads them. The
 * store's step hook holds the conversion before its third tensor, so what
 * is checked happens while the conversion runs, on a machine of any speed
 * (waits are for conditions, bounded generously):
 *  - the create request returns at once; tags and show are answered while
 *    the conversion is held, and the conversion's output is on disk then;
 *  - canceled there: the conversion stops before its next tensor and the
 *    job ends `canceled` after its "converting model" progress; no manifest, no temp file, no new blob is left, and doctor
 *    finds nothing but the uploaded inputs unused (Ollama keeps uploads);
 *  - not canceled: the client gets the progress an inline create gave
 *    ("converting model" ... "writing manifest", "success") and ok;
 *  - two creates of one name at once: an inline one that writes while the
 *    conversion is held, then the conversion's: the later replaces the
 *    earlier and prunes its blobs (the replaced manifest is read when the
 *    later one is written), so doctor again finds only the inputs; the
 *    same with a pull (from a fake OCI registry) landing meanwhile.
 * Needs $CORRAL_BUILD_DIR/bin/corral-gguf-to-hf (skips without). */
#include "lib/prelude.h"
#include "proto/msg.h"
#include "services/registry/doctor.h"
#include "services/registry/server.h"
#include "services/registry/store.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"
#include "tests/unit/poll_wait.h"
#include "tests/unit/reg_tmp.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#define WAIT_MS 60000 /* generous: a busy CI machine */
#define HOLD_AT 3     /* the conversion is held before this tensor */
#define MAX_FILES 16

/* ---- holding the conversion (the store's step hook) ---- */

typedef struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int steps;    /* steps seen since armed (counted on after the hold) */
    bool armed;   /* hold at step HOLD_AT */
    bool holding; /* a job waits in the hook */
    bool release;
} hold_t;

static hold_t hold_g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, false,
                        false, false};
static pthread_t main_g; /* the request loop's thread (the test's) */

static void on_step(void *ctx, const char *point)
{
    hold_t *h = ctx;
    CHECK_EQ_STR(point, "convert tensor");
    /* A conversion in the request loop itself would wait for a release
     * that loop never gets to give. */
    bool inline_create = pthread_equal(pthread_self(), main_g);
    CHECK_MSG(!inline_create, "the conversion runs in the request loop");
    if (inline_create)
        return;
    pthread_mutex_lock(&h->mu);
    if (++h->steps == HOLD_AT && h->armed) {
        h->armed = false;
        h->holding = true;
        pthread_cond_broadcast(&h->cv);
        while (!h->release)
            pthread_cond_wait(&h->cv, &h->mu);
        h->release = false;
        h->holding = false;
    }
    pthread_mutex_unlock(&h->mu);
}

static void hold_arm(void)
{
    pthread_mutex_lock(&hold_g.mu);
    hold_g.armed = true;
    hold_g.steps = 0;
    pthread_mutex_unlock(&hold_g.mu);
}

/* True once a job waits in the hook (within WAIT_MS). */
static bool hold_wait(void)
{
    int64_t t0 = test_mono_ms();
    pthread_mutex_lock(&hold_g.mu);
    while (!hold_g.holding && test_mono_ms() - t0 < WAIT_MS) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&hold_g.cv, &hold_g.mu, &ts);
    }
    bool holding = hold_g.holding;
    pthread_mutex_unlock(&hold_g.mu);
    return holding;
}

static int hold_steps(void)
{
    pthread_mutex_lock(&hold_g.mu);
    int n = hold_g.steps;
    pthread_mutex_unlock(&hold_g.mu);
    return n;
}

static void hold_release(void)
{
    pthread_mutex_lock(&hold_g.mu);
    hold_g.release = true;
    hold_g.armed = false;
    pthread_cond_broadcast(&hold_g.cv);
    pthread_mutex_unlock(&hold_g.mu);
}

/* ---- replies ---- */

#define MAX_REPLIES 256
#include "tests/unit/reg_capture.h"

static bool is_final(const capture_t *c)
{
    return c->n && (c->v[c->n - 1].type == MSG_ok || c->v[c->n - 1].type == MSG_error);
}

/* The final reply (ok or error) of request id in c, or NULL. */
static const msg_t *final_of(const capture_t *c, const char *id)
{
    for (int i = 0; i < c->n; i++)
        if ((c->v[i].type == MSG_ok || c->v[i].type == MSG_error) && !strcmp(c->v[i].id, id))
            return &c->v[i];
    return NULL;
}

/* Forwards job replies into c until the final one (within WAIT_MS). */
static bool pump_final(reg_server_t *s, capture_t *c)
{
    int64_t t0 = test_mono_ms();
    while (!is_final(c) && test_mono_ms() - t0 < WAIT_MS)
        reg_server_pump(s, 200, capture_fn, c);
    return is_final(c);
}

/* Same, until request id's final reply; returns it, or NULL. */
static const msg_t *pump_final_of(reg_server_t *s, capture_t *c, const char *id)
{
    int64_t t0 = test_mono_ms();
    while (!final_of(c, id) && test_mono_ms() - t0 < WAIT_MS)
        reg_server_pump(s, 200, capture_fn, c);
    return final_of(c, id);
}

static bool has_status(const capture_t *c, const char *status)
{
    for (int i = 0; i < c->n; i++)
        if (c->v[i].type == MSG_progress && c->v[i].u.progress.status &&
            !strcmp(c->v[i].u.progress.status, status))
            return true;
    return false;
}

/* ---- the store ---- */

typedef struct folder {
    char names[MAX_FILES][256];
    char digests[MAX_FILES][80];
    msg_file_ref_t refs[MAX_FILES];
    size_t n;
} folder_t;

/* Stores every file of dir as a blob and names them in f. */
static void upload_folder(reg_store_t *st, const char *dir, folder_t *f)
{
    f->n = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while (d && (e = readdir(d)) && f->n < MAX_FILES) {
        if (e->d_name[0] == '.')
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(f->names[f->n], sizeof f->names[0], "%s", e->d_name);
        test_store_put_file(st, path, f->digests[f->n]);
        f->refs[f->n] = (msg_file_ref_t){.name = f->names[f->n], .has_name = true,
                                         .digest = f->digests[f->n], .has_digest = true};
        f->n++;
    }
    if (d)
        closedir(d);
}

static int count_blobs(reg_store_t *st)
{
    char (*hexes)[REG_HEX_LEN + 1] = NULL;
    size_t n = 0;
    CHECK(reg_store_blob_list(st, &hexes, &n, 0) == CR_OK);
    free(hexes);
    return (int)n;
}

/* Hidden temp files in blobs/ (a conversion's output, a blob being
 * stored). */
static int count_temps(reg_store_t *st)
{
    char dir[REG_PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(st));
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, ".corral-tmp-", 12);
    if (d)
        closedir(d);
    return n;
}

static bool has_manifest(reg_store_t *st, const char *name)
{
    char path[REG_PATH_MAX + 100];
    snprintf(path, sizeof path, "%s/manifests/registry.ollama.ai/library/%s/latest",
             reg_store_root(st), name);
    return access(path, F_OK) == 0;
}

/* Runs doctor: its findings must all be unused blobs, want of them. */
static void doctor_expect_unused(reg_store_t *st, size_t want, const char *when)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    reg_doctor_report_t rep = {0};
    cr_err_t err;
    CHECK(out && reg_doctor_run(st, false, out, &rep, &err) == CR_OK);
    if (out)
        fclose(out);
    size_t unused = 0, other = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (!strncmp(line, "unused blob ", 12))
            unused++;
        else if (*line)
            other++, fprintf(stderr, "  doctor (%s): %s\n", when, line);
        line = nl ? nl + 1 : NULL;
    }
    CHECK_MSG(other == 0, "%s: doctor found %zu problems other than unused blobs", when, other);
    CHECK_MSG(rep.problems == 0 && rep.unused == unused,
              "%s: doctor counted %zu problems and %zu unused blobs for %zu unused lines", when,
              rep.problems, rep.unused, unused);
    CHECK_MSG(unused == want, "%s: doctor found %zu unused blobs, want %zu (the inputs)",
              when, unused, want);
    free(text);
}

static void create_msg(msg_t *m, const char *id, const char *model, folder_t *f)
{
    msg_init(m, MSG_create, id);
    m->u.create.model = (char *)model;
    m->u.create.has_model = true;
    m->u.create.files.v = f->refs;
    m->u.create.files.n = f->n;
    m->u.create.has_files = true;
}

/* Tags and show answered by the request loop, at once. */
static void check_loop_answers(reg_server_t *s, const char *show_model)
{
    capture_t c = {0};
    msg_t m;
    msg_init(&m, MSG_tags, "t");
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_tags_reply);
    capture_clear(&c);
    msg_init(&m, MSG_show, "s");
    m.u.show.model = (char *)show_model;
    m.u.show.has_model = true;
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK_MSG(c.n == 1 && c.v[0].type == MSG_show_reply, "show %s was not answered "
              "while the conversion ran", show_model);
    capture_clear(&c);
}

/* ---- the cases ---- */

static void test_cancel_mid_conversion(reg_server_t *s, folder_t *hf)
{
    reg_store_t *st = reg_server_store(s);
    int blobs0 = count_blobs(st);
    hold_arm();
    capture_t c = {0};
    msg_t m;
    create_msg(&m, "imp1", "imported", hf);
    reg_server_handle(s, &m, capture_fn, &c);
    /* A job: nothing final came back from the request itself. */
    CHECK_MSG(!is_final(&c), "the create was answered inline");
    CHECK_MSG(hold_wait(), "the conversion never reached tensor %d", HOLD_AT);
    CHECK_EQ_INT((int)reg_server_jobs(s), 1);
    CHECK_MSG(count_temps(st) >= 1, "no conversion output while it runs");
    check_loop_answers(s, "base");

    msg_init(&m, MSG_cancel, "imp1");
    reg_server_handle(s, &m, capture_fn, &c); /* no answer to a cancel */
    hold_release();
    CHECK(pump_final(s, &c));
    CHECK(has_status(&c, "converting model"));
    /* It stopped at the next tensor: none was converted after the cancel. */
    CHECK_MSG(hold_steps() == HOLD_AT, "%d steps after the cancel at step %d",
              hold_steps(), HOLD_AT);
    CHECK_MSG(c.n && c.v[c.n - 1].type == MSG_error &&
                  c.v[c.n - 1].u.error.status == CR_E_CANCELED,
              "the canceled create ended otherwise");
    for (int i = 0; i < c.n; i++)
        CHECK_EQ_STR(c.v[i].id, "imp1");
    capture_clear(&c);
    int64_t t0 = test_mono_ms();
    while (reg_server_jobs(s) && test_mono_ms() - t0 < WAIT_MS)
        test_nap_ms(10);
    CHECK_MSG(!has_manifest(st, "imported"), "a canceled create wrote its manifest");
    CHECK_EQ_INT(count_temps(st), 0);
    CHECK_EQ_INT(count_blobs(st), blobs0);
    printf("  canceled mid-conversion: no manifest, no temp file, no new blob\n");
}

static void test_conversion_completes(reg_server_t *s, folder_t *hf)
{
    reg_store_t *st = reg_server_store(s);
    hold_arm();
    capture_t c = {0};
    msg_t m;
    create_msg(&m, "imp2", "imported", hf);
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK(hold_wait());
    check_loop_answers(s, "base");
    hold_release();
    CHECK(pump_final(s, &c));
    CHECK(c.n >= 4 && c.v[0].type == MSG_progress);
    if (c.n >= 4) {
        CHECK_EQ_STR(c.v[0].u.progress.status, "converting model");
        CHECK_EQ_STR(c.v[c.n - 3].u.progress.status, "writing manifest");
        CHECK_EQ_STR(c.v[c.n - 2].u.progress.status, "success");
        CHECK(c.v[c.n - 1].type == MSG_ok);
    }
    capture_clear(&c);
    CHECK(test_store_has_model(st, "imported"));
    CHECK_EQ_INT(count_temps(st), 0);
    printf("  a held conversion finishes with the progress of an inline create\n");
}

/* An inline create of `dup` lands while the conversion for `dup` is held;
 * the conversion's manifest replaces it and prunes what only it named. */
static void test_same_name_at_once(reg_server_t *s, folder_t *hf, folder_t *gguf)
{
    reg_store_t *st = reg_server_store(s);
    hold_arm();
    capture_t c = {0}, q = {0};
    msg_t m;
    create_msg(&m, "dup1", "dup", hf);
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK(hold_wait());
    create_msg(&m, "dup2", "dup", gguf);
    m.u.create.system = "the first dup";
    m.u.create.has_system = true;
    reg_server_handle(s, &m, capture_fn, &q);
    CHECK_MSG(q.n && q.v[q.n - 1].type == MSG_ok, "the inline create failed");
    CHECK(has_manifest(st, "dup"));
    capture_clear(&q);
    hold_release();
    CHECK(pump_final(s, &c));
    CHECK(c.n && c.v[c.n - 1].type == MSG_ok);
    capture_clear(&c);
    /* The later (the conversion's) is the model: no system. */
    msg_init(&m, MSG_show, "s");
    m.u.show.model = "dup";
    m.u.show.has_model = true;
    reg_server_handle(s, &m, capture_fn, &q);
    CHECK(q.n == 1 && q.v[0].type == MSG_show_reply &&
          !strstr(q.v[0].u.show_reply.body, "the first dup"));
    capture_clear(&q);
    printf("  two creates of one name: the later replaced and pruned the earlier\n");
}

/* A pull of the name lands while the conversion for it is held; the
 * create's manifest then replaces the pulled one and prunes its blobs. */
static void test_create_and_pull(reg_server_t *s, folder_t *hf)
{
    fake_t f;
    fake_start(&f);
    fake_add_config(&f, "llama");
    fake_add_blob(&f, 3000, 41);
    fake_add_blob(&f, 40, 42);
    fake_set_manifest(&f);
    char name[96];
    snprintf(name, sizeof name, "127.0.0.1:%d/library/m:t", f.port);
    hold_arm();
    capture_t c = {0};
    msg_t m;
    create_msg(&m, "cp1", name, hf);
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK(hold_wait());
    msg_init(&m, MSG_pull, "pl1");
    m.u.pull.model = name;
    m.u.pull.has_model = true;
    m.u.pull.insecure = true;
    m.u.pull.has_insecure = true;
    reg_server_handle(s, &m, capture_fn, &c);
    const msg_t *r = pump_final_of(s, &c, "pl1");
    CHECK_MSG(r && r->type == MSG_ok, "the pull failed: %s",
              r && r->type == MSG_error ? r->u.error.message : "no answer");
    CHECK(test_store_has_model(reg_server_store(s), name));
    hold_release();
    r = pump_final_of(s, &c, "cp1");
    CHECK_MSG(r && r->type == MSG_ok, "the create failed: %s",
              r && r->type == MSG_error ? r->u.error.message : "no answer");
    capture_clear(&c);
    /* The create's model (qwen2), not the pulled one (llama). */
    msg_init(&m, MSG_show, "s");
    m.u.show.model = name;
    m.u.show.has_model = true;
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_show_reply &&
          strstr(c.v[0].u.show_reply.body, "qwen2"));
    capture_clear(&c);
    fake_stop(&f);
    printf("  a create and a pull of one name: the later replaced and pruned the earlier\n");
}

int main(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    char tool[1024];
    snprintf(tool, sizeof tool, "%s/bin/corral-gguf-to-hf", bd ? bd : ".");
    if (access(tool, X_OK) != 0)
        return check_skip("test_registry_create_jobs",
                          "no corral-gguf-to-hf in $CORRAL_BUILD_DIR/bin");
    main_g = pthread_self();
    if (!test_tmp_make("corral-createjobs"))
        return 1;
    /* the model: a small qwen2 in F32, its GGUF and its HF folder */
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "qwen2";
    o.seed = 5;
    cr_err_t err;
    char gguf_path[200], hf_dir[200], cmd[2600];
    snprintf(gguf_path, sizeof gguf_path, "%s", test_tmp_path("src.gguf"));
    snprintf(hf_dir, sizeof hf_dir, "%s", test_tmp_path("hf"));
    CHECK_MSG(rn_synth_write(&o, gguf_path, &err) == CR_OK, "synth: %s", err.msg);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", tool, gguf_path, hf_dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);

    reg_server_t *s = reg_server_new(test_tmp_path("models"), &err);
    CHECK_MSG(s != NULL, "server: %s", err.msg);
    if (!s || check_failed_g) {
        test_tmp_remove();
        return check_finish("test_registry_create_jobs");
    }
    reg_store_t *st = reg_server_store(s);
    reg_store_set_step_hook(st, on_step, &hold_g);
    folder_t hf = {0}, gguf = {0};
    upload_folder(st, hf_dir, &hf);
    CHECK(hf.n >= 3);
    /* "base": a quick create from the GGUF, answered inline as before */
    char gguf_dir[200];
    snprintf(gguf_dir, sizeof gguf_dir, "%s", test_tmp_path("g"));
    mkdir(gguf_dir, 0755);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/model.gguf'", gguf_path, gguf_dir);
    CHECK(system(cmd) == 0);
    upload_folder(st, gguf_dir, &gguf);
    capture_t c = {0};
    msg_t m;
    create_msg(&m, "b", "base", &gguf);
    reg_server_handle(s, &m, capture_fn, &c);
    CHECK_MSG(is_final(&c) && c.v[c.n - 1].type == MSG_ok, "a GGUF create is not inline");
    capture_clear(&c);

    test_cancel_mid_conversion(s, &hf);
    doctor_expect_unused(st, hf.n, "after the cancel");
    test_conversion_completes(s, &hf);
    test_same_name_at_once(s, &hf, &gguf);
    doctor_expect_unused(st, hf.n, "after two creates of one name");
    test_create_and_pull(s, &hf);
    doctor_expect_unused(st, hf.n, "after a create and a pull of one name");

    reg_server_destroy(&s);
    test_tmp_remove();
    return check_finish("test_registry_create_jobs");
}
