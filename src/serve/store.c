/*
 * store.c - runs and their events in SQLite (see store.h).
 *
 * JSON columns hold compact JSON text. A run's trace records (docs/TRACE.md) are kept too, one
 * row each, so GET /v1/runs/ID/trace can give back what `run --trace` would have written. Every
 * statement is prepared per call: writes happen a few times per step, far below what would make
 * caching statements worth its code.
 */
#include "serve/store.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/xalloc.h"

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
};

static const char SCHEMA[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS runs(id TEXT PRIMARY KEY, created REAL, query TEXT,"
    " options TEXT, state TEXT, answer TEXT, result TEXT, error TEXT, finished REAL);"
    "CREATE TABLE IF NOT EXISTS events(run_id TEXT, seq INTEGER, event TEXT,"
    " PRIMARY KEY(run_id, seq));"
    "CREATE TABLE IF NOT EXISTS traces(run_id TEXT, seq INTEGER, record TEXT,"
    " PRIMARY KEY(run_id, seq));"
    "CREATE INDEX IF NOT EXISTS runs_created ON runs(created);"
    "UPDATE runs SET state='interrupted' WHERE state IN ('queued','running');";

int store_open(const char *path, struct store **out, char *err, size_t errlen)
{
    *out = NULL;
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    char *msg = NULL;
    if (rc == SQLITE_OK) {
        sqlite3_busy_timeout(db, 10000);
        rc = sqlite3_exec(db, SCHEMA, NULL, NULL, &msg);
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%s: %s", path, msg ? msg : db ? sqlite3_errmsg(db) : "cannot open");
        sqlite3_free(msg);
        sqlite3_close(db);
        return AF_EIO;
    }
    struct store *s = af_xcalloc(1, sizeof *s);
    s->db = db;
    pthread_mutex_init(&s->mu, NULL);
    *out = s;
    return AF_OK;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Binds JSON text of j (NULL when j is NULL) to parameter i. */
static void bind_json(sqlite3_stmt *st, int i, const json_t *j)
{
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    if (t)
        sqlite3_bind_text(st, i, t, -1, free);
    else
        sqlite3_bind_null(st, i);
}

static void bind_text(sqlite3_stmt *st, int i, const char *t)
{
    if (t)
        sqlite3_bind_text(st, i, t, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* Runs a prepared write under the lock and finalises it. */
static int step_write(struct store *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return rc == SQLITE_DONE ? AF_OK : AF_EIO;
}

static sqlite3_stmt *prepare_locked(struct store *s, const char *sql)
{
    sqlite3_stmt *st = NULL;
    pthread_mutex_lock(&s->mu);
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        pthread_mutex_unlock(&s->mu);
        return NULL;
    }
    return st;
}

int store_run_new(struct store *s, const char *id, double created_unix, const char *query,
                  const json_t *options)
{
    sqlite3_stmt *st = prepare_locked(
        s, "INSERT INTO runs(id, created, query, options, state) VALUES(?,?,?,?,'queued')");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, id);
    sqlite3_bind_double(st, 2, created_unix);
    bind_text(st, 3, query);
    bind_json(st, 4, options);
    return step_write(s, st);
}

int store_run_delete(struct store *s, const char *id)
{
    sqlite3_stmt *st = prepare_locked(s, "DELETE FROM runs WHERE id=?");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, id);
    return step_write(s, st);
}

int store_run_state(struct store *s, const char *id, const char *state)
{
    sqlite3_stmt *st = prepare_locked(s, "UPDATE runs SET state=? WHERE id=?");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, state);
    bind_text(st, 2, id);
    return step_write(s, st);
}

int store_event(struct store *s, const char *id, size_t seq, const json_t *event)
{
    sqlite3_stmt *st = prepare_locked(s, "INSERT INTO events(run_id, seq, event) VALUES(?,?,?)");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
    bind_json(st, 3, event);
    return step_write(s, st);
}

int store_trace(struct store *s, const char *id, size_t seq, const json_t *record)
{
    sqlite3_stmt *st = prepare_locked(s, "INSERT INTO traces(run_id, seq, record) VALUES(?,?,?)");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)seq);
    bind_json(st, 3, record);
    return step_write(s, st);
}

int store_trace_jsonl(struct store *s, const char *id, struct af_buf *out)
{
    sqlite3_stmt *st = prepare_locked(s, "SELECT record FROM traces WHERE run_id=? ORDER BY seq");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, id);
    int rc = AF_OK;
    while (rc == AF_OK && sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        if (t && (af_buf_puts(out, t) != AF_OK || af_buf_putc(out, '\n') != AF_OK))
            rc = AF_ETOOBIG;
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_run_finish(struct store *s, const char *id, const char *state, const char *answer,
                     const json_t *result, const char *error, double finished_unix)
{
    sqlite3_stmt *st = prepare_locked(
        s, "UPDATE runs SET state=?, answer=?, result=?, error=?, finished=? WHERE id=?");
    if (!st)
        return AF_EIO;
    bind_text(st, 1, state);
    bind_text(st, 2, answer);
    bind_json(st, 3, result);
    bind_text(st, 4, error);
    sqlite3_bind_double(st, 5, finished_unix);
    bind_text(st, 6, id);
    return step_write(s, st);
}

/* Column i as JSON: parsed for JSON columns (is_json), else a string; null when NULL. */
static json_t *column_json(sqlite3_stmt *st, int i, int is_json)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return json_null();
    if (sqlite3_column_type(st, i) == SQLITE_FLOAT || sqlite3_column_type(st, i) == SQLITE_INTEGER)
        return json_real(sqlite3_column_double(st, i));
    const char *t = (const char *)sqlite3_column_text(st, i);
    if (!is_json)
        return json_string(t ? t : "");
    json_t *j = t ? json_loads(t, JSON_DECODE_ANY, NULL) : NULL;
    return j ? j : json_null();
}

static const char *const run_cols[] = {"id",     "created", "query", "options", "state",
                                       "answer", "result",  "error", "finished"};
static const int run_col_json[] = {0, 0, 0, 1, 0, 0, 1, 0, 0};

json_t *store_run_get(struct store *s, const char *id)
{
    sqlite3_stmt *st = prepare_locked(s, "SELECT id, created, query, options, state, answer,"
                                         " result, error, finished FROM runs WHERE id=?");
    if (!st)
        return NULL;
    bind_text(st, 1, id);
    json_t *run = NULL;
    if (sqlite3_step(st) == SQLITE_ROW) {
        run = json_object();
        for (int i = 0; i < 9; i++)
            json_object_set_new(run, run_cols[i], column_json(st, i, run_col_json[i]));
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (run)
        json_object_set_new(run, "events", store_events(s, id, 0));
    return run;
}

json_t *store_events(struct store *s, const char *id, size_t from)
{
    json_t *arr = json_array();
    sqlite3_stmt *st =
        prepare_locked(s, "SELECT event FROM events WHERE run_id=? AND seq>=? ORDER BY seq");
    if (!st)
        return arr;
    bind_text(st, 1, id);
    sqlite3_bind_int64(st, 2, (sqlite3_int64)from);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(arr, column_json(st, 0, 1));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return arr;
}

json_t *store_run_list(struct store *s, size_t limit)
{
    json_t *arr = json_array();
    sqlite3_stmt *st = prepare_locked(s, "SELECT id, created, query, state, answer, finished"
                                         " FROM runs ORDER BY created DESC, rowid DESC LIMIT ?");
    if (!st)
        return arr;
    sqlite3_bind_int64(st, 1, (sqlite3_int64)limit);
    static const char *const cols[] = {"id", "created", "query", "state", "answer", "finished"};
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *r = json_object();
        for (int i = 0; i < 6; i++)
            json_object_set_new(r, cols[i], column_json(st, i, 0));
        json_array_append_new(arr, r);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return arr;
}
