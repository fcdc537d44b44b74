/*
 * chat.c - POST /v1/chat/completions: the flow as an OpenAI chat model (the body is checked
 * by request.c).
 *
 * The reply's content is the generator's direct output, and `usage` sums every module's tokens.
 * With "stream": true the reply is server-sent events in the chat.completion.chunk format:
 * first the role, then one chunk per flow event whose `agentflow` member carries the event
 * (query analysis, each step), then the content in pieces, a chunk with finish_reason, the
 * usage chunk when stream_options.include_usage asks, and [DONE].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/buf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

#define CONTENT_PIECE_BYTES 48
#define WAIT_SLICE_MS 200.0

static json_t *chunk_new(const char *id, const char *model, long created)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "chat.completion.chunk", "created",
                     (json_int_t)created, "model", model);
}

/* A chunk with one choice of the given delta (consumed) and finish reason (may be NULL). */
static json_t *choice_chunk(const char *id, const char *model, long created, json_t *delta,
                            const char *finish)
{
    json_t *ch = chunk_new(id, model, created);
    json_t *choice = json_pack("{s:i,s:o,s:o}", "index", 0, "delta", delta, "finish_reason",
                               finish ? json_string(finish) : json_null());
    json_object_set_new(ch, "choices", json_pack("[o]", choice));
    return ch;
}

static void put_data(struct af_buf *out, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    (void)af_buf_printf(out, "data: %s\n\n", s ? s : "{}");
    free(s);
    json_decref(j);
}

struct chat_stream {
    char *model; /* owned */
    long created;
    int include_usage;
    int sent_role;
};

static void chat_stream_free(void *p)
{
    struct chat_stream *cs = p;
    free(cs->model);
    free(cs);
}

/* The content in pieces of about CONTENT_PIECE_BYTES, never splitting a UTF-8 sequence. */
static void put_content(struct chat_stream *cs, struct job *j, const char *text, struct af_buf *out)
{
    size_t len = strlen(text), off = 0;
    while (off < len) {
        size_t n = len - off > CONTENT_PIECE_BYTES ? CONTENT_PIECE_BYTES : len - off;
        while (off + n < len && ((unsigned char)text[off + n] & 0xC0) == 0x80)
            n++;
        json_t *d = json_pack("{s:o}", "content", af_json_textn(text + off, n));
        put_data(out, choice_chunk(j->id, cs->model, cs->created, d, NULL));
        off += n;
    }
}

static void chat_format(void *user, struct job *j, const json_t *ev, struct af_buf *out)
{
    struct chat_stream *cs = user;
    if (!cs->sent_role) {
        cs->sent_role = 1;
        json_t *d = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        put_data(out, choice_chunk(j->id, cs->model, cs->created, d, NULL));
    }
    if (!ev) {
        (void)af_buf_puts(out, "data: [DONE]\n\n");
        return;
    }
    const char *type = af_json_get_str(ev, "type");
    if (type && strcmp(type, "answer") == 0) {
        put_content(cs, j, af_json_get_str(ev, "direct_output"), out);
        json_t *fin = choice_chunk(j->id, cs->model, cs->created, json_object(), "stop");
        json_object_set(fin, "agentflow", (json_t *)(uintptr_t)ev);
        put_data(out, fin);
        if (cs->include_usage) {
            json_t *u = chunk_new(j->id, cs->model, cs->created);
            json_object_set_new(u, "choices", json_array());
            json_object_set(u, "usage", json_object_get(ev, "usage"));
            put_data(out, u);
        }
    } else if (type && (strcmp(type, "error") == 0 || strcmp(type, "cancelled") == 0)) {
        int cancelled = strcmp(type, "cancelled") == 0;
        put_data(out, json_pack("{s:{s:O,s:s,s:n,s:s}}", "error", "message",
                                json_object_get(ev, "message"), "type", "server_error", "param",
                                "code", cancelled ? "cancelled" : "flow_failed"));
    } else {
        json_t *ch = choice_chunk(j->id, cs->model, cs->created, json_object(), NULL);
        json_object_set(ch, "agentflow", (json_t *)(uintptr_t)ev);
        put_data(out, ch);
    }
}

/* Waits for a job to end while the client stays. Returns 0 when it ended, -1 when the client
 * left (the job is then cancelled). */
static int wait_job(struct MHD_Connection *c, struct job *j)
{
    for (;;) {
        int finished = 0;
        json_t *ev = job_next_event(j, SIZE_MAX, WAIT_SLICE_MS, &finished);
        json_decref(ev);
        if (job_finished(j))
            return 0;
        if (!serve_client_alive(c)) {
            job_cancel(j, "the client disconnected");
            return -1;
        }
    }
}

static enum MHD_Result reply_done(struct req *rq, struct job *j)
{
    pthread_mutex_lock(&j->mu);
    enum job_state st = j->state;
    json_t *steps = json_array();
    size_t i;
    json_t *ev;
    json_array_foreach(j->events, i, ev)
    {
        const char *type = af_json_get_str(ev, "type");
        if (type && strcmp(type, "step") == 0)
            json_array_append(steps, ev);
    }
    pthread_mutex_unlock(&j->mu);
    if (st != JOB_DONE) {
        json_decref(steps);
        if (st == JOB_CANCELLED)
            return serve_reply_error(rq, 503, "server_error", "cancelled", "%s",
                                     j->cancel_reason ? j->cancel_reason : "cancelled");
        return serve_reply_error(rq, 502, "server_error", "flow_failed", "%s",
                                 j->res.errmsg ? j->res.errmsg : "the flow failed");
    }
    json_t *msg =
        json_pack("{s:s,s:o}", "role", "assistant", "content", af_json_text(j->res.direct_output));
    json_t *body = json_pack("{s:s,s:s,s:I,s:s}", "id", j->id, "object", "chat.completion",
                             "created", (json_int_t)j->created_unix, "model", rq->s->served_name);
    json_object_set_new(
        body, "choices",
        json_pack("[{s:i,s:o,s:s}]", "index", 0, "message", msg, "finish_reason", "stop"));
    json_object_set_new(body, "usage", job_usage_json(j));
    json_t *af = json_object();
    json_object_set_new(af, "answer", af_json_text(j->res.answer));
    json_object_set_new(af, "query_analysis", af_json_text(j->res.query_analysis));
    json_object_set_new(af, "steps", steps);
    json_object_set_new(af, "time_ms", json_real(j->solve_ms));
    json_object_set_new(body, "agentflow", af);
    return serve_reply_json(rq, 200, body);
}

enum MHD_Result serve_chat_completions(struct req *rq)
{
    struct af_serve *s = rq->s;
    struct job_spec spec;
    memset(&spec, 0, sizeof spec);
    struct chat_opts o;
    struct serve_err e;
    if (serve_parse_chat(rq->body.data, rq->body.len, s->served_name, s->p.flow->tools, &spec, &o,
                         &e)) {
        job_spec_deinit(&spec);
        return serve_reply_err(rq, &e);
    }
    struct job *j = job_new(s, JOB_CHAT, &spec);
    int rc = pool_submit(s, j);
    if (rc != AF_OK) {
        job_unref(j);
        return serve_reply_rejected(rq, rc);
    }
    if (o.stream) {
        struct chat_stream *cs = af_xcalloc(1, sizeof *cs);
        cs->model = af_xstrdup(s->served_name);
        cs->created = (long)j->created_unix;
        cs->include_usage = o.include_usage;
        struct MHD_Response *r = sse_response_new(rq->c, j, chat_format, cs, chat_stream_free, 1);
        job_unref(j);
        return r ? serve_reply(rq, 200, r) : MHD_NO;
    }
    if (wait_job(rq->c, j)) {
        job_unref(j);
        return MHD_NO; /* the client is gone: close without an answer */
    }
    enum MHD_Result ret = reply_done(rq, j);
    job_unref(j);
    return ret;
}
