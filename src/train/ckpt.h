/*
 * ckpt.h - training checkpoints (src/train/): everything a run needs to continue bit for bit.
 *
 * A checkpoint is a folder OUT/checkpoint-STEP holding
 *   adapter_model.safetensors + adapter_config.json   (LoRA; PEFT format, engine/lora.h)
 *   model.safetensors                                  (full training: every weight, F32)
 *   optimizer.safetensors                              (AdamW exp_avg.NAME, exp_avg_sq.NAME)
 *   trainer_state.json                                 (step, data position, RNG, settings)
 * It is written as OUT/.checkpoint-STEP.tmp-PID and renamed into place when complete, so a
 * folder named checkpoint-STEP is always whole: a kill -9 in mid-save leaves the previous one
 * as the latest. Older checkpoints beyond `keep` are removed after the new one is in place.
 */
#ifndef AF_TRAIN_CKPT_H
#define AF_TRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/optim.h"
#include "train/rng.h"

/* The loop position and the settings a resume must agree with. */
struct ckpt_state {
    int64_t step;               /* optimiser steps done */
    int64_t epoch, pos;         /* data order: epoch and index into its permutation */
    struct train_rng epoch_rng; /* the generator as it was before this epoch's shuffle */
    char *settings_json;        /* a JSON object of the run's settings (owned) */
};

/* Writes checkpoint `st->step` into out_dir (created if missing). lora (LoRA mode) or the
 * params (full mode: lora NULL) give the weights; opt gives the moments of params[0..np).
 * base_name goes into adapter_config.json. Keeps the `keep` newest checkpoints (>= 1). */
AF_NODISCARD int ckpt_save(const char *out_dir, const struct ckpt_state *st,
                           const struct lora_adapter *lora, const struct model *m,
                           const struct train_param *params, size_t np,
                           const struct train_adamw_state *opt, int keep, char *err, size_t errlen);

/* The step of the newest complete checkpoint in out_dir, 0 when there is none (or no dir). */
int64_t ckpt_latest(const char *out_dir);

/* The settings_json of checkpoint `step` (malloc'd, caller frees), read before loading so that a
 * resume with other settings is refused by name rather than by a tensor shape. */
AF_NODISCARD int ckpt_read_settings(const char *out_dir, int64_t step, char **settings_json,
                                    char *err, size_t errlen);

/* Loads checkpoint `step` of out_dir into the caller's tensors, whose shapes must match:
 * the adapter's matrices (LoRA mode) or the params' values (full mode), then the moments and
 * st (st->settings_json owned by the caller). Errors name the file and tensor. */
AF_NODISCARD int ckpt_load(const char *out_dir, int64_t step, struct lora_adapter *lora,
                           const struct model *m, const struct train_param *params, size_t np,
                           struct train_adamw_state *opt, struct ckpt_state *st, char *err,
                           size_t errlen);

/* Full training's weights as a GGUF llama.cpp loads: the trained tensors (params, by GGUF name)
 * in F32, every other tensor and key copied from m's file. Written atomically. AF_EINVAL when m
 * did not come from a GGUF file (model_path names it). */
AF_NODISCARD int ckpt_write_gguf(const struct model *m, const char *model_path,
                                 const struct train_param *params, size_t np, const char *path,
                                 char *err, size_t errlen);

#endif
