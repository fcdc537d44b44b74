/*
 * runs.c - /v1/runs: flows started by one request and followed by others. POST starts one and
 * returns its id; GET /v1/runs lists the newest; GET /v1/runs/ID gives its state, events and
 * result; GET /v1/runs/ID/events streams its events (SSE) as they happen, from the first;
 * GET /v1/runs/ID/trace gives its trace records (JSONL).
 *
 * Everything is read from the store, which the flow thread writes as it goes, except a live
 * stream, which follows the job in memory. A run leaves the live table only after its last
 * event is stored, so a reader that misses it there finds it complete in the store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonx.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

#define LIST_DEFAULT 50
#define LIST_MAX 500
#define ID_MAX 64

enum MHD_Result serve_runs_post(struct req *rq)
{
    struct af_serve *s = rq->s;
    struct job_spec spec;
    memset(&spec, 0, sizeof spec);
    struct serve_err e;
    if (serve_parse_run(rq->body.data, rq->body.len, s->p.flow->tools, &spec, &e)) {
        job_spec_deinit(&spec);
        return serve_reply_err(rq, &e);
    }
    struct job *j = job_new(s, JOB_RUN, &spec);
    if (store_run_new(s->store, j->id, j->created_unix, j->spec.title, j->spec.options) != AF_OK) {
        job_unref(j);
        return serve_reply_error(rq, 500, "server_error", "store_failed",
                                 "the run could not be recorded in %s", s->db_path);
    }
    serve_live_add(s, j);
    int rc = pool_submit(s, j);
    if (rc != AF_OK) {
        serve_live_remove(s, j);
        (void)store_run_delete(s->store, j->id);
        job_unref(j);
        return serve_reply_rejected(rq, rc);
    }
    json_t *body = json_pack("{s:s,s:s,s:s,s:f}", "id", j->id, "object", "agentflow.run", "state",
                             "queued", "created", j->created_unix);
    job_unref(j);
    return serve_reply_json(rq, 201, body);
}

static void run_format(void *user, struct job *j, const json_t *ev, struct af_buf *out)
{
    (void)user;
    (void)j;
    if (!ev)
        return;
    char *s = json_dumps(ev, JSON_COMPACT);
    (void)af_buf_printf(out, "data: %s\n\n", s ? s : "{}");
    free(s);
}

static enum MHD_Result run_events(struct req *rq, const char *id)
{
    struct job *j = serve_live_find(rq->s, id);
    if (j) {
        struct MHD_Response *r = sse_response_new(rq->c, j, run_format, NULL, NULL, 0);
        job_unref(j);
        return r ? serve_reply(rq, 200, r) : MHD_NO;
    }
    json_t *run = store_run_get(rq->s->store, id);
    if (!run)
        return serve_reply_error(rq, 404, "invalid_request_error", "run_not_found",
                                 "no run '%.80s'", id);
    struct af_buf out;
    af_buf_init(&out, AF_BUF_NOLIMIT);
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(run, "events"), i, ev)
    {
        run_format(NULL, NULL, ev, &out);
    }
    json_decref(run);
    size_t n = out.len;
    char *text = af_buf_detach(&out);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return serve_reply(rq, 200, r);
}

#define TRACE_MAX_BYTES ((size_t)256 << 20)

/* The run's trace records as JSONL, as `run --trace` writes them (and the page's trace viewer
 * reads them). */
static enum MHD_Result run_trace(struct req *rq, const char *id)
{
    json_t *run = store_run_get(rq->s->store, id);
    if (!run)
        return serve_reply_error(rq, 404, "invalid_request_error", "run_not_found",
                                 "no run '%.80s'", id);
    json_decref(run);
    struct af_buf out;
    af_buf_init(&out, TRACE_MAX_BYTES);
    if (store_trace_jsonl(rq->s->store, id, &out) != AF_OK) {
        af_buf_deinit(&out);
        return serve_reply_error(rq, 500, "server_error", "trace_unreadable",
                                 "the trace of '%.80s' could not be read (or is over %zu bytes)",
                                 id, TRACE_MAX_BYTES);
    }
    size_t n = out.len;
    char *text = af_buf_detach(&out);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/x-ndjson");
    return serve_reply(rq, 200, r);
}

static enum MHD_Result run_list(struct req *rq)
{
    const char *lim = MHD_lookup_connection_value(rq->c, MHD_GET_ARGUMENT_KIND, "limit");
    long n = LIST_DEFAULT;
    if (lim) {
        char *end;
        n = strtol(lim, &end, 10);
        if (!*lim || *end || n < 1 || n > LIST_MAX)
            return serve_reply_error(rq, 400, "invalid_request_error", "invalid_limit",
                                     "'limit' must be an integer from 1 to %d", LIST_MAX);
    }
    json_t *data = store_run_list(rq->s->store, (size_t)n);
    return serve_reply_json(rq, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

enum MHD_Result serve_runs_get(struct req *rq, const char *rest)
{
    if (!*rest || strcmp(rest, "/") == 0)
        return run_list(rq);
    rest++;
    size_t n = strcspn(rest, "/");
    if (n == 0 || n >= ID_MAX)
        return serve_reply_error(rq, 404, "invalid_request_error", "run_not_found", "no such run");
    char id[ID_MAX];
    memcpy(id, rest, n);
    id[n] = '\0';
    if (strcmp(rest + n, "/events") == 0)
        return run_events(rq, id);
    if (strcmp(rest + n, "/trace") == 0)
        return run_trace(rq, id);
    if (rest[n])
        return serve_reply_error(rq, 404, "invalid_request_error", "not_found", "no route");
    json_t *run = store_run_get(rq->s->store, id);
    if (!run)
        return serve_reply_error(rq, 404, "invalid_request_error", "run_not_found",
                                 "no run '%.80s'", id);
    json_object_set_new(run, "object", json_string("agentflow.run"));
    return serve_reply_json(rq, 200, run);
}
