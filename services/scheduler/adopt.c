/* adopt.c: taking over runners that outlived a scheduler restart.
 *
 * A runner whose scheduler went away keeps its model and, once the new
 * scheduler binds the runners endpoint again (ZeroMQ reconnects its
 * DEALER by itself), says hello again with what it holds. The new
 * scheduler knows nothing of it: it builds a READY runner from the hello
 * so the next request for that model is served without a load. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include "lib/log.h"
#include "services/scheduler/options.h"
#include "services/scheduler/spawn.h"

runner_t *sch_runner_adopt(sch_server_t *s, const char *id,
                           const msg_hello_body_t *h)
{
    if (!h->has_name || !h->name || !*h->name || !h->has_model_path ||
        !h->model_path || !*h->model_path)
        return NULL;
    if (!id[0] || strlen(id) >= sizeof(((runner_t *)0)->id))
        return NULL;
    runner_t *rn = calloc(1, sizeof *rn);
    if (!rn)
        return NULL;
    snprintf(rn->id, sizeof rn->id, "%s", id);
    msg_init(&rn->resolved, MSG_resolved, id);
    msg_resolved_body_t *res = &rn->resolved.u.resolved;
    res->name = msg_strdup(&rn->resolved, h->name);
    res->model_path = msg_strdup(&rn->resolved, h->model_path);
    if (!res->name || !res->model_path) {
        msg_clear(&rn->resolved);
        free(rn);
        return NULL;
    }
    res->has_name = res->has_model_path = true;
    if (h->has_options)
        sch_options_overlay_load(&rn->load_opts, h->options);
    /* Signal only a process that is really a runner. */
    pid_t pid = h->has_pid && h->pid > 0 && h->pid < INT32_MAX
                    ? (pid_t)h->pid
                    : 0;
    rn->pid = sch_pid_is_runner(pid, s->cfg.runner_bin) ? pid : 0;
    rn->adopted = true;
    rn->n_slots = h->has_num_parallel && h->num_parallel > 0 &&
                          h->num_parallel < 1024
                      ? (int)h->num_parallel
                      : s->cfg.num_parallel;
    rn->keep_alive_ms = s->cfg.keep_alive_ms;
    rn->size = h->has_size && h->size > 0 ? h->size : 0;
    rn->size_vram = h->has_size_vram && h->size_vram > 0 ? h->size_vram : 0;
    rn->context_length = h->has_context_length && h->context_length > 0
                             ? h->context_length
                             : 0;
    rn->state = RS_READY;
    rn->state_since_ms = rn->last_used_ms = rn->last_seen_ms = sch_now_ms(s);
    rn->next = s->runner_list;
    s->runner_list = rn;
    if (pid > 0 && rn->pid == 0)
        cr_log_warn("runner %s claims pid %d, which is not %s; it will not "
                    "be signalled",
                    id, (int)pid, s->cfg.runner_bin);
    cr_log_info("adopted runner %s (pid %d) with %s already loaded (%" PRId64
                " bytes, ctx %" PRId64 ")",
                id, (int)rn->pid, res->name, rn->size, rn->context_length);
    return rn;
}
