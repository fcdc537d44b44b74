/*
 * sandbox_int.h - what sandbox.c hands to the processes it forks (private to the sandbox's
 * files: sandbox.c builds a launch, sandbox_exec.c runs the supervisor and the sandbox from it).
 *
 * Everything is built before fork(): the caller may have other threads, so the forked
 * processes make async-signal-safe calls only, and only read the launch.
 */
#ifndef AF_TOOLS_SANDBOX_INT_H
#define AF_TOOLS_SANDBOX_INT_H

#include <stddef.h>
#include <sys/types.h>

#include "tools/sandbox.h"
#include "tools/seccomp_filter.h"

#define SANDBOX_MAX_ARGS 112
/* Where the sandbox's process finds its descriptors just before exec. */
#define SANDBOX_SECCOMP_FD 3 /* the filter's memfd, for bwrap --seccomp */
#define SANDBOX_STATUS_FD 4  /* bwrap --json-status-fd: "exit-code" once the program ran */
#define SANDBOX_REPORT_FD 5  /* close-on-exec: a set-up failure before exec is written here */

/* Steps of the sandbox process before exec; one is reported with errno when it fails. */
enum sandbox_step {
    STEP_CGROUP = 1,
    STEP_CHOWN,
    STEP_UID,
    STEP_PARENT,
    STEP_CHDIR,
    STEP_SECCOMP,
    STEP_EXEC,
    STEP_FORK,
    STEP_MKDIR
};

struct sandbox_argv {
    const char *v[SANDBOX_MAX_ARGS];
    size_t n;
    char links[4][64]; /* readlink targets for --symlink */
    char size[24];     /* --size for the tmpfs mounts */
    char fd_text[2][8];
};

struct sandbox_launch {
    struct sandbox_argv a;
    char *envp[8]; /* the fallback's environment (owned strings) */
    char *tmpdir;  /* the fallback's working directory (owned; made and removed by the
                      supervisor), or NULL */
    int bwrap;     /* a.v[0] is bwrap */
    int own_uid;   /* root: become SANDBOX_UID_BASE + the supervisor's pid */
    struct seccomp_filter filter; /* n_insns 0 without it */
    int status_fd;                /* write end of bwrap's --json-status-fd pipe, or -1 */
    int report_fd;                /* write end of the set-up report pipe (close-on-exec) */
    int cg_procs_fd;              /* the sandbox cgroup's cgroup.procs, or -1 */
    int cg_kill_fd;               /* its cgroup.kill, or -1 */
    const char *cg_dir;           /* its directory (borrowed), or NULL */
};

/* The uid a sandbox under supervisor `sup` runs as, when started as root. */
static inline uid_t sandbox_uid_for(pid_t sup)
{
    return (uid_t)(SANDBOX_UID_BASE + (unsigned)sup);
}

/* In the forked supervisor (never returns): starts the sandbox's process, kills and reaps the
 * whole tree when the sandbox's main process exits or life_fd reaches EOF, writes the main
 * process's wait status to wait_fd, removes the working directory and the cgroup, exits. */
void sandbox_supervise(const struct sandbox_params *p, const struct sandbox_launch *l, int out_fd,
                       int err_fd, int null_fd, int life_fd, int wait_fd, pid_t parent)
    __attribute__((noreturn));

/* Removes the directory `path` and everything under it, never following a symlink (entries
 * are reached through descriptors); unreadable folders are opened up first. Async-signal-safe.
 * Returns 0 when the directory is gone. */
int sandbox_rm_tree(const char *path);

#endif
