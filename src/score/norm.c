/*
 * norm.c - the lenient readings of an answer that the rule scorers share, for the forms a
 * judge would accept (docs/SCORING.md):
 *   - a quantity: one number with its decoration dropped: a leading `x =` assignment, LaTeX
 *     wrappers and spacing (\boxed, \text, \mathrm, \, \! {,}), degree marks (^\circ, °),
 *     currency and percent signs, thousands separators (, ' and thin or no-break spaces),
 *     and a trailing unit of letters (`12 cm`, `60 km/h`, `5 m^2`);
 *   - a calendar date: `30 August 2007`, `August 30, 2007`, `30th of Aug. 2007`, `2007-08-30`.
 * No state; safe from any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/xalloc.h"
#include "score/score_int.h"

/* Longest unit accepted after a number, in bytes (after spaces are dropped). */
#define UNIT_MAX_BYTES 24

/* Decoration deleted wherever it occurs; longer entries first where one is a prefix. */
static const char *const drop_seqs[] = {
    "^{\\circ}", "^\\circ",      "\\circ",       "\xc2\xb0", "\\%", "\\$",
    "\\,",       "\\!",          "\\;",          "\\ ",      "{,}", "\\left",
    "\\right",   "\xe2\x80\x89", "\xe2\x80\xaf", "\xc2\xa0", "\\(", "\\)",
};

/* LaTeX commands whose braces are dropped, keeping their content. */
static const char *const unwrap_cmds[] = {"\\boxed", "\\text", "\\mathrm", "\\mathbf", "\\textbf"};

/* Copies s into b without spaces, decoration and the wrappers above. */
static void strip_decoration(const char *s, struct af_buf *b)
{
    int depth_keep = 0; /* braces opened by an unwrapped command, still open */
    for (const char *p = s; *p;) {
        int hit = 0;
        for (size_t i = 0; !hit && i < sizeof drop_seqs / sizeof drop_seqs[0]; i++) {
            size_t k = strlen(drop_seqs[i]);
            if (strncmp(p, drop_seqs[i], k) == 0) {
                p += k;
                hit = 1;
            }
        }
        for (size_t i = 0; !hit && i < sizeof unwrap_cmds / sizeof unwrap_cmds[0]; i++) {
            size_t k = strlen(unwrap_cmds[i]);
            if (strncmp(p, unwrap_cmds[i], k) == 0 && p[k] == '{') {
                p += k + 1;
                depth_keep++;
                hit = 1;
            }
        }
        if (hit)
            continue;
        if (*p == '}' && depth_keep > 0) {
            depth_keep--;
            p++;
            continue;
        }
        if (!isspace((unsigned char)*p) && !strchr("$%,'*", *p))
            (void)af_buf_putc(b, *p);
        p++;
    }
}

/* Length of a leading `name=` (a letter, then letters, digits or '_'; spaces are gone by
 * now), or 0. */
static size_t assignment_len(const char *s)
{
    const char *p = s;
    if (!isalpha((unsigned char)*p))
        return 0;
    while (isalnum((unsigned char)*p) || *p == '_')
        p++;
    return *p == '=' && p[1] != '=' ? (size_t)(p + 1 - s) : 0;
}

/* Length of the decimal number at the start of t ([+-]digits[.digits][e[+-]digits]), or 0. */
static size_t number_len(const char *t)
{
    size_t i = 0, n_dig = 0;
    if (t[i] == '+' || t[i] == '-')
        i++;
    for (; isdigit((unsigned char)t[i]); i++)
        n_dig++;
    if (t[i] == '.')
        for (i++; isdigit((unsigned char)t[i]); i++)
            n_dig++;
    if (n_dig == 0)
        return 0;
    if (t[i] == 'e' || t[i] == 'E') {
        size_t j = i + 1;
        if (t[j] == '+' || t[j] == '-')
            j++;
        if (isdigit((unsigned char)t[j])) {
            while (isdigit((unsigned char)t[j]))
                j++;
            i = j;
        }
    }
    return i;
}

/* Whether u (spaces already dropped) reads as a unit: letters, '/' and '.', with an exponent
 * of 2 or 3 after '^' or after an 'm' (m2, cm^3, km/h). Other digits are refused, so that
 * `5 x 3` is not read as 5. */
static int is_unit(const char *u)
{
    size_t n = strlen(u);
    if (n == 0)
        return 1;
    if (n > UNIT_MAX_BYTES || !isalpha((unsigned char)u[0]))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = u[i];
        if (isalpha((unsigned char)c) || c == '/' || c == '.')
            continue;
        if (c == '^' && i + 1 < n && (u[i + 1] == '2' || u[i + 1] == '3'))
            continue;
        int exp = (c == '2' || c == '3') && (u[i - 1] == 'm' || u[i - 1] == '^');
        if (exp && (i + 1 == n || u[i + 1] == '/'))
            continue;
        return 0;
    }
    return 1;
}

int score_parse_quantity(const char *s, double *out)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    strip_decoration(s ? s : "", &b);
    const char *t = af_buf_str(&b);
    t += assignment_len(t);
    size_t n = number_len(t);
    int rc = -1;
    if (n > 0) {
        char *num = af_xstrndup(t, n);
        size_t un = strlen(t + n);
        char *unit = af_xstrndup(t + n, un > 0 && t[n + un - 1] == '.' ? un - 1 : un);
        char *end = NULL;
        errno = 0;
        double v = strtod(num, &end);
        if (errno == 0 && *end == '\0' && isfinite(v) && is_unit(unit)) {
            *out = v;
            rc = 0;
        }
        free(num);
        free(unit);
    }
    af_buf_deinit(&b);
    return rc;
}

static const char *const month_names[12] = {"january",   "february", "march",    "april",
                                            "may",       "june",     "july",     "august",
                                            "september", "october",  "november", "december"};

/* Month 1..12 for a full name, a 3-letter abbreviation or "sept" (w of n bytes), else 0. */
static int month_of(const char *w, size_t n)
{
    for (int m = 0; m < 12; m++) {
        size_t full = strlen(month_names[m]);
        if ((n == full || n == 3 || (m == 8 && n == 4)) && n <= full &&
            strncasecmp(w, month_names[m], n) == 0)
            return m + 1;
    }
    return 0;
}

/* Splits s into at most 8 words of letters or digits (other bytes separate them, except
 * that an ordinal suffix stays with its digits). Returns the count, or -1 for more. */
static int date_words(const char *s, const char **w, size_t *len)
{
    int n = 0;
    for (const char *p = s; *p;) {
        if (!isalnum((unsigned char)*p)) {
            if (!strchr(" ,.-/\t", *p))
                return -1;
            p++;
            continue;
        }
        if (n == 8)
            return -1;
        const char *q = p;
        while (isalnum((unsigned char)*q))
            q++;
        w[n] = p;
        len[n++] = (size_t)(q - p);
        p = q;
    }
    return n;
}

/* A day of the month written as digits with an optional st/nd/rd/th, else 0. */
static int day_of(const char *w, size_t n)
{
    size_t d = 0;
    while (d < n && d < 3 && isdigit((unsigned char)w[d]))
        d++;
    if (d == 0 || d > 2)
        return 0;
    if (d < n &&
        !(n - d == 2 && (strncasecmp(w + d, "st", 2) == 0 || strncasecmp(w + d, "nd", 2) == 0 ||
                         strncasecmp(w + d, "rd", 2) == 0 || strncasecmp(w + d, "th", 2) == 0)))
        return 0;
    int v = (w[0] - '0') * (d == 2 ? 10 : 1) + (d == 2 ? w[1] - '0' : 0);
    return v >= 1 && v <= 31 ? v : 0;
}

static int year_of(const char *w, size_t n)
{
    if (n < 3 || n > 4)
        return 0;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)w[i]))
            return 0;
        v = v * 10 + (w[i] - '0');
    }
    return v;
}

/* A month written as one or two digits, else 0. */
static int month_num(const char *w, size_t n)
{
    if (n < 1 || n > 2 || !isdigit((unsigned char)w[0]) ||
        (n == 2 && !isdigit((unsigned char)w[1])))
        return 0;
    int v = n == 2 ? (w[0] - '0') * 10 + (w[1] - '0') : w[0] - '0';
    return v >= 1 && v <= 12 ? v : 0;
}

int score_parse_date(const char *s, int *year, int *month, int *day)
{
    const char *w[8];
    size_t len[8];
    int n = date_words(s ? s : "", w, len);
    if (n == 4 && len[1] == 2 && strncasecmp(w[1], "of", 2) == 0) { /* "30th of August 2007" */
        w[1] = w[2];
        len[1] = len[2];
        w[2] = w[3];
        len[2] = len[3];
        n = 3;
    }
    if (n != 3)
        return -1;
    int y = year_of(w[2], len[2]), m = month_of(w[1], len[1]), d = day_of(w[0], len[0]);
    if (!(y && m && d)) { /* "August 30, 2007" */
        m = month_of(w[0], len[0]);
        d = day_of(w[1], len[1]);
    }
    if (!(y && m && d) && len[0] == 4) { /* "2007-08-30" */
        y = year_of(w[0], len[0]);
        m = month_num(w[1], len[1]);
        d = len[2] <= 2 ? day_of(w[2], len[2]) : 0;
    }
    if (!(y && m && d))
        return -1;
    *year = y;
    *month = m;
    *day = d;
    return 0;
}

int score_same_date(const char *a, const char *b)
{
    int ya, ma, da, yb, mb, db;
    return score_parse_date(a, &ya, &ma, &da) == 0 && score_parse_date(b, &yb, &mb, &db) == 0 &&
           ya == yb && ma == mb && da == db;
}

int score_same_quantity(const char *pred, const char *gold)
{
    double p, g;
    if (score_parse_number(gold, &g) != 0 || score_parse_quantity(pred, &p) != 0)
        return 0;
    return p == g || fabs(p - g) <= 1e-9 * fmax(fabs(p), fabs(g));
}
