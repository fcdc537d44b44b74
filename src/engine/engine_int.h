/*
 * engine_int.h - the engine's state, shared by engine.c (loading, tokens, logits, adapters)
 * and sched.c (generation: the scheduler that runs many requests at once).
 *
 * Locking: mu guards the queue and `busy`. The thread that holds `busy` (the scheduler's
 * driver, or an exclusive call) alone touches the forward context, the KV pool and its radix
 * tree, the adapter and the requests' sequences, without holding mu while it computes. What
 * others may read of the pool (af_engine_info_json) is copied into kv_snap under mu.
 */
#ifndef AF_ENGINE_ENGINE_INT_H
#define AF_ENGINE_ENGINE_INT_H

#include <pthread.h>
#include <stddef.h>

#include "agentflow/engine.h"
#include "engine/chat.h"
#include "engine/forward.h"
#include "engine/kv_pool.h"
#include "engine/radix.h"

struct gen_req;

struct af_engine {
    struct model *m;
    struct lora_adapter *lora; /* owned; NULL = none */
    char *lora_dir;            /* owned; NULL = none */
    struct fwd_ctx *fc;
    struct kv_pool *pool; /* the paged KV cache: every sequence's blocks */
    struct radix *tree;   /* its index of cached prefixes */
    enum chat_template tmpl;
    char *default_system;
    float *logits;      /* n_vocab */
    pthread_mutex_t mu; /* the queue, the busy flag; the rest belongs to whoever is busy */
    pthread_cond_t idle_cv;
    int busy;                 /* a thread drives the scheduler or runs an exclusive call */
    struct gen_req *queue;    /* generations not yet finished, oldest first */
    int prefill_chunk;        /* prompt tokens one request evaluates per scheduler step */
    int max_batch;            /* sequences decoded together */
    int invariant;            /* batch_invariant mode */
    int draft_max;            /* prompt-lookup draft tokens per request and step; 0 = off */
    int prefill_alone;        /* AGENTFLOW_PREFILL_ALONE=1: chunks never ride with decodes */
    int64_t kv_budget_tokens; /* the pool's size in tokens (blocks x KV_BLOCK) */
    float *step_logits;       /* [max_batch][n_vocab] */
    void **owned_w; /* weight buffers set by af_engine_set_weights (freed with the engine) */
    size_t n_owned_w;
    /* counters of the scheduler (under mu): decode steps, rows they ran, the widest one */
    long long n_steps, n_rows, max_rows;
    long long n_drafted, n_draft_kept; /* draft tokens tried and kept (driver only) */
    long long n_preempted;             /* generations paused for the KV budget (under mu) */
    long long n_fused, n_alone; /* prompt chunks run in a decode step, and alone (under mu) */
    struct kv_snap {            /* the pool and tree as of the last step (under mu) */
        int64_t blocks_used, blocks_cached, nodes;
        long long hits, evicted;
    } kv_snap;
};

/* Copies the pool's counters into e->kv_snap; mu held, by the busy thread. */
void engine_kv_snapshot(struct af_engine *e);

/* Generations queued, running or finishing (not yet handed back); mu held. */
int64_t engine_queue_len(const struct af_engine *e);

/* Waits until no thread is busy (and, with drain, no generation is queued or running), then
 * makes the caller the busy one. */
void engine_exclusive_begin(struct af_engine *e, int drain);
/* Ends it and hands the scheduler to a waiting generation, if any. */
void engine_exclusive_end(struct af_engine *e);

#endif
