/*
 * engine.h - the in-process inference engine: GGUF models (qwen2, llama) loaded, tokenized,
 * chat-formatted and run on the CPU, with a paged KV cache whose blocks are shared between
 * requests through a radix tree over token ids (the longest cached prefix of a prompt is
 * reused, from any earlier or running request).
 *
 * Concurrency: any number of threads may call one af_engine. Concurrent generate calls are
 * batched (continuous batching, src/engine/sched.c): each decode step runs one token of every
 * active generation as one matmul, and new requests join at token boundaries with their
 * prompts evaluated in chunks between those steps. Logits, adapter and other calls wait for
 * their turn. Inside a step the kernels run on n_threads OpenMP threads. Do not call it from
 * inside an OpenMP region.
 */
#ifndef AGENTFLOW_ENGINE_H
#define AGENTFLOW_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct af_engine_params {
    int n_threads;             /* <= 0: all cores */
    int64_t n_ctx;             /* max tokens per sequence; 0 = min(training context, 32768) */
    size_t prefix_cache_bytes; /* deprecated: the KV pool's size when kv_budget_bytes is 0;
                                  default 1 GiB (0 for both: no limit) */
    int prefix_cache_seqs;     /* deprecated and ignored: the paged cache keeps blocks, not
                                  a count of sequences */
    const char *chat_template; /* "chatml", "llama3" or NULL = from the model */
    const char *lora_dir;      /* a PEFT LoRA folder applied to every forward; NULL = none */
    int prefill_chunk;         /* prompt tokens a request evaluates per scheduler step, between
                                  the decode steps of the others; default 256 */
    int max_batch;             /* generations decoded together; default 64, at most 256 */
    int batch_invariant;       /* the same bits for a token whatever it was evaluated with (the
                                  KV cache's reuse, batch size): what a trainer needs to
                                  reproduce its rollouts; decode runs a little slower */
    int draft_max;             /* prompt-lookup decoding: up to this many tokens guessed per
                                  step from an earlier occurrence of the last 3 (else 2) tokens
                                  in the prompt or output, checked in the same step; the text
                                  is what it would be without (same sampling draws); 0 = off
                                  (default), at most 32 */
    size_t kv_budget_bytes;    /* the paged KV cache's size (`--kv-mib`): blocks of 16 tokens
                                  held by running generations and by cached prefixes together.
                                  Unheld cached blocks are evicted least recently used first;
                                  new generations wait while their prompts do not fit; when a
                                  running one needs a block and none is left, the newest is
                                  paused (its blocks freed, the full ones left cached) and
                                  resumed later with the same text. The oldest always runs,
                                  past the size if it must. 0 = prefix_cache_bytes (default) */
    int kv_f16;                /* keys and values cached as F16 (`--kv-type f16`), as llama.cpp's
                                  default cache: half the KV memory (twice the tokens under
                                  kv_budget_bytes) and half the bytes attention reads; each key
                                  and value is rounded once, so logits move by about 1e-3 of
                                  their size. 0 = F32 (default: the reference bits) */
};
struct af_engine_params af_engine_default_params(void);

struct af_engine;

/* Loads a model and, with p->lora_dir, its LoRA adapter (a PEFT folder: adapter_config.json
 * and adapter_model.safetensors, shaped for this model; messages about it start with the
 * folder). Strings are copied. On failure returns an AF_E* code and writes a message
 * naming the file and the key, tensor or offset at fault into err. *out is owned by the
 * caller: af_engine_free. */
AF_NODISCARD int af_engine_load(const char *path, const struct af_engine_params *p,
                                struct af_engine **out, char *err, size_t errlen);
void af_engine_free(struct af_engine *e);

/* A JSON text describing the model (architecture, shapes, types, vocabulary, template), the
 * adapter ("lora": {dir, rank, alpha, scale, targets} or null), the scheduler's counters
 * ("batching", with "requests": the generations queued or running now) and the KV cache as of the
 * last step ("kv_cache": block_tokens, block_bytes, blocks_total, blocks_used by running
 * generations, blocks_cached that none holds, hit_tokens reused over all requests, evicted_blocks);
 * malloc'd, caller frees. */
char *af_engine_info_json(struct af_engine *e);
int64_t af_engine_n_vocab(const struct af_engine *e);
const char *af_engine_model_path(const struct af_engine *e);

/* --- For the trainer (src/train/), which shares the engine's model --------------------- */
struct model;
struct lora_adapter;
/* The loaded model (engine/model.h), borrowed for the engine's lifetime. */
const struct model *af_engine_model(const struct af_engine *e);
/* Makes every later call run with a copy of adapter l (engine/lora.h; shaped for this model),
 * or with none when l is NULL. Waits for the call in progress, so no generation sees half of
 * an update, and drops the cached KV blocks computed with the old weights.
 * AF_EINVAL when l's shape does not match the model. */
AF_NODISCARD int af_engine_set_lora(struct af_engine *e, const struct lora_adapter *l, char *err,
                                    size_t errlen);

/* Replaces weights of the loaded model (full fine-tuning's trainer): names[i] is a GGUF tensor
 * name ("blk.0.attn_q.weight", "output_norm.weight", ...) and values[i] its counts[i] floats,
 * stored in the tensor's own type (quantized as llama.cpp's reference quantiser does). Waits
 * for every generation in flight and drops the cached KV blocks computed with the old weights.
 * AF_EINVAL names an unknown
 * tensor or a wrong count; nothing is changed then. */
AF_NODISCARD int af_engine_set_weights(struct af_engine *e, const char *const *names,
                                       const float *const *values, const int64_t *counts, size_t n,
                                       char *err, size_t errlen);

/* Token ids of text. *ids is malloc'd (caller frees). */
AF_NODISCARD int af_engine_tokenize(struct af_engine *e, const char *text, int add_special,
                                    int parse_special, int32_t **ids, size_t *n_ids, char *err,
                                    size_t errlen);
/* The text of ids (special tokens spelled out when `special`); malloc'd, caller frees. */
char *af_engine_detokenize(struct af_engine *e, const int32_t *ids, size_t n, int special);

struct af_engine_msg {
    const char *role; /* borrowed */
    const char *content;
};
/* The prompt text of a conversation in the model's chat template, ending with the
 * assistant header. Fails with AF_EINVAL when the model has no recognised template and none
 * was set. *out is malloc'd (caller frees). */
AF_NODISCARD int af_engine_chat_prompt(struct af_engine *e, const struct af_engine_msg *msgs,
                                       size_t n, char **out, char *err, size_t errlen);

/* Logits of the last position after the prompt ids (n_vocab floats into `logits`, which the
 * caller provides). With all_logits set, `logits` must hold n_ids * n_vocab floats and gets
 * every position's row. */
AF_NODISCARD int af_engine_logits(struct af_engine *e, const int32_t *ids, size_t n_ids,
                                  int all_logits, float *logits, char *err, size_t errlen);

#define AF_ENGINE_MAX_STOP 8

/* Called with each new piece of text as it is decoded; return nonzero to stop. */
typedef int (*af_engine_token_fn)(void *user, int32_t id, const char *piece, size_t len);

struct af_engine_gen_params {
    float temperature; /* 0 = greedy */
    int top_k;
    float top_p;
    float min_p;
    float frequency_penalty;
    float presence_penalty;
    uint64_t seed;
    int max_tokens; /* default 256 */
    size_t n_stop;
    const char *stop[AF_ENGINE_MAX_STOP]; /* the text ends before the first stop string */
    int ignore_eos;
    af_engine_token_fn on_token; /* may be NULL */
    void *user;
};
struct af_engine_gen_params af_engine_default_gen_params(void);

/* Everything one generation returns; owned by the result (af_engine_result_deinit). */
struct af_engine_result {
    char *text;
    int32_t *ids;    /* generated ids (a stop string's tokens included) */
    float *logprobs; /* per generated id: see engine/sample.h */
    size_t n_ids;
    size_t n_prompt;
    size_t n_cached; /* prompt tokens whose KV came from the KV cache (reused, not evaluated) */
    /* Prompt-lookup decoding, when the engine's draft_max > 0 (drafting = 1): the tokens
     * guessed for this generation, and of them the ones the model's own choice confirmed. */
    int drafting;
    size_t n_drafted, n_draft_kept;
    double prefill_ms, decode_ms;
    const char *finish_reason; /* "stop" (EOS or stop string), "length"; static */
};
void af_engine_result_deinit(struct af_engine_result *r);

/* Generates from prompt ids. The prompt's KV is looked up in and then added to the KV cache
 * (as its blocks fill, so requests running at the same time share them too). Runs alongside other
 * threads' generations on the same engine; p->on_token is then called from whichever thread drives
 * the batch (while this one waits). */
AF_NODISCARD int af_engine_generate(struct af_engine *e, const int32_t *prompt, size_t n_prompt,
                                    const struct af_engine_gen_params *p,
                                    struct af_engine_result *out, char *err, size_t errlen);

/* Writes `path` re-encoded with every 2-D weight in `type` ("Q4_K", "Q8_0", "F16", ...; a
 * tensor whose rows do not fit the type's blocks falls back as llama-quantize does). */
AF_NODISCARD int af_engine_quantize(const char *in_path, const char *out_path, const char *type,
                                    char *err, size_t errlen);
/* As af_engine_quantize, also setting general.name to `name` (borrowed; NULL keeps the input's,
 * "" is AF_EINVAL): a model trained from make-random's weights is otherwise named for them. */
AF_NODISCARD int af_engine_quantize_named(const char *in_path, const char *out_path,
                                          const char *type, const char *name, char *err,
                                          size_t errlen);

struct af_engine_random_params {
    const char *arch;  /* "qwen2" or "llama" */
    const char *shape; /* "tiny", "small", "qwen2.5-0.5b", ... (see `model make-random`) */
    const char *type;  /* as af_engine_quantize; default F32 */
    uint64_t seed;
    const char *vocab_from; /* a GGUF whose tokenizer.* keys are copied; NULL = byte vocab */
};
/* Trains a byte-level BPE vocabulary of n_vocab tokens (the 256 bytes, the merges learned
 * from `texts`, and <|endoftext|> <|im_start|> <|im_end|>) with the qwen2 pre-tokeniser and
 * writes it to out_path as a GGUF holding only tokenizer.* keys (ChatML template), for
 * af_engine_random_params.vocab_from. Fewer merges are made when no pair repeats.
 * *n_merges (may be NULL) gets the number made. The same texts give the same file. */
AF_NODISCARD int af_engine_make_vocab(const char *const *texts, size_t n_texts, size_t n_vocab,
                                      const char *out_path, size_t *n_merges, char *err,
                                      size_t errlen);

/* The bool key, set to true, that af_engine_make_random writes into every file it makes. */
#define AF_GGUF_KEY_RANDOM_WEIGHTS "agentflow.random_weights"
/* Writes a random-weight model (atomically), with AF_GGUF_KEY_RANDOM_WEIGHTS set. The same
 * parameters give the same file. Returns 0; AF_EINVAL for an unknown arch, shape or type;
 * for a vocab_from file that is missing, unreadable or not a GGUF with a vocabulary, its
 * error (AF_EIO, AF_ENOTFOUND, AF_EPARSE, ...), never AF_EINVAL; a write error of out_path. */
AF_NODISCARD int af_engine_make_random(const struct af_engine_random_params *p,
                                       const char *out_path, char *err, size_t errlen);
/* 1 when the GGUF file at path (borrowed) has AF_GGUF_KEY_RANDOM_WEIGHTS set to true, else 0
 * (also when it cannot be read). Reads the header only. Safe from any thread. */
int af_engine_random_weights(const char *path);

#endif
