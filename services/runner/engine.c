/* engine.c: one loaded model answering generate and chat requests in
 * parallel slots.
 *
 * A request runs in five steps, each a function below:
 *   options  -> sampler params, num_predict, stop strings, num_keep
 *   prompt   -> text through the template (prompt.c), then token ids, then
 *               the free slot whose cached tokens share the longest prefix
 *   prefill  -> evaluate what the slot's cache does not already hold
 *   decode   -> sample, detokenize (whole UTF-8 only), hold back stop
 *               strings, send pieces, shift the context when it fills
 *   done     -> reason, counts, durations, context ids
 * rn_engine_start does the first two; rn_engine_step advances every busy
 * slot by one forward pass (one token per decoding slot plus prompt chunks
 * of prefilling ones, all in one rn_ctx_eval_batch) and ends the slots that
 * finish. Everything sized by n_ctx is allocated per slot at load; a
 * request allocates only its prompt text, stop matcher and grammar. */
#include "lib/prelude.h"
#include "services/runner/engine.h"

#include <math.h>
#include <time.h>

#include "lib/buf.h"
#include "lib/log.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backends.h"
#include "lib/env.h"
#include "services/runner/model/forward.h"
#include "services/runner/grammar/grammar.h"
#include "services/runner/output/logprob_json.h"
#include "services/runner/model/model.h"
#include "services/runner/output/output.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/prompt/prompt_tokens.h"
#include "services/runner/prompt/renderer.h"
#include "lib/chat_formats.h"
#include "services/runner/pace.h"
#include "services/runner/sampler.h"
#include "services/runner/spec.h"
#include "services/runner/testhooks.h"
#include "services/runner/spec_draft.h"
#include "services/runner/output/stop.h"
#include "services/runner/output/thinking.h"
#include "services/runner/template/template.h"
#include "services/runner/jinja/jinja.h"
#include "services/runner/prompt/prompt_jinja.h"
#include "services/runner/prompt/precut.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/prompt/prompt_images.h"
#include "services/runner/vision/vision.h"
#include "lib/vision_embedded.h"

#include <jansson.h>

#define PROMPT_TEXT_MAX (64u << 20) /* rendered prompt bytes */
#define PREFILL_STEP 64             /* tokens between cancel checks */
#define DEFAULT_NUM_KEEP 4
/* llama.cpp's default --draft-p-min: a draft model less sure than this
 * stops drafting for the step (spec_draft.h) */
#define DEFAULT_DRAFT_P_MIN 0.75f
#define SPEC_BACKOFF_MAX 16 /* most steps a missing speculation pauses */
#define SPEC_GIVE_UP 6      /* drafting steps in a row that all missed, after
                               which a draft model is dropped */

/* The effective knobs of one request. */
typedef struct req_opts {
    rn_sampler_params_t sp;
    int64_t num_predict; /* >= 1 */
    int num_keep;
    int draft_ngram;     /* tokens drafted per step by prompt lookup; 0 off */
    float draft_p_min;   /* a draft model stops drafting below this (spec_draft.h) */
    bool ignore_eos;        /* end-of-generation ids are never sampled */
    const msg_strs_t *stop; /* borrowed from the request, during start only */
} req_opts_t;

typedef enum slot_state { SLOT_FREE, SLOT_PREFILL, SLOT_DECODE } slot_state_t;

/* One parallel request: its sequence in the context and all its state. */
typedef struct slot {
    int id;              /* its sequence in the context */
    slot_state_t state;
    int64_t used;        /* engine clock when it last ended (LRU choice) */
    int32_t *seq;        /* tokens in its KV cache, in order [n_ctx] */
    int n_seq;
    int32_t *prompt;     /* this request's prompt tokens [n_ctx] */
    int n_prompt, at;    /* prompt length; prefilled up to `at` */
    int n_cached;        /* of the prompt, tokens its KV cache already held */
    rn_sampler_t *sampler;
    rn_script_cursor_t script; /* with a test script: where its answer is */
    rn_detok_t *detok;
    rn_output_t *output; /* thinking / tool-call split of the answer */
    float *masked;       /* logits after the grammar mask [n_vocab], made on
                            the slot's first request with a format */
    /* The running request. */
    rn_sink_t sink;
    rn_finish_fn finish;
    rn_grammar_t *grammar;
    rn_stop_t *stop;
    req_opts_t ro;
    bool with_context;   /* generate (not raw): done carries the ids */
    bool want_logprobs;
    int64_t top_logprobs;
    int64_t n_gen;
    int32_t pending;     /* sampled, to evaluate next step */
    bool has_pending;
    bool stopped;        /* a stop string matched */
    bool shift;          /* a full context shifts (else the answer ends,
                            "length", as Ollama's shift:false) */
    const char *reason;
    int64_t t_start, t_prompt, t_decode; /* ns */
    /* A prompt with images: the embeddings of its image tokens in prompt
     * order [n_img_tok][dim] (rows of images in the cached prefix are not
     * filled: never read), and how many of them lie before `at`. */
    float *img_rows;
    int img_at;
    /* M-RoPE models (qwen2vl) with images: the prompt's positions
     * [n_prompt][3] (forward.h's rope_pos), image tokens on their grid */
    int32_t *rope;
    /* Speculative decoding (spec.h): the request drafts up to draft_k
     * tokens per step (0: off); span_tok is the pending token and this
     * step's n_draft drafts, evaluated together; after the pass n_verify
     * drafts sit in the cache past n_seq, spec_logits row i holding the
     * logits after span_tok[i] ([spec_rows][n_vocab], made on the slot's
     * first speculating request). */
    int draft_k;
    bool draft_by_model; /* drafts from the engine's draft model, not lookup */
    bool draft_sampled;  /* ... drawn from q (a sampling request), q rows in
                            spec_q [draft_k][n_vocab] (made on the slot's
                            first such request), drawn with draft_rng */
    float *spec_q;
    int spec_q_rows;
    rn_rng_t draft_rng;
    int n_premade;       /* this step's drafts from the draft model, made
                            for all slots at once (draft_all) */
    int32_t span_tok[RN_SPEC_MAX_DRAFT + 1];
    int n_draft, n_verify;
    float *spec_logits;
    int spec_rows;
    int64_t n_drafted, n_accepted; /* this request's drafts and hits */
    /* After the spec_misses-th step in a row whose drafts were all
     * rejected, the slot decodes spec_skip = 1, 2, 4 .. SPEC_BACKOFF_MAX
     * steps without drafting (the first accepted draft resets both):
     * drafts that keep missing (an answer that repeats nothing, a draft
     * that disagrees) cost a pass every so often instead of every step.
     * A draft model missing SPEC_GIVE_UP steps in a row is dropped for
     * the request. */
    int spec_skip, spec_misses;
    /* For the pace (pace.h), in steps (stats.steps): when the request
     * started, and when it sent its first token. */
    int64_t arrived_tick, streaming_tick;
} slot_t;

struct rn_engine {
    /* Backend instances (backends.h): [0] the host's, then one per device
     * of the scheduler's plan that opened; dev[i] is be[i]'s device. */
    be_backend_t *be[RN_MAX_RANGES + 1];
    int dev[RN_MAX_RANGES + 1];
    int n_be;
    /* Why layers the plan put on devices run on the host ("" when none
     * did): for the ready message, so the scheduler can say why. */
    char offload_error[CR_ERR_MSG_MAX + 64];
    rn_model_t *model;
    rn_lora_t *lora;  /* the model's LoRA adapters, or NULL */
    rn_vision_t *vision; /* the projector (load.projector), or NULL */
    rn_spec_draft_t *draft; /* the draft model (load.draft_path), or NULL */
    int draft_k;            /* its tokens per step (draft_num_predict); 0 off */
    bool tower_in_file;  /* the model file carries a vision tower (v.*) */
    bool img_full;       /* with vision: an image's tokens attend to each
                            other both ways (then a prefill step never
                            splits an image) */
    rn_tokenizer_t *tok;
    /* The vocabulary's end-of-generation ids, listed at the first request
     * with ignore_eos (NULL before) [n_eog]. */
    int32_t *eog_ids;
    int n_eog;
    rn_ctx_t *ctx;    /* one sequence per slot */
    rn_pace_t pace;   /* prompt tokens a step with decoders may take */
    rn_script_t *script; /* CORRAL_TEST_SCRIPT: forced answers, or NULL */
    msg_t load;       /* owned copy of the load message (template, ...) */
    rn_tmpl_t *tmpl;  /* the model's template, parsed once */
    const rn_prompt_renderer_t *renderer; /* RENDERER: used instead of tmpl */
    const char *parser; /* PARSER: splits answers instead of the template's
                           tags (in load), or NULL */
    /* Without a Go template, the GGUF's own Jinja chat template (or NULL),
     * what the output stages split its answers by, and the vocabulary's
     * BOS/EOS texts it is given. */
    jj_template_t *jinja;
    cr_jinja_tags_t jinja_tags; /* lib/chat_formats.h */
    char *bos_text, *eos_text;
    int n_ctx;
    int n_slots;
    slot_t *slots;    /* [n_slots] */
    int32_t *prompt;  /* a prompt before it has a slot, embed inputs [n_ctx] */
    rn_ctx_span_t *spans; /* one step's batch [n_slots] */
    int *span_slot;   /* the slot of each span [n_slots] */
    rn_pace_prompt_t *waiting; /* one step's prefilling slots [n_slots] */
    int *take;        /* the pace's tokens for each of them [n_slots] */
    int64_t clock;    /* counts ended requests, for the LRU slot */
    rn_engine_stats_t stats;
    rn_grammar_vocab_t *gvocab; /* token bytes for structured output; made
                                   on the first request with a format */
    float *embed;     /* embedding output of the last embed request */
    size_t embed_cap; /* floats allocated in embed */
    cr_buf_t out;     /* text released by the stop matcher (one slot at a
                         time) */
};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- load ---- */

/* The model's built-in renderer and parser, when its load names them. */
static cr_status_t pick_formats(rn_engine_t *e, cr_err_t *err)
{
    const msg_load_body_t *ld = &e->load.u.load;
    if (ld->has_renderer && ld->renderer && *ld->renderer) {
        e->renderer = rn_prompt_renderer_find(ld->renderer);
        if (!e->renderer)
            return cr_err_set(err, CR_E_INVALID, "%s: unknown renderer \"%s\"",
                              ld->name, ld->renderer);
    }
    if (ld->has_parser && ld->parser && *ld->parser) {
        if (!rn_parser_is_known(ld->parser))
            return cr_err_set(err, CR_E_INVALID, "%s: unknown parser \"%s\"",
                              ld->name, ld->parser);
        e->parser = ld->parser;
    }
    return CR_OK;
}

/* The instance of device `dev` of kind k, created on first use; NULL (with
 * a warning: its layers stay on the host) when it cannot be opened. */
static be_backend_t *device_instance(rn_engine_t *e, const rn_backend_kind_t *k, int dev)
{
    for (int i = 1; i < e->n_be; i++)
        if (e->dev[i] == dev)
            return e->be[i];
    if (e->n_be == (int)CR_ARRAY_LEN(e->be))
        return NULL;
    cr_err_t gerr;
    cr_err_clear(&gerr);
    if (k->create(dev, 0, &e->be[e->n_be], &gerr)) {
        cr_log_warn("%s device %d unavailable (%s): its layers run on the %s", k->name,
                    dev, gerr.msg, rn_backend_host()->name);
        snprintf(e->offload_error, sizeof e->offload_error, "%s device %d: %s", k->name,
                 dev, gerr.msg);
        return NULL;
    }
    e->dev[e->n_be] = dev;
    return e->be[e->n_be++];
}

/* The scheduler's plan as a placement (model.h): each device of
 * load->devices computes its range of layers on an instance of the
 * accelerator kind (backends.h); the rest stay on the host. The plan
 * numbers layers as the placement does and offloads the LAST gpu_layers
 * (blocks then the output layer, as llama.cpp's n_gpu_layers); a plan
 * with gpu_layers but no device list puts them on main_gpu. No
 * accelerator (its module missing, no driver or device, or not enabled):
 * all on the host, with a warning and the reason in e->offload_error. The
 * accelerator is only looked for (its module loaded) when the plan has
 * layers for it. */
static void place_devices(rn_engine_t *e, const msg_load_body_t *load,
                          const msg_options_t *o, rn_placement_t *pl)
{
    if (!load->has_gpu_layers || load->gpu_layers <= 0)
        return;
    cr_err_t why;
    cr_err_clear(&why);
    const rn_backend_kind_t *k = rn_backend_accel(&why);
    if (!k) {
        cr_log_warn("%s: the plan puts %" PRId64 " layers on GPUs, running them on the %s: "
                    "%s", load->name, load->gpu_layers, rn_backend_host()->name, why.msg);
        snprintf(e->offload_error, sizeof e->offload_error, "%s", why.msg);
        return;
    }
    if (load->has_devices && load->devices.n > 0) {
        for (size_t i = 0; i < load->devices.n && pl->n_ranges < RN_MAX_RANGES; i++) {
            const msg_device_split_t *d = &load->devices.v[i];
            if (!d->has_first_layer || !d->has_layers || d->layers <= 0 ||
                d->first_layer < 0 || d->first_layer > RN_MODEL_MAX_LAYERS ||
                d->layers > RN_MODEL_MAX_LAYERS + 1)
                continue;
            be_backend_t *be = device_instance(e, k, (int)d->index);
            if (be)
                pl->ranges[pl->n_ranges++] =
                    (rn_range_t){be, (int)d->first_layer, (int)d->layers};
        }
        return;
    }
    be_backend_t *be = device_instance(e, k, o && o->has_main_gpu ? (int)o->main_gpu : 0);
    if (be)
        pl->ranges[pl->n_ranges++] = (rn_range_t){
            be, -1, (int)CR_MIN(load->gpu_layers, (int64_t)RN_MODEL_MAX_LAYERS + 1)};
}

/* One log line per part of the context: its layers, instance and memory. */
static void log_parts(const rn_engine_t *e)
{
    for (int i = 0; i < rn_ctx_n_parts(e->ctx); i++) {
        rn_ctx_part_info_t pi;
        rn_ctx_part_info(e->ctx, i, &pi);
        cr_log_info("layers %d-%d%s on %s: backend holds %.1f MiB of weights and "
                    "%.1f MiB of buffers; KV cache %.1f MiB (%s)", pi.first_layer,
                    pi.first_layer + pi.n_layers - 1, pi.output ? " + output" : "",
                    pi.be->ops->name, (double)pi.be_weight_bytes / (1 << 20),
                    (double)pi.be_buffer_bytes / (1 << 20),
                    (double)pi.kv_bytes / (1 << 20),
                    cr_kv_cache_type_name(rn_ctx_kv_type(e->ctx)));
    }
}

static char *token_text_dup(const rn_tokenizer_t *tok, int32_t id)
{
    size_t n = 0;
    const char *t = id >= 0 ? rn_tokenizer_token_text(tok, id, &n) : NULL;
    return strndup(t ? t : "", t ? n : 0);
}

/* Without a Go template (load->template empty) or a built-in RENDERER, a
 * GGUF that carries tokenizer.chat_template is prompted through that Jinja
 * template. A template the renderer cannot parse fails the load, naming
 * the construct. */
static cr_status_t load_jinja(rn_engine_t *e, const msg_load_body_t *load, cr_err_t *err)
{
    cr_gguf_str_t src;
    if ((load->template && *load->template) ||
        (load->has_renderer && load->renderer && *load->renderer) ||
        !cr_gguf_get_str(rn_model_gguf(e->model), "tokenizer.chat_template", &src) || !src.len)
        return CR_OK;
    e->jinja = jj_template_new(src.ptr, (size_t)src.len, err);
    if (!e->jinja)
        return cr_err_wrap(err, "chat template of %s", load->name);
    cr_jinja_tags_infer(src.ptr, (size_t)src.len, &e->jinja_tags);
    e->bos_text = token_text_dup(e->tok, rn_tokenizer_bos(e->tok));
    e->eos_text = token_text_dup(e->tok, rn_tokenizer_eos(e->tok));
    if (!e->bos_text || !e->eos_text)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_log_info("%s: prompts through the GGUF's Jinja chat template", load->name);
    return CR_OK;
}

/* The text model's unused tensors are the tower's when a tower in the
 * model file was loaded (nothing to say then); else they are logged. */
static void log_unused_tensors(const rn_engine_t *e, const msg_load_body_t *load)
{
    const char *unused = NULL;
    int n_unused = rn_model_unused_tensors(e->model, &unused);
    bool tower_used = e->vision && !(load->has_projector && load->projector &&
                                     *load->projector);
    if (n_unused > 0 && !tower_used)
        cr_log_info("%s: ignoring %d tensors the model does not use (first '%s')",
                    load->name, n_unused, unused);
}

/* The projector layer (load.projector), else a tower inside the model
 * file that is complete (lib/vision_embedded.h: what the registry reports
 * as vision too); an incomplete one is logged and images are refused. */
static cr_status_t load_vision(rn_engine_t *e, const msg_load_body_t *load, int text_dim,
                               cr_err_t *err)
{
    const char *path = NULL;
    cr_err_t why = {0};
    if (load->has_projector && load->projector && *load->projector) {
        path = load->projector;
    } else {
        cr_status_t vs = cr_vision_embedded(rn_model_gguf(e->model), NULL, &why);
        if (vs == CR_OK)
            path = load->model_path;
        else if (vs != CR_E_NOT_FOUND) {
            /* a tower of a family corral runs, incomplete or misshapen
             * (the log names what): Ollama's plain "does not support
             * images", not the unsupported-layout message */
            cr_log_warn("%s: %s; images are refused", load->name, why.msg);
            e->tower_in_file = false;
        }
    }
    if (!path)
        return CR_OK;
    cr_status_t st = rn_vision_new(path, e->be[0], e->tok, text_dim, &e->vision, err);
    if (st)
        return st;
    const char *what = path == load->model_path ? "tower in the model file" : "projector";
    if (rn_vision_fixed_tokens(e->vision))
        cr_log_info("%s: vision %s loaded (%d tokens per image)", load->name, what,
                    rn_vision_fixed_tokens(e->vision));
    else
        cr_log_info("%s: vision %s loaded (tokens per image follow its size)", load->name,
                    what);
    e->img_full = rn_vision_non_causal(e->vision);
    return CR_OK;
}

/* The cache type the scheduler chose (load.kv_cache_type; absent: f16). */
static cr_status_t kv_cache_type(const msg_load_body_t *load, cr_type_t *out,
                                 cr_err_t *err)
{
    const char *name = load->has_kv_cache_type ? load->kv_cache_type : NULL;
    if (!cr_kv_cache_type_parse(name, out))
        return cr_err_set(err, CR_E_INVALID, "kv_cache_type '%s' is not f16, q8_0 or "
                          "q4_0", name);
    return CR_OK;
}

/* Default tokens per step with a draft model (Ollama's draft_num_predict). */
#define DEFAULT_DRAFT_K 4

/* The draft model the load names, on the host backend beside the target
 * (the scheduler counted it on the CPU), and its draft length. */
static cr_status_t load_draft(rn_engine_t *e, const msg_load_body_t *load,
                              const msg_options_t *o, int n_vocab, cr_err_t *err)
{
    if (!load->has_draft_path || !load->draft_path || !*load->draft_path)
        return CR_OK;
    int64_t k = o && o->has_draft_num_predict ? o->draft_num_predict : DEFAULT_DRAFT_K;
    if (k < 0 || k > RN_SPEC_MAX_DRAFT)
        return cr_err_set(err, CR_E_INVALID, "option \"draft_num_predict\" must be 0..%d, got "
                          "%" PRId64, RN_SPEC_MAX_DRAFT, k);
    e->draft_k = (int)k;
    if (k == 0)
        return CR_OK; /* off: the draft is not loaded at all */
    cr_status_t st = rn_spec_draft_new(load->draft_path, e->be[0], e->n_ctx, e->n_slots,
                                       n_vocab, &e->draft, err);
    if (!st)
        cr_log_info("%s: draft model loaded, %d tokens per step", load->name, e->draft_k);
    return st;
}

cr_status_t rn_engine_load(const msg_load_body_t *load, rn_engine_t **out,
                           cr_err_t *err)
{
    cr_status_t st;
    rn_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_buf_init(&e->out, 1u << 20);
    /* Keep our own copy: the message the pointers came from is freed. */
    msg_t wrap = {0};
    wrap.type = MSG_load;
    wrap.u.load = *load;
    if ((st = msg_copy(&wrap, &e->load))) {
        cr_err_set(err, st, "out of memory");
        goto fail;
    }
    const msg_options_t *o = e->load.u.load.options;
    int threads = o && o->has_num_thread ? (int)o->num_thread : 0;
    if ((st = rn_backend_host()->create(0, threads, &e->be[0], err)))
        goto fail;
    e->dev[0] = -1;
    e->n_be = 1;
    rn_placement_t pl = {.host = e->be[0]};
    place_devices(e, load, o, &pl);
    if ((st = rn_model_load_placed(load->model_path, &pl, &e->model, err)))
        goto fail;
    if (load->has_adapters && load->adapters.n) {
        if ((st = rn_lora_load(e->model, (const char *const *)load->adapters.v,
                               load->adapters.n, &e->lora, err)))
            goto fail;
        cr_log_info("%s: %zu LoRA adapter(s) applied at run time", load->name,
                    rn_lora_count(e->lora));
    }
    e->tower_in_file =
        cr_gguf_tensor_find(rn_model_gguf(e->model), "v.blk.0.attn_q.weight") != NULL;
    if ((st = rn_tokenizer_load(rn_model_gguf(e->model), &e->tok, err))) {
        cr_err_wrap(err, "%s", load->model_path);
        goto fail;
    }
    if ((st = load_jinja(e, load, err)))
        goto fail;
    /* the tokenizer has its own tables now (the metadata pages would be
     * read back if anything looked again) */
    cr_gguf_drop_metadata_pages(rn_model_gguf(e->model));
    const char *tsrc = load->template && *load->template
                           ? load->template
                           : RN_PROMPT_DEFAULT_TEMPLATE;
    if ((st = rn_tmpl_parse(tsrc, strlen(tsrc), &e->tmpl, err))) {
        cr_err_wrap(err, "template of %s", load->name);
        goto fail;
    }
    if ((st = pick_formats(e, err)))
        goto fail;
    if ((st = rn_script_from_env(e->tok, &e->script, err)))
        goto fail;
    rn_testhook_slow_load(load->name);
    const rn_hparams_t *hp = rn_model_hparams(e->model);
    int64_t n_ctx = o && o->has_num_ctx ? o->num_ctx : 4096;
    if (n_ctx < 4)
        n_ctx = 4; /* Ollama's floor */
    if (hp->n_ctx_train > 0 && n_ctx > hp->n_ctx_train)
        n_ctx = hp->n_ctx_train; /* capped to the trained context */
    e->n_ctx = (int)n_ctx;
    int64_t n_par = load->has_num_parallel ? load->num_parallel : 1;
    if (n_par < 1 || n_par > RN_CTX_MAX_SEQ) {
        st = cr_err_set(err, CR_E_INVALID, "num_parallel %" PRId64 " is out of "
                        "range 1..%d", n_par, RN_CTX_MAX_SEQ);
        goto fail;
    }
    e->n_slots = (int)n_par;
    rn_ctx_opts_t co = {.n_ctx = e->n_ctx,
                        .n_batch = o && o->has_num_batch ? (int)o->num_batch : 0,
                        .n_seq = e->n_slots,
                        .lora = e->lora};
    if ((st = kv_cache_type(load, &co.kv_type, err)))
        goto fail;
    st = rn_ctx_new(e->model, &co, &e->ctx, err);
    if (st == CR_E_UNSUPPORTED && co.kv_type != CR_TYPE_F16) {
        /* a backend (or head size) without a quantized cache: f16, as
         * Ollama does where flash attention is unavailable */
        cr_log_warn("%s: %s; the KV cache stays f16", load->name,
                    err ? err->msg : "not supported");
        co.kv_type = CR_TYPE_F16;
        st = rn_ctx_new(e->model, &co, &e->ctx, err);
    }
    if (st)
        goto fail;
    log_parts(e);
    if ((st = load_vision(e, load, hp->dim, err)))
        goto fail;
    if ((st = load_draft(e, load, o, hp->n_vocab, err)))
        goto fail;
    log_unused_tensors(e, load);
    e->slots = calloc((size_t)e->n_slots, sizeof *e->slots);
    e->spans = calloc((size_t)e->n_slots, sizeof *e->spans);
    e->span_slot = calloc((size_t)e->n_slots, sizeof *e->span_slot);
    e->waiting = calloc((size_t)e->n_slots, sizeof *e->waiting);
    e->take = calloc((size_t)e->n_slots, sizeof *e->take);
    e->prompt = calloc((size_t)e->n_ctx, sizeof *e->prompt);
    if (!e->slots || !e->spans || !e->span_slot || !e->waiting || !e->take || !e->prompt) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for the slots");
        goto fail;
    }
    rn_sampler_params_t sp;
    rn_sampler_params_default(&sp);
    for (int i = 0; i < e->n_slots; i++) {
        slot_t *sl = &e->slots[i];
        sl->id = i;
        sl->sampler = rn_sampler_new(hp->n_vocab, e->n_ctx, &sp, err);
        /* A built-in parser reads the format's markers, which are control
         * tokens in the model's vocabulary (gpt-oss's <|channel|>...): the
         * answer keeps their text (Ollama's parsers' preserved tokens). */
        sl->detok = rn_detok_new(e->tok, e->parser ? RN_PIECE_SPECIAL : 0);
        sl->output = rn_output_new();
        sl->seq = calloc((size_t)e->n_ctx, sizeof *sl->seq);
        sl->prompt = calloc((size_t)e->n_ctx, sizeof *sl->prompt);
        if (!sl->sampler || !sl->detok || !sl->seq || !sl->prompt || !sl->output) {
            st = err && err->status ? err->status : CR_E_NOMEM;
            if (st == CR_E_NOMEM)
                cr_err_set(err, st, "out of memory for the context buffers");
            goto fail;
        }
    }
    *out = e;
    return CR_OK;
fail:
    rn_engine_destroy(&e);
    return st;
}

void rn_engine_destroy(rn_engine_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_engine_t *e = *self_p;
    for (int i = 0; e->slots && i < e->n_slots; i++) {
        slot_t *sl = &e->slots[i];
        rn_detok_destroy(&sl->detok);
        rn_sampler_destroy(&sl->sampler);
        rn_output_destroy(&sl->output);
        rn_stop_destroy(&sl->stop);
        rn_grammar_destroy(&sl->grammar);
        free(sl->seq);
        free(sl->prompt);
        free(sl->masked);
        free(sl->spec_logits);
        free(sl->spec_q);
        free(sl->img_rows);
        free(sl->rope);
    }
    free(e->slots);
    free(e->spans);
    free(e->span_slot);
    free(e->waiting);
    free(e->take);
    rn_script_destroy(&e->script);
    rn_ctx_destroy(&e->ctx);
    rn_tokenizer_destroy(&e->tok);
    free(e->eog_ids);
    rn_tmpl_destroy(&e->tmpl);
    jj_template_destroy(&e->jinja);
    free(e->bos_text);
    free(e->eos_text);
    rn_lora_destroy(&e->lora);
    rn_vision_destroy(&e->vision);
    rn_spec_draft_destroy(&e->draft);
    rn_model_destroy(&e->model);
    for (int i = 0; i < e->n_be; i++)
        be_destroy(&e->be[i]);
    msg_clear(&e->load);
    cr_buf_free(&e->out);
    free(e->prompt);
    free(e->embed);
    rn_grammar_vocab_destroy(&e->gvocab);
    free(e);
    *self_p = NULL;
}

int64_t rn_engine_size_bytes(const rn_engine_t *e)
{
    return (int64_t)(rn_model_weight_bytes(e->model) + rn_lora_bytes(e->lora) +
                     rn_ctx_kv_bytes(e->ctx) + rn_ctx_buffer_bytes(e->ctx) +
                     (e->vision ? rn_vision_weight_bytes(e->vision) : 0) +
                     (e->draft ? rn_spec_draft_bytes(e->draft) : 0));
}

const char *rn_engine_offload_error(const rn_engine_t *e) { return e->offload_error; }

int64_t rn_engine_vram_bytes(const rn_engine_t *e)
{
    uint64_t sum = 0;
    for (int i = 0; i < e->n_be; i++) {
        if (e->be[i]->ops->host_memory)
            continue;
        uint64_t wb, bb;
        be_memory_used(e->be[i], &wb, &bb);
        sum += wb + bb;
    }
    return (int64_t)sum;
}

int64_t rn_engine_gpu_layers(const rn_engine_t *e)
{
    int n = rn_model_hparams(e->model)->n_layers;
    int64_t k = 0;
    for (int l = 0; l <= n; l++)
        k += !rn_model_layer_backend(e->model, l)->ops->host_memory;
    return k;
}

int64_t rn_engine_ctx(const rn_engine_t *e)
{
    return e->n_ctx;
}

int rn_engine_slots(const rn_engine_t *e)
{
    return e->n_slots;
}

int rn_engine_busy(const rn_engine_t *e)
{
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        n += e->slots[i].state != SLOT_FREE;
    return n;
}

void rn_engine_get_stats(const rn_engine_t *e, rn_engine_stats_t *out)
{
    *out = e->stats;
    if (e->vision)
        rn_vision_counts(e->vision, &out->images_encoded, &out->images_cached);
}

/* ---- options ---- */

static cr_status_t request_opts(const rn_engine_t *e, const msg_options_t *o,
                                req_opts_t *r, cr_err_t *err)
{
    rn_sampler_params_default(&r->sp);
    r->num_predict = -1;
    r->num_keep = DEFAULT_NUM_KEEP;
    r->draft_ngram = 0;
    r->draft_p_min = DEFAULT_DRAFT_P_MIN;
    r->ignore_eos = false;
    r->stop = NULL;
    if (o) {
        if (o->has_temperature) r->sp.temperature = (float)o->temperature;
        if (o->has_top_k) r->sp.top_k = (int32_t)o->top_k;
        if (o->has_top_p) r->sp.top_p = (float)o->top_p;
        if (o->has_min_p) r->sp.min_p = (float)o->min_p;
        if (o->has_typical_p) r->sp.typical_p = (float)o->typical_p;
        if (o->has_repeat_last_n) r->sp.repeat_last_n = (int32_t)o->repeat_last_n;
        if (o->has_repeat_penalty) r->sp.repeat_penalty = (float)o->repeat_penalty;
        if (o->has_presence_penalty)
            r->sp.presence_penalty = (float)o->presence_penalty;
        if (o->has_frequency_penalty)
            r->sp.frequency_penalty = (float)o->frequency_penalty;
        if (o->has_seed) r->sp.seed = o->seed;
        if (o->has_num_predict) r->num_predict = o->num_predict;
        if (o->has_num_keep) r->num_keep = (int)o->num_keep;
        if (o->has_ignore_eos) r->ignore_eos = o->ignore_eos;
        if (o->has_stop) r->stop = &o->stop;
        if (o->has_draft_ngram) {
            if (o->draft_ngram < 0 || o->draft_ngram > RN_SPEC_MAX_DRAFT)
                return cr_err_set(err, CR_E_INVALID, "option \"draft_ngram\" must be "
                                  "0..%d, got %" PRId64, RN_SPEC_MAX_DRAFT, o->draft_ngram);
            r->draft_ngram = (int)o->draft_ngram;
        }
        if (o->has_draft_p_min) {
            if (!(o->draft_p_min >= 0.0 && o->draft_p_min <= 1.0))
                return cr_err_set(err, CR_E_INVALID,
                                  "option \"draft_p_min\" must be 0..1, got %g", o->draft_p_min);
            r->draft_p_min = (float)o->draft_p_min;
        }
    }
    /* Negative or huge num_predict is clamped to 10 x num_ctx (Ollama). */
    int64_t cap = 10LL * e->n_ctx;
    if (r->num_predict < 0 || r->num_predict > cap)
        r->num_predict = cap;
    if (r->num_keep < 0)
        r->num_keep = DEFAULT_NUM_KEEP;
    if (r->num_keep > e->n_ctx / 2)
        r->num_keep = e->n_ctx / 2;
    return rn_sampler_params_check(&r->sp, err);
}

static const msg_options_t *req_options(const msg_t *req)
{
    return req->type == MSG_chat ? req->u.chat.options : req->u.generate.options;
}

/* ---- prompt ---- */

/* The request's images in message order (base64 texts, borrowed): writes
 * up to cap of them to v (may be NULL) and returns how many there are. */
static size_t request_images(const msg_t *r, const char **v, size_t cap)
{
    size_t n = 0;
    if (r->type == MSG_generate) {
        for (size_t i = 0; i < r->u.generate.images.n; i++, n++)
            if (v && n < cap)
                v[n] = r->u.generate.images.v[i];
        return n;
    }
    for (size_t m = 0; r->type == MSG_chat && m < r->u.chat.messages.n; m++) {
        const msg_message_t *msg = &r->u.chat.messages.v[m];
        for (size_t i = 0; i < msg->images.n; i++, n++)
            if (v && n < cap)
                v[n] = msg->images.v[i];
    }
    return n;
}

/* The images a rendered prompt refers to ([img-k] is img[k]) and where
 * its tags put them. */
typedef struct img_plan {
    rn_vision_image_t *img; /* [n], measured */
    int32_t *ids;           /* each image's img[k].n_ids ids, one after another */
    int *n_ids;             /* [n] */
    size_t n;
    size_t *order;          /* the image of each tag, in text order [n_order] */
    size_t n_order;
} img_plan_t;

static void plan_free(img_plan_t *p)
{
    for (size_t i = 0; p->img && i < p->n; i++)
        rn_vision_image_free(&p->img[i]);
    free(p->img);
    free(p->ids);
    free(p->n_ids);
    free(p->order);
    memset(p, 0, sizeof *p);
}

/* Loads and measures the prompt's images (the tokens a variable-size
 * image takes follow from its size) and lays out their ids. */
static cr_status_t plan_images(rn_engine_t *e, const char *const *b64, size_t first,
                               img_plan_t *plan, const int32_t **ids, cr_err_t *err)
{
    cr_status_t st = CR_OK;
    size_t total = 0;
    for (size_t k = 0; k < plan->n; k++) {
        if ((st = rn_vision_image_load(b64[first + k], &plan->img[k], err))) {
            cr_err_wrap(err, "image %zu", first + k);
            return st;
        }
        if ((st = rn_vision_image_measure(e->vision, &plan->img[k], first + k, err)))
            return st;
        plan->n_ids[k] = plan->img[k].n_ids;
        total += (size_t)plan->img[k].n_ids;
    }
    if (!(plan->ids = malloc((total ? total : 1) * sizeof *plan->ids)))
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the images");
    for (size_t k = 0, at = 0; k < plan->n; at += (size_t)plan->n_ids[k], k++) {
        rn_vision_token_ids(e->vision, &plan->img[k], plan->ids + at);
        ids[k] = plan->ids + at;
    }
    return CR_OK;
}

/* tokenize_prompt for a prompt with images: each [img-k] tag becomes the
 * image's tokens, all charged against num_ctx (a prompt that does not fit
 * is refused: cutting it could cut an image). */
static cr_status_t tokenize_images(rn_engine_t *e, const msg_t *r, const rn_prompt_result_t *p,
                                   img_plan_t *plan, int *n_out, cr_err_t *err)
{
    size_t n_req = request_images(r, NULL, 0);
    int tok = rn_vision_fixed_tokens(e->vision);
    if (e->img_full && tok + e->n_slots - 1 > rn_ctx_n_batch(e->ctx))
        return cr_err_set(err, CR_E_INVALID, "num_batch %d cannot hold an image's %d "
                          "tokens in one step (the model reads them together)",
                          rn_ctx_n_batch(e->ctx) - (e->n_slots - 1), tok);
    if (p->images_skipped + p->n_images > n_req)
        return cr_err_set(err, CR_E_INTERNAL, "the prompt refers to %zu images of %zu",
                          p->images_skipped + p->n_images, n_req);
    const char **b64 = calloc(n_req, sizeof *b64);
    const int32_t **ids = calloc(p->n_images, sizeof *ids);
    plan->img = calloc(p->n_images, sizeof *plan->img);
    plan->n_ids = calloc(p->n_images, sizeof *plan->n_ids);
    cr_status_t st = CR_OK;
    if (!b64 || !ids || !plan->img || !plan->n_ids) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for the images");
        goto out;
    }
    plan->n = p->n_images;
    request_images(r, b64, n_req);
    if ((st = plan_images(e, b64, p->images_skipped, plan, ids, err)))
        goto out;
    size_t need = 0, n_order = 0, limit = (size_t)e->n_ctx - 1;
    st = rn_prompt_tokenize_images(e->tok, p, ids, plan->n, plan->n_ids, NULL, 0, &need, NULL,
                                   0, &n_order, err);
    if (st && st != CR_E_TOO_LARGE)
        goto out;
    if (n_order == 0) {
        st = cr_err_set(err, CR_E_INVALID, "the model's prompt format gives the images no "
                        "place in the prompt");
        goto out;
    }
    if (need > limit) {
        st = cr_err_set(err, CR_E_INVALID, "the prompt with its images is %zu tokens, more "
                        "than the context (num_ctx %d) holds", need, e->n_ctx);
        goto out;
    }
    if (!(plan->order = malloc(n_order * sizeof *plan->order))) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for the images");
        goto out;
    }
    st = rn_prompt_tokenize_images(e->tok, p, ids, plan->n, plan->n_ids, e->prompt, limit,
                                   &need, plan->order, n_order, &plan->n_order, err);
    if (!st && need == 0)
        st = cr_err_set(err, CR_E_INVALID, "the prompt is empty");
    *n_out = (int)need;
out:
    free(b64);
    free(ids);
    return st;
}

/* The embeddings of the prompt's image tokens into *rows_out (caller
 * frees; one row per negative id of the prompt, in order): the images of
 * tags whose rows reach position `from` (those before it are cached in
 * the slot already). */
static cr_status_t embed_images(rn_engine_t *e, const img_plan_t *plan, const int32_t *prompt,
                                int n_prompt, int from, float **rows_out, cr_err_t *err)
{
    size_t dim = (size_t)rn_ctx_embd_dim(e->ctx), total = 0;
    for (size_t t = 0; t < plan->n_order; t++)
        total += (size_t)plan->img[plan->order[t]].n_rows;
    float *rows = calloc(total ? total * dim : 1, sizeof *rows);
    if (!rows)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the image embeddings");
    size_t j = 0, tag = 0, tag_end = 0; /* rows seen; the tag they belong to */
    cr_status_t st = CR_OK;
    for (int i = 0; !st && i < n_prompt && tag < plan->n_order; i++) {
        if (prompt[i] >= 0)
            continue;
        if (j == tag_end) /* the first row of the next tag */
            tag_end += (size_t)plan->img[plan->order[tag]].n_rows;
        /* at the tag's last row: encode it if any of its rows is new */
        if (++j == tag_end) {
            const rn_vision_image_t *img = &plan->img[plan->order[tag]];
            if (i >= from)
                st = rn_vision_embed(e->vision, img, plan->order[tag],
                                     rows + (j - (size_t)img->n_rows) * dim, err);
            tag++;
        }
    }
    if (st) {
        free(rows);
        return st;
    }
    *rows_out = rows;
    return CR_OK;
}

/* M-RoPE positions of a prompt with images (forward.h's rope_pos, mtmd's
 * layout): text one past the previous token's largest; tag t's image at
 * (p, p + row, p + col), p where it starts, after which text goes on from
 * p + max(nx, ny). Caller frees *out ([n_prompt][3]). */
static cr_status_t mrope_positions(const img_plan_t *plan, const int32_t *prompt, int n_prompt,
                                   int32_t **out, cr_err_t *err)
{
    int32_t *pos = malloc(3 * (size_t)(n_prompt ? n_prompt : 1) * sizeof *pos);
    if (!pos)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the positions");
    int32_t next = 0, p0 = 0;
    size_t tag = 0;
    int k = 0; /* tokens of the current tag seen */
    for (int i = 0; i < n_prompt; i++) {
        int32_t *q = pos + 3 * (size_t)i;
        if (prompt[i] >= 0 || tag >= plan->n_order) {
            q[0] = q[1] = q[2] = next++;
            continue;
        }
        const rn_vision_image_t *img = &plan->img[plan->order[tag]];
        /* a tower without a grid (Pixtral): its rows as one row */
        int nx = img->nx > 0 ? img->nx : img->n_rows, ny = img->nx > 0 ? img->ny : 1;
        if (k == 0)
            p0 = next;
        q[0] = p0;
        q[1] = p0 + k / nx;
        q[2] = p0 + k % nx;
        if (++k == img->n_rows) {
            next = p0 + CR_MAX(nx, ny);
            k = 0;
            tag++;
        }
    }
    *out = pos;
    return CR_OK;
}

/* Counts a rendered prompt as tokenize_prompt will tokenize it (control
 * tokens only where the template put them), for history truncation. */
static cr_status_t count_prompt(void *ctx, const rn_prompt_result_t *p,
                                int64_t *n_tokens, cr_err_t *err)
{
    /* Asking with no room returns the count with CR_E_TOO_LARGE. */
    size_t n = 0;
    cr_status_t st = rn_prompt_tokenize(ctx, p, true, NULL, 0, &n, err);
    *n_tokens = (int64_t)n;
    return st == CR_E_TOO_LARGE || st == CR_OK ? CR_OK : st;
}

/* Tokenizes the rendered prompt into e->prompt: BOS as the vocabulary says,
 * control tokens parsed only in the template's own text (and the model's
 * Modelfile data, or everything in raw mode), never in request data (see
 * prompt_tokens.h). Over-long prompts keep num_keep tokens at the head and
 * the newest tokens, leaving room to generate; with truncate false they are
 * Ollama's 400 instead. */
static cr_status_t tokenize_prompt(rn_engine_t *e, const rn_prompt_result_t *p,
                                   int num_keep, bool truncate, int *n_out,
                                   cr_err_t *err)
{
    size_t n_text = 0;
    cr_status_t st = rn_prompt_tokenize(e->tok, p, true, NULL, 0, &n_text, err);
    if (st && st != CR_E_TOO_LARGE)
        return st;
    int32_t *all = malloc((n_text ? n_text : 1) * sizeof *all);
    if (!all)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the prompt");
    size_t total = 0;
    st = rn_prompt_tokenize(e->tok, p, true, all, n_text, &total, err);
    if (st) {
        free(all);
        return st;
    }
    if (total == 0) {
        free(all);
        return cr_err_set(err, CR_E_INVALID, "the prompt is empty");
    }
    /* Room for at least one new token. */
    size_t limit = (size_t)e->n_ctx - 1;
    if (total > limit && !truncate) {
        free(all);
        return cr_err_set(err, CR_E_INVALID,
                          "the input length exceeds the context length");
    }
    if (total > limit) {
        size_t keep = CR_MIN((size_t)num_keep, limit / 2);
        size_t tail = limit - keep;
        cr_log_warn("prompt of %zu tokens truncated to %zu (num_ctx %d)", total,
                    limit, e->n_ctx);
        memcpy(e->prompt, all, keep * sizeof *all);
        memcpy(e->prompt + keep, all + total - tail, tail * sizeof *all);
        total = limit;
    } else {
        memcpy(e->prompt, all, total * sizeof *all);
    }
    free(all);
    *n_out = (int)total;
    return CR_OK;
}

/* The messages of a request as the prompt builder wants them. tool_calls
 * travel as JSON text; parsed values are kept in `json` for freeing. */
typedef struct msgs_view {
    rn_prompt_msg_t *v;
    json_t **json;
    size_t n;
} msgs_view_t;

static cr_status_t view_messages(const msg_message_t *src, size_t n,
                                 msgs_view_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (!n)
        return CR_OK;
    out->v = calloc(n, sizeof *out->v);
    out->json = calloc(n, sizeof *out->json);
    if (!out->v || !out->json)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    out->n = n;
    for (size_t i = 0; i < n; i++) {
        const msg_message_t *m = &src[i];
        rn_prompt_msg_t *d = &out->v[i];
        d->role = m->role;
        d->content = m->content;
        d->thinking = m->thinking;
        d->n_images = m->images.n;
        d->tool_name = m->tool_name;
        d->tool_call_id = m->tool_call_id;
        if (m->tool_calls && *m->tool_calls) {
            out->json[i] = json_loads(m->tool_calls, 0, NULL);
            if (!out->json[i])
                return cr_err_set(err, CR_E_INVALID,
                                  "messages[%zu].tool_calls is not JSON", i);
            d->tool_calls = out->json[i];
        }
    }
    return CR_OK;
}

static void view_free(msgs_view_t *v)
{
    for (size_t i = 0; i < v->n; i++)
        json_decref(v->json[i]);
    free(v->json);
    free(v->v);
    memset(v, 0, sizeof *v);
}

/* The prompt through the GGUF's Jinja chat template (prompt_jinja.h). */
static cr_status_t render_jinja(rn_engine_t *e, const rn_prompt_msg_t *model_msgs,
                                size_t n_model_msgs, const char *system,
                                const rn_prompt_msg_t *msgs, size_t n_msgs, const json_t *tools,
                                rn_prompt_think_t think, const rn_prompt_fit_t *fit,
                                size_t max_bytes, rn_prompt_result_t *out, cr_err_t *err)
{
    rn_prompt_jinja_t in = {0};
    in.opts.max_bytes = max_bytes;
    in.tmpl = e->jinja;
    in.bos_token = e->bos_text;
    in.eos_token = e->eos_text;
    in.strip_bos = rn_tokenizer_add_bos(e->tok);
    in.strip_eos = rn_tokenizer_add_eos(e->tok);
    in.model_system = system;
    in.model_msgs = model_msgs;
    in.n_model_msgs = n_model_msgs;
    in.msgs = msgs;
    in.n_msgs = n_msgs;
    in.tools = tools;
    in.think = think;
    in.fit = *fit;
    in.count_prompt = count_prompt;
    return rn_prompt_jinja_chat(&in, out, err);
}

/* The template's (or the Jinja template's) thinking tags; empty when none. */
static void thinking_tags(const rn_engine_t *e, char *open, size_t open_cap,
                          char *close, size_t close_cap)
{
    open[0] = close[0] = '\0';
    if (e->jinja) {
        snprintf(open, open_cap, "%s", e->jinja_tags.think_open);
        snprintf(close, close_cap, "%s", e->jinja_tags.think_close);
    } else {
        rn_tmpl_thinking_tags(e->tmpl, open, open_cap, close, close_cap);
    }
}

/* Ollama's thinking capability: the parser thinks, or the template has a
 * pair of thinking tags. */
static bool model_can_think(const rn_engine_t *e)
{
    if (e->parser)
        return cr_parser_has_thinking(e->parser);
    char open[128], close[128];
    thinking_tags(e, open, sizeof open, close, sizeof close);
    return open[0] && close[0];
}

/* A request's think as the template sees it: omitted on a thinking model
 * is true, as Ollama sets it before rendering (Think true, IsThinkSet
 * true). */
static rn_prompt_think_t request_think(const rn_engine_t *e, const char *think)
{
    rn_prompt_think_t t = rn_prompt_think_parse(think);
    if (t.mode == RN_THINK_UNSET && model_can_think(e))
        t.mode = RN_THINK_TRUE;
    return t;
}

/* Renders the request into the prompt: text and trust spans (caller frees
 * with rn_prompt_result_free). */
static cr_status_t render(rn_engine_t *e, const msg_t *req,
                          rn_prompt_result_t *out, cr_err_t *err)
{
    const msg_load_body_t *ld = &e->load.u.load;
    /* With a projector, history truncation counts each image (Ollama's
     * 768 tokens: more than a llava image takes, so what is kept fits). */
    rn_prompt_fit_t fit = {.truncate = true,
                           .num_ctx = e->n_ctx,
                           .has_projector = e->vision != NULL,
                           .count_ctx = e->tok};
    rn_prompt_result_t res = {0};
    msgs_view_t model_msgs, msgs = {0};
    json_t *tools = NULL;
    rn_tmpl_t *req_tmpl = NULL;
    char *context_text = NULL;
    /* A request's work is bounded by the context (precut.h). */
    size_t piece_max = rn_tokenizer_max_piece_bytes(e->tok);
    size_t max_bytes = rn_prompt_bytes_cap(e->n_ctx, piece_max);
    rn_prompt_cut_t cut = {0};
    cr_status_t st = view_messages(ld->messages.v, ld->messages.n, &model_msgs,
                                   err);
    if (st)
        goto out;
    if (req->type == MSG_chat) {
        const msg_chat_body_t *c = &req->u.chat;
        if ((st = view_messages(c->messages.v, c->messages.n, &msgs, err)))
            goto out;
        if (c->tools && *c->tools && !(tools = json_loads(c->tools, 0, NULL))) {
            st = cr_err_set(err, CR_E_INVALID, "tools is not valid JSON");
            goto out;
        }
        fit.truncate = !c->has_truncate || c->truncate;
        /* Tools are rendered whole into the prompt: past the cap they
         * could never fit, and parsing them costs memory. */
        if (c->tools && strlen(c->tools) > max_bytes) {
            st = cr_err_set(err, CR_E_TOO_LARGE,
                            "tools are %zu bytes, many times what num_ctx %d can hold "
                            "(at most %zu)",
                            strlen(c->tools), e->n_ctx, max_bytes);
            goto out;
        }
        /* msgs.n stays: view_free frees by the original indices. */
        size_t n_msgs = fit.truncate
                            ? rn_prompt_precut(msgs.v, msgs.n, e->n_ctx, piece_max, &cut)
                            : msgs.n;
        /* Each message costs a token at least (its role's header). */
        if (cut.system > (size_t)e->n_ctx) {
            st = cr_err_set(err, CR_E_INVALID,
                            "%zu system messages: more than num_ctx %d can hold",
                            cut.system, e->n_ctx);
            goto out;
        }
        if (!fit.truncate && n_msgs > (size_t)e->n_ctx) {
            st = cr_err_set(err, CR_E_INVALID, "the input length exceeds the context length");
            goto out;
        }
        if (cut.msgs)
            cr_log_debug("%s: %zu old messages cannot fit num_ctx %d; cut before rendering",
                         req->id, cut.msgs, e->n_ctx);
        if (e->jinja) {
            st = render_jinja(e, model_msgs.v, model_msgs.n, ld->system, msgs.v, n_msgs, tools,
                              request_think(e, c->think), &fit, max_bytes, &res, err);
            goto done;
        }
        rn_prompt_chat_t in = {0};
        in.tmpl = e->tmpl;
        in.renderer = e->renderer;
        in.model_system = ld->system;
        in.model_msgs = model_msgs.v;
        in.n_model_msgs = model_msgs.n;
        in.msgs = msgs.v;
        in.n_msgs = n_msgs;
        in.tools = tools;
        in.think = request_think(e, c->think);
        in.opts.max_bytes = max_bytes;
        /* Ollama strips earlier turns' <think> spans for qwen3 (and the
         * deepseek-r1 distills, which do not say so in their metadata). */
        in.strip_old_thinking =
            !strcmp(rn_model_hparams(e->model)->arch, "qwen3");
        in.fit = fit;
        in.count_prompt = count_prompt;
        st = rn_prompt_chat(&in, &res, err);
    } else {
        const msg_generate_body_t *g = &req->u.generate;
        if (e->jinja && !g->has_template && !g->raw && !(g->suffix && *g->suffix) &&
            !(g->has_context && g->context.n)) {
            /* A generate is a one-message conversation: the request's
             * system (else the model's), the model's MESSAGEs, the prompt. */
            rn_prompt_msg_t user = {.role = "user", .content = g->prompt};
            fit.truncate = !g->has_truncate || g->truncate;
            st = render_jinja(e, model_msgs.v, model_msgs.n,
                              g->has_system ? g->system : ld->system, &user, 1, NULL,
                              request_think(e, g->think), &fit, max_bytes, &res, err);
            goto done;
        }
        rn_prompt_gen_t in = {0};
        in.tmpl = e->tmpl;
        in.renderer = e->renderer;
        if (g->has_template) {
            if ((st = rn_tmpl_parse(g->template, strlen(g->template), &req_tmpl,
                                    err))) {
                cr_err_wrap(err, "template");
                goto out;
            }
            in.tmpl = req_tmpl;
            in.tmpl_from_request = true;
        }
        in.prompt = g->prompt;
        in.suffix = g->suffix;
        in.system = g->has_system ? g->system : NULL;
        in.model_system = ld->system;
        in.model_msgs = model_msgs.v;
        in.n_model_msgs = model_msgs.n;
        in.n_images = g->images.n;
        in.raw = g->raw;
        if (g->has_context && g->context.n) {
            /* Ollama detokenizes a deprecated `context` and prepends it. */
            cr_buf_t b;
            cr_buf_init(&b, PROMPT_TEXT_MAX);
            st = rn_detokenize(e->tok, g->context.v, g->context.n, 0, &b, err);
            context_text = cr_buf_steal(&b);
            if (st)
                goto out;
            in.context_text = context_text;
        }
        in.think = request_think(e, g->think);
        fit.truncate = !g->has_truncate || g->truncate;
        in.fit = fit;
        in.count_prompt = count_prompt;
        in.opts.max_bytes = max_bytes;
        st = rn_prompt_generate(&in, &res, err);
    }
done:
    char over[64];
    snprintf(over, sizeof over, "exceeds %zu bytes", max_bytes);
    /* The template executor, a renderer or the Jinja output said so. */
    if (st == CR_E_TOO_LARGE && strstr(err->msg, over))
        cr_err_set(err, st,
                   "the prompt is over %zu bytes, many times what num_ctx %d can hold "
                   "(a token is at most %zu bytes of text); send less or raise num_ctx",
                   max_bytes, e->n_ctx, piece_max);
    if (!st) {
        res.images_skipped += cut.images;
        res.msgs_dropped += cut.msgs;
        *out = res;
        memset(&res, 0, sizeof res);
    }
out:
    rn_prompt_result_free(&res);
    rn_tmpl_destroy(&req_tmpl);
    json_decref(tools);
    free(context_text);
    view_free(&model_msgs);
    view_free(&msgs);
    return st;
}

/* ---- prefill and decode ---- */

/* Ops on a device queue their errors; this surfaces them as a status. */
static cr_status_t backend_check(rn_engine_t *e, cr_err_t *err)
{
    for (int i = 0; i < e->n_be; i++) {
        cr_status_t st = be_check(e->be[i], err);
        if (st)
            return st;
    }
    return CR_OK;
}

/* The cache of slot sl is full: keep num_keep tokens, drop half of the
 * rest, and evaluate the kept tail again at its new positions (that slot
 * alone, at once: rare, and the others simply wait a step). */
static cr_status_t shift_context(rn_engine_t *e, slot_t *sl, int num_keep,
                                 cr_err_t *err)
{
    int keep = CR_MIN(num_keep, sl->n_seq / 2);
    int discard = (sl->n_seq - keep) / 2;
    if (discard <= 0)
        return cr_err_set(err, CR_E_TOO_LARGE, "context is full");
    /* Image tokens cannot be evaluated again (their embeddings are gone):
     * such a context is full. */
    for (int i = keep + discard; i < sl->n_seq; i++)
        if (sl->seq[i] < 0)
            return cr_err_set(err, CR_E_TOO_LARGE, "context is full (its images cannot "
                              "be shifted; raise num_ctx)");
    int left = sl->n_seq - discard;
    memmove(sl->seq + keep, sl->seq + keep + discard,
            (size_t)(left - keep) * sizeof *sl->seq);
    rn_ctx_seq_truncate(e->ctx, sl->id, keep);
    cr_status_t st = left > keep
                         ? rn_ctx_eval_seq(e->ctx, sl->id, sl->seq + keep,
                                           left - keep, keep, NULL, err)
                         : CR_OK;
    if (!st)
        st = backend_check(e, err);
    sl->n_seq = st ? 0 : left;
    if (st)
        rn_ctx_seq_truncate(e->ctx, sl->id, 0);
    return st;
}

/* One token's entry of Ollama's `logprobs`: {token, logprob, bytes,
 * top_logprobs:[{token, logprob, bytes}]}, from the raw logits (a full
 * log-softmax, as Ollama reports them). */
/* The token's logprobs entry, written into the slot's output buffer (no
 * allocation once that buffer has grown to a chunk's entries). */
static cr_status_t add_logprobs(rn_engine_t *e, slot_t *sl, const float *logits,
                                int32_t token, int64_t top_n, cr_err_t *err)
{
    rn_logprob_t top[RN_LOGPROB_MAX_TOP];
    float lp = 0;
    size_t n_top = rn_logprobs_from_logits(logits, rn_ctx_n_vocab(e->ctx), token,
                                           &lp, top, top_n > 0 ? (size_t)top_n : 0);
    cr_buf_t *b = rn_output_logprob_buf(sl->output);
    cr_status_t st = b ? rn_logprob_json(b, e->tok, token, lp, top, n_top)
                       : CR_E_NOMEM;
    return st ? cr_err_set(err, st, "logprobs: out of memory") : CR_OK;
}

/* Decides the thinking and tool-call split of a request's answer from the
 * template (Ollama's capabilities) and starts the output stages. */
static cr_status_t begin_output(rn_engine_t *e, rn_output_t *output,
                                const msg_t *r, const char *prompt_text,
                                cr_err_t *err)
{
    const char *model = r->type == MSG_chat ? r->u.chat.model
                                            : r->u.generate.model;
    char open[128], close[128];
    thinking_tags(e, open, sizeof open, close, sizeof close);
    bool can_think = model_can_think(e);
    /* A model without a projector refuses images, never drops them; one
     * whose file holds a tower says why it is not used. */
    if (!e->vision && request_images(r, NULL, 0) && e->tower_in_file)
        return cr_err_set(err, CR_E_INVALID, "\"%s\": a vision tower inside the model "
                          "file (Ollama's single-file layout) is not supported yet; "
                          "create the model with llama.cpp's projector file (mmproj) as a "
                          "second FROM", model);
    if (!e->vision && request_images(r, NULL, 0))
        return cr_err_set(err, CR_E_INVALID, "\"%s\" does not support images",
                          model);
    rn_prompt_think_t think = rn_prompt_think_parse(
        r->type == MSG_chat ? r->u.chat.think : r->u.generate.think);
    if ((think.mode == RN_THINK_TRUE || think.mode == RN_THINK_LEVEL) &&
        !can_think)
        return cr_err_set(err, CR_E_INVALID, "\"%s\" does not support thinking",
                          model);
    /* Thinking models think unless told not to (think omitted = on). */
    bool split = can_think && think.mode != RN_THINK_FALSE;
    const char *tools = r->type == MSG_chat ? r->u.chat.tools : NULL;
    char tag[128] = "";
    if (e->parser) {
        if (tools && *tools && strcmp(tools, "[]") && !cr_parser_has_tools(e->parser))
            return cr_err_set(err, CR_E_INVALID, "\"%s\" does not support tools",
                              model);
        /* The parser continues what the prompt opened: a last assistant
         * message is a prefill (harmony). */
        rn_parser_init_t pi = {.tools_json = tools};
        const msg_message_t *last =
            r->type == MSG_chat && r->u.chat.messages.n
                ? &r->u.chat.messages.v[r->u.chat.messages.n - 1]
                : NULL;
        if (last && last->role && !strcmp(last->role, "assistant")) {
            pi.last_role = last->role;
            pi.last_content = last->content;
            pi.last_thinking = last->thinking;
        }
        return rn_output_begin_parser(output, e->parser, &pi, err);
    }
    if (tools && *tools && strcmp(tools, "[]")) {
        if (e->jinja ? !e->jinja_tags.uses_tools : !rn_tmpl_uses(e->tmpl, "tools"))
            return cr_err_set(err, CR_E_INVALID,
                              "\"%s\" does not support tools", model);
        if (e->jinja)
            snprintf(tag, sizeof tag, "%s", e->jinja_tags.tool_tag);
        else
            rn_tmpl_tool_tag(e->tmpl, tag, sizeof tag);
    } else {
        tools = NULL;
    }
    return rn_output_begin(output, split ? open : NULL, split ? close : NULL,
                           split && rn_thinking_prompt_opens(prompt_text, open),
                           tools ? tag : NULL, tools, err);
}

/* A prefill step of `step` tokens from sl->at that ends at no image's
 * middle: an image it would cut is taken whole when budget allows (even
 * past PREFILL_STEP), else left for the next step; 0 when the step would
 * start with an image that does not fit. */
static int whole_images(const slot_t *sl, int step, int budget)
{
    const int32_t *p = sl->prompt + sl->at;
    int left = sl->n_prompt - sl->at;
    if (step >= left || step == 0 || p[step] >= 0 || p[step - 1] >= 0)
        return step;
    int beg = step - 1, end = step;
    while (beg > 0 && p[beg - 1] < 0)
        beg--;
    while (end < left && p[end] < 0)
        end++;
    return end <= budget ? end : beg;
}

/* ---- slots ---- */

/* Lists the end-of-generation ids of the vocabulary (e->eog_ids), once. */
static cr_status_t list_eog(rn_engine_t *e, cr_err_t *err)
{
    int n_vocab = rn_ctx_n_vocab(e->ctx), n = 0;
    for (int32_t id = 0; id < n_vocab; id++)
        n += rn_tokenizer_is_eog(e->tok, id);
    if (!(e->eog_ids = malloc((size_t)(n ? n : 1) * sizeof *e->eog_ids)))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int32_t id = 0; id < n_vocab; id++)
        if (rn_tokenizer_is_eog(e->tok, id))
            e->eog_ids[e->n_eog++] = id;
    return CR_OK;
}

static int common_prefix(const slot_t *sl, const int32_t *prompt, int n)
{
    int k = 0;
    while (k < sl->n_seq && k < n && sl->seq[k] == prompt[k])
        k++;
    return k;
}

/* The free slot for a prompt (Ollama's choice): the longest cached common
 * prefix, else the least recently used. NULL when all are busy. */
static slot_t *pick_slot(rn_engine_t *e, const int32_t *prompt, int n)
{
    slot_t *best = NULL;
    int best_common = -1;
    for (int i = 0; i < e->n_slots; i++) {
        slot_t *sl = &e->slots[i];
        if (sl->state != SLOT_FREE)
            continue;
        int k = prompt ? common_prefix(sl, prompt, n) : 0;
        if (k > best_common || (k == best_common && sl->used < best->used)) {
            best = sl;
            best_common = k;
        }
    }
    return best;
}

/* Ends the slot's request: releases its per-request state and tells the
 * caller through finish (status st; done only when st is CR_OK). */
static void end_slot(rn_engine_t *e, slot_t *sl, cr_status_t st,
                     const msg_done_body_t *done, const cr_err_t *err)
{
    rn_stop_destroy(&sl->stop);
    rn_grammar_destroy(&sl->grammar);
    free(sl->img_rows);
    sl->img_rows = NULL;
    free(sl->rope);
    sl->rope = NULL;
    sl->state = SLOT_FREE;
    sl->has_pending = false;
    if (sl->draft_k)
        cr_log_debug("slot %d: %" PRId64 " of %" PRId64 " drafted tokens accepted", sl->id,
                     sl->n_accepted, sl->n_drafted);
    sl->n_draft = sl->n_verify = 0;
    sl->used = ++e->clock;
    rn_sink_t sink = sl->sink;
    rn_finish_fn finish = sl->finish;
    memset(&sl->sink, 0, sizeof sl->sink);
    sl->finish = NULL;
    if (finish)
        finish(sink.ctx, st, done, err);
}

static void fail_slot(rn_engine_t *e, slot_t *sl, cr_status_t st,
                      const cr_err_t *err)
{
    end_slot(e, sl, st, NULL, err);
}

/* The answer is complete: flush what the detokenizer, stop matcher and
 * parsers held, fill done and end the slot. */
static void complete_slot(rn_engine_t *e, slot_t *sl)
{
    const char *piece;
    size_t piece_len;
    cr_buf_reset(&e->out);
    if (!sl->stopped) {
        bool stopped = false;
        rn_detok_flush(sl->detok, &piece, &piece_len);
        rn_stop_push(sl->stop, piece, piece_len, &e->out, &stopped);
        if (!stopped)
            rn_stop_flush(sl->stop, &e->out);
    }
    if (!rn_output_finish(sl->output, e->out.data, e->out.len, &sl->sink)) {
        /* What the parser held could not be read (a call's arguments): the
         * request fails, as Ollama's does. */
        const cr_err_t *oe = rn_output_error(sl->output);
        if (oe) {
            cr_err_t copy = *oe;
            fail_slot(e, sl, copy.status, &copy);
            return;
        }
    }
    int64_t t_end = mono_ns();
    msg_done_body_t done = {0};
    done.done_reason = (char *)sl->reason;
    done.has_done_reason = true;
    /* Ollama counts the whole prompt, cached part included, and names the
     * cached part apart (prompt_eval_cached_count, absent when none). */
    done.prompt_eval_count = sl->n_prompt;
    done.has_prompt_eval_count = true;
    done.prompt_eval_cached_count = sl->n_cached;
    done.has_prompt_eval_cached_count = sl->n_cached > 0;
    done.prompt_eval_duration = sl->t_decode - sl->t_prompt;
    done.has_prompt_eval_duration = true;
    done.eval_count = sl->n_gen;
    done.has_eval_count = true;
    done.eval_duration = t_end - sl->t_decode;
    done.has_eval_duration = true;
    done.total_duration = t_end - sl->t_start;
    done.has_total_duration = true;
    /* generate (not raw) returns the ids for a follow-up `context`. */
    if (sl->with_context) {
        done.context.v = sl->seq;
        done.context.n = (size_t)sl->n_seq;
        done.has_context = true;
        if (sl->img_rows) {
            /* Image tokens are no vocabulary ids: a client could not send
             * them back. The context keeps the text (e->prompt is free
             * between requests). */
            size_t k = 0;
            for (int i = 0; i < sl->n_seq; i++)
                if (sl->seq[i] >= 0)
                    e->prompt[k++] = sl->seq[i];
            done.context.v = e->prompt;
            done.context.n = k;
        }
    }
    /* which stop string ended it (end_slot frees the matcher first) */
    const char *matched = sl->stop ? rn_stop_matched(sl->stop) : NULL;
    char *hit = matched ? strdup(matched) : NULL;
    done.stop_sequence = hit;
    done.has_stop_sequence = hit != NULL;
    end_slot(e, sl, CR_OK, &done, NULL);
    free(hit);
}

/* The request's stop strings, and those the model's parser's format ends
 * answers with (harmony's <|return|>, <|call|>: a vocabulary that does not
 * make them end tokens still stops there). */
static rn_stop_t *new_stop(const rn_engine_t *e, const msg_strs_t *req,
                           cr_err_t *err)
{
    const char *const *extra = rn_parser_stops(e->parser);
    size_t n_req = req ? req->n : 0, n_extra = 0;
    while (extra[n_extra])
        n_extra++;
    if (!n_extra)
        return rn_stop_new(req ? (const char *const *)req->v : NULL, n_req, err);
    const char **all = calloc(n_req + n_extra, sizeof *all);
    if (!all) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n_req; i++)
        all[i] = req->v[i];
    for (size_t i = 0; i < n_extra; i++)
        all[n_req + i] = extra[i];
    rn_stop_t *stop = rn_stop_new(all, n_req + n_extra, err);
    free(all);
    return stop;
}

cr_status_t rn_engine_start(rn_engine_t *e, const msg_t *req,
                            const rn_sink_t *sink, rn_finish_fn finish,
                            cr_err_t *err)
{
    int64_t t_start = mono_ns();
    const msg_t *r = req;
    if (r->type != MSG_generate && r->type != MSG_chat)
        return cr_err_set(err, CR_E_INVALID, "unsupported request type");
    if (!pick_slot(e, NULL, 0))
        return cr_err_set(err, CR_E_BUSY, "all %d slots are busy", e->n_slots);
    const char *format = r->type == MSG_chat ? r->u.chat.format
                                             : r->u.generate.format;
    rn_grammar_t *grammar = NULL;
    rn_stop_t *stop = NULL;
    rn_prompt_result_t prompt = {0};
    img_plan_t plan = {0};
    float *img_rows = NULL;
    int32_t *rope = NULL;
    req_opts_t ro;
    cr_status_t st;
    if (format && *format) {
        if ((st = rn_grammar_new(format, strlen(format), NULL, &grammar, err)))
            goto out;
        if (!e->gvocab && (st = rn_grammar_vocab_new(e->tok, &e->gvocab, err)))
            goto out;
    }
    if ((st = request_opts(e, req_options(r), &ro, err)))
        goto out;
    stop = new_stop(e, ro.stop, err);
    if (!stop) {
        /* Too many or too long stop strings are the client's mistake. */
        if (err && err->status == CR_E_TOO_LARGE)
            err->status = CR_E_INVALID;
        st = err && err->status ? err->status : CR_E_NOMEM;
        goto out;
    }
    ro.stop = NULL;
    if ((st = render(e, r, &prompt, err)))
        goto out;
    bool render_only = r->type == MSG_chat ? r->u.chat.debug_render_only
                                           : r->u.generate.debug_render_only;
    /* A render-only request never runs, so its length is no error. */
    bool truncate = render_only ||
                    (r->type == MSG_chat
                         ? !r->u.chat.has_truncate || r->u.chat.truncate
                         : !r->u.generate.has_truncate || r->u.generate.truncate);
    int n_prompt = 0;
    bool with_images = e->vision && prompt.n_images > 0;
    if (e->vision && request_images(r, NULL, 0) > prompt.images_skipped + prompt.n_images) {
        /* a Jinja chat template (or a request's own) does not place them */
        st = cr_err_set(err, CR_E_INVALID, "the model's prompt format gives the images no "
                        "place in the prompt");
        goto out;
    }
    st = with_images ? tokenize_images(e, r, &prompt, &plan, &n_prompt, err)
                     : tokenize_prompt(e, &prompt, ro.num_keep, truncate, &n_prompt, err);
    if (st)
        goto out;
    slot_t *sl = pick_slot(e, e->prompt, n_prompt);
    if ((st = begin_output(e, sl->output, r, prompt.text, err)))
        goto out;
    if (render_only) {
        /* Ollama's _debug_render_only: the prompt, no inference. */
        msg_done_body_t done = {0};
        done.done_reason = (char *)"";
        done.has_done_reason = true;
        done.rendered_template = prompt.text;
        done.has_rendered_template = true;
        done.image_count = (int64_t)prompt.n_images;
        done.has_image_count = true;
        finish(sink->ctx, CR_OK, &done, NULL);
        goto out;
    }
    if ((st = rn_sampler_reset(sl->sampler, &ro.sp, err)))
        goto out;
    if (e->script)
        rn_script_begin(e->script, &sl->script);
    /* Speculation needs the sampler to judge each draft: a grammar's mask
     * follows the text token by token and a test script forces tokens,
     * so those requests decode one token per step. */
    bool by_model = e->draft && e->draft_k > 0; /* a draft model wins over lookup */
    int draft_k = grammar || e->script ? 0 : by_model ? e->draft_k : ro.draft_ngram;
    if (draft_k && sl->spec_rows < draft_k + 1) {
        size_t bytes = (size_t)(draft_k + 1) * (size_t)rn_ctx_n_vocab(e->ctx) * sizeof(float);
        float *rows = realloc(sl->spec_logits, bytes);
        if (!rows) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory for %zu bytes of draft logits",
                            bytes);
            goto out;
        }
        sl->spec_logits = rows;
        sl->spec_rows = draft_k + 1;
    }
    bool draft_sampled = by_model && draft_k && ro.sp.temperature > 0.0f;
    if (draft_sampled && sl->spec_q_rows < draft_k) {
        size_t bytes = (size_t)draft_k * (size_t)rn_ctx_n_vocab(e->ctx) * sizeof(float);
        float *rows = realloc(sl->spec_q, bytes);
        if (!rows) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory for %zu bytes of draft q rows",
                            bytes);
            goto out;
        }
        sl->spec_q = rows;
        sl->spec_q_rows = draft_k;
    }
    if (ro.ignore_eos && !e->eog_ids && (st = list_eog(e, err)))
        goto out;
    if ((grammar || ro.ignore_eos) && !sl->masked) {
        int n_vocab = rn_ctx_n_vocab(e->ctx);
        if (!(sl->masked = malloc((size_t)n_vocab * sizeof(float)))) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            goto out;
        }
    }
    /* Keep the cached common prefix; re-evaluate at least the last prompt
     * token for fresh logits. Images wholly inside it are not encoded. */
    int common = common_prefix(sl, e->prompt, n_prompt);
    if (common == n_prompt)
        common = n_prompt - 1;
    /* an image read both ways is evaluated whole: never from its middle */
    while (e->img_full && common > 0 && e->prompt[common] < 0 && e->prompt[common - 1] < 0)
        common--;
    if (with_images &&
        (st = embed_images(e, &plan, e->prompt, n_prompt, common, &img_rows, err)))
        goto out;
    if (with_images && rn_model_hparams(e->model)->mrope &&
        (st = mrope_positions(&plan, e->prompt, n_prompt, &rope, err)))
        goto out;

    /* The slot is taken: from here on it ends through finish. */
    memcpy(sl->prompt, e->prompt, (size_t)n_prompt * sizeof *sl->prompt);
    sl->n_prompt = n_prompt;
    sl->sink = *sink;
    sl->finish = finish;
    sl->grammar = grammar;
    sl->stop = stop;
    grammar = NULL;
    stop = NULL;
    sl->ro = ro;
    sl->with_context = r->type == MSG_generate && !r->u.generate.raw;
    sl->want_logprobs = r->type == MSG_chat ? r->u.chat.logprobs
                                            : r->u.generate.logprobs;
    sl->top_logprobs = r->type == MSG_chat ? r->u.chat.top_logprobs
                                           : r->u.generate.top_logprobs;
    sl->n_gen = 0;
    sl->arrived_tick = e->stats.steps;
    sl->has_pending = false;
    sl->draft_k = draft_k;
    sl->draft_by_model = by_model;
    sl->draft_sampled = draft_sampled;
    /* the draft's own draws: from the request's seed when it has one, so
     * a seeded answer repeats */
    rn_rng_seed(&sl->draft_rng, ro.sp.seed >= 0 ? (uint64_t)ro.sp.seed ^ 0x9e3779b97f4a7c15ULL
                                                : (uint64_t)mono_ns() ^ (uint64_t)sl->id);
    sl->n_draft = sl->n_verify = 0;
    sl->n_drafted = sl->n_accepted = 0;
    sl->spec_skip = sl->spec_misses = 0;
    sl->stopped = false;
    sl->shift = r->type == MSG_chat ? !r->u.chat.has_shift || r->u.chat.shift
                                    : !r->u.generate.has_shift || r->u.generate.shift;
    sl->reason = "length";
    sl->t_start = t_start;
    sl->t_prompt = mono_ns();
    const char *piece;
    size_t piece_len;
    rn_detok_flush(sl->detok, &piece, &piece_len); /* fresh stream */
    sl->img_rows = img_rows;
    img_rows = NULL;
    sl->rope = rope;
    rope = NULL;
    sl->img_at = 0;
    for (int i = 0; i < common; i++)
        sl->img_at += sl->prompt[i] < 0;
    rn_ctx_seq_truncate(e->ctx, sl->id, common);
    sl->n_seq = common;
    sl->at = common;
    sl->n_cached = common;
    sl->state = SLOT_PREFILL;
out:
    plan_free(&plan);
    free(img_rows);
    free(rope);
    rn_prompt_result_free(&prompt);
    rn_stop_destroy(&stop);
    rn_grammar_destroy(&grammar);
    return st;
}

/* Samples the next token of a decoding slot from raw (the logits after its
 * last token) and sends its text. With a draft token (>= 0) the sampler
 * judges it (rn_sampler_pick_draft, or rn_sampler_pick_draft_q against q,
 * the distribution it was drawn from, when q is not NULL) and *accepted
 * says whether the token is the draft. Sets *finished when the answer ended (reason set);
 * otherwise the token is pending for the next forward pass. */
static cr_status_t decode_one(rn_engine_t *e, slot_t *sl, const float *raw, int32_t draft,
                              const float *q, bool *accepted, bool *finished, cr_err_t *err)
{
    *finished = false;
    *accepted = false;
    int32_t token;
    const float *logits = raw;
    cr_status_t st;
    if (sl->grammar) {
        /* Only tokens that keep the output a valid prefix survive. */
        int n_vocab = rn_ctx_n_vocab(e->ctx);
        memcpy(sl->masked, logits, (size_t)n_vocab * sizeof *logits);
        if (!rn_grammar_mask(sl->grammar, e->gvocab, sl->masked, n_vocab))
            return cr_err_set(err, CR_E_INTERNAL,
                              "no token can continue the formatted output");
        logits = sl->masked;
    }
    if (sl->ro.ignore_eos && !sl->grammar) {
        /* llama-server's ignore_eos: the answer runs to num_predict (with a
         * format the grammar decides where it ends) */
        if (logits != sl->masked) {
            memcpy(sl->masked, logits, (size_t)rn_ctx_n_vocab(e->ctx) * sizeof *logits);
            logits = sl->masked;
        }
        for (int k = 0; k < e->n_eog; k++)
            sl->masked[e->eog_ids[k]] = -INFINITY;
    }
    if (e->script)
        token = rn_script_next(e->script, &sl->script); /* a test forces it */
    else if (draft >= 0 && q) {
        if ((st = rn_sampler_pick_draft_q(sl->sampler, logits, draft, q, &token, accepted, err)))
            return st;
    } else if (draft >= 0) {
        if ((st = rn_sampler_pick_draft(sl->sampler, logits, draft, &token, accepted, err)))
            return st;
    } else if ((st = rn_sampler_pick(sl->sampler, logits, &token, err)))
        return st;
    if (sl->want_logprobs &&
        (st = add_logprobs(e, sl, raw, token, sl->top_logprobs, err)))
        return st;
    if (sl->grammar && (st = rn_grammar_accept(sl->grammar, e->gvocab, token, err)))
        return st;
    rn_sampler_accept(sl->sampler, token);
    sl->n_gen++;
    if (rn_tokenizer_is_eog(e->tok, token)) {
        sl->reason = "stop";
        *finished = true;
        return CR_OK;
    }
    const char *piece;
    size_t piece_len;
    if ((st = rn_detok_push(sl->detok, token, &piece, &piece_len, err)))
        return st;
    cr_buf_reset(&e->out);
    if ((st = rn_stop_push(sl->stop, piece, piece_len, &e->out, &sl->stopped)))
        return st;
    if (!rn_output_push(sl->output, e->out.data, e->out.len, &sl->sink)) {
        const cr_err_t *oe = rn_output_error(sl->output);
        if (oe && err)
            *err = *oe;
        return oe ? oe->status : CR_E_CANCELED;
    }
    if (sl->stopped || (sl->grammar && rn_grammar_is_complete(sl->grammar) &&
                        !rn_grammar_can_continue(sl->grammar))) {
        sl->reason = "stop";
        *finished = true;
        return CR_OK;
    }
    if (sl->n_gen == sl->ro.num_predict) {
        *finished = true;
        return CR_OK;
    }
    if (sl->n_seq >= e->n_ctx && !sl->shift) {
        *finished = true; /* reason stays "length" */
        return CR_OK;
    }
    if (sl->n_seq >= e->n_ctx && (st = shift_context(e, sl, sl->ro.num_keep, err)))
        return st;
    sl->pending = token;
    sl->has_pending = true;
    return CR_OK;
}

/* Steps a slot decodes without drafting after `misses` drafting steps in
 * a row that all missed (slot_t): 0, 1, 2, 4 .. SPEC_BACKOFF_MAX. */
static int backoff_steps(int misses)
{
    int steps = 0;
    for (int i = 0; i < misses && steps < SPEC_BACKOFF_MAX; i++)
        steps = steps ? 2 * steps : 1;
    return CR_MIN(steps, SPEC_BACKOFF_MAX);
}

/* The drafts evaluated last step, judged in order from their logits rows:
 * each accepted one is already in the cache and joins the sequence; the
 * first rejected one is replaced by the sampler's token, which becomes
 * pending; after all K, row K gives the next token. The cache then drops
 * every position past the sequence, as if the rejected drafts had never
 * been evaluated. */
static cr_status_t verify_drafts(rn_engine_t *e, slot_t *sl, bool *finished,
                                 cr_err_t *err)
{
    int k = sl->n_verify;
    size_t V = (size_t)rn_ctx_n_vocab(e->ctx);
    cr_status_t st = CR_OK;
    sl->n_verify = 0;
    *finished = false;
    int kept = 0;
    for (int i = 0; i <= k; i++) {
        int32_t draft = i < k ? sl->span_tok[1 + i] : -1;
        const float *q = i < k && sl->draft_sampled ? sl->spec_q + (size_t)i * V : NULL;
        bool accepted = false;
        st = decode_one(e, sl, sl->spec_logits + (size_t)i * V, draft, q, &accepted, finished,
                        err);
        if (st || *finished || !accepted)
            break;
        sl->seq[sl->n_seq++] = draft;
        sl->has_pending = false;
        sl->n_accepted++;
        kept++;
        e->stats.draft_accepted++;
    }
    if (k > 0 && !st) {
        sl->spec_misses = kept ? 0 : sl->spec_misses + 1;
        sl->spec_skip = backoff_steps(sl->spec_misses);
        if (sl->draft_by_model && sl->spec_misses >= SPEC_GIVE_UP) {
            /* a draft model costs even while paused (it reads every token
             * it skipped): one that keeps missing is dropped */
            cr_log_debug("slot %d: drafts missed %d steps in a row; decoding on without them",
                         sl->id, sl->spec_misses);
            sl->draft_k = 0;
        }
    }
    rn_ctx_seq_truncate(e->ctx, sl->id, sl->n_seq);
    return st;
}

/* Drafts for a slot whose token is pending: up to `room` after it into
 * span_tok[1..], from the draft model or by prompt lookup; returns how
 * many. A draft model's failure (its forward pass) ends that slot's
 * speculation, not its answer: the target decodes on without drafts. */
/* How many drafts a slot whose token is pending may take, at most `room`:
 * its K, what it may still emit after the pending token (which joins the
 * sequence this step whatever the drafts) and the context allow. */
static int draft_room(const rn_engine_t *e, const slot_t *sl, int room)
{
    int64_t left = sl->ro.num_predict - sl->n_gen; /* tokens it may still emit */
    room = (int)CR_MIN((int64_t)CR_MIN(room, sl->draft_k), left - 1);
    return CR_MIN(room, e->n_ctx - sl->n_seq - 1);
}

static int draft_tokens(rn_engine_t *e, slot_t *sl, int room)
{
    room = draft_room(e, sl, room);
    if (room <= 0)
        return 0;
    sl->seq[sl->n_seq] = sl->pending; /* scratch: the lookup reads it last */
    if (sl->draft_by_model)
        return CR_MIN(room, sl->n_premade); /* the unused rest is dropped next step */
    return rn_spec_ngram_draft(sl->seq, sl->n_seq + 1, room, sl->span_tok + 1);
}

/* The draft model's proposals for every slot it drafts for, in batched
 * passes of the draft (spec_draft.h), before the step takes them: each up
 * to its K, what it may still emit and the context allow (the batch
 * budget cuts them later). A draft's failure ends those slots'
 * speculation, not their answers: they decode on without drafts. */
static void draft_all(rn_engine_t *e)
{
    rn_spec_draft_req_t reqs[RN_CTX_MAX_SEQ];
    rn_spec_draft_sampling_t samp[RN_CTX_MAX_SEQ];
    slot_t *who[RN_CTX_MAX_SEQ];
    int n = 0;
    for (int i = 0; i < e->n_slots && n < RN_CTX_MAX_SEQ; i++) {
        slot_t *sl = &e->slots[i];
        sl->n_premade = 0;
        if (sl->state != SLOT_DECODE || !sl->has_pending || !sl->draft_by_model ||
            !sl->draft_k || sl->spec_skip > 0)
            continue;
        int room = draft_room(e, sl, sl->draft_k);
        if (room <= 0)
            continue;
        sl->seq[sl->n_seq] = sl->pending; /* scratch: the draft reads it last */
        samp[n] = (rn_spec_draft_sampling_t){sl->ro.sp.temperature, &sl->draft_rng, sl->spec_q};
        reqs[n] = (rn_spec_draft_req_t){sl->id, sl->seq, sl->n_seq + 1, room,
                                        sl->draft_sampled ? &samp[n] : NULL, sl->span_tok + 1,
                                        0, sl->ro.draft_p_min};
        who[n++] = sl;
    }
    if (n == 0)
        return;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_spec_draft_propose_batch(e->draft, reqs, n, &err);
    for (int i = 0; i < n; i++) {
        who[i]->n_premade = reqs[i].n_out;
        if (st) {
            cr_log_warn("slot %d: %s; decoding on without drafts", who[i]->id, err.msg);
            who[i]->draft_k = 0;
        }
    }
}

rn_pace_t *rn_engine_pace(rn_engine_t *e)
{
    return &e->pace;
}

int rn_engine_step(rn_engine_t *e)
{
    cr_err_t err;
    /* 1. cancels, then a token for every decoding slot whose logits are
     *    fresh (its answer may end here) */
    for (int i = 0; i < e->n_slots; i++) {
        slot_t *sl = &e->slots[i];
        if (sl->state == SLOT_FREE)
            continue;
        if (sl->sink.canceled && sl->sink.canceled(sl->sink.ctx)) {
            cr_err_set(&err, CR_E_CANCELED, "request canceled");
            fail_slot(e, sl, CR_E_CANCELED, &err);
            continue;
        }
        if (sl->state != SLOT_DECODE || sl->has_pending)
            continue;
        if (sl->n_gen == 0)
            sl->streaming_tick = e->stats.steps;
        bool finished = false, accepted;
        cr_err_clear(&err);
        cr_status_t st = sl->n_verify > 0
                             ? verify_drafts(e, sl, &finished, &err)
                             : decode_one(e, sl, rn_ctx_seq_logits(e->ctx, sl->id), -1,
                                          NULL, &accepted, &finished, &err);
        if (st)
            fail_slot(e, sl, st, &err);
        else if (finished)
            complete_slot(e, sl);
    }
    /* 2. the batch: pending tokens first (one each, with a speculating
     *    slot's drafts while every later pending token still fits), then
     *    prompt chunks of prefilling slots, within n_batch tokens and as
     *    the pace plans them (a prompt that came while slots were already
     *    sending is capped, so their next token is not held up by a long
     *    chunk) */
    if (e->draft)
        draft_all(e);
    int budget = rn_ctx_n_batch(e->ctx), n_spans = 0, n_pending = 0;
    for (int i = 0; i < e->n_slots; i++)
        n_pending += e->slots[i].state == SLOT_DECODE && e->slots[i].has_pending;
    for (int i = 0; i < e->n_slots && budget > 0; i++) {
        slot_t *sl = &e->slots[i];
        if (sl->state != SLOT_DECODE || !sl->has_pending)
            continue;
        n_pending--;
        sl->span_tok[0] = sl->pending;
        sl->n_draft = 0;
        if (sl->spec_skip > 0)
            sl->spec_skip--; /* a step of the backoff (slot_t) */
        else if (sl->draft_k)
            sl->n_draft = draft_tokens(e, sl, budget - 1 - n_pending);
        e->spans[n_spans] = (rn_ctx_span_t){sl->id, sl->span_tok, 1 + sl->n_draft, sl->n_seq,
                                            NULL, NULL, false,
                                            sl->n_draft ? sl->spec_logits : NULL};
        e->span_slot[n_spans++] = i;
        budget -= 1 + sl->n_draft;
    }
    /* (an image read both ways goes whole into one step: never capped, or
     * it could wait for room while other slots keep decoding) */
    int n_decode = n_spans, n_prompt = 0, n_wait = 0;
    int n_decode_tok = rn_ctx_n_batch(e->ctx) - budget; /* with drafts */
    if (!e->img_full) {
        rn_pace_step_t ps = {n_decode, INT64_MAX, budget, PREFILL_STEP};
        for (int s = 0; s < n_decode; s++)
            ps.streaming_since = CR_MIN(ps.streaming_since,
                                        e->slots[e->span_slot[s]].streaming_tick);
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i].state == SLOT_PREFILL)
                e->waiting[n_wait++] = (rn_pace_prompt_t){
                    e->slots[i].arrived_tick, e->slots[i].n_prompt - e->slots[i].at};
        rn_pace_plan(&e->pace, &ps, e->waiting, n_wait, e->take);
    }
    for (int i = 0, k = 0; i < e->n_slots && budget > 0; i++) {
        slot_t *sl = &e->slots[i];
        if (sl->state != SLOT_PREFILL)
            continue;
        int step = CR_MIN(CR_MIN(PREFILL_STEP, sl->n_prompt - sl->at), budget);
        if (!e->img_full)
            step = e->take[k++]; /* the pace's plan, in the same slot order */
        else
            step = whole_images(sl, step, budget);
        if (step == 0)
            continue; /* it waits for a step with room */
        e->spans[n_spans] = (rn_ctx_span_t){sl->id, sl->prompt + sl->at, step, sl->at, NULL,
                                            NULL, e->img_full, NULL};
        if (sl->img_rows)
            e->spans[n_spans].embd =
                sl->img_rows + (size_t)sl->img_at * rn_ctx_embd_dim(e->ctx);
        if (sl->rope)
            e->spans[n_spans].rope_pos = sl->rope + 3 * (size_t)sl->at;
        e->span_slot[n_spans++] = i;
        budget -= step;
        n_prompt += step;
    }
    if (n_spans == 0)
        return rn_engine_busy(e);
    /* 3. one forward pass */
    cr_err_clear(&err);
    int64_t t0 = mono_ns();
    cr_status_t st = rn_ctx_eval_batch(e->ctx, e->spans, n_spans, &err);
    if (!st)
        st = backend_check(e, &err);
    if (!st)
        rn_pace_observe(&e->pace, n_decode, n_prompt, mono_ns() - t0);
    if (n_decode > 0 && n_prompt > e->stats.max_prompt_with_decode)
        e->stats.max_prompt_with_decode = n_prompt;
    e->stats.steps++;
    e->stats.tokens += n_decode_tok + n_prompt; /* drafts included */
    if (n_spans > 1)
        e->stats.steps_multi++;
    if (n_spans > e->stats.max_seqs)
        e->stats.max_seqs = n_spans;
    /* 4. what the pass did for each slot */
    for (int s = 0; s < n_spans; s++) {
        slot_t *sl = &e->slots[e->span_slot[s]];
        const rn_ctx_span_t *sp = &e->spans[s];
        if (st) {
            rn_ctx_seq_truncate(e->ctx, sl->id, 0);
            sl->n_seq = 0;
            sl->n_draft = 0;
            fail_slot(e, sl, st, &err);
            continue;
        }
        if (sl->state == SLOT_DECODE) {
            sl->seq[sl->n_seq++] = sl->pending;
            sl->has_pending = false;
            /* its drafts wait in the cache for the next step's verdict */
            sl->n_verify = sl->n_draft;
            sl->n_drafted += sl->n_draft;
            e->stats.draft_tokens += sl->n_draft;
            sl->n_draft = 0;
            continue;
        }
        memcpy(sl->seq + sl->at, sp->tokens, (size_t)sp->n * sizeof *sl->seq);
        for (int t = 0; t < sp->n; t++)
            sl->img_at += sp->tokens[t] < 0;
        sl->at += sp->n;
        sl->n_seq = sl->at;
        if (sl->at == sl->n_prompt) {
            for (int i = 0; i < sl->n_prompt; i++)
                rn_sampler_accept(sl->sampler, sl->prompt[i]);
            sl->t_decode = mono_ns();
            sl->state = SLOT_DECODE;
        }
    }
    return rn_engine_busy(e);
}

/* rn_engine_generate runs one request to its end through the step loop. */
typedef struct sync_run {
    bool finished;
    cr_status_t st;
    msg_done_body_t *done;
    cr_err_t *err;
    rn_sink_t user;
} sync_run_t;

static bool sync_chunk(void *ctx, const msg_chunk_body_t *chunk)
{
    sync_run_t *r = ctx;
    return r->user.chunk(r->user.ctx, chunk);
}

static bool sync_canceled(void *ctx)
{
    sync_run_t *r = ctx;
    return r->user.canceled(r->user.ctx);
}

static void sync_finish(void *ctx, cr_status_t st, const msg_done_body_t *done,
                        const cr_err_t *err)
{
    sync_run_t *r = ctx;
    r->finished = true;
    r->st = st;
    if (done)
        *r->done = *done;
    if (st && r->err && err && r->err != err)
        *r->err = *err;
}

cr_status_t rn_engine_generate(rn_engine_t *e, const msg_t *req,
                               const rn_sink_t *sink, msg_done_body_t *done,
                               cr_err_t *err)
{
    sync_run_t run = {.done = done, .err = err, .user = *sink};
    rn_sink_t s = {&run, sync_chunk, sync_canceled};
    cr_status_t st = rn_engine_start(e, req, &s, sync_finish, err);
    if (st)
        return st;
    while (!run.finished)
        rn_engine_step(e);
    return run.st;
}

/* ---- embeddings ---- */

#define EMBED_MAX_INPUTS 4096

cr_status_t rn_engine_embed(rn_engine_t *e, const msg_embed_body_t *req,
                            const rn_sink_t *sink, msg_embeddings_body_t *out,
                            cr_err_t *err)
{
    int64_t t_start = mono_ns();
    memset(out, 0, sizeof *out);
    const rn_hparams_t *hp = rn_model_hparams(e->model);
    size_t n_in = req->input.n;
    if (n_in > EMBED_MAX_INPUTS)
        return cr_err_set(err, CR_E_INVALID, "too many inputs (%zu > %d)",
                          n_in, EMBED_MAX_INPUTS);
    size_t dim = (size_t)hp->dim;
    size_t dims = dim;
    if (req->has_dimensions && req->dimensions > 0 &&
        (size_t)req->dimensions < dim)
        dims = (size_t)req->dimensions;
    if (n_in * dim > e->embed_cap) {
        float *p = realloc(e->embed, n_in * dim * sizeof *p);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "out of memory for embeddings");
        e->embed = p;
        e->embed_cap = n_in * dim;
    }
    bool truncate = !req->has_truncate || req->truncate;
    bool normalize = !req->has_normalize || req->normalize;
    slot_t *sl = pick_slot(e, NULL, 0); /* the least recently used */
    if (!sl)
        return cr_err_set(err, CR_E_BUSY, "all %d slots are busy", e->n_slots);
    int64_t n_tokens = 0;
    for (size_t i = 0; i < n_in; i++) {
        if (sink->canceled(sink->ctx))
            return CR_E_CANCELED;
        const char *text = req->input.v[i] ? req->input.v[i] : "";
        size_t need = 0;
        cr_status_t st = rn_tokenize(e->tok, text, strlen(text), true, false,
                                     e->prompt, (size_t)e->n_ctx, &need, err);
        if (st && st != CR_E_TOO_LARGE)
            return st;
        if (need > (size_t)e->n_ctx) {
            if (!truncate)
                return cr_err_set(err, CR_E_INVALID,
                                  "the input length exceeds the context length");
            need = (size_t)e->n_ctx; /* the head that fits */
            /* An encoder's closing token ([SEP]) stays last, as in Ollama,
             * which cuts the tokens and tokenizes the cut text again. */
            if (rn_tokenizer_add_eos(e->tok) && rn_tokenizer_eos(e->tok) >= 0)
                e->prompt[need - 1] = rn_tokenizer_eos(e->tok);
        }
        if (need == 0)
            return cr_err_set(err, CR_E_INVALID, "input %zu is empty", i);
        float *row = e->embed + i * dims;
        /* Pool into the row's slot (dim wide, then cut to dims). */
        float *full = e->embed + i * dim;
        sl->n_seq = 0; /* the cache now holds this input, not a prompt */
        if ((st = rn_ctx_embed_seq(e->ctx, sl->id, e->prompt, (int)need, false,
                                   full, err)))
            return st;
        n_tokens += (int64_t)need;
        if (row != full)
            memmove(row, full, dims * sizeof *row);
        if (normalize) {
            double ss = 0;
            for (size_t j = 0; j < dims; j++)
                ss += (double)row[j] * row[j];
            double norm = sqrt(ss);
            float scale = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
            for (size_t j = 0; j < dims; j++)
                row[j] *= scale;
        }
    }
    out->n_inputs = (int64_t)n_in;
    out->has_n_inputs = true;
    out->dims = (int64_t)dims;
    out->has_dims = true;
    out->data.data = (uint8_t *)e->embed;
    out->data.len = n_in * dims * sizeof(float);
    out->has_data = true;
    out->prompt_eval_count = n_tokens;
    out->has_prompt_eval_count = true;
    out->total_duration = mono_ns() - t_start;
    out->has_total_duration = true;
    return CR_OK;
}

/* ---- reranking ---- */

cr_status_t rn_engine_rerank(rn_engine_t *e, const char *query, const char *const *docs,
                             size_t n_docs, bool truncate, float *scores,
                             int64_t *n_tokens, cr_err_t *err)
{
    if (n_tokens)
        *n_tokens = 0;
    int n_out = rn_ctx_rank_n_out(e->ctx);
    if (n_out == 0)
        return cr_err_set(err, CR_E_UNSUPPORTED, "model '%s' is not a reranker",
                          rn_model_hparams(e->model)->arch);
    if (n_docs > EMBED_MAX_INPUTS)
        return cr_err_set(err, CR_E_INVALID, "too many documents (%zu > %d)", n_docs,
                          EMBED_MAX_INPUTS);
    /* the head's outputs land in the embedding buffer */
    if ((size_t)n_out > e->embed_cap) {
        float *p = realloc(e->embed, (size_t)n_out * sizeof *p);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "out of memory for scores");
        e->embed = p;
        e->embed_cap = (size_t)n_out;
    }
    slot_t *sl = pick_slot(e, NULL, 0);
    if (!sl)
        return cr_err_set(err, CR_E_BUSY, "all %d slots are busy", e->n_slots);
    const char *q = query ? query : "";
    int32_t eos = rn_tokenizer_eos(e->tok) >= 0 ? rn_tokenizer_eos(e->tok)
                                                 : rn_tokenizer_sep(e->tok);
    for (size_t i = 0; i < n_docs; i++) {
        const char *d = docs[i] ? docs[i] : "";
        size_t need = 0;
        cr_status_t st = rn_tokenizer_encode_pair(e->tok, q, strlen(q), d, strlen(d),
                                                  e->prompt, (size_t)e->n_ctx, &need, err);
        if (st && st != CR_E_TOO_LARGE)
            return st;
        if (need > (size_t)e->n_ctx) {
            if (!truncate)
                return cr_err_set(err, CR_E_INVALID, "document %zu: the query and "
                                  "document need %zu tokens, the context holds %d", i,
                                  need, e->n_ctx);
            /* the head that fits, closed as a pair is closed */
            need = (size_t)e->n_ctx;
            if (rn_tokenizer_add_eos(e->tok) && eos >= 0)
                e->prompt[need - 1] = eos;
        }
        sl->n_seq = 0; /* the cache now holds this pair, not a prompt */
        if ((st = rn_ctx_rank_seq(e->ctx, sl->id, e->prompt, (int)need, e->embed, err))) {
            cr_err_wrap(err, "document %zu", i);
            return st;
        }
        scores[i] = e->embed[0];
        if (n_tokens)
            *n_tokens += (int64_t)need;
    }
    return CR_OK;
}

/* ---- tokenize / detokenize ---- */

cr_status_t rn_engine_tokenize(rn_engine_t *e, const char *content,
                               int32_t **ids, size_t *n, cr_err_t *err)
{
    const char *text = content ? content : "";
    size_t len = strlen(text), need = 0;
    *ids = NULL;
    *n = 0;
    cr_status_t st = rn_tokenize(e->tok, text, len, false, true, NULL, 0, &need,
                                 err);
    if (st && st != CR_E_TOO_LARGE)
        return st;
    if (!need)
        return CR_OK;
    int32_t *v = malloc(need * sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    if ((st = rn_tokenize(e->tok, text, len, false, true, v, need, n, err))) {
        free(v);
        return st;
    }
    *ids = v;
    return CR_OK;
}

cr_status_t rn_engine_detokenize(rn_engine_t *e, const int32_t *ids, size_t n,
                                 char **text, cr_err_t *err)
{
    size_t n_vocab = rn_tokenizer_n_vocab(e->tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= n_vocab)
            return cr_err_set(err, CR_E_INVALID,
                              "token %d at index %zu is outside the vocabulary "
                              "(%zu)",
                              ids[i], i, n_vocab);
    cr_buf_t b;
    cr_buf_init(&b, PROMPT_TEXT_MAX);
    cr_status_t st = rn_detokenize(e->tok, ids, n, 0, &b, err);
    if (st) {
        cr_buf_free(&b);
        return st;
    }
    *text = cr_buf_steal(&b);
    return *text ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
}
