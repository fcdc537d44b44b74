/*
 * mcq.c - the multiple-choice scorer for GPQA and MedQA.
 *
 * Options come from "choices" (GPQA) or "options" (MedQA), each "X. text". The gold is
 * "answer_idx" when present (GPQA), else the option equal to "answer" as a whole ("A. 0.9")
 * or as its text (MedQA's "Colorectal cancer"). A prediction names an option by its letter
 * ("C", "(C)", "C.", "The answer is C", "C. text") or by its text (SQuAD-normalised, or
 * numerically equal). A letter whose text names another option is a contradiction: wrong.
 * No state; safe from any thread.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "score/score_int.h"

#define MCQ_MAX 26

struct mcq {
    const char *text[MCQ_MAX]; /* borrowed: option text after the "X. " prefix */
    size_t n;
    size_t gold;
};

/* Option i's text, without a leading "X. " / "X) " label. */
static const char *option_text(const char *opt)
{
    if (isupper((unsigned char)opt[0]) && (opt[1] == '.' || opt[1] == ')'))
        return opt[2] == ' ' ? opt + 3 : opt + 2;
    return opt;
}

static int load_options(const json_t *item, struct mcq *m, char *err, size_t errlen)
{
    const json_t *opts = json_object_get(item, "choices");
    if (!json_is_array(opts))
        opts = json_object_get(item, "options");
    m->n = json_is_array(opts) ? json_array_size(opts) : 0;
    if (m->n == 0 || m->n > MCQ_MAX) {
        af_errf(err, errlen, "item fields \"choices\"/\"options\": expected 1-26 strings");
        return AF_EPARSE;
    }
    const char *ans = af_json_get_str(item, "answer");
    m->gold = m->n;
    for (size_t i = 0; i < m->n; i++) {
        const char *o = json_string_value(json_array_get(opts, i));
        if (!o) {
            af_errf(err, errlen, "item option %zu: expected a string", i);
            return AF_EPARSE;
        }
        m->text[i] = option_text(o);
        if (m->gold == m->n && ans && (strcmp(ans, o) == 0 || strcmp(ans, m->text[i]) == 0))
            m->gold = i;
    }
    if (m->gold == m->n && ans && isupper((unsigned char)ans[0]) && ans[1] == '\0' &&
        (size_t)(ans[0] - 'A') < m->n)
        m->gold = (size_t)(ans[0] - 'A');
    const json_t *idx = json_object_get(item, "answer_idx");
    if (json_is_integer(idx) && json_integer_value(idx) >= 0 &&
        (size_t)json_integer_value(idx) < m->n)
        m->gold = (size_t)json_integer_value(idx);
    if (m->gold == m->n) {
        af_errf(err, errlen, "item field \"answer\": matches no option");
        return AF_EPARSE;
    }
    return AF_OK;
}

/* The option whose text matches s (normalised, or equal as numbers); m->n when none. */
static size_t match_text(const struct mcq *m, const char *s)
{
    char *ns = score_norm_squad(s);
    double v, w;
    int num = score_parse_number(s, &v) == 0;
    size_t hit = m->n;
    for (size_t i = 0; i < m->n && hit == m->n && *ns; i++) {
        char *no = score_norm_squad(m->text[i]);
        if (strcmp(ns, no) == 0 || (num && score_parse_number(m->text[i], &w) == 0 && v == w))
            hit = i;
        free(no);
    }
    free(ns);
    return hit;
}

/* Skips lead-ins such as "The answer is", "Answer:", "Option", "**" and whitespace. */
static const char *strip_lead(const char *s)
{
    static const char *const pre[] = {"the correct answer is",
                                      "the correct option is",
                                      "the answer is",
                                      "final answer",
                                      "correct answer",
                                      "answer is",
                                      "answer",
                                      "option",
                                      "choice"};
    for (int again = 1; again;) {
        again = 0;
        while (isspace((unsigned char)*s) || *s == '*' || *s == '$' || *s == ':')
            s++;
        for (size_t i = 0; i < sizeof pre / sizeof pre[0] && !again; i++) {
            size_t k = strlen(pre[i]);
            if (strncasecmp(s, pre[i], k) == 0 && !isalnum((unsigned char)s[k])) {
                s += k;
                again = 1;
            }
        }
    }
    return s;
}

/* Reads a leading option letter: returns its index (may be >= m->n) and sets *rest to the
 * text after it, or returns -1 when s does not start with a letter label. */
static int parse_letter(const char *s, const char **rest)
{
    int paren = *s == '(' || *s == '[';
    const char *p = s + paren;
    char c = *p;
    if (!isalpha((unsigned char)c))
        return -1;
    p++;
    if (paren && (*p == ')' || *p == ']'))
        p++;
    int labelled = paren || *p == '.' || *p == ':' || *p == ')';
    if (*p == '.' || *p == ':' || *p == ')')
        p++;
    const char *q = p;
    while (*q && (isspace((unsigned char)*q) || strchr(".*$", *q)))
        q++;
    int alone = *q == '\0';
    if (!alone && (!labelled || !isspace((unsigned char)*p)))
        return -1;
    if (!isupper((unsigned char)c) && !alone)
        return -1;
    *rest = alone ? q : p;
    return toupper((unsigned char)c) - 'A';
}

int score_mcq(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen)
{
    struct mcq m;
    int rc = load_options(item, &m, err, errlen);
    if (rc != AF_OK)
        return rc;
    const char *s = strip_lead(pred), *rest = "";
    int letter = parse_letter(s, &rest);
    /* A letter past the last option may be an option's text (MedQA has an option "X"). */
    if (letter >= 0 && (size_t)letter >= m.n && match_text(&m, s) < m.n)
        letter = -1;
    size_t chosen = m.n;
    const char *reason = NULL;
    if (letter >= 0) {
        size_t t = *rest ? match_text(&m, rest) : m.n;
        chosen = (size_t)letter;
        if (t < m.n && t != chosen) {
            reason = "the letter and the text name different options";
            chosen = m.n;
        }
    } else {
        chosen = match_text(&m, s);
        if (chosen == m.n)
            chosen = match_text(&m, pred);
        if (chosen == m.n)
            reason = "no option recognised";
    }
    out->correct = chosen == m.gold;
    out->f1 = out->correct ? 1.0 : 0.0;
    char g[2] = {(char)('A' + m.gold), 0};
    json_object_set_new(out->details, "gold", json_string(g));
    if (chosen < m.n || (letter >= 0 && !reason)) {
        char c[2] = {(char)('A' + chosen), 0};
        json_object_set_new(out->details, "chosen", json_string(c));
    }
    if (reason)
        json_object_set_new(out->details, "reason", json_string(reason));
    return AF_OK;
}
