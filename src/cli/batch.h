/*
 * batch.h - what every command that runs the flow shares: the engine, flow and cache options
 * of `run` and `eval run` (parsing, help text, config layering), the run context (run_ctx),
 * and `agentflow run --batch`.
 */
#ifndef AF_CLI_BATCH_H
#define AF_CLI_BATCH_H

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "agentflow/flow.h"
#include "agentflow/llm.h"
#include "cli/config.h"

/* --- Shared options ------------------------------------------------------------------- */
/* Option codes of the shared options lie in [RUN_OPT_BASE, RUN_OPT_END); a command numbers
 * its own long options from RUN_OPT_END. */
enum { RUN_OPT_BASE = 256, RUN_OPT_END = RUN_OPT_BASE + 64 };

struct run_args {
    const char *config_file;
    json_t *flags; /* flag values as config keys, applied last (owned) */
    const char *slot_url[AF_N_SLOTS], *slot_model[AF_N_SLOTS];
    const char *cache_path; /* --cache FILE */
    int no_cache;           /* --no-cache */
    int cache_all;          /* --cache-all: also cache sampled calls */
    /* The URL of the slots that the config, the environment and the flags leave empty, ahead
     * of the embedded model (train grpo: its base model); NULL for none. Not owned. */
    const char *default_url;
};

void run_args_init(struct run_args *a);
void run_args_deinit(struct run_args *a);

/* A getopt_long table: the shared options followed by `extra` (terminated by a zero entry).
 * Owned by the caller: free(). */
struct option *run_opts_merge(const struct option *extra);

/* Handles one shared option code `o` with its argument. Returns 1 when handled, 0 when `o` is
 * not a shared option, -1 on a bad value (the message, prefixed by `cmd`, is printed). */
int run_args_handle(struct run_args *a, const char *cmd, int o, const char *arg);

/* Parses a number in [lo, hi]; prints "CMD: --OPT 'S' must be ..." and returns -1 if not. */
int run_parse_number(const char *cmd, const char *opt, const char *s, double lo, double hi,
                     double *out);

/* Prints the help of the shared options (engines, flow, cache). */
void run_common_usage(FILE *f);

/* Layers: defaults < config file < environment < flags. Prints the reason (prefixed by cmd)
 * and returns an exit code. */
int run_build_config(const struct run_args *a, const char *cmd, struct run_config *cfg);

/* Slots left without a URL get the embedded model (models/agentflow-world.gguf beside the
 * build folder, or $AGENTFLOW_EMBEDDED_MODEL) when it exists, with the compact prompts, the
 * world's tools and its passage index ($AGENTFLOW_WORLD_DIR, default build/world, built on
 * first use). Called by run_build_config; prints one line unless quiet. Returns an exit code. */
int run_apply_embedded(struct run_config *cfg, const char *cmd, int quiet);

/* --- Run context ---------------------------------------------------------------------- */
struct run_ctx {
    struct backends be;
    struct af_tool_registry *tools;
    struct af_prompts *prompts;
    struct af_trace *trace;
    struct af_flow_params params;      /* points into the members above and into the config */
    struct af_llm_cache *cache;        /* NULL unless run_ctx_enable_cache */
    struct af_llm *cached[AF_N_SLOTS]; /* cache decorators, one per distinct back-end */
    size_t n_cached;
};

/* Opens back-ends, tools, prompts and the trace named by cfg; prints the reason and returns
 * an exit code on failure. The config must outlive the context. */
int run_ctx_open(struct run_ctx *rc, const struct run_config *cfg);
void run_ctx_close(struct run_ctx *rc);
/* CLI_OK when every trace record so far was written (or there is no trace); else prints the
 * first failure and the count of lost records and returns CLI_EINPUT. */
int run_trace_check(struct run_ctx *rc);

/* Puts the response cache file `path` in front of every slot's back-end (flags: 0 = greedy
 * calls only, or AF_LLM_CACHE_ALL). Returns AF_OK or AF_EIO with err naming the file. */
int run_ctx_enable_cache(struct run_ctx *rc, const char *path, int flags, char *err, size_t errlen);

/* Runs every {"id","query"} line of in_path not yet in out_path, `concurrency` at a time, and
 * appends one fsync'd result line per finished item. Returns an exit code: 0 when all items
 * are done, 3 when a back-end error left some undone (they are not written, so a rerun retries
 * them), 4 for a bad input file. */
int batch_run(struct run_ctx *rc, const char *in_path, const char *out_path, int concurrency,
              int quiet);

#endif
