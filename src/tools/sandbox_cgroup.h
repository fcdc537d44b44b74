/*
 * sandbox_cgroup.h - one cgroup v2 group per sandbox run, so that memory and processes are
 * capped for the whole tree rather than per process (private to the sandbox's files).
 *
 * The group is DIR/af_sandbox_<caller pid>_<n>, with memory.max, memory.swap.max 0 and
 * pids.max, where DIR is the parent group: the one named by the caller or by AGENTFLOW_CGROUP
 * (it must work, or the run is refused), else the caller's own cgroup v2 group when the memory
 * and pids controllers are enabled for its children or can be (a root cgroup, or a delegated
 * one without processes of its own). On a host where neither holds (cgroup v1 or hybrid
 * hierarchies, a group that is not delegated) sandboxes run with per-process rlimits only and
 * say why. Groups left by a killed caller are killed and removed by the next caller's first
 * run. Safe from any thread (one struct per run).
 */
#ifndef AF_TOOLS_SANDBOX_CGROUP_H
#define AF_TOOLS_SANDBOX_CGROUP_H

#include <stddef.h>

struct sandbox_cgroup {
    char *dir;    /* the run's group (owned), or NULL */
    int procs_fd; /* its cgroup.procs, open for writing, or -1 */
    int kill_fd;  /* its cgroup.kill (Linux 5.14), or -1 */
};

/* Makes the run's group under `parent` (NULL: AGENTFLOW_CGROUP, else found) with the limits
 * and opens its files. Returns 1 when made; 0 when no parent group could be found (why says
 * so; the run goes on with rlimits only); -1 when the named parent does not work or the group
 * cannot be made (why says so; the run must not go on). Free with sandbox_cgroup_deinit(). */
int sandbox_cgroup_init(struct sandbox_cgroup *g, const char *parent, size_t mem_bytes,
                        long n_procs, char *why, size_t whylen);

/* Kills what is left in the group, removes it, closes the files. Accepts a zeroed struct. */
void sandbox_cgroup_deinit(struct sandbox_cgroup *g);

#endif
