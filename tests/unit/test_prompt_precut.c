/* test_prompt_precut.c: messages history truncation could never keep are
 * cut before rendering, and the prompt's byte cap follows num_ctx
 * (prompt/precut.h; issue 20, finding 2: 100k messages took a runner over
 * a minute and its heartbeat).
 *
 * The cut must not change what truncation keeps: random conversations are
 * rendered through rn_prompt_chat with truncation, once whole and once
 * after the cut, under a counter that makes each byte a token (so a token
 * is at most one byte, max_token_bytes 1) and a template that shows every
 * message's role: the prompts must be the same bytes. */
#include "lib/prelude.h"
#include "services/runner/prompt/precut.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/template/template.h"
#include "tests/unit/check.h"

static void test_nothing_to_cut(void)
{
    rn_prompt_msg_t m[3] = {{.role = "user", .content = "a"},
                            {.role = "assistant", .content = "b"},
                            {.role = "user", .content = "c"}};
    rn_prompt_cut_t cut;
    CHECK_EQ_INT(rn_prompt_precut(m, 3, 4096, 16, &cut), 3);
    CHECK_EQ_INT(cut.msgs, 0);
    CHECK_EQ_INT(rn_prompt_precut(m, 1, 1, 16, &cut), 1);
    CHECK_EQ_INT(rn_prompt_precut(m, 3, 0, 16, &cut), 3); /* no context: no cut */
    CHECK_EQ_INT(rn_prompt_precut(m, 3, 1, 0, &cut), 3);
}

/* At most n_ctx of the newest non-system messages; system ones stay
 * wherever they are; images of the cut ones are counted. */
static void test_count(void)
{
    rn_prompt_msg_t m[7] = {{.role = "system", .content = "s0"},
                            {.role = "user", .content = "u1", .n_images = 2},
                            {.role = "assistant", .content = "a2"},
                            {.role = "user", .content = "u3", .n_images = 1},
                            {.role = "system", .content = "s4"},
                            {.role = "assistant", .content = "a5"},
                            {.role = "user", .content = "u6"}};
    rn_prompt_cut_t cut;
    size_t n = rn_prompt_precut(m, 7, 2, 16, &cut);
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(cut.msgs, 3);
    CHECK_EQ_INT(cut.images, 3);
    CHECK_EQ_INT(cut.system, 2);
    const char *want[] = {"s0", "s4", "a5", "u6"};
    for (size_t i = 0; i < n && i < 4; i++)
        CHECK_EQ_STR(m[i].content, want[i]);
}

/* Once the newer messages hold more than n_ctx x max_token_bytes bytes,
 * older ones go. */
static void test_bytes(void)
{
    char text[5][151];
    rn_prompt_msg_t m[5];
    for (int i = 0; i < 5; i++) {
        memset(text[i], 'a' + i, 150);
        text[i][150] = '\0';
        m[i] = (rn_prompt_msg_t){.role = i % 2 ? "assistant" : "user", .content = text[i]};
    }
    rn_prompt_cut_t cut;
    /* 400 bytes: 450 newer than message 1 is past it, 300 newer than 2 is not. */
    size_t n = rn_prompt_precut(m, 5, 100, 4, &cut);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(cut.msgs, 2);
    CHECK(n == 3 && m[0].content == text[2]);
}

/* One token per byte. */
static cr_status_t count_bytes(void *ctx, const char *text, size_t len, int64_t *n,
                               cr_err_t *err)
{
    CR_UNUSED(ctx);
    CR_UNUSED(text);
    CR_UNUSED(err);
    *n = (int64_t)len;
    return CR_OK;
}

static uint64_t rng_g = 88172645463325252ULL;
static unsigned rnd(unsigned n)
{
    rng_g ^= rng_g << 13;
    rng_g ^= rng_g >> 7;
    rng_g ^= rng_g << 17;
    return (unsigned)(rng_g % n);
}

static void test_same_as_truncation(void)
{
    enum { ROUNDS = 300, MAX_MSGS = 60 };
    static const char *const roles[] = {"user", "assistant", "tool", "system"};
    static char texts[MAX_MSGS][40];
    cr_err_t err;
    rn_tmpl_t *t = NULL;
    const char src[] = "{{ range .Messages }}{{ .Role }}:{{ .Content }}|{{ end }}";
    CHECK_EQ_INT(rn_tmpl_parse(src, strlen(src), &t, &err), CR_OK);
    int cut_rounds = 0;
    for (int r = 0; t && r < ROUNDS; r++) {
        rn_prompt_msg_t whole[MAX_MSGS], pre[MAX_MSGS];
        size_t n = 1 + rnd(MAX_MSGS);
        for (size_t i = 0; i < n; i++) {
            size_t len = rnd(sizeof texts[0]);
            for (size_t k = 0; k < len; k++)
                texts[i][k] = (char)('a' + rnd(26));
            texts[i][len] = '\0';
            whole[i] = (rn_prompt_msg_t){.role = roles[rnd(10) ? rnd(3) : 3],
                                         .content = texts[i]};
            pre[i] = whole[i];
        }
        int64_t n_ctx = 8 + rnd(300);
        rn_prompt_chat_t in = {.tmpl = t, .msgs = whole, .n_msgs = n,
                               .fit = {.truncate = true, .num_ctx = n_ctx,
                                       .count_tokens = count_bytes}};
        rn_prompt_result_t a = {0}, b = {0};
        cr_status_t sa = rn_prompt_chat(&in, &a, &err);
        rn_prompt_cut_t cut;
        in.msgs = pre;
        in.n_msgs = rn_prompt_precut(pre, n, n_ctx, 1, &cut);
        cut_rounds += cut.msgs > 0;
        cr_status_t sb = rn_prompt_chat(&in, &b, &err);
        CHECK_EQ_INT(sa, CR_OK);
        CHECK_EQ_INT(sb, CR_OK);
        if (!sa && !sb) {
            CHECK_MSG(a.len == b.len && !memcmp(a.text, b.text, a.len),
                      "round %d (%zu messages, num_ctx %lld, %zu cut): %.80s vs %.80s", r, n,
                      (long long)n_ctx, cut.msgs, a.text, b.text);
            CHECK_EQ_INT(a.msgs_dropped, b.msgs_dropped + cut.msgs);
        }
        rn_prompt_result_free(&a);
        rn_prompt_result_free(&b);
    }
    /* The rounds exercised the cut, not only the no-cut path. */
    CHECK_MSG(cut_rounds > ROUNDS / 4, "%d of %d rounds cut anything", cut_rounds, ROUNDS);
    rn_tmpl_destroy(&t);
}

static void test_bytes_cap(void)
{
    /* Twice n_ctx tokens of the longest piece, within [1 MiB, 32 MiB]. */
    CHECK_EQ_INT(rn_prompt_bytes_cap(4096, 256), 2u * 4096 * 256);
    CHECK_EQ_INT(rn_prompt_bytes_cap(256, 16), RN_PROMPT_CAP_MIN_BYTES);
    CHECK_EQ_INT(rn_prompt_bytes_cap(1 << 20, 256), RN_PROMPT_DEFAULT_MAX_BYTES);
    CHECK_EQ_INT(rn_prompt_bytes_cap((int64_t)1 << 40, (size_t)1 << 30),
                 RN_PROMPT_DEFAULT_MAX_BYTES); /* no overflow */
    CHECK_EQ_INT(rn_prompt_bytes_cap(0, 16), RN_PROMPT_DEFAULT_MAX_BYTES);
}

int main(void)
{
    test_nothing_to_cut();
    test_count();
    test_bytes();
    test_same_as_truncation();
    test_bytes_cap();
    return check_finish("prompt_precut");
}
