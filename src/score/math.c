/*
 * math.c - number parsing shared by the scorers, and the integer-answer scorer for AIME24
 * and AMC23: the prediction must read as one number (score_parse_quantity: `x = 33`,
 * `\boxed{45^\circ}` and `12 cm` count) that is integral and equal to a gold
 * (an int, an integral real such as 27.0, or a numeric string; a list means any of them).
 *
 * No state; safe from any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "score/score_int.h"

/* Removes one wrapper `\name{...}` around the whole of s (in place), if present. */
static void unwrap(char *s, const char *name)
{
    size_t k = strlen(name), n = strlen(s);
    if (n > k + 1 && strncmp(s, name, k) == 0 && s[k] == '{' && s[n - 1] == '}') {
        memmove(s, s + k + 1, n - k - 2);
        s[n - k - 2] = '\0';
    }
}

int score_parse_number(const char *s, double *out)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (const char *p = s ? s : ""; *p; p++)
        if (!isspace((unsigned char)*p) && !strchr("$%,*", *p))
            (void)af_buf_putc(&b, *p);
    if (!b.data)
        return -1;
    char *t = b.data;
    unwrap(t, "\\boxed");
    unwrap(t, "\\text");
    unwrap(t, "\\mathbf");
    size_t n = strlen(t);
    if (n > 0 && t[n - 1] == '.')
        t[--n] = '\0';
    int rc = -1;
    /* strtod also takes hex, inf and nan; the answers we score are plain decimals. */
    if (n > 0 && strspn(t, "0123456789+-.eE") == n) {
        char *end = NULL;
        errno = 0;
        double v = strtod(t, &end);
        if (errno == 0 && end == t + n && isfinite(v)) {
            *out = v;
            rc = 0;
        }
    }
    af_buf_deinit(&b);
    return rc;
}

static int is_integral(double v)
{
    return fabs(v - round(v)) < 1e-9 && fabs(v) < 9.0e15;
}

/* Parses one gold value as an integer; returns 0 or -1. */
static int gold_int(const json_t *g, double *out)
{
    double v;
    if (json_is_integer(g))
        v = (double)json_integer_value(g);
    else if (json_is_real(g))
        v = json_real_value(g);
    else if (!json_is_string(g) || score_parse_number(json_string_value(g), &v) != 0)
        return -1;
    if (!is_integral(v))
        return -1;
    *out = round(v);
    return 0;
}

int score_math(const json_t *item, const char *pred, struct af_score *out, char *err, size_t errlen)
{
    const json_t *ans = json_object_get(item, "answer");
    size_t n = json_is_array(ans) ? json_array_size(ans) : 1, n_gold = 0;
    double p = 0.0;
    int have_pred = score_parse_number(pred, &p) == 0 || score_parse_quantity(pred, &p) == 0;
    if (!have_pred)
        json_object_set_new(out->details, "reason", json_string("not a number"));
    else if (!is_integral(p))
        json_object_set_new(out->details, "reason", json_string("not an integer"));
    for (size_t i = 0; i < n; i++) {
        double g;
        if (gold_int(json_is_array(ans) ? json_array_get(ans, i) : ans, &g) != 0)
            continue;
        n_gold++;
        if (have_pred && is_integral(p) && round(p) == g) {
            out->correct = 1;
            json_object_set_new(out->details, "gold", json_integer((json_int_t)g));
        }
    }
    if (n_gold == 0) {
        af_errf(err, errlen, "item field \"answer\": expected an integer or a list of them");
        return AF_EPARSE;
    }
    if (have_pred && is_integral(p))
        json_object_set_new(out->details, "value", json_integer((json_int_t)round(p)));
    out->f1 = out->correct ? 1.0 : 0.0;
    return AF_OK;
}
