/*
 * lora_merge.h - `agentflow model merge`: a GGUF model with a LoRA adapter folded into its
 * weights (W += scale · B·A), loadable by llama.cpp and by us without the adapter.
 *
 * Every key-value is copied as it is and every tensor byte for byte, except the adapted 2-D
 * weights (blk.N.attn_q / attn_k / attn_v / attn_output / ffn_gate / ffn_up / ffn_down), which
 * are dequantised, merged in F32 and written in their own type (or the one asked for, falling
 * back as `model quantize` does when the rows do not fit its blocks). The output is written
 * atomically. Merged tensors are held in memory until the file is written.
 *
 * Thread-safety: the functions share nothing; the model and adapter are only read.
 */
#ifndef AF_ENGINE_LORA_MERGE_H
#define AF_ENGINE_LORA_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/lora.h"
#include "engine/model.h"

#define LORA_MERGE_OWN_TYPE UINT32_MAX /* merged tensors keep the base tensor's type */

struct lora_merge_stats {
    size_t n_merged; /* tensors that got a delta */
    size_t n_copied; /* tensors copied byte for byte */
};

/* The type id for --type ("F32", "q8_0", ...: a type quant_quantize_row writes); -1 when the
 * name is not one. */
int lora_merge_parse_type(const char *name);

/* Writes out_path: m's GGUF file (m must come from a GGUF; borrowed) with l (borrowed; shaped
 * for m, checked here: AF_EINVAL names the tensor) merged in. type: LORA_MERGE_OWN_TYPE or a
 * ggml type for the merged tensors. stats may be NULL. Errors: AF_EINVAL (not a GGUF model,
 * shape mismatch, bad type), AF_EIO from the write (naming out_path). */
AF_NODISCARD int lora_merge_model(const struct model *m, const struct lora_adapter *l,
                                  const char *out_path, uint32_t type,
                                  struct lora_merge_stats *stats, char *err, size_t errlen);

/* The whole command: loads base_path (model_load) and the PEFT folder adapter_dir
 * (lora_load_peft), then lora_merge_model. type_name may be NULL (each tensor's own type).
 * Errors name the base file, the adapter folder (messages from the adapter are prefixed
 * with it) or the output; AF_EINVAL for a bad type_name. */
AF_NODISCARD int lora_merge_files(const char *base_path, const char *adapter_dir,
                                  const char *out_path, const char *type_name,
                                  struct lora_merge_stats *stats, char *err, size_t errlen);

#endif
