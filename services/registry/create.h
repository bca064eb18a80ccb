/* create.h: /api/create in its JSON form (§1.7 of the API reference).
 *
 * Builds a model from an existing one (`from`: layers inherited, parameters
 * merged over the inherited ones, messages replaced) or from uploaded GGUF
 * blobs (`files`), adds template/system/license/params/messages layers as
 * content-addressed blobs, writes the config blob from the GGUF metadata,
 * and writes the manifest last, so a model appears only when all its blobs
 * are in place. Progress goes through a callback with Ollama's statuses:
 * "parsing GGUF", "using existing layer sha256:…", "creating new layer
 * sha256:…", "writing manifest", "success". */
#ifndef REG_CREATE_H
#define REG_CREATE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/store.h"

/* Called for each progress status, in order. status is borrowed for the
 * call. */
typedef void (*reg_progress_fn)(void *ctx, const char *status);

/* Runs a create. Errors carry Ollama's messages: CR_E_INVALID for
 * `invalid model name`, `neither 'from' or 'files' was specified`,
 * `file path must be relative: <name>`, `invalid digest format`,
 * `supplied file was not in GGUF format`, `invalid GGUF file: …`, option
 * type errors (`option "temperature" must be of type float32`),
 * `quantization is only supported for F16, BF16 and F32 models`;
 * CR_E_NOT_FOUND for `model "<from>" not found` or a blob not uploaded;
 * CR_E_UNSUPPORTED for safetensors input and quantizing; CR_E_IO. */
cr_status_t reg_create(reg_store_t *s, const msg_create_body_t *req,
                       reg_progress_fn fn, void *ctx, cr_err_t *err);

#endif
