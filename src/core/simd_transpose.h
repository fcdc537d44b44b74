/*
 * simd_transpose.h - an 8x8 float transpose in AVX registers, shared by the engine's float
 * prefill (token panels) and training's AVX-512 products (packing Wᵀ). Header-only: it inlines
 * into callers compiled for AVX2 or above (a target attribute that includes avx2); x86-64 GCC
 * and clang only.
 */
#ifndef AF_CORE_SIMD_TRANSPOSE_H
#define AF_CORE_SIMD_TRANSPOSE_H

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include <stdint.h>

/* dst[c * lds + r] = src[r * ls + c] for r, c < 8. */
__attribute__((target("avx2"), always_inline)) static inline void
af_transpose8x8(const float *src, int64_t ls, float *dst, int64_t lds)
{
    __m256 r[8], u[8], v[8];
    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(src + i * ls);
    for (int i = 0; i < 8; i += 2) {
        u[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        u[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        v[i] = _mm256_shuffle_ps(u[i], u[i + 2], 0x44);
        v[i + 1] = _mm256_shuffle_ps(u[i], u[i + 2], 0xEE);
        v[i + 2] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0x44);
        v[i + 3] = _mm256_shuffle_ps(u[i + 1], u[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * lds, _mm256_permute2f128_ps(v[i], v[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * lds, _mm256_permute2f128_ps(v[i], v[i + 4], 0x31));
    }
}
#endif

#endif
