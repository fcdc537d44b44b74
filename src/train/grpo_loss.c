/*
 * grpo_loss.c - Flow-GRPO's advantages, clipped surrogate, k3 KL and aggregation (grpo_loss.h).
 */
#include "train/grpo_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int grpo_group_advantages(const double *r, int64_t G, float *adv)
{
    int degenerate = 1;
    for (int64_t i = 1; i < G; i++)
        if (r[i] != r[0])
            degenerate = 0;
    if (G < 2 || degenerate) {
        for (int64_t i = 0; i < G; i++)
            adv[i] = 0.0f;
        return 1;
    }
    double mean = 0;
    for (int64_t i = 0; i < G; i++)
        mean += r[i];
    mean /= (double)G;
    double ss = 0;
    for (int64_t i = 0; i < G; i++)
        ss += (r[i] - mean) * (r[i] - mean);
    const double sd = sqrt(ss / (double)(G - 1));
    for (int64_t i = 0; i < G; i++)
        adv[i] = (float)((r[i] - mean) / (sd + GRPO_ADV_EPS));
    return 0;
}

struct grpo_hp grpo_default_hp(void)
{
    struct grpo_hp h = {0.2f, 0.3f, 0.001f};
    return h;
}

void grpo_token(const struct grpo_hp *hp, float logp, float logp_old, float logp_ref, float adv,
                struct grpo_tok *out)
{
    memset(out, 0, sizeof *out);
    const double A = (double)adv;
    const double rho = exp((double)logp - (double)logp_old);
    const double lo = 1.0 - (double)hp->clip_low, hi = 1.0 + (double)hp->clip_high;
    const double rc = rho < lo ? lo : rho > hi ? hi : rho;
    const double un = rho * A, cl = rc * A;
    double surr, dsurr;
    if (un <= cl) { /* the unclipped term is the minimum: its gradient flows */
        surr = un;
        dsurr = rho * A;
    } else {
        surr = cl;
        dsurr = 0;
        out->clipped_low = A < 0 && rho < lo;
        out->clipped_high = A > 0 && rho > hi;
    }
    const double d = (double)logp_ref - (double)logp;
    const double e = exp(d);
    out->ratio = rho;
    out->kl = e - d - 1.0;
    out->loss = -surr + (double)hp->kl_coef * out->kl;
    out->dlogp = -dsurr + (double)hp->kl_coef * (1.0 - e);
}

int grpo_agg_from_name(const char *name)
{
    if (!name)
        return -1;
    if (!strcmp(name, "token-mean"))
        return GRPO_AGG_TOKEN_MEAN;
    if (!strcmp(name, "seq-mean-token-mean"))
        return GRPO_AGG_SEQ_MEAN_TOKEN_MEAN;
    return -1;
}

const char *grpo_agg_name(enum grpo_agg a)
{
    return a == GRPO_AGG_SEQ_MEAN_TOKEN_MEAN ? "seq-mean-token-mean" : "token-mean";
}

void grpo_agg_coefs(enum grpo_agg a, size_t n, const int64_t *n_tokens, const int64_t *traj,
                    double *coef)
{
    if (a == GRPO_AGG_TOKEN_MEAN) {
        int64_t total = 0;
        for (size_t k = 0; k < n; k++)
            total += n_tokens[k] > 0 ? n_tokens[k] : 0;
        for (size_t k = 0; k < n; k++)
            coef[k] = n_tokens[k] > 0 ? 1.0 / (double)total : 0.0;
        return;
    }
    /* turns per trajectory (counting turns with tokens), and the number of trajectories */
    size_t n_traj = 0;
    for (size_t k = 0; k < n; k++) {
        if (n_tokens[k] <= 0)
            continue;
        int64_t turns = 0;
        int first = 1;
        for (size_t j = 0; j < n; j++) {
            if (n_tokens[j] <= 0 || traj[j] != traj[k])
                continue;
            if (j < k)
                first = 0;
            turns++;
        }
        n_traj += (size_t)first;
        coef[k] = 1.0 / ((double)n_tokens[k] * (double)turns);
    }
    for (size_t k = 0; k < n; k++)
        coef[k] = n_tokens[k] > 0 ? coef[k] / (double)n_traj : 0.0;
}
