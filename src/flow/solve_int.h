/*
 * solve_int.h - state of one solve and the helpers shared by solver.c and solve_io.c.
 */
#ifndef AF_FLOW_SOLVE_INT_H
#define AF_FLOW_SOLVE_INT_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/flow.h"
#include "flow/memory.h"

struct solve_ctx {
    const struct af_flow_params *p;
    const char *qid;
    const char *query;
    struct af_flow_result *out;
    struct memory mem;
    json_t *step_timings;   /* owned until finish */
    char *available_tools;  /* JSON list of names */
    char *toolbox_metadata; /* JSON object name -> card */
    char *tools_brief;      /* one line per tool (flow/brief.h) */
    double t0;
    double deadline_ms;      /* af_clock_ms() by which the current phase's calls must end */
    int time_up;             /* a call was cut off by max_time: the turns are over */
    int in_generator;        /* the final answer is being written (its own deadline) */
    int step;                /* current step, 0 during query analysis */
    const char *tool_module; /* "tool:NAME" while a tool runs, for its LLM calls */
};

/* Sends [system, user prompt] (plus [assistant prev, user retry] when both are given) on the
 * slot's back-end, records usage and a trace record under `module`, and sets *text (owned).
 * On a back-end error records it on c->out and returns the code. */
int solve_chat(struct solve_ctx *c, enum af_slot slot, const char *module, const char *prompt,
               const char *prev, const char *retry, char **text);
/* The tool context for the current step (LLM calls reported to the trace and usage). */
struct af_tool_ctx solve_tool_ctx(struct solve_ctx *c, char *module_buf, size_t buflen,
                                  const char *tool_name);
/* One trace record per tool call of the step. */
void solve_trace_tool(struct solve_ctx *c, const char *tool, const char *command,
                      const json_t *calls);
/* The closing record of the solve (answer, memory, usage, timings). */
void solve_trace_final(struct solve_ctx *c);
/* 0 when command is non-NULL, parses and holds at least one call; else AF_EPARSE and why. */
int check_command(const char *command, char *why, size_t whylen);
/* Records the first error of the solve on c->out. Returns rc. */
int solve_fail(struct solve_ctx *c, int rc, const char *module, const char *msg);

#endif
