/*
 * grpo_update.c - Flow-GRPO's policy update (grpo_int.h): the old and reference log-probs of
 * every planner turn, then PPO epochs over mini-batches of turns with the clipped surrogate and
 * the k3 KL penalty (grpo_loss.h), one sequence at a time through the training network.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "train/dist.h"
#include "train/grpo_int.h"
#include "train/rng.h"

/* The response's log-probs [n_resp] under the current adapter weights (or the base model). */
static int score_turn(struct train_net *net, const struct grpo_turn *u, float temperature,
                      float freq_penalty, int use_adapter, float *out, char *err, size_t errlen)
{
    const int64_t T = u->n_prompt + u->n_resp;
    float *lp = af_xmalloc((size_t)(T - 1) * sizeof *lp);
    struct train_net_seq_opts so = train_net_seq_default_opts();
    so.use_adapter = use_adapter;
    so.temperature = temperature;
    so.freq_penalty = freq_penalty;
    so.t_begin = u->n_prompt - 1;
    so.logp = lp;
    int rc = train_net_seq(net, u->ids, T, &so, NULL, err, errlen);
    if (!rc)
        memcpy(out, lp + u->n_prompt - 1, (size_t)u->n_resp * sizeof *out);
    free(lp);
    return rc;
}

/* Per-token state of one turn's backward, written by the weight callback at each token's own
 * index (the callback runs on OpenMP threads). */
struct tokctx {
    const struct grpo_hp *hp;
    struct grpo_turn *u;
    double coef;
    int64_t off;
    struct grpo_tok *tok; /* [n_resp] */
    int fill_old;         /* on-policy: logp_old is the current log-prob, recorded here */
};

static float weight_of(void *user, int64_t t, float logp)
{
    struct tokctx *c = user;
    const int64_t j = t - c->off;
    if (j < 0 || j >= c->u->n_resp)
        return 0.0f;
    if (c->fill_old)
        c->u->logp_old[j] = logp; /* the same network and bits: rho = 1 exactly */
    const float old = c->u->logp_old[j];
    const float ref = c->u->logp_ref ? c->u->logp_ref[j] : old; /* no KL term: unused */
    grpo_token(c->hp, logp, old, ref, c->u->adv, &c->tok[j]);
    /* train_net adds w·(−logp): w = −coef·dℓ/dlogp makes its gradient that of coef·ℓ */
    return (float)(-c->coef * c->tok[j].dlogp);
}

static int reference(const struct grpo_update_req *q, struct grpo_turn *turns, size_t n, char *err,
                     size_t errlen)
{
    int rc = AF_OK;
    if (q->hp.kl_coef == 0.0f) /* the term is zero: no need to compute it */
        return AF_OK;
    for (size_t k = 0; k < n; k++)
        turns[k].logp_ref = af_xmalloc((size_t)turns[k].n_resp * sizeof(float));
    float *saved = NULL;
    if (q->ref_lora) {
        saved = af_xmalloc(q->lora_floats * sizeof *saved);
        memcpy(saved, q->cur_lora, q->lora_floats * sizeof *saved);
        memcpy(q->cur_lora, q->ref_lora, q->lora_floats * sizeof *saved);
    }
    for (size_t k = 0; k < n && !rc; k++)
        rc = q->ref_net ? score_turn(q->ref_net, &turns[k], q->temperature, q->freq_penalty, 0,
                                     turns[k].logp_ref, err, errlen)
                        : score_turn(q->net, &turns[k], q->temperature, q->freq_penalty,
                                     q->ref_lora != NULL, turns[k].logp_ref, err, errlen);
    if (saved) {
        memcpy(q->cur_lora, saved, q->lora_floats * sizeof *saved);
        free(saved);
    }
    return rc;
}

/* Sums the gradients of every rank (in rank order, the same bits everywhere) with one flag
 * that says whether any rank failed, so that all of them stop together. */
static int sum_grads(const struct grpo_update_req *q, int failed, int *any_failed, char *err,
                     size_t errlen)
{
    *any_failed = failed;
    if (train_dist_size() == 1)
        return AF_OK;
    size_t total = 1;
    for (size_t k = 0; k < q->np; k++)
        total += (size_t)q->params[k].n;
    float *buf = af_xmalloc(total * sizeof *buf);
    size_t at = 0;
    for (size_t k = 0; k < q->np; k++) {
        memcpy(buf + at, q->params[k].g, (size_t)q->params[k].n * sizeof *buf);
        at += (size_t)q->params[k].n;
    }
    buf[at] = failed ? 1.0f : 0.0f;
    int rc = train_dist_sum_floats(buf, total, err, errlen);
    at = 0;
    for (size_t k = 0; k < q->np && !rc; k++) {
        memcpy(q->params[k].g, buf + at, (size_t)q->params[k].n * sizeof *buf);
        at += (size_t)q->params[k].n;
    }
    if (!rc)
        *any_failed = buf[at] > 0.0f;
    free(buf);
    return rc;
}

/* The coefficients of this rank's turns of one mini-batch, normalised over every rank's: a
 * token's weight is 1 / (all tokens) for token-mean, and a trajectory's 1 / (all
 * trajectories) for seq-mean-token-mean (a trajectory's turns are all on one rank). */
static int coefs(const struct grpo_update_req *q, const struct grpo_turn *turns, const int64_t *idx,
                 size_t m, double *coef, char *err, size_t errlen)
{
    int64_t *ntok = af_xmalloc((m ? m : 1) * sizeof *ntok);
    int64_t *traj = af_xmalloc((m ? m : 1) * sizeof *traj);
    double local[2] = {0, 0}; /* tokens, trajectories */
    for (size_t k = 0; k < m; k++) {
        ntok[k] = turns[idx[k]].n_resp;
        traj[k] = turns[idx[k]].traj;
        local[0] += (double)ntok[k];
        int first = 1;
        for (size_t j = 0; j < k && first; j++)
            first = traj[j] != traj[k] || ntok[j] <= 0;
        local[1] += first && ntok[k] > 0;
    }
    grpo_agg_coefs(q->agg, m, ntok, traj, coef);
    double all[2] = {local[0], local[1]};
    int rc = train_dist_sum_doubles(all, 2, err, errlen);
    const int i = q->agg == GRPO_AGG_TOKEN_MEAN ? 0 : 1;
    const double f = all[i] > 0 ? local[i] / all[i] : 0;
    for (size_t k = 0; k < m && !rc; k++)
        coef[k] *= f;
    free(ntok);
    free(traj);
    return rc;
}

static int minibatch(const struct grpo_update_req *q, struct grpo_turn *turns, const int64_t *idx,
                     size_t m, int first, int fill_old, struct grpo_update_stats *st, char *err,
                     size_t errlen)
{
    double *coef = af_xmalloc((m ? m : 1) * sizeof *coef);
    int rc = coefs(q, turns, idx, m, coef, err, errlen);
    if (rc) {
        free(coef);
        return rc;
    }
    double t0 = af_clock_ms();
    train_grads_zero(q->params, q->np);
    double loss = 0;
    for (size_t k = 0; k < m && !rc; k++) {
        struct grpo_turn *u = &turns[idx[k]];
        st->tokens += u->n_resp;
        if (u->adv == 0.0f && q->hp.kl_coef == 0.0f)
            continue; /* no gradient: the loss is 0 whatever the weights */
        const int64_t T = u->n_prompt + u->n_resp;
        struct tokctx c = {&q->hp, u, coef[k], u->n_prompt - 1, NULL, fill_old};
        u->scored = 1;
        c.tok = af_xcalloc((size_t)u->n_resp, sizeof *c.tok);
        float *ent = af_xmalloc((size_t)(T - 1) * sizeof *ent);
        struct train_net_seq_opts so = train_net_seq_default_opts();
        so.backward = 1;
        so.temperature = q->temperature;
        so.freq_penalty = q->freq_penalty;
        so.wfn = weight_of;
        so.wuser = &c;
        so.t_begin = u->n_prompt - 1;
        so.entropy = ent;
        rc = train_net_seq(q->net, u->ids, T, &so, NULL, err, errlen);
        for (int64_t j = 0; j < u->n_resp && !rc; j++) {
            const struct grpo_tok *tk = &c.tok[j];
            loss += coef[k] * tk->loss;
            st->kl += tk->kl;
            st->ratio += tk->ratio;
            st->clip_low += tk->clipped_low;
            st->clip_high += tk->clipped_high;
            st->entropy += (double)ent[u->n_prompt - 1 + j];
            if (first && fabs(tk->ratio - 1.0) > st->first_ratio_maxdev)
                st->first_ratio_maxdev = fabs(tk->ratio - 1.0);
        }
        st->evaluated += u->n_resp;
        free(ent);
        free(c.tok);
    }
    free(coef);
    int any_failed = 0;
    const int local_rc = rc;
    const double t_ar = af_clock_ms();
    rc = sum_grads(q, local_rc != AF_OK, &any_failed, err, errlen);
    st->allreduce_s += (af_clock_ms() - t_ar) / 1000.0;
    st->bwd_s += (t_ar - t0) / 1000.0;
    if (local_rc)
        return local_rc;
    if (rc)
        return rc;
    if (any_failed) {
        af_errf(err, errlen, "another rank failed in the update (its log says why)");
        return AF_EBACKEND;
    }
    t0 = af_clock_ms();
    st->loss += loss;
    st->opt_steps++;
    if (train_grads_nonfinite(q->params, q->np)) {
        st->skipped++;
        st->grad_norm = NAN;
    } else {
        st->grad_norm = train_clip_grad_norm(q->params, q->np, (double)q->clip);
        train_adamw_step(q->opt, q->params, q->np, q->adamw, q->lr);
    }
    st->opt_s += (af_clock_ms() - t0) / 1000.0;
    return AF_OK;
}

int grpo_update(const struct grpo_update_req *q, struct grpo_turn *turns, size_t n,
                struct grpo_update_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    int rc = AF_OK;
    /* Each rank cuts its own turns into mini-batches of mini_batch / ranks; every rank takes
     * as many optimiser steps as the rank with the most chunks (empty chunks add nothing). */
    const int K = train_dist_size();
    size_t mb = n ? n : 1;
    if (q->mini_batch > 0) {
        const size_t per = (size_t)((q->mini_batch + K - 1) / K);
        mb = per < mb ? per : mb;
    }
    int64_t chunks = q->mini_batch > 0 ? (int64_t)((n + mb - 1) / mb) : 1;
    if ((rc = train_dist_max_i64(&chunks, err, errlen)))
        return rc;
    /* One epoch in one chunk is on-policy: the old log-probs are the ones the update's own
     * forward computes before any step, so they are taken there instead of by a pass of their
     * own (the same network on the same ids gives the same bits; verl's separate pass would). */
    const int on_policy = q->ppo_epochs == 1 && chunks == 1;
    double t0 = af_clock_ms();
    for (size_t k = 0; k < n && !rc; k++) {
        struct grpo_turn *u = &turns[k];
        u->logp_old = af_xmalloc((size_t)u->n_resp * sizeof(float));
        if (!on_policy) {
            rc =
                score_turn(q->net, u, q->temperature, q->freq_penalty, 1, u->logp_old, err, errlen);
            u->scored = 1;
        }
    }
    st->old_s = (af_clock_ms() - t0) / 1000.0;
    if (rc)
        return rc; /* a failed forward stops this rank; mpirun then ends the others */
    t0 = af_clock_ms();
    if ((rc = reference(q, turns, n, err, errlen)))
        return rc;
    st->ref_s = (af_clock_ms() - t0) / 1000.0;

    int64_t *order = af_xmalloc((n ? n : 1) * sizeof *order);
    for (int e = 0; e < q->ppo_epochs && !rc; e++) {
        for (size_t k = 0; k < n; k++)
            order[k] = (int64_t)k;
        if (chunks > 1) { /* the chunks differ between epochs; one chunk needs no shuffle */
            struct train_rng rng;
            train_rng_seed(&rng, q->shuffle_seed + (uint64_t)e);
            train_rng_shuffle(&rng, order, (int64_t)n);
        }
        for (int64_t c = 0; c < chunks && !rc; c++) {
            const size_t s0 = (size_t)c * mb;
            const size_t m = s0 >= n ? 0 : (n - s0 < mb ? n - s0 : mb);
            rc = minibatch(q, turns, order + (s0 < n ? s0 : 0), m, e == 0 && c == 0, on_policy, st,
                           err, errlen);
        }
    }
    /* the engine's sampling log-probs against the trainer's, over the tokens it scored */
    double mm[2] = {0, 0};
    for (size_t k = 0; k < n; k++)
        for (int64_t j = 0; turns[k].scored && j < turns[k].n_resp; j++) {
            mm[0] += fabs((double)turns[k].logp_engine[j] - (double)turns[k].logp_old[j]);
            mm[1] += 1;
        }
    if (!rc)
        rc = train_dist_sum_doubles(mm, 2, err, errlen);
    st->logp_mismatch = mm[1] > 0 ? mm[0] / mm[1] : 0;
    free(order);
    double sums[8] = {st->kl,      st->ratio, st->clip_low,          st->clip_high,
                      st->entropy, st->loss,  (double)st->evaluated, (double)st->tokens};
    if (!rc)
        rc = train_dist_sum_doubles(sums, 8, err, errlen);
    st->evaluated = (int64_t)sums[6];
    st->tokens = (int64_t)sums[7];
    if (st->evaluated > 0) {
        const double d = (double)st->evaluated;
        st->kl = sums[0] / d;
        st->ratio = sums[1] / d;
        st->clip_low = sums[2] / d;
        st->clip_high = sums[3] / d;
        st->entropy = sums[4] / d;
    }
    /* each rank's loss is its share of the global mean: their sum is the loss */
    st->loss = st->opt_steps > 0 ? sums[5] / (double)st->opt_steps : 0;
    return rc;
}
