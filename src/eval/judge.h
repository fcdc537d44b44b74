/*
 * judge.h - the LLM-judge scorer: asks an engine, with our own prompt, whether a response
 * gives the gold answer, and reads a true/false verdict from its reply. Stored by the runner
 * as correct.judge next to the rule scorers' verdict.
 */
#ifndef AF_EVAL_JUDGE_H
#define AF_EVAL_JUDGE_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/llm.h"

struct eval_judge {
    struct af_llm *llm;          /* borrowed */
    const char *model;           /* borrowed; NULL = the back-end's default */
    struct af_sampling sampling; /* greedy by default (eval_judge_init) */
};

/* Greedy sampling, 512 tokens. */
void eval_judge_init(struct eval_judge *j, struct af_llm *llm, const char *model);

/* The judge's prompt for one item (malloc'd, caller frees). */
char *eval_judge_prompt(const char *query, const json_t *gold, const char *answer);

/* Reads the verdict of a judge reply: the last "Verdict:" followed by true/yes/correct (1) or
 * false/no/incorrect (0); -1 when there is none. */
int eval_judge_parse(const char *reply);

/* Judges one item. On AF_OK, *verdict is 1, 0 or -1 (unparsable reply) and *reply (owned by
 * the caller, may be NULL) the judge's text. A failed call returns its AF_E* code with the
 * message in err. Safe from any thread. */
AF_NODISCARD int eval_judge_item(const struct eval_judge *j, const char *query, const json_t *gold,
                                 const char *answer, int *verdict, char **reply, char *err,
                                 size_t errlen);

#endif
