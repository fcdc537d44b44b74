/*
 * flow_overhead.c - how much the flow costs outside the LLM calls, and how well concurrent
 * flows overlap their waits.
 *
 * A loopback OpenAI-compatible server (tests/support/fake_server, in a child process so its
 * CPU is not counted) answers every call after a fixed delay with replies that drive a
 * three-step solve. We measure:
 *   - CPU per step outside the LLM call: the solving thread's CPU time minus the CPU time
 *     spent inside af_llm_chat (HTTP client included), divided by steps; and the whole
 *     process's CPU per step, HTTP client included, for reference;
 *   - throughput at concurrency 1, 8 and 64, as LLM calls per second against the ideal
 *     concurrency / delay.
 *
 * Usage: flow_overhead [--delay-ms 50] [--queries-per-flow N]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentflow/flow.h"
#include "core/clock.h"
#include "support/flow_backend.h"

struct timed_llm {
    struct af_llm *inner;
    pthread_mutex_t mu;
    double cpu_in_chat_ms; /* summed over threads */
    long calls;
};

static int timed_chat(void *self, const struct af_llm_request *req, struct af_llm_reply *reply)
{
    struct timed_llm *t = self;
    double c0 = af_clock_thread_cpu_ms();
    int rc = af_llm_chat(t->inner, req, reply);
    double dc = af_clock_thread_cpu_ms() - c0;
    pthread_mutex_lock(&t->mu);
    t->cpu_in_chat_ms += dc;
    t->calls++;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

static void timed_free(void *self)
{
    (void)self; /* owned by main */
}

static const struct af_llm_ops timed_ops = {
    .kind = "timed", .chat = timed_chat, .free = timed_free};

struct job {
    const struct af_flow_params *p;
    int n_queries;
    long steps;
    double flow_cpu_ms; /* thread CPU of the solves */
    int failures;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    double c0 = af_clock_thread_cpu_ms();
    for (int i = 0; i < j->n_queries; i++) {
        struct af_flow_result r;
        if (af_flow_solve(j->p, NULL, "What is 6 times 7?", &r) != AF_OK || !r.answer ||
            strcmp(r.answer, "42") != 0)
            j->failures++;
        j->steps += r.steps;
        af_flow_result_deinit(&r);
    }
    j->flow_cpu_ms = af_clock_thread_cpu_ms() - c0;
    return NULL;
}

static double process_cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static int run_level(struct af_flow_params *p, struct timed_llm *t, int conc, int nq,
                     double delay_ms)
{
    struct job *jobs = calloc((size_t)conc, sizeof *jobs);
    pthread_t *th = calloc((size_t)conc, sizeof *th);
    t->calls = 0;
    t->cpu_in_chat_ms = 0;
    double w0 = af_clock_ms(), pc0 = process_cpu_ms();
    for (int i = 0; i < conc; i++) {
        jobs[i] = (struct job){.p = p, .n_queries = nq};
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    }
    long steps = 0;
    int fails = 0;
    double flow_cpu = 0;
    for (int i = 0; i < conc; i++) {
        pthread_join(th[i], NULL);
        steps += jobs[i].steps;
        fails += jobs[i].failures;
        flow_cpu += jobs[i].flow_cpu_ms;
    }
    double wall = af_clock_ms() - w0, pcpu = process_cpu_ms() - pc0;
    double calls_per_s = (double)t->calls / (wall / 1e3), ideal = conc / (delay_ms / 1e3);
    printf("concurrency %3d: %4ld steps, %5ld LLM calls in %7.1f ms | %7.1f steps/s | %7.1f "
           "calls/s = %5.1f%% of ideal %.0f | flow CPU/step %.3f ms | process CPU/step %.3f ms"
           "%s\n",
           conc, steps, t->calls, wall, (double)steps / (wall / 1e3), calls_per_s,
           100.0 * calls_per_s / ideal, ideal, (flow_cpu - t->cpu_in_chat_ms) / (double)steps,
           pcpu / (double)steps, fails ? " (FAILURES)" : "");
    free(jobs);
    free(th);
    return fails;
}

int main(int argc, char **argv)
{
    int delay_ms = 50, nq = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--delay-ms"))
            delay_ms = (int)strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--queries-per-flow"))
            nq = (int)strtol(argv[i + 1], NULL, 10);
    }
    char url[256];
    pid_t server = flow_backend_spawn(delay_ms, url, sizeof url);
    if (server < 0) {
        fprintf(stderr, "flow_overhead: cannot start the fake server\n");
        return 1;
    }
    char err[512];
    struct af_llm_openai_params op = af_llm_openai_default_params();
    op.base_url = url;
    op.model = "bench";
    struct timed_llm t = {.inner = af_llm_openai_new(&op, err, sizeof err)};
    pthread_mutex_init(&t.mu, NULL);
    struct af_llm *llm = af_llm_new_custom(&timed_ops, &t);
    struct af_tool_registry *reg = af_tool_registry_new();
    if (!t.inner || af_tool_registry_add_builtins(reg, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "flow_overhead: %s\n", err);
        kill(server, SIGKILL);
        return 1;
    }
    struct af_flow_params p = af_flow_default_params();
    for (int i = 0; i < AF_N_SLOTS; i++)
        p.slots[i].llm = llm;
    p.tools = reg;
    printf("flow_overhead: server delay %d ms, %s, 3 steps and 14 LLM calls per query\n", delay_ms,
           url);
    int fails = 0;
    static const int levels[] = {1, 8, 64};
    for (size_t i = 0; i < 3; i++)
        fails += run_level(&p, &t, levels[i], nq ? nq : (levels[i] == 1 ? 10 : 4), delay_ms);
    af_llm_free(llm);
    af_llm_free(t.inner);
    af_tool_registry_free(reg);
    kill(server, SIGKILL);
    waitpid(server, NULL, 0);
    return fails ? 1 : 0;
}
