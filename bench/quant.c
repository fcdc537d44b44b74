/*
 * bench/quant.c - GFLOP/s of quant_matmul per tensor type and ISA.
 *
 * The weight is the Qwen2.5-0.5B ffn_down shape: 896 rows of k = 4864 (a multiple of 256, so
 * the K-quants run on it too), random gaussian values; activations are m = 1 (decode) and
 * m = 64 (prefill) tokens prepared with quant_prepare_act. GFLOP/s = 2 * rows * k * m / time.
 * The last column estimates prefill tokens/s on 2 threads for the 0.5B model's 0.716 GFLOP
 * of non-embedding matmuls per token (2 * m64 GFLOP/s / 0.716), and "GB/s" the weight bytes
 * streamed per second at m = 1. Times are the thread's CPU time on one thread (robust on a
 * shared machine).
 *
 * --copies N cycles through N copies of the weight (N = 32: 140 MB of Q8_0), so each call
 * streams it from DRAM as the engine's decode does, instead of from L3.
 *
 * --rows R --k K set the weight's shape (the 0.5B shape's gate and up: --rows 4864 --k 896);
 * types whose blocks do not divide k are skipped. --threads N splits each call's rows into N
 * contiguous shares run at once (the engine's split): wall-clock times, GFLOP/s of all N.
 *
 *   build/release/bench/quant [--min-ms 300] [--isa ref|avx2|avx512] [--type Q4_0] [-m 64]
 *                             [--copies 1] [--packed 0|1] [--rows 896] [--k 4864] [--threads 1]
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "engine/quant.h"

/* The weight's shape: --rows / --k (default the ffn_down shape above). */
static int64_t ROWS = 896, K = 4864;
#define GFLOP_PER_TOKEN 0.716

static const uint32_t types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float rng_gauss(void)
{
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        s += (double)(rng_state >> 11) * 0x1.0p-53 - 0.5;
    }
    return (float)(s * 1.7320508);
}

/* Copies of the weight to cycle through (--copies). */
static int n_copies = 1;

/* --packed 1: each copy in the packed form (quant_pack), as the engine loads it where the
 * kernels have one; types without one are skipped. */
static int packed;
static int form; /* quant_pack's, for quant_matmul_packed */

/* Threads that share each call, each a contiguous share of the rows (--threads 2), as the
 * engine splits a matmul; timed by the wall clock then, so a quiet machine is needed. */
static int n_threads = 1;

static void call_rows(uint32_t t, const uint8_t *w, const void *X, int64_t m, float *out,
                      int64_t r0, int64_t r1)
{
    if (packed)
        (void)quant_matmul_packed(t, form, w, ROWS, K, X, m, out, ROWS, r0, r1);
    else
        quant_matmul(t, w, K, X, m, out, ROWS, r0, r1);
}

static double now_ms(void)
{
    return n_threads > 1 ? af_clock_ms() : af_clock_thread_cpu_ms();
}

/* Seconds per call of quant_matmul, repeated until min_ms have passed. */
static double time_matmul(uint32_t t, const uint8_t *W, size_t wsize, const void *X, int64_t m,
                          float *out, double min_ms)
{
    int reps = 0;
    double t0 = now_ms(), el;
    do {
        const uint8_t *w = W + (size_t)(reps % n_copies) * wsize;
        if (n_threads > 1) {
#pragma omp parallel num_threads(n_threads)
            {
                const int64_t nt = omp_get_num_threads(), i = omp_get_thread_num();
                const int64_t r0 = (ROWS * i / nt + 15) / 16 * 16;
                const int64_t r1 = i == nt - 1 ? ROWS : (ROWS * (i + 1) / nt + 15) / 16 * 16;
                if (r0 < r1)
                    call_rows(t, w, X, m, out, r0, r1);
            }
        } else {
            call_rows(t, w, X, m, out, 0, ROWS);
        }
        reps++;
        el = now_ms() - t0;
    } while (el < min_ms);
    return el / 1000.0 / reps;
}

/* Prefill tokens (-m; the engine's prefill batches are up to 256). */
static int n_pre = 64;

static void bench_type(uint32_t t, const char *isa, const float *fw, const float *fx, double min_ms)
{
    size_t wb = quant_row_bytes(t, K), xb = quant_row_bytes(quant_vec_dot_type(t), K);
    /* one copy: the rows, or their packed form (a little larger where blocks go in pairs),
     * 64-byte aligned as the engine aligns it */
    const size_t wsize = ((packed ? quant_packed_bytes(t, ROWS, K) : wb * ROWS) + 63) / 64 * 64;
    uint8_t *W = aligned_alloc(64, wsize * (size_t)n_copies), *X = malloc(xb * (size_t)n_pre);
    uint8_t *rows = malloc(wb * ROWS);
    float *out = malloc(sizeof(float) * ROWS * (size_t)n_pre);
    if (!W || !X || !rows || !out) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < ROWS; r++)
        quant_quantize_row(t, fw + (size_t)r * K, rows + (size_t)r * wb, K);
    if (packed)
        form = quant_pack(t, rows, ROWS, K, W);
    else
        memcpy(W, rows, wb * ROWS);
    free(rows);
    for (int c = 1; c < n_copies; c++)
        memcpy(W + (size_t)c * wsize, W, wsize);
    for (int j = 0; j < n_pre; j++)
        quant_prepare_act(t, fx + (size_t)j * K, X + (size_t)j * xb, K);
    double s1 = time_matmul(t, W, wsize, X, 1, out, min_ms);
    double s64 = time_matmul(t, W, wsize, X, n_pre, out, min_ms);
    double g1 = 2.0 * ROWS * K / s1 / 1e9, g64 = 2.0 * ROWS * K * n_pre / s64 / 1e9;
    printf("%-5s %-7s %9.2f %9.2f %9.2f %11.0f\n", quant_type_name(t), isa, g1,
           (double)(wb * ROWS) / s1 / 1e9, g64, 2.0 * g64 / GFLOP_PER_TOKEN);
    fflush(stdout);
    free(W);
    free(X);
    free(out);
}

int main(int argc, char **argv)
{
    double min_ms = 300;
    const char *only_isa = NULL, *only_type = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--min-ms"))
            min_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--isa"))
            only_isa = argv[i + 1];
        else if (!strcmp(argv[i], "--type"))
            only_type = argv[i + 1];
        else if (!strcmp(argv[i], "-m") && atoi(argv[i + 1]) >= 2)
            n_pre = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--copies") && atoi(argv[i + 1]) >= 1)
            n_copies = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--packed"))
            packed = atoi(argv[i + 1]) != 0;
        else if (!strcmp(argv[i], "--threads") && atoi(argv[i + 1]) >= 1)
            n_threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rows") && atoll(argv[i + 1]) >= 1)
            ROWS = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--k") && atoll(argv[i + 1]) >= 1 && atoll(argv[i + 1]) % 32 == 0)
            K = atoll(argv[i + 1]);
        else {
            fprintf(stderr,
                    "usage: bench/quant [--min-ms 300] [--isa ref|avx2|avx512] [--type "
                    "Q4_0] [-m 64 (prefill tokens, 2+)] [--copies 1] [--packed 0|1] [--rows "
                    "896] [--k 4864 (a multiple of 32)] [--threads 1]\n");
            return 2;
        }
    }
    float *fw = malloc(sizeof(float) * ROWS * K), *fx = malloc(sizeof(float) * (size_t)n_pre * K);
    if (!fw || !fx)
        return 1;
    for (size_t i = 0; i < (size_t)ROWS * K; i++)
        fw[i] = 0.02f * rng_gauss();
    for (size_t i = 0; i < (size_t)n_pre * K; i++)
        fx[i] = rng_gauss();
    printf("quant_matmul, W %lld x %lld, %d cop%s, %d thread%s (auto ISA: %s)\n", (long long)ROWS,
           (long long)K, n_copies, n_copies == 1 ? "y" : "ies", n_threads,
           n_threads == 1 ? "" : "s", quant_isa());
    char mcol[32];
    snprintf(mcol, sizeof mcol, "GF/s m%d", n_pre);
    printf("%-5s %-7s %9s %9s %9s %11s\n", "type", "isa", "GF/s m=1", "GB/s m=1", mcol,
           "tok/s 2thr");
    static const char *isas[] = {"ref", "avx2", "avx512"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        if ((only_type && quant_type_from_name(only_type) != (int)types[ti]) ||
            K % quant_block_elems(types[ti]) != 0)
            continue;
        for (size_t ii = 0; ii < 3; ii++) {
            if ((only_isa && strcmp(only_isa, isas[ii])) || quant_set_isa(isas[ii]) != 0 ||
                (packed && !quant_packed_bytes(types[ti], ROWS, K)))
                continue;
            bench_type(types[ti], isas[ii], fw, fx, min_ms);
        }
    }
    (void)quant_set_isa("auto");
    free(fw);
    free(fx);
    return 0;
}
