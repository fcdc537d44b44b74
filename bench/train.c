/*
 * bench/train.c - training speed: forward + backward tokens/s of src/train/net.h in two settings,
 * with the matmul GFLOP/s against the SGEMM peak measured in the same run.
 *
 *  1. LoRA (rank 16, all seven targets) on the random Qwen2.5-0.5B shape, sequence --seq
 *     (default 1024), base in --type (default Q8_0; made once into --dir);
 *  2. full training from scratch of byte-vocabulary models of llm.c's shapes (4 layers width
 *     128, 4 × 256, 6 × 384; sequence 512, batch 4), one AdamW step per batch; llm.c's CPU
 *     trainer (train_gpt2.c, 2 threads) gave 1,780 / 819 / 288 tokens/s on this kind of machine.
 *
 *   build/release/bench/train [-t 2] [--seq 1024] [--type Q8_0] [--dir /tmp/agentflow-bench]
 *                             [--skip-lora] [--skip-full] [--steps 3]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef AF_HAVE_CBLAS
#include <cblas.h>
#endif

#include "agentflow/engine.h"
#include "core/clock.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/gemm.h"
#include "train/net.h"
#include "train/optim.h"

struct opts {
    int threads, seq, steps, skip_lora, skip_full;
    const char *type, *dir;
};

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* The SGEMM peak of this run: the best of a few 1024 x 4864 x 896 products (the 0.5B FFN),
 * by train_gemm_nt (what training runs) and, when linked, by OpenBLAS's cblas_sgemm on the
 * same threads; *ours and *blas get each, the larger is returned. */
static double sgemm_peak(int threads, double *ours, double *blas)
{
    const int64_t m = 1024, n = 4864, k = 896;
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(n * k) * 4),
          *c = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < n * k; i++)
        b[i] = (float)(i % 5) * 0.1f;
    double best[2] = {0, 0};
    for (int r = 0; r < 10; r++) {
        const int which = r % 2;
        const double t0 = af_clock_ms();
        if (which == 0)
            train_gemm_nt(m, n, k, a, b, c, 0);
#ifdef AF_HAVE_CBLAS
        else {
            openblas_set_num_threads(threads);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
                        (int)k, b, (int)k, 0.0f, c, (int)n);
        }
#else
        else
            continue;
#endif
        const double s = (af_clock_ms() - t0) / 1000.0;
        const double gf = 2.0 * (double)m * (double)n * (double)k / s / 1e9;
        best[which] = gf > best[which] ? gf : best[which];
    }
#ifdef AF_HAVE_CBLAS
    openblas_set_num_threads(1); /* as train_gemm runs it: one per OpenMP slice */
#endif
    (void)threads;
    free(a);
    free(b);
    free(c);
    *ours = best[0];
    *blas = best[1];
    return best[0] > best[1] ? best[0] : best[1];
}

static const char *blas_core(void)
{
#ifdef AF_HAVE_CBLAS
    return openblas_get_corename();
#else
    return "(not linked)";
#endif
}

static void rand_tokens(int32_t *t, int64_t n, int64_t V, uint64_t *st)
{
    for (int64_t i = 0; i < n; i++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((*st >> 33) % (uint64_t)V);
    }
}

static int bench_lora(const struct opts *o, double peak)
{
    char path[1024], err[1024];
    mkdir(o->dir, 0755);
    snprintf(path, sizeof path, "%s/qwen2.5-0.5b-%s.gguf", o->dir, o->type);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "making %s ...\n", path);
        struct af_engine_random_params rp = {"qwen2", "qwen2.5-0.5b", o->type, 1, NULL};
        if (af_engine_make_random(&rp, path, err, sizeof err)) {
            fprintf(stderr, "bench/train: %s\n", err);
            return -1;
        }
    }
    struct model *m = NULL;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "bench/train: %s\n", err);
        return -1;
    }
    struct lora_adapter *l = NULL;
    if (lora_new(&m->hp, 16, 32, 0, LORA_ALL_TARGETS, &l, err, sizeof err))
        return -1;
    lora_init(l, 1);
    for (int rec = 0; rec < 2; rec++) {
        struct train_net_params p = train_net_default_params();
        p.lora = l;
        p.checkpoint = rec;
        struct train_net *n = NULL;
        if (train_net_new(m, &p, &n, err, sizeof err)) {
            fprintf(stderr, "bench/train: %s\n", err);
            return -1;
        }
        const int64_t T = o->seq;
        int32_t *tok = malloc((size_t)T * sizeof *tok);
        uint64_t st = 3;
        rand_tokens(tok, T, m->hp.n_vocab, &st);
        double loss, best = 1e30;
        for (int s = 0; s < o->steps + 1; s++) {
            const double t0 = af_clock_ms();
            if (train_net_loss(n, tok, T, NULL, 1, &loss, NULL, err, sizeof err)) {
                fprintf(stderr, "bench/train: %s\n", err);
                return -1;
            }
            const double ms = af_clock_ms() - t0;
            if (s > 0 && ms < best) /* the first run allocates */
                best = ms;
        }
        const double gf = train_net_flops(n, T, 1) / (best / 1000.0) / 1e9;
        printf("| LoRA r16 all, 0.5B %s, seq %lld%s | %.0f | %.1f | %.0f%% | %.0f |\n", o->type,
               (long long)T, rec ? ", recompute" : "", (double)T / (best / 1000.0), gf,
               100.0 * gf / peak, peak_rss_mb());
        fflush(stdout);
        free(tok);
        train_net_free(n);
    }
    lora_free(l);
    model_free(m);
    return 0;
}

static int bench_full(const struct opts *o, int layers, int width, double peak, double llmc)
{
    char err[1024];
    struct model_hparams hp = {0};
    hp.arch = MODEL_ARCH_LLAMA;
    hp.n_vocab = 256;
    hp.n_ctx_train = 1024;
    hp.n_embd = width;
    hp.n_layer = layers;
    hp.n_head = width / 64;
    hp.n_head_kv = width / 64;
    hp.head_dim = 64;
    hp.n_rot = 64;
    /* SwiGLU's three matrices at 8/3 · width match GPT-2's two at 4 · width in parameters */
    hp.n_ff = (width * 8 / 3 + 31) / 32 * 32;
    hp.rms_eps = 1e-5f;
    hp.rope_base = 10000.0f;
    hp.rope_freq_scale = 1.0f;
    hp.rope_style = ROPE_NORM;
    struct train_net *n = NULL;
    if (train_net_new_random(&hp, 1, 0.02f, 0, &n, err, sizeof err)) {
        fprintf(stderr, "bench/train: %s\n", err);
        return -1;
    }
    size_t np;
    const struct train_param *p = train_net_params_list(n, &np);
    int64_t n_params = 0;
    for (size_t i = 0; i < np; i++)
        n_params += p[i].n;
    struct train_adamw_state st;
    if (train_adamw_init(&st, p, np, err, sizeof err))
        return -1;
    const struct train_adamw hpo = train_adamw_defaults();
    const int64_t T = 512, B = 4;
    int32_t *tok = malloc((size_t)(T * B) * sizeof *tok);
    uint64_t rs = 5;
    rand_tokens(tok, T * B, 256, &rs);
    double best = 1e30;
    for (int s = 0; s < o->steps + 1; s++) {
        const double t0 = af_clock_ms();
        train_grads_zero(p, np);
        for (int64_t b = 0; b < B; b++) {
            double loss;
            if (train_net_loss(n, tok + b * T, T, NULL, 1, &loss, NULL, err, sizeof err)) {
                fprintf(stderr, "bench/train: %s\n", err);
                return -1;
            }
        }
        (void)train_clip_grad_norm(p, np, 1.0);
        train_adamw_step(&st, p, np, &hpo, 1e-3f);
        const double ms = af_clock_ms() - t0;
        if (s > 0 && ms < best)
            best = ms;
    }
    const double tps = (double)(T * B) / (best / 1000.0);
    const double gf = (double)B * train_net_flops(n, T, 1) / (best / 1000.0) / 1e9;
    printf("| full, %d layers × %d (%.1fM params), seq 512 × 4 | %.0f | %.1f | %.0f%% | %.0f | "
           "%.0f (%.1fx) |\n",
           layers, width, (double)n_params / 1e6, tps, gf, 100.0 * gf / peak, peak_rss_mb(), llmc,
           tps / llmc);
    fflush(stdout);
    free(tok);
    train_adamw_deinit(&st);
    train_net_free(n);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {2, 1024, 3, 0, 0, "Q8_0", "/tmp/agentflow-bench"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") && v)
            o.threads = atoi(v), i++;
        else if (!strcmp(a, "--seq") && v)
            o.seq = atoi(v), i++;
        else if (!strcmp(a, "--steps") && v)
            o.steps = atoi(v), i++;
        else if (!strcmp(a, "--type") && v)
            o.type = v, i++;
        else if (!strcmp(a, "--dir") && v)
            o.dir = v, i++;
        else if (!strcmp(a, "--skip-lora"))
            o.skip_lora = 1;
        else if (!strcmp(a, "--skip-full"))
            o.skip_full = 1;
        else {
            fprintf(stderr, "usage: bench/train [-t N] [--seq N] [--steps N] [--type T] "
                            "[--dir DIR] [--skip-lora] [--skip-full]\n");
            return 2;
        }
    }
#ifdef AF_HAVE_CBLAS
    /* The peak is OpenBLAS's own choice of kernels for this CPU (Cooperlake's AVX-512 ones on
     * Zen 5), not one an environment forces: some set OPENBLAS_CORETYPE=Haswell. */
    if (getenv("OPENBLAS_CORETYPE") && !getenv("AGENTFLOW_BENCH_KEEP_CORETYPE")) {
        fprintf(stderr,
                "bench/train: running again without OPENBLAS_CORETYPE=%s "
                "(AGENTFLOW_BENCH_KEEP_CORETYPE=1 keeps it)\n",
                getenv("OPENBLAS_CORETYPE"));
        unsetenv("OPENBLAS_CORETYPE");
        execv("/proc/self/exe", argv);
        perror("bench/train: re-exec");
    }
#endif
    train_gemm_set_threads(o.threads);
    double ours, blas;
    const double peak = sgemm_peak(o.threads, &ours, &blas);
    printf("threads %d, gemm %s, SGEMM peak this run %.1f GFLOP/s (train_gemm %.1f, "
           "OpenBLAS %s %.1f)\n\n",
           o.threads, train_gemm_backend(), peak, ours, blas_core(), blas);
    printf("| setting | tokens/s | matmul GFLOP/s | of peak | peak RSS MB | llm.c tokens/s |\n");
    printf("|---|---|---|---|---|---|\n");
    if (!o.skip_full) {
        const int shapes[3][2] = {{4, 128}, {4, 256}, {6, 384}};
        const double llmc[3] = {1780, 819, 288};
        for (int i = 0; i < 3; i++)
            if (bench_full(&o, shapes[i][0], shapes[i][1], peak, llmc[i]))
                return 1;
    }
    if (!o.skip_lora && bench_lora(&o, peak))
        return 1;
    return 0;
}
