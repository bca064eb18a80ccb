/* models.c: the verbs that manage models through the API: list, ps, show,
 * rm, cp, stop, pull, push, --version; plus the helpers they share with run
 * and create (show, progress lines). Output follows `ollama`'s. */
#include "lib/prelude.h"
#include "cli/cli.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "cli/wrap.h"
#include "lib/buf.h"
#include "lib/gotext.h"

#include <unistd.h>

cr_status_t cli_ctx_init(cli_ctx_t *ctx, cr_err_t *err)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->stdin_tty = isatty(0);
    ctx->stdout_tty = isatty(1);
    ctx->stderr_tty = isatty(2);
    return cli_host_from_env(&ctx->host, err);
}

void cli_ctx_free(cli_ctx_t *ctx)
{
    cli_http_destroy(&ctx->http);
}

cr_status_t cli_ctx_http(cli_ctx_t *ctx, cli_http_t **out, cr_err_t *err)
{
    if (!ctx->http && !(ctx->http = cli_http_new(&ctx->host, err)))
        return err ? err->status : CR_E_INTERNAL;
    *out = ctx->http;
    return CR_OK;
}

bool cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--"))
            return false;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    }
    return false;
}

const char *cli_jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int64_t jint(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v))
        return (int64_t)json_real_value(v);
    return 0;
}

/* One JSON object {k: v} with v a string. */
static json_t *obj1(const char *k, const char *v)
{
    return json_pack("{s:s}", k, v);
}

/* Rejects flags a verb does not know; returns the operands in ops. */
static cr_status_t operands(int argc, char **argv, char **ops, int cap, int *n_ops,
                            cr_err_t *err)
{
    *n_ops = 0;
    bool only_ops = false;
    for (int i = 1; i < argc; i++) {
        if (!only_ops && !strcmp(argv[i], "--")) {
            only_ops = true;
            continue;
        }
        if (!only_ops && argv[i][0] == '-' && argv[i][1])
            return cr_err_set(err, CR_E_INVALID, "unknown flag: %s", argv[i]);
        if (*n_ops >= cap)
            return cr_err_set(err, CR_E_INVALID, "too many arguments for '%s'", argv[0]);
        ops[(*n_ops)++] = argv[i];
    }
    return CR_OK;
}

/* ---- list / ps ---- */

/* One row of a model table from one entry of `models`; fills row[] with
 * strings that live in buf (cap bytes per column). */
typedef void (*row_fn)(json_t *m, const char *name, time_t now,
                       char buf[][64], const char **row);

/* A column shown only when some listed model has a non-empty `key`, so the
 * default table stays byte-identical to Ollama's. */
typedef struct opt_col {
    const char *key;    /* JSON field of a model entry */
    const char *head;   /* its heading */
    const char *absent; /* the cell of a model without the field */
    size_t at;          /* column index it is inserted at */
} opt_col_t;

static bool wanted(const char *name, char **ops, int n_ops)
{
    return name && !(n_ops && strncmp(name, ops[0], strlen(ops[0])));
}

static const char *entry_name(json_t *m)
{
    return cli_jstr(m, "name") ? cli_jstr(m, "name") : cli_jstr(m, "model");
}

/* Copies n cells of src into dst with `cell` inserted at index at. */
static void insert_cell(const char **dst, const char *const *src, size_t n,
                        size_t at, const char *cell)
{
    for (size_t c = 0, o = 0; c <= n; c++)
        dst[c] = c == at ? cell : src[o++];
}

/* `list` and `ps`: GET path, keep the models whose name starts with the
 * optional PREFIX operand, print them as a table under head (n_cols <= 7),
 * plus the optional column opt (may be NULL). */
static cr_status_t model_table(cli_ctx_t *ctx, int argc, char **argv,
                               const char *path, const char *const *head,
                               size_t n_cols, row_fn fill,
                               const opt_col_t *opt, cr_err_t *err)
{
    char *ops[1];
    int n_ops;
    cli_http_t *h = NULL;
    cr_status_t st = operands(argc, argv, ops, 1, &n_ops, err);
    if (st || (st = cli_ctx_http(ctx, &h, err)))
        return st;
    json_t *resp = NULL;
    if ((st = cli_http_json(h, "GET", path, NULL, NULL, NULL, &resp, NULL, err)))
        return st;
    json_t *models = json_object_get(resp, "models");
    bool extra = false;
    for (size_t i = 0; opt && i < json_array_size(models); i++) {
        json_t *m = json_array_get(models, i);
        const char *v = cli_jstr(m, opt->key);
        if (wanted(entry_name(m), ops, n_ops) && v && *v)
            extra = true;
    }
    cli_table_t *t = cli_table_new(n_cols + extra);
    if (!t) {
        json_decref(resp);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    const char *cells[8];
    if (extra)
        insert_cell(cells, head, n_cols, opt->at, opt->head);
    st = cli_table_add(t, extra ? cells : head);
    time_t now = time(NULL);
    for (size_t i = 0; i < json_array_size(models) && !st; i++) {
        json_t *m = json_array_get(models, i);
        const char *name = entry_name(m);
        if (!wanted(name, ops, n_ops))
            continue;
        char buf[8][64];
        const char *row[8];
        fill(m, name, now, buf, row);
        if (extra) {
            const char *v = cli_jstr(m, opt->key);
            insert_cell(cells, row, n_cols, opt->at, v && *v ? v : opt->absent);
        }
        st = cli_table_add(t, extra ? cells : row);
    }
    if (!st)
        cli_table_print(t, stdout);
    else
        cr_err_set(err, st, "out of memory");
    cli_table_destroy(&t);
    json_decref(resp);
    return st;
}

/* The ID column: the first 12 hex digits of the manifest digest. */
static void id_of(json_t *m, char *out, size_t cap)
{
    const char *digest = cli_jstr(m, "digest");
    snprintf(out, cap, "%.12s", digest ? digest : "");
}

static void list_row(json_t *m, const char *name, time_t now, char buf[][64],
                     const char **row)
{
    id_of(m, buf[1], sizeof buf[1]);
    cli_fmt_bytes(jint(m, "size"), buf[2], sizeof buf[2]);
    time_t t_mod = 0;
    if (!cli_parse_rfc3339(cli_jstr(m, "modified_at"), &t_mod))
        t_mod = 0;
    cli_fmt_human_time(t_mod, now, "Never", buf[3], sizeof buf[3]);
    row[0] = name;
    for (int c = 1; c < 4; c++)
        row[c] = buf[c];
}

static void ps_row(json_t *m, const char *name, time_t now, char buf[][64],
                   const char **row)
{
    id_of(m, buf[1], sizeof buf[1]);
    cli_fmt_bytes(jint(m, "size"), buf[2], sizeof buf[2]);
    cli_fmt_processor(jint(m, "size"), jint(m, "size_vram"), buf[3],
                      sizeof buf[3]);
    snprintf(buf[4], sizeof buf[4], "%" PRId64, jint(m, "context_length"));
    time_t exp = 0;
    if (!cli_parse_rfc3339(cli_jstr(m, "expires_at"), &exp))
        exp = 0;
    if (exp && exp <= now) /* expired: the unload is under way */
        snprintf(buf[5], sizeof buf[5], "Stopping...");
    else
        cli_fmt_human_time(exp, now, "Never", buf[5], sizeof buf[5]);
    row[0] = name;
    for (int c = 1; c < 6; c++)
        row[c] = buf[c];
}

cr_status_t cli_cmd_list(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("List models\n\nUsage:\n  corral list [PREFIX]\n\nAliases:\n  list, ls\n");
        return CR_OK;
    }
    static const char *const head[] = {"NAME", "ID", "SIZE", "MODIFIED"};
    return model_table(ctx, argc, argv, "/api/tags", head, 4, list_row, NULL,
                       err);
}

cr_status_t cli_cmd_ps(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("List running models\n\nUsage:\n  corral ps [PREFIX]\n");
        return CR_OK;
    }
    static const char *const head[] = {"NAME", "ID", "SIZE", "PROCESSOR",
                                       "CONTEXT", "UNTIL"};
    /* HOST appears only when a model runs on a node (docs/api.md). */
    static const opt_col_t host = {"host", "HOST", "local", 4};
    return model_table(ctx, argc, argv, "/api/ps", head, 6, ps_row, &host, err);
}

/* ---- show ---- */

cr_status_t cli_show_model(cli_ctx_t *ctx, const char *model, json_t **out, cr_err_t *err)
{
    return cli_show_model_ex(ctx, model, false, out, err);
}

cr_status_t cli_show_model_ex(cli_ctx_t *ctx, const char *model, bool verbose, json_t **out,
                              cr_err_t *err)
{
    cli_http_t *h = NULL;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = obj1("model", model);
    if (!req || (verbose && json_object_set_new(req, "verbose", json_true()))) {
        json_decref(req);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    st = cli_http_json(h, "POST", "/api/show", req, NULL, NULL, out, NULL, err);
    json_decref(req);
    if (!st && !*out)
        st = cr_err_set(err, CR_E_CORRUPT, "empty reply to /api/show");
    return st;
}

static void print_section(const char *title, cli_table_t *t, FILE *f)
{
    fprintf(f, "  %s\n", title);
    cli_table_print(t, f);
    fputc('\n', f);
}

/* A number from model_info as text ("131072", "1e-05"). */
static void info_number(const json_t *v, char *out, size_t cap)
{
    if (json_is_integer(v))
        snprintf(out, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        snprintf(out, cap, "%g", json_real_value(v));
    else if (json_is_string(v))
        snprintf(out, cap, "%s", json_string_value(v));
    else
        out[0] = '\0';
}

/* A model_info value as Go's %v shows it (numbers are float64s there). */
static void go_value(const json_t *v, cr_buf_t *b)
{
    char num[CR_FLOAT_BUF];
    if (json_is_string(v)) {
        cr_buf_puts(b, json_string_value(v));
    } else if (json_is_number(v)) {
        cr_float_format(json_number_value(v), 64, CR_FLOAT_G, num, sizeof num);
        cr_buf_puts(b, num);
    } else if (json_is_boolean(v)) {
        cr_buf_puts(b, json_is_true(v) ? "true" : "false");
    } else if (json_is_null(v)) {
        cr_buf_puts(b, "<nil>");
    } else if (json_is_array(v)) {
        cr_buf_putc(b, '[');
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                cr_buf_putc(b, ' ');
            go_value(json_array_get(v, i), b);
        }
        cr_buf_putc(b, ']');
    } else {
        cr_buf_puts(b, "map[string]interface {}");
    }
}

/* An array in the Metadata table, as Ollama shortens it: the items that
 * fit 10 columns (at least one), then " ...+N more]". */
static void metadata_array(const json_t *v, cr_buf_t *b)
{
    size_t n = json_array_size(v), shown = 0;
    int width = 1; /* "[" */
    for (size_t i = 0; i < n; i++) {
        cr_buf_t item;
        cr_buf_init(&item, 1u << 20);
        go_value(json_array_get(v, i), &item);
        int w = cli_text_cols(item.data ? item.data : "") + (i ? 2 : 0);
        cr_buf_free(&item);
        if (width + w > 10 && i > 0)
            break;
        width += w;
        shown++;
    }
    cr_buf_putc(b, '[');
    for (size_t i = 0; i < shown; i++) {
        if (i)
            cr_buf_putc(b, ' ');
        go_value(json_array_get(v, i), b);
    }
    if (shown < n) {
        char more[48];
        snprintf(more, sizeof more, " ...+%zu more", n - shown);
        cr_buf_puts(b, more);
    }
    cr_buf_putc(b, ']');
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* show -v: every model_info key (sorted) and every tensor. */
static void print_verbose_sections(const json_t *show, FILE *f)
{
    const json_t *info = json_object_get(show, "model_info");
    size_t n = json_object_size(info);
    cli_table_t *t;
    if (n && (t = cli_table_new(3))) {
        const char **keys = calloc(n, sizeof *keys);
        size_t k = 0;
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)info, key, v) {
            if (keys)
                keys[k++] = key;
        }
        if (keys)
            qsort(keys, k, sizeof *keys, cmp_keys);
        for (size_t i = 0; keys && i < k; i++) {
            cr_buf_t b;
            cr_buf_init(&b, 64u << 20);
            v = json_object_get(info, keys[i]);
            if (json_is_array(v))
                metadata_array(v, &b);
            else
                go_value(v, &b);
            const char *row[] = {"", keys[i], b.data ? b.data : ""};
            cli_table_add(t, row);
            cr_buf_free(&b);
        }
        free(keys);
        print_section("Metadata", t, f);
        cli_table_destroy(&t);
    }
    const json_t *tensors = json_object_get(show, "tensors");
    if (json_array_size(tensors) && (t = cli_table_new(4))) {
        for (size_t i = 0; i < json_array_size(tensors); i++) {
            const json_t *tn = json_array_get(tensors, i);
            cr_buf_t shape;
            cr_buf_init(&shape, 4096);
            go_value(json_object_get(tn, "shape"), &shape);
            const char *name = cli_jstr(tn, "name"), *type = cli_jstr(tn, "type");
            const char *row[] = {"", name ? name : "", type ? type : "",
                                 shape.data ? shape.data : "[]"};
            cli_table_add(t, row);
            cr_buf_free(&shape);
        }
        print_section("Tensors", t, f);
        cli_table_destroy(&t);
    }
}

/* Rows of the first two non-empty lines of text, then "..." if more. */
static void head_rows(cli_table_t *t, const char *text)
{
    int count = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        while (n && (p[0] == ' ' || p[0] == '\t' || p[0] == '\r')) {
            p++;
            n--;
        }
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
            n--;
        if (n) {
            count++;
            if (count <= 2) {
                char *line = strndup(p, n);
                const char *row[] = {"", line};
                if (line)
                    cli_table_add(t, row);
                free(line);
            }
        }
        if (!e)
            break;
        p = e + 1;
    }
    if (count > 2) {
        const char *row[] = {"", "..."};
        cli_table_add(t, row);
    }
}

void cli_print_show_info(const json_t *show, bool verbose, FILE *f)
{
    const json_t *details = json_object_get(show, "details");
    const json_t *info = json_object_get(show, "model_info");
    cli_table_t *t = cli_table_new(3);
    if (!t)
        return;
    const char *arch = cli_jstr(info, "general.architecture");
    if (!arch)
        arch = cli_jstr(details, "family");
    const char *r1[] = {"", "architecture", arch ? arch : ""};
    cli_table_add(t, r1);
    const char *psize = cli_jstr(details, "parameter_size");
    const char *r2[] = {"", "parameters", psize ? psize : ""};
    cli_table_add(t, r2);
    if (arch) {
        char key[256], num[64];
        snprintf(key, sizeof key, "%s.context_length", arch);
        if (json_object_get(info, key)) {
            info_number(json_object_get(info, key), num, sizeof num);
            const char *r[] = {"", "context length", num};
            cli_table_add(t, r);
        }
        snprintf(key, sizeof key, "%s.embedding_length", arch);
        if (json_object_get(info, key)) {
            info_number(json_object_get(info, key), num, sizeof num);
            const char *r[] = {"", "embedding length", num};
            cli_table_add(t, r);
        }
    }
    const char *quant = cli_jstr(details, "quantization_level");
    const char *r3[] = {"", "quantization", quant ? quant : ""};
    cli_table_add(t, r3);
    if (cli_jstr(show, "requires")) {
        const char *r[] = {"", "requires", cli_jstr(show, "requires")};
        cli_table_add(t, r);
    }
    print_section("Model", t, f);
    cli_table_destroy(&t);

    const json_t *caps = json_object_get(show, "capabilities");
    if (json_array_size(caps) && (t = cli_table_new(2))) {
        for (size_t i = 0; i < json_array_size(caps); i++) {
            const json_t *c = json_array_get(caps, i);
            if (!json_is_string(c))
                continue;
            const char *r[] = {"", json_string_value(c)};
            cli_table_add(t, r);
        }
        print_section("Capabilities", t, f);
        cli_table_destroy(&t);
    }

    const char *params = cli_jstr(show, "parameters");
    if (params && *params && (t = cli_table_new(16))) {
        /* One row a line, split on blanks like Go's strings.Fields. */
        char *copy = strdup(params);
        char *save = NULL;
        for (char *line = copy ? strtok_r(copy, "\n", &save) : NULL; line;
             line = strtok_r(NULL, "\n", &save)) {
            const char *row[16] = {""};
            size_t n = 1;
            char *fsave = NULL;
            for (char *w = strtok_r(line, " \t\r", &fsave); w && n < 16;
                 w = strtok_r(NULL, " \t\r", &fsave))
                row[n++] = w;
            if (n > 1)
                cli_table_add(t, row);
        }
        free(copy);
        print_section("Parameters", t, f);
        cli_table_destroy(&t);
    }
    if (verbose)
        print_verbose_sections(show, f);
    const char *system = cli_jstr(show, "system");
    if (system && *system && (t = cli_table_new(2))) {
        head_rows(t, system);
        print_section("System", t, f);
        cli_table_destroy(&t);
    }
    const char *license = cli_jstr(show, "license");
    if (license && *license && (t = cli_table_new(2))) {
        head_rows(t, license);
        print_section("License", t, f);
        cli_table_destroy(&t);
    }
}

cr_status_t cli_cmd_show(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    static const char *const fields[] = {"license", "modelfile", "parameters", "system",
                                         "template"};
    if (cli_wants_help(argc, argv)) {
        printf("Show information for a model\n\nUsage:\n  corral show MODEL [flags]\n\n"
               "Flags:\n      --license      Show license of a model\n"
               "      --modelfile    Show Modelfile of a model\n"
               "      --parameters   Show parameters of a model\n"
               "      --system       Show system message of a model\n"
               "      --template     Show template of a model\n"
               "  -v, --verbose      Show detailed model information\n");
        return CR_OK;
    }
    const char *which = NULL, *model = NULL;
    int n_set = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool known = false;
        for (size_t k = 0; k < CR_ARRAY_LEN(fields); k++) {
            if (!strncmp(a, "--", 2) && !strcmp(a + 2, fields[k])) {
                which = fields[k];
                n_set++;
                known = true;
            }
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            verbose = true;
            continue;
        }
        if (known)
            continue;
        if (a[0] == '-')
            return cr_err_set(err, CR_E_INVALID, "unknown flag: %s", a);
        if (model)
            return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received more");
        model = a;
    }
    if (!model)
        return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received 0");
    if (n_set > 1)
        return cr_err_set(err, CR_E_INVALID,
                          "only one of '--license', '--modelfile', '--parameters', "
                          "'--system', or '--template' can be specified");
    json_t *show = NULL;
    cr_status_t st = cli_show_model_ex(ctx, model, verbose && !which, &show, err);
    if (st)
        return st;
    if (which) {
        const char *v = cli_jstr(show, which);
        if (!v && !strcmp(which, "license")) {
            /* license may come as an array of texts */
            json_t *arr = json_object_get(show, "license");
            for (size_t i = 0; i < json_array_size(arr); i++)
                if (json_is_string(json_array_get(arr, i)))
                    printf("%s%s", i ? "\n" : "", json_string_value(json_array_get(arr, i)));
            printf("\n");
        } else {
            printf("%s\n", v ? v : "");
        }
    } else {
        cli_print_show_info(show, verbose, stdout);
    }
    json_decref(show);
    return CR_OK;
}

/* ---- rm / cp / stop ---- */

/* POST /api/generate {model, keep_alive: 0}: unloads now. */
static cr_status_t unload(cli_http_t *h, const char *model, cr_err_t *err)
{
    json_t *req = json_pack("{s:s, s:i, s:b}", "model", model, "keep_alive", 0, "stream", 0);
    if (!req)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    json_t *resp = NULL;
    cr_status_t st = cli_http_json(h, "POST", "/api/generate", req, NULL, NULL, &resp, NULL,
                                   err);
    json_decref(resp);
    json_decref(req);
    return st;
}

cr_status_t cli_cmd_rm(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("Remove a model\n\nUsage:\n  corral rm MODEL [MODEL...]\n");
        return CR_OK;
    }
    char *ops[256];
    int n_ops;
    cli_http_t *h = NULL;
    cr_status_t st = operands(argc, argv, ops, 256, &n_ops, err);
    if (st || (st = cli_ctx_http(ctx, &h, err)))
        return st;
    if (!n_ops)
        return cr_err_set(err, CR_E_INVALID, "requires at least 1 arg(s), only received 0");
    for (int i = 0; i < n_ops; i++) {
        cr_err_t uerr;
        cr_status_t ust = unload(h, ops[i], &uerr);
        if (ust == CR_E_UNAVAILABLE || ust == CR_E_CANCELED)
            return cr_err_set(err, ust, "%s", uerr.msg);
        if (ust && !strstr(uerr.msg, "not found"))
            fprintf(stderr, "Warning: unable to stop model '%s'\n", ops[i]);
        json_t *req = obj1("model", ops[i]);
        if (!req)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        st = cli_http_json(h, "DELETE", "/api/delete", req, NULL, NULL, NULL, NULL, err);
        json_decref(req);
        if (st)
            return st;
        printf("deleted '%s'\n", ops[i]);
    }
    return CR_OK;
}

cr_status_t cli_cmd_cp(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("Copy a model\n\nUsage:\n  corral cp SOURCE DESTINATION\n");
        return CR_OK;
    }
    char *ops[2];
    int n_ops;
    cli_http_t *h = NULL;
    cr_status_t st = operands(argc, argv, ops, 2, &n_ops, err);
    if (st)
        return st;
    if (n_ops != 2)
        return cr_err_set(err, CR_E_INVALID, "accepts 2 arg(s), received %d", n_ops);
    if ((st = cli_ctx_http(ctx, &h, err)))
        return st;
    json_t *req = json_pack("{s:s, s:s}", "source", ops[0], "destination", ops[1]);
    if (!req)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    st = cli_http_json(h, "POST", "/api/copy", req, NULL, NULL, NULL, NULL, err);
    json_decref(req);
    if (!st)
        printf("copied '%s' to '%s'\n", ops[0], ops[1]);
    return st;
}

cr_status_t cli_cmd_stop(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    if (cli_wants_help(argc, argv)) {
        printf("Stop a running model\n\nUsage:\n  corral stop MODEL\n");
        return CR_OK;
    }
    char *ops[1];
    int n_ops;
    cli_http_t *h = NULL;
    cr_status_t st = operands(argc, argv, ops, 1, &n_ops, err);
    if (st)
        return st;
    if (n_ops != 1)
        return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received %d", n_ops);
    if ((st = cli_ctx_http(ctx, &h, err)))
        return st;
    st = unload(h, ops[0], err);
    if (st && strstr(err->msg, "not found"))
        return cr_err_set(err, st, "couldn't find model \"%s\" to stop", ops[0]);
    return st;
}

/* ---- pull, push ---- */

static bool progress_line(void *ctx, json_t *obj)
{
    cli_progress_event(ctx, obj);
    return true;
}

cr_status_t cli_pull_push(cli_ctx_t *ctx, const char *verb, const char *model, bool insecure,
                          cr_err_t *err)
{
    cli_http_t *h = NULL;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *req = json_pack("{s:s, s:b, s:b}", "model", model, "insecure", insecure,
                            "stream", 1);
    if (!req)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    char path[32];
    snprintf(path, sizeof path, "/api/%s", verb);
    cli_progress_t *p = cli_progress_new(stderr, ctx->stderr_tty, 0,
                                         !strcmp(verb, "push") ? "pushing" : "pulling");
    if (!p) {
        json_decref(req);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    st = cli_http_json(h, "POST", path, req, progress_line, p, NULL, NULL, err);
    cli_progress_destroy(&p);
    json_decref(req);
    if (st && !strcmp(verb, "push") && strstr(err->msg, "access denied"))
        return cr_err_set(err, st,
                          "you are not authorized to push to this namespace, create the "
                          "model under a namespace you own");
    return st;
}

static cr_status_t pull_or_push(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    bool push = !strcmp(argv[0], "push");
    if (cli_wants_help(argc, argv)) {
        printf("%s a model %s a registry\n\nUsage:\n  corral %s MODEL [flags]\n\n"
               "Flags:\n      --insecure   Use an insecure registry\n",
               push ? "Push" : "Pull", push ? "to" : "from", argv[0]);
        return CR_OK;
    }
    bool insecure = false;
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--insecure"))
            insecure = true;
        else if (argv[i][0] == '-')
            return cr_err_set(err, CR_E_INVALID, "unknown flag: %s", argv[i]);
        else if (model)
            return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received more");
        else
            model = argv[i];
    }
    if (!model)
        return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received 0");
    return cli_pull_push(ctx, push ? "push" : "pull", model, insecure, err);
}

cr_status_t cli_cmd_pull(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    return pull_or_push(ctx, argc, argv, err);
}

cr_status_t cli_cmd_push(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    return pull_or_push(ctx, argc, argv, err);
}

/* ---- version ---- */

cr_status_t cli_cmd_version(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(argc);
    CR_UNUSED(argv);
    cli_http_t *h = NULL;
    cr_status_t st = cli_ctx_http(ctx, &h, err);
    if (st)
        return st;
    json_t *resp = NULL;
    cr_err_t verr;
    st = cli_http_json(h, "GET", "/api/version", NULL, NULL, NULL, &resp, NULL, &verr);
    /* `version` is the Ollama API the server answers as; corral's own is
     * `corral_version` (a server without it is older than the field). */
    const char *compat = st ? NULL : cli_jstr(resp, "version");
    const char *server = st ? NULL : cli_jstr(resp, "corral_version");
    if (!compat) {
        printf("Warning: could not connect to a running corral instance\n");
        printf("Warning: client version is %s\n", CORRAL_VERSION);
    } else if (server && !strcmp(server, CORRAL_VERSION)) {
        printf("corral version is %s\n", server);
    } else {
        printf("corral server version is %s\n", server ? server : "unknown");
        printf("Warning: client version is %s\n", CORRAL_VERSION);
    }
    if (compat)
        printf("Ollama API version is %s\n", compat);
    json_decref(resp);
    return CR_OK;
}
