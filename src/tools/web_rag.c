/*
 * web_rag.c - Web_RAG_Search_Tool: answers a query from one web page.
 *
 * The page is fetched over http/https only (tools/http_get.h: 5 redirects, a timeout, a 5 MiB
 * body cap), turned into text (tools/html_text.h; text/plain is used as is), cut into chunks
 * of 200 words overlapping by 20, and the chunks are ranked against the query: by BM25 in an
 * in-memory SQLite FTS5 table, or, when an embeddings endpoint is configured, by the cosine
 * similarity of OpenAI-compatible embeddings (falling back to BM25, with a warning, when that
 * endpoint fails). BM25 sees the whole page; embeddings only its first 1000 chunks. The 10 best
 * chunks go to the tool's LLM, which writes the answer.
 *
 * Result: {query, url, answer, ranking: "bm25"|"embeddings", chunks: [{rank, score, text}]}.
 * Without an LLM the chunks still come back, with an error saying none is configured (AF_ETOOL).
 */
#include "agentflow/tools.h"

#include <ctype.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/html_text.h"
#include "tools/http_get.h"
#include "tools/wiki_index.h"

#define RAG_CHUNK_WORDS 200
#define RAG_OVERLAP_WORDS 20
#define RAG_TOP_K 10
#define RAG_EMBED_MAX_CHUNKS 1000 /* about the first 1,000,000 characters of a page */
#define RAG_MAX_PAGE ((size_t)5 << 20)
#define RAG_EMBED_BATCH 64
#define RAG_EMBED_MAX_BYTES ((size_t)64 << 20)
#define RAG_QUERY_TERMS 64

static const struct af_tool_card card = {
    .name = "Web_RAG_Search_Tool",
    .description = "Reads one web page given by its URL, picks out the passages most relevant "
                   "to a question, and answers the question from those passages only.",
    .version = "1.0.0",
    .n_params = 2,
    .params = {{.name = "query",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "The question to answer from the page."},
               {.name = "url",
                .type = AF_PARAM_STR,
                .required = 1,
                .description = "The http:// or https:// address of the page to read."}},
    .output_type = "dict - {query, url, answer, chunks: [{rank, score, text}]}: the answer and "
                   "the page passages it was based on",
    .limitations = "Reads a single page and only its text (no PDFs, images or pages built by "
                   "scripts); the answer is only as good as the page. It cannot search: it needs "
                   "a real URL.",
    .best_practices = "Use it after a search tool has produced a promising URL; ask a focused "
                      "question and check the returned passages.",
    .n_demos = 2,
    .demo_commands = {"execution = tool.execute(query=\"What is the population of Paris?\", "
                      "url=\"https://en.wikipedia.org/wiki/Paris\")",
                      "execution = tool.execute(query=\"Which Python version is the latest?\", "
                      "url=\"https://www.python.org/downloads/\")"},
    .demo_descriptions = {"Answer a factual question from an encyclopedia page.",
                          "Read a project's download page for its current release."},
    .requires_llm = 1,
};

struct web_rag {
    char *embed_url;   /* NULL = BM25 */
    char *embed_model; /* never NULL */
    char *embed_key;   /* NULL = no Authorization header */
    long timeout_ms;
    int allow_private; /* tool option allow_private=1: pages on non-public addresses too */
};

struct scored {
    size_t idx;
    double score;
};

static void web_rag_free(void *self)
{
    struct web_rag *w = self;
    if (!w)
        return;
    free(w->embed_url);
    free(w->embed_model);
    free(w->embed_key);
    free(w);
}

/* --- page text -------------------------------------------------------------------------- */

enum page_kind { PAGE_HTML, PAGE_TEXT, PAGE_OTHER };

static enum page_kind page_kind_of(const char *ct, const char *body, size_t len)
{
    if (ct &&
        (strncasecmp(ct, "text/html", 9) == 0 || strncasecmp(ct, "application/xhtml", 17) == 0 ||
         strncasecmp(ct, "text/xml", 8) == 0 || strncasecmp(ct, "application/xml", 15) == 0))
        return PAGE_HTML;
    if (ct && (strncasecmp(ct, "text/", 5) == 0 || strncasecmp(ct, "application/json", 16) == 0))
        return PAGE_TEXT;
    if (ct && ct[0] && strncasecmp(ct, "application/octet-stream", 24) != 0)
        return PAGE_OTHER;
    size_t i = 0;
    while (i < len && isspace((unsigned char)body[i]))
        i++;
    if (i < len && body[i] == '<')
        return PAGE_HTML;
    return html_utf8_valid(body, len) ? PAGE_TEXT : PAGE_OTHER;
}

/* The charset parameter of a Content-Type, copied into out ("" when none). */
static void charset_of(const char *ct, char *out, size_t outlen)
{
    out[0] = '\0';
    const char *p = ct ? strcasestr(ct, "charset=") : NULL;
    if (!p)
        return;
    p += 8;
    if (*p == '"' || *p == '\'')
        p++;
    size_t n = 0;
    while (p[n] && p[n] != '"' && p[n] != '\'' && p[n] != ';' && !isspace((unsigned char)p[n]))
        n++;
    snprintf(out, outlen, "%.*s", (int)n, p);
}

/* The text of a fetched page. *text is owned by the caller. */
static int page_text(const struct http_response *r, const char *url, char **text, char *err,
                     size_t errlen)
{
    *text = NULL;
    enum page_kind kind = page_kind_of(r->content_type, r->body, r->len);
    if (kind == PAGE_OTHER) {
        af_errf(err, errlen, "%.300s: content type '%s' is not HTML or text", url,
                r->content_type ? r->content_type : "unknown");
        return AF_EINVAL;
    }
    if (kind == PAGE_TEXT) {
        *text = af_xstrndup(r->body, r->len);
    } else {
        char cs[64], why[512];
        charset_of(r->content_type, cs, sizeof cs);
        if (html_to_text(r->body, r->len, cs, text, why, sizeof why) != AF_OK) {
            af_errf(err, errlen, "%.300s: %s", url, why);
            return AF_EPARSE;
        }
    }
    return AF_OK;
}

/* --- ranking: BM25 over an in-memory FTS5 table ---------------------------------------- */

static int fts_fill(sqlite3 *db, const json_t *chunks, char *err, size_t errlen)
{
    sqlite3_stmt *ins = NULL;
    if (sqlite3_exec(db,
                     "CREATE VIRTUAL TABLE c USING fts5(text, tokenize='unicode61 "
                     "remove_diacritics 2'); BEGIN",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO c(rowid, text) VALUES (?1, ?2)", -1, &ins, NULL) !=
            SQLITE_OK) {
        af_errf(err, errlen, "in-memory FTS5 table: %s", sqlite3_errmsg(db));
        return AF_EIO;
    }
    int rc = AF_OK;
    for (size_t i = 0; i < json_array_size(chunks) && rc == AF_OK; i++) {
        sqlite3_bind_int64(ins, 1, (sqlite3_int64)i);
        sqlite3_bind_text(ins, 2, json_string_value(json_array_get(chunks, i)), -1, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE) {
            af_errf(err, errlen, "in-memory FTS5 insert: %s", sqlite3_errmsg(db));
            rc = AF_EIO;
        }
        sqlite3_reset(ins);
    }
    sqlite3_finalize(ins);
    if (rc == AF_OK && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        af_errf(err, errlen, "in-memory FTS5 commit: %s", sqlite3_errmsg(db));
        rc = AF_EIO;
    }
    return rc;
}

static int fts_search(sqlite3 *db, const char *query, struct scored *out, size_t *n_out, char *err,
                      size_t errlen)
{
    char *match = wiki_fts_query(query, RAG_QUERY_TERMS);
    sqlite3_stmt *q = NULL;
    int rc = AF_OK;
    *n_out = 0;
    if (!match[0])
        goto out;
    if (sqlite3_prepare_v2(db,
                           "SELECT rowid, bm25(c) FROM c WHERE c MATCH ?1 ORDER BY bm25(c), "
                           "rowid LIMIT ?2",
                           -1, &q, NULL) != SQLITE_OK) {
        af_errf(err, errlen, "in-memory FTS5 query: %s", sqlite3_errmsg(db));
        rc = AF_EIO;
        goto out;
    }
    sqlite3_bind_text(q, 1, match, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, RAG_TOP_K);
    int src;
    while ((src = sqlite3_step(q)) == SQLITE_ROW && *n_out < RAG_TOP_K) {
        out[*n_out].idx = (size_t)sqlite3_column_int64(q, 0);
        out[*n_out].score = -sqlite3_column_double(q, 1);
        (*n_out)++;
    }
    if (src != SQLITE_DONE && src != SQLITE_ROW) {
        af_errf(err, errlen, "in-memory FTS5 query: %s", sqlite3_errmsg(db));
        rc = AF_EIO;
    }
out:
    sqlite3_finalize(q);
    free(match);
    return rc;
}

/* The best RAG_TOP_K chunks by BM25; when fewer match, the first unmatched chunks in page
 * order follow with score 0 so the model still sees the page. *n_out <= RAG_TOP_K. */
static int rank_bm25(const json_t *chunks, const char *query, struct scored *out, size_t *n_out,
                     char *err, size_t errlen)
{
    sqlite3 *db = NULL;
    *n_out = 0;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        af_errf(err, errlen, "cannot open an in-memory SQLite database");
        sqlite3_close(db);
        return AF_EIO;
    }
    int rc = fts_fill(db, chunks, err, errlen);
    if (rc == AF_OK)
        rc = fts_search(db, query, out, n_out, err, errlen);
    sqlite3_close(db);
    for (size_t i = 0; rc == AF_OK && i < json_array_size(chunks) && *n_out < RAG_TOP_K; i++) {
        int seen = 0;
        for (size_t j = 0; j < *n_out && !seen; j++)
            seen = out[j].idx == i;
        if (!seen)
            out[(*n_out)++] = (struct scored){.idx = i, .score = 0.0};
    }
    return rc;
}

/* --- ranking: cosine similarity of embeddings ------------------------------------------- */

struct embed_state {
    double *qvec; /* the query's embedding (input 0); owned */
    size_t dim;
    struct scored *all; /* one per chunk; owned */
};

static double cosine(const double *a, const json_t *b, size_t dim)
{
    double dot = 0, na = 0, nb = 0;
    for (size_t i = 0; i < dim; i++) {
        double y = json_number_value(json_array_get(b, i));
        dot += a[i] * y;
        na += a[i] * a[i];
        nb += y * y;
    }
    return na > 0 && nb > 0 ? dot / (sqrt(na) * sqrt(nb)) : 0.0;
}

/* Handles one embedding of input number `input` (0 = the query, i+1 = chunk i). */
static int take_embedding(struct embed_state *st, size_t input, const json_t *vec, const char *url,
                          char *err, size_t errlen)
{
    size_t dim = json_array_size(vec);
    if (!json_is_array(vec) || dim == 0 || (st->qvec && dim != st->dim)) {
        af_errf(err, errlen, "%.300s: embedding of input %zu is missing or has %zu dimensions", url,
                input, dim);
        return AF_EPARSE;
    }
    if (input == 0) {
        st->dim = dim;
        st->qvec = af_xmalloc(dim * sizeof *st->qvec);
        for (size_t i = 0; i < dim; i++)
            st->qvec[i] = json_number_value(json_array_get(vec, i));
        return AF_OK;
    }
    if (!st->qvec) {
        af_errf(err, errlen, "%.300s: no embedding for the query (index 0)", url);
        return AF_EPARSE;
    }
    st->all[input - 1].idx = input - 1;
    st->all[input - 1].score = cosine(st->qvec, vec, dim);
    return AF_OK;
}

/* Parses one /embeddings answer for inputs first .. first+n-1. The API may reorder the data
 * list, so entries are placed by their "index" (else by position) before use. */
static int parse_embeddings(struct embed_state *st, const char *url, const char *body, size_t len,
                            size_t first, size_t n, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    const json_t *data = json_object_get(root, "data");
    if (!json_is_array(data) || json_array_size(data) != n) {
        af_errf(err, errlen, "%.300s: expected a 'data' list of %zu embeddings%s%s", url, n,
                root ? "" : "; not JSON: ", root ? "" : je.text);
        json_decref(root);
        return AF_EPARSE;
    }
    const json_t **at = af_xcalloc(n, sizeof *at);
    int rc = AF_OK;
    for (size_t i = 0; i < n && rc == AF_OK; i++) {
        const json_t *d = json_array_get(data, i);
        const json_t *ix = json_object_get(d, "index");
        json_int_t k = json_is_integer(ix) ? json_integer_value(ix) : (json_int_t)i;
        if (k < 0 || (size_t)k >= n || at[k]) {
            af_errf(err, errlen, "%.300s: embedding index %lld is out of range or repeated", url,
                    (long long)k);
            rc = AF_EPARSE;
        } else {
            at[k] = d;
        }
    }
    for (size_t i = 0; i < n && rc == AF_OK; i++)
        rc = take_embedding(st, first + i, json_object_get(at[i], "embedding"), url, err, errlen);
    free(at);
    json_decref(root);
    return rc;
}

/* {base}/embeddings, unless base already ends with it. Owned by the caller. */
static char *embed_endpoint(const char *base)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_append(&b, base, n);
    if (n < 11 || strncmp(base + n - 11, "/embeddings", 11) != 0)
        (void)af_buf_puts(&b, "/embeddings");
    return af_buf_detach(&b);
}

/* One POST for inputs first .. first+n-1 (0 = the query, i+1 = chunk i). */
static int embed_batch(const struct web_rag *w, const char *url, struct embed_state *st,
                       const json_t *chunks, const char *query, size_t first, size_t n,
                       double deadline_ms, char *err, size_t errlen)
{
    json_t *inputs = json_array();
    for (size_t i = first; i < first + n; i++)
        json_array_append_new(inputs, i == 0 ? af_json_text(query)
                                             : json_copy(json_array_get(chunks, i - 1)));
    json_t *req = json_pack("{s:s, s:o}", "model", w->embed_model, "input", inputs);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body)
        abort(); /* only out of memory */
    struct http_params p = http_default_params();
    p.url = url;
    p.post_body = body;
    p.bearer = w->embed_key;
    p.accept = "application/json";
    p.timeout_ms = w->timeout_ms;
    p.deadline_ms = deadline_ms;
    p.max_bytes = RAG_EMBED_MAX_BYTES;
    p.max_redirects = 0;
    struct http_response r;
    http_response_init(&r);
    int rc = http_fetch(&p, &r, err, errlen);
    free(body);
    if (rc == AF_OK)
        rc = parse_embeddings(st, url, r.body, r.len, first, n, err, errlen);
    http_response_deinit(&r);
    return rc;
}

static int by_score_desc(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int rank_embed(const struct web_rag *w, const json_t *chunks, const char *query,
                      double deadline_ms, struct scored *out, size_t *n_out, char *err,
                      size_t errlen)
{
    size_t n_chunks = json_array_size(chunks);
    if (n_chunks > RAG_EMBED_MAX_CHUNKS)
        n_chunks = RAG_EMBED_MAX_CHUNKS; /* bounds the cost; later chunks are not ranked */
    size_t total = n_chunks + 1;
    struct embed_state st = {.qvec = NULL, .dim = 0};
    st.all = af_xcalloc(n_chunks, sizeof *st.all);
    char *url = embed_endpoint(w->embed_url);
    int rc = AF_OK;
    for (size_t first = 0; first < total && rc == AF_OK; first += RAG_EMBED_BATCH) {
        size_t n = total - first < RAG_EMBED_BATCH ? total - first : RAG_EMBED_BATCH;
        rc = embed_batch(w, url, &st, chunks, query, first, n, deadline_ms, err, errlen);
    }
    *n_out = 0;
    if (rc == AF_OK) {
        qsort(st.all, n_chunks, sizeof *st.all, by_score_desc);
        *n_out = n_chunks < RAG_TOP_K ? n_chunks : RAG_TOP_K;
        memcpy(out, st.all, *n_out * sizeof *out);
    }
    free(url);
    free(st.qvec);
    free(st.all);
    return rc;
}

/* --- the answer ------------------------------------------------------------------------- */

static char *summary_prompt(const char *query, const char *url, const json_t *top)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&b,
                        "Below are passages taken from the web page %s, most relevant first. "
                        "Answer the question using only what these passages say. Write one "
                        "short paragraph. If the passages do not contain the answer, say that "
                        "the page does not answer it.\n\nQuestion: %s\n\nPassages:\n",
                        url, query);
    for (size_t i = 0; i < json_array_size(top); i++)
        (void)af_buf_printf(&b, "\nChunk [%zu]\n%s\n", i + 1,
                            af_json_get_str(json_array_get(top, i), "text"));
    (void)af_buf_puts(&b, "\nAnswer:");
    return af_buf_detach(&b);
}

/* Asks the LLM; on success *answer is owned by the caller. */
static int summarise(const struct af_tool_ctx *ctx, const char *query, const char *url,
                     const json_t *top, char **answer, char *err, size_t errlen)
{
    char *prompt = summary_prompt(query, url, top);
    struct af_msg msg = {.role = "user", .content = prompt};
    struct af_llm_request req = {.msgs = &msg, .n_msgs = 1, .model = ctx->model};
    req.sampling = ctx->sampling ? *ctx->sampling : af_llm_default_sampling();
    req.sampling.temperature = 0.0;
    struct af_llm_reply reply;
    af_llm_reply_init(&reply);
    int rc = af_tool_ctx_chat(ctx, &req, &reply);
    if (rc == AF_OK)
        *answer = af_xstrdup(reply.text ? reply.text : "");
    else
        af_errf(err, errlen, "LLM call failed: %s", reply.errmsg ? reply.errmsg : af_strerror(rc));
    af_llm_reply_deinit(&reply);
    free(prompt);
    return rc;
}

/* --- the call --------------------------------------------------------------------------- */

static json_t *base_result(const char *query, const char *url)
{
    json_t *r = json_object();
    json_object_set_new(r, "query", af_json_text(query));
    json_object_set_new(r, "url", af_json_text(url));
    return r;
}

static int fail(json_t **result, json_t *r, const char *msg)
{
    json_object_set_new(r, "error", af_json_text(msg));
    *result = r;
    return AF_ETOOL;
}

/* The URL to fetch: an arXiv PDF link becomes its abstract page (text, not PDF), as in the
 * reference tool. Owned by the caller. */
static char *page_url(const char *url)
{
    const char *p = strstr(url, "arxiv.org/pdf/");
    if (!p)
        return af_xstrdup(url);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_append(&b, url, (size_t)(p - url));
    (void)af_buf_printf(&b, "arxiv.org/abs/%s", p + strlen("arxiv.org/pdf/"));
    char *out = af_buf_detach(&b);
    size_t n = strlen(out);
    if (n > 4 && strcmp(out + n - 4, ".pdf") == 0)
        out[n - 4] = '\0';
    return out;
}

/* Fetches url and returns its chunks (a new array) or NULL with a message in err. */
static json_t *fetch_chunks(const struct web_rag *w, const char *url, double deadline_ms, char *err,
                            size_t errlen)
{
    struct http_params p = http_default_params();
    p.url = url;
    p.accept = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5";
    p.timeout_ms = w->timeout_ms;
    p.deadline_ms = deadline_ms;
    p.max_bytes = RAG_MAX_PAGE;
    p.max_redirects = 5;
    p.block_private = !w->allow_private; /* the model chose this URL */
    struct http_response r;
    http_response_init(&r);
    char why[1024];
    char *text = NULL;
    int rc = http_fetch(&p, &r, why, sizeof why);
    if (rc == AF_OK)
        rc = page_text(&r, url, &text, why, sizeof why);
    http_response_deinit(&r);
    if (rc != AF_OK) {
        af_errf(err, errlen, "could not read the page: %s", why);
        return NULL;
    }
    json_t *chunks = text_chunk_words(text, RAG_CHUNK_WORDS, RAG_OVERLAP_WORDS);
    free(text);
    if (json_array_size(chunks) == 0) {
        af_errf(err, errlen, "%.300s: the page has no readable text", url);
        json_decref(chunks);
        return NULL;
    }
    return chunks;
}

/* Ranks chunks; returns the top list [{rank, score, text}] and sets *ranking. */
static json_t *rank_chunks(const struct web_rag *w, const json_t *chunks, const char *query,
                           double deadline_ms, json_t *r, char *err, size_t errlen)
{
    struct scored top[RAG_TOP_K];
    size_t n = 0;
    const char *ranking = "bm25";
    int rc = AF_ENOTFOUND;
    if (w->embed_url) {
        char why[1024];
        rc = rank_embed(w, chunks, query, deadline_ms, top, &n, why, sizeof why);
        if (rc == AF_OK) {
            ranking = "embeddings";
        } else {
            char warn[1200];
            snprintf(warn, sizeof warn, "embeddings failed, ranked by BM25 instead: %s", why);
            json_object_set_new(r, "warning", af_json_text(warn));
        }
    }
    if (rc != AF_OK && rank_bm25(chunks, query, top, &n, err, errlen) != AF_OK)
        return NULL;
    json_object_set_new(r, "ranking", json_string(ranking));
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(out,
                              json_pack("{s:I, s:f, s:O}", "rank", (json_int_t)(i + 1), "score",
                                        top[i].score, "text", json_array_get(chunks, top[i].idx)));
    return out;
}

static int web_rag_call(void *self, const json_t *args, const struct af_tool_ctx *ctx,
                        json_t **result)
{
    const struct web_rag *w = self;
    const char *query = af_json_get_str(args, "query");
    const char *url = af_json_get_str(args, "url");
    json_t *r = base_result(query ? query : "", url ? url : "");
    char err[1536];
    if (!query || !query[0] || !url || !url[0])
        return fail(result, r, "Web_RAG_Search_Tool needs non-empty strings 'query' and 'url'");
    if (!http_url_allowed(url)) {
        snprintf(err, sizeof err, "'%.300s' is not an http:// or https:// URL", url);
        return fail(result, r, err);
    }
    double deadline_ms = ctx ? ctx->deadline_ms : 0;
    char *fetch_url = page_url(url);
    json_t *chunks = fetch_chunks(w, fetch_url, deadline_ms, err, sizeof err);
    free(fetch_url);
    if (!chunks)
        return fail(result, r, err);
    json_t *top = rank_chunks(w, chunks, query, deadline_ms, r, err, sizeof err);
    json_decref(chunks);
    if (!top)
        return fail(result, r, err);
    json_object_set_new(r, "chunks", top);
    if (!ctx || !ctx->llm)
        return fail(result, r,
                    "no LLM is configured for Web_RAG_Search_Tool, so no answer was written; "
                    "the best passages are in 'chunks'");
    char *answer = NULL;
    if (summarise(ctx, query, url, top, &answer, err, sizeof err) != AF_OK)
        return fail(result, r, err);
    json_object_set_new(r, "answer", af_json_text(answer));
    free(answer);
    *result = r;
    return AF_OK;
}

struct af_tool *af_tool_web_rag_new(const json_t *opts)
{
    struct web_rag *w = af_xcalloc(1, sizeof *w);
    const char *eu = af_tool_option(opts, "embed_url", "AGENTFLOW_EMBED_URL");
    const char *em = af_tool_option(opts, "embed_model", "AGENTFLOW_EMBED_MODEL");
    const char *ek = af_tool_option(opts, "embed_api_key", "AGENTFLOW_EMBED_API_KEY");
    w->embed_url = eu ? af_xstrdup(eu) : NULL;
    w->embed_model = af_xstrdup(em ? em : "text-embedding-3-small");
    w->embed_key = ek ? af_xstrdup(ek) : NULL;
    w->timeout_ms = http_timeout_option(opts, 20000);
    const char *ap = af_tool_option(opts, "allow_private", "AGENTFLOW_ALLOW_PRIVATE");
    w->allow_private = ap && !strcmp(ap, "1");
    return af_tool_new(&card, web_rag_call, w, web_rag_free);
}
