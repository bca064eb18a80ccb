/* dockerfile.c: Dockerfile checks without an engine (see dockerfile.h). */
#include "lib/prelude.h"
#include "tests/deploy/dockerfile.h"

#include <ctype.h>
#include <dirent.h>
#include <fnmatch.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LOGICAL 16384 /* bytes of one instruction, continuations joined */
#define MAX_STAGES 16
#define MAX_IGNORE 128
#define WALK_DEPTH 32

static const char *default_path =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

cr_status_t dc_stage_map_parse(const char *arg, dc_stage_map_t *out,
                               cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    const char *colon = strchr(arg, ':'), *eq = strchr(arg, '=');
    if (!colon || !eq || eq < colon || colon == arg || colon[1] != '/' ||
        !eq[1])
        return cr_err_set(err, CR_E_INVALID,
                          "stage map '%s' is not STAGE:/PREFIX=DIR", arg);
    size_t sl = (size_t)(colon - arg), pl = (size_t)(eq - colon - 1);
    if (sl >= sizeof out->stage || pl >= sizeof out->prefix ||
        strlen(eq + 1) >= sizeof out->dir)
        return cr_err_set(err, CR_E_TOO_LARGE, "stage map '%s' too long",
                          arg);
    memcpy(out->stage, arg, sl);
    memcpy(out->prefix, colon + 1, pl);
    while (pl > 1 && out->prefix[pl - 1] == '/')
        out->prefix[--pl] = '\0';
    snprintf(out->dir, sizeof out->dir, "%s", eq + 1);
    return CR_OK;
}

void dc_image_free(dc_image_t *img)
{
    for (size_t i = 0; i < img->n_files; i++)
        free(img->files[i].path);
    free(img->files);
    dc_env_free(&img->env);
    dc_words_free(&img->cmd);
    dc_words_free(&img->entrypoint);
    dc_words_free(&img->health);
    memset(img, 0, sizeof *img);
}

static void image_clear_files(dc_image_t *img)
{
    for (size_t i = 0; i < img->n_files; i++)
        free(img->files[i].path);
    img->n_files = 0;
}

static bool image_add(dc_image_t *img, const char *path, bool exec)
{
    for (size_t i = 0; i < img->n_files; i++)
        if (!strcmp(img->files[i].path, path)) {
            img->files[i].exec = exec;
            return true;
        }
    dc_image_file_t *f =
        realloc(img->files, (img->n_files + 1) * sizeof *f);
    if (!f)
        return false;
    img->files = f;
    char *p = strdup(path);
    if (!p)
        return false;
    img->files[img->n_files++] = (dc_image_file_t){p, exec};
    return true;
}

const dc_image_file_t *dc_image_which(const dc_image_t *img,
                                      const char *prog)
{
    if (!prog || !*prog)
        return NULL;
    if (prog[0] == '/') {
        for (size_t i = 0; i < img->n_files; i++)
            if (!strcmp(img->files[i].path, prog))
                return &img->files[i];
        return NULL;
    }
    if (strchr(prog, '/'))
        return NULL; /* relative to WORKDIR: not modelled, so refused */
    const char *path = dc_env_value(&img->env, "PATH");
    if (!path)
        path = default_path;
    char dir[1024], full[2048];
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)n, path);
        snprintf(full, sizeof full, "%s/%s", dir, prog);
        for (size_t i = 0; i < img->n_files; i++)
            if (!strcmp(img->files[i].path, full))
                return &img->files[i];
        path += n + (path[n] == ':');
    }
    return NULL;
}

/* ---- .dockerignore ---- */

typedef struct ignore {
    char *pat[MAX_IGNORE];
    bool neg[MAX_IGNORE];
    size_t n;
    char file[1200];
} ignore_t;

static void ignore_free(ignore_t *ig)
{
    for (size_t i = 0; i < ig->n; i++)
        free(ig->pat[i]);
    ig->n = 0;
}

/* Loads <dockerfile>.dockerignore, else <context>/.dockerignore. */
static bool ignore_load(ignore_t *ig, const char *dockerfile,
                        const char *context)
{
    memset(ig, 0, sizeof *ig);
    snprintf(ig->file, sizeof ig->file, "%s.dockerignore", dockerfile);
    char *text = NULL;
    cr_err_t err;
    if (dc_read_file(ig->file, 64 * 1024, &text, NULL, &err)) {
        snprintf(ig->file, sizeof ig->file, "%s/.dockerignore", context);
        if (dc_read_file(ig->file, 64 * 1024, &text, NULL, &err)) {
            ig->file[0] = '\0';
            return false;
        }
    }
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l && ig->n < MAX_IGNORE;
         l = strtok_r(NULL, "\n", &save)) {
        while (isspace((unsigned char)*l))
            l++;
        size_t n = strlen(l);
        while (n && isspace((unsigned char)l[n - 1]))
            l[--n] = '\0';
        if (!n || *l == '#')
            continue;
        bool neg = *l == '!';
        if (neg)
            l++;
        while (*l == '/')
            l++;
        ig->neg[ig->n] = neg;
        ig->pat[ig->n++] = strdup(l);
    }
    free(text);
    return true;
}

/* fnmatch with "**" matching any number of path components. */
static bool pat_match(const char *pat, const char *path)
{
    if (!strncmp(pat, "**/", 3)) {
        for (const char *p = path; p; p = strchr(p, '/')) {
            if (*p == '/')
                p++;
            if (pat_match(pat + 3, p))
                return true;
        }
        return false;
    }
    return fnmatch(pat, path, FNM_PATHNAME) == 0;
}

/* Whether rel (a clean path in the context) or a directory above it is
 * excluded; the last matching pattern wins, as in Docker. */
static bool ignore_excludes(const ignore_t *ig, const char *rel)
{
    char prefix[1024];
    bool excluded = false;
    for (size_t end = 0;; end++) {
        if (rel[end] != '/' && rel[end] != '\0')
            continue;
        snprintf(prefix, sizeof prefix, "%.*s", (int)end, rel);
        for (size_t i = 0; i < ig->n; i++)
            if (ig->pat[i] && pat_match(ig->pat[i], prefix))
                excluded = !ig->neg[i];
        if (excluded || rel[end] == '\0')
            break;
    }
    return excluded;
}

/* ---- walking a source into the image ---- */

static bool walk_into(dc_image_t *img, const char *local, const char *dest,
                      int depth)
{
    struct stat sb;
    if (depth > WALK_DEPTH || lstat(local, &sb))
        return false;
    if (!S_ISDIR(sb.st_mode))
        return image_add(img, dest, S_ISREG(sb.st_mode) &&
                                        (sb.st_mode & 0111));
    DIR *d = opendir(local);
    if (!d)
        return false;
    bool ok = true;
    struct dirent *de;
    while (ok && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char l2[2048], d2[2048];
        snprintf(l2, sizeof l2, "%s/%s", local, de->d_name);
        snprintf(d2, sizeof d2, "%s/%s", strcmp(dest, "/") ? dest : "",
                 de->d_name);
        ok = walk_into(img, l2, d2, depth + 1);
    }
    closedir(d);
    return ok;
}

/* ---- parsing ---- */

typedef struct stage {
    char name[64];
} stage_t;

typedef struct df {
    const char *path, *context;
    const dc_stage_map_t *maps;
    size_t n_maps;
    stage_t stages[MAX_STAGES];
    int n_stages, final_stage;
    ignore_t ig;
    bool have_ignore;
    dc_image_t *img;
    dc_report_t *rep;
} df_t;

/* Parses an exec-form JSON array of strings into argv. */
static bool json_argv(const char *s, dc_words_t *argv)
{
    memset(argv, 0, sizeof *argv);
    json_error_t je;
    json_t *a = json_loads(s, 0, &je);
    bool ok = a && json_is_array(a) && json_array_size(a) > 0 &&
              json_array_size(a) <= DC_ARGV_MAX;
    for (size_t i = 0; ok && i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        ok = json_is_string(v);
        if (ok) {
            argv->w[argv->n] = strdup(json_string_value(v));
            ok = argv->w[argv->n++] != NULL;
        }
    }
    json_decref(a);
    if (!ok)
        dc_words_free(argv);
    return ok;
}

static int find_stage(const df_t *d, const char *name)
{
    for (int i = 0; i < d->n_stages; i++)
        if (!strcasecmp(d->stages[i].name, name))
            return i;
    char *end;
    long idx = strtol(name, &end, 10);
    if (*name && !*end && idx >= 0 && idx < d->n_stages)
        return (int)idx;
    return -1;
}

/* Removes "./" parts and leading '/', refuses ".." (out of the context). */
static bool clean_context_path(const char *src, char *out, size_t cap)
{
    while (*src == '/')
        src++;
    size_t n = 0;
    while (*src) {
        size_t l = strcspn(src, "/");
        if (l == 2 && !strncmp(src, "..", 2))
            return false;
        if (!(l == 1 && src[0] == '.') && l) {
            if (n + l + 2 > cap)
                return false;
            if (n)
                out[n++] = '/';
            memcpy(out + n, src, l);
            n += l;
        }
        src += l;
        while (*src == '/')
            src++;
    }
    out[n] = '\0';
    return true;
}

static void do_copy(df_t *d, int stage, int line, char *args, bool is_add)
{
    const char *ins = is_add ? "ADD" : "COPY";
    char from[64] = "";
    /* Flags first. */
    while (!strncmp(args, "--", 2)) {
        size_t fl = strcspn(args, " \t");
        char flag[256];
        snprintf(flag, sizeof flag, "%.*s", (int)fl, args);
        if (!strncmp(flag, "--from=", 7)) {
            if (snprintf(from, sizeof from, "%s", flag + 7) >= (int)sizeof from)
                from[0] = '\0'; /* an over-long stage name matches none */
        } else if (strncmp(flag, "--chown=", 8) && strncmp(flag, "--chmod=", 8) &&
                 strcmp(flag, "--link"))
            dc_problem(d->rep, d->path, line, "%s flag %s is not checked by "
                       "this test", ins, flag);
        args += fl;
        while (*args == ' ' || *args == '\t')
            args++;
    }
    dc_words_t w;
    cr_err_t err;
    if (args[0] == '[') {
        if (!json_argv(args, &w)) {
            dc_problem(d->rep, d->path, line, "%s: bad JSON array", ins);
            return;
        }
    } else if (dc_split_words(args, &w, &err)) {
        dc_problem(d->rep, d->path, line, "%s: %s", ins, err.msg);
        return;
    }
    DC_EXPECT(d->rep, w.n >= 2, d->path, line, "%s needs a source and a "
              "destination", ins);
    if (w.n < 2)
        goto out;
    const char *dest = w.w[w.n - 1];
    DC_EXPECT(d->rep, dest[0] == '/', d->path, line,
              "%s destination '%s' is not absolute", ins, dest);
    bool dest_is_dir = dest[strlen(dest) - 1] == '/' || w.n > 2;
    for (size_t i = 0; i + 1 < w.n; i++) {
        const char *src = w.w[i];
        if (strchr(src, '$') || strpbrk(src, "*?[")) {
            dc_problem(d->rep, d->path, line, "%s source '%s': variables "
                       "and wildcards are not checked; write the path out",
                       ins, src);
            continue;
        }
        if (strstr(src, "://")) {
            dc_problem(d->rep, d->path, line, "%s of a URL (%s): download "
                       "in a RUN step with a checksum instead", ins, src);
            continue;
        }
        char local[2048];
        if (!from[0]) {
            char rel[1024];
            if (!clean_context_path(src, rel, sizeof rel)) {
                dc_problem(d->rep, d->path, line, "%s source '%s' leaves the "
                           "build context", ins, src);
                continue;
            }
            snprintf(local, sizeof local, "%s%s%s", d->context,
                     rel[0] ? "/" : "", rel);
            if (rel[0] && d->have_ignore && ignore_excludes(&d->ig, rel))
                dc_problem(d->rep, d->path, line, "%s source '%s' is "
                           "excluded by %s", ins, src, d->ig.file);
        } else {
            int fs = find_stage(d, from);
            if (fs < 0 || fs >= stage) {
                dc_problem(d->rep, d->path, line, "%s --from=%s is not an "
                           "earlier stage (images are not checked)", ins,
                           from);
                continue;
            }
            const dc_stage_map_t *m = NULL;
            for (size_t k = 0; k < d->n_maps; k++)
                if (!strcasecmp(d->maps[k].stage, d->stages[fs].name))
                    m = &d->maps[k];
            if (!m) {
                dc_problem(d->rep, d->path, line, "%s --from=%s: no stage "
                           "map says where that stage's output is", ins,
                           from);
                continue;
            }
            size_t pl = strlen(m->prefix);
            if (strncmp(src, m->prefix, pl) ||
                (src[pl] != '/' && src[pl] != '\0')) {
                dc_problem(d->rep, d->path, line, "%s --from=%s source '%s' "
                           "is outside %s, the part of that stage this test "
                           "has", ins, from, src, m->prefix);
                continue;
            }
            snprintf(local, sizeof local, "%s%s", m->dir, src + pl);
        }
        struct stat sb;
        if (stat(local, &sb)) {
            dc_problem(d->rep, d->path, line, "%s source '%s' does not "
                       "exist (looked for %s)", ins, src, local);
            continue;
        }
        d->rep->checks++;
        if (stage != d->final_stage)
            continue;
        char target[2048];
        if (S_ISDIR(sb.st_mode) || !dest_is_dir) {
            snprintf(target, sizeof target, "%s", dest);
        } else {
            const char *base = strrchr(local, '/');
            if (snprintf(target, sizeof target, "%s%s%s", dest,
                         dest[strlen(dest) - 1] == '/' ? "" : "/",
                         base ? base + 1 : local) >= (int)sizeof target)
                target[0] = '\0'; /* too long to exist */
        }
        size_t tl = strlen(target);
        while (tl > 1 && target[tl - 1] == '/')
            target[--tl] = '\0';
        if (!walk_into(d->img, local, target, 0))
            dc_problem(d->rep, d->path, line, "%s: cannot walk %s", ins,
                       local);
    }
out:
    dc_words_free(&w);
}

static void do_env(df_t *d, int line, const char *args)
{
    dc_words_t w;
    cr_err_t err;
    if (dc_split_words(args, &w, &err)) {
        dc_problem(d->rep, d->path, line, "ENV: %s", err.msg);
        return;
    }
    if (w.n >= 1 && !strchr(w.w[0], '=')) {
        /* Legacy "ENV KEY value words". */
        char kv[4096];
        size_t at = (size_t)snprintf(kv, sizeof kv, "%s=", w.w[0]);
        for (size_t i = 1; i < w.n && at < sizeof kv; i++)
            at += (size_t)snprintf(kv + at, sizeof kv - at, "%s%s",
                                   i > 1 ? " " : "", w.w[i]);
        if (dc_env_put(&d->img->env, kv, &err))
            dc_problem(d->rep, d->path, line, "ENV: %s", err.msg);
    } else {
        for (size_t i = 0; i < w.n; i++)
            if (dc_env_put(&d->img->env, w.w[i], &err))
                dc_problem(d->rep, d->path, line, "ENV: %s", err.msg);
    }
    dc_words_free(&w);
}

static void do_exec_form(df_t *d, int line, const char *ins, const char *args,
                         dc_words_t *out)
{
    dc_words_free(out);
    if (args[0] != '[' || !json_argv(args, out))
        dc_problem(d->rep, d->path, line,
                   "%s must be in exec form [\"prog\", \"arg\"]: the shell "
                   "form runs under /bin/sh -c, which does not pass SIGTERM "
                   "on to the service", ins);
    else
        d->rep->checks++;
}

static void do_healthcheck(df_t *d, int line, char *args)
{
    while (!strncmp(args, "--", 2)) {
        args += strcspn(args, " \t");
        while (*args == ' ' || *args == '\t')
            args++;
    }
    if (!strncasecmp(args, "NONE", 4)) {
        dc_words_free(&d->img->health);
        return;
    }
    if (strncasecmp(args, "CMD", 3) || !isspace((unsigned char)args[3])) {
        dc_problem(d->rep, d->path, line, "HEALTHCHECK needs CMD or NONE");
        return;
    }
    args += 3;
    while (isspace((unsigned char)*args))
        args++;
    do_exec_form(d, line, "HEALTHCHECK CMD", args, &d->img->health);
    d->img->health_line = line;
}

/* Checks that argv[0] is an executable file the image gets. */
static void expect_program(df_t *d, int line, const char *what,
                           const dc_words_t *argv)
{
    if (!argv->n)
        return;
    const dc_image_file_t *f = dc_image_which(d->img, argv->w[0]);
    DC_EXPECT(d->rep, f != NULL, d->path, line,
              "%s program '%s' is not a file this image gets from a COPY",
              what, argv->w[0]);
    if (f)
        DC_EXPECT(d->rep, f->exec, d->path, line,
                  "%s program '%s' is not executable", what, f->path);
}

cr_status_t dc_dockerfile_check(const char *path, const char *context,
                                const dc_stage_map_t *maps, size_t n_maps,
                                dc_image_t *img, dc_report_t *rep,
                                cr_err_t *err)
{
    memset(img, 0, sizeof *img);
    char *text;
    cr_status_t st = dc_read_file(path, 1u << 20, &text, NULL, err);
    if (st)
        return st;
    df_t *d = calloc(1, sizeof *d);
    char *logical = malloc(MAX_LOGICAL);
    if (!d || !logical) {
        free(d);
        free(logical);
        free(text);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    d->path = path;
    d->context = context;
    d->maps = maps;
    d->n_maps = n_maps;
    d->img = img;
    d->rep = rep;
    d->final_stage = -1;
    d->have_ignore = ignore_load(&d->ig, path, context);
    DC_EXPECT(rep, d->have_ignore, path, 0,
              "no %s.dockerignore beside it and no .dockerignore in the "
              "context: build dirs would be sent to the engine", path);

    /* Count the stages first: only the last one's files are modelled. */
    int n_from = 0;
    for (const char *p = text; p; p = strchr(p, '\n')) {
        if (*p == '\n')
            p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (!strncasecmp(p, "FROM", 4) && isspace((unsigned char)p[4]))
            n_from++;
    }
    d->final_stage = n_from - 1;

    int no = 0, start_no = 0, stage = -1;
    size_t ll = 0;
    bool cont = false, seen_instruction = false;
    char *p = text;
    while (*p) {
        no++;
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        char *t = p;
        p = nl ? nl + 1 : p + strlen(p);
        while (*t == ' ' || *t == '\t')
            t++;
        size_t tl = strlen(t);
        while (tl && isspace((unsigned char)t[tl - 1]))
            t[--tl] = '\0';
        if (*t == '#') {
            if (!seen_instruction && !strncasecmp(t, "# escape=", 9) &&
                strcmp(t + 9, "\\"))
                dc_problem(rep, path, no, "escape directive '%s' is not "
                           "supported by this check", t + 9);
            continue;
        }
        if (!cont) {
            if (!tl)
                continue;
            start_no = no;
            ll = 0;
        }
        if (ll + tl + 2 >= MAX_LOGICAL) {
            dc_problem(rep, path, start_no, "instruction over %d bytes",
                       MAX_LOGICAL);
            break;
        }
        memcpy(logical + ll, t, tl);
        ll += tl;
        logical[ll] = '\0';
        cont = ll && logical[ll - 1] == '\\';
        if (cont) {
            logical[ll - 1] = ' ';
            if (*p)
                continue;
        }
        cont = false;
        seen_instruction = true;

        char *ins = logical;
        size_t il = strcspn(ins, " \t");
        char *args = ins + il;
        if (*args)
            *args++ = '\0';
        while (*args == ' ' || *args == '\t')
            args++;
        for (char *c = ins; *c; c++)
            *c = (char)toupper((unsigned char)*c);

        if (!strcmp(ins, "FROM")) {
            if (++stage >= MAX_STAGES) {
                dc_problem(rep, path, start_no, "over %d stages",
                           MAX_STAGES);
                break;
            }
            dc_words_t w;
            cr_err_t e2;
            d->n_stages = stage + 1;
            d->stages[stage].name[0] = '\0';
            if (!dc_split_words(args, &w, &e2)) {
                size_t k = 0;
                while (k < w.n && !strncmp(w.w[k], "--", 2))
                    k++;
                if (k + 3 == w.n && !strcasecmp(w.w[k + 1], "AS"))
                    snprintf(d->stages[stage].name,
                             sizeof d->stages[stage].name, "%s", w.w[k + 2]);
                DC_EXPECT(rep, k < w.n, path, start_no, "FROM names no image");
                if (k < w.n)
                    DC_EXPECT(rep, find_stage(d, w.w[k]) < 0, path, start_no,
                              "FROM an earlier stage is not modelled here");
                dc_words_free(&w);
            }
            image_clear_files(img);
            dc_env_free(&img->env);
            img->user[0] = '\0';
            dc_words_free(&img->cmd);
            dc_words_free(&img->entrypoint);
            dc_words_free(&img->health);
        } else if (stage < 0) {
            DC_EXPECT(rep, !strcmp(ins, "ARG"), path, start_no,
                      "%s before the first FROM", ins);
        } else if (!strcmp(ins, "COPY") || !strcmp(ins, "ADD")) {
            do_copy(d, stage, start_no, args, ins[0] == 'A');
        } else if (!strcmp(ins, "ENV")) {
            do_env(d, start_no, args);
        } else if (!strcmp(ins, "USER")) {
            snprintf(img->user, sizeof img->user, "%s", args);
        } else if (!strcmp(ins, "CMD")) {
            do_exec_form(d, start_no, "CMD", args, &img->cmd);
            img->cmd_line = start_no;
        } else if (!strcmp(ins, "ENTRYPOINT")) {
            do_exec_form(d, start_no, "ENTRYPOINT", args, &img->entrypoint);
        } else if (!strcmp(ins, "HEALTHCHECK")) {
            do_healthcheck(d, start_no, args);
        } else if (strcmp(ins, "RUN") && strcmp(ins, "ARG") &&
                   strcmp(ins, "WORKDIR") && strcmp(ins, "VOLUME") &&
                   strcmp(ins, "EXPOSE") && strcmp(ins, "LABEL") &&
                   strcmp(ins, "STOPSIGNAL") && strcmp(ins, "SHELL")) {
            dc_problem(rep, path, start_no, "unknown instruction %s", ins);
        }
    }

    DC_EXPECT(rep, stage >= 0, path, 0, "no FROM");
    if (stage >= 0) {
        /* The final stage runs as a service user, never root. */
        char user[64];
        snprintf(user, sizeof user, "%s", img->user);
        user[strcspn(user, ":")] = '\0';
        DC_EXPECT(rep, user[0] && strcmp(user, "root") && strcmp(user, "0"),
                  path, 0, "the final stage runs as root (add USER)");
        DC_EXPECT(rep, img->cmd.n || img->entrypoint.n, path, 0,
                  "the final stage has no CMD or ENTRYPOINT");
        expect_program(d, img->cmd_line, "ENTRYPOINT", &img->entrypoint);
        if (!img->entrypoint.n)
            expect_program(d, img->cmd_line, "CMD", &img->cmd);
        expect_program(d, img->health_line, "HEALTHCHECK", &img->health);
    }
    ignore_free(&d->ig);
    free(d);
    free(logical);
    free(text);
    return CR_OK;
}
