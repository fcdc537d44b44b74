/*
 * web_search.c - Web_Search_Tool: a web search through a SearXNG instance's JSON API.
 *
 * GET {search_url}/search?q=QUERY&format=json, then results[] -> {title, url, snippet}, top k.
 * The provider is named by the tool option "search_url" or AGENTFLOW_SEARCH_URL (read when the
 * tool is made). Any failure (no provider, unreachable, HTTP error, malformed JSON) is an
 * AF_ETOOL result {query, error} that says what went wrong; the flow carries on. No LLM.
 */
#include "agentflow/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/http_get.h"

#define SEARCH_K_MAX 20
#define SEARCH_MAX_BYTES ((size_t)8 << 20)

static const struct af_tool_card card = {
    .name = "Web_Search_Tool",
    .description = "Runs a web search and lists the top pages it finds, each with its title, "
                   "address and a short excerpt of its text.",
    .version = "1.0.0",
    .n_params = 2,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "What to search the web for: keywords or a short question."},
               {.name = "k",
                .type = AF_PARAM_INT,
                .required = 0,
                .default_json = "5",
                .description = "How many results to return (1 to 20)."}},
    .output_type = "dict - {query, results: [{title, url, snippet}]}, best first",
    .limitations = "Returns search-engine excerpts, not whole pages or an answer; excerpts can "
                   "be short, stale or misleading. Needs a configured search provider.",
    .best_practices = "Search with distinctive keywords; pass a promising result's url to "
                      "Web_RAG_Search_Tool to read that page.",
    .n_demos = 2,
    .demo_commands = {"execution = tool.execute(query=\"latest stable Linux kernel version\")",
                      "execution = tool.execute(query=\"Ada Lovelace first program\", k=3)"},
    .demo_descriptions = {"Search the web for a current fact.",
                          "Get the three best results for a historical question."},
    .requires_llm = 0,
};

struct web_search {
    char *url; /* NULL when not configured */
    long timeout_ms;
};

static void web_search_free(void *self)
{
    struct web_search *s = self;
    if (!s)
        return;
    free(s->url);
    free(s);
}

static int error_result(json_t **result, const char *query, const char *msg)
{
    *result = json_object();
    json_object_set_new(*result, "query", af_json_text(query));
    json_object_set_new(*result, "error", af_json_text(msg));
    return AF_ETOOL;
}

/* {base}/search?q=...&format=json; base may already end in /search. Owned by the caller. */
static char *search_request_url(const char *base, const char *query)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_append(&b, base, n);
    if (n < 7 || strncmp(base + n - 7, "/search", 7) != 0)
        (void)af_buf_puts(&b, "/search");
    char *q = http_url_escape(query);
    (void)af_buf_printf(&b, "?q=%s&format=json", q);
    free(q);
    return af_buf_detach(&b);
}

/* Turns a SearXNG JSON body into the results array (top k). */
static int parse_results(const char *url, const char *body, size_t len, json_int_t k, json_t **out,
                         char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        af_errf(err, errlen, "%.300s: response is not JSON (offset %d: %s)", url, je.position,
                je.text);
        return AF_EPARSE;
    }
    const json_t *res = json_object_get(root, "results");
    if (!json_is_array(res)) {
        af_errf(err, errlen, "%.300s: response has no 'results' list", url);
        json_decref(root);
        return AF_EPARSE;
    }
    json_t *hits = json_array();
    for (size_t i = 0; i < json_array_size(res) && (json_int_t)json_array_size(hits) < k; i++) {
        const json_t *r = json_array_get(res, i);
        const char *u = af_json_get_str(r, "url");
        if (!u || !u[0])
            continue;
        const char *t = af_json_get_str(r, "title"), *c = af_json_get_str(r, "content");
        json_t *h = json_object();
        json_object_set_new(h, "title", af_json_text(t ? t : ""));
        json_object_set_new(h, "url", af_json_text(u));
        json_object_set_new(h, "snippet", af_json_text(c ? c : ""));
        json_array_append_new(hits, h);
    }
    json_decref(root);
    *out = hits;
    return AF_OK;
}

static int web_search_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                           json_t **result)
{
    struct web_search *s = self;
    const char *query = af_json_get_str(args, "query");
    json_t *kj = json_object_get(args, "k");
    json_int_t k = json_is_integer(kj) ? json_integer_value(kj) : 5;
    char err[1536];
    if (!query || !query[0])
        return error_result(result, query ? query : "",
                            "Web_Search_Tool needs a non-empty "
                            "string 'query'");
    if (k < 1 || k > SEARCH_K_MAX) {
        snprintf(err, sizeof err, "k must be between 1 and %d (got %lld)", SEARCH_K_MAX,
                 (long long)k);
        return error_result(result, query, err);
    }
    if (!s->url)
        return error_result(result, query,
                            "no web search provider configured: point the tool option "
                            "search_url (--tool-opt search_url=URL) or AGENTFLOW_SEARCH_URL at "
                            "a SearXNG instance with the json output format enabled");
    char *url = search_request_url(s->url, query);
    struct http_params p = http_default_params();
    p.url = url;
    p.accept = "application/json";
    p.timeout_ms = s->timeout_ms;
    p.deadline_ms = ctx ? ctx->deadline_ms : 0;
    p.max_bytes = SEARCH_MAX_BYTES;
    struct http_response r;
    http_response_init(&r);
    char why[1024];
    int rc = http_fetch(&p, &r, why, sizeof why);
    json_t *hits = NULL;
    if (rc == AF_OK)
        rc = parse_results(url, r.body, r.len, k, &hits, why, sizeof why);
    if (rc != AF_OK)
        snprintf(err, sizeof err, "web search failed: %s%s", why,
                 r.status == 403 ? " (SearXNG answers 403 when 'json' is missing from "
                                   "search.formats in its settings.yml)"
                                 : "");
    http_response_deinit(&r);
    free(url);
    if (rc != AF_OK)
        return error_result(result, query, err);
    *result = json_object();
    json_object_set_new(*result, "query", af_json_text(query));
    json_object_set_new(*result, "results", hits);
    return AF_OK;
}

struct af_tool *af_tool_web_search_new(const json_t *opts)
{
    struct web_search *s = af_xcalloc(1, sizeof *s);
    const char *url = af_tool_option(opts, "search_url", "AGENTFLOW_SEARCH_URL");
    s->url = url ? af_xstrdup(url) : NULL;
    s->timeout_ms = http_timeout_option(opts, 20000);
    return af_tool_new(&card, web_search_call, s, web_search_free);
}
