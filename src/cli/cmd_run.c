/*
 * cmd_run.c - `agentflow run`: answer one query, or a batch of them (batch.c).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/batch.h"
#include "cli/cli.h"
#include "cli/config.h"
#include "core/fileio.h"
#include "core/jsonx.h"
#include "core/xalloc.h"

static void run_usage(FILE *f)
{
    fprintf(f, "usage: agentflow run [options] QUERY\n"
               "       agentflow run [options] --batch IN.jsonl --out OUT.jsonl [--concurrency N]\n"
               "\n"
               "Answers QUERY with the agent flow and prints the final answer on stdout; one\n"
               "progress line per step goes to stderr.\n"
               "\n");
    run_common_usage(f);
    fprintf(f, "  (run uses no cache unless --cache FILE is given)\n"
               "\n"
               "output:\n"
               "  --json             print one JSON object: answer, steps, memory, usage, timings\n"
               "  --trace FILE       append JSONL trace records (docs/TRACE.md)\n"
               "  --quiet            no progress lines\n"
               "\n"
               "batch:\n"
               "  --batch IN.jsonl   lines {\"id\",\"query\"}\n"
               "  --out OUT.jsonl    results, appended and fsync'd; ids already there are skipped\n"
               "  --concurrency N    flows at once (default 4)\n"
               "\n"
               "Precedence: flags, then environment (OPENAI_API_KEY, AGENTFLOW_*), then --config,\n"
               "then defaults. Exit codes: 0 ok, 2 usage (a bad flag or setting, an empty\n"
               "query), 3 back-end error (a server that fails or answers what cannot be read),\n"
               "4 bad input file (a file named on the command line, --config, a gguf: model\n"
               "or a scripted: script, a --batch file, that is missing or malformed).\n");
}

enum {
    OPT_JSON = RUN_OPT_END,
    OPT_TRACE,
    OPT_BATCH,
    OPT_OUT,
    OPT_CONCURRENCY,
    OPT_QUIET,
};

static const struct option run_own_opts[] = {
    {"json", no_argument, 0, OPT_JSON},
    {"trace", required_argument, 0, OPT_TRACE},
    {"batch", required_argument, 0, OPT_BATCH},
    {"out", required_argument, 0, OPT_OUT},
    {"concurrency", required_argument, 0, OPT_CONCURRENCY},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

struct cmd_run_args {
    struct run_args common;
    int json_out, quiet, concurrency;
    const char *batch_in, *batch_out;
};

static int handle_own(struct cmd_run_args *a, int o)
{
    double d;
    switch (o) {
    case OPT_TRACE:
        json_object_set_new(a->common.flags, "trace", json_string(optarg));
        return 0;
    case OPT_JSON:
        a->json_out = 1;
        return 0;
    case OPT_QUIET:
        a->quiet = 1;
        return 0;
    case OPT_BATCH:
        a->batch_in = optarg;
        return 0;
    case OPT_OUT:
        a->batch_out = optarg;
        return 0;
    case OPT_CONCURRENCY:
        if (run_parse_number("agentflow run", "concurrency", optarg, 1, 1024, &d))
            return -1;
        a->concurrency = (int)d;
        return 0;
    case 'h':
        run_usage(stdout);
        return 1;
    default:
        run_usage(stderr);
        return -1;
    }
}

static int parse_args(int argc, char **argv, struct cmd_run_args *a)
{
    struct option *opts = run_opts_merge(run_own_opts);
    int o, rc = 0;
    optind = 1;
    while (rc == 0 && (o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int h = run_args_handle(&a->common, "agentflow run", o, optarg);
        rc = h < 0 ? -1 : h > 0 ? 0 : handle_own(a, o);
    }
    free(opts);
    return rc;
}

static void on_step(void *user, const struct af_flow_step_info *s)
{
    const int *tty = user;
    char *qid = cli_term_text(stderr, s->query_id, 1);
    char *tool = cli_term_text(stderr, s->tool[0] ? s->tool : "(none)", 1);
    char *goal = cli_term_text(stderr, s->sub_goal, 1);
    fprintf(stderr, "%s[%s%sstep %d] tool=%s verdict=%s%s time=%.2fs sub-goal: %.200s",
            *tty ? "\r\033[K" : "", qid, qid[0] ? " " : "", s->step, tool, s->verdict,
            s->failed ? " (failed)" : "", s->step_ms / 1000.0, goal);
    free(qid);
    free(tool);
    free(goal);
    if (s->failed && s->reason) {
        char *why = cli_term_text(stderr, s->reason, 1);
        fprintf(stderr, "\n    failed because %.400s", why);
        free(why);
    }
    fprintf(stderr, "\n");
}

static const char *module_label(const char *module)
{
    return !strcmp(module, "query_analysis")  ? "query analysis"
           : !strcmp(module, "direct_output") ? "final answer"
           : !strcmp(module, "final_output")  ? "detailed answer"
                                              : module;
}

/* Progress inside a step: the query analysis and the answer get a line when they start and
 * end (a random model writes thousands of tokens there); on a terminal every other call shows
 * a transient status that the next line overwrites. */
static void on_call(void *user, const struct af_flow_call_info *ci)
{
    const int *tty = user;
    const int own_line = !strcmp(ci->module, "query_analysis") ||
                         !strcmp(ci->module, "direct_output") ||
                         !strcmp(ci->module, "final_output");
    if (!own_line) {
        if (*tty && !ci->done)
            fprintf(stderr, "\r\033[K[step %d] %s: generating (up to %d tokens)...", ci->step,
                    module_label(ci->module), ci->max_tokens);
        return;
    }
    if (!ci->done)
        fprintf(stderr, "%s[step %d] %s: generating (up to %d tokens)...%s", *tty ? "\r\033[K" : "",
                ci->step, module_label(ci->module), ci->max_tokens, *tty ? "" : "\n");
    else if (ci->err == AF_OK)
        fprintf(stderr, "%s[step %d] %s: %lld tokens in %.2fs\n", *tty ? "\r\033[K" : "", ci->step,
                module_label(ci->module), (long long)ci->completion_tokens, ci->call_ms / 1000.0);
    else if (*tty)
        fprintf(stderr, "\n");
}

static int solve_one(struct run_ctx *rc, const struct run_config *cfg, const char *query,
                     int json_out)
{
    struct af_flow_result res;
    int err = af_flow_solve(&rc->params, NULL, query, &res);
    int code = CLI_OK;
    if (json_out) {
        json_t *j = af_flow_result_json(&res);
        json_object_set_new(j, "config", config_to_json(cfg));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | AF_JSON_REAL_OUT);
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(j);
    } else if (err == AF_OK) {
        char *answer = cli_term_text(stdout, res.answer, 0);
        printf("%s\n", answer);
        free(answer);
    }
    if (err != AF_OK) {
        char *msg = cli_term_text(stderr, res.errmsg ? res.errmsg : af_strerror(err), 0);
        fprintf(stderr, "agentflow run: %s\n", msg);
        free(msg);
        code = cli_exit_for(err);
    }
    af_flow_result_deinit(&res);
    if (run_trace_check(rc) != CLI_OK && code == CLI_OK)
        code = CLI_EINPUT;
    return code;
}

int cmd_run(int argc, char **argv)
{
    struct cmd_run_args a;
    memset(&a, 0, sizeof a);
    run_args_init(&a.common);
    a.concurrency = 4;
    struct run_config cfg;
    config_init(&cfg);
    struct run_ctx rc;
    memset(&rc, 0, sizeof rc);
    char err[1024];
    int code = parse_args(argc, argv, &a);
    if (code != 0) {
        code = code > 0 ? CLI_OK : CLI_EUSAGE;
        goto out;
    }
    if (!a.batch_in && optind != argc - 1) {
        fprintf(stderr, "agentflow run: expected one QUERY argument (or --batch FILE)\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if (a.batch_in && (!a.batch_out || optind != argc)) {
        fprintf(stderr, "agentflow run: --batch needs --out OUT.jsonl and no QUERY argument\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if (!a.batch_in && !argv[optind][strspn(argv[optind], " \t\r\n")]) {
        fprintf(stderr, "agentflow run: the query is empty\n");
        code = CLI_EUSAGE;
        goto out;
    }
    if ((code = cli_refuse_same_file("agentflow run", "--batch", a.batch_in, "--out",
                                     a.batch_out)) != CLI_OK)
        goto out;
    if ((code = run_build_config(&a.common, "agentflow run", &cfg)) != CLI_OK)
        goto out;
    if ((code = cli_refuse_same_file("agentflow run", "--batch", a.batch_in, "--trace",
                                     cfg.trace)) != CLI_OK ||
        (code = cli_refuse_same_file("agentflow run", "--out", a.batch_out, "--trace",
                                     cfg.trace)) != CLI_OK)
        goto out;
    if ((code = run_ctx_open(&rc, &cfg)) != CLI_OK)
        goto out;
    if (a.common.cache_path && !a.common.no_cache &&
        run_ctx_enable_cache(&rc, a.common.cache_path, a.common.cache_all ? AF_LLM_CACHE_ALL : 0,
                             err, sizeof err) != AF_OK) {
        fprintf(stderr, "agentflow run: --cache: %s\n", err);
        code = CLI_EINPUT;
        goto out;
    }
    int stderr_tty = isatty(2); /* outlives every solve: they run inside this function */
    if (!a.quiet) {
        rc.params.on_step = on_step;
        rc.params.user = &stderr_tty;
        if (!a.batch_in) /* concurrent solves would interleave their calls */
            rc.params.on_call = on_call;
    }
    if (a.batch_in)
        code = batch_run(&rc, a.batch_in, a.batch_out, a.concurrency, a.quiet);
    else
        code = solve_one(&rc, &cfg, argv[optind], a.json_out);
out:
    run_ctx_close(&rc);
    config_deinit(&cfg);
    run_args_deinit(&a.common);
    return code;
}
