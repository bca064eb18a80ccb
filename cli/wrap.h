/* wrap.h: word wrap of streamed answers at the terminal's width, as
 * Ollama's CLI does (its displayResponse).
 *
 * Text arrives in pieces; each character is written at once. When a line
 * reaches width - 5 columns, the word being written is taken back (cursor
 * left over it, erase to the end of the line) and written again on a new
 * line, so words are never cut; a word longer than width - 10 columns is
 * left to the terminal. Columns: 2 for East Asian wide characters and
 * most emoji, else 1. Off, the text is written as it comes. */
#ifndef CLI_WRAP_H
#define CLI_WRAP_H

#include "lib/prelude.h"

#define CLI_WRAP_WORD_MAX 1024 /* bytes of a word kept for taking back */

typedef struct cli_wrap {
    bool on;
    int width;          /* columns */
    int line_cols;      /* columns written on the current line */
    char word[CLI_WRAP_WORD_MAX];
    size_t word_len;    /* bytes of the current word */
    int word_cols;
    char pending[4];    /* a UTF-8 character split across pieces */
    size_t n_pending;
} cli_wrap_t;

/* on: wrap (a terminal of `width` columns; below 10 never wraps). */
void cli_wrap_init(cli_wrap_t *w, bool on, int width);

/* Writes text (n bytes) to out, wrapping as above. */
void cli_wrap_write(cli_wrap_t *w, const char *text, size_t n, FILE *out);

/* Columns a UTF-8 text takes on a terminal (as above: wide characters 2). */
int cli_text_cols(const char *s);

/* The columns of a terminal on fd, or 80 when it says none. */
int cli_wrap_term_width(int fd);

#endif
