/* renderer.c: the built-in renderer table and the trust-marking writer. */
#include "lib/prelude.h"
#include "services/runner/prompt/renderer.h"

static const rn_prompt_renderer_t *const renderers[] = {
    &rn_prompt_renderer_harmony,
    &rn_prompt_renderer_qwen3coder,
};

const rn_prompt_renderer_t *rn_prompt_renderer_find(const char *name)
{
    for (size_t i = 0; name && i < CR_ARRAY_LEN(renderers); i++)
        if (!strcmp(renderers[i]->name, name))
            return renderers[i];
    return NULL;
}

cr_status_t rn_prompt_out_data(const rn_prompt_out_t *o, const char *s, size_t n,
                               bool trusted)
{
    size_t at = o->buf->len;
    cr_status_t st = n ? cr_buf_append(o->buf, s, n) : CR_OK;
    if (!st && o->spans)
        st = rn_tmpl_spans_add(o->spans, at, n, trusted);
    return st;
}

cr_status_t rn_prompt_out_lit(const rn_prompt_out_t *o, const char *s)
{
    return rn_prompt_out_data(o, s, strlen(s), true);
}
