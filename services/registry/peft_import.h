/* peft_import.h: a PEFT LoRA adapter folder (adapter_config.json +
 * adapter_model.safetensors, as Hugging Face's peft library saves one)
 * converted to llama.cpp's GGUF LoRA form (lib/lora.h), for `create` with
 * `ADAPTER ./dir`.
 *
 * adapter_config.json gives r and lora_alpha (written as
 * adapter.lora.alpha, so the runner's scale is lora_alpha / r as PEFT's);
 * peft_type must be LORA, and what the runner does not apply is refused,
 * named: use_dora, use_rslora, fan_in_fan_out, rank_pattern / alpha_pattern,
 * a bias other than "none", modules_to_save. Tensors
 * `base_model.model.model.layers.N.{self_attn.{q,k,v,o}_proj,
 * mlp.{gate,up,down}_proj}.lora_{A,B}.weight` become
 * `blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.lora_{a,b}`
 * with their dtype (F32, F16, BF16) and bytes kept (torch's [r][in] and
 * [out][r] are GGUF's ne {in, r} and {r, out}); for llama the rows of q's
 * and k's lora_B are permuted to GGUF's rope layout as the base's q/k rows
 * were. Any other tensor is refused, named. The architecture and head
 * counts come from the base GGUF; whether the result fits the base is
 * lib/lora.h's check, the caller's.
 *
 * The output is written atomically: on failure nothing is at out_path.
 * Knows nothing of the store. */
#ifndef REG_PEFT_IMPORT_H
#define REG_PEFT_IMPORT_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/registry/hf_import.h"

/* Whether a create's adapter file name belongs to a PEFT folder. */
bool reg_peft_is_folder_file(const char *name);

/* Converts files[0..n-1] (the folder's adapter_config.json and
 * adapter_model.safetensors; other files are ignored) for base (borrowed)
 * to a GGUF LoRA at out_path. step (may be NULL) is asked with step_ctx
 * before each tensor is read (hf_import.h). CR_E_INVALID (missing or bad
 * config, an unsupported option, an unknown tensor, a missing partner,
 * naming file and key or tensor), CR_E_CORRUPT / CR_E_TRUNCATED /
 * CR_E_UNSUPPORTED (the safetensors file; lib/safetensors.h), CR_E_IO,
 * CR_E_NOMEM, or step's status. */
cr_status_t reg_peft_import(const reg_hf_file_t *files, size_t n, const cr_gguf_t *base,
                            const char *out_path, reg_hf_step_fn step, void *step_ctx,
                            cr_err_t *err);

#endif
