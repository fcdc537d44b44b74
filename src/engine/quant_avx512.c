/*
 * quant_avx512.c - AVX-512 F/BW/VL + VNNI kernels for Q4_0 and Q5_0 against Q8_0 activations:
 * vec_dot (also the matmul for m < 4: one row at a time streams best from DRAM) and a packed,
 * register-tiled prefill matmul (4 weight rows x 4 tokens), all on 512-bit registers and
 * vpdpbusd. The float types' prefill matmuls are in quant_avx512_float.c and the K-quants' in
 * quant_avx512_k.c (both with the AVX2 kernels' bits); what has no entry here falls through to the
 * AVX2 kernels (quant_dispatch.c). Q8_0 has kernels of its own, with 16 rows in the lanes
 * (quant_avx512_r16.c), whose one-token path has the bits of every batch size.
 *
 * Pair layout: one zmm holds two 32-element blocks, 2p in the even int32 / float lanes and 2p + 1
 * in the odd ones; lane 2i + h is dword i (elements 4i..4i+3) of block 2p + h. Per output, the
 * tile and the dot do the same float arithmetic in the same order: for each pair p, 16 exact
 * int32 lane sums, converted, then acc = fma(s, lanes, acc) with s = (dw_b * dx_b) broadcast to
 * the lanes of block b (a float product, rounded once); one accumulator from +0, pairs in order;
 * an odd last block pairs with an empty one (sums 0, scale 0: the lanes are left unchanged);
 * hsum16 at the end. So matmul gives vec_dot's bits whatever the batch size, token offset or
 * row split (batch invariance), and only the float order differs from quant_ref.c.
 *
 * The integer sums use vpdpbusd (unsigned x signed bytes) with the activations biased to
 * unsigned (x ^ 0x80 = x + 128) and the weights signed: sum (x + 128) w - 128 sum w. In the
 * tile the correction -128 sum w (per lane) is computed once per weight block when the rows
 * are packed, and starts the vpdpbusd accumulation, so it costs nothing per token.
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
/* Forces inlining so each caller gets a copy specialised on its constant arguments. */
#define AF_INLINE inline __attribute__((always_inline))

int quant_avx512_usable(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           quant_avx2_usable();
}

/* The 16 lanes summed in a fixed tree (the tile and the dot share it). */
AF_TARGET_AVX512 static AF_INLINE float hsum16(__m512 v)
{
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(v),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Dword i of [block 2p | block 2p + 1] (natural order) to lane 2 (i % 8) + i / 8. */
AF_TARGET_AVX512 static AF_INLINE __m512i to_pair_layout(__m512i v)
{
    const __m512i idx = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    return _mm512_permutexvar_epi32(idx, v);
}

/* Two 32-byte blocks (or one, the upper half zero when `two` is 0), natural order. */
AF_TARGET_AVX512 static AF_INLINE __m512i load_2x32(const void *p0, const void *p1, int two)
{
    const __m512i lo = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0));
    if (!two)
        return _mm512_zextsi256_si512(_mm512_castsi512_si256(lo));
    return _mm512_inserti64x4(lo, _mm256_loadu_si256((const __m256i *)p1), 1);
}

/* The 32 nibbles of a Q4_0 block as signed bytes in [-8, 7], element order. */
AF_TARGET_AVX512 static AF_INLINE __m256i unpack_q4_0(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_sub_epi8(_mm256_and_si256(b, _mm256_set1_epi8(0xF)), _mm256_set1_epi8(8));
}

/* Q5_0: nibble | bit4 << 4, minus 16: [-16, 15]; the high bits come in as a mask. */
AF_TARGET_AVX512 static AF_INLINE __m256i unpack_q5_0(const struct blk_q5_0 *p)
{
    uint32_t qh;
    memcpy(&qh, p->qh, 4);
    const __m128i t = _mm_loadu_si128((const __m128i *)p->qs);
    const __m256i q =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0xF));
    return _mm256_mask_sub_epi8(q, (__mmask32)~qh, q, _mm256_set1_epi8(16));
}

/* Bytes per block of weight type t. */
static inline size_t blk_bytes(uint32_t t)
{
    return t == GGML_TYPE_Q8_0   ? sizeof(struct blk_q8_0)
           : t == GGML_TYPE_Q4_0 ? sizeof(struct blk_q4_0)
                                 : sizeof(struct blk_q5_0);
}

/* Weight block b of row w (type t) as 32 signed bytes, and its fp16 scale. */
AF_TARGET_AVX512 static AF_INLINE __m256i wblock(uint32_t t, const void *w, int64_t b, uint16_t *d)
{
    if (t == GGML_TYPE_Q8_0) {
        const struct blk_q8_0 *p = (const struct blk_q8_0 *)w + b;
        *d = p->d;
        return _mm256_loadu_si256((const __m256i *)p->qs);
    }
    if (t == GGML_TYPE_Q4_0) {
        const struct blk_q4_0 *p = (const struct blk_q4_0 *)w + b;
        *d = p->d;
        return unpack_q4_0(p->qs);
    }
    const struct blk_q5_0 *p = (const struct blk_q5_0 *)w + b;
    *d = p->d;
    return unpack_q5_0(p);
}

/* -128 * (sum of the 4 bytes of each dword of w): the bias correction of x ^ 0x80. */
AF_TARGET_AVX512 static AF_INLINE __m512i bias_corr(__m512i w)
{
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w);
    return _mm512_sub_epi32(_mm512_setzero_si512(), s);
}

/* (dw0 * dx0, dw1 * dx1) in the even / odd lanes; the products the tile's scale table holds. */
AF_TARGET_AVX512 static AF_INLINE __m512 pair_scale(uint16_t w0, uint16_t w1, uint16_t x0,
                                                    uint16_t x1)
{
    const __m128 f =
        _mm_cvtph_ps(_mm_setr_epi16((short)w0, (short)w1, (short)x0, (short)x1, 0, 0, 0, 0));
    const __m128 s = _mm_mul_ps(f, _mm_movehl_ps(f, f));
    return _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(s)));
}

/* ---- vec_dot: one row against one token ------------------------------------------------ */

/* The integer lanes of the pair starting at block b (`two` blocks or one), pair layout. */
AF_TARGET_AVX512 static AF_INLINE __m512i dot_pair_i32(uint32_t t, const void *w, const void *x,
                                                       int64_t b, int two, uint16_t *d)
{
    const struct blk_q8_0 *xb = (const struct blk_q8_0 *)x + b;
    d[1] = 0;
    const __m256i w0 = wblock(t, w, b, &d[0]);
    const __m256i w1 = two ? wblock(t, w, b + 1, &d[1]) : _mm256_setzero_si256();
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    const __m512i xu =
        _mm512_xor_si512(load_2x32(xb[0].qs, xb[1].qs, two), _mm512_set1_epi8((char)0x80));
    return to_pair_layout(_mm512_dpbusd_epi32(bias_corr(wv), xu, wv));
}

/* acc + the pair starting at block b (`two` blocks or one). */
AF_TARGET_AVX512 static AF_INLINE __m512 dot_pair(uint32_t t, const void *w, const void *x,
                                                  int64_t b, int two, __m512 acc)
{
    const struct blk_q8_0 *xb = (const struct blk_q8_0 *)x + b;
    uint16_t d[2];
    const __m512 p = _mm512_cvtepi32_ps(dot_pair_i32(t, w, x, b, two, d));
    return _mm512_fmadd_ps(pair_scale(d[0], d[1], xb[0].d, two ? xb[1].d : 0), p, acc);
}

/* The fp16 scales of blocks b .. b + 3 as floats, picked out of the blocks with word permutes
 * (they sit at even offsets: 34 bytes apart in Q8_0, 18 in Q4_0, 22 in Q5_0). */
AF_TARGET_AVX512 static AF_INLINE __m128 scales4(uint32_t t, const void *row, int64_t b)
{
    if (t == GGML_TYPE_Q8_0) {
        const uint8_t *p = (const uint8_t *)((const struct blk_q8_0 *)row + b);
        const __m512i i8 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, 0, 0, 0, 51, 34, 17, 0);
        const __m512i d =
            _mm512_permutex2var_epi16(_mm512_loadu_si512(p), i8, _mm512_loadu_si512(p + 64));
        return _mm_cvtph_ps(_mm512_castsi512_si128(d));
    }
    if (t == GGML_TYPE_Q4_0) {
        const uint8_t *p = (const uint8_t *)((const struct blk_q4_0 *)row + b);
        const __m512i i4 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                            0, 0, 0, 0, 0, 0, 0, 0, 0, 27, 18, 9, 0);
        return _mm_cvtph_ps(
            _mm512_castsi512_si128(_mm512_permutexvar_epi16(i4, _mm512_loadu_si512(p))));
    }
    /* Q5_0: 4 blocks are 88 bytes; the second load takes only the last scale's word (bytes
     * 66-67), so nothing past block b + 3 is read. */
    const uint8_t *p = (const uint8_t *)((const struct blk_q5_0 *)row + b);
    const __m512i i5 = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 0, 0, 0, 0, 0, 0, 33, 22, 11, 0);
    const __m512i d =
        _mm512_permutex2var_epi16(_mm512_loadu_si512(p), i5, _mm512_maskz_loadu_epi16(0x2, p + 64));
    return _mm_cvtph_ps(_mm512_castsi512_si128(d));
}

/* (s0, s1) of v in the even / odd lanes. */
AF_TARGET_AVX512 static AF_INLINE __m512 bcast_pair(__m128 v)
{
    return _mm512_castpd_ps(_mm512_broadcastsd_pd(_mm_castps_pd(v)));
}

/* Blocks b .. b + 3 of row w against the token's biased pairs xu[2] and float scales dx: two
 * pairs into acc. */
AF_TARGET_AVX512 static AF_INLINE __m512 dot4_w(uint32_t t, const void *w, int64_t b,
                                                const __m512i xu[2], __m128 dx, __m512 acc)
{
    const __m128 s = _mm_mul_ps(scales4(t, w, b), dx);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        uint16_t d;
        const __m256i w0 = wblock(t, w, b + 2 * h, &d);
        const __m256i w1 = wblock(t, w, b + 2 * h + 1, &d);
        const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
        const __m512i p = to_pair_layout(_mm512_dpbusd_epi32(bias_corr(wv), xu[h], wv));
        acc = _mm512_fmadd_ps(bcast_pair(h ? _mm_movehl_ps(s, s) : s), _mm512_cvtepi32_ps(p), acc);
    }
    return acc;
}

AF_TARGET_AVX512 static AF_INLINE float dot_t(uint32_t t, int64_t n, const void *w, const void *x)
{
    const struct blk_q8_0 *xb = x;
    const int64_t nb = n / QK;
    __m512 acc = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        __m512i xu[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            xu[h] = _mm512_xor_si512(load_2x32(xb[b + 2 * h].qs, xb[b + 2 * h + 1].qs, 1),
                                     _mm512_set1_epi8((char)0x80));
        acc = dot4_w(t, w, b, xu, scales4(GGML_TYPE_Q8_0, x, b), acc);
    }
    for (; b + 2 <= nb; b += 2)
        acc = dot_pair(t, w, x, b, 1, acc);
    if (b < nb)
        acc = dot_pair(t, w, x, b, 0, acc);
    return hsum16(acc);
}

AF_TARGET_AVX512 static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    return dot_t(GGML_TYPE_Q4_0, n, w, x);
}

AF_TARGET_AVX512 static float dot_q5_0(int64_t n, const void *w, const void *x)
{
    return dot_t(GGML_TYPE_Q5_0, n, w, x);
}

/* ---- packed prefill matmul ---------------------------------------------------------------
 * For each chunk of up to T_TC tokens (their fp16 scales gathered once), each group of T_R
 * weight rows and each k-chunk of T_KC blocks: the rows are packed (pair layout, signed bytes,
 * bias corrections, fp16 scales), then every group of T_C tokens runs a register tile over the
 * k-chunk, its R x C scale products computed 16 blocks at a time beforehand (one vmulps for 16
 * blocks, the products then broadcast two at a time from memory). Per (row, token, pair) the
 * tile's inner step is vpdpbusd (from the row's correction), vcvtdq2ps and one FMA; the
 * tokens' pairs are permuted to the pair layout and biased once per chunk, for every row group
 * (per group of 4 rows, that work cost as much as a quarter of the tile's). Accumulators are
 * parked in memory between k-chunks (an exact store / reload). Scratch: ~330 KiB of stack. */

#ifndef T_R
#define T_R 4
#endif
#ifndef T_C
#define T_C 4
#endif
#ifndef T_KC
#define T_KC 64 /* blocks per k-chunk (even): the packed rows (16 KiB) stay in L1 */
#endif
#define T_DX 16384 /* activation scales per token chunk (fp16, 32 KiB) */
#define T_TC 64    /* tokens per chunk */
#define T_XU 4096  /* the chunk's token pairs, biased and permuted once (256 KiB of stack) */

struct t_scratch {
    __m512i w[T_KC / 2][T_R];       /* pair layout, signed */
    __m512i corr[T_KC / 2][T_R];    /* bias_corr of w */
    uint16_t dw[T_R][T_KC];         /* fp16 scales (0 for the empty half of a last pair) */
    float sc[T_R * T_C][T_KC + 16]; /* sc[r * T_C + c][b] = dw[r][b] * dx[c][b]; 0 past kc */
    uint16_t dx[T_DX];              /* fp16 scales [token][block] of the chunk */
    __m512 park[T_TC][T_R];
};

/* nr rows of w (wbytes apart), blocks [kb0, kb0 + kc) of nb, into s. */
AF_TARGET_AVX512 static AF_INLINE void t_pack(uint32_t t, int nr, const uint8_t *w, size_t wbytes,
                                              int64_t kb0, int64_t kc, int64_t nb,
                                              struct t_scratch *s)
{
    const size_t bb = blk_bytes(t);
    for (int r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * wbytes;
        /* What the next pack reads: this row's next k-chunk, or the next group's first. */
        const uint8_t *pf = kb0 + kc < nb ? wr + (size_t)(kb0 + kc) * bb : wr + (size_t)nr * wbytes;
        for (int64_t b = 0; b < kc; b += 2) {
            _mm_prefetch((const char *)pf + (size_t)b * bb, _MM_HINT_T0);
            _mm_prefetch((const char *)pf + (size_t)b * bb + 64, _MM_HINT_T0);
            const int two = b + 1 < kc;
            uint16_t d0, d1 = 0;
            const __m256i w0 = wblock(t, wr, kb0 + b, &d0);
            const __m256i w1 = two ? wblock(t, wr, kb0 + b + 1, &d1) : _mm256_setzero_si256();
            const __m512i v = to_pair_layout(_mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1));
            s->w[b / 2][r] = v;
            s->corr[b / 2][r] = bias_corr(v);
            s->dw[r][b] = d0;
            s->dw[r][b + 1] = d1;
        }
    }
}

/* One step of the tile: the pair p of the chunk (xu: the tokens' pair kb0 / 2 + p, np apart). */
AF_TARGET_AVX512 static AF_INLINE void t_step(int nr, int nc, const struct t_scratch *s, int64_t p,
                                              const __m512i *xu, int64_t np, __m512 acc[T_R][T_C])
{
    __m512i xv[T_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        xv[c] = _mm512_load_si512(xu + c * np);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
        const __m512i w = s->w[p][r], corr = s->corr[p][r];
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const __m512i q = _mm512_dpbusd_epi32(corr, xv[c], w);
            double sp;
            memcpy(&sp, &s->sc[r * T_C + c][2 * p], sizeof sp);
            acc[r][c] = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(sp)), _mm512_cvtepi32_ps(q),
                                        acc[r][c]);
        }
    }
}

/* The tile's scale products sc[r * T_C + c][b] for b in [0, kc), 16 at a time; 0 past kc. */
AF_TARGET_AVX512 static AF_INLINE void t_scales(int nr, int nc, struct t_scratch *s, int64_t kb0,
                                                int64_t kc, int64_t nb, const uint16_t *dx)
{
    for (int64_t b = 0; b < kc; b += 16) {
        const __mmask16 k = (__mmask16)(kc - b >= 16 ? 0xFFFF : (1u << (kc - b)) - 1);
        __m512 dxv[T_C];
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            dxv[c] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, dx + c * nb + kb0 + b));
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 dwv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, &s->dw[r][b]));
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                _mm512_storeu_ps(&s->sc[r * T_C + c][b], _mm512_mul_ps(dwv, dxv[c]));
        }
    }
}

/* nr packed rows x nc tokens (xu: the first token's pairs, biased, in the pair layout, np
 * apart; dx: its fp16 scales, nb apart) over blocks [kb0, kb0 + kc) of nb; park: the tokens'
 * parking slots; first / last: the k-chunk's position. */
AF_TARGET_AVX512 static AF_INLINE void t_tile(int nr, int nc, struct t_scratch *s, int64_t kb0,
                                              int64_t kc, int64_t nb, const __m512i *xu, int64_t np,
                                              const uint16_t *dx, __m512 (*park)[T_R], int first,
                                              int last, float *out, int64_t ldo)
{
    t_scales(nr, nc, s, kb0, kc, nb, dx);
    __m512 acc[T_R][T_C];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc[r][c] = first ? _mm512_setzero_ps() : park[c][r];
    const __m512i *xp = xu + kb0 / 2;
    for (int64_t p = 0; 2 * p < kc; p++)
        t_step(nr, nc, s, p, xp + p, np, acc);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            if (last)
                out[c * ldo + r] = hsum16(acc[r][c]);
            else
                park[c][r] = acc[r][c];
        }
}

/* Every token of the chunk (tc of them, their pairs at xu, np apart) against nr packed rows. */
AF_TARGET_AVX512 static AF_INLINE void t_groups(int nr, struct t_scratch *s, int64_t kb0,
                                                int64_t kc, int64_t nb, const __m512i *xu,
                                                int64_t np, int64_t tc, int first, int last,
                                                float *out, int64_t ldo)
{
    int64_t c = 0;
    for (; c + T_C <= tc; c += T_C)
        t_tile(nr, T_C, s, kb0, kc, nb, xu + c * np, np, s->dx + c * nb, s->park + c, first, last,
               out + c * ldo, ldo);
    for (; c < tc; c++)
        t_tile(nr, 1, s, kb0, kc, nb, xu + c * np, np, s->dx + c * nb, s->park + c, first, last,
               out + c * ldo, ldo);
}

/* ---- streaming matmul for small batches ---------------------------------------------------
 * Several sequences decoding together (m = 2 .. S_MMAX tokens): the weights come from DRAM and
 * serve only a few tokens, so packing them (the tile above) costs more than it saves. Here the
 * tokens are biased and permuted to the pair layout once per call; then each weight pair is
 * loaded once into a register, permuted, and used at once by up to S_C tokens (all m tokens
 * before the next row group). The rows' fp16 scales are gathered and their products with the
 * tokens' scales computed 16 blocks at a time before the integer loop, which prefetches the
 * weights S_PF bytes ahead: without that the loop waits on DRAM (bench/quant --copies 32, m = 8: 74
 * against 170 GFLOP/s). Per output the arithmetic is vec_dot's (pair layout, +0 start, pairs
 * in order, hsum16), so the bits are too. Scratch: ~190 KiB of stack. */

#define S_R 2      /* weight rows at once */
#define S_C 8      /* tokens at once */
#define S_MMAX 16  /* the tile takes over above this */
#define S_PMAX 160 /* pairs per row (k <= 10240); longer rows take the tile or the dot */
#define S_PF 8192  /* prefetch distance, bytes: a 2-row group of k = 896 is only 1.9 KB */

struct s_scratch {
    __m512i xu[S_MMAX][S_PMAX];      /* the tokens' pairs, pair layout, biased by 0x80 */
    uint16_t dx[S_MMAX][2 * S_PMAX]; /* their fp16 scales; 0 past nb */
    float dw[S_R][2 * S_PMAX];       /* the row group's scales; 0 past nb */
    float sc[S_R][S_C][2 * S_PMAX];  /* sc[r][c][b] = dw[r][b] * dx[c0 + c][b] */
};

/* Row w's pair p (blocks 2p, 2p + 1; one block when `two` is 0) in the pair layout. */
AF_TARGET_AVX512 static AF_INLINE __m512i s_wpair(uint32_t t, const uint8_t *w, int64_t p, int two)
{
    uint16_t d;
    const __m256i w0 = wblock(t, w, 2 * p, &d);
    const __m256i w1 = two ? wblock(t, w, 2 * p + 1, &d) : _mm256_setzero_si256();
    return to_pair_layout(_mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1));
}

/* The scales of nr rows (wbytes apart) as floats, into s->dw. */
AF_TARGET_AVX512 static AF_INLINE void s_dw(uint32_t t, int nr, const uint8_t *w, size_t wbytes,
                                            int64_t nb, struct s_scratch *s)
{
    for (int r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * wbytes;
        int64_t b = 0;
        for (; b + 4 <= nb; b += 4)
            _mm_storeu_ps(&s->dw[r][b], scales4(t, wr, b));
        for (; b < nb; b++)
            s->dw[r][b] = _cvtsh_ss(t == GGML_TYPE_Q8_0   ? ((const struct blk_q8_0 *)wr)[b].d
                                    : t == GGML_TYPE_Q4_0 ? ((const struct blk_q4_0 *)wr)[b].d
                                                          : ((const struct blk_q5_0 *)wr)[b].d);
        s->dw[r][nb] = 0;
    }
}

/* sc for nr rows against tokens c0 .. c0 + nc - 1, blocks [0, nb rounded up to even). */
AF_TARGET_AVX512 static AF_INLINE void s_sc(int nr, int nc, int64_t c0, int64_t nb,
                                            struct s_scratch *s)
{
    const int64_t nb2 = (nb + 1) & ~(int64_t)1;
    for (int64_t b = 0; b < nb2; b += 16) {
        const __mmask16 k = (__mmask16)(nb2 - b >= 16 ? 0xFFFF : (1u << (nb2 - b)) - 1);
        __m512 dxv[S_C];
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            dxv[c] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, &s->dx[c0 + c][b]));
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 dwv = _mm512_maskz_loadu_ps(k, &s->dw[r][b]);
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++)
                _mm512_mask_storeu_ps(&s->sc[r][c][b], k, _mm512_mul_ps(dwv, dxv[c]));
        }
    }
}

/* nr rows x nc tokens (from c0) over every pair; out[c * ldo + r]. pf: what to prefetch. */
AF_TARGET_AVX512 static AF_INLINE void s_tile(uint32_t t, int nr, int nc, const uint8_t *w,
                                              size_t wbytes, int64_t nb, int64_t c0,
                                              const uint8_t *pf, const struct s_scratch *s,
                                              float *out, int64_t ldo)
{
    __m512 acc[S_R][S_C];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc[r][c] = _mm512_setzero_ps();
    const int64_t np = (nb + 1) / 2;
    const size_t pb = 2 * blk_bytes(t);
    for (int64_t p = 0; p < np; p++) {
        const int two = 2 * p + 1 < nb;
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            if (pf) {
                const char *a = (const char *)pf + (size_t)r * wbytes + (size_t)p * pb;
                _mm_prefetch(a, _MM_HINT_T0);
                _mm_prefetch(a + 64, _MM_HINT_T0);
            }
            const __m512i wv = s_wpair(t, w + (size_t)r * wbytes, p, two);
            const __m512i corr = bias_corr(wv);
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++) {
                const __m512i q = _mm512_dpbusd_epi32(corr, s->xu[c0 + c][p], wv);
                double sp;
                memcpy(&sp, &s->sc[r][c][2 * p], sizeof sp);
                acc[r][c] = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(sp)),
                                            _mm512_cvtepi32_ps(q), acc[r][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            out[c * ldo + r] = hsum16(acc[r][c]);
}

/* One row group (nr rows at w) against all m tokens; the first token group prefetches the
 * group's bytes one group or S_PF ahead, whichever is further (rows are contiguous, so the
 * groups' prefetches tile the range). */
AF_TARGET_AVX512 static AF_INLINE void s_group(uint32_t t, int nr, const uint8_t *w, size_t wbytes,
                                               int64_t nb, int64_t m, struct s_scratch *s,
                                               float *out, int64_t ldo)
{
    s_dw(t, nr, w, wbytes, nb, s);
    for (int64_t c0 = 0; c0 < m; c0 += S_C) {
        const int nc = m - c0 < S_C ? (int)(m - c0) : S_C;
        const size_t ahead = (size_t)nr * wbytes > S_PF ? (size_t)nr * wbytes : S_PF;
        const uint8_t *pf = c0 == 0 ? w + ahead : NULL;
        float *o = out + c0 * ldo;
#define S_CASE(n)                                                                                  \
    case n:                                                                                        \
        s_sc(nr, n, c0, nb, s);                                                                    \
        s_tile(t, nr, n, w, wbytes, nb, c0, pf, s, o, ldo);                                        \
        break;
        switch (nc) {
            S_CASE(1)
            S_CASE(2)
            S_CASE(3)
            S_CASE(4)
            S_CASE(5)
            S_CASE(6)
            S_CASE(7)
        default:
            S_CASE(8)
        }
#undef S_CASE
    }
}

AF_TARGET_AVX512 static AF_INLINE void matmul_stream(uint32_t t, const void *W, size_t wbytes,
                                                     int64_t nb, const void *X, size_t xbytes,
                                                     int64_t m, float *out, int64_t ldo, int64_t r0,
                                                     int64_t r1)
{
    struct s_scratch s;
    const int64_t np = (nb + 1) / 2;
    for (int64_t c = 0; c < m; c++) {
        const struct blk_q8_0 *xb =
            (const struct blk_q8_0 *)((const uint8_t *)X + (size_t)c * xbytes);
        for (int64_t p = 0; p < np; p++) {
            const int two = 2 * p + 1 < nb;
            s.xu[c][p] =
                _mm512_xor_si512(to_pair_layout(load_2x32(xb[2 * p].qs, xb[2 * p + 1].qs, two)),
                                 _mm512_set1_epi8((char)0x80));
        }
        for (int64_t b = 0; b < nb; b++)
            s.dx[c][b] = xb[b].d;
        s.dx[c][nb] = 0;
    }
    const uint8_t *Wb = W;
    int64_t r = r0;
    for (; r + S_R <= r1; r += S_R)
        s_group(t, S_R, Wb + (size_t)r * wbytes, wbytes, nb, m, &s, out + r, ldo);
    for (; r < r1; r++)
        s_group(t, 1, Wb + (size_t)r * wbytes, wbytes, nb, m, &s, out + r, ldo);
}

AF_TARGET_AVX512 static AF_INLINE void matmul_t(uint32_t t, const void *W, size_t wbytes, int64_t k,
                                                const void *X, size_t xbytes, int64_t m, float *out,
                                                int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK, np = (nb + 1) / 2;
    int64_t tcmax = nb > 0 ? T_DX / nb : 0;
    tcmax = tcmax > T_TC ? T_TC : tcmax;
    if (np > 0 && tcmax > T_XU / np)
        tcmax = T_XU / np;
    if (m >= 2 && m <= S_MMAX && (nb + 1) / 2 < S_PMAX) {
        matmul_stream(t, W, wbytes, nb, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    if (m < T_C || tcmax < T_C) { /* decode, or rows too long for the scale buffer */
        quant_matmul_loop(t == GGML_TYPE_Q4_0 ? dot_q4_0 : dot_q5_0, W, wbytes, k, X, xbytes, m,
                          out, ldo, r0, r1);
        return;
    }
    struct t_scratch s;
    __m512i xu[T_XU];
    const uint8_t *Wb = W, *Xb = X;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax;
        const uint8_t *x = Xb + (size_t)j0 * xbytes;
        for (int64_t c = 0; c < tc; c++) {
            const struct blk_q8_0 *xr = (const struct blk_q8_0 *)(x + (size_t)c * xbytes);
            for (int64_t b = 0; b < nb; b++)
                s.dx[c * nb + b] = xr[b].d;
            for (int64_t p = 0; p < np; p++)
                xu[c * np + p] = _mm512_xor_si512(
                    to_pair_layout(load_2x32(xr[2 * p].qs, xr[2 * p + 1].qs, 2 * p + 1 < nb)),
                    _mm512_set1_epi8((char)0x80));
        }
        for (int64_t r = r0; r < r1;) {
            const int nr = r1 - r < T_R ? 1 : T_R;
            const uint8_t *w = Wb + (size_t)r * wbytes;
            float *o = out + j0 * ldo + r;
            for (int64_t kb0 = 0; kb0 < nb; kb0 += T_KC) {
                const int64_t kc = nb - kb0 < T_KC ? nb - kb0 : T_KC;
                const int first = kb0 == 0, last = kb0 + kc == nb;
                if (nr == T_R) {
                    t_pack(t, T_R, w, wbytes, kb0, kc, nb, &s);
                    t_groups(T_R, &s, kb0, kc, nb, xu, np, tc, first, last, o, ldo);
                } else {
                    t_pack(t, 1, w, wbytes, kb0, kc, nb, &s);
                    t_groups(1, &s, kb0, kc, nb, xu, np, tc, first, last, o, ldo);
                }
            }
            r += nr;
        }
    }
}

AF_TARGET_AVX512 static void matmul_q4_0(const void *W, size_t wbytes, int64_t k, const void *X,
                                         size_t xbytes, int64_t m, float *out, int64_t ldo,
                                         int64_t r0, int64_t r1)
{
    matmul_t(GGML_TYPE_Q4_0, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

AF_TARGET_AVX512 static void matmul_q5_0(const void *W, size_t wbytes, int64_t k, const void *X,
                                         size_t xbytes, int64_t m, float *out, int64_t ldo,
                                         int64_t r0, int64_t r1)
{
    matmul_t(GGML_TYPE_Q5_0, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

/* Up to 4 rows x nv (<= 4) vectors of y in registers across all n terms; a multiply, then an
 * add, as every ISA's axpy. */
AF_TARGET_AVX512 static AF_INLINE void axr_tile_avx512(int nr, int nv, int64_t n,
                                                       const float *const *a,
                                                       const float *const *xs, float *const *y,
                                                       int64_t i0)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            acc[r][v] = _mm512_loadu_ps(y[r] + i0 + 16 * v);
    for (int64_t t = 0; t < n; t++) {
        __m512 xv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            xv[v] = _mm512_loadu_ps(xs[t] + i0 + 16 * v);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m512 ab = _mm512_set1_ps(a[r][t]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++)
                acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(ab, xv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
            _mm512_storeu_ps(y[r] + i0 + 16 * v, acc[r][v]);
}

#define AXR_ROWS(nv)                                                                               \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        axr_tile_avx512(1, nv, n, ar, xs, yr, i);                                                  \
        break;                                                                                     \
    case 2:                                                                                        \
        axr_tile_avx512(2, nv, n, ar, xs, yr, i);                                                  \
        break;                                                                                     \
    case 3:                                                                                        \
        axr_tile_avx512(3, nv, n, ar, xs, yr, i);                                                  \
        break;                                                                                     \
    default:                                                                                       \
        axr_tile_avx512(4, nv, n, ar, xs, yr, i);                                                  \
        break;                                                                                     \
    }

AF_TARGET_AVX512 static void axpy_rows_avx512(int64_t len, int64_t n, int64_t ng,
                                              const float *const *a, const float *const *xs,
                                              float *const *y)
{
    for (int64_t r0 = 0; r0 < ng; r0 += 4) {
        const int nr = ng - r0 < 4 ? (int)(ng - r0) : 4;
        const float *const *ar = a + r0;
        float *const *yr = y + r0;
        int64_t i = 0;
        for (; i + 64 <= len; i += 64)
            AXR_ROWS(4)
        for (; i + 16 <= len; i += 16)
            AXR_ROWS(1)
        for (int r = 0; r < nr; r++)
            for (int64_t t = 0; t < n; t++)
                for (int64_t l = i; l < len; l++)
                    yr[r][l] += ar[r][t] * xs[t][l];
    }
}
#undef AXR_ROWS

/* Up to 4 query rows x nb (<= 4) blocks of 16 positions in registers (16 accumulators) across
 * all of i; the lanes of the last block outside `last` are neither read nor written. */
AF_TARGET_AVX512 static AF_INLINE void scores_tile_avx512(int nr, int nb, int64_t hd,
                                                          const float *const *q,
                                                          const float *const *kb, float *const *sc,
                                                          int64_t t0, __mmask16 last)
{
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < hd; i++) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++)
            kv[v] = v == nb - 1 ? _mm512_maskz_loadu_ps(last, kb[v] + i * 16)
                                : _mm512_loadu_ps(kb[v] + i * 16);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const __m512 qb = _mm512_set1_ps(q[r][i]);
#pragma GCC unroll 4
            for (int v = 0; v < nb; v++)
                acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(qb, kv[v]));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
        for (int v = 0; v < nb; v++) {
            if (v == nb - 1)
                _mm512_mask_storeu_ps(sc[r] + t0 + 16 * v, last, acc[r][v]);
            else
                _mm512_storeu_ps(sc[r] + t0 + 16 * v, acc[r][v]);
        }
}

#define SCORES_ROWS(nb, last)                                                                      \
    switch (nr) {                                                                                  \
    case 1:                                                                                        \
        scores_tile_avx512(1, nb, hd, qg, kb + t / 16, sg, t, last);                               \
        break;                                                                                     \
    case 2:                                                                                        \
        scores_tile_avx512(2, nb, hd, qg, kb + t / 16, sg, t, last);                               \
        break;                                                                                     \
    case 3:                                                                                        \
        scores_tile_avx512(3, nb, hd, qg, kb + t / 16, sg, t, last);                               \
        break;                                                                                     \
    default:                                                                                       \
        scores_tile_avx512(4, nb, hd, qg, kb + t / 16, sg, t, last);                               \
        break;                                                                                     \
    }

AF_TARGET_AVX512 static void scores_avx512(int64_t len, int64_t hd, int64_t ng,
                                           const float *const *q, const float *const *kb,
                                           float *const *sc)
{
    for (int64_t g0 = 0; g0 < ng; g0 += 4) {
        const int nr = ng - g0 < 4 ? (int)(ng - g0) : 4;
        const float *const *qg = q + g0;
        float *const *sg = sc + g0;
        int64_t t = 0;
        for (; t + 64 <= len; t += 64)
            SCORES_ROWS(4, 0xFFFF)
        for (; t < len; t += 16) {
            const __mmask16 m = (__mmask16)(len - t >= 16 ? 0xFFFF : (1u << (len - t)) - 1);
            SCORES_ROWS(1, m)
        }
    }
}
#undef SCORES_ROWS

const struct quant_kernels quant_kernels_avx512 = {
    .name = "avx512",
    .scores = scores_avx512,
    .axpy_rows = axpy_rows_avx512,
    .exp = quant_exp_avx512,
    .silu_mul = quant_silu_mul_avx512,
    .scale_max = quant_scale_max_avx512,
    .scale = quant_scale_avx512,
    .vec_dot =
        {
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q5_0] = dot_q5_0,
            [GGML_TYPE_Q8_0] = quant_avx512_dot_q8_0,
        },
    .matmul =
        {
            [GGML_TYPE_F32] = quant_avx512_matmul_f32,
            [GGML_TYPE_F16] = quant_avx512_matmul_f16,
            [GGML_TYPE_BF16] = quant_avx512_matmul_bf16,
            [GGML_TYPE_Q4_0] = matmul_q4_0,
            [GGML_TYPE_Q5_0] = matmul_q5_0,
            [GGML_TYPE_Q4_K] = quant_avx512_matmul_q4_k,
            [GGML_TYPE_Q5_K] = quant_avx512_matmul_q5_k,
            [GGML_TYPE_Q6_K] = quant_avx512_matmul_q6_k,
            [GGML_TYPE_Q8_0] = quant_avx512_matmul_q8_0,
        },
    .m1_invariant = {[GGML_TYPE_Q8_0] = 1},
};

#else

int quant_avx512_usable(void)
{
    return 0;
}

const struct quant_kernels quant_kernels_avx512 = {.name = "avx512"};

#endif
