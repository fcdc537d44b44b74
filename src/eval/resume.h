/*
 * resume.h - the machinery shared by resumable runs (`run --batch`, `eval run`): reading the
 * complete lines of an append-only JSONL result file (cutting a torn last line), and a small
 * pool of worker threads over numbered jobs.
 */
#ifndef AF_EVAL_RESUME_H
#define AF_EVAL_RESUME_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

/* Calls on_line(user, obj, lineno) for each complete line of `path` that parses as a JSON
 * object (obj borrowed for the call; other lines are skipped), then cuts off a partial last
 * line (one without '\n', left by a kill in mid-write) so appends start on a fresh line.
 * A missing file is not an error. Returns AF_OK, or AF_EIO / AF_ETOOBIG with err naming the
 * file. */
AF_NODISCARD int eval_log_scan(const char *path,
                               void (*on_line)(void *user, json_t *obj, size_t lineno), void *user,
                               char *err, size_t errlen);

/* Runs job(user, i) for i in [0, n_jobs) on min(n_threads, n_jobs) threads (each job exactly
 * once, in increasing order of start); falls back to the calling thread when no thread can be
 * started. Returns when every job has finished. */
void eval_pool_run(size_t n_threads, size_t n_jobs, void (*job)(void *user, size_t i), void *user);

#endif
