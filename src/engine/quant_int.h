/*
 * quant_int.h - private to the quant kernels: ggml block layouts and the per-ISA kernel tables.
 *
 * Block structs are byte-for-byte ggml-common.h (FP16 scales stored as raw uint16_t). Each ISA
 * file (quant_ref.c, quant_avx2.c, quant_avx512.c) exports one struct quant_kernels; a NULL entry
 * means "use the next ISA down" (avx512 -> avx2 -> ref), which quant_dispatch.c resolves once.
 */
#ifndef AF_ENGINE_QUANT_INT_H
#define AF_ENGINE_QUANT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/quant.h"

#define QK 32    /* elements per block of the _0 / _1 types */
#define QK_K 256 /* elements per K-quant super-block */

struct blk_q4_0 {
    uint16_t d;
    uint8_t qs[QK / 2];
};
struct blk_q4_1 {
    uint16_t d, m;
    uint8_t qs[QK / 2];
};
struct blk_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
struct blk_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
struct blk_q8_0 {
    uint16_t d;
    int8_t qs[QK];
};
struct blk_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
struct blk_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct blk_q6_k {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct blk_q8_k {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

_Static_assert(sizeof(struct blk_q4_0) == 18, "q4_0 size");
_Static_assert(sizeof(struct blk_q4_1) == 20, "q4_1 size");
_Static_assert(sizeof(struct blk_q5_0) == 22, "q5_0 size");
_Static_assert(sizeof(struct blk_q5_1) == 24, "q5_1 size");
_Static_assert(sizeof(struct blk_q8_0) == 34, "q8_0 size");
_Static_assert(sizeof(struct blk_q4_k) == 144, "q4_K size");
_Static_assert(sizeof(struct blk_q5_k) == 176, "q5_K size");
_Static_assert(sizeof(struct blk_q6_k) == 210, "q6_K size");
_Static_assert(sizeof(struct blk_q8_k) == 292, "q8_K size");

/* sum_i w[i] * x[i]; w a row of the weight type, x a row of its vec_dot type. */
typedef float (*quant_vec_dot_fn)(int64_t n, const void *w, const void *x);
/* out[j * ldo + r] for r in [r0, r1), j in [0, m): rows of W are wbytes apart, rows of X xbytes. */
typedef void (*quant_matmul_fn)(const void *W, size_t wbytes, int64_t k, const void *X,
                                size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                int64_t r1);
/* A weight in the packed form of the kernels that read it (quant_pack): rows x k of W (rows
 * wbytes apart) into out (64-byte aligned), or with out NULL nothing; returns the packed bytes.
 * And the matmul on that form, r0 a multiple of 16. */
typedef size_t (*quant_pack_fn)(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
typedef void (*quant_matmul_packed_fn)(const void *P, int64_t rows, int64_t k, const void *X,
                                       size_t xbytes, int64_t m, float *out, int64_t ldo,
                                       int64_t r0, int64_t r1);

/* CALL(n) for the register count n = nc (1..8, 8 for more), so that each count gets a copy of
 * the kernel specialised on it (the 16-row kernels: tokens held in registers). */
#define QUANT_NC_CASES(CALL)                                                                       \
    switch (nc) {                                                                                  \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    case 4:                                                                                        \
        CALL(4);                                                                                   \
        break;                                                                                     \
    case 5:                                                                                        \
        CALL(5);                                                                                   \
        break;                                                                                     \
    case 6:                                                                                        \
        CALL(6);                                                                                   \
        break;                                                                                     \
    case 7:                                                                                        \
        CALL(7);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(8);                                                                                   \
        break;                                                                                     \
    }

struct quant_kernels {
    const char *name;
    quant_vec_dot_fn vec_dot[GGML_TYPE_COUNT];
    quant_matmul_fn matmul[GGML_TYPE_COUNT];
    /* 1 where matmul's m = 1 has the bits of every batch size (quant_matmul_m1_invariant) */
    unsigned char m1_invariant[GGML_TYPE_COUNT];
    /* the packed form these matmul kernels read, with its bits (quant_pack); NULL: none */
    quant_pack_fn pack[GGML_TYPE_COUNT];
    quant_matmul_packed_fn matmul_packed[GGML_TYPE_COUNT];
    void (*axpy)(int64_t n, float a, const float *x, float *y);
    quant_axpy_rows_fn axpy_rows;
    quant_scores_fn scores;
    quant_axpy_rows_f16_fn axpy_rows_f16;
    quant_scores_f16_fn scores_f16;
    quant_exp_fn exp;
    quant_exp_sum_fn exp_sum;
    quant_silu_mul_fn silu_mul;
    quant_scale_max_fn scale_max;
    quant_scale_fn scale;
    /* activations to Q8_0 / Q8_K, nb blocks, the reference's bytes (quant_prepare_act) */
    void (*act_q8_0)(const float *x, void *y, int64_t nb);
    void (*act_q8_k)(const float *x, void *y, int64_t nb);
    /* activations to F16 / BF16, n values, the bits of quant_f32_to_f16 / quant_f32_to_bf16
     * (NULL: the reference's loop) */
    void (*act_f16)(const float *x, uint16_t *y, int64_t n);
    void (*act_bf16)(const float *x, uint16_t *y, int64_t n);
};

extern const struct quant_kernels quant_kernels_ref;
extern const struct quant_kernels quant_kernels_avx2;
extern const struct quant_kernels quant_kernels_avx512;

void quant_avx512_act_q8_0(const float *x, void *y, int64_t nb);
void quant_avx512_act_q8_k(const float *x, void *y, int64_t nb);
void quant_avx512_act_f16(const float *x, uint16_t *y, int64_t n);
void quant_avx512_act_bf16(const float *x, uint16_t *y, int64_t n);
void quant_avx2_act_q8_0(const float *x, void *y, int64_t nb);
void quant_avx2_act_q8_k(const float *x, void *y, int64_t nb);
void quant_avx2_act_f16(const float *x, uint16_t *y, int64_t n);
void quant_avx2_act_bf16(const float *x, uint16_t *y, int64_t n);

/* The four entry points of a quantized type's row kernels under one ISA (isa: avx2, avx512):
 * vec_dot, matmul, the packed form and its matmul. */
#define QUANT_ROW_KERNELS(isa, name)                                                               \
    float quant_##isa##_dot_##name(int64_t n, const void *w, const void *x);                       \
    void quant_##isa##_matmul_##name(const void *W, size_t wbytes, int64_t k, const void *X,       \
                                     size_t xbytes, int64_t m, float *out, int64_t ldo,            \
                                     int64_t r0, int64_t r1);                                      \
    size_t quant_##isa##_pack_##name(const void *W, size_t wbytes, int64_t rows, int64_t k,        \
                                     void *out);                                                   \
    void quant_##isa##_matmul_packed_##name(const void *P, int64_t rows, int64_t k, const void *X, \
                                            size_t xbytes, int64_t m, float *out, int64_t ldo,     \
                                            int64_t r0, int64_t r1);

/* The AVX2 kernels with 8 rows in the lanes: Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 (quant_avx2_r8.c)
 * and Q4_K / Q5_K / Q6_K (quant_avx2_k8.c), all with the bits of the AVX-512 kernels. */
#define QUANT_AVX2_ROWS8(name) QUANT_ROW_KERNELS(avx2, name)
QUANT_AVX2_ROWS8(q8_0)
QUANT_AVX2_ROWS8(q4_0)
QUANT_AVX2_ROWS8(q5_0)
QUANT_AVX2_ROWS8(q4_1)
QUANT_AVX2_ROWS8(q5_1)
QUANT_AVX2_ROWS8(q4_k)
QUANT_AVX2_ROWS8(q5_k)
QUANT_AVX2_ROWS8(q6_k)
#undef QUANT_AVX2_ROWS8

/* The AVX2 float kernels (quant_avx2_float.c), shared with quant_avx2.c's table. */
float quant_avx2_dot_f32(int64_t n, const void *w, const void *x);
float quant_avx2_dot_f16(int64_t n, const void *w, const void *x);
float quant_avx2_dot_bf16(int64_t n, const void *w, const void *x);
void quant_avx2_matmul_f32(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                           int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx2_matmul_f16(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                           int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx2_matmul_bf16(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                            int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* The AVX-512 float prefill matmuls (quant_avx512_float.c): the AVX2 kernels' bits, 16 lanes
 * per instruction; m = 1 goes to the AVX2 matmul. */
void quant_avx512_matmul_f32(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                             int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx512_matmul_f16(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                             int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx512_matmul_bf16_fma(const void *W, size_t wbytes, int64_t k, const void *X,
                                  size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                  int64_t r1);

/* The AVX-512 Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 kernels with 16 rows in the lanes
 * (quant_avx512_r16.c): one chain per output for every batch size, the vec_dot included. */
#define QUANT_AVX512_ROWS16(name) QUANT_ROW_KERNELS(avx512, name)
QUANT_AVX512_ROWS16(q8_0)
QUANT_AVX512_ROWS16(q4_0)
QUANT_AVX512_ROWS16(q5_0)
QUANT_AVX512_ROWS16(q4_1)
QUANT_AVX512_ROWS16(q5_1)
#undef QUANT_AVX512_ROWS16
#undef QUANT_ROW_KERNELS

/* F16 / BF16 / F32 packed with 16 rows in the lanes, [k][16] a group (quant_avx512_fpack.c): the
 * row-major kernels' bits (a lone F32 token the AVX2 dot's, the halves' the batch chain). */
size_t quant_avx512_pack_f16(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
size_t quant_avx512_pack_bf16_fma(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
size_t quant_avx512_pack_f32(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
void quant_avx512_matmul_packed_f32(const void *P, int64_t rows, int64_t k, const void *X,
                                    size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                    int64_t r1);
void quant_avx512_matmul_packed_bf16_fma(const void *P, int64_t rows, int64_t k, const void *X,
                                         size_t xbytes, int64_t m, float *out, int64_t ldo,
                                         int64_t r0, int64_t r1);
void quant_avx512_matmul_packed_f16(const void *P, int64_t rows, int64_t k, const void *X,
                                    size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                    int64_t r1);

/* BF16 on vdpbf16ps (quant_avx512_bf16.c): its own chain (pairs, odd element first, denormals
 * flushed) for every batch size, packed or row-major; odd k and CPUs without AVX-512 BF16 take
 * the _fma kernels above. */
size_t quant_avx512_pack_bf16(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
void quant_avx512_matmul_packed_bf16(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1);
void quant_avx512_matmul_bf16(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* F16 as 14-bit integers in blocks of 32 (quant_avx512_f16i.c, opt-in: quant_set_f16_int): its
 * packed form and matmul, and the row-major matmul with the same bits (it packs on the fly). */
size_t quant_avx512_pack_f16i(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
void quant_avx512_matmul_packed_f16i(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1);
void quant_avx512_matmul_f16i(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* The AVX-512 Q4_K / Q5_K / Q6_K kernels with 16 rows in the lanes (quant_avx512_k.c): one chain
 * per output for every batch size, the vec_dot included. */
size_t quant_avx512_pack_q4_k(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
size_t quant_avx512_pack_q5_k(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
size_t quant_avx512_pack_q6_k(const void *W, size_t wbytes, int64_t rows, int64_t k, void *out);
void quant_avx512_matmul_packed_q4_k(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1);
void quant_avx512_matmul_packed_q5_k(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1);
void quant_avx512_matmul_packed_q6_k(const void *P, int64_t rows, int64_t k, const void *X,
                                     size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0,
                                     int64_t r1);
float quant_avx512_dot_q4_k(int64_t n, const void *w, const void *x);
float quant_avx512_dot_q5_k(int64_t n, const void *w, const void *x);
float quant_avx512_dot_q6_k(int64_t n, const void *w, const void *x);
void quant_avx512_matmul_q4_k(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx512_matmul_q5_k(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);
void quant_avx512_matmul_q6_k(const void *W, size_t wbytes, int64_t k, const void *X, size_t xbytes,
                              int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* The exp kernels of each ISA (vexp.c), all with quant_expf's bits. */
void quant_exp_ref(int64_t n, const float *x, float sub, float div, float *y);
void quant_exp_avx2(int64_t n, const float *x, float sub, float div, float *y);
void quant_exp_avx512(int64_t n, const float *x, float sub, float div, float *y);
double quant_exp_sum_ref(int64_t n, const float *x, float sub, float div, float *y);
double quant_exp_sum_avx2(int64_t n, const float *x, float sub, float div, float *y);
double quant_exp_sum_avx512(int64_t n, const float *x, float sub, float div, float *y);
void quant_silu_mul_ref(int64_t n, float *g, const float *up);
void quant_silu_mul_avx2(int64_t n, float *g, const float *up);
void quant_silu_mul_avx512(int64_t n, float *g, const float *up);
float quant_scale_max_ref(int64_t n, float *x, float a);
float quant_scale_max_avx2(int64_t n, float *x, float a);
float quant_scale_max_avx512(int64_t n, float *x, float a);
void quant_scale_ref(int64_t n, float *x, float a);
void quant_scale_avx2(int64_t n, float *x, float a);
void quant_scale_avx512(int64_t n, float *x, float a);

/* 1 when the CPU runs the ISA's kernels (quant_avx2.c / quant_avx512.c). */
int quant_avx2_usable(void);
int quant_avx512_usable(void);

/* The scale / min pair j (0..7) of a Q4_K / Q5_K block's 12 packed bytes. */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* The reference kernels, also used by the SIMD files for tails and odd shapes. */
float quant_ref_vec_dot(uint32_t t, int64_t n, const void *w, const void *x);
/* The generic matmul: a loop of `dot` over every (row, token) pair. */
void quant_matmul_loop(quant_vec_dot_fn dot, const void *W, size_t wbytes, int64_t k, const void *X,
                       size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* How far ahead of a packed 16-row group's reads its kernel prefetches the weight stream (the
 * groups lie end to end, so this is one linear stream): the group's own size, so that each block
 * requests its share of the next group, up to 16 KiB; past that, 12 KiB. The prefetches are
 * non-temporal, into L1 (48 KiB on Zen 5): a whole group ahead, a long row's group (Q6_K at k =
 * 4,864: 66 KiB) pushed its early lines out before they were read. bench/quant from DRAM, 2
 * threads, k = 4,864, against a group ahead: Q6_K 1.24-1.29x at m = 1, 1.17-1.26x at m = 8;
 * Q4_K 1.09-1.13x / 1.09-1.15x; Q8_0 1.26x / 1.14x; Q5_0 1.08x / 1.06x. At k = 896 (15 KiB
 * Q8_0 groups) 12 KiB was level or 3% slower, so short groups keep a group. */
static inline size_t quant_prefetch_ahead(size_t gbytes)
{
    return gbytes <= 16384 ? gbytes : 12288;
}

/* The attention scores kernels' look-ahead: the key blocks (16 positions each) of the tile of nb
 * blocks that starts at position t1 of a call over len positions, into next[0..nb-1] (the last
 * block repeated where the tile has fewer); NULL when no block starts there. */
static inline const void *const *quant_next_tile(const void *const *kb, int64_t len, int64_t t1,
                                                 int nb, const void **next)
{
    const int64_t nblk = (len + 15) / 16, b1 = t1 / 16;
    if (b1 >= nblk)
        return NULL;
    for (int v = 0; v < nb; v++)
        next[v] = kb[b1 + v < nblk ? b1 + v : nblk - 1];
    return next;
}

#endif
