/*
 * http_get.c - the libcurl GET/POST helper of the network tools (see http_get.h).
 *
 * One easy handle per call. The body goes into an af_buf whose limit is the cap, so a body
 * that grows past it makes the write callback fail, which aborts the transfer; a declared
 * Content-Length over the cap is refused before any byte is read (CURLOPT_MAXFILESIZE).
 */
#include "tools/http_get.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "agentflow/tools.h"

#define HTTP_SNIPPET 200

/* Process-wide: the once-control and the result of curl_global_init, written once. */
static pthread_once_t g_http_once = PTHREAD_ONCE_INIT;
static CURLcode g_http_init_rc = CURLE_FAILED_INIT;

static void http_init_once(void)
{
    g_http_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct http_params http_default_params(void)
{
    struct http_params p = {0};
    p.timeout_ms = 20000;
    p.connect_timeout_ms = 10000;
    p.max_redirects = 5;
    p.max_bytes = (size_t)5 << 20;
    return p;
}

void http_response_init(struct http_response *r)
{
    memset(r, 0, sizeof *r);
}

void http_response_deinit(struct http_response *r)
{
    if (!r)
        return;
    free(r->body);
    free(r->content_type);
    free(r->final_url);
    memset(r, 0, sizeof *r);
}

int http_url_allowed(const char *url)
{
    return url && (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0);
}

long http_timeout_option(const json_t *opts, long dflt_ms)
{
    const json_t *v = json_object_get(opts, "web_timeout_s");
    double s = -1;
    if (json_is_number(v)) {
        s = json_number_value(v);
    } else {
        const char *str = af_tool_option(opts, "web_timeout_s", "AGENTFLOW_WEB_TIMEOUT_S");
        char *end = NULL;
        if (str)
            s = strtod(str, &end);
        if (!str || end == str || *end)
            s = -1;
    }
    if (!(s > 0) || s > 86400)
        return dflt_ms;
    return (long)(s * 1000.0);
}

char *http_url_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = af_xmalloc(n * 3 + 1), *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o = '\0';
    return out;
}

struct sink {
    struct af_buf buf;
    int too_big;
    int block_private;
    char blocked[INET6_ADDRSTRLEN]; /* the refused address, "" when none */
};

static int v4_private(uint32_t a) /* host byte order */
{
    const uint32_t b0 = a >> 24, b1 = (a >> 16) & 0xff;
    return b0 == 0 || b0 == 10 || b0 == 127 || b0 >= 224 ||    /* this, private, loop,
                                                                  multicast, reserved */
           (b0 == 100 && (b1 & 0xc0) == 64) ||                 /* 100.64/10 CGNAT */
           (b0 == 169 && b1 == 254) ||                         /* link-local */
           (b0 == 172 && (b1 & 0xf0) == 16) ||                 /* 172.16/12 */
           (b0 == 192 && b1 == 168) ||                         /* 192.168/16 */
           (b0 == 192 && b1 == 0 && ((a >> 8) & 0xff) == 0) || /* 192.0.0/24 */
           (b0 == 198 && (b1 & 0xfe) == 18);                   /* 198.18/15 */
}

int http_addr_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return v4_private(ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return 1; /* not an IP address at all */
    const uint8_t *b = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
    if (!memcmp(b, mapped, 12) || !memcmp(b, nat64, 12)) {
        uint32_t v4 = (uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15];
        return v4_private(v4);
    }
    int zero10 = 1;
    for (int i = 0; i < 10; i++)
        zero10 &= b[i] == 0;
    return zero10 ||                                  /* ::, ::1, IPv4-compatible */
           (b[0] & 0xfe) == 0xfc ||                   /* fc00::/7 unique local */
           (b[0] == 0xfe && (b[1] & 0x80) == 0x80) || /* fe80::/10, fec0::/10 */
           b[0] == 0xff;                              /* multicast */
}

/* CURLOPT_OPENSOCKETFUNCTION: sees the resolved address of every connection, redirects
 * included, so a name that resolves to a private address cannot slip through. */
static curl_socket_t open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *addr)
{
    struct sink *s = user;
    (void)purpose;
    if (s->block_private && http_addr_private(&addr->addr)) {
        const void *ip =
            addr->family == AF_INET
                ? (const void *)&((const struct sockaddr_in *)(const void *)&addr->addr)->sin_addr
                : (const void *)&((const struct sockaddr_in6 *)(const void *)&addr->addr)
                      ->sin6_addr;
        if (!inet_ntop(addr->family, ip, s->blocked, sizeof s->blocked))
            snprintf(s->blocked, sizeof s->blocked, "?");
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    struct sink *s = user;
    size_t n = size * nmemb;
    if (af_buf_append(&s->buf, data, n) != AF_OK) {
        s->too_big = 1;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    return n;
}

/* The timeout to use, from the params and the deadline; 0 when the deadline has passed. */
static long effective_timeout_ms(const struct http_params *p)
{
    long t = p->timeout_ms > 0 ? p->timeout_ms : 20000;
    if (p->deadline_ms > 0) {
        double left = p->deadline_ms - af_clock_ms();
        if (left < 1.0)
            return 0;
        if (left < (double)t)
            t = (long)left;
    }
    return t;
}

static void setup(CURL *c, const struct http_params *p, long timeout_ms, struct sink *s,
                  struct curl_slist **hdrs)
{
    curl_easy_setopt(c, CURLOPT_URL, p->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, p->max_redirects > 0 ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, p->max_redirects > 0 ? p->max_redirects : 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    long ct = p->connect_timeout_ms > 0 ? p->connect_timeout_ms : 10000;
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ct < timeout_ms ? ct : timeout_ms);
    curl_easy_setopt(c, CURLOPT_USERAGENT, HTTP_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->buf.limit);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, s);
    if (p->block_private)
        curl_easy_setopt(c, CURLOPT_PROXY, ""); /* the check must see the real target */
    if (p->post_body) {
        char line[256];
        snprintf(line, sizeof line, "Content-Type: %s",
                 p->content_type ? p->content_type : "application/json");
        *hdrs = curl_slist_append(*hdrs, line);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, p->post_body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(p->post_body));
    }
    if (p->accept) {
        char line[256];
        snprintf(line, sizeof line, "Accept: %s", p->accept);
        *hdrs = curl_slist_append(*hdrs, line);
    }
    if (p->bearer) {
        struct af_buf b;
        af_buf_init(&b, AF_BUF_NOLIMIT);
        (void)af_buf_printf(&b, "Authorization: Bearer %s", p->bearer);
        *hdrs = curl_slist_append(*hdrs, af_buf_str(&b));
        af_buf_deinit(&b);
    }
    if (*hdrs)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
}

/* Maps a failed transfer to an AF_E* code and a message naming the URL. */
static int transfer_error(const struct http_params *p, CURLcode cc, const struct sink *s,
                          long timeout_ms, const char *detail, char *err, size_t errlen)
{
    const char *what = detail && detail[0] ? detail : curl_easy_strerror(cc);
    if (s->blocked[0]) {
        af_errf(err, errlen,
                "%.300s: refused: the host is at %s, a loopback, private or link-local address "
                "(tool option allow_private=1 allows such addresses)",
                p->url, s->blocked);
        return AF_EINVAL;
    }
    if (s->too_big || cc == CURLE_FILESIZE_EXCEEDED) {
        af_errf(err, errlen, "%.300s: response body over the %zu-byte limit; transfer aborted",
                p->url, s->buf.limit);
        return AF_ETOOBIG;
    }
    if (cc == CURLE_OPERATION_TIMEDOUT) {
        af_errf(err, errlen, "%.300s: timed out after %ld ms (%s)", p->url, timeout_ms, what);
        return AF_ETIMEOUT;
    }
    if (cc == CURLE_TOO_MANY_REDIRECTS) {
        af_errf(err, errlen, "%.300s: more than %ld redirects; giving up", p->url,
                p->max_redirects);
        return AF_EIO;
    }
    if (cc == CURLE_UNSUPPORTED_PROTOCOL) {
        af_errf(err, errlen, "%.300s: redirected to a scheme other than http/https (%s)", p->url,
                what);
        return AF_EINVAL;
    }
    af_errf(err, errlen, "%.300s: request failed: %s", p->url, what);
    return AF_EIO;
}

static void fill_response(CURL *c, struct sink *s, struct http_response *resp)
{
    char *ct = NULL, *eff = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff);
    resp->content_type = ct ? af_xstrdup(ct) : NULL;
    resp->final_url = eff ? af_xstrdup(eff) : NULL;
    resp->len = s->buf.len;
    resp->body = af_buf_detach(&s->buf);
}

int http_fetch(const struct http_params *p, struct http_response *resp, char *err, size_t errlen)
{
    if (!http_url_allowed(p->url)) {
        af_errf(err, errlen, "'%.300s': only http:// and https:// URLs are allowed",
                p->url ? p->url : "(null)");
        return AF_EINVAL;
    }
    long timeout_ms = effective_timeout_ms(p);
    if (timeout_ms <= 0) {
        af_errf(err, errlen, "%.300s: the call's deadline passed before the request", p->url);
        return AF_ETIMEOUT;
    }
    pthread_once(&g_http_once, http_init_once);
    CURL *c = g_http_init_rc == CURLE_OK ? curl_easy_init() : NULL;
    if (!c) {
        af_errf(err, errlen, "%.300s: cannot initialise libcurl", p->url);
        return AF_EIO;
    }
    struct sink s = {.too_big = 0, .block_private = p->block_private, .blocked = ""};
    af_buf_init(&s.buf, p->max_bytes ? p->max_bytes : (size_t)5 << 20);
    struct curl_slist *hdrs = NULL;
    char detail[CURL_ERROR_SIZE] = "";
    setup(c, p, timeout_ms, &s, &hdrs);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
    CURLcode cc = curl_easy_perform(c);
    int rc = AF_OK;
    if (cc != CURLE_OK) {
        rc = transfer_error(p, cc, &s, timeout_ms, detail, err, errlen);
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp->status);
        af_buf_deinit(&s.buf);
    } else {
        fill_response(c, &s, resp);
        if (resp->status < 200 || resp->status >= 300) {
            af_errf(err, errlen, "%.300s: HTTP %ld: %.*s", p->url, resp->status, HTTP_SNIPPET,
                    resp->body);
            rc = AF_EBACKEND;
        }
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(c);
    return rc;
}
