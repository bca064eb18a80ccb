/* test_e2e_lora.c: `ADAPTER ./lora.gguf` through the whole services.
 *
 * corral-lora-synth writes a LoRA adapter (rank 4, alpha 8, on attention
 * and FFN projections of both layers) for a synthetic llama and the model
 * with that adapter merged into its weights. Created with `corral create`
 * from a Modelfile (FROM + ADAPTER), the adapted model's greedy answer
 * equals the merged model's, with every step's logprob within 1e-3 (run
 * time B (A x) against merged weights: the same sums in another order),
 * and differs from the base model's (the adapter is applied, not stored
 * and ignored); show's Modelfile lists the ADAPTER; the same adapter as a
 * PEFT folder (`ADAPTER ./peft`, written by corral-lora-synth --to-peft)
 * is converted at create and answers the same. An adapter made for
 * another model is refused at create with the tensor named, and no model
 * is stored. */
#include "lib/prelude.h"

#include <math.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

/* `corral create name -f <tmp>/Modelfile`: exit status, output in *out. */
static int create(const char *name, const char *modelfile, char **out)
{
    char mf[1200], log[1200], cmd[4000];
    snprintf(mf, sizeof mf, "%s/Modelfile", T.tmp);
    snprintf(log, sizeof log, "%s/create.out", T.tmp);
    if (!e2e_write_file(mf, modelfile))
        return -1;
    snprintf(cmd, sizeof cmd, "'%s/corral' create %s -f '%s' > '%s' 2>&1", T.bin_dir, name, mf,
             log);
    int rc = system(cmd);
    FILE *f = fopen(log, "r");
    *out = calloc(1, 65536);
    if (f && *out) {
        size_t n = fread(*out, 1, 65535, f);
        (*out)[n] = '\0';
    }
    if (f)
        fclose(f);
    return rc;
}

/* Greedy /api/generate with logprobs: the parsed response (caller frees). */
static json_t *greedy(const char *model)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"Once upon a time\",\"raw\":true,"
             "\"stream\":false,\"logprobs\":true,"
             "\"options\":{\"temperature\":0,\"num_predict\":12,\"seed\":1}}",
             model);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, NULL, NULL);
    CHECK_MSG(r.status == 200, "%s: %ld %s", model, r.status, r.body ? r.body : "");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    e2e_resp_free(&r);
    return j;
}

/* Largest |logprob difference| over the steps both answers have; *same
 * says whether their texts are equal. */
static double logprob_gap(json_t *a, json_t *b, bool *same)
{
    *same = !strcmp(e2e_jstr(a, "response"), e2e_jstr(b, "response"));
    json_t *la = json_object_get(a, "logprobs"), *lb = json_object_get(b, "logprobs");
    size_t n = CR_MIN(json_array_size(la), json_array_size(lb));
    double gap = n ? 0 : INFINITY;
    for (size_t i = 0; i < n; i++) {
        double x = json_number_value(json_object_get(json_array_get(la, i), "logprob"));
        double y = json_number_value(json_object_get(json_array_get(lb, i), "logprob"));
        gap = fmax(gap, fabs(x - y));
    }
    return gap;
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    char base[1200], lora[1200], merged[1200], wide[1200], wide_lora[1200];
    snprintf(base, sizeof base, "%s/base.gguf", T.tmp);
    snprintf(lora, sizeof lora, "%s/lora.gguf", T.tmp);
    snprintf(merged, sizeof merged, "%s/merged.gguf", T.tmp);
    snprintf(wide, sizeof wide, "%s/wide.gguf", T.tmp);
    snprintf(wide_lora, sizeof wide_lora, "%s/wide-lora.gguf", T.tmp);
    CHECK(e2e_run_bin(&T, "corral-gguf-synth", "--seed", "5", "--ctx", "512", "--out", base,
                      NULL) == 0);
    CHECK(e2e_run_bin(&T, "corral-gguf-synth", "--seed", "5", "--dim", "96", "--out", wide,
                      NULL) == 0);
    CHECK(e2e_run_bin(&T, "corral-lora-synth", "--base", base, "--out", lora, "--seed", "9",
                      "--rank", "4", "--alpha", "8", "--std", "0.1", "--target",
                      "blk.0.attn_q.weight", "--target", "blk.0.attn_v.weight", "--target",
                      "blk.1.attn_output.weight", "--target", "blk.0.ffn_up.weight",
                      "--target", "blk.1.ffn_down.weight", NULL) == 0);
    CHECK(e2e_run_bin(&T, "corral-lora-synth", "--merge", "--base", base, "--out", merged,
                      lora, NULL) == 0);
    CHECK(e2e_run_bin(&T, "corral-lora-synth", "--base", wide, "--out", wide_lora,
                      "--target", "blk.0.attn_q.weight", NULL) == 0);

    char *out = NULL;
    CHECK_MSG(create("tuned", "FROM ./base.gguf\nADAPTER ./lora.gguf\n", &out) == 0, "%s",
              out ? out : "");
    free(out);
    CHECK(create("merged", "FROM ./merged.gguf\n", &out) == 0);
    free(out);
    CHECK(create("plain", "FROM ./base.gguf\n", &out) == 0);
    free(out);

    json_t *t = greedy("tuned"), *m = greedy("merged"), *p = greedy("plain");
    bool same = false, same_plain = false;
    double gap = logprob_gap(t, m, &same), gap_plain = logprob_gap(t, p, &same_plain);
    printf("  adapter vs merged: same text %d, max logprob gap %.2e; vs base: same text %d, "
           "gap %.2e\n", same, gap, same_plain, gap_plain);
    CHECK_MSG(same, "tuned '%s' vs merged '%s'", e2e_jstr(t, "response"),
              e2e_jstr(m, "response"));
    CHECK(gap < 1e-3);
    CHECK(gap_plain > 1e-2);
    json_decref(t);
    json_decref(m);
    json_decref(p);

    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"tuned\"}", NULL, NULL);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_MSG(strstr(e2e_jstr(j, "modelfile"), "\nADAPTER ") != NULL, "%s",
              e2e_jstr(j, "modelfile"));
    json_decref(j);
    e2e_resp_free(&r);

    /* the same adapter as a PEFT folder: converted at create, same answer */
    char peft[1200], cmd[1300];
    snprintf(peft, sizeof peft, "%s/peft", T.tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", peft);
    CHECK(system(cmd) == 0);
    CHECK(e2e_run_bin(&T, "corral-lora-synth", "--to-peft", peft, "--base", base, lora,
                      NULL) == 0);
    int rc = create("tuned-peft", "FROM ./base.gguf\nADAPTER ./peft\n", &out);
    CHECK_MSG(rc == 0 && strstr(out, "converting adapter"), "%s", out ? out : "");
    free(out);
    m = greedy("merged");
    t = greedy("tuned-peft");
    gap = logprob_gap(t, m, &same);
    printf("  PEFT folder vs merged: same text %d, max logprob gap %.2e\n", same, gap);
    CHECK(same && gap < 1e-3);
    json_decref(t);
    json_decref(m);

    rc = create("badtune", "FROM ./base.gguf\nADAPTER ./wide-lora.gguf\n", &out);
    CHECK(rc != 0);
    CHECK_MSG(out && strstr(out, "adapter wide-lora.gguf: 'blk.0.attn_q.weight.lora_a'"), "%s",
              out ? out : "");
    free(out);
    r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"badtune\"}", NULL, NULL);
    CHECK_EQ_INT(r.status, 404);
    e2e_resp_free(&r);

    e2e_stop(&T);
    return check_finish("test_e2e_lora");
}
