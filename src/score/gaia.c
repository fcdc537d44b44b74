/*
 * gaia.c - GAIA's quasi-exact match, following the published scorer (question_scorer):
 *   - a numeric gold: drop '$', '%' and ',' from the prediction and compare as floats;
 *   - a gold containing ',' or ';': split both on [,;], same length, compare elementwise
 *     (numbers as above, strings without whitespace, lowercased, punctuation kept);
 *   - otherwise: compare without whitespace and ASCII punctuation, lowercased.
 * Beyond the published scorer, as a judge would: a number with a unit, an `x =` or LaTeX
 * around it matches a numeric gold, and a date in another form a date (norm.c).
 * No state; safe from any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "score/score_int.h"

/* Python's float(s) for plain decimals: optional surrounding whitespace, one number. */
static int py_float(const char *s, size_t n, double *out)
{
    char *t = score_trim_dup(s, n);
    size_t len = strlen(t);
    int rc = -1;
    if (len > 0 && strspn(t, "0123456789+-.eE") == len) {
        char *end = NULL;
        errno = 0;
        double v = strtod(t, &end);
        if (errno == 0 && end == t + len) {
            *out = v;
            rc = 0;
        }
    }
    free(t);
    return rc;
}

/* normalize_number_str: removes '$', '%', ','; +inf when the rest is not a float. */
static double gaia_number(const char *s, size_t n)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++)
        if (!strchr("$%,", s[i]))
            (void)af_buf_putc(&b, s[i]);
    double v;
    if (py_float(af_buf_str(&b), b.len, &v) != 0)
        v = HUGE_VAL;
    af_buf_deinit(&b);
    return v;
}

/* normalize_str: drops whitespace, lowercases, drops ASCII punctuation when asked. */
static char *gaia_norm(const char *s, size_t n, int remove_punct)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isspace(c) || (remove_punct && c < 0x80 && ispunct(c)))
            continue;
        (void)af_buf_putc(&b, (char)(c < 0x80 ? tolower(c) : c));
    }
    return af_buf_detach(&b);
}

static int str_eq(const char *a, size_t na, const char *b, size_t nb, int remove_punct)
{
    char *x = gaia_norm(a, na, remove_punct), *y = gaia_norm(b, nb, remove_punct);
    int eq = strcmp(x, y) == 0;
    free(x);
    free(y);
    return eq;
}

static size_t count_elems(const char *s)
{
    size_t n = 1;
    for (; *s; s++)
        n += (*s == ',' || *s == ';');
    return n;
}

/* score_same_quantity on two spans. */
static int same_quantity(const char *p, size_t np, const char *g, size_t ng)
{
    char *x = af_xstrndup(p, np), *y = af_xstrndup(g, ng);
    int same = score_same_quantity(x, y);
    free(x);
    free(y);
    return same;
}

/* Compares the two lists element by element; sets *reason on a mismatch. */
static int list_eq(const char *pred, const char *gold, const char **reason)
{
    if (count_elems(pred) != count_elems(gold)) {
        *reason = "list lengths differ";
        return 0;
    }
    const char *p = pred, *g = gold;
    for (;;) {
        size_t np = strcspn(p, ",;"), ng = strcspn(g, ",;");
        double gv;
        int ok = py_float(g, ng, &gv) == 0 ? gaia_number(p, np) == gv || same_quantity(p, np, g, ng)
                                           : str_eq(p, np, g, ng, 0);
        if (!ok) {
            *reason = "list element differs";
            return 0;
        }
        if (!g[ng])
            return 1;
        p += np + 1;
        g += ng + 1;
    }
}

int score_gaia(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen)
{
    char *gold = score_gold_text(json_object_get(item, "answer"));
    if (!gold) {
        af_errf(err, errlen, "item field \"answer\": expected a string");
        return AF_EPARSE;
    }
    const char *reason = NULL, *kind;
    double gv;
    int y, m, d;
    if (py_float(gold, strlen(gold), &gv) == 0) {
        kind = "number";
        out->correct = gaia_number(pred, strlen(pred)) == gv || score_same_quantity(pred, gold);
    } else if (score_parse_date(gold, &y, &m, &d) == 0) { /* before lists: "May 1, 2020" */
        kind = "date";
        out->correct =
            str_eq(pred, strlen(pred), gold, strlen(gold), 1) || score_same_date(pred, gold);
    } else if (strpbrk(gold, ",;")) {
        kind = "list";
        out->correct = list_eq(pred, gold, &reason);
    } else {
        kind = "string";
        out->correct = str_eq(pred, strlen(pred), gold, strlen(gold), 1);
    }
    json_object_set_new(out->details, "kind", json_string(kind));
    json_object_set_new(out->details, "gold", json_string(gold));
    if (reason)
        json_object_set_new(out->details, "reason", json_string(reason));
    out->f1 = out->correct ? 1.0 : 0.0;
    free(gold);
    return AF_OK;
}
