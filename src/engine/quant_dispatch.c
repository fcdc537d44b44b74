/*
 * quant_dispatch.c - picks the kernel set (AVX-512 VNNI, AVX2+FMA+F16C or reference) from CPUID
 * once, merges the per-ISA tables (a NULL entry falls through to the ISA below), and holds the
 * public vec_dot / matmul entry points.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

static struct quant_kernels active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;
static int f16_int;       /* quant_set_f16_int */
static int pack_form = 1; /* quant_pack's forms: a new number whenever the pack table changes */

/* active = ref, overlaid by each table in `layers` (lowest first). */
static void merge(const struct quant_kernels *const *layers, int n)
{
    struct quant_kernels k = quant_kernels_ref;
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < GGML_TYPE_COUNT; t++) {
            if (layers[i]->vec_dot[t])
                k.vec_dot[t] = layers[i]->vec_dot[t];
            if (layers[i]->matmul[t] || layers[i]->vec_dot[t]) {
                k.matmul[t] = layers[i]->matmul[t];
                k.m1_invariant[t] = layers[i]->m1_invariant[t];
                k.pack[t] = layers[i]->pack[t];
                k.matmul_packed[t] = layers[i]->matmul_packed[t];
            }
        }
        if (layers[i]->axpy)
            k.axpy = layers[i]->axpy;
        if (layers[i]->axpy_rows)
            k.axpy_rows = layers[i]->axpy_rows;
        if (layers[i]->scores)
            k.scores = layers[i]->scores;
        if (layers[i]->axpy_rows_f16)
            k.axpy_rows_f16 = layers[i]->axpy_rows_f16;
        if (layers[i]->scores_f16)
            k.scores_f16 = layers[i]->scores_f16;
        if (layers[i]->exp)
            k.exp = layers[i]->exp;
        if (layers[i]->exp_sum)
            k.exp_sum = layers[i]->exp_sum;
        if (layers[i]->silu_mul)
            k.silu_mul = layers[i]->silu_mul;
        if (layers[i]->scale_max)
            k.scale_max = layers[i]->scale_max;
        if (layers[i]->scale)
            k.scale = layers[i]->scale;
        if (layers[i]->act_q8_0)
            k.act_q8_0 = layers[i]->act_q8_0;
        if (layers[i]->act_q8_k)
            k.act_q8_k = layers[i]->act_q8_k;
        if (layers[i]->act_f16)
            k.act_f16 = layers[i]->act_f16;
        if (layers[i]->act_bf16)
            k.act_bf16 = layers[i]->act_bf16;
        k.name = layers[i]->name;
    }
    if (f16_int && k.name && !strcmp(k.name, "avx512")) {
        k.pack[GGML_TYPE_F16] = quant_avx512_pack_f16i;
        k.matmul_packed[GGML_TYPE_F16] = quant_avx512_matmul_packed_f16i;
        k.matmul[GGML_TYPE_F16] = quant_avx512_matmul_f16i;
        k.m1_invariant[GGML_TYPE_F16] = 1;
    }
    if (memcmp(k.pack, active.pack, sizeof k.pack))
        pack_form++;
    active = k;
}

static int select_isa(const char *name)
{
    const struct quant_kernels *layers[2] = {&quant_kernels_avx2, &quant_kernels_avx512};
    /* auto takes the best table the CPU runs. The AVX-512 table's own bits are those of its
     * Q8_0 / Q4_0 / Q5_0 and Q4_K / Q5_K / Q6_K kernels; its float prefill kernels give the AVX2
     * kernels' bits, and what it lacks falls through to them (docs/PERFORMANCE.md, bench/quant). */
    if (!strcmp(name, "auto")) {
        if (quant_avx512_usable())
            name = "avx512";
        else if (quant_avx2_usable())
            name = "avx2";
        else
            name = "ref";
    }
    if (!strcmp(name, "ref")) {
        merge(layers, 0);
        return 0;
    }
    if (!strcmp(name, "avx2") && quant_avx2_usable()) {
        merge(layers, 1);
        return 0;
    }
    if (!strcmp(name, "avx512") && quant_avx512_usable()) {
        merge(layers, 2);
        return 0;
    }
    return -1;
}

static void init_auto(void)
{
    const char *f16 = getenv("AGENTFLOW_F16");
    f16_int = f16 && !strcmp(f16, "int");
    (void)select_isa("auto");
}

static const struct quant_kernels *kernels(void)
{
    pthread_once(&active_once, init_auto);
    return &active;
}

int quant_set_isa(const char *name)
{
    kernels();
    if (!name)
        return -1;
    return select_isa(name);
}

const char *quant_isa(void)
{
    return kernels()->name;
}

int quant_set_f16_int(int on)
{
    kernels();
    f16_int = on != 0;
    (void)select_isa(active.name);
    return active.matmul[GGML_TYPE_F16] == quant_avx512_matmul_f16i;
}

void quant_axpy(int64_t n, float a, const float *x, float *y)
{
    kernels()->axpy(n, a, x, y);
}

quant_axpy_rows_fn quant_axpy_rows_kernel(void)
{
    return kernels()->axpy_rows;
}

quant_scores_fn quant_scores_kernel(void)
{
    return kernels()->scores;
}

quant_axpy_rows_f16_fn quant_axpy_rows_f16_kernel(void)
{
    return kernels()->axpy_rows_f16;
}

quant_scores_f16_fn quant_scores_f16_kernel(void)
{
    return kernels()->scores_f16;
}

quant_exp_fn quant_exp_kernel(void)
{
    return kernels()->exp;
}

quant_exp_sum_fn quant_exp_sum_kernel(void)
{
    return kernels()->exp_sum;
}

quant_silu_mul_fn quant_silu_mul_kernel(void)
{
    return kernels()->silu_mul;
}

void quant_prepare_act(uint32_t t, const float *src, void *dst, int64_t n)
{
    const uint32_t vt = quant_vec_dot_type(t);
    if (vt == GGML_TYPE_Q8_0)
        kernels()->act_q8_0(src, dst, n / QK);
    else if (vt == GGML_TYPE_Q8_K)
        kernels()->act_q8_k(src, dst, n / QK_K);
    else if (vt == GGML_TYPE_F16 && kernels()->act_f16)
        kernels()->act_f16(src, dst, n);
    else if (vt == GGML_TYPE_BF16 && kernels()->act_bf16)
        kernels()->act_bf16(src, dst, n);
    else
        quant_quantize_row(vt, src, dst, n);
}

void quant_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n)
{
    if (kernels()->act_f16) {
        kernels()->act_f16(src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_f32_to_f16(src[i]);
}

quant_scale_max_fn quant_scale_max_kernel(void)
{
    return kernels()->scale_max;
}

quant_scale_fn quant_scale_kernel(void)
{
    return kernels()->scale;
}

float quant_vec_dot(uint32_t t, int64_t n, const void *w, const void *x)
{
    if (t >= GGML_TYPE_COUNT)
        return 0.0f;
    quant_vec_dot_fn f = kernels()->vec_dot[t];
    return f ? f(n, w, x) : 0.0f;
}

void quant_matmul(uint32_t t, const void *W, int64_t k, const void *X, int64_t m, float *out,
                  int64_t ldo, int64_t r0, int64_t r1)
{
    if (t >= GGML_TYPE_COUNT || !quant_type_supported(t) || r1 <= r0 || m <= 0)
        return;
    const struct quant_kernels *ks = kernels();
    size_t wbytes = quant_row_bytes(t, k);
    size_t xbytes = quant_row_bytes(quant_vec_dot_type(t), k);
    if (ks->matmul[t])
        ks->matmul[t](W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
    else if (ks->vec_dot[t])
        quant_matmul_loop(ks->vec_dot[t], W, wbytes, k, X, xbytes, m, out, ldo, r0, r1);
}

int quant_matmul_m1_invariant(uint32_t t)
{
    return t < GGML_TYPE_COUNT && kernels()->m1_invariant[t];
}

int quant_matmul_ranges_per_thread(uint32_t t, int64_t m)
{
    /* The packed float kernels convert their tokens per call too, but a small batch is few */
    const int fl = t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
    const int rows16 = fl && kernels()->matmul_packed[t] && m <= 16;
    const int packs = fl && !rows16;
    if (m >= 2 && packs)
        return 1;
    return m <= 16 ? 16 : 4;
}

size_t quant_packed_bytes(uint32_t t, int64_t rows, int64_t k)
{
    if (t >= GGML_TYPE_COUNT || !kernels()->pack[t] || rows <= 0 || k <= 0 ||
        k % quant_block_elems(t) != 0)
        return 0;
    return kernels()->pack[t](NULL, quant_row_bytes(t, k), rows, k, NULL);
}

int quant_pack(uint32_t t, const void *W, int64_t rows, int64_t k, void *P)
{
    (void)kernels()->pack[t](W, quant_row_bytes(t, k), rows, k, P);
    return pack_form;
}

int quant_matmul_packed(uint32_t t, int form, const void *P, int64_t rows, int64_t k, const void *X,
                        int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    const struct quant_kernels *ks = kernels();
    if (t >= GGML_TYPE_COUNT || !ks->matmul_packed[t] || form != pack_form || r0 % 16 != 0)
        return -1;
    if (r1 > r0 && m > 0)
        ks->matmul_packed[t](P, rows, k, X, quant_row_bytes(quant_vec_dot_type(t), k), m, out, ldo,
                             r0, r1);
    return 0;
}
