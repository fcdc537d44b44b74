/*
 * registry.c - the set of tools a flow may use, kept sorted by name (the prompts list them in
 * that order, as the reference does), with lookup by canonical name and by the released
 * AgentFlow's names for our tools.
 */
#include "agentflow/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

#define NAME_MAX_LEN 256

struct af_tool_registry {
    struct af_tool **tools;
    size_t n, cap;
};

struct af_tool_registry *af_tool_registry_new(void)
{
    return af_xcalloc(1, sizeof(struct af_tool_registry));
}

void af_tool_registry_free(struct af_tool_registry *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        af_tool_free(r->tools[i]);
    free(r->tools);
    free(r);
}

int af_tool_registry_add(struct af_tool_registry *r, struct af_tool *t)
{
    const char *name = af_tool_card(t)->name;
    if (af_tool_registry_find(r, name))
        return AF_EINVAL;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 8;
        r->tools = af_xrealloc(r->tools, r->cap * sizeof *r->tools);
    }
    size_t pos = r->n;
    while (pos > 0 && strcmp(af_tool_card(r->tools[pos - 1])->name, name) > 0) {
        r->tools[pos] = r->tools[pos - 1];
        pos--;
    }
    r->tools[pos] = t;
    r->n++;
    return AF_OK;
}

size_t af_tool_registry_count(const struct af_tool_registry *r)
{
    return r->n;
}

struct af_tool *af_tool_registry_at(const struct af_tool_registry *r, size_t i)
{
    return i < r->n ? r->tools[i] : NULL;
}

/* The released AgentFlow's long tool names that differ from ours, so that the released
 * planner's choices resolve (docs/CONFIG.md). Its Web_RAG_Search_Tool, Wikipedia_RAG_Search_Tool,
 * Python_Code_Generator_Tool and Generalist_Solution_Generator_Tool are our names already. */
static const struct {
    const char *alias, *name;
} aliases[] = {
    {"Ground_Google_Search_Tool", "Web_Search_Tool"}, /* Gemini grounding there, SearXNG here */
};

const char *af_tool_alias_target(const char *name)
{
    char want[NAME_MAX_LEN], have[NAME_MAX_LEN];
    af_tool_canonical_name(name, want, sizeof want);
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        af_tool_canonical_name(aliases[i].alias, have, sizeof have);
        if (strcmp(want, have) == 0)
            return aliases[i].name;
    }
    return NULL;
}

static struct af_tool *find_exact(const struct af_tool_registry *r, const char *name)
{
    char want[NAME_MAX_LEN], have[NAME_MAX_LEN];
    af_tool_canonical_name(name, want, sizeof want);
    for (size_t i = 0; i < r->n; i++) {
        af_tool_canonical_name(af_tool_card(r->tools[i])->name, have, sizeof have);
        if (strcmp(want, have) == 0)
            return r->tools[i];
    }
    return NULL;
}

struct af_tool *af_tool_registry_find(const struct af_tool_registry *r, const char *name)
{
    struct af_tool *t = find_exact(r, name);
    const char *target = t ? NULL : af_tool_alias_target(name);
    return target ? find_exact(r, target) : t;
}

typedef struct af_tool *(*tool_ctor)(const json_t *opts);

static const struct {
    const char *name;
    tool_ctor make;
} builtins[] = {
    {"Generalist_Solution_Generator_Tool", af_tool_base_generator_new},
    {"Python_Code_Generator_Tool", af_tool_python_coder_new},
    {"Web_RAG_Search_Tool", af_tool_web_rag_new},
    {"Web_Search_Tool", af_tool_web_search_new},
    {"Wikipedia_RAG_Search_Tool", af_tool_wikipedia_new},
};

const char *af_tool_option(const json_t *opts, const char *key, const char *env)
{
    const char *v = json_string_value(json_object_get(opts, key));
    if (v && v[0])
        return v;
    v = env ? getenv(env) : NULL;
    return v && v[0] ? v : NULL;
}

static int add_builtin(struct af_tool_registry *r, const char *name, const json_t *opts, char *err,
                       size_t errlen)
{
    char want[NAME_MAX_LEN], have[NAME_MAX_LEN];
    const char *target = af_tool_alias_target(name);
    af_tool_canonical_name(target ? target : name, want, sizeof want);
    if (!want[0])
        return AF_OK;
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++) {
        af_tool_canonical_name(builtins[i].name, have, sizeof have);
        if (strcmp(want, have) != 0)
            continue;
        if (af_tool_registry_find(r, builtins[i].name))
            return AF_OK;
        return af_tool_registry_add(r, builtins[i].make(opts));
    }
    char known[1024];
    size_t used = 0;
    known[0] = '\0';
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0] && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 builtins[i].name);
    snprintf(err, errlen, "unknown tool '%s' (available: %s)", name, known);
    return AF_ENOTFOUND;
}

int af_tool_registry_add_builtins(struct af_tool_registry *r, const char *names, const json_t *opts,
                                  char *err, size_t errlen)
{
    if (!names || !names[0]) {
        for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
            if (!af_tool_registry_find(r, builtins[i].name)) {
                int rc = af_tool_registry_add(r, builtins[i].make(opts));
                if (rc)
                    return rc;
            }
        return AF_OK;
    }
    const char *p = names;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char *one = af_xstrndup(p, n);
        int rc = add_builtin(r, one, opts, err, errlen);
        free(one);
        if (rc)
            return rc;
        p += n;
        if (*p == ',')
            p++;
    }
    return AF_OK;
}
