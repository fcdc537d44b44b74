/*
 * flow_backend.c - the fixed-latency back-end shared by bench/flow_overhead and bench/serve.
 */
#include "support/flow_backend.h"

#include <string.h>
#include <unistd.h>

#include "support/fake_server.h"

static void add_rules(struct fake_server *fs)
{
    fake_server_add_rule(fs, "Give the final answer", "**Process Summary:** done.\n**Answer:** 42");
    fake_server_add_rule(fs, "Action Step 3", "Enough.\nConclusion: STOP");
    fake_server_add_rule(fs, "Judge whether the work", "More.\nConclusion: CONTINUE");
    fake_server_add_rule(fs, "Before any tool is used", "Concise Summary: multiply.");
    fake_server_add_rule(fs, "You decide the single next action",
                         "Justification: need it\nContext: 6 times 7\nSub-Goal: compute 6*7\n"
                         "Tool Name: Generalist_Solution_Generator_Tool");
    fake_server_add_rule(fs, "Write the Python call",
                         "Generated Command:\n```python\nexecution = tool.execute(query=\"What "
                         "is 6 * 7?\")\n```");
    fake_server_add_rule(fs, "What is 6 * 7?", "42");
}

pid_t flow_backend_spawn(int delay_ms, char *url, size_t urllen)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        struct fake_server *fs = fake_server_start();
        if (!fs)
            _exit(1);
        fake_server_set_delay(fs, delay_ms);
        add_rules(fs);
        const char *u = fake_server_url(fs);
        if (write(fds[1], u, strlen(u) + 1) < 0)
            _exit(1);
        close(fds[1]);
        for (;;)
            pause();
    }
    close(fds[1]);
    ssize_t n = read(fds[0], url, urllen - 1);
    close(fds[0]);
    if (n <= 0)
        return -1;
    url[n] = '\0';
    return pid;
}
