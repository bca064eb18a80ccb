/* tools.h: the runner binary's command-line tools over a GGUF file, for
 * people who debug models (no services needed). Each returns an exit code
 * and prints errors to stderr. */
#ifndef RN_TOOLS_H
#define RN_TOOLS_H

#include "lib/prelude.h"

/* Reads UTF-8 text from stdin, prints token ids space-separated on one line.
 * add_special: BOS/EOS as the vocabulary says (off: none at all);
 * parse_special: special-token texts become their ids. Works on
 * vocabulary-only files. */
int rn_tool_tokenize(const char *model_path, bool add_special,
                     bool parse_special);

/* Evaluates the ids in `tokens` ("1 2 3") and writes float32 logits of every
 * position, row after row, to out_path. kv_cache_type: NULL or "f16",
 * "q8_0", "q4_0" (the KV cache's type, as OLLAMA_KV_CACHE_TYPE). */
int rn_tool_logits(const char *model_path, const char *tokens,
                   const char *out_path, const char *kv_cache_type);

/* `corral-runner image-embed --model TEXT.gguf --mmproj PROJ.gguf --image
 * FILE --out FILE.f32 [--pixels FILE.f32] [--threads N] [--prompt TEXT
 * --logits FILE.f32]`: decodes the
 * image, preprocesses it as the projector says and runs the vision tower
 * and projector; writes the embeddings exactly as the text model receives
 * them (one float32 row of the text model's dim per image token, row after
 * row) and, with --pixels, the normalized pixel tensor [3][S][S]. Checks the
 * projector's output width against the text model's embedding length.
 * With a prompt (its text trusted: special tokens parsed; BOS as the
 * vocabulary says; the image where it says [img-0]) and logits_path, also
 * evaluates it with the embeddings at the image's positions and writes the
 * last position's float32 logits. Prints "TOKENS x DIM" to stdout. Returns
 * 0, 1 on failure. */
int rn_tool_image_embed(const char *model_path, const char *mmproj_path,
                        const char *image_path, const char *out_path,
                        const char *pixels_path, int n_threads, const char *prompt,
                        const char *logits_path);

/* `corral-runner quantize --in SRC.gguf --out DST.gguf --type Q4_K_M
 * [--progress]`: argv as main() got it (argv[1] == "quantize"). With
 * --progress prints "DONE/TOTAL" (source bytes) lines to stdout, flushed.
 * Errors go to stderr as one line. Returns 0, 1 on failure, 2 on usage. */
int rn_tool_quantize(int argc, char **argv);

/* `corral-runner check-template --model FILE`: parses the GGUF's
 * tokenizer.chat_template with the Jinja renderer (what a load without a
 * Go template will do) and renders it over a one-message chat, failing
 * on a filter or test the renderer does not have. Prints "ok" (or "none" without one) to stdout;
 * a template it cannot run gives its error (naming the construct and
 * line) as one stderr line. Returns 0, or 1 on failure. The registry runs
 * it at create. */
int rn_tool_check_template(const char *model_path);

/* `check-template --go-template FILE`: parses FILE (a Modelfile TEMPLATE,
 * at most 4 MiB) as the runner's Go template engine will; prints "ok"
 * (exit 0) or the parse error on stderr (exit 1). */
int rn_tool_check_go_template(const char *path);

/* `check-model --model FILE`: "ok" (exit 0) when the GGUF's architecture
 * is one the engine runs, else "unsupported architecture 'x'" on stderr
 * (exit 1). */
int rn_tool_check_model(const char *model_path);

#endif
