/*
 * serve.h - `agentflow serve`: the flow behind an OpenAI-compatible HTTP API (libmicrohttpd),
 * with runs kept in SQLite, Prometheus metrics and a live web page.
 *
 * Routes (docs/SERVE.md): POST /v1/chat/completions (plain or SSE), GET /v1/models,
 * GET /healthz, GET /metrics, POST /v1/runs, GET /v1/runs, GET /v1/runs/ID,
 * GET /v1/runs/ID/events (SSE), and the page at GET /.
 *
 * Every flow runs on a bounded pool of max_concurrent threads, with at most `queue` more
 * waiting; beyond that a request gets 429. One af_flow_params template (back-ends, tools,
 * prompts, trace) is shared by every request; each request gets its own copy with its own
 * limits, tool subset, trace sink and a cancel switch on every back-end.
 *
 * Thread-safety: af_serve_start, af_serve_shutdown and af_serve_free are called from one
 * thread; af_serve_port and af_serve_stats are safe from any thread.
 */
#ifndef AF_SERVE_SERVE_H
#define AF_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/flow.h"

struct af_serve_params {
    const char *host;                  /* address to bind; default "127.0.0.1" */
    int port;                          /* 0 = any free port (see af_serve_port); default 8080 */
    const char *api_key;               /* NULL or "" = no authentication */
    const char *served_name;           /* the model name clients use; default "agentflow" */
    int max_concurrent;                /* flows running at once; default 4 */
    int queue;                         /* flows waiting beyond those; default 16 */
    size_t max_body;                   /* largest request body in bytes; default 1 MiB */
    const char *db_path;               /* SQLite file for /v1/runs (":memory:" allowed); required */
    const struct af_flow_params *flow; /* the template of every solve; borrowed, must outlive
                                          the server (its tools, back-ends, prompts, trace) */
    double connection_timeout_s;       /* idle keep-alive connections close; default 120 */
    /* Optional: told about each request when it is over (status 499: the client left before
     * an answer), from that connection's thread; strings borrowed for the call. */
    void (*on_request)(void *user, const char *method, const char *path, unsigned status,
                       double ms);
    void *user;
};

struct af_serve_params af_serve_default_params(void);

struct af_serve;

/* Opens the database and starts listening. On failure returns AF_EINVAL (a bad setting),
 * AF_EIO (the address or the database) with a message in err, and *out is NULL. Owned by the
 * caller: af_serve_shutdown then af_serve_free. */
AF_NODISCARD int af_serve_start(const struct af_serve_params *p, struct af_serve **out, char *err,
                                size_t errlen);

/* The TCP port the server listens on. */
int af_serve_port(const struct af_serve *s);

/* Counters for tests and logs: flows running and waiting, and flows finished by outcome. */
struct af_serve_stats {
    int running, queued;
    uint64_t completed, failed, cancelled, rejected;
};
void af_serve_stats(struct af_serve *s, struct af_serve_stats *out);

/* Stops accepting connections, cancels the flows still waiting, lets the running ones finish
 * for up to grace_s seconds, then cancels them (each stops at its next LLM call) and waits for
 * them; open responses are completed. Idempotent. */
void af_serve_shutdown(struct af_serve *s, double grace_s);

/* Shuts down (with no grace) if needed and frees everything. Accepts NULL. */
void af_serve_free(struct af_serve *s);

#endif
