/*
 * net.h - training through a loaded engine model (src/train/): the forward and backward of the
 * whole qwen2/llama decoder on one token sequence, with the gradients going to a LoRA adapter
 * (the base weights frozen, in whatever type the file has, dequantised on the fly) or, for full
 * fine-tuning of small models, to F32 copies of every weight.
 *
 * This is the API the trainers call:
 *  - train_net_loss: Σ_t w_t · (−log p(tokens[t+1] | tokens[0..t])) with a weight per
 *    predicted token (0 masks; SFT passes 1/n on assistant tokens, the RL trainer passes the
 *    per-token coefficients of its clipped objective), and optionally the backward, which ADDS
 *    to the gradients (zero them with train_grads_zero between optimiser steps);
 *  - train_net_logprobs: the per-token log-probs of a sequence, with the adapter or without it.
 *    Without it the net is the base model, which is the RL reference policy, so no second copy
 *    of the model is kept.
 *
 * Memory: activations of every layer are kept for the backward (about T·(6·d + 3·n_ff) floats
 * per layer) unless `checkpoint` is set, which keeps only each layer's input and recomputes
 * the rest during the backward (one more forward of compute). The output head is kept in F32
 * (n_vocab·d floats) when the file's is quantized; the other frozen matrices are dequantised
 * into one scratch matrix as they are used.
 *
 * Thread-safety: one net is used by one thread at a time; the products inside run on OpenMP
 * threads (omp_set_num_threads). The results do not depend on timing: the same inputs and
 * thread count give the same bits, which `train sft --resume` relies on.
 */
#ifndef AF_TRAIN_NET_H
#define AF_TRAIN_NET_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/ops.h"
#include "train/optim.h"

struct train_net_params {
    int full;                  /* 1: train every weight (F32 copies); 0: LoRA on frozen base */
    struct lora_adapter *lora; /* LoRA mode: the adapter trained (borrowed, outlives the net) */
    int checkpoint;            /* recompute activations in the backward */
    int64_t head_chunk;        /* rows of logits computed at once; 0 = auto (4M logits, >= 64) */
};
struct train_net_params train_net_default_params(void);

struct train_net;

/* A net over model m (borrowed; must outlive the net). In LoRA mode p->lora must have m's
 * shape. Full mode copies every weight of m to F32 (so the file's type does not matter).
 * *out is owned (train_net_free). AF_EINVAL names the mismatch. */
AF_NODISCARD int train_net_new(const struct model *m, const struct train_net_params *p,
                               struct train_net **out, char *err, size_t errlen);
/* A full-training net of hyperparameters hp, every weight drawn uniform(±scale) from seed
 * (norms 1), with no file behind it: training small models from scratch. Owned. */
AF_NODISCARD int train_net_new_random(const struct model_hparams *hp, uint64_t seed, float scale,
                                      int checkpoint, struct train_net **out, char *err,
                                      size_t errlen);
void train_net_free(struct train_net *n);

/* The trainable tensors (LoRA A and B of each pair, or every weight in full mode) with their
 * gradients, in a fixed order; owned by the net, valid until train_net_free. */
const struct train_param *train_net_params_list(const struct train_net *n, size_t *count);
const struct model_hparams *train_net_hparams(const struct train_net *n);

/* Dropout of the LoRA inputs (LoRA mode with dropout > 0) is drawn from this seed, so the
 * trainer makes every step reproducible by setting it before each sequence. */
void train_net_set_dropout_seed(struct train_net *n, uint64_t seed);

/* The weighted loss of a sequence tokens[0..T) (T >= 2): weights [T-1], weights[t] for the
 * prediction of tokens[t+1]; NULL = 1/(T-1) each. With `backward` set the gradients of the
 * trainable tensors are ADDED to. logp [T-1] (or NULL) gets the log-prob of each predicted token.
 * AF_EINVAL for a token outside the vocabulary (names its index) or T < 2. */
AF_NODISCARD int train_net_loss(struct train_net *n, const int32_t *tokens, int64_t T,
                                const float *weights, int backward, double *loss, float *logp,
                                char *err, size_t errlen);

/* logp [T-1] = log p(tokens[t+1] | tokens[0..t]) with the adapter (use_adapter = 1) or the
 * base model alone (0; in full mode the trained weights are the only ones, so it must be 1). */
AF_NODISCARD int train_net_logprobs(struct train_net *n, const int32_t *tokens, int64_t T,
                                    int use_adapter, float *logp, char *err, size_t errlen);

/* One sequence with every option the RL trainer needs (train_net_loss and
 * train_net_logprobs are the two plain cases):
 *  - temperature: log-probs of softmax(logits / temperature), the engine's sampling
 *    distribution, with the gradient through the 1/temperature;
 *  - weights [T-1], or wfn: a per-token weight computed from that token's own log-prob
 *    (ops.h, train_weight_fn), so the clipped surrogate needs one forward, not two; neither:
 *    no loss (scoring only);
 *  - t_begin: predictions before it (the prompt) are skipped in the output head;
 *  - logp, entropy [T-1] outputs (NULL: not wanted); positions before t_begin untouched;
 *  - freq_penalty: the engine's frequency penalty over the reply, the tokens predicted from
 *    t_begin on (ops.h, train_xent_opts), so that log-probs are those of the penalised
 *    distribution the engine sampled from.
 * With backward set the gradients are ADDED to (needs use_adapter). *loss may be NULL. */
struct train_net_seq_opts {
    int backward;
    int use_adapter; /* 0: the base model (the RL reference policy); LoRA mode only */
    float temperature;
    const float *weights;
    train_weight_fn wfn;
    void *wuser;
    int64_t t_begin;
    float *logp, *entropy;
    float freq_penalty;
};
/* backward 0, use_adapter 1, temperature 1, no weights, every position, no outputs, no
 * penalty. */
struct train_net_seq_opts train_net_seq_default_opts(void);
AF_NODISCARD int train_net_seq(struct train_net *n, const int32_t *tokens, int64_t T,
                               const struct train_net_seq_opts *o, double *loss, char *err,
                               size_t errlen);

/* Floating-point operations of one forward + backward of T tokens (matmuls and attention), for
 * the benchmark's GFLOP/s. */
double train_net_flops(const struct train_net *n, int64_t T, int backward);

#endif
