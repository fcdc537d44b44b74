/*
 * trace.c - the JSONL trace sink: one fsync'd line per LLM call, tool call and result
 * (schema in docs/TRACE.md). A record that cannot be written is counted and the first
 * failure kept on the handle (af_trace_status), since the solver cannot stop for it.
 */
#include "agentflow/flow.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/xalloc.h"

struct af_trace {
    struct af_linelog *log; /* NULL for a callback sink */
    char *path;             /* owned; NULL for a callback sink */
    af_trace_fn fn;
    void *user;
    pthread_mutex_t mu;
    int err;          /* the first failed write's code (guarded by mu) */
    char errmsg[512]; /* and its message */
    size_t n_lost;    /* records not written (guarded by mu) */
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
    t->path = af_xstrdup(path);
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
    int rc = line ? af_linelog_append(t->log, line, strlen(line)) : AF_ENOMEM;
    int cause = errno;
    free(line);
    if (rc != AF_OK) {
        pthread_mutex_lock(&t->mu);
        if (t->err == AF_OK) {
            t->err = rc;
            snprintf(t->errmsg, sizeof t->errmsg, "%s: cannot append a record: %s", t->path,
                     rc == AF_ENOMEM ? "cannot serialise it" : strerror(cause));
        }
        t->n_lost++;
        pthread_mutex_unlock(&t->mu);
    }
    return rc;
}

int af_trace_status(struct af_trace *t, size_t *n_lost, char *err, size_t errlen)
{
    if (!t)
        return AF_OK;
    pthread_mutex_lock(&t->mu);
    int rc = t->err;
    if (n_lost)
        *n_lost = t->n_lost;
    if (rc != AF_OK && err && errlen)
        snprintf(err, errlen, "%s", t->errmsg);
    pthread_mutex_unlock(&t->mu);
    return rc;
}

void af_trace_close(struct af_trace *t)
{
    if (!t)
        return;
    if (t->log)
        af_linelog_close(t->log);
    free(t->path);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
