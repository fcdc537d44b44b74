/*
 * proc.h - test helper: run the agentflow CLI (or any program) as a child process, capturing
 * stdout and stderr, with a deadline. Used by the end-to-end tests.
 */
#ifndef AF_TEST_PROC_H
#define AF_TEST_PROC_H

#include <stddef.h>
#include <sys/types.h>

struct proc_result {
    int exit_code; /* exit status, or 128+signal */
    char *out;     /* malloc'd stdout */
    char *err;     /* malloc'd stderr */
};

/* The CLI under test: $AGENTFLOW_BIN, else build/release/agentflow. Borrowed. */
const char *proc_agentflow_bin(void);

/* Runs argv (argv[0] = program path, NULL-terminated) with extra environment entries
 * ("K=V", NULL-terminated, may be NULL), waits at most timeout_s seconds (then SIGKILL).
 * Returns 0 or -1 when it could not start. Free with proc_result_deinit. */
int proc_run(const char *const argv[], const char *const extra_env[], double timeout_s,
             struct proc_result *r);
void proc_result_deinit(struct proc_result *r);

/* Starts argv in the background with stdout/stderr sent to /dev/null; returns the pid. */
pid_t proc_spawn(const char *const argv[]);

/* Counts the lines of a file (0 when missing). */
size_t proc_count_lines(const char *path);

#endif
