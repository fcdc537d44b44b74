/*
 * sandbox_exec.c - the two processes behind each sandbox run: the supervisor and, under it,
 * the sandbox's own process up to its exec of bwrap or python (see sandbox_int.h).
 *
 * Both are forks of a possibly threaded caller, so from fork to exec or _exit they make
 * async-signal-safe calls only: no malloc, no stdio, paths built by hand.
 *
 * The supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so whatever the sandbox leaves
 * behind (bwrap's inner process when the outer one dies early, a child that called setsid) is
 * reparented to it rather than to init. When the sandbox's main process exits, or the lifeline
 * pipe that only the caller writes reaches EOF (the caller closed it or was killed, SIGKILL
 * included), it kills every descendant (the whole cgroup at once where there is one), reaps
 * them all, removes the fallback's working directory and the cgroup, and exits. bwrap's
 * --die-with-parent alone left processes behind when the caller was killed while bwrap was
 * still setting up; a caller killed mid-run used to leave its /tmp/af_sandbox_* folder.
 */
#include "tools/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RM_MAX_DEPTH 24

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

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- Removing a directory tree without malloc --------------------------------------------- */

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static void rm_under(int dfd, int depth);

/* Writes "/proc/self/fd/N" into out (at least 32 bytes), without snprintf. */
static void proc_fd_path(char *out, int fd)
{
    static const char pre[] = "/proc/self/fd/";
    char digits[12];
    int nd = 0;
    for (unsigned v = (unsigned)fd; nd == 0 || v > 0; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    memcpy(out, pre, sizeof pre - 1);
    size_t o = sizeof pre - 1;
    while (nd > 0)
        out[o++] = digits[--nd];
    out[o] = '\0';
}

/* Opens the folder `name` of dfd, never through a link. One the code made unreadable (only a
 * non-root caller meets that) is opened up first, through a descriptor of that very folder:
 * chmod by name could be sent elsewhere by a link swapped in. */
static int open_subdir(int dfd, const char *name)
{
    int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub >= 0 || errno != EACCES)
        return sub;
    int pfd = openat(dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (pfd < 0)
        return -1;
    char path[32];
    proc_fd_path(path, pfd);
    if (chmod(path, 0700) == 0)
        sub = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    close(pfd);
    return sub;
}

/* Removes one entry of dfd: a file or link at once, a directory after its contents. */
static void rm_entry(int dfd, const char *name, int depth)
{
    if (unlinkat(dfd, name, 0) == 0 || (errno != EISDIR && errno != EPERM))
        return;
    int sub = open_subdir(dfd, name);
    if (sub < 0)
        return;
    struct stat st;
    if (fstat(sub, &st) == 0 && !(st.st_mode & S_IWUSR))
        fchmod(sub, 0700); /* a folder the code made read-only */
    if (depth < RM_MAX_DEPTH)
        rm_under(sub, depth + 1);
    close(sub);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

/* Passes over the directory until a pass finds nothing it can remove (entries removed while
 * reading may shift what the next read returns). */
static void rm_under(int dfd, int depth)
{
    char buf[2048] __attribute__((aligned(8)));
    for (int pass = 0; pass < 64; pass++) {
        int seen = 0;
        lseek(dfd, 0, SEEK_SET);
        long n;
        while ((n = syscall(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < n;) {
                const struct linux_dirent64 *d = (const void *)(buf + off);
                off += d->d_reclen;
                if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
                    continue;
                seen = 1;
                rm_entry(dfd, d->d_name, depth);
            }
        }
        if (!seen)
            return;
    }
}

int sandbox_rm_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        rm_under(fd, 0);
        close(fd);
    }
    return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* ---- The sandbox's process, from fork to exec --------------------------------------------- */

static void set_limit(int what, rlim_t v)
{
    struct rlimit rl = {v, v};
    setrlimit(what, &rl);
}

/* Tells the caller which step failed and why, then ends. */
static void fail(enum sandbox_step step)
{
    int msg[2] = {(int)step, errno};
    write_all(SANDBOX_REPORT_FD, msg, sizeof msg);
    _exit(126);
}

/* Puts src at fd `to` (close-on-exec when cloexec). Every source was first moved above the
 * targets, so no dup2 overwrites a source still to be placed. */
static void place_fd(int src, int to, int cloexec)
{
    if (src < 0)
        return;
    if (dup3(src, to, cloexec ? O_CLOEXEC : 0) < 0)
        _exit(126);
}

static int lift_fd(int fd)
{
    return fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, SANDBOX_REPORT_FD + 1);
}

static void sandbox_process(const struct sandbox_params *p, const struct sandbox_launch *l,
                            int out_fd, int err_fd, int null_fd, pid_t sup)
{
    setpgid(0, 0);
    int fds[6] = {lift_fd(null_fd),
                  lift_fd(out_fd),
                  lift_fd(err_fd),
                  lift_fd(l->report_fd),
                  lift_fd(l->bwrap ? l->filter.fd : -1),
                  lift_fd(l->status_fd)};
    int cg_fd = lift_fd(l->cg_procs_fd);
    place_fd(fds[0], 0, 0);
    place_fd(fds[1], 1, 0);
    place_fd(fds[2], 2, 0);
    place_fd(fds[3], SANDBOX_REPORT_FD, 1);
    place_fd(fds[4], SANDBOX_SECCOMP_FD, 0); /* bwrap reads the filter here */
    place_fd(fds[5], SANDBOX_STATUS_FD, 0);  /* and writes its status here */
    if (fds[4] < 0)                          /* no caller's descriptor may reach the program */
        close(SANDBOX_SECCOMP_FD);
    if (fds[5] < 0)
        close(SANDBOX_STATUS_FD);
    /* The whole tree goes into the cgroup before anything can fork. */
    if (cg_fd >= 0 && write(cg_fd, "0", 1) != 1)
        fail(STEP_CGROUP);
    closefrom(SANDBOX_REPORT_FD + 1);
    set_limit(RLIMIT_CPU, (rlim_t)p->cpu_s);
    set_limit(RLIMIT_AS, (rlim_t)p->mem_bytes);
    set_limit(RLIMIT_FSIZE, (rlim_t)p->file_bytes);
    set_limit(RLIMIT_NOFILE, (rlim_t)p->n_files);
    set_limit(RLIMIT_NPROC, (rlim_t)p->n_procs);
    set_limit(RLIMIT_CORE, 0);
    if (l->own_uid) {
        /* A uid no other process has: its RLIMIT_NPROC count is this sandbox's alone, and
         * kill(-1, ...) reaches this sandbox's processes only. */
        uid_t uid = sandbox_uid_for(sup);
        if (l->tmpdir && chown(l->tmpdir, uid, uid) != 0)
            fail(STEP_CHOWN);
        if (setgroups(0, NULL) != 0 || setgid(uid) != 0 || setuid(uid) != 0)
            fail(STEP_UID);
    }
    /* After setuid, which clears it: die with the supervisor. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != sup) {
        errno = ESRCH;
        fail(STEP_PARENT);
    }
    if (l->tmpdir && chdir(l->tmpdir) != 0)
        fail(STEP_CHDIR);
    /* The fallback filters itself; bwrap does it for the sandbox after its own setup. */
    if (!l->bwrap && l->filter.n_insns > 0 && seccomp_filter_install(&l->filter) != 0)
        fail(STEP_SECCOMP);
    /* bwrap builds the sandbox's environment itself (--clearenv, --setenv). */
    static char *const no_env[] = {NULL};
    char *const *argv = (char *const *)(uintptr_t)l->a.v;
    execve(argv[0], argv, l->bwrap ? no_env : l->envp);
    fail(STEP_EXEC);
}

/* ---- The supervisor ------------------------------------------------------------------------ */

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

/* Reaps what has exited; the sandbox's own wait status goes to wait_fd (once). Returns 1
 * when no child is left. */
static int reap(pid_t sandbox, int wait_fd, int *reported)
{
    for (;;) {
        int st = 0;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w == 0)
            return 0;
        if (w < 0)
            return errno == ECHILD;
        if (w == sandbox && !*reported) {
            write_all(wait_fd, &st, sizeof st);
            *reported = 1;
        }
    }
}

/* "/proc/self/task/PID/children", without snprintf. */
static void children_path(char *out, pid_t self)
{
    char digits[24];
    int nd = 0;
    for (long v = (long)self; v > 0 && nd < (int)sizeof digits; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
    static const char pre[] = "/proc/self/task/", post[] = "/children";
    size_t o = 0;
    memcpy(out + o, pre, sizeof pre - 1);
    o += sizeof pre - 1;
    while (nd > 0)
        out[o++] = digits[--nd];
    memcpy(out + o, post, sizeof post);
}

/* Removes the fallback's working folder (when made) and the cgroup, then ends: on every path,
 * the caller may already be gone and nobody else would. */
__attribute__((noreturn)) static void finish(const struct sandbox_launch *l, int made_dir, int code)
{
    if (made_dir)
        sandbox_rm_tree(l->tmpdir);
    /* An emptied group may take a moment to count as unpopulated. */
    for (int i = 0; l->cg_dir && rmdir(l->cg_dir) != 0 && errno == EBUSY && i < 200; i++)
        nap_ms(5);
    _exit(code);
}

void sandbox_supervise(const struct sandbox_params *p, const struct sandbox_launch *l, int out_fd,
                       int err_fd, int null_fd, int life_fd, int wait_fd, pid_t parent)
{
    setpgid(0, 0);
    signal(SIGPIPE, SIG_IGN); /* the caller may be gone when the status is written */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (getppid() != parent) /* killed since it forked us */
        finish(l, 0, 126);
    /* The folder is made here, not by the caller, so that it never exists without someone
     * to remove it: a caller killed before this fork leaves nothing. */
    if (l->tmpdir && mkdir(l->tmpdir, 0700) != 0) {
        int msg[2] = {STEP_MKDIR, errno}, st = 126 << 8;
        write_all(l->report_fd, msg, sizeof msg);
        write_all(wait_fd, &st, sizeof st);
        finish(l, 0, 1);
    }
    pid_t self = getpid(), sandbox = fork();
    if (sandbox == 0)
        sandbox_process(p, l, out_fd, err_fd, null_fd, self);
    /* Only the sandbox writes the output, status and report pipes: the caller's reads end
     * when it is done. */
    close(out_fd);
    close(err_fd);
    close(null_fd);
    if (l->status_fd >= 0)
        close(l->status_fd);
    if (sandbox < 0) {
        int msg[2] = {STEP_FORK, errno};
        write_all(l->report_fd, msg, sizeof msg);
        int st = 127 << 8; /* reported as exit 127, as a failed exec would be */
        write_all(wait_fd, &st, sizeof st);
        finish(l, l->tmpdir != NULL, 1);
    }
    close(l->report_fd);
    char children[64];
    children_path(children, self);
    int reported = 0;
    struct pollfd pf = {life_fd, POLLIN, 0};
    for (;;) { /* until the sandbox's main process exits or the lifeline ends */
        if (poll(&pf, 1, 10) > 0) {
            char b;
            ssize_t r = read(life_fd, &b, 1);
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
                break;
        }
        (void)reap(sandbox, wait_fd, &reported);
        if (reported) /* the main process is done: what it left behind goes with it */
            break;
    }
    if (l->cg_kill_fd >= 0) /* every process of the group at once, forks in flight included */
        write_all(l->cg_kill_fd, "1", 1);
    kill(-sandbox, SIGKILL);
    for (;;) {
        if (reap(sandbox, wait_fd, &reported))
            break;
        if (kill_children(children) == 0)
            nap_ms(2);
    }
    finish(l, l->tmpdir != NULL, 0);
}
