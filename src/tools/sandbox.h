/*
 * sandbox.h - runs untrusted Python in a separate, unprivileged, resource-limited process
 * (private to tools/).
 *
 * Preferred mode: bubblewrap with every namespace unshared (no network, new PID namespace)
 * and no further user namespace allowed inside (--disable-userns where bwrap has it), a
 * read-only view of the system directories only, size-capped private tmpfs for the working
 * directory and /dev/shm (everything else read-only), --die-with-parent. Always: a seccomp deny
 * list (seccomp_filter.h: namespaces, mounts, ptrace, bpf, io_uring, ...; EPERM, not a kill)
 * under PR_SET_NO_NEW_PRIVS, rlimits on CPU, address space, file size, open files and process
 * count, its own process group, a wall-clock deadline that kills the whole tree, and
 * stdout/stderr capped (cut out of the middle). Started as root, each sandbox runs as a uid of
 * its own (SANDBOX_UID_BASE + the supervisor's pid; "nobody" inside bubblewrap's user
 * namespace), so no sandbox can signal another or use up another's process limit. Where a
 * cgroup v2 group with the memory and pids controllers can be had (sandbox_cgroup.h), the whole
 * tree also shares one memory.max and one pids.max. A supervisor process (a child subreaper)
 * kills and reaps every descendant when the main process exits, at the deadline, or when the
 * caller dies, then removes the fallback's working directory and the cgroup.
 *
 * Fallback: the same limits and filter without the namespaces, in a fresh temporary directory;
 * the result's `mode` says so. It runs only when asked (SANDBOX_RLIMITS) or, in SANDBOX_AUTO,
 * when bubblewrap is missing or fails to set up for a reason that does not pass (EPERM and the
 * like); a busy host (EAGAIN, ENOMEM) is retried until the call's deadline and then is an
 * error, never a reason to drop the namespaces. Safe from any thread.
 */
#ifndef AF_TOOLS_SANDBOX_H
#define AF_TOOLS_SANDBOX_H

#include <stddef.h>

#include "agentflow/err.h"

/* Host uids SANDBOX_UID_BASE .. SANDBOX_UID_BASE + 2^22 (the largest pid_max) are the
 * sandboxes' when agentflow runs as root; nothing else on the host may use them. */
#define SANDBOX_UID_BASE 0x70000000u

enum sandbox_mode {
    SANDBOX_AUTO,   /* bubblewrap; the fallback only where bubblewrap is proven unusable */
    SANDBOX_BWRAP,  /* bubblewrap, or an error */
    SANDBOX_RLIMITS /* the fallback, as asked (AGENTFLOW_SANDBOX=rlimits, tests) */
};

struct sandbox_params {
    double timeout_s;      /* wall clock for the whole call, set-up retries included; default 10 */
    long cpu_s;            /* RLIMIT_CPU; default 10 */
    size_t mem_bytes;      /* RLIMIT_AS of each process; default 2 GiB */
    size_t tree_mem_bytes; /* cgroup memory.max of the whole tree, tmpfs files included;
                              default 2 GiB */
    size_t file_bytes;     /* RLIMIT_FSIZE; default 16 MiB */
    long n_files;          /* RLIMIT_NOFILE; default 64 */
    long n_procs;          /* RLIMIT_NPROC of the sandbox's uid, and the cgroup's pids.max;
                              default 256 */
    size_t output_bytes;   /* cap for stdout and for stderr; default 64 KiB */
    size_t tmpfs_bytes;    /* size of the working directory and of /dev/shm, each (bubblewrap);
                              default 64 MiB */
    const char *python;    /* default /usr/bin/python3 */
    const char *bwrap;     /* default /usr/bin/bwrap (tests use stand-ins) */
    const char *cgroup;    /* the cgroup v2 directory to make sandbox groups in; NULL: the
                              AGENTFLOW_CGROUP environment variable, else found (borrowed) */
    int no_seccomp;        /* run without the seccomp filter (tests and measurements only) */
};

struct sandbox_params sandbox_default_params(void);

struct sandbox_result {
    char *out;       /* captured stdout (owned) */
    char *err;       /* captured stderr (owned) */
    int exit_status; /* exit code, or -1 when killed by a signal */
    int term_signal; /* the signal that ended it, or 0 */
    int timed_out;
    int attempts; /* runs started: 1, more after a busy host or a fallback */
    double duration_ms;
    const char *mode;    /* "bubblewrap+seccomp" or "rlimits+seccomp"; without the filter
                            (no_seccomp) "bubblewrap" or "rlimits" (static string) */
    const char *limits;  /* "cgroup": memory and processes capped for the tree; "process":
                            rlimits only, per process (static string) */
    char fallback[256];  /* why SANDBOX_AUTO ran the fallback; "" when it did not */
    char no_cgroup[256]; /* why limits is "process"; "" otherwise */
};

void sandbox_result_deinit(struct sandbox_result *r);

/* Runs print('ok') under bubblewrap (python: NULL for the default). Returns 1 when it works,
 * 0 when bubblewrap is proven unusable here (missing, or a set-up error that does not pass;
 * `why` says which), -1 when it could not tell (a busy host, a time-out). why may be NULL. */
int sandbox_bwrap_works(const char *python, char *why, size_t whylen);

/* Runs `code` (a C string: the caller refuses code with NUL bytes) with `python -I -c`. Fills
 * *r; returns 0 when the program ran (whatever its exit status) or the deadline passed,
 * AF_ETOOBIG for code over 100 KB, AF_EIO when the sandbox could not be set up (the seccomp
 * filter and a cgroup named by params or AGENTFLOW_CGROUP included: a run never goes ahead
 * without what it was promised) or bubblewrap stayed busy until the deadline. err gets the
 * message. */
AF_NODISCARD int sandbox_run_python(const char *code, const struct sandbox_params *p,
                                    enum sandbox_mode mode, struct sandbox_result *r, char *err,
                                    size_t errlen);

#endif
