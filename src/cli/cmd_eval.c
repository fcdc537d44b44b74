/*
 * cmd_eval.c - `agentflow eval`:
 *   score --bench NAME --pred FILE.jsonl [--data-dir DIR]: scores saved predictions against a
 *     benchmark's data.json with the score/ module; one JSON line per prediction, then a
 *     summary line.
 *   run --bench LIST --out RUNDIR [...]: runs the benchmarks through the flow (eval/runner.c),
 *     resumably, with the response cache on by default; prints a summary.
 *   report RUNDIR: writes RUNDIR/report.md, RUNDIR/report.html and RUNDIR/report/items/ from
 *     RUNDIR/results.jsonl and the traces (eval/report.c).
 *
 * Items are keyed by their index in the data array, never by pid (MedQA repeats pids).
 * Exit codes: 0 ok, 2 usage, 3 back-end error (run), 4 bad input file (missing file, bad JSON
 * line, index out of range, unwritable RUNDIR). eval score reports a bad line and goes on, then
 * exits 4 after its summary.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "agentflow/score.h"
#include "cli/batch.h"
#include "cli/cli.h"
#include "core/buf.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"
#include "eval/dataset.h"
#include "eval/report.h"
#include "eval/runner.h"

#define EVAL_PRED_LIMIT ((size_t)1 << 30)

static void eval_usage(FILE *f)
{
    fprintf(f, "usage: agentflow eval score --bench NAME --pred FILE.jsonl [--data-dir DIR]\n"
               "       agentflow eval run --bench NAME[,NAME...]|all --out RUNDIR [options]\n"
               "       agentflow eval report RUNDIR\n"
               "\n"
               "  score    score saved predictions against a benchmark, no model needed\n"
               "  run      run benchmarks through the agent flow and score the answers\n"
               "  report   write report.md, report.html and item pages for a run folder\n"
               "\n"
               "agentflow eval ACTION --help describes each. Benchmarks:");
    for (const char *const *b = af_score_benchmarks(); *b; b++)
        fprintf(f, " %s", *b);
    fprintf(f, "\nExit codes: 0 ok, 2 usage (a bad flag), 3 back-end error (eval run), 4 a file\n"
               "named on the command line that is missing or malformed.\n");
}

static void eval_score_usage(FILE *f)
{
    fprintf(f, "usage: agentflow eval score --bench NAME --pred FILE.jsonl [--data-dir DIR]\n"
               "\n"
               "Scores each prediction line {\"index\": N, \"answer\": \"...\"} against item N of\n"
               "DIR/NAME/data.json (DIR: --data-dir, else $AGENTFLOW_DATA, else\n"
               "../shared/data/benchmarks) with the rule scorers (docs/SCORING.md). Prints\n"
               "{index, extracted, correct[, f1][, score_details]} per line (score_details\n"
               "holds the gold matched and the reason for a wrong answer), then\n"
               "{bench, n, correct, accuracy[, bad_lines][, duplicate_lines]} (accuracy in %%).\n"
               "A line that is not a JSON object, has no \"answer\" or an index out of range is\n"
               "reported on stderr (FILE:LINE: why) and left out; the rest are still scored.\n"
               "A second line for an index already scored is ignored with a warning: the\n"
               "first one counts.\n"
               "Benchmarks:");
    for (const char *const *b = af_score_benchmarks(); *b; b++)
        fprintf(f, " %s", *b);
    fprintf(f, "\nExit codes: 0 ok, 2 usage (a bad flag or benchmark name), 4 --pred or the\n"
               "data file missing or malformed (after the summary when some lines were bad).\n");
}

struct eval_args {
    const char *bench, *pred, *data_dir;
};

static int parse_args(int argc, char **argv, struct eval_args *a)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        eval_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EUSAGE : -1;
    }
    if (strcmp(argv[1], "score") != 0) {
        fprintf(stderr, "agentflow eval: unknown action \"%s\"\n", argv[1]);
        eval_usage(stderr);
        return CLI_EUSAGE;
    }
    for (int i = 2; i < argc; i++) {
        const char **dst = NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            eval_score_usage(stdout);
            return -1;
        } else if (strcmp(argv[i], "--bench") == 0) {
            dst = &a->bench;
        } else if (strcmp(argv[i], "--pred") == 0) {
            dst = &a->pred;
        } else if (strcmp(argv[i], "--data-dir") == 0) {
            dst = &a->data_dir;
        }
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "agentflow eval score: %s \"%s\"\n",
                    dst ? "missing value for" : "unknown option", argv[i]);
            return CLI_EUSAGE;
        }
        *dst = argv[++i];
    }
    if (!a->bench || !a->pred) {
        fprintf(stderr, "agentflow eval score: --bench and --pred are required\n");
        return CLI_EUSAGE;
    }
    if (af_score_known(a->bench))
        return CLI_OK;
    fprintf(stderr, "agentflow eval score: unknown benchmark \"%s\"\n", a->bench);
    eval_score_usage(stderr);
    return CLI_EUSAGE;
}

static int load_data(const struct eval_args *a, struct eval_dataset *out)
{
    char err[1024];
    if (eval_dataset_load(eval_data_dir(a->data_dir), a->bench, out, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow eval score: %s\n", err);
        return CLI_EINPUT;
    }
    return CLI_OK;
}

/* Parses one prediction line into *index and a borrowed *answer (valid while *obj lives).
 * A missing "answer" is an error (a null one scores as an empty answer). */
static int parse_pred(const char *line, size_t len, size_t n_items, json_t **obj, size_t *index,
                      const char **answer, char *why, size_t whylen)
{
    json_error_t jerr;
    *obj = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(*obj)) {
        snprintf(why, whylen, "%s", *obj ? "expected a JSON object" : jerr.text);
        return -1;
    }
    const json_t *ix = json_object_get(*obj, "index");
    const json_t *an = json_object_get(*obj, "answer");
    if (!json_is_integer(ix) || json_integer_value(ix) < 0 ||
        (size_t)json_integer_value(ix) >= n_items) {
        snprintf(why, whylen, "\"index\" must be an integer in [0, %zu)", n_items);
        return -1;
    }
    if (!an) {
        snprintf(why, whylen, "no \"answer\" field");
        return -1;
    }
    if (!json_is_string(an) && !json_is_null(an)) {
        snprintf(why, whylen, "\"answer\" must be a string");
        return -1;
    }
    *index = (size_t)json_integer_value(ix);
    *answer = json_is_string(an) ? json_string_value(an) : "";
    return 0;
}

/* One line per prediction; score_details carries the scorer's reason for a wrong answer
 * (the field eval run writes). */
static void print_result(const char *bench, size_t index, const struct af_score *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer((json_int_t)index));
    json_object_set_new(o, "extracted", af_json_text(s->extracted));
    json_object_set_new(o, "correct", json_boolean(s->correct));
    if (af_score_reports_f1(bench))
        json_object_set_new(o, "f1", json_real(s->f1));
    if (s->details && json_object_size(s->details) > 0)
        json_object_set(o, "score_details", s->details);
    char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
    printf("%s\n", line ? line : "{}");
    free(line);
    json_decref(o);
}

struct score_tally {
    size_t n, n_correct;
    size_t n_bad, n_dup; /* lines reported on stderr and left out */
};

/* Scores every line of text. A bad line is reported (file:line: why) and skipped, and so is a
 * second line for an index already scored (the first one counts): copies of one right answer
 * must not raise the accuracy. */
static void score_lines(const struct eval_args *a, const json_t *items, const char *text,
                        struct score_tally *t)
{
    size_t lineno = 0, n_items = json_array_size(items);
    size_t *first_line = af_xcalloc(n_items ? n_items : 1, sizeof *first_line);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        const char *line = p;
        p += len + (nl ? 1 : 0);
        lineno++;
        if (strspn(line, " \t\r") >= len)
            continue;
        json_t *obj = NULL;
        size_t index = 0;
        const char *answer = NULL;
        char why[256], err[512];
        if (parse_pred(line, len, n_items, &obj, &index, &answer, why, sizeof why) != 0) {
            fprintf(stderr, "agentflow eval score: %s:%zu: %s\n", a->pred, lineno, why);
            json_decref(obj);
            t->n_bad++;
            continue;
        }
        if (first_line[index]) {
            fprintf(stderr,
                    "agentflow eval score: %s:%zu: index %zu already scored on line %zu; this "
                    "line is ignored\n",
                    a->pred, lineno, index, first_line[index]);
            json_decref(obj);
            t->n_dup++;
            continue;
        }
        struct af_score s;
        int rc = af_score_item(a->bench, json_array_get(items, index), answer, &s, err, sizeof err);
        json_decref(obj);
        if (rc != AF_OK) {
            fprintf(stderr, "agentflow eval score: %s:%zu: item %zu: %s\n", a->pred, lineno, index,
                    err);
            t->n_bad++;
            continue;
        }
        first_line[index] = lineno;
        print_result(a->bench, index, &s);
        t->n++;
        t->n_correct += s.correct ? 1 : 0;
        af_score_deinit(&s);
    }
    free(first_line);
}

/* --- eval run ------------------------------------------------------------------------ */
#define EVAL_RUN "agentflow eval run"

static void eval_run_usage(FILE *f)
{
    fprintf(f,
            "usage: agentflow eval run --bench NAME[,NAME...]|all --out RUNDIR [--data-dir DIR]\n"
            "                          [--limit N] [--trials K] [--concurrency N] [options]\n"
            "\n"
            "Runs each item's query through the agent flow and scores the answer with the\n"
            "rule scorers. Items are keyed by their index in DIR/NAME/data.json (DIR:\n"
            "--data-dir, else $AGENTFLOW_DATA, else ../shared/data/benchmarks).\n"
            "\n"
            "eval:\n"
            "  --bench LIST       benchmarks, comma-separated, or all; names:\n"
            "                    ");
    for (const char *const *b = af_score_benchmarks(); *b; b++)
        fprintf(f, " %s", *b);
    fprintf(f, "\n"
               "  --out RUNDIR       results folder (created); a rerun resumes it\n"
               "  --data-dir DIR     benchmark folder\n"
               "  --limit N          the first N items of each benchmark (default all)\n"
               "  --trials K         runs of each item (default 1)\n"
               "  --concurrency N    flows at once (default 4)\n"
               "  --quiet            no progress display\n"
               "  --progress-every N without a terminal, a progress line every N items (default "
               "10)\n"
               "  --judge            also score with an LLM judge (our prompt, a true/false\n"
               "                     verdict) into correct.judge; default engine: the fixed slot\n"
               "  --judge-url URL, --judge-model NAME   the judge's engine (imply --judge)\n"
               "\n");
    run_common_usage(f);
    fprintf(f,
            "  (eval run caches greedy calls in RUNDIR/cache.sqlite unless --no-cache)\n"
            "\n"
            "RUNDIR/results.jsonl gets one fsync'd line per item and trial: bench, index, trial,\n"
            "query, gold, answer, extracted, correct {rule}, f1 (QA), steps, tools, tokens (per\n"
            "module), latency_ms, trace (traces/BENCH-INDEX-TRIAL.jsonl). (bench, index, trial)\n"
            "already there are skipped. RUNDIR/run.json holds the configuration and\n"
            "RUNDIR/summary.json the summary, which is also printed on stdout: one JSON line\n"
            "per benchmark {bench, n, correct, accuracy, ...}, then {\"bench\":\"all\", ...}.\n"
            "A progress bar (stderr a terminal) or progress lines go to stderr.\n"
            "Exit codes: 0 ok, 2 usage, 3 back-end error (failed items are retried by a\n"
            "rerun), 4 bad input file or unwritable RUNDIR.\n");
}

enum {
    EOPT_BENCH = RUN_OPT_END,
    EOPT_DATA_DIR,
    EOPT_OUT,
    EOPT_LIMIT,
    EOPT_TRIALS,
    EOPT_CONCURRENCY,
    EOPT_QUIET,
    EOPT_PROGRESS_EVERY,
    EOPT_JUDGE,
    EOPT_JUDGE_URL,
    EOPT_JUDGE_MODEL,
};

static const struct option eval_run_opts[] = {
    {"bench", required_argument, 0, EOPT_BENCH},
    {"data-dir", required_argument, 0, EOPT_DATA_DIR},
    {"out", required_argument, 0, EOPT_OUT},
    {"limit", required_argument, 0, EOPT_LIMIT},
    {"trials", required_argument, 0, EOPT_TRIALS},
    {"concurrency", required_argument, 0, EOPT_CONCURRENCY},
    {"quiet", no_argument, 0, EOPT_QUIET},
    {"progress-every", required_argument, 0, EOPT_PROGRESS_EVERY},
    {"judge", no_argument, 0, EOPT_JUDGE},
    {"judge-url", required_argument, 0, EOPT_JUDGE_URL},
    {"judge-model", required_argument, 0, EOPT_JUDGE_MODEL},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct eval_run_args {
    struct run_args common;
    const char *bench, *data_dir, *out;
    size_t limit, every;
    int trials, concurrency, quiet, judge;
    const char *judge_url, *judge_model;
};

static int eval_run_own(struct eval_run_args *a, int o, const char *arg)
{
    double d;
    switch (o) {
    case EOPT_BENCH:
        a->bench = arg;
        return 0;
    case EOPT_DATA_DIR:
        a->data_dir = arg;
        return 0;
    case EOPT_OUT:
        a->out = arg;
        return 0;
    case EOPT_QUIET:
        a->quiet = 1;
        return 0;
    case EOPT_JUDGE:
        a->judge = 1;
        return 0;
    case EOPT_JUDGE_URL:
    case EOPT_JUDGE_MODEL:
        a->judge = 1;
        *(o == EOPT_JUDGE_URL ? &a->judge_url : &a->judge_model) = arg;
        return 0;
    case EOPT_LIMIT:
    case EOPT_PROGRESS_EVERY:
        if (run_parse_number(EVAL_RUN, o == EOPT_LIMIT ? "limit" : "progress-every", arg, 1, 1e9,
                             &d))
            return -1;
        *(o == EOPT_LIMIT ? &a->limit : &a->every) = (size_t)d;
        return 0;
    case EOPT_TRIALS:
    case EOPT_CONCURRENCY:
        if (run_parse_number(EVAL_RUN, o == EOPT_TRIALS ? "trials" : "concurrency", arg, 1,
                             o == EOPT_TRIALS ? 1000 : 1024, &d))
            return -1;
        *(o == EOPT_TRIALS ? &a->trials : &a->concurrency) = (int)d;
        return 0;
    case 'h':
        eval_run_usage(stdout);
        return 1;
    default:
        eval_run_usage(stderr);
        return -1;
    }
}

/* Returns 0 to go on, 1 after --help, -1 on a usage error (message printed). */
static int eval_run_parse(int argc, char **argv, struct eval_run_args *a)
{
    struct option *opts = run_opts_merge(eval_run_opts);
    int o, rc = 0;
    optind = 1;
    while (rc == 0 && (o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int h = run_args_handle(&a->common, EVAL_RUN, o, optarg);
        rc = h < 0 ? -1 : h > 0 ? 0 : eval_run_own(a, o, optarg);
    }
    free(opts);
    if (rc != 0)
        return rc;
    if (optind != argc) {
        fprintf(stderr, EVAL_RUN ": unexpected argument \"%s\"\n", argv[optind]);
        return -1;
    }
    if (!a->bench || !a->out) {
        fprintf(stderr, EVAL_RUN ": --bench and --out are required (see --help)\n");
        return -1;
    }
    return 0;
}

/* Loads every named benchmark into *sets (n entries). Returns an exit code. */
static int eval_load_sets(char **names, const char *data_dir, struct eval_dataset **sets, size_t *n)
{
    size_t count = 0;
    while (names[count])
        count++;
    *sets = af_xcalloc(count ? count : 1, sizeof **sets);
    *n = 0;
    for (size_t i = 0; i < count; i++) {
        char err[1024];
        if (eval_dataset_load(eval_data_dir(data_dir), names[i], &(*sets)[i], err, sizeof err) !=
            AF_OK) {
            fprintf(stderr, EVAL_RUN ": %s\n", err);
            return CLI_EINPUT;
        }
        *n = i + 1;
    }
    return CLI_OK;
}

/* Creates RUNDIR and opens the cache (unless --no-cache). Fills *cache_path (owned). */
static int eval_prepare(const struct eval_run_args *a, struct run_ctx *rc, char **cache_path)
{
    char err[1024];
    if (af_mkdir_p(a->out, 0777, err, sizeof err) != AF_OK) {
        fprintf(stderr, EVAL_RUN ": cannot create the --out folder: %s\n", err);
        return CLI_EINPUT;
    }
    *cache_path = NULL;
    if (a->common.no_cache)
        return CLI_OK;
    struct af_buf b;
    af_buf_init(&b, AF_BUF_NOLIMIT);
    if (a->common.cache_path)
        (void)af_buf_puts(&b, a->common.cache_path);
    else
        (void)af_buf_printf(&b, "%s/cache.sqlite", a->out);
    *cache_path = af_buf_detach(&b);
    if (run_ctx_enable_cache(rc, *cache_path, a->common.cache_all ? AF_LLM_CACHE_ALL : 0, err,
                             sizeof err) != AF_OK) {
        fprintf(stderr, EVAL_RUN ": --cache: %s\n", err);
        return CLI_EINPUT;
    }
    return CLI_OK;
}

static void print_json_line(json_t *j)
{
    char *line = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
    printf("%s\n", line ? line : "{}");
    free(line);
}

/* Prints the summary lines and writes RUNDIR/summary.json. */
static void eval_report_summary(const struct eval_run_args *a, const struct eval_summary *sum,
                                struct run_ctx *rc)
{
    json_t *j = eval_summary_json(sum);
    json_t *total = json_object_get(j, "total");
    if (rc->cache) {
        uint64_t hits = 0, misses = 0;
        af_llm_cache_stats(rc->cache, &hits, &misses);
        json_object_set_new(
            j, "cache",
            json_pack("{s:I,s:I}", "hits", (json_int_t)hits, "misses", (json_int_t)misses));
    }
    json_t *benches = json_object_get(j, "benches");
    for (size_t i = 0; i < json_array_size(benches); i++)
        print_json_line(json_array_get(benches, i));
    json_t *all = json_pack("{s:s}", "bench", "all");
    json_object_update(all, total);
    if (json_object_get(j, "cache"))
        json_object_set(all, "cache", json_object_get(j, "cache"));
    print_json_line(all);
    json_decref(all);
    fflush(stdout);
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT), err[512];
    struct af_buf p;
    af_buf_init(&p, AF_BUF_NOLIMIT);
    (void)af_buf_printf(&p, "%s/summary.json", a->out);
    if (text && af_file_write_atomic(af_buf_str(&p), text, strlen(text), err, sizeof err))
        fprintf(stderr, EVAL_RUN ": %s\n", err);
    af_buf_deinit(&p);
    free(text);
    json_decref(j);
}

/* The judge's engine: its own back-end for --judge-url (cached like the others), else the
 * fixed slot's. */
struct judge_res {
    struct run_config cfg;
    struct backends be;
    struct af_llm *wrap;
    int have_cfg;
};

static int eval_judge_open(const struct eval_run_args *a, struct run_ctx *rc, struct judge_res *jr,
                           struct eval_judge *j)
{
    memset(jr, 0, sizeof *jr);
    const struct af_flow_slot *fixed = &rc->params.slots[AF_SLOT_FIXED];
    if (!a->judge_url) {
        eval_judge_init(j, fixed->llm, a->judge_model ? a->judge_model : fixed->model);
        return CLI_OK;
    }
    char err[1024];
    config_init(&jr->cfg);
    jr->have_cfg = 1;
    config_set_url(&jr->cfg, -1, a->judge_url);
    if (a->judge_model)
        config_set_model(&jr->cfg, -1, a->judge_model);
    if (backends_open(&jr->cfg, &jr->be, err, sizeof err) != AF_OK) {
        fprintf(stderr, EVAL_RUN ": --judge-url: %s\n", err);
        return CLI_EUSAGE;
    }
    struct af_llm *llm = jr->be.llm[AF_SLOT_FIXED];
    if (rc->cache)
        llm = jr->wrap =
            af_llm_cache_wrap(rc->cache, llm, a->common.cache_all ? AF_LLM_CACHE_ALL : 0);
    eval_judge_init(j, llm, a->judge_model);
    return CLI_OK;
}

static void eval_judge_close(struct judge_res *jr)
{
    af_llm_free(jr->wrap);
    backends_close(&jr->be);
    if (jr->have_cfg)
        config_deinit(&jr->cfg);
}

static json_t *eval_run_info(const struct eval_run_args *a, const struct run_config *cfg,
                             const char *cache_path)
{
    return json_pack("{s:s,s:o,s:s,s:s?,s:b}", "command", "eval run", "config", config_to_json(cfg),
                     "data_dir", eval_data_dir(a->data_dir), "cache", cache_path, "cache_all",
                     a->common.cache_all);
}

static int eval_execute(const struct eval_run_args *a, struct run_ctx *rc,
                        const struct run_config *cfg, const struct eval_dataset *sets,
                        size_t n_sets)
{
    char *cache_path = NULL, err[1024];
    int code = eval_prepare(a, rc, &cache_path);
    if (code != CLI_OK) {
        free(cache_path);
        return code;
    }
    struct judge_res jr;
    struct eval_judge judge;
    if (a->judge && (code = eval_judge_open(a, rc, &jr, &judge)) != CLI_OK) {
        eval_judge_close(&jr);
        free(cache_path);
        return code;
    }
    json_t *info = eval_run_info(a, cfg, cache_path);
    struct eval_run_opts o = {
        .out_dir = a->out,
        .limit = a->limit,
        .trials = a->trials,
        .concurrency = a->concurrency,
        .progress = eval_progress_auto(stderr, a->quiet),
        .progress_every = a->every,
        .run_info = info,
        .judge = a->judge ? &judge : NULL,
    };
    struct eval_summary sum;
    int rrc = eval_run(&rc->params, sets, n_sets, &o, &sum, err, sizeof err);
    if (rrc == AF_EIO) {
        fprintf(stderr, EVAL_RUN ": %s\n", err);
        code = CLI_EINPUT;
    } else {
        eval_report_summary(a, &sum, rc);
        code = rrc == AF_OK ? CLI_OK : CLI_EBACKEND;
        eval_summary_deinit(&sum);
    }
    json_decref(info);
    if (a->judge)
        eval_judge_close(&jr);
    free(cache_path);
    return code;
}

static int cmd_eval_run(int argc, char **argv)
{
    struct eval_run_args a;
    memset(&a, 0, sizeof a);
    run_args_init(&a.common);
    a.trials = 1;
    a.concurrency = 4;
    a.every = 10;
    struct run_config cfg;
    config_init(&cfg);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    char **names = NULL, err[2048];
    struct eval_dataset *sets = NULL;
    size_t n_sets = 0;
    int code = eval_run_parse(argc, argv, &a);
    if (code != 0) {
        code = code > 0 ? CLI_OK : CLI_EUSAGE;
        goto out;
    }
    if (eval_bench_list_parse(a.bench, &names, err, sizeof err) != AF_OK) {
        fprintf(stderr, EVAL_RUN ": --bench: %s\n", err);
        code = CLI_EUSAGE;
        goto out;
    }
    if ((code = eval_load_sets(names, a.data_dir, &sets, &n_sets)) != CLI_OK)
        goto out;
    if ((code = run_build_config(&a.common, EVAL_RUN, &cfg)) != CLI_OK)
        goto out;
    if ((code = run_ctx_open(&rc, &cfg)) != CLI_OK)
        goto out;
    code = eval_execute(&a, &rc, &cfg, sets, n_sets);
out:
    run_ctx_close(&rc);
    config_deinit(&cfg);
    for (size_t i = 0; i < n_sets; i++)
        eval_dataset_deinit(&sets[i]);
    free(sets);
    eval_bench_list_free(names);
    run_args_deinit(&a.common);
    return code;
}

static int cmd_eval_score(int argc, char **argv)
{
    struct eval_args a = {NULL, NULL, NULL};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    struct eval_dataset set;
    memset(&set, 0, sizeof set);
    char *text = NULL, err[512];
    if ((rc = load_data(&a, &set)) != CLI_OK)
        goto out;
    if (af_file_read(a.pred, EVAL_PRED_LIMIT, &text, NULL, err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow eval score: %s\n", err);
        rc = CLI_EINPUT;
        goto out;
    }
    struct score_tally t = {0};
    score_lines(&a, set.items, text, &t);
    json_t *jb = json_string(a.bench);
    char *bench = json_dumps(jb, JSON_ENCODE_ANY);
    json_decref(jb);
    printf("{\"bench\":%s,\"n\":%zu,\"correct\":%zu,\"accuracy\":%.2f", bench ? bench : "\"\"", t.n,
           t.n_correct, t.n ? 100.0 * (double)t.n_correct / (double)t.n : 0.0);
    if (t.n_bad)
        printf(",\"bad_lines\":%zu", t.n_bad);
    if (t.n_dup)
        printf(",\"duplicate_lines\":%zu", t.n_dup);
    printf("}\n");
    free(bench);
    if (t.n_bad) {
        fprintf(stderr, "agentflow eval score: %s: %zu bad line(s) left out of the summary\n",
                a.pred, t.n_bad);
        rc = CLI_EINPUT;
    }
out:
    free(text);
    eval_dataset_deinit(&set);
    return rc;
}

/* --- eval report --------------------------------------------------------------------- */
#define EVAL_REPORT "agentflow eval report"

static void eval_report_usage(FILE *f)
{
    fprintf(f,
            "usage: agentflow eval report RUNDIR\n"
            "\n"
            "Reads RUNDIR/results.jsonl (written by agentflow eval run) and the traces it\n"
            "names, and writes, each atomically:\n"
            "  RUNDIR/report.md     a table per benchmark: accuracy mean \xC2\xB1 std over trials\n"
            "                       (rule and judge), items, trials, average steps, tool\n"
            "                       usage, tokens per module, latency; then all benchmarks\n"
            "  RUNDIR/report.html   the same tables with inline SVG charts (accuracy, steps,\n"
            "                       tool usage); self-contained, works offline\n"
            "  RUNDIR/report/items/BENCH-INDEX-TRIAL.html   one page per run with its whole\n"
            "                       trace (prompts, responses, tool calls, the answer)\n"
            "Malformed lines of results.jsonl are skipped and counted (on stderr).\n"
            "Exit codes: 0 ok, 2 usage, 4 missing RUNDIR or results.jsonl, or a file that\n"
            "cannot be read or written.\n");
}

static int cmd_eval_report(int argc, char **argv)
{
    const char *rundir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            eval_report_usage(stdout);
            return CLI_OK;
        }
        if (argv[i][0] == '-' || rundir) {
            fprintf(stderr, EVAL_REPORT ": unexpected argument \"%s\"\n", argv[i]);
            eval_report_usage(stderr);
            return CLI_EUSAGE;
        }
        rundir = argv[i];
    }
    if (!rundir) {
        eval_report_usage(stderr);
        return CLI_EUSAGE;
    }
    struct eval_report_info info;
    char err[2048];
    if (eval_report_write(rundir, &info, err, sizeof err) != AF_OK) {
        fprintf(stderr, EVAL_REPORT ": %s\n", err);
        return CLI_EINPUT;
    }
    if (info.n_skipped)
        fprintf(stderr,
                EVAL_REPORT ": %s/results.jsonl: skipped %zu malformed or duplicate line(s) "
                            "(first: line %zu)\n",
                rundir, info.n_skipped, info.first_bad);
    printf("wrote %s/report.md, %s/report.html and %zu item page(s) in %s/report/items "
           "(%zu result line(s), %zu benchmark(s), %zu skipped line(s), %zu run(s) without a "
           "trace)\n",
           rundir, rundir, info.n_pages, rundir, info.n_lines, info.n_benches, info.n_skipped,
           info.n_no_trace);
    return CLI_OK;
}

int cmd_eval(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return cmd_eval_run(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "report") == 0)
        return cmd_eval_report(argc - 1, argv + 1);
    return cmd_eval_score(argc, argv);
}
