/*
 * test_llm_openai.c - the OpenAI-compatible HTTP back-end against the loopback fake server:
 * request encoding, reply parsing, retries (429, 5xx, Retry-After, budget), timeouts,
 * connection errors, size limits, bad bodies and concurrent calls on one handle. Also the
 * fake server's own scripting (queue, rules, default), the retry arithmetic, and the response
 * cache in front of this back-end (its key).
 *
 * Time bounds are generous: the machine may be slow and noisy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentflow/llm.h"
#include "core/clock.h"
#include "llm/openai_int.h"
#include "support/fake_server.h"

#define N_THREADS 8
#define CALLS_PER_THREAD 16

/* Params for tests: short backoff so retry tests stay fast. */
static struct af_llm_openai_params test_params(const char *url)
{
    struct af_llm_openai_params p = af_llm_openai_default_params();
    p.base_url = url;
    p.model = "test-model";
    p.connect_timeout_ms = 5000;
    p.timeout_ms = 30000;
    p.backoff_base_ms = 10;
    p.backoff_max_ms = 50;
    return p;
}

static struct af_llm *new_llm(const struct af_llm_openai_params *p)
{
    char err[512] = "";
    struct af_llm *llm = af_llm_openai_new(p, err, sizeof err);
    if (!llm)
        fprintf(stderr, "af_llm_openai_new: %s\n", err);
    assert_non_null(llm);
    return llm;
}

/* One user message `text` with default sampling. */
static int chat_user(struct af_llm *llm, const char *text, struct af_llm_reply *r)
{
    struct af_msg m = {.role = "user", .content = text};
    struct af_llm_request req = {.msgs = &m, .n_msgs = 1, .sampling = af_llm_default_sampling()};
    af_llm_reply_init(r);
    return af_llm_chat(llm, &req, r);
}

static void assert_contains(const char *s, const char *needle)
{
    if (!s || !strstr(s, needle))
        fprintf(stderr, "expected '%s' in: %s\n", needle, s ? s : "(null)");
    assert_non_null(s);
    assert_non_null(strstr(s ? s : "", needle));
}

static void push_chat(struct fake_server *fs, const char *content)
{
    char *body = fake_server_chat_body(content);
    fake_server_push(fs, 200, body, NULL, NULL, 0);
    free(body);
}

/* --- success paths ---------------------------------------------------------------------- */

static void check_sent_body(struct fake_server *fs)
{
    char *sent = fake_server_last_request(fs);
    json_error_t je;
    json_t *j = json_loads(sent, 0, &je);
    free(sent);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "test-model");
    json_t *msgs = json_object_get(j, "messages");
    assert_int_equal(json_array_size(msgs), 2);
    json_t *m1 = json_array_get(msgs, 1);
    assert_string_equal(json_string_value(json_object_get(m1, "role")), "user");
    assert_string_equal(json_string_value(json_object_get(m1, "content")), "Say \"hi\"\n");
    assert_true(json_number_value(json_object_get(j, "temperature")) == 0.5);
    assert_true(json_number_value(json_object_get(j, "top_p")) == 0.9);
    assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), 77);
    assert_int_equal(json_integer_value(json_object_get(j, "seed")), 1234);
    json_t *stop = json_object_get(j, "stop");
    assert_int_equal(json_array_size(stop), 2);
    assert_string_equal(json_string_value(json_array_get(stop, 1)), "STOP");
    assert_true(json_is_false(json_object_get(j, "stream")));
    assert_null(json_object_get(j, "frequency_penalty"));
    assert_null(json_object_get(j, "ignore_eos")); /* only sent when set */
    json_decref(j);
}

static void test_ok_reply_and_request(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_push(fs, 200,
                     "{\"id\":\"x\",\"model\":\"served-model\",\"choices\":[{\"index\":0,"
                     "\"message\":{\"role\":\"assistant\",\"content\":\"Hello there\"},"
                     "\"finish_reason\":\"length\"}],"
                     "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34}}",
                     NULL, NULL, 0);
    char url[128];
    snprintf(url, sizeof url, "%s//", fake_server_url(fs)); /* trailing slashes are trimmed */
    struct af_llm_openai_params p = test_params(url);
    p.api_key = "sk-test";
    struct af_llm *llm = new_llm(&p);
    assert_string_equal(af_llm_kind(llm), "openai");
    assert_string_equal(af_llm_describe(llm), fake_server_url(fs));

    struct af_msg msgs[2] = {{"system", "You are terse."}, {"user", "Say \"hi\"\n"}};
    struct af_llm_request req = {.msgs = msgs, .n_msgs = 2, .sampling = af_llm_default_sampling()};
    req.sampling.temperature = 0.5;
    req.sampling.top_p = 0.9;
    req.sampling.max_tokens = 77;
    req.sampling.has_seed = 1;
    req.sampling.seed = 1234;
    req.sampling.n_stop = 2;
    req.sampling.stop[0] = "END";
    req.sampling.stop[1] = "STOP";
    struct af_llm_reply r;
    af_llm_reply_init(&r);
    assert_int_equal(af_llm_chat(llm, &req, &r), AF_OK);
    assert_string_equal(r.text, "Hello there");
    assert_string_equal(r.model, "served-model");
    assert_string_equal(r.finish_reason, "length");
    assert_int_equal(r.prompt_tokens, 12);
    assert_int_equal(r.completion_tokens, 34);
    assert_int_equal(r.n_attempts, 1);
    assert_int_equal(r.http_status, 200);
    assert_int_equal(r.err, AF_OK);
    assert_null(r.errmsg);
    assert_true(r.latency_ms >= 0);
    af_llm_reply_deinit(&r);

    check_sent_body(fs);
    char *path = fake_server_last_path(fs);
    assert_string_equal(path, "/v1/chat/completions");
    free(path);
    char *auth = fake_server_last_header(fs, "authorization");
    assert_non_null(auth);
    assert_string_equal(auth, "Bearer sk-test");
    free(auth);
    char *ct = fake_server_last_header(fs, "Content-Type");
    assert_non_null(ct);
    assert_string_equal(ct, "application/json");
    free(ct);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_optional_fields_and_rules(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_add_rule(fs, "capital of France", "Paris.");
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    struct af_llm *llm = new_llm(&p);
    struct af_msg m = {"user", "What is the capital of France?"};
    struct af_llm_request req = {.msgs = &m, .n_msgs = 1, .sampling = af_llm_default_sampling()};
    req.model = "override-model";
    req.sampling.frequency_penalty = 0.25;
    req.sampling.ignore_eos = 1;
    struct af_llm_reply r;
    af_llm_reply_init(&r);
    assert_int_equal(af_llm_chat(llm, &req, &r), AF_OK);
    assert_string_equal(r.text, "Paris.");
    assert_string_equal(r.model, "override-model"); /* the rule echoes the request's model */
    assert_string_equal(r.finish_reason, "stop");
    assert_true(r.prompt_tokens > 0);
    assert_int_equal(r.completion_tokens, 2); /* 6 bytes / 4, rounded up */
    af_llm_reply_deinit(&r);

    char *sent = fake_server_last_request(fs);
    json_t *j = json_loads(sent, 0, NULL);
    free(sent);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "model")), "override-model");
    assert_true(json_number_value(json_object_get(j, "frequency_penalty")) == 0.25);
    assert_true(json_is_true(json_object_get(j, "ignore_eos")));
    assert_null(json_object_get(j, "seed"));
    assert_null(json_object_get(j, "stop"));
    json_decref(j);
    assert_null(fake_server_last_header(fs, "Authorization"));
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_queue_rules_default_priority(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_retries = 0;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    /* nothing scripted: a clear, non-retried 404 */
    assert_int_equal(chat_user(llm, "hello", &r), AF_EBACKEND);
    assert_contains(r.errmsg, "no matching rule");
    af_llm_reply_deinit(&r);

    fake_server_add_rule(fs, "hello", "from rule");
    char *dflt = fake_server_chat_body("from default");
    fake_server_set_default(fs, 200, dflt, 0);
    free(dflt);
    push_chat(fs, "from queue");
    const char *expect[][2] = {
        {"hello", "from queue"}, {"hello", "from rule"}, {"other", "from default"}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chat_user(llm, expect[i][0], &r), AF_OK);
        assert_string_equal(r.text, expect[i][1]);
        af_llm_reply_deinit(&r);
    }
    assert_int_equal(fake_server_request_count(fs), 4);
    af_llm_free(llm);
    fake_server_stop(fs);
}

/* A request body far larger than one MHD upload chunk arrives whole. */
static void test_large_request(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_add_rule(fs, "THE END", "seen");
    size_t n = (size_t)3 << 20;
    char *big = malloc(n + 16);
    assert_non_null(big);
    memset(big, 'q', n);
    memcpy(big + n, " THE END", 9);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, big, &r), AF_OK);
    assert_string_equal(r.text, "seen");
    af_llm_reply_deinit(&r);
    char *sent = fake_server_last_request(fs);
    assert_true(strlen(sent) > n);
    free(sent);
    free(big);
    af_llm_free(llm);
    fake_server_stop(fs);
}

/* --- retries ---------------------------------------------------------------------------- */

static void test_429_then_ok(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_push(fs, 429, "{\"error\":{\"message\":\"slow down\"}}", "Retry-After", "0", 0);
    push_chat(fs, "after 429");
    /* an HTTP date in the past means "now" */
    fake_server_push(fs, 503, "busy", "Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT", 0);
    push_chat(fs, "after 503");
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.backoff_base_ms = 5000; /* would make the test slow if Retry-After were ignored */
    p.backoff_max_ms = 5000;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_OK);
    assert_string_equal(r.text, "after 429");
    assert_int_equal(r.n_attempts, 2);
    assert_int_equal(r.http_status, 200);
    af_llm_reply_deinit(&r);
    assert_int_equal(chat_user(llm, "hi", &r), AF_OK);
    assert_string_equal(r.text, "after 503");
    assert_int_equal(r.n_attempts, 2);
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 4);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_500_storm(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_set_default(fs, 500, "{\"error\":{\"message\":\"model is overloaded\"}}", 0);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_retries = 3;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    double t0 = af_clock_ms();
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_true(af_clock_ms() - t0 < 20000);
    assert_null(r.text);
    assert_int_equal(r.err, AF_EBACKEND);
    assert_int_equal(r.n_attempts, 4);
    assert_int_equal(r.http_status, 500);
    assert_contains(r.errmsg, fake_server_url(fs));
    assert_contains(r.errmsg, "HTTP 500");
    assert_contains(r.errmsg, "model is overloaded");
    assert_contains(r.errmsg, "4 attempts");
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 4);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_retry_budget(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    for (int i = 0; i < 3; i++)
        fake_server_push(fs, 503, "{\"error\":{\"message\":\"warming up\"}}", "Retry-After", "5",
                         0);
    push_chat(fs, "too late");
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_retries = 50;
    p.backoff_max_ms = 10000;
    p.retry_budget_ms = 1000; /* the 5 s Retry-After does not fit */
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_int_equal(r.n_attempts, 1);
    assert_contains(r.errmsg, "warming up");
    assert_contains(r.errmsg, "retry_budget_ms");
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 1);
    af_llm_free(llm);
    fake_server_stop(fs);
}

/* --- failures that are not retried ------------------------------------------------------ */

static void expect_parse_error(struct af_llm *llm, struct fake_server *fs, const char *body,
                               const char *needle)
{
    size_t before = fake_server_request_count(fs);
    fake_server_push(fs, 200, body, NULL, NULL, 0);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_EPARSE);
    assert_null(r.text);
    assert_int_equal(r.n_attempts, 1);
    assert_contains(r.errmsg, fake_server_url(fs));
    assert_contains(r.errmsg, needle);
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), before + 1);
}

static void test_bad_bodies(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_retries = 3;
    struct af_llm *llm = new_llm(&p);
    expect_parse_error(llm, fs, "{\"choices\": [", "malformed JSON body");
    expect_parse_error(llm, fs, "{\"choices\": [oops]}", "line 1, column");
    expect_parse_error(llm, fs, "", "malformed JSON");
    expect_parse_error(llm, fs, "{\"choices\": []}", "missing choices[0].message.content");
    expect_parse_error(llm, fs, "[1, 2]", "missing choices[0].message.content");
    expect_parse_error(llm, fs, "{\"choices\":[{\"message\":{\"content\":7}}]}",
                       "missing choices[0].message.content");
    char *null_content = fake_server_chat_body(NULL);
    expect_parse_error(llm, fs, null_content, "content is null");
    free(null_content);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_4xx_not_retried(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_retries = 5;
    struct af_llm *llm = new_llm(&p);
    fake_server_push(fs, 400, "{\"error\":{\"message\":\"bad model\"}}", NULL, NULL, 0);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_int_equal(r.n_attempts, 1);
    assert_int_equal(r.http_status, 400);
    assert_contains(r.errmsg, "HTTP 400");
    assert_contains(r.errmsg, "bad model");
    assert_contains(r.errmsg, fake_server_url(fs));
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 1);

    /* no JSON message: the start of the body is quoted, cut at about 200 bytes */
    char body[1200];
    memset(body, 'x', sizeof body - 1);
    body[sizeof body - 1] = '\0';
    memcpy(body, "<html>denied", 12);
    fake_server_push(fs, 401, body, NULL, NULL, 0);
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_int_equal(r.n_attempts, 1);
    assert_contains(r.errmsg, "HTTP 401");
    assert_contains(r.errmsg, "<html>denied");
    assert_true(strlen(r.errmsg) < 600);
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 2);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_unknown_path(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    char url[160];
    snprintf(url, sizeof url, "%s/nope", fake_server_url(fs));
    struct af_llm_openai_params p = test_params(url);
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_int_equal(r.http_status, 404);
    assert_contains(r.errmsg, "/v1/nope/chat/completions");
    assert_contains(r.errmsg, "unknown path");
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_too_big(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.max_response_bytes = 1024;
    p.max_retries = 3;
    struct af_llm *llm = new_llm(&p);
    char big[4096];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    push_chat(fs, big);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_ETOOBIG);
    assert_null(r.text);
    assert_int_equal(r.n_attempts, 1);
    assert_contains(r.errmsg, "max_response_bytes");
    assert_contains(r.errmsg, "1024");
    assert_contains(r.errmsg, fake_server_url(fs));
    af_llm_reply_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), 1);

    /* a huge error body is only quoted, never an AF_ETOOBIG */
    fake_server_push(fs, 400, big, NULL, NULL, 0);
    assert_int_equal(chat_user(llm, "hi", &r), AF_EBACKEND);
    assert_contains(r.errmsg, "HTTP 400");
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
    fake_server_stop(fs);
}

static void test_timeout(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    char *body = fake_server_chat_body("too slow");
    fake_server_push(fs, 200, body, NULL, NULL, 3000);
    free(body);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    p.timeout_ms = 300;
    p.max_retries = 0;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_ETIMEOUT);
    assert_null(r.text);
    assert_int_equal(r.n_attempts, 1);
    assert_contains(r.errmsg, fake_server_url(fs));
    assert_contains(r.errmsg, "timed out");
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
    fake_server_stop(fs); /* cuts the server's 3 s delay short */
}

static void test_connection_refused(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    int port = fake_server_port(fs);
    fake_server_stop(fs); /* nothing listens there now */
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    struct af_llm_openai_params p = test_params(url);
    p.max_retries = 1;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_reply r;
    assert_int_equal(chat_user(llm, "hi", &r), AF_EIO);
    assert_null(r.text);
    assert_int_equal(r.n_attempts, 2); /* connection errors are retried */
    assert_int_equal(r.http_status, 0);
    assert_contains(r.errmsg, url);
    assert_contains(r.errmsg, "connection failed");
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
}

static void test_bad_params(void **state)
{
    (void)state;
    char err[256] = "";
    struct af_llm_openai_params p = af_llm_openai_default_params();
    assert_null(af_llm_openai_new(&p, err, sizeof err));
    assert_contains(err, "base_url");
    p.base_url = "http://127.0.0.1:1/v1";
    p.timeout_ms = 0;
    assert_null(af_llm_openai_new(&p, err, sizeof err));
    assert_contains(err, "timeout_ms");
    p = af_llm_openai_default_params();
    p.base_url = "http://127.0.0.1:1/v1";
    p.api_key = "abc\r\nX-Evil: 1";
    assert_null(af_llm_openai_new(&p, err, sizeof err));
    assert_contains(err, "api_key");

    p.api_key = NULL;
    struct af_llm *llm = new_llm(&p);
    struct af_llm_request req = {.msgs = NULL, .n_msgs = 0, .sampling = af_llm_default_sampling()};
    struct af_llm_reply r;
    af_llm_reply_init(&r);
    assert_int_equal(af_llm_chat(llm, &req, &r), AF_EINVAL);
    assert_contains(r.errmsg, "no messages");
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
}

/* --- concurrency ------------------------------------------------------------------------ */

struct worker {
    struct af_llm *llm;
    int id;
    int failures;
};

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        char q[64], want[64];
        snprintf(q, sizeof q, "question from thread-%d.", w->id);
        snprintf(want, sizeof want, "answer for %d", w->id);
        struct af_llm_reply r;
        if (chat_user(w->llm, q, &r) != AF_OK || !r.text || strcmp(r.text, want) != 0) {
            fprintf(stderr, "thread %d call %d: %s\n", w->id, i, r.errmsg ? r.errmsg : r.text);
            w->failures++;
        }
        af_llm_reply_deinit(&r);
    }
    return NULL;
}

static void test_concurrent_calls(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_set_delay(fs, 5); /* keep several requests in flight at once */
    for (int i = 0; i < N_THREADS; i++) {
        char m[32], a[32];
        snprintf(m, sizeof m, "thread-%d.", i);
        snprintf(a, sizeof a, "answer for %d", i);
        fake_server_add_rule(fs, m, a);
    }
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    struct af_llm *llm = new_llm(&p);
    pthread_t th[N_THREADS];
    struct worker w[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (struct worker){.llm = llm, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, run_worker, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
    }
    assert_int_equal(failures, 0);
    assert_int_equal(fake_server_request_count(fs), N_THREADS * CALLS_PER_THREAD);
    af_llm_free(llm);
    fake_server_stop(fs);
}

/* --- retry arithmetic ------------------------------------------------------------------- */

static void test_retry_helpers(void **state)
{
    (void)state;
    double ms = -1;
    assert_int_equal(openai_parse_retry_after(" 7 \r\n", 0, &ms), 0);
    assert_true(ms == 7000);
    assert_int_equal(openai_parse_retry_after("0", 0, &ms), 0);
    assert_true(ms == 0);
    const time_t date = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
    assert_int_equal(openai_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date - 5, &ms), 0);
    assert_true(ms == 5000);
    assert_int_equal(openai_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date + 60, &ms), 0);
    assert_true(ms == 0);
    assert_int_equal(openai_parse_retry_after("soon", 0, &ms), -1);
    assert_int_equal(openai_parse_retry_after("", 0, &ms), -1);
    assert_int_equal(openai_parse_retry_after("12abc", 0, &ms), -1);
    assert_int_equal(openai_parse_retry_after(NULL, 0, &ms), -1);

    assert_true(openai_status_retryable(429));
    assert_true(openai_status_retryable(500));
    assert_true(openai_status_retryable(503));
    assert_false(openai_status_retryable(400));
    assert_false(openai_status_retryable(401));
    assert_false(openai_status_retryable(404));
    assert_false(openai_status_retryable(200));

    uint64_t rng = openai_rng_seed();
    assert_true(rng != 0);
    double lo = 1e9, hi = -1;
    for (int retry = 0; retry < 12; retry++) {
        double cap = 100.0 * (double)(1 << retry);
        if (cap > 3000)
            cap = 3000;
        for (int k = 0; k < 200; k++) {
            double w = openai_backoff_ms(retry, 100, 3000, &rng);
            assert_true(w >= 0 && w <= cap);
            if (retry == 11) {
                lo = w < lo ? w : lo;
                hi = w > hi ? w : hi;
            }
        }
    }
    assert_true(hi - lo > 100); /* jitter spreads the waits */
    assert_true(openai_backoff_ms(1000, 100, 3000, &rng) <= 3000);
    assert_true(openai_backoff_ms(3, 0, 3000, &rng) == 0);
}

/* The response cache over this back-end: a repeated greedy call is answered from the cache,
 * and ignore_eos is part of the key (a call that ignores EOS is not the same call). */
static void test_cache_key_ignore_eos(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_set_default(fs, 200, "{\"choices\":[{\"message\":{\"content\":\"ok\"}}]}", 0);
    struct af_llm_openai_params p = test_params(fake_server_url(fs));
    struct af_llm *llm = new_llm(&p);
    char dir[] = "/tmp/af_cache_XXXXXX", path[64], err[512] = "";
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/cache.db", dir);
    struct af_llm_cache *c = NULL;
    assert_int_equal(af_llm_cache_open(path, &c, err, sizeof err), AF_OK);
    struct af_llm *cached = af_llm_cache_wrap(c, llm, 0);
    struct af_msg m = {"user", "Same question."};
    struct af_llm_request req = {.msgs = &m, .n_msgs = 1, .sampling = af_llm_default_sampling()};
    const int eos[] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++) {
        req.sampling.ignore_eos = eos[i];
        struct af_llm_reply r;
        af_llm_reply_init(&r);
        assert_int_equal(af_llm_chat(cached, &req, &r), AF_OK);
        assert_string_equal(r.text, "ok");
        assert_int_equal(r.n_attempts, i % 2 ? 0 : 1); /* the second of each pair is a hit */
        af_llm_reply_deinit(&r);
    }
    assert_int_equal(fake_server_request_count(fs), 2);
    uint64_t hits = 0, misses = 0;
    af_llm_cache_stats(c, &hits, &misses);
    assert_int_equal(hits, 2);
    assert_int_equal(misses, 2);
    af_llm_free(cached);
    af_llm_cache_close(c);
    af_llm_free(llm);
    fake_server_stop(fs);
    unlink(path);
    char side[96];
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_reply_and_request),
        cmocka_unit_test(test_optional_fields_and_rules),
        cmocka_unit_test(test_queue_rules_default_priority),
        cmocka_unit_test(test_large_request),
        cmocka_unit_test(test_429_then_ok),
        cmocka_unit_test(test_500_storm),
        cmocka_unit_test(test_retry_budget),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_4xx_not_retried),
        cmocka_unit_test(test_unknown_path),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_connection_refused),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_concurrent_calls),
        cmocka_unit_test(test_retry_helpers),
        cmocka_unit_test(test_cache_key_ignore_eos),
    };
    return cmocka_run_group_tests_name("llm_openai", tests, NULL, NULL);
}
