/*
 * test_serve.c - the HTTP API of `agentflow serve`, with the server started in this process on
 * a free loopback port over the scripted back-end: chat completions plain and streamed, the
 * step records, every bad input, authentication, 429 under load, a client that disconnects,
 * shutdown, runs kept in SQLite across a restart, and the metrics.
 *
 * No assertion is on time: slow flows are slow only so that a test can catch them running,
 * and every wait polls a state with a generous deadline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "serve/serve.h"
#include "support/http_client.h"

#define DEADLINE_MS 120000.0

static char g_dir[64];

static const char *src_path(const char *rel, char *buf, size_t len)
{
    const char *root = getenv("AGENTFLOW_SRC");
    snprintf(buf, len, "%s/%s", root && *root ? root : ".", rel);
    return buf;
}

/* --- a server over a scripted back-end ------------------------------------------------ */
struct fixture {
    struct af_llm *llm;
    struct af_tool_registry *tools;
    struct af_trace *trace;
    json_t *records; /* every trace record forwarded by the server */
    pthread_mutex_t mu;
    struct af_flow_params flow;
    struct af_serve *srv;
    char base[64];
    char db[128];
};

enum script_kind {
    SCRIPT_THREE_STEP, /* the three-step 6 x 7 solve */
    SCRIPT_ENDLESS,    /* never stops on its own; each call waits 50 ms */
    SCRIPT_SCRIPT_TAG, /* the tool's result holds a <script> tag */
    SCRIPT_SLOW,       /* the three-step solve, each call waits 250 ms */
};

/* tests/data/three_step.json, changed for the kind. Owned: free(). */
static char *script_text(enum script_kind kind)
{
    char path[512], *text = NULL, err[256];
    assert_int_equal(af_file_read(src_path("tests/data/three_step.json", path, sizeof path),
                                  1 << 20, &text, NULL, err, sizeof err),
                     0);
    json_t *doc = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(doc);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(doc, "rules"), i, r)
    {
        const char *m = json_string_value(json_object_get(r, "match"));
        if (kind == SCRIPT_ENDLESS) {
            json_object_set_new(r, "delay_ms", json_integer(50));
            json_object_del(r, "times");
            if (strstr(m, "Judge whether"))
                json_object_set_new(r, "reply", json_string("Conclusion: CONTINUE"));
        }
        if (kind == SCRIPT_SLOW)
            json_object_set_new(r, "delay_ms", json_integer(250));
        if (kind == SCRIPT_SCRIPT_TAG && strcmp(m, "What is 6 * 7?") == 0)
            json_object_set_new(r, "reply", json_string("<script>alert(1)</script> 42"));
    }
    char *out = json_dumps(doc, 0);
    json_decref(doc);
    return out;
}

static void on_record(void *user, const json_t *rec)
{
    struct fixture *f = user;
    pthread_mutex_lock(&f->mu);
    json_array_append_new(f->records, json_deep_copy(rec));
    pthread_mutex_unlock(&f->mu);
}

static void fixture_start_server(struct fixture *f, struct af_serve_params *sp)
{
    sp->flow = &f->flow;
    sp->port = 0;
    sp->db_path = f->db;
    char err[512];
    assert_int_equal(af_serve_start(sp, &f->srv, err, sizeof err), 0);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%d", af_serve_port(f->srv));
}

/* Starts a server; sp may be NULL (defaults). db_name names the SQLite file in g_dir. */
static void fixture_init(struct fixture *f, enum script_kind kind, struct af_serve_params *sp,
                         const char *db_name)
{
    memset(f, 0, sizeof *f);
    char *script = script_text(kind), err[512];
    f->llm = af_llm_scripted_new(script, err, sizeof err);
    free(script);
    assert_non_null(f->llm);
    f->tools = af_tool_registry_new();
    assert_int_equal(af_tool_registry_add_builtins(f->tools,
                                                   "Generalist_Solution_Generator_Tool,"
                                                   "Python_Code_Generator_Tool",
                                                   NULL, err, sizeof err),
                     0);
    pthread_mutex_init(&f->mu, NULL);
    f->records = json_array();
    f->trace = af_trace_new_fn(on_record, f);
    f->flow = af_flow_default_params();
    for (int i = 0; i < AF_N_SLOTS; i++)
        f->flow.slots[i].llm = f->llm;
    f->flow.tools = f->tools;
    f->flow.trace = f->trace;
    if (kind == SCRIPT_ENDLESS)
        f->flow.max_steps = 1000;
    snprintf(f->db, sizeof f->db, "%s/%s", g_dir, db_name ? db_name : "runs.db");
    struct af_serve_params dflt = af_serve_default_params();
    fixture_start_server(f, sp ? sp : &dflt);
}

static void fixture_deinit(struct fixture *f)
{
    af_serve_shutdown(f->srv, 0);
    af_serve_free(f->srv);
    af_trace_close(f->trace);
    af_tool_registry_free(f->tools);
    af_llm_free(f->llm);
    json_decref(f->records);
    pthread_mutex_destroy(&f->mu);
}

/* --- requests ------------------------------------------------------------------------- */
static void req(struct fixture *f, const char *method, const char *path, const char *body,
                const char *bearer, struct http_res *out)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", f->base, path);
    struct http_req rq = {.method = method, .url = url, .body = body, .bearer = bearer};
    assert_int_equal(http_do(&rq, out), 0);
}

static json_t *json_of(const struct http_res *r)
{
    json_t *j = json_loads(r->body, 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON (status %ld): %s\n", r->status, r->body);
    assert_non_null(j);
    return j;
}

/* Checks an OpenAI-style error object with the given status and code. */
static void expect_error(struct fixture *f, const char *method, const char *path, const char *body,
                         const char *bearer, long status, const char *code)
{
    struct http_res r;
    req(f, method, path, body, bearer, &r);
    if (r.status != status)
        fprintf(stderr, "%s %s %.80s: %ld %s\n", method, path, body ? body : "", r.status, r.body);
    assert_int_equal(r.status, status);
    json_t *j = json_of(&r);
    json_t *e = json_object_get(j, "error");
    assert_true(json_is_object(e));
    assert_non_null(af_json_get_str(e, "message"));
    assert_non_null(af_json_get_str(e, "type"));
    assert_string_equal(af_json_get_str(e, "code"), code);
    json_decref(j);
    http_res_deinit(&r);
}

static const char CHAT_6X7[] = "{\"model\":\"agentflow\",\"messages\":[{\"role\":\"user\","
                               "\"content\":\"What is 6 times 7?\"}]}";

static void wait_for(struct fixture *f, int (*pred)(const struct af_serve_stats *, void *),
                     void *user)
{
    double deadline = af_clock_ms() + DEADLINE_MS;
    struct af_serve_stats st;
    for (;;) {
        af_serve_stats(f->srv, &st);
        if (pred(&st, user))
            return;
        assert_true(af_clock_ms() < deadline);
        af_clock_sleep_ms(10);
    }
}

/* --- tests ---------------------------------------------------------------------------- */
static void test_models_healthz_routes(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "routes.db");
    struct http_res r;
    req(&f, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    req(&f, "GET", "/v1/models", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_string_equal(af_json_get_str(json_array_get(json_object_get(j, "data"), 0), "id"),
                        "agentflow");
    json_decref(j);
    http_res_deinit(&r);
    expect_error(&f, "GET", "/nope", NULL, NULL, 404, "not_found");
    expect_error(&f, "GET", "/v1/chat/completions", NULL, NULL, 405, "method_not_allowed");
    fixture_deinit(&f);
}

/* The usage of a reply must be the sum over the modules of the flow's trace. */
static void test_chat_plain(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "chat.db");
    struct http_res r;
    const char *body = "{\"model\":\"agentflow\",\"messages\":["
                       "{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"first question\"},"
                       "{\"role\":\"assistant\",\"content\":\"first answer\"},"
                       "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is 6 "
                       "times 7?\"}]}]}";
    req(&f, "POST", "/v1/chat/completions", body, NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_string_equal(af_json_get_str(j, "object"), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(af_json_get_str(msg, "role"), "assistant");
    assert_non_null(strstr(af_json_get_str(msg, "content"), "**Answer:** 42"));
    json_t *af = json_object_get(j, "agentflow");
    assert_string_equal(af_json_get_str(af, "answer"), "42");
    json_t *steps = json_object_get(af, "steps");
    assert_int_equal(json_array_size(steps), 3);
    json_t *s1 = json_array_get(steps, 0);
    assert_string_equal(af_json_get_str(s1, "tool"), "Generalist_Solution_Generator_Tool");
    assert_string_equal(af_json_get_str(s1, "sub_goal"), "Compute 6 * 7.");
    assert_non_null(strstr(af_json_get_str(s1, "command"), "tool.execute"));
    assert_string_equal(af_json_get_str(s1, "verdict"), "CONTINUE");
    assert_string_equal(af_json_get_str(json_array_get(steps, 2), "verdict"), "STOP");
    /* usage = the sum over every LLM call the trace saw */
    json_int_t prompt = 0, completion = 0;
    size_t i;
    json_t *rec;
    int saw_context = 0;
    json_array_foreach(f.records, i, rec)
    {
        if (strcmp(af_json_get_str(rec, "type"), "llm") != 0)
            continue;
        json_t *u = json_object_get(rec, "usage");
        prompt += json_integer_value(json_object_get(u, "prompt_tokens"));
        completion += json_integer_value(json_object_get(u, "completion_tokens"));
        char *m = json_dumps(json_object_get(rec, "messages"), 0);
        if (strstr(m, "first question") && strstr(m, "first answer") && strstr(m, "Be brief."))
            saw_context = 1;
        free(m);
    }
    json_t *u = json_object_get(j, "usage");
    assert_true(prompt > 0);
    assert_int_equal(json_integer_value(json_object_get(u, "prompt_tokens")), prompt);
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), completion);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), prompt + completion);
    assert_true(saw_context); /* earlier messages went into the query */
    json_decref(j);
    http_res_deinit(&r);
    fixture_deinit(&f);
}

/* Splits an SSE body into the JSON of its data lines (in order); [DONE] is counted apart. */
static json_t *sse_events(const char *body, int *n_done)
{
    json_t *arr = json_array();
    *n_done = 0;
    for (const char *p = body; p && *p;) {
        const char *eol = strstr(p, "\n\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (strncmp(p, "data: ", 6) == 0) {
            if (len == 12 && strncmp(p + 6, "[DONE]", 6) == 0) {
                (*n_done)++;
            } else {
                json_t *j = json_loadb(p + 6, len - 6, 0, NULL);
                assert_non_null(j);
                json_array_append_new(arr, j);
            }
        }
        p = eol ? eol + 2 : NULL;
    }
    return arr;
}

static void test_chat_stream(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "stream.db");
    struct http_res r;
    req(&f, "POST", "/v1/chat/completions",
        "{\"model\":\"agentflow\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"What is 6 times 7?\"}]}",
        NULL, &r);
    assert_int_equal(r.status, 200);
    char *ct = http_res_header(&r, "Content-Type");
    assert_string_equal(ct, "text/event-stream");
    free(ct);
    int n_done = 0;
    json_t *evs = sse_events(r.body, &n_done);
    assert_int_equal(n_done, 1);
    assert_non_null(strstr(r.body, "data: [DONE]\n\n"));
    assert_int_equal(strlen(strstr(r.body, "data: [DONE]\n\n")), 14); /* the very end */
    size_t i;
    json_t *ev;
    int steps = 0, analysis = 0, finish = 0, usage = 0, content_started = 0;
    char content[1024] = "";
    json_array_foreach(evs, i, ev)
    {
        assert_string_equal(af_json_get_str(ev, "object"), "chat.completion.chunk");
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        json_t *afj = json_object_get(ev, "agentflow");
        const char *type = af_json_get_str(afj, "type");
        if (i == 0)
            assert_string_equal(af_json_get_str(json_object_get(ch, "delta"), "role"), "assistant");
        if (type && strcmp(type, "step") == 0) {
            assert_false(content_started); /* every step arrives before the answer */
            steps++;
            assert_int_equal(json_integer_value(json_object_get(afj, "step")), steps);
            assert_string_equal(af_json_get_str(afj, "tool"), "Generalist_Solution_Generator_Tool");
            assert_non_null(json_object_get(afj, "result"));
            assert_non_null(af_json_get_str(afj, "verdict"));
        }
        if (type && strcmp(type, "query_analysis") == 0)
            analysis++;
        const char *piece = af_json_get_str(json_object_get(ch, "delta"), "content");
        if (piece && *piece) {
            content_started = 1;
            strncat(content, piece, sizeof content - strlen(content) - 1);
        }
        if (af_json_get_str(ch, "finish_reason")) {
            finish++;
            assert_string_equal(af_json_get_str(ch, "finish_reason"), "stop");
            assert_string_equal(af_json_get_str(afj, "answer"), "42");
        }
        if (json_object_get(ev, "usage")) {
            usage++;
            assert_true(json_integer_value(
                            json_object_get(json_object_get(ev, "usage"), "total_tokens")) > 0);
        }
    }
    assert_int_equal(steps, 3);
    assert_int_equal(analysis, 1);
    assert_int_equal(finish, 1);
    assert_int_equal(usage, 1);
    assert_string_equal(
        content, "**Process Summary:** The tool computed 6 * 7 three times.\n**Answer:** 42");
    json_decref(evs);
    http_res_deinit(&r);
    fixture_deinit(&f);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    struct fixture f;
    struct af_serve_params sp = af_serve_default_params();
    sp.max_body = 4096;
    fixture_init(&f, SCRIPT_THREE_STEP, &sp, "bad.db");
    const char *chat = "/v1/chat/completions";
    expect_error(&f, "POST", chat, "{\"messages\": [", NULL, 400, "invalid_json");
    expect_error(&f, "POST", chat, "[1, 2]", NULL, 400, "invalid_json");
    expect_error(&f, "POST", chat, "", NULL, 400, "invalid_json");
    expect_error(&f, "POST", chat, "{\"model\":\"agentflow\"}", NULL, 400, "invalid_messages");
    expect_error(&f, "POST", chat, "{\"messages\":[]}", NULL, 400, "invalid_messages");
    expect_error(&f, "POST", chat, "{\"messages\":[42]}", NULL, 400, "invalid_messages");
    expect_error(&f, "POST", chat, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", NULL,
                 400, "no_user_message");
    expect_error(&f, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"  \"}]}", NULL,
                 400, "no_user_message");
    expect_error(&f, "POST", chat, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", NULL,
                 400, "no_user_message");
    expect_error(&f, "POST", chat,
                 "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
                 404, "model_not_found");
    expect_error(&f, "POST", chat,
                 "{\"stream\":\"yes\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
                 400, "invalid_stream");
    expect_error(
        &f, "POST", chat,
        "{\"tools\":[\"No_Such_Tool\"],\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
        400, "unknown_tool");
    expect_error(&f, "POST", chat,
                 "{\"tools\":\"Python_Code_Generator_Tool, Nope\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"q\"}]}",
                 NULL, 400, "unknown_tool");
    expect_error(&f, "POST", chat,
                 "{\"tools\":[{\"type\":\"function\"}],\"messages\":[{\"role\":\"user\","
                 "\"content\":\"q\"}]}",
                 NULL, 400, "invalid_tools");
    expect_error(&f, "POST", chat,
                 "{\"tools\":7,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL, 400,
                 "invalid_tools");
    expect_error(&f, "POST", chat,
                 "{\"max_steps\":0,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
                 400, "invalid_max_steps");
    expect_error(&f, "POST", chat,
                 "{\"max_steps\":\"3\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
                 400, "invalid_max_steps");
    expect_error(&f, "POST", chat,
                 "{\"max_time\":-1,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", NULL,
                 400, "invalid_max_time");
    /* a body over --max-body, declared and not */
    char big[8192];
    memset(big, ' ', sizeof big);
    memcpy(big, "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", 44);
    big[sizeof big - 1] = '\0';
    expect_error(&f, "POST", chat, big, NULL, 413, "body_too_large");
    expect_error(&f, "POST", "/v1/runs", "{}", NULL, 400, "no_query");
    expect_error(&f, "POST", "/v1/runs", "{\"query\":\"q\",\"tools\":[\"x\"]}", NULL, 400,
                 "unknown_tool");
    expect_error(&f, "GET", "/v1/runs/run_nothing", NULL, NULL, 404, "run_not_found");
    expect_error(&f, "GET", "/v1/runs/run_nothing/events", NULL, NULL, 404, "run_not_found");
    expect_error(&f, "GET", "/v1/runs/run_nothing/trace", NULL, NULL, 404, "run_not_found");
    expect_error(&f, "GET", "/v1/runs?limit=0", NULL, NULL, 400, "invalid_limit");
    /* a body not declared as JSON (what a form on another site can send) */
    const char *types[] = {"text/plain", "application/x-www-form-urlencoded", "",
                           "multipart/form-data"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        char curl_url[128];
        snprintf(curl_url, sizeof curl_url, "%s/v1/runs", f.base);
        struct http_req ctq = {.method = "POST",
                               .url = curl_url,
                               .body = "{\"query\":\"What is 6 times 7?\"}",
                               .content_type = types[t]};
        struct http_res cr;
        assert_int_equal(http_do(&ctq, &cr), 0);
        assert_int_equal(cr.status, 415);
        assert_non_null(strstr(cr.body, "invalid_content_type"));
        http_res_deinit(&cr);
    }
    /* binary garbage, then the server still answers */
    const char junk[] = "\x01\xff\xfe{\"\x80\x81";
    struct http_req rq = {.method = "POST", .body = junk, .body_len = sizeof junk - 1};
    char url[128];
    snprintf(url, sizeof url, "%s%s", f.base, chat);
    rq.url = url;
    struct http_res r;
    assert_int_equal(http_do(&rq, &r), 0);
    assert_int_equal(r.status, 400);
    http_res_deinit(&r);
    req(&f, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    struct af_serve_stats st;
    af_serve_stats(f.srv, &st);
    assert_int_equal(st.completed + st.failed + st.cancelled, 0); /* no flow ever started */
    fixture_deinit(&f);
}

/* Per-request tools and max_steps reach the flow: the planner sees only the tools asked for. */
static void test_request_options(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "opts.db");
    struct http_res r;
    req(&f, "POST", "/v1/chat/completions",
        "{\"max_steps\":1,\"max_time\":60,\"tools\":[\"generalist solution generator tool\"],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"What is 6 times 7?\"}]}",
        NULL, &r);
    assert_int_equal(r.status, 200);
    json_t *j = json_of(&r);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "agentflow"), "steps")), 1);
    json_decref(j);
    http_res_deinit(&r);
    size_t i;
    json_t *rec;
    int planner_calls = 0;
    json_array_foreach(f.records, i, rec)
    {
        if (strcmp(af_json_get_str(rec, "type"), "llm") != 0 ||
            strcmp(af_json_get_str(rec, "module"), "planner") != 0)
            continue;
        planner_calls++;
        char *m = json_dumps(json_object_get(rec, "messages"), 0);
        assert_non_null(strstr(m, "Generalist_Solution_Generator_Tool"));
        assert_null(strstr(m, "Python_Code_Generator_Tool"));
        free(m);
    }
    assert_int_equal(planner_calls, 1);
    fixture_deinit(&f);
}

static void test_auth(void **state)
{
    (void)state;
    struct fixture f;
    struct af_serve_params sp = af_serve_default_params();
    sp.api_key = "s3cret-key";
    fixture_init(&f, SCRIPT_THREE_STEP, &sp, "auth.db");
    expect_error(&f, "GET", "/v1/models", NULL, NULL, 401, "invalid_api_key");
    expect_error(&f, "GET", "/v1/models", NULL, "wrong", 401, "invalid_api_key");
    expect_error(&f, "GET", "/v1/models", NULL, "s3cret-ke", 401, "invalid_api_key");
    expect_error(&f, "GET", "/v1/models", NULL, "s3cret-key2", 401, "invalid_api_key");
    expect_error(&f, "GET", "/metrics", NULL, NULL, 401, "invalid_api_key");
    expect_error(&f, "GET", "/v1/runs", NULL, NULL, 401, "invalid_api_key");
    expect_error(&f, "POST", "/v1/chat/completions", CHAT_6X7, NULL, 401, "invalid_api_key");
    struct http_res r;
    req(&f, "GET", "/healthz", NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    req(&f, "GET", "/v1/models", NULL, "s3cret-key", &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    req(&f, "POST", "/v1/chat/completions", CHAT_6X7, "s3cret-key", &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    fixture_deinit(&f);
}

struct bg_req {
    struct fixture *f;
    const char *body;
    struct http_res res;
    pthread_t th;
};

static void *bg_main(void *arg)
{
    struct bg_req *b = arg;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", b->f->base);
    struct http_req rq = {.method = "POST", .url = url, .body = b->body, .timeout_s = 300};
    (void)http_do(&rq, &b->res);
    return NULL;
}

static int one_running_one_queued(const struct af_serve_stats *st, void *user)
{
    (void)user;
    return st->running == 1 && st->queued == 1;
}

/* With one slot and one queue place taken, the next request gets 429 with Retry-After. Then a
 * shutdown with no grace cancels both: each client gets a 503 error object. */
static void test_429_and_shutdown(void **state)
{
    (void)state;
    struct fixture f;
    struct af_serve_params sp = af_serve_default_params();
    sp.max_concurrent = 1;
    sp.queue = 1;
    fixture_init(&f, SCRIPT_ENDLESS, &sp, "busy.db");
    struct bg_req bg[2] = {{.f = &f, .body = CHAT_6X7}, {.f = &f, .body = CHAT_6X7}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&bg[i].th, NULL, bg_main, &bg[i]), 0);
    wait_for(&f, one_running_one_queued, NULL);
    struct http_res r;
    req(&f, "POST", "/v1/chat/completions", CHAT_6X7, NULL, &r);
    assert_int_equal(r.status, 429);
    char *ra = http_res_header(&r, "Retry-After");
    assert_non_null(ra);
    assert_true(atoi(ra) >= 1);
    free(ra);
    json_t *j = json_of(&r);
    assert_string_equal(af_json_get_str(json_object_get(j, "error"), "code"),
                        "rate_limit_exceeded");
    json_decref(j);
    http_res_deinit(&r);
    req(&f, "POST", "/v1/runs", "{\"query\":\"q\"}", NULL, &r);
    assert_int_equal(r.status, 429);
    http_res_deinit(&r);
    req(&f, "GET", "/metrics", NULL, NULL, &r);
    assert_non_null(strstr(r.body, "agentflow_flows_running 1\n"));
    assert_non_null(strstr(r.body, "agentflow_queue_length 1\n"));
    assert_non_null(strstr(r.body, "agentflow_rejected_total 2\n"));
    http_res_deinit(&r);
    af_serve_shutdown(f.srv, 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(bg[i].th, NULL);
        assert_int_equal(bg[i].res.status, 503);
        json_t *root = json_of(&bg[i].res);
        assert_string_equal(af_json_get_str(json_object_get(root, "error"), "code"), "cancelled");
        json_decref(root);
        http_res_deinit(&bg[i].res);
    }
    struct af_serve_stats st;
    af_serve_stats(f.srv, &st);
    assert_int_equal(st.cancelled, 2);
    assert_int_equal(st.completed, 0);
    assert_int_equal(st.running + st.queued, 0);
    fixture_deinit(&f);
}

static int n_cancelled(const struct af_serve_stats *st, void *user)
{
    return st->cancelled >= *(uint64_t *)user && st->running == 0;
}

static int stop_after_step(void *user, const char *body)
{
    (void)user;
    return strstr(body, "\"type\":\"step\"") != NULL;
}

/* A client that goes away cancels its flow: plain (a client timeout) and streamed (the
 * client hangs up after the first step). The flows would otherwise run 1000 slow steps. */
static void test_disconnect_cancels(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_ENDLESS, NULL, "gone.db");
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", f.base);
    struct http_req rq = {.method = "POST", .url = url, .body = CHAT_6X7, .timeout_s = 0.5};
    struct http_res r;
    assert_int_equal(http_do(&rq, &r), -1); /* timed out: no answer */
    http_res_deinit(&r);
    uint64_t want = 1;
    wait_for(&f, n_cancelled, &want);
    struct http_req rs = {.method = "POST",
                          .url = url,
                          .body = "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":"
                                  "\"What is 6 times 7?\"}]}",
                          .stop = stop_after_step};
    (void)http_do(&rs, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "\"type\":\"step\""));
    http_res_deinit(&r);
    want = 2;
    wait_for(&f, n_cancelled, &want);
    struct af_serve_stats st;
    af_serve_stats(f.srv, &st);
    assert_int_equal(st.completed, 0);
    assert_int_equal(st.cancelled, 2);
    fixture_deinit(&f);
}

/* A run is followed live over SSE, read back whole, listed, and still there after a restart
 * on the same database. */
static void test_runs_survive_restart(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "persist.db");
    struct http_res r;
    req(&f, "POST", "/v1/runs", "{\"query\":\"What is 6 times 7?\",\"max_steps\":5}", NULL, &r);
    assert_int_equal(r.status, 201);
    json_t *j = json_of(&r);
    char id[64];
    snprintf(id, sizeof id, "%s", af_json_get_str(j, "id"));
    json_decref(j);
    http_res_deinit(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%s/events", id);
    req(&f, "GET", path, NULL, NULL, &r); /* ends when the run ends */
    assert_int_equal(r.status, 200);
    int n_done;
    json_t *evs = sse_events(r.body, &n_done);
    assert_int_equal(json_array_size(evs), 5); /* analysis, 3 steps, answer */
    assert_string_equal(af_json_get_str(json_array_get(evs, 0), "type"), "query_analysis");
    assert_string_equal(af_json_get_str(json_array_get(evs, 3), "type"), "step");
    assert_string_equal(af_json_get_str(json_array_get(evs, 4), "type"), "answer");
    assert_string_equal(af_json_get_str(json_array_get(evs, 4), "answer"), "42");
    json_decref(evs);
    http_res_deinit(&r);
    for (int round = 0; round < 2; round++) {
        snprintf(path, sizeof path, "/v1/runs/%s", id);
        req(&f, "GET", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        j = json_of(&r);
        assert_string_equal(af_json_get_str(j, "state"), "done");
        assert_string_equal(af_json_get_str(j, "answer"), "42");
        assert_string_equal(af_json_get_str(j, "query"), "What is 6 times 7?");
        assert_int_equal(json_array_size(json_object_get(j, "events")), 5);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(j, "options"), "max_steps")), 5);
        assert_int_equal(json_array_size(json_object_get(json_object_get(j, "result"), "memory")),
                         3);
        json_decref(j);
        http_res_deinit(&r);
        req(&f, "GET", "/v1/runs", NULL, NULL, &r);
        j = json_of(&r);
        assert_string_equal(af_json_get_str(json_array_get(json_object_get(j, "data"), 0), "id"),
                            id);
        json_decref(j);
        http_res_deinit(&r);
        snprintf(path, sizeof path, "/v1/runs/%s/events", id);
        req(&f, "GET", path, NULL, NULL, &r);
        evs = sse_events(r.body, &n_done);
        assert_int_equal(json_array_size(evs), 5);
        json_decref(evs);
        http_res_deinit(&r);
        /* the trace, as `run --trace` writes it: 14 LLM calls, 3 tool calls, the final record */
        snprintf(path, sizeof path, "/v1/runs/%s/trace", id);
        req(&f, "GET", path, NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        int n_llm = 0, n_tool = 0, n_final = 0;
        for (char *line = r.body, *nl; line && *line; line = nl ? nl + 1 : NULL) {
            nl = strchr(line, '\n');
            assert_non_null(nl);
            json_t *rec = json_loadb(line, (size_t)(nl - line), 0, NULL);
            assert_non_null(rec);
            assert_string_equal(af_json_get_str(rec, "query_id"), id);
            const char *type = af_json_get_str(rec, "type");
            n_llm += strcmp(type, "llm") == 0;
            n_tool += strcmp(type, "tool") == 0;
            if (strcmp(type, "final") == 0) {
                n_final++;
                assert_string_equal(af_json_get_str(rec, "answer"), "42");
                assert_null(nl[1] ? "the final record is not last" : NULL);
            }
            json_decref(rec);
        }
        assert_int_equal(n_llm, 14);
        assert_int_equal(n_tool, 3);
        assert_int_equal(n_final, 1);
        http_res_deinit(&r);
        /* restart on the same file */
        af_serve_shutdown(f.srv, 0);
        af_serve_free(f.srv);
        struct af_serve_params sp = af_serve_default_params();
        fixture_start_server(&f, &sp);
    }
    fixture_deinit(&f);
}

/* A flow that lasts longer than the idle timeout of connections still gets its answer, plain
 * and streamed: waiting for a flow is not idleness. (The solve makes 14 calls of 250 ms, 5
 * of them before the first event.) */
static void test_long_flow_outlives_idle_timeout(void **state)
{
    (void)state;
    struct fixture f;
    struct af_serve_params sp = af_serve_default_params();
    sp.connection_timeout_s = 1;
    fixture_init(&f, SCRIPT_SLOW, &sp, "idle.db");
    struct http_res r;
    req(&f, "POST", "/v1/chat/completions", CHAT_6X7, NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "**Answer:** 42"));
    http_res_deinit(&r);
    req(&f, "POST", "/v1/chat/completions",
        "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"What is 6 times 7?\"}]}",
        NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "data: [DONE]"));
    http_res_deinit(&r);
    fixture_deinit(&f);
}

static void test_metrics(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f, SCRIPT_THREE_STEP, NULL, "metrics.db");
    struct http_res r;
    req(&f, "POST", "/v1/chat/completions", CHAT_6X7, NULL, &r);
    assert_int_equal(r.status, 200);
    http_res_deinit(&r);
    expect_error(&f, "POST", "/v1/chat/completions", "{", NULL, 400, "invalid_json");
    const char *want[] = {
        "agentflow_http_requests_total{route=\"chat\",code=\"200\"} 1\n",
        "agentflow_http_requests_total{route=\"chat\",code=\"400\"} 1\n",
        "agentflow_flows_total{outcome=\"ok\"} 1\n",
        "agentflow_llm_calls_total{module=\"planner\"} 3\n",
        "agentflow_llm_calls_total{module=\"verifier\"} 3\n",
        "agentflow_llm_tokens_total{module=\"planner\",kind=\"prompt\"} ",
        "agentflow_tool_calls_total{tool=\"Generalist_Solution_Generator_Tool\"} 3\n",
        "agentflow_tool_errors_total{tool=\"Generalist_Solution_Generator_Tool\"} 0\n",
        "agentflow_solve_seconds_count 1\n",
        "agentflow_solve_seconds_bucket{le=\"+Inf\"} 1\n",
        "# TYPE agentflow_solve_seconds histogram\n",
        "agentflow_flows_running 0\n",
    };
    /* A request is counted when libmicrohttpd reports it complete (so that a client gone
     * mid-answer counts as 499), which can come after its client has read the answer: scrape
     * until the last request shows, for up to 10 s. */
    for (int tries = 0;; tries++) {
        req(&f, "GET", "/metrics", NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        size_t found = 0;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            found += strstr(r.body, want[i]) != NULL;
        if (found == sizeof want / sizeof want[0] || tries == 100)
            break;
        http_res_deinit(&r);
        usleep(100 * 1000);
    }
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!strstr(r.body, want[i]))
            fprintf(stderr, "missing: %s\nin:\n%s\n", want[i], r.body);
        assert_non_null(strstr(r.body, want[i]));
    }
    http_res_deinit(&r);
    fixture_deinit(&f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_serve_XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    http_client_global_init();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models_healthz_routes),
        cmocka_unit_test(test_chat_plain),
        cmocka_unit_test(test_chat_stream),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_request_options),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_429_and_shutdown),
        cmocka_unit_test(test_disconnect_cancels),
        cmocka_unit_test(test_runs_survive_restart),
        cmocka_unit_test(test_long_flow_outlives_idle_timeout),
        cmocka_unit_test(test_metrics),
    };
    return cmocka_run_group_tests_name("serve", tests, setup, teardown);
}
