/*
 * validate.c - checks tool arguments against a tool card, and canonical tool names.
 *
 * The executor hands a tool only what this file lets through: every key is a card parameter,
 * every required parameter is present, every value has the declared type, and defaults are
 * filled in. Values are shared with the input (reference counts), never modified; numbers are
 * normalised so a tool can read INT parameters with json_integer_value and FLOAT ones with
 * json_real_value. Safe from any thread (no shared state).
 */
#include "agentflow/tools.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"

/* Python's name for the type of a JSON value, as the executor model wrote it. */
static const char *value_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return "str";
    case JSON_INTEGER:
        return "int";
    case JSON_REAL:
        return "float";
    case JSON_TRUE:
    case JSON_FALSE:
        return "bool";
    case JSON_ARRAY:
        return "list";
    case JSON_OBJECT:
        return "dict";
    case JSON_NULL:
    default:
        return "None";
    }
}

const char *af_tool_param_type_name(enum af_param_type t)
{
    switch (t) {
    case AF_PARAM_STR:
        return "str";
    case AF_PARAM_INT:
        return "int";
    case AF_PARAM_FLOAT:
        return "float";
    case AF_PARAM_BOOL:
        return "bool";
    case AF_PARAM_LIST:
        return "list";
    case AF_PARAM_DICT:
        return "dict";
    case AF_PARAM_ANY:
    default:
        return "any";
    }
}

static const struct af_tool_param *find_param(const struct af_tool_card *card, const char *name)
{
    for (size_t i = 0; i < card->n_params && i < AF_TOOL_MAX_PARAMS; i++)
        if (card->params[i].name && !strcmp(card->params[i].name, name))
            return &card->params[i];
    return NULL;
}

/* v converted to what a parameter of type t holds (new reference), or NULL on a type error. */
static json_t *coerce(enum af_param_type t, json_t *v)
{
    switch (t) {
    case AF_PARAM_STR:
        return json_is_string(v) ? json_incref(v) : NULL;
    case AF_PARAM_INT:
        if (json_is_integer(v))
            return json_incref(v);
        if (json_is_real(v)) {
            double d = json_real_value(v);
            /* integral and inside [-2^63, 2^63) */
            if (d == floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0)
                return json_integer((json_int_t)d);
        }
        return NULL;
    case AF_PARAM_FLOAT:
        if (json_is_real(v))
            return json_incref(v);
        return json_is_integer(v) ? json_real((double)json_integer_value(v)) : NULL;
    case AF_PARAM_BOOL:
        return json_is_boolean(v) ? json_incref(v) : NULL;
    case AF_PARAM_LIST:
        return json_is_array(v) ? json_incref(v) : NULL;
    case AF_PARAM_DICT:
        return json_is_object(v) ? json_incref(v) : NULL;
    case AF_PARAM_ANY:
    default:
        return json_incref(v);
    }
}

static void unknown_arg(const struct af_tool_card *card, const char *key, char *err, size_t errlen)
{
    struct af_buf b;
    af_buf_init(&b, 4096);
    for (size_t i = 0; i < card->n_params && i < AF_TOOL_MAX_PARAMS; i++)
        if (af_buf_printf(&b, "%s%s", i ? ", " : "", card->params[i].name) != AF_OK)
            break;
    if (b.len)
        af_errf(err, errlen, "unknown argument '%s' for tool %s; expected one of: %s", key,
                card->name, af_buf_str(&b));
    else
        af_errf(err, errlen, "unknown argument '%s' for tool %s; it takes no arguments", key,
                card->name);
    af_buf_deinit(&b);
}

/* Fills parameter pr into out from args, or from its default. */
static int fill_param(const struct af_tool_card *card, const struct af_tool_param *pr, json_t *args,
                      json_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(args, pr->name);
    if (v) {
        json_t *c = coerce(pr->type, v);
        if (!c) {
            af_errf(err, errlen, "argument '%s' of tool %s must be %s, got %s", pr->name,
                    card->name, af_tool_param_type_name(pr->type), value_type_name(v));
            return AF_EINVAL;
        }
        json_object_set_new(out, pr->name, c);
        return AF_OK;
    }
    if (pr->required) {
        af_errf(err, errlen, "missing required argument '%s' for tool %s", pr->name, card->name);
        return AF_EINVAL;
    }
    if (!pr->default_json)
        return AF_OK;
    json_error_t jerr;
    json_t *d = json_loads(pr->default_json, JSON_DECODE_ANY, &jerr);
    if (!d) {
        af_errf(err, errlen, "tool %s: the default of '%s' is not valid JSON: %s", card->name,
                pr->name, jerr.text);
        return AF_EINTERNAL;
    }
    json_object_set_new(out, pr->name, d);
    return AF_OK;
}

int af_tool_validate_args(const struct af_tool_card *card, const json_t *args, json_t **out,
                          char *err, size_t errlen)
{
    const char *key;
    json_t *v, *res = NULL;
    json_t *in = (json_t *)(uintptr_t)args; /* jansson's iterators take non-const; not changed */
    int rc = AF_OK;
    *out = NULL;
    if (!json_is_object(in)) {
        af_errf(err, errlen, "arguments for tool %s must be a JSON object", card->name);
        return AF_EINVAL;
    }
    json_object_foreach(in, key, v)
    {
        if (!find_param(card, key)) {
            unknown_arg(card, key, err, errlen);
            return AF_EINVAL;
        }
    }
    res = json_object();
    for (size_t i = 0; i < card->n_params && i < AF_TOOL_MAX_PARAMS && rc == AF_OK; i++)
        rc = fill_param(card, &card->params[i], in, res, err, errlen);
    if (rc != AF_OK) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return AF_OK;
}

void af_tool_canonical_name(const char *name, char *out, size_t outlen)
{
    size_t o = 0;
    int pending_sep = 0;
    if (!out || !outlen)
        return;
    for (const char *s = name ? name : ""; *s; s++) {
        char c = *s;
        if (c == ' ' || c == '_') {
            pending_sep = o > 0;
            continue;
        }
        if (pending_sep) {
            if (o + 1 >= outlen)
                break;
            out[o++] = '_';
            pending_sep = 0;
        }
        if (o + 1 >= outlen)
            break;
        out[o++] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    out[o] = '\0';
}
