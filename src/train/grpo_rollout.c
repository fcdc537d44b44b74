/*
 * grpo_rollout.c - Flow-GRPO's rollouts (grpo_int.h): whole solves through the real flow, many
 * at once, each with its own trace sink that keeps the planner's calls as training turns, and
 * each scored by its question's scorer.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/score.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "train/grpo_int.h"
#include "train/runlog.h"

void grpo_traj_deinit(struct grpo_traj *t)
{
    for (size_t i = 0; i < t->n_turns; i++) {
        free(t->turns[i].ids);
        free(t->turns[i].logp_engine);
        free(t->turns[i].logp_old);
        free(t->turns[i].logp_ref);
    }
    free(t->turns);
    free(t->answer);
    free(t->errmsg);
    json_decref(t->tool_use);
    memset(t, 0, sizeof *t);
}

/* Reads a JSON array of integers into *out (malloc'd); 0 when it is not one. */
static size_t ids_from_json(const json_t *a, int32_t **out, size_t extra)
{
    *out = NULL;
    if (!json_is_array(a))
        return 0;
    const size_t n = json_array_size(a);
    *out = af_xmalloc((n + extra + 1) * sizeof **out);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}

/* The trace sink of one solve: each planner call that carries token ids becomes a turn. A
 * retry of an unparsable reply is a call of its own, so it is a turn too. */
static void collect(void *user, const json_t *rec)
{
    struct grpo_traj *t = user;
    const char *type = json_string_value(json_object_get(rec, "type"));
    const char *module = json_string_value(json_object_get(rec, "module"));
    if (!type || strcmp(type, "llm") || !module || strcmp(module, "planner"))
        return;
    const json_t *pid = json_object_get(rec, "prompt_ids"),
                 *rid = json_object_get(rec, "response_ids"),
                 *lp = json_object_get(rec, "logprobs");
    if (!json_is_array(pid) || !json_is_array(rid) || !json_is_array(lp) ||
        json_array_size(rid) == 0 || json_array_size(lp) != json_array_size(rid) ||
        json_array_size(pid) == 0)
        return;
    if (t->n_turns == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4;
        t->turns = af_xrealloc(t->turns, t->cap * sizeof *t->turns);
    }
    struct grpo_turn *u = &t->turns[t->n_turns];
    memset(u, 0, sizeof *u);
    u->n_prompt = (int64_t)ids_from_json(pid, &u->ids, json_array_size(rid));
    u->n_resp = (int64_t)json_array_size(rid);
    for (int64_t i = 0; i < u->n_resp; i++)
        u->ids[u->n_prompt + i] = (int32_t)json_integer_value(json_array_get(rid, (size_t)i));
    u->logp_engine = af_xmalloc((size_t)u->n_resp * sizeof *u->logp_engine);
    for (int64_t i = 0; i < u->n_resp; i++)
        u->logp_engine[i] = (float)json_number_value(json_array_get(lp, (size_t)i));
    u->turn = (int)t->n_turns;
    t->n_turns++;
}

static const char *item_query(const json_t *item)
{
    const char *q = json_string_value(json_object_get(item, "question"));
    return q ? q : json_string_value(json_object_get(item, "query"));
}

struct pool {
    const struct grpo_rollout_req *r;
    struct grpo_traj *trajs;
    int64_t total;
    atomic_llong next, done;
    pthread_mutex_t mu;
    int rc;
    char err[1024];
};

static int score(const struct grpo_rollout_req *r, const json_t *item, struct grpo_traj *t,
                 char *err, size_t errlen)
{
    if (r->reward)
        return r->reward(r->reward_user, item, t->answer, &t->reward, &t->correct, err, errlen);
    struct af_score s;
    const char *bench = json_string_value(json_object_get(item, "bench"));
    int rc = af_score_item(bench, item, t->answer ? t->answer : "", &s, err, errlen);
    if (rc)
        return rc;
    t->correct = s.correct;
    t->reward = r->reward_f1 ? s.f1 : (double)s.correct;
    af_score_deinit(&s);
    return AF_OK;
}

static void tool_use(struct grpo_traj *t, const json_t *memory)
{
    t->tool_use = json_object();
    size_t i;
    const json_t *m;
    json_array_foreach(memory, i, m)
    {
        const char *tool = json_string_value(json_object_get(m, "tool"));
        if (tool && *tool) {
            json_t *c = json_object_get(t->tool_use, tool);
            json_object_set_new(t->tool_use, tool, json_integer(c ? json_integer_value(c) + 1 : 1));
        }
        t->failed_steps += json_is_true(json_object_get(m, "failed"));
    }
}

static int one(struct pool *p, int64_t k, char *err, size_t errlen)
{
    const struct grpo_rollout_req *r = p->r;
    struct grpo_traj *t = &p->trajs[k];
    t->item = r->items[k / r->group];
    t->sample = k % r->group;
    const json_t *item = json_array_get(r->data, (size_t)t->item);
    struct af_flow_params fp = *r->flow;
    struct af_sampling *s = &fp.slots[AF_SLOT_PLANNER].sampling;
    s->has_seed = 1;
    s->seed = (int64_t)(train_mix(train_mix(r->seed, (uint64_t)r->step),
                                  ((uint64_t)t->item << 20) ^ (uint64_t)t->sample) >>
                        1);
    struct af_trace *tr = af_trace_new_fn(collect, t);
    fp.trace = tr;
    fp.on_step = NULL;
    char id[96];
    snprintf(id, sizeof id, "s%lld-q%lld-g%lld", (long long)r->step, (long long)t->item,
             (long long)t->sample);
    const double t0 = af_clock_ms();
    struct af_flow_result res;
    t->solve_err = af_flow_solve(&fp, id, item_query(item), &res);
    t->ms = af_clock_ms() - t0;
    af_trace_close(tr);
    t->answer = res.answer ? af_xstrdup(res.answer) : NULL;
    t->errmsg = res.errmsg ? af_xstrdup(res.errmsg) : NULL;
    t->steps = res.steps;
    tool_use(t, res.memory);
    const char *mod;
    json_t *u;
    json_object_foreach(res.usage, mod, u)
    {
        const json_int_t c = json_integer_value(json_object_get(u, "completion_tokens"));
        t->gen_tokens += c > 0 ? c : 0;
    }
    af_flow_result_deinit(&res);
    return score(r, item, t, err, errlen);
}

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        const int64_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->total)
            break;
        pthread_mutex_lock(&p->mu);
        const int stop = p->rc != AF_OK;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        char err[1024] = "";
        int rc = one(p, k, err, sizeof err);
        const int64_t done = atomic_fetch_add(&p->done, 1) + 1;
        pthread_mutex_lock(&p->mu);
        if (rc && p->rc == AF_OK) {
            p->rc = rc;
            snprintf(p->err, sizeof p->err, "%s", err);
        }
        if (p->r->on_done)
            p->r->on_done(p->r->user, done, p->total);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

int grpo_rollouts(const struct grpo_rollout_req *r, struct grpo_traj **out, char *err,
                  size_t errlen)
{
    struct pool p;
    memset(&p, 0, sizeof p);
    p.r = r;
    p.total = r->n_items * r->group;
    p.trajs = af_xcalloc((size_t)(p.total ? p.total : 1), sizeof *p.trajs);
    atomic_init(&p.next, 0);
    atomic_init(&p.done, 0);
    pthread_mutex_init(&p.mu, NULL);
    int nw = r->concurrency > 0 ? r->concurrency : 1;
    if (nw > p.total)
        nw = (int)(p.total > 0 ? p.total : 1);
    pthread_t *th = af_xcalloc((size_t)nw, sizeof *th);
    int started = 0;
    for (int i = 0; i < nw; i++)
        if (pthread_create(&th[i], NULL, worker, &p) == 0)
            started++;
        else
            break;
    if (started == 0)
        worker(&p); /* no thread could start: run them here */
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    pthread_mutex_destroy(&p.mu);
    *out = p.trajs;
    if (p.rc) {
        af_errf(err, errlen, "%s", p.err);
        return p.rc;
    }
    return AF_OK;
}
