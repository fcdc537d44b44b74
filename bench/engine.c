/*
 * bench/engine.c - prefill and decode speed of the in-process engine on random models of the
 * Qwen2.5-0.5B shape (the llama-bench comparison of issue 3), plus the prefix cache: a second
 * prompt sharing a 2,000-token prefix with the first.
 *
 *   build/release/bench/engine [--types F32,F16,Q8_0,Q4_0,Q4_K_M] [-p 512] [-n 128] [-t 2]
 *                              [--prefix 2000] [--shape qwen2.5-0.5b] [--dir DIR] [--vocab GGUF]
 *
 * Decode is reported twice: after the -p prompt (attention over 512+ positions), and from a
 * one-token prompt, which is what llama-bench's tg128 measures.
 *
 * --concurrent 1,2,4,8 instead runs N generations at once on one engine (continuous batching)
 * and reports their aggregate decode tokens/s; --invariant loads the engine in batch-invariant
 * mode (what Flow-GRPO's rollouts use), to see what it costs. --concurrent-prompt P gives each
 * generation its own P-token prompt (default 32), evaluated and cached before the timed run, which
 * then measures decoding (over long contexts with a long P, where attention over their KV weighs
 * in); --cold-prompts 1 prefills prompts of up to 32 tokens inside the timed run, as this bench
 * did before 2026-12-07. --shared-prompt 1 gives the N generations one prompt instead, as
 * Flow-GRPO's group of rollouts of a question has: sampled (temperature 1, a seed each) so that
 * they part after it, while the prompt's KV blocks are shared. --kv-type f16 loads the engine with
 * an F16 KV cache. --sampling planner samples every generation as the flow's planner does by
 * default (temperature 0.7, top-p 0.99, frequency penalty 1.2, a seed each), where the sampler's
 * filters weigh in; --sampling rollout at temperature 1 without filters (Flow-GRPO's rollouts).
 *
 * Models are generated once into DIR (default /tmp/agentflow-bench) with a fixed seed. Prints a
 * markdown table; record it in docs/PERFORMANCE.md.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentflow/engine.h"
#include "core/clock.h"

#define USAGE                                                                                      \
    "usage: bench/engine [--types F32,F16,Q8_0,Q4_0,Q4_K_M] [-p 512] [-n 128] [-t 2]\n"            \
    "                    [--prefix 2000] [--shape qwen2.5-0.5b] [--dir DIR] [--vocab GGUF]\n"      \
    "                    [--concurrent 1,2,4,8] [--invariant 0|1] [--concurrent-prompt 32]\n"      \
    "                    [--shared-prompt 0|1] [--kv-type f32|f16] [--cold-prompts 0|1]\n"         \
    "                    [--sampling greedy|rollout|planner]\n"

struct opts {
    char types[256], concurrent[128];
    const char *shape, *dir, *vocab;
    int pp, tg, threads, prefix, invariant, cprompt, kv_f16, shared, cold;
};

static void rand_ids(int32_t *ids, int n, int64_t nv, uint64_t *st)
{
    for (int i = 0; i < n; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((*st >> 33) % (uint64_t)(nv * 9 / 10));
    }
}

enum sampling { SAMPLING_GREEDY, SAMPLING_ROLLOUT, SAMPLING_PLANNER };
static enum sampling g_sampling;

/* seed 0: greedy; else sampled with that seed, at temperature 1 or as the planner samples */
static int gen(struct af_engine *e, const int32_t *ids, int n, int n_gen, uint64_t seed,
               struct af_engine_result *r)
{
    char err[1024];
    struct af_engine_gen_params gp = af_engine_default_gen_params();
    gp.max_tokens = n_gen;
    gp.temperature = seed ? 1.0f : 0.0f;
    gp.seed = seed;
    if (seed && g_sampling == SAMPLING_PLANNER) { /* src/flow/solver.c's planner slot */
        gp.temperature = 0.7f;
        gp.top_p = 0.99f;
        gp.frequency_penalty = 1.2f;
    }
    gp.ignore_eos = 1;
    if (af_engine_generate(e, ids, (size_t)n, &gp, r, err, sizeof err)) {
        fprintf(stderr, "bench/engine: %s\n", err);
        return -1;
    }
    return 0;
}

struct job {
    struct af_engine *e;
    int32_t *ids;
    int n_ids, tg, rc;
    uint64_t seed;
};

static void *job_run(void *arg)
{
    struct job *j = arg;
    struct af_engine_result r;
    j->rc = gen(j->e, j->ids, j->n_ids, j->tg, j->seed, &r);
    af_engine_result_deinit(&r);
    return NULL;
}

/* N generations of tg tokens from np-token prompts at once: aggregate tokens/s over the wall
 * time. The prompts are evaluated first, one by one (the radix cache keeps them), so that the
 * timed run is the decode of N sequences (and each prompt's last token again, for its logits);
 * cold: prompts of up to 32 tokens are prefilled inside the timed run instead (this bench's
 * figures before 2026-12-07; eight sequences' 256 prompt tokens were 14% of that run's time and
 * one's 32 about 3%). shared: one prompt for all N, sampled with a seed each. */
static double concurrent_run(struct af_engine *e, int n, int tg, int np, int shared, int cold,
                             uint64_t *st)
{
    struct job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    for (int i = 0; i < n; i++) {
        jobs[i].e = e;
        jobs[i].tg = tg;
        jobs[i].n_ids = np;
        jobs[i].ids = malloc((size_t)np * sizeof *jobs[i].ids);
        jobs[i].seed = shared || g_sampling != SAMPLING_GREEDY ? (uint64_t)i + 1 : 0;
        if (shared && i > 0) {
            memcpy(jobs[i].ids, jobs[0].ids, (size_t)np * sizeof *jobs[i].ids);
            continue;
        }
        rand_ids(jobs[i].ids, np, af_engine_n_vocab(e), st);
        struct af_engine_result r;
        if ((!cold || np > 32) && gen(e, jobs[i].ids, np, 1, 0, &r) == 0)
            af_engine_result_deinit(&r);
    }
    const double t0 = af_clock_ms();
    for (int i = 0; i < n; i++)
        pthread_create(&th[i], NULL, job_run, &jobs[i]);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        rc |= jobs[i].rc;
    }
    const double s = (af_clock_ms() - t0) / 1000.0;
    for (int i = 0; i < n; i++)
        free(jobs[i].ids);
    free(jobs);
    free(th);
    return rc ? -1 : (double)n * tg / s;
}

static int one_type(const struct opts *o, const char *type)
{
    char path[1024], err[1024];
    snprintf(path, sizeof path, "%s/%s-%s.gguf", o->dir, o->shape, type);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "making %s ...\n", path);
        struct af_engine_random_params rp = {"qwen2", o->shape, type, 1, o->vocab};
        if (af_engine_make_random(&rp, path, err, sizeof err)) {
            fprintf(stderr, "bench/engine: %s\n", err);
            return -1;
        }
    }
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = o->threads;
    ep.n_ctx = 4096;
    ep.batch_invariant = o->invariant;
    ep.kv_f16 = o->kv_f16;
    struct af_engine *e = NULL;
    if (af_engine_load(path, &ep, &e, err, sizeof err)) {
        fprintf(stderr, "bench/engine: %s\n", err);
        return -1;
    }
    if (o->concurrent[0]) {
        uint64_t st = 11;
        struct af_engine_result w;
        int32_t warm[32];
        rand_ids(warm, 32, af_engine_n_vocab(e), &st);
        int rc = gen(e, warm, 32, 2, 0, &w); /* fault the weights in */
        af_engine_result_deinit(&w);
        double one = 0;
        char list[128];
        snprintf(list, sizeof list, "%s", o->concurrent);
        char *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
            const int n = atoi(tok);
            const double tps =
                n > 0 ? concurrent_run(e, n, o->tg, o->cprompt, o->shared, o->cold, &st) : -1;
            if (tps < 0) {
                rc = -1;
                break;
            }
            if (n == 1)
                one = tps;
            printf("| %s | %d | %.1f | %s |\n", type, n, tps, one > 0 ? "" : "-");
            if (one > 0 && n > 1)
                printf("|  |  | (%.2fx one) |  |\n", tps / one);
            fflush(stdout);
        }
        af_engine_free(e);
        return rc;
    }
    int64_t nv = af_engine_n_vocab(e);
    int cap = o->pp > o->prefix + 64 ? o->pp : o->prefix + 64;
    int32_t *a = malloc((size_t)cap * sizeof *a), *b = malloc((size_t)cap * sizeof *b);
    uint64_t st = 7;
    struct af_engine_result r[5];
    memset(r, 0, sizeof r);
    int rc = 0;
    rand_ids(a, 32, nv, &st);
    rc = gen(e, a, 32, 2, 0, &r[0]); /* warm-up: fault the weights in */
    rand_ids(a, o->pp, nv, &st);
    if (!rc)
        rc = gen(e, a, o->pp, o->tg + 1, 0, &r[1]);
    rand_ids(a, o->prefix + 64, nv, &st);
    memcpy(b, a, (size_t)o->prefix * sizeof *a);
    rand_ids(b + o->prefix, 64, nv, &st);
    if (!rc)
        rc = gen(e, a, o->prefix + 64, 1, 0, &r[2]);
    if (!rc)
        rc = gen(e, b, o->prefix + 64, 1, 0, &r[3]);
    /* llama-bench's tg: decode from an (almost) empty context */
    if (!rc)
        rc = gen(e, a, 1, o->tg + 1, 0, &r[4]);
    if (!rc)
        printf("| %s | %.1f | %.2f | %.2f | %.0f ms | %.0f ms (%.1f%%) |\n", type,
               o->pp / (r[1].prefill_ms / 1000), o->tg / (r[1].decode_ms / 1000),
               o->tg / (r[4].decode_ms / 1000), r[2].prefill_ms, r[3].prefill_ms,
               100 * r[3].prefill_ms / r[2].prefill_ms);
    fflush(stdout);
    for (int i = 0; i < 5; i++)
        af_engine_result_deinit(&r[i]);
    free(a);
    free(b);
    af_engine_free(e);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o = {"F32,F16,Q8_0,Q4_0,Q4_K_M",
                     "",
                     "qwen2.5-0.5b",
                     "/tmp/agentflow-bench",
                     NULL,
                     512,
                     128,
                     2,
                     2000,
                     0,
                     32,
                     0,
                     0,
                     0};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--types"))
            snprintf(o.types, sizeof o.types, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "-p"))
            o.pp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n"))
            o.tg = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-t"))
            o.threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefix"))
            o.prefix = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shape"))
            o.shape = argv[i + 1];
        else if (!strcmp(argv[i], "--dir"))
            o.dir = argv[i + 1];
        else if (!strcmp(argv[i], "--vocab"))
            o.vocab = argv[i + 1];
        else if (!strcmp(argv[i], "--concurrent"))
            snprintf(o.concurrent, sizeof o.concurrent, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--invariant"))
            o.invariant = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cold-prompts"))
            o.cold = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--concurrent-prompt"))
            o.cprompt = atoi(argv[i + 1]) < 1 ? 1 : atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shared-prompt"))
            o.shared = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--kv-type"))
            o.kv_f16 = !strcmp(argv[i + 1], "f16");
        else if (!strcmp(argv[i], "--sampling") &&
                 (!strcmp(argv[i + 1], "greedy") || !strcmp(argv[i + 1], "rollout") ||
                  !strcmp(argv[i + 1], "planner")))
            g_sampling = !strcmp(argv[i + 1], "planner")   ? SAMPLING_PLANNER
                         : !strcmp(argv[i + 1], "rollout") ? SAMPLING_ROLLOUT
                                                           : SAMPLING_GREEDY;
        else {
            fprintf(stderr, "bench/engine: unknown option %s\n%s", argv[i], USAGE);
            return 2;
        }
    }
    if (o.pp < 1 || o.tg < 1 || o.threads < 1 || o.prefix < 1) {
        fprintf(stderr, "bench/engine: -p, -n, -t and --prefix must be at least 1\n%s", USAGE);
        return 2;
    }
    mkdir(o.dir, 0755);
    printf("shape %s, %d threads, pp%d / tg%d, prefix %d tokens%s, %s KV cache\n\n", o.shape,
           o.threads, o.pp, o.tg, o.prefix, o.invariant ? ", batch-invariant engine" : "",
           o.kv_f16 ? "F16" : "F32");
    if (o.concurrent[0]) {
        printf("| type | generations at once | aggregate decode tok/s (%d-token prompt%s%s, tg "
               "%d each%s) | |\n|---|---|---|---|\n",
               o.cprompt, o.shared ? ", one for all" : "s",
               o.cold && o.cprompt <= 32 ? ", prefilled in the timed run" : ", cached first", o.tg,
               g_sampling == SAMPLING_PLANNER               ? ", sampled as the planner"
               : g_sampling == SAMPLING_ROLLOUT || o.shared ? ", sampled at temperature 1"
                                                            : ", greedy");
        int rc = 0;
        for (char *t = strtok(o.types, ","); t; t = strtok(NULL, ","))
            rc |= one_type(&o, t);
        return rc ? 1 : 0;
    }
    printf("| type | prefill tok/s | decode tok/s after the prompt | decode tok/s from 1 token "
           "(llama-bench tg) | prefill %d+64 | 2nd call, shared prefix |\n",
           o.prefix);
    printf("|---|---|---|---|---|---|\n");
    int rc = 0;
    for (char *t = strtok(o.types, ","); t; t = strtok(NULL, ","))
        rc |= one_type(&o, t);
    return rc ? 1 : 0;
}
