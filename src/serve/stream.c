/*
 * stream.c - server-sent event responses that follow a job's events as they happen.
 *
 * libmicrohttpd runs one thread per connection here, so the content reader may block: it
 * waits for the job's next event in short slices and, between them, looks at the client's
 * socket, so a client that hangs up is noticed within a slice even while no event comes.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/xalloc.h"
#include "serve/serve_int.h"

#define SSE_SLICE_MS 200.0
#define SSE_KEEPALIVE_MS 15000.0

struct sse {
    struct job *job; /* a reference */
    struct MHD_Connection *conn;
    sse_format_fn fmt;
    void *user;
    void (*free_user)(void *);
    int cancel_on_close;
    size_t cursor;
    struct af_buf pending; /* bytes formatted, not yet handed to MHD */
    size_t off;
    int ended;
    double last_ms;
};

int serve_client_alive(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 1;
    struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))
        return 0;
    return 1;
}

/* A comment line often enough that neither libmicrohttpd's idle timeout nor a proxy's closes
 * a stream while a long step runs. */
static double keepalive_ms(const struct sse *st)
{
    double third = st->job->srv->p.connection_timeout_s * 1000.0 / 3;
    return third > 0 && third < SSE_KEEPALIVE_MS ? third : SSE_KEEPALIVE_MS;
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sse *st = cls;
    while (st->off >= st->pending.len) {
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        af_buf_reset(&st->pending);
        st->off = 0;
        int finished = 0;
        json_t *ev = job_next_event(st->job, st->cursor, SSE_SLICE_MS, &finished);
        if (ev) {
            st->cursor++;
            st->fmt(st->user, st->job, ev, &st->pending);
            json_decref(ev);
        } else if (finished) {
            st->fmt(st->user, st->job, NULL, &st->pending);
            st->ended = 1;
        } else if (!serve_client_alive(st->conn)) {
            if (st->cancel_on_close)
                job_cancel(st->job, "the client disconnected");
            return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (af_clock_ms() - st->last_ms > keepalive_ms(st)) {
            (void)af_buf_puts(&st->pending, ": keep-alive\n\n");
        }
    }
    size_t n = st->pending.len - st->off;
    if (n > max)
        n = max;
    memcpy(buf, st->pending.data + st->off, n);
    st->off += n;
    st->last_ms = af_clock_ms();
    return (ssize_t)n;
}

static void sse_free(void *cls)
{
    struct sse *st = cls;
    if (st->cancel_on_close && !job_finished(st->job))
        job_cancel(st->job, "the client disconnected");
    job_unref(st->job);
    if (st->free_user)
        st->free_user(st->user);
    af_buf_deinit(&st->pending);
    free(st);
}

struct MHD_Response *sse_response_new(struct MHD_Connection *c, struct job *j, sse_format_fn fmt,
                                      void *user, void (*free_user)(void *), int cancel_on_close)
{
    struct sse *st = af_xcalloc(1, sizeof *st);
    job_ref(j);
    st->job = j;
    st->conn = c;
    st->fmt = fmt;
    st->user = user;
    st->free_user = free_user;
    st->cancel_on_close = cancel_on_close;
    st->last_ms = af_clock_ms();
    af_buf_init(&st->pending, AF_BUF_NOLIMIT);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, st, sse_free);
    if (!r) {
        sse_free(st);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}
