/* create.h: /api/create in its JSON form (§1.7 of the API reference).
 *
 * Builds a model from an existing one (`from`: layers inherited, parameters
 * merged over the inherited ones, messages replaced) or from uploaded GGUF
 * blobs (`files`), adds template/system/license/params/messages layers as
 * content-addressed blobs, writes the config blob from the GGUF metadata,
 * and writes the manifest last, so a model appears only when all its blobs
 * are in place. Progress goes through a callback with Ollama's statuses:
 * "parsing GGUF", "quantizing F16 model to Q4_K_M" (with digest, total and
 * completed), "verifying conversion", "using existing layer sha256:…",
 * "creating new layer sha256:…", "writing manifest", "success".
 *
 * `quantize` runs `corral-runner quantize` as a child process (quantize.h)
 * on the model layer's GGUF, writing into a hidden temp file in blobs/;
 * the result is checked (it opens as GGUF with the requested
 * general.file_type), stored as a blob, and replaces the model layer. */
#ifndef REG_CREATE_H
#define REG_CREATE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/store.h"

#include <stdatomic.h>

/* Called for each progress status, in order. status is borrowed for the
 * call. */
typedef void (*reg_progress_fn)(void *ctx, const char *status);

/* Same, with the whole progress message (digest/total/completed are set
 * while quantizing). p and its strings are borrowed for the call. */
typedef void (*reg_create_progress_fn)(void *ctx, const msg_progress_body_t *p);

/* Runs a create. Errors carry Ollama's messages: CR_E_INVALID for
 * `invalid model name`, `neither 'from' or 'files' was specified`,
 * `file path must be relative: <name>`, `invalid digest format`,
 * `supplied file was not in GGUF format`, `invalid GGUF file: …`, option
 * type errors (`option "temperature" must be of type float32`),
 * `quantization is only supported for F16, BF16 and F32 models`,
 * `unsupported quantization type <name>`;
 * CR_E_NOT_FOUND for `model "<from>" not found` or a blob not uploaded (or
 * no corral-runner to quantize with); CR_E_UNSUPPORTED for safetensors
 * input; CR_E_RUNNER when the quantize tool fails; CR_E_IO. */
cr_status_t reg_create(reg_store_t *s, const msg_create_body_t *req,
                       reg_progress_fn fn, void *ctx, cr_err_t *err);

/* True when req's `from` names a model (a valid name) the store lacks: the
 * server pulls it first (in a job thread, as Ollama's create does), then
 * creates. */
bool reg_create_needs_pull(const reg_store_t *s, const msg_create_body_t *req);

/* True when req may take long: it quantizes, pulls its `from`, or converts
 * a safetensors folder (files) or a PEFT adapter folder (adapters), reading
 * and writing model-sized data. The server runs such a create as a job
 * (jobs.h), cancelable; any other create (a Modelfile over a stored model,
 * uploaded GGUF files: headers only) is answered inline. */
bool reg_create_runs_long(const reg_store_t *s, const msg_create_body_t *req);

/* reg_create with whole progress messages: what the server should call so
 * that quantizing progress reaches the client with its counts. cancel (may
 * be NULL) is the client's flag: once set, a running quantization is
 * killed, a conversion stops before its next tensor, and the create stops
 * before its next long step (each 1 MiB it stores, the manifest), removes
 * what it wrote (temp files, new blobs), writes no manifest and fails with
 * CR_E_CANCELED `canceled`. Creates may run at once (store.h): each pins
 * the blobs it will name, and the manifest it replaces is the one stored
 * when it writes its own, whose blobs no other manifest names are pruned
 * (unless NOPRUNE). */
cr_status_t reg_create_ex(reg_store_t *s, const msg_create_body_t *req,
                          const atomic_bool *cancel,
                          reg_create_progress_fn fn, void *ctx,
                          cr_err_t *err);

#endif
