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
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agentflow/tools.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "flow/pycall.h"
#include "support/proc.h"
#include "tools/sandbox.h"
#include "tools/sandbox_int.h"

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

/* Folders /tmp/af_sandbox_PID_* of the fallback made by process pid. */
static int count_tmpdirs(pid_t pid)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "af_sandbox_%ld_", (long)pid);
    DIR *d = opendir("/tmp");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d)
        closedir(d);
    return n;
}

/* The supervisor removes the folder after reaping the tree, which may end after the call. */
static void assert_no_tmpdirs(pid_t pid)
{
    double deadline = af_clock_ms() + 10000;
    while (count_tmpdirs(pid) > 0 && af_clock_ms() < deadline)
        af_clock_sleep_ms(20);
    assert_int_equal(count_tmpdirs(pid), 0);
}

static void run_p(const char *code, int bwrap, const struct sandbox_params *p,
                  struct sandbox_result *r)
{
    char err[256];
    if (sandbox_run_python(code, p, bwrap ? SANDBOX_BWRAP : SANDBOX_RLIMITS, r, err, sizeof err))
        fprintf(stderr, "sandbox: %s\n", err);
    assert_int_equal(r->attempts >= 1, 1);
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
    assert_no_tmpdirs(getpid()); /* time-outs and kills included */
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
                /* Seen once is enough: the tree moves on (a probe's vfork child carries
                 * the CLI's argv until its exec), so a second count may find fewer. */
                int seen = 0;
                while (!(seen = count_marked(marker) >= 2) && af_clock_ms() < deadline)
                    af_clock_sleep_ms(1);
                if (!seen) { /* say what was there */
                    int st = 0;
                    const pid_t w = waitpid(pid, &st, WNOHANG);
                    fprintf(stderr, "%s: %d marked processes; the CLI %s (status %d)\n", marker,
                            count_marked(marker), w == pid ? "has exited" : "runs", st);
                    char cmd[256];
                    snprintf(cmd, sizeof cmd, "ps -eo pid,ppid,stat,etime,args | grep -a '%s' >&2",
                             marker);
                    if (system(cmd) < 0)
                        fprintf(stderr, "cannot run ps\n");
                }
                assert_true(seen);
            }
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            assert_none_left(marker);
            assert_no_tmpdirs(pid); /* the fallback's folder went with the tree */
        }
    }
}

/* The caller killed at ten early moments, from before the supervisor exists to the program
 * running: no fallback folder survives (the supervisor makes it and removes it on every path;
 * the caller made it and was killed before forking the supervisor, once in 30 runs). */
static void test_killed_early_leaves_no_folder(void **state)
{
    (void)state;
    const char *argv[] = {proc_agentflow_bin(),
                          "tool",
                          "call",
                          "Python_Code_Generator_Tool",
                          "--args",
                          "{\"code\": \"# marker-early\\nimport time\\ntime.sleep(60)\"}",
                          NULL};
    for (int i = 0; i < 10; i++) {
        setenv("AGENTFLOW_SANDBOX", "rlimits", 1);
        pid_t pid = proc_spawn(argv);
        unsetenv("AGENTFLOW_SANDBOX");
        assert_true(pid > 0);
        af_clock_sleep_ms(5.0 * i);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        assert_no_tmpdirs(pid);
    }
    assert_none_left("marker-early");
}

/* ---- The seccomp deny list, from inside ---------------------------------------------------
 * Each probe is one raw syscall through ctypes, with arguments chosen so that, without the
 * filter, the kernel rejects it for another reason first (a bad fd, a NULL pointer, invalid
 * flags: EBADF, EFAULT, EINVAL, ENOTTY...) or lets it through. `control` marks the probes
 * where that holds on any recent kernel; for the rest (reboot, swapon, module loading ...) an
 * unprivileged caller gets EPERM from the capability check anyway, and the filter is a second
 * wall. clone with a namespace flag also carries CLONE_THREAD without CLONE_SIGHAND, so that
 * unfiltered it fails with EINVAL instead of forking. want 0: must succeed under the filter. */
struct sys_probe {
    const char *name;
    long nr;
    const char *args; /* Python expressions */
    int want;
    int control;
};

static const struct sys_probe PROBES[] = {
    {"unshare", SYS_unshare, "0x10000000", EPERM, 0}, /* 0, or ENOSPC under bwrap's limit */
    {"setns", SYS_setns, "-1, 0", EPERM, 1},
    {"clone_newuser", SYS_clone, "0x10000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newns", SYS_clone, "0x00020000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newpid", SYS_clone, "0x20000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newnet", SYS_clone, "0x40000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newuts", SYS_clone, "0x04000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newipc", SYS_clone, "0x08000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone_newcgroup", SYS_clone, "0x02000000 | T, 0, 0, 0, 0", EPERM, 1},
    {"clone3", SYS_clone3, "0, 0", ENOSYS, 0}, /* EINVAL without the filter */
    {"mount", SYS_mount, "0, 0, 0, 0, 0", EPERM, 1},
    {"umount2", SYS_umount2, "0, 0xffff", EPERM, 1},
    {"pivot_root", SYS_pivot_root, "0, 0", EPERM, 0},
    {"chroot", SYS_chroot, "0", EPERM, 1},
    {"open_tree", SYS_open_tree, "-1, 0, 0xffffffff", EPERM, 1},
    {"fsopen", SYS_fsopen, "0, 0", EPERM, 0},
    {"ptrace", SYS_ptrace, "3, 999999999, 0, 0", EPERM, 1},
    {"process_vm_readv", SYS_process_vm_readv, "os.getpid(), 0, 0, 0, 0, 1", EPERM, 1},
    {"process_vm_writev", SYS_process_vm_writev, "os.getpid(), 0, 0, 0, 0, 1", EPERM, 1},
    {"bpf", SYS_bpf, "9999, 0, 0", EPERM, 0},
    {"perf_event_open", SYS_perf_event_open, "0, 0, -1, -1, -1", EPERM, 1},
    {"userfaultfd", SYS_userfaultfd, "3", EPERM, 0},
    {"keyctl", SYS_keyctl, "9999", EPERM, 1},
    {"add_key", SYS_add_key, "0, 0, 0, 0, 0", EPERM, 1},
    {"request_key", SYS_request_key, "0, 0, 0, 0", EPERM, 1},
    {"kexec_load", SYS_kexec_load, "0, 0, 0, 0", EPERM, 0},
    {"kexec_file_load", SYS_kexec_file_load, "-1, -1, 0, 0, 0", EPERM, 0},
    {"init_module", SYS_init_module, "0, 0, 0", EPERM, 0},
    {"finit_module", SYS_finit_module, "-1, 0, 0", EPERM, 0},
    {"delete_module", SYS_delete_module, "0, 0", EPERM, 0},
    {"reboot", SYS_reboot, "0, 0, 0, 0", EPERM, 0},
    {"swapon", SYS_swapon, "0, 0", EPERM, 0},
    {"swapoff", SYS_swapoff, "0", EPERM, 0},
    {"io_uring_setup", SYS_io_uring_setup, "1, 0", EPERM, 0},
    {"io_uring_enter", SYS_io_uring_enter, "-1, 0, 0, 0, 0, 0", EPERM, 1},
    {"io_uring_register", SYS_io_uring_register, "-1, 0, 0, 0", EPERM, 1},
    {"personality_norandom", SYS_personality, "0x0040000", EPERM, 1}, /* succeeds unfiltered */
    {"personality_exec", SYS_personality, "0x0400000", EPERM, 1},
    {"personality_high", SYS_personality, "0x100000000", EPERM, 0},
    {"personality_query", SYS_personality, "0xffffffff", 0, 0},
    {"personality_linux", SYS_personality, "0", 0, 0},
    {"tiocsti", SYS_ioctl, "0, TIOCSTI, A(buf)", EPERM, 1}, /* ENOTTY on /dev/null */
    {"tiocsti_high_bits", SYS_ioctl, "0, TIOCSTI | (1 << 32), A(buf)", EPERM, 1},
    {"tioclinux", SYS_ioctl, "0, TIOCLINUX, A(buf)", EPERM, 1},
    {"kill_all", SYS_kill, "-1, 0", EPERM, 1}, /* signal 0: a check, nothing is sent */
    {"kill_all_high_bits", SYS_kill, "0x1ffffffff, 0", EPERM, 1},
    {"kill_self", SYS_kill, "os.getpid(), 0", 0, 0},
    {"acct", SYS_acct, "0", EPERM, 0},
    {"quotactl", SYS_quotactl, "0xff, 0, 0, 0", EPERM, 1},
    {"syslog", SYS_syslog, "99, 0, 0", EPERM, 0},
    {"settimeofday", SYS_settimeofday, "A(tv), 0", EPERM, 1},
    {"clock_settime", SYS_clock_settime, "0, 0", EPERM, 1},
    {"clock_adjtime", SYS_clock_adjtime, "0, 0", EPERM, 1},
#ifdef __x86_64__
    /* The x32 ABI (bit 30 of the number) is another architecture to the filter: refused. */
    {"x32_getpid", 0x40000000L | SYS_getpid, "", EPERM, 0},
#endif
};

#define N_PROBES (sizeof PROBES / sizeof PROBES[0])

/* The probe program: one "name result errno" line per probe, then what must keep working
 * under the filter (threads, whose clone3 falls back to clone; fork; subprocess). */
static char *probe_code(void)
{
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&b,
                        "import ctypes, os, struct, subprocess, threading\n"
                        "libc = ctypes.CDLL(None, use_errno=True)\n"
                        "libc.syscall.restype = ctypes.c_long\n"
                        "L, A, T = ctypes.c_long, ctypes.addressof, 0x10000\n"
                        "TIOCSTI, TIOCLINUX = %lu, %lu\n"
                        "buf = ctypes.create_string_buffer(64)\n"
                        "tv = ctypes.create_string_buffer(struct.pack('ll', 0, -1))\n"
                        "def sc(name, nr, *a):\n"
                        "    ctypes.set_errno(0)\n"
                        "    r = libc.syscall(L(nr), *[L(x) for x in a])\n"
                        "    print(name, r, ctypes.get_errno() if r == -1 else 0, flush=True)\n",
                        (unsigned long)TIOCSTI, (unsigned long)TIOCLINUX);
    for (size_t i = 0; i < N_PROBES; i++)
        (void)af_buf_printf(&b, "sc('%s', %ld%s%s)\n", PROBES[i].name, PROBES[i].nr,
                            PROBES[i].args[0] ? ", " : "", PROBES[i].args);
    (void)af_buf_printf(&b, "t = threading.Thread(target=lambda: None)\nt.start()\nt.join()\n"
                            "print('thread ok')\n"
                            "pid = os.fork()\nif pid == 0:\n    os._exit(7)\n"
                            "print('fork', os.waitpid(pid, 0)[1] >> 8)\n"
                            "print('spawn', subprocess.run(['/bin/echo', 'ok'], "
                            "capture_output=True).stdout.decode().strip())\n");
    return af_buf_detach(&b);
}

/* The result and errno printed for a probe; fails the test when its line is missing. */
static void probe_result(const char *out, const char *name, long *rv, int *err_no)
{
    char key[80];
    snprintf(key, sizeof key, "\n%s ", name);
    size_t n = strlen(out) + 2;
    char *text = malloc(n);
    assert_non_null(text);
    snprintf(text, n, "\n%s", out);
    const char *line = strstr(text, key);
    if (!line)
        fprintf(stderr, "no line for %s in:\n%s\n", name, out);
    assert_non_null(line);
    assert_int_equal(sscanf(line + strlen(key), "%ld %d", rv, err_no), 2);
    free(text);
}

static void check_syscalls(int bwrap)
{
    char *code = probe_code();
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 30;
    struct sandbox_result r;
    run_p(code, bwrap, &p, &r);
    if (r.exit_status != 0)
        fprintf(stderr, "probe stderr: %s\n", r.err);
    assert_int_equal(r.exit_status, 0);
    for (size_t i = 0; i < N_PROBES; i++) {
        long rv;
        int e;
        probe_result(r.out, PROBES[i].name, &rv, &e);
        if (PROBES[i].want == 0 ? rv == -1 : rv != -1 || e != PROBES[i].want)
            fprintf(stderr, "%s: %s gave %ld, errno %d\n", bwrap ? "bwrap" : "rlimits",
                    PROBES[i].name, rv, e);
        if (PROBES[i].want == 0) {
            assert_true(rv != -1);
        } else {
            assert_int_equal(rv, -1);
            assert_int_equal(e, PROBES[i].want);
        }
    }
    assert_non_null(strstr(r.out, "thread ok\n"));
    assert_non_null(strstr(r.out, "fork 7\n"));
    assert_non_null(strstr(r.out, "spawn ok\n"));
    sandbox_result_deinit(&r);
    /* The control: without the filter the same calls fail otherwise (or succeed). */
    p.no_seccomp = 1;
    run_p(code, bwrap, &p, &r);
    assert_int_equal(r.exit_status, 0);
    int n_control = 0;
    for (size_t i = 0; i < N_PROBES; i++) {
        long rv;
        int e;
        probe_result(r.out, PROBES[i].name, &rv, &e);
        if (!PROBES[i].control)
            continue;
        if (rv == -1 && e == EPERM)
            fprintf(stderr, "control: %s gave EPERM without the filter\n", PROBES[i].name);
        assert_false(rv == -1 && e == EPERM);
        n_control++;
    }
    assert_true(n_control >= 25);
    sandbox_result_deinit(&r);
    free(code);
}

static void test_syscalls_refused(void **state)
{
    (void)state;
    check_syscalls(0);
    if (!g_bwrap) {
        fprintf(stderr, "skipped: the bubblewrap half (no namespaces here)\n");
        return;
    }
    check_syscalls(1);
}

/* The report, through the CLI: nested user namespaces are gone. */
static void test_cli_unshare_refused(void **state)
{
    (void)state;
    const char *args =
        "{\"code\": \"import ctypes; print(ctypes.CDLL(None).unshare(0x10000000))\"}";
    const char *argv[] = {
        proc_agentflow_bin(), "tool", "call", "Python_Code_Generator_Tool", "--args", args, NULL};
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 1 && !g_bwrap)
            continue;
        const char *env[] = {mode == 0 ? "AGENTFLOW_SANDBOX=rlimits" : "AGENTFLOW_UNUSED=1", NULL};
        struct proc_result pr;
        assert_int_equal(proc_run(argv, env, 60, &pr), 0);
        assert_int_equal(pr.exit_code, 0);
        assert_non_null(strstr(pr.out, "\"printed_output\": \"-1\\n\""));
        assert_non_null(strstr(pr.out, mode == 0 ? "\"sandbox\": \"rlimits+seccomp\""
                                                 : "\"sandbox\": \"bubblewrap+seccomp\""));
        proc_result_deinit(&pr);
    }
}

/* ---- Other processes' memory, links, filling tmpfs --------------------------------------- */

/* Writes one byte (the one already there) at the first mapping of each pid through
 * /proc/PID/mem; prints "refused PID" or "WROTE PID". */
static const char POKE_CODE[] =
    "import os\n"
    "def poke(pid):\n"
    "    try:\n"
    "        addr = int(open('/proc/%s/maps' % pid).readline().split('-')[0], 16)\n"
    "    except (OSError, ValueError):\n"
    "        addr = 0x400000\n"
    "    try:\n"
    "        with open('/proc/%s/mem' % pid, 'r+b', buffering=0) as f:\n"
    "            f.seek(addr)\n"
    "            b = f.read(1)\n"
    "            f.seek(addr)\n"
    "            f.write(b)\n"
    "        print('WROTE', pid)\n"
    "    except OSError as e:\n"
    "        print('refused', pid, e.errno)\n";

static void test_proc_mem(void **state)
{
    (void)state;
    char code[2048];
    struct sandbox_result r;
    /* bubblewrap: /proc is read-only, so not even the process's own memory can be written
     * through it (EROFS), nor bwrap's init (pid 1); the host's pids are not there at all. */
    if (g_bwrap) {
        snprintf(code, sizeof code, "%sfor p in ['self', '1', '%d', '%d']:\n    poke(p)\n",
                 POKE_CODE, (int)getpid(), (int)getppid());
        run(code, 1, 20, &r);
        assert_null(strstr(r.out, "WROTE"));
        assert_non_null(strstr(r.out, "refused self 30\n"));
        assert_non_null(strstr(r.out, "refused 1 30\n"));
        sandbox_result_deinit(&r);
    } else {
        fprintf(stderr, "skipped: the bubblewrap half (no namespaces here)\n");
    }
    /* The fallback shares /proc with the host: it is the uid that keeps the caller's memory
     * (and the supervisor's) out of reach, so this half needs root, which makes it nobody.
     * Its own memory stays writable through /proc/self/mem there, as plain stores are. */
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: the rlimits half needs root (the sandbox becomes nobody)\n");
        return;
    }
    snprintf(code, sizeof code, "%sfor p in [str(os.getppid()), '%d', '1']:\n    poke(p)\n",
             POKE_CODE, (int)getpid());
    run(code, 0, 20, &r);
    assert_null(strstr(r.out, "WROTE"));
    char want[64];
    snprintf(want, sizeof want, "refused %d 13\n", (int)getpid()); /* EACCES */
    assert_non_null(strstr(r.out, want));
    assert_non_null(strstr(r.out, "refused 1 13\n"));
    sandbox_result_deinit(&r);
}

/* Hard links and symlinks from the working folder to outside it: no write gets through them,
 * and the fallback's clean-up removes the links, never what they point at. */
static const char LINK_CODE[] =
    "import os\n"
    "def attempt(what, f):\n"
    "    try:\n"
    "        f()\n"
    "        print('DONE', what)\n"
    "    except OSError as e:\n"
    "        print('refused', what, e.errno)\n"
    "attempt('hardlink', lambda: os.link(TARGET, 'hl'))\n"
    "os.symlink(TARGET, 'sl')\n"
    "attempt('write-symlink', lambda: open('sl', 'w').write('evil'))\n"
    "os.symlink(TDIR, 'dl')\n"
    "attempt('write-dir-symlink', lambda: open('dl/new', 'w').write('evil'))\n"
    "attempt('unlink-through', lambda: os.unlink('dl/keep'))\n";

static void check_links(int bwrap)
{
    char target[] = "/tmp/af_target_XXXXXX", tdir[] = "/tmp/af_tdir_XXXXXX", keep[64];
    int fd = mkstemp(target);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "keep", 4), 4);
    close(fd);
    assert_int_equal(chmod(target, 0644), 0);
    assert_non_null(mkdtemp(tdir));
    assert_int_equal(chmod(tdir, 0755), 0);
    snprintf(keep, sizeof keep, "%s/keep", tdir);
    fd = open(keep, O_CREAT | O_WRONLY, 0644);
    assert_true(fd >= 0);
    close(fd);
    /* Under bubblewrap the host's /tmp is not there: the links point into read-only /etc. */
    char code[2048];
    snprintf(code, sizeof code, "TARGET, TDIR = '%s', '%s'\n%s", bwrap ? "/etc/passwd" : target,
             bwrap ? "/etc" : tdir, LINK_CODE);
    struct sandbox_result r;
    run(code, bwrap, 20, &r);
    if (bwrap || geteuid() == 0) { /* without root the fallback keeps the caller's uid */
        assert_non_null(strstr(r.out, "refused hardlink"));
        assert_non_null(strstr(r.out, "refused write-symlink"));
        assert_non_null(strstr(r.out, "refused write-dir-symlink"));
        assert_non_null(strstr(r.out, "refused unlink-through"));
        assert_null(strstr(r.out, "DONE"));
    } else {
        fprintf(stderr, "skipped: the rlimits link writes need root (the sandbox is nobody)\n");
    }
    sandbox_result_deinit(&r);
    char buf[16] = "";
    fd = open(target, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, buf, sizeof buf - 1), 4);
    close(fd);
    assert_string_equal(buf, "keep");
    assert_int_equal(access(keep, F_OK), 0); /* the clean-up did not follow dl */
    unlink(keep);
    rmdir(tdir);
    unlink(target);
}

static void test_links_out(void **state)
{
    (void)state;
    check_links(0);
    if (g_bwrap)
        check_links(1);
    else
        fprintf(stderr, "skipped: the bubblewrap half (no namespaces here)\n");
}

/* Writes files of `blocks` 64 KiB blocks under a folder until a write fails; prints
 * "stopped DIR ERRNO BYTES", or "FILLED DIR BYTES" after `limit` bytes. */
static const char FILL_CODE[] = "import os\n"
                                "def fill(d, limit, blocks):\n"
                                "    n = 0\n"
                                "    try:\n"
                                "        i = 0\n"
                                "        while n < limit:\n"
                                "            with open('%s/fill%d' % (d, i), 'wb', 0) as f:\n"
                                "                for _ in range(blocks):\n"
                                "                    f.write(b'x' * 65536)\n"
                                "                    n += 65536\n"
                                "            i += 1\n"
                                "        print('FILLED', d, n)\n"
                                "    except OSError as e:\n"
                                "        print('stopped', d, e.errno, n)\n";

static long filled_bytes(const char *out, const char *dir, int want_errno)
{
    char key[128];
    snprintf(key, sizeof key, "stopped %s %d ", dir, want_errno);
    const char *p = strstr(out, key);
    if (!p)
        fprintf(stderr, "no '%s' in: %s\n", key, out);
    assert_non_null(p);
    return strtol(p + strlen(key), NULL, 10);
}

static void test_tmpfs_fill(void **state)
{
    (void)state;
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 60;
    p.tmpfs_bytes = (size_t)4 << 20;
    struct sandbox_result r;
    char code[2048];
    if (g_bwrap) {
        /* Both writable tmpfs end at their size (ENOSPC) however many files are made; the
         * rest of the tree is read-only (EROFS). */
        snprintf(code, sizeof code,
                 "%sfill('/dev/shm', 1 << 30, 16)\nfill('/sandbox', 1 << 30, 16)\n"
                 "for d in ['/', '/dev', '/tmp']:\n"
                 "    try:\n        open(d.rstrip('/') + '/evil', 'w')\n        print('WROTE', d)\n"
                 "    except OSError as e:\n        print('readonly', d, e.errno)\n",
                 FILL_CODE);
        run_p(code, 1, &p, &r);
        assert_true(filled_bytes(r.out, "/dev/shm", ENOSPC) <= 4l << 20);
        assert_true(filled_bytes(r.out, "/sandbox", ENOSPC) <= 4l << 20);
        assert_null(strstr(r.out, "FILLED"));
        assert_null(strstr(r.out, "WROTE"));
        assert_non_null(strstr(r.out, "readonly / 30\n"));
        assert_non_null(strstr(r.out, "readonly /dev 30\n"));
        sandbox_result_deinit(&r);
    } else {
        fprintf(stderr, "skipped: the bubblewrap half (no namespaces here)\n");
    }
    /* The fallback writes the host's /dev/shm: RLIMIT_FSIZE stops each file (EFBIG) at
     * 1 MiB here; the number of files is not bounded there (README). */
    p.file_bytes = (size_t)1 << 20;
    char dir[64];
    snprintf(dir, sizeof dir, "/dev/shm/af_fill_%d", (int)getpid());
    assert_int_equal(mkdir(dir, 0777), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    snprintf(code, sizeof code, "%sfill('%s', 1 << 30, 17)\n", FILL_CODE, dir);
    run_p(code, 0, &p, &r);
    assert_true(filled_bytes(r.out, dir, EFBIG) <= 1l << 20);
    sandbox_result_deinit(&r);
    char file[96];
    snprintf(file, sizeof file, "%s/fill0", dir);
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_true(st.st_size <= 1 << 20);
    unlink(file);
    rmdir(dir);
}

/* ---- Hostile code strings ------------------------------------------------------------- */

static void test_code_size(void **state)
{
    (void)state;
    size_t n = (size_t)10 << 20;
    char *code = malloc(n + 1);
    assert_non_null(code);
    memset(code, '#', n);
    static const char tail[] = "\nopen('/tmp/af_ran', 'w')\nprint('ran')\n";
    memcpy(code + n - sizeof tail, tail, sizeof tail); /* ends the string too */
    struct sandbox_params p = sandbox_default_params();
    struct sandbox_result r;
    char err[256] = "";
    assert_int_equal(sandbox_run_python(code, &p, SANDBOX_AUTO, &r, err, sizeof err), AF_ETOOBIG);
    assert_non_null(strstr(err, "over the limit"));
    assert_null(r.out);
    sandbox_result_deinit(&r);
    /* Through the tool: an error result, nothing run. */
    struct af_tool *t = af_tool_python_coder_new(NULL);
    json_t *args = json_pack("{s:s,s:n}", "code", code, "query");
    json_t *res = NULL;
    struct af_tool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_ETOOL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), "over the limit"));
    assert_null(json_object_get(res, "printed_output"));
    json_decref(res);
    json_decref(args);
    af_tool_free(t);
    assert_int_equal(access("/tmp/af_ran", F_OK), -1);
    /* Just at the limit it runs as any code does. */
    size_t m = 100u * 1000u;
    static const char ran[] = "\nprint('ran')\n";
    memset(code, '#', m);
    memcpy(code + m - (sizeof ran - 1), ran, sizeof ran);
    assert_int_equal(strlen(code), m);
    run_p(code, g_bwrap, &p, &r);
    assert_string_equal(r.out, "ran\n");
    sandbox_result_deinit(&r);
    free(code);
}

/* A NUL byte in the code (the executor's command language decodes '\x00' into one) is refused
 * with an error naming its offset: it used to cut the code silently, so what followed never
 * ran. Invalid UTF-8 in the code is Python's error; in the output it reaches the result
 * repaired. The CLI refuses both in --args, as JSON carries neither. */
static void test_nul_and_invalid_utf8(void **state)
{
    (void)state;
    struct af_tool *t = af_tool_python_coder_new(NULL);
    struct af_tool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    static const char with_nul[] = "print('before')\0print('HIDDEN')";
    json_t *args = json_object(), *res = NULL;
    json_object_set_new(args, "code", json_stringn(with_nul, sizeof with_nul - 1));
    json_object_set_new(args, "query", json_null());
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_EINVAL);
    const char *msg = json_string_value(json_object_get(res, "error"));
    assert_non_null(msg);
    assert_non_null(strstr(msg, "NUL byte at offset 15"));
    assert_null(json_object_get(res, "printed_output"));
    json_decref(res);
    json_decref(args);
    /* The executor's way in: its command language decodes \x00 into a NUL byte. */
    static const char command[] =
        "execution = tool.execute(code=\"print('before')\\x00print('HIDDEN')\")";
    struct af_pycall_list calls;
    char perr[256];
    assert_int_equal(af_pycall_parse(command, strlen(command), &calls, perr, sizeof perr), AF_OK);
    assert_int_equal(calls.n, 1);
    json_t *code_arg = json_object_get(calls.calls[0].kwargs, "code");
    assert_int_equal(json_string_length(code_arg), sizeof with_nul - 1);
    args = json_pack("{s:O,s:n}", "code", code_arg, "query");
    af_pycall_list_deinit(&calls);
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_EINVAL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), "NUL byte"));
    json_decref(res);
    json_decref(args);
    /* The same in a query, which would be cut on its way into the LLM's prompt. */
    args = json_object();
    json_object_set_new(args, "query", json_stringn(with_nul, sizeof with_nul - 1));
    json_object_set_new(args, "code", json_null());
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_EINVAL);
    assert_non_null(strstr(json_string_value(json_object_get(res, "error")), "NUL byte"));
    json_decref(res);
    json_decref(args);
    /* Invalid UTF-8 in the code (0xff 0xfe inside a string literal). */
    static const char bad_code[] = "print('\xff\xfe')\nprint(1)";
    args = json_object();
    json_object_set_new(args, "code", json_stringn_nocheck(bad_code, sizeof bad_code - 1));
    json_object_set_new(args, "query", json_null());
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_OK);
    assert_int_equal(json_integer_value(json_object_get(res, "exit_status")), 1);
    assert_string_equal(json_string_value(json_object_get(res, "printed_output")), "");
    char *dump = json_dumps(res, 0);
    assert_non_null(dump); /* every string in the result is valid UTF-8 */
    free(dump);
    json_decref(res);
    json_decref(args);
    /* Invalid UTF-8 in the output. */
    args = json_pack("{s:s,s:n}", "code", "import sys\nsys.stdout.buffer.write(b'a\\xff\\xfeb\\n')",
                     "query");
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_OK);
    const char *out = json_string_value(json_object_get(res, "printed_output"));
    assert_non_null(out);
    assert_int_equal(out[0], 'a');
    assert_non_null(strchr(out, 'b'));
    assert_null(strstr(out, "\xff")); /* repaired */
    json_decref(res);
    json_decref(args);
    af_tool_free(t);
    /* The CLI: --args is JSON. */
    const char *bad[] = {"{\"code\": \"print(1)\\u0000print(2)\"}",
                         "{\"code\": \"print('\xff')\"}"};
    for (int i = 0; i < 2; i++) {
        const char *argv[] = {proc_agentflow_bin(),
                              "tool",
                              "call",
                              "Python_Code_Generator_Tool",
                              "--args",
                              bad[i],
                              NULL};
        struct proc_result pr;
        assert_int_equal(proc_run(argv, NULL, 60, &pr), 0);
        assert_int_equal(pr.exit_code, 2);
        assert_non_null(strstr(pr.err, "--args must be a JSON object"));
        assert_null(strstr(pr.out, "printed_output"));
        proc_result_deinit(&pr);
    }
}

/* ---- Set-up failures, retries and the fallback ---------------------------------------------- */

static int write_file(const char *path, const char *text, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return -1;
    int ok = write(fd, text, n) == (ssize_t)n;
    close(fd);
    return ok ? AF_OK : -1;
}

/* A stand-in for bwrap: a shell script under a folder of its own. Returns its path (static). */
static const char *fake_bwrap(const char *name, const char *body)
{
    static char path[128];
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/af_fakebwrap_%d", (int)getpid());
    mkdir(dir, 0755);
    assert_int_equal(chmod(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char text[1024];
    snprintf(text, sizeof text,
             "#!/bin/sh\nif [ \"$1\" = --help ]; then\n"
             "  echo '--json-status-fd --size --disable-userns --assert-userns-disabled'\n"
             "  exit 0\nfi\n%s\n",
             body);
    assert_int_equal(write_file(path, text, strlen(text)), AF_OK);
    assert_int_equal(chmod(path, 0755), 0);
    return path;
}

static void remove_fake_bwraps(void)
{
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf /tmp/af_fakebwrap_%d", (int)getpid());
    assert_int_equal(system(cmd), 0);
}

/* The attack: code that prints bwrap's "Resource temporarily unavailable" and exits 1
 * made the call run 11 times (94 s against a 10 s deadline). It is the program's output: one
 * run, its status as is. */
static void test_setup_error_text_is_output(void **state)
{
    (void)state;
    NEED_BWRAP();
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 30;
    struct sandbox_result r;
    run_p("import sys\nprint('ran')\nprint('bwrap: Creating new namespace failed: Resource "
          "temporarily unavailable', file=sys.stderr)\nsys.exit(1)",
          1, &p, &r);
    assert_int_equal(r.attempts, 1);
    assert_string_equal(r.out, "ran\n");
    assert_int_equal(r.exit_status, 1);
    assert_non_null(strstr(r.err, "Resource temporarily unavailable"));
    sandbox_result_deinit(&r);
}

/* A bwrap that fails to set up with EAGAIN every time: retried, within the one deadline of the
 * call, then an error; never the fallback. The old loop slept 5.5 s whatever the deadline. */
static void test_busy_bwrap_keeps_deadline(void **state)
{
    (void)state;
    struct sandbox_params p = sandbox_default_params();
    p.bwrap = fake_bwrap("busy", "echo 'bwrap: Creating new namespace failed: Resource "
                                 "temporarily unavailable' >&2\nexit 1");
    p.timeout_s = 0.5;
    for (int mode = SANDBOX_AUTO; mode <= SANDBOX_BWRAP; mode++) {
        struct sandbox_result r;
        char err[512] = "";
        double t0 = af_clock_ms();
        assert_int_equal(
            sandbox_run_python("print(1)", &p, (enum sandbox_mode)mode, &r, err, sizeof err),
            AF_EIO);
        double ms = af_clock_ms() - t0;
        assert_true(ms < 4000); /* generous: a busy machine, but not 5.5 s of sleeps */
        assert_non_null(strstr(err, "too busy"));
        assert_non_null(strstr(err, "Resource temporarily unavailable"));
        assert_non_null(strstr(err, "did not run"));
        assert_null(r.out);
        sandbox_result_deinit(&r);
    }
    remove_fake_bwraps();
}

/* Where bubblewrap is proven unusable (missing, or a set-up error that does not pass), AUTO
 * runs the fallback and says why; BWRAP refuses. */
static void test_unusable_bwrap_falls_back(void **state)
{
    (void)state;
    struct sandbox_params p = sandbox_default_params();
    const char *bwraps[] = {fake_bwrap("noperm", "echo 'bwrap: No permissions to create new "
                                                 "namespace, likely because the kernel does not "
                                                 "allow non-privileged user namespaces.' >&2\n"
                                                 "exit 1"),
                            "/nonexistent/bwrap"};
    const char *want[] = {"No permissions to create new namespace", "cannot run"};
    for (int i = 0; i < 2; i++) {
        p.bwrap = bwraps[i];
        struct sandbox_result r;
        char err[512] = "";
        assert_int_equal(sandbox_run_python("print(6 * 7)", &p, SANDBOX_AUTO, &r, err, sizeof err),
                         AF_OK);
        assert_string_equal(r.out, "42\n");
        assert_string_equal(r.mode, "rlimits+seccomp");
        assert_non_null(strstr(r.fallback, want[i]));
        sandbox_result_deinit(&r);
        assert_int_equal(sandbox_run_python("print(1)", &p, SANDBOX_BWRAP, &r, err, sizeof err),
                         AF_EIO);
        assert_non_null(strstr(err, want[i]));
        sandbox_result_deinit(&r);
    }
    remove_fake_bwraps();
}

/* ---- One sandbox against another ---------------------------------------------------------- */

struct bg_run {
    pthread_t thread;
    const char *code;
    enum sandbox_mode mode;
    double timeout_s;
    int rc;
    struct sandbox_result r;
};

static void *bg_main(void *arg)
{
    struct bg_run *b = arg;
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = b->timeout_s;
    char err[256];
    b->rc = sandbox_run_python(b->code, &p, b->mode, &b->r, err, sizeof err);
    return NULL;
}

static void bg_start(struct bg_run *b, const char *code, enum sandbox_mode mode, double timeout_s)
{
    b->code = code;
    b->mode = mode;
    b->timeout_s = timeout_s;
    assert_int_equal(pthread_create(&b->thread, NULL, bg_main, b), 0);
}

/* SIGKILL to every live process of this test's that carries marker (by pid). */
static void kill_marked(const char *marker)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char path[300], buf[8192];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, buf, sizeof buf);
        close(fd);
        if (r > 0 && strncmp(buf, "/usr/bin/python3", (size_t)r) == 0 &&
            memmem(buf, (size_t)r, marker, strlen(marker)))
            kill((pid_t)strtol(e->d_name, NULL, 10), SIGKILL);
    }
    if (d)
        closedir(d);
}

static void wait_marked(const char *marker, int n)
{
    double deadline = af_clock_ms() + 30000;
    while (count_marked_argv0(marker, "/usr/bin/python3") < n && af_clock_ms() < deadline)
        af_clock_sleep_ms(20);
    assert_true(count_marked_argv0(marker, "/usr/bin/python3") >= n);
}

/* The first attack: while one sandbox holds every process its uid may have, another
 * sandbox still starts under bubblewrap at once. All sandboxes were nobody, so a fork bomb in
 * one made the next one's bwrap fail with EAGAIN, and the Python tool fell back for good. */
static void test_fork_bomb_spares_others(void **state)
{
    (void)state;
    NEED_BWRAP();
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: sandboxes get uids of their own only when run as root\n");
        skip();
    }
    struct bg_run bomb;
    memset(&bomb, 0, sizeof bomb);
    bg_start(&bomb,
             "# marker-bomb-hold\nimport os, time\nwhile True:\n    try:\n"
             "        if os.fork() == 0:\n            time.sleep(60)\n            os._exit(0)\n"
             "    except OSError:\n        time.sleep(0.05)",
             SANDBOX_BWRAP, 60);
    wait_marked("marker-bomb-hold", 200); /* near its 256 processes */
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 30;
    struct sandbox_result r;
    char err[256] = "";
    assert_int_equal(sandbox_run_python("print('ok')", &p, SANDBOX_AUTO, &r, err, sizeof err),
                     AF_OK);
    assert_string_equal(r.out, "ok\n");
    assert_string_equal(r.mode, "bubblewrap+seccomp");
    assert_int_equal(r.attempts, 1);
    sandbox_result_deinit(&r);
    /* The same through the tool: bubblewrap, the host's root hidden. */
    struct af_tool *t = af_tool_python_coder_new(NULL);
    json_t *args =
        json_pack("{s:s,s:n}", "code", "import os\nprint(sorted(os.listdir('/')))", "query");
    json_t *res = NULL;
    struct af_tool_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    assert_int_equal(af_tool_call(t, args, &ctx, &res), AF_OK);
    assert_string_equal(json_string_value(json_object_get(res, "sandbox")), "bubblewrap+seccomp");
    assert_null(strstr(json_string_value(json_object_get(res, "printed_output")), "'root'"));
    json_decref(res);
    json_decref(args);
    af_tool_free(t);
    /* End the bomb now rather than at its deadline (60 s, so that a slow machine has time to
     * fill the table): killing its processes, which this test started, by pid. */
    kill_marked("marker-bomb-hold");
    pthread_join(bomb.thread, NULL);
    assert_int_equal(bomb.rc, AF_OK);
    sandbox_result_deinit(&bomb.r);
    assert_none_left("marker-bomb-hold");
}

/* The fallback's kill(-1, SIGKILL) reaches the processes of its own uid only: it killed another
 * caller's bubblewrap sandbox (and anything else of nobody's) when every sandbox was nobody. */
static void test_fallback_kill_all_spares_others(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: sandboxes get uids of their own only when run as root\n");
        skip();
    }
    /* A process of nobody's that is no sandbox at all. */
    pid_t bystander = fork();
    if (bystander == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(1);
        execl("/bin/sleep", "sleep", "60", (char *)NULL);
        _exit(1);
    }
    assert_true(bystander > 0);
    struct bg_run victim;
    memset(&victim, 0, sizeof victim);
    if (g_bwrap) {
        bg_start(&victim, "# marker-victim\nimport time\ntime.sleep(3)\nprint('alive')",
                 SANDBOX_BWRAP, 60);
        wait_marked("marker-victim", 1);
    } else {
        fprintf(stderr, "skipped: the bubblewrap victim (no namespaces here)\n");
    }
    af_clock_sleep_ms(300); /* the bystander has become nobody */
    /* Without the seccomp filter (which refuses kill(-1) too, below): only the uid protects. */
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 20;
    p.no_seccomp = 1;
    struct sandbox_result r;
    run_p("import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('sent')", 0, &p, &r);
    assert_string_equal(r.out, "sent\n"); /* kill(-1) spares the caller itself */
    assert_int_equal(r.exit_status, 0);
    sandbox_result_deinit(&r);
    p.no_seccomp = 0;
    run_p("import os, signal\ntry:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as e:\n"
          "    print('refused', e.errno)",
          0, &p, &r);
    assert_string_equal(r.out, "refused 1\n");
    sandbox_result_deinit(&r);
    assert_int_equal(waitpid(bystander, NULL, WNOHANG), 0);
    kill(bystander, SIGKILL);
    waitpid(bystander, NULL, 0);
    if (g_bwrap) {
        pthread_join(victim.thread, NULL);
        assert_int_equal(victim.rc, AF_OK);
        assert_string_equal(victim.r.out, "alive\n");
        assert_int_equal(victim.r.exit_status, 0);
        sandbox_result_deinit(&victim.r);
    }
}

/* ---- Folders left by killed callers -----------------------------------------------------------
 */

static pid_t dead_pid(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    waitpid(pid, NULL, 0);
    return pid;
}

/* A folder of a caller that died (with files, a folder it cannot read, a link out) and one of
 * the old form over an hour old are removed by the next process's first run; the link's target
 * and a live caller's folder are not touched. */
static void test_stale_tmpdirs_swept(void **state)
{
    (void)state;
    char stale[96], inner[128], file[160], link[128], target[] = "/tmp/af_keep_XXXXXX";
    char old[] = "/tmp/af_sandbox_OldXyZ", live[96];
    snprintf(stale, sizeof stale, "/tmp/af_sandbox_%ld_deadxx", (long)dead_pid());
    snprintf(live, sizeof live, "/tmp/af_sandbox_%ld_livexx", (long)getpid());
    snprintf(inner, sizeof inner, "%s/locked", stale);
    snprintf(file, sizeof file, "%s/big", inner);
    snprintf(link, sizeof link, "%s/out", stale);
    int fd = mkstemp(target);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(mkdir(stale, 0700), 0);
    assert_int_equal(mkdir(inner, 0700), 0);
    assert_int_equal(write_file(file, "data", 4), AF_OK);
    assert_int_equal(chmod(inner, 0), 0);
    assert_int_equal(symlink(target, link), 0);
    assert_int_equal(mkdir(old, 0700), 0);
    struct timespec times[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    assert_int_equal(utimensat(AT_FDCWD, old, times, 0), 0);
    assert_int_equal(mkdir(live, 0700), 0);
    const char *argv[] = {
        proc_agentflow_bin(),       "tool", "call", "Python_Code_Generator_Tool", "--args",
        "{\"code\": \"print(1)\"}", NULL};
    struct proc_result pr;
    assert_int_equal(proc_run(argv, NULL, 60, &pr), 0);
    assert_int_equal(pr.exit_code, 0);
    proc_result_deinit(&pr);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(old, F_OK), -1);
    assert_int_equal(access(target, F_OK), 0);
    assert_int_equal(access(live, F_OK), 0); /* this process lives */
    rmdir(live);
    unlink(target);
}

/* The remover as a non-root user (a caller without root, or a sandbox uid): folders the code
 * made unreadable or read-only are opened up through their own descriptors and removed; a
 * link to the user's file is removed, and the file keeps its mode. */
static void test_rm_tree_unprivileged(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "skipped: needs root to become an unprivileged uid\n");
        skip();
    }
    pid_t pid = fork();
    if (pid == 0) {
        uid_t uid = SANDBOX_UID_BASE + (1u << 22) - 1; /* no supervisor has this pid */
        if (setgid(uid) != 0 || setuid(uid) != 0)
            _exit(10);
        char top[] = "/tmp/af_rmtest_XXXXXX", keep[] = "/tmp/af_rmkeep_XXXXXX", p1[96], p2[96];
        int fd = mkstemp(keep);
        if (!mkdtemp(top) || fd < 0 || fchmod(fd, 0600) != 0)
            _exit(11);
        close(fd);
        snprintf(p1, sizeof p1, "%s/locked", top);
        snprintf(p2, sizeof p2, "%s/locked/inner", top);
        if (mkdir(p1, 0700) != 0 || mkdir(p2, 0700) != 0)
            _exit(12);
        snprintf(p2, sizeof p2, "%s/locked/inner/file", top);
        if (write_file(p2, "x", 1) != AF_OK)
            _exit(13);
        snprintf(p2, sizeof p2, "%s/locked/inner", top);
        if (chmod(p2, 0500) != 0 || chmod(p1, 0) != 0)
            _exit(14);
        snprintf(p2, sizeof p2, "%s/link", top);
        if (symlink(keep, p2) != 0)
            _exit(15);
        if (sandbox_rm_tree(top) != 0 || access(top, F_OK) == 0)
            _exit(16);
        struct stat st;
        if (stat(keep, &st) != 0 || (st.st_mode & 0777) != 0600)
            _exit(17);
        unlink(keep);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- The cgroup -------------------------------------------------------------------------------
 */

/* Without a cgroup v2 group to use, the limits are per process, and the result says why. */
static void test_cgroup_found_or_said(void **state)
{
    (void)state;
    struct sandbox_result r;
    run("print(1)", 0, 20, &r);
    if (strcmp(r.limits, "cgroup") == 0) {
        assert_string_equal(r.no_cgroup, "");
    } else {
        assert_string_equal(r.limits, "process");
        assert_true(strlen(r.no_cgroup) > 10);
        fprintf(stderr, "note: no cgroup here: %s\n", r.no_cgroup);
    }
    sandbox_result_deinit(&r);
    /* A named parent that does not work is an error, not a silent downgrade. */
    struct sandbox_params p = sandbox_default_params();
    p.cgroup = "/nonexistent/cgroup";
    char err[512] = "";
    assert_int_equal(sandbox_run_python("print(1)", &p, SANDBOX_RLIMITS, &r, err, sizeof err),
                     AF_EIO);
    assert_non_null(strstr(err, "is not a cgroup v2 group"));
    assert_null(r.out);
    sandbox_result_deinit(&r);
}

static void read_text(const char *dir, const char *name, char *out, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    out[0] = '\0';
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, out, cap - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
}

/* Where this host gives the sandbox a real cgroup v2 group: four children of 256 MiB each do not
 * all fit in a tree capped at 512 MiB, though each is far below its own 2 GiB rlimit (the issue
 * saw four children of 1.5 GiB use 4.2 GB). Skipped elsewhere. */
static void test_cgroup_caps_tree(void **state)
{
    (void)state;
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 60;
    p.tree_mem_bytes = (size_t)512 << 20;
    struct sandbox_result r;
    run_p("print(1)", g_bwrap, &p, &r);
    if (strcmp(r.limits, "cgroup") != 0) {
        fprintf(stderr, "skipped: no cgroup v2 group here (%s)\n", r.no_cgroup);
        sandbox_result_deinit(&r);
        skip();
    }
    sandbox_result_deinit(&r);
    run_p("import os, time\npids = []\nfor i in range(4):\n    pid = os.fork()\n"
          "    if pid == 0:\n        try:\n            b = bytearray(256 << 20)\n"
          "            time.sleep(2)\n            os._exit(0)\n        except MemoryError:\n"
          "            os._exit(3)\n    pids.append(pid)\n"
          "print(sum(1 for p in pids if os.waitpid(p, 0)[1] == 0), 'fitted')",
          g_bwrap, &p, &r);
    /* The OOM killer may take the parent too; if it printed, fewer than four fitted. */
    if (r.out[0])
        assert_true(strtol(r.out, NULL, 10) < 4);
    sandbox_result_deinit(&r);
}

/* A stand-in parent group (a plain folder with the control files a cgroup would have): each
 * run makes its group with the tree's limits, its process joins it before exec, the group is
 * killed at the end, and groups of dead callers are swept. The kernel's enforcement itself
 * needs a delegated cgroup v2 group, which test_cgroup_found_or_said reports on. */
static void test_cgroup_plumbing(void **state)
{
    (void)state;
    char parent[] = "/tmp/af_cgparent_XXXXXX", stale[128], path[256];
    assert_non_null(mkdtemp(parent));
    snprintf(path, sizeof path, "%s/cgroup.subtree_control", parent);
    assert_int_equal(write_file(path, "cpu memory pids\n", 16), AF_OK);
    snprintf(stale, sizeof stale, "%s/af_sandbox_%ld_oldone", parent, (long)dead_pid());
    assert_int_equal(mkdir(stale, 0755), 0);
    struct sandbox_params p = sandbox_default_params();
    p.cgroup = parent;
    p.tree_mem_bytes = (size_t)768 << 20;
    p.n_procs = 77;
    for (int bwrap = 0; bwrap < 2; bwrap++) {
        if (bwrap && !g_bwrap)
            continue;
        struct sandbox_result r;
        run_p("print('in')", bwrap, &p, &r);
        assert_string_equal(r.out, "in\n");
        assert_string_equal(r.limits, "cgroup");
        sandbox_result_deinit(&r);
        DIR *d = opendir(parent);
        struct dirent *e;
        int n = 0;
        char prefix[64];
        snprintf(prefix, sizeof prefix, "af_sandbox_%ld_", (long)getpid());
        while ((e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
                continue;
            char group[512], text[64];
            snprintf(group, sizeof group, "%s/%s", parent, e->d_name);
            read_text(group, "memory.max", text, sizeof text);
            assert_string_equal(text, "805306368");
            read_text(group, "pids.max", text, sizeof text);
            assert_string_equal(text, "77");
            read_text(group, "memory.swap.max", text, sizeof text);
            assert_string_equal(text, "0");
            read_text(group, "cgroup.procs", text, sizeof text);
            assert_string_equal(text, "0"); /* written by the sandbox's own process */
            read_text(group, "cgroup.kill", text, sizeof text);
            assert_int_equal(text[0], '1'); /* by the supervisor, and again by the caller */
            n++;
        }
        closedir(d);
        assert_int_equal(n, 1);
        assert_int_equal(access(stale, F_OK), -1); /* swept */
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s/af_sandbox_*", parent);
        assert_int_equal(system(cmd), 0);
    }
    snprintf(path, sizeof path, "rm -rf %s", parent);
    assert_int_equal(system(path), 0);
}

/* Descriptors the caller holds open without close-on-exec, at the numbers the sandbox uses for
 * its own pipes, never reach the program. */
static void test_no_caller_fds(void **state)
{
    (void)state;
    int saved[3];
    for (int fd = 3; fd <= 5; fd++) {
        saved[fd - 3] = fcntl(fd, F_DUPFD_CLOEXEC, 100);
        int f = open("/etc/hostname", O_RDONLY);
        assert_true(f >= 0);
        if (f != fd) {
            assert_int_equal(dup2(f, fd), fd);
            close(f);
        }
    }
    for (int bwrap = 0; bwrap < 2; bwrap++) {
        if (bwrap && !g_bwrap)
            continue;
        struct sandbox_result r;
        run("import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))", bwrap, 20, &r);
        assert_string_equal(r.out, "[0, 1, 2, 3]\n"); /* 3: listdir's own */
        sandbox_result_deinit(&r);
    }
    for (int fd = 3; fd <= 5; fd++) {
        if (saved[fd - 3] >= 0) {
            dup2(saved[fd - 3], fd);
            close(saved[fd - 3]);
        } else {
            close(fd);
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

/* These tests count the machine's processes by marker and fill the user's process limit, so
 * two runs at once (a `make test` beside a CI check of another clone) fail each other's tests:
 * a second run waits for the first. */
static void one_run_at_a_time(void)
{
    const int fd = open("/tmp/agentflow-test_sandbox.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0)
        return; /* nothing to wait on: run */
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        fprintf(stderr, "test_sandbox: another run holds /tmp/agentflow-test_sandbox.lock; "
                        "waiting for it\n");
        if (flock(fd, LOCK_EX) != 0)
            fprintf(stderr, "test_sandbox: cannot lock: %s\n", strerror(errno));
    }
    /* fd stays open (and the lock held) until this process exits */
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    one_run_at_a_time();
    char why[512] = "";
    g_bwrap = sandbox_bwrap_works(NULL, why, sizeof why) == 1;
    if (!g_bwrap)
        fprintf(stderr, "test_sandbox: bubblewrap unavailable (%s); its cases are skipped\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_result_shape),
        cmocka_unit_test(test_rlimits_fallback),
        cmocka_unit_test(test_bwrap_basic_and_limits),
        cmocka_unit_test(test_bwrap_no_network),
        cmocka_unit_test(test_bwrap_setsid_escape),
        cmocka_unit_test(test_rlimits_setsid_escape),
        cmocka_unit_test(test_parent_killed),
        cmocka_unit_test(test_killed_early_leaves_no_folder),
        cmocka_unit_test(test_syscalls_refused),
        cmocka_unit_test(test_cli_unshare_refused),
        cmocka_unit_test(test_proc_mem),
        cmocka_unit_test(test_links_out),
        cmocka_unit_test(test_tmpfs_fill),
        cmocka_unit_test(test_code_size),
        cmocka_unit_test(test_nul_and_invalid_utf8),
        cmocka_unit_test(test_setup_error_text_is_output),
        cmocka_unit_test(test_busy_bwrap_keeps_deadline),
        cmocka_unit_test(test_unusable_bwrap_falls_back),
        cmocka_unit_test(test_fork_bomb_spares_others),
        cmocka_unit_test(test_fallback_kill_all_spares_others),
        cmocka_unit_test(test_stale_tmpdirs_swept),
        cmocka_unit_test(test_rm_tree_unprivileged),
        cmocka_unit_test(test_cgroup_found_or_said),
        cmocka_unit_test(test_cgroup_plumbing),
        cmocka_unit_test(test_cgroup_caps_tree),
        cmocka_unit_test(test_no_caller_fds),
    };
    return cmocka_run_group_tests_name("sandbox", tests, NULL, NULL);
}
