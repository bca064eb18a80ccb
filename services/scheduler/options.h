/* options.h: merging request options over model defaults, and deciding
 * whether two option sets need different runner processes.
 *
 * Precedence (as Ollama): built-in defaults < the model's params layer <
 * the request's options. Built-in defaults are applied by the runner, so
 * the merge here only layers what was given. */
#ifndef SCH_OPTIONS_H
#define SCH_OPTIONS_H

#include "lib/prelude.h"
#include "proto/msg.h"

/* Copies every field set in src over dst (dst's has_ flags updated). String
 * arrays are borrowed from src: src must outlive dst's use. */
void sch_options_overlay(msg_options_t *dst, const msg_options_t *src);

/* Copies only the load options (below) of src over dst. */
void sch_options_overlay_load(msg_options_t *dst, const msg_options_t *src);

/* Load options are those fixed when a runner starts (LOAD in
 * lib/options.def: num_ctx, num_batch, num_gpu unless -1, main_gpu,
 * num_thread, use_mmap, draft_num_predict). True if a runner
 * started with `loaded` can serve a request wanting `want`. A field unset in
 * `want` matches anything. */
bool sch_options_load_compatible(const msg_options_t *loaded,
                                 const msg_options_t *want);

/* The default context length: OLLAMA_CONTEXT_LENGTH, else by the total
 * VRAM of the GPUs models run on, as Ollama: 4096 below 23 GiB (and on
 * the CPU), 32768 from 23 GiB, 262144 from 47 GiB. The runner caps it at
 * the model's trained context. */
int64_t sch_options_default_ctx(int64_t vram_total_bytes);

#endif
