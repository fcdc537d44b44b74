/*
 * brief.c - short renderings of the toolbox, a tool card and the memory, for prompt sets
 * written for small models with short contexts (prompts/compact/): the template variables
 * {{tools_brief}}, {{tool_brief}} and {{memory_brief}}.
 *
 * The full renderings (JSON cards, the indented memory) stay what the reference prompts use;
 * these keep what a model needs to act (names, parameters, results) and drop the rest.
 */
#include "flow/brief.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"

#define BRIEF_RESULT_MAX 700 /* characters of one step's result */

static const char *type_name(enum af_param_type t)
{
    static const char *const names[] = {"str", "int", "float", "bool", "list", "dict", "any"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "any";
}

/* The first sentence of s (up to ". " or the end). */
static void first_sentence(struct af_buf *b, const char *s)
{
    const char *end = strstr(s ? s : "", ". ");
    if (end)
        (void)af_buf_append(b, s, (size_t)(end - s) + 1);
    else
        (void)af_buf_puts(b, s ? s : "");
}

static void signature(struct af_buf *b, const struct af_tool_card *c)
{
    (void)af_buf_printf(b, "%s(", c->name);
    for (size_t i = 0; i < c->n_params; i++)
        (void)af_buf_printf(b, "%s%s: %s", i ? ", " : "", c->params[i].name,
                            type_name(c->params[i].type));
    (void)af_buf_puts(b, ")");
}

char *brief_tools(const struct af_tool_registry *r)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    size_t n = r ? af_tool_registry_count(r) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct af_tool_card *c = af_tool_card(af_tool_registry_at(r, i));
        (void)af_buf_puts(&b, i ? "\n- " : "- ");
        signature(&b, c);
        (void)af_buf_puts(&b, ": ");
        first_sentence(&b, c->description);
    }
    if (n == 0)
        (void)af_buf_puts(&b, "(no tools)");
    return af_buf_detach(&b);
}

char *brief_card(const struct af_tool_card *c)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    signature(&b, c);
    for (size_t i = 0; i < c->n_params; i++) {
        const struct af_tool_param *p = &c->params[i];
        (void)af_buf_printf(&b, "\n  %s: ", p->name);
        first_sentence(&b, p->description);
        if (!p->required && p->default_json && strcmp(p->default_json, "null") != 0)
            (void)af_buf_printf(&b, " (default %s)", p->default_json);
    }
    if (c->n_demos > 0)
        (void)af_buf_printf(&b, "\nExample: %s", c->demo_commands[0]);
    return af_buf_detach(&b);
}

/* Appends s, cut at max characters (at a UTF-8 boundary) with a mark when cut. */
static void put_capped(struct af_buf *b, const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n <= max) {
        (void)af_buf_puts(b, s);
        return;
    }
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    (void)af_buf_append(b, s, max);
    (void)af_buf_puts(b, " [...]");
}

/* One result as text: passages as "title: text" lines, a program's printed output (and its
 * error), a string as it is, anything else as compact JSON. */
static void brief_result(struct af_buf *b, const json_t *r)
{
    struct af_buf t;
    af_buf_init(&t, AF_BUF_NOLIMIT);
    const json_t *hits = json_object_get(r, "results");
    const json_t *printed = json_object_get(r, "printed_output");
    if (json_is_array(hits)) {
        size_t i;
        const json_t *h;
        json_array_foreach(hits, i, h)
        {
            const char *title = json_string_value(json_object_get(h, "title"));
            const char *text = json_string_value(json_object_get(h, "text"));
            (void)af_buf_printf(&t, "%s%s%s%s", i ? "\n" : "", title ? title : "",
                                title ? ": " : "", text ? text : "");
        }
        if (json_array_size(hits) == 0)
            (void)af_buf_puts(&t, "no passages found");
    } else if (json_is_string(printed)) {
        (void)af_buf_puts(&t, json_string_value(printed));
        while (t.len && t.data[t.len - 1] == '\n')
            t.data[--t.len] = '\0';
        const char *e = json_string_value(json_object_get(r, "error"));
        if (e && *e)
            (void)af_buf_printf(&t, "%sError: %s", t.len ? "\n" : "", e);
    } else if (json_is_string(r)) {
        (void)af_buf_puts(&t, json_string_value(r));
    } else {
        char *j = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);
        (void)af_buf_puts(&t, j ? j : "null");
        free(j);
    }
    put_capped(b, t.data ? t.data : "", BRIEF_RESULT_MAX);
    af_buf_deinit(&t);
}

char *brief_memory(const json_t *actions)
{
    if (json_array_size(actions) == 0)
        return af_xstrdup("none yet");
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    size_t i;
    const json_t *a;
    json_array_foreach(actions, i, a)
    {
        (void)af_buf_printf(&b, "%sStep %lld: %s: %s\nResult: ", i ? "\n" : "",
                            (long long)json_integer_value(json_object_get(a, "step")),
                            json_string_value(json_object_get(a, "tool")),
                            json_string_value(json_object_get(a, "sub_goal")));
        /* A tool result is a list of per-call results; one call is the common case. */
        const json_t *r = json_object_get(a, "result");
        if (json_is_array(r) && json_array_size(r) == 1)
            r = json_array_get(r, 0);
        brief_result(&b, r);
    }
    return af_buf_detach(&b);
}
