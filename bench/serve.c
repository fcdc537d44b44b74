/*
 * serve.c - `agentflow serve` under load: many clients ask chat completions at once for a
 * fixed time, against a back-end with a fixed latency, and we report requests per second
 * against the ideal rate, and the p50 / p99 latency.
 *
 * The back-end is the loopback OpenAI-compatible fake server (tests/support/fake_server) in a
 * child process, answering every call after --delay-ms with replies that drive a three-step
 * solve (14 LLM calls). The server runs in this process with one flow slot per client; the
 * clients are threads with libcurl. A request's ideal latency is calls x delay, so the ideal
 * rate is clients / (calls x delay): what is missing from it is the cost of the server, the
 * flow and the clients, and of their sharing the CPUs.
 *
 * Usage: serve [--clients 64] [--seconds 30] [--delay-ms 50] [--stream 0|1]
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentflow/flow.h"
#include "core/clock.h"
#include "serve/serve.h"
#include "support/flow_backend.h"
#include "support/http_client.h"

struct client {
    const char *url;
    int stream;
    double end_ms;
    double *lat_ms; /* owned */
    size_t n, cap;
    long errors;
    double start_ms, last_done_ms;
    pthread_t th;
};

static void *client_main(void *arg)
{
    struct client *c = arg;
    const char *body = c->stream ? "{\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":"
                                   "\"What is 6 times 7?\"}]}"
                                 : "{\"messages\":[{\"role\":\"user\",\"content\":\"What is 6 "
                                   "times 7?\"}]}";
    while (af_clock_ms() < c->end_ms) {
        struct http_req rq = {.method = "POST", .url = c->url, .body = body, .timeout_s = 300};
        struct http_res r;
        double t0 = af_clock_ms();
        int rc = http_do(&rq, &r);
        double dt = af_clock_ms() - t0;
        if (rc != 0 || r.status != 200 || !strstr(r.body, "**Answer:** 42")) {
            c->errors++;
        } else {
            if (c->n == c->cap) {
                c->cap = c->cap ? 2 * c->cap : 256;
                c->lat_ms = realloc(c->lat_ms, c->cap * sizeof *c->lat_ms);
                if (!c->lat_ms)
                    abort();
            }
            c->lat_ms[c->n++] = dt;
            c->last_done_ms = t0 + dt;
        }
        http_res_deinit(&r);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The trace sink's calls never overlap (it locks), so a plain count will do. */
static void count_calls(void *user, const json_t *rec)
{
    const char *type = json_string_value(json_object_get(rec, "type"));
    if (type && strcmp(type, "llm") == 0)
        (*(long *)user)++;
}

static int report(struct client *cl, int n_clients, double wall_ms, int delay_ms, int stream,
                  long llm_calls)
{
    size_t total = 0;
    long errors = 0;
    double rate = 0; /* each client's requests over the time it ran them, summed */
    for (int i = 0; i < n_clients; i++) {
        total += cl[i].n;
        errors += cl[i].errors;
        if (cl[i].n)
            rate += (double)cl[i].n / ((cl[i].last_done_ms - cl[i].start_ms) / 1e3);
    }
    if (total == 0) {
        fprintf(stderr, "serve bench: no request succeeded (%ld errors)\n", errors);
        return 1;
    }
    double *all = malloc(total * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < n_clients; i++)
        for (size_t j = 0; j < cl[i].n; j++)
            all[k++] = cl[i].lat_ms[j];
    qsort(all, total, sizeof *all, cmp_double);
    double per_req = (double)llm_calls / (double)(total + (size_t)errors);
    double ideal = n_clients / (per_req * delay_ms / 1e3);
    printf("serve: %d clients, %s, back-end delay %d ms, %.1f LLM calls per request\n", n_clients,
           stream ? "streamed" : "plain", delay_ms, per_req);
    printf("  %zu requests in %.1f s, %ld errors\n", total, wall_ms / 1e3, errors);
    printf("  %.1f requests/s = %.1f%% of ideal %.1f\n", rate, 100.0 * rate / ideal, ideal);
    printf("  latency p50 %.0f ms, p99 %.0f ms (ideal %.0f ms)\n", all[total / 2],
           all[(size_t)((double)total * 0.99)], per_req * delay_ms);
    free(all);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    int n_clients = 64, seconds = 30, delay_ms = 50, stream = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = (int)strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--clients") && v > 0)
            n_clients = v;
        else if (!strcmp(argv[i], "--seconds") && v > 0)
            seconds = v;
        else if (!strcmp(argv[i], "--delay-ms") && v >= 0)
            delay_ms = v;
        else if (!strcmp(argv[i], "--stream"))
            stream = v != 0;
        else {
            fprintf(stderr, "usage: serve [--clients N] [--seconds S] [--delay-ms MS] "
                            "[--stream 0|1]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    http_client_global_init();
    char url[256], err[512], db[64];
    pid_t backend = flow_backend_spawn(delay_ms, url, sizeof url);
    if (backend < 0) {
        fprintf(stderr, "serve bench: cannot start the back-end\n");
        return 1;
    }
    struct af_llm_openai_params op = af_llm_openai_default_params();
    op.base_url = url;
    op.model = "bench";
    struct af_llm *llm = af_llm_openai_new(&op, err, sizeof err);
    struct af_tool_registry *reg = af_tool_registry_new();
    if (!llm || af_tool_registry_add_builtins(reg, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "serve bench: %s\n", err);
        kill(backend, SIGKILL);
        return 1;
    }
    long llm_calls = 0;
    struct af_trace *trace = af_trace_new_fn(count_calls, &llm_calls);
    struct af_flow_params fp = af_flow_default_params();
    for (int i = 0; i < AF_N_SLOTS; i++)
        fp.slots[i].llm = llm;
    fp.tools = reg;
    fp.trace = trace;
    snprintf(db, sizeof db, "/tmp/af_bench_serve_%d.db", (int)getpid());
    struct af_serve_params sp = af_serve_default_params();
    sp.port = 0;
    sp.max_concurrent = n_clients;
    sp.queue = n_clients;
    sp.db_path = db;
    sp.flow = &fp;
    struct af_serve *srv = NULL;
    int rc = 1;
    if (af_serve_start(&sp, &srv, err, sizeof err) != AF_OK) {
        fprintf(stderr, "serve bench: %s\n", err);
    } else {
        char curl[128];
        snprintf(curl, sizeof curl, "http://127.0.0.1:%d/v1/chat/completions", af_serve_port(srv));
        struct client *cl = calloc((size_t)n_clients, sizeof *cl);
        double t0 = af_clock_ms();
        for (int i = 0; i < n_clients; i++) {
            cl[i] = (struct client){
                .url = curl, .stream = stream, .start_ms = t0, .end_ms = t0 + seconds * 1e3};
            pthread_create(&cl[i].th, NULL, client_main, &cl[i]);
        }
        for (int i = 0; i < n_clients; i++)
            pthread_join(cl[i].th, NULL);
        double wall = af_clock_ms() - t0;
        rc = report(cl, n_clients, wall, delay_ms, stream, llm_calls);
        for (int i = 0; i < n_clients; i++)
            free(cl[i].lat_ms);
        free(cl);
    }
    af_serve_free(srv);
    af_trace_close(trace);
    af_tool_registry_free(reg);
    af_llm_free(llm);
    kill(backend, SIGKILL);
    waitpid(backend, NULL, 0);
    unlink(db);
    char side[96];
    snprintf(side, sizeof side, "%s-wal", db);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", db);
    unlink(side);
    return rc;
}
