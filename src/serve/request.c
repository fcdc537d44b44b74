/*
 * request.c - the per-request flow options shared by chat completions and runs: max_steps,
 * max_time and tools, checked and turned into a job_spec.
 *
 * `tools` may be a list of names, one comma-separated string, or OpenAI-style function
 * entries ({"type":"function","function":{"name":...}}); every name must be a tool of the
 * server. The chosen tools go into a registry of forwarding tools that borrow the server's, so
 * the server's registry is never copied or changed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

#define MAX_TOOL_NAMES 64

static int forward_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                        json_t **result)
{
    return af_tool_call(self, args, ctx, result);
}

/* Adds the server's tool `name` to sub (a forwarding tool). Returns AF_ENOTFOUND when the
 * server has no such tool. */
static int add_tool(const struct af_tool_registry *all, struct af_tool_registry *sub,
                    const char *name)
{
    struct af_tool *t = af_tool_registry_find(all, name);
    if (!t)
        return AF_ENOTFOUND;
    if (af_tool_registry_find(sub, af_tool_card(t)->name))
        return AF_OK;
    return af_tool_registry_add(sub, af_tool_new(af_tool_card(t), forward_call, t, NULL));
}

/* The comma-separated names of the server's tools, into out. */
static void list_tools(const struct af_tool_registry *all, struct af_buf *out)
{
    size_t n = all ? af_tool_registry_count(all) : 0;
    for (size_t i = 0; i < n; i++)
        (void)af_buf_printf(out, "%s%s", i ? ", " : "",
                            af_tool_card(af_tool_registry_at(all, i))->name);
    if (n == 0)
        (void)af_buf_puts(out, "(none)");
}

static int too_many(char *why, size_t whylen)
{
    snprintf(why, whylen, "'tools' lists more than %d names", MAX_TOOL_NAMES);
    return -1;
}

/* Collects tool names from the `tools` member into names (a JSON array of strings). Returns
 * 0, or -1 with a message in why when the member has the wrong shape. */
static int tool_names(const json_t *v, json_t *names, char *why, size_t whylen)
{
    if (json_is_string(v)) {
        const char *p = json_string_value(v);
        while (*p) {
            size_t len = strcspn(p, ",");
            const char *a = p, *b = p + len;
            while (a < b && (*a == ' ' || *a == '\t'))
                a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
                b--;
            if (b > a)
                json_array_append_new(names, af_json_textn(a, (size_t)(b - a)));
            p += len + (p[len] == ',');
        }
        return json_array_size(names) > MAX_TOOL_NAMES ? too_many(why, whylen) : 0;
    }
    if (!json_is_array(v)) {
        snprintf(why, whylen, "'tools' must be a list of tool names or a comma-separated string");
        return -1;
    }
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        const char *name = json_string_value(e);
        if (!name)
            name = af_json_get_str(json_object_get(e, "function"), "name");
        if (!name) {
            snprintf(why, whylen, "'tools[%zu]' must be a tool name or {\"function\":{\"name\"}}",
                     i);
            return -1;
        }
        json_array_append_new(names, af_json_text(name));
    }
    return json_array_size(names) > MAX_TOOL_NAMES ? too_many(why, whylen) : 0;
}

/* Builds spec->tools from the `tools` member. Returns 0, or queues a 400 and returns -1. */
static int parse_tools(struct req *rq, const json_t *v, struct job_spec *spec, enum MHD_Result *ret)
{
    char why[512];
    json_t *names = json_array();
    const struct af_tool_registry *all = rq->s->p.flow->tools;
    int rc = tool_names(v, names, why, sizeof why);
    if (rc) {
        *ret = serve_reply_error(rq, 400, "invalid_request_error", "invalid_tools", "%s", why);
        json_decref(names);
        return -1;
    }
    spec->tools = af_tool_registry_new();
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
    {
        if (all && add_tool(all, spec->tools, json_string_value(n)) == AF_OK)
            continue;
        struct af_buf known;
        af_buf_init(&known, AF_BUF_NOLIMIT);
        list_tools(all, &known);
        *ret = serve_reply_error(rq, 400, "invalid_request_error", "unknown_tool",
                                 "unknown tool '%.200s' (this server has: %s)",
                                 json_string_value(n), af_buf_str(&known));
        af_buf_deinit(&known);
        json_decref(names);
        return -1;
    }
    json_object_set_new(spec->options, "tools", names);
    return 0;
}

int serve_parse_options(struct req *rq, const json_t *body, struct job_spec *spec,
                        enum MHD_Result *ret)
{
    if (!spec->options)
        spec->options = json_object();
    const json_t *v = json_object_get(body, "max_steps");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000) {
            *ret = serve_reply_error(rq, 400, "invalid_request_error", "invalid_max_steps",
                                     "'max_steps' must be an integer from 1 to 1000");
            return 0;
        }
        spec->max_steps = (int)json_integer_value(v);
        json_object_set_new(spec->options, "max_steps", json_integer(spec->max_steps));
    }
    v = json_object_get(body, "max_time");
    if (v && !json_is_null(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t > 0) || t > 1e7) {
            *ret = serve_reply_error(rq, 400, "invalid_request_error", "invalid_max_time",
                                     "'max_time' must be a number of seconds above 0");
            return 0;
        }
        spec->max_time_s = t;
        json_object_set_new(spec->options, "max_time", json_real(t));
    }
    v = json_object_get(body, "tools");
    if (v && !json_is_null(v) && parse_tools(rq, v, spec, ret))
        return 0;
    return 1;
}
