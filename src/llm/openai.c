/*
 * openai.c - the OpenAI-compatible chat completions back-end over libcurl.
 *
 * One call is: build the request JSON (jansson), POST it to {base_url}/chat/completions, and
 * parse choices[0].message.content, finish_reason, model and usage out of the reply. HTTP 408,
 * 429, 5xx and transient connection errors are retried with exponential backoff and full
 * jitter (or the server's Retry-After), within max_retries and retry_budget_ms.
 *
 * Invariants:
 *   - the handle is immutable after creation except for the pool of idle curl easy handles,
 *     which a mutex guards; a call takes a handle from the pool (or makes one) and gives it
 *     back, so concurrent calls never share an easy handle but do reuse kept-alive
 *     connections;
 *   - every response body is read into an af_buf limited to max_response_bytes;
 *   - no signals (CURLOPT_NOSIGNAL), no global random state: jitter uses a per-call xorshift.
 */
#include "agentflow/llm.h"
#include "llm/openai_int.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

#define OPENAI_POOL_MAX 64         /* idle easy handles kept for reuse */
#define OPENAI_SNIPPET_BYTES 200   /* body bytes quoted when the server gives no message */
#define OPENAI_SERVER_MSG_MAX 1000 /* longest server message quoted */
#define OPENAI_ERRMSG_MAX 4096     /* longest errmsg we build */
#define OPENAI_RETRY_AFTER_MAX 128 /* longest Retry-After value kept */
#define OPENAI_PATH "/chat/completions"

struct openai {
    char *base_url;                /* owned; without trailing '/' */
    char *url;                     /* owned; base_url + OPENAI_PATH */
    char *model;                   /* owned; may be NULL */
    struct curl_slist *headers;    /* owned; read-only after creation, shared by every call */
    struct af_llm_openai_params p; /* numeric knobs; the string members are not used */
    pthread_mutex_t mu;            /* guards pool and n_pool */
    CURL *pool[OPENAI_POOL_MAX];
    size_t n_pool;
};

/* What one HTTP attempt produced. */
struct attempt {
    CURL *curl;            /* borrowed */
    struct af_buf body;    /* limited to max_response_bytes */
    int too_big;           /* the body hit the limit */
    long stall_ms;         /* the stall window, 0 = no check */
    int started;           /* a response header has arrived */
    double mark_ms;        /* start of the current stall window */
    curl_off_t mark_bytes; /* body bytes received when it began */
    int stalled;           /* aborted by the stall rule */
    CURLcode cc;
    long status;                              /* 0 when no response */
    char retry_after[OPENAI_RETRY_AFTER_MAX]; /* raw value, "" when absent */
    char curl_err[CURL_ERROR_SIZE];
};

/* --- error messages -------------------------------------------------------------------- */

/* Appends to an error message; text beyond the buffer's limit is cut off, since a message
 * cut short is still worth more than none. */
AF_PRINTF(2, 3) static void msg_printf(struct af_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = af_buf_vprintf(b, fmt, ap);
    va_end(ap);
    if (rc != AF_ETOOBIG || b->len >= b->limit)
        return;
    size_t room = b->limit - b->len;
    char *tmp = af_xmalloc(room + 1);
    va_start(ap, fmt);
    vsnprintf(tmp, room + 1, fmt, ap);
    va_end(ap);
    rc = af_buf_puts(b, tmp);
    free(tmp);
    (void)rc; /* it fits by construction */
}

/* --- process-wide libcurl initialisation ---------------------------------------------- */

/* curl_global_init must run once per process before any thread uses curl. The once-control
 * and its result are the only process-wide state here; both are written once, inside
 * pthread_once, and only read afterwards. */
static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
    g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* --- retry arithmetic (openai_int.h) --------------------------------------------------- */

int openai_parse_retry_after(const char *value, time_t now, double *ms)
{
    if (!value)
        return -1;
    while (*value == ' ' || *value == '\t')
        value++;
    size_t n = strlen(value);
    while (n > 0 && isspace((unsigned char)value[n - 1]))
        n--;
    if (n == 0 || n >= OPENAI_RETRY_AFTER_MAX)
        return -1;
    char v[OPENAI_RETRY_AFTER_MAX];
    memcpy(v, value, n);
    v[n] = '\0';
    if (isdigit((unsigned char)v[0])) {
        char *end = NULL;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        if (*end != '\0')
            return -1;
        if (errno == ERANGE || s > 86400ull * 365)
            s = 86400ull * 365; /* absurd but valid: the caller caps it anyway */
        *ms = (double)s * 1e3;
        return 0;
    }
    time_t t = curl_getdate(v, NULL);
    if (t == (time_t)-1)
        return -1;
    double d = difftime(t, now) * 1e3;
    *ms = d > 0 ? d : 0;
    return 0;
}

int openai_status_retryable(long status)
{
    return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

uint64_t openai_rng_seed(void)
{
    uint64_t s = (uint64_t)(af_clock_ms() * 1e3);
    pthread_t self = pthread_self();
    uint64_t tid = 0;
    memcpy(&tid, &self, sizeof tid < sizeof self ? sizeof tid : sizeof self);
    s ^= tid * 0x9E3779B97F4A7C15ull;
    s ^= (uint64_t)(uintptr_t)&s;
    /* splitmix64 finaliser: nearby inputs give unrelated seeds */
    s ^= s >> 30;
    s *= 0xBF58476D1CE4E5B9ull;
    s ^= s >> 27;
    s *= 0x94D049BB133111EBull;
    s ^= s >> 31;
    return s ? s : 0x2545F4914F6CDD1Dull;
}

double openai_next_random(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x2545F4914F6CDD1Dull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return (double)(x >> 11) * 0x1.0p-53;
}

double openai_backoff_ms(int retry, double base_ms, double max_ms, uint64_t *rng)
{
    if (retry < 0)
        retry = 0;
    if (retry > 60)
        retry = 60;
    double cap = ldexp(base_ms > 0 ? base_ms : 0, retry);
    if (cap > max_ms)
        cap = max_ms;
    if (cap <= 0)
        return 0;
    return openai_next_random(rng) * cap;
}

/* --- the pool of idle easy handles ------------------------------------------------------ */

static CURL *pool_get(struct openai *o)
{
    CURL *c = NULL;
    pthread_mutex_lock(&o->mu);
    if (o->n_pool > 0)
        c = o->pool[--o->n_pool];
    pthread_mutex_unlock(&o->mu);
    return c ? c : curl_easy_init();
}

static void pool_put(struct openai *o, CURL *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&o->mu);
    if (o->n_pool < OPENAI_POOL_MAX) {
        o->pool[o->n_pool++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&o->mu);
    if (c)
        curl_easy_cleanup(c);
}

/* --- one HTTP attempt ------------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct attempt *a = ud;
    size_t n = size * nmemb;
    if (af_buf_append(&a->body, ptr, n) == AF_OK)
        return n;
    long status = 0;
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300)
        return n; /* an error body is only quoted: keep its start, drop the rest */
    a->too_big = 1;
    return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
    struct attempt *a = ud;
    size_t n = size * nitems;
    static const char key[] = "retry-after:";
    if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        a->retry_after[0] = '\0'; /* a new response (after 100 Continue) starts afresh */
        if (!a->started) {
            a->started = 1;
            a->mark_ms = af_clock_ms();
        }
    } else if (n > sizeof key - 1 && strncasecmp(buf, key, sizeof key - 1) == 0) {
        size_t vlen = n - (sizeof key - 1);
        if (vlen >= sizeof a->retry_after)
            vlen = sizeof a->retry_after - 1;
        memcpy(a->retry_after, buf + sizeof key - 1, vlen);
        a->retry_after[vlen] = '\0';
    }
    return n;
}

/* The stall rule. curl's own CURLOPT_LOW_SPEED_LIMIT/TIME would also count the silence while
 * the server generates a non-streamed reply, which is legitimately long, so the window only
 * starts with the response's first header: from then on each window of stall_ms must bring
 * AF_LLM_STALL_MIN_BYTES of body, or the attempt ends as a time-out. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal;
    (void)ultotal;
    (void)ulnow;
    struct attempt *a = ud;
    if (!a->started || a->stall_ms <= 0)
        return 0;
    double now = af_clock_ms();
    if (now - a->mark_ms < (double)a->stall_ms)
        return 0;
    if (dlnow - a->mark_bytes < AF_LLM_STALL_MIN_BYTES) {
        a->stalled = 1;
        return 1; /* CURLE_ABORTED_BY_CALLBACK */
    }
    a->mark_ms = now;
    a->mark_bytes = dlnow;
    return 0;
}

static void attempt_init(struct attempt *a, CURL *c, size_t limit, long stall_ms)
{
    memset(a, 0, sizeof *a);
    a->curl = c;
    a->stall_ms = stall_ms;
    af_buf_init(&a->body, limit);
}

static void attempt_run(const struct openai *o, struct attempt *a, const char *body, size_t len,
                        long timeout_ms)
{
    CURL *c = a->curl;
    curl_easy_reset(c); /* keeps live connections */
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, o->headers);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, o->p.connect_timeout_ms);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, a->curl_err);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "agentflow");
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_MAXCONNECTS, 2L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    a->cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
}

static void attempt_deinit(struct attempt *a)
{
    af_buf_deinit(&a->body);
}

/* --- request and reply JSON ------------------------------------------------------------- */

static int set_real(json_t *obj, const char *key, double v, struct af_buf *msg)
{
    if (!isfinite(v)) {
        msg_printf(msg, "sampling.%s is not a finite number", key);
        return AF_EINVAL;
    }
    json_object_set_new(obj, key, json_real(v));
    return AF_OK;
}

static int add_sampling(json_t *root, const struct af_sampling *s, struct af_buf *msg)
{
    if (set_real(root, "temperature", s->temperature, msg) ||
        set_real(root, "top_p", s->top_p, msg) ||
        set_real(root, "frequency_penalty", s->frequency_penalty, msg))
        return AF_EINVAL;
    if (s->frequency_penalty == 0)
        json_object_del(root, "frequency_penalty");
    if (s->max_tokens > 0)
        json_object_set_new(root, "max_tokens", json_integer(s->max_tokens));
    if (s->has_seed)
        json_object_set_new(root, "seed", json_integer((json_int_t)s->seed));
    if (s->ignore_eos) /* vLLM and llama.cpp's server read it; OpenAI's API would refuse it */
        json_object_set_new(root, "ignore_eos", json_true());
    size_t n_stop = s->n_stop < AF_LLM_MAX_STOP ? s->n_stop : AF_LLM_MAX_STOP;
    json_t *stop = json_array();
    for (size_t i = 0; i < n_stop; i++)
        if (s->stop[i])
            json_array_append_new(stop, af_json_text(s->stop[i]));
    if (json_array_size(stop) > 0)
        json_object_set_new(root, "stop", stop);
    else
        json_decref(stop);
    return AF_OK;
}

/* Builds the request body into *out (owned by the caller, free()). */
static int build_body(const struct openai *o, const struct af_llm_request *req, char **out,
                      struct af_buf *msg)
{
    if (!req || !req->msgs || req->n_msgs == 0) {
        msg_printf(msg, "the request has no messages");
        return AF_EINVAL;
    }
    json_t *root = json_object();
    const char *model = req->model ? req->model : o->model;
    if (model)
        json_object_set_new(root, "model", af_json_text(model));
    json_t *msgs = json_array();
    for (size_t i = 0; i < req->n_msgs; i++) {
        json_t *m = json_object();
        json_object_set_new(m, "role",
                            af_json_text(req->msgs[i].role ? req->msgs[i].role : "user"));
        json_object_set_new(m, "content", af_json_text(req->msgs[i].content));
        json_array_append_new(msgs, m);
    }
    json_object_set_new(root, "messages", msgs);
    int rc = add_sampling(root, &req->sampling, msg);
    json_object_set_new(root, "stream", json_false());
    *out = rc ? NULL : json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(root);
    if (rc == AF_OK && !*out) {
        msg_printf(msg, "cannot serialise the request");
        return AF_ENOMEM;
    }
    return rc;
}

/* Appends the server's explanation of an error: {"error":{"message":...}} (or a few other
 * common shapes) when present, else the start of the body. */
static void quote_server(const char *body, size_t len, struct af_buf *msg)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *e = json_object_get(root, "error");
    const char *text = af_json_get_str(e, "message");
    if (!text)
        text = json_string_value(e);
    if (!text)
        text = af_json_get_str(root, "message");
    if (!text)
        text = af_json_get_str(root, "detail");
    if (text) {
        msg_printf(msg, "%.*s", OPENAI_SERVER_MSG_MAX, text);
        json_decref(root);
        return;
    }
    json_decref(root);
    if (len == 0) {
        msg_printf(msg, "(empty body)");
        return;
    }
    size_t n = len < OPENAI_SNIPPET_BYTES ? len : OPENAI_SNIPPET_BYTES;
    char *s = af_utf8_repair(body, n);
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    msg_printf(msg, "body: %s%s", s, len > n ? "..." : "");
    free(s);
}

static char *dup_json_str(const json_t *obj, const char *key)
{
    return af_xstrdup(af_json_get_str(obj, key));
}

static int64_t get_count(const json_t *usage, const char *key)
{
    json_t *v = json_object_get(usage, key);
    return json_is_number(v) ? (int64_t)json_number_value(v) : -1;
}

/* Parses a 2xx body into reply; on failure writes the problem into msg. */
static int parse_reply(const struct openai *o, const struct attempt *a, struct af_llm_reply *reply,
                       struct af_buf *msg)
{
    json_error_t je;
    json_t *root = json_loadb(a->body.data ? a->body.data : "", a->body.len, 0, &je);
    int rc = AF_EPARSE;
    if (!root) {
        msg_printf(msg, "POST %s: HTTP %ld: malformed JSON body: %s (line %d, column %d)", o->url,
                   a->status, je.text, je.line, je.column);
        return AF_EPARSE;
    }
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    json_t *message = json_object_get(choice, "message");
    json_t *content = json_object_get(message, "content");
    if (!message && json_object_get(root, "error")) {
        msg_printf(msg, "POST %s: HTTP %ld with an error body: ", o->url, a->status);
        quote_server(a->body.data, a->body.len, msg);
        rc = AF_EBACKEND;
    } else if (json_is_null(content)) {
        const char *fr = af_json_get_str(choice, "finish_reason");
        msg_printf(msg, "POST %s: HTTP %ld: choices[0].message.content is null%s%s%s", o->url,
                   a->status, fr ? " (finish_reason " : "", fr ? fr : "", fr ? ")" : "");
    } else if (!json_is_string(content)) {
        msg_printf(msg, "POST %s: HTTP %ld: missing choices[0].message.content", o->url, a->status);
    } else {
        reply->text = af_xstrdup(json_string_value(content));
        reply->finish_reason = dup_json_str(choice, "finish_reason");
        reply->model = dup_json_str(root, "model");
        json_t *usage = json_object_get(root, "usage");
        reply->prompt_tokens = get_count(usage, "prompt_tokens");
        reply->completion_tokens = get_count(usage, "completion_tokens");
        reply->cached_tokens =
            get_count(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        rc = AF_OK;
    }
    json_decref(root);
    return rc;
}

/* --- judging an attempt and the retry loop ---------------------------------------------- */

static int curl_retryable(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return 1;
    default:
        return 0;
    }
}

/* Turns an attempt into AF_OK (reply filled) or an error (message in msg); *retry says
 * whether the error is transient. */
static int judge(const struct openai *o, const struct attempt *a, long timeout_ms,
                 struct af_llm_reply *reply, struct af_buf *msg, int *retry)
{
    *retry = 0;
    if (a->stalled) {
        *retry = 1;
        msg_printf(msg,
                   "POST %s: the reply stalled: fewer than %d bytes arrived in %ld ms "
                   "(stall_timeout_s)",
                   o->url, AF_LLM_STALL_MIN_BYTES, a->stall_ms);
        return AF_ETIMEOUT;
    }
    if (a->too_big) {
        msg_printf(msg, "POST %s: response body exceeds max_response_bytes (%zu bytes)", o->url,
                   o->p.max_response_bytes);
        return AF_ETOOBIG;
    }
    if (a->cc != CURLE_OK) {
        const char *detail = a->curl_err[0] ? a->curl_err : curl_easy_strerror(a->cc);
        *retry = curl_retryable(a->cc);
        if (a->cc == CURLE_OPERATION_TIMEDOUT) {
            msg_printf(msg, "POST %s: timed out (connect %ld ms, total %ld ms): %s", o->url,
                       o->p.connect_timeout_ms, timeout_ms, detail);
            return AF_ETIMEOUT;
        }
        msg_printf(msg, "POST %s: connection failed: %s", o->url, detail);
        return AF_EIO;
    }
    if (a->status < 200 || a->status > 299) {
        *retry = openai_status_retryable(a->status);
        msg_printf(msg, "POST %s: HTTP %ld: ", o->url, a->status);
        quote_server(a->body.data, a->body.len, msg);
        return AF_EBACKEND;
    }
    return parse_reply(o, a, reply, msg);
}

/* The wait before retry number `retry`: the server's Retry-After when it sent a valid one,
 * else full-jitter backoff; capped by backoff_max_ms either way. */
static double next_wait_ms(const struct openai *o, const struct attempt *a, int retry,
                           uint64_t *rng)
{
    double ms = 0;
    if (a->retry_after[0] && openai_parse_retry_after(a->retry_after, time(NULL), &ms) == 0)
        return ms < o->p.backoff_max_ms ? ms : o->p.backoff_max_ms;
    return openai_backoff_ms(retry, o->p.backoff_base_ms, o->p.backoff_max_ms, rng);
}

/* The total timeout of the next attempt: timeout_ms, shortened to what is left of the retry
 * budget and of the caller's deadline (0 = none). *by_deadline says whether the deadline set
 * it; it is rounded up, so an attempt cut by it ends at or just past it. */
static long attempt_timeout_ms(const struct openai *o, double t0, double deadline_ms,
                               int *by_deadline)
{
    double now = af_clock_ms();
    double left = o->p.retry_budget_ms - (now - t0);
    *by_deadline = 0;
    if (deadline_ms > 0 && deadline_ms - now < left) {
        left = ceil(deadline_ms - now) + 1;
        *by_deadline = 1;
    }
    if (left >= (double)o->p.timeout_ms) {
        *by_deadline = 0;
        return o->p.timeout_ms;
    }
    return left > 1 ? (long)left : 1;
}

/* True when the caller's deadline (0 = none) has passed. */
static int past_deadline(double deadline_ms)
{
    return deadline_ms > 0 && af_clock_ms() >= deadline_ms;
}

static int openai_chat(void *self, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct openai *o = self;
    struct af_buf msg;
    af_buf_init(&msg, OPENAI_ERRMSG_MAX);
    char *body = NULL;
    CURL *c = NULL;
    int rc = build_body(o, req, &body, &msg);
    if (rc != AF_OK)
        goto out;
    c = pool_get(o);
    if (!c) {
        msg_printf(&msg, "POST %s: cannot create a curl handle", o->url);
        rc = AF_ENOMEM;
        goto out;
    }
    double t0 = af_clock_ms();
    uint64_t rng = openai_rng_seed();
    const double deadline = req->deadline_ms;
    if (past_deadline(deadline)) {
        msg_printf(&msg, "POST %s: not sent: the caller's deadline has passed", o->url);
        rc = AF_ETIMEOUT;
        goto out;
    }
    for (int i = 0;; i++) {
        struct attempt a;
        attempt_init(&a, c, o->p.max_response_bytes, o->p.stall_timeout_ms);
        int by_deadline = 0;
        long timeout_ms = attempt_timeout_ms(o, t0, deadline, &by_deadline);
        attempt_run(o, &a, body, strlen(body), timeout_ms);
        reply->n_attempts = i + 1;
        reply->http_status = (int)a.status;
        af_buf_reset(&msg);
        int retry = 0;
        rc = judge(o, &a, timeout_ms, reply, &msg, &retry);
        double wait_ms = retry ? next_wait_ms(o, &a, i, &rng) : 0;
        /* curl's own time-out, when the deadline set it: the call was cut off there */
        const int cut = a.cc == CURLE_OPERATION_TIMEDOUT && by_deadline;
        attempt_deinit(&a);
        if (rc != AF_OK && (cut || past_deadline(deadline))) {
            msg_printf(&msg, "; stopped at the caller's deadline");
            break;
        }
        if (rc == AF_OK || !retry || i >= o->p.max_retries)
            break;
        if (deadline > 0 && af_clock_ms() + wait_ms >= deadline) {
            msg_printf(&msg,
                       "; stopped retrying: the next wait of %.0f ms would pass the "
                       "caller's deadline",
                       wait_ms);
            break;
        }
        double spent_ms = af_clock_ms() - t0;
        if (spent_ms + wait_ms > o->p.retry_budget_ms) {
            msg_printf(&msg,
                       "; stopped retrying: %.0f ms spent, the next wait of %.0f ms "
                       "would exceed retry_budget_ms %.0f",
                       spent_ms, wait_ms, o->p.retry_budget_ms);
            break;
        }
        af_clock_sleep_ms(wait_ms);
    }
    msg_printf(&msg, " (after %d attempt%s)", reply->n_attempts, reply->n_attempts == 1 ? "" : "s");
out:
    pool_put(o, c);
    free(body);
    reply->err = rc;
    if (rc != AF_OK) {
        free(reply->errmsg);
        reply->errmsg = af_buf_detach(&msg);
    }
    af_buf_deinit(&msg);
    return rc;
}

/* --- handle lifecycle ------------------------------------------------------------------- */

static void openai_free(void *self)
{
    struct openai *o = self;
    if (!o)
        return;
    for (size_t i = 0; i < o->n_pool; i++)
        curl_easy_cleanup(o->pool[i]);
    curl_slist_free_all(o->headers);
    pthread_mutex_destroy(&o->mu);
    free(o->base_url);
    free(o->url);
    free(o->model);
    free(o);
}

static const char *openai_describe(void *self)
{
    const struct openai *o = self;
    return o->base_url;
}

static const struct af_llm_ops openai_ops = {
    .kind = "openai",
    .chat = openai_chat,
    .free = openai_free,
    .describe = openai_describe,
};

struct af_llm_openai_params af_llm_openai_default_params(void)
{
    struct af_llm_openai_params p;
    memset(&p, 0, sizeof p);
    p.connect_timeout_ms = 10000;
    p.timeout_ms = 300000;
    p.max_retries = 5;
    p.backoff_base_ms = 500;
    p.backoff_max_ms = 30000;
    p.retry_budget_ms = 600000;
    p.max_response_bytes = (size_t)64 << 20;
    p.stall_timeout_ms = 30000;
    return p;
}

static int check_params(const struct af_llm_openai_params *p, char *err, size_t errlen)
{
    const char *bad = NULL;
    if (!p || !p->base_url || !*p->base_url)
        bad = "base_url is empty";
    else if (p->connect_timeout_ms <= 0 || p->timeout_ms <= 0)
        bad = "connect_timeout_ms and timeout_ms must be positive";
    else if (p->stall_timeout_ms < 0)
        bad = "stall_timeout_ms must not be negative";
    else if (p->max_retries < 0)
        bad = "max_retries must not be negative";
    else if (!(p->backoff_base_ms >= 0) || !(p->backoff_max_ms >= 0) || !(p->retry_budget_ms >= 0))
        bad = "backoff_base_ms, backoff_max_ms and retry_budget_ms must not be negative";
    else if (p->max_response_bytes == 0)
        bad = "max_response_bytes must be positive";
    else if (strpbrk(p->base_url, " \t\r\n"))
        bad = "base_url contains blanks";
    else if (p->api_key && strpbrk(p->api_key, "\r\n"))
        bad = "api_key contains a line break";
    if (bad && err && errlen)
        snprintf(err, errlen, "openai back-end %s: %s", p && p->base_url ? p->base_url : "", bad);
    return bad ? AF_EINVAL : AF_OK;
}

/* a followed by b, malloc'd */
static char *concat(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *s = af_xmalloc(na + nb + 1);
    memcpy(s, a, na);
    memcpy(s + na, b, nb);
    s[na + nb] = '\0';
    return s;
}

static struct curl_slist *make_headers(const char *api_key)
{
    struct curl_slist *h = NULL;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = h ? curl_slist_append(h, "Accept: application/json") : NULL;
    h = h ? curl_slist_append(h, "Expect:") : NULL; /* no 100-continue round trip */
    if (h && api_key && *api_key) {
        char *line = concat("Authorization: Bearer ", api_key);
        struct curl_slist *h2 = curl_slist_append(h, line);
        free(line);
        if (!h2)
            curl_slist_free_all(h);
        h = h2;
    }
    return h;
}

struct af_llm *af_llm_openai_new(const struct af_llm_openai_params *p, char *err, size_t errlen)
{
    if (check_params(p, err, errlen) != AF_OK)
        return NULL;
    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK) {
        if (err && errlen)
            snprintf(err, errlen, "openai back-end %s: curl_global_init failed: %s", p->base_url,
                     curl_easy_strerror(g_curl_init_rc));
        return NULL;
    }
    struct openai *o = af_xcalloc(1, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    o->p = *p;
    o->p.base_url = o->p.api_key = o->p.model = NULL;
    size_t n = strlen(p->base_url);
    while (n > 1 && p->base_url[n - 1] == '/')
        n--;
    o->base_url = af_xstrndup(p->base_url, n);
    o->url = concat(o->base_url, OPENAI_PATH);
    o->model = af_xstrdup(p->model);
    o->headers = make_headers(p->api_key);
    if (!o->headers) {
        if (err && errlen)
            snprintf(err, errlen, "openai back-end %s: cannot build the HTTP headers", o->url);
        openai_free(o);
        return NULL;
    }
    return af_llm_new_custom(&openai_ops, o);
}
