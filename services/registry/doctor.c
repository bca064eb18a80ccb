/* doctor.c: store checks for `corral doctor` (doctor.h). Blobs are hashed
 * once each, however many manifests name them. */
#include "services/registry/doctor.h"
#include "services/registry/manifest.h"
#include "lib/env.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the scan learned of one blob. */
typedef struct blob_state {
    char hex[REG_HEX_LEN + 1];
    bool checked;
    bool bad;      /* missing, or its bytes do not hash to its name */
    bool used;     /* named by a manifest that parses */
    int64_t size;  /* -1 if missing */
} blob_state_t;

typedef struct doctor {
    reg_store_t *s;
    bool fix;
    FILE *out;
    reg_doctor_report_t *rep;
    blob_state_t *blobs;
    size_t n_blobs, cap_blobs;
} doctor_t;

static void finding(doctor_t *d, const char *fmt, ...) CR_PRINTF(2, 3);
static void finding(doctor_t *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
    fputc('\n', d->out);
    d->rep->problems++;
}

static void remove_path(doctor_t *d, const char *path, const char *shown)
{
    if (unlink(path) == 0) {
        fprintf(d->out, "removed %s\n", shown);
        d->rep->removed++;
    } else {
        fprintf(d->out, "cannot remove %s: %s\n", shown, strerror(errno));
    }
}

/* SHA-256 of a file into hex; false if it cannot be read. */
static bool hash_file(const char *path, char hex[REG_HEX_LEN + 1], int64_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    static uint8_t buf[1 << 20];
    int64_t total = 0;
    for (ssize_t n; ok && (n = read(fd, buf, sizeof buf)) != 0;) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            ok = false;
            break;
        }
        ok = EVP_DigestUpdate(ctx, buf, (size_t)n) == 1;
        total += n;
    }
    uint8_t md[32];
    unsigned md_len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len) == 1 && md_len == 32;
    EVP_MD_CTX_free(ctx);
    close(fd);
    if (ok) {
        for (unsigned i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", md[i]);
        *size = total;
    }
    return ok;
}

static blob_state_t *blob_state(doctor_t *d, const char *hex)
{
    for (size_t i = 0; i < d->n_blobs; i++)
        if (!strcmp(d->blobs[i].hex, hex))
            return &d->blobs[i];
    if (d->n_blobs == d->cap_blobs) {
        size_t cap = d->cap_blobs ? 2 * d->cap_blobs : 64;
        blob_state_t *v = realloc(d->blobs, cap * sizeof *v);
        if (!v)
            return NULL;
        d->blobs = v;
        d->cap_blobs = cap;
    }
    blob_state_t *b = &d->blobs[d->n_blobs++];
    memset(b, 0, sizeof *b);
    snprintf(b->hex, sizeof b->hex, "%s", hex);
    return b;
}

/* Hashes a blob on first sight, reporting it once if corrupt. */
static blob_state_t *check_blob(doctor_t *d, const char *hex)
{
    blob_state_t *b = blob_state(d, hex);
    if (!b || b->checked)
        return b;
    b->checked = true;
    char path[REG_PATH_MAX], got[REG_HEX_LEN + 1];
    if (!reg_store_blob_path(d->s, hex, path, sizeof path) ||
        !reg_store_blob_exists(d->s, hex, NULL)) {
        b->bad = true;
        b->size = -1;
        return b;
    }
    d->rep->blobs++;
    if (!hash_file(path, got, &b->size)) {
        b->bad = true;
        finding(d, "unreadable blob sha256-%s: %s", hex, strerror(errno));
    } else if (strcmp(got, hex) != 0) {
        b->bad = true;
        finding(d, "corrupt blob sha256-%s: its content hashes to sha256-%s", hex, got);
    }
    if (b->bad && d->fix)
        remove_path(d, path, path + strlen(reg_store_root(d->s)) + 1);
    return b;
}

/* One manifest: parses, and every blob it names is present and sound. */
static void check_manifest(doctor_t *d, const cr_model_name_t *name)
{
    char shown[CR_NAME_BUF], rel[REG_PATH_MAX], path[2 * REG_PATH_MAX];
    cr_model_name_full(name, shown, sizeof shown);
    cr_model_name_manifest_relpath(name, rel, sizeof rel);
    snprintf(path, sizeof path, "%s/%s", reg_store_root(d->s), rel);
    d->rep->manifests++;

    char *data = NULL;
    size_t len = 0;
    cr_err_t err = {0};
    reg_manifest_t m;
    bool dangling = false;
    if (reg_store_manifest_read(d->s, name, &data, &len, NULL, &err) != CR_OK) {
        finding(d, "unreadable manifest %s: %s", shown, err.msg);
        dangling = true;
    } else if (reg_manifest_parse(data, len, &m, &err) != CR_OK) {
        finding(d, "corrupt manifest %s: %s", shown, err.msg);
        dangling = true;
    } else {
        for (size_t i = 0; i <= m.n_layers; i++) {
            const reg_layer_t *l = i < m.n_layers ? &m.layers[i] : &m.config;
            if (!l->hex[0])
                continue;
            blob_state_t *b = check_blob(d, l->hex);
            if (!b)
                continue;
            if (b->size < 0) {
                finding(d, "dangling manifest %s: blob sha256-%s (%s) is missing", shown,
                        l->hex, l->media_type ? l->media_type : "config");
                dangling = true;
            } else if (b->bad) {
                finding(d, "dangling manifest %s: blob sha256-%s is corrupt", shown, l->hex);
                dangling = true;
            } else if (l->size != b->size) {
                finding(d, "dangling manifest %s: blob sha256-%s has %lld bytes, the "
                           "manifest says %lld", shown, l->hex, (long long)b->size,
                        (long long)l->size);
                dangling = true;
            }
        }
        /* A dangling manifest's other blobs are unused once it goes. */
        for (size_t i = 0; i <= m.n_layers && !dangling; i++) {
            const reg_layer_t *l = i < m.n_layers ? &m.layers[i] : &m.config;
            blob_state_t *b = l->hex[0] ? blob_state(d, l->hex) : NULL;
            if (b)
                b->used = true;
        }
        reg_manifest_free(&m);
    }
    free(data);
    if (dangling && d->fix)
        remove_path(d, path, rel);
}

/* Partial downloads, temp files and strays in blobs/. */
static void check_blob_dir(doctor_t *d)
{
    char dir[REG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(d->s));
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    for (struct dirent *e; (e = readdir(dh));) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        char path[REG_PATH_MAX + 300], rel[600];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        snprintf(rel, sizeof rel, "blobs/%.500s", n);
        bool blob_name = !strncmp(n, "sha256-", 7) && strlen(n) >= 7 + REG_HEX_LEN;
        if (blob_name && strlen(n) == 7 + REG_HEX_LEN)
            continue; /* a blob: checked through the manifests and below */
        if (blob_name && !strncmp(n + 7 + REG_HEX_LEN, "-partial", 8)) {
            finding(d, "partial file %s (an unfinished pull)", rel);
        } else if (!strncmp(n, ".corral-tmp-", 12)) {
            finding(d, "partial file %s (an unfinished write)", rel);
        } else {
            finding(d, "stray file %s (not a blob; left alone)", rel);
            continue;
        }
        if (d->fix)
            remove_path(d, path, rel);
    }
    closedir(dh);
}

/* Temp files of manifest writes (`.<tag>.tmp-*`), in the folders under
 * manifests/ (host/namespace/model: depth 3). */
static void check_manifest_dir(doctor_t *d, const char *dir, int depth)
{
    DIR *dh = opendir(dir);
    if (!dh)
        return;
    size_t root_len = strlen(reg_store_root(d->s)) + 1;
    for (struct dirent *e; (e = readdir(dh));) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        char path[REG_PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, n) >= sizeof path)
            continue;
        struct stat sb;
        if (lstat(path, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode) && depth < 3) {
            check_manifest_dir(d, path, depth + 1);
        } else if (S_ISREG(sb.st_mode) && n[0] == '.' && strstr(n, ".tmp-")) {
            finding(d, "partial file %s (an unfinished manifest write)", path + root_len);
            if (d->fix)
                remove_path(d, path, path + root_len);
        }
    }
    closedir(dh);
}

cr_status_t reg_doctor_run(reg_store_t *s, bool fix, FILE *out, reg_doctor_report_t *rep,
                           cr_err_t *err)
{
    memset(rep, 0, sizeof *rep);
    doctor_t d = {.s = s, .fix = fix, .out = out, .rep = rep};
    cr_model_name_t *names = NULL;
    size_t n = 0;
    cr_status_t st = reg_store_manifest_list(s, &names, &n, err);
    if (st)
        return st;
    for (size_t i = 0; i < n; i++)
        check_manifest(&d, &names[i]);
    free(names);

    /* Blobs no manifest names (those named were checked above). */
    char (*hexes)[REG_HEX_LEN + 1] = NULL;
    size_t nb = 0;
    st = reg_store_blob_list(s, &hexes, &nb, 0);
    if (st) {
        free(d.blobs);
        return cr_err_set(err, st, "cannot list the blobs of %s", reg_store_root(s));
    }
    for (size_t i = 0; i < nb; i++) {
        blob_state_t *b = check_blob(&d, hexes[i]);
        if (!b || b->used || b->bad)
            continue;
        /* not a problem: uploads a create converted stay until the
         * registry's next start prunes them (as Ollama keeps them) */
        fprintf(out, "unused blob sha256-%s (no manifest names it)\n", hexes[i]);
        rep->unused++;
        char path[REG_PATH_MAX];
        if (fix && reg_store_blob_path(s, hexes[i], path, sizeof path))
            remove_path(&d, path, path + strlen(reg_store_root(s)) + 1);
    }
    free(hexes);
    free(d.blobs);

    check_blob_dir(&d);
    char mdir[REG_PATH_MAX];
    snprintf(mdir, sizeof mdir, "%s/manifests", reg_store_root(s));
    check_manifest_dir(&d, mdir, 0);
    return CR_OK;
}

int reg_doctor_main(int argc, char **argv)
{
    bool fix = false;
    const char *models_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fix")) {
            fix = true;
        } else if (!strcmp(argv[i], "--models") && i + 1 < argc) {
            models_arg = argv[++i];
        } else if (!strncmp(argv[i], "--models=", 9)) {
            models_arg = argv[i] + 9;
        } else {
            fprintf(stderr, "usage: corral doctor [--fix] [--models DIR]\n"
                            "  checks the model store's manifests and blobs; --fix removes\n"
                            "  corrupt and dangling entries and partial files\n");
            return !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") ? 0 : 2;
        }
    }
    char models[REG_PATH_MAX];
    if (models_arg)
        snprintf(models, sizeof models, "%s", models_arg);
    else
        cr_env_models_dir(models, sizeof models);
    cr_err_t err = {0};
    struct stat sb;
    if (stat(models, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "corral doctor: no model store at %s\n", models);
        return 1;
    }
    reg_store_t *s = reg_store_new(models, &err);
    if (!s) {
        fprintf(stderr, "corral doctor: cannot open the model store %s: %s\n", models, err.msg);
        return 1;
    }
    reg_doctor_report_t rep;
    cr_status_t st = reg_doctor_run(s, fix, stdout, &rep, &err);
    reg_store_destroy(&s);
    if (st) {
        fprintf(stderr, "corral doctor: %s\n", err.msg);
        return 1;
    }
    printf("%zu manifests, %zu blobs checked: %zu problems", rep.manifests, rep.blobs,
           rep.problems);
    if (rep.unused)
        printf(", %zu unused blobs", rep.unused);
    if (fix && (rep.problems || rep.unused))
        printf(", %zu files removed\n", rep.removed);
    else if (rep.problems || rep.unused)
        printf(" (corral doctor --fix removes them%s)\n",
               rep.unused && !cr_env_bool("NOPRUNE", false)
                   ? "; unused blobs also go when the registry next starts" : "");
    else
        printf("\n");
    return rep.problems && !fix ? 1 : 0;
}
