/*
 * grpo.h - Flow-GRPO (`agentflow train grpo`): the planner trained online inside the real
 * flow. docs/TRAINING.md has the equations with their symbols mapped to the code.
 *
 * One step:
 *  1. rollouts: B questions, G whole trajectories each, through af_flow_solve with the planner
 *     slot on an in-process engine that samples at the training temperature; the planner turns
 *     are read back from each solve's trace records (prompt ids, response ids, log-probs);
 *  2. rewards from the question's scorer (or a caller's reward function, e.g. an LLM judge),
 *     group-relative advantages broadcast to every planner turn of a trajectory;
 *  3. logp_old recomputed by the training network on the exact token ids, logp_ref with the
 *     adapter off (or the starting adapter);
 *  4. `ppo_epochs` passes over `mini_batch`-turn chunks: clipped surrogate plus k3 KL, LoRA
 *     gradients, global-norm clip, AdamW;
 *  5. the new adapter is swapped into the engine for the next step's rollouts.
 *
 * Reproducibility: every trajectory's sampling seed derives from (seed, step, question,
 * sample), the data order from the seed, the mini-batch order from (seed, step); a run resumed
 * from a checkpoint reproduces the uninterrupted run bit for bit on the same thread count.
 *
 * Output folder: metrics.jsonl (one fsync'd line per step), rollouts.jsonl (one line per
 * trajectory: question, answer, reward, turns), checkpoint-STEP/ (ckpt.h), and the latest
 * adapter at the top level (PEFT format).
 */
#ifndef AF_TRAIN_GRPO_H
#define AF_TRAIN_GRPO_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"
#include "agentflow/flow.h"
#include "train/grpo_loss.h"
#include "train/optim.h"

/* What the caller learns after each step (metrics.jsonl has more). Borrowed for the call. */
struct train_grpo_step {
    int64_t step, steps;
    double reward_mean, accuracy, degenerate_frac, loss, kl, entropy, grad_norm;
    double val_accuracy; /* NAN when no validation ran this step */
    float lr;
    int64_t trajectories, turns, tokens;
    double rollout_s, update_s;
    int saved;
};

/* A reward for one finished trajectory: *reward (0..1) and *correct (0/1). item is the data
 * record, answer the flow's extracted answer (may be NULL after a failed solve). Returns AF_OK,
 * or an AF_E* code with err set, which stops the run. Called from rollout threads at once. */
typedef int (*train_grpo_reward_fn)(void *user, const json_t *item, const char *answer,
                                    double *reward, int *correct, char *err, size_t errlen);

struct train_grpo_opts {
    const char *model;            /* the planner: "BASE.gguf" or "BASE.gguf+lora:DIR" */
    const char *chat_template;    /* NULL = the model's */
    int n_threads;                /* engine threads; <= 0 all cores */
    int prefill_chunk, max_batch; /* the planner engine's scheduler; 0 = its defaults */
    int ref_adapter; /* the KL reference is the starting adapter (needs +lora:DIR), not the
                        base model */
    int full;        /* train every weight (F32 copies; small models): the engine gets the new
                        weights in its own types after each step, the reference is the file's
                        weights, and RUN/model.gguf is written */
    int lora_rank;   /* a new adapter's rank (default 8), alpha (default 2*rank), targets */
    float lora_alpha;
    unsigned lora_targets;

    const json_t *data; /* array of items: {"question" (or "query"), "bench", gold fields,
                           optional "id"}; borrowed */
    const json_t *val;  /* the same, for --eval-every (may be NULL) */
    const char *out_dir;

    int64_t group, batch; /* G (>= 2) and B (default 8 and 32) */
    int64_t steps;        /* default: epochs * ceil(n / batch) */
    int64_t epochs;       /* default 1, used when steps is 0 */
    float lr;             /* -1 = the default: 1e-5 (LoRA), 1e-6 (full, as the paper) */
    const char *schedule; /* constant (default), linear, cosine */
    int64_t warmup;
    struct train_adamw adamw;    /* weight decay 0.01 as verl */
    float clip;                  /* global-norm clip, default 1 */
    struct grpo_hp hp;           /* clip_low 0.2, clip_high 0.3, kl_coef 0.001 */
    enum grpo_agg agg;           /* token-mean */
    int ppo_epochs;              /* E, default 1 */
    int64_t mini_batch;          /* turns per optimiser step; 0 = every turn of the step */
    float temperature;           /* planner sampling, default 0.7 */
    int dynamic_sampling;        /* > 0: roll out up to this many more rounds of `batch` questions a
                                    step until `batch` groups have differing rewards, and update on
                                    those only (DAPO's dynamic sampling); 0 (default) = off */
    float frequency_penalty;     /* planner sampling; NAN (default) = the flow planner slot's
                                    (1.2 in af_flow_default_params). The update scores every
                                    token under the same penalised distribution. */
    int max_tokens;              /* planner reply cap, default 2048 */
    int reward_f1;               /* reward = the scorer's F1 instead of 0/1 */
    train_grpo_reward_fn reward; /* NULL = af_score_item on the item's bench */
    void *reward_user;

    /* The flow: tools, prompts, slots FIXED / EXECUTOR / TOOL, max_steps (default 3 here) and
     * max_time; the planner slot and the trace are the trainer's. Borrowed. */
    struct af_flow_params flow;
    int concurrency; /* trajectories at once, default 8 */

    uint64_t seed;
    int64_t save_every; /* default 10; the last step always saves */
    int64_t eval_every; /* 0 = never */
    int keep;           /* checkpoints kept, default 2 */
    int resume;
    int64_t stop_after;

    void (*on_step)(void *user, const struct train_grpo_step *s);
    void (*on_message)(void *user, const char *msg);
    /* Called after each trajectory of a step finishes (done of total), for a progress bar. */
    void (*on_rollout)(void *user, int64_t done, int64_t total);
    void *user;
};
struct train_grpo_opts train_grpo_default_opts(void);

/* Runs or resumes a run. Errors name what is at fault: AF_EINVAL for a bad setting (G < 2, an
 * item without a question, a bench with no scorer, a resume with other settings, an out_dir
 * that holds a run without --resume), AF_ENOTFOUND / AF_EPARSE / AF_EIO for a model or
 * adapter that does not load, AF_EBACKEND when a slot's back-end fails every trajectory. */
AF_NODISCARD int train_grpo_run(const struct train_grpo_opts *o, char *err, size_t errlen);

#endif
