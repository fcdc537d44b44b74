/*
 * batch.h - everything a run needs at hand (run_ctx), and `agentflow run --batch`.
 */
#ifndef AF_CLI_BATCH_H
#define AF_CLI_BATCH_H

#include "agentflow/flow.h"
#include "cli/config.h"

struct run_ctx {
    struct backends be;
    struct af_tool_registry *tools;
    struct af_prompts *prompts;
    struct af_trace *trace;
    struct af_flow_params params; /* points into the members above and into the config */
};

/* Opens back-ends, tools, prompts and the trace named by cfg; prints the reason and returns
 * an exit code on failure. The config must outlive the context. */
int run_ctx_open(struct run_ctx *rc, const struct run_config *cfg);
void run_ctx_close(struct run_ctx *rc);

/* Runs every {"id","query"} line of in_path not yet in out_path, `concurrency` at a time, and
 * appends one fsync'd result line per finished item. Returns an exit code: 0 when all items
 * are done, 3 when a back-end error left some undone (they are not written, so a rerun retries
 * them), 4 for a bad input file. */
int batch_run(struct run_ctx *rc, const char *in_path, const char *out_path, int concurrency,
              int quiet);

#endif
