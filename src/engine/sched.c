/*
 * sched.c - generation with many requests at once (continuous batching).
 *
 * Every af_engine_generate call queues a request and waits. One of the waiting threads is the
 * driver: it runs scheduler steps until its own request is done, then hands the role to the
 * next waiting request's thread. A step
 *   1. admits queued requests (up to max_batch at once), each taking its own KV sequence from
 *      the prefix cache (the longest cached prefix of its prompt is reused);
 *   2. evaluates one chunk (prefill_chunk tokens) of the oldest request still in its prompt,
 *      so a long prompt never stalls the others for more than a chunk; a finished prompt
 *      samples its first token;
 *   3. decodes one token of every request past its prompt together: one matmul with a row per
 *      sequence for the projections and the MLP, attention per sequence (fwd_eval_rows).
 * Requests join and leave at token boundaries. Each request samples with its own sampler and
 * seed, so its text does not depend on the others'; with the engine's batch_invariant mode its
 * bits do not either. The driver computes without holding the lock, so new requests queue
 * while it works; on_token callbacks run on the driver's thread.
 */
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
    int64_t n_prompt, fed; /* prompt tokens in the sequence */
    struct kv_seq *seq;
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

/* Samples from logits (modified by the penalties) and moves the request on. */
static void sample_next(struct af_engine *e, struct gen_req *g, float *logits)
{
    float lp = 0;
    const int32_t id = sampler_sample(g->smp, logits, &lp);
    sampler_accept(g->smp, id);
    if (take_token(e, g, id, lp)) {
        g->st = RQ_DONE;
    } else {
        g->pending = id;
        g->st = RQ_DECODE;
    }
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

/* One prompt chunk of g; a finished prompt samples its first token. */
static void prefill_chunk(struct af_engine *e, struct gen_req *g)
{
    char err[512] = "";
    const int64_t left = g->n_prompt - g->fed;
    const int64_t n = left < e->prefill_chunk ? left : e->prefill_chunk;
    const int last = n == left;
    const double t0 = af_clock_ms();
    int rc = fwd_eval(e->fc, g->seq, g->prompt + g->fed, n,
                      last ? FWD_LOGITS_LAST : FWD_LOGITS_NONE, e->logits, err, sizeof err);
    g->r->prefill_ms += af_clock_ms() - t0;
    if (rc) {
        fail_req(g, rc, err);
        return;
    }
    g->fed += n;
    if (!last)
        return;
    struct sampler_params sp = to_sampler(g->p);
    g->smp = sampler_new(&sp, e->m->hp.n_vocab);
    g->t_decode0 = af_clock_ms();
    g->r->finish_reason = "length";
    if (g->p->max_tokens <= 0) {
        g->st = RQ_DONE;
        return;
    }
    sample_next(e, g, e->logits);
}

/* One token of every request in rows[0..n). */
static void decode_step(struct af_engine *e, struct gen_req **rows, int64_t n)
{
    const int64_t V = e->m->hp.n_vocab;
    if (!e->step_logits)
        e->step_logits = af_xmalloc((size_t)e->max_batch * (size_t)V * sizeof(float));
    struct kv_seq *seqs[256];
    int32_t toks[256];
    for (int64_t j = 0; j < n; j++) {
        seqs[j] = rows[j]->seq;
        toks[j] = rows[j]->pending;
    }
    char err[512] = "";
    int rc = fwd_eval_rows(e->fc, seqs, toks, n, e->step_logits, err, sizeof err);
    for (int64_t j = 0; j < n; j++) {
        if (rc)
            fail_req(rows[j], rc, err);
        else
            sample_next(e, rows[j], e->step_logits + (size_t)j * (size_t)V);
    }
}

/* ---- the driver ------------------------------------------------------------------------ */

/* Admits queued requests; called with mu held. */
static void admit(struct af_engine *e)
{
    int active = 0;
    for (struct gen_req *q = e->queue; q; q = q->next)
        active += q->st == RQ_PREFILL || q->st == RQ_DECODE;
    for (struct gen_req *q = e->queue; q && active < e->max_batch; q = q->next) {
        if (q->st != RQ_WAIT)
            continue;
        int64_t reused = 0;
        q->seq = prefix_acquire(e->pc, q->prompt, q->n_prompt, &reused);
        q->fed = reused;
        q->r->n_cached = (size_t)reused;
        q->st = RQ_PREFILL;
        active++;
    }
}

/* Hands finished requests' sequences back and wakes their threads; called with mu held. */
static void retire(struct af_engine *e)
{
    for (struct gen_req **pp = &e->queue; *pp;) {
        struct gen_req *q = *pp;
        if (q->st != RQ_DONE || !q->seq) {
            pp = &q->next;
            continue;
        }
        if (q->rc) /* keep only the prompt part that was evaluated without error */
            kv_seq_truncate(q->seq, q->fed);
        prefix_release(e->pc, q->seq);
        q->seq = NULL;
        if (q->smp) {
            q->r->decode_ms = af_clock_ms() - q->t_decode0;
            sampler_free(q->smp);
            q->smp = NULL;
        }
        *pp = q->next;
        pthread_cond_signal(&q->cv);
    }
}

/* Runs steps until `me` is done. Called and returns with mu held. */
static void drive(struct af_engine *e, struct gen_req *me)
{
    struct gen_req *rows[256];
    while (me->st != RQ_DONE) {
        admit(e);
        struct gen_req *pre = NULL;
        int64_t n = 0;
        for (struct gen_req *q = e->queue; q; q = q->next) {
            if (q->st == RQ_PREFILL && !pre)
                pre = q;
            else if (q->st == RQ_DECODE && n < e->max_batch)
                rows[n++] = q;
        }
        pthread_mutex_unlock(&e->mu);
        if (pre)
            prefill_chunk(e, pre);
        if (n)
            decode_step(e, rows, n);
        pthread_mutex_lock(&e->mu);
        if (n) {
            e->n_steps++;
            e->n_rows += n;
            e->max_rows = n > e->max_rows ? n : e->max_rows;
        }
        retire(e);
    }
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
    af_buf_init(&g.text, AF_BUF_NOLIMIT);
    pthread_cond_init(&g.cv, NULL);
    out->n_prompt = n_prompt;
    out->finish_reason = "length";
    pthread_mutex_lock(&e->mu);
    struct gen_req **tail = &e->queue;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &g;
    while (g.st != RQ_DONE || g.seq) {
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
    out->text = af_buf_detach(&g.text);
    if (!out->text)
        out->text = af_xstrdup("");
    if (g.rc)
        af_errf(err, errlen, "%s", g.err);
    return g.rc;
}
