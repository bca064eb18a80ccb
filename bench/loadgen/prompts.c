/* prompts.c: prompt texts of an exact token count, measured by the server.
 *
 * Words of a fixed English list, picked by a seeded generator, are added
 * while the server's tokenizer says the text is short; a word that
 * overshoots is taken back and shorter words tried. Both engines tokenize
 * with the model's own vocabulary, so the caller checks the count on the
 * other engine too. */
#include "lib/prelude.h"
#include "bench/loadgen/loadgen.h"

#include <curl/curl.h>
#include <jansson.h>

#define REPLY_MAX (1 << 20)

static const char *const words[] = {
    "the", "river", "morning", "library", "garden", "question", "answer", "quiet",
    "window", "travel", "mountain", "city", "music", "paper", "light", "winter",
    "summer", "table", "history", "bridge", "market", "friend", "letter", "story",
    "engine", "simple", "number", "forest", "yellow", "orange", "village", "evening",
    "people", "school", "water", "stone", "kitchen", "island", "harbor", "silver",
    "a", "of", "to", "and", "in", "is", "on", "at",
};
#define N_WORDS ((int)CR_ARRAY_LEN(words))
#define N_SHORT 8 /* the last N_SHORT words are the short ones */

typedef struct reply {
    char *data;
    size_t len;
} reply_t;

static size_t on_reply(char *data, size_t size, size_t nmemb, void *ctx)
{
    reply_t *r = ctx;
    size_t n = size * nmemb;
    if (r->len + n >= REPLY_MAX)
        return 0; /* too large: the transfer fails */
    memcpy(r->data + r->len, data, n);
    r->len += n;
    r->data[r->len] = '\0';
    return n;
}

int lg_count_tokens(const lg_target_t *t, const char *text)
{
    json_t *req = t->kind == LG_CORRAL
                      ? json_pack("{s:s,s:s}", "model", t->model, "content", text)
                      : json_pack("{s:s,s:b}", "content", text, "add_special", 0);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    reply_t rep = {malloc(REPLY_MAX), 0};
    CURL *c = curl_easy_init();
    int n = -1;
    if (!body || !rep.data || !c)
        goto out;
    rep.data[0] = '\0';
    char url[300];
    snprintf(url, sizeof url, "http://%s%s", t->host,
             t->kind == LG_CORRAL ? "/api/tokenize" : "/tokenize");
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_reply);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &rep);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(hdr);
    if (rc != CURLE_OK || code != 200) {
        fprintf(stderr, "loadgen: %s tokenize: %s %ld %.200s\n", t->label,
                rc != CURLE_OK ? curl_easy_strerror(rc) : "HTTP", code, rep.data);
        goto out;
    }
    json_t *o = json_loads(rep.data, 0, NULL);
    json_t *tokens = json_object_get(o, "tokens");
    if (json_is_array(tokens))
        n = (int)json_array_size(tokens);
    else
        fprintf(stderr, "loadgen: %s tokenize: no tokens in %.200s\n", t->label, rep.data);
    json_decref(o);
out:
    if (c)
        curl_easy_cleanup(c);
    free(rep.data);
    free(body);
    return n;
}

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

/* Appends " word" (no space at the start); false when out is full. */
static bool append_word(char *out, size_t *len, const char *w)
{
    size_t wl = strlen(w);
    if (*len + wl + 2 >= LG_TEXT_MAX)
        return false;
    if (*len)
        out[(*len)++] = ' ';
    memcpy(out + *len, w, wl);
    *len += wl;
    out[*len] = '\0';
    return true;
}

bool lg_prompt_build(const lg_target_t *t, uint64_t seed, int n_tokens, char *out)
{
    uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    size_t len = 0;
    out[0] = '\0';
    int have = 0;
    /* Coarse: add about half the missing count in words, then measure. */
    while (have < n_tokens) {
        int add = (n_tokens - have) / 2;
        size_t before = len;
        for (int k = 0; k < (add > 0 ? add : 1); k++)
            if (!append_word(out, &len, words[next_rand(&rng) % N_WORDS]))
                return false;
        int n = lg_count_tokens(t, out);
        if (n < 0)
            return false;
        if (n > n_tokens) {
            len = before; /* overshot: take these back, go word by word */
            out[len] = '\0';
            break;
        }
        have = n;
    }
    /* Fine: one word at a time, short words when a long one overshoots. */
    for (int tries = 0; have != n_tokens && tries < 400; tries++) {
        size_t before = len;
        bool close = n_tokens - have <= 2;
        const char *w = close ? words[N_WORDS - N_SHORT + (int)(next_rand(&rng) % N_SHORT)]
                              : words[next_rand(&rng) % N_WORDS];
        if (!append_word(out, &len, w))
            return false;
        int n = lg_count_tokens(t, out);
        if (n < 0)
            return false;
        if (n > n_tokens) {
            len = before;
            out[len] = '\0';
        } else {
            have = n;
        }
    }
    if (have != n_tokens) {
        fprintf(stderr, "loadgen: no text of %d tokens found (seed %llu)\n", n_tokens,
                (unsigned long long)seed);
        return false;
    }
    return true;
}
