/*
 * retrieval_http.c - the Search-R1 / FlashRAG retriever protocol client (retrieval_http.h).
 */
#include "tools/retrieval_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errf.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "tools/http_get.h"

#define RETRIEVAL_MAX_BYTES ((size_t)32 << 20)

/* Splits Search-R1 `contents` ("\"Title\"\ntext") into title and text. */
static void split_contents(const char *contents, json_t *hit)
{
    const char *nl = strchr(contents, '\n');
    if (!nl) {
        json_object_set_new(hit, "title", json_string(""));
        json_object_set_new(hit, "text", af_json_text(contents));
        return;
    }
    const char *t = contents, *te = nl;
    while (te > t && (te[-1] == '\r' || te[-1] == ' '))
        te--;
    if (te - t >= 2 && t[0] == '"' && te[-1] == '"') {
        t++;
        te--;
    }
    json_object_set_new(hit, "title", af_json_textn(t, (size_t)(te - t)));
    json_object_set_new(hit, "text", af_json_text(nl + 1));
}

static json_t *id_value(const json_t *doc)
{
    const json_t *id = json_object_get(doc, "id");
    if (json_is_string(id))
        return af_json_text(json_string_value(id));
    if (json_is_integer(id)) {
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)json_integer_value(id));
        return json_string(s);
    }
    return json_string("");
}

/* One entry of result[0]: {"document": {...}, "score": x} or a bare document. */
static int parse_item(const char *url, const json_t *item, size_t i, json_t *hits, char *err,
                      size_t errlen)
{
    const json_t *doc = json_object_get(item, "document");
    const json_t *score = json_object_get(item, "score");
    if (!doc)
        doc = item;
    if (!json_is_object(doc)) {
        af_errf(err, errlen, "%.300s: result[0][%zu] is not a document object", url, i);
        return AF_EPARSE;
    }
    const char *contents = af_json_get_str(doc, "contents");
    const char *text = af_json_get_str(doc, "text");
    if (!contents && !text) {
        af_errf(err, errlen, "%.300s: result[0][%zu] has neither 'contents' nor 'text'", url, i);
        return AF_EPARSE;
    }
    json_t *hit = json_object();
    json_object_set_new(hit, "id", id_value(doc));
    if (text) {
        const char *title = af_json_get_str(doc, "title");
        json_object_set_new(hit, "title", af_json_text(title ? title : ""));
        json_object_set_new(hit, "text", af_json_text(text));
    } else {
        split_contents(contents, hit);
    }
    json_object_set_new(hit, "score",
                        json_is_number(score) ? json_real(json_number_value(score)) : json_null());
    json_array_append_new(hits, hit);
    return AF_OK;
}

int retrieval_http_parse(const char *url, const char *body, size_t len, json_t **hits, char *err,
                         size_t errlen)
{
    *hits = NULL;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        af_errf(err, errlen, "%.300s: response is not JSON (offset %d: %s)", url, je.position,
                je.text);
        return AF_EPARSE;
    }
    const json_t *res = json_object_get(root, "result");
    const json_t *first = json_array_get(res, 0);
    if (!json_is_array(res) || (json_array_size(res) > 0 && !json_is_array(first))) {
        af_errf(err, errlen, "%.300s: response has no 'result' list of lists", url);
        json_decref(root);
        return AF_EPARSE;
    }
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(first); i++) {
        int rc = parse_item(url, json_array_get(first, i), i, out, err, errlen);
        if (rc) {
            json_decref(out);
            json_decref(root);
            return rc;
        }
    }
    json_decref(root);
    *hits = out;
    return AF_OK;
}

int retrieval_http_query(const char *url, const char *query, int k, long timeout_ms,
                         double deadline_ms, json_t **hits, char *err, size_t errlen)
{
    *hits = NULL;
    json_t *req = json_object();
    json_t *qs = json_array();
    json_array_append_new(qs, af_json_text(query));
    json_object_set_new(req, "queries", qs);
    json_object_set_new(req, "topk", json_integer(k));
    json_object_set_new(req, "return_scores", json_true());
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!body)
        abort(); /* only out of memory */
    struct http_params p = http_default_params();
    p.url = url;
    p.post_body = body;
    p.accept = "application/json";
    p.timeout_ms = timeout_ms;
    p.deadline_ms = deadline_ms;
    p.max_bytes = RETRIEVAL_MAX_BYTES;
    p.max_redirects = 0;
    struct http_response r;
    http_response_init(&r);
    char why[1024];
    int rc = http_fetch(&p, &r, why, sizeof why);
    free(body);
    if (rc == AF_OK)
        rc = retrieval_http_parse(url, r.body, r.len, hits, err, errlen);
    else
        af_errf(err, errlen, "retrieval server %s", why);
    http_response_deinit(&r);
    return rc;
}
