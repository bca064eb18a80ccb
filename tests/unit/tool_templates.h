/* tool_templates.h: Ollama's llama3.1, qwen2.5 (hermes <tool_call>) and
 * mistral ([TOOL_CALLS]) chat templates, tool parts as shipped, long
 * instruction texts shortened. Shared by test_toolcalls.c (tag inference)
 * and test_engine_script.c (calls on real token streams). */
#ifndef CR_TEST_TOOL_TEMPLATES_H
#define CR_TEST_TOOL_TEMPLATES_H

/* Ollama's llama3.1, qwen2.5 and mistral templates (tool parts as shipped;
 * long instruction texts shortened). */
static const char llama31_tmpl[] =
"{{- if or .System .Tools }}<|start_header_id|>system<|end_header_id|>\n"
"{{- if .System }}\n\n{{ .System }}\n{{- end }}\n"
"{{- if .Tools }}\n\nYou are a helpful assistant with tool calling capabilities.\n{{- end }}<|eot_id|>\n"
"{{- end }}\n"
"{{- range $i, $_ := .Messages }}\n"
"{{- $last := eq (len (slice $.Messages $i)) 1 }}\n"
"{{- if eq .Role \"user\" }}<|start_header_id|>user<|end_header_id|>\n"
"{{- if and $.Tools $last }}\n\nGiven the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n"
"Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}. Do not use variables.\n\n"
"{{ range $.Tools }}\n{{- . }}\n{{ end }}\nQuestion: {{ .Content }}<|eot_id|>\n"
"{{- else }}\n\n{{ .Content }}<|eot_id|>\n{{- end }}{{ if $last }}<|start_header_id|>assistant<|end_header_id|>\n\n{{ end }}\n"
"{{- else if eq .Role \"assistant\" }}<|start_header_id|>assistant<|end_header_id|>\n"
"{{- if .ToolCalls }}\n{{ range .ToolCalls }}\n{\"name\": \"{{ .Function.Name }}\", \"parameters\": {{ .Function.Arguments }}}{{ end }}\n"
"{{- else }}\n\n{{ .Content }}\n{{- end }}{{ if not $last }}<|eot_id|>{{ end }}\n"
"{{- else if eq .Role \"tool\" }}<|start_header_id|>ipython<|end_header_id|>\n\n{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>\n\n{{ end }}\n"
"{{- end }}\n{{- end }}";

static const char qwen25_tmpl[] =
"{{- if .Messages }}\n"
"{{- if or .System .Tools }}<|im_start|>system\n"
"{{- if .System }}\n{{ .System }}\n{{- end }}\n"
"{{- if .Tools }}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
"{{- range .Tools }}\n{\"type\": \"function\", \"function\": {{ .Function }}}\n{{- end }}\n</tools>\n\n"
"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>\n"
"{{- end }}<|im_end|>\n{{ end }}\n"
"{{- range $i, $_ := .Messages }}\n"
"{{- $last := eq (len (slice $.Messages $i)) 1 -}}\n"
"{{- if eq .Role \"user\" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n"
"{{ else if eq .Role \"assistant\" }}<|im_start|>assistant\n"
"{{ if .Content }}{{ .Content }}\n"
"{{- else if .ToolCalls }}<tool_call>\n"
"{{ range .ToolCalls }}{\"name\": \"{{ .Function.Name }}\", \"arguments\": {{ .Function.Arguments }}}\n"
"{{ end }}</tool_call>\n"
"{{- end }}{{ if not $last }}<|im_end|>\n{{ end }}\n"
"{{- else if eq .Role \"tool\" }}<|im_start|>user\n<tool_response>\n{{ .Content }}\n</tool_response><|im_end|>\n{{ end }}\n"
"{{- if and (ne .Role \"assistant\") $last }}<|im_start|>assistant\n{{ end }}\n"
"{{- end }}\n"
"{{- else }}\n"
"{{- if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}"
"{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}";

static const char mistral_tmpl[] =
"{{- range $index, $_ := .Messages }}\n"
"{{- if eq .Role \"user\" }}\n"
"{{- if and (eq (len (slice $.Messages $index)) 1) $.Tools }}[AVAILABLE_TOOLS] {{ json $.Tools }}[/AVAILABLE_TOOLS]\n"
"{{- end }}[INST] {{ if and $.System (eq (len (slice $.Messages $index)) 1) }}{{ $.System }}\n\n"
"{{ end }}{{ .Content }}[/INST]\n"
"{{- else if eq .Role \"assistant\" }}\n"
"{{- if .Content }} {{ .Content }}\n"
"{{- else if .ToolCalls }}[TOOL_CALLS] [\n"
"{{- range .ToolCalls }}{\"name\": \"{{ .Function.Name }}\", \"arguments\": {{ json .Function.Arguments }}}\n"
"{{- end }}]\n"
"{{- end }}</s>\n"
"{{- else if eq .Role \"tool\" }}[TOOL_RESULTS] {\"content\": {{ .Content }}} [/TOOL_RESULTS]\n"
"{{- end }}\n"
"{{- end }}";

#endif
