/*
 * retrieval_http.h - a client for an HTTP dense-retrieval server speaking the Search-R1 /
 * FlashRAG retriever protocol, the second back-end of Wikipedia_RAG_Search_Tool.
 *
 * Request:  POST URL  {"queries": [QUERY], "topk": K, "return_scores": true}
 * Response: {"result": [[{"document": {"id", "contents"}, "score"}, ...]]}
 * `contents` is "\"Title\"\ntext" (Search-R1): the first line, without its quotes, is the
 * title. Documents with "title"/"text" fields, and result lists of bare documents (servers
 * asked without scores) are accepted too.
 *
 * Thread-safety: safe from any thread.
 */
#ifndef AF_TOOLS_RETRIEVAL_HTTP_H
#define AF_TOOLS_RETRIEVAL_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

/* Asks the server at url for the k best passages for query. timeout_ms bounds the request;
 * deadline_ms (af_clock_ms value, 0 = none) shortens it. On success *hits is a new JSON array
 * (owned by the caller) of {id, title, text, score} in the server's order; score is null when
 * the server sent none. Returns 0, AF_EINVAL (not an http/https URL), AF_EIO / AF_ETIMEOUT
 * (connection), AF_EBACKEND (HTTP error status) or AF_EPARSE (a response not in the protocol);
 * err names the URL. */
AF_NODISCARD int retrieval_http_query(const char *url, const char *query, int k, long timeout_ms,
                                      double deadline_ms, json_t **hits, char *err, size_t errlen);

/* Parses a response body (exposed for tests). Same result and ownership as above; errors are
 * AF_EPARSE with a message naming url and the offending field. */
AF_NODISCARD int retrieval_http_parse(const char *url, const char *body, size_t len, json_t **hits,
                                      char *err, size_t errlen);

#endif
