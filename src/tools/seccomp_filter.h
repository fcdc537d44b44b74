/*
 * seccomp_filter.h - the Python sandbox's seccomp deny list (private to tools/).
 *
 * A deny list in the spirit of Docker's default profile and Flatpak's: everything is allowed
 * except the syscalls that create or enter namespaces, mount, trace other processes, load
 * kernel code, or reach the kernel's riskiest interfaces (bpf, perf, userfaultfd, keyrings,
 * io_uring), and kill(-1, ...). A refused call fails with EPERM (clone3 with ENOSYS, so that glibc
 * falls back to clone, whose flags the filter can see); nothing is killed, so Python reports the
 * error. Syscalls of another ABI (32-bit int 0x80 and x32 on x86_64) fail with EPERM as a whole:
 * the list names native syscall numbers only. The list and the reasons are in README.md.
 *
 * The filter is compiled with libseccomp in the parent, to classic BPF in memory and in a
 * sealed memfd: bubblewrap reads the memfd (--seccomp FD); the rlimits fallback installs the
 * in-memory program in the forked child with seccomp_filter_install(), which makes only
 * async-signal-safe calls. Safe from any thread (one struct per caller).
 */
#ifndef AF_TOOLS_SECCOMP_FILTER_H
#define AF_TOOLS_SECCOMP_FILTER_H

#include <stddef.h>

#include "agentflow/err.h"

struct seccomp_filter {
    void *insns;    /* struct sock_filter[n_insns] (owned) */
    size_t n_insns; /* BPF instructions */
    int fd;         /* sealed memfd holding the same program at offset 0, >= 3, O_CLOEXEC; -1 */
};

/* Compiles the deny list for the native architecture into *f (reset first). Returns 0, AF_EIO
 * when libseccomp or the memfd fails (message in err). Free with seccomp_filter_deinit(), also
 * after a failure. */
AF_NODISCARD int seccomp_filter_build(struct seccomp_filter *f, char *err, size_t errlen);

/* Frees the program and closes the memfd. Accepts NULL and a zeroed struct. */
void seccomp_filter_deinit(struct seccomp_filter *f);

/* In a forked child, just before exec: sets PR_SET_NO_NEW_PRIVS and installs the filter for
 * this thread and what it execs. Async-signal-safe. Returns 0, or -1 with errno set. */
int seccomp_filter_install(const struct seccomp_filter *f);

#endif
