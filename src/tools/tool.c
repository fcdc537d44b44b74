/*
 * tool.c - the tool handle and the JSON rendering of a tool card.
 */
#include "agentflow/tools.h"

#include <stdlib.h>

#include "core/xalloc.h"

struct af_tool {
    const struct af_tool_card *card;
    af_tool_call_fn call;
    void *self;
    void (*free_self)(void *);
};

struct af_tool *af_tool_new(const struct af_tool_card *card, af_tool_call_fn call, void *self,
                            void (*free_self)(void *))
{
    struct af_tool *t = af_xcalloc(1, sizeof *t);
    t->card = card;
    t->call = call;
    t->self = self;
    t->free_self = free_self;
    return t;
}

void af_tool_free(struct af_tool *t)
{
    if (!t)
        return;
    if (t->free_self)
        t->free_self(t->self);
    free(t);
}

const struct af_tool_card *af_tool_card(const struct af_tool *t)
{
    return t->card;
}

int af_tool_call(struct af_tool *t, const json_t *args, const struct af_tool_ctx *ctx,
                 json_t **result)
{
    *result = NULL;
    int rc = t->call(t->self, args, ctx, result);
    if (!*result)
        *result = json_string(rc == AF_OK ? "" : af_strerror(rc));
    return rc;
}

int af_tool_ctx_chat(const struct af_tool_ctx *ctx, const struct af_llm_request *req,
                     struct af_llm_reply *reply)
{
    struct af_llm_request r = *req; /* the call ends by the tool's deadline too */
    if (ctx->deadline_ms > 0 && (r.deadline_ms <= 0 || ctx->deadline_ms < r.deadline_ms))
        r.deadline_ms = ctx->deadline_ms;
    int rc = af_llm_chat(ctx->llm, &r, reply);
    if (ctx->on_llm_call)
        ctx->on_llm_call(ctx->user, &r, reply);
    return rc;
}

static json_t *input_types_json(const struct af_tool_card *c)
{
    json_t *in = json_object();
    for (size_t i = 0; i < c->n_params; i++) {
        const struct af_tool_param *p = &c->params[i];
        json_t *d = json_object();
        json_object_set_new(d, "type", json_string(af_tool_param_type_name(p->type)));
        json_object_set_new(d, "required", json_boolean(p->required));
        if (p->default_json)
            json_object_set_new(d, "default", json_string(p->default_json));
        json_object_set_new(d, "description", json_string(p->description ? p->description : ""));
        json_object_set_new(in, p->name, d);
    }
    return in;
}

json_t *af_tool_card_json(const struct af_tool_card *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "tool_name", json_string(c->name));
    json_object_set_new(j, "tool_description", json_string(c->description ? c->description : ""));
    json_object_set_new(j, "tool_version", json_string(c->version ? c->version : "1.0"));
    json_object_set_new(j, "input_types", input_types_json(c));
    json_object_set_new(j, "output_type", json_string(c->output_type ? c->output_type : ""));
    json_t *demos = json_array();
    for (size_t i = 0; i < c->n_demos; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "command", json_string(c->demo_commands[i]));
        json_object_set_new(d, "description",
                            json_string(c->demo_descriptions[i] ? c->demo_descriptions[i] : ""));
        json_array_append_new(demos, d);
    }
    json_object_set_new(j, "demo_commands", demos);
    json_t *meta = json_object();
    if (c->limitations)
        json_object_set_new(meta, "limitations", json_string(c->limitations));
    if (c->best_practices)
        json_object_set_new(meta, "best_practices", json_string(c->best_practices));
    json_object_set_new(j, "user_metadata", meta);
    json_object_set_new(j, "require_llm_engine", json_boolean(c->requires_llm));
    return j;
}
