/*
 * quant_avx2_k8.c - Q4_K, Q5_K and Q6_K weights against Q8_K activations on AVX2, 8 weight rows
 * in the 8 lanes of a register, as quant_avx2_r8.c does for the 32-element types and
 * quant_avx512_k.c with 16 rows on AVX-512: the vec_dot, the matmul and its packed form.
 *
 * Why: the row-at-a-time AVX2 kernels ran 35-55 GFLOP/s a thread at 64 tokens and a lone token
 * at 11-16 GB/s, and a Q4_K_M file with K-quant rows (a 7B's, 3,584 wide) prefilled at about
 * half llama.cpp's speed on AVX2 and decoded below it (docs/PERFORMANCE.md). Here a 256-element
 * block of 8 rows is unpacked to unsigned levels (w[8g + i] lane r = dword i of group g of row
 * r) and meets every token of the chunk: per group of 32 a token takes 8 maddubs against its
 * broadcast dwords, summed in 16 bits, and one madd by the sub-block scales (as 16-bit pairs),
 * so no vpmulld.
 *
 * The arithmetic per output: for each block b in order, the exact integer sums
 *   S_b = sum_s sc_s x (the sub-block's level x activation products)   (Q6_K: levels less 32,
 *         as -32 x sum_s sc_s x bsum_s),
 *   M_b = sum_s min_s x (the sub-block's activation sum)                (Q4_K / Q5_K),
 * then acc = fma(d_b * yd_b, S_b, acc) and, for Q4_K / Q5_K, acc = fma(-(dmin_b * yd_b), M_b,
 * acc), from acc = +0: the chain of the AVX-512 K kernels, so every batch size (a lone token
 * included), token offset, row split and packing gets their bits (m1_invariant).
 *
 * 16-bit sums stay below 2^15: a Q4_K maddubs pair is at most 2 x 15 x 128, 8 of them 30,720; a
 * Q5_K pair 2 x 31 x 128 = 7,936, so four at a time; a Q6_K pair 2 x 63 x 128 = 16,128, two.
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

/* Q5_K: bit g of every byte of QH (the fifth bit of group g's elements) as 16, else 0. */
AF_TARGET_AVX2 static AF_INLINE __m256i k8_b5(__m256i QH, int g)
{
    const __m256i v = g <= 4 ? _mm256_slli_epi16(QH, 4 - g) : _mm256_srli_epi16(QH, g - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Block b of the 8 rows rp[0..7] (kind 0 = Q4_K, 1 = Q5_K, 2 = Q6_K) into B. */
AF_TARGET_AVX2 static AF_INLINE void k8_unpack(int kind, const uint8_t *const *rp, int64_t b,
                                               struct k8_blk *B)
{
    const __m256i m4 = _mm256_set1_epi8(0xF);
    if (kind != 2) { /* Q4_K and Q5_K share the first 16 bytes: d, dmin, the scales */
        const size_t o = (size_t)b * (kind ? sizeof(struct blk_q5_k) : sizeof(struct blk_q4_k));
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
        __m256i QH[8];
        if (kind == 1)
            k8_t32(rp, o + offsetof(struct blk_q5_k, qh), QH);
        const size_t qs =
            o + (kind ? offsetof(struct blk_q5_k, qs) : offsetof(struct blk_q4_k, qs));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) { /* chunk c: low nibbles group 2c, high ones 2c + 1 */
            __m256i T[8];
            k8_t32(rp, qs + 32 * (size_t)c, T);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                __m256i lo = _mm256_and_si256(T[i], m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(T[i], 4), m4);
                if (kind == 1) {
                    lo = _mm256_or_si256(lo, k8_b5(QH[i], 2 * c));
                    hi = _mm256_or_si256(hi, k8_b5(QH[i], 2 * c + 1));
                }
                B->w[16 * c + i] = lo;
                B->w[16 * c + 8 + i] = hi;
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

/* One token's block chain step: acc advanced by fma(d x yd, S, acc) and, for Q4_K, by
 * fma(-(dmin x yd), M, acc), S the sub-block products summed with their scales (Q6_K: less
 * 32 x sum_s sc_s x bsum_s, here), M the mins against the activations' sub-block sums. */
AF_TARGET_AVX2 static AF_INLINE void k8_finish(int kind, const struct k8_blk *B,
                                               const struct blk_q8_k *y, __m256i S, __m256 *acc)
{
    const __m256 yd = _mm256_set1_ps(y->d);
    if (kind == 2) { /* the pair (bsum 2j, bsum 2j + 1) is dword j of the bsums */
        __m256i C = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            C = _mm256_add_epi32(
                C, _mm256_madd_epi16(B->scp[j], k8_bcast((const int8_t *)(y->bsums + 2 * j))));
        S = _mm256_sub_epi32(S, _mm256_slli_epi32(C, 5));
    }
    *acc = _mm256_fmadd_ps(_mm256_mul_ps(B->d, yd), _mm256_cvtepi32_ps(S), *acc);
    if (kind != 2) { /* dword i of the pairwise sums: (sub-block 2i's sum, 2i + 1's), i = 0, 1
                      * in the low lane, 2, 3 in the high one */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)y->bsums);
        const __m256i h = _mm256_hadd_epi16(bs, bs);
        __m256i M = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            M = _mm256_add_epi32(
                M, _mm256_madd_epi16(B->mn[i], _mm256_permutevar8x32_epi32(
                                                   h, _mm256_set1_epi32(i < 2 ? i : i + 2))));
        *acc = _mm256_fnmadd_ps(_mm256_mul_ps(B->dmin, yd), _mm256_cvtepi32_ps(M), *acc);
    }
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
        if (kind != 2) { /* Q4_K: 8 registers in 16 bits; Q5_K: two runs of 4 */
            const int run = kind ? 4 : 8;
#pragma GCC unroll 2
            for (int i0 = 0; i0 < 8; i0 += run) {
                __m256i s16[K8_C];
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int i = i0; i < i0 + run; i++) {
                    const __m256i w = _mm256_load_si256(&B->w[8 * g + i]);
#pragma GCC unroll 4
                    for (int c = 0; c < nc; c++)
                        s16[c] = _mm256_add_epi16(
                            s16[c], _mm256_maddubs_epi16(w, k8_bcast(ys[c]->qs + 32 * g + 4 * i)));
                }
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    S[c] = _mm256_add_epi32(S[c], _mm256_madd_epi16(s16[c], B->sc[g]));
            }
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
    for (int c = 0; c < nc; c++)
        k8_finish(kind, B, ys[c], S[c], &acc[c]);
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

/* The chunk's tc tokens against B (block b), K8_C at a time. */
AF_TARGET_AVX2 static AF_INLINE void k8_chunk(int kind, const struct k8_blk *B, const uint8_t *X,
                                              size_t xbytes, int64_t b, int64_t tc, __m256 *acc)
{
    for (int64_t c0 = 0; c0 < tc; c0 += K8_C) {
        const int nc = tc - c0 < K8_C ? (int)(tc - c0) : K8_C;
        switch (nc) {
        case 1:
            k8_pass(kind, 1, B, X, xbytes, b, c0, acc);
            break;
        case 2:
            k8_pass(kind, 2, B, X, xbytes, b, c0, acc);
            break;
        case 3:
            k8_pass(kind, 3, B, X, xbytes, b, c0, acc);
            break;
        default:
            k8_pass(kind, 4, B, X, xbytes, b, c0, acc);
            break;
        }
    }
}

/* The first nr lanes of acc[0..tc) into out + c x ldo. */
AF_TARGET_AVX2 static AF_INLINE void k8_store_acc(float *out, int64_t ldo, int nr, int64_t tc,
                                                  const __m256 *acc)
{
    const __m256i mk =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t c = 0; c < tc; c++)
        _mm256_maskstore_ps(out + c * ldo, mk, acc[c]);
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
                k8_chunk(kind, &B, Xc, xbytes, b, tc, acc);
            }
            k8_store_acc(out + j0 * ldo + r, ldo, nr, tc, acc);
        }
    }
}

/* ---- The packed form ---------------------------------------------------------------------
 * quant_pack: 16-row groups (the dispatcher's unit; the last padded with copies of the last
 * row), each two halves of 8 rows, each half its blocks in order, so that a lone token reads one
 * stream. What k8_unpack transposes, stored transposed (T[i] lane r = dword i of row r's bytes):
 *   Q4_K, 1152 bytes (8 x 144): the 16 header bytes (d, dmin, the 12 scale bytes), T[0..3]; the
 *         nibbles of chunk c (qs + 32c), T[0..7], for c = 0..3;
 *   Q5_K, 1408 bytes (8 x 176): the same, then the fifth bits (qh), T[0..7];
 *   Q6_K, 1664 bytes: ql + 64h + 32j, T[0..7], for h, j = 0..1; qh + 32h, T[0..7], for h = 0..1;
 *         the 16 scale bytes, T[0..3]; the 8 rows' fp16 d of every block follow the half's
 *         blocks (16 bytes a block, the run padded to 32), 8 x 210 in all.
 * The header is decoded and the nibbles split per call: the form is the rows' own size, and a
 * decode reads no more bytes than the rows hold. */

#define K8_PF 8192 /* bytes ahead of the weight stream to prefetch */

/* 16 bytes at offset o of the 8 rows rp[0..7]: T[i] lane r = dword i of row r's bytes. */
AF_TARGET_AVX2 static AF_INLINE void k8_t16(const uint8_t *const *rp, size_t o, __m256i T[4])
{
    __m256i v[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) /* 128-bit lanes: row j, row j + 4 */
        v[j] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(rp[j + 4] + o)),
                                _mm_loadu_si128((const __m128i *)(rp[j] + o)));
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    T[0] = _mm256_unpacklo_epi64(t0, t2);
    T[1] = _mm256_unpackhi_epi64(t0, t2);
    T[2] = _mm256_unpacklo_epi64(t1, t3);
    T[3] = _mm256_unpackhi_epi64(t1, t3);
}

static inline size_t k8_hb(int kind)
{
    return kind == 0 ? 1152 : kind == 1 ? 1408 : 1664;
}

/* The bytes of a packed half of nb blocks (a group holds two). */
static inline size_t k8_half(int kind, int64_t nb)
{
    return (size_t)nb * k8_hb(kind) + (kind == 2 ? ((size_t)nb * 16 + 31) / 32 * 32 : 0);
}

AF_TARGET_AVX2 static AF_INLINE void k8_store(uint8_t *o, const __m256i *v, int n)
{
    for (int i = 0; i < n; i++)
        _mm256_storeu_si256((__m256i *)(o + 32 * i), v[i]);
}

/* The nb blocks of the 8 rows rp[0..7] into the packed half o. */
AF_TARGET_AVX2 static void k8_pack_half(int kind, const uint8_t *const *rp, int64_t nb, uint8_t *o)
{
    const size_t hb = k8_hb(kind);
    __m256i T[8];
    if (kind == 2)
        memset(o + (size_t)nb * hb, 0, k8_half(kind, nb) - (size_t)nb * hb);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *ob = o + (size_t)b * hb;
        if (kind != 2) {
            const size_t s = (size_t)b * (kind ? sizeof(struct blk_q5_k) : sizeof(struct blk_q4_k));
            const size_t qs =
                s + (kind ? offsetof(struct blk_q5_k, qs) : offsetof(struct blk_q4_k, qs));
            k8_t16(rp, s, T);
            k8_store(ob, T, 4);
            for (int c = 0; c < 4; c++) {
                k8_t32(rp, qs + 32 * (size_t)c, T);
                k8_store(ob + 128 + 256 * (size_t)c, T, 8);
            }
            if (kind == 1) {
                k8_t32(rp, s + offsetof(struct blk_q5_k, qh), T);
                k8_store(ob + 1152, T, 8);
            }
            continue;
        }
        const size_t s = (size_t)b * sizeof(struct blk_q6_k);
        for (int h = 0; h < 2; h++) {
            for (int j = 0; j < 2; j++) {
                k8_t32(rp, s + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h + 32 * (size_t)j, T);
                k8_store(ob + 512 * (size_t)h + 256 * (size_t)j, T, 8);
            }
            k8_t32(rp, s + offsetof(struct blk_q6_k, qh) + 32 * (size_t)h, T);
            k8_store(ob + 1024 + 256 * (size_t)h, T, 8);
        }
        k8_t16(rp, s + offsetof(struct blk_q6_k, scales), T);
        k8_store(ob + 1536, T, 4);
        uint8_t *od = o + (size_t)nb * hb + 16 * (size_t)b;
        for (int r = 0; r < 8; r++)
            memcpy(od + 2 * r, rp[r] + s + offsetof(struct blk_q6_k, d), 2);
    }
}

AF_TARGET_AVX2 static AF_INLINE __m256i k8_bits(__m256i v, int shift, int mask)
{
    return _mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(mask));
}

/* B's scales, mins and d of packed block ob (dt: the block's 8 fp16 d, Q6_K). */
AF_TARGET_AVX2 static AF_INLINE void k8_phdr(int kind, const uint8_t *ob, const uint8_t *dt,
                                             struct k8_blk *B)
{
    __m256i P[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        P[i] = _mm256_loadu_si256((const __m256i *)(ob + (kind == 2 ? 1536 : 0) + 32 * i));
    if (kind != 2) { /* quant_scale_min_k4 on 8 rows: P[1..3] hold the 12 scale bytes */
        const __m256i dd = _mm256_permute4x64_epi64(
            _mm256_packus_epi32(_mm256_and_si256(P[0], _mm256_set1_epi32(0xFFFF)),
                                _mm256_srli_epi32(P[0], 16)),
            0xD8);
        B->d = _mm256_cvtph_ps(_mm256_castsi256_si128(dd));
        B->dmin = _mm256_cvtph_ps(_mm256_extracti128_si256(dd, 1));
        __m256i mn[8];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i lo = k8_bits(P[1], 8 * j, 63);
            const __m256i hi = _mm256_or_si256(k8_bits(P[3], 8 * j, 0xF),
                                               _mm256_slli_epi32(k8_bits(P[1], 8 * j + 6, 3), 4));
            B->sc[j] = _mm256_or_si256(lo, _mm256_slli_epi32(lo, 16));
            B->sc[4 + j] = _mm256_or_si256(hi, _mm256_slli_epi32(hi, 16));
            mn[j] = k8_bits(P[2], 8 * j, 63);
            mn[4 + j] = _mm256_or_si256(k8_bits(P[3], 8 * j + 4, 0xF),
                                        _mm256_slli_epi32(k8_bits(P[2], 8 * j + 6, 3), 4));
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            B->mn[i] = _mm256_or_si256(mn[2 * i], _mm256_slli_epi32(mn[2 * i + 1], 16));
        return;
    }
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    __m256i v[16];
#pragma GCC unroll 16
    for (int s = 0; s < 16; s++) { /* the signed scale bytes, sign-extended */
        v[s] = _mm256_srai_epi32(_mm256_slli_epi32(P[s / 4], 24 - 8 * (s % 4)), 24);
        B->sc[s] = _mm256_or_si256(_mm256_and_si256(v[s], lo16), _mm256_slli_epi32(v[s], 16));
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        B->scp[j] =
            _mm256_or_si256(_mm256_and_si256(v[2 * j], lo16), _mm256_slli_epi32(v[2 * j + 1], 16));
    B->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dt));
    B->dmin = _mm256_setzero_ps();
}

/* Q6_K levels of group 4h + g, register i, from ql chunks L0 (j = 0), L1 (j = 1) and qh H. */
AF_TARGET_AVX2 static AF_INLINE __m256i k8_lev6(__m256i L0, __m256i L1, __m256i H, int g)
{
    const __m256i m4 = _mm256_set1_epi8(0xF), m30 = _mm256_set1_epi8(0x30);
    switch (g) {
    case 0:
        return _mm256_or_si256(_mm256_and_si256(L0, m4),
                               _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
    case 1:
        return _mm256_or_si256(_mm256_and_si256(L1, m4),
                               _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
    case 2:
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4),
                               _mm256_and_si256(H, m30));
    default:
        return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
    }
}

AF_TARGET_AVX2 static AF_INLINE __m256i k8_ld(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* B's levels from packed block ob: what k8_unpack gives. */
AF_TARGET_AVX2 static AF_INLINE void k8_plev(int kind, const uint8_t *ob, struct k8_blk *B)
{
    const __m256i m4 = _mm256_set1_epi8(0xF);
    if (kind != 2) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const __m256i T = k8_ld(ob + 128 + 256 * c + 32 * i);
                __m256i lo = _mm256_and_si256(T, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(T, 4), m4);
                if (kind == 1) {
                    const __m256i QH = k8_ld(ob + 1152 + 32 * i);
                    lo = _mm256_or_si256(lo, k8_b5(QH, 2 * c));
                    hi = _mm256_or_si256(hi, k8_b5(QH, 2 * c + 1));
                }
                B->w[16 * c + i] = lo;
                B->w[16 * c + 8 + i] = hi;
            }
        return;
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m256i L0 = k8_ld(ob + 512 * h + 32 * i),
                          L1 = k8_ld(ob + 512 * h + 256 + 32 * i);
            const __m256i H = k8_ld(ob + 1024 + 256 * h + 32 * i);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++)
                B->w[32 * h + 8 * g + i] = k8_lev6(L0, L1, H, g);
        }
}

/* nc (1 or 2) tokens against packed block ob, the levels split in registers (no B.w round
 * trip: a decode's whole cost is here); B holds the block's header. */
AF_TARGET_AVX2 static AF_INLINE void k8_fused(int kind, int nc, const uint8_t *ob,
                                              const struct k8_blk *B,
                                              const struct blk_q8_k *const *ys, __m256 *acc)
{
    __m256i S[2];
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        S[c] = _mm256_setzero_si256();
    if (kind != 2) {
        const __m256i m4 = _mm256_set1_epi8(0xF);
        const int run = kind ? 4 : 8; /* registers a 16-bit sum holds (Q5_K levels reach 31) */
#pragma GCC unroll 1
        for (int q = 0; q < 4; q++) /* groups 2q (low nibbles) and 2q + 1 */
#pragma GCC unroll 2
            for (int i0 = 0; i0 < 8; i0 += run) {
                __m256i sa[2], sb[2];
#pragma GCC unroll 2
                for (int c = 0; c < nc; c++)
                    sa[c] = sb[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int i = i0; i < i0 + run; i++) {
                    const __m256i T = k8_ld(ob + 128 + 256 * q + 32 * i);
                    __m256i lo = _mm256_and_si256(T, m4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(T, 4), m4);
                    if (kind == 1) {
                        const __m256i QH = k8_ld(ob + 1152 + 32 * i);
                        lo = _mm256_or_si256(lo, k8_b5(QH, 2 * q));
                        hi = _mm256_or_si256(hi, k8_b5(QH, 2 * q + 1));
                    }
#pragma GCC unroll 2
                    for (int c = 0; c < nc; c++) {
                        const int8_t *y = ys[c]->qs + 64 * q + 4 * i;
                        sa[c] = _mm256_add_epi16(sa[c], _mm256_maddubs_epi16(lo, k8_bcast(y)));
                        sb[c] = _mm256_add_epi16(sb[c], _mm256_maddubs_epi16(hi, k8_bcast(y + 32)));
                    }
                }
#pragma GCC unroll 2
                for (int c = 0; c < nc; c++)
                    S[c] = _mm256_add_epi32(
                        S[c], _mm256_add_epi32(_mm256_madd_epi16(sa[c], B->sc[2 * q]),
                                               _mm256_madd_epi16(sb[c], B->sc[2 * q + 1])));
            }
    } else {
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 1
            for (int i = 0; i < 8; i += 2) { /* sub-blocks 8h + 2g + i / 4, g = 0..3 */
                const __m256i L0a = k8_ld(ob + 512 * h + 32 * i),
                              L0b = k8_ld(ob + 512 * h + 32 * i + 32);
                const __m256i L1a = k8_ld(ob + 512 * h + 256 + 32 * i);
                const __m256i L1b = k8_ld(ob + 512 * h + 256 + 32 * i + 32);
                const __m256i Ha = k8_ld(ob + 1024 + 256 * h + 32 * i);
                const __m256i Hb = k8_ld(ob + 1024 + 256 * h + 32 * i + 32);
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const int G = 4 * h + g;
                    const __m256i wa = k8_lev6(L0a, L1a, Ha, g), wb = k8_lev6(L0b, L1b, Hb, g);
                    const __m256i sc = B->sc[2 * G + i / 4];
#pragma GCC unroll 2
                    for (int c = 0; c < nc; c++) {
                        const int8_t *y = ys[c]->qs + 32 * G + 4 * i;
                        const __m256i s16 =
                            _mm256_add_epi16(_mm256_maddubs_epi16(wa, k8_bcast(y)),
                                             _mm256_maddubs_epi16(wb, k8_bcast(y + 4)));
                        S[c] = _mm256_add_epi32(S[c], _mm256_madd_epi16(s16, sc));
                    }
                }
            }
    }
#pragma GCC unroll 2
    for (int c = 0; c < nc; c++)
        k8_finish(kind, B, ys[c], S[c], &acc[c]);
}

/* Rows [r0, r1) (r0 a multiple of 16) of the packed P (nb blocks a row) against m tokens. */
AF_TARGET_AVX2 static AF_INLINE void k8_matmul_packed(int kind, const uint8_t *P, int64_t nb,
                                                      const uint8_t *X, size_t xbytes, int64_t m,
                                                      float *out, int64_t ldo, int64_t r0,
                                                      int64_t r1)
{
    const size_t hb = k8_hb(kind), half = k8_half(kind, nb);
    struct k8_blk B __attribute__((aligned(32)));
    __m256 acc[K8_TC];
    for (int64_t j0 = 0; j0 < m; j0 += K8_TC) {
        const int64_t tc = m - j0 < K8_TC ? m - j0 : K8_TC;
        const uint8_t *Xc = X + (size_t)j0 * xbytes;
        for (int64_t r = r0; r < r1; r += 8) {
            const int nr = r1 - r < 8 ? (int)(r1 - r) : 8;
            const uint8_t *hp = P + (size_t)(r / 8) * half, *dt = hp + (size_t)nb * hb;
            for (int64_t c = 0; c < tc; c++)
                acc[c] = _mm256_setzero_ps();
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *ob = hp + (size_t)b * hb;
                for (size_t l = 0; l < hb; l += 64)
                    _mm_prefetch((const char *)ob + K8_PF + l, _MM_HINT_T1);
                k8_phdr(kind, ob, dt + 16 * (size_t)b, &B);
                if (tc <= 2) {
                    const struct blk_q8_k *ys[2];
                    for (int64_t c = 0; c < tc; c++)
                        ys[c] = (const struct blk_q8_k *)(Xc + (size_t)c * xbytes) + b;
                    if (tc == 1)
                        k8_fused(kind, 1, ob, &B, ys, acc);
                    else
                        k8_fused(kind, 2, ob, &B, ys, acc);
                    continue;
                }
                k8_plev(kind, ob, &B);
                k8_chunk(kind, &B, Xc, xbytes, b, tc, acc);
            }
            k8_store_acc(out + j0 * ldo + r, ldo, nr, tc, acc);
        }
    }
}

/* vec_dot: the lanes' chain for one row and one token (the integer sums in any order: exact;
 * the float steps as scalar instructions). The row-major matmul of a lone token runs it. */
AF_TARGET_AVX2 static AF_INLINE float k8_dot(int kind, int64_t n, const void *w, const void *x)
{
    const struct blk_q8_k *y = x;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        __m256i Sv = _mm256_setzero_si256();
        int32_t M = 0, off = 0;
        float d, dmin = 0.0f;
        if (kind != 2) {
            const uint8_t *scales, *qs, *qh = NULL;
            uint16_t d16, dmin16;
            if (kind == 1) {
                const struct blk_q5_k *a = (const struct blk_q5_k *)w + b;
                scales = a->scales, qs = a->qs, qh = a->qh, d16 = a->d, dmin16 = a->dmin;
            } else {
                const struct blk_q4_k *a = (const struct blk_q4_k *)w + b;
                scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
            }
            for (int g = 0; g < 8; g++) {
                uint8_t sc, mn;
                quant_scale_min_k4(g, scales, &sc, &mn);
                const __m256i q = k8_ld(qs + 32 * (g / 2));
                __m256i u =
                    g % 2 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
                if (qh)
                    u = _mm256_or_si256(u, k8_b5(k8_ld(qh), g));
                const __m256i p =
                    _mm256_maddubs_epi16(u, k8_ld((const uint8_t *)(y[b].qs + 32 * g)));
                Sv = _mm256_add_epi32(Sv, _mm256_madd_epi16(p, _mm256_set1_epi16((short)sc)));
                M += mn * (y[b].bsums[2 * g] + y[b].bsums[2 * g + 1]);
            }
            d = _cvtsh_ss(d16);
            dmin = _cvtsh_ss(dmin16);
        } else {
            const struct blk_q6_k *a = (const struct blk_q6_k *)w + b;
            for (int h = 0; h < 2; h++) {
                const __m256i L0 = k8_ld(a->ql + 64 * h), L1 = k8_ld(a->ql + 64 * h + 32);
                const __m256i H = k8_ld(a->qh + 32 * h);
                for (int g = 0; g < 4; g++) {
                    const int G = 4 * h + g;
                    const __m256i p = _mm256_maddubs_epi16(
                        k8_lev6(L0, L1, H, g), k8_ld((const uint8_t *)(y[b].qs + 32 * G)));
                    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(a->scales[2 * G + 1]),
                                                        _mm_set1_epi16(a->scales[2 * G]));
                    Sv = _mm256_add_epi32(Sv, _mm256_madd_epi16(p, sc));
                }
            }
            for (int s = 0; s < 16; s++)
                off += a->scales[s] * y[b].bsums[s];
            d = _cvtsh_ss(a->d);
        }
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(Sv), _mm256_extracti128_si256(Sv, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        const int32_t S = (int32_t)((uint32_t)_mm_cvtsi128_si32(h) - 32u * (uint32_t)off);
        const __m128 yd = _mm_set_ss(y[b].d);
        acc = _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(d), yd), _mm_set_ss((float)S), acc);
        if (kind != 2)
            acc = _mm_fnmadd_ss(_mm_mul_ss(_mm_set_ss(dmin), yd), _mm_set_ss((float)M), acc);
    }
    return _mm_cvtss_f32(acc);
}

#define K8_ENTRIES(name, KIND)                                                                     \
    AF_TARGET_AVX2 float quant_avx2_dot_##name(int64_t n, const void *w, const void *x)            \
    {                                                                                              \
        return k8_dot(KIND, n, w, x);                                                              \
    }                                                                                              \
    AF_TARGET_AVX2 void quant_avx2_matmul_##name(const void *W, size_t wbytes, int64_t k,          \
                                                 const void *X, size_t xbytes, int64_t m,          \
                                                 float *out, int64_t ldo, int64_t r0, int64_t r1)  \
    {                                                                                              \
        if (m == 1) /* the same chain row by row */                                                \
            quant_matmul_loop(quant_avx2_dot_##name, W, wbytes, k, X, xbytes, m, out, ldo, r0,     \
                              r1);                                                                 \
        else                                                                                       \
            k8_matmul(KIND, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);                         \
    }                                                                                              \
    AF_TARGET_AVX2 size_t quant_avx2_pack_##name(const void *W, size_t wbytes, int64_t rows,       \
                                                 int64_t k, void *out)                             \
    {                                                                                              \
        const int64_t nb = k / QK_K;                                                               \
        const size_t half = k8_half(KIND, nb);                                                     \
        for (int64_t r = 0; out && r < rows; r += 8) {                                             \
            const uint8_t *rp[8];                                                                  \
            for (int j = 0; j < 8; j++)                                                            \
                rp[j] = (const uint8_t *)W + (size_t)(r + j < rows ? r + j : rows - 1) * wbytes;   \
            k8_pack_half(KIND, rp, nb, (uint8_t *)out + (size_t)(r / 8) * half);                   \
        }                                                                                          \
        if (out && (rows + 7) / 8 % 2) { /* the last group's second half: the last row */          \
            const uint8_t *rp[8];                                                                  \
            for (int j = 0; j < 8; j++)                                                            \
                rp[j] = (const uint8_t *)W + (size_t)(rows - 1) * wbytes;                          \
            k8_pack_half(KIND, rp, nb, (uint8_t *)out + (size_t)((rows + 7) / 8) * half);          \
        }                                                                                          \
        return (size_t)((rows + 15) / 16) * 2 * half;                                              \
    }                                                                                              \
    AF_TARGET_AVX2 void quant_avx2_matmul_packed_##name(                                           \
        const void *P, int64_t rows, int64_t k, const void *X, size_t xbytes, int64_t m,           \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        (void)rows;                                                                                \
        k8_matmul_packed(KIND, P, k / QK_K, X, xbytes, m, out, ldo, r0, r1);                       \
    }

K8_ENTRIES(q4_k, 0)
K8_ENTRIES(q5_k, 1)
K8_ENTRIES(q6_k, 2)

#endif
