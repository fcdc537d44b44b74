/*
 * memory.h - the evolving memory of one solve (private to flow/).
 *
 * An ordered list of actions {step, tool, sub_goal, command, result}. It lives for one query
 * only: the solver creates it at the start of a solve and frees it at the end.
 */
#ifndef AF_FLOW_MEMORY_H
#define AF_FLOW_MEMORY_H

#include <jansson.h>

struct memory {
    json_t *actions; /* array of objects; owned */
};

void memory_init(struct memory *m);
void memory_deinit(struct memory *m);
/* Appends an action. `result` is stolen (reference taken over). Strings are copied. */
void memory_add(struct memory *m, int step, const char *tool, const char *sub_goal,
                const char *command, json_t *result, int failed);
/* The memory as prompt text: {"Action Step 1": {"tool_name", "sub_goal", "command", "result"}},
 * as indented JSON, or as a Python dict literal when `python` is set (pyrepr.h); or a note that
 * no step was taken yet. Malloc'd, owned by the caller. */
char *memory_render(const struct memory *m, int python);

#endif
