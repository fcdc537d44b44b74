/*
 * store.h - the runs of `agentflow serve` in SQLite, so that they survive a restart.
 *
 * Tables: runs(id, created, query, options, state, answer, result, error, finished),
 * events(run_id, seq, event), one row per event as it happens, and traces(run_id, seq,
 * record), one row per trace record. A run still "queued" or
 * "running" when the file is opened was cut off by a stop: it becomes "interrupted".
 * Safe from any thread (one connection behind a mutex; WAL mode).
 */
#ifndef AF_SERVE_STORE_H
#define AF_SERVE_STORE_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"
#include "core/buf.h"

struct store;

/* Opens (creating) the database at path. Fails with AF_EIO naming the file. Owned by the
 * caller: store_close. */
AF_NODISCARD int store_open(const char *path, struct store **out, char *err, size_t errlen);
void store_close(struct store *s);

/* Records a new run (state "queued"). options is borrowed (may be NULL). */
int store_run_new(struct store *s, const char *id, double created_unix, const char *query,
                  const json_t *options);
/* Forgets a run that was never started (refused by the pool). */
int store_run_delete(struct store *s, const char *id);
int store_run_state(struct store *s, const char *id, const char *state);
/* Appends event number seq (borrowed). */
int store_event(struct store *s, const char *id, size_t seq, const json_t *event);
/* Appends the run's trace record number seq (borrowed). */
int store_trace(struct store *s, const char *id, size_t seq, const json_t *record);
/* Appends the run's trace records to out as JSONL, in order. Returns AF_OK, AF_EIO, or
 * AF_ETOOBIG past out's limit. */
int store_trace_jsonl(struct store *s, const char *id, struct af_buf *out);
/* Closes a run: its final state, answer (may be NULL), the flow's result object (borrowed,
 * may be NULL) and error message (may be NULL). */
int store_run_finish(struct store *s, const char *id, const char *state, const char *answer,
                     const json_t *result, const char *error, double finished_unix);

/* The run `id` as {id, created, query, options, state, answer, result, error, finished,
 * events:[...]}, or NULL when there is none. Owned by the caller. */
json_t *store_run_get(struct store *s, const char *id);
/* The events of run `id` from number `from` on, as an array (empty when none). Owned. */
json_t *store_events(struct store *s, const char *id, size_t from);
/* The newest `limit` runs, newest first, as [{id, created, query, state, answer,
 * finished}]. Owned by the caller. */
json_t *store_run_list(struct store *s, size_t limit);

#endif
