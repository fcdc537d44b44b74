/*
 * quant_avx2_k8.c - the AVX2 prefill of Q4_K and Q6_K against Q8_K activations (2 tokens or
 * more), 8 weight rows in the 8 lanes of a register, as quant_avx2_r8.c does for the 32-element
 * types and quant_avx512_k.c with 16 rows on AVX-512.
 *
 * Why: the row-at-a-time AVX2 kernels ran 35-55 GFLOP/s a thread at 64 tokens, and a Q4_K_M
 * file with K-quant rows (a 7B's, 3,584 wide) prefilled at about half llama.cpp's speed on AVX2
 * (docs/PERFORMANCE.md). Here a 256-element block of 8 rows is unpacked to unsigned levels and
 * transposed once per token chunk (w[8g + i] lane r = dword i of group g of row r) and meets
 * every token of the chunk: per group of 32 a token takes 8 maddubs against its broadcast
 * dwords, summed in 16 bits, and one madd by the sub-block scales (as 16-bit pairs), so no
 * vpmulld.
 *
 * The arithmetic per output: for each block b in order, the exact integer sums
 *   S_b = sum_s sc_s x (the sub-block's level x activation products)   (Q6_K: levels less 32,
 *         as -32 x sum_s sc_s x bsum_s),
 *   M_b = sum_s min_s x (the sub-block's activation sum)                (Q4_K),
 * then acc = fma(d_b * yd_b, S_b, acc) and, for Q4_K, acc = fma(-(dmin_b * yd_b), M_b, acc),
 * from acc = +0: the chain of the AVX-512 K kernels, so a batch gets their bits, whatever its
 * size (2+), token offset or row split. A lone token keeps the AVX2 dot (quant_avx2.c), whose
 * chain differs (m1_invariant stays 0 for these types on AVX2).
 *
 * 16-bit sums stay below 2^15: a Q4_K maddubs pair is at most 2 x 15 x 128, 8 of them 30,720; a
 * Q6_K pair 2 x 63 x 128 = 16,128, so two at a time.
 *
 * Every function carries AF_TARGET_AVX2; quant_avx2.c's table selects them.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

#define K8_C 4   /* tokens in registers */
#define K8_TC 64 /* tokens per chunk: one unpacked block serves them all */

/* One block of 8 rows, unpacked and transposed. */
struct k8_blk {
    __m256i w[64];  /* w[8g + i] lane r: dword i of group g's levels (unsigned) of row r */
    __m256i sc[16]; /* lane r: row r's scale of sub-block s twice, as int16 (Q4_K: 8) */
    __m256i scp[8]; /* Q6_K: lane r: the scales of sub-blocks 2j and 2j + 1, an int16 pair */
    __m256i mn[4];  /* Q4_K: lane r: the mins of sub-blocks 2i and 2i + 1, an int16 pair */
    __m256 d, dmin;
};

/* 32 bytes at offset o of the 8 rows rp[0..7]: T[i] lane r = dword i of row r's bytes. */
AF_TARGET_AVX2 static AF_INLINE void k8_t32(const uint8_t *const *rp, size_t o, __m256i T[8])
{
    __m256i a[8], t[8], u[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_loadu_si256((const __m256i *)(rp[j] + o));
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        t[h + 0] = _mm256_unpacklo_epi32(a[h + 0], a[h + 1]);
        t[h + 1] = _mm256_unpackhi_epi32(a[h + 0], a[h + 1]);
        t[h + 2] = _mm256_unpacklo_epi32(a[h + 2], a[h + 3]);
        t[h + 3] = _mm256_unpackhi_epi32(a[h + 2], a[h + 3]);
        u[h + 0] = _mm256_unpacklo_epi64(t[h + 0], t[h + 2]);
        u[h + 1] = _mm256_unpackhi_epi64(t[h + 0], t[h + 2]);
        u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        T[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        T[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

/* int16 v twice in a dword, per row. */
static inline int32_t k8_pair(int v, int w)
{
    return (int32_t)(((uint32_t)(uint16_t)(int16_t)v) | ((uint32_t)(uint16_t)(int16_t)w << 16));
}

/* Block b of the 8 rows rp[0..7] (kind 0 = Q4_K, 2 = Q6_K) into B. */
AF_TARGET_AVX2 static AF_INLINE void k8_unpack(int kind, const uint8_t *const *rp, int64_t b,
                                               struct k8_blk *B)
{
    const __m256i m4 = _mm256_set1_epi8(0xF);
    if (kind == 0) {
        const size_t o = (size_t)b * sizeof(struct blk_q4_k);
        int32_t sc[8][8], mn[4][8];
        uint16_t d16[8], dm16[8];
        for (int r = 0; r < 8; r++) {
            const struct blk_q4_k *a = (const struct blk_q4_k *)(rp[r] + o);
            uint8_t s[8], m[8];
            for (int j = 0; j < 8; j++)
                quant_scale_min_k4(j, a->scales, &s[j], &m[j]);
            for (int j = 0; j < 8; j++)
                sc[j][r] = k8_pair(s[j], s[j]);
            for (int i = 0; i < 4; i++)
                mn[i][r] = k8_pair(m[2 * i], m[2 * i + 1]);
            d16[r] = a->d;
            dm16[r] = a->dmin;
        }
        for (int j = 0; j < 8; j++)
            B->sc[j] = _mm256_loadu_si256((const __m256i *)sc[j]);
        for (int i = 0; i < 4; i++)
            B->mn[i] = _mm256_loadu_si256((const __m256i *)mn[i]);
        B->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d16));
        B->dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dm16));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) { /* chunk c: low nibbles group 2c, high ones 2c + 1 */
            __m256i T[8];
            k8_t32(rp, o + offsetof(struct blk_q4_k, qs) + 32 * (size_t)c, T);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                B->w[16 * c + i] = _mm256_and_si256(T[i], m4);
                B->w[16 * c + 8 + i] = _mm256_and_si256(_mm256_srli_epi16(T[i], 4), m4);
            }
        }
        return;
    }
    const size_t o = (size_t)b * sizeof(struct blk_q6_k);
    int32_t sc[16][8], scp[8][8];
    uint16_t d16[8];
    for (int r = 0; r < 8; r++) {
        const struct blk_q6_k *a = (const struct blk_q6_k *)(rp[r] + o);
        for (int s = 0; s < 16; s++)
            sc[s][r] = k8_pair(a->scales[s], a->scales[s]);
        for (int j = 0; j < 8; j++)
            scp[j][r] = k8_pair(a->scales[2 * j], a->scales[2 * j + 1]);
        d16[r] = a->d;
    }
    for (int s = 0; s < 16; s++)
        B->sc[s] = _mm256_loadu_si256((const __m256i *)sc[s]);
    for (int j = 0; j < 8; j++)
        B->scp[j] = _mm256_loadu_si256((const __m256i *)scp[j]);
    B->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d16));
    B->dmin = _mm256_setzero_ps();
    const __m256i m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 1
    for (int h = 0; h < 2; h++) {
        __m256i L0[8], L1[8], H[8];
        k8_t32(rp, o + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h, L0);
        k8_t32(rp, o + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h + 32, L1);
        k8_t32(rp, o + offsetof(struct blk_q6_k, qh) + 32 * (size_t)h, H);
        /* group 4h + j, element l: ql nibble (L0 low, L1 low, L0 high, L1 high) and qh bits
         * 2j, 2j + 1 of byte l as bits 4-5 */
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            __m256i *w = &B->w[32 * h + i];
            w[0] = _mm256_or_si256(_mm256_and_si256(L0[i], m4),
                                   _mm256_and_si256(_mm256_slli_epi16(H[i], 4), m30));
            w[8] = _mm256_or_si256(_mm256_and_si256(L1[i], m4),
                                   _mm256_and_si256(_mm256_slli_epi16(H[i], 2), m30));
            w[16] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0[i], 4), m4),
                                    _mm256_and_si256(H[i], m30));
            w[24] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1[i], 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(H[i], 2), m30));
        }
    }
}

AF_TARGET_AVX2 static AF_INLINE __m256i k8_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* nc (<= K8_C) tokens' block against B: acc[c] advanced by the block's chain; ys[c] the
 * tokens' Q8_K blocks. */
AF_TARGET_AVX2 static AF_INLINE void k8_tokens(int kind, int nc, const struct k8_blk *B,
                                               const struct blk_q8_k *const *ys, __m256 *acc)
{
    __m256i S[K8_C];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
        S[c] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int g = 0; g < 8; g++) {
        if (kind == 0) {
            __m256i s16[K8_C];
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const __m256i w = _mm256_load_si256(&B->w[8 * g + i]);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    s16[c] = _mm256_add_epi16(
                        s16[c], _mm256_maddubs_epi16(w, k8_bcast(ys[c]->qs + 32 * g + 4 * i)));
            }
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                S[c] = _mm256_add_epi32(S[c], _mm256_madd_epi16(s16[c], B->sc[g]));
            continue;
        }
        /* Q6_K: sub-blocks 2g (registers 0-3) and 2g + 1 (4-7), two registers a 16-bit sum */
#pragma GCC unroll 4
        for (int i = 0; i < 8; i += 2) {
            const __m256i w0 = _mm256_load_si256(&B->w[8 * g + i]);
            const __m256i w1 = _mm256_load_si256(&B->w[8 * g + i + 1]);
            const __m256i sc = B->sc[2 * g + i / 4];
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                const int8_t *q = ys[c]->qs + 32 * g + 4 * i;
                const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, k8_bcast(q)),
                                                     _mm256_maddubs_epi16(w1, k8_bcast(q + 4)));
                S[c] = _mm256_add_epi32(S[c], _mm256_madd_epi16(s16, sc));
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        const __m256 yd = _mm256_set1_ps(ys[c]->d);
        const int16_t *bs = ys[c]->bsums;
        if (kind == 2) { /* S -= 32 x sum_s sc_s x bsum_s */
            __m256i C = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                C = _mm256_add_epi32(
                    C, _mm256_madd_epi16(B->scp[j],
                                         _mm256_set1_epi32(k8_pair(bs[2 * j], bs[2 * j + 1]))));
            S[c] = _mm256_sub_epi32(S[c], _mm256_slli_epi32(C, 5));
        }
        acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(B->d, yd), _mm256_cvtepi32_ps(S[c]), acc[c]);
        if (kind == 0) {
            __m256i M = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const int a = bs[4 * i] + bs[4 * i + 1], e = bs[4 * i + 2] + bs[4 * i + 3];
                M = _mm256_add_epi32(M,
                                     _mm256_madd_epi16(B->mn[i], _mm256_set1_epi32(k8_pair(a, e))));
            }
            acc[c] = _mm256_fnmadd_ps(_mm256_mul_ps(B->dmin, yd), _mm256_cvtepi32_ps(M), acc[c]);
        }
    }
}

/* Tokens c0 .. c0 + nc - 1 of the chunk against B (block b), acc their accumulators. */
AF_TARGET_AVX2 static AF_INLINE void k8_pass(int kind, int nc, const struct k8_blk *B,
                                             const uint8_t *X, size_t xbytes, int64_t b, int64_t c0,
                                             __m256 *acc)
{
    const struct blk_q8_k *ys[K8_C];
    __m256 a[K8_C];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++) {
        ys[c] = (const struct blk_q8_k *)(X + (size_t)(c0 + c) * xbytes) + b;
        a[c] = acc[c0 + c];
    }
    k8_tokens(kind, nc, B, ys, a);
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
        acc[c0 + c] = a[c];
}

/* Rows [r0, r1) against m tokens (m >= 2): 8 rows at a time (the last repeat the last row;
 * they are not stored), token chunks of K8_TC, each block unpacked once per chunk. */
AF_TARGET_AVX2 static AF_INLINE void k8_matmul(int kind, const void *W, size_t wbytes, int64_t k,
                                               const void *X, size_t xbytes, int64_t m, float *out,
                                               int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK_K;
    const uint8_t *Wb = W, *Xb = X;
    struct k8_blk B __attribute__((aligned(32)));
    __m256 acc[K8_TC];
    for (int64_t j0 = 0; j0 < m; j0 += K8_TC) {
        const int64_t tc = m - j0 < K8_TC ? m - j0 : K8_TC;
        const uint8_t *Xc = Xb + (size_t)j0 * xbytes;
        for (int64_t r = r0; r < r1; r += 8) {
            const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
            const uint8_t *rp[8];
            for (int j = 0; j < 8; j++)
                rp[j] = Wb + (size_t)(r + (j < nr ? j : nr - 1)) * wbytes;
            for (int64_t c = 0; c < tc; c++)
                acc[c] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                k8_unpack(kind, rp, b, &B);
                for (int64_t c0 = 0; c0 < tc; c0 += K8_C) {
                    const int nc = tc - c0 < K8_C ? (int)(tc - c0) : K8_C;
                    switch (nc) {
                    case 1:
                        k8_pass(kind, 1, &B, Xc, xbytes, b, c0, acc);
                        break;
                    case 2:
                        k8_pass(kind, 2, &B, Xc, xbytes, b, c0, acc);
                        break;
                    case 3:
                        k8_pass(kind, 3, &B, Xc, xbytes, b, c0, acc);
                        break;
                    default:
                        k8_pass(kind, 4, &B, Xc, xbytes, b, c0, acc);
                        break;
                    }
                }
            }
            const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            for (int64_t c = 0; c < tc; c++)
                _mm256_maskstore_ps(out + (j0 + c) * ldo + r, mk, acc[c]);
        }
    }
}

AF_TARGET_AVX2 void quant_avx2_prefill_q4_k(const void *W, size_t wbytes, int64_t k, const void *X,
                                            size_t xbytes, int64_t m, float *out, int64_t ldo,
                                            int64_t r0, int64_t r1)
{
    k8_matmul(0, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX2 void quant_avx2_prefill_q6_k(const void *W, size_t wbytes, int64_t k, const void *X,
                                            size_t xbytes, int64_t m, float *out, int64_t ldo,
                                            int64_t r0, int64_t r1)
{
    k8_matmul(2, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

#endif
