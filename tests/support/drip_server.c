/*
 * drip_server.c - the byte-dripping HTTP server of drip_server.h: plain sockets and poll, so
 * the delay between bytes is exact and a stop is noticed within one interval.
 */
#include "support/drip_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/xalloc.h"

struct drip_server {
    int listen_fd;
    int interval_ms;
    char url[64];
    pthread_t thread;
    pthread_mutex_t mu;
    int stop;        /* guarded by mu */
    int connections; /* guarded by mu */
};

static int stopping(struct drip_server *ds)
{
    pthread_mutex_lock(&ds->mu);
    int s = ds->stop;
    pthread_mutex_unlock(&ds->mu);
    return s;
}

/* Reads what the client sent (the request; its content is not looked at) without blocking. */
static void drain(int fd)
{
    char buf[65536];
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

static void serve(struct drip_server *ds, int fd)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Content-Length: 1000000\r\n\r\n";
    if (send(fd, head, sizeof head - 1, MSG_NOSIGNAL) < 0)
        return;
    static const char body[] = "{\"choices\":[{\"message\":{\"content\":\"";
    for (size_t i = 0; !stopping(ds); i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ds->interval_ms) > 0) {
            char c;
            if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
                return; /* the client closed */
            drain(fd);
        }
        char c = i < sizeof body - 1 ? body[i] : 'x';
        if (send(fd, &c, 1, MSG_NOSIGNAL) < 0)
            return;
    }
}

static void *accept_loop(void *arg)
{
    struct drip_server *ds = arg;
    while (!stopping(ds)) {
        struct pollfd p = {.fd = ds->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(ds->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        pthread_mutex_lock(&ds->mu);
        ds->connections++;
        pthread_mutex_unlock(&ds->mu);
        drain(fd);
        serve(ds, fd);
        close(fd);
    }
    return NULL;
}

struct drip_server *drip_server_start(int interval_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16) ||
        getsockname(fd, (struct sockaddr *)&a, &alen)) {
        close(fd);
        return NULL;
    }
    struct drip_server *ds = af_xcalloc(1, sizeof *ds);
    ds->listen_fd = fd;
    ds->interval_ms = interval_ms > 0 ? interval_ms : 1;
    snprintf(ds->url, sizeof ds->url, "http://127.0.0.1:%d/v1", ntohs(a.sin_port));
    pthread_mutex_init(&ds->mu, NULL);
    if (pthread_create(&ds->thread, NULL, accept_loop, ds)) {
        close(fd);
        pthread_mutex_destroy(&ds->mu);
        free(ds);
        return NULL;
    }
    return ds;
}

void drip_server_stop(struct drip_server *ds)
{
    if (!ds)
        return;
    pthread_mutex_lock(&ds->mu);
    ds->stop = 1;
    pthread_mutex_unlock(&ds->mu);
    pthread_join(ds->thread, NULL);
    close(ds->listen_fd);
    pthread_mutex_destroy(&ds->mu);
    free(ds);
}

const char *drip_server_url(const struct drip_server *ds)
{
    return ds->url;
}

int drip_server_connections(struct drip_server *ds)
{
    pthread_mutex_lock(&ds->mu);
    int n = ds->connections;
    pthread_mutex_unlock(&ds->mu);
    return n;
}
