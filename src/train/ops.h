/*
 * ops.h - the F32 math layer of training (src/train/): the forward of each op of the
 * qwen2/llama decoder, saving what its backward needs, and the backward, which produces the
 * gradients of the inputs and of the parameters. Plain row-major float arrays; T is the number
 * of tokens of one sequence, shapes are written beside each prototype.
 *
 * Conventions:
 *  - Every backward ADDS into its gradient outputs (dx += ..., dw += ...), as llm.c does, so
 *    a residual fan-out or a tied weight just sums; zero the gradients before a step. A NULL
 *    gradient pointer skips that product.
 *  - Forwards overwrite their outputs. Inputs are borrowed; nothing here allocates memory that
 *    outlives the call.
 *  - The arithmetic follows engine/forward.c (RMSNorm in double, RoPE angles advanced in float,
 *    softmax with the max subtracted), so a trained model's logits match inference.
 * Thread-safety: every function is safe from any thread on distinct outputs; the heavy ones
 * (gemm, attention) use OpenMP inside.
 */
#ifndef AF_TRAIN_OPS_H
#define AF_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

/* ---- Embedding: out[t] = table[ids[t]] ---------------------------------------------------
 * table [n_vocab][d], ids [T] (the caller checks 0 <= id < n_vocab), out [T][d]. */
void train_embed_fwd(const float *table, int64_t d, const int32_t *ids, int64_t T, float *out);
/* dtable[ids[t]] += dout[t]: a scatter-add, repeated ids sum. dout [T][d]. */
void train_embed_bwd(const float *dout, const int32_t *ids, int64_t T, int64_t d, float *dtable);

/* ---- RMSNorm: y = x / sqrt(mean(x²) + eps) * g -------------------------------------------
 * x, y [T][n], g [n]; saves rstd [T] = 1/sqrt(mean(x²)+eps). */
void train_rmsnorm_fwd(const float *x, const float *g, int64_t T, int64_t n, float eps, float *y,
                       float *rstd);
/* dx [T][n] += ..., dg [n] += Σ_t dy·x·rstd. */
void train_rmsnorm_bwd(const float *dy, const float *x, const float *g, const float *rstd,
                       int64_t T, int64_t n, float *dx, float *dg);

/* ---- Linear: out = x · Wᵀ + b --------------------------------------------------------------
 * x [T][n_in], W [n_out][n_in] (the engine's row layout), b [n_out] or NULL, out [T][n_out]. */
void train_linear_fwd(const float *x, const float *w, const float *b, int64_t T, int64_t n_in,
                      int64_t n_out, float *out);
/* dx [T][n_in] += dout·W; dw [n_out][n_in] += doutᵀ·x; db [n_out] += Σ_t dout. */
void train_linear_bwd(const float *dout, const float *x, const float *w, int64_t T, int64_t n_in,
                      int64_t n_out, float *dx, float *dw, float *db);

/* ---- RoPE ----------------------------------------------------------------------------------
 * As engine/forward.c: the first n_rot dims of each head rotate, pair i by the angle
 * pos · freq_scale / ff[i] · base^(-2i/n_rot); NORM pairs (2i, 2i+1), NEOX pairs (i, i+n_rot/2). */
struct train_rope {
    int64_t n_rot, head_dim;
    float base, freq_scale;    /* rope_base, rope_freq_scale (1 when unscaled) */
    const float *freq_factors; /* n_rot/2 divisors or NULL */
    int neox;
};
/* cos, sin [T][n_rot/2] for positions pos0 .. pos0+T-1. */
void train_rope_tables(const struct train_rope *r, int64_t pos0, int64_t T, float *cos_t,
                       float *sin_t);
/* Rotates x [T][n_heads][head_dim] in place (nothing to save but the tables). */
void train_rope_fwd(const struct train_rope *r, float *x, int64_t T, int64_t n_heads,
                    const float *cos_t, const float *sin_t);
/* The backward is the inverse rotation, in place on the gradient dx [T][n_heads][head_dim]. */
void train_rope_bwd(const struct train_rope *r, float *dx, int64_t T, int64_t n_heads,
                    const float *cos_t, const float *sin_t);

/* ---- Causal GQA attention (ops_attn.c) -----------------------------------------------------
 * q, out [T][n_head][hd]; k, v [T][n_head_kv][hd]; query head h reads kv head
 * h / (n_head / n_head_kv). scores = q·k / sqrt(hd) over keys 0..t, softmax, weighted sum of
 * v. Saves lse [n_head][T], the log-sum-exp of each score row; the backward recomputes the
 * probabilities from it (as FlashAttention does), so memory stays O(T), not O(T²). */
struct train_attn {
    int64_t n_head, n_head_kv, head_dim;
};
void train_attn_fwd(const struct train_attn *a, const float *q, const float *k, const float *v,
                    int64_t T, float *out, float *lse);
/* dq [T][n_head][hd] += ..., dk, dv [T][n_head_kv][hd] += ... (the heads of a group summed).
 * out and lse are the forward's. */
void train_attn_bwd(const struct train_attn *a, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int64_t T, float *dq,
                    float *dk, float *dv);

/* ---- SwiGLU and residual -------------------------------------------------------------------
 * out = silu(gate) * up, all [n] (n = T·n_ff). */
void train_swiglu_fwd(const float *gate, const float *up, int64_t n, float *out);
/* dgate += dout·up·silu'(gate), dup += dout·silu(gate). */
void train_swiglu_bwd(const float *dout, const float *gate, const float *up, int64_t n,
                      float *dgate, float *dup);
/* y [n] += x. Its backward passes dy unchanged to both branches. */
void train_add(float *y, const float *x, int64_t n);

/* ---- Log-softmax and cross-entropy ---------------------------------------------------------
 * logits [T][V]; targets [T]; weights [T] or NULL for all 1 (0 skips a position; the RL trainer
 * passes advantages). Returns loss = Σ_t weights[t] · (−log softmax(logits[t])[targets[t]]) (the
 * caller normalises, e.g. weights of 1/n_selected). dlogits [T][V] (or NULL) is OVERWRITTEN with
 * ∂loss/∂logits = w_t (softmax − onehot), zero rows where w_t = 0. logp [T] (or NULL) gets the
 * log-prob of each target (NAN-free: max subtracted, sums in double). */
double train_xent_fwd_bwd(const float *logits, int64_t T, int64_t V, const int32_t *targets,
                          const float *weights, float *dlogits, float *logp);
/* logp [T] = log softmax(logits[t])[targets[t]]. */
void train_token_logprobs(const float *logits, int64_t T, int64_t V, const int32_t *targets,
                          float *logp);

/* The output head fused with the loss, in chunks of `chunk` rows so that the [T][V] logits are
 * never whole in memory (V is 151,936 for Qwen2.5): logits = xn · Wᵀ, then the loss as
 * train_xent_fwd_bwd, then dxn [T][d] += dlogits·W and dw [V][d] += dlogitsᵀ·xn (either NULL
 * to skip). xn [T][d]; W [V][d]. logp [T] or NULL. Rows with weight 0 are still computed when
 * logp is wanted. Returns the loss. */
double train_head_xent(const float *xn, const float *w, int64_t T, int64_t d, int64_t V,
                       const int32_t *targets, const float *weights, int64_t chunk, float *dxn,
                       float *dw, float *logp);

/* The general form of the head's loss, for the RL trainer:
 *  - logits are divided by a temperature (inv_temp = 1/T), so log-probs are those of the
 *    distribution the engine sampled from, and the gradient carries the 1/T;
 *  - a row's weight may come from a function of its own log-prob (the clipped surrogate's
 *    per-token coefficient), called once per row from any OpenMP thread, so it must only
 *    read shared data or write row t's own slots;
 *  - rows before t_begin (a prompt) are skipped: no logits, no gradient, logp untouched;
 *  - entropy [T] (or NULL) gets each row's entropy of softmax(logits / T).
 * Arrays are indexed by the row's position in the whole sequence. */
typedef float (*train_weight_fn)(void *user, int64_t t, float logp);
struct train_xent_opts {
    const float *weights; /* [T], NULL = all 1; ignored when wfn is set */
    train_weight_fn wfn;
    void *wuser;
    float inv_temp;  /* 1 = plain log-softmax */
    int64_t t_begin; /* first row computed */
    float *logp;     /* [T] or NULL */
    float *entropy;  /* [T] or NULL */
    /* The engine sampler's frequency penalty (engine/sample.c), applied before the
     * temperature: in row t >= t_begin the logit of each token that is the target of an
     * earlier row in [t_begin, t) is lowered by (its count there) x freq_penalty. With the
     * reply starting at row t_begin, the log-probs are those of the penalised distribution
     * the engine sampled from; the penalty is constant, so the gradient is unchanged. */
    float freq_penalty; /* 0 = none */
};
/* No weights (all 1), inv_temp 1, every row, no outputs, no penalty. */
struct train_xent_opts train_xent_default_opts(void);
/* train_head_xent with the options above; at the defaults the two give the same bits. */
double train_head_xent_ex(const float *xn, const float *w, int64_t T, int64_t d, int64_t V,
                          const int32_t *targets, const struct train_xent_opts *o, int64_t chunk,
                          float *dxn, float *dw);

/* ---- A whole tiny model (tests and full training of small models) --------------------------
 * Every parameter is F32, in one allocation; struct train_tiny_layer points into it. */
struct train_tiny_cfg {
    int64_t n_vocab, d_model, n_layer, n_head, n_head_kv, head_dim, n_ff;
    float rms_eps, rope_base;
    int rope_neox, qkv_bias, tied_output;
};

struct train_tiny_layer {
    float *attn_norm, *wq, *wk, *wv, *bq, *bk, *bv, *wo; /* bq.. NULL without qkv_bias */
    float *ffn_norm, *w_gate, *w_up, *w_down;
};

struct train_tiny {
    struct train_tiny_cfg cfg;
    float *params; /* n_params floats, owned */
    size_t n_params;
    float *tok_embd, *output_norm, *output; /* output == tok_embd when tied */
    struct train_tiny_layer *layers;        /* cfg.n_layer, owned */
};

/* Lays out a model for cfg with all parameters zero; *out is owned (train_tiny_free).
 * AF_EINVAL names the bad field (n_head not a multiple of n_head_kv, odd head_dim, ...). */
AF_NODISCARD int train_tiny_new(const struct train_tiny_cfg *cfg, struct train_tiny **out,
                                char *err, size_t errlen);
void train_tiny_free(struct train_tiny *m);
/* Fills the parameters with a fixed-seed uniform(-scale, scale); norms get 1 + that. */
void train_tiny_init_random(struct train_tiny *m, uint64_t seed, float scale);

/* The loss of predicting tokens[t+1] from tokens[0..t], for t < T-1, weighted by weights[t]
 * (weights [T-1], NULL = 1/(T-1) each). grads (or NULL for forward only) has the same cfg;
 * its parameters are ADDED to. logits_out [T][V] (or NULL) gets the logits. *loss is written.
 * AF_EINVAL for a token outside the vocabulary (names its index) or T < 2. */
AF_NODISCARD int train_tiny_loss(const struct train_tiny *m, const int32_t *tokens, int64_t T,
                                 const float *weights, struct train_tiny *grads, float *logits_out,
                                 double *loss, char *err, size_t errlen);

#endif
