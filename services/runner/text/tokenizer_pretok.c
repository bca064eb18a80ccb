/* tokenizer_pretok.c: the pre-tokenizers that split text into words before
 * byte-level BPE, written by hand (no regex library).
 *
 * Each pre-tokenizer is a list of stages, one per regular expression of the
 * model's tokenizer.json, applied the way llama.cpp applies them: a stage
 * runs inside every piece the previous stage produced (the piece's ends are
 * the text's ends for anchors and look-aheads), and both its matches and the
 * unmatched runs between them become pieces. A stage is a matcher: given a
 * position it returns the length of the match the regex would find there
 * (ordered alternation, greedy quantifiers with backtracking), or 0; the
 * driver scans left to right like a regex iterator.
 *
 * Character classes follow llama.cpp: \p{L}, \p{N}, \p{P} are the Unicode
 * general categories, \s is White_Space; stages whose regex has literal
 * non-ASCII characters see non-ASCII white space as U+000B, as std::wregex
 * does there. Owns no state. */
#include "lib/prelude.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"

enum { F_WS = 1, F_L = 2, F_N = 4, F_P = 8 };

typedef struct seg {
    const uint32_t *cp; /* code points of the whole text */
    const uint8_t *fl;  /* F_* per code point */
    size_t start, end;  /* the piece being split */
    size_t trail;       /* start of the piece's trailing white space run,
                           for \s+$; SIZE_MAX until computed */
} seg_t;

typedef size_t (*match_fn)(seg_t *s, size_t pos);

static inline bool has(const seg_t *s, size_t i, uint8_t f)
{
    return i < s->end && (s->fl[i] & f);
}

/* "Other": not white space, letter or number ([^\s\p{L}\p{N}]). */
static inline bool other(const seg_t *s, size_t i)
{
    return i < s->end && !(s->fl[i] & (F_WS | F_L | F_N));
}

static inline bool is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static inline uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static size_t run(const seg_t *s, size_t i, uint8_t f)
{
    size_t j = i;
    while (has(s, j, f))
        j++;
    return j - i;
}

/* 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive: length or 0. */
static size_t contraction(const seg_t *s, size_t pos, bool icase)
{
    if (pos + 1 >= s->end || s->cp[pos] != '\'')
        return 0;
    uint32_t a = s->cp[pos + 1];
    if (icase)
        a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if (pos + 2 >= s->end)
        return 0;
    uint32_t b = s->cp[pos + 2];
    if (icase)
        b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+. Always matches at least one code point. */
static size_t m_gpt2(seg_t *s, size_t pos)
{
    size_t n = contraction(s, pos, false);
    if (n)
        return n;
    size_t q = pos + (s->cp[pos] == ' ' ? 1 : 0); /* after the optional space */
    if (has(s, q, F_L))
        return q - pos + run(s, q, F_L);
    if (has(s, q, F_N))
        return q - pos + run(s, q, F_N);
    if (other(s, q)) {
        size_t j = q;
        while (other(s, j))
            j++;
        return j - pos;
    }
    size_t ws = run(s, pos, F_WS);
    if (ws > 1 && pos + ws < s->end)
        return ws - 1; /* \s+(?!\S): leave the last one to the next word */
    return ws ? ws : 1;
}

/* The common tail of the Llama 3 family:
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (with slash, the trailing class is [\r\n/]*). */
static size_t symbols_or_space(const seg_t *s, size_t pos, bool slash)
{
    size_t q = pos + (s->cp[pos] == ' ' ? 1 : 0);
    if (other(s, q)) {
        size_t j = q;
        while (other(s, j))
            j++;
        while (j < s->end && (is_crlf(s->cp[j]) || (slash && s->cp[j] == '/')))
            j++;
        return j - pos;
    }
    size_t ws = 0, last_nl = 0;
    while (has(s, pos + ws, F_WS)) {
        if (is_crlf(s->cp[pos + ws]))
            last_nl = ws + 1;
        ws++;
    }
    if (last_nl)
        return last_nl; /* \s*[\r\n]+ ends at the last line break */
    if (ws > 1 && pos + ws < s->end)
        return ws - 1;
    return ws ? ws : 1;
}

/* Llama 3 (max_digits 3) and Qwen 2 (1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}|
 * ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t llama3_like(const seg_t *s, size_t pos, size_t max_digits)
{
    size_t n = contraction(s, pos, true);
    if (n)
        return n;
    uint32_t c = s->cp[pos];
    if (!is_crlf(c) && !has(s, pos, F_N)) {
        if (has(s, pos, F_L) || has(s, pos + 1, F_L))
            return 1 + run(s, pos + 1, F_L);
    }
    if (has(s, pos, F_N)) {
        size_t j = pos;
        while (has(s, j, F_N) && j - pos < max_digits)
            j++;
        return j - pos;
    }
    return symbols_or_space(s, pos, false);
}

/* Tekken and GPT-4o split words at case changes. llama.cpp runs their
 * regexes over text where every non-ASCII letter stands for one placeholder
 * that is neither a-z nor A-Z, so "upper" here is a letter other than a-z
 * and "lower" a letter other than A-Z (a non-ASCII letter is both):
 *   [^\r\n\p{L}\p{N}]?UPPER*LOWER+C?|[^\r\n\p{L}\p{N}]?UPPER+LOWER*C?|
 *   \p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * where C is the (case-insensitive) contraction, GPT-4o only. */
static bool upper_ish(const seg_t *s, size_t i)
{
    return has(s, i, F_L) && !(s->cp[i] >= 'a' && s->cp[i] <= 'z');
}

static bool lower_ish(const seg_t *s, size_t i)
{
    return has(s, i, F_L) && !(s->cp[i] >= 'A' && s->cp[i] <= 'Z');
}

static size_t cased_words(const seg_t *s, size_t pos, size_t max_digits,
                          bool contractions)
{
    uint32_t c = s->cp[pos];
    /* The optional leading character; without it the word would have to
     * start at pos, which is then not a letter, so only one start exists. */
    size_t q = (!is_crlf(c) && !has(s, pos, F_L | F_N)) ? pos + 1 : pos;
    size_t u = q, end = 0;
    while (upper_ish(s, u))
        u++;
    if (lower_ish(s, u)) {
        end = u; /* UPPER* then LOWER+ */
        while (lower_ish(s, end))
            end++;
    } else {
        /* UPPER* gives back until a LOWER can follow: the last lower-ish
         * letter of the run ends the word. */
        for (size_t k = u; k > q && !end; k--)
            if (lower_ish(s, k - 1))
                end = k;
        if (!end && u > q)
            end = u; /* UPPER+ LOWER* (LOWER* is empty here) */
    }
    if (end) {
        if (contractions)
            end += contraction(s, end, true);
        return end - pos;
    }
    if (has(s, pos, F_N)) {
        size_t j = pos;
        while (has(s, j, F_N) && j - pos < max_digits)
            j++;
        return j - pos;
    }
    return symbols_or_space(s, pos, true);
}

static size_t m_tekken(seg_t *s, size_t pos) { return cased_words(s, pos, 1, false); }
static size_t m_gpt4o(seg_t *s, size_t pos) { return cased_words(s, pos, 3, true); }

static size_t m_llama3(seg_t *s, size_t pos) { return llama3_like(s, pos, 3); }
static size_t m_qwen2(seg_t *s, size_t pos) { return llama3_like(s, pos, 1); }

/* [\p{P}\$\+<=>\^~\|]+ (default) and the same with ` (falcon). */
static bool punct_sym(const seg_t *s, size_t i, bool backtick)
{
    if (i >= s->end)
        return false;
    uint32_t c = s->cp[i];
    if (s->fl[i] & F_P)
        return true;
    return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|' || (backtick && c == '`');
}

static size_t punct_sym_run(const seg_t *s, size_t pos, bool backtick)
{
    size_t j = pos;
    while (punct_sym(s, j, backtick))
        j++;
    return j - pos;
}

static size_t m_punct_default(seg_t *s, size_t pos)
{
    return punct_sym_run(s, pos, false);
}
static size_t m_punct_falcon(seg_t *s, size_t pos) { return punct_sym_run(s, pos, true); }

/* \p{N}+ and \p{N} */
static size_t m_num_run(seg_t *s, size_t pos) { return run(s, pos, F_N); }
static size_t m_num1(seg_t *s, size_t pos) { return has(s, pos, F_N) ? 1 : 0; }

/* [0-9][0-9][0-9] */
static size_t m_digits3(seg_t *s, size_t pos)
{
    if (pos + 3 > s->end)
        return 0;
    for (size_t i = pos; i < pos + 3; i++)
        if (s->cp[i] < '0' || s->cp[i] > '9')
            return 0;
    return 3;
}

/* [\r\n] */
static size_t m_crlf(seg_t *s, size_t pos) { return is_crlf(s->cp[pos]) ? 1 : 0; }

/* \s?X+ where X is a flag class: the optional white space is tried first,
 * then without it (X never contains white space here). */
static size_t opt_space_run(const seg_t *s, size_t pos, uint8_t f)
{
    if (has(s, pos, F_WS)) {
        size_t r = run(s, pos + 1, f);
        return r ? r + 1 : 0;
    }
    return run(s, pos, f);
}

static size_t m_ds_letters(seg_t *s, size_t pos) { return opt_space_run(s, pos, F_L); }
static size_t m_ds_punct(seg_t *s, size_t pos) { return opt_space_run(s, pos, F_P); }

/* Literal classes from regexes with non-ASCII characters (std::wregex
 * path): [lo, hi] ranges over code points, non-ASCII white space read as
 * U+000B. */
typedef struct range {
    uint32_t lo, hi;
} range_t;

static bool in_ranges(const range_t *r, size_t n, uint32_t c)
{
    for (size_t i = 0; i < n; i++)
        if (c >= r[i].lo && c <= r[i].hi)
            return true;
    return false;
}

static inline uint32_t wcp(const seg_t *s, size_t i)
{
    uint32_t c = s->cp[i];
    return c > 0x7F && (s->fl[i] & F_WS) ? 0x0B : c;
}

/* deepseek-llm's letter class: the cased letters (from its tokenizer.json;
 * ranges copied from the regex, which lists them as literal characters). */
static const range_t DSL_LETTERS[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6},
    {0xF8, 0x1BA}, {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF},
    {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1},
    {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D},
    {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B},
    {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A},
    {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};

/* deepseek-llm's punctuation class [!-/:-~！-／：-～‘-‟　-。] (note :-~ spans
 * the ASCII letters too). */
static const range_t DSL_PUNCT[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
    {0x2018, 0x201F}, {0x3000, 0x3002},
};

/* [一-龥ࠀ-一가-퟿] (deepseek): CJK and most of the BMP above U+0800. */
static const range_t DS_CJK[] = {
    {0x4E00, 0x9FA5}, {0x800, 0x4E00}, {0xAC00, 0xD7FF},
};

static size_t class_run(const seg_t *s, size_t i, const range_t *r, size_t nr)
{
    size_t j = i;
    while (j < s->end && in_ranges(r, nr, wcp(s, j)))
        j++;
    return j - i;
}

/* \s?[class]+ on the wregex path. */
static size_t opt_space_class(const seg_t *s, size_t pos, const range_t *r,
                              size_t nr)
{
    if (has(s, pos, F_WS)) {
        size_t n = class_run(s, pos + 1, r, nr);
        if (n)
            return n + 1;
    }
    return class_run(s, pos, r, nr);
}

static size_t m_dsl_letters(seg_t *s, size_t pos)
{
    return opt_space_class(s, pos, DSL_LETTERS, CR_ARRAY_LEN(DSL_LETTERS));
}

static size_t m_dsl_punct(seg_t *s, size_t pos)
{
    return opt_space_class(s, pos, DSL_PUNCT, CR_ARRAY_LEN(DSL_PUNCT));
}

static size_t m_cjk(seg_t *s, size_t pos)
{
    return class_run(s, pos, DS_CJK, CR_ARRAY_LEN(DS_CJK));
}

/* \s+$: white space that runs to the end of the piece. */
static size_t m_ws_end(seg_t *s, size_t pos)
{
    if (s->trail == SIZE_MAX) {
        size_t t = s->end;
        while (t > s->start && (s->fl[t - 1] & F_WS))
            t--;
        s->trail = t;
    }
    return pos >= s->trail ? s->end - pos : 0;
}

/* Poro/BLOOM: " ?[^(\s|.,!?…。，、।۔،)]+" */
static bool poro_char(const seg_t *s, size_t i)
{
    if (i >= s->end || (s->fl[i] & F_WS))
        return false;
    switch (wcp(s, i)) {
    case '(': case '|': case '.': case ',': case '!': case '?': case ')':
    case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964:
    case 0x06D4: case 0x060C:
        return false;
    default:
        return true;
    }
}

static size_t m_poro(seg_t *s, size_t pos)
{
    size_t q = pos + (s->cp[pos] == ' ' ? 1 : 0);
    size_t j = q;
    while (poro_char(s, j))
        j++;
    return j > q ? j - pos : 0;
}

typedef struct pretok_def {
    rn_pre_t pre;
    match_fn stages[6];
} pretok_def_t;

static const pretok_def_t DEFS[] = {
    {RN_PRE_DEFAULT, {m_punct_default, m_gpt2, m_num_run, m_digits3}},
    {RN_PRE_LLAMA3, {m_llama3}},
    {RN_PRE_QWEN2, {m_qwen2}},
    {RN_PRE_GPT2, {m_gpt2}},
    {RN_PRE_STARCODER, {m_num1, m_gpt2}},
    {RN_PRE_FALCON, {m_punct_falcon, m_gpt2, m_digits3}},
    {RN_PRE_DEEPSEEK_LLM,
     {m_crlf, m_dsl_letters, m_dsl_punct, m_ws_end, m_cjk, m_num_run}},
    {RN_PRE_DEEPSEEK_CODER, {m_crlf, m_ds_letters, m_ds_punct, m_cjk, m_num1}},
    {RN_PRE_TEKKEN, {m_tekken}},
    {RN_PRE_GPT4O, {m_gpt4o}},
    {RN_PRE_PORO, {m_poro}},
    {RN_PRE_VIKING, {m_poro, m_num1}},
};

/* tokenizer.ggml.pre names, as llama.cpp maps them. */
typedef struct pre_name {
    const char *name;
    rn_pre_t pre;
    bool ignore_merges; /* a word that is a token is taken whole */
    bool add_bos;       /* add_bos_token default */
    bool no_bos;        /* the vocabulary has no BOS by default */
} pre_name_t;

static const pre_name_t NAMES[] = {
    {"default", RN_PRE_DEFAULT, false, false, false},
    {"llama3", RN_PRE_LLAMA3, true, true, false},
    {"llama-v3", RN_PRE_LLAMA3, true, true, false},
    {"llama-bpe", RN_PRE_LLAMA3, true, true, false},
    {"falcon3", RN_PRE_LLAMA3, true, true, false},
    {"falcon-h1", RN_PRE_LLAMA3, true, true, false},
    {"pixtral", RN_PRE_LLAMA3, true, true, false},
    {"midm-2.0", RN_PRE_LLAMA3, true, true, false},
    {"lfm2", RN_PRE_LLAMA3, true, true, false},
    {"dbrx", RN_PRE_LLAMA3, false, false, false},
    {"smaug-bpe", RN_PRE_LLAMA3, false, false, false},
    {"chatglm-bpe", RN_PRE_LLAMA3, false, false, true},
    {"glm4", RN_PRE_LLAMA3, false, false, true},
    {"qwen2", RN_PRE_QWEN2, false, false, false},
    {"deepseek-r1-qwen", RN_PRE_QWEN2, false, false, false},
    {"megrez", RN_PRE_QWEN2, false, false, false},
    {"stablelm2", RN_PRE_QWEN2, false, false, false},
    {"hunyuan", RN_PRE_QWEN2, false, false, false},
    {"kormo", RN_PRE_QWEN2, false, false, false},
    {"solar-open", RN_PRE_QWEN2, false, false, false},
    {"gpt-2", RN_PRE_GPT2, false, false, false},
    {"gpt2", RN_PRE_GPT2, false, false, false},
    {"phi-2", RN_PRE_GPT2, false, false, false},
    {"jina-es", RN_PRE_GPT2, false, false, false},
    {"jina-de", RN_PRE_GPT2, false, false, false},
    {"jina-v2-es", RN_PRE_GPT2, false, false, false},
    {"jina-v2-de", RN_PRE_GPT2, false, false, false},
    {"gigachat", RN_PRE_GPT2, false, false, false},
    {"a.x-4.0", RN_PRE_GPT2, false, false, false},
    {"mellum", RN_PRE_GPT2, false, false, false},
    {"exaone4", RN_PRE_GPT2, false, false, false},
    {"mpt", RN_PRE_GPT2, false, false, false},
    {"olmo", RN_PRE_GPT2, false, false, false},
    {"jais", RN_PRE_GPT2, false, false, false},
    {"trillion", RN_PRE_GPT2, false, false, false},
    {"granite-docling", RN_PRE_GPT2, false, false, false},
    {"starcoder", RN_PRE_STARCODER, false, false, false},
    {"refact", RN_PRE_STARCODER, false, false, false},
    {"command-r", RN_PRE_STARCODER, false, false, false},
    {"smollm", RN_PRE_STARCODER, false, false, false},
    {"codeshell", RN_PRE_STARCODER, false, false, false},
    {"exaone", RN_PRE_STARCODER, false, false, false},
    {"minerva-7b", RN_PRE_STARCODER, false, false, false},
    {"falcon", RN_PRE_FALCON, false, false, false},
    {"deepseek-llm", RN_PRE_DEEPSEEK_LLM, false, false, false},
    {"deepseek-coder", RN_PRE_DEEPSEEK_CODER, false, false, false},
    {"tekken", RN_PRE_TEKKEN, true, true, false},
    {"gpt-4o", RN_PRE_GPT4O, false, false, false},
    {"llama4", RN_PRE_GPT4O, false, false, false},
    {"kanana2", RN_PRE_GPT4O, false, false, false},
    {"minimax-m2", RN_PRE_GPT4O, false, false, false},
    {"poro-chat", RN_PRE_PORO, false, false, false},
    {"bloom", RN_PRE_PORO, false, false, false},
    {"gpt3-finnish", RN_PRE_PORO, false, false, false},
    {"viking", RN_PRE_VIKING, false, false, false},
};

bool rn_pretok_from_name(const char *name, rn_pre_t *pre, bool *ignore_merges,
                         bool *add_bos_default, bool *no_bos)
{
    if (!name || !*name)
        name = "default";
    for (size_t i = 0; i < CR_ARRAY_LEN(NAMES); i++) {
        if (!strcmp(NAMES[i].name, name)) {
            *pre = NAMES[i].pre;
            *ignore_merges = NAMES[i].ignore_merges;
            *add_bos_default = NAMES[i].add_bos;
            *no_bos = NAMES[i].no_bos;
            return true;
        }
    }
    return false;
}

/* Splits every piece of in (ends, n_in of them) with one stage into out. */
static size_t split_stage(match_fn fn, const uint32_t *cp, const uint8_t *fl,
                          const uint32_t *in, size_t n_in, uint32_t *out)
{
    size_t n_out = 0, start = 0;
    for (size_t k = 0; k < n_in; k++) {
        seg_t s = {cp, fl, start, in[k], SIZE_MAX};
        size_t pos = start, gap = start;
        while (pos < s.end) {
            size_t m = fn(&s, pos);
            if (!m) {
                pos++;
                continue;
            }
            if (gap < pos)
                out[n_out++] = (uint32_t)pos; /* the unmatched run before */
            pos += m;
            out[n_out++] = (uint32_t)pos;
            gap = pos;
        }
        if (gap < s.end)
            out[n_out++] = (uint32_t)s.end;
        start = s.end;
    }
    return n_out;
}

cr_status_t rn_pretok_split(rn_pre_t pre, const uint32_t *cps, size_t n,
                            uint32_t **ends_out, size_t *n_ends)
{
    *ends_out = NULL;
    *n_ends = 0;
    if (n == 0)
        return CR_OK;
    const pretok_def_t *def = &DEFS[0];
    for (size_t i = 0; i < CR_ARRAY_LEN(DEFS); i++)
        if (DEFS[i].pre == pre)
            def = &DEFS[i];

    uint8_t *fl = malloc(n);
    uint32_t *a = malloc(n * sizeof *a);
    uint32_t *b = malloc(n * sizeof *b);
    if (!fl || !a || !b) {
        free(fl), free(a), free(b);
        return CR_E_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t c = cps[i];
        uint8_t f = 0;
        if (rn_unicode_is_space(c))
            f = F_WS;
        else if (c < 128)
            f = rn_unicode_is_letter(c) ? F_L
              : rn_unicode_is_number(c) ? F_N
              : rn_unicode_is_punct(c) ? F_P : 0;
        else {
            rn_ucat_t cat = rn_unicode_cat(c);
            f = cat == RN_UCAT_LETTER ? F_L
              : cat == RN_UCAT_NUMBER ? F_N
              : cat == RN_UCAT_PUNCT ? F_P : 0;
        }
        fl[i] = f;
    }

    a[0] = (uint32_t)n;
    size_t na = 1;
    for (size_t st = 0; st < CR_ARRAY_LEN(def->stages) && def->stages[st]; st++) {
        size_t nb = split_stage(def->stages[st], cps, fl, a, na, b);
        uint32_t *t = a;
        a = b, b = t;
        na = nb;
    }
    free(fl);
    free(b);
    *ends_out = a;
    *n_ends = na;
    return CR_OK;
}
