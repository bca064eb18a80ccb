/* test_registry_adapters: ADAPTER at create (services/registry/create.c
 * with lib/lora.h): GGUF LoRA adapters that fit the model are stored as
 * adapter layers, several per model, listed by show's Modelfile and
 * resolved (in order) for the runner's load; adapters that do not fit
 * (another architecture, wrong shapes, not a LoRA adapter, no model to
 * apply to) and PEFT folders are refused with CR_E_INVALID (HTTP 400)
 * naming the file, and the refused create stores no model. PEFT folders
 * (adapter_config.json + adapter_model.safetensors) written from a GGUF
 * adapter convert back to exactly that adapter (llama's q/k lora_B rows
 * permuted); DoRA, a wrong rank, a missing config and a tensor outside the
 * projections are refused; a conversion whose client has gone (cancel set)
 * stops before its first tensor, storing nothing. */
#include "lib/prelude.h"

#include "lib/gguf.h"
#include "lib/model_name.h"
#include "proto/msg.h"
#include "services/registry/create.h"
#include "services/registry/manifest.h"
#include "services/registry/model.h"
#include "services/registry/ops.h"
#include "services/registry/show.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"
#include "tests/unit/reg_tmp.h"
#include "tools/synth/synth.h"

#include <dirent.h>
#include <jansson.h>
#include <stdatomic.h>
#include <unistd.h>

/* create name from the model blob (or from an existing model) with the
 * adapter blobs, in order. */
/* The creates' cancel flag (reg_create_ex), or NULL. */
static const atomic_bool *cancel_g;

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
    return reg_create_ex(s, &req, cancel_g, NULL, NULL, err);
}

static void count_step(void *ctx, const char *point)
{
    CHECK_EQ_STR(point, "convert tensor");
    (*(int *)ctx)++;
}

/* Hidden temp files in the store's blobs/. */
static int count_temps(reg_store_t *s)
{
    char dir[REG_PATH_MAX + 8];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(s));
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, ".corral-tmp-", 12);
    if (d)
        closedir(d);
    return n;
}

/* ---- PEFT folders ---- */

/* Writes a safetensors file: n F32 tensors names[i] of shape [rows[i]][cols[i]]. */
static void write_safetensors(const char *path, const char *const *names, float *const *data,
                              const uint64_t *rows, const uint64_t *cols, size_t n)
{
    json_t *hdr = json_object();
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = rows[i] * cols[i] * 4;
        json_object_set_new(hdr, names[i],
                            json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape",
                                      (json_int_t)rows[i], (json_int_t)cols[i],
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + bytes)));
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    uint64_t len = strlen(text);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(len >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(text, 1, len, f);
    for (size_t i = 0; i < n; i++)
        fwrite(data[i], 4, rows[i] * cols[i], f);
    fclose(f);
    free(text);
    json_decref(hdr);
}

/* The PEFT form of GGUF adapter ad (F32, llama: q/k lora_b rows back to
 * Hugging Face's order for heads / kv_heads heads) into dir's
 * adapter_model.safetensors, with adapter_config.json holding cfg. */
static void write_peft(const char *ad, int heads, int kv_heads, const char *cfg,
                       const char *st_path, const char *cfg_path)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(ad, &g, &err) == CR_OK);
    size_t n = g ? cr_gguf_tensor_count(g) : 0;
    char **names = calloc(n + 1, sizeof *names);
    float **data = calloc(n + 1, sizeof *data);
    uint64_t *rows = calloc(n + 1, sizeof *rows), *cols = calloc(n + 1, sizeof *cols);
    static const char *const map[][2] = {
        {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
        {"ffn_gate", "mlp.gate_proj"},  {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"}};
    for (size_t i = 0; i < n; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        int layer = 0;
        char mod[32] = "", ab = 0;
        CHECK(sscanf(t->name, "blk.%d.%31[a-z_].weight.lora_%c", &layer, mod, &ab) == 3);
        const char *hf = "?";
        for (size_t k = 0; k < CR_ARRAY_LEN(map); k++)
            if (!strcmp(map[k][0], mod))
                hf = map[k][1];
        names[i] = malloc(160);
        snprintf(names[i], 160, "base_model.model.model.layers.%d.%s.lora_%c.weight", layer,
                 hf, ab == 'a' ? 'A' : 'B');
        rows[i] = t->ne[1];
        cols[i] = t->ne[0];
        data[i] = malloc(t->size_bytes);
        const float *src = t->data;
        int groups = ab == 'b' && !strcmp(mod, "attn_q")   ? heads
                     : ab == 'b' && !strcmp(mod, "attn_k") ? kv_heads
                                                            : 0;
        uint64_t hd = groups ? rows[i] / (uint64_t)groups : 0;
        for (uint64_t r = 0; r < rows[i]; r++) {
            uint64_t hf_row = r;
            if (groups) /* GGUF row h*hd + 2i + j was HF row h*hd + j*hd/2 + i */
                hf_row = r / hd * hd + (r % 2) * (hd / 2) + (r % hd) / 2;
            memcpy(data[i] + hf_row * cols[i], src + r * cols[i], cols[i] * 4);
        }
    }
    write_safetensors(st_path, (const char *const *)names, data, rows, cols, n);
    FILE *f = fopen(cfg_path, "w");
    CHECK(f != NULL);
    fputs(cfg, f);
    fclose(f);
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
        free(data[i]);
    }
    free(names);
    free(data);
    free(rows);
    free(cols);
    cr_gguf_close(&g);
}

/* Every tensor of a and b has the same name, shape, type and bytes, and
 * both have the same alpha. */
static bool same_adapter(const char *a, const char *b)
{
    cr_err_t err = {0};
    cr_gguf_t *ga = NULL, *gb = NULL;
    bool ok = cr_gguf_open(a, &ga, &err) == CR_OK && cr_gguf_open(b, &gb, &err) == CR_OK &&
              cr_gguf_tensor_count(ga) == cr_gguf_tensor_count(gb);
    float aa = -1, ab = -2;
    ok = ok && cr_gguf_get_f32(ga, "adapter.lora.alpha", &aa) &&
         cr_gguf_get_f32(gb, "adapter.lora.alpha", &ab) && aa == ab;
    for (size_t i = 0; ok && i < cr_gguf_tensor_count(ga); i++) {
        const cr_gguf_tensor_t *ta = cr_gguf_tensor_at(ga, i);
        const cr_gguf_tensor_t *tb = cr_gguf_tensor_find(gb, ta->name);
        ok = tb && tb->type == ta->type && tb->ne[0] == ta->ne[0] && tb->ne[1] == ta->ne[1] &&
             !memcmp(ta->data, tb->data, ta->size_bytes);
        CHECK_MSG(ok, "tensor %s differs", ta->name);
    }
    cr_gguf_close(&ga);
    cr_gguf_close(&gb);
    return ok;
}

static void test_peft(reg_store_t *s, const char *base, const char *d_base)
{
    cr_err_t err = {0};
    const char *t[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.1.attn_v.weight",
                       "blk.1.attn_output.weight", "blk.0.ffn_gate.weight",
                       "blk.1.ffn_up.weight", "blk.0.ffn_down.weight", NULL};
    char ref[160], st_path[160], cfg_path[160];
    snprintf(ref, sizeof ref, "%s", test_tmp_path("peft-ref.gguf"));
    snprintf(st_path, sizeof st_path, "%s", test_tmp_path("adapter_model.safetensors"));
    snprintf(cfg_path, sizeof cfg_path, "%s", test_tmp_path("adapter_config.json"));
    rn_synth_lora_opts_t lo = {.seed = 21, .rank = 4, .alpha = 16, .targets = t};
    CHECK(rn_synth_lora_write(&lo, base, ref, &err) == CR_OK);
    /* synth's llama: 4 heads, 2 KV heads */
    write_peft(ref, 4, 2, "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 16, "
               "\"target_modules\": [\"q_proj\", \"k_proj\"], \"bias\": \"none\", "
               "\"use_dora\": false, \"modules_to_save\": null}", st_path, cfg_path);
    char d_st[80], d_cfg[80];
    test_store_put_file(s, st_path, d_st);
    test_store_put_file(s, cfg_path, d_cfg);
    const char *ds[] = {d_cfg, d_st};
    const char *names[] = {"adapter_config.json", "adapter_model.safetensors"};
    CHECK_MSG(create(s, "peft", d_base, NULL, ds, names, 2, &err) == CR_OK, "%s", err.msg);
    msg_resolve_body_t rreq = {.model = "peft", .has_model = true};
    msg_t r;
    CHECK(reg_op_resolve(s, "rid", &rreq, &r, &err) == CR_OK);
    CHECK(r.u.resolved.adapters.n == 1);
    /* the converted adapter is the GGUF one the folder was written from */
    if (r.u.resolved.adapters.n == 1)
        CHECK(same_adapter(ref, r.u.resolved.adapters.v[0]));
    msg_clear(&r);

    /* a client gone before the conversion: it stops before its first
     * tensor (not after converting them all), no model, no temp file */
    int steps = 0;
    atomic_bool gone;
    atomic_init(&gone, true);
    cancel_g = &gone;
    reg_store_set_step_hook(s, count_step, &steps);
    CHECK(create(s, "peftgone", d_base, NULL, ds, names, 2, &err) == CR_E_CANCELED);
    CHECK_EQ_STR(err.msg, "canceled");
    CHECK_EQ_INT(steps, 1);
    CHECK(!test_store_has_model(s, "peftgone"));
    CHECK_EQ_INT(count_temps(s), 0);
    reg_store_set_step_hook(s, NULL, NULL);
    cancel_g = NULL;

    /* refusals */
    write_peft(ref, 4, 2, "{\"r\": 4, \"lora_alpha\": 16, \"use_dora\": true}", st_path,
               cfg_path);
    test_store_put_file(s, cfg_path, d_cfg);
    CHECK(create(s, "badpeft", d_base, NULL, ds, names, 2, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "adapter_config.json: use_dora is not supported"), "%s",
              err.msg);
    write_peft(ref, 4, 2, "{\"r\": 8, \"lora_alpha\": 16}", st_path, cfg_path);
    test_store_put_file(s, cfg_path, d_cfg);
    CHECK(create(s, "badpeft", d_base, NULL, ds, names, 2, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "is not a rank-8"), "%s", err.msg);
    CHECK(create(s, "badpeft", d_base, NULL, ds + 1, names + 1, 1, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "adapter_config.json is missing"), "%s", err.msg);
    const char *emb = "base_model.model.model.embed_tokens.lora_A.weight";
    float *z = calloc(64 * 4, sizeof *z);
    uint64_t rows = 4, cols = 64;
    write_safetensors(st_path, &emb, &z, &rows, &cols, 1);
    free(z);
    test_store_put_file(s, st_path, d_st);
    write_peft(ref, 4, 2, "{\"r\": 4, \"lora_alpha\": 16}", test_tmp_path("unused.st"), cfg_path);
    test_store_put_file(s, cfg_path, d_cfg);
    CHECK(create(s, "badpeft", d_base, NULL, ds, names, 2, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "'base_model.model.model.embed_tokens.lora_A.weight' is not"),
              "%s", err.msg);
    CHECK(!test_store_has_model(s, "badpeft"));
}

int main(void)
{
    if (!test_tmp_make("corral-regadapt"))
        return 1;
    cr_err_t err = {0};
    reg_store_t *s = reg_store_new(test_tmp_path("models"), &err);
    CHECK(s != NULL);
    if (!s)
        return check_finish("test_registry_adapters");

    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    char base[160], wide[160];
    snprintf(base, sizeof base, "%s", test_tmp_path("base.gguf"));
    snprintf(wide, sizeof wide, "%s", test_tmp_path("wide.gguf"));
    CHECK(rn_synth_write(&so, base, &err) == CR_OK);
    so.dim = 96;
    CHECK(rn_synth_write(&so, wide, &err) == CR_OK);
    const char *t1[] = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", NULL};
    const char *t2[] = {"blk.0.attn_v.weight", NULL};
    rn_synth_lora_opts_t lo = {.seed = 5, .rank = 4, .alpha = 8, .targets = t1};
    CHECK(rn_synth_lora_write(&lo, base, test_tmp_path("a1.gguf"), &err) == CR_OK);
    lo.targets = t2;
    CHECK(rn_synth_lora_write(&lo, base, test_tmp_path("a2.gguf"), &err) == CR_OK);
    CHECK(rn_synth_lora_write(&lo, wide, test_tmp_path("wide-a.gguf"), &err) == CR_OK);
    lo.arch = "qwen2";
    CHECK(rn_synth_lora_write(&lo, base, test_tmp_path("qwen-a.gguf"), &err) == CR_OK);

    char d_base[80], d_a1[80], d_a2[80], d_wide[80], d_qwen[80];
    test_store_put_file(s, base, d_base);
    test_store_put_file(s, test_tmp_path("a1.gguf"), d_a1);
    test_store_put_file(s, test_tmp_path("a2.gguf"), d_a2);
    test_store_put_file(s, test_tmp_path("wide-a.gguf"), d_wide);
    test_store_put_file(s, test_tmp_path("qwen-a.gguf"), d_qwen);

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
    CHECK(!test_store_has_model(s, "bad"));

    test_peft(s, base, d_base);

    reg_store_destroy(&s);
    test_tmp_remove();
    return check_finish("test_registry_adapters");
}
