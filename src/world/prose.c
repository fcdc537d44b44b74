/*
 * prose.c - the encyclopedia text: two or three short passages per entity, each fact said in
 * one of several sentence forms, with cross-mentions (people born in a city, works of a
 * person) so that a search also returns near misses, as a real encyclopedia does.
 *
 * The wording of an entity depends only on the seed and the entity's index, never on the
 * order in which entities are written.
 */
#include <stdio.h>
#include <string.h>

#include "core/jsonx.h"
#include "world/world_int.h"

static const char *art(const char *noun)
{
    return strchr("aeiou", noun[0]) ? "an" : "a";
}

static void add_passage(json_t *out, const struct world_ent *e, int idx, int k, struct af_buf *b)
{
    char id[32];
    snprintf(id, sizeof id, "w%d-%d", idx, k);
    json_t *p = json_object();
    json_object_set_new(p, "id", json_string(id));
    json_object_set_new(p, "title", af_json_text(e->name));
    json_object_set_new(p, "text", af_json_textn(b->data ? b->data : "", b->len));
    json_array_append_new(out, p);
    af_buf_reset(b);
}

/* Up to `max` entities of `kind` whose field (selected by `rel`) points at idx. */
static int related(const struct world *w, int kind, int rel, int idx, int *out, int max)
{
    int n = 0;
    for (int i = w->first[kind]; i < w->first[kind] + w->count[kind] && n < max; i++) {
        const struct world_ent *e = &w->ent[i];
        int v = rel == 0 ? e->city : rel == 1 ? e->person : rel == 2 ? e->country : e->org;
        if (v == idx)
            out[n++] = i;
    }
    return n;
}

static void list_names(struct af_buf *b, const struct world *w, const int *v, int n)
{
    for (int i = 0; i < n; i++)
        (void)af_buf_printf(b, "%s%s", i == 0 ? "" : (i + 1 == n ? " and " : ", "),
                            w->ent[v[i]].name);
}

static void person(const struct world *w, int idx, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[idx];
    const char *occ = world_occupations[e->sub], *city = w->ent[e->city].name;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    switch (wrng_range(r, 0, 2)) {
    case 0:
        (void)af_buf_printf(&b, "%s was %s %s born in %s in %d.", e->name, art(occ), occ, city,
                            e->year);
        break;
    case 1:
        (void)af_buf_printf(&b, "Born in %d in %s, %s worked as %s %s.", e->year, city, e->name,
                            art(occ), occ);
        break;
    default:
        (void)af_buf_printf(&b, "%s, %s %s, was born in the city of %s in %d.", e->name, art(occ),
                            occ, city, e->year);
        break;
    }
    if (e->died)
        (void)af_buf_printf(&b, " %s died in %d.", e->name, e->died);
    /* Membership sits in the long passage: alone, "X joined Y." is so short that BM25 ranks it
     * above Y's own passages in a search for Y. */
    if (e->org >= 0)
        (void)af_buf_printf(&b, wrng_range(r, 0, 1) ? " %s was a member of %s." : " %s joined %s.",
                            e->name, w->ent[e->org].name);
    switch (wrng_range(r, 0, 3)) {
    case 0:
        (void)af_buf_printf(&b, " Several letters written by %s survive.", e->name);
        break;
    case 1:
        (void)af_buf_printf(&b, " Contemporaries remembered %s as patient and exacting.", e->name);
        break;
    case 2:
        (void)af_buf_printf(&b, " Little is known of the early schooling of %s.", e->name);
        break;
    default:
        (void)af_buf_printf(&b, " A street was later named after %s.", e->name);
        break;
    }
    add_passage(out, e, idx, 0, &b);

    int works[3];
    int nw = related(w, WK_WORK, 1, idx, works, 3);
    if (nw == 0)
        goto done;
    (void)af_buf_printf(&b, "The works of %s include ", e->name);
    list_names(&b, w, works, nw);
    (void)af_buf_puts(&b, ".");
    add_passage(out, e, idx, 1, &b);
done:
    af_buf_deinit(&b);
}

static void city(const struct world *w, int idx, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[idx];
    const char *k = w->ent[e->country].name;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    switch (wrng_range(r, 0, 2)) {
    case 0:
        (void)af_buf_printf(&b, "%s is a city in %s, founded in %d.", e->name, k, e->year);
        break;
    case 1:
        (void)af_buf_printf(&b, "Founded in %d, %s is a city of %s.", e->year, e->name, k);
        break;
    default:
        (void)af_buf_printf(&b, "The city of %s in %s was founded in %d.", e->name, k, e->year);
        break;
    }
    if (w->ent[e->country].capital == idx)
        (void)af_buf_printf(&b, " %s is the capital of %s.", e->name, k);
    (void)af_buf_printf(
        &b, wrng_range(r, 0, 1) ? " It has a population of %ld." : " Its population is %ld.",
        e->num);
    add_passage(out, e, idx, 0, &b);

    int people[3], orgs[2];
    int np = related(w, WK_PERSON, 0, idx, people, 3), no = related(w, WK_ORG, 0, idx, orgs, 2);
    if (np > 0) {
        (void)af_buf_printf(&b, "People born in %s include ", e->name);
        list_names(&b, w, people, np);
        (void)af_buf_puts(&b, ".");
    }
    if (no > 0) {
        (void)af_buf_printf(&b, "%s%s has its headquarters in %s.", b.len ? " " : "",
                            w->ent[orgs[0]].name, e->name);
    }
    if (b.len)
        add_passage(out, e, idx, 1, &b);
    af_buf_deinit(&b);
}

static void country(const struct world *w, int idx, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[idx];
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    if (wrng_range(r, 0, 1))
        (void)af_buf_printf(&b, "%s is a country established in %d. Its capital is %s.", e->name,
                            e->year, w->ent[e->capital].name);
    else
        (void)af_buf_printf(&b, "The capital of %s, a country established in %d, is %s.", e->name,
                            e->year, w->ent[e->capital].name);
    (void)af_buf_printf(&b, " %s has a population of %ld.", e->name, e->num);
    add_passage(out, e, idx, 0, &b);
    int cities[4];
    int nc = related(w, WK_CITY, 2, idx, cities, 4);
    (void)af_buf_printf(&b, "Cities of %s include ", e->name);
    list_names(&b, w, cities, nc);
    (void)af_buf_puts(&b, ".");
    add_passage(out, e, idx, 1, &b);
    af_buf_deinit(&b);
}

static void org(const struct world *w, int idx, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[idx];
    const char *type = world_org_types[e->sub], *f = w->ent[e->person].name;
    const char *c = w->ent[e->city].name;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    if (wrng_range(r, 0, 1))
        (void)af_buf_printf(&b, "%s is %s %s founded in %d by %s.", e->name, art(type), type,
                            e->year, f);
    else
        (void)af_buf_printf(&b, "%s founded %s, %s %s, in %d.", f, e->name, art(type), type,
                            e->year);
    (void)af_buf_printf(&b,
                        wrng_range(r, 0, 1) ? " Its headquarters are in %s."
                                            : " It is based in the city of %s.",
                        c);
    add_passage(out, e, idx, 0, &b);
    int members[2];
    int nm = related(w, WK_PERSON, 3, idx, members, 2);
    (void)af_buf_printf(&b, "%s has %ld members.", e->name, e->num);
    if (nm > 0) {
        (void)af_buf_puts(&b, " Notable members include ");
        list_names(&b, w, members, nm);
        (void)af_buf_puts(&b, ".");
    }
    add_passage(out, e, idx, 1, &b);
    af_buf_deinit(&b);
}

static void work(const struct world *w, int idx, struct wrng *r, json_t *out)
{
    const struct world_ent *e = &w->ent[idx];
    const char *type = world_work_types[e->sub], *by = w->ent[e->person].name;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    if (wrng_range(r, 0, 1))
        (void)af_buf_printf(&b, "%s is %s %s by %s, completed in %d.", e->name, art(type), type, by,
                            e->year);
    else
        (void)af_buf_printf(&b, "%s completed the %s %s in %d.", by, type, e->name, e->year);
    (void)af_buf_printf(&b, " It runs to %ld %s.", e->num, world_work_unit(e->sub));
    add_passage(out, e, idx, 0, &b);
    af_buf_deinit(&b);
}

void world_passages(const struct world *w, int idx, json_t *out)
{
    struct wrng r;
    wrng_seed(&r, w->seed * 1000003ull + (uint64_t)idx + 1);
    switch (w->ent[idx].kind) {
    case WK_PERSON:
        person(w, idx, &r, out);
        break;
    case WK_CITY:
        city(w, idx, &r, out);
        break;
    case WK_COUNTRY:
        country(w, idx, &r, out);
        break;
    case WK_ORG:
        org(w, idx, &r, out);
        break;
    default:
        work(w, idx, &r, out);
        break;
    }
}
