/*
 * grpo_loss.h - the arithmetic of Flow-GRPO (src/train/), apart from any model so it can be
 * checked against hand-computed values: group-relative advantages, the per-token clipped
 * surrogate with the k3 KL penalty and its derivative, and the two loss aggregations.
 * docs/TRAINING.md maps each symbol to these functions.
 *
 * Every function is pure (no allocation, no global state) and safe from any thread.
 */
#ifndef AF_TRAIN_GRPO_LOSS_H
#define AF_TRAIN_GRPO_LOSS_H

#include <stddef.h>
#include <stdint.h>

#define GRPO_ADV_EPS 1e-6

/* A_i = (r_i - mean(r)) / (std(r) + 1e-6) over the G rewards of one question's rollouts, with
 * the unbiased std (torch.std, as verl). A group whose rewards are all equal gets A = 0 (the
 * numerator is 0 exactly); G = 1 gets 0 too. Returns 1 when the group is degenerate (every
 * reward equal), else 0. */
int grpo_group_advantages(const double *r, int64_t G, float *adv);

struct grpo_hp {
    float clip_low;  /* eps_low, default 0.2 */
    float clip_high; /* eps_high, default 0.3 */
    float kl_coef;   /* beta, default 0.001 */
};
struct grpo_hp grpo_default_hp(void);

/* One token's loss and what it reports. */
struct grpo_tok {
    double ratio;     /* rho = exp(logp - logp_old) */
    double loss;      /* -min(rho*A, clip(rho, 1-eps_low, 1+eps_high)*A) + beta*k3 */
    double kl;        /* k3 = exp(ref - logp) - (ref - logp) - 1 (>= 0) */
    double dlogp;     /* d loss / d logp */
    int clipped_low;  /* A < 0 and rho < 1 - eps_low: the clipped branch won (no gradient) */
    int clipped_high; /* A > 0 and rho > 1 + eps_high */
};

/* The per-token objective at the current log-prob `logp` of a sampled token, the old policy's
 * `logp_old`, the reference policy's `logp_ref` and the turn's advantage. The surrogate's
 * gradient is -rho*A where the unclipped term is the minimum (ties included) and 0 where the
 * clipped one is; the KL term's is beta*(1 - exp(ref - logp)). */
void grpo_token(const struct grpo_hp *hp, float logp, float logp_old, float logp_ref, float adv,
                struct grpo_tok *out);

/* How per-token losses are averaged into one number (`--loss-agg`). */
enum grpo_agg {
    GRPO_AGG_TOKEN_MEAN,          /* verl: mean over every planner token of the mini-batch */
    GRPO_AGG_SEQ_MEAN_TOKEN_MEAN, /* the paper: tokens of a turn, turns of a trajectory, then
                                     trajectories */
};
/* "token-mean" / "seq-mean-token-mean" -> the enum, -1 for anything else. */
int grpo_agg_from_name(const char *name);
const char *grpo_agg_name(enum grpo_agg a);

/* The weight of each token of each turn in the aggregated loss, as one coefficient per turn
 * (every token of a turn has the same weight). A mini-batch has n turns; turn k has
 * n_tokens[k] response tokens and belongs to trajectory traj[k] (any ids; turns of a
 * trajectory need not be adjacent). coef[k] is written. Turns with no tokens get 0. */
void grpo_agg_coefs(enum grpo_agg a, size_t n, const int64_t *n_tokens, const int64_t *traj,
                    double *coef);

#endif
