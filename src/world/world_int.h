/*
 * world_int.h - private to src/world/: the generated encyclopedia (entities and their facts),
 * its random stream, and the pieces that turn it into passages and questions.
 *
 * Everything is integer arithmetic on one seeded stream, so a seed gives the same world on
 * every machine and compiler. A struct world is built once and then only read, so readers
 * may share it across threads.
 */
#ifndef AF_WORLD_WORLD_INT_H
#define AF_WORLD_WORLD_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

/* splitmix64: tiny, well mixed, and the same on every platform. */
struct wrng {
    uint64_t s;
};
void wrng_seed(struct wrng *r, uint64_t seed);
uint64_t wrng_next(struct wrng *r);
/* Uniform in [lo, hi] (inclusive); the modulo bias is negligible for our small ranges. */
int wrng_range(struct wrng *r, int lo, int hi);
/* A pick from an array of n strings. */
const char *wrng_pick(struct wrng *r, const char *const *v, size_t n);

enum world_kind { WK_COUNTRY, WK_CITY, WK_PERSON, WK_ORG, WK_WORK, WK_N };
enum world_split { WS_TRAIN, WS_VAL, WS_TEST };

struct world_ent {
    int kind;    /* enum world_kind */
    char *name;  /* owned; unique across the world */
    int split;   /* enum world_split: which questions may ask about it first */
    int year;    /* founded (city, org), established (country), born (person), completed (work) */
    int died;    /* person: year of death, 0 = living */
    long num;    /* population (city, country), members (org), pages or minutes (work) */
    int country; /* city: its country */
    int capital; /* country: its capital city */
    int city;    /* person: born in; org: headquarters */
    int person;  /* org: founder; work: creator */
    int org;     /* person: member of, -1 = none */
    int sub;     /* occupation (person), org type, work type */
};

struct world {
    uint64_t seed;
    struct world_ent *ent; /* owned */
    size_t n;
    int first[WK_N], count[WK_N]; /* entities of one kind are contiguous */
};

/* The lists the prose and the questions share, indexed by world_ent.sub. */
extern const char *const world_occupations[];
extern const size_t world_n_occupations;
extern const char *const world_org_types[]; /* "university", ... */
extern const size_t world_n_org_types;
extern const char *const world_work_types[]; /* "novel", ... */
extern const size_t world_n_work_types;
/* What a work's num counts: "pages" or "minutes". */
const char *world_work_unit(int sub);

/* Generates the world for `seed` into *w (owned by the caller: world_free). */
void world_generate(uint64_t seed, struct world *w);
/* A name of kind WK_* from the world's syllables into out (not checked for uniqueness). */
void world_random_name(struct wrng *r, int kind, char *out, size_t len);
void world_free(struct world *w);
const struct world_ent *world_get(const struct world *w, int idx);

/* Appends the encyclopedia passages of entity idx to `out` (a JSON array), each an object
 * {"id","title","text"}. */
void world_passages(const struct world *w, int idx, json_t *out);

/* Appends each question family's items for one split to `out`, an object keyed by bench
 * name, each a JSON array. `per_split` caps the items per family and split. */
void world_questions(const struct world *w, int split, size_t cap, json_t *out);

/* ---- Game of 24 ------------------------------------------------------------------------ */
/* Writes one expression over nums[0..4) that equals 24 into out (e.g. "(1+1+1)*8") and
 * returns how many distinct expressions solve it (0: unsolvable; out is then ""). */
int world_g24_solve(const int nums[4], char *out, size_t outlen);

#endif
