/* gpus.c: GPU discovery (NVML via dlopen), fake inventories, /proc/meminfo. */
#include "lib/prelude.h"
#include "lib/gpus.h"

#include <dlfcn.h>


/* ---- fake inventories ---- */

static bool parse_i64(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 20)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (v > (INT64_MAX - (s[i] - '0')) / 10)
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t')) {
        (*s)++;
        (*n)--;
    }
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

/* One `index:name:total` or `cpu:total` entry of length n. */
static cr_status_t parse_entry(const char *e, size_t n, int which,
                               cr_inventory_t *inv, cr_err_t *err)
{
    trim(&e, &n);
    const char *c1 = memchr(e, ':', n);
    if (!c1)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_GPU_INVENTORY entry %d '%.*s': expected "
                          "index:name:total_bytes",
                          which, (int)CR_MIN(n, 64), e);
    size_t n0 = (size_t)(c1 - e);
    if (n0 == 3 && !memcmp(e, "cpu", 3)) {
        int64_t ram;
        if (!parse_i64(c1 + 1, n - n0 - 1, &ram))
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_GPU_INVENTORY entry %d: cpu bytes "
                              "'%.*s' is not a number",
                              which, (int)CR_MIN(n - n0 - 1, 64), c1 + 1);
        inv->ram_total_bytes = ram;
        inv->ram_free_bytes = ram;
        return CR_OK;
    }
    /* The name may itself hold colons: the total is after the last one. */
    const char *c2 = e + n;
    while (c2 > c1 + 1 && c2[-1] != ':')
        c2--;
    c2--;
    if (c2 <= c1)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_GPU_INVENTORY entry %d '%.*s': expected "
                          "index:name:total_bytes",
                          which, (int)CR_MIN(n, 64), e);
    int64_t index, total;
    if (!parse_i64(e, n0, &index) || index >= 1024)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_GPU_INVENTORY entry %d: index '%.*s' is not "
                          "a small number",
                          which, (int)CR_MIN(n0, 32), e);
    size_t nt = (size_t)(e + n - c2 - 1);
    if (!parse_i64(c2 + 1, nt, &total) || total <= 0)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_GPU_INVENTORY entry %d: total bytes '%.*s' "
                          "is not a positive number",
                          which, (int)CR_MIN(nt, 32), c2 + 1);
    size_t nn = (size_t)(c2 - c1 - 1);
    const char *name = c1 + 1;
    trim(&name, &nn);
    if (nn == 0)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_GPU_INVENTORY entry %d: empty name", which);
    for (size_t i = 0; i < inv->n_gpus; i++)
        if (inv->gpus[i].index == (int)index)
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_GPU_INVENTORY entry %d: index %d is "
                              "listed twice",
                              which, (int)index);
    if (inv->n_gpus >= CR_MAX_GPUS)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "CORRAL_GPU_INVENTORY lists more than %d GPUs",
                          CR_MAX_GPUS);
    cr_gpu_t *g = &inv->gpus[inv->n_gpus++];
    memset(g, 0, sizeof *g);
    g->index = (int)index;
    snprintf(g->name, sizeof g->name, "%.*s", (int)CR_MIN(nn, 95), name);
    snprintf(g->uuid, sizeof g->uuid, "GPU-fake-%d", (int)index);
    g->total_bytes = total;
    g->free_bytes = total;
    return CR_OK;
}

cr_status_t cr_inventory_parse(const char *spec, cr_inventory_t *inv,
                                cr_err_t *err)
{
    inv->n_gpus = 0;
    inv->fake = true;
    if (!spec)
        return CR_OK;
    size_t len = strlen(spec);
    if (len > CR_INVENTORY_SPEC_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "CORRAL_GPU_INVENTORY is longer than %d bytes",
                          CR_INVENTORY_SPEC_MAX);
    const char *p = spec;
    size_t n = len;
    trim(&p, &n);
    if (n == 0 || (n == 4 && !memcmp(p, "none", 4)))
        return CR_OK;
    int which = 0;
    while (len > 0) {
        const char *comma = memchr(spec, ',', len);
        size_t elen = comma ? (size_t)(comma - spec) : len;
        which++;
        cr_status_t st = parse_entry(spec, elen, which, inv, err);
        if (st) {
            inv->n_gpus = 0;
            return st;
        }
        if (!comma)
            break;
        len -= elen + 1;
        spec = comma + 1;
        if (len == 0) {
            inv->n_gpus = 0;
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_GPU_INVENTORY ends with a comma");
        }
    }
    return CR_OK;
}

/* ---- system memory ---- */

static bool meminfo_kb(const char *text, const char *key, int64_t *bytes)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            const char *v = line + klen + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = 0;
            while (v[n] >= '0' && v[n] <= '9')
                n++;
            int64_t kb;
            if (!parse_i64(v, n, &kb) || kb > INT64_MAX / 1024)
                return false;
            *bytes = kb * 1024;
            return true;
        }
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return false;
}

cr_status_t cr_meminfo_parse(const char *text, int64_t *total_bytes,
                              int64_t *avail_bytes, cr_err_t *err)
{
    int64_t total, avail;
    if (!text || !meminfo_kb(text, "MemTotal", &total))
        return cr_err_set(err, CR_E_CORRUPT,
                          "/proc/meminfo: no readable MemTotal line");
    if (!meminfo_kb(text, "MemAvailable", &avail) &&
        !meminfo_kb(text, "MemFree", &avail))
        avail = total;
    *total_bytes = total;
    *avail_bytes = CR_MIN(avail, total);
    return CR_OK;
}

static void add_note(cr_inventory_t *inv, const char *fmt, ...)
    CR_PRINTF(2, 3);

static void add_note(cr_inventory_t *inv, const char *fmt, ...)
{
    if (inv->n_notes >= CR_INVENTORY_NOTES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(inv->notes[inv->n_notes++], sizeof inv->notes[0], fmt, ap);
    va_end(ap);
}

static void read_meminfo(cr_inventory_t *inv)
{
    char text[8192];
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) {
        add_note(inv, "cannot read /proc/meminfo: %s; system memory unknown",
                 strerror(errno));
        return;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_err_t err;
    if (cr_meminfo_parse(text, &inv->ram_total_bytes, &inv->ram_free_bytes,
                          &err))
        add_note(inv, "%s; system memory unknown", err.msg);
}

/* ---- CUDA_VISIBLE_DEVICES ---- */

void cr_inventory_filter_visible(cr_inventory_t *inv, const char *visible)
{
    if (!visible)
        return;
    cr_gpu_t kept[CR_MAX_GPUS];
    size_t n_kept = 0;
    const char *p = visible;
    while (*p && n_kept < CR_MAX_GPUS) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        trim(&p, &len);
        int found = -1;
        int64_t idx;
        if (len >= 4 && !strncmp(p, "GPU-", 4)) {
            for (size_t i = 0; i < inv->n_gpus; i++)
                if (!strncmp(inv->gpus[i].uuid, p, len))
                    found = found == -1 ? (int)i : -2; /* ambiguous prefix */
        } else if (parse_i64(p, len, &idx)) {
            for (size_t i = 0; i < inv->n_gpus; i++)
                if (i == (size_t)idx)
                    found = (int)i;
        }
        if (found < 0)
            break; /* CUDA stops at the first invalid entry */
        bool dup = false;
        for (size_t i = 0; i < n_kept; i++)
            if (!strcmp(kept[i].uuid, inv->gpus[found].uuid) &&
                kept[i].index == inv->gpus[found].index)
                dup = true;
        if (dup)
            break;
        kept[n_kept++] = inv->gpus[found];
        if (!end)
            break;
        p = end + 1;
    }
    for (size_t i = 0; i < n_kept; i++) {
        inv->gpus[i] = kept[i];
        inv->gpus[i].index = (int)i;
    }
    inv->n_gpus = n_kept;
}

/* ---- NVML ---- */

/* The few NVML entry points used, declared by their documented C ABI so no
 * NVIDIA header is needed. */
typedef int nvml_ret_t;
typedef void *nvml_device_t;
typedef struct nvml_memory {
    unsigned long long total, free, used;
} nvml_memory_t;

typedef struct nvml_api {
    nvml_ret_t (*init)(void);
    nvml_ret_t (*shutdown)(void);
    nvml_ret_t (*count)(unsigned int *);
    nvml_ret_t (*handle)(unsigned int, nvml_device_t *);
    nvml_ret_t (*name)(nvml_device_t, char *, unsigned int);
    nvml_ret_t (*uuid)(nvml_device_t, char *, unsigned int);
    nvml_ret_t (*memory)(nvml_device_t, nvml_memory_t *);
    nvml_ret_t (*cc)(nvml_device_t, int *, int *);
} nvml_api_t;

static void *sym(void *lib, const char *name)
{
    /* dlsym returns void *; LOAD_SYM copies it into a function pointer
     * (POSIX guarantees the representations match). */
    return dlsym(lib, name);
}

#define LOAD_SYM(field, name)                                    \
    do {                                                         \
        void *f_ = sym(lib, name);                               \
        memcpy(&api.field, &f_, sizeof f_);                      \
    } while (0)

cr_status_t cr_nvml_query(cr_inventory_t *inv, cr_err_t *err)
{
    inv->n_gpus = 0;
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return cr_err_set(err, CR_E_NOT_FOUND, "%s", dlerror()); /* names the file */
    nvml_api_t api;
    memset(&api, 0, sizeof api);
    LOAD_SYM(init, "nvmlInit_v2");
    LOAD_SYM(shutdown, "nvmlShutdown");
    LOAD_SYM(count, "nvmlDeviceGetCount_v2");
    LOAD_SYM(handle, "nvmlDeviceGetHandleByIndex_v2");
    LOAD_SYM(name, "nvmlDeviceGetName");
    LOAD_SYM(uuid, "nvmlDeviceGetUUID");
    LOAD_SYM(memory, "nvmlDeviceGetMemoryInfo");
    LOAD_SYM(cc, "nvmlDeviceGetCudaComputeCapability");
    cr_status_t st = CR_OK;
    if (!api.init || !api.shutdown || !api.count || !api.handle ||
        !api.memory) {
        st = cr_err_set(err, CR_E_UNAVAILABLE,
                        "libnvidia-ml.so.1 lacks the NVML v2 entry points");
        goto out_close;
    }
    nvml_ret_t rc = api.init();
    if (rc != 0) {
        st = cr_err_set(err, CR_E_UNAVAILABLE, "nvmlInit_v2 failed (%d)", rc);
        goto out_close;
    }
    unsigned int count = 0;
    if ((rc = api.count(&count)) != 0) {
        st = cr_err_set(err, CR_E_UNAVAILABLE,
                        "nvmlDeviceGetCount_v2 failed (%d)", rc);
        goto out_shutdown;
    }
    for (unsigned int i = 0; i < count && inv->n_gpus < CR_MAX_GPUS; i++) {
        nvml_device_t dev = NULL;
        nvml_memory_t mem = {0};
        if (api.handle(i, &dev) != 0 || api.memory(dev, &mem) != 0) {
            add_note(inv, "NVML device %u: cannot read its memory; skipped", i);
            continue;
        }
        cr_gpu_t *g = &inv->gpus[inv->n_gpus++];
        memset(g, 0, sizeof *g);
        g->index = (int)i;
        if (!api.name || api.name(dev, g->name, sizeof g->name) != 0)
            snprintf(g->name, sizeof g->name, "GPU %u", i);
        if (api.uuid && api.uuid(dev, g->uuid, sizeof g->uuid) != 0)
            g->uuid[0] = '\0';
        if (api.cc && api.cc(dev, &g->cc_major, &g->cc_minor) != 0)
            g->cc_major = g->cc_minor = 0;
        g->name[sizeof g->name - 1] = '\0';
        g->uuid[sizeof g->uuid - 1] = '\0';
        g->total_bytes = mem.total > (unsigned long long)INT64_MAX
                             ? INT64_MAX
                             : (int64_t)mem.total;
        g->free_bytes = mem.free > mem.total ? g->total_bytes
                                             : (int64_t)mem.free;
    }
out_shutdown:
    api.shutdown();
out_close:
    dlclose(lib);
    return st;
}

#undef LOAD_SYM

cr_status_t cr_inventory_discover(cr_inventory_t *inv, cr_err_t *err)
{
    memset(inv, 0, sizeof *inv);
    read_meminfo(inv);
    const char *spec = getenv("CORRAL_GPU_INVENTORY");
    if (spec)
        return cr_inventory_parse(spec, inv, err);
    cr_err_t nerr;
    if (cr_nvml_query(inv, &nerr)) {
        add_note(inv, "no NVIDIA GPUs (%s); models run on the CPU", nerr.msg);
        inv->n_gpus = 0;
        return CR_OK;
    }
    cr_inventory_filter_visible(inv, getenv("CUDA_VISIBLE_DEVICES"));
    return CR_OK;
}

size_t cr_inventory_lines(const cr_inventory_t *inv)
{
    return inv->n_notes + inv->n_gpus + 1;
}

void cr_inventory_line(const cr_inventory_t *inv, size_t k, char *out,
                       size_t cap)
{
    if (k < inv->n_notes) {
        snprintf(out, cap, "%s", inv->notes[k]);
        return;
    }
    k -= inv->n_notes;
    if (k < inv->n_gpus) {
        const cr_gpu_t *g = &inv->gpus[k];
        snprintf(out, cap, "gpu %d: %s (cc %d.%d) %s, %.1f GiB total, %.1f GiB free%s",
                 g->index, g->name, g->cc_major, g->cc_minor, g->uuid,
                 (double)g->total_bytes / (1 << 30),
                 (double)g->free_bytes / (1 << 30),
                 inv->fake ? " (described by CORRAL_GPU_INVENTORY)" : "");
        return;
    }
    snprintf(out, cap, "system memory: %.1f GiB total, %.1f GiB available",
             (double)inv->ram_total_bytes / (1 << 30),
             (double)inv->ram_free_bytes / (1 << 30));
}
