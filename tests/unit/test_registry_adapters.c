/* test_registry_adapters: ADAPTER at create (services/registry/create.c
 * with lib/lora.h): GGUF LoRA adapters that fit the model are stored as
 * adapter layers, several per model, listed by show's Modelfile and
 * resolved (in order) for the runner's load; adapters that do not fit
 * (another architecture, wrong shapes, not a LoRA adapter, no model to
 * apply to) and PEFT folders are refused with CR_E_INVALID (HTTP 400)
 * naming the file, and the refused create stores no model. */
#include "lib/prelude.h"

#include "lib/model_name.h"
#include "proto/msg.h"
#include "services/registry/create.h"
#include "services/registry/manifest.h"
#include "services/registry/model.h"
#include "services/registry/ops.h"
#include "services/registry/show.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"
#include "tools/synth/synth.h"

#include <ftw.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

static char root_g[64];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(p);
}

static const char *path_of(const char *name)
{
    static char buf[4][160];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 160, "%s/%s", root_g, name);
    return p;
}

/* Puts the file at path into the store; "sha256:<hex>" into digest. */
static void put_file(reg_store_t *s, const char *path, char *digest)
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

/* create name from the model blob (or from an existing model) with the
 * adapter blobs, in order. */
static cr_status_t create(reg_store_t *s, const char *name, const char *model_digest,
                          const char *from, const char *const *ad_digests,
                          const char *const *ad_names, size_t n_ads, cr_err_t *err)
{
    msg_create_body_t req = {.model = (char *)name, .has_model = true};
    msg_file_ref_t file = {.name = "model.gguf", .digest = (char *)model_digest,
                           .has_name = true, .has_digest = true};
    msg_file_ref_t ads[4];
    if (model_digest) {
        req.files.v = &file;
        req.files.n = 1;
        req.has_files = true;
    }
    if (from) {
        req.from = (char *)from;
        req.has_from = true;
    }
    for (size_t i = 0; i < n_ads; i++)
        ads[i] = (msg_file_ref_t){.name = (char *)ad_names[i], .digest = (char *)ad_digests[i],
                                  .has_name = true, .has_digest = true};
    req.adapters.v = ads;
    req.adapters.n = n_ads;
    req.has_adapters = n_ads > 0;
    cr_err_clear(err);
    return reg_create(s, &req, NULL, NULL, err);
}

static bool model_exists(reg_store_t *s, const char *name)
{
    cr_model_name_t n;
    cr_model_name_parse(name, &n, NULL);
    reg_model_t *m = NULL;
    cr_err_t err;
    bool ok = reg_model_load(s, &n, &m, &err) == CR_OK;
    reg_model_destroy(&m);
    return ok;
}

int main(void)
{
    snprintf(root_g, sizeof root_g, "/tmp/corral-regadapt-XXXXXX");
    if (!mkdtemp(root_g)) {
        perror("mkdtemp");
        return 1;
    }
    cr_err_t err = {0};
    reg_store_t *s = reg_store_new(path_of("models"), &err);
    CHECK(s != NULL);
    if (!s)
        return check_finish("test_registry_adapters");

    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    char base[160], wide[160];
    snprintf(base, sizeof base, "%s", path_of("base.gguf"));
    snprintf(wide, sizeof wide, "%s", path_of("wide.gguf"));
    CHECK(rn_synth_write(&so, base, &err) == CR_OK);
    so.dim = 96;
    CHECK(rn_synth_write(&so, wide, &err) == CR_OK);
    const char *t1[] = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", NULL};
    const char *t2[] = {"blk.0.attn_v.weight", NULL};
    rn_synth_lora_opts_t lo = {.seed = 5, .rank = 4, .alpha = 8, .targets = t1};
    CHECK(rn_synth_lora_write(&lo, base, path_of("a1.gguf"), &err) == CR_OK);
    lo.targets = t2;
    CHECK(rn_synth_lora_write(&lo, base, path_of("a2.gguf"), &err) == CR_OK);
    CHECK(rn_synth_lora_write(&lo, wide, path_of("wide-a.gguf"), &err) == CR_OK);
    lo.arch = "qwen2";
    CHECK(rn_synth_lora_write(&lo, base, path_of("qwen-a.gguf"), &err) == CR_OK);

    char d_base[80], d_a1[80], d_a2[80], d_wide[80], d_qwen[80];
    put_file(s, base, d_base);
    put_file(s, path_of("a1.gguf"), d_a1);
    put_file(s, path_of("a2.gguf"), d_a2);
    put_file(s, path_of("wide-a.gguf"), d_wide);
    put_file(s, path_of("qwen-a.gguf"), d_qwen);

    /* two adapters: two adapter layers, in order, shown and resolved */
    const char *two[] = {d_a1, d_a2}, *two_names[] = {"a1.gguf", "a2.gguf"};
    CHECK_MSG(create(s, "tuned", d_base, NULL, two, two_names, 2, &err) == CR_OK, "%s",
              err.msg);
    msg_resolve_body_t rreq = {.model = "tuned", .has_model = true};
    msg_t r;
    CHECK(reg_op_resolve(s, "rid", &rreq, &r, &err) == CR_OK);
    CHECK(r.u.resolved.has_adapters && r.u.resolved.adapters.n == 2);
    if (r.u.resolved.adapters.n == 2) {
        CHECK(strstr(r.u.resolved.adapters.v[0], d_a1 + 7) != NULL);
        CHECK(strstr(r.u.resolved.adapters.v[1], d_a2 + 7) != NULL);
    }
    msg_clear(&r);
    cr_model_name_t n;
    cr_model_name_parse("tuned", &n, NULL);
    reg_model_t *m = NULL;
    CHECK(reg_model_load(s, &n, &m, &err) == CR_OK);
    if (m) {
        cr_buf_t body;
        cr_buf_init(&body, 1 << 20);
        CHECK(reg_show_body(s, m, false, NULL, NULL, &body, &err) == CR_OK);
        json_t *j = json_loads(body.data ? body.data : "", 0, NULL);
        const char *mf = json_string_value(json_object_get(j, "modelfile"));
        const char *a1 = mf ? strstr(mf, "ADAPTER ") : NULL;
        CHECK_MSG(a1 && strstr(a1 + 1, "ADAPTER "), "%s", mf ? mf : "(none)");
        json_decref(j);
        cr_buf_free(&body);
        reg_model_destroy(&m);
    }
    /* a model derived from it keeps them and can add one */
    const char *one[] = {d_a2}, *one_name[] = {"a2.gguf"};
    CHECK_MSG(create(s, "tuned2", NULL, "tuned", one, one_name, 1, &err) == CR_OK, "%s",
              err.msg);
    rreq.model = "tuned2";
    CHECK(reg_op_resolve(s, "rid", &rreq, &r, &err) == CR_OK);
    CHECK(r.u.resolved.adapters.n == 3);
    msg_clear(&r);

    /* refusals: 400, the file named, no model stored */
    const char *bad[] = {d_wide}, *bad_name[] = {"wide-a.gguf"};
    CHECK(create(s, "bad", d_base, NULL, bad, bad_name, 1, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "adapter wide-a.gguf: 'blk.0.attn_v.weight.lora_a'") != NULL,
              "%s", err.msg);
    bad[0] = d_qwen;
    bad_name[0] = "qwen-a.gguf";
    CHECK(create(s, "bad", d_base, NULL, bad, bad_name, 1, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "adapter qwen-a.gguf is for architecture \"qwen2\"") != NULL,
              "%s", err.msg);
    bad[0] = d_base; /* a model, not an adapter */
    bad_name[0] = "base.gguf";
    CHECK(create(s, "bad", d_base, NULL, bad, bad_name, 1, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not \"adapter\"") != NULL, "%s", err.msg);
    bad[0] = d_a1;
    bad_name[0] = "adapter_model.safetensors";
    CHECK(create(s, "bad", d_base, NULL, bad, bad_name, 1, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "adapter") != NULL, "%s", err.msg);
    CHECK(!model_exists(s, "bad"));

    reg_store_destroy(&s);
    nftw(root_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_finish("test_registry_adapters");
}
