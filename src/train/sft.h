/*
 * sft.h - supervised fine-tuning (`agentflow train sft`, and the paper's SFT baseline): chat
 * JSONL, the loss on assistant tokens only, LoRA or full training, AdamW with clipping and an
 * LR schedule, metrics per step, checkpoints that resume bit for bit.
 *
 * One optimiser step takes batch × accum conversations in a fixed, seeded order (reshuffled each
 * epoch); the loss is the mean over every assistant token of the step. Step s (0-based) of a run
 * depends only on the settings, the data and the state after step s-1, so a run stopped after a
 * checkpoint and resumed reproduces the uninterrupted run exactly (same thread count assumed:
 * OpenBLAS sums in an order that depends on it).
 *
 * Output folder: metrics.jsonl (one line per step: step, loss, lr, grad_norm, tokens,
 * tokens_per_s; appended and fsync'd), checkpoint-STEP/ (ckpt.h), and the latest weights at the
 * top level: adapter_model.safetensors + adapter_config.json (LoRA) or model.gguf (full).
 * With a validation file, every eval_every steps a line {step, val_loss, val_tokens} (the mean
 * loss over the held-out assistant tokens, no dropout, no update) and the weights of the lowest
 * val_loss so far in best/ (same files as the top level, plus best.json {step, val_loss}).
 * With early_stop K the run ends after K evaluations in a row without a lower val_loss. The
 * best-so-far is not kept across --resume: a resumed run starts its comparison afresh.
 */
#ifndef AF_TRAIN_SFT_H
#define AF_TRAIN_SFT_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "train/optim.h"

struct train_sft_step {
    int64_t step, steps; /* 1-based step just done, of steps */
    double loss, grad_norm, tokens_per_s;
    float lr;
    int64_t tokens; /* tokens of the step's sequences */
    int skipped;    /* 1: non-finite gradients, the update was skipped */
    int saved;      /* 1: a checkpoint was written after this step */
};

typedef void (*train_sft_step_fn)(void *user, const struct train_sft_step *s);

enum sft_loss_on { SFT_LOSS_ASSISTANT, SFT_LOSS_ALL, SFT_LOSS_TEXT };

struct train_sft_opts {
    const char *model_path, *data_path, *out_dir;
    const char *chat_template; /* NULL = the model's */
    int full;                  /* full fine-tuning instead of LoRA */
    int lora_rank;             /* default 8 */
    float lora_alpha;          /* default 2·rank */
    float lora_dropout;        /* default 0 */
    unsigned lora_targets;     /* default all seven */
    float lr;                  /* default 1e-4 (LoRA), 1e-5 (full) when 0 */
    const char *schedule;      /* "constant" (default), "linear", "cosine" */
    int64_t warmup;
    float min_lr_ratio;
    struct train_adamw adamw; /* default train_adamw_defaults() */
    float clip;               /* global-norm clip; default 1; <= 0 off */
    int64_t steps;            /* default 100 */
    int64_t batch, accum;     /* conversations per micro-step, micro-steps per step; 1, 1 */
    int64_t max_seq;          /* default 1024 */
    enum sft_loss_on loss_on; /* SFT_LOSS_ASSISTANT (default): the replies only; SFT_LOSS_ALL:
                                 every token, prompts included; SFT_LOSS_TEXT: every token but
                                 the prompts' tokens with a digit (the validation loss stays on
                                 the replies) */
    uint64_t seed;            /* default 0 */
    int64_t save_every;       /* default 50; the last step always saves */
    int keep;                 /* checkpoints kept; default 2 */
    int recompute;            /* activation checkpointing */
    int resume;               /* continue from the newest checkpoint in out_dir */
    int64_t stop_after;       /* > 0: save and stop after this step (the schedule still spans
                                 `steps`); continue with resume */
    const char *val_path;     /* chat JSONL held out for validation; NULL = none */
    int64_t eval_every;       /* validation loss every N steps (and at the last); 0 = save_every */
    int early_stop;           /* > 0: stop after this many evaluations without a lower val_loss */
    train_sft_step_fn on_step;
    void *user;
    void (*on_message)(void *user, const char *msg); /* notes (data counts, resume) */
};
struct train_sft_opts train_sft_default_opts(void);

/* Early stopping on validation loss: best is the lowest loss seen (start at INFINITY), n_worse
 * the evaluations in a row since. */
struct train_early_stop {
    double best;
    int64_t best_step;
    int n_worse;
};
/* Records the loss of the evaluation after `step`. Returns 1 when it is a new best (strictly
 * lower; a non-finite loss never is), else 0; sets *stop when patience > 0 evaluations in a row
 * have not been a new best. */
int train_early_stop_update(struct train_early_stop *e, int64_t step, double loss, int patience,
                            int *stop);

/* Runs (or resumes) a fine-tuning run. Errors name the file, line or setting at fault: bad
 * data, a model that does not load, an out_dir that already holds a run (without --resume),
 * a resume whose settings differ from the checkpoint's (the setting is named). */
AF_NODISCARD int train_sft_run(const struct train_sft_opts *o, char *err, size_t errlen);

#endif
