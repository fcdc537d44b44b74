/*
 * quant_avx512_bf16.c - BF16 weights on vdpbf16ps (AVX-512 BF16): two multiply-adds an
 * instruction, against one for the F32 FMA chain of the other float types, as llama.cpp runs
 * BF16 on this CPU.
 *
 * Numerics. BF16 weights meet BF16 activations (quant_prepare_act rounds them, as ggml does), so
 * every product is exact in F32, as in the FMA chain. vdpbf16ps takes elements in pairs: per
 * lane, acc = ftz(fma(w[2p], x[2p], ftz(fma(w[2p + 1], x[2p + 1], acc)))), the odd element
 * first, with denormal inputs read as zero and denormal results flushed (Intel's definition;
 * this Zen 5 gives exactly that on 2 million random cases, tests/test_quant checks it against a
 * C twin). Each output is that chain over its pairs in order from +0, whatever the batch size,
 * the row split or the packing, so batches and a lone packed token agree bit for bit. It is not
 * the other ISAs' BF16 chain (one FMA per element in order, no flushing): BF16 results differ
 * between AVX-512 BF16 and other CPUs by the summation's rounding, as they already differ from
 * llama.cpp's.
 *
 * Packed form: a 16-row group holds k / 2 pairs, 64 bytes each: lane j is row j's two elements
 * (2p low, 2p + 1 high) as a dword, what one vdpbf16ps takes; the rows' own size. Odd k, and
 * CPUs without AVX-512 BF16, keep the FMA chain's kernels (quant_avx512_fpack.c,
 * quant_avx512_float.c). The row-major matmul packs a group at a time on the fly; a lone
 * row-major token keeps the AVX2 dot, as for F16 (m1_invariant is 0 for BF16).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define AF_INLINE inline __attribute__((always_inline))

enum {
    B_KP = 256, /* pairs per k chunk: a group's chunk is 16 KiB, in L1 while the tokens pass */
    B_TC = 8    /* tokens in registers (16 ran slower: bench/quant -m 64, 187 against 221
                 * GFLOP/s) */
};

static int have_bf16(void)
{
    static _Atomic int v = -1; /* concurrent first calls store the same value */
    int h = atomic_load_explicit(&v, memory_order_relaxed);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512bf16") ? 1 : 0;
        atomic_store_explicit(&v, h, memory_order_relaxed);
    }
    return h;
}

static int pairs_ok(int64_t k)
{
    return k % 2 == 0 && have_bf16();
}

static uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Rows [0, rows) of W into 16-row groups of pairs at out (rows past the end repeat the last). */
static void b_pack_rows(const uint8_t *W, size_t wbytes, int64_t rows, int64_t k, uint8_t *out)
{
    const int64_t np = k / 2;
    const size_t gbytes = (size_t)np * 64;
    for (int64_t g = 0; 16 * g < rows; g++) {
        const uint8_t *rp[16];
        for (int j = 0; j < 16; j++) {
            const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
            rp[j] = W + (size_t)r * wbytes;
        }
        uint32_t *o = (uint32_t *)(void *)(out + (size_t)g * gbytes);
        for (int64_t p = 0; p < np; p++)
            for (int j = 0; j < 16; j++)
                o[p * 16 + j] = ld32(rp[j] + 4 * p);
    }
}

/* nc (<= B_TC) tokens against one group over pairs [p0, p0 + kp): pw the group, x the first
 * token's row (BF16), xbytes apart. The sums start at +0 (first) or out's partial sums and end in
 * out (rows masked by mk); next: the next group, prefetched a line per pair (NULL: not). */
AF_TARGET_BF16 static AF_INLINE void b_tile(int nc, const uint8_t *pw, int64_t p0, int64_t kp,
                                            const uint8_t *x, size_t xbytes, const uint8_t *next,
                                            int first, float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[B_TC];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t p = p0; p < p0 + kp; p++) {
        if (next)
            _mm_prefetch((const char *)next + 64 * p, _MM_HINT_NTA);
        const __m512bh w = (__m512bh)_mm512_load_si512(pw + 64 * p);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++)
            acc[c] = _mm512_dpbf16_ps(
                acc[c], w, (__m512bh)_mm512_set1_epi32((int)ld32(x + (size_t)c * xbytes + 4 * p)));
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

AF_TARGET_BF16 static void b_tile_n(int nc, const uint8_t *pw, int64_t p0, int64_t kp,
                                    const uint8_t *x, size_t xbytes, const uint8_t *next, int first,
                                    float *out, int64_t ldo, __mmask16 mk){
#define B1(n) b_tile(n, pw, p0, kp, x, xbytes, next, first, out, ldo, mk)
    QUANT_NC_CASES(B1)
#undef B1
}

/* Two adjacent groups (pw1 = pw0 + the group's bytes; mk1 masks the second's rows) against nc
 * (<= B_TC) tokens: each output's chain as in b_tile, twice the chains in flight. */
AF_TARGET_BF16 static AF_INLINE
    void b_tile2(int nc, const uint8_t *pw0, const uint8_t *pw1, int64_t p0, int64_t kp,
                 const uint8_t *x, size_t xbytes, const uint8_t *next0, const uint8_t *next1,
                 int first, float *out, int64_t ldo, __mmask16 mk1)
{
    __m512 a0[B_TC], a1[B_TC];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        a0[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + c * ldo);
        a1[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk1, out + c * ldo + 16);
    }
    for (int64_t p = p0; p < p0 + kp; p++) {
        if (next0) {
            _mm_prefetch((const char *)next0 + 64 * p, _MM_HINT_NTA);
            _mm_prefetch((const char *)next1 + 64 * p, _MM_HINT_NTA);
        }
        const __m512bh w0 = (__m512bh)_mm512_load_si512(pw0 + 64 * p);
        const __m512bh w1 = (__m512bh)_mm512_load_si512(pw1 + 64 * p);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const __m512bh xv =
                (__m512bh)_mm512_set1_epi32((int)ld32(x + (size_t)c * xbytes + 4 * p));
            a0[c] = _mm512_dpbf16_ps(a0[c], w0, xv);
            a1[c] = _mm512_dpbf16_ps(a1[c], w1, xv);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        _mm512_storeu_ps(out + c * ldo, a0[c]);
        _mm512_mask_storeu_ps(out + c * ldo + 16, mk1, a1[c]);
    }
}

AF_TARGET_BF16 static void b_tile2_n(int nc, const uint8_t *pw0, const uint8_t *pw1, int64_t p0,
                                     int64_t kp, const uint8_t *x, size_t xbytes,
                                     const uint8_t *next0, const uint8_t *next1, int first,
                                     float *out, int64_t ldo, __mmask16 mk1)
{
#define B2(n) b_tile2(n, pw0, pw1, p0, kp, x, xbytes, next0, next1, first, out, ldo, mk1)
    QUANT_NC_CASES(B2)
#undef B2
}

/* The base that the tiles prefetch from (+ 64 p for pair p of chunk [p0, p0 + kp)) so that they
 * fetch what the call reads next: the same chunk of the group at rn while rn < r1; past the
 * call's rows, the next chunk of its first group; after the last chunk, the next rows' first
 * chunk. A decode's call covers a few groups, and prefetching only the group after them missed
 * every chunk after the first (quant_avx512_fpack.c's f_next_chunk; one BF16 sequence,
 * alternated 3 times: 38-41 -> 41-43 tok/s). */
static inline const uint8_t *b_next(const uint8_t *P, size_t gbytes, int64_t np, int64_t p0,
                                    int64_t kp, int64_t r0, int64_t r1, int64_t rn)
{
    if (rn < r1)
        return P + (size_t)(rn / 16) * gbytes;
    if (p0 + kp < np)
        return P + (size_t)(r0 / 16) * gbytes + (size_t)kp * 64;
    return P + (size_t)((r1 + 15) / 16) * gbytes - (size_t)p0 * 64;
}

/* out[j * ldo + r] = W row r . X row j, r in [r0, r1) (r0 a multiple of 16) of the packed groups
 * P, j < m. Loop order: k chunk, group, tokens B_TC at a time, so that a group's
 * chunk stays in L1 while the tokens pass over it. A batch of up to 16 tokens takes two groups a
 * tile: one group's chains (one a token) waited on the instruction's latency. */
AF_TARGET_BF16 static void b_matmul(const uint8_t *P, int64_t k, const uint8_t *X, size_t xbytes,
                                    int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const int64_t np = k / 2;
    const size_t gbytes = (size_t)np * 64;
    for (int64_t p0 = 0; p0 < np; p0 += B_KP) {
        const int64_t kp = np - p0 < B_KP ? np - p0 : B_KP;
        for (int64_t r = r0; r < r1; r += 16) {
            const uint8_t *pg = P + (size_t)(r / 16) * gbytes;
            if (m <= 2 * B_TC && r1 - r > 16) {
                const int nr1 = r1 - r - 16 < 16 ? (int)(r1 - r - 16) : 16;
                const __mmask16 mk1 = (__mmask16)(nr1 == 16 ? 0xFFFF : (1u << nr1) - 1);
                for (int64_t c0 = 0; c0 < m; c0 += B_TC) {
                    const int nc = m - c0 < B_TC ? (int)(m - c0) : B_TC;
                    const uint8_t *nx = b_next(P, gbytes, np, p0, kp, r0, r1, r + 32);
                    b_tile2_n(nc, pg, pg + gbytes, p0, kp, X + (size_t)c0 * xbytes, xbytes,
                              c0 == 0 ? nx : NULL, nx + gbytes, p0 == 0, out + c0 * ldo + r, ldo,
                              mk1);
                }
                r += 16;
                continue;
            }
            const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
            const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
            for (int64_t c0 = 0; c0 < m; c0 += B_TC) {
                const int nc = m - c0 < B_TC ? (int)(m - c0) : B_TC;
                /* what comes next streams in during the first tokens' pass; past the
                 * matrix a prefetch does not fault */
                b_tile_n(nc, pg, p0, kp, X + (size_t)c0 * xbytes, xbytes,
                         c0 == 0 ? b_next(P, gbytes, np, p0, kp, r0, r1, r + 16) : NULL, p0 == 0,
                         out + c0 * ldo + r, ldo, mk);
            }
        }
    }
}

size_t quant_avx512_pack_bf16(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out)
{
    if (!pairs_ok(k))
        return quant_avx512_pack_bf16_fma(W, wbytes, rows, k, out);
    if (out)
        b_pack_rows(W, wbytes, rows, k, out);
    return (size_t)((rows + 15) / 16) * (size_t)(k / 2) * 64;
}

void quant_avx512_matmul_packed_bf16(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1)
{
    if (!pairs_ok(k)) {
        quant_avx512_matmul_packed_bf16_fma(P, rows, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    b_matmul(P, k, X, xbytes, m, out, ldo, r0, r1);
}

/* Row-major: each run of 16 rows packed on the fly (batches only; a lone token keeps the AVX2
 * dot, as the FMA kernels' row-major lone token does). */
void quant_avx512_matmul_bf16(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    if (!pairs_ok(k) || m < 2) {
        quant_avx512_matmul_bf16_fma(W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
        return;
    }
    uint8_t *g = af_xaligned(64, (size_t)(k / 2) * 64);
    for (int64_t r = r0; r < r1; r += 16) {
        const int64_t nr = r1 - r < 16 ? r1 - r : 16;
        b_pack_rows((const uint8_t *)W + (size_t)r * wbytes, wbytes, nr, k, g);
        /* the group's rows [r, r + nr) as rows [0, nr) of a one-group matrix */
        b_matmul(g, k, X, xbytes, m, out + r, ldo, 0, nr);
    }
    free(g);
}

#endif
