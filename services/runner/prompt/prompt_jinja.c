/* prompt_jinja.c: a chat request through the model's Jinja chat template
 * (see prompt_jinja.h). */
#include "services/runner/prompt/prompt_jinja.h"

static const char *nz(const char *s)
{
    return s ? s : "";
}

static cr_status_t oom(cr_err_t *err)
{
    return cr_err_set(err, CR_E_NOMEM, "out of memory");
}

/* Ollama's tool_calls ([{id?, function: {index?, name, arguments}}]) as
 * Hugging Face's ([{id?, type: "function", function: {name, arguments}}]). */
static cr_status_t hf_tool_calls(const json_t *calls, size_t msg_idx, json_t **out,
                                 cr_err_t *err)
{
    if (!json_is_array(calls))
        return cr_err_set(err, CR_E_INVALID, "messages[%zu].tool_calls: expected an array",
                          msg_idx);
    json_t *arr = json_array();
    if (!arr)
        return oom(err);
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call) {
        json_t *fn = json_object_get(call, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_object(fn) || !json_is_string(name)) {
            json_decref(arr);
            return cr_err_set(err, CR_E_INVALID,
                              "messages[%zu].tool_calls[%zu].function.name: expected a string",
                              msg_idx, i);
        }
        json_t *args = json_object_get(fn, "arguments");
        json_t *hf_fn = json_pack("{s:O, s:o}", "name", name, "arguments",
                                  args ? json_incref(args) : json_object());
        json_t *hf = hf_fn ? json_pack("{s:s, s:o}", "type", "function", "function", hf_fn)
                           : NULL;
        json_t *id = json_object_get(call, "id");
        if (hf && json_is_string(id) && json_string_length(id))
            json_object_set(hf, "id", id);
        if (!hf || json_array_append_new(arr, hf)) {
            json_decref(arr);
            return oom(err);
        }
    }
    *out = arr;
    return CR_OK;
}

static cr_status_t hf_message(const rn_prompt_msg_t *m, size_t idx, json_t **out, cr_err_t *err)
{
    json_t *o = json_pack("{s:s, s:s}", "role", nz(m->role), "content", nz(m->content));
    if (!o)
        return cr_err_set(err, CR_E_INVALID, "messages[%zu]: not valid UTF-8", idx);
    int bad = 0;
    if (m->thinking && *m->thinking)
        bad |= json_object_set_new(o, "reasoning_content", json_string(m->thinking));
    if (m->tool_calls && json_array_size(m->tool_calls)) {
        json_t *calls = NULL;
        cr_status_t st = hf_tool_calls(m->tool_calls, idx, &calls, err);
        if (st) {
            json_decref(o);
            return st;
        }
        bad |= json_object_set_new(o, "tool_calls", calls);
    }
    if (m->tool_name && *m->tool_name)
        bad |= json_object_set_new(o, "name", json_string(m->tool_name));
    if (m->tool_call_id && *m->tool_call_id)
        bad |= json_object_set_new(o, "tool_call_id", json_string(m->tool_call_id));
    if (bad) {
        json_decref(o);
        return cr_err_set(err, CR_E_INVALID, "messages[%zu]: not valid UTF-8", idx);
    }
    *out = o;
    return CR_OK;
}

/* The conversation as Hugging Face messages, each with its trust. */
typedef struct convo {
    json_t **msgs;
    bool *trusted;
    const char **roles;
    size_t n;
} convo_t;

static void convo_free(convo_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        json_decref(c->msgs[i]);
    free(c->msgs);
    free(c->trusted);
    free(c->roles);
    memset(c, 0, sizeof *c);
}

static cr_status_t convo_build(const rn_prompt_jinja_t *in, convo_t *c, cr_err_t *err)
{
    memset(c, 0, sizeof *c);
    bool add_system = *nz(in->model_system) &&
                      (in->n_msgs == 0 || strcmp(nz(in->msgs[0].role), "system") != 0);
    size_t total = (add_system ? 1 : 0) + in->n_model_msgs + in->n_msgs;
    c->msgs = calloc(total + 1, sizeof *c->msgs);
    c->trusted = calloc(total + 1, sizeof *c->trusted);
    c->roles = calloc(total + 1, sizeof *c->roles);
    if (!c->msgs || !c->trusted || !c->roles)
        return oom(err);
    cr_status_t st = CR_OK;
    if (add_system) {
        rn_prompt_msg_t sys = {.role = "system", .content = in->model_system};
        st = hf_message(&sys, 0, &c->msgs[c->n], err);
        c->roles[c->n] = "system";
        c->trusted[c->n++] = true;
    }
    for (size_t i = 0; !st && i < in->n_model_msgs; i++) {
        st = hf_message(&in->model_msgs[i], i, &c->msgs[c->n], err);
        c->roles[c->n] = nz(in->model_msgs[i].role);
        c->trusted[c->n++] = true;
    }
    for (size_t i = 0; !st && i < in->n_msgs; i++) {
        st = hf_message(&in->msgs[i], i, &c->msgs[c->n], err);
        c->roles[c->n] = nz(in->msgs[i].role);
        c->trusted[c->n++] = false;
    }
    if (st && c->n && !c->msgs[c->n - 1])
        c->n--;
    return st;
}

/* The spans of a rendering: runs of trusted and untrusted bytes. */
static cr_status_t spans_from_taint(const cr_buf_t *taint, size_t from, size_t len,
                                    rn_prompt_span_t **spans, size_t *n_spans, cr_err_t *err)
{
    *spans = NULL;
    *n_spans = 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (i == 0 || taint->data[from + i] != taint->data[from + i - 1])
            n++;
    if (!n)
        return CR_OK;
    rn_prompt_span_t *v = calloc(n, sizeof *v);
    if (!v)
        return oom(err);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        bool trusted = !taint->data[from + i];
        if (i == 0 || trusted != v[k - 1].trusted) {
            v[k].offset = i;
            v[k].trusted = trusted;
            k++;
        }
        v[k - 1].len++;
    }
    *spans = v;
    *n_spans = n;
    return CR_OK;
}

static bool starts_with(const char *s, size_t n, const char *prefix)
{
    size_t p = strlen(prefix);
    return p && n >= p && memcmp(s, prefix, p) == 0;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
    size_t p = strlen(suffix);
    return p && n >= p && memcmp(s + n - p, suffix, p) == 0;
}

/* Where a continued assistant message ends in a rendering: just after the
 * last occurrence of its content, which for a request message must be
 * request bytes (untrusted), so that a template's own closing text that
 * happens to contain the content ("end" in "<|im_end|>") is never taken for
 * it. A trailing-whitespace-trimmed content is tried too (templates that
 * trim). Returns false when the content does not appear. */
static bool continue_end(const char *s, size_t len, const cr_buf_t *taint, const char *content,
                         bool untrusted, size_t *end)
{
    size_t full = strlen(content), n = full;
    while (n && strchr(" \t\r\n", content[n - 1]))
        n--;
    for (int pass = 0; pass < 2; pass++) {
        size_t want = pass == 0 ? full : n;
        if (!want || (pass == 1 && want == full))
            continue;
        for (size_t at = len >= want ? len - want + 1 : 0; at-- > 0;) {
            if (memcmp(s + at, content, want))
                continue;
            bool ok = true;
            for (size_t i = 0; untrusted && ok && i < want; i++)
                ok = taint->data[at + i] != 0;
            if (ok) {
                *end = at + want;
                return true;
            }
        }
    }
    return false;
}

/* Renders the messages picked (indexes into c) into *out. A final
 * assistant message is continued (Ollama's prefill): the rendering is cut
 * just after its content, so the template's end-of-turn text is not part
 * of the prompt. */
static cr_status_t render(const rn_prompt_jinja_t *in, const convo_t *c, const size_t *pick,
                          size_t n_pick, rn_prompt_result_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    json_t *ctx = json_object(), *msgs = json_array();
    const json_t **untrusted = calloc(n_pick + 2, sizeof *untrusted);
    size_t n_untrusted = 0;
    cr_buf_t text, taint;
    size_t max = in->opts.max_bytes ? in->opts.max_bytes : RN_PROMPT_DEFAULT_MAX_BYTES;
    cr_buf_init(&text, max);
    cr_buf_init(&taint, max);
    cr_status_t st = CR_OK;
    if (!ctx || !msgs || !untrusted) {
        json_decref(msgs);
        st = oom(err);
        goto out;
    }
    /* A final assistant message is continued; an empty one continues
     * nothing, so the turn is opened as for a new answer. */
    const char *last_role = n_pick ? c->roles[pick[n_pick - 1]] : "";
    bool prefill = !strcmp(last_role, "assistant");
    const char *prefix = prefill ? json_string_value(
                                       json_object_get(c->msgs[pick[n_pick - 1]], "content"))
                                 : NULL;
    if (prefill && !(prefix && *prefix)) {
        prefill = false;
        n_pick--;
    }
    for (size_t i = 0; i < n_pick; i++) {
        json_array_append(msgs, c->msgs[pick[i]]);
        if (!c->trusted[pick[i]])
            untrusted[n_untrusted++] = c->msgs[pick[i]];
    }
    json_object_set_new(ctx, "messages", msgs);
    if (in->tools && json_array_size(in->tools)) {
        json_object_set(ctx, "tools", (json_t *)in->tools);
        untrusted[n_untrusted++] = in->tools;
    }
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(!prefill));
    json_object_set_new(ctx, "bos_token", json_string(nz(in->bos_token)));
    json_object_set_new(ctx, "eos_token", json_string(nz(in->eos_token)));
    if (in->think.mode == RN_THINK_TRUE || in->think.mode == RN_THINK_LEVEL)
        json_object_set_new(ctx, "enable_thinking", json_true());
    else if (in->think.mode == RN_THINK_FALSE)
        json_object_set_new(ctx, "enable_thinking", json_false());
    if (in->think.mode == RN_THINK_LEVEL && in->think.level)
        json_object_set_new(ctx, "reasoning_effort", json_string(in->think.level));

    jj_render_opts_t ro = {.untrusted = untrusted, .n_untrusted = n_untrusted, .taint = &taint};
    jj_limits_default(&ro.limits);
    ro.limits.max_output_bytes = CR_MIN(ro.limits.max_output_bytes, max);
    ro.now = (time_t)in->opts.now_unix;
    if ((st = jj_render(in->tmpl, ctx, &ro, &text, err))) {
        cr_err_wrap(err, "chat template");
        goto out;
    }
    /* The tokenizer adds BOS/EOS itself: a template's own copy at the very
     * start or end would double it (llama.cpp drops it the same way). */
    size_t from = 0, len = text.len;
    const char *s = text.data ? text.data : "";
    if (prefill && !continue_end(s, len, &taint, prefix, !c->trusted[pick[n_pick - 1]], &len)) {
        st = cr_err_set(err, CR_E_INVALID, "chat template: the last (assistant) message "
                        "cannot be continued: its content does not appear in the "
                        "template's rendering");
        goto out;
    }
    if (in->strip_bos && starts_with(s, len, nz(in->bos_token)))
        from = strlen(in->bos_token);
    if (in->strip_eos && ends_with(s + from, len - from, nz(in->eos_token)))
        len -= strlen(in->eos_token);
    len -= from;
    out->text = malloc(len + 1);
    if (!out->text) {
        st = oom(err);
        goto out;
    }
    memcpy(out->text, s + from, len);
    out->text[len] = '\0';
    out->len = len;
    st = spans_from_taint(&taint, from, len, &out->spans, &out->n_spans, err);
out:
    if (st)
        rn_prompt_result_free(out);
    cr_buf_free(&text);
    cr_buf_free(&taint);
    free(untrusted);
    json_decref(ctx);
    return st;
}


/* Renders c without its first `drop` messages (system ones among them
 * stay) and says whether the prompt fits the context. */
static cr_status_t fits_after(const rn_prompt_jinja_t *in, const convo_t *c, size_t drop,
                              size_t *pick, bool *fits, cr_err_t *err)
{
    size_t k = 0;
    for (size_t j = 0; j < drop; j++)
        if (!strcmp(c->roles[j], "system"))
            pick[k++] = j;
    for (size_t j = drop; j < c->n; j++)
        pick[k++] = j;
    rn_prompt_result_t trial;
    cr_status_t st = render(in, c, pick, k, &trial, err);
    if (st)
        return st;
    int64_t ntok = 0;
    st = in->count_prompt(in->fit.count_ctx, &trial, &ntok, err);
    rn_prompt_result_free(&trial);
    if (!st)
        *fits = ntok <= in->fit.num_ctx;
    return st;
}

cr_status_t rn_prompt_jinja_chat(const rn_prompt_jinja_t *in, rn_prompt_result_t *out,
                                 cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    memset(out, 0, sizeof *out);
    if (!in || !in->tmpl)
        return cr_err_set(err, CR_E_INVALID, "prompt: no template");
    convo_t c;
    size_t *pick = NULL;
    cr_status_t st = convo_build(in, &c, err);
    if (!st && !(pick = calloc(c.n + 1, sizeof *pick)))
        st = oom(err);
    size_t curr = 0;
    /* Ollama's truncation: drop the oldest messages (keeping system ones)
     * until the prompt fits; the last message always stays. The fewest to
     * drop is bisected (the prompt only shrinks as more go): O(log n)
     * renders where Ollama's one-at-a-time loop is quadratic. */
    if (!st && in->fit.truncate && in->count_prompt && c.n > 0) {
        bool fits = false;
        st = fits_after(in, &c, 0, pick, &fits, err);
        if (!st && !fits) {
            size_t lo = 1, hi = c.n - 1;
            while (!st && lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                st = fits_after(in, &c, mid, pick, &fits, err);
                if (fits)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            curr = c.n > 1 ? lo : 0;
        }
    }
    if (!st) {
        size_t k = 0;
        for (size_t j = 0; j < curr; j++)
            if (!strcmp(c.roles[j], "system"))
                pick[k++] = j;
        for (size_t j = curr; j < c.n; j++)
            pick[k++] = j;
        st = render(in, &c, pick, k, out, err);
        out->msgs_dropped = curr;
    }
    free(pick);
    convo_free(&c);
    if (st)
        rn_prompt_result_free(out);
    return st;
}
