/*
 * gemm.h - the F32 matrix products of training (src/train/). A linear layer with W stored like
 * the engine's weights ([n_out][n_in], row-major) needs three forms:
 *
 *   forward   out = X · Wᵀ        train_gemm_nt   C[M][N] = A[M][K] · B[N][K]ᵀ
 *   input     dX  = dOut · W      train_gemm_nn   C[M][N] = A[M][K] · B[K][N]
 *   weight    dW  = dOutᵀ · X     train_gemm_tn   C[M][N] = A[K][M]ᵀ · B[K][N]
 *
 * All matrices are dense row-major with no padding. `accumulate` = 0 overwrites C, 1 adds to it.
 * Each form has three implementations: *_naive (triple loop, the reference the tests compare
 * with), *_blocked (packed panels, a 6x16 AVX2+FMA micro-kernel when the CPU has it, OpenMP
 * over row blocks) and the plain name, which splits C between the OpenMP threads and runs
 * train_gemm_avx512 on each slice when the CPU has AVX-512, else cblas_sgemm when built with
 * -DAF_HAVE_CBLAS (and -lopenblas), else *_blocked. Safe from any thread; C must not alias A
 * or B. Our AVX-512 kernel over OpenBLAS's: each output is one FMA chain over k, so the bits
 * do not depend on the thread count or split (OpenBLAS's change with both), and its speed does
 * not depend on OpenBLAS's CPU table or an OPENBLAS_CORETYPE in the environment.
 * AGENTFLOW_TRAIN_GEMM=avx512|openblas|blocked picks one, for comparisons.
 */
#ifndef AF_TRAIN_GEMM_H
#define AF_TRAIN_GEMM_H

#include <stdint.h>

void train_gemm_nt(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate);
void train_gemm_nn(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate);
void train_gemm_tn(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                   int accumulate);

void train_gemm_nt_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate);
void train_gemm_nn_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate);
void train_gemm_tn_naive(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                         int accumulate);

void train_gemm_nt_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate);
void train_gemm_nn_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate);
void train_gemm_tn_blocked(int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                           float *c, int accumulate);

/* One single-threaded product on AVX-512 (the caller checks train_gemm_has_avx512):
 * C[m][ldc] (+)= A_op · B_op, A stored [k][m] when ta (else [m][k]), B stored [n][k] when tb
 * (else [k][n]), leading dimensions lda, ldb. Each output is an FMA chain over k in order, so
 * how C is split between calls does not change its bits. */
void train_gemm_avx512(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate);
/* 1 when this CPU has AVX-512F. */
int train_gemm_has_avx512(void);

/* 1 when *_blocked uses the AVX2+FMA micro-kernel on this CPU. */
int train_gemm_has_avx2(void);
/* Threads of the products (OpenMP's; OpenBLAS runs one per slice); n <= 0: the default. */
void train_gemm_set_threads(int n);
/* "avx512", "openblas" or "blocked": what the plain-named forms run (AVX-512 when the CPU has
 * it and AGENTFLOW_ISA is not ref or avx2, else OpenBLAS when linked, else the blocked driver;
 * AGENTFLOW_TRAIN_GEMM names one instead, when this build and CPU can run it). */
const char *train_gemm_backend(void);

#endif
