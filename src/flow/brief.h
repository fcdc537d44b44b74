/*
 * brief.h - short renderings for small-model prompt sets (private to flow/): the toolbox as
 * one line per tool, one tool's card, and the memory as steps with plain-text results.
 * Every function returns a malloc'd string owned by the caller; none keeps state.
 */
#ifndef AF_FLOW_BRIEF_H
#define AF_FLOW_BRIEF_H

#include <jansson.h>

#include "agentflow/tools.h"

/* "- NAME(param: type, ...): first sentence of the description", one line per tool. */
char *brief_tools(const struct af_tool_registry *r);
/* The signature, one line per parameter with its default, and the first demo command. */
char *brief_card(const struct af_tool_card *c);
/* "Step N: TOOL: SUB_GOAL\nResult: ..." per action; passages as "title: text" lines, a
 * program's printed output, each result capped at 700 characters. */
char *brief_memory(const json_t *actions);

#endif
