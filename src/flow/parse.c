/*
 * parse.c - planner, verifier and generator reply parsers (see parse.h for the rules).
 */
#include "flow/parse.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/xalloc.h"

/* Removes every "**" (the reference strips bold markup before matching). */
static char *strip_bold(const char *s)
{
    size_t n = strlen(s);
    char *out = af_xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '*' && s[i + 1] == '*') {
            i++;
            continue;
        }
        *o++ = s[i];
    }
    *o = '\0';
    return out;
}

static const char *find_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0)
            return p;
    return NULL;
}

/* Copies [a, b) with surrounding whitespace removed. */
static char *trimmed(const char *a, const char *b)
{
    while (a < b && isspace((unsigned char)*a))
        a++;
    while (b > a && isspace((unsigned char)b[-1]))
        b--;
    return af_xstrndup(a, (size_t)(b - a));
}

/* The tool name: the first non-empty line after the label, without fences or quotes. */
static char *tool_name_at(const char *p)
{
    while (*p && isspace((unsigned char)*p))
        p++;
    const char *e = strchr(p, '\n');
    if (!e)
        e = p + strlen(p);
    while (e > p && (isspace((unsigned char)e[-1]) || e[-1] == '`' || e[-1] == '.'))
        e--;
    while (p < e && (*p == '`' || *p == '"' || *p == '\''))
        p++;
    while (e > p && (e[-1] == '"' || e[-1] == '\''))
        e--;
    return trimmed(p, e);
}

static int from_json(const char *reply, struct next_step *out)
{
    json_t *j = json_loads(reply, 0, NULL);
    if (!json_is_object(j)) {
        json_decref(j);
        return 0;
    }
    const char *c = json_string_value(json_object_get(j, "context"));
    const char *g = json_string_value(json_object_get(j, "sub_goal"));
    const char *t = json_string_value(json_object_get(j, "tool_name"));
    const char *why = json_string_value(json_object_get(j, "justification"));
    int ok = c && g && t;
    if (ok) {
        out->context = trimmed(c, c + strlen(c));
        out->sub_goal = trimmed(g, g + strlen(g));
        out->tool_name = trimmed(t, t + strlen(t));
        out->justification = why ? af_xstrdup(why) : NULL;
    }
    json_decref(j);
    return ok;
}

int parse_next_step(const char *reply, struct next_step *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!reply) {
        snprintf(err, errlen, "empty reply");
        return AF_EPARSE;
    }
    if (from_json(reply, out)) {
        if (out->tool_name[0])
            return AF_OK;
        next_step_deinit(out);
    }
    char *text = strip_bold(reply);
    const char *pos = text, *c = NULL, *g = NULL, *t = NULL;
    for (;;) {
        const char *c1 = find_ci(pos, "Context:");
        const char *g1 = c1 ? find_ci(c1 + 8, "Sub-Goal:") : NULL;
        const char *t1 = g1 ? find_ci(g1 + 9, "Tool Name:") : NULL;
        if (!t1)
            break;
        c = c1, g = g1, t = t1;
        const char *end = strstr(t1 + 10, "\n\n");
        pos = end ? end : t1 + 10;
    }
    if (!t) {
        snprintf(err, errlen, "%s",
                 find_ci(text, "Tool Name:") ? "missing a 'Context:' or 'Sub-Goal:' field before "
                                               "'Tool Name:'"
                                             : "missing the 'Context:', 'Sub-Goal:' and 'Tool "
                                               "Name:' fields");
        free(text);
        return AF_EPARSE;
    }
    out->context = trimmed(c + 8, g);
    out->sub_goal = trimmed(g + 9, t);
    out->tool_name = tool_name_at(t + 10);
    const char *j = find_ci(text, "Justification:");
    if (j && j < c)
        out->justification = trimmed(j + 14, c);
    free(text);
    if (!out->tool_name[0]) {
        snprintf(err, errlen, "the 'Tool Name:' field is empty");
        next_step_deinit(out);
        return AF_EPARSE;
    }
    return AF_OK;
}

void next_step_deinit(struct next_step *s)
{
    if (!s)
        return;
    free(s->justification);
    free(s->context);
    free(s->sub_goal);
    free(s->tool_name);
    memset(s, 0, sizeof *s);
}

/* Matches conclusion\**:?\s*\**\s*(\w+) at p (p points just past "conclusion"). */
static int conclusion_word(const char *p, const char **w, size_t *wlen)
{
    while (*p == '*')
        p++;
    if (*p == ':')
        p++;
    while (isspace((unsigned char)*p))
        p++;
    while (*p == '*')
        p++;
    while (isspace((unsigned char)*p))
        p++;
    const char *s = p;
    while (isalnum((unsigned char)*p) || *p == '_')
        p++;
    *w = s;
    *wlen = (size_t)(p - s);
    return p > s;
}

int parse_verdict(const char *reply, int *explicit_conclusion)
{
    *explicit_conclusion = 0;
    if (!reply)
        return 0;
    const char *w = NULL, *p = reply;
    size_t wlen = 0;
    while ((p = find_ci(p, "conclusion")) != NULL) {
        const char *w1;
        size_t l1;
        if (conclusion_word(p + 10, &w1, &l1))
            w = w1, wlen = l1;
        p += 10;
    }
    if (w && wlen == 4 && strncasecmp(w, "STOP", 4) == 0) {
        *explicit_conclusion = 1;
        return 1;
    }
    if (w && wlen == 8 && strncasecmp(w, "CONTINUE", 8) == 0) {
        *explicit_conclusion = 1;
        return 0;
    }
    if (find_ci(reply, "stop"))
        return 1;
    return 0;
}

static const char *rfind_ci(const char *hay, const char *needle)
{
    const char *last = NULL;
    for (const char *p = hay; (p = find_ci(p, needle)) != NULL; p++)
        last = p;
    return last;
}

char *parse_final_answer(const char *reply)
{
    if (!reply)
        return af_xstrdup("");
    const char *close = rfind_ci(reply, "</answer>");
    if (close) {
        const char *open = NULL;
        for (const char *p = reply; (p = find_ci(p, "<answer>")) != NULL && p < close; p++)
            open = p;
        if (open)
            return trimmed(open + 8, close);
    }
    char *text = strip_bold(reply);
    const char *a = rfind_ci(text, "Answer:");
    char *out = a ? trimmed(a + 7, a + strlen(a)) : trimmed(text, text + strlen(text));
    free(text);
    if (!out[0]) {
        free(out);
        return trimmed(reply, reply + strlen(reply));
    }
    return out;
}
