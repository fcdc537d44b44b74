/*
 * quant_avx512_t16.h - the 16-row transposes that the AVX-512 kernels with rows in the lanes
 * share (quant_avx512_r16.c, quant_avx512_k.c): bytes of 16 rows turned into registers whose
 * lane r holds row r's dword. Include only after <immintrin.h>, in files built with the
 * AVX-512 target attribute, which each caller carries (AF_TARGET_AVX512).
 */
#ifndef AF_ENGINE_QUANT_AVX512_T16_H
#define AF_ENGINE_QUANT_AVX512_T16_H

#include <stddef.h>
#include <stdint.h>

/* The first stage of the 8 x 8 dword transpose: a[j]'s 128-bit lanes hold row j's dwords 0-3,
 * 4-7, row j + 8's 0-3, 4-7. u[d] (u[4 + d]) then holds: rows 0-3 (4-7) dword d, the same
 * rows dword 4 + d, rows 8-11 (12-15) dword d, the same rows dword 4 + d. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline
    __attribute__((always_inline)) void
    q16_unpack(const __m512i a[8], __m512i u[8])
{
    __m512i tt[8];
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        tt[h + 0] = _mm512_unpacklo_epi32(a[h + 0], a[h + 1]);
        tt[h + 1] = _mm512_unpackhi_epi32(a[h + 0], a[h + 1]);
        tt[h + 2] = _mm512_unpacklo_epi32(a[h + 2], a[h + 3]);
        tt[h + 3] = _mm512_unpackhi_epi32(a[h + 2], a[h + 3]);
        u[h + 0] = _mm512_unpacklo_epi64(tt[h + 0], tt[h + 2]);
        u[h + 1] = _mm512_unpackhi_epi64(tt[h + 0], tt[h + 2]);
        u[h + 2] = _mm512_unpacklo_epi64(tt[h + 1], tt[h + 3]);
        u[h + 3] = _mm512_unpackhi_epi64(tt[h + 1], tt[h + 3]);
    }
}

/* The 64-bit permutes that finish it: lo takes u's 128-bit lanes 0 and 2, hi lanes 1 and 3. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) __m512i
q16_lo(__m512i x, __m512i y)
{
    return _mm512_permutex2var_epi64(x, _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0), y);
}

__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) __m512i
q16_hi(__m512i x, __m512i y)
{
    return _mm512_permutex2var_epi64(x, _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2), y);
}

/* The second stage: T[i] lane r = dword i of row r. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline
    __attribute__((always_inline)) void
    q16_finish(const __m512i u[8], __m512i T[8])
{
#pragma GCC unroll 4
    for (int d = 0; d < 4; d++) {
        T[d] = q16_lo(u[d], u[4 + d]);
        T[4 + d] = q16_hi(u[d], u[4 + d]);
    }
}

/* 16 bytes at offset o of the 16 rows rp[0..15]: P[i] lane r = dword i of row r's bytes. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline
    __attribute__((always_inline)) void
    q16_t16(const uint8_t *const *rp, size_t o, __m512i P[4])
{
    __m512i a[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) /* 128-bit lane L of a[q]: row 4L + q */
        a[q] = _mm512_inserti32x4(
            _mm512_inserti32x4(
                _mm512_inserti32x4(
                    _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rp[q] + o))),
                    _mm_loadu_si128((const __m128i *)(rp[4 + q] + o)), 1),
                _mm_loadu_si128((const __m128i *)(rp[8 + q] + o)), 2),
            _mm_loadu_si128((const __m128i *)(rp[12 + q] + o)), 3);
    const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]), t1 = _mm512_unpackhi_epi32(a[0], a[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]), t3 = _mm512_unpackhi_epi32(a[2], a[3]);
    P[0] = _mm512_unpacklo_epi64(t0, t2);
    P[1] = _mm512_unpackhi_epi64(t0, t2);
    P[2] = _mm512_unpacklo_epi64(t1, t3);
    P[3] = _mm512_unpackhi_epi64(t1, t3);
}

#endif
