/*
 * request.c - the bodies of POST /v1/chat/completions and POST /v1/runs, checked and turned
 * into a job_spec, or into an OpenAI-style error. Nothing here touches the connection, so the
 * fuzz target (tests/fuzz/fuzz_serve_request.c) can drive it directly.
 *
 * Chat: the last user message is the query and the messages before it its context. Both take
 * max_steps, max_time and tools.
 *
 * `tools` may be a list of names, one comma-separated string, or OpenAI-style function
 * entries ({"type":"function","function":{"name":...}}); every name must be a tool of the
 * server. The chosen tools go into a registry of forwarding tools that borrow the server's, so
 * the server's registry is never copied or changed.
 */
#include <stdarg.h>
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

/* Builds spec->tools from the `tools` member. Returns 0, or fills e and returns -1. */
static int parse_tools(const struct af_tool_registry *all, const json_t *v, struct job_spec *spec,
                       struct serve_err *e)
{
    char why[512];
    json_t *names = json_array();
    int rc = tool_names(v, names, why, sizeof why);
    if (rc) {
        serve_err_set(e, 400, "invalid_request_error", "invalid_tools", "%s", why);
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
        serve_err_set(e, 400, "invalid_request_error", "unknown_tool",
                      "unknown tool '%.200s' (this server has: %s)", json_string_value(n),
                      af_buf_str(&known));
        af_buf_deinit(&known);
        json_decref(names);
        return -1;
    }
    json_object_set_new(spec->options, "tools", names);
    return 0;
}

/* max_steps, max_time and tools of body into spec. Returns 0, or fills e and returns -1. */
static int parse_options(const struct af_tool_registry *tools, const json_t *body,
                         struct job_spec *spec, struct serve_err *e)
{
    if (!spec->options)
        spec->options = json_object();
    const json_t *v = json_object_get(body, "max_steps");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000) {
            serve_err_set(e, 400, "invalid_request_error", "invalid_max_steps",
                          "'max_steps' must be an integer from 1 to 1000");
            return -1;
        }
        spec->max_steps = (int)json_integer_value(v);
        json_object_set_new(spec->options, "max_steps", json_integer(spec->max_steps));
    }
    v = json_object_get(body, "max_time");
    if (v && !json_is_null(v)) {
        double t = json_number_value(v);
        if (!json_is_number(v) || !(t > 0) || t > 1e7) {
            serve_err_set(e, 400, "invalid_request_error", "invalid_max_time",
                          "'max_time' must be a number of seconds above 0");
            return -1;
        }
        spec->max_time_s = t;
        json_object_set_new(spec->options, "max_time", json_real(t));
    }
    v = json_object_get(body, "tools");
    if (v && !json_is_null(v) && parse_tools(tools, v, spec, e))
        return -1;
    return 0;
}

/* The text of a message's content: a string, or the "text" parts of a list of parts. */
static int message_text(const json_t *m, struct af_buf *out)
{
    const json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        return af_buf_puts(out, json_string_value(c));
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part)
    {
        const char *t = af_json_get_str(part, "text");
        if (t && af_buf_puts(out, t) != AF_OK)
            return AF_ETOOBIG;
    }
    return AF_OK;
}

/* Builds spec->query (context + last user message) and spec->title from "messages". Returns 0,
 * or fills e and returns -1. */
static int build_query(const json_t *msgs, struct job_spec *spec, struct serve_err *e)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        serve_err_set(e, 400, "invalid_request_error", "invalid_messages",
                      "'messages' must be a non-empty list");
        return -1;
    }
    size_t last = SIZE_MAX, i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *role = af_json_get_str(m, "role");
        if (!json_is_object(m) || !role) {
            serve_err_set(e, 400, "invalid_request_error", "invalid_messages",
                          "'messages[%zu]' needs a 'role' string", i);
            return -1;
        }
        if (strcmp(role, "user") == 0)
            last = i;
    }
    struct af_buf q, ctx;
    af_buf_init(&q, AF_BUF_NOLIMIT);
    af_buf_init(&ctx, AF_BUF_NOLIMIT);
    if (last != SIZE_MAX)
        (void)message_text(json_array_get(msgs, last), &q);
    if (last == SIZE_MAX || !af_buf_str(&q)[strspn(af_buf_str(&q), " \t\r\n")]) {
        af_buf_deinit(&q);
        af_buf_deinit(&ctx);
        serve_err_set(e, 400, "invalid_request_error", "no_user_message",
                      "the request has no user message with text (the last one is "
                      "the question)");
        return -1;
    }
    for (i = 0; i < last; i++) {
        m = json_array_get(msgs, i);
        (void)af_buf_printf(&ctx, "%s: ", af_json_get_str(m, "role"));
        (void)message_text(m, &ctx);
        (void)af_buf_putc(&ctx, '\n');
    }
    spec->title = af_xstrdup(af_buf_str(&q));
    if (ctx.len) {
        struct af_buf full;
        af_buf_init(&full, AF_BUF_NOLIMIT);
        (void)af_buf_printf(&full, "Earlier in this conversation:\n%s\nThe question: %s",
                            af_buf_str(&ctx), af_buf_str(&q));
        spec->query = af_buf_detach(&full);
    } else {
        spec->query = af_buf_detach(&q);
    }
    af_buf_deinit(&q);
    af_buf_deinit(&ctx);
    return 0;
}

void serve_err_set(struct serve_err *e, unsigned status, const char *type, const char *code,
                   const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* The body as a JSON object, or NULL with e filled. */
static json_t *parse_object(const char *body, size_t len, struct serve_err *e)
{
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    if (json_is_object(root))
        return root;
    serve_err_set(e, 400, "invalid_request_error", "invalid_json",
                  "the body is not a JSON object%s%s", root ? "" : ": ", root ? "" : je.text);
    json_decref(root);
    return NULL;
}

/* The checks of a chat body already parsed. Returns 0, or fills e and returns -1. */
static int check_chat(const json_t *root, const char *served_name,
                      const struct af_tool_registry *tools, struct job_spec *spec,
                      struct serve_err *e)
{
    const char *model = af_json_get_str(root, "model");
    const json_t *mv = json_object_get(root, "model");
    if ((mv && !json_is_null(mv) && !model) || (model && strcmp(model, served_name) != 0)) {
        serve_err_set(e, 404, "invalid_request_error", "model_not_found",
                      "the model '%.200s' does not exist here; use '%s'",
                      model ? model : "(not a string)", served_name);
        return -1;
    }
    const json_t *st = json_object_get(root, "stream");
    if (st && !json_is_boolean(st) && !json_is_null(st)) {
        serve_err_set(e, 400, "invalid_request_error", "invalid_stream",
                      "'stream' must be true or false");
        return -1;
    }
    if (build_query(json_object_get(root, "messages"), spec, e))
        return -1;
    return parse_options(tools, root, spec, e);
}

int serve_parse_chat(const char *body, size_t len, const char *served_name,
                     const struct af_tool_registry *tools, struct job_spec *spec,
                     struct chat_opts *o, struct serve_err *e)
{
    memset(o, 0, sizeof *o);
    json_t *root = parse_object(body, len, e);
    if (!root)
        return -1;
    int rc = check_chat(root, served_name, tools, spec, e);
    if (rc == 0) {
        o->stream = json_is_true(json_object_get(root, "stream"));
        o->include_usage =
            json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
    }
    json_decref(root);
    return rc;
}

int serve_parse_run(const char *body, size_t len, const struct af_tool_registry *tools,
                    struct job_spec *spec, struct serve_err *e)
{
    json_t *root = parse_object(body, len, e);
    if (!root)
        return -1;
    const char *q = af_json_get_str(root, "query");
    int rc = -1;
    if (!q || !q[strspn(q, " \t\r\n")])
        serve_err_set(e, 400, "invalid_request_error", "no_query",
                      "the body needs a non-empty 'query' string");
    else
        rc = parse_options(tools, root, spec, e);
    if (rc == 0) {
        spec->query = af_xstrdup(q);
        spec->title = af_xstrdup(q);
    }
    json_decref(root);
    return rc;
}
