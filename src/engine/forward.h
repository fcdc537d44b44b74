/*
 * forward.h - the inference forward pass over a KV sequence: embedding, n_layer blocks of
 * RMSNorm -> attention (QKV with optional bias, RoPE, causal GQA over the cached keys) ->
 * residual -> RMSNorm -> SwiGLU -> residual, then the final norm and the output head.
 *
 * A kv_seq (kv_pool.h) holds the keys and values of one token sequence in blocks of the paged
 * KV cache, and the tokens themselves, so the radix tree can match new prompts against them.
 * Attention reads the keys and values through the sequence's block table. A fwd_ctx holds the
 * scratch buffers of one caller; neither is thread-safe, and one fwd_ctx runs its matmuls and
 * attention on n_threads threads of its own (engine/tpool.h: not OpenMP, whose idle workers
 * sleep at once when other threads of the process have teams too).
 */
#ifndef AF_ENGINE_FORWARD_H
#define AF_ENGINE_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "engine/kv_pool.h"
#include "engine/model.h"

struct fwd_ctx;

/* max_ctx bounds positions (0 = the model's training context); n_threads <= 0 = all cores.
 * Owned by the caller (fwd_ctx_free). */
struct fwd_ctx *fwd_ctx_new(const struct model *m, int64_t max_ctx, int n_threads);
void fwd_ctx_free(struct fwd_ctx *c);
int64_t fwd_ctx_max_ctx(const struct fwd_ctx *c);
/* The thread count the context computes with. */
int fwd_ctx_threads(const struct fwd_ctx *c);
/* fn(arg, t, nth) for t < nth on the context's own threads (engine/tpool.h), for the work of a
 * step that is not a forward pass (sampling), so that it runs on the same workers. */
void fwd_ctx_run(struct fwd_ctx *c, int nth, void (*fn)(void *arg, int tid, int nth), void *arg);
void fwd_ctx_set_threads(struct fwd_ctx *c, int n_threads);

struct lora_adapter;
/* Makes every later fwd_eval add l's delta after each adapted linear (q, k, v before their
 * bias and RoPE; o, gate, up, down); NULL removes it. l is borrowed and must outlive its use,
 * and be shaped for c's model (lora_load_peft checks that). KV computed with and without an
 * adapter differ: the caller keeps them apart. */
void fwd_ctx_set_lora(struct fwd_ctx *c, const struct lora_adapter *l);

/* Invariant mode: every product of one row is computed as if in a batch of two, so a token's
 * keys, values and logits have the same bits whether it was evaluated alone (decode, the last
 * prompt token after a prefix-cache hit) or with others (prefill, a batched decode). A trainer
 * that must reproduce its rollouts needs this; it costs decode some speed. */
void fwd_ctx_set_invariant(struct fwd_ctx *c, int on);

enum fwd_logits { FWD_LOGITS_NONE, FWD_LOGITS_LAST, FWD_LOGITS_ALL };

/* Appends n tokens to s and computes their keys and values (in batches). The blocks for them
 * come from s's pool with force (past its budget if need be): a caller that must respect the
 * budget reserves them first (kv_seq_reserve). Logits of the last
 * token (FWD_LOGITS_LAST) or of each new token (FWD_LOGITS_ALL, n rows) go to `logits`
 * (n_vocab floats per row; caller-provided). Fails with AF_EINVAL (message in err) on a token
 * id outside the vocabulary or when the sequence would exceed max_ctx; s is unchanged then.
 * Fails with AF_EPARSE naming the layer (or the output head) when the weights make the
 * activations or logits non-finite; s may then hold part of the tokens. */
AF_NODISCARD int fwd_eval(struct fwd_ctx *c, struct kv_seq *s, const int32_t *tokens, int64_t n,
                          enum fwd_logits want, float *logits, char *err, size_t errlen);

/* One decode step of n rows at once: token j is appended to seqs[j], and the products of
 * every layer run as one matmul of n rows (attention per row). A sequence may fill several
 * adjacent rows: its tokens at successive positions, each row attending up to its own (how a
 * draft is verified, and how a prompt's chunk rides along with the decodes). logits gets the
 * rows [logits_from, n), n_vocab floats each (the rows before it, a chunk's, need none). With
 * invariant mode on, each row has the bits it would have alone. Blocks as fwd_eval. AF_EINVAL
 * names the row at fault (a full context, a bad id, a sequence in rows that are not adjacent,
 * more than FWD_MAX_ROWS rows); no sequence changes then. AF_EPARSE as fwd_eval for non-finite
 * values. */
#define FWD_MAX_ROWS 256
AF_NODISCARD int fwd_eval_rows(struct fwd_ctx *c, struct kv_seq *const *seqs, const int32_t *tokens,
                               int64_t n, int64_t logits_from, float *logits, char *err,
                               size_t errlen);

#endif
