/* test_batch.c: the batched forward pass over several sequences.
 *
 * rn_ctx_eval_batch runs spans of several sequences (a decode token of one,
 * a prompt chunk of another) in one pass. Each sequence's logits must be
 * those of the same tokens evaluated alone in a one-sequence context, with
 * the same chunking, for different prompt lengths and positions, after a
 * sequence drops its tail, and on the architectures whose attention takes
 * other paths (gemma2: soft-capped, sliding-window layers; qwen2: biases,
 * NEOX rope). Tolerance: 1e-4 absolute on logits of magnitude ~1-10. The
 * same kernels run in both cases and only the number of rows per matmul
 * differs, which may change the summation order of a kernel (on the CPU
 * backend it does not: every (row, token) takes the same float steps, so
 * the difference is in fact 0 and is printed); a wrong position, cache or
 * sequence gives differences of order 1. Also: bad batches are refused
 * before anything is evaluated, and the KV cache scales with n_seq. With
 * the shared testdata the same runs on stories260K. */
#include "lib/prelude.h"

#include <math.h>
#include <unistd.h>

#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

#define TOL 1e-4
#define N_SEQ 3
#define N_STEPS 6

static be_backend_t *be_g;
static double worst_g; /* largest difference seen, for the log */

static rn_ctx_t *new_ctx(const rn_model_t *m, int n_ctx, int n_batch, int n_seq)
{
    cr_err_t err;
    cr_err_clear(&err);
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t o = {.n_ctx = n_ctx, .n_batch = n_batch, .n_seq = n_seq};
    CHECK_MSG(rn_ctx_new(m, &o, &c, &err) == CR_OK, "ctx: %s", err.msg);
    return c;
}

static bool close_to(const char *label, int seq, int step, const float *a,
                     const float *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    if (d > worst_g)
        worst_g = d;
    CHECK_MSG(d <= TOL, "%s: seq %d step %d differs by %g", label, seq, step, d);
    return d <= TOL;
}

/* The script: per sequence, a prompt, then per step a span of 1..3 tokens
 * (decode tokens and prompt chunks mixed), some steps skipped (the sequence
 * waits), and at step 3 sequence 1 drops its tail and re-evaluates from an
 * earlier position (a new request keeping a common prefix). */
typedef struct plan {
    int n;   /* tokens this step (0: not in the batch) */
    int pos; /* -1: append at n_past */
} plan_t;

static const plan_t plan_g[N_STEPS][N_SEQ] = {
    {{5, -1}, {11, -1}, {2, -1}}, /* prompts of different lengths */
    {{1, -1}, {1, -1}, {1, -1}},  /* three decode tokens */
    {{1, -1}, {3, -1}, {0, -1}},  /* a chunk; seq 2 waits */
    {{1, -1}, {4, 6}, {1, -1}},   /* seq 1 from position 6 again */
    {{0, -1}, {1, -1}, {2, -1}},
    {{1, -1}, {1, -1}, {1, -1}},
};

static int32_t token_for(int seq, int step, int i, int n_vocab)
{
    return (int32_t)((1 + seq * 97 + step * 31 + i * 7) % n_vocab);
}

static void check_batch_equals_alone(const char *label, const rn_model_t *m)
{
    int V = rn_model_hparams(m)->n_vocab;
    cr_err_t err;
    cr_err_clear(&err);
    rn_ctx_t *batch = new_ctx(m, 64, 32, N_SEQ);
    rn_ctx_t *alone[N_SEQ] = {0};
    for (int s = 0; s < N_SEQ; s++)
        alone[s] = new_ctx(m, 64, 32, 1);
    int32_t toks[N_SEQ][16];
    rn_ctx_span_t spans[N_SEQ];
    for (int step = 0; batch && step < N_STEPS; step++) {
        int n_spans = 0;
        for (int s = 0; s < N_SEQ; s++) {
            const plan_t *p = &plan_g[step][s];
            if (!p->n)
                continue;
            int pos = p->pos >= 0 ? p->pos : rn_ctx_seq_n_past(batch, s);
            for (int i = 0; i < p->n; i++)
                toks[s][i] = token_for(s, step, i, V);
            spans[n_spans++] = (rn_ctx_span_t){s, toks[s], p->n, pos, NULL, NULL, false, NULL};
        }
        CHECK_EQ_INT(rn_ctx_eval_batch(batch, spans, n_spans, &err), CR_OK);
        for (int k = 0; k < n_spans; k++) {
            const rn_ctx_span_t *sp = &spans[k];
            rn_ctx_t *a = alone[sp->seq];
            if (!a)
                continue;
            CHECK_EQ_INT(rn_ctx_eval(a, sp->tokens, sp->n, sp->pos, NULL, &err), CR_OK);
            CHECK_EQ_INT(rn_ctx_seq_n_past(batch, sp->seq), rn_ctx_n_past(a));
            close_to(label, sp->seq, step, rn_ctx_seq_logits(batch, sp->seq),
                     rn_ctx_logits(a), V);
        }
    }
    /* Sequence 0 of a one-sequence context is the old API. */
    if (batch && alone[0])
        CHECK(rn_ctx_kv_bytes(batch) == N_SEQ * rn_ctx_kv_bytes(alone[0]));
    rn_ctx_destroy(&batch);
    for (int s = 0; s < N_SEQ; s++)
        rn_ctx_destroy(&alone[s]);
}

static void check_bad_batches(const rn_model_t *m)
{
    cr_err_t err;
    rn_ctx_t *c = new_ctx(m, 16, 4, 2);
    if (!c)
        return;
    int32_t t[5] = {1, 2, 3, 4, 5};
    rn_ctx_span_t ok = {0, t, 2, 0, NULL, NULL, false, NULL};
    CHECK_EQ_INT(rn_ctx_eval_batch(c, &ok, 1, &err), CR_OK);
    float before[8];
    memcpy(before, rn_ctx_seq_logits(c, 0), sizeof before);

    rn_ctx_span_t twice[2] = {{0, t, 1, 2, NULL, NULL, false, NULL}, {0, t, 1, 2, NULL, NULL, false, NULL}};
    CHECK_EQ_INT(rn_ctx_eval_batch(c, twice, 2, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "twice") != NULL);
    rn_ctx_span_t range = {2, t, 1, 0, NULL, NULL, false, NULL};
    CHECK_EQ_INT(rn_ctx_eval_batch(c, &range, 1, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "sequence 2") != NULL);
    rn_ctx_span_t past = {1, t, 1, 1, NULL, NULL, false, NULL}; /* sequence 1 is empty */
    CHECK_EQ_INT(rn_ctx_eval_batch(c, &past, 1, &err), CR_E_INVALID);
    /* 5 > n_batch 4 */
    rn_ctx_span_t big[2] = {{0, t, 2, 2, NULL, NULL, false, NULL}, {1, t, 3, 0, NULL, NULL, false, NULL}};
    CHECK_EQ_INT(rn_ctx_eval_batch(c, big, 2, &err), CR_E_TOO_LARGE);
    int32_t bad = 1 << 30;
    rn_ctx_span_t vocab[2] = {{1, t, 1, 0, NULL, NULL, false, NULL}, {0, &bad, 1, 2, NULL, NULL, false, NULL}};
    CHECK_EQ_INT(rn_ctx_eval_batch(c, vocab, 2, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "span 1") != NULL);
    CHECK_EQ_INT(rn_ctx_eval_batch(c, &ok, 0, &err), CR_E_INVALID);
    /* Nothing was evaluated by the refused batches. */
    CHECK_EQ_INT(rn_ctx_seq_n_past(c, 0), 2);
    CHECK_EQ_INT(rn_ctx_seq_n_past(c, 1), 0);
    CHECK(memcmp(before, rn_ctx_seq_logits(c, 0), sizeof before) == 0);
    rn_ctx_opts_t o = {.n_ctx = 16, .n_seq = RN_CTX_MAX_SEQ + 1};
    rn_ctx_t *none = NULL;
    CHECK_EQ_INT(rn_ctx_new(m, &o, &none, &err), CR_E_INVALID);
    rn_ctx_destroy(&c);
}

static void run_synth(const char *label, rn_synth_opts_t *so, bool bad_batches)
{
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write_memory(so, &bytes, &len, &err)) {
        CHECK_MSG(false, "%s: synth: %s", label, err.msg);
        return;
    }
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    cr_status_t st = cr_gguf_open_memory(bytes, len, &g, &err);
    if (!st)
        st = rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(st == CR_OK, "%s: load: %s", label, err.msg);
    if (m) {
        check_batch_equals_alone(label, m);
        if (bad_batches)
            check_bad_batches(m);
    }
    rn_model_destroy(&m);
    free(bytes);
}

int main(void)
{
    cr_err_t err;
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0;
    run_synth("llama q8_0", &so, true);

    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q4_0;
    so.n_kv_heads = so.n_heads / 2; /* grouped KV heads */
    run_synth("llama q4_0 gqa", &so, false);

    rn_synth_defaults(&so);
    so.arch = "gemma2";
    so.type = CR_TYPE_F16;
    so.sliding_window = 4; /* binds within the script's positions */
    so.swa_pattern = 2;
    so.attn_softcap = 50.0f;
    so.final_softcap = 30.0f;
    run_synth("gemma2 f16", &so, false);

    rn_synth_defaults(&so);
    so.arch = "qwen2";
    so.type = CR_TYPE_F32;
    run_synth("qwen2 f32", &so, false);

    const char *root = check_testdata("models/stories260K.gguf");
    if (root) {
        char path[2048];
        snprintf(path, sizeof path, "%s/models/stories260K.gguf", root);
        rn_model_t *m = NULL;
        cr_err_clear(&err);
        CHECK_MSG(rn_model_load(path, be_g, &m, &err) == CR_OK, "stories: %s", err.msg);
        if (m)
            check_batch_equals_alone("stories260K", m);
        rn_model_destroy(&m);
    } else {
        printf("batch: stories260K check skipped: no shared testdata\n");
    }
    printf("batch: largest difference batched vs alone: %g (tolerance %g)\n",
           worst_g, TOL);
    be_destroy(&be_g);
    return check_finish("batch");
}
