/*
 * gen.c - the world's entities and facts: fictional names from syllables, then countries,
 * cities, people, organisations and works with dates, numbers and relations that agree with
 * each other (a founder is born before the founding, a work is made in its creator's life).
 *
 * Names are invented so that no fact can be known from anywhere but the world's own
 * passages. Each entity also gets a split, so test questions ask about entities that the
 * training traces never start from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "world/world_int.h"

#define N_COUNTRIES 40
#define N_CITIES 420
#define N_PEOPLE 1000
#define N_ORGS 300
#define N_WORKS 400

void wrng_seed(struct wrng *r, uint64_t seed)
{
    r->s = seed ^ 0x243f6a8885a308d3ull;
}

uint64_t wrng_next(struct wrng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int wrng_range(struct wrng *r, int lo, int hi)
{
    return lo + (int)(wrng_next(r) % (uint64_t)(hi - lo + 1));
}

const char *wrng_pick(struct wrng *r, const char *const *v, size_t n)
{
    return v[wrng_next(r) % n];
}

const char *const world_occupations[] = {
    "painter",  "composer",   "physician", "engineer", "poet",       "astronomer",
    "merchant", "architect",  "botanist",  "sculptor", "historian",  "cartographer",
    "chemist",  "playwright", "navigator", "judge",    "glassmaker", "mathematician"};
const size_t world_n_occupations = sizeof world_occupations / sizeof world_occupations[0];

const char *const world_org_types[] = {
    "university",    "trading company", "orchestra",   "guild", "observatory",
    "shipping line", "library",         "rowing club", "press", "botanical society"};
const size_t world_n_org_types = sizeof world_org_types / sizeof world_org_types[0];
/* The word that ends an organisation's name, per type. */
static const char *const org_suffix[] = {
    "University",    "Trading Company", "Orchestra",   "Guild", "Observatory",
    "Shipping Line", "Library",         "Rowing Club", "Press", "Botanical Society"};

const char *const world_work_types[] = {"novel",    "symphony", "atlas",     "play",
                                        "treatise", "opera",    "poem cycle"};
const size_t world_n_work_types = sizeof world_work_types / sizeof world_work_types[0];

const char *world_work_unit(int sub)
{
    return (sub == 1 || sub == 5) ? "minutes" : "pages";
}

/* ---- names ----------------------------------------------------------------------------- */

static const char *const on[] = {"b",  "d",  "k",  "l",  "m",  "n",  "r",  "s", "t", "v",
                                 "br", "dr", "gr", "kr", "tr", "th", "sh", "h", "f", "z",
                                 "c",  "p",  "st", "w",  "g",  "fl", "sk", "j", "ar"};
static const char *const nuc[] = {"a", "e", "i", "o", "u", "ae", "ei", "ou", "ia", "y", "au"};
static const char *const coda[] = {"",   "",   "",  "n", "r",  "l", "s",  "th", "nd",
                                   "rk", "st", "m", "x", "ld", "v", "nt", "sk", "rn"};
static const char *const place_end[] = {"ia",   "ora",  "heim", "mar",  "dor",  "vale",
                                        "holt", "wick", "stad", "oria", "land", "mere",
                                        "burg", "ford", "esse", "gard", "ith",  "ova"};
static const char *const person_end[] = {"a",   "el",  "in", "o",  "ard",  "wyn",
                                         "ric", "ine", "is", "an", "ette", "or"};
static const char *const family_end[] = {"wick", "ford",  "ley",  "mont", "ard",  "sen",
                                         "vale", "ridge", "holm", "ska",  "rand", "tor"};
static const char *const title_adj[] = {
    "Silent",  "Amber", "Hollow", "Last",    "Northern", "Glass",   "Crimson", "Distant",
    "Sunken",  "Iron",  "Pale",   "Hidden",  "Burning",  "Winter",  "Golden",  "Broken",
    "Eastern", "Quiet", "Salt",   "Seventh", "Drowned",  "Lantern", "Copper",  "Wandering"};
static const char *const title_noun[] = {
    "Harbour", "Orchard", "Tide",   "Garden",  "Meridian", "Lantern",      "Crown",  "River",
    "Archive", "Compass", "Chorus", "Citadel", "Mirror",   "Season",       "Voyage", "Fable",
    "Bridge",  "Kingdom", "Hours",  "Letters", "Shore",    "Cartographer", "Wells",  "Ledger"};

static void cap_first(char *s)
{
    if (s[0] >= 'a' && s[0] <= 'z')
        s[0] = (char)(s[0] - 'a' + 'A');
}

static void syllables(struct wrng *r, char *out, size_t len, int n, const char *const *end,
                      size_t n_end)
{
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        strncat(out, wrng_pick(r, on, sizeof on / sizeof on[0]), len - strlen(out) - 1);
        strncat(out, wrng_pick(r, nuc, sizeof nuc / sizeof nuc[0]), len - strlen(out) - 1);
        if (i + 1 < n)
            strncat(out, wrng_pick(r, coda, sizeof coda / sizeof coda[0]), len - strlen(out) - 1);
    }
    strncat(out, wrng_pick(r, end, n_end), len - strlen(out) - 1);
    cap_first(out);
}

/* A set of the names used so far, so that every entity name is unique (linear probing). */
struct nameset {
    char **slot;
    size_t cap;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Returns 1 and records s when it was new, 0 when it is taken. */
static int nameset_add(struct nameset *ns, const char *s)
{
    size_t i = (size_t)(hash_str(s) % ns->cap);
    for (; ns->slot[i]; i = (i + 1) % ns->cap)
        if (strcmp(ns->slot[i], s) == 0)
            return 0;
    ns->slot[i] = af_xstrdup(s);
    return 1;
}

void world_random_name(struct wrng *r, int kind, char *out, size_t len)
{
    char a[48], b[48];
    if (kind == WK_PERSON) {
        syllables(r, a, sizeof a, 1, person_end, sizeof person_end / sizeof person_end[0]);
        syllables(r, b, sizeof b, wrng_range(r, 1, 2), family_end,
                  sizeof family_end / sizeof family_end[0]);
        snprintf(out, len, "%s %s", a, b);
    } else {
        syllables(r, out, len, wrng_range(r, 1, 2), place_end,
                  sizeof place_end / sizeof place_end[0]);
    }
}

static char *unique_name(struct wrng *r, struct nameset *ns, int kind)
{
    char buf[128], a[48], b[48];
    for (;;) {
        switch (kind) {
        case WK_COUNTRY:
        case WK_CITY:
            syllables(r, buf, sizeof buf, wrng_range(r, 1, 2), place_end,
                      sizeof place_end / sizeof place_end[0]);
            break;
        case WK_PERSON:
            syllables(r, a, sizeof a, 1, person_end, sizeof person_end / sizeof person_end[0]);
            syllables(r, b, sizeof b, wrng_range(r, 1, 2), family_end,
                      sizeof family_end / sizeof family_end[0]);
            snprintf(buf, sizeof buf, "%s %s", a, b);
            break;
        case WK_ORG:
            syllables(r, a, sizeof a, wrng_range(r, 1, 2), place_end,
                      sizeof place_end / sizeof place_end[0]);
            snprintf(buf, sizeof buf, "%s", a); /* the type's suffix is added by the caller */
            break;
        default:
            /* An invented place word in every title: common words alone ("The Copper
             * Harbour") would be matched by dozens of titles. */
            syllables(r, a, sizeof a, wrng_range(r, 1, 2), place_end,
                      sizeof place_end / sizeof place_end[0]);
            if (!nameset_add(ns, a))
                continue;
            snprintf(buf, sizeof buf, "The %s %s of %s",
                     wrng_pick(r, title_adj, sizeof title_adj / sizeof title_adj[0]),
                     wrng_pick(r, title_noun, sizeof title_noun / sizeof title_noun[0]), a);
            break;
        }
        if (strlen(buf) >= 5 && nameset_add(ns, buf))
            return af_xstrdup(buf);
    }
}

/* ---- the world ------------------------------------------------------------------------- */

static int pick_of(struct wrng *r, const struct world *w, int kind)
{
    return w->first[kind] + wrng_range(r, 0, w->count[kind] - 1);
}

/* 80% train, 10% val, 10% test, drawn per entity. */
static int draw_split(struct wrng *r)
{
    int v = wrng_range(r, 0, 9);
    return v < 8 ? WS_TRAIN : (v == 8 ? WS_VAL : WS_TEST);
}

void world_generate(uint64_t seed, struct world *w)
{
    static const int counts[WK_N] = {N_COUNTRIES, N_CITIES, N_PEOPLE, N_ORGS, N_WORKS};
    struct wrng r;
    wrng_seed(&r, seed);
    memset(w, 0, sizeof *w);
    w->seed = seed;
    for (int k = 0; k < WK_N; k++) {
        w->first[k] = (int)w->n;
        w->count[k] = counts[k];
        w->n += (size_t)counts[k];
    }
    w->ent = af_xcalloc(w->n, sizeof *w->ent);
    struct nameset ns = {af_xcalloc(w->n * 4, sizeof(char *)), w->n * 4};
    for (size_t i = 0; i < w->n; i++) {
        struct world_ent *e = &w->ent[i];
        e->kind = (i < (size_t)w->first[WK_CITY])     ? WK_COUNTRY
                  : (i < (size_t)w->first[WK_PERSON]) ? WK_CITY
                  : (i < (size_t)w->first[WK_ORG])    ? WK_PERSON
                  : (i < (size_t)w->first[WK_WORK])   ? WK_ORG
                                                      : WK_WORK;
        e->country = e->capital = e->city = e->person = e->org = -1;
        e->split = draw_split(&r);
        if (e->kind == WK_ORG) {
            e->sub = wrng_range(&r, 0, (int)world_n_org_types - 1);
            for (;;) {
                char *stem = unique_name(&r, &ns, WK_ORG), buf[160];
                snprintf(buf, sizeof buf, "%s %s", stem, org_suffix[e->sub]);
                free(stem);
                if (nameset_add(&ns, buf)) {
                    e->name = af_xstrdup(buf);
                    break;
                }
            }
        } else {
            e->name = unique_name(&r, &ns, e->kind);
        }
    }
    /* Cities first get a country; each country's first city is its capital. */
    for (int c = 0; c < N_CITIES; c++) {
        struct world_ent *e = &w->ent[w->first[WK_CITY] + c];
        e->country =
            w->first[WK_COUNTRY] + (c < N_COUNTRIES ? c : wrng_range(&r, 0, N_COUNTRIES - 1));
        e->year = wrng_range(&r, 820, 1890);
        e->num = (long)wrng_range(&r, 4, 900) * 1000 + wrng_range(&r, 0, 999);
        if (c < N_COUNTRIES) {
            w->ent[e->country].capital = w->first[WK_CITY] + c;
            e->num += 400000;
        }
    }
    for (int k = 0; k < N_COUNTRIES; k++) {
        struct world_ent *e = &w->ent[w->first[WK_COUNTRY] + k];
        e->year = wrng_range(&r, 1200, 1950);
        e->num = (long)wrng_range(&r, 300, 60000) * 1000;
    }
    for (int p = 0; p < N_PEOPLE; p++) {
        struct world_ent *e = &w->ent[w->first[WK_PERSON] + p];
        e->year = wrng_range(&r, 1700, 1985);
        if (e->year < 1935)
            e->died = e->year + wrng_range(&r, 30, 95);
        if (e->died > 2024)
            e->died = 0;
        e->city = pick_of(&r, w, WK_CITY);
        e->sub = wrng_range(&r, 0, (int)world_n_occupations - 1);
        e->num = wrng_range(&r, 150, 200); /* height in cm; prose only */
    }
    for (int o = 0; o < N_ORGS; o++) {
        struct world_ent *e = &w->ent[w->first[WK_ORG] + o];
        e->person = pick_of(&r, w, WK_PERSON);
        const struct world_ent *f = &w->ent[e->person];
        int last = f->died ? f->died : 2020;
        e->year = f->year + wrng_range(&r, 20, 45);
        if (e->year > last)
            e->year = last;
        e->city = pick_of(&r, w, WK_CITY);
        e->num = wrng_range(&r, 12, 4800);
    }
    /* Membership: a person joins an organisation that exists in their adult life. */
    for (int p = 0; p < N_PEOPLE; p++) {
        struct world_ent *e = &w->ent[w->first[WK_PERSON] + p];
        if (wrng_range(&r, 0, 3) == 0)
            continue;
        for (int tries = 0; tries < 8; tries++) {
            int o = pick_of(&r, w, WK_ORG);
            if (w->ent[o].year <= (e->died ? e->died : 2020) - 1 &&
                w->ent[o].person != (int)(e - w->ent)) {
                e->org = o;
                break;
            }
        }
    }
    for (int k = 0; k < N_WORKS; k++) {
        struct world_ent *e = &w->ent[w->first[WK_WORK] + k];
        e->person = pick_of(&r, w, WK_PERSON);
        const struct world_ent *f = &w->ent[e->person];
        int last = f->died ? f->died : 2020;
        e->year = f->year + wrng_range(&r, 18, 60);
        if (e->year > last)
            e->year = last;
        e->sub = wrng_range(&r, 0, (int)world_n_work_types - 1);
        e->num = strcmp(world_work_unit(e->sub), "pages") == 0 ? wrng_range(&r, 40, 900)
                                                               : wrng_range(&r, 12, 180);
    }
    for (size_t i = 0; i < ns.cap; i++)
        free(ns.slot[i]);
    free(ns.slot);
}

void world_free(struct world *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n; i++)
        free(w->ent[i].name);
    free(w->ent);
    memset(w, 0, sizeof *w);
}

const struct world_ent *world_get(const struct world *w, int idx)
{
    return (idx >= 0 && (size_t)idx < w->n) ? &w->ent[idx] : NULL;
}
