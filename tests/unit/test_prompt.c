/* test_prompt.c: Ollama's prompt construction
 * (services/runner/prompt/prompt.h):
 * registry-style templates (Llama 3 with tools, ChatML, Mistral with
 * [AVAILABLE_TOOLS]/[TOOL_CALLS], legacy Alpaca and Llama 2, Hermes/Qwen
 * tools with a legacy branch, thinking, TypeScript tool signatures) over
 * multi-turn conversations with exact expected strings; then collation, the
 * legacy cut, suffix mode, image tags, truncation with a fake token counter,
 * the chat and generate assemblies, and malformed input, each named. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/template/template.h"
#include "tests/unit/check.h"

#include <ctype.h>

/* A message as written in a test: tool calls as JSON text. */
typedef struct tmsg {
    const char *role, *content, *thinking;
    size_t images;
    const char *tool_calls; /* JSON array text or NULL */
    const char *tool_name, *tool_call_id;
} tmsg_t;

typedef struct golden {
    const char *name;
    const char *tmpl;
    const tmsg_t *msgs;
    size_t n_msgs;
    bool tools;
    rn_think_mode_t think;
    const char *level;
    bool chat; /* rn_prompt_chat with truncation, else rn_prompt_render */
    int64_t num_ctx;
    bool projector;
    size_t n_images, dropped;
    const char *want;
} golden_t;

/* ---- golden cases: expected strings from Go's text/template with Ollama's
 * data shapes and rendering modes (an out-of-tree oracle) ---- */

static const char T_LLAMA3[] =
    "{{- if or .System .Tools }}<|start_header_id|>system<|end_header_id|>\n"
    "{{- if .System }}\n"
    "\n"
    "{{ .System }}\n"
    "{{- end }}\n"
    "{{- if .Tools }}\n"
    "\n"
    "You can call tools. Answer a call as JSON {\"name\": function name, \"parameters\": arguments}.\n"
    "{{- end }}<|eot_id|>\n"
    "{{- end }}\n"
    "{{- range $i, $_ := .Messages }}\n"
    "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
    "{{- if eq .Role \"user\" }}<|start_header_id|>user<|end_header_id|>\n"
    "{{- if and $.Tools $last }}\n"
    "\n"
    "Tools:\n"
    "{{ range $.Tools }}{{ . }}\n"
    "{{ end }}\n"
    "{{- end }}\n"
    "\n"
    "{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
    "{{ end }}\n"
    "{{- else if eq .Role \"assistant\" }}<|start_header_id|>assistant<|end_header_id|>\n"
    "{{- if .ToolCalls }}\n"
    "\n"
    "{{ range .ToolCalls }}{\"name\": \"{{ .Function.Name }}\", \"parameters\": {{ .Function.Arguments }}}{{ end }}\n"
    "{{- else }}\n"
    "\n"
    "{{ .Content }}\n"
    "{{- end }}{{ if not $last }}<|eot_id|>{{ end }}\n"
    "{{- else if eq .Role \"tool\" }}<|start_header_id|>ipython<|end_header_id|>\n"
    "\n"
    "{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>\n"
    "\n"
    "{{ end }}\n"
    "{{- end }}\n"
    "{{- end }}";

static const char T_CHATML[] =
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n"
    "{{ .Content }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n";

static const char T_MISTRAL[] =
    "{{- range $index, $_ := .Messages }}\n"
    "{{- if eq .Role \"user\" }}\n"
    "{{- if and (le (len (slice $.Messages $index)) 2) $.Tools }}[AVAILABLE_TOOLS] {{ json $.Tools }}[/AVAILABLE_TOOLS]\n"
    "{{- end }}[INST] {{ if and (eq (len (slice $.Messages $index)) 1) $.System }}{{ $.System }}\n"
    "\n"
    "{{ end }}{{ .Content }}[/INST]\n"
    "{{- else if eq .Role \"assistant\" }}\n"
    "{{- if .Content }} {{ .Content }}</s>\n"
    "{{- else if .ToolCalls }}[TOOL_CALLS] [\n"
    "{{- range $i, $c := .ToolCalls }}{{ if $i }}, {{ end }}{\"name\": \"{{ .Function.Name }}\", \"arguments\": {{ json .Function.Arguments }}}\n"
    "{{- end }}]</s>\n"
    "{{- end }}\n"
    "{{- else if eq .Role \"tool\" }}[TOOL_RESULTS] {\"content\": {{ .Content }}}[/TOOL_RESULTS]\n"
    "{{- end }}\n"
    "{{- end }}";

static const char T_ALPACA[] =
    "{{ if .System }}{{ .System }}\n"
    "\n"
    "{{ end }}{{ if .Prompt }}### Instruction:\n"
    "{{ .Prompt }}\n"
    "\n"
    "{{ end }}### Response:\n"
    "{{ .Response }}\n"
    "\n";

static const char T_LLAMA2[] =
    "[INST] {{ if .System }}<<SYS>>{{ .System }}<</SYS>>\n"
    "\n"
    "{{ end }}{{ .Prompt }} [/INST] {{ .Response }}</s>";

static const char T_PROMPT_ONLY[] =
    "{{ if .System }}{{ .System }} {{ end }}{{ .Prompt }}";

static const char T_HERMES[] =
    "{{- if .Messages }}\n"
    "{{- if or .System .Tools }}<|im_start|>system\n"
    "{{- if .System }}\n"
    "{{ .System }}\n"
    "{{- end }}\n"
    "{{- if .Tools }}\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions. Signatures are inside <tools></tools>:\n"
    "<tools>\n"
    "{{- range .Tools }}\n"
    "{\"type\": \"function\", \"function\": {{ .Function }}}\n"
    "{{- end }}\n"
    "</tools>\n"
    "\n"
    "Return each call inside <tool_call></tool_call> tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call>\n"
    "{{- end }}<|im_end|>\n"
    "{{ end }}\n"
    "{{- range $i, $_ := .Messages }}\n"
    "{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n"
    "{{- if eq .Role \"user\" }}<|im_start|>user\n"
    "{{ .Content }}<|im_end|>\n"
    "{{ else if eq .Role \"assistant\" }}<|im_start|>assistant\n"
    "{{ if .Content }}{{ .Content }}\n"
    "{{- else if .ToolCalls }}<tool_call>\n"
    "{{ range .ToolCalls }}{\"name\": \"{{ .Function.Name }}\", \"arguments\": {{ .Function.Arguments }}}\n"
    "{{ end }}</tool_call>\n"
    "{{- end }}{{ if not $last }}<|im_end|>\n"
    "{{ end }}\n"
    "{{- else if eq .Role \"tool\" }}<|im_start|>user\n"
    "<tool_response>\n"
    "{{ .Content }}\n"
    "</tool_response><|im_end|>\n"
    "{{ end }}\n"
    "{{- if and (ne .Role \"assistant\") $last }}<|im_start|>assistant\n"
    "{{ end }}\n"
    "{{- end }}\n"
    "{{- else }}\n"
    "{{- if .System }}<|im_start|>system\n"
    "{{ .System }}<|im_end|>\n"
    "{{ end }}{{ if .Prompt }}<|im_start|>user\n"
    "{{ .Prompt }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
    "{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}";

static const char T_THINKING[] =
    "{{- range $i, $_ := .Messages }}\n"
    "{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n"
    "<|im_start|>{{ .Role }}\n"
    "{{ if and $last .Thinking }}<think>{{ .Thinking }}</think>\n"
    "{{ end }}{{ .Content }}<|im_end|>\n"
    "{{ end }}<|im_start|>assistant\n"
    "{{ if and $.IsThinkSet (not $.Think) }}<think>\n"
    "\n"
    "</think>\n"
    "\n"
    "{{ end }}";

static const char T_TSTOOLS[] =
    "{{- if .Tools }}namespace functions {\n"
    "{{- range .Tools }}\n"
    "// {{ .Function.Description }}\n"
    "type {{ .Function.Name }} = (_: {\n"
    "{{- range $name, $prop := .Function.Parameters.Properties }}\n"
    "{{ $name }}{{ if not (index $.Tools 0).Function.Parameters.Required }}?{{ end }}: {{ toTypeScriptType $prop }},\n"
    "{{- end }}\n"
    "}) => any;\n"
    "{{- end }}\n"
    "}\n"
    "{{ end }}\n"
    "{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}<|end|>{{ end }}<|assistant|>{{ if .ThinkLevel }}<reasoning:{{ .ThinkLevel }}>{{ end }}[{{ currentDate }}]";

static const char TOOLS_JSON[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather <now> & later\", \"parameters\": {\"type\": \"object\", \"required\": [\"city\"], \"properties\": {\"unit\": {\"type\": \"string\", \"description\": \"Temperature unit\", \"enum\": [\"celsius\", \"fahrenheit\"]}, \"city\": {\"type\": \"string\", \"description\": \"City name\"}}}}}, {\"type\": \"function\", \"function\": {\"name\": \"search\", \"description\": \"Search the web\", \"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": [\"string\", \"null\"]}, \"limit\": {\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"null\"}], \"description\": \"Max results\"}, \"filters\": {\"type\": \"object\", \"properties\": {\"site\": {\"type\": \"string\"}}}, \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}}}}]";

static const tmsg_t C_BASIC[] = {
    {.role = "system", .content = "You are a helpful assistant."},
    {.role = "user", .content = "Hello, how are you?"},
    {.role = "assistant", .content = "I'm doing great. How can I help you today?"},
    {.role = "user", .content = "I'd like to show off how chat templating works!"},
};
static const tmsg_t C_USER[] = {
    {.role = "user", .content = "Hello!"},
};
static const tmsg_t C_TOOLS[] = {
    {.role = "system", .content = "Be brief."},
    {.role = "user", .content = "What's the weather in Paris?"},
    {.role = "assistant", .content = "", .tool_calls = "[{\"function\": {\"index\": 0, \"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\", \"city\": \"Paris\"}}}, {\"id\": \"call_2\", \"function\": {\"index\": 1, \"name\": \"search\", \"arguments\": {\"query\": \"Paris news\", \"limit\": 3, \"nested\": {\"b\": [1, 2.5, null], \"a\": \"<x>\"}}}}]"},
    {.role = "tool", .content = "{\"temp\": 22}", .tool_name = "get_weather"},
    {.role = "tool", .content = "no news", .tool_name = "search", .tool_call_id = "call_2"},
};
static const tmsg_t C_TOOLS_ANSWERED[] = {
    {.role = "user", .content = "Weather in Oslo?"},
    {.role = "assistant", .content = "", .tool_calls = "[{\"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}}]"},
    {.role = "tool", .content = "-3C", .tool_name = "get_weather"},
    {.role = "assistant", .content = "It is -3C in Oslo."},
    {.role = "user", .content = "Thanks!"},
};
static const tmsg_t C_COLLATE[] = {
    {.role = "system", .content = "S1"},
    {.role = "system", .content = "S2"},
    {.role = "user", .content = "u1"},
    {.role = "user", .content = "u2"},
    {.role = "assistant", .content = "a1"},
    {.role = "tool", .content = "t1"},
    {.role = "tool", .content = "t2"},
    {.role = "system", .content = "S3"},
    {.role = "user", .content = "u3"},
};
static const tmsg_t C_PREFILL[] = {
    {.role = "user", .content = "Hello friend!"},
    {.role = "assistant", .content = "Hello human!"},
    {.role = "user", .content = "What is your name?"},
    {.role = "assistant", .content = "My name is Ollama and I"},
};
static const tmsg_t C_THINKING[] = {
    {.role = "user", .content = "2+2?"},
    {.role = "assistant", .content = "4", .thinking = "add them"},
    {.role = "user", .content = "and 3+3?"},
    {.role = "assistant", .content = "", .thinking = "again add"},
};
static const tmsg_t C_IMAGES[] = {
    {.role = "user", .content = "what is in [img] and here?", .images = 2},
    {.role = "assistant", .content = "a cat"},
    {.role = "user", .content = "and this one?", .images = 1},
};

static const golden_t GOLDEN[] = {
    {"llama3_basic", T_LLAMA3, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hello, how are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "I'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "I'd like to show off how chat templating works!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama3_user", T_LLAMA3, C_USER, CR_ARRAY_LEN(C_USER), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Hello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama3_tools", T_LLAMA3, C_TOOLS, CR_ARRAY_LEN(C_TOOLS), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "Be brief.\n"
     "\n"
     "You can call tools. Answer a call as JSON {\"name\": function name, \"parameters\": arguments}.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "What's the weather in Paris?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\",\"unit\":\"celsius\"}}{\"name\": \"search\", \"parameters\": {\"limit\":3,\"nested\":{\"a\":\"\\u003cx\\u003e\",\"b\":[1,2.5,null]},\"query\":\"Paris news\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "{\"temp\": 22}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "no news<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama3_tools_answered", T_LLAMA3, C_TOOLS_ANSWERED, CR_ARRAY_LEN(C_TOOLS_ANSWERED), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "You can call tools. Answer a call as JSON {\"name\": function name, \"parameters\": arguments}.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Weather in Oslo?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Oslo\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "-3C<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "It is -3C in Oslo.<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "Tools:\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the weather \\u003cnow\\u003e \\u0026 later\",\"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"description\":\"Temperature unit\",\"enum\":[\"celsius\",\"fahrenheit\"]}}}}}\n"
     "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"description\":\"Search the web\",\"parameters\":{\"type\":\"object\",\"properties\":{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}\n"
     "\n"
     "\n"
     "Thanks!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"llama3_collate", T_LLAMA3, C_COLLATE, CR_ARRAY_LEN(C_COLLATE), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "S1\n"
     "\n"
     "S2\n"
     "\n"
     "S3<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "u1\n"
     "\n"
     "u2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "a1<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "t1<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n"
     "\n"
     "t2<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "u3<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"chatml_basic", T_CHATML, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|im_start|>system\n"
     "You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n"
     "Hello, how are you?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "I'm doing great. How can I help you today?<|im_end|>\n"
     "<|im_start|>user\n"
     "I'd like to show off how chat templating works!<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"chatml_collate", T_CHATML, C_COLLATE, CR_ARRAY_LEN(C_COLLATE), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|im_start|>system\n"
     "S1\n"
     "\n"
     "S2<|im_end|>\n"
     "<|im_start|>user\n"
     "u1\n"
     "\n"
     "u2<|im_end|>\n"
     "<|im_start|>assistant\n"
     "a1<|im_end|>\n"
     "<|im_start|>tool\n"
     "t1<|im_end|>\n"
     "<|im_start|>tool\n"
     "t2<|im_end|>\n"
     "<|im_start|>system\n"
     "S3<|im_end|>\n"
     "<|im_start|>user\n"
     "u3<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"mistral_basic", T_MISTRAL, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] Hello, how are you?[/INST] I'm doing great. How can I help you today?</s>[INST] You are a helpful assistant.\n"
     "\n"
     "I'd like to show off how chat templating works![/INST]"},
    {"mistral_tools", T_MISTRAL, C_TOOLS, CR_ARRAY_LEN(C_TOOLS), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] What's the weather in Paris?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"celsius\"}}, {\"name\": \"search\", \"arguments\": {\"limit\":3,\"nested\":{\"a\":\"\\u003cx\\u003e\",\"b\":[1,2.5,null]},\"query\":\"Paris news\"}}]</s>[TOOL_RESULTS] {\"content\": {\"temp\": 22}}[/TOOL_RESULTS][TOOL_RESULTS] {\"content\": no news}[/TOOL_RESULTS]"},
    {"mistral_tools_answered", T_MISTRAL, C_TOOLS_ANSWERED, CR_ARRAY_LEN(C_TOOLS_ANSWERED), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] Weather in Oslo?[/INST][TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}]</s>[TOOL_RESULTS] {\"content\": -3C}[/TOOL_RESULTS] It is -3C in Oslo.</s>[AVAILABLE_TOOLS] [{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Get the weather \\u003cnow\\u003e \\u0026 later\",\"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"description\":\"Temperature unit\",\"enum\":[\"celsius\",\"fahrenheit\"]}}}}},{\"type\":\"function\",\"function\":{\"name\":\"search\",\"description\":\"Search the web\",\"parameters\":{\"type\":\"object\",\"properties\":{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}][/AVAILABLE_TOOLS][INST] Thanks![/INST]"},
    {"mistral_prefill", T_MISTRAL, C_PREFILL, CR_ARRAY_LEN(C_PREFILL), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] Hello friend![/INST] Hello human!</s>[INST] What is your name?[/INST] My name is Ollama and I</s>"},
    {"alpaca_basic", T_ALPACA, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "You are a helpful assistant.\n"
     "\n"
     "### Instruction:\n"
     "Hello, how are you?\n"
     "\n"
     "### Response:\n"
     "I'm doing great. How can I help you today?\n"
     "\n"
     "### Instruction:\n"
     "I'd like to show off how chat templating works!\n"
     "\n"
     "### Response:\n"},
    {"alpaca_collate", T_ALPACA, C_COLLATE, CR_ARRAY_LEN(C_COLLATE), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "S1\n"
     "\n"
     "S2\n"
     "\n"
     "### Instruction:\n"
     "u1\n"
     "\n"
     "u2\n"
     "\n"
     "### Response:\n"
     "a1\n"
     "\n"
     "S3\n"
     "\n"
     "### Instruction:\n"
     "u3\n"
     "\n"
     "### Response:\n"},
    {"alpaca_prefill", T_ALPACA, C_PREFILL, CR_ARRAY_LEN(C_PREFILL), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "### Instruction:\n"
     "Hello friend!\n"
     "\n"
     "### Response:\n"
     "Hello human!\n"
     "\n"
     "### Instruction:\n"
     "What is your name?\n"
     "\n"
     "### Response:\n"
     "My name is Ollama and I"},
    {"llama2_basic", T_LLAMA2, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] <<SYS>>You are a helpful assistant.<</SYS>>\n"
     "\n"
     "Hello, how are you? [/INST] I'm doing great. How can I help you today?</s>[INST] I'd like to show off how chat templating works! [/INST] "},
    {"llama2_prefill", T_LLAMA2, C_PREFILL, CR_ARRAY_LEN(C_PREFILL), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "[INST] Hello friend! [/INST] Hello human!</s>[INST] What is your name? [/INST] My name is Ollama and I"},
    {"prompt_only_basic", T_PROMPT_ONLY, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "You are a helpful assistant. Hello, how are you?I'm doing great. How can I help you today?I'd like to show off how chat templating works!"},
    {"hermes_basic", T_HERMES, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|im_start|>system\n"
     "You are a helpful assistant.<|im_end|>\n"
     "<|im_start|>user\n"
     "Hello, how are you?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "I'm doing great. How can I help you today?<|im_end|>\n"
     "<|im_start|>user\n"
     "I'd like to show off how chat templating works!<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"hermes_tools", T_HERMES, C_TOOLS, CR_ARRAY_LEN(C_TOOLS), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|im_start|>system\n"
     "Be brief.\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions. Signatures are inside <tools></tools>:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"get_weather\",\"description\":\"Get the weather \\u003cnow\\u003e \\u0026 later\",\"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"description\":\"Temperature unit\",\"enum\":[\"celsius\",\"fahrenheit\"]}}}}}\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"search\",\"description\":\"Search the web\",\"parameters\":{\"type\":\"object\",\"properties\":{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}\n"
     "</tools>\n"
     "\n"
     "Return each call inside <tool_call></tool_call> tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "What's the weather in Paris?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"unit\":\"celsius\"}}\n"
     "{\"name\": \"search\", \"arguments\": {\"limit\":3,\"nested\":{\"a\":\"\\u003cx\\u003e\",\"b\":[1,2.5,null]},\"query\":\"Paris news\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "{\"temp\": 22}\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "no news\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"hermes_tools_answered", T_HERMES, C_TOOLS_ANSWERED, CR_ARRAY_LEN(C_TOOLS_ANSWERED), true, RN_THINK_UNSET, NULL, false, 0, false, 0, 0,
     "<|im_start|>system\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions. Signatures are inside <tools></tools>:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"get_weather\",\"description\":\"Get the weather \\u003cnow\\u003e \\u0026 later\",\"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"description\":\"Temperature unit\",\"enum\":[\"celsius\",\"fahrenheit\"]}}}}}\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"search\",\"description\":\"Search the web\",\"parameters\":{\"type\":\"object\",\"properties\":{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}\n"
     "</tools>\n"
     "\n"
     "Return each call inside <tool_call></tool_call> tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Weather in Oslo?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Oslo\"}}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "<tool_response>\n"
     "-3C\n"
     "</tool_response><|im_end|>\n"
     "<|im_start|>assistant\n"
     "It is -3C in Oslo.<|im_end|>\n"
     "<|im_start|>user\n"
     "Thanks!<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"thinking_off", T_THINKING, C_THINKING, CR_ARRAY_LEN(C_THINKING), false, RN_THINK_FALSE, NULL, false, 0, false, 0, 0,
     "<|im_start|>user\n"
     "2+2?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "4<|im_end|>\n"
     "<|im_start|>user\n"
     "and 3+3?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>again add</think>\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>\n"
     "\n"
     "</think>\n"
     "\n"},
    {"thinking_on", T_THINKING, C_THINKING, CR_ARRAY_LEN(C_THINKING), false, RN_THINK_TRUE, NULL, false, 0, false, 0, 0,
     "<|im_start|>user\n"
     "2+2?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "4<|im_end|>\n"
     "<|im_start|>user\n"
     "and 3+3?<|im_end|>\n"
     "<|im_start|>assistant\n"
     "<think>again add</think>\n"
     "<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"tstools_high", T_TSTOOLS, C_USER, CR_ARRAY_LEN(C_USER), true, RN_THINK_LEVEL, "high", false, 0, false, 0, 0,
     "namespace functions {\n"
     "// Get the weather <now> & later\n"
     "type get_weather = (_: {\n"
     "city: string,\n"
     "unit: string,\n"
     "}) => any;\n"
     "// Search the web\n"
     "type search = (_: {\n"
     "filters: Record<string, any>,\n"
     "limit: number | null,\n"
     "query: string | null,\n"
     "tags: any[],\n"
     "}) => any;\n"
     "}\n"
     "<|user|>Hello!<|end|><|assistant|><reasoning:high>[2023-11-14]"},
    {"trunc_llama3_25", T_LLAMA3, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, true, 25, false, 0, 2,
     "<|start_header_id|>system<|end_header_id|>\n"
     "\n"
     "You are a helpful assistant.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"
     "I'm doing great. How can I help you today?<|eot_id|><|start_header_id|>user<|end_header_id|>\n"
     "\n"
     "I'd like to show off how chat templating works!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n"
     "\n"},
    {"trunc_hermes_40", T_HERMES, C_TOOLS_ANSWERED, CR_ARRAY_LEN(C_TOOLS_ANSWERED), true, RN_THINK_UNSET, NULL, true, 40, false, 0, 4,
     "<|im_start|>system\n"
     "\n"
     "# Tools\n"
     "\n"
     "You may call one or more functions. Signatures are inside <tools></tools>:\n"
     "<tools>\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"get_weather\",\"description\":\"Get the weather \\u003cnow\\u003e \\u0026 later\",\"parameters\":{\"type\":\"object\",\"required\":[\"city\"],\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":\"string\",\"description\":\"Temperature unit\",\"enum\":[\"celsius\",\"fahrenheit\"]}}}}}\n"
     "{\"type\": \"function\", \"function\": {\"name\":\"search\",\"description\":\"Search the web\",\"parameters\":{\"type\":\"object\",\"properties\":{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}}}}}\n"
     "</tools>\n"
     "\n"
     "Return each call inside <tool_call></tool_call> tags:\n"
     "<tool_call>\n"
     "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
     "</tool_call><|im_end|>\n"
     "<|im_start|>user\n"
     "Thanks!<|im_end|>\n"
     "<|im_start|>assistant\n"},
    {"trunc_alpaca_1", T_ALPACA, C_BASIC, CR_ARRAY_LEN(C_BASIC), false, RN_THINK_UNSET, NULL, true, 1, false, 0, 3,
     "You are a helpful assistant.\n"
     "\n"
     "### Instruction:\n"
     "I'd like to show off how chat templating works!\n"
     "\n"
     "### Response:\n"},
    {"images_chatml_1000", T_CHATML, C_IMAGES, CR_ARRAY_LEN(C_IMAGES), false, RN_THINK_UNSET, NULL, true, 1000, true, 1, 1,
     "<|im_start|>assistant\n"
     "a cat<|im_end|>\n"
     "<|im_start|>user\n"
     "[img-0]and this one?<|im_end|>\n"
     "<|im_start|>assistant\n"},
};

/* ---- helpers ---- */

/* Converted messages: the JSON stays alive until msgs_free. */
typedef struct msgs {
    rn_prompt_msg_t m[32];
    json_t *json[32];
    size_t n;
} msgs_t;

static void msgs_make(msgs_t *out, const tmsg_t *in, size_t n)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n && i < CR_ARRAY_LEN(out->m); i++) {
        out->m[i] = (rn_prompt_msg_t){
            .role = in[i].role,
            .content = in[i].content,
            .thinking = in[i].thinking,
            .n_images = in[i].images,
            .tool_name = in[i].tool_name,
            .tool_call_id = in[i].tool_call_id,
        };
        if (in[i].tool_calls) {
            json_error_t je;
            out->json[i] = json_loads(in[i].tool_calls, 0, &je);
            if (!out->json[i])
                fprintf(stderr, "bad test JSON %s: %s\n", in[i].tool_calls, je.text);
            out->m[i].tool_calls = out->json[i];
        }
        out->n++;
    }
}

static void msgs_free(msgs_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        json_decref(m->json[i]);
}

/* The fake tokenizer: one token per whitespace-separated word. */
static int count_calls_g;
static cr_status_t count_words(void *ctx, const char *text, size_t len, int64_t *n, cr_err_t *err)
{
    CR_UNUSED(err);
    count_calls_g++;
    if (ctx && !strcmp((const char *)ctx, "fail"))
        return cr_err_set(err, CR_E_RUNNER, "tokenizer went away");
    int64_t c = 0;
    bool in = false;
    for (size_t i = 0; i < len; i++) {
        bool sp = isspace((unsigned char)text[i]);
        if (!sp && !in)
            c++;
        in = !sp;
    }
    *n = c;
    return CR_OK;
}

static rn_tmpl_t *parse(const char *src)
{
    rn_tmpl_t *t = NULL;
    cr_err_t err;
    if (rn_tmpl_parse(src, strlen(src), &t, &err)) {
        fprintf(stderr, "parse failed: %s\n", err.msg);
        return NULL;
    }
    return t;
}

static json_t *tools_json(void)
{
    return json_loads(TOOLS_JSON, 0, NULL);
}

static const rn_prompt_opts_t OPTS = {.now_unix = 1700000000};

/* Renders Values{msgs, tools} through template src; returns the text
 * (caller frees) or NULL, with *st the status. */
static char *render_msgs(const char *src, const tmsg_t *in, size_t n, const json_t *tools,
                         rn_prompt_think_t think, const rn_prompt_opts_t *opts, cr_status_t *st,
                         cr_err_t *err)
{
    rn_tmpl_t *t = parse(src);
    msgs_t m;
    msgs_make(&m, in, n);
    rn_prompt_values_t v = {.msgs = m.m, .n_msgs = m.n, .tools = tools, .think = think};
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    *st = t ? rn_prompt_render(t, &v, opts ? opts : &OPTS, &b, err) : CR_E_INVALID;
    char *out = *st ? NULL : cr_buf_steal(&b);
    cr_buf_free(&b);
    msgs_free(&m);
    rn_tmpl_destroy(&t);
    return out;
}

static void check_text_at(int line, const char *got, const char *want)
{
    if (got && !strcmp(got, want)) {
        check_passed_g++;
        return;
    }
    check_failed_g++;
    fprintf(stderr, "FAIL %s:%d:\n  got:  \"%s\"\n  want: \"%s\"\n", __FILE__, line,
            got ? got : "(null)", want);
}
#define CHECK_TEXT(got, want) check_text_at(__LINE__, got, want)

/* ---- golden conversations ---- */

/* The spans as "T[...]U[...]", with GAP/UNCOVERED where they fail to
 * cover the text exactly. */
static void spans_desc(const rn_prompt_result_t *r, char *d, size_t cap)
{
    size_t at = 0, used = 0;
    d[0] = '\0';
    for (size_t i = 0; i < r->n_spans; i++) {
        if (r->spans[i].offset != at || !r->spans[i].len)
            snprintf(d + used, cap - used, "GAP@%zu", r->spans[i].offset);
        used = strlen(d);
        snprintf(d + used, cap - used, "%c[%.*s]", r->spans[i].trusted ? 'T' : 'U',
                 (int)r->spans[i].len, r->text + r->spans[i].offset);
        used = strlen(d);
        at = r->spans[i].offset + r->spans[i].len;
    }
    if (at != r->len)
        snprintf(d + used, cap - used, "UNCOVERED");
}

static bool spans_cover(const rn_prompt_result_t *r)
{
    char d[1 << 16];
    spans_desc(r, d, sizeof d);
    return !strstr(d, "GAP@") && !strstr(d, "UNCOVERED");
}

#define CHECK_SPANS(r, want)             \
    do {                                 \
        char d_[4096];                   \
        spans_desc(&(r), d_, sizeof d_); \
        CHECK_EQ_STR(d_, want);          \
    } while (0)

static void test_golden(void)
{
    json_t *tools = tools_json();
    CHECK(tools != NULL);
    for (size_t i = 0; i < CR_ARRAY_LEN(GOLDEN); i++) {
        const golden_t *g = &GOLDEN[i];
        rn_tmpl_t *t = parse(g->tmpl);
        CHECK_MSG(t != NULL, "%s", g->name);
        if (!t)
            continue;
        msgs_t m;
        msgs_make(&m, g->msgs, g->n_msgs);
        rn_prompt_think_t think = {g->think, g->level};
        cr_err_t err;
        if (g->chat) {
            rn_prompt_chat_t in = {
                .tmpl = t,
                .msgs = m.m,
                .n_msgs = m.n,
                .tools = g->tools ? tools : NULL,
                .think = think,
                .fit = {.truncate = true, .num_ctx = g->num_ctx, .has_projector = g->projector,
                        .count_tokens = count_words},
                .opts = OPTS,
            };
            rn_prompt_result_t r;
            cr_status_t st = rn_prompt_chat(&in, &r, &err);
            CHECK_MSG(st == CR_OK, "%s: %s", g->name, err.msg);
            CHECK_MSG(r.text && !strcmp(r.text, g->want), "%s:\n  got:  \"%s\"\n  want: \"%s\"",
                      g->name, r.text ? r.text : "(null)", g->want);
            CHECK_MSG(r.len == strlen(g->want), "%s: len %zu", g->name, r.len);
            CHECK_MSG(r.n_images == g->n_images, "%s: %zu images", g->name, r.n_images);
            CHECK_MSG(r.msgs_dropped == g->dropped, "%s: %zu dropped", g->name, r.msgs_dropped);
            CHECK_MSG(spans_cover(&r), "%s: spans do not cover the prompt", g->name);
            rn_prompt_result_free(&r);
        } else {
            rn_prompt_values_t v = {.msgs = m.m, .n_msgs = m.n, .tools = g->tools ? tools : NULL,
                                    .think = think};
            cr_buf_t b;
            cr_buf_init(&b, 1 << 20);
            cr_status_t st = rn_prompt_render(t, &v, &OPTS, &b, &err);
            CHECK_MSG(st == CR_OK, "%s: %s", g->name, err.msg);
            CHECK_MSG(b.data && !strcmp(b.data, g->want), "%s:\n  got:  \"%s\"\n  want: \"%s\"",
                      g->name, b.data ? b.data : "(null)", g->want);
            cr_buf_free(&b);
        }
        msgs_free(&m);
        rn_tmpl_destroy(&t);
    }
    json_decref(tools);
}

/* ---- collation and the data model ---- */

static const char T_DUMP[] = "{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}|{{ .System }}";

static void test_collation(void)
{
    cr_status_t st;
    cr_err_t err;
    char *out = render_msgs(T_DUMP, C_COLLATE, CR_ARRAY_LEN(C_COLLATE), NULL, (rn_prompt_think_t){0},
                            NULL, &st, &err);
    /* Consecutive same roles merge with a blank line; tool messages never
     * merge; .System joins every system message. */
    CHECK_TEXT(out, "[system:S1\n\nS2][user:u1\n\nu2][assistant:a1][tool:t1][tool:t2][system:S3]"
                    "[user:u3]|S1\n\nS2\n\nS3");
    free(out);
    /* A merged message keeps the first one's other fields. */
    static const tmsg_t two_users[] = {
        {.role = "user", .content = "a", .images = 1},
        {.role = "user", .content = "b", .images = 2},
    };
    out = render_msgs("{{ range .Messages }}{{ .Content }}/{{ len .Images }}{{ end }}", two_users, 2,
                      NULL, (rn_prompt_think_t){0}, NULL, &st, &err);
    CHECK_TEXT(out, "a\n\nb/1");
    free(out);
}

static void test_message_fields(void)
{
    static const tmsg_t msgs[] = {
        {.role = "assistant", .content = "", .thinking = "pondering",
         .tool_calls = "[{\"id\":\"call_1\",\"function\":{\"index\":3,\"name\":\"f\","
                       "\"arguments\":{\"z\":1,\"a\":[true,null],\"m\":{\"y\":2,\"x\":1}}}},"
                       "{\"function\":{\"name\":\"g\"}}]"},
        {.role = "tool", .content = "42", .tool_name = "f", .tool_call_id = "call_1", .images = 2},
    };
    const char *tmpl =
        "{{ range .Messages }}{{ .Role }}|{{ .Thinking }}|{{ .ToolName }}|{{ .ToolCallID }}|"
        "{{ len .Images }}|{{ if .ToolCalls }}{{ range .ToolCalls }}<{{ .ID }}:{{ .Function.Index }}:"
        "{{ .Function.Name }}:{{ .Function.Arguments }}:{{ json .Function.Arguments }}:"
        "{{ range $k, $v := .Function.Arguments }}{{ $k }}={{ $v }},{{ end }}>{{ end }}"
        "{{ else }}none{{ end }}\n{{ end }}";
    cr_status_t st;
    cr_err_t err;
    char *out = render_msgs(tmpl, msgs, 2, NULL, (rn_prompt_think_t){0}, NULL, &st, &err);
    /* Arguments are a Go map: sorted keys, JSON when printed, nested
     * maps print as JSON inside, as Go marshals the whole value; absent
     * arguments print {} but marshal to null. */
    CHECK_TEXT(out, "assistant|pondering|||0|<call_1:3:f:{\"a\":[true,null],\"m\":{\"x\":1,\"y\":2},"
                    "\"z\":1}:{\"a\":[true,null],\"m\":{\"x\":1,\"y\":2},\"z\":1}:a=[true <nil>],"
                    "m=map[x:1 y:2],z=1,><:0:g:{}:null:>\n"
                    "tool||f|call_1|2|none\n");
    free(out);
    /* The opt-in keeps the request's key order (nested objects too). */
    rn_prompt_opts_t ordered = OPTS;
    ordered.tool_args_ordered = true;
    out = render_msgs("{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Arguments }};"
                      "{{ range $k, $v := .Function.Arguments }}{{ $k }}{{ end }}{{ end }}{{ end }}",
                      msgs, 1, NULL, (rn_prompt_think_t){0}, &ordered, &st, &err);
    CHECK_TEXT(out, "{\"z\":1,\"a\":[true,null],\"m\":{\"y\":2,\"x\":1}};zam{};");
    free(out);
    /* Messages are structs: an unknown field is an error, as in Go. */
    out = render_msgs("{{ range .Messages }}{{ .Nope }}{{ end }}", msgs, 1, NULL,
                      (rn_prompt_think_t){0}, NULL, &st, &err);
    CHECK(out == NULL);
    CHECK_EQ_INT(st, CR_E_INVALID);
    CHECK(strstr(err.msg, "can't evaluate field Nope in type *template.templateMessage") != NULL);
    /* Printing a message is Go's %v of a struct pointer. */
    static const tmsg_t plain[] = {{.role = "user", .content = "hi"}};
    out = render_msgs("{{ range .Messages }}{{ . }}{{ end }}", plain, 1, NULL,
                      (rn_prompt_think_t){0}, NULL, &st, &err);
    CHECK_TEXT(out, "&{user hi  [] []  }");
    free(out);
}

static void test_tools_value(void)
{
    json_t *tools = tools_json();
    cr_status_t st;
    cr_err_t err;
    static const tmsg_t one[] = {{.role = "user", .content = "q"}};
    char *out = render_msgs(
        "{{ range .Messages }}{{ end }}{{ range .Tools }}{{ .Function.Name }}: "
        "{{ range $n, $p := .Function.Parameters.Properties }}{{ $n }}:{{ $p.Type }}:"
        "{{ toTypeScriptType $p }};{{ end }}\n{{ end }}{{ (index .Tools 1).Function.Parameters.Properties }}"
        "\n{{ toTypeScriptType 1 }} {{ len .Tools }} {{ (index .Tools 0).Type }}",
        one, 1, tools, (rn_prompt_think_t){0}, NULL, &st, &err);
    CHECK_TEXT(out, "get_weather: city:string:string;unit:string:string;\n"
                    "search: filters:object:Record<string, any>;limit::number | null;"
                    "query:[string null]:string | null;tags:array:any[];\n"
                    "{\"filters\":{\"type\":\"object\",\"properties\":{\"site\":{\"type\":\"string\"}}},"
                    "\"limit\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}],\"description\":"
                    "\"Max results\"},\"query\":{\"type\":[\"string\",\"null\"]},\"tags\":{\"type\":"
                    "\"array\",\"items\":{\"type\":\"string\"}}}\nany 2 function");
    free(out);
    /* A tool prints as JSON in Go's field order; description is always
     * present, properties null when absent; HTML characters escaped. */
    json_t *bare = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"now\","
                              "\"parameters\":{\"type\":\"object\"}}}]",
                              0, NULL);
    out = render_msgs("{{ range .Messages }}{{ end }}{{ .Tools }}|{{ range .Tools }}{{ .Function }}"
                      "|{{ .Function.Parameters.Properties }}{{ end }}",
                      one, 1, bare, (rn_prompt_think_t){0}, NULL, &st, &err);
    CHECK_TEXT(out, "[{\"type\":\"function\",\"function\":{\"name\":\"now\",\"description\":\"\","
                    "\"parameters\":{\"type\":\"object\",\"properties\":null}}}]|{\"name\":\"now\","
                    "\"description\":\"\",\"parameters\":{\"type\":\"object\",\"properties\":null}}|{}");
    free(out);
    json_decref(bare);
    json_decref(tools);
}

static void test_think_values(void)
{
    const char *tmpl = "{{ range .Messages }}{{ end }}{{ .Think }}/{{ .ThinkLevel }}/{{ .IsThinkSet }}";
    static const tmsg_t one[] = {{.role = "user", .content = "q"}};
    struct {
        rn_prompt_think_t think;
        const char *want;
    } cases[] = {
        {{RN_THINK_UNSET, NULL}, "false//false"},
        {{RN_THINK_FALSE, NULL}, "false//true"},
        {{RN_THINK_TRUE, NULL}, "true/medium/true"},
        {{RN_THINK_LEVEL, "low"}, "true/low/true"},
        {{RN_THINK_LEVEL, "max"}, "true/max/true"},
        {{RN_THINK_LEVEL, "bogus"}, "false/bogus/true"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_status_t st;
        cr_err_t err;
        char *out = render_msgs(tmpl, one, 1, NULL, cases[i].think, NULL, &st, &err);
        CHECK_TEXT(out, cases[i].want);
        free(out);
    }
    /* The bus's string form. */
    CHECK(rn_prompt_think_parse(NULL).mode == RN_THINK_UNSET);
    CHECK(rn_prompt_think_parse("").mode == RN_THINK_UNSET);
    CHECK(rn_prompt_think_parse("true").mode == RN_THINK_TRUE);
    CHECK(rn_prompt_think_parse("false").mode == RN_THINK_FALSE);
    rn_prompt_think_t hi = rn_prompt_think_parse("high");
    CHECK(hi.mode == RN_THINK_LEVEL && !strcmp(hi.level, "high"));
}

/* ---- legacy templates and the cut after .Response ---- */

static void test_legacy_cut(void)
{
    static const tmsg_t turns[] = {
        {.role = "user", .content = "p1"},
        {.role = "assistant", .content = "r1"},
        {.role = "user", .content = "p2"},
    };
    static const tmsg_t prefill[] = {
        {.role = "user", .content = "p"},
        {.role = "assistant", .content = "r"},
    };
    static const tmsg_t sys_mid[] = {
        {.role = "system", .content = "s1"},
        {.role = "user", .content = "p1"},
        {.role = "system", .content = "s2"},
        {.role = "user", .content = "p2"},
        {.role = "tool", .content = "ignored"},
    };
    cr_status_t st;
    cr_err_t err;
    rn_prompt_think_t no = {0};
    /* Each finished turn runs the whole template; the last one stops right
     * after .Response. */
    char *out = render_msgs("A{{ .Prompt }}B{{ .Response }}C", turns, 3, NULL, no, NULL, &st, &err);
    CHECK_TEXT(out, "Ap1Br1CAp2B");
    free(out);
    /* An assistant message last is a prefill: the model continues it. */
    out = render_msgs("A{{ .Prompt }}B{{ .Response }}C", prefill, 2, NULL, no, NULL, &st, &err);
    CHECK_TEXT(out, "ApBr");
    free(out);
    /* A system message after a prompt flushes the turn; tool messages are
     * ignored in legacy mode. */
    out = render_msgs("<{{ .System }}|{{ .Prompt }}|{{ .Response }}>", sys_mid, 5, NULL, no, NULL,
                      &st, &err);
    CHECK_TEXT(out, "<s1|p1|><s2|p2|");
    free(out);
    /* The cut reaches into blocks; an else after the cut goes away. */
    out = render_msgs("{{ if .Prompt }}P{{ .Response }}X{{ else }}E{{ end }}Y", prefill, 2, NULL,
                      no, NULL, &st, &err);
    CHECK_TEXT(out, "Pr");
    free(out);
    /* A .Response piped on loses its whole action (Ollama's tree surgery). */
    out = render_msgs("x{{ .Prompt }}{{ .Response | printf \"%s\" }}y", prefill, 2, NULL, no, NULL,
                      &st, &err);
    CHECK_TEXT(out, "xp");
    free(out);
    /* A condition on .Response is not a cut point; the body after is. */
    out = render_msgs("{{ if .Response }}R{{ end }}[{{ .Prompt }}]{{ .Response }}!", prefill, 2,
                      NULL, no, NULL, &st, &err);
    CHECK_TEXT(out, "R[p]r");
    free(out);
    /* No .Response and no .Messages: Ollama appends {{ .Response }}. */
    rn_tmpl_t *t = parse("{{ .System }}:{{ .Prompt }}");
    CHECK(t && rn_tmpl_uses(t, "response") && rn_tmpl_uses(t, "Prompt") &&
          !rn_tmpl_uses(t, "messages"));
    rn_tmpl_destroy(&t);
    out = render_msgs("{{ .System }}:{{ .Prompt }}", prefill, 2, NULL, no, NULL, &st, &err);
    CHECK_TEXT(out, ":pr");
    free(out);
    /* The default template. */
    out = render_msgs(RN_PROMPT_DEFAULT_TEMPLATE, C_BASIC, CR_ARRAY_LEN(C_BASIC), NULL, no, NULL, &st, &err);
    CHECK_TEXT(out, "Hello, how are you?I'm doing great. How can I help you today?"
                    "I'd like to show off how chat templating works!");
    free(out);
}

static void test_suffix_mode(void)
{
    static const char fim[] = "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>\n"
                              "{{- else }}{{ .Prompt }}\n{{- end }}";
    rn_tmpl_t *t = parse(fim);
    cr_buf_t b;
    cr_buf_init(&b, 4096);
    cr_err_t err;
    rn_prompt_values_t v = {.prompt = "def add(", .suffix = "return x"};
    CHECK_EQ_INT(rn_prompt_render(t, &v, &OPTS, &b, &err), CR_OK);
    CHECK_TEXT(b.data, "<PRE> def add( <SUF>return x <MID>");
    /* Without a suffix the same template sees messages (legacy mode). */
    cr_buf_reset(&b);
    rn_prompt_msg_t hello = {.role = "user", .content = "hello"};
    v = (rn_prompt_values_t){.msgs = &hello, .n_msgs = 1};
    CHECK_EQ_INT(rn_prompt_render(t, &v, &OPTS, &b, &err), CR_OK);
    CHECK_TEXT(b.data, "hello");
    /* A suffix with an empty prompt is not suffix mode: Ollama runs the
     * legacy path with nothing in it. */
    cr_buf_reset(&b);
    v = (rn_prompt_values_t){.suffix = "only"};
    CHECK_EQ_INT(rn_prompt_render(t, &v, &OPTS, &b, &err), CR_OK);
    CHECK_TEXT(b.data ? b.data : "", "");
    cr_buf_free(&b);
    rn_tmpl_destroy(&t);
}

/* ---- images, truncation ---- */

static void test_images(void)
{
    static const tmsg_t msgs[] = {
        {.role = "user", .content = "first [img] and [img] again [img]", .images = 2},
        {.role = "assistant", .content = "ok"},
        {.role = "user", .content = "second", .images = 1},
    };
    rn_tmpl_t *t = parse(T_CHATML);
    msgs_t m;
    msgs_make(&m, msgs, 3);
    rn_prompt_chat_t in = {.tmpl = t, .msgs = m.m, .n_msgs = m.n, .opts = OPTS};
    rn_prompt_result_t r;
    cr_err_t err;
    /* [img] markers are replaced in turn, further images prefixed. */
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "<|im_start|>user\nfirst [img-0] and [img-1] again [img]<|im_end|>\n"
                       "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\n[img-2]second"
                       "<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(r.n_images, 3);
    CHECK_EQ_INT(r.images_skipped, 0);
    rn_prompt_result_free(&r);
    /* With a projector each image costs 768 tokens: the first message goes,
     * the kept image becomes [img-0] and the dropped ones are counted. */
    in.fit = (rn_prompt_fit_t){.truncate = true, .num_ctx = 1000, .has_projector = true,
                               .count_tokens = count_words};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\n[img-0]second"
                       "<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(r.n_images, 1);
    CHECK_EQ_INT(r.images_skipped, 2);
    CHECK_EQ_INT(r.msgs_dropped, 1);
    rn_prompt_result_free(&r);
    /* Without a projector images cost nothing. */
    in.fit.has_projector = false;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_INT(r.msgs_dropped, 0);
    CHECK_EQ_INT(r.n_images, 3);
    rn_prompt_result_free(&r);
    msgs_free(&m);
    rn_tmpl_destroy(&t);
}

static void test_truncation(void)
{
    static const tmsg_t msgs[] = {
        {.role = "system", .content = "sys"},
        {.role = "user", .content = "a b c"},
        {.role = "assistant", .content = "d e f"},
        {.role = "user", .content = "g h i"},
    };
    static const char words[] = "{{ range .Messages }}{{ .Content }} {{ end }}";
    rn_tmpl_t *t = parse(words);
    msgs_t m;
    msgs_make(&m, msgs, 4);
    rn_prompt_chat_t in = {.tmpl = t, .msgs = m.m, .n_msgs = m.n, .opts = OPTS,
                           .fit = {.truncate = true, .num_ctx = 10, .count_tokens = count_words}};
    rn_prompt_result_t r;
    cr_err_t err;
    /* Fits: one render to count, one to build. */
    count_calls_g = 0;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "sys a b c d e f g h i ");
    CHECK_EQ_INT(r.msgs_dropped, 0);
    CHECK_EQ_INT(count_calls_g, 1);
    rn_prompt_result_free(&r);
    /* 7 tokens: the oldest messages go, the system message stays. */
    in.fit.num_ctx = 7;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "sys d e f g h i ");
    CHECK_EQ_INT(r.msgs_dropped, 2);
    rn_prompt_result_free(&r);
    /* Nothing fits: the last message stays anyway. */
    in.fit.num_ctx = 1;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "sys g h i ");
    CHECK_EQ_INT(r.msgs_dropped, 3);
    rn_prompt_result_free(&r);
    /* truncate:false or no counter keeps everything. */
    in.fit.truncate = false;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "sys a b c d e f g h i ");
    rn_prompt_result_free(&r);
    in.fit.truncate = true;
    in.fit.count_tokens = NULL;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_INT(r.msgs_dropped, 0);
    rn_prompt_result_free(&r);
    /* The counter's errors come back. */
    in.fit.count_tokens = count_words;
    in.fit.count_ctx = (void *)"fail";
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_RUNNER);
    CHECK_EQ_STR(err.msg, "tokenizer went away");
    CHECK(r.text == NULL);
    msgs_free(&m);
    /* A system message in the middle of the dropped part is kept in place
     * before the rest. */
    static const tmsg_t mid[] = {
        {.role = "user", .content = "one two"},
        {.role = "system", .content = "rules"},
        {.role = "user", .content = "three four"},
        {.role = "assistant", .content = "five"},
        {.role = "user", .content = "six"},
    };
    msgs_make(&m, mid, 5);
    in = (rn_prompt_chat_t){.tmpl = t, .msgs = m.m, .n_msgs = m.n, .opts = OPTS,
                            .fit = {.truncate = true, .num_ctx = 3, .count_tokens = count_words}};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "rules five six ");
    CHECK_EQ_INT(r.msgs_dropped, 3);
    rn_prompt_result_free(&r);
    msgs_free(&m);
    rn_tmpl_destroy(&t);
}

/* ---- chat and generate assembly ---- */

static void test_chat_assembly(void)
{
    rn_tmpl_t *t = parse(T_DUMP);
    static const tmsg_t model[] = {{.role = "user", .content = "mu"}, {.role = "assistant", .content = "ma"}};
    static const tmsg_t req[] = {{.role = "user", .content = "u"}};
    static const tmsg_t req_sys[] = {{.role = "system", .content = "RS"}, {.role = "user", .content = "u"}};
    msgs_t mm, rq;
    msgs_make(&mm, model, 2);
    msgs_make(&rq, req, 1);
    rn_prompt_chat_t in = {.tmpl = t, .model_system = "MS", .model_msgs = mm.m, .n_model_msgs = mm.n,
                           .msgs = rq.m, .n_msgs = rq.n, .opts = OPTS};
    rn_prompt_result_t r;
    cr_err_t err;
    /* The model's SYSTEM goes first, then its MESSAGEs, then the request. */
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[system:MS][user:mu][assistant:ma][user:u]|MS");
    rn_prompt_result_free(&r);
    msgs_free(&rq);
    /* A request that starts with a system message replaces the model's. */
    msgs_make(&rq, req_sys, 2);
    in.msgs = rq.m;
    in.n_msgs = rq.n;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[user:mu][assistant:ma][system:RS][user:u]|RS");
    rn_prompt_result_free(&r);
    msgs_free(&rq);
    msgs_free(&mm);
    /* qwen3/deepseek-r1: thinking is stripped from older assistant turns. */
    static const tmsg_t th[] = {
        {.role = "user", .content = "q1"},
        {.role = "assistant", .content = "  <think>hmm\nyes</think>\n\n A1"},
        {.role = "user", .content = "q2"},
        {.role = "assistant", .content = "<think>never closed"},
        {.role = "user", .content = "q3"},
        {.role = "assistant", .content = " <thi"},
        {.role = "user", .content = "q4"},
        {.role = "assistant", .content = "plain <think>x</think>"},
        {.role = "user", .content = "q5"},
        {.role = "assistant", .content = "<think>kept</think>last"},
    };
    msgs_make(&rq, th, CR_ARRAY_LEN(th));
    in = (rn_prompt_chat_t){.tmpl = t, .msgs = rq.m, .n_msgs = rq.n, .strip_old_thinking = true,
                            .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[user:q1][assistant:A1][user:q2][assistant:][user:q3][assistant:][user:q4]"
                       "[assistant:plain <think>x</think>][user:q5][assistant:<think>kept</think>last]|");
    rn_prompt_result_free(&r);
    in.strip_old_thinking = false;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK(strstr(r.text, "[assistant:  <think>hmm\nyes</think>\n\n A1]") != NULL);
    rn_prompt_result_free(&r);
    msgs_free(&rq);
    rn_tmpl_destroy(&t);
}

static void test_generate(void)
{
    static const char tmpl[] =
        "{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}{{ if .Tools }}T{{ end }}|{{ .Tools }}";
    rn_tmpl_t *t = parse(tmpl);
    static const tmsg_t model[] = {{.role = "user", .content = "mu"}, {.role = "assistant", .content = "ma"}};
    msgs_t mm;
    msgs_make(&mm, model, 2);
    rn_prompt_gen_t in = {.tmpl = t, .prompt = "hello", .model_system = "MS", .model_msgs = mm.m,
                          .n_model_msgs = mm.n, .opts = OPTS};
    rn_prompt_result_t r;
    cr_err_t err;
    /* Like chat, with tools an empty (not nil) list. */
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[system:MS][user:mu][assistant:ma][user:hello]|[]");
    rn_prompt_result_free(&r);
    /* The request's system wins; context drops the model's messages and is
     * prepended as text. */
    in.system = "RS";
    in.context_text = "PREVIOUS ";
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "PREVIOUS [system:RS][user:hello]|[]");
    rn_prompt_result_free(&r);
    in.system = NULL;
    in.context_text = NULL;
    /* Images are tagged in the user message. */
    in.n_images = 2;
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[system:MS][user:mu][assistant:ma][user:[img-0][img-1]hello]|[]");
    CHECK_EQ_INT(r.n_images, 2);
    rn_prompt_result_free(&r);
    /* A request template is executed directly: no tags, nil tools, no
     * truncation even when nothing would fit. */
    in.tmpl_from_request = true;
    in.fit = (rn_prompt_fit_t){.truncate = true, .num_ctx = 0, .count_tokens = count_words};
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[system:MS][user:mu][assistant:ma][user:hello]|null");
    CHECK_EQ_INT(r.n_images, 2);
    CHECK_EQ_INT(r.msgs_dropped, 0);
    rn_prompt_result_free(&r);
    in.tmpl_from_request = false;
    /* The chat-like flow truncates history. */
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[system:MS][user:[img-0][img-1]hello]|[]");
    CHECK_EQ_INT(r.msgs_dropped, 3);
    rn_prompt_result_free(&r);
    in.fit = (rn_prompt_fit_t){0};
    in.n_images = 0;
    /* Raw: the prompt as is, and only alone. */
    in.raw = true;
    in.prompt = "RAW {{ .x }}";
    in.n_images = 1;
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "RAW {{ .x }}");
    CHECK_EQ_INT(r.n_images, 1);
    rn_prompt_result_free(&r);
    in.system = "s";
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "raw mode does not support template, system, or context");
    in.system = NULL;
    in.context_text = "";
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_E_INVALID);
    in.context_text = NULL;
    in.tmpl_from_request = true;
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_E_INVALID);
    CHECK(r.text == NULL);
    msgs_free(&mm);
    rn_tmpl_destroy(&t);

    /* Suffix: the FIM form of the model template, context still first. */
    t = parse("{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>"
              "{{- else }}{{ .Prompt }}{{- end }}");
    in = (rn_prompt_gen_t){.tmpl = t, .prompt = "def f(", .suffix = "return 1", .system = "ignored",
                           .context_text = "CTX", .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "CTX<|fim_prefix|>def f(<|fim_suffix|>return 1<|fim_middle|>");
    rn_prompt_result_free(&r);
    rn_tmpl_destroy(&t);

    /* A legacy template through generate. */
    t = parse(T_ALPACA);
    in = (rn_prompt_gen_t){.tmpl = t, .prompt = "hi", .system = "SYS", .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_generate(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "SYS\n\n### Instruction:\nhi\n\n### Response:\n");
    rn_prompt_result_free(&r);
    rn_tmpl_destroy(&t);
}

/* ---- malformed input ---- */

static void check_tools_error_at(int line, const char *tools_text, cr_status_t want, const char *msg)
{
    json_t *tools = json_loads(tools_text, JSON_DECODE_ANY, NULL);
    rn_val_t *v = NULL;
    cr_err_t err;
    cr_status_t st = rn_prompt_tools_value(tools, &v, &err);
    if (st == want && strstr(err.msg, msg) && v == NULL) {
        check_passed_g++;
    } else {
        check_failed_g++;
        fprintf(stderr, "FAIL %s:%d: tools %s: status %d msg \"%s\", want %d \"%s\"\n", __FILE__,
                line, tools_text, st, err.msg, want, msg);
    }
    rn_val_destroy(&v);
    json_decref(tools);
}
#define CHECK_TOOLS_ERROR(text, st, msg) check_tools_error_at(__LINE__, text, st, msg)

static void test_bad_input(void)
{
    CHECK_TOOLS_ERROR("{}", CR_E_INVALID, "tools: expected an array");
    CHECK_TOOLS_ERROR("[1]", CR_E_INVALID, "tools[0]: expected an object");
    CHECK_TOOLS_ERROR("[{\"function\":[]}]", CR_E_INVALID, "tools[0].function: expected an object");
    CHECK_TOOLS_ERROR("[{\"function\":{\"name\":7}}]", CR_E_INVALID,
                      "tools[0].function.name: expected a string");
    CHECK_TOOLS_ERROR("[{},{\"function\":{\"name\":\"x\",\"parameters\":{\"properties\":{\"p\":3}}}}]",
                      CR_E_INVALID, "tools[1].function.parameters.properties.p: expected an object");
    CHECK_TOOLS_ERROR("[{\"function\":{\"parameters\":{\"required\":[1]}}}]", CR_E_INVALID,
                      "tools[0].function.parameters.required[0]: expected a string");
    CHECK_TOOLS_ERROR("[{\"function\":{\"parameters\":{\"properties\":{\"p\":{\"type\":5}}}}}]",
                      CR_E_INVALID, "properties.p.type: expected a string");
    CHECK_TOOLS_ERROR("[{\"function\":{\"parameters\":{\"properties\":{\"p\":{\"anyOf\":{}}}}}}]",
                      CR_E_INVALID, "properties.p.anyOf: expected an array");
    CHECK_TOOLS_ERROR("[{\"function\":{\"parameters\":{\"properties\":{\"p\":{\"enum\":\"x\"}}}}}]",
                      CR_E_INVALID, "properties.p.enum: expected an array");
    CHECK_TOOLS_ERROR("[{\"function\":{\"parameters\":\"x\"}}]", CR_E_INVALID,
                      "tools[0].function.parameters: expected an object");
    /* Nesting bomb in property schemas. */
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    cr_buf_puts(&b, "[{\"function\":{\"parameters\":{\"properties\":{\"p\":");
    for (int i = 0; i < 200; i++)
        cr_buf_puts(&b, "{\"anyOf\":[");
    cr_buf_puts(&b, "{}");
    for (int i = 0; i < 200; i++)
        cr_buf_puts(&b, "]}");
    cr_buf_puts(&b, "}}}}]");
    CHECK_TOOLS_ERROR(b.data, CR_E_TOO_LARGE, "nested too deeply");
    cr_buf_free(&b);
    /* Null and empty tools are fine. */
    rn_val_t *v = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_prompt_tools_value(NULL, &v, &err), CR_OK);
    CHECK(rn_val_kind(v) == RN_VAL_LIST && (rn_val_flags(v) & RN_VAL_F_NIL));
    rn_val_destroy(&v);

    /* Tool calls. */
    rn_tmpl_t *t = parse(T_CHATML);
    struct {
        const char *calls;
        const char *msg;
    } bad_calls[] = {
        {"{}", "messages[0].tool_calls: expected an array"},
        {"[3]", "messages[0].tool_calls[0]: expected an object with a function"},
        {"[{\"function\":5}]", "messages[0].tool_calls[0]: expected an object with a function"},
        {"[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]",
         "messages[0].tool_calls[0].function.arguments: expected an object"},
        {"[{\"function\":{\"name\":1}}]", "messages[0].tool_calls[0].function.name: expected a string"},
        {"[{\"function\":{\"index\":\"1\"}}]", "function.index: expected an integer"},
        {"[{\"id\":1,\"function\":{}}]", "messages[0].tool_calls[0].id: expected a string"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad_calls); i++) {
        json_t *calls = json_loads(bad_calls[i].calls, JSON_DECODE_ANY, NULL);
        rn_prompt_msg_t m = {.role = "assistant", .tool_calls = calls};
        rn_prompt_chat_t in = {.tmpl = t, .msgs = &m, .n_msgs = 1, .opts = OPTS};
        rn_prompt_result_t r;
        CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, bad_calls[i].msg) != NULL, "%s -> %s", bad_calls[i].calls, err.msg);
        CHECK(r.text == NULL);
        json_decref(calls);
    }
    /* Bad tools reach chat as an error too. */
    json_t *tools = json_loads("[{\"function\":{\"name\":7}}]", 0, NULL);
    rn_prompt_msg_t hi = {.role = "user", .content = "hi"};
    rn_prompt_chat_t in = {.tmpl = t, .msgs = &hi, .n_msgs = 1, .tools = tools, .opts = OPTS};
    rn_prompt_result_t r;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "tools[0].function.name") != NULL);
    json_decref(tools);
    /* The output cap. */
    in.tools = NULL;
    in.opts.max_bytes = 10;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "template output exceeds 10 bytes") != NULL);
    rn_tmpl_destroy(&t);
    /* A template that fails at execution reports Go's message. */
    t = parse("{{ range .Messages }}{{ index .Images 5 }}{{ end }}");
    in = (rn_prompt_chat_t){.tmpl = t, .msgs = &hi, .n_msgs = 1, .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "template: :1:24: executing \"\" at <index .Images 5>: error calling index: "
                          "index out of range: 5");
    rn_tmpl_destroy(&t);
    /* No template. */
    in.tmpl = NULL;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_INVALID);
    rn_prompt_gen_t g = {.prompt = "x"};
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_E_INVALID);
    /* Missing roles and contents read as empty strings. */
    t = parse(T_DUMP);
    rn_prompt_msg_t empty = {0};
    in = (rn_prompt_chat_t){.tmpl = t, .msgs = &empty, .n_msgs = 1, .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_TEXT(r.text, "[:]|");
    rn_prompt_result_free(&r);
    rn_prompt_result_free(NULL);
    rn_tmpl_destroy(&t);
}

/* Many messages (issue 20, 2): the fewest to drop is bisected, so the
 * prompt is rendered and counted O(log n) times, not once per dropped
 * message, and the answer is the one-at-a-time loop's. */
static void test_truncation_many(void)
{
    enum { N = 1024 };
    static rn_prompt_msg_t many[N];
    for (size_t i = 0; i < N; i++)
        many[i] = (rn_prompt_msg_t){.role = i % 2 ? "assistant" : "user",
                                    .content = "w"};
    many[0].role = "system";
    many[0].content = "rules";
    rn_tmpl_t *t = parse("{{ range .Messages }}{{ .Content }} {{ end }}");
    rn_prompt_chat_t in = {.tmpl = t, .msgs = many, .n_msgs = N, .opts = OPTS,
                           .fit = {.truncate = true, .num_ctx = 10,
                                   .count_tokens = count_words}};
    rn_prompt_result_t r;
    cr_err_t err;
    count_calls_g = 0;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    /* "rules" plus the last 9 messages. */
    CHECK_TEXT(r.text, "rules w w w w w w w w w ");
    CHECK_EQ_INT(r.msgs_dropped, N - 9);
    CHECK_MSG(count_calls_g <= 12, "%d counts for %d messages", count_calls_g, N);
    rn_prompt_result_free(&r);
    rn_tmpl_destroy(&t);
}

/* count_words through the span-aware counter; counts renderings whose
 * spans do not cover the text exactly. */
static int count_prompt_calls_g, count_prompt_bad_g;
static cr_status_t count_prompt_words(void *ctx, const rn_prompt_result_t *p, int64_t *n,
                                      cr_err_t *err)
{
    count_prompt_calls_g++;
    if (!spans_cover(p))
        count_prompt_bad_g++;
    int saved = count_calls_g;
    cr_status_t st = count_words(ctx, p->text, p->len, n, err);
    count_calls_g = saved;
    return st;
}

/* Which bytes came from the template and the model, which from the
 * request (prompt.h: rn_prompt_span_t). */
static void test_spans(void)
{
    static const char tmpl[] =
        "{{ if .System }}<S>{{ .System }}</S>{{ end }}"
        "{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ .Thinking }}{{ .ToolName }}"
        "{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}|{{ end }}";
    rn_tmpl_t *t = parse(tmpl);
    rn_prompt_result_t r;
    cr_err_t err;
    /* Modelfile SYSTEM and MESSAGEs are trusted; request messages not. */
    static const tmsg_t model[] = {{.role = "user", .content = "mu"},
                                   {.role = "assistant", .content = "ma"}};
    static const tmsg_t req[] = {
        {.role = "user", .content = "hi", .thinking = "th"},
        {.role = "assistant", .content = "", .tool_calls = "[{\"function\":{\"name\":\"f\","
                                                           "\"arguments\":{\"a\":1}}}]"},
        {.role = "tool", .content = "42", .tool_name = "f"}};
    msgs_t mm, rm;
    msgs_make(&mm, model, 2);
    msgs_make(&rm, req, 3);
    rn_prompt_chat_t in = {.tmpl = t, .model_system = "MS", .model_msgs = mm.m, .n_model_msgs = 2,
                           .msgs = rm.m, .n_msgs = 3, .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[<S>MS</S><system>MS|<user>mu|<assistant>ma|<]U[user]T[>]U[hith]T[|<]"
                   "U[assistant]T[>]"
                   "U[f{\"a\":1}]T[|<]U[tool]T[>]U[42f]T[|]");
    rn_prompt_result_free(&r);
    /* A request system message replaces the model's: untrusted. */
    static const tmsg_t sys_req[] = {{.role = "system", .content = "RS"},
                                     {.role = "user", .content = "u"}};
    msgs_t sm;
    msgs_make(&sm, sys_req, 2);
    in = (rn_prompt_chat_t){.tmpl = t, .model_system = "MS", .msgs = sm.m, .n_msgs = 2,
                            .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[<S>]U[RS]T[</S><]U[system]T[>]U[RS]T[|<]U[user]T[>]U[u]T[|]");
    rn_prompt_result_free(&r);
    /* Merged with request content, model data turns untrusted: consecutive
     * user turns (a Modelfile MESSAGE then the request's) merge. */
    in = (rn_prompt_chat_t){.tmpl = t, .model_msgs = mm.m, .n_model_msgs = 1, .msgs = sm.m + 1,
                            .n_msgs = 1, .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[<]U[user]T[>]U[mu\n\nu]T[|]");
    rn_prompt_result_free(&r);
    /* Both systems in .System (the model's, then a request system later):
     * untrusted as a whole. */
    static const tmsg_t late_sys[] = {{.role = "user", .content = "u"},
                                      {.role = "system", .content = "RS"}};
    msgs_t lm;
    msgs_make(&lm, late_sys, 2);
    in = (rn_prompt_chat_t){.tmpl = parse("{{ .System }}{{ range .Messages }}{{ end }}"),
                            .model_system = "MS", .msgs = lm.m,
                            .n_msgs = 2, .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_SPANS(r, "U[MS\n\nRS]");
    rn_prompt_result_free(&r);
    rn_tmpl_destroy((rn_tmpl_t **)&in.tmpl);
    /* Truncation renders more than once: the spans are the final one's. */
    static const tmsg_t many[] = {{.role = "user", .content = "one two three"},
                                  {.role = "assistant", .content = "four five"},
                                  {.role = "user", .content = "six"}};
    msgs_t nm;
    msgs_make(&nm, many, 3);
    in = (rn_prompt_chat_t){.tmpl = t, .msgs = nm.m, .n_msgs = 3, .opts = OPTS,
                            .fit = {.truncate = true, .num_ctx = 1, .count_tokens = count_words}};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK(r.msgs_dropped > 0);
    CHECK(spans_cover(&r));
    CHECK_SPANS(r, "T[<]U[user]T[>]U[six]T[|]");
    rn_prompt_result_free(&r);
    /* The span-aware counter is used instead when given, and sees spans
     * covering each rendering. */
    in.fit = (rn_prompt_fit_t){.truncate = true, .num_ctx = 1, .count_tokens = count_words};
    in.count_prompt = count_prompt_words;
    count_calls_g = 0;
    count_prompt_calls_g = count_prompt_bad_g = 0;
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_INT(count_calls_g, 0);
    CHECK_EQ_INT(count_prompt_calls_g, 2); /* all, then one bisection step */
    CHECK_EQ_INT(count_prompt_bad_g, 0);
    CHECK_EQ_INT(r.msgs_dropped, 2);
    CHECK_SPANS(r, "T[<]U[user]T[>]U[six]T[|]");
    rn_prompt_result_free(&r);
    in.fit.count_tokens = NULL; /* alone it is enough to truncate */
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_INT(r.msgs_dropped, 2);
    rn_prompt_result_free(&r);
    in.fit.count_ctx = (void *)"fail";
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_E_RUNNER);
    CHECK(r.text == NULL && r.spans == NULL);

    /* Legacy templates: System from the Modelfile trusted, Prompt and
     * Response from the request not. */
    rn_tmpl_t *lt = parse("{{ if .System }}[{{ .System }}]{{ end }}Q:{{ .Prompt }} A:{{ .Response }}");
    static const tmsg_t turns[] = {{.role = "user", .content = "q1"},
                                   {.role = "assistant", .content = "a1"},
                                   {.role = "user", .content = "q2"}};
    msgs_t tm;
    msgs_make(&tm, turns, 3);
    in = (rn_prompt_chat_t){.tmpl = lt, .model_system = "MS", .msgs = tm.m, .n_msgs = 3,
                            .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_chat(&in, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[[MS]Q:]U[q1]T[ A:]U[a1]T[Q:]U[q2]T[ A:]");
    rn_prompt_result_free(&r);

    /* Generate: the request system and prompt are untrusted, the model's
     * system trusted; context (prepended) trusted; raw all trusted. */
    rn_prompt_gen_t g = {.tmpl = lt, .prompt = "p", .model_system = "MS", .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[[MS]Q:]U[p]T[ A:]");
    rn_prompt_result_free(&r);
    g.system = "RS";
    g.context_text = "CTX ";
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[CTX []U[RS]T[]Q:]U[p]T[ A:]");
    rn_prompt_result_free(&r);
    g.tmpl_from_request = true; /* executed directly, same marks */
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[CTX []U[RS]T[]Q:]U[p]T[ A:]");
    rn_prompt_result_free(&r);
    g = (rn_prompt_gen_t){.tmpl = parse("<PRE>{{ .Prompt }}<SUF>{{ .Suffix }}<MID>"),
                          .prompt = "a", .suffix = "b", .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[<PRE>]U[a]T[<SUF>]U[b]T[<MID>]");
    rn_prompt_result_free(&r);
    rn_tmpl_destroy((rn_tmpl_t **)&g.tmpl);
    g = (rn_prompt_gen_t){.raw = true, .prompt = "<s>x", .opts = OPTS};
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_SPANS(r, "T[<s>x]");
    rn_prompt_result_free(&r);
    g.prompt = "";
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_OK);
    CHECK_EQ_INT(r.n_spans, 0);
    CHECK(r.spans == NULL && r.len == 0);
    rn_prompt_result_free(&r);
    /* Errors leave nothing behind. */
    g.system = "x";
    CHECK_EQ_INT(rn_prompt_generate(&g, &r, &err), CR_E_INVALID);
    CHECK(r.text == NULL && r.spans == NULL && r.n_spans == 0);

    msgs_free(&mm);
    msgs_free(&rm);
    msgs_free(&sm);
    msgs_free(&lm);
    msgs_free(&nm);
    msgs_free(&tm);
    rn_tmpl_destroy(&lt);
    rn_tmpl_destroy(&t);
}

int main(void)
{
    test_golden();
    test_collation();
    test_message_fields();
    test_tools_value();
    test_think_values();
    test_legacy_cut();
    test_suffix_mode();
    test_images();
    test_truncation();
    test_truncation_many();
    test_chat_assembly();
    test_generate();
    test_bad_input();
    test_spans();
    return check_finish("test_prompt");
}
