/*
 * memory.c - the per-query action memory and its rendering into prompts.
 */
#include "flow/memory.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/jsonx.h"
#include "core/xalloc.h"
#include "flow/pyrepr.h"

void memory_init(struct memory *m)
{
    m->actions = json_array();
}

void memory_deinit(struct memory *m)
{
    json_decref(m->actions);
    m->actions = NULL;
}

void memory_add(struct memory *m, int step, const char *tool, const char *sub_goal,
                const char *command, json_t *result, int failed)
{
    json_t *a = json_object();
    json_object_set_new(a, "step", json_integer(step));
    json_object_set_new(a, "tool", af_json_text(tool));
    json_object_set_new(a, "sub_goal", af_json_text(sub_goal));
    json_object_set_new(a, "command", af_json_text(command));
    json_object_set_new(a, "result", result ? result : json_null());
    if (failed)
        json_object_set_new(a, "failed", json_true());
    json_array_append_new(m->actions, a);
}

char *memory_render(const struct memory *m, int python)
{
    if (json_array_size(m->actions) == 0)
        return af_xstrdup("No steps have been taken yet.");
    json_t *view = json_object();
    size_t i;
    json_t *a;
    json_array_foreach(m->actions, i, a)
    {
        char key[48];
        snprintf(key, sizeof key, "Action Step %lld",
                 (long long)json_integer_value(json_object_get(a, "step")));
        json_t *v = json_object();
        json_object_set(v, "tool_name", json_object_get(a, "tool"));
        json_object_set(v, "sub_goal", json_object_get(a, "sub_goal"));
        json_object_set(v, "command", json_object_get(a, "command"));
        json_object_set(v, "result", json_object_get(a, "result"));
        json_object_set_new(view, key, v);
    }
    char *s = python ? pyrepr(view)
                     : json_dumps(view, JSON_INDENT(2) | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
    json_decref(view);
    return s ? s : af_xstrdup("{}");
}
