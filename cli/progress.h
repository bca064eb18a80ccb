/* progress.h: pull, push and create progress as Ollama's CLI draws it.
 *
 * One line per layer (a bar: "pulling 6a0746a1ec1a: 45% ▕███  ▏ 2.1 GB/4.7 GB
 * 95 MB/s 27s") and one per phase without sizes (a spinner: "writing
 * manifest ⠋"), all on one stream (the CLI gives stderr). On a terminal
 * the lines are redrawn in place, every 100 ms by a thread of its own (so
 * a spinner turns while the server is quiet) and at every event; each
 * layer keeps its one line. Without a terminal: plain lines and no control
 * characters: a phase when it begins, a layer once, when it completes (or,
 * one that never did, when the display stops). Owns no network: the verbs
 * feed it the server's progress objects. */
#ifndef CLI_PROGRESS_H
#define CLI_PROGRESS_H

#include "lib/prelude.h"

#include <jansson.h>

typedef struct cli_progress cli_progress_t;

/* Most layer and phase lines one display holds; later ones are dropped. */
#define CLI_PROGRESS_MAX_LINES 256

/* verb names a bar whose event carries no status ("pulling", "pushing").
 * width: the terminal's columns (0: ask f's terminal, else 80). Caller
 * owns the display; end it with cli_progress_destroy. NULL only when out
 * of memory. */
cli_progress_t *cli_progress_new(FILE *f, bool tty, int width, const char *verb);

/* One progress object {status, digest?, total?, completed?}: with a digest
 * and a total, that layer's bar (created on its first event with bytes
 * done; a pull's "0 done" announcement draws nothing, as in Ollama);
 * otherwise a phase: the running spinner stops and a new one starts when
 * the status differs. */
void cli_progress_event(cli_progress_t *p, const json_t *obj);

/* A phase (spinner) by its text, as cli_progress_event with a status only. */
void cli_progress_phase(cli_progress_t *p, const char *status);

/* Replaces the running spinner's text ("copying file sha256:... 45%"); on
 * a terminal only (plain output shows the phase once, when it began). */
void cli_progress_message(cli_progress_t *p, const char *status);

/* Stops the thread and spinners, draws the last state and ends the line.
 * Accepts NULL. */
void cli_progress_destroy(cli_progress_t **self_p);

/* One bar line into out (cap bytes), as Ollama's progress.Bar draws it:
 * "<msg> <pct>% ▕<bar>▏ <done>/<total>  <rate>/s  <left>" while running,
 * "<msg> 100% ▕<bar>▏ <total>" padded once stopped; the bar fills what
 * width leaves. rate in bytes/s (0: unknown, not shown). For tests. */
void cli_progress_bar_line(char *out, size_t cap, const char *msg, int64_t done,
                           int64_t total, double rate, bool stopped, int width);

/* Go's Duration.Round(time.Second).String() for seconds below 1 h, "1h5m"
 * below 100 h, "99h+" beyond (Ollama's formatDuration). */
void cli_progress_duration(int64_t seconds, char *out, size_t cap);

#endif
