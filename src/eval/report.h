/*
 * report.h - `agentflow eval report RUNDIR`: reads RUNDIR/results.jsonl (and the traces it
 * names) and writes RUNDIR/report.md, RUNDIR/report.html and one page per result line under
 * RUNDIR/report/items/, each atomically (temp file, fsync, rename).
 *
 * Accuracy of a benchmark is the mean ± standard deviation (population, over trials; 0 with one
 * trial) of its per-trial accuracies, for the rule scorer and, where lines carry a boolean
 * correct.judge, for the judge. report.c aggregates; report_html.c renders the HTML.
 */
#ifndef AF_EVAL_REPORT_H
#define AF_EVAL_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "agentflow/err.h"
#include "core/buf.h"

/* What a report run saw. */
struct eval_report_info {
    size_t n_lines;    /* result lines used */
    size_t n_skipped;  /* malformed (unparsable, torn, missing bench/index/trial) or duplicate */
    size_t first_bad;  /* line number of the first skipped line (1-based), 0 when none */
    size_t n_benches;  /* benchmarks reported */
    size_t n_pages;    /* item pages written */
    size_t n_no_trace; /* item pages whose trace file was missing or unreadable */
};

/* Builds the report of `rundir`. Returns AF_OK; AF_ENOTFOUND when rundir or
 * rundir/results.jsonl does not exist (err names it); AF_EIO / AF_ETOOBIG when a file cannot
 * be read or written (err names it). *info (may be NULL) is filled on AF_OK. */
AF_NODISCARD int eval_report_write(const char *rundir, struct eval_report_info *info, char *err,
                                   size_t errlen);

/* --- the aggregate model, shared by report.c and report_html.c ----------------------------- */

struct report_tool {
    char *name;  /* owned */
    size_t runs; /* result lines whose tools list names it */
    size_t calls;
};

struct report_module {
    char *name;                                     /* owned */
    double calls, prompt_tokens, completion_tokens; /* sums over the lines */
};

/* The statistics of a set of result lines (one benchmark, or all of them). */
struct report_stats {
    char *name;       /* owned: the benchmark, or "all" */
    size_t n_runs;    /* result lines */
    size_t n_items;   /* distinct (bench, index) */
    size_t n_trials;  /* distinct trial numbers */
    double *rule_acc; /* owned, n_trials per-trial rule accuracies in %, in trial order */
    double rule_mean, rule_std;
    size_t n_judged;     /* lines with a boolean correct.judge */
    size_t judge_trials; /* trials with at least one judged line */
    double judge_mean, judge_std;
    size_t n_f1;    /* lines with a numeric f1 */
    double f1_mean; /* in % */
    double steps_mean, latency_mean_ms, latency_total_ms;
    struct report_tool *tools; /* owned, sorted by name */
    size_t n_tools;
    struct report_module *modules; /* owned, sorted by name */
    size_t n_modules;
    double tokens_total; /* prompt + completion over all modules and lines */
};

struct report_bench {
    struct report_stats st;
    json_t *lines; /* array of the bench's result lines, sorted by (index, trial); owned ref */
};

struct report_model {
    const char *rundir;
    struct report_bench *benches; /* owned, sorted by name */
    size_t n_benches;
    struct report_stats all;
    json_t *steps;    /* array of every line's steps (integers), for the histogram; owned ref */
    size_t n_skipped; /* as in eval_report_info */
    size_t first_bad;
};

/* The page of one result line relative to RUNDIR ("report/items/BENCH-INDEX-TRIAL.html", the
 * bench name reduced to [A-Za-z0-9._-]), into b. */
void report_item_page_path(struct af_buf *b, const json_t *line);

/* Appends report.html's content for m. */
void report_html_main(struct af_buf *b, const struct report_model *m);
/* Appends an item page: the line's fields, then the trace at RUNDIR/<line.trace> (a missing,
 * unreadable or torn trace is said so on the page). *no_trace is set to 1 when the trace file
 * could not be read. */
void report_html_item(struct af_buf *b, const struct report_model *m, const json_t *line,
                      int *no_trace);

#endif
