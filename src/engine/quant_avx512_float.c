/*
 * quant_avx512_float.c - the AVX-512 prefill matmul of the float weight types (F32, F16, BF16),
 * for batches of 2 or more tokens; decode (m = 1) keeps the AVX2 dots.
 *
 * The AVX2 kernel's scheme on 512-bit registers: tokens in the lanes, packed once per call as
 * [k][PT] panels (PT = 16 for up to 16 tokens, else 32), each weight broadcast from its row
 * (F16 / BF16 rows converted to F32 a block at a time), R_ROWS rows x PT tokens of
 * accumulators, k in chunks of KC whose panel slice stays in L1 (the accumulators parked in
 * between). Every output is still one chain of FMAs over k in order from +0, so the bits
 * are the AVX2 kernel's (and the scalar fmaf chain's), whatever the batch, the token's place,
 * the row split or the ISA: only the lanes per instruction change.
 */
#include <stdlib.h>
#include <string.h>

#include "core/simd_transpose.h"
#include "core/xalloc.h"
#include "engine/quant.h"
#include "engine/quant_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AF_TARGET_AVX512F __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AF_INLINE inline __attribute__((always_inline))

/* ROW_BLOCK rows x KC floats of weights (256 KiB) stay in L2 while every panel passes. */
enum { R_ROWS = 8, PT_MAX = 32, KC = 256, ROW_BLOCK = 256 };

/* A row of n values of type t (F32, F16 or BF16) as F32 (exact). */
AF_TARGET_AVX512F static void row_to_f32(uint32_t t, const void *src, float *dst, int64_t n)
{
    const uint16_t *h = src;
    int64_t i = 0;
    if (t == GGML_TYPE_F16) {
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
        for (; i < n; i++)
            dst[i] = _cvtsh_ss(h[i]);
    } else if (t == GGML_TYPE_BF16) {
        for (; i + 16 <= n; i += 16) {
            const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        }
        for (; i < n; i++)
            dst[i] = quant_bf16_to_f32(h[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof *dst);
    }
}

/* Tokens [j0, j0 + nt) (nt <= pt) of X into p[k][pt] as F32, zero past nt. */
AF_TARGET_AVX512F static void pack_panel(uint32_t type, const char *X, size_t xbytes, int64_t k,
                                         int64_t j0, int64_t nt, int pt, float *p)
{
    float row[PT_MAX * 64];
    const size_t es = type == GGML_TYPE_F32 ? 4 : 2;
    for (int64_t k0 = 0; k0 < k; k0 += 64) {
        const int64_t kc = k - k0 < 64 ? k - k0 : 64;
        for (int64_t t = 0; t < pt; t++) {
            float *d = row + t * 64;
            if (t >= nt)
                memset(d, 0, 64 * sizeof *d);
            else
                row_to_f32(type, X + (size_t)(j0 + t) * xbytes + (size_t)k0 * es, d, kc);
        }
        int64_t i = 0;
        for (; i + 8 <= kc; i += 8)
            for (int t = 0; t < pt; t += 8)
                af_transpose8x8(row + t * 64 + i, 64, p + (k0 + i) * pt + t, pt);
        for (; i < kc; i++)
            for (int t = 0; t < pt; t++)
                p[(k0 + i) * pt + t] = row[t * 64 + i];
    }
}

/* nr (<= R_ROWS) F32 weight rows (ws floats apart) x one panel of nv * 16 tokens, over the
 * kc values of a k-chunk (w and p start at it). The accumulators start from +0 (first) or the
 * park (pk: [row][pt]), and end in out[t * ldo + r] for t < nt (last) or the park: an exact
 * store and reload, so each output is still one FMA chain over all of k. */
AF_TARGET_AVX512F static AF_INLINE void kernel(int nr, int nv, const float *w, size_t ws,
                                               int64_t kc, const float *p, int64_t nt, float *pk,
                                               int first, int last, float *out, int64_t ldo)
{
    __m512 acc[R_ROWS][2];
    const int pt = 16 * nv;
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
        acc[r][0] = first ? _mm512_setzero_ps() : _mm512_load_ps(pk + r * pt);
        acc[r][1] = first || nv == 1 ? _mm512_setzero_ps() : _mm512_load_ps(pk + r * pt + 16);
    }
    for (int64_t i = 0; i < kc; i++, p += pt) {
        const __m512 x0 = _mm512_load_ps(p);
        const __m512 x1 = nv == 2 ? _mm512_load_ps(p + 16) : x0;
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            const __m512 wb = _mm512_set1_ps(w[(size_t)r * ws + (size_t)i]);
            acc[r][0] = _mm512_fmadd_ps(wb, x0, acc[r][0]);
            if (nv == 2)
                acc[r][1] = _mm512_fmadd_ps(wb, x1, acc[r][1]);
        }
    }
    if (!last) {
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
            _mm512_store_ps(pk + r * pt, acc[r][0]);
            if (nv == 2)
                _mm512_store_ps(pk + r * pt + 16, acc[r][1]);
        }
        return;
    }
    float tile[R_ROWS][PT_MAX];
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
        _mm512_storeu_ps(tile[r], acc[r][0]);
        if (nv == 2)
            _mm512_storeu_ps(tile[r] + 16, acc[r][1]);
    }
    for (int64_t t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++)
            out[t * ldo + r] = tile[r][t];
}

/* Every row count 1..R_ROWS specialised. */
AF_TARGET_AVX512F static AF_INLINE void kernel_n(int nr, int nv, const float *w, size_t ws,
                                                 int64_t kc, const float *p, int64_t nt, float *pk,
                                                 int first, int last, float *out, int64_t ldo)
{
#define K_CASE(n)                                                                                  \
    case n:                                                                                        \
        if (nv == 2)                                                                               \
            kernel(n, 2, w, ws, kc, p, nt, pk, first, last, out, ldo);                             \
        else                                                                                       \
            kernel(n, 1, w, ws, kc, p, nt, pk, first, last, out, ldo);                             \
        break;
    switch (nr) {
        K_CASE(1)
        K_CASE(2)
        K_CASE(3)
        K_CASE(4)
        K_CASE(5)
        K_CASE(6)
        K_CASE(7)
    default:
        K_CASE(8)
    }
#undef K_CASE
}

/* Rows [0, nq) of W (type, wbytes apart) against every panel, k in chunks of KC: a chunk of a
 * panel (KC x 32 floats, 32 KiB) stays in L1 while every row group of the block passes over
 * it, and the block's slice of the chunk (F16 / BF16 converted into wf) stays in L2. */
AF_TARGET_AVX512F static void row_block(uint32_t type, const char *W, size_t wbytes, int64_t k,
                                        int64_t nq, const float *panels, int pt, int64_t m,
                                        float *wf, float *park, float *out, int64_t ldo)
{
    const int64_t np = (m + pt - 1) / pt;
    const size_t es = type == GGML_TYPE_F32 ? 4 : 2;
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        const int64_t kc = k - k0 < KC ? k - k0 : KC;
        const int first = k0 == 0, last = k0 + kc == k;
        const float *w = (const float *)W + k0;
        size_t ws = wbytes / sizeof(float);
        if (type != GGML_TYPE_F32) {
            for (int64_t r = 0; r < nq; r++)
                row_to_f32(type, W + (size_t)r * wbytes + (size_t)k0 * es, wf + r * KC, kc);
            w = wf;
            ws = KC;
        }
        for (int64_t pi = 0; pi < np; pi++) {
            const int64_t j0 = pi * pt;
            const float *p = panels + (size_t)pi * (size_t)k * (size_t)pt + (size_t)k0 * pt;
            const int64_t nt = m - j0 < pt ? m - j0 : pt;
            float *o = out + j0 * ldo;
            float *pk = park + (size_t)pi * (size_t)nq * (size_t)pt;
            for (int64_t r = 0; r < nq; r += R_ROWS) {
                const int nr = nq - r < R_ROWS ? (int)(nq - r) : R_ROWS;
                kernel_n(nr, pt / 16, w + (size_t)r * ws, ws, kc, p, nt, pk + (size_t)r * pt, first,
                         last, o + r, ldo);
            }
        }
    }
}

AF_TARGET_AVX512F static void gemm(uint32_t type, const char *W, size_t wbytes, int64_t k,
                                   const char *X, size_t xbytes, int64_t m, float *out, int64_t ldo,
                                   int64_t r0, int64_t r1)
{
    const int pt = m <= 16 ? 16 : 32;
    const int64_t np = (m + pt - 1) / pt;
    float *panels = af_xaligned(64, (size_t)np * (size_t)k * (size_t)pt * sizeof(float));
    for (int64_t j0 = 0; j0 < m; j0 += pt)
        pack_panel(type, X, xbytes, k, j0, m - j0 < pt ? m - j0 : pt, pt,
                   panels + (size_t)(j0 / pt) * (size_t)k * (size_t)pt);
    const int64_t rb = ROW_BLOCK;
    float *wf = type != GGML_TYPE_F32 ? af_xmalloc((size_t)rb * KC * sizeof *wf) : NULL;
    float *park =
        k > KC ? af_xaligned(64, (size_t)np * (size_t)rb * (size_t)pt * sizeof(float)) : NULL;
    for (int64_t q0 = r0; q0 < r1; q0 += rb) {
        const int64_t nq = r1 - q0 < rb ? r1 - q0 : rb;
        row_block(type, W + (size_t)q0 * wbytes, wbytes, k, nq, panels, pt, m, wf, park, out + q0,
                  ldo);
    }
    free(park);
    free(wf);
    free(panels);
}

/* m >= 2 here; m = 1 goes to the AVX2 matmul (its dots), so decode keeps its bits. */
#define FLOAT_MATMUL(name, type, avx2_fn)                                                          \
    AF_TARGET_AVX512F void name(const void *W, size_t wbytes, int64_t k, const void *X,            \
                                size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,     \
                                int64_t r1)                                                        \
    {                                                                                              \
        if (m < 2)                                                                                 \
            avx2_fn(W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);                                 \
        else                                                                                       \
            gemm(type, W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);                              \
    }

FLOAT_MATMUL(quant_avx512_matmul_f32, GGML_TYPE_F32, quant_avx2_matmul_f32)
FLOAT_MATMUL(quant_avx512_matmul_f16, GGML_TYPE_F16, quant_avx2_matmul_f16)
FLOAT_MATMUL(quant_avx512_matmul_bf16_fma, GGML_TYPE_BF16, quant_avx2_matmul_bf16)

#endif
