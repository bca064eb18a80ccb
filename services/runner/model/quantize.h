/* quantize.h: requantizes an F32/F16/BF16 GGUF model into a quantized one,
 * with llama.cpp's per-tensor type mixes (what `ollama create --quantize`
 * and `llama-quantize` produce).
 *
 * Every 2-D weight matrix (name ending in "weight") is converted row by row
 * through the CPU backend's quantizers (backend/cpu/quant.h from_float) to
 * the type its file type's mix gives it; 1-D tensors (norms, biases, rope
 * factors) are stored as F32; tensors already quantized are copied as they
 * are. All metadata is copied, general.file_type and
 * general.quantization_version are set, and the file is written atomically
 * (lib/gguf_write.h). Rows whose length is not a whole number of the chosen
 * type's blocks fall back as llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1,
 * Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0; then F16). Rows are converted on a
 * thread pool of all cores, 16 MiB of output at a time, written in order.
 *
 * The registry runs this through `corral-runner quantize` as a child
 * process so that it never links the engine. */
#ifndef RN_QUANTIZE_H
#define RN_QUANTIZE_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "lib/tensor_type.h"

/* GGUF general.file_type values (llama.cpp's llama_ftype). */
#define RN_FTYPE_F32 0u
#define RN_FTYPE_F16 1u
#define RN_FTYPE_Q4_0 2u
#define RN_FTYPE_Q4_1 3u
#define RN_FTYPE_Q8_0 7u
#define RN_FTYPE_Q5_0 8u
#define RN_FTYPE_Q5_1 9u
#define RN_FTYPE_Q2_K 10u
#define RN_FTYPE_Q3_K_S 11u
#define RN_FTYPE_Q3_K_M 12u
#define RN_FTYPE_Q3_K_L 13u
#define RN_FTYPE_Q4_K_S 14u
#define RN_FTYPE_Q4_K_M 15u
#define RN_FTYPE_Q5_K_S 16u
#define RN_FTYPE_Q5_K_M 17u
#define RN_FTYPE_Q6_K 18u
#define RN_FTYPE_BF16 32u

/* Parses a quantization name, case-insensitively ("q4_K_M", "Q8_0"), into
 * a file type. Accepted: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L
 * Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K. False for anything else. */
bool rn_quant_ftype_parse(const char *name, uint32_t *ftype);

/* Canonical name of a file type accepted above ("Q4_K_M"), or NULL. */
const char *rn_quant_ftype_name(uint32_t ftype);

/* Where a tensor stands in its file, for the mix rules. */
typedef struct rn_quant_pos {
    int i_attn_v, n_attn_v;     /* index among / count of the attn_v (or
                                   attn_qkv) tensors, in file order */
    int i_ffn_down, n_ffn_down; /* idem for ffn_down */
    int n_gqa;                  /* head_count / head_count_kv (1 if unknown) */
    bool has_output;            /* the file has output.weight (if not,
                                   token_embd is treated as the output) */
} rn_quant_pos_t;

/* The type tensor `name` (n_dims dims, row length ne0, stored as src) gets
 * in a file of this file type, by llama.cpp's rules (llama_tensor_get_type:
 * Q6_K output; attn_v/ffn_down of the layers use_more_bits picks in Q6_K
 * for _M files; ...). Returns src for tensors that are not requantized
 * (not 2-D weights, or already quantized), and F32 for 1-D F16/BF16. */
cr_type_t rn_quant_tensor_type(uint32_t ftype, const char *name,
                               uint32_t n_dims, uint64_t ne0, cr_type_t src,
                               const rn_quant_pos_t *pos);

/* True if g is a model that may be quantized: general.file_type F32, F16
 * or BF16 (or, without that key, every 2-D weight F32/F16/BF16). */
bool rn_quant_source_ok(const cr_gguf_t *g);

/* Progress: done of total source tensor bytes processed so far. */
typedef void (*rn_quant_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/* Quantizes the model at in_path to out_path (written atomically) with
 * file type ftype. fn (may be NULL) is called after each tensor.
 * CR_E_INVALID `quantization is only supported for F16, BF16 and F32
 * models` or for an ftype not accepted above; CR_E_IO / CR_E_CORRUPT from
 * the files; CR_E_NOMEM. */
cr_status_t rn_quantize_file(const char *in_path, const char *out_path,
                             uint32_t ftype, rn_quant_progress_fn fn,
                             void *ctx, cr_err_t *err);

#endif
