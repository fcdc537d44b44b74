/*
 * build.c - af_world_build: generates the world and writes its files, each through a
 * temporary file and a rename, so that an interrupted build leaves whole files or none.
 */
#include "agentflow/world.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "world/world_int.h"

static const char *const benches[] = {"world-lookup", "world-multihop", "world-calc", "world-24",
                                      NULL};
static const char *const split_names[] = {"train", "val", "test"};
static const char *const kind_names[] = {"country", "city", "person", "organisation", "work"};

const char *const *af_world_benchmarks(void)
{
    return benches;
}

struct af_world_params af_world_default_params(void)
{
    struct af_world_params p = {.seed = 1, .max_train = 4000, .max_val = 200, .max_test = 300};
    return p;
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return AF_OK;
    af_errf(err, errlen, "%s: cannot create the folder: %s", path, strerror(errno));
    return AF_EIO;
}

/* Writes arr as JSON lines (or as one JSON array when as_array) to dir/name. */
static int write_json(const char *dir, const char *name, const json_t *arr, int as_array, char *err,
                      size_t errlen)
{
    struct af_buf b, path;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    af_buf_init(&path, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&path, "%s/%s", dir, name);
    if (as_array) {
        char *s = json_dumps(arr, JSON_INDENT(1));
        (void)af_buf_puts(&b, s ? s : "[]");
        (void)af_buf_putc(&b, '\n');
        free(s);
    } else {
        for (size_t i = 0; i < json_array_size(arr); i++) {
            char *s = json_dumps(json_array_get(arr, i), JSON_COMPACT);
            (void)af_buf_puts(&b, s ? s : "{}");
            (void)af_buf_putc(&b, '\n');
            free(s);
        }
    }
    int rc = af_file_write_atomic(af_buf_str(&path), b.data ? b.data : "", b.len, err, errlen);
    af_buf_deinit(&b);
    af_buf_deinit(&path);
    return rc;
}

static json_t *entity_record(const struct world *w, int i)
{
    const struct world_ent *e = &w->ent[i];
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(i));
    json_object_set_new(o, "kind", json_string(kind_names[e->kind]));
    json_object_set_new(o, "name", json_string(e->name));
    json_object_set_new(o, "split", json_string(split_names[e->split]));
#define REF(key, v)                                                                                \
    if ((v) >= 0)                                                                                  \
    json_object_set_new(o, key, json_string(w->ent[v].name))
    switch (e->kind) {
    case WK_COUNTRY:
        json_object_set_new(o, "established", json_integer(e->year));
        json_object_set_new(o, "population", json_integer(e->num));
        REF("capital", e->capital);
        break;
    case WK_CITY:
        json_object_set_new(o, "founded", json_integer(e->year));
        json_object_set_new(o, "population", json_integer(e->num));
        REF("country", e->country);
        break;
    case WK_PERSON:
        json_object_set_new(o, "born", json_integer(e->year));
        if (e->died)
            json_object_set_new(o, "died", json_integer(e->died));
        json_object_set_new(o, "occupation", json_string(world_occupations[e->sub]));
        REF("born_in", e->city);
        REF("member_of", e->org);
        break;
    case WK_ORG:
        json_object_set_new(o, "type", json_string(world_org_types[e->sub]));
        json_object_set_new(o, "founded", json_integer(e->year));
        json_object_set_new(o, "members", json_integer(e->num));
        REF("founded_by", e->person);
        REF("headquarters", e->city);
        break;
    default:
        json_object_set_new(o, "type", json_string(world_work_types[e->sub]));
        json_object_set_new(o, "completed", json_integer(e->year));
        json_object_set_new(o, world_work_unit(e->sub), json_integer(e->num));
        REF("creator", e->person);
        break;
    }
#undef REF
    return o;
}

static int write_split(const char *bdir, const json_t *qs, int split, char *err, size_t errlen)
{
    int rc = AF_OK;
    for (const char *const *b = benches; *b && rc == AF_OK; b++) {
        char name[32];
        struct af_buf dirb;
        af_buf_init(&dirb, AF_BUF_NOLIMIT);
        (void)af_buf_printf(&dirb, "%s/%s", bdir, *b);
        const char *dir = af_buf_str(&dirb);
        if ((rc = make_dir(dir, err, errlen)) != AF_OK) {
            af_buf_deinit(&dirb);
            break;
        }
        snprintf(name, sizeof name, "%s.jsonl", split_names[split]);
        const json_t *arr = json_object_get(qs, *b);
        rc = write_json(dir, name, arr, 0, err, errlen);
        if (rc == AF_OK && split == WS_TEST)
            rc = write_json(dir, "data.json", arr, 1, err, errlen);
        af_buf_deinit(&dirb);
    }
    return rc;
}

int af_world_build(const char *dir, const struct af_world_params *p, struct af_world_stats *st,
                   char *err, size_t errlen)
{
    if (!dir || !p) {
        af_errf(err, errlen, "world build: no output folder");
        return AF_EINVAL;
    }
    struct af_world_stats s = {0};
    int rc = af_mkdir_p(dir, 0755, err, errlen);
    if (rc != AF_OK)
        return rc;
    struct world w;
    world_generate(p->seed, &w);
    json_t *ents = json_array(), *pass = json_array(), *manifest = json_object();
    for (size_t i = 0; i < w.n; i++) {
        json_array_append_new(ents, entity_record(&w, (int)i));
        world_passages(&w, (int)i, pass);
    }
    s.entities = w.n;
    s.passages = json_array_size(pass);
    rc = write_json(dir, "entities.jsonl", ents, 0, err, errlen);
    if (rc == AF_OK)
        rc = write_json(dir, "passages.jsonl", pass, 0, err, errlen);
    char bdir[4096];
    snprintf(bdir, sizeof bdir, "%s/benchmarks", dir);
    if (rc == AF_OK)
        rc = make_dir(bdir, err, errlen);
    json_t *counts = json_object();
    const size_t caps[3] = {p->max_train, p->max_val, p->max_test};
    for (int sp = 0; sp < 3 && rc == AF_OK; sp++) {
        json_t *qs = json_object(), *per = json_object();
        world_questions(&w, sp, caps[sp], qs);
        for (const char *const *b = benches; *b; b++) {
            size_t n = json_array_size(json_object_get(qs, *b));
            s.items[sp] += n;
            json_object_set_new(per, *b, json_integer((json_int_t)n));
        }
        json_object_set_new(counts, split_names[sp], per);
        rc = write_split(bdir, qs, sp, err, errlen);
        json_decref(qs);
    }
    json_object_set_new(manifest, "seed", json_integer((json_int_t)p->seed));
    json_object_set_new(manifest, "entities", json_integer((json_int_t)s.entities));
    json_object_set_new(manifest, "passages", json_integer((json_int_t)s.passages));
    json_object_set_new(manifest, "items", counts);
    if (rc == AF_OK) {
        char *m = json_dumps(manifest, JSON_INDENT(2));
        char path[4096];
        snprintf(path, sizeof path, "%s/world.json", dir);
        rc = af_file_write_atomic(path, m, strlen(m), err, errlen);
        free(m);
    }
    json_decref(manifest);
    json_decref(ents);
    json_decref(pass);
    world_free(&w);
    if (st)
        *st = s;
    return rc;
}
