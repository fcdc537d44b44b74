/*
 * server.c - the HTTP side of `agentflow serve`: the libmicrohttpd daemon, routing, the body
 * limit, bearer authentication, replies, /v1/models, /healthz, /metrics, and shutdown.
 *
 * libmicrohttpd runs one thread per connection, so a handler may wait for its flow; the flows
 * themselves run on the pool (job.c), which is what bounds the work, not the connections.
 */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

/* How long a shutdown waits for replies to finish sending once the flows are over. */
#define SEND_DRAIN_MS 10000.0

struct af_serve_params af_serve_default_params(void)
{
    struct af_serve_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.served_name = "agentflow";
    p.max_concurrent = 4;
    p.queue = 16;
    p.max_body = (size_t)1 << 20;
    p.connection_timeout_s = 120;
    return p;
}

/* --- replies -------------------------------------------------------------------------- */
enum MHD_Result serve_reply(struct req *rq, unsigned status, struct MHD_Response *r)
{
    rq->status = status;
    enum MHD_Result ret = MHD_queue_response(rq->c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_text(struct req *rq, unsigned status, const char *type, char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    return serve_reply(rq, status, r);
}

enum MHD_Result serve_reply_json(struct req *rq, unsigned status, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s)
        return MHD_NO;
    return reply_text(rq, status, "application/json", s);
}

enum MHD_Result serve_reply_error(struct req *rq, unsigned status, const char *type,
                                  const char *code, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:o,s:s,s:n,s:s}}", "error", "message", af_json_text(msg), "type",
                          type, "param", "code", code);
    return serve_reply_json(rq, status, e);
}

enum MHD_Result serve_reply_err(struct req *rq, const struct serve_err *e)
{
    return serve_reply_error(rq, e->status, e->type, e->code, "%s", e->message);
}

enum MHD_Result serve_reply_rejected(struct req *rq, int rc)
{
    if (rc != AF_ETOOBIG)
        return serve_reply_error(rq, 503, "server_error", "shutting_down",
                                 "the server is shutting down");
    /* Roughly when a slot frees up: the mean solve time, at least a second. */
    double wait = ceil(metrics_mean_solve_s(rq->s->metrics));
    char after[32];
    snprintf(after, sizeof after, "%d", wait < 1 ? 1 : wait > 600 ? 600 : (int)wait);
    char *s = NULL;
    json_t *e = json_pack("{s:{s:s,s:s,s:n,s:s}}", "error", "message",
                          "too many requests: every flow slot and queue place is taken; retry "
                          "later",
                          "type", "rate_limit_error", "param", "code", "rate_limit_exceeded");
    s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Retry-After", after);
    return serve_reply(rq, 429, r);
}

/* --- live runs ------------------------------------------------------------------------ */
void serve_live_add(struct af_serve *s, struct job *j)
{
    job_ref(j);
    pthread_mutex_lock(&s->runs_mu);
    if (s->n_live == s->cap_live) {
        s->cap_live = s->cap_live ? 2 * s->cap_live : 16;
        s->live = af_xrealloc(s->live, s->cap_live * sizeof *s->live);
    }
    s->live[s->n_live++] = j;
    pthread_mutex_unlock(&s->runs_mu);
}

void serve_live_remove(struct af_serve *s, struct job *j)
{
    int found = 0;
    pthread_mutex_lock(&s->runs_mu);
    for (size_t i = 0; i < s->n_live; i++)
        if (s->live[i] == j) {
            s->live[i] = s->live[--s->n_live];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&s->runs_mu);
    if (found)
        job_unref(j);
}

struct job *serve_live_find(struct af_serve *s, const char *id)
{
    struct job *j = NULL;
    pthread_mutex_lock(&s->runs_mu);
    for (size_t i = 0; i < s->n_live && !j; i++)
        if (strcmp(s->live[i]->id, id) == 0) {
            j = s->live[i];
            job_ref(j);
        }
    pthread_mutex_unlock(&s->runs_mu);
    return j;
}

/* --- small routes --------------------------------------------------------------------- */
static enum MHD_Result route_models(struct req *rq)
{
    json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", rq->s->served_name, "object", "model",
                          "created", (json_int_t)rq->s->started_unix, "owned_by", "agentflow");
    return serve_reply_json(rq, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

/* The tools a request may name, for the page's options. */
static enum MHD_Result route_tools(struct req *rq)
{
    json_t *data = json_array();
    const struct af_tool_registry *reg = rq->s->p.flow->tools;
    size_t n = reg ? af_tool_registry_count(reg) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct af_tool_card *card = af_tool_card(af_tool_registry_at(reg, i));
        json_array_append_new(data, json_pack("{s:o,s:o}", "name", af_json_text(card->name),
                                              "description", af_json_text(card->description)));
    }
    return serve_reply_json(rq, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static enum MHD_Result route_metrics(struct req *rq)
{
    struct af_serve_stats st;
    af_serve_stats(rq->s, &st);
    struct af_buf out;
    af_buf_init(&out, AF_BUF_NOLIMIT);
    metrics_render(rq->s->metrics, st.running, st.queued, &out);
    (void)af_buf_printf(&out,
                        "# HELP agentflow_rejected_total Requests refused with 429.\n"
                        "# TYPE agentflow_rejected_total counter\n"
                        "agentflow_rejected_total %llu\n",
                        (unsigned long long)st.rejected);
    return reply_text(rq, 200, "text/plain; version=0.0.4", af_buf_detach(&out));
}

/* 1 when the request carries the server's key (or none is needed). */
static int authorised(struct req *rq)
{
    const char *key = rq->s->api_key;
    if (!key || !*key)
        return 1;
    const char *h = MHD_lookup_connection_value(rq->c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    size_t n = strlen(key), m = strlen(h);
    unsigned char diff = (unsigned char)(n != m);
    /* Constant time in the key's length: a wrong key's prefix says nothing. */
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(key[i] ^ (i < m ? h[i] : 0));
    return diff == 0;
}

/* 1 when the request declares a JSON body. Requiring it keeps other web sites out: a page
 * elsewhere can make a browser send a form or text/plain POST here without asking, but not
 * an application/json one (that needs a CORS preflight, which this server never grants). */
static int json_content_type(struct MHD_Connection *c)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    if (!ct)
        return 0;
    ct += strspn(ct, " \t");
    size_t n = strlen("application/json");
    return strncasecmp(ct, "application/json", n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static const char *route_name(const char *url)
{
    if (strcmp(url, "/v1/chat/completions") == 0)
        return "chat";
    if (strncmp(url, "/v1/runs", 8) == 0)
        return "runs";
    if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/v1/tools") == 0)
        return "models";
    if (strcmp(url, "/healthz") == 0)
        return "healthz";
    if (strcmp(url, "/metrics") == 0)
        return "metrics";
    return "page";
}

static enum MHD_Result dispatch(struct req *rq, const char *url, const char *method)
{
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int post = strcmp(method, "POST") == 0;
    enum MHD_Result ret;
    if (strcmp(url, "/healthz") == 0 && get)
        return reply_text(rq, 200, "application/json", af_xstrdup("{\"status\":\"ok\"}"));
    /* The page is static and holds no data, and a browser cannot send a bearer key when it
     * opens it: it is served to anyone, and the page sends the key with its API calls. */
    if (get && serve_page(rq, url, &ret))
        return ret;
    if (!authorised(rq))
        return serve_reply_error(rq, 401, "invalid_request_error", "invalid_api_key",
                                 "a valid 'Authorization: Bearer KEY' header is required");
    if (rq->too_big)
        return serve_reply_error(rq, 413, "invalid_request_error", "body_too_large",
                                 "the body is over the limit of %zu bytes (--max-body)",
                                 rq->s->p.max_body);
    if (post && !json_content_type(rq->c))
        return serve_reply_error(rq, 415, "invalid_request_error", "invalid_content_type",
                                 "POST bodies must be sent as 'Content-Type: application/json'");
    if (atomic_load(&rq->s->stopping) && post)
        return serve_reply_error(rq, 503, "server_error", "shutting_down",
                                 "the server is shutting down");
    if (strcmp(url, "/v1/chat/completions") == 0 && post)
        return serve_chat_completions(rq);
    if (strcmp(url, "/v1/runs") == 0 && post)
        return serve_runs_post(rq);
    if (strncmp(url, "/v1/runs", 8) == 0 && (url[8] == '\0' || url[8] == '/') && get)
        return serve_runs_get(rq, url + 8);
    if (strcmp(url, "/v1/models") == 0 && get)
        return route_models(rq);
    if (strcmp(url, "/v1/tools") == 0 && get)
        return route_tools(rq);
    if (strcmp(url, "/metrics") == 0 && get)
        return route_metrics(rq);
    if (strcmp(url, "/v1/chat/completions") == 0 || strcmp(url, "/v1/runs") == 0 ||
        strcmp(url, "/v1/models") == 0 || strcmp(url, "/v1/tools") == 0 ||
        strcmp(url, "/metrics") == 0)
        return serve_reply_error(rq, 405, "invalid_request_error", "method_not_allowed",
                                 "%s is not allowed on %s", method, url);
    return serve_reply_error(rq, 404, "invalid_request_error", "not_found", "no route %.200s", url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct af_serve *s = cls;
    struct req *rq = *con_cls;
    if (!rq) {
        rq = af_xcalloc(1, sizeof *rq);
        rq->s = s;
        rq->c = c;
        rq->route = route_name(url);
        rq->method = af_xstrdup(method);
        rq->path = af_xstrdup(url);
        rq->t0_ms = af_clock_ms();
        af_buf_init(&rq->body, s->p.max_body);
        *con_cls = rq;
        atomic_fetch_add(&s->n_inflight, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->p.max_body)
            rq->too_big = 1;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!rq->too_big && af_buf_append(&rq->body, upload_data, *upload_data_size) != AF_OK)
            rq->too_big = 1;
        *upload_data_size = 0; /* taken, or dropped past the limit */
        return MHD_YES;
    }
    return dispatch(rq, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    struct af_serve *s = cls;
    struct req *rq = *con_cls;
    if (!rq)
        return;
    metrics_http(s->metrics, rq->route, rq->status ? rq->status : 499);
    if (s->p.on_request)
        s->p.on_request(s->p.user, rq->method, rq->path, rq->status ? rq->status : 499,
                        af_clock_ms() - rq->t0_ms);
    free(rq->method);
    free(rq->path);
    af_buf_deinit(&rq->body);
    free(rq);
    *con_cls = NULL;
    atomic_fetch_sub(&s->n_inflight, 1);
}

/* --- lifecycle ------------------------------------------------------------------------ */
static int bind_addr(const char *host, int port, struct sockaddr_storage *ss, int *v6)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *v6 = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *v6 = 1;
        return 0;
    }
    return -1;
}

static int check_params(const struct af_serve_params *p, char *err, size_t errlen)
{
    if (!p->flow || !p->db_path || !p->host || !p->served_name || !*p->served_name)
        snprintf(err, errlen, "the flow template, host, model name and database are required");
    else if (p->port < 0 || p->port > 65535)
        snprintf(err, errlen, "port %d is not from 0 to 65535", p->port);
    else if (p->max_concurrent < 1 || p->queue < 0 || p->max_body < 1)
        snprintf(err, errlen, "max_concurrent must be >= 1, queue >= 0 and max_body >= 1");
    else
        return 0;
    return -1;
}

static int start_daemon(struct af_serve *s, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    int v6 = 0;
    if (bind_addr(s->host, s->p.port, &ss, &v6)) {
        snprintf(err, errlen, "--host '%s' is not an IPv4 or IPv6 address", s->host);
        return AF_EINVAL;
    }
    /* poll(), not select(): the process holds many descriptors (back-end connections, the
     * database), and select() cannot watch one numbered past FD_SETSIZE. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_POLL | (v6 ? MHD_USE_IPv6 : 0);
    if (getenv("AGENTFLOW_SERVE_LOG"))
        flags |= MHD_USE_ERROR_LOG;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.connection_timeout_s,
                            MHD_OPTION_END);
    if (!s->d) {
        snprintf(err, errlen, "cannot listen on %s port %d (in use, or not an address here)",
                 s->host, s->p.port);
        return AF_EINVAL; /* the --host / --port given cannot be used: a usage error */
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->p.port;
    return AF_OK;
}

int af_serve_start(const struct af_serve_params *p, struct af_serve **out, char *err, size_t errlen)
{
    *out = NULL;
    if (check_params(p, err, errlen))
        return AF_EINVAL;
    struct af_serve *s = af_xcalloc(1, sizeof *s);
    s->p = *p;
    s->host = af_xstrdup(p->host);
    s->api_key = af_xstrdup(p->api_key && *p->api_key ? p->api_key : NULL);
    s->served_name = af_xstrdup(p->served_name);
    s->db_path = af_xstrdup(p->db_path);
    s->p.host = s->host;
    s->p.api_key = s->api_key;
    s->p.served_name = s->served_name;
    s->p.db_path = s->db_path;
    s->started_unix = (double)time(NULL);
    pthread_mutex_init(&s->runs_mu, NULL);
    s->metrics = metrics_new();
    int rc = store_open(s->db_path, &s->store, err, errlen);
    if (rc == AF_OK && pool_init(s, p->max_concurrent, p->queue) != AF_OK) {
        snprintf(err, errlen, "cannot start %d worker threads", p->max_concurrent);
        rc = AF_EIO;
    }
    if (rc == AF_OK)
        rc = start_daemon(s, err, errlen);
    if (rc != AF_OK) {
        af_serve_free(s);
        return rc;
    }
    *out = s;
    return AF_OK;
}

int af_serve_port(const struct af_serve *s)
{
    return s->port;
}

void af_serve_stats(struct af_serve *s, struct af_serve_stats *out)
{
    struct pool *pl = &s->pool;
    pthread_mutex_lock(&pl->mu);
    out->running = pl->n_running;
    out->queued = pl->n_queued;
    out->completed = pl->completed;
    out->failed = pl->failed;
    out->cancelled = pl->cancelled;
    out->rejected = pl->rejected;
    pthread_mutex_unlock(&pl->mu);
}

void af_serve_shutdown(struct af_serve *s, double grace_s)
{
    if (!s || s->shut_down)
        return;
    s->shut_down = 1;
    atomic_store(&s->stopping, 1);
    /* No new connections from here; the open ones finish their responses. */
    if (s->d) {
        MHD_socket fd = MHD_quiesce_daemon(s->d);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    if (s->pool.threads)
        pool_stop(s, grace_s);
    /* Every flow has ended; let the responses still being written (a stream's last chunks)
     * go out before the daemon closes the connections. */
    double deadline = af_clock_ms() + SEND_DRAIN_MS;
    while (atomic_load(&s->n_inflight) > 0 && af_clock_ms() < deadline)
        af_clock_sleep_ms(5);
    if (s->d)
        MHD_stop_daemon(s->d);
    s->d = NULL;
}

void af_serve_free(struct af_serve *s)
{
    if (!s)
        return;
    af_serve_shutdown(s, 0);
    if (s->pool.threads)
        pool_deinit(s);
    for (size_t i = 0; i < s->n_live; i++)
        job_unref(s->live[i]);
    free(s->live);
    store_close(s->store);
    metrics_free(s->metrics);
    pthread_mutex_destroy(&s->runs_mu);
    free(s->host);
    free(s->api_key);
    free(s->served_name);
    free(s->db_path);
    free(s);
}
