/*
 * trace.c - the JSONL trace sink: one fsync'd line per LLM call, tool call and result
 * (schema in docs/TRACE.md).
 */
#include "agentflow/flow.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/xalloc.h"

struct af_trace {
    struct af_linelog *log; /* NULL for a callback sink */
    af_trace_fn fn;
    void *user;
    pthread_mutex_t mu;
};

int af_trace_open(const char *path, struct af_trace **out, char *err, size_t errlen)
{
    *out = NULL;
    struct af_linelog *log = NULL;
    int rc = af_linelog_open(path, &log, err, errlen);
    if (rc)
        return rc;
    struct af_trace *t = af_xcalloc(1, sizeof *t);
    t->log = log;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return AF_OK;
}

struct af_trace *af_trace_new_fn(af_trace_fn fn, void *user)
{
    struct af_trace *t = af_xcalloc(1, sizeof *t);
    t->fn = fn;
    t->user = user;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

int af_trace_write(struct af_trace *t, const json_t *record)
{
    if (!t)
        return AF_OK;
    if (t->fn) {
        pthread_mutex_lock(&t->mu);
        t->fn(t->user, record);
        pthread_mutex_unlock(&t->mu);
        return AF_OK;
    }
    char *line = json_dumps(record, JSON_COMPACT);
    if (!line)
        return AF_ENOMEM;
    int rc = af_linelog_append(t->log, line, strlen(line));
    free(line);
    return rc;
}

void af_trace_close(struct af_trace *t)
{
    if (!t)
        return;
    if (t->log)
        af_linelog_close(t->log);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
