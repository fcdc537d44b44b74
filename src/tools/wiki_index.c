/*
 * wiki_index.c - the FTS5 passage index: streaming build from JSONL / DPR TSV (plain or
 * gzip'd) and safe BM25 queries. See wiki_index.h for the contract.
 *
 * Build: input is read through zlib's gzread, which passes plain files through unchanged and
 * inflates gzip ones (detected by the 1f 8b magic). Lines are split in a growable window;
 * rows go in through one prepared INSERT inside transactions of batch_rows rows, with the
 * journal and fsync off (the file is a temporary until the final rename).
 */
#include "tools/wiki_index.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

#define WIKI_TABLE "passages"
#define READ_CHUNK (1u << 20)
#define QUERY_MAX_TERMS 64
#define WIKI_COMMON WIKI_TABLE "_common"
/* Build: terms in more than 1/COMMON_KEEP_DIV of the passages go into WIKI_COMMON.
 * Query: a word in more than 1/COMMON_DROP_DIV of them is dropped from the OR query when
 * rarer words remain (its BM25 weight is small, and its posting list costs the most). */
#define COMMON_KEEP_DIV 200
#define COMMON_DROP_DIV 100
#define COMMON_MIN_DOCS 1000 /* smaller indexes keep every word */

/* Doc-length cache: DL_MAX_ROWS caps it (2 bytes a row); DL_UNKNOWN marks a row whose length
 * is not cached (over 65534 tokens, or absent), read through xColumnSize instead. */
#define DL_MAX_ROWS ((size_t)256 << 20)
#define DL_UNKNOWN 0xFFFFu

struct wiki_index {
    sqlite3 *db;
    sqlite3_stmt *q;  /* the prepared query; one per connection */
    uint16_t *dl;     /* tokens per row (all columns), by rowid; NULL until the first query */
    size_t n_dl;      /* entries in dl */
    int dl_tried;     /* the cache load was attempted (it may have failed: dl stays NULL) */
    int uses_af_bm25; /* q ranks with af_bm25 (else the built-in bm25()) */
    sqlite3_stmt *df; /* document frequency of a common term; NULL for older indexes */
    long long n_docs; /* passages, as recorded in WIKI_COMMON */
    char *path;
};

struct wiki_build_params wiki_build_default_params(void)
{
    struct wiki_build_params p = {
        .skip_bad = 0,
        .batch_rows = 1000000,
        .max_line_bytes = (size_t)16 << 20,
        .optimize = 1,
        .progress = NULL,
        .user = NULL,
    };
    return p;
}

/* --- Line reader over gzread -------------------------------------------------------------- */

struct line_reader {
    gzFile gz;
    char *buf;
    size_t cap, start, end; /* unread bytes are buf[start, end) */
    size_t max_line;
    int eof;
};

static int reader_fill(struct line_reader *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->cap - r->end < READ_CHUNK / 2) {
        size_t ncap = r->cap * 2;
        if (ncap > r->max_line + READ_CHUNK + 1)
            ncap = r->max_line + READ_CHUNK + 1;
        if (ncap <= r->cap)
            return AF_ETOOBIG;
        r->buf = af_xrealloc(r->buf, ncap);
        r->cap = ncap;
    }
    size_t want = r->cap - r->end - 1;
    if (want > UINT32_MAX / 2)
        want = UINT32_MAX / 2;
    int n = gzread(r->gz, r->buf + r->end, (unsigned)want);
    if (n < 0)
        return AF_EIO;
    if (n == 0)
        r->eof = 1;
    r->end += (size_t)n;
    return AF_OK;
}

/* Sets *line (NUL-terminated, valid until the next call, '\r\n' trimmed) and *len.
 * Returns 1 for a line, 0 at end of input, or a negative AF_E*. */
static int reader_next(struct line_reader *r, char **line, size_t *len)
{
    size_t scanned = 0;
    for (;;) {
        char *nl = memchr(r->buf + r->start + scanned, '\n', r->end - r->start - scanned);
        if (nl || (r->eof && r->end > r->start)) {
            char *s = r->buf + r->start;
            size_t n = nl ? (size_t)(nl - s) : r->end - r->start;
            if (n > r->max_line)
                return AF_ETOOBIG;
            r->start += nl ? n + 1 : n;
            if (n > 0 && s[n - 1] == '\r')
                n--;
            s[n] = '\0'; /* overwrites the '\n', or the spare byte kept after end */
            *line = s;
            *len = n;
            return 1;
        }
        if (r->eof)
            return 0;
        scanned = r->end - r->start;
        if (scanned > r->max_line)
            return AF_ETOOBIG;
        int rc = reader_fill(r);
        if (rc)
            return rc;
    }
}

/* --- Row parsers ----------------------------------------------------------------------------- */

struct row {
    const char *id, *title, *text;
    size_t id_len, title_len, text_len;
    char idnum[32];
};

/* JSONL: {"id": str|int, "title": str, "text": str}. The json_t stays alive in *keep. */
static int parse_jsonl(char *line, size_t len, struct row *row, json_t **keep, char *why,
                       size_t whylen)
{
    json_error_t je;
    json_t *o = json_loadb(line, len, 0, &je);
    if (!o) {
        af_errf(why, whylen, "invalid JSON: %s", je.text);
        return AF_EPARSE;
    }
    *keep = o;
    if (!json_is_object(o)) {
        af_errf(why, whylen, "expected a JSON object");
        return AF_EPARSE;
    }
    json_t *id = json_object_get(o, "id"), *ti = json_object_get(o, "title");
    json_t *tx = json_object_get(o, "text");
    if (json_is_string(id)) {
        row->id = json_string_value(id);
        row->id_len = json_string_length(id);
    } else if (json_is_integer(id)) {
        int n = snprintf(row->idnum, sizeof row->idnum, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(id));
        row->id = row->idnum;
        row->id_len = (size_t)n;
    } else {
        af_errf(why, whylen, "\"id\" must be a string or an integer");
        return AF_EPARSE;
    }
    if (!json_is_string(tx)) {
        af_errf(why, whylen, "\"text\" must be a string");
        return AF_EPARSE;
    }
    if (ti && !json_is_string(ti) && !json_is_null(ti)) {
        af_errf(why, whylen, "\"title\" must be a string");
        return AF_EPARSE;
    }
    row->text = json_string_value(tx);
    row->text_len = json_string_length(tx);
    row->title = json_is_string(ti) ? json_string_value(ti) : "";
    row->title_len = json_is_string(ti) ? json_string_length(ti) : 0;
    return AF_OK;
}

/* One TSV field starting at *p, unquoted in place ("" -> "). Advances *p past the field and
 * its tab. Returns 0, or -1 on an unterminated quote. */
static int tsv_field(char **p, char *end, const char **out, size_t *outlen)
{
    char *s = *p;
    if (s < end && *s == '"') {
        char *w = s, *r = s + 1;
        for (;;) {
            if (r >= end)
                return -1;
            if (*r == '"') {
                if (r + 1 < end && r[1] == '"') {
                    *w++ = '"';
                    r += 2;
                    continue;
                }
                r++;
                break;
            }
            *w++ = *r++;
        }
        if (r < end && *r != '\t')
            return -1;
        *out = s;
        *outlen = (size_t)(w - s);
        *p = r < end ? r + 1 : r;
        return 0;
    }
    char *tab = memchr(s, '\t', (size_t)(end - s));
    *out = s;
    *outlen = tab ? (size_t)(tab - s) : (size_t)(end - s);
    *p = tab ? tab + 1 : end;
    return 0;
}

/* DPR TSV: id \t text \t title. */
static int parse_tsv(char *line, size_t len, struct row *row, char *why, size_t whylen)
{
    char *p = line, *end = line + len;
    if (tsv_field(&p, end, &row->id, &row->id_len) || p >= end ||
        tsv_field(&p, end, &row->text, &row->text_len) ||
        tsv_field(&p, end, &row->title, &row->title_len)) {
        af_errf(why, whylen, "expected 3 tab-separated fields (id, text, title)");
        return AF_EPARSE;
    }
    if (p < end) {
        af_errf(why, whylen, "more than 3 tab-separated fields");
        return AF_EPARSE;
    }
    if (row->id_len == 0) {
        af_errf(why, whylen, "empty id");
        return AF_EPARSE;
    }
    return AF_OK;
}

/* --- Build ----------------------------------------------------------------------------------- */

struct builder {
    const char *in_path;
    sqlite3 *db;
    sqlite3_stmt *ins;
    char *tmp_path;
    const struct wiki_build_params *p;
    struct wiki_build_stats *st;
    int is_jsonl; /* -1 until the first data line */
    char *err;
    size_t errlen;
};

static int sql_exec(struct builder *b, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(b->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        af_errf(b->err, b->errlen, "%s: %s", b->tmp_path, msg ? msg : "SQLite error");
        sqlite3_free(msg);
        return AF_EIO;
    }
    return AF_OK;
}

static int builder_open_db(struct builder *b)
{
    if (unlink(b->tmp_path) != 0 && errno != ENOENT) {
        af_errf(b->err, b->errlen, "%s: cannot remove: %s", b->tmp_path, strerror(errno));
        return AF_EIO;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(b->tmp_path, &b->db, flags, NULL) != SQLITE_OK) {
        af_errf(b->err, b->errlen, "%s: cannot create: %s", b->tmp_path,
                b->db ? sqlite3_errmsg(b->db) : "out of memory");
        return AF_EIO;
    }
    int rc = sql_exec(b, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                         "PRAGMA cache_size=-262144; PRAGMA temp_store=MEMORY; "
                         "CREATE VIRTUAL TABLE " WIKI_TABLE " USING fts5(id UNINDEXED, title, "
                         "text, tokenize = 'unicode61 remove_diacritics 2');"
                         /* No incremental merging while loading; 'optimize' merges once. */
                         "INSERT INTO " WIKI_TABLE "(" WIKI_TABLE ", rank) VALUES('automerge', 0);"
                         "INSERT INTO " WIKI_TABLE "(" WIKI_TABLE ", rank) "
                         "VALUES('crisismerge', 64);"
                         /* A 256 MiB term hash: flush to a segment rarely, not every ~1 MiB. */
                         "INSERT INTO " WIKI_TABLE "(" WIKI_TABLE ", rank) "
                         "VALUES('hashsize', 268435456);"
                         "BEGIN;");
    if (rc)
        return rc;
    if (sqlite3_prepare_v2(b->db, "INSERT INTO " WIKI_TABLE "(id, title, text) VALUES (?1, ?2, ?3)",
                           -1, &b->ins, NULL) != SQLITE_OK) {
        af_errf(b->err, b->errlen, "%s: %s", b->tmp_path, sqlite3_errmsg(b->db));
        return AF_EIO;
    }
    return AF_OK;
}

static int builder_insert(struct builder *b, const struct row *row)
{
    sqlite3_bind_text(b->ins, 1, row->id, (int)row->id_len, SQLITE_STATIC);
    sqlite3_bind_text(b->ins, 2, row->title, (int)row->title_len, SQLITE_STATIC);
    sqlite3_bind_text(b->ins, 3, row->text, (int)row->text_len, SQLITE_STATIC);
    int rc = sqlite3_step(b->ins);
    sqlite3_reset(b->ins);
    if (rc != SQLITE_DONE) {
        af_errf(b->err, b->errlen, "%s: insert failed: %s", b->tmp_path, sqlite3_errmsg(b->db));
        return AF_EIO;
    }
    b->st->n_passages++;
    if (b->st->n_passages % b->p->batch_rows == 0)
        return sql_exec(b, "COMMIT; BEGIN;");
    return AF_OK;
}

/* Parses and inserts one line. A bad line fails or is skipped, per skip_bad. */
static int builder_line(struct builder *b, char *line, size_t len)
{
    size_t lineno = b->st->n_lines;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len)
        return AF_OK; /* blank */
    if (b->is_jsonl < 0) {
        b->is_jsonl = line[i] == '{';
        if (!b->is_jsonl && lineno == 1 && strncmp(line, "id\ttext\ttitle", 13) == 0 && len == 13)
            return AF_OK; /* the DPR header */
    }
    struct row row;
    json_t *keep = NULL;
    char why[256];
    int rc = b->is_jsonl ? parse_jsonl(line, len, &row, &keep, why, sizeof why)
                         : parse_tsv(line, len, &row, why, sizeof why);
    if (rc == AF_OK)
        rc = builder_insert(b, &row);
    else if (b->p->skip_bad) {
        b->st->n_skipped++;
        rc = AF_OK;
    } else {
        af_errf(b->err, b->errlen, "%s:%zu: %s", b->in_path, lineno, why);
    }
    json_decref(keep);
    return rc;
}

static void builder_progress(struct builder *b, gzFile gz)
{
    if (!b->p->progress)
        return;
    z_off_t off = gzoffset(gz);
    b->p->progress(b->p->user, b->st->n_passages, off > 0 ? (size_t)off : 0, b->st->bytes_total);
}

static int builder_stream(struct builder *b, gzFile gz)
{
    struct line_reader r = {.gz = gz, .max_line = b->p->max_line_bytes};
    r.cap = READ_CHUNK;
    r.buf = af_xmalloc(r.cap);
    int rc = AF_OK;
    size_t next_report = b->p->batch_rows < 10000 ? b->p->batch_rows : 10000;
    for (;;) {
        char *line;
        size_t len;
        int got = reader_next(&r, &line, &len);
        if (got == 0)
            break;
        if (got < 0) {
            rc = got;
            if (rc == AF_ETOOBIG)
                af_errf(b->err, b->errlen, "%s:%zu: line longer than %zu bytes", b->in_path,
                        b->st->n_lines + 1, b->p->max_line_bytes);
            else
                af_errf(b->err, b->errlen, "%s: read error after line %zu (truncated gzip?)",
                        b->in_path, b->st->n_lines);
            break;
        }
        b->st->n_lines++;
        rc = builder_line(b, line, len);
        if (rc)
            break;
        if (b->st->n_passages >= next_report) {
            builder_progress(b, gz);
            next_report = b->st->n_passages + 10000;
        }
    }
    free(r.buf);
    return rc;
}

/* Records the terms found in more than 1/COMMON_KEEP_DIV of the passages, and the passage
 * count under the empty term (no token is empty), for the query's frequent-word drop. */
static int builder_common_terms(struct builder *b)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "CREATE VIRTUAL TABLE temp.wiki_vocab USING fts5vocab(main, '" WIKI_TABLE "', 'row');"
             "CREATE TABLE " WIKI_COMMON "(term TEXT PRIMARY KEY, doc INTEGER NOT NULL) "
             "WITHOUT ROWID;"
             "INSERT INTO " WIKI_COMMON " VALUES('', %zu);"
             "INSERT INTO " WIKI_COMMON " SELECT term, doc FROM temp.wiki_vocab WHERE doc > %zu;"
             "DROP TABLE temp.wiki_vocab;",
             b->st->n_passages, b->st->n_passages / COMMON_KEEP_DIV);
    return sql_exec(b, sql);
}

static int builder_finish(struct builder *b, const char *db_path)
{
    sqlite3_finalize(b->ins);
    b->ins = NULL;
    int rc = sql_exec(b, "COMMIT;");
    if (!rc && b->p->optimize)
        rc = sql_exec(b, "INSERT INTO " WIKI_TABLE "(" WIKI_TABLE ") VALUES('optimize');");
    if (!rc)
        rc = builder_common_terms(b);
    if (rc)
        return rc;
    if (sqlite3_close(b->db) != SQLITE_OK) {
        af_errf(b->err, b->errlen, "%s: close failed: %s", b->tmp_path, sqlite3_errmsg(b->db));
        return AF_EIO;
    }
    b->db = NULL;
    if (rename(b->tmp_path, db_path) != 0) {
        af_errf(b->err, b->errlen, "%s: cannot rename to %s: %s", b->tmp_path, db_path,
                strerror(errno));
        return AF_EIO;
    }
    return AF_OK;
}

int wiki_index_build(const char *in_path, const char *db_path, const struct wiki_build_params *p,
                     struct wiki_build_stats *st, char *err, size_t errlen)
{
    struct wiki_build_params defaults = wiki_build_default_params();
    struct wiki_build_stats st_local;
    if (!p)
        p = &defaults;
    if (!st)
        st = &st_local;
    memset(st, 0, sizeof *st);
    if (p->batch_rows == 0 || p->max_line_bytes == 0) {
        af_errf(err, errlen, "batch_rows and max_line_bytes must be > 0");
        return AF_EINVAL;
    }
    double t0 = af_clock_ms();
    struct builder b = {.in_path = in_path, .p = p, .st = st, .is_jsonl = -1};
    b.err = err;
    b.errlen = errlen;
    struct af_buf tmp;
    af_buf_init(&tmp, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&tmp, "%s.tmp", db_path);
    b.tmp_path = af_buf_detach(&tmp);
    gzFile gz = NULL;
    int rc;

    struct stat sb;
    memset(&sb, 0, sizeof sb);
    int stat_rc = stat(in_path, &sb);
    if (stat_rc != 0 || !S_ISREG(sb.st_mode)) {
        af_errf(err, errlen, "%s: %s", in_path,
                stat_rc != 0 ? strerror(errno) : "not a regular file");
        rc = stat_rc != 0 && errno == ENOENT ? AF_ENOTFOUND : AF_EIO;
        goto out;
    }
    st->bytes_total = (size_t)sb.st_size;
    gz = gzopen(in_path, "rb");
    if (!gz) {
        af_errf(err, errlen, "%s: cannot open: %s", in_path, strerror(errno));
        rc = AF_EIO;
        goto out;
    }
    gzbuffer(gz, 256 * 1024);
    rc = builder_open_db(&b);
    if (!rc)
        rc = builder_stream(&b, gz);
    if (!rc) {
        builder_progress(&b, gz);
        rc = builder_finish(&b, db_path);
    }
out:
    if (gz)
        gzclose(gz);
    sqlite3_finalize(b.ins);
    if (b.db)
        sqlite3_close(b.db);
    if (rc)
        unlink(b.tmp_path);
    free(b.tmp_path);
    st->build_ms = af_clock_ms() - t0;
    return rc;
}

/* --- Open and query -------------------------------------------------------------------------- */

/* --- BM25 rank function with cached document lengths ----------------------------------------
 * af_bm25 reproduces FTS5's built-in bm25() (k1 = 1.2, b = 0.75, every column weight 1.0, the
 * same floating-point expression order, so the same scores), except that the row's length in
 * tokens comes from an in-memory array loaded once per connection instead of one %_docsize
 * lookup per matching row, which was ~40% of bm25()'s cost. */

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

/* Per-query statistics, as fts5Bm25GetData computes them. The struct is owned by FTS5
 * (freed with sqlite3_free when the query ends). */
static int bm25_data(const Fts5ExtensionApi *api, Fts5Context *fts, struct bm25_data **out)
{
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
    sqlite3_int64 n_row = 0, n_token = 0;
    int rc = api->xRowCount(fts, &n_row);
    if (rc == SQLITE_OK)
        rc = api->xColumnTotalSize(fts, -1, &n_token);
    if (rc == SQLITE_OK)
        d->avgdl = (double)n_token / (double)n_row;
    for (int i = 0; rc == SQLITE_OK && i < n_phrase; i++) {
        sqlite3_int64 n_hit = 0;
        rc = api->xQueryPhrase(fts, i, &n_hit, bm25_count_cb);
        if (rc == SQLITE_OK) {
            double idf = log(((double)n_row - (double)n_hit + 0.5) / ((double)n_hit + 0.5));
            d->idf[i] = idf <= 0.0 ? 1e-6 : idf;
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
        unsigned cached = row >= 0 && (size_t)row < ix->n_dl ? ix->dl[row] : DL_UNKNOWN;
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

/* Loads every row's token count from %_docsize into ix->dl (owned by ix, freed at close).
 * On any failure the cache stays empty and bm25_rank asks FTS5 per row. */
static void dl_load(struct wiki_index *ix)
{
    ix->dl_tried = 1;
    sqlite3_stmt *s = NULL;
    sqlite3_int64 max_id = -1;
    if (sqlite3_prepare_v2(ix->db, "SELECT max(id) FROM " WIKI_TABLE "_docsize", -1, &s, NULL) ==
            SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        max_id = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    s = NULL;
    if (max_id < 0 || (uint64_t)max_id >= DL_MAX_ROWS)
        return;
    size_t n = (size_t)max_id + 1;
    uint16_t *dl = af_xmalloc(n * sizeof *dl);
    for (size_t i = 0; i < n; i++)
        dl[i] = DL_UNKNOWN;
    int src = sqlite3_prepare_v2(ix->db, "SELECT id, sz FROM " WIKI_TABLE "_docsize", -1, &s, NULL);
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
    ix->dl = dl;
    ix->n_dl = n;
}

/* Registers af_bm25 on the connection. Returns 0, or -1 when FTS5's API is unavailable. */
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
    return api->xCreateFunction(api, "af_bm25", ix, bm25_rank, NULL) == SQLITE_OK ? 0 : -1;
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
    sqlite3_stmt *chk = NULL;
    int src = sqlite3_prepare_v2(
        ix->db, "SELECT sql FROM sqlite_master WHERE type='table' AND name='" WIKI_TABLE "'", -1,
        &chk, NULL);
    if (src == SQLITE_OK)
        src = sqlite3_step(chk);
    const char *sql = src == SQLITE_ROW ? (const char *)sqlite3_column_text(chk, 0) : NULL;
    if (src != SQLITE_ROW && src != SQLITE_DONE) {
        af_errf(err, errlen, "%s: not a valid index database: %s", path, sqlite3_errmsg(ix->db));
        rc = AF_EIO;
    } else if (!sql || !strstr(sql, "fts5")) {
        af_errf(err, errlen, "%s: not a passage index (no FTS5 table '" WIKI_TABLE "')", path);
        rc = AF_EIO;
    }
    sqlite3_finalize(chk);
    if (rc)
        goto out;
    /* af_bm25 when it registers (the same scores as bm25(), faster); bm25() otherwise. */
    ix->uses_af_bm25 = index_register_rank(ix) == 0;
    const char *qsql = ix->uses_af_bm25
                           ? "SELECT id, title, text, rank FROM " WIKI_TABLE " WHERE " WIKI_TABLE
                             " MATCH ?1 AND rank MATCH 'af_bm25()' ORDER BY rank LIMIT ?2"
                           : "SELECT id, title, text, bm25(" WIKI_TABLE ") FROM " WIKI_TABLE
                             " WHERE " WIKI_TABLE " MATCH ?1 ORDER BY rank LIMIT ?2";
    if (sqlite3_prepare_v3(ix->db, qsql, -1, SQLITE_PREPARE_PERSISTENT, &ix->q, NULL) !=
        SQLITE_OK) {
        af_errf(err, errlen, "%s: not a valid index database: %s", path, sqlite3_errmsg(ix->db));
        rc = AF_EIO;
    }
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
    sqlite3_finalize(ix->q);
    sqlite3_finalize(ix->df);
    sqlite3_close(ix->db);
    free(ix->dl);
    free(ix->path);
    free(ix);
}

const char *wiki_index_path(const struct wiki_index *ix)
{
    return ix->path;
}

long long wiki_index_count(struct wiki_index *ix)
{
    sqlite3_stmt *s = NULL;
    long long n = -1;
    if (sqlite3_prepare_v2(ix->db, "SELECT count(*) FROM " WIKI_TABLE, -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
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
    json_t *arr = json_array();
    int rc = AF_OK;
    if (!match[0])
        goto out;
    if (ix->uses_af_bm25 && !ix->dl_tried)
        dl_load(ix);
    sqlite3_bind_text(ix->q, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int(ix->q, 2, k);
    int src;
    while ((src = sqlite3_step(ix->q)) == SQLITE_ROW) {
        json_t *h = json_object();
        /* TSV input is not UTF-8 checked at build time: repair on the way out. */
        json_object_set_new(h, "id", af_json_text((const char *)sqlite3_column_text(ix->q, 0)));
        json_object_set_new(h, "title", af_json_text((const char *)sqlite3_column_text(ix->q, 1)));
        json_object_set_new(h, "text", af_json_text((const char *)sqlite3_column_text(ix->q, 2)));
        json_object_set_new(h, "score", json_real(-sqlite3_column_double(ix->q, 3)));
        json_array_append_new(arr, h);
    }
    if (src != SQLITE_DONE) {
        af_errf(err, errlen, "%s: query failed: %s", ix->path, sqlite3_errmsg(ix->db));
        rc = AF_EIO;
    }
    sqlite3_reset(ix->q);
    sqlite3_clear_bindings(ix->q);
out:
    free(match);
    if (rc)
        json_decref(arr);
    else
        *hits = arr;
    return rc;
}
