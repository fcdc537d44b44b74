/*
 * runner.h - `agentflow eval run`: every (bench, index, trial) through the flow, scored by the
 * rule scorers, one fsync'd line per finished item in RUNDIR/results.jsonl (docs in
 * cmd_eval.c's help), a trace per item in RUNDIR/traces/, resumable after a kill.
 */
#ifndef AF_EVAL_RUNNER_H
#define AF_EVAL_RUNNER_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/flow.h"
#include "eval/dataset.h"
#include "eval/judge.h"
#include "eval/progress.h"

struct eval_run_opts {
    const char *out_dir; /* RUNDIR, created when missing */
    size_t limit;        /* first `limit` items of each bench; 0 = all */
    int trials;          /* runs of each item, >= 1 */
    int concurrency;     /* flows at once, >= 1 */
    enum eval_progress_mode progress;
    size_t progress_every;  /* LINES mode */
    const json_t *run_info; /* extra members of run.json (e.g. the config); borrowed, may be NULL */
    const struct eval_judge *judge; /* also score with the LLM judge (correct.judge); may be NULL */
};

struct eval_bench_summary {
    char *bench;          /* owned */
    size_t n;             /* result lines (new and resumed) of the selected items and trials */
    size_t correct;       /* of those, correct by the rule scorer */
    size_t failed;        /* items whose solve failed this time (no line written) */
    size_t resumed;       /* lines already in results.jsonl */
    double latency_ms;    /* sum over the new and resumed lines */
    double steps;         /* sum */
    size_t judged;        /* lines with a judge verdict */
    size_t judge_correct; /* of those, correct by the judge */
};

struct eval_summary {
    struct eval_bench_summary *benches; /* owned, n_benches entries, in --bench order */
    size_t n_benches;
};
void eval_summary_deinit(struct eval_summary *s);
/* {"benches":[{bench, n, correct, accuracy, failed, resumed, avg_steps, avg_latency_ms
 *  [, judged, judge_correct, judge_accuracy]}], "total":{n, correct, accuracy, failed,
 *  resumed [, judged, judge_correct, judge_accuracy]}}; accuracy in %; the judge members only
 *  when some line has a judge verdict. Owned by the caller. */
json_t *eval_summary_json(const struct eval_summary *s);

/* Runs the selected items not yet in RUNDIR/results.jsonl with `base` (copied per item, its
 * trace replaced by the item's own trace file). Writes RUNDIR/run.json atomically first.
 * Returns AF_OK when every item has a line; AF_EBACKEND when some solves failed (they are
 * not written, so a rerun retries them); AF_EIO (RUNDIR, results.jsonl) with err set.
 * *sum is filled in every case but AF_EIO; owned by the caller (eval_summary_deinit). */
AF_NODISCARD int eval_run(const struct af_flow_params *base, const struct eval_dataset *sets,
                          size_t n_sets, const struct eval_run_opts *o, struct eval_summary *sum,
                          char *err, size_t errlen);

#endif
