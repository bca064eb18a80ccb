/* room.c: what a pending load does about memory (sch_room_decide): load
 * now, evict one idle runner first, wait, or fail. Pure over the server's
 * lists and the ledger (ledger.c); sched.c's schedule() carries out the
 * answer (it owns starting and stopping runners). */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

/* A runner whose memory cannot be had by evicting: serving or loading. */
static bool any_busy(const sch_server_t *s)
{
    for (const runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->n_active > 0 || rn->state == RS_STARTING ||
            rn->state == RS_LOADING)
            return true;
    return false;
}

static bool any_stopping_on(const sch_server_t *s, const sch_node_t *host)
{
    for (const runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->node == host && rn->state == RS_STOPPING)
            return true;
    return false;
}

sch_room_t sch_room_decide(sch_server_t *s, request_t *r, sch_plan_t *plan,
                           bool *has_plan, sch_node_t **host,
                           runner_t **victim, cr_status_t *st, cr_err_t *err)
{
    *victim = NULL;
    *st = sch_request_place(s, r, plan, has_plan, host, err);
    msg_options_t lo;
    sch_request_load_opts(r, &lo);
    bool forced = lo.has_num_gpu && lo.num_gpu >= 0;
    const cr_inventory_t *hinv = *host ? &(*host)->inv : &s->inv;
    bool fits = !*st && (!*has_plan || hinv->n_gpus == 0 || forced ||
                         plan->full_offload);
    if (fits)
        return SCH_ROOM_LOAD;
    if (!s->runner_list)
        return *st ? SCH_ROOM_FAIL : SCH_ROOM_LOAD; /* alone: may spill */
    /* Make room on the host the room view picks; leave the others be. */
    *st = sch_request_place_room(s, r, plan, has_plan, host, err);
    if (*st)
        return any_busy(s) ? SCH_ROOM_WAIT : SCH_ROOM_FAIL;
    if (!sch_host_has_runners(s, *host))
        return SCH_ROOM_LOAD; /* empty: its room plan is its real plan */
    if (any_stopping_on(s, *host))
        return SCH_ROOM_WAIT; /* memory returns when it is reaped */
    *victim = sch_eviction_victim(s, *host, false);
    return *victim ? SCH_ROOM_EVICT : SCH_ROOM_WAIT;
}
