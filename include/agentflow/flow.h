/*
 * flow.h - the AgentFlow solver: query analysis, then planner -> executor -> tool -> verifier
 * turns over an evolving memory, then the solution generator.
 *
 * af_flow_solve is stateless: every call builds a fresh memory, so one set of params can serve
 * many queries, from many threads at once (the back-ends and the registry are thread-safe;
 * the trace sink locks internally).
 */
#ifndef AGENTFLOW_FLOW_H
#define AGENTFLOW_FLOW_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"
#include "agentflow/llm.h"
#include "agentflow/tools.h"

/* The engine slots. TOOL is the back-end tools use for their own LLM calls. */
enum af_slot { AF_SLOT_PLANNER, AF_SLOT_FIXED, AF_SLOT_EXECUTOR, AF_SLOT_TOOL, AF_N_SLOTS };

/* Returns "planner", "fixed", "executor" or "tool". */
const char *af_slot_name(enum af_slot s);

struct af_flow_slot {
    struct af_llm *llm; /* borrowed; must outlive every solve */
    const char *model;  /* borrowed; NULL = back-end default */
    struct af_sampling sampling;
};

/* --- Prompt templates ----------------------------------------------------------------- */
struct af_prompts;

/* Loads the compiled-in templates, then overrides each one that has a file NAME.txt in `dir`
 * (may be NULL). Unknown files in dir are ignored; an unreadable one is an error naming it.
 * `dir` may instead name a compiled-in set: "compact" (prompts/compact/, short wording for
 * small models); a folder of that name is then written "./compact".
 * Owned by the caller: af_prompts_free. */
AF_NODISCARD int af_prompts_load(const char *dir, struct af_prompts **out, char *err,
                                 size_t errlen);
void af_prompts_free(struct af_prompts *p);
/* The template text for `name` (e.g. "next_step"), borrowed, or NULL. */
const char *af_prompts_get(const struct af_prompts *p, const char *name);

/* --- Trace sink ----------------------------------------------------------------------- */
struct af_trace;

/* Opens `path` for appending JSONL records (docs/TRACE.md). Owned: af_trace_close. */
AF_NODISCARD int af_trace_open(const char *path, struct af_trace **out, char *err, size_t errlen);
/* A sink that hands each record to fn instead of a file (a trainer collecting its rollouts).
 * fn is called with the record (borrowed for the call) under the sink's lock, so calls never
 * overlap. Owned: af_trace_close. */
typedef void (*af_trace_fn)(void *user, const json_t *record);
struct af_trace *af_trace_new_fn(af_trace_fn fn, void *user);
/* Appends one record (a JSON object; borrowed). Returns AF_EIO (or AF_ENOMEM) when it could
 * not be written; the first such failure stays on the handle. Safe from any thread. */
int af_trace_write(struct af_trace *t, const json_t *record);
/* AF_OK when every record so far was written; else the first failure's code, its message
 * (naming the file and the cause) in err, and the count of lost records in *n_lost (may be
 * NULL). Safe from any thread. */
int af_trace_status(struct af_trace *t, size_t *n_lost, char *err, size_t errlen);
void af_trace_close(struct af_trace *t);

/* --- Solving -------------------------------------------------------------------------- */
/* What the progress callback is told after each step. Borrowed for the call's duration. */
struct af_flow_step_info {
    const char *query_id;
    int step;
    const char *tool; /* may be "" when the planner failed */
    const char *sub_goal;
    const char *verdict; /* "STOP" or "CONTINUE" */
    double elapsed_ms;   /* since the solve began */
    double step_ms;
    int failed;           /* the step recorded an error */
    const char *reason;   /* when failed: why (the planner's unparsable reply, the tool's error,
                             ...), one line; else NULL */
    const char *command;  /* the executor's command ("" when none was written) */
    const json_t *result; /* the step's result as kept in memory (JSON), or NULL */
};

/* What the call callback is told before (done == 0) and after (done == 1) each LLM call of a
 * module, so that a front end can show progress inside a long call (a query analysis may
 * generate thousands of tokens). Borrowed for the call's duration. */
struct af_flow_call_info {
    const char *query_id;
    const char *module; /* "query_analysis", "planner", "executor", "verifier",
                           "direct_output", "final_output" */
    int step;           /* 0 before the first step */
    int max_tokens;     /* the call's token budget */
    int done;
    int64_t completion_tokens; /* when done; -1 when unknown */
    double call_ms;            /* when done */
    int err;                   /* when done: AF_OK or the back-end's error */
};

struct af_flow_params {
    int max_steps;           /* default 10 */
    double max_time_s;       /* default 300; bounds the turns, calls in flight included (one
                                cut off ends the turns); the final answer then gets at most
                                min(max_time_s, 60) s more */
    int max_parse_retries;   /* extra tries for an unparsable module output; default 1 */
    size_t max_result_chars; /* cap on each string in a tool result and on each module's
                                reply (bytes, cut at a UTF-8 boundary); default 100000 */
    double tool_timeout_s;   /* deadline handed to each tool call; default 120 */
    int detailed_answer;     /* also write the long final answer; default 0 */
    int render_python;       /* tool list, cards and memory in prompts as Python literals, as the
                                released AgentFlow renders them; default 0: JSON */
    struct af_flow_slot slots[AF_N_SLOTS];
    const struct af_tool_registry *tools; /* borrowed */
    const struct af_prompts *prompts;     /* borrowed; NULL = compiled-in */
    struct af_trace *trace;               /* borrowed; NULL = none */
    void (*on_step)(void *user, const struct af_flow_step_info *info);
    void (*on_call)(void *user, const struct af_flow_call_info *info); /* may be NULL */
    void *user; /* handed to on_step and on_call */
};

/* Defaults from the reference: 10 steps, 300 s; planner T=0.7, top_p 0.99, 2048 tokens,
 * frequency penalty 1.2; the other slots greedy. Back-ends and tools are left NULL. */
struct af_flow_params af_flow_default_params(void);

/* Everything a solve produced. Owned by the result: af_flow_result_deinit. */
struct af_flow_result {
    char *answer;        /* extracted final answer (last <answer>..</answer>, the Answer:
                            part, or the whole direct output); NULL if the solve failed early */
    char *direct_output; /* the generator's raw reply */
    char *final_output;  /* detailed answer, when requested */
    char *query_analysis;
    int steps;
    json_t *memory;  /* [{step, tool, sub_goal, command, result, ...}] */
    json_t *usage;   /* {module: {calls, prompt_tokens, completion_tokens}} */
    json_t *timings; /* {total_ms, query_analysis_ms, generator_ms, steps:[...]} */
    int err;         /* AF_OK, or the back-end error that stopped the solve */
    char *errmsg;
};

void af_flow_result_deinit(struct af_flow_result *r);

/* Solves one query. query_id (may be NULL) tags trace records. Fills *out in every case;
 * returns out->err: AF_OK, or AF_EBACKEND/AF_ETIMEOUT/AF_EIO when a module's back-end failed
 * (memory and usage up to that point are kept). Safe from any thread. */
AF_NODISCARD int af_flow_solve(const struct af_flow_params *p, const char *query_id,
                               const char *query, struct af_flow_result *out);

/* The result as a JSON object {answer, direct_output, steps, memory, usage, timings, ...}.
 * Owned by the caller. */
json_t *af_flow_result_json(const struct af_flow_result *r);

#endif
