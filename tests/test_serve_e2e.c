/*
 * test_serve_e2e.c - `agentflow serve` as a process: SIGTERM lets a running flow finish (and,
 * with no grace, cancels it) and exits 0; a run cut off by kill -9 reads back "interrupted";
 * the official `openai` npm client gets the answer plain and streamed; and a headless
 * Chromium asks a question on the page, sees the step cards and the answer, shows a tool's
 * <script> as text, reads a --trace file in the trace viewer, and leaves a screenshot in
 * build/.
 *
 * The client and browser tests skip with a message where node, the npm package (installed by
 * .ci/run under build/npm) or chromium is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "support/http_client.h"
#include "support/proc.h"

#define DEADLINE_MS 120000.0

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

/* Writes tests/data/three_step.json changed: delay_ms on every rule, a verifier that never
 * stops (endless), a tool reply with a <script> tag (script_tag). */
static void write_script(const char *path, int delay_ms, int endless, int script_tag)
{
    char src[512], *text = NULL, err[256];
    assert_int_equal(af_file_read(src_path("tests/data/three_step.json", src, sizeof src), 1 << 20,
                                  &text, NULL, err, sizeof err),
                     0);
    json_t *doc = json_loads(text, 0, NULL);
    free(text);
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(doc, "rules"), i, r)
    {
        const char *m = json_string_value(json_object_get(r, "match"));
        json_object_set_new(r, "delay_ms", json_integer(delay_ms));
        json_object_del(r, "times"); /* every flow of the server uses the script afresh */
        if (strstr(m, "Judge whether"))
            json_object_set_new(r, "reply",
                                json_string(endless ? "Conclusion: CONTINUE" : "Conclusion: STOP"));
        if (script_tag && strcmp(m, "What is 6 * 7?") == 0)
            json_object_set_new(r, "reply", json_string("<script>alert(1)</script> 42"));
    }
    char *out = json_dumps(doc, 0);
    assert_int_equal(af_file_write_atomic(path, out, strlen(out), err, sizeof err), 0);
    free(out);
    json_decref(doc);
}

struct server {
    pid_t pid;
    int port;
    char log[512];
    char base[64];
};

/* Starts `agentflow serve --port 0 ARGS...` with stderr in a log file, and reads the port
 * from its "listening on" line. */
static void server_start(struct server *s, const char *name, const char *const args[])
{
    memset(s, 0, sizeof *s);
    tmp_path(name, s->log, sizeof s->log);
    const char *argv[40];
    size_t n = 0;
    argv[n++] = proc_agentflow_bin();
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    for (size_t i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        int fd = open(s->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int devnull = open("/dev/null", O_RDWR);
        dup2(fd, 2);
        dup2(devnull, 1);
        dup2(devnull, 0);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    double deadline = af_clock_ms() + DEADLINE_MS;
    for (;;) {
        char *text = NULL, err[256];
        if (af_file_read(s->log, 1 << 20, &text, NULL, err, sizeof err) == 0) {
            const char *p = strstr(text, "listening on http://127.0.0.1:");
            if (p)
                s->port = atoi(p + strlen("listening on http://127.0.0.1:"));
            if (!p && strstr(text, "agentflow serve:"))
                fprintf(stderr, "server log: %s\n", text);
            free(text);
        }
        if (s->port > 0)
            break;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid)
            fail_msg("agentflow serve exited before listening (see %s)", s->log);
        assert_true(af_clock_ms() < deadline);
        af_clock_sleep_ms(20);
    }
    snprintf(s->base, sizeof s->base, "http://127.0.0.1:%d", s->port);
}

/* Waits for the server to exit; returns its exit status (or 128 + signal). */
static int server_wait(struct server *s)
{
    int status = 0;
    double deadline = af_clock_ms() + DEADLINE_MS;
    while (waitpid(s->pid, &status, WNOHANG) == 0) {
        if (af_clock_ms() > deadline) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            fail_msg("agentflow serve did not exit");
        }
        af_clock_sleep_ms(20);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void get(struct server *s, const char *path, struct http_res *r)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", s->base, path);
    struct http_req rq = {.method = "GET", .url = url, .timeout_s = 30};
    assert_int_equal(http_do(&rq, r), 0);
}

/* --- SIGTERM ----------------------------------------------------------------------------- */
struct stream_bg {
    struct server *s;
    struct http_res res;
    int saw_step; /* set by the body callback, read by the test thread */
    pthread_mutex_t mu;
    pthread_t th;
};

static int note_step(void *user, const char *body)
{
    struct stream_bg *b = user;
    pthread_mutex_lock(&b->mu);
    if (strstr(body, "\"type\":\"step\""))
        b->saw_step = 1;
    pthread_mutex_unlock(&b->mu);
    return 0; /* keep reading */
}

static void *stream_main(void *arg)
{
    struct stream_bg *b = arg;
    char url[256];
    snprintf(url, sizeof url, "%s/v1/chat/completions", b->s->base);
    struct http_req rq = {.method = "POST",
                          .url = url,
                          .body = "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":"
                                  "\"What is 6 times 7?\"}]}",
                          .timeout_s = 300,
                          .stop = note_step,
                          .stop_user = b};
    (void)http_do(&rq, &b->res);
    return NULL;
}

/* Starts a streamed request and returns once its first step has arrived. */
static void stream_until_step(struct stream_bg *b, struct server *s)
{
    memset(b, 0, sizeof *b);
    b->s = s;
    pthread_mutex_init(&b->mu, NULL);
    assert_int_equal(pthread_create(&b->th, NULL, stream_main, b), 0);
    double deadline = af_clock_ms() + DEADLINE_MS;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        int seen = b->saw_step;
        pthread_mutex_unlock(&b->mu);
        if (seen)
            return;
        assert_true(af_clock_ms() < deadline);
        af_clock_sleep_ms(10);
    }
}

/* SIGTERM while a flow runs: no new connection is taken, the flow finishes within the grace,
 * its client gets the whole answer, and the server exits 0. */
static void test_sigterm_lets_flow_finish(void **state)
{
    (void)state;
    char script[512], db[512], url[600];
    tmp_path("slow.json", script, sizeof script);
    write_script(script, 150, 0, 0);
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *args[] = {"--url",     url,   "--db", tmp_path("term.db", db, sizeof db),
                          "--grace-s", "600", NULL};
    struct server s;
    server_start(&s, "term.log", args);
    struct stream_bg b;
    stream_until_step(&b, &s);
    assert_int_equal(kill(s.pid, SIGTERM), 0);
    /* new connections are refused from now on (the flow takes a few more slow calls) */
    double deadline = af_clock_ms() + DEADLINE_MS;
    for (;;) {
        char hurl[256];
        snprintf(hurl, sizeof hurl, "%s/healthz", s.base);
        struct http_req rq = {.method = "GET", .url = hurl, .timeout_s = 5};
        struct http_res r;
        int rc = http_do(&rq, &r);
        http_res_deinit(&r);
        if (rc != 0)
            break;
        assert_true(af_clock_ms() < deadline);
        af_clock_sleep_ms(10);
    }
    pthread_join(b.th, NULL);
    assert_int_equal(b.res.status, 200);
    assert_non_null(strstr(b.res.body, "**Answer:** 42"));
    assert_non_null(strstr(b.res.body, "\"finish_reason\":\"stop\""));
    assert_non_null(strstr(b.res.body, "data: [DONE]"));
    assert_int_equal(server_wait(&s), 0);
    char *log = NULL, err[256];
    assert_int_equal(af_file_read(s.log, 1 << 20, &log, NULL, err, sizeof err), 0);
    assert_non_null(strstr(log, "SIGTERM"));
    assert_non_null(strstr(log, "1 answered, 0 failed, 0 cancelled"));
    assert_non_null(strstr(log, "agentflow serve: POST /v1/chat/completions 200 "));
    free(log);
    http_res_deinit(&b.res);
    pthread_mutex_destroy(&b.mu);
}

/* With no grace, SIGTERM cancels a flow that would run for long: the stream ends with an
 * error chunk and [DONE], and the server still exits 0. */
static void test_sigterm_no_grace_cancels(void **state)
{
    (void)state;
    char script[512], db[512], url[600];
    tmp_path("endless.json", script, sizeof script);
    write_script(script, 30, 1, 0);
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *args[] = {"--url",     url, "--db",        tmp_path("cancel.db", db, sizeof db),
                          "--grace-s", "0", "--max-steps", "1000",
                          NULL};
    struct server s;
    server_start(&s, "cancel.log", args);
    struct stream_bg b;
    stream_until_step(&b, &s);
    assert_int_equal(kill(s.pid, SIGTERM), 0);
    pthread_join(b.th, NULL);
    assert_int_equal(b.res.status, 200);
    assert_non_null(strstr(b.res.body, "\"code\":\"cancelled\""));
    assert_non_null(strstr(b.res.body, "data: [DONE]"));
    assert_null(strstr(b.res.body, "**Answer:**"));
    assert_int_equal(server_wait(&s), 0);
    http_res_deinit(&b.res);
    pthread_mutex_destroy(&b.mu);
}

/* A run cut off by kill -9 is "interrupted" when the server comes back on the same file, and
 * the steps it stored before are still there. */
static void test_kill9_run_interrupted(void **state)
{
    (void)state;
    char script[512], db[512], url[600];
    tmp_path("endless9.json", script, sizeof script);
    write_script(script, 30, 1, 0);
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *args[] = {"--url",       url,    "--db", tmp_path("k9.db", db, sizeof db),
                          "--max-steps", "1000", NULL};
    struct server s;
    server_start(&s, "k9.log", args);
    char purl[256];
    snprintf(purl, sizeof purl, "%s/v1/runs", s.base);
    struct http_req rq = {
        .method = "POST", .url = purl, .body = "{\"query\":\"What is 6 times 7?\"}"};
    struct http_res r;
    assert_int_equal(http_do(&rq, &r), 0);
    assert_int_equal(r.status, 201);
    json_t *j = json_loads(r.body, 0, NULL);
    char path[128];
    snprintf(path, sizeof path, "/v1/runs/%s", af_json_get_str(j, "id"));
    json_decref(j);
    http_res_deinit(&r);
    double deadline = af_clock_ms() + DEADLINE_MS;
    for (;;) { /* until a step is stored */
        get(&s, path, &r);
        int stepped = strstr(r.body, "\"type\":\"step\"") != NULL;
        http_res_deinit(&r);
        if (stepped)
            break;
        assert_true(af_clock_ms() < deadline);
        af_clock_sleep_ms(20);
    }
    kill(s.pid, SIGKILL);
    assert_int_equal(server_wait(&s), 128 + SIGKILL);
    server_start(&s, "k9b.log", args);
    get(&s, path, &r);
    assert_int_equal(r.status, 200);
    j = json_loads(r.body, 0, NULL);
    assert_string_equal(af_json_get_str(j, "state"), "interrupted");
    assert_string_equal(af_json_get_str(json_array_get(json_object_get(j, "events"), 1), "type"),
                        "step");
    json_decref(j);
    http_res_deinit(&r);
    kill(s.pid, SIGTERM);
    assert_int_equal(server_wait(&s), 0);
}

/* --- real clients -------------------------------------------------------------------------- */
static int have_program(const char *name, char *out, size_t len)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", path ? path : "/usr/bin:/bin");
    for (char *d = dirs, *next; d && *d; d = next) {
        next = strchr(d, ':');
        if (next)
            *next++ = '\0';
        if ((size_t)snprintf(out, len, "%s/%s", d, name) < len && access(out, X_OK) == 0)
            return 1;
    }
    return 0;
}

static void test_openai_client(void **state)
{
    (void)state;
    char node[512], modules[512], probe[600], js[512];
    src_path("build/npm/node_modules", modules, sizeof modules);
    snprintf(probe, sizeof probe, "%s/openai/package.json", modules);
    if (!have_program("node", node, sizeof node) || access(probe, R_OK) != 0) {
        fprintf(stderr,
                "test_serve_e2e: skipped: node or the openai npm package (%s; .ci/run "
                "installs it) is missing\n",
                probe);
        skip();
    }
    char script[512], db[512], url[600];
    tmp_path("client.json", script, sizeof script);
    write_script(script, 0, 0, 0);
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *args[] = {"--url", url, "--db", tmp_path("client.db", db, sizeof db), NULL};
    struct server s;
    setenv("AGENTFLOW_API_KEY", "k-123", 1); /* the key from the environment this time */
    server_start(&s, "client.log", args);
    unsetenv("AGENTFLOW_API_KEY");
    struct http_res nokey;
    get(&s, "/v1/models", &nokey);
    assert_int_equal(nokey.status, 401);
    http_res_deinit(&nokey);
    const char *argv[] = {node,    src_path("tests/support/serve_openai.mjs", js, sizeof js),
                          modules, s.base,
                          "k-123", NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, 300, &r), 0);
    if (r.exit_code != 0)
        fprintf(stderr, "serve_openai.mjs: %s%s\n", r.out, r.err);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    assert_non_null(strstr(af_json_get_str(j, "plain"), "**Answer:** 42"));
    assert_string_equal(af_json_get_str(j, "plain"), af_json_get_str(j, "streamed"));
    assert_int_equal(json_integer_value(json_object_get(j, "steps")), 1);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "tools"), 0)),
                        "Generalist_Solution_Generator_Tool");
    assert_string_equal(af_json_get_str(j, "finish"), "stop");
    assert_true(json_integer_value(json_object_get(j, "stream_tokens")) > 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "bad"), "status")), 400);
    assert_string_equal(af_json_get_str(json_object_get(j, "bad"), "code"), "unknown_tool");
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "models"), 0)),
                        "agentflow");
    json_decref(j);
    proc_result_deinit(&r);
    kill(s.pid, SIGTERM);
    assert_int_equal(server_wait(&s), 0);
}

static void test_browser_page(void **state)
{
    (void)state;
    char node[512], chromium[512], js[512];
    if (!have_program("node", node, sizeof node) ||
        !(have_program("chromium", chromium, sizeof chromium) ||
          have_program("chromium-browser", chromium, sizeof chromium))) {
        fprintf(stderr, "test_serve_e2e: skipped: chromium or node is missing "
                        "(scripts/install-deps.sh installs chromium)\n");
        skip();
    }
    char script[512], db[512], url[600], trace[512], png[512];
    tmp_path("page.json", script, sizeof script);
    write_script(script, 0, 0, 1);
    snprintf(url, sizeof url, "scripted:%s", script);
    tmp_path("page_trace.jsonl", trace, sizeof trace);
    const char *args[] = {"--url",   url,   "--db", tmp_path("page.db", db, sizeof db),
                          "--trace", trace, NULL};
    struct server s;
    server_start(&s, "page.log", args);
    src_path("build", png, sizeof png);
    mkdir(png, 0755);
    src_path("build/serve_page.png", png, sizeof png);
    unlink(png);
    /* Node 22 has a global WebSocket; Node 20 needs a flag for it (and later ones may not
     * know the flag), so ask first. */
    const char *probe[] = {node, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)",
                           NULL};
    struct proc_result pr;
    assert_int_equal(proc_run(probe, NULL, 60, &pr), 0);
    const char *ws_flag = pr.exit_code == 0 ? "--no-warnings" : "--experimental-websocket";
    proc_result_deinit(&pr);
    const char *argv[] = {node,
                          ws_flag,
                          src_path("tests/support/serve_page.mjs", js, sizeof js),
                          chromium,
                          s.base,
                          png,
                          "What is 6 times 7?",
                          trace,
                          NULL};
    struct proc_result r;
    assert_int_equal(proc_run(argv, NULL, 300, &r), 0);
    if (r.exit_code != 0)
        fprintf(stderr, "serve_page.mjs: %s%s\n", r.out, r.err);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(af_json_get_str(j, "answer"), "42");
    json_t *tools = json_object_get(j, "tools");
    assert_true(json_array_size(tools) >= 1);
    assert_string_equal(json_string_value(json_array_get(tools, 0)),
                        "Generalist_Solution_Generator_Tool");
    /* the tool's <script> is shown as text and never became an element */
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "results"), 0)),
                        "<script>alert(1)</script> 42");
    assert_non_null(strstr(json_string_value(json_array_get(json_object_get(j, "result_html"), 0)),
                           "&lt;script&gt;"));
    assert_int_equal(json_integer_value(json_object_get(j, "scripts")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "dialogs")), 0);
    assert_true(strstr(af_json_get_str(j, "analysis"), "multiply two numbers") != NULL);
    /* the trace viewer draws the same run from the --trace file */
    assert_string_equal(af_json_get_str(j, "trace_answer"), "42");
    assert_int_equal(json_array_size(json_object_get(j, "trace_steps")), json_array_size(tools));
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "trace_steps"), 0)),
                        "Generalist_Solution_Generator_Tool");
    json_decref(j);
    proc_result_deinit(&r);
    struct stat st;
    assert_int_equal(stat(png, &st), 0);
    assert_true(st.st_size > 1000);
    char *img = NULL, err[256];
    size_t n = 0;
    assert_int_equal(af_file_read(png, 1 << 26, &img, &n, err, sizeof err), 0);
    assert_memory_equal(img, "\x89PNG", 4);
    free(img);
    fprintf(stderr, "test_serve_e2e: screenshot in %s\n", png);
    kill(s.pid, SIGTERM);
    assert_int_equal(server_wait(&s), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_serve_e2e_XXXXXX");
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
    if (access(proc_agentflow_bin(), X_OK) != 0) {
        fprintf(stderr, "test_serve_e2e: %s not built; run 'make' first\n", proc_agentflow_bin());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigterm_lets_flow_finish),
        cmocka_unit_test(test_sigterm_no_grace_cancels),
        cmocka_unit_test(test_kill9_run_interrupted),
        cmocka_unit_test(test_openai_client),
        cmocka_unit_test(test_browser_page),
    };
    return cmocka_run_group_tests_name("serve_e2e", tests, setup, teardown);
}
