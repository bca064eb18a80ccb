/* test_registry_draft: create's `draft` (Modelfile DRAFT NAME;
 * services/registry/create.c with draft.c): a draft model with the
 * model's vocabulary is stored as a draft layer (its weights' blob, shared)
 * and its name in the config, shown (Modelfile DRAFT line, show's "draft")
 * and resolved for the runner's load (draft_path); a derived model keeps
 * it; an unknown draft, an invalid name, a vocabulary of another size, a
 * renamed token and another tokenizer are refused with CR_E_INVALID (HTTP
 * 400) naming the draft, and the refused create stores no model. */
#include "lib/prelude.h"

#include "lib/gguf.h"
#include "lib/model_name.h"
#include "proto/msg.h"
#include "services/registry/create.h"
#include "services/registry/draft.h"
#include "services/registry/manifest.h"
#include "services/registry/model.h"
#include "services/registry/ops.h"
#include "services/registry/show.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"
#include "tests/unit/reg_tmp.h"
#include "tests/unit/gguf_edit.h"
#include "tools/synth/synth.h"

#include <jansson.h>
#include <unistd.h>

/* create name from a model blob digest (or from an existing model) with
 * draft `draft` (NULL: none). */
static cr_status_t create(reg_store_t *s, const char *name, const char *digest,
                          const char *from, const char *draft, cr_err_t *err)
{
    msg_create_body_t req = {.model = (char *)name, .has_model = true};
    msg_file_ref_t file = {.name = "model.gguf", .digest = (char *)digest,
                           .has_name = true, .has_digest = true};
    if (digest) {
        req.files.v = &file;
        req.files.n = 1;
        req.has_files = true;
    }
    if (from) {
        req.from = (char *)from;
        req.has_from = true;
    }
    if (draft) {
        req.draft = (char *)draft;
        req.has_draft = true;
    }
    cr_err_clear(err);
    return reg_create(s, &req, NULL, NULL, err);
}

/* The model's show body, parsed (caller frees). */
static json_t *show_json(reg_store_t *s, const char *name)
{
    cr_model_name_t n;
    cr_model_name_parse(name, &n, NULL);
    reg_model_t *m = NULL;
    cr_err_t err;
    CHECK(reg_model_load(s, &n, &m, &err) == CR_OK);
    if (!m)
        return NULL;
    cr_buf_t body;
    cr_buf_init(&body, 1 << 20);
    CHECK(reg_show_body(s, m, false, NULL, NULL, &body, &err) == CR_OK);
    json_t *j = json_loads(body.data ? body.data : "", 0, NULL);
    cr_buf_free(&body);
    reg_model_destroy(&m);
    return j;
}

/* The resolved draft_path of name ("" without one). */
static void resolved_draft(reg_store_t *s, const char *name, char *out, size_t cap)
{
    msg_resolve_body_t rreq = {.model = (char *)name, .has_model = true};
    msg_t r;
    cr_err_t err;
    out[0] = '\0';
    CHECK(reg_op_resolve(s, "rid", &rreq, &r, &err) == CR_OK);
    if (r.u.resolved.has_draft_path)
        snprintf(out, cap, "%s", r.u.resolved.draft_path);
    msg_clear(&r);
}

static void check_refused(reg_store_t *s, const char *draft, const char *want)
{
    cr_err_t err;
    CHECK_EQ_INT(create(s, "refused", NULL, "target", draft, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, want) != NULL, "draft %s: message '%s' lacks '%s'", draft,
              err.msg, want);
    CHECK(!test_store_has_model(s, "refused"));
}

int main(void)
{
    if (!test_tmp_make("corral-regdraft"))
        return 1;
    cr_err_t err = {0};
    reg_store_t *s = reg_store_new(test_tmp_path("models"), &err);
    CHECK(s != NULL);
    if (!s)
        return check_finish("test_registry_draft");

    /* the same weights quantized two ways; a wider vocabulary; a renamed
     * token; another tokenizer model */
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0;
    CHECK(rn_synth_write(&so, test_tmp_path("target.gguf"), &err) == CR_OK);
    so.type = CR_TYPE_Q4_0;
    CHECK(rn_synth_write(&so, test_tmp_path("draft.gguf"), &err) == CR_OK);
    CHECK(test_gguf_edit(test_tmp_path("draft.gguf"), test_tmp_path("renamed.gguf"),
                         TEST_EDIT_TOKEN, "<s>"));
    const char *const extra[] = {"<extra>", NULL};
    so.extra_tokens = extra;
    CHECK(rn_synth_write(&so, test_tmp_path("wide.gguf"), &err) == CR_OK);
    char d_target[80], d_draft[80], d_wide[80], d_renamed[80];
    test_store_put_file(s, test_tmp_path("target.gguf"), d_target);
    test_store_put_file(s, test_tmp_path("draft.gguf"), d_draft);
    test_store_put_file(s, test_tmp_path("wide.gguf"), d_wide);
    test_store_put_file(s, test_tmp_path("renamed.gguf"), d_renamed);
    CHECK(create(s, "target", d_target, NULL, NULL, &err) == CR_OK);
    CHECK(create(s, "small", d_draft, NULL, NULL, &err) == CR_OK);
    CHECK(create(s, "wide", d_wide, NULL, NULL, &err) == CR_OK);
    CHECK(create(s, "renamed", d_renamed, NULL, NULL, &err) == CR_OK);

    /* a draft with the model's vocabulary: a draft layer with its blob */
    CHECK_MSG(create(s, "fast", d_target, NULL, "small", &err) == CR_OK, "%s", err.msg);
    cr_model_name_t n;
    cr_model_name_parse("fast", &n, NULL);
    reg_model_t *m = NULL;
    CHECK(reg_model_load(s, &n, &m, &err) == CR_OK);
    if (m) {
        const reg_layer_t *dl = reg_manifest_find(&m->manifest, REG_MT_DRAFT);
        CHECK(dl && !strcmp(dl->hex, d_draft + 7));
        CHECK_EQ_STR(reg_model_config_str(m, "draft"), "small:latest");
        reg_model_destroy(&m);
    }
    char path[1024];
    resolved_draft(s, "fast", path, sizeof path);
    CHECK_MSG(strstr(path, d_draft + 7) != NULL, "draft_path '%s'", path);
    resolved_draft(s, "target", path, sizeof path);
    CHECK_EQ_STR(path, "");
    json_t *j = show_json(s, "fast");
    const char *mf = json_string_value(json_object_get(j, "modelfile"));
    CHECK_MSG(mf && strstr(mf, "\nDRAFT small:latest\n"), "%s", mf ? mf : "(none)");
    CHECK_EQ_STR(json_string_value(json_object_get(j, "draft")), "small:latest");
    json_decref(j);
    j = show_json(s, "target");
    CHECK(json_object_get(j, "draft") == NULL);
    json_decref(j);

    /* a derived model keeps the draft; a new draft replaces it */
    CHECK(create(s, "fast2", NULL, "fast", NULL, &err) == CR_OK);
    resolved_draft(s, "fast2", path, sizeof path);
    CHECK(strstr(path, d_draft + 7) != NULL);
    j = show_json(s, "fast2");
    CHECK_EQ_STR(json_string_value(json_object_get(j, "draft")), "small:latest");
    json_decref(j);
    CHECK(create(s, "fast3", NULL, "fast", "target", &err) == CR_OK);
    resolved_draft(s, "fast3", path, sizeof path);
    CHECK(strstr(path, d_target + 7) != NULL);

    /* refused: 400, naming the draft; nothing stored */
    check_refused(s, "nope", "draft model \"nope\" not found");
    check_refused(s, "bad name!", "draft: invalid model name");
    char want[128];
    int nv = rn_synth_builtin_vocab_size();
    snprintf(want, sizeof want, "has %d tokens; the model has %d", nv + 1, nv);
    check_refused(s, "wide", want);
    check_refused(s, "renamed", " is \"[renamed]\"; the model's is \"<s>\"");

    /* the rule alone: another tokenizer model, and no token list */
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_str_t toks[2] = {{"a", 1}, {"b", 1}};
    CHECK(w && !cr_gguf_writer_add_arr_gstr(w, "tokenizer.ggml.tokens", toks, 2, NULL));
    CHECK(!cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", NULL));
    CHECK(!cr_gguf_writer_write(w, test_tmp_path("bpe.gguf"), NULL));
    cr_gguf_writer_destroy(&w);
    w = cr_gguf_writer_new();
    CHECK(w && !cr_gguf_writer_add_arr_gstr(w, "tokenizer.ggml.tokens", toks, 2, NULL));
    CHECK(!cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", NULL));
    CHECK(!cr_gguf_writer_write(w, test_tmp_path("spm.gguf"), NULL));
    cr_gguf_writer_destroy(&w);
    cr_gguf_t *bpe = NULL, *spm = NULL, *none = NULL;
    CHECK(cr_gguf_open(test_tmp_path("bpe.gguf"), &bpe, &err) == CR_OK);
    CHECK(cr_gguf_open(test_tmp_path("spm.gguf"), &spm, &err) == CR_OK);
    w = cr_gguf_writer_new();
    CHECK(w && !cr_gguf_writer_add_str(w, "general.architecture", "llama", NULL));
    CHECK(!cr_gguf_writer_write(w, test_tmp_path("none.gguf"), NULL));
    cr_gguf_writer_destroy(&w);
    CHECK(cr_gguf_open(test_tmp_path("none.gguf"), &none, &err) == CR_OK);
    if (bpe && spm && none) {
        CHECK_EQ_INT(reg_draft_check_vocab(spm, spm, "d", &err), CR_OK);
        CHECK_EQ_INT(reg_draft_check_vocab(spm, bpe, "d", &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "another tokenizer") != NULL, "%s", err.msg);
        CHECK_EQ_INT(reg_draft_check_vocab(spm, none, "d", &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "draft model \"d\" has no token list") != NULL, "%s", err.msg);
        CHECK_EQ_INT(reg_draft_check_vocab(none, spm, "d", &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "the model has no token list") != NULL, "%s", err.msg);
    }
    cr_gguf_close(&bpe);
    cr_gguf_close(&spm);
    cr_gguf_close(&none);

    reg_store_destroy(&s);
    test_tmp_remove();
    return check_finish("test_registry_draft");
}
