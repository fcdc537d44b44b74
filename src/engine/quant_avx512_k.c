/*
 * quant_avx512_k.c - AVX-512 BW/VL + VNNI prefill matmuls for Q4_K, Q5_K and Q6_K against Q8_K,
 * with the bits of the AVX2 kernels (quant_avx2.c: dot_k4, dot_q6_k), which keep m = 1.
 *
 * Why the same bits: vec_dot stays on AVX2 (one row streamed per token), and an engine's
 * output must not depend on how many tokens share a matmul (batch invariance). So per (row,
 * token) this file does AVX2's arithmetic exactly: per 256-element block, 8 int32 lanes of the
 * scaled integer dot (lane l: elements 4l..4l+3 of each 32-element chunk, times the chunk's
 * sub-block scale), converted, then acc = fma(yd * d, lanes, acc); for Q4_K / Q5_K also 4
 * int32 lanes of the min term, accm = fma(yd * -dmin, lanes, accm); hsum8(acc) + hsum4(accm)
 * at the end. Integer sums are exact, so they may be formed in any order.
 *
 * Pair layout: one zmm holds the same 32-element chunk of two tokens, [A | B]; the weights'
 * chunk (unsigned levels) is broadcast to both halves, so vpmaddubsw and vpdpwssd (times the
 * chunk's scales as int16) leave token A's 8 lanes in the low half and B's in the high half:
 * AVX2's lanes, without a reduction. The min term packs 4 tokens x 4 lanes in one zmm.
 *
 * Structure as the Q8_0 tile (quant_avx512.c): token chunks with per-token side tables (the
 * Q8_K scales, the bsums' pair sums); K_R rows packed per k-chunk of K_KC blocks (levels,
 * scale vectors, mins, float scales: about 0.6 KiB a block, so a k-chunk stays in L1); register
 * tiles of K_R rows x 4 tokens; accumulators parked in memory between k-chunks (an exact store
 * and reload).
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
/* Forces inlining so each caller gets a copy specialised on its constant arguments. */
#define AF_INLINE inline __attribute__((always_inline))

#define K_R 4        /* weight rows per tile */
#define K_KC 8       /* blocks per k-chunk: K_R packed rows are 18 KiB */
#define K_TC 64      /* tokens per chunk (a multiple of 4) */
#define K_SIDE 4096  /* token-blocks of side tables per chunk */
#define K_NBMAX 1024 /* longer rows (k > 262144) go to the AVX2 kernel */

enum { KIND_Q4K, KIND_Q5K, KIND_Q6K };

/* One block of one weight row, unpacked. Chunk q covers elements 32q .. 32q + 31. */
struct k_row {
    uint8_t w[8][32]; /* levels: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 */
    int16_t s[8][16]; /* chunk q's scales per int16 pair lane: Q4_K / Q5_K sc_q x 16;
                         Q6_K sc_2q x 8 then sc_2q+1 x 8 (one scale per 16 elements) */
    int16_t ns[16];   /* Q6_K: -32 sc_i, the offset of levels stored + 32 */
    int16_t mins[8];  /* Q4_K / Q5_K */
    float dw, ndmw;   /* d and -dmin as floats */
} __attribute__((aligned(64)));

struct k_scratch {
    struct k_row w[K_KC][K_R];
    float yd[K_SIDE];       /* [b][c]: the tokens' Q8_K scales */
    int16_t q8s[K_SIDE][8]; /* [b][c]: pair sums of the bsums (Q4_K / Q5_K min term) */
    __m512 acc[K_TC / 4][K_R][2];
    __m512 accm[K_TC / 4][K_R];
};

/* AVX2's horizontal sums (quant_avx2.c), the same tree. */
AF_TARGET_AVX512 static AF_INLINE float hsum4(__m128 r)
{
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AF_TARGET_AVX512 static AF_INLINE float hsum8(__m256 v)
{
    return hsum4(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

AF_TARGET_AVX512 static AF_INLINE __m256 half(__m512 v, int h)
{
    return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
             : _mm512_castps512_ps256(v);
}

/* 128-bit lane c (0..3) of v. */
AF_TARGET_AVX512 static AF_INLINE __m128 quarter(__m512 v, int c)
{
    switch (c) {
    case 0:
        return _mm512_extractf32x4_ps(v, 0);
    case 1:
        return _mm512_extractf32x4_ps(v, 1);
    case 2:
        return _mm512_extractf32x4_ps(v, 2);
    default:
        return _mm512_extractf32x4_ps(v, 3);
    }
}

AF_TARGET_AVX512 static AF_INLINE __m256i load32(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* The same 32 bytes in both halves. */
AF_TARGET_AVX512 static AF_INLINE __m512i bcast32(const void *p)
{
    return _mm512_broadcast_i64x4(load32(p));
}

/* Block b of a Q4_K / Q5_K row into o. */
AF_TARGET_AVX512 static AF_INLINE void pack_k4(int five, const uint8_t *row, int64_t b,
                                               struct k_row *o)
{
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t d16, dmin16;
    if (five) {
        const struct blk_q5_k *a = (const struct blk_q5_k *)row + b;
        scales = a->scales, qs = a->qs, qh = a->qh, d16 = a->d, dmin16 = a->dmin;
    } else {
        const struct blk_q4_k *a = (const struct blk_q4_k *)row + b;
        scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
    }
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        quant_scale_min_k4(j, scales, &sc, &mn);
        _mm256_store_si256((__m256i *)o->s[j], _mm256_set1_epi16((short)sc));
        o->mins[j] = mn;
    }
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    const __m256i h = qh ? load32(qh) : _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i q = load32(qs + 32 * j);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) {
            /* bit q of qh byte e is the fifth bit of element e of chunk q */
            const __m256i bl = _mm256_and_si256(_mm256_srli_epi16(h, 2 * j), one);
            const __m256i bh = _mm256_and_si256(_mm256_srli_epi16(h, 2 * j + 1), one);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(bl, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(bh, 4));
        }
        _mm256_store_si256((__m256i *)o->w[2 * j], lo);
        _mm256_store_si256((__m256i *)o->w[2 * j + 1], hi);
    }
    o->dw = _cvtsh_ss(d16);
    o->ndmw = -_cvtsh_ss(dmin16);
}

/* Block b of a Q6_K row into o: chunk 4h + g is AVX2's q6k_unpack(half h)[g]. */
AF_TARGET_AVX512 static AF_INLINE void pack_q6k(const uint8_t *row, int64_t b, struct k_row *o)
{
    const struct blk_q6_k *a = (const struct blk_q6_k *)row + b;
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = load32(a->ql + 64 * h), l1 = load32(a->ql + 64 * h + 32);
        const __m256i qh = load32(a->qh + 32 * h);
        const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int g = 0; g < 4; g++) {
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m3);
            _mm256_store_si256((__m256i *)o->w[4 * h + g],
                               _mm256_or_si256(lo[g], _mm256_slli_epi16(hb, 4)));
        }
    }
    for (int q = 0; q < 8; q++)
        for (int i = 0; i < 16; i++)
            o->s[q][i] = a->scales[2 * q + i / 8];
    for (int i = 0; i < 16; i++)
        o->ns[i] = (int16_t)(-32 * a->scales[i]);
    o->dw = _cvtsh_ss(a->d);
    o->ndmw = 0.0f;
}

/* nr rows of w (wbytes apart), blocks [kb0, kb0 + kc), into s->w. */
AF_TARGET_AVX512 static AF_INLINE void k_pack(int kind, int nr, const uint8_t *w, size_t wbytes,
                                              int64_t kb0, int64_t kc, struct k_scratch *s)
{
    for (int r = 0; r < nr; r++)
        for (int64_t b = 0; b < kc; b++) {
            if (kind == KIND_Q6K)
                pack_q6k(w + (size_t)r * wbytes, kb0 + b, &s->w[b][r]);
            else
                pack_k4(kind == KIND_Q5K, w + (size_t)r * wbytes, kb0 + b, &s->w[b][r]);
        }
}

/* The Q8_K block b of token row x. */
static inline const struct blk_q8_k *yblk(const uint8_t *x, int64_t b)
{
    return (const struct blk_q8_k *)x + b;
}

/* One register tile: nr packed rows x the tokens x[0..3] (np pairs: 1 uses x[0], x[1]) over
 * the k-chunk's kc blocks (kb0: its first block; side: the side tables' column of x[0]; tcp:
 * their row stride). g: the park slot; first / last: the k-chunk's position; nc: tokens to
 * write, out[c * ldo + r]. */
AF_TARGET_AVX512 static AF_INLINE void k_tile(int kind, int nr, int np, struct k_scratch *s,
                                              int64_t kb0, int64_t kc, const uint8_t *const *x,
                                              int64_t side, int64_t tcp, int g, int first, int last,
                                              int nc, float *out, int64_t ldo)
{
    const int k4 = kind != KIND_Q6K;
    __m512 acc[K_R][2], accm[K_R];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
#pragma GCC unroll 2
        for (int p = 0; p < np; p++)
            acc[r][p] = first ? _mm512_setzero_ps() : s->acc[g][r][p];
        accm[r] = first || !k4 ? _mm512_setzero_ps() : s->accm[g][r];
    }
    const __m512i ip0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i ip1 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i iq = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t b = 0; b < kc; b++) {
        const int64_t bb = kb0 + b;
        const struct k_row *wr = s->w[b];
        __m512i ia[K_R][2];
        if (k4) {
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++)
#pragma GCC unroll 2
                for (int p = 0; p < np; p++)
                    ia[r][p] = _mm512_setzero_si512();
        } else {
#pragma GCC unroll 2
            for (int p = 0; p < np; p++) {
                const __m512i bs =
                    _mm512_inserti64x4(_mm512_castsi256_si512(load32(yblk(x[2 * p], bb)->bsums)),
                                       load32(yblk(x[2 * p + 1], bb)->bsums), 1);
#pragma GCC unroll 4
                for (int r = 0; r < nr; r++)
                    ia[r][p] = _mm512_madd_epi16(bs, bcast32(wr[r].ns));
            }
        }
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            __m512i y[2];
#pragma GCC unroll 2
            for (int p = 0; p < np; p++)
                y[p] = _mm512_inserti64x4(
                    _mm512_castsi256_si512(load32(yblk(x[2 * p], bb)->qs + 32 * q)),
                    load32(yblk(x[2 * p + 1], bb)->qs + 32 * q), 1);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                const __m512i wq = bcast32(wr[r].w[q]), sq = bcast32(wr[r].s[q]);
#pragma GCC unroll 2
                for (int p = 0; p < np; p++)
                    ia[r][p] = _mm512_dpwssd_epi32(ia[r][p], _mm512_maddubs_epi16(wq, y[p]), sq);
            }
        }
        const __m512 yd = _mm512_castps128_ps512(_mm_loadu_ps(&s->yd[bb * tcp + side]));
        const __m512 ydp[2] = {_mm512_permutexvar_ps(ip0, yd), _mm512_permutexvar_ps(ip1, yd)};
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m512 dw = _mm512_set1_ps(wr[r].dw);
#pragma GCC unroll 2
            for (int p = 0; p < np; p++)
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(ydp[p], dw), _mm512_cvtepi32_ps(ia[r][p]),
                                            acc[r][p]);
        }
        if (k4) {
            const __m512i q8 = _mm512_loadu_si512(s->q8s[bb * tcp + side]);
            const __m512 ydq = _mm512_permutexvar_ps(iq, yd);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                const __m512i mp = _mm512_madd_epi16(
                    q8, _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)wr[r].mins)));
                accm[r] = _mm512_fmadd_ps(_mm512_mul_ps(ydq, _mm512_set1_ps(wr[r].ndmw)),
                                          _mm512_cvtepi32_ps(mp), accm[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) {
        if (!last) {
#pragma GCC unroll 2
            for (int p = 0; p < np; p++)
                s->acc[g][r][p] = acc[r][p];
            s->accm[g][r] = accm[r];
            continue;
        }
        for (int c = 0; c < nc; c++) {
            float v = hsum8(half(acc[r][c / 2], c % 2));
            if (k4)
                v += hsum4(quarter(accm[r], c));
            out[c * ldo + r] = v;
        }
    }
}

/* Every token of the chunk (tc of them, rows tc apart in x) against nr packed rows. */
AF_TARGET_AVX512 static AF_INLINE void k_groups(int kind, int nr, struct k_scratch *s, int64_t kb0,
                                                int64_t kc, const uint8_t *x, size_t xbytes,
                                                int64_t tc, int64_t tcp, int first, int last,
                                                float *out, int64_t ldo)
{
    for (int64_t c = 0; c < tc; c += 4) {
        const int nc = tc - c < 4 ? (int)(tc - c) : 4;
        const uint8_t *xs[4];
        for (int i = 0; i < 4; i++) /* missing tokens repeat the last one; never written */
            xs[i] = x + (size_t)(c + (i < nc ? i : nc - 1)) * xbytes;
        float *o = out + c * ldo;
        if (nc > 2)
            k_tile(kind, nr, 2, s, kb0, kc, xs, c, tcp, (int)(c / 4), first, last, nc, o, ldo);
        else
            k_tile(kind, nr, 1, s, kb0, kc, xs, c, tcp, (int)(c / 4), first, last, nc, o, ldo);
    }
}

/* The side tables of the chunk's tc tokens (padded to tcp with copies of the last). */
AF_TARGET_AVX512 static AF_INLINE void k_side(int kind, const uint8_t *x, size_t xbytes, int64_t tc,
                                              int64_t tcp, int64_t nb, struct k_scratch *s)
{
    for (int64_t c = 0; c < tcp; c++) {
        const uint8_t *xr = x + (size_t)(c < tc ? c : tc - 1) * xbytes;
        for (int64_t b = 0; b < nb; b++) {
            const struct blk_q8_k *y = yblk(xr, b);
            s->yd[b * tcp + c] = y->d;
            if (kind != KIND_Q6K) {
                const __m256i bs = load32(y->bsums);
                _mm_storeu_si128(
                    (__m128i *)s->q8s[b * tcp + c],
                    _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
            }
        }
    }
}

AF_TARGET_AVX512 static AF_INLINE void matmul_k(int kind, uint32_t t, const void *W, size_t wbytes,
                                                int64_t k, const void *X, size_t xbytes, int64_t m,
                                                float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK_K;
    if (m < 2 || nb > K_NBMAX) {
        quant_kernels_avx2.matmul[t](W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    int64_t tcmax = K_SIDE / nb / 4 * 4;
    tcmax = tcmax > K_TC ? K_TC : tcmax;
    struct k_scratch s;
    const uint8_t *Wb = W, *Xb = X;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax, tcp = (tc + 3) / 4 * 4;
        const uint8_t *x = Xb + (size_t)j0 * xbytes;
        k_side(kind, x, xbytes, tc, tcp, nb, &s);
        for (int64_t r = r0; r < r1;) {
            const int nr = r1 - r < K_R ? 1 : K_R;
            const uint8_t *w = Wb + (size_t)r * wbytes;
            float *o = out + j0 * ldo + r;
            for (int64_t kb0 = 0; kb0 < nb; kb0 += K_KC) {
                const int64_t kc = nb - kb0 < K_KC ? nb - kb0 : K_KC;
                const int first = kb0 == 0, last = kb0 + kc == nb;
                if (nr == K_R) {
                    k_pack(kind, K_R, w, wbytes, kb0, kc, &s);
                    k_groups(kind, K_R, &s, kb0, kc, x, xbytes, tc, tcp, first, last, o, ldo);
                } else {
                    k_pack(kind, 1, w, wbytes, kb0, kc, &s);
                    k_groups(kind, 1, &s, kb0, kc, x, xbytes, tc, tcp, first, last, o, ldo);
                }
            }
            r += nr;
        }
    }
}

AF_TARGET_AVX512 void quant_avx512_matmul_q4_k(const void *W, size_t wbytes, int64_t k,
                                               const void *X, size_t xbytes, int64_t m, float *out,
                                               int64_t ldo, int64_t r0, int64_t r1)
{
    matmul_k(KIND_Q4K, GGML_TYPE_Q4_K, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX512 void quant_avx512_matmul_q5_k(const void *W, size_t wbytes, int64_t k,
                                               const void *X, size_t xbytes, int64_t m, float *out,
                                               int64_t ldo, int64_t r0, int64_t r1)
{
    matmul_k(KIND_Q5K, GGML_TYPE_Q5_K, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX512 void quant_avx512_matmul_q6_k(const void *W, size_t wbytes, int64_t k,
                                               const void *X, size_t xbytes, int64_t m, float *out,
                                               int64_t ldo, int64_t r0, int64_t r1)
{
    matmul_k(KIND_Q6K, GGML_TYPE_Q6_K, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

#endif
