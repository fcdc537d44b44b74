/*
 * wiki_index.h - an offline passage index on SQLite FTS5, for Wikipedia_RAG_Search_Tool.
 *
 * One database holds the passages in FTS5 tables `passages(id UNINDEXED, title, text)`,
 * tokenized with 'unicode61 remove_diacritics 2' (so "Zurich" matches "Zürich") and ranked by
 * BM25. A build uses one shard per CPU (at most 4): `passages`, `passages_1`, ... each hold
 * a share of the rows and are built by their own thread; a query runs on every shard with the
 * document frequencies, row count and average length summed over all of them, so its scores
 * equal a one-table index's. The builder streams JSONL ({"id","title","text"}) or the DPR /
 * Search-R1 passage TSV (id, text, title; header line skipped; fields may be double-quoted
 * with "" escapes), plain or gzip'd, into DB.tmp (and DB.tmp.N per further shard) and renames
 * it onto DB at the end: an interrupted build never leaves a half-built index under the final
 * name.
 *
 * Queries take free text from a model or user: it is cut into words and each word is quoted
 * as an FTS5 string, OR'd together, so no input can cause an FTS5 syntax error. The build
 * also records, in the plain table `passages_common(term, doc)`, every term found in more
 * than 0.5% of the passages (and the passage count under the term ''). A query drops the words
 * found in more than 1% of the passages while rarer words remain (indexes of 1000 passages
 * or more): their BM25 weight is small and their posting lists are what makes OR queries
 * slow. A query of only such words keeps them all. Indexes built before the table existed
 * still open and query, keeping every word.
 *
 * Thread-safety: a handle owns one SQLite connection; use one handle per thread, or guard a
 * shared handle with a mutex (the Wikipedia tool does). Distinct handles on the same file may
 * be used from different threads at once. wiki_index_build is safe from any thread.
 */
#ifndef AF_TOOLS_WIKI_INDEX_H
#define AF_TOOLS_WIKI_INDEX_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

struct wiki_index;

/* Called during a build, after each batch and once at the end. bytes_* count the input file
 * as stored (compressed bytes for a .gz). Runs on the building thread. */
typedef void (*wiki_progress_fn)(void *user, size_t n_done, size_t bytes_done, size_t bytes_total);

struct wiki_build_params {
    int skip_bad;              /* 1: count and skip malformed lines; 0: fail on the first */
    size_t batch_rows;         /* rows per transaction (default 1000000) */
    size_t max_line_bytes;     /* a longer input line is an error (default 16 MiB) */
    int optimize;              /* 1: merge the FTS5 segments at the end (faster queries) */
    int shards;                /* FTS5 tables built in parallel: 0 = one per CPU, at most 4;
                                  1..16 as given */
    size_t shard_lines;        /* input lines dealt to a shard at a time (default 1024) */
    wiki_progress_fn progress; /* optional */
    void *user;                /* passed to progress; borrowed */
};

struct wiki_build_stats {
    size_t n_passages;      /* rows inserted */
    size_t n_skipped;       /* malformed lines skipped (skip_bad) */
    size_t n_blank;         /* blank lines dropped (a TSV row of empty fields is malformed) */
    size_t n_stale_removed; /* files of an interrupted build removed first */
    size_t n_lines;         /* input lines read, header and blank ones included */
    size_t bytes_total;     /* input file size as stored */
    double build_ms;        /* wall time of the whole build, optimize included */
    /* Its phases: reading and inserting; commit, optimize and frequent-term listing (shards in
     * parallel); writing the frequent-term table; copying the other shards into one file. */
    double load_ms, finish_ms, common_ms, gather_ms;
};

struct wiki_build_params wiki_build_default_params(void);

/* Builds the index at db_path from in_path (format detected from the content, gzip from the
 * magic bytes). An existing db_path is replaced only when the build succeeds. p may be NULL
 * (defaults); st may be NULL. Returns 0, AF_ENOTFOUND / AF_EIO (a file that cannot be read or
 * written, named in err), AF_EPARSE (a bad line, with file and line number in err),
 * AF_ETOOBIG (a line over max_line_bytes). Safe from any thread. */
AF_NODISCARD int wiki_index_build(const char *in_path, const char *db_path,
                                  const struct wiki_build_params *p, struct wiki_build_stats *st,
                                  char *err, size_t errlen);

/* A build writes DB.tmp (and DB.tmp.N for more shards) and holds DB.tmp under flock until it
 * renames it onto DB. A killed build leaves them behind (hundreds of MB for a Wikipedia dump):
 * this removes them when no live build holds the lock, and reports the count in *n_removed
 * (may be NULL). Returns 0, or 1 when a build is writing them (nothing is removed). Every
 * `index` command calls it on its database path first. Safe from any thread. */
int wiki_index_remove_stale(const char *db_path, size_t *n_removed);

/* Opens an index (any shard count, and indexes of one table from earlier builds). writable = 0
 * opens it read-only (queries). Checks that the file exists and holds a passage table; otherwise
 * fails with AF_ENOTFOUND (missing) or AF_EIO (corrupt or not an index), naming the file in err.
 * *out is owned by the caller (wiki_index_close). */
AF_NODISCARD int wiki_index_open(const char *path, int writable, struct wiki_index **out, char *err,
                                 size_t errlen);
/* Closes the handle. Accepts NULL. */
void wiki_index_close(struct wiki_index *ix);
/* The path the handle was opened with. Borrowed, valid until wiki_index_close. */
const char *wiki_index_path(const struct wiki_index *ix);
/* Number of passages in the index, or -1 on error. */
long long wiki_index_count(struct wiki_index *ix);

/* Finds the k best passages for free text `text`. On success *hits is a new JSON array
 * (owned by the caller, json_decref) of {id, title, text, score}, best first; score is
 * -bm25 (higher is better). Only passages that match a word found in under half of them are
 * returned, up to k (no padding with near-zero scores), unless no passage matches such a word;
 * then every match counts. Text with no words gives an empty array. k must be >= 1.
 * Returns 0, AF_EINVAL (bad k) or AF_EIO (SQLite error, message naming the file). */
AF_NODISCARD int wiki_index_query(struct wiki_index *ix, const char *text, int k, json_t **hits,
                                  char *err, size_t errlen);

/* Turns free text into a safe FTS5 MATCH expression: "w1" OR "w2" ... (at most max_terms
 * words; words are runs of ASCII letters/digits and non-ASCII bytes). Returns a malloc'd
 * string owned by the caller, "" when the text has no words. Exposed for tests. */
char *wiki_fts_query(const char *text, size_t max_terms);

#endif
