/*
 * quant_avx2_act.c - activations to F16 and BF16 for those weights' dots, 8 lanes (AVX2, F16C):
 * the bits of quant_f32_to_f16 / quant_f32_to_bf16. The scalar conversion was 5% of an F16
 * prefill. A block of 8 holding a NaN takes the scalar path (an error case: the forward pass
 * stops on NaN activations).
 */
#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

/* vcvtps2ph rounds to nearest even, as quant_f32_to_f16 does. */
AF_TARGET_AVX2 void quant_avx2_act_f16(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = 0; j < 8; j++)
                y[i + j] = quant_f32_to_f16(x[i + j]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        y[i] = quant_f32_to_f16(x[i]);
}

/* u + 0x7FFF + (bit 16 of u), the top half, as quant_f32_to_bf16. */
AF_TARGET_AVX2 void quant_avx2_act_bf16(const float *x, uint16_t *y, int64_t n)
{
    const __m256i one = _mm256_set1_epi32(1), round = _mm256_set1_epi32(0x7FFF);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (int j = 0; j < 8; j++)
                y[i + j] = quant_f32_to_bf16(x[i + j]);
            continue;
        }
        const __m256i u = _mm256_castps_si256(v);
        const __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(
                u, _mm256_add_epi32(round, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))),
            16);
        /* 8 values under 0x10000: packus keeps them; the lanes' halves then come in order */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(y + i), _mm256_castsi256_si128(p));
    }
    for (; i < n; i++)
        y[i] = quant_f32_to_bf16(x[i]);
}

#endif
