/* output.c: thinking split, tool-call parsing, and chunk sending. */
#include "lib/prelude.h"
#include "services/runner/output/output.h"

#include "lib/buf.h"
#include "services/runner/output/thinking.h"
#include "services/runner/output/toolcalls.h"

#define OUT_PIECE_MAX (4u << 20) /* bytes one step may release */

struct rn_output {
    rn_thinking_t *th;
    rn_toolcalls_t *tc;
    rn_parser_t *parser; /* a built-in parser, instead of th and tc */
    cr_err_t err;        /* why a stage failed (not the sink) */
    cr_buf_t think, mid, content, calls;
    cr_buf_t logprobs; /* queued entries, comma-joined, inside [ ] */
    int n_calls;
};

rn_output_t *rn_output_new(void)
{
    rn_output_t *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    cr_buf_init(&o->think, OUT_PIECE_MAX);
    cr_buf_init(&o->mid, OUT_PIECE_MAX);
    cr_buf_init(&o->content, OUT_PIECE_MAX);
    cr_buf_init(&o->calls, OUT_PIECE_MAX);
    cr_buf_init(&o->logprobs, OUT_PIECE_MAX);
    return o;
}

static void end_parsers(rn_output_t *o)
{
    rn_thinking_destroy(&o->th);
    rn_toolcalls_destroy(&o->tc);
    rn_parser_destroy(&o->parser);
}

void rn_output_destroy(rn_output_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_output_t *o = *self_p;
    end_parsers(o);
    cr_buf_free(&o->think);
    cr_buf_free(&o->mid);
    cr_buf_free(&o->content);
    cr_buf_free(&o->calls);
    cr_buf_free(&o->logprobs);
    free(o);
    *self_p = NULL;
}

cr_status_t rn_output_begin(rn_output_t *o, const char *think_open,
                            const char *think_close, bool starts_thinking,
                            const char *tool_tag, const char *tools_json,
                            cr_err_t *err)
{
    end_parsers(o);
    o->n_calls = 0;
    cr_err_clear(&o->err);
    cr_buf_reset(&o->logprobs);
    if (think_open && *think_open && think_close && *think_close) {
        o->th = rn_thinking_new(think_open, think_close, starts_thinking, err);
        if (!o->th)
            return err && err->status ? err->status : CR_E_NOMEM;
    }
    if (tools_json && *tools_json) {
        o->tc = rn_toolcalls_new(tool_tag, tools_json, 0, err);
        if (!o->tc) {
            end_parsers(o);
            return err && err->status ? err->status : CR_E_NOMEM;
        }
    }
    return CR_OK;
}

cr_status_t rn_output_begin_parser(rn_output_t *o, const char *parser,
                                   const rn_parser_init_t *init, cr_err_t *err)
{
    end_parsers(o);
    o->n_calls = 0;
    cr_err_clear(&o->err);
    cr_buf_reset(&o->logprobs);
    o->parser = rn_parser_new(parser, init, err);
    return o->parser ? CR_OK : (err && err->status ? err->status : CR_E_NOMEM);
}

const cr_err_t *rn_output_error(const rn_output_t *o)
{
    return o->err.status ? &o->err : NULL;
}

cr_buf_t *rn_output_logprob_buf(rn_output_t *o)
{
    return cr_buf_putc(&o->logprobs, o->logprobs.len ? ',' : '[') ? NULL
                                                                   : &o->logprobs;
}

static bool send(rn_output_t *o, const rn_sink_t *sink, const cr_buf_t *resp)
{
    if (!resp->len && !o->think.len && !o->calls.len && !o->logprobs.len)
        return true;
    msg_chunk_body_t c = {0};
    if (o->logprobs.len && !cr_buf_putc(&o->logprobs, ']')) {
        c.logprobs = o->logprobs.data;
        c.has_logprobs = true;
    }
    if (resp->len) {
        c.response = resp->data;
        c.has_response = true;
    }
    if (o->think.len) {
        c.thinking = o->think.data;
        c.has_thinking = true;
    }
    if (o->calls.len) {
        c.tool_calls = o->calls.data;
        c.has_tool_calls = true;
    }
    bool more = sink->chunk(sink->ctx, &c);
    cr_buf_reset(&o->logprobs);
    return more;
}

/* Runs text through the stages into think / content / calls. */
static cr_status_t stage(rn_output_t *o, const char *text, size_t len,
                         bool final, const cr_buf_t **resp)
{
    cr_status_t st = CR_OK;
    cr_buf_reset(&o->think);
    cr_buf_reset(&o->mid);
    cr_buf_reset(&o->content);
    cr_buf_reset(&o->calls);
    const cr_buf_t *cur;
    if (o->parser) {
        const rn_parser_out_t po = {&o->content, &o->think, &o->calls};
        if (len && (st = rn_parser_push(o->parser, text, len, &po, &o->err)))
            return st;
        if (final && (st = rn_parser_finish(o->parser, &po, &o->err)))
            return st;
        o->n_calls = rn_parser_tool_calls(o->parser);
        *resp = &o->content;
        return CR_OK;
    }
    if (o->th) {
        if (len && (st = rn_thinking_push(o->th, text, len, &o->think, &o->mid)))
            return st;
        if (final && (st = rn_thinking_flush(o->th, &o->think, &o->mid)))
            return st;
    } else if (len && (st = cr_buf_append(&o->mid, text, len))) {
        return st;
    }
    cur = &o->mid;
    if (o->tc) {
        if (cur->len &&
            (st = rn_toolcalls_push(o->tc, cur->data, cur->len, &o->content,
                                    &o->calls)))
            return st;
        if (final && (st = rn_toolcalls_finish(o->tc, &o->content)))
            return st;
        if (o->calls.len)
            o->n_calls = rn_toolcalls_count(o->tc);
        cur = &o->content;
    }
    *resp = cur;
    return CR_OK;
}

bool rn_output_push(rn_output_t *o, const char *text, size_t len,
                    const rn_sink_t *sink)
{
    const cr_buf_t *resp;
    if (stage(o, text, len, false, &resp))
        return false;
    return send(o, sink, resp);
}

bool rn_output_finish(rn_output_t *o, const char *text, size_t len,
                      const rn_sink_t *sink)
{
    const cr_buf_t *resp;
    bool ok = !stage(o, text, len, true, &resp) && send(o, sink, resp);
    end_parsers(o);
    return ok;
}

int rn_output_tool_calls(const rn_output_t *o)
{
    return o->n_calls;
}
