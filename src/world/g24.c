/*
 * g24.c - a Game-of-24 solver for generating puzzles: exact rational search over every pair
 * and operation, recording the first expression found and counting the solving paths (the
 * count sets the puzzle's difficulty: many paths make it easy).
 */
#include <stdio.h>
#include <string.h>

#include "world/world_int.h"

struct term {
    long n, d; /* d > 0 */
    char e[96];
};

struct search {
    int count;
    char first[96];
};

static long gcdl(long a, long b)
{
    if (a < 0)
        a = -a;
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a ? a : 1;
}

static int combine(const struct term *a, const struct term *b, int op, struct term *out)
{
    long n, d;
    switch (op) {
    case 0:
        n = a->n * b->d + b->n * a->d, d = a->d * b->d;
        break;
    case 1:
        n = a->n * b->d - b->n * a->d, d = a->d * b->d;
        break;
    case 2:
        n = a->n * b->n, d = a->d * b->d;
        break;
    default:
        if (b->n == 0)
            return 0;
        n = a->n * b->d, d = a->d * b->n;
        if (d < 0)
            n = -n, d = -d;
        break;
    }
    long g = gcdl(n, d);
    out->n = n / g;
    out->d = d / g;
    static const char ops[] = "+-*/";
    int w = snprintf(out->e, sizeof out->e, "(%s%c%s)", a->e, ops[op], b->e);
    return w > 0 && (size_t)w < sizeof out->e;
}

static void search(struct term *t, int n, struct search *s)
{
    if (n == 1) {
        if (t[0].n == 24 && t[0].d == 1) {
            if (s->count++ == 0) {
                size_t len = strlen(t[0].e);
                /* Drop the outermost parentheses. */
                snprintf(s->first, sizeof s->first, "%.*s", (int)(len - 2), t[0].e + 1);
            }
        }
        return;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j)
                continue;
            struct term rest[4];
            int m = 0;
            for (int k = 0; k < n; k++)
                if (k != i && k != j)
                    rest[m++] = t[k];
            for (int op = 0; op < 4; op++) {
                /* + and * are symmetric: take each unordered pair once. */
                if ((op == 0 || op == 2) && j < i)
                    continue;
                if (!combine(&t[i], &t[j], op, &rest[m]))
                    continue;
                search(rest, m + 1, s);
            }
        }
}

int world_g24_solve(const int nums[4], char *out, size_t outlen)
{
    struct term t[4];
    for (int i = 0; i < 4; i++) {
        t[i].n = nums[i];
        t[i].d = 1;
        snprintf(t[i].e, sizeof t[i].e, "%d", nums[i]);
    }
    struct search s = {0, ""};
    search(t, 4, &s);
    snprintf(out, outlen, "%s", s.count ? s.first : "");
    return s.count;
}
