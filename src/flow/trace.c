/*
 * trace.c - the JSONL trace sink: one fsync'd line per LLM call, tool call and result
 * (schema in docs/TRACE.md).
 */
#include "agentflow/flow.h"

#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/xalloc.h"

struct af_trace {
    struct af_linelog *log;
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
    *out = t;
    return AF_OK;
}

int af_trace_write(struct af_trace *t, const json_t *record)
{
    if (!t)
        return AF_OK;
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
    af_linelog_close(t->log);
    free(t);
}
