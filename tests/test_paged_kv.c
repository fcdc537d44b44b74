/*
 * test_paged_kv.c - the paged KV cache (engine/kv_pool.h) and its radix tree (engine/radix.h):
 * unit tests of the tree and the pool (insert, longest match, reference counts, LRU eviction,
 * copy-on-write of a partial block, invalidation), then through the engine: a request that
 * shares 2,000 tokens with a finished one evaluates only the rest and gets a cold run's bits;
 * 32 concurrent requests in a pool far too small for them all finish with what each writes
 * alone; a request cancelled in the middle of a batch gives its blocks back (run under ASan);
 * rollouts of one prompt share it while the first still runs; new weights drop the cached KV.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agentflow/engine.h"
#include "engine/kv_pool.h"
#include "engine/model.h"
#include "engine/radix.h"

/* ---- the tree and the pool, without a model's weights --------------------------------- */

static struct model shape(void)
{
    struct model m;
    memset(&m, 0, sizeof m);
    m.hp.n_layer = 2;
    m.hp.n_head_kv = 1;
    m.hp.head_dim = 4;
    return m;
}

/* Makes s hold tokens[0..n) with recognisable KV: every float of position t is t + 0.5 (what
 * a forward pass would write), then adds its full blocks to the tree. */
static void fill(struct radix *t, struct kv_seq *s, const int32_t *tokens, int64_t n)
{
    assert_int_equal(kv_seq_reserve(s, n, 0), AF_OK);
    for (int64_t p = s->n; p < n; p++) {
        for (int64_t l = 0; l < s->n_layer; l++) {
            float *k = kv_block_k(s->pool, s->blocks[p / KV_BLOCK], l);
            float *v = kv_block_v(s->pool, s->blocks[p / KV_BLOCK], l);
            for (int64_t d = 0; d < s->kv_dim; d++) {
                k[d * KV_BLOCK + p % KV_BLOCK] = (float)p + 0.5f;
                v[(p % KV_BLOCK) * s->kv_dim + d] = (float)p + 0.5f;
            }
        }
        s->tokens[p] = tokens[p];
    }
    s->n = n;
    radix_commit(t, s);
}

static void seq_of(int32_t *out, int64_t n, int32_t base)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = base + (int32_t)i;
}

/* Shared full blocks, a copied partial one, and the reference counts on each. */
static void test_match_share_and_copy(void **state)
{
    (void)state;
    struct model m = shape();
    struct kv_pool *p = kv_pool_new(&m, 0, 0);
    struct radix *t = radix_new(p);
    int32_t a[40], b[40];
    seq_of(a, 40, 100);
    memcpy(b, a, sizeof b);
    b[35] = 7; /* b shares 35 tokens with a */
    struct kv_seq sa, sb;
    kv_seq_init_pool(&sa, p);
    kv_seq_init_pool(&sb, p);
    assert_int_equal(radix_acquire(t, &sa, a, 40), 0);
    fill(t, &sa, a, 40);
    /* While a runs, its two full blocks are on the tree, its partial third is not. */
    assert_int_equal(radix_acquire(t, &sb, b, 40), 32);
    assert_int_equal(sb.blocks[0], sa.blocks[0]);
    assert_int_equal(sb.blocks[1], sa.blocks[1]);
    assert_int_equal(p->blk[sa.blocks[0]].ref, 3); /* a, b and the tree */
    radix_release(t, &sb, 0);
    assert_int_equal(p->blk[sa.blocks[0]].ref, 2);
    const int32_t tail = sa.blocks[2];
    radix_release(t, &sa, 1); /* now the partial block is cached too */
    assert_int_equal(p->blk[tail].ref, 1);
    assert_int_equal(p->n_cached, 3);
    assert_int_equal(radix_acquire(t, &sb, b, 40), 35);
    assert_int_equal(sb.n_blocks, 3);
    assert_true(sb.blocks[2] != tail); /* a copy: b writes its position 35 into its own */
    assert_int_equal(p->blk[sb.blocks[2]].ref, 1);
    for (int64_t pos = 32; pos < 35; pos++)
        assert_true(kv_block_v(p, sb.blocks[2], 1)[(pos % KV_BLOCK) * sb.kv_dim] ==
                    (float)pos + 0.5f);
    for (int64_t i = 0; i < 35; i++)
        assert_int_equal(sb.tokens[i], b[i]);
    /* The last token is always evaluated: a's own prompt reuses 39 of its 40. */
    struct kv_seq sc;
    kv_seq_init_pool(&sc, p);
    assert_int_equal(radix_acquire(t, &sc, a, 40), 39);
    radix_release(t, &sc, 0);
    radix_release(t, &sb, 0);
    const struct radix_stats st = radix_stats(t);
    assert_int_equal(st.n_nodes, 3);
    assert_int_equal(st.cached_blocks, 3);
    assert_int_equal(st.hits, 32 + 35 + 39);
    radix_free(t);
    assert_int_equal(p->n_used, 0);
    kv_pool_free(p);
}

/* Running sequences add blocks as they fill: a second prompt reuses a running one's. A block
 * someone holds is never evicted; the pool then fails without force and grows with it. */
static void test_held_blocks_stay(void **state)
{
    (void)state;
    struct model m = shape();
    struct kv_pool *p = kv_pool_new(&m, 0, 0);
    p->max_blocks = 3;
    struct radix *t = radix_new(p);
    int32_t a[48];
    seq_of(a, 48, 1);
    struct kv_seq s;
    kv_seq_init_pool(&s, p);
    assert_int_equal(radix_acquire(t, &s, a, 48), 0);
    fill(t, &s, a, 48);
    int64_t nb, idle;
    radix_peek(t, a, 48, &nb, &idle);
    assert_int_equal(nb, 2); /* at most n - 1 = 47 tokens: two whole blocks */
    assert_int_equal(idle, 0);
    int32_t id;
    assert_int_equal(kv_pool_alloc(p, 0, &id), AF_ENOMEM);
    assert_int_equal(kv_pool_alloc(p, 1, &id), AF_OK);
    assert_int_equal(p->n_used, 4);
    kv_pool_unref(p, id); /* past the budget: its storage goes back */
    assert_int_equal(p->n_live, 3);
    radix_release(t, &s, 1);
    radix_peek(t, a, 48, &nb, &idle);
    assert_int_equal(idle, 2);
    assert_int_equal(kv_pool_alloc(p, 0, &id), AF_OK); /* evicts the last block */
    assert_int_equal(radix_stats(t).evicted, 1);
    kv_pool_unref(p, id);
    radix_free(t);
    kv_pool_free(p);
}

/* Unheld leaves go least recently used first; a reuse makes a path recent again. */
static void test_lru_order(void **state)
{
    (void)state;
    struct model m = shape();
    struct kv_pool *p = kv_pool_new(&m, 0, 0);
    p->max_blocks = 4;
    struct radix *t = radix_new(p);
    int32_t x[17], y[17], z[17];
    seq_of(x, 17, 100);
    seq_of(y, 17, 200);
    seq_of(z, 17, 300);
    int32_t *prompts[] = {x, y, z, x}; /* x again: now the most recent */
    for (int i = 0; i < 4; i++) {
        struct kv_seq s;
        kv_seq_init_pool(&s, p);
        const int64_t got = radix_acquire(t, &s, prompts[i], 17);
        assert_int_equal(got, i == 3 ? 16 : 0);
        fill(t, &s, prompts[i], 16);
        radix_release(t, &s, 0);
    }
    assert_int_equal(p->n_cached, 3);
    int32_t ids[3];
    assert_int_equal(kv_pool_alloc(p, 0, &ids[0]), AF_OK); /* a 4th block: room left */
    assert_int_equal(kv_pool_alloc(p, 0, &ids[1]), AF_OK); /* evicts y */
    int64_t nb, idle;
    radix_peek(t, y, 17, &nb, &idle);
    assert_int_equal(nb, 0);
    radix_peek(t, x, 17, &nb, &idle);
    assert_int_equal(nb, 1);
    assert_int_equal(kv_pool_alloc(p, 0, &ids[2]), AF_OK); /* then z */
    radix_peek(t, z, 17, &nb, &idle);
    assert_int_equal(nb, 0);
    radix_peek(t, x, 17, &nb, &idle);
    assert_int_equal(nb, 1);
    for (int i = 0; i < 3; i++)
        kv_pool_unref(p, ids[i]);
    radix_free(t);
    kv_pool_free(p);
}

/* Writing into a shared block copies it first; invalidation drops what the old weights made. */
static void test_copy_on_write_and_invalidate(void **state)
{
    (void)state;
    struct model m = shape();
    struct kv_pool *p = kv_pool_new(&m, 0, 0);
    struct radix *t = radix_new(p);
    int32_t a[33];
    seq_of(a, 33, 5);
    struct kv_seq s;
    kv_seq_init_pool(&s, p);
    assert_int_equal(radix_acquire(t, &s, a, 33), 0);
    fill(t, &s, a, 32);
    const int32_t shared = s.blocks[1];
    assert_int_equal(p->blk[shared].ref, 2);
    kv_seq_truncate(&s, 20); /* position 20 lies in the tree's block */
    assert_int_equal(kv_seq_blocks_needed(&s, 21), 1);
    assert_int_equal(kv_seq_reserve(&s, 21, 0), AF_OK);
    assert_true(s.blocks[1] != shared);
    assert_int_equal(p->blk[shared].ref, 1);
    assert_true(kv_block_k(p, s.blocks[1], 0)[KV_BLOCK + 3] == 19.5f);
    radix_release(t, &s, 0);
    radix_invalidate(t);
    assert_int_equal(radix_stats(t).n_nodes, 0);
    assert_int_equal(p->n_used, 0);
    kv_seq_init_pool(&s, p);
    assert_int_equal(radix_acquire(t, &s, a, 33), 0);
    radix_release(t, &s, 0);
    radix_free(t);
    kv_pool_free(p);
}

/* ---- through the engine ----------------------------------------------------------------- */

static char g_dir[64], g_model[128];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_test_paged_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 23, NULL};
    char err[512];
    return af_engine_make_random(&rp, g_model, err, sizeof err) == AF_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    unlink(g_model);
    rmdir(g_dir);
    return 0;
}

static struct af_engine *load(size_t kv_bytes)
{
    struct af_engine_params p = af_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 4096;
    p.batch_invariant = 1;
    p.kv_budget_bytes = kv_bytes;
    struct af_engine *e = NULL;
    char err[512];
    if (af_engine_load(g_model, &p, &e, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    return e;
}

static long long kv_field(struct af_engine *e, const char *obj, const char *key)
{
    char *info = af_engine_info_json(e);
    json_t *j = json_loads(info, 0, NULL);
    long long v = (long long)json_integer_value(json_object_get(json_object_get(j, obj), key));
    json_decref(j);
    free(info);
    return v;
}

/* Token ids from a seeded generator, in [3, n_vocab). */
static void random_ids(int32_t *out, size_t n, uint64_t seed, int64_t n_vocab)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        out[i] = 3 + (int32_t)((seed >> 33) % (uint64_t)(n_vocab - 3));
    }
}

static void assert_same(const struct af_engine_result *a, const struct af_engine_result *b)
{
    assert_int_equal(a->n_ids, b->n_ids);
    assert_memory_equal(a->ids, b->ids, a->n_ids * sizeof *a->ids);
    assert_memory_equal(a->logprobs, b->logprobs, a->n_ids * sizeof *a->logprobs);
}

/* A request sharing 2,000 tokens (125 blocks) with a finished one evaluates only its own 60,
 * and its tokens, log-probs and logits have a cold engine's bits. */
static void test_radix_reuse_2000(void **state)
{
    (void)state;
    struct af_engine *warm = load(0), *cold = load(0);
    const int64_t nv = af_engine_n_vocab(warm);
    enum { SHARED = 2000, TAIL = 60 };
    int32_t *p1 = malloc((SHARED + TAIL) * sizeof *p1), *p2 = malloc((SHARED + TAIL) * sizeof *p2);
    random_ids(p1, SHARED + TAIL, 1, nv);
    memcpy(p2, p1, SHARED * sizeof *p2);
    random_ids(p2 + SHARED, TAIL, 2, nv);
    p2[SHARED] = p1[SHARED] == 3 ? 4 : 3; /* they part right after the shared 2,000 */
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 16;
    gp.ignore_eos = 1;
    gp.temperature = 0.8f;
    gp.seed = 9;
    char err[512];
    struct af_engine_result first, second, ref;
    assert_int_equal(af_engine_generate(warm, p1, SHARED + TAIL, &gp, &first, err, sizeof err), 0);
    assert_int_equal(first.n_cached, 0);
    assert_int_equal(af_engine_generate(warm, p2, SHARED + TAIL, &gp, &second, err, sizeof err), 0);
    assert_int_equal(second.n_cached, SHARED);
    assert_int_equal(kv_field(warm, "kv_cache", "hit_tokens"), SHARED);
    assert_int_equal(af_engine_generate(cold, p2, SHARED + TAIL, &gp, &ref, err, sizeof err), 0);
    assert_int_equal(ref.n_cached, 0);
    assert_same(&second, &ref);
    /* The last position's logits after a 2,000-token hit, against a fresh engine's. */
    struct af_engine *fresh = load(0);
    random_ids(p2 + SHARED, TAIL, 3, nv);
    p2[SHARED] = p1[SHARED] == 5 ? 6 : 5; /* nor with the first p2 (3 or 4 there) */
    float *lw = malloc((size_t)nv * sizeof *lw), *lc = malloc((size_t)nv * sizeof *lc);
    assert_int_equal(af_engine_logits(warm, p2, SHARED + TAIL, 0, lw, err, sizeof err), 0);
    assert_int_equal(kv_field(warm, "kv_cache", "hit_tokens"), 2 * SHARED);
    assert_int_equal(af_engine_logits(fresh, p2, SHARED + TAIL, 0, lc, err, sizeof err), 0);
    assert_int_equal(kv_field(fresh, "kv_cache", "hit_tokens"), 0);
    assert_memory_equal(lw, lc, (size_t)nv * sizeof *lw);
    free(lw);
    free(lc);
    free(p1);
    free(p2);
    af_engine_result_deinit(&first);
    af_engine_result_deinit(&second);
    af_engine_result_deinit(&ref);
    af_engine_free(warm);
    af_engine_free(cold);
    af_engine_free(fresh);
}

struct job {
    struct af_engine *e;
    int32_t ids[80];
    size_t n;
    struct af_engine_gen_params gp;
    struct af_engine_result r;
    int rc;
    pthread_barrier_t *start; /* NULL: start at once */
};

static void *job_thread(void *arg)
{
    struct job *j = arg;
    char err[512];
    if (j->start)
        pthread_barrier_wait(j->start);
    j->rc = af_engine_generate(j->e, j->ids, j->n, &j->gp, &j->r, err, sizeof err);
    if (j->rc)
        fprintf(stderr, "generate: %s\n", err);
    return NULL;
}

/* 32 requests at once in a pool of 12 blocks (192 tokens; each request ends at 3 to 7):
 * cached blocks are evicted and running requests preempted, and every one finishes with the
 * tokens and log-probs it gets alone. The threads are released together: started one by one,
 * the first requests could finish before the last arrived, and no preemption happened in
 * about one run in six on a busy machine. */
static void test_tiny_pool_32_requests(void **state)
{
    (void)state;
    enum { N = 32 };
    struct af_engine *alone = load(0);
    const int64_t nv = af_engine_n_vocab(alone);
    struct af_engine *tight = load((size_t)12 * KV_BLOCK * 512); /* tiny: 512 bytes a token */
    assert_int_equal(kv_field(tight, "kv_cache", "blocks_total"), 12);
    static struct job jobs[N];
    pthread_t th[N];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, N), 0);
    for (int i = 0; i < N; i++) {
        struct job *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->start = &start;
        j->e = tight;
        j->n = 40 + (size_t)(i % 5) * 8;
        random_ids(j->ids, 24, 77, nv); /* a common head of 24 tokens, then each its own */
        random_ids(j->ids + 24, j->n - 24, 1000 + (uint64_t)i, nv);
        j->gp = af_engine_default_gen_params();
        j->gp.max_tokens = 24 + i % 3 * 8;
        j->gp.ignore_eos = 1;
        j->gp.temperature = i % 4 ? 0.9f : 0.0f;
        j->gp.seed = (uint64_t)i;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&th[i], NULL, job_thread, &jobs[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].rc, 0);
        struct job a = jobs[i];
        a.e = alone;
        a.start = NULL;
        memset(&a.r, 0, sizeof a.r);
        job_thread(&a);
        assert_int_equal(a.rc, 0);
        assert_same(&jobs[i].r, &a.r);
        af_engine_result_deinit(&a.r);
        af_engine_result_deinit(&jobs[i].r);
    }
    assert_true(kv_field(tight, "kv_cache", "evicted_blocks") > 0);
    assert_true(kv_field(tight, "batching", "preempted") > 0);
    assert_true(kv_field(tight, "batching", "widest_step") > 1);
    assert_int_equal(kv_field(tight, "kv_cache", "blocks_used"), 0);
    af_engine_free(alone);
    af_engine_free(tight);
}

/* Eight rollouts of one question at once: the first evaluates the prompt, and each of the
 * others takes its whole blocks from the tree while the first still runs (a request's sequence
 * is taken when its prompt is next, after the ones before it have been evaluated). */
static void test_rollouts_share_a_running_prompt(void **state)
{
    (void)state;
    enum { N = 8 };
    struct af_engine *e = load(0);
    const int64_t nv = af_engine_n_vocab(e);
    static struct job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        struct job *j = &jobs[i];
        memset(j, 0, sizeof *j);
        j->e = e;
        j->n = 75;
        random_ids(j->ids, j->n, 31, nv);
        j->gp = af_engine_default_gen_params();
        j->gp.max_tokens = 20;
        j->gp.ignore_eos = 1;
        j->gp.temperature = 1.0f;
        j->gp.seed = (uint64_t)i;
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&th[i], NULL, job_thread, &jobs[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    int cold = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].rc, 0);
        if (jobs[i].r.n_cached == 0)
            cold++;
        else /* 64 at least: the 4 whole blocks of the 74 tokens it may reuse */
            assert_true(jobs[i].r.n_cached >= 64 && jobs[i].r.n_cached <= 74);
        af_engine_result_deinit(&jobs[i].r);
    }
    assert_int_equal(cold, 1);
    af_engine_free(e);
}

/* New weights: the blocks computed with the old ones are dropped, so the same prompt is
 * evaluated anew and gets what a fresh engine with the new weights gets. */
static void test_new_weights_drop_cached_blocks(void **state)
{
    (void)state;
    struct af_engine *e = load(0), *fresh = load(0);
    const int64_t nv = af_engine_n_vocab(e);
    int32_t ids[60];
    random_ids(ids, 60, 8, nv);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 8;
    gp.ignore_eos = 1;
    char err[512];
    struct af_engine_result before, after, ref;
    assert_int_equal(af_engine_generate(e, ids, 60, &gp, &before, err, sizeof err), 0);
    assert_true(kv_field(e, "kv_cache", "blocks_cached") > 0);
    enum { NK = 64 * 32 }; /* tiny: n_embd x (2 KV heads x 16) */
    float *w = malloc(NK * sizeof *w);
    for (int i = 0; i < NK; i++)
        w[i] = (float)((i * 37) % 101 - 50) / 400.0f;
    const char *names[] = {"blk.0.attn_k.weight"};
    const float *vals[] = {w};
    const int64_t counts[] = {NK};
    assert_int_equal(af_engine_set_weights(e, names, vals, counts, 1, err, sizeof err), 0);
    assert_int_equal(af_engine_set_weights(fresh, names, vals, counts, 1, err, sizeof err), 0);
    assert_int_equal(kv_field(e, "kv_cache", "blocks_cached"), 0);
    assert_int_equal(af_engine_generate(e, ids, 60, &gp, &after, err, sizeof err), 0);
    assert_int_equal(after.n_cached, 0);
    assert_int_equal(af_engine_generate(fresh, ids, 60, &gp, &ref, err, sizeof err), 0);
    assert_same(&after, &ref);
    free(w);
    af_engine_result_deinit(&before);
    af_engine_result_deinit(&after);
    af_engine_result_deinit(&ref);
    af_engine_free(e);
    af_engine_free(fresh);
}

/* Two requests in one batch; `cancel` stops itself (on_token returns 1) once `other` has
 * written 3 tokens, so it is cancelled while both run. `other` then reads the pool: only its
 * own blocks are held. */
struct cancel_ctx {
    struct af_engine *e;
    int n_cancel, n_other; /* tokens seen by each */
    int cancelled_at;      /* other's count when cancel stopped; -1 = not yet */
    size_t n_prompt_other;
    long long used_seen, used_expected;
};

static int on_cancel(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id, (void)piece, (void)len;
    struct cancel_ctx *c = user;
    c->n_cancel++;
    if (c->n_other >= 3) {
        c->cancelled_at = c->n_other;
        return 1;
    }
    return 0;
}

static int on_other(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id, (void)piece, (void)len;
    struct cancel_ctx *c = user;
    c->n_other++;
    if (c->cancelled_at >= 0 && c->n_other == c->cancelled_at + 10) {
        /* The last step's snapshot: the other's sequence held its prompt and the tokens before
         * the one it was about to feed, n_prompt + n_other - 2 positions. */
        c->used_seen = kv_field(c->e, "kv_cache", "blocks_used");
        c->used_expected =
            (long long)((c->n_prompt_other + (size_t)c->n_other - 2 + KV_BLOCK - 1) / KV_BLOCK);
        return 1;
    }
    return 0;
}

static void test_cancel_mid_batch_frees_blocks(void **state)
{
    (void)state;
    struct af_engine *e = load(0);
    const int64_t nv = af_engine_n_vocab(e);
    struct cancel_ctx c = {e, 0, 0, -1, 70, -1, -2};
    struct job jc, jo;
    memset(&jc, 0, sizeof jc);
    memset(&jo, 0, sizeof jo);
    jc.e = jo.e = e;
    jc.n = 50;
    jo.n = c.n_prompt_other;
    random_ids(jc.ids, jc.n, 5, nv);
    random_ids(jo.ids, jo.n, 6, nv);
    jo.ids[0] = jc.ids[0] == 3 ? 4 : 3; /* nothing shared */
    jc.gp = jo.gp = af_engine_default_gen_params();
    jc.gp.max_tokens = jo.gp.max_tokens = 1500;
    jc.gp.ignore_eos = jo.gp.ignore_eos = 1;
    jc.gp.on_token = on_cancel;
    jo.gp.on_token = on_other;
    jc.gp.user = jo.gp.user = &c;
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, job_thread, &jc), 0);
    assert_int_equal(pthread_create(&b, NULL, job_thread, &jo), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    assert_int_equal(jc.rc, 0);
    assert_int_equal(jo.rc, 0);
    assert_true(c.cancelled_at >= 3);
    assert_int_equal(c.used_seen, c.used_expected);
    assert_int_equal(kv_field(e, "kv_cache", "blocks_used"), 0);
    assert_true(kv_field(e, "kv_cache", "blocks_cached") > 0);
    af_engine_result_deinit(&jc.r);
    af_engine_result_deinit(&jo.r);
    af_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_share_and_copy),
        cmocka_unit_test(test_held_blocks_stay),
        cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_copy_on_write_and_invalidate),
        cmocka_unit_test(test_radix_reuse_2000),
        cmocka_unit_test(test_tiny_pool_32_requests),
        cmocka_unit_test(test_cancel_mid_batch_frees_blocks),
        cmocka_unit_test(test_rollouts_share_a_running_prompt),
        cmocka_unit_test(test_new_weights_drop_cached_blocks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
