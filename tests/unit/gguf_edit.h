/* gguf_edit.h: test helpers: a copy of a GGUF file with one tensor
 * dropped or misshapen, or one vocabulary entry renamed (bad input for
 * the loaders that check a file's tower). */
#ifndef TESTS_UNIT_GGUF_EDIT_H
#define TESTS_UNIT_GGUF_EDIT_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"

typedef enum test_edit {
    TEST_EDIT_DROP,    /* tensor `name` left out */
    TEST_EDIT_RESHAPE, /* tensor `name` replaced by an F32 vector of 7 */
    TEST_EDIT_TOKEN,   /* vocabulary entry `name` renamed "[renamed]" */
} test_edit_t;

/* src copied to dst with the edit applied; false on any error. */
static inline bool test_gguf_edit(const char *src, const char *dst, test_edit_t how,
                                  const char *name)
{
    static const float seven[7] = {0};
    static const uint64_t seven_ne[1] = {7};
    cr_gguf_t *g = NULL;
    cr_err_t err = {0};
    if (cr_gguf_open(src, &g, &err))
        return false;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_str_t *strs = NULL;
    bool ok = w != NULL;
    for (size_t i = 0; ok && i < cr_gguf_kv_count(g); i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        if (how == TEST_EDIT_TOKEN && cr_gguf_str_eq(kv->key, "tokenizer.ggml.tokens")) {
            uint64_t n = kv->v.arr.n;
            ok = (strs = malloc((size_t)n * sizeof *strs)) != NULL;
            for (uint64_t k = 0; ok && k < n; k++)
                strs[k] = cr_gguf_str_eq(kv->v.arr.strs[k], name)
                              ? (cr_gguf_str_t){"[renamed]", 9}
                              : kv->v.arr.strs[k];
            ok = ok && !cr_gguf_writer_add_arr_gstr(w, "tokenizer.ggml.tokens", strs, n, NULL);
        } else {
            ok = !cr_gguf_writer_copy_kv(w, kv, NULL);
        }
    }
    for (size_t i = 0; ok && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        bool hit = how != TEST_EDIT_TOKEN && !strcmp(t->name, name);
        if (hit && how == TEST_EDIT_DROP)
            continue;
        ok = hit ? !cr_gguf_writer_add_tensor(w, t->name, 1, seven_ne, CR_TYPE_F32, seven,
                                              NULL, NULL)
                 : !cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                              NULL, NULL);
    }
    ok = ok && cr_gguf_writer_write(w, dst, &err) == CR_OK;
    cr_gguf_writer_destroy(&w);
    free(strs);
    cr_gguf_close(&g);
    return ok;
}

#endif
