/*
 * quant_avx2_float.c - AVX2 + FMA + F16C kernels of the float weight types: the F32 / F16 / BF16
 * dots (decode), and their matmuls of prefill.
 *
 * The prefill matmul holds 6 weight rows x 16 tokens in twelve registers, tokens in the lanes:
 * the tokens are packed once per call as [k][16] panels (F32), and each weight is broadcast
 * from its row. Every output is then one chain of FMAs over k in order, from 0: its bits do
 * not depend on the batch size, the token's place in the batch, the row split or the thread
 * count (the prefix cache and the thread-count tests rely on that), and the scalar fmaf chain
 * reproduces them. The decode dot keeps four accumulators instead, so m = 1 and m >= 2 differ
 * in the last bits, as they do for the quantised types.
 *
 * F16 activations arrive rounded to F16 (as llama.cpp rounds them); converting them to F32 is
 * exact, and so is the product of two F16 values in F32: only the summation order differs
 * from quant_ref.c.
 */
#include <stdlib.h>
#include <string.h>

#include "core/simd_transpose.h"
#include "core/xalloc.h"
#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

enum { GEMM_R = 6, GEMM_T = 16 };
/* Bytes of weights a row block keeps in L2 while every token panel passes over it. */
#define ROW_BLOCK_BYTES (256u * 1024u)

AF_TARGET_AVX2 static AF_INLINE float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AF_TARGET_AVX2 static AF_INLINE __m256 load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

AF_TARGET_AVX2 static AF_INLINE __m256 load_bf16(const uint16_t *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* Eight weights at element i of a row: F32 (f16 == 0) or F16. */
AF_TARGET_AVX2 static AF_INLINE __m256 load_w(int f16, const void *w, int64_t i)
{
    return f16 ? load_f16((const uint16_t *)w + i) : _mm256_loadu_ps((const float *)w + i);
}

AF_TARGET_AVX2 static AF_INLINE float w_at(int f16, const void *w, int64_t i)
{
    return f16 ? _cvtsh_ss(((const uint16_t *)w)[i]) : ((const float *)w)[i];
}

/* The dot of a weight row (F32 or F16) with an F32 row; the order every kernel here follows. */
AF_TARGET_AVX2 static AF_INLINE float dot_wx(int f16, int64_t n, const void *w, const float *b)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_w(f16, w, i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(load_w(f16, w, i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_w(f16, w, i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_w(f16, w, i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_w(f16, w, i), _mm256_loadu_ps(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += w_at(f16, w, i) * b[i];
    return s;
}

AF_TARGET_AVX2 float quant_avx2_dot_f32(int64_t n, const void *w, const void *x)
{
    return dot_wx(0, n, w, x);
}

/* Same order as dot_wx with both sides F16: conversions are exact, so the bits match. */
AF_TARGET_AVX2 float quant_avx2_dot_f16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16(a + i), load_f16(b + i), s0);
        s1 = _mm256_fmadd_ps(load_f16(a + i + 8), load_f16(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16(a + i + 16), load_f16(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16(a + i + 24), load_f16(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_f16(a + i), load_f16(b + i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += _cvtsh_ss(a[i]) * _cvtsh_ss(b[i]);
    return s;
}

AF_TARGET_AVX2 float quant_avx2_dot_bf16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(load_bf16(a + i), load_bf16(b + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16(a + i + 8), load_bf16(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_bf16(a + i), load_bf16(b + i), s0);
    float s = hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++)
        s += quant_bf16_to_f32(a[i]) * quant_bf16_to_f32(b[i]);
    return s;
}

/* F16 to F32, n values (exact). */
AF_TARGET_AVX2 static void f16_to_f32(const uint16_t *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, load_f16(src + i));
    for (; i < n; i++)
        dst[i] = _cvtsh_ss(src[i]);
}

/* A row of n values of type t (F32, F16 or BF16) as F32 (exact). */
AF_TARGET_AVX2 static void row_to_f32(uint32_t t, const void *src, float *dst, int64_t n)
{
    if (t == GGML_TYPE_F16) {
        f16_to_f32(src, dst, n);
    } else if (t == GGML_TYPE_BF16) {
        const uint16_t *b = src;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(dst + i, load_bf16(b + i));
        for (; i < n; i++)
            dst[i] = quant_bf16_to_f32(b[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    }
}

/* Packs tokens [j0, j0 + nt) (nt <= 16) of X into p[k][16] as F32, zero past nt. */
AF_TARGET_AVX2 static void pack_panel(uint32_t type, const char *X, size_t xbytes, int64_t k,
                                      int64_t j0, int64_t nt, float *p)
{
    float row[GEMM_T * 64];
    for (int64_t k0 = 0; k0 < k; k0 += 64) {
        const int64_t kc = k - k0 < 64 ? k - k0 : 64;
        for (int64_t t = 0; t < GEMM_T; t++) {
            float *d = row + t * 64;
            if (t >= nt) {
                memset(d, 0, 64 * sizeof *d);
                continue;
            }
            const char *x = X + (size_t)(j0 + t) * xbytes;
            row_to_f32(type, x + (size_t)k0 * (type == GGML_TYPE_F32 ? 4 : 2), d, kc);
        }
        int64_t i = 0;
        for (; i + 8 <= kc; i += 8)
            for (int t = 0; t < GEMM_T; t += 8)
                af_transpose8x8(row + t * 64 + i, 64, p + (k0 + i) * GEMM_T + t, GEMM_T);
        for (; i < kc; i++)
            for (int t = 0; t < GEMM_T; t++)
                p[(k0 + i) * GEMM_T + t] = row[t * 64 + i];
    }
}

/* nr (<= 6) weight rows (F32, ws floats apart) x one packed panel of 16 tokens, over all k.
 * out[t * ldo + r] for t < nt. */
AF_TARGET_AVX2 static AF_INLINE void kernel(int nr, const float *w, size_t ws, int64_t k,
                                            const float *p, int64_t nt, float *out, int64_t ldo)
{
    __m256 acc[GEMM_R][2];
#pragma GCC unroll 6
    for (int r = 0; r < nr; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i++, p += GEMM_T) {
        const __m256 x0 = _mm256_load_ps(p), x1 = _mm256_load_ps(p + 8);
#pragma GCC unroll 6
        for (int r = 0; r < nr; r++) {
            const __m256 wb = _mm256_broadcast_ss(w + (size_t)r * ws + i);
            acc[r][0] = _mm256_fmadd_ps(wb, x0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(wb, x1, acc[r][1]);
        }
    }
    float tile[GEMM_R][GEMM_T];
#pragma GCC unroll 6
    for (int r = 0; r < nr; r++) {
        _mm256_storeu_ps(tile[r], acc[r][0]);
        _mm256_storeu_ps(tile[r] + 8, acc[r][1]);
    }
    for (int64_t t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            out[t * ldo + r] = tile[r][t];
}

/* Rows [q0, q0 + nq) of F32 weights against every packed panel. */
AF_TARGET_AVX2 static void row_block(const float *w, size_t ws, int64_t k, int64_t nq,
                                     const float *panels, int64_t m, float *out, int64_t ldo)
{
    for (int64_t j0 = 0; j0 < m; j0 += GEMM_T) {
        const float *p = panels + (size_t)(j0 / GEMM_T) * (size_t)k * GEMM_T;
        const int64_t nt = m - j0 < GEMM_T ? m - j0 : GEMM_T;
        float *o = out + j0 * ldo;
        int64_t r = 0;
        for (; r + GEMM_R <= nq; r += GEMM_R)
            kernel(GEMM_R, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
        switch (nq - r) {
        case 5:
            kernel(5, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
            break;
        case 4:
            kernel(4, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
            break;
        case 3:
            kernel(3, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
            break;
        case 2:
            kernel(2, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
            break;
        case 1:
            kernel(1, w + (size_t)r * ws, ws, k, p, nt, o + r, ldo);
            break;
        default:
            break;
        }
    }
}

/* The prefill matmul of F32, F16 and BF16 weights (activations of the same type): tokens
 * packed once, weight rows in blocks of about ROW_BLOCK_BYTES (F16 / BF16 rows converted to
 * F32 a block at a time). */
AF_TARGET_AVX2 static void gemm(uint32_t type, const char *W, size_t wbytes, int64_t k,
                                const char *X, size_t xbytes, int64_t m, float *out, int64_t ldo,
                                int64_t r0, int64_t r1)
{
    const int64_t np = (m + GEMM_T - 1) / GEMM_T;
    float *panels = af_xaligned(32, (size_t)np * (size_t)k * GEMM_T * sizeof(float));
    for (int64_t j0 = 0; j0 < m; j0 += GEMM_T)
        pack_panel(type, X, xbytes, k, j0, m - j0 < GEMM_T ? m - j0 : GEMM_T,
                   panels + (size_t)(j0 / GEMM_T) * (size_t)k * GEMM_T);
    int64_t rb = (int64_t)(ROW_BLOCK_BYTES / ((size_t)k * sizeof(float))) / GEMM_R * GEMM_R;
    rb = rb < GEMM_R ? GEMM_R : rb;
    const int convert = type != GGML_TYPE_F32;
    float *wf = convert ? af_xmalloc((size_t)rb * (size_t)k * sizeof *wf) : NULL;
    for (int64_t q0 = r0; q0 < r1; q0 += rb) {
        const int64_t nq = r1 - q0 < rb ? r1 - q0 : rb;
        const float *w = (const float *)(W + (size_t)q0 * wbytes);
        size_t ws = wbytes / sizeof(float);
        if (convert) {
            for (int64_t r = 0; r < nq; r++)
                row_to_f32(type, W + (size_t)(q0 + r) * wbytes, wf + (size_t)r * (size_t)k, k);
            w = wf;
            ws = (size_t)k;
        }
        row_block(w, ws, k, nq, panels, m, out + q0, ldo);
    }
    free(wf);
    free(panels);
}

/* ---- Small batches (2..SMALL_M tokens: continuous batching's decode step) -----------------
 * gemm puts 16 tokens in the lanes and converts F16 / BF16 rows to F32 a block at a time, so a
 * batch of 2 used 2 of 16 lanes and paid the conversion (bench/quant --isa avx2 -m 2: F16 11.9
 * GFLOP/s, against 45 for one token's dot). Here 8 rows go in the lanes instead, read in place:
 * 8 elements of 8 rows are loaded (converted), transposed in registers, and each token adds
 * element i times its x[i] (broadcast) in one FMA. Every output is the same one chain of FMAs
 * over k in order from +0 as in gemm, so the bits are gemm's. */
enum { SMALL_M = 8 };

/* Eight elements at i of row w (F32, F16 or BF16) as F32 (exact). */
AF_TARGET_AVX2 static AF_INLINE __m256 load8(uint32_t t, const char *w, int64_t i)
{
    if (t == GGML_TYPE_F16)
        return load_f16((const uint16_t *)w + i);
    if (t == GGML_TYPE_BF16)
        return load_bf16((const uint16_t *)w + i);
    return _mm256_loadu_ps((const float *)w + i);
}

AF_TARGET_AVX2 static AF_INLINE float load1(uint32_t t, const char *w, int64_t i)
{
    if (t == GGML_TYPE_F16)
        return _cvtsh_ss(((const uint16_t *)w)[i]);
    if (t == GGML_TYPE_BF16)
        return quant_bf16_to_f32(((const uint16_t *)w)[i]);
    return ((const float *)w)[i];
}

/* T[c] lane r = a[r] lane c (8 x 8, as af_transpose8x8, in registers). */
AF_TARGET_AVX2 static AF_INLINE void transpose8(const __m256 a[8], __m256 T[8])
{
    __m256 u[8], v[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(a[i], a[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        v[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
        v[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
        v[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        v[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        T[i] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x20);
        T[i + 4] = _mm256_permute2f128_ps(v[i], v[i + 4], 0x31);
    }
}

/* Rows rp[0..7] (nr real, the rest repeat the last) x nc tokens xf[c * k + i] (F32) over all
 * of k into out[c * ldo + j], j < nr. */
AF_TARGET_AVX2 static AF_INLINE void small_rows(uint32_t t, int nc, const char *const *rp, int nr,
                                                int64_t k, const float *xf, float *out, int64_t ldo)
{
    __m256 acc[SMALL_M];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m256 a[8], T[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            a[r] = load8(t, rp[r], i);
        transpose8(a, T);
#pragma GCC unroll 8
        for (int e = 0; e < 8; e++)
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                acc[c] = _mm256_fmadd_ps(T[e], _mm256_broadcast_ss(xf + c * k + i + e), acc[c]);
    }
    for (; i < k; i++) {
        float col[8];
        for (int r = 0; r < 8; r++)
            col[r] = load1(t, rp[r], i);
        const __m256 T = _mm256_loadu_ps(col);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc[c] = _mm256_fmadd_ps(T, _mm256_broadcast_ss(xf + c * k + i), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        float o[8];
        _mm256_storeu_ps(o, acc[c]);
        memcpy(out + c * ldo, o, (size_t)nr * sizeof *o);
    }
}

AF_TARGET_AVX2 static void small_m(uint32_t t, const char *W, size_t wbytes, int64_t k,
                                   const char *X, size_t xbytes, int64_t m, float *out, int64_t ldo,
                                   int64_t r0, int64_t r1)
{
    float *xf = af_xmalloc((size_t)m * (size_t)k * sizeof *xf);
    for (int64_t j = 0; j < m; j++)
        row_to_f32(t, X + (size_t)j * xbytes, xf + j * k, k);
    for (int64_t r = r0; r < r1; r += 8) {
        const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
        const char *rp[8];
        for (int j = 0; j < 8; j++)
            rp[j] = W + (size_t)(r + (j < nr ? j : nr - 1)) * wbytes;
#define SMALL(n) small_rows(t, n, rp, nr, k, xf, out + r, ldo)
        switch (m) { /* the token count a constant, so that the sums stay in registers */
        case 2:
            SMALL(2);
            break;
        case 3:
            SMALL(3);
            break;
        case 4:
            SMALL(4);
            break;
        case 5:
            SMALL(5);
            break;
        case 6:
            SMALL(6);
            break;
        case 7:
            SMALL(7);
            break;
        default:
            SMALL(8);
            break;
        }
#undef SMALL
    }
    free(xf);
}

/* Prefill through gemm, small batches through small_m; decode through the dots (F16: against
 * the token converted to F32 once, the same bits as quant_avx2_dot_f16). */
AF_TARGET_AVX2 static void matmul_float(uint32_t type, const void *W, size_t wbytes, int64_t k,
                                        const void *X, size_t xbytes, int64_t m, float *out,
                                        int64_t ldo, int64_t r0, int64_t r1)
{
    if (m >= 2 && m <= SMALL_M) {
        small_m(type, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    if (m >= 2) {
        gemm(type, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    float *xf = NULL;
    if (type == GGML_TYPE_F16) {
        xf = af_xmalloc((size_t)k * sizeof *xf);
        f16_to_f32(X, xf, k);
    }
    for (int64_t r = r0; r < r1; r++) {
        const char *w = (const char *)W + (size_t)r * wbytes;
        out[r] = type == GGML_TYPE_BF16 ? quant_avx2_dot_bf16(k, w, X)
                 : xf                   ? dot_wx(1, k, w, xf)
                                        : dot_wx(0, k, w, X);
    }
    free(xf);
}

AF_TARGET_AVX2 void quant_avx2_matmul_f32(const void *W, size_t wbytes, int64_t k, const void *X,
                                          size_t xbytes, int64_t m, float *out, int64_t ldo,
                                          int64_t r0, int64_t r1)
{
    matmul_float(GGML_TYPE_F32, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX2 void quant_avx2_matmul_f16(const void *W, size_t wbytes, int64_t k, const void *X,
                                          size_t xbytes, int64_t m, float *out, int64_t ldo,
                                          int64_t r0, int64_t r1)
{
    matmul_float(GGML_TYPE_F16, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX2 void quant_avx2_matmul_bf16(const void *W, size_t wbytes, int64_t k, const void *X,
                                           size_t xbytes, int64_t m, float *out, int64_t ldo,
                                           int64_t r0, int64_t r1)
{
    matmul_float(GGML_TYPE_BF16, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

#endif
