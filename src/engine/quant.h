/*
 * quant.h - ggml tensor types: block layouts, reference quantisers, dequantisation, and the
 * dot-product / matmul kernels the forward pass runs on.
 *
 * Type ids and block layouts are ggml's, so GGUF files from llama.cpp load as they are and the
 * files we write load in llama.cpp. Activations are rounded the way llama.cpp does before
 * integer dot products (Q8_0 for the 32-blocks, Q8_K for the K-quants, F16 / BF16 for those
 * types) so our logits follow its numbers, not only the exact maths.
 *
 * Every optimised kernel has a plain C reference twin; the ISA is chosen once at start-up from
 * CPUID (AVX-512 VNNI, AVX2+FMA+F16C, or reference) and can be forced for tests. All functions
 * are thread-safe; none allocates unless it says so.
 */
#ifndef AF_ENGINE_QUANT_H
#define AF_ENGINE_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40 /* ids below this are ggml's; not all are supported */
};

/* 1 when `t` is a type we can read, dequantise and compute with: F32, F16, BF16, Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (and Q8_K, activations only). */
int quant_type_supported(uint32_t t);
/* "F32", "Q4_K", ...; "?" for unknown ids. Static. */
const char *quant_type_name(uint32_t t);
/* Case-insensitive name to id ("q4_k", "Q8_0", "bf16"); -1 when unknown. */
int quant_type_from_name(const char *name);
/* The weight types the engine reads, as a list for messages (static). */
const char *quant_supported_names(void);
/* Elements per block (1 for F32/F16/BF16, 32, or 256 for the K-quants); 0 if unsupported. */
int64_t quant_block_elems(uint32_t t);
/* Bytes per block; 0 if unsupported. */
size_t quant_block_bytes(uint32_t t);
/* Bytes of a row of n elements; n must be a multiple of quant_block_elems(t). */
size_t quant_row_bytes(uint32_t t, int64_t n);

/* Half-precision conversions (round to nearest even, as ggml). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);
/* n of quant_f32_to_f16's conversions, with the vector kernel where there is one (same bits). */
void quant_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);

/* n must be a multiple of the block size. */
void quant_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n);
/* The reference quantiser, byte-identical to ggml's quantize_row_*_ref (no importance
 * matrix), so `agentflow model quantize` writes what llama-quantize writes. */
void quant_quantize_row(uint32_t t, const float *src, void *dst, int64_t n);

/* The type activations are converted to before a dot product with a row of type t: F16 / BF16
 * for those, Q8_K for the K-quants, Q8_0 for the 32-blocks (Q4_1 / Q5_1 too, where ggml uses
 * Q8_1: same quants, the block sum is computed exactly instead of stored in fp16), else F32. */
uint32_t quant_vec_dot_type(uint32_t t);
/* Converts n activations to quant_vec_dot_type(t) (dst holds quant_row_bytes of that type). */
void quant_prepare_act(uint32_t t, const float *src, void *dst, int64_t n);
/* sum_i w[i] * x[i] over n elements; w a row of type t, x a row of quant_vec_dot_type(t). */
float quant_vec_dot(uint32_t t, int64_t n, const void *w, const void *x);

/* out[j * ldo + r] = dot(W row r, X row j) for r in [r0, r1) and j in [0, m).
 * W: `rows` rows of k elements of type t, rows contiguous. X: m rows prepared by
 * quant_prepare_act (each quant_row_bytes(quant_vec_dot_type(t), k) bytes, contiguous).
 * The caller splits [0, rows) between threads; this call is single-threaded and tiles over
 * both W rows and X rows so prefill reuses each loaded weight block for several tokens. */
void quant_matmul(uint32_t t, const void *W, int64_t k, const void *X, int64_t m, float *out,
                  int64_t ldo, int64_t r0, int64_t r1);

/* Weights packed for the active kernels: 16-row groups whose blocks are stored transposed, as
 * the AVX-512 kernels read them, so that a call loads what it would otherwise transpose (every
 * call, every block). The bytes of the packed form of rows x k of type t (about the rows' own
 * size, padded to a multiple of 16 rows and of 2 blocks), or 0 when the active kernels have
 * none for t. */
size_t quant_packed_bytes(uint32_t t, int64_t rows, int64_t k);
/* Writes the packed form of W (rows x k of type t, row-major) into P (quant_packed_bytes bytes,
 * 64-byte aligned). Returns the form written (> 0), for quant_matmul_packed: the forms differ
 * between kernel sets (AVX-512 keeps 16 rows in the lanes, AVX2 8), and quant_set_isa or
 * quant_set_f16_int may change the set after packing. */
int quant_pack(uint32_t t, const void *W, int64_t rows, int64_t k, void *P);
/* quant_matmul on a weight of rows x k packed in `form` (quant_pack's return), with
 * quant_matmul's bits; r0 a multiple of 16. Returns 0, or -1 (nothing done) when the active
 * kernels do not read that form (another kernel set packed it, or none reads t packed): then
 * call quant_matmul on the row-major weight. */
int quant_matmul_packed(uint32_t t, int form, const void *P, int64_t rows, int64_t k, const void *X,
                        int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1);

/* 1 when quant_matmul gives a lone token (m = 1) of type t the bits it gets in a batch of any
 * size under the active kernels (AVX-512 Q8_0), so that a caller that needs batch invariance
 * need not compute a lone row as a pair; 0 otherwise. */
int quant_matmul_m1_invariant(uint32_t t);

/* Row ranges per thread a caller should split a matmul of m tokens into, for threads to take
 * as they come free: 1 where the kernel packs the tokens once per call (float types'
 * prefill: more calls would repack them), 16 for a decode step (m <= 16: the fine ranges even
 * out the threads' finishing times, and forward.c gives each thread a contiguous run of them, so
 * each still streams its weights in order; at m = 8 they were 1.6% faster than 4, median of 15
 * alternated rounds), else 4. No kernel's bits depend on the split. */
int quant_matmul_ranges_per_thread(uint32_t t, int64_t m);

/* y[i] += a * x[i] (multiply, then add: the same rounding on every ISA). The arithmetic the
 * attention kernels below reproduce bit for bit (their tests' oracle). */
void quant_axpy(int64_t n, float a, const float *x, float *y);

/* y[r][i] += a[r][t] * xs[t][i] for rows r < ng, i < len, t = 0 .. n - 1 in order, each term
 * a multiply then an add: the bits of n quant_axpy calls per row, with the rows held in
 * registers across the terms and each xs row loaded once for all of them. Attention's sum of
 * value rows (which sit in different KV blocks) for the query heads of one kv head. */
typedef void (*quant_axpy_rows_fn)(int64_t len, int64_t n, int64_t ng, const float *const *a,
                                   const float *const *xs, float *const *y);
quant_axpy_rows_fn quant_axpy_rows_kernel(void);

/* Attention scores straight from the KV blocks: sc[g][t] = sum over i < hd of
 * q[g][i] * kb[t / 16][i * 16 + t % 16], for g < ng rows and t < len, each term a multiply then
 * an add onto the sum so far, i in order from +0 (the bits of memset(sc, 0) and hd * ng
 * quant_axpy calls), with the sums held in registers across i. kb[b] holds the keys of
 * positions 16b .. 16b + 15 as [hd][16] (a KV block's layout); lanes past len are not read. */
typedef void (*quant_scores_fn)(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                                const float *const *kb, float *const *sc);
quant_scores_fn quant_scores_kernel(void);

/* The same two kernels over an F16 KV cache (keys / values stored as F16): the bits of the F32
 * kernels on the stored values converted to F32 (exact), so converting first and calling the F32
 * kernel is their oracle. */
typedef void (*quant_axpy_rows_f16_fn)(int64_t len, int64_t n, int64_t ng, const float *const *a,
                                       const uint16_t *const *xs, float *const *y);
quant_axpy_rows_f16_fn quant_axpy_rows_f16_kernel(void);
typedef void (*quant_scores_f16_fn)(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                                    const uint16_t *const *kb, float *const *sc);
quant_scores_f16_fn quant_scores_f16_kernel(void);

/* exp(x) with the bits of glibc's expf (2.28+, its FMA build) on every libc and ISA: the
 * engine's softmax, SiLU and sampler use it (vexp.c). */
float quant_expf(float x);
/* y[i] = quant_expf((x[i] - sub) / div) for i < n (div 1: no division). y may be x. */
typedef void (*quant_exp_fn)(int64_t n, const float *x, float sub, float div, float *y);
quant_exp_fn quant_exp_kernel(void);
/* The same y, and returns the sum of y[0..n) in double: y[i] goes to partial sum i % 16, in
 * order of i, and the partials add up as ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7)) with
 * q[j] = p[j] + p[j + 8]. The same bits on every ISA; the sampler's softmax sum, in the pass
 * that writes the exps (one chain of adds over 150k logits was a fifth of a draw). */
typedef double (*quant_exp_sum_fn)(int64_t n, const float *x, float sub, float div, float *y);
quant_exp_sum_fn quant_exp_sum_kernel(void);
/* g[i] = g[i] / (1 + quant_expf(-g[i])) * up[i]: SwiGLU's SiLU gate times the up projection. */
typedef void (*quant_silu_mul_fn)(int64_t n, float *g, const float *up);
quant_silu_mul_fn quant_silu_mul_kernel(void);

/* Softmax's exact elementwise steps, vectorised (the same bits on every ISA):
 * scale_max: x[i] *= a for i < n, returns the largest (-inf for n 0; NaNs ignored);
 * scale: x[i] *= a. */
typedef float (*quant_scale_max_fn)(int64_t n, float *x, float a);
quant_scale_max_fn quant_scale_max_kernel(void);
typedef void (*quant_scale_fn)(int64_t n, float *x, float a);
quant_scale_fn quant_scale_kernel(void);

/* Kernel selection. "ref", "avx2", "avx512" (VNNI); "auto" = the best this CPU runs.
 * Returns 0, or -1 when the CPU cannot run that ISA (selection unchanged). Not thread-safe:
 * call before starting threads (tests, start-up). */
int quant_set_isa(const char *name);
/* The ISA in use now. Static string. */
const char *quant_isa(void);
/* F16 weights as 14-bit integers (on: 1) where the AVX-512 table is in use: prefill about 1.4x
 * the exact F16 kernels', logits about 1e-3 off theirs (quant_avx512_f16i.c). Off by default;
 * the environment's AGENTFLOW_F16=int turns it on at start. A weight packed in one mode must be
 * read in it: set it before loading a model. Returns 1 when the integer kernels are in use.
 * Not thread-safe, as quant_set_isa. */
int quant_set_f16_int(int on);

#endif
