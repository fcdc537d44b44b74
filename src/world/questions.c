/*
 * questions.c - the question families over a world: 1-hop lookups, 2- and 3-hop chains,
 * lookups followed by arithmetic, arithmetic word problems, and Game of 24.
 *
 * Each item is an eval record ({"pid","query","answer","bench",...}) plus its "solution":
 * the steps an expert takes (which tool, what to search or run, and the value each step
 * yields). The expert traces follow those steps; the scorers read only "answer" (and
 * "question" for Game of 24). A question belongs to the split of the entity it starts from,
 * so test questions start from entities that no training question starts from.
 */
#include <stdio.h>
#include <string.h>

#include "core/jsonx.h"
#include "world/world_int.h"

#define WIKI "Wikipedia_RAG_Search_Tool"
#define PY "Python_Code_Generator_Tool"

static json_t *step_search(const char *entity, const char *fact, json_t *value)
{
    json_t *s = json_object();
    json_object_set_new(s, "tool", json_string(WIKI));
    json_object_set_new(s, "query", af_json_text(entity));
    json_object_set_new(s, "fact", json_string(fact));
    json_object_set_new(s, "value", value);
    return s;
}

static json_t *step_python(const char *code, long value)
{
    json_t *s = json_object();
    json_object_set_new(s, "tool", json_string(PY));
    json_object_set_new(s, "code", json_string(code));
    json_object_set_new(s, "value", json_integer(value));
    return s;
}

static json_t *jint(long v)
{
    return json_integer(v);
}

static json_t *jname(const struct world *w, int idx)
{
    return af_json_text(w->ent[idx].name);
}

/* A new item. `answer` and `steps` are stolen. */
static json_t *item(const char *bench, const char *family, int level, const char *query,
                    json_t *answer, json_t *steps)
{
    json_t *it = json_object();
    json_object_set_new(it, "query", af_json_text(query));
    json_object_set_new(it, "answer", answer);
    json_object_set_new(it, "bench", json_string(bench));
    json_object_set_new(it, "family", json_string(family));
    json_object_set_new(it, "level", json_integer(level));
    json_object_set_new(it, "solution", steps);
    return it;
}

/* The gold list of a QA item: the value as text (a year or a name). */
static json_t *gold(json_t *value)
{
    json_t *a = json_array();
    if (json_is_integer(value)) {
        char t[32];
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(value));
        json_array_append_new(a, json_string(t));
    } else {
        json_array_append(a, value);
    }
    return a;
}

static void add_qa(json_t *out, const char *bench, const char *family, int level, const char *query,
                   json_t *steps)
{
    json_t *last = json_object_get(json_array_get(steps, json_array_size(steps) - 1), "value");
    json_array_append_new(out, item(bench, family, level, query, gold(last), steps));
}

/* ---- 1-hop ----------------------------------------------------------------------------- */

static void lookups(const struct world *w, int i, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[i];
    char q[512];
    json_t *st;
#define ONE(fact, value, ...)                                                                      \
    do {                                                                                           \
        snprintf(q, sizeof q, __VA_ARGS__);                                                        \
        st = json_array();                                                                         \
        json_array_append_new(st, step_search(e->name, fact, value));                              \
        add_qa(out, "world-lookup", "lookup", 1, q, st);                                           \
    } while (0)
    int v = wrng_range(r, 0, 1);
    switch (e->kind) {
    case WK_PERSON:
        ONE("born", jint(e->year), v ? "In what year was %s born?" : "When was %s born?", e->name);
        ONE("born in", jname(w, e->city),
            v ? "In which city was %s born?" : "What city is %s's birthplace?", e->name);
        ONE("occupation", json_string(world_occupations[e->sub]), "What was the occupation of %s?",
            e->name);
        if (e->org >= 0)
            ONE("member of", jname(w, e->org), "Which organisation was %s a member of?", e->name);
        if (e->died)
            ONE("died", jint(e->died), "In what year did %s die?", e->name);
        break;
    case WK_CITY:
        ONE("country", jname(w, e->country),
            v ? "In which country is the city of %s?" : "Which country is %s in?", e->name);
        ONE("founded", jint(e->year), "In what year was the city of %s founded?", e->name);
        ONE("population", jint(e->num), "What is the population of %s?", e->name);
        break;
    case WK_COUNTRY:
        ONE("capital", jname(w, e->capital),
            v ? "What is the capital of %s?" : "Which city is the capital of %s?", e->name);
        ONE("established", jint(e->year), "In what year was %s established?", e->name);
        break;
    case WK_ORG:
        ONE("founded by", jname(w, e->person), v ? "Who founded %s?" : "Who was the founder of %s?",
            e->name);
        ONE("founded", jint(e->year), "In what year was %s founded?", e->name);
        ONE("headquarters", jname(w, e->city), "In which city is %s based?", e->name);
        ONE("members", jint(e->num), "How many members does %s have?", e->name);
        break;
    default:
        ONE("creator", jname(w, e->person), v ? "Who created %s?" : "Who is the author of %s?",
            e->name);
        ONE("completed", jint(e->year), "In what year was %s completed?", e->name);
        ONE("length", jint(e->num), "How many %s long is %s?", world_work_unit(e->sub), e->name);
        break;
    }
#undef ONE
}

/* ---- 2- and 3-hop chains --------------------------------------------------------------- */

/* Appends a search step for entity `from` that yields `value`. */
static void hop(json_t *st, const struct world *w, int from, const char *fact, json_t *value)
{
    json_array_append_new(st, step_search(w->ent[from].name, fact, value));
}

static void chains(const struct world *w, int i, json_t *out)
{
    const struct world_ent *e = &w->ent[i];
    char q[512];
    json_t *st;
#define CHAIN(level, ...)                                                                          \
    do {                                                                                           \
        snprintf(q, sizeof q, __VA_ARGS__);                                                        \
        add_qa(out, "world-multihop", "multihop", level, q, st);                                   \
    } while (0)
    if (e->kind == WK_PERSON) {
        const struct world_ent *c = &w->ent[e->city];
        st = json_array();
        hop(st, w, i, "born in", jname(w, e->city));
        hop(st, w, e->city, "country", jname(w, c->country));
        CHAIN(2, "In which country was %s born?", e->name);
        st = json_array();
        hop(st, w, i, "born in", jname(w, e->city));
        hop(st, w, e->city, "country", jname(w, c->country));
        hop(st, w, c->country, "capital", jname(w, w->ent[c->country].capital));
        CHAIN(3, "What is the capital of the country where %s was born?", e->name);
        if (e->org >= 0) {
            st = json_array();
            hop(st, w, i, "member of", jname(w, e->org));
            hop(st, w, e->org, "founded by", jname(w, w->ent[e->org].person));
            CHAIN(2, "Who founded the organisation that %s was a member of?", e->name);
        }
    } else if (e->kind == WK_ORG) {
        const struct world_ent *f = &w->ent[e->person];
        st = json_array();
        hop(st, w, i, "founded by", jname(w, e->person));
        hop(st, w, e->person, "born", jint(f->year));
        CHAIN(2, "In what year was the founder of %s born?", e->name);
        st = json_array();
        hop(st, w, i, "founded by", jname(w, e->person));
        hop(st, w, e->person, "born in", jname(w, f->city));
        CHAIN(2, "In which city was the founder of %s born?", e->name);
        st = json_array();
        hop(st, w, i, "founded by", jname(w, e->person));
        hop(st, w, e->person, "born in", jname(w, f->city));
        hop(st, w, f->city, "country", jname(w, w->ent[f->city].country));
        CHAIN(3, "In which country was the founder of %s born?", e->name);
        st = json_array();
        hop(st, w, i, "headquarters", jname(w, e->city));
        hop(st, w, e->city, "country", jname(w, w->ent[e->city].country));
        CHAIN(2, "In which country is %s based?", e->name);
    } else if (e->kind == WK_WORK) {
        const struct world_ent *f = &w->ent[e->person];
        st = json_array();
        hop(st, w, i, "creator", jname(w, e->person));
        hop(st, w, e->person, "born in", jname(w, f->city));
        CHAIN(2, "In which city was the creator of %s born?", e->name);
        st = json_array();
        hop(st, w, i, "creator", jname(w, e->person));
        hop(st, w, e->person, "occupation", json_string(world_occupations[f->sub]));
        CHAIN(2, "What was the occupation of the creator of %s?", e->name);
        st = json_array();
        hop(st, w, i, "creator", jname(w, e->person));
        hop(st, w, e->person, "born in", jname(w, f->city));
        hop(st, w, f->city, "founded", jint(w->ent[f->city].year));
        CHAIN(3, "In what year was the birthplace of the creator of %s founded?", e->name);
    } else if (e->kind == WK_CITY) {
        st = json_array();
        hop(st, w, i, "country", jname(w, e->country));
        hop(st, w, e->country, "capital", jname(w, w->ent[e->country].capital));
        CHAIN(2, "What is the capital of the country in which %s lies?", e->name);
    }
#undef CHAIN
}

/* ---- lookups then arithmetic ----------------------------------------------------------- */

static void add_calc(json_t *out, int level, const char *query, json_t *st, const char *code,
                     long value)
{
    json_array_append_new(st, step_python(code, value));
    json_array_append_new(out, item("world-calc", "calc", level, query, jint(value), st));
}

static void calcs(const struct world *w, int i, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[i];
    char q[512], code[128];
    json_t *st;
    if (e->kind == WK_PERSON && e->died) {
        st = json_array();
        hop(st, w, i, "born", jint(e->year));
        hop(st, w, i, "died", jint(e->died));
        snprintf(code, sizeof code, "print(%d - %d)", e->died, e->year);
        snprintf(q, sizeof q, "How many years did %s live (year of death minus year of birth)?",
                 e->name);
        add_calc(out, 2, q, st, code, e->died - e->year);
    } else if (e->kind == WK_ORG) {
        const struct world_ent *f = &w->ent[e->person];
        st = json_array();
        hop(st, w, i, "founded by", jname(w, e->person));
        hop(st, w, i, "founded", jint(e->year));
        hop(st, w, e->person, "born", jint(f->year));
        snprintf(code, sizeof code, "print(%d - %d)", e->year, f->year);
        snprintf(q, sizeof q, "How old was the founder of %s in the year it was founded?", e->name);
        add_calc(out, 3, q, st, code, e->year - f->year);
    } else if (e->kind == WK_WORK) {
        const struct world_ent *f = &w->ent[e->person];
        st = json_array();
        hop(st, w, i, "creator", jname(w, e->person));
        hop(st, w, i, "completed", jint(e->year));
        hop(st, w, e->person, "born", jint(f->year));
        snprintf(code, sizeof code, "print(%d - %d)", e->year, f->year);
        snprintf(q, sizeof q, "How old was the creator of %s in the year it was completed?",
                 e->name);
        add_calc(out, 3, q, st, code, e->year - f->year);
    } else if (e->kind == WK_CITY) {
        /* Another city of the same split, so that both lookups are of held-out entities. */
        int other = -1;
        for (int t = 0; t < 20 && other < 0; t++) {
            int c = w->first[WK_CITY] + wrng_range(r, 0, w->count[WK_CITY] - 1);
            if (c != i && w->ent[c].split == e->split)
                other = c;
        }
        if (other < 0)
            return;
        const struct world_ent *o = &w->ent[other];
        st = json_array();
        hop(st, w, i, "population", jint(e->num));
        hop(st, w, other, "population", jint(o->num));
        snprintf(code, sizeof code, "print(%ld + %ld)", e->num, o->num);
        snprintf(q, sizeof q, "What is the combined population of %s and %s?", e->name, o->name);
        add_calc(out, 3, q, st, code, e->num + o->num);
    }
}

/* Arithmetic word problems with world names for colour; level = number of operations. */
static json_t *word_problem(const struct world *w, struct wrng *r)
{
    const char *who = w->ent[w->first[WK_PERSON] + wrng_range(r, 0, w->count[WK_PERSON] - 1)].name;
    const char *where = w->ent[w->first[WK_CITY] + wrng_range(r, 0, w->count[WK_CITY] - 1)].name;
    char q[512], code[160];
    long a = wrng_range(r, 12, 480), b = wrng_range(r, 3, 24), c = wrng_range(r, 4, 36);
    long d = wrng_range(r, 2, 9), v;
    int level;
    switch (wrng_range(r, 0, 4)) {
    case 0:
        v = a + b * c, level = 2;
        snprintf(q, sizeof q,
                 "%s has %ld stamps and buys %ld sheets of %ld stamps each. How many stamps does "
                 "%s have now?",
                 who, a, b, c, who);
        snprintf(code, sizeof code, "print(%ld + %ld * %ld)", a, b, c);
        break;
    case 1:
        a = b * c + wrng_range(r, 1, (int)(b * c) - 1);
        v = a - b * c, level = 2;
        snprintf(q, sizeof q,
                 "The theatre in %s has %ld rows of %ld seats, and %ld tickets were requested. "
                 "How many more tickets were requested than there are seats?",
                 where, b, c, a);
        snprintf(code, sizeof code, "print(%ld - %ld * %ld)", a, b, c);
        break;
    case 2:
        v = b * c * d, level = 2;
        snprintf(q, sizeof q,
                 "A bakery in %s fills %ld trays with %ld rolls each, %ld times a day. How many "
                 "rolls does it bake a day?",
                 where, b, c, d);
        snprintf(code, sizeof code, "print(%ld * %ld * %ld)", b, c, d);
        break;
    case 3:
        v = b * c, level = 1;
        a = v * d;
        snprintf(q, sizeof q,
                 "%s shares %ld coins equally among %ld friends. How many coins does each friend "
                 "get?",
                 who, a, d);
        snprintf(code, sizeof code, "print(%ld // %ld)", a, d);
        v = a / d;
        break;
    default:
        v = (a + b * c) * d, level = 3;
        snprintf(q, sizeof q,
                 "A ship from %s carries %ld crates plus %ld pallets of %ld crates each. Each "
                 "crate holds %ld lamps. How many lamps does the ship carry?",
                 where, a, b, c, d);
        snprintf(code, sizeof code, "print((%ld + %ld * %ld) * %ld)", a, b, c, d);
        break;
    }
    json_t *st = json_array();
    json_array_append_new(st, step_python(code, v));
    return item("world-calc", "arith", level, q, jint(v), st);
}

/* ---- Game of 24 ------------------------------------------------------------------------ */

static void game24(int split, uint64_t seed, json_t *out)
{
    for (int a = 1; a <= 13; a++)
        for (int b = a; b <= 13; b++)
            for (int c = b; c <= 13; c++)
                for (int d = c; d <= 13; d++) {
                    int nums[4] = {a, b, c, d};
                    struct wrng r;
                    wrng_seed(&r, seed ^ (uint64_t)(((a * 16 + b) * 16 + c) * 16 + d) << 20);
                    int s = wrng_range(&r, 0, 9);
                    if ((s < 8 ? WS_TRAIN : s == 8 ? WS_VAL : WS_TEST) != split)
                        continue;
                    char expr[96], q[512];
                    int n = world_g24_solve(nums, expr, sizeof expr);
                    if (n == 0)
                        continue;
                    /* Shown in a drawn order, not sorted, as a player would get them. */
                    for (int k = 3; k > 0; k--) {
                        int j = wrng_range(&r, 0, k), t = nums[k];
                        nums[k] = nums[j];
                        nums[j] = t;
                    }
                    snprintf(q, sizeof q,
                             "Make 24 from the numbers [%d, %d, %d, %d], using each exactly once "
                             "with +, -, *, / and parentheses. Answer with the expression.",
                             nums[0], nums[1], nums[2], nums[3]);
                    json_t *qn = json_array(), *ans = json_array(), *st = json_array();
                    for (int k = 0; k < 4; k++)
                        json_array_append_new(qn, json_integer(nums[k]));
                    json_array_append_new(ans, json_string(expr));
                    json_t *step = json_object();
                    json_object_set_new(step, "tool", json_string(PY));
                    json_object_set_new(step, "search24", json_incref(qn));
                    json_object_set_new(step, "value", json_string(expr));
                    json_array_append_new(st, step);
                    json_t *it = item("world-24", "24", n >= 40 ? 1 : n >= 12 ? 2 : 3, q, ans, st);
                    json_object_set_new(it, "question", qn);
                    json_array_append_new(out, it);
                }
}

/* ---- the split ------------------------------------------------------------------------- */

/* Shuffles arr in place (Fisher-Yates) and keeps the first cap items; then names each. */
static void finish(json_t *arr, const char *bench, int split, size_t cap, uint64_t seed)
{
    static const char *const split_names[] = {"train", "val", "test"};
    struct wrng r;
    wrng_seed(&r, seed);
    size_t n = json_array_size(arr);
    for (size_t k = n; k > 1; k--) {
        size_t j = (size_t)(wrng_next(&r) % k);
        json_t *a = json_incref(json_array_get(arr, k - 1)), *b = json_array_get(arr, j);
        json_array_set(arr, k - 1, b);
        json_array_set_new(arr, j, a);
    }
    while (json_array_size(arr) > cap)
        json_array_remove(arr, json_array_size(arr) - 1);
    for (size_t k = 0; k < json_array_size(arr); k++) {
        char pid[64];
        snprintf(pid, sizeof pid, "%s-%s-%zu", bench, split_names[split], k);
        json_t *it = json_array_get(arr, k);
        json_object_set_new(it, "pid", json_string(pid));
        json_object_set_new(it, "split", json_string(split_names[split]));
    }
}

void world_questions(const struct world *w, int split, size_t cap, json_t *out)
{
    json_t *lk = json_array(), *mh = json_array(), *ca = json_array(), *g = json_array();
    struct wrng r;
    wrng_seed(&r, w->seed * 31ull + (uint64_t)split + 7);
    for (size_t i = 0; i < w->n; i++) {
        if (w->ent[i].split != split)
            continue;
        lookups(w, (int)i, &r, lk);
        chains(w, (int)i, mh);
        calcs(w, (int)i, &r, ca);
    }
    /* As many word problems as lookup-then-arithmetic items, so the family is half each. */
    size_t n_calc = json_array_size(ca);
    for (size_t k = 0; k < n_calc; k++)
        json_array_append_new(ca, word_problem(w, &r));
    game24(split, w->seed, g);
    finish(lk, "world-lookup", split, cap, w->seed + 11);
    finish(mh, "world-multihop", split, cap, w->seed + 12);
    finish(ca, "world-calc", split, cap, w->seed + 13);
    finish(g, "world-24", split, cap, w->seed + 14);
    json_object_set_new(out, "world-lookup", lk);
    json_object_set_new(out, "world-multihop", mh);
    json_object_set_new(out, "world-calc", ca);
    json_object_set_new(out, "world-24", g);
}
