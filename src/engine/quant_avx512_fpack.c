/*
 * quant_avx512_fpack.c - the float weight types (F16, BF16, F32) packed with 16 rows in the
 * lanes (quant_pack), and the AVX-512 matmul of every batch size on that form.
 *
 * Why: the row-major float kernels broadcast one weight per FMA over tokens in the lanes, so a
 * batch of 2-16 tokens (continuous batching's decode step) leaves most lanes idle and converts
 * the rows again every call (bench/quant -m 8, F16: 26 GFLOP/s, against Q8_0's 220), and a lone
 * token ran the AVX2 dot, row after row. Here a group of 16 rows is stored as [k][16]: one load
 * (and, for the halves, one conversion) gives the 16 rows' weights at element i, and each token
 * adds them times its x[i] (broadcast) in one FMA, whatever the batch size; the next group
 * streams in while this one is summed.
 *
 * Bits. Batches (m >= 2): every output is one FMA chain over k in order from +0,
 * acc = fma(w[r][i], x[j][i], acc), with the k chunks' partial sums parked in out exactly: the
 * chain of the row-major prefill kernels (quant_avx512_float.c, quant_avx2_float.c). A lone
 * token: F16 and BF16 take that chain too (their row-major decode, the AVX2 dot, summed in 32
 * lanes; neither is a reference path), while F32, the reference path, keeps the AVX2 dot's
 * order exactly (f32_dot1): 32 chains, one per element class i mod 32 (the dot's 4 x 8 lanes),
 * the leftover runs of 8 on classes 0-7, the dot's tree of adds, then the last elements as a
 * multiply and an add each. tests/test_quant checks all of it against the row-major kernels.
 */
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

enum {
    F_KC = 512, /* elements of k per chunk of the halves, half that for F32: a group's chunk
                 * is 16 KiB, which stays in L1 (32 KiB here) beside the tokens' */
    F_TC = 8,   /* tokens in registers (QUANT_NC_CASES), or 16 in a full tile of one group */
    F_XT = 64   /* tokens whose chunk is converted to F32 at once (128 KiB) */
};

enum { K_F16, K_BF16, K_F32 };

/* Bytes per element of a row. */
static inline size_t f_es(int kind)
{
    return kind == K_F32 ? 4 : 2;
}

/* A packed group's bytes: k elements of 16 rows. */
static inline size_t f_group_bytes(int kind, int64_t k)
{
    return (size_t)k * 16 * f_es(kind);
}

/* The 16 rows' weights at element i of a packed group (chunk) pw, as F32 (exact). */
AF_TARGET_AVX512 static AF_INLINE __m512 f_load(int kind, const uint8_t *pw, int64_t i)
{
    if (kind == K_F32)
        return _mm512_load_ps((const float *)pw + 16 * i);
    const __m256i h = _mm256_load_si256((const __m256i *)(pw + 32 * i));
    return kind == K_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                          : _mm512_cvtph_ps(h);
}

static size_t f_pack(int kind, const void *W, size_t wbytes, int64_t rows, int64_t k, void *out)
{
    const size_t gbytes = f_group_bytes(kind, k), es = f_es(kind);
    const int64_t ng = (rows + 15) / 16;
    if (!out)
        return (size_t)ng * gbytes;
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *rp[16];
        for (int j = 0; j < 16; j++) { /* rows past the end repeat the last; never stored */
            const int64_t r = 16 * g + j < rows ? 16 * g + j : rows - 1;
            rp[j] = (const uint8_t *)W + (size_t)r * wbytes;
        }
        uint8_t *og = (uint8_t *)out + (size_t)g * gbytes;
        if (es == 2) {
            uint16_t *o = (uint16_t *)og;
            for (int64_t i = 0; i < k; i++)
                for (int j = 0; j < 16; j++)
                    o[i * 16 + j] = ((const uint16_t *)rp[j])[i];
        } else {
            uint32_t *o = (uint32_t *)og;
            for (int64_t i = 0; i < k; i++)
                for (int j = 0; j < 16; j++)
                    o[i * 16 + j] = ((const uint32_t *)rp[j])[i];
        }
    }
    return (size_t)ng * gbytes;
}

/* Prefetch the line of the next group that holds element i, once per line, non-temporal (as
 * quant_avx512_r16.c does). */
AF_TARGET_AVX512 static AF_INLINE void f_prefetch(int kind, const uint8_t *next, int64_t i)
{
    if (next && (kind == K_F32 || (i & 1) == 0))
        _mm_prefetch((const char *)next + 16 * (int64_t)f_es(kind) * i, _MM_HINT_NTA);
}

/* nc (<= 2 F_TC) tokens against one group over the kc elements of a k chunk: pw the group's
 * chunk, x[c * F_KC + i] token c's element i as F32. The sums start at +0 (first) or out's
 * partial sums, and end in out (its rows masked by mk). next: the group after this one, at the
 * same chunk (NULL: the first tile of the chunk prefetched it). */
AF_TARGET_AVX512 static AF_INLINE void f_tile(int kind, int nc, const uint8_t *pw, int64_t kc,
                                              const float *x, const uint8_t *next, int first,
                                              float *out, int64_t ldo, __mmask16 mk)
{
    __m512 acc[2 * F_TC];
#pragma GCC unroll 16
    for (int c = 0; c < nc; c++)
        acc[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + c * ldo);
    for (int64_t i = 0; i < kc; i++) {
        f_prefetch(kind, next, i);
        const __m512 w = f_load(kind, pw, i);
#pragma GCC unroll 16
        for (int c = 0; c < nc; c++)
            acc[c] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[c * F_KC + i]), acc[c]);
    }
#pragma GCC unroll 16
    for (int c = 0; c < nc; c++)
        _mm512_mask_storeu_ps(out + c * ldo, mk, acc[c]);
}

/* The kind and the token count as constants, so that a tile's sums stay in registers. */
#define F_BY_KIND(TILE, n, ...)                                                                    \
    do {                                                                                           \
        if (kind == K_F32)                                                                         \
            TILE(K_F32, n, __VA_ARGS__);                                                           \
        else if (kind == K_BF16)                                                                   \
            TILE(K_BF16, n, __VA_ARGS__);                                                          \
        else                                                                                       \
            TILE(K_F16, n, __VA_ARGS__);                                                           \
    } while (0)

AF_TARGET_AVX512 static void f_tile_n(int kind, int nc, const uint8_t *pw, int64_t kc,
                                      const float *x, const uint8_t *next, int first, float *out,
                                      int64_t ldo, __mmask16 mk)
{
#define F1(n) F_BY_KIND(f_tile, n, pw, kc, x, next, first, out, ldo, mk)
    if (nc == 2 * F_TC) { /* a full tile: 16 FMAs a weight load (and conversion) */
        F1(2 * F_TC);
        return;
    }
    if (nc > F_TC) { /* 9-15 tokens: 8, then the rest (each output's chain is its own) */
        F_BY_KIND(f_tile, F_TC, pw, kc, x, next, first, out, ldo, mk);
        x += F_TC * F_KC;
        out += F_TC * ldo;
        nc -= F_TC;
    }
    QUANT_NC_CASES(F1)
#undef F1
}

/* Two adjacent groups (32 rows; pw1 the second's chunk) x nc (<= F_TC) tokens: per element, 2
 * weight loads and nc broadcasts feed 2 nc FMAs, against 1 and 8 for 8 in f_tile (the same chain
 * per output, so the same bits). */
AF_TARGET_AVX512 static AF_INLINE void f_tile2(int kind, int nc, const uint8_t *pw0,
                                               const uint8_t *pw1, int64_t kc, const float *x,
                                               const uint8_t *next0, const uint8_t *next1,
                                               int first, float *out, int64_t ldo, __mmask16 mk1)
{
    __m512 a0[F_TC], a1[F_TC];
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        a0[c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + c * ldo);
        a1[c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk1, out + c * ldo + 16);
    }
    for (int64_t i = 0; i < kc; i++) {
        f_prefetch(kind, next0, i);
        f_prefetch(kind, next1, i);
        const __m512 w0 = f_load(kind, pw0, i), w1 = f_load(kind, pw1, i);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const __m512 xv = _mm512_set1_ps(x[c * F_KC + i]);
            a0[c] = _mm512_fmadd_ps(w0, xv, a0[c]);
            a1[c] = _mm512_fmadd_ps(w1, xv, a1[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        _mm512_storeu_ps(out + c * ldo, a0[c]);
        _mm512_mask_storeu_ps(out + c * ldo + 16, mk1, a1[c]);
    }
}

AF_TARGET_AVX512 static void f_tile2_n(int kind, int nc, const uint8_t *pw0, const uint8_t *pw1,
                                       int64_t kc, const float *x, const uint8_t *next0,
                                       const uint8_t *next1, int first, float *out, int64_t ldo,
                                       __mmask16 mk1){
#define F2(n) F_BY_KIND(f_tile2, n, pw0, pw1, kc, x, next0, next1, first, out, ldo, mk1)
    QUANT_NC_CASES(F2)
#undef F2
}

/* One F32 token against one group over all of k, in the AVX2 dot's order (the header); pg the
 * group, x the token: 32 accumulators, one per element class (the compiler keeps what does not
 * fit beside the loads on the stack). No software prefetch: a lone token streams the groups in
 * order, which the hardware prefetcher follows, and a prefetch a line beside each FMA slowed
 * it (bench/quant F32 --packed 1 --copies 16 --threads 2: 37-39 against 48-64 GB/s without;
 * `model bench` F32 tg, six alternations: median 23.2 against 24.3 tok/s). */
AF_TARGET_AVX512
    static void f32_dot1(const uint8_t *pg, int64_t k, const float *x, float *out, __mmask16 mk)
{
    const int64_t n32 = k / 32 * 32;
    __m512 a[32];
#pragma GCC unroll 32
    for (int j = 0; j < 32; j++)
        a[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n32; i += 32) {
#pragma GCC unroll 32
        for (int j = 0; j < 32; j++)
            a[j] = _mm512_fmadd_ps(f_load(K_F32, pg, i + j), _mm512_set1_ps(x[i + j]), a[j]);
    }
    int64_t i = n32;
    for (; i + 8 <= k; i += 8)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++)
            a[l] = _mm512_fmadd_ps(f_load(K_F32, pg, i + l), _mm512_set1_ps(x[i + l]), a[l]);
    /* v_l = (s0 + s1) + (s2 + s3) lane l, s0..s3 the dot's accumulators: classes l, 8 + l,
     * 16 + l, 24 + l; then hsum8: ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) */
    __m512 v[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++)
        v[l] = _mm512_add_ps(_mm512_add_ps(a[l], a[8 + l]), _mm512_add_ps(a[16 + l], a[24 + l]));
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6])),
                             _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7])));
    for (; i < k; i++) /* s += w * x, a multiply then an add (the dot's scalar tail) */
        s = _mm512_add_ps(s, _mm512_mul_ps(f_load(K_F32, pg, i), _mm512_set1_ps(x[i])));
    _mm512_mask_storeu_ps(out, mk, s);
}

/* Tokens [j0, j0 + nt) of X (rows of the kind, xbytes apart), elements [k0, k0 + kc), as F32
 * into xf[t * F_KC + i] (exact). */
AF_TARGET_AVX512 static void f_convert(int kind, const uint8_t *X, size_t xbytes, int64_t j0,
                                       int64_t nt, int64_t k0, int64_t kc, float *xf)
{
    for (int64_t t = 0; t < nt; t++) {
        float *d = xf + t * F_KC;
        if (kind == K_F32) {
            memcpy(d, (const float *)(X + (size_t)(j0 + t) * xbytes) + k0, (size_t)kc * sizeof *d);
            continue;
        }
        const uint16_t *h = (const uint16_t *)(X + (size_t)(j0 + t) * xbytes) + k0;
        int64_t i = 0;
        for (; i + 16 <= kc; i += 16) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(h + i));
            _mm512_storeu_ps(d + i, kind == K_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                                         _mm512_cvtepu16_epi32(v), 16))
                                                   : _mm512_cvtph_ps(v));
        }
        for (; i < kc; i++)
            d[i] = kind == K_BF16 ? quant_bf16_to_f32(h[i]) : _cvtsh_ss(h[i]);
    }
}

/* The chunk a call reads after the one of the groups that end at row rn, which the tiles
 * prefetch as they go: the same k chunk of the group at rn while rn < r1; past the call's rows,
 * the next k chunk of its first group, and after the last chunk the next rows' first chunk
 * (a thread's next range usually follows). A decode's call covers a few groups, and prefetching
 * only the group after them missed every chunk after the first (one F16 sequence, alternated
 * 3 times: 41-48 -> 48-51 tok/s; the engine still streams F16 at about 40-48 GB/s, against
 * 70-75 in bench/quant's calls of hundreds of rows). */
static inline const uint8_t *f_next_chunk(const uint8_t *Pb, size_t gbytes, size_t es, int64_t k,
                                          int64_t k0, int64_t kc, int64_t r0, int64_t r1,
                                          int64_t rn)
{
    if (rn < r1)
        return Pb + (size_t)(rn / 16) * gbytes + (size_t)k0 * 16 * es;
    if (k0 + kc < k)
        return Pb + (size_t)(r0 / 16) * gbytes + (size_t)(k0 + kc) * 16 * es;
    return Pb + (size_t)((r1 + 15) / 16) * gbytes;
}

/* out[j * ldo + r] = W row r . X row j for r in [r0, r1) (r0 a multiple of 16), j < m. Loop
 * order: k chunk, then token block (F_XT tokens, converted or copied once), then group, then F_TC
 * tokens at a time, so a group's chunk stays in L1 while the block's tokens pass over it. */
AF_TARGET_AVX512 static void f_matmul(int kind, const void *P, int64_t k, const void *X,
                                      size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                      int64_t r1)
{
    const size_t gbytes = f_group_bytes(kind, k), es = f_es(kind);
    const uint8_t *Pb = P, *Xb = X;
    if (kind == K_F32 && m == 1) {
        for (int64_t r = r0; r < r1; r += 16) {
            const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
            const uint8_t *pg = Pb + (size_t)(r / 16) * gbytes;
            f32_dot1(pg, k, X, out + r, (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1));
        }
        return;
    }
    /* the token block as F32: per thread, as calls run on every worker at once */
    static _Thread_local float xf[F_XT * F_KC] __attribute__((aligned(64)));
    const int64_t kcmax = kind == K_F32 ? F_KC / 2 : F_KC;
    /* An F32 batch of more than 16 (prefill) takes two groups x 8 tokens a tile: fewer loads
     * per FMA (bench/quant F32 -m 512: 84-92 GFLOP/s with one group x 16, 99-102 with pairs).
     * The halves keep one group x 16 there, one conversion per 16 FMAs (F16 -m 512: 103-105
     * against 90 with pairs on a Zen 5 of one zmm FMA a cycle; level, 214-222, on one of two).
     * Up to 16 tokens the halves take pairs: a group's few chains (one a token) waited on the
     * FMA latency, and two groups double them (F16, one thread, in cache: m = 1 31 -> 53-58
     * GB/s, m = 2 59 -> 106 GFLOP/s, m = 8 203 -> 234, m = 16 220 -> 243). F32 keeps its own
     * lone-token order (f32_dot1) and one group for 2-16 (pairs were level there). */
    const int pair_tiles = kind == K_F32 ? m > 16 : m <= 16;
    for (int64_t k0 = 0; k0 < k; k0 += kcmax) {
        const int64_t kc = k - k0 < kcmax ? k - k0 : kcmax;
        for (int64_t j0 = 0; j0 < m; j0 += F_XT) {
            const int64_t nt = m - j0 < F_XT ? m - j0 : F_XT;
            /* a constant stride (F_KC) lets the tiles address the tokens with displacements */
            f_convert(kind, Xb, xbytes, j0, nt, k0, kc, xf);
            const float *xb = xf;
            for (int64_t r = r0; r < r1;) {
                const int nr = r1 - r < 16 ? (int)(r1 - r) : 16;
                const __mmask16 mk = (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1);
                const uint8_t *pg = Pb + (size_t)(r / 16) * gbytes;
                const uint8_t *pw = pg + (size_t)k0 * 16 * es;
                if (pair_tiles && r1 - r > 16) { /* two groups, 8 tokens at a time */
                    const int nr1 = r1 - r - 16 < 16 ? (int)(r1 - r - 16) : 16;
                    const __mmask16 mk1 = (__mmask16)(nr1 == 16 ? 0xFFFF : (1u << nr1) - 1);
                    for (int64_t c0 = 0; c0 < nt; c0 += F_TC) {
                        const int nc = nt - c0 < F_TC ? (int)(nt - c0) : F_TC;
                        const int pf = j0 + c0 == 0; /* the next pair, once per chunk */
                        const uint8_t *nx = f_next_chunk(Pb, gbytes, es, k, k0, kc, r0, r1, r + 32);
                        f_tile2_n(kind, nc, pw, pw + gbytes, kc, xb + c0 * F_KC, pf ? nx : NULL,
                                  pf ? nx + gbytes : NULL, k0 == 0, out + (j0 + c0) * ldo + r, ldo,
                                  mk1);
                    }
                    r += 32;
                    continue;
                }
                /* past the matrix a prefetch does not fault */
                const uint8_t *next = f_next_chunk(Pb, gbytes, es, k, k0, kc, r0, r1, r + 16);
                const int64_t rg = r;
                r += 16;
                for (int64_t c0 = 0; c0 < nt; c0 += 2 * F_TC) {
                    const int nc = nt - c0 < 2 * F_TC ? (int)(nt - c0) : 2 * F_TC;
                    f_tile_n(kind, nc, pw, kc, xb + c0 * F_KC, j0 + c0 == 0 ? next : NULL, k0 == 0,
                             out + (j0 + c0) * ldo + rg, ldo, mk);
                }
            }
        }
    }
}

#define F_ENTRIES(name, kind)                                                                      \
    AF_TARGET_AVX512 size_t quant_avx512_pack_##name(const void *W, size_t wbytes, int64_t rows,   \
                                                     int64_t k, void *out)                         \
    {                                                                                              \
        return f_pack(kind, W, wbytes, rows, k, out);                                              \
    }                                                                                              \
    AF_TARGET_AVX512 void quant_avx512_matmul_packed_##name(                                       \
        const void *P, int64_t rows, int64_t k, const void *X, size_t xbytes, int64_t m,           \
        float *out, int64_t ldo, int64_t r0, int64_t r1)                                           \
    {                                                                                              \
        (void)rows;                                                                                \
        f_matmul(kind, P, k, X, xbytes, m, out, ldo, r0, r1);                                      \
    }

F_ENTRIES(f16, K_F16)
F_ENTRIES(bf16_fma, K_BF16)
F_ENTRIES(f32, K_F32)

#endif
