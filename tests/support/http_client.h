/*
 * http_client.h - test helper: one blocking HTTP request over libcurl, for the tests and the
 * benchmark of `agentflow serve`.
 *
 * Thread-safety: each call uses its own curl handle, so calls may run from many threads at
 * once (curl_global_init must have run first: http_client_global_init).
 */
#ifndef AF_TEST_HTTP_CLIENT_H
#define AF_TEST_HTTP_CLIENT_H

#include <stddef.h>

struct http_res {
    long status;   /* 0 when no response came (the transfer failed or was aborted) */
    char *body;    /* malloc'd, never NULL */
    char *headers; /* malloc'd response headers, "Name: value\r\n" lines */
    int curl_code; /* CURLcode of the transfer */
};

/* Stops reading after this callback returns non-zero: it sees the body received so far. */
typedef int (*http_stop_fn)(void *user, const char *body_so_far);

struct http_req {
    const char *method;       /* "GET" or "POST" */
    const char *url;          /* full URL */
    const char *body;         /* POST body or NULL */
    size_t body_len;          /* 0 = strlen(body) */
    const char *bearer;       /* Authorization: Bearer value, or NULL */
    const char *content_type; /* of a POST body; NULL = application/json */
    double timeout_s;         /* whole transfer; 0 = 120 */
    http_stop_fn stop;        /* may be NULL */
    void *stop_user;
};

void http_client_global_init(void);

/* Performs the request. Returns 0 when a response came (any status), -1 otherwise. Free the
 * result with http_res_deinit in every case. */
int http_do(const struct http_req *rq, struct http_res *out);
void http_res_deinit(struct http_res *r);

/* The value of header `name` (case-insensitive) in r->headers, malloc'd, or NULL. */
char *http_res_header(const struct http_res *r, const char *name);

#endif
