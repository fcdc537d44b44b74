/*
 * sandbox.c - a separate, unprivileged, limited process for untrusted Python (see sandbox.h).
 *
 * Everything the child needs (argv, envp, the compiled seccomp filter) is built before
 * fork(): the parent may have other threads, so the child only makes async-signal-safe calls
 * before exec. The filter is compiled for every run (about 0.2 ms); the one process-wide fact
 * kept is which options the installed bwrap understands, probed once.
 */
#include "tools/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "tools/seccomp_filter.h"

#define MAX_CODE_BYTES (100u * 1000u)
#define BWRAP_PATH "/usr/bin/bwrap"
#define NOBODY_ID 65534
#define MAX_ARGS 96
#define SECCOMP_CHILD_FD 3 /* where the child puts the filter's memfd for bwrap --seccomp */

/* Options of the installed bwrap, from its --help (older ones lack them). */
#define BWRAP_HAS_USERNS 1 /* --disable-userns and --assert-userns-disabled (0.8) */
#define BWRAP_HAS_SIZE 2   /* --size before --tmpfs (0.5) */

struct sandbox_params sandbox_default_params(void)
{
    struct sandbox_params p = {.timeout_s = 10,
                               .cpu_s = 10,
                               .mem_bytes = (size_t)2 << 30,
                               .file_bytes = (size_t)16 << 20,
                               .n_files = 64,
                               .n_procs = 256,
                               .output_bytes = (size_t)64 << 10,
                               .tmpfs_bytes = (size_t)64 << 20,
                               .python = "/usr/bin/python3",
                               .no_bwrap = 0,
                               .no_seccomp = 0};
    return p;
}

void sandbox_result_deinit(struct sandbox_result *r)
{
    if (!r)
        return;
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

/* Keeps the first half and the last half of a stream within `cap` bytes. */
struct capture {
    char *head, *ring;
    size_t half, n_head, n_ring, ring_pos, total;
};

static void capture_init(struct capture *c, size_t cap)
{
    memset(c, 0, sizeof *c);
    c->half = cap / 2 ? cap / 2 : 1;
    c->head = af_xmalloc(c->half);
    c->ring = af_xmalloc(c->half);
}

static void capture_add(struct capture *c, const char *p, size_t n)
{
    c->total += n;
    size_t take = c->half - c->n_head < n ? c->half - c->n_head : n;
    memcpy(c->head + c->n_head, p, take);
    c->n_head += take;
    for (size_t i = take; i < n; i++) {
        c->ring[c->ring_pos] = p[i];
        c->ring_pos = (c->ring_pos + 1) % c->half;
        if (c->n_ring < c->half)
            c->n_ring++;
    }
}

/* The captured text, with a note where the middle was cut. Frees the capture. */
static char *capture_finish(struct capture *c)
{
    size_t dropped = c->total - c->n_head - c->n_ring;
    char *out = af_xmalloc(c->n_head + c->n_ring + 96);
    memcpy(out, c->head, c->n_head);
    size_t o = c->n_head;
    if (dropped)
        o += (size_t)snprintf(out + o, 96, "\n... [%zu bytes cut] ...\n", dropped);
    size_t start = c->n_ring < c->half ? 0 : c->ring_pos;
    for (size_t i = 0; i < c->n_ring; i++)
        out[o++] = c->ring[(start + i) % c->half];
    out[o] = '\0';
    free(c->head);
    free(c->ring);
    return out;
}

struct argv_buf {
    const char *v[MAX_ARGS];
    size_t n;
    char links[4][64]; /* readlink targets for --symlink */
    char size[24];     /* --size for the tmpfs mounts */
    char seccomp_fd[8];
};

static void arg(struct argv_buf *a, const char *s)
{
    if (a->n < MAX_ARGS - 1)
        a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

/* Binds a system directory read-only, or recreates it as the symlink it is (merged /usr). */
static void bind_sys(struct argv_buf *a, const char *dir, size_t slot)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return;
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(dir, a->links[slot], sizeof a->links[slot] - 1);
        if (n <= 0)
            return;
        a->links[slot][n] = '\0';
        arg(a, "--symlink");
        arg(a, a->links[slot]);
        arg(a, dir);
        return;
    }
    arg(a, "--ro-bind");
    arg(a, dir);
    arg(a, dir);
}

/* ---- What the installed bwrap understands ---------------------------------------------------
 * Probed once per process from `bwrap --help` (a fact about one binary, written once under
 * pthread_once and only read afterwards). Debian 12's bwrap 0.8 has every option used here;
 * an older one runs without the options it lacks (the seccomp filter still refuses new user
 * namespaces). */
static pthread_once_t bwrap_probe_once = PTHREAD_ONCE_INIT;
static int bwrap_features; /* BWRAP_HAS_* */

static void probe_bwrap(void)
{
    int pipe_fd[2];
    if (pipe2(pipe_fd, O_CLOEXEC) != 0)
        return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pipe_fd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    static const char *const argv[] = {BWRAP_PATH, "--help", NULL};
    static char *const no_env[] = {NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, BWRAP_PATH, &fa, NULL, (char *const *)(uintptr_t)argv, no_env);
    posix_spawn_file_actions_destroy(&fa);
    close(pipe_fd[1]);
    char help[16384];
    size_t n = 0;
    for (double deadline = af_clock_ms() + 5000; rc == 0 && n < sizeof help - 1;) {
        struct pollfd pf = {pipe_fd[0], POLLIN, 0};
        double left = deadline - af_clock_ms();
        if (left <= 0)
            break;
        int ready = poll(&pf, 1, (int)left + 1);
        if (ready < 0 && errno != EINTR)
            break;
        if (ready <= 0)
            continue;
        ssize_t r = read(pipe_fd[0], help + n, sizeof help - 1 - n);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            break;
        if (r > 0)
            n += (size_t)r;
    }
    close(pipe_fd[0]);
    if (rc == 0) {
        kill(pid, SIGKILL); /* it has printed or overrun the deadline */
        waitpid(pid, NULL, 0);
    }
    help[n] = '\0';
    int f = 0;
    if (strstr(help, "--disable-userns") && strstr(help, "--assert-userns-disabled"))
        f |= BWRAP_HAS_USERNS;
    if (strstr(help, "--size"))
        f |= BWRAP_HAS_SIZE;
    bwrap_features = f;
}

static int bwrap_feature_bits(void)
{
    pthread_once(&bwrap_probe_once, probe_bwrap);
    return bwrap_features;
}

/* seccomp: whether the child gets the filter as fd SECCOMP_CHILD_FD. */
static void bwrap_argv(struct argv_buf *a, const struct sandbox_params *p, const char *code,
                       int seccomp)
{
    a->n = 0;
    int features = bwrap_feature_bits();
    static const char *const head[] = {BWRAP_PATH, "--unshare-all", "--die-with-parent",
                                       "--new-session"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        arg(a, head[i]);
    if (features & BWRAP_HAS_USERNS) {
        /* A user namespace of our own (not --unshare-all's "try"), in which no further one
         * can be made: bwrap sets user.max_user_namespaces to 1 there, and checks it. */
        arg(a, "--unshare-user");
        arg(a, "--disable-userns");
        arg(a, "--assert-userns-disabled");
    }
    if (seccomp) {
        snprintf(a->seccomp_fd, sizeof a->seccomp_fd, "%d", SECCOMP_CHILD_FD);
        arg(a, "--seccomp");
        arg(a, a->seccomp_fd);
    }
    arg(a, "--ro-bind");
    arg(a, "/usr");
    arg(a, "/usr");
    static const char *const sys[] = {"/bin", "/sbin", "/lib", "/lib64"};
    for (size_t i = 0; i < 4; i++)
        bind_sys(a, sys[i], i);
    static const char *const mounts[] = {"--ro-bind", "/etc",  "/etc", "--proc",
                                         "/proc",     "--dev", "/dev"};
    for (size_t i = 0; i < sizeof mounts / sizeof mounts[0]; i++)
        arg(a, mounts[i]);
    /* The two writable places are tmpfs of a bounded size (host memory otherwise: tmpfs pages
     * count against no rlimit); the root tmpfs, /dev and /proc become read-only. */
    snprintf(a->size, sizeof a->size, "%zu", p->tmpfs_bytes);
    static const char *const tmpfs[] = {"/dev/shm", "/sandbox"};
    for (size_t i = 0; i < 2; i++) {
        if (features & BWRAP_HAS_SIZE) {
            arg(a, "--size");
            arg(a, a->size);
        }
        arg(a, "--tmpfs");
        arg(a, tmpfs[i]);
    }
    /* Read-only /proc too: no process, itself included, can write through /proc/PID/mem. */
    static const char *const tail[] = {"--remount-ro",
                                       "/proc",
                                       "--remount-ro",
                                       "/dev",
                                       "--remount-ro",
                                       "/",
                                       "--chdir",
                                       "/sandbox",
                                       "--clearenv",
                                       "--setenv",
                                       "PATH",
                                       "/usr/bin:/bin",
                                       "--setenv",
                                       "HOME",
                                       "/sandbox",
                                       "--setenv",
                                       "LANG",
                                       "C.UTF-8",
                                       "--setenv",
                                       "OPENBLAS_NUM_THREADS",
                                       "1",
                                       "--setenv",
                                       "MPLBACKEND",
                                       "Agg"};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
        arg(a, tail[i]);
    arg(a, p->python);
    arg(a, "-I");
    arg(a, "-c");
    arg(a, code);
}

static void set_limit(int what, rlim_t v)
{
    struct rlimit rl = {v, v};
    setrlimit(what, &rl);
}

/* Everything the supervisor and the sandbox need, built before the first fork. */
struct launch {
    struct argv_buf a;
    char *envp[8];
    char *tmpdir; /* the fallback's working directory, or NULL */
    int bwrap;
    struct seccomp_filter filter; /* n_insns 0 without it */
};

static void say(const char *msg)
{
    ssize_t w = write(2, msg, strlen(msg));
    (void)w;
}

/* In the child: only async-signal-safe calls from here to exec. */
static void child(const struct sandbox_params *p, const struct launch *l, int out_fd, int err_fd,
                  int null_fd, pid_t parent)
{
    setpgid(0, 0);
    dup2(null_fd, 0);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (l->bwrap && l->filter.fd >= 0) { /* bwrap reads the filter from this fd */
        if (l->filter.fd != SECCOMP_CHILD_FD)
            dup2(l->filter.fd, SECCOMP_CHILD_FD);
        else
            fcntl(SECCOMP_CHILD_FD, F_SETFD, 0);
        closefrom(SECCOMP_CHILD_FD + 1);
    } else {
        closefrom(3);
    }
    set_limit(RLIMIT_CPU, (rlim_t)p->cpu_s);
    set_limit(RLIMIT_AS, (rlim_t)p->mem_bytes);
    set_limit(RLIMIT_FSIZE, (rlim_t)p->file_bytes);
    set_limit(RLIMIT_NOFILE, (rlim_t)p->n_files);
    set_limit(RLIMIT_NPROC, (rlim_t)p->n_procs);
    set_limit(RLIMIT_CORE, 0);
    if (geteuid() == 0) {
        /* Root is exempt from RLIMIT_NPROC and may read anything: become nobody. */
        if (setgroups(0, NULL) != 0 || setgid(NOBODY_ID) != 0 || setuid(NOBODY_ID) != 0)
            _exit(126);
    }
    /* After setuid, which clears it: die with the thread that started us. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (l->tmpdir && chdir(l->tmpdir) != 0)
        _exit(126);
    /* The fallback filters itself; bwrap does it for the sandbox after its own setup. */
    if (!l->bwrap && l->filter.n_insns > 0 && seccomp_filter_install(&l->filter) != 0) {
        say("sandbox: cannot install the seccomp filter\n");
        _exit(126);
    }
    /* bwrap builds the sandbox's environment itself (--clearenv, --setenv). */
    static char *const no_env[] = {NULL};
    char *const *argv = (char *const *)(uintptr_t)l->a.v;
    execve(argv[0], argv, l->bwrap ? no_env : l->envp);
    _exit(127);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

/* Reads both pipes until EOF or the deadline; returns 1 when the deadline passed. */
static int pump(int out_fd, int err_fd, struct capture *co, struct capture *ce, double deadline)
{
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2;
    char buf[16384];
    while (open_fds > 0) {
        double left = deadline - af_clock_ms();
        if (left <= 0)
            return 1;
        int n = poll(fds, 2, (int)(left < 100 ? left + 1 : 100));
        if (n < 0 && errno != EINTR)
            return 0;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(fds[i].fd, buf, sizeof buf);
            if (r > 0) {
                capture_add(i == 0 ? co : ce, buf, (size_t)r);
            } else if (r == 0 || errno != EINTR) {
                fds[i].fd = -1;
                open_fds--;
            }
        }
    }
    return 0;
}

/* ---- The supervisor ------------------------------------------------------------------------
 * The parent does not fork the sandbox itself but a supervisor, which forks it and stays. The
 * supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so whatever the sandbox leaves
 * behind (bwrap's inner process when the outer one dies early, a child that called setsid)
 * is reparented to it rather than to init. When the sandbox's main process exits, or the
 * lifeline pipe that only the parent can write reaches EOF (the parent closed it or was
 * killed, SIGKILL included), it kills every descendant, reaps them all and exits. bwrap's
 * --die-with-parent alone left processes behind when the parent was killed while bwrap was still
 * setting up. The supervisor is a fork of a possibly threaded process, so it makes
 * async-signal-safe calls only. */

/* Kills every child listed in /proc/self/task/SELF/children. Returns how many it saw. */
static int kill_children(const char *children_path)
{
    int fd = open(children_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[4096];
    int n = 0;
    ssize_t r;
    long v = -1;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] >= '0' && buf[i] <= '9') {
                v = (v < 0 ? 0 : v * 10) + (buf[i] - '0');
            } else if (v > 0) {
                kill((pid_t)v, SIGKILL);
                n++;
                v = -1;
            }
        }
    if (v > 0) {
        kill((pid_t)v, SIGKILL);
        n++;
    }
    close(fd);
    return n;
}

static void write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

/* Reaps what has exited; the sandbox's own wait status goes to status_fd (once). Returns 1
 * when no child is left. */
static int reap(pid_t sandbox, int status_fd, int *reported)
{
    for (;;) {
        int st = 0;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == 0)
            return 0;
        if (w < 0)
            return errno == ECHILD;
        if (w == sandbox && !*reported) {
            write_all(status_fd, &st, sizeof st);
            *reported = 1;
        }
    }
}

static void supervisor(const struct sandbox_params *p, const struct launch *l, int out_fd,
                       int err_fd, int null_fd, int life_fd, int status_fd, pid_t parent)
{
    setpgid(0, 0);
    signal(SIGPIPE, SIG_IGN); /* the parent may be gone when the status is written */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (getppid() != parent)
        _exit(126);
    pid_t self = getpid(), sandbox = fork();
    if (sandbox == 0)
        child(p, l, out_fd, err_fd, null_fd, self);
    /* Only the sandbox writes the output pipes: the parent's reads end when it is done. */
    close(out_fd);
    close(err_fd);
    close(null_fd);
    if (sandbox < 0) {
        int st = 127 << 8; /* reported as exit 127, as a failed exec would be */
        write_all(status_fd, &st, sizeof st);
        _exit(1);
    }
    char children[64];
    /* snprintf is not async-signal-safe: the path by hand. */
    char digits[24];
    int nd = 0;
    for (long v = (long)self; v > 0 && nd < (int)sizeof digits; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    static const char pre[] = "/proc/self/task/", post[] = "/children";
    size_t o = 0;
    memcpy(children + o, pre, sizeof pre - 1);
    o += sizeof pre - 1;
    while (nd > 0)
        children[o++] = digits[--nd];
    memcpy(children + o, post, sizeof post);
    int reported = 0;
    struct pollfd pf = {life_fd, POLLIN, 0};
    for (;;) { /* until the sandbox's main process exits or the lifeline ends */
        if (poll(&pf, 1, 10) > 0) {
            char b;
            ssize_t r = read(life_fd, &b, 1);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
        (void)reap(sandbox, status_fd, &reported);
        if (reported) /* the main process is done: what it left behind goes with it */
            break;
    }
    kill(-sandbox, SIGKILL);
    for (;;) {
        if (reap(sandbox, status_fd, &reported))
            break;
        if (kill_children(children) == 0) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    _exit(0);
}

/* The sandbox's wait status from the supervisor, by the deadline. Returns 1 on time-out. */
static int read_status(int fd, double deadline, int *status, int *got)
{
    size_t have = 0;
    int st = 0;
    while (have < sizeof st) {
        double left = deadline - af_clock_ms();
        if (left <= 0)
            return 1;
        struct pollfd pf = {fd, POLLIN, 0};
        int n = poll(&pf, 1, (int)(left < 100 ? left + 1 : 100));
        if (n < 0 && errno != EINTR)
            return 0;
        if (n <= 0)
            continue;
        ssize_t r = read(fd, (char *)&st + have, sizeof st - have);
        if (r == 0 || (r < 0 && errno != EINTR))
            return 0; /* the supervisor ended without a status */
        if (r > 0)
            have += (size_t)r;
    }
    *status = st;
    *got = 1;
    return 0;
}

static int prepare(struct launch *l, const char *code, const struct sandbox_params *p,
                   int use_bwrap, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->bwrap = use_bwrap;
    l->filter.fd = -1;
    if (!p->no_seccomp) {
        char why[200];
        if (seccomp_filter_build(&l->filter, why, sizeof why) != AF_OK) {
            af_errf(err, errlen, "sandbox: %s", why);
            return AF_EIO;
        }
    }
    if (use_bwrap) {
        bwrap_argv(&l->a, p, code, l->filter.fd >= 0);
        return AF_OK;
    }
    char tmpl[] = "/tmp/af_sandbox_XXXXXX";
    if (!mkdtemp(tmpl)) {
        af_errf(err, errlen, "sandbox: cannot create a working directory: %s", strerror(errno));
        return AF_EIO;
    }
    l->tmpdir = af_xstrdup(tmpl);
    if (geteuid() == 0 && chown(l->tmpdir, NOBODY_ID, NOBODY_ID) != 0) {
        af_errf(err, errlen, "sandbox: cannot hand %s to nobody: %s", l->tmpdir, strerror(errno));
        return AF_EIO;
    }
    static const char *const env[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8",
                                      "OPENBLAS_NUM_THREADS=1", "MPLBACKEND=Agg"};
    for (size_t i = 0; i < 4; i++)
        l->envp[i] = af_xstrdup(env[i]);
    size_t hl = strlen(l->tmpdir) + 6;
    l->envp[4] = af_xmalloc(hl);
    snprintf(l->envp[4], hl, "HOME=%s", l->tmpdir);
    arg(&l->a, p->python);
    arg(&l->a, "-I");
    arg(&l->a, "-c");
    arg(&l->a, code);
    return AF_OK;
}

static void release(struct launch *l)
{
    for (size_t i = 0; i < 8; i++)
        free(l->envp[i]);
    seccomp_filter_deinit(&l->filter);
    if (l->tmpdir) {
        nftw(l->tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(l->tmpdir);
    }
}

static int run_once(const char *code, const struct sandbox_params *p, int use_bwrap,
                    struct sandbox_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (p->no_seccomp)
        r->mode = use_bwrap ? "bubblewrap" : "rlimits";
    else
        r->mode = use_bwrap ? "bubblewrap+seccomp" : "rlimits+seccomp";
    if (strlen(code) > MAX_CODE_BYTES) {
        af_errf(err, errlen, "sandbox: the code is %zu bytes, over the limit of %u", strlen(code),
                MAX_CODE_BYTES);
        return AF_ETOOBIG;
    }
    struct launch l;
    int rc = prepare(&l, code, p, use_bwrap, err, errlen);
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, life_p[2] = {-1, -1}, st_p[2] = {-1, -1};
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (rc == AF_OK && (null_fd < 0 || pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC) ||
                        pipe2(life_p, O_CLOEXEC) || pipe2(st_p, O_CLOEXEC))) {
        af_errf(err, errlen, "sandbox: cannot create pipes: %s", strerror(errno));
        rc = AF_EIO;
    }
    pid_t parent = getpid();
    pid_t pid = rc == AF_OK ? fork() : -1;
    if (rc == AF_OK && pid < 0) {
        af_errf(err, errlen, "sandbox: cannot fork: %s", strerror(errno));
        rc = AF_EIO;
    }
    if (pid == 0) {
        /* The supervisor keeps the lifeline's read end and the status pipe's write end. */
        close(life_p[1]);
        close(st_p[0]);
        close(out_p[0]);
        close(err_p[0]);
        supervisor(p, &l, out_p[1], err_p[1], null_fd, life_p[0], st_p[1], parent);
    }
    if (rc == AF_OK) {
        setpgid(pid, pid);
        close(out_p[1]);
        close(err_p[1]);
        close(life_p[0]);
        close(st_p[1]);
        out_p[1] = err_p[1] = life_p[0] = st_p[1] = -1;
        double t0 = af_clock_ms(), deadline = t0 + p->timeout_s * 1000.0;
        struct capture co, ce;
        capture_init(&co, p->output_bytes);
        capture_init(&ce, p->output_bytes);
        r->timed_out = pump(out_p[0], err_p[0], &co, &ce, deadline);
        int status = 0, got = 0;
        if (!r->timed_out)
            r->timed_out = read_status(st_p[0], deadline, &status, &got);
        /* Whatever is left of the tree goes, on every path: closing the lifeline tells the
         * supervisor to kill and reap every descendant. Waiting for it (bounded) also keeps a
         * fork bomb's remains from counting against the next run's process limit. */
        close(life_p[1]);
        life_p[1] = -1;
        if (!got)
            (void)read_status(st_p[0], af_clock_ms() + 5000, &status, &got);
        if (!got)
            status = SIGKILL; /* no report: count it as killed */
        for (double until = af_clock_ms() + 10000; af_clock_ms() < until;) {
            pid_t w = waitpid(pid, NULL, WNOHANG);
            if (w == pid || (w < 0 && errno != EINTR))
                break;
            af_clock_sleep_ms(2);
        }
        if (waitpid(pid, NULL, WNOHANG) == 0) { /* a supervisor stuck past 10 s: end it */
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        r->duration_ms = af_clock_ms() - t0;
        r->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        r->out = capture_finish(&co);
        r->err = capture_finish(&ce);
    }
    for (int i = 0; i < 2; i++) {
        if (life_p[i] >= 0)
            close(life_p[i]);
        if (st_p[i] >= 0)
            close(st_p[i]);
    }
    for (int i = 0; i < 2; i++) {
        if (out_p[i] >= 0)
            close(out_p[i]);
        if (err_p[i] >= 0)
            close(err_p[i]);
    }
    if (null_fd >= 0)
        close(null_fd);
    release(&l);
    return rc;
}

/* bwrap fails with EAGAIN while the processes of an earlier run (a fork bomb) still count
 * against nobody's process limit; that is worth a few short retries. */
int sandbox_run_python(const char *code, const struct sandbox_params *p, int use_bwrap,
                       struct sandbox_result *r, char *err, size_t errlen)
{
    for (int attempt = 0;; attempt++) {
        int rc = run_once(code, p, use_bwrap, r, err, errlen);
        if (rc != AF_OK || !use_bwrap || attempt == 10 || r->exit_status != 1 ||
            !strstr(r->err, "bwrap: Creating new namespace failed: Resource temporarily"))
            return rc;
        sandbox_result_deinit(r);
        af_clock_sleep_ms(100.0 * (attempt + 1));
    }
}

int sandbox_bwrap_works(const char *python)
{
    if (access(BWRAP_PATH, X_OK) != 0)
        return 0;
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 20;
    if (python)
        p.python = python;
    struct sandbox_result r;
    char err[256];
    int ok = sandbox_run_python("print('ok')", &p, 1, &r, err, sizeof err) == AF_OK &&
             r.exit_status == 0 && r.out && strcmp(r.out, "ok\n") == 0;
    sandbox_result_deinit(&r);
    return ok;
}
