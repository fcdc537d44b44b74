/*
 * parse.h - parsers for the planner's, verifier's and generator's replies (private to flow/).
 *
 * The rules follow the reference (agentflow-reference.md §3.2, §3.4): bold markup is removed,
 * the last complete Context/Sub-Goal/Tool Name match wins, and the verifier's conclusion falls
 * back to a search for "stop"/"continue". Pure functions; safe from any thread.
 */
#ifndef AF_FLOW_PARSE_H
#define AF_FLOW_PARSE_H

#include <stddef.h>

#include "agentflow/err.h"

struct next_step {
    char *justification; /* may be NULL */
    char *context;
    char *sub_goal;
    char *tool_name;
};

/* Parses a planner reply. On success fills *out (free with next_step_deinit) and returns 0;
 * AF_EPARSE when no complete Context/Sub-Goal/Tool Name triple exists (a reason in err). */
AF_NODISCARD int parse_next_step(const char *reply, struct next_step *out, char *err,
                                 size_t errlen);
void next_step_deinit(struct next_step *s);

/* Returns 1 for STOP, 0 for CONTINUE. *explicit_conclusion is set to 1 when a
 * "Conclusion: STOP|CONTINUE" label decided it (0 when the fallback did). */
int parse_verdict(const char *reply, int *explicit_conclusion);

/* The scored answer inside a generator reply: the last <answer>...</answer>, else the text of
 * the last "Answer:" part, else the whole reply, trimmed. Malloc'd, owned by the caller. */
char *parse_final_answer(const char *reply);

#endif
