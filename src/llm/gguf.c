/*
 * gguf.c - the in-process engine as a chat back-end (`gguf:PATH`, or `gguf:PATH+lora:DIR` for
 * the model with a PEFT LoRA adapter). Handles that name the same file and the same adapter
 * share one loaded engine (a process-wide list with reference counts), so every slot of a flow
 * can point at one model without loading it twice; the same file with and without an adapter
 * (or with two adapters) gives separate engines, so no KV is shared between them. The engine
 * serialises calls.
 *
 * Each reply carries the prompt ids, the response ids and their log-probabilities, which the
 * trainer needs exactly as sampled.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/engine.h"
#include "agentflow/llm.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"

struct shared_engine {
    char *path;
    char *lora_dir; /* NULL = no adapter */
    char *spec;     /* "PATH" or "PATH+lora:DIR", for messages */
    struct af_engine *e;
    int refs;
    struct shared_engine *next;
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared_engine *shared_list;

struct gguf_llm {
    struct shared_engine *se; /* NULL for a borrowed engine (af_llm_engine_new) */
    struct af_engine *e;
    char *spec; /* for messages */
    char *describe;
};

static int same_key(const struct shared_engine *s, const char *path, const char *lora_dir)
{
    return !strcmp(s->path, path) &&
           !strcmp(s->lora_dir ? s->lora_dir : "", lora_dir ? lora_dir : "");
}

static struct shared_engine *shared_get(const char *path, const char *lora_dir, const char *spec,
                                        const struct af_engine_params *p, char *err, size_t errlen)
{
    pthread_mutex_lock(&shared_mu);
    struct shared_engine *s = shared_list;
    while (s && !same_key(s, path, lora_dir))
        s = s->next;
    if (s) {
        s->refs++;
    } else {
        struct af_engine *e = NULL;
        struct af_engine_params ep = p ? *p : af_engine_default_params();
        ep.lora_dir = lora_dir;
        if (af_engine_load(path, &ep, &e, err, errlen) == AF_OK) {
            s = af_xcalloc(1, sizeof *s);
            s->path = af_xstrdup(path);
            s->lora_dir = lora_dir ? af_xstrdup(lora_dir) : NULL;
            s->spec = af_xstrdup(spec);
            s->e = e;
            s->refs = 1;
            s->next = shared_list;
            shared_list = s;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    return s;
}

static void shared_put(struct shared_engine *s)
{
    pthread_mutex_lock(&shared_mu);
    if (--s->refs == 0) {
        struct shared_engine **pp = &shared_list;
        while (*pp != s)
            pp = &(*pp)->next;
        *pp = s->next;
        af_engine_free(s->e);
        free(s->path);
        free(s->lora_dir);
        free(s->spec);
        free(s);
    }
    pthread_mutex_unlock(&shared_mu);
}

static void gguf_llm_free(void *self)
{
    struct gguf_llm *g = self;
    if (g->se)
        shared_put(g->se);
    free(g->spec);
    free(g->describe);
    free(g);
}

static const char *gguf_llm_describe(void *self)
{
    return ((struct gguf_llm *)self)->describe;
}

static struct af_engine_gen_params gen_params(const struct af_sampling *s)
{
    struct af_engine_gen_params p = af_engine_default_gen_params();
    p.temperature = (float)s->temperature;
    p.top_p = s->top_p > 0 ? (float)s->top_p : 1.0f;
    p.max_tokens = s->max_tokens > 0 ? s->max_tokens : 2048;
    p.frequency_penalty = (float)s->frequency_penalty;
    p.seed = s->has_seed ? (uint64_t)s->seed : 0;
    p.ignore_eos = s->ignore_eos != 0;
    p.n_stop = s->n_stop < AF_ENGINE_MAX_STOP ? s->n_stop : AF_ENGINE_MAX_STOP;
    for (size_t i = 0; i < p.n_stop; i++)
        p.stop[i] = s->stop[i];
    return p;
}

static int fail(struct af_llm_reply *reply, int rc, const char *path, const char *msg)
{
    char buf[1200];
    snprintf(buf, sizeof buf, "gguf:%s: %s", path, msg);
    reply->err = rc;
    reply->errmsg = af_xstrdup(buf);
    return rc;
}

struct deadline_watch {
    double deadline_ms;
    int fired; /* the generation was stopped by it */
};

/* on_token: stops the generation once the request's deadline has passed. */
static int past_deadline_cb(void *user, int32_t id, const char *piece, size_t len)
{
    (void)id;
    (void)piece;
    (void)len;
    struct deadline_watch *w = user;
    if (af_clock_ms() >= w->deadline_ms)
        w->fired = 1;
    return w->fired;
}

static int gguf_llm_chat(void *self, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct gguf_llm *g = self;
    struct af_engine *e = g->e;
    char err[1024] = "";
    if (req->deadline_ms > 0 && af_clock_ms() >= req->deadline_ms)
        return fail(reply, AF_ETIMEOUT, g->spec, "not started: the caller's deadline has passed");
    struct af_engine_msg *msgs = af_xcalloc(req->n_msgs ? req->n_msgs : 1, sizeof *msgs);
    for (size_t i = 0; i < req->n_msgs; i++) {
        msgs[i].role = req->msgs[i].role;
        msgs[i].content = req->msgs[i].content;
    }
    char *prompt = NULL;
    int rc = af_engine_chat_prompt(e, msgs, req->n_msgs, &prompt, err, sizeof err);
    free(msgs);
    if (rc)
        return fail(reply, rc, g->spec, err);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    rc = af_engine_tokenize(e, prompt, 0, 1, &ids, &n_ids, err, sizeof err);
    free(prompt);
    if (rc)
        return fail(reply, rc, g->spec, err);
    struct af_engine_gen_params p = gen_params(&req->sampling);
    struct deadline_watch watch = {req->deadline_ms, 0};
    if (watch.deadline_ms > 0) {
        p.on_token = past_deadline_cb;
        p.user = &watch;
    }
    struct af_engine_result res;
    rc = af_engine_generate(e, ids, n_ids, &p, &res, err, sizeof err);
    if (rc == AF_OK && watch.fired) {
        snprintf(err, sizeof err, "generation cut off at the caller's deadline");
        rc = AF_ETIMEOUT;
    }
    if (rc) {
        free(ids);
        af_engine_result_deinit(&res);
        return fail(reply, rc == AF_ETIMEOUT ? rc : AF_EBACKEND, g->spec, err);
    }
    reply->text = res.text;
    res.text = NULL;
    reply->model = af_xstrdup(g->spec);
    reply->finish_reason = af_xstrdup(res.finish_reason ? res.finish_reason : "stop");
    reply->prompt_tokens = (int64_t)n_ids;
    reply->completion_tokens = (int64_t)res.n_ids;
    reply->cached_tokens = (int64_t)res.n_cached;
    if (res.drafting) {
        reply->draft_tokens = (int64_t)res.n_drafted;
        reply->draft_accepted = (int64_t)res.n_draft_kept;
    }
    reply->n_attempts = 1;
    reply->prompt_ids = ids;
    reply->n_prompt_ids = n_ids;
    reply->response_ids = res.ids;
    reply->response_logprobs = res.logprobs;
    reply->n_response_ids = res.n_ids;
    res.ids = NULL;
    res.logprobs = NULL;
    af_engine_result_deinit(&res);
    return AF_OK;
}

static const struct af_llm_ops gguf_ops = {"gguf", gguf_llm_chat, gguf_llm_free, gguf_llm_describe};

/* Splits "PATH[+NAME:VALUE]" at the first '+' followed by a lower-case word and ':' (a plain
 * '+' stays part of the path). *path and *lora_dir are malloc'd (caller frees); *lora_dir is
 * NULL when there is no suffix. AF_EINVAL for an unknown NAME or an empty value. */
static int parse_spec(const char *spec, char **path, char **lora_dir, char *err, size_t errlen)
{
    *path = NULL;
    *lora_dir = NULL;
    const char *plus = spec;
    size_t word = 0;
    while ((plus = strchr(plus, '+')) != NULL) {
        word = 0;
        while (plus[1 + word] >= 'a' && plus[1 + word] <= 'z')
            word++;
        if (word && plus[1 + word] == ':')
            break;
        plus++;
    }
    if (!plus) {
        *path = af_xstrdup(spec);
        return AF_OK;
    }
    if (word != 4 || strncmp(plus + 1, "lora", 4)) {
        af_errf(err, errlen, "gguf:%s: unknown suffix '+%.*s:' (the one suffix is +lora:DIR)", spec,
                (int)word, plus + 1);
        return AF_EINVAL;
    }
    const char *dir = plus + 6;
    if (!*dir) {
        af_errf(err, errlen, "gguf:%s: +lora: needs the adapter folder (+lora:DIR)", spec);
        return AF_EINVAL;
    }
    if (plus == spec) {
        af_errf(err, errlen, "gguf:%s: the model path before +lora: is empty", spec);
        return AF_EINVAL;
    }
    *path = af_xmalloc((size_t)(plus - spec) + 1);
    memcpy(*path, spec, (size_t)(plus - spec));
    (*path)[plus - spec] = '\0';
    *lora_dir = af_xstrdup(dir);
    return AF_OK;
}

struct af_llm *af_llm_gguf_new(const char *spec, const struct af_engine_params *p, char *err,
                               size_t errlen)
{
    char *path = NULL, *lora_dir = NULL;
    if (parse_spec(spec, &path, &lora_dir, err, errlen))
        return NULL;
    if (!lora_dir && p && p->lora_dir && p->lora_dir[0])
        lora_dir = af_xstrdup(p->lora_dir);
    size_t n = strlen(path) + (lora_dir ? strlen(lora_dir) + 6 : 0) + 1;
    char *key = af_xmalloc(n);
    snprintf(key, n, "%s%s%s", path, lora_dir ? "+lora:" : "", lora_dir ? lora_dir : "");
    struct shared_engine *se = shared_get(path, lora_dir, key, p, err, errlen);
    free(path);
    free(lora_dir);
    free(key);
    if (!se)
        return NULL;
    struct gguf_llm *g = af_xcalloc(1, sizeof *g);
    g->se = se;
    g->e = se->e;
    g->spec = af_xstrdup(se->spec);
    n = strlen(se->spec) + 6;
    g->describe = af_xmalloc(n);
    snprintf(g->describe, n, "gguf:%s", se->spec);
    return af_llm_new_custom(&gguf_ops, g);
}

struct af_llm *af_llm_engine_new(struct af_engine *e, const char *name)
{
    struct gguf_llm *g = af_xcalloc(1, sizeof *g);
    g->e = e;
    g->spec = af_xstrdup(name ? name : af_engine_model_path(e));
    size_t n = strlen(g->spec) + 6;
    g->describe = af_xmalloc(n);
    snprintf(g->describe, n, "gguf:%s", g->spec);
    return af_llm_new_custom(&gguf_ops, g);
}
