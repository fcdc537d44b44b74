/*
 * http_get.h - a small libcurl GET/POST helper for the network tools (web search, web RAG,
 * the HTTP retrieval back-end of the Wikipedia tool, embeddings).
 *
 * Only http:// and https:// URLs are accepted, on the first request and on every redirect.
 * Redirects are followed up to a limit, the whole transfer has a timeout, and the body is
 * capped: a longer body aborts the transfer with AF_ETOOBIG. Error messages name the URL.
 *
 * Thread-safety: every function is safe from any thread (each call uses its own curl handle;
 * curl_global_init runs once under pthread_once).
 */
#ifndef AF_TOOLS_HTTP_GET_H
#define AF_TOOLS_HTTP_GET_H

#include <jansson.h>
#include <stddef.h>
#include <sys/socket.h>

#include "agentflow/err.h"

#define HTTP_USER_AGENT "agentflow/1.0 (+https://github.com/lupantech/AgentFlow port)"

struct http_params {
    const char *url;          /* borrowed; http:// or https:// only */
    const char *post_body;    /* NULL = GET; else POST this body (borrowed) */
    const char *content_type; /* of post_body; default "application/json" */
    const char *bearer;       /* NULL = no Authorization header */
    const char *accept;       /* Accept header; NULL = curl's default */
    long timeout_ms;          /* whole transfer; default 20000 */
    long connect_timeout_ms;  /* default 10000 (capped by timeout_ms) */
    long max_redirects;       /* default 5; 0 = do not follow */
    size_t max_bytes;         /* body cap; default 5 MiB */
    double deadline_ms;       /* af_clock_ms() value to stop at; 0 = none (shortens timeout) */
    int block_private;        /* refuse to connect to loopback, private, link-local and other
                                 non-public addresses (checked on the resolved address of every
                                 connection, redirects included; proxies are then not used);
                                 for URLs a model chose. Default 0 */
};

struct http_params http_default_params(void);

struct http_response {
    long status;        /* last HTTP status, 0 when none */
    char *body;         /* NUL-terminated; owned; "" when empty */
    size_t len;         /* body bytes */
    char *content_type; /* Content-Type header of the final response or NULL; owned */
    char *final_url;    /* URL after redirects; owned */
};

void http_response_init(struct http_response *r);
void http_response_deinit(struct http_response *r);

/* 1 when the socket address (struct sockaddr_in or sockaddr_in6) is not a public unicast
 * address: loopback, RFC 1918 and unique-local, link-local, CGNAT, unspecified, multicast,
 * reserved, and IPv4 ones mapped into IPv6 or NAT64; else 0. */
int http_addr_private(const struct sockaddr *sa);

/* Returns 1 when url starts with http:// or https:// (case-insensitive), else 0. */
int http_url_allowed(const char *url);

/* Performs the request and fills *resp (initialised by the caller; deinit it in every case).
 * Returns 0 for a 2xx answer; AF_EINVAL (not an http/https URL), AF_ETIMEOUT, AF_ETOOBIG
 * (body over max_bytes), AF_EINVAL also when block_private refused a non-public address
 * the host resolved to, AF_EIO (connection refused, DNS, too many redirects, TLS, ...), or
 * AF_EBACKEND (HTTP status >= 300 after redirects; resp->status and body are kept). err gets
 * a message that names the URL. */
AF_NODISCARD int http_fetch(const struct http_params *p, struct http_response *resp, char *err,
                            size_t errlen);

/* The "web_timeout_s" tool option (a number or a numeric string; env AGENTFLOW_WEB_TIMEOUT_S)
 * in milliseconds, or dflt_ms when unset or not a positive number. opts may be NULL. */
long http_timeout_option(const json_t *opts, long dflt_ms);

/* Percent-encodes s for a query string (RFC 3986 unreserved characters kept). Owned by the
 * caller: free(). */
char *http_url_escape(const char *s);

#endif
