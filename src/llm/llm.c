/*
 * llm.c - the back-end handle: dispatch to an implementation, reply lifecycle, defaults.
 */
#include "agentflow/llm.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/xalloc.h"

struct af_llm {
    const struct af_llm_ops *ops;
    void *self;
};

struct af_sampling af_llm_default_sampling(void)
{
    struct af_sampling s;
    memset(&s, 0, sizeof s);
    s.temperature = 0.0;
    s.top_p = 0.99;
    s.max_tokens = 2048;
    s.frequency_penalty = 0.0;
    return s;
}

void af_llm_reply_init(struct af_llm_reply *r)
{
    memset(r, 0, sizeof *r);
    r->prompt_tokens = -1;
    r->completion_tokens = -1;
    r->cached_tokens = -1;
    r->draft_tokens = -1;
    r->draft_accepted = -1;
}

void af_llm_reply_deinit(struct af_llm_reply *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->model);
    free(r->finish_reason);
    free(r->errmsg);
    free(r->prompt_ids);
    free(r->response_ids);
    free(r->response_logprobs);
    af_llm_reply_init(r);
}

struct af_llm *af_llm_new_custom(const struct af_llm_ops *ops, void *self)
{
    struct af_llm *llm = af_xcalloc(1, sizeof *llm);
    llm->ops = ops;
    llm->self = self;
    return llm;
}

void af_llm_free(struct af_llm *llm)
{
    if (!llm)
        return;
    if (llm->ops->free)
        llm->ops->free(llm->self);
    free(llm);
}

int af_llm_chat(struct af_llm *llm, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    double t0 = af_clock_ms();
    int rc = llm->ops->chat(llm->self, req, reply);
    if (reply->latency_ms <= 0)
        reply->latency_ms = af_clock_ms() - t0;
    reply->err = rc;
    if (rc != AF_OK && !reply->errmsg)
        reply->errmsg = af_xstrdup(af_strerror(rc));
    return rc;
}

const char *af_llm_kind(const struct af_llm *llm)
{
    return llm->ops->kind;
}

const char *af_llm_describe(const struct af_llm *llm)
{
    if (llm->ops->describe)
        return llm->ops->describe(llm->self);
    return llm->ops->kind;
}
