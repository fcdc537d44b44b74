/*
 * quant_avx2_act.c - the activations' conversion before the dots, 8 lanes (AVX2, F16C), byte for
 * byte what the reference (quant_ref.c) writes: to Q8_0 and Q8_K (as quant_avx512_act.c: the same
 * float products, rounded half to even by vcvtps2dq, the same first-largest-magnitude pick; they
 * were 3% of an AVX2 eight-at-once Q4_K_M decode), and to F16 and BF16 (the bits of
 * quant_f32_to_f16 / quant_f32_to_bf16; the scalar conversion was 5% of an F16 prefill). NaN
 * activations, an error the forward pass stops on, may give other bytes in Q8_0 / Q8_K; for F16
 * and BF16 a block of 8 holding one takes the scalar path.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

/* The largest |x| of 8 lanes into acc; a NaN is left out, as the reference's `>` leaves it
 * (vmaxps returns its second operand when the first is a NaN). */
AF_TARGET_AVX2 static inline __m256 amax8(__m256 acc, __m256 x)
{
    return _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), acc);
}

AF_TARGET_AVX2 static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

/* 32 int32 (within int8) as 32 bytes in order. */
AF_TARGET_AVX2 static inline void store32(const __m256i q[4], int8_t *out)
{
    const __m256i b =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)out,
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

AF_TARGET_AVX2 void quant_avx2_act_q8_0(const float *x, void *dst, int64_t nb)
{
    struct blk_q8_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        __m256 v[4], acc = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++)
            acc = amax8(acc, v[j] = _mm256_loadu_ps(x + 8 * j));
        const float amax = hmax8(acc);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        /* d is never a NaN (amax leaves them out), and F16C's rounding is the reference's
         * for every other value (Inf and the subnormals too): no call a block */
        y[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int j = 0; j < 4; j++)
            q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], vid));
        store32(q, y[i].qs);
    }
}

AF_TARGET_AVX2 void quant_avx2_act_q8_k(const float *x, void *dst, int64_t nb)
{
    struct blk_q8_k *y = dst;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m256 acc = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8)
            acc = amax8(acc, _mm256_loadu_ps(x + j));
        const float amax = hmax8(acc);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of that magnitude gives the sign, as in the reference */
        const __m256 va = _mm256_set1_ps(amax);
        float max = amax;
        for (int j = 0; j < QK_K; j += 8) {
            const __m256 v = _mm256_loadu_ps(x + j);
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), va, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q[4];
            for (int c = 0; c < 4; c++)
                q[c] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * c), vs)), top);
            store32(q, y[i].qs + j);
            for (int h = 0; h < 2; h++) { /* the sums of 16 */
                const __m256i s = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
                __m128i t =
                    _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
                t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
                t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
                y[i].bsums[j / 16 + h] = (int16_t)_mm_cvtsi128_si32(t);
            }
        }
        y[i].d = 1 / iscale;
    }
}

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
