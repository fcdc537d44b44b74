/*
 * seccomp_filter.c - the sandbox's seccomp deny list, compiled with libseccomp (see
 * seccomp_filter.h; README.md has the list and the reasons).
 *
 * Argument rules compare the 64-bit register while the kernel reads some of these arguments
 * as 32-bit ints (ioctl's request, personality's persona): ioctl is masked to its low 32
 * bits, so TIOCSTI | 1 << 32 is refused as TIOCSTI; personality is refused unless the whole
 * register equals a safe persona, so high bits cannot smuggle a dangerous one past.
 */
#include "tools/seccomp_filter.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errf.h"
#include "core/xalloc.h"

#define MAX_FILTER_BYTES (64u << 10) /* BPF_MAXINSNS (4096) instructions of 8 bytes is 32 KiB */

/* Refused outright. Names absent on this architecture are skipped (umount on x86_64). */
static const char *const DENIED[] = {
    /* namespaces: nested user namespaces are the kernel's most exploited surface */
    "unshare", "setns",
    /* mounts and root changes, old and new mount API */
    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr",
    /* other processes' memory */
    "ptrace", "process_vm_readv", "process_vm_writev",
    /* kernel interfaces with a long record of exploits */
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "io_uring_setup",
    "io_uring_enter", "io_uring_register",
    /* kernel code, the machine itself */
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff",
    /* host-wide state */
    "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday", "clock_settime", "clock_adjtime"};

/* clone with any of these makes a new namespace (CLONE_NEWUSER ... CLONE_NEWCGROUP). */
static const uint64_t CLONE_NS_FLAGS[] = {0x10000000, 0x00020000, 0x20000000, 0x40000000,
                                          0x04000000, 0x08000000, 0x02000000};

/* Docker's default profile allows exactly PER_LINUX (0), PER_LINUX32 (8), UNAME26 (0x20000),
 * the last two combined, and 0xffffffff (a query); anything else (ADDR_NO_RANDOMIZE,
 * READ_IMPLIES_EXEC, ...) weakens the process's own hardening. libseccomp 2.5 takes one
 * comparison per argument in a rule, and rules are alternatives, so "none of five values" is
 * spelt as a union of bit patterns on the persona x:
 *   x > 0xffffffff;
 *   bit 31 clear and some bit b set outside the safe bits 3 and 17 (x & SAFE_BITS == x fails);
 *   bit 31 set and some bit c < 31 clear (x != 0xffffffff, and bit 31 is unsafe).
 * The four safe values below 2^31 have no bit outside SAFE_BITS; 0xffffffff has none clear. */
#define SAFE_PERSONA_BITS 0x20008u

static int deny_personas(scmp_filter_ctx ctx, uint32_t action)
{
    const int nr = SCMP_SYS(personality);
    const uint64_t top = (uint64_t)1 << 31;
    if (seccomp_rule_add(ctx, action, nr, 1, SCMP_A0(SCMP_CMP_GT, 0xffffffffu, 0)) != 0)
        return -1;
    for (int b = 0; b < 31; b++) {
        uint64_t bit = (uint64_t)1 << b;
        if (!(bit & SAFE_PERSONA_BITS) &&
            seccomp_rule_add(ctx, action, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, bit | top, bit)))
            return -1;
        if (seccomp_rule_add(ctx, action, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, bit | top, top)))
            return -1;
    }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx, const char **what)
{
    const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
    for (size_t i = 0; i < sizeof DENIED / sizeof DENIED[0]; i++) {
        int nr = seccomp_syscall_resolve_name(DENIED[i]);
        *what = DENIED[i];
        if (nr == __NR_SCMP_ERROR)
            continue;
        if (seccomp_rule_add(ctx, eperm, nr, 0) != 0)
            return -1;
    }
    *what = "clone";
    for (size_t i = 0; i < sizeof CLONE_NS_FLAGS / sizeof CLONE_NS_FLAGS[0]; i++) {
        uint64_t f = CLONE_NS_FLAGS[i];
        if (seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, f, f)))
            return -1;
    }
    /* clone3 passes its flags in memory, out of the filter's sight: ENOSYS, as Docker and
     * Flatpak do, and glibc retries with clone. */
    *what = "clone3";
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0)
        return -1;
    *what = "personality";
    if (deny_personas(ctx, eperm) != 0)
        return -1;
    /* TIOCSTI pushes bytes into a terminal's input (commands typed for the user); TIOCLINUX
     * does the same through the console's selection. */
    *what = "ioctl";
    static const uint64_t tty[] = {TIOCSTI, TIOCLINUX};
    for (size_t i = 0; i < 2; i++)
        if (seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
                             SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, tty[i])) != 0)
            return -1;
    /* kill(-1, ...) signals every process the caller may signal. A sandbox started as root
     * has a uid of its own, but one started by another user shares that user's uid with the
     * caller and its other sandboxes. The kernel reads the pid as an int: the low 32 bits. */
    *what = "kill";
    if (seccomp_rule_add(ctx, eperm, SCMP_SYS(kill), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, 0xffffffffu)) != 0)
        return -1;
    return 0;
}

/* A memfd of the program, sealed so that nothing can change it between the parent and bwrap,
 * and kept off fds 0-2, which the child's stdio takes. */
static int export_memfd(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    int fd = memfd_create("agentflow-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        af_errf(err, errlen, "seccomp: memfd_create: %s", strerror(errno));
        return -1;
    }
    if (fd < 3) {
        int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        close(fd);
        fd = high;
    }
    int rc = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
    if (rc != 0) {
        af_errf(err, errlen, "seccomp: cannot export the filter: %s", strerror(-rc));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0 ||
        lseek(fd, 0, SEEK_SET) != 0) {
        af_errf(err, errlen, "seccomp: cannot seal the filter: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads the exported program back for the fallback's own prctl. */
static int read_back(struct seccomp_filter *f, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(f->fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size > MAX_FILTER_BYTES ||
        st.st_size % (off_t)sizeof(struct sock_filter) != 0) {
        af_errf(err, errlen, "seccomp: the exported filter has an odd size");
        return -1;
    }
    size_t n = (size_t)st.st_size;
    f->insns = af_xmalloc(n);
    if (pread(f->fd, f->insns, n, 0) != (ssize_t)n) {
        af_errf(err, errlen, "seccomp: cannot read the filter back: %s", strerror(errno));
        return -1;
    }
    f->n_insns = n / sizeof(struct sock_filter);
    return 0;
}

int seccomp_filter_build(struct seccomp_filter *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int rc = AF_EIO;
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    const char *what = "init";
    if (!ctx) {
        af_errf(err, errlen, "seccomp: seccomp_init failed");
        return AF_EIO;
    }
    /* A binary tree over syscall numbers (libseccomp >= 2.5): fewer compares per syscall. */
    (void)seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
    /* A foreign ABI would see none of the native numbers below: refuse it whole. */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(EPERM)) != 0 ||
        add_rules(ctx, &what) != 0) {
        af_errf(err, errlen, "seccomp: cannot add the rule for %s", what);
        goto out;
    }
    f->fd = export_memfd(ctx, err, errlen);
    if (f->fd < 0 || read_back(f, err, errlen) != 0)
        goto out;
    rc = AF_OK;
out:
    seccomp_release(ctx);
    return rc;
}

void seccomp_filter_deinit(struct seccomp_filter *f)
{
    if (!f)
        return;
    free(f->insns);
    if (f->fd > 2)
        close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int seccomp_filter_install(const struct seccomp_filter *f)
{
    if (!f->insns || f->n_insns == 0 || f->n_insns > BPF_MAXINSNS) {
        errno = EINVAL;
        return -1;
    }
    struct sock_fprog prog = {.len = (unsigned short)f->n_insns, .filter = f->insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}
