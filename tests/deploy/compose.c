/* compose.c: compose file schema and policy checks (see compose.h). */
#include "lib/prelude.h"
#include "tests/deploy/compose.h"

#include <ctype.h>
#include <sys/stat.h>

#include "tests/deploy/yaml.h"

#define MAX_IMAGES 8

typedef struct built_image {
    char dockerfile[4096];
    dc_image_t img;
} built_image_t;

typedef struct ctx {
    const char *file;
    char dir[1024]; /* the compose file's directory */
    const dc_compose_opts_t *o;
    dc_report_t *rep;
    built_image_t images[MAX_IMAGES];
    size_t n_images;
} ctx_t;

typedef void (*check_fn)(ctx_t *c, const char *where, const dc_yaml_t *v);

typedef struct key_rule {
    const char *key;
    check_fn fn; /* NULL: any value */
} key_rule_t;

#define PROBLEM(c, node, ...) \
    dc_problem((c)->rep, (c)->file, (node) ? (node)->line : 0, __VA_ARGS__)
#define EXPECT(c, cond, node, ...) \
    DC_EXPECT((c)->rep, (cond), (c)->file, (node) ? (node)->line : 0, \
              __VA_ARGS__)

/* ---- scalars ---- */

static bool is_scalar(const dc_yaml_t *v)
{
    return v && v->kind == DC_YAML_SCALAR;
}

static bool is_plain(const dc_yaml_t *v, const char *word)
{
    return is_scalar(v) && !v->quoted && !strcmp(v->str, word);
}

static bool is_bool(const dc_yaml_t *v)
{
    return is_plain(v, "true") || is_plain(v, "false");
}

static bool str_is_int(const char *s)
{
    if (*s == '-' || *s == '+')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

static bool is_int(const dc_yaml_t *v)
{
    return is_scalar(v) && !v->quoted && str_is_int(v->str);
}

/* Go durations as compose reads them: "30s", "1m30s", "1.5h", "500ms". */
static bool str_is_duration(const char *s)
{
    if (!*s)
        return false;
    while (*s) {
        const char *num = s;
        while (isdigit((unsigned char)*s) || *s == '.')
            s++;
        if (s == num)
            return false;
        if (!strncmp(s, "ms", 2) || !strncmp(s, "us", 2) ||
            !strncmp(s, "ns", 2))
            s += 2;
        else if (*s == 'h' || *s == 'm' || *s == 's')
            s++;
        else
            return false;
    }
    return true;
}

/* ${VAR}, ${VAR:-def}, ${VAR-def}, ${VAR:?msg}, ${VAR?msg}, $VAR, $$.
 * Writes the value with defaults (unset without default = "") to out when
 * out is not NULL. False on bad syntax; *no_default when a variable has
 * neither a default nor a required-error form. */
static bool interpolate(const char *s, char *out, size_t cap,
                        bool *no_default)
{
    size_t n = 0;
    *no_default = false;
/* ch must have no side effect: it is not evaluated without out. */
#define PUT(ch)                    \
    do {                           \
        if (out && n + 1 < cap)    \
            out[n++] = (ch);       \
    } while (0)
    while (*s) {
        if (*s != '$') {
            PUT(*s);
            s++;
            continue;
        }
        s++;
        if (*s == '$') {
            PUT('$');
            s++;
            continue;
        }
        bool braced = *s == '{';
        if (braced)
            s++;
        const char *name = s;
        if (!(isalpha((unsigned char)*s) || *s == '_'))
            return false;
        while (isalnum((unsigned char)*s) || *s == '_')
            s++;
        if (s == name)
            return false;
        if (!braced) {
            *no_default = true;
            continue;
        }
        if (*s == '}') {
            *no_default = true;
            s++;
            continue;
        }
        bool def = !strncmp(s, ":-", 2) || *s == '-';
        bool req = !strncmp(s, ":?", 2) || *s == '?';
        if (!def && !req)
            return false;
        s += (*s == ':') ? 2 : 1;
        int depth = 1;
        while (*s && depth) {
            if (*s == '{')
                depth++;
            else if (*s == '}' && --depth == 0)
                break;
            if (def)
                PUT(*s);
            s++;
        }
        if (*s != '}')
            return false;
        s++;
    }
    if (out)
        out[n] = '\0';
    return true;
#undef PUT
}

/* Every scalar: interpolation must parse and give a default. */
static void check_interpolation(ctx_t *c, const char *where,
                                const dc_yaml_t *v)
{
    if (!v)
        return;
    if (v->kind == DC_YAML_SCALAR && strchr(v->str, '$')) {
        bool no_default;
        bool ok = interpolate(v->str, NULL, 0, &no_default);
        EXPECT(c, ok, v, "%s: bad ${...} interpolation in '%s'", where,
               v->str);
        EXPECT(c, !ok || !no_default, v,
               "%s: '%s' uses a variable without a default (${VAR:-x}); "
               "the file must work with no .env", where, v->str);
    }
    for (size_t i = 0; i < v->n; i++)
        check_interpolation(c, where, v->vals[i]);
}

/* The scalar's value with defaults filled in, in buf. */
static const char *value_of(const dc_yaml_t *v, char *buf, size_t cap)
{
    bool nd;
    if (!is_scalar(v))
        return NULL;
    if (!interpolate(v->str, buf, cap, &nd))
        return v->str;
    return buf;
}

/* ---- generic shapes ---- */

static void t_string(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    EXPECT(c, is_scalar(v), v, "%s: must be a string", where);
}

static void t_bool(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    EXPECT(c, is_bool(v), v, "%s: must be true or false", where);
}

static void t_int(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    EXPECT(c, is_int(v), v, "%s: must be an integer", where);
}

static void t_duration(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    char buf[128];
    const char *s = value_of(v, buf, sizeof buf);
    EXPECT(c, s && str_is_duration(s), v,
           "%s: must be a duration such as 30s or 1m30s", where);
}

static void t_string_list(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    bool ok = v && v->kind == DC_YAML_SEQ;
    for (size_t i = 0; ok && i < v->n; i++)
        ok = is_scalar(v->vals[i]);
    EXPECT(c, ok, v, "%s: must be a list of strings", where);
}

static void t_string_or_list(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    if (is_scalar(v))
        return;
    t_string_list(c, where, v);
}

static void t_env(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    if (v && v->kind == DC_YAML_MAP) {
        for (size_t i = 0; i < v->n; i++)
            EXPECT(c, v->vals[i]->kind != DC_YAML_MAP &&
                          v->vals[i]->kind != DC_YAML_SEQ,
                   v->vals[i], "%s.%s: must be a string, number, boolean "
                   "or empty", where, v->keys[i]);
        return;
    }
    t_string_list(c, where, v);
}

static bool check_map(ctx_t *c, const char *where, const dc_yaml_t *v,
                      const key_rule_t *rules, bool allow_x)
{
    if (!v || v->kind != DC_YAML_MAP) {
        PROBLEM(c, v, "%s: must be a mapping", where);
        return false;
    }
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->keys[i];
        const key_rule_t *r = NULL;
        for (const key_rule_t *q = rules; q->key; q++)
            if (!strcmp(q->key, k))
                r = q;
        if (!r) {
            EXPECT(c, allow_x && !strncmp(k, "x-", 2), v->vals[i],
                   "%s: unknown key '%s'", where, k);
            continue;
        }
        c->rep->checks++;
        if (r->fn) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", where, k);
            r->fn(c, sub, v->vals[i]);
        }
    }
    return true;
}

static void t_any(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    CR_UNUSED(c);
    CR_UNUSED(where);
    CR_UNUSED(v);
}

/* ---- service parts ---- */

static void t_build(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"context", t_string}, {"dockerfile", t_string},
        {"dockerfile_inline", t_string}, {"args", t_env}, {"ssh", t_any},
        {"cache_from", t_string_list}, {"cache_to", t_string_list},
        {"additional_contexts", t_any}, {"extra_hosts", t_any},
        {"isolation", t_string}, {"labels", t_any}, {"network", t_string},
        {"no_cache", t_bool}, {"pull", t_bool}, {"platforms", t_string_list},
        {"privileged", t_bool}, {"secrets", t_any}, {"shm_size", t_any},
        {"tags", t_string_list}, {"target", t_string}, {"ulimits", t_any},
        {"entitlements", t_string_list}, {NULL, NULL}};
    if (is_scalar(v))
        return;
    check_map(c, where, v, rules, true);
}

static const char *const depends_conditions[] = {
    "service_started", "service_healthy", "service_completed_successfully",
    NULL};

static bool in_list(const char *s, const char *const *list)
{
    for (; s && *list; list++)
        if (!strcmp(s, *list))
            return true;
    return false;
}

static void t_depends_condition(ctx_t *c, const char *where,
                                const dc_yaml_t *v)
{
    EXPECT(c, in_list(dc_yaml_str(v), depends_conditions), v,
           "%s: must be service_started, service_healthy or "
           "service_completed_successfully", where);
}

static void t_depends_on(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {{"condition", t_depends_condition},
                                       {"restart", t_bool},
                                       {"required", t_bool},
                                       {NULL, NULL}};
    if (v && v->kind == DC_YAML_MAP) {
        for (size_t i = 0; i < v->n; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.%s", where, v->keys[i]);
            if (check_map(c, sub, v->vals[i], rules, false))
                EXPECT(c, dc_yaml_get(v->vals[i], "condition"), v->vals[i],
                       "%s: needs a condition", sub);
        }
        return;
    }
    t_string_list(c, where, v);
}

static void t_device_count(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    EXPECT(c, is_int(v) || (is_scalar(v) && !strcmp(v->str, "all")), v,
           "%s: must be an integer or \"all\"", where);
}

static void t_device_list(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"capabilities", t_string_list}, {"count", t_device_count},
        {"device_ids", t_string_list}, {"driver", t_string},
        {"options", t_any}, {NULL, NULL}};
    if (!v || v->kind != DC_YAML_SEQ) {
        PROBLEM(c, v, "%s: must be a list", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        const dc_yaml_t *d = v->vals[i];
        if (!check_map(c, where, d, rules, true))
            continue;
        EXPECT(c, dc_yaml_get(d, "capabilities"), d,
               "%s: a device reservation needs capabilities", where);
        EXPECT(c, !(dc_yaml_get(d, "count") && dc_yaml_get(d, "device_ids")),
               d, "%s: count and device_ids exclude each other", where);
    }
}

static void t_resources_part(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"cpus", t_any}, {"memory", t_string}, {"pids", t_int},
        {"devices", t_device_list}, {"generic_resources", t_any},
        {NULL, NULL}};
    check_map(c, where, v, rules, true);
}

static void t_resources(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {{"limits", t_resources_part},
                                       {"reservations", t_resources_part},
                                       {NULL, NULL}};
    check_map(c, where, v, rules, true);
}

static void t_restart_policy(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"condition", t_string}, {"delay", t_duration},
        {"max_attempts", t_int}, {"window", t_duration}, {NULL, NULL}};
    check_map(c, where, v, rules, true);
}

static void t_deploy(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"mode", t_string}, {"replicas", t_int}, {"labels", t_any},
        {"update_config", t_any}, {"rollback_config", t_any},
        {"restart_policy", t_restart_policy}, {"placement", t_any},
        {"endpoint_mode", t_string}, {"resources", t_resources},
        {NULL, NULL}};
    /* `deploy: !reset {}` in an override empties it. */
    if (v && v->tag && v->kind == DC_YAML_MAP && v->n == 0)
        return;
    check_map(c, where, v, rules, true);
}

static void t_env_file(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {{"path", t_string},
                                       {"required", t_bool},
                                       {"format", t_string},
                                       {NULL, NULL}};
    if (is_scalar(v))
        return;
    if (!v || v->kind != DC_YAML_SEQ) {
        PROBLEM(c, v, "%s: must be a path or a list", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        const dc_yaml_t *e = v->vals[i];
        if (is_scalar(e))
            continue;
        if (check_map(c, where, e, rules, false))
            EXPECT(c, is_scalar(dc_yaml_get(e, "path")), e,
                   "%s: an entry needs a path", where);
    }
}

static void t_health_test(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    if (is_scalar(v))
        return; /* a string runs under CMD-SHELL */
    t_string_list(c, where, v);
    if (v && v->kind == DC_YAML_SEQ && v->n) {
        const char *first = dc_yaml_str(v->vals[0]);
        static const char *const kinds[] = {"NONE", "CMD", "CMD-SHELL",
                                            NULL};
        EXPECT(c, in_list(first, kinds), v,
               "%s: a list starts with NONE, CMD or CMD-SHELL", where);
        EXPECT(c, !first || !strcmp(first, "NONE") || v->n >= 2, v,
               "%s: no command after %s", where, first ? first : "");
    }
}

static void t_healthcheck(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"test", t_health_test}, {"interval", t_duration},
        {"timeout", t_duration}, {"start_period", t_duration},
        {"start_interval", t_duration}, {"retries", t_int},
        {"disable", t_bool}, {NULL, NULL}};
    check_map(c, where, v, rules, true);
}

/* "[[ip:]host:]container[/proto]", ranges allowed, IPv6 in brackets. */
static bool port_string_ok(const char *s, char *host_ip, size_t cap)
{
    host_ip[0] = '\0';
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *proto = strchr(buf, '/');
    if (proto) {
        *proto++ = '\0';
        if (strcmp(proto, "tcp") && strcmp(proto, "udp") &&
            strcmp(proto, "sctp"))
            return false;
    }
    char *parts[3];
    size_t np = 0;
    char *p = buf;
    if (*p == '[') {
        char *end = strchr(p, ']');
        if (!end || end[1] != ':')
            return false;
        *end = '\0';
        int w = snprintf(host_ip, cap, "%s", p + 1);
        if (w < 0 || (size_t)w >= cap)
            return false; /* no address is that long */
        parts[np++] = p + 1;
        p = end + 2;
    }
    for (char *tok = p;; ) {
        char *colon = strchr(tok, ':');
        if (np >= 3)
            return false;
        parts[np++] = tok;
        if (!colon)
            break;
        *colon = '\0';
        tok = colon + 1;
    }
    if (np == 3 && !host_ip[0])
        snprintf(host_ip, cap, "%s", parts[0]);
    /* host and container parts: N or N-M, the host part may be empty. */
    for (size_t i = np == 3 ? 1 : 0; i < np; i++) {
        const char *q = parts[i];
        if (!*q && i + 1 < np)
            continue;
        char *end;
        long a = strtol(q, &end, 10);
        if (end == q || a < 1 || a > 65535)
            return false;
        if (*end == '-') {
            const char *r = end + 1;
            long b = strtol(r, &end, 10);
            if (end == r || b < a || b > 65535)
                return false;
        }
        if (*end)
            return false;
    }
    return true;
}

static void t_ports(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"target", t_int}, {"published", t_any}, {"host_ip", t_string},
        {"protocol", t_string}, {"mode", t_string}, {"name", t_string},
        {"app_protocol", t_string}, {NULL, NULL}};
    if (!v || v->kind != DC_YAML_SEQ) {
        PROBLEM(c, v, "%s: must be a list", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        const dc_yaml_t *p = v->vals[i];
        if (p->kind == DC_YAML_MAP) {
            if (check_map(c, where, p, rules, true))
                EXPECT(c, is_int(dc_yaml_get(p, "target")), p,
                       "%s: a port needs an integer target", where);
            continue;
        }
        char buf[256], ip[128];
        const char *s = value_of(p, buf, sizeof buf);
        EXPECT(c, s && port_string_ok(s, ip, sizeof ip), p,
               "%s: '%s' is not [[ip:]host:]container[/proto]", where,
               s ? s : "(not a string)");
    }
}

static void t_restart(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    const char *s = dc_yaml_str(v);
    bool ok = s && (!strcmp(s, "no") || !strcmp(s, "always") ||
                    !strcmp(s, "unless-stopped") ||
                    !strcmp(s, "on-failure") ||
                    (!strncmp(s, "on-failure:", 11) && str_is_int(s + 11)));
    EXPECT(c, ok, v, "%s: must be no, always, on-failure[:N] or "
           "unless-stopped", where);
}

static void t_pull_policy(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const char *const ok[] = {"always", "never", "missing",
                                     "if_not_present", "build", NULL};
    EXPECT(c, in_list(dc_yaml_str(v), ok), v, "%s: unknown pull policy",
           where);
}

static void t_ulimits(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {{"soft", t_int}, {"hard", t_int},
                                       {NULL, NULL}};
    if (!v || v->kind != DC_YAML_MAP) {
        PROBLEM(c, v, "%s: must be a mapping", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s", where, v->keys[i]);
        if (is_int(v->vals[i]))
            continue;
        if (check_map(c, sub, v->vals[i], rules, false))
            EXPECT(c, dc_yaml_get(v->vals[i], "soft") &&
                          dc_yaml_get(v->vals[i], "hard"),
                   v->vals[i], "%s: needs soft and hard", sub);
    }
}

/* "source:target[:mode]" or "target"; a long-form mapping. */
static void t_svc_volumes(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"type", t_string}, {"source", t_string}, {"target", t_string},
        {"read_only", t_bool}, {"bind", t_any}, {"volume", t_any},
        {"tmpfs", t_any}, {"image", t_any}, {"consistency", t_string},
        {NULL, NULL}};
    if (!v || v->kind != DC_YAML_SEQ) {
        PROBLEM(c, v, "%s: must be a list", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        const dc_yaml_t *m = v->vals[i];
        if (m->kind == DC_YAML_MAP) {
            if (check_map(c, where, m, rules, true))
                EXPECT(c, is_scalar(dc_yaml_get(m, "target")), m,
                       "%s: a volume needs a target", where);
            continue;
        }
        const char *s = dc_yaml_str(m);
        bool ok = s != NULL;
        if (ok) {
            const char *c1 = strchr(s, ':');
            const char *target = c1 ? c1 + 1 : s;
            const char *c2 = strchr(target, ':');
            ok = target[0] == '/' && (!c1 || c1 != s);
            if (ok && c2) {
                static const char *const modes[] = {
                    "ro", "rw", "z", "Z", "ro,z", "ro,Z", "rw,z", "rw,Z",
                    "nocopy", "ro,nocopy", "rw,nocopy", NULL};
                ok = in_list(c2 + 1, modes);
            }
        }
        EXPECT(c, ok, m, "%s: '%s' is not [source:]/target[:mode]", where,
               s ? s : "(not a string)");
    }
}

static const key_rule_t service_rules[] = {
    {"annotations", t_any}, {"attach", t_bool}, {"build", t_build},
    {"blkio_config", t_any}, {"cap_add", t_string_list},
    {"cap_drop", t_string_list}, {"cgroup", t_string},
    {"cgroup_parent", t_string}, {"command", t_string_or_list},
    {"configs", t_any}, {"container_name", t_string}, {"cpu_count", t_any},
    {"cpu_percent", t_any}, {"cpu_shares", t_any}, {"cpu_period", t_any},
    {"cpu_quota", t_any}, {"cpu_rt_runtime", t_any},
    {"cpu_rt_period", t_any}, {"cpus", t_any}, {"cpuset", t_string},
    {"credential_spec", t_any}, {"depends_on", t_depends_on},
    {"deploy", t_deploy}, {"develop", t_any},
    {"device_cgroup_rules", t_string_list}, {"devices", t_any},
    {"dns", t_string_or_list}, {"dns_opt", t_string_list},
    {"dns_search", t_string_or_list}, {"domainname", t_string},
    {"entrypoint", t_string_or_list}, {"env_file", t_env_file},
    {"environment", t_env}, {"expose", t_any}, {"extends", t_any},
    {"external_links", t_string_list}, {"extra_hosts", t_any},
    {"gpus", t_any}, {"group_add", t_string_list},
    {"healthcheck", t_healthcheck}, {"hostname", t_string},
    {"image", t_string}, {"init", t_bool}, {"ipc", t_string},
    {"isolation", t_string}, {"labels", t_any}, {"links", t_string_list},
    {"logging", t_any}, {"mac_address", t_string}, {"mem_limit", t_any},
    {"mem_reservation", t_any}, {"mem_swappiness", t_any},
    {"memswap_limit", t_any}, {"network_mode", t_string},
    {"networks", t_any}, {"oom_kill_disable", t_bool},
    {"oom_score_adj", t_int}, {"pid", t_string}, {"pids_limit", t_any},
    {"platform", t_string}, {"ports", t_ports}, {"post_start", t_any},
    {"pre_stop", t_any}, {"privileged", t_bool},
    {"profiles", t_string_list}, {"pull_policy", t_pull_policy},
    {"read_only", t_bool}, {"restart", t_restart}, {"runtime", t_string},
    {"scale", t_int}, {"secrets", t_any}, {"security_opt", t_string_list},
    {"shm_size", t_any}, {"stdin_open", t_bool},
    {"stop_grace_period", t_duration}, {"stop_signal", t_string},
    {"storage_opt", t_any}, {"sysctls", t_any},
    {"tmpfs", t_string_or_list}, {"tty", t_bool}, {"ulimits", t_ulimits},
    {"user", t_string}, {"userns_mode", t_string}, {"uts", t_string},
    {"volumes", t_svc_volumes}, {"volumes_from", t_string_list},
    {"working_dir", t_string}, {NULL, NULL}};

static void t_top_volumes(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    static const key_rule_t rules[] = {
        {"driver", t_string}, {"driver_opts", t_any}, {"external", t_any},
        {"labels", t_any}, {"name", t_string}, {NULL, NULL}};
    if (!v || v->kind != DC_YAML_MAP) {
        PROBLEM(c, v, "%s: must be a mapping", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s", where, v->keys[i]);
        if (v->vals[i]->kind != DC_YAML_NULL)
            check_map(c, sub, v->vals[i], rules, true);
    }
}

static void t_services(ctx_t *c, const char *where, const dc_yaml_t *v)
{
    if (!v || v->kind != DC_YAML_MAP) {
        PROBLEM(c, v, "%s: must be a mapping", where);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s", where, v->keys[i]);
        check_map(c, sub, v->vals[i], service_rules, true);
    }
}

static void t_obsolete_version(ctx_t *c, const char *where,
                               const dc_yaml_t *v)
{
    PROBLEM(c, v, "%s: obsolete (Compose ignores it); remove it", where);
}

static const key_rule_t top_rules[] = {
    {"name", t_string}, {"services", t_services},
    {"volumes", t_top_volumes}, {"networks", t_any}, {"configs", t_any},
    {"secrets", t_any}, {"include", t_any},
    {"version", t_obsolete_version}, {NULL, NULL}};

/* ---- tags ---- */

static void check_tags(ctx_t *c, const dc_yaml_t *v)
{
    if (!v)
        return;
    if (v->tag) {
        bool known = !strcmp(v->tag, "!reset") || !strcmp(v->tag, "!override");
        EXPECT(c, known, v, "unknown tag %s", v->tag);
        EXPECT(c, !known || c->o->override, v,
               "%s in the main compose file: keep it for override files",
               v->tag);
    }
    for (size_t i = 0; i < v->n; i++)
        check_tags(c, v->vals[i]);
}

/* ---- policy ---- */

/* The image a service runs, from its build section (parsed once per
 * Dockerfile). NULL when it has none or it cannot be checked. */
static const dc_image_t *service_image(ctx_t *c, const char *name,
                                       const dc_yaml_t *svc)
{
    const dc_yaml_t *b = dc_yaml_get(svc, "build");
    const char *ctxdir = dc_yaml_str(b), *dockerfile = "Dockerfile";
    if (b && b->kind == DC_YAML_MAP) {
        ctxdir = dc_yaml_str(dc_yaml_get(b, "context"));
        if (dc_yaml_str(dc_yaml_get(b, "dockerfile")))
            dockerfile = dc_yaml_str(dc_yaml_get(b, "dockerfile"));
    }
    if (!ctxdir) {
        EXPECT(c, false, svc, "services.%s: no build context (this check "
               "needs to know the image's Dockerfile)", name);
        return NULL;
    }
    char context[2048], df[4096];
    if (ctxdir[0] == '/')
        snprintf(context, sizeof context, "%s", ctxdir);
    else
        snprintf(context, sizeof context, "%s/%s", c->dir, ctxdir);
    snprintf(df, sizeof df, "%s/%s", context, dockerfile);
    struct stat sb;
    if (stat(context, &sb) || !S_ISDIR(sb.st_mode)) {
        PROBLEM(c, b, "services.%s: build context %s is not a directory",
                name, context);
        return NULL;
    }
    if (stat(df, &sb)) {
        PROBLEM(c, b, "services.%s: Dockerfile %s does not exist", name, df);
        return NULL;
    }
    for (size_t i = 0; i < c->n_images; i++)
        if (!strcmp(c->images[i].dockerfile, df))
            return &c->images[i].img;
    if (c->n_images >= MAX_IMAGES)
        return NULL;
    built_image_t *bi = &c->images[c->n_images];
    snprintf(bi->dockerfile, sizeof bi->dockerfile, "%s", df);
    cr_err_t err;
    if (dc_dockerfile_check(df, context, c->o->maps, c->o->n_maps, &bi->img,
                            c->rep, &err)) {
        PROBLEM(c, b, "services.%s: %s", name, err.msg);
        return NULL;
    }
    c->n_images++;
    return &bi->img;
}

static void expect_in_image(ctx_t *c, const char *what, const dc_yaml_t *at,
                            const dc_image_t *img, const char *prog)
{
    const dc_image_file_t *f = img ? dc_image_which(img, prog) : NULL;
    EXPECT(c, !img || (f && f->exec), at,
           "%s: '%s' is not an executable file of the image", what, prog);
}

/* command: must be services.txt's argv, in exec (list) form. */
static void policy_command(ctx_t *c, const char *name, const dc_yaml_t *svc,
                           const dc_service_t *want, const dc_image_t *img)
{
    const dc_yaml_t *cmd = dc_yaml_get(svc, "command");
    if (!cmd && c->o->override)
        return;
    char where[128];
    snprintf(where, sizeof where, "services.%s.command", name);
    bool list = cmd && cmd->kind == DC_YAML_SEQ;
    EXPECT(c, list, cmd ? cmd : svc, "%s: must be a list (exec form) equal "
           "to deploy/services.txt's argv", where);
    EXPECT(c, !dc_yaml_get(svc, "entrypoint"), svc,
           "services.%s: no entrypoint: the command alone says what runs",
           name);
    if (!list)
        return;
    bool same = cmd->n == want->argv.n;
    for (size_t i = 0; same && i < cmd->n; i++)
        same = dc_yaml_str(cmd->vals[i]) &&
               !strcmp(dc_yaml_str(cmd->vals[i]), want->argv.w[i]);
    EXPECT(c, same, cmd, "%s: differs from deploy/services.txt (%s ...)",
           where, want->argv.w[0]);
    if (cmd->n && dc_yaml_str(cmd->vals[0]))
        expect_in_image(c, where, cmd, img, dc_yaml_str(cmd->vals[0]));
}

static void policy_health(ctx_t *c, const char *name, const dc_yaml_t *svc,
                          const dc_image_t *img)
{
    const dc_yaml_t *h = dc_yaml_get(svc, "healthcheck");
    EXPECT(c, h && !is_plain(dc_yaml_get(h, "disable"), "true"), svc,
           "services.%s: needs a healthcheck", name);
    const dc_yaml_t *t = dc_yaml_get(h, "test");
    if (!h)
        return;
    bool cmd_form = t && t->kind == DC_YAML_SEQ && t->n >= 2 &&
                    dc_yaml_str(t->vals[0]) &&
                    !strcmp(dc_yaml_str(t->vals[0]), "CMD");
    EXPECT(c, cmd_form, t ? t : h, "services.%s.healthcheck.test: use "
           "[\"CMD\", program, args...] so the program is checked", name);
    if (cmd_form && dc_yaml_str(t->vals[1])) {
        char what[128];
        snprintf(what, sizeof what, "services.%s.healthcheck.test", name);
        expect_in_image(c, what, t, img, dc_yaml_str(t->vals[1]));
    }
    const char *r = dc_yaml_str(dc_yaml_get(svc, "restart"));
    EXPECT(c, r && strcmp(r, "no"), svc,
           "services.%s: needs a restart policy", name);
}

/* Mount of a named volume: "name:/target[:mode]". */
typedef struct mount {
    char volume[64];
    char target[512];
    bool ro;
} mount_t;

static size_t service_mounts(const dc_yaml_t *svc, mount_t *out, size_t cap)
{
    const dc_yaml_t *vols = dc_yaml_get(svc, "volumes");
    size_t n = 0;
    for (size_t i = 0; vols && vols->kind == DC_YAML_SEQ && i < vols->n &&
                       n < cap; i++) {
        const char *s = dc_yaml_str(vols->vals[i]);
        const dc_yaml_t *m = vols->vals[i];
        mount_t mt = {0};
        if (s) {
            const char *c1 = strchr(s, ':');
            if (!c1 || s[0] == '/' || s[0] == '.' || s[0] == '~')
                continue; /* anonymous volume or bind mount */
            snprintf(mt.volume, sizeof mt.volume, "%.*s", (int)(c1 - s), s);
            const char *c2 = strchr(c1 + 1, ':');
            snprintf(mt.target, sizeof mt.target, "%.*s",
                     (int)(c2 ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1)),
                     c1 + 1);
            mt.ro = c2 && !strncmp(c2 + 1, "ro", 2);
        } else if (m->kind == DC_YAML_MAP) {
            const char *type = dc_yaml_str(dc_yaml_get(m, "type"));
            const char *src = dc_yaml_str(dc_yaml_get(m, "source"));
            const char *tgt = dc_yaml_str(dc_yaml_get(m, "target"));
            if (!type || strcmp(type, "volume") || !src || !tgt)
                continue;
            snprintf(mt.volume, sizeof mt.volume, "%s", src);
            snprintf(mt.target, sizeof mt.target, "%s", tgt);
            mt.ro = is_plain(dc_yaml_get(m, "read_only"), "true");
        } else {
            continue;
        }
        out[n++] = mt;
    }
    return n;
}

static const char *service_env(const dc_yaml_t *svc, const char *key)
{
    const dc_yaml_t *env = dc_yaml_get(svc, "environment");
    if (env && env->kind == DC_YAML_MAP)
        return dc_yaml_str(dc_yaml_get(env, key));
    size_t kl = strlen(key);
    for (size_t i = 0; env && env->kind == DC_YAML_SEQ && i < env->n; i++) {
        const char *s = dc_yaml_str(env->vals[i]);
        if (s && !strncmp(s, key, kl) && s[kl] == '=')
            return s + kl + 1;
    }
    return NULL;
}

/* The mount whose target holds path (the longest such). */
static const mount_t *mount_holding(const mount_t *m, size_t n,
                                    const char *path)
{
    const mount_t *best = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t tl = strlen(m[i].target);
        if (!strncmp(path, m[i].target, tl) &&
            (path[tl] == '/' || path[tl] == '\0') &&
            (!best || tl > strlen(best->target)))
            best = &m[i];
    }
    return best;
}

/* A directory setting (CORRAL_RUNTIME_DIR, CORRAL_MODELS) must be the same
 * in every service that sets it, on the same named volume mounted at the
 * same place; `writer` must mount it read-write. */
static void policy_shared_dir(ctx_t *c, const dc_yaml_t *services,
                              const char *var, const char *writer,
                              bool everyone)
{
    const char *value = NULL, *volume = NULL, *target = NULL;
    for (size_t i = 0; i < services->n; i++) {
        const char *name = services->keys[i];
        const dc_yaml_t *svc = services->vals[i];
        const char *v = service_env(svc, var);
        if (!v) {
            EXPECT(c, !everyone, svc, "services.%s: environment must set "
                   "%s (the services share it)", name, var);
            continue;
        }
        EXPECT(c, !value || !strcmp(value, v), svc, "services.%s: %s=%s, "
               "but another service has %s", name, var, v, value);
        if (!value)
            value = v;
        mount_t m[16];
        size_t n = service_mounts(svc, m, 16);
        const mount_t *mt = mount_holding(m, n, v);
        EXPECT(c, mt != NULL, svc, "services.%s: %s=%s is on no named "
               "volume, so the other containers cannot see it", name, var,
               v);
        if (!mt)
            continue;
        EXPECT(c, !volume || (!strcmp(volume, mt->volume) &&
                              !strcmp(target, mt->target)),
               svc, "services.%s: %s is on volume %s at %s, another service "
               "has %s at %s", name, var, mt->volume, mt->target,
               volume ? volume : "", target ? target : "");
        if (!volume) {
            volume = mt->volume;
            target = mt->target;
        }
        if (!strcmp(name, writer))
            EXPECT(c, !mt->ro, svc, "services.%s: must mount %s read-write",
                   name, mt->volume);
    }
}

static void policy_volumes(ctx_t *c, const dc_yaml_t *root,
                           const dc_yaml_t *services)
{
    const dc_yaml_t *declared = dc_yaml_get(root, "volumes");
    bool used[64] = {false};
    for (size_t i = 0; i < services->n; i++) {
        mount_t m[16];
        size_t n = service_mounts(services->vals[i], m, 16);
        for (size_t k = 0; k < n; k++) {
            bool found = false;
            for (size_t d = 0; declared && d < declared->n && d < 64; d++)
                if (!strcmp(declared->keys[d], m[k].volume))
                    found = used[d] = true;
            EXPECT(c, found, services->vals[i], "services.%s: volume '%s' "
                   "is not declared under top-level volumes",
                   services->keys[i], m[k].volume);
        }
    }
    for (size_t d = 0; declared && d < declared->n && d < 64; d++)
        EXPECT(c, used[d], declared->vals[d], "volumes.%s: not used",
               declared->keys[d]);
}

static void policy_ports(ctx_t *c, const char *name, const dc_yaml_t *svc)
{
    const dc_yaml_t *ports = dc_yaml_get(svc, "ports");
    for (size_t i = 0; ports && ports->kind == DC_YAML_SEQ && i < ports->n;
         i++) {
        const dc_yaml_t *p = ports->vals[i];
        char buf[256], ip[128] = "";
        if (p->kind == DC_YAML_MAP) {
            const char *h = value_of(dc_yaml_get(p, "host_ip"), buf,
                                     sizeof buf);
            if (snprintf(ip, sizeof ip, "%s", h ? h : "") >= (int)sizeof ip)
                ip[0] = '\0'; /* not an address; checked below as such */
        } else {
            const char *s = value_of(p, buf, sizeof buf);
            if (!s || !port_string_ok(s, ip, sizeof ip))
                continue; /* reported by the schema */
        }
        EXPECT(c, !strcmp(ip, "127.0.0.1") || !strcmp(ip, "::1") ||
                      !strcmp(ip, "localhost"),
               p, "services.%s.ports: published on '%s'; by default publish "
               "on 127.0.0.1 only", name, ip[0] ? ip : "every interface");
    }
}

static void policy_gpu(ctx_t *c, const char *name, const dc_yaml_t *svc)
{
    const dc_yaml_t *devs = dc_yaml_get(
        dc_yaml_get(dc_yaml_get(dc_yaml_get(svc, "deploy"), "resources"),
                    "reservations"),
        "devices");
    bool nvidia = false;
    for (size_t i = 0; devs && devs->kind == DC_YAML_SEQ && i < devs->n;
         i++) {
        const dc_yaml_t *d = devs->vals[i];
        const char *drv = dc_yaml_str(dc_yaml_get(d, "driver"));
        const dc_yaml_t *caps = dc_yaml_get(d, "capabilities");
        bool gpu = false;
        for (size_t k = 0; caps && caps->kind == DC_YAML_SEQ && k < caps->n;
             k++)
            gpu |= dc_yaml_str(caps->vals[k]) &&
                   !strcmp(dc_yaml_str(caps->vals[k]), "gpu");
        nvidia |= drv && !strcmp(drv, "nvidia") && gpu;
    }
    EXPECT(c, nvidia, svc, "services.%s: needs deploy.resources."
           "reservations.devices with driver nvidia and capabilities [gpu]",
           name);
}

static void policy_depends(ctx_t *c, const dc_yaml_t *services)
{
    for (size_t i = 0; i < services->n; i++) {
        const dc_yaml_t *d = dc_yaml_get(services->vals[i], "depends_on");
        for (size_t k = 0; d && k < d->n; k++) {
            const char *target = d->kind == DC_YAML_MAP
                                     ? d->keys[k]
                                     : dc_yaml_str(d->vals[k]);
            EXPECT(c, target && dc_yaml_get(services, target) &&
                          strcmp(target, services->keys[i]),
                   d, "services.%s.depends_on: '%s' is not another service",
                   services->keys[i], target ? target : "");
        }
    }
}

static void check_policy(ctx_t *c, const dc_yaml_t *root)
{
    const dc_yaml_t *services = dc_yaml_get(root, "services");
    if (!services || services->kind != DC_YAML_MAP) {
        EXPECT(c, c->o->override, root, "no services");
        return;
    }
    const dc_services_t *want = c->o->services;
    for (size_t i = 0; i < services->n; i++) {
        const char *name = services->keys[i];
        const dc_yaml_t *svc = services->vals[i];
        const dc_service_t *w = dc_services_find(want, name);
        EXPECT(c, w != NULL, svc, "services.%s: not a corral service "
               "(deploy/services.txt)", name);
        if (!w || svc->kind != DC_YAML_MAP)
            continue;
        const dc_image_t *img =
            dc_yaml_get(svc, "build") || !c->o->override
                ? service_image(c, name, svc)
                : NULL;
        policy_command(c, name, svc, w, img);
        if (c->o->override)
            continue;
        EXPECT(c, dc_yaml_get(svc, "image"), svc,
               "services.%s: needs an image name (so the built image is "
               "tagged and shared)", name);
        policy_health(c, name, svc, img);
        policy_ports(c, name, svc);
        if (!strcmp(name, "scheduler"))
            policy_gpu(c, name, svc);
    }
    if (c->o->override)
        return;
    for (size_t k = 0; k < want->n; k++)
        EXPECT(c, dc_yaml_get(services, want->s[k].name), services,
               "services: %s is missing", want->s[k].name);
    policy_depends(c, services);
    policy_volumes(c, root, services);
    policy_shared_dir(c, services, "CORRAL_RUNTIME_DIR", "", true);
    policy_shared_dir(c, services, "CORRAL_MODELS", "registry", false);
}

cr_status_t dc_compose_check(const char *path, const dc_compose_opts_t *o,
                             dc_report_t *rep, cr_err_t *err)
{
    char *text;
    size_t len;
    cr_status_t st = dc_read_file(path, DC_YAML_MAX_BYTES, &text, &len, err);
    if (st)
        return st;
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) {
        free(text);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    c->file = path;
    c->o = o;
    c->rep = rep;
    snprintf(c->dir, sizeof c->dir, "%s", path);
    char *slash = strrchr(c->dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(c->dir, sizeof c->dir, ".");

    dc_yaml_t *root = NULL;
    cr_err_t yerr;
    if (dc_yaml_parse(text, len, &root, &yerr)) {
        dc_problem(rep, path, 0, "%s", yerr.msg);
    } else if (check_map(c, "(top)", root, top_rules, true)) {
        check_tags(c, root);
        check_interpolation(c, "(file)", root);
        check_policy(c, root);
    }
    dc_yaml_free(&root);
    for (size_t i = 0; i < c->n_images; i++)
        dc_image_free(&c->images[i].img);
    free(c);
    free(text);
    return CR_OK;
}
