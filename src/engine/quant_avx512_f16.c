/*
 * quant_avx512_f16.c - F16 and BF16 weights packed with 16 rows in the lanes (quant_pack), and
 * the AVX-512 matmul of every batch size on that form.
 *
 * Why: the row-major F16 kernels broadcast one weight per FMA over tokens in the lanes, so a
 * batch of 2-16 tokens (continuous batching's decode step) leaves most lanes idle and converts
 * the rows again every call (bench/quant -m 8: 23 GFLOP/s, against Q8_0's 220), and a lone token
 * ran the AVX2 dot, row after row, with no prefetch. Here a group of 16 rows is stored as
 * [k][16] F16: one load and one conversion give the 16 rows' weights at element i, and each
 * token adds them times its x[i] (broadcast) in one FMA, whatever the batch size; the next
 * group streams into L2 while this one is summed.
 *
 * Bits: every output is one FMA chain over k in order from +0, acc = fma(w[r][i], x[j][i], acc),
 * with the k chunks' partial sums parked in out exactly: the chain of the row-major prefill
 * kernels (quant_avx512_float.c, quant_avx2_float.c), so a packed call gives their bits for
 * m >= 2, and a lone token gets the bits it would get in any batch. (The row-major decode, the
 * AVX2 dot, sums in 32 lanes instead; F16 is not a reference path.)
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

enum {
    F_KC = 512, /* elements of k per chunk: a group's chunk is 16 KiB of F16 */
    F_TC = 16,  /* tokens in registers */
    F_XT = 64   /* tokens whose chunk is converted to F32 at once (128 KiB) */
};

/* 16 halves (F16, or BF16 when bf) as F32, exact. */
AF_TARGET_AVX512 static AF_INLINE __m512 f_widen(int bf, __m256i h)
{
    return bf ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
              : _mm512_cvtph_ps(h);
}

/* A packed group's bytes: k elements of 16 rows, 2 bytes each. */
static inline size_t f_group_bytes(int64_t k)
{
    return (size_t)k * 32;
}

static size_t f_pack(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out)
{
    const size_t gbytes = f_group_bytes(k);
    const int64_t ng = (rows + 15) / 16;
    if (!out)
        return (size_t)ng * gbytes;
    for (int64_t g = 0; g < ng; g++) {
        const uint16_t *rp[16];
        for (int j = 0; j < 16; j++) { /* rows past the end repeat the last; never stored */
            const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
            rp[j] = (const uint16_t *)((const uint8_t *)W + (size_t)r * wbytes);
        }
        uint16_t *og = (uint16_t *)((uint8_t *)out + (size_t)g * gbytes);
        for (int64_t i = 0; i < k; i++)
            for (int j = 0; j < 16; j++)
                og[i * 16 + j] = rp[j][i];
    }
    return (size_t)ng * gbytes;
}

/* nc (<= F_TC) tokens against one group over the kc elements of a k chunk: pw the group's
 * chunk, xf[c * ldx + i] token c's element i as F32. The sums start at +0 (first) or out's
 * partial sums, and end in out (its rows masked by mk). next: the group after this one,
 * whose chunk is prefetched into L2 a line per element pair (NULL: the first tile of the
 * chunk did). */
AF_TARGET_AVX512 static AF_INLINE void f_tile(int bf, int nc, const uint16_t *pw, int64_t kc,
                                              const float *xf, int64_t ldx, const uint8_t *next,
                                              int first, float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[F_TC];
#pragma GCC unroll 16
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t i = 0; i < kc; i++) {
        if (next && (i & 1) == 0)
            _mm_prefetch((const char *)next + 32 * i, _MM_HINT_T1);
        const __m512 w = f_widen(bf, _mm256_load_si256((const __m256i *)(pw + 16 * i)));
#pragma GCC unroll 16
        for (int c = 0; c < nc; c++)
            acc[c] = _mm512_fmadd_ps(w, _mm512_set1_ps(xf[c * ldx + i]), acc[c]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

/* Every token count 1..F_TC specialised (the accumulators stay in registers). */
AF_TARGET_AVX512 static void f_tile_n(int bf, int nc, const uint16_t *pw, int64_t kc,
                                      const float *xf, int64_t ldx, const uint8_t *next, int first,
                                      float *out, int64_t ldo, __mmask16 mk)
{
#define F_CASE(n)                                                                                  \
    case n:                                                                                        \
        if (bf)                                                                                    \
            f_tile(1, n, pw, kc, xf, ldx, next, first, out, ldo, mk);                              \
        else                                                                                       \
            f_tile(0, n, pw, kc, xf, ldx, next, first, out, ldo, mk);                              \
        break;
    switch (nc) {
        F_CASE(1)
        F_CASE(2)
        F_CASE(3)
        F_CASE(4)
        F_CASE(5)
        F_CASE(6)
        F_CASE(7)
        F_CASE(8)
        F_CASE(9)
        F_CASE(10)
        F_CASE(11)
        F_CASE(12)
        F_CASE(13)
        F_CASE(14)
        F_CASE(15)
    default:
        F_CASE(16)
    }
#undef F_CASE
}

/* Tokens [j0, j0 + nt) of X (F16 or BF16 rows, xbytes apart), elements [k0, k0 + kc), as F32 into
 * xf[t * F_KC + i] (exact). */
AF_TARGET_AVX512 static void f_convert(int bf, const uint8_t *X, size_t xbytes, int64_t j0,
                                       int64_t nt, int64_t k0, int64_t kc, float *xf)
{
    for (int64_t t = 0; t < nt; t++) {
        const uint16_t *h = (const uint16_t *)(X + (size_t)(j0 + t) * xbytes) + k0;
        float *d = xf + t * F_KC;
        int64_t i = 0;
        for (; i + 16 <= kc; i += 16)
            _mm512_storeu_ps(d + i, f_widen(bf, _mm256_loadu_si256((const __m256i *)(h + i))));
        for (; i < kc; i++)
            d[i] = bf ? quant_bf16_to_f32(h[i]) : _cvtsh_ss(h[i]);
    }
}

/* out[j * ldo + r] = W row r . X row j for r in [r0, r1) (r0 a multiple of 16), j < m. Loop
 * order: k chunk, then token block (F_XT tokens converted once), then group, then F_TC tokens at
 * a time, so a group's chunk (16 KiB) stays in L1 while the block's tokens pass over it. */
AF_TARGET_AVX512 static void f_matmul(int bf, const void *P, int64_t k, const void *X,
                                      size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                      int64_t r1)
{
    const size_t gbytes = f_group_bytes(k);
    const uint8_t *Pb = P, *Xb = X;
    /* the block's tokens as F32: per thread, as calls run on every worker at once */
    static _Thread_local float xf[F_XT * F_KC] __attribute__((aligned(64)));
    for (int64_t k0 = 0; k0 < k; k0 += F_KC) {
        const int64_t kc = k - k0 < F_KC ? k - k0 : F_KC;
        for (int64_t j0 = 0; j0 < m; j0 += F_XT) {
            const int64_t nt = m - j0 < F_XT ? m - j0 : F_XT;
            f_convert(bf, Xb, xbytes, j0, nt, k0, kc, xf);
            for (int64_t r = r0; r < r1; r += 16) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
                const uint8_t *pg = Pb + (size_t)(r / 16) * gbytes;
                const uint16_t *pw = (const uint16_t *)pg + 16 * k0;
                /* the next group's chunk; past the matrix a prefetch does not fault */
                const uint8_t *next = pg + gbytes + (size_t)k0 * 32;
                for (int64_t c0 = 0; c0 < nt; c0 += F_TC) {
                    const int nc = nt - c0 < F_TC ? (int)(nt - c0) : F_TC;
                    f_tile_n(bf, nc, pw, kc, xf + c0 * F_KC, F_KC, j0 + c0 == 0 ? next : NULL,
                             k0 == 0, out + (j0 + c0) * ldo + r, ldo, mk);
                }
            }
        }
    }
}

AF_TARGET_AVX512 size_t quant_avx512_pack_f16(const void *W, size_t wbytes, int64_t rows, int64_t k,
                                              void *out)
{
    return f_pack(W, wbytes, rows, k, out);
}

AF_TARGET_AVX512 size_t quant_avx512_pack_bf16(const void *W, size_t wbytes, int64_t rows,
                                               int64_t k, void *out)
{
    return f_pack(W, wbytes, rows, k, out);
}

AF_TARGET_AVX512 void quant_avx512_matmul_packed_f16(const void *P, int64_t rows, int64_t k,
                                                     const void *X, size_t xbytes, int64_t m,
                                                     float *out, int64_t ldo, int64_t r0,
                                                     int64_t r1)
{
    (void)rows;
    f_matmul(0, P, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX512 void quant_avx512_matmul_packed_bf16(const void *P, int64_t rows, int64_t k,
                                                      const void *X, size_t xbytes, int64_t m,
                                                      float *out, int64_t ldo, int64_t r0,
                                                      int64_t r1)
{
    (void)rows;
    f_matmul(1, P, k, X, xbytes, m, out, ldo, r0, r1);
}

#endif
