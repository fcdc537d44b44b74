/*
 * quant_avx512_f16i.c - F16 weights on AVX-512 VNNI as 14-bit integers in blocks of 32, summed
 * with vpdpwssd: the packed form (quant_pack), its matmul of every batch size, and the row-major
 * matmul, which packs its rows on the fly and so gives the same bits.
 *
 * Opt-in (AGENTFLOW_F16=int, quant_set_f16_int): the default F16 kernels (quant_avx512_fpack.c)
 * multiply the F16 values exactly, as llama.cpp does, and match its logits to 1e-6 on the
 * reference tiny-llama; these are off by 3.5e-3 there (tests/test_engine's bound is 2e-3).
 *
 * Why integers: an F16 prefill on F32 FMAs is bound by the FMA rate (16 products an instruction;
 * 111 of the 116 GFLOP/s one thread here can reach, bench/quant), and llama.cpp's F16 is bound the
 * same way, so no float kernel gets far past it. vpdpwssd sums 32 int16 products an instruction at
 * the same rate. Each row's 32-element block is scaled to |q| <= 8191 (so 32 products of two such
 * fit an int32 exactly), the activations' blocks the same way from the F16 rows the engine prepares
 * for F16 weights. The error: half a step of each block's scale, amax / 16382, against F16's own
 * half unit in the last place, |v| / 2048: for values near the block's largest, 8 times smaller;
 * for values 8 times below it, the same. tests/test_quant bounds every output by it.
 *
 * Bits. Every output is, over the blocks b in order from +0, acc = fma(sw_b * sx_b, isum_b, acc):
 * sw_b the row's block scale (a BF16, rounded up so that no q passes 8191), sx_b the token's
 * (amax / 8191, F32), isum_b the exact integer sum of the block's 32 products as a float. The
 * integer sum's order is free (exact), the float chain is the same whatever the batch size, token
 * offset, row split or k chunk (partial sums are parked in out exactly): a lone token and a batch
 * give the same bits (batch invariance), packed or not.
 *
 * Every function carries AF_TARGET_AVX512; quant_dispatch.c puts them in the table when asked.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512                                                                           \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

enum {
    I_QMAX = 8191, /* 32 * 8191^2 < 2^31 */
    I_BB = 1024,   /* bytes of a block of 16 rows: 16 pairs x 16 rows x 2 int16 */
    I_PB = 2112,   /* bytes of a pair of blocks and their scales (33 lines) */
    I_KC = 16,     /* blocks per k chunk: a group's chunk (16.5 KiB) stays in L1 with its tokens */
    I_TC = 8,      /* tokens in registers */
    I_XT = 64      /* tokens converted at once */
};

/* A group of 16 rows: pairs of blocks, each the two blocks' [pair j][row r] int32 (row r's
 * elements 32 b + 2 j and 32 b + 2 j + 1 as int16, the first low), then their 2 x 16 row scales
 * as BF16: one stream of whole lines. Elements past k (and an odd count's last block) are zero. */
static inline int64_t i_nb(int64_t k)
{
    return (k + 31) / 32;
}

static inline size_t i_block_off(int64_t b)
{
    return (size_t)(b / 2) * I_PB + (size_t)(b & 1) * I_BB;
}

static inline size_t i_scale_off(int64_t b)
{
    return (size_t)(b / 2) * I_PB + 2 * I_BB + (size_t)(b & 1) * 32;
}

static inline size_t i_group_bytes(int64_t nb)
{
    return (size_t)(nb + 1) / 2 * I_PB;
}

/* n (<= 32) F16 values at h as F32, zero past n, in a and b. */
AF_TARGET_AVX512 static AF_INLINE void i_load32(const uint16_t *h, int n, __m512 *a, __m512 *b)
{
    const __mmask16 m0 = (__mmask16)(n >= 16 ? 0xFFFF : (1u << n) - 1);
    const __mmask16 m1 = (__mmask16)(n >= 32 ? 0xFFFF : n > 16 ? (1u << (n - 16)) - 1 : 0);
    *a = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, h));
    *b = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, h + 16));
}

AF_TARGET_AVX512 static AF_INLINE float i_amax(__m512 a, __m512 b)
{
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
}

/* round(v * inv), clamped to +-I_QMAX, as 32 int16 at q. */
AF_TARGET_AVX512 static AF_INLINE void i_round(__m512 a, __m512 b, float inv, int16_t *q)
{
    const __m512 vi = _mm512_set1_ps(inv);
    const __m512i hi = _mm512_set1_epi32(I_QMAX), lo = _mm512_set1_epi32(-I_QMAX);
    __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vi));
    __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vi));
    qa = _mm512_max_epi32(_mm512_min_epi32(qa, hi), lo);
    qb = _mm512_max_epi32(_mm512_min_epi32(qb, hi), lo);
    _mm256_storeu_si256((__m256i *)q, _mm512_cvtepi32_epi16(qa));
    _mm256_storeu_si256((__m256i *)(q + 16), _mm512_cvtepi32_epi16(qb));
}

/* A weight row's block: n (<= 32) F16 values at h into q[32] and its scale as BF16 (amax / 8191
 * rounded up, so that |w| / scale <= 8191). */
AF_TARGET_AVX512 static uint16_t i_quant_w(const uint16_t *h, int n, int16_t q[32])
{
    __m512 a, b;
    i_load32(h, n, &a, &b);
    const float amax = i_amax(a, b);
    float s = amax / I_QMAX;
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    u = (u & 0xFFFFu) ? (u & 0xFFFF0000u) + 0x10000u : u; /* up to the next BF16 */
    u &= 0xFFFF0000u;
    memcpy(&s, &u, sizeof s);
    i_round(a, b, s > 0.0f ? 1.0f / s : 0.0f, q);
    return (uint16_t)(u >> 16);
}

/* rows x k F16 at W (rows wbytes apart) into the groups at out; returns the bytes. */
AF_TARGET_AVX512 static size_t i_pack(const void *W, size_t wbytes, int64_t rows, int64_t k,
                                      void *out)
{
    const int64_t nb = i_nb(k), ng = (rows + 15) / 16;
    const size_t gbytes = i_group_bytes(nb);
    if (!out)
        return (size_t)ng * gbytes;
    int16_t q[16][32];
    uint16_t sc[16];
    for (int64_t g = 0; g < ng; g++) {
        uint8_t *og = (uint8_t *)out + (size_t)g * gbytes;
        if (nb & 1) { /* the last pair's missing block */
            memset(og + i_block_off(nb), 0, I_BB);
            memset(og + i_scale_off(nb), 0, 32);
        }
        for (int64_t b = 0; b < nb; b++) {
            const int n = k - 32 * b < 32 ? (int)(k - 32 * b) : 32;
            for (int j = 0; j < 16; j++) { /* rows past the end repeat the last; never stored */
                const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
                sc[j] = i_quant_w(
                    (const uint16_t *)((const uint8_t *)W + (size_t)r * wbytes) + 32 * b, n, q[j]);
            }
            int16_t *ob = (int16_t *)(og + i_block_off(b));
            for (int p = 0; p < 16; p++)
                for (int j = 0; j < 16; j++) {
                    ob[(p * 16 + j) * 2] = q[j][2 * p];
                    ob[(p * 16 + j) * 2 + 1] = q[j][2 * p + 1];
                }
            memcpy(og + i_scale_off(b), sc, sizeof sc);
        }
    }
    return (size_t)ng * gbytes;
}

/* Tokens [j0, j0 + nt) of X (F16 rows, xbytes apart), blocks [b0, b0 + nbk): token t's block b
 * at xq[t * st * 32 + 32 b] (int16) with its scale at xs[t * st + b]. */
AF_TARGET_AVX512 static void i_convert(const uint8_t *X, size_t xbytes, int64_t k, int64_t j0,
                                       int64_t nt, int64_t b0, int64_t nbk, int64_t st, int16_t *xq,
                                       float *xs)
{
    for (int64_t t = 0; t < nt; t++) {
        const uint16_t *h = (const uint16_t *)(X + (size_t)(j0 + t) * xbytes);
        for (int64_t b = 0; b < nbk; b++) {
            const int64_t e = 32 * (b0 + b);
            const int n = k - e < 32 ? (int)(k - e) : 32;
            __m512 va, vb;
            i_load32(h + e, n, &va, &vb);
            const float amax = i_amax(va, vb);
            xs[t * st + b] = amax / I_QMAX;
            i_round(va, vb, amax > 0.0f ? I_QMAX / amax : 0.0f, xq + t * st * 32 + 32 * b);
        }
    }
}

AF_TARGET_AVX512 static AF_INLINE int32_t i_pair(const int16_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* nc (<= I_TC) tokens against one group over nbk blocks: pc the chunk (its first block even),
 * xq / xs the tokens' (i_convert). The sums start at +0 (first) or out's partial sums and end in
 * out (rows masked by mk). next: the same chunk of a group ahead, to prefetch, or NULL. */
AF_TARGET_AVX512 static AF_INLINE void i_tile(int nc, const uint8_t *pc, int64_t nbk,
                                              const int16_t *xq, const float *xs,
                                              const uint8_t *next, int first, float *out,
                                              int64_t ldo, __mmask16 mk)
{
    /* few tokens: two integer chains each, as one would wait on vpdpwssd's latency */
    const int two = nc < 4;
    __m512 acc[I_TC];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t b = 0; b < nbk; b++) {
        const __m512i *w = (const __m512i *)(pc + i_block_off(b));
        __m512i s0[I_TC], s1[I_TC];
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            s0[c] = _mm512_setzero_si512();
            s1[c] = _mm512_setzero_si512();
        }
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            if (next)
                _mm_prefetch((const char *)next + i_block_off(b) + 64 * j, _MM_HINT_T1);
            const __m512i wv = _mm512_load_si512(w + j);
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++) {
                const __m512i xv = _mm512_set1_epi32(i_pair(xq + c * I_KC * 32 + 32 * b + 2 * j));
                if (two && (j & 1))
                    s1[c] = _mm512_dpwssd_epi32(s1[c], wv, xv);
                else
                    s0[c] = _mm512_dpwssd_epi32(s0[c], wv, xv);
            }
        }
        if (next && (b & 1) == 0)
            _mm_prefetch((const char *)next + i_scale_off(b), _MM_HINT_T1);
        const __m512 sw = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(pc + i_scale_off(b)))), 16));
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const __m512i is = two ? _mm512_add_epi32(s0[c], s1[c]) : s0[c];
            acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(sw, _mm512_set1_ps(xs[c * I_KC + b])),
                                     _mm512_cvtepi32_ps(is), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

AF_TARGET_AVX512 static void i_tile_n(int nc, const uint8_t *pc, int64_t nbk, const int16_t *xq,
                                      const float *xs, const uint8_t *next, int first, float *out,
                                      int64_t ldo, __mmask16 mk){
#define I1(n) i_tile(n, pc, nbk, xq, xs, next, first, out, ldo, mk)
    QUANT_NC_CASES(I1)
#undef I1
}

/* out[j * ldo + r] = W row r . X row j for r in [r0, r1), j < m, from the groups at P, the first
 * of which holds row rbase (r0 - rbase a multiple of 16). Loop order: k chunk, token block
 * (converted once), group, I_TC tokens at a time, so a group's chunk stays in L1 while the
 * block's tokens pass over it; the chunk two groups ahead streams into L2 meanwhile. */
AF_TARGET_AVX512
    static void i_matmul(const uint8_t *P, int64_t rbase, int64_t k, const void *X, size_t xbytes,
                         int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t nb = i_nb(k);
    const size_t gbytes = i_group_bytes(nb);
    /* per thread, as calls run on every worker at once */
    static _Thread_local int16_t xq[I_XT * I_KC * 32] __attribute__((aligned(64)));
    static _Thread_local float xs[I_XT * I_KC];
    /* One or two tokens take all of k at once (the buffers hold I_XT tokens' chunks), so each
     * group streams from memory in one run; more take L1-sized chunks, and prefetch. */
    const int small = m <= 2;
    const int64_t kcb = small ? I_XT * I_KC / 2 : I_KC;
    for (int64_t b0 = 0; b0 < nb; b0 += kcb) {
        const int64_t nbk = nb - b0 < kcb ? nb - b0 : kcb;
        for (int64_t j0 = 0; j0 < m; j0 += I_XT) {
            const int64_t nt = m - j0 < I_XT ? m - j0 : I_XT;
            i_convert(X, xbytes, k, j0, nt, b0, nbk, kcb, xq, xs);
            for (int64_t r = r0; r < r1; r += 16) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
                const uint8_t *pc = P + (size_t)((r - rbase) / 16) * gbytes + i_block_off(b0);
                if (small) {
                    /* A token at a time, without software prefetches: 2 threads decoding the
                     * 0.5B F16 file ran at 45-47 tokens/s so, 31-38 with two groups a tile (two
                     * streams) or with the prefetches of the group two ahead. */
                    for (int64_t c = 0; c < m; c++)
                        i_tile_n(1, pc, nbk, xq + c * kcb * 32, xs + c * kcb, NULL, b0 == 0,
                                 out + c * ldo + r, ldo, mk);
                    continue;
                }
                for (int64_t c0 = 0; c0 < nt; c0 += I_TC) {
                    const int nc = nt - c0 < I_TC ? (int)(nt - c0) : I_TC;
                    /* past the matrix a prefetch does not fault */
                    const int pf = j0 == 0 && c0 == 0;
                    i_tile_n(nc, pc, nbk, xq + c0 * I_KC * 32, xs + c0 * I_KC,
                             pf ? pc + 2 * gbytes : NULL, b0 == 0, out + (j0 + c0) * ldo + r, ldo,
                             mk);
                }
            }
        }
    }
}

AF_TARGET_AVX512 size_t quant_avx512_pack_f16i(const void *W, size_t wbytes, int64_t rows,
                                               int64_t k, void *out)
{
    return i_pack(W, wbytes, rows, k, out);
}

AF_TARGET_AVX512 void quant_avx512_matmul_packed_f16i(const void *P, int64_t rows, int64_t k,
                                                      const void *X, size_t xbytes, int64_t m,
                                                      float *out, int64_t ldo, int64_t r0,
                                                      int64_t r1)
{
    (void)rows;
    i_matmul(P, 0, k, X, xbytes, m, out, ldo, r0, r1);
}

/* The rows [r0, r1) packed for this call alone: each output depends on its row and tokens only,
 * so these are the packed form's bits. */
AF_TARGET_AVX512 void quant_avx512_matmul_f16i(const void *W, size_t wbytes, int64_t k,
                                               const void *X, size_t xbytes, int64_t m, float *out,
                                               int64_t ldo, int64_t r0, int64_t r1)
{
    const size_t pb = i_pack(NULL, wbytes, r1 - r0, k, NULL);
    void *P = aligned_alloc(64, (pb + 63) / 64 * 64);
    if (!P) { /* out of memory: the float kernel, whose bits differ slightly, rather than none */
        quant_avx2_matmul_f16(W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    i_pack((const uint8_t *)W + (size_t)r0 * wbytes, wbytes, r1 - r0, k, P);
    i_matmul(P, r0, k, X, xbytes, m, out, ldo, r0, r1);
    free(P);
}

#endif
