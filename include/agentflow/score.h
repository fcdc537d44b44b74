/*
 * score.h - the benchmark scorers: answer extraction and one deterministic checker per
 * benchmark (QA exact match / F1, GAIA quasi-exact match, integer match, a Game-of-24
 * checker, multiple choice).
 *
 * The scorer reads answers only, never the flow: the same call serves eval reports and
 * training rewards. Every function here is safe from any thread (no global state).
 */
#ifndef AGENTFLOW_SCORE_H
#define AGENTFLOW_SCORE_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

/* The result of scoring one answer. Caller-owned storage; release with af_score_deinit. */
struct af_score {
    char *extracted; /* owned: the answer the scorer compared (after af_score_extract) */
    int correct;     /* 1 when the answer counts as right, else 0 */
    double f1;       /* token F1 for QA benches; 1.0 or 0.0 (= correct) for the others */
    json_t *details; /* owned reference: a JSON object, e.g. {"reason": "uses 8 twice"} */
};

/* Frees what *s owns and zeroes it. Accepts NULL and an already zeroed struct. */
void af_score_deinit(struct af_score *s);

/* Scores `answer` (the model's raw final answer text, borrowed; NULL means "") against
 * `item` (one record of <bench>/data.json, borrowed). *out is overwritten (not freed first)
 * and, on success, owned by the caller (af_score_deinit). A wrong or unparsable answer is
 * not an error: it returns 0 with correct = 0 and a reason in details.
 * Returns AF_ENOTFOUND for an unknown bench, AF_EINVAL for NULL arguments, AF_EPARSE when
 * the item lacks what the bench needs (the message names the field); on error *out is
 * zeroed. Safe from any thread. */
AF_NODISCARD int af_score_item(const char *bench, const json_t *item, const char *answer,
                               struct af_score *out, char *err, size_t errlen);

/* Returns the answer inside `text` (borrowed; NULL means ""): the last <answer>...</answer>;
 * else the last \boxed{...} (balanced braces); else the rest of the last "Answer:" line
 * (bold ** stripped); else the whole text. A \boxed{...} inside the <answer> tag is
 * unwrapped too. The result is trimmed and malloc'd (caller frees); never NULL. */
char *af_score_extract(const char *text);

/* Returns the NULL-terminated list of the paper's ten benchmark names, sorted (what "all"
 * means). Static; do not free. */
const char *const *af_score_benchmarks(void);

/* Returns 1 when `bench` has a scorer: the paper's ten and the practice world's world-lookup,
 * world-multihop, world-calc and world-24. */
int af_score_known(const char *bench);

/* Returns 1 when `bench` is a QA bench whose score carries a meaningful token F1, else 0. */
int af_score_reports_f1(const char *bench);

#endif
