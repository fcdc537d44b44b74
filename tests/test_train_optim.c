/*
 * test_train_optim.c - the trainer's optimiser layer (src/train/optim.h, rng.h): AdamW against
 * a double-precision reimplementation of torch.optim.AdamW's formulas and a hand-computed first
 * step; gradient norm, clipping, scaling and NaN/Inf detection; the learning-rate schedules at
 * hand-computed steps; xoshiro256** against the reference algorithm and known outputs, and the
 * shuffle. Bit-determinism across OpenMP thread counts is checked where it is promised.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/optim.h"
#include "train/rng.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t lcg_state = 7;

static double urand(void) /* [-1, 1) */
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg_state >> 11) / (double)(1ull << 52) - 1.0;
}

static float *frand(size_t n, double scale)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(scale * urand());
    return p;
}

static float *fdup(const float *x, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* ---- AdamW -------------------------------------------------------------------------------- */

/* torch.optim.AdamW's single-tensor update, all in double (the hyperparameters are the floats
 * the caller passes, widened). */
static void ref_adamw(double *w, double *m, double *v, const float *g, int64_t n, int decay,
                      const struct train_adamw *hp, double lr, int64_t step)
{
    const double b1 = (double)hp->beta1, b2 = (double)hp->beta2, eps = (double)hp->eps;
    const double wd = (double)hp->weight_decay;
    const double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    for (int64_t i = 0; i < n; i++) {
        if (decay)
            w[i] *= 1 - lr * wd;
        const double gi = (double)g[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        w[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static void test_adamw_defaults(void **state)
{
    (void)state;
    const struct train_adamw hp = train_adamw_defaults();
    assert_true(hp.beta1 == 0.9f && hp.beta2 == 0.999f && hp.eps == 1e-8f);
    assert_true(hp.weight_decay == 0.0f);
}

/* Step 1 without decay: m̂ = g and v̂ = g², so every weight moves by lr·g/(|g|+eps) ≈ lr·sign(g). */
static void test_adamw_first_step(void **state)
{
    (void)state;
    float w[6] = {1.0f, -0.5f, 0.25f, 2.0f, 0.0f, 3.0f};
    float g[6] = {0.5f, -2.0f, 1e-2f, -7.0f, 30.0f, 0.0f};
    float w0[6];
    memcpy(w0, w, sizeof w);
    const struct train_param p[2] = {{"a", w, g, 4, 1}, {"b", w + 4, g + 4, 2, 0}};
    struct train_adamw_state st;
    char err[128];
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_OK);
    assert_int_equal(st.n, 6);
    assert_int_equal(st.step, 0);
    const struct train_adamw hp = train_adamw_defaults(); /* wd 0: decay flag has no effect */
    const float lr = 1e-3f;
    train_adamw_step(&st, p, 2, &hp, lr);
    assert_int_equal(st.step, 1);
    for (int i = 0; i < 6; i++) {
        const double sign = g[i] > 0 ? 1 : g[i] < 0 ? -1 : 0;
        const double want = (double)w0[i] - (double)lr * sign;
        assert_true(fabs((double)w[i] - want) <= 1e-7 + 2e-6 * (double)lr);
        const double gi = (double)g[i];
        assert_true(fabs((double)st.m[i] - 0.1 * gi) <= 1e-6 * fabs(gi));
        assert_true(fabs((double)st.v[i] - 0.001 * gi * gi) <= 1e-5 * gi * gi);
    }
    assert_true(w[5] == w0[5]); /* zero gradient: m = 0, no move */
    assert_int_equal(train_adamw_state_bytes(&st), 2 * 6 * sizeof(float));
    train_adamw_deinit(&st);
    assert_null(st.m);
    assert_int_equal(st.n, 0);
}

/* Several steps with fresh random gradients, two params (one decayed), against ref_adamw. */
static void adamw_vs_ref(float weight_decay, float lr)
{
    enum { NA = 37, NB = 11, STEPS = 12 };
    const int64_t nt = NA + NB;
    float *w = frand(nt, 1.0), *g = frand(nt, 1.0);
    double wr[NA + NB], mr[NA + NB] = {0}, vr[NA + NB] = {0};
    for (int64_t i = 0; i < nt; i++)
        wr[i] = (double)w[i];
    const struct train_param p[2] = {{"mat", w, g, NA, 1}, {"norm", w + NA, g + NA, NB, 0}};
    struct train_adamw hp = train_adamw_defaults();
    hp.weight_decay = weight_decay;
    struct train_adamw_state st;
    assert_int_equal(train_adamw_init(&st, p, 2, NULL, 0), AF_OK);
    double worst = 0;
    for (int s = 1; s <= STEPS; s++) {
        for (int64_t i = 0; i < nt; i++) /* gradients of mixed scale, a few tiny */
            g[i] = (float)(urand() * (i % 5 == 0 ? 1e-3 : 1.0));
        train_adamw_step(&st, p, 2, &hp, lr);
        ref_adamw(wr, mr, vr, g, NA, 1, &hp, (double)lr, s);
        ref_adamw(wr + NA, mr + NA, vr + NA, g + NA, NB, 0, &hp, (double)lr, s);
        for (int64_t i = 0; i < nt; i++) {
            /* w relative to its value, floored at one update (lr) for weights near zero */
            const double ew = fabs((double)w[i] - wr[i]) / fmax(fabs(wr[i]), (double)lr);
            /* m cancels towards 0; measure it against the gradient scale sqrt(v) */
            const double em = fabs((double)st.m[i] - mr[i]) / fmax(fabs(mr[i]), sqrt(vr[i]));
            const double ev = fabs((double)st.v[i] - vr[i]) / fmax(fabs(vr[i]), 1e-18);
            worst = fmax(worst, fmax(ew, fmax(em, ev)));
        }
    }
    assert_int_equal(st.step, STEPS);
    if (worst > 1e-6)
        fail_msg("adamw wd=%g: worst relative error %g", (double)weight_decay, worst);
    train_adamw_deinit(&st);
    free(w);
    free(g);
}

static void test_adamw_vs_reference(void **state)
{
    (void)state;
    adamw_vs_ref(0.0f, 1e-3f);
    adamw_vs_ref(0.1f, 1e-3f);
    adamw_vs_ref(0.01f, 3e-2f);
}

/* Decay only touches params with decay = 1: zero gradients isolate it (the Adam term is 0). */
static void test_adamw_decay_flag(void **state)
{
    (void)state;
    float w[2] = {2.0f, 2.0f}, g[2] = {0, 0};
    const struct train_param p[2] = {{"w", w, g, 1, 1}, {"b", w + 1, g + 1, 1, 0}};
    struct train_adamw hp = train_adamw_defaults();
    hp.weight_decay = 0.5f;
    struct train_adamw_state st;
    assert_int_equal(train_adamw_init(&st, p, 2, NULL, 0), AF_OK);
    train_adamw_step(&st, p, 2, &hp, 0.1f);
    assert_true(fabs((double)w[0] - 2.0 * (1 - 0.1 * 0.5)) < 1e-6);
    assert_true(w[1] == 2.0f);
    train_adamw_deinit(&st);
}

/* A tensor big enough for the OpenMP path gives the same bits with 1 and 4 threads. */
static void test_adamw_threads_deterministic(void **state)
{
    (void)state;
    const int64_t n = 200003;
    float *w1 = frand((size_t)n, 1.0), *g = frand((size_t)n, 1.0);
    float *w4 = fdup(w1, (size_t)n);
    struct train_adamw hp = train_adamw_defaults();
    hp.weight_decay = 0.1f;
    const int saved = omp_get_max_threads();
    float *res[2] = {w1, w4};
    struct train_adamw_state st[2];
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k == 0 ? 1 : 4);
        const struct train_param p = {"big", res[k], g, n, 1};
        assert_int_equal(train_adamw_init(&st[k], &p, 1, NULL, 0), AF_OK);
        for (int s = 0; s < 3; s++)
            train_adamw_step(&st[k], &p, 1, &hp, 1e-3f);
    }
    omp_set_num_threads(saved);
    assert_memory_equal(w1, w4, (size_t)n * sizeof(float));
    assert_memory_equal(st[0].m, st[1].m, (size_t)n * sizeof(float));
    assert_memory_equal(st[0].v, st[1].v, (size_t)n * sizeof(float));
    train_adamw_deinit(&st[0]);
    train_adamw_deinit(&st[1]);
    free(w1);
    free(w4);
    free(g);
}

static void test_adamw_init_errors(void **state)
{
    (void)state;
    char err[128];
    float w[2] = {0}, g[2] = {0};
    struct train_adamw_state st;
    assert_int_equal(train_adamw_init(&st, NULL, 0, err, sizeof err), AF_EINVAL);
    assert_null(st.m);
    struct train_param p[2] = {{"a", w, g, 2, 1}, {"bias", w, g, -1, 0}};
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "bias"));
    p[1] = (struct train_param){"nul", NULL, g, 1, 0};
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "nul"));
    p[0].n = 0;
    p[1] = (struct train_param){"empty", w, g, 0, 0};
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_EINVAL);
    p[0] = (struct train_param){"huge", w, g, INT64_MAX / 2 + 1, 1};
    p[1] = (struct train_param){"huge2", w, g, INT64_MAX / 2 + 1, 1};
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "overflow"));
    assert_null(st.m);
    train_adamw_deinit(&st); /* safe after a failed init */
    train_adamw_deinit(NULL);
    /* a NULL pointer with n = 0 is fine */
    p[0] = (struct train_param){"a", w, g, 2, 1};
    p[1] = (struct train_param){"none", NULL, NULL, 0, 0};
    assert_int_equal(train_adamw_init(&st, p, 2, err, sizeof err), AF_OK);
    train_adamw_deinit(&st);
}

/* ---- Gradients ------------------------------------------------------------------------------ */

static void test_clip_grad_norm(void **state)
{
    (void)state;
    float w[3] = {0}, g[3];
    const struct train_param p[2] = {{"a", w, g, 2, 1}, {"b", w + 2, g + 2, 1, 0}};
    const float g0[3] = {3, 4, 12}; /* norm 13 */
    memcpy(g, g0, sizeof g);
    assert_true(train_grad_norm(p, 2) == 13.0);
    /* below max (and at it): untouched */
    assert_true(train_clip_grad_norm(p, 2, 20.0) == 13.0);
    assert_memory_equal(g, g0, sizeof g);
    assert_true(train_clip_grad_norm(p, 2, 13.0) == 13.0);
    assert_memory_equal(g, g0, sizeof g);
    /* no clipping when max_norm <= 0 */
    assert_true(train_clip_grad_norm(p, 2, 0.0) == 13.0);
    assert_true(train_clip_grad_norm(p, 2, -1.0) == 13.0);
    assert_memory_equal(g, g0, sizeof g);
    /* above: scaled to exactly max, returns the norm before */
    assert_true(train_clip_grad_norm(p, 2, 6.5) == 13.0);
    assert_true(g[0] == 1.5f && g[1] == 2.0f && g[2] == 6.0f);
    assert_true(fabs(train_grad_norm(p, 2) - 6.5) < 1e-6);
    /* an uneven ratio still lands on max */
    memcpy(g, g0, sizeof g);
    assert_true(train_clip_grad_norm(p, 2, 1.0) == 13.0);
    assert_true(fabs(train_grad_norm(p, 2) - 1.0) < 1e-6);
    /* a non-finite norm leaves the gradients alone */
    memcpy(g, g0, sizeof g);
    g[1] = INFINITY;
    assert_true(isinf(train_clip_grad_norm(p, 2, 1.0)));
    assert_true(g[0] == 3.0f && g[2] == 12.0f);
    g[1] = NAN;
    assert_true(isnan(train_clip_grad_norm(p, 2, 1.0)));
    assert_true(g[0] == 3.0f && g[2] == 12.0f);
}

/* Sizes that straddle the chunk and group boundaries of the norm's partial sums. */
static void test_grad_norm_deterministic(void **state)
{
    (void)state;
    const int64_t sizes[4] = {1, 40000, 1100001, 16384};
    int64_t nt = 0;
    for (int i = 0; i < 4; i++)
        nt += sizes[i];
    float *g = frand((size_t)nt, 1.0);
    struct train_param p[4];
    int64_t off = 0;
    for (int i = 0; i < 4; i++) {
        p[i] = (struct train_param){"p", g + off, g + off, sizes[i], 1};
        off += sizes[i];
    }
    double naive = 0;
    for (int64_t i = 0; i < nt; i++)
        naive += (double)g[i] * (double)g[i];
    naive = sqrt(naive);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const double n1 = train_grad_norm(p, 4);
    for (int t = 2; t <= 5; t++) {
        omp_set_num_threads(t);
        const double nt_ = train_grad_norm(p, 4);
        assert_memory_equal(&n1, &nt_, sizeof n1);
    }
    omp_set_num_threads(saved);
    const double again = train_grad_norm(p, 4);
    assert_memory_equal(&n1, &again, sizeof n1);
    assert_true(fabs(n1 - naive) <= 1e-12 * naive);
    assert_true(train_grad_norm(p, 0) == 0.0);
    free(g);
}

static void test_grads_scale_zero(void **state)
{
    (void)state;
    const int64_t n = 70001; /* the OpenMP path */
    float *g = frand((size_t)n, 1.0);
    float *g0 = fdup(g, (size_t)n);
    float small[3] = {1, -2, 4};
    const struct train_param p[2] = {{"big", g, g, n, 1}, {"small", small, small, 3, 0}};
    train_grads_scale(p, 2, 0.25f);
    for (int64_t i = 0; i < n; i++)
        assert_true(g[i] == g0[i] * 0.25f);
    assert_true(small[0] == 0.25f && small[1] == -0.5f && small[2] == 1.0f);
    train_grads_zero(p, 2);
    for (int64_t i = 0; i < n; i++)
        assert_true(g[i] == 0.0f);
    assert_true(small[0] == 0 && small[1] == 0 && small[2] == 0);
    assert_true(train_grad_norm(p, 2) == 0.0);
    free(g);
    free(g0);
}

static void test_grads_nonfinite(void **state)
{
    (void)state;
    const int64_t n = 50000;
    float *g = frand((size_t)n, 1.0);
    float small[4] = {FLT_MAX, -FLT_MAX, FLT_MIN / 4, 0.0f}; /* extreme but finite */
    const struct train_param p[2] = {{"big", g, g, n, 1}, {"small", small, small, 4, 0}};
    assert_int_equal(train_grads_nonfinite(p, 2), 0);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        const float keep = g[n - 7];
        g[n - 7] = bad[k];
        assert_int_equal(train_grads_nonfinite(p, 2), 1);
        g[n - 7] = keep;
        small[3] = bad[k];
        assert_int_equal(train_grads_nonfinite(p, 2), 1);
        small[3] = 0.0f;
    }
    assert_int_equal(train_grads_nonfinite(p, 2), 0);
    assert_int_equal(train_grads_nonfinite(p, 0), 0);
    free(g);
}

/* ---- Schedules ------------------------------------------------------------------------------ */

static void test_sched_names(void **state)
{
    (void)state;
    assert_int_equal(train_sched_from_name("constant"), TRAIN_SCHED_CONSTANT);
    assert_int_equal(train_sched_from_name("linear"), TRAIN_SCHED_LINEAR);
    assert_int_equal(train_sched_from_name("cosine"), TRAIN_SCHED_COSINE);
    assert_int_equal(train_sched_from_name("Cosine"), -1);
    assert_int_equal(train_sched_from_name(""), -1);
    assert_int_equal(train_sched_from_name(NULL), -1);
    assert_string_equal(train_sched_name(TRAIN_SCHED_CONSTANT), "constant");
    assert_string_equal(train_sched_name(TRAIN_SCHED_LINEAR), "linear");
    assert_string_equal(train_sched_name(TRAIN_SCHED_COSINE), "cosine");
    assert_string_equal(train_sched_name((enum train_sched_kind)7), "unknown");
}

static void expect_lr(const struct train_sched *s, int64_t step, double want)
{
    const double got = (double)train_sched_lr(s, step);
    if (fabs(got - want) > 1e-7 * (double)s->lr)
        fail_msg("%s step %lld: lr %.10g, want %.10g", train_sched_name(s->kind), (long long)step,
                 got, want);
}

static void test_sched_warmup_all_kinds(void **state)
{
    (void)state;
    for (int k = 0; k < 3; k++) {
        const struct train_sched s = {(enum train_sched_kind)k, 1e-3f, 10, 110, 0.1f};
        expect_lr(&s, 0, 0.0); /* HF: step 0 of warmup is 0 */
        expect_lr(&s, 1, 1e-4);
        expect_lr(&s, 5, 5e-4);
        expect_lr(&s, 9, 9e-4);
        expect_lr(&s, 10, 1e-3); /* end of warmup: the peak */
        expect_lr(&s, -3, 0.0);
    }
}

static void test_sched_constant(void **state)
{
    (void)state;
    struct train_sched s = {TRAIN_SCHED_CONSTANT, 2e-4f, 0, 100, 0};
    expect_lr(&s, 0, 2e-4);
    expect_lr(&s, 50, 2e-4);
    expect_lr(&s, 5000, 2e-4);
    s.warmup = 4;
    expect_lr(&s, 2, 1e-4);
    expect_lr(&s, 4, 2e-4);
    expect_lr(&s, 1000, 2e-4);
}

static void test_sched_linear(void **state)
{
    (void)state;
    struct train_sched s = {TRAIN_SCHED_LINEAR, 1e-3f, 10, 110, 0.5f}; /* min ratio unused */
    expect_lr(&s, 10, 1e-3);
    expect_lr(&s, 35, 7.5e-4);
    expect_lr(&s, 60, 5e-4); /* midpoint */
    expect_lr(&s, 109, 1e-5);
    expect_lr(&s, 110, 0.0); /* end */
    expect_lr(&s, 500, 0.0);
    s.warmup = 0;
    s.total = 100;
    expect_lr(&s, 0, 1e-3);
    expect_lr(&s, 50, 5e-4);
    expect_lr(&s, 100, 0.0);
    /* total <= warmup: decays to zero right after warmup */
    s.warmup = 10;
    s.total = 10;
    expect_lr(&s, 10, 0.0);
}

static void test_sched_cosine(void **state)
{
    (void)state;
    struct train_sched s = {TRAIN_SCHED_COSINE, 1e-3f, 10, 110, 0.0f};
    expect_lr(&s, 10, 1e-3);
    expect_lr(&s, 35, 1e-3 * 0.5 * (1 + sqrt(0.5))); /* progress 1/4 */
    expect_lr(&s, 60, 5e-4);                         /* midpoint */
    expect_lr(&s, 85, 1e-3 * 0.5 * (1 - sqrt(0.5))); /* progress 3/4 */
    expect_lr(&s, 110, 0.0);                         /* end */
    expect_lr(&s, 1000, 0.0);                        /* clamped past the end */
    s.min_lr_ratio = 0.1f;
    expect_lr(&s, 10, 1e-3);
    expect_lr(&s, 60, 1e-3 * (0.1 + 0.9 * 0.5));
    expect_lr(&s, 110, 1e-4);
    expect_lr(&s, 1000, 1e-4);
    s.warmup = 0;
    s.total = 4;
    expect_lr(&s, 0, 1e-3);
    expect_lr(&s, 2, 1e-3 * (0.1 + 0.9 * 0.5));
    expect_lr(&s, 4, 1e-4);
}

/* ---- RNG ------------------------------------------------------------------------------------ */

/* The reference xoshiro256** next(), written out independently of src/train/rng.c. */
static uint64_t ref_next(uint64_t s[4])
{
    const uint64_t x = s[1] * 5;
    const uint64_t result = ((x << 7) | (x >> 57)) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

static void test_rng_known_values(void **state)
{
    (void)state;
    struct train_rng r = {{1, 2, 3, 4}};
    assert_true(train_rng_next(&r) == 11520u);
    assert_true(train_rng_next(&r) == 0u);
    assert_true(train_rng_next(&r) == 1509978240u);
    assert_true(train_rng_next(&r) == 1215971899390074240u);
    /* and a long run against the reference */
    uint64_t s[4] = {1, 2, 3, 4};
    for (int i = 0; i < 4; i++)
        (void)ref_next(s);
    for (int i = 0; i < 10000; i++)
        assert_true(train_rng_next(&r) == ref_next(s));
    /* splitmix64 seeding: its first outputs from 0 are well known */
    train_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xe220a8397b1dcdafu);
    assert_true(r.s[1] == 0x6e789e6aa1b965f4u);
    assert_true(r.s[2] == 0x06c45d188009454fu);
    assert_true(r.s[3] == 0xf88bb8a8724c81ecu);
}

static void test_rng_streams(void **state)
{
    (void)state;
    struct train_rng a, b, c;
    train_rng_seed(&a, 42);
    train_rng_seed(&b, 42);
    train_rng_seed(&c, 43);
    int same_ac = 0;
    for (int i = 0; i < 1000; i++) {
        const uint64_t x = train_rng_next(&a);
        assert_true(x == train_rng_next(&b));
        same_ac += x == train_rng_next(&c);
    }
    assert_int_equal(same_ac, 0);
    assert_memory_equal(&a, &b, sizeof a);
    /* a copied state (as a checkpoint restores it) continues the same stream */
    struct train_rng saved = a;
    const uint64_t next = train_rng_next(&a);
    assert_true(train_rng_next(&saved) == next);
}

static void test_rng_uniform(void **state)
{
    (void)state;
    struct train_rng r;
    train_rng_seed(&r, 123);
    double sum = 0, lo = 1, hi = 0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        const double u = train_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        sum += u;
        lo = fmin(lo, u);
        hi = fmax(hi, u);
    }
    assert_true(fabs(sum / n - 0.5) < 0.01);
    assert_true(lo < 1e-3 && hi > 1 - 1e-3);
    /* the largest output maps below 1: (2^53 - 1) / 2^53 */
    assert_true((double)(UINT64_MAX >> 11) * 0x1.0p-53 < 1.0);
}

static void test_rng_shuffle(void **state)
{
    (void)state;
    enum { N = 1000 };
    int64_t a[N], b[N];
    for (int i = 0; i < N; i++)
        a[i] = b[i] = i;
    struct train_rng ra, rb;
    train_rng_seed(&ra, 9);
    train_rng_seed(&rb, 9);
    train_rng_shuffle(&ra, a, N);
    train_rng_shuffle(&rb, b, N);
    assert_memory_equal(a, b, sizeof a); /* deterministic */
    char seen[N] = {0};
    int fixed = 0;
    for (int i = 0; i < N; i++) {
        assert_true(a[i] >= 0 && a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
        fixed += a[i] == i;
    }
    assert_true(fixed < 10); /* a random permutation fixes ~1 point */
    for (int i = 0; i < N; i++)
        b[i] = i;
    train_rng_seed(&rb, 10);
    train_rng_shuffle(&rb, b, N);
    assert_memory_not_equal(a, b, sizeof a);
    /* n <= 1 draws nothing */
    struct train_rng before = ra;
    int64_t one = 5;
    train_rng_shuffle(&ra, &one, 1);
    train_rng_shuffle(&ra, NULL, 0);
    assert_int_equal(one, 5);
    assert_memory_equal(&before, &ra, sizeof ra);
    /* all 6 orders of 3 items come up about equally often */
    int count[6] = {0};
    const int trials = 60000;
    for (int t = 0; t < trials; t++) {
        int64_t x[3] = {0, 1, 2};
        train_rng_shuffle(&ra, x, 3);
        count[x[0] * 2 + (x[1] > x[2])]++;
    }
    for (int k = 0; k < 6; k++)
        assert_true(abs(count[k] - trials / 6) < 600);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_defaults),
        cmocka_unit_test(test_adamw_first_step),
        cmocka_unit_test(test_adamw_vs_reference),
        cmocka_unit_test(test_adamw_decay_flag),
        cmocka_unit_test(test_adamw_threads_deterministic),
        cmocka_unit_test(test_adamw_init_errors),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_grad_norm_deterministic),
        cmocka_unit_test(test_grads_scale_zero),
        cmocka_unit_test(test_grads_nonfinite),
        cmocka_unit_test(test_sched_names),
        cmocka_unit_test(test_sched_warmup_all_kinds),
        cmocka_unit_test(test_sched_constant),
        cmocka_unit_test(test_sched_linear),
        cmocka_unit_test(test_sched_cosine),
        cmocka_unit_test(test_rng_known_values),
        cmocka_unit_test(test_rng_streams),
        cmocka_unit_test(test_rng_uniform),
        cmocka_unit_test(test_rng_shuffle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
