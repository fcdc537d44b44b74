/*
 * metrics.c - Prometheus counters for the server (see metrics.h).
 */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

#define METRICS_MAX_LABELS 128
#define N_BUCKETS 12

static const double bucket_s[N_BUCKETS] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

/* A table of counters keyed by one or two label values. */
struct entry {
    char *a, *b; /* owned label values; b may be NULL */
    uint64_t v[2];
};

struct table {
    struct entry *e;
    size_t n;
};

struct metrics {
    pthread_mutex_t mu;
    struct table http, llm, tool, flows;
    uint64_t buckets[N_BUCKETS];
    uint64_t solve_count;
    double solve_sum;
};

struct metrics *metrics_new(void)
{
    struct metrics *m = af_xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void table_free(struct table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        free(t->e[i].a);
        free(t->e[i].b);
    }
    free(t->e);
}

void metrics_free(struct metrics *m)
{
    if (!m)
        return;
    table_free(&m->http);
    table_free(&m->llm);
    table_free(&m->tool);
    table_free(&m->flows);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* The entry for (a, b), created when missing; "other" once the table is full. */
static struct entry *table_get(struct table *t, const char *a, const char *b)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->e[i].a, a) == 0 && (!b || strcmp(t->e[i].b, b) == 0))
            return &t->e[i];
    /* The last slot is kept for "other". */
    if (t->n + 1 >= METRICS_MAX_LABELS && strcmp(a, "other") != 0)
        return table_get(t, "other", b ? "other" : NULL);
    if (t->n % 16 == 0)
        t->e = af_xrealloc(t->e, (t->n + 16) * sizeof *t->e);
    struct entry *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->a = af_xstrdup(a);
    e->b = af_xstrdup(b);
    return e;
}

void metrics_http(struct metrics *m, const char *route, unsigned status)
{
    char code[16];
    snprintf(code, sizeof code, "%u", status);
    pthread_mutex_lock(&m->mu);
    table_get(&m->http, route, code)->v[0]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_llm(struct metrics *m, const char *module, int64_t prompt_tokens,
                 int64_t completion_tokens)
{
    pthread_mutex_lock(&m->mu);
    struct entry *e = table_get(&m->llm, module, NULL);
    e->v[0] += prompt_tokens > 0 ? (uint64_t)prompt_tokens : 0;
    e->v[1] += completion_tokens > 0 ? (uint64_t)completion_tokens : 0;
    table_get(&m->flows, "llm_calls", module)->v[0]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_tool(struct metrics *m, const char *tool, int failed)
{
    pthread_mutex_lock(&m->mu);
    struct entry *e = table_get(&m->tool, tool, NULL);
    e->v[0]++;
    e->v[1] += failed ? 1 : 0;
    pthread_mutex_unlock(&m->mu);
}

void metrics_flow(struct metrics *m, const char *outcome, double seconds)
{
    pthread_mutex_lock(&m->mu);
    table_get(&m->flows, "outcome", outcome)->v[0]++;
    for (int i = 0; i < N_BUCKETS; i++)
        if (seconds <= bucket_s[i])
            m->buckets[i]++;
    m->solve_count++;
    m->solve_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

double metrics_mean_solve_s(struct metrics *m)
{
    pthread_mutex_lock(&m->mu);
    double v = m->solve_count ? m->solve_sum / (double)m->solve_count : 0;
    pthread_mutex_unlock(&m->mu);
    return v;
}

/* A label value with \, " and newlines escaped, as the text format wants. */
static void put_label(struct af_buf *out, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            (void)af_buf_putc(out, '\\');
        if (*s == '\n')
            (void)af_buf_puts(out, "\\n");
        else
            (void)af_buf_putc(out, *s);
    }
}

static void put_one(struct af_buf *out, const char *name, const char *k1, const char *v1,
                    const char *k2, const char *v2, uint64_t n)
{
    (void)af_buf_printf(out, "%s{%s=\"", name, k1);
    put_label(out, v1);
    if (k2) {
        (void)af_buf_printf(out, "\",%s=\"", k2);
        put_label(out, v2);
    }
    (void)af_buf_printf(out, "\"} %llu\n", (unsigned long long)n);
}

static void head(struct af_buf *out, const char *name, const char *type, const char *help)
{
    (void)af_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_tables(struct metrics *m, struct af_buf *out)
{
    head(out, "agentflow_http_requests_total", "counter", "HTTP requests by route and status.");
    for (size_t i = 0; i < m->http.n; i++)
        put_one(out, "agentflow_http_requests_total", "route", m->http.e[i].a, "code",
                m->http.e[i].b, m->http.e[i].v[0]);
    head(out, "agentflow_flows_total", "counter", "Finished flows by outcome.");
    for (size_t i = 0; i < m->flows.n; i++)
        if (strcmp(m->flows.e[i].a, "outcome") == 0)
            put_one(out, "agentflow_flows_total", "outcome", m->flows.e[i].b, NULL, NULL,
                    m->flows.e[i].v[0]);
    head(out, "agentflow_llm_calls_total", "counter", "LLM calls by flow module.");
    for (size_t i = 0; i < m->flows.n; i++)
        if (strcmp(m->flows.e[i].a, "llm_calls") == 0)
            put_one(out, "agentflow_llm_calls_total", "module", m->flows.e[i].b, NULL, NULL,
                    m->flows.e[i].v[0]);
    head(out, "agentflow_llm_tokens_total", "counter", "LLM tokens by module and kind.");
    for (size_t i = 0; i < m->llm.n; i++) {
        put_one(out, "agentflow_llm_tokens_total", "module", m->llm.e[i].a, "kind", "prompt",
                m->llm.e[i].v[0]);
        put_one(out, "agentflow_llm_tokens_total", "module", m->llm.e[i].a, "kind", "completion",
                m->llm.e[i].v[1]);
    }
    head(out, "agentflow_tool_calls_total", "counter", "Tool calls by tool.");
    for (size_t i = 0; i < m->tool.n; i++)
        put_one(out, "agentflow_tool_calls_total", "tool", m->tool.e[i].a, NULL, NULL,
                m->tool.e[i].v[0]);
    head(out, "agentflow_tool_errors_total", "counter", "Tool calls that failed, by tool.");
    for (size_t i = 0; i < m->tool.n; i++)
        put_one(out, "agentflow_tool_errors_total", "tool", m->tool.e[i].a, NULL, NULL,
                m->tool.e[i].v[1]);
}

void metrics_render(struct metrics *m, int running, int queued, struct af_buf *out)
{
    pthread_mutex_lock(&m->mu);
    head(out, "agentflow_flows_running", "gauge", "Flows running now.");
    (void)af_buf_printf(out, "agentflow_flows_running %d\n", running);
    head(out, "agentflow_queue_length", "gauge", "Flows waiting for a worker.");
    (void)af_buf_printf(out, "agentflow_queue_length %d\n", queued);
    render_tables(m, out);
    head(out, "agentflow_solve_seconds", "histogram", "Time to solve one query.");
    for (int i = 0; i < N_BUCKETS; i++)
        (void)af_buf_printf(out, "agentflow_solve_seconds_bucket{le=\"%g\"} %llu\n", bucket_s[i],
                            (unsigned long long)m->buckets[i]);
    (void)af_buf_printf(out, "agentflow_solve_seconds_bucket{le=\"+Inf\"} %llu\n",
                        (unsigned long long)m->solve_count);
    (void)af_buf_printf(out, "agentflow_solve_seconds_sum %.6f\n", m->solve_sum);
    (void)af_buf_printf(out, "agentflow_solve_seconds_count %llu\n",
                        (unsigned long long)m->solve_count);
    pthread_mutex_unlock(&m->mu);
}
