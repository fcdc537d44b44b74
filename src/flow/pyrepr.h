/*
 * pyrepr.h - JSON values written as Python literals, the way the released AgentFlow puts its
 * tool lists, cards and memory into prompts (str() of a list or dict): private to flow/.
 *
 * Thread-safety: plain functions on caller-owned data.
 */
#ifndef AF_FLOW_PYREPR_H
#define AF_FLOW_PYREPR_H

#include <jansson.h>

/* Returns v (borrowed) as Python's repr() of the equivalent value, on one line: dicts
 * {'k': v, ...} in key order, lists [a, b], strings quoted and escaped as repr() does
 * (single quotes unless the text holds ' and no "), True/False/None, ints, and floats in
 * repr()'s shortest round-trip form (0.8, 1.0, 1e-06, 1e+16). malloc'd; the caller frees. */
char *pyrepr(const json_t *v);

#endif
