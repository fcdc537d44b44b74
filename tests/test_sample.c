/*
 * test_sample.c - the sampler (src/engine/sample.c) against the softmax computed in double:
 * greedy picks the first largest logit and reports its log-probability; an unfiltered draw
 * (the trainer's rollouts: the blocks' sums, then one block) gives each token its softmax
 * frequency, over several blocks and a partial last one, at temperature 1 and 0.5; top-k, top-p
 * and min-p keep the set that a sort of the whole vocabulary keeps, each token in proportion,
 * where a few tokens hold the mass and where it is spread over all; and the same seed draws
 * the same tokens; the penalties lower the logits of the tokens seen so far.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/sample.h"

#define VMAX 20000
static int V = 3000; /* three blocks of exps and a partial fourth; VMAX for the radix sort */

/* Logits in [-4, 4) from a fixed stream, a few of them high. */
static void make_logits(float *l)
{
    struct rng r;
    rng_seed(&r, 42);
    for (int i = 0; i < V; i++)
        l[i] = (float)(rng_uniform(&r) * 8.0 - 4.0);
    l[17] = 5.0f;
    l[1023] = 5.5f; /* the last of the first block */
    l[1024] = 4.5f; /* the first of the second */
    l[2999] = 6.0f; /* the last token */
}

/* softmax(l / t) in double. */
static void softmax(const float *l, double t, double *p)
{
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++)
        mx = (double)l[i] > mx ? (double)l[i] : mx;
    for (int i = 0; i < V; i++)
        s += p[i] = exp(((double)l[i] - mx) / t);
    for (int i = 0; i < V; i++)
        p[i] /= s;
}

/* Draws n tokens; counts them, and checks each log-probability against p. */
static void draw(const struct sampler_params *sp, const float *l, const double *p, int n,
                 int *count)
{
    struct sampler *s = sampler_new(sp, V);
    float *w = malloc(V * sizeof *w);
    memset(count, 0, V * sizeof *count);
    for (int k = 0; k < n; k++) {
        memcpy(w, l, V * sizeof *w);
        float lp;
        const int32_t id = sampler_sample(s, w, &lp);
        assert_true(id >= 0 && id < V);
        count[id]++;
        if (fabs((double)lp - log(p[id])) > 1e-5)
            fail_msg("token %d: log-prob %.9f, softmax %.9f", id, (double)lp, log(p[id]));
    }
    free(w);
    sampler_free(s);
}

/* Every token's count within 5 standard deviations of n p, and Pearson's chi-square over the
 * tokens (those expected fewer than 5 times pooled) within 6 of its standard deviations of the
 * degrees of freedom: a draw that favours some tokens by a few percent fails it. */
static void check_frequencies(const int *count, const double *p, int n)
{
    double chi2 = 0, pool_want = 0, pool_got = 0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        const double want = n * p[i], sd = sqrt(want * (1 - p[i])) + 1;
        if (fabs(count[i] - want) > 5 * sd)
            fail_msg("token %d: drawn %d times, expected %.1f", i, count[i], want);
        if (want < 5) {
            pool_want += want;
            pool_got += count[i];
            continue;
        }
        chi2 += (count[i] - want) * (count[i] - want) / want;
        cells++;
    }
    if (pool_want > 0) {
        chi2 += (pool_got - pool_want) * (pool_got - pool_want) / pool_want;
        cells++;
    }
    const double df = cells - 1; /* one cell: every draw the same token, checked above */
    if (cells > 1 && chi2 > df + 6 * sqrt(2 * df))
        fail_msg("chi-square %.1f over %d cells", chi2, cells);
}

static void test_greedy(void **state)
{
    (void)state;
    float l[VMAX];
    double p[VMAX];
    make_logits(l);
    l[2500] = 6.0f; /* ties with 2999: the first wins */
    softmax(l, 1.0, p);
    struct sampler_params sp = sampler_default_params();
    int count[VMAX];
    draw(&sp, l, p, 5, count);
    assert_int_equal(count[2500], 5);
}

static void test_unfiltered_frequencies(void **state)
{
    (void)state;
    float l[VMAX];
    double p[VMAX];
    int count[VMAX];
    make_logits(l);
    const double temps[] = {1.0, 0.5};
    for (int ti = 0; ti < 2; ti++) {
        softmax(l, temps[ti], p);
        struct sampler_params sp = sampler_default_params();
        sp.temperature = (float)temps[ti];
        sp.seed = 7 + (uint64_t)ti;
        draw(&sp, l, p, 200000, count);
        check_frequencies(count, p, 200000);
        /* the block edges and the last token are drawn too */
        assert_true(count[1023] > 0 && count[1024] > 0 && count[2999] > 0);
    }
}

/* The filters' set by a sort of the whole vocabulary (rank: p down, then id up): the first k,
 * then the shortest prefix with top_p of the mass, then p >= min_p x the best's; q: p over it. */
static const double *g_p;

static int by_rank(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_p[x] != g_p[y])
        return g_p[x] > g_p[y] ? -1 : 1;
    return x - y;
}

static void filtered(const double *p, int top_k, double top_p, double min_p, double *q)
{
    int order[VMAX] = {0};
    for (int i = 0; i < V; i++)
        order[i] = i;
    g_p = p;
    qsort(order, V, sizeof *order, by_rank);
    int m = top_k > 0 && top_k < V ? top_k : V;
    if (top_p < 1) {
        double cum = 0;
        for (int i = 0; i < m; i++) {
            cum += p[order[i]];
            if (cum >= top_p) {
                m = i + 1;
                break;
            }
        }
    }
    int kept = 1;
    while (kept < m && p[order[kept]] >= min_p * p[order[0]])
        kept++;
    double mass = 0;
    for (int i = 0; i < kept; i++)
        mass += p[order[i]];
    for (int i = 0; i < V; i++)
        q[i] = 0;
    for (int i = 0; i < kept; i++)
        q[order[i]] = p[order[i]] / mass;
}

static void test_filters(void **state)
{
    (void)state;
    float l[VMAX], w[VMAX];
    double p[VMAX], q[VMAX];
    int count[VMAX];
    const struct {
        float t, top_p, min_p;
        int top_k, spread;
    } cases[] = {
        {1.0f, 1.0f, 0.0f, 3, 0},   {1.0f, 0.9f, 0.0f, 0, 0},  {0.5f, 0.5f, 0.0f, 0, 0},
        {1.0f, 1.0f, 0.05f, 0, 0},  {1.0f, 0.8f, 0.0f, 50, 0}, {1.0f, 0.99f, 0.0f, 0, 1},
        {1.0f, 0.95f, 0.01f, 0, 1}, {0.7f, 0.9f, 0.0f, 0, 2},  {1.0f, 0.5f, 0.0f, 0, 3},
        {1.0f, 1.0f, 0.0f, 10, 3},  {1.0f, 0.3f, 0.0f, 15, 3}, {1.0f, 1.0f, 0.0f, 2000, 1},
        {1.0f, 1.0f, 2.0f, 0, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        make_logits(l);
        if (cases[ci].spread == 1) /* flat: every token within a few nats */
            for (int i = 0; i < V; i++)
                l[i] *= 0.1f;
        if (cases[ci].spread == 2) /* one token far ahead, a few behind, the rest far below */
            for (int i = 0; i < V; i++)
                l[i] = i == 2222 ? 30.0f : i % 500 == 7 ? 24.0f : l[i];
        if (cases[ci].spread == 3) /* 21 equal best: the nucleus takes the lower ids */
            for (int i = 0; i < V; i++)
                l[i] = i % 149 == 3 ? 9.0f : l[i];
        softmax(l, cases[ci].t, p);
        filtered(p, cases[ci].top_k, cases[ci].top_p, cases[ci].min_p, q);
        struct sampler_params sp = sampler_default_params();
        sp.temperature = cases[ci].t;
        sp.top_k = cases[ci].top_k;
        sp.top_p = cases[ci].top_p;
        sp.min_p = cases[ci].min_p;
        sp.seed = 3 + ci;
        struct sampler *s = sampler_new(&sp, V);
        memset(count, 0, sizeof count);
        const int n = cases[ci].spread == 1 ? 5000 : 20000; /* flat: each draw sorts */
        for (int k = 0; k < n; k++) {
            memcpy(w, l, sizeof w);
            const int32_t id = sampler_sample(s, w, NULL);
            if (q[id] == 0)
                fail_msg("case %zu: token %d drawn, outside the filters' set", ci, id);
            count[id]++;
        }
        sampler_free(s);
        check_frequencies(count, q, n);
    }
}

/* A flat softmax over a vocabulary of 20,000 with many equal logits: top-p keeps thousands,
 * which the sampler sorts by radix (ties by id), the set of a full sort all the same. */
static void test_filters_large_flat(void **state)
{
    (void)state;
    V = VMAX;
    static float l[VMAX], w[VMAX];
    static double p[VMAX], q[VMAX];
    static int count[VMAX];
    struct rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < V; i++) /* 64 levels: many tokens share each */
        l[i] = (float)(rng_next(&r) % 64) / 32.0f;
    const float top_ps[] = {0.5f, 0.97f};
    for (int ti = 0; ti < 2; ti++) {
        softmax(l, 1.0, p);
        filtered(p, 0, top_ps[ti], 0.0, q);
        struct sampler_params sp = sampler_default_params();
        sp.temperature = 1.0f;
        sp.top_p = top_ps[ti];
        sp.seed = 11 + (uint64_t)ti;
        struct sampler *s = sampler_new(&sp, V);
        memset(count, 0, sizeof count);
        const int n = 4000;
        for (int k = 0; k < n; k++) {
            memcpy(w, l, sizeof w);
            const int32_t id = sampler_sample(s, w, NULL);
            if (q[id] == 0)
                fail_msg("top-p %g: token %d drawn, outside the filters' set", (double)top_ps[ti],
                         id);
            count[id]++;
        }
        sampler_free(s);
        check_frequencies(count, q, n);
    }
    V = 3000;
}

/* Frequency and presence penalties: subtracted from the logits of the tokens accepted so far
 * (count x frequency + presence), before the softmax the log-probability comes from. */
static void test_penalties(void **state)
{
    (void)state;
    float l[VMAX], w[VMAX];
    double p[VMAX];
    make_logits(l);
    struct sampler_params sp = sampler_default_params();
    sp.frequency_penalty = 0.6f;
    sp.presence_penalty = 0.5f;
    struct sampler *s = sampler_new(&sp, V);
    sampler_accept(s, 2999);
    sampler_accept(s, 1023);
    sampler_accept(s, 2999);
    /* 2999: 6 - 1.2 - 0.5 = 4.3; 1023: 5.5 - 0.6 - 0.5 = 4.4; so 17 (5.0) is the best */
    memcpy(w, l, sizeof w);
    float lp;
    assert_int_equal(sampler_sample(s, w, &lp), 17);
    l[2999] -= 2 * 0.6f + 0.5f;
    l[1023] -= 0.6f + 0.5f;
    assert_true(w[2999] == l[2999] && w[1023] == l[1023] && w[17] == l[17]);
    softmax(l, 1.0, p);
    assert_true(fabs((double)lp - log(p[17])) < 1e-5);
    sampler_free(s);
}

static void test_same_seed_same_tokens(void **state)
{
    (void)state;
    float l[VMAX], w[VMAX];
    make_logits(l);
    struct sampler_params sp = sampler_default_params();
    sp.temperature = 1.0f;
    sp.seed = 99;
    struct sampler *a = sampler_new(&sp, V), *b = sampler_new(&sp, V);
    for (int k = 0; k < 1000; k++) {
        memcpy(w, l, sizeof w);
        const int32_t x = sampler_sample(a, w, NULL);
        memcpy(w, l, sizeof w);
        assert_int_equal(sampler_sample(b, w, NULL), x);
    }
    sampler_free(a);
    sampler_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),    cmocka_unit_test(test_unfiltered_frequencies),
        cmocka_unit_test(test_filters),   cmocka_unit_test(test_filters_large_flat),
        cmocka_unit_test(test_penalties), cmocka_unit_test(test_same_seed_same_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
