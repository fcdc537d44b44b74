/*
 * base_generator.c - Generalist_Solution_Generator_Tool: one LLM call that answers a query
 * step by step. The query goes in as the user message, unchanged.
 */
#include "agentflow/tools.h"

#include <stdio.h>
#include <string.h>

#include "core/xalloc.h"

static const struct af_tool_card card = {
    .name = "Generalist_Solution_Generator_Tool",
    .description = "A general-purpose language model that reasons about a query step by step and "
                   "answers it. Good for explanations, summaries, rewriting and reasoning over "
                   "information already in hand.",
    .version = "1.0.0",
    .n_params = 1,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "The question or task, with every fact the answer needs."}},
    .output_type = "str - the model's answer",
    .limitations = "It cannot browse, search or run code, and may be wrong on precise facts, "
                   "recent events and long arithmetic.",
    .best_practices = "Give it a single, self-contained task with the needed context included; "
                      "check important facts with a search tool.",
    .n_demos = 1,
    .demo_commands = {"execution = tool.execute(query=\"Summarize the causes of the French "
                      "Revolution in three points.\")"},
    .demo_descriptions = {"Ask for a short structured explanation."},
    .requires_llm = 1,
};

static int base_generator_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                               json_t **result)
{
    (void)self;
    const char *query = json_string_value(json_object_get(args, "query"));
    if (!ctx || !ctx->llm) {
        *result =
            json_pack("{s:s}", "error", "Generalist_Solution_Generator_Tool has no LLM engine");
        return AF_EINVAL;
    }
    struct af_msg msg = {.role = "user", .content = query ? query : ""};
    struct af_llm_request req = {.msgs = &msg, .n_msgs = 1, .model = ctx->model};
    req.sampling = ctx->sampling ? *ctx->sampling : af_llm_default_sampling();
    struct af_llm_reply reply;
    af_llm_reply_init(&reply);
    int rc = af_tool_ctx_chat(ctx, &req, &reply);
    if (rc == AF_OK) {
        *result = json_string(reply.text ? reply.text : "");
    } else {
        char msgbuf[1024];
        snprintf(msgbuf, sizeof msgbuf, "LLM call failed: %s",
                 reply.errmsg ? reply.errmsg : af_strerror(rc));
        *result = json_pack("{s:s}", "error", msgbuf);
    }
    af_llm_reply_deinit(&reply);
    return rc == AF_OK ? AF_OK : AF_ETOOL;
}

struct af_tool *af_tool_base_generator_new(const json_t *opts)
{
    (void)opts;
    return af_tool_new(&card, base_generator_call, NULL, NULL);
}
