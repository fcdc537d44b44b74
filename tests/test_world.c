/*
 * test_world.c - the practice world (agentflow/world.h): the same seed writes the same bytes,
 * a golden slice of the encyclopedia, every family's gold answers scoring 100% with its
 * scorer, disjoint splits, every fact a solution relies on found by a search of its entity,
 * and the `world build` command's errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/score.h"
#include "agentflow/world.h"
#include "core/fileio.h"
#include "support/proc.h"
#include "tools/wiki_index.h"

static const char *const splits[] = {"train", "val", "test"};

struct tmpdir {
    char path[64];
};

static void tmp_make(struct tmpdir *t)
{
    snprintf(t->path, sizeof t->path, "/tmp/af_test_world_XXXXXX");
    assert_non_null(mkdtemp(t->path));
}

static void tmp_remove(struct tmpdir *t)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->path);
    assert_int_equal(system(cmd), 0);
}

static char *slurp(const char *dir, const char *name)
{
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *data = NULL;
    int rc = af_file_read(path, 64u << 20, &data, NULL, err, sizeof err);
    if (rc != AF_OK)
        fail_msg("%s", err);
    return data;
}

/* Every line of dir/name parsed as JSON objects into one array (new reference). */
static json_t *load_lines(const char *dir, const char *name)
{
    char *data = slurp(dir, name);
    json_t *arr = json_array();
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t je;
        json_t *j = json_loads(line, 0, &je);
        if (!json_is_object(j))
            fail_msg("%s/%s: not a JSON object line: %.80s", dir, name, line);
        json_array_append_new(arr, j);
    }
    free(data);
    return arr;
}

static void build(const char *dir, uint64_t seed, size_t cap)
{
    struct af_world_params p = af_world_default_params();
    p.seed = seed;
    if (cap) {
        p.max_train = cap;
        p.max_val = p.max_test = cap / 2;
    }
    char err[512];
    if (af_world_build(dir, &p, NULL, err, sizeof err) != AF_OK)
        fail_msg("world build: %s", err);
}

static const char *const files[] = {"entities.jsonl",
                                    "passages.jsonl",
                                    "world.json",
                                    "benchmarks/world-lookup/train.jsonl",
                                    "benchmarks/world-multihop/val.jsonl",
                                    "benchmarks/world-calc/test.jsonl",
                                    "benchmarks/world-24/data.json",
                                    NULL};

static void test_same_seed_same_bytes(void **state)
{
    (void)state;
    struct tmpdir a = {""}, b = {""}, c = {""};
    tmp_make(&a);
    tmp_make(&b);
    tmp_make(&c);
    build(a.path, 7, 100);
    build(b.path, 7, 100);
    build(c.path, 8, 100);
    for (const char *const *f = files; *f; f++) {
        char *x = slurp(a.path, *f), *y = slurp(b.path, *f), *z = slurp(c.path, *f);
        assert_string_equal(x, y);
        assert_true(strcmp(x, z) != 0); /* the seed matters */
        free(x);
        free(y);
        free(z);
    }
    tmp_remove(&a);
    tmp_remove(&b);
    tmp_remove(&c);
}

/* a.jsonl, b.jsonl and c.jsonl in t */
static void drill_paths(const struct tmpdir *t, char *a, char *b, char *c, size_t len)
{
    snprintf(a, len, "%s/a.jsonl", t->path);
    snprintf(b, len, "%s/b.jsonl", t->path);
    snprintf(c, len, "%s/c.jsonl", t->path);
}

/* Copy drills: the same seed gives the same bytes and another seed others; every line is a
 * system / user / assistant conversation, and every number of a reply stands in its prompt
 * (the reply can be copied), except the printed result's, which the prompt states too. */
static void test_drills(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char a[128], b[128], c[128], err[256];
    drill_paths(&t, a, b, c, sizeof a);
    struct af_world_drills_params dp = af_world_drills_default_params();
    dp.n = 2000;
    assert_int_equal(af_world_drills(a, &dp, err, sizeof err), AF_OK);
    assert_int_equal(af_world_drills(b, &dp, err, sizeof err), AF_OK);
    dp.seed = 8;
    assert_int_equal(af_world_drills(c, &dp, err, sizeof err), AF_OK);
    char *x = slurp(t.path, "a.jsonl"), *y = slurp(t.path, "b.jsonl"),
         *z = slurp(t.path, "c.jsonl");
    assert_string_equal(x, y);
    assert_true(strcmp(x, z) != 0);
    free(x);
    free(y);
    free(z);
    json_t *lines = load_lines(t.path, "a.jsonl");
    assert_int_equal(json_array_size(lines), 2000);
    int kinds[4] = {0};
    size_t i;
    json_t *d;
    json_array_foreach(lines, i, d)
    {
        json_t *m = json_object_get(d, "messages");
        assert_int_equal(json_array_size(m), 3);
        const char *u = json_string_value(json_object_get(json_array_get(m, 1), "content"));
        const char *r = json_string_value(json_object_get(json_array_get(m, 2), "content"));
        assert_non_null(u);
        assert_non_null(r);
        kinds[!strncmp(u, "Repeat", 6)     ? 0
              : !strncmp(u, "Sub-Goal", 8) ? 1
              : !strncmp(u, "Facts", 5)    ? 2
                                           : 3]++;
        for (const char *p = r; *p;) { /* each run of digits in the reply, found in the prompt */
            if (*p < '0' || *p > '9') {
                p++;
                continue;
            }
            size_t n = strspn(p, "0123456789");
            char num[32];
            assert_true(n < sizeof num);
            memcpy(num, p, n);
            num[n] = 0;
            if (!strstr(u, num))
                fail_msg("drill %zu: %s is not in its prompt: %s", i, num, u);
            p += n;
        }
    }
    for (int k = 0; k < 4; k++) /* each kind about a quarter */
        assert_true(kinds[k] > 400 && kinds[k] < 600);
    json_decref(lines);
    snprintf(a, sizeof a, "%s/no/such/dir/x.jsonl", t.path);
    dp.n = 10;
    assert_int_equal(af_world_drills(a, &dp, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, "no/such/dir"));
    dp.names = 1.5;
    assert_int_equal(af_world_drills(a, &dp, err, sizeof err), AF_EINVAL);
    assert_non_null(strstr(err, "1.5"));
    tmp_remove(&t);
}

/* Name drills (--names): the share asked for, seeded, and every reply's names stand in the
 * prompt; with the share 0 the bytes are the number drills' alone. */
static void test_name_drills(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char a[128], b[128], c[128], err[256];
    drill_paths(&t, a, b, c, sizeof a);
    struct af_world_drills_params p = af_world_drills_default_params();
    p.n = 2000;
    p.names = 0.5;
    assert_int_equal(af_world_drills(a, &p, err, sizeof err), AF_OK);
    assert_int_equal(af_world_drills(b, &p, err, sizeof err), AF_OK);
    p.names = 0;
    assert_int_equal(af_world_drills(c, &p, err, sizeof err), AF_OK);
    char *x = slurp(t.path, "a.jsonl"), *y = slurp(t.path, "b.jsonl");
    assert_string_equal(x, y);
    free(x);
    free(y);
    json_t *lines = load_lines(t.path, "a.jsonl");
    assert_int_equal(json_array_size(lines), 2000);
    int names = 0, searches = 0;
    size_t i;
    json_t *d;
    json_array_foreach(lines, i, d)
    {
        json_t *m = json_object_get(d, "messages");
        const char *u = json_string_value(json_object_get(json_array_get(m, 1), "content"));
        const char *r = json_string_value(json_object_get(json_array_get(m, 2), "content"));
        const int is_search = !strncmp(u, "Result:", 7);
        if (strncmp(u, "Repeat these names", 18) && strncmp(u, "Result:", 7) &&
            !(strncmp(u, "Facts:", 6) == 0 && strstr(u, "What is the ") &&
              (r[0] < '0' || r[0] > '9')))
            continue;
        names++;
        searches += is_search;
        /* the name itself: the search's query, else the whole reply, item by item */
        char buf[512];
        const char *q = is_search ? strstr(r, "query=\"") : NULL;
        if (is_search) {
            assert_non_null(q);
            q += 7;
            size_t n = strcspn(q, "\"");
            assert_true(n > 0 && n < sizeof buf);
            memcpy(buf, q, n);
            buf[n] = 0;
            if (!strstr(u, buf))
                fail_msg("drill %zu: \"%s\" is not in its prompt: %s", i, buf, u);
            continue;
        }
        for (const char *s = r; *s;) {
            size_t n = strcspn(s, ",");
            assert_true(n > 0 && n < sizeof buf);
            memcpy(buf, s, n);
            buf[n] = 0;
            if (!strstr(u, buf))
                fail_msg("drill %zu: \"%s\" is not in its prompt: %s", i, buf, u);
            s += n;
            s += strspn(s, ", ");
        }
    }
    assert_true(names > 850 && names < 1150); /* half of 2,000 */
    assert_true(searches > 200);
    json_decref(lines);
    /* the share 0 is the number drills as before the option (the seed-7 stream unchanged) */
    json_t *plain = load_lines(t.path, "c.jsonl");
    json_array_foreach(plain, i, d)
    {
        const char *u = json_string_value(
            json_object_get(json_array_get(json_object_get(d, "messages"), 1), "content"));
        assert_null(strstr(u, "names"));
        assert_true(strncmp(u, "Result:", 7) != 0);
    }
    json_decref(plain);
    tmp_remove(&t);
}

/* The first records of the seed-1 world, as written. A change here changes every world, the
 * shipped model's training data included: update the golden file only on purpose. */
static void test_golden_slice(void **state)
{
    (void)state;
    const char *root = getenv("AGENTFLOW_SRC");
    char gpath[512];
    snprintf(gpath, sizeof gpath, "%s/tests/data/world_golden.jsonl", root && *root ? root : ".");
    struct tmpdir t = {""};
    tmp_make(&t);
    build(t.path, 1, 20);
    char *ents = slurp(t.path, "entities.jsonl"), *pass = slurp(t.path, "passages.jsonl");
    char *q = slurp(t.path, "benchmarks/world-multihop/test.jsonl");
    /* Lines 1-2 of entities (countries), entity 40 (the first city), 460 (the first person),
     * 1460 (the first organisation), 1760 (the first work); passages 1-6; one question. */
    static const int ent_lines[] = {0, 1, 40, 460, 1460, 1760};
    char *got = NULL;
    size_t got_len = 0;
    FILE *mem = open_memstream(&got, &got_len);
    int line = 0, want = 0;
    for (char *p = ents; *p && want < 6; line++) {
        char *nl = strchr(p, '\n');
        if (line == ent_lines[want]) {
            fwrite(p, 1, (size_t)(nl - p) + 1, mem);
            want++;
        }
        p = nl + 1;
    }
    char *p = pass;
    for (int i = 0; i < 6; i++) {
        char *nl = strchr(p, '\n');
        fwrite(p, 1, (size_t)(nl - p) + 1, mem);
        p = nl + 1;
    }
    fwrite(q, 1, (size_t)(strchr(q, '\n') - q) + 1, mem);
    fclose(mem);
    char *want_text = NULL, err[256];
    if (getenv("AGENTFLOW_WRITE_GOLDEN")) {
        assert_int_equal(af_file_write_atomic(gpath, got, got_len, err, sizeof err), AF_OK);
    }
    if (af_file_read(gpath, 1u << 20, &want_text, NULL, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    assert_string_equal(got, want_text);
    free(want_text);
    free(got);
    free(ents);
    free(pass);
    free(q);
    tmp_remove(&t);
}

static char *gold_text(const json_t *item)
{
    const json_t *a = json_object_get(item, "answer");
    if (json_is_array(a))
        a = json_array_get(a, 0);
    if (json_is_string(a))
        return strdup(json_string_value(a));
    char buf[64];
    snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(a));
    return strdup(buf);
}

static void test_gold_answers_score(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    build(t.path, 1, 0);
    size_t n_items = 0;
    for (const char *const *b = af_world_benchmarks(); *b; b++) {
        assert_true(af_score_known(*b));
        for (int s = 0; s < 3; s++) {
            char name[128];
            snprintf(name, sizeof name, "benchmarks/%s/%s.jsonl", *b, splits[s]);
            json_t *items = load_lines(t.path, name);
            assert_true(json_array_size(items) >= 100);
            size_t i;
            json_t *it;
            json_array_foreach(items, i, it)
            {
                char *ans = gold_text(it), err[256];
                struct af_score sc;
                if (af_score_item(*b, it, ans, &sc, err, sizeof err) != AF_OK)
                    fail_msg("%s %s item %zu: %s", *b, splits[s], i, err);
                if (!sc.correct)
                    fail_msg("%s %s item %zu: its own gold '%s' scored wrong", *b, splits[s], i,
                             ans);
                /* A wrong answer must score wrong, or the check above proves nothing. */
                af_score_deinit(&sc);
                if (af_score_item(*b, it, "Nobody 17", &sc, err, sizeof err) != AF_OK)
                    fail_msg("%s: %s", *b, err);
                assert_int_equal(sc.correct, 0);
                af_score_deinit(&sc);
                free(ans);
                n_items++;
            }
            json_decref(items);
        }
    }
    assert_true(n_items > 10000);
    tmp_remove(&t);
}

/* The entity a question starts from: its first search, or for Game of 24 the numbers. */
static char *start_of(const json_t *item)
{
    const json_t *st = json_array_get(json_object_get(item, "solution"), 0);
    const char *q = json_string_value(json_object_get(st, "query"));
    if (q)
        return strdup(q);
    const json_t *nums = json_object_get(item, "question");
    if (!json_is_array(nums))
        return NULL; /* a word problem: drawn at random, no entity */
    int v[4], n = 0;
    size_t i;
    json_t *x;
    json_array_foreach(nums, i, x) v[n++] = (int)json_integer_value(x);
    for (int a = 0; a < 4; a++) /* sort: a multiset */
        for (int c = a + 1; c < 4; c++)
            if (v[c] < v[a]) {
                int tt = v[a];
                v[a] = v[c];
                v[c] = tt;
            }
    char buf[64];
    snprintf(buf, sizeof buf, "24:%d,%d,%d,%d", v[0], v[1], v[2], v[3]);
    return strdup(buf);
}

static int in_list(char **v, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i], s) == 0)
            return 1;
    return 0;
}

static void test_splits_disjoint(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    build(t.path, 1, 0);
    for (const char *const *b = af_world_benchmarks(); *b; b++) {
        char **train = NULL;
        size_t n_train = 0, n_checked = 0;
        char name[128];
        snprintf(name, sizeof name, "benchmarks/%s/train.jsonl", *b);
        json_t *items = load_lines(t.path, name);
        size_t i;
        json_t *it;
        json_array_foreach(items, i, it)
        {
            char *s = start_of(it);
            if (!s)
                continue;
            char **grown = realloc(train, (n_train + 1) * sizeof *train);
            assert_non_null(grown);
            train = grown;
            train[n_train++] = s;
        }
        json_decref(items);
        for (int sp = 1; sp < 3; sp++) {
            snprintf(name, sizeof name, "benchmarks/%s/%s.jsonl", *b, splits[sp]);
            items = load_lines(t.path, name);
            json_array_foreach(items, i, it)
            {
                char *s = start_of(it);
                if (!s)
                    continue;
                if (in_list(train, n_train, s))
                    fail_msg("%s %s item %zu starts from '%s', as a training item does", *b,
                             splits[sp], i, s);
                n_checked++;
                free(s);
            }
            json_decref(items);
        }
        assert_true(n_checked > 100);
        for (size_t k = 0; k < n_train; k++)
            free(train[k]);
        free(train);
    }
    tmp_remove(&t);
}

/* Each fact a solution needs is in the top 3 passages of a search for its entity, so an
 * expert's search finds it and a model can copy it from the tool's result. */
static void test_facts_found_by_search(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    build(t.path, 1, 0);
    char in[256], db[256], err[512];
    snprintf(in, sizeof in, "%s/passages.jsonl", t.path);
    snprintf(db, sizeof db, "%s/wiki.db", t.path);
    struct wiki_build_params bp = wiki_build_default_params();
    bp.shards = 1;
    struct wiki_build_stats bs;
    if (wiki_index_build(in, db, &bp, &bs, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    struct wiki_index *ix = NULL;
    if (wiki_index_open(db, 0, &ix, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    size_t n_steps = 0;
    for (const char *const *b = af_world_benchmarks(); *b; b++) {
        char name[128];
        snprintf(name, sizeof name, "benchmarks/%s/test.jsonl", *b);
        json_t *items = load_lines(t.path, name);
        size_t i, k;
        json_t *it, *st;
        json_array_foreach(items, i, it)
        {
            json_array_foreach(json_object_get(it, "solution"), k, st)
            {
                const char *q = json_string_value(json_object_get(st, "query"));
                if (!q)
                    continue;
                const json_t *v = json_object_get(st, "value");
                char want[256];
                if (json_is_string(v))
                    snprintf(want, sizeof want, "%s", json_string_value(v));
                else
                    snprintf(want, sizeof want, "%lld", (long long)json_integer_value(v));
                json_t *hits = NULL;
                if (wiki_index_query(ix, q, 3, &hits, err, sizeof err) != AF_OK)
                    fail_msg("query '%s': %s", q, err);
                int found = 0;
                size_t h;
                json_t *hit;
                json_array_foreach(hits, h, hit)
                {
                    const char *text = json_string_value(json_object_get(hit, "text"));
                    found |= text && strstr(text, want) != NULL;
                }
                if (!found)
                    fail_msg("%s %s: '%s' is not in the top 3 passages for '%s'", *b,
                             json_string_value(json_object_get(it, "pid")), want, q);
                json_decref(hits);
                n_steps++;
            }
        }
        json_decref(items);
    }
    assert_true(n_steps > 500);
    wiki_index_close(ix);
    tmp_remove(&t);
}

static void test_cli_errors(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char out[128];
    snprintf(out, sizeof out, "%s/w", t.path);
    const char *no_out[] = {proc_agentflow_bin(), "world", "build", NULL};
    const char *bad_seed[] = {
        proc_agentflow_bin(), "world", "build", "--out", out, "--seed", "x1", NULL};
    const char *unwritable[] = {proc_agentflow_bin(), "world", "build", "--out",
                                "/proc/af_no_such/w", NULL};
    const char *ok[] = {
        proc_agentflow_bin(), "world", "build",      "--out", out, "--max-train", "30",
        "--max-val",          "5",     "--max-test", "5",     NULL};
    struct proc_result r;
    assert_int_equal(proc_run(no_out, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "--out"));
    proc_result_deinit(&r);
    assert_int_equal(proc_run(bad_seed, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "x1"));
    proc_result_deinit(&r);
    assert_int_equal(proc_run(unwritable, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, "/proc/af_no_such/w"));
    proc_result_deinit(&r);
    assert_int_equal(proc_run(ok, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "indexed"));
    proc_result_deinit(&r);
    char db[256];
    snprintf(db, sizeof db, "%s/wiki.db", out);
    assert_int_equal(access(db, R_OK), 0);
    tmp_remove(&t);
}

static size_t count_in_file(const char *path, const char *needle)
{
    char *data = NULL, err[256];
    if (af_file_read(path, 256u << 20, &data, NULL, err, sizeof err) != AF_OK)
        fail_msg("%s", err);
    size_t n = 0;
    for (const char *p = data; (p = strstr(p, needle)); p++)
        n++;
    free(data);
    return n;
}

/* 50 questions of each family through the real flow and tools, the expert in every slot:
 * every clean trace reaches its gold answer, and every module's examples are written. */
static void test_expert_traces(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char w[128], out[160], noisy[160], path[256];
    snprintf(w, sizeof w, "%s/w", t.path);
    snprintf(out, sizeof out, "%s/traces.jsonl", t.path);
    snprintf(noisy, sizeof noisy, "%s/noisy.jsonl", t.path);
    const char *mk[] = {proc_agentflow_bin(), "world", "build", "--out", w, NULL};
    const char *clean[] = {
        proc_agentflow_bin(), "world", "traces", "--world", w, "--out", out, "--limit", "50", NULL};
    const char *bad[] = {proc_agentflow_bin(),
                         "world",
                         "traces",
                         "--world",
                         w,
                         "--out",
                         noisy,
                         "--limit",
                         "50",
                         "--noise",
                         "1",
                         "--bench",
                         "world-multihop",
                         NULL};
    struct proc_result r;
    assert_int_equal(proc_run(mk, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    assert_int_equal(proc_run(clean, NULL, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("world traces: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.err, "200 traces (train split), 200 reached the gold answer"));
    proc_result_deinit(&r);
    static const char *const mods[] = {"query_analysis", "planner", "executor", "verifier",
                                       "direct_output"};
    for (size_t m = 0; m < 5; m++) {
        snprintf(path, sizeof path, "%s/traces.%s.jsonl", t.path, mods[m]);
        size_t n = proc_count_lines(path);
        /* One analysis and one answer per trace; at least one step each otherwise. */
        if (m == 0 || m == 4)
            assert_int_equal(n, 200);
        else
            assert_true(n >= 200);
    }
    /* The same traces again, eight solves at once: the same bytes, in question order, so that
     * `make model` rebuilds the same data set (and the same model) whatever finishes first. */
    char again[160];
    snprintf(again, sizeof again, "%s/again.jsonl", t.path);
    const char *par[] = {
        proc_agentflow_bin(), "world", "traces", "--world", w, "--out", again, "--limit", "50",
        "--concurrency",      "8",     NULL};
    assert_int_equal(proc_run(par, NULL, 600, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    char *x = slurp(t.path, "traces.planner.jsonl"), *y = slurp(t.path, "again.planner.jsonl");
    assert_string_equal(x, y);
    free(x);
    free(y);
    x = slurp(t.path, "traces.jsonl");
    y = slurp(t.path, "again.jsonl");
    assert_string_equal(x, y);
    free(y);
    y = slurp(w, "benchmarks/world-lookup/train.jsonl");
    char first_pid[64] = "", *pp = strstr(y, "\"pid\":\"");
    assert_non_null(pp);
    sscanf(pp + 7, "%63[^\"]", first_pid);
    char want[96];
    snprintf(want, sizeof want, "\"pid\":\"%s\"", first_pid);
    char *nl = strchr(x, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_non_null(strstr(x, want)); /* the first line is the first question's */
    free(x);
    free(y);

    snprintf(path, sizeof path, "%s/traces.planner.jsonl", t.path);
    assert_int_equal(count_in_file(path, "\"role\":\"assistant\",\"content\":\"Justification: "),
                     proc_count_lines(path));
    snprintf(path, sizeof path, "%s/traces.executor.jsonl", t.path);
    assert_int_equal(count_in_file(path, "\"role\":\"assistant\",\"content\":\"Analysis: "),
                     proc_count_lines(path));

    /* Every trace imperfect: some miss the answer (early STOPs), some use the wrong tool. */
    assert_int_equal(proc_run(bad, NULL, 600, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "50 traces (train split)"));
    assert_null(strstr(r.err, "50 reached the gold answer"));
    proc_result_deinit(&r);
    snprintf(path, sizeof path, "%s/noisy.planner.jsonl", t.path);
    assert_true(count_in_file(path, "Tool Name: Generalist_Solution_Generator_Tool") > 0);

    /* --fact: only the questions that read that fact, every one of them, all solved. */
    char occ[160];
    snprintf(occ, sizeof occ, "%s/occ.jsonl", t.path);
    const char *fact[] = {proc_agentflow_bin(),
                          "world",
                          "traces",
                          "--world",
                          w,
                          "--out",
                          occ,
                          "--bench",
                          "world-lookup,world-multihop",
                          "--fact",
                          "occupation",
                          "--limit",
                          "20",
                          NULL};
    assert_int_equal(proc_run(fact, NULL, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("world traces --fact: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.err, "40 traces (train split), 40 reached the gold answer"));
    proc_result_deinit(&r);
    snprintf(path, sizeof path, "%s/occ.direct_output.jsonl", t.path);
    assert_int_equal(proc_count_lines(path), 40);
    assert_int_equal(count_in_file(path, "Query: What was the occupation of "), 40);
    const char *none[] = {
        proc_agentflow_bin(), "world", "traces", "--world", w, "--out", occ, "--fact",
        "no-such-fact",       NULL};
    assert_int_equal(proc_run(none, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "no questions selected"));
    proc_result_deinit(&r);
    tmp_remove(&t);
}

/* A Python run that times out is a passing fault of a loaded machine, not part of a trace: the
 * solve runs again (3 tries), and a clean trace that keeps the fault fails the command; the
 * same option at a sane value writes the clean traces. */
static void test_traces_retry_tool_faults(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char w[128], out[160];
    snprintf(w, sizeof w, "%s/w", t.path);
    snprintf(out, sizeof out, "%s/t.jsonl", t.path);
    const char *mk[] = {proc_agentflow_bin(), "world", "build", "--out", w,
                        "--max-train",        "40",    NULL};
    const char *run[] = {proc_agentflow_bin(),
                         "world",
                         "traces",
                         "--world",
                         w,
                         "--out",
                         out,
                         "--limit",
                         "2",
                         "--bench",
                         "world-calc",
                         NULL};
    struct proc_result r;
    assert_int_equal(proc_run(mk, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    const char *tight[] = {"AGENTFLOW_PYTHON_TIMEOUT_S=0.001", NULL};
    assert_int_equal(proc_run(run, tight, 300, &r), 0);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.err, "world-calc-train-0: Python_Code_Generator_Tool: timed out"));
    assert_non_null(strstr(r.err, "solving it again"));
    assert_non_null(strstr(r.err, "a tool call failed in all 3 tries"));
    assert_non_null(strstr(r.err, "2 traces (train split), 0 reached the gold answer, 2 failed"));
    proc_result_deinit(&r);
    const char *sane[] = {"AGENTFLOW_PYTHON_TIMEOUT_S=60", NULL};
    assert_int_equal(proc_run(run, sane, 300, &r), 0);
    if (r.exit_code != 0)
        fail_msg("world traces: exit %d: %s", r.exit_code, r.err);
    assert_null(strstr(r.err, "solving it again"));
    assert_non_null(strstr(r.err, "2 traces (train split), 2 reached the gold answer, 0 failed"));
    proc_result_deinit(&r);
    tmp_remove(&t);
}

/* The compact prompt set: the same solves reach their answers, with short prompts (no JSON
 * cards) that start with the parts every module shares. */
static void test_compact_prompts(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char w[128], out[160], path[256];
    snprintf(w, sizeof w, "%s/w", t.path);
    snprintf(out, sizeof out, "%s/c.jsonl", t.path);
    const char *mk[] = {proc_agentflow_bin(), "world", "build", "--out", w,
                        "--max-train",        "40",    NULL};
    const char *run[] = {
        proc_agentflow_bin(), "world",   "traces", "--world", w, "--out", out, "--limit", "10",
        "--prompts",          "compact", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(mk, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    assert_int_equal(proc_run(run, NULL, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("world traces --prompts compact: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.err, "40 traces (train split), 40 reached the gold answer"));
    proc_result_deinit(&r);
    snprintf(path, sizeof path, "%s/c.planner.jsonl", t.path);
    json_t *lines = load_lines(t.path, "c.planner.jsonl");
    size_t i;
    json_t *ex;
    json_array_foreach(lines, i, ex)
    {
        const char *user = json_string_value(
            json_object_get(json_array_get(json_object_get(ex, "messages"), 1), "content"));
        assert_non_null(user);
        assert_int_equal(strncmp(user, "Query: ", 7), 0);
        assert_non_null(strstr(user, "\nTools:\n- "));
        assert_null(strstr(user, "tool_description")); /* no JSON cards */
        const char *steps = strstr(user, "Steps so far:\n");
        assert_non_null(steps);
        /* Everything but the memory stays short. */
        const char *tail = strstr(steps, "\n\nPick the next step");
        assert_non_null(tail);
        size_t fixed = (size_t)(steps - user) + strlen(tail);
        if (fixed > 1800)
            fail_msg("compact planner prompt has %zu characters besides its memory", fixed);
    }
    assert_true(json_array_size(lines) >= 40);
    json_decref(lines);
    tmp_remove(&t);
}

/* expert: URLs: a missing world is a bad input file (4), a bad setting a usage error (2). */
static void test_expert_url_errors(void **state)
{
    (void)state;
    const char *missing[] = {proc_agentflow_bin(), "run", "--url", "expert:/nonexistent/w",
                             "What is 2 + 2?",     NULL};
    const char *bad_noise[] = {proc_agentflow_bin(), "run", "--url", "expert:/tmp?noise=7",
                               "What is 2 + 2?",     NULL};
    struct proc_result r;
    assert_int_equal(proc_run(missing, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, "/nonexistent/w"));
    proc_result_deinit(&r);
    assert_int_equal(proc_run(bad_noise, NULL, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "noise"));
    proc_result_deinit(&r);
}

static int str_is(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* The temperature of the planner's first call in the trace of a one-step `run` with no --url
 * under the configuration `json` (dir: a scratch folder; env: the embedded model's); the model
 * that answered it into `model` when not NULL. */
static double planner_call(const char *dir, const char *json, const char *const *env, char *model,
                           size_t len)
{
    char cfg[160], trace[160], err[256];
    snprintf(cfg, sizeof cfg, "%s/temp.json", dir);
    snprintf(trace, sizeof trace, "%s/temp.trace.jsonl", dir);
    unlink(trace);
    assert_int_equal(af_file_write_atomic(cfg, json, strlen(json), err, sizeof err), AF_OK);
    const char *run[] = {proc_agentflow_bin(),
                         "run",
                         "--config",
                         cfg,
                         "--max-steps",
                         "1",
                         "--trace",
                         trace,
                         "--json",
                         "When was Droa Wysen born?",
                         NULL};
    struct proc_result r;
    assert_int_equal(proc_run(run, env, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("run without --url: exit %d: %s", r.exit_code, r.err);
    proc_result_deinit(&r);
    FILE *f = fopen(trace, "r");
    assert_non_null(f);
    char line[65536];
    double temp = -1;
    while (temp < 0 && fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        if (j && str_is(json_object_get(j, "type"), "llm") &&
            str_is(json_object_get(j, "module"), "planner")) {
            temp =
                json_number_value(json_object_get(json_object_get(j, "sampling"), "temperature"));
            if (model)
                snprintf(model, len, "%s", json_string_value(json_object_get(j, "model")));
        }
        json_decref(j);
    }
    fclose(f);
    assert_true(temp >= 0); /* a planner call was traced */
    return temp;
}

static double planner_temperature(const char *dir, const char *json, const char *const *env)
{
    return planner_call(dir, json, env, NULL, 0);
}

/* No --url: the embedded model answers in every slot, with the world's index built on first
 * use. A random-weight stand-in is enough to check the wiring (its answer is noise). */
static void test_run_without_url(void **state)
{
    (void)state;
    struct tmpdir t = {""};
    tmp_make(&t);
    char model[128], world[128], db[160], env_model[200], env_world[200];
    snprintf(model, sizeof model, "%s/m.gguf", t.path);
    snprintf(world, sizeof world, "%s/world", t.path);
    snprintf(db, sizeof db, "%s/wiki.db", world);
    snprintf(env_model, sizeof env_model, "AGENTFLOW_EMBEDDED_MODEL=%s", model);
    snprintf(env_world, sizeof env_world, "AGENTFLOW_WORLD_DIR=%s", world);
    const char *mk[] = {proc_agentflow_bin(),
                        "model",
                        "make-random",
                        "--arch",
                        "qwen2",
                        "--shape",
                        "tiny",
                        "--type",
                        "F32",
                        "--seed",
                        "3",
                        model,
                        NULL};
    /* Short replies: a random model would otherwise write 2,048 tokens per module. */
    char cfg[160], err[256];
    snprintf(cfg, sizeof cfg, "%s/cfg.json", t.path);
    assert_int_equal(af_file_write_atomic(cfg, "{\"max_tokens\": 48}", 19, err, sizeof err), AF_OK);
    const char *run[] = {
        proc_agentflow_bin(),        "run", "--config", cfg, "--max-steps", "1", "--json",
        "When was Droa Wysen born?", NULL};
    const char *env[] = {env_model, env_world, NULL};
    struct proc_result r;
    assert_int_equal(proc_run(mk, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    assert_int_equal(proc_run(run, env, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("run without --url: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.err, "first use"));
    assert_non_null(strstr(r.err, "the embedded model"));
    assert_non_null(strstr(r.out, "\"answer\""));
    assert_int_equal(access(db, R_OK), 0);
    proc_result_deinit(&r);
    /* Second use: the index is there, so nothing is built. */
    assert_int_equal(proc_run(run, env, 600, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_null(strstr(r.err, "first use"));
    proc_result_deinit(&r);
    /* The embedded planner decodes greedily, unless the configuration sets a temperature. */
    assert_float_equal(planner_temperature(t.path, "{\"max_tokens\": 48}", env), 0.0, 0);
    assert_float_equal(
        planner_temperature(t.path, "{\"max_tokens\": 48, \"planner\": {\"temperature\": 0.5}}",
                            env),
        0.5, 1e-9);
    assert_float_equal(
        planner_temperature(t.path, "{\"max_tokens\": 48, \"temperature\": 0.25}", env), 0.25,
        1e-9);
    /* A Flow-GRPO planner beside the model (m-planner.gguf, as make-model.sh names it) takes
     * the planner slot alone; AGENTFLOW_EMBEDDED_PLANNER= (empty) turns it off. */
    char used[300], planner[160];
    assert_float_equal(planner_call(t.path, "{\"max_tokens\": 48}", env, used, sizeof used), 0.0,
                       0);
    assert_string_equal(used, model);
    snprintf(planner, sizeof planner, "%s/m-planner.gguf", t.path);
    mk[10] = "4";
    mk[11] = planner;
    assert_int_equal(proc_run(mk, NULL, 120, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    assert_int_equal(proc_run(run, env, 600, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.err, "planning with"));
    proc_result_deinit(&r);
    assert_float_equal(planner_call(t.path, "{\"max_tokens\": 48}", env, used, sizeof used), 0.0,
                       0);
    assert_string_equal(used, planner);
    const char *off[] = {env_model, env_world, "AGENTFLOW_EMBEDDED_PLANNER=", NULL};
    planner_call(t.path, "{\"max_tokens\": 48}", off, used, sizeof used);
    assert_string_equal(used, model);
    /* A missing embedded model leaves the old rule: no URL is a usage error that says how. */
    const char *gone[] = {"AGENTFLOW_EMBEDDED_MODEL=/nonexistent/m.gguf", NULL};
    assert_int_equal(proc_run(run, gone, 60, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "make model"));
    proc_result_deinit(&r);
    tmp_remove(&t);
}

/* scripts/NAME with env; fails the test with its stderr when it exits non-zero. */
static void run_script(const char *name, const char *const *env)
{
    const char *src = getenv("AGENTFLOW_SRC");
    char script[512];
    snprintf(script, sizeof script, "%s/scripts/%s", src ? src : ".", name);
    const char *argv[] = {"/bin/bash", script, NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, env, 600, &r), 0);
    int code = r.exit_code;
    char err[2048];
    snprintf(err, sizeof err, "%s", r.err ? r.err : "");
    proc_result_deinit(&r);
    if (code != 0)
        fail_msg("%s: exit %d: %s", name, code, err);
}

/* scripts/reproduce.sh and scripts/repair.sh (`make reproduce`, `make repair`) at a tiny scale
 * on the tiny recipe's build in `dir`: every stage runs ((a), (b) Flow-GRPO, (c) offline SFT,
 * the --max-steps evals, the summary; the flawed SFT and the GRPO repair), and a second run
 * finds every output in place and redoes nothing. */
static void reproduce_tiny(const char *dir, const char *af)
{
    char mb[200], rb[200], model[200], rr[200], p[300];
    /* No make-model.sh folder: the path of a fresh clone, (a) being the shipped file (here the
     * tiny one) as F32 and the world built in the work folder. */
    snprintf(mb, sizeof mb, "MODEL_BUILD=%s/none", dir);
    snprintf(rb, sizeof rb, "REPRO_BUILD=%s/repro", dir);
    snprintf(model, sizeof model, "MODEL=%s/m0.gguf", dir);
    const char *env[] = {
        af,        mb,        rb,          model, "SEEDS=1", "NQ=2", "GRPO_STEPS=1", "GRPO_BATCH=2",
        "GROUP=2", "LIMIT=1", "THREADS=2", NULL};
    run_script("reproduce.sh", env);
    snprintf(p, sizeof p, "%s/repro/summary.md", dir);
    /* One row per arm and planner mode (sampled, greedy), each with its one run. */
    assert_int_equal(count_in_file(p, "| (a) SFT on clean traces, frozen | 1 |"), 2);
    assert_int_equal(count_in_file(p, "| (b) (a) + Flow-GRPO | 1 |"), 2);
    assert_int_equal(count_in_file(p, "| (c) (a) + offline SFT on noisy traces | 1 |"), 2);
    assert_int_equal(count_in_file(p, "## Average turns by --max-steps"), 1);
    assert_int_equal(count_in_file(p, "## Case study"), 1);
    static const char *const evals[] = {"a",         "b1",        "c1",        "a-greedy",
                                        "b1-greedy", "c1-greedy", "a-steps3",  "a-steps5",
                                        "a-steps7",  "b1-steps3", "b1-steps5", "b1-steps7"};
    for (size_t i = 0; i < sizeof evals / sizeof *evals; i++) {
        snprintf(p, sizeof p, "%s/repro/eval/%s/summary.json", dir, evals[i]);
        if (access(p, F_OK) != 0)
            fail_msg("reproduce.sh left no %s", p);
    }
    snprintf(p, sizeof p, "%s/repro/base-f32.gguf", dir);
    assert_int_equal(access(p, F_OK), 0);
    snprintf(p, sizeof p, "%s/repro/world/wiki.db", dir);
    assert_int_equal(access(p, F_OK), 0);
    /* A second run redoes nothing: the GRPO run's model keeps its time. */
    snprintf(p, sizeof p, "%s/repro/grpo-1/model.gguf", dir);
    struct stat st0, st1;
    assert_int_equal(stat(p, &st0), 0);
    run_script("reproduce.sh", env);
    assert_int_equal(stat(p, &st1), 0);
    assert_int_equal(st0.st_mtim.tv_sec, st1.st_mtim.tv_sec);
    assert_int_equal(st0.st_mtim.tv_nsec, st1.st_mtim.tv_nsec);

    snprintf(rr, sizeof rr, "R=%s/repair", dir);
    const char *env2[] = {af,          model,         rr,        "SEEDS=1", "NQ=2",
                          "LIMIT=1",   "SFT_STEPS=2", "STEPS=1", "BATCH=2", "GROUP=2",
                          "THREADS=2", NULL};
    run_script("repair.sh", env2);
    static const char *const repairs[] = {"a-sampled", "a-greedy",   "c1-sampled",
                                          "c1-greedy", "g1-sampled", "g1-greedy"};
    for (size_t i = 0; i < sizeof repairs / sizeof *repairs; i++) {
        snprintf(p, sizeof p, "%s/repair/eval/%s/summary.json", dir, repairs[i]);
        if (access(p, F_OK) != 0)
            fail_msg("repair.sh left no %s", p);
    }
    /* The repair run finished. */
    snprintf(p, sizeof p, "%s/repair/grpo-1/model.gguf", dir);
    assert_int_equal(access(p, F_OK), 0);
}

/* dir/f0 and dir/f1: the same bytes, a model named `name` (quantize --name), not for
 * make-random's shape. */
static void same_model(const char *dir, const char *f0, const char *f1, const char *name)
{
    char p0[300], p1[300], err[256];
    snprintf(p0, sizeof p0, "%s/%s", dir, f0);
    snprintf(p1, sizeof p1, "%s/%s", dir, f1);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(af_file_read(p0, 64u << 20, &a, &na, err, sizeof err), AF_OK);
    assert_int_equal(af_file_read(p1, 64u << 20, &b, &nb, err, sizeof err), AF_OK);
    assert_true(na > 1000);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_non_null(memmem(a, na, name, strlen(name)));
    assert_null(memmem(a, na, "qwen2-custom", 12));
    free(a);
    free(b);
}

/* `make model` at a tiny scale, twice, in two folders: world, traces (four solves at once),
 * vocabulary, initial weights, copy drills, SFT in four phases (drills, world 1's traces, other
 * worlds' traces, one fact's questions), Q8_0, and Flow-GRPO on the planner, must come out as
 * the same bytes,
 * since the issue asks that the recipe rebuild the shipped file bit for bit. The full recipe
 * takes an hour; every stage it runs is here, only smaller. */
static void test_make_model_reproducible(void **state)
{
    (void)state;
    const char *src = getenv("AGENTFLOW_SRC");
    char script[512];
    snprintf(script, sizeof script, "%s/scripts/make-model.sh", src ? src : ".");
    if (access(script, R_OK) != 0 || access("/usr/bin/shuf", X_OK) != 0) {
        fprintf(stderr, "[  SKIP    ] %s or shuf is absent\n", script);
        skip();
    }
    struct tmpdir t = {""};
    tmp_make(&t);
    char af[600], bld[2][160], out[2][160];
    snprintf(af, sizeof af, "AF=%s", proc_agentflow_bin());
    /* Runs 0 and 1: the whole recipe in b0 and b1. Run 2: STAGE=planner (`make planner`) in b1
     * with its planner phase's outputs removed, which must rebuild the same planner from m1. */
    struct stat m1_before = {0}, m1_after = {0};
    char m1[200];
    snprintf(m1, sizeof m1, "%s/m1.gguf", t.path);
    for (int k = 0; k < 3; k++) {
        int d = k < 2 ? k : 1;
        snprintf(bld[d], sizeof bld[d], "MODEL_BUILD=%s/b%d", t.path, d);
        snprintf(out[d], sizeof out[d], "OUT=%s/m%d.gguf", t.path, d);
        if (k == 2) {
            char cmd[600];
            snprintf(cmd, sizeof cmd,
                     "rm -rf '%s/b1/grpo-planner' '%s/b1/grpo-base.gguf' '%s/m1-planner.gguf'",
                     t.path, t.path, t.path);
            assert_int_equal(system(cmd), 0);
            assert_int_equal(stat(m1, &m1_before), 0);
        }
        const char *env[] = {af,
                             k == 2 ? "STAGE=planner" : "STAGE=all",
                             bld[d],
                             out[d],
                             "TRACES=8",
                             "VOCAB=400",
                             "SHAPE=custom:1,32,2,1,64",
                             "DRILLS=40",
                             "DRILLS1=40",
                             "DRILL_STEPS=3",
                             "SFT_STEPS=6",
                             "SFT2_STEPS=3",
                             "WORLDS3=7",
                             "TRACES3=4",
                             "WORLDS4=8",
                             "TRACES4=4",
                             "SFT3_STEPS=2",
                             "WORLDS5=9",
                             "TRACES5=3",
                             "SFT_BATCH=2",
                             "GRPO_STEPS=1",
                             "GRPO_BATCH=2",
                             "GROUP=2",
                             "NQ=2",
                             "THREADS=2",
                             NULL};
        const char *argv[] = {"/bin/bash", script, NULL};
        struct proc_result r;
        assert_int_equal(proc_run(argv, env, 600, &r), 0);
        if (r.exit_code != 0)
            fail_msg("make-model.sh: exit %d: %s", r.exit_code, r.err);
        proc_result_deinit(&r);
        /* Every phase ran, the last on the questions of its fact (3 a family). */
        char ph[300];
        snprintf(ph, sizeof ph, "%s/b%d/p3-facts/done", t.path, d);
        assert_int_equal(access(ph, F_OK), 0);
        snprintf(ph, sizeof ph, "%s/b%d/p3_facts.jsonl", t.path, d);
        assert_int_equal(count_in_file(ph, "\"module\":\"direct_output\""), 6);
        assert_int_equal(count_in_file(ph, "Query: What was the occupation of "),
                         proc_count_lines(ph));
    }
    /* STAGE=planner left the SFT model alone. */
    assert_int_equal(stat(m1, &m1_after), 0);
    assert_int_equal(m1_before.st_mtim.tv_sec, m1_after.st_mtim.tv_sec);
    assert_int_equal(m1_before.st_mtim.tv_nsec, m1_after.st_mtim.tv_nsec);
    same_model(t.path, "m0.gguf", "m1.gguf", "agentflow-world");
    /* The Flow-GRPO planner (PLANNER_OUT, named after OUT) is rebuilt bit for bit too. */
    same_model(t.path, "m0-planner.gguf", "m1-planner.gguf", "agentflow-world-planner");
    char p0[200];
    snprintf(p0, sizeof p0, "%s/b0/grpo-planner/metrics.jsonl", t.path);
    assert_int_equal(proc_count_lines(p0), 1);
    reproduce_tiny(t.path, af);
    tmp_remove(&t);
}

/* The shipped embedded model (models/agentflow-world.gguf, its Flow-GRPO planner
 * agentflow-world-planner.gguf in the planner slot) on 50 held-out test questions of the
 * default world (seed 1): 25 one-hop lookups and 25 multi-hop ones, through the real flow and
 * tools, as `eval run` with no --url gives it (the planner greedy). EMBEDDED_MIN_CORRECT is
 * below the share measured (docs/WORLD.md), leaving room for batched decoding to round another
 * way. */
#define EMBEDDED_MIN_CORRECT 36 /* 46 measured (the SFT planner: 45; before phase 3: 32) */
/* The same on a world of another seed, which no training data came from: every name and
 * value must be read from the search results. */
#define EMBEDDED_MIN_CORRECT_UNSEEN 28 /* 37 measured (the SFT planner: 36; before phase 3: 39) */

/* The embedded model on the first 25 test questions of world-lookup and of world-multihop of
 * the world of `seed`: at least `min_correct` of the 50 exactly right. */
static void embedded_model_on_world(uint64_t seed, int min_correct)
{
    const char *src = getenv("AGENTFLOW_SRC");
    char model[512];
    snprintf(model, sizeof model, "%s/models/agentflow-world.gguf", src ? src : ".");
    if (access(model, R_OK) != 0) {
        fprintf(stderr, "[  SKIP    ] %s is absent (make model builds it)\n", model);
        skip();
    }
    struct tmpdir t = {""};
    tmp_make(&t);
    char world[128], bench[160], db[160], env_model[600], out[160];
    snprintf(world, sizeof world, "%s/world", t.path);
    snprintf(bench, sizeof bench, "%s/benchmarks", world);
    snprintf(db, sizeof db, "%s/wiki.db", world);
    snprintf(env_model, sizeof env_model, "AGENTFLOW_EMBEDDED_MODEL=%s", model);
    snprintf(out, sizeof out, "%s/eval", t.path);
    build(world, seed, 0);
    char in[160], err[512], cfg[160];
    /* Replies the expert writes are under 150 tokens; the cap bounds a solve that rambles. */
    snprintf(cfg, sizeof cfg, "%s/cfg.json", t.path);
    assert_int_equal(af_file_write_atomic(cfg, "{\"max_tokens\": 256}", 19, err, sizeof err),
                     AF_OK);
    snprintf(in, sizeof in, "%s/passages.jsonl", world);
    struct wiki_build_params wp = wiki_build_default_params();
    wp.shards = 1;
    struct wiki_build_stats st;
    if (wiki_index_build(in, db, &wp, &st, err, sizeof err) != AF_OK)
        fail_msg("index: %s", err);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--config",
                          cfg,
                          "--bench",
                          "world-lookup,world-multihop",
                          "--data-dir",
                          bench,
                          "--limit",
                          "25",
                          "--wiki-db",
                          db,
                          "--prompts",
                          "compact",
                          "--tools",
                          "Wikipedia_RAG_Search_Tool,Python_Code_Generator_Tool,"
                          "Generalist_Solution_Generator_Tool",
                          "--threads",
                          "2",
                          "--concurrency",
                          "4",
                          "--out",
                          out,
                          NULL};
    /* No --url: the model is the default back-end, as a user gets it (its planner greedy). */
    const char *env[] = {env_model, NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, env, 600, &r), 0);
    if (r.exit_code != 0)
        fail_msg("eval run: exit %d: %s", r.exit_code, r.err);
    assert_non_null(strstr(r.err, "the embedded model"));
    /* The Flow-GRPO planner shipped beside it plans. */
    char planner[520];
    snprintf(planner, sizeof planner, "%s/models/agentflow-world-planner.gguf", src ? src : ".");
    if (access(planner, R_OK) == 0)
        assert_non_null(strstr(r.err, "planning with"));
    proc_result_deinit(&r);
    char *text = slurp(out, "summary.json");
    json_t *sum = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(sum);
    json_int_t n = 0, correct = 0;
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(sum, "benches"), i, b)
    {
        if (strcmp(json_string_value(json_object_get(b, "bench")), "all") == 0)
            continue;
        n += json_integer_value(json_object_get(b, "n"));
        correct += json_integer_value(json_object_get(b, "correct"));
    }
    json_decref(sum);
    fprintf(stderr, "embedded model, world %llu: %lld of %lld held-out questions exactly right\n",
            (unsigned long long)seed, (long long)correct, (long long)n);
    assert_int_equal(n, 50);
    if (correct < min_correct)
        fail_msg("world %llu: %lld of 50 right, under the %d asserted (docs/WORLD.md has what "
                 "was measured when the model was made)",
                 (unsigned long long)seed, (long long)correct, min_correct);
    tmp_remove(&t);
}

/* The default world (seed 1), whose training split the model was trained on; its test
 * questions' entities are held out of the traces. */
static void test_embedded_model_answers(void **state)
{
    (void)state;
    embedded_model_on_world(1, EMBEDDED_MIN_CORRECT);
}

/* World 13: not one trace of it was trained on (make-model.sh uses worlds 1, 11, 12 and
 * 21-32), so the model must read, not recall. */
static void test_embedded_model_reads_unseen_world(void **state)
{
    (void)state;
    embedded_model_on_world(13, EMBEDDED_MIN_CORRECT_UNSEEN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_drills),
        cmocka_unit_test(test_name_drills),
        cmocka_unit_test(test_golden_slice),
        cmocka_unit_test(test_gold_answers_score),
        cmocka_unit_test(test_splits_disjoint),
        cmocka_unit_test(test_facts_found_by_search),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_expert_traces),
        cmocka_unit_test(test_traces_retry_tool_faults),
        cmocka_unit_test(test_run_without_url),
        cmocka_unit_test(test_expert_url_errors),
        cmocka_unit_test(test_compact_prompts),
        cmocka_unit_test(test_embedded_model_answers),
        cmocka_unit_test(test_embedded_model_reads_unseen_world),
        cmocka_unit_test(test_make_model_reproducible),
    };
    /* AF_TEST_FILTER=test_make_model* runs one test of this slow file. */
    if (getenv("AF_TEST_FILTER"))
        cmocka_set_test_filter(getenv("AF_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
