/* quantize.h: the registry's side of `create --quantize`.
 *
 * The registry never links the engine: it runs `corral-runner quantize
 * --in SRC --out DST --type T --progress` as a child process (the runner
 * binary beside the registry's own executable, or CORRAL_RUNNER_BIN), reads
 * its "DONE/TOTAL" progress lines from the child's stdout and its error
 * line from stderr, and waits for it. The child gets SIGKILL when the
 * registry dies (PR_SET_PDEATHSIG), so a registry killed mid-quantize
 * leaves no orphan at work; a canceled run (its client left) kills the
 * child and removes its partial output. What the output means (file types,
 * verification, storing it as a blob) is create.c's business. */
#ifndef REG_QUANTIZE_H
#define REG_QUANTIZE_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <stdatomic.h>

/* The canonical name ("Q4_K_M") of a quantization type given in any case
 * ("q4_K_M"), and its GGUF general.file_type in *ftype (may be NULL); NULL
 * if corral cannot quantize to it. Accepted: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K
 * Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K. Static string. */
const char *reg_quantize_type(const char *name, uint32_t *ftype);

/* The corral-runner executable into out: CORRAL_RUNNER_BIN if set (it must
 * be executable), else corral-runner beside /proc/self/exe. CR_E_NOT_FOUND
 * if there is none, CR_E_TOO_LARGE if the path does not fit. */
cr_status_t reg_quantize_runner_bin(char *out, size_t cap, cr_err_t *err);

/* How often a run reads its cancel flag (a client that left is noticed
 * within this). */
#define REG_QUANTIZE_POLL_MS 100

/* Progress of a run: done of total source bytes. */
typedef void (*reg_quantize_progress_fn)(void *ctx, int64_t done,
                                         int64_t total);

/* Runs the runner's quantize tool from src_path to out_path (which the tool
 * writes atomically, through `<out_path>.tmp-XXXXXX`) with type (a
 * canonical name). fn (may be NULL) gets each progress line. cancel (may
 * be NULL) is read about every REG_QUANTIZE_POLL_MS: once set, the tool is
 * killed. Whenever the run does not succeed, the tool's temp files beside
 * out_path are removed. CR_E_NOT_FOUND without a runner; CR_E_IO if it
 * cannot be started; CR_E_CANCELED `canceled`; CR_E_RUNNER with the tool's
 * error line if it fails or dies. */
cr_status_t reg_quantize_run(const char *src_path, const char *out_path,
                             const char *type, const atomic_bool *cancel,
                             reg_quantize_progress_fn fn, void *ctx,
                             cr_err_t *err);

#endif
