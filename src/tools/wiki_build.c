/*
 * wiki_build.c - the passage index build: JSONL / DPR TSV (plain or gzip'd) streamed into FTS5
 * shards that are built in parallel, then gathered into one database file. See wiki_index.h.
 *
 * The reading thread cuts the input into lines (zlib's gzread passes plain files through and
 * inflates gzip ones) and hands batches of lines round-robin to one worker per shard. Each
 * worker parses its lines and inserts them through its own connection to its own temporary
 * file, since SQLite allows one writer per file; journal and fsync are off (the files are
 * temporaries). At the end the workers commit and optimize in parallel, the other shards'
 * FTS5 shadow tables are copied row for row into shard 0's file, and the frequent-term table
 * is written with document counts summed over the shards. All of it happens in DB.tmp and
 * DB.tmp.N; DB.tmp is renamed onto DB only when everything succeeded.
 */
#include "tools/wiki_index.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "tools/wiki_int.h"
#include "tools/wiki_row.h"

#define READ_CHUNK (1u << 20)
#define BATCH_BYTES ((size_t)1 << 20) /* a hand-off batch holds at most this much text... */
#define AUTO_SHARDS_MAX 4             /* ...and shards = online CPUs, at most this many */
/* 32 KiB pages instead of 4 KiB: an eighth of the page reads and writes (syscalls) for the
 * segment flush at commit and for copying the shards into one file; 1M passages: gather
 * 2.6-3.9 s -> 1.3-1.7 s, commit+terms 3.6-5.3 s -> 2.7-3.0 s, index 4% smaller. */
#define PAGE_SIZE "32768"

/* SQLite's allocation statistics take one process-wide mutex on every malloc and free, which
 * made the shard threads queue on it (2 threads: 6.3 s instead of 4.3 s for 200k passages).
 * The statistics only feed sqlite3_memory_used() and the soft heap limit, which this program
 * does not use. sqlite3_config must run before SQLite initialises and while one thread runs,
 * hence a constructor; if SQLite is already initialised the call fails and changes nothing. */
__attribute__((constructor)) static void sqlite_no_memstatus(void)
{
    (void)sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

struct wiki_build_params wiki_build_default_params(void)
{
    struct wiki_build_params p = {
        .skip_bad = 0,
        .batch_rows = 1000000,
        .max_line_bytes = (size_t)16 << 20,
        .optimize = 1,
        .shards = 0,
        .shard_lines = 1024,
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
    int truncated; /* the gzip stream ended before its end marker */
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
    if (n == 0) {
        /* zlib hands out what a cut stream held, then says Z_BUF_ERROR: that is a damaged
         * file, never a clean end, whatever --skip-bad says about malformed lines */
        int zerr = Z_OK;
        (void)gzerror(r->gz, &zerr);
        if (zerr == Z_BUF_ERROR) {
            r->truncated = 1;
            return AF_EIO;
        }
        r->eof = 1;
    }
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

/* --- Batches handed from the reader to the shard workers ---------------------------------- */

struct wb_line {
    size_t off, len, lineno; /* text + off holds len bytes and a NUL */
};

struct wb_batch {
    char *text;
    size_t len, cap;
    struct wb_line *lines;
    size_t n, cap_lines;
    struct wb_batch *next; /* the free list */
};

static void batch_add(struct wb_batch *bt, const char *line, size_t len, size_t lineno)
{
    if (bt->len + len + 1 > bt->cap) {
        size_t ncap = bt->cap ? bt->cap : BATCH_BYTES;
        while (ncap < bt->len + len + 1)
            ncap *= 2;
        bt->text = af_xrealloc(bt->text, ncap);
        bt->cap = ncap;
    }
    if (bt->n == bt->cap_lines) {
        bt->cap_lines = bt->cap_lines ? bt->cap_lines * 2 : 256;
        bt->lines = af_xrealloc(bt->lines, bt->cap_lines * sizeof *bt->lines);
    }
    memcpy(bt->text + bt->len, line, len);
    bt->text[bt->len + len] = '\0';
    bt->lines[bt->n++] = (struct wb_line){bt->len, len, lineno};
    bt->len += len + 1;
}

/* --- Shards -------------------------------------------------------------------------------- */

struct term_doc {
    char *term;
    long long doc;
    int shard;
};

struct build;

struct shard {
    struct build *b;
    int idx;
    char name[32]; /* its FTS5 table */
    char *path;    /* DB.tmp for shard 0, DB.tmp.N for shard N */
    sqlite3 *db;
    sqlite3_stmt *ins;
    sqlite3_stmt *vocab_q; /* documents holding one term, from temp.wiki_vocab */
    pthread_t th;
    int running;
    struct wb_batch *pending; /* handed over, not yet taken; guarded by build.mu */
    size_t n_rows, n_skipped, in_txn;
    int rc;          /* the first failure; later batches are drained unprocessed */
    size_t err_line; /* its input line (0: not tied to one) */
    char err[768];
    struct wiki_row_scratch scratch;
    struct term_doc *cand; /* terms over the candidate threshold (finish phase) */
    size_t n_cand;
};

struct build {
    const char *in_path;
    const struct wiki_build_params *p;
    struct wiki_build_stats *st;
    int is_jsonl; /* -1 until the first data line */
    int n_shards;
    struct shard sh[WIKI_MAX_SHARDS];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct wb_batch *free_list;
    struct wb_batch *all[2 * WIKI_MAX_SHARDS + 1];
    int n_all;
    int closing;        /* no more batches: a worker exits once its slot is empty */
    int failed;         /* a worker failed: the reader stops */
    size_t n_done;      /* rows inserted, all shards (for progress) */
    long long cand_thr; /* finish phase: a term is a candidate above this document count */
};

static void shard_table_name(char *out, size_t n, int idx)
{
    if (idx == 0)
        snprintf(out, n, "%s", WIKI_TABLE);
    else
        snprintf(out, n, "%s_%d", WIKI_TABLE, idx);
}

static int shard_exec(struct shard *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        af_errf(s->err, sizeof s->err, "%s: %s", s->path, msg ? msg : sqlite3_errmsg(s->db));
        sqlite3_free(msg);
        return AF_EIO;
    }
    return AF_OK;
}

static int shard_open(struct shard *s, int n_shards)
{
    if (unlink(s->path) != 0 && errno != ENOENT) {
        af_errf(s->err, sizeof s->err, "%s: cannot remove: %s", s->path, strerror(errno));
        return AF_EIO;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(s->path, &s->db, flags, NULL) != SQLITE_OK) {
        af_errf(s->err, sizeof s->err, "%s: cannot create: %s", s->path,
                s->db ? sqlite3_errmsg(s->db) : "out of memory");
        return AF_EIO;
    }
    /* A large term hash flushes to a segment rarely (the default flushes every ~1 MiB);
     * 512 MiB in all, at least 64 MiB a shard. */
    long long hash = ((long long)512 << 20) / n_shards;
    if (hash < (64 << 20))
        hash = 64 << 20;
    char sql[1024];
    snprintf(sql, sizeof sql,
             "PRAGMA page_size=" PAGE_SIZE
             "; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-131072; "
             "PRAGMA temp_store=MEMORY; "
             "CREATE VIRTUAL TABLE \"%s\" USING fts5(" WIKI_FTS_ARGS ");"
             /* No incremental merging while loading; 'optimize' merges once. */
             "INSERT INTO \"%s\"(\"%s\", rank) VALUES('automerge', 0);"
             "INSERT INTO \"%s\"(\"%s\", rank) VALUES('crisismerge', 64);"
             "INSERT INTO \"%s\"(\"%s\", rank) VALUES('hashsize', %lld);"
             "BEGIN;",
             s->name, s->name, s->name, s->name, s->name, s->name, s->name, hash);
    int rc = shard_exec(s, sql);
    if (rc)
        return rc;
    snprintf(sql, sizeof sql, "INSERT INTO \"%s\"(id, title, text) VALUES (?1, ?2, ?3)", s->name);
    if (sqlite3_prepare_v2(s->db, sql, -1, &s->ins, NULL) != SQLITE_OK) {
        af_errf(s->err, sizeof s->err, "%s: %s", s->path, sqlite3_errmsg(s->db));
        return AF_EIO;
    }
    return AF_OK;
}

static int shard_insert(struct shard *s, const struct wiki_row *row, size_t lineno)
{
    sqlite3_bind_text(s->ins, 1, row->id, (int)row->id_len, SQLITE_STATIC);
    sqlite3_bind_text(s->ins, 2, row->title, (int)row->title_len, SQLITE_STATIC);
    sqlite3_bind_text(s->ins, 3, row->text, (int)row->text_len, SQLITE_STATIC);
    int rc = sqlite3_step(s->ins);
    sqlite3_reset(s->ins);
    if (rc != SQLITE_DONE) {
        af_errf(s->err, sizeof s->err, "%s: insert of %s:%zu failed: %s", s->path, s->b->in_path,
                lineno, sqlite3_errmsg(s->db));
        return AF_EIO;
    }
    s->n_rows++;
    if (++s->in_txn >= s->b->p->batch_rows) {
        s->in_txn = 0;
        return shard_exec(s, "COMMIT; BEGIN;");
    }
    return AF_OK;
}

/* Parses and inserts a batch; the first bad line fails the shard or is skipped (skip_bad). */
static void shard_batch(struct shard *s, struct wb_batch *bt)
{
    struct build *b = s->b;
    for (size_t i = 0; i < bt->n && s->rc == AF_OK; i++) {
        char *line = bt->text + bt->lines[i].off;
        size_t len = bt->lines[i].len, lineno = bt->lines[i].lineno;
        struct wiki_row row;
        char why[256];
        int rc = b->is_jsonl ? wiki_row_jsonl(line, len, &row, &s->scratch, why, sizeof why)
                             : wiki_row_tsv(line, len, &row, why, sizeof why);
        if (rc == AF_OK) {
            rc = shard_insert(s, &row, lineno);
        } else if (b->p->skip_bad) {
            s->n_skipped++;
            rc = AF_OK;
        } else {
            af_errf(s->err, sizeof s->err, "%s:%zu: %s", b->in_path, lineno, why);
        }
        if (rc) {
            s->rc = rc;
            s->err_line = lineno;
        }
    }
}

static void *shard_worker(void *arg)
{
    struct shard *s = arg;
    struct build *b = s->b;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        while (!s->pending && !b->closing)
            pthread_cond_wait(&b->cv, &b->mu);
        struct wb_batch *bt = s->pending;
        s->pending = NULL;
        pthread_cond_broadcast(&b->cv); /* the slot is free */
        pthread_mutex_unlock(&b->mu);
        if (!bt)
            break;
        size_t before = s->n_rows;
        if (s->rc == AF_OK)
            shard_batch(s, bt);
        pthread_mutex_lock(&b->mu);
        bt->next = b->free_list;
        b->free_list = bt;
        b->n_done += s->n_rows - before;
        if (s->rc)
            b->failed = 1;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
    return NULL;
}

/* --- The reading thread -------------------------------------------------------------------- */

/* A free batch, emptied; NULL when a worker has failed (the reader stops). */
static struct wb_batch *batch_take(struct build *b)
{
    pthread_mutex_lock(&b->mu);
    while (!b->free_list && !b->failed)
        pthread_cond_wait(&b->cv, &b->mu);
    struct wb_batch *bt = b->failed ? NULL : b->free_list;
    if (bt)
        b->free_list = bt->next;
    pthread_mutex_unlock(&b->mu);
    if (bt)
        bt->n = bt->len = 0;
    return bt;
}

/* Hands bt to shard idx once its slot is free. Returns the rows inserted so far. */
static size_t batch_give(struct build *b, int idx, struct wb_batch *bt)
{
    pthread_mutex_lock(&b->mu);
    while (b->sh[idx].pending && !b->failed)
        pthread_cond_wait(&b->cv, &b->mu);
    if (b->failed) {
        bt->next = b->free_list;
        b->free_list = bt;
    } else {
        b->sh[idx].pending = bt;
        pthread_cond_broadcast(&b->cv);
    }
    size_t done = b->n_done;
    pthread_mutex_unlock(&b->mu);
    return done;
}

static void build_progress(struct build *b, gzFile gz, size_t n_done)
{
    if (!b->p->progress)
        return;
    z_off_t off = gzoffset(gz);
    b->p->progress(b->p->user, n_done, off > 0 ? (size_t)off : 0, b->st->bytes_total);
}

/* Whether the line is data: blank lines (counted in n_blank) and the DPR header are not; a
 * TSV row of empty fields (only tabs) is data, so the parser rejects or skips it and counts
 * it. Fixes the format on the first data line. */
static int is_data_line(struct build *b, const char *line, size_t len, size_t lineno)
{
    size_t i = 0;
    int tabs = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        tabs |= line[i++] == '\t';
    if (i == len && !(tabs && b->is_jsonl == 0)) {
        b->st->n_blank++;
        return 0;
    }
    if (b->is_jsonl < 0) {
        b->is_jsonl = line[i] == '{';
        if (!b->is_jsonl && lineno == 1 && len == 13 && strncmp(line, "id\ttext\ttitle", 13) == 0)
            return 0;
    }
    return 1;
}

/* Reads every line and deals batches round-robin. On a read error returns it with its message
 * in *err_out and the line it happened at in *err_line. */
static int build_read(struct build *b, gzFile gz, char *err, size_t errlen, size_t *err_line)
{
    struct line_reader r = {.gz = gz, .max_line = b->p->max_line_bytes};
    r.cap = READ_CHUNK;
    r.buf = af_xmalloc(r.cap);
    int rc = AF_OK, next = 0;
    size_t report_every = b->p->batch_rows < 10000 ? b->p->batch_rows : 10000;
    size_t next_report = report_every;
    struct wb_batch *bt = batch_take(b);
    while (bt) {
        char *line;
        size_t len;
        int got = reader_next(&r, &line, &len);
        if (got < 0) {
            rc = got;
            *err_line = b->st->n_lines + 1;
            if (rc == AF_ETOOBIG)
                af_errf(err, errlen, "%s:%zu: line longer than %zu bytes", b->in_path,
                        b->st->n_lines + 1, b->p->max_line_bytes);
            else if (r.truncated)
                af_errf(err, errlen,
                        "%s: the gzip stream is cut short after line %zu: the file is "
                        "truncated or damaged",
                        b->in_path, b->st->n_lines);
            else
                af_errf(err, errlen, "%s: read error after line %zu (truncated gzip?)", b->in_path,
                        b->st->n_lines);
        }
        if (got > 0) {
            b->st->n_lines++;
            if (is_data_line(b, line, len, b->st->n_lines))
                batch_add(bt, line, len, b->st->n_lines);
        }
        int full = bt->n >= b->p->shard_lines || bt->len >= BATCH_BYTES;
        if (bt->n > 0 && (full || got <= 0)) {
            size_t done = batch_give(b, next, bt);
            next = (next + 1) % b->n_shards;
            bt = NULL;
            if (done >= next_report) {
                build_progress(b, gz, done);
                next_report = done + report_every;
            }
        }
        if (got <= 0)
            break;
        if (!bt)
            bt = batch_take(b);
    }
    if (bt) { /* unused: back to the pool */
        pthread_mutex_lock(&b->mu);
        bt->next = b->free_list;
        b->free_list = bt;
        pthread_mutex_unlock(&b->mu);
    }
    free(r.buf);
    return rc;
}

/* --- Finish: commit, optimize, frequent terms, gather the shards --------------------------- */

static int term_cmp(const void *a, const void *b)
{
    const struct term_doc *x = a, *y = b;
    int c = strcmp(x->term, y->term);
    return c ? c : (x->shard > y->shard) - (x->shard < y->shard);
}

/* Per shard, in parallel: commit, optimize, and list the terms over cand_thr documents. */
static void *shard_finish(void *arg)
{
    struct shard *s = arg;
    sqlite3_finalize(s->ins);
    s->ins = NULL;
    char sql[512];
    s->rc = shard_exec(s, "COMMIT;");
    if (!s->rc && s->b->p->optimize) {
        snprintf(sql, sizeof sql, "INSERT INTO \"%s\"(\"%s\") VALUES('optimize');", s->name,
                 s->name);
        s->rc = shard_exec(s, sql);
    }
    if (!s->rc) {
        snprintf(sql, sizeof sql,
                 "CREATE VIRTUAL TABLE temp.wiki_vocab USING fts5vocab(main, '%s', 'row');",
                 s->name);
        s->rc = shard_exec(s, sql);
    }
    sqlite3_stmt *q = NULL;
    if (!s->rc && (sqlite3_prepare_v2(s->db, "SELECT term, doc FROM temp.wiki_vocab WHERE doc > ?1",
                                      -1, &q, NULL) != SQLITE_OK ||
                   sqlite3_prepare_v2(s->db, "SELECT doc FROM temp.wiki_vocab WHERE term = ?1", -1,
                                      &s->vocab_q, NULL) != SQLITE_OK)) {
        af_errf(s->err, sizeof s->err, "%s: %s", s->path, sqlite3_errmsg(s->db));
        s->rc = AF_EIO;
    }
    if (!s->rc) {
        sqlite3_bind_int64(q, 1, s->b->cand_thr);
        size_t cap = 0;
        int src;
        while ((src = sqlite3_step(q)) == SQLITE_ROW) {
            if (s->n_cand == cap) {
                cap = cap ? cap * 2 : 256;
                s->cand = af_xrealloc(s->cand, cap * sizeof *s->cand);
            }
            s->cand[s->n_cand++] =
                (struct term_doc){af_xstrdup((const char *)sqlite3_column_text(q, 0)),
                                  sqlite3_column_int64(q, 1), s->idx};
        }
        if (src != SQLITE_DONE) {
            af_errf(s->err, sizeof s->err, "%s: %s", s->path, sqlite3_errmsg(s->db));
            s->rc = AF_EIO;
        }
    }
    sqlite3_finalize(q);
    return NULL;
}

/* Documents holding term in shard s (0 if none). */
static long long shard_term_docs(struct shard *s, const char *term, int *rc)
{
    sqlite3_bind_text(s->vocab_q, 1, term, -1, SQLITE_STATIC);
    int src = sqlite3_step(s->vocab_q);
    long long n = src == SQLITE_ROW ? sqlite3_column_int64(s->vocab_q, 0) : 0;
    if (src != SQLITE_ROW && src != SQLITE_DONE) {
        af_errf(s->err, sizeof s->err, "%s: %s", s->path, sqlite3_errmsg(s->db));
        *rc = AF_EIO;
    }
    sqlite3_reset(s->vocab_q);
    return n;
}

/* Writes WIKI_COMMON into shard 0's file: the passage count under '' and every term found in
 * more than 1/COMMON_KEEP_DIV of all passages. A term over that share overall is over it in at
 * least one shard, so the candidates hold every such term; its count in the other shards is
 * looked up. */
static int build_common(struct build *b, long long n_total)
{
    struct shard *s0 = &b->sh[0];
    size_t n = 0;
    for (int i = 0; i < b->n_shards; i++)
        n += b->sh[i].n_cand;
    struct term_doc *all = af_xmalloc((n ? n : 1) * sizeof *all);
    n = 0;
    for (int i = 0; i < b->n_shards; i++) {
        if (b->sh[i].n_cand)
            memcpy(all + n, b->sh[i].cand, b->sh[i].n_cand * sizeof *all);
        n += b->sh[i].n_cand;
    }
    qsort(all, n, sizeof *all, term_cmp);
    char sql[512];
    snprintf(sql, sizeof sql,
             "CREATE TABLE " WIKI_COMMON "(term TEXT PRIMARY KEY, doc INTEGER NOT NULL) "
             "WITHOUT ROWID; BEGIN; INSERT INTO " WIKI_COMMON " VALUES('', %lld);",
             n_total);
    int rc = shard_exec(s0, sql);
    sqlite3_stmt *ins = NULL;
    if (!rc && sqlite3_prepare_v2(s0->db, "INSERT INTO " WIKI_COMMON " VALUES(?1, ?2)", -1, &ins,
                                  NULL) != SQLITE_OK) {
        af_errf(s0->err, sizeof s0->err, "%s: %s", s0->path, sqlite3_errmsg(s0->db));
        rc = AF_EIO;
    }
    long long keep_thr = n_total / COMMON_KEEP_DIV;
    for (size_t i = 0; !rc && i < n;) {
        size_t j = i;
        long long docs = 0;
        int seen[WIKI_MAX_SHARDS] = {0};
        for (; j < n && strcmp(all[j].term, all[i].term) == 0; j++) {
            docs += all[j].doc;
            seen[all[j].shard] = 1;
        }
        for (int k = 0; !rc && k < b->n_shards; k++)
            if (!seen[k])
                docs += shard_term_docs(&b->sh[k], all[i].term, &rc);
        if (!rc && docs > keep_thr) {
            sqlite3_bind_text(ins, 1, all[i].term, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 2, docs);
            if (sqlite3_step(ins) != SQLITE_DONE) {
                af_errf(s0->err, sizeof s0->err, "%s: %s", s0->path, sqlite3_errmsg(s0->db));
                rc = AF_EIO;
            }
            sqlite3_reset(ins);
        }
        i = j;
    }
    sqlite3_finalize(ins);
    free(all);
    if (!rc)
        rc = shard_exec(s0, "COMMIT;");
    return rc;
}

/* Copies shard s's FTS5 table (its shadow tables, as stored) into shard 0's file. */
static int build_gather(struct build *b, struct shard *s)
{
    struct shard *s0 = &b->sh[0];
    static const char *const sfx[] = {"data", "idx", "content", "docsize", "config"};
    struct af_buf sql;
    af_buf_init(&sql, AF_BUF_NOLIMIT);
    char *qpath = sqlite3_mprintf("%Q", s->path);
    (void)af_buf_printf(
        &sql,
        "ATTACH %s AS shard; CREATE VIRTUAL TABLE main.\"%s\" USING fts5(" WIKI_FTS_ARGS
        "); BEGIN;",
        qpath, s->name);
    sqlite3_free(qpath);
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++)
        (void)af_buf_printf(&sql,
                            "DELETE FROM main.\"%s_%s\"; "
                            "INSERT INTO main.\"%s_%s\" SELECT * FROM shard.\"%s_%s\";",
                            s->name, sfx[i], s->name, sfx[i], s->name, sfx[i]);
    (void)af_buf_printf(&sql, "COMMIT; DETACH shard;");
    char *text = af_buf_detach(&sql);
    int rc = shard_exec(s0, text);
    free(text);
    return rc;
}

static void shard_close(struct shard *s)
{
    sqlite3_finalize(s->ins);
    sqlite3_finalize(s->vocab_q);
    s->ins = s->vocab_q = NULL;
    if (s->db)
        sqlite3_close(s->db);
    s->db = NULL;
    for (size_t i = 0; i < s->n_cand; i++)
        free(s->cand[i].term);
    free(s->cand);
    s->cand = NULL;
    wiki_row_scratch_free(&s->scratch);
    s->n_cand = 0;
}

/* Runs fn on every shard, one thread each (inline for a single shard). */
static int run_shards(struct build *b, void *(*fn)(void *))
{
    for (int i = 0; i < b->n_shards; i++) {
        struct shard *s = &b->sh[i];
        if (b->n_shards == 1 || pthread_create(&s->th, NULL, fn, s) != 0)
            fn(s);
        else
            s->running = 1;
    }
    for (int i = 0; i < b->n_shards; i++)
        if (b->sh[i].running) {
            pthread_join(b->sh[i].th, NULL);
            b->sh[i].running = 0;
        }
    for (int i = 0; i < b->n_shards; i++)
        if (b->sh[i].rc)
            return b->sh[i].rc;
    return AF_OK;
}

/* Removes one file, counting it when it was there. */
static void unlink_counted(const char *path, size_t *n)
{
    if (path && unlink(path) == 0)
        (*n)++;
}

int wiki_index_remove_stale(const char *db_path, size_t *n_removed)
{
    size_t n = 0;
    char *tmp = sqlite3_mprintf("%s.tmp", db_path);
    int fd = tmp ? open(tmp, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd); /* a live build holds it: its files are not stale */
        sqlite3_free(tmp);
        if (n_removed)
            *n_removed = 0;
        return 1;
    }
    unlink_counted(tmp, &n);
    for (int i = 1; i < WIKI_MAX_SHARDS; i++) {
        char *p = sqlite3_mprintf("%s.tmp.%d", db_path, i);
        unlink_counted(p, &n);
        sqlite3_free(p);
    }
    if (fd >= 0)
        close(fd); /* after the shards: no build could start in between and lose them */
    sqlite3_free(tmp);
    if (n_removed)
        *n_removed = n;
    return 0;
}

/* Holds DB.tmp (just created by shard 0) under flock for the whole build, so other index
 * commands on DB know its files are live (wiki_index_remove_stale). Returns the descriptor,
 * or -1 (the build goes on unguarded: the lock is a courtesy, not a condition). */
static int lock_tmp(const char *tmp_path)
{
    int fd = open(tmp_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* AF_EINVAL when in_path is one of the files a build of db_path removes and rewrites. */
static int check_input_not_tmp(const char *in_path, const char *db_path, char *err, size_t errlen)
{
    for (int i = 0; i < WIKI_MAX_SHARDS; i++) {
        char *t = i ? sqlite3_mprintf("%s.tmp.%d", db_path, i) : sqlite3_mprintf("%s.tmp", db_path);
        int same = af_file_same(in_path, t);
        if (same)
            af_errf(err, errlen, "%s: the input is %s, a file the build of %s writes", in_path, t,
                    db_path);
        sqlite3_free(t);
        if (same)
            return AF_EINVAL;
    }
    return AF_OK;
}

static int auto_shards(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > AUTO_SHARDS_MAX ? AUTO_SHARDS_MAX : (int)n;
}

/* The failure with the lowest input line (the reader's or a shard's), or the first untied. */
static int build_first_error(struct build *b, int read_rc, const char *read_err, size_t read_line,
                             char *err, size_t errlen)
{
    int rc = read_rc;
    size_t line = read_rc ? read_line : SIZE_MAX;
    const char *msg = read_err;
    for (int i = 0; i < b->n_shards; i++) {
        struct shard *s = &b->sh[i];
        size_t l = s->err_line ? s->err_line : SIZE_MAX - 1;
        if (s->rc && (!rc || l < line)) {
            rc = s->rc;
            line = l;
            msg = s->err;
        }
    }
    if (rc)
        af_errf(err, errlen, "%s", msg);
    return rc;
}

/* Starts the workers, reads the input, stops them. */
static int build_load(struct build *b, gzFile gz, char *err, size_t errlen)
{
    int rc = AF_OK;
    b->n_all = 2 * b->n_shards + 1;
    for (int i = 0; i < b->n_all; i++) {
        b->all[i] = af_xcalloc(1, sizeof *b->all[i]);
        b->all[i]->next = b->free_list;
        b->free_list = b->all[i];
    }
    for (int i = 0; i < b->n_shards && !rc; i++) {
        if (pthread_create(&b->sh[i].th, NULL, shard_worker, &b->sh[i]) != 0) {
            af_errf(err, errlen, "cannot start a build thread: %s", strerror(errno));
            rc = AF_EIO;
        } else {
            b->sh[i].running = 1;
        }
    }
    char read_err[1024] = "";
    size_t read_line = 0;
    int read_rc = rc ? AF_OK : build_read(b, gz, read_err, sizeof read_err, &read_line);
    pthread_mutex_lock(&b->mu);
    b->closing = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < b->n_shards; i++)
        if (b->sh[i].running) {
            pthread_join(b->sh[i].th, NULL);
            b->sh[i].running = 0;
        }
    for (int i = 0; i < b->n_all; i++) {
        free(b->all[i]->text);
        free(b->all[i]->lines);
        free(b->all[i]);
    }
    if (rc)
        return rc;
    return build_first_error(b, read_rc, read_err, read_line, err, errlen);
}

static int build_finish(struct build *b, const char *db_path, char *err, size_t errlen)
{
    long long n_total = 0;
    for (int i = 0; i < b->n_shards; i++)
        n_total += (long long)b->sh[i].n_rows;
    b->cand_thr = n_total / COMMON_KEEP_DIV / b->n_shards;
    double t0 = af_clock_ms();
    int rc = run_shards(b, shard_finish);
    double t1 = af_clock_ms();
    if (!rc)
        rc = build_common(b, n_total);
    double t2 = af_clock_ms();
    for (int i = 1; i < b->n_shards; i++)
        shard_close(&b->sh[i]);
    for (int i = 1; !rc && i < b->n_shards; i++) {
        rc = build_gather(b, &b->sh[i]);
        if (!rc)
            unlink(b->sh[i].path);
    }
    b->st->finish_ms = t1 - t0;
    b->st->common_ms = t2 - t1;
    b->st->gather_ms = af_clock_ms() - t2;
    struct shard *s0 = &b->sh[0];
    if (!rc) {
        sqlite3_finalize(s0->vocab_q);
        s0->vocab_q = NULL;
        if (sqlite3_close(s0->db) != SQLITE_OK) {
            af_errf(s0->err, sizeof s0->err, "%s: close failed: %s", s0->path,
                    sqlite3_errmsg(s0->db));
            rc = AF_EIO;
        } else {
            s0->db = NULL;
        }
    }
    if (!rc && rename(s0->path, db_path) != 0) {
        af_errf(s0->err, sizeof s0->err, "%s: cannot rename to %s: %s", s0->path, db_path,
                strerror(errno));
        rc = AF_EIO;
    }
    if (rc)
        return build_first_error(b, AF_OK, "", 0, err, errlen);
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
    if (p->batch_rows == 0 || p->max_line_bytes == 0 || p->shard_lines == 0) {
        af_errf(err, errlen, "batch_rows, shard_lines and max_line_bytes must be > 0");
        return AF_EINVAL;
    }
    if (p->shards < 0 || p->shards > WIKI_MAX_SHARDS) {
        af_errf(err, errlen, "shards must be 0 (automatic) to %d (got %d)", WIKI_MAX_SHARDS,
                p->shards);
        return AF_EINVAL;
    }
    if (check_input_not_tmp(in_path, db_path, err, errlen) != AF_OK)
        return AF_EINVAL;
    double t0 = af_clock_ms();
    struct build *b = af_xcalloc(1, sizeof *b);
    b->in_path = in_path;
    b->p = p;
    b->st = st;
    b->is_jsonl = -1;
    b->n_shards = p->shards ? p->shards : auto_shards();
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    for (int i = 0; i < b->n_shards; i++) {
        struct shard *s = &b->sh[i];
        s->b = b;
        s->idx = i;
        shard_table_name(s->name, sizeof s->name, i);
        struct af_buf path;
        af_buf_init(&path, AF_BUF_NOLIMIT);
        (void)(i ? af_buf_printf(&path, "%s.tmp.%d", db_path, i)
                 : af_buf_printf(&path, "%s.tmp", db_path));
        s->path = af_buf_detach(&path);
    }
    gzFile gz = NULL;
    int rc = AF_OK, lock_fd = -1, ours = 0; /* ours: the DB.tmp files are this build's */

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
    if (wiki_index_remove_stale(db_path, &st->n_stale_removed) != 0) {
        af_errf(err, errlen, "%s.tmp: another index build is writing %s", db_path, db_path);
        rc = AF_EIO;
        goto out;
    }
    ours = 1;
    for (int i = 0; i < b->n_shards && !rc; i++) {
        if ((rc = shard_open(&b->sh[i], b->n_shards)) != AF_OK)
            af_errf(err, errlen, "%s", b->sh[i].err);
        if (!rc && i == 0)
            lock_fd = lock_tmp(b->sh[0].path);
    }
    double t_load = af_clock_ms();
    if (!rc)
        rc = build_load(b, gz, err, errlen);
    st->load_ms = af_clock_ms() - t_load;
    for (int i = 0; i < b->n_shards; i++) {
        st->n_passages += b->sh[i].n_rows;
        st->n_skipped += b->sh[i].n_skipped;
    }
    if (!rc) {
        build_progress(b, gz, st->n_passages);
        rc = build_finish(b, db_path, err, errlen);
    }
out:
    if (gz)
        gzclose(gz);
    for (int i = 0; i < b->n_shards; i++) {
        shard_close(&b->sh[i]);
        if (rc && ours) /* never another build's, nor files this one did not reach */
            unlink(b->sh[i].path);
        free(b->sh[i].path);
    }
    if (lock_fd >= 0)
        close(lock_fd); /* after the unlinks and the rename */
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    st->build_ms = af_clock_ms() - t0;
    return rc;
}
