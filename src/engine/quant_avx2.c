/*
 * quant_avx2.c - AVX2 + FMA + F16C kernels: vec_dot for Q4_1, Q5_1, Q4_K, Q5_K, Q6_K, and the
 * Q5_K prefill matmul (1 row x 4 tokens, weights unpacked once per block); the table of the
 * AVX2 kernels, which takes the float types from quant_avx2_float.c, Q8_0 / Q4_0 / Q5_0 (8 rows
 * in the lanes, a packed form) from quant_avx2_r8.c and the Q4_K / Q6_K prefill (8 rows in the
 * lanes) from quant_avx2_k8.c.
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

AF_TARGET_AVX2 static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AF_TARGET_AVX2 static inline float h2f(uint16_t h)
{
    return _cvtsh_ss(h);
}

AF_TARGET_AVX2 static inline __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 8 int32 lanes of sum w*x over groups of 4 bytes (lanes 0-3: bytes 0-15). */
AF_TARGET_AVX2 static inline __m256i dot_i8(__m256i w, __m256i x)
{
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* 32 bits to 32 bytes of 0x00 / 0xFF. */
AF_TARGET_AVX2 static inline __m256i bits_to_bytes(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    const __m256i shuf =
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)u), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* ---- 32-blocks against Q8_0 -------------------------------------------------------------- */

/* Q4_1 / Q5_1 (unsigned levels + min) against Q8_0: d*dy*sum(q*y) + m*dy*sum(y). */
AF_TARGET_AVX2 static AF_INLINE float dot_x_1(int64_t n, const void *w, const void *x, int five)
{
    const struct blk_q8_0 *b = x;
    const __m256i ones16 = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK; i++) {
        const uint8_t *qs;
        uint16_t d16, m16;
        __m256i hib = _mm256_setzero_si256();
        if (five) {
            const struct blk_q5_1 *a = (const struct blk_q5_1 *)w + i;
            qs = a->qs, d16 = a->d, m16 = a->m;
            hib = _mm256_and_si256(bits_to_bytes(a->qh), _mm256_set1_epi8(0x10));
        } else {
            const struct blk_q4_1 *a = (const struct blk_q4_1 *)w + i;
            qs = a->qs, d16 = a->d, m16 = a->m;
        }
        const __m128i t = _mm_loadu_si128((const __m128i *)qs);
        __m256i q =
            _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
        q = _mm256_or_si256(q, hib);
        const __m256i y = load32(b[i].qs);
        const __m256i pq = _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), ones16);
        const __m256i py = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, y), ones16);
        const float dy = h2f(b[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(d16) * dy), _mm256_cvtepi32_ps(pq), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(m16) * dy), _mm256_cvtepi32_ps(py), acc);
    }
    return hsum8(acc);
}

AF_TARGET_AVX2 static float dot_q4_1(int64_t n, const void *w, const void *x)
{
    return dot_x_1(n, w, x, 0);
}

AF_TARGET_AVX2 static float dot_q5_1(int64_t n, const void *w, const void *x)
{
    return dot_x_1(n, w, x, 1);
}

/* ---- K-quants against Q8_K --------------------------------------------------------------- */

/* The 12 packed scale bytes of a Q4_K / Q5_K block as 8 scales (bytes 0-7) and 8 mins
 * (bytes 8-15), as ggml's kmask unpacking. */
AF_TARGET_AVX2 static inline __m128i k4_unpack_scales(const uint8_t *packed)
{
    uint32_t u[4];
    memcpy(u, packed, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mins_lo = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = mins_lo;
    u[0] &= m1;
    return _mm_loadu_si128((const __m128i *)u);
}

/* int16 vector of scale s (0..7) from 8 int16 scales held in both 128-bit lanes. */
AF_TARGET_AVX2 static AF_INLINE __m256i k4_scale_bcast(__m256i sc16, int s)
{
    return _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)(((2 * s + 1) << 8) | (2 * s))));
}

/* Moves bit `bit` (0..7) of every byte of v to bit 4 (other bits are garbage). */
AF_TARGET_AVX2 static AF_INLINE __m256i bit_to_4(__m256i v, int bit)
{
    return bit <= 4 ? _mm256_slli_epi16(v, 4 - bit) : _mm256_srli_epi16(v, bit - 4);
}

/* The min term of one Q4_K / Q5_K block, laid out as ggml's AVX2 kernel does (pairs of
 * sub-blocks summed in integers, 4 lanes), so our float rounding follows the reference logits:
 * activations are re-rounded to 8 bits at every layer, so a different summation order shows up
 * as flipped int8 values and, over 100 tokens, as logit differences of 0.1. */
AF_TARGET_AVX2 static AF_INLINE __m128i k4_min_prod(__m128i scm, const int16_t *bsums)
{
    const __m256i bs = load32(bsums);
    const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    return _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm)), q8s);
}

AF_TARGET_AVX2 static AF_INLINE float hsum4(__m128 r)
{
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Q4_K / Q5_K against Q8_K: d * sum_j sc_j * dot_j - dmin * sum_j m_j * bsum_j. */
AF_TARGET_AVX2 static AF_INLINE float dot_k4(int64_t n, const void *w, const void *x, int five)
{
    const struct blk_q8_k *b = x;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *scales, *qs, *qhp = NULL;
        uint16_t d16, dmin16;
        if (five) {
            const struct blk_q5_k *a = (const struct blk_q5_k *)w + i;
            scales = a->scales, qs = a->qs, qhp = a->qh, d16 = a->d, dmin16 = a->dmin;
        } else {
            const struct blk_q4_k *a = (const struct blk_q4_k *)w + i;
            scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
        }
        const __m128i scm = k4_unpack_scales(scales);
        accm = _mm_fmadd_ps(_mm_set1_ps(-b[i].d * h2f(dmin16)),
                            _mm_cvtepi32_ps(k4_min_prod(scm, b[i].bsums)), accm);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m256i qh = qhp ? load32(qhp) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q = load32(qs + 32 * j);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                const __m256i b16 = _mm256_set1_epi8(16);
                lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4(qh, 2 * j), b16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to_4(qh, 2 * j + 1), b16));
            }
            const __m256i plo = _mm256_maddubs_epi16(lo, load32(b[i].qs + 64 * j));
            const __m256i phi = _mm256_maddubs_epi16(hi, load32(b[i].qs + 64 * j + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(plo, k4_scale_bcast(sc16, 2 * j)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(phi, k4_scale_bcast(sc16, 2 * j + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(b[i].d * h2f(d16)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum8(acc) + hsum4(accm);
}

AF_TARGET_AVX2 static float dot_q5_k(int64_t n, const void *w, const void *x)
{
    return dot_k4(n, w, x, 1);
}

/* ---- K-quant prefill: 1 weight row x KT_X tokens, the weight unpacked once per block ----- */

#define KT_X 4
#define KT_BLOCK_BYTES (192u * 1024u)

/* Q4_K / Q5_K row w against nx tokens; out[c * ldo]. */
AF_TARGET_AVX2 static AF_INLINE void tile_k4(int five, int nx, const uint8_t *w, int64_t nb,
                                             const uint8_t *x, size_t xbytes, float *out,
                                             int64_t ldo)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), b16 = _mm256_set1_epi8(16);
    __m256 acc[KT_X];
    __m128 accm[KT_X];
    for (int c = 0; c < nx; c++) {
        acc[c] = _mm256_setzero_ps();
        accm[c] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *scales, *qs, *qhp = NULL;
        uint16_t d16, dmin16;
        if (five) {
            const struct blk_q5_k *a = (const struct blk_q5_k *)w + i;
            scales = a->scales, qs = a->qs, qhp = a->qh, d16 = a->d, dmin16 = a->dmin;
        } else {
            const struct blk_q4_k *a = (const struct blk_q4_k *)w + i;
            scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
        }
        const __m128i scm = k4_unpack_scales(scales);
        const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
        const __m256i qh = qhp ? load32(qhp) : _mm256_setzero_si256();
        const struct blk_q8_k *yb[KT_X];
        __m256i sumi[KT_X];
        for (int c = 0; c < nx; c++) {
            yb[c] = (const struct blk_q8_k *)(x + (size_t)c * xbytes) + i;
            sumi[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < 4; j++) {
            const __m256i q = load32(qs + 32 * j);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(bit_to_4(qh, 2 * j), b16));
                hi = _mm256_or_si256(hi, _mm256_and_si256(bit_to_4(qh, 2 * j + 1), b16));
            }
            const __m256i sl = k4_scale_bcast(sc16, 2 * j), sh = k4_scale_bcast(sc16, 2 * j + 1);
            for (int c = 0; c < nx; c++) {
                const __m256i plo = _mm256_maddubs_epi16(lo, load32(yb[c]->qs + 64 * j));
                const __m256i phi = _mm256_maddubs_epi16(hi, load32(yb[c]->qs + 64 * j + 32));
                sumi[c] = _mm256_add_epi32(sumi[c], _mm256_add_epi32(_mm256_madd_epi16(plo, sl),
                                                                     _mm256_madd_epi16(phi, sh)));
            }
        }
        const float dw = h2f(d16), dmw = h2f(dmin16);
        for (int c = 0; c < nx; c++) {
            accm[c] = _mm_fmadd_ps(_mm_set1_ps(-yb[c]->d * dmw),
                                   _mm_cvtepi32_ps(k4_min_prod(scm, yb[c]->bsums)), accm[c]);
            acc[c] =
                _mm256_fmadd_ps(_mm256_set1_ps(yb[c]->d * dw), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
        }
    }
    for (int c = 0; c < nx; c++)
        out[c * ldo] = hsum8(acc[c]) + hsum4(accm[c]);
}

AF_TARGET_AVX2 static AF_INLINE void matmul_k_block(int kind, const void *W, size_t wbytes,
                                                    int64_t k, const void *X, size_t xbytes,
                                                    int64_t m, float *out, int64_t ldo, int64_t r0,
                                                    int64_t r1)
{
    const int64_t nb = k / QK_K;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *w = (const uint8_t *)W + (size_t)r * wbytes;
        int64_t j = 0;
        for (; j + KT_X <= m; j += KT_X) {
            const uint8_t *x = (const uint8_t *)X + (size_t)j * xbytes;
            tile_k4(kind, KT_X, w, nb, x, xbytes, out + j * ldo + r, ldo);
        }
        for (; j < m; j++) {
            const uint8_t *x = (const uint8_t *)X + (size_t)j * xbytes;
            tile_k4(kind, 1, w, nb, x, xbytes, out + j * ldo + r, ldo);
        }
    }
}

/* kind: 0 = Q4_K, 1 = Q5_K (the one that uses it now). Rows one at a time, tokens KT_X at a time,
 * in token blocks of about KT_BLOCK_BYTES: a prefill batch of 256 long rows (1.4 MiB of Q8_K for k
 * = 4864) would otherwise be streamed from L3 again for every weight row. */
AF_TARGET_AVX2 static AF_INLINE void matmul_k(int kind, const void *W, size_t wbytes, int64_t k,
                                              const void *X, size_t xbytes, int64_t m, float *out,
                                              int64_t ldo, int64_t r0, int64_t r1)
{
    int64_t tb = (int64_t)(KT_BLOCK_BYTES / xbytes) / KT_X * KT_X;
    tb = tb < KT_X ? KT_X : tb;
    for (int64_t j0 = 0; j0 < m; j0 += tb) {
        const int64_t tc = m - j0 < tb ? m - j0 : tb;
        matmul_k_block(kind, W, wbytes, k, (const uint8_t *)X + (size_t)j0 * xbytes, xbytes, tc,
                       out + j0 * ldo, ldo, r0, r1);
    }
}

AF_TARGET_AVX2 static void matmul_q5_k(const void *W, size_t wbytes, int64_t k, const void *X,
                                       size_t xbytes, int64_t m, float *out, int64_t ldo,
                                       int64_t r0, int64_t r1)
{
    if (m == 1)
        quant_matmul_loop(dot_q5_k, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
    else
        matmul_k(1, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
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

/* Up to 4 rows x nv (<= 4) vectors of y in registers across all n terms. */
AF_TARGET_AVX2 static AF_INLINE void axr_tile_avx2(int nr, int nv, int64_t n, const float *const *a,
                                                   const float *const *xs, float *const *y,
                                                   int64_t i0)
{
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm256_loadu_ps(y[r] + i0 + 8 * v);
    for (int64_t t = 0; t < n; t++) {
        __m256 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            xv[v] = _mm256_loadu_ps(xs[t] + i0 + 8 * v);
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
        axr_tile_avx2(1, nv, n, ar, xs, yr, i);                                                    \
        break;                                                                                     \
    case 2:                                                                                        \
        axr_tile_avx2(2, nv, n, ar, xs, yr, i);                                                    \
        break;                                                                                     \
    case 3:                                                                                        \
        axr_tile_avx2(3, nv, n, ar, xs, yr, i);                                                    \
        break;                                                                                     \
    default:                                                                                       \
        axr_tile_avx2(4, nv, n, ar, xs, yr, i);                                                    \
        break;                                                                                     \
    }

AF_TARGET_AVX2 static void axpy_rows_avx2(int64_t len, int64_t n, int64_t ng, const float *const *a,
                                          const float *const *xs, float *const *y)
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
        for (int r = 0; r < nr; r++)
            for (int64_t t = 0; t < n; t++)
                for (int64_t l = i; l < len; l++)
                    yr[r][l] += ar[r][t] * xs[t][l];
    }
}
#undef AXR_ROWS

/* Up to 4 query rows x nb (<= 2) blocks of 16 positions in registers (16 accumulators) across
 * all of i; the lanes of the last block past n16 (1..16) are neither read nor written. */
AF_TARGET_AVX2 static AF_INLINE void scores_tile_avx2(int nr, int nb, int64_t hd,
                                                      const float *const *q, const float *const *kb,
                                                      float *const *sc, int64_t t0, int n16)
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
        __m256 kv[4];
#pragma GCC unroll 4
        for (int v = 0; v < 2 * nb; v++) {
            const float *kr = kb[v / 2] + i * 16 + 8 * (v % 2);
            kv[v] = v / 2 == nb - 1 ? _mm256_maskload_ps(kr, mask[v % 2]) : _mm256_loadu_ps(kr);
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
        scores_tile_avx2(1, nb, hd, qg, kb + t / 16, sg, t, n16);                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        scores_tile_avx2(2, nb, hd, qg, kb + t / 16, sg, t, n16);                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        scores_tile_avx2(3, nb, hd, qg, kb + t / 16, sg, t, n16);                                  \
        break;                                                                                     \
    default:                                                                                       \
        scores_tile_avx2(4, nb, hd, qg, kb + t / 16, sg, t, n16);                                  \
        break;                                                                                     \
    }

AF_TARGET_AVX2 static void scores_avx2(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                                       const float *const *kb, float *const *sc)
{
    for (int64_t g0 = 0; g0 < ng; g0 += 4) {
        const int nr = ng - g0 < 4 ? (int)(ng - g0) : 4;
        const float *const *qg = q + g0;
        float *const *sg = sc + g0;
        int64_t t = 0;
        for (; t + 32 <= len; t += 32)
            SCORES_ROWS(2, 16)
        for (; t < len; t += 16) {
            const int n16 = len - t >= 16 ? 16 : (int)(len - t);
            SCORES_ROWS(1, n16)
        }
    }
}
#undef SCORES_ROWS

const struct quant_kernels quant_kernels_avx2 = {
    .name = "avx2",
    .scores = scores_avx2,
    .axpy = axpy_avx2,
    .axpy_rows = axpy_rows_avx2,
    .exp = quant_exp_avx2,
    .silu_mul = quant_silu_mul_avx2,
    .scale_max = quant_scale_max_avx2,
    .scale = quant_scale_avx2,
    .vec_dot =
        {
            [GGML_TYPE_F32] = quant_avx2_dot_f32,
            [GGML_TYPE_F16] = quant_avx2_dot_f16,
            [GGML_TYPE_BF16] = quant_avx2_dot_bf16,
            [GGML_TYPE_Q4_0] = quant_avx2_dot_q4_0,
            [GGML_TYPE_Q4_1] = dot_q4_1,
            [GGML_TYPE_Q5_0] = quant_avx2_dot_q5_0,
            [GGML_TYPE_Q5_1] = dot_q5_1,
            [GGML_TYPE_Q8_0] = quant_avx2_dot_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx2_dot_q4_k,
            [GGML_TYPE_Q5_K] = dot_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_dot_q6_k,
        },
    .matmul =
        {
            [GGML_TYPE_F32] = quant_avx2_matmul_f32,
            [GGML_TYPE_F16] = quant_avx2_matmul_f16,
            [GGML_TYPE_BF16] = quant_avx2_matmul_bf16,
            [GGML_TYPE_Q4_0] = quant_avx2_matmul_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_matmul_q5_0,
            [GGML_TYPE_Q8_0] = quant_avx2_matmul_q8_0,
            [GGML_TYPE_Q4_K] = quant_avx2_matmul_q4_k,
            [GGML_TYPE_Q5_K] = matmul_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx2_matmul_q6_k,
        },
    /* quant_avx2_r8.c: 8 rows in the lanes, the AVX-512 kernels' chain (a lone token's bits are
     * a batch's) */
    .m1_invariant = {[GGML_TYPE_Q8_0] = 1,
                     [GGML_TYPE_Q4_0] = 1,
                     [GGML_TYPE_Q5_0] = 1,
                     [GGML_TYPE_Q4_K] = 1,
                     [GGML_TYPE_Q6_K] = 1},
    .pack =
        {
            [GGML_TYPE_Q8_0] = quant_avx2_pack_q8_0,
            [GGML_TYPE_Q4_0] = quant_avx2_pack_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_pack_q5_0,
            [GGML_TYPE_Q4_K] = quant_avx2_pack_q4_k,
            [GGML_TYPE_Q6_K] = quant_avx2_pack_q6_k,
        },
    .matmul_packed =
        {
            [GGML_TYPE_Q8_0] = quant_avx2_matmul_packed_q8_0,
            [GGML_TYPE_Q4_0] = quant_avx2_matmul_packed_q4_0,
            [GGML_TYPE_Q5_0] = quant_avx2_matmul_packed_q5_0,
            [GGML_TYPE_Q4_K] = quant_avx2_matmul_packed_q4_k,
            [GGML_TYPE_Q6_K] = quant_avx2_matmul_packed_q6_k,
        },
};

#else

int quant_avx2_usable(void)
{
    return 0;
}

const struct quant_kernels quant_kernels_avx2 = {.name = "avx2"};

#endif
