/*
 * quant_avx512.c - the AVX-512 kernel table, and its attention kernels (the scores against the
 * cached keys and the sums of value rows, 16 lanes). The Q8_0 / Q4_0 / Q5_0 dots and matmuls are
 * in quant_avx512_r16.c (16 weight rows in the lanes: every batch size has the one-token bits), the
 * float types' prefill matmuls in quant_avx512_float.c and the K-quants' in quant_avx512_k.c (both
 * with the AVX2 kernels' bits); what has no entry here falls through to the AVX2 kernels
 * (quant_dispatch.c).
 *
 * Every function carries AF_TARGET_AVX512 (no per-file flags). Selected only when
 * __builtin_cpu_supports reports avx512f, avx512bw, avx512vl and avx512vnni.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
/* Forces inlining so each caller gets a copy specialised on its constant arguments. */
#define AF_INLINE inline __attribute__((always_inline))

int quant_avx512_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           quant_avx2_usable();
}

/* 16 floats of x at element i: F32, or F16 converted (exact) for an F16 KV cache. */
AF_TARGET_AVX512 static AF_INLINE __m512 ld16(int f16, const void *x, int64_t i)
{
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i)))
               : _mm512_loadu_ps((const float *)x + i);
}

/* Up to 4 rows x nv (<= 4) vectors of y in registers across all n terms; a multiply, then an
 * add, as every ISA's axpy; xs F32 or F16. With pf, each term's lines 16 terms on (a KV block
 * of values ahead) are requested from memory first: the value rows of a decode step come from
 * DRAM, 4 KB a block and head, too short a stream for the hardware prefetcher. */
AF_TARGET_AVX512 static AF_INLINE void axr_tile_avx512(int f16, int nr, int nv, int64_t n,
                                                       const float *const *a, const void *const *xs,
                                                       float *const *y, int64_t i0, int pf)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_loadu_ps(y[r] + i0 + 16 * v);
    for (int64_t t = 0; t < n; t++) {
        __m512 xv[4];
        if (pf && t + 16 < n)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                _mm_prefetch((const char *)xs[t + 16] + (f16 ? 2 : 4) * (i0 + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            xv[v] = ld16(f16, xs[t], i0 + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m512 ab = _mm512_set1_ps(a[r][t]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(ab, xv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(y[r] + i0 + 16 * v, acc[r][v]);
}

#define AXR_ROWS(nv)                                                                               \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        axr_tile_avx512(f16, 1, nv, n, ar, xs, yr, i, r0 == 0);                                    \
        break;                                                                                     \
    case 2:                                                                                        \
        axr_tile_avx512(f16, 2, nv, n, ar, xs, yr, i, r0 == 0);                                    \
        break;                                                                                     \
    case 3:                                                                                        \
        axr_tile_avx512(f16, 3, nv, n, ar, xs, yr, i, r0 == 0);                                    \
        break;                                                                                     \
    default:                                                                                       \
        axr_tile_avx512(f16, 4, nv, n, ar, xs, yr, i, r0 == 0);                                    \
        break;                                                                                     \
    }

AF_TARGET_AVX512 static AF_INLINE void axpy_rows_x(int f16, int64_t len, int64_t n, int64_t ng,
                                                   const float *const *a, const void *const *xs,
                                                   float *const *y)
{
    for (int64_t r0 = 0; r0 < ng; r0 += 4) {
        const int nr = ng - r0 < 4 ? (int)(ng - r0) : 4;
        const float *const *ar = a + r0;
        float *const *yr = y + r0;
        int64_t i = 0;
        for (; i + 64 <= len; i += 64)
            AXR_ROWS(4)
        for (; i + 16 <= len; i += 16)
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

AF_TARGET_AVX512 static void axpy_rows_avx512(int64_t len, int64_t n, int64_t ng,
                                              const float *const *a, const float *const *xs,
                                              float *const *y)
{
    axpy_rows_x(0, len, n, ng, a, (const void *const *)xs, y);
}

AF_TARGET_AVX512 static void axpy_rows_f16_avx512(int64_t len, int64_t n, int64_t ng,
                                                  const float *const *a, const uint16_t *const *xs,
                                                  float *const *y)
{
    axpy_rows_x(1, len, n, ng, a, (const void *const *)xs, y);
}

/* Up to 4 query rows x nb (<= 4) blocks of 16 positions in registers (16 accumulators) across
 * all of i; the lanes of the last block outside `last` are neither read nor written (F16 keys:
 * masked lanes load as 0). kn (or NULL): the next tile's 4 key blocks, requested from memory
 * line by line as this tile reads its own (a block and head is 4 KB, too short a stream for
 * the hardware prefetcher). */
AF_TARGET_AVX512 static AF_INLINE void scores_tile_avx512(int f16, int nr, int nb, int64_t hd,
                                                          const float *const *q,
                                                          const void *const *kb, float *const *sc,
                                                          int64_t t0, __mmask16 last,
                                                          const void *const *kn)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < hd; i++) {
        if (kn)
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++)
                _mm_prefetch((const char *)kn[v] + (f16 ? 32 : 64) * i, _MM_HINT_T0);
        __m512 kv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++)
            kv[v] = v != nb - 1 ? ld16(f16, kb[v], i * 16)
                    : f16       ? _mm512_cvtph_ps(
                                      _mm256_maskz_loadu_epi16(last, (const uint16_t *)kb[v] + i * 16))
                          : _mm512_maskz_loadu_ps(last, (const float *)kb[v] + i * 16);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m512 qb = _mm512_set1_ps(q[r][i]);
#pragma GCC unroll 4
            for (int v = 0; v < nb; v++)
                acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(qb, kv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++) {
            if (v == nb - 1)
                _mm512_mask_storeu_ps(sc[r] + t0 + 16 * v, last, acc[r][v]);
            else
                _mm512_storeu_ps(sc[r] + t0 + 16 * v, acc[r][v]);
        }
}

#define SCORES_ROWS(nb, last)                                                                      \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        scores_tile_avx512(f16, 1, nb, hd, qg, kb + t / 16, sg, t, last, kn);                      \
        break;                                                                                     \
    case 2:                                                                                        \
        scores_tile_avx512(f16, 2, nb, hd, qg, kb + t / 16, sg, t, last, kn);                      \
        break;                                                                                     \
    case 3:                                                                                        \
        scores_tile_avx512(f16, 3, nb, hd, qg, kb + t / 16, sg, t, last, kn);                      \
        break;                                                                                     \
    default:                                                                                       \
        scores_tile_avx512(f16, 4, nb, hd, qg, kb + t / 16, sg, t, last, kn);                      \
        break;                                                                                     \
    }

AF_TARGET_AVX512 static AF_INLINE void scores_x(int f16, int64_t len, int64_t hd, int64_t ng,
                                                const float *const *q, const void *const *kb,
                                                float *const *sc)
{
    for (int64_t g0 = 0; g0 < ng; g0 += 4) {
        const int nr = ng - g0 < 4 ? (int)(ng - g0) : 4;
        const float *const *qg = q + g0;
        float *const *sg = sc + g0;
        int64_t t = 0;
        for (; t + 64 <= len; t += 64) {
            const void *next[4]; /* requested by the first rows only */
            const void *const *kn = g0 == 0 ? quant_next_tile(kb, len, t + 64, 4, next) : NULL;
            SCORES_ROWS(4, 0xFFFF)
        }
        for (; t < len; t += 16) {
            const void *const *kn = NULL;
            const __mmask16 m = (__mmask16)(len - t >= 16 ? 0xFFFF : (1u << (len - t)) - 1);
            SCORES_ROWS(1, m)
        }
    }
}
#undef SCORES_ROWS

AF_TARGET_AVX512 static void scores_avx512(int64_t len, int64_t hd, int64_t ng,
                                           const float *const *q, const float *const *kb,
                                           float *const *sc)
{
    scores_x(0, len, hd, ng, q, (const void *const *)kb, sc);
}

AF_TARGET_AVX512 static void scores_f16_avx512(int64_t len, int64_t hd, int64_t ng,
                                               const float *const *q, const uint16_t *const *kb,
                                               float *const *sc)
{
    scores_x(1, len, hd, ng, q, (const void *const *)kb, sc);
}

const struct quant_kernels quant_kernels_avx512 = {
    .name = "avx512",
    .scores = scores_avx512,
    .scores_f16 = scores_f16_avx512,
    .axpy_rows = axpy_rows_avx512,
    .axpy_rows_f16 = axpy_rows_f16_avx512,
    .exp = quant_exp_avx512,
    .exp_sum = quant_exp_sum_avx512,
    .silu_mul = quant_silu_mul_avx512,
    .scale_max = quant_scale_max_avx512,
    .scale = quant_scale_avx512,
    .act_q8_0 = quant_avx512_act_q8_0,
    .act_q8_k = quant_avx512_act_q8_k,
    .act_f16 = quant_avx512_act_f16,
    .act_bf16 = quant_avx512_act_bf16,
    .vec_dot =
        {
            [GGML_TYPE_Q4_0] = quant_avx512_dot_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx512_dot_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx512_dot_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx512_dot_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx512_dot_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx512_dot_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx512_dot_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx512_dot_q6_k,
        },
    .matmul =
        {
            [GGML_TYPE_F32] = quant_avx512_matmul_f32,
            [GGML_TYPE_F16] = quant_avx512_matmul_f16,
            [GGML_TYPE_BF16] = quant_avx512_matmul_bf16,
            [GGML_TYPE_Q4_0] = quant_avx512_matmul_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx512_matmul_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx512_matmul_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx512_matmul_q5_1,
            [GGML_TYPE_Q4_K] = quant_avx512_matmul_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx512_matmul_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx512_matmul_q6_k,
            [GGML_TYPE_Q8_0] = quant_avx512_matmul_q8_0,
        },
    .pack =
        {
            [GGML_TYPE_F32] = quant_avx512_pack_f32,
            [GGML_TYPE_F16] = quant_avx512_pack_f16,
            [GGML_TYPE_BF16] = quant_avx512_pack_bf16,
            [GGML_TYPE_Q4_0] = quant_avx512_pack_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx512_pack_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx512_pack_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx512_pack_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx512_pack_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx512_pack_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx512_pack_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx512_pack_q6_k,
        },
    .matmul_packed =
        {
            [GGML_TYPE_F32] = quant_avx512_matmul_packed_f32,
            [GGML_TYPE_F16] = quant_avx512_matmul_packed_f16,
            [GGML_TYPE_BF16] = quant_avx512_matmul_packed_bf16,
            [GGML_TYPE_Q4_0] = quant_avx512_matmul_packed_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx512_matmul_packed_q5_0,
            [GGML_TYPE_Q4_1] = quant_avx512_matmul_packed_q4_1,
            [GGML_TYPE_Q5_1] = quant_avx512_matmul_packed_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx512_matmul_packed_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx512_matmul_packed_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx512_matmul_packed_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx512_matmul_packed_q6_k,
        },
    .m1_invariant = {[GGML_TYPE_Q4_0] = 1,
                     [GGML_TYPE_Q5_0] = 1,
                     [GGML_TYPE_Q4_1] = 1,
                     [GGML_TYPE_Q5_1] = 1,
                     [GGML_TYPE_Q8_0] = 1,
                     [GGML_TYPE_Q4_K] = 1,
                     [GGML_TYPE_Q5_K] = 1,
                     [GGML_TYPE_Q6_K] = 1},
};

#else

int quant_avx512_usable(void)
{
    return 0;
}

const struct quant_kernels quant_kernels_avx512 = {.name = "avx512"};

#endif
