/* thinking.h: splits a model's reasoning from its answer, as text streams.
 *
 * Thinking models wrap their reasoning in tags the template names (e.g.
 * `<think>` ... `</think>`; rn_tmpl_thinking_tags infers them). The parser
 * is fed generated text one piece at a time and sorts it into thinking text
 * and content text, the way Ollama's thinking parser does:
 *   - the reasoning counts only if the output begins (after whitespace) with
 *     the open tag; any other first text makes everything content, leading
 *     whitespace included;
 *   - whitespace right after the open tag and right after the close tag is
 *     eaten;
 *   - a trailing partial open or close tag is held back until the next piece
 *     decides it; text inside the thinking is passed on as it comes.
 * If the rendered prompt already ends with the open tag (the template opened
 * the reasoning for the model), construct it with in_thinking = true.
 *
 * It owns only its tags and a small fixed hold buffer (allocated once at
 * construction); it knows nothing of tokens, templates, tool calls or the
 * bus. */
#ifndef RN_THINKING_H
#define RN_THINKING_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#define RN_THINKING_TAG_MAX 128   /* bytes per tag */
#define RN_THINKING_WS_MAX 4096   /* leading whitespace held before deciding */

typedef struct rn_thinking rn_thinking_t;

/* open, close: the tags (NUL-terminated, non-empty, at most
 * RN_THINKING_TAG_MAX bytes; surrounding whitespace is trimmed here).
 * in_thinking: start inside the reasoning (the prompt ended with the open
 * tag; see rn_thinking_prompt_opens). NULL with CR_E_INVALID for a missing,
 * empty or too long tag, CR_E_NOMEM. Caller owns; free with
 * rn_thinking_destroy. */
rn_thinking_t *rn_thinking_new(const char *open, const char *close,
                               bool in_thinking, cr_err_t *err);

/* Frees; accepts NULL and *self_p == NULL; sets *self_p = NULL. */
void rn_thinking_destroy(rn_thinking_t **self_p);

/* True when prompt, with trailing whitespace ignored, ends with open (trimmed,
 * non-empty). Either may be NULL (false). */
bool rn_thinking_prompt_opens(const char *prompt, const char *open);

/* Feeds len bytes of generated text. Appends reasoning to thinking and
 * answer text to content (neither is reset first). A buffer error
 * (CR_E_TOO_LARGE / CR_E_NOMEM from thinking or content) is returned as is;
 * the parser's state is then unspecified (destroy it). */
cr_status_t rn_thinking_push(rn_thinking_t *t, const char *text, size_t len,
                             cr_buf_t *thinking, cr_buf_t *content);

/* End of generation: appends what is held back (a partial close tag goes to
 * thinking; held whitespace or a partial open tag to content). Later pushes
 * go to content. Errors as rn_thinking_push. */
cr_status_t rn_thinking_flush(rn_thinking_t *t, cr_buf_t *thinking,
                              cr_buf_t *content);

/* True while the parser is inside the reasoning (after the open tag, before
 * the close tag): e.g. to defer a format grammar until the answer starts. */
bool rn_thinking_in_thinking(const rn_thinking_t *t);

/* True once the reasoning is over or was skipped: all further text is
 * content. */
bool rn_thinking_is_done(const rn_thinking_t *t);

/* Bytes held back right now (for tests). */
size_t rn_thinking_held(const rn_thinking_t *t);

#endif
