/*
 * quant_avx512.c - AVX-512 F/BW/VL + VNNI kernels: F32 vec_dot on 512-bit registers, and Q8_0 /
 * Q4_0 vec_dot and 2 x 4 tiled matmul with vpdpbusd (no int16 saturation step). Types without
 * an entry here fall through to the AVX2 kernels (quant_dispatch.c).
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

int quant_avx512_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           quant_avx2_usable();
}

AF_TARGET_AVX512 static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AF_TARGET_AVX512 static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

AF_TARGET_AVX512 static inline __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

AF_TARGET_AVX512 static inline __m256i unpack_q4_0(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0xF)), _mm256_set1_epi8(8));
}

/* 8 int32 lanes of sum w*x (sign trick, then vpdpbusd). */
AF_TARGET_AVX512 static inline __m256i dot_i8(__m256i w, __m256i x)
{
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(w, w),
                               _mm256_sign_epi8(x, w));
}

AF_TARGET_AVX512 static float dot_f32(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

AF_TARGET_AVX512 static inline __m256i wblock(uint32_t t, const void *w, int64_t b, float *d)
{
    if (t == GGML_TYPE_Q8_0) {
        const struct blk_q8_0 *p = (const struct blk_q8_0 *)w + b;
        *d = h2f(p->d);
        return load32(p->qs);
    }
    const struct blk_q4_0 *p = (const struct blk_q4_0 *)w + b;
    *d = h2f(p->d);
    return unpack_q4_0(p->qs);
}

AF_TARGET_AVX512 static inline float dot_32(uint32_t t, int64_t n, const void *w, const void *x)
{
    const struct blk_q8_0 *b = x;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        float dw;
        const __m256i q = wblock(t, w, i, &dw);
        const __m256 p = _mm256_cvtepi32_ps(dot_i8(q, load32(b[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(b[i].d)), p, acc);
    }
    return hsum8(acc);
}

AF_TARGET_AVX512 static float dot_q8_0(int64_t n, const void *w, const void *x)
{
    return dot_32(GGML_TYPE_Q8_0, n, w, x);
}

AF_TARGET_AVX512 static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    return dot_32(GGML_TYPE_Q4_0, n, w, x);
}

AF_TARGET_AVX512 static inline void tile_2x4(uint32_t t, const uint8_t *w0, const uint8_t *w1,
                                             int64_t nb, const uint8_t *x, size_t xbytes, float *o0,
                                             float *o1, int64_t ldo)
{
    __m256 acc[2][4];
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 4; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        float dw[2];
        __m256i q[2], aq[2];
        q[0] = wblock(t, w0, b, &dw[0]);
        q[1] = wblock(t, w1, b, &dw[1]);
        aq[0] = _mm256_sign_epi8(q[0], q[0]);
        aq[1] = _mm256_sign_epi8(q[1], q[1]);
        for (int c = 0; c < 4; c++) {
            const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(x + (size_t)c * xbytes) + b;
            const __m256i y = load32(xb->qs);
            const float dx = h2f(xb->d);
            for (int r = 0; r < 2; r++) {
                const __m256i p =
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq[r], _mm256_sign_epi8(y, q[r]));
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }
    for (int c = 0; c < 4; c++) {
        o0[c * ldo] = hsum8(acc[0][c]);
        o1[c * ldo] = hsum8(acc[1][c]);
    }
}

AF_TARGET_AVX512 static void matmul_32(uint32_t t, quant_vec_dot_fn dot, const void *W,
                                       size_t wbytes, int64_t k, const void *X, size_t xbytes,
                                       int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const uint8_t *Wb = W, *Xb = X;
    const int64_t nb = k / QK;
    const int64_t mt = m >= 4 ? m - m % 4 : 0;
    int64_t r = r0;
    for (; mt > 0 && r + 2 <= r1; r += 2) {
        const uint8_t *w0 = Wb + (size_t)r * wbytes, *w1 = w0 + wbytes;
        for (int64_t j = 0; j < mt; j += 4)
            tile_2x4(t, w0, w1, nb, Xb + (size_t)j * xbytes, xbytes, out + j * ldo + r,
                     out + j * ldo + r + 1, ldo);
        for (int64_t j = mt; j < m; j++) {
            out[j * ldo + r] = dot(k, w0, Xb + (size_t)j * xbytes);
            out[j * ldo + r + 1] = dot(k, w1, Xb + (size_t)j * xbytes);
        }
    }
    if (r < r1)
        quant_matmul_loop(dot, W, wbytes, k, X, xbytes, m, out, ldo, r, r1);
}

AF_TARGET_AVX512 static void matmul_q8_0(const void *W, size_t wbytes, int64_t k, const void *X,
                                         size_t xbytes, int64_t m, float *out, int64_t ldo,
                                         int64_t r0, int64_t r1)
{
    matmul_32(GGML_TYPE_Q8_0, dot_q8_0, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX512 static void matmul_q4_0(const void *W, size_t wbytes, int64_t k, const void *X,
                                         size_t xbytes, int64_t m, float *out, int64_t ldo,
                                         int64_t r0, int64_t r1)
{
    matmul_32(GGML_TYPE_Q4_0, dot_q4_0, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

const struct quant_kernels quant_kernels_avx512 = {
    .name = "avx512",
    .vec_dot =
        {
            [GGML_TYPE_F32] = dot_f32,
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q8_0] = dot_q8_0,
        },
    .matmul =
        {
            [GGML_TYPE_Q4_0] = matmul_q4_0,
            [GGML_TYPE_Q8_0] = matmul_q8_0,
        },
};

#else

int quant_avx512_usable(void)
{
    return 0;
}

const struct quant_kernels quant_kernels_avx512 = {.name = "avx512"};

#endif
