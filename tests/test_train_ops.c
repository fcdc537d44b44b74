/*
 * test_train_ops.c - the training math layer (src/train/ops.h, gemm.h): each op's backward
 * against central finite differences of a double-precision reference forward (loss = Σ r·y
 * with random r), the tiny model's F32 forward against an independent double reimplementation
 * and its every parameter gradient against finite differences, and the blocked gemm against
 * the naive one.
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

#include "train/gemm.h"
#include "train/ops.h"

#define FD_H 1e-5

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_state = 1;

static double urand(void) /* [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static float *frand(size_t n, double scale)
{
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(scale * urand());
    return p;
}

static double *to_d(const float *x, size_t n)
{
    double *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (double)x[i];
    return p;
}

typedef double (*loss_fn)(void *ctx);

/* Central differences of f with respect to each x[i]; x is restored. */
static double *fd_grad(loss_fn f, void *ctx, double *x, size_t n)
{
    double *g = malloc(n * sizeof *g);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++) {
        const double s = x[i];
        x[i] = s + FD_H;
        const double lp = f(ctx);
        x[i] = s - FD_H;
        const double lm = f(ctx);
        x[i] = s;
        g[i] = (lp - lm) / (2 * FD_H);
    }
    return g;
}

/* Analytic (F32) vs numeric: |a − n| <= 2e-3·|n| + 1e-3·max|n| + 1e-6 for every element. */
static void expect_close(const char *what, const float *a, const double *num, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(num[i]) > mx ? fabs(num[i]) : mx;
    size_t worst = 0;
    double worst_ex = -1;
    for (size_t i = 0; i < n; i++) {
        const double tol = 2e-3 * fabs(num[i]) + 1e-3 * mx + 1e-6;
        const double ex = fabs((double)a[i] - num[i]) / tol;
        if (ex > worst_ex) {
            worst_ex = ex;
            worst = i;
        }
    }
    if (worst_ex > 1.0)
        fail_msg("%s: element %zu analytic %.8g numeric %.8g (max |g| %.3g)", what, worst,
                 (double)a[worst], num[worst], mx);
}

static double dot_r(const double *y, const double *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += y[i] * r[i];
    return s;
}

/* ---- gemm --------------------------------------------------------------------------------- */

static void check_gemm(int64_t m, int64_t n, int64_t k)
{
    float *a = frand((size_t)(m * k), 1), *b = frand((size_t)(n * k), 1);
    float *c0 = frand((size_t)(m * n), 1);
    float *c1 = malloc((size_t)(m * n) * sizeof *c1), *c2 = malloc((size_t)(m * n) * sizeof *c2);
    typedef void (*fn)(int64_t, int64_t, int64_t, const float *, const float *, float *, int);
    const fn naive[] = {train_gemm_nt_naive, train_gemm_nn_naive, train_gemm_tn_naive};
    const fn blocked[] = {train_gemm_nt_blocked, train_gemm_nn_blocked, train_gemm_tn_blocked};
    const fn dflt[] = {train_gemm_nt, train_gemm_nn, train_gemm_tn};
    for (int f = 0; f < 3; f++)
        for (int acc = 0; acc < 2; acc++) {
            memcpy(c1, c0, (size_t)(m * n) * sizeof *c1);
            memcpy(c2, c0, (size_t)(m * n) * sizeof *c2);
            naive[f](m, n, k, a, b, c1, acc);
            blocked[f](m, n, k, a, b, c2, acc);
            for (int64_t i = 0; i < m * n; i++)
                if (fabsf(c1[i] - c2[i]) > 1e-4f * (float)k)
                    fail_msg("gemm form %d acc %d (%lld,%lld,%lld) at %lld: %g vs %g", f, acc,
                             (long long)m, (long long)n, (long long)k, (long long)i, (double)c1[i],
                             (double)c2[i]);
            memcpy(c2, c0, (size_t)(m * n) * sizeof *c2);
            dflt[f](m, n, k, a, b, c2, acc);
            for (int64_t i = 0; i < m * n; i++)
                assert_true(fabsf(c1[i] - c2[i]) <= 1e-4f * (float)k);
        }
    free(a);
    free(b);
    free(c0);
    free(c1);
    free(c2);
}

static void test_gemm_blocked_equals_naive(void **state)
{
    (void)state;
    check_gemm(1, 1, 1);
    check_gemm(6, 16, 8);
    check_gemm(13, 37, 300); /* partial tiles, two depth slices */
    check_gemm(200, 45, 70); /* several row blocks */
    check_gemm(7, 2100, 19); /* two column slices */
    check_gemm(5, 3, 0);     /* empty depth: C = 0 or unchanged */
}

/* The AVX-512 kernel's arithmetic, scalar: per KC = 256 block of depth one fmaf chain from
 * zero, added into C (stored, for the first block of an overwrite). */
static float avx512_model(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                          const float *b, const float *c0, int acc, int64_t i, int64_t j)
{
    float c = c0[i * n + j];
    for (int64_t pc = 0; pc < k; pc += 256) {
        float s = 0;
        for (int64_t p = pc; p < k && p < pc + 256; p++)
            s = fmaf(ta ? a[p * m + i] : a[i * k + p], tb ? b[j * k + p] : b[p * n + j], s);
        c = (pc == 0 && !acc) ? s : c + s;
    }
    return k == 0 && !acc ? 0.0f : c;
}

static void check_avx512(int64_t m, int64_t n, int64_t k)
{
    float *a = frand((size_t)(m * k), 3), *b = frand((size_t)(n * k), 4);
    float *c0 = frand((size_t)(m * n), 5), *c = malloc((size_t)(m * n) * sizeof *c);
    float *cs = malloc((size_t)(m * n) * sizeof *cs);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int acc = 0; acc < 2; acc++) {
                const int64_t lda = ta ? m : k, ldb = tb ? k : n;
                memcpy(c, c0, (size_t)(m * n) * sizeof *c);
                train_gemm_avx512(ta, tb, m, n, k, a, lda, b, ldb, c, n, acc);
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        const float want = avx512_model(ta, tb, m, n, k, a, b, c0, acc, i, j);
                        if (memcmp(&want, &c[i * n + j], sizeof want))
                            fail_msg("avx512 ta %d tb %d acc %d (%lld,%lld,%lld) at %lld,%lld: "
                                     "%.9g vs %.9g",
                                     ta, tb, acc, (long long)m, (long long)n, (long long)k,
                                     (long long)i, (long long)j, (double)c[i * n + j],
                                     (double)want);
                    }
                /* the same product in uneven row and column slices: the same bits */
                memcpy(cs, c0, (size_t)(m * n) * sizeof *cs);
                const int64_t mi = m / 3 + 1 < m ? m / 3 + 1 : m;
                train_gemm_avx512(ta, tb, mi, n, k, a, lda, b, ldb, cs, n, acc);
                if (m > mi) {
                    const int64_t nj = (n + 1) / 2;
                    train_gemm_avx512(ta, tb, m - mi, nj, k, ta ? a + mi : a + mi * k, lda, b, ldb,
                                      cs + mi * n, n, acc);
                    train_gemm_avx512(ta, tb, m - mi, n - nj, k, ta ? a + mi : a + mi * k, lda,
                                      tb ? b + nj * k : b + nj, ldb, cs + mi * n + nj, n, acc);
                }
                assert_memory_equal(c, cs, (size_t)(m * n) * sizeof *c);
            }
    free(a);
    free(b);
    free(c0);
    free(c);
    free(cs);
}

static void test_gemm_avx512_exact(void **state)
{
    (void)state;
    if (!train_gemm_has_avx512()) {
        printf("skip: this CPU has no AVX-512F\n");
        return;
    }
    check_avx512(1, 1, 1);
    check_avx512(12, 32, 8);
    check_avx512(13, 37, 300); /* edge rows and columns, two depth slices */
    check_avx512(50, 17, 64);  /* columns under one half-panel */
    check_avx512(30, 600, 20); /* two column blocks */
    check_avx512(5, 3, 0);     /* empty depth */
    check_gemm(128, 96, 600);  /* the threaded default path, three depth slices */
}

/* ---- embedding ---------------------------------------------------------------------------- */

static void test_embed(void **state)
{
    (void)state;
    const float table[3 * 2] = {1, 2, 3, 4, 5, 6};
    const int32_t ids[4] = {2, 0, 2, 1};
    float out[8], dt[6] = {0};
    train_embed_fwd(table, 2, ids, 4, out);
    const float want[8] = {5, 6, 1, 2, 5, 6, 3, 4};
    assert_memory_equal(out, want, sizeof want);
    const float dout[8] = {1, 1, 10, 10, 100, 100, 1000, 1000};
    train_embed_bwd(dout, ids, 4, 2, dt);
    const float dwant[6] = {10, 10, 1000, 1000, 101, 101};
    assert_memory_equal(dt, dwant, sizeof dwant);
}

/* ---- RMSNorm ------------------------------------------------------------------------------ */

struct rms_ctx {
    double *x, *g, *r;
    int64_t T, n;
    double eps;
};

static double rms_loss(void *p)
{
    const struct rms_ctx *c = p;
    double L = 0;
    for (int64_t t = 0; t < c->T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < c->n; i++)
            ss += c->x[t * c->n + i] * c->x[t * c->n + i];
        const double rs = 1 / sqrt(ss / (double)c->n + c->eps);
        for (int64_t i = 0; i < c->n; i++)
            L += c->r[t * c->n + i] * c->x[t * c->n + i] * rs * c->g[i];
    }
    return L;
}

static void test_rmsnorm_grad(void **state)
{
    (void)state;
    const int64_t T = 3, n = 8;
    float *x = frand((size_t)(T * n), 2), *g = frand((size_t)n, 1), *r = frand((size_t)(T * n), 1);
    float y[24], rstd[3], dx[24] = {0}, dg[8] = {0};
    train_rmsnorm_fwd(x, g, T, n, 1e-5f, y, rstd);
    train_rmsnorm_bwd(r, x, g, rstd, T, n, dx, dg);
    struct rms_ctx c = {to_d(x, 24), to_d(g, 8), to_d(r, 24), T, n, (double)1e-5f};
    double *nx = fd_grad(rms_loss, &c, c.x, 24), *ng = fd_grad(rms_loss, &c, c.g, 8);
    expect_close("rmsnorm dx", dx, nx, 24);
    expect_close("rmsnorm dg", dg, ng, 8);
    free(nx), free(ng), free(c.x), free(c.g), free(c.r), free(x), free(g), free(r);
}

/* ---- linear ------------------------------------------------------------------------------- */

struct lin_ctx {
    double *x, *w, *b, *r;
    int64_t T, ni, no;
};

static double lin_loss(void *p)
{
    const struct lin_ctx *c = p;
    double L = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t o = 0; o < c->no; o++) {
            double s = c->b[o];
            for (int64_t i = 0; i < c->ni; i++)
                s += c->x[t * c->ni + i] * c->w[o * c->ni + i];
            L += s * c->r[t * c->no + o];
        }
    return L;
}

static void test_linear_grad(void **state)
{
    (void)state;
    enum { T = 3, NI = 5, NO = 7 };
    float *x = frand(T * NI, 1), *w = frand(NO * NI, 1), *b = frand(NO, 1), *r = frand(T * NO, 1);
    float y[T * NO], dx[T * NI] = {0}, dw[NO * NI] = {0}, db[NO] = {0};
    train_linear_fwd(x, w, b, T, NI, NO, y);
    struct lin_ctx c = {to_d(x, T * NI), to_d(w, NO * NI), to_d(b, NO), to_d(r, T * NO), T, NI, NO};
    double *yd = malloc(sizeof(double) * T * NO);
    for (int i = 0; i < T * NO; i++) { /* forward value: L with r = one-hot */
        double s = c.b[i % NO];
        for (int k = 0; k < NI; k++)
            s += c.x[(i / NO) * NI + k] * c.w[(i % NO) * NI + k];
        assert_true(fabs(s - (double)y[i]) < 1e-5);
        yd[i] = s;
    }
    train_linear_bwd(r, x, w, T, NI, NO, dx, dw, db);
    double *nx = fd_grad(lin_loss, &c, c.x, T * NI), *nw = fd_grad(lin_loss, &c, c.w, NO * NI);
    double *nb = fd_grad(lin_loss, &c, c.b, NO);
    expect_close("linear dx", dx, nx, T * NI);
    expect_close("linear dw", dw, nw, NO * NI);
    expect_close("linear db", db, nb, NO);
    free(nx), free(nw), free(nb), free(yd), free(c.x), free(c.w), free(c.b), free(c.r);
    free(x), free(w), free(b), free(r);
}

/* ---- RoPE --------------------------------------------------------------------------------- */

struct rope_ctx {
    double *x, *r;
    const float *cs, *sn;
    int64_t T, nh, hd, n_rot;
    int neox;
};

static double rope_loss(void *p)
{
    const struct rope_ctx *c = p;
    const int64_t half = c->n_rot / 2;
    double L = 0;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->nh; h++) {
            const double *v = c->x + (t * c->nh + h) * c->hd;
            const double *rr = c->r + (t * c->nh + h) * c->hd;
            for (int64_t i = c->n_rot; i < c->hd; i++)
                L += v[i] * rr[i];
            for (int64_t i = 0; i < half; i++) {
                const int64_t a = c->neox ? i : 2 * i, b = c->neox ? i + half : 2 * i + 1;
                const double co = (double)c->cs[t * half + i], si = (double)c->sn[t * half + i];
                L += rr[a] * (v[a] * co - v[b] * si) + rr[b] * (v[a] * si + v[b] * co);
            }
        }
    return L;
}

static void rope_case(int neox, int64_t n_rot)
{
    enum { T = 4, NH = 2, HD = 8 };
    const struct train_rope rp = {n_rot, HD, 10000.0f, 1.0f, NULL, neox};
    float cs[T * HD / 2], sn[T * HD / 2];
    train_rope_tables(&rp, 3, T, cs, sn);
    assert_true(fabsf(cs[0] - cosf(3.0f)) < 1e-6f); /* pair 0 turns by the position */
    float *x = frand(T * NH * HD, 1), *r = frand(T * NH * HD, 1);
    float y[T * NH * HD], dx[T * NH * HD];
    memcpy(y, x, sizeof y);
    train_rope_fwd(&rp, y, T, NH, cs, sn);
    memcpy(dx, r, sizeof dx);
    train_rope_bwd(&rp, dx, T, NH, cs, sn);
    struct rope_ctx c = {
        to_d(x, T * NH * HD), to_d(r, T * NH * HD), cs, sn, T, NH, HD, n_rot, neox};
    double *yd = to_d(y, T * NH * HD);
    assert_true(fabs(dot_r(yd, c.r, T * NH * HD) - rope_loss(&c)) < 1e-4);
    double *nx = fd_grad(rope_loss, &c, c.x, T * NH * HD);
    expect_close(neox ? "rope neox dx" : "rope norm dx", dx, nx, T * NH * HD);
    train_rope_bwd(&rp, y, T, NH, cs, sn); /* the inverse rotation restores x */
    for (int i = 0; i < T * NH * HD; i++)
        assert_true(fabsf(y[i] - x[i]) < 1e-5f);
    free(nx), free(yd), free(c.x), free(c.r), free(x), free(r);
}

static void test_rope_grad(void **state)
{
    (void)state;
    rope_case(0, 8);
    rope_case(1, 8);
    rope_case(1, 4); /* partial rotation: dims 4..7 pass through */
}

/* ---- attention ---------------------------------------------------------------------------- */

struct attn_ctx {
    double *q, *k, *v, *r;
    int64_t T, nh, nkv, hd;
};

/* Double reference: out [T][nh][hd]; returns Σ r·out. */
static double attn_ref(const struct attn_ctx *c, double *out)
{
    const int64_t qd = c->nh * c->hd, kvd = c->nkv * c->hd, grp = c->nh / c->nkv;
    double L = 0, sc[64];
    for (int64_t h = 0; h < c->nh; h++)
        for (int64_t t = 0; t < c->T; t++) {
            const int64_t g = h / grp;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= t; j++) {
                double d = 0;
                for (int64_t i = 0; i < c->hd; i++)
                    d += c->q[t * qd + h * c->hd + i] * c->k[j * kvd + g * c->hd + i];
                sc[j] = d / sqrt((double)c->hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = 0; j <= t; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int64_t i = 0; i < c->hd; i++) {
                double o = 0;
                for (int64_t j = 0; j <= t; j++)
                    o += sc[j] / sum * c->v[j * kvd + g * c->hd + i];
                if (out)
                    out[t * qd + h * c->hd + i] = o;
                L += o * c->r[t * qd + h * c->hd + i];
            }
        }
    return L;
}

static double attn_loss(void *p)
{
    return attn_ref(p, NULL);
}

static void attn_case(int64_t nh, int64_t nkv)
{
    enum { T = 6, HD = 4 };
    const int64_t qn = T * nh * HD, kn = T * nkv * HD;
    const struct train_attn at = {nh, nkv, HD};
    float *q = frand((size_t)qn, 1.5), *k = frand((size_t)kn, 1.5), *v = frand((size_t)kn, 1);
    float *r = frand((size_t)qn, 1), *out = calloc((size_t)qn, sizeof(float));
    float *lse = calloc((size_t)(nh * T), sizeof(float));
    float *dq = calloc((size_t)qn, sizeof(float)), *dk = calloc((size_t)kn, sizeof(float));
    float *dv = calloc((size_t)kn, sizeof(float));
    train_attn_fwd(&at, q, k, v, T, out, lse);
    train_attn_bwd(&at, r, q, k, v, out, lse, T, dq, dk, dv);
    struct attn_ctx c = {to_d(q, (size_t)qn),
                         to_d(k, (size_t)kn),
                         to_d(v, (size_t)kn),
                         to_d(r, (size_t)qn),
                         T,
                         nh,
                         nkv,
                         HD};
    double *od = malloc((size_t)qn * sizeof *od);
    attn_ref(&c, od);
    for (int64_t i = 0; i < qn; i++)
        assert_true(fabs(od[i] - (double)out[i]) < 1e-5);
    double *nq = fd_grad(attn_loss, &c, c.q, (size_t)qn);
    double *nk = fd_grad(attn_loss, &c, c.k, (size_t)kn);
    double *nv = fd_grad(attn_loss, &c, c.v, (size_t)kn);
    expect_close("attention dq", dq, nq, (size_t)qn);
    expect_close("attention dk", dk, nk, (size_t)kn);
    expect_close("attention dv", dv, nv, (size_t)kn);
    free(nq), free(nk), free(nv), free(od), free(c.q), free(c.k), free(c.v), free(c.r);
    free(q), free(k), free(v), free(r), free(out), free(lse), free(dq), free(dk), free(dv);
}

static void test_attention_grad(void **state)
{
    (void)state;
    attn_case(4, 2); /* GQA: two query heads per kv head */
    attn_case(2, 2);
    attn_case(3, 1);
}

/* ---- SwiGLU ------------------------------------------------------------------------------- */

struct swi_ctx {
    double *g, *u, *r;
    int64_t n;
};

static double swi_loss(void *p)
{
    const struct swi_ctx *c = p;
    double L = 0;
    for (int64_t i = 0; i < c->n; i++)
        L += c->r[i] * c->g[i] / (1 + exp(-c->g[i])) * c->u[i];
    return L;
}

static void test_swiglu_grad(void **state)
{
    (void)state;
    enum { N = 12 };
    float *g = frand(N, 4), *u = frand(N, 2), *r = frand(N, 1);
    float y[N], dg[N] = {0}, du[N] = {0};
    train_swiglu_fwd(g, u, N, y);
    train_swiglu_bwd(r, g, u, N, dg, du);
    struct swi_ctx c = {to_d(g, N), to_d(u, N), to_d(r, N), N};
    double *ng = fd_grad(swi_loss, &c, c.g, N), *nu = fd_grad(swi_loss, &c, c.u, N);
    expect_close("swiglu dgate", dg, ng, N);
    expect_close("swiglu dup", du, nu, N);
    float acc[N] = {1, 2, 3};
    train_add(acc, y, N);
    assert_true(fabsf(acc[0] - (1 + y[0])) < 1e-6f && fabsf(acc[5] - y[5]) < 1e-6f);
    free(ng), free(nu), free(c.g), free(c.u), free(c.r), free(g), free(u), free(r);
}

/* ---- cross-entropy and the head ----------------------------------------------------------- */

struct xent_ctx {
    double *logits, *xn, *w; /* logits, or xn·wᵀ when logits is NULL */
    const int32_t *tg;
    const float *wt;
    int64_t T, V, d;
};

static double xent_loss(void *p)
{
    const struct xent_ctx *c = p;
    double L = 0, row[64];
    for (int64_t t = 0; t < c->T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < c->V; i++) {
            if (c->logits)
                row[i] = c->logits[t * c->V + i];
            else {
                row[i] = 0;
                for (int64_t j = 0; j < c->d; j++)
                    row[i] += c->xn[t * c->d + j] * c->w[i * c->d + j];
            }
            mx = row[i] > mx ? row[i] : mx;
        }
        for (int64_t i = 0; i < c->V; i++)
            sum += exp(row[i] - mx);
        L -= (double)c->wt[t] * (row[c->tg[t]] - mx - log(sum > 0 ? sum : 1));
    }
    return L;
}

static void test_xent_grad_and_logprobs(void **state)
{
    (void)state;
    enum { T = 4, V = 7 };
    float *lg = frand(T * V, 3);
    const int32_t tg[T] = {3, 0, 6, 3};
    const float wt[T] = {0.5f, 0.0f, -1.25f, 2.0f}; /* a skipped row and a negative advantage */
    float dl[T * V], lp[T], lp2[T];
    const double loss = train_xent_fwd_bwd(lg, T, V, tg, wt, dl, lp);
    struct xent_ctx c = {to_d(lg, T * V), NULL, NULL, tg, wt, T, V, 0};
    assert_true(fabs(loss - xent_loss(&c)) < 1e-5);
    double *nl = fd_grad(xent_loss, &c, c.logits, T * V);
    expect_close("xent dlogits", dl, nl, T * V);
    for (int i = 0; i < V; i++)
        assert_true(dl[V + i] == 0.0f);
    train_token_logprobs(lg, T, V, tg, lp2);
    for (int t = 0; t < T; t++) {
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++)
            mx = c.logits[t * V + i] > mx ? c.logits[t * V + i] : mx;
        for (int i = 0; i < V; i++)
            s += exp(c.logits[t * V + i] - mx);
        const double want = c.logits[t * V + tg[t]] - mx - log(s);
        assert_true(fabs((double)lp[t] - want) < 1e-5 && fabs((double)lp2[t] - want) < 1e-5);
    }
    /* stability: logits near 1e4 must not overflow */
    float big[V];
    for (int i = 0; i < V; i++)
        big[i] = 10000.0f + (float)i;
    float one;
    const int32_t t6 = 6;
    train_token_logprobs(big, 1, V, &t6, &one);
    assert_true(isfinite(one) && one < 0.0f && one > -1.0f);
    free(nl), free(c.logits), free(lg);
}

static void test_head_xent_grad(void **state)
{
    (void)state;
    enum { T = 5, D = 6, V = 9 };
    float *xn = frand(T * D, 1), *w = frand(V * D, 1);
    const int32_t tg[T] = {1, 8, 0, 4, 4};
    const float wt[T] = {0.2f, 0.2f, 0.0f, 0.4f, 0.2f};
    float dx[T * D] = {0}, dw[V * D] = {0}, dx1[T * D] = {0}, dw1[V * D] = {0}, lp[T], lp1[T];
    const double loss = train_head_xent(xn, w, T, D, V, tg, wt, 2, dx, dw, lp);
    const double loss1 = train_head_xent(xn, w, T, D, V, tg, wt, 0, dx1, dw1, lp1);
    assert_true(fabs(loss - loss1) < 1e-6);
    for (int i = 0; i < T * D; i++)
        assert_true(fabsf(dx[i] - dx1[i]) < 1e-6f);
    struct xent_ctx c = {NULL, to_d(xn, T * D), to_d(w, V * D), tg, wt, T, V, D};
    assert_true(fabs(loss - xent_loss(&c)) < 1e-5);
    double *nx = fd_grad(xent_loss, &c, c.xn, T * D), *nw = fd_grad(xent_loss, &c, c.w, V * D);
    expect_close("head dxn", dx, nx, T * D);
    expect_close("head dw", dw, nw, V * D);
    free(nx), free(nw), free(c.xn), free(c.w), free(xn), free(w);
}

/* ---- the tiny model ----------------------------------------------------------------------- */

/* An independent double reimplementation, reading the parameters from P (same offsets as the
 * model's block). */
struct tiny_ref {
    const struct train_tiny *m;
    double *P;
    const int32_t *tok;
    int64_t T;
    const float *wt;
    double *logits; /* [T][V] or NULL */
};

#define PD(c, ptr) ((c)->P + ((ptr) - (c)->m->params))

static void ref_rms(const double *x, const double *g, int64_t n, double eps, double *y)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double r = 1 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * r * g[i];
}

/* y[no] (+)= W[no][ni]·x (+ b) */
static void ref_lin(const double *x, const double *w, const double *b, int64_t ni, int64_t no,
                    double *y, int add)
{
    for (int64_t o = 0; o < no; o++) {
        double s = b ? b[o] : 0;
        for (int64_t i = 0; i < ni; i++)
            s += w[o * ni + i] * x[i];
        y[o] = add ? y[o] + s : s;
    }
}

static void ref_rope(double *v, int64_t pos, int64_t hd, double base, int neox)
{
    for (int64_t i = 0; i < hd / 2; i++) {
        const double th = (double)pos * pow(base, -2.0 * (double)i / (double)hd);
        const int64_t a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(th) - x1 * sin(th);
        v[b] = x0 * sin(th) + x1 * cos(th);
    }
}

static void ref_attention(const struct train_tiny_cfg *c, int64_t T, const double *q,
                          const double *k, const double *v, double *att)
{
    const int64_t hd = c->head_dim, qd = c->n_head * hd, kvd = c->n_head_kv * hd;
    double sc[64];
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < c->n_head; h++) {
            const int64_t g = h / (c->n_head / c->n_head_kv);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= t; j++) {
                double d = 0;
                for (int64_t i = 0; i < hd; i++)
                    d += q[t * qd + h * hd + i] * k[j * kvd + g * hd + i];
                sc[j] = d / sqrt((double)hd);
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int64_t j = 0; j <= t; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int64_t i = 0; i < hd; i++) {
                double o = 0;
                for (int64_t j = 0; j <= t; j++)
                    o += sc[j] / sum * v[j * kvd + g * hd + i];
                att[t * qd + h * hd + i] = o;
            }
        }
}

static void ref_layer(const struct tiny_ref *c, int64_t l, double *x, double *buf)
{
    const struct train_tiny_cfg *cf = &c->m->cfg;
    const struct train_tiny_layer *ly = &c->m->layers[l];
    const int64_t T = c->T, d = cf->d_model, ff = cf->n_ff, hd = cf->head_dim;
    const int64_t qd = cf->n_head * hd, kvd = cf->n_head_kv * hd;
    double *xn = buf, *q = xn + d, *k = q + T * qd, *v = k + T * kvd, *att = v + T * kvd;
    double *g = att + T * qd, *u = g + ff;
    for (int64_t t = 0; t < T; t++) {
        ref_rms(x + t * d, PD(c, ly->attn_norm), d, (double)cf->rms_eps, xn);
        ref_lin(xn, PD(c, ly->wq), ly->bq ? PD(c, ly->bq) : NULL, d, qd, q + t * qd, 0);
        ref_lin(xn, PD(c, ly->wk), ly->bk ? PD(c, ly->bk) : NULL, d, kvd, k + t * kvd, 0);
        ref_lin(xn, PD(c, ly->wv), ly->bv ? PD(c, ly->bv) : NULL, d, kvd, v + t * kvd, 0);
        for (int64_t h = 0; h < cf->n_head; h++)
            ref_rope(q + t * qd + h * hd, t, hd, (double)cf->rope_base, cf->rope_neox);
        for (int64_t h = 0; h < cf->n_head_kv; h++)
            ref_rope(k + t * kvd + h * hd, t, hd, (double)cf->rope_base, cf->rope_neox);
    }
    ref_attention(cf, T, q, k, v, att);
    for (int64_t t = 0; t < T; t++) {
        ref_lin(att + t * qd, PD(c, ly->wo), NULL, qd, d, x + t * d, 1);
        ref_rms(x + t * d, PD(c, ly->ffn_norm), d, (double)cf->rms_eps, xn);
        ref_lin(xn, PD(c, ly->w_gate), NULL, d, ff, g, 0);
        ref_lin(xn, PD(c, ly->w_up), NULL, d, ff, u, 0);
        for (int64_t i = 0; i < ff; i++)
            g[i] = g[i] / (1 + exp(-g[i])) * u[i];
        ref_lin(g, PD(c, ly->w_down), NULL, ff, d, x + t * d, 1);
    }
}

static double tiny_ref_loss(void *p)
{
    const struct tiny_ref *c = p;
    const struct train_tiny_cfg *cf = &c->m->cfg;
    const int64_t T = c->T, d = cf->d_model, V = cf->n_vocab;
    const int64_t qd = cf->n_head * cf->head_dim, kvd = cf->n_head_kv * cf->head_dim;
    double *x = malloc((size_t)(T * d) * sizeof *x);
    double *buf = malloc((size_t)(d + 2 * T * qd + 2 * T * kvd + 2 * cf->n_ff + V) * sizeof *buf);
    for (int64_t t = 0; t < T; t++)
        memcpy(x + t * d, PD(c, c->m->tok_embd) + c->tok[t] * d, (size_t)d * sizeof *x);
    for (int64_t l = 0; l < cf->n_layer; l++)
        ref_layer(c, l, x, buf);
    double L = 0, *xn = buf, *lg = buf + d;
    for (int64_t t = 0; t < T; t++) {
        ref_rms(x + t * d, PD(c, c->m->output_norm), d, (double)cf->rms_eps, xn);
        ref_lin(xn, PD(c, c->m->output), NULL, d, V, lg, 0);
        if (c->logits)
            memcpy(c->logits + t * V, lg, (size_t)V * sizeof *lg);
        if (t == T - 1)
            break;
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < V; i++)
            mx = lg[i] > mx ? lg[i] : mx;
        for (int64_t i = 0; i < V; i++)
            s += exp(lg[i] - mx);
        const double w = c->wt ? (double)c->wt[t] : 1.0 / (double)(T - 1);
        L -= w * (lg[c->tok[t + 1]] - mx - log(s));
    }
    free(x);
    free(buf);
    return L;
}

static void tiny_case(const struct train_tiny_cfg *cfg, const float *wt)
{
    enum { T = 7 };
    char err[256];
    struct train_tiny *m = NULL, *g = NULL;
    assert_int_equal(train_tiny_new(cfg, &m, err, sizeof err), AF_OK);
    assert_int_equal(train_tiny_new(cfg, &g, err, sizeof err), AF_OK);
    train_tiny_init_random(m, 7, 0.3f);
    const int32_t tok[T] = {3, 17, 3, 49, 0, 25, 17};
    float *logits = malloc((size_t)(T * cfg->n_vocab) * sizeof *logits);
    double loss = 0, loss_fwd = 0;
    assert_int_equal(train_tiny_loss(m, tok, T, wt, g, logits, &loss, err, sizeof err), AF_OK);
    assert_int_equal(train_tiny_loss(m, tok, T, wt, NULL, NULL, &loss_fwd, err, sizeof err), AF_OK);
    assert_true(loss == loss_fwd);
    struct tiny_ref c = {m, to_d(m->params, m->n_params), tok, T, wt, NULL};
    c.logits = malloc((size_t)(T * cfg->n_vocab) * sizeof *c.logits);
    const double ref = tiny_ref_loss(&c);
    if (fabs(ref - loss) > 1e-4 * fabs(ref) + 1e-5)
        fail_msg("tiny loss %.8g, reference %.8g", loss, ref);
    for (int64_t i = 0; i < T * cfg->n_vocab; i++)
        if (fabs(c.logits[i] - (double)logits[i]) > 1e-4)
            fail_msg("tiny logit %lld: %.8g vs reference %.8g", (long long)i, (double)logits[i],
                     c.logits[i]);
    free(c.logits);
    c.logits = NULL;
    double *num = fd_grad(tiny_ref_loss, &c, c.P, m->n_params);
    /* per tensor, so a failure names it */
    struct {
        const char *name;
        const float *p;
        int64_t n;
    } ts[64];
    size_t nt = 0;
    const int64_t d = cfg->d_model, qd = cfg->n_head * cfg->head_dim;
    const int64_t kvd = cfg->n_head_kv * cfg->head_dim, ff = cfg->n_ff, V = cfg->n_vocab;
#define T_ADD(nm, ptr, cnt)                                                                        \
    do {                                                                                           \
        ts[nt].name = nm;                                                                          \
        ts[nt].p = ptr;                                                                            \
        ts[nt++].n = cnt;                                                                          \
    } while (0)
    T_ADD("tok_embd", m->tok_embd, V * d);
    T_ADD("output_norm", m->output_norm, d);
    if (!cfg->tied_output)
        T_ADD("output", m->output, V * d);
    for (int64_t l = 0; l < cfg->n_layer; l++) {
        const struct train_tiny_layer *ly = &m->layers[l];
        T_ADD("attn_norm", ly->attn_norm, d);
        T_ADD("wq", ly->wq, qd * d);
        T_ADD("wk", ly->wk, kvd * d);
        T_ADD("wv", ly->wv, kvd * d);
        if (ly->bq) {
            T_ADD("bq", ly->bq, qd);
            T_ADD("bk", ly->bk, kvd);
            T_ADD("bv", ly->bv, kvd);
        }
        T_ADD("wo", ly->wo, d * qd);
        T_ADD("ffn_norm", ly->ffn_norm, d);
        T_ADD("w_gate", ly->w_gate, ff * d);
        T_ADD("w_up", ly->w_up, ff * d);
        T_ADD("w_down", ly->w_down, d * ff);
    }
#undef T_ADD
    int64_t covered = 0;
    for (size_t i = 0; i < nt; i++) {
        const size_t off = (size_t)(ts[i].p - m->params);
        expect_close(ts[i].name, g->params + off, num + off, (size_t)ts[i].n);
        covered += ts[i].n;
    }
    assert_int_equal(covered, (int64_t)m->n_params);
    free(num), free(c.P), free(logits);
    train_tiny_free(m);
    train_tiny_free(g);
}

static void test_tiny_model_grad(void **state)
{
    (void)state;
    /* qwen2-like: NEOX, qkv bias, GQA 4/2, untied head, 2 layers */
    const struct train_tiny_cfg a = {50, 16, 2, 4, 2, 4, 24, 1e-6f, 10000.0f, 1, 1, 0};
    tiny_case(&a, NULL);
    /* llama-like: NORM pairs, no bias, tied head, 1 layer; a masked, weighted loss */
    const struct train_tiny_cfg b = {50, 24, 1, 2, 2, 12, 32, 1e-5f, 500.0f, 0, 0, 1};
    const float wt[6] = {0.0f, 0.0f, 0.5f, 1.0f, -0.25f, 0.0f};
    tiny_case(&b, wt);
}

static void test_tiny_model_errors(void **state)
{
    (void)state;
    char err[256];
    struct train_tiny *m = NULL;
    struct train_tiny_cfg c = {50, 16, 1, 3, 2, 4, 24, 1e-6f, 10000.0f, 1, 0, 0};
    assert_int_equal(train_tiny_new(&c, &m, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "n_head_kv"));
    c.n_head = 4;
    assert_int_equal(train_tiny_new(&c, &m, err, sizeof err), AF_OK);
    const int32_t bad[3] = {1, 50, 2};
    double loss;
    assert_int_equal(train_tiny_loss(m, bad, 3, NULL, NULL, NULL, &loss, err, sizeof err),
                     AF_EINVAL);
    assert_non_null(strstr(err, "token 1"));
    assert_int_equal(train_tiny_loss(m, bad, 1, NULL, NULL, NULL, &loss, err, sizeof err),
                     AF_EINVAL);
    train_tiny_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_blocked_equals_naive),
        cmocka_unit_test(test_gemm_avx512_exact),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_rmsnorm_grad),
        cmocka_unit_test(test_linear_grad),
        cmocka_unit_test(test_rope_grad),
        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_swiglu_grad),
        cmocka_unit_test(test_xent_grad_and_logprobs),
        cmocka_unit_test(test_head_xent_grad),
        cmocka_unit_test(test_tiny_model_grad),
        cmocka_unit_test(test_tiny_model_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
