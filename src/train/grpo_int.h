/*
 * grpo_int.h - what grpo.c, grpo_rollout.c and grpo_update.c share: the turns and
 * trajectories of one step, and the two phases that fill and consume them.
 */
#ifndef AF_TRAIN_GRPO_INT_H
#define AF_TRAIN_GRPO_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "agentflow/flow.h"
#include "train/grpo.h"
#include "train/net.h"

/* One planner call: a training sample. Every array is owned. */
struct grpo_turn {
    int32_t *ids; /* the prompt ids, then the response ids */
    int64_t n_prompt, n_resp;
    float *logp_engine; /* [n_resp] as sampled (the engine's quantized forward) */
    float *logp_old;    /* [n_resp] the training network's, before the update */
    float *logp_ref;    /* [n_resp] the reference policy's; NULL when the KL term is off */
    int scored;         /* logp_old holds the trainer's log-probs (a turn with no gradient
                           and no KL term is skipped by an on-policy update) */
    float adv;
    int64_t traj; /* its trajectory's index in the step */
    int turn;     /* 0-based among its trajectory's planner calls */
};

/* One solve of one question. */
struct grpo_traj {
    int64_t item; /* index into the data */
    int64_t sample;
    double reward;
    int correct;
    char *answer; /* owned; NULL when the solve failed early */
    int solve_err;
    char *errmsg; /* owned */
    int steps, failed_steps;
    int64_t gen_tokens; /* completion tokens of every module's calls */
    json_t *tool_use;   /* {tool: calls} owned */
    struct grpo_turn *turns;
    size_t n_turns, cap;
    double ms;
};

void grpo_traj_deinit(struct grpo_traj *t);

/* The rollouts of one step (or a validation pass). */
struct grpo_rollout_req {
    const struct af_flow_params *flow; /* the planner slot set; trace is replaced per solve */
    const json_t *data;
    const int64_t *items; /* n_items data indices */
    int64_t n_items, group;
    uint64_t seed;
    int64_t step;
    int concurrency;
    int reward_f1;
    train_grpo_reward_fn reward;
    void *reward_user;
    void (*on_done)(void *user, int64_t done, int64_t total);
    void *user;
};

/* Runs n_items * group trajectories, `concurrency` at a time; trajectory q*group + g is sample
 * g of item items[q], whose planner seed is train_mix of (seed, step, item, g). *out (owned:
 * grpo_traj_deinit each, then free) has them in that order. A solve that fails still counts,
 * with reward 0. Returns AF_OK, or the reward function's error. */
AF_NODISCARD int grpo_rollouts(const struct grpo_rollout_req *r, struct grpo_traj **out, char *err,
                               size_t errlen);

/* Sums over the update, for the metrics. */
struct grpo_update_stats {
    double loss, kl, entropy, clip_low, clip_high, ratio; /* token means */
    double logp_mismatch;                                 /* mean |engine - trainer| */
    double grad_norm;                                     /* the last optimiser step's */
    int64_t tokens;    /* response tokens of every mini-batch pass */
    int64_t evaluated; /* of those, the ones the update ran (a zero advantage with no KL
                          term is skipped); the means are over these */
    int64_t opt_steps, skipped;
    double allreduce_s;                /* summing gradients over ranks */
    double old_s, ref_s, bwd_s, opt_s; /* phase seconds (old_s 0 when on-policy: the
                                          backward's forward gives logp_old) */
    double first_ratio_maxdev;         /* max |rho - 1| of the first mini-batch's tokens */
};

struct grpo_update_req {
    struct train_net *net;
    const struct train_param *params;
    size_t np;
    struct train_adamw_state *opt;
    const struct train_adamw *adamw;
    float lr, clip, temperature;
    struct grpo_hp hp;
    enum grpo_agg agg;
    int ppo_epochs;
    int64_t mini_batch;
    uint64_t shuffle_seed;
    /* the reference: the base model (ref_lora NULL) or these adapter weights (n floats swapped
     * into the trained adapter's storage `cur` while scoring) */
    const float *ref_lora;
    float *cur_lora;
    size_t lora_floats;
    /* full training: the reference is this net (the file's weights) with its adapter off */
    struct train_net *ref_net;
    /* the planner's frequency penalty when it sampled: every score uses that distribution */
    float freq_penalty;
};

/* The update on turns[0..n) (advantages set): logp_old, logp_ref, then the PPO epochs. */
AF_NODISCARD int grpo_update(const struct grpo_update_req *u, struct grpo_turn *turns, size_t n,
                             struct grpo_update_stats *st, char *err, size_t errlen);

#endif
