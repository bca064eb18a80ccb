/* surface_model.h: the model the API-surface e2e tests (Anthropic
 * Messages, Responses) talk to: a synthetic model with a qwen3-like chat
 * template, written for these tests, that has both the "tools" capability
 * (calls between <tool_call> tags, results as <tool_response>) and the
 * "thinking" one (<think> around `.Thinking`). The runner's scripted
 * sampler (CORRAL_TEST_SCRIPT) then decides what it answers, in turn:
 * SURFACE_SCRIPT below. */
#ifndef CR_SURFACE_MODEL_H
#define CR_SURFACE_MODEL_H

#include "tests/integration/e2e.h"

static const char SURFACE_TMPL[] =
    "{{- if or .System .Tools }}<|im_start|>system\n"
    "{{- if .System }}\n{{ .System }}{{ end }}"
    "{{- if .Tools }}\n<tools>\n{{- range .Tools }}\n{{ .Function }}{{- end }}\n</tools>"
    "{{- end }}<|im_end|>\n{{ end }}"
    "{{- range $i, $_ := .Messages }}"
    "{{- $last := eq (len (slice $.Messages $i)) 1 -}}"
    "{{- if eq .Role \"user\" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n"
    "{{ else if eq .Role \"assistant\" }}<|im_start|>assistant\n"
    "{{ if .Thinking }}<think>{{ .Thinking }}</think>\n{{ end }}"
    "{{ if .Content }}{{ .Content }}"
    "{{- else if .ToolCalls }}<tool_call>\n"
    "{{ range .ToolCalls }}{\"name\": \"{{ .Function.Name }}\", \"arguments\": "
    "{{ .Function.Arguments }}}\n{{ end }}</tool_call>"
    "{{- end }}<|im_end|>\n"
    "{{ else if eq .Role \"tool\" }}<|im_start|>user\n<tool_response>\n{{ .Content }}\n"
    "</tool_response><|im_end|>\n"
    "{{ end }}"
    "{{- if and (ne .Role \"assistant\") $last }}<|im_start|>assistant\n"
    "{{ if and $.IsThinkSet (not $.Think) }}<think>\n\n</think>\n\n{{ end }}"
    "{{ end }}"
    "{{- end }}";

/* The answers, one per request in the order the tests send them. */
#define SURFACE_THOUGHT "<think>reasoning here</think>final answer"
#define SURFACE_CALL                                                         \
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "    \
    "\"Paris\"}}\n</tool_call>"
#define SURFACE_FINAL "It is 18 degrees in Paris."

/* A tool definition in each API's own shape, for the forced calls. */
#define SURFACE_WEATHER_SCHEMA                                               \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"  \
    "\"required\":[\"city\"]}"

/* Writes the script (answers separated by "---" lines) to path, points
 * CORRAL_TEST_SCRIPT at it and starts serve; then creates "agent". */
static inline bool surface_start(e2e_t *t, const char *path,
                                 const char *const *answers, size_t n)
{
    char text[8192] = "";
    for (size_t i = 0; i < n; i++) {
        if (i)
            strncat(text, "\n---\n", sizeof text - strlen(text) - 1);
        strncat(text, answers[i], sizeof text - strlen(text) - 1);
    }
    strncat(text, "\n", sizeof text - strlen(text) - 1);
    if (!e2e_write_file(path, text))
        return false;
    setenv("CORRAL_TEST_SCRIPT", path, 1);
    if (!e2e_start(t))
        return false;
    char mf[8192];
    snprintf(mf, sizeof mf, "TEMPLATE \"\"\"%s\"\"\"\nPARAMETER num_ctx 2048\n",
             SURFACE_TMPL);
    return e2e_synth_create(t, "agent", mf, "--seed", "11", "--ctx", "2048", NULL);
}

#endif
