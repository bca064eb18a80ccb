/* progress.c: pull/push/create progress lines (see progress.h).
 *
 * The state is a list of lines, each a bar (a layer, keyed by digest) or a
 * spinner (a phase, keyed by its text). On a terminal a thread redraws the
 * whole list in place every 100 ms, as Ollama's progress package does:
 * cursor up to the first line, each line followed by "erase to the end of
 * line"; the display never scrolls back past the terminal's height. */
#include "lib/prelude.h"
#include "cli/progress.h"

#include "cli/format.h"
#include "lib/duration.h"

#include <math.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS 100
#define MAX_BUCKETS 10   /* rate window: up to 10 samples, 1 s apart */
#define MSG_MAX 160
#define LINE_MAX_BYTES 2048
#define DEFAULT_WIDTH 80
#define DEFAULT_HEIGHT 24

static const char *const FRAMES[] = {"⠋", "⠙", "⠹", "⠸", "⠼",
                                     "⠴", "⠦", "⠧", "⠇", "⠏"};

typedef struct bucket {
    int64_t at_ms;
    int64_t value;
} bucket_t;

typedef struct line {
    bool is_bar;
    char key[MSG_MAX];   /* digest (bar) or status (spinner) */
    char msg[MSG_MAX];
    bool stopped;
    bool printed;        /* plain output: its line was written */
    /* bars */
    int64_t total, done, initial;
    int64_t started_ms, stopped_ms;
    bucket_t buckets[MAX_BUCKETS];
    int n_buckets;
} line_t;

struct cli_progress {
    FILE *f;
    bool tty;
    int width_fixed;     /* 0: ask the terminal */
    char verb[32];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool has_thread;
    bool stop;
    line_t *lines;
    int n_lines;
    int spinner;         /* index of the running spinner, -1 none */
    int frame;
    int pos;             /* lines drawn last time */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Go's Duration.Round(time.Second) of a span in ms, in seconds. */
static double round_s(int64_t ms)
{
    return (double)((ms + (ms >= 0 ? 500 : -500)) / 1000);
}

static void pad(char **w, char *end, int n)
{
    while (n-- > 0 && *w + 1 < end)
        *(*w)++ = ' ';
    **w = '\0';
}

static void put(char **w, char *end, const char *s)
{
    size_t n = strlen(s);
    if (n > (size_t)(end - *w - 1))
        n = (size_t)(end - *w - 1);
    memcpy(*w, s, n);
    *w += n;
    **w = '\0';
}

/* A human size right-aligned in 6 columns. */
static void put_size6(char **w, char *end, int64_t v, const char *tail)
{
    char s[32];
    cli_fmt_bytes(v, s, sizeof s);
    pad(w, end, 6 - (int)strlen(s));
    put(w, end, s);
    put(w, end, tail);
}

void cli_progress_duration(int64_t seconds, char *out, size_t cap)
{
    if (seconds < 0)
        seconds = 0;
    if (seconds >= 100 * 3600)
        snprintf(out, cap, "99h+");
    else if (seconds >= 3600)
        snprintf(out, cap, "%lldh%lldm", (long long)(seconds / 3600),
                 (long long)(seconds / 60 % 60));
    else if (seconds >= 60)
        snprintf(out, cap, "%lldm%llds", (long long)(seconds / 60), (long long)(seconds % 60));
    else
        snprintf(out, cap, "%llds", (long long)seconds);
}

void cli_progress_bar_line(char *out, size_t cap, const char *msg, int64_t done,
                           int64_t total, double rate, bool stopped, int width)
{
    char pre[MSG_MAX + 16], suf[64];
    double pct = total > 0 ? (double)done / (double)total * 100.0 : 0.0;
    if (pct > 100)
        pct = 100;
    snprintf(pre, sizeof pre, "%s%s%3.0f%%", msg, *msg ? " " : "", pct);
    char *w = suf, *end = suf + sizeof suf;
    *w = '\0';
    if (!stopped) {
        put_size6(&w, end, done, "/");
        put_size6(&w, end, total, "");
    } else {
        put_size6(&w, end, total, "");
        pad(&w, end, 7);
    }
    bool show_rate = !stopped && rate > 0;
    if (show_rate) {
        put(&w, end, "  ");
        put_size6(&w, end, (int64_t)rate, "/s");
        char left[16];
        cli_progress_duration((int64_t)((double)(total - done) / rate), left, sizeof left);
        put(&w, end, "  ");
        pad(&w, end, 6 - (int)strlen(left));
        put(&w, end, left);
    } else {
        pad(&w, end, 10 + 8);
    }
    /* 5 more columns: the two bar ends and a space at each side. */
    int f = width - (int)strlen(pre) - (int)strlen(suf) - 5;
    int n = f > 0 ? (int)(f * pct / 100) : 0;
    char *o = out, *oend = out + cap;
    *o = '\0';
    put(&o, oend, pre);
    put(&o, oend, " ▕");
    for (int i = 0; i < n; i++)
        put(&o, oend, "█");
    pad(&o, oend, f - n);
    put(&o, oend, "▏ ");
    put(&o, oend, suf);
}

/* Bytes per second over the bar's samples (Ollama's Bar.rate). */
static double bar_rate(const line_t *l)
{
    double num = 0, den = 0;
    if (l->stopped) {
        num = (double)(l->done - l->initial);
        den = round_s(l->stopped_ms - l->started_ms);
    } else if (l->n_buckets == 1) {
        num = (double)(l->buckets[0].value - l->initial);
        den = round_s(l->buckets[0].at_ms - l->started_ms);
    } else if (l->n_buckets > 1) {
        const bucket_t *a = &l->buckets[0], *b = &l->buckets[l->n_buckets - 1];
        num = (double)(b->value - a->value);
        den = round_s(b->at_ms - a->at_ms);
    }
    return den != 0 ? num / den : 0;
}

static void bar_set(line_t *l, int64_t v)
{
    if (v > l->total)
        v = l->total;
    l->done = v;
    int64_t t = now_ms();
    if (l->done >= l->total && !l->stopped) {
        l->stopped = true;
        l->stopped_ms = t;
    }
    if (l->n_buckets == 0 || t - l->buckets[l->n_buckets - 1].at_ms > 1000) {
        if (l->n_buckets == MAX_BUCKETS) {
            memmove(l->buckets, l->buckets + 1, (MAX_BUCKETS - 1) * sizeof *l->buckets);
            l->n_buckets--;
        }
        l->buckets[l->n_buckets++] = (bucket_t){t, v};
    }
}

static int term_width(const cli_progress_t *p)
{
    if (p->width_fixed > 0)
        return p->width_fixed;
    struct winsize ws;
    if (ioctl(fileno(p->f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return DEFAULT_WIDTH;
}

static int term_height(const cli_progress_t *p)
{
    struct winsize ws;
    if (ioctl(fileno(p->f), TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0)
        return ws.ws_row;
    return DEFAULT_HEIGHT;
}

static void line_text(const cli_progress_t *p, const line_t *l, int width, char *out,
                      size_t cap)
{
    if (l->is_bar) {
        cli_progress_bar_line(out, cap, l->msg, l->done, l->total, bar_rate(l), l->stopped,
                              width);
        return;
    }
    snprintf(out, cap, "%s %s%s", l->msg, l->stopped ? "" : FRAMES[p->frame],
             l->stopped ? "" : " ");
}

/* Redraws every line in place (with p->mu held). */
static void render_tty(cli_progress_t *p)
{
    int width = term_width(p), height = term_height(p);
    fputs("\x1b[?2026h\x1b[?25l", p->f);
    for (int i = 0; i < p->pos - 1; i++)
        fputs("\x1b[A", p->f);
    fputs("\x1b[1G", p->f);
    int first = p->n_lines > height ? p->n_lines - height : 0;
    char text[LINE_MAX_BYTES];
    for (int i = first; i < p->n_lines; i++) {
        line_text(p, &p->lines[i], width, text, sizeof text);
        fputs(text, p->f);
        fputs("\x1b[K", p->f);
        if (i < p->n_lines - 1)
            fputc('\n', p->f);
    }
    p->pos = p->n_lines - first;
    fputs("\x1b[?25h\x1b[?2026l", p->f);
    fflush(p->f);
}

/* Plain output: what became true since the last call (with p->mu held). */
static void render_plain(cli_progress_t *p, bool final)
{
    for (int i = 0; i < p->n_lines; i++) {
        line_t *l = &p->lines[i];
        if (l->printed)
            continue;
        char a[32], b[32];
        if (!l->is_bar) {
            fprintf(p->f, "%s\n", l->msg);
        } else if (l->stopped) {
            cli_fmt_bytes(l->total, b, sizeof b);
            fprintf(p->f, "%s 100%% %s\n", l->msg, b);
        } else if (final) {
            cli_fmt_bytes(l->done, a, sizeof a);
            cli_fmt_bytes(l->total, b, sizeof b);
            fprintf(p->f, "%s %.0f%% %s/%s\n", l->msg,
                    l->total > 0 ? floor((double)l->done * 100.0 / (double)l->total) : 0.0, a,
                    b);
        } else {
            continue;
        }
        l->printed = true;
    }
    fflush(p->f);
}

static void *ticker(void *arg)
{
    cli_progress_t *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts = cr_duration_deadline(TICK_MS);
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (p->stop)
            break;
        p->frame = (p->frame + 1) % (int)CR_ARRAY_LEN(FRAMES);
        if (p->n_lines)
            render_tty(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cli_progress_t *cli_progress_new(FILE *f, bool tty, int width, const char *verb)
{
    cli_progress_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->lines = calloc(CLI_PROGRESS_MAX_LINES, sizeof *p->lines);
    if (!p->lines) {
        free(p);
        return NULL;
    }
    p->f = f;
    p->tty = tty;
    p->width_fixed = width;
    p->spinner = -1;
    snprintf(p->verb, sizeof p->verb, "%s", verb ? verb : "pulling");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    /* Without the thread the display still works: it is drawn at the end. */
    if (tty && pthread_create(&p->thread, NULL, ticker, p) == 0)
        p->has_thread = true;
    return p;
}

static line_t *add_line(cli_progress_t *p, bool is_bar, const char *key, const char *msg)
{
    if (p->n_lines == CLI_PROGRESS_MAX_LINES)
        return NULL;
    line_t *l = &p->lines[p->n_lines++];
    memset(l, 0, sizeof *l);
    l->is_bar = is_bar;
    snprintf(l->key, sizeof l->key, "%s", key);
    snprintf(l->msg, sizeof l->msg, "%s", msg);
    return l;
}

static void stop_spinner(cli_progress_t *p)
{
    if (p->spinner >= 0)
        p->lines[p->spinner].stopped = true;
    p->spinner = -1;
}

/* A phase, with p->mu held. */
static void phase_locked(cli_progress_t *p, const char *status)
{
    if (p->spinner >= 0 && !strcmp(p->lines[p->spinner].key, status))
        return;
    stop_spinner(p);
    if (add_line(p, false, status, status))
        p->spinner = p->n_lines - 1;
}

static json_int_t jint(const json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

void cli_progress_event(cli_progress_t *p, const json_t *obj)
{
    const char *status = json_string_value(json_object_get(obj, "status"));
    const char *digest = json_string_value(json_object_get(obj, "digest"));
    int64_t total = jint(obj, "total"), done = jint(obj, "completed");
    pthread_mutex_lock(&p->mu);
    if (digest && *digest && total > 0) {
        line_t *l = NULL;
        for (int i = 0; i < p->n_lines && !l; i++)
            if (p->lines[i].is_bar && !strcmp(p->lines[i].key, digest))
                l = &p->lines[i];
        /* A pull first announces every layer with nothing done: Ollama
         * draws no 0% bar for it, so neither do we. */
        if (!l && !(done == 0 && !strcmp(p->verb, "pulling"))) {
            char msg[MSG_MAX];
            const char *hex = strncmp(digest, "sha256:", 7) ? digest : digest + 7;
            if (!strcmp(p->verb, "pulling"))
                snprintf(msg, sizeof msg, "pulling %.12s:", hex);
            else if (status && *status)
                snprintf(msg, sizeof msg, "%s", status);
            else
                snprintf(msg, sizeof msg, "%s %.12s...", p->verb, hex);
            stop_spinner(p);
            if ((l = add_line(p, true, digest, msg))) {
                l->total = total;
                l->initial = l->done = CR_MIN(done, total);
                l->started_ms = now_ms();
                if (done >= total) {
                    l->stopped = true;
                    l->stopped_ms = l->started_ms;
                }
            }
        }
        if (l)
            bar_set(l, done);
    } else if (status && *status) {
        phase_locked(p, status);
    }
    if (!p->tty)
        render_plain(p, false);
    pthread_mutex_unlock(&p->mu);
}

void cli_progress_phase(cli_progress_t *p, const char *status)
{
    pthread_mutex_lock(&p->mu);
    phase_locked(p, status);
    if (!p->tty)
        render_plain(p, false);
    pthread_mutex_unlock(&p->mu);
}

void cli_progress_message(cli_progress_t *p, const char *status)
{
    pthread_mutex_lock(&p->mu);
    if (p->tty && p->spinner >= 0)
        snprintf(p->lines[p->spinner].msg, sizeof p->lines[0].msg, "%s", status);
    pthread_mutex_unlock(&p->mu);
}

void cli_progress_destroy(cli_progress_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cli_progress_t *p = *self_p;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->has_thread)
        pthread_join(p->thread, NULL);
    stop_spinner(p);
    if (p->tty) {
        if (p->n_lines) {
            render_tty(p);
            fputc('\n', p->f);
        }
    } else {
        render_plain(p, true);
    }
    fflush(p->f);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->lines);
    free(p);
    *self_p = NULL;
}
