/*
 * lora_apply.c - the LoRA delta of one adapted linear during inference (see lora.h):
 * y [nb][n_out] += scale · (x [nb][n_in] · Aᵀ) · Bᵀ.
 *
 * Plain loops, one row of x at a time, each sum in a fixed order: the result of a row does not
 * depend on nb or on how a caller splits the rows between threads, so the forward stays
 * deterministic. The cost is rank · (n_in + n_out) per row, a few percent of the base matmul
 * at the usual ranks, so no blocking or SIMD is needed here.
 */
#include "engine/lora.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void lora_apply(const struct lora_adapter *l, const struct lora_pair *p, const float *x, int64_t nb,
                float *y, float *tmp)
{
    const int64_t rank = l->rank, n_in = p->n_in, n_out = p->n_out;
    const float scale = l->scale;
    for (int64_t j = 0; j < nb; j++) {
        const float *xr = x + j * n_in;
        float *yr = y + j * n_out, *t = tmp + j * rank;
        for (int64_t r = 0; r < rank; r++) { /* t = scale · A · x  (rank) */
            const float *ar = p->a + r * n_in;
            float s = 0.0f;
            for (int64_t i = 0; i < n_in; i++)
                s += ar[i] * xr[i];
            t[r] = scale * s;
        }
        for (int64_t o = 0; o < n_out; o++) { /* y += B · t  (n_out) */
            const float *br = p->b + o * rank;
            float s = 0.0f;
            for (int64_t r = 0; r < rank; r++)
                s += br[r] * t[r];
            yr[o] += s;
        }
    }
}

void lora_delta_row(const struct lora_adapter *l, const struct lora_pair *p, int64_t o, float *d)
{
    const int64_t n_in = p->n_in, rank = l->rank;
    memset(d, 0, (size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < rank; r++) {
        const float sb = l->scale * p->b[o * rank + r];
        const float *ar = p->a + r * n_in;
        for (int64_t i = 0; i < n_in; i++)
            d[i] += sb * ar[i];
    }
}

void lora_merge_f32(const struct lora_adapter *l, const struct lora_pair *p, float *w, float sign)
{
    const int64_t n_in = p->n_in;
#pragma omp parallel
    {
        float *d = af_xmalloc((size_t)n_in * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t o = 0; o < p->n_out; o++) {
            lora_delta_row(l, p, o, d);
            for (int64_t i = 0; i < n_in; i++)
                w[o * n_in + i] += sign * d[i];
        }
        free(d);
    }
}
