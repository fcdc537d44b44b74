/*
 * wiki_index.c - opening and querying the FTS5 passage index: safe BM25 queries over one or
 * more shards, merged into one ranking. See wiki_index.h for the contract; the build is in
 * wiki_build.c.
 */
#include "tools/wiki_index.h"

#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/wiki_int.h"

#define QUERY_MAX_TERMS 64
/* BM25 gives a word found in half the passages or more an idf of 1e-6, and one phrase adds at
 * most idf * (k1 + 1) = 2.2e-6, so a passage matched only by such words scores at most
 * QUERY_MAX_TERMS * 2.2e-6. Those passages are padding beside ones that match a rarer word. */
#define SCORE_FLOOR_MAX (QUERY_MAX_TERMS * 2.2e-6)

/* Doc-length cache: DL_MAX_ROWS caps it (2 bytes a row); DL_UNKNOWN marks a row whose length
 * is not cached (over 65534 tokens, or absent), read through xColumnSize instead. */
#define DL_MAX_ROWS ((size_t)256 << 20)
#define DL_UNKNOWN 0xFFFFu

struct wiki_shard {
    char name[32];      /* its FTS5 table */
    sqlite3_stmt *q;    /* the ranked query */
    sqlite3_stmt *docs; /* per-phrase document counts (indexes of several shards) */
    uint16_t *dl;       /* tokens per row (all columns), by rowid; NULL until the first query */
    size_t n_dl;        /* entries in dl */
    int dl_tried;       /* the cache load was attempted (it may have failed: dl stays NULL) */
    long long n_row;    /* rows and tokens, from FTS5's totals record */
    long long n_tok;
};

struct wiki_index {
    sqlite3 *db;
    struct wiki_shard sh[WIKI_MAX_SHARDS];
    int n_shards;
    const struct wiki_shard *cur; /* the shard whose query is stepping (af_bm25 reads its dl) */
    int uses_af_bm25;             /* the queries rank with af_bm25 (else the built-in bm25()) */
    /* Whole-index statistics for the query being run, when there are several shards. */
    int g_valid, g_nphrase;
    double g_avgdl;
    double g_idf[QUERY_MAX_TERMS];
    sqlite3_stmt *df; /* document frequency of a common term; NULL for older indexes */
    long long n_docs; /* passages, as recorded in WIKI_COMMON */
    char *path;
};

/* --- BM25 rank function with cached document lengths ----------------------------------------
 * af_bm25 reproduces FTS5's built-in bm25() (k1 = 1.2, b = 0.75, every column weight 1.0, the
 * same floating-point expression order, so the same scores), except that the row's length in
 * tokens comes from an in-memory array loaded once per connection instead of one %_docsize
 * lookup per matching row, which was ~40% of bm25()'s cost; and that on an index of several
 * shards it takes the row count, average length and document frequencies of the whole index
 * (ix->g_*) instead of its shard's. */

struct bm25_data {
    int n_phrase;
    double avgdl;
    double *idf;  /* (n_phrase) */
    double *freq; /* (n_phrase), scratch for the current row */
};

static int bm25_count_cb(const Fts5ExtensionApi *api, Fts5Context *fts, void *user)
{
    (void)api;
    (void)fts;
    (*(sqlite3_int64 *)user)++;
    return SQLITE_OK;
}

/* The BM25 inverse document frequency, as fts5Bm25GetData computes it. */
static double bm25_idf(double n_row, double n_hit)
{
    double idf = log((n_row - n_hit + 0.5) / (n_hit + 0.5));
    return idf <= 0.0 ? 1e-6 : idf;
}

/* Per-query statistics, as fts5Bm25GetData computes them. The struct is owned by FTS5
 * (freed with sqlite3_free when the query ends). */
static int bm25_data(const Fts5ExtensionApi *api, Fts5Context *fts, struct bm25_data **out)
{
    const struct wiki_index *ix = api->xUserData(fts);
    struct bm25_data *d = api->xGetAuxdata(fts, 0);
    if (d) {
        *out = d;
        return SQLITE_OK;
    }
    int n_phrase = api->xPhraseCount(fts);
    d = sqlite3_malloc64(sizeof *d + (size_t)n_phrase * 2 * sizeof(double));
    if (!d)
        return SQLITE_NOMEM;
    d->n_phrase = n_phrase;
    d->idf = (double *)&d[1];
    d->freq = d->idf + n_phrase;
    int rc = SQLITE_OK;
    if (ix->g_valid && ix->g_nphrase == n_phrase) {
        d->avgdl = ix->g_avgdl;
        memcpy(d->idf, ix->g_idf, sizeof(double) * (size_t)n_phrase);
    } else {
        sqlite3_int64 n_row = 0, n_token = 0;
        rc = api->xRowCount(fts, &n_row);
        if (rc == SQLITE_OK)
            rc = api->xColumnTotalSize(fts, -1, &n_token);
        if (rc == SQLITE_OK)
            d->avgdl = (double)n_token / (double)n_row;
        for (int i = 0; rc == SQLITE_OK && i < n_phrase; i++) {
            sqlite3_int64 n_hit = 0;
            rc = api->xQueryPhrase(fts, i, &n_hit, bm25_count_cb);
            if (rc == SQLITE_OK)
                d->idf[i] = bm25_idf((double)n_row, (double)n_hit);
        }
    }
    if (rc == SQLITE_OK)
        rc = api->xSetAuxdata(fts, d, sqlite3_free);
    else
        sqlite3_free(d);
    if (rc == SQLITE_OK)
        *out = d;
    return rc;
}

static void bm25_rank(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                      int n_val, sqlite3_value **vals)
{
    (void)n_val;
    (void)vals;
    const struct wiki_index *ix = api->xUserData(fts);
    const struct wiki_shard *sh = ix->cur;
    const double k1 = 1.2, b = 0.75;
    struct bm25_data *d = NULL;
    int n_inst = 0;
    int rc = bm25_data(api, fts, &d);
    if (rc == SQLITE_OK) {
        memset(d->freq, 0, sizeof(double) * (size_t)d->n_phrase);
        rc = api->xInstCount(fts, &n_inst);
    }
    for (int i = 0; rc == SQLITE_OK && i < n_inst; i++) {
        int ip, ic, io;
        rc = api->xInst(fts, i, &ip, &ic, &io);
        if (rc == SQLITE_OK)
            d->freq[ip] += 1.0;
    }
    double dlen = 0.0;
    if (rc == SQLITE_OK) {
        sqlite3_int64 row = api->xRowid(fts);
        unsigned cached = sh && row >= 0 && (size_t)row < sh->n_dl ? sh->dl[row] : DL_UNKNOWN;
        int n_tok = (int)cached;
        if (cached == DL_UNKNOWN)
            rc = api->xColumnSize(fts, -1, &n_tok);
        dlen = (double)n_tok;
    }
    double score = 0.0;
    for (int i = 0; rc == SQLITE_OK && i < d->n_phrase; i++)
        score += d->idf[i] *
                 ((d->freq[i] * (k1 + 1.0)) / (d->freq[i] + k1 * (1 - b + b * dlen / d->avgdl)));
    if (rc == SQLITE_OK)
        sqlite3_result_double(ctx, -1.0 * score);
    else
        sqlite3_result_error_code(ctx, rc);
}

/* af_phrase_docs(table): the documents of the shard holding each phrase of the MATCH, as a
 * blob of int64 in phrase order. Called on one matching row; the counts cover the table. */
static void phrase_docs(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx,
                        int n_val, sqlite3_value **vals)
{
    (void)n_val;
    (void)vals;
    int n = api->xPhraseCount(fts);
    sqlite3_int64 *v = sqlite3_malloc64(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    int rc = SQLITE_OK;
    for (int i = 0; rc == SQLITE_OK && i < n; i++) {
        v[i] = 0;
        rc = api->xQueryPhrase(fts, i, &v[i], bm25_count_cb);
    }
    if (rc == SQLITE_OK) {
        sqlite3_result_blob64(ctx, v, sizeof *v * (size_t)n, sqlite3_free);
    } else {
        sqlite3_free(v);
        sqlite3_result_error_code(ctx, rc);
    }
}

/* Decodes one SQLite varint (as FTS5 writes %_docsize). Returns the bytes used, 0 if cut. */
static size_t dl_varint(const unsigned char *p, size_t n, uint64_t *v)
{
    uint64_t x = 0;
    for (size_t i = 0; i < n && i < 9; i++) {
        if (i == 8) {
            *v = (x << 8) | p[i];
            return 9;
        }
        x = (x << 7) | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* Loads every row's token count from the shard's %_docsize into sh->dl (owned by the index,
 * freed at close). On any failure the cache stays empty and bm25_rank asks FTS5 per row. */
static void dl_load(struct wiki_index *ix, struct wiki_shard *sh)
{
    sh->dl_tried = 1;
    sqlite3_stmt *s = NULL;
    sqlite3_int64 max_id = -1;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT max(id) FROM \"%s_docsize\"", sh->name);
    if (sqlite3_prepare_v2(ix->db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        max_id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (max_id < 0 || (uint64_t)max_id >= DL_MAX_ROWS)
        return;
    size_t n = (size_t)max_id + 1;
    uint16_t *dl = af_xmalloc(n * sizeof *dl);
    for (size_t i = 0; i < n; i++)
        dl[i] = DL_UNKNOWN;
    snprintf(sql, sizeof sql, "SELECT id, sz FROM \"%s_docsize\"", sh->name);
    int src = sqlite3_prepare_v2(ix->db, sql, -1, &s, NULL);
    while (src == SQLITE_OK && (src = sqlite3_step(s)) == SQLITE_ROW) {
        sqlite3_int64 id = sqlite3_column_int64(s, 0);
        const unsigned char *p = sqlite3_column_blob(s, 1);
        size_t len = (size_t)sqlite3_column_bytes(s, 1), off = 0;
        uint64_t sum = 0, v;
        size_t used;
        while (off < len && (used = dl_varint(p + off, len - off, &v)) > 0) {
            sum += v;
            off += used;
        }
        if (id >= 0 && id <= max_id && off == len && sum < DL_UNKNOWN)
            dl[id] = (uint16_t)sum;
        src = SQLITE_OK;
    }
    sqlite3_finalize(s);
    if (src != SQLITE_DONE) {
        free(dl);
        return;
    }
    sh->dl = dl;
    sh->n_dl = n;
}

/* Reads the shard's row and token totals from FTS5's averages record (%_data row 1: a varint
 * row count, then one varint token total per column); an empty table may have none. */
static int shard_totals(struct wiki_index *ix, struct wiki_shard *sh)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT block FROM \"%s_data\" WHERE id = 1", sh->name);
    sqlite3_stmt *s = NULL;
    int src = sqlite3_prepare_v2(ix->db, sql, -1, &s, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(s);
    int rc = src == SQLITE_ROW || src == SQLITE_DONE ? 0 : -1;
    sh->n_row = sh->n_tok = 0;
    if (src == SQLITE_ROW && sqlite3_column_bytes(s, 0) > 0) { /* empty: an empty table */
        const unsigned char *p = sqlite3_column_blob(s, 0);
        size_t len = (size_t)sqlite3_column_bytes(s, 0), off = 0, used;
        uint64_t v = 0;
        if ((used = dl_varint(p, len, &v)) == 0)
            rc = -1;
        sh->n_row = (long long)v;
        off = used;
        while (rc == 0 && off < len && (used = dl_varint(p + off, len - off, &v)) > 0) {
            sh->n_tok += (long long)v;
            off += used;
        }
        if (off != len)
            rc = -1;
    }
    sqlite3_finalize(s);
    return rc;
}

/* Registers af_bm25 and af_phrase_docs on the connection. Returns 0, or -1 when FTS5's API
 * is unavailable. */
static int index_register_rank(struct wiki_index *ix)
{
    fts5_api *api = NULL;
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(ix->db, "SELECT fts5(?1)", -1, &s, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_pointer(s, 1, (void *)&api, "fts5_api_ptr", NULL);
    (void)sqlite3_step(s);
    sqlite3_finalize(s);
    if (!api || api->iVersion < 2)
        return -1;
    if (api->xCreateFunction(api, "af_bm25", ix, bm25_rank, NULL) != SQLITE_OK)
        return -1;
    return api->xCreateFunction(api, "af_phrase_docs", ix, phrase_docs, NULL) == SQLITE_OK ? 0 : -1;
}

/* Prepares the common-term lookup when the index has the table (older ones do not: their
 * queries keep every word). */
static void index_open_common(struct wiki_index *ix)
{
    if (sqlite3_prepare_v3(ix->db, "SELECT doc FROM " WIKI_COMMON " WHERE term = ?1", -1,
                           SQLITE_PREPARE_PERSISTENT, &ix->df, NULL) != SQLITE_OK) {
        ix->df = NULL;
        return;
    }
    sqlite3_bind_text(ix->df, 1, "", 0, SQLITE_STATIC);
    ix->n_docs = sqlite3_step(ix->df) == SQLITE_ROW ? sqlite3_column_int64(ix->df, 0) : 0;
    sqlite3_reset(ix->df);
}

/* Whether the database has an FTS5 table of that name: 1 yes, 0 no, -1 a database error. */
static int has_fts_table(sqlite3 *db, const char *name)
{
    sqlite3_stmt *chk = NULL;
    int src = sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_master WHERE type='table' AND name=?1",
                                 -1, &chk, NULL);
    if (src == SQLITE_OK) {
        sqlite3_bind_text(chk, 1, name, -1, SQLITE_STATIC);
        src = sqlite3_step(chk);
    }
    const char *sql = src == SQLITE_ROW ? (const char *)sqlite3_column_text(chk, 0) : NULL;
    int r = src != SQLITE_ROW && src != SQLITE_DONE ? -1 : sql && strstr(sql, "fts5") ? 1 : 0;
    sqlite3_finalize(chk);
    return r;
}

static int prepare(struct wiki_index *ix, const char *sql, sqlite3_stmt **out, char *err,
                   size_t errlen)
{
    if (sqlite3_prepare_v3(ix->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL) != SQLITE_OK) {
        af_errf(err, errlen, "%s: not a valid index database: %s", ix->path,
                sqlite3_errmsg(ix->db));
        return AF_EIO;
    }
    return AF_OK;
}

/* Finds the shards and prepares their statements. */
static int index_open_shards(struct wiki_index *ix, char *err, size_t errlen)
{
    int r = has_fts_table(ix->db, WIKI_TABLE);
    if (r < 0) {
        af_errf(err, errlen, "%s: not a valid index database: %s", ix->path,
                sqlite3_errmsg(ix->db));
        return AF_EIO;
    }
    if (r == 0) {
        af_errf(err, errlen, "%s: not a passage index (no FTS5 table '" WIKI_TABLE "')", ix->path);
        return AF_EIO;
    }
    ix->n_shards = 1;
    snprintf(ix->sh[0].name, sizeof ix->sh[0].name, "%s", WIKI_TABLE);
    while (ix->n_shards < WIKI_MAX_SHARDS) {
        char name[32];
        snprintf(name, sizeof name, "%s_%d", WIKI_TABLE, ix->n_shards);
        if (has_fts_table(ix->db, name) != 1)
            break;
        memcpy(ix->sh[ix->n_shards++].name, name, sizeof name);
    }
    /* af_bm25 when it registers (the same scores as bm25(), faster); bm25() otherwise, which
     * on several shards scores each with its own statistics. */
    ix->uses_af_bm25 = index_register_rank(ix) == 0;
    int rc = AF_OK;
    for (int i = 0; !rc && i < ix->n_shards; i++) {
        struct wiki_shard *sh = &ix->sh[i];
        const char *t = sh->name;
        char sql[512];
        if (ix->uses_af_bm25)
            snprintf(sql, sizeof sql,
                     "SELECT id, title, text, rank FROM \"%s\" WHERE \"%s\" MATCH ?1 AND "
                     "rank MATCH 'af_bm25()' ORDER BY rank LIMIT ?2",
                     t, t);
        else
            snprintf(sql, sizeof sql,
                     "SELECT id, title, text, bm25(\"%s\") FROM \"%s\" WHERE \"%s\" MATCH ?1 "
                     "ORDER BY rank LIMIT ?2",
                     t, t, t);
        rc = prepare(ix, sql, &sh->q, err, errlen);
        if (!rc && ix->n_shards > 1 && ix->uses_af_bm25) {
            snprintf(sql, sizeof sql,
                     "SELECT af_phrase_docs(\"%s\") FROM \"%s\" WHERE \"%s\" MATCH ?1 LIMIT 1", t,
                     t, t);
            rc = prepare(ix, sql, &sh->docs, err, errlen);
            if (!rc && shard_totals(ix, sh) != 0) {
                af_errf(err, errlen, "%s: not a valid index database: bad totals record in %s",
                        ix->path, t);
                rc = AF_EIO;
            }
        }
    }
    return rc;
}

int wiki_index_open(const char *path, int writable, struct wiki_index **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    struct stat sb;
    if (!path || !path[0]) {
        af_errf(err, errlen, "no index path given");
        return AF_EINVAL;
    }
    if (stat(path, &sb) != 0) {
        af_errf(err, errlen, "%s: no such index file (build one with `agentflow index build`)",
                path);
        return AF_ENOTFOUND;
    }
    struct wiki_index *ix = af_xcalloc(1, sizeof *ix);
    ix->path = af_xstrdup(path);
    int flags = (writable ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY) | SQLITE_OPEN_NOMUTEX;
    int rc = AF_OK;
    if (sqlite3_open_v2(path, &ix->db, flags, NULL) != SQLITE_OK) {
        af_errf(err, errlen, "%s: cannot open: %s", path,
                ix->db ? sqlite3_errmsg(ix->db) : "out of memory");
        rc = AF_EIO;
        goto out;
    }
    sqlite3_busy_timeout(ix->db, 5000);
    /* Scoring reads one %_docsize row per match: keep the index pages in memory. */
    sqlite3_exec(ix->db, "PRAGMA cache_size=-65536; PRAGMA mmap_size=4294967296;", NULL, NULL,
                 NULL);
    rc = index_open_shards(ix, err, errlen);
    if (!rc)
        index_open_common(ix);
out:
    if (rc) {
        wiki_index_close(ix);
        return rc;
    }
    *out = ix;
    return AF_OK;
}

void wiki_index_close(struct wiki_index *ix)
{
    if (!ix)
        return;
    for (int i = 0; i < WIKI_MAX_SHARDS; i++) {
        sqlite3_finalize(ix->sh[i].q);
        sqlite3_finalize(ix->sh[i].docs);
        free(ix->sh[i].dl);
    }
    sqlite3_finalize(ix->df);
    sqlite3_close(ix->db);
    free(ix->path);
    free(ix);
}

const char *wiki_index_path(const struct wiki_index *ix)
{
    return ix->path;
}

long long wiki_index_count(struct wiki_index *ix)
{
    long long n = 0;
    for (int i = 0; i < ix->n_shards && n >= 0; i++) {
        sqlite3_stmt *s = NULL;
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM \"%s\"", ix->sh[i].name);
        if (sqlite3_prepare_v2(ix->db, sql, -1, &s, NULL) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW)
            n += sqlite3_column_int64(s, 0);
        else
            n = -1;
        sqlite3_finalize(s);
    }
    return n;
}

static int is_word_byte(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

struct qword {
    const char *s;
    size_t len;
    int common;
};

/* Whether w[0, n) already holds the word (ASCII case folded, as unicode61 folds it). */
static int word_seen(const struct qword *w, size_t n, const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (w[i].len == len && strncasecmp(w[i].s, (const char *)s, len) == 0)
            return 1;
    return 0;
}

/* Splits text into at most max distinct words (runs of word bytes). Returns the count. */
static size_t split_words(const char *text, struct qword *w, size_t max)
{
    size_t n = 0;
    const unsigned char *s = (const unsigned char *)(text ? text : "");
    while (*s && n < max) {
        while (*s && !is_word_byte(*s))
            s++;
        const unsigned char *start = s;
        while (*s && is_word_byte(*s))
            s++;
        if (s == start)
            break;
        if (word_seen(w, n, start, (size_t)(s - start)))
            continue; /* a repeat would count twice in BM25 and scan its postings twice */
        w[n].s = (const char *)start;
        w[n].len = (size_t)(s - start);
        w[n].common = 0;
        n++;
    }
    return n;
}

/* Appends the words not marked common, or all of them when every word is, as quoted FTS5
 * strings OR'd together. A word holds no '"' (only letters, digits, non-ASCII bytes). */
static char *join_words(const struct qword *w, size_t n)
{
    size_t n_rare = 0;
    for (size_t i = 0; i < n; i++)
        n_rare += !w[i].common;
    struct af_buf q;
    af_buf_init(&q, AF_BUF_NOLIMIT);
    size_t n_out = 0;
    for (size_t i = 0; i < n; i++) {
        if (n_rare > 0 && w[i].common)
            continue;
        (void)af_buf_printf(&q, "%s\"%.*s\"", n_out ? " OR " : "", (int)w[i].len, w[i].s);
        n_out++;
    }
    return af_buf_detach(&q);
}

char *wiki_fts_query(const char *text, size_t max_terms)
{
    struct qword *w = af_xcalloc(max_terms ? max_terms : 1, sizeof *w);
    char *q = join_words(w, split_words(text, w, max_terms));
    free(w);
    return q;
}

/* Marks the words found in more than 1/COMMON_DROP_DIV of the passages. Matching is on the
 * ASCII-lowercased word, as unicode61 folds it; other words never count as common. */
static void mark_common(struct wiki_index *ix, struct qword *w, size_t n)
{
    if (!ix->df || ix->n_docs < COMMON_MIN_DOCS)
        return;
    for (size_t i = 0; i < n; i++) {
        char term[128];
        if (w[i].len >= sizeof term)
            continue;
        for (size_t j = 0; j < w[i].len; j++) {
            char c = w[i].s[j];
            term[j] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        }
        sqlite3_bind_text(ix->df, 1, term, (int)w[i].len, SQLITE_STATIC);
        if (sqlite3_step(ix->df) == SQLITE_ROW)
            w[i].common = sqlite3_column_int64(ix->df, 0) * COMMON_DROP_DIV > ix->n_docs;
        sqlite3_reset(ix->df);
    }
}

/* One hit of one shard, before the shards' lists are merged. */
struct shard_hit {
    double score;
    int shard;
    size_t seq;
    json_t *obj;
};

static int hit_cmp(const void *a, const void *b)
{
    const struct shard_hit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->shard != y->shard)
        return x->shard - y->shard;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Sets ix->g_* for the MATCH expression: row count, average length and each phrase's document
 * count summed over the shards, so that every shard scores as the whole index would. */
static int global_stats(struct wiki_index *ix, const char *match, char *err, size_t errlen)
{
    ix->g_valid = 0;
    if (ix->n_shards < 2 || !ix->uses_af_bm25)
        return AF_OK;
    double n_hit[QUERY_MAX_TERMS] = {0};
    long long n_row = 0, n_tok = 0;
    int n_phrase = -1;
    for (int i = 0; i < ix->n_shards; i++) {
        struct wiki_shard *sh = &ix->sh[i];
        n_row += sh->n_row;
        n_tok += sh->n_tok;
        sqlite3_bind_text(sh->docs, 1, match, -1, SQLITE_STATIC);
        int src = sqlite3_step(sh->docs);
        if (src == SQLITE_ROW) {
            int n = sqlite3_column_bytes(sh->docs, 0) / (int)sizeof(sqlite3_int64);
            const sqlite3_int64 *v = sqlite3_column_blob(sh->docs, 0);
            if (n > QUERY_MAX_TERMS || (n_phrase >= 0 && n != n_phrase))
                n = -1;
            for (int j = 0; j < n; j++) {
                sqlite3_int64 c;
                memcpy(&c, v + j, sizeof c);
                n_hit[j] += (double)c;
            }
            n_phrase = n;
            if (n < 0)
                src = SQLITE_MISMATCH;
        }
        sqlite3_reset(sh->docs);
        if (src != SQLITE_ROW && src != SQLITE_DONE) {
            af_errf(err, errlen, "%s: query failed: %s", ix->path,
                    src == SQLITE_MISMATCH ? "phrase counts differ between shards"
                                           : sqlite3_errmsg(ix->db));
            return AF_EIO;
        }
    }
    if (n_phrase < 0 || n_row <= 0)
        return AF_OK; /* nothing matches anywhere */
    ix->g_nphrase = n_phrase;
    ix->g_avgdl = (double)n_tok / (double)n_row;
    for (int j = 0; j < n_phrase; j++)
        ix->g_idf[j] = bm25_idf((double)n_row, n_hit[j]);
    ix->g_valid = 1;
    return AF_OK;
}

/* Runs the ranked query on one shard, appending its (at most k) hits. */
static int shard_query(struct wiki_index *ix, int idx, const char *match, int k,
                       struct shard_hit **hits, size_t *n, size_t *cap, char *err, size_t errlen)
{
    struct wiki_shard *sh = &ix->sh[idx];
    if (ix->uses_af_bm25 && !sh->dl_tried)
        dl_load(ix, sh);
    ix->cur = sh;
    sqlite3_bind_text(sh->q, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int(sh->q, 2, k);
    int src;
    size_t seq = 0;
    while ((src = sqlite3_step(sh->q)) == SQLITE_ROW) {
        json_t *h = json_object();
        /* TSV input is not UTF-8 checked at build time: repair on the way out. */
        json_object_set_new(h, "id", af_json_text((const char *)sqlite3_column_text(sh->q, 0)));
        json_object_set_new(h, "title", af_json_text((const char *)sqlite3_column_text(sh->q, 1)));
        json_object_set_new(h, "text", af_json_text((const char *)sqlite3_column_text(sh->q, 2)));
        double score = -sqlite3_column_double(sh->q, 3);
        json_object_set_new(h, "score", json_real(score));
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 16;
            *hits = af_xrealloc(*hits, *cap * sizeof **hits);
        }
        (*hits)[(*n)++] = (struct shard_hit){score, idx, seq++, h};
    }
    int rc = AF_OK;
    if (src != SQLITE_DONE) {
        af_errf(err, errlen, "%s: query failed: %s", ix->path, sqlite3_errmsg(ix->db));
        rc = AF_EIO;
    }
    sqlite3_reset(sh->q);
    sqlite3_clear_bindings(sh->q);
    ix->cur = NULL;
    return rc;
}

int wiki_index_query(struct wiki_index *ix, const char *text, int k, json_t **hits, char *err,
                     size_t errlen)
{
    *hits = NULL;
    if (k < 1) {
        af_errf(err, errlen, "k must be at least 1 (got %d)", k);
        return AF_EINVAL;
    }
    struct qword words[QUERY_MAX_TERMS];
    size_t n_words = split_words(text, words, QUERY_MAX_TERMS);
    mark_common(ix, words, n_words);
    char *match = join_words(words, n_words);
    struct shard_hit *all = NULL;
    size_t n = 0, cap = 0;
    int rc = AF_OK;
    if (match[0])
        rc = global_stats(ix, match, err, errlen);
    for (int i = 0; match[0] && !rc && i < ix->n_shards; i++)
        rc = shard_query(ix, i, match, k, &all, &n, &cap, err, errlen);
    ix->g_valid = 0;
    if (n > 1)
        qsort(all, n, sizeof *all, hit_cmp);
    json_t *arr = rc ? NULL : json_array();
    /* Only passages that match a word that carries weight, unless none does (a query of
     * common words only still finds its passages). */
    const int drop_floor = n > 0 && all[0].score > SCORE_FLOOR_MAX;
    for (size_t i = 0; i < n; i++) {
        if (arr && i < (size_t)k && !(drop_floor && all[i].score <= SCORE_FLOOR_MAX))
            json_array_append_new(arr, all[i].obj);
        else
            json_decref(all[i].obj);
    }
    free(all);
    free(match);
    *hits = arr;
    return rc;
}
