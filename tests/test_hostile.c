/*
 * test_hostile.c - attacks from issue 22 that must fail cleanly: a server that drips or
 * stalls its reply (bounded by --max-time and the stall rule), bodies that are huge, not JSON
 * or cut short (exit 3), a huge valid reply (capped before it reaches later prompts), escape
 * sequences in model output (stripped on a terminal), a trace that cannot be written (exit 4),
 * one file given as both input and output (refused), and an index build fed a cut gzip,
 * blank rows, or killed earlier (its DB.tmp files).
 *
 * Time bounds are generous: the machine may be slow and noisy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include "agentflow/llm.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/xalloc.h"
#include "support/drip_server.h"
#include "support/fake_server.h"
#include "support/proc.h"

#define RUN_TIMEOUT_S 120.0
#define HANG_BOUND_S 60.0 /* far above what a bounded call takes, far below a hang */

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

static void assert_contains(const char *s, const char *needle)
{
    if (!s || !strstr(s, needle))
        fprintf(stderr, "expected '%s' in: %.2000s\n", needle, s ? s : "(null)");
    assert_non_null(s);
    assert_non_null(strstr(s ? s : "", needle));
}

/* Runs the CLI with argv (NULL-terminated, argv[0] filled in here). */
static void run_cli(const char **argv, double timeout_s, struct proc_result *r)
{
    argv[0] = proc_agentflow_bin();
    assert_int_equal(proc_run(argv, NULL, timeout_s, r), 0);
}

/* --- a dripping or stalled reply --------------------------------------------------------- */

static void test_drip_bounded_by_max_time(void **state)
{
    (void)state;
    struct drip_server *ds = drip_server_start(200);
    assert_non_null(ds);
    const char *argv[] = {NULL,         "run", "--url",   drip_server_url(ds),
                          "--max-time", "2",   "--quiet", "What is 6 times 7?",
                          NULL};
    struct proc_result r;
    double t0 = af_clock_ms();
    run_cli(argv, RUN_TIMEOUT_S, &r);
    double s = (af_clock_ms() - t0) / 1000.0;
    if (r.exit_code != 3)
        fprintf(stderr, "exit %d after %.1f s; stderr: %s\n", r.exit_code, s, r.err);
    assert_int_equal(r.exit_code, 3);
    assert_true(s < HANG_BOUND_S);
    assert_contains(r.err, "max_time");
    proc_result_deinit(&r);
    drip_server_stop(ds);
}

/* A slow call cut off by --max-time ends the turns, not the solve: the answer is still
 * written (within its own allowance). */
static void test_max_time_keeps_answer(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    char *quick = fake_server_chat_body("Concise Summary: easy.");
    char *slow =
        fake_server_chat_body("Sub-Goal: x\nTool Name: Generalist_Solution_Generator_Tool");
    fake_server_push(fs, 200, quick, NULL, NULL, 0);    /* query analysis */
    fake_server_push(fs, 200, slow, NULL, NULL, 30000); /* the planner, far too slow */
    free(quick);
    free(slow);
    fake_server_add_rule(fs, "Give the final answer", "**Answer:** 42");
    const char *argv[] = {NULL,         "run", "--url",  fake_server_url(fs),
                          "--max-time", "3",   "--json", "--quiet",
                          "Q?",         NULL};
    struct proc_result r;
    double t0 = af_clock_ms();
    run_cli(argv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 0)
        fprintf(stderr, "exit %d; stderr: %s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 0);
    assert_true(af_clock_ms() - t0 < HANG_BOUND_S * 1000.0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "answer")), "42");
    assert_true(json_is_true(json_object_get(json_object_get(j, "timings"), "max_time_reached")));
    json_decref(j);
    proc_result_deinit(&r);
    fake_server_stop(fs);
}

static struct af_llm *drip_llm(const char *url, long stall_ms)
{
    struct af_llm_openai_params p = af_llm_openai_default_params();
    p.base_url = url;
    p.max_retries = 0;
    p.stall_timeout_ms = stall_ms;
    char err[256];
    struct af_llm *llm = af_llm_openai_new(&p, err, sizeof err);
    assert_non_null(llm);
    return llm;
}

static int chat_once(struct af_llm *llm, double deadline_ms, struct af_llm_reply *r)
{
    struct af_msg m = {.role = "user", .content = "hi"};
    struct af_llm_request req = {
        .msgs = &m, .n_msgs = 1, .sampling = af_llm_default_sampling(), .deadline_ms = deadline_ms};
    af_llm_reply_init(r);
    return af_llm_chat(llm, &req, r);
}

static void test_stall_rule_and_request_deadline(void **state)
{
    (void)state;
    struct drip_server *ds = drip_server_start(100); /* 10 bytes/s: far below 512 a window */
    assert_non_null(ds);
    struct af_llm *llm = drip_llm(drip_server_url(ds), 1000);
    struct af_llm_reply r;
    double t0 = af_clock_ms();
    assert_int_equal(chat_once(llm, 0, &r), AF_ETIMEOUT);
    assert_true(af_clock_ms() - t0 < HANG_BOUND_S * 1000.0);
    assert_contains(r.errmsg, "stalled");
    af_llm_reply_deinit(&r);
    /* with a later deadline (one that sets the attempt's time-out): a stall is still a stall,
     * retried as configured, not a cut at the deadline */
    assert_int_equal(chat_once(llm, af_clock_ms() + 200000, &r), AF_ETIMEOUT);
    assert_contains(r.errmsg, "stalled");
    assert_null(strstr(r.errmsg, "deadline"));
    af_llm_reply_deinit(&r);
    af_llm_free(llm);

    /* without the stall rule, the request's deadline still ends the call */
    llm = drip_llm(drip_server_url(ds), 0);
    t0 = af_clock_ms();
    assert_int_equal(chat_once(llm, af_clock_ms() + 1000, &r), AF_ETIMEOUT);
    assert_true(af_clock_ms() - t0 < HANG_BOUND_S * 1000.0);
    assert_contains(r.errmsg, "deadline");
    af_llm_reply_deinit(&r);
    /* a deadline already past sends nothing */
    int before = drip_server_connections(ds);
    assert_int_equal(chat_once(llm, af_clock_ms() - 1, &r), AF_ETIMEOUT);
    assert_int_equal(drip_server_connections(ds), before);
    af_llm_reply_deinit(&r);
    af_llm_free(llm);
    drip_server_stop(ds);
}

/* --- bodies that are too big, not JSON or cut short -------------------------------------- */

static void expect_exit3(struct fake_server *fs, const char *body, const char *needle)
{
    fake_server_set_default(fs, 200, body, 0);
    const char *argv[] = {NULL, "run", "--url", fake_server_url(fs), "--quiet", "Q?", NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 3)
        fprintf(stderr, "exit %d; stderr: %.500s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 3);
    assert_contains(r.err, needle);
    proc_result_deinit(&r);
}

static void test_bad_bodies_exit_3(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    size_t n = (size_t)70 << 20;
    char *big = af_xmalloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    expect_exit3(fs, big, "max_response_bytes"); /* 70 MB: over the 64 MiB cap */
    big[(size_t)50 << 20] = '\0';
    expect_exit3(fs, big, "malformed JSON"); /* 50 MB, not JSON */
    free(big);
    expect_exit3(fs, "{\"choices\":[{\"message\":{\"content\":\"cut", "malformed JSON");
    fake_server_stop(fs);
}

/* A 2 MB reply is cut to max_result_chars before it goes into any later prompt. */
static void test_huge_reply_capped(void **state)
{
    (void)state;
    struct fake_server *fs = fake_server_start();
    assert_non_null(fs);
    size_t n = (size_t)2 << 20;
    char *text = af_xmalloc(n + 64);
    memset(text, 'y', n);
    strcpy(text + n, "\nConclusion: STOP\n**Answer:** 42");
    char *body = fake_server_chat_body(text);
    free(text);
    fake_server_set_default(fs, 200, body, 0);
    free(body);
    const char *argv[] = {NULL,      "run", "--url", fake_server_url(fs), "--max-steps", "1",
                          "--quiet", "Q?",  NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 0)
        fprintf(stderr, "exit %d; stderr: %.500s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 0);
    char *last = fake_server_last_request(fs);
    assert_true(strlen(last) < ((size_t)1 << 20)); /* was over 4 MB: two copies */
    assert_contains(last, "[cut: ");
    free(last);
    proc_result_deinit(&r);
    fake_server_stop(fs);
}

/* --- escape sequences from the model ----------------------------------------------------- */

/* Runs argv on a pseudo-terminal (stdout and stderr both) and returns what it printed. */
static char *run_on_pty(const char **argv)
{
    argv[0] = proc_agentflow_bin();
    int master = -1;
    pid_t pid = forkpty(&master, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    size_t cap = 1 << 16, n = 0;
    char *out = af_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap)
            out = af_xrealloc(out, cap *= 2);
        ssize_t k = read(master, out + n, cap - n - 1);
        if (k <= 0)
            break; /* EIO once the child has exited */
        n += (size_t)k;
    }
    out[n] = '\0';
    int st = 0;
    waitpid(pid, &st, 0);
    close(master);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    return out;
}

static void test_escapes_stripped_on_terminal(void **state)
{
    (void)state;
    char script[256];
    tmp_path("esc.json", script, sizeof script);
    write_file(script,
               "{\"rules\":[{\"match\":\"Give the final answer\",\"reply\":\"**Answer:** "
               "4\\u001b]0;owned\\u0007\\u001b[2J2\\u009b31m\"},"
               "{\"match\":\"You decide the single next action\",\"reply\":\"Context: c\\n"
               "Sub-Goal: look \\u001b[31mred\\u001b[0m\\u001b]52;c;eA==\\u0007\\nTool Name: "
               "Generalist_Solution_Generator_Tool\"},"
               "{\"match\":\"Judge whether\",\"reply\":\"Conclusion: STOP\"}],"
               "\"default\":\"ok\"}");
    char url[300];
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *argv[] = {NULL, "run", "--url", url, "--max-steps", "1", "Q?", NULL};
    char *out = run_on_pty(argv);
    /* The model's sequences are gone; the only ESC left is run's own line clearing on a
     * terminal ("\r\033[K" before a progress line). */
    for (const char *p = out; (p = strchr(p, 0x1b)); p++)
        if (strncmp(p, "\033[K", 3) != 0)
            fail_msg("an escape sequence reached the terminal: '%.12s'", p);
    assert_null(strchr(out, 0x07));
    assert_null(strstr(out, "\xc2\x9b"));
    assert_contains(out, "42");
    assert_contains(out, "sub-goal: look");
    free(out);

    /* piped, the answer is the model's bytes; --json escapes them as JSON does */
    const char *jargv[] = {NULL, "run",    "--url",   url,  "--max-steps",
                           "1",  "--json", "--quiet", "Q?", NULL};
    struct proc_result r;
    run_cli(jargv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 0);
    json_t *j = json_loads(r.out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "answer")),
                        "4\x1b]0;owned\x07\x1b[2J2\xc2\x9b"
                        "31m");
    json_decref(j);
    proc_result_deinit(&r);
}

/* --- output that cannot be written ------------------------------------------------------- */

static void test_trace_write_failure(void **state)
{
    (void)state;
    if (access("/dev/full", W_OK) != 0) {
        skip();
        return;
    }
    char script[256], url[300];
    tmp_path("esc.json", script, sizeof script);
    write_file(script, "{\"rules\":[{\"match\":\"Judge whether\",\"reply\":\"Conclusion: STOP\"}],"
                       "\"default\":\"**Answer:** 1\"}");
    snprintf(url, sizeof url, "scripted:%s", script);
    const char *argv[] = {NULL,      "run",       "--url",   url,  "--max-steps", "1",
                          "--trace", "/dev/full", "--quiet", "Q?", NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 4)
        fprintf(stderr, "exit %d; stderr: %.500s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 4);
    assert_contains(r.err, "/dev/full");
    proc_result_deinit(&r);
}

static void test_same_file_in_and_out(void **state)
{
    (void)state;
    char in[256], link[256];
    tmp_path("batch.jsonl", in, sizeof in);
    write_file(in, "{\"id\":\"1\",\"query\":\"Q?\"}\n");
    tmp_path("batch-link.jsonl", link, sizeof link);
    unlink(link);
    assert_int_equal(symlink(in, link), 0);
    const char *argv[] = {NULL,    "run", "--url", "scripted:/nonexistent.json", "--batch", in,
                          "--out", link,  NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 2);
    assert_contains(r.err, "same file");
    proc_result_deinit(&r);
    char *text = NULL, err[256];
    assert_int_equal(af_file_read(in, 1 << 20, &text, NULL, err, sizeof err), 0);
    assert_string_equal(text, "{\"id\":\"1\",\"query\":\"Q?\"}\n");
    free(text);
}

/* --- index build ---------------------------------------------------------------------- */

static char *read_text(const char *path)
{
    char *text = NULL, err[256];
    assert_int_equal(af_file_read(path, 1 << 24, &text, NULL, err, sizeof err), 0);
    return text;
}

static void test_index_same_file(void **state)
{
    (void)state;
    char in[256], alias[300];
    tmp_path("passages.jsonl", in, sizeof in);
    const char *rows = "{\"id\":\"1\",\"title\":\"A\",\"text\":\"alpha\"}\n";
    write_file(in, rows);
    snprintf(alias, sizeof alias, "%s/./passages.jsonl", g_dir);
    const char *argv[] = {NULL, "index", "build", "--input", in, "--out", alias, NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 2);
    assert_contains(r.err, "same file");
    proc_result_deinit(&r);
    char *text = read_text(in);
    assert_string_equal(text, rows);
    free(text);

    /* nor as one of the files the build writes (and first removes): DB.tmp */
    char db[256], tmp[300];
    tmp_path("named.db", db, sizeof db);
    snprintf(tmp, sizeof tmp, "%s.tmp", db);
    write_file(tmp, rows);
    const char *targv[] = {NULL, "index", "build", "--input", tmp, "--out", db, NULL};
    run_cli(targv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 2);
    assert_contains(r.err, "a file the build of");
    proc_result_deinit(&r);
    text = read_text(tmp);
    assert_string_equal(text, rows);
    free(text);
}

/* A gzip cut in the middle fails even with --skip-bad (it gave half the passages, exit 0). */
static void test_index_truncated_gzip(void **state)
{
    (void)state;
    char gzp[256], db[256];
    tmp_path("cut.jsonl.gz", gzp, sizeof gzp);
    tmp_path("cut.db", db, sizeof db);
    gzFile gz = gzopen(gzp, "wb");
    assert_non_null(gz);
    for (int i = 0; i < 20000; i++)
        gzprintf(gz, "{\"id\":\"%d\",\"title\":\"T%d\",\"text\":\"passage %d about %x\"}\n", i, i,
                 i, i * 2654435761u);
    assert_int_equal(gzclose(gz), Z_OK);
    char *data = NULL, err[256];
    size_t len = 0;
    assert_int_equal(af_file_read(gzp, 1 << 24, &data, &len, err, sizeof err), 0);
    assert_int_equal(af_file_write_atomic(gzp, data, len / 2, err, sizeof err), 0);
    free(data);
    const char *argv[] = {NULL, "index", "build", "--input", gzp, "--out", db, "--skip-bad", NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 4)
        fprintf(stderr, "exit %d; stderr: %s\n", r.exit_code, r.err);
    assert_int_equal(r.exit_code, 4);
    assert_contains(r.err, "cut short");
    assert_int_not_equal(access(db, F_OK), 0);
    proc_result_deinit(&r);
}

/* Blank lines are counted; a TSV row of empty fields is a malformed row, never dropped
 * silently. */
static void test_index_blank_rows(void **state)
{
    (void)state;
    char tsv[256], db[256];
    tmp_path("rows.tsv", tsv, sizeof tsv);
    tmp_path("rows.db", db, sizeof db);
    write_file(tsv, "id\ttext\ttitle\n1\tfirst passage\tOne\n\n   \n\t\t\n2\tsecond\tTwo\n");
    const char *argv[] = {NULL, "index", "build", "--input", tsv, "--out", db, NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 4);
    assert_contains(r.err, "rows.tsv:5");
    proc_result_deinit(&r);
    const char *sargv[] = {NULL, "index", "build", "--input", tsv, "--out", db, "--skip-bad", NULL};
    run_cli(sargv, RUN_TIMEOUT_S, &r);
    if (r.exit_code != 0)
        fprintf(stderr, "stderr: %s\n", r.err);
    assert_int_equal(r.exit_code, 0);
    assert_contains(r.err, "indexed 2 passages (1 bad lines skipped, 2 blank lines)");
    proc_result_deinit(&r);
}

/* A killed build's DB.tmp files go at the next index command on DB, unless a live build
 * (the flock on DB.tmp) still writes them. */
static void test_index_stale_tmp(void **state)
{
    (void)state;
    char db[256], t0[300], t3[300];
    tmp_path("stale.db", db, sizeof db);
    snprintf(t0, sizeof t0, "%s.tmp", db);
    snprintf(t3, sizeof t3, "%s.tmp.3", db);
    write_file(t0, "half a database");
    write_file(t3, "half a shard");
    int fd = open(t0, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0); /* as a running build holds it */
    const char *argv[] = {NULL, "index", "query", db, "x", NULL};
    struct proc_result r;
    run_cli(argv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 4); /* no DB yet */
    proc_result_deinit(&r);
    assert_int_equal(access(t0, F_OK), 0);
    assert_int_equal(access(t3, F_OK), 0);
    /* a second build refuses to start, and leaves the live one's files alone */
    char in[256];
    tmp_path("stale-in.jsonl", in, sizeof in);
    write_file(in, "{\"id\":\"1\",\"title\":\"A\",\"text\":\"alpha\"}\n");
    const char *bargv[] = {NULL, "index", "build", "--input", in, "--out", db, NULL};
    run_cli(bargv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 4);
    assert_contains(r.err, "another index build");
    proc_result_deinit(&r);
    assert_int_equal(access(t0, F_OK), 0);
    assert_int_equal(access(t3, F_OK), 0);
    close(fd); /* the build is gone */
    run_cli(argv, RUN_TIMEOUT_S, &r);
    assert_int_equal(r.exit_code, 4);
    assert_contains(r.err, "removed 2 files left by an interrupted build");
    proc_result_deinit(&r);
    assert_int_not_equal(access(t0, F_OK), 0);
    assert_int_not_equal(access(t3, F_OK), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/af_hostile_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
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
        cmocka_unit_test(test_drip_bounded_by_max_time),
        cmocka_unit_test(test_max_time_keeps_answer),
        cmocka_unit_test(test_stall_rule_and_request_deadline),
        cmocka_unit_test(test_bad_bodies_exit_3),
        cmocka_unit_test(test_huge_reply_capped),
        cmocka_unit_test(test_escapes_stripped_on_terminal),
        cmocka_unit_test(test_trace_write_failure),
        cmocka_unit_test(test_same_file_in_and_out),
        cmocka_unit_test(test_index_same_file),
        cmocka_unit_test(test_index_truncated_gzip),
        cmocka_unit_test(test_index_blank_rows),
        cmocka_unit_test(test_index_stale_tmp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
