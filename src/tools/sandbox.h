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
 * count, the uid of "nobody" when started as root, its own process group, a wall-clock
 * deadline that kills the whole tree, and stdout/stderr capped (cut out of the middle). A
 * supervisor process (a child subreaper) kills and reaps every descendant when the main
 * process exits, at the deadline, or when the caller dies.
 * Fallback when namespaces cannot be created: the same limits and filter without the
 * namespaces, in a fresh temporary directory; the result's `mode` says so. Safe from any
 * thread.
 */
#ifndef AF_TOOLS_SANDBOX_H
#define AF_TOOLS_SANDBOX_H

#include <stddef.h>

#include "agentflow/err.h"

struct sandbox_params {
    double timeout_s;    /* wall clock; default 10 */
    long cpu_s;          /* RLIMIT_CPU; default 10 */
    size_t mem_bytes;    /* RLIMIT_AS; default 2 GiB */
    size_t file_bytes;   /* RLIMIT_FSIZE; default 16 MiB */
    long n_files;        /* RLIMIT_NOFILE; default 64 */
    long n_procs;        /* RLIMIT_NPROC; default 64 */
    size_t output_bytes; /* cap for stdout and for stderr; default 64 KiB */
    size_t tmpfs_bytes;  /* size of the working directory and of /dev/shm, each (bubblewrap);
                            default 64 MiB */
    const char *python;  /* default /usr/bin/python3 */
    int no_bwrap;        /* force the fallback (tests) */
    int no_seccomp;      /* run without the seccomp filter (tests and measurements only) */
};

struct sandbox_params sandbox_default_params(void);

struct sandbox_result {
    char *out;       /* captured stdout (owned) */
    char *err;       /* captured stderr (owned) */
    int exit_status; /* exit code, or -1 when killed by a signal */
    int term_signal; /* the signal that ended it, or 0 */
    int timed_out;
    double duration_ms;
    const char *mode; /* "bubblewrap+seccomp" or "rlimits+seccomp"; without the filter
                         (no_seccomp) "bubblewrap" or "rlimits" (static string) */
};

void sandbox_result_deinit(struct sandbox_result *r);

/* 1 when bubblewrap can create its namespaces here (probed by running it once). */
int sandbox_bwrap_works(const char *python);

/* Runs `code` with `python -c`. Fills *r; returns 0 when the process ran (whatever its exit
 * status), AF_ETOOBIG for code over 100 KB, AF_EIO when it could not be started (the seccomp
 * filter included: a run never goes ahead without it unless no_seccomp is set). */
AF_NODISCARD int sandbox_run_python(const char *code, const struct sandbox_params *p, int use_bwrap,
                                    struct sandbox_result *r, char *err, size_t errlen);

#endif
