/*
 * quant_avx512_r16.c - Q8_0, Q4_0 and Q5_0 weights against Q8_0 activations on AVX-512 VNNI,
 * 16 weight rows in the 16 lanes of a register: the vec_dot and the matmul for every batch size.
 *
 * Why rows in the lanes: with one row's dwords in the lanes (the earlier AVX-512 kernels' pair
 * layout) every vpdpbusd is followed by a conversion and an FMA per token, so the float work equals
 * the integer work. Here a 32-element block of 16 rows is transposed to 8 registers (register i
 * holds dword i of each row), and a token's block costs 8 vpdpbusd, one conversion, one multiply
 * and one FMA for 16 outputs. The transpose is done once per block and serves every token of a call
 * of up to R_FLY_MAX tokens (bigger calls pack each 16-row group once per token chunk). One token
 * sums the rows' lanes with a tree of unpacks instead (Q8_0). Q4_0 and Q5_0 transpose their
 * packed nibbles (and Q5_0 its high bits with them) before they split them.
 *
 * The arithmetic per output, whatever the batch size, token offset or row split: for each block b
 * in order, the exact integer sum isum_b of the 32 products, then acc = fma(dw_b * dx_b, isum_b,
 * acc) from acc = +0, the scale product rounded once. The vec_dot computes the same chain with
 * scalar instructions, so a lone token and a batch of any size give the same bits (batch
 * invariance, tests/test_quant). It is also nearer ggml's reference order (a sequential sum over
 * blocks) than the pair layout.
 *
 * The integer sums use vpdpbusd (unsigned x signed bytes) with the weights as unsigned bytes
 * u = w + B and the activations signed: sum u x - B sum x, with B = 128 for Q8_0 (u = w ^ 0x80),
 * 8 for Q4_0 (u = the nibble) and 16 for Q5_0 (u = the nibble and its fifth bit). The correction
 * depends on the token alone, so it is computed once per token block and starts the sum.
 *
 * Every function carries AF_TARGET_AVX512; the table in quant_avx512.c selects them.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "engine/quant_avx512_t16.h"
#include "engine/quant_x86.h"

#define AF_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

#define R_KC 128     /* blocks per k chunk when packing: the packed copy of 16 rows is 72 KiB */
#define R_TC 64      /* tokens per token chunk */
#define R_C 8        /* tokens in registers */
#define R_FLY_MAX 16 /* batches up to this transpose on the fly; larger ones pack */
/* Token-block terms per chunk: R_TC tokens x R_KC blocks, or R_FLY_MAX tokens x R_XN / R_FLY_MAX
 * blocks (k up to 16,384) when the batch is transposed on the fly. */
#define R_XN (R_TC * R_KC)

/* The token chunk's per-block terms: -B * (sum of the block's bytes) and the scale; token c's
 * block b at [c * ld + b]. */
struct r_x {
    int32_t corr[R_XN];
    float d[R_XN];
    float s[R_XN]; /* Q4_1 / Q5_1: the sum of the block's bytes, for the minimum's term */
    int64_t ld;
};

/* 16 rows' blocks of one k chunk, transposed and unsigned, with their scales. */
struct r_pack {
    __m512i w[R_KC][8];
    __m512 d[R_KC];
    __m512 m[R_KC]; /* Q4_1 / Q5_1: the minimums */
};

AF_TARGET_AVX512 static AF_INLINE int32_t load_i32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The bias B of the unsigned form (above) of weight type t (none for Q4_1 / Q5_1, whose levels
 * are unsigned). */
static inline int32_t r_bias(uint32_t t)
{
    return t == GGML_TYPE_Q8_0 ? 128 : t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0;
}

/* The block at p (type t) as 32 unsigned bytes u = w + B, element order. */
AF_TARGET_AVX512 static AF_INLINE __m256i r_u(uint32_t t, const uint8_t *p)
{
    if (t == GGML_TYPE_Q8_0)
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + 2)),
                                _mm256_set1_epi8((char)0x80));
    const uint8_t *qs = p + quant_b32_qoff(t) + (quant_b32_five(t) ? 4 : 0);
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i q =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xF));
    if (!quant_b32_five(t))
        return q;
    uint32_t qh;
    memcpy(&qh, p + quant_b32_qoff(t), sizeof qh);
    return _mm256_mask_add_epi8(q, (__mmask32)qh, q, _mm256_set1_epi8(16));
}

/* vec_dot: the lanes' chain for one row and one token, in scalar instructions. */
AF_TARGET_AVX512 static AF_INLINE float r_dot(uint32_t t, int64_t n, const void *w, const void *x)
{
    const uint8_t *wb = w;
    const struct blk_q8_0 *xb = x;
    const int64_t nb = n / QK;
    const size_t bsz = quant_b32_bytes(t);
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = wb + (size_t)b * bsz;
        const __m256i v = _mm256_dpbusd_epi32(_mm256_setzero_si256(), r_u(t, p),
                                              _mm256_loadu_si256((const __m256i *)xb[b].qs));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        const int32_t sx = quant_b32_sum(xb[b].qs);
        const int32_t isum = _mm_cvtsi128_si32(h) - r_bias(t) * sx;
        uint16_t d;
        memcpy(&d, p, sizeof d);
        const __m128 dx = _mm_set_ss(_cvtsh_ss(xb[b].d));
        const __m128 s = _mm_mul_ss(_mm_set_ss(_cvtsh_ss(d)), dx);
        acc = _mm_fmadd_ss(s, _mm_set_ss((float)isum), acc);
        if (quant_b32_has_min(
                t)) { /* then the minimum's term, m dx (sum of x), its product rounded */
            memcpy(&d, p + 2, sizeof d);
            acc =
                _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(_cvtsh_ss(d)), dx), _mm_set_ss((float)sx), acc);
        }
    }
    return _mm_cvtss_f32(acc);
}

/* a[j] = [row j | row j + 8] of block b as unsigned bytes (Q8_0). */
AF_TARGET_AVX512 static AF_INLINE void r_pairs(uint32_t t, const uint8_t *const *rp, int64_t b,
                                               __m512i a[8])
{
    const size_t o = (size_t)b * quant_b32_bytes(t);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        a[j] =
            _mm512_inserti64x4(_mm512_castsi256_si512(r_u(t, rp[j] + o)), r_u(t, rp[j + 8] + o), 1);
}

/* Q4_0 / Q5_0: the transposed packed nibbles P (dword i's low nibbles are elements 4i..4i+3,
 * its high ones 16+4i..16+4i+3, the token's dword 4+i) into T; with five, add 16 to the bytes of
 * T[i] that K[i] selects (the fifth bits). */
AF_TARGET_AVX512 static AF_INLINE void r_split(const __m512i P[4], const __mmask64 *K, int five,
                                               __m512i T[8])
{
    const __m512i m4 = _mm512_set1_epi8(0xF), sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i lo = _mm512_and_si512(P[i], m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(P[i], 4), m4);
        T[i] = five ? _mm512_mask_add_epi8(lo, K[i], lo, sixteen) : lo;
        T[4 + i] = five ? _mm512_mask_add_epi8(hi, K[4 + i], hi, sixteen) : hi;
    }
}

/* Block b of the 16 rows rp[0..15]: T[i] lane r = dword i of row r's unsigned bytes. For Q4_0 /
 * Q5_0 with Pout set, the packed nibbles (and Q5_0's fifth-bit masks, Kout) instead of T. */
AF_TARGET_AVX512 static AF_INLINE void r_block_parts(uint32_t t, const uint8_t *const *rp,
                                                     int64_t b, __m512i T[8], __m512i *Pout,
                                                     __mmask64 *Kout)
{
    if (t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1) {
        /* Transpose the packed nibbles (4 dwords a row), then split them: dword i's low
         * nibbles are elements 4i..4i+3, its high ones 16+4i..16+4i+3 (the token's dword 4+i). */
        const size_t o = (size_t)b * quant_b32_bytes(t) + quant_b32_qoff(t);
        __m512i P[4];
        q16_t16(rp, o, P);
        if (Pout) {
            memcpy(Pout, P, sizeof P);
            return;
        }
        r_split(P, NULL, 0, T);
        return;
    }
    __m512i a[8], u[8];
    if (quant_b32_five(t)) {
        /* The 20 bytes of qh and qs (5 dwords a row, masked loads: nothing past the block) */
        const size_t o = (size_t)b * quant_b32_bytes(t) + quant_b32_qoff(t);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(0xFFFFF, rp[j] + o)),
                _mm256_maskz_loadu_epi8(0xFFFFF, rp[j + 8] + o), 1);
    } else {
        r_pairs(t, rp, b, a);
    }
    /* a[j]'s 128-bit lanes: row j dwords 0-3, 4-7, row j + 8 dwords 0-3, 4-7. */
    q16_unpack(a, u);
    if (quant_b32_five(t)) {
        /* Dword 0 is qh, dwords 1-4 the packed nibbles; split them as Q4_0's, then add 16
         * where the element's qh bit is set: element 4i + k (16 + 4i + k) takes bit k of
         * nibble i % 2 of qh's byte i / 2 (2 + i / 2), copied to the dword's bytes. */
        const __m512i qh = q16_lo(u[0], u[4]);
        const __m512i nib[2] = {_mm512_set1_epi32(0x08040201), _mm512_set1_epi32((int)0x80402010)};
        __m512i by[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            by[j] = _mm512_shuffle_epi8(
                qh, _mm512_add_epi8(_mm512_set1_epi8((char)j),
                                    _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0)));
        __m512i P[4];
        __mmask64 K[8];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            P[i] = i == 0   ? q16_lo(u[1], u[5])
                   : i == 1 ? q16_lo(u[2], u[6])
                   : i == 2 ? q16_lo(u[3], u[7])
                            : q16_hi(u[0], u[4]);
            K[i] = _mm512_test_epi8_mask(by[i / 2], nib[i % 2]);
            K[4 + i] = _mm512_test_epi8_mask(by[2 + i / 2], nib[i % 2]);
        }
        if (Pout) {
            memcpy(Pout, P, sizeof P);
            memcpy(Kout, K, sizeof K);
            return;
        }
        r_split(P, K, 1, T);
        return;
    }
    q16_finish(u, T);
}

AF_TARGET_AVX512 static AF_INLINE void r_block(uint32_t t, const uint8_t *const *rp, int64_t b,
                                               __m512i T[8])
{
    r_block_parts(t, rp, b, T, NULL, NULL);
}

/* The 16 rows' scales (fo = 0) or minimums (fo = 2, Q4_1 / Q5_1) of blocks b .. b + 3, D[q]
 * lane j = row j's fp16 at byte fo of block b + q: two loads and a word permute a row, then a
 * 4 x 4 transpose in each 128-bit lane (a gather a block cost more than the sums of a decode). */
AF_TARGET_AVX512 static AF_INLINE void r_scales4(uint32_t t, const uint8_t *const *rp, int64_t b,
                                                 size_t fo, __m512 D[4])
{
    /* The 4 words' offsets (blocks of 17, 9, 10, 11 or 12 words); no load reaches past block
     * b + 3 (past the first 64 bytes, Q5_0's and Q5_1's second load takes one word). */
    const int w1 = (int)(quant_b32_bytes(t) / 2), w0 = (int)(fo / 2), hi = w0 + 3 * w1;
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                         0, 0, 0, 0, 0, 0, 0, 0, hi, w0 + 2 * w1, w0 + w1, w0);
    const size_t o = (size_t)b * quant_b32_bytes(t);
    __m128 f[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) {
        const uint8_t *p = rp[j] + o;
        __m512i d;
        if (t == GGML_TYPE_Q8_0)
            d = _mm512_permutex2var_epi16(_mm512_loadu_si512(p), idx, _mm512_loadu_si512(p + 64));
        else if (hi < 32)
            d = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512(p));
        else
            d = _mm512_permutex2var_epi16(
                _mm512_loadu_si512(p), idx,
                _mm512_maskz_loadu_epi16((__mmask32)(1u << (hi - 32)), p + 64));
        f[j] = _mm_cvtph_ps(_mm512_castsi512_si128(d));
    }
    __m512 z[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) /* z[q] lane i: row 4i + q's four scales */
        z[q] = _mm512_insertf32x4(
            _mm512_insertf32x4(_mm512_insertf32x4(_mm512_castps128_ps512(f[q]), f[4 + q], 1),
                               f[8 + q], 2),
            f[12 + q], 3);
    const __m512 t0 = _mm512_unpacklo_ps(z[0], z[1]), t1 = _mm512_unpackhi_ps(z[0], z[1]);
    const __m512 t2 = _mm512_unpacklo_ps(z[2], z[3]), t3 = _mm512_unpackhi_ps(z[2], z[3]);
    D[0] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    D[1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
    D[2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
    D[3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
}

/* One block's scales of the 16 rows (the k chunk's last blocks, which 4-block loads would
 * overrun); gidx: the rows' byte offsets from rp[0]. */
AF_TARGET_AVX512 static AF_INLINE __m512 r_scales1(uint32_t t, const uint8_t *const *rp,
                                                   __m512i gidx, int64_t b, size_t fo)
{
    const __m512i g = _mm512_i32gather_epi32(gidx, rp[0] + (size_t)b * quant_b32_bytes(t) + fo, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* acc + (dw * dx) * (the token's exact block sum against T), xq the token's block quants; with
 * mn (Q4_1 / Q5_1), then + (mw * dx) * sx, sx the sum of the token's block (r_dot's chain). */
AF_TARGET_AVX512 static AF_INLINE __m512 r_token(const __m512i T[8], __m512 dw, __m512 mw, int mn,
                                                 const int8_t *xq, const struct r_x *xs, int64_t ix,
                                                 __m512 acc)
{
    const int32_t corr = xs->corr[ix];
    const float dx = xs->d[ix];
    __m512i q0 = _mm512_set1_epi32(corr), q1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        q0 = _mm512_dpbusd_epi32(q0, T[i], _mm512_set1_epi32(load_i32(xq + 4 * i)));
        q1 = _mm512_dpbusd_epi32(q1, T[4 + i], _mm512_set1_epi32(load_i32(xq + 16 + 4 * i)));
    }
    const __m512i q = _mm512_add_epi32(q0, q1);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(q), acc);
    if (mn)
        acc =
            _mm512_fmadd_ps(_mm512_mul_ps(mw, _mm512_set1_ps(dx)), _mm512_set1_ps(xs->s[ix]), acc);
    return acc;
}

/* The sums of the 8 dwords of each half of p[j] (p[j] = [item j | item j + 8]) into lane j
 * (j + 8) of the result, by a tree of unpacks and adds (14 shuffles against a transpose's 24). */
AF_TARGET_AVX512 static AF_INLINE __m512i r_lane_sums(const __m512i p[8])
{
    __m512i u[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]),
                                _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
    /* v0 (v1): per 128-bit lane, items 0-3 (4-7) over dwords 0-3, the same over 4-7, items
     * 8-11 (12-15) over 0-3, over 4-7. */
    const __m512i v0 =
        _mm512_add_epi32(_mm512_unpacklo_epi64(u[0], u[1]), _mm512_unpackhi_epi64(u[0], u[1]));
    const __m512i v1 =
        _mm512_add_epi32(_mm512_unpacklo_epi64(u[2], u[3]), _mm512_unpackhi_epi64(u[2], u[3]));
    return _mm512_add_epi32(q16_lo(v0, v1), q16_hi(v0, v1));
}

/* One token's exact block sums against block b of the 16 rows, without the transpose: each
 * register of two rows meets the token's block twice, and a tree of unpacks and adds sums each
 * row's 8 lanes (14 shuffles against the transpose's 24, which only pays with 2+ tokens). The
 * integer sums are exact, so the bits are those of the transposed path. */
AF_TARGET_AVX512 static AF_INLINE __m512i r_sums1(uint32_t t, const uint8_t *const *rp, int64_t b,
                                                  const int8_t *xq, int32_t corr)
{
    const __m512i xx = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)xq));
    __m512i a[8], p[8];
    r_pairs(t, rp, b, a);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
        p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a[j], xx);
    return _mm512_add_epi32(r_lane_sums(p), _mm512_set1_epi32(corr));
}

/* 16 blocks' terms from xb (n <= 16 of them, the rest zero): the sums of their bytes by
 * vpdpbusd against ones and r_sums1's tree of unpacks (exact integers). */
AF_TARGET_AVX512 static AF_INLINE void r_terms16(const struct blk_q8_0 *xb, int n, int32_t bias,
                                                 int32_t *corr, float *d, float *sums)
{
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i p[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) { /* [block j | block j + 8], as r_pairs pairs rows */
        const __m256i lo =
            j < n ? _mm256_loadu_si256((const __m256i *)xb[j].qs) : _mm256_setzero_si256();
        const __m256i hi =
            j + 8 < n ? _mm256_loadu_si256((const __m256i *)xb[j + 8].qs) : _mm256_setzero_si256();
        p[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones,
                                   _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    const __m512i S = r_lane_sums(p);
    _mm512_mask_storeu_epi32(corr, (__mmask16)((1u << n) - 1),
                             _mm512_mullo_epi32(S, _mm512_set1_epi32(-bias)));
    if (sums)
        _mm512_mask_storeu_ps(sums, (__mmask16)((1u << n) - 1), _mm512_cvtepi32_ps(S));
        /* one at a time: a vector load of 16 fp16 stored one by one waited on store forwarding */
#pragma GCC unroll 16
    for (int j = 0; j < n; j++)
        d[j] = _cvtsh_ss(xb[j].d);
}

/* The token chunk's terms for blocks [b0, b0 + kc), 16 blocks a round (r_terms16; the terms
 * of quant_b32_terms). Recomputed by every call, they were 23% of a call of two 16-row groups
 * at 8 tokens (205 ns for 8 tokens x 28 blocks one at a time), as the q and o projections'
 * chunks are. */
AF_TARGET_AVX512 static void r_prep_x(uint32_t t, const uint8_t *X, size_t xbytes, int64_t tc,
                                      int64_t b0, int64_t kc, struct r_x *s)
{
    s->ld = kc;
    const int32_t bias = r_bias(t);
    for (int64_t c = 0; c < tc; c++) {
        const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0;
        int64_t b = 0;
        float *sums = quant_b32_has_min(t) ? s->s + c * kc : NULL;
        for (; b + 16 <= kc; b += 16)
            r_terms16(xb + b, 16, bias, s->corr + c * kc + b, s->d + c * kc + b,
                      sums ? sums + b : NULL);
        if (b < kc)
            r_terms16(xb + b, (int)(kc - b), bias, s->corr + c * kc + b, s->d + c * kc + b,
                      sums ? sums + b : NULL);
    }
}

/* Prefetch block b's share (`per` lines) of a group's worth of `lines` lines from `next` (the
 * next group's bytes, or with packed groups quant_prefetch_ahead past this one's start), one
 * contiguous range: in order, so that the reads ahead stream like one row's.
 * Non-temporal (NTA): the weights are read once a step. With T0 the few L1 fill buffers held the
 * stream back (bench/quant -m 8 --copies 32: 147 GFLOP/s with T0, 207-223 with T1 or T2); NTA
 * against T1, alternated in one engine: a lone sequence 4-18% faster, eight 1-9%, prefill level
 * (docs/PERFORMANCE.md). */
AF_TARGET_AVX512 static AF_INLINE void r_prefetch(const uint8_t *next, size_t lines, size_t per,
                                                  int64_t b)
{
    const size_t l0 = per * (size_t)b, l1 = l0 + per < lines ? l0 + per : lines;
    const char *p = (const char *)next + 64 * l0;
    size_t n = l1 > l0 ? l1 - l0 : 0;
    /* Four a round: a loop of one took a counter, a compare and a branch a prefetch, and a
     * block of 16 Q8_0 rows prefetches 9 lines (A/B, -m 8: Q8_0 3-9% faster, Q5_0 0-5%). */
    for (; n >= 4; n -= 4, p += 256) {
        _mm_prefetch(p, _MM_HINT_NTA);
        _mm_prefetch(p + 64, _MM_HINT_NTA);
        _mm_prefetch(p + 128, _MM_HINT_NTA);
        _mm_prefetch(p + 192, _MM_HINT_NTA);
    }
    for (; n; n--, p += 64)
        _mm_prefetch(p, _MM_HINT_NTA);
}

/* nc (<= R_C) tokens against 16 rows over blocks [b0, b0 + kc), transposing as it goes; the
 * accumulators start at +0 (first) or at out's partial sums. xs: the tokens' terms. */
AF_TARGET_AVX512 static AF_INLINE void r_fly(uint32_t t, int nc, const uint8_t *const *rp,
                                             __m512i gidx, const uint8_t *next, size_t lines,
                                             size_t per, int64_t b0, int64_t kc, const uint8_t *X,
                                             size_t xbytes, const struct r_x *xs, int64_t c0,
                                             int first, float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[R_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    const int mn = quant_b32_has_min(t);
    for (int64_t b4 = 0; b4 < kc; b4 += 4) {
        __m512 D[4], M[4] = {0};
        const int nq = kc - b4 < 4 ? (int)(kc - b4) : 4;
        if (nq == 4) {
            r_scales4(t, rp, b0 + b4, 0, D);
            if (mn)
                r_scales4(t, rp, b0 + b4, 2, M);
        } else {
            for (int q = 0; q < nq; q++) {
                D[q] = r_scales1(t, rp, gidx, b0 + b4 + q, 0);
                if (mn)
                    M[q] = r_scales1(t, rp, gidx, b0 + b4 + q, 2);
            }
        }
        for (int q = 0; q < nq; q++) {
            const int64_t b = b4 + q;
            r_prefetch(next, lines, per, b);
            /* One token: Q8_0 sums without the transpose (bench/quant in cache: Q5_0 64-66
             * GFLOP/s transposed, 53-57 this way, as it unpacks each row). */
            if (nc == 1 && t == GGML_TYPE_Q8_0) {
                const struct blk_q8_0 *xb = (const struct blk_q8_0 *)X + b0 + b;
                const int64_t i = c0 * xs->ld + b;
                const __m512i is = r_sums1(t, rp, b0 + b, xb->qs, xs->corr[i]);
                acc[0] = _mm512_fmadd_ps(_mm512_mul_ps(D[q], _mm512_set1_ps(xs->d[i])),
                                         _mm512_cvtepi32_ps(is), acc[0]);
                continue;
            }
            __m512i T[8];
            r_block(t, rp, b0 + b, T);
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++) {
                const struct blk_q8_0 *xb =
                    (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0 + b;
                const int64_t i = (c0 + c) * xs->ld + b;
                acc[c] = r_token(T, D[q], M[q], mn, xb->qs, xs, i, acc[c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

/* The same for tokens c0 .. c0 + nc - 1 of the chunk, from the packed rows. */
AF_TARGET_AVX512 static AF_INLINE void r_packed(int nc, int mn, const struct r_pack *P, int64_t b0,
                                                int64_t kc, const uint8_t *X, size_t xbytes,
                                                const struct r_x *xs, int64_t c0, int first,
                                                float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[R_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t b = 0; b < kc; b++) {
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0 + b;
            const int64_t i = (c0 + c) * xs->ld + b;
            acc[c] = r_token(P->w[b], P->d[b], P->m[b], mn, xb->qs, xs, i, acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

/* Rows [r, r + nr) (nr <= 16) against the token chunk over blocks [b0, b0 + kc). */
AF_TARGET_AVX512 static AF_INLINE void r_group(uint32_t t, const uint8_t *W, size_t wbytes,
                                               int64_t r, int nr, int64_t b0, int64_t kc,
                                               const uint8_t *X, size_t xbytes, int64_t tc,
                                               const struct r_x *xs, struct r_pack *P, int first,
                                               float *out, int64_t ldo)
{
    const uint8_t *rp[16];
    int32_t off[16];
    for (int j = 0; j < 16; j++) { /* rows past the end repeat the last; they are not stored */
        const int jr = j < nr ? j : nr - 1;
        rp[j] = W + (size_t)(r + jr) * wbytes;
        off[j] = (int32_t)((size_t)jr * wbytes);
    }
    const __m512i gidx = _mm512_loadu_si512(off);
    /* Prefetch the next group, past r1 too: a thread's next range usually follows this one, and
     * a prefetch past the matrix does not fault. */
    const uint8_t *next = W + (size_t)(r + 16) * wbytes;
    const size_t lines = 16 * wbytes / 64, per = (lines + (size_t)kc - 1) / (size_t)kc;
    const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
    float *o = out + r;
    if (tc <= R_FLY_MAX) { /* passes of R_C tokens; the second finds the rows in L1 or L2 */
        for (int64_t c0 = 0; c0 < tc; c0 += R_C) {
            const int nc = tc - c0 < R_C ? (int)(tc - c0) : R_C;
            const uint8_t *Xc = X + (size_t)c0 * xbytes;
            float *oc = o + c0 * ldo;
#define R_FLY(n)                                                                                   \
    r_fly(t, n, rp, gidx, next, lines, per, b0, kc, Xc, xbytes, xs, c0, first, oc, ldo, mk)
            QUANT_NC_CASES(R_FLY)
#undef R_FLY
        }
        return;
    }
    for (int64_t b4 = 0; b4 < kc; b4 += 4) {
        const int nq = kc - b4 < 4 ? (int)(kc - b4) : 4;
        if (nq == 4) {
            r_scales4(t, rp, b0 + b4, 0, &P->d[b4]);
            if (quant_b32_has_min(t))
                r_scales4(t, rp, b0 + b4, 2, &P->m[b4]);
        } else {
            for (int q = 0; q < nq; q++) {
                P->d[b4 + q] = r_scales1(t, rp, gidx, b0 + b4 + q, 0);
                if (quant_b32_has_min(t))
                    P->m[b4 + q] = r_scales1(t, rp, gidx, b0 + b4 + q, 2);
            }
        }
        for (int q = 0; q < nq; q++) {
            r_prefetch(next, lines, per, b4 + q);
            r_block(t, rp, b0 + b4 + q, P->w[b4 + q]);
        }
    }
    for (int64_t c0 = 0; c0 < tc; c0 += R_C) {
        const int nc = tc - c0 < R_C ? (int)(tc - c0) : R_C;
        const uint8_t *Xc = X + (size_t)c0 * xbytes;
        float *oc = o + c0 * ldo;
#define R_PACKED(n)                                                                                \
    r_packed(n, quant_b32_has_min(t), P, b0, kc, Xc, xbytes, xs, c0, first, oc, ldo, mk)
        QUANT_NC_CASES(R_PACKED)
#undef R_PACKED
    }
}

AF_TARGET_AVX512 static AF_INLINE void r_matmul(uint32_t t, quant_vec_dot_fn dot, const void *W,
                                                size_t wbytes, int64_t k, const void *X,
                                                size_t xbytes, int64_t m, float *out, int64_t ldo,
                                                int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK;
    if (nb == 0 || wbytes > (size_t)INT32_MAX / 16) { /* gather offsets are int32 */
        quant_matmul_loop(dot, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    struct r_x xs;
    struct r_pack pack;
    const uint8_t *Xb = X;
    /* A small batch is transposed on the fly and takes long k chunks, so that a decode streams
     * each row group once; a larger one packs each group once per token chunk. */
    const int64_t tcmax = m <= R_FLY_MAX ? R_FLY_MAX : R_TC;
    const int64_t kcmax = m <= R_FLY_MAX ? R_XN / R_FLY_MAX : R_KC;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax;
        const uint8_t *Xc = Xb + (size_t)j0 * xbytes;
        for (int64_t b0 = 0; b0 < nb; b0 += kcmax) {
            const int64_t kc = nb - b0 < kcmax ? nb - b0 : kcmax;
            r_prep_x(t, Xc, xbytes, tc, b0, kc, &xs);
            for (int64_t r = r0; r < r1; r += 16) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                r_group(t, W, wbytes, r, nr, b0, kc, Xc, xbytes, tc, &xs, &pack, b0 == 0,
                        out + j0 * ldo, ldo);
            }
        }
    }
}

/* ---- Packed weights ----------------------------------------------------------------------
 * The packed form (quant_pack): 16-row groups, the last padded with copies of the last row. A
 * group holds its blocks in pairs (b, b + 1), each pair the size of the 16 rows' two blocks: the
 * two blocks' transposed quants, then their extras, then their 16 fp16 scales each:
 *   Q8_0: T[0..7], the unsigned bytes (512 bytes a block);
 *   Q4_0, Q4_1: the packed nibbles P[0..3] (256);
 *   Q5_0, Q5_1: P[0..3] (256), and as extras the fifth-bit masks K[0..7] of r_split (64).
 * Q4_1 and Q5_1 follow the scales with their 16 fp16 minimums each.
 * A pair is a multiple of 64 bytes, so every block's quants are aligned to a cache line; an odd
 * last block takes a whole pair. A call loads what r_block computes, so the bits are those of
 * the row-major kernels. */

/* Offsets of block b's quants, extras, scales and minimums in its group; the bytes of a pair. */
static inline size_t r_ppair(uint32_t t)
{
    return 32 * quant_b32_bytes(t);
}

static inline void r_poffs(uint32_t t, int64_t b, size_t *oq, size_t *oe, size_t *os, size_t *om)
{
    const size_t qb = t == GGML_TYPE_Q8_0 ? 512 : 256, eb = quant_b32_five(t) ? 64 : 0;
    const size_t base = (size_t)(b / 2) * r_ppair(t), odd = (size_t)(b & 1);
    *oq = base + odd * qb;
    *oe = base + 2 * qb + odd * eb;
    *os = base + 2 * (qb + eb) + odd * 32;
    *om = base + 2 * (qb + eb) + 64 + odd * 32;
}

/* The bytes of a packed group of nb blocks. */
static inline size_t r_pgroup(uint32_t t, int64_t nb)
{
    return (size_t)((nb + 1) / 2) * r_ppair(t);
}

AF_TARGET_AVX512 static void r_pack_rows(uint32_t t, const uint8_t *W, size_t wbytes, int64_t rows,
                                         int64_t k, uint8_t *out)
{
    const int64_t nb = k / QK;
    const size_t bsz = quant_b32_bytes(t), gbytes = r_pgroup(t, nb);
    for (int64_t g = 0; 16 * g < rows; g++) {
        const uint8_t *rp[16];
        for (int j = 0; j < 16; j++) {
            const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
            rp[j] = W + (size_t)r * wbytes;
        }
        uint8_t *og = out + (size_t)g * gbytes;
        memset(og, 0, gbytes); /* an odd last block's unused half */
        for (int64_t b = 0; b < nb; b++) {
            size_t oq, oe, os, om;
            r_poffs(t, b, &oq, &oe, &os, &om);
            __m512i T[8], P[4];
            __mmask64 K[8] = {0};
            if (t == GGML_TYPE_Q8_0) {
                r_block(t, rp, b, T);
                for (int i = 0; i < 8; i++)
                    _mm512_storeu_si512(og + oq + 64 * i, T[i]);
            } else {
                r_block_parts(t, rp, b, T, P, K);
                for (int i = 0; i < 4; i++)
                    _mm512_storeu_si512(og + oq + 64 * i, P[i]);
                if (quant_b32_five(t))
                    memcpy(og + oe, K, sizeof K);
            }
            for (int j = 0; j < 16; j++) { /* each block starts with its fp16 scale (and min) */
                memcpy(og + os + 2 * j, rp[j] + (size_t)b * bsz, 2);
                if (quant_b32_has_min(t))
                    memcpy(og + om + 2 * j, rp[j] + (size_t)b * bsz + 2, 2);
            }
        }
    }
}

/* Block b of a packed group: what r_block and the scale (and minimum) loads give for the 16
 * rows. */
AF_TARGET_AVX512 static AF_INLINE void r_pblock(uint32_t t, const uint8_t *og, int64_t b,
                                                __m512i T[8], __m512 *D, __m512 *M)
{
    size_t oq, oe, os, om;
    r_poffs(t, b, &oq, &oe, &os, &om);
    if (t == GGML_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            T[i] = _mm512_load_si512(og + oq + 64 * i);
    } else {
        __m512i P[4];
        __mmask64 K[8];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            P[i] = _mm512_load_si512(og + oq + 64 * i);
        if (quant_b32_five(t))
            memcpy(K, og + oe, sizeof K);
        r_split(P, K, quant_b32_five(t), T);
    }
    *D = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(og + os)));
    if (quant_b32_has_min(t))
        *M = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(og + om)));
}

/* r_fly on a packed group pg (64-byte aligned). */
AF_TARGET_AVX512 static AF_INLINE void r_pfly(uint32_t t, int nc, const uint8_t *pg,
                                              const uint8_t *next, size_t lines, size_t per,
                                              int64_t b0, int64_t kc, const uint8_t *X,
                                              size_t xbytes, const struct r_x *xs, int64_t c0,
                                              int first, float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[R_C];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t b = 0; b < kc; b++) {
        if (c0 == 0) /* the first pass of the token chunk; the others find the group in L2 */
            r_prefetch(next, lines, per, b);
        __m512i T[8];
        __m512 D, M = _mm512_setzero_ps();
        r_pblock(t, pg, b0 + b, T, &D, &M);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0 + b;
            const int64_t i = (c0 + c) * xs->ld + b;
            acc[c] = r_token(T, D, M, quant_b32_has_min(t), xb->qs, xs, i, acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

/* r_matmul on the packed form P of a rows x k weight; r0 is a multiple of 16. */
AF_TARGET_AVX512 static AF_INLINE void r_pmatmul(uint32_t t, const void *P, int64_t rows, int64_t k,
                                                 const void *X, size_t xbytes, int64_t m,
                                                 float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK;
    const size_t gbytes = r_pgroup(t, nb), lines = gbytes / 64;
    struct r_x xs;
    const uint8_t *Xb = X, *Pb = P;
    (void)rows;
    const int64_t tcmax = m <= R_FLY_MAX ? R_FLY_MAX : R_TC;
    const int64_t kcmax = m <= R_FLY_MAX ? R_XN / R_FLY_MAX : R_KC;
    /* Split in k chunks, a group's chunk is followed by the next group's, not by its own rest:
     * the next group's bytes, then, as before */
    const size_t ahead = nb <= kcmax ? quant_prefetch_ahead(gbytes) : gbytes;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax;
        const uint8_t *Xc = Xb + (size_t)j0 * xbytes;
        for (int64_t b0 = 0; b0 < nb; b0 += kcmax) {
            const int64_t kc = nb - b0 < kcmax ? nb - b0 : kcmax;
            const size_t per = (lines + (size_t)kc - 1) / (size_t)kc;
            r_prep_x(t, Xc, xbytes, tc, b0, kc, &xs);
            for (int64_t r = r0; r < r1; r += 16) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
                const uint8_t *pg = Pb + (size_t)(r / 16) * gbytes;
                for (int64_t c0 = 0; c0 < tc; c0 += R_C) {
                    const int nc = tc - c0 < R_C ? (int)(tc - c0) : R_C;
                    float *oc = out + (j0 + c0) * ldo + r;
#define R_PFLY(n)                                                                                  \
    r_pfly(t, n, pg, pg + ahead, lines, per, b0, kc, Xc + (size_t)c0 * xbytes, xbytes, &xs, c0,    \
           b0 == 0, oc, ldo, mk)
                    QUANT_NC_CASES(R_PFLY)
#undef R_PFLY
                }
            }
        }
    }
}

#define R_ENTRIES(name, T)                                                                         \
    AF_TARGET_AVX512 float quant_avx512_dot_##name(int64_t n, const void *w, const void *x)        \
    {                                                                                              \
        return r_dot(T, n, w, x);                                                                  \
    }                                                                                              \
    AF_TARGET_AVX512 void quant_avx512_matmul_##name(                                              \
        const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes, int64_t m,          \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        r_matmul(T, quant_avx512_dot_##name, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);        \
    }                                                                                              \
    AF_TARGET_AVX512 size_t quant_avx512_pack_##name(const void *W, size_t wbytes, int64_t rows,   \
                                                     int64_t k, void *out)                         \
    {                                                                                              \
        if (out)                                                                                   \
            r_pack_rows(T, W, wbytes, rows, k, out);                                               \
        return (size_t)((rows + 15) / 16) * r_pgroup(T, k / QK);                                   \
    }                                                                                              \
    AF_TARGET_AVX512 void quant_avx512_matmul_packed_##name(                                       \
        const void *P, int64_t rows, int64_t k, const void *X, size_t xbytes, int64_t m,           \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        r_pmatmul(T, P, rows, k, X, xbytes, m, out, ldo, r0, r1);                                  \
    }

R_ENTRIES(q8_0, GGML_TYPE_Q8_0)
R_ENTRIES(q4_0, GGML_TYPE_Q4_0)
R_ENTRIES(q5_0, GGML_TYPE_Q5_0)
R_ENTRIES(q4_1, GGML_TYPE_Q4_1)
R_ENTRIES(q5_1, GGML_TYPE_Q5_1)

#endif
