/* draft.c: a draft model's vocabulary against its target's (draft.h). */
#include "lib/prelude.h"
#include "services/registry/draft.h"

#define TOKENS_KEY "tokenizer.ggml.tokens"
#define TOKENIZER_KEY "tokenizer.ggml.model"

static bool same_str(cr_gguf_str_t a, cr_gguf_str_t b)
{
    return a.len == b.len && (a.len == 0 || !memcmp(a.ptr, b.ptr, (size_t)a.len));
}

cr_status_t reg_draft_check_vocab(const cr_gguf_t *target, const cr_gguf_t *draft,
                                  const char *draft_name, cr_err_t *err)
{
    const cr_gguf_array_t *ta = NULL, *da = NULL;
    if (!cr_gguf_get_arr(target, TOKENS_KEY, &ta) || ta->type != CR_GGUF_STRING)
        return cr_err_set(err, CR_E_INVALID,
                          "draft model \"%s\": the model has no token list (" TOKENS_KEY ")",
                          draft_name);
    if (!cr_gguf_get_arr(draft, TOKENS_KEY, &da) || da->type != CR_GGUF_STRING)
        return cr_err_set(err, CR_E_INVALID,
                          "draft model \"%s\" has no token list (" TOKENS_KEY ")", draft_name);
    /* the same tokens under another tokenizer (bpe vs spm) split text
     * differently, so the draft's ids would mean other strings */
    cr_gguf_str_t tm = {0}, dm = {0};
    bool has_tm = cr_gguf_get_str(target, TOKENIZER_KEY, &tm);
    bool has_dm = cr_gguf_get_str(draft, TOKENIZER_KEY, &dm);
    if (has_tm != has_dm || (has_tm && !same_str(tm, dm)))
        return cr_err_set(err, CR_E_INVALID,
                          "draft model \"%s\" uses another tokenizer (" TOKENIZER_KEY
                          " \"%.*s\"; the model's is \"%.*s\")",
                          draft_name, (int)CR_MIN(dm.len, 64), has_dm ? dm.ptr : "",
                          (int)CR_MIN(tm.len, 64), has_tm ? tm.ptr : "");
    if (ta->n != da->n)
        return cr_err_set(err, CR_E_INVALID,
                          "draft model \"%s\" has %" PRIu64 " tokens; the model has %" PRIu64
                          " (a draft must share the model's vocabulary)",
                          draft_name, da->n, ta->n);
    for (uint64_t i = 0; i < ta->n; i++)
        if (!same_str(ta->strs[i], da->strs[i]))
            return cr_err_set(err, CR_E_INVALID,
                              "draft model \"%s\": token %" PRIu64 " is \"%.*s\"; the model's "
                              "is \"%.*s\" (a draft must share the model's vocabulary)",
                              draft_name, i, (int)CR_MIN(da->strs[i].len, 64), da->strs[i].ptr,
                              (int)CR_MIN(ta->strs[i].len, 64), ta->strs[i].ptr);
    return CR_OK;
}
