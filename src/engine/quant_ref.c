/*
 * quant_ref.c - the plain C reference of every tensor type: quantise (byte-identical to ggml's
 * quantize_row_*_ref), dequantise, activation preparation (as ggml's vec_dot_type), the
 * reference dot products and the generic matmul loop.
 *
 * The quantisers follow ggml-quants.c operation by operation (same float expression order, no
 * FMA contraction is possible at the default x86-64 target) so files we write are the bytes
 * llama-quantize writes. Activations for the 32-blocks are rounded as ggml's AVX2
 * quantize_row_q8_0 does (d = amax / 127, id = 127 / amax, round half to even), which is what
 * the llama.cpp reference logits were computed with.
 */
#include <math.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/quant_int.h"

#define GROUP_MAX_EPS 1e-15f

static int imin(int a, int b)
{
    return a < b ? a : b;
}

static int imax(int a, int b)
{
    return a > b ? a : b;
}

/* Round to nearest (half to even) for |fval| <= 4194303, as ggml's nearest_int. */
static int nearest_int(float fval)
{
    float val = fval + 12582912.f;
    int32_t i;
    memcpy(&i, &val, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static float h2f(uint16_t h)
{
    return quant_f16_to_f32(h);
}

static uint16_t f2h(float f)
{
    return quant_f32_to_f16(f);
}

/* ---- the 32-blocks ---------------------------------------------------------------------- */

static void quantize_q4_0(const float *x, struct blk_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK / 2; j++) {
            const int xi0 = imin(15, (int8_t)(x[j] * id + 8.5f));
            const int xi1 = imin(15, (int8_t)(x[QK / 2 + j] * id + 8.5f));
            y[i].qs[j] = (uint8_t)((unsigned)xi0 | ((unsigned)xi1 << 4));
        }
    }
}

static void quantize_q4_1(const float *x, struct blk_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        for (int j = 0; j < QK / 2; j++) {
            const int xi0 = imin(15, (int8_t)((x[j] - min) * id + 0.5f));
            const int xi1 = imin(15, (int8_t)((x[QK / 2 + j] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)((unsigned)xi0 | ((unsigned)xi1 << 4));
        }
    }
}

static void quantize_q5_0(const float *x, struct blk_q5_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            const unsigned xi0 = (unsigned)imin(31, (int8_t)(x[j] * id + 16.5f));
            const unsigned xi1 = (unsigned)imin(31, (int8_t)(x[QK / 2 + j] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK / 2);
        }
        memcpy(y[i].qh, &qh, sizeof qh);
    }
}

static void quantize_q5_1(const float *x, struct blk_q5_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float min = x[0], max = x[0];
        for (int j = 1; j < QK; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            const unsigned xi0 = (uint8_t)((x[j] - min) * id + 0.5f);
            const unsigned xi1 = (uint8_t)((x[QK / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK / 2);
        }
        memcpy(y[i].qh, &qh, sizeof qh);
    }
}

static void quantize_q8_0(const float *x, struct blk_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / ((1 << 7) - 1);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

/* Activations: ggml's x86 quantize_row_q8_0 (id = 127 / amax, round half to even). */
static void act_q8_0(const float *x, void *dst, int64_t nb)
{
    struct blk_q8_0 *y = dst;
    for (int64_t i = 0; i < nb; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK; j++)
            y[i].qs[j] = (int8_t)nearest_int(x[j] * id);
    }
}

/* ---- K-quant helpers (ggml-quants.c) ------------------------------------------------------ */

/* Symmetric quantisation of n values to [-nmax, nmax - 1] (stored + nmax); rmse_type 1 weights
 * the fit by x^2 and tries 18 scales around the first guess. Returns the scale. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i)
            L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
        return 1 / iscale;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* One starting error for make_qkx2_quants: the plain min/max fit. */
static float qkx2_start(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                        float iscale, float scale, float min)
{
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)imax(0, imin(nmax, l));
        float diff = scale * (float)L[i] + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    return best_error;
}

/* Asymmetric quantisation to [0, nmax] with a weighted least-squares search over nstep + 1
 * scales (ggml's make_qkx2_quants, use_mad = false). *the_min receives -min. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = x[i] < min ? x[i] : min;
        max = x[i] > max ? x[i] : max;
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = qkx2_start(n, nmax, x, weights, L, iscale, scale, min);
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The 8 sub-block scales / mins of a Q4_K / Q5_K super-block, packed as ggml does, plus d/dmin. */
static void pack_k4_scales(const float *scales, const float *mins, float max_scale, float max_min,
                           uint8_t *out, uint16_t *d, uint16_t *dmin)
{
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            out[j] = ls;
            out[j + 4] = lm;
        } else {
            out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            out[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d = f2h(max_scale / 63.f);
    *dmin = f2h(max_min / 63.f);
}

/* Shared front half of Q4_K / Q5_K: per-32 scales, the packed scales, then the final levels L
 * in [0, nmax] requantised with the rounded scales. */
static void quantize_k4_levels(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                               uint8_t *sc_out, uint16_t *d, uint16_t *dmin)
{
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, 0.1f, nstep);
        max_scale = scales[j] > max_scale ? scales[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    memset(sc_out, 0, 12);
    pack_k4_scales(scales, mins, max_scale, max_min, sc_out, d, dmin);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        quant_scale_min_k4(j, sc_out, &sc, &m);
        const float dd = h2f(*d) * (float)sc;
        if (dd == 0.0f)
            continue;
        const float dm = h2f(*dmin) * (float)m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = nearest_int((x[32 * j + ii] + dm) / dd);
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, l));
        }
    }
}

static void quantize_q4_k(const float *x, struct blk_q4_k *y, int64_t nb)
{
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quantize_k4_levels(x, 15, -1.f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

static void quantize_q5_k(const float *x, struct blk_q5_k *y, int64_t nb)
{
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        quantize_k4_levels(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, QK_K / 8);
        unsigned m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j], l2 = L[n + j + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] = (uint8_t)(qh[j] | m1);
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] = (uint8_t)(qh[j] | m2);
                }
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

static void pack_q6_k(const int8_t *L, struct blk_q6_k *y)
{
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const int q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
            const int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
    }
}

static void quantize_q6_k(const float *x, struct blk_q6_k *y, int64_t nb)
{
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
            scales[ib] = scale;
            if (fabsf(scale) > max_abs_scale) {
                max_abs_scale = fabsf(scale);
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = f2h(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib)
            y[i].scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            float d = h2f(y[i].d) * (float)y[i].scales[j];
            if (d == 0.0f)
                continue;
            for (int ii = 0; ii < 16; ++ii) {
                int l = imax(-32, imin(31, nearest_int(x[16 * j + ii] / d)));
                L[16 * j + ii] = (int8_t)(l + 32);
            }
        }
        pack_q6_k(L, &y[i]);
    }
}

static void quantize_q8_k(const float *x, struct blk_q8_k *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j)
            y[i].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void quant_quantize_row(uint32_t t, const float *src, void *dst, int64_t n)
{
    const int64_t nb = n / (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K ||
                                    t == GGML_TYPE_Q8_K
                                ? QK_K
                                : QK);
    switch (t) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = f2h(src[i]);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = quant_f32_to_bf16(src[i]);
        break;
    case GGML_TYPE_Q4_0:
        quantize_q4_0(src, dst, nb);
        break;
    case GGML_TYPE_Q4_1:
        quantize_q4_1(src, dst, nb);
        break;
    case GGML_TYPE_Q5_0:
        quantize_q5_0(src, dst, nb);
        break;
    case GGML_TYPE_Q5_1:
        quantize_q5_1(src, dst, nb);
        break;
    case GGML_TYPE_Q8_0:
        quantize_q8_0(src, dst, nb);
        break;
    case GGML_TYPE_Q4_K:
        quantize_q4_k(src, dst, nb);
        break;
    case GGML_TYPE_Q5_K:
        quantize_q5_k(src, dst, nb);
        break;
    case GGML_TYPE_Q6_K:
        quantize_q6_k(src, dst, nb);
        break;
    case GGML_TYPE_Q8_K:
        quantize_q8_k(src, dst, nb);
        break;
    default:
        break;
    }
}

/* ---- dequantisation ---------------------------------------------------------------------- */

static void deq_32(uint32_t t, const void *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK) {
        float d, m = 0.0f;
        const uint8_t *qs;
        uint32_t qh = 0;
        int off = 8;
        if (t == GGML_TYPE_Q8_0) {
            const struct blk_q8_0 *b = (const struct blk_q8_0 *)src + i;
            d = h2f(b->d);
            for (int j = 0; j < QK; j++)
                y[j] = (float)b->qs[j] * d;
            continue;
        } else if (t == GGML_TYPE_Q4_0) {
            const struct blk_q4_0 *b = (const struct blk_q4_0 *)src + i;
            d = h2f(b->d);
            qs = b->qs;
        } else if (t == GGML_TYPE_Q4_1) {
            const struct blk_q4_1 *b = (const struct blk_q4_1 *)src + i;
            d = h2f(b->d);
            m = h2f(b->m);
            qs = b->qs;
            off = 0;
        } else if (t == GGML_TYPE_Q5_0) {
            const struct blk_q5_0 *b = (const struct blk_q5_0 *)src + i;
            d = h2f(b->d);
            qs = b->qs;
            memcpy(&qh, b->qh, 4);
            off = 16;
        } else {
            const struct blk_q5_1 *b = (const struct blk_q5_1 *)src + i;
            d = h2f(b->d);
            m = h2f(b->m);
            qs = b->qs;
            memcpy(&qh, b->qh, 4);
            off = 0;
        }
        for (int j = 0; j < QK / 2; ++j) {
            const int xh0 = (int)(((qh >> j) << 4) & 0x10);
            const int xh1 = (int)((qh >> (j + 12)) & 0x10);
            const int x0 = ((qs[j] & 0x0F) | xh0) - off;
            const int x1 = ((qs[j] >> 4) | xh1) - off;
            y[j] = (float)x0 * d + m;
            y[j + QK / 2] = (float)x1 * d + m;
        }
    }
}

static void deq_q4_k(const struct blk_q4_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *q = x[i].qs;
        const float d = h2f(x[i].d), min = h2f(x[i].dmin);
        for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc, m;
            quant_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_k(const struct blk_q5_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = h2f(x[i].d), min = h2f(x[i].dmin);
        unsigned u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < QK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            quant_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = min * (float)m;
            quant_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * (float)sc, m2 = min * (float)m;
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

static void deq_q6_k(const struct blk_q6_k *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        const float d = h2f(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

void quant_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n)
{
    switch (t) {
    case GGML_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case GGML_TYPE_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = h2f(((const uint16_t *)src)[i]);
        break;
    case GGML_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = quant_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
        deq_32(t, src, dst, n / QK);
        break;
    case GGML_TYPE_Q4_K:
        deq_q4_k(src, dst, n / QK_K);
        break;
    case GGML_TYPE_Q5_K:
        deq_q5_k(src, dst, n / QK_K);
        break;
    case GGML_TYPE_Q6_K:
        deq_q6_k(src, dst, n / QK_K);
        break;
    case GGML_TYPE_Q8_K:
        for (int64_t i = 0; i < n / QK_K; i++) {
            const struct blk_q8_k *b = (const struct blk_q8_k *)src + i;
            for (int j = 0; j < QK_K; j++)
                dst[i * QK_K + j] = b->d * (float)b->qs[j];
        }
        break;
    default:
        break;
    }
}

/* ---- activations ------------------------------------------------------------------------- */

uint32_t quant_vec_dot_type(uint32_t t)
{
    switch (t) {
    case GGML_TYPE_F16:
        return GGML_TYPE_F16;
    case GGML_TYPE_BF16:
        return GGML_TYPE_BF16;
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
        return GGML_TYPE_Q8_0;
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
        return GGML_TYPE_Q8_K;
    default:
        return GGML_TYPE_F32;
    }
}

static void act_q8_k_ref(const float *x, void *y, int64_t nb)
{
    quantize_q8_k(x, y, nb);
}

/* ---- reference dot products -------------------------------------------------------------- */

static float dot_f32(int64_t n, const void *w, const void *x)
{
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(a[i] * b[i]);
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(h2f(a[i]) * h2f(b[i]));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *x)
{
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)(quant_bf16_to_f32(a[i]) * quant_bf16_to_f32(b[i]));
    return (float)s;
}

static float dot_q8_0(int64_t n, const void *w, const void *x)
{
    const struct blk_q8_0 *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK; j++)
            sumi += a[i].qs[j] * b[i].qs[j];
        s += (float)sumi * (h2f(a[i].d) * h2f(b[i].d));
    }
    return s;
}

static float dot_q4_0(int64_t n, const void *w, const void *x)
{
    const struct blk_q4_0 *a = w;
    const struct blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++)
            sumi += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j] +
                    ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + QK / 2];
        s += (float)sumi * (h2f(a[i].d) * h2f(b[i].d));
    }
    return s;
}

/* Q4_1 / Q5_1 against Q8_0 activations: d*dy*sum(q*y) + m*dy*sum(y). */
static float dot_x_1(int64_t n, const void *w, const void *x, int five)
{
    const struct blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh = 0;
        const uint8_t *qs;
        float d, m;
        if (five) {
            const struct blk_q5_1 *a = (const struct blk_q5_1 *)w + i;
            memcpy(&qh, a->qh, 4);
            qs = a->qs;
            d = h2f(a->d);
            m = h2f(a->m);
        } else {
            const struct blk_q4_1 *a = (const struct blk_q4_1 *)w + i;
            qs = a->qs;
            d = h2f(a->d);
            m = h2f(a->m);
        }
        int sumi = 0, sumy = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = (qs[j] & 0xF) | (int)(((qh >> j) << 4) & 0x10);
            const int x1 = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
            sumi += x0 * b[i].qs[j] + x1 * b[i].qs[j + QK / 2];
            sumy += b[i].qs[j] + b[i].qs[j + QK / 2];
        }
        const float dy = h2f(b[i].d);
        s += (float)sumi * (d * dy) + (float)sumy * (m * dy);
    }
    return s;
}

static float dot_q4_1(int64_t n, const void *w, const void *x)
{
    return dot_x_1(n, w, x, 0);
}

static float dot_q5_1(int64_t n, const void *w, const void *x)
{
    return dot_x_1(n, w, x, 1);
}

static float dot_q5_0(int64_t n, const void *w, const void *x)
{
    const struct blk_q5_0 *a = w;
    const struct blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh;
        memcpy(&qh, a[i].qh, 4);
        int sumi = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int x0 = ((a[i].qs[j] & 0xF) | (int)(((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = ((a[i].qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10)) - 16;
            sumi += x0 * b[i].qs[j] + x1 * b[i].qs[j + QK / 2];
        }
        s += (float)sumi * (h2f(a[i].d) * h2f(b[i].d));
    }
    return s;
}

/* Q4_K / Q5_K: sum_j sc_j * dot(q, y) * d - dmin * sum_j m_j * (sum of y in sub-block j). */
static float dot_k4(int64_t n, const void *w, const void *x, int five)
{
    const struct blk_q8_k *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t d16, dmin16;
        if (five) {
            const struct blk_q5_k *a = (const struct blk_q5_k *)w + i;
            scales = a->scales, qs = a->qs, qh = a->qh, d16 = a->d, dmin16 = a->dmin;
        } else {
            const struct blk_q4_k *a = (const struct blk_q4_k *)w + i;
            scales = a->scales, qs = a->qs, d16 = a->d, dmin16 = a->dmin;
        }
        int isum = 0, msum = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            uint8_t sc, m;
            quant_scale_min_k4(j, scales, &sc, &m);
            const uint8_t *q = qs + (j / 2) * 32;
            const int shift = (j & 1) * 4;
            int dot = 0;
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> shift) & 0xF;
                if (qh && (qh[l] >> j) & 1)
                    v += 16;
                dot += v * b[i].qs[j * 32 + l];
            }
            isum += sc * dot;
            msum += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        s += b[i].d * h2f(d16) * (float)isum - b[i].d * h2f(dmin16) * (float)msum;
    }
    return s;
}

static float dot_q4_k(int64_t n, const void *w, const void *x)
{
    return dot_k4(n, w, x, 0);
}

static float dot_q5_k(int64_t n, const void *w, const void *x)
{
    return dot_k4(n, w, x, 1);
}

static float dot_q6_k(int64_t n, const void *w, const void *x)
{
    const struct blk_q6_k *a = w;
    const struct blk_q8_k *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            const int8_t *sc = a[i].scales + 8 * h, *y = b[i].qs + 128 * h;
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                isum += sc[is + 0] * q1 * y[l] + sc[is + 2] * q2 * y[l + 32] +
                        sc[is + 4] * q3 * y[l + 64] + sc[is + 6] * q4 * y[l + 96];
            }
        }
        s += h2f(a[i].d) * b[i].d * (float)isum;
    }
    return s;
}

float quant_ref_vec_dot(uint32_t t, int64_t n, const void *w, const void *x)
{
    quant_vec_dot_fn f = t < GGML_TYPE_COUNT ? quant_kernels_ref.vec_dot[t] : NULL;
    return f ? f(n, w, x) : 0.0f;
}

void quant_matmul_loop(quant_vec_dot_fn dot, const void *W, size_t wbytes, int64_t k, const void *X,
                       size_t xbytes, int64_t m, float *out, int64_t ldo, int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++) {
        const void *w = (const uint8_t *)W + (size_t)r * wbytes;
        for (int64_t j = 0; j < m; j++)
            out[j * ldo + r] = dot(k, w, (const uint8_t *)X + (size_t)j * xbytes);
    }
}

/* y += a * x with a separate multiply and add (no FMA), so every ISA rounds the same. */
static void axpy_ref(int64_t n, float a, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

static void axpy_rows_ref(int64_t len, int64_t n, int64_t ng, const float *const *a,
                          const float *const *xs, float *const *y)
{
    for (int64_t r = 0; r < ng; r++)
        for (int64_t t = 0; t < n; t++)
            axpy_ref(len, a[r][t], xs[t], y[r]);
}

static void scores_ref(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                       const float *const *kb, float *const *sc)
{
    for (int64_t g = 0; g < ng; g++)
        for (int64_t t = 0; t < len; t++) {
            float a = 0;
            for (int64_t i = 0; i < hd; i++)
                a += q[g][i] * kb[t / 16][i * 16 + t % 16];
            sc[g][t] = a;
        }
}

/* The F16 KV cache's kernels: the F32 kernels' arithmetic on the converted values (exact). */
static void axpy_rows_f16_ref(int64_t len, int64_t n, int64_t ng, const float *const *a,
                              const uint16_t *const *xs, float *const *y)
{
    for (int64_t r = 0; r < ng; r++)
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < len; i++)
                y[r][i] += a[r][t] * quant_f16_to_f32(xs[t][i]);
}

static void scores_f16_ref(int64_t len, int64_t hd, int64_t ng, const float *const *q,
                           const uint16_t *const *kb, float *const *sc)
{
    for (int64_t g = 0; g < ng; g++)
        for (int64_t t = 0; t < len; t++) {
            float a = 0;
            for (int64_t i = 0; i < hd; i++)
                a += q[g][i] * quant_f16_to_f32(kb[t / 16][i * 16 + t % 16]);
            sc[g][t] = a;
        }
}

const struct quant_kernels quant_kernels_ref = {
    .name = "ref",
    .scores = scores_ref,
    .scores_f16 = scores_f16_ref,
    .axpy = axpy_ref,
    .axpy_rows = axpy_rows_ref,
    .axpy_rows_f16 = axpy_rows_f16_ref,
    .exp = quant_exp_ref,
    .exp_sum = quant_exp_sum_ref,
    .silu_mul = quant_silu_mul_ref,
    .scale_max = quant_scale_max_ref,
    .scale = quant_scale_ref,
    .act_q8_0 = act_q8_0,
    .act_q8_k = act_q8_k_ref,
    .vec_dot =
        {
            [GGML_TYPE_F32] = dot_f32,
            [GGML_TYPE_F16] = dot_f16,
            [GGML_TYPE_BF16] = dot_bf16,
            [GGML_TYPE_Q4_0] = dot_q4_0,
            [GGML_TYPE_Q4_1] = dot_q4_1,
            [GGML_TYPE_Q5_0] = dot_q5_0,
            [GGML_TYPE_Q5_1] = dot_q5_1,
            [GGML_TYPE_Q8_0] = dot_q8_0,
            [GGML_TYPE_Q4_K] = dot_q4_k,
            [GGML_TYPE_Q5_K] = dot_q5_k,
            [GGML_TYPE_Q6_K] = dot_q6_k,
        },
    .matmul = {NULL},
};
