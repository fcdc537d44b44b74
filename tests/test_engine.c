/*
 * test_engine.c - the inference engine against llama.cpp (c392e50): for each reference model
 * and prompt in shared/data/reference/models/expected, every position's logits within the
 * bound of its type, the same argmax, and the same 32 greedy tokens; then the prefix cache,
 * sampling, stop strings, make-random, quantize and malformed models.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agentflow/engine.h"
#include "agentflow/llm.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "engine/gguf.h"
#include "engine/quant.h"
#include "engine/tpool.h"
#include "support/proc.h"
#include "support/shared.h"

/* Max |logit difference| allowed per model, measured values in docs/PERFORMANCE.md's engine
 * section: llama.cpp rounds activations to Q8 before quantized dot products and so do we, so
 * the quantized bounds are far below the 4e-2 / 0.25 a dequantise-then-float engine needs. */
static const struct {
    const char *model;
    double tol;
} models[] = {
    {"tiny-qwen2-f32", 1e-3}, {"tiny-qwen2-q8_0", 2e-3}, {"tiny-llama-f32", 1e-3},
    {"tiny-llama-f16", 2e-3}, {"tiny-llama-q4_0", 2e-3}, {"tiny-llama-kq-q4_k_m", 2e-3},
};

struct expected {
    int32_t prompt[512];
    size_t n_prompt;
    int32_t positions[512];
    size_t n_positions;
    int32_t greedy[64];
    size_t n_greedy;
};

static size_t parse_ids(const char *line, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    for (;;) {
        long v = strtol(line, &end, 10);
        if (end == line || n == cap)
            return n;
        out[n++] = (int32_t)v;
        line = end;
    }
}

static int load_expected(const char *txt, struct expected *e)
{
    char *text = NULL;
    if (af_file_read(txt, 1 << 24, &text, NULL, NULL, 0))
        return -1;
    memset(e, 0, sizeof *e);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "prompt_ids:", 11))
            e->n_prompt = parse_ids(line + 11, e->prompt, 512);
        else if (!strncmp(line, "full_logits_positions:", 22))
            e->n_positions = parse_ids(line + 22, e->positions, 512);
        else if (!strncmp(line, "greedy_ids:", 11))
            e->n_greedy = parse_ids(line + 11, e->greedy, 64);
    }
    free(text);
    return e->n_prompt && e->n_positions ? 0 : -1;
}

/* file: the model to load (NULL = model.gguf); greedy: compare the continuation too. An argmax
 * may differ only where llama.cpp's own top two are closer than 2 * tol. */
static void check_model(const char *dir, const char *model, const char *file, int prompt,
                        double tol, int greedy)
{
    char path[1200], txt[1200], bin[1200], err[1024];
    if (file)
        snprintf(path, sizeof path, "%s/%s", dir, file);
    else
        snprintf(path, sizeof path, "%s/%s.gguf", dir, model);
    snprintf(txt, sizeof txt, "%s/expected/%s.p%d.txt", dir, model, prompt);
    snprintf(bin, sizeof bin, "%s/expected/%s.p%d.logits.f32", dir, model, prompt);
    if (access(txt, R_OK))
        return;
    struct expected ex;
    assert_int_equal(load_expected(txt, &ex), 0);
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    struct af_engine *e = NULL;
    if (af_engine_load(path, &ep, &e, err, sizeof err))
        fail_msg("%s", err);
    const int64_t nv = af_engine_n_vocab(e);
    char *raw = NULL;
    size_t raw_len = 0;
    assert_int_equal(af_file_read(bin, (size_t)1 << 30, &raw, &raw_len, err, sizeof err), 0);
    assert_int_equal(raw_len, ex.n_positions * (size_t)nv * sizeof(float));
    float *ref = (float *)(void *)raw;
    float *got = malloc(ex.n_prompt * (size_t)nv * sizeof(float));
    assert_int_equal(af_engine_logits(e, ex.prompt, ex.n_prompt, 1, got, err, sizeof err), 0);
    double worst = 0;
    for (size_t i = 0; i < ex.n_positions; i++) {
        const float *r = ref + i * (size_t)nv, *g = got + (size_t)ex.positions[i] * (size_t)nv;
        int64_t ar = 0, ag = 0;
        for (int64_t k = 0; k < nv; k++) {
            double d = fabs((double)r[k] - (double)g[k]);
            worst = d > worst ? d : worst;
            ar = r[k] > r[ar] ? k : ar;
            ag = g[k] > g[ag] ? k : ag;
        }
        float second = -INFINITY;
        for (int64_t k = 0; k < nv; k++)
            if (k != ar && r[k] > second)
                second = r[k];
        if (ar != ag && (double)(r[ar] - second) > 2 * tol)
            fail_msg("%s p%d pos %d: argmax %lld, llama.cpp %lld", model, prompt, ex.positions[i],
                     (long long)ag, (long long)ar);
    }
    printf("  %-26s p%d: %zu tokens, max |dlogit| %.3g (bound %.0e)\n", file ? file : model, prompt,
           ex.n_prompt, worst, tol);
    if (worst > tol)
        fail_msg("%s p%d: max |dlogit| %g > %g", model, prompt, worst, tol);
    if (!greedy) {
        free(got);
        free(raw);
        af_engine_free(e);
        return;
    }
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = (int)ex.n_greedy;
    gp.ignore_eos = 1;
    struct af_engine_result res;
    assert_int_equal(af_engine_generate(e, ex.prompt, ex.n_prompt, &gp, &res, err, sizeof err), 0);
    assert_int_equal(res.n_ids, ex.n_greedy);
    for (size_t i = 0; i < ex.n_greedy; i++)
        if (res.ids[i] != ex.greedy[i])
            fail_msg("%s p%d: greedy token %zu is %d, llama.cpp %d", model, prompt, i, res.ids[i],
                     ex.greedy[i]);
    af_engine_result_deinit(&res);
    free(got);
    free(raw);
    af_engine_free(e);
}

static void test_reference_logits(void **state)
{
    (void)state;
    char dir[1024];
    if (!test_shared_path("data/reference/models", dir, sizeof dir))
        skip();
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++)
        for (int p = 1; p <= 3; p++)
            check_model(dir, models[m].model, NULL, p, models[m].tol, 1);
}

/* Hugging Face checkpoints hold the same (bf16-representable) weights as the F32 GGUFs. Their
 * BF16 matmuls round activations to BF16, as llama.cpp does for BF16 weights, hence the
 * looser bound; the layout differs too (q/k rows not permuted, RoPE in the NEOX form). */
static void test_hf_checkpoints(void **state)
{
    (void)state;
    char dir[1024];
    if (!test_shared_path("data/reference/models", dir, sizeof dir))
        skip();
    for (int p = 1; p <= 3; p++) {
        check_model(dir, "tiny-qwen2-f32", "tiny-qwen2-hf", p, 5e-2, 0);
        check_model(dir, "tiny-llama-f32", "tiny-llama-hf/config.json", p, 5e-2, 0);
    }
}

/* The ids of the reference prompt texts, tokenized by us, equal llama.cpp's prompt_ids. */
static void test_reference_prompt_ids(void **state)
{
    (void)state;
    char dir[1024], err[1024];
    if (!test_shared_path("data/reference/models", dir, sizeof dir))
        skip();
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, models[m].model);
        struct af_engine *e = NULL;
        assert_int_equal(af_engine_load(path, NULL, &e, err, sizeof err), 0);
        for (int p = 1; p <= 3; p++) {
            static const char *names[] = {"", "prompt1.txt", "prompt2_chatml.txt",
                                          "prompt3_long.txt"};
            char txt[1200], ptxt[1200];
            snprintf(txt, sizeof txt, "%s/expected/%s.p%d.txt", dir, models[m].model, p);
            snprintf(ptxt, sizeof ptxt, "%s/expected/%s", dir, names[p]);
            struct expected ex;
            char *prompt = NULL;
            if (access(txt, R_OK))
                continue;
            assert_int_equal(load_expected(txt, &ex), 0);
            assert_int_equal(af_file_read(ptxt, 1 << 20, &prompt, NULL, err, sizeof err), 0);
            int32_t *ids = NULL;
            size_t n = 0;
            assert_int_equal(af_engine_tokenize(e, prompt, 1, 1, &ids, &n, err, sizeof err), 0);
            assert_int_equal(n, ex.n_prompt);
            assert_memory_equal(ids, ex.prompt, n * sizeof *ids);
            free(ids);
            free(prompt);
        }
        af_engine_free(e);
    }
}

/* A model made by make-random with the Qwen2.5 vocabulary, shared by the tests below. */
static char tiny_path[256];

static int make_tiny(void **state)
{
    (void)state;
    char vocab[1024], err[1024];
    snprintf(tiny_path, sizeof tiny_path, "/tmp/af_test_engine_%d.gguf", (int)getpid());
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 7, NULL};
    rp.vocab_from =
        test_shared_path("data/reference/tokenizer/ggml-vocab-qwen2.gguf", vocab, sizeof vocab);
    if (af_engine_make_random(&rp, tiny_path, err, sizeof err)) {
        fprintf(stderr, "make-random: %s\n", err);
        return -1;
    }
    return 0;
}

static int drop_tiny(void **state)
{
    (void)state;
    unlink(tiny_path);
    return 0;
}

static struct af_engine *open_tiny(void)
{
    char err[1024];
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 1024;
    ep.chat_template = "chatml"; /* the vocabulary-only file has no template */
    struct af_engine *e = NULL;
    if (af_engine_load(tiny_path, &ep, &e, err, sizeof err))
        fail_msg("%s", err);
    return e;
}

static void ids_of(struct af_engine *e, const char *text, int32_t **ids, size_t *n)
{
    char err[1024];
    assert_int_equal(af_engine_tokenize(e, text, 0, 1, ids, n, err, sizeof err), 0);
    assert_true(*n > 0);
}

/* A second call sharing a prefix reuses its KV and gives the same logits as a cold call. */
static void test_prefix_cache(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine *e = open_tiny(), *cold = open_tiny();
    const char *base = "<|im_start|>system\nYou are a careful planner with many tools. Tool "
                       "cards follow: search, code, wiki.<|im_end|>\n<|im_start|>user\n";
    char a[512], b[512];
    snprintf(a, sizeof a, "%sWhat is the capital of France?<|im_end|>\n", base);
    snprintf(b, sizeof b, "%sHow many legs has a spider?<|im_end|>\n", base);
    int32_t *ia, *ib, *ibase;
    size_t na, nb, nbase;
    ids_of(e, a, &ia, &na);
    ids_of(e, b, &ib, &nb);
    ids_of(e, base, &ibase, &nbase);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 8;
    gp.ignore_eos = 1;
    struct af_engine_result r1, r2, r3, rc;
    assert_int_equal(af_engine_generate(e, ia, na, &gp, &r1, err, sizeof err), 0);
    assert_int_equal(r1.n_cached, 0);
    assert_int_equal(af_engine_generate(e, ib, nb, &gp, &r2, err, sizeof err), 0);
    assert_true(r2.n_cached >= nbase - 1 && r2.n_cached < nb);
    /* The same prompt again: everything but the last token comes from the cache, and the
     * greedy continuation is the same. */
    assert_int_equal(af_engine_generate(e, ia, na, &gp, &r3, err, sizeof err), 0);
    assert_int_equal(r3.n_cached, na - 1);
    assert_int_equal(r3.n_ids, r1.n_ids);
    assert_memory_equal(r3.ids, r1.ids, r1.n_ids * sizeof *r1.ids);
    /* Cached and cold logits agree. */
    assert_int_equal(af_engine_generate(cold, ib, nb, &gp, &rc, err, sizeof err), 0);
    assert_int_equal(rc.n_cached, 0);
    assert_memory_equal(rc.ids, r2.ids, r2.n_ids * sizeof *r2.ids);
    int64_t nv = af_engine_n_vocab(e);
    float *lw = malloc((size_t)nv * sizeof *lw), *lc = malloc((size_t)nv * sizeof *lc);
    assert_int_equal(af_engine_logits(e, ib, nb, 0, lw, err, sizeof err), 0);
    assert_int_equal(af_engine_logits(cold, ib, nb, 1 == 0, lc, err, sizeof err), 0);
    for (int64_t i = 0; i < nv; i++)
        assert_true(fabsf(lw[i] - lc[i]) <= 1e-4f);
    free(lw);
    free(lc);
    af_engine_result_deinit(&r1);
    af_engine_result_deinit(&r2);
    af_engine_result_deinit(&r3);
    af_engine_result_deinit(&rc);
    free(ia);
    free(ib);
    free(ibase);
    af_engine_free(e);
    af_engine_free(cold);
}

/* With batch_invariant set, a token's logits and sampled log-probs have the same bits however
 * it was evaluated: cold, after a full prefix-cache hit (the last prompt token alone), after a
 * partial hit, or with every position's logits at once. F32 and Q8_0 (whose one-row dot and
 * multi-row tiles sum in different orders). */
static void test_batch_invariant(void **state)
{
    (void)state;
    char err[1024], q8[300];
    snprintf(q8, sizeof q8, "%s.q8_0", tiny_path);
    assert_int_equal(af_engine_quantize(tiny_path, q8, "Q8_0", err, sizeof err), 0);
    const char *files[] = {tiny_path, q8};
    const char *base = "<|im_start|>system\nYou are a careful planner with many tools.<|im_end|>\n"
                       "<|im_start|>user\n";
    char a[512], b[512];
    snprintf(a, sizeof a, "%sWhat is the capital of France?<|im_end|>\n", base);
    snprintf(b, sizeof b, "%sHow many legs has a spider?<|im_end|>\n", base);
    for (size_t f = 0; f < 2; f++) {
        struct af_engine_params ep = af_engine_default_params();
        ep.n_threads = 2;
        ep.n_ctx = 1024;
        ep.chat_template = "chatml";
        ep.batch_invariant = 1;
        struct af_engine *e = NULL, *w = NULL;
        assert_int_equal(af_engine_load(files[f], &ep, &e, err, sizeof err), 0);
        assert_int_equal(af_engine_load(files[f], &ep, &w, err, sizeof err), 0);
        int32_t *ia, *ib;
        size_t na, nb;
        ids_of(e, a, &ia, &na);
        ids_of(e, b, &ib, &nb);
        struct af_engine_gen_params gp = af_engine_default_gen_params();
        gp.max_tokens = 12;
        gp.ignore_eos = 1;
        gp.temperature = 0.9f;
        gp.seed = 3;
        struct af_engine_result cold, hit, part, junk;
        assert_int_equal(af_engine_generate(e, ia, na, &gp, &cold, err, sizeof err), 0);
        assert_int_equal(af_engine_generate(e, ia, na, &gp, &hit, err, sizeof err), 0);
        assert_int_equal(hit.n_cached, na - 1);
        assert_int_equal(af_engine_generate(w, ib, nb, &gp, &junk, err, sizeof err), 0);
        assert_int_equal(af_engine_generate(w, ia, na, &gp, &part, err, sizeof err), 0);
        assert_true(part.n_cached > 0 && part.n_cached < na - 1);
        assert_int_equal(cold.n_ids, hit.n_ids);
        assert_int_equal(cold.n_ids, part.n_ids);
        assert_memory_equal(cold.ids, hit.ids, cold.n_ids * sizeof *cold.ids);
        assert_memory_equal(cold.logprobs, hit.logprobs, cold.n_ids * sizeof *cold.logprobs);
        assert_memory_equal(cold.ids, part.ids, cold.n_ids * sizeof *cold.ids);
        assert_memory_equal(cold.logprobs, part.logprobs, cold.n_ids * sizeof *cold.logprobs);
        /* the last position's logits: alone after a hit, and as the last of all rows */
        const int64_t nv = af_engine_n_vocab(e);
        float *last = malloc((size_t)nv * sizeof *last), *all = malloc(na * (size_t)nv * 4);
        assert_int_equal(af_engine_logits(e, ia, na, 0, last, err, sizeof err), 0);
        assert_int_equal(af_engine_logits(e, ia, na, 1, all, err, sizeof err), 0);
        assert_memory_equal(last, all + (na - 1) * (size_t)nv, (size_t)nv * sizeof *last);
        free(last);
        free(all);
        af_engine_result_deinit(&cold);
        af_engine_result_deinit(&hit);
        af_engine_result_deinit(&part);
        af_engine_result_deinit(&junk);
        free(ia);
        free(ib);
        af_engine_free(e);
        af_engine_free(w);
    }
    unlink(q8);
}

/* Continuous batching: 8 threads generating at once on one engine are decoded together (the
 * engine's counters show steps wider than one row), and each gets exactly the tokens and
 * log-probs it gets alone on a fresh engine (batch_invariant mode), whatever joined it. */
struct gen_job {
    struct af_engine *e;
    int32_t *ids;
    size_t n;
    struct af_engine_gen_params gp;
    struct af_engine_result r;
    int rc;
};

static void *gen_thread(void *arg)
{
    struct gen_job *j = arg;
    char err[512];
    j->rc = af_engine_generate(j->e, j->ids, j->n, &j->gp, &j->r, err, sizeof err);
    return NULL;
}

/* The tiny model's engine in batch-invariant mode. */
static struct af_engine_params invariant_params(void)
{
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 1024;
    ep.chat_template = "chatml";
    ep.batch_invariant = 1;
    return ep;
}

/* Runs job j's request alone on a fresh engine and checks that the batched result has the same
 * tokens, log-probs and text; frees the job's result and ids. */
static void check_alone_on(const char *path, const struct af_engine_params *ep, struct gen_job *j)
{
    char err[1024];
    struct af_engine *alone = NULL;
    assert_int_equal(af_engine_load(path, ep, &alone, err, sizeof err), 0);
    struct af_engine_result r;
    assert_int_equal(af_engine_generate(alone, j->ids, j->n, &j->gp, &r, err, sizeof err), 0);
    assert_int_equal(r.n_ids, j->r.n_ids);
    assert_memory_equal(r.ids, j->r.ids, r.n_ids * sizeof *r.ids);
    assert_memory_equal(r.logprobs, j->r.logprobs, r.n_ids * sizeof *r.logprobs);
    assert_string_equal(r.text, j->r.text);
    af_engine_result_deinit(&r);
    af_engine_result_deinit(&j->r);
    af_engine_free(alone);
    free(j->ids);
}

static void check_alone(const struct af_engine_params *ep, struct gen_job *j)
{
    check_alone_on(tiny_path, ep, j);
}

/* Eight generations at once on the model at path, each checked against itself alone; with
 * kv_f16, on an F16 KV cache. */
static void batched_equals_alone(const char *path, int kv_f16)
{
    char err[1024];
    struct af_engine_params ep = invariant_params();
    ep.kv_f16 = kv_f16;
    ep.prefill_chunk = 16; /* prompts in several chunks, between decode steps */
    struct af_engine *shared = NULL;
    assert_int_equal(af_engine_load(path, &ep, &shared, err, sizeof err), 0);
    enum { N = 8 };
    struct gen_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "<|im_start|>system\nYou plan.<|im_end|>\n<|im_start|>user\nQuestion %d: "
                 "how far is %d miles in km?<|im_end|>\n",
                 i % 3, i * 7);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].e = shared;
        ids_of(shared, text, &jobs[i].ids, &jobs[i].n);
        jobs[i].gp = af_engine_default_gen_params();
        jobs[i].gp.max_tokens = 24 + 4 * i; /* they leave at different steps */
        jobs[i].gp.ignore_eos = 1;
        jobs[i].gp.temperature = i % 2 ? 0.8f : 0.0f;
        jobs[i].gp.seed = (uint64_t)(100 + i);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&th[i], NULL, gen_thread, &jobs[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    char *info = af_engine_info_json(shared);
    json_t *j = json_loads(info, 0, NULL);
    free(info);
    const json_int_t widest =
        json_integer_value(json_object_get(json_object_get(j, "batching"), "widest_step"));
    /* later prompts' chunks rode in the earlier requests' decode steps */
    const json_int_t fused =
        json_integer_value(json_object_get(json_object_get(j, "batching"), "prefill_chunks_fused"));
    json_decref(j);
    assert_true(widest > 1);
    assert_true(fused > 0);
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].rc, 0);
        check_alone_on(path, &ep, &jobs[i]);
    }
    af_engine_free(shared);
}

static void test_concurrent_batching(void **state)
{
    (void)state;
    batched_equals_alone(tiny_path, 0);
}

static json_int_t batching_field(struct af_engine *e, const char *key)
{
    char *info = af_engine_info_json(e);
    json_t *j = json_loads(info, 0, NULL);
    free(info);
    const json_int_t v = json_integer_value(json_object_get(json_object_get(j, "batching"), key));
    json_decref(j);
    return v;
}

struct hold_a {
    struct af_engine *e;
    _Atomic int n;  /* A's tokens */
    _Atomic int go; /* B may start */
};

/* A's tokens: at its second, the driver (this thread) waits until B has queued, so that B's
 * prompt is planned while A still decodes, however the threads are scheduled. */
static int hold_for_b(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id;
    (void)piece;
    (void)len;
    struct hold_a *h = user;
    if (atomic_fetch_add(&h->n, 1) + 1 == 2) {
        atomic_store(&h->go, 1);
        for (double t0 = af_clock_ms();
             batching_field(h->e, "requests") < 2 && af_clock_ms() - t0 < 60000;)
            af_clock_sleep_ms(1);
    }
    return 0;
}

/* A 300-token prompt arriving while another request decodes rides in its decode steps: its
 * first chunk (256 tokens) shrinks to the 255 rows the decode leaves, the rest (45) goes in the
 * next step, and both requests keep the bits they have alone. */
static void test_long_prompt_rides_decode(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine_params ep = invariant_params(); /* prefill_chunk: the default 256 */
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(tiny_path, &ep, &e, err, sizeof err), 0);
    struct gen_job a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.e = b.e = e;
    ids_of(e, "<|im_start|>user\nCount to ten.<|im_end|>\n", &a.ids, &a.n);
    a.gp = af_engine_default_gen_params();
    a.gp.max_tokens = 64;
    a.gp.ignore_eos = 1;
    struct hold_a h = {.e = e};
    a.gp.on_token = hold_for_b;
    a.gp.user = &h;
    b.n = 300;
    b.ids = malloc(b.n * sizeof *b.ids);
    for (size_t i = 0; i < b.n; i++)
        b.ids[i] = (int32_t)(1 + (i * 37) % 200);
    b.gp = af_engine_default_gen_params();
    b.gp.max_tokens = 8;
    b.gp.ignore_eos = 1;
    b.gp.temperature = 0.7f;
    b.gp.seed = 5;
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, gen_thread, &a), 0);
    for (double t0 = af_clock_ms(); !atomic_load(&h.go) && af_clock_ms() - t0 < 60000;)
        af_clock_sleep_ms(1);
    assert_true(atomic_load(&h.go));
    assert_int_equal(pthread_create(&tb, NULL, gen_thread, &b), 0);
    pthread_join(tb, NULL);
    pthread_join(ta, NULL);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.r.n_ids, 8);
    /* A was still decoding when B's chunks ran: both went into its steps */
    assert_int_equal(atomic_load(&h.n), 64);
    assert_int_equal(batching_field(e, "prefill_chunks_fused"), 2);
    assert_int_equal(batching_field(e, "prefill_chunks_alone"), 1); /* A's own prompt */
    a.gp.on_token = NULL;
    check_alone(&ep, &a);
    check_alone(&ep, &b);
    af_engine_free(e);
}

/* An F16 KV cache (kv_f16): batched equals alone as with F32; its blocks take half the bytes;
 * and its logits are close to the F32 cache's but not the same (each key and value is rounded
 * once), over a 300-token prompt. */
static void test_kv_f16(void **state)
{
    (void)state;
    batched_equals_alone(tiny_path, 1);
    char err[1024];
    struct af_engine_params ep = invariant_params();
    struct af_engine *e32 = NULL, *e16 = NULL;
    assert_int_equal(af_engine_load(tiny_path, &ep, &e32, err, sizeof err), 0);
    ep.kv_f16 = 1;
    assert_int_equal(af_engine_load(tiny_path, &ep, &e16, err, sizeof err), 0);
    json_int_t bytes[2];
    struct af_engine *es[2] = {e32, e16};
    for (int i = 0; i < 2; i++) {
        char *info = af_engine_info_json(es[i]);
        json_t *j = json_loads(info, 0, NULL);
        free(info);
        json_t *kv = json_object_get(j, "kv_cache");
        assert_string_equal(json_string_value(json_object_get(kv, "type")), i ? "f16" : "f32");
        bytes[i] = json_integer_value(json_object_get(kv, "block_bytes"));
        json_decref(j);
    }
    assert_true(bytes[0] > 0 && bytes[1] * 2 == bytes[0]);
    const int64_t nv = af_engine_n_vocab(e32);
    enum { N = 300 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % (nv * 9 / 10));
    float *l32 = malloc((size_t)nv * sizeof *l32), *l16 = malloc((size_t)nv * sizeof *l16);
    assert_int_equal(af_engine_logits(e32, ids, N, 0, l32, err, sizeof err), 0);
    assert_int_equal(af_engine_logits(e16, ids, N, 0, l16, err, sizeof err), 0);
    double amax = 0, dmax = 0;
    for (int64_t i = 0; i < nv; i++) {
        amax = fmax(amax, fabs((double)l32[i]));
        dmax = fmax(dmax, fabs((double)l16[i] - (double)l32[i]));
    }
    printf("F16 KV against F32 KV: max |dlogit| %.3g of |logit| up to %.3g\n", dmax, amax);
    assert_true(dmax > 0);
    assert_true(dmax < 2e-2 * amax);
    free(l32);
    free(l16);
    af_engine_free(e32);
    af_engine_free(e16);
}

/* batched_equals_alone on a random 256-wide model of the given type. */
static void batched_equals_alone_random(const char *type, uint64_t seed)
{
    char path[300], err[512];
    snprintf(path, sizeof path, "%s.%s.gguf", tiny_path, type);
    struct af_engine_random_params rp = {"qwen2", "custom:2,256,4,2,512", type, seed, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err))
        fail_msg("make-random: %s", err);
    batched_equals_alone(path, 0);
    unlink(path);
}

/* The same on K-quant weights: the tiny shape's 64-wide rows do not fill a 256-value Q4_K block,
 * so this model is 256 wide (Q4_K_M keeps some tensors in Q6_K, so both kernels run). */
static void test_concurrent_batching_q4_k_m(void **state)
{
    (void)state;
    batched_equals_alone_random("Q4_K_M", 9);
}

/* On Q5_1 weights (what a Q5_K_M file holds where rows are not a multiple of 256 wide): levels,
 * fifth bits and a minimum per block, the minimum's term a second step of each block's chain. */
static void test_concurrent_batching_q5_1(void **state)
{
    (void)state;
    batched_equals_alone_random("Q5_1", 6);
}

/* And on BF16 weights (vdpbf16ps where the CPU has AVX-512 BF16: its own pair chain, for the
 * packed decode rows as for the prefill). */
static void test_concurrent_batching_bf16(void **state)
{
    (void)state;
    batched_equals_alone_random("BF16", 4);
}

/* Weights packed under one kernel set are not read by another: an engine loaded on AVX-512 whose
 * kernels then switch to AVX2 (quant_set_isa) reads its rows, and gives the logits of an engine
 * loaded on AVX2 (which packs AVX2's form); AVX2's Q8_0 keeps AVX-512's bits, so they also equal
 * the logits before the switch. */
static void test_packed_form_after_isa_switch(void **state)
{
    (void)state;
    if (quant_set_isa("avx512") != 0) {
        printf("AVX-512 VNNI not available on this CPU: skipping\n");
        skip();
    }
    char path[300], err[512];
    snprintf(path, sizeof path, "%s.isa.gguf", tiny_path);
    struct af_engine_random_params rp = {"qwen2", "custom:2,256,4,2,512", "Q8_0", 7, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err))
        fail_msg("make-random: %s", err);
    struct af_engine *a = NULL, *b = NULL;
    if (af_engine_load(path, NULL, &a, err, sizeof err))
        fail_msg("%s: %s", path, err);
    const int64_t nv = af_engine_n_vocab(a);
    enum { N = 20 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 4001 + 7) % nv);
    float *lg[3];
    for (int k = 0; k < 3; k++) {
        lg[k] = malloc((size_t)N * (size_t)nv * sizeof *lg[k]);
        assert_non_null(lg[k]);
    }
    assert_int_equal(af_engine_logits(a, ids, N, 1, lg[0], err, sizeof err), 0);
    assert_int_equal(quant_set_isa("avx2"), 0);
    assert_int_equal(af_engine_logits(a, ids, N, 1, lg[1], err, sizeof err), 0);
    if (af_engine_load(path, NULL, &b, err, sizeof err))
        fail_msg("%s: %s", path, err);
    assert_int_equal(af_engine_logits(b, ids, N, 1, lg[2], err, sizeof err), 0);
    assert_int_equal(quant_set_isa("auto"), 0);
    const size_t bytes = (size_t)N * (size_t)nv * sizeof *lg[0];
    if (memcmp(lg[1], lg[2], bytes))
        fail_msg("after the switch to AVX2, the AVX-512-packed engine's logits differ from an "
                 "AVX2 engine's");
    if (memcmp(lg[0], lg[1], bytes))
        fail_msg("AVX2's Q8_0 logits differ from AVX-512's");
    for (int k = 0; k < 3; k++)
        free(lg[k]);
    af_engine_free(a);
    af_engine_free(b);
    unlink(path);
}

/* Rss (kB) of this process's mappings of files whose path contains `part` (made canonical, as
 * smaps names files: ../shared becomes the real folder). */
static long file_rss_kb(const char *path)
{
    char part[PATH_MAX];
    if (!realpath(path, part))
        return -1;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[4096];
    long kb = 0;
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        long v;
        if (sscanf(line, "Rss: %ld kB", &v) == 1) {
            kb += in ? v : 0;
            continue;
        }
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) /* a mapping's header line */
            in = strstr(line, part) != NULL;
    }
    fclose(f);
    return kb;
}

/* The Rss of the model's file after logits over 24 tokens, packed or not; *packed the engine's
 * packed_bytes. */
static long rss_after_logits(const char *path, const char *part, int pack, long *packed)
{
    char err[512];
    if (pack)
        unsetenv("AGENTFLOW_PACK");
    else
        setenv("AGENTFLOW_PACK", "0", 1);
    struct af_engine *e = NULL;
    if (af_engine_load(path, NULL, &e, err, sizeof err))
        fail_msg("%s: %s", path, err);
    unsetenv("AGENTFLOW_PACK");
    const int64_t nv = af_engine_n_vocab(e);
    int32_t ids[24];
    for (int i = 0; i < 24; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % nv);
    float *lg = malloc((size_t)nv * sizeof *lg);
    assert_non_null(lg);
    assert_int_equal(af_engine_logits(e, ids, 24, 0, lg, err, sizeof err), 0);
    free(lg);
    char *info = af_engine_info_json(e);
    json_t *j = json_loads(info, 0, NULL);
    assert_non_null(j);
    *packed = (long)json_integer_value(json_object_get(j, "packed_bytes"));
    json_decref(j);
    free(info);
    const long kb = file_rss_kb(part);
    af_engine_free(e);
    return kb;
}

/* Packing leaves the packed rows' file pages out of the process (model_pack's release_rows),
 * for a GGUF and for Hugging Face checkpoints (safetensors shards): the file's resident size
 * after the same logits falls by at least half the packed bytes against an unpacked load. */
static void test_packed_rows_released(void **state)
{
    (void)state;
    char path[300], dir[1024], hf[2][1200], err[512];
    snprintf(path, sizeof path, "%s.rss.gguf", tiny_path);
    struct af_engine_random_params rp = {"qwen2", "custom:4,512,8,4,1536", "Q8_0", 3, NULL};
    if (af_engine_make_random(&rp, path, err, sizeof err))
        fail_msg("make-random: %s", err);
    const char *paths[3] = {path, NULL, NULL}, *parts[3] = {path, NULL, NULL};
    int n = 1;
    if (test_shared_path("data/reference/models", dir, sizeof dir)) {
        snprintf(hf[0], sizeof hf[0], "%s/tiny-qwen2-hf", dir);
        snprintf(hf[1], sizeof hf[1], "%s/tiny-llama-hf", dir);
        for (int i = 0; i < 2; i++, n++) {
            paths[n] = hf[i];
            parts[n] = hf[i];
        }
    } else {
        printf("shared data not found: the Hugging Face checkpoints are not checked\n");
    }
    for (int i = 0; i < n; i++) {
        long pb0, pb1;
        const long rows = rss_after_logits(paths[i], parts[i], 0, &pb0);
        const long packed = rss_after_logits(paths[i], parts[i], 1, &pb1);
        printf("  %s: file resident %ld kB with rows, %ld kB packed (%ld kB packed)\n", paths[i],
               rows, packed, pb1 / 1024);
        assert_int_equal(pb0, 0);
        assert_true(rows > 0);
        if (!pb1) {
            printf("  no packed form on this CPU for %s\n", paths[i]);
            continue;
        }
        assert_true(rows - packed >= pb1 / 1024 / 2);
    }
    unlink(path);
}

/* The packed weights (model_pack, AGENTFLOW_PACK) give the row-major kernels' bits: the logits of
 * every position, before and after new weights for the tied embedding (the output head) and a
 * projection, are equal with and without packing; `packed_bytes` in the engine's info says
 * which was loaded. Q8_0, Q5_0 (the Q4_K_M file's 256-wide rows are Q5_0), Q4_1, Q5_1 (a Q5_K_M
 * file's rows of widths off 256, as the 0.5B's 896) and Q4_K_M. */
static void test_packed_weights(void **state)
{
    (void)state;
    static const char *types[] = {"Q8_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K_M"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        char path[300], err[512];
        snprintf(path, sizeof path, "%s.pack.gguf", tiny_path);
        struct af_engine_random_params rp = {"qwen2", "custom:2,256,4,2,512", types[ti], 5, NULL};
        if (af_engine_make_random(&rp, path, err, sizeof err))
            fail_msg("make-random: %s", err);
        struct af_engine *e[2];
        for (int k = 0; k < 2; k++) {
            if (k == 0)
                setenv("AGENTFLOW_PACK", "0", 1);
            else
                unsetenv("AGENTFLOW_PACK");
            if (af_engine_load(path, NULL, &e[k], err, sizeof err))
                fail_msg("%s: %s", path, err);
        }
        json_int_t pb[2];
        for (int k = 0; k < 2; k++) {
            char *info = af_engine_info_json(e[k]);
            json_t *j = json_loads(info, 0, NULL);
            assert_non_null(j);
            pb[k] = json_integer_value(json_object_get(j, "packed_bytes"));
            json_decref(j);
            free(info);
        }
        assert_int_equal(pb[0], 0);
        if (!pb[1])
            printf("%s: no packed form on this CPU; both engines read the rows\n", types[ti]);
        const int64_t nv = af_engine_n_vocab(e[0]);
        enum { N = 40 };
        int32_t ids[N];
        for (int i = 0; i < N; i++)
            ids[i] = (int32_t)((i * 7919 + 13) % nv);
        float *lg[2];
        for (int round = 0; round < 2; round++) {
            for (int k = 0; k < 2; k++) {
                lg[k] = malloc((size_t)N * (size_t)nv * sizeof *lg[k]);
                assert_non_null(lg[k]);
                assert_int_equal(af_engine_logits(e[k], ids, N, 1, lg[k], err, sizeof err), 0);
            }
            if (memcmp(lg[0], lg[1], (size_t)N * (size_t)nv * sizeof *lg[0]))
                fail_msg("%s, round %d: packed and row-major logits differ", types[ti], round);
            free(lg[0]);
            free(lg[1]);
            if (round)
                break;
            /* new weights: the embedding (tied: the head is repacked) and a projection */
            const int64_t ne = 256 * nv, nq = 256 * 256;
            float *we = malloc((size_t)ne * sizeof *we), *wq = malloc((size_t)nq * sizeof *wq);
            assert_non_null(we);
            assert_non_null(wq);
            for (int64_t i = 0; i < ne; i++)
                we[i] = (float)((i * 37) % 101 - 50) / 900.0f;
            for (int64_t i = 0; i < nq; i++)
                wq[i] = (float)((i * 53) % 89 - 44) / 700.0f;
            const char *names[] = {"token_embd.weight", "blk.1.attn_q.weight"};
            const float *vals[] = {we, wq};
            const int64_t counts[] = {ne, nq};
            for (int k = 0; k < 2; k++)
                assert_int_equal(
                    af_engine_set_weights(e[k], names, vals, counts, 2, err, sizeof err), 0);
            free(we);
            free(wq);
        }
        af_engine_free(e[0]);
        af_engine_free(e[1]);
        unlink(path);
    }
}

/* A generation cancelled from its on_token callback in the middle of a batch leaves at once
 * (its sequence goes back to the pool) and the others finish with the bits they get alone. */
static int cancel_after_3(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id, (void)piece, (void)len;
    int *n = user;
    return ++*n >= 3;
}

static void test_cancel_in_batch(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine_params ep = invariant_params();
    struct af_engine *e = NULL;
    assert_int_equal(af_engine_load(tiny_path, &ep, &e, err, sizeof err), 0);
    enum { N = 4 };
    struct gen_job jobs[N];
    pthread_t th[N];
    int seen = 0;
    for (int i = 0; i < N; i++) {
        char text[128];
        snprintf(text, sizeof text, "<|im_start|>user\nCount to %d.<|im_end|>\n", 10 + i);
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].e = e;
        ids_of(e, text, &jobs[i].ids, &jobs[i].n);
        jobs[i].gp = af_engine_default_gen_params();
        jobs[i].gp.max_tokens = 40;
        jobs[i].gp.ignore_eos = 1;
        jobs[i].gp.temperature = 0.7f;
        jobs[i].gp.seed = (uint64_t)(7 + i);
    }
    jobs[1].gp.on_token = cancel_after_3;
    jobs[1].gp.user = &seen;
    for (int i = 0; i < N; i++)
        assert_int_equal(pthread_create(&th[i], NULL, gen_thread, &jobs[i]), 0);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(jobs[1].rc, 0);
    assert_int_equal(jobs[1].r.n_ids, 3);
    assert_string_equal(jobs[1].r.finish_reason, "stop");
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].rc, 0);
        if (i == 1) {
            af_engine_result_deinit(&jobs[i].r);
            free(jobs[i].ids);
            continue;
        }
        assert_int_equal(jobs[i].r.n_ids, 40);
        check_alone(&ep, &jobs[i]);
    }
    /* the engine is idle again: an exclusive call gets through */
    float *lg = malloc((size_t)af_engine_n_vocab(e) * sizeof *lg);
    int32_t one = 5;
    assert_int_equal(af_engine_logits(e, &one, 1, 0, lg, err, sizeof err), 0);
    free(lg);
    af_engine_free(e);
}

/* Greedy log-probs are log-softmax values; the same seed gives the same text; stop strings
 * end the text before them. */
static void test_sampling(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine *e = open_tiny();
    int32_t *ids;
    size_t n;
    ids_of(e, "Once upon a time", &ids, &n);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 24;
    gp.ignore_eos = 1;
    gp.temperature = 1.0f;
    gp.top_p = 0.95f;
    gp.top_k = 50;
    gp.seed = 1234;
    struct af_engine_result a, b, c;
    assert_int_equal(af_engine_generate(e, ids, n, &gp, &a, err, sizeof err), 0);
    assert_int_equal(af_engine_generate(e, ids, n, &gp, &b, err, sizeof err), 0);
    assert_int_equal(a.n_ids, 24);
    assert_memory_equal(a.ids, b.ids, a.n_ids * sizeof *a.ids);
    assert_string_equal(a.text, b.text);
    gp.seed = 99;
    assert_int_equal(af_engine_generate(e, ids, n, &gp, &c, err, sizeof err), 0);
    assert_true(memcmp(a.ids, c.ids, a.n_ids * sizeof *a.ids) != 0);
    for (size_t i = 0; i < a.n_ids; i++)
        assert_true(a.logprobs[i] <= 0.0f && isfinite(a.logprobs[i]));
    af_engine_result_deinit(&b);
    af_engine_result_deinit(&c);
    /* top_k = 1 is greedy. */
    struct af_engine_gen_params g0 = af_engine_default_gen_params();
    g0.max_tokens = 12;
    g0.ignore_eos = 1;
    struct af_engine_gen_params g1 = g0;
    g1.temperature = 0.8f;
    g1.top_k = 1;
    g1.seed = 5;
    assert_int_equal(af_engine_generate(e, ids, n, &g0, &b, err, sizeof err), 0);
    assert_int_equal(af_engine_generate(e, ids, n, &g1, &c, err, sizeof err), 0);
    assert_memory_equal(b.ids, c.ids, b.n_ids * sizeof *b.ids);
    /* The greedy log-prob is the log-softmax of the first token's logits. */
    int64_t nv = af_engine_n_vocab(e);
    float *lg = malloc((size_t)nv * sizeof *lg);
    assert_int_equal(af_engine_logits(e, ids, n, 0, lg, err, sizeof err), 0);
    double mx = (double)lg[0], sum = 0;
    for (int64_t i = 1; i < nv; i++)
        mx = (double)lg[i] > mx ? (double)lg[i] : mx;
    for (int64_t i = 0; i < nv; i++)
        sum += exp((double)lg[i] - mx);
    assert_true(sum >= 1.0); /* the max term alone is exp(0) */
    if (sum >= 1.0)
        assert_true(fabs((double)b.logprobs[0] - ((double)lg[b.ids[0]] - mx - log(sum))) < 1e-4);
    free(lg);
    /* A stop string taken from the greedy text cuts it there. */
    size_t len = strlen(b.text);
    if (len >= 6) {
        char stop[8];
        memcpy(stop, b.text + len / 2, 3);
        stop[3] = '\0';
        const char *first = strstr(b.text, stop);
        g0.n_stop = 1;
        g0.stop[0] = stop;
        struct af_engine_result d;
        assert_int_equal(af_engine_generate(e, ids, n, &g0, &d, err, sizeof err), 0);
        assert_string_equal(d.finish_reason, "stop");
        assert_int_equal(strlen(d.text), (size_t)(first - b.text));
        assert_memory_equal(d.text, b.text, strlen(d.text));
        af_engine_result_deinit(&d);
    }
    af_engine_result_deinit(&a);
    af_engine_result_deinit(&b);
    af_engine_result_deinit(&c);
    free(ids);
    af_engine_free(e);
}

static int count_calls;
static int on_token_count(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id;
    (void)piece;
    (void)len;
    count_calls++;
    return count_calls == *(int *)user;
}

/* Streaming sees each token; returning nonzero stops the generation. Chat prompts use the
 * model's template. */
static void test_stream_and_chat(void **state)
{
    (void)state;
    char err[1024], vocab[1024];
    struct af_engine *e = open_tiny();
    struct af_engine_msg msgs[] = {{"system", "Be brief."}, {"user", "Hi"}};
    char *prompt = NULL;
    assert_int_equal(af_engine_chat_prompt(e, msgs, 2, &prompt, err, sizeof err), 0);
    assert_string_equal(prompt, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"
                                "<|im_end|>\n<|im_start|>assistant\n");
    int32_t *ids;
    size_t n;
    ids_of(e, prompt, &ids, &n);
    int stop_after = 5;
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 50;
    gp.ignore_eos = 1;
    gp.on_token = on_token_count;
    gp.user = &stop_after;
    count_calls = 0;
    struct af_engine_result r;
    assert_int_equal(af_engine_generate(e, ids, n, &gp, &r, err, sizeof err), 0);
    assert_int_equal(count_calls, 5);
    assert_int_equal(r.n_ids, 5);
    af_engine_result_deinit(&r);
    /* Without ../shared the tiny model has a byte vocabulary, with no <|im_start|> token. */
    const int have_vocab = test_shared_path("data/reference/tokenizer/ggml-vocab-qwen2.gguf", vocab,
                                            sizeof vocab) != NULL;
    const int32_t first = ids[0];
    free(ids);
    free(prompt);
    af_engine_free(e);
    if (!have_vocab) {
        fprintf(stderr, "skipped: the special-token check needs the Qwen2 vocabulary from "
                        "../shared (or AGENTFLOW_SHARED)\n");
        skip();
    }
    assert_int_equal(first, 151644); /* <|im_start|> parsed as one special token */
}

/* Errors name the fault: ids outside the vocabulary, contexts that overflow, missing files. */
static void test_bad_calls(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine *e = open_tiny();
    int32_t bad[2] = {1, 999999999};
    float *lg = malloc((size_t)af_engine_n_vocab(e) * sizeof *lg);
    assert_int_equal(af_engine_logits(e, bad, 2, 0, lg, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "999999999"));
    int32_t *many = calloc(2000, sizeof *many);
    assert_int_equal(af_engine_logits(e, many, 2000, 0, lg, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "context"));
    free(many);
    free(lg);
    af_engine_free(e);
    struct af_engine *none = NULL;
    assert_int_not_equal(af_engine_load("/nonexistent/model.gguf", NULL, &none, err, sizeof err),
                         AF_OK);
    assert_null(none);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

/* Rewrites the tiny model with one fault, then checks the load fails naming it. */
enum fault {
    F_MISSING,
    F_SHAPE,
    F_NAN,
    F_NAN_W,
    F_ARCH,
    F_NO_HPARAM,
    F_BAD_VOCAB,
    F_HUGE,
    F_HUGE_HEAD
};

static int write_faulty(const char *dst, enum fault f)
{
    char err[1024];
    struct gguf_file *g = NULL;
    if (gguf_open(tiny_path, &g, err, sizeof err))
        return -1;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    if (f == F_ARCH)
        gguf_writer_set_str(w, "general.architecture", "mamba");
    if (f == F_NO_HPARAM)
        gguf_writer_set_str(w, "qwen2.embedding_length", "wide");
    if (f == F_BAD_VOCAB)
        gguf_writer_set_str(w, "tokenizer.ggml.model", "unigram-x");
    float *poison = NULL;
    int rc = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(g) && !rc; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        const void *data = t->data;
        if (f == F_MISSING && !strcmp(name, "blk.1.ffn_down.weight"))
            continue;
        if (f == F_SHAPE && !strcmp(name, "blk.0.attn_q.weight"))
            ne[1] /= 2; /* half the rows the hyperparameters call for */
        if (f == F_HUGE && !strcmp(name, "blk.0.ffn_up.weight")) {
            /* finite, so the load accepts it, but every product overflows */
            poison = malloc(t->nbytes);
            for (size_t k = 0; k < t->nbytes / sizeof *poison; k++)
                poison[k] = k % 2 ? 3e38f : -3e38f;
            data = poison;
        }
        if (f == F_HUGE_HEAD && !strcmp(name, "token_embd.weight")) {
            /* the tied head's rows 16 and up overflow; the prompt's tokens (1-3) do not */
            poison = malloc(t->nbytes);
            memcpy(poison, t->data, t->nbytes);
            for (size_t k = 16 * (size_t)ne[0]; k < t->nbytes / sizeof *poison; k++)
                poison[k] = 3e38f;
            data = poison;
        }
        if ((f == F_NAN && !strcmp(name, "blk.1.attn_norm.weight")) ||
            (f == F_NAN_W && !strcmp(name, "blk.0.ffn_up.weight"))) {
            poison = malloc(t->nbytes);
            memcpy(poison, t->data, t->nbytes);
            poison[f == F_NAN ? 3 : 64 * 5 + 7] = f == F_NAN ? NAN : INFINITY; /* row 5 */
            data = poison;
        }
        uint64_t nbytes = t->nbytes;
        if (f == F_SHAPE && !strcmp(name, "blk.0.attn_q.weight"))
            nbytes /= 2;
        rc = gguf_writer_add_tensor(w, name, t->type, t->n_dims, ne, data, nbytes, err, sizeof err);
    }
    if (!rc)
        rc = gguf_writer_write(w, dst, err, sizeof err);
    free(poison);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

static void test_malformed_models(void **state)
{
    (void)state;
    static const struct {
        enum fault f;
        const char *want;
    } cases[] = {
        {F_MISSING, "blk.1.ffn_down.weight"},
        {F_SHAPE, "blk.0.attn_q.weight"},
        {F_NAN, "blk.1.attn_norm.weight"},
        {F_NAN_W, "blk.0.ffn_up.weight' holds a NaN or Inf in row 5"},
        {F_ARCH, "mamba"},
        {F_NO_HPARAM, "embedding_length"},
        {F_BAD_VOCAB, "tokenizer.ggml.model"},
    };
    char dst[300], err[1024];
    snprintf(dst, sizeof dst, "%s.bad.gguf", tiny_path);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(write_faulty(dst, cases[i].f), 0);
        struct af_engine *e = NULL;
        err[0] = '\0';
        int rc = af_engine_load(dst, NULL, &e, err, sizeof err);
        if (rc == AF_OK || !strstr(err, cases[i].want))
            fail_msg("fault %zu: rc %d, message '%s' should name '%s'", i, rc, err, cases[i].want);
        assert_null(e);
    }
    /* A quantized weight whose first block scale is NaN (FP16 0x7e00). */
    char q8[300];
    snprintf(q8, sizeof q8, "%s.q8.gguf", tiny_path);
    struct af_engine_random_params qp = {"qwen2", "tiny", "Q8_0", 5, NULL};
    assert_int_equal(af_engine_make_random(&qp, q8, err, sizeof err), 0);
    struct gguf_file *g = NULL;
    assert_int_equal(gguf_open(q8, &g, err, sizeof err), 0);
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    uint8_t *poison = NULL;
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        const void *data = t->data;
        if (!strcmp(name, "blk.1.ffn_gate.weight")) {
            assert_int_equal(t->type, GGML_TYPE_Q8_0);
            poison = malloc(t->nbytes);
            memcpy(poison, t->data, t->nbytes);
            poison[0] = 0x00;
            poison[1] = 0x7e;
            data = poison;
        }
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, data, t->nbytes,
                                                err, sizeof err),
                         0);
    }
    assert_int_equal(gguf_writer_write(w, dst, err, sizeof err), 0);
    gguf_writer_free(w);
    gguf_close(g);
    free(poison);
    struct af_engine *eq = NULL;
    assert_int_not_equal(af_engine_load(dst, NULL, &eq, err, sizeof err), AF_OK);
    assert_non_null(strstr(err, "blk.1.ffn_gate.weight' holds a NaN or Inf in row 0"));
    unlink(q8);
    /* A truncated model file. */
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(af_file_read(tiny_path, (size_t)1 << 30, &text, &len, err, sizeof err), 0);
    assert_int_equal(af_file_write_atomic(dst, text, len / 2, err, sizeof err), 0);
    free(text);
    struct af_engine *e = NULL;
    assert_int_not_equal(af_engine_load(dst, NULL, &e, err, sizeof err), AF_OK);
    assert_non_null(strstr(err, dst));
    unlink(dst);
}

static struct proc_result cli(const char *const *args);

/* Loads dst (2 threads): logits of a 3-token prompt and a generation both fail with AF_EPARSE,
 * their messages holding want_logits and want_gen. */
static void expect_overflow(const char *dst, const char *want_logits, const char *want_gen)
{
    char err[1024];
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 256;
    struct af_engine *e = NULL;
    if (af_engine_load(dst, &ep, &e, err, sizeof err))
        fail_msg("%s", err);
    int32_t ids[3] = {1, 2, 3};
    float *lg = malloc((size_t)af_engine_n_vocab(e) * sizeof *lg);
    err[0] = '\0';
    assert_int_equal(af_engine_logits(e, ids, 3, 0, lg, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, want_logits));
    free(lg);
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = 4;
    struct af_engine_result r;
    err[0] = '\0';
    assert_int_equal(af_engine_generate(e, ids, 3, &gp, &r, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, want_gen));
    af_engine_result_deinit(&r);
    af_engine_free(e);
}

/* Weights of 3e38 pass the load (they are finite) but overflow at run time: logits and
 * generation fail naming the layer, and the CLI prints no NaN and no bytes of garbage. */
static void test_overflowing_weights(void **state)
{
    (void)state;
    char dst[300];
    snprintf(dst, sizeof dst, "%s.huge.gguf", tiny_path);
    assert_int_equal(write_faulty(dst, F_HUGE), 0);
    expect_overflow(dst, "layer 0 (blk.0.*)", "blk.0");
    struct proc_result pr = cli((const char *[]){"model", "logits", dst, "--prompt", "hi", NULL});
    assert_int_equal(pr.exit_code, 4);
    assert_null(strstr(pr.out, "nan"));
    assert_non_null(strstr(pr.err, "blk.0"));
    proc_result_deinit(&pr);
    pr = cli((const char *[]){"model", "generate", dst, "--prompt", "hi", "-n", "4", NULL});
    assert_int_equal(pr.exit_code, 4);
    assert_non_null(strstr(pr.err, "blk.0"));
    assert_int_equal(strspn(pr.out, "\n"), strlen(pr.out)); /* nothing generated */
    proc_result_deinit(&pr);
    unlink(dst);
}

/* Head rows of 3e38 overflow only in the output head: logits (a prompt's pass) and generation
 * (the scheduler's decode steps) fail naming it. The threads that write the logits check them. */
static void test_overflowing_head(void **state)
{
    (void)state;
    char dst[300];
    snprintf(dst, sizeof dst, "%s.hugehead.gguf", tiny_path);
    assert_int_equal(write_faulty(dst, F_HUGE_HEAD), 0);
    expect_overflow(dst, "output head", "output head");
    unlink(dst);
}

/* A token list shorter than token_embd.weight (10 against 259 rows) is refused at load,
 * naming the field; a longer one too. */
static void test_vocab_rows_mismatch(void **state)
{
    (void)state;
    char src[300], dst[300], err[1024];
    snprintf(src, sizeof src, "%s.bytes.gguf", tiny_path);
    snprintf(dst, sizeof dst, "%s.short.gguf", tiny_path);
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 3, NULL};
    assert_int_equal(af_engine_make_random(&rp, src, err, sizeof err), 0);
    struct gguf_file *g = NULL;
    assert_int_equal(gguf_open(src, &g, err, sizeof err), 0);
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kvs(w, g);
    struct gguf_str toks[10];
    char text[10][16];
    for (int i = 0; i < 10; i++) {
        snprintf(text[i], sizeof text[i], "t%d", i);
        toks[i].s = text[i];
        toks[i].n = strlen(text[i]);
    }
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 10);
    for (uint64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.s);
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data,
                                                t->nbytes, err, sizeof err),
                         0);
    }
    assert_int_equal(gguf_writer_write(w, dst, err, sizeof err), 0);
    gguf_writer_free(w);
    gguf_close(g);
    struct af_engine *e = NULL;
    err[0] = '\0';
    int rc = af_engine_load(dst, NULL, &e, err, sizeof err);
    if (rc == AF_OK || !strstr(err, "tokenizer.ggml.tokens") || !strstr(err, "token_embd"))
        fail_msg("rc %d, message '%s' should name both fields", rc, err);
    assert_null(e);
    unlink(src);
    unlink(dst);
}

/* quantize gives the reference file's types (llama-quantize's choices) and, for Q8_0, its
 * bytes; make-random is deterministic. */
static void test_quantize_and_make_random(void **state)
{
    (void)state;
    char dir[1024], in[1200], ref[1200], out[300], err[1024];
    snprintf(out, sizeof out, "%s.q.gguf", tiny_path);
    if (test_shared_path("data/reference/models", dir, sizeof dir)) {
        static const struct {
            const char *in, *ref, *type;
            int bytes_equal;
        } cases[] = {
            {"tiny-qwen2-f32.gguf", "tiny-qwen2-q8_0.gguf", "Q8_0", 1},
            {"tiny-llama-f32.gguf", "tiny-llama-q4_0.gguf", "Q4_0", 1},
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            snprintf(in, sizeof in, "%s/%s", dir, cases[c].in);
            snprintf(ref, sizeof ref, "%s/%s", dir, cases[c].ref);
            assert_int_equal(af_engine_quantize(in, out, cases[c].type, err, sizeof err), 0);
            struct gguf_file *a = NULL, *b = NULL;
            assert_int_equal(gguf_open(out, &a, err, sizeof err), 0);
            assert_int_equal(gguf_open(ref, &b, err, sizeof err), 0);
            assert_int_equal(gguf_n_tensors(a), gguf_n_tensors(b));
            for (uint64_t i = 0; i < gguf_n_tensors(b); i++) {
                const struct gguf_tensor *tb = gguf_tensor_at(b, i);
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)tb->name.n, tb->name.s);
                const struct gguf_tensor *ta = gguf_find_tensor(a, name);
                assert_non_null(ta);
                if (ta->type != tb->type)
                    fail_msg("%s: %s is %s, llama-quantize wrote %s", cases[c].type, name,
                             quant_type_name(ta->type), quant_type_name(tb->type));
                if (cases[c].bytes_equal) {
                    assert_int_equal(ta->nbytes, tb->nbytes);
                    if (memcmp(ta->data, tb->data, tb->nbytes))
                        fail_msg("%s: %s bytes differ from llama-quantize's", cases[c].type, name);
                }
            }
            gguf_close(a);
            gguf_close(b);
        }
    }
    /* The same seed gives the same file. */
    char again[300];
    snprintf(again, sizeof again, "%s.again.gguf", tiny_path);
    char vocab[1024];
    struct af_engine_random_params rp = {"qwen2", "tiny", "F32", 7, NULL};
    rp.vocab_from =
        test_shared_path("data/reference/tokenizer/ggml-vocab-qwen2.gguf", vocab, sizeof vocab);
    assert_int_equal(af_engine_make_random(&rp, again, err, sizeof err), 0);
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    assert_int_equal(af_file_read(tiny_path, (size_t)1 << 30, &x, &nx, err, sizeof err), 0);
    assert_int_equal(af_file_read(again, (size_t)1 << 30, &y, &ny, err, sizeof err), 0);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, nx);
    free(x);
    free(y);
    /* --name: general.name is set (the rest as without it); "" is refused. */
    assert_int_equal(
        af_engine_quantize_named(tiny_path, out, "Q8_0", "agentflow-test", err, sizeof err), 0);
    struct gguf_file *named = NULL;
    assert_int_equal(gguf_open(out, &named, err, sizeof err), 0);
    char *gname = gguf_get_strdup(named, "general.name");
    assert_non_null(gname);
    assert_string_equal(gname, "agentflow-test");
    free(gname);
    gguf_close(named);
    assert_int_equal(af_engine_quantize_named(tiny_path, out, "Q8_0", "", err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "name"));
    /* Every type loads and runs; llama with the byte vocabulary too. */
    static const char *types[] = {"F16",  "BF16", "Q8_0", "Q4_0", "Q4_1",  "Q5_0",
                                  "Q5_1", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        struct af_engine_random_params lp = {"llama", "small", types[i], 3, NULL};
        assert_int_equal(af_engine_make_random(&lp, again, err, sizeof err), 0);
        struct af_engine *e = NULL;
        if (af_engine_load(again, NULL, &e, err, sizeof err))
            fail_msg("%s: %s", types[i], err);
        int32_t ids[4] = {10, 20, 30, 40};
        struct af_engine_gen_params gp = af_engine_default_gen_params();
        gp.max_tokens = 4;
        gp.ignore_eos = 1;
        struct af_engine_result r;
        assert_int_equal(af_engine_generate(e, ids, 4, &gp, &r, err, sizeof err), 0);
        assert_int_equal(r.n_ids, 4);
        af_engine_result_deinit(&r);
        af_engine_free(e);
    }
    unlink(again);
    unlink(out);
}

struct chat_job {
    struct af_llm *llm;
    int rc;
    size_t n_resp;
    char text[256];
};

static void *chat_thread(void *arg)
{
    struct chat_job *j = arg;
    struct af_msg msgs[] = {{"system", "You plan."}, {"user", "Pick a tool."}};
    struct af_llm_request req = {.msgs = msgs, .n_msgs = 2, .sampling = af_llm_default_sampling()};
    req.sampling.max_tokens = 6;
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    j->rc = af_llm_chat(j->llm, &req, &rep);
    if (j->rc == AF_OK && rep.response_ids && rep.response_logprobs && rep.prompt_ids &&
        rep.n_prompt_ids > 10 && (int64_t)rep.n_response_ids == rep.completion_tokens) {
        j->n_resp = rep.n_response_ids;
        snprintf(j->text, sizeof j->text, "%s", rep.text);
    }
    af_llm_reply_deinit(&rep);
    return NULL;
}

/* `gguf:` as a chat back-end: handles on one file share the engine, concurrent calls are
 * serialised and give the same greedy reply, and replies carry ids and log-probs. */
static void test_llm_backend(void **state)
{
    (void)state;
    char err[1024];
    struct af_engine_params ep = af_engine_default_params();
    ep.chat_template = "chatml";
    ep.n_threads = 1;
    struct af_llm *a = af_llm_gguf_new(tiny_path, &ep, err, sizeof err);
    struct af_llm *b = af_llm_gguf_new(tiny_path, &ep, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(af_llm_kind(a), "gguf");
    struct chat_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].llm = i % 2 ? b : a;
        assert_int_equal(pthread_create(&th[i], NULL, chat_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].rc, AF_OK);
        assert_true(jobs[i].n_resp >= 1 && jobs[i].n_resp <= 6);
        assert_string_equal(jobs[i].text, jobs[0].text);
    }
    /* A request's deadline: already past, nothing runs; reached mid-generation, it stops. */
    struct af_msg m = {"user", "Count to one hundred."};
    struct af_llm_request req = {.msgs = &m,
                                 .n_msgs = 1,
                                 .sampling = af_llm_default_sampling(),
                                 .deadline_ms = af_clock_ms() - 1};
    req.sampling.max_tokens = 4096;
    struct af_llm_reply rep;
    af_llm_reply_init(&rep);
    assert_int_equal(af_llm_chat(a, &req, &rep), AF_ETIMEOUT);
    assert_non_null(strstr(rep.errmsg, "deadline"));
    af_llm_reply_deinit(&rep);
    req.deadline_ms = af_clock_ms() + 50;
    req.sampling.temperature = 1.0; /* no early end of text to count on */
    af_llm_reply_init(&rep);
    int rc = af_llm_chat(a, &req, &rep);
    assert_true(rc == AF_ETIMEOUT || (rc == AF_OK && rep.n_response_ids < 4096));
    af_llm_reply_deinit(&rep);
    /* ignore_eos: exactly max_tokens tokens, whatever the model says */
    req.deadline_ms = 0;
    req.sampling.temperature = 0;
    req.sampling.max_tokens = 24;
    req.sampling.ignore_eos = 1;
    af_llm_reply_init(&rep);
    assert_int_equal(af_llm_chat(a, &req, &rep), AF_OK);
    assert_int_equal(rep.completion_tokens, 24);
    assert_int_equal(rep.n_response_ids, 24);
    af_llm_reply_deinit(&rep);
    /* The flag must reach the engine: the shipped world model ends a short reply with its end
     * token well before 64 tokens; with ignore_eos the same request runs to exactly 64. */
    const char *src = getenv("AGENTFLOW_SRC");
    char world[1024];
    snprintf(world, sizeof world, "%s/models/agentflow-world.gguf", src ? src : ".");
    struct af_llm *w = af_llm_gguf_new(world, &ep, err, sizeof err);
    if (!w) {
        printf("skipping the ignore_eos pass-through check: %s\n", err);
    } else {
        /* the compact generator's layout, which it was trained on (greedy: it ends well
         * before 64 tokens) */
        struct af_msg wm[2] = {
            {"system", "You are a careful assistant. Follow the reply format exactly."},
            {"user", "Query: What is 2 + 3?\nTools:\n- Python_Code_Generator_Tool\nAnalysis:\nA "
                     "sum.\nSteps so far:\n1. Python_Code_Generator_Tool: printed 5\n\nAnswer the "
                     "query from the steps. Reply with:\n**Process Summary:** <the steps and what "
                     "they found>\n**Answer:** <the answer alone>"}};
        struct af_llm_request wr = {.msgs = wm, .n_msgs = 2, .sampling = af_llm_default_sampling()};
        wr.sampling.temperature = 0;
        wr.sampling.max_tokens = 64;
        af_llm_reply_init(&rep);
        assert_int_equal(af_llm_chat(w, &wr, &rep), AF_OK);
        assert_true(rep.n_response_ids < 64);
        assert_string_equal(rep.finish_reason, "stop");
        af_llm_reply_deinit(&rep);
        wr.sampling.ignore_eos = 1;
        af_llm_reply_init(&rep);
        assert_int_equal(af_llm_chat(w, &wr, &rep), AF_OK);
        assert_int_equal(rep.n_response_ids, 64);
        assert_string_equal(rep.finish_reason, "length");
        af_llm_reply_deinit(&rep);
        af_llm_free(w);
    }
    af_llm_free(a);
    af_llm_free(b);
    assert_null(af_llm_gguf_new("/nonexistent.gguf", NULL, err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent.gguf"));
}

static struct proc_result cli(const char *const *args)
{
    const char *argv[16] = {proc_agentflow_bin()};
    size_t n = 1;
    while (args[n - 1] && n < 15) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, 600, &r), 0);
    return r;
}

/* `agentflow model ...` and `agentflow run --url gguf:` end to end. */
static void test_cli_model(void **state)
{
    (void)state;
    char path[300], cfg[300];
    snprintf(path, sizeof path, "%s.cli.gguf", tiny_path);
    snprintf(cfg, sizeof cfg, "%s.cfg.json", tiny_path);
    struct proc_result r =
        cli((const char *[]){"model", "make-random", "--arch", "qwen2", "--shape", "tiny", "--type",
                             "Q8_0", "--seed", "3", path, NULL});
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "info", path, NULL});
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "\"arch\": \"qwen2\""));
    assert_non_null(strstr(r.out, "\"Q8_0\""));
    proc_result_deinit(&r);
    /* The byte vocabulary: one token per byte; <|im_start|> is one special token. */
    r = cli((const char *[]){"model", "tokenize", path, "<|im_start|>ab", NULL});
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.out, "257 97 98\n"); /* token i is byte i */
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "logits", path, "--prompt", "hello", "--top", "3", NULL});
    assert_int_equal(r.exit_code, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "n_tokens")), 5);
    json_t *top = json_object_get(j, "top");
    assert_int_equal(json_array_size(top), 3);
    assert_true(json_number_value(json_array_get(json_array_get(top, 0), 1)) >=
                json_number_value(json_array_get(json_array_get(top, 1), 1)));
    json_decref(j);
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "generate", path, "--prompt", "hi", "-n", "7", "--json",
                             "--ignore-eos", NULL});
    assert_int_equal(r.exit_code, 0);
    j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "n_generated")), 7);
    assert_int_equal(json_array_size(json_object_get(j, "logprobs")), 7);
    json_decref(j);
    proc_result_deinit(&r);
    /* --kv-type: f16 runs; a bad type names the flag and the value */
    r = cli((const char *[]){"model", "generate", path, "--prompt", "hi", "-n", "3", "--json",
                             "--ignore-eos", "--kv-type", "f16", NULL});
    assert_int_equal(r.exit_code, 0);
    j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "n_generated")), 3);
    json_decref(j);
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "generate", path, "--prompt", "hi", "--kv-type", "q8", NULL});
    assert_int_not_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "--kv-type"));
    assert_non_null(strstr(r.err, "q8"));
    proc_result_deinit(&r);
    /* The whole flow on the in-process engine, every slot sharing the model. */
    FILE *f = fopen(cfg, "w");
    fputs("{\"max_tokens\": 24}", f);
    fclose(f);
    char url[320];
    snprintf(url, sizeof url, "gguf:%s", path);
    r = cli((const char *[]){"run", "--url", url, "--config", cfg, "--max-steps", "1", "--json",
                             "What is 6 times 7?", NULL});
    assert_int_equal(r.exit_code, 0);
    j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    assert_true(json_is_null(json_object_get(j, "error")));
    assert_int_equal(json_integer_value(json_object_get(j, "steps")), 1);
    json_decref(j);
    proc_result_deinit(&r);
    /* Bad files and usage. */
    r = cli((const char *[]){"model", "info", cfg, NULL});
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, cfg));
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "quantize", path, cfg, "Q3_XX", NULL});
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    r = cli((const char *[]){"model", "frobnicate", NULL});
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    unlink(path);
    unlink(cfg);
}

/* ---- the engine's worker pool ---- */

#define TP_UNITS 64

struct tp_job {
    _Atomic int next;
    int hits[TP_UNITS]; /* each unit's count, written by whoever took it */
    _Atomic int in_fn;  /* calls inside fn now */
    _Atomic int max_in_fn;
    _Atomic int bad_tid;
    _Atomic unsigned tids_seen;
};

static void tp_fn(void *arg, int tid, int nth)
{
    struct tp_job *j = arg;
    if (tid < 0 || tid >= nth)
        atomic_store(&j->bad_tid, 1);
    const unsigned bit = 1u << (tid & 31);
    if (atomic_fetch_or(&j->tids_seen, bit) & bit) /* two calls of one run with one tid */
        atomic_store(&j->bad_tid, 1);
    const int now = atomic_fetch_add(&j->in_fn, 1) + 1;
    for (int m = atomic_load(&j->max_in_fn); now > m;)
        if (atomic_compare_exchange_weak(&j->max_in_fn, &m, now))
            break;
    for (int u; (u = atomic_fetch_add(&j->next, 1)) < TP_UNITS;)
        j->hits[u]++;
    atomic_fetch_sub(&j->in_fn, 1);
}

/* Every unit of every run is done exactly once, by at most nth calls with distinct tids, over
 * runs back to back (workers spinning) and after pauses (workers asleep). */
static void test_tpool_runs(void **state)
{
    (void)state;
    struct tpool *p = tpool_new(3);
    assert_int_equal(tpool_threads(p), 3);
    for (int nth = 1; nth <= 5; nth++) {
        const int n = nth < 3 ? nth : 3;
        for (int r = 0; r < 2000; r++) {
            if (r % 500 == 499)
                af_clock_sleep_ms(10); /* past the spin: the workers sleep */
            struct tp_job j = {0};
            tpool_run(p, nth, tp_fn, &j);
            for (int u = 0; u < TP_UNITS; u++)
                assert_int_equal(j.hits[u], 1);
            assert_int_equal(atomic_load(&j.bad_tid), 0);
            assert_true(atomic_load(&j.max_in_fn) <= n);
            assert_int_equal(atomic_load(&j.in_fn), 0);
        }
    }
    tpool_free(p);
    tpool_free(NULL);
    /* A pool of one thread, or none, runs everything on the caller. */
    struct tp_job j = {0};
    tpool_run(NULL, 4, tp_fn, &j);
    assert_int_equal(j.hits[TP_UNITS - 1], 1);
    assert_int_equal(atomic_load(&j.tids_seen), 1u);
}

struct tp_caller {
    struct tpool *p;
    int runs_ok;
};

static void *tp_caller_main(void *a)
{
    struct tp_caller *k = a;
    for (int r = 0; r < 3000; r++) {
        struct tp_job j = {0};
        tpool_run(k->p, 2, tp_fn, &j);
        int ok = atomic_load(&j.bad_tid) == 0;
        for (int u = 0; u < TP_UNITS; u++)
            ok &= j.hits[u] == 1;
        k->runs_ok += ok;
    }
    return NULL;
}

/* Two threads running on one pool at once take turns, and neither loses a unit. The shared
 * pool of a thread count is one pool. */
static void test_tpool_concurrent_callers(void **state)
{
    (void)state;
    struct tpool *p = tpool_new(2);
    struct tp_caller k[2] = {{p, 0}, {p, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, tp_caller_main, &k[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(k[0].runs_ok, 3000);
    assert_int_equal(k[1].runs_ok, 3000);
    tpool_free(p);
    assert_ptr_equal(tpool_shared(3), tpool_shared(3));
    assert_ptr_not_equal(tpool_shared(3), tpool_shared(2));
    assert_int_equal(tpool_threads(tpool_shared(3)), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tpool_runs),
        cmocka_unit_test(test_tpool_concurrent_callers),
        cmocka_unit_test(test_reference_logits),
        cmocka_unit_test(test_reference_prompt_ids),
        cmocka_unit_test(test_hf_checkpoints),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_batch_invariant),
        cmocka_unit_test(test_concurrent_batching),
        cmocka_unit_test(test_long_prompt_rides_decode),
        cmocka_unit_test(test_kv_f16),
        cmocka_unit_test(test_concurrent_batching_q4_k_m),
        cmocka_unit_test(test_concurrent_batching_q5_1),
        cmocka_unit_test(test_cancel_in_batch),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_stream_and_chat),
        cmocka_unit_test(test_bad_calls),
        cmocka_unit_test(test_malformed_models),
        cmocka_unit_test(test_quantize_and_make_random),
        cmocka_unit_test(test_packed_weights),
        cmocka_unit_test(test_concurrent_batching_bf16),
        cmocka_unit_test(test_packed_rows_released),
        cmocka_unit_test(test_packed_form_after_isa_switch),
        cmocka_unit_test(test_cli_model),
        cmocka_unit_test(test_llm_backend),
        cmocka_unit_test(test_overflowing_weights),
        cmocka_unit_test(test_overflowing_head),
        cmocka_unit_test(test_vocab_rows_mismatch),
    };
    return cmocka_run_group_tests(tests, make_tiny, drop_tiny);
}
