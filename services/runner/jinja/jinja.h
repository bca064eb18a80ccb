/* jinja.h: a sandboxed Jinja2 renderer for the chat templates model authors
 * ship in a GGUF's `tokenizer.chat_template`.
 *
 * This module owns the template language: parsing a template (untrusted:
 * it comes from a downloaded file) and rendering it over a JSON context
 * into a bounded buffer, as Python's Jinja2 3.1 does with Hugging Face's
 * settings (trim_blocks, lstrip_blocks, loop controls, an immutable
 * sandbox, `tojson` as json.dumps, `raise_exception`, `strftime_now`).
 * It knows nothing about chat requests: prompt/ maps a request onto the
 * context (messages, tools, add_generation_prompt, bos/eos tokens).
 *
 * Supported: text, {{ }}, {% %} and {# #} with `-`/`+` whitespace control;
 * if/elif/else, for (tuple targets, `if` filter, else, loop.* and
 * loop.cycle), set (names, tuples, namespace attributes, blocks with
 * filters), macro/call (defaults, keyword arguments, caller), filter
 * blocks, generation blocks, raw, break/continue; Python literals and
 * operators with Python's semantics (`%` formatting included); the filters,
 * tests, str/dict methods and globals real chat templates use (the lists
 * are in jinja_filters.c, jinja_tests.c, jinja_methods.c). Not supported
 * (a TemplateSyntaxError naming it): include/import/extends/block, recursive
 * loops, *args or **kwargs in calls.
 *
 * Errors read like Jinja2's, class first: "UndefinedError: 'x' is
 * undefined", "TemplateError: <raise_exception's message>",
 * "TemplateSyntaxError: ... (line N)".
 *
 * Limits (untrusted input): parse nesting, a step budget, an output budget,
 * a memory budget for everything a render allocates and a depth budget
 * (nested statements, expressions and macro calls); each exceeded is an
 * error, never a crash or hang. Rendering does no I/O. */
#ifndef JJ_JINJA_H
#define JJ_JINJA_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#include <jansson.h>
#include <time.h>

/* A parsed template: immutable, may be rendered many times (not from two
 * threads at once without care: rendering only reads it, so that is safe). */
typedef struct jj_template jj_template_t;

typedef struct jj_limits {
    uint64_t max_steps;      /* statements + expressions evaluated */
    size_t max_output_bytes; /* the rendered text, and any captured block */
    size_t max_memory_bytes; /* everything one render allocates */
    int max_depth;           /* nested statements/expressions/macro calls */
} jj_limits_t;

/* Limits that fit any real chat template with room to spare. */
void jj_limits_default(jj_limits_t *limits);

/* Parses src (len bytes). Returns the template (caller owns; free with
 * jj_template_destroy) or NULL with err set (CR_E_INVALID and a
 * "TemplateSyntaxError: ..." message naming the construct and line). */
jj_template_t *jj_template_new(const char *src, size_t len, cr_err_t *err);

void jj_template_destroy(jj_template_t **self_p);

typedef struct jj_render_opts {
    jj_limits_t limits;
    time_t now; /* what strftime_now formats (UTC); 0: the current time */
    /* Untrusted data (request text): the strings (and keys) under these
     * subtrees of the context (borrowed pointers into it) are tainted,
     * and the taint follows their bytes through every string operation
     * into the output. */
    const json_t *const *untrusted;
    size_t n_untrusted;
    /* If not NULL, receives one byte per output byte appended to `out`:
     * 1 where the byte came from untrusted data, 0 where the template
     * made it. */
    cr_buf_t *taint;
} jj_render_opts_t;

/* Renders self over context (a JSON object, borrowed: its keys are the
 * template's variables) and appends the text to out. opts may be NULL
 * (default limits, the current time). Returns CR_OK, or CR_E_INVALID with
 * err's message the template's error (nothing of the render is appended
 * then), or CR_E_TOO_LARGE when a budget is exceeded. */
cr_status_t jj_render(const jj_template_t *self, const json_t *context,
                      const jj_render_opts_t *opts, cr_buf_t *out, cr_err_t *err);

#endif
