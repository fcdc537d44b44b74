/*
 * quant_avx512_k.c - Q4_K, Q5_K and Q6_K weights against Q8_K activations on AVX-512 VNNI, 16
 * weight rows in the 16 lanes of a register (as quant_avx512_r16.c does for the 32-element
 * types): the vec_dot and the matmul for every batch size.
 *
 * Why rows in the lanes: the pair layout (one row's chunk broadcast against two tokens, the
 * AVX2 kernels' lanes) spent a scale multiply, a conversion and an FMA per 64 multiply-adds and
 * per token, and gave a small batch (a decode of 8 sequences) no reuse of the unpacked weights.
 * Here a 256-element block of 16 rows is unpacked and transposed once (w[8g + i] lane r =
 * dword i of row r's 32-element group g, as unsigned levels) and serves every token of the
 * call: a token's group costs 8 vpdpbusd, one vpmulld by the sub-block scales and an add for 16
 * outputs, and its block one conversion, one multiply and one FMA (two of each with the mins).
 *
 * The arithmetic per output, whatever the batch size, token offset or row split: for each block
 * b in order, the exact integer sums
 *   S_b = sum_s sc_s * (sum of the sub-block's level x activation products)  (Q6_K: levels less
 *         32, via -32 x the activation's bsum),
 *   M_b = sum_s min_s * (the sub-block's activation sum)                       (Q4_K / Q5_K),
 * then acc = fma(d_b * yd_b, S_b, acc) and, for Q4_K / Q5_K, acc = fma(-(dmin_b * yd_b), M_b,
 * acc), from acc = +0, each scale product rounded once. The vec_dot does the same chain with
 * scalar float instructions, so one token and a batch of any size give the same bits (batch
 * invariance, tests/test_quant). Unlike the AVX2 kernels' 8-lane float sums, this is ggml's
 * reference order over blocks.
 *
 * |S_b| < 2^31: Q6_K 16 sub-blocks x 128 x 16 x 64 x 128 / 2 at most; Q5_K 8 x 63 x 32 x 31 x 128.
 *
 * Every function carries AF_TARGET_AVX512; the table in quant_avx512.c selects them.
 */
#include <stddef.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "engine/quant_avx512_t16.h"

#define AF_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

#define K_C 8     /* tokens in registers */
#define K_TC 64   /* tokens per chunk: one unpacked block serves them all */
#define K_XN 1024 /* token-block side terms per chunk (tokens x blocks) */

enum { KIND_Q4K, KIND_Q5K, KIND_Q6K };

/* One block of 16 rows, unpacked and transposed. */
struct k_blk {
    __m512i w[64];  /* w[8g + i] lane r: dword i of group g (elements 32g..32g+31) of row r */
    __m512i sc[16]; /* lane r: row r's scale of sub-block s (8 for Q4_K / Q5_K, 16 for Q6_K) */
    __m512i mn[4];  /* lane r: row r's mins of sub-blocks 2i and 2i + 1, an int16 pair */
    __m512 d, dmin;
};

/* The token chunk's per-block terms; token c's block b at [c * ld + b]. */
struct k_x {
    float d[K_XN];
    /* Q4_K / Q5_K: [0..3] the sub-block sums of the activations as int16 pairs (2i, 2i + 1);
     * Q6_K: [0..15] -32 x the bsums */
    int32_t t[K_XN][16];
    int64_t ld;
};

static inline size_t k_bsz(int kind)
{
    return kind == KIND_Q4K   ? sizeof(struct blk_q4_k)
           : kind == KIND_Q5K ? sizeof(struct blk_q5_k)
                              : sizeof(struct blk_q6_k);
}

AF_TARGET_AVX512 static AF_INLINE int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

AF_TARGET_AVX512 static AF_INLINE __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 32 bytes at offset o of the 16 rows rp[0..15]: T[i] lane r = dword i of row r's bytes. */
AF_TARGET_AVX512 static AF_INLINE void k_t32(const uint8_t *const *rp, size_t o, __m512i T[8])
{
    __m512i a[8], u[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) /* 128-bit lanes: row j dwords 0-3, 4-7, row j + 8 the same */
        a[j] =
            _mm512_inserti64x4(_mm512_castsi256_si512(load32(rp[j] + o)), load32(rp[j + 8] + o), 1);
    q16_unpack(a, u);
    q16_finish(u, T);
}

AF_TARGET_AVX512 static AF_INLINE __m512i bits(__m512i v, int shift, int mask)
{
    return _mm512_and_si512(_mm512_srli_epi32(v, shift), _mm512_set1_epi32(mask));
}

/* Q4_K / Q5_K: d, dmin, the scales and the mins of the 16 rows from their first 16 bytes
 * transposed (P[0]: d and dmin, P[1..3]: the 12 scale bytes). */
AF_TARGET_AVX512 static AF_INLINE void k_hdr4(const __m512i P[4], struct k_blk *B)
{
    B->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(P[0]));
    B->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(P[0], 16)));
    __m512i mn[8];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) { /* quant_scale_min_k4 on 16 rows */
        B->sc[j] = bits(P[1], 8 * j, 63);
        mn[j] = bits(P[2], 8 * j, 63);
        B->sc[4 + j] =
            _mm512_or_si512(bits(P[3], 8 * j, 0xF), _mm512_slli_epi32(bits(P[1], 8 * j + 6, 3), 4));
        mn[4 + j] = _mm512_or_si512(bits(P[3], 8 * j + 4, 0xF),
                                    _mm512_slli_epi32(bits(P[2], 8 * j + 6, 3), 4));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        B->mn[i] = _mm512_or_si512(mn[2 * i], _mm512_slli_epi32(mn[2 * i + 1], 16));
}

/* Q6_K: the 16 signed scale bytes of the 16 rows, transposed (P[i]: scales 4i..4i+3). */
AF_TARGET_AVX512 static AF_INLINE void k_sc6(const __m512i P[4], struct k_blk *B)
{
#pragma GCC unroll 16
    for (int s = 0; s < 16; s++) /* sign-extended */
        B->sc[s] = _mm512_srai_epi32(_mm512_slli_epi32(P[s / 4], 24 - 8 * (s % 4)), 24);
}

/* Q4_K / Q5_K: groups 2c and 2c + 1 from the transposed packed nibbles Q of chunk c, plus 16
 * where K5[0][i] (K5[1][i]) selects a byte (Q5_K's fifth bits; NULL for Q4_K). */
AF_TARGET_AVX512 static AF_INLINE void k_lev4(const __m512i Q[8], __mmask64 (*K5)[8], int c,
                                              struct k_blk *B)
{
    const __m512i m4 = _mm512_set1_epi8(0xF), sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        __m512i lo = _mm512_and_si512(Q[i], m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(Q[i], 4), m4);
        if (K5) {
            lo = _mm512_mask_add_epi8(lo, K5[0][i], lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, K5[1][i], hi, sixteen);
        }
        B->w[16 * c + i] = lo;
        B->w[16 * c + 8 + i] = hi;
    }
}

/* Q6_K: group G = 4h + g from the transposed ql chunk L (ql + 64h + 32 (g & 1)), its nibble
 * g / 2, plus 16 and 32 where K[0][i] and K[1][i] select a byte (the two bits of qh). */
AF_TARGET_AVX512 static AF_INLINE void k_lev6(const __m512i L[8], __mmask64 (*K)[8], int G,
                                              __m512i T[8])
{
    const __m512i m4 = _mm512_set1_epi8(0xF);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        __m512i v = (G % 4) < 2 ? _mm512_and_si512(L[i], m4)
                                : _mm512_and_si512(_mm512_srli_epi16(L[i], 4), m4);
        v = _mm512_mask_add_epi8(v, K[0][i], v, _mm512_set1_epi8(16));
        T[i] = _mm512_mask_add_epi8(v, K[1][i], v, _mm512_set1_epi8(32));
    }
}

/* The bytes of the 16 rows whose bit `bit` is set, per transposed register. */
AF_TARGET_AVX512 static AF_INLINE void k_masks(const __m512i H[8], int bit, __mmask64 K[8])
{
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        K[i] = _mm512_test_epi8_mask(H[i], _mm512_set1_epi8((char)(1 << bit)));
}

/* Block b of the 16 rows rp[0..15] into B. */
AF_TARGET_AVX512 static AF_INLINE void k_unpack(int kind, const uint8_t *const *rp, int64_t b,
                                                struct k_blk *B)
{
    const size_t o = (size_t)b * k_bsz(kind);
    __m512i P[4];
    if (kind == KIND_Q6K) {
        q16_t16(rp, o + offsetof(struct blk_q6_k, scales), P);
        k_sc6(P, B);
        uint16_t d16[16];
        for (int r = 0; r < 16; r++)
            memcpy(&d16[r], rp[r] + o + offsetof(struct blk_q6_k, d), sizeof d16[r]);
        B->d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)d16));
        B->dmin = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512i L[2][8], H[8];
            k_t32(rp, o + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h, L[0]);
            k_t32(rp, o + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h + 32, L[1]);
            k_t32(rp, o + offsetof(struct blk_q6_k, qh) + 32 * (size_t)h, H);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) { /* bits 2g and 2g + 1 of qh[32h + l] */
                __mmask64 K[2][8];
                k_masks(H, 2 * g, K[0]);
                k_masks(H, 2 * g + 1, K[1]);
                k_lev6(L[g & 1], K, 4 * h + g, &B->w[8 * (4 * h + g)]);
            }
        }
        return;
    }
    /* Q4_K / Q5_K: the first 16 bytes are d, dmin and the 12 scale bytes */
    q16_t16(rp, o, P);
    k_hdr4(P, B);
    const size_t qs =
        o + (kind == KIND_Q5K ? offsetof(struct blk_q5_k, qs) : offsetof(struct blk_q4_k, qs));
    __m512i QH[8];
    if (kind == KIND_Q5K)
        k_t32(rp, o + offsetof(struct blk_q5_k, qh), QH);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) { /* bit g of qh byte l: the fifth bit of group g's element l */
        __m512i Q[8];
        __mmask64 K[2][8];
        k_t32(rp, qs + 32 * (size_t)c, Q);
        if (kind == KIND_Q5K) {
            k_masks(QH, 2 * c, K[0]);
            k_masks(QH, 2 * c + 1, K[1]);
        }
        k_lev4(Q, kind == KIND_Q5K ? K : NULL, c, B);
    }
}

/* Group g's levels into T: from B's unpacked levels, or with ob set from the packed block ob
 * (below), made in registers where the tokens use them. */
AF_TARGET_AVX512 static AF_INLINE void k_group(int kind, const struct k_blk *B, const uint8_t *ob,
                                               int g, __m512i T[8])
{
    if (!ob) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            T[i] = _mm512_load_si512(&B->w[8 * g + i]);
        return;
    }
    __m512i R[8];
    if (kind == KIND_Q6K) { /* ql chunk (g / 4, g & 1), then group g's high-bit masks */
        const uint8_t *ol = ob + 1024 * (size_t)(g / 4) + 512 * (size_t)(g & 1);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            R[i] = _mm512_load_si512(ol + 64 * i);
        __mmask64 K[2][8];
        memcpy(K, ob + 2048 + 128 * (size_t)g, sizeof K);
        k_lev6(R, K, g, T);
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const uint8_t *oq = ob + 256 + 512 * (size_t)(g / 2); /* chunk g / 2, nibble g % 2 */
    __mmask64 K[8];
    if (kind == KIND_Q5K)
        memcpy(K, ob + 2304 + 64 * (size_t)g, sizeof K);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        const __m512i Q = _mm512_load_si512(oq + 64 * i);
        T[i] = g & 1 ? _mm512_and_si512(_mm512_srli_epi16(Q, 4), m4) : _mm512_and_si512(Q, m4);
        if (kind == KIND_Q5K)
            T[i] = _mm512_mask_add_epi8(T[i], K[i], T[i], _mm512_set1_epi8(16));
    }
}

/* nc (<= K_C) tokens' block against B (its levels from the packed block ob when set: k_group):
 * acc[c] advanced by the block's chain. ys[c]: the tokens' Q8_K blocks; d[c], t[c]: their side
 * terms. */
AF_TARGET_AVX512 static AF_INLINE void k_tokens(int kind, int nc, const struct k_blk *B,
                                                const uint8_t *ob, const struct blk_q8_k *const *ys,
                                                const float *d, const int32_t *const *t,
                                                const uint8_t *pf, size_t pf_lines, __m512 *acc)
{
    __m512i S[K_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        S[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int g = 0; g < 8; g++) {
        /* An eighth of the block's prefetches a group: issued in one burst, they filled the
         * miss buffers and stalled the loop (15% of a Q6_K batch's samples sat on them). */
        for (size_t l = pf_lines * (size_t)g / 8; l < pf_lines * (size_t)(g + 1) / 8; l++)
            _mm_prefetch((const char *)pf + 64 * l, _MM_HINT_NTA);
        __m512i T[8];
        k_group(kind, B, ob, g, T);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const int8_t *q = ys[c]->qs + 32 * g;
            if (kind == KIND_Q6K) { /* two sub-blocks of 16 */
                __m512i p0 = _mm512_set1_epi32(t[c][2 * g]),
                        p1 = _mm512_set1_epi32(t[c][2 * g + 1]);
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    p0 = _mm512_dpbusd_epi32(p0, T[i], _mm512_set1_epi32(load_i32(q + 4 * i)));
                    p1 = _mm512_dpbusd_epi32(p1, T[4 + i],
                                             _mm512_set1_epi32(load_i32(q + 16 + 4 * i)));
                }
                S[c] = _mm512_add_epi32(S[c],
                                        _mm512_add_epi32(_mm512_mullo_epi32(p0, B->sc[2 * g]),
                                                         _mm512_mullo_epi32(p1, B->sc[2 * g + 1])));
            } else {
                /* two chains of 4 (exact integers: the same sum, half the latency) */
                __m512i pa = _mm512_setzero_si512(), pb = _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int i = 0; i < 4; i++) {
                    pa = _mm512_dpbusd_epi32(pa, T[i], _mm512_set1_epi32(load_i32(q + 4 * i)));
                    pb = _mm512_dpbusd_epi32(pb, T[4 + i],
                                             _mm512_set1_epi32(load_i32(q + 16 + 4 * i)));
                }
                S[c] =
                    _mm512_add_epi32(S[c], _mm512_mullo_epi32(_mm512_add_epi32(pa, pb), B->sc[g]));
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        const __m512 yd = _mm512_set1_ps(d[c]);
        acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(B->d, yd), _mm512_cvtepi32_ps(S[c]), acc[c]);
        if (kind != KIND_Q6K) {
            __m512i M = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                M = _mm512_dpwssd_epi32(M, B->mn[i], _mm512_set1_epi32(t[c][i]));
            acc[c] = _mm512_fnmadd_ps(_mm512_mul_ps(B->dmin, yd), _mm512_cvtepi32_ps(M), acc[c]);
        }
    }
}

/* The side terms of one Q8_K block into d, t. */
AF_TARGET_AVX512 static AF_INLINE void k_side1(int kind, const struct blk_q8_k *y, float *d,
                                               int32_t *t)
{
    *d = y->d;
    if (kind == KIND_Q6K) {
        for (int i = 0; i < 16; i++)
            t[i] = -32 * y->bsums[i];
        return;
    }
    for (int i = 0; i < 4; i++) {
        const int32_t a = y->bsums[4 * i] + y->bsums[4 * i + 1];
        const int32_t b = y->bsums[4 * i + 2] + y->bsums[4 * i + 3];
        t[i] = (int32_t)(((uint32_t)(uint16_t)(int16_t)a) | ((uint32_t)(uint16_t)(int16_t)b << 16));
    }
}

/* vec_dot: the lanes' chain for one row and one token, the integer sums in any order (exact),
 * the float steps as scalar instructions. */
AF_TARGET_AVX512 static AF_INLINE float k_dot(int kind, int64_t n, const void *w, const void *x)
{
    const uint8_t *wb = w;
    const struct blk_q8_k *y = x;
    const int64_t nb = n / QK_K;
    __m128 acc = _mm_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = wb + (size_t)b * k_bsz(kind);
        int32_t S = 0, M = 0;
        float d, dmin = 0.0f;
        if (kind == KIND_Q6K) {
            const struct blk_q6_k *a = (const struct blk_q6_k *)p;
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = load32(a->ql + 64 * h), l1 = load32(a->ql + 64 * h + 32);
                const __m256i qh = load32(a->qh + 32 * h), m30 = _mm256_set1_epi8(0x30);
                const __m256i g[4] = {
                    _mm256_or_si256(_mm256_and_si256(l0, m4),
                                    _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(l1, m4),
                                    _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                    _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30))};
                for (int k = 0; k < 4; k++) {
                    const int G = 4 * h + k;
                    const __m256i v =
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), g[k], load32(y[b].qs + 32 * G));
                    int32_t l[8];
                    _mm256_storeu_si256((__m256i *)l, v);
                    const int32_t s0 = l[0] + l[1] + l[2] + l[3] - 32 * y[b].bsums[2 * G];
                    const int32_t s1 = l[4] + l[5] + l[6] + l[7] - 32 * y[b].bsums[2 * G + 1];
                    S += a->scales[2 * G] * s0 + a->scales[2 * G + 1] * s1;
                }
            }
            d = _cvtsh_ss(a->d);
        } else {
            const uint8_t *scales, *qs, *qh = NULL;
            uint16_t d16, dmin16;
            if (kind == KIND_Q5K) {
                const struct blk_q5_k *a = (const struct blk_q5_k *)p;
                scales = a->scales, qs = a->qs, qh = a->qh, d16 = a->d, dmin16 = a->dmin;
            } else {
                const struct blk_q4_k *a = (const struct blk_q4_k *)p;
                scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
            }
            for (int g = 0; g < 8; g++) {
                const __m256i q = load32(qs + 32 * (g / 2));
                __m256i u =
                    g % 2 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
                if (qh)
                    u = _mm256_mask_add_epi8(
                        u, _mm256_test_epi8_mask(load32(qh), _mm256_set1_epi8((char)(1 << g))), u,
                        _mm256_set1_epi8(16));
                const __m256i v =
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, load32(y[b].qs + 32 * g));
                int32_t l[8];
                _mm256_storeu_si256((__m256i *)l, v);
                uint8_t sc, mn;
                quant_scale_min_k4(g, scales, &sc, &mn);
                S += sc * (l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7]);
                M += mn * (y[b].bsums[2 * g] + y[b].bsums[2 * g + 1]);
            }
            d = _cvtsh_ss(d16);
            dmin = _cvtsh_ss(dmin16);
        }
        const __m128 yd = _mm_set_ss(y[b].d);
        acc = _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(d), yd), _mm_set_ss((float)S), acc);
        if (kind != KIND_Q6K)
            acc = _mm_fnmadd_ss(_mm_mul_ss(_mm_set_ss(dmin), yd), _mm_set_ss((float)M), acc);
    }
    return _mm_cvtss_f32(acc);
}

/* Prefetch block b's share (`per` lines) of a group's worth from `next` (quant_prefetch_ahead), one
 * contiguous range of `lines` lines, in address order, non-temporal (quant_avx512_r16.c). */
static inline size_t k_prefetch_range(size_t lines, size_t per, int64_t b, size_t *l0)
{
    *l0 = per * (size_t)b;
    const size_t l1 = *l0 + per < lines ? *l0 + per : lines;
    return l1 > *l0 ? l1 - *l0 : 0;
}

/* Tokens c0 .. c0 + nc - 1 of the chunk against B (block b of the k chunk; its levels from the
 * packed block ob when set). */
AF_TARGET_AVX512 static AF_INLINE void k_pass(int kind, int nc, const struct k_blk *B,
                                              const uint8_t *ob, const uint8_t *X, size_t xbytes,
                                              int64_t b0, int64_t b, const struct k_x *xs,
                                              int64_t c0, const uint8_t *pf, size_t pf_lines,
                                              __m512 *acc)
{
    const struct blk_q8_k *ys[K_C];
    const int32_t *t[K_C];
    float d[K_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        ys[c] = (const struct blk_q8_k *)(X + (size_t)(c0 + c) * xbytes) + b0 + b;
        const int64_t i = (c0 + c) * xs->ld + b;
        t[c] = xs->t[i];
        d[c] = xs->d[i];
    }
    __m512 a[K_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        a[c] = acc[c0 + c];
    k_tokens(kind, nc, B, ob, ys, d, t, pf, pf_lines, a);
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c0 + c] = a[c];
}

/* ---- Packed weights ----------------------------------------------------------------------
 * The packed form (quant_pack): 16-row groups, the last padded with copies of the last row;
 * per block of the 16 rows, what k_unpack reads, transposed once, and the fifth / high bits as
 * byte masks (as many bits as qh has), in the size of the rows' own blocks:
 *   Q4_K: the 16 header bytes (d, dmin, scales) transposed, P[0..3] (256 bytes); the packed
 *         nibbles of chunk c, Q[0..7], for c = 0..3 (2048): 2304 = 16 x 144;
 *   Q5_K: the same, then the masks of group g's fifth bits, K[g][0..7] (512): 2816 = 16 x 176;
 *   Q6_K: ql, half h, chunk j (ql + 64h + 32j), L[0..7] (2048); the masks of group G's two
 *         high bits, K[G][0..1][0..7] (1024); the scale bytes transposed, P[0..3] (256): 3328;
 *         blocks in pairs, then the pair's 2 x 16 fp16 d (64): 6720 = 32 x 210.
 * Every offset is a multiple of 64. A call loads what k_unpack computes, with the same bits. */

static inline size_t k_pblk(int kind)
{
    return kind == KIND_Q4K ? 2304 : kind == KIND_Q5K ? 2816 : 3328;
}

/* The bytes of a packed group of nb blocks, and block b's offset in it. */
static inline size_t k_pgroup(int kind, int64_t nb)
{
    return kind == KIND_Q6K ? (size_t)((nb + 1) / 2) * 6720 : (size_t)nb * k_pblk(kind);
}

static inline size_t k_poff(int kind, int64_t b)
{
    return kind == KIND_Q6K ? (size_t)(b / 2) * 6720 + (size_t)(b & 1) * 3328
                            : (size_t)b * k_pblk(kind);
}

AF_TARGET_AVX512 static AF_INLINE void store_regs(uint8_t *o, const __m512i *v, int n)
{
    for (int i = 0; i < n; i++)
        _mm512_store_si512(o + 64 * i, v[i]);
}

AF_TARGET_AVX512 static void k_pack_rows(int kind, const uint8_t *W, size_t wbytes, int64_t rows,
                                         int64_t k, uint8_t *out)
{
    const int64_t nb = k / QK_K;
    const size_t gbytes = k_pgroup(kind, nb);
    for (int64_t g = 0; 16 * g < rows; g++) {
        const uint8_t *rp[16];
        for (int j = 0; j < 16; j++) {
            const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
            rp[j] = W + (size_t)r * wbytes;
        }
        uint8_t *og = out + (size_t)g * gbytes;
        memset(og, 0, gbytes); /* an odd last Q6_K block's unused half */
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *ob = og + k_poff(kind, b);
            const size_t o = (size_t)b * k_bsz(kind);
            __m512i P[4], R[8], H[8];
            if (kind == KIND_Q6K) {
                for (int h = 0; h < 2; h++) {
                    for (int j = 0; j < 2; j++) {
                        k_t32(rp,
                              o + offsetof(struct blk_q6_k, ql) + 64 * (size_t)h + 32 * (size_t)j,
                              R);
                        store_regs(ob + 1024 * h + 512 * j, R, 8);
                    }
                    k_t32(rp, o + offsetof(struct blk_q6_k, qh) + 32 * (size_t)h, H);
                    for (int q = 0; q < 4; q++) {
                        __mmask64 K[2][8];
                        k_masks(H, 2 * q, K[0]);
                        k_masks(H, 2 * q + 1, K[1]);
                        memcpy(ob + 2048 + 128 * (4 * h + q), K, sizeof K);
                    }
                }
                q16_t16(rp, o + offsetof(struct blk_q6_k, scales), P);
                store_regs(ob + 3072, P, 4);
                uint8_t *od = og + (size_t)(b / 2) * 6720 + 6656 + 32 * (size_t)(b & 1);
                for (int r = 0; r < 16; r++)
                    memcpy(od + 2 * r, rp[r] + o + offsetof(struct blk_q6_k, d), 2);
                continue;
            }
            q16_t16(rp, o, P);
            store_regs(ob, P, 4);
            const size_t qs = o + (kind == KIND_Q5K ? offsetof(struct blk_q5_k, qs)
                                                    : offsetof(struct blk_q4_k, qs));
            for (int c = 0; c < 4; c++) {
                k_t32(rp, qs + 32 * (size_t)c, R);
                store_regs(ob + 256 + 512 * c, R, 8);
            }
            if (kind == KIND_Q5K) {
                k_t32(rp, o + offsetof(struct blk_q5_k, qh), H);
                for (int q = 0; q < 8; q++) {
                    __mmask64 K[8];
                    k_masks(H, q, K);
                    memcpy(ob + 2304 + 64 * q, K, sizeof K);
                }
            }
        }
    }
}

/* Block b of a packed group og into B: what k_unpack gives for the 16 rows; with levels 0,
 * only the scales (the tokens then make the levels from the packed block, k_group). */
AF_TARGET_AVX512 static AF_INLINE void k_pblock(int kind, const uint8_t *og, int64_t b,
                                                struct k_blk *B, int levels)
{
    const uint8_t *ob = og + k_poff(kind, b);
    __m512i P[4], R[8];
    if (kind == KIND_Q6K) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            P[i] = _mm512_load_si512(ob + 3072 + 64 * i);
        k_sc6(P, B);
        B->d = _mm512_cvtph_ps(_mm256_load_si256(
            (const __m256i *)(og + (size_t)(b / 2) * 6720 + 6656 + 32 * (size_t)(b & 1))));
        B->dmin = _mm512_setzero_ps();
        if (!levels)
            return;
#pragma GCC unroll 1
        for (int G = 0; G < 8; G++)
            k_group(kind, B, ob, G, &B->w[8 * G]);
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        P[i] = _mm512_load_si512(ob + 64 * i);
    k_hdr4(P, B);
    if (!levels)
        return;
#pragma GCC unroll 1
    for (int c = 0; c < 4; c++) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            R[i] = _mm512_load_si512(ob + 256 + 512 * (size_t)c + 64 * i);
        __mmask64 K[2][8];
        if (kind == KIND_Q5K)
            memcpy(K, ob + 2304 + 128 * (size_t)c, sizeof K);
        k_lev4(R, kind == KIND_Q5K ? K : NULL, c, B);
    }
}

/* The blocks [b0, b0 + kc) of one group against the token chunk (tc tokens): each block
 * unpacked once into B, from the rows rp or from the packed group og, and met by every token;
 * or with fused (a constant) its levels made from og by the tokens' passes (k_group). next,
 * lines: where the prefetches start (the next group's rows, or quant_prefetch_ahead past og's
 * start) and a group's worth of lines, a share a block. */
AF_TARGET_AVX512 static AF_INLINE void k_blocks(int kind, int fused, const uint8_t *const *rp,
                                                const uint8_t *og, const uint8_t *next,
                                                size_t lines, int64_t b0, int64_t kc,
                                                const uint8_t *X, size_t xbytes, int64_t tc,
                                                const struct k_x *xs, __m512 *acc)
{
    const size_t per = (lines + (size_t)kc - 1) / (size_t)kc;
    struct k_blk B __attribute__((aligned(64)));
    for (int64_t b = 0; b < kc; b++) {
        size_t l0;
        const size_t nl = k_prefetch_range(lines, per, b, &l0);
        const uint8_t *ob = fused ? og + k_poff(kind, b0 + b) : NULL;
        if (og)
            k_pblock(kind, og, b0 + b, &B, !fused);
        else
            k_unpack(kind, rp, b0 + b, &B);
        for (int64_t c0 = 0; c0 < tc; c0 += K_C) {
            const int nc = tc - c0 < K_C ? (int)(tc - c0) : K_C;
            /* the first pass spreads the block's share of prefetches over its groups */
#define K_PASS(n)                                                                                  \
    k_pass(kind, n, &B, ob, X, xbytes, b0, b, xs, c0, next + 64 * l0, c0 ? 0 : nl, acc)
            QUANT_NC_CASES(K_PASS)
#undef K_PASS
        }
    }
}

/* The token chunk (tc tokens) against one group of nr <= 16 rows over blocks [b0, b0 + kc). */
AF_TARGET_AVX512 static AF_INLINE void k_run(int kind, const uint8_t *const *rp, const uint8_t *og,
                                             const uint8_t *next, size_t lines, int nr, int64_t b0,
                                             int64_t kc, const uint8_t *X, size_t xbytes,
                                             int64_t tc, const struct k_x *xs, int first, float *o,
                                             int64_t ldo)
{
    const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
    __m512 acc[K_TC];
    for (int64_t c = 0; c < tc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, o + c * ldo);
    /* Packed levels are made in registers where the tokens use them (bench/quant: stored to B
     * and loaded back, they cost Q4_K 15-25% at m = 1-8, Q6_K 5-20%), unless several passes of
     * tokens would each remake Q6_K's (8-25% slower at m = 12-32). */
    if (og && (kind != KIND_Q6K || tc <= K_C))
        k_blocks(kind, 1, rp, og, next, lines, b0, kc, X, xbytes, tc, xs, acc);
    else
        k_blocks(kind, 0, rp, og, next, lines, b0, kc, X, xbytes, tc, xs, acc);
    for (int64_t c = 0; c < tc; c++)
        _mm512_mask_storeu_ps(o + c * ldo, mk, acc[c]);
}

/* The matmul on the row-major W (rows wbytes apart), or with P set on its packed form. */
AF_TARGET_AVX512 static AF_INLINE void k_matmul(int kind, quant_vec_dot_fn dot, const void *W,
                                                size_t wbytes, const void *P, int64_t k,
                                                const void *X, size_t xbytes, int64_t m, float *out,
                                                int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK_K;
    if (nb == 0) {
        if (!P)
            quant_matmul_loop(dot, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    const size_t gbytes = k_pgroup(kind, nb);
    struct k_x xs;
    const uint8_t *Xb = X, *Wb = W, *Pb = P;
    /* Token chunks as long as K_TC; k chunks as long as the side terms allow (a decode of a
     * few tokens streams each row group once over the whole row). */
    const int64_t tcmax = m < K_TC ? m : K_TC, kcmax = K_XN / tcmax;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax;
        const uint8_t *Xc = Xb + (size_t)j0 * xbytes;
        for (int64_t b0 = 0; b0 < nb; b0 += kcmax) {
            const int64_t kc = nb - b0 < kcmax ? nb - b0 : kcmax;
            xs.ld = kc;
            for (int64_t c = 0; c < tc; c++)
                for (int64_t b = 0; b < kc; b++)
                    k_side1(kind, (const struct blk_q8_k *)(Xc + (size_t)c * xbytes) + b0 + b,
                            &xs.d[c * kc + b], xs.t[c * kc + b]);
            for (int64_t r = r0; r < r1; r += 16) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                const uint8_t *rp[16], *og = Pb ? Pb + (size_t)(r / 16) * gbytes : NULL;
                for (int j = 0; j < 16; j++) /* rows past the end repeat the last, not stored */
                    rp[j] = og ? og : Wb + (size_t)(r + (j < nr ? j : nr - 1)) * wbytes;
                /* with k in chunks the next group's chunk comes next, not this group's rest */
                const uint8_t *next = !og           ? Wb + (size_t)(r + 16) * wbytes
                                      : nb <= kcmax ? og + quant_prefetch_ahead(gbytes)
                                                    : og + gbytes;
                k_run(kind, rp, og, next, (og ? gbytes : 16 * wbytes) / 64, nr, b0, kc, Xc, xbytes,
                      tc, &xs, b0 == 0, out + j0 * ldo + r, ldo);
            }
        }
    }
}

#define K_ENTRIES(name, KIND)                                                                      \
    AF_TARGET_AVX512 float quant_avx512_dot_##name(int64_t n, const void *w, const void *x)        \
    {                                                                                              \
        return k_dot(KIND, n, w, x);                                                               \
    }                                                                                              \
    AF_TARGET_AVX512 void quant_avx512_matmul_##name(                                              \
        const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes, int64_t m,          \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        k_matmul(KIND, quant_avx512_dot_##name, W, wbytes, NULL, k, X, xbytes, m, out, ldo, r0,    \
                 r1);                                                                              \
    }                                                                                              \
    AF_TARGET_AVX512 size_t quant_avx512_pack_##name(const void *W, size_t wbytes, int64_t rows,   \
                                                     int64_t k, void *out)                         \
    {                                                                                              \
        if (out)                                                                                   \
            k_pack_rows(KIND, W, wbytes, rows, k, out);                                            \
        return (size_t)((rows + 15) / 16) * k_pgroup(KIND, k / QK_K);                              \
    }                                                                                              \
    AF_TARGET_AVX512 void quant_avx512_matmul_packed_##name(                                       \
        const void *P, int64_t rows, int64_t k, const void *X, size_t xbytes, int64_t m,           \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        (void)rows;                                                                                \
        k_matmul(KIND, NULL, NULL, 0, P, k, X, xbytes, m, out, ldo, r0, r1);                       \
    }

K_ENTRIES(q4_k, KIND_Q4K)
K_ENTRIES(q5_k, KIND_Q5K)
K_ENTRIES(q6_k, KIND_Q6K)

#endif
