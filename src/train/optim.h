/*
 * optim.h - the optimiser layer of training (src/train/): AdamW as torch.optim.AdamW computes
 * it, gradient norm / clipping / scaling / NaN checks over a list of parameter tensors, and the
 * learning-rate schedules of Hugging Face transformers (constant, linear, cosine, with warmup).
 *
 * A parameter is a borrowed (values, gradients) pair of n floats; a step walks the list in
 * order. Determinism: every result is bit-identical for the same input whatever the OpenMP
 * thread count - updates are elementwise, and the gradient norm sums fixed-size chunks in
 * double, then adds the chunk sums in order.
 * Thread-safety: the functions are reentrant and use OpenMP inside; one caller at a time per
 * parameter list / optimiser state.
 */
#ifndef AF_TRAIN_OPTIM_H
#define AF_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct train_param {  /* one trainable tensor; every pointer borrowed */
    const char *name; /* for messages; may be NULL */
    float *w, *g;     /* values and gradients, n floats each */
    int64_t n;
    int decay; /* 1: apply weight decay (matrices), 0: not (norms, biases) */
};

/* ---- AdamW ---------------------------------------------------------------------------------- */

struct train_adamw {
    float beta1, beta2, eps, weight_decay;
};
/* beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0. */
struct train_adamw train_adamw_defaults(void);

struct train_adamw_state {
    int64_t n;    /* total floats over all params */
    int64_t step; /* steps taken; 0 after init */
    float *m, *v; /* first/second moments, n floats each, params concatenated in list order;
                     owned, freed by train_adamw_deinit */
};

/* Sizes st for the list p[0..np): zeroed moments, step 0. A checkpoint restores a run by
 * overwriting step, m and v after init. Returns AF_EINVAL (message in err naming the param) when
 * np is 0, the total is 0, a count is negative, a pointer is NULL for n > 0 or the total
 * overflows; AF_ENOMEM when the moments cannot be allocated (they are as large as the model, so
 * this fails softly rather than aborting). On error st is left empty (safe to deinit). */
AF_NODISCARD int train_adamw_init(struct train_adamw_state *st, const struct train_param *p,
                                  size_t np, char *err, size_t errlen);
/* Frees the moments and zeroes st; st may be NULL. */
void train_adamw_deinit(struct train_adamw_state *st);

/* One step at learning rate lr, as torch.optim.AdamW (single-tensor path): step++, then for
 * each element
 *     w -= lr·wd·w                        (only when decay; decoupled weight decay)
 *     m  = b1·m + (1-b1)·g
 *     v  = b2·v + (1-b2)·g²
 *     w -= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)      bc1 = 1-b1^step, bc2 = 1-b2^step
 * with bc1, bc2 and the scalar factors in double, the elementwise math in float. p must be the
 * list st was initialised with (same order and sizes). Gradients are read, not cleared. */
void train_adamw_step(struct train_adamw_state *st, const struct train_param *p, size_t np,
                      const struct train_adamw *hp, float lr);

/* Bytes of m plus v (2·n floats), for a checkpoint writer; step is stored separately. */
size_t train_adamw_state_bytes(const struct train_adamw_state *st);

/* ---- Gradients ------------------------------------------------------------------------------ */

/* sqrt(Σ g²) over every gradient, in double, in a fixed order (deterministic). NaN/Inf
 * gradients give a NaN/Inf norm. */
double train_grad_norm(const struct train_param *p, size_t np);
/* Returns the norm before clipping; when max_norm > 0 and the norm is finite and above it,
 * scales every gradient by max_norm / norm. A non-finite norm leaves the gradients as they are
 * (check train_grads_nonfinite and skip the step). */
double train_clip_grad_norm(const struct train_param *p, size_t np, double max_norm);
/* g *= s for every gradient (gradient accumulation averages micro-batches this way). */
void train_grads_scale(const struct train_param *p, size_t np, float s);
/* g = 0 for every gradient. */
void train_grads_zero(const struct train_param *p, size_t np);
/* 1 when any gradient is NaN or ±Inf, else 0. Checks the bits, so it holds even under
 * -ffast-math. */
int train_grads_nonfinite(const struct train_param *p, size_t np);

/* ---- Learning-rate schedules ---------------------------------------------------------------- */

enum train_sched_kind { TRAIN_SCHED_CONSTANT, TRAIN_SCHED_LINEAR, TRAIN_SCHED_COSINE };

struct train_sched {
    enum train_sched_kind kind;
    float lr;           /* peak learning rate */
    int64_t warmup;     /* linear warmup steps (0: none) */
    int64_t total;      /* total training steps (linear and cosine decay to this step) */
    float min_lr_ratio; /* cosine only: the floor as a fraction of lr (0: decay to 0) */
};

/* "constant", "linear", "cosine" -> the enum value; -1 for anything else or NULL. */
int train_sched_from_name(const char *name);
/* The name of k (static string); "unknown" for a value outside the enum. */
const char *train_sched_name(enum train_sched_kind k);

/* The learning rate at 0-based step (negative counts as 0), as transformers' schedulers
 * (get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
 * get_cosine_with_min_lr_schedule_with_warmup):
 *   step < warmup:  lr · step / max(1, warmup)      (step 0 gives 0 when warmup > 0)
 *   constant:       lr
 *   linear:         lr · max(0, (total - step) / max(1, total - warmup))
 *   cosine:         p = clamp((step - warmup) / max(1, total - warmup), 0, 1);
 *                   lr · (min_lr_ratio + (1 - min_lr_ratio) · 0.5·(1 + cos(π·p)))
 * computed in double. Safe from any thread. */
float train_sched_lr(const struct train_sched *s, int64_t step);

#endif
