/*
 * http_client.c - blocking HTTP requests over libcurl for the serve tests and benchmark.
 */
#include "support/http_client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/xalloc.h"

void http_client_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct sink {
    struct af_buf buf;
    const struct http_req *rq;
    int stopped;
};

static size_t on_body(char *p, size_t size, size_t n, void *user)
{
    struct sink *s = user;
    if (af_buf_append(&s->buf, p, size * n) != AF_OK)
        return 0;
    if (s->rq && s->rq->stop && s->rq->stop(s->rq->stop_user, af_buf_str(&s->buf))) {
        s->stopped = 1;
        return 0; /* aborts the transfer: the connection closes */
    }
    return size * n;
}

int http_do(const struct http_req *rq, struct http_res *out)
{
    memset(out, 0, sizeof *out);
    CURL *c = curl_easy_init();
    struct sink body = {.rq = rq}, hdrs = {0};
    af_buf_init(&body.buf, AF_BUF_NOLIMIT);
    af_buf_init(&hdrs.buf, AF_BUF_NOLIMIT);
    struct curl_slist *h = NULL;
    char auth[512];
    if (rq->bearer) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rq->bearer);
        h = curl_slist_append(h, auth);
    }
    char ct[256];
    snprintf(ct, sizeof ct, "Content-Type: %s",
             rq->content_type ? rq->content_type : "application/json");
    h = curl_slist_append(h, ct);
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     (long)((rq->timeout_s > 0 ? rq->timeout_s : 120) * 1e3));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &hdrs);
    if (rq->method && strcmp(rq->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE,
                         (long)(rq->body_len ? rq->body_len
                                : rq->body   ? strlen(rq->body)
                                             : 0));
    } else if (rq->method && strcmp(rq->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
    }
    out->curl_code = (int)curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    out->body = af_buf_detach(&body.buf);
    out->headers = af_buf_detach(&hdrs.buf);
    af_buf_deinit(&body.buf);
    af_buf_deinit(&hdrs.buf);
    return out->curl_code == CURLE_OK || (body.stopped && out->status) ? 0 : -1;
}

void http_res_deinit(struct http_res *r)
{
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof *r);
}

char *http_res_header(const struct http_res *r, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = r->headers; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            size_t len = eol ? (size_t)(eol - v) : strlen(v);
            while (len && (v[len - 1] == '\r' || v[len - 1] == '\n'))
                len--;
            return af_xstrndup(v, len);
        }
        p = eol ? eol + 1 : NULL;
    }
    return NULL;
}
