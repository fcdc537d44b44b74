/*
 * grpo.c - the Flow-GRPO loop (grpo.h): setup, data order, one step (rollouts, advantages,
 * update, weight swap), metrics, validation, checkpoints and resume.
 */
#include "train/grpo.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agentflow/engine.h"
#include "agentflow/score.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "engine/lora.h"
#include "engine/model.h"
#include "train/ckpt.h"
#include "train/dist.h"
#include "train/grpo_int.h"
#include "train/net.h"
#include "train/rng.h"
#include "train/runlog.h"

struct train_grpo_opts train_grpo_default_opts(void)
{
    struct train_grpo_opts o = {0};
    o.lora_rank = 8;
    o.lora_targets = LORA_ALL_TARGETS;
    o.lr = -1.0f; /* the mode's default */
    o.group = 8;
    o.batch = 32;
    o.epochs = 1;
    o.schedule = "constant";
    o.adamw = train_adamw_defaults();
    o.adamw.weight_decay = 0.01f;
    o.clip = 1.0f;
    o.hp = grpo_default_hp();
    o.agg = GRPO_AGG_TOKEN_MEAN;
    o.ppo_epochs = 1;
    o.temperature = 0.7f;
    o.frequency_penalty = NAN;
    o.max_tokens = 2048;
    o.flow = af_flow_default_params();
    o.flow.max_steps = 3;
    o.flow.max_time_s = 300;
    o.concurrency = 8;
    o.save_every = 10;
    o.keep = 2;
    return o;
}

struct run {
    const struct train_grpo_opts *o;
    char *base_path, *start_dir;
    struct af_engine *engine;
    const struct model *m;
    struct lora_adapter *lora;    /* LoRA mode */
    float *ref_lora;              /* the starting adapter's floats with ref_adapter, else NULL */
    struct model *ref_model;      /* full mode: the file's weights again, for the reference */
    struct lora_adapter *ref_nil; /* full mode: a zero adapter the reference net runs without */
    struct train_net *ref_net;
    float lr;
    struct train_net *net;
    const struct train_param *params;
    size_t np;
    struct train_adamw_state opt;
    struct train_sched sched;
    struct ckpt_state st;
    struct train_rng rng;
    int64_t *perm, n_data, steps;
    struct af_llm *planner;
    struct af_flow_params flow;
    struct af_linelog *metrics, *rollouts;
};

static void note(const struct run *r, const char *fmt, ...) AF_PRINTF(2, 3);
static void note(const struct run *r, const char *fmt, ...)
{
    if (!r->o->on_message || train_dist_rank() != 0)
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    r->o->on_message(r->o->user, buf);
}

/* ---- checks ---------------------------------------------------------------------------- */

static int bench_known(const char *b)
{
    return af_score_known(b);
}

/* Every item needs a question, and (without a reward function) a bench with a scorer. */
static int check_items(const json_t *data, const char *what, int need_bench, char *err,
                       size_t errlen)
{
    if (!json_is_array(data) || json_array_size(data) == 0) {
        af_errf(err, errlen, "%s: no questions to train on (the data is empty)", what);
        return AF_EINVAL;
    }
    size_t i;
    const json_t *it;
    json_array_foreach(data, i, it)
    {
        const char *q = json_string_value(json_object_get(it, "question"));
        if (!q)
            q = json_string_value(json_object_get(it, "query"));
        if (!q || !*q) {
            af_errf(err, errlen, "%s: item %zu has no \"question\" string", what, i);
            return AF_EINVAL;
        }
        if (!need_bench)
            continue;
        const char *b = json_string_value(json_object_get(it, "bench"));
        if (!b) {
            af_errf(err, errlen, "%s: item %zu has no \"bench\" naming its scorer", what, i);
            return AF_EINVAL;
        }
        if (!bench_known(b)) {
            af_errf(err, errlen, "%s: item %zu: no scorer for bench '%s'", what, i, b);
            return AF_EINVAL;
        }
    }
    return AF_OK;
}

static int check_opts(const struct train_grpo_opts *o, char *err, size_t errlen)
{
    if (!o->model || !o->out_dir) {
        af_errf(err, errlen, "train grpo needs --model, --data and --out");
        return AF_EINVAL;
    }
    const struct {
        int bad;
        const char *msg;
    } checks[] = {
        {o->group < 2, "--group must be at least 2: advantages compare a question's rollouts"},
        {o->batch < 1, "--batch must be at least 1"},
        {o->steps < 0 || o->epochs < 1, "--steps must be >= 0 and --epochs >= 1"},
        {!(o->lr >= 0 || o->lr == -1.0f) || !isfinite(o->lr), "--lr must be a non-negative number"},
        {o->schedule && train_sched_from_name(o->schedule) < 0,
         "--schedule must be constant, linear or cosine"},
        {o->lora_rank < 1, "--lora-rank must be at least 1"},
        {!(o->temperature > 0) || !isfinite(o->temperature),
         "--temperature must be > 0: training samples, and log-probs divide by it"},
        {isinf(o->frequency_penalty), "--frequency-penalty must be a finite number"},
        {o->dynamic_sampling < 0, "--dynamic-sampling must not be negative"},
        {o->ppo_epochs < 1, "--ppo-epochs must be at least 1"},
        {o->mini_batch < 0, "--mini-batch must not be negative"},
        {!(o->hp.clip_low >= 0 && o->hp.clip_low < 1) || !(o->hp.clip_high >= 0),
         "--clip-low must be in [0, 1) and --clip-high >= 0"},
        {!(o->hp.kl_coef >= 0), "--kl must be >= 0"},
        {o->save_every < 1, "--save-every must be at least 1"},
        {o->eval_every < 0, "--eval-every must not be negative"},
        {o->eval_every > 0 && !o->val, "--eval-every needs --val"},
        {o->flow.max_steps < 1, "--max-steps must be at least 1"},
        {!o->flow.tools, "train grpo: no tool registry"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (checks[i].bad) {
            af_errf(err, errlen, "%s", checks[i].msg);
            return AF_EINVAL;
        }
    for (int s = AF_SLOT_FIXED; s < AF_N_SLOTS; s++)
        if (!o->flow.slots[s].llm) {
            af_errf(err, errlen, "train grpo: the %s slot has no back-end", af_slot_name(s));
            return AF_EINVAL;
        }
    int rc = check_items(o->data, "--data", !o->reward, err, errlen);
    if (!rc && o->val)
        rc = check_items(o->val, "--val", !o->reward, err, errlen);
    return rc;
}

/* ---- setup ----------------------------------------------------------------------------- */

/* "PATH" or "PATH+lora:DIR" (a leading "gguf:" allowed). */
static int split_model(struct run *r, char *err, size_t errlen)
{
    const char *spec = r->o->model;
    if (!strncmp(spec, "gguf:", 5))
        spec += 5;
    else if (strstr(spec, "://") || !strncmp(spec, "scripted:", 9)) {
        af_errf(err, errlen,
                "--model %s: the planner must run in-process (a GGUF file, gguf:PATH[+lora:DIR]) "
                "so that it can sample and be trained",
                r->o->model);
        return AF_EINVAL;
    }
    const char *plus = strstr(spec, "+lora:");
    if (!plus) {
        r->base_path = af_xstrdup(spec);
        return AF_OK;
    }
    r->base_path = af_xstrndup(spec, (size_t)(plus - spec));
    r->start_dir = af_xstrdup(plus + 6);
    if (!*r->start_dir || !*r->base_path) {
        af_errf(err, errlen, "--model %s: expected BASE.gguf+lora:DIR", r->o->model);
        return AF_EINVAL;
    }
    return AF_OK;
}

static int setup(struct run *r, char *err, size_t errlen)
{
    const struct train_grpo_opts *o = r->o;
    int rc = split_model(r, err, errlen);
    if (rc)
        return rc;
    if (o->ref_adapter && !r->start_dir) {
        af_errf(err, errlen, "--ref-adapter needs a starting adapter: --model BASE.gguf+lora:DIR");
        return AF_EINVAL;
    }
    struct af_engine_params ep = af_engine_default_params();
    ep.n_threads = o->n_threads;
    ep.chat_template = o->chat_template;
    ep.prefill_chunk = o->prefill_chunk;
    ep.max_batch = o->max_batch;
    ep.batch_invariant = 1; /* rollouts must not depend on which solve reached the cache first */
    if ((rc = af_engine_load(r->base_path, &ep, &r->engine, err, errlen)))
        return rc;
    r->m = af_engine_model(r->engine);
    struct train_net_params np = train_net_default_params();
    if (o->full) {
        if (r->start_dir) {
            af_errf(err, errlen,
                    "--full trains the model's own weights: give --model a GGUF "
                    "without +lora:DIR (merge the adapter first: model merge)");
            return AF_EINVAL;
        }
        /* the reference: the file's weights, read again (the engine's change every step),
         * through a LoRA-mode net that runs with its adapter off */
        if ((rc = model_load(r->base_path, &r->ref_model, err, errlen)) ||
            (rc = lora_new(&r->ref_model->hp, 1, 1.0f, 0, 1u << LORA_Q, &r->ref_nil, err, errlen)))
            return rc;
        struct train_net_params rp = train_net_default_params();
        rp.lora = r->ref_nil;
        if ((rc = train_net_new(r->ref_model, &rp, &r->ref_net, err, errlen)))
            return rc;
        np.full = 1;
    } else if (r->start_dir) {
        if ((rc = lora_load_peft(r->start_dir, r->m, &r->lora, err, errlen)))
            return rc;
        r->lora->dropout = 0; /* sampling and scoring must see the same network */
        if (o->ref_adapter) {
            r->ref_lora = af_xmalloc(r->lora->n_floats * sizeof *r->ref_lora);
            memcpy(r->ref_lora, r->lora->data, r->lora->n_floats * sizeof *r->ref_lora);
        }
    } else {
        const float alpha = o->lora_alpha > 0 ? o->lora_alpha : 2.0f * (float)o->lora_rank;
        if ((rc = lora_new(&r->m->hp, o->lora_rank, alpha, 0, o->lora_targets, &r->lora, err,
                           errlen)))
            return rc;
        lora_init(r->lora, o->seed);
    }
    np.lora = r->lora;
    if ((rc = train_net_new(r->m, &np, &r->net, err, errlen)))
        return rc;
    r->params = train_net_params_list(r->net, &r->np);
    if ((rc = train_adamw_init(&r->opt, r->params, r->np, err, errlen)))
        return rc;
    r->n_data = (int64_t)json_array_size(o->data);
    r->steps = o->steps > 0 ? o->steps : o->epochs * ((r->n_data + o->batch - 1) / o->batch);
    r->sched.kind =
        (enum train_sched_kind)train_sched_from_name(o->schedule ? o->schedule : "constant");
    r->lr = o->lr >= 0 ? o->lr : (o->full ? 1e-6f : 1e-5f);
    r->sched.lr = r->lr;
    r->sched.warmup = o->warmup;
    r->sched.total = r->steps;
    r->perm = af_xmalloc((size_t)r->n_data * sizeof *r->perm);
    r->planner = af_llm_engine_new(r->engine, r->o->model);
    r->flow = o->flow;
    struct af_flow_slot *ps = &r->flow.slots[AF_SLOT_PLANNER];
    ps->llm = r->planner;
    ps->model = NULL;
    ps->sampling = af_llm_default_sampling();
    ps->sampling.temperature = o->temperature;
    ps->sampling.top_p = 1.0; /* the trainer scores the whole softmax(logits / T) */
    /* the flow's penalty (1.2 by default) shapes what the planner writes when it is sampled,
     * so the rollouts sample with it and grpo_update scores under the same distribution */
    if (!isnan(o->frequency_penalty))
        ps->sampling.frequency_penalty = o->frequency_penalty;
    else
        ps->sampling.frequency_penalty = o->flow.slots[AF_SLOT_PLANNER].sampling.frequency_penalty;
    ps->sampling.max_tokens = o->max_tokens;
    ps->sampling.n_stop = o->flow.slots[AF_SLOT_PLANNER].sampling.n_stop;
    memcpy(ps->sampling.stop, o->flow.slots[AF_SLOT_PLANNER].sampling.stop,
           sizeof ps->sampling.stop);
    return AF_OK;
}

/* ---- data order, settings, resume ------------------------------------------------------ */

static void shuffle_epoch(struct run *r)
{
    r->st.epoch_rng = r->rng;
    for (int64_t i = 0; i < r->n_data; i++)
        r->perm[i] = i;
    train_rng_shuffle(&r->rng, r->perm, r->n_data);
}

static int64_t next_item(struct run *r)
{
    if (r->st.pos >= r->n_data) {
        r->st.epoch++;
        r->st.pos = 0;
        shuffle_epoch(r);
    }
    return r->perm[r->st.pos++];
}

static char *settings_json(const struct run *r)
{
    const struct train_grpo_opts *o = r->o;
    json_t *s = json_pack(
        "{s:s,s:I,s:I,s:f,s:s,s:I,s:f,s:f,s:f,s:f,s:f,s:s,s:i,s:I,s:f,s:i,s:i,s:I,s:i,s:f,s:i,"
        "s:i,s:b,s:b,s:f,s:b}",
        "model", o->model, "group", (json_int_t)o->group, "batch", (json_int_t)o->batch, "lr",
        (double)r->lr, "schedule", o->schedule ? o->schedule : "constant", "warmup",
        (json_int_t)o->warmup, "clip", (double)o->clip, "clip_low", (double)o->hp.clip_low,
        "clip_high", (double)o->hp.clip_high, "kl", (double)o->hp.kl_coef, "weight_decay",
        (double)o->adamw.weight_decay, "loss_agg", grpo_agg_name(o->agg), "ppo_epochs",
        o->ppo_epochs, "mini_batch", (json_int_t)o->mini_batch, "temperature",
        (double)o->temperature, "max_tokens", o->max_tokens, "max_steps", o->flow.max_steps, "seed",
        (json_int_t)o->seed, "lora_rank", r->lora ? r->lora->rank : 0, "lora_alpha",
        r->lora ? (double)r->lora->alpha : 0.0, "lora_targets", r->lora ? (int)r->lora->targets : 0,
        "data_items", (int)r->n_data, "reward_f1", o->reward_f1, "ref_adapter", o->ref_adapter,
        "max_time", o->flow.max_time_s, "full", o->full);
    /* only when set, so that a run from before the penalty was trained with resumes at 0 */
    const double fp = r->flow.slots[AF_SLOT_PLANNER].sampling.frequency_penalty;
    if (fp != 0)
        json_object_set_new(s, "frequency_penalty", json_real(fp));
    if (o->dynamic_sampling > 0)
        json_object_set_new(s, "dynamic_sampling", json_integer(o->dynamic_sampling));
    char *text = json_dumps(s, JSON_COMPACT);
    json_decref(s);
    return text;
}

static int start_or_resume(struct run *r, char *err, size_t errlen)
{
    const struct train_grpo_opts *o = r->o;
    int64_t latest = 0;
    r->st.settings_json = settings_json(r);
    int rc = train_run_start(o->out_dir, o->resume, r->st.settings_json, &latest, err, errlen);
    if (rc)
        return rc;
    if (latest == 0) {
        train_rng_seed(&r->rng, train_mix(o->seed, 0x5eedull));
        shuffle_epoch(r);
        return AF_OK;
    }
    struct ckpt_state saved = {0};
    rc = ckpt_load(o->out_dir, latest, r->lora, r->m, r->params, r->np, &r->opt, &saved, err,
                   errlen);
    free(saved.settings_json);
    if (rc)
        return rc;
    if (saved.pos > r->n_data) {
        af_errf(err, errlen, "--resume: the checkpoint's data position %lld is past the %lld items",
                (long long)saved.pos, (long long)r->n_data);
        return AF_EINVAL;
    }
    r->st.step = saved.step;
    r->st.epoch = saved.epoch;
    r->rng = saved.epoch_rng;
    shuffle_epoch(r); /* the same permutation as before the stop */
    r->st.pos = saved.pos;
    note(r, "resumed from %s/checkpoint-%lld (epoch %lld, item %lld)", o->out_dir,
         (long long)latest, (long long)r->st.epoch, (long long)r->st.pos);
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", o->out_dir);
    if ((rc = train_metrics_trim(path, r->st.step, err, errlen)))
        return rc;
    snprintf(path, sizeof path, "%s/rollouts.jsonl", o->out_dir);
    return train_metrics_trim(path, r->st.step, err, errlen);
}

/* ---- one step -------------------------------------------------------------------------- */

struct step_sums {
    double reward, correct, degenerate;
    int64_t n_traj, n_groups, turns, turns_max, resp_tokens, gen_tokens, steps, failed_steps;
    int64_t rounds, groups_used; /* rollout rounds (dynamic sampling), groups the update got */
    int64_t solve_errors, train_tokens;
    json_t *tool_use;
};

static void on_done(void *user, int64_t done, int64_t total)
{
    const struct run *r = user;
    if (r->o->on_rollout)
        r->o->on_rollout(r->o->user, done, total);
}

static int append_line(struct af_linelog *log, json_t *j, const char *path, char *err,
                       size_t errlen)
{
    char *line = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    int rc = line ? af_linelog_append(log, line, strlen(line)) : AF_ENOMEM;
    free(line);
    if (rc)
        af_errf(err, errlen, "%s: cannot append", path);
    return rc;
}

/* One line per trajectory; every rank's lines go to rank 0, which appends them. */
static int log_rollouts(struct run *r, const struct grpo_traj *t, int64_t n, char *err,
                        size_t errlen)
{
    struct af_buf text;
    af_buf_init(&text, AF_BUF_NOLIMIT);
    for (int64_t k = 0; k < n; k++) {
        const json_t *item = json_array_get(r->o->data, (size_t)t[k].item);
        json_t *j = json_pack("{s:I,s:I,s:I,s:f,s:b,s:i,s:I}", "step", (json_int_t)r->st.step + 1,
                              "item", (json_int_t)t[k].item, "sample", (json_int_t)t[k].sample,
                              "reward", t[k].reward, "correct", t[k].correct, "steps", t[k].steps,
                              "turns", (json_int_t)t[k].n_turns);
        json_t *id = json_object_get(item, "id");
        if (id)
            json_object_set(j, "id", id);
        json_object_set_new(j, "answer", t[k].answer ? json_string(t[k].answer) : json_null());
        json_object_set(j, "tools", t[k].tool_use);
        if (t[k].errmsg)
            json_object_set_new(j, "error", json_string(t[k].errmsg));
        char *line = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (text.len)
            (void)af_buf_append(&text, "\n", 1);
        (void)af_buf_append(&text, line, strlen(line));
        free(line);
    }
    char *all = NULL;
    int rc = train_dist_gather_text(af_buf_str(&text), &all, err, errlen);
    af_buf_deinit(&text);
    for (char *p = all; !rc && r->rollouts && p && *p;) {
        char *nl = strchr(p, '\n');
        const size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (l && af_linelog_append(r->rollouts, p, l)) {
            af_errf(err, errlen, "%s/rollouts.jsonl: cannot append", r->o->out_dir);
            rc = AF_EIO;
        }
        p += l + (nl ? 1 : 0);
    }
    free(all);
    return rc;
}

/* Advantages per question group, broadcast to the turns; the flat list of turns. */
static struct grpo_turn *gather(struct grpo_traj *t, int64_t n_q, int64_t G, size_t *n_turns,
                                struct step_sums *s)
{
    size_t total = 0;
    for (int64_t k = 0; k < n_q * G; k++)
        total += t[k].n_turns;
    struct grpo_turn *turns = af_xcalloc(total ? total : 1, sizeof *turns);
    double *rw = af_xmalloc((size_t)G * sizeof *rw);
    float *adv = af_xmalloc((size_t)G * sizeof *adv);
    size_t at = 0;
    for (int64_t q = 0; q < n_q; q++) {
        for (int64_t g = 0; g < G; g++)
            rw[g] = t[q * G + g].reward;
        (void)grpo_group_advantages(rw, G, adv);
        for (int64_t g = 0; g < G; g++) {
            struct grpo_traj *tr = &t[q * G + g];
            for (size_t i = 0; i < tr->n_turns; i++) {
                turns[at] = tr->turns[i];
                turns[at].adv = adv[g];
                turns[at].traj = q * G + g;
                s->resp_tokens += turns[at].n_resp;
                s->train_tokens += turns[at].n_prompt + turns[at].n_resp;
                at++;
            }
            tr->n_turns = 0; /* the flat list owns them now */
        }
    }
    free(rw);
    free(adv);
    *n_turns = at;
    return turns;
}

static void turns_free(struct grpo_turn *turns, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        free(turns[k].ids);
        free(turns[k].logp_engine);
        free(turns[k].logp_old);
        free(turns[k].logp_ref);
    }
    free(turns);
}

static void sum_trajs(const struct grpo_traj *t, int64_t n, struct step_sums *s)
{
    for (int64_t k = 0; k < n; k++) {
        s->n_traj++;
        s->reward += t[k].reward;
        s->correct += t[k].correct;
        s->turns += (int64_t)t[k].n_turns;
        if ((int64_t)t[k].n_turns > s->turns_max)
            s->turns_max = (int64_t)t[k].n_turns;
        s->steps += t[k].steps;
        s->failed_steps += t[k].failed_steps;
        s->solve_errors += t[k].solve_err != AF_OK;
        s->gen_tokens += t[k].gen_tokens;
        const char *key;
        json_t *v;
        json_object_foreach(t[k].tool_use, key, v)
        {
            json_t *c = json_object_get(s->tool_use, key);
            json_object_set_new(
                s->tool_use, key,
                json_integer((c ? json_integer_value(c) : 0) + json_integer_value(v)));
        }
    }
}

static void add_counts(json_t *into, const json_t *from)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)(uintptr_t)from, key, v)
    {
        json_t *c = json_object_get(into, key);
        json_object_set_new(into, key,
                            json_integer((c ? json_integer_value(c) : 0) + json_integer_value(v)));
    }
}

/* Sums every rank's step figures (every rank gets the totals) and agrees on failure: a rank
 * whose rollouts failed makes them all stop. */
static int reduce_sums(struct step_sums *s, int failed, char *err, size_t errlen)
{
    double v[13] = {s->reward,
                    s->correct,
                    s->degenerate,
                    (double)s->n_traj,
                    (double)s->n_groups,
                    (double)s->turns,
                    (double)s->resp_tokens,
                    (double)s->gen_tokens,
                    (double)s->steps,
                    (double)s->failed_steps,
                    (double)s->solve_errors,
                    (double)s->train_tokens,
                    failed ? 1.0 : 0.0};
    int rc = train_dist_sum_doubles(v, 13, err, errlen);
    if (!rc)
        rc = train_dist_max_i64(&s->turns_max, err, errlen);
    char *mine = json_dumps(s->tool_use, JSON_COMPACT), *all = NULL;
    if (!rc)
        rc = train_dist_gather_text(mine ? mine : "{}", &all, err, errlen);
    free(mine);
    if (rc) {
        free(all);
        return rc;
    }
    s->reward = v[0];
    s->correct = v[1];
    s->degenerate = v[2];
    s->n_traj = (int64_t)v[3];
    s->n_groups = (int64_t)v[4];
    s->turns = (int64_t)v[5];
    s->resp_tokens = (int64_t)v[6];
    s->gen_tokens = (int64_t)v[7];
    s->steps = (int64_t)v[8];
    s->failed_steps = (int64_t)v[9];
    s->solve_errors = (int64_t)v[10];
    s->train_tokens = (int64_t)v[11];
    if (train_dist_size() > 1) {
        json_t *merged = json_object();
        for (char *p = all; p && *p;) {
            char *nl = strchr(p, '\n');
            const size_t l = nl ? (size_t)(nl - p) : strlen(p);
            json_t *j = json_loadb(p, l, 0, NULL);
            if (j)
                add_counts(merged, j);
            json_decref(j);
            p += l + (nl ? 1 : 0);
        }
        json_decref(s->tool_use);
        s->tool_use = merged;
    }
    free(all);
    if (v[12] > 0 && !failed) {
        af_errf(err, errlen, "another rank's rollouts failed (its log says why)");
        return AF_EBACKEND;
    }
    return AF_OK;
}

/* This rank's share of n items: every K-th, starting at its rank. */
static int64_t my_share(const int64_t *all, int64_t n, int64_t *mine)
{
    const int K = train_dist_size(), me = train_dist_rank();
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (i % K == me)
            mine[m++] = all[i];
    return m;
}

static double validate(struct run *r, char *err, size_t errlen, int *rc)
{
    const int64_t n_all = (int64_t)json_array_size(r->o->val);
    int64_t *all = af_xmalloc((size_t)n_all * sizeof *all),
            *items = af_xmalloc((size_t)n_all * sizeof *items);
    for (int64_t i = 0; i < n_all; i++)
        all[i] = i;
    const int64_t n = my_share(all, n_all, items);
    free(all);
    struct af_flow_params fp = r->flow;
    /* the planner at the evaluation settings the caller gave (eval run's) */
    fp.slots[AF_SLOT_PLANNER].sampling = r->o->flow.slots[AF_SLOT_PLANNER].sampling;
    struct grpo_rollout_req q = {&fp,
                                 r->o->val,
                                 items,
                                 n,
                                 1,
                                 r->o->seed ^ 0x7a11d,
                                 r->st.step,
                                 r->o->concurrency,
                                 r->o->reward_f1,
                                 r->o->reward,
                                 r->o->reward_user,
                                 NULL,
                                 NULL};
    struct grpo_traj *t = NULL;
    *rc = grpo_rollouts(&q, &t, err, errlen);
    double acc[2] = {0, *rc ? 1.0 : 0.0};
    for (int64_t k = 0; k < n; k++) {
        acc[0] += t[k].correct;
        grpo_traj_deinit(&t[k]);
    }
    free(t);
    free(items);
    const int local = *rc;
    int rc2 = train_dist_sum_doubles(acc, 2, err, errlen);
    if (!local && !rc2 && acc[1] > 0) {
        af_errf(err, errlen, "another rank's validation failed (its log says why)");
        rc2 = AF_EBACKEND;
    }
    if (!local)
        *rc = rc2;
    return n_all ? acc[0] / (double)n_all : 0;
}

static json_t *metrics_json(const struct run *r, const struct step_sums *s,
                            const struct grpo_update_stats *u, float lr, double roll_s,
                            double upd_s, double val_acc)
{
    const double nt = s->n_traj ? (double)s->n_traj : 1;
    json_t *j = json_pack(
        "{s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:f,s:f,s:f,s:I,s:I,"
        "s:I}",
        "step", (json_int_t)r->st.step, "reward_mean", s->reward / nt, "accuracy", s->correct / nt,
        "degenerate_frac", s->n_groups ? s->degenerate / (double)s->n_groups : 0.0, "kl", u->kl,
        "clip_frac_low", u->clip_low, "clip_frac_high", u->clip_high, "entropy", u->entropy, "loss",
        u->loss, "grad_norm", isfinite(u->grad_norm) ? u->grad_norm : -1.0, "lr", (double)lr,
        "logp_mismatch", u->logp_mismatch, "ratio_mean", u->ratio, "turns_mean",
        (double)s->turns / nt, "tokens_per_turn",
        s->turns ? (double)s->resp_tokens / (double)s->turns : 0.0, "turns_max",
        (json_int_t)s->turns_max, "tool_error_rate",
        s->steps ? (double)s->failed_steps / (double)s->steps : 0.0, "rollout_s", roll_s,
        "update_s", upd_s, "trajectories", (json_int_t)s->n_traj, "turns", (json_int_t)s->turns,
        "solve_errors", (json_int_t)s->solve_errors);
    json_object_set(j, "tool_use", s->tool_use);
    json_object_set_new(j, "rollout_tok_s",
                        json_real(roll_s > 0 ? (double)s->gen_tokens / roll_s : 0));
    json_object_set_new(
        j, "update_tok_s",
        json_real(upd_s > 0 ? (double)s->train_tokens * r->o->ppo_epochs / upd_s : 0));
    json_object_set_new(j, "phase_s",
                        json_pack("{s:f,s:f,s:f,s:f,s:f,s:f}", "rollout", roll_s, "logp_old",
                                  u->old_s, "logp_ref", u->ref_s, "backward", u->bwd_s, "allreduce",
                                  u->allreduce_s, "optimizer", u->opt_s));
    json_object_set_new(j, "optimizer_steps", json_integer((json_int_t)u->opt_steps));
    if (r->o->dynamic_sampling > 0) {
        json_object_set_new(j, "rollout_rounds", json_integer((json_int_t)s->rounds));
        json_object_set_new(j, "groups_used", json_integer((json_int_t)s->groups_used));
    }
    if (u->skipped)
        json_object_set_new(j, "skipped_steps", json_integer((json_int_t)u->skipped));
    if (!isnan(val_acc))
        json_object_set_new(j, "val_accuracy", json_real(val_acc));
    return j;
}

/* The run's outputs (model.gguf, or the adapter's PEFT folder) from the weights as they are. */
static int write_outputs(struct run *r, char *err, size_t errlen)
{
    if (train_dist_rank() != 0)
        return AF_OK;
    if (r->lora)
        return lora_save_peft(r->lora, r->m, r->o->out_dir, r->base_path, err, errlen);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.gguf", r->o->out_dir);
    return ckpt_write_gguf(r->m, r->base_path, r->params, r->np, path, err, errlen);
}

static int save(struct run *r, char *err, size_t errlen)
{
    if (train_dist_rank() != 0)
        return AF_OK;
    int rc = ckpt_save(r->o->out_dir, &r->st, r->lora, r->m, r->params, r->np, &r->opt, r->o->keep,
                       err, errlen);
    return rc ? rc : write_outputs(r, err, errlen);
}

/* The trained weights into the engine that samples the rollouts. */
static int push_weights(struct run *r, char *err, size_t errlen)
{
    if (r->lora)
        return af_engine_set_lora(r->engine, r->lora, err, errlen);
    const char **names = af_xmalloc(r->np * sizeof *names);
    const float **vals = af_xmalloc(r->np * sizeof *vals);
    int64_t *counts = af_xmalloc(r->np * sizeof *counts);
    for (size_t k = 0; k < r->np; k++) {
        names[k] = r->params[k].name;
        vals[k] = r->params[k].w;
        counts[k] = r->params[k].n;
    }
    int rc = af_engine_set_weights(r->engine, names, vals, counts, r->np, err, errlen);
    free(names);
    free(vals);
    free(counts);
    return rc;
}

/* FNV-1a over every trainable value, in list order: the ranks compare it each step. */
static uint64_t weights_checksum(const struct run *r)
{
    if (r->lora)
        return train_dist_checksum(r->lora->data, r->lora->n_floats * sizeof *r->lora->data);
    uint64_t h = 0;
    for (size_t k = 0; k < r->np; k++)
        h = h * 0x100000001b3ull ^
            train_dist_checksum(r->params[k].w, (size_t)r->params[k].n * sizeof(float));
    return h;
}

/* 1 when the G rewards of group q are all equal (it teaches nothing). */
static int group_degenerate(const struct grpo_traj *t, int64_t q, int64_t G)
{
    for (int64_t g = 1; g < G; g++)
        if (t[q * G + g].reward != t[q * G].reward)
            return 0;
    return 1;
}

/* One round of rollouts: the next `batch` questions (this rank's share), appended to *t
 * (*n_q groups of G, owned). *n_useful counts the groups whose rewards differ; *roll_s += the
 * round's time. */
static int rollout_round(struct run *r, struct grpo_traj **t, int64_t *n_q, int64_t *n_useful,
                         double *roll_s, char *err, size_t errlen)
{
    const struct train_grpo_opts *o = r->o;
    const int64_t G = o->group;
    /* every rank draws the whole batch (the same data order everywhere) and rolls out its
     * share of the questions */
    int64_t *batch = af_xmalloc((size_t)o->batch * sizeof *batch);
    int64_t *items = af_xmalloc((size_t)o->batch * sizeof *items);
    for (int64_t i = 0; i < o->batch; i++)
        batch[i] = next_item(r);
    const int64_t n = my_share(batch, o->batch, items);
    free(batch);
    const double t0 = af_clock_ms();
    struct grpo_rollout_req q = {
        &r->flow,     o->data,   items,          n,       G, o->seed, r->st.step, o->concurrency,
        o->reward_f1, o->reward, o->reward_user, on_done, r};
    struct grpo_traj *got = NULL;
    int rc = grpo_rollouts(&q, &got, err, errlen);
    *roll_s += (af_clock_ms() - t0) / 1000.0;
    free(items);
    if (rc) { /* the finished solves hold their results: free those too */
        for (int64_t k = 0; got && k < n * G; k++)
            grpo_traj_deinit(&got[k]);
        free(got);
        return rc;
    }
    *t = af_xrealloc(*t, (size_t)(*n_q + n) * (size_t)G * sizeof **t);
    memcpy(*t + *n_q * G, got, (size_t)(n * G) * sizeof *got);
    free(got);
    for (int64_t k = *n_q; k < *n_q + n; k++)
        *n_useful += !group_degenerate(*t, k, G);
    *n_q += n;
    return AF_OK;
}

/* Drops the groups whose rewards are all equal, keeping the others' order. Returns the count. */
static int64_t drop_degenerate(struct grpo_traj *t, int64_t n_q, int64_t G)
{
    int64_t kept = 0;
    for (int64_t k = 0; k < n_q; k++) {
        if (group_degenerate(t, k, G)) {
            for (int64_t g = 0; g < G; g++)
                grpo_traj_deinit(&t[k * G + g]);
            continue;
        }
        if (kept != k)
            memmove(t + kept * G, t + k * G, (size_t)G * sizeof *t);
        kept++;
    }
    return kept;
}

static int step_once(struct run *r, struct train_grpo_step *out, char *err, size_t errlen)
{
    const struct train_grpo_opts *o = r->o;
    const int64_t G = o->group;
    double roll_s = 0;
    struct grpo_traj *t = NULL;
    int64_t n_q = 0, n_useful = 0, rounds = 0;
    int rc = AF_OK, local_rc;
    /* Dynamic sampling (DAPO): a group whose rewards are all equal has no advantage and only
     * dilutes the update, so more questions are rolled out until `batch` groups differ, at
     * most dynamic_sampling more rounds, and the update sees only those. Every rank does the
     * same rounds (the data order stays the same everywhere). */
    for (;;) {
        local_rc = rollout_round(r, &t, &n_q, &n_useful, &roll_s, err, errlen);
        rounds++;
        if (o->dynamic_sampling <= 0)
            break;
        double v[2] = {(double)n_useful, local_rc ? 1.0 : 0.0};
        if ((rc = train_dist_sum_doubles(v, 2, err, errlen)) || v[1] > 0 ||
            v[0] >= (double)o->batch || rounds > o->dynamic_sampling)
            break;
    }
    const int64_t n_traj = n_q * G;
    struct step_sums s;
    memset(&s, 0, sizeof s);
    s.tool_use = json_object();
    s.rounds = rounds;
    size_t n_turns = 0;
    struct grpo_turn *turns = NULL;
    if (!local_rc) {
        sum_trajs(t, n_traj, &s);
        for (int64_t k = 0; k < n_q; k++) {
            s.degenerate += group_degenerate(t, k, G);
            s.n_groups++;
        }
    }
    if (!rc) {
        rc = reduce_sums(&s, local_rc != AF_OK, err, errlen);
        if (local_rc) /* this rank's own error comes first */
            rc = local_rc;
    }
    if (!rc)
        rc = log_rollouts(r, t, n_traj, err, errlen);
    if (!rc && s.solve_errors == s.n_traj) {
        af_errf(err, errlen, "every rollout of step %lld failed; %s%s", (long long)r->st.step + 1,
                n_traj ? "the first: " : "",
                n_traj && t[0].errmsg ? t[0].errmsg : "see each rank's rollouts");
        rc = AF_EBACKEND;
    }
    double used_all = 0; /* groups the update gets, every rank's */
    if (!rc) {
        const int64_t used = o->dynamic_sampling > 0 ? drop_degenerate(t, n_q, G) : n_q;
        turns = gather(t, used, G, &n_turns, &s);
        n_q = used;
        used_all = (double)used;
        rc = train_dist_sum_doubles(&used_all, 1, err, errlen);
        s.groups_used = (int64_t)used_all;
    }
    for (int64_t k = 0; k < n_q * G && t; k++)
        grpo_traj_deinit(&t[k]);
    free(t);
    struct grpo_update_stats u;
    memset(&u, 0, sizeof u);
    const float lr = train_sched_lr(&r->sched, r->st.step);
    const double t0 = af_clock_ms();
    /* no group differs (dynamic sampling dropped them all): nothing to learn this step */
    if (!rc && used_all > 0) {
        struct grpo_update_req uq = {
            r->net,
            r->params,
            r->np,
            &r->opt,
            &o->adamw,
            lr,
            o->clip,
            o->temperature,
            o->hp,
            o->agg,
            o->ppo_epochs,
            o->mini_batch,
            train_mix(o->seed, 0xb0000000ull + (uint64_t)r->st.step),
            r->ref_lora,
            r->lora ? r->lora->data : NULL,
            r->lora ? r->lora->n_floats : 0,
            r->ref_net,
            (float)r->flow.slots[AF_SLOT_PLANNER].sampling.frequency_penalty};
        rc = grpo_update(&uq, turns, n_turns, &u, err, errlen);
    }
    if (!rc)
        rc = train_dist_check_same(weights_checksum(r), "the trained weights' checksum", err,
                                   errlen);
    if (!rc)
        rc = push_weights(r, err, errlen);
    const double upd_s = (af_clock_ms() - t0) / 1000.0;
    turns_free(turns, n_turns);
    if (!rc) {
        r->st.step++;
        double val = NAN;
        if (o->eval_every > 0 && r->st.step % o->eval_every == 0)
            val = validate(r, err, errlen, &rc);
        if (!rc && r->metrics)
            rc = append_line(r->metrics, metrics_json(r, &s, &u, lr, roll_s, upd_s, val),
                             "metrics.jsonl", err, errlen);
        memset(out, 0, sizeof *out);
        out->step = r->st.step;
        out->steps = r->steps;
        out->reward_mean = s.n_traj ? s.reward / (double)s.n_traj : 0;
        out->accuracy = s.n_traj ? s.correct / (double)s.n_traj : 0;
        out->degenerate_frac = s.n_groups ? s.degenerate / (double)s.n_groups : 0;
        out->loss = u.loss;
        out->kl = u.kl;
        out->entropy = u.entropy;
        out->grad_norm = u.grad_norm;
        out->val_accuracy = val;
        out->lr = lr;
        out->trajectories = s.n_traj;
        out->turns = s.turns;
        out->tokens = s.resp_tokens;
        out->rollout_s = roll_s;
        out->update_s = upd_s;
    }
    json_decref(s.tool_use);
    return rc;
}

/* ---- the run --------------------------------------------------------------------------- */

static int open_logs(struct run *r, char *err, size_t errlen)
{
    const char *dir = r->o->out_dir;
    if (train_dist_rank() != 0) /* rank 0 alone writes */
        return AF_OK;
    int rc = af_mkdir_p(dir, 0755, err, errlen);
    if (rc != AF_OK)
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    rc = af_linelog_open(path, &r->metrics, err, errlen);
    snprintf(path, sizeof path, "%s/rollouts.jsonl", dir);
    if (!rc)
        rc = af_linelog_open(path, &r->rollouts, err, errlen);
    return rc;
}

static void teardown(struct run *r)
{
    if (r->metrics)
        af_linelog_close(r->metrics);
    if (r->rollouts)
        af_linelog_close(r->rollouts);
    af_llm_free(r->planner);
    free(r->perm);
    free(r->st.settings_json);
    train_adamw_deinit(&r->opt);
    train_net_free(r->net);
    lora_free(r->lora);
    free(r->ref_lora);
    train_net_free(r->ref_net);
    lora_free(r->ref_nil);
    model_free(r->ref_model);
    af_engine_free(r->engine);
    free(r->base_path);
    free(r->start_dir);
}

int train_grpo_run(const struct train_grpo_opts *o, char *err, size_t errlen)
{
    int rc = check_opts(o, err, errlen);
    if (rc)
        return rc;
    struct run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    if (!(rc = setup(&r, err, errlen)) && !(rc = start_or_resume(&r, err, errlen)) &&
        !(rc = (r.lora || r.st.step > 0) ? push_weights(&r, err, errlen) : AF_OK) &&
        !(rc = open_logs(&r, err, errlen))) {
        if (r.lora)
            note(&r, "%lld questions, %lld steps of %lld x %lld rollouts; adapter rank %d",
                 (long long)r.n_data, (long long)r.steps, (long long)o->batch, (long long)o->group,
                 r.lora->rank);
        else
            note(&r, "%lld questions, %lld steps of %lld x %lld rollouts; every weight trained",
                 (long long)r.n_data, (long long)r.steps, (long long)o->batch, (long long)o->group);
        /* The outputs again from the last checkpoint: a kill between the checkpoint and the
         * model file must not leave a finished run without its model. */
        if (r.st.step >= r.steps) {
            note(&r, "the run already has %lld steps (--steps %lld): nothing to do",
                 (long long)r.st.step, (long long)r.steps);
            rc = write_outputs(&r, err, errlen);
        }
        while (!rc && r.st.step < r.steps) {
            struct train_grpo_step s;
            if ((rc = step_once(&r, &s, err, errlen)))
                break;
            const int stop = o->stop_after > 0 && r.st.step >= o->stop_after;
            if (r.st.step % o->save_every == 0 || r.st.step == r.steps || stop) {
                if ((rc = save(&r, err, errlen)))
                    break;
                s.saved = 1;
            }
            if (o->on_step && train_dist_rank() == 0)
                o->on_step(o->user, &s);
            if (stop) {
                note(&r, "stopped after step %lld as asked; continue with --resume",
                     (long long)r.st.step);
                break;
            }
        }
    }
    teardown(&r);
    return rc;
}
