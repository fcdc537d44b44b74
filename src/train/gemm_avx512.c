/*
 * gemm_avx512.c - the training matmuls on AVX-512 (see gemm.h), single-threaded; gemm.c splits
 * C between threads. A 12x32 micro-kernel (24 zmm accumulators) broadcasts A straight from
 * the caller's matrix, row- or column-major, so A is never packed: its 12 rows x KC fit L1 and
 * are reused across every 32-column panel. B is packed into [k][32] panels (zero-padded), once
 * per (KC x NC) block, and reused by every 12-row tile, unless it is row-major and narrow, when
 * the kernel reads it in place. Edge rows go through a zero-padded copy of A, edge columns
 * through load and store masks.
 *
 * Every output is one FMA chain over k in order within each KC block, added into C block by
 * block: the same bits whatever the row or column split, so the thread count does not change
 * the result.
 */
#include "train/gemm.h"

#include "core/simd_transpose.h"
#include "train/scratch.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AF_TARGET_AVX512 __attribute__((target("avx512f")))

enum { MR = 12, NR = 32, KC = 256, NC = 512, DIRECT_MAX = 256 };

/* Lanes of a 32-column panel's two halves that hold one of its `cols` columns. */
static inline void panel_masks(int64_t cols, __mmask16 *m0, __mmask16 *m1)
{
    *m0 = (__mmask16)(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    *m1 = (__mmask16)(cols >= 32 ? 0xFFFF : cols > 16 ? (1u << (cols - 16)) - 1 : 0);
}

/* c[rows][ldc] (+)= A(12 x kc) . bp (kc x 32); A(i, p) = a[i * rs + p * cs]. */
AF_TARGET_AVX512 static inline __attribute__((always_inline)) void
kernel_12x32(int64_t kc, const float *a, int64_t rs, int64_t cs, const float *bp, int64_t bs,
             float *c, int64_t ldc, int rows, __mmask16 m0, __mmask16 m1, int add)
{
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++, bp += bs) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp), b1 = _mm512_maskz_loadu_ps(m1, bp + 16);
        const float *ap = a + p * cs;
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            const __m512 x = _mm512_set1_ps(ap[i * rs]);
            acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= rows)
            break;
        float *ci = c + i * ldc;
        __m512 r0 = acc[i][0], r1 = acc[i][1];
        if (add) {
            r0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, ci), r0);
            r1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, m0, r0);
        _mm512_mask_storeu_ps(ci + 16, m1, r1);
    }
}

/* The two strides as constants, so each form gets its own addressing. */
AF_TARGET_AVX512 static void kernel_rowmajor(int64_t kc, const float *a, int64_t lda,
                                             const float *bp, int64_t bs, float *c, int64_t ldc,
                                             int rows, __mmask16 m0, __mmask16 m1, int add)
{
    kernel_12x32(kc, a, lda, 1, bp, bs, c, ldc, rows, m0, m1, add);
}

AF_TARGET_AVX512 static void kernel_colmajor(int64_t kc, const float *a, int64_t lda,
                                             const float *bp, int64_t bs, float *c, int64_t ldc,
                                             int rows, __mmask16 m0, __mmask16 m1, int add)
{
    kernel_12x32(kc, a, 1, lda, bp, bs, c, ldc, rows, m0, m1, add);
}

/* B_op rows p0..p0+kc, columns j0..j0+nc into [nc/32][kc][32] panels, zero-padded. tb: B is
 * stored [n][k]. */
AF_TARGET_AVX512 static void pack_b(int tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                                    int64_t j0, int64_t nc, float *dst)
{
    for (int64_t j = 0; j < nc; j += NR, dst += kc * NR) {
        const int64_t cols = nc - j < NR ? nc - j : NR;
        if (!tb) {
            __mmask16 m0, m1;
            panel_masks(cols, &m0, &m1);
            for (int64_t p = 0; p < kc; p++) {
                const float *src = b + (p0 + p) * ldb + j0 + j;
                _mm512_storeu_ps(dst + p * NR, _mm512_maskz_loadu_ps(m0, src));
                _mm512_storeu_ps(dst + p * NR + 16, _mm512_maskz_loadu_ps(m1, src + 16));
            }
            continue;
        }
        /* Transposing: each stored row j gives one column of the panel, 8x8 blocks at a time. */
        if (cols < NR)
            memset(dst, 0, (size_t)(kc * NR) * sizeof *dst);
        const float *src = b + (j0 + j) * ldb + p0;
        int64_t q = 0;
        for (; q + 8 <= cols; q += 8) {
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8)
                af_transpose8x8(src + q * ldb + p, ldb, dst + p * NR + q, NR);
            for (; p < kc; p++)
                for (int64_t r = 0; r < 8; r++)
                    dst[p * NR + q + r] = src[(q + r) * ldb + p];
        }
        for (; q < cols; q++)
            for (int64_t p = 0; p < kc; p++)
                dst[p * NR + q] = src[q * ldb + p];
    }
}

/* C[m][ldc] (+)= A_op (m x k) . B_op (k x n). ta: A stored [k][m] (lda m-wise), else [m][k];
 * tb: B stored [n][k], else [k][n]. */
AF_TARGET_AVX512 void train_gemm_avx512(int ta, int tb, int64_t m, int64_t n, int64_t k,
                                        const float *a, int64_t lda, const float *b, int64_t ldb,
                                        float *c, int64_t ldc, int accumulate)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        if (!accumulate)
            for (int64_t i = 0; i < m; i++)
                memset(c + i * ldc, 0, (size_t)n * sizeof *c);
        return;
    }
    const int64_t kc_max = k < KC ? k : KC, nc_max = n < NC ? n : NC;
    float *bpack = train_scratch(TRAIN_SCRATCH_GEMM,
                                 (size_t)(((nc_max + NR - 1) / NR * NR) * kc_max + MR * kc_max));
    float *aedge = bpack + ((nc_max + NR - 1) / NR * NR) * kc_max;
    /* Narrow row-major B is read in place (its panel rows sit close together); wide rows are
     * a page apart, and their panel is worth packing. */
    const int direct = !tb && ldb <= DIRECT_MAX;
    for (int64_t jc = 0; jc < n; jc += NC) {
        const int64_t nc = n - jc < NC ? n - jc : NC;
        for (int64_t pc = 0; pc < k; pc += KC) {
            const int64_t kc = k - pc < KC ? k - pc : KC;
            const int add = accumulate || pc > 0;
            if (!direct)
                pack_b(tb, b, ldb, pc, kc, jc, nc, bpack);
            for (int64_t i = 0; i < m; i += MR) {
                const int rows = m - i < MR ? (int)(m - i) : MR;
                const float *ai = ta ? a + pc * lda + i : a + i * lda + pc;
                const float *edge = NULL;
                if (rows < MR) { /* [kc][MR] zero-padded copy of the last rows */
                    memset(aedge, 0, (size_t)(kc * MR) * sizeof *aedge);
                    for (int64_t p = 0; p < kc; p++)
                        for (int r = 0; r < rows; r++)
                            aedge[p * MR + r] = ta ? ai[p * lda + r] : ai[r * lda + p];
                    edge = aedge;
                }
                for (int64_t j = 0; j < nc; j += NR) {
                    const int64_t cols = nc - j < NR ? nc - j : NR;
                    __mmask16 m0, m1;
                    panel_masks(cols, &m0, &m1);
                    const float *bp = direct ? b + pc * ldb + jc + j : bpack + (j / NR) * kc * NR;
                    const int64_t bs = direct ? ldb : NR;
                    float *cp = c + i * ldc + jc + j;
                    if (edge)
                        kernel_colmajor(kc, edge, MR, bp, bs, cp, ldc, rows, m0, m1, add);
                    else if (ta)
                        kernel_colmajor(kc, ai, lda, bp, bs, cp, ldc, rows, m0, m1, add);
                    else
                        kernel_rowmajor(kc, ai, lda, bp, bs, cp, ldc, rows, m0, m1, add);
                }
            }
        }
    }
}

int train_gemm_has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#else
void train_gemm_avx512(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate)
{
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb;
    (void)c, (void)ldc, (void)accumulate;
    abort(); /* never dispatched: train_gemm_has_avx512() is 0 */
}

int train_gemm_has_avx512(void)
{
    return 0;
}
#endif
