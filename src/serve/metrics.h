/*
 * metrics.h - the counters behind GET /metrics, written in the Prometheus text format.
 *
 * Per-label counters (HTTP route and status, LLM module, tool) live in small tables; past
 * METRICS_MAX_LABELS distinct names a new one is counted under "other", so a client cannot
 * grow them without bound. Safe from any thread (one mutex).
 */
#ifndef AF_SERVE_METRICS_H
#define AF_SERVE_METRICS_H

#include <stdint.h>

#include "core/buf.h"

struct metrics;

/* Owned by the caller: metrics_free. */
struct metrics *metrics_new(void);
void metrics_free(struct metrics *m);

void metrics_http(struct metrics *m, const char *route, unsigned status);
void metrics_llm(struct metrics *m, const char *module, int64_t prompt_tokens,
                 int64_t completion_tokens);
void metrics_tool(struct metrics *m, const char *tool, int failed);
/* One finished flow: outcome "ok", "error" or "cancelled", and its solve time. */
void metrics_flow(struct metrics *m, const char *outcome, double seconds);
/* The mean solve time so far in seconds (0 before any). */
double metrics_mean_solve_s(struct metrics *m);

/* Appends every metric, with the running and queued gauges given, to out. */
void metrics_render(struct metrics *m, int running, int queued, struct af_buf *out);

#endif
