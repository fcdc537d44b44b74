/*
 * test_web_tools.c - the network tools: html_text (HTML to text, chunking), Web_Search_Tool
 * (SearXNG JSON), Web_RAG_Search_Tool (fetch limits, BM25 and embedding ranking, the LLM
 * summary) and the HTTP retrieval back-end of Wikipedia_RAG_Search_Tool.
 *
 * Everything runs on loopback: a small route server below (libmicrohttpd; it serves GET and
 * POST on any path with any content type, redirects, streamed bodies and fake embeddings,
 * which tests/support/fake_server does not) plays SearXNG, web pages, /embeddings and
 * /retrieve, and tests/support/fake_server plays the OpenAI-compatible LLM.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentflow/llm.h"
#include "agentflow/tools.h"
#include "core/buf.h"
#include "core/xalloc.h"
#include "support/fake_server.h"
#include "tools/html_text.h"
#include "tools/http_get.h"
#include "tools/retrieval_http.h"

/* --- a loopback route server ------------------------------------------------------------ */

enum route_kind { ROUTE_FIXED, ROUTE_STREAM, ROUTE_EMBED };

struct route {
    char path[64];
    enum route_kind kind;
    int status;
    char ctype[64];
    char *body; /* owned */
    size_t len;
    char location[256]; /* "" = none */
    int delay_ms;
    size_t hits;
};

#define MAX_ROUTES 16

struct route_server {
    struct MHD_Daemon *d;
    int port;
    char base[64]; /* http://127.0.0.1:PORT */
    pthread_mutex_t mu;
    struct route routes[MAX_ROUTES];
    size_t n_routes;
    size_t n_requests;
    char *last_path, *last_method, *last_body, *last_q, *last_format; /* owned */
};

struct upload {
    struct af_buf body;
};

static void set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? af_xstrdup(s) : NULL;
}

static struct route *add_route(struct route_server *rs, const char *path, enum route_kind kind,
                               int status, const char *ctype, const char *body, size_t len)
{
    assert_true(rs->n_routes < MAX_ROUTES);
    struct route *r = &rs->routes[rs->n_routes++];
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->kind = kind;
    r->status = status;
    snprintf(r->ctype, sizeof r->ctype, "%s", ctype ? ctype : "application/json");
    r->len = body ? len : 0;
    r->body = af_xmalloc(r->len + 1);
    if (body)
        memcpy(r->body, body, r->len);
    r->body[r->len] = '\0';
    return r;
}

static struct route *add_fixed(struct route_server *rs, const char *path, int status,
                               const char *ctype, const char *body)
{
    return add_route(rs, path, ROUTE_FIXED, status, ctype, body, body ? strlen(body) : 0);
}

static void add_redirect(struct route_server *rs, const char *path, const char *location)
{
    struct route *r = add_fixed(rs, path, 302, "text/plain", "moved");
    snprintf(r->location, sizeof r->location, "%s", location);
}

/* A fake embedding of 3 dimensions: [mentions a volcano, mentions bananas, 0.1]. */
static char *fake_embeddings(const char *req_body, size_t len)
{
    json_t *req = json_loadb(req_body, len, 0, NULL);
    json_t *inputs = json_object_get(req, "input");
    json_t *data = json_array();
    /* Answer in reverse order to exercise "index" handling. */
    for (size_t i = json_array_size(inputs); i > 0; i--) {
        const char *s = json_string_value(json_array_get(inputs, i - 1));
        double v = s && (strstr(s, "volcan") || strstr(s, "fire mountain")) ? 1.0 : 0.0;
        double b = s && strstr(s, "banana") ? 1.0 : 0.0;
        json_array_append_new(data,
                              json_pack("{s:s, s:I, s:[f,f,f]}", "object", "embedding", "index",
                                        (json_int_t)(i - 1), "embedding", v, b, 0.1));
    }
    json_t *root = json_pack("{s:s, s:o, s:s}", "object", "list", "data", data, "model",
                             json_string_value(json_object_get(req, "model")));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    json_decref(req);
    return s;
}

static ssize_t stream_body(void *cls, uint64_t pos, char *buf, size_t max)
{
    const struct route *r = cls;
    if (pos >= r->len)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = r->len - (size_t)pos < max ? r->len - (size_t)pos : max;
    memcpy(buf, r->body + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result send_route(struct MHD_Connection *mc, struct route *r, const char *upload,
                                  size_t upload_len)
{
    struct MHD_Response *resp;
    if (r->kind == ROUTE_STREAM) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, stream_body, r, NULL);
    } else if (r->kind == ROUTE_EMBED) {
        char *s = fake_embeddings(upload, upload_len);
        resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    } else {
        resp = MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_PERSISTENT);
    }
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", r->ctype);
    if (r->location[0])
        MHD_add_response_header(resp, "Location", r->location);
    enum MHD_Result ret = MHD_queue_response(mc, (unsigned int)r->status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static struct route *record(struct route_server *rs, struct MHD_Connection *mc, const char *url,
                            const char *method, struct upload *up)
{
    pthread_mutex_lock(&rs->mu);
    rs->n_requests++;
    set_str(&rs->last_path, url);
    set_str(&rs->last_method, method);
    set_str(&rs->last_body, af_buf_str(&up->body));
    set_str(&rs->last_q, MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "q"));
    set_str(&rs->last_format, MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "format"));
    struct route *found = NULL;
    for (size_t i = 0; i < rs->n_routes && !found; i++)
        if (strcmp(rs->routes[i].path, url) == 0)
            found = &rs->routes[i];
    if (found)
        found->hits++;
    pthread_mutex_unlock(&rs->mu);
    return found;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct route_server *rs = cls;
    struct upload *up = *con_cls;
    (void)version;
    if (!up) {
        up = af_xcalloc(1, sizeof *up);
        af_buf_init(&up->body, AF_BUF_NOLIMIT);
        *con_cls = up;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        (void)af_buf_append(&up->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    struct route *r = record(rs, mc, url, method, up);
    if (!r) {
        static char nf[] = "{\"error\": \"no such route\"}";
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(strlen(nf), nf, MHD_RESPMEM_PERSISTENT);
        enum MHD_Result ret = MHD_queue_response(mc, 404, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (r->delay_ms > 0)
        usleep((useconds_t)r->delay_ms * 1000u);
    return send_route(mc, r, af_buf_str(&up->body), up->body.len);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)mc;
    (void)toe;
    struct upload *up = *con_cls;
    if (!up)
        return;
    af_buf_deinit(&up->body);
    free(up);
    *con_cls = NULL;
}

static struct route_server *route_server_start(void)
{
    struct route_server *rs = af_xcalloc(1, sizeof *rs);
    pthread_mutex_init(&rs->mu, NULL);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rs->d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL,
                         NULL, on_request, rs, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, rs, MHD_OPTION_END);
    assert_non_null(rs->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(rs->d, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    rs->port = info->port;
    snprintf(rs->base, sizeof rs->base, "http://127.0.0.1:%d", rs->port);
    return rs;
}

static void route_server_stop(struct route_server *rs)
{
    if (!rs)
        return;
    MHD_stop_daemon(rs->d);
    for (size_t i = 0; i < rs->n_routes; i++)
        free(rs->routes[i].body);
    free(rs->last_path);
    free(rs->last_method);
    free(rs->last_body);
    free(rs->last_q);
    free(rs->last_format);
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

/* A loopback port with nothing listening (bound, read, closed). */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t n = sizeof sa;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &n), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static int setup(void **state)
{
    *state = route_server_start();
    return 0;
}

static int teardown(void **state)
{
    route_server_stop(*state);
    return 0;
}

/* --- helpers ---------------------------------------------------------------------------- */

static json_t *call_tool(struct af_tool *tool, const char *args_json, const struct af_tool_ctx *ctx,
                         int *rc)
{
    json_error_t je;
    json_t *args = json_loads(args_json, 0, &je), *valid = NULL, *result = NULL;
    assert_non_null(args);
    char err[256];
    assert_int_equal(af_tool_validate_args(af_tool_card(tool), args, &valid, err, sizeof err),
                     AF_OK);
    *rc = af_tool_call(tool, valid, ctx, &result);
    json_decref(args);
    json_decref(valid);
    assert_non_null(result);
    return result;
}

static const char *error_of(const json_t *res)
{
    const char *e = json_string_value(json_object_get(res, "error"));
    assert_non_null(e);
    return e;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!hay || !strstr(hay, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, hay ? hay : "(null)");
}

static struct af_tool *tool_with(struct af_tool *(*make)(const json_t *), const char *k1,
                                 const char *v1, const char *k2, const char *v2)
{
    json_t *opts = json_object();
    if (k1)
        json_object_set_new(opts, k1, json_string(v1));
    if (k2)
        json_object_set_new(opts, k2, json_string(v2));
    struct af_tool *t = make(opts);
    json_decref(opts);
    return t;
}

/* Web_RAG_Search_Tool with the options given, allowed to read the loopback test server. */
static struct af_tool *rag_with(const char *k1, const char *v1, const char *k2, const char *v2)
{
    json_t *opts = json_object();
    json_object_set_new(opts, "allow_private", json_string("1"));
    if (k1)
        json_object_set_new(opts, k1, json_string(v1));
    if (k2)
        json_object_set_new(opts, k2, json_string(v2));
    struct af_tool *t = af_tool_web_rag_new(opts);
    json_decref(opts);
    return t;
}

/* --- html_text -------------------------------------------------------------------------- */

static void test_html_text(void **state)
{
    (void)state;
    const char *html =
        "<!DOCTYPE html><html><head><title>The  Title</title><meta charset=\"utf-8\">"
        "<style>body { color: red; }</style><script>var tracker = 1;</script></head><body>"
        "<nav>Home | About</nav><noscript>enable js</noscript><template>tpl</template>"
        "<h1>Head</h1><p>One  two\n three</p><ul><li>a</li><li>b</li></ul>"
        "<table><tr><td>c1</td><td>c2</td></tr></table>x<b>y</b>z<br>after &amp;&nbsp;end"
        "<!-- a comment --><script type=\"text/javascript\">if (a < b) alert('x');</script>"
        "<div>caf\xc3\xa9</div></body></html>";
    char *text = NULL, err[256];
    assert_int_equal(html_to_text(html, strlen(html), NULL, &text, err, sizeof err), AF_OK);
    assert_string_equal(text, "The Title\nHome | About\nHead\nOne two three\na\nb\nc1 c2\nxyz\n"
                              "after & end\ncaf\xc3\xa9");
    free(text);

    /* Latin-1 named by the charset comes out as UTF-8. */
    const char *latin = "<p>caf\xe9</p>";
    assert_int_equal(html_to_text(latin, strlen(latin), "ISO-8859-1", &text, err, sizeof err),
                     AF_OK);
    assert_string_equal(text, "caf\xc3\xa9");
    free(text);

    /* Broken markup is recovered; a deep nest does not exhaust the stack. */
    const char *broken = "<div><p>unclosed <b>bold <i>both</div> tail";
    assert_int_equal(html_to_text(broken, strlen(broken), NULL, &text, err, sizeof err), AF_OK);
    assert_contains(text, "unclosed bold both");
    assert_contains(text, "tail");
    free(text);
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (int i = 0; i < 5000; i++)
        (void)af_buf_puts(&b, "<div>");
    (void)af_buf_puts(&b, "deep");
    assert_int_equal(html_to_text(af_buf_str(&b), b.len, NULL, &text, err, sizeof err), AF_OK);
    free(text);
    af_buf_deinit(&b);

    /* An empty body is no document: AF_EPARSE, or "" where libxml2 builds an empty one. */
    int rc = html_to_text("", 0, NULL, &text, err, sizeof err);
    assert_true(rc == AF_EPARSE || (rc == AF_OK && text && text[0] == '\0'));
    free(text);
    assert_int_equal(html_utf8_valid("caf\xc3\xa9", 5), 1);
    assert_int_equal(html_utf8_valid("caf\xe9", 4), 0);
    assert_int_equal(html_utf8_valid("\xc3", 1), 0);
}

/* "w0 w1 ... w{n-1}" */
static char *words(size_t n)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t i = 0; i < n; i++)
        (void)af_buf_printf(&b, "%s w%zu", i % 7 == 3 ? "\n\t" : " ", i);
    return af_buf_detach(&b);
}

static void assert_chunk(const json_t *chunks, size_t i, size_t first, size_t last)
{
    const char *c = json_string_value(json_array_get(chunks, i));
    assert_non_null(c);
    char *want = NULL;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    for (size_t w = first; w <= last; w++)
        (void)af_buf_printf(&b, "%sw%zu", w > first ? " " : "", w);
    want = af_buf_detach(&b);
    assert_string_equal(c, want);
    free(want);
}

static void test_chunker(void **state)
{
    (void)state;
    char *t = words(450);
    json_t *c = text_chunk_words(t, 200, 20);
    assert_int_equal(json_array_size(c), 3);
    assert_chunk(c, 0, 0, 199);
    assert_chunk(c, 1, 180, 379); /* overlap: w180..w199, exactly 20 words */
    assert_chunk(c, 2, 360, 449); /* the last chunk reaches the end and is shorter */
    json_decref(c);
    free(t);

    t = words(200); /* exactly one chunk: no tail made only of overlap */
    c = text_chunk_words(t, 200, 20);
    assert_int_equal(json_array_size(c), 1);
    assert_chunk(c, 0, 0, 199);
    json_decref(c);
    free(t);

    t = words(201);
    c = text_chunk_words(t, 200, 20);
    assert_int_equal(json_array_size(c), 2);
    assert_chunk(c, 1, 180, 200);
    json_decref(c);
    free(t);

    t = words(380); /* the second chunk ends exactly at the end */
    c = text_chunk_words(t, 200, 20);
    assert_int_equal(json_array_size(c), 2);
    assert_chunk(c, 1, 180, 379);
    json_decref(c);
    free(t);

    c = text_chunk_words("  \n\t ", 200, 20);
    assert_int_equal(json_array_size(c), 0);
    json_decref(c);
    c = text_chunk_words("a b c d e", 2, 5); /* overlap >= size: no overlap */
    assert_int_equal(json_array_size(c), 3);
    json_decref(c);
}

/* --- Web_Search_Tool -------------------------------------------------------------------- */

static const char *SEARX_BODY =
    "{\"query\": \"x\", \"number_of_results\": 3, \"results\": ["
    "{\"url\": \"https://example.org/a\", \"title\": \"Alpha\", \"content\": \"first hit\","
    " \"engine\": \"duckduckgo\"},"
    "{\"title\": \"no url, skipped\", \"content\": \"-\"},"
    "{\"url\": \"https://example.org/b\", \"title\": \"Beta\"},"
    "{\"url\": \"https://example.org/c\", \"title\": \"Gamma\", \"content\": \"third\"}]}";

static void test_search_happy(void **state)
{
    struct route_server *rs = *state;
    add_fixed(rs, "/search", 200, "application/json", SEARX_BODY);
    char url[128];
    snprintf(url, sizeof url, "%s/", rs->base); /* a trailing slash is fine */
    struct af_tool *tool = tool_with(af_tool_web_search_new, "search_url", url, NULL, NULL);
    assert_string_equal(af_tool_card(tool)->name, "Web_Search_Tool");
    int rc;
    json_t *res = call_tool(tool, "{\"query\": \"C++ & rust? 100%\", \"k\": 2}", NULL, &rc);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(rs->last_path, "/search");
    assert_string_equal(rs->last_method, "GET");
    assert_string_equal(rs->last_q, "C++ & rust? 100%");
    assert_string_equal(rs->last_format, "json");
    assert_string_equal(json_string_value(json_object_get(res, "query")), "C++ & rust? 100%");
    json_t *hits = json_object_get(res, "results");
    assert_int_equal(json_array_size(hits), 2);
    json_t *h0 = json_array_get(hits, 0), *h1 = json_array_get(hits, 1);
    assert_string_equal(json_string_value(json_object_get(h0, "title")), "Alpha");
    assert_string_equal(json_string_value(json_object_get(h0, "url")), "https://example.org/a");
    assert_string_equal(json_string_value(json_object_get(h0, "snippet")), "first hit");
    assert_string_equal(json_string_value(json_object_get(h1, "title")), "Beta");
    assert_string_equal(json_string_value(json_object_get(h1, "snippet")), "");
    json_decref(res);

    /* Default k = 5 keeps all three usable hits; the URL may already end in /search. */
    af_tool_free(tool);
    snprintf(url, sizeof url, "%s/search", rs->base);
    setenv("AGENTFLOW_SEARCH_URL", url, 1);
    tool = af_tool_web_search_new(NULL);
    unsetenv("AGENTFLOW_SEARCH_URL");
    res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(rs->last_path, "/search");
    assert_int_equal(json_array_size(json_object_get(res, "results")), 3);
    json_decref(res);
    res = call_tool(tool, "{\"query\": \"x\", \"k\": 0}", NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    json_decref(res);
    af_tool_free(tool);
}

static void test_search_errors(void **state)
{
    struct route_server *rs = *state;
    int rc;
    unsetenv("AGENTFLOW_SEARCH_URL");
    struct af_tool *tool = af_tool_web_search_new(NULL);
    json_t *res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_string_equal(json_string_value(json_object_get(res, "query")), "x");
    assert_contains(error_of(res), "search_url");
    assert_contains(error_of(res), "AGENTFLOW_SEARCH_URL");
    json_decref(res);
    af_tool_free(tool);

    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", dead_port());
    tool = tool_with(af_tool_web_search_new, "search_url", url, NULL, NULL);
    res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), url);
    json_decref(res);
    af_tool_free(tool);

    /* A call whose deadline has passed sends nothing. */
    snprintf(url, sizeof url, "%s", rs->base);
    tool = tool_with(af_tool_web_search_new, "search_url", url, NULL, NULL);
    struct af_tool_ctx late = {.deadline_ms = 1.0};
    size_t before = rs->n_requests;
    res = call_tool(tool, "{\"query\": \"x\"}", &late, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "deadline");
    assert_int_equal(rs->n_requests, before);
    json_decref(res);
    af_tool_free(tool);

    const char *cases[][3] = {{"/e500/search", "500", "HTTP 500"},
                              {"/bad/search", "200", "not JSON"},
                              {"/nores/search", "200", "'results'"},
                              {"/e403/search", "403", "settings.yml"}};
    const char *bodies[] = {"{\"error\": \"boom\"}", "{\"results\": [", "{\"answers\": []}",
                            "forbidden"};
    for (size_t i = 0; i < 4; i++) {
        add_fixed(rs, cases[i][0], atoi(cases[i][1]), "application/json", bodies[i]);
        snprintf(url, sizeof url, "%s%.*s", rs->base, (int)(strlen(cases[i][0]) - 7), cases[i][0]);
        tool = tool_with(af_tool_web_search_new, "search_url", url, NULL, NULL);
        res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
        assert_int_equal(rc, AF_ETOOL);
        assert_contains(error_of(res), cases[i][2]);
        assert_contains(error_of(res), url);
        json_decref(res);
        af_tool_free(tool);
    }
}

/* --- Web_RAG_Search_Tool ---------------------------------------------------------------- */

/* n filler words about gardening, numbered so chunks differ. */
static void filler(struct af_buf *b, size_t n, const char *tag)
{
    for (size_t i = 0; i < n; i++)
        (void)af_buf_printf(b, "%s%s%zu", i ? " " : "", tag, i);
}

/* A page: script/style/nav boilerplate, 450 filler words, the relevant paragraph, 450 more. */
static char *rag_page(void)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "<html><head><title>Island notes</title><style>.zephyr { color: red; "
                          "}</style><script>var zephyr = 'Mount Zephyr erupted';</script></head>"
                          "<body><nav>Home About Contact</nav><article><p>");
    filler(&b, 450, "garden");
    (void)af_buf_puts(&b, "</p><p>Mount Zephyr is a volcano on the island. The great eruption of "
                          "Mount Zephyr happened in 1883 and buried the old harbour.</p><p>");
    filler(&b, 450, "orchard");
    (void)af_buf_puts(&b, " bananas grow here.</p></article><script>track('zephyr');</script>"
                          "</body></html>");
    return af_buf_detach(&b);
}

static struct af_llm *fake_llm(struct fake_server *fs)
{
    struct af_llm_openai_params p = af_llm_openai_default_params();
    p.base_url = fake_server_url(fs);
    p.model = "fake-model";
    p.max_retries = 0;
    char err[256];
    struct af_llm *llm = af_llm_openai_new(&p, err, sizeof err);
    assert_non_null(llm);
    return llm;
}

static void test_rag_bm25_and_answer(void **state)
{
    struct route_server *rs = *state;
    char *page = rag_page();
    add_fixed(rs, "/page", 200, "text/html; charset=utf-8", page);
    free(page);
    add_redirect(rs, "/moved", "/page");
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_add_rule(fs, "Mount Zephyr", "It erupted in 1883.");
    struct af_llm *llm = fake_llm(fs);
    struct af_sampling samp = af_llm_default_sampling();
    struct af_tool_ctx ctx = {.llm = llm, .sampling = &samp, .model = "fake-model"};
    unsetenv("AGENTFLOW_EMBED_URL");
    struct af_tool *tool = rag_with(NULL, NULL, NULL, NULL);
    assert_string_equal(af_tool_card(tool)->name, "Web_RAG_Search_Tool");
    assert_int_equal(af_tool_card(tool)->requires_llm, 1);
    char args[256];
    snprintf(args, sizeof args,
             "{\"query\": \"When did Mount Zephyr erupt?\", \"url\": \"%s/moved\"}", rs->base);
    int rc;
    json_t *res = call_tool(tool, args, &ctx, &rc);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(json_string_value(json_object_get(res, "answer")), "It erupted in 1883.");
    assert_string_equal(json_string_value(json_object_get(res, "ranking")), "bm25");
    json_t *chunks = json_object_get(res, "chunks");
    assert_true(json_array_size(chunks) >= 2 && json_array_size(chunks) <= 10);
    json_t *c0 = json_array_get(chunks, 0);
    assert_int_equal(json_integer_value(json_object_get(c0, "rank")), 1);
    assert_true(json_real_value(json_object_get(c0, "score")) > 0);
    assert_contains(json_string_value(json_object_get(c0, "text")), "eruption of Mount Zephyr");
    for (size_t i = 0; i < json_array_size(chunks); i++) {
        const char *t = json_string_value(json_object_get(json_array_get(chunks, i), "text"));
        assert_null(strstr(t, "var zephyr"));
        assert_null(strstr(t, "color:"));
        assert_null(strstr(t, "track("));
    }
    /* The summary request carried the query and the best chunk first. */
    char *sent = fake_server_last_request(fs);
    json_t *req = json_loads(sent, 0, NULL);
    const char *prompt = json_string_value(
        json_object_get(json_array_get(json_object_get(req, "messages"), 0), "content"));
    assert_contains(prompt, "When did Mount Zephyr erupt?");
    assert_contains(prompt, "Chunk [1]");
    assert_true(strstr(prompt, "1883") < strstr(prompt, "Chunk [2]"));
    json_decref(req);
    free(sent);
    json_decref(res);

    /* No LLM: the chunks come back with an error. */
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "no LLM");
    assert_true(json_array_size(json_object_get(res, "chunks")) >= 1);
    json_decref(res);

    /* The LLM failing is a tool error too. */
    fake_server_push(fs, 500, "{\"error\": {\"message\": \"overloaded\"}}", NULL, NULL, 0);
    res = call_tool(tool, args, &ctx, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "LLM call failed");
    json_decref(res);
    af_tool_free(tool);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_rag_plain_text_and_types(void **state)
{
    struct route_server *rs = *state;
    add_fixed(rs, "/plain.txt", 200, "text/plain", "<b>not markup</b> kept as is");
    add_fixed(rs, "/img.png", 200, "image/png", "\x89PNG....");
    add_fixed(rs, "/empty", 200, "text/html", "<html><script>x()</script></html>");
    struct af_tool *tool = rag_with(NULL, NULL, NULL, NULL);
    char args[256];
    int rc;
    snprintf(args, sizeof args, "{\"query\": \"markup\", \"url\": \"%s/plain.txt\"}", rs->base);
    json_t *res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL); /* no LLM */
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(res, "chunks"), 0), "text")),
                        "<b>not markup</b> kept as is");
    json_decref(res);
    snprintf(args, sizeof args, "{\"query\": \"x\", \"url\": \"%s/img.png\"}", rs->base);
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "image/png");
    assert_null(json_object_get(res, "chunks"));
    json_decref(res);
    /* An arXiv PDF link is read from its abstract page. */
    add_fixed(rs, "/arxiv.org/abs/2401.00001", 200, "text/html", "<p>Abstract text</p>");
    snprintf(args, sizeof args, "{\"query\": \"x\", \"url\": \"%s/arxiv.org/pdf/2401.00001.pdf\"}",
             rs->base);
    res = call_tool(tool, args, NULL, &rc);
    assert_string_equal(rs->last_path, "/arxiv.org/abs/2401.00001");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(res, "chunks"), 0), "text")),
                        "Abstract text");
    json_decref(res);
    snprintf(args, sizeof args, "{\"query\": \"x\", \"url\": \"%s/empty\"}", rs->base);
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "no readable text");
    json_decref(res);
    af_tool_free(tool);
}

static void test_rag_limits(void **state)
{
    struct route_server *rs = *state;
    size_t big = ((size_t)5 << 20) + 4096;
    char *blob = af_xmalloc(big);
    for (size_t i = 0; i < big; i++)
        blob[i] = i % 2 ? ' ' : 'a';
    add_route(rs, "/big", ROUTE_FIXED, 200, "text/plain", blob, big);
    add_route(rs, "/bigstream", ROUTE_STREAM, 200, "text/plain", blob, big);
    free(blob);
    add_redirect(rs, "/loop", "/loop");
    add_redirect(rs, "/tofile", "file:///etc/passwd");
    struct af_tool *tool = rag_with(NULL, NULL, NULL, NULL);
    char args[256];
    int rc;
    const char *paths[] = {"/big", "/bigstream"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "{\"query\": \"a\", \"url\": \"%s%s\"}", rs->base, paths[i]);
        json_t *res = call_tool(tool, args, NULL, &rc);
        assert_int_equal(rc, AF_ETOOL);
        assert_contains(error_of(res), "limit");
        assert_null(json_object_get(res, "chunks"));
        json_decref(res);
    }
    snprintf(args, sizeof args, "{\"query\": \"a\", \"url\": \"%s/loop\"}", rs->base);
    json_t *res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "redirects");
    assert_true(rs->routes[2].hits >= 1 && rs->routes[2].hits <= 6); /* 1 + at most 5 */
    json_decref(res);
    snprintf(args, sizeof args, "{\"query\": \"a\", \"url\": \"%s/tofile\"}", rs->base);
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "scheme other than http/https");
    assert_null(json_object_get(res, "chunks"));
    json_decref(res);
    const char *bad[] = {"file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1/",
                         "/etc/passwd", "HTTPX://a"};
    size_t before = rs->n_requests;
    for (size_t i = 0; i < 5; i++) {
        snprintf(args, sizeof args, "{\"query\": \"root\", \"url\": \"%s\"}", bad[i]);
        res = call_tool(tool, args, NULL, &rc);
        assert_int_equal(rc, AF_ETOOL);
        assert_contains(error_of(res), "http");
        assert_null(json_object_get(res, "chunks"));
        json_decref(res);
    }
    assert_int_equal(rs->n_requests, before);
    af_tool_free(tool);

    /* A short web_timeout_s cuts a slow page off. */
    struct route *slow = add_fixed(rs, "/slow", 200, "text/plain", "late");
    slow->delay_ms = 1500;
    tool = rag_with("web_timeout_s", "0.3", NULL, NULL);
    snprintf(args, sizeof args, "{\"query\": \"a\", \"url\": \"%s/slow\"}", rs->base);
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "timed out");
    json_decref(res);
    af_tool_free(tool);
}

static int addr_private(const char *ip)
{
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, ip, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        return http_addr_private((const struct sockaddr *)&a4);
    }
    assert_int_equal(inet_pton(AF_INET6, ip, &a6.sin6_addr), 1);
    a6.sin6_family = AF_INET6;
    return http_addr_private((const struct sockaddr *)&a6);
}

/* The model picks the URL: loopback, private and link-local hosts are refused unless the
 * allow_private option says otherwise (issue 22: it fetched http://127.0.0.1:PORT/). */
static void test_rag_blocks_private(void **state)
{
    struct route_server *rs = *state;
    const char *priv[] = {"127.0.0.1",
                          "127.9.9.9",
                          "10.1.2.3",
                          "172.16.0.1",
                          "172.31.255.1",
                          "192.168.1.1",
                          "169.254.169.254",
                          "100.64.0.1",
                          "0.0.0.0",
                          "224.0.0.1",
                          "255.255.255.255",
                          "::1",
                          "::",
                          "fe80::1",
                          "fd00::1",
                          "::ffff:127.0.0.1",
                          "::ffff:10.0.0.1",
                          "64:ff9b::a00:1",
                          "ff02::1"};
    for (size_t i = 0; i < sizeof priv / sizeof priv[0]; i++) {
        if (!addr_private(priv[i]))
            fprintf(stderr, "%s should count as private\n", priv[i]);
        assert_true(addr_private(priv[i]));
    }
    const char *pub[] = {"8.8.8.8", "172.32.0.1",      "100.128.0.1",
                         "1.1.1.1", "2001:4860::8888", "::ffff:8.8.8.8"};
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++)
        assert_false(addr_private(pub[i]));

    add_fixed(rs, "/secret", 200, "text/plain", "internal admin token");
    unsetenv("AGENTFLOW_ALLOW_PRIVATE");
    struct af_tool *tool = af_tool_web_rag_new(NULL);
    size_t before = rs->n_requests;
    char args[256];
    int rc;
    const char *hosts[] = {"127.0.0.1", "localhost", "[::1]", "0.0.0.0"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "{\"query\": \"token\", \"url\": \"http://%s:%d/secret\"}",
                 hosts[i], rs->port);
        json_t *res = call_tool(tool, args, NULL, &rc);
        assert_int_equal(rc, AF_ETOOL);
        assert_contains(error_of(res), "allow_private");
        assert_null(json_object_get(res, "chunks"));
        json_decref(res);
    }
    assert_int_equal(rs->n_requests, before); /* nothing reached the server */
    af_tool_free(tool);

    tool = rag_with(NULL, NULL, NULL, NULL); /* allow_private=1 */
    snprintf(args, sizeof args, "{\"query\": \"token\", \"url\": \"%s/secret\"}", rs->base);
    json_t *res = call_tool(tool, args, NULL, &rc);
    assert_contains(json_string_value(
                        json_object_get(json_array_get(json_object_get(res, "chunks"), 0), "text")),
                    "admin token");
    json_decref(res);
    af_tool_free(tool);
}

/* A page of 80 chunks: one about a volcano (without the query's words), one about bananas. */
static char *embed_page(void)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_puts(&b, "<p>");
    filler(&b, 180 * 40, "filler");
    (void)af_buf_puts(&b, "</p><p>The volcanic peak smoked for weeks.</p><p>");
    filler(&b, 180 * 40, "more");
    (void)af_buf_puts(&b, " banana</p>");
    return af_buf_detach(&b);
}

static void test_rag_embeddings(void **state)
{
    struct route_server *rs = *state;
    char *page = embed_page();
    add_fixed(rs, "/page", 200, "text/html", page);
    free(page);
    struct route *emb =
        add_route(rs, "/v1/embeddings", ROUTE_EMBED, 200, "application/json", NULL, 0);
    char eurl[128];
    snprintf(eurl, sizeof eurl, "%s/v1", rs->base);
    struct af_tool *tool = rag_with("embed_url", eurl, "embed_model", "my-embedder");
    char args[256];
    snprintf(args, sizeof args, "{\"query\": \"fire mountain\", \"url\": \"%s/page\"}", rs->base);
    int rc;
    json_t *res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL); /* no LLM, but ranked */
    assert_null(json_object_get(res, "warning"));
    assert_string_equal(json_string_value(json_object_get(res, "ranking")), "embeddings");
    json_t *chunks = json_object_get(res, "chunks");
    assert_int_equal(json_array_size(chunks), 10);
    assert_contains(json_string_value(json_object_get(json_array_get(chunks, 0), "text")),
                    "volcanic peak");
    assert_true(json_real_value(json_object_get(json_array_get(chunks, 0), "score")) > 0.99);
    /* 82 chunks + the query = 83 inputs: two batches. */
    assert_int_equal(emb->hits, 2);
    assert_string_equal(rs->last_method, "POST");
    json_t *last = json_loads(rs->last_body, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(last, "model")), "my-embedder");
    assert_true(json_array_size(json_object_get(last, "input")) >= 1);
    json_decref(last);
    json_decref(res);
    af_tool_free(tool);

    /* A failing endpoint falls back to BM25 with a warning. */
    snprintf(eurl, sizeof eurl, "%s/nowhere", rs->base);
    tool = rag_with("embed_url", eurl, NULL, NULL);
    res = call_tool(tool, args, NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_string_equal(json_string_value(json_object_get(res, "ranking")), "bm25");
    assert_contains(json_string_value(json_object_get(res, "warning")), "/nowhere/embeddings");
    assert_int_equal(json_array_size(json_object_get(res, "chunks")), 10);
    json_decref(res);
    af_tool_free(tool);
}

/* --- Wikipedia_RAG_Search_Tool over HTTP ------------------------------------------------ */

static const char *RETRIEVE_BODY =
    "{\"result\": [[{\"document\": {\"id\": \"12\", \"contents\": \"\\\"Paris\\\"\\nParis is the "
    "capital of France.\"}, \"score\": 0.9},"
    "{\"document\": {\"id\": 7, \"title\": \"Lyon\", \"text\": \"Lyon is on the Rh\\u00f4ne.\"}, "
    "\"score\": 0.5}]]}";

static void test_retrieve_happy(void **state)
{
    struct route_server *rs = *state;
    add_fixed(rs, "/retrieve", 200, "application/json", RETRIEVE_BODY);
    add_fixed(rs, "/noscores", 200, "application/json",
              "{\"result\": [[{\"id\": \"1\", \"contents\": \"No title line\"}]]}");
    char url[128];
    snprintf(url, sizeof url, "%s/retrieve", rs->base);
    /* wiki_url wins over wiki_db (which does not exist). */
    struct af_tool *tool =
        tool_with(af_tool_wikipedia_new, "wiki_url", url, "wiki_db", "/nonexistent/wiki.db");
    assert_string_equal(af_tool_card(tool)->name, "Wikipedia_RAG_Search_Tool");
    assert_contains(af_tool_card(tool)->description, "retrieval server");
    int rc;
    json_t *res = call_tool(tool, "{\"query\": \"capital of France\", \"k\": 3}", NULL, &rc);
    assert_int_equal(rc, AF_OK);
    assert_string_equal(rs->last_method, "POST");
    assert_string_equal(rs->last_path, "/retrieve");
    json_t *req = json_loads(rs->last_body, 0, NULL);
    assert_string_equal(json_string_value(json_array_get(json_object_get(req, "queries"), 0)),
                        "capital of France");
    assert_int_equal(json_integer_value(json_object_get(req, "topk")), 3);
    assert_true(json_is_true(json_object_get(req, "return_scores")));
    json_decref(req);
    json_t *hits = json_object_get(res, "results");
    assert_int_equal(json_array_size(hits), 2);
    json_t *h0 = json_array_get(hits, 0), *h1 = json_array_get(hits, 1);
    assert_string_equal(json_string_value(json_object_get(h0, "id")), "12");
    assert_string_equal(json_string_value(json_object_get(h0, "title")), "Paris");
    assert_string_equal(json_string_value(json_object_get(h0, "text")),
                        "Paris is the capital of France.");
    assert_true(json_real_value(json_object_get(h0, "score")) > 0.89);
    assert_string_equal(json_string_value(json_object_get(h1, "id")), "7");
    assert_string_equal(json_string_value(json_object_get(h1, "title")), "Lyon");
    assert_string_equal(json_string_value(json_object_get(h1, "text")),
                        "Lyon is on the Rh\xc3\xb4ne.");
    json_decref(res);
    af_tool_free(tool);

    snprintf(url, sizeof url, "%s/noscores", rs->base);
    setenv("AGENTFLOW_WIKI_URL", url, 1);
    tool = af_tool_wikipedia_new(NULL);
    unsetenv("AGENTFLOW_WIKI_URL");
    res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
    assert_int_equal(rc, AF_OK);
    h0 = json_array_get(json_object_get(res, "results"), 0);
    assert_string_equal(json_string_value(json_object_get(h0, "title")), "");
    assert_string_equal(json_string_value(json_object_get(h0, "text")), "No title line");
    assert_true(json_is_null(json_object_get(h0, "score")));
    json_decref(res);
    af_tool_free(tool);
}

static void test_retrieve_errors(void **state)
{
    struct route_server *rs = *state;
    add_fixed(rs, "/r500", 500, "application/json", "{\"detail\": \"index not loaded\"}");
    add_fixed(rs, "/rbad", 200, "application/json", "{\"result\": [[{\"document\": ");
    add_fixed(rs, "/rshape", 200, "application/json", "{\"result\": 5}");
    add_fixed(rs, "/rdoc", 200, "application/json",
              "{\"result\": [[{\"document\": {\"id\": 1}}]]}");
    struct route *slow = add_fixed(rs, "/rslow", 200, "application/json", "{\"result\": [[]]}");
    slow->delay_ms = 1500;
    char url[128];
    const char *paths[] = {NULL, "/r500", "/rbad", "/rshape", "/rdoc", "/rslow"};
    const char *want[] = {"", "HTTP 500", "not JSON", "'result'", "'contents'", "timed out"};
    for (size_t i = 0; i < 6; i++) {
        if (paths[i])
            snprintf(url, sizeof url, "%s%s", rs->base, paths[i]);
        else
            snprintf(url, sizeof url, "http://127.0.0.1:%d/retrieve", dead_port());
        struct af_tool *tool =
            tool_with(af_tool_wikipedia_new, "wiki_url", url, "web_timeout_s", "0.3");
        int rc;
        json_t *res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
        assert_int_equal(rc, AF_ETOOL);
        assert_contains(error_of(res), url);
        assert_contains(error_of(res), want[i]);
        json_decref(res);
        af_tool_free(tool);
    }
    struct af_tool *tool =
        tool_with(af_tool_wikipedia_new, "wiki_url", "file:///tmp/x", NULL, NULL);
    int rc;
    json_t *res = call_tool(tool, "{\"query\": \"x\"}", NULL, &rc);
    assert_int_equal(rc, AF_ETOOL);
    assert_contains(error_of(res), "file:///tmp/x");
    json_decref(res);
    af_tool_free(tool);
}

/* --- the registry ----------------------------------------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    struct af_tool_registry *r = af_tool_registry_new();
    char err[512];
    assert_int_equal(af_tool_registry_add_builtins(r, "web search tool, Web_RAG_Search_Tool", NULL,
                                                   err, sizeof err),
                     AF_OK);
    assert_int_equal(af_tool_registry_count(r), 2);
    const struct af_tool_card *c = af_tool_card(af_tool_registry_at(r, 0));
    assert_string_equal(c->name, "Web_RAG_Search_Tool");
    assert_int_equal(c->n_params, 2);
    assert_string_equal(c->params[0].name, "query");
    assert_string_equal(c->params[1].name, "url");
    assert_string_equal(af_tool_card(af_tool_registry_at(r, 1))->name, "Web_Search_Tool");
    af_tool_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_html_text),
        cmocka_unit_test(test_chunker),
        cmocka_unit_test_setup_teardown(test_search_happy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_search_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rag_bm25_and_answer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rag_plain_text_and_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rag_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rag_embeddings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rag_blocks_private, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retrieve_happy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retrieve_errors, setup, teardown),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
