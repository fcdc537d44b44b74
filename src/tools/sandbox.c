/*
 * sandbox.c - a separate, unprivileged, limited process for untrusted Python (see sandbox.h).
 *
 * One call: build everything the forked processes need (argv, envp, the compiled seccomp
 * filter, the cgroup), fork the supervisor (sandbox_exec.c), pump the output until the
 * deadline, collect the wait status. Whether bubblewrap's set-up failed, as opposed to the
 * program failing, comes from bwrap itself (--json-status-fd reports "exit-code" only once the
 * program was exec'd) and from a close-on-exec report pipe for our own steps before exec, never
 * from the program's output: code that prints bwrap's error messages is just code. A set-up
 * failure of a busy host is retried within the same deadline. The filter is compiled for every
 * run (about 0.2 ms); the one process-wide fact kept is which options the installed bwrap
 * understands, probed once.
 */
#include "tools/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"
#include "tools/sandbox_cgroup.h"
#include "tools/sandbox_int.h"

#define MAX_CODE_BYTES (100u * 1000u)
#define DEFAULT_BWRAP "/usr/bin/bwrap"
#define NOBODY_ID 65534
#define TMP_PREFIX "af_sandbox_"
#define MAX_SETUP_TRIES 20

/* Options of the installed bwrap, from its --help (older ones lack them). */
#define BWRAP_HAS_USERNS 1 /* --disable-userns and --assert-userns-disabled (0.8) */
#define BWRAP_HAS_SIZE 2   /* --size before --tmpfs (0.5) */
#define BWRAP_HAS_JSON 4   /* --json-status-fd (0.5); else --info-fd */

struct sandbox_params sandbox_default_params(void)
{
    struct sandbox_params p = {.timeout_s = 10,
                               .cpu_s = 10,
                               .mem_bytes = (size_t)2 << 30,
                               .tree_mem_bytes = (size_t)2 << 30,
                               .file_bytes = (size_t)16 << 20,
                               .n_files = 64,
                               .n_procs = 256,
                               .output_bytes = (size_t)64 << 10,
                               .tmpfs_bytes = (size_t)64 << 20,
                               .python = "/usr/bin/python3",
                               .bwrap = DEFAULT_BWRAP,
                               .cgroup = NULL,
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

static void arg(struct sandbox_argv *a, const char *s)
{
    if (a->n < SANDBOX_MAX_ARGS - 1)
        a->v[a->n++] = s;
    a->v[a->n] = NULL;
}

/* Binds a system directory read-only, or recreates it as the symlink it is (merged /usr). */
static void bind_sys(struct sandbox_argv *a, const char *dir, size_t slot)
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
 * Read from `bwrap --help`: for the default binary once per process (a fact about one binary,
 * written once under pthread_once and only read afterwards), for another (tests) at each call.
 * Debian 12's bwrap 0.8 has every option used here; an older one runs without the options it
 * lacks (the seccomp filter still refuses new user namespaces). */
static pthread_once_t bwrap_probe_once = PTHREAD_ONCE_INIT;
static int bwrap_default_features; /* BWRAP_HAS_* */

static int probe_bwrap(const char *bwrap)
{
    int pipe_fd[2];
    if (pipe2(pipe_fd, O_CLOEXEC) != 0)
        return 0;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pipe_fd[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    const char *const argv[] = {bwrap, "--help", NULL};
    static char *const no_env[] = {NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, bwrap, &fa, NULL, (char *const *)(uintptr_t)argv, no_env);
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
    if (strstr(help, "--json-status-fd"))
        f |= BWRAP_HAS_JSON;
    return f;
}

static void probe_default_bwrap(void)
{
    bwrap_default_features = probe_bwrap(DEFAULT_BWRAP);
}

static int bwrap_feature_bits(const char *bwrap)
{
    if (strcmp(bwrap, DEFAULT_BWRAP) != 0)
        return probe_bwrap(bwrap);
    pthread_once(&bwrap_probe_once, probe_default_bwrap);
    return bwrap_default_features;
}

/* seccomp: whether the sandbox gets the filter as SANDBOX_SECCOMP_FD. */
static void bwrap_argv(struct sandbox_argv *a, const struct sandbox_params *p, const char *code,
                       int features, int seccomp)
{
    a->n = 0;
    arg(a, p->bwrap);
    static const char *const head[] = {"--unshare-all", "--die-with-parent", "--new-session"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        arg(a, head[i]);
    if (features & BWRAP_HAS_USERNS) {
        /* A user namespace of our own (not --unshare-all's "try"), in which no further one
         * can be made: bwrap sets user.max_user_namespaces to 1 there, and checks it. The
         * sandbox's own host uid is "nobody" inside. */
        static const char *const userns[] = {"--unshare-user",
                                             "--disable-userns",
                                             "--assert-userns-disabled",
                                             "--uid",
                                             "65534",
                                             "--gid",
                                             "65534"};
        for (size_t i = 0; i < sizeof userns / sizeof userns[0]; i++)
            arg(a, userns[i]);
    }
    snprintf(a->fd_text[0], sizeof a->fd_text[0], "%d", SANDBOX_STATUS_FD);
    arg(a, features & BWRAP_HAS_JSON ? "--json-status-fd" : "--info-fd");
    arg(a, a->fd_text[0]);
    if (seccomp) {
        snprintf(a->fd_text[1], sizeof a->fd_text[1], "%d", SANDBOX_SECCOMP_FD);
        arg(a, "--seccomp");
        arg(a, a->fd_text[1]);
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

/* ---- Working folders left by killed callers -------------------------------------------------
 * A caller killed with its supervisor (or by an older agentflow) leaves /tmp/af_sandbox_*
 * behind. The first run of each process removes those whose caller is gone: af_sandbox_PID_*
 * where PID is dead, and folders of the old form af_sandbox_XXXXXX over an hour old. Only
 * folders (never links) owned by this user, a sandbox uid or nobody, removed through
 * descriptors without following links. */
static pthread_once_t tmp_sweep_once = PTHREAD_ONCE_INIT;

static int sweepable_owner(uid_t uid)
{
    return uid == geteuid() || uid == NOBODY_ID ||
           (uid >= SANDBOX_UID_BASE && uid - SANDBOX_UID_BASE < (1u << 22));
}

static void sweep_tmp(void)
{
    DIR *d = opendir("/tmp");
    struct dirent *e;
    time_t now = time(NULL);
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
            !sweepable_owner(st.st_uid))
            continue;
        const char *rest = e->d_name + strlen(TMP_PREFIX);
        char *end = NULL;
        long pid = strtol(rest, &end, 10);
        int stale;
        if (end != rest && *end == '_' && pid > 0)
            stale = pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
        else
            stale = now - st.st_mtime > 3600;
        char path[512];
        snprintf(path, sizeof path, "/tmp/%s", e->d_name);
        if (stale)
            (void)sandbox_rm_tree(path);
    }
    if (d)
        closedir(d);
}

/* ---- One attempt ----------------------------------------------------------------------------- */

/* How one attempt's set-up went. */
struct attempt {
    int ran;            /* the program was exec'd (or may have been) */
    int transient;      /* the set-up failed for a reason that may pass (EAGAIN, ENOMEM) */
    int bwrap_unusable; /* bubblewrap cannot set up here, whatever the load */
    int dir_taken;      /* the working folder's name was another's */
    char why[256];
};

static int prepare(struct sandbox_launch *l, const char *code, const struct sandbox_params *p,
                   int use_bwrap, int features, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->bwrap = use_bwrap;
    l->own_uid = geteuid() == 0;
    l->filter.fd = l->status_fd = l->report_fd = l->cg_procs_fd = l->cg_kill_fd = -1;
    if (!p->no_seccomp) {
        char why[200];
        if (seccomp_filter_build(&l->filter, why, sizeof why) != AF_OK) {
            af_errf(err, errlen, "sandbox: %s", why);
            return AF_EIO;
        }
    }
    if (use_bwrap) {
        bwrap_argv(&l->a, p, code, features, l->filter.fd >= 0);
        return AF_OK;
    }
    /* A fresh name; the supervisor makes the folder (and removes it). */
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
        af_errf(err, errlen, "sandbox: getrandom: %s", strerror(errno));
        return AF_EIO;
    }
    char name[64];
    int o = snprintf(name, sizeof name, "/tmp/" TMP_PREFIX "%ld_", (long)getpid());
    for (size_t i = 0; i < sizeof rnd; i++)
        name[o++] = alnum[rnd[i] % (sizeof alnum - 1)];
    name[o] = '\0';
    l->tmpdir = af_xstrdup(name);
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

/* remove_dir: whether the folder may be ours (the supervisor made it, and removed it unless it
 * was killed too); a name found taken is another's. */
static void release(struct sandbox_launch *l, int remove_dir)
{
    for (size_t i = 0; i < 8; i++)
        free(l->envp[i]);
    seccomp_filter_deinit(&l->filter);
    if (l->tmpdir && remove_dir)
        (void)sandbox_rm_tree(l->tmpdir);
    free(l->tmpdir);
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

/* What is left in a pipe whose writers are all gone (bounded; never blocks). */
static size_t drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    if (fd < 0)
        return 0;
    fcntl(fd, F_SETFL, O_NONBLOCK);
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r > 0)
            n += (size_t)r;
        else if (r == 0 || errno != EINTR)
            break;
    }
    buf[n] = '\0';
    return n;
}

static const char *step_name(int step)
{
    static const char *const names[] = {"?",
                                        "joining the cgroup",
                                        "handing over the folder",
                                        "switching uid",
                                        "checking the supervisor",
                                        "entering the folder",
                                        "installing the seccomp filter",
                                        "starting the program",
                                        "forking",
                                        "making the working folder"};
    return step > 0 && step < (int)(sizeof names / sizeof names[0]) ? names[step] : names[0];
}

/* bwrap's own message: the first stderr line that starts with "bwrap:", else all of it. */
static void bwrap_message(const char *err_text, char *out, size_t cap)
{
    const char *m = strstr(err_text, "bwrap:");
    if (!m)
        m = err_text;
    snprintf(out, cap, "%.*s", (int)strcspn(m, "\n"), m);
}

/* A set-up error that passes once other sandboxes end or memory frees up. Running out of
 * user namespaces is one too, unless the host allows none at all. */
static int transient_message(const char *msg)
{
    if (strstr(msg, "Resource temporarily unavailable") || strstr(msg, "Cannot allocate memory"))
        return 1;
    if (!strstr(msg, "No space left on device"))
        return 0;
    char v[32] = "";
    FILE *f = fopen("/proc/sys/user/max_user_namespaces", "re");
    if (f) {
        if (!fgets(v, sizeof v, f))
            v[0] = '\0';
        fclose(f);
    }
    return strtol(v, NULL, 10) != 0;
}

/* Whether the program ran, from the report pipe (our steps), bwrap's status, the time-out. */
static void classify(struct attempt *at, const struct sandbox_result *r, int use_bwrap,
                     int features, const char *status_text, const int *report, size_t n_report)
{
    memset(at, 0, sizeof *at);
    if (n_report == 2 * sizeof(int)) {
        int e = report[1];
        snprintf(at->why, sizeof at->why, "%s failed: %s", step_name(report[0]), strerror(e));
        at->transient = e == EAGAIN || e == ENOMEM || e == EINTR;
        at->bwrap_unusable = use_bwrap && report[0] == STEP_EXEC && !at->transient;
        at->dir_taken = report[0] == STEP_MKDIR;
        return;
    }
    if (!use_bwrap || r->timed_out) {
        at->ran = 1;
        return;
    }
    /* bwrap writes "exit-code" only after exec'ing the program; --info-fd's "child-pid" comes
     * earlier, once the namespaces exist, so the program may have run: count it as run. */
    at->ran =
        strstr(status_text, features & BWRAP_HAS_JSON ? "\"exit-code\"" : "child-pid") != NULL;
    if (at->ran)
        return;
    if (r->err && r->err[0])
        bwrap_message(r->err, at->why, sizeof at->why);
    else
        snprintf(at->why, sizeof at->why, "bwrap ended (status %d, signal %d) before the program",
                 r->exit_status, r->term_signal);
    at->transient = transient_message(at->why);
    at->bwrap_unusable = !at->transient;
}

/* Waits for the supervisor (it kills and reaps the tree once the lifeline closes); one stuck
 * past 10 s is ended here. */
static void wait_supervisor(pid_t pid)
{
    for (double until = af_clock_ms() + 10000; af_clock_ms() < until;) {
        pid_t w = waitpid(pid, NULL, WNOHANG);
        if (w == pid || (w < 0 && errno != EINTR))
            return;
        af_clock_sleep_ms(2);
    }
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static void close_pair(int *p)
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0) {
            close(p[i]);
            p[i] = -1;
        }
}

/* The caller's side of a started run (pipes as in run_once): the output until the deadline,
 * the wait status, the supervisor's end, then how the set-up went. Closes the caller's copies
 * of the write ends and the lifeline; run_once closes the rest. */
static void collect(pid_t pid, int pipes[6][2], const struct sandbox_params *p, int use_bwrap,
                    int features, double deadline, struct sandbox_result *r, struct attempt *at)
{
    int *mine[] = {&pipes[0][1], &pipes[1][1], &pipes[2][0],
                   &pipes[3][1], &pipes[4][1], &pipes[5][1]};
    for (size_t i = 0; i < 6; i++)
        if (*mine[i] >= 0) {
            close(*mine[i]);
            *mine[i] = -1;
        }
    struct capture co, ce;
    capture_init(&co, p->output_bytes);
    capture_init(&ce, p->output_bytes);
    r->timed_out = pump(pipes[0][0], pipes[1][0], &co, &ce, deadline);
    int status = 0, got = 0;
    if (!r->timed_out)
        r->timed_out = read_status(pipes[3][0], deadline, &status, &got);
    /* Whatever is left of the tree goes, on every path: closing the lifeline tells the
     * supervisor to kill and reap every descendant. Waiting for it (bounded) also keeps a
     * fork bomb's remains from counting against the next run's process limit. */
    close(pipes[2][1]);
    pipes[2][1] = -1;
    if (!got)
        (void)read_status(pipes[3][0], af_clock_ms() + 5000, &status, &got);
    if (!got)
        status = SIGKILL; /* no report: count it as killed */
    wait_supervisor(pid);
    r->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r->out = capture_finish(&co);
    r->err = capture_finish(&ce);
    char status_text[4096], rep[2 * sizeof(int) + 1];
    int report[2] = {0, 0};
    drain(pipes[5][0], status_text, sizeof status_text);
    size_t n_rep = drain(pipes[4][0], rep, sizeof rep);
    memcpy(report, rep, sizeof report);
    classify(at, r, use_bwrap, features, status_text, report, n_rep);
}

/* One sandbox run until `deadline`. Returns 0 with *r and *at filled, or an error (nothing was
 * started, *r is empty). */
static int run_once(const char *code, const struct sandbox_params *p, int use_bwrap, int features,
                    double deadline, struct sandbox_result *r, struct attempt *at, char *err,
                    size_t errlen)
{
    memset(r, 0, sizeof *r);
    struct sandbox_cgroup cg;
    char no_cg[256] = "";
    int cg_rc =
        sandbox_cgroup_init(&cg, p->cgroup, p->tree_mem_bytes, p->n_procs, no_cg, sizeof no_cg);
    struct sandbox_launch l;
    int rc = cg_rc < 0 ? AF_EIO : prepare(&l, code, p, use_bwrap, features, err, errlen);
    if (cg_rc < 0) {
        af_errf(err, errlen, "sandbox: %s", no_cg);
        memset(&l, 0, sizeof l);
    }
    /* out, err, lifeline, wait status, set-up report, bwrap's status */
    int pipes[6][2] = {{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    for (int i = 0; rc == AF_OK && i < (use_bwrap ? 6 : 5); i++)
        if (pipe2(pipes[i], O_CLOEXEC) != 0 || null_fd < 0) {
            af_errf(err, errlen, "sandbox: cannot create pipes: %s", strerror(errno));
            rc = AF_EIO;
        }
    l.report_fd = pipes[4][1];
    l.status_fd = pipes[5][1];
    l.cg_procs_fd = cg.procs_fd;
    l.cg_kill_fd = cg.kill_fd;
    l.cg_dir = cg.dir;
    pid_t parent = getpid();
    pid_t pid = rc == AF_OK ? fork() : -1;
    if (rc == AF_OK && pid < 0) {
        af_errf(err, errlen, "sandbox: cannot fork: %s", strerror(errno));
        rc = AF_EIO;
    }
    if (pid == 0) {
        /* The supervisor keeps the lifeline's read end and the wait pipe's write end. */
        close(pipes[2][1]);
        close(pipes[3][0]);
        close(pipes[0][0]);
        close(pipes[1][0]);
        close(pipes[4][0]);
        if (pipes[5][0] >= 0)
            close(pipes[5][0]);
        sandbox_supervise(p, &l, pipes[0][1], pipes[1][1], null_fd, pipes[2][0], pipes[3][1],
                          parent);
    }
    if (rc == AF_OK) {
        setpgid(pid, pid);
        collect(pid, pipes, p, use_bwrap, features, deadline, r, at);
        r->limits = cg_rc == 1 ? "cgroup" : "process";
        snprintf(r->no_cgroup, sizeof r->no_cgroup, "%s", cg_rc == 1 ? "" : no_cg);
    }
    for (int i = 0; i < 6; i++)
        close_pair(pipes[i]);
    if (null_fd >= 0)
        close(null_fd);
    if (cg_rc >= 0)
        release(&l, rc == AF_OK && !at->dir_taken);
    sandbox_cgroup_deinit(&cg);
    return rc;
}

static void set_mode(struct sandbox_result *r, const struct sandbox_params *p, int use_bwrap)
{
    if (p->no_seccomp)
        r->mode = use_bwrap ? "bubblewrap" : "rlimits";
    else
        r->mode = use_bwrap ? "bubblewrap+seccomp" : "rlimits+seccomp";
}

int sandbox_run_python(const char *code, const struct sandbox_params *p, enum sandbox_mode mode,
                       struct sandbox_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (strlen(code) > MAX_CODE_BYTES) {
        af_errf(err, errlen, "sandbox: the code is %zu bytes, over the limit of %u", strlen(code),
                MAX_CODE_BYTES);
        return AF_ETOOBIG;
    }
    pthread_once(&tmp_sweep_once, sweep_tmp);
    double t0 = af_clock_ms(), deadline = t0 + p->timeout_s * 1000.0;
    int use_bwrap = mode != SANDBOX_RLIMITS;
    char fallback[256] = "";
    if (use_bwrap && access(p->bwrap, X_OK) != 0) {
        if (mode == SANDBOX_BWRAP) {
            af_errf(err, errlen, "sandbox: cannot run %s: %s", p->bwrap, strerror(errno));
            return AF_EIO;
        }
        snprintf(fallback, sizeof fallback, "cannot run %s: %s", p->bwrap, strerror(errno));
        use_bwrap = 0;
    }
    int features = use_bwrap ? bwrap_feature_bits(p->bwrap) : 0;
    for (int n = 1;; n++) {
        struct attempt at;
        int rc = run_once(code, p, use_bwrap, features, deadline, r, &at, err, errlen);
        if (rc != AF_OK)
            return rc;
        r->attempts = n;
        if (at.ran)
            break;
        double backoff = n * 50.0 < 500 ? n * 50.0 : 500, left = deadline - af_clock_ms();
        sandbox_result_deinit(r);
        if (at.transient && n < MAX_SETUP_TRIES && left > 2 * backoff) {
            af_clock_sleep_ms(backoff);
            continue;
        }
        if (at.bwrap_unusable && use_bwrap && mode == SANDBOX_AUTO) {
            snprintf(fallback, sizeof fallback, "%s", at.why);
            use_bwrap = 0;
            continue;
        }
        af_errf(err, errlen, "sandbox: %s (%d %s): %s; the code did not run",
                at.transient ? "the host stayed too busy to set up the sandbox before the deadline"
                             : "the sandbox could not be set up",
                n, n == 1 ? "try" : "tries", at.why);
        return AF_EIO;
    }
    set_mode(r, p, use_bwrap);
    snprintf(r->fallback, sizeof r->fallback, "%s", fallback);
    r->duration_ms = af_clock_ms() - t0;
    return AF_OK;
}

int sandbox_bwrap_works(const char *python, char *why, size_t whylen)
{
    struct sandbox_params p = sandbox_default_params();
    p.timeout_s = 20;
    if (python)
        p.python = python;
    struct sandbox_result r;
    char err[512] = "";
    int rc = sandbox_run_python("print('ok')", &p, SANDBOX_BWRAP, &r, err, sizeof err);
    int ok = rc == AF_OK && r.exit_status == 0 && r.out && strcmp(r.out, "ok\n") == 0;
    if (!ok)
        af_errf(why, whylen, "%s", rc != AF_OK ? err : r.timed_out ? "timed out" : r.err);
    sandbox_result_deinit(&r);
    if (ok)
        return 1;
    return rc != AF_OK && !strstr(err, "too busy") ? 0 : -1;
}
