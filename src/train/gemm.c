/*
 * gemm.c - the training matmuls (see gemm.h). The blocked kernel follows the GotoBLAS layout:
 * for each (NC columns, KC depth) slice, B is packed into 16-column panels and A into 6-row
 * panels, both k-major and zero-padded, shared by all threads; OpenMP then splits the
 * (MC rows x NB columns) blocks of C, and a 6x16 micro-kernel (12 AVX2 accumulators, or a plain
 * C twin) adds each tile into C. The transposes of the three forms are absorbed by packing.
 */
#include "train/gemm.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "train/vecmath.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GEMM_X86 1
#define AF_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define GEMM_X86 0
#endif

#ifdef AF_HAVE_CBLAS
#include <cblas.h>
#endif

enum { MR = 6, NR = 16, KC = 256, MC = 96, NB = 256, NC = 2048 };

/* ---- Naive references ------------------------------------------------------------------- */

void train_gemm_nt_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[i * k + p] * b[j * k + p];
            c[i * n + j] = accumulate ? c[i * n + j] + s : s;
        }
}

void train_gemm_nn_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[i * k + p] * b[p * n + j];
            c[i * n + j] = accumulate ? c[i * n + j] + s : s;
        }
}

void train_gemm_tn_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[p * m + i] * b[p * n + j];
            c[i * n + j] = accumulate ? c[i * n + j] + s : s;
        }
}

/* ---- Micro-kernels: c[MR][ldc] += ap (kc x MR) . bp (kc x NR) ---------------------------- */

static void ukernel_c(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc)
{
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < kc; p++, ap += MR, bp += NR)
        for (int i = 0; i < MR; i++) {
            const float x = ap[i];
            for (int j = 0; j < NR; j++)
                acc[i][j] += x * bp[j];
        }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            c[i * ldc + j] += acc[i][j];
}

#if GEMM_X86
AF_TARGET_AVX2 static void ukernel_avx2(int64_t kc, const float *ap, const float *bp, float *c,
                                        int64_t ldc)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
    for (int64_t p = 0; p < kc; p++, ap += MR, bp += NR) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        __m256 x = _mm256_broadcast_ss(ap);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(x, b0, c40);
        c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(x, b0, c50);
        c51 = _mm256_fmadd_ps(x, b1, c51);
    }
    const __m256 r[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
    for (int i = 0; i < MR; i++) {
        float *row = c + i * ldc;
        _mm256_storeu_ps(row, _mm256_add_ps(_mm256_loadu_ps(row), r[i][0]));
        _mm256_storeu_ps(row + 8, _mm256_add_ps(_mm256_loadu_ps(row + 8), r[i][1]));
    }
}

int train_gemm_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
int train_gemm_has_avx2(void)
{
    return 0;
}
#endif

typedef void (*ukernel_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc);

static ukernel_fn pick_ukernel(void)
{
#if GEMM_X86
    if (train_gemm_has_avx2())
        return ukernel_avx2;
#endif
    return ukernel_c;
}

/* ---- Packing ---------------------------------------------------------------------------- */

/* The operands as logical matrices: A_op (m x k), B_op (k x n). ta: A stored [k][m];
 * tb: B stored [n][k]. */
struct gemm_args {
    int64_t m, n, k;
    const float *a, *b;
    float *c;
    int ta, tb;
};

static inline float a_at(const struct gemm_args *g, int64_t i, int64_t p)
{
    return g->ta ? g->a[p * g->m + i] : g->a[i * g->k + p];
}

static inline float b_at(const struct gemm_args *g, int64_t p, int64_t j)
{
    return g->tb ? g->b[j * g->k + p] : g->b[p * g->n + j];
}

/* One MR-row panel of A_op rows i0.., depth p0..p0+kc: dst[p][MR]. */
static void pack_a_panel(const struct gemm_args *g, int64_t i0, int64_t p0, int64_t kc, float *dst)
{
    const int64_t rows = g->m - i0 < MR ? g->m - i0 : MR;
    if (rows < MR)
        memset(dst, 0, (size_t)(kc * MR) * sizeof *dst);
    if (g->ta) {
        for (int64_t p = 0; p < kc; p++)
            memcpy(dst + p * MR, g->a + (p0 + p) * g->m + i0, (size_t)rows * sizeof *dst);
    } else {
        for (int64_t i = 0; i < rows; i++)
            for (int64_t p = 0; p < kc; p++)
                dst[p * MR + i] = a_at(g, i0 + i, p0 + p);
    }
}

/* One NR-column panel of B_op columns j0.., depth p0..p0+kc: dst[p][NR]. */
static void pack_b_panel(const struct gemm_args *g, int64_t j0, int64_t p0, int64_t kc, float *dst)
{
    const int64_t cols = g->n - j0 < NR ? g->n - j0 : NR;
    if (cols < NR)
        memset(dst, 0, (size_t)(kc * NR) * sizeof *dst);
    if (!g->tb) {
        for (int64_t p = 0; p < kc; p++)
            memcpy(dst + p * NR, g->b + (p0 + p) * g->n + j0, (size_t)cols * sizeof *dst);
    } else {
        for (int64_t j = 0; j < cols; j++)
            for (int64_t p = 0; p < kc; p++)
                dst[p * NR + j] = b_at(g, p0 + p, j0 + j);
    }
}

/* ---- Blocked driver --------------------------------------------------------------------- */

/* C block rows [i0, i1) x columns [j0, j1) (j0 relative to the packed slice at jc). */
static void compute_block(const struct gemm_args *g, ukernel_fn uk, const float *apack,
                          const float *bpack, int64_t kc, int64_t jc, int64_t i0, int64_t i1,
                          int64_t j0, int64_t j1)
{
    float tile[MR * NR];
    for (int64_t j = j0; j < j1; j += NR) {
        const float *bp = bpack + (j / NR) * kc * NR;
        const int64_t cols = g->n - (jc + j) < NR ? g->n - (jc + j) : NR;
        for (int64_t i = i0; i < i1; i += MR) {
            const float *ap = apack + (i / MR) * kc * MR;
            const int64_t rows = g->m - i < MR ? g->m - i : MR;
            float *cp = g->c + i * g->n + jc + j;
            if (rows == MR && cols == NR) {
                uk(kc, ap, bp, cp, g->n);
                continue;
            }
            memset(tile, 0, sizeof tile);
            uk(kc, ap, bp, tile, NR);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t q = 0; q < cols; q++)
                    cp[r * g->n + q] += tile[r * NR + q];
        }
    }
}

static void gemm_blocked(const struct gemm_args *g, int accumulate)
{
    if (!accumulate)
        memset(g->c, 0, (size_t)(g->m * g->n) * sizeof *g->c);
    if (g->m == 0 || g->n == 0 || g->k == 0)
        return;
    const ukernel_fn uk = pick_ukernel();
    const int64_t m_pan = (g->m + MR - 1) / MR, nc_max = g->n < NC ? g->n : NC;
    const int64_t kc_max = g->k < KC ? g->k : KC;
    float *apack = af_xmalloc((size_t)(m_pan * MR * kc_max) * sizeof(float));
    float *bpack = af_xmalloc((size_t)((nc_max + NR - 1) / NR * NR * kc_max) * sizeof(float));
    const int64_t m_blk = (g->m + MC - 1) / MC;
    for (int64_t jc = 0; jc < g->n; jc += NC) {
        const int64_t nc = g->n - jc < NC ? g->n - jc : NC, n_pan = (nc + NR - 1) / NR;
        const int64_t n_blk = (nc + NB - 1) / NB;
        for (int64_t pc = 0; pc < g->k; pc += KC) {
            const int64_t kc = g->k - pc < KC ? g->k - pc : KC;
#pragma omp parallel
            {
#pragma omp for schedule(static) nowait
                for (int64_t q = 0; q < n_pan; q++)
                    pack_b_panel(g, jc + q * NR, pc, kc, bpack + q * kc * NR);
#pragma omp for schedule(static)
                for (int64_t q = 0; q < m_pan; q++)
                    pack_a_panel(g, q * MR, pc, kc, apack + q * kc * MR);
#pragma omp for schedule(dynamic, 1) collapse(2)
                for (int64_t bi = 0; bi < m_blk; bi++)
                    for (int64_t bj = 0; bj < n_blk; bj++) {
                        int64_t i1 = (bi + 1) * MC < g->m ? (bi + 1) * MC : g->m;
                        int64_t j1 = (bj + 1) * NB < nc ? (bj + 1) * NB : nc;
                        compute_block(g, uk, apack, bpack, kc, jc, bi * MC, i1, bj * NB, j1);
                    }
            }
        }
    }
    free(apack);
    free(bpack);
}

void train_gemm_nt_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate)
{
    const struct gemm_args g = {m, n, k, a, b, c, 0, 1};
    gemm_blocked(&g, accumulate);
}

void train_gemm_nn_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate)
{
    const struct gemm_args g = {m, n, k, a, b, c, 0, 0};
    gemm_blocked(&g, accumulate);
}

void train_gemm_tn_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate)
{
    const struct gemm_args g = {m, n, k, a, b, c, 1, 0};
    gemm_blocked(&g, accumulate);
}

/* ---- Dispatch --------------------------------------------------------------------------- */

/* One single-threaded product on a slice of C, with leading dimensions. */
typedef void (*slice_fn)(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                         int accumulate);

#ifdef AF_HAVE_CBLAS
static void sgemm_one(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, accumulate ? 1.0f : 0.0f, c,
                (int)ldc);
}
#endif

enum backend { BACKEND_UNKNOWN, BACKEND_AVX512, BACKEND_OPENBLAS, BACKEND_BLOCKED };

static enum backend backend_id(void)
{
    static enum backend id;
    enum backend v = __atomic_load_n(&id, __ATOMIC_ACQUIRE);
    if (v != BACKEND_UNKNOWN)
        return v;
    const char *want = getenv("AGENTFLOW_TRAIN_GEMM"); /* for comparisons */
    if (want && !strcmp(want, "blocked"))
        v = BACKEND_BLOCKED;
    else if (train_avx512_enabled() && !(want && !strcmp(want, "openblas")))
        v = BACKEND_AVX512; /* AGENTFLOW_ISA=ref|avx2 keeps it out */
    else {
#ifdef AF_HAVE_CBLAS
        /* OpenBLAS runs single-threaded inside OpenMP threads that each take a slice of C: its
         * own pthreads and OpenMP's spinning workers would otherwise fight over the cores
         * (measured: half the time in sched_yield on 2 cores). */
        openblas_set_num_threads(1);
        v = BACKEND_OPENBLAS;
#else
        v = BACKEND_BLOCKED;
#endif
    }
    __atomic_store_n(&id, v, __ATOMIC_RELEASE);
    return v;
}

/* Split C by rows (or columns, when it is wider than tall) into one slice per OpenMP thread.
 * The slices are fixed by the thread count, so results do not depend on timing; with the
 * AVX-512 kernel they do not depend on the thread count either. */
static void gemm_sliced(slice_fn fn, int64_t align, int cols_first, int ta, int tb, int64_t m,
                        int64_t n, int64_t k, const float *a, const float *b, float *c,
                        int accumulate)
{
    if (m == 0 || n == 0)
        return;
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt <= 1 || (double)m * (double)n * (double)k < 262144.0) {
        fn(ta, tb, m, n, k, a, lda, b, ldb, c, n, accumulate);
        return;
    }
    /* Column slices pack disjoint parts of B and share A; row slices would each pack all of B.
     * The AVX-512 kernel reads A unpacked, so it prefers columns while they are wide. */
    const int by_rows = cols_first ? n < 64 * nt : m >= n;
#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), cnt = omp_get_num_threads();
        const int64_t total = by_rows ? m : n;
        int64_t per = (total + cnt - 1) / cnt;
        per = (per + align - 1) / align * align;
        const int64_t i0 = (int64_t)t * per, i1 = i0 + per < total ? i0 + per : total;
        if (i0 < i1) {
            if (by_rows)
                fn(ta, tb, i1 - i0, n, k, ta ? a + i0 : a + i0 * k, lda, b, ldb, c + i0 * n, n,
                   accumulate);
            else
                fn(ta, tb, m, i1 - i0, k, a, lda, tb ? b + i0 * k : b + i0, ldb, c + i0, n,
                   accumulate);
        }
    }
}

static void gemm_dispatch(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a,
                          const float *b, float *c, int accumulate)
{
    switch (backend_id()) {
    case BACKEND_AVX512:
        gemm_sliced(train_gemm_avx512, 32, 1, ta, tb, m, n, k, a, b, c, accumulate);
        return;
#ifdef AF_HAVE_CBLAS
    case BACKEND_OPENBLAS:
        gemm_sliced(sgemm_one, 16, 0, ta, tb, m, n, k, a, b, c, accumulate);
        return;
#endif
    default: {
        const struct gemm_args g = {m, n, k, a, b, c, ta, tb};
        gemm_blocked(&g, accumulate);
    }
    }
}

void train_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate)
{
    gemm_dispatch(0, 1, m, n, k, a, b, c, accumulate);
}

void train_gemm_nn(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate)
{
    gemm_dispatch(0, 0, m, n, k, a, b, c, accumulate);
}

void train_gemm_tn(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate)
{
    gemm_dispatch(1, 0, m, n, k, a, b, c, accumulate);
}

const char *train_gemm_backend(void)
{
    static const char *const names[] = {[BACKEND_AVX512] = "avx512",
                                        [BACKEND_OPENBLAS] = "openblas",
                                        [BACKEND_BLOCKED] = "blocked"};
    return names[backend_id()];
}

void train_gemm_set_threads(int n)
{
    if (n > 0)
        omp_set_num_threads(n);
}
