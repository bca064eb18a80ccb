/* chat_formats.h: the built-in prompt renderers and output parsers a model
 * can name (Modelfile RENDERER / PARSER, create's `renderer` / `parser`,
 * stored in the config blob as Ollama stores them).
 *
 * Only the names and what each parser can do live here (and what a Jinja
 * template's text implies, for models without a parser): the registry
 * refuses unknown names at create and derives capabilities from them; the
 * runner implements them (services/runner/prompt/renderer*.c,
 * services/runner/output/parser*.c) and looks them up by the same names. */
#ifndef CR_CHAT_FORMATS_H
#define CR_CHAT_FORMATS_H

#include "lib/prelude.h"

typedef enum cr_format_kind {
    CR_FORMAT_RENDERER,
    CR_FORMAT_PARSER,
} cr_format_kind_t;

/* True if name (exact, case-sensitive) is a built-in of that kind. */
bool cr_format_is_known(cr_format_kind_t kind, const char *name);

/* Writes the known names of a kind, comma-separated ("harmony,
 * qwen3-coder"), into buf (always terminated; cut short if cap is small),
 * for error messages. */
void cr_format_names(cr_format_kind_t kind, char *buf, size_t cap);

/* The word for a kind ("renderer", "parser"). */
const char *cr_format_kind_name(cr_format_kind_t kind);

/* What a parser finds in a model's output: tool calls, thinking. False for
 * unknown names (and NULL). */
bool cr_parser_has_tools(const char *name);
bool cr_parser_has_thinking(const char *name);

/* What a model's own Jinja chat template (tokenizer.chat_template) says of
 * its output, from the source text alone: think_open/think_close
 * ("<think>"/"</think>" when it writes both; else empty), tool_tag (the
 * known tool-call opening tag it writes, e.g. "<tool_call>"; else empty)
 * and whether it reads `tools` at all. The runner splits answers by these;
 * the registry derives the tools/thinking capabilities from the same. */
typedef struct cr_jinja_tags {
    char think_open[32], think_close[32];
    char tool_tag[32];
    bool uses_tools;
} cr_jinja_tags_t;

void cr_jinja_tags_infer(const char *src, size_t len, cr_jinja_tags_t *tags);

/* The built-in parser whose output format a model's own Jinja template
 * writes, from its source text: "harmony" for gpt-oss's channels,
 * "qwen3-coder" for <tool_call><function=..><parameter=..> without
 * thinking (that parser splits no thinking out); NULL when none matches (the
 * runner then splits by cr_jinja_tags_infer's tags). Static string. */
const char *cr_jinja_parser_infer(const char *src, size_t len);

#endif
