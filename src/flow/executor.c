/*
 * executor.c - parse, bind, validate and run the calls of one tool command.
 */
#include "flow/executor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "flow/pycall.h"

json_t *exec_truncate(json_t *v, size_t max_chars)
{
    if (!v || max_chars == 0)
        return v;
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        if (n <= max_chars)
            return v;
        const char *s = json_string_value(v);
        size_t cut = max_chars;
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
            cut--;
        char *t = af_xmalloc(cut + 4);
        memcpy(t, s, cut);
        memcpy(t + cut, "...", 4);
        json_string_set(v, t);
        free(t);
    } else if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            exec_truncate(json_array_get(v, i), max_chars);
    } else if (json_is_object(v)) {
        for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it))
            exec_truncate(json_object_iter_value(it), max_chars);
    }
    return v;
}

static json_t *error_text(const char *tool, const char *what)
{
    char buf[2048];
    snprintf(buf, sizeof buf, "Error calling %s: %s", tool, what);
    return af_json_text(buf);
}

/* What the model sees of a result (consumes res). Wall-clock figures differ on every run, so
 * in memory they would change every later prompt and defeat the response cache's replay; they
 * stay in the call record, which is what the trace writes. */
static json_t *model_view(json_t *res)
{
    static const char *const wall_clock_keys[] = {"duration_ms"};
    size_t n = sizeof wall_clock_keys / sizeof wall_clock_keys[0];
    json_t *v = res;
    if (!json_is_object(res))
        return res;
    for (size_t i = 0; i < n; i++) {
        if (!json_object_get(v, wall_clock_keys[i]))
            continue;
        if (v == res) {
            v = json_deep_copy(res);
            json_decref(res);
        }
        json_object_del(v, wall_clock_keys[i]);
    }
    return v;
}

static void run_one(struct af_tool *tool, const struct af_pycall *call,
                    const struct af_tool_ctx *ctx, size_t max_chars, struct exec_outcome *out)
{
    const struct af_tool_card *card = af_tool_card(tool);
    char err[1024];
    json_t *kwargs = NULL, *res = NULL;
    json_t *rec = json_object();
    double t0 = af_clock_ms();
    int rc = af_pycall_bind(call, card, &kwargs, err, sizeof err);
    if (rc != AF_OK) {
        res = error_text(card->name, err);
        json_object_set_new(rec, "error", af_json_text(err));
        out->n_failed++;
    } else {
        rc = af_tool_call(tool, kwargs, ctx, &res);
        if (rc != AF_OK) {
            out->n_failed++;
            json_object_set_new(rec, "error", json_string(af_strerror(rc)));
        }
        exec_truncate(res, max_chars);
    }
    json_object_set_new(rec, "line", json_integer(call->line));
    json_object_set_new(rec, "args", kwargs ? kwargs : json_null());
    json_object_set(rec, "result", res);
    json_object_set_new(rec, "duration_ms", json_real(af_clock_ms() - t0));
    json_array_append_new(out->calls, rec);
    json_array_append_new(out->result, model_view(res));
    out->n_calls++;
}

void exec_run(struct af_tool *tool, const char *command, const struct af_tool_ctx *ctx,
              size_t max_chars, struct exec_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->calls = json_array();
    const char *name = af_tool_card(tool)->name;
    struct af_pycall_list list;
    char err[1024];
    if (af_pycall_parse(command, strlen(command), &list, err, sizeof err) != AF_OK) {
        char msg[1200];
        snprintf(msg, sizeof msg, "the command could not be parsed: %s", err);
        out->result = error_text(name, msg);
        out->parse_failed = 1;
        return;
    }
    if (list.n == 0) {
        out->result = error_text(name, "the command contains no tool.execute(...) call");
        out->parse_failed = 1;
        af_pycall_list_deinit(&list);
        return;
    }
    out->result = json_array();
    for (size_t i = 0; i < list.n; i++)
        run_one(tool, &list.calls[i], ctx, max_chars, out);
    af_pycall_list_deinit(&list);
}

void exec_outcome_deinit(struct exec_outcome *o)
{
    json_decref(o->result);
    json_decref(o->calls);
    memset(o, 0, sizeof *o);
}
