/* render.c: the JSON writer and Ollama's reply shapes (see render.h). */
#include "lib/prelude.h"
#include "services/gateway/render.h"

#include "lib/gotext.h"

#include <math.h>

/* ---- the writer ---- */

static void put(gw_jw_t *w, const void *p, size_t n)
{
    if (w->st)
        return;
    w->st = cr_buf_append(w->b, p, n);
}

static void putc_(gw_jw_t *w, char c)
{
    put(w, &c, 1);
}

void gw_jw_init(gw_jw_t *w, cr_buf_t *b)
{
    memset(w, 0, sizeof *w);
    w->b = b;
}

static void pre_value(gw_jw_t *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth > 0) {
        if (w->need_comma[w->depth])
            putc_(w, ',');
        w->need_comma[w->depth] = true;
    }
}

static void open_(gw_jw_t *w, char c)
{
    pre_value(w);
    if (w->depth >= GW_JW_MAX_DEPTH) {
        if (!w->st)
            w->st = CR_E_INTERNAL;
        return;
    }
    putc_(w, c);
    w->depth++;
    w->need_comma[w->depth] = false;
}

static void close_(gw_jw_t *w, char c)
{
    if (w->depth <= 0) {
        if (!w->st)
            w->st = CR_E_INTERNAL;
        return;
    }
    putc_(w, c);
    w->depth--;
}

void gw_jw_obj(gw_jw_t *w) { open_(w, '{'); }
void gw_jw_end_obj(gw_jw_t *w) { close_(w, '}'); }
void gw_jw_arr(gw_jw_t *w) { open_(w, '['); }
void gw_jw_end_arr(gw_jw_t *w) { close_(w, ']'); }

/* Go's encoding/json string escaping (with HTML escaping on). */
static void put_string(gw_jw_t *w, const char *s, size_t n)
{
    if (!w->st)
        w->st = cr_json_quote(s, n, w->b);
}

void gw_jw_key(gw_jw_t *w, const char *key)
{
    if (w->depth > 0) {
        if (w->need_comma[w->depth])
            putc_(w, ',');
        w->need_comma[w->depth] = true;
    }
    put_string(w, key, strlen(key));
    putc_(w, ':');
    w->after_key = true;
}

void gw_jw_strn(gw_jw_t *w, const char *s, size_t n)
{
    pre_value(w);
    put_string(w, s ? s : "", s ? n : 0);
}

void gw_jw_str(gw_jw_t *w, const char *s)
{
    gw_jw_strn(w, s, s ? strlen(s) : 0);
}

void gw_jw_i64(gw_jw_t *w, int64_t v)
{
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    pre_value(w);
    put(w, tmp, (size_t)n);
}

void gw_jw_bool(gw_jw_t *w, bool v)
{
    pre_value(w);
    if (v)
        put(w, "true", 4);
    else
        put(w, "false", 5);
}

void gw_jw_null(gw_jw_t *w)
{
    pre_value(w);
    put(w, "null", 4);
}

void gw_jw_raw(gw_jw_t *w, const char *json, size_t len)
{
    pre_value(w);
    put(w, json, len);
}

/* Shortest decimal that reads back as the same float (bits 32) or double
 * (bits 64), laid out as Go's encoding/json does. */
static size_t format_float(double v, int bits, char *out, size_t cap)
{
    return cr_float_format(v, bits, CR_FLOAT_JSON, out, cap);
}

void gw_jw_f32(gw_jw_t *w, float v)
{
    if (!isfinite(v)) {
        gw_jw_null(w);
        return;
    }
    char tmp[64];
    size_t n = format_float(v, 32, tmp, sizeof tmp);
    pre_value(w);
    put(w, tmp, n);
}

void gw_jw_f64(gw_jw_t *w, double v)
{
    if (!isfinite(v)) {
        gw_jw_null(w);
        return;
    }
    char tmp[64];
    size_t n = format_float(v, 64, tmp, sizeof tmp);
    pre_value(w);
    put(w, tmp, n);
}

/* ---- pieces ---- */

char *gw_time_rfc3339(struct timespec ts, char *out)
{
    struct tm tm;
    time_t secs = ts.tv_sec;
    gmtime_r(&secs, &tm);
    int n = snprintf(out, GW_TIME_BUF, "%04d-%02d-%02dT%02d:%02d:%02d",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
    if (n < 0 || n >= GW_TIME_BUF - 12) {
        snprintf(out, GW_TIME_BUF, "0001-01-01T00:00:00Z");
        return out;
    }
    if (ts.tv_nsec > 0 && ts.tv_nsec < 1000000000L) {
        char frac[16];
        snprintf(frac, sizeof frac, "%09ld", ts.tv_nsec);
        size_t len = 9;
        while (len > 0 && frac[len - 1] == '0')
            len--;
        frac[len] = '\0';
        n += snprintf(out + n, (size_t)(GW_TIME_BUF - n), ".%s", frac);
    }
    snprintf(out + n, (size_t)(GW_TIME_BUF - n), "Z");
    return out;
}

char *gw_time_now(char *out)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return gw_time_rfc3339(ts, out);
}

cr_status_t gw_go_quote(cr_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    cr_status_t st = cr_buf_putc(b, '"');
    for (size_t i = 0; i < n && !st; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': st = cr_buf_puts(b, "\\\""); break;
        case '\\': st = cr_buf_puts(b, "\\\\"); break;
        case '\n': st = cr_buf_puts(b, "\\n"); break;
        case '\r': st = cr_buf_puts(b, "\\r"); break;
        case '\t': st = cr_buf_puts(b, "\\t"); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char esc[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
                st = cr_buf_append(b, esc, 4);
            } else {
                st = cr_buf_putc(b, (char)c);
            }
        }
    }
    if (!st)
        st = cr_buf_putc(b, '"');
    return st;
}

/* ---- replies ---- */

static void put_metric(gw_jw_t *w, const char *key, bool has, int64_t v)
{
    if (has && v != 0) {
        gw_jw_key(w, key);
        gw_jw_i64(w, v);
    }
}

static void put_metrics(gw_jw_t *w, const msg_done_body_t *d)
{
    put_metric(w, "total_duration", d->has_total_duration, d->total_duration);
    put_metric(w, "load_duration", d->has_load_duration, d->load_duration);
    put_metric(w, "prompt_eval_count", d->has_prompt_eval_count,
               d->prompt_eval_count);
    /* newer Ollama: the part of prompt_eval_count read from the KV cache */
    put_metric(w, "prompt_eval_cached_count", d->has_prompt_eval_cached_count,
               d->prompt_eval_cached_count);
    put_metric(w, "prompt_eval_duration", d->has_prompt_eval_duration,
               d->prompt_eval_duration);
    put_metric(w, "eval_count", d->has_eval_count, d->eval_count);
    put_metric(w, "eval_duration", d->has_eval_duration, d->eval_duration);
}

static bool nonempty(const char *s)
{
    return s && *s;
}

/* A JSON array text that holds at least one element. */
static bool nonempty_array(const char *s)
{
    if (!s)
        return false;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    if (*s != '[')
        return false;
    s++;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return *s && *s != ']';
}

static void put_raw_key(gw_jw_t *w, const char *key, const char *json)
{
    if (nonempty_array(json)) {
        gw_jw_key(w, key);
        gw_jw_raw(w, json, strlen(json));
    }
}

static void put_head(gw_jw_t *w, const char *model)
{
    char now[GW_TIME_BUF];
    gw_jw_obj(w);
    gw_jw_key(w, "model");
    gw_jw_str(w, model);
    gw_jw_key(w, "created_at");
    gw_jw_str(w, gw_time_now(now));
}

/* _debug_render_only's answer, as Ollama's: an empty, not-done response
 * (chat: an empty message with an empty role) and _debug_info. */
static cr_status_t render_debug(cr_buf_t *b, const char *model,
                                const msg_done_body_t *d, bool chat)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    put_head(&w, model);
    if (chat) {
        gw_jw_key(&w, "message");
        gw_jw_obj(&w);
        gw_jw_key(&w, "role");
        gw_jw_str(&w, "");
        gw_jw_key(&w, "content");
        gw_jw_str(&w, "");
        gw_jw_end_obj(&w);
    } else {
        gw_jw_key(&w, "response");
        gw_jw_str(&w, "");
    }
    gw_jw_key(&w, "done");
    gw_jw_bool(&w, false);
    gw_jw_key(&w, "_debug_info");
    gw_jw_obj(&w);
    gw_jw_key(&w, "rendered_template");
    gw_jw_str(&w, d->rendered_template ? d->rendered_template : "");
    if (d->image_count > 0) {
        gw_jw_key(&w, "image_count");
        gw_jw_i64(&w, d->image_count);
    }
    gw_jw_end_obj(&w);
    gw_jw_end_obj(&w);
    return w.st;
}

cr_status_t gw_render_generate(cr_buf_t *b, const char *model,
                               const gw_answer_t *a)
{
    if (a->done && a->done->has_rendered_template)
        return render_debug(b, model, a->done, false);
    gw_jw_t w;
    gw_jw_init(&w, b);
    put_head(&w, model);
    gw_jw_key(&w, "response");
    gw_jw_str(&w, a->response);
    if (nonempty(a->thinking)) {
        gw_jw_key(&w, "thinking");
        gw_jw_str(&w, a->thinking);
    }
    gw_jw_key(&w, "done");
    gw_jw_bool(&w, a->done != NULL);
    if (!a->done && nonempty(a->status)) {
        gw_jw_key(&w, "status");
        gw_jw_str(&w, a->status);
    }
    if (a->done) {
        const msg_done_body_t *d = a->done;
        if (nonempty(d->done_reason)) {
            gw_jw_key(&w, "done_reason");
            gw_jw_str(&w, d->done_reason);
        }
        if (d->has_context && d->context.n > 0) {
            gw_jw_key(&w, "context");
            gw_jw_arr(&w);
            for (size_t i = 0; i < d->context.n; i++)
                gw_jw_i64(&w, d->context.v[i]);
            gw_jw_end_arr(&w);
        }
        put_metrics(&w, d);
    }
    put_raw_key(&w, "tool_calls", a->tool_calls);
    put_raw_key(&w, "logprobs", a->logprobs);
    gw_jw_end_obj(&w);
    return w.st;
}

cr_status_t gw_render_chat(cr_buf_t *b, const char *model,
                           const gw_answer_t *a)
{
    if (a->done && a->done->has_rendered_template)
        return render_debug(b, model, a->done, true);
    gw_jw_t w;
    gw_jw_init(&w, b);
    put_head(&w, model);
    gw_jw_key(&w, "message");
    gw_jw_obj(&w);
    gw_jw_key(&w, "role");
    gw_jw_str(&w, "assistant");
    gw_jw_key(&w, "content");
    gw_jw_str(&w, a->response);
    if (nonempty(a->thinking)) {
        gw_jw_key(&w, "thinking");
        gw_jw_str(&w, a->thinking);
    }
    put_raw_key(&w, "tool_calls", a->tool_calls);
    gw_jw_end_obj(&w);
    gw_jw_key(&w, "done");
    gw_jw_bool(&w, a->done != NULL);
    if (!a->done && nonempty(a->status)) {
        gw_jw_key(&w, "status");
        gw_jw_str(&w, a->status);
    }
    if (a->done) {
        if (nonempty(a->done->done_reason)) {
            gw_jw_key(&w, "done_reason");
            gw_jw_str(&w, a->done->done_reason);
        }
        put_metrics(&w, a->done);
    }
    put_raw_key(&w, "logprobs", a->logprobs);
    gw_jw_end_obj(&w);
    return w.st;
}

cr_status_t gw_render_progress(cr_buf_t *b, const msg_progress_body_t *p)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "status");
    gw_jw_str(&w, p->status);
    if (nonempty(p->digest)) {
        gw_jw_key(&w, "digest");
        gw_jw_str(&w, p->digest);
    }
    put_metric(&w, "total", p->has_total, p->total);
    put_metric(&w, "completed", p->has_completed, p->completed);
    gw_jw_end_obj(&w);
    return w.st;
}

cr_status_t gw_render_error(cr_buf_t *b, const char *text)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "error");
    gw_jw_str(&w, text);
    gw_jw_end_obj(&w);
    return w.st;
}

#define GO_ZERO_TIME "0001-01-01T00:00:00Z"

static void put_details(gw_jw_t *w, const msg_details_t *d)
{
    static const msg_details_t none;
    if (!d)
        d = &none;
    gw_jw_key(w, "details");
    gw_jw_obj(w);
    gw_jw_key(w, "parent_model");
    gw_jw_str(w, d->parent_model);
    gw_jw_key(w, "format");
    gw_jw_str(w, d->format);
    gw_jw_key(w, "family");
    gw_jw_str(w, d->family);
    gw_jw_key(w, "families");
    if (d->has_families) {
        gw_jw_arr(w);
        for (size_t i = 0; i < d->families.n; i++)
            gw_jw_str(w, d->families.v[i]);
        gw_jw_end_arr(w);
    } else {
        gw_jw_null(w); /* Go's nil slice */
    }
    gw_jw_key(w, "parameter_size");
    gw_jw_str(w, d->parameter_size);
    gw_jw_key(w, "quantization_level");
    gw_jw_str(w, d->quantization_level);
    gw_jw_end_obj(w);
}

cr_status_t gw_render_tags(cr_buf_t *b, const msg_tags_reply_body_t *r)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "models");
    gw_jw_arr(&w);
    for (size_t i = 0; r->has_models && i < r->models.n; i++) {
        const msg_model_entry_t *e = &r->models.v[i];
        gw_jw_obj(&w);
        gw_jw_key(&w, "name");
        gw_jw_str(&w, e->name);
        gw_jw_key(&w, "model");
        gw_jw_str(&w, e->name);
        gw_jw_key(&w, "modified_at");
        gw_jw_str(&w, nonempty(e->modified_at) ? e->modified_at : GO_ZERO_TIME);
        gw_jw_key(&w, "size");
        gw_jw_i64(&w, e->size);
        gw_jw_key(&w, "digest");
        gw_jw_str(&w, e->digest);
        put_details(&w, e->has_details ? e->details : NULL);
        gw_jw_end_obj(&w);
    }
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    return w.st;
}

void gw_render_loaded_fields(gw_jw_t *w, const msg_loaded_model_t *e)
{
    gw_jw_key(w, "name");
    gw_jw_str(w, e->name);
    gw_jw_key(w, "model");
    gw_jw_str(w, e->name);
    gw_jw_key(w, "size");
    gw_jw_i64(w, e->size);
    gw_jw_key(w, "digest");
    gw_jw_str(w, e->digest);
    put_details(w, e->has_details ? e->details : NULL);
    gw_jw_key(w, "expires_at");
    gw_jw_str(w, nonempty(e->expires_at) ? e->expires_at : GO_ZERO_TIME);
    gw_jw_key(w, "size_vram");
    gw_jw_i64(w, e->size_vram);
    gw_jw_key(w, "context_length");
    gw_jw_i64(w, e->context_length);
    /* corral's additions (clients ignore unknown fields): requests
     * running on the model and waiting for it, whether it is still
     * loading, and the node it runs on. */
    if (e->has_active) {
        gw_jw_key(w, "active");
        gw_jw_i64(w, e->active);
    }
    if (e->has_queued) {
        gw_jw_key(w, "queued");
        gw_jw_i64(w, e->queued);
    }
    if (e->has_loading) {
        gw_jw_key(w, "loading");
        gw_jw_bool(w, e->loading);
    }
    /* The node it runs on; absent for the scheduler's own host. */
    if (e->has_host && nonempty(e->host)) {
        gw_jw_key(w, "host");
        gw_jw_str(w, e->host);
    }
    /* Why the plan's GPU layers run on the CPU (a missing backend
     * module, no driver): absent when they did not. */
    if (e->has_offload_error && nonempty(e->offload_error)) {
        gw_jw_key(w, "offload_error");
        gw_jw_str(w, e->offload_error);
    }
}

cr_status_t gw_render_ps(cr_buf_t *b, const msg_ps_reply_body_t *r)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "models");
    gw_jw_arr(&w);
    for (size_t i = 0; r->has_models && i < r->models.n; i++) {
        gw_jw_obj(&w);
        gw_render_loaded_fields(&w, &r->models.v[i]);
        gw_jw_end_obj(&w);
    }
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    return w.st;
}

/* Checks the embedding matrix and returns its values (borrowed; may be
 * unaligned, so read with memcpy). */
static cr_status_t check_embeddings(const msg_embeddings_body_t *e,
                                    size_t *n_out, size_t *dims_out,
                                    cr_err_t *err)
{
    if (e->n_inputs < 0 || e->dims < 0 || e->n_inputs > MSG_MAX_ARRAY ||
        e->dims > MSG_MAX_ARRAY)
        return cr_err_set(err, CR_E_PROTO,
                          "embeddings: bad shape %" PRId64 " x %" PRId64,
                          e->n_inputs, e->dims);
    size_t n = (size_t)e->n_inputs, dims = (size_t)e->dims;
    /* Both are <= 2^20, so the product of three fits in 64 bits. */
    if (e->data.len != n * dims * sizeof(float))
        return cr_err_set(err, CR_E_PROTO,
                          "embeddings: %zu bytes of data for %zu x %zu floats",
                          e->data.len, n, dims);
    for (size_t i = 0; i < n * dims; i++) {
        float v;
        memcpy(&v, e->data.data + i * sizeof v, sizeof v);
        if (!isfinite(v))
            return cr_err_set(err, CR_E_INTERNAL,
                              "embedding contains NaN or Inf values");
    }
    *n_out = n;
    *dims_out = dims;
    return CR_OK;
}

static float float_at(const msg_embeddings_body_t *e, size_t i)
{
    float v;
    memcpy(&v, e->data.data + i * sizeof v, sizeof v);
    return v;
}

cr_status_t gw_render_embed(cr_buf_t *b, const char *model,
                            const msg_embeddings_body_t *e, cr_err_t *err)
{
    size_t n, dims;
    cr_status_t st = check_embeddings(e, &n, &dims, err);
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "model");
    gw_jw_str(&w, model);
    gw_jw_key(&w, "embeddings");
    gw_jw_arr(&w);
    for (size_t i = 0; i < n && !w.st; i++) {
        gw_jw_arr(&w);
        for (size_t j = 0; j < dims; j++)
            gw_jw_f32(&w, float_at(e, i * dims + j));
        gw_jw_end_arr(&w);
    }
    gw_jw_end_arr(&w);
    put_metric(&w, "total_duration", e->has_total_duration, e->total_duration);
    put_metric(&w, "load_duration", e->has_load_duration, e->load_duration);
    put_metric(&w, "prompt_eval_count", e->has_prompt_eval_count,
               e->prompt_eval_count);
    gw_jw_end_obj(&w);
    if (w.st)
        return cr_err_set(err, w.st, "embedding reply too large");
    return CR_OK;
}

cr_status_t gw_render_embedding(cr_buf_t *b, const msg_embeddings_body_t *e,
                                cr_err_t *err)
{
    size_t n, dims;
    cr_status_t st = check_embeddings(e, &n, &dims, err);
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "embedding");
    gw_jw_arr(&w);
    for (size_t j = 0; n > 0 && j < dims; j++)
        gw_jw_f64(&w, (double)float_at(e, j));
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    if (w.st)
        return cr_err_set(err, w.st, "embedding reply too large");
    return CR_OK;
}
