/*
 * test_eval.c - `agentflow eval run` end to end through the CLI binary: 5 items of each of the
 * ten benchmarks against the scripted back-end (right answers for some items, wrong for
 * others), a run killed with SIGKILL and resumed (plus a torn last line), --trials, --limit,
 * an unknown benchmark, and the response cache (a rerun makes zero HTTP calls).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
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

#define RUN_TIMEOUT_S 300.0
#define N_PER_BENCH 5

static char g_dir[64];

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

static void rm_rf(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* The shared benchmark folder, or NULL when absent. */
static const char *shared_data_dir(char *buf, size_t len)
{
    const char *data = getenv("AGENTFLOW_DATA");
    const char *shared = getenv("AGENTFLOW_SHARED");
    const char *src = getenv("AGENTFLOW_SRC");
    if (data && *data)
        snprintf(buf, len, "%s", data);
    else if (shared && *shared)
        snprintf(buf, len, "%s/data/benchmarks", shared);
    else if (src && *src)
        snprintf(buf, len, "%s/../shared/data/benchmarks", src);
    else
        snprintf(buf, len, "../shared/data/benchmarks");
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/gameof24/data.json", buf);
    return access(probe, R_OK) == 0 ? buf : NULL;
}

/* Rules for everything but the generator: one step with the generalist tool, then STOP. */
static void add_flow_rules(json_t *rules, int delay_ms)
{
    static const char *const fixed[][2] = {
        {"Judge whether the work", "Enough.\nConclusion: STOP"},
        {"Before any tool is used", "Concise Summary: answer it.\nRequired Skills: reading\n"
                                    "Relevant Tools: Generalist_Solution_Generator_Tool\n"
                                    "Additional Considerations: none"},
        {"You decide the single next action",
         "Justification: one look.\nContext: none.\nSub-Goal: Answer the query.\n"
         "Tool Name: Generalist_Solution_Generator_Tool"},
        {"Write the Python call",
         "Analysis: one call.\nCommand Explanation: ask.\nGenerated Command:\n```python\n"
         "execution = tool.execute(query=\"What is 6 * 7?\")\n```"},
        {"What is 6 * 7?", "6 * 7 = 42."},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        json_t *r = json_pack("{s:s,s:s}", "match", fixed[i][0], "reply", fixed[i][1]);
        if (delay_ms)
            json_object_set_new(r, "delay_ms", json_integer(delay_ms));
        json_array_append_new(rules, r);
    }
}

/* A generator rule answering `answer` to the item whose query is `query`: the query followed
 * by the generator template's next line occurs only in the generator's prompt. */
static void add_answer_rule(json_t *rules, const char *query, const char *answer, int delay_ms)
{
    size_t n = strlen(query) + 64;
    char *match = malloc(n), *reply = malloc(strlen(answer) + 64);
    snprintf(match, n, "The query once more:\n%s\n\nReply in two", query);
    snprintf(reply, strlen(answer) + 64, "**Process Summary:** looked.\n**Answer:** %s", answer);
    json_t *r = json_pack("{s:s,s:s}", "match", match, "reply", reply);
    if (delay_ms)
        json_object_set_new(r, "delay_ms", json_integer(delay_ms));
    json_array_append_new(rules, r);
    free(match);
    free(reply);
}

static void write_script(const char *path, json_t *rules)
{
    json_t *doc = json_pack("{s:o}", "rules", rules);
    char *text = json_dumps(doc, 0);
    write_file(path, text);
    free(text);
    json_decref(doc);
}

/* The right answer of a benchmark record, from its gold field, into buf. */
static const char *right_answer(const char *bench, const json_t *item, char *buf, size_t len)
{
    const json_t *g = json_object_get(item, "answer");
    if (json_is_array(g))
        g = json_array_get(g, 0);
    if (json_is_integer(g))
        snprintf(buf, len, "%lld", (long long)json_integer_value(g));
    else
        snprintf(buf, len, "%s", json_string_value(g) ? json_string_value(g) : "");
    (void)bench;
    return buf;
}

static const char *wrong_answer(const char *bench, const json_t *item, char *buf, size_t len)
{
    const json_t *g = json_object_get(item, "answer");
    if (json_is_integer(g))
        snprintf(buf, len, "%lld", (long long)json_integer_value(g) + 1);
    else if (strcmp(bench, "gpqa") == 0)
        snprintf(buf, len, "%c",
                 (char)('A' + (json_integer_value(json_object_get(item, "answer_idx")) + 1) % 4));
    else if (strcmp(bench, "gameof24") == 0)
        snprintf(buf, len, "1+1");
    else
        snprintf(buf, len, "zzqx wrongish");
    return buf;
}

static json_t *load_json_file(const char *path)
{
    char *text = NULL, err[256];
    assert_int_equal(af_file_read(path, 1 << 28, &text, NULL, err, sizeof err), 0);
    json_t *j = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(j);
    return j;
}

/* Every line of results.jsonl, parsed; each line must be complete JSON. */
static json_t *read_results(const char *rundir)
{
    char path[600], *data = NULL, err[256];
    snprintf(path, sizeof path, "%s/results.jsonl", rundir);
    json_t *arr = json_array();
    if (af_file_read(path, 1 << 28, &data, NULL, err, sizeof err) != 0)
        return arr;
    for (char *line = data, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        json_array_append_new(arr, j);
    }
    free(data);
    return arr;
}

static int run_cli(const char *const *argv, struct proc_result *r)
{
    assert_int_equal(proc_run(argv, NULL, RUN_TIMEOUT_S, r), 0);
    if (r->exit_code != 0)
        fprintf(stderr, "exit %d, stderr: %s\n", r->exit_code, r->err);
    return r->exit_code;
}

static const char *const BENCHES[] = {"2wiki",    "aime24", "amc23",    "bamboogle", "gaia",
                                      "gameof24", "gpqa",   "hotpotqa", "medqa",     "musique"};
#define N_BENCHES (sizeof BENCHES / sizeof BENCHES[0])

static void check_all_benches_lines(json_t *lines, int expect[N_BENCHES][N_PER_BENCH],
                                    const char *rundir)
{
    assert_int_equal(json_array_size(lines), N_BENCHES * N_PER_BENCH);
    int seen[N_BENCHES][N_PER_BENCH] = {{0}};
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l)
    {
        const char *bench = json_string_value(json_object_get(l, "bench"));
        size_t b = 0;
        while (b < N_BENCHES && strcmp(BENCHES[b], bench) != 0)
            b++;
        assert_true(b < N_BENCHES);
        json_int_t ix = json_integer_value(json_object_get(l, "index"));
        assert_true(ix >= 0 && ix < N_PER_BENCH);
        assert_int_equal(json_integer_value(json_object_get(l, "trial")), 0);
        seen[b][ix]++;
        json_t *correct = json_object_get(json_object_get(l, "correct"), "rule");
        assert_true(json_is_boolean(correct));
        if (json_is_true(correct) != expect[b][ix])
            fprintf(stderr, "%s[%lld]: answer '%s' extracted '%s' expected %s\n", bench,
                    (long long)ix, json_string_value(json_object_get(l, "answer")),
                    json_string_value(json_object_get(l, "extracted")),
                    expect[b][ix] ? "right" : "wrong");
        assert_int_equal(json_is_true(correct), expect[b][ix]);
        assert_non_null(json_object_get(l, "gold"));
        assert_non_null(json_string_value(json_object_get(l, "query")));
        assert_int_equal(json_integer_value(json_object_get(l, "steps")), 1);
        json_t *tools = json_object_get(l, "tools");
        assert_int_equal(json_array_size(tools), 1);
        assert_string_equal(json_string_value(json_array_get(tools, 0)),
                            "Generalist_Solution_Generator_Tool");
        assert_true(json_is_object(json_object_get(l, "tokens")));
        assert_true(json_is_number(json_object_get(l, "latency_ms")));
        char trace[1024];
        snprintf(trace, sizeof trace, "%s/%s", rundir,
                 json_string_value(json_object_get(l, "trace")));
        assert_true(proc_count_lines(trace) > 0);
    }
    for (size_t b = 0; b < N_BENCHES; b++)
        for (int k = 0; k < N_PER_BENCH; k++)
            assert_int_equal(seen[b][k], 1);
}

/* Five items of each benchmark: item k of bench b is answered right when (b + k) is even. */
static void test_eval_all_benches(void **state)
{
    (void)state;
    char data[1024], script[512], url[600], rundir[600];
    if (!shared_data_dir(data, sizeof data)) {
        fprintf(stderr, "skipped: no benchmark data at %s (set AGENTFLOW_DATA)\n", data);
        skip();
    }
    json_t *rules = json_array();
    int expect[N_BENCHES][N_PER_BENCH];
    int n_right[N_BENCHES] = {0};
    for (size_t b = 0; b < N_BENCHES; b++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/%s/data.json", data, BENCHES[b]);
        json_t *items = load_json_file(path);
        for (int k = 0; k < N_PER_BENCH; k++) {
            const json_t *it = json_array_get(items, (size_t)k);
            char ans[4096];
            expect[b][k] = (int)((b + (size_t)k) % 2 == 0);
            n_right[b] += expect[b][k];
            add_answer_rule(rules, json_string_value(json_object_get(it, "query")),
                            expect[b][k] ? right_answer(BENCHES[b], it, ans, sizeof ans)
                                         : wrong_answer(BENCHES[b], it, ans, sizeof ans),
                            0);
        }
        json_decref(items);
    }
    add_flow_rules(rules, 0);
    tmp_path("all.json", script, sizeof script);
    write_script(script, rules);
    snprintf(url, sizeof url, "scripted:%s", script);
    /* --out two levels below a missing folder: made like mkdir -p */
    char top[512];
    tmp_path("run_all", top, sizeof top);
    rm_rf(top);
    snprintf(rundir, sizeof rundir, "%s/nested/run", top);
    char limit[16];
    snprintf(limit, sizeof limit, "%d", N_PER_BENCH);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--bench",
                          "all",
                          "--data-dir",
                          data,
                          "--out",
                          rundir,
                          "--limit",
                          limit,
                          "--url",
                          url,
                          "--max-steps",
                          "1",
                          "--tools",
                          "Generalist_Solution_Generator_Tool",
                          "--concurrency",
                          "3",
                          NULL};
    struct proc_result r;
    assert_int_equal(run_cli(argv, &r), 0);
    /* the summary: one line per bench, then the total */
    int lines = 0, total_right = 0;
    for (char *line = r.out, *nl; line && *line; line = nl ? nl + 1 : NULL, lines++) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        const char *bench = json_string_value(json_object_get(j, "bench"));
        if (lines < (int)N_BENCHES) {
            assert_string_equal(bench, BENCHES[lines]);
            assert_int_equal(json_integer_value(json_object_get(j, "n")), N_PER_BENCH);
            assert_int_equal(json_integer_value(json_object_get(j, "correct")), n_right[lines]);
            total_right += n_right[lines];
        } else {
            assert_string_equal(bench, "all");
            assert_int_equal(json_integer_value(json_object_get(j, "n")), N_BENCHES * N_PER_BENCH);
            assert_int_equal(json_integer_value(json_object_get(j, "correct")), total_right);
            double acc = json_real_value(json_object_get(j, "accuracy"));
            assert_true(acc > 100.0 * total_right / (N_BENCHES * N_PER_BENCH) - 0.01);
            assert_true(acc < 100.0 * total_right / (N_BENCHES * N_PER_BENCH) + 0.01);
        }
        json_decref(j);
    }
    assert_int_equal(lines, N_BENCHES + 1);
    proc_result_deinit(&r);
    json_t *res = read_results(rundir);
    check_all_benches_lines(res, expect, rundir);
    json_decref(res);
    char path[700];
    snprintf(path, sizeof path, "%s/run.json", rundir);
    json_t *run = load_json_file(path);
    assert_true(json_is_object(json_object_get(run, "config")));
    assert_int_equal(json_array_size(json_object_get(run, "benches")), N_BENCHES);
    assert_int_equal(json_integer_value(json_object_get(run, "limit")), N_PER_BENCH);
    json_decref(run);
    rm_rf(top);
    unlink(script);
}

/* A small benchmark folder of our own: aime24-shaped items "Problem number K." with answer K. */
static void write_fixture(const char *datadir, int n)
{
    char path[600];
    mkdir(datadir, 0777);
    snprintf(path, sizeof path, "%s/aime24", datadir);
    mkdir(path, 0777);
    json_t *items = json_array();
    for (int k = 0; k < n; k++) {
        char q[128];
        snprintf(q, sizeof q, "Problem number %d. What is %d plus zero?", k, k);
        json_array_append_new(
            items, json_pack("{s:s,s:i,s:s}", "query", q, "answer", k, "pid", "same-pid"));
    }
    char *text = json_dumps(items, 0);
    snprintf(path, sizeof path, "%s/aime24/data.json", datadir);
    write_file(path, text);
    free(text);
    json_decref(items);
}

/* Rules for the fixture: item k answered right when k % 3 != 0. */
static json_t *fixture_rules(int n, int delay_ms)
{
    json_t *rules = json_array();
    for (int k = 0; k < n; k++) {
        char q[128], a[32];
        snprintf(q, sizeof q, "Problem number %d. What is %d plus zero?", k, k);
        snprintf(a, sizeof a, "%d", k % 3 ? k : k + 100);
        add_answer_rule(rules, q, a, delay_ms);
    }
    add_flow_rules(rules, delay_ms);
    return rules;
}

/* Checks that results hold each (index, trial) of n items x trials exactly once. */
static void check_unique(const char *rundir, int n, int trials)
{
    json_t *res = read_results(rundir);
    assert_int_equal(json_array_size(res), (size_t)(n * trials));
    int *seen = calloc((size_t)(n * trials), sizeof *seen);
    size_t i;
    json_t *l;
    json_array_foreach(res, i, l)
    {
        json_int_t ix = json_integer_value(json_object_get(l, "index"));
        json_int_t t = json_integer_value(json_object_get(l, "trial"));
        assert_true(ix >= 0 && ix < n && t >= 0 && t < trials);
        seen[ix * trials + t]++;
        int right = ix % 3 != 0;
        assert_int_equal(json_is_true(json_object_get(json_object_get(l, "correct"), "rule")),
                         right);
    }
    for (int k = 0; k < n * trials; k++)
        assert_int_equal(seen[k], 1);
    free(seen);
    json_decref(res);
}

static void test_eval_kill_and_resume(void **state)
{
    (void)state;
    enum { N = 16 };
    char datadir[512], script[512], url[600], rundir[512], results[600];
    tmp_path("data_kill", datadir, sizeof datadir);
    write_fixture(datadir, N);
    tmp_path("slow.json", script, sizeof script);
    write_script(script, fixture_rules(N, 25));
    snprintf(url, sizeof url, "scripted:%s", script);
    tmp_path("run_kill", rundir, sizeof rundir);
    rm_rf(rundir);
    snprintf(results, sizeof results, "%s/results.jsonl", rundir);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--bench",
                          "aime24",
                          "--data-dir",
                          datadir,
                          "--out",
                          rundir,
                          "--url",
                          url,
                          "--max-steps",
                          "1",
                          "--tools",
                          "Generalist_Solution_Generator_Tool",
                          "--concurrency",
                          "2",
                          "--quiet",
                          NULL};
    pid_t pid = proc_spawn(argv);
    assert_true(pid > 0);
    double deadline = af_clock_ms() + RUN_TIMEOUT_S * 1000.0;
    int status, exited = 0;
    while (proc_count_lines(results) < 3 && af_clock_ms() < deadline && !exited) {
        exited = waitpid(pid, &status, WNOHANG) == pid;
        af_clock_sleep_ms(5);
    }
    if (exited)
        fprintf(stderr, "the run exited before it could be killed (status %d)\n", status);
    assert_false(exited);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    size_t partial = proc_count_lines(results);
    assert_true(partial >= 3);
    assert_true(partial < N);
    /* a torn last line, as a kill in mid-write would leave */
    int fd = open(results, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    const char torn[] = "{\"bench\":\"aime24\",\"index\":15,\"tri";
    assert_int_equal(write(fd, torn, sizeof torn - 1), (ssize_t)(sizeof torn - 1));
    close(fd);
    struct proc_result r;
    assert_int_equal(run_cli(argv, &r), 0);
    assert_non_null(strstr(r.out, "\"bench\":\"all\""));
    proc_result_deinit(&r);
    check_unique(rundir, N, 1);
    /* a third run has nothing to do and changes nothing */
    assert_int_equal(run_cli(argv, &r), 0);
    json_t *last = NULL;
    for (char *line = r.out; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        json_decref(last);
        last = json_loads(line, 0, NULL);
        line = nl ? nl + 1 : NULL;
    }
    assert_non_null(last);
    assert_int_equal(json_integer_value(json_object_get(last, "n")), N);
    assert_int_equal(json_integer_value(json_object_get(last, "resumed")), N);
    json_decref(last);
    proc_result_deinit(&r);
    check_unique(rundir, N, 1);
    rm_rf(rundir);
    rm_rf(datadir);
    unlink(script);
}

static void test_eval_trials_limit_and_usage(void **state)
{
    (void)state;
    char datadir[512], script[512], url[600], rundir[512];
    tmp_path("data_trials", datadir, sizeof datadir);
    write_fixture(datadir, 8);
    tmp_path("trials.json", script, sizeof script);
    write_script(script, fixture_rules(8, 0));
    snprintf(url, sizeof url, "scripted:%s", script);
    tmp_path("run_trials", rundir, sizeof rundir);
    rm_rf(rundir);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--bench",
                          "aime24",
                          "--data-dir",
                          datadir,
                          "--out",
                          rundir,
                          "--url",
                          url,
                          "--max-steps",
                          "1",
                          "--tools",
                          "Generalist_Solution_Generator_Tool",
                          "--trials",
                          "2",
                          "--limit",
                          "3",
                          "--no-cache",
                          NULL};
    struct proc_result r;
    assert_int_equal(run_cli(argv, &r), 0);
    /* items 0..2, two trials each: 0 is wrong, 1 and 2 right */
    assert_non_null(strstr(r.out, "\"n\":6,\"correct\":4"));
    proc_result_deinit(&r);
    check_unique(rundir, 3, 2);
    char path[600];
    snprintf(path, sizeof path, "%s/cache.sqlite", rundir);
    assert_int_not_equal(access(path, F_OK), 0); /* --no-cache */
    rm_rf(rundir);
    /* an unknown benchmark: exit 2, the message lists the names */
    const char *bad[] = {proc_agentflow_bin(),
                         "eval",
                         "run",
                         "--bench",
                         "aime24,nope",
                         "--out",
                         rundir,
                         "--url",
                         url,
                         NULL};
    assert_int_equal(proc_run(bad, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    assert_non_null(strstr(r.err, "unknown benchmark \"nope\""));
    assert_non_null(strstr(r.err, "gameof24"));
    assert_non_null(strstr(r.err, "medqa"));
    proc_result_deinit(&r);
    const char *no_out[] = {proc_agentflow_bin(), "eval", "run", "--bench", "aime24", NULL};
    assert_int_equal(proc_run(no_out, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 2);
    proc_result_deinit(&r);
    const char *help[] = {proc_agentflow_bin(), "eval", "run", "--help", NULL};
    assert_int_equal(proc_run(help, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "--trials"));
    assert_non_null(strstr(r.out, "--no-cache"));
    assert_non_null(strstr(r.out, "--max-steps"));
    proc_result_deinit(&r);
    /* a missing data file: exit 4 naming it */
    const char *missing[] = {proc_agentflow_bin(),
                             "eval",
                             "run",
                             "--bench",
                             "gpqa",
                             "--data-dir",
                             datadir,
                             "--out",
                             rundir,
                             "--url",
                             url,
                             NULL};
    assert_int_equal(proc_run(missing, NULL, RUN_TIMEOUT_S, &r), 0);
    assert_int_equal(r.exit_code, 4);
    assert_non_null(strstr(r.err, "gpqa/data.json"));
    proc_result_deinit(&r);
    rm_rf(datadir);
    unlink(script);
}

/* The cache over HTTP: a rerun of a finished eval, and a rerun after deleting results.jsonl,
 * make zero requests; --no-cache makes them all again. */
static void test_eval_cache_http(void **state)
{
    (void)state;
    enum { N = 6 };
    char datadir[512], cfg[512], rundir[512], results[600], text[1024];
    tmp_path("data_cache", datadir, sizeof datadir);
    write_fixture(datadir, N);
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    json_t *rules = fixture_rules(N, 0);
    for (size_t i = 0; i < json_array_size(rules); i++) {
        json_t *rule = json_array_get(rules, i);
        fake_server_add_rule(fs, json_string_value(json_object_get(rule, "match")),
                             json_string_value(json_object_get(rule, "reply")));
    }
    json_decref(rules);
    tmp_path("greedy.json", cfg, sizeof cfg);
    snprintf(text, sizeof text,
             "{\"url\": \"%s\", \"model\": \"m\", \"planner\": {\"temperature\": 0}}",
             fake_server_url(fs));
    write_file(cfg, text);
    tmp_path("run_cache", rundir, sizeof rundir);
    rm_rf(rundir);
    snprintf(results, sizeof results, "%s/results.jsonl", rundir);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--bench",
                          "aime24",
                          "--data-dir",
                          datadir,
                          "--out",
                          rundir,
                          "--config",
                          cfg,
                          "--max-steps",
                          "1",
                          "--tools",
                          "Generalist_Solution_Generator_Tool",
                          "--quiet",
                          "--concurrency",
                          "1",
                          NULL};
    struct proc_result r;
    assert_int_equal(run_cli(argv, &r), 0);
    proc_result_deinit(&r);
    size_t first = fake_server_request_count(fs);
    /* analysis, planner, executor, verifier, generator per item; the tool's prompt is the same
     * for every item, so only the first item's reaches the server */
    assert_int_equal(first, N * 5 + 1);
    check_unique(rundir, N, 1);
    assert_int_equal(run_cli(argv, &r), 0); /* finished: nothing to do */
    proc_result_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), first);
    unlink(results);
    assert_int_equal(run_cli(argv, &r), 0); /* everything from the cache */
    assert_non_null(strstr(r.out, "\"misses\":0"));
    proc_result_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), first);
    check_unique(rundir, N, 1);
    unlink(results);
    const char *nocache[] = {proc_agentflow_bin(),
                             "eval",
                             "run",
                             "--bench",
                             "aime24",
                             "--data-dir",
                             datadir,
                             "--out",
                             rundir,
                             "--config",
                             cfg,
                             "--max-steps",
                             "1",
                             "--tools",
                             "Generalist_Solution_Generator_Tool",
                             "--quiet",
                             "--no-cache",
                             NULL};
    assert_int_equal(run_cli(nocache, &r), 0);
    proc_result_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), first + N * 6);
    /* the default sampled planner (T=0.7) is not cached: only its calls reach the server */
    snprintf(text, sizeof text, "{\"url\": \"%s\", \"model\": \"m\"}", fake_server_url(fs));
    write_file(cfg, text);
    unlink(results);
    assert_int_equal(run_cli(argv, &r), 0);
    proc_result_deinit(&r);
    assert_int_equal(fake_server_request_count(fs), first + N * 6 + N);
    fake_server_stop(fs);
    rm_rf(rundir);
    rm_rf(datadir);
    unlink(cfg);
}

/* --judge: a scripted judge that agrees with the rule scorer except on item 4. */
static void test_eval_judge(void **state)
{
    (void)state;
    enum { N = 6 };
    char datadir[512], script[512], url[600], rundir[512];
    tmp_path("data_judge", datadir, sizeof datadir);
    write_fixture(datadir, N);
    json_t *rules = json_array();
    for (int k = 1; k < N; k++) {
        char m[128];
        snprintf(m, sizeof m, "Gold answer:\n%d\n\nResponse:\n%d\n", k, k);
        if (k % 3 != 0 && k != 4)
            json_array_append_new(rules, json_pack("{s:s,s:s}", "match", m, "reply",
                                                   "The values agree.\nVerdict: true"));
    }
    json_array_append_new(rules, json_pack("{s:s,s:s}", "match", "Grade a response", "reply",
                                           "They differ.\n**Verdict:** false"));
    json_t *flow = fixture_rules(N, 0);
    json_array_extend(rules, flow);
    json_decref(flow);
    tmp_path("judge.json", script, sizeof script);
    write_script(script, rules);
    snprintf(url, sizeof url, "scripted:%s", script);
    tmp_path("run_judge", rundir, sizeof rundir);
    rm_rf(rundir);
    const char *argv[] = {proc_agentflow_bin(),
                          "eval",
                          "run",
                          "--bench",
                          "aime24",
                          "--data-dir",
                          datadir,
                          "--out",
                          rundir,
                          "--url",
                          url,
                          "--max-steps",
                          "1",
                          "--tools",
                          "Generalist_Solution_Generator_Tool",
                          "--judge",
                          "--quiet",
                          NULL};
    struct proc_result r;
    assert_int_equal(run_cli(argv, &r), 0);
    assert_non_null(strstr(r.out, "\"judged\":6,\"judge_correct\":3"));
    proc_result_deinit(&r);
    json_t *res = read_results(rundir);
    assert_int_equal(json_array_size(res), N);
    for (size_t i = 0; i < json_array_size(res); i++) {
        json_t *l = json_array_get(res, i), *c = json_object_get(l, "correct");
        json_int_t ix = json_integer_value(json_object_get(l, "index"));
        assert_true(json_is_boolean(json_object_get(c, "judge")));
        assert_int_equal(json_is_true(json_object_get(c, "judge")), ix % 3 != 0 && ix != 4);
        assert_int_equal(json_is_true(json_object_get(c, "rule")), ix % 3 != 0);
        assert_non_null(json_string_value(json_object_get(l, "judge_reply")));
    }
    json_decref(res);
    /* a resumed run keeps the judge tally of the lines already there */
    assert_int_equal(run_cli(argv, &r), 0);
    assert_non_null(strstr(r.out, "\"judged\":6,\"judge_correct\":3"));
    proc_result_deinit(&r);
    rm_rf(rundir);
    rm_rf(datadir);
    unlink(script);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_eval_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    rm_rf(g_dir);
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (access(proc_agentflow_bin(), X_OK) != 0) {
        fprintf(stderr, "test_eval: %s not built; run 'make' first\n", proc_agentflow_bin());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_eval_all_benches),
        cmocka_unit_test(test_eval_kill_and_resume),
        cmocka_unit_test(test_eval_trials_limit_and_usage),
        cmocka_unit_test(test_eval_cache_http),
        cmocka_unit_test(test_eval_judge),
    };
    return cmocka_run_group_tests_name("eval", tests, setup, teardown);
}
