/* wrap.c: word wrap of streamed answers (see wrap.h). */
#include "lib/prelude.h"
#include "cli/wrap.h"

#include <sys/ioctl.h>

int cli_wrap_term_width(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

void cli_wrap_init(cli_wrap_t *w, bool on, int width)
{
    memset(w, 0, sizeof *w);
    w->on = on && width >= 10;
    w->width = width;
}

/* Columns of code point cp on a terminal: wide (2) for the East Asian
 * wide and fullwidth blocks and the emoji planes, else 1. */
static int cp_cols(uint32_t cp)
{
    static const uint32_t wide[][2] = {
        {0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},
        {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
        {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE30, 0xFE4F},
        {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x1F300, 0x1F64F},
        {0x1F900, 0x1F9FF}, {0x20000, 0x3FFFD},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(wide); i++)
        if (cp >= wide[i][0] && cp <= wide[i][1])
            return 2;
    return 1;
}

/* Length of the UTF-8 sequence that starts with byte b (1 for a stray
 * continuation or invalid byte: written as it is). */
static size_t seq_len(unsigned char b)
{
    if (b >= 0xF0 && b < 0xF8)
        return 4;
    if (b >= 0xE0)
        return b < 0xF0 ? 3 : 1;
    if (b >= 0xC0)
        return 2;
    return 1;
}

static uint32_t decode(const unsigned char *s, size_t n)
{
    if (n == 1)
        return s[0];
    uint32_t cp = s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    return cp;
}

int cli_text_cols(const char *s)
{
    int cols = 0;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t len = seq_len((unsigned char)s[i]);
        if (i + len > n)
            len = n - i;
        cols += cp_cols(decode((const unsigned char *)s + i, len));
        i += len;
    }
    return cols;
}

static void word_add(cli_wrap_t *w, const char *ch, size_t n, int cols)
{
    if (w->word_len + n > sizeof w->word)
        return; /* too long to take back anyway: > width - 10 */
    memcpy(w->word + w->word_len, ch, n);
    w->word_len += n;
    w->word_cols += cols;
}

/* One character (n bytes of UTF-8). */
static void put_char(cli_wrap_t *w, const char *ch, size_t n, FILE *out)
{
    uint32_t cp = decode((const unsigned char *)ch, n);
    int cols = cp_cols(cp);
    if (cp == '\n' || cp == '\r') {
        fwrite(ch, 1, n, out);
        w->line_cols = 0;
        w->word_len = 0;
        w->word_cols = 0;
        return;
    }
    if (w->line_cols + 1 > w->width - 5) {
        if (w->word_cols > w->width - 10) {
            /* A word wider than the line: the terminal breaks it. */
            fwrite(ch, 1, n, out);
            w->word_len = 0;
            w->word_cols = 0;
            w->line_cols = 0;
            return;
        }
        /* Take the word back and write it again on a new line. */
        if (w->word_cols > 0)
            fprintf(out, "\x1b[%dD", w->word_cols);
        fputs("\x1b[K\n", out);
        fwrite(w->word, 1, w->word_len, out);
        w->line_cols = w->word_cols;
        if (cp == ' ' || cp == '\t') {
            w->word_len = 0;
            w->word_cols = 0;
            if (w->line_cols == 0)
                return; /* no blank at the start of the new line */
        }
        fwrite(ch, 1, n, out);
        w->line_cols += cols;
        if (cp != ' ' && cp != '\t' && cols < 2)
            word_add(w, ch, n, cols);
        return;
    }
    fwrite(ch, 1, n, out);
    w->line_cols += cols;
    if (cols >= 2 || cp == ' ' || cp == '\t') {
        w->word_len = 0;
        w->word_cols = 0;
    } else {
        word_add(w, ch, n, cols);
    }
}

void cli_wrap_write(cli_wrap_t *w, const char *text, size_t n, FILE *out)
{
    if (!w->on) {
        fwrite(text, 1, n, out);
        return;
    }
    size_t i = 0;
    while (i < n) {
        if (w->n_pending) {
            /* Complete a character split across pieces. */
            size_t want = seq_len((unsigned char)w->pending[0]);
            while (w->n_pending < want && i < n)
                w->pending[w->n_pending++] = text[i++];
            if (w->n_pending < want)
                return;
            put_char(w, w->pending, want, out);
            w->n_pending = 0;
            continue;
        }
        size_t len = seq_len((unsigned char)text[i]);
        if (i + len > n) {
            memcpy(w->pending, text + i, n - i);
            w->n_pending = n - i;
            return;
        }
        put_char(w, text + i, len, out);
        i += len;
    }
}
