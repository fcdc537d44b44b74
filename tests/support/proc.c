/*
 * proc.c - child-process helpers for the end-to-end tests.
 */
#include "support/proc.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fileio.h"
#include "core/xalloc.h"

const char *proc_agentflow_bin(void)
{
    const char *b = getenv("AGENTFLOW_BIN");
    return b && *b ? b : "build/release/agentflow";
}

static char *slurp_fd(int fd)
{
    size_t cap = 4096, n = 0;
    char *buf = af_xmalloc(cap);
    lseek(fd, 0, SEEK_SET);
    for (;;) {
        if (n + 1 >= cap)
            buf = af_xrealloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

static void child_exec(const char *const argv[], const char *const extra_env[], int out_fd,
                       int err_fd)
{
    /* exec wants mutable strings: give it copies (the child exits or execs right after). */
    size_t n = 0;
    while (argv[n])
        n++;
    char **args = calloc(n + 1, sizeof *args);
    for (size_t i = 0; i < n; i++)
        args[i] = strdup(argv[i]);
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, 0);
    for (size_t i = 0; extra_env && extra_env[i]; i++)
        putenv(strdup(extra_env[i]));
    execv(args[0], args);
    _exit(127);
}

int proc_run(const char *const argv[], const char *const extra_env[], double timeout_s,
             struct proc_result *r)
{
    memset(r, 0, sizeof *r);
    char out_tmpl[] = "/tmp/af_proc_out_XXXXXX", err_tmpl[] = "/tmp/af_proc_err_XXXXXX";
    int out_fd = mkstemp(out_tmpl), err_fd = mkstemp(err_tmpl);
    if (out_fd < 0 || err_fd < 0)
        return -1;
    unlink(out_tmpl);
    unlink(err_tmpl);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0)
        child_exec(argv, extra_env, out_fd, err_fd);
    double deadline = af_clock_ms() + timeout_s * 1000.0;
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (af_clock_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            break;
        }
        af_clock_sleep_ms(5);
    }
    r->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = slurp_fd(out_fd);
    r->err = slurp_fd(err_fd);
    close(out_fd);
    close(err_fd);
    return 0;
}

void proc_result_deinit(struct proc_result *r)
{
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

pid_t proc_spawn(const char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        child_exec(argv, NULL, devnull, devnull);
    }
    return pid;
}

size_t proc_count_lines(const char *path)
{
    char *data = NULL;
    size_t len = 0, n = 0;
    if (af_file_read(path, (size_t)1 << 30, &data, &len, NULL, 0) != 0)
        return 0;
    for (size_t i = 0; i < len; i++)
        n += data[i] == '\n';
    free(data);
    return n;
}
