/*
 * quant_x86.h - helpers that the x86 kernels of the 32-element types share (quant_avx2_r8.c,
 * quant_avx512_r16.c). Include only after <immintrin.h>; the functions carry the AVX2 target,
 * which the AVX-512 target includes.
 */
#ifndef AF_ENGINE_QUANT_X86_H
#define AF_ENGINE_QUANT_X86_H

#include <stddef.h>
#include <stdint.h>

#include "engine/quant_int.h"

/* Bytes of a block of Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 (t is one of them). */
static inline size_t quant_b32_bytes(uint32_t t)
{
    return t == GGML_TYPE_Q8_0   ? sizeof(struct blk_q8_0)
           : t == GGML_TYPE_Q4_0 ? sizeof(struct blk_q4_0)
           : t == GGML_TYPE_Q4_1 ? sizeof(struct blk_q4_1)
           : t == GGML_TYPE_Q5_1 ? sizeof(struct blk_q5_1)
                                 : sizeof(struct blk_q5_0);
}

/* Q4_1 / Q5_1: unsigned levels and a minimum per block (w = d q + m). */
static inline int quant_b32_has_min(uint32_t t)
{
    return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1;
}

/* The nibble types with a fifth bit (qh). */
static inline int quant_b32_five(uint32_t t)
{
    return t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
}

/* The byte offset of a block's quants (Q8_0, Q4_0, Q4_1) or of its qh then quants (Q5_0,
 * Q5_1): after the fp16 scale and, with a minimum, the fp16 minimum. */
static inline size_t quant_b32_qoff(uint32_t t)
{
    return quant_b32_has_min(t) ? 4 : 2;
}

/* The sum of a block's 32 signed bytes, exact: sad against zero sums x + 128 in four lanes. */
__attribute__((target("avx2"))) static inline __attribute__((always_inline)) int32_t
quant_b32_sum(const int8_t *qs)
{
    const __m256i u =
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)qs), _mm256_set1_epi8((char)0x80));
    const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (int32_t)(_mm_cvtsi128_si64(h) + _mm_extract_epi64(h, 1)) - 32 * 128;
}

/* A token chunk's per-block terms for the 32-element kernels: token c's block b of [b0, b0 +
 * kc) (tc tokens, Q8_0 rows xbytes apart from X) gives corr[c * kc + b] = -bias x the sum of
 * its bytes and d[c * kc + b] its scale. */
__attribute__((target("avx2,f16c"))) static inline void
quant_b32_terms(const uint8_t *X, size_t xbytes, int64_t tc, int64_t b0, int64_t kc, int32_t bias,
                int32_t *corr, float *d)
{
    for (int64_t c = 0; c < tc; c++) {
        const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0;
        for (int64_t b = 0; b < kc; b++) {
            corr[c * kc + b] = bias ? -bias * quant_b32_sum(xb[b].qs) : 0;
            d[c * kc + b] = _cvtsh_ss(xb[b].d);
        }
    }
}

#endif
