/*
 * ops_attn.c - causal GQA attention for training (see ops.h), as blocks of matrix products:
 * for each query head and block of BQ query rows, S = Q·Kᵀ over the keys up to the block's end,
 * masked, softmaxed row by row; the forward saves only the log-sum-exp of each row and the
 * backward recomputes P from it (as FlashAttention does), so memory is O(BQ·T) per thread,
 * not O(T²·n_head).
 *
 * Per query head h (kv head g), with s_tj = q_t·k_j / sqrt(hd), j <= t, p = softmax_j(s):
 *   out_t = Σ_j p_tj v_j
 *   dv_j += Σ_t p_tj dout_t;  dp_tj = dout_t·v_j;  ds_tj = p_tj (dp_tj − dout_t·out_t)
 *   dq_t += Σ_j ds_tj k_j / sqrt(hd);  dk_j += Σ_t ds_tj q_t / sqrt(hd)
 *
 * OpenMP runs one (head, block) per thread with single-threaded products inside (gemm.h runs
 * single-threaded inside a parallel region), so every number is computed by one thread in a
 * fixed order: the results do not depend on the schedule. The backward gives each query head
 * private dK, dV rows, summed into its group's afterwards in head order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/gemm.h"
#include "train/ops.h"
#include "train/scratch.h"
#include "train/vecmath.h"

#define BQ 128

/* dst [T][hd] = head `h` of src [T][stride]. */
static void gather(const float *src, int64_t stride, int64_t h, int64_t hd, int64_t t0, int64_t t1,
                   float *dst)
{
    for (int64_t t = t0; t < t1; t++)
        memcpy(dst + (t - t0) * hd, src + t * stride + h * hd, (size_t)hd * sizeof(float));
}

/* Each kv head's keys and values made contiguous: [nkv][T][hd]. */
static void gather_kv(const struct train_attn *a, const float *k, const float *v, int64_t T,
                      float *kc, float *vc)
{
    const int64_t hd = a->head_dim, kvd = a->n_head_kv * hd;
    for (int64_t g = 0; g < a->n_head_kv; g++) {
        gather(k, kvd, g, hd, 0, T, kc + g * T * hd);
        gather(v, kvd, g, hd, 0, T, vc + g * T * hd);
    }
}

/* Rows [t0, t1) of S [t1-t0][t1 keys] become probabilities, keys j > t masked to 0: the
 * forward's softmax, which saves each row's log-sum-exp in lse[t] ... */
static void softmax_rows(float *S, int64_t t0, int64_t t1, float scale, float *lse)
{
    const int64_t n = t1;
    for (int64_t t = t0; t < t1; t++) {
        float *row = S + (t - t0) * n;
        const int64_t len = t + 1;
        const float mx = train_vec_scale_max(row, len, scale);
        const double sum = train_vec_exp_sum(row, len, 1.0f, mx);
        train_vec_scale(row, len, (float)(1.0 / sum));
        lse[t] = mx + (float)log(sum > 0 ? sum : 1.0);
        memset(row + len, 0, (size_t)(n - len) * sizeof *row);
    }
}

/* ... and the backward's recomputation P = exp(s·scale − lse) from the saved ones. */
static void probs_rows(float *S, int64_t t0, int64_t t1, float scale, const float *lse)
{
    const int64_t n = t1;
    for (int64_t t = t0; t < t1; t++) {
        float *row = S + (t - t0) * n;
        const int64_t len = t + 1;
        (void)train_vec_exp_sum(row, len, scale, lse[t]);
        memset(row + len, 0, (size_t)(n - len) * sizeof *row);
    }
}

void train_attn_fwd(const struct train_attn *a, const float *q, const float *k, const float *v,
                    int64_t T, float *out, float *lse)
{
    const int64_t hd = a->head_dim, nh = a->n_head, nkv = a->n_head_kv, group = nh / nkv;
    const int64_t qd = nh * hd, nblk = (T + BQ - 1) / BQ;
    const float scale = 1.0f / sqrtf((float)hd);
    float *kc = train_scratch(TRAIN_SCRATCH_ATTN_KV, (size_t)(2 * nkv * T * hd));
    float *vc = kc + nkv * T * hd;
    gather_kv(a, k, v, T, kc, vc);
#pragma omp parallel
    {
        float *S = train_scratch(TRAIN_SCRATCH_ATTN_ROWS, (size_t)(BQ * T + 2 * BQ * hd));
        float *qb = S + BQ * T, *ob = qb + BQ * hd;
        /* the later blocks have more keys: hand them out first */
#pragma omp for schedule(dynamic, 1)
        for (int64_t w = 0; w < nh * nblk; w++) {
            const int64_t h = w % nh, b = nblk - 1 - w / nh, g = h / group;
            const int64_t t0 = b * BQ, t1 = t0 + BQ < T ? t0 + BQ : T, m = t1 - t0;
            gather(q, qd, h, hd, t0, t1, qb);
            train_gemm_nt(m, t1, hd, qb, kc + g * T * hd, S, 0);
            softmax_rows(S, t0, t1, scale, lse + h * T);
            train_gemm_nn(m, hd, t1, S, vc + g * T * hd, ob, 0);
            for (int64_t t = t0; t < t1; t++)
                memcpy(out + t * qd + h * hd, ob + (t - t0) * hd, (size_t)hd * sizeof(float));
        }
    }
}

void train_attn_bwd(const struct train_attn *a, const float *dout, const float *q, const float *k,
                    const float *v, const float *out, const float *lse, int64_t T, float *dq,
                    float *dk, float *dv)
{
    const int64_t hd = a->head_dim, nh = a->n_head, nkv = a->n_head_kv, group = nh / nkv;
    const int64_t qd = nh * hd, kvd = nkv * hd, nblk = (T + BQ - 1) / BQ;
    const float scale = 1.0f / sqrtf((float)hd);
    float *kc = train_scratch(TRAIN_SCRATCH_ATTN_KV, (size_t)(2 * nkv * T * hd));
    float *vc = kc + nkv * T * hd;
    gather_kv(a, k, v, T, kc, vc);
    /* per query head: dK, dV of its kv head ([nh][T][hd] each) and dQ */
    float *dkh = train_scratch(TRAIN_SCRATCH_ATTN_GRAD, (size_t)(3 * nh * T * hd));
    memset(dkh, 0, (size_t)(3 * nh * T * hd) * sizeof(float));
    float *dvh = dkh + nh * T * hd, *dqh = dvh + nh * T * hd;
#pragma omp parallel
    {
        float *P = train_scratch(TRAIN_SCRATCH_ATTN_ROWS, (size_t)(2 * BQ * T + 4 * BQ * hd + BQ));
        float *dP = P + BQ * T, *qb = dP + BQ * T, *dob = qb + BQ * hd, *obuf = dob + BQ * hd;
        float *dd = obuf + BQ * hd;
#pragma omp for schedule(dynamic, 1)
        for (int64_t h = 0; h < nh; h++) {
            const int64_t g = h / group;
            const float *K = kc + g * T * hd, *V = vc + g * T * hd;
            float *dK = dkh + h * T * hd, *dV = dvh + h * T * hd, *dQ = dqh + h * T * hd;
            for (int64_t b = 0; b < nblk; b++) {
                const int64_t t0 = b * BQ, t1 = t0 + BQ < T ? t0 + BQ : T, m = t1 - t0;
                gather(q, qd, h, hd, t0, t1, qb);
                gather(dout, qd, h, hd, t0, t1, dob);
                gather(out, qd, h, hd, t0, t1, obuf);
                for (int64_t i = 0; i < m; i++) {
                    float s = 0;
                    for (int64_t c = 0; c < hd; c++)
                        s += dob[i * hd + c] * obuf[i * hd + c];
                    dd[i] = s;
                }
                train_gemm_nt(m, t1, hd, qb, K, P, 0);
                probs_rows(P, t0, t1, scale, lse + h * T);
                train_gemm_nt(m, t1, hd, dob, V, dP, 0); /* dP = dO·Vᵀ */
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < t1; j++)
                        dP[i * t1 + j] = P[i * t1 + j] * (dP[i * t1 + j] - dd[i]) * scale;
                train_gemm_tn(t1, hd, m, P, dob, dV, 1);          /* dV += Pᵀ·dO */
                train_gemm_nn(m, hd, t1, dP, K, dQ + t0 * hd, 1); /* dQ += dS·K */
                train_gemm_tn(t1, hd, m, dP, qb, dK, 1);          /* dK += dSᵀ·Q */
            }
        }
    }
    for (int64_t h = 0; h < nh; h++) {
        const int64_t g = h / group;
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < hd; c++) {
                if (dq)
                    dq[t * qd + h * hd + c] += dqh[(h * T + t) * hd + c];
                if (dk)
                    dk[t * kvd + g * hd + c] += dkh[(h * T + t) * hd + c];
                if (dv)
                    dv[t * kvd + g * hd + c] += dvh[(h * T + t) * hd + c];
            }
    }
}
