/*
 * fake_server.c - a scriptable loopback OpenAI-compatible server for tests (see fake_server.h).
 *
 * libmicrohttpd runs one thread per connection. Per-request state (the growing upload) lives
 * in a struct conn hung on MHD's con_cls and freed by the request-completed callback, so an
 * aborted request leaks nothing. Everything scriptable or recorded hangs off struct
 * fake_server under one mutex; the mutex is never held while waiting out a delay or while
 * MHD sends, so slow requests run concurrently. Delays wait on a condition variable that
 * fake_server_stop broadcasts, so stopping never waits out a long delay.
 */
#include "support/fake_server.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "core/buf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

#define FAKE_MAX_BODY ((size_t)16 << 20)
#define FAKE_PATH "/v1/chat/completions"
#define FAKE_NOTHING_MATCHED                                                                       \
    "{\"error\":{\"message\":\"fake_server: no queued response, no matching rule and no "          \
    "default response\"}}"

/* One response to send. */
struct answer {
    int status;
    char *body;   /* owned */
    char *hname;  /* owned; NULL = no extra header */
    char *hvalue; /* owned */
    int delay_ms;
    struct answer *next; /* queue link */
};

struct rule {
    char *match; /* owned */
    char *reply; /* owned */
};

struct fake_server {
    struct MHD_Daemon *d;
    int port;
    char url[64];
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* broadcast on stop, to cut delays short */
    int stopping;
    struct answer *head, *tail; /* FIFO of canned responses */
    struct answer dflt;
    int base_delay_ms;
    struct rule *rules;
    size_t n_rules, cap_rules;
    size_t n_requests;
    char *last_body;    /* owned */
    char *last_path;    /* owned */
    char *last_headers; /* owned; "name: value\n" lines */
};

/* Per-request state, hung on MHD's con_cls. */
struct conn {
    struct af_buf body;
    int too_big;
};

static void answer_deinit(struct answer *a)
{
    free(a->body);
    free(a->hname);
    free(a->hvalue);
    memset(a, 0, sizeof *a);
}

static void answer_set(struct answer *dst, int status, const char *body, const char *hname,
                       const char *hvalue, int delay_ms)
{
    dst->status = status;
    dst->body = af_xstrdup(body ? body : "");
    dst->hname = af_xstrdup(hname);
    dst->hvalue = af_xstrdup(hname ? (hvalue ? hvalue : "") : NULL);
    dst->delay_ms = delay_ms;
    dst->next = NULL;
}

/* --- chat completion bodies ------------------------------------------------------------- */

static size_t token_estimate(size_t bytes)
{
    return (bytes + 3) / 4;
}

static char *chat_json(const char *content, const char *model, size_t prompt_tokens,
                       size_t completion_tokens)
{
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    json_object_set_new(msg, "content", content ? af_json_text(content) : json_null());
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(0));
    json_object_set_new(choice, "message", msg);
    json_object_set_new(choice, "finish_reason", json_string("stop"));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_t *usage = json_object();
    json_object_set_new(usage, "prompt_tokens", json_integer((json_int_t)prompt_tokens));
    json_object_set_new(usage, "completion_tokens", json_integer((json_int_t)completion_tokens));
    json_object_set_new(usage, "total_tokens",
                        json_integer((json_int_t)prompt_tokens + (json_int_t)completion_tokens));
    json_t *root = json_object();
    json_object_set_new(root, "id", json_string("chatcmpl-fake"));
    json_object_set_new(root, "object", json_string("chat.completion"));
    json_object_set_new(root, "created", json_integer(1700000000));
    json_object_set_new(root, "model", af_json_text(model ? model : "fake-model"));
    json_object_set_new(root, "choices", choices);
    json_object_set_new(root, "usage", usage);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        abort(); /* only out of memory can get here */
    char *out = af_xstrdup(s);
    free(s);
    return out;
}

char *fake_server_chat_body(const char *content)
{
    return chat_json(content, NULL, 8, content ? token_estimate(strlen(content)) : 0);
}

/* --- answering one request -------------------------------------------------------------- */

/* The content of the last "user" message and the model of a request body, as malloc'd
 * copies (NULL when absent or when the body is not JSON). */
static void request_info(const char *body, size_t len, char **user, char **model)
{
    *user = *model = NULL;
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *msgs = json_object_get(root, "messages");
    for (size_t i = json_array_size(msgs); i > 0; i--) {
        json_t *m = json_array_get(msgs, i - 1);
        const char *role = af_json_get_str(m, "role");
        if (role && strcmp(role, "user") == 0) {
            *user = af_xstrdup(af_json_get_str(m, "content"));
            break;
        }
    }
    *model = af_xstrdup(af_json_get_str(root, "model"));
    json_decref(root);
}

/* Chooses the answer for a chat request: queue, then rules, then the default. Called with
 * fs->mu held. */
static void choose(struct fake_server *fs, const char *user, const char *model, size_t body_len,
                   struct answer *out)
{
    struct answer *q = fs->head;
    if (q) {
        fs->head = q->next;
        if (!fs->head)
            fs->tail = NULL;
        *out = *q;
        out->next = NULL;
        free(q);
        return;
    }
    for (size_t i = 0; user && i < fs->n_rules; i++) {
        if (!strstr(user, fs->rules[i].match))
            continue;
        const char *reply = fs->rules[i].reply;
        memset(out, 0, sizeof *out);
        out->status = 200;
        out->body =
            chat_json(reply, model, token_estimate(body_len), token_estimate(strlen(reply)));
        return;
    }
    answer_set(out, fs->dflt.status, fs->dflt.body, NULL, NULL, fs->dflt.delay_ms);
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    if (af_buf_printf(cls, "%s: %s\n", key, value ? value : "") != AF_OK)
        return MHD_NO;
    return MHD_YES;
}

/* Records the request (taking the body over) and chooses its answer. */
static void record_and_choose(struct fake_server *fs, struct MHD_Connection *mc, const char *path,
                              const char *method, struct conn *c, struct answer *ans)
{
    struct af_buf hdrs;
    af_buf_init(&hdrs, AF_BUF_NOLIMIT);
    MHD_get_connection_values(mc, MHD_HEADER_KIND, collect_header, &hdrs);
    int is_chat = strcmp(path, FAKE_PATH) == 0;
    int is_post = strcmp(method, "POST") == 0;
    char *user = NULL, *model = NULL;
    size_t body_len = c->body.len;
    if (is_chat && is_post && !c->too_big)
        request_info(af_buf_str(&c->body), body_len, &user, &model);
    memset(ans, 0, sizeof *ans);
    pthread_mutex_lock(&fs->mu);
    fs->n_requests++;
    free(fs->last_body);
    fs->last_body = af_buf_detach(&c->body);
    free(fs->last_path);
    fs->last_path = af_xstrdup(path);
    free(fs->last_headers);
    fs->last_headers = af_buf_detach(&hdrs);
    if (!is_chat) {
        ans->status = MHD_HTTP_NOT_FOUND;
        ans->body = af_xstrdup("{\"error\":{\"message\":\"fake_server: unknown path\"}}");
    } else if (!is_post) {
        ans->status = MHD_HTTP_METHOD_NOT_ALLOWED;
        ans->body = af_xstrdup("{\"error\":{\"message\":\"fake_server: POST only\"}}");
    } else if (c->too_big) {
        ans->status = 413;
        ans->body = af_xstrdup("{\"error\":{\"message\":\"fake_server: body over 16 MiB\"}}");
    } else {
        choose(fs, user, model, body_len, ans);
    }
    ans->delay_ms += fs->base_delay_ms;
    pthread_mutex_unlock(&fs->mu);
    af_buf_deinit(&hdrs);
    free(user);
    free(model);
}

/* Waits delay_ms, or less when the server stops. Returns 0, or -1 when stopping. */
static int wait_delay(struct fake_server *fs, int delay_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += delay_ms / 1000;
    dl.tv_nsec += (long)(delay_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&fs->mu);
    while (!fs->stopping && delay_ms > 0)
        if (pthread_cond_timedwait(&fs->cv, &fs->mu, &dl) == ETIMEDOUT)
            break;
    int stopping = fs->stopping;
    pthread_mutex_unlock(&fs->mu);
    return stopping ? -1 : 0;
}

static enum MHD_Result send_answer(struct MHD_Connection *mc, struct answer *ans)
{
    char *body = ans->body ? ans->body : af_xstrdup("");
    ans->body = NULL;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (ans->hname)
        MHD_add_response_header(r, ans->hname, ans->hvalue ? ans->hvalue : "");
    enum MHD_Result ret = MHD_queue_response(mc, (unsigned int)ans->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct fake_server *fs = cls;
    struct conn *c = *con_cls;
    (void)version;
    if (!c) {
        c = af_xcalloc(1, sizeof *c);
        af_buf_init(&c->body, FAKE_MAX_BODY);
        *con_cls = c;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        if (!c->too_big && af_buf_append(&c->body, upload, *upload_size) != AF_OK) {
            c->too_big = 1;
            af_buf_deinit(&c->body);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    struct answer ans;
    record_and_choose(fs, mc, url, method, c, &ans);
    enum MHD_Result ret = MHD_NO;
    if (wait_delay(fs, ans.delay_ms) == 0)
        ret = send_answer(mc, &ans);
    answer_deinit(&ans);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)mc;
    (void)toe;
    struct conn *c = *con_cls;
    if (!c)
        return;
    af_buf_deinit(&c->body);
    free(c);
    *con_cls = NULL;
}

/* --- lifecycle -------------------------------------------------------------------------- */

static void free_state(struct fake_server *fs)
{
    for (struct answer *a = fs->head, *next; a; a = next) {
        next = a->next;
        answer_deinit(a);
        free(a);
    }
    answer_deinit(&fs->dflt);
    for (size_t i = 0; i < fs->n_rules; i++) {
        free(fs->rules[i].match);
        free(fs->rules[i].reply);
    }
    free(fs->rules);
    free(fs->last_body);
    free(fs->last_path);
    free(fs->last_headers);
    pthread_cond_destroy(&fs->cv);
    pthread_mutex_destroy(&fs->mu);
    free(fs);
}

static struct MHD_Daemon *start_daemon(struct fake_server *fs)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = 0; /* the kernel picks a free port */
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
    if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
        flags |= MHD_USE_POLL; /* no FD_SETSIZE limit on descriptor numbers */
    const char *log = getenv("FAKE_SERVER_LOG");
    if (log && *log && strcmp(log, "0") != 0)
        flags |= MHD_USE_ERROR_LOG;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, fs, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, fs,
                            MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
}

struct fake_server *fake_server_start(void)
{
    struct fake_server *fs = af_xcalloc(1, sizeof *fs);
    pthread_mutex_init(&fs->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fs->cv, &ca);
    pthread_condattr_destroy(&ca);
    fs->dflt.status = MHD_HTTP_NOT_FOUND;
    fs->dflt.body = af_xstrdup(FAKE_NOTHING_MATCHED);
    fs->d = start_daemon(fs);
    const union MHD_DaemonInfo *info =
        fs->d ? MHD_get_daemon_info(fs->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info || info->port == 0) {
        if (fs->d)
            MHD_stop_daemon(fs->d);
        free_state(fs);
        return NULL;
    }
    fs->port = info->port;
    snprintf(fs->url, sizeof fs->url, "http://127.0.0.1:%d/v1", fs->port);
    return fs;
}

void fake_server_stop(struct fake_server *fs)
{
    if (!fs)
        return;
    pthread_mutex_lock(&fs->mu);
    fs->stopping = 1;
    pthread_cond_broadcast(&fs->cv);
    pthread_mutex_unlock(&fs->mu);
    MHD_stop_daemon(fs->d);
    free_state(fs);
}

const char *fake_server_url(const struct fake_server *fs)
{
    return fs->url;
}

int fake_server_port(const struct fake_server *fs)
{
    return fs->port;
}

/* --- scripting -------------------------------------------------------------------------- */

void fake_server_push(struct fake_server *fs, int status, const char *body,
                      const char *extra_header_name, const char *extra_header_value, int delay_ms)
{
    struct answer *a = af_xcalloc(1, sizeof *a);
    answer_set(a, status, body, extra_header_name, extra_header_value, delay_ms);
    pthread_mutex_lock(&fs->mu);
    if (fs->tail)
        fs->tail->next = a;
    else
        fs->head = a;
    fs->tail = a;
    pthread_mutex_unlock(&fs->mu);
}

void fake_server_set_default(struct fake_server *fs, int status, const char *body, int delay_ms)
{
    char *copy = af_xstrdup(body ? body : "");
    pthread_mutex_lock(&fs->mu);
    free(fs->dflt.body);
    fs->dflt.status = status;
    fs->dflt.body = copy;
    fs->dflt.delay_ms = delay_ms;
    pthread_mutex_unlock(&fs->mu);
}

void fake_server_set_delay(struct fake_server *fs, int delay_ms)
{
    pthread_mutex_lock(&fs->mu);
    fs->base_delay_ms = delay_ms;
    pthread_mutex_unlock(&fs->mu);
}

void fake_server_add_rule(struct fake_server *fs, const char *match_substring,
                          const char *reply_text)
{
    char *m = af_xstrdup(match_substring ? match_substring : "");
    char *r = af_xstrdup(reply_text ? reply_text : "");
    pthread_mutex_lock(&fs->mu);
    if (fs->n_rules == fs->cap_rules) {
        fs->cap_rules = fs->cap_rules ? fs->cap_rules * 2 : 8;
        fs->rules = af_xrealloc(fs->rules, fs->cap_rules * sizeof *fs->rules);
    }
    fs->rules[fs->n_rules].match = m;
    fs->rules[fs->n_rules].reply = r;
    fs->n_rules++;
    pthread_mutex_unlock(&fs->mu);
}

/* --- what was received ------------------------------------------------------------------ */

size_t fake_server_request_count(struct fake_server *fs)
{
    pthread_mutex_lock(&fs->mu);
    size_t n = fs->n_requests;
    pthread_mutex_unlock(&fs->mu);
    return n;
}

char *fake_server_last_request(struct fake_server *fs)
{
    pthread_mutex_lock(&fs->mu);
    char *s = af_xstrdup(fs->last_body ? fs->last_body : "");
    pthread_mutex_unlock(&fs->mu);
    return s;
}

char *fake_server_last_path(struct fake_server *fs)
{
    pthread_mutex_lock(&fs->mu);
    char *s = af_xstrdup(fs->last_path ? fs->last_path : "");
    pthread_mutex_unlock(&fs->mu);
    return s;
}

char *fake_server_last_header(struct fake_server *fs, const char *name)
{
    size_t n = strlen(name);
    char *value = NULL;
    pthread_mutex_lock(&fs->mu);
    for (const char *line = fs->last_headers; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        if (len >= n + 2 && strncasecmp(line, name, n) == 0 && line[n] == ':' &&
            line[n + 1] == ' ') {
            value = af_xstrndup(line + n + 2, len - n - 2);
            break;
        }
        line += len + (eol ? 1 : 0);
    }
    pthread_mutex_unlock(&fs->mu);
    return value;
}
