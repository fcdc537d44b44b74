/*
 * ops_attn.c - causal GQA attention for training (see ops.h): the forward saves only the
 * log-sum-exp of each score row, and the backward recomputes the probabilities from it, so
 * memory is O(T·n_head) instead of O(T²·n_head). OpenMP splits query heads in the forward and
 * kv heads in the backward (the heads of one GQA group add into the same dk, dv rows, so one
 * thread owns a whole group).
 *
 * Per query head h (kv head g), with s_tj = q_t·k_j / sqrt(hd), j <= t, p = softmax_j(s):
 *   out_t = Σ_j p_tj v_j
 *   dv_j += Σ_t p_tj dout_t;  dp_tj = dout_t·v_j;  ds_tj = p_tj (dp_tj − dout_t·out_t)
 *   dq_t += Σ_j ds_tj k_j / sqrt(hd);  dk_j += Σ_t ds_tj q_t / sqrt(hd)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "train/ops.h"

static float dotf(const float *a, const float *b, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

void train_attn_fwd(const struct train_attn *a, const float *q, const float *k, const float *v,
                    int64_t T, float *out, float *lse)
{
    const int64_t hd = a->head_dim, nh = a->n_head, nkv = a->n_head_kv, group = nh / nkv;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel
    {
        float *sc = af_xmalloc((size_t)T * sizeof *sc);
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *qt = q + t * qd + h * hd;
                const int64_t g = h / group;
                float mx = -INFINITY;
                for (int64_t j = 0; j <= t; j++) {
                    sc[j] = dotf(qt, k + j * kvd + g * hd, hd) * scale;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                double sum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    sc[j] = expf(sc[j] - mx);
                    sum += (double)sc[j];
                }
                const float inv = (float)(1.0 / sum);
                float *o = out + t * qd + h * hd;
                memset(o, 0, (size_t)hd * sizeof *o);
                for (int64_t j = 0; j <= t; j++) {
                    const float *vj = v + j * kvd + g * hd;
                    const float p = sc[j] * inv;
                    for (int64_t i = 0; i < hd; i++)
                        o[i] += p * vj[i];
                }
                lse[h * T + t] = mx + (float)log(sum);
            }
        free(sc);
    }
}

/* One query head h over kv head g: adds to dq (head h), dk and dv (head g). */
static void attn_bwd_head(const struct train_attn *a, int64_t h, const float *dout, const float *q,
                          const float *k, const float *v, const float *out, const float *lse,
                          int64_t T, float *dq, float *dk, float *dv, float *p)
{
    const int64_t hd = a->head_dim, qd = a->n_head * hd, kvd = a->n_head_kv * hd;
    const int64_t g = h / (a->n_head / a->n_head_kv);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t t = 0; t < T; t++) {
        const float *qt = q + t * qd + h * hd, *dot_ = dout + t * qd + h * hd;
        const float l = lse[h * T + t], dd = dotf(dot_, out + t * qd + h * hd, hd);
        float *dqt = dq ? dq + t * qd + h * hd : NULL;
        for (int64_t j = 0; j <= t; j++)
            p[j] = expf(dotf(qt, k + j * kvd + g * hd, hd) * scale - l);
        for (int64_t j = 0; j <= t; j++) {
            const float *kj = k + j * kvd + g * hd, *vj = v + j * kvd + g * hd;
            if (dv) {
                float *dvj = dv + j * kvd + g * hd;
                for (int64_t i = 0; i < hd; i++)
                    dvj[i] += p[j] * dot_[i];
            }
            const float ds = p[j] * (dotf(dot_, vj, hd) - dd) * scale;
            if (dqt)
                for (int64_t i = 0; i < hd; i++)
                    dqt[i] += ds * kj[i];
            if (dk) {
                float *dkj = dk + j * kvd + g * hd;
                for (int64_t i = 0; i < hd; i++)
                    dkj[i] += ds * qt[i];
            }
        }
    }
}

void train_attn_bwd(const struct train_attn *a, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int64_t T, float *dq,
                    float *dk, float *dv)
{
    const int64_t nkv = a->n_head_kv, group = a->n_head / nkv;
#pragma omp parallel
    {
        float *p = af_xmalloc((size_t)T * sizeof *p);
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < nkv; g++)
            for (int64_t h = g * group; h < (g + 1) * group; h++)
                attn_bwd_head(a, h, dout, q, k, v, out, lse, T, dq, dk, dv, p);
        free(p);
    }
}
