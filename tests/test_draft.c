/*
 * test_draft.c - the scheduler's drafts and KV budget. Prompt-lookup drafts
 * (af_engine_params.draft_max): with the
 * batch-invariant engine, a generation with drafts writes the same ids, text and log-probs as
 * one without, greedy and sampled, alone and beside other generations; drafts are tried and
 * some are kept on a prompt that repeats itself. A small KV pool (kv_budget_bytes) pauses and
 * resumes generations without changing what they write.
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

static char g_dir[64], g_model[128];

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_test_draft_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(g_model, sizeof g_model, "%s/tiny.gguf", g_dir);
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 11, NULL};
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

static struct af_engine *load_budget(int draft, size_t kv_budget_bytes)
{
    struct af_engine_params p = af_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 1024;
    p.batch_invariant = 1;
    p.draft_max = draft;
    p.kv_budget_bytes = kv_budget_bytes;
    struct af_engine *e = NULL;
    char err[512];
    if (af_engine_load(g_model, &p, &e, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    return e;
}

static struct af_engine *load(int draft)
{
    return load_budget(draft, 0);
}

/* A prompt that repeats, so that its last tokens occur earlier in it. */
static const char *PROMPT = "Droa Wysen was born in Gryvale in 1779. Droa Wysen was born in "
                            "Gryvale in 1779. Droa Wysen was born in Gryvale in 1779. Droa";

struct gen {
    struct af_engine *e;
    float temp;
    uint64_t seed;
    struct af_engine_result r;
    pthread_barrier_t *start; /* NULL, or the threads' common start line */
};

static void generate(struct gen *g)
{
    int32_t *ids = NULL;
    size_t n = 0;
    char err[512];
    if (af_engine_tokenize(g->e, PROMPT, 0, 0, &ids, &n, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.temperature = g->temp;
    gp.seed = g->seed;
    gp.max_tokens = 96;
    gp.ignore_eos = 1;
    if (g->start)
        pthread_barrier_wait(g->start);
    if (af_engine_generate(g->e, ids, n, &gp, &g->r, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    free(ids);
}

static void *gen_thread(void *p)
{
    generate(p);
    return NULL;
}

static void assert_same(const struct af_engine_result *a, const struct af_engine_result *b)
{
    assert_int_equal(a->n_ids, b->n_ids);
    assert_memory_equal(a->ids, b->ids, a->n_ids * sizeof *a->ids);
    assert_memory_equal(a->logprobs, b->logprobs, a->n_ids * sizeof *a->logprobs);
    assert_string_equal(a->text, b->text);
}

static long long batching_field(struct af_engine *e, const char *key)
{
    char *info = af_engine_info_json(e);
    json_t *j = json_loads(info, 0, NULL);
    long long v =
        (long long)json_integer_value(json_object_get(json_object_get(j, "batching"), key));
    json_decref(j);
    free(info);
    return v;
}

static void test_same_output_greedy_and_sampled(void **state)
{
    (void)state;
    struct af_engine *plain = load(0), *drafting = load(6);
    const float temps[] = {0.0f, 1.5f};
    size_t sum_tried = 0, sum_kept = 0;
    for (int t = 0; t < 2; t++) {
        struct gen a = {plain, temps[t], 5, {0}, NULL}, b = {drafting, temps[t], 5, {0}, NULL};
        generate(&a);
        generate(&b);
        assert_same(&a.r, &b.r);
        /* Each result says what it drafted (what the trace's usage reports). */
        assert_int_equal(a.r.drafting, 0);
        assert_int_equal(a.r.n_drafted, 0);
        assert_int_equal(b.r.drafting, 1);
        assert_true(b.r.n_draft_kept <= b.r.n_drafted);
        sum_tried += b.r.n_drafted;
        sum_kept += b.r.n_draft_kept;
        af_engine_result_deinit(&a.r);
        af_engine_result_deinit(&b.r);
    }
    assert_int_equal(batching_field(plain, "drafted"), 0);
    assert_true(batching_field(drafting, "drafted") > 0);
    /* Both paths ran: guesses kept, and guesses thrown away. */
    long long tried = batching_field(drafting, "drafted"),
              kept = batching_field(drafting, "draft_kept");
    assert_true(kept > 0);
    assert_int_equal(sum_tried, tried);
    assert_int_equal(sum_kept, kept);
    if (kept >= tried)
        fail_msg("every one of %lld drafted tokens was kept: the rejection path went untested",
                 tried);
    af_engine_free(plain);
    af_engine_free(drafting);
}

/* Three generations (temperatures temp[i], seeds seed0 + i) alone on `plain`, then at once on
 * `other` (released together from a barrier, so that they share the scheduler's steps): each
 * must write the same ids, text and log-probs both ways. */
static void assert_same_alone_and_together(struct af_engine *plain, struct af_engine *other,
                                           const float temp[3], uint64_t seed0)
{
    struct gen alone[3], together[3];
    pthread_t th[3];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 3), 0);
    for (int i = 0; i < 3; i++) {
        alone[i] = (struct gen){plain, temp[i], seed0 + (uint64_t)i, {0}, NULL};
        together[i] = (struct gen){other, temp[i], seed0 + (uint64_t)i, {0}, &start};
        generate(&alone[i]);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&th[i], NULL, gen_thread, &together[i]), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 3; i++) {
        assert_same(&alone[i].r, &together[i].r);
        af_engine_result_deinit(&alone[i].r);
        af_engine_result_deinit(&together[i].r);
    }
}

/* Three generations at once, each drafting in the shared steps, match each one alone. */
static void test_same_output_beside_others(void **state)
{
    (void)state;
    struct af_engine *plain = load(0), *drafting = load(4);
    const float temp[3] = {0.0f, 0.7f, 0.7f};
    assert_same_alone_and_together(plain, drafting, temp, 1);
    af_engine_free(plain);
    af_engine_free(drafting);
}

/* A KV pool too small for three generations at once: the newest is paused, its blocks handed
 * back (the full ones stay cached), and resumed later; each still writes what it writes
 * alone. */
static void test_kv_budget_preempts(void **state)
{
    (void)state;
    struct af_engine *plain = load(0);
    /* tiny: 2 layers x (K + V) x 2 KV heads x 16 dims x 4 bytes = 512 bytes a token, 8 KiB a
     * block of 16. A generation here holds 113 prompt tokens (7 full blocks, shared by all
     * three through the radix tree) and 96 more (7 blocks of its own): 15 blocks fit one
     * generation, but not a second one's last 2 blocks beside it. */
    struct af_engine *tight = load_budget(2, 15 * 16 * 512);
    const float temp[3] = {0.8f, 0.0f, 0.8f};
    /* A preemption needs two generations to hold blocks at once. The barrier releases the three
     * together, but on a loaded machine one thread can still finish (96 tokens of a tiny
     * model) before another is scheduled: try again, each try checked the same way. */
    for (int tries = 0; tries < 20 && batching_field(tight, "preempted") == 0; tries++)
        assert_same_alone_and_together(plain, tight, temp, 7);
    assert_int_equal(batching_field(tight, "kv_budget_tokens"), 240);
    assert_true(batching_field(tight, "preempted") > 0);
    assert_int_equal(batching_field(plain, "preempted"), 0);
    af_engine_free(plain);
    af_engine_free(tight);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output_greedy_and_sampled),
        cmocka_unit_test(test_same_output_beside_others),
        cmocka_unit_test(test_kv_budget_preempts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
