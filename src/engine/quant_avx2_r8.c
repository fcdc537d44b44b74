/*
 * quant_avx2_r8.c - Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 weights against Q8_0 activations on AVX2 (the
 * Zen 3 kind of host: no VNNI, no AVX-512), 8 weight rows in the 8 lanes of a register: the
 * vec_dot, the matmul and its packed form.
 *
 * Why rows in the lanes: the earlier AVX2 kernels took one row's block at a time (sign, sign,
 * maddubs, madd, a conversion, a scale product and an fma for 32 products), about 2 products an
 * instruction, and a lone token (a decode) was bound by that, not by the weights' bytes
 * (bench/quant --isa avx2 -m 1: Q4_0 at 11 GB/s from cache and from DRAM alike). Here register i
 * holds dword i of 8 rows' block, so a token's 4 bytes, broadcast, meet 8 rows per maddubs, and
 * the nibble types sum their maddubs in 16 bits before one madd: Q4_0 takes 8 maddubs, 7 adds,
 * a madd, a conversion and an fma for 256 products.
 *
 * The arithmetic per output, whatever the batch size, token offset, row split or packing: for
 * each block b in order, the exact integer sum isum_b of the 32 products, then acc =
 * fma(dw_b * dx_b, isum_b, acc) from acc = +0, the scale product rounded once: the chain of the
 * AVX-512 kernels (quant_avx512_r16.c), so the two ISAs give the same bits, and a lone token the
 * bits of a batch (m1_invariant).
 *
 * The integer sums:
 *   Q8_0: sum over registers of madd(maddubs(|w|, sign(x, w))), each pair below 2^15;
 *   Q4_0 / Q5_0: the levels u = w + B unsigned (B = 8, 16), sum u x in 16 bits (a Q4_0 pair is
 *   at most 2 x 15 x 128 = 3,840, so 8 registers fit; a Q5_0 pair 7,936, so 4 at a time), then
 *   - B sum x, which depends on the token alone and is computed once per token block.
 *
 * The packed form (quant_pack): 16-row groups (the dispatcher's unit; the last padded with
 * copies of the last row), each group two halves of 8 rows, each half its blocks in order (one
 * stream per half, as a lone token reads it), a half's block:
 *   Q8_0: T[0..7], T[i] lane r = dword i of row r's quants (256 bytes), the 8 fp16 scales (16);
 *   Q4_0: P[0..3], P[j] lane r = dword j of row r's packed nibbles (128): the low nibbles are
 *         elements 4j..4j+3 (the token's dword j), the high ones 16 + 4j.. (dword 4 + j); scales;
 *   Q5_0: P[0..3] as Q4_0, then H (32): byte 4r + q bit i = the fifth bit of byte q of lane r of
 *         register i (i < 4 the low nibbles of P[i], else the high ones of P[i - 4]); scales.
 * The row-major matmul packs 16 rows' k chunk on the fly into the same form, so packed and
 * row-major give the same bits.
 *
 * Every function carries AF_TARGET_AVX2; quant_avx2.c's table selects them.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include "engine/quant_x86.h"

#define AF_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

#define V_C 4      /* tokens in registers (16 ymm: 4 sums, 4 accumulators, the rest) */
#define V_TC 64    /* tokens per token chunk */
#define V_XN 4096  /* token-block terms per chunk (tokens x blocks) */
#define V_KC_RM 64 /* blocks per k chunk packed on the fly (the row-major matmul): 35 KiB */
#define V_PF 8192  /* bytes ahead of the weight stream to prefetch */

/* The token chunk's per-block terms, token c's block b at [c * ld + b]. */
struct v_x {
    int32_t corr[V_XN]; /* -B x the sum of the block's bytes (0 for Q8_0) */
    float d[V_XN];
    float s[V_XN]; /* Q4_1 / Q5_1: the sum of the block's bytes, for the minimum's term */
    int64_t ld;
};

/* The offset of the 8 rows' scales in a packed half (the minimums follow them). */
static inline size_t v_sc(uint32_t t)
{
    return t == GGML_TYPE_Q8_0 ? 256 : quant_b32_five(t) ? 160 : 128;
}

/* Bytes of a half block (8 rows' block) in the packed form. */
static inline size_t v_hb(uint32_t t)
{
    return v_sc(t) + (quant_b32_has_min(t) ? 32 : 16);
}

static inline int32_t v_bias(uint32_t t)
{
    return t == GGML_TYPE_Q4_0 ? 8 : t == GGML_TYPE_Q5_0 ? 16 : 0;
}

/* Block b of the 8 rows rp[0..7] into its packed half o. */
static void v_pack_half(uint32_t t, const uint8_t *const *rp, int64_t b, uint8_t *o)
{
    const size_t bsz = quant_b32_bytes(t), qo = quant_b32_qoff(t) + (quant_b32_five(t) ? 4 : 0);
    const size_t nq = t == GGML_TYPE_Q8_0 ? 32 : 16, sc = v_sc(t);
    for (int r = 0; r < 8; r++) {
        const uint8_t *p = rp[r] + (size_t)b * bsz;
        for (size_t i = 0; i < nq / 4; i++)
            memcpy(o + 32 * i + 4 * (size_t)r, p + qo + 4 * i, 4);
        memcpy(o + sc + 2 * (size_t)r, p, 2);
        if (quant_b32_has_min(t))
            memcpy(o + sc + 16 + 2 * (size_t)r, p + 2, 2);
        if (!quant_b32_five(t))
            continue;
        uint32_t qh;
        memcpy(&qh, p + quant_b32_qoff(t), sizeof qh);
        for (int q = 0; q < 4; q++) {
            uint8_t h = 0;
            for (int i = 0; i < 8; i++) { /* element of byte q of register i */
                const int e = i < 4 ? 4 * i + q : 16 + 4 * (i - 4) + q;
                h |= (uint8_t)(((qh >> e) & 1u) << i);
            }
            o[128 + 4 * r + q] = h;
        }
    }
}

/* Rows [r, r + 16) of W (nr of them real, the rest copies of the last) over blocks [b0, b0 +
 * kc) into the group g: half h's block b0 + j at g + (h * kc + j) * v_hb(t). */
static void v_pack_group(uint32_t t, const uint8_t *W, size_t wbytes, int64_t r, int64_t nr,
                         int64_t b0, int64_t kc, uint8_t *g)
{
    const uint8_t *rp[16];
    for (int j = 0; j < 16; j++)
        rp[j] = W + (size_t)(r + (j < nr ? j : nr - 1)) * wbytes;
    const size_t hb = v_hb(t);
    for (int h = 0; h < 2; h++)
        for (int64_t j = 0; j < kc; j++)
            v_pack_half(t, rp + 8 * h, b0 + j, g + (size_t)(h * kc + j) * hb);
}

AF_TARGET_AVX2 static AF_INLINE __m256i v_bcast(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Weight register i of a packed half h as unsigned levels (Q4_0 / Q5_0) or signed bytes. */
AF_TARGET_AVX2 static AF_INLINE __m256i v_reg(uint32_t t, const uint8_t *h, int i)
{
    if (t == GGML_TYPE_Q8_0)
        return _mm256_loadu_si256((const __m256i *)(h + 32 * i));
    const __m256i P = _mm256_loadu_si256((const __m256i *)(h + 32 * (i & 3)));
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256i u = i < 4 ? _mm256_and_si256(P, m4) : _mm256_and_si256(_mm256_srli_epi16(P, 4), m4);
    if (quant_b32_five(t)) { /* bit i of H's byte to bit 4 */
        const __m256i H = _mm256_loadu_si256((const __m256i *)(h + 128));
        const __m256i s = i < 4    ? _mm256_slli_epi16(H, 4 - i)
                          : i == 4 ? H
                                   : _mm256_srli_epi16(H, i - 4);
        u = _mm256_or_si256(u, _mm256_and_si256(s, _mm256_set1_epi8(0x10)));
    }
    return u;
}

/* nc (<= V_C) tokens against one packed half hp (8 rows) over kc blocks (v_hb(t) bytes apart):
 * x[c]: token c's Q8_0 row at block 0 of the chunk; xs, c0: the chunk's terms and the first
 * token's index in it. The accumulators start at +0 (first) or at out's partial sums; nr rows
 * of out are written. */
AF_TARGET_AVX2 static AF_INLINE void v_tile(uint32_t t, int nc, const uint8_t *hp, int64_t kc,
                                            const uint8_t *x, size_t xbytes, const struct v_x *xs,
                                            int64_t c0, int first, float *out, int64_t ldo, int nr)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), lanes);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[V_C];
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(out + c * ldo, mk);
    for (int64_t b = 0; b < kc; b++) {
        const uint8_t *h = hp + (size_t)b * v_hb(t);
        /* The stream 8 KiB ahead into L2 (a half, the next half and the next group follow
         * each other; bench/quant --copies 32: fewer slow passes than without) */
        for (size_t l = 0; l < v_hb(t); l += 64)
            _mm_prefetch((const char *)h + V_PF + l, _MM_HINT_T1);
        const int8_t *xq[V_C];
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++)
            xq[c] = (const int8_t *)(x + (size_t)c * xbytes + (size_t)b * sizeof(struct blk_q8_0) +
                                     offsetof(struct blk_q8_0, qs));
        __m256i is[V_C];
        if (t == GGML_TYPE_Q8_0) {
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                is[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) {
                const __m256i w = v_reg(t, h, i), aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++) {
                    const __m256i p =
                        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(v_bcast(xq[c] + 4 * i), w));
                    is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(p, ones));
                }
            }
        } else {
            /* Q4_0 / Q4_1: 8 registers in 16 bits; Q5_0 / Q5_1: two runs of 4 */
            const int run = quant_b32_five(t) ? 4 : 8;
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++)
                is[c] = _mm256_set1_epi32(xs->corr[(c0 + c) * xs->ld + b]);
#pragma GCC unroll 2
            for (int i0 = 0; i0 < 8; i0 += run) {
                __m256i s16[V_C];
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    s16[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int i = i0; i < i0 + run; i++) {
                    const __m256i u = v_reg(t, h, i);
#pragma GCC unroll 4
                    for (int c = 0; c < nc; c++)
                        s16[c] = _mm256_add_epi16(s16[c],
                                                  _mm256_maddubs_epi16(u, v_bcast(xq[c] + 4 * i)));
                }
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++)
                    is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(s16[c], ones));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + v_sc(t))));
        const __m256 mw =
            quant_b32_has_min(t)
                ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + v_sc(t) + 16)))
                : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < nc; c++) {
            const int64_t ix = (c0 + c) * xs->ld + b;
            const __m256 dx = _mm256_set1_ps(xs->d[ix]);
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(is[c]), acc[c]);
            if (quant_b32_has_min(t)) /* then the minimum's term, as the vec_dot */
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps(xs->s[ix]), acc[c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < nc; c++)
        _mm256_maskstore_ps(out + c * ldo, mk, acc[c]);
}

/* The chunk's terms for tc tokens over blocks [b0, b0 + kc). */
AF_TARGET_AVX2 static void v_prep_x(uint32_t t, const uint8_t *X, size_t xbytes, int64_t tc,
                                    int64_t b0, int64_t kc, struct v_x *s)
{
    s->ld = kc;
    quant_b32_terms(X, xbytes, tc, b0, kc, v_bias(t), s->corr, s->d);
    if (quant_b32_has_min(t))
        for (int64_t c = 0; c < tc; c++) {
            const struct blk_q8_0 *xb = (const struct blk_q8_0 *)(X + (size_t)c * xbytes) + b0;
            for (int64_t b = 0; b < kc; b++)
                s->s[c * kc + b] = (float)quant_b32_sum(xb[b].qs);
        }
}

/* The token chunk against a group's halves hp[0], hp[1] (at the chunk's first block) for rows
 * [r, r + 16) clipped to r1. */
AF_TARGET_AVX2 static AF_INLINE void v_group(uint32_t t, const uint8_t *const *hp, int64_t kc,
                                             const uint8_t *X, size_t xbytes, int64_t tc,
                                             const struct v_x *xs, int first, float *out,
                                             int64_t ldo, int64_t r, int64_t r1)
{
    for (int h = 0; h < 2; h++) {
        const int64_t rh = r + 8 * h;
        if (rh >= r1)
            break;
        const int nr = r1 - rh < 8 ? (int)(r1 - rh) : 8;
        for (int64_t c0 = 0; c0 < tc; c0 += V_C) {
            const int nc = tc - c0 < V_C ? (int)(tc - c0) : V_C;
            const uint8_t *xc = X + (size_t)c0 * xbytes;
            float *o = out + c0 * ldo + rh;
#define V_TILE(n) v_tile(t, n, hp[h], kc, xc, xbytes, xs, c0, first, o, ldo, nr)
            switch (nc) {
            case 1:
                V_TILE(1);
                break;
            case 2:
                V_TILE(2);
                break;
            case 3:
                V_TILE(3);
                break;
            default:
                V_TILE(4);
                break;
            }
#undef V_TILE
        }
    }
}

/* The matmul on the packed form P (rows x k), or with P NULL on the row-major W (rows wbytes
 * apart), packing each group's k chunk on the fly; r0 a multiple of 16 when P is set. */
AF_TARGET_AVX2 static AF_INLINE void v_matmul(uint32_t t, const void *W, size_t wbytes,
                                              const void *P, int64_t k, const void *X,
                                              size_t xbytes, int64_t m, float *out, int64_t ldo,
                                              int64_t r0, int64_t r1)
{
    const int64_t nb = k / QK;
    if (nb == 0 || m <= 0 || r1 <= r0)
        return;
    const size_t hb = v_hb(t), gbytes = (size_t)nb * 2 * hb;
    struct v_x xs;
    uint8_t buf[V_KC_RM * 2 * 272];
    const uint8_t *Xb = X, *Pb = P, *Wb = W;
    const int64_t tcmax = m < V_TC ? m : V_TC;
    int64_t kcmax = V_XN / tcmax;
    if (!P && kcmax > V_KC_RM)
        kcmax = V_KC_RM;
    for (int64_t j0 = 0; j0 < m; j0 += tcmax) {
        const int64_t tc = m - j0 < tcmax ? m - j0 : tcmax;
        const uint8_t *Xc = Xb + (size_t)j0 * xbytes;
        for (int64_t b0 = 0; b0 < nb; b0 += kcmax) {
            const int64_t kc = nb - b0 < kcmax ? nb - b0 : kcmax;
            v_prep_x(t, Xc, xbytes, tc, b0, kc, &xs);
            for (int64_t r = r0; r < r1; r += 16) {
                const uint8_t *hp[2];
                if (P) {
                    const uint8_t *g = Pb + (size_t)(r / 16) * gbytes;
                    hp[0] = g + (size_t)b0 * hb;
                    hp[1] = g + (size_t)(nb + b0) * hb;
                } else {
                    const int64_t nr = r1 - r < 16 ? r1 - r : 16;
                    v_pack_group(t, Wb, wbytes, r, nr, b0, kc, buf);
                    hp[0] = buf;
                    hp[1] = buf + (size_t)kc * hb;
                }
                v_group(t, hp, kc, Xc + (size_t)b0 * sizeof(struct blk_q8_0), xbytes, tc, &xs,
                        b0 == 0, out + j0 * ldo, ldo, r, r1);
            }
        }
    }
}

/* vec_dot: the lanes' chain for one row and one token (the block sums in any order: exact). */
AF_TARGET_AVX2 static AF_INLINE float v_dot(uint32_t t, int64_t n, const void *w, const void *x)
{
    const uint8_t *wb = w;
    const struct blk_q8_0 *xb = x;
    const size_t bsz = quant_b32_bytes(t);
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK; b++) {
        const uint8_t *p = wb + (size_t)b * bsz;
        __m256i q; /* the block's 32 signed levels, element order */
        if (t == GGML_TYPE_Q8_0) {
            q = _mm256_loadu_si256((const __m256i *)(p + 2));
        } else {
            const __m128i v = _mm_loadu_si128(
                (const __m128i *)(p + quant_b32_qoff(t) + (quant_b32_five(t) ? 4 : 0)));
            q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0xF));
            if (quant_b32_five(t)) { /* bytes whose qh bit is set get 16 */
                uint32_t qh;
                memcpy(&qh, p + quant_b32_qoff(t), sizeof qh);
                const __m256i sh = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                      0x0303030303030303);
                __m256i bb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sh);
                bb = _mm256_cmpeq_epi8(_mm256_or_si256(bb, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                       _mm256_set1_epi64x(-1));
                q = _mm256_or_si256(q, _mm256_and_si256(bb, _mm256_set1_epi8(0x10)));
            }
            q = _mm256_sub_epi8(q, _mm256_set1_epi8((char)v_bias(t)));
        }
        const __m256i y = _mm256_loadu_si256((const __m256i *)xb[b].qs);
        const __m256i s =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q)),
                              _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        uint16_t d;
        memcpy(&d, p, sizeof d);
        const __m128 dx = _mm_set_ss(_cvtsh_ss(xb[b].d));
        const __m128 sc = _mm_mul_ss(_mm_set_ss(_cvtsh_ss(d)), dx);
        acc = _mm_fmadd_ss(sc, _mm_set_ss((float)_mm_cvtsi128_si32(h)), acc);
        if (quant_b32_has_min(t)) { /* then m dx (the sum of x), the product rounded once */
            memcpy(&d, p + 2, sizeof d);
            acc = _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(_cvtsh_ss(d)), dx),
                               _mm_set_ss((float)quant_b32_sum(xb[b].qs)), acc);
        }
    }
    return _mm_cvtss_f32(acc);
}

#define V_ENTRIES(name, T)                                                                         \
    AF_TARGET_AVX2 float quant_avx2_dot_##name(int64_t n, const void *w, const void *x)            \
    {                                                                                              \
        return v_dot(T, n, w, x);                                                                  \
    }                                                                                              \
    AF_TARGET_AVX2 void quant_avx2_matmul_##name(const void *W, size_t wbytes, int64_t k,          \
                                                 const void *X, size_t xbytes, int64_t m,          \
                                                 float *out, int64_t ldo, int64_t r0, int64_t r1)  \
    {                                                                                              \
        if (m < V_C) /* the same chain row by row, without packing on the fly */                   \
            quant_matmul_loop(quant_avx2_dot_##name, W, wbytes, k, X, xbytes, m, out, ldo, r0,     \
                              r1);                                                                 \
        else                                                                                       \
            v_matmul(T, W, wbytes, NULL, k, X, xbytes, m, out, ldo, r0, r1);                       \
    }                                                                                              \
    size_t quant_avx2_pack_##name(const void *W, size_t wbytes, int64_t rows, int64_t k,           \
                                  void *out)                                                       \
    {                                                                                              \
        const int64_t nb = k / QK;                                                                 \
        const size_t gbytes = (size_t)nb * 2 * v_hb(T);                                            \
        if (out)                                                                                   \
            for (int64_t r = 0; r < rows; r += 16)                                                 \
                v_pack_group(T, W, wbytes, r, rows - r < 16 ? rows - r : 16, 0, nb,                \
                             (uint8_t *)out + (size_t)(r / 16) * gbytes);                          \
        return (size_t)((rows + 15) / 16) * gbytes;                                                \
    }                                                                                              \
    AF_TARGET_AVX2 void quant_avx2_matmul_packed_##name(                                           \
        const void *P, int64_t rows, int64_t k, const void *X, size_t xbytes, int64_t m,           \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        (void)rows;                                                                                \
        v_matmul(T, NULL, 0, P, k, X, xbytes, m, out, ldo, r0, r1);                                \
    }

V_ENTRIES(q8_0, GGML_TYPE_Q8_0)
V_ENTRIES(q4_0, GGML_TYPE_Q4_0)
V_ENTRIES(q5_0, GGML_TYPE_Q5_0)
V_ENTRIES(q4_1, GGML_TYPE_Q4_1)
V_ENTRIES(q5_1, GGML_TYPE_Q5_1)

#endif
