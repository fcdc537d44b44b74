/*
 * executor.h - runs a parsed tool command (private to flow/).
 *
 * The command text is parsed as Python-literal calls (pycall.h), each call is bound to the
 * tool's card and validated, then the tool runs. Nothing the model wrote is ever executed.
 */
#ifndef AF_FLOW_EXECUTOR_H
#define AF_FLOW_EXECUTOR_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/tools.h"

struct exec_outcome {
    json_t *result; /* list of per-call results, or an error string; owned */
    json_t *calls;  /* [{args, result, duration_ms, error}] for the trace; owned */
    int n_calls;
    int n_failed;     /* calls that failed validation or reported an error */
    int parse_failed; /* the command did not parse (result holds the message) */
};

/* Parses `command` and runs every tool.execute call in it on `tool`. Fills *out; free with
 * exec_outcome_deinit. max_chars caps every string in the results (0 = no cap). */
void exec_run(struct af_tool *tool, const char *command, const struct af_tool_ctx *ctx,
              size_t max_chars, struct exec_outcome *out);
void exec_outcome_deinit(struct exec_outcome *o);

/* Replaces, in place, every string in v longer than max_chars by its first max_chars bytes
 * (cut on a UTF-8 boundary) followed by "...". Returns v. */
json_t *exec_truncate(json_t *v, size_t max_chars);

#endif
