/*
 * extract.c - pulls the final answer out of a model's answer text.
 *
 * Order of preference: the last <answer>...</answer>, the last balanced \boxed{...}, the
 * rest of the last "Answer:" line, the whole text. Only reads its input; every result is a
 * fresh allocation, so this is safe from any thread.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agentflow/score.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "score/score_int.h"

char *score_trim_dup(const char *s, size_t n)
{
    while (n > 0 && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return af_xstrndup(s, n);
}

/* Case-insensitive strstr over the first n bytes of hay. */
static const char *find_ci(const char *hay, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (strncasecmp(hay + i, needle, k) == 0)
            return hay + i;
    return NULL;
}

/* The last <answer>...</answer> body: sets *b and *n, returns 1, or 0 when there is none. */
static int last_answer_tag(const char *s, size_t len, const char **b, size_t *n)
{
    int found = 0;
    const char *p = s;
    for (;;) {
        const char *open = find_ci(p, len - (size_t)(p - s), "<answer>");
        if (!open)
            break;
        const char *body = open + strlen("<answer>");
        const char *close = find_ci(body, len - (size_t)(body - s), "</answer>");
        if (!close)
            break;
        *b = body;
        *n = (size_t)(close - body);
        found = 1;
        p = close + strlen("</answer>");
    }
    return found;
}

/* The body of the last \boxed{...} whose braces balance. */
static int last_boxed(const char *s, size_t len, const char **b, size_t *n)
{
    static const char key[] = "\\boxed{";
    size_t k = sizeof key - 1;
    for (size_t i = len >= k ? len - k + 1 : 0; i-- > 0;) {
        if (memcmp(s + i, key, k) != 0)
            continue;
        int depth = 1;
        size_t j = i + k;
        for (; j < len && depth > 0; j++) {
            if (s[j] == '{')
                depth++;
            else if (s[j] == '}')
                depth--;
        }
        if (depth == 0) {
            *b = s + i + k;
            *n = j - 1 - (i + k);
            return 1;
        }
    }
    return 0;
}

/* Copies s without "**" into a fresh string. */
static char *strip_bold(const char *s, size_t n)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '*' && i + 1 < n && s[i + 1] == '*') {
            i++;
            continue;
        }
        (void)af_buf_putc(&b, s[i]);
    }
    return af_buf_detach(&b);
}

/* The text after the last "Answer:" on its line (or on the next non-empty line when the
 * rest of that line is empty). Returns a malloc'd string or NULL when there is none. */
static char *answer_line(const char *text)
{
    char *clean = strip_bold(text, strlen(text));
    size_t len = strlen(clean);
    const char *hit = NULL, *p = clean;
    while ((p = find_ci(p, len - (size_t)(p - clean), "answer:")) != NULL) {
        hit = p;
        p += strlen("answer:");
    }
    char *res = NULL;
    if (hit) {
        const char *v = hit + strlen("answer:");
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v == '\n' || *v == '\r')
            while (isspace((unsigned char)*v))
                v++;
        size_t n = strcspn(v, "\r\n");
        res = score_trim_dup(v, n);
    }
    free(clean);
    return res;
}

/* Unwraps a \boxed{} inside an already chosen span, else trims the span. */
static char *finish(const char *b, size_t n)
{
    const char *ib;
    size_t in;
    if (last_boxed(b, n, &ib, &in))
        return score_trim_dup(ib, in);
    return score_trim_dup(b, n);
}

char *af_score_extract(const char *text)
{
    const char *s = text ? text : "";
    size_t len = strlen(s);
    const char *b;
    size_t n;
    if (last_answer_tag(s, len, &b, &n))
        return finish(b, n);
    if (last_boxed(s, len, &b, &n))
        return score_trim_dup(b, n);
    char *line = answer_line(s);
    if (line && *line)
        return line;
    free(line);
    return score_trim_dup(s, len);
}
