/*
 * wikipedia.c - Wikipedia_RAG_Search_Tool: BM25 search over an offline passage index built by
 * `agentflow index build` (tools/wiki_index.h), or, when the tool option "wiki_url" (env
 * AGENTFLOW_WIKI_URL) is set, a query to an HTTP dense-retrieval server speaking the Search-R1
 * / FlashRAG protocol (tools/retrieval_http.h); wiki_url wins over wiki_db. No LLM.
 *
 * The index handle is opened lazily on the first call (so a database built after start-up is
 * found) and shared by all calls under one mutex; a failed open is not cached.
 */
#include "agentflow/tools.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/http_get.h"
#include "tools/retrieval_http.h"
#include "tools/wiki_index.h"

#define WIKI_K_MAX 50

static const struct af_tool_card card = {
    .name = "Wikipedia_RAG_Search_Tool",
    .description = "Searches an offline copy of Wikipedia, split into short passages, and "
                   "returns the passages that best match the query (BM25 keyword ranking), each "
                   "with its article title.",
    .version = "1.0.0",
    .n_params = 2,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "Keywords or a short question naming the entity or fact sought."},
               {.name = "k",
                .type = AF_PARAM_INT,
                .required = 0,
                .default_json = "5",
                .description = "How many passages to return (1 to 50)."}},
    .output_type = "dict - {query, results: [{title, text, id, score}]}, best first",
    .limitations = "Keyword matching, not semantic search: synonyms and paraphrases can miss. "
                   "The snapshot is fixed, so recent events are absent. It returns raw passages, "
                   "not an answer.",
    .best_practices = "Use distinctive names and terms (people, places, titles, dates) rather "
                      "than whole sentences; read several passages and search again with "
                      "different keywords when the first results miss.",
    .n_demos = 2,
    .demo_commands = {"execution = tool.execute(query=\"Marie Curie Nobel Prize chemistry\")",
                      "execution = tool.execute(query=\"capital of Australia\", k=3)"},
    .demo_descriptions = {"Find passages about a person and an award.",
                          "Fetch the three best passages for a short factual question."},
    .requires_llm = 0,
};

/* The same tool when a retrieval server answers (wiki_url): only the wording differs. */
static const struct af_tool_card card_http = {
    .name = "Wikipedia_RAG_Search_Tool",
    .description = "Searches a copy of Wikipedia, split into short passages, through a "
                   "retrieval server and returns the passages closest in meaning to the query, "
                   "each with its article title.",
    .version = "1.0.0",
    .n_params = 2,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "A short question or keywords naming the entity or fact sought."},
               {.name = "k",
                .type = AF_PARAM_INT,
                .required = 0,
                .default_json = "5",
                .description = "How many passages to return (1 to 50)."}},
    .output_type = "dict - {query, results: [{title, text, id, score}]}, best first",
    .limitations = "The snapshot is fixed, so recent events are absent. It returns raw passages, "
                   "not an answer, and close matches in meaning can still be about the wrong "
                   "entity.",
    .best_practices = "Ask about one entity or fact at a time; read several passages and "
                      "rephrase the query when the first results miss.",
    .n_demos = 2,
    .demo_commands = {"execution = tool.execute(query=\"Which prizes did Marie Curie win?\")",
                      "execution = tool.execute(query=\"capital of Australia\", k=3)"},
    .demo_descriptions = {"Find passages about a person and her awards.",
                          "Fetch the three best passages for a short factual question."},
    .requires_llm = 0,
};

struct wikipedia {
    char *db_path;  /* NULL when not configured */
    char *wiki_url; /* retrieval server; NULL when not configured */
    long timeout_ms;
    pthread_mutex_t mu;
    struct wiki_index *ix; /* guarded by mu */
};

static void wikipedia_free(void *self)
{
    struct wikipedia *w = self;
    if (!w)
        return;
    wiki_index_close(w->ix);
    pthread_mutex_destroy(&w->mu);
    free(w->db_path);
    free(w->wiki_url);
    free(w);
}

static int error_result(json_t **result, const char *query, const char *msg)
{
    *result = json_object();
    json_object_set_new(*result, "query", af_json_text(query));
    json_object_set_new(*result, "error", af_json_text(msg));
    return AF_ETOOL;
}

/* The HTTP retrieval back-end: same result shape as the index. */
static int wikipedia_http(const struct wikipedia *w, const char *query, int k,
                          const struct af_tool_ctx *ctx, json_t **result)
{
    char err[1536];
    json_t *hits = NULL;
    int rc = retrieval_http_query(w->wiki_url, query, k, w->timeout_ms, ctx ? ctx->deadline_ms : 0,
                                  &hits, err, sizeof err);
    if (rc != AF_OK)
        return error_result(result, query, err);
    *result = json_object();
    json_object_set_new(*result, "query", af_json_text(query));
    json_object_set_new(*result, "results", hits);
    return AF_OK;
}

static int wikipedia_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                          json_t **result)
{
    struct wikipedia *w = self;
    const char *query = af_json_get_str(args, "query");
    json_t *kj = json_object_get(args, "k");
    json_int_t k = json_is_integer(kj) ? json_integer_value(kj) : 5;
    char err[1024];
    if (!query)
        return error_result(result, "", "Wikipedia_RAG_Search_Tool needs a string 'query'");
    if (k < 1 || k > WIKI_K_MAX) {
        snprintf(err, sizeof err, "k must be between 1 and %d (got %lld)", WIKI_K_MAX,
                 (long long)k);
        return error_result(result, query, err);
    }
    if (w->wiki_url)
        return wikipedia_http(w, query, (int)k, ctx, result);
    if (!w->db_path)
        return error_result(result, query,
                            "no Wikipedia index configured: build one with `agentflow index "
                            "build --input FILE --out DB` and pass --wiki-db DB or set "
                            "AGENTFLOW_WIKI_DB");
    json_t *hits = NULL;
    int rc = AF_OK;
    pthread_mutex_lock(&w->mu);
    if (!w->ix)
        rc = wiki_index_open(w->db_path, 0, &w->ix, err, sizeof err);
    if (rc == AF_OK)
        rc = wiki_index_query(w->ix, query, (int)k, &hits, err, sizeof err);
    pthread_mutex_unlock(&w->mu);
    if (rc != AF_OK)
        return error_result(result, query, err);
    *result = json_object();
    json_object_set_new(*result, "query", af_json_text(query));
    json_object_set_new(*result, "results", hits);
    return AF_OK;
}

struct af_tool *af_tool_wikipedia_new(const json_t *opts)
{
    struct wikipedia *w = af_xcalloc(1, sizeof *w);
    const char *db_path = af_tool_option(opts, "wiki_db", "AGENTFLOW_WIKI_DB");
    const char *wiki_url = af_tool_option(opts, "wiki_url", "AGENTFLOW_WIKI_URL");
    w->db_path = db_path ? af_xstrdup(db_path) : NULL;
    w->wiki_url = wiki_url ? af_xstrdup(wiki_url) : NULL;
    w->timeout_ms = http_timeout_option(opts, 20000);
    pthread_mutex_init(&w->mu, NULL);
    return af_tool_new(w->wiki_url ? &card_http : &card, wikipedia_call, w, wikipedia_free);
}
