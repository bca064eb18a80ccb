/* load.c: the load message a new runner gets: the model as the registry
 * resolved it, the merged load options, and the placement plan. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include "services/scheduler/options.h"

void sch_load_build(const sch_server_t *s, const runner_t *rn, msg_t *load,
                    sch_load_scratch_t *scratch)
{
    msg_init(load, MSG_load, rn->id);
    const msg_resolved_body_t *res = &rn->resolved.u.resolved;
    msg_load_body_t *b = &load->u.load;
    b->name = res->name;
    b->has_name = true;
    b->model_path = res->model_path;
    b->has_model_path = true;
    b->template = res->template;
    b->has_template = res->has_template;
    b->system = res->system;
    b->has_system = res->has_system;
    b->renderer = res->renderer;
    b->has_renderer = res->has_renderer;
    b->parser = res->parser;
    b->has_parser = res->has_parser;
    b->adapters = res->adapters;
    b->has_adapters = res->has_adapters;
    b->projector = res->projector;
    b->has_projector = res->has_projector;
    b->draft_path = res->draft_path;
    b->has_draft_path = res->has_draft_path;
    b->messages.v = res->messages.v;
    b->messages.n = res->messages.n;
    b->has_messages = res->has_messages;
    msg_options_t *opts = &scratch->opts;
    memset(opts, 0, sizeof *opts);
    sch_options_overlay(opts, res->params);
    sch_options_overlay(opts, &rn->load_opts);
    if (!opts->has_num_ctx) {
        opts->num_ctx = sch_options_default_ctx(sch_vram_total(s));
        opts->has_num_ctx = true;
    }
    opts->stop = (msg_strs_t){0};
    opts->has_stop = false;
    b->options = opts;
    b->has_options = true;
    b->num_parallel = rn->n_slots;
    b->has_num_parallel = true;
    msg_device_split_t *devs = scratch->devs;
    if (rn->has_plan) {
        b->gpu_layers = rn->plan.gpu_layers;
        b->has_gpu_layers = true;
        for (size_t j = 0; j < rn->plan.n_devs; j++) {
            const sch_plan_dev_t *d = &rn->plan.devs[j];
            memset(&devs[j], 0, sizeof devs[j]);
            devs[j].index = d->index;
            devs[j].has_index = true;
            devs[j].uuid = (char *)sch_runner_inv(s, rn)->gpus[d->slot].uuid;
            devs[j].has_uuid = devs[j].uuid[0] != '\0';
            devs[j].first_layer = d->first_layer;
            devs[j].has_first_layer = true;
            devs[j].layers = d->n_layers;
            devs[j].has_layers = true;
            devs[j].bytes = d->bytes;
            devs[j].has_bytes = true;
        }
        b->devices.v = devs;
        b->devices.n = rn->plan.n_devs;
        b->has_devices = rn->plan.n_devs > 0;
        /* the cache type the estimate counted (f16 unless quantized) */
        const char *kv = cr_kv_cache_type_name(rn->plan.kv_type);
        if (kv && rn->plan.kv_type != CR_TYPE_F16) {
            b->kv_cache_type = (char *)kv;
            b->has_kv_cache_type = true;
        }
    }
}
