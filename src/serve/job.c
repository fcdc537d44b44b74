/*
 * job.c - one flow run for the server: its events, its cancel switch, and the bounded pool of
 * worker threads that runs jobs in arrival order (see serve_int.h).
 *
 * Cancelling works through the back-ends: each job wraps every slot's back-end in a small
 * decorator that fails at once when the job is cancelled, so the flow stops at its next LLM
 * call (a generation already running, or a tool call, finishes first).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/clock.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

void serve_random_hex(char *out)
{
    unsigned char b[8];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        /* Ids need only be unique, not secret: fall back on the clock. */
        uint64_t t = (uint64_t)(af_clock_ms() * 1000.0) ^ (uint64_t)time(NULL) << 20;
        memcpy(b, &t, sizeof b);
    }
    for (int i = 0; i < 8; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static double now_unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void job_spec_deinit(struct job_spec *s)
{
    free(s->query);
    free(s->title);
    af_tool_registry_free(s->tools);
    json_decref(s->options);
    memset(s, 0, sizeof *s);
}

struct job *job_new(struct af_serve *s, enum job_kind kind, struct job_spec *spec)
{
    struct job *j = af_xcalloc(1, sizeof *j);
    char hex[17];
    serve_random_hex(hex);
    snprintf(j->id, sizeof j->id, "%s%s", kind == JOB_RUN ? "run_" : "chatcmpl-", hex);
    j->kind = kind;
    j->srv = s;
    j->spec = *spec;
    memset(spec, 0, sizeof *spec);
    j->created_unix = now_unix();
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->state = JOB_QUEUED;
    j->events = json_array();
    return j;
}

void job_ref(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void job_unref(struct job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    job_spec_deinit(&j->spec);
    json_decref(j->events);
    if (j->has_res)
        af_flow_result_deinit(&j->res);
    free(j->cancel_reason);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void job_cancel(struct job *j, const char *reason)
{
    pthread_mutex_lock(&j->mu);
    if (!j->cancel) {
        atomic_store(&j->cancel, 1);
        j->cancel_reason = af_xstrdup(reason);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static int is_final(enum job_state st)
{
    return st == JOB_DONE || st == JOB_FAILED || st == JOB_CANCELLED;
}

int job_finished(struct job *j)
{
    pthread_mutex_lock(&j->mu);
    int f = is_final(j->state);
    pthread_mutex_unlock(&j->mu);
    return f;
}

json_t *job_next_event(struct job *j, size_t cursor, double timeout_ms, int *finished)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    long ns = dl.tv_nsec + (long)(timeout_ms * 1e6);
    dl.tv_sec += ns / 1000000000L;
    dl.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&j->mu);
    while (cursor >= json_array_size(j->events) && !is_final(j->state))
        if (pthread_cond_timedwait(&j->cv, &j->mu, &dl) != 0)
            break;
    json_t *ev = json_incref(json_array_get(j->events, cursor));
    *finished = !ev && is_final(j->state);
    pthread_mutex_unlock(&j->mu);
    return ev;
}

/* Sums {module: {prompt_tokens, completion_tokens}} (unknown counts are -1 and skipped). */
json_t *job_usage_json(struct job *j)
{
    json_int_t p = 0, c = 0;
    const char *mod;
    json_t *u;
    json_t *usage = j->has_res ? j->res.usage : NULL;
    json_object_foreach(usage, mod, u)
    {
        json_int_t pt = json_integer_value(json_object_get(u, "prompt_tokens"));
        json_int_t ct = json_integer_value(json_object_get(u, "completion_tokens"));
        p += pt > 0 ? pt : 0;
        c += ct > 0 ? ct : 0;
    }
    return json_pack("{s:I,s:I,s:I}", "prompt_tokens", p, "completion_tokens", c, "total_tokens",
                     p + c);
}

/* Appends an event (taking it over), stores it for runs and wakes the readers. */
static void job_emit(struct job *j, json_t *ev)
{
    pthread_mutex_lock(&j->mu);
    size_t seq = json_array_size(j->events);
    json_array_append(j->events, ev);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (j->kind == JOB_RUN)
        (void)store_event(j->srv->store, j->id, seq, ev);
    json_decref(ev);
}

/* --- the cancel decorator ------------------------------------------------------------- */
struct cancel_llm {
    struct af_llm *inner; /* borrowed */
    struct job *job;      /* borrowed; outlives the decorator */
};

static int cancel_chat(void *self, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct cancel_llm *c = self;
    if (atomic_load(&c->job->cancel)) {
        reply->errmsg = af_xstrdup("the request was cancelled");
        return AF_EBACKEND;
    }
    return af_llm_chat(c->inner, req, reply);
}

static const char *cancel_describe(void *self)
{
    return af_llm_describe(((struct cancel_llm *)self)->inner);
}

static const struct af_llm_ops cancel_ops = {
    .kind = "cancel", .chat = cancel_chat, .free = free, .describe = cancel_describe};

/* --- what the flow reports ------------------------------------------------------------ */
static void job_on_trace(void *user, const json_t *rec)
{
    struct job *j = user;
    struct af_trace *outer = j->srv->p.flow->trace;
    if (outer)
        (void)af_trace_write(outer, rec);
    if (j->kind == JOB_RUN)
        (void)store_trace(j->srv->store, j->id, j->n_trace++, rec);
    const char *type = af_json_get_str(rec, "type");
    if (type && strcmp(type, "llm") == 0) {
        const json_t *u = json_object_get(rec, "usage");
        json_int_t pt = json_integer_value(json_object_get(u, "prompt_tokens"));
        json_int_t ct = json_integer_value(json_object_get(u, "completion_tokens"));
        const char *module = af_json_get_str(rec, "module");
        metrics_llm(j->srv->metrics, module ? module : "unknown", pt, ct);
        const char *resp = af_json_get_str(rec, "response");
        if (module && strcmp(module, "query_analysis") == 0) {
            if (resp)
                job_emit(j, json_pack("{s:s,s:o}", "type", "query_analysis", "text",
                                      af_json_text(resp)));
        } else {
            j->step_prompt += pt > 0 ? pt : 0;
            j->step_completion += ct > 0 ? ct : 0;
            j->step_calls++;
        }
    } else if (type && strcmp(type, "tool") == 0) {
        const char *tool = af_json_get_str(rec, "tool");
        metrics_tool(j->srv->metrics, tool ? tool : "unknown",
                     !json_is_null(json_object_get(rec, "error")));
    }
}

static void job_on_step(void *user, const struct af_flow_step_info *s)
{
    struct job *j = user;
    json_t *ev = json_object();
    json_object_set_new(ev, "type", json_string("step"));
    json_object_set_new(ev, "step", json_integer(s->step));
    json_object_set_new(ev, "sub_goal", af_json_text(s->sub_goal));
    json_object_set_new(ev, "tool", af_json_text(s->tool));
    json_object_set_new(ev, "command", af_json_text(s->command));
    json_object_set_new(ev, "result", s->result ? json_deep_copy(s->result) : json_null());
    json_object_set_new(ev, "verdict", af_json_text(s->verdict));
    json_object_set_new(ev, "failed", json_boolean(s->failed));
    json_object_set_new(ev, "step_ms", json_real(s->step_ms));
    json_object_set_new(ev, "elapsed_ms", json_real(s->elapsed_ms));
    json_object_set_new(ev, "llm_calls", json_integer(j->step_calls));
    json_object_set_new(ev, "tokens",
                        json_pack("{s:I,s:I}", "prompt", (json_int_t)j->step_prompt, "completion",
                                  (json_int_t)j->step_completion));
    j->step_prompt = j->step_completion = 0;
    j->step_calls = 0;
    job_emit(j, ev);
}

/* The closing event and state of a job whose solve returned rc. */
static void job_finish(struct job *j, int rc)
{
    json_t *ev;
    enum job_state st;
    pthread_mutex_lock(&j->mu);
    int cancelled = atomic_load(&j->cancel);
    char *why = af_xstrdup(j->cancel_reason ? j->cancel_reason : "cancelled");
    pthread_mutex_unlock(&j->mu);
    if (cancelled) {
        st = JOB_CANCELLED;
        ev = json_pack("{s:s,s:o}", "type", "cancelled", "message", af_json_text(why));
    } else if (rc != AF_OK) {
        st = JOB_FAILED;
        ev = json_pack("{s:s,s:o}", "type", "error", "message",
                       af_json_text(j->res.errmsg ? j->res.errmsg : af_strerror(rc)));
    } else {
        st = JOB_DONE;
        ev = json_object();
        json_object_set_new(ev, "type", json_string("answer"));
        json_object_set_new(ev, "answer", af_json_text(j->res.answer));
        json_object_set_new(ev, "direct_output", af_json_text(j->res.direct_output));
        json_object_set_new(ev, "query_analysis", af_json_text(j->res.query_analysis));
        json_object_set_new(ev, "steps", json_integer(j->res.steps));
        json_object_set_new(ev, "usage", job_usage_json(j));
        json_object_set_new(ev, "time_ms", json_real(j->solve_ms));
    }
    job_emit(j, ev); /* stored before the run's state says it ended */
    if (j->kind == JOB_RUN) {
        json_t *res = af_flow_result_json(&j->res);
        (void)store_run_finish(j->srv->store, j->id,
                               st == JOB_DONE     ? "done"
                               : st == JOB_FAILED ? "failed"
                                                  : "cancelled",
                               j->res.answer, res,
                               st == JOB_DONE        ? NULL
                               : st == JOB_CANCELLED ? why
                                                     : j->res.errmsg,
                               now_unix());
        json_decref(res);
    }
    metrics_flow(j->srv->metrics,
                 st == JOB_DONE     ? "ok"
                 : st == JOB_FAILED ? "error"
                                    : "cancelled",
                 j->solve_ms / 1000.0);
    pthread_mutex_lock(&j->mu);
    j->state = st;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(why);
}

/* Runs the flow of j on this thread with its own copy of the template. */
static void job_run(struct job *j)
{
    const struct af_flow_params *tpl = j->srv->p.flow;
    struct af_flow_params p = *tpl;
    struct af_llm *wraps[AF_N_SLOTS] = {0};
    for (int i = 0; i < AF_N_SLOTS; i++) {
        if (!tpl->slots[i].llm)
            continue;
        struct cancel_llm *c = af_xcalloc(1, sizeof *c);
        c->inner = tpl->slots[i].llm;
        c->job = j;
        wraps[i] = af_llm_new_custom(&cancel_ops, c);
        p.slots[i].llm = wraps[i];
    }
    if (j->spec.max_steps > 0)
        p.max_steps = j->spec.max_steps;
    if (j->spec.max_time_s > 0)
        p.max_time_s = j->spec.max_time_s;
    if (j->spec.tools)
        p.tools = j->spec.tools;
    struct af_trace *sink = af_trace_new_fn(job_on_trace, j);
    p.trace = sink;
    p.on_step = job_on_step;
    p.user = j;
    if (j->kind == JOB_RUN)
        (void)store_run_state(j->srv->store, j->id, "running");
    double t0 = af_clock_ms();
    int rc = af_flow_solve(&p, j->id, j->spec.query, &j->res);
    j->solve_ms = af_clock_ms() - t0;
    j->has_res = 1;
    af_trace_close(sink);
    for (int i = 0; i < AF_N_SLOTS; i++)
        af_llm_free(wraps[i]);
    job_finish(j, rc);
}

/* --- the pool ------------------------------------------------------------------------- */
struct worker_arg {
    struct af_serve *srv;
    int slot;
};

static void *worker_main(void *arg)
{
    struct worker_arg *wa = arg;
    struct pool *pl = &wa->srv->pool;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->head && !pl->stopping)
            pthread_cond_wait(&pl->cv_work, &pl->mu);
        if (!pl->head)
            break;
        struct job *j = pl->head;
        pl->head = j->next;
        if (!pl->head)
            pl->tail = NULL;
        pl->n_queued--;
        pl->n_running++;
        pl->running[wa->slot] = j;
        pthread_mutex_unlock(&pl->mu);
        pthread_mutex_lock(&j->mu);
        j->state = JOB_RUNNING;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        job_run(j);
        pthread_mutex_lock(&pl->mu);
        pl->running[wa->slot] = NULL;
        pl->n_running--;
        pthread_mutex_lock(&j->mu);
        enum job_state st = j->state;
        pthread_mutex_unlock(&j->mu);
        if (st == JOB_DONE)
            pl->completed++;
        else if (st == JOB_CANCELLED)
            pl->cancelled++;
        else
            pl->failed++;
        pthread_cond_broadcast(&pl->cv_idle);
        pthread_mutex_unlock(&pl->mu);
        if (j->kind == JOB_RUN)
            serve_live_remove(wa->srv, j);
        job_unref(j);
        pthread_mutex_lock(&pl->mu);
    }
    pthread_mutex_unlock(&pl->mu);
    free(wa);
    return NULL;
}

int pool_init(struct af_serve *s, int n_threads, int max_queue)
{
    struct pool *pl = &s->pool;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->cv_work, NULL);
    pthread_cond_init(&pl->cv_idle, NULL);
    pl->max_queue = max_queue;
    pl->threads = af_xcalloc((size_t)n_threads, sizeof *pl->threads);
    pl->running = af_xcalloc((size_t)n_threads, sizeof *pl->running);
    for (int i = 0; i < n_threads; i++) {
        struct worker_arg *wa = af_xcalloc(1, sizeof *wa);
        wa->srv = s;
        wa->slot = i;
        if (pthread_create(&pl->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            return AF_EIO;
        }
        pl->n_threads++;
    }
    return AF_OK;
}

int pool_submit(struct af_serve *s, struct job *j)
{
    struct pool *pl = &s->pool;
    pthread_mutex_lock(&pl->mu);
    int rc = AF_OK;
    if (pl->stopping || atomic_load(&s->stopping))
        rc = AF_EINVAL;
    else if (pl->n_running + pl->n_queued >= pl->n_threads + pl->max_queue)
        rc = AF_ETOOBIG;
    if (rc == AF_ETOOBIG)
        pl->rejected++;
    if (rc == AF_OK) {
        job_ref(j);
        j->next = NULL;
        if (pl->tail)
            pl->tail->next = j;
        else
            pl->head = j;
        pl->tail = j;
        pl->n_queued++;
        pthread_cond_signal(&pl->cv_work);
    }
    pthread_mutex_unlock(&pl->mu);
    return rc;
}

/* Finishes a job that never ran (dropped from the queue at shutdown). */
static void job_drop(struct af_serve *s, struct job *j)
{
    job_cancel(j, "the server is shutting down");
    j->has_res = 1; /* an empty result: memset by af_flow_solve's contract is not run here */
    memset(&j->res, 0, sizeof j->res);
    job_finish(j, AF_EINVAL);
    if (j->kind == JOB_RUN)
        serve_live_remove(s, j);
    job_unref(j);
}

void pool_stop(struct af_serve *s, double grace_s)
{
    struct pool *pl = &s->pool;
    pthread_mutex_lock(&pl->mu);
    pl->stopping = 1;
    struct job *q = pl->head;
    pl->head = pl->tail = NULL;
    pl->cancelled += (uint64_t)pl->n_queued;
    pl->n_queued = 0;
    pthread_cond_broadcast(&pl->cv_work);
    pthread_mutex_unlock(&pl->mu);
    while (q) {
        struct job *next = q->next;
        job_drop(s, q);
        q = next;
    }
    double deadline = af_clock_ms() + grace_s * 1000.0;
    pthread_mutex_lock(&pl->mu);
    while (pl->n_running > 0 && af_clock_ms() < deadline) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_nsec += 50 * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&pl->cv_idle, &pl->mu, &dl);
    }
    for (int i = 0; i < pl->n_threads; i++)
        if (pl->running[i])
            job_cancel(pl->running[i], "the server is shutting down");
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->n_threads; i++)
        pthread_join(pl->threads[i], NULL);
    pl->n_threads = 0;
}

void pool_deinit(struct af_serve *s)
{
    struct pool *pl = &s->pool;
    free(pl->threads);
    free(pl->running);
    pthread_cond_destroy(&pl->cv_work);
    pthread_cond_destroy(&pl->cv_idle);
    pthread_mutex_destroy(&pl->mu);
}
