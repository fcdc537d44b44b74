/*
 * llm.h - the chat back-end interface shared by every engine slot and tool.
 *
 * A back-end turns a list of chat messages plus sampling parameters into a reply. The
 * implementations are: OpenAI-compatible HTTP (af_llm_openai_new), scripted replies for tests
 * (af_llm_scripted_new) and the in-process engine (af_llm_gguf_new, gguf:PATH). Decorators (retry,
 * cache) wrap any back-end the same way through af_llm_new_custom.
 *
 * Thread-safety: an af_llm handle is safe to call from any number of threads at once.
 */
#ifndef AGENTFLOW_LLM_H
#define AGENTFLOW_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

#define AF_LLM_MAX_STOP 8

struct af_msg {
    const char *role;    /* "system", "user" or "assistant"; borrowed */
    const char *content; /* borrowed */
};

struct af_sampling {
    double temperature; /* 0 = greedy */
    double top_p;
    int max_tokens;
    double frequency_penalty;
    int has_seed; /* seed is sent only when set */
    int64_t seed;
    size_t n_stop;
    const char *stop[AF_LLM_MAX_STOP]; /* borrowed */
    /* 1 = generate max_tokens tokens even past the end-of-text token (benchmarks that need
     * the same work on every back-end). Sent as "ignore_eos" only when set. Default 0. */
    int ignore_eos;
};

/* Greedy defaults of the fixed and executor slots: T=0, top_p 0.99, 2048 tokens, no penalty. */
struct af_sampling af_llm_default_sampling(void);

struct af_llm_request {
    const struct af_msg *msgs; /* borrowed, n_msgs entries */
    size_t n_msgs;
    struct af_sampling sampling;
    const char *model; /* borrowed; NULL = the back-end's default */
    /* borrowed; the flow module that asks ("query_analysis", "planner", "executor",
     * "verifier", "final_output", "direct_output"), NULL for other callers (tools). Back-ends
     * that answer by role (the practice world's expert) read it; the others ignore it. */
    const char *module;
    /* af_clock_ms() value by which the call must have ended, retries and waits included
     * (a solve's --max-time); 0 = none. Back-ends that cannot stop mid-call check it before
     * starting. A call cut off by it fails with AF_ETIMEOUT. */
    double deadline_ms;
};

/* Everything a reply can carry. Every pointer is owned by the reply (af_llm_reply_deinit). */
struct af_llm_reply {
    char *text;                /* assistant content; NULL on error */
    char *model;               /* model name the server reported, or NULL */
    char *finish_reason;       /* "stop", "length", ... or NULL */
    int64_t prompt_tokens;     /* -1 when unknown */
    int64_t completion_tokens; /* -1 when unknown */
    int64_t cached_tokens;     /* prompt tokens served from a prefix cache (the in-process
                                  engine; servers that report usage.prompt_tokens_details
                                  .cached_tokens); -1 when unknown */
    int64_t draft_tokens;      /* prompt-lookup decoding (the in-process engine's --draft):
                                  tokens guessed; -1 when not drafting */
    int64_t draft_accepted;    /* of them, the ones kept; -1 when not drafting */
    double latency_ms;         /* wall time of the whole call, retries included */
    int n_attempts;            /* HTTP attempts made (1 without retries) */
    int http_status;           /* last HTTP status, 0 when none */
    int err;                   /* AF_OK or AF_E* */
    char *errmsg;              /* names URL, status and server message; NULL when ok */
    /* Filled by back-ends that can (the in-process engine); NULL / 0 otherwise. */
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    int32_t *response_ids;
    float *response_logprobs; /* one per response id */
    size_t n_response_ids;
};

void af_llm_reply_init(struct af_llm_reply *r);
void af_llm_reply_deinit(struct af_llm_reply *r);

struct af_llm;

/* The operations of one back-end implementation. `self` is the implementation's state. */
struct af_llm_ops {
    const char *kind; /* "openai", "scripted", "gguf", "retry", ... */
    /* Fills *reply (already initialised). Returns reply->err. Must be thread-safe. */
    int (*chat)(void *self, const struct af_llm_request *req, struct af_llm_reply *reply);
    void (*free)(void *self);
    /* Optional: a short description (URL, file) for error messages and traces. */
    const char *(*describe)(void *self);
};

/* Wraps an implementation. The handle owns `self` and frees it with ops->free. */
struct af_llm *af_llm_new_custom(const struct af_llm_ops *ops, void *self);
void af_llm_free(struct af_llm *llm);

/* Sends one request. The reply must be initialised by the caller and is filled in, on error
 * too (err, errmsg). Returns reply->err. Safe from any thread. */
AF_NODISCARD int af_llm_chat(struct af_llm *llm, const struct af_llm_request *req,
                             struct af_llm_reply *reply);
const char *af_llm_kind(const struct af_llm *llm);
const char *af_llm_describe(const struct af_llm *llm);

/* --- OpenAI-compatible chat completions over libcurl ---------------------------------- */
struct af_llm_openai_params {
    const char *base_url;    /* e.g. "http://127.0.0.1:8000/v1"; /chat/completions is added */
    const char *api_key;     /* may be NULL: no Authorization header */
    const char *model;       /* default model name when a request names none */
    long connect_timeout_ms; /* default 10000 */
    long timeout_ms;         /* total per attempt; default 300000 */
    int max_retries; /* retries after the first attempt on 429/5xx/connection errors; default 5 */
    double backoff_base_ms;    /* first backoff; doubles each retry, with jitter; default 500 */
    double backoff_max_ms;     /* cap per wait; default 30000 */
    double retry_budget_ms;    /* total time across attempts and waits; default 600000 */
    size_t max_response_bytes; /* default 64 MiB */
    /* Once the reply has begun, a window of stall_timeout_ms that brings fewer than
     * AF_LLM_STALL_MIN_BYTES of it fails the attempt as a time-out (a stalled or dripping
     * stream); 0 = no check. Default 30000. */
    long stall_timeout_ms;
};
#define AF_LLM_STALL_MIN_BYTES 512
struct af_llm_openai_params af_llm_openai_default_params(void);

/* Creates an HTTP back-end. Strings are copied. On failure returns NULL and writes a message
 * into err. Owned by the caller: af_llm_free. */
struct af_llm *af_llm_openai_new(const struct af_llm_openai_params *p, char *err, size_t errlen);

/* --- Scripted replies (tests, demos) -------------------------------------------------- */
/* `script_json` is a JSON document:
 *   {"rules":[{"match":"substring", "reply":"text", "times":N, "error":"msg"}...],
 *    "default":"text"}
 * Each request goes to the first rule whose `match` occurs in the last user message (or all
 * messages when absent) and that has uses left (`times`, default unlimited). A rule with
 * `error` fails with AF_EBACKEND. No match and no default fails with a message quoting the
 * start of the prompt. Owned by the caller: af_llm_free. */
struct af_llm *af_llm_scripted_new(const char *script_json, char *err, size_t errlen);
/* Same, reading the script from a file. */
struct af_llm *af_llm_scripted_new_file(const char *path, char *err, size_t errlen);

/* --- Response cache (SQLite) ---------------------------------------------------------- */
/* A persistent store of replies keyed by a hash of (model, messages, sampling parameters);
 * the model is the request's, or the back-end's description when the request names none.
 * Stores text, model, finish reason and token usage; failed replies are never stored.
 * Thread-safe (one connection behind a mutex; WAL mode, so processes may share the file). */
struct af_llm_cache;

/* Opens (creating) the cache file `path`. Fails with AF_EIO naming the file. Owned by the
 * caller: af_llm_cache_close, after every handle made by af_llm_cache_wrap is freed. */
AF_NODISCARD int af_llm_cache_open(const char *path, struct af_llm_cache **out, char *err,
                                   size_t errlen);
void af_llm_cache_close(struct af_llm_cache *c);

#define AF_LLM_CACHE_ALL 1 /* also cache sampled calls (temperature > 0) */

/* A decorator answering from `c` when it can and calling `inner` otherwise (storing what it
 * returns). Without AF_LLM_CACHE_ALL only greedy calls (temperature 0) are cached. Borrows
 * both c and inner, which must outlive it. A hit has n_attempts 0. Owned: af_llm_free. */
struct af_llm *af_llm_cache_wrap(struct af_llm_cache *c, struct af_llm *inner, int flags);

/* Lookups answered from the cache (hits) and passed on (misses) since it was opened. */
void af_llm_cache_stats(struct af_llm_cache *c, uint64_t *hits, uint64_t *misses);

/* --- The in-process engine (`gguf:PATH`) ------------------------------------------------ */
struct af_engine_params;
/* A back-end on a GGUF model run in this process (agentflow/engine.h). path is "PATH" or
 * "PATH+lora:DIR" (a PEFT adapter folder applied on top of the model). Handles naming the same
 * spec share one loaded engine; p (may be NULL: defaults) applies when this call loads it.
 * Replies carry prompt_ids, response_ids and response_logprobs. On failure returns NULL with
 * a message naming the file and the fault. Owned by the caller: af_llm_free. */
struct af_llm *af_llm_gguf_new(const char *path, const struct af_engine_params *p, char *err,
                               size_t errlen);

/* A back-end on an engine the caller loaded and keeps (borrowed: it must outlive the handle),
 * for a trainer that changes the engine's adapter between batches (af_engine_set_lora).
 * `name` (may be NULL: the model's path) is what replies and traces call it. Owned by the
 * caller: af_llm_free, which leaves the engine alone. */
struct af_engine;
struct af_llm *af_llm_engine_new(struct af_engine *e, const char *name);

#endif
