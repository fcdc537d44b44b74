/*
 * quant_avx512_act.c - the activations' conversion to Q8_0 and Q8_K before the integer dots,
 * 16 lanes. Byte for byte what the reference (quant_ref.c) writes: the same float products,
 * rounded half to even (vcvtps2dq under the default MXCSR is ggml's nearest_int for the
 * |v| <= 127.5 these reach), the same first-largest-magnitude pick for Q8_K's sign. At eight
 * decode rows the scalar Q8_K conversion of ffn_down's 4,864 inputs cost about as much as
 * half that matmul (3.4% of a Q4_K_M decode step). Also F16 and BF16, for those weights' dots:
 * the scalar conversion was 5% of an F16 prefill.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

/* The largest |x| of 16 lanes, NaNs left out as the reference's `>` leaves them. */
AF_TARGET_AVX512 static inline __m512 amax_step(__m512 acc, __m512 x)
{
    /* vmaxps returns its second operand when the first is a NaN */
    return _mm512_max_ps(_mm512_abs_ps(x), acc);
}

AF_TARGET_AVX512 void quant_avx512_act_q8_0(const float *x, void *dst, int64_t nb)
{
    struct blk_q8_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(amax_step(amax_step(_mm512_setzero_ps(), a), b));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        /* d is never a NaN (amax leaves them out), and F16C's rounding is the reference's
         * for every other value (Inf and the subnormals too): no call a block */
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vid));
        const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vid));
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(qb));
    }
}

AF_TARGET_AVX512 void quant_avx512_act_q8_k(const float *x, void *dst, int64_t nb)
{
    struct blk_q8_k *y = dst;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m512 acc = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16)
            acc = amax_step(acc, _mm512_loadu_ps(x + j));
        const float amax = _mm512_reduce_max_ps(acc);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of that magnitude gives the sign, as in the reference */
        const __m512 va = _mm512_set1_ps(amax);
        float max = amax;
        for (int j = 0; j < QK_K; j += 16) {
            const __m512 v = _mm512_loadu_ps(x + j);
            const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(v), va, _CMP_EQ_OQ);
            if (hit) {
                max = x[j + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i top = _mm512_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 16) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), vs));
            q = _mm512_min_epi32(q, top);
            _mm_storeu_si128((__m128i *)(y[i].qs + j), _mm512_cvtepi32_epi8(q));
            y[i].bsums[j / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[i].d = 1 / iscale;
    }
}

/* Rounded to nearest even (vcvtps2ph's own rounding, as quant_f32_to_f16 rounds); a NaN becomes
 * the sign and 0x7E00, as there (the instruction would keep the payload's top bits). */
AF_TARGET_AVX512 void quant_avx512_act_f16(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        if (nan) {
            const __m256i sign = _mm512_cvtepi32_epi16(
                _mm512_srli_epi32(_mm512_castps_si512(v), 16)); /* top bit of the top half */
            const __m256i q = _mm256_or_si256(_mm256_and_si256(sign, _mm256_set1_epi16(-32768)),
                                              _mm256_set1_epi16(0x7E00));
            h = _mm256_mask_mov_epi16(h, nan, q);
        }
        _mm256_mask_storeu_epi16(y + i, k, h);
    }
}

/* quant_f32_to_bf16 on 16 lanes: u + 0x7FFF + (bit 16 of u), the top half; a NaN keeps its top
 * half with the quiet bit set. (vcvtneps2bf16 would flush subnormal inputs to zero.) */
AF_TARGET_AVX512 void quant_avx512_act_bf16(const float *x, uint16_t *y, int64_t n)
{
    const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7FFF);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = (__mmask16)(n - i >= 16 ? 0xFFFF : (1u << (n - i)) - 1);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(k, x + i));
        const __m512i hi = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(hi, one))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(
            _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(64)));
        _mm256_mask_storeu_epi16(y + i, k, _mm512_cvtepi32_epi16(r));
    }
}

#endif
