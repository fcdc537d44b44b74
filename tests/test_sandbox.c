/*
 * test_sandbox.c - hostile Python against the sandbox: an infinite loop, a fork bomb, a memory
 * hog, a gigabyte of output, writes outside the working directory, reads of host files, a
 * network connection, killing the parent, and a setsid child that outlives the timeout. Each
 * is contained and reported, no process is left behind, and the host is untouched.
 * Then the kernel's attack surface, through ctypes: every syscall group of the seccomp deny
 * list is refused with EPERM (clone3 with ENOSYS), and a control run without the filter shows
 * that the same calls fail otherwise there, so the EPERM is the filter's; other processes'
 * memory through /proc/PID/mem, hard links and symlinks out of the working folder, filling
 * /dev/shm and the working folder, a 10 MB code string, NUL bytes and invalid UTF-8.
 *
 * The bubblewrap cases are skipped (with a message) where namespaces cannot be created; the
 * rlimits fallback is tested everywhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentflow/tools.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "support/proc.h"
#include "tools/sandbox.h"

static int g_bwrap;

/* Number of live (non-zombie) processes whose command line contains marker (and, with
 * argv0 set, whose first argument is argv0). */
static int count_marked_argv0(const char *marker, const char *argv0)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], buf[8192];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[r > 0 ? r : 0] = '\0';
        const char *rp = strrchr(buf, ')');
        if (rp && rp[1] == ' ' && rp[2] == 'Z')
            continue;
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        r = read(fd, buf, sizeof buf);
        close(fd);
        if (r > 0 && memmem(buf, (size_t)r, marker, strlen(marker)) &&
            (!argv0 || strncmp(buf, argv0, (size_t)r) == 0))
            n++;
    }
    if (d)
        closedir(d);
    return n;
}

static int count_marked(const char *marker)
{
    return count_marked_argv0(marker, NULL);
}

static void assert_none_left(const char *marker)
{
    double deadline = af_clock_ms() + 10000;
    while (count_marked(marker) > 0 && af_clock_ms() < deadline)
        af_clock_sleep_ms(20);
    if (count_marked(marker) > 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "ps -eo pid,ppid,pgid,stat,user,etime,args | grep -a '%s' >&2",
                 marker);
        if (system(cmd) < 0)
            fprintf(stderr, "cannot run ps\n");
    }
    assert_int_equal(count_marked(marker), 0);
}

static void run_p(const char *code, int bwrap, const struct sandbox_params *p,
                  struct sandbox_result *r)
{
    char err[256];
    assert_int_equal(sandbox_run_python(code, p, bwrap, r, err, sizeof err), AF_OK);
    if (p->no_seccomp)
        assert_string_equal(r->mode, bwrap ? "bubblewrap" : "rlimits");
    else
        assert_string_equal(r->mode, bwrap ? "bubblewrap+seccomp" : "rlimits+seccomp");
}

static void run(const char *code, int bwrap, double timeout_s, struct sandbox_result *r)
{
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = timeout_s;
    p.cpu_s = 5;
    run_p(code, bwrap, &p, r);
}

#define NEED_BWRAP()                                                                               \
    do {                                                                                           \
        if (!g_bwrap) {                                                                            \
            fprintf(stderr, "skipped: bubblewrap cannot create namespaces on this machine\n");     \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static void check_ok(int bwrap)
{
    struct sandbox_result r;
    run("import sys\nprint('out', 6 * 7)\nprint('err', file=sys.stderr)\nsys.exit(3)", bwrap, 20,
        &r);
    if (strcmp(r.out, "out 42\n") != 0)
        fprintf(stderr, "sandbox stderr: %s (exit %d, signal %d)\n", r.err, r.exit_status,
                r.term_signal);
    assert_string_equal(r.out, "out 42\n");
    assert_string_equal(r.err, "err\n");
    assert_int_equal(r.exit_status, 3);
    assert_false(r.timed_out);
    sandbox_result_deinit(&r);
}

static void check_infinite_loop(int bwrap)
{
    struct sandbox_result r;
    run("# marker-loop\nwhile True:\n    pass", bwrap, 3, &r);
    /* Either the CPU limit (SIGXCPU/SIGKILL) or the wall clock ends it. */
    assert_true(r.timed_out || r.term_signal != 0);
    assert_int_equal(r.exit_status, -1);
    sandbox_result_deinit(&r);
    assert_none_left("marker-loop");
}

static void check_fork_bomb(int bwrap)
{
    struct sandbox_result r;
    run("# marker-forkbomb\nimport os\nwhile True:\n    try:\n        os.fork()\n    except "
        "OSError:\n        pass",
        bwrap, 3, &r);
    assert_true(r.timed_out || r.term_signal != 0);
    sandbox_result_deinit(&r);
    assert_none_left("marker-forkbomb");
}

static void check_memory_hog(int bwrap)
{
    struct sandbox_result r;
    run("x = bytearray(16 << 30)\nprint('allocated')", bwrap, 20, &r);
    assert_non_null(strstr(r.err, "MemoryError"));
    assert_null(strstr(r.out, "allocated"));
    assert_int_equal(r.exit_status, 1);
    sandbox_result_deinit(&r);
}

/* A gigabyte through bubblewrap; 64 MiB is enough to show the same cut in the fallback. */
static void check_huge_output(int bwrap)
{
    struct sandbox_result r;
    char code[256];
    snprintf(code, sizeof code,
             "import sys\nb = 'x' * (1 << 20)\nfor i in range(%d):\n    sys.stdout.write(b)\n"
             "sys.stdout.write('END')",
             bwrap ? 1024 : 64);
    run(code, bwrap, 120, &r);
    size_t cap = sandbox_default_params().output_bytes;
    assert_true(strlen(r.out) <= cap + 96);
    assert_non_null(strstr(r.out, "bytes cut"));
    assert_non_null(strstr(r.out, "END")); /* the tail is kept */
    assert_true(r.out[0] == 'x');
    sandbox_result_deinit(&r);
}

static void check_writes_and_reads(int bwrap)
{
    char secret[] = "/tmp/af_secret_XXXXXX";
    int fd = mkstemp(secret);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "top secret", 10), 10);
    close(fd);
    /* Without namespaces /tmp is the host's: only the bubblewrap mode hides it. */
    char evil[64];
    snprintf(evil, sizeof evil, "/%s/af_evil_%d", bwrap ? "tmp" : "usr", (int)getpid());
    char code[1024];
    snprintf(
        code, sizeof code,
        "import os\nfor p in ['/usr/evil', '/etc/evil', '%s']:\n    try:\n"
        "        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n"
        "        print('denied', p)\n"
        "try:\n    print('READ', open('%s').read())\nexcept OSError:\n    print('hidden')\n"
        "open('scratch.txt', 'w').write('fine')\nprint(open('scratch.txt').read())",
        evil, secret);
    struct sandbox_result r;
    run(code, bwrap, 20, &r);
    assert_null(strstr(r.out, "WROTE"));
    assert_null(strstr(r.out, "READ"));
    assert_non_null(strstr(r.out, "hidden"));
    assert_non_null(strstr(r.out, "fine")); /* the working directory is writable */
    assert_int_equal(access("/usr/evil", F_OK), -1);
    assert_int_equal(access("/etc/evil", F_OK), -1);
    assert_int_equal(access(evil, F_OK), -1);
    sandbox_result_deinit(&r);
    unlink(secret);
}

static void test_rlimits_fallback(void **state)
{
    (void)state;
    check_ok(0);
    check_infinite_loop(0);
    check_fork_bomb(0);
    check_memory_hog(0);
    check_huge_output(0);
    check_writes_and_reads(0);
}

static void test_bwrap_basic_and_limits(void **state)
{
    (void)state;
    NEED_BWRAP();
    check_ok(1);
    check_infinite_loop(1);
    check_fork_bomb(1);
    check_memory_hog(1);
    check_huge_output(1);
    check_writes_and_reads(1);
}

static void test_bwrap_no_network(void **state)
{
    (void)state;
    NEED_BWRAP();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 4), 0);
    socklen_t len = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &len);
    char code[512];
    snprintf(code, sizeof code,
             "import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
             "    print('CONNECTED')\nexcept OSError as e:\n    print('blocked', e)",
             ntohs(a.sin_port));
    struct sandbox_result r;
    run(code, 1, 20, &r);
    assert_null(strstr(r.out, "CONNECTED"));
    assert_non_null(strstr(r.out, "blocked"));
    sandbox_result_deinit(&r);
    close(s);
}

/* A child that calls setsid leaves the sandbox's process group (and, under bubblewrap, runs in
 * the PID namespace); it still dies at the deadline, and with a main program that exits. */
static void check_setsid_escape(int bwrap)
{
    struct sandbox_result r;
    run("# marker-setsid\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    time.sleep(60)\nelse:\n    time.sleep(60)",
        bwrap, 2, &r);
    assert_true(r.timed_out);
    sandbox_result_deinit(&r);
    assert_none_left("marker-setsid");
    /* A daemon left behind by a main program that exits at once dies with it, and does not
     * hold the output open until the deadline. */
    run("# marker-daemon\nimport os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
        "    time.sleep(60)\nprint('bye')",
        bwrap, 20, &r);
    assert_string_equal(r.out, "bye\n");
    assert_false(r.timed_out);
    assert_int_equal(r.exit_status, 0);
    assert_true(r.duration_ms < 15000);
    sandbox_result_deinit(&r);
    assert_none_left("marker-daemon");
}

static void test_bwrap_setsid_escape(void **state)
{
    (void)state;
    NEED_BWRAP();
    check_setsid_escape(1);
}

static void test_rlimits_setsid_escape(void **state)
{
    (void)state;
    check_setsid_escape(0);
}

/* SIGKILL to the CLI while the sandbox is being set up (right after the first fork: a bwrap
 * killed then used to leave its inner process behind) and while the code runs: nothing with
 * the marker is left, in either mode. */
static void test_parent_killed(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1 && !g_bwrap)
            continue;
        for (int running = 0; running < 2; running++) {
            char marker[64], args[256];
            snprintf(marker, sizeof marker, "marker-parent-%s-%s", mode ? "bwrap" : "rlimits",
                     running ? "running" : "setup");
            snprintf(args, sizeof args, "{\"code\": \"# %s\\nimport time\\ntime.sleep(60)\"}",
                     marker);
            const char *argv[] = {proc_agentflow_bin(),
                                  "tool",
                                  "call",
                                  "Python_Code_Generator_Tool",
                                  "--args",
                                  args,
                                  NULL};
            if (mode == 0)
                setenv("AGENTFLOW_SANDBOX", "rlimits", 1);
            pid_t pid = proc_spawn(argv);
            unsetenv("AGENTFLOW_SANDBOX");
            assert_true(pid > 0);
            double deadline = af_clock_ms() + 30000;
            /* The CLI and its forks carry the marker in their argv too. */
            if (running) {
                while (count_marked_argv0(marker, "/usr/bin/python3") < 1 &&
                       af_clock_ms() < deadline)
                    af_clock_sleep_ms(20);
                assert_int_equal(count_marked_argv0(marker, "/usr/bin/python3"), 1);
            } else {
                while (count_marked(marker) < 2 && af_clock_ms() < deadline)
                    af_clock_sleep_ms(1);
                assert_true(count_marked(marker) >= 2);
            }
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            assert_none_left(marker);
        }
    }
}

static void test_tool_result_shape(void **state)
{
    (void)state;
    struct af_tool *t = af_tool_python_coder_new(NULL);
    json_t *args = json_pack("{s:s,s:n}", "code", "print(2 ** 10)", "query");
    json_t *res = NULL;
    struct af_tool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_OK);
    assert_string_equal(json_string_value(json_object_get(res, "printed_output")), "1024\n");
    assert_true(json_is_null(json_object_get(res, "error")));
    assert_int_equal(json_integer_value(json_object_get(res, "exit_status")), 0);
    assert_true(json_is_false(json_object_get(res, "timed_out")));
    assert_string_equal(json_string_value(json_object_get(res, "code")), "print(2 ** 10)");
    assert_non_null(json_string_value(json_object_get(res, "sandbox")));
    assert_non_null(json_object_get(res, "duration_ms"));
    json_decref(res);
    json_decref(args);
    /* No code and no LLM: an error result, not a crash. */
    args = json_pack("{s:s,s:n}", "query", "sum of primes below 100", "code");
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_ETOOL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), "no LLM"));
    json_decref(res);
    json_decref(args);
    af_tool_free(t);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    g_bwrap = sandbox_bwrap_works(NULL);
    if (!g_bwrap)
        fprintf(stderr, "test_sandbox: bubblewrap unavailable; its cases are skipped\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_result_shape),      cmocka_unit_test(test_rlimits_fallback),
        cmocka_unit_test(test_bwrap_basic_and_limits), cmocka_unit_test(test_bwrap_no_network),
        cmocka_unit_test(test_bwrap_setsid_escape),    cmocka_unit_test(test_rlimits_setsid_escape),
        cmocka_unit_test(test_parent_killed),
    };
    return cmocka_run_group_tests_name("sandbox", tests, NULL, NULL);
}
