/*
 * bench/train_ops.c - GFLOP/s of the training matmuls (src/train/gemm.h) at the Qwen2.5-0.5B
 * linear shapes with 1024 rows: the forward X·Wᵀ, the input gradient dOut·W and the weight
 * gradient dOutᵀ·X, for the naive reference, the blocked kernel and the default backend.
 *
 *   build/release/bench/train_ops [-t THREADS] [-r ROWS] [--no-naive]
 *
 * Prints a markdown table; record it in docs/PERFORMANCE.md.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/xalloc.h"
#include "train/gemm.h"

typedef void (*gemm_fn)(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
                        int accumulate);

static void fill(float *p, size_t n, uint64_t *st)
{
    for (size_t i = 0; i < n; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (float)((double)(*st >> 40) / (double)(1ull << 24)) - 0.5f;
    }
}

/* Best-of-reps GFLOP/s of fn on (m, n, k). */
static double measure(gemm_fn fn, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                      float *c, int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = af_clock_ms();
        fn(m, n, k, a, b, c, 0);
        double dt = af_clock_ms() - t0;
        best = dt < best ? dt : best;
    }
    if (best < 0.001)
        best = 0.001;
    return 2.0 * (double)m * (double)n * (double)k / (best * 1e6);
}

struct shape {
    const char *name;
    int64_t n_in, n_out;
};

int main(int argc, char **argv)
{
    int threads = 0, naive = 1;
    int64_t rows = 1024;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = (int)strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rows = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-naive"))
            naive = 0;
        else {
            fprintf(stderr, "usage: %s [-t THREADS] [-r ROWS] [--no-naive]\n", argv[0]);
            return 2;
        }
    }
    if (threads > 0)
        omp_set_num_threads(threads);
    const struct shape shapes[] = {{"attn 896x896", 896, 896},
                                   {"ffn up 896->4864", 896, 4864},
                                   {"ffn down 4864->896", 4864, 896}};
    printf("backend: %s, avx2 micro-kernel: %s, threads: %d, rows: %lld\n\n", train_gemm_backend(),
           train_gemm_has_avx2() ? "yes" : "no", omp_get_max_threads(), (long long)rows);
    printf("| shape | product | naive GFLOP/s | blocked GFLOP/s | default GFLOP/s |\n");
    printf("|---|---|---:|---:|---:|\n");
    uint64_t st = 42;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t ni = shapes[s].n_in, no = shapes[s].n_out;
        float *x = af_xmalloc((size_t)(rows * ni) * sizeof(float));
        float *w = af_xmalloc((size_t)(no * ni) * sizeof(float));
        float *y = af_xmalloc((size_t)(rows * no) * sizeof(float));
        float *c = af_xmalloc((size_t)(rows * (ni > no ? ni : no) + ni * no) * sizeof(float));
        fill(x, (size_t)(rows * ni), &st);
        fill(w, (size_t)(no * ni), &st);
        fill(y, (size_t)(rows * no), &st);
        /* forward Y[rows][no] = X·Wᵀ; dX[rows][ni] = dY·W; dW[no][ni] = dYᵀ·X */
        const struct {
            const char *what;
            gemm_fn nv, bl, df;
            int64_t m, n, k;
            const float *a, *b;
        } prods[] = {
            {"out = X·Wᵀ", train_gemm_nt_naive, train_gemm_nt_blocked, train_gemm_nt, rows, no, ni,
             x, w},
            {"dX = dY·W", train_gemm_nn_naive, train_gemm_nn_blocked, train_gemm_nn, rows, ni, no,
             y, w},
            {"dW = dYᵀ·X", train_gemm_tn_naive, train_gemm_tn_blocked, train_gemm_tn, no, ni, rows,
             y, x},
        };
        for (size_t p = 0; p < sizeof prods / sizeof prods[0]; p++) {
            double gn = naive ? measure(prods[p].nv, prods[p].m, prods[p].n, prods[p].k, prods[p].a,
                                        prods[p].b, c, 1)
                              : 0;
            double gb = measure(prods[p].bl, prods[p].m, prods[p].n, prods[p].k, prods[p].a,
                                prods[p].b, c, 3);
            double gd = measure(prods[p].df, prods[p].m, prods[p].n, prods[p].k, prods[p].a,
                                prods[p].b, c, 3);
            printf("| %s | %s | %.1f | %.1f | %.1f |\n", shapes[s].name, prods[p].what, gn, gb, gd);
            fflush(stdout);
        }
        free(x);
        free(w);
        free(y);
        free(c);
    }
    return 0;
}
