/* toolcalls.h: tool calls parsed out of a model's streamed output.
 *
 * Ollama's generic tool parser (API reference §12): the template's
 * `{{ if .ToolCalls }}` block names a tag (rn_tmpl_tool_tag: e.g.
 * `<tool_call>`, `[TOOL_CALLS]`, or "{" for bare JSON). Generated text is
 * fed one piece at a time:
 *   1. Until the tag appears, text passes through as content; a trailing
 *      partial match of the tag is held back. Whitespace inside the tag
 *      matches up to 32 whitespace bytes, none included (the mistral
 *      template's tag "[TOOL_CALLS] [" matches "[TOOL_CALLS][" too); the
 *      rest matches byte for byte. With tag "{" or "[", calls are
 *      only looked for when the very first non-whitespace output is the tag;
 *      otherwise everything is content.
 *   2. After the tag, text is held and calls are cut out of it, repeatedly:
 *      the first balanced JSON object (string/escape aware) is found, a known
 *      tool name is located before its end (earliest position, longest on
 *      ties), and the arguments are taken from the object's `arguments` or
 *      `parameters` member (an object, or a string holding a JSON object;
 *      null means {}), else a member named like the tool, else the same
 *      search in nested objects/arrays, else the whole object less its
 *      "name" member.
 *   3. Each call gets `function.index` (0, 1, ... over the whole answer) and
 *      an id "call_" + 8 random lowercase alphanumerics.
 *   4. A complete object that yields no call (no tool name before its end,
 *      or not valid JSON), or held text that would pass the hold cap, ends
 *      tool parsing: everything held and everything after is content.
 *   5. At the end, text still held is content if no call was found; after
 *      calls, the leftover with the tag's first word and its closing form
 *      (`<tool_call>`/`</tool_call>`, `[TOOL_CALLS]`/`[/TOOL_CALLS]`)
 *      removed, leading whitespace, ',' and ']' and trailing whitespace
 *      trimmed, is content when anything remains.
 * The output is the same however the text is split into pieces.
 *
 * Memory: the hold buffer (RN_TOOLCALLS_HOLD_BYTES) and the tool names are
 * allocated once at construction; parsing a complete call's object (jansson)
 * allocates temporarily, once per call, never per piece. It knows nothing of
 * tokens, templates or the bus. */
#ifndef RN_TOOLCALLS_H
#define RN_TOOLCALLS_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#define RN_TOOLCALLS_TAG_MAX 128           /* bytes in the tag */
#define RN_TOOLCALLS_MAX_TOOLS 512         /* tools in a request */
#define RN_TOOLCALLS_NAME_MAX 256          /* bytes per tool name */
#define RN_TOOLCALLS_HOLD_BYTES (256 * 1024) /* text held after the tag */

typedef struct rn_toolcalls rn_toolcalls_t;

/* tag: the template's tool tag (trimmed here; NULL or empty means "{").
 * tools_json: the request's `tools` array as JSON text (Ollama's shape,
 * `[{"type":"function","function":{"name":...}}]`); NULL or "" means no
 * tools (then no call is ever found). Entries without a non-empty string
 * `function.name` are ignored. seed: for the call ids (0 = from the clock).
 * NULL with CR_E_INVALID for bad JSON, a non-array, a tag or name over its
 * limit or too many tools (err names the field), CR_E_NOMEM.
 * Caller owns; free with rn_toolcalls_destroy. */
rn_toolcalls_t *rn_toolcalls_new(const char *tag, const char *tools_json,
                                 uint64_t seed, cr_err_t *err);

/* Frees; accepts NULL and *self_p == NULL; sets *self_p = NULL. */
void rn_toolcalls_destroy(rn_toolcalls_t **self_p);

/* Feeds len bytes of generated (answer) text. Appends text to pass through
 * to content (not reset first). When calls complete, appends to calls one
 * JSON array of them:
 *   [{"id":"call_ab12cd34","function":{"index":0,"name":"get_weather",
 *     "arguments":{"city":"Paris"}}}, ...]
 * so calls must be empty on entry (reset it per push); nothing is appended
 * when no call completed. A buffer error from content or calls
 * (CR_E_TOO_LARGE, CR_E_NOMEM) is returned as is; the parser's state is
 * then unspecified (destroy it). */
cr_status_t rn_toolcalls_push(rn_toolcalls_t *p, const char *text, size_t len,
                              cr_buf_t *content, cr_buf_t *calls);

/* End of generation: appends the leftover content (rule 5 above); no call
 * completes here (an unfinished object is content). Later pushes pass text
 * through as content. Errors as rn_toolcalls_push. */
cr_status_t rn_toolcalls_finish(rn_toolcalls_t *p, cr_buf_t *content);

/* Calls found so far (the next call's function.index). */
int rn_toolcalls_count(const rn_toolcalls_t *p);

/* True once the tag was seen and text is being held for calls (for a
 * non-streaming caller, or to know content is being withheld). */
bool rn_toolcalls_in_call(const rn_toolcalls_t *p);

/* Bytes held back right now (for tests). */
size_t rn_toolcalls_held(const rn_toolcalls_t *p);

#endif
