/*
 * game24.c - the exact Game-of-24 checker.
 *
 * The four numbers come from the item's "question" (a list of ints), else from the first
 * [...] list in its "query". The expression (integers, + - * / x × ÷ and their LaTeX
 * spellings, parentheses, an optional "= 24") is parsed by recursive descent and evaluated
 * in exact rationals (int64 numerator/denominator, overflow-checked, gcd-reduced). It is
 * correct when it uses the given multiset of numbers exactly and equals 24.
 * No state; safe from any thread.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "score/score_int.h"

#define G24_MAX_NUMS 16

struct rat {
    int64_t n, d; /* d > 0, gcd(|n|, d) == 1 */
};

struct g24 {
    const char *p;   /* cursor into the expression */
    const char *end; /* end of the expression */
    int64_t used[G24_MAX_NUMS];
    size_t n_used;
    char reason[96]; /* set on the first failure */
};

static int64_t gcd64(int64_t a, int64_t b)
{
    a = a < 0 ? -a : a;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

static int fail(struct g24 *g, const char *msg)
{
    if (!g->reason[0])
        snprintf(g->reason, sizeof g->reason, "%s", msg);
    return -1;
}

/* r = (an * bd op bn * ad) / (ad * bd) for op '+'/'-'; '*' and '/' likewise, checked. */
static int rat_op(struct g24 *g, struct rat a, char op, struct rat b, struct rat *r)
{
    int64_t x, y, n, d;
    if (op == '/') {
        if (b.n == 0)
            return fail(g, "division by zero");
        b = (struct rat){b.d * (b.n < 0 ? -1 : 1), b.n < 0 ? -b.n : b.n};
        op = '*';
    }
    int ovf;
    if (op == '*') {
        ovf = (int)__builtin_mul_overflow(a.n, b.n, &n) | (int)__builtin_mul_overflow(a.d, b.d, &d);
    } else {
        ovf = (int)__builtin_mul_overflow(a.n, b.d, &x) |
              (int)__builtin_mul_overflow(b.n, a.d, &y) | (int)__builtin_mul_overflow(a.d, b.d, &d);
        if (!ovf)
            ovf = op == '+' ? __builtin_add_overflow(x, y, &n) : __builtin_sub_overflow(x, y, &n);
    }
    if (ovf)
        return fail(g, "arithmetic overflow");
    int64_t c = gcd64(n, d);
    *r = (struct rat){n / c, d / c};
    return 0;
}

static void skip_ws(struct g24 *g)
{
    while (g->p < g->end && (isspace((unsigned char)*g->p) || *g->p == '$'))
        g->p++;
}

/* Reads the next operator among `ops` ("+-" or "* /"), returning it or 0. */
static char next_op(struct g24 *g, const char *ops)
{
    static const struct {
        const char *s;
        char op;
    } spell[] = {
        {"+", '+'}, {"-", '-'},        {"\xe2\x88\x92", '-'}, {"*", '*'},      {"\xc3\x97", '*'},
        {"x", '*'}, {"X", '*'},        {"\\times", '*'},      {"\\cdot", '*'}, {"\xc2\xb7", '*'},
        {"/", '/'}, {"\xc3\xb7", '/'}, {"\\div", '/'}};
    skip_ws(g);
    for (size_t i = 0; i < sizeof spell / sizeof spell[0]; i++) {
        size_t k = strlen(spell[i].s);
        if ((size_t)(g->end - g->p) >= k && memcmp(g->p, spell[i].s, k) == 0 &&
            strchr(ops, spell[i].op)) {
            g->p += k;
            return spell[i].op;
        }
    }
    return 0;
}

static int parse_expr(struct g24 *g, struct rat *r, int depth);

static int parse_factor(struct g24 *g, struct rat *r, int depth)
{
    skip_ws(g);
    if (depth > 64)
        return fail(g, "expression nested too deeply");
    if (g->p < g->end && (*g->p == '(' || *g->p == '[')) {
        char close = *g->p == '(' ? ')' : ']';
        g->p++;
        if (parse_expr(g, r, depth + 1) != 0)
            return -1;
        skip_ws(g);
        if (g->p >= g->end || *g->p != close)
            return fail(g, "unbalanced parentheses");
        g->p++;
        return 0;
    }
    if (next_op(g, "-")) {
        if (parse_factor(g, r, depth + 1) != 0)
            return -1;
        r->n = -r->n;
        return 0;
    }
    if (g->p >= g->end || !isdigit((unsigned char)*g->p))
        return fail(g, "not an arithmetic expression");
    int64_t v = 0;
    while (g->p < g->end && isdigit((unsigned char)*g->p)) {
        if (v > 100000000)
            return fail(g, "number too large");
        v = v * 10 + (*g->p++ - '0');
    }
    if (g->p < g->end && *g->p == '.')
        return fail(g, "not an integer");
    if (g->n_used == G24_MAX_NUMS)
        return fail(g, "too many numbers");
    g->used[g->n_used++] = v;
    *r = (struct rat){v, 1};
    return 0;
}

static int parse_term(struct g24 *g, struct rat *r, int depth)
{
    if (parse_factor(g, r, depth) != 0)
        return -1;
    char op;
    while ((op = next_op(g, "*/")) != 0) {
        struct rat b;
        if (parse_factor(g, &b, depth) != 0 || rat_op(g, *r, op, b, r) != 0)
            return -1;
    }
    return 0;
}

static int parse_expr(struct g24 *g, struct rat *r, int depth)
{
    if (parse_term(g, r, depth) != 0)
        return -1;
    char op;
    while ((op = next_op(g, "+-")) != 0) {
        struct rat b;
        if (parse_term(g, &b, depth) != 0 || rat_op(g, *r, op, b, r) != 0)
            return -1;
    }
    return 0;
}

/* The given numbers: item.question (ints), else the first [a, b, ...] in item.query. */
static size_t item_numbers(const json_t *item, int64_t *nums)
{
    const json_t *q = json_object_get(item, "question");
    size_t n = 0;
    if (json_is_array(q)) {
        for (size_t i = 0; i < json_array_size(q) && n < G24_MAX_NUMS; i++)
            if (json_is_integer(json_array_get(q, i)))
                nums[n++] = json_integer_value(json_array_get(q, i));
        return n == json_array_size(q) ? n : 0;
    }
    const char *s = af_json_get_str(item, "query");
    const char *b = s ? strchr(s, '[') : NULL;
    if (!b)
        return 0;
    while (*b && *b != ']' && n < G24_MAX_NUMS) {
        b++;
        while (*b == ' ')
            b++;
        char *e;
        long v = strtol(b, &e, 10);
        if (e == b)
            return 0;
        nums[n++] = v;
        b = e;
        while (*b == ' ')
            b++;
        if (*b != ',' && *b != ']')
            return 0;
    }
    return n;
}

/* Checks that the numbers used are the given multiset; writes a reason and returns 0 if
 * not. */
static int check_multiset(struct g24 *g, const int64_t *given, size_t n_given)
{
    for (size_t i = 0; i < g->n_used + n_given; i++) {
        int64_t v = i < g->n_used ? g->used[i] : given[i - g->n_used];
        size_t u = 0, k = 0;
        for (size_t j = 0; j < g->n_used; j++)
            u += g->used[j] == v;
        for (size_t j = 0; j < n_given; j++)
            k += given[j] == v;
        if (u == k)
            continue;
        if (k == 0)
            snprintf(g->reason, sizeof g->reason, "uses %lld, which is not given", (long long)v);
        else if (u < k)
            snprintf(g->reason, sizeof g->reason, "omits %lld", (long long)v);
        else if (u == 2 && k == 1)
            snprintf(g->reason, sizeof g->reason, "uses %lld twice", (long long)v);
        else
            snprintf(g->reason, sizeof g->reason, "uses %lld %zu times, given %zu", (long long)v, u,
                     k);
        return 0;
    }
    return 1;
}

/* Drops "= 24" after the expression (or "24 =" before it); returns the span to parse. */
static void strip_equals(const char *s, const char **b, const char **e)
{
    *b = s;
    *e = s + strlen(s);
    const char *eq = strchr(s, '=');
    if (!eq || strchr(eq + 1, '='))
        return;
    char *rhs = score_trim_dup(eq + 1, strlen(eq + 1));
    char *lhs = score_trim_dup(s, (size_t)(eq - s));
    if (strcmp(rhs, "24") == 0)
        *e = eq;
    else if (strcmp(lhs, "24") == 0)
        *b = eq + 1;
    free(rhs);
    free(lhs);
}

int score_game24(const json_t *item, const char *pred, struct af_score *out, char *err,
                 size_t errlen)
{
    int64_t given[G24_MAX_NUMS];
    size_t n_given = item_numbers(item, given);
    if (n_given == 0) {
        af_errf(err, errlen, "item field \"question\": expected a list of integers");
        return AF_EPARSE;
    }
    struct g24 g;
    memset(&g, 0, sizeof g);
    strip_equals(pred, &g.p, &g.end);
    struct rat r = {0, 1};
    if (parse_expr(&g, &r, 0) == 0) {
        skip_ws(&g);
        if (g.p < g.end)
            fail(&g, "not an arithmetic expression");
    }
    if (!g.reason[0] && check_multiset(&g, given, n_given)) {
        char v[48];
        if (r.d == 1)
            snprintf(v, sizeof v, "%lld", (long long)r.n);
        else
            snprintf(v, sizeof v, "%lld/%lld", (long long)r.n, (long long)r.d);
        json_object_set_new(out->details, "value", json_string(v));
        out->correct = r.n == 24 && r.d == 1;
        if (!out->correct)
            snprintf(g.reason, sizeof g.reason, "evaluates to %s, not 24", v);
    }
    if (g.reason[0])
        json_object_set_new(out->details, "reason", json_string(g.reason));
    out->f1 = out->correct ? 1.0 : 0.0;
    return AF_OK;
}
