/*
 * serve_int.h - what the files of src/serve/ share: the server handle, jobs (one flow each),
 * the bounded pool that runs them, and the HTTP helpers.
 *
 * A job is reference counted: the HTTP handler that made it, the pool, and the table of live
 * runs each hold a reference. Its events (query analysis, steps, then one final event) only
 * grow, under job->mu, and job->cv is broadcast at each one, so any number of readers can
 * follow it with a cursor. The flow thread is the only writer.
 */
#ifndef AF_SERVE_SERVE_INT_H
#define AF_SERVE_SERVE_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/buf.h"

#include "serve/metrics.h"
#include "serve/serve.h"
#include "serve/store.h"

enum job_kind { JOB_CHAT, JOB_RUN };
enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_FAILED, JOB_CANCELLED };

/* What a request asks for, after validation. Owned by the job once submitted. */
struct job_spec {
    char *query;                    /* the text handed to the flow; owned */
    char *title;                    /* the question as the user wrote it; owned */
    int max_steps;                  /* 0 = the template's */
    double max_time_s;              /* 0 = the template's */
    struct af_tool_registry *tools; /* a subset of the template's tools (owned), or NULL */
    json_t *options;                /* {max_steps, max_time, tools} as asked; owned, may be NULL */
};

void job_spec_deinit(struct job_spec *s);

struct job {
    char id[48];
    enum job_kind kind;
    struct af_serve *srv; /* borrowed */
    struct job_spec spec;
    double created_unix;
    /* mu guards refs, state, cancel_reason and events. res, solve_ms and the step counters
     * belong to the flow thread until the state is final, and are read-only after. */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on every event and state change */
    int refs;
    enum job_state state;
    atomic_int cancel;   /* set once; read by the back-end decorators */
    char *cancel_reason; /* owned */
    json_t *events;      /* array of event objects; grows only */
    struct af_flow_result res;
    int has_res;
    double solve_ms;
    int64_t step_prompt, step_completion; /* tokens of the step in progress */
    int step_calls;
    size_t n_trace;   /* trace records stored (runs) */
    struct job *next; /* pool queue link */
};

/* A new job in state QUEUED with one reference (the caller's); takes the spec over. */
struct job *job_new(struct af_serve *s, enum job_kind kind, struct job_spec *spec);
void job_ref(struct job *j);
void job_unref(struct job *j);
/* Asks the flow to stop at its next LLM call (a job still waiting stops at its first one).
 * Idempotent; safe from any thread. */
void job_cancel(struct job *j, const char *reason);
/* 1 once the job reached DONE, FAILED or CANCELLED. Takes j->mu. */
int job_finished(struct job *j);
/* Waits up to timeout_ms for an event past `cursor` or the end. Returns a new reference to
 * event `cursor` (and the caller advances), or NULL: then *finished says whether no event
 * will ever come. */
json_t *job_next_event(struct job *j, size_t cursor, double timeout_ms, int *finished);
/* {prompt_tokens, completion_tokens, total_tokens} over every module of a finished job. */
json_t *job_usage_json(struct job *j);

/* The bounded pool: max_concurrent worker threads and a FIFO of waiting jobs. */
struct pool {
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* a job arrived, or stopping */
    pthread_cond_t cv_idle; /* a job finished */
    pthread_t *threads;
    int n_threads, max_queue;
    struct job *head, *tail;
    int n_queued, n_running, stopping;
    uint64_t completed, failed, cancelled, rejected;
    struct job **running; /* n_threads slots, NULL when idle */
};

/* Submits a job (the pool takes a reference). Returns AF_OK, AF_ETOOBIG when running and
 * waiting are full (429), or AF_EINVAL when the server is shutting down (503). */
int pool_submit(struct af_serve *s, struct job *j);
/* Starts n_threads workers. Returns AF_OK or AF_EIO. */
int pool_init(struct af_serve *s, int n_threads, int max_queue);
/* Drops the waiting jobs, waits up to grace_s for the running ones, cancels what is left and
 * joins the workers. */
void pool_stop(struct af_serve *s, double grace_s);
void pool_deinit(struct af_serve *s);

struct af_serve {
    char *host, *api_key, *served_name, *db_path; /* owned copies */
    struct af_serve_params p;                     /* strings point at the copies above */
    struct MHD_Daemon *d;
    int port;
    struct pool pool;
    struct store *store;
    struct metrics *metrics;
    pthread_mutex_t runs_mu; /* guards the live runs table */
    struct job **live;       /* runs not yet finished (a reference each) */
    size_t n_live, cap_live;
    atomic_int stopping;   /* new requests get 503 */
    atomic_int n_inflight; /* requests begun and not yet completed */
    int shut_down;
    double started_unix;
};

/* Adds / removes a run in the live table (taking / dropping a reference). */
void serve_live_add(struct af_serve *s, struct job *j);
void serve_live_remove(struct af_serve *s, struct job *j);
/* A new reference to the live run `id`, or NULL. */
struct job *serve_live_find(struct af_serve *s, const char *id);

/* Fills `out` (>= 17 bytes) with 16 random hex digits. */
void serve_random_hex(char *out);

/* --- request bodies (request.c) ------------------------------------------------------- */
/* Why a request was refused: an HTTP status and an OpenAI-style error. */
struct serve_err {
    unsigned status;
    const char *type, *code; /* static strings */
    char message[1024];
};
void serve_err_set(struct serve_err *e, unsigned status, const char *type, const char *code,
                   const char *fmt, ...) AF_PRINTF(5, 6);

struct chat_opts {
    int stream, include_usage;
};

/* Checks a chat completions body (model, messages, stream, max_steps, max_time, tools; the
 * tools named must be in `tools`, may be NULL) and fills spec (the caller deinits it in every
 * case) and o. Returns 0, or -1 with e filled (4xx). Safe from any thread. */
int serve_parse_chat(const char *body, size_t len, const char *served_name,
                     const struct af_tool_registry *tools, struct job_spec *spec,
                     struct chat_opts *o, struct serve_err *e);
/* The same for a POST /v1/runs body {query, max_steps, max_time, tools}. */
int serve_parse_run(const char *body, size_t len, const struct af_tool_registry *tools,
                    struct job_spec *spec, struct serve_err *e);

/* --- HTTP (server.c) ------------------------------------------------------------------ */
/* One HTTP request, hung on libmicrohttpd's per-request pointer. */
struct req {
    struct af_serve *s;
    struct MHD_Connection *c;
    const char *route;   /* the metrics label; static string */
    char *method, *path; /* owned copies, for the request log */
    double t0_ms;
    unsigned status; /* what was queued; 0 when nothing was */
    struct af_buf body;
    int too_big;
};

/* Queues a JSON response (the object is consumed) with status. */
enum MHD_Result serve_reply_json(struct req *rq, unsigned status, json_t *body);
/* Queues an OpenAI-style error {"error":{message,type,param,code}}. */
enum MHD_Result serve_reply_error(struct req *rq, unsigned status, const char *type,
                                  const char *code, const char *fmt, ...) AF_PRINTF(5, 6);
/* Queues a response of any type (status recorded, response destroyed). */
enum MHD_Result serve_reply(struct req *rq, unsigned status, struct MHD_Response *r);
/* 1 while the peer of connection c is still connected (no hang-up seen on its socket). */
int serve_client_alive(struct MHD_Connection *c);
/* Refuses a submission that pool_submit turned down: 429 with Retry-After, or 503. */
enum MHD_Result serve_reply_rejected(struct req *rq, int rc);

/* Queues the error e. */
enum MHD_Result serve_reply_err(struct req *rq, const struct serve_err *e);

/* --- SSE streams (stream.c) ----------------------------------------------------------- */
/* Formats one event of the job into out; event NULL means the job is finished and the
 * stream's closing bytes are wanted. */
typedef void (*sse_format_fn)(void *user, struct job *j, const json_t *event, struct af_buf *out);
/* A response that follows job j from its first event, formatting each with fmt, and cancels
 * the job when the client goes away (when cancel_on_close). Takes a reference to j; user is
 * freed with free_user (may be NULL) when the response is. NULL on failure. */
struct MHD_Response *sse_response_new(struct MHD_Connection *c, struct job *j, sse_format_fn fmt,
                                      void *user, void (*free_user)(void *), int cancel_on_close);

/* --- routes --------------------------------------------------------------------------- */
enum MHD_Result serve_chat_completions(struct req *rq);
enum MHD_Result serve_runs_post(struct req *rq);
/* GET /v1/runs, /v1/runs/ID and /v1/runs/ID/events; rest is what follows "/v1/runs". */
enum MHD_Result serve_runs_get(struct req *rq, const char *rest);
/* GET / and the page's assets; 0 when url is not one of them. */
int serve_page(struct req *rq, const char *url, enum MHD_Result *ret);

#endif
