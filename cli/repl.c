/* repl.c: the interactive `>>> ` loop of `corral run` (libedit).
 *
 * Keeps the conversation (messages) and sends it to /api/chat on every
 * turn. Commands: /bye, /exit, /clear, /set parameter|system|verbose|quiet|
 * format|noformat|think|nothink|history|nohistory|wordwrap|nowordwrap,
 * /show info|license|modelfile|parameters|system|template, /load, /save,
 * /list, /? (and /help). A line starting with \"\"\" opens a multi-line
 * block that ends at a line ending with \"\"\". Ctrl-D exits; Ctrl-C at the
 * prompt says how to exit, during an answer stops it. History lives in
 * ~/.corral/history unless OLLAMA_NOHISTORY is set. An empty `>>> ` line
 * shows Ollama's grey placeholder, gone at the first key. */
#include "lib/prelude.h"
#include "cli/run.h"
#include "cli/images.h"
#include "cli/modelfile.h"
#include "lib/buf.h"
#include "lib/env.h"
#include "lib/gotext.h"

#include <editline/readline.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_INPUT_BYTES (16u << 20)

#define PLACEHOLDER "Send a message (/? for help)"
#define PLACEHOLDER_BLOCK "Use \"\"\" to end multi-line input"
#define COLOR_GREY "\x1b[38;5;245m"
#define COLOR_DEFAULT "\x1b[0m"

/* The placeholder waits for the first key of a `>>> ` line (inside a
 * \"\"\" block: of a `... ` line). libedit asks rl_getc_function for each key
 * once the prompt is drawn, so the text is written there (cursor moved back
 * over it) and erased when a key comes. The only global of the REPL:
 * libedit's hook takes no context. NULL: none pending. */
static const char *placeholder_pending;

/* One character for libedit: a UTF-8 sequence read byte by byte and
 * returned as its code point (libedit stores it as a wide character). */
static int repl_getc(FILE *f)
{
    if (placeholder_pending) {
        printf(COLOR_GREY "%s" COLOR_DEFAULT "\x1b[%zuD", placeholder_pending,
               strlen(placeholder_pending));
        fflush(stdout);
    }
    unsigned char b[4];
    ssize_t n;
    do
        n = read(fileno(f), b, 1);
    while (n < 0 && errno == EINTR && !cli_interrupted);
    if (placeholder_pending) {
        fputs("\x1b[K", stdout);
        fflush(stdout);
        placeholder_pending = NULL;
    }
    if (n <= 0)
        return EOF;
    size_t len = b[0] >= 0xF0 && b[0] < 0xF8 ? 4 : b[0] >= 0xE0 ? 3 : b[0] >= 0xC0 ? 2 : 1;
    for (size_t i = 1; i < len; i++)
        if (read(fileno(f), b + i, 1) != 1 || (b[i] & 0xC0) != 0x80)
            return 0xFFFD;
    if (len == 1)
        return b[0];
    uint32_t cp = b[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++)
        cp = cp << 6 | (b[i] & 0x3F);
    return (int)cp;
}

typedef struct repl {
    cli_ctx_t *ctx;
    cli_run_opts_t *o;
    json_t *show;       /* owned: the current model's /api/show reply */
    char history[4096]; /* history file, "" when disabled */
    bool use_history;
} repl_t;

static void help_main(void)
{
    printf("Available Commands:\n"
           "  /set            Set session variables\n"
           "  /show           Show model information\n"
           "  /load <model>   Load a session or model\n"
           "  /save <model>   Save your current session\n"
           "  /clear          Clear session context\n"
           "  /list           List models\n"
           "  /bye            Exit\n"
           "  /?, /help       Help for a command\n"
           "  /? shortcuts    Help for keyboard shortcuts\n\n"
           "Use \"\"\" to begin a multi-line message.\n\n");
}

static void help_set(void)
{
    printf("Available Commands:\n"
           "  /set parameter ...     Set a parameter\n"
           "  /set system <string>   Set system message\n"
           "  /set history           Enable history\n"
           "  /set nohistory         Disable history\n"
           "  /set wordwrap          Enable wordwrap\n"
           "  /set nowordwrap        Disable wordwrap\n"
           "  /set format json       Enable JSON mode\n"
           "  /set noformat          Disable formatting\n"
           "  /set verbose           Show LLM stats\n"
           "  /set quiet             Disable LLM stats\n"
           "  /set think [level]     Enable thinking\n"
           "  /set nothink           Disable thinking\n\n");
}

static void help_parameters(void)
{
    printf("Available Parameters:\n"
           "  /set parameter seed <int>             Random number seed\n"
           "  /set parameter num_predict <int>      Max number of tokens to predict\n"
           "  /set parameter top_k <int>            Pick from top k num of tokens\n"
           "  /set parameter top_p <float>          Pick token based on sum of "
           "probabilities\n"
           "  /set parameter min_p <float>          Pick token based on top token "
           "probability * min_p\n"
           "  /set parameter num_ctx <int>          Set the context size\n"
           "  /set parameter temperature <float>    Set creativity level\n"
           "  /set parameter repeat_penalty <float> How strongly to penalize repetitions\n"
           "  /set parameter repeat_last_n <int>    Set how far back to look for "
           "repetitions\n"
           "  /set parameter num_gpu <int>          The number of layers to send to the GPU\n"
           "  /set parameter stop <string> <string> ...   Set the stop parameters\n\n");
}

static void help_show(void)
{
    printf("Available Commands:\n"
           "  /show info         Show details for this model\n"
           "  /show license      Show model license\n"
           "  /show modelfile    Show Modelfile for this model\n"
           "  /show parameters   Show parameters for this model\n"
           "  /show system       Show system message\n"
           "  /show template     Show prompt template\n\n");
}

static void help_shortcuts(void)
{
    printf("Available keyboard shortcuts:\n"
           "  Ctrl + a            Move to the beginning of the line (Home)\n"
           "  Ctrl + e            Move to the end of the line (End)\n"
           "  Ctrl + k            Delete the sentence after the cursor\n"
           "  Ctrl + u            Delete the sentence before the cursor\n"
           "  Ctrl + w            Delete the word before the cursor\n\n"
           "  Ctrl + l            Clear the screen\n"
           "  Ctrl + c            Stop the model from responding\n"
           "  Ctrl + d            Exit corral (/bye)\n\n");
}

/* Splits line into at most cap blank-separated words (in place). */
static int split_words(char *line, char **words, int cap)
{
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(line, " \t", &save); w && n < cap; w = strtok_r(NULL, " \t", &save))
        words[n++] = w;
    return n;
}

/* The text after the first `skip` words of line (the words keep their
 * spacing), or "" when there is none. */
static const char *after_words(const char *line, int skip)
{
    const char *p = line;
    for (int i = 0; i < skip; i++) {
        while (*p == ' ' || *p == '\t')
            p++;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static void set_parameter(repl_t *r, char **w, int n)
{
    if (n < 4) {
        help_parameters();
        return;
    }
    const char *name = w[2];
    json_t *v = NULL;
    cr_err_t err;
    if (cli_param_type(name) == CLI_PARAM_STRINGS) {
        v = json_array();
        for (int i = 3; i < n; i++)
            json_array_append_new(v, json_string(w[i]));
    } else if (cli_param_value(name, w[3], &v, &err)) {
        printf("Couldn't set parameter: \"%s\"\n\n", err.msg);
        return;
    }
    if (!r->o->options)
        r->o->options = json_object();
    json_object_set_new(r->o->options, name, v);
    printf("Set parameter '%s' to '", name);
    for (int i = 3; i < n; i++)
        printf("%s%s", i > 3 ? ", " : "", w[i]);
    printf("'\n");
}

static void cmd_set(repl_t *r, char *line, const char *raw)
{
    char *w[64];
    int n = split_words(line, w, 64);
    cli_run_opts_t *o = r->o;
    if (n < 2) {
        help_set();
        return;
    }
    const char *what = w[1];
    if (!strcmp(what, "parameter")) {
        set_parameter(r, w, n);
    } else if (!strcmp(what, "system")) {
        const char *text = after_words(raw, 2);
        free(o->system);
        o->system = strdup(text);
        printf("Set system message.\n");
    } else if (!strcmp(what, "verbose")) {
        o->verbose = true;
        printf("Set 'verbose' mode.\n");
    } else if (!strcmp(what, "quiet")) {
        o->verbose = false;
        printf("Set 'quiet' mode.\n");
    } else if (!strcmp(what, "format")) {
        if (n < 3 || strcmp(w[2], "json")) {
            printf("Invalid or missing format. For 'json' mode use '/set format json'\n");
            return;
        }
        json_decref(o->format);
        o->format = json_string("json");
        printf("Set format to 'json' mode.\n");
    } else if (!strcmp(what, "noformat")) {
        json_decref(o->format);
        o->format = NULL;
        printf("Disabled format.\n");
    } else if (!strcmp(what, "think")) {
        static const char *const levels[] = {"true", "low", "medium", "high", "max"};
        const char *lvl = n >= 3 ? w[2] : "true";
        o->think = NULL;
        for (size_t i = 0; i < CR_ARRAY_LEN(levels); i++)
            if (!strcmp(lvl, levels[i]))
                o->think = levels[i];
        if (!o->think) {
            printf("Invalid think level '%s': use low, medium, high or max\n", lvl);
            return;
        }
        printf("Set 'think' mode.\n");
    } else if (!strcmp(what, "nothink")) {
        o->think = "false";
        printf("Set 'nothink' mode.\n");
    } else if (!strcmp(what, "history")) {
        r->use_history = r->history[0] != '\0';
        printf("Set 'history' mode.\n");
    } else if (!strcmp(what, "nohistory")) {
        r->use_history = false;
        printf("Set 'nohistory' mode.\n");
    } else if (!strcmp(what, "wordwrap") || !strcmp(what, "nowordwrap")) {
        o->nowordwrap = what[0] == 'n';
        printf("Set '%s' mode.\n", what);
    } else {
        printf("Unknown command '/set %s'. Type /? for help\n", what);
    }
}

static void print_field(const json_t *show, const char *key, const char *none)
{
    const char *v = cli_jstr(show, key);
    if (v && *v)
        printf("%s\n", v);
    else
        printf("%s\n", none);
}

/* A value as Go's %v prints an option: strings bare, floats as float32s
 * in 'g' form, lists as [a b]. */
static void go_value(const json_t *v, cr_buf_t *b)
{
    char num[CR_FLOAT_BUF];
    if (json_is_string(v)) {
        cr_buf_puts(b, json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        cr_buf_puts(b, num);
    } else if (json_is_real(v)) {
        cr_float_format(json_real_value(v), 32, CR_FLOAT_G, num, sizeof num);
        cr_buf_puts(b, num);
    } else if (json_is_boolean(v)) {
        cr_buf_puts(b, json_is_true(v) ? "true" : "false");
    } else if (json_is_array(v)) {
        cr_buf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                cr_buf_putc(b, ' ');
            go_value(json_array_get(v, i), b);
        }
        cr_buf_putc(b, ']');
    }
}

static void cmd_show(repl_t *r, char *line)
{
    char *w[8];
    int n = split_words(line, w, 8);
    if (n < 2) {
        help_show();
        return;
    }
    const char *what = w[1];
    const json_t *show = r->show;
    if (!strcmp(what, "info")) {
        cli_print_show_info(show, false, stdout);
    } else if (!strcmp(what, "license")) {
        print_field(show, "license", "No license was specified for this model.");
    } else if (!strcmp(what, "modelfile")) {
        print_field(show, "modelfile", "");
    } else if (!strcmp(what, "parameters")) {
        /* Ollama's layout: each line indented two spaces, user values as
         * Go's %v prints them. */
        const char *p = cli_jstr(show, "parameters");
        printf("Model defined parameters:\n");
        if (p && *p) {
            for (const char *l = p; *l;) {
                const char *e = strchr(l, '\n');
                size_t len = e ? (size_t)(e - l) : strlen(l);
                printf("  %.*s\n", (int)len, l);
                l += len + (e ? 1 : 0);
            }
        } else {
            printf("  No additional parameters were specified for this model.\n");
        }
        printf("\n");
        if (r->o->options && json_object_size(r->o->options)) {
            printf("User defined parameters:\n");
            const char *k;
            json_t *v;
            json_object_foreach(r->o->options, k, v) {
                cr_buf_t b;
                cr_buf_init(&b, 64 * 1024);
                go_value(v, &b);
                printf("  %-30s %s\n", k, b.data ? b.data : "");
                cr_buf_free(&b);
            }
            printf("\n");
        }
    } else if (!strcmp(what, "system")) {
        const char *sys = r->o->system && *r->o->system ? r->o->system : cli_jstr(show, "system");
        if (sys && *sys)
            printf("%s\n\n", sys);
        else
            printf("No system message was specified for this model.\n");
    } else if (!strcmp(what, "template")) {
        print_field(show, "template", "No prompt template was specified for this model.");
    } else {
        printf("Unknown command '/show %s'. Type /? for help\n", what);
    }
}

static void cmd_load(repl_t *r, const char *model)
{
    cr_err_t err;
    json_t *show = NULL;
    printf("Loading model '%s'\n", model);
    char *copy = strdup(model);
    if (!copy)
        return;
    if (cli_run_ensure_model(r->ctx, model, r->o->insecure, &show, &err)) {
        printf("Error: %s\n", err.msg);
        free(copy);
        return;
    }
    free(r->o->model);
    r->o->model = copy;
    json_decref(r->show);
    r->show = show;
    json_array_clear(r->o->messages);
    if (cli_run_preload(r->ctx, r->o, &err))
        printf("Error: %s\n", err.msg);
}

static bool quiet_line(void *ctx, json_t *obj)
{
    CR_UNUSED(ctx);
    CR_UNUSED(obj);
    return true;
}

static void cmd_save(repl_t *r, const char *name)
{
    cli_http_t *h;
    cr_err_t err;
    if (cli_ctx_http(r->ctx, &h, &err)) {
        printf("Error: %s\n", err.msg);
        return;
    }
    json_t *req = json_pack("{s:s, s:s, s:b}", "model", name, "from", r->o->model, "stream", 1);
    if (!req)
        return;
    if (r->o->system)
        json_object_set_new(req, "system", json_string(r->o->system));
    if (r->o->options && json_object_size(r->o->options))
        json_object_set(req, "parameters", r->o->options);
    if (json_array_size(r->o->messages))
        json_object_set(req, "messages", r->o->messages);
    if (cli_http_json(h, "POST", "/api/create", req, quiet_line, NULL, NULL, NULL, &err))
        printf("error: %s\n", err.msg);
    else
        printf("Created new model '%s'\n", name);
    json_decref(req);
}

/* Reads the rest of a \"\"\" block into b; false on EOF/interrupt. */
static bool read_block(cr_buf_t *b, const char *first)
{
    size_t n = strlen(first);
    if (n >= 3 && !strcmp(first + n - 3, "\"\"\"")) {
        cr_buf_append(b, first, n - 3);
        return true;
    }
    cr_buf_puts(b, first);
    for (;;) {
        cli_interrupted = 0;
        placeholder_pending = PLACEHOLDER_BLOCK;
        char *line = readline("... ");
        placeholder_pending = NULL;
        if (!line)
            return false;
        size_t l = strlen(line);
        bool end = l >= 3 && !strcmp(line + l - 3, "\"\"\"");
        cr_buf_putc(b, '\n');
        cr_buf_append(b, line, end ? l - 3 : l);
        free(line);
        if (end)
            return true;
    }
}

/* Gathers one input: a line, or a \"\"\" block. Returns NULL at EOF;
 * *interrupted set when Ctrl-C ended the prompt. Caller frees. */
static char *read_input(bool *interrupted)
{
    *interrupted = false;
    cli_interrupted = 0;
    placeholder_pending = PLACEHOLDER;
    char *line = readline(">>> ");
    placeholder_pending = NULL;
    if (!line) {
        *interrupted = cli_interrupted != 0;
        return NULL;
    }
    const char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    /* `"""...` or `/set system """...`: a block. */
    const char *q = NULL;
    if (!strncmp(p, "\"\"\"", 3))
        q = p;
    else if (!strncmp(p, "/set system", 11))
        q = strstr(p, "\"\"\"");
    if (!q)
        return line;
    cr_buf_t b;
    cr_buf_init(&b, MAX_INPUT_BYTES);
    cr_buf_append(&b, p, (size_t)(q - p)); /* "/set system " or nothing */
    bool ok = read_block(&b, q + 3);
    free(line);
    if (!ok) {
        *interrupted = cli_interrupted != 0;
        cr_buf_free(&b);
        return *interrupted ? strdup("") : NULL;
    }
    return cr_buf_steal(&b);
}

static void history_init(repl_t *r)
{
    r->use_history = false;
    r->history[0] = '\0';
    if (cr_env_bool("NOHISTORY", false))
        return;
    const char *home = getenv("HOME");
    if (!home || !*home)
        return;
    char dir[3072];
    int n = snprintf(dir, sizeof dir, "%s/.corral", home);
    if (n < 0 || (size_t)n >= sizeof dir)
        return;
    mkdir(dir, 0755);
    snprintf(r->history, sizeof r->history, "%s/history", dir);
    stifle_history(100);
    read_history(r->history);
    r->use_history = true;
}

/* Returns true to leave the loop. */
static bool handle(repl_t *r, char *input, cr_status_t *st, cr_err_t *err)
{
    char *p = input;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return false;
    if (r->use_history)
        add_history(p);
    if (p[0] != '/') {
        json_t *msg = json_pack("{s:s, s:s}", "role", "user", "content", p);
        if (msg && cli_images_model_sees(r->show)) {
            /* image files named in the line go as the message's images */
            json_t *images = json_array();
            char *text = NULL;
            cr_status_t ist = images ? cli_images_extract(p, &text, images, stdout, err)
                                     : CR_E_NOMEM;
            if (ist) {
                printf("Error: %s\n\n", ist == CR_E_NOMEM ? "out of memory" : err->msg);
                json_decref(images);
                json_decref(msg);
                return false;
            }
            json_object_set_new(msg, "content", json_string(text));
            if (json_array_size(images))
                json_object_set(msg, "images", images);
            json_decref(images);
            free(text);
        }
        json_array_append_new(r->o->messages, msg);
        *st = cli_run_chat(r->ctx, r->o, err);
        if (*st == CR_E_UNAVAILABLE)
            return true; /* the server went away: report and leave */
        if (*st) {
            printf("Error: %s\n\n", err->msg);
            /* keep going, but drop the question that failed */
            size_t n = json_array_size(r->o->messages);
            if (n)
                json_array_remove(r->o->messages, n - 1);
            *st = CR_OK;
        }
        return false;
    }
    char *raw = strdup(p);
    char *w[4];
    char *copy = strdup(p);
    if (!raw || !copy) {
        free(raw);
        free(copy);
        return false;
    }
    int n = split_words(copy, w, 4);
    bool quit = false;
    const char *c = w[0];
    if (!strcmp(c, "/bye") || !strcmp(c, "/exit")) {
        quit = true;
    } else if (!strcmp(c, "/clear")) {
        json_array_clear(r->o->messages);
        printf("Cleared session context\n");
    } else if (!strcmp(c, "/set")) {
        char *again = strdup(p);
        if (again)
            cmd_set(r, again, raw);
        free(again);
    } else if (!strcmp(c, "/show")) {
        char *again = strdup(p);
        if (again)
            cmd_show(r, again);
        free(again);
    } else if (!strcmp(c, "/load")) {
        if (n < 2)
            printf("Usage:\n  /load <modelname>\n");
        else
            cmd_load(r, w[1]);
    } else if (!strcmp(c, "/save")) {
        if (n < 2)
            printf("Usage:\n  /save <modelname>\n");
        else
            cmd_save(r, w[1]);
    } else if (!strcmp(c, "/list")) {
        char *args[] = {(char *)"list", NULL};
        cr_err_t lerr;
        if (cli_cmd_list(r->ctx, 1, args, &lerr))
            printf("Error: %s\n", lerr.msg);
    } else if (!strcmp(c, "/?") || !strcmp(c, "/help")) {
        if (n >= 2 && (!strcmp(w[1], "shortcut") || !strcmp(w[1], "shortcuts")))
            help_shortcuts();
        else if (n >= 2 && !strcmp(w[1], "set"))
            help_set();
        else if (n >= 2 && !strcmp(w[1], "show"))
            help_show();
        else
            help_main();
    } else {
        printf("Unknown command '%s'. Type /? for help\n", c);
    }
    free(raw);
    free(copy);
    return quit;
}

cr_status_t cli_repl(cli_ctx_t *ctx, cli_run_opts_t *o, const json_t *show, cr_err_t *err)
{
    repl_t r = {.ctx = ctx, .o = o, .show = json_incref((json_t *)show)};
    if (!o->messages && !(o->messages = json_array()))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = cli_run_preload(ctx, o, err);
    if (st) {
        json_decref(r.show);
        return st;
    }
    /* The model's canned conversation, as `ollama run` shows it. */
    const json_t *msgs = json_object_get(show, "messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        const json_t *m = json_array_get(msgs, i);
        const char *role = cli_jstr(m, "role"), *content = cli_jstr(m, "content");
        if (!role || !content)
            continue;
        if (!strcmp(role, "user"))
            printf(">>> %s\n", content);
        else if (!strcmp(role, "assistant"))
            printf("%s\n\n", content);
    }
    /* Before anything (history included) sets libedit up. */
    rl_getc_function = repl_getc;
    history_init(&r);
    for (;;) {
        bool interrupted;
        char *input = read_input(&interrupted);
        if (!input && interrupted) {
            printf("\nUse Ctrl + d or /bye to exit.\n");
            continue;
        }
        if (!input) {
            printf("\n");
            break;
        }
        bool quit = handle(&r, input, &st, err);
        free(input);
        if (quit)
            break;
    }
    if (r.use_history && r.history[0])
        write_history(r.history);
    json_decref(r.show);
    return st;
}
