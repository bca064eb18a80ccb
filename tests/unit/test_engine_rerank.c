/* test_engine_rerank.c: embedding and reranking models through the engine.
 *
 * - qwen3 with pooling_type 3 (last), a decoder embedding model: the
 *   engine's embedding (rn_engine_embed, unnormalized) must be the final
 *   normed hidden state of the last token, checked independently: the
 *   output matrix times it must give the logits rn_ctx_eval computes for
 *   the same tokens (a mean- or first-pooled vector does not).
 * - bert with a unigram ("t5") vocabulary, the bge-m3 layout: loads,
 *   tokenizes <s> ... </s>, and embeds through the engine exactly as
 *   rn_ctx_embed does on those ids.
 * - rerankers (bert, pooling_type 4): rn_tokenizer_encode_pair's layouts for a
 *   WordPiece vocabulary ([CLS] q [SEP] d [SEP]) and an XLM-RoBERTa one
 *   (<s> q </s> </s> d </s>), and rn_engine_rerank's scores equal to
 *   rn_ctx_rank_seq on those ids (test_bert_forward checks the head itself
 *   against a scalar reference), truncation, and its errors. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/text/tokenizer.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

#include <math.h>
#include <unistd.h>

#define SP "\xe2\x96\x81"

static be_backend_t *be_g;
static char dir_g[64];

static bool never_canceled(void *ctx)
{
    CR_UNUSED(ctx);
    return false;
}

static bool no_chunk(void *ctx, const msg_chunk_body_t *c)
{
    CR_UNUSED(ctx);
    CR_UNUSED(c);
    return true;
}

static const rn_sink_t SINK = {NULL, no_chunk, never_canceled};

/* Embeds one input through the engine: out gets dims floats (<= cap). */
static int engine_embed(rn_engine_t *e, const char *text, bool normalize, float *out,
                        int cap, int64_t *n_tokens)
{
    char *inputs[1] = {(char *)text};
    msg_embed_body_t req = {0};
    req.model = "synth";
    req.input.v = inputs;
    req.input.n = 1;
    req.has_input = true;
    req.normalize = normalize;
    req.has_normalize = true;
    msg_embeddings_body_t res;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_engine_embed(e, &req, &SINK, &res, &err);
    CHECK_MSG(st == CR_OK, "embed: %s", err.msg);
    if (st || res.dims > cap)
        return 0;
    memcpy(out, res.data.data, (size_t)res.dims * sizeof *out);
    *n_tokens = res.prompt_eval_count;
    return (int)res.dims;
}

/* Loads path's model and tokenizer directly (the engine's are private). */
static rn_model_t *load_direct(const char *path, rn_tokenizer_t **tok)
{
    cr_err_t err;
    cr_err_clear(&err);
    rn_model_t *m = NULL;
    cr_status_t st = rn_model_load(path, be_g, &m, &err);
    if (!st)
        st = rn_tokenizer_load(rn_model_gguf(m), tok, &err);
    CHECK_MSG(st == CR_OK, "load %s: %s", path, err.msg);
    return m;
}

/* ---- qwen3, last-token pooling ------------------------------------------- */

static void test_qwen3_last(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/qwen3-embed.gguf", dir_g);
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "qwen3";
    o.seed = 7;
    o.weight_std = 0.1f;
    o.pooling_type = 3;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_synth_write(&o, path, &err) == CR_OK, "synth: %s", err.msg);
    rn_engine_t *e = test_engine_load(path, NULL, 64, 1);
    rn_tokenizer_t *tok = NULL;
    rn_model_t *m = load_direct(path, &tok);
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 64};
    if (!e || !m || !tok || rn_ctx_new(m, &co, &c, &err)) {
        CHECK(!"qwen3 setup");
        goto out;
    }
    const rn_hparams_t *hp = rn_model_hparams(m);
    CHECK_EQ_INT(hp->pooling, RN_POOL_LAST);
    const char *text = "hello world the cat";
    float emb[256];
    int64_t n_tok = 0;
    int D = engine_embed(e, text, false, emb, 256, &n_tok);
    CHECK_EQ_INT(D, hp->dim);
    /* the same ids the engine evaluated: BOS as the vocabulary says */
    int32_t ids[64];
    size_t n = 0;
    CHECK_EQ_INT(rn_tokenize(tok, text, strlen(text), true, false, ids, 64, &n, &err),
                 CR_OK);
    CHECK_EQ_INT(n_tok, (int64_t)n);
    CHECK_EQ_INT(rn_ctx_eval(c, ids, (int)n, 0, NULL, &err), CR_OK);
    const float *logits = rn_ctx_logits(c);
    /* logits = W_out . embedding (F32 weights: the backend's matmul sums
     * in float, the check in double; 1e-4 covers the rounding of 64-term
     * sums of ~0.1 x ~1 products) */
    const rn_weights_t *w = rn_model_weights(m);
    CHECK(w->output.type == CR_TYPE_F32);
    const float *wo = (const float *)w->output.data;
    double max_diff = 0, max_mean_diff = 0;
    float mean_emb[256];
    int64_t n2 = 0;
    /* a mean-pooled vector is not it: the same model file, pooling 1 */
    char mean_path[128];
    snprintf(mean_path, sizeof mean_path, "%s/qwen3-mean.gguf", dir_g);
    o.pooling_type = 1;
    CHECK_EQ_INT(rn_synth_write(&o, mean_path, &err), CR_OK);
    rn_engine_t *em = test_engine_load(mean_path, NULL, 64, 1);
    bool have_mean = em && engine_embed(em, text, false, mean_emb, 256, &n2) == D;
    for (int v = 0; D > 0 && v < hp->n_vocab; v++) {
        double s = 0, sm = 0;
        for (int i = 0; i < D; i++) {
            s += (double)wo[(size_t)v * D + i] * emb[i];
            sm += (double)wo[(size_t)v * D + i] * mean_emb[i];
        }
        max_diff = fmax(max_diff, fabs(s - logits[v]));
        max_mean_diff = fmax(max_mean_diff, fabs(sm - logits[v]));
    }
    printf("  qwen3 last pooling: |W.emb - logits| <= %.2g (mean pooling: %.2g)\n",
           max_diff, max_mean_diff);
    CHECK_MSG(max_diff <= 1e-4, "W.embedding differs from the logits by %g", max_diff);
    CHECK(have_mean && max_mean_diff > 1e-2);
    /* normalized by default: unit length, same direction */
    float unit[256];
    CHECK_EQ_INT(engine_embed(e, text, true, unit, 256, &n2), D);
    double nn = 0, dot = 0, ne = 0;
    for (int i = 0; i < D; i++) {
        nn += (double)unit[i] * unit[i];
        dot += (double)unit[i] * emb[i];
        ne += (double)emb[i] * emb[i];
    }
    CHECK_NEAR(nn, 1.0, 1e-5);
    CHECK_NEAR(dot / sqrt(ne), 1.0, 1e-5);
    rn_engine_destroy(&em);
    unlink(mean_path);
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    rn_tokenizer_destroy(&tok);
    rn_engine_destroy(&e);
    unlink(path);
}

/* ---- bert with a unigram vocabulary (bge-m3 layout) --------------------- */

enum { X_BOS, X_PAD, X_EOS, X_UNK, X_SP, X_HELLO, X_WORLD, X_CAT, X_A, X_N };

/* An XLM-RoBERTa style vocabulary (as llama.cpp's converter writes one):
 * <s> <pad> </s> <unk>, then pieces; cls = bos, sep = eos; add_bos,
 * add_eos and add_sep set (RobertaProcessing). */
static bool write_xlmr_vocab(const char *path)
{
    const char *toks[X_N] = {"<s>", "<pad>", "</s>", "<unk>", SP, SP "hello",
                             SP "world", SP "cat", "a"};
    float scores[X_N] = {0, 0, 0, 0, -3, -1, -1, -1, -2};
    int32_t types[X_N] = {3, 3, 3, 2, 1, 1, 1, 1, 1};
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "general.architecture", "bert", &e);
    cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "t5", &e);
    cr_gguf_writer_add_str(w, "tokenizer.ggml.pre", "default", &e);
    cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, X_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores, X_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, X_N, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", true, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.remove_extra_whitespaces", true, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", X_BOS, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", X_EOS, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", X_UNK, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.seperator_token_id", X_EOS, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", X_PAD, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.cls_token_id", X_BOS, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", true, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_sep_token", true, &e);
    bool ok = !cr_gguf_writer_write(w, path, &e);
    cr_gguf_writer_destroy(&w);
    return ok;
}

static void bert_opts(rn_synth_opts_t *o, int pooling, const char *vocab)
{
    rn_synth_defaults(o);
    o->arch = "bert";
    o->seed = 3;
    o->n_kv_heads = o->n_heads;
    o->ctx = 32;
    o->weight_std = 0.3f;
    o->rms_eps = 1e-12f;
    o->pooling_type = pooling;
    o->vocab_from = vocab;
}

static void test_bert_ugm(void)
{
    char vocab[128], path[128];
    snprintf(vocab, sizeof vocab, "%s/xlmr-vocab.gguf", dir_g);
    snprintf(path, sizeof path, "%s/bge-m3-like.gguf", dir_g);
    CHECK(write_xlmr_vocab(vocab));
    rn_synth_opts_t o;
    bert_opts(&o, 2, vocab);
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_synth_write(&o, path, &err) == CR_OK, "synth: %s", err.msg);
    rn_engine_t *e = test_engine_load(path, NULL, 32, 1);
    rn_tokenizer_t *tok = NULL;
    rn_model_t *m = load_direct(path, &tok);
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 32};
    if (!e || !m || !tok || rn_ctx_new(m, &co, &c, &err)) {
        CHECK(!"bert+t5 setup");
        goto out;
    }
    CHECK_EQ_INT(rn_tokenizer_kind(tok), RN_TOK_UGM);
    int32_t ids[32];
    size_t n = 0;
    CHECK_EQ_INT(rn_tokenize(tok, "Hello  world", 12, true, false, ids, 32, &n, &err),
                 CR_OK);
    /* "Hello" has no piece (no charsmap lowercases it here): one <unk> */
    int32_t want[] = {X_BOS, X_SP, X_UNK, X_WORLD, X_EOS};
    CHECK(n == 5 && !memcmp(ids, want, sizeof want));
    CHECK_EQ_INT(rn_tokenize(tok, "hello world", 11, true, false, ids, 32, &n, &err),
                 CR_OK);
    int32_t want2[] = {X_BOS, X_HELLO, X_WORLD, X_EOS};
    CHECK(n == 4 && !memcmp(ids, want2, sizeof want2));
    float got[128], direct[128];
    int64_t n_tok = 0;
    int D = engine_embed(e, "hello world", true, got, 128, &n_tok);
    CHECK_EQ_INT(D, rn_model_hparams(m)->dim);
    CHECK_EQ_INT(n_tok, 4);
    CHECK_EQ_INT(rn_ctx_embed(c, ids, (int)n, true, direct, &err), CR_OK);
    /* the same kernels; the engine normalizes on its own (in double, then
     * rounded), so the last bit may differ */
    double diff = 0;
    for (int i = 0; i < D; i++)
        diff = fmax(diff, fabs((double)got[i] - direct[i]));
    CHECK_MSG(D > 0 && diff <= 1e-6, "engine and direct embeddings differ by %g", diff);
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    rn_tokenizer_destroy(&tok);
    rn_engine_destroy(&e);
    unlink(path);
    unlink(vocab);
}

/* ---- rerankers ------------------------------------------------------------- */

static bool ids_are(const int32_t *got, size_t n, const int32_t *want, size_t n_want)
{
    return n == n_want && !memcmp(got, want, n * sizeof *got);
}

/* One reranker: pair layout, engine scores = rn_ctx_rank_seq on the pair's
 * ids, ordering, truncation and errors. */
static void check_reranker(const char *what, const char *vocab)
{
    char path[128];
    snprintf(path, sizeof path, "%s/rerank.gguf", dir_g);
    rn_synth_opts_t o;
    bert_opts(&o, 4, vocab);
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_synth_write(&o, path, &err) == CR_OK, "synth: %s", err.msg);
    rn_engine_t *e = test_engine_load(path, NULL, 32, 1);
    rn_tokenizer_t *tok = NULL;
    rn_model_t *m = load_direct(path, &tok);
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 32};
    if (!e || !m || !tok || rn_ctx_new(m, &co, &c, &err)) {
        CHECK(!"reranker setup");
        goto out;
    }
    const char *q = "hello world";
    const char *docs[3] = {"the cat", "hello", "world the cat the"};
    float scores[3] = {0};
    int64_t n_tok = 0;
    CHECK_EQ_INT(rn_engine_rerank(e, q, docs, 3, true, scores, &n_tok, &err), CR_OK);
    int64_t total = 0;
    for (int i = 0; i < 3; i++) {
        int32_t ids[32];
        size_t n = 0;
        CHECK_EQ_INT(rn_tokenizer_encode_pair(tok, q, strlen(q), docs[i], strlen(docs[i]),
                                              ids, 32, &n, &err),
                     CR_OK);
        float want = 0;
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, ids, (int)n, &want, &err), CR_OK);
        CHECK_MSG(scores[i] == want, "%s doc %d: engine %g, direct %g", what, i,
                  scores[i], want);
        total += (int64_t)n;
    }
    CHECK_EQ_INT(n_tok, total);
    CHECK(scores[0] != scores[1] && scores[1] != scores[2]);
    printf("  %s reranker: scores %+.4f %+.4f %+.4f over %" PRId64 " tokens\n", what,
           scores[0], scores[1], scores[2], n_tok);
    /* a pair past the context: cut and closed, or refused */
    char big[400] = "";
    for (int i = 0; i < 40; i++)
        strcat(big, "hello ");
    float s = 0;
    CHECK_EQ_INT(rn_engine_rerank(e, q, (const char *const[]){big}, 1, true, &s, &n_tok,
                                  &err),
                 CR_OK);
    CHECK_EQ_INT(n_tok, 32);
    cr_status_t st = rn_engine_rerank(e, q, (const char *const[]){big}, 1, false, &s,
                                      NULL, &err);
    CHECK(st == CR_E_INVALID && strstr(err.msg, "document 0"));
    /* no documents: nothing to do */
    CHECK_EQ_INT(rn_engine_rerank(e, q, NULL, 0, true, NULL, &n_tok, &err), CR_OK);
    CHECK_EQ_INT(n_tok, 0);
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    rn_tokenizer_destroy(&tok);
    rn_engine_destroy(&e);
    unlink(path);
}

static void test_pair_layouts(void)
{
    char vocab[128];
    snprintf(vocab, sizeof vocab, "%s/xlmr-vocab.gguf", dir_g);
    CHECK(write_xlmr_vocab(vocab));
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    int32_t ids[32];
    size_t n = 0;
    if (!cr_gguf_open(vocab, &g, &err) && !rn_tokenizer_load(g, &tok, &err)) {
        /* XLM-RoBERTa: <s> q </s> </s> d </s> */
        CHECK(rn_tokenizer_add_sep(tok) && rn_tokenizer_sep(tok) == X_EOS);
        CHECK_EQ_INT(rn_tokenizer_encode_pair(tok, "hello", 5, "cat", 3, ids, 32, &n, &err),
                     CR_OK);
        int32_t want[] = {X_BOS, X_HELLO, X_EOS, X_EOS, X_CAT, X_EOS};
        CHECK(ids_are(ids, n, want, CR_ARRAY_LEN(want)));
        /* special texts in the parts stay text */
        CHECK_EQ_INT(rn_tokenizer_encode_pair(tok, "</s>", 4, "", 0, ids, 32, &n, &err),
                     CR_OK);
        bool inner_eos = false;
        for (size_t i = 1; i + 3 < n; i++)
            inner_eos |= ids[i] == X_EOS;
        CHECK(n > 4 && !inner_eos);
        /* counts past cap */
        CHECK_EQ_INT(rn_tokenizer_encode_pair(tok, "hello", 5, "cat", 3, ids, 3, &n, &err),
                     CR_E_TOO_LARGE);
        CHECK(n == 6 && ids[0] == X_BOS && ids[2] == X_EOS);
    }
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    unlink(vocab);
    /* WordPiece (the synth's built-in vocabulary, [CLS] 1 and [SEP] 2):
     * [CLS] q [SEP] d [SEP] */
    rn_synth_opts_t o;
    bert_opts(&o, 4, NULL);
    o.vocab_only = true;
    void *bytes = NULL;
    size_t len = 0;
    if (!rn_synth_write_memory(&o, &bytes, &len, &err) &&
        !cr_gguf_open_memory(bytes, len, &g, &err) && !rn_tokenizer_load(g, &tok, &err)) {
        int32_t hello = rn_tokenizer_find(tok, SP "hello", 8);
        int32_t cat = rn_tokenizer_find(tok, SP "cat", 6);
        CHECK(!rn_tokenizer_add_sep(tok));
        CHECK_EQ_INT(rn_tokenizer_encode_pair(tok, "hello", 5, "cat", 3, ids, 32, &n, &err),
                     CR_OK);
        int32_t want[] = {1, hello, 2, cat, 2};
        CHECK(hello > 0 && cat > 0 && ids_are(ids, n, want, CR_ARRAY_LEN(want)));
    }
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    free(bytes);
}

static void test_rerankers(void)
{
    char vocab[128];
    snprintf(vocab, sizeof vocab, "%s/xlmr-vocab.gguf", dir_g);
    check_reranker("WordPiece", NULL);
    CHECK(write_xlmr_vocab(vocab));
    check_reranker("XLM-RoBERTa", vocab);
    unlink(vocab);
    /* not a reranker: said so */
    char path[128];
    snprintf(path, sizeof path, "%s/embed.gguf", dir_g);
    rn_synth_opts_t o;
    bert_opts(&o, 1, NULL);
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write(&o, path, &err), CR_OK);
    rn_engine_t *e = test_engine_load(path, NULL, 32, 1);
    if (e) {
        const char *d = "cat";
        float s;
        cr_status_t st = rn_engine_rerank(e, "hello", &d, 1, true, &s, NULL, &err);
        CHECK(st == CR_E_UNSUPPORTED && strstr(err.msg, "not a reranker"));
    }
    rn_engine_destroy(&e);
    unlink(path);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    snprintf(dir_g, sizeof dir_g, "/tmp/corral-rerank-XXXXXX");
    if (!mkdtemp(dir_g)) {
        perror("mkdtemp");
        return 1;
    }
    test_qwen3_last();
    test_bert_ugm();
    test_pair_layouts();
    test_rerankers();
    rmdir(dir_g);
    be_destroy(&be_g);
    return check_finish("test_engine_rerank");
}
