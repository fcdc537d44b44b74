/*
 * bench/sample.c - microseconds a draw of the engine's sampler (src/engine/sample.c) over a
 * vocabulary of Qwen2.5's size, for the settings the project samples with: greedy (eval), a
 * rollout (temperature 1, no filter: Flow-GRPO), and the flow's planner (temperature 0.7, top-p
 * 0.99, frequency penalty 1.2), over logits where a few tokens hold the mass (a trained model)
 * and where it is spread (a random or barely trained one, where top-p keeps most tokens).
 *
 *   build/release/bench/sample [--vocab 151936] [--draws 400]
 *
 * One thread; each draw's logits are copied in fresh (the sampler changes them in place). Prints
 * a markdown table; record it in docs/PERFORMANCE.md.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/sample.h"

/* Peaked: a sum of four uniforms (about N(0, 1.15)), five tokens at 12 and one at 18; spread:
 * uniform in [-10, 10). */
static void make_logits(float *l, int64_t n, int peaked)
{
    struct rng r;
    rng_seed(&r, 1);
    for (int64_t i = 0; i < n; i++) {
        if (!peaked) {
            l[i] = (float)(rng_uniform(&r) * 20.0 - 10.0);
            continue;
        }
        double g = 0;
        for (int k = 0; k < 4; k++)
            g += rng_uniform(&r) - 0.5;
        l[i] = (float)(2.0 * g);
    }
    if (peaked) {
        for (int64_t i = 0; i < 5 && i < n; i++)
            l[i] = 12.0f;
        l[n / 2] = 18.0f;
    }
}

static double per_draw_us(const struct sampler_params *sp, const float *l, float *w, int64_t n,
                          int draws, int with_history)
{
    struct sampler *s = sampler_new(sp, n);
    if (with_history) /* a planner's output so far: 200 tokens, some repeated */
        for (int i = 0; i < 200; i++)
            sampler_accept(s, (int32_t)((i * 7919) % 150 + (i % 3) * 1000));
    double best = INFINITY;
    for (int round = 0; round < 3; round++) {
        double t = 0;
        for (int d = 0; d < draws; d++) {
            memcpy(w, l, (size_t)n * sizeof *w);
            const double t0 = af_clock_thread_cpu_ms();
            float lp;
            (void)sampler_sample(s, w, &lp);
            t += af_clock_thread_cpu_ms() - t0;
        }
        best = t / draws < best ? t / draws : best;
    }
    sampler_free(s);
    return best * 1000.0;
}

int main(int argc, char **argv)
{
    int64_t n = 151936;
    int draws = 400;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vocab"))
            n = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--draws"))
            draws = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench/sample [--vocab 151936] [--draws 400]\n");
            return 2;
        }
    }
    if (n < 16 || draws < 1) {
        fprintf(stderr, "bench/sample: --vocab at least 16, --draws at least 1\n");
        return 2;
    }
    float *l = malloc((size_t)n * sizeof *l), *w = malloc((size_t)n * sizeof *w);
    if (!l || !w)
        return 1;
    printf("vocabulary %lld, best of 3 rounds of %d draws, one thread\n\n", (long long)n, draws);
    printf("| logits | greedy | rollout (T 1) | planner (T 0.7, top-p 0.99, penalty 1.2) | "
           "top-k 40 (T 0.8) |\n|---|---|---|---|---|\n");
    for (int peaked = 1; peaked >= 0; peaked--) {
        make_logits(l, n, peaked);
        struct sampler_params greedy = sampler_default_params(), roll = greedy, plan = greedy,
                              topk = greedy;
        roll.temperature = 1.0f;
        roll.seed = plan.seed = topk.seed = 3;
        plan.temperature = 0.7f;
        plan.top_p = 0.99f;
        plan.frequency_penalty = 1.2f;
        topk.temperature = 0.8f;
        topk.top_k = 40;
        printf("| %s | %.1f us | %.1f us | %.1f us | %.1f us |\n", peaked ? "peaked" : "spread",
               per_draw_us(&greedy, l, w, n, draws, 0), per_draw_us(&roll, l, w, n, draws, 0),
               per_draw_us(&plan, l, w, n, draws, 1), per_draw_us(&topk, l, w, n, draws, 0));
        fflush(stdout);
    }
    free(l);
    free(w);
    return 0;
}
