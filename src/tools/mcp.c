/*
 * mcp.c - the Model Context Protocol client: the stdio transport (a child process speaking
 * newline-delimited JSON-RPC 2.0), request/reply matching by id, the session lifecycle, and
 * shutdown without leaving zombies. See mcp.h for the contract.
 *
 * Invariants: rfd/wfd are O_CLOEXEC and non-blocking (so concurrent spawns elsewhere never
 * inherit them and no read or write blocks past its deadline); every access to the pipes is
 * under c->mu; SIGPIPE is blocked in the writing thread around each write, so a dead server
 * gives EPIPE rather than killing us.
 */
#include "tools/mcp.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"

extern char **environ;

#define MCP_MAX_ARGS 128
#define MCP_READ_CHUNK 65536
#define MCP_MAX_PAGES 100

struct mcp_client {
    char *spec; /* the command, without "stdio:", or the URL */
    char *url;  /* streamable HTTP endpoint, or NULL for stdio */
    char *session_id, *protocol;
    char *server_name, *server_version;
    pid_t pid; /* -1 once reaped */
    int wfd, rfd;
    char *rb; /* bytes read but not yet consumed */
    size_t rlen, rcap;
    int discarding; /* dropping an over-long line up to its newline */
    int dead;       /* EOF seen or pipe broken: no more requests */
    int hung;       /* a request timed out: shut down without a long grace period */
    char why_dead[256];
    long long next_id;
    double timeout_ms;
    size_t max_bytes;
    pthread_mutex_t mu;
    pthread_mutex_t ref_mu;
    int refs;
};

struct mcp_params mcp_default_params(void)
{
    struct mcp_params p;
    memset(&p, 0, sizeof p);
    p.timeout_ms = MCP_DEFAULT_TIMEOUT_MS;
    p.max_bytes = MCP_DEFAULT_MAX_BYTES;
    return p;
}

/* --- command lines ---------------------------------------------------------------------- */

void mcp_argv_free(char **argv)
{
    if (!argv)
        return;
    for (char **a = argv; *a; a++)
        free(*a);
    free(argv);
}

/* Reads one word starting at *pp into b. Returns 1 on a word, 0 at the end, -1 on a bad quote. */
static int next_word(const char **pp, struct af_buf *b)
{
    const char *p = *pp;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (!*p) {
        *pp = p;
        return 0;
    }
    af_buf_reset(b);
    char quote = 0;
    for (; *p; p++) {
        if (quote == '\'') {
            if (*p == '\'')
                quote = 0;
            else
                (void)af_buf_putc(b, *p);
        } else if (*p == '\\' && p[1]) {
            (void)af_buf_putc(b, *++p);
        } else if (quote == '"') {
            if (*p == '"')
                quote = 0;
            else
                (void)af_buf_putc(b, *p);
        } else if (*p == '\'' || *p == '"') {
            quote = *p;
        } else if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
            break;
        } else {
            (void)af_buf_putc(b, *p);
        }
    }
    *pp = p;
    return quote ? -1 : 1;
}

int mcp_split_command(const char *cmd, char ***argv_out, size_t *argc_out, char *err, size_t errlen)
{
    char **argv = af_xcalloc(MCP_MAX_ARGS + 1, sizeof *argv);
    size_t n = 0;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    const char *p = cmd ? cmd : "";
    int w;
    while ((w = next_word(&p, &b)) == 1 && n < MCP_MAX_ARGS)
        argv[n++] = af_xstrdup(af_buf_str(&b));
    af_buf_deinit(&b);
    if (w < 0 || n == 0 || n == MCP_MAX_ARGS) {
        af_errf(err, errlen, "MCP server command '%.200s': %s", cmd ? cmd : "",
                w < 0    ? "unterminated quote"
                : n == 0 ? "empty command"
                         : "too many words");
        mcp_argv_free(argv);
        return AF_EINVAL;
    }
    *argv_out = argv;
    *argc_out = n;
    return AF_OK;
}

/* --- process ---------------------------------------------------------------------------- */

/* Waits up to wait_ms for the child to exit; records how it ended in why_dead. 1 when reaped. */
static int reap(struct mcp_client *c, double wait_ms)
{
    if (c->pid < 0)
        return 1;
    double end = af_clock_ms() + wait_ms;
    for (;;) {
        int st = 0;
        pid_t r = waitpid(c->pid, &st, WNOHANG);
        if (r == c->pid || (r < 0 && errno == ECHILD)) {
            if (r == c->pid && WIFEXITED(st))
                snprintf(c->why_dead, sizeof c->why_dead, "exited with status %d", WEXITSTATUS(st));
            else if (r == c->pid && WIFSIGNALED(st))
                snprintf(c->why_dead, sizeof c->why_dead, "was killed by signal %d", WTERMSIG(st));
            c->pid = -1;
            return 1;
        }
        if (r < 0 && errno != EINTR)
            return 0;
        if (af_clock_ms() >= end)
            return 0;
        af_clock_sleep_ms(5);
    }
}

static void mark_dead(struct mcp_client *c, const char *what)
{
    if (!c->dead)
        snprintf(c->why_dead, sizeof c->why_dead, "%s", what);
    c->dead = 1;
    (void)reap(c, 1000);
}

static void set_fd_flags(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Spawns argv with stdin/stdout on new pipes, in its own process group. */
static int spawn_server(struct mcp_client *c, char **argv, const char *stderr_path, char *err,
                        size_t errlen)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) {
        af_errf(err, errlen, "MCP server '%.200s': pipe: %s", c->spec, strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (in[i] >= 0)
                close(in[i]);
            if (out[i] >= 0)
                close(out[i]);
        }
        return AF_EIO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (stderr_path)
        posix_spawn_file_actions_addopen(&fa, 2, stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        af_errf(err, errlen, "MCP server '%.200s': cannot start '%.200s': %s", c->spec, argv[0],
                strerror(rc));
        return AF_EIO;
    }
    c->pid = pid;
    c->wfd = in[1];
    c->rfd = out[0];
    set_fd_flags(c->wfd);
    set_fd_flags(c->rfd);
    return AF_OK;
}

/* Closes stdin, then escalates SIGTERM and SIGKILL to the process group; always reaps. */
static void stop_server(struct mcp_client *c)
{
    if (c->wfd >= 0)
        close(c->wfd);
    c->wfd = -1;
    if (c->pid > 0 && !reap(c, c->hung ? 200 : 2000)) {
        (void)kill(-c->pid, SIGTERM);
        (void)kill(c->pid, SIGTERM);
        if (!reap(c, 1000)) {
            (void)kill(-c->pid, SIGKILL);
            (void)kill(c->pid, SIGKILL);
            for (int i = 0; i < 10 && !reap(c, 1000); i++)
                (void)kill(c->pid, SIGKILL);
        }
    }
    if (c->rfd >= 0)
        close(c->rfd);
    c->rfd = -1;
}

/* --- framing ---------------------------------------------------------------------------- */

static int remaining_ms(double deadline)
{
    double left = deadline - af_clock_ms();
    if (left <= 0)
        return 0;
    return left > 1e9 ? 1000000000 : (int)left + 1;
}

/* Writes all of s, then '\n'. EPIPE marks the server dead instead of raising SIGPIPE. */
static int write_line(struct mcp_client *c, const char *s, size_t n, double deadline,
                      const char *method, char *err, size_t errlen)
{
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    int rc = AF_OK;
    size_t off = 0, total = n + 1;
    while (off < total && rc == AF_OK) {
        const char *p = off < n ? s + off : "\n";
        size_t len = off < n ? n - off : 1;
        ssize_t w = write(c->wfd, p, len);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pf = {.fd = c->wfd, .events = POLLOUT};
            int left = remaining_ms(deadline);
            if (left == 0 || poll(&pf, 1, left) == 0) {
                c->hung = 1;
                af_errf(err, errlen, "MCP server '%.200s': it does not read its input ('%s')",
                        c->spec, method);
                rc = AF_ETIMEOUT;
            }
            continue;
        }
        if (w < 0 && errno == EPIPE && !was_pending) {
            struct timespec zero = {0, 0};
            (void)sigtimedwait(&pipe_set, NULL, &zero);
        }
        mark_dead(c, "closed its input");
        af_errf(err, errlen, "MCP server '%.200s' %s (sending '%s')", c->spec, c->why_dead, method);
        rc = AF_EIO;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Reads more bytes into c->rb (or, while discarding, drops them). 0 on data, else AF_E*. */
static int fill(struct mcp_client *c, double deadline, const char *method, char *err, size_t errlen)
{
    for (;;) {
        struct pollfd pf = {.fd = c->rfd, .events = POLLIN};
        int left = remaining_ms(deadline);
        int pr = left ? poll(&pf, 1, left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0) {
            c->hung = 1;
            af_errf(err, errlen, "MCP server '%.200s': no answer to '%s' in time", c->spec, method);
            return AF_ETIMEOUT;
        }
        if (c->rcap - c->rlen < MCP_READ_CHUNK) {
            c->rcap = c->rlen + 2 * MCP_READ_CHUNK;
            c->rb = af_xrealloc(c->rb, c->rcap);
        }
        ssize_t r = read(c->rfd, c->rb + c->rlen, MCP_READ_CHUNK);
        if (r < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (r <= 0) {
            mark_dead(c, r == 0 ? "closed its output" : "output failed");
            af_errf(err, errlen, "MCP server '%.200s' %s before answering '%s'", c->spec,
                    c->why_dead, method);
            return AF_EIO;
        }
        c->rlen += (size_t)r;
        return AF_OK;
    }
}

/* Takes one line (without '\n') out of the read buffer into *line (owned by the caller). */
static int read_line(struct mcp_client *c, double deadline, const char *method, char **line,
                     char *err, size_t errlen)
{
    size_t scan = 0;
    for (;;) {
        char *nl = c->rlen > scan ? memchr(c->rb + scan, '\n', c->rlen - scan) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - c->rb);
            int was_discarding = c->discarding;
            if (!was_discarding)
                *line = af_xstrndup(c->rb, n);
            memmove(c->rb, nl + 1, c->rlen - n - 1);
            c->rlen -= n + 1;
            c->discarding = 0;
            if (!was_discarding)
                return AF_OK;
            af_errf(err, errlen, "MCP server '%.200s': its answer to '%s' exceeds %zu bytes",
                    c->spec, method, c->max_bytes);
            return AF_ETOOBIG;
        }
        scan = c->rlen;
        if (c->rlen > c->max_bytes) {
            c->discarding = 1;
            c->rlen = scan = 0;
        }
        int rc = fill(c, deadline, method, err, errlen);
        if (rc)
            return rc;
    }
}

static int send_json(struct mcp_client *c, json_t *msg, double deadline, const char *method,
                     char *err, size_t errlen)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    int rc = write_line(c, s, strlen(s), deadline, method, err, errlen);
    free(s);
    return rc;
}

/* Answers a request from the server: ping gets {}, anything else "method not found". */
static void answer_server_request(struct mcp_client *c, json_t *msg, double deadline)
{
    const char *m = json_string_value(json_object_get(msg, "method"));
    json_t *rep = json_pack("{s:s, s:O}", "jsonrpc", "2.0", "id", json_object_get(msg, "id"));
    if (m && !strcmp(m, "ping")) {
        json_object_set_new(rep, "result", json_object());
    } else {
        json_object_set_new(rep, "error",
                            json_pack("{s:i, s:s}", "code", -32601, "message",
                                      "method not supported by this client"));
    }
    char ignore[64];
    (void)send_json(c, rep, deadline, "reply", ignore, sizeof ignore);
    json_decref(rep);
}

/* Reads messages until the reply to `id`; *reply is that message (owned by the caller). */
static int await_reply(struct mcp_client *c, json_int_t id, double deadline, const char *method,
                       json_t **reply, char *err, size_t errlen)
{
    for (;;) {
        char *line = NULL;
        int rc = read_line(c, deadline, method, &line, err, errlen);
        if (rc)
            return rc;
        const char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (!*p) {
            free(line);
            continue;
        }
        json_error_t je;
        json_t *msg = json_loads(line, 0, &je);
        if (!json_is_object(msg)) {
            af_errf(err, errlen,
                    "MCP server '%.200s': wrote a line that is not a JSON-RPC message while "
                    "answering '%s' (%s): '%.80s'",
                    c->spec, method, msg ? "not an object" : je.text, line);
            free(line);
            json_decref(msg);
            return AF_EPARSE;
        }
        free(line);
        json_t *jid = json_object_get(msg, "id");
        if (json_object_get(msg, "method")) {
            if (jid)
                answer_server_request(c, msg, deadline);
        } else if (json_is_integer(jid) && json_integer_value(jid) == id) {
            *reply = msg;
            return AF_OK;
        }
        json_decref(msg); /* a notification, or a late reply to an abandoned request */
    }
}

/* Tells the server to stop working on request `id` (best effort, short deadline). */
static void cancel_request(struct mcp_client *c, json_int_t id)
{
    json_t *n =
        json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0", "method", "notifications/cancelled",
                  "params", "requestId", (json_int_t)id, "reason", "timed out");
    char ignore[64];
    (void)send_json(c, n, af_clock_ms() + 100, "notifications/cancelled", ignore, sizeof ignore);
    json_decref(n);
}

/* Turns a reply into its result, or an AF_EBACKEND error naming the code and message. */
static int reply_result(struct mcp_client *c, json_t *reply, const char *method, json_t **result,
                        char *err, size_t errlen)
{
    json_t *e = json_object_get(reply, "error");
    if (e) {
        const char *m = json_string_value(json_object_get(e, "message"));
        af_errf(err, errlen, "MCP server '%.200s': '%s' failed: error %lld: %.300s", c->spec,
                method, (long long)json_integer_value(json_object_get(e, "code")),
                m ? m : "(no message)");
        return AF_EBACKEND;
    }
    json_t *r = json_object_get(reply, "result");
    if (!r) {
        af_errf(err, errlen, "MCP server '%.200s': the reply to '%s' has no result", c->spec,
                method);
        return AF_EPARSE;
    }
    *result = json_incref(r);
    return AF_OK;
}

/* --- the streamable HTTP transport ------------------------------------------------------ */

struct http_reply {
    struct af_buf body;
    char *session_id; /* Mcp-Session-Id header, owned */
    char ctype[128];  /* Content-Type header */
    int overflow;
};

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    struct http_reply *r = user;
    if (af_buf_append(&r->body, p, size * n) != AF_OK) {
        r->overflow = 1;
        return 0;
    }
    return size * n;
}

/* The value of header line p (len bytes) when its name is `name`, trimmed, else NULL (owned). */
static char *header_value(const char *p, size_t len, const char *name)
{
    size_t k = strlen(name);
    if (len <= k || strncasecmp(p, name, k) != 0 || p[k] != ':')
        return NULL;
    p += k + 1;
    len -= k + 1;
    while (len && (*p == ' ' || *p == '\t'))
        p++, len--;
    while (len && isspace((unsigned char)p[len - 1]))
        len--;
    return af_xstrndup(p, len);
}

static size_t on_header(char *p, size_t size, size_t n, void *user)
{
    struct http_reply *r = user;
    char *v = header_value(p, size * n, "mcp-session-id");
    if (v) {
        free(r->session_id);
        r->session_id = v;
    } else if ((v = header_value(p, size * n, "content-type")) != NULL) {
        snprintf(r->ctype, sizeof r->ctype, "%s", v);
        free(v);
    }
    return size * n;
}

/* POSTs body (or DELETEs when body is NULL) with the session headers. Fills r and *status. */
static int http_send(struct mcp_client *c, const char *body, double deadline, const char *method,
                     struct http_reply *r, long *status, char *err, size_t errlen)
{
    CURL *h = curl_easy_init();
    if (!h) {
        af_errf(err, errlen, "MCP server '%.200s': curl_easy_init failed", c->spec);
        return AF_EIO;
    }
    struct curl_slist *hd = NULL;
    char line[512];
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, "Accept: application/json, text/event-stream");
    if (c->session_id) {
        snprintf(line, sizeof line, "Mcp-Session-Id: %.400s", c->session_id);
        hd = curl_slist_append(hd, line);
    }
    if (c->protocol) {
        snprintf(line, sizeof line, "MCP-Protocol-Version: %.100s", c->protocol);
        hd = curl_slist_append(hd, line);
    }
    long ms = (long)remaining_ms(deadline);
    curl_easy_setopt(h, CURLOPT_URL, c->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    if (body)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    CURLcode cc = curl_easy_perform(h);
    *status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hd);
    if (cc == CURLE_OK)
        return AF_OK;
    if (r->overflow) {
        af_errf(err, errlen, "MCP server '%.200s': its answer to '%s' exceeds %zu bytes", c->spec,
                method, c->max_bytes);
        return AF_ETOOBIG;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        af_errf(err, errlen, "MCP server '%.200s': no answer to '%s' in time", c->spec, method);
        return AF_ETIMEOUT;
    }
    af_errf(err, errlen, "MCP server '%.200s': '%s': %s", c->spec, method, curl_easy_strerror(cc));
    return AF_EIO;
}

/* Takes the reply to id out of one JSON text (an object or a batch array). */
static void pick_reply(const char *text, size_t len, json_int_t id, json_t **reply)
{
    json_t *j = json_loadb(text, len, 0, NULL);
    size_t n = json_is_array(j) ? json_array_size(j) : 1;
    for (size_t i = 0; i < n && !*reply; i++) {
        json_t *m = json_is_array(j) ? json_array_get(j, i) : j;
        json_t *jid = json_object_get(m, "id");
        if (!json_object_get(m, "method") && json_is_integer(jid) && json_integer_value(jid) == id)
            *reply = json_incref(m);
    }
    json_decref(j);
}

/* Finds the reply to id in a JSON body or in the data of an SSE stream. */
static json_t *find_reply(const struct http_reply *r, json_int_t id)
{
    json_t *reply = NULL;
    const char *b = af_buf_str(&r->body);
    if (!strstr(r->ctype, "text/event-stream")) {
        pick_reply(b, r->body.len, id, &reply);
        return reply;
    }
    struct af_buf data;
    af_buf_init(&data, AF_BUF_NOLIMIT);
    while (*b && !reply) {
        size_t n = strcspn(b, "\n");
        size_t m = n && b[n - 1] == '\r' ? n - 1 : n;
        if (m == 0) { /* the end of an event */
            pick_reply(af_buf_str(&data), data.len, id, &reply);
            af_buf_reset(&data);
        } else if (m >= 5 && !strncmp(b, "data:", 5)) {
            size_t skip = m > 5 && b[5] == ' ' ? 6 : 5;
            (void)af_buf_append(&data, b + skip, m - skip);
            (void)af_buf_putc(&data, '\n');
        }
        b += n + (b[n] == '\n');
    }
    if (!reply && data.len)
        pick_reply(af_buf_str(&data), data.len, id, &reply);
    af_buf_deinit(&data);
    return reply;
}

/* One POST: msg out, the reply to id back (id < 0: a notification, no reply expected). */
static int http_exchange(struct mcp_client *c, json_t *msg, json_int_t id, double deadline,
                         const char *method, json_t **reply, char *err, size_t errlen)
{
    struct http_reply r;
    memset(&r, 0, sizeof r);
    af_buf_init(&r.body, c->max_bytes);
    char *body = json_dumps(msg, JSON_COMPACT);
    long status = 0;
    int rc = http_send(c, body, deadline, method, &r, &status, err, errlen);
    free(body);
    if (rc == AF_OK && r.session_id && !c->session_id) {
        c->session_id = r.session_id;
        r.session_id = NULL;
    }
    if (rc == AF_OK && id >= 0)
        *reply = find_reply(&r, id);
    if (rc == AF_OK && id >= 0 && !*reply) {
        af_errf(err, errlen,
                "MCP server '%.200s': HTTP %ld with no JSON-RPC answer to '%s': %.200s", c->spec,
                status, method, af_buf_str(&r.body));
        rc = status >= 300 ? AF_EBACKEND : AF_EPARSE;
    } else if (rc == AF_OK && id < 0 && status >= 300) {
        af_errf(err, errlen, "MCP server '%.200s': HTTP %ld for '%s'", c->spec, status, method);
        rc = AF_EBACKEND;
    }
    free(r.session_id);
    af_buf_deinit(&r.body);
    return rc;
}

/* Ends the HTTP session (best effort). */
static void http_close(struct mcp_client *c)
{
    if (!c->session_id)
        return;
    struct http_reply r;
    memset(&r, 0, sizeof r);
    af_buf_init(&r.body, 65536);
    long status;
    char ignore[256];
    (void)http_send(c, NULL, af_clock_ms() + 2000, "DELETE", &r, &status, ignore, sizeof ignore);
    free(r.session_id);
    af_buf_deinit(&r.body);
}

/* One request under the lock. */
static int request_locked(struct mcp_client *c, const char *method, json_t *params,
                          double deadline_ms, json_t **result, char *err, size_t errlen)
{
    if (c->dead) {
        af_errf(err, errlen, "MCP server '%.200s' is not running (it %s)", c->spec, c->why_dead);
        json_decref(params);
        return AF_EIO;
    }
    double deadline = af_clock_ms() + c->timeout_ms;
    if (deadline_ms > 0 && deadline_ms < deadline)
        deadline = deadline_ms;
    json_int_t id = (json_int_t)++c->next_id;
    json_t *msg = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", id, "method", method);
    if (params)
        json_object_set_new(msg, "params", params);
    json_t *reply = NULL;
    int rc;
    if (c->url) {
        rc = http_exchange(c, msg, id, deadline, method, &reply, err, errlen);
        json_decref(msg);
        if (rc == AF_OK)
            rc = reply_result(c, reply, method, result, err, errlen);
        json_decref(reply);
        return rc;
    }
    rc = send_json(c, msg, deadline, method, err, errlen);
    json_decref(msg);
    if (rc == AF_OK)
        rc = await_reply(c, id, deadline, method, &reply, err, errlen);
    if (rc == AF_ETIMEOUT && !c->dead)
        cancel_request(c, id);
    if (rc == AF_OK)
        rc = reply_result(c, reply, method, result, err, errlen);
    json_decref(reply);
    return rc;
}

int mcp_client_request(struct mcp_client *c, const char *method, json_t *params, double deadline_ms,
                       json_t **result, char *err, size_t errlen)
{
    *result = NULL;
    pthread_mutex_lock(&c->mu);
    int rc = request_locked(c, method, params, deadline_ms, result, err, errlen);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* --- lifecycle -------------------------------------------------------------------------- */

static int initialize(struct mcp_client *c, char *err, size_t errlen)
{
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION,
                               "capabilities", "clientInfo", "name", "agentflow", "version", "1.0");
    json_t *res = NULL;
    int rc = mcp_client_request(c, "initialize", params, 0, &res, err, errlen);
    if (rc) {
        if (c->dead) {
            char tmp[1024];
            snprintf(tmp, sizeof tmp, "%s", err);
            af_errf(err, errlen, "%s (its stderr may say why)", tmp);
        }
        return rc;
    }
    const json_t *info = json_object_get(res, "serverInfo");
    const char *name = json_string_value(json_object_get(info, "name"));
    const char *version = json_string_value(json_object_get(info, "version"));
    c->server_name = af_xstrdup(name ? name : "");
    c->server_version = af_xstrdup(version ? version : "");
    const char *proto = json_string_value(json_object_get(res, "protocolVersion"));
    c->protocol = af_xstrdup(proto ? proto : MCP_PROTOCOL_VERSION);
    json_decref(res);
    json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", "notifications/initialized");
    pthread_mutex_lock(&c->mu);
    double deadline = af_clock_ms() + c->timeout_ms;
    if (c->url)
        rc = http_exchange(c, n, -1, deadline, "notifications/initialized", NULL, err, errlen);
    else
        rc = send_json(c, n, deadline, "notifications/initialized", err, errlen);
    pthread_mutex_unlock(&c->mu);
    json_decref(n);
    return rc;
}

static void client_free(struct mcp_client *c)
{
    if (c->url)
        http_close(c);
    stop_server(c);
    free(c->spec);
    free(c->url);
    free(c->session_id);
    free(c->protocol);
    free(c->server_name);
    free(c->server_version);
    free(c->rb);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->ref_mu);
    free(c);
}

int mcp_client_open(const struct mcp_params *p, struct mcp_client **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *spec = p->spec ? p->spec : "";
    int http = !strncasecmp(spec, "http://", 7) || !strncasecmp(spec, "https://", 8);
    if (!strncmp(spec, "stdio:", 6))
        spec += 6;
    char **argv = NULL;
    size_t argc = 0;
    int rc = http ? AF_OK : mcp_split_command(spec, &argv, &argc, err, errlen);
    if (rc)
        return rc;
    struct mcp_client *c = af_xcalloc(1, sizeof *c);
    c->spec = af_xstrdup(spec);
    c->pid = -1;
    c->wfd = c->rfd = -1;
    c->timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : MCP_DEFAULT_TIMEOUT_MS;
    c->max_bytes = p->max_bytes ? p->max_bytes : MCP_DEFAULT_MAX_BYTES;
    c->refs = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->ref_mu, NULL);
    if (http)
        c->url = af_xstrdup(spec);
    else
        rc = spawn_server(c, argv, p->stderr_path, err, errlen);
    mcp_argv_free(argv);
    if (rc == AF_OK)
        rc = initialize(c, err, errlen);
    if (rc) {
        client_free(c);
        return rc;
    }
    *out = c;
    return AF_OK;
}

void mcp_client_retain(struct mcp_client *c)
{
    pthread_mutex_lock(&c->ref_mu);
    c->refs++;
    pthread_mutex_unlock(&c->ref_mu);
}

void mcp_client_release(struct mcp_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->ref_mu);
    int last = --c->refs == 0;
    pthread_mutex_unlock(&c->ref_mu);
    if (last)
        client_free(c);
}

const char *mcp_client_spec(const struct mcp_client *c)
{
    return c->spec;
}

const char *mcp_client_server_name(const struct mcp_client *c)
{
    return c->server_name ? c->server_name : "";
}

const char *mcp_client_server_version(const struct mcp_client *c)
{
    return c->server_version ? c->server_version : "";
}

long mcp_client_pid(const struct mcp_client *c)
{
    return (long)c->pid;
}

int mcp_client_list_tools(struct mcp_client *c, json_t **tools, char *err, size_t errlen)
{
    json_t *all = json_array();
    char *cursor = NULL;
    int rc = AF_OK;
    for (int page = 0; page < MCP_MAX_PAGES && rc == AF_OK; page++) {
        json_t *params = cursor ? json_pack("{s:s}", "cursor", cursor) : NULL;
        json_t *res = NULL;
        free(cursor);
        cursor = NULL;
        rc = mcp_client_request(c, "tools/list", params, 0, &res, err, errlen);
        if (rc)
            break;
        json_t *list = json_object_get(res, "tools");
        if (!json_is_array(list)) {
            af_errf(err, errlen, "MCP server '%.200s': the tools/list result has no 'tools' list",
                    c->spec);
            rc = AF_EPARSE;
        } else {
            json_array_extend(all, list);
        }
        const char *next = json_string_value(json_object_get(res, "nextCursor"));
        if (next && next[0])
            cursor = af_xstrdup(next);
        json_decref(res);
        if (!cursor)
            break;
    }
    free(cursor);
    if (rc) {
        json_decref(all);
        return rc;
    }
    *tools = all;
    return AF_OK;
}
