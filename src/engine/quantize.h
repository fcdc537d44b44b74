/*
 * quantize.h - per-tensor type choice and GGUF re-encoding, shared by `model quantize` and
 * `model make-random`.
 */
#ifndef AF_ENGINE_QUANTIZE_H
#define AF_ENGINE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct quantize_plan {
    uint32_t base;    /* the type most 2-D weights get */
    int mix;          /* the "_M" mixes: more bits for some attn_v / ffn_down */
    uint32_t ftype;   /* general.file_type */
    const char *name; /* general.name to write (borrowed); NULL keeps the input's */
};

/* Parses "Q4_K_M", "q8_0", "F16"...; returns 0, or -1 when unknown. */
int quantize_parse_ftype(const char *name, struct quantize_plan *plan);
/* The type of a 2-D weight named `name` with rows of n_in elements. */
uint32_t quantize_pick_type(const struct quantize_plan *plan, const char *name, int64_t n_in,
                            int64_t n_layer, int has_output);
/* Rewrites in_path to out_path (atomically) under the plan. */
AF_NODISCARD int quantize_model(const char *in_path, const char *out_path,
                                const struct quantize_plan *plan, char *err, size_t errlen);

#endif
