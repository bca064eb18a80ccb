/* run.c: `corral run MODEL [PROMPT...]`.
 *
 * One-shot: POST /api/generate streaming, printing the response text as it
 * arrives; stdin that is not a terminal is put before the prompt. With no
 * prompt on a terminal it preloads the model and opens the REPL (repl.c),
 * which keeps the conversation and talks to /api/chat. A model the server
 * does not have is pulled first, as `ollama run` does. The request and
 * stream handling here is shared with the REPL through run.h. */
#include "lib/prelude.h"
#include "cli/run.h"
#include "cli/format.h"
#include "cli/wrap.h"
#include "cli/images.h"
#include "lib/buf.h"
#include "lib/duration.h"
#include "lib/gotext.h"

#include <ctype.h>
#include <unistd.h>

#define MAX_STDIN_BYTES (64u << 20)

void cli_run_opts_free(cli_run_opts_t *o)
{
    json_decref(o->options);
    json_decref(o->messages);
    json_decref(o->format);
    free(o->system);
    free(o->model);
    memset(o, 0, sizeof *o);
}

/* keep_alive as the API takes it: a number of seconds stays a number. */
static json_t *keep_alive_json(const char *v)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (*v && !*end && !errno)
        return d > -9e15 && d < 9e15 && d == (double)(json_int_t)d
                   ? json_integer((json_int_t)d)
                   : json_real(d);
    return json_string(v);
}

static json_t *think_json(const char *v)
{
    if (!strcmp(v, "true"))
        return json_true();
    if (!strcmp(v, "false"))
        return json_false();
    return json_string(v);
}

/* Sets the fields every request of a session shares. */
static int put_common(json_t *req, const cli_run_opts_t *o)
{
    int rc = 0;
    if (o->format)
        rc |= json_object_set(req, "format", o->format);
    if (o->keepalive)
        rc |= json_object_set_new(req, "keep_alive", keep_alive_json(o->keepalive));
    if (o->think)
        rc |= json_object_set_new(req, "think", think_json(o->think));
    if (o->options && json_object_size(o->options))
        rc |= json_object_set(req, "options", o->options);
    return rc;
}

/* ---- streaming output ---- */

typedef struct stream {
    const cli_run_opts_t *o;
    cli_wrap_t wrap;    /* at the terminal's width unless nowordwrap */
    bool chat;          /* text under message.content, else response */
    cr_buf_t content;   /* the answer so far (chat history) */
    bool thinking;      /* inside "Thinking..." */
    bool ends_newline;  /* the last printed byte was '\n' */
    bool printed;
    json_t *final;      /* the done object (owned) */
} stream_t;

static bool on_chunk(void *ctx, json_t *obj)
{
    stream_t *s = ctx;
    const json_t *src = s->chat ? json_object_get(obj, "message") : obj;
    const char *text = cli_jstr(src, s->chat ? "content" : "response");
    const char *think = cli_jstr(src, "thinking");
    if (think && *think && !s->o->hide_thinking) {
        if (!s->thinking) {
            fputs("Thinking...\n", stdout);
            s->thinking = true;
        }
        cli_wrap_write(&s->wrap, think, strlen(think), stdout);
        s->ends_newline = think[strlen(think) - 1] == '\n';
        s->printed = true;
    }
    if (text && *text) {
        if (s->thinking) {
            const char *end = s->ends_newline ? "...done thinking.\n\n"
                                              : "\n...done thinking.\n\n";
            cli_wrap_write(&s->wrap, end, strlen(end), stdout);
            s->thinking = false;
        }
        cli_wrap_write(&s->wrap, text, strlen(text), stdout);
        s->ends_newline = text[strlen(text) - 1] == '\n';
        s->printed = true;
        cr_buf_puts(&s->content, text); /* a history over the cap is just cut */
    }
    fflush(stdout);
    if (json_is_true(json_object_get(obj, "done"))) {
        json_decref(s->final);
        s->final = json_incref(obj);
    }
    return true;
}

/* Ends the printed answer: a newline if needed, plus `blank` empty lines. */
static void finish_output(stream_t *s, int blank)
{
    if (s->printed && !s->ends_newline)
        fputc('\n', stdout);
    for (int i = 0; i < blank && s->printed; i++)
        fputc('\n', stdout);
    fflush(stdout);
}

static void print_verbose(const stream_t *s)
{
    if (s->o->verbose && s->final)
        cli_print_summary(s->final, stderr);
}

cr_status_t cli_run_generate(cli_ctx_t *ctx, const cli_run_opts_t *o, const char *prompt,
                             cr_err_t *err)
{
    cli_http_t *h;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = json_pack("{s:s, s:s, s:b}", "model", o->model, "prompt", prompt, "stream",
                            1);
    if (req && json_array_size(o->images) && json_object_set(req, "images", o->images)) {
        json_decref(req);
        req = NULL;
    }
    if (!req || put_common(req, o)) {
        json_decref(req);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    stream_t s = {.o = o};
    cli_wrap_init(&s.wrap, !o->nowordwrap && ctx->stdout_tty, cli_wrap_term_width(1));
    cr_buf_init(&s.content, 1);
    cli_interrupted = 0;
    st = cli_http_json(h, "POST", "/api/generate", req, on_chunk, &s, NULL, NULL, err);
    finish_output(&s, 0);
    if (st == CR_E_CANCELED)
        st = CR_OK; /* Ctrl-C ends the answer, not with an error */
    if (!st)
        print_verbose(&s);
    json_decref(s.final);
    cr_buf_free(&s.content);
    json_decref(req);
    return st;
}

cr_status_t cli_run_chat(cli_ctx_t *ctx, cli_run_opts_t *o, cr_err_t *err)
{
    cli_http_t *h;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *msgs = json_array();
    if (o->system && *o->system)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content",
                                              o->system));
    json_array_extend(msgs, o->messages);
    json_t *req = json_pack("{s:s, s:o, s:b}", "model", o->model, "messages", msgs, "stream",
                            1);
    if (!req || put_common(req, o)) {
        json_decref(req);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    stream_t s = {.o = o, .chat = true};
    cli_wrap_init(&s.wrap, !o->nowordwrap && ctx->stdout_tty, cli_wrap_term_width(1));
    cr_buf_init(&s.content, 64u << 20);
    cli_interrupted = 0;
    st = cli_http_json(h, "POST", "/api/chat", req, on_chunk, &s, NULL, NULL, err);
    finish_output(&s, 1);
    if (st == CR_E_CANCELED) {
        st = CR_OK; /* the answer is dropped; the question stays */
    } else if (!st) {
        print_verbose(&s);
        json_array_append_new(o->messages,
                              json_pack("{s:s, s:s}", "role", "assistant", "content",
                                        s.content.data ? s.content.data : ""));
    }
    json_decref(s.final);
    cr_buf_free(&s.content);
    json_decref(req);
    return st;
}

cr_status_t cli_run_preload(cli_ctx_t *ctx, const cli_run_opts_t *o, cr_err_t *err)
{
    cli_http_t *h;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = json_pack("{s:s, s:b}", "model", o->model, "stream", 0);
    if (!req)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (o->keepalive)
        json_object_set_new(req, "keep_alive", keep_alive_json(o->keepalive));
    json_t *resp = NULL;
    st = cli_http_json(h, "POST", "/api/generate", req, NULL, NULL, &resp, NULL, err);
    json_decref(resp);
    json_decref(req);
    return st;
}

/* Shows the model, pulling it first when the server does not have it. */
cr_status_t cli_run_ensure_model(cli_ctx_t *ctx, const char *model, bool insecure,
                                 json_t **show, cr_err_t *err)
{
    cr_status_t st = cli_show_model(ctx, model, show, err);
    if (st != CR_E_NOT_FOUND)
        return st;
    cr_err_t not_found = *err, perr;
    if (cli_pull_push(ctx, "pull", model, insecure, &perr)) {
        /* A pull the server cannot do says less than "not found". */
        *err = perr.status == CR_E_NOT_FOUND ? not_found : perr;
        return err->status;
    }
    return cli_show_model(ctx, model, show, err);
}

/* ---- embedding models ---- */

cr_status_t cli_run_embed(cli_ctx_t *ctx, const cli_run_opts_t *o, const char *prompt,
                          cr_err_t *err)
{
    cli_http_t *h;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = json_pack("{s:s, s:s}", "model", o->model, "input", prompt);
    int rc = req ? 0 : -1;
    if (!rc && o->keepalive)
        rc |= json_object_set_new(req, "keep_alive", keep_alive_json(o->keepalive));
    if (!rc && o->has_truncate)
        rc |= json_object_set_new(req, "truncate", json_boolean(o->truncate));
    if (!rc && o->dimensions > 0)
        rc |= json_object_set_new(req, "dimensions", json_integer(o->dimensions));
    if (rc) {
        json_decref(req);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    json_t *resp = NULL;
    st = cli_http_json(h, "POST", "/api/embed", req, NULL, NULL, &resp, NULL, err);
    json_decref(req);
    if (st)
        return st;
    json_t *vec = json_array_get(json_object_get(resp, "embeddings"), 0);
    if (!json_is_array(vec)) {
        json_decref(resp);
        return cr_err_set(err, CR_E_PROTO, "no embeddings returned");
    }
    /* The gateway wrote float32s in their shortest form; read back as
     * doubles they give the same digits again. */
    fputc('[', stdout);
    for (size_t i = 0; i < json_array_size(vec); i++) {
        char num[CR_FLOAT_BUF];
        cr_float_format(json_number_value(json_array_get(vec, i)), 32, CR_FLOAT_JSON, num,
                        sizeof num);
        printf("%s%s", i ? "," : "", num);
    }
    fputs("]\n", stdout);
    fflush(stdout);
    json_decref(resp);
    return CR_OK;
}

/* True when the show reply lists capability cap. */
static bool has_capability(const json_t *show, const char *cap)
{
    json_t *caps = json_object_get(show, "capabilities");
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        if (c && !strcmp(c, cap))
            return true;
    }
    return false;
}

/* ---- flags ---- */

static cr_status_t parse_flags(int argc, char **argv, cli_run_opts_t *o, int *first_prompt,
                               cr_err_t *err)
{
    int i = 1;
    bool only_args = false;
    *first_prompt = argc;
    for (; i < argc; i++) {
        char *a = argv[i];
        const char *val = NULL;
        if (!only_args && !strcmp(a, "--")) {
            only_args = true;
            continue;
        }
        if (only_args || a[0] != '-' || !a[1]) {
            if (!o->model) {
                if (!(o->model = strdup(a)))
                    return cr_err_set(err, CR_E_NOMEM, "out of memory");
                continue;
            }
            if (*first_prompt == argc)
                *first_prompt = i;
            /* Flags after the prompt words still count, as cobra allows. */
            continue;
        }
        int flag_at = i;
        char name[64];
        const char *eq = strchr(a, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
        if (eq)
            val = eq + 1;
        bool takes_value = !strcmp(name, "--format") || !strcmp(name, "--keepalive") ||
                           !strcmp(name, "--dimensions");
        if (takes_value && !val) {
            if (i + 1 >= argc)
                return cr_err_set(err, CR_E_INVALID, "flag needs an argument: %s", name);
            val = argv[++i];
            argv[i] = (char *)""; /* consumed: not a prompt word */
        }
        if (!strcmp(name, "--format")) {
            json_decref(o->format);
            o->format = NULL;
            if (*val == '{') {
                json_error_t jerr;
                if (!(o->format = json_loads(val, 0, &jerr)))
                    return cr_err_set(err, CR_E_INVALID, "--format: invalid JSON schema: %s",
                                      jerr.text);
            } else if (*val) {
                o->format = json_string(val);
            }
        } else if (!strcmp(name, "--keepalive")) {
            int64_t ms;
            cr_err_t derr;
            if (cr_duration_parse(val, &ms, &derr))
                return cr_err_set(err, CR_E_INVALID, "--keepalive: %s", derr.msg);
            o->keepalive = val;
        } else if (!strcmp(name, "--verbose")) {
            o->verbose = !val || strcmp(val, "false");
        } else if (!strcmp(name, "--think")) {
            const char *v = val ? val : "true";
            static const char *const ok[] = {"true", "false", "low", "medium", "high", "max"};
            bool good = false;
            for (size_t k = 0; k < CR_ARRAY_LEN(ok); k++)
                good |= !strcmp(v, ok[k]);
            if (!good)
                return cr_err_set(err, CR_E_INVALID,
                                  "invalid value \"%s\" for --think: use true, false, low, "
                                  "medium, high or max",
                                  v);
            o->think = v;
        } else if (!strcmp(name, "--hidethinking")) {
            o->hide_thinking = true;
        } else if (!strcmp(name, "--nowordwrap")) {
            o->nowordwrap = !val || strcmp(val, "false");
        } else if (!strcmp(name, "--insecure")) {
            o->insecure = !val || strcmp(val, "false");
        } else if (!strcmp(name, "--truncate")) {
            o->has_truncate = true;
            o->truncate = !val || strcmp(val, "false");
        } else if (!strcmp(name, "--dimensions")) {
            char *end;
            errno = 0;
            long long d = strtoll(val, &end, 10);
            if (!*val || *end || errno || d < 0 || d > INT32_MAX)
                return cr_err_set(err, CR_E_INVALID,
                                  "invalid argument \"%s\" for \"--dimensions\" flag", val);
            o->dimensions = d;
        } else {
            return cr_err_set(err, CR_E_INVALID, "unknown flag: %s", a);
        }
        argv[flag_at] = (char *)""; /* a flag is not a prompt word */
    }
    if (!o->model)
        return cr_err_set(err, CR_E_INVALID, "requires at least 1 arg(s), only received 0");
    return CR_OK;
}

/* Reads all of stdin (bounded). */
static cr_status_t read_stdin(cr_buf_t *b, cr_err_t *err)
{
    char tmp[65536];
    for (;;) {
        ssize_t n = read(0, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return cr_err_set(err, CR_E_IO, "read stdin: %s", strerror(errno));
        if (n == 0)
            return CR_OK;
        if (cr_buf_append(b, tmp, (size_t)n))
            return cr_err_set(err, CR_E_TOO_LARGE, "stdin is larger than %u bytes",
                              MAX_STDIN_BYTES);
    }
}

cr_status_t cli_cmd_run(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("Run a model\n\nUsage:\n  corral run MODEL [PROMPT] [flags]\n\n"
               "Flags:\n"
               "      --format string      Response format (e.g. json)\n"
               "      --dimensions int     Truncate output embeddings to specified "
               "dimension (embedding models only)\n"
               "      --hidethinking       Hide thinking output (if provided)\n"
               "      --insecure           Use an insecure registry\n"
               "      --keepalive string   Duration to keep a model loaded (e.g. 5m)\n"
               "      --nowordwrap         Don't wrap words to the next line automatically\n"
               "      --think[=string]     Enable thinking mode: true/false or "
               "low/medium/high/max\n"
               "      --truncate           Truncate inputs that exceed the context length "
               "(embedding models only)\n"
               "      --verbose            Show timings for response\n\n"
               "Environment Variables:\n"
               "      OLLAMA_HOST          IP Address for the server (default "
               "127.0.0.1:11434)\n"
               "      OLLAMA_NOHISTORY     Do not preserve readline history\n");
        return CR_OK;
    }
    cli_run_opts_t o = {0};
    int first_prompt;
    cr_buf_t prompt;
    cr_buf_init(&prompt, MAX_STDIN_BYTES + (1u << 20));
    cr_status_t st = parse_flags(argc, argv, &o, &first_prompt, err);
    if (st)
        goto out;

    bool interactive = true;
    if (!ctx->stdin_tty) {
        if ((st = read_stdin(&prompt, err)))
            goto out;
        interactive = false;
    }
    for (int i = first_prompt; i < argc; i++) {
        if (!argv[i][0])
            continue; /* a consumed flag */
        if (prompt.len && (st = cr_buf_putc(&prompt, ' ')))
            break;
        if ((st = cr_buf_puts(&prompt, argv[i])))
            break;
        interactive = false;
    }
    if (st) {
        st = cr_err_set(err, st, "prompt too large");
        goto out;
    }
    if (!ctx->stdout_tty)
        interactive = false;

    json_t *show = NULL;
    if ((st = cli_run_ensure_model(ctx, o.model, o.insecure, &show, err)))
        goto out;
    if (has_capability(show, "embedding")) {
        /* Ollama prints the vector of the prompt; there is no REPL. */
        if (!prompt.len)
            st = cr_err_set(err, CR_E_INVALID,
                            "embedding models require input text. Usage: corral run %s "
                            "\"your text here\"",
                            o.model);
        else
            st = cli_run_embed(ctx, &o, prompt.data, err);
    } else if (interactive) {
        st = cli_repl(ctx, &o, show, err);
    } else if (cli_images_model_sees(show)) {
        /* image files named in the prompt go as images, as ollama run */
        json_t *images = json_array();
        char *text = NULL;
        st = images ? cli_images_extract(prompt.data ? prompt.data : "", &text, images,
                                         stdout, err)
                    : cr_err_set(err, CR_E_NOMEM, "out of memory");
        o.images = images;
        if (!st)
            st = cli_run_generate(ctx, &o, text, err);
        o.images = NULL;
        free(text);
        json_decref(images);
    } else {
        st = cli_run_generate(ctx, &o, prompt.data ? prompt.data : "", err);
    }
    json_decref(show);
out:
    cr_buf_free(&prompt);
    cli_run_opts_free(&o);
    return st;
}
