/*
 * sandbox_cgroup.c - a cgroup v2 group per sandbox run (see sandbox_cgroup.h).
 *
 * The found parent is used only as it is: this file never enables controllers in a group it
 * was not told to use (that would change the host's settings). A parent named by the caller
 * gets "+memory +pids" written to its cgroup.subtree_control when they are missing.
 */
#include "tools/sandbox_cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/errf.h"
#include "core/xalloc.h"

#define CGROUP2_MAGIC 0x63677270 /* CGROUP2_SUPER_MAGIC */
#define GROUP_PREFIX "af_sandbox_"

/* The first `cap - 1` bytes of NAME in the folder open as dfd; -1 when it cannot be read. */
static int read_at(int dfd, const char *name, char *out, size_t cap)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, out, cap - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return n < 0 ? -1 : 0;
}

/* Writes text to NAME in the folder open as dfd (made when missing: only a stand-in folder
 * lacks it). Returns 0, or -1 with errno. */
static int write_at(int dfd, const char *name, const char *text)
{
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

static int open_dir(const char *path)
{
    return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* 1 when the space-separated list holds word. */
static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

static int has_both(const char *list)
{
    return has_word(list, "memory") && has_word(list, "pids");
}

/* The caller's own cgroup v2 directory into out; 0, or -1 with why. */
static int own_group(char *out, size_t cap, char *why, size_t whylen)
{
    static const char *const mounts[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    const char *base = NULL;
    for (size_t i = 0; i < 2 && !base; i++) {
        struct statfs sf;
        if (statfs(mounts[i], &sf) == 0 && (unsigned long)sf.f_type == CGROUP2_MAGIC)
            base = mounts[i];
    }
    if (!base) {
        af_errf(why, whylen, "no cgroup v2 hierarchy is mounted");
        return -1;
    }
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            found = snprintf(out, cap, "%s%s", base, strcmp(line + 3, "/") == 0 ? "" : line + 3) <
                    (int)cap;
        }
    if (f)
        fclose(f);
    if (!found)
        af_errf(why, whylen, "this process has no cgroup v2 group");
    return found ? 0 : -1;
}

/* Kills and removes groups whose caller is gone (killed before it could). */
static void sweep_stale(const char *parent)
{
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char *end = NULL;
        if (strncmp(e->d_name, GROUP_PREFIX, strlen(GROUP_PREFIX)) != 0)
            continue;
        long pid = strtol(e->d_name + strlen(GROUP_PREFIX), &end, 10);
        if (pid <= 0 || *end != '_' || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 ||
            errno != ESRCH)
            continue;
        int g = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (g < 0)
            continue;
        (void)write_at(g, "cgroup.kill", "1");
        if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) != 0 && errno == ENOTEMPTY) {
            /* a stand-in folder: its files */
            static const char *const files[] = {"cgroup.kill", "cgroup.procs", "memory.max",
                                                "memory.swap.max", "pids.max"};
            for (size_t i = 0; i < 5; i++)
                unlinkat(g, files[i], 0);
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        }
        close(g);
    }
    if (d)
        closedir(d);
}

/* Checks (and, for a named parent, enables) the controllers. 0, or -1 with why. */
static int ready(const char *parent, int named, char *why, size_t whylen)
{
    char list[512];
    int dfd = open_dir(parent);
    if (dfd < 0 || read_at(dfd, "cgroup.subtree_control", list, sizeof list) != 0) {
        af_errf(why, whylen, "%s is not a cgroup v2 group: %s", parent, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    int rc = 0;
    if (has_both(list))
        goto out;
    rc = -1;
    if (!named) {
        af_errf(why, whylen,
                "the memory and pids controllers are not enabled for the children of %s "
                "(set AGENTFLOW_CGROUP to a delegated group)",
                parent);
    } else if (write_at(dfd, "cgroup.subtree_control", "+memory +pids") != 0) {
        af_errf(why, whylen,
                "cannot enable the memory and pids controllers in %s: %s (a group that holds "
                "processes cannot hand them to children)",
                parent, strerror(errno));
    } else {
        rc = 0;
    }
out:
    close(dfd);
    return rc;
}

int sandbox_cgroup_init(struct sandbox_cgroup *g, const char *parent, size_t mem_bytes,
                        long n_procs, char *why, size_t whylen)
{
    g->dir = NULL;
    g->procs_fd = g->kill_fd = -1;
    if (!parent) {
        const char *env = getenv("AGENTFLOW_CGROUP");
        parent = env && env[0] ? env : NULL;
    }
    char own[4096];
    int named = parent != NULL;
    if (!named && own_group(own, sizeof own, why, whylen) != 0)
        return 0;
    if (!named)
        parent = own;
    if (ready(parent, named, why, whylen) != 0)
        return named ? -1 : 0;
    sweep_stale(parent);
    size_t n = strlen(parent) + 64;
    g->dir = af_xmalloc(n);
    snprintf(g->dir, n, "%s/" GROUP_PREFIX "%ld_XXXXXX", parent, (long)getpid());
    if (!mkdtemp(g->dir)) {
        af_errf(why, whylen, "cannot make a cgroup under %s: %s", parent, strerror(errno));
        free(g->dir);
        g->dir = NULL;
        return named ? -1 : 0;
    }
    char mem[32], procs[32];
    snprintf(mem, sizeof mem, "%zu", mem_bytes);
    snprintf(procs, sizeof procs, "%ld", n_procs);
    int dfd = open_dir(g->dir);
    if (dfd < 0 || write_at(dfd, "memory.max", mem) != 0 || write_at(dfd, "pids.max", procs) != 0) {
        af_errf(why, whylen, "cannot set the limits of %s: %s", g->dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    (void)write_at(dfd, "memory.swap.max", "0"); /* absent without swap accounting */
    g->procs_fd = openat(dfd, "cgroup.procs", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    int e = errno;
    g->kill_fd = openat(dfd, "cgroup.kill", O_WRONLY | O_CREAT | O_CLOEXEC, 0644); /* 5.14 */
    close(dfd);
    if (g->procs_fd < 0) {
        af_errf(why, whylen, "cannot open %s/cgroup.procs: %s", g->dir, strerror(e));
        return -1;
    }
    return 1;
}

void sandbox_cgroup_deinit(struct sandbox_cgroup *g)
{
    if (!g)
        return;
    if (g->kill_fd >= 0) {
        ssize_t w = write(g->kill_fd, "1", 1); /* the supervisor did; this is for its failure */
        (void)w;
        close(g->kill_fd);
    }
    if (g->procs_fd >= 0)
        close(g->procs_fd);
    /* An emptied group may take a moment to count as unpopulated. */
    for (int i = 0; g->dir && rmdir(g->dir) != 0 && errno == EBUSY && i < 200; i++)
        af_clock_sleep_ms(5);
    free(g->dir);
    g->dir = NULL;
    g->procs_fd = g->kill_fd = -1;
}
