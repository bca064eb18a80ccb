/* jobs.c: pull, push and long-create threads (see jobs.h). */
#include "lib/prelude.h"
#include "services/registry/jobs.h"
#include "lib/log.h"
#include "services/registry/create.h"
#include "services/registry/push.h"

#include <pthread.h>
#include <stdatomic.h>

#define JOB_LINGER_MS 5000 /* a finished job's replies wait this long */

typedef struct job {
    char id[MSG_ID_MAX + 1];
    msg_t req; /* deep copy of the request: the loop frees its own */
    unsigned char *identity;
    size_t id_len;
    atomic_bool cancel;
    atomic_bool finished;
    pthread_t thread;
    struct reg_jobs *owner;
    struct job *next;
} job_t;

struct reg_jobs {
    reg_store_t *store;
    const reg_xfer_env_t *env;
    zsock_t *in;
    char endpoint[64];
    pthread_mutex_t mu;
    job_t *head;
};

reg_jobs_t *reg_jobs_new(reg_store_t *s, const reg_xfer_env_t *env)
{
    reg_jobs_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->store = s;
    j->env = env;
    pthread_mutex_init(&j->mu, NULL);
    snprintf(j->endpoint, sizeof j->endpoint, "inproc://reg-jobs-%p", (void *)j);
    j->in = zsock_new(ZMQ_PULL);
    if (!j->in || zsock_bind(j->in, "%s", j->endpoint) < 0) {
        reg_jobs_destroy(&j);
        return NULL;
    }
    return j;
}

static void job_free(job_t *job)
{
    msg_clear(&job->req);
    free(job->identity);
    free(job);
}

void reg_jobs_destroy(reg_jobs_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_jobs_t *j = *self_p;
    pthread_mutex_lock(&j->mu);
    for (job_t *x = j->head; x; x = x->next)
        atomic_store(&x->cancel, true);
    job_t *list = j->head;
    j->head = NULL;
    pthread_mutex_unlock(&j->mu);
    for (job_t *x = list, *n; x; x = n) {
        n = x->next;
        pthread_join(x->thread, NULL);
        job_free(x);
    }
    zsock_destroy(&j->in);
    pthread_mutex_destroy(&j->mu);
    free(j);
    *self_p = NULL;
}

zsock_t *reg_jobs_socket(reg_jobs_t *j)
{
    return j->in;
}

/* ---- the job thread ---- */

typedef struct sink {
    job_t *job;
    zsock_t *out;
} sink_t;

static void send_msg(sink_t *k, const msg_t *m)
{
    cr_buf_t b;
    cr_buf_init(&b, 1u << 20);
    cr_err_t err;
    if (msg_encode(m, &b, &err) == CR_OK) {
        zmsg_t *zm = zmsg_new();
        zmsg_addmem(zm, k->job->identity, k->job->id_len);
        zmsg_addmem(zm, b.data, b.len);
        if (zmsg_send(&zm, k->out) != 0)
            zmsg_destroy(&zm);
    } else {
        cr_log_warn("request %s: encoding %s: %s", k->job->id,
                    msg_type_name(m->type), err.msg);
    }
    cr_buf_free(&b);
}

static void on_progress(void *ctx, const msg_progress_body_t *p)
{
    sink_t *k = ctx;
    msg_t m;
    msg_init(&m, MSG_progress, k->job->id);
    m.u.progress = *p;
    send_msg(k, &m);
    /* The strings are borrowed: do not let msg_clear free them. */
    memset(&m.u.progress, 0, sizeof m.u.progress);
    msg_clear(&m);
}

static void *job_main(void *arg)
{
    job_t *job = arg;
    reg_jobs_t *j = job->owner;
    sink_t k = {job, zsock_new(ZMQ_PUSH)};
    if (k.out) {
        zsock_set_linger(k.out, JOB_LINGER_MS);
        /* A loop that stopped reading (shutting down) must not hold the
         * job forever: a progress line is dropped instead. */
        zsock_set_sndtimeo(k.out, JOB_LINGER_MS);
        if (zsock_connect(k.out, "%s", j->endpoint) < 0)
            zsock_destroy(&k.out);
    }
    if (!k.out) {
        cr_log_error("request %s: no reply socket", job->id);
        atomic_store(&job->finished, true);
        return NULL;
    }
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st;
    const msg_t *r = &job->req;
    if (r->type == MSG_pull)
        st = reg_pull(j->store, j->env, r->u.pull.model, r->u.pull.insecure,
                      &job->cancel, on_progress, &k, &err);
    else if (r->type == MSG_push)
        st = reg_push(j->store, j->env, r->u.push.model, r->u.push.insecure,
                      &job->cancel, on_progress, &k, &err);
    else {
        /* FROM a model the store lacks: pull it first, its progress in
         * this create's stream (Ollama's parseFromModel). */
        st = CR_OK;
        if (reg_create_needs_pull(j->store, &r->u.create))
            st = reg_pull(j->store, j->env, r->u.create.from, r->u.create.insecure,
                          &job->cancel, on_progress, &k, &err);
        if (!st)
            st = reg_create_ex(j->store, &r->u.create, &job->cancel, on_progress,
                               &k, &err);
    }
    if (st && r->type == MSG_create)
        cr_log_info("create %s failed: %s",
                    r->u.create.model ? r->u.create.model : "?", err.msg);
    msg_t m;
    if (st)
        msg_make_error(&m, job->id, st, "%s", err.msg[0] ? err.msg : cr_status_str(st));
    else
        msg_init(&m, MSG_ok, job->id);
    send_msg(&k, &m);
    msg_clear(&m);
    zsock_destroy(&k.out);
    atomic_store(&job->finished, true);
    return NULL;
}

cr_status_t reg_jobs_start(reg_jobs_t *j, const msg_t *req,
                           const void *identity, size_t id_len, cr_err_t *err)
{
    if (req->type != MSG_pull && req->type != MSG_push && req->type != MSG_create)
        return cr_err_set(err, CR_E_INTERNAL, "not a pull, push or create");
    if (reg_jobs_reap(j) >= REG_JOBS_MAX)
        return cr_err_set(err, CR_E_BUSY,
                          "too many pulls, pushes and creates at once");
    job_t *job = calloc(1, sizeof *job);
    if (!job)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    snprintf(job->id, sizeof job->id, "%s", req->id);
    job->identity = malloc(id_len ? id_len : 1);
    job->id_len = id_len;
    job->owner = j;
    if (!job->identity || msg_copy(req, &job->req)) {
        job_free(job);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    if (id_len)
        memcpy(job->identity, identity, id_len);
    atomic_init(&job->cancel, false);
    atomic_init(&job->finished, false);
    pthread_mutex_lock(&j->mu);
    if (pthread_create(&job->thread, NULL, job_main, job) != 0) {
        pthread_mutex_unlock(&j->mu);
        job_free(job);
        return cr_err_set(err, CR_E_NOMEM, "cannot start a thread");
    }
    job->next = j->head;
    j->head = job;
    pthread_mutex_unlock(&j->mu);
    const msg_t *r = &job->req;
    const char *model = r->type == MSG_pull   ? r->u.pull.model
                        : r->type == MSG_push ? r->u.push.model
                                              : r->u.create.model;
    cr_log_info("request %s: %s %s", job->id, msg_type_name(r->type),
                model ? model : "?");
    return CR_OK;
}

bool reg_jobs_cancel(reg_jobs_t *j, const char *id)
{
    bool found = false;
    pthread_mutex_lock(&j->mu);
    for (job_t *x = j->head; x; x = x->next)
        if (!strcmp(x->id, id)) {
            atomic_store(&x->cancel, true);
            found = true;
        }
    pthread_mutex_unlock(&j->mu);
    return found;
}

bool reg_jobs_has(reg_jobs_t *j, const char *id)
{
    bool found = false;
    pthread_mutex_lock(&j->mu);
    for (job_t *x = j->head; x; x = x->next)
        if (!strcmp(x->id, id) && !atomic_load(&x->finished))
            found = true;
    pthread_mutex_unlock(&j->mu);
    return found;
}

size_t reg_jobs_cancel_peer(reg_jobs_t *j, const void *identity, size_t id_len)
{
    size_t n = 0;
    pthread_mutex_lock(&j->mu);
    for (job_t *x = j->head; x; x = x->next)
        if (id_len && x->id_len == id_len &&
            !memcmp(x->identity, identity, id_len) &&
            !atomic_load(&x->finished) && !atomic_exchange(&x->cancel, true)) {
            cr_log_info("request %s: its gateway connection is gone; canceling",
                        x->id);
            n++;
        }
    pthread_mutex_unlock(&j->mu);
    return n;
}

bool reg_jobs_recv(reg_jobs_t *j, int timeout_ms, zframe_t **identity,
                   zframe_t **frame)
{
    *identity = *frame = NULL;
    zpoller_t *p = zpoller_new(j->in, NULL);
    if (!p)
        return false;
    void *which = zpoller_wait(p, timeout_ms);
    zpoller_destroy(&p);
    if (which != j->in)
        return false;
    zmsg_t *zm = zmsg_recv(j->in);
    if (!zm)
        return false;
    if (zmsg_size(zm) != 2) {
        zmsg_destroy(&zm);
        return false;
    }
    *identity = zmsg_pop(zm);
    *frame = zmsg_pop(zm);
    zmsg_destroy(&zm);
    return true;
}

size_t reg_jobs_reap(reg_jobs_t *j)
{
    size_t running = 0;
    pthread_mutex_lock(&j->mu);
    for (job_t **pp = &j->head; *pp;) {
        job_t *x = *pp;
        if (atomic_load(&x->finished)) {
            *pp = x->next;
            pthread_join(x->thread, NULL);
            job_free(x);
        } else {
            running++;
            pp = &x->next;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return running;
}
