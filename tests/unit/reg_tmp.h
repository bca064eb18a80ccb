/* reg_tmp.h: test helpers for registry tests: a private folder under /tmp
 * with paths in it and its removal, a file stored as a blob, and whether a
 * model loads from the store. */
#ifndef TESTS_UNIT_REG_TMP_H
#define TESTS_UNIT_REG_TMP_H

#include "lib/prelude.h"
#include "lib/model_name.h"
#include "services/registry/model.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"

#include <ftw.h>
#include <sys/stat.h>

/* The test's folder, set by test_tmp_make. */
static char test_tmp_root[64];

/* Makes /tmp/<tag>-XXXXXX; false (said on stderr) when it cannot. */
static inline bool test_tmp_make(const char *tag)
{
    snprintf(test_tmp_root, sizeof test_tmp_root, "/tmp/%s-XXXXXX", tag);
    if (!mkdtemp(test_tmp_root)) {
        perror("mkdtemp");
        return false;
    }
    return true;
}

/* <folder>/<name>; the last four results stay valid. */
static inline const char *test_tmp_path(const char *name)
{
    static char buf[4][160];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 160, "%s/%s", test_tmp_root, name);
    return p;
}

static inline int test_tmp_rm_one(const char *p, const struct stat *sb, int flag,
                                  struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(p);
}

/* Removes the folder and all below it. */
static inline void test_tmp_remove(void)
{
    nftw(test_tmp_root, test_tmp_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Puts the file at path into the store; "sha256:<hex>" into digest (at
 * least 7 + REG_HEX_LEN + 1 bytes). */
static inline void test_store_put_file(reg_store_t *s, const char *path, char *digest)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *data = malloc((size_t)n);
    CHECK(data && fread(data, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    char hex[REG_HEX_LEN + 1];
    cr_err_t err;
    CHECK(reg_store_blob_put(s, data, (size_t)n, hex, NULL, &err) == CR_OK);
    sprintf(digest, "sha256:%s", hex);
    free(data);
}

/* True if name parses and its model loads from s. */
static inline bool test_store_has_model(reg_store_t *s, const char *name)
{
    cr_model_name_t n;
    if (cr_model_name_parse(name, &n, NULL))
        return false;
    reg_model_t *m = NULL;
    cr_err_t err;
    bool ok = reg_model_load(s, &n, &m, &err) == CR_OK;
    reg_model_destroy(&m);
    return ok;
}

#endif
