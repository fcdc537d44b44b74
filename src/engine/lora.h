/*
 * lora.h - LoRA adapters over a loaded model: per layer and target linear, y += scale · B·(A·x)
 * with A [rank][n_in], B [n_out][rank] and scale = alpha / rank. Shared by inference (the
 * forward adds the delta; `gguf:PATH+lora:DIR`), training (src/train/ owns the gradients) and
 * `model merge`.
 *
 * The matrices are F32 and row-major, in one allocation, in the engine's orientation: row r of
 * B is output r of the GGUF weight. For llama-arch GGUF files, whose q/k rows llama.cpp
 * permuted at conversion, the PEFT files hold B in the Hugging Face row order; lora_io.c
 * converts on save and load, so PEFT-trained adapters and ours are interchangeable.
 *
 * Thread-safety: an adapter is plain data; readers may share it, a writer must be alone.
 */
#ifndef AF_ENGINE_LORA_H
#define AF_ENGINE_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/model.h"

enum lora_target { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N_TARGETS };
#define LORA_ALL_TARGETS ((1u << LORA_N_TARGETS) - 1u)

/* "q" / "q_proj", ..., "down" / "down_proj"; -1 when unknown. */
int lora_target_from_name(const char *name);
/* The PEFT module name: "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
 * "down_proj". */
const char *lora_target_peft_name(enum lora_target t);
/* Parses "q,k,v,o" (short or PEFT names, or "all") into a bit mask (bit t = 1u << t).
 * AF_EINVAL names the unknown entry. */
AF_NODISCARD int lora_targets_parse(const char *list, unsigned *mask, char *err, size_t errlen);

struct lora_pair {
    float *a, *b; /* [rank][n_in], [n_out][rank]; NULL when the target is not adapted */
    int64_t n_in, n_out;
};

struct lora_adapter {
    int64_t n_layer;
    int rank;
    float alpha, dropout;
    float scale; /* alpha / rank */
    unsigned targets;
    struct lora_pair *pairs; /* [n_layer * LORA_N_TARGETS] */
    float *data;             /* every A and B, one allocation (owned) */
    size_t n_floats;
};

/* The input and output widths of target t of model m's layers. */
void lora_target_dims(const struct model_hparams *hp, enum lora_target t, int64_t *n_in,
                      int64_t *n_out);

/* An adapter for m's shape with every matrix zero. rank >= 1, targets != 0. *out is owned
 * (lora_free). AF_EINVAL names the bad parameter. */
AF_NODISCARD int lora_new(const struct model_hparams *hp, int rank, float alpha, float dropout,
                          unsigned targets, struct lora_adapter **out, char *err, size_t errlen);
void lora_free(struct lora_adapter *l);
/* A new adapter of the same shape, all zero (gradients, optimiser moments). Owned. */
struct lora_adapter *lora_new_like(const struct lora_adapter *l);
/* PEFT's initialisation: A uniform in ±1/sqrt(n_in) (kaiming_uniform with a = sqrt(5)) from a
 * fixed-seed generator, B zero, so a fresh adapter leaves the model unchanged. */
void lora_init(struct lora_adapter *l, uint64_t seed);
/* The pair of (layer, target), or NULL when not adapted. */
static inline const struct lora_pair *lora_pair_at(const struct lora_adapter *l, int64_t layer,
                                                   enum lora_target t)
{
    const struct lora_pair *p = &l->pairs[layer * LORA_N_TARGETS + t];
    return p->a ? p : NULL;
}

/* ---- lora_apply.c ------------------------------------------------------------------------
 * y [nb][n_out] += scale · (x [nb][n_in] · Aᵀ) · Bᵀ for the pair; tmp holds nb · rank floats. */
void lora_apply(const struct lora_adapter *l, const struct lora_pair *p, const float *x, int64_t nb,
                float *y, float *tmp);

/* d [n_in] = scale · (B·A) row o: the change merging makes to output row o of the weight. */
void lora_delta_row(const struct lora_adapter *l, const struct lora_pair *p, int64_t o, float *d);
/* Merges (sign +1) or unmerges (sign -1) the pair into an F32 weight W [n_out][n_in]:
 * W += sign · scale · B·A, row by row with lora_delta_row, so a merge in memory equals
 * `model merge`'s in F32. An unmerge after a merge restores W up to float rounding. */
void lora_merge_f32(const struct lora_adapter *l, const struct lora_pair *p, float *w, float sign);

/* ---- lora_io.c ---------------------------------------------------------------------------
 * A PEFT adapter folder: adapter_model.safetensors (F32 tensors named
 * base_model.model.model.layers.N.{self_attn,mlp}.MODULE.lora_{A,B}.weight) and
 * adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout, target_modules, ...).
 * Saving writes both files atomically (temporary file, fsync, rename). base_name is written as
 * base_model_name_or_path (may be NULL). */
AF_NODISCARD int lora_save_peft(const struct lora_adapter *l, const struct model *m,
                                const char *dir, const char *base_name, char *err, size_t errlen);
/* Loads a PEFT folder for model m: checks every tensor's name, type (F32, F16 or BF16) and
 * shape against m; errors name the file and the tensor or key at fault. *out is owned. */
AF_NODISCARD int lora_load_peft(const char *dir, const struct model *m, struct lora_adapter **out,
                                char *err, size_t errlen);

#endif
