/*
 * world.h - the practice world: a generated encyclopedia of fictional people, places,
 * organisations and works, and question families over it with train / val / test splits,
 * scored by the world-* benchmarks of score.h.
 *
 * A build is a pure function of its parameters: the same seed writes the same bytes.
 * Thread-safety: no global state; distinct calls are safe from any thread.
 */
#ifndef AGENTFLOW_WORLD_H
#define AGENTFLOW_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "agentflow/err.h"

struct af_world_params {
    uint64_t seed;
    size_t max_train; /* items per family in each split */
    size_t max_val;
    size_t max_test;
};

/* seed 1; at most 4000 training, 200 validation and 300 test items per family. */
struct af_world_params af_world_default_params(void);

struct af_world_stats {
    size_t entities;
    size_t passages;
    size_t items[3]; /* train, val, test: all families together */
};

/* Writes the world into `dir` (created when missing):
 *   entities.jsonl   one structured record per entity (kind, name, split, facts);
 *   passages.jsonl   {"id","title","text"}, the input of `agentflow index build`;
 *   benchmarks/<bench>/{train,val,test}.jsonl, and data.json (the test split as a JSON array,
 *                    so `eval run --data-dir DIR/benchmarks` reads it);
 *   world.json       the parameters and the counts.
 * Each file is written to a temporary name and renamed. Fails with AF_EIO naming the file.
 * `st` may be NULL. */
AF_NODISCARD int af_world_build(const char *dir, const struct af_world_params *p,
                                struct af_world_stats *st, char *err, size_t errlen);

/* The scripted expert: an LLM back-end that answers every flow module for the questions of
 * the world built in `dir` (it reads dir/benchmarks/NAME/{train,val,test}.jsonl), following
 * each question's solution. `noise` in [0, 1] is the share of solves made imperfect (a wrong
 * tool, a redundant step, an early STOP or a repeated sub-goal), drawn per query from `seed`.
 * Returns NULL with a message naming the file on error; owned by the caller (af_llm_free).
 * Safe from any thread. */
struct af_llm;
struct af_llm *af_world_expert_new(const char *dir, double noise, uint64_t seed, char *err,
                                   size_t errlen);

/* What `world drills` writes (af_world_drills_default_params: 40,000 drills, seed 7, no name
 * drills). */
struct af_world_drills_params {
    size_t n;
    uint64_t seed;
    /* The share of drills (0 to 1) that copy names made of the world's syllables instead of
     * numbers: unseen names garble as a model's memory grows (docs/WORLD.md). 0 writes the
     * number drills alone, byte for byte as before this option. */
    double names;
};
struct af_world_drills_params af_world_drills_default_params(void);

/* Writes p->n copy drills to `path` (chat JSONL for `train sft`, through a temporary file and a
 * rename): short conversations whose replies repeat numbers or names from their prompts, in
 * the flow's shapes (a sub-goal's expression into a Python call, a printed result into an
 * answer, one value picked out of several facts, a list repeated; for names also a search for
 * the entity a result names). They teach a model trained from scratch to copy from its context
 * (docs/WORLD.md has what they did). The same params write the same bytes. Fails with AF_EIO
 * naming the file, AF_EINVAL for a share outside [0, 1]. */
AF_NODISCARD int af_world_drills(const char *path, const struct af_world_drills_params *p,
                                 char *err, size_t errlen);

/* The world's benchmark names, NULL-terminated. Static; do not free. */
const char *const *af_world_benchmarks(void);

#endif
