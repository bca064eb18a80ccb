/* chat_formats.c: the table of built-in renderer and parser names. */
#include "lib/prelude.h"
#include "lib/chat_formats.h"

typedef struct format {
    cr_format_kind_t kind;
    const char *name;
    bool tools, thinking; /* parsers: what they split out of the answer */
} format_t;

static const format_t formats[] = {
    {CR_FORMAT_RENDERER, "harmony", false, false},
    {CR_FORMAT_RENDERER, "qwen3-coder", false, false},
    {CR_FORMAT_PARSER, "harmony", true, true},
    {CR_FORMAT_PARSER, "qwen3-coder", true, false},
};

static const format_t *find(cr_format_kind_t kind, const char *name)
{
    for (size_t i = 0; name && i < CR_ARRAY_LEN(formats); i++)
        if (formats[i].kind == kind && !strcmp(formats[i].name, name))
            return &formats[i];
    return NULL;
}

bool cr_format_is_known(cr_format_kind_t kind, const char *name)
{
    return find(kind, name) != NULL;
}

void cr_format_names(cr_format_kind_t kind, char *buf, size_t cap)
{
    size_t at = 0;
    if (!cap)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < CR_ARRAY_LEN(formats); i++) {
        if (formats[i].kind != kind)
            continue;
        int n = snprintf(buf + at, cap - at, "%s%s", at ? ", " : "", formats[i].name);
        if (n < 0 || (size_t)n >= cap - at)
            return; /* truncated: still a terminated string */
        at += (size_t)n;
    }
}

const char *cr_format_kind_name(cr_format_kind_t kind)
{
    return kind == CR_FORMAT_RENDERER ? "renderer" : "parser";
}

bool cr_parser_has_tools(const char *name)
{
    const format_t *f = find(CR_FORMAT_PARSER, name);
    return f && f->tools;
}

bool cr_parser_has_thinking(const char *name)
{
    const format_t *f = find(CR_FORMAT_PARSER, name);
    return f && f->thinking;
}

/* ---- a Jinja template's tags ---- */

/* Tool-call openers real templates write, most specific first. */
static const char *const TOOL_TAGS[] = {
    "<tool_call>", "<|tool_call_start|>", "<|tool_calls_section_begin|>", "[TOOL_CALLS]",
    "<|python_tag|>", "<function_calls>", "<tool_calls>", NULL};

static bool has(const char *src, size_t len, const char *needle)
{
    return memmem(src, len, needle, strlen(needle)) != NULL;
}

void cr_jinja_tags_infer(const char *src, size_t len, cr_jinja_tags_t *tags)
{
    memset(tags, 0, sizeof *tags);
    if (has(src, len, "<think>") && has(src, len, "</think>")) {
        snprintf(tags->think_open, sizeof tags->think_open, "<think>");
        snprintf(tags->think_close, sizeof tags->think_close, "</think>");
    }
    tags->uses_tools = has(src, len, "tools");
    for (size_t i = 0; tags->uses_tools && TOOL_TAGS[i]; i++)
        if (has(src, len, TOOL_TAGS[i])) {
            snprintf(tags->tool_tag, sizeof tags->tool_tag, "%s", TOOL_TAGS[i]);
            break;
        }
}

const char *cr_jinja_parser_infer(const char *src, size_t len)
{
    if (has(src, len, "<|channel|>") && has(src, len, "<|start|>") &&
        has(src, len, "<|message|>"))
        return "harmony";
    cr_jinja_tags_t tags;
    cr_jinja_tags_infer(src, len, &tags);
    if (!strcmp(tags.tool_tag, "<tool_call>") && has(src, len, "<function=") &&
        has(src, len, "<parameter=") && !tags.think_open[0])
        return "qwen3-coder";
    return NULL;
}
