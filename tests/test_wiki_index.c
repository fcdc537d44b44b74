/*
 * test_wiki_index.c - the FTS5 passage index (tools/wiki_index.h) and Wikipedia_RAG_Search_Tool:
 * builds from JSONL, DPR TSV and gzip'd JSONL in a temporary directory; ranking, diacritics,
 * hostile queries, missing / corrupt databases, bad input lines, and the tool's results.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <math.h>
#include <sqlite3.h>
#include <zlib.h>

#include "agentflow/tools.h"
#include "core/buf.h"
#include "tools/wiki_index.h"
#include "tools/wiki_row.h"

static const char *JSONL =
    "{\"id\": \"p1\", \"title\": \"Zürich\", \"text\": \"Zürich is the largest city in "
    "Switzerland, on Lake Zürich.\"}\n"
    "{\"id\": 2, \"title\": \"Paris\", \"text\": \"Paris is the capital of France; the Eiffel "
    "Tower stands there.\"}\n"
    "\n"
    "{\"id\": \"p3\", \"title\": \"Marie Curie\", \"text\": \"Marie Curie won the Nobel Prize in "
    "Physics and in Chemistry.\"}\r\n"
    "{\"id\": \"p4\", \"title\": \"東京\", \"text\": \"東京 is the capital of Japan.\"}";

struct tmp {
    char dir[64];
    char path[8][128];
    size_t n;
};

static const char *tmp_file(struct tmp *t, const char *name)
{
    assert_true(t->n < 8);
    char path[sizeof t->path[0]];
    snprintf(path, sizeof path, "%s/%s", t->dir, name);
    memcpy(t->path[t->n], path, sizeof path);
    return t->path[t->n++];
}

static int setup(void **state)
{
    struct tmp *t = calloc(1, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/af_test_wiki_XXXXXX");
    if (!mkdtemp(t->dir)) {
        free(t);
        return -1;
    }
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    struct tmp *t = *state;
    for (size_t i = 0; i < t->n; i++) {
        unlink(t->path[i]);
        char side[160];
        snprintf(side, sizeof side, "%s.tmp", t->path[i]);
        unlink(side);
    }
    rmdir(t->dir);
    free(t);
    return 0;
}

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(s, 1, strlen(s), f), strlen(s));
    assert_int_equal(fclose(f), 0);
}

static const char *build_with(struct tmp *t, const char *name, const char *dbname,
                              const char *content, const struct wiki_build_params *p, size_t *n)
{
    const char *in = tmp_file(t, name);
    const char *db = tmp_file(t, dbname);
    write_file(in, content);
    char err[512] = "";
    struct wiki_build_stats st;
    int rc = wiki_index_build(in, db, p, &st, err, sizeof err);
    if (rc)
        fail_msg("build failed: %s", err);
    if (n)
        *n = st.n_passages;
    return db;
}

static const char *build_from(struct tmp *t, const char *name, const char *content, size_t *n)
{
    return build_with(t, name, "index.db", content, NULL, n);
}

static json_t *query(struct wiki_index *ix, const char *text, int k)
{
    json_t *hits = NULL;
    char err[512] = "";
    int rc = wiki_index_query(ix, text, k, &hits, err, sizeof err);
    if (rc)
        fail_msg("query '%s' failed: %s", text, err);
    assert_true(json_is_array(hits));
    return hits;
}

static const char *top_id(json_t *hits)
{
    return json_string_value(json_object_get(json_array_get(hits, 0), "id"));
}

static void expect_top(struct wiki_index *ix, const char *text, const char *id)
{
    json_t *hits = query(ix, text, 5);
    assert_true(json_array_size(hits) >= 1);
    assert_string_equal(top_id(hits), id);
    json_decref(hits);
}

static void test_build_jsonl_and_query(void **state)
{
    struct tmp *t = *state;
    size_t n = 0;
    const char *db = build_from(t, "in.jsonl", JSONL, &n);
    assert_int_equal(n, 4);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    assert_int_equal(wiki_index_count(ix), 4);
    expect_top(ix, "Eiffel tower", "2");
    expect_top(ix, "who won the Nobel prize in chemistry?", "p3");
    expect_top(ix, "Zurich", "p1"); /* diacritics removed on both sides */
    expect_top(ix, "東京", "p4");

    json_t *hits = query(ix, "capital", 5);
    assert_int_equal(json_array_size(hits), 2);
    double s0 = json_real_value(json_object_get(json_array_get(hits, 0), "score"));
    double s1 = json_real_value(json_object_get(json_array_get(hits, 1), "score"));
    assert_true(s0 >= s1 && s0 > 0);
    assert_non_null(json_object_get(json_array_get(hits, 0), "title"));
    assert_non_null(json_object_get(json_array_get(hits, 0), "text"));
    json_decref(hits);

    hits = query(ix, "capital", 1);
    assert_int_equal(json_array_size(hits), 1);
    json_decref(hits);
    assert_int_equal(wiki_index_query(ix, "x", 0, &hits, err, sizeof err), AF_EINVAL);
    wiki_index_close(ix);
}

static void test_hostile_queries(void **state)
{
    struct tmp *t = *state;
    const char *db = build_from(t, "in.jsonl", JSONL, NULL);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    static const char *hostile[] = {"\"unbalanced",
                                    "a:b",
                                    "NEAR(",
                                    "*",
                                    "-x",
                                    "AND OR NOT",
                                    "title:Paris",
                                    "(((",
                                    "^Paris",
                                    "\"\"",
                                    "Paris\" OR \"",
                                    "{title text}: x",
                                    "NOT",
                                    "+ - / \\",
                                    "\xff\xfe bad utf8"};
    for (size_t i = 0; i < sizeof hostile / sizeof hostile[0]; i++)
        json_decref(query(ix, hostile[i], 5));
    json_t *hits = query(ix, "", 5);
    assert_int_equal(json_array_size(hits), 0);
    json_decref(hits);
    hits = query(ix, "  ?!  ", 5);
    assert_int_equal(json_array_size(hits), 0);
    json_decref(hits);
    expect_top(ix, "title:Paris", "2");
    wiki_index_close(ix);

    char *q = wiki_fts_query("a:b \"c NEAR(", 10);
    assert_string_equal(q, "\"a\" OR \"b\" OR \"c\" OR \"NEAR\"");
    free(q);
    q = wiki_fts_query("one two three", 2);
    assert_string_equal(q, "\"one\" OR \"two\"");
    free(q);
}

static void test_build_tsv(void **state)
{
    struct tmp *t = *state;
    size_t n = 0;
    const char *db = build_from(t, "psgs.tsv",
                                "id\ttext\ttitle\n"
                                "1\t\"Aaron is a prophet, \"\"high priest\"\", and brother of "
                                "Moses.\"\tAaron\n"
                                "2\tThe Nile is a river in Africa.\tNile\n"
                                "3\t\"Quoted with a\ttab inside\"\t\"Tab Title\"\n",
                                &n);
    assert_int_equal(n, 3);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    json_t *hits = query(ix, "high priest", 5);
    assert_string_equal(top_id(hits), "1");
    json_t *h = json_array_get(hits, 0);
    assert_string_equal(json_string_value(json_object_get(h, "title")), "Aaron");
    assert_string_equal(json_string_value(json_object_get(h, "text")),
                        "Aaron is a prophet, \"high priest\", and brother of Moses.");
    json_decref(hits);
    expect_top(ix, "river Africa", "2");
    expect_top(ix, "tab", "3");
    hits = query(ix, "text title", 5); /* the header is not a passage */
    assert_int_equal(json_array_size(hits), 1);
    json_decref(hits);
    wiki_index_close(ix);
}

static void test_build_gzip(void **state)
{
    struct tmp *t = *state;
    const char *in = tmp_file(t, "in.jsonl.gz");
    const char *db = tmp_file(t, "index.db");
    gzFile gz = gzopen(in, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, JSONL, (unsigned)strlen(JSONL)), (int)strlen(JSONL));
    assert_int_equal(gzclose(gz), Z_OK);
    char err[512] = "";
    struct wiki_build_stats st;
    assert_int_equal(wiki_index_build(in, db, NULL, &st, err, sizeof err), AF_OK);
    assert_int_equal(st.n_passages, 4);
    struct wiki_index *ix = NULL;
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    expect_top(ix, "Switzerland lake", "p1");
    wiki_index_close(ix);
}

static void test_bad_lines(void **state)
{
    struct tmp *t = *state;
    const char *in = tmp_file(t, "bad.jsonl");
    const char *db = tmp_file(t, "bad.db");
    write_file(in, "{\"id\":\"a\",\"title\":\"A\",\"text\":\"alpha\"}\n"
                   "{\"id\":\"b\",\"title\":\"B\",\"text\":\"beta\"}\n"
                   "{\"id\":\"c\",\"title\":\"C\",\"text\": broken\n"
                   "{\"id\":[1],\"text\":\"delta\"}\n"
                   "{\"id\":\"e\",\"title\":\"E\",\"text\":\"epsilon\"}\n");
    char err[512] = "";
    assert_int_equal(wiki_index_build(in, db, NULL, NULL, err, sizeof err), AF_EPARSE);
    assert_non_null(strstr(err, "bad.jsonl:3"));
    assert_int_equal(access(db, F_OK), -1); /* nothing under the final name */
    char tmpdb[160];
    snprintf(tmpdb, sizeof tmpdb, "%s.tmp", db);
    assert_int_equal(access(tmpdb, F_OK), -1);

    struct wiki_build_params p = wiki_build_default_params();
    p.skip_bad = 1;
    struct wiki_build_stats st;
    assert_int_equal(wiki_index_build(in, db, &p, &st, err, sizeof err), AF_OK);
    assert_int_equal(st.n_passages, 3);
    assert_int_equal(st.n_skipped, 2);

    assert_int_equal(wiki_index_build(tmp_file(t, "nope.jsonl"), db, NULL, NULL, err, sizeof err),
                     AF_ENOTFOUND);
    assert_non_null(strstr(err, "nope.jsonl"));
}

static void test_missing_and_corrupt_db(void **state)
{
    struct tmp *t = *state;
    struct wiki_index *ix = NULL;
    char err[512] = "";
    const char *missing = tmp_file(t, "missing.db");
    assert_int_equal(wiki_index_open(missing, 0, &ix, err, sizeof err), AF_ENOTFOUND);
    assert_null(ix);
    assert_non_null(strstr(err, missing));

    const char *corrupt = tmp_file(t, "corrupt.db");
    char junk[4096];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof junk - 1; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (char)(1 + (x >> 16) % 255);
    }
    junk[sizeof junk - 1] = '\0';
    write_file(corrupt, junk);
    assert_int_equal(wiki_index_open(corrupt, 0, &ix, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, corrupt));

    const char *empty = tmp_file(t, "empty.db");
    write_file(empty, "");
    assert_int_equal(wiki_index_open(empty, 0, &ix, err, sizeof err), AF_EIO);
    assert_non_null(strstr(err, empty));
}

static json_t *call_tool(struct af_tool *tool, const char *args_json, int *rc)
{
    json_t *args = json_loads(args_json, 0, NULL), *valid = NULL, *result = NULL;
    char err[256];
    assert_int_equal(af_tool_validate_args(af_tool_card(tool), args, &valid, err, sizeof err),
                     AF_OK);
    *rc = af_tool_call(tool, valid, NULL, &result);
    json_decref(args);
    json_decref(valid);
    assert_non_null(result);
    return result;
}

/* Six passages, most holding "the", "is", "in": a question about one of them returns that one
 * only, not the others padded in at a score of about 1e-6. */
static void test_no_padding(void **state)
{
    struct tmp *t = *state;
    const char *six = "{\"id\": \"a\", \"title\": \"Zurich\", \"text\": \"Zurich is the largest "
                      "city in Switzerland.\"}\n"
                      "{\"id\": \"b\", \"title\": \"Paris\", \"text\": \"Paris is the capital of "
                      "France.\"}\n"
                      "{\"id\": \"c\", \"title\": \"Curie\", \"text\": \"Marie Curie won the Nobel "
                      "Prize in Physics.\"}\n"
                      "{\"id\": \"d\", \"title\": \"Tokyo\", \"text\": \"Tokyo is the capital of "
                      "Japan.\"}\n"
                      "{\"id\": \"e\", \"title\": \"Bern\", \"text\": \"Bern is the capital of "
                      "Switzerland.\"}\n"
                      "{\"id\": \"f\", \"title\": \"Lyon\", \"text\": \"Lyon is a city in France "
                      "on the Rhone.\"}\n";
    const char *db = build_from(t, "six.jsonl", six, NULL);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    json_t *hits = query(ix, "Who won the Nobel prize in physics", 5);
    assert_int_equal(json_array_size(hits), 1);
    assert_string_equal(top_id(hits), "c");
    json_decref(hits);
    hits = query(ix, "the largest city in Switzerland", 5); /* Zurich, Bern, Lyon */
    assert_int_equal(json_array_size(hits), 3);
    assert_string_equal(top_id(hits), "a");
    json_decref(hits);
    wiki_index_close(ix);
}

static void test_tool(void **state)
{
    struct tmp *t = *state;
    const char *db = build_from(t, "in.jsonl", JSONL, NULL);
    json_t *opts = json_pack("{ss}", "wiki_db", db);
    struct af_tool *tool = af_tool_wikipedia_new(opts);
    json_decref(opts);
    assert_string_equal(af_tool_card(tool)->name, "Wikipedia_RAG_Search_Tool");
    int rc;
    json_t *res = call_tool(tool, "{\"query\": \"Eiffel Tower\"}", &rc);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(json_string_value(json_object_get(res, "query")), "Eiffel Tower");
    json_t *results = json_object_get(res, "results");
    assert_true(json_array_size(results) >= 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(results, 0), "title")),
                        "Paris");
    json_decref(res);
    res = call_tool(tool, "{\"query\": \"capital\", \"k\": 1}", &rc);
    assert_int_equal(rc, AF_OK);
    assert_int_equal(json_array_size(json_object_get(res, "results")), 1);
    json_decref(res);
    res = call_tool(tool, "{\"query\": \"capital\", \"k\": 0}", &rc);
    assert_int_equal(rc, AF_ETOOL);
    json_decref(res);
    af_tool_free(tool);

    unsetenv("AGENTFLOW_WIKI_DB");
    tool = af_tool_wikipedia_new(NULL);
    res = call_tool(tool, "{\"query\": \"x\"}", &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), "AGENTFLOW_WIKI_DB"));
    json_decref(res);
    af_tool_free(tool);

    const char *missing = tmp_file(t, "none.db");
    setenv("AGENTFLOW_WIKI_DB", missing, 1);
    tool = af_tool_wikipedia_new(NULL);
    unsetenv("AGENTFLOW_WIKI_DB");
    res = call_tool(tool, "{\"query\": \"x\"}", &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), missing));
    json_decref(res);
    af_tool_free(tool);
}

/* 2000 passages that all hold "the" and "of"; one is about Zanzibar cloves. Words found in
 * nearly every passage are dropped from the OR query when rarer words remain, so the query
 * matches only passages with the rare words, and the right passage still comes first. */
static void test_common_words(void **state)
{
    struct tmp *t = *state;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (int i = 0; i < 2000; i++) {
        if (i == 1234)
            (void)af_buf_printf(&b, "{\"id\": \"z\", \"title\": \"Zanzibar\", \"text\": "
                                    "\"The history of the clove trade of Zanzibar.\"}\n");
        else
            (void)af_buf_printf(&b,
                                "{\"id\": \"d%d\", \"title\": \"Doc %d\", \"text\": "
                                "\"The story of the item%d and of the town%d.\"}\n",
                                i, i, i, i % 50);
    }
    char *jsonl = af_buf_detach(&b);
    size_t n = 0;
    const char *db = build_from(t, "common.jsonl", jsonl, &n);
    free(jsonl);
    assert_int_equal(n, 2000);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);

    json_t *hits = query(ix, "what is THE history of the Zanzibar clove trade", 5);
    assert_int_equal(json_array_size(hits), 1); /* "the", "of" no longer match everything */
    assert_string_equal(top_id(hits), "z");
    json_decref(hits);
    expect_top(ix, "the town7 of the item107", "d107");
    /* Only common words: they are kept, so the query still finds passages. */
    hits = query(ix, "of the", 5);
    assert_int_equal(json_array_size(hits), 5);
    json_decref(hits);
    /* A word in 40 of 2000 passages (2%) alone is kept: it matches all 40. */
    hits = query(ix, "town7", 100);
    assert_int_equal(json_array_size(hits), 40);
    json_decref(hits);
    /* A word in 1 passage in 2000 is never dropped, with or without common words. */
    hits = query(ix, "item5 the", 100);
    assert_int_equal(json_array_size(hits), 1);
    assert_string_equal(top_id(hits), "d5");
    json_decref(hits);
    wiki_index_close(ix);
}

/* The index ranks with af_bm25 (cached document lengths): its scores must equal FTS5's own
 * bm25() on the same MATCH expression, row for row, in the same order. */
static void test_rank_matches_bm25(void **state)
{
    struct tmp *t = *state;
    struct wiki_build_params p = wiki_build_default_params();
    p.shards = 1; /* compared with bm25() on the one table */
    const char *db = build_with(t, "in.jsonl", "index.db", JSONL, &p, NULL);
    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    static const char *queries[] = {"capital",
                                    "the capital of France",
                                    "Zurich lake city",
                                    "Nobel prize chemistry physics",
                                    "東京 capital Japan",
                                    "is the in of"};
    for (size_t qi = 0; qi < sizeof queries / sizeof queries[0]; qi++) {
        json_t *hits = query(ix, queries[qi], 10);
        char *match = wiki_fts_query(queries[qi], 64);
        sqlite3_stmt *s = NULL;
        assert_int_equal(sqlite3_prepare_v2(raw,
                                            "SELECT id, bm25(passages) FROM passages WHERE "
                                            "passages MATCH ?1 ORDER BY bm25(passages), rowid",
                                            -1, &s, NULL),
                         SQLITE_OK);
        sqlite3_bind_text(s, 1, match, -1, SQLITE_STATIC);
        size_t n = 0;
        int drop_floor = -1; /* the index leaves out near-zero rows when a better one exists */
        while (sqlite3_step(s) == SQLITE_ROW) {
            double want = -sqlite3_column_double(s, 1);
            if (drop_floor < 0)
                drop_floor = want > 64 * 2.2e-6;
            if (drop_floor && want <= 64 * 2.2e-6)
                continue;
            assert_true(n < json_array_size(hits));
            json_t *h = json_array_get(hits, n);
            double got = json_real_value(json_object_get(h, "score"));
            if (fabs(got - want) > 1e-12 * (1.0 + fabs(want)))
                fail_msg("'%s' row %zu: af_bm25 %.17g, bm25 %.17g", queries[qi], n, got, want);
            assert_string_equal(json_string_value(json_object_get(h, "id")),
                                (const char *)sqlite3_column_text(s, 0));
            n++;
        }
        assert_int_equal(n, json_array_size(hits));
        sqlite3_finalize(s);
        free(match);
        json_decref(hits);
    }
    sqlite3_close(raw);
    wiki_index_close(ix);
}

/* A corpus of n passages drawn from a skewed vocabulary (so some words pass the frequent-term
 * thresholds), with repeats inside passages and a few accented titles. */
static char *skewed_corpus(int n)
{
    static const char *const words[] = {
        "the",   "of",    "river",  "city",   "castle", "music",  "Zürich", "chemistry",
        "prize", "north", "lake",   "battle", "king",   "queen",  "poem",   "island",
        "comet", "tower", "bridge", "garden", "harbor", "valley", "forest", "desert"};
    const int nw = (int)(sizeof words / sizeof words[0]);
    uint64_t r = 0x9E3779B97F4A7C15ull;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (int i = 0; i < n; i++) {
        (void)af_buf_printf(&b, "{\"id\": %d, \"title\": \"%s %d\", \"text\": \"", i,
                            i % 17 == 0 ? "Café" : "Doc", i);
        int len = 3 + i % 23;
        for (int j = 0; j < len; j++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            uint64_t x = r >> 33;
            /* Squaring skews the draw toward the first words. */
            int w = (int)((x % 1000) * (x % 1000) * (uint64_t)nw / 1000000);
            (void)af_buf_printf(&b, "%s%s", j ? " " : "", words[w]);
        }
        /* 14 passages (just over 0.5% of 2600) that sit 7 / 5 / 2 in the batches of 7 rows
         * dealt to shards 0 / 1 / 2: in shard 2 the word is under the candidate share, so
         * its count there must be looked up. */
        int bird = (i >= 210 && i < 217) || (i >= 217 && i < 222) || (i >= 224 && i < 226);
        (void)af_buf_printf(&b, " w%d%s\"}\n", i % 211, bird ? " rarebird" : "");
    }
    return af_buf_detach(&b);
}

static void common_rows(const char *db, struct af_buf *out)
{
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "SELECT term, doc FROM passages_common ORDER BY term",
                                        -1, &s, NULL),
                     SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW)
        (void)af_buf_printf(out, "%s=%lld ", (const char *)sqlite3_column_text(s, 0),
                            (long long)sqlite3_column_int64(s, 1));
    sqlite3_finalize(s);
    sqlite3_close(raw);
}

/* An index of several shards gives the scores of a one-table index (statistics summed over the
 * shards), the same frequent-term table and the same passage count. */
static void test_shards_equal_one_table(void **state)
{
    struct tmp *t = *state;
    char *jsonl = skewed_corpus(2600);
    struct wiki_build_params p1 = wiki_build_default_params(), p3 = p1;
    p1.shards = 1;
    p3.shards = 3;
    p3.shard_lines = 7;
    size_t n1 = 0, n3 = 0;
    const char *db1 = build_with(t, "c1.jsonl", "one.db", jsonl, &p1, &n1);
    const char *db3 = build_with(t, "c3.jsonl", "three.db", jsonl, &p3, &n3);
    free(jsonl);
    assert_int_equal(n1, 2600);
    assert_int_equal(n3, 2600);
    struct af_buf c1, c3;
    af_buf_init(&c1, AF_BUF_NOLIMIT);
    af_buf_init(&c3, AF_BUF_NOLIMIT);
    common_rows(db1, &c1);
    common_rows(db3, &c3);
    assert_non_null(strstr(c1.data, "the="));
    assert_non_null(strstr(c1.data, "rarebird=14 "));
    assert_string_equal(c1.data, c3.data);
    af_buf_deinit(&c1);
    af_buf_deinit(&c3);

    /* The copied shards pass FTS5's own integrity check in the gathered file. */
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open_v2(db3, &raw, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
    static const char *const shard_names[] = {"passages", "passages_1", "passages_2"};
    for (int i = 0; i < 3; i++) {
        char sql[160], *msg = NULL;
        snprintf(sql, sizeof sql, "INSERT INTO %s(%s) VALUES('integrity-check')", shard_names[i],
                 shard_names[i]);
        if (sqlite3_exec(raw, sql, NULL, NULL, &msg) != SQLITE_OK)
            fail_msg("shard %d: %s", i, msg ? msg : "?");
    }
    /* Built with 32 KiB pages (fewer page writes at commit and in the gather). */
    sqlite3_stmt *pg = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "PRAGMA page_size", -1, &pg, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(pg), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(pg, 0), 32768);
    sqlite3_finalize(pg);
    sqlite3_close(raw);

    struct wiki_index *i1 = NULL, *i3 = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db1, 0, &i1, err, sizeof err), AF_OK);
    assert_int_equal(wiki_index_open(db3, 0, &i3, err, sizeof err), AF_OK);
    assert_int_equal(wiki_index_count(i3), 2600);
    static const char *queries[] = {
        "river castle", "zurich chemistry prize", "w17",           "the of", "comet desert w3 w200",
        "cafe",         "king queen island",      "nothingmatches"};
    for (size_t qi = 0; qi < sizeof queries / sizeof queries[0]; qi++) {
        for (int k = 1; k <= 40; k += 13) {
            json_t *a = query(i1, queries[qi], k), *b = query(i3, queries[qi], k);
            size_t n = json_array_size(a);
            assert_int_equal(json_array_size(b), n);
            for (size_t j = 0; j < n; j++) {
                double sa = json_real_value(json_object_get(json_array_get(a, j), "score"));
                double sb = json_real_value(json_object_get(json_array_get(b, j), "score"));
                if (sa != sb)
                    fail_msg("'%s' k=%d row %zu: one table %.17g, shards %.17g", queries[qi], k, j,
                             sa, sb);
                /* Ties may come in another order; a score held by one row names the row. */
                double prev =
                    j ? json_real_value(json_object_get(json_array_get(a, j - 1), "score")) : -1.0;
                double next =
                    j + 1 < n ? json_real_value(json_object_get(json_array_get(a, j + 1), "score"))
                              : -1.0;
                if (sa != prev && sa != next && j + 1 < n)
                    assert_string_equal(
                        json_string_value(json_object_get(json_array_get(a, j), "id")),
                        json_string_value(json_object_get(json_array_get(b, j), "id")));
            }
            json_decref(a);
            json_decref(b);
        }
    }
    wiki_index_close(i1);
    wiki_index_close(i3);
}

/* With rows dealt one at a time over three shards, the first bad line is still the one named,
 * no file is left behind, and skipped lines leave the good rows in every shard. */
static void test_shard_errors(void **state)
{
    struct tmp *t = *state;
    const char *in = tmp_file(t, "bad3.jsonl");
    const char *db = tmp_file(t, "bad3.db");
    write_file(in, "{\"id\":\"a\",\"title\":\"A\",\"text\":\"alpha\"}\n"
                   "{\"id\":\"b\",\"title\":\"B\",\"text\":\"beta\"}\n"
                   "{\"id\":\"c\",\"title\":\"C\",\"text\": broken\n"
                   "{\"id\":\"d\",\"title\":\"D\",\"text\":\"delta\"}\n"
                   "{\"id\":[1],\"text\":\"delta\"}\n"
                   "{\"id\":\"e\",\"title\":\"E\",\"text\":\"epsilon\"}\n");
    struct wiki_build_params p = wiki_build_default_params();
    p.shards = 3;
    p.shard_lines = 1;
    char err[512] = "";
    for (int round = 0; round < 5; round++) { /* the workers race; the verdict may not */
        assert_int_equal(wiki_index_build(in, db, &p, NULL, err, sizeof err), AF_EPARSE);
        if (!strstr(err, "bad3.jsonl:3:"))
            fail_msg("round %d: %s", round, err);
    }
    assert_int_equal(access(db, F_OK), -1);
    for (int i = 0; i < 3; i++) {
        char side[160];
        snprintf(side, sizeof side, i ? "%s.tmp.%d" : "%s.tmp", db, i);
        assert_int_equal(access(side, F_OK), -1);
    }
    p.skip_bad = 1;
    struct wiki_build_stats st;
    assert_int_equal(wiki_index_build(in, db, &p, &st, err, sizeof err), AF_OK);
    assert_int_equal(st.n_passages, 4);
    assert_int_equal(st.n_skipped, 2);
    struct wiki_index *ix = NULL;
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    assert_int_equal(wiki_index_count(ix), 4);
    expect_top(ix, "alpha", "a");
    expect_top(ix, "beta", "b");
    expect_top(ix, "delta", "d");
    expect_top(ix, "epsilon", "e");
    wiki_index_close(ix);
    p.shards = 17; /* more than a build takes */
    assert_int_equal(wiki_index_build(in, db, &p, NULL, err, sizeof err), AF_EINVAL);
}

/* A build killed with SIGKILL in mid-run leaves the last good index as it was; stale shard
 * files (here from a build with more shards) are cleared by the next build. */
static void test_build_killed(void **state)
{
    struct tmp *t = *state;
    size_t n = 0;
    const char *db = build_with(t, "small.jsonl", "kill.db", JSONL, NULL, &n);
    assert_int_equal(n, 4);
    const char *big = tmp_file(t, "big.jsonl");
    char *jsonl = skewed_corpus(200000); /* seconds of work: surely killed in mid-run */
    write_file(big, jsonl);
    free(jsonl);
    char stale[160], tmpdb[160];
    snprintf(stale, sizeof stale, "%s.tmp.%d", db, 7);
    snprintf(tmpdb, sizeof tmpdb, "%s.tmp", db);
    write_file(stale, "left by a killed 8-shard build");

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct wiki_build_params p = wiki_build_default_params();
        p.shards = 2;
        char err[512];
        _exit(wiki_index_build(big, db, &p, NULL, err, sizeof err) == 0 ? 0 : 1);
    }
    /* Kill it once the stale file is gone and DB.tmp exists: the build is under way. */
    for (int i = 0; i < 2000 && (access(tmpdb, F_OK) != 0 || access(stale, F_OK) == 0); i++) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status))
        fail_msg("the build finished before it could be killed (exit %d)", WEXITSTATUS(status));
    assert_int_equal(access(stale, F_OK), -1);

    struct wiki_index *ix = NULL;
    char err[512];
    assert_int_equal(wiki_index_open(db, 0, &ix, err, sizeof err), AF_OK);
    assert_int_equal(wiki_index_count(ix), 4);
    expect_top(ix, "Eiffel Tower", "2");
    wiki_index_close(ix);

    struct wiki_build_stats st;
    const char *small = tmp_file(t, "small2.jsonl");
    write_file(small, JSONL);
    assert_int_equal(wiki_index_build(small, db, NULL, &st, err, sizeof err), AF_OK);
    assert_int_equal(st.n_passages, 4);
    assert_int_equal(access(tmpdb, F_OK), -1);
    for (int i = 1; i < 16; i++) {
        char side[160];
        snprintf(side, sizeof side, "%s.tmp.%d", db, i);
        assert_int_equal(access(side, F_OK), -1);
    }
}

/* The direct JSONL scanner and jansson agree: verdict, message and fields. */
static void test_row_parsers_agree(void **state)
{
    (void)state;
    static const char *lines[] = {
        "{\"id\": \"p1\", \"title\": \"Zürich\", \"text\": \"Lake Zürich.\"}",
        " { \"text\" : \"t\" ,\"id\":42 } ",
        "{\"id\":-7,\"text\":\"neg\",\"title\":null}",
        "{\"id\":-0,\"text\":\"zero\"}",
        "{\"id\":123456789012345678,\"text\":\"big\"}",
        "{\"id\":1234567890123456789,\"text\":\"bigger\"}",
        "{\"id\":99999999999999999999,\"text\":\"too big\"}",
        "{\"id\":1.5,\"text\":\"real\"}",
        "{\"id\":1e3,\"text\":\"exp\"}",
        "{\"id\":01,\"text\":\"leading zero\"}",
        "{\"id\":\"a\",\"text\":\"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t end\"}",
        "{\"id\":\"a\",\"text\":\"\\u00e9\\u4e2d\\ud83d\\ude00\"}",
        "{\"id\":\"a\",\"text\":\"lone \\ud83d here\"}",
        "{\"id\":\"a\",\"text\":\"low \\ude00 here\"}",
        "{\"id\":\"a\",\"text\":\"nul \\u0000 here\"}",
        "{\"id\":\"a\",\"text\":\"bad \\x escape\"}",
        "{\"id\":\"a\",\"text\":\"short \\u12\"}",
        "{\"id\":\"a\",\"text\":\"tab\there\"}",
        "{\"id\":\"a\",\"text\":\"bad utf8 \xc3\x28\"}",
        "{\"id\":\"a\",\"text\":\"overlong \xc0\xaf\"}",
        "{\"id\":\"a\",\"text\":\"surrogate \xed\xa0\x80\"}",
        "{\"id\":\"a\",\"text\":\"past max \xf4\x90\x80\x80\"}",
        "{\"id\":\"a\",\"text\":\"cut \xe4\xb8\"}",
        "{\"id\":\"a\",\"text\":\"t\"} trailing",
        "{\"id\":\"a\",\"text\":\"t\",}",
        "{\"id\":\"a\",\"text\":\"one\",\"text\":\"two\"}",
        "{\"id\":\"a\",\"text\":\"t\",\"extra\":{\"nested\":[1,2]}}",
        "{\"id\":\"a\",\"text\":\"t\",\"extra\":true,\"n\":5,\"z\":null,\"s\":\"x\"}",
        "{\"id\":\"a\",\"text\":\"t\",\"n\":12,\"title\":\"after a number\"}",
        "{\"id\":7,\"text\":\"t\",\"n\":12}",
        "{\"id\":\"a\",\"title\":5,\"text\":\"t\"}",
        "{\"id\":\"a\",\"title\":\"T\"}",
        "{\"text\":\"no id\"}",
        "{\"id\":null,\"text\":\"null id\"}",
        "{\"id\":\"a\",\"text\":null}",
        "{}",
        "[1,2]",
        "\"just a string\"",
        "{\"id\":\"a\",\"text\":\"unterminated",
        "{\"i\\u0064\":\"escaped key\",\"text\":\"t\"}",
        "",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        struct wiki_row_scratch s1 = {0}, s2 = {0};
        struct wiki_row r1, r2;
        char w1[256] = "", w2[256] = "";
        size_t len = strlen(lines[i]);
        int a = wiki_row_jsonl(lines[i], len, &r1, &s1, w1, sizeof w1);
        int b = wiki_row_jsonl_jansson(lines[i], len, &r2, &s2, w2, sizeof w2);
        if (a != b)
            fail_msg("line %zu: scanner %d (%s), jansson %d (%s)", i, a, w1, b, w2);
        if (a == 0) {
            assert_int_equal(r1.id_len, r2.id_len);
            assert_memory_equal(r1.id, r2.id, r1.id_len);
            assert_int_equal(r1.title_len, r2.title_len);
            assert_memory_equal(r1.title, r2.title, r1.title_len);
            assert_int_equal(r1.text_len, r2.text_len);
            assert_memory_equal(r1.text, r2.text, r1.text_len);
        } else {
            assert_string_equal(w1, w2);
        }
        wiki_row_scratch_free(&s1);
        wiki_row_scratch_free(&s2);
    }
}

/* A repeated word (any ASCII case) is queried once. */
static void test_query_dedup(void **state)
{
    (void)state;
    char *q = wiki_fts_query("Paris paris PARIS capital Paris", 10);
    assert_string_equal(q, "\"Paris\" OR \"capital\"");
    free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_build_jsonl_and_query, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_queries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_tsv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_build_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_corrupt_db, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_padding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_common_words, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank_matches_bm25, setup, teardown),
        cmocka_unit_test(test_query_dedup),
        cmocka_unit_test_setup_teardown(test_shards_equal_one_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_errors, setup, teardown),
        cmocka_unit_test(test_row_parsers_agree),
        cmocka_unit_test_setup_teardown(test_build_killed, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
