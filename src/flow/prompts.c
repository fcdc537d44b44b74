/*
 * prompts.c - the prompt template store (compiled-in, with per-file overrides from a folder)
 * and the {{name}} renderer.
 */
#include "flow/prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "flow/prompts_data.h"

#define PROMPT_MAX_BYTES (1u << 20)

struct af_prompts {
    size_t n;
    const char **names; /* borrowed from af_prompt_files */
    char **texts;       /* owned */
};

/* The compiled-in text of set/name ("compact/next_step"), or NULL. */
static const char *builtin_text(const char *set, const char *name)
{
    size_t sl = strlen(set);
    for (size_t i = 0; af_prompt_files[i].name; i++) {
        const char *n = af_prompt_files[i].name;
        if (strncmp(n, set, sl) == 0 && n[sl] == '/' && strcmp(n + sl + 1, name) == 0)
            return af_prompt_files[i].text;
    }
    return NULL;
}

/* Whether `dir` names a compiled-in set (a word without '/', such as "compact"). */
static int is_builtin_set(const char *dir)
{
    if (strchr(dir, '/'))
        return 0;
    size_t dl = strlen(dir);
    for (size_t i = 0; af_prompt_files[i].name; i++)
        if (strncmp(af_prompt_files[i].name, dir, dl) == 0 && af_prompt_files[i].name[dl] == '/')
            return 1;
    return 0;
}

int af_prompts_load(const char *dir, struct af_prompts **out, char *err, size_t errlen)
{
    *out = NULL;
    size_t n = 0, n_all = 0;
    while (af_prompt_files[n_all].name)
        n += strchr(af_prompt_files[n_all++].name, '/') == NULL;
    struct af_prompts *p = af_xcalloc(1, sizeof *p);
    p->names = af_xcalloc(n ? n : 1, sizeof *p->names);
    p->texts = af_xcalloc(n ? n : 1, sizeof *p->texts);
    int builtin = dir && dir[0] && is_builtin_set(dir);
    for (size_t k = 0; k < n_all; k++) {
        const char *name = af_prompt_files[k].name;
        if (strchr(name, '/'))
            continue; /* a template of a named set, used through its set only */
        size_t i = p->n++;
        p->names[i] = name;
        char *text = NULL;
        if (builtin) {
            const char *t = builtin_text(dir, name);
            text = t ? af_xstrdup(t) : NULL;
        } else if (dir && dir[0]) {
            size_t plen = strlen(dir) + strlen(name) + 8;
            char *path = af_xmalloc(plen);
            snprintf(path, plen, "%s/%s.txt", dir, name);
            int rc = af_file_read(path, PROMPT_MAX_BYTES, &text, NULL, err, errlen);
            free(path);
            if (rc != AF_OK && rc != AF_ENOTFOUND) {
                af_prompts_free(p);
                return rc;
            }
        }
        p->texts[i] = text ? text : af_xstrdup(af_prompt_files[k].text);
    }
    *out = p;
    return AF_OK;
}

void af_prompts_free(struct af_prompts *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->texts[i]);
    free(p->texts);
    free(p->names);
    free(p);
}

const char *af_prompts_get(const struct af_prompts *p, const char *name)
{
    if (!p) {
        for (size_t i = 0; af_prompt_files[i].name; i++)
            if (strcmp(af_prompt_files[i].name, name) == 0)
                return af_prompt_files[i].text;
        return NULL;
    }
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->names[i], name) == 0)
            return p->texts[i];
    return NULL;
}

static const char *lookup(const struct prompt_var *vars, size_t n_vars, const char *name,
                          size_t len)
{
    for (size_t i = 0; i < n_vars; i++)
        if (strlen(vars[i].name) == len && memcmp(vars[i].name, name, len) == 0)
            return vars[i].value ? vars[i].value : "";
    return "";
}

char *prompt_render(const struct af_prompts *p, const char *name, const struct prompt_var *vars,
                    size_t n_vars)
{
    const char *t = af_prompts_get(p, name);
    if (!t)
        return NULL;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    const char *s = t;
    for (;;) {
        const char *open = strstr(s, "{{");
        const char *close = open ? strstr(open + 2, "}}") : NULL;
        if (!close) {
            (void)af_buf_puts(&b, s);
            break;
        }
        (void)af_buf_append(&b, s, (size_t)(open - s));
        const char *k = open + 2;
        size_t klen = (size_t)(close - k);
        while (klen && k[0] == ' ')
            k++, klen--;
        while (klen && k[klen - 1] == ' ')
            klen--;
        (void)af_buf_puts(&b, lookup(vars, n_vars, k, klen));
        s = close + 2;
    }
    /* Trailing newlines of template files would only pad the prompt. */
    while (b.len && b.data[b.len - 1] == '\n')
        b.data[--b.len] = '\0';
    return af_buf_detach(&b);
}
