/*
 * test_cli.c - `agentflow run` end to end: a three-step solve against a loopback
 * OpenAI-compatible server, JSON output, traces, exit codes, and a batch killed with
 * SIGKILL in mid-run that resumes without losing or duplicating an item.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "support/fake_server.h"
#include "support/proc.h"

#define RUN_TIMEOUT_S 120.0

static char g_dir[64];

static const char *src_path(const char *rel, char *buf, size_t len)
{
    const char *root = getenv("AGENTFLOW_SRC");
    snprintf(buf, len, "%s/%s", root && *root ? root : ".", rel);
    return buf;
}

static const char *tmp_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", g_dir, name);
    return buf;
}

static void write_file(const char *path, const char *text)
{
    char err[256];
    assert_int_equal(af_file_write_atomic(path, text, strlen(text), err, sizeof err), 0);
}

/* The same three-step script as tests/data/three_step.json, served over HTTP. The fake
 * server's rules have no use counts, so the verifier's "CONTINUE twice, then STOP" is keyed on
 * the memory holding a third step. First match wins: generator, verifier, then the rest. */
static void add_three_step_rules(struct fake_server *fs)
{
    fake_server_add_rule(fs, "Give the final answer",
                         "**Process Summary:** computed.\n**Answer:** 42");
    fake_server_add_rule(fs, "Action Step 3", "All done.\nConclusion: STOP");
    fake_server_add_rule(fs, "Judge whether the work", "Need more.\nConclusion: CONTINUE");
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
        const char *rep = json_string_value(json_object_get(r, "reply"));
        if (strstr(m, "Judge whether") || strstr(m, "Give the final answer"))
            continue;
        fake_server_add_rule(fs, m, rep);
    }
    json_decref(doc);
}

static void test_run_three_step_http(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    add_three_step_rules(fs);
    char url[128];
    snprintf(url, sizeof url, "%s", fake_server_url(fs));
    const char *argv[] = {proc_agentflow_bin(), "run", "--url", url, "--model", "test-model",
                          "What is 6 times 7?", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != 0)
        fprintf(stderr, "stderr: %s\n", r.err);
    assert_int_equal(r.exit_code, 0);
    assert_string_equal(r.out, "42\n");
    assert_non_null(strstr(r.err, "step 1] tool=Generalist_Solution_Generator_Tool"));
    assert_non_null(strstr(r.err, "step 2]"));
    assert_non_null(strstr(r.err, "step 3]"));
    assert_non_null(strstr(r.err, "verdict=STOP"));
    assert_null(strstr(r.err, "step 4]"));
    /* analysis + 3 x (planner, executor, tool, verifier) + generator */
    assert_int_equal(fake_server_request_count(fs), 14);
    char *last = fake_server_last_request(fs);
    assert_non_null(strstr(last, "\"model\": \"test-model\"") ? last
                                                              : strstr(last, "\"test-model\""));
    free(last);
    proc_result_deinit(&r);
    fake_server_stop(fs);
}

static void test_run_json_and_trace(void **state)
{
    (void)state;
    char script[512], trace[512], url[600];
    snprintf(url, sizeof url, "scripted:%s",
             src_path("tests/data/three_step.json", script, sizeof script));
    tmp_path("trace.jsonl", trace, sizeof trace);
    const char *argv[] = {
        proc_agentflow_bin(), "run", "--url", url, "--json", "--trace", trace, "--quiet",
        "What is 6 times 7?", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "answer")), "42");
    assert_int_equal(json_integer_value(json_object_get(j, "steps")), 3);
    assert_int_equal(json_array_size(json_object_get(j, "memory")), 3);
    assert_true(json_is_object(json_object_get(j, "usage")));
    assert_true(json_is_object(json_object_get(j, "timings")));
    json_t *cfg = json_object_get(j, "config");
    assert_string_equal(json_string_value(json_object_get(json_object_get(cfg, "planner"), "url")),
                        url);
    assert_true(json_real_value(
                    json_object_get(json_object_get(cfg, "planner"), "frequency_penalty")) > 1.19);
    assert_string_equal(r.err, "");
    json_decref(j);
    /* 1 analysis + 3 x 4 + 1 generator LLM records, 3 tool records, 1 final record */
    assert_int_equal(proc_count_lines(trace), 14 + 3 + 1);
    proc_result_deinit(&r);
    unlink(trace);
}

static long steps_of(const char *const *argv, const char *const *env)
{
    struct proc_result r;
    assert_int_equal(proc_run(argv, env, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    long n = (long)json_integer_value(json_object_get(j, "steps"));
    json_decref(j);
    proc_result_deinit(&r);
    return n;
}

/* flags > environment > config file > defaults */
static void test_config_precedence(void **state)
{
    (void)state;
    char script[512], cfg[512], text[1024];
    src_path("tests/data/three_step.json", script, sizeof script);
    tmp_path("prec.json", cfg, sizeof cfg);
    snprintf(text, sizeof text, "{\"url\": \"scripted:%s\", \"max_steps\": 1}", script);
    write_file(cfg, text);
    const char *base[] = {proc_agentflow_bin(), "run", "--config", cfg, "--json", "q", NULL};
    const char *flag[] = {proc_agentflow_bin(), "run", "--config", cfg, "--json",
                          "--max-steps",        "3",   "q",        NULL};
    const char *env[] = {"AGENTFLOW_MAX_STEPS=2", NULL};
    assert_int_equal(steps_of(base, NULL), 1);
    assert_int_equal(steps_of(base, env), 2);
    assert_int_equal(steps_of(flag, env), 3);
    unlink(cfg);
}

static int run_code(const char *const *argv, const char *expect_in_err);

/* `ignore_eos` in a config file: a top-level value for every slot, a slot's own override, the
 * dump, the trace's sampling (only where set), and a value that is not a bool. */
static void test_config_ignore_eos(void **state)
{
    (void)state;
    char script[512], cfg[512], trace[512], text[1024];
    src_path("tests/data/three_step.json", script, sizeof script);
    tmp_path("eos.json", cfg, sizeof cfg);
    tmp_path("eos.jsonl", trace, sizeof trace);
    snprintf(text, sizeof text,
             "{\"url\": \"scripted:%s\", \"max_steps\": 1, \"ignore_eos\": true,"
             " \"planner\": {\"ignore_eos\": false}}",
             script);
    write_file(cfg, text);
    const char *argv[] = {proc_agentflow_bin(),
                          "run",
                          "--config",
                          cfg,
                          "--json",
                          "--trace",
                          trace,
                          "--quiet",
                          "q",
                          NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    json_t *c = json_object_get(j, "config");
    assert_true(json_is_false(json_object_get(json_object_get(c, "planner"), "ignore_eos")));
    assert_true(json_is_true(json_object_get(json_object_get(c, "fixed"), "ignore_eos")));
    assert_true(json_is_true(json_object_get(json_object_get(c, "executor"), "ignore_eos")));
    json_decref(j);
    proc_result_deinit(&r);

    char *lines = NULL, err[256];
    assert_int_equal(af_file_read(trace, 1 << 24, &lines, NULL, err, sizeof err), 0);
    size_t n_planner = 0, n_other = 0;
    for (char *line = lines, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_t *rec = json_loads(line, 0, NULL);
        assert_non_null(rec);
        if (!strcmp(json_string_value(json_object_get(rec, "type")), "llm")) {
            json_t *eos = json_object_get(json_object_get(rec, "sampling"), "ignore_eos");
            if (!strcmp(json_string_value(json_object_get(rec, "slot")), "planner")) {
                assert_null(eos);
                n_planner++;
            } else {
                assert_true(json_is_true(eos));
                n_other++;
            }
        }
        json_decref(rec);
    }
    free(lines);
    assert_true(n_planner > 0);
    assert_true(n_other > 0);
    unlink(trace);

    write_file(cfg, "{\"ignore_eos\": 1}");
    const char *bad[] = {proc_agentflow_bin(), "run", "--config", cfg, "q", NULL};
    assert_int_equal(run_code(bad, "'ignore_eos' must be true or false"), 4);
    unlink(cfg);
}

/* 1 when text holds a number with 10 or more significant digits: the float noise of a double
 * printed exactly (0.0058709997683763504), which output rounds to 9. */
static int has_float_noise(const char *text)
{
    size_t sig = 0;
    int in_num = 0;
    for (const char *p = text; *p; p++) {
        if ((*p >= '0' && *p <= '9') || (*p == '.' && in_num)) {
            in_num = 1;
            if (*p >= '1' || (*p == '0' && sig > 0))
                sig += *p != '.';
            if (sig >= 10)
                return 1;
        } else {
            in_num = 0;
            sig = 0;
        }
    }
    return 0;
}

static void test_tool_list_and_call(void **state)
{
    (void)state;
    char script[512], url[600];
    snprintf(url, sizeof url, "scripted:%s",
             src_path("tests/data/three_step.json", script, sizeof script));
    const char *list[] = {proc_agentflow_bin(), "tool", "list", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(list, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    json_t *cards = json_loads(r.out, 0, NULL);
    assert_true(json_array_size(cards) >= 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cards, 0), "tool_name")),
                        "Generalist_Solution_Generator_Tool");
    json_decref(cards);
    proc_result_deinit(&r);
    const char *call[] = {proc_agentflow_bin(),
                          "tool",
                          "call",
                          "generalist solution generator tool",
                          "--args",
                          "{\"query\": \"What is 6 * 7?\"}",
                          "--url",
                          url,
                          NULL};
    assert_int_equal(proc_run(call, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "result")), "6 * 7 = 42.");
    assert_true(json_is_number(json_object_get(j, "duration_ms")));
    if (has_float_noise(r.out))
        fail_msg("float noise in: %s", r.out);
    json_decref(j);
    proc_result_deinit(&r);
    /* The tool ran but its LLM failed: still exit 0, with the error in the result. */
    const char *fails[] = {proc_agentflow_bin(),
                           "tool",
                           "call",
                           "Generalist_Solution_Generator_Tool",
                           "--args",
                           "{\"query\": \"no rule matches this\"}",
                           "--url",
                           url,
                           NULL};
    assert_int_equal(proc_run(fails, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    j = json_loads(r.out, 0, NULL);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_object_get(j, "result"), "error")),
               "no rule matches"));
    json_decref(j);
    proc_result_deinit(&r);
    const char *bad_arg[] = {
        proc_agentflow_bin(), "tool", "call", "Generalist_Solution_Generator_Tool", "--args",
        "{\"k\": 1}",         NULL};
    assert_int_equal(run_code(bad_arg, "unknown argument 'k'"), 2);
    const char *bad_json[] = {proc_agentflow_bin(),
                              "tool",
                              "call",
                              "Generalist_Solution_Generator_Tool",
                              "--args",
                              "{",
                              NULL};
    assert_int_equal(run_code(bad_json, "--args"), 2);
    const char *no_tool[] = {proc_agentflow_bin(), "tool", "call", "Nope", NULL};
    assert_int_equal(run_code(no_tool, "unknown tool"), 2);
}

static int run_code(const char *const *argv, const char *expect_in_err)
{
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    if (expect_in_err && !strstr(r.err, expect_in_err))
        fprintf(stderr, "expected '%s' in stderr: %s\n", expect_in_err, r.err);
    if (expect_in_err)
        assert_non_null(strstr(r.err, expect_in_err));
    int code = r.exit_code;
    proc_result_deinit(&r);
    return code;
}

static void test_exit_codes(void **state)
{
    (void)state;
    const char *bin = proc_agentflow_bin();
    char cfg[512], in[512], out[512];
    const char *no_query[] = {bin, "run", "--url", "http://127.0.0.1:9/v1", NULL};
    assert_int_equal(run_code(no_query, "expected one QUERY"), 2);
    const char *help[] = {bin, "run", "--help", NULL};
    assert_int_equal(run_code(help, NULL), 0);
    const char *bad_flag[] = {bin, "run", "--max-steps", "zero", "q", NULL};
    assert_int_equal(run_code(bad_flag, "--max-steps"), 2);
    /* Without a URL and without the embedded model (models/agentflow-world.gguf, which a clone
     * ships), no back-end is a usage error. */
    const char *no_url[] = {bin, "run", "q", NULL};
    const char *no_model[] = {"AGENTFLOW_EMBEDDED_MODEL=/nonexistent/m.gguf", NULL};
    struct proc_result nr;
    assert_int_equal(proc_run(no_url, no_model, RUN_TIMEOUT_S, &nr), 0);
    assert_non_null(strstr(nr.err, "no back-end URL"));
    assert_int_equal(nr.exit_code, 2);
    proc_result_deinit(&nr);
    const char *bad_tool[] = {bin,       "run",       "--url", "http://127.0.0.1:9/v1",
                              "--tools", "Nope_Tool", "q",     NULL};
    assert_int_equal(run_code(bad_tool, "Nope_Tool"), 2);
    tmp_path("bad.json", cfg, sizeof cfg);
    write_file(cfg, "{\"max_steps\": 3,,}");
    const char *bad_cfg[] = {bin, "run", "--config", cfg, "q", NULL};
    assert_int_equal(run_code(bad_cfg, "bad.json: line 1"), 4);
    write_file(cfg, "{\"planner\": {\"temprature\": 1}}");
    assert_int_equal(run_code(bad_cfg, "planner.temprature"), 4);
    tmp_path("missing.jsonl", in, sizeof in);
    tmp_path("out.jsonl", out, sizeof out);
    const char *missing[] = {bin,     "run", "--url", "http://127.0.0.1:9/v1", "--batch", in,
                             "--out", out,   NULL};
    assert_int_equal(run_code(missing, "missing.jsonl"), 4);
    /* an empty query is usage; a model or script file the URL names that is missing or not
     * one is bad input */
    const char *empty[] = {bin, "run", "--url", "http://127.0.0.1:9/v1", "  ", NULL};
    assert_int_equal(run_code(empty, "the query is empty"), 2);
    const char *no_gguf[] = {bin, "run", "--url", "gguf:/nonexistent/m.gguf", "q", NULL};
    assert_int_equal(run_code(no_gguf, "/nonexistent/m.gguf"), 4);
    write_file(cfg, "not a model");
    char spec[600];
    snprintf(spec, sizeof spec, "gguf:%s", cfg);
    const char *not_gguf[] = {bin, "run", "--url", spec, "q", NULL};
    assert_int_equal(run_code(not_gguf, "bad.json"), 4);
    const char *no_script[] = {bin, "run", "--url", "scripted:/nonexistent/s.json", "q", NULL};
    assert_int_equal(run_code(no_script, "/nonexistent/s.json"), 4);
    unlink(cfg);
    unlink(out);
}

/* A server whose reply body is not JSON is a back-end error: exit 3, naming the URL. */
static void test_malformed_reply_exit_3(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_set_default(fs, 200, "{\"choices\": [ this is not json", 0);
    const char *argv[] = {proc_agentflow_bin(), "run", "--url", fake_server_url(fs), "q", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.err, fake_server_url(fs)));
    proc_result_deinit(&r);
    fake_server_stop(fs);
}

static void test_backend_error_exit_3(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    fake_server_set_default(fs, 500, "{\"error\":{\"message\":\"model is overloaded\"}}", 0);
    char cfg[512];
    tmp_path("retry.json", cfg, sizeof cfg);
    char text[512];
    snprintf(text, sizeof text, "{\"url\": \"%s\", \"max_retries\": 1}", fake_server_url(fs));
    write_file(cfg, text);
    const char *argv[] = {proc_agentflow_bin(), "run", "--config", cfg, "q", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 3);
    assert_non_null(strstr(r.err, "model is overloaded"));
    assert_non_null(strstr(r.err, "500"));
    assert_non_null(strstr(r.err, fake_server_url(fs)));
    assert_string_equal(r.out, "");
    proc_result_deinit(&r);
    unlink(cfg);
    fake_server_stop(fs);
}

/* A slow scripted back-end (delay_ms per call) so a batch is surely mid-run when killed. */
static void write_slow_script(const char *path)
{
    char src[512], *text = NULL, err[256];
    assert_int_equal(af_file_read(src_path("tests/data/three_step.json", src, sizeof src), 1 << 20,
                                  &text, NULL, err, sizeof err),
                     0);
    json_t *doc = json_loads(text, 0, NULL);
    free(text);
    json_t *rules = json_object_get(doc, "rules"), *r;
    size_t i;
    json_array_foreach(rules, i, r)
    {
        json_object_set_new(r, "delay_ms", json_integer(20));
        json_object_del(r, "times"); /* shared by all items: make the verifier stop at once */
        if (strstr(json_string_value(json_object_get(r, "match")), "Judge whether"))
            json_object_set_new(r, "reply", json_string("Conclusion: STOP"));
    }
    char *out = json_dumps(doc, 0);
    write_file(path, out);
    free(out);
    json_decref(doc);
}

static void check_batch_out(const char *out, int n_items)
{
    char *data = NULL, err[256];
    assert_int_equal(af_file_read(out, 1 << 26, &data, NULL, err, sizeof err), 0);
    int seen[64] = {0}, lines = 0;
    for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        assert_non_null(nl); /* every line complete */
        *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        int id = atoi(json_string_value(json_object_get(j, "id")) + 3); /* "id-N" */
        assert_true(id >= 0 && id < n_items);
        seen[id]++;
        assert_string_equal(json_string_value(json_object_get(j, "answer")), "42");
        json_decref(j);
        lines++;
    }
    free(data);
    assert_int_equal(lines, n_items);
    for (int i = 0; i < n_items; i++)
        assert_int_equal(seen[i], 1);
}

static void test_batch_kill_and_resume(void **state)
{
    (void)state;
    enum { N = 24 };
    char script[512], in[512], out[512], url[600];
    tmp_path("slow.json", script, sizeof script);
    write_slow_script(script);
    snprintf(url, sizeof url, "scripted:%s", script);
    tmp_path("batch.jsonl", in, sizeof in);
    tmp_path("batch_out.jsonl", out, sizeof out);
    unlink(out);
    char text[8192];
    size_t used = 0;
    for (int i = 0; i < N; i++)
        used +=
            (size_t)snprintf(text + used, sizeof text - used,
                             "{\"id\":\"id-%d\",\"query\":\"What is 6 times 7? (%d)\"}\n", i, i);
    write_file(in, text);
    const char *argv[] = {proc_agentflow_bin(), "run", "--url",   url, "--batch", in, "--out", out,
                          "--concurrency",      "3",   "--quiet", NULL};
    pid_t pid = proc_spawn(argv);
    assert_true(pid > 0);
    double deadline = af_clock_ms() + RUN_TIMEOUT_S * 1000.0;
    while (proc_count_lines(out) < 3 && af_clock_ms() < deadline)
        af_clock_sleep_ms(5);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    size_t partial = proc_count_lines(out);
    assert_true(partial >= 3);
    assert_true(partial < N); /* really killed in mid-run */
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    check_batch_out(out, N);
    /* A third run has nothing left to do and changes nothing. */
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    proc_result_deinit(&r);
    check_batch_out(out, N);
    unlink(in);
    unlink(out);
    unlink(script);
}

static void test_batch_bad_line(void **state)
{
    (void)state;
    char in[512], out[512], script[512], url[600];
    snprintf(url, sizeof url, "scripted:%s",
             src_path("tests/data/three_step.json", script, sizeof script));
    tmp_path("bad_batch.jsonl", in, sizeof in);
    tmp_path("bad_out.jsonl", out, sizeof out);
    write_file(in, "{\"id\":\"a\",\"query\":\"q\"}\n{\"id\":\"b\" \"query\":1}\n");
    const char *argv[] = {
        proc_agentflow_bin(), "run", "--url", url, "--batch", in, "--out", out, NULL};
    assert_int_equal(run_code(argv, "bad_batch.jsonl:2"), 4);
    assert_int_equal(proc_count_lines(out), 0);
    unlink(in);
    unlink(out);
}

/* `eval score` over the real Game-of-24 file (skipped where ../shared is absent). */
static void test_eval_score(void **state)
{
    (void)state;
    char data[512], pred[512];
    const char *env = getenv("AGENTFLOW_DATA");
    if (env && *env)
        snprintf(data, sizeof data, "%s", env);
    else
        src_path("../shared/data/benchmarks", data, sizeof data);
    char probe[600];
    snprintf(probe, sizeof probe, "%s/gameof24/data.json", data);
    if (access(probe, R_OK) != 0) {
        fprintf(stderr, "skipped: no benchmark data at %s (set AGENTFLOW_DATA)\n", data);
        skip();
    }
    tmp_path("pred.jsonl", pred, sizeof pred);
    write_file(pred, "{\"index\": 0, \"answer\": \"<answer>(1+1+1)\u00d78</answer>\"}\n"
                     "{\"index\": 1, \"answer\": \"(1+1)\u00d78\"}\n");
    const char *argv[] = {
        proc_agentflow_bin(), "eval", "score", "--bench", "gameof24", "--pred", pred,
        "--data-dir",         data,   NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "\"correct\":true"));
    assert_non_null(strstr(r.out, "\"correct\":false"));
    assert_non_null(strstr(r.out, "\"accuracy\":50.00"));
    proc_result_deinit(&r);
    write_file(pred, "{\"index\": 0, \"answer\": }\n");
    assert_int_equal(run_code(argv, "pred.jsonl:1"), 4);
    unlink(pred);
}

/* `eval score` on a small data file of its own: a bad line (no "answer", broken JSON, an
 * index out of range) is named and skipped, the rest still scored, the summary printed, and
 * the exit is 4; a second line for one index is ignored with a warning; a wrong answer
 * carries the scorer's reason. */
static void test_eval_score_lines(void **state)
{
    (void)state;
    char dir[512], data[600], pred[512];
    tmp_path("data", dir, sizeof dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(data, sizeof data, "%s/aime24", dir);
    assert_int_equal(mkdir(data, 0700), 0);
    snprintf(data, sizeof data, "%s/aime24/data.json", dir);
    write_file(data, "[{\"query\": \"a\", \"answer\": 7}, {\"query\": \"b\", \"answer\": 45},"
                     " {\"query\": \"c\", \"answer\": 33}]");
    tmp_path("lines.jsonl", pred, sizeof pred);
    write_file(pred, "{\"index\": 0, \"answer\": \"7\"}\n"
                     "{\"index\": 2, \"prediction\": \"33\"}\n"
                     "{\"index\": 1, \"answer\": }\n"
                     "{\"index\": 0, \"answer\": \"7\"}\n"
                     "{\"index\": 9, \"answer\": \"7\"}\n"
                     "{\"index\": 1, \"answer\": \"a lot\"}\n");
    const char *argv[] = {
        proc_agentflow_bin(), "eval", "score", "--bench", "aime24", "--pred", pred,
        "--data-dir",         dir,    NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != 4)
        fprintf(stderr, "stdout: %s\nstderr: %s\n", r.out, r.err);
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, "lines.jsonl:2: no \"answer\" field"));
    assert_non_null(strstr(r.err, "lines.jsonl:3:"));
    assert_non_null(strstr(r.err, "lines.jsonl:4: index 0 already scored on line 1"));
    assert_non_null(strstr(r.err, "lines.jsonl:5:"));
    assert_non_null(strstr(r.out, "\"reason\":\"not a number\""));
    assert_non_null(strstr(r.out, "{\"bench\":\"aime24\",\"n\":2,\"correct\":1,\"accuracy\":50.00,"
                                  "\"bad_lines\":3,\"duplicate_lines\":1}\n"));
    proc_result_deinit(&r);
    /* Thirty copies of one right answer are one scored line, not 100% of thirty. */
    char many[30 * 40];
    size_t used = 0;
    for (int i = 0; i < 30; i++)
        used += (size_t)snprintf(many + used, sizeof many - used,
                                 "{\"index\": 0, \"answer\": \"7\"}\n");
    write_file(pred, many);
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "\"n\":1,\"correct\":1,"));
    assert_non_null(strstr(r.out, "\"duplicate_lines\":29}"));
    proc_result_deinit(&r);
    const char *help[] = {proc_agentflow_bin(), "eval", "score", "--help", NULL};
    assert_int_equal(proc_run(help, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "already scored"));
    assert_null(strstr(r.out, "eval report RUNDIR"));
    proc_result_deinit(&r);
    unlink(pred);
    unlink(data);
    snprintf(data, sizeof data, "%s/aime24", dir);
    rmdir(data);
    rmdir(dir);
}

/* Runs argv, checks the exit code and that `want_out` is in stdout (when given); returns 1. */
static int run_expect(const char *const *argv, int code, const char *want_out, const char *want_err)
{
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != code || (want_out && !strstr(r.out, want_out)) ||
        (want_err && !strstr(r.err, want_err)))
        fail_msg("%s %s: exit %d (want %d)\nstdout: %s\nstderr: %s", argv[1], argv[2], r.exit_code,
                 code, r.out, r.err);
    proc_result_deinit(&r);
    return 1;
}

/* The one exit-code rule outside `run`: a missing or malformed named file is 4, a bad flag 2;
 * every --help states the codes, and none documents a code 1. make-random says what it wrote
 * and marks the file, and loading it prints a notice. */
static void test_exit_code_rule(void **state)
{
    (void)state;
    const char *bin = proc_agentflow_bin();
    char model[512], data[512], out[512];
    tmp_path("rnd.gguf", model, sizeof model);
    tmp_path("chats.jsonl", data, sizeof data);
    tmp_path("sft_out", out, sizeof out);
    const char *no_vocab[] = {
        bin, "model",        "make-random",         "--arch", "qwen2", "--seed",
        "1", "--vocab-from", "/nonexistent/v.gguf", model,    NULL};
    run_expect(no_vocab, 4, NULL, "/nonexistent/v.gguf");
    const char *bad_arch[] = {bin,      "model", "make-random", "--arch", "gpt9",
                              "--seed", "1",     model,         NULL};
    run_expect(bad_arch, 2, NULL, "gpt9");
    const char *make[] = {bin,      "model", "make-random", "--arch", "qwen2",
                          "--seed", "1",     model,         NULL};
    run_expect(make, 0, "wrote ", NULL);
    const char *info[] = {bin, "model", "info", model, NULL};
    run_expect(info, 0, NULL, "random weights");
    write_file(data, "{\"conversation\": []}\n");
    const char *sft[] = {
        bin,       "train", "sft",     "--model",         model,    "--data", data, "--out", out,
        "--steps", "1",     "--quiet", "--chat-template", "chatml", NULL};
    run_expect(sft, 4, NULL, "chats.jsonl: line 1: messages: missing");
    const char *no_script[] = {bin,      "tool",
                               "call",   "Generalist_Solution_Generator_Tool",
                               "--args", "{\"query\": \"x\"}",
                               "--url",  "scripted:/nonexistent/s.json",
                               NULL};
    run_expect(no_script, 4, NULL, "/nonexistent/s.json");
    static const char *const helps[][4] = {{"model", "--help"},
                                           {"train", "--help"},
                                           {"tool", "--help"},
                                           {"eval", "--help"},
                                           {"eval", "score", "--help"},
                                           {"index", "--help"},
                                           {"run", "--help"},
                                           {"--help"},
                                           {"world", "--help"},
                                           {"world", "build", "--help"},
                                           {"world", "drills", "--help"},
                                           {"world", "traces", "--help"}};
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        const char *argv[6] = {bin, helps[i][0], helps[i][1], helps[i][2], NULL, NULL};
        struct proc_result r;
        assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
        assert_int_equal(r.exit_code, 0);
        if (!strstr(r.out, "Exit codes") || strstr(r.out, " 1 failure"))
            fail_msg("%s %s --help: no exit-code rule: %s", helps[i][0],
                     helps[i][1] ? helps[i][1] : "", r.out);
        proc_result_deinit(&r);
    }
    const char *top[] = {bin, "--help", NULL};
    run_expect(top, 0, "eval run", NULL);
    run_expect(top, 0, "eval report", NULL);
    unlink(model);
    unlink(data);
}

/* install-deps.sh as a user without sudo: it names the missing packages and how to install
 * them, and stops, instead of failing inside apt-get. */
static void test_install_deps_without_sudo(void **state)
{
    (void)state;
    char bin[512], path[600], script[512], env_path[700];
    tmp_path("fakebin", bin, sizeof bin);
    assert_int_equal(mkdir(bin, 0700), 0);
    static const char *const fakes[][2] = {
        {"id", "#!/bin/sh\necho 1000\n"},         /* not root */
        {"dpkg-query", "#!/bin/sh\nexit 1\n"},    /* nothing installed */
        {"apt-get", "#!/bin/sh\necho ran >&2\n"}, /* must not be reached */
    };
    for (size_t i = 0; i < sizeof fakes / sizeof fakes[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", bin, fakes[i][0]);
        write_file(path, fakes[i][1]);
        assert_int_equal(chmod(path, 0700), 0);
    }
    snprintf(path, sizeof path, "%s/grep", bin);
    assert_int_equal(symlink("/bin/grep", path), 0);
    snprintf(env_path, sizeof env_path, "PATH=%s", bin); /* no sudo on it */
    const char *env[] = {env_path, NULL};
    const char *argv[] = {"/bin/bash", src_path("scripts/install-deps.sh", script, sizeof script),
                          NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, env, RUN_TIMEOUT_S, &r), 0);
    if (r.exit_code != 1 || !strstr(r.err, "sudo is not installed"))
        fail_msg("exit %d\nstdout: %s\nstderr: %s", r.exit_code, r.out, r.err);
    assert_non_null(strstr(r.err, "libjansson-dev"));
    assert_null(strstr(r.err, "ran"));
    proc_result_deinit(&r);
    for (size_t i = 0; i < sizeof fakes / sizeof fakes[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", bin, fakes[i][0]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/grep", bin);
    unlink(path);
    rmdir(bin);
}

/* tests/run_all.sh sums every group a test program runs, and counts skips. */
static void test_run_all_summary(void **state)
{
    (void)state;
    char fake[512], script[512];
    tmp_path("fake_test.sh", fake, sizeof fake);
    write_file(fake, "#!/bin/sh\n"
                     "echo '[==========] 2 test(s) run.'\n"
                     "echo '[  PASSED  ] 2 test(s).'\n"
                     "echo '[==========] 6 test(s) run.'\n"
                     "echo '[  PASSED  ] 4 test(s).'\n"
                     "echo '[  SKIPPED ] 2 test(s), listed below:'\n"
                     "echo '[  SKIPPED ] test_needs_data'\n");
    assert_int_equal(chmod(fake, 0700), 0);
    const char *argv[] = {"/bin/sh", src_path("tests/run_all.sh", script, sizeof script), fake,
                          fake, NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "tests: 12 passed, 0 failed, 4 skipped\n"));
    proc_result_deinit(&r);
    unlink(fake);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_cli_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rmdir(g_dir);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (access(proc_agentflow_bin(), X_OK) != 0) {
        fprintf(stderr, "test_cli: %s not built; run 'make' first\n", proc_agentflow_bin());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_three_step_http),
        cmocka_unit_test(test_run_json_and_trace),
        cmocka_unit_test(test_exit_codes),
        cmocka_unit_test(test_config_precedence),
        cmocka_unit_test(test_config_ignore_eos),
        cmocka_unit_test(test_backend_error_exit_3),
        cmocka_unit_test(test_batch_kill_and_resume),
        cmocka_unit_test(test_batch_bad_line),
        cmocka_unit_test(test_tool_list_and_call),
        cmocka_unit_test(test_eval_score),
        cmocka_unit_test(test_malformed_reply_exit_3),
        cmocka_unit_test(test_eval_score_lines),
        cmocka_unit_test(test_run_all_summary),
        cmocka_unit_test(test_exit_code_rule),
        cmocka_unit_test(test_install_deps_without_sudo),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
