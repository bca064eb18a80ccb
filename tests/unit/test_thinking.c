/* test_thinking.c: the streaming reasoning splitter: tags at the start,
 * whitespace eating, no tag, prompt already open, partial tags held back,
 * every split point (one and two cuts, and byte by byte) giving the same
 * output, flush, bad tags, hostile text, and a full output buffer. */
#include "lib/prelude.h"
#include "services/runner/template/template.h"
#include "services/runner/output/thinking.h"
#include "tests/unit/check.h"

typedef struct result {
    char thinking[4096];
    char content[4096];
} result_t;

static rn_thinking_t *make(const char *open, const char *close, bool in)
{
    cr_err_t err = {0};
    rn_thinking_t *t = rn_thinking_new(open, close, in, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    return t;
}

/* Feeds text cut at the given offsets (ascending), then flushes. */
static void run_cuts(const char *open, const char *close, bool in,
                     const char *text, const size_t *cuts, size_t n_cuts,
                     result_t *r)
{
    rn_thinking_t *t = make(open, close, in);
    cr_buf_t th, co;
    cr_buf_init(&th, 1 << 20);
    cr_buf_init(&co, 1 << 20);
    size_t len = strlen(text), at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        CHECK_EQ_INT(rn_thinking_push(t, text + at, end - at, &th, &co), CR_OK);
        at = end;
    }
    CHECK_EQ_INT(rn_thinking_flush(t, &th, &co), CR_OK);
    CHECK_EQ_INT(rn_thinking_held(t), 0);
    snprintf(r->thinking, sizeof r->thinking, "%s", th.data ? th.data : "");
    snprintf(r->content, sizeof r->content, "%s", co.data ? co.data : "");
    cr_buf_free(&th);
    cr_buf_free(&co);
    rn_thinking_destroy(&t);
}

/* Checks the whole text, every single cut, every pair of cuts and byte by
 * byte all give want_thinking / want_content. */
static void check_all_splits(const char *open, const char *close, bool in,
                             const char *text, const char *want_thinking,
                             const char *want_content)
{
    result_t r;
    run_cuts(open, close, in, text, NULL, 0, &r);
    CHECK_EQ_STR(r.thinking, want_thinking);
    CHECK_EQ_STR(r.content, want_content);
    size_t len = strlen(text);
    int bad = 0;
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j++) {
            size_t cuts[2] = {i, j};
            run_cuts(open, close, in, text, cuts, 2, &r);
            if (strcmp(r.thinking, want_thinking) ||
                strcmp(r.content, want_content)) {
                if (!bad++)
                    fprintf(stderr, "cuts %zu,%zu: thinking \"%s\" content \"%s\"\n",
                            i, j, r.thinking, r.content);
            }
        }
    }
    size_t *all = malloc((len + 1) * sizeof *all);
    for (size_t i = 0; i < len; i++)
        all[i] = i + 1;
    run_cuts(open, close, in, text, all, len, &r);
    free(all);
    CHECK_EQ_STR(r.thinking, want_thinking);
    CHECK_EQ_STR(r.content, want_content);
    CHECK_MSG(bad == 0, "%d split pairs differ for \"%s\"", bad, text);
}

static void test_basic_split(void)
{
    check_all_splits("<think>", "</think>", false,
                     "<think>\nLet me see: 2+2.\n</think>\n\nThe answer is 4.",
                     "Let me see: 2+2.\n", "The answer is 4.");
}

static void test_leading_whitespace_before_open(void)
{
    check_all_splits("<think>", "</think>", false,
                     "  \n<think>  hmm</think>ok", "hmm", "ok");
}

static void test_no_tag_is_all_content(void)
{
    /* Leading whitespace kept when there is no reasoning. */
    check_all_splits("<think>", "</think>", false,
                     "\n Hello <think>not this</think> there",
                     "", "\n Hello <think>not this</think> there");
}

static void test_partial_open_then_other(void)
{
    check_all_splits("<think>", "</think>", false, "<thin>k", "", "<thin>k");
    check_all_splits("<think>", "</think>", false, "<<think>", "", "<<think>");
}

static void test_prompt_already_open(void)
{
    CHECK(rn_thinking_prompt_opens("<|im_start|>assistant\n<think>\n", "<think>"));
    CHECK(rn_thinking_prompt_opens("x<think>", " <think> "));
    CHECK(!rn_thinking_prompt_opens("<think>x", "<think>"));
    CHECK(!rn_thinking_prompt_opens("think>", "<think>"));
    CHECK(!rn_thinking_prompt_opens(NULL, "<think>"));
    CHECK(!rn_thinking_prompt_opens("<think>", NULL));
    CHECK(!rn_thinking_prompt_opens("<think>", "  "));
    check_all_splits("<think>", "</think>", true,
                     "\n\nreasoning here\n</think>\n\nanswer",
                     "reasoning here\n", "answer");
    /* Started open: an open tag in the output is just reasoning text. */
    check_all_splits("<think>", "</think>", true, "<think>x</think>y",
                     "<think>x", "y");
}

static void test_close_tag_overlaps(void)
{
    /* "<</think>" : the first '<' is thinking; partial close restarts. */
    check_all_splits("<think>", "</think>", false, "<think>a<</think>b",
                     "a<", "b");
    check_all_splits("<think>", "</think>", false,
                     "<think>a</thi</think>b", "a</thi", "b");
    /* Self-overlapping close tag. */
    check_all_splits("[S]", "]]x", false, "[S]a]]]x b", "a]", "b");
}

static void test_close_only_first_counts(void)
{
    check_all_splits("<think>", "</think>", false,
                     "<think>a</think> b </think> c", "a", "b </think> c");
}

static void test_whitespace_after_close_eaten_across_pieces(void)
{
    check_all_splits("<think>", "</think>", false,
                     "<think>t</think>  \n \n  done  ", "t", "done  ");
    /* Only whitespace after the close tag: no content at all. */
    check_all_splits("<think>", "</think>", false, "<think>t</think>\n\n", "t",
                     "");
}

static void test_unterminated_thinking_flushes(void)
{
    /* Generation ends inside the reasoning with a partial close tag. */
    check_all_splits("<think>", "</think>", false, "<think>abc</thi", "abc</thi",
                     "");
    /* Ends after a partial open tag: it is content. */
    check_all_splits("<think>", "</think>", false, "  <thi", "", "  <thi");
    /* Only whitespace: content. */
    check_all_splits("<think>", "</think>", false, " \n", "", " \n");
    check_all_splits("<think>", "</think>", false, "", "", "");
}

static void test_utf8_and_other_tags(void)
{
    check_all_splits("◁think▷", "◁/think▷", false,
                     "◁think▷ 思考 ◁/think▷ 答え", "思考 ", "答え");
    check_all_splits("<|begin_of_thought|>", "<|end_of_thought|>", false,
                     "<|begin_of_thought|>a|b<|end_of_thought|>c", "a|b", "c");
}

static void test_state_queries(void)
{
    rn_thinking_t *t = make("<think>", "</think>", false);
    cr_buf_t th, co;
    cr_buf_init(&th, 1024);
    cr_buf_init(&co, 1024);
    CHECK(!rn_thinking_in_thinking(t));
    CHECK(!rn_thinking_is_done(t));
    CHECK_EQ_INT(rn_thinking_push(t, " <thi", 5, &th, &co), CR_OK);
    CHECK_EQ_INT(rn_thinking_held(t), 5);
    CHECK_EQ_INT(co.len, 0);
    CHECK_EQ_INT(rn_thinking_push(t, "nk>x</", 6, &th, &co), CR_OK);
    CHECK(rn_thinking_in_thinking(t));
    CHECK_EQ_INT(rn_thinking_held(t), 2);
    CHECK_EQ_STR(th.data, "x");
    CHECK_EQ_INT(rn_thinking_push(t, "think>", 6, &th, &co), CR_OK);
    CHECK(!rn_thinking_in_thinking(t));
    CHECK(rn_thinking_is_done(t));
    CHECK_EQ_INT(rn_thinking_push(t, "y", 1, &th, &co), CR_OK);
    CHECK_EQ_STR(co.data, "y");
    /* After a flush everything is content. */
    CHECK_EQ_INT(rn_thinking_flush(t, &th, &co), CR_OK);
    CHECK_EQ_INT(rn_thinking_push(t, "<think>z", 8, &th, &co), CR_OK);
    CHECK_EQ_STR(co.data, "y<think>z");
    CHECK_EQ_STR(th.data, "x");
    cr_buf_free(&th);
    cr_buf_free(&co);
    rn_thinking_destroy(&t);
    CHECK(t == NULL);
    rn_thinking_destroy(&t);
    rn_thinking_destroy(NULL);
}

static void test_bad_tags(void)
{
    cr_err_t err = {0};
    CHECK(rn_thinking_new(NULL, "</think>", false, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    CHECK(strstr(err.msg, "open") != NULL);
    CHECK(rn_thinking_new("<think>", "", false, &err) == NULL);
    CHECK(strstr(err.msg, "close") != NULL);
    CHECK(rn_thinking_new(" \n ", "</think>", false, &err) == NULL);
    char big[RN_THINKING_TAG_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK(rn_thinking_new("<think>", big, false, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    big[RN_THINKING_TAG_MAX] = '\0'; /* exactly the limit is fine */
    rn_thinking_t *t = rn_thinking_new(big, "</think>", false, &err);
    CHECK(t != NULL);
    rn_thinking_destroy(&t);
    /* Tags are trimmed. */
    result_t r;
    run_cuts(" <think>\n", "\t</think> ", false, "<think>a</think>b", NULL, 0, &r);
    CHECK_EQ_STR(r.thinking, "a");
    CHECK_EQ_STR(r.content, "b");
}

static void test_hostile_whitespace_flood(void)
{
    /* More leading whitespace than the parser holds: it gives up waiting
     * for the tag and passes everything on as content, losing nothing. */
    size_t n = RN_THINKING_WS_MAX + 100;
    char *text = malloc(n + 20);
    memset(text, ' ', n);
    strcpy(text + n, "<think>x</think>y");
    rn_thinking_t *t = make("<think>", "</think>", false);
    cr_buf_t th, co;
    cr_buf_init(&th, 1 << 20);
    cr_buf_init(&co, 1 << 20);
    for (size_t i = 0; i < strlen(text); i += 7)
        CHECK_EQ_INT(rn_thinking_push(t, text + i, CR_MIN(7, strlen(text) - i),
                                      &th, &co), CR_OK);
    CHECK(rn_thinking_held(t) <= RN_THINKING_WS_MAX);
    CHECK_EQ_INT(rn_thinking_flush(t, &th, &co), CR_OK);
    CHECK_EQ_INT(th.len, 0);
    CHECK_EQ_STR(co.data, text);
    cr_buf_free(&th);
    cr_buf_free(&co);
    rn_thinking_destroy(&t);
    free(text);
}

static void test_hostile_bytes(void)
{
    /* NULs, invalid UTF-8, tag fragments in every order: no crash, and the
     * output bytes are exactly the input minus tags and eaten whitespace. */
    static const char frag[] = "<think>\0\xff\xfe</think</think><<//think> \n";
    uint32_t seed = 12345;
    rn_thinking_t *t = make("<think>", "</think>", false);
    cr_buf_t th, co;
    cr_buf_init(&th, 1 << 20);
    cr_buf_init(&co, 1 << 20);
    size_t total = 0;
    for (int i = 0; i < 2000; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t a = (seed >> 16) % sizeof frag;
        size_t b = (seed >> 8) % (sizeof frag - a + 1);
        CHECK_EQ_INT(rn_thinking_push(t, frag + a, b, &th, &co), CR_OK);
        total += b;
    }
    CHECK_EQ_INT(rn_thinking_flush(t, &th, &co), CR_OK);
    CHECK(th.len + co.len <= total);
    cr_buf_free(&th);
    cr_buf_free(&co);
    rn_thinking_destroy(&t);
}

static void test_full_output_buffer(void)
{
    rn_thinking_t *t = make("<think>", "</think>", false);
    cr_buf_t th, co;
    cr_buf_init(&th, 4);
    cr_buf_init(&co, 4);
    CHECK_EQ_INT(rn_thinking_push(t, "<think>0123456789", 17, &th, &co),
                 CR_E_TOO_LARGE);
    rn_thinking_destroy(&t);
    t = make("<think>", "</think>", false);
    CHECK_EQ_INT(rn_thinking_push(t, "0123456789", 10, &th, &co), CR_E_TOO_LARGE);
    rn_thinking_destroy(&t);
    cr_buf_free(&th);
    cr_buf_free(&co);
}

/* Random texts of tag fragments and whitespace, cut at random places:
 * the output never depends on the cuts. */
static void test_random_split_invariance(void)
{
    static const char *const frags[] = {"<think>", "</think>", "<", "</", "<th",
                                        "</thi", "nk>", " ", "\n", "x", "y z",
                                        ">", "think"};
    uint32_t seed = 99;
    int bad = 0;
    char text[512];
    for (int n = 0; n < 600; n++) {
        size_t len = 0;
        seed = seed * 1103515245u + 12345u;
        int k = 1 + (int)((seed >> 16) % 20);
        for (int f = 0; f < k; f++) {
            seed = seed * 1103515245u + 12345u;
            len += (size_t)snprintf(text + len, sizeof text - len, "%s",
                                    frags[(seed >> 16) % CR_ARRAY_LEN(frags)]);
        }
        bool in = n % 3 == 0;
        result_t whole, r;
        run_cuts("<think>", "</think>", in, text, NULL, 0, &whole);
        for (int rep = 0; rep < 6; rep++) {
            size_t cuts[4];
            for (int c = 0; c < 4; c++) {
                seed = seed * 1103515245u + 12345u;
                cuts[c] = (seed >> 16) % (len + 1);
            }
            for (int x = 1; x < 4; x++)
                for (int y = x; y > 0 && cuts[y - 1] > cuts[y]; y--) {
                    size_t t = cuts[y];
                    cuts[y] = cuts[y - 1];
                    cuts[y - 1] = t;
                }
            run_cuts("<think>", "</think>", in, text, cuts, 4, &r);
            if (strcmp(r.thinking, whole.thinking) ||
                strcmp(r.content, whole.content))
                bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d random splits differ", bad);
}

/* The message parts of Ollama's qwen3 template: tags come from the template,
 * the prompt of a thinking turn ends with the assistant header, and the
 * parser splits the answer. */
static const char qwen3_tmpl[] =
"{{- range $i, $_ := .Messages }}\n"
"{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n"
"{{- if eq .Role \"user\" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n"
"{{ else if eq .Role \"assistant\" }}<|im_start|>assistant\n"
"{{ if (and $.IsThinkSet (and .Thinking (or $last (not $.IsThinkSet)))) -}}\n"
"<think>{{ .Thinking }}</think>\n"
"{{ end -}}\n"
"{{ if .Content }}{{ .Content }}{{ end }}{{ if not $last }}<|im_end|>\n{{ end }}\n"
"{{- end }}\n"
"{{- if and (ne .Role \"assistant\") $last }}<|im_start|>assistant\n"
"{{ if and $.IsThinkSet (not $.Think) -}}\n<think>\n\n</think>\n\n{{ end -}}\n"
"{{ end }}\n"
"{{- end }}";

static void test_tags_from_template(void)
{
    rn_tmpl_t *t = NULL;
    cr_err_t err = {0};
    CHECK_MSG(rn_tmpl_parse(qwen3_tmpl, strlen(qwen3_tmpl), &t, &err) == CR_OK,
              "%s", err.msg);
    char open[64] = "", close[64] = "";
    if (t)
        rn_tmpl_thinking_tags(t, open, sizeof open, close, sizeof close);
    rn_tmpl_destroy(&t);
    CHECK_EQ_STR(open, "<think>");
    CHECK_EQ_STR(close, "</think>");
    CHECK(!rn_thinking_prompt_opens("<|im_start|>user\nhi<|im_end|>\n"
                                    "<|im_start|>assistant\n", open));
    /* deepseek-r1 style: the template opens the reasoning itself */
    CHECK(rn_thinking_prompt_opens("<｜Assistant｜><think>\n", open));
    check_all_splits(open, close, false,
                     "<think>\nUser greets.\n</think>\n\nHello!", "User greets.\n",
                     "Hello!");
}

int main(void)
{
    test_basic_split();
    test_leading_whitespace_before_open();
    test_no_tag_is_all_content();
    test_partial_open_then_other();
    test_prompt_already_open();
    test_close_tag_overlaps();
    test_close_only_first_counts();
    test_whitespace_after_close_eaten_across_pieces();
    test_unterminated_thinking_flushes();
    test_utf8_and_other_tags();
    test_state_queries();
    test_bad_tags();
    test_hostile_whitespace_flood();
    test_hostile_bytes();
    test_full_output_buffer();
    test_tags_from_template();
    test_random_split_invariance();
    return check_finish("test_thinking");
}
