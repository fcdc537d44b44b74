/*
 * sched.c - generation with many requests at once (continuous batching).
 *
 * Every af_engine_generate call queues a request and waits. One of the waiting threads is the
 * driver: it runs scheduler steps until its own request is done, then hands the role to the
 * next waiting request's thread. A step
 *   1. admits queued requests, first come first served: up to max_batch at once, and while
 *      the KV pool has room for their prompts (less what they will reuse);
 *   2. plans the step: the oldest request still in its prompt takes its KV sequence from the
 *      radix tree (the longest cached prefix of its prompt, of any earlier or running request,
 *      is reused) and gets the blocks for one chunk (prefill_chunk tokens); every request past
 *      its prompt gets the blocks for its next token and its drafts. When the pool has no
 *      block left, even after evicting every cached block no sequence holds, the newest
 *      request holding blocks is preempted: its blocks go back (its full ones stay cached)
 *      and it is requeued, to be recomputed when admitted again. The oldest never is: it
 *      takes blocks past the budget if it must, so one request always runs;
 *   3. decodes one token of every request past its prompt together: one matmul with a row per
 *      sequence for the projections and the MLP, attention per sequence (fwd_eval_rows). The
 *      prompt's chunk rides in the same forward pass, as rows of its sequence before the
 *      decode rows (as many of its tokens as the rows left by the decodes and their drafts
 *      allow), so the weights are read once for both: a decode step alone reads all of them
 *      for a few rows. With no decode to ride with, or only a sliver of the chunk left room,
 *      the chunk runs alone. A long prompt never stalls the others for more than a chunk; a
 *      finished prompt samples its first token.
 * After each evaluation the blocks that filled join the radix tree. Requests join and leave
 * at token boundaries. Each request samples with its own sampler and seed, so its text does
 * not depend on the others'; with the engine's batch_invariant mode its bits do not either.
 * The driver computes without holding the lock, so new requests queue while it works;
 * on_token callbacks run on the driver's thread.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "engine/engine_int.h"
#include "engine/model.h"
#include "engine/sample.h"
#include "engine/tokenizer.h"

enum rq_state { RQ_WAIT, RQ_PREFILL, RQ_DECODE, RQ_DONE };

struct gen_req {
    const struct af_engine_gen_params *p;
    struct af_engine_result *r;
    struct af_buf text;
    size_t cap;
    const int32_t *prompt;
    int64_t n_prompt;
    /* What the sequence must hold before decoding: the prompt, or after a preemption the
     * prompt and the tokens generated so far (resume, owned). fed of n_feed are in it. */
    const int32_t *feed;
    int32_t *resume;
    int64_t n_feed, fed;
    int resumed;        /* the sequence is being rebuilt after a preemption: nothing to sample */
    struct kv_seq *seq; /* &kv while the request holds blocks, else NULL */
    struct kv_seq kv;
    struct sampler *smp;
    int32_t pending; /* the token the next decode step feeds */
    enum rq_state st;
    int rc;
    char err[512];
    double t_decode0;
    pthread_cond_t cv;
    struct gen_req *next;
};

/* ---- exclusive use ------------------------------------------------------------------- */

static void wake_next(struct af_engine *e)
{
    for (struct gen_req *q = e->queue; q; q = q->next)
        if (q->st != RQ_DONE) {
            pthread_cond_signal(&q->cv);
            break;
        }
    pthread_cond_broadcast(&e->idle_cv);
}

void engine_exclusive_begin(struct af_engine *e, int drain)
{
    pthread_mutex_lock(&e->mu);
    while (e->busy || (drain && e->queue))
        pthread_cond_wait(&e->idle_cv, &e->mu);
    e->busy = 1;
    pthread_mutex_unlock(&e->mu);
}

void engine_exclusive_end(struct af_engine *e)
{
    pthread_mutex_lock(&e->mu);
    engine_kv_snapshot(e);
    e->busy = 0;
    wake_next(e);
    pthread_mutex_unlock(&e->mu);
}

/* ---- one request's tokens -------------------------------------------------------------- */

/* Cuts the text at the first stop string that ends in the part added since `from`. */
static int find_stop(const struct af_engine_gen_params *p, struct af_buf *text, size_t from)
{
    size_t best = (size_t)-1;
    for (size_t i = 0; i < p->n_stop; i++) {
        size_t sl = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (!sl)
            continue;
        size_t start = from > sl ? from - sl : 0;
        const char *hit = strstr(af_buf_str(text) + start, p->stop[i]);
        if (hit && (size_t)(hit - af_buf_str(text)) < best)
            best = (size_t)(hit - af_buf_str(text));
    }
    if (best == (size_t)-1)
        return 0;
    text->len = best;
    text->data[best] = '\0';
    return 1;
}

/* Records token id; returns 1 when generation must stop. */
static int take_token(struct af_engine *e, struct gen_req *g, int32_t id, float lp)
{
    struct af_engine_result *r = g->r;
    if (r->n_ids == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 64;
        r->ids = af_xrealloc(r->ids, g->cap * sizeof *r->ids);
        r->logprobs = af_xrealloc(r->logprobs, g->cap * sizeof *r->logprobs);
    }
    r->ids[r->n_ids] = id;
    r->logprobs[r->n_ids++] = lp;
    const struct tokenizer *tok = e->m->tok;
    if (tok && !g->p->ignore_eos && tok_is_eog(tok, id)) {
        r->finish_reason = "stop";
        return 1;
    }
    char piece[256];
    int len = tok ? tok_piece(tok, id, 0, piece, sizeof piece) : 0;
    if (len < 0)
        len = 0;
    size_t from = g->text.len;
    (void)af_buf_append(&g->text, piece, (size_t)len);
    if (find_stop(g->p, &g->text, from)) {
        r->finish_reason = "stop";
        return 1;
    }
    if (g->p->on_token && g->p->on_token(g->p->user, id, piece, (size_t)len)) {
        r->finish_reason = "stop";
        return 1;
    }
    if ((int)r->n_ids >= g->p->max_tokens) {
        r->finish_reason = "length";
        return 1;
    }
    if (g->seq->n + 1 > fwd_ctx_max_ctx(e->fc)) {
        r->finish_reason = "length";
        return 1;
    }
    return 0;
}

/* Moves the request on with the token id drawn from its sampler (log-prob lp). */
static void take_sampled(struct af_engine *e, struct gen_req *g, int32_t id, float lp)
{
    sampler_accept(g->smp, id);
    if (take_token(e, g, id, lp)) {
        g->st = RQ_DONE;
    } else {
        g->pending = id;
        g->st = RQ_DECODE;
    }
}

/* Samples from logits (modified by the penalties) and moves the request on. */
static void sample_next(struct af_engine *e, struct gen_req *g, float *logits)
{
    float lp = 0;
    const int32_t id = sampler_sample(g->smp, logits, &lp);
    take_sampled(e, g, id, lp);
}

static struct sampler_params to_sampler(const struct af_engine_gen_params *p)
{
    struct sampler_params sp = sampler_default_params();
    sp.temperature = p->temperature;
    sp.top_k = p->top_k;
    sp.top_p = p->top_p > 0 ? p->top_p : 1.0f;
    sp.min_p = p->min_p;
    sp.frequency_penalty = p->frequency_penalty;
    sp.presence_penalty = p->presence_penalty;
    sp.seed = p->seed;
    return sp;
}

static void fail_req(struct gen_req *g, int rc, const char *err)
{
    g->rc = rc;
    snprintf(g->err, sizeof g->err, "%s", err);
    g->st = RQ_DONE;
}

/* The prompt tokens g evaluates in its next chunk. */
static int64_t chunk_of(const struct af_engine *e, const struct gen_req *g)
{
    const int64_t left = g->n_feed - g->fed;
    return left < e->prefill_chunk ? left : e->prefill_chunk;
}

/* After n more prompt tokens of g were evaluated: their full blocks join the radix tree, and a
 * finished prompt samples its first token from logits (its last row's; NULL when resumed). */
static void prefill_done(struct af_engine *e, struct gen_req *g, int64_t n, float *logits)
{
    const int last = n == g->n_feed - g->fed;
    g->fed += n;
    radix_commit(e->tree, g->seq);
    if (!last)
        return;
    if (g->resumed) { /* its next token is known: decoding goes on where it stopped */
        g->resumed = 0;
        g->st = RQ_DECODE;
        return;
    }
    struct sampler_params sp = to_sampler(g->p);
    g->smp = sampler_new(&sp, e->m->hp.n_vocab);
    g->t_decode0 = af_clock_ms();
    g->r->finish_reason = "length";
    if (g->p->max_tokens <= 0) {
        g->st = RQ_DONE;
        return;
    }
    sample_next(e, g, logits);
}

/* One prompt chunk of g in a forward pass of its own (no decode to ride with). */
static void prefill_chunk(struct af_engine *e, struct gen_req *g)
{
    char err[512] = "";
    const int64_t n = chunk_of(e, g);
    const int last = n == g->n_feed - g->fed;
    const double t0 = af_clock_ms();
    int rc = fwd_eval(e->fc, g->seq, g->feed + g->fed, n,
                      last && !g->resumed ? FWD_LOGITS_LAST : FWD_LOGITS_NONE, e->logits, err,
                      sizeof err);
    g->r->prefill_ms += af_clock_ms() - t0;
    if (rc) {
        fail_req(g, rc, err);
        return;
    }
    prefill_done(e, g, n, e->logits);
}

/* ---- prompt-lookup drafts ------------------------------------------------------------ */

/* Token i of g's context: its prompt, then what it generated. */
static int32_t ctx_tok(const struct gen_req *g, int64_t i)
{
    return i < g->n_prompt ? g->prompt[i] : g->r->ids[i - g->n_prompt];
}

/* Guesses up to max tokens that follow g's context: after the latest earlier place where its
 * last 3 (else 2) tokens occurred, the tokens that came next there. Agents copy names and
 * numbers from their prompts, so such guesses are often right. Returns the count. */
static int64_t draft_for(const struct gen_req *g, int32_t *out, int64_t max)
{
    const int64_t n = g->n_prompt + (int64_t)g->r->n_ids;
    for (int64_t m = 3; m >= 2; m--) {
        if (n < m + 1)
            continue;
        for (int64_t start = n - m - 1; start >= 0; start--) {
            int64_t k = 0;
            while (k < m && ctx_tok(g, start + k) == ctx_tok(g, n - m + k))
                k++;
            if (k < m)
                continue;
            int64_t got = 0;
            for (int64_t i = start + m; i < n && got < max; i++)
                out[got++] = ctx_tok(g, i);
            return got;
        }
    }
    return 0;
}

#define FUSE_MIN_ROWS 64 /* the least part of a prompt chunk that rides in a decode step */

/* What one step runs: a prompt chunk, and decode rows (a request's token, then its drafts). */
struct plan {
    struct gen_req *pre;
    /* rows [0, n_pre): pre's chunk riding in the decode step (0: it runs alone, if at all) */
    int64_t n_pre;
    int64_t logits_from; /* the first row with logits (decode_step) */
    struct gen_req *reqs[FWD_MAX_ROWS];
    int64_t n;
    struct kv_seq *seqs[FWD_MAX_ROWS];
    int32_t toks[FWD_MAX_ROWS];
    int64_t first[FWD_MAX_ROWS + 1], rows;
};

struct sample_job {
    struct af_engine *e;
    const struct plan *pl;
    int32_t *ids;
    float *lps;
    _Atomic int64_t next;
};

/* Each request's first row, drawn from its own sampler; requests taken in turn by the threads. */
static void sample_rows(void *arg, int tid, int nth)
{
    (void)tid;
    (void)nth;
    struct sample_job *sj = arg;
    const int64_t V = sj->e->m->hp.n_vocab;
    for (int64_t j; (j = atomic_fetch_add(&sj->next, 1)) < sj->pl->n;) {
        sj->lps[j] = 0;
        const int64_t row = sj->pl->first[j] - sj->pl->logits_from;
        sj->ids[j] = sampler_sample(sj->pl->reqs[j]->smp,
                                    sj->e->step_logits + (size_t)row * (size_t)V, &sj->lps[j]);
    }
}

/* One token of every planned request, and with drafts on, up to draft_max more each: the
 * guessed tokens ride in the same step as extra rows of their sequence, and each is kept
 * while the token sampled before it equals it. Sampling is the same as without drafts (one
 * draw per kept token, in order), so a greedy or seeded request writes the same text. */
static void decode_step(struct af_engine *e, struct plan *pl)
{
    const int64_t V = e->m->hp.n_vocab;
    if (!e->step_logits)
        e->step_logits = af_xmalloc((size_t)FWD_MAX_ROWS * (size_t)V * sizeof(float));
    char err[512] = "";
    /* A riding chunk needs logits only for its last row, and only when it ends the prompt. */
    struct gen_req *pre = pl->n_pre ? pl->pre : NULL;
    const int pre_ends = pre && pl->n_pre == pre->n_feed - pre->fed && !pre->resumed;
    pl->logits_from = pl->n_pre - (pre_ends ? 1 : 0);
    const double t0 = af_clock_ms();
    int rc = fwd_eval_rows(e->fc, pl->seqs, pl->toks, pl->rows, pl->logits_from, e->step_logits,
                           err, sizeof err);
    if (pre)
        pre->r->prefill_ms += af_clock_ms() - t0;
    /* Each request's first row is drawn from its own sampler whatever the others do, so those
     * draws run on all threads (over the vocabulary, they cost as much as a small matmul);
     * taking the tokens (text, stop strings, callbacks) stays in order on this thread. */
    int32_t ids[FWD_MAX_ROWS];
    float lps[FWD_MAX_ROWS];
    if (!rc) {
        struct sample_job sj = {.e = e, .pl = pl, .ids = ids, .lps = lps};
        fwd_ctx_run(e->fc, pl->n < 2 ? 1 : fwd_ctx_threads(e->fc), sample_rows, &sj);
    }
    for (int64_t j = 0; j < pl->n; j++) {
        struct gen_req *g = pl->reqs[j];
        if (rc) {
            fail_req(g, rc, err);
            continue;
        }
        const int64_t n_draft = pl->first[j + 1] - pl->first[j] - 1;
        const int64_t base = g->seq->n - n_draft - 1; /* the position of the pending token */
        int64_t r = 0;
        for (;; r++) {
            /* The sequence holds the rows whose input is known to be right, as it would
             * without drafts (take_token checks its length); the KV of the rest stays in
             * place until it is kept or overwritten. */
            g->seq->n = base + r + 1;
            if (r == 0)
                take_sampled(e, g, ids[j], lps[j]);
            else
                sample_next(e, g,
                            e->step_logits +
                                (size_t)(pl->first[j] + r - pl->logits_from) * (size_t)V);
            if (g->st == RQ_DONE || r == n_draft || g->pending != pl->toks[pl->first[j] + r + 1])
                break;
        }
        radix_commit(e->tree, g->seq);
        e->n_drafted += n_draft;
        e->n_draft_kept += r;
        g->r->n_drafted += (size_t)n_draft;
        g->r->n_draft_kept += (size_t)r;
    }
    if (pre && rc)
        fail_req(pre, rc, err);
    else if (pre)
        prefill_done(e, pre, pl->n_pre, pre_ends ? e->step_logits : NULL);
}

/* ---- the driver ------------------------------------------------------------------------ */

/* Blocks the pool must still find for q's prompt (and its first token), and of the blocks
 * it will reuse, those that sit idle in the cache now (*idle): taking them leaves less room. */
static int64_t prompt_blocks(const struct af_engine *e, const struct gen_req *q, int64_t *idle)
{
    int64_t shared = 0;
    radix_peek(e->tree, q->feed, q->n_feed, &shared, idle);
    return (q->n_feed + 1 + KV_BLOCK - 1) / KV_BLOCK - shared;
}

/* Admits queued requests while the pool has room for their prompts (less what they reuse from
 * the radix tree), beside what the admitted ones not yet started will take, with a block to
 * spare for each running decode; unless nothing runs (one request always does). A running
 * request's growth is not reserved: when the pool runs out, preemption makes room. Their
 * sequences come later, when their prompt is next to be evaluated, so they reuse what the
 * requests before them just computed. Mu held. */
static void admit(struct af_engine *e)
{
    int active = 0;
    int64_t room = e->pool->max_blocks - (e->pool->n_used - e->pool->n_cached), idle = 0;
    for (const struct gen_req *q = e->queue; q; q = q->next) {
        if (q->st == RQ_DECODE) {
            active++;
            room--;
        } else if (q->st == RQ_PREFILL) {
            active++;
            if (!q->seq) {
                room -= prompt_blocks(e, q, &idle);
                room -= idle;
            }
        }
    }
    for (struct gen_req *q = e->queue; q && active < e->max_batch; q = q->next) {
        if (q->st != RQ_WAIT)
            continue;
        const int64_t need = prompt_blocks(e, q, &idle) + idle;
        if (active > 0 && need > room)
            break;
        q->st = RQ_PREFILL;
        room -= need;
        active++;
    }
}

/* Takes g's blocks back (its full blocks and its last partial one stay cached, so when it is
 * admitted again the part still cached is reused and the rest evaluated anew) and requeues
 * it; its sampler and output stay, and decoding resumes with the token it was about to feed.
 * Mu held. */
static void preempt(struct af_engine *e, struct gen_req *g)
{
    if (g->st == RQ_DECODE) {
        /* The sequence holds the prompt and every output token but the pending one. */
        const struct af_engine_result *r = g->r;
        const int64_t n = g->n_prompt + (int64_t)r->n_ids - 1;
        int32_t *buf = af_xmalloc((size_t)n * sizeof *buf);
        memcpy(buf, g->prompt, (size_t)g->n_prompt * sizeof *buf);
        memcpy(buf + g->n_prompt, r->ids, (size_t)(r->n_ids - 1) * sizeof *buf);
        free(g->resume);
        g->resume = buf;
        g->feed = buf;
        g->n_feed = n;
        g->resumed = 1;
    }
    radix_release(e->tree, g->seq, 1);
    g->seq = NULL;
    g->fed = 0;
    g->st = RQ_WAIT;
    e->n_preempted++;
}

/* The newest request that holds blocks. */
static struct gen_req *newest_holder(struct af_engine *e)
{
    struct gen_req *v = NULL;
    for (struct gen_req *q = e->queue; q; q = q->next)
        if (q->seq && q->st != RQ_DONE)
            v = q;
    return v;
}

/* Gives g the blocks for positions [0, need), preempting the newest holders while the pool has
 * none; g itself when it is the newest. Returns 0 when g was preempted. Mu held. */
static int reserve(struct af_engine *e, struct gen_req *g, int64_t need)
{
    while (kv_seq_reserve(g->seq, need, 0) != AF_OK) {
        struct gen_req *v = newest_holder(e);
        int older = 0; /* does a request older than g hold blocks? */
        for (struct gen_req *q = e->queue; q != g; q = q->next)
            older |= q->seq && q->st != RQ_DONE;
        if (v == g && !older) /* g is the only one: it runs, past the budget if need be */
            return kv_seq_reserve(g->seq, need, 1) == AF_OK;
        preempt(e, v);
        if (v == g)
            return 0;
    }
    return 1;
}

/* Adds g's decode rows (its pending token and its drafts) to the plan, with their blocks. */
static void plan_decode(struct af_engine *e, struct plan *pl, struct gen_req *g, int64_t n_later)
{
    const int64_t at = pl->rows;
    pl->toks[at] = g->pending;
    /* Drafts only while every request still has its own row. */
    int64_t room = FWD_MAX_ROWS - at - 1 - n_later;
    int64_t max = e->draft_max < room ? e->draft_max : room;
    int64_t left = fwd_ctx_max_ctx(e->fc) - g->seq->n - 1;
    max = max < left ? max : left;
    int64_t d = max > 0 && g->r->n_ids > 0 ? draft_for(g, pl->toks + at + 1, max) : 0;
    /* Drafts are a bonus: without the blocks for them, the step runs without. */
    if (d && kv_seq_reserve(g->seq, g->seq->n + 1 + d, 0) != AF_OK)
        d = 0;
    if (!reserve(e, g, g->seq->n + 1))
        return;
    pl->first[pl->n] = at;
    pl->reqs[pl->n++] = g;
    for (int64_t k = 0; k <= d; k++)
        pl->seqs[at + k] = g->seq;
    pl->rows = at + 1 + d;
}

/* Plans one step: the oldest prompt's chunk (its sequence taken from the radix tree first) and
 * a decode row for each request past its prompt, with every block they write; preempts as
 * `reserve` says. Mu held. */
static void plan_step(struct af_engine *e, struct plan *pl)
{
    pl->pre = NULL;
    pl->n = pl->rows = 0;
    for (struct gen_req *q = e->queue; q; q = q->next)
        if (q->st == RQ_PREFILL) {
            pl->pre = q;
            break;
        }
    struct gen_req *pre = pl->pre;
    if (pre && !pre->seq) {
        kv_seq_init_pool(&pre->kv, e->pool);
        pre->seq = &pre->kv;
        pre->fed = radix_acquire(e->tree, pre->seq, pre->feed, pre->n_feed);
        if (!pre->resumed)
            pre->r->n_cached = (size_t)pre->fed;
    }
    int64_t n_dec = 0;
    for (struct gen_req *q = e->queue; q; q = q->next)
        n_dec += q->st == RQ_DECODE;
    if (n_dec > e->max_batch)
        n_dec = e->max_batch;
    /* Oldest first, so that a shortage preempts the newest. */
    int64_t seen = 0;
    for (struct gen_req *q = e->queue; q; q = q->next) {
        if (q == pre && q->seq && !reserve(e, q, q->seq->n + chunk_of(e, q)))
            pl->pre = NULL;
        else if (q->st == RQ_DECODE && seen < n_dec) {
            seen++;
            plan_decode(e, pl, q, n_dec - seen);
        }
    }
    /* A preemption after a request was planned took its blocks: drop it from the plan. */
    int64_t k = 0, rows = 0;
    for (int64_t j = 0; j < pl->n; j++) {
        struct gen_req *g = pl->reqs[j];
        const int64_t r0 = pl->first[j], nr = (j + 1 < pl->n ? pl->first[j + 1] : pl->rows) - r0;
        if (g->st != RQ_DECODE)
            continue;
        memmove(pl->seqs + rows, pl->seqs + r0, (size_t)nr * sizeof *pl->seqs);
        memmove(pl->toks + rows, pl->toks + r0, (size_t)nr * sizeof *pl->toks);
        pl->reqs[k] = g;
        pl->first[k++] = rows;
        rows += nr;
    }
    pl->n = k;
    pl->rows = rows;
    pl->first[k] = rows;
    if (pl->pre && pl->pre->st != RQ_PREFILL)
        pl->pre = NULL;
    /* The chunk rides in front of the decode rows, in the rows they and their drafts leave; if
     * that is only a sliver of it, it runs alone instead, whole, so that the prompt still
     * advances a chunk a step. */
    pl->n_pre = 0;
    if (pl->pre && pl->n > 0 && !e->prefill_alone) {
        const int64_t c = chunk_of(e, pl->pre),
                      np = c < FWD_MAX_ROWS - rows ? c : FWD_MAX_ROWS - rows;
        if (np == c || np >= FUSE_MIN_ROWS) {
            memmove(pl->seqs + np, pl->seqs, (size_t)rows * sizeof *pl->seqs);
            memmove(pl->toks + np, pl->toks, (size_t)rows * sizeof *pl->toks);
            for (int64_t j = 0; j <= k; j++)
                pl->first[j] += np;
            for (int64_t i = 0; i < np; i++) {
                pl->seqs[i] = pl->pre->seq;
                pl->toks[i] = pl->pre->feed[pl->pre->fed + i];
            }
            pl->rows += np;
            pl->n_pre = np;
        }
    }
}

int64_t engine_queue_len(const struct af_engine *e)
{
    int64_t n = 0;
    for (const struct gen_req *q = e->queue; q; q = q->next)
        n++;
    return n;
}

void engine_kv_snapshot(struct af_engine *e)
{
    const struct radix_stats st = radix_stats(e->tree);
    e->kv_snap.blocks_used = e->pool->n_used - e->pool->n_cached;
    e->kv_snap.blocks_cached = e->pool->n_cached;
    e->kv_snap.nodes = st.n_nodes;
    e->kv_snap.hits = st.hits;
    e->kv_snap.evicted = st.evicted;
}

/* Hands finished requests' sequences back and wakes their threads; called with mu held. */
static void retire(struct af_engine *e)
{
    for (struct gen_req **pp = &e->queue; *pp;) {
        struct gen_req *q = *pp;
        if (q->st != RQ_DONE) {
            pp = &q->next;
            continue;
        }
        if (q->seq) {
            if (q->rc) /* keep only the prompt part that was evaluated without error */
                kv_seq_truncate(q->seq, q->fed);
            radix_release(e->tree, q->seq, 1);
            q->seq = NULL;
        }
        if (q->smp) {
            q->r->decode_ms = af_clock_ms() - q->t_decode0;
            sampler_free(q->smp);
            q->smp = NULL;
        }
        *pp = q->next;
        pthread_cond_signal(&q->cv);
    }
    engine_kv_snapshot(e);
}

/* Runs steps until `me` is done. Called and returns with mu held. */
static void drive(struct af_engine *e, struct gen_req *me)
{
    struct plan *pl = af_xmalloc(sizeof *pl);
    while (me->st != RQ_DONE) {
        admit(e);
        plan_step(e, pl);
        pthread_mutex_unlock(&e->mu);
        if (pl->pre && !pl->n_pre)
            prefill_chunk(e, pl->pre);
        if (pl->n)
            decode_step(e, pl);
        pthread_mutex_lock(&e->mu);
        e->n_fused += pl->n_pre > 0;
        e->n_alone += pl->pre && !pl->n_pre;
        if (pl->n) {
            e->n_steps++;
            e->n_rows += pl->n;
            e->max_rows = pl->n > e->max_rows ? pl->n : e->max_rows;
        }
        retire(e);
    }
    free(pl);
}

static int in_queue(const struct af_engine *e, const struct gen_req *g)
{
    for (const struct gen_req *q = e->queue; q; q = q->next)
        if (q == g)
            return 1;
    return 0;
}

int af_engine_generate(struct af_engine *e, const int32_t *prompt, size_t n_prompt,
                       const struct af_engine_gen_params *p, struct af_engine_result *out,
                       char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!n_prompt) {
        af_errf(err, errlen, "the prompt has no tokens");
        return AF_EINVAL;
    }
    struct gen_req g;
    memset(&g, 0, sizeof g);
    g.p = p;
    g.r = out;
    g.prompt = prompt;
    g.n_prompt = (int64_t)n_prompt;
    g.feed = prompt;
    g.n_feed = (int64_t)n_prompt;
    af_buf_init(&g.text, AF_BUF_NOLIMIT);
    pthread_cond_init(&g.cv, NULL);
    out->n_prompt = n_prompt;
    out->finish_reason = "length";
    out->drafting = e->draft_max > 0;
    pthread_mutex_lock(&e->mu);
    struct gen_req **tail = &e->queue;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &g;
    while (g.st != RQ_DONE || g.seq || in_queue(e, &g)) {
        if (!e->busy) {
            e->busy = 1;
            drive(e, &g);
            e->busy = 0;
            wake_next(e);
        } else {
            pthread_cond_wait(&g.cv, &e->mu);
        }
    }
    pthread_mutex_unlock(&e->mu);
    pthread_cond_destroy(&g.cv);
    free(g.resume);
    out->text = af_buf_detach(&g.text);
    if (!out->text)
        out->text = af_xstrdup("");
    if (g.rc)
        af_errf(err, errlen, "%s", g.err);
    return g.rc;
}
