/* images.c: see images.h. */
#include "lib/prelude.h"
#include "cli/images.h"

#include <ctype.h>
#include <sys/stat.h>

#include "lib/base64.h"
#include "lib/buf.h"

/* Length of an image extension at p[i] (".png" ...) followed by a word
 * boundary, or 0. */
static size_t ext_at(const char *p, size_t i, size_t n)
{
    static const char *const exts[] = {".jpeg", ".jpg", ".png", ".webp"};
    for (size_t k = 0; k < CR_ARRAY_LEN(exts); k++) {
        size_t el = strlen(exts[k]);
        if (n - i < el || strncasecmp(p + i, exts[k], el))
            continue;
        char after = i + el < n ? p[i + el] : '\0';
        if (!(isalnum((unsigned char)after) || after == '_'))
            return el;
    }
    return 0;
}

/* The path with its backslash escapes removed (caller frees). */
static char *unescape(const char *p, size_t n)
{
    char *s = malloc(n + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n && strchr(" ()[]{}'\"&;#!$`", p[i + 1]))
            i++;
        *o++ = p[i];
    }
    *o = '\0';
    return s;
}

static bool is_image(const uint8_t *b, size_t n)
{
    return (n >= 3 && !memcmp(b, "\xff\xd8\xff", 3)) ||
           (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) ||
           (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4));
}

/* Reads path into a base64 string (*b64, caller frees). CR_E_NOT_FOUND if
 * there is no such file. */
static cr_status_t load(const char *path, char **b64, cr_err_t *err)
{
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode))
        return CR_E_NOT_FOUND;
    if ((uint64_t)sb.st_size > CLI_IMAGE_MAX_BYTES)
        return cr_err_set(err, CR_E_INVALID, "couldn't process image %s: larger than %u "
                          "MB", path, CLI_IMAGE_MAX_BYTES >> 20);
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_INVALID, "couldn't process image %s: %s", path,
                          strerror(errno));
    size_t n = (size_t)sb.st_size;
    uint8_t *b = malloc(n ? n : 1);
    bool ok = b && fread(b, 1, n, f) == n;
    fclose(f);
    cr_status_t st = CR_OK;
    if (!ok)
        st = cr_err_set(err, b ? CR_E_INVALID : CR_E_NOMEM, "couldn't process image %s: %s",
                        path, b ? "read failed" : "out of memory");
    else if (!is_image(b, n))
        st = cr_err_set(err, CR_E_INVALID, "couldn't process image %s: invalid image type",
                        path);
    else if (!(*b64 = cr_base64_encode(b, n)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    free(b);
    return st;
}

cr_status_t cli_images_extract(const char *prompt, char **text_out, json_t *images,
                               FILE *notice, cr_err_t *err)
{
    *text_out = NULL;
    size_t n = strlen(prompt), from = 0;
    cr_buf_t out;
    cr_buf_init(&out, n + 1);
    cr_status_t st = CR_OK;
    for (size_t s = 0; !st && s < n;) {
        size_t lead = prompt[s] == '.' && s + 1 < n && prompt[s + 1] == '/' ? 2
                      : prompt[s] == '/' || prompt[s] == '\\'              ? 1
                                                                           : 0;
        size_t end = 0;
        for (size_t j = s + lead; lead && j < n; j++) {
            char c = prompt[j];
            if (isspace((unsigned char)c) && c != ' ')
                break;
            size_t el = c == '.' && j > s + lead ? ext_at(prompt, j, n) : 0;
            if (el) {
                end = j + el;
                break;
            }
        }
        if (!end) {
            s++;
            continue;
        }
        char *path = unescape(prompt + s, end - s), *b64 = NULL;
        if (!path) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            break;
        }
        st = load(path, &b64, err);
        if (st == CR_E_NOT_FOUND) { /* not a file: plain text */
            st = CR_OK;
            free(path);
            s = end;
            continue;
        }
        if (!st && json_array_append_new(images, json_string(b64)))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        if (!st && notice)
            fprintf(notice, "Added image '%s'\n", path);
        if (!st)
            st = cr_buf_append(&out, prompt + from, s - from);
        from = s = end;
        free(b64);
        free(path);
    }
    if (!st)
        st = cr_buf_append(&out, prompt + from, n - from);
    if (st) {
        cr_buf_free(&out);
        return st == CR_E_INVALID ? st : cr_err_set(err, st, "out of memory");
    }
    char *t = cr_buf_steal(&out);
    if (!t)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t a = 0, z = strlen(t);
    while (a < z && isspace((unsigned char)t[a]))
        a++;
    while (z > a && isspace((unsigned char)t[z - 1]))
        z--;
    memmove(t, t + a, z - a);
    t[z - a] = '\0';
    *text_out = t;
    return CR_OK;
}

bool cli_images_model_sees(const json_t *show)
{
    const json_t *caps = json_object_get(show, "capabilities");
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        if (c && !strcmp(c, "vision"))
            return true;
    }
    return false;
}
