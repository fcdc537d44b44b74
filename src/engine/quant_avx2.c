/*
 * quant_avx2.c - AVX2 + FMA + F16C kernels: the table of the AVX2 kernels, which takes the
 * float types from quant_avx2_float.c, Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 from quant_avx2_r8.c and
 * Q4_K / Q5_K / Q6_K from quant_avx2_k8.c (8 rows in the lanes, a packed form, the AVX-512 kernels'
 * bits), plus the attention, exp and activation kernels.
 *
 * Every function carries AF_TARGET_AVX2 (no per-file flags): the dispatcher only calls into this
 * file when __builtin_cpu_supports says the CPU has these extensions. Integer dots use the
 * sign trick (|w| * sign(x, w) through maddubs), so per-block sums are exact and only the float
 * accumulation order differs from quant_ref.c.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
/* Forces inlining so each caller gets a copy specialised on its constant type argument. */
#define AF_INLINE inline __attribute__((always_inline))

int quant_avx2_usable(void)
{
    __builtin_cpu_init();
    unsigned a, b, c, d;
    /* F16C is CPUID.1:ECX bit 29 (clang's __builtin_cpu_supports has no "f16c") */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29)))
        return 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

AF_TARGET_AVX2 static void axpy_avx2(int64_t n, float a, const float *x, float *y)
{
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                              _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* 8 floats of x at element i: F32, or F16 converted (exact) for an F16 KV cache. */
AF_TARGET_AVX2 static AF_INLINE __m256 ld8(int f16, const void *x, int64_t i)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)))
               : _mm256_loadu_ps((const float *)x + i);
}

/* Up to 4 rows x nv (<= 4) vectors of y in registers across all n terms; xs F32 or F16. With
 * pf, each term's lines 16 terms on (a KV block ahead) are requested first, as the AVX-512
 * kernel does. */
AF_TARGET_AVX2 static AF_INLINE void axr_tile_avx2(int f16, int nr, int nv, int64_t n,
                                                   const float *const *a, const void *const *xs,
                                                   float *const *y, int64_t i0, int pf)
{
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm256_loadu_ps(y[r] + i0 + 8 * v);
    for (int64_t t = 0; t < n; t++) {
        __m256 xv[4];
        if (pf && t + 16 < n) /* 32 floats: one or two lines */
            for (int v = 0; v < nv; v += f16 ? 4 : 2)
                _mm_prefetch((const char *)xs[t + 16] + (f16 ? 2 : 4) * (i0 + 8 * v), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            xv[v] = ld8(f16, xs[t], i0 + 8 * v);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m256 ab = _mm256_set1_ps(a[r][t]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm256_add_ps(acc[r][v], _mm256_mul_ps(ab, xv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            _mm256_storeu_ps(y[r] + i0 + 8 * v, acc[r][v]);
}

#define AXR_ROWS(nv)                                                                               \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        axr_tile_avx2(f16, 1, nv, n, ar, xs, yr, i, r0 == 0);                                      \
        break;                                                                                     \
    case 2:                                                                                        \
        axr_tile_avx2(f16, 2, nv, n, ar, xs, yr, i, r0 == 0);                                      \
        break;                                                                                     \
    case 3:                                                                                        \
        axr_tile_avx2(f16, 3, nv, n, ar, xs, yr, i, r0 == 0);                                      \
        break;                                                                                     \
    default:                                                                                       \
        axr_tile_avx2(f16, 4, nv, n, ar, xs, yr, i, r0 == 0);                                      \
        break;                                                                                     \
    }

AF_TARGET_AVX2 static AF_INLINE void axpy_rows_x(int f16, int64_t len, int64_t n, int64_t ng,
                                                 const float *const *a, const void *const *xs,
                                                 float *const *y)
{
    for (int64_t r0 = 0; r0 < ng; r0 += 4) {
        const int nr = ng - r0 < 4 ? (int)(ng - r0) : 4;
        const float *const *ar = a + r0;
        float *const *yr = y + r0;
        int64_t i = 0;
        for (; i + 32 <= len; i += 32)
            AXR_ROWS(4)
        for (; i + 8 <= len; i += 8)
            AXR_ROWS(1)
        /* the rows past the vectors; guarded, as the empty loop nest cost ~10 cycles a key */
        if (i < len)
            for (int r = 0; r < nr; r++)
                for (int64_t t = 0; t < n; t++)
                    for (int64_t l = i; l < len; l++)
                        yr[r][l] += ar[r][t] * (f16 ? _cvtsh_ss(((const uint16_t *)xs[t])[l])
                                                    : ((const float *)xs[t])[l]);
    }
}
#undef AXR_ROWS

AF_TARGET_AVX2 static void axpy_rows_avx2(int64_t len, int64_t n, int64_t ng, const float *const *a,
                                          const float *const *xs, float *const *y)
{
    axpy_rows_x(0, len, n, ng, a, (const void *const *)xs, y);
}

AF_TARGET_AVX2 static void axpy_rows_f16_avx2(int64_t len, int64_t n, int64_t ng,
                                              const float *const *a, const uint16_t *const *xs,
                                              float *const *y)
{
    axpy_rows_x(1, len, n, ng, a, (const void *const *)xs, y);
}

/* Up to 4 query rows x nb (<= 2) blocks of 16 positions in registers (16 accumulators) across
 * all of i; the lanes of the last block past n16 (1..16) are not written (F32 keys: nor read;
 * F16 keys are read whole, within the block's storage, and the extra lanes dropped). */
AF_TARGET_AVX2 static AF_INLINE void scores_tile_avx2(int f16, int nr, int nb, int64_t hd,
                                                      const float *const *q, const void *const *kb,
                                                      float *const *sc, int64_t t0, int n16,
                                                      const void *const *kn)
{
    __m256 acc[4][4];
    __m256i mask[2];
    for (int h = 0; h < 2; h++) {
        const int n = n16 - 8 * h < 0 ? 0 : n16 - 8 * h > 8 ? 8 : n16 - 8 * h;
        mask[h] =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 2 * nb; v++)
            acc[r][v] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i++) {
        if (kn) /* the next tile's 2 key blocks, line by line (the AVX-512 kernel's reason) */
#pragma GCC unroll 2
            for (int v = 0; v < 2; v++)
                _mm_prefetch((const char *)kn[v] + (f16 ? 32 : 64) * i, _MM_HINT_T0);
        __m256 kv[4];
#pragma GCC unroll 4
        for (int v = 0; v < 2 * nb; v++) {
            const int64_t o = i * 16 + 8 * (v % 2);
            kv[v] = f16 || v / 2 != nb - 1
                        ? ld8(f16, kb[v / 2], o)
                        : _mm256_maskload_ps((const float *)kb[v / 2] + o, mask[v % 2]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m256 qb = _mm256_set1_ps(q[r][i]);
#pragma GCC unroll 4
            for (int v = 0; v < 2 * nb; v++)
                acc[r][v] = _mm256_add_ps(acc[r][v], _mm256_mul_ps(qb, kv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < 2 * nb; v++) {
            float *o = sc[r] + t0 + 8 * v;
            if (v / 2 == nb - 1)
                _mm256_maskstore_ps(o, mask[v % 2], acc[r][v]);
            else
                _mm256_storeu_ps(o, acc[r][v]);
        }
}

#define SCORES_ROWS(nb, n16)                                                                       \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        scores_tile_avx2(f16, 1, nb, hd, qg, kb + t / 16, sg, t, n16, kn);                         \
        break;                                                                                     \
    case 2:                                                                                        \
        scores_tile_avx2(f16, 2, nb, hd, qg, kb + t / 16, sg, t, n16, kn);                         \
        break;                                                                                     \
    case 3:                                                                                        \
        scores_tile_avx2(f16, 3, nb, hd, qg, kb + t / 16, sg, t, n16, kn);                         \
        break;                                                                                     \
    default:                                                                                       \
        scores_tile_avx2(f16, 4, nb, hd, qg, kb + t / 16, sg, t, n16, kn);                         \
        break;                                                                                     \
    }

AF_TARGET_AVX2 static AF_INLINE void scores_x(int f16, int64_t len, int64_t hd, int64_t ng,
                                              const float *const *q, const void *const *kb,
                                              float *const *sc)
{
    for (int64_t g0 = 0; g0 < ng; g0 += 4) {
        const int nr = ng - g0 < 4 ? (int)(ng - g0) : 4;
        const float *const *qg = q + g0;
        float *const *sg = sc + g0;
        int64_t t = 0;
        for (; t + 32 <= len; t += 32) {
            const void *next[2]; /* requested by the first rows only */
            const void *const *kn = g0 == 0 ? quant_next_tile(kb, len, t + 32, 2, next) : NULL;
            SCORES_ROWS(2, 16)
        }
        for (; t < len; t += 16) {
            const void *const *kn = NULL;
            const int n16 = len - t >= 16 ? 16 : (int)(len - t);
            SCORES_ROWS(1, n16)
        }
    }
}
#undef SCORES_ROWS

AF_TARGET_AVX2 static void scores_avx2(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                                       const float *const *kb, float *const *sc)
{
    scores_x(0, len, hd, ng, q, (const void *const *)kb, sc);
}

AF_TARGET_AVX2 static void scores_f16_avx2(int64_t len, int64_t hd, int64_t ng,
                                           const float *const *q, const uint16_t *const *kb,
                                           float *const *sc)
{
    scores_x(1, len, hd, ng, q, (const void *const *)kb, sc);
}

const struct quant_kernels quant_kernels_avx2 = {
    .name = "avx2",
    .scores = scores_avx2,
    .scores_f16 = scores_f16_avx2,
    .axpy = axpy_avx2,
    .axpy_rows = axpy_rows_avx2,
    .axpy_rows_f16 = axpy_rows_f16_avx2,
    .exp = quant_exp_avx2,
    .exp_sum = quant_exp_sum_avx2,
    .silu_mul = quant_silu_mul_avx2,
    .scale_max = quant_scale_max_avx2,
    .scale = quant_scale_avx2,
    .vec_dot =
        {
            [GGML_TYPE_F32] = quant_avx2_dot_f32,
            [GGML_TYPE_F16] = quant_avx2_dot_f16,
            [GGML_TYPE_BF16] = quant_avx2_dot_bf16,
            [GGML_TYPE_Q4_0] = quant_avx2_dot_q4_0,
            [GGML_TYPE_Q4_1] = quant_avx2_dot_q4_1,
            [GGML_TYPE_Q5_0] = quant_avx2_dot_q5_0,
            [GGML_TYPE_Q5_1] = quant_avx2_dot_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx2_dot_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx2_dot_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx2_dot_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_dot_q6_k,
        },
    .matmul =
        {
            [GGML_TYPE_F32] = quant_avx2_matmul_f32,
            [GGML_TYPE_F16] = quant_avx2_matmul_f16,
            [GGML_TYPE_BF16] = quant_avx2_matmul_bf16,
            [GGML_TYPE_Q4_0] = quant_avx2_matmul_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_matmul_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx2_matmul_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx2_matmul_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx2_matmul_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx2_matmul_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx2_matmul_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_matmul_q6_k,
        },
    /* quant_avx2_r8.c: 8 rows in the lanes, the AVX-512 kernels' chain (a lone token's bits are
     * a batch's) */
    .m1_invariant = {[GGML_TYPE_Q8_0] = 1,
                     [GGML_TYPE_Q4_0] = 1,
                     [GGML_TYPE_Q5_0] = 1,
                     [GGML_TYPE_Q4_1] = 1,
                     [GGML_TYPE_Q5_1] = 1,
                     [GGML_TYPE_Q4_K] = 1,
                     [GGML_TYPE_Q5_K] = 1,
                     [GGML_TYPE_Q6_K] = 1},
    .pack =
        {
            [GGML_TYPE_Q8_0] = quant_avx2_pack_q8_0,
            [GGML_TYPE_Q4_0] = quant_avx2_pack_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_pack_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx2_pack_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx2_pack_q5_1,
            [GGML_TYPE_Q4_K] = quant_avx2_pack_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx2_pack_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_pack_q6_k,
        },
    .matmul_packed =
        {
            [GGML_TYPE_Q8_0] = quant_avx2_matmul_packed_q8_0,
            [GGML_TYPE_Q4_0] = quant_avx2_matmul_packed_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_matmul_packed_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx2_matmul_packed_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx2_matmul_packed_q5_1,
            [GGML_TYPE_Q4_K] = quant_avx2_matmul_packed_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx2_matmul_packed_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_matmul_packed_q6_k,
        },
    .act_q8_0 = quant_avx2_act_q8_0,
    .act_q8_k = quant_avx2_act_q8_k,
    .act_f16 = quant_avx2_act_f16,
    .act_bf16 = quant_avx2_act_bf16,
};

#else

int quant_avx2_usable(void)
{
    return 0;
}

const struct quant_kernels quant_kernels_avx2 = {.name = "avx2"};

#endif
