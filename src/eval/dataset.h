/*
 * dataset.h - the benchmark files: resolving the data folder, parsing a --bench list, and
 * loading <dir>/<bench>/data.json into items keyed by their index in the file (never by pid:
 * the MedQA file repeats pids).
 */
#ifndef AF_EVAL_DATASET_H
#define AF_EVAL_DATASET_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"

struct eval_dataset {
    char *bench;   /* owned */
    char *path;    /* owned: the data.json read */
    json_t *items; /* owned reference: the JSON array; item i is the record the scorer reads */
};

/* The data folder: `flag` when set, else $AGENTFLOW_DATA, else "../shared/data/benchmarks".
 * Borrowed. */
const char *eval_data_dir(const char *flag);

/* Parses "all" or "NAME[,NAME...]" into a NULL-terminated array of names (duplicates
 * dropped, order kept), owned by the caller (eval_bench_list_free). An unknown or empty name
 * fails with AF_EINVAL and a message that lists the known benchmarks. */
AF_NODISCARD int eval_bench_list_parse(const char *spec, char ***out, char *err, size_t errlen);
void eval_bench_list_free(char **names);

/* Loads dir/bench/data.json (a JSON array of objects). Fails with AF_ENOTFOUND / AF_EIO /
 * AF_EPARSE, the message naming the file (and the line, or the index of a bad record).
 * *out is owned by the caller: eval_dataset_deinit. */
AF_NODISCARD int eval_dataset_load(const char *dir, const char *bench, struct eval_dataset *out,
                                   char *err, size_t errlen);
void eval_dataset_deinit(struct eval_dataset *d);

size_t eval_dataset_size(const struct eval_dataset *d);
/* Item i (borrowed), or NULL past the end. */
const json_t *eval_dataset_item(const struct eval_dataset *d, size_t i);
/* The text given to the agent: "query", else "question" when it is a string; "" if neither.
 * Borrowed. */
const char *eval_item_query(const json_t *item);
/* The ground truth ("answer", any JSON type), borrowed; JSON null when absent. */
const json_t *eval_item_gold(const json_t *item);

#endif
