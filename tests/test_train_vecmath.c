/*
 * test_train_vecmath.c - training's vector loops (src/train/vecmath.h) against double-precision
 * references: exp within 3 ulp over its whole range (and its special values), the softmax
 * helpers, SwiGLU forward and backward, with lengths that leave every tail size. On a CPU with
 * AVX-512 this checks the 16-lane polynomial; elsewhere (or with AGENTFLOW_ISA=ref) the libm
 * loops.
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

#include <sys/wait.h>
#include <unistd.h>

#include "train/vecmath.h"

/* Distance in units of the last place between two finite floats of the same sign. */
static double ulps(float got, double want)
{
    const float w = (float)want;
    if (got == w)
        return 0;
    const double step = fabs((double)nextafterf(w, INFINITY) - (double)w);
    return fabs((double)got - want) / (step > 0 ? step : 1e-45);
}

static void test_exp_accuracy(void **state)
{
    (void)state;
    printf("avx512 path: %s\n", train_avx512_enabled() ? "yes" : "no");
    enum { N = 100003 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    /* -87.3 .. 88.7, the range where expf is normal */
    for (int i = 0; i < N; i++)
        x[i] = -87.3f + 176.0f * (float)i / (float)(N - 1);
    memcpy(y, x, N * sizeof *x);
    double sum = train_vec_exp_sum(y, N, 1.0f, 0.0f), want_sum = 0, worst = 0;
    for (int i = 0; i < N; i++) {
        const double want = exp((double)x[i]);
        want_sum += (double)y[i];
        const double u = ulps(y[i], want);
        if (u > worst)
            worst = u;
        if (u > 3)
            fail_msg("exp(%.9g) = %.9g, want %.9g (%.1f ulp)", (double)x[i], (double)y[i], want, u);
    }
    printf("worst exp error %.2f ulp\n", worst);
    assert_true(fabs(sum - want_sum) <= 1e-9 * want_sum); /* the sum is of the stored values */
    free(x);
    free(y);
}

static void test_exp_special(void **state)
{
    (void)state;
    float v[7] = {NAN, -INFINITY, INFINITY, -200.0f, 200.0f, 0.0f, -0.0f};
    (void)train_vec_exp_sum(v, 7, 1.0f, 0.0f);
    assert_true(isnan(v[0]));
    assert_true(v[1] == 0.0f);
    assert_true(isinf(v[2]) && v[2] > 0);
    assert_true(v[3] == 0.0f);
    assert_true(isinf(v[4]) && v[4] > 0);
    assert_true(v[5] == 1.0f && v[6] == 1.0f);
}

static void test_softmax_helpers(void **state)
{
    (void)state;
    for (int64_t n = 1; n <= 40; n++) {
        float x[40], y[40];
        for (int64_t j = 0; j < n; j++)
            x[j] = (float)((j * 7919) % 23) - 11.5f;
        memcpy(y, x, sizeof x);
        const float mx = train_vec_scale_max(y, n, 0.125f);
        float want_mx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            assert_true(y[j] == x[j] * 0.125f);
            want_mx = x[j] * 0.125f > want_mx ? x[j] * 0.125f : want_mx;
        }
        assert_true(mx == want_mx);
        /* exp(x·a − b) and its sum; then the normalising scale */
        memcpy(y, x, sizeof x);
        const double s = train_vec_exp_sum(y, n, 0.5f, 1.25f);
        double want_s = 0;
        for (int64_t j = 0; j < n; j++) {
            const double e = exp((double)x[j] * 0.5 - 1.25);
            want_s += e;
            assert_true(fabs((double)y[j] - e) <= 4e-7 * e);
        }
        assert_true(fabs(s - want_s) <= 1e-6 * want_s);
        memcpy(y, x, sizeof x);
        train_vec_scale(y, n, 3.0f);
        for (int64_t j = 0; j < n; j++)
            assert_true(y[j] == x[j] * 3.0f);
    }
}

static void test_swiglu(void **state)
{
    (void)state;
    enum { N = 53 };
    float g[N], u[N], d[N], out[N], dg[N], du[N];
    for (int i = 0; i < N; i++) {
        g[i] = -30.0f + 60.0f * (float)i / (N - 1);
        u[i] = 0.5f + 0.01f * (float)i;
        d[i] = 1.0f - 0.03f * (float)i;
        dg[i] = 0.25f; /* the backward adds */
        du[i] = -0.5f;
    }
    train_vec_swiglu_fwd(g, u, N, out);
    train_vec_swiglu_bwd(d, g, u, N, dg, du);
    for (int i = 0; i < N; i++) {
        const double s = 1.0 / (1.0 + exp(-(double)g[i]));
        const double f = (double)g[i] * s * (double)u[i];
        const double wg = 0.25 + (double)d[i] * (double)u[i] * s * (1.0 + (double)g[i] * (1.0 - s));
        const double wu = -0.5 + (double)d[i] * (double)g[i] * s;
        if (fabs((double)out[i] - f) > 1e-6 * (fabs(f) + 1e-6) ||
            fabs((double)dg[i] - wg) > 1e-6 * (fabs(wg) + 1) ||
            fabs((double)du[i] - wu) > 1e-6 * (fabs(wu) + 1))
            fail_msg("swiglu at g=%g: %g %g %g, want %g %g %g", (double)g[i], (double)out[i],
                     (double)dg[i], (double)du[i], f, wg, wu);
    }
    /* either gradient may be skipped */
    float only[N];
    for (int i = 0; i < N; i++)
        only[i] = 0.25f;
    train_vec_swiglu_bwd(d, g, u, N, only, NULL);
    assert_memory_equal(only, dg, sizeof only);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_accuracy),
        cmocka_unit_test(test_exp_special),
        cmocka_unit_test(test_softmax_helpers),
        cmocka_unit_test(test_swiglu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* the plain C loops too, in a child that cannot take the AVX-512 path */
    if (!getenv("AGENTFLOW_ISA") && train_avx512_enabled()) {
        printf("again with AGENTFLOW_ISA=ref:\n");
        fflush(stdout);
        const pid_t pid = fork();
        if (pid == 0) {
            setenv("AGENTFLOW_ISA", "ref", 1);
            execl("/proc/self/exe", "test_train_vecmath", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    }
    return rc;
}
