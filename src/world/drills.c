/*
 * drills.c - copy drills: short chat conversations whose replies repeat numbers that the prompt
 * holds among others, for a model trained from scratch to learn to copy digits from its context
 * (af_world_drills, `agentflow world drills`).
 *
 * Why: the embedded model copies names early (they are rare tokens that point at themselves),
 * but digits are ten tokens seen everywhere, so copying a number needs attention that tracks
 * positions, and a model that does not find it answers with a typical value instead ("founded
 * in 1322" read, "1506" written). docs/WORLD.md has the figures. The drills put that skill in
 * many short conversations, in the flow's own shapes: a sub-goal's expression into a Python
 * call, a printed result into an answer, one attribute's value picked out of several, a list
 * repeated.
 *
 * Integer arithmetic on the world's seeded stream only, so a seed gives the same bytes.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentflow/world.h"
#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "world/world_int.h"

#define DRILL_SYSTEM "You are a careful assistant. Follow the reply format exactly.\n"

/* A number of 1 to 7 digits, shorter ones more often (the world's values run from small counts
 * to populations). */
static long drill_num(struct wrng *r)
{
    static const int digits[] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 7};
    const int d = digits[wrng_range(r, 0, (int)(sizeof digits / sizeof digits[0]) - 1)];
    long lo = 1, hi = 9;
    for (int i = 1; i < d; i++)
        lo *= 10;
    hi = lo * 10 - 1;
    if (d == 1)
        lo = 0;
    return lo + (long)(wrng_next(r) % (uint64_t)(hi - lo + 1));
}

/* An expression of 2 to 4 numbers with + - *, into b; its value (evaluated with * first, as
 * Python does) into *val. */
static void drill_expr(struct wrng *r, struct af_buf *b, long long *val)
{
    static const int nterms[] = {2, 2, 3, 3, 4};
    const int n = nterms[wrng_range(r, 0, 4)];
    long long sum = 0, term = drill_num(r);
    int sign = 1;
    af_buf_printf(b, "%lld", term);
    for (int i = 1; i < n; i++) {
        int op = wrng_range(r, 0, 2);
        const long v = drill_num(r);
        long long prod;
        /* a product past 10^15 becomes a sum: the values stay exact in 64 bits */
        if (op == 2 && (__builtin_mul_overflow(term, (long long)v, &prod) ||
                        prod > 1000000000000000LL || prod < -1000000000000000LL))
            op = 0;
        af_buf_printf(b, " %c %ld", "+-*"[op], v);
        if (op == 2) {
            term = prod;
        } else {
            sum += sign * term;
            sign = op == 0 ? 1 : -1;
            term = v;
        }
    }
    *val = sum + sign * term;
}

static json_t *drill_conv(const char *user, const char *reply)
{
    return json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}]}", "messages", "role", "system", "content",
                     DRILL_SYSTEM, "role", "user", "content", user, "role", "assistant", "content",
                     reply);
}

/* One of six kinds not used yet in this drill (a draw, then the next free one), so that the
 * question has one answer. */
static int drill_distinct6(struct wrng *r, int used[6])
{
    int k = wrng_range(r, 0, 5);
    while (used[k])
        k = (k + 1) % 6;
    used[k] = 1;
    return k;
}

/* A name of a random kind (a person, a place or an organisation's stem). */
static void drill_name_of(struct wrng *r, char *out, size_t len)
{
    static const int kinds[] = {WK_PERSON, WK_PERSON, WK_CITY, WK_COUNTRY, WK_ORG};
    world_random_name(r, kinds[wrng_range(r, 0, 4)], out, len);
}

/* A name drill into *user and *reply: the reply copies names that the prompt holds. */
static void drill_names(struct wrng *r, struct af_buf *user, struct af_buf *reply)
{
    static const char *const roles[] = {"founder", "creator", "birthplace",
                                        "capital", "country", "organisation"};
    static const int role_kind[] = {WK_PERSON, WK_PERSON, WK_CITY, WK_CITY, WK_COUNTRY, WK_ORG};
    char a[128], b[128];
    switch (wrng_range(r, 0, 2)) {
    case 0: { /* a list, repeated */
        const int n = wrng_range(r, 2, 4);
        af_buf_puts(user, "Repeat these names exactly: ");
        for (int i = 0; i < n; i++) {
            drill_name_of(r, a, sizeof a);
            af_buf_printf(user, "%s%s", i ? ", " : "", a);
            af_buf_printf(reply, "%s%s", i ? ", " : "", a);
        }
        break;
    }
    case 1: { /* one role's name among several */
        const int n = wrng_range(r, 2, 4), pick = wrng_range(r, 0, n - 1);
        int used[6] = {0};
        const char *role = NULL;
        af_buf_puts(user, "Facts: ");
        for (int i = 0; i < n; i++) {
            const int k = drill_distinct6(r, used);
            world_random_name(r, role_kind[k], a, sizeof a);
            af_buf_printf(user, "%sthe %s is %s", i ? "; " : "", roles[k], a);
            if (i == pick) {
                role = roles[k];
                af_buf_puts(reply, a);
            }
        }
        af_buf_printf(user, ".\nWhat is the %s?", role);
        break;
    }
    default: /* a result's name into the next search */
        world_random_name(r, WK_PERSON, a, sizeof a);
        world_random_name(r, WK_CITY, b, sizeof b);
        if (wrng_range(r, 0, 1)) {
            af_buf_printf(user,
                          "Result: %s was born in the city of %s in %ld.\nWrite the search for "
                          "the city.",
                          a, b, 1200 + (long)wrng_range(r, 0, 799));
            af_buf_printf(reply, "execution = tool.execute(query=\"%s\", k=3)", b);
        } else {
            af_buf_printf(user, "Result: %s founded %s Guild.\nWrite the search for the founder.",
                          a, b);
            af_buf_printf(reply, "execution = tool.execute(query=\"%s\", k=3)", a);
        }
        break;
    }
}

/* Drill i into *user and *reply. */
static void drill_one(struct wrng *r, struct af_buf *user, struct af_buf *reply)
{
    static const char *const attrs[] = {"year", "population", "height", "count", "price", "age"};
    struct af_buf e;
    af_buf_init(&e, AF_BUF_NOLIMIT);
    long long v = 0;
    switch (wrng_range(r, 0, 3)) {
    case 0: { /* a list, repeated */
        const int n = wrng_range(r, 2, 6);
        for (int i = 0; i < n; i++)
            af_buf_printf(&e, "%s%ld", i ? ", " : "", drill_num(r));
        af_buf_printf(user, "Repeat these numbers exactly: %s", af_buf_str(&e));
        af_buf_puts(reply, af_buf_str(&e));
        break;
    }
    case 1: /* a sub-goal's expression into the executor's call */
        drill_expr(r, &e, &v);
        af_buf_printf(user,
                      "Sub-Goal: Compute %s with Python.\nWrite the call with literal values only.",
                      af_buf_str(&e));
        af_buf_printf(reply, "execution = tool.execute(code=\"print(%s)\")", af_buf_str(&e));
        break;
    case 2: { /* one attribute's value among several */
        const int n = wrng_range(r, 2, 4), pick = wrng_range(r, 0, n - 1);
        int used[6] = {0};
        long val = 0;
        const char *name = NULL;
        af_buf_puts(user, "Facts: ");
        for (int i = 0; i < n; i++) {
            const int a = drill_distinct6(r, used);
            const long x = drill_num(r);
            af_buf_printf(user, "%sthe %s is %ld", i ? "; " : "", attrs[a], x);
            if (i == pick)
                name = attrs[a], val = x;
        }
        af_buf_printf(user, ".\nWhat is the %s?", name);
        af_buf_printf(reply, "%ld", val);
        break;
    }
    default: /* a printed result into the answer */
        drill_expr(r, &e, &v);
        af_buf_printf(user,
                      "The program printed: %lld\nCode: print(%s)\nState the computation and its "
                      "result.",
                      v, af_buf_str(&e));
        af_buf_printf(reply, "%s = %lld", af_buf_str(&e), v);
        break;
    }
    af_buf_deinit(&e);
}

struct af_world_drills_params af_world_drills_default_params(void)
{
    return (struct af_world_drills_params){.n = 40000, .seed = 7, .names = 0};
}

int af_world_drills(const char *path, const struct af_world_drills_params *p, char *err,
                    size_t errlen)
{
    if (!(p->names >= 0 && p->names <= 1)) {
        af_errf(err, errlen, "drills: the share of name drills must be in [0, 1], not %g",
                p->names);
        return AF_EINVAL;
    }
    struct wrng r;
    wrng_seed(&r, p->seed ^ 0x6472696c6cull); /* "drill": not the world's stream of this seed */
    /* the share in millionths, drawn only when on, so that 0 keeps the number drills' bytes */
    const uint64_t names_ppm = (uint64_t)(p->names * 1e6 + 0.5);
    struct af_buf out, user, reply;
    af_buf_init(&out, AF_BUF_NOLIMIT);
    af_buf_init(&user, AF_BUF_NOLIMIT);
    af_buf_init(&reply, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < p->n; i++) {
        af_buf_reset(&user);
        af_buf_reset(&reply);
        if (names_ppm && wrng_next(&r) % 1000000u < names_ppm)
            drill_names(&r, &user, &reply);
        else
            drill_one(&r, &user, &reply);
        json_t *c = drill_conv(af_buf_str(&user), af_buf_str(&reply));
        char *line = json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER);
        af_buf_puts(&out, line);
        af_buf_putc(&out, '\n');
        free(line);
        json_decref(c);
    }
    const int rc = af_file_write_atomic(path, af_buf_str(&out), out.len, err, errlen);
    af_buf_deinit(&out);
    af_buf_deinit(&user);
    af_buf_deinit(&reply);
    return rc;
}
