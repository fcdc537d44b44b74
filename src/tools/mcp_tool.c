/*
 * mcp_tool.c - tools served by MCP servers: a tool card built from each listed tool's JSON
 * Schema, a check of the arguments against that schema, and tools/call.
 *
 * Type mapping (JSON Schema -> card): string -> str, integer -> int, number -> float,
 * boolean -> bool, array -> list, object -> dict; a missing type, a union or anyOf -> any.
 * Required properties come first on the card (at most AF_TOOL_MAX_PARAMS are offered); a
 * property's "default" becomes the card default. Before the call the whole argument object is
 * checked against the schema (type, enum, const, required, properties, additionalProperties,
 * items, anyOf/oneOf as "any of", min/max length, items and numeric bounds). The result is
 * {text: the content's text items joined by newlines, is_error, content: the raw items,
 * structured_content when given}; a schema violation is an AF_EINVAL result {error} naming the
 * argument, and any other failure an AF_ETOOL result {error} naming the server.
 * Each tool owns its card strings and one reference to the shared client.
 */
#include "agentflow/tools.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "tools/mcp.h"

#define SCHEMA_MAX_DEPTH 32

struct mcp_tool {
    struct af_tool_card card;
    char **owned; /* every string the card points to */
    size_t n_owned;
    json_t *schema; /* the inputSchema (owned reference) */
    struct mcp_client *client;
};

static const char *keep(struct mcp_tool *t, char *s)
{
    t->owned = af_xrealloc(t->owned, (t->n_owned + 1) * sizeof *t->owned);
    t->owned[t->n_owned++] = s;
    return s;
}

static void mcp_tool_free(void *self)
{
    struct mcp_tool *t = self;
    if (!t)
        return;
    for (size_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned);
    json_decref(t->schema);
    mcp_client_release(t->client);
    free(t);
}

/* --- the card --------------------------------------------------------------------------- */

static enum af_param_type map_one_type(const char *s)
{
    if (!s)
        return AF_PARAM_ANY;
    if (!strcmp(s, "string"))
        return AF_PARAM_STR;
    if (!strcmp(s, "integer"))
        return AF_PARAM_INT;
    if (!strcmp(s, "number"))
        return AF_PARAM_FLOAT;
    if (!strcmp(s, "boolean"))
        return AF_PARAM_BOOL;
    if (!strcmp(s, "array"))
        return AF_PARAM_LIST;
    if (!strcmp(s, "object"))
        return AF_PARAM_DICT;
    return AF_PARAM_ANY;
}

/* The card type of a property schema; ["T", "null"] counts as T. */
static enum af_param_type map_type(const json_t *prop)
{
    const json_t *ty = json_object_get(prop, "type");
    if (json_is_string(ty))
        return map_one_type(json_string_value(ty));
    if (!json_is_array(ty))
        return AF_PARAM_ANY;
    const char *only = NULL;
    size_t i;
    const json_t *v;
    json_array_foreach(ty, i, v)
    {
        const char *s = json_string_value(v);
        if (s && strcmp(s, "null")) {
            if (only)
                return AF_PARAM_ANY;
            only = s;
        }
    }
    return map_one_type(only);
}

static int is_required(const json_t *schema, const char *name)
{
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(schema, "required"), i, v)
    {
        if (json_is_string(v) && !strcmp(json_string_value(v), name))
            return 1;
    }
    return 0;
}

static const char *param_description(struct mcp_tool *t, const json_t *prop)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    const char *d = json_string_value(json_object_get(prop, "description"));
    (void)af_buf_puts(&b, d ? d : "");
    const json_t *en = json_object_get(prop, "enum");
    if (json_is_array(en)) {
        char *s = json_dumps(en, JSON_COMPACT | JSON_ENCODE_ANY);
        const char *sep = !b.len ? "" : b.data[b.len - 1] == '.' ? " " : ". ";
        (void)af_buf_printf(&b, "%sOne of: %s", sep, s ? s : "[]");
        free(s);
    }
    return keep(t, af_buf_detach(&b));
}

/* Fills the card's parameters: required ones first. Returns how many properties there were. */
static size_t card_params(struct mcp_tool *t)
{
    const json_t *props = json_object_get(t->schema, "properties");
    size_t total = json_object_size(props);
    for (int pass = 0; pass < 2; pass++) {
        const char *name;
        json_t *prop;
        json_object_foreach((json_t *)(uintptr_t)props, name, prop)
        {
            int req = is_required(t->schema, name);
            if (req != (pass == 0) || t->card.n_params >= AF_TOOL_MAX_PARAMS)
                continue;
            struct af_tool_param *p = &t->card.params[t->card.n_params++];
            p->name = keep(t, af_xstrdup(name));
            p->type = map_type(prop);
            p->required = req;
            p->description = param_description(t, prop);
            const json_t *def = json_object_get(prop, "default");
            if (!req && def)
                p->default_json = keep(t, json_dumps(def, JSON_COMPACT | JSON_ENCODE_ANY));
        }
    }
    return total;
}

/* One demo command from the required parameters, with placeholder values by type. */
static const char *demo_command(struct mcp_tool *t)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "execution = tool.execute(");
    int first = 1;
    for (size_t i = 0; i < t->card.n_params; i++) {
        const struct af_tool_param *p = &t->card.params[i];
        if (!p->required)
            continue;
        static const char *const sample[] = {"\"...\"", "1", "1.0", "True", "[]", "{}", "\"...\""};
        (void)af_buf_printf(&b, "%s%s=%s", first ? "" : ", ", p->name, sample[p->type]);
        first = 0;
    }
    (void)af_buf_putc(&b, ')');
    return keep(t, af_buf_detach(&b));
}

static void build_card(struct mcp_tool *t, const json_t *def, const char *name)
{
    struct mcp_client *c = t->client;
    const char *server = mcp_client_server_name(c);
    const char *desc = json_string_value(json_object_get(def, "description"));
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&b, "%s%s(A tool of the MCP server %s%s'%.200s'.)", desc ? desc : "",
                        desc && desc[0] ? " " : "", server, server[0] ? " run as " : "",
                        mcp_client_spec(c));
    t->card.name = keep(t, af_xstrdup(name));
    t->card.description = keep(t, af_buf_detach(&b));
    const char *v = mcp_client_server_version(c);
    t->card.version = keep(t, af_xstrdup(v[0] ? v : "1.0"));
    size_t total = card_params(t);
    t->card.output_type = "dict - {text: the tool's text output, is_error, content: the raw MCP "
                          "content items, structured_content when the server gives one}";
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "Runs on an external MCP server; its answers are passed on unchecked.");
    if (total > t->card.n_params)
        (void)af_buf_printf(&b, " Only %zu of its %zu parameters are offered.", t->card.n_params,
                            total);
    t->card.limitations = keep(t, af_buf_detach(&b));
    t->card.n_demos = 1;
    t->card.demo_commands[0] = demo_command(t);
    t->card.demo_descriptions[0] = "Call the tool with its required arguments.";
}

/* --- the schema check ------------------------------------------------------------------- */

static int check_value(const json_t *s, const json_t *v, const char *path, int depth, char *err,
                       size_t errlen);

static int type_matches(const char *ty, const json_t *v)
{
    if (!strcmp(ty, "string"))
        return json_is_string(v);
    if (!strcmp(ty, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(ty, "number"))
        return json_is_number(v);
    if (!strcmp(ty, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(ty, "array"))
        return json_is_array(v);
    if (!strcmp(ty, "object"))
        return json_is_object(v);
    if (!strcmp(ty, "null"))
        return json_is_null(v);
    return 1;
}

static int check_type(const json_t *s, const json_t *v, const char *path, char *err, size_t errlen)
{
    const json_t *ty = json_object_get(s, "type");
    int ok = 1;
    if (json_is_string(ty)) {
        ok = type_matches(json_string_value(ty), v);
    } else if (json_is_array(ty) && json_array_size(ty)) {
        size_t i;
        const json_t *one;
        ok = 0;
        json_array_foreach(ty, i, one)
        {
            if (json_is_string(one) && type_matches(json_string_value(one), v))
                ok = 1;
        }
    }
    if (ok)
        return AF_OK;
    char *want = json_dumps(ty, JSON_COMPACT | JSON_ENCODE_ANY);
    af_errf(err, errlen, "argument '%s' must be of type %s", path, want ? want : "?");
    free(want);
    return AF_EINVAL;
}

static int check_enum(const json_t *s, const json_t *v, const char *path, char *err, size_t errlen)
{
    const json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    if (cst && !json_equal(cst, v)) {
        af_errf(err, errlen, "argument '%s' must be the constant given by the schema", path);
        return AF_EINVAL;
    }
    if (!json_is_array(en))
        return AF_OK;
    size_t i;
    const json_t *one;
    json_array_foreach(en, i, one)
    {
        if (json_equal(one, v))
            return AF_OK;
    }
    char *list = json_dumps(en, JSON_COMPACT);
    af_errf(err, errlen, "argument '%s' must be one of %.300s", path, list ? list : "[]");
    free(list);
    return AF_EINVAL;
}

static size_t utf8_length(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* minLength/maxLength, minItems/maxItems, minimum/maximum and their exclusive forms. */
static int check_bounds(const json_t *s, const json_t *v, const char *path, char *err,
                        size_t errlen)
{
    double x;
    const char *what;
    if (json_is_string(v)) {
        x = (double)utf8_length(json_string_value(v));
        what = "Length";
    } else if (json_is_array(v)) {
        x = (double)json_array_size(v);
        what = "Items";
    } else if (json_is_number(v)) {
        x = json_number_value(v);
        what = "imum";
    } else {
        return AF_OK;
    }
    char lo[32], hi[32];
    snprintf(lo, sizeof lo, "min%s", what);
    snprintf(hi, sizeof hi, "max%s", what);
    const json_t *l = json_object_get(s, lo), *h = json_object_get(s, hi);
    const json_t *el = json_is_number(v) ? json_object_get(s, "exclusiveMinimum") : NULL;
    const json_t *eh = json_is_number(v) ? json_object_get(s, "exclusiveMaximum") : NULL;
    if ((json_is_number(l) && x < json_number_value(l)) ||
        (json_is_number(el) && x <= json_number_value(el))) {
        af_errf(err, errlen, "argument '%s' is below the schema's %s", path, lo);
        return AF_EINVAL;
    }
    if ((json_is_number(h) && x > json_number_value(h)) ||
        (json_is_number(eh) && x >= json_number_value(eh))) {
        af_errf(err, errlen, "argument '%s' is above the schema's %s", path, hi);
        return AF_EINVAL;
    }
    return AF_OK;
}

static int check_object(const json_t *s, const json_t *v, const char *path, int depth, char *err,
                        size_t errlen)
{
    char sub[512];
    size_t i;
    const json_t *r;
    json_array_foreach(json_object_get(s, "required"), i, r)
    {
        const char *k = json_string_value(r);
        if (k && !json_object_get(v, k)) {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k);
            af_errf(err, errlen, "missing required argument '%s'", sub);
            return AF_EINVAL;
        }
    }
    const json_t *props = json_object_get(s, "properties");
    const json_t *extra = json_object_get(s, "additionalProperties");
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)(uintptr_t)v, k, val)
    {
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k);
        const json_t *ps = json_object_get(props, k);
        if (!ps && json_is_false(extra)) {
            af_errf(err, errlen, "unknown argument '%s'", sub);
            return AF_EINVAL;
        }
        int rc = check_value(ps ? ps : extra, val, sub, depth + 1, err, errlen);
        if (rc)
            return rc;
    }
    return AF_OK;
}

static int check_any_of(const json_t *s, const json_t *v, const char *path, int depth, char *err,
                        size_t errlen)
{
    const json_t *alts = json_object_get(s, "anyOf");
    if (!json_is_array(alts))
        alts = json_object_get(s, "oneOf");
    if (!json_is_array(alts) || !json_array_size(alts))
        return AF_OK;
    size_t i;
    const json_t *alt;
    json_array_foreach(alts, i, alt)
    {
        char ignore[256];
        if (check_value(alt, v, path, depth + 1, ignore, sizeof ignore) == AF_OK)
            return AF_OK;
    }
    af_errf(err, errlen, "argument '%s' matches none of the schema's alternatives", path);
    return AF_EINVAL;
}

static int check_value(const json_t *s, const json_t *v, const char *path, int depth, char *err,
                       size_t errlen)
{
    if (!json_is_object(s) || depth > SCHEMA_MAX_DEPTH)
        return AF_OK;
    int rc = check_type(s, v, path, err, errlen);
    if (!rc)
        rc = check_enum(s, v, path, err, errlen);
    if (!rc)
        rc = check_bounds(s, v, path, err, errlen);
    if (!rc)
        rc = check_any_of(s, v, path, depth, err, errlen);
    if (!rc && json_is_object(v))
        rc = check_object(s, v, path, depth, err, errlen);
    if (!rc && json_is_array(v)) {
        size_t i;
        const json_t *item;
        json_array_foreach(v, i, item)
        {
            char sub[512];
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            rc = check_value(json_object_get(s, "items"), item, sub, depth + 1, err, errlen);
            if (rc)
                break;
        }
    }
    return rc;
}

/* --- the call --------------------------------------------------------------------------- */

static int error_result(json_t **result, const char *msg)
{
    *result = json_pack("{s:s}", "error", msg);
    return AF_ETOOL;
}

/* The text items joined by newlines; other items as a short placeholder. Owned by the caller. */
static char *join_text(const json_t *content)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    size_t i;
    const json_t *item;
    json_array_foreach(content, i, item)
    {
        const char *type = json_string_value(json_object_get(item, "type"));
        const char *text = json_string_value(json_object_get(item, "text"));
        if (b.len)
            (void)af_buf_putc(&b, '\n');
        if (text && (!type || !strcmp(type, "text"))) {
            (void)af_buf_puts(&b, text);
        } else {
            const char *mime = json_string_value(json_object_get(item, "mimeType"));
            const char *uri = json_string_value(json_object_get(item, "uri"));
            (void)af_buf_printf(&b, "[%s%s%s]", type ? type : "item", mime || uri ? " " : "",
                                mime  ? mime
                                : uri ? uri
                                      : "");
        }
    }
    return af_buf_detach(&b);
}

static int mcp_tool_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                         json_t **result)
{
    struct mcp_tool *t = self;
    char err[1536];
    json_t *a = json_is_object(args) ? json_incref((json_t *)(uintptr_t)args) : json_object();
    if (check_value(t->schema, a, "", 0, err, sizeof err) != AF_OK) {
        char msg[1700];
        snprintf(msg, sizeof msg, "%s: %s", t->card.name, err);
        json_decref(a);
        error_result(result, msg);
        return AF_EINVAL;
    }
    json_t *params = json_pack("{s:s, s:o}", "name", t->card.name, "arguments", a);
    json_t *res = NULL;
    int rc = mcp_client_request(t->client, "tools/call", params, ctx ? ctx->deadline_ms : 0, &res,
                                err, sizeof err);
    if (rc)
        return error_result(result, err);
    const json_t *content = json_object_get(res, "content");
    int is_error = json_is_true(json_object_get(res, "isError"));
    char *text = join_text(content);
    json_t *out = json_object();
    json_object_set_new(out, "text", json_string(text));
    json_object_set_new(out, "is_error", json_boolean(is_error));
    json_object_set_new(out, "content",
                        json_is_array(content) ? json_incref((json_t *)(uintptr_t)content)
                                               : json_array());
    json_t *sc = json_object_get(res, "structuredContent");
    if (sc)
        json_object_set(out, "structured_content", sc);
    if (is_error)
        json_object_set_new(out, "error", json_string(text[0] ? text : "the tool failed"));
    free(text);
    json_decref(res);
    *result = out;
    return is_error ? AF_ETOOL : AF_OK;
}

/* --- registration ----------------------------------------------------------------------- */

/* A positive number option, or def when absent. AF_EINVAL with a message when malformed. */
static int number_option(const json_t *opts, const char *key, const char *env, double def,
                         double *out, char *err, size_t errlen)
{
    const char *v = af_tool_option(opts, key, env);
    *out = def;
    if (!v)
        return AF_OK;
    char *end = NULL;
    double d = strtod(v, &end);
    if (end == v || *end || !(d > 0) || d > 1e12) {
        af_errf(err, errlen, "tool option %s: '%.100s' is not a positive number", key, v);
        return AF_EINVAL;
    }
    *out = d;
    return AF_OK;
}

static int client_params(const json_t *opts, const char *spec, struct mcp_params *p, char *err,
                         size_t errlen)
{
    double timeout, max_bytes;
    *p = mcp_default_params();
    int rc = number_option(opts, "mcp_timeout_ms", "AGENTFLOW_MCP_TIMEOUT_MS",
                           MCP_DEFAULT_TIMEOUT_MS, &timeout, err, errlen);
    if (!rc)
        rc = number_option(opts, "mcp_max_bytes", NULL, (double)MCP_DEFAULT_MAX_BYTES, &max_bytes,
                           err, errlen);
    if (rc)
        return rc;
    p->spec = spec;
    p->timeout_ms = timeout;
    p->max_bytes = (size_t)max_bytes;
    p->stderr_path = af_tool_option(opts, "mcp_stderr", NULL);
    return AF_OK;
}

/* Checks names: each a non-empty string, new to r and unique within the list. */
static int check_names(const struct af_tool_registry *r, const json_t *list, const char *spec,
                       char *err, size_t errlen)
{
    size_t i;
    const json_t *def;
    json_array_foreach(list, i, def)
    {
        const char *name = json_string_value(json_object_get(def, "name"));
        if (!name || !name[0] || strlen(name) > 128) {
            af_errf(err, errlen, "MCP server '%.200s': tools/list entry %zu has no valid name",
                    spec, i);
            return AF_EPARSE;
        }
        for (size_t k = 0; k < i; k++)
            if (!strcmp(json_string_value(json_object_get(json_array_get(list, k), "name")),
                        name)) {
                af_errf(err, errlen, "MCP server '%.200s' lists the tool '%s' twice", spec, name);
                return AF_EINVAL;
            }
        if (af_tool_registry_find(r, name)) {
            af_errf(err, errlen,
                    "MCP server '%.200s': its tool '%s' has the name of a tool already loaded "
                    "(names are compared ignoring case, spaces and underscores)",
                    spec, name);
            return AF_EINVAL;
        }
    }
    return AF_OK;
}

int af_tool_registry_add_mcp_server(struct af_tool_registry *r, const char *spec,
                                    const json_t *opts, char *err, size_t errlen)
{
    struct mcp_params p;
    struct mcp_client *c = NULL;
    json_t *list = NULL;
    int rc = client_params(opts, spec, &p, err, errlen);
    if (!rc)
        rc = mcp_client_open(&p, &c, err, errlen);
    if (!rc)
        rc = mcp_client_list_tools(c, &list, err, errlen);
    if (!rc)
        rc = check_names(r, list, mcp_client_spec(c), err, errlen);
    size_t i;
    const json_t *def;
    json_array_foreach(rc ? NULL : list, i, def)
    {
        struct mcp_tool *t = af_xcalloc(1, sizeof *t);
        const json_t *schema = json_object_get(def, "inputSchema");
        t->schema = json_is_object(schema) ? json_deep_copy(schema) : json_object();
        t->client = c;
        mcp_client_retain(c);
        build_card(t, def, json_string_value(json_object_get(def, "name")));
        struct af_tool *tool = af_tool_new(&t->card, mcp_tool_call, t, mcp_tool_free);
        rc = af_tool_registry_add(r, tool);
        if (rc) { /* check_names ruled this out */
            af_tool_free(tool);
            af_errf(err, errlen, "MCP server '%.200s': cannot add tool %zu", spec, i);
            break;
        }
    }
    json_decref(list);
    mcp_client_release(c);
    return rc;
}

/* Each spec in the option text: a JSON array of strings, or one per non-blank line ('#' starts
 * a comment line). *out is a new array owned by the caller. */
static int split_specs(const char *text, json_t **out, char *err, size_t errlen)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p == '[') {
        json_error_t je;
        json_t *a = json_loads(p, 0, &je);
        size_t i;
        const json_t *v;
        int ok = json_is_array(a);
        json_array_foreach(ok ? a : NULL, i, v) ok = ok && json_is_string(v);
        if (!ok) {
            af_errf(err, errlen, "tool option mcp: not a JSON list of command strings (%s)",
                    a ? "a value is not a string" : je.text);
            json_decref(a);
            return AF_EINVAL;
        }
        *out = a;
        return AF_OK;
    }
    *out = json_array();
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = af_xstrndup(p, n);
        const char *q = line;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q && *q != '#' && *q != '\r')
            json_array_append_new(*out, json_string(q));
        free(line);
        p += n;
        if (*p)
            p++;
    }
    return AF_OK;
}

int af_tool_registry_add_mcp(struct af_tool_registry *r, const json_t *opts, char *err,
                             size_t errlen)
{
    const char *text = af_tool_option(opts, "mcp", "AGENTFLOW_MCP");
    json_t *specs = NULL;
    if (!text)
        return AF_OK;
    int rc = split_specs(text, &specs, err, errlen);
    for (size_t i = 0; !rc && i < json_array_size(specs); i++)
        rc = af_tool_registry_add_mcp_server(r, json_string_value(json_array_get(specs, i)), opts,
                                             err, errlen);
    json_decref(specs);
    return rc;
}

void af_tool_mcp_option_append(json_t *opts, const char *spec)
{
    const char *old = json_string_value(json_object_get(opts, "mcp"));
    json_t *list = NULL;
    char ignore[256];
    if (old && old[strspn(old, " \t\r\n")] == '[' &&
        split_specs(old, &list, ignore, sizeof ignore) == AF_OK) {
        json_array_append_new(list, json_string(spec));
        char *s = json_dumps(list, JSON_COMPACT);
        json_object_set_new(opts, "mcp", json_string(s));
        free(s);
        json_decref(list);
        return;
    }
    json_decref(list);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    if (old && old[0])
        (void)af_buf_printf(&b, "%s\n", old);
    (void)af_buf_puts(&b, spec);
    json_object_set_new(opts, "mcp", json_string(af_buf_str(&b)));
    af_buf_deinit(&b);
}
